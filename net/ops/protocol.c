/*
 * protocol.c — the request decoder, driven by the op table.
 *
 * Decoding is table-driven: the top-level map and every member map of a
 * chain or batch are checked field by field against the op's row in
 * net_ops (unknown, duplicate, missing, wrong type, out of range); the
 * values then go into the op's struct of fields (net/ops/op_fields.h) at
 * the offsets the rows give, and the row's builder makes a request of the
 * struct. Nothing is trusted: the bytes pass msgpack_safe_unpack first
 * (counts checked against the bytes left).
 */
#include "net/ops/protocol.h"

#include "net/ops/ops.h"

#include "common/error.h"
#include "common/limits.h"
#include "common/msgpack_safe.h"
#include "common/sha256.h"

#include <assert.h>
#include <inttypes.h>
#include <string.h>

/* Fields every request or member may carry besides the op's own: the
 * envelope, declared like an op's fields (net/ops/op_fields.h). */
typedef enum member_kind { MEMBER_TOP, MEMBER_BATCH, MEMBER_CHAIN } member_kind;

#define ENVELOPE_FIELDS(F, T)                                                                 \
    F(T, UINT, v, REQUIRED, UINT32_MAX, "protocol version, 1")                                \
    F(T, STR, op, REQUIRED, TALLY_FIELD_NAME_BYTES_MAX, "op name")                            \
    F(T, STR, auth, OPTIONAL, AUTH_TOKEN_BYTES_MAX,                                           \
      "the caller's token when tallyd runs with --auth (at most 256 bytes; never logged or " \
      "stored; without --auth only its type and length are checked)")                   \
    F(T, STR, consumer, REQUIRED, TALLY_CONSUMER_BYTES_MAX,                                   \
      "writes: the caller's namespace for keys (1-64 bytes)")                                 \
    F(T, STR, key, REQUIRED, TALLY_KEY_BYTES_MAX, "writes: idempotency key (1-128 bytes)")    \
    F(T, STR, correlation, OPTIONAL, TALLY_CORRELATION_BYTES_MAX,                             \
      "writes: copied into the events (0-64 bytes)")                                          \
    F(T, UINT, min_seq, OPTIONAL, UINT64_MAX,                                                 \
      "reads: answer once this node has applied this cluster position (the cluster_seq of a " \
      "reply; single-node: once the log's head seq reaches it), waiting up to "               \
      "--cluster-read-wait-ms, else not_caught_up (docs/CLUSTER.md)")

typedef struct envelope {
    ENVELOPE_FIELDS(NET_FIELD_MEMBER, envelope)
} envelope;

#define ENVELOPE_INDEX(T, type, name, presence, max, doc) ENVELOPE_##name,
enum { ENVELOPE_FIELDS(ENVELOPE_INDEX, envelope) ENVELOPE_COUNT };
#undef ENVELOPE_INDEX

static const net_field envelope_fields[ENVELOPE_COUNT] = {ENVELOPE_FIELDS(NET_FIELD_ROW, envelope)};

const net_field *net_read_min_seq_field(void)
{
    return &envelope_fields[ENVELOPE_min_seq];
}

#define FIELDS_MAX (NET_OP_FIELDS_MAX + ENVELOPE_COUNT)

/* The fields a map may carry, with where each value goes: the envelope's
 * or the op's struct. */
typedef struct field_set {
    const net_field *fields[FIELDS_MAX];
    const msgpack_object *values[FIELDS_MAX];
    char *dest[FIELDS_MAX];
    unsigned count;
} field_set;

const net_op *net_op_find(tally_str name)
{
    for (int i = 0; i < NET_OP_COUNT; i++)
        if (tally_str_equal(name, tally_str_from(net_ops[i].name)))
            return &net_ops[i];
    return NULL;
}

const char *net_op_kind_name(net_op_kind kind)
{
    switch (kind) {
    case NET_KIND_READ: return "read";
    case NET_KIND_WRITE: return "write";
    case NET_KIND_SUBSCRIBER: return "subscriber write";
    case NET_KIND_CONTROL: return "control";
    }
    return "?";
}

static void field_add(field_set *fs, const net_field *f, void *dest)
{
    assert(fs->count < FIELDS_MAX);
    fs->fields[fs->count] = f;
    fs->dest[fs->count++] = dest;
}

/* The fields of op in a map of this kind; values go to env and args (the
 * op's struct), both zeroed here. */
