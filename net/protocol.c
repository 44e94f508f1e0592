/*
 * protocol.c — the op table and the request decoder.
 *
 * Decoding is table-driven: the top-level map and every member map of a
 * chain or batch are checked field by field against the op's entry in
 * net_ops (unknown, duplicate, missing, wrong type, out of range) before a
 * ledger command is built from the values. Nothing is trusted: the bytes
 * pass msgpack_safe_unpack first (counts checked against the bytes left).
 */
#include "net/protocol.h"

#include "common/error.h"
#include "common/msgpack_safe.h"

#include <inttypes.h>
#include <string.h>

#define U16 UINT16_MAX
#define U32 UINT32_MAX
#define U64 UINT64_MAX

#define F_ACCOUNT_ID(n, d) {n, NET_FIELD_UINT, true, U64, d}
#define F_SUBJECT {"subject", NET_FIELD_STR, true, TALLY_SUBJECT_BYTES_MAX, "who has access (1-128 bytes)"}
#define F_FEATURE {"feature", NET_FIELD_STR, true, TALLY_FEATURE_BYTES_MAX, "what they have access to (1-64 bytes)"}
#define F_ORDER {"source_order", NET_FIELD_UINT, false, U64, "provider's ordering value (sequence or event time); a command not newer than the last applied is `stale`"}
#define F_UNTIL {"valid_until_ms", NET_FIELD_INT, false, 0, "end of validity, Unix ms"}
#define F_SUB_NAME {"name", NET_FIELD_STR, true, TALLY_SUBSCRIBER_NAME_BYTES_MAX, "subscriber name: 1-64 bytes of A-Z a-z 0-9 . _ -"}
#define F_SUB_SEQ(d) {"seq", NET_FIELD_UINT, true, U64, d}
#define F_DURATION {"duration_ms", NET_FIELD_INT, false, 0, "validity from the commit time (grant) or from the current end (extend), ms"}

