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
    {NET_OP_STATS, "stats", false, "Head seq, counts, inbox size, map use.", {{NULL}}},
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
        char detail[64];
        snprintf(detail, sizeof(detail), "%.*s", (int)(name.len > 40 ? 40 : name.len), name.ptr);
        if (j == fs->count)
            return fail(req, TALLY_unknown_field, detail);
        if (fs->values[j])
            return fail(req, TALLY_duplicate_field, detail);
        int rc = check_value(fs->fields[j], &m->via.map.ptr[i].val);
        if (rc != TALLY_ok)
            return fail(req, rc, detail);
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
    else if (f->type == NET_FIELD_OPS)
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
        fprintf(out, "### `%s` (%s)\n\n%s\n\n", op->name, op->write ? "write" : "read", op->doc);
        fprintf(out, "| field | type | required | limit | meaning |\n|---|---|---|---|---|\n");
        field_set fs;
        field_set_build(&fs, op, MEMBER_TOP);
        for (unsigned j = 0; j < fs.count; j++)
            print_field(out, fs.fields[j]);
        fprintf(out, "\n");
    }
    fprintf(out, "<!-- generated by tallyd --protocol-reference: end -->\n");
}