static void field_set_build(field_set *fs, const net_op *op, member_kind kind, envelope *env,
                            net_args *args)
{
    memset(fs, 0, sizeof(*fs));
    memset(env, 0, sizeof(*env));
    memset(args, 0, sizeof(*args));
    bool write = op->kind == NET_KIND_WRITE;
    if (kind == MEMBER_TOP)
        field_add(fs, &envelope_fields[ENVELOPE_v], env);
    field_add(fs, &envelope_fields[ENVELOPE_op], env);
    if (kind == MEMBER_TOP)
        field_add(fs, &envelope_fields[ENVELOPE_auth], env);
    bool batch_top = kind == MEMBER_TOP && op->id == NET_OP_BATCH;
    if (write && kind == MEMBER_TOP)
        field_add(fs, &envelope_fields[ENVELOPE_consumer], env);
    if (write && (kind == MEMBER_BATCH || (kind == MEMBER_TOP && !batch_top)))
        field_add(fs, &envelope_fields[ENVELOPE_key], env);
    if (write && kind != MEMBER_CHAIN && !batch_top)
        field_add(fs, &envelope_fields[ENVELOPE_correlation], env);
    if (op->kind == NET_KIND_READ && kind == MEMBER_TOP)
        field_add(fs, &envelope_fields[ENVELOPE_min_seq], env);
    for (int i = 0; i < NET_OP_FIELDS_MAX && op->fields[i].name; i++)
        field_add(fs, &op->fields[i], args);
}

int net_request_fail(net_request *req, int code, const char *detail)
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

/* A consumer a client may name: not in the webhook intake's namespace,
 * whose keys are providers' event ids (a client writing under
 * webhook:stripe could take evt_1 before Stripe's delivery of it, which
 * would then get 409 for ever). The intake builds its requests itself
 * (net/http/webhooks.c), never through this decoder. */
static int consumer_check(const msgpack_object *o)
{
    static const char prefix[] = TALLY_WEBHOOK_CONSUMER_PREFIX;
    const size_t n = sizeof(prefix) - 1;
    return o->via.str.size >= n && memcmp(o->via.str.ptr, prefix, n) == 0
               ? TALLY_consumer_reserved
               : TALLY_ok;
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
        if (o->via.str.size > f->max)
            return over_limit(f);
        return f == &envelope_fields[ENVELOPE_consumer] ? consumer_check(o) : TALLY_ok;
    case NET_FIELD_ID128:
        return o->type == MSGPACK_OBJECT_BIN && o->via.bin.size == 16 ? TALLY_ok
                                                                       : TALLY_wrong_type;
    case NET_FIELD_BOOL:
        return o->type == MSGPACK_OBJECT_BOOLEAN ? TALLY_ok : TALLY_wrong_type;
    case NET_FIELD_OPS:
        if (o->type != MSGPACK_OBJECT_ARRAY)
            return TALLY_wrong_type;
        return o->via.array.size <= f->max ? TALLY_ok : TALLY_too_many_operations;
    case NET_FIELD_MAPS:
        if (o->type != MSGPACK_OBJECT_ARRAY)
            return TALLY_wrong_type;
        return o->via.array.size <= f->max ? TALLY_ok : TALLY_value_out_of_range;
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
        return net_request_fail(req, TALLY_malformed_request, "a request and each member is a map");
    for (uint32_t i = 0; i < m->via.map.size; i++) {
        const msgpack_object *k = &m->via.map.ptr[i].key;
        if (k->type != MSGPACK_OBJECT_STR)
            return net_request_fail(req, TALLY_wrong_type, "field names are strings");
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
            return net_request_fail(req, rc, detail);
        }
        fs->values[j] = &m->via.map.ptr[i].val;
    }
    for (unsigned j = 0; j < fs->count; j++)
        if (fs->fields[j]->required && !fs->values[j])
            return net_request_fail(req, TALLY_missing_field, fs->fields[j]->name);
    return TALLY_ok;
}