const net_op net_ops[NET_OP_COUNT] = {
    {NET_OP_ACCOUNT_OPEN, "account_open", true, "Open an account.",
     {F_ACCOUNT_ID("id", "account id, != 0"),
      {"ledger", NET_FIELD_UINT, true, U32, "ledger, != 0"},
      {"code", NET_FIELD_UINT, true, U16, "account code, != 0"},
      {"flags", NET_FIELD_UINT, false, U16,
       "bit 0 debits_must_not_exceed_credits, bit 1 credits_must_not_exceed_debits (default 0)"}}},
    {NET_OP_TRANSFER, "transfer", true, "Move an amount from one account to another, or hold it (flags bit 0).",
     {{"id", NET_FIELD_ID128, true, 16, "transfer id (16 bytes, != 0), unique"},
      F_ACCOUNT_ID("debit_account_id", "account debited"),
      F_ACCOUNT_ID("credit_account_id", "account credited"),
      {"amount", NET_FIELD_AMOUNT, true, INT64_MAX, "1 .. 2^63-1"},
      {"ledger", NET_FIELD_UINT, true, U32, "must equal both accounts' ledger"},
      {"code", NET_FIELD_UINT, true, U16, "transfer code, != 0"},
      {"flags", NET_FIELD_UINT, false, U16, "bit 0 pending: a hold (default 0)"},
      {"timeout_s", NET_FIELD_UINT, false, TALLY_HOLD_TIMEOUT_S_MAX, "holds: expire after this many seconds (0 = never)"}}},
    {NET_OP_POST, "post", true, "Post (capture) a hold, fully or partly.",
     {{"pending_id", NET_FIELD_ID128, true, 16, "the hold's transfer id"},
      {"amount", NET_FIELD_AMOUNT, false, INT64_MAX, "amount to post, <= held (default: all)"}}},
    {NET_OP_VOID, "void", true, "Void a hold.",
     {{"pending_id", NET_FIELD_ID128, true, 16, "the hold's transfer id"}}},
    {NET_OP_GRANT, "grant", true, "Grant an entitlement (for life when neither end nor duration is given).",
     {F_SUBJECT, F_FEATURE, F_UNTIL, F_DURATION, F_ORDER,
      {"grant_transfer_id", NET_FIELD_ID128, false, 16, "the transfer that paid for it (must exist)"}}},
    {NET_OP_EXTEND, "extend", true, "Extend an active or expired entitlement to a later end.",
     {F_SUBJECT, F_FEATURE, F_UNTIL, F_DURATION, F_ORDER}},
    {NET_OP_REVOKE, "revoke", true, "Revoke an entitlement.",
     {F_SUBJECT, F_FEATURE, F_ORDER}},
    {NET_OP_CHAIN, "chain", true, "Apply write ops all-or-nothing under one key.",
     {{"ops", NET_FIELD_OPS, true, TALLY_CHAIN_COMMANDS_MAX, "member op maps: `op` and its fields, no `key`"}}},
    {NET_OP_BATCH, "batch", true, "Several independent writes in one request, each with its own key and result.",
     {{"ops", NET_FIELD_OPS, true, TALLY_BATCH_OPS_MAX, "member op maps: `op`, `key`, optional `correlation`, and the op's fields"}}},
    {NET_OP_ACCOUNT_GET, "account_get", false, "An account with its balances and version.",
     {F_ACCOUNT_ID("id", "account id")}},
    {NET_OP_ACCOUNT_HISTORY, "account_history", false, "An account's transfer events, paged by seq.",
     {F_ACCOUNT_ID("id", "account id"),
      {"after_seq", NET_FIELD_UINT, false, U64, "page cursor: entries after (or with `reverse`, before) this seq"},
      {"limit", NET_FIELD_UINT, false, TALLY_HISTORY_ENTRIES_MAX, "entries (default 100)"},
      {"reverse", NET_FIELD_BOOL, false, 0, "newest first (default false)"}}},
    {NET_OP_TRANSFER_GET, "transfer_get", false, "A transfer or hold.",
     {{"id", NET_FIELD_ID128, true, 16, "transfer id"}}},
    {NET_OP_ENTITLEMENT_GET, "entitlement_get", false, "One entitlement, its state evaluated now.",
     {F_SUBJECT, F_FEATURE}},
    {NET_OP_ENTITLEMENT_LIST, "entitlement_list", false, "A subject's entitlements, states evaluated now.",
     {F_SUBJECT}},
    {NET_OP_LOG_READ, "log_read", false, "Events from a seq, optionally waiting for new ones.",
     {{"from_seq", NET_FIELD_UINT, false, U64, "first seq wanted (default 1)"},
      {"limit", NET_FIELD_UINT, false, TALLY_LOG_READ_EVENTS_MAX, "events (default 100)"},
      {"wait_ms", NET_FIELD_UINT, false, TALLY_LOG_WAIT_MS_MAX, "if none yet, wait up to this long for one (default 0)"}}},
    {NET_OP_STATS, "stats", false, "Head seq, counts, inbox size, map use, subscribers' metrics.", {{NULL}}},
    {NET_OP_SUB_CREATE, "sub_create", false,
     "Create a durable subscriber (an identical one existing is ok, `created` false).",
     {F_SUB_NAME,
      {"start", NET_FIELD_STR, false, 16, "`beginning` (default) or `now`"},
      {"from_seq", NET_FIELD_UINT, false, U64, "start at this seq (1 .. head + 1)"},
      {"from_time_ms", NET_FIELD_INT, false, 0, "start at the first event committed at or after this Unix ms"},
      {"max_deliver", NET_FIELD_UINT, false, TALLY_SUB_MAX_DELIVER_MAX, "deliveries of an event before it is parked, >= 1 (default 5)"},
      {"ack_wait_ms", NET_FIELD_UINT, false, TALLY_SUB_ACK_WAIT_MS_MAX, "redelivery delay of an unacked event, >= 100 (default 30000)"},
      {"backoff_ms", NET_FIELD_UINTS, false, TALLY_SUB_BACKOFF_STEPS_MAX, "redelivery delay after the n-th delivery (the last repeats); replaces ack_wait_ms; each <= 86400000"},
      {"max_ack_pending", NET_FIELD_UINT, false, TALLY_SUB_MAX_ACK_PENDING_MAX, "events in flight at most, >= 1 (default 1000)"}},
     true},
    {NET_OP_SUB_GET, "sub_get", false, "A subscriber's metrics.", {F_SUB_NAME}},
    {NET_OP_SUB_LIST, "sub_list", false, "Every subscriber's metrics, in name order.", {{NULL}}},
    {NET_OP_SUB_DELETE, "sub_delete", false,
     "Delete a subscriber with its in-flight records and dead letters.", {F_SUB_NAME}, true},
    {NET_OP_SUB_FETCH, "sub_fetch", false,
     "Deliver events: replays, then due redeliveries, then new events.",
     {F_SUB_NAME,
      {"max", NET_FIELD_UINT, false, TALLY_SUB_FETCH_EVENTS_MAX, "events, >= 1 (default 100)"},
      {"wait_ms", NET_FIELD_UINT, false, TALLY_LOG_WAIT_MS_MAX, "if none is due, wait up to this long (default 0)"},
      {"restart", NET_FIELD_BOOL, false, 0, "every in-flight event is due now (a consumer's first fetch; default false)"}},
     true},
    {NET_OP_SUB_ACK, "sub_ack", false, "Acknowledge events: `seq` (everything up to it) and/or `done`.",
     {F_SUB_NAME,
      {"seq", NET_FIELD_UINT, false, U64, "every event <= seq is done (<= head)"},
      {"done", NET_FIELD_UINTS, false, TALLY_SUB_ACK_SEQS_MAX, "these delivered seqs are done"}},
     true},
    {NET_OP_SUB_NAK, "sub_nak", false, "Retry an in-flight event later.",
     {F_SUB_NAME, F_SUB_SEQ("the in-flight event"),
      {"delay_ms", NET_FIELD_UINT, false, TALLY_SUB_ACK_WAIT_MS_MAX, "due again after this long (default: the backoff rule)"},
      {"error", NET_FIELD_STR, false, TALLY_SUB_ERROR_BYTES_MAX, "why; kept as the event's last error"}},
     true},
    {NET_OP_SUB_PARK, "sub_park", false, "Move an in-flight event to the dead-letter queue.",
     {F_SUB_NAME, F_SUB_SEQ("the in-flight event"),
      {"reason", NET_FIELD_STR, false, TALLY_SUB_ERROR_BYTES_MAX, "why"}},
     true},
    {NET_OP_DLQ_LIST, "dlq_list", false, "A subscriber's dead letters, paged by seq.",
     {F_SUB_NAME,
      {"after_seq", NET_FIELD_UINT, false, U64, "page cursor: entries after this seq (default 0)"},
      {"limit", NET_FIELD_UINT, false, TALLY_DLQ_LIST_ENTRIES_MAX, "entries, >= 1 (default 100)"}}},
    {NET_OP_DLQ_REPLAY, "dlq_replay", false, "Deliver dead letters again, ahead of new events.",
     {F_SUB_NAME, {"seq", NET_FIELD_UINT, false, U64, "this dead letter (default: all)"}}, true},
    {NET_OP_DLQ_DISCARD, "dlq_discard", false, "Remove a dead letter.",
     {F_SUB_NAME, F_SUB_SEQ("the dead letter")}, true},
    {NET_OP_BACKUP, "backup", false,
     "An online, compacting, consistent copy of the store into a new directory on the server's machine (docs/OPERATIONS.md).",
     {{"path", NET_FIELD_STR, true, TALLY_PATH_BYTES_MAX - 1, "absolute path of a directory that does not exist yet (below tallyd's --backup-dir when set)"}}},
};

/* Fields every request or member may carry besides the op's own. */
typedef enum member_kind { MEMBER_TOP, MEMBER_BATCH, MEMBER_CHAIN } member_kind;

static const net_field field_v = {"v", NET_FIELD_UINT, true, U32, "protocol version, 1"};
static const net_field field_op = {"op", NET_FIELD_STR, true, TALLY_FIELD_NAME_BYTES_MAX, "op name"};
static const net_field field_consumer = {"consumer", NET_FIELD_STR, true, TALLY_CONSUMER_BYTES_MAX,
                                         "writes: the caller's namespace for keys (1-64 bytes)"};
static const net_field field_key = {"key", NET_FIELD_STR, true, TALLY_KEY_BYTES_MAX,
                                    "writes: idempotency key (1-128 bytes)"};
static const net_field field_correlation = {"correlation", NET_FIELD_STR, false,
                                            TALLY_CORRELATION_BYTES_MAX,
                                            "writes: copied into the events (0-64 bytes)"};

#define FIELDS_MAX (NET_OP_FIELDS_MAX + 5)

typedef struct field_set {
    const net_field *fields[FIELDS_MAX];
    const msgpack_object *values[FIELDS_MAX];
    unsigned count;
} field_set;

const net_op *net_op_find(tally_str name)
{
    for (int i = 0; i < NET_OP_COUNT; i++)
        if (tally_str_equal(name, tally_str_from(net_ops[i].name)))
            return &net_ops[i];
    return NULL;
}

static void field_set_build(field_set *fs, const net_op *op, member_kind kind)
{
    memset(fs, 0, sizeof(*fs));
    if (kind == MEMBER_TOP)
        fs->fields[fs->count++] = &field_v;
    fs->fields[fs->count++] = &field_op;
    bool batch_top = kind == MEMBER_TOP && op->id == NET_OP_BATCH;
    if (op->write && kind == MEMBER_TOP)
        fs->fields[fs->count++] = &field_consumer;
    if (op->write && (kind == MEMBER_BATCH || (kind == MEMBER_TOP && !batch_top)))
        fs->fields[fs->count++] = &field_key;
    if (op->write && kind != MEMBER_CHAIN && !batch_top)
        fs->fields[fs->count++] = &field_correlation;
    for (int i = 0; i < NET_OP_FIELDS_MAX && op->fields[i].name; i++)
        fs->fields[fs->count++] = &op->fields[i];
}