/* A checked value into its member of the struct at dest. */
static void store_value(const net_field *f, const msgpack_object *o, char *dest)
{
    void *member = dest + f->offset;
    switch (f->type) {
    case NET_FIELD_UINT: *(uint64_t *)member = o->via.u64; break;
    case NET_FIELD_AMOUNT:
    case NET_FIELD_INT:
        *(int64_t *)member =
            o->type == MSGPACK_OBJECT_NEGATIVE_INTEGER ? o->via.i64 : (int64_t)o->via.u64;
        break;
    case NET_FIELD_STR: *(tally_str *)member = (tally_str){o->via.str.ptr, o->via.str.size}; break;
    case NET_FIELD_ID128: memcpy(((tally_id128 *)member)->bytes, o->via.bin.ptr, 16); break;
    case NET_FIELD_BOOL: *(bool *)member = o->via.boolean; break;
    case NET_FIELD_OPS:
    case NET_FIELD_UINTS:
    case NET_FIELD_MAPS:
        *(net_list *)member = (net_list){o->via.array.ptr, o->via.array.size};
        break;
    }
    *(bool *)(dest + f->has_offset) = true;
}

/* Check map m against the fields of op in a map of this kind and fill env
 * and args with its values. */
static int decode_fields(net_request *req, const net_op *op, member_kind kind,
                         const msgpack_object *m, envelope *env, net_args *args)
{
    field_set fs;
    field_set_build(&fs, op, kind, env, args);
    int rc = match_fields(req, &fs, m);
    if (rc != TALLY_ok)
        return rc;
    for (unsigned j = 0; j < fs.count; j++)
        if (fs.values[j])
            store_value(fs.fields[j], fs.values[j], fs.dest[j]);
    return TALLY_ok;
}

static const net_op *member_op(net_request *req, const msgpack_object *m)
{
    tally_str name;
    if (m->type != MSGPACK_OBJECT_MAP)
        return net_request_fail(req, TALLY_malformed_request, "each member is a map"), NULL;
    const msgpack_object *op_obj = msgpack_safe_map_get(m, "op");
    if (!op_obj)
        return net_request_fail(req, TALLY_missing_field, "op"), NULL;
    if (!msgpack_safe_get_str(op_obj, &name))
        return net_request_fail(req, TALLY_wrong_type, "op"), NULL;
    const net_op *op = net_op_find(name);
    if (!op)
        return net_request_fail(req, TALLY_unknown_op, "member op"), NULL;
    if (op->command == NULL)
        return net_request_fail(req, TALLY_unknown_op, "members are single write ops"), NULL;
    return op;
}

/* The `ops` of a chain or batch: each member checked against its own row,
 * its command built by the row's command function. */
int net_request_members(net_request *req, net_list ops)
{
    uint32_t n = ops.count;
    bool chain = req->op->id == NET_OP_CHAIN;
    if (n == 0 && !chain)
        return net_request_fail(req, TALLY_value_out_of_range, "ops");
    for (uint32_t i = 0; i < n; i++) {
        const net_op *mop = member_op(req, &ops.items[i]);
        if (!mop)
            return req->error;
        envelope env;
        net_args args;
        int rc = decode_fields(req, mop, chain ? MEMBER_CHAIN : MEMBER_BATCH, &ops.items[i], &env,
                               &args);
        if (rc != TALLY_ok)
            return rc;
        if (chain) {
            mop->command(&args, &req->chain_members[i]);
            continue;
        }
        /* a batch's top map has no correlation: a member's own or none */
        ledger_request *w = &req->writes[i];
        w->consumer = req->consumer;
        w->key = env.key;
        w->correlation = env.correlation;
        mop->command(&args, &w->command);
    }
    if (chain) {
        req->writes[0].command.kind = LEDGER_CHAIN;
        req->writes[0].command.u.chain = (ledger_chain){req->chain_members, n};
    } else {
        req->write_count = n;
    }
    return TALLY_ok;
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
    req->wait_ms = 0;
    req->min_seq = 0;
    req->consumer = (tally_str){NULL, 0};
    req->has_auth = false;
    req->auth = (tally_str){NULL, 0};
    req->write_count = 0;
    memset(&req->writes[0], 0, sizeof(req->writes[0]));
}

static int decode_top(net_request *req, const msgpack_object *m)
{
    tally_str name;
    if (m->type != MSGPACK_OBJECT_MAP)
        return net_request_fail(req, TALLY_malformed_request, "a request is a msgpack map");
    const msgpack_object *v = msgpack_safe_map_get(m, "v");
    bool v_int = v && (v->type == MSGPACK_OBJECT_POSITIVE_INTEGER ||
                       v->type == MSGPACK_OBJECT_NEGATIVE_INTEGER);
    if (v_int && !(v->type == MSGPACK_OBJECT_POSITIVE_INTEGER && v->via.u64 == TALLY_PROTOCOL_VERSION))
        return net_request_fail(req, TALLY_unsupported_version, "this server speaks v 1");
    /* the token first: with --auth it is checked before any other
     * refusal is told (net/engine/slot.c) */
    tally_str token;
    if (msgpack_safe_get_str(msgpack_safe_map_get(m, "auth"), &token) &&
        token.len <= AUTH_TOKEN_BYTES_MAX) {
        req->has_auth = true;
        req->auth = token;
    }
    const msgpack_object *op_obj = msgpack_safe_map_get(m, "op");
    if (!op_obj)
        return net_request_fail(req, TALLY_missing_field, "op");
    if (!msgpack_safe_get_str(op_obj, &name))
        return net_request_fail(req, TALLY_wrong_type, "op");
    req->op = net_op_find(name);
    if (!req->op)
        return net_request_fail(req, TALLY_unknown_op, "see docs/PROTOCOL.md for the ops");
    envelope env;
    net_args args;
    int rc = decode_fields(req, req->op, MEMBER_TOP, m, &env, &args);
    if (rc != TALLY_ok)
        return rc;
    req->min_seq = env.min_seq;
    if (req->op->kind == NET_KIND_WRITE) {
        req->consumer = env.consumer;
        ledger_request *w = &req->writes[0];
        w->consumer = req->consumer;
        w->key = env.key;
        w->correlation = env.correlation;
        req->write_count = 1;
    }
    return req->op->build(req, &args);
}

size_t net_derived_key(const char *batch_key, size_t len, uint32_t index,
                       char out[NET_DERIVED_KEY_BYTES_MAX + 1])
{
    static const char hex[] = "0123456789abcdef";
    uint8_t digest[SHA256_BYTES];
    sha256_digest(batch_key, len, digest);
    out[0] = NET_DERIVED_KEY_PREFIX;
    for (size_t i = 0; i < SHA256_BYTES; i++) {
        out[1 + 2 * i] = hex[digest[i] >> 4];
        out[2 + 2 * i] = hex[digest[i] & 15];
    }
    int n = snprintf(out + 1 + 2 * SHA256_BYTES, NET_DERIVED_KEY_BYTES_MAX - 2 * SHA256_BYTES,
                     ".%" PRIu32, index);
    assert(n > 0 && (size_t)n < NET_DERIVED_KEY_BYTES_MAX - 2 * SHA256_BYTES);
    return 1 + 2 * SHA256_BYTES + (size_t)n;
}

bool net_key_client_may_send(tally_str key)
{
    return key.len == 0 || key.ptr[0] != NET_DERIVED_KEY_PREFIX;
}

bool net_request_has_derived_key(const net_request *req)
{
    for (uint32_t i = 0; i < req->write_count; i++)
        if (!net_key_client_may_send(req->writes[i].key))
            return true;
    return false;
}

int net_request_decode(net_request *req, const void *bytes, size_t len)
{
    net_request_reset(req);
    if (len > TALLY_REQUEST_BYTES_MAX)
        return net_request_fail(req, TALLY_request_too_large, "requests are at most 512 KiB");
    msgpack_unpacked_init(&req->unpacked);
    req->unpacked_live = true;
    int rc = msgpack_safe_unpack(bytes, len, TALLY_MSGPACK_DEPTH_MAX, &req->unpacked);
    if (rc == TALLY_out_of_memory)
        return net_request_fail(req, TALLY_overloaded, "out of memory decoding");
    if (rc != TALLY_ok)
        return net_request_fail(req, TALLY_malformed_request,
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
    case NET_FIELD_MAPS: return "array of maps";
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
    else if (f->type == NET_FIELD_OPS || f->type == NET_FIELD_UINTS || f->type == NET_FIELD_MAPS)
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
        const char *kind = net_op_kind_name(op->kind);
        fprintf(out, "### `%s` (%s; auth: %s)\n\n%s\n\n", op->name, kind,
                auth_class_name(op->auth), op->doc);
        fprintf(out, "| field | type | required | limit | meaning |\n|---|---|---|---|---|\n");
        field_set fs;
        envelope env;
        net_args args;
        field_set_build(&fs, op, MEMBER_TOP, &env, &args);
        for (unsigned j = 0; j < fs.count; j++)
            print_field(out, fs.fields[j]);
        fprintf(out, "\n");
    }
    fprintf(out, "<!-- generated by tallyd --protocol-reference: end -->\n");
}