static int fail(net_request *req, int code, const char *detail)
{
    req->error = code;
    snprintf(req->error_detail, sizeof(req->error_detail), "%s", detail ? detail : "");
    return code;
}

/* The code for a value beyond f's limit: the specific one where the error
 * enum has one for that field, else value_out_of_range. */
static int over_limit(const net_field *f)
{
    static const struct {
        const char *field;
        int code;
    } specific[] = {
        {"consumer", TALLY_consumer_too_long},   {"key", TALLY_key_too_long},
        {"correlation", TALLY_correlation_too_long}, {"subject", TALLY_subject_too_long},
        {"feature", TALLY_feature_too_long},     {"amount", TALLY_amount_overflows},
        {"timeout_s", TALLY_timeout_too_large},  {"valid_until_ms", TALLY_time_out_of_range},
        {"duration_ms", TALLY_duration_out_of_range},
    };
    for (size_t i = 0; i < sizeof(specific) / sizeof(specific[0]); i++)
        if (strcmp(f->name, specific[i].field) == 0)
            return specific[i].code;
    return TALLY_value_out_of_range;
}

static int check_value(const net_field *f, const msgpack_object *o)
{
    switch (f->type) {
    case NET_FIELD_UINT:
        if (o->type == MSGPACK_OBJECT_NEGATIVE_INTEGER)
            return TALLY_value_out_of_range;
        if (o->type != MSGPACK_OBJECT_POSITIVE_INTEGER)
            return TALLY_wrong_type;
        return o->via.u64 <= f->max ? TALLY_ok : over_limit(f);
    case NET_FIELD_AMOUNT:
    case NET_FIELD_INT:
        if (o->type == MSGPACK_OBJECT_NEGATIVE_INTEGER)
            return TALLY_ok;
        if (o->type != MSGPACK_OBJECT_POSITIVE_INTEGER)
            return TALLY_wrong_type;
        return o->via.u64 <= INT64_MAX ? TALLY_ok : over_limit(f);
    case NET_FIELD_STR:
        if (o->type != MSGPACK_OBJECT_STR)
            return TALLY_wrong_type;
        return o->via.str.size <= f->max ? TALLY_ok : over_limit(f);
    case NET_FIELD_ID128:
        return o->type == MSGPACK_OBJECT_BIN && o->via.bin.size == 16 ? TALLY_ok
                                                                       : TALLY_wrong_type;
    case NET_FIELD_BOOL:
        return o->type == MSGPACK_OBJECT_BOOLEAN ? TALLY_ok : TALLY_wrong_type;
    case NET_FIELD_OPS:
        if (o->type != MSGPACK_OBJECT_ARRAY)
            return TALLY_wrong_type;
        return o->via.array.size <= f->max ? TALLY_ok : TALLY_too_many_operations;
    case NET_FIELD_UINTS:
        if (o->type != MSGPACK_OBJECT_ARRAY)
            return TALLY_wrong_type;
        if (o->via.array.size > f->max)
            return TALLY_value_out_of_range;
        for (uint32_t i = 0; i < o->via.array.size; i++) {
            const msgpack_object *e = &o->via.array.ptr[i];
            if (e->type == MSGPACK_OBJECT_NEGATIVE_INTEGER)
                return TALLY_value_out_of_range;
            if (e->type != MSGPACK_OBJECT_POSITIVE_INTEGER)
                return TALLY_wrong_type;
        }
        return TALLY_ok;
    }
    return TALLY_internal;
}

/* Match every entry of map m to a field of fs; check types and presence. */
static int match_fields(net_request *req, field_set *fs, const msgpack_object *m)
{
    if (m->type != MSGPACK_OBJECT_MAP)
        return fail(req, TALLY_malformed_request, "a request and each member is a map");
    for (uint32_t i = 0; i < m->via.map.size; i++) {
        const msgpack_object *k = &m->via.map.ptr[i].key;
        if (k->type != MSGPACK_OBJECT_STR)
            return fail(req, TALLY_wrong_type, "field names are strings");
        tally_str name = {k->via.str.ptr, k->via.str.size};
        unsigned j = 0;
        while (j < fs->count && !tally_str_equal(name, tally_str_from(fs->fields[j]->name)))
            j++;
        int rc = j == fs->count   ? TALLY_unknown_field
                 : fs->values[j] ? TALLY_duplicate_field
                                 : check_value(fs->fields[j], &m->via.map.ptr[i].val);
        if (rc != TALLY_ok) { /* the detail is formatted only for a refusal */
            char detail[64];
            snprintf(detail, sizeof(detail), "%.*s", (int)(name.len > 40 ? 40 : name.len), name.ptr);
            return fail(req, rc, detail);
        }
        fs->values[j] = &m->via.map.ptr[i].val;
    }
    for (unsigned j = 0; j < fs->count; j++)
        if (fs->fields[j]->required && !fs->values[j])
            return fail(req, TALLY_missing_field, fs->fields[j]->name);
    return TALLY_ok;
}

static const msgpack_object *value_of(const field_set *fs, const char *name)
{
    for (unsigned j = 0; j < fs->count; j++)
        if (strcmp(fs->fields[j]->name, name) == 0)
            return fs->values[j];
    return NULL;
}

static uint64_t get_u64(const field_set *fs, const char *name, uint64_t dflt)
{
    const msgpack_object *o = value_of(fs, name);
    return o ? o->via.u64 : dflt;
}

static int64_t get_i64(const field_set *fs, const char *name)
{
    const msgpack_object *o = value_of(fs, name);
    if (!o)
        return 0;
    return o->type == MSGPACK_OBJECT_NEGATIVE_INTEGER ? o->via.i64 : (int64_t)o->via.u64;
}

static tally_str get_str(const field_set *fs, const char *name)
{
    const msgpack_object *o = value_of(fs, name);
    return o ? (tally_str){o->via.str.ptr, o->via.str.size} : (tally_str){NULL, 0};
}

static bool get_id(const field_set *fs, const char *name, tally_id128 *out)
{
    const msgpack_object *o = value_of(fs, name);
    memset(out, 0, sizeof(*out));
    if (!o)
        return false;
    memcpy(out->bytes, o->via.bin.ptr, 16);
    return true;
}

static void build_entitlement(const field_set *fs, ledger_entitlement_command *e)
{
    e->subject = get_str(fs, "subject");
    e->feature = get_str(fs, "feature");
    e->valid_until_ms = get_i64(fs, "valid_until_ms");
    e->duration_ms = get_i64(fs, "duration_ms");
    e->has_source_order = value_of(fs, "source_order") != NULL;
    e->source_order = get_u64(fs, "source_order", 0);
    e->has_grant_transfer = get_id(fs, "grant_transfer_id", &e->grant_transfer_id);
}

/* Build the ledger command of a single write op from its checked fields. */
static void build_command(const net_op *op, const field_set *fs, ledger_command *c)
{
    memset(c, 0, sizeof(*c));
    switch (op->id) {
    case NET_OP_ACCOUNT_OPEN:
        c->kind = LEDGER_ACCOUNT_OPEN;
        c->u.account_open = (ledger_account_open){
            .id = get_u64(fs, "id", 0), .ledger = (uint32_t)get_u64(fs, "ledger", 0),
            .code = (uint16_t)get_u64(fs, "code", 0), .flags = (uint16_t)get_u64(fs, "flags", 0)};
        break;
    case NET_OP_TRANSFER:
        c->kind = LEDGER_TRANSFER;
        get_id(fs, "id", &c->u.transfer.id);
        c->u.transfer.debit_account_id = get_u64(fs, "debit_account_id", 0);
        c->u.transfer.credit_account_id = get_u64(fs, "credit_account_id", 0);
        c->u.transfer.amount = get_i64(fs, "amount");
        c->u.transfer.ledger = (uint32_t)get_u64(fs, "ledger", 0);
        c->u.transfer.code = (uint16_t)get_u64(fs, "code", 0);
        c->u.transfer.flags = (uint16_t)get_u64(fs, "flags", 0);
        c->u.transfer.timeout_s = (uint32_t)get_u64(fs, "timeout_s", 0);
        break;
    case NET_OP_POST:
    case NET_OP_VOID:
        c->kind = op->id == NET_OP_POST ? LEDGER_POST : LEDGER_VOID;
        get_id(fs, "pending_id", &c->u.hold.pending_id);
        c->u.hold.amount = get_i64(fs, "amount");
        break;
    case NET_OP_GRANT:
    case NET_OP_EXTEND:
    case NET_OP_REVOKE:
        c->kind = op->id == NET_OP_GRANT    ? LEDGER_GRANT
                  : op->id == NET_OP_EXTEND ? LEDGER_EXTEND
                                            : LEDGER_REVOKE;
        build_entitlement(fs, &c->u.entitlement);
        break;
    default:
        c->kind = 0; /* not a single write */
    }
}

static const net_op *member_op(net_request *req, const msgpack_object *m)
{
    tally_str name;
    if (m->type != MSGPACK_OBJECT_MAP)
        return fail(req, TALLY_malformed_request, "each member is a map"), NULL;
    const msgpack_object *op_obj = msgpack_safe_map_get(m, "op");
    if (!op_obj)
        return fail(req, TALLY_missing_field, "op"), NULL;
    if (!msgpack_safe_get_str(op_obj, &name))
        return fail(req, TALLY_wrong_type, "op"), NULL;
    const net_op *op = net_op_find(name);
    if (!op)
        return fail(req, TALLY_unknown_op, "member op"), NULL;
    if (!op->write || op->id == NET_OP_CHAIN || op->id == NET_OP_BATCH)
        return fail(req, TALLY_unknown_op, "members are single write ops"), NULL;
    return op;
}

static int decode_members(net_request *req, const net_op *op, const msgpack_object *ops,
                          tally_str correlation)
{
    uint32_t n = ops->via.array.size;
    if (n == 0 && op->id == NET_OP_BATCH)
        return fail(req, TALLY_value_out_of_range, "ops");
    bool chain = op->id == NET_OP_CHAIN;
    for (uint32_t i = 0; i < n; i++) {
        const net_op *mop = member_op(req, &ops->via.array.ptr[i]);
        if (!mop)
            return req->error;
        field_set fs;
        field_set_build(&fs, mop, chain ? MEMBER_CHAIN : MEMBER_BATCH);
        int rc = match_fields(req, &fs, &ops->via.array.ptr[i]);
        if (rc != TALLY_ok)
            return rc;
        if (chain) {
            build_command(mop, &fs, &req->chain_members[i]);
            continue;
        }
        ledger_request *w = &req->writes[i];
        w->consumer = req->consumer;
        w->key = get_str(&fs, "key");
        w->correlation = value_of(&fs, "correlation") ? get_str(&fs, "correlation") : correlation;
        build_command(mop, &fs, &w->command);
    }
    if (chain) {
        req->writes[0].command.kind = LEDGER_CHAIN;
        req->writes[0].command.u.chain = (ledger_chain){req->chain_members, n};
    } else {
        req->write_count = n;
    }
    return TALLY_ok;
}

static void build_read(net_request *req, const field_set *fs)
{
    net_read *r = &req->read;
    memset(r, 0, sizeof(*r));
    r->account_id = get_u64(fs, "id", 0);
    if (req->op->id == NET_OP_TRANSFER_GET)
        get_id(fs, "id", &r->transfer_id);
    r->subject = get_str(fs, "subject");
    r->feature = get_str(fs, "feature");
    r->after_seq = get_u64(fs, "after_seq", 0);
    const msgpack_object *rev = value_of(fs, "reverse");
    r->reverse = rev && rev->via.boolean;
    uint64_t dflt = req->op->id == NET_OP_LOG_READ ? TALLY_LOG_READ_EVENTS_DEFAULT
                                                   : TALLY_HISTORY_ENTRIES_DEFAULT;
    r->limit = (uint32_t)get_u64(fs, "limit", dflt);
    r->from_seq = get_u64(fs, "from_seq", 1);
    r->wait_ms = (uint32_t)get_u64(fs, "wait_ms", 0);
    r->path = get_str(fs, "path");
}

/* Subscriber ops: values the table cannot bound (minimums, choices). */
static int build_sub(net_request *req, const field_set *fs)
{
    net_sub *u = &req->sub;
    memset(u, 0, sizeof(*u));
    u->name = get_str(fs, "name");
    if (req->op->id != NET_OP_SUB_LIST && sub_name_check(u->name) != TALLY_ok)
        return fail(req, TALLY_invalid_subscriber_name, "1-64 bytes of A-Z a-z 0-9 . _ -");
    const msgpack_object *start = value_of(fs, "start"), *from_seq = value_of(fs, "from_seq"),
                         *from_time = value_of(fs, "from_time_ms");
    if ((start != NULL) + (from_seq != NULL) + (from_time != NULL) > 1)
        return fail(req, TALLY_start_positions_are_mutually_exclusive, "start, from_seq, from_time_ms");
    u->start.kind = SUB_START_BEGINNING;
    if (start) {
        tally_str st = get_str(fs, "start");
        if (tally_str_equal(st, tally_str_from("now")))
            u->start.kind = SUB_START_NOW;
        else if (!tally_str_equal(st, tally_str_from("beginning")))
            return fail(req, TALLY_value_out_of_range, "start: beginning or now");
    } else if (from_seq) {
        u->start = (sub_start){SUB_START_SEQ, get_u64(fs, "from_seq", 0), 0};
        if (u->start.seq == 0)
            return fail(req, TALLY_value_out_of_range, "from_seq: seqs start at 1");
    } else if (from_time) {
        u->start = (sub_start){SUB_START_TIME, 0, get_i64(fs, "from_time_ms")};
        if (u->start.time_ms < 0 || u->start.time_ms > TALLY_TIME_MS_MAX)
            return fail(req, TALLY_time_out_of_range, "from_time_ms");
    }
    sub_config_default(&u->config);
    u->config.max_deliver = (uint32_t)get_u64(fs, "max_deliver", u->config.max_deliver);
    u->config.ack_wait_ms = (uint32_t)get_u64(fs, "ack_wait_ms", u->config.ack_wait_ms);
    u->config.max_ack_pending = (uint32_t)get_u64(fs, "max_ack_pending", u->config.max_ack_pending);
    if (u->config.max_deliver < 1)
        return fail(req, TALLY_value_out_of_range, "max_deliver: at least 1");
    if (u->config.ack_wait_ms < TALLY_SUB_ACK_WAIT_MS_MIN)
        return fail(req, TALLY_value_out_of_range, "ack_wait_ms: at least 100");
    if (u->config.max_ack_pending < 1)
        return fail(req, TALLY_value_out_of_range, "max_ack_pending: at least 1");
    const msgpack_object *backoff = value_of(fs, "backoff_ms");
    for (uint32_t i = 0; backoff && i < backoff->via.array.size; i++) {
        uint64_t ms = backoff->via.array.ptr[i].via.u64;
        if (ms > TALLY_SUB_ACK_WAIT_MS_MAX)
            return fail(req, TALLY_value_out_of_range, "backoff_ms: each at most 86400000");
        u->config.backoff_ms[u->config.backoff_count++] = (uint32_t)ms;
    }
    u->max = (uint32_t)get_u64(fs, "max", TALLY_SUB_FETCH_EVENTS_DEFAULT);
    u->limit = (uint32_t)get_u64(fs, "limit", TALLY_DLQ_LIST_ENTRIES_DEFAULT);
    if (u->max == 0 || u->limit == 0)
        return fail(req, TALLY_value_out_of_range, u->max == 0 ? "max: at least 1" : "limit: at least 1");
    u->wait_ms = (uint32_t)get_u64(fs, "wait_ms", 0);
    const msgpack_object *restart = value_of(fs, "restart");
    u->restart = restart && restart->via.boolean;
    const msgpack_object *seq = value_of(fs, "seq");
    u->seq = get_u64(fs, "seq", 0);
    if (seq && u->seq == 0)
        return fail(req, TALLY_value_out_of_range, "seq: seqs start at 1");
    const msgpack_object *done = value_of(fs, "done");
    for (uint32_t i = 0; done && i < done->via.array.size; i++) {
        u->done[u->done_count] = done->via.array.ptr[i].via.u64;
        if (u->done[u->done_count++] == 0)
            return fail(req, TALLY_value_out_of_range, "done: seqs start at 1");
    }
    if (req->op->id == NET_OP_SUB_ACK && !seq && u->done_count == 0)
        return fail(req, TALLY_missing_field, "seq or done");
    u->has_delay = value_of(fs, "delay_ms") != NULL;
    u->delay_ms = (uint32_t)get_u64(fs, "delay_ms", 0);
    u->text = value_of(fs, "error") ? get_str(fs, "error") : get_str(fs, "reason");
    u->after_seq = get_u64(fs, "after_seq", 0);
    return TALLY_ok;
}

static bool is_sub_op(const net_op *op)
{
    return op->id >= NET_OP_SUB_CREATE && op->id <= NET_OP_DLQ_DISCARD;
}

void net_request_init(net_request *req)
{
    memset(req, 0, sizeof(*req));
}

void net_request_reset(net_request *req)
{
    if (req->unpacked_live)
        msgpack_unpacked_destroy(&req->unpacked);
    req->unpacked_live = false;
    req->op = NULL;
    req->error = TALLY_ok;
    req->error_detail[0] = '\0';
    req->consumer = (tally_str){NULL, 0};
    req->write_count = 0;
    memset(&req->writes[0], 0, sizeof(req->writes[0]));
}

static int decode_top(net_request *req, const msgpack_object *m)
{
    tally_str name;
    if (m->type != MSGPACK_OBJECT_MAP)
        return fail(req, TALLY_malformed_request, "a request is a msgpack map");
    const msgpack_object *v = msgpack_safe_map_get(m, "v");
    bool v_int = v && (v->type == MSGPACK_OBJECT_POSITIVE_INTEGER ||
                       v->type == MSGPACK_OBJECT_NEGATIVE_INTEGER);
    if (v_int && !(v->type == MSGPACK_OBJECT_POSITIVE_INTEGER && v->via.u64 == TALLY_PROTOCOL_VERSION))
        return fail(req, TALLY_unsupported_version, "this server speaks v 1");
    const msgpack_object *op_obj = msgpack_safe_map_get(m, "op");
    if (!op_obj)
        return fail(req, TALLY_missing_field, "op");
    if (!msgpack_safe_get_str(op_obj, &name))
        return fail(req, TALLY_wrong_type, "op");
    req->op = net_op_find(name);
    if (!req->op)
        return fail(req, TALLY_unknown_op, "see docs/PROTOCOL.md for the ops");
    field_set fs;
    field_set_build(&fs, req->op, MEMBER_TOP);
    int rc = match_fields(req, &fs, m);
    if (rc != TALLY_ok)
        return rc;
    if (is_sub_op(req->op))
        return build_sub(req, &fs);
    if (!req->op->write) {
        build_read(req, &fs);
        return TALLY_ok;
    }
    req->consumer = get_str(&fs, "consumer");
    tally_str correlation = get_str(&fs, "correlation");
    const msgpack_object *ops = value_of(&fs, "ops");
    ledger_request *w = &req->writes[0];
    w->consumer = req->consumer;
    w->key = get_str(&fs, "key");
    w->correlation = correlation;
    req->write_count = 1;
    if (ops)
        return decode_members(req, req->op, ops, correlation);
    build_command(req->op, &fs, &w->command);
    return TALLY_ok;
}

int net_request_decode(net_request *req, const void *bytes, size_t len)
{
    net_request_reset(req);
    if (len > TALLY_REQUEST_BYTES_MAX)
        return fail(req, TALLY_request_too_large, "requests are at most 512 KiB");
    msgpack_unpacked_init(&req->unpacked);
    req->unpacked_live = true;
    int rc = msgpack_safe_unpack(bytes, len, TALLY_MSGPACK_DEPTH_MAX, &req->unpacked);
    if (rc == TALLY_out_of_memory)
        return fail(req, TALLY_overloaded, "out of memory decoding");
    if (rc != TALLY_ok)
        return fail(req, TALLY_malformed_request,
                    "not one whole msgpack object (truncated, trailing bytes, counts beyond the bytes, nested > 16)");
    return decode_top(req, &req->unpacked.data);
}

static const char *type_name(net_field_type t)
{
    switch (t) {
    case NET_FIELD_UINT: return "uint";
    case NET_FIELD_AMOUNT: return "int";
    case NET_FIELD_INT: return "int";
    case NET_FIELD_STR: return "str";
    case NET_FIELD_ID128: return "bin 16";
    case NET_FIELD_BOOL: return "bool";
    case NET_FIELD_OPS: return "array";
    case NET_FIELD_UINTS: return "array of uint";
    }
    return "?";
}

static void print_field(FILE *out, const net_field *f)
{
    char limit[48] = "";
    if (f->type == NET_FIELD_UINT || f->type == NET_FIELD_AMOUNT)
        snprintf(limit, sizeof(limit), "≤ %" PRIu64, f->max);
    else if (f->type == NET_FIELD_STR)
        snprintf(limit, sizeof(limit), "≤ %" PRIu64 " bytes", f->max);
    else if (f->type == NET_FIELD_OPS || f->type == NET_FIELD_UINTS)
        snprintf(limit, sizeof(limit), "≤ %" PRIu64 " members", f->max);
    fprintf(out, "| `%s` | %s | %s | %s | %s |\n", f->name, type_name(f->type),
            f->required ? "yes" : "no", limit, f->doc);
}

static void print_error_table(FILE *out)
{
    static const char cls[] = {'B', 'V', 'R', 'F'};
    fprintf(out, "| code | number | class |\n|---|---|---|\n");
    for (int n = 0; n < 256; n++) {
        const char *name = tally_strerror(n);
        if (strcmp(name, "unknown_error") != 0)
            fprintf(out, "| `%s` | %d | %c |\n", name, n, cls[tally_error_class_of(n)]);
    }
    fprintf(out, "\n");
}

void net_protocol_reference(FILE *out)
{
    fprintf(out, "<!-- generated by tallyd --protocol-reference: begin -->\n\n");
    fprintf(out, "### Error codes\n\n");
    print_error_table(out);
    for (int i = 0; i < NET_OP_COUNT; i++) {
        const net_op *op = &net_ops[i];
        const char *kind = op->write ? "write" : op->control ? "subscriber write" : "read";
        fprintf(out, "### `%s` (%s)\n\n%s\n\n", op->name, kind, op->doc);
        fprintf(out, "| field | type | required | limit | meaning |\n|---|---|---|---|---|\n");
        field_set fs;
        field_set_build(&fs, op, MEMBER_TOP);
        for (unsigned j = 0; j < fs.count; j++)
            print_field(out, fs.fields[j]);
        fprintf(out, "\n");
    }
    fprintf(out, "<!-- generated by tallyd --protocol-reference: end -->\n");
}
