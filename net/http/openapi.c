/*
 * openapi.c — the OpenAPI 3.1 document of the JSON API (openapi.h), made
 * by walking the tables the JSON face serves from: every op of the op
 * table but the control ops as POST /v1/<op> with a request body of its
 * fields (each field's schema from its type, by the value rule of
 * json_codec.c), every GET resource of http_resources with its path
 * parameter and query arguments, the error enum grouped by the status
 * net_json_status gives each code, the headers of docs/PROTOCOL.md's JSON
 * API section, and bearer security with each op's auth class
 * (x-tally-auth). Reply schemas give the envelope ({v, code}) and the
 * result fields the reply tables of PROTOCOL.md name (`replies` below);
 * objects whose contents other documents define
 * (accounts, transfers, events, subscribers' metrics) stay open objects.
 */
#include "net/http/openapi.h"

#include "net/http/face.h"
#include "net/http/json_codec.h"

#include "common/error.h"

#include <jansson.h>
#include <stdio.h>
#include <string.h>

#define SCHEMA_REF(name) "#/components/schemas/" name
#define DECIMAL_PATTERN "^[0-9]{1,20}$"
#define SIGNED_DECIMAL_PATTERN "^-?[0-9]{1,20}$"
#define ID128_PATTERN "^(-*[0-9A-Fa-f]){32}-*$"
#define PATH_BYTES_MAX 96

/* ---- small builders (NULL in: NULL out; json_object_set_new takes a
 * reference also when it fails, so a failure leaves NULL, never a leak) ---- */

static json_t *set(json_t *o, const char *key, json_t *v)
{
    if (o == NULL || v == NULL) {
        json_decref(o);
        json_decref(v);
        return NULL;
    }
    if (json_object_set_new(o, key, v) != 0) { /* v released by it */
        json_decref(o);
        return NULL;
    }
    return o;
}

static json_t *append(json_t *a, json_t *v)
{
    if (a == NULL || v == NULL) {
        json_decref(a);
        json_decref(v);
        return NULL;
    }
    if (json_array_append_new(a, v) != 0) { /* v released by it */
        json_decref(a);
        return NULL;
    }
    return a;
}

static json_t *ref(const char *target)
{
    return set(json_object(), "$ref", json_string(target));
}

static json_t *typed(const char *type)
{
    return set(json_object(), "type", json_string(type));
}

static json_t *described(json_t *schema, const char *doc)
{
    return doc ? set(schema, "description", json_string(doc)) : schema;
}

static json_t *nullable(json_t *schema)
{
    return set(json_object(), "anyOf", append(append(json_array(), schema), typed("null")));
}

static json_t *array_of(json_t *items)
{
    return set(typed("array"), "items", items);
}

/* ---- field schemas: the value rule (json_codec.h) by field type ---- */

/* An integer as a JSON number, or as a decimal string (exact beyond 2^53). */
static json_t *integer_schema(bool negative_ok, uint64_t max)
{
    json_t *number = typed("integer");
    if (!negative_ok)
        number = set(number, "minimum", json_integer(0));
    if (max > 0 && max <= NET_JSON_EXACT_INT_MAX)
        number = set(number, "maximum", json_integer((json_int_t)max));
    json_t *text = set(typed("string"), "pattern",
                       json_string(negative_ok ? SIGNED_DECIMAL_PATTERN : DECIMAL_PATTERN));
    return set(json_object(), "anyOf", append(append(json_array(), number), text));
}

static json_t *member_schema(const net_op *op, bool batch);

static json_t *members_schema(const net_op *op, uint64_t max)
{
    bool batch = op->id == NET_OP_BATCH;
    json_t *choices = json_array();
    for (int i = 0; i < NET_OP_COUNT; i++)
        if (net_ops[i].command != NULL) {
            char target[PATH_BYTES_MAX];
            snprintf(target, sizeof(target), SCHEMA_REF("%s_member_%s"),
                     batch ? "batch" : "chain", net_ops[i].name);
            choices = append(choices, ref(target));
        }
    json_t *a = array_of(set(json_object(), "oneOf", choices));
    return set(a, "maxItems", json_integer((json_int_t)max));
}

static json_t *field_schema(const net_op *op, const net_field *f)
{
    json_t *s = NULL;
    switch (f->type) {
    case NET_FIELD_UINT: s = integer_schema(false, f->max); break;
    case NET_FIELD_AMOUNT: s = integer_schema(true, 0); break;
    case NET_FIELD_INT: s = integer_schema(true, 0); break;
    case NET_FIELD_STR:
        /* max is in bytes; a character is at least one */
        s = set(typed("string"), "maxLength", json_integer((json_int_t)f->max));
        break;
    case NET_FIELD_ID128: s = ref(SCHEMA_REF("Id128")); break;
    case NET_FIELD_BOOL: s = typed("boolean"); break;
    case NET_FIELD_OPS: s = members_schema(op, f->max); break;
    case NET_FIELD_UINTS:
        s = set(array_of(integer_schema(false, 0)), "maxItems", json_integer((json_int_t)f->max));
        break;
    case NET_FIELD_MAPS:
        s = set(array_of(typed("object")), "maxItems", json_integer((json_int_t)f->max));
        break;
    }
    if (s && json_object_get(s, "$ref")) /* $ref with siblings: wrap it */
        s = set(json_object(), "allOf", append(json_array(), s));
    return described(s, f->doc);
}

/* An object of op's fields; `extra` adds the envelope's fields a JSON
 * body or member carries (correlation, op, key). */
typedef struct extra_field {
    const char *name;
    bool required;
    json_t *schema; /* taken */
} extra_field;

static json_t *fields_object(const net_op *op, bool over_http_top, const extra_field *extra,
                             size_t extra_count)
{
    json_t *props = json_object(), *required = json_array();
    for (size_t i = 0; i < extra_count; i++) {
        props = set(props, extra[i].name, extra[i].schema);
        if (extra[i].required)
            required = append(required, json_string(extra[i].name));
    }
    for (int i = 0; i < NET_OP_FIELDS_MAX && op->fields[i].name; i++) {
        const net_field *f = &op->fields[i];
        props = set(props, f->name, field_schema(op, f));
        bool derived = over_http_top && net_json_field_derived(op, f->name);
        if (f->required && !derived)
            required = append(required, json_string(f->name));
    }
    json_t *o = set(set(typed("object"), "properties", props), "additionalProperties",
                    json_false());
    if (required == NULL) { /* out of memory: no document rather than a wrong one */
        json_decref(o);
        return NULL;
    }
    if (json_array_size(required) > 0)
        return set(o, "required", required);
    json_decref(required);
    return o;
}

static json_t *envelope_str(size_t max, const char *doc)
{
    return described(set(typed("string"), "maxLength", json_integer((json_int_t)max)), doc);
}

/* A member of a chain (op and fields) or a batch (op, key, correlation
 * and fields; a member without a key gets one derived from the batch's). */
static json_t *member_schema(const net_op *op, bool batch)
{
    extra_field extra[3] = {{"op", true, set(json_object(), "const", json_string(op->name))}};
    if (batch) {
        extra[1] = (extra_field){
            "key", false,
            envelope_str(TALLY_KEY_BYTES_MAX,
                         "the member's idempotency key (default: derived from Idempotency-Key)")};
        extra[2] = (extra_field){
            "correlation", false,
            envelope_str(TALLY_CORRELATION_BYTES_MAX, "copied into the member's events")};
    }
    return fields_object(op, false, extra, batch ? 3 : 1);
}

/* ---- replies ---- */

typedef enum reply_kind {
    R_INT, R_INT_OR_NULL, R_BOOL, R_STR, R_BASE64, R_OBJECT, R_OBJECTS, R_STRS_OR_NULL,
    R_EVENTS, R_DELIVERIES, R_WRITE_RESULTS, R_ID_OR_NULL,
} reply_kind;

typedef struct reply_field {
    const char *name;
    reply_kind kind;
} reply_field;

#define REPLY_FIELDS_MAX 16

/* The result fields of each op's reply besides v and code, as
 * docs/PROTOCOL.md's "Replies" tables give them (docs/SUBSCRIBERS.md
 * for the subscriber ops: an open object, with the fields of sub_progress
 * listed here). */
static const struct {
    reply_field fields[REPLY_FIELDS_MAX];
} replies[NET_OP_COUNT] = {
#define WRITE_REPLY                                                                       \
    {{"replayed", R_BOOL}, {"seq", R_INT_OR_NULL}, {"events", R_INT}, {"key", R_STR},     \
     {"original_seq", R_INT_OR_NULL}, {"codes", R_STRS_OR_NULL}, {"failed_index", R_INT_OR_NULL}}
    [NET_OP_ACCOUNT_OPEN] = {WRITE_REPLY}, [NET_OP_TRANSFER] = {WRITE_REPLY},
    [NET_OP_POST] = {WRITE_REPLY},         [NET_OP_VOID] = {WRITE_REPLY},
    [NET_OP_GRANT] = {WRITE_REPLY},        [NET_OP_EXTEND] = {WRITE_REPLY},
    [NET_OP_REVOKE] = {WRITE_REPLY},       [NET_OP_CHAIN] = {WRITE_REPLY},
    [NET_OP_ENDPOINT_DISABLE] = {WRITE_REPLY}, [NET_OP_ENDPOINT_ENABLE] = {WRITE_REPLY},
    [NET_OP_ENDPOINT_ROTATE_SECRET] = {WRITE_REPLY}, [NET_OP_ENDPOINT_RECOVER] = {WRITE_REPLY},
    [NET_OP_ENDPOINT_RECOVERED] = {WRITE_REPLY},
#undef WRITE_REPLY
    [NET_OP_BATCH] = {{{"results", R_WRITE_RESULTS}}},
    [NET_OP_ACCOUNT_GET] = {{{"account", R_OBJECT}}},
    [NET_OP_ACCOUNT_HISTORY] = {{{"entries", R_OBJECTS}, {"next", R_INT_OR_NULL}}},
    [NET_OP_ACCOUNT_LIST] = {{{"entries", R_OBJECTS}, {"next", R_INT_OR_NULL}}},
    [NET_OP_TRANSFER_GET] = {{{"transfer", R_OBJECT}}},
    [NET_OP_ACCOUNT_QUERY] = {{{"entries", R_OBJECTS}, {"next", R_ID_OR_NULL}}},
    [NET_OP_TRANSFER_QUERY] = {{{"entries", R_OBJECTS}, {"next", R_ID_OR_NULL}}},
    [NET_OP_ACCOUNT_TRANSFERS] = {{{"entries", R_OBJECTS}, {"next", R_ID_OR_NULL}}},
    [NET_OP_ACCOUNT_BALANCES] = {{{"balances", R_OBJECTS}, {"next", R_INT_OR_NULL}}},
    [NET_OP_BALANCE_AT] = {{{"balance", R_OBJECT}}},
    [NET_OP_ENTITLEMENT_GET] = {{{"entitlement", R_OBJECT}}},
    [NET_OP_ENTITLEMENT_LIST] = {{{"entitlements", R_OBJECTS}}},
    [NET_OP_ENDPOINT_GET] = {{{"endpoint", R_STR}, {"state", R_STR}, {"version", R_INT},
                              {"changed_ms", R_INT}, {"reason", R_STR},
                              {"previous_secret_until_ms", R_INT},
                              {"recover_since_ms", R_INT}, {"recover_version", R_INT}}},
    [NET_OP_ENDPOINT_SECRET_GET] = {{{"endpoint", R_STR}, {"version", R_INT}, {"secret", R_STR},
                                     {"previous_secret", R_STR},
                                     {"previous_until_ms", R_INT}}},
    [NET_OP_ENDPOINT_ATTEMPTS_RECORD] = {{{"recorded", R_INT}, {"removed", R_INT}}},
    [NET_OP_ENDPOINT_ATTEMPTS] = {{{"endpoint", R_STR}, {"attempts", R_OBJECTS}}},
    [NET_OP_ENDPOINT_LIST] = {{{"endpoints", R_OBJECTS}}},
    [NET_OP_LOG_READ] = {{{"head", R_INT}, {"events", R_EVENTS}, {"log_floor", R_INT},
                          {"log_floor_hash", R_BASE64}}},
    [NET_OP_SUB_FETCH] = {{{"events", R_DELIVERIES}, {"ack_floor", R_INT}, {"head", R_INT}}},
    [NET_OP_STATS] = {{{"head_seq", R_INT}, {"first_seq", R_INT}, {"accounts", R_INT},
                       {"transfers", R_INT}, {"entitlements", R_INT}, {"inbox", R_INT},
                       {"events", R_INT}, {"map_used_bytes", R_INT}, {"map_size_bytes", R_INT},
                       {"map_max_bytes", R_INT}, {"subscribers", R_OBJECTS},
                       {"inbox_oldest_age_s", R_INT}, {"log_floor", R_INT},
                       {"log_floor_hash", R_BASE64}, {"last_sweep", R_OBJECT}}},
    [NET_OP_SUB_PROGRESS] = {{{"extended", R_INT}, {"deliver_after_ms", R_INT}}},
    [NET_OP_SUB_UPDATE] = {{{"subscriber", R_OBJECT}}},
};

static json_t *reply_field_schema(reply_kind kind)
{
    switch (kind) {
    case R_INT: return ref(SCHEMA_REF("Integer"));
    case R_INT_OR_NULL: return nullable(ref(SCHEMA_REF("Integer")));
    case R_ID_OR_NULL: return nullable(ref(SCHEMA_REF("Id128")));
    case R_BOOL: return typed("boolean");
    case R_STR: return typed("string");
    case R_BASE64: return set(typed("string"), "contentEncoding", json_string("base64"));
    case R_OBJECT: return typed("object");
    case R_OBJECTS: return array_of(typed("object"));
    case R_STRS_OR_NULL: return nullable(array_of(typed("string")));
    case R_EVENTS: return array_of(ref(SCHEMA_REF("EventOrBytes")));
    case R_DELIVERIES: return array_of(ref(SCHEMA_REF("Delivery")));
    case R_WRITE_RESULTS: return array_of(ref(SCHEMA_REF("MemberResult")));
    }
    return NULL;
}

/* {v, code, ...} with these result fields, open to more; a batch
 * member's result has no v. */
static json_t *reply_schema(const reply_field *fields, bool with_v)
{
    json_t *props = json_object(), *required = json_array();
    if (with_v) {
        props = set(props, "v",
                    set(typed("integer"), "const", json_integer(TALLY_PROTOCOL_VERSION)));
        required = append(required, json_string("v"));
        props = set(props, "cluster_seq",
                    described(ref(SCHEMA_REF("Integer")),
                              "cluster mode only (docs/CLUSTER.md): a write's command stream "
                              "position, or the position a read's node had applied"));
    }
    props = set(props, "code", described(typed("string"), "`ok` or an error code"));
    for (int i = 0; i < REPLY_FIELDS_MAX && fields && fields[i].name; i++)
        props = set(props, fields[i].name, reply_field_schema(fields[i].kind));
    required = append(required, json_string("code"));
    return set(set(set(typed("object"), "properties", props), "required", required),
               "additionalProperties", json_true());
}

/* Whether op's reply carries events (which `format` gives as documents or bytes). */
static bool carries_events(const net_op *op)
{
    for (int i = 0; i < REPLY_FIELDS_MAX && replies[op->id].fields[i].name; i++)
        if (replies[op->id].fields[i].kind == R_EVENTS ||
            replies[op->id].fields[i].kind == R_DELIVERIES)
            return true;
    return false;
}

static json_t *op_reply_schema(const net_op *op)
{
    if (op->kind == NET_KIND_WRITE && op->id != NET_OP_BATCH)
        return ref(SCHEMA_REF("WriteResult"));
    return reply_schema(replies[op->id].fields, true);
}

/* ---- errors by status: each code where net_json_status puts it ---- */

#define STATUS_MAX 600

static bool status_has_codes(unsigned status)
{
    for (int n = 0; n < 256; n++)
        if (strcmp(tally_strerror(n), "unknown_error") != 0 && n != TALLY_ok &&
            net_json_status(n) == status)
            return true;
    return false;
}

static json_t *status_response(unsigned status)
{
    json_t *codes = json_array();
    for (int n = 0; n < 256; n++)
        if (strcmp(tally_strerror(n), "unknown_error") != 0 && n != TALLY_ok &&
            net_json_status(n) == status)
            codes = append(codes, json_string(tally_strerror(n)));
    json_t *props = set(json_object(), "code", set(typed("string"), "enum", codes));
    json_t *schema = set(json_object(), "allOf",
                         append(append(json_array(), ref(SCHEMA_REF("Refusal"))),
                                set(typed("object"), "properties", props)));
    json_t *content = set(json_object(), "application/json", set(json_object(), "schema", schema));
    char doc[64];
    snprintf(doc, sizeof(doc), "refused or failed with a code of status %u", status);
    json_t *r = set(set(json_object(), "description", json_string(doc)), "content", content);
    if (status == 503)
        r = set(r, "headers",
                set(json_object(), "Retry-After",
                    set(set(json_object(), "description", json_string("seconds: 1")), "schema",
                        typed("integer"))));
    return r;
}

/* ---- operations ---- */

static json_t *header_param(const char *name, bool required, size_t max, const char *doc)
{
    json_t *p = set(set(json_object(), "name", json_string(name)), "in", json_string("header"));
    p = set(set(p, "required", json_boolean(required)), "description", json_string(doc));
    return set(p, "schema", set(set(typed("string"), "minLength", json_integer(1)), "maxLength",
                                json_integer((json_int_t)max)));
}

static json_t *write_headers(void)
{
    json_t *a = json_array();
    a = append(a, ref("#/components/parameters/IdempotencyKey"));
    return append(a, ref("#/components/parameters/TallyConsumer"));
}

static json_t *responses(const net_op *op, json_t *ok)
{
    json_t *content = set(json_object(), "application/json", set(json_object(), "schema", ok));
    json_t *r200 = set(set(json_object(), "description", json_string("done (code ok)")),
                       "content", content);
    if (op && op->kind == NET_KIND_WRITE)
        r200 = set(r200, "headers",
                   set(json_object(), "Idempotent-Replayed",
                       ref("#/components/headers/IdempotentReplayed")));
    json_t *r = set(json_object(), "200", r200);
    for (unsigned status = 400; status < STATUS_MAX; status++) {
        if (!status_has_codes(status))
            continue;
        if (status == 409 && !(op && op->kind == NET_KIND_WRITE))
            continue; /* idempotency_key_reused: writes only */
        char code[8], target[64];
        snprintf(code, sizeof(code), "%u", status);
        snprintf(target, sizeof(target), "#/components/responses/status_%u", status);
        r = set(r, code, ref(target));
    }
    return r;
}

static json_t *post_operation(const net_op *op)
{
    bool write = op->kind == NET_KIND_WRITE;
    extra_field correlation = {
        "correlation", false,
        envelope_str(TALLY_CORRELATION_BYTES_MAX, "copied into the events (0-64 bytes)")};
    bool with_correlation = write && op->id != NET_OP_BATCH;
    const net_field *min_seq_field = net_read_min_seq_field();
    extra_field min_seq = {min_seq_field->name, false, field_schema(op, min_seq_field)};
    bool read = op->kind == NET_KIND_READ;
    json_t *body = fields_object(op, true, with_correlation ? &correlation : &min_seq,
                                 with_correlation || read ? 1 : 0);
    if (!with_correlation)
        json_decref(correlation.schema);
    if (with_correlation || !read)
        json_decref(min_seq.schema);
    bool body_required = body && json_object_get(body, "required") != NULL;
    json_t *o = set(json_object(), "operationId", json_string(op->name));
    o = set(o, "summary", json_string(op->doc));
    o = set(o, "tags", append(json_array(), json_string(net_op_kind_name(op->kind))));
    o = set(o, "x-tally-auth", json_string(auth_class_name(op->auth)));
    if (write)
        o = set(o, "parameters", write_headers());
    if (carries_events(op))
        o = set(o, "parameters", append(json_array(), ref("#/components/parameters/Format")));
    json_t *rb = set(json_object(), "content",
                     set(json_object(), "application/json", set(json_object(), "schema", body)));
    o = set(o, "requestBody", set(rb, "required", json_boolean(body_required)));
    return set(o, "responses", responses(op, op_reply_schema(op)));
}

static const net_field *field_named(const net_op *op, const char *name)
{
    for (int i = 0; i < NET_OP_FIELDS_MAX && op->fields[i].name; i++)
        if (strcmp(op->fields[i].name, name) == 0)
            return &op->fields[i];
    return NULL;
}

static json_t *param(const char *name, const char *in, bool required, json_t *schema)
{
    json_t *p = set(set(json_object(), "name", json_string(name)), "in", json_string(in));
    return set(set(p, "required", json_boolean(required)), "schema", schema);
}

/* The query arguments of op (all but the path's), aliases beside their field. */
static json_t *query_params(json_t *params, const net_op *op, const char *path_field)
{
    for (int i = 0; i < NET_OP_FIELDS_MAX && op->fields[i].name; i++) {
        const net_field *f = &op->fields[i];
        if (path_field && strcmp(f->name, path_field) == 0)
            continue;
        for (size_t a = 0; a < http_query_alias_count; a++)
            if (strcmp(http_query_aliases[a].field, f->name) == 0)
                params = append(params, param(http_query_aliases[a].arg, "query", false,
                                              field_schema(op, f)));
        params = append(params, param(f->name, "query", false, field_schema(op, f)));
    }
    const net_field *min_seq = net_read_min_seq_field();
    return append(params, param(min_seq->name, "query", false, field_schema(op, min_seq)));
}

static json_t *get_operation(const http_resource *r)
{
    const net_op *op = &net_ops[r->op];
    const net_op *alt = r->switch_arg ? &net_ops[r->alt_op] : NULL;
    char id[64];
    snprintf(id, sizeof(id), "get_%s", op->name);
    json_t *o = set(json_object(), "operationId", json_string(id));
    o = set(o, "summary", json_string(op->doc));
    o = set(o, "tags", append(json_array(), json_string(net_op_kind_name(op->kind))));
    o = set(o, "x-tally-auth", json_string(auth_class_name(op->auth)));
    if (alt) {
        char doc[160];
        snprintf(doc, sizeof(doc), "With `%s`: %s (op `%s`); without: op `%s`.", r->switch_arg,
                 alt->doc, alt->name, op->name);
        o = set(o, "description", json_string(doc));
    }
    json_t *params = json_array();
    if (r->param)
        params = append(params, param(r->param, "path", true,
                                      field_schema(op, field_named(op, r->param))));
    params = query_params(params, op, r->param);
    if (alt) {
        const net_field *f = field_named(alt, r->switch_arg);
        params = append(params, param(f->name, "query", false, field_schema(alt, f)));
    }
    if (carries_events(op))
        params = append(params, ref("#/components/parameters/Format"));
    o = set(o, "parameters", params);
    json_t *ok = op_reply_schema(op);
    if (alt)
        ok = set(json_object(), "anyOf", append(append(json_array(), ok), op_reply_schema(alt)));
    return set(o, "responses", responses(op, ok));
}

static json_t *openapi_operation(void)
{
    json_t *o = set(json_object(), "operationId", json_string("openapi"));
    o = set(o, "summary",
            json_string("This document: the same bytes as `tallyd --openapi`; no token needed "
                        "(it holds nothing of the server's state)."));
    o = set(o, "tags", append(json_array(), json_string("document")));
    o = set(o, "security", json_array());
    json_t *content = set(json_object(), "application/json",
                          set(json_object(), "schema", typed("object")));
    json_t *ok = set(set(json_object(), "description", json_string("the OpenAPI document")),
                     "content", content);
    return set(o, "responses", set(json_object(), "200", ok));
}

/* ---- the console's routes (net/http/http_console.c) ---- */

/* auth: the grant class needed, or "principal" (any principal's token). */
static json_t *console_operation(const char *id, const char *auth, const char *summary,
                                 json_t *params, json_t *ok)
{
    json_t *o = set(json_object(), "operationId", json_string(id));
    o = set(o, "summary", json_string(summary));
    o = set(o, "tags", append(json_array(), json_string("console")));
    o = set(o, "x-tally-auth", json_string(auth));
    o = set(o, "parameters", params);
    return set(o, "responses", responses(NULL, ok));
}

/* An array of one value a sample, null where it was not sampled. */
static json_t *samples_of(json_t *item, bool with_null)
{
    return array_of(with_null ? nullable(item) : item);
}

static json_t *figures_schema(void)
{
    static const char *const counts[] = {"interval_ms", "samples_max", "subscribers_max",
                                         "map_max_bytes", "samples"};
    static const struct {
        const char *name;
        bool number, with_null;
    } columns[] = {
        {"t_ms", false, false},           {"head_seq", false, false},
        {"commits_per_s", true, true},    {"commands_per_s", true, true},
        {"map_used_bytes", false, false}, {"map_size_bytes", false, false},
        {"disk_free_bytes", false, true}, {"subscribers_total", false, false},
    };
    static const char *const sub_columns[] = {"pending", "oldest_unacked_age_s",
                                              "redelivered_total", "dead_letters"};
    json_t *props = json_object(), *required = json_array();
    for (size_t i = 0; i < sizeof(counts) / sizeof(counts[0]); i++) {
        props = set(props, counts[i], ref(SCHEMA_REF("Integer")));
        required = append(required, json_string(counts[i]));
    }
    for (size_t i = 0; i < sizeof(columns) / sizeof(columns[0]); i++) {
        json_t *item = columns[i].number ? typed("number") : ref(SCHEMA_REF("Integer"));
        props = set(props, columns[i].name, samples_of(item, columns[i].with_null));
        required = append(required, json_string(columns[i].name));
    }
    json_t *sub = set(json_object(), "name", typed("string")), *sub_required = json_array();
    sub_required = append(sub_required, json_string("name"));
    for (size_t i = 0; i < sizeof(sub_columns) / sizeof(sub_columns[0]); i++) {
        sub = set(sub, sub_columns[i], samples_of(ref(SCHEMA_REF("Integer")), true));
        sub_required = append(sub_required, json_string(sub_columns[i]));
    }
    json_t *sub_schema = set(set(typed("object"), "properties", sub), "required", sub_required);
    props = set(props, "subscribers", array_of(sub_schema));
    required = append(required, json_string("subscribers"));
    return set(set(typed("object"), "properties", props), "required", required);
}

static json_t *whoami_schema(void)
{
    json_t *props = set(json_object(), "auth", typed("boolean"));
    props = set(props, "principal", nullable(typed("string")));
    props = set(props, "read", typed("boolean"));
    props = set(props, "admin", typed("boolean"));
    json_t *required = json_array();
    static const char *const names[] = {"auth", "principal", "read", "admin"};
    for (size_t i = 0; i < 4; i++)
        required = append(required, json_string(names[i]));
    return set(set(typed("object"), "properties", props), "required", required);
}

static json_t *console_paths(json_t *p)
{
    json_t *since = param("since_ms", "query", false, ref(SCHEMA_REF("Integer")));
    p = set(p, "/v1/figures",
            set(json_object(), "get",
                console_operation("figures", auth_class_name(AUTH_CLASS_READ),
                                  "The last hour's figures, one sample a second (head seq, "
                                  "commits and commands per second, map and disk use, each "
                                  "sampled subscriber's backlog); with `since_ms`, the samples "
                                  "taken after it (docs/PROTOCOL.md, \"Figures\").",
                                  append(json_array(), since), figures_schema())));
    return set(p, "/v1/whoami",
               set(json_object(), "get",
                   console_operation("whoami", "principal",
                                     "The token's principal and whether it holds `read` and "
                                     "`admin`; without a token, nobody (no grant); without "
                                     "--auth, anyone, with every grant.",
                                     json_array(), whoami_schema())));
}

/* GET /v1/events (net/http/sse.c): the log as Server-Sent Events. */
static json_t *events_operation(void)
{
    const net_op *log_read = &net_ops[NET_OP_LOG_READ];
    json_t *o = set(json_object(), "operationId", json_string("events"));
    o = set(o, "summary",
            json_string("The log as Server-Sent Events (docs/PROTOCOL.md, \"The event stream\"): "
                        "catch-up from `from`, then live, each event once, in order"));
    o = set(o, "description",
            json_string("Each event is one message: `id: SEQ`, then `data: ` and its JSON "
                        "document (the schema Event) on one line, then an empty line; no "
                        "`event:` field. `: keepalive` comments while idle. A stream ends after "
                        "`--http-stream-max-s`: reconnect with `Last-Event-ID`. Refusals come "
                        "before any stream, as JSON replies."));
    o = set(o, "tags", append(json_array(), json_string(net_op_kind_name(log_read->kind))));
    o = set(o, "x-tally-auth", json_string(auth_class_name(log_read->auth)));
    json_t *from = described(ref(SCHEMA_REF("Integer")),
                             "the first seq to send (0 or 1: the log's start); without it, "
                             "events after the current head");
    json_t *params = append(json_array(), set(param("from", "query", false, from), "description",
                                              json_string("the first seq to send")));
    json_t *last = set(set(typed("string"), "pattern", json_string("^[0-9]{1,20}$")),
                       "description", json_string("the seq of the last event seen: the stream "
                                                  "starts after it (over `from`)"));
    params = append(params, param("Last-Event-ID", "header", false, last));
    o = set(o, "parameters", params);
    json_t *stream = set(json_object(), "text/event-stream",
                         set(json_object(), "schema",
                             described(typed("string"), "SSE messages: id, data (an Event)")));
    json_t *ok = set(set(json_object(), "description", json_string("the stream")), "content",
                     stream);
    json_t *r = responses(NULL, typed("object"));
    return set(o, "responses", set(r, "200", ok));
}

/* GET /v1/cluster (net/http/http_json.c, cluster_reply). */
static json_t *cluster_operation(void)
{
    static const reply_field fields[] = {
        {"node", R_STR},
        {"stream", R_STR},
        {"position", R_INT},
        {"stream_last_seq", R_INT},
        {"lag_messages", R_INT},
        {"checkpoint_position", R_INT},
        {"checkpoint_agreeing", R_INT},
        {"checkpoint_nodes", R_INT},
        {"diverged", R_BOOL},
        {"diverged_why", R_STR},
        {NULL, R_STR}};
    json_t *o = set(json_object(), "operationId", json_string("get_cluster"));
    o = set(o, "summary",
            json_string("Cluster mode: this node's name, its stream, the position it has applied, "
                        "the stream's last seq as it last saw it, its lag, its last checkpoint "
                        "and the nodes agreeing there, and whether it diverged (with why); "
                        "single-node mode answers not_in_cluster_mode (docs/CLUSTER.md)."));
    o = set(o, "tags", append(json_array(), json_string("read")));
    o = set(o, "x-tally-auth", json_string(auth_class_name(AUTH_CLASS_READ)));
    return set(o, "responses", responses(NULL, reply_schema(fields, true)));
}

static json_t *paths(void)
{
    json_t *p = json_object();
    for (int i = 0; i < NET_OP_COUNT; i++) {
        const net_op *op = &net_ops[i];
        if (op->kind == NET_KIND_CONTROL)
            continue; /* not offered over HTTP (http_json.c, post_request) */
        char path[PATH_BYTES_MAX];
        snprintf(path, sizeof(path), "/v1/%s", op->name);
        p = set(p, path, set(json_object(), "post", post_operation(op)));
    }
    for (size_t i = 0; i < http_resource_count; i++) {
        const http_resource *r = &http_resources[i];
        char path[PATH_BYTES_MAX];
        if (r->param)
            snprintf(path, sizeof(path), "/v1/%s{%s}%s", r->prefix, r->param, r->suffix);
        else
            snprintf(path, sizeof(path), "/v1/%s", r->prefix);
        json_t *item = json_object_get(p, path); /* POST /v1/stats is GET /v1/stats too */
        if (item)
            p = set(p, path, set(json_incref(item), "get", get_operation(r)));
        else
            p = set(p, path, set(json_object(), "get", get_operation(r)));
    }
    p = console_paths(p);
    p = set(p, "/v1/events", set(json_object(), "get", events_operation()));
    p = set(p, "/v1/cluster", set(json_object(), "get", cluster_operation()));
    return set(p, "/v1/openapi.json", set(json_object(), "get", openapi_operation()));
}

/* ---- components ---- */

/* The event document (docs/PROTOCOL.md, "The event document";
 * common/event_doc.c): its header fields, each always there (consumer and
 * key null for a sweep's events); `data`'s objects are open. */
static json_t *event_schema(void)
{
    static const struct {
        const char *name;
        reply_kind kind;
        bool always; /* never null */
    } fields[] = {
        {"seq", R_INT, true},           {"event_id", R_STR, true},
        {"type", R_STR, true},          {"entity_kind", R_STR, true},
        {"entity", R_OBJECT, true},     {"entity_version", R_INT, true},
        {"time", R_STR, true},          {"time_ms", R_INT, true},
        {"consumer", R_STR, false},     {"key", R_STR, false},
        {"data", R_OBJECT, true},
    };
    json_t *props = json_object(), *required = json_array();
    for (size_t i = 0; i < sizeof(fields) / sizeof(fields[0]); i++) {
        json_t *schema = reply_field_schema(fields[i].kind);
        props = set(props, fields[i].name, fields[i].always ? schema : nullable(schema));
        required = append(required, json_string(fields[i].name));
    }
    json_t *e = set(set(typed("object"), "properties", props), "required", required);
    return described(set(e, "additionalProperties", json_true()),
                     "an event as a JSON document (docs/PROTOCOL.md, \"The event document\"): "
                     "what tally-relay sends too");
}

/* One event of a sub_fetch reply (docs/SUBSCRIBERS.md). */
static json_t *delivery_schema(void)
{
    json_t *props = set(json_object(), "seq", reply_field_schema(R_INT));
    props = set(props, "attempt", reply_field_schema(R_INT));
    props = set(props, "replay", reply_field_schema(R_BOOL));
    props = set(props, "event", ref(SCHEMA_REF("EventOrBytes")));
    json_t *required = json_array();
    static const char *const names[] = {"seq", "attempt", "replay", "event"};
    for (size_t i = 0; i < 4; i++)
        required = append(required, json_string(names[i]));
    return set(set(set(typed("object"), "properties", props), "required", required),
               "additionalProperties", json_true());
}

/* The `format` query argument: how a reply gives its events. */
static json_t *format_param(void)
{
    json_t *schema = set(set(typed("string"), "enum",
                             append(append(json_array(), json_string("json")),
                                    json_string("msgpack"))),
                         "default", json_string("json"));
    return set(param("format", "query", false, schema), "description",
               json_string("`json`: each event as its JSON document; `msgpack`: each its "
                           "stored msgpack bytes in base64"));
}

static json_t *schemas(void)
{
    json_t *s = json_object();
    s = set(s, "Integer",
            described(integer_schema(true, 0),
                      "an integer: a JSON number, or a decimal string (always beyond 2^53)"));
    s = set(s, "Id128",
            described(set(set(typed("string"), "pattern", json_string(ID128_PATTERN)),
                          "maxLength", json_integer(36)),
                      "a 16-byte id: 32 hex digits (a request may use the UUID form with dashes)"));
    s = set(s, "Event", event_schema());
    s = set(s, "EventOrBytes",
            described(set(json_object(), "anyOf",
                          append(append(json_array(), ref(SCHEMA_REF("Event"))),
                                 reply_field_schema(R_BASE64))),
                      "an event: its JSON document, or with `format=msgpack` its stored "
                      "msgpack bytes in base64 (docs/EVENTS.md)"));
    s = set(s, "Delivery", delivery_schema());
    static const reply_field refusal[] = {{"message", R_STR}, {NULL, R_STR}};
    s = set(s, "Refusal", reply_schema(refusal, true));
    s = set(s, "WriteResult", reply_schema(replies[NET_OP_TRANSFER].fields, true));
    s = set(s, "MemberResult", described(reply_schema(replies[NET_OP_TRANSFER].fields, false),
                                         "a batch member's result: a write's reply without v"));
    for (int b = 0; b < 2; b++)
        for (int i = 0; i < NET_OP_COUNT; i++)
            if (net_ops[i].command != NULL) {
                char name[64];
                snprintf(name, sizeof(name), "%s_member_%s", b ? "batch" : "chain",
                         net_ops[i].name);
                s = set(s, name, member_schema(&net_ops[i], b));
            }
    return s;
}

static json_t *components(void)
{
    json_t *c = set(json_object(), "schemas", schemas());
    json_t *params = json_object();
    params = set(params, "IdempotencyKey",
                 header_param("Idempotency-Key", true, TALLY_KEY_BYTES_MAX,
                              "the write's idempotency key: UTF-8, not starting with the byte "
                              "0x1f; a retry with the same key is answered from the inbox"));
    params = set(params, "TallyConsumer",
                 header_param("Tally-Consumer", false, TALLY_CONSUMER_BYTES_MAX,
                              "the key's namespace (default `http`)"));
    params = set(params, "Format", format_param());
    c = set(c, "parameters", params);
    json_t *replayed = set(set(json_object(), "description",
                               json_string("`true` when the reply is a stored outcome replayed")),
                           "schema", typed("string"));
    c = set(c, "headers", set(json_object(), "IdempotentReplayed", replayed));
    json_t *r = json_object();
    for (unsigned status = 400; status < STATUS_MAX; status++)
        if (status_has_codes(status)) {
            char name[32];
            snprintf(name, sizeof(name), "status_%u", status);
            r = set(r, name, status_response(status));
        }
    c = set(c, "responses", r);
    json_t *bearer = set(set(typed("http"), "scheme", json_string("bearer")), "description",
                         json_string("with `tallyd --auth`: a principal's token, whose grants must "
                                     "cover each operation's `x-tally-auth` class "
                                     "(docs/SECURITY.md); without --auth none is needed"));
    return set(c, "securitySchemes", set(json_object(), "bearer", bearer));
}

static json_t *document(void)
{
    json_t *info = set(json_object(), "title", json_string("tally JSON API"));
    info = set(info, "version", json_string("1"));
    info = set(info, "description",
               json_string("tallyd's JSON API (docs/PROTOCOL.md, \"JSON API (HTTP)\"), "
                           "generated by `tallyd --openapi` from the op table; do not edit."));
    json_t *d = set(json_object(), "openapi", json_string("3.1.0"));
    d = set(d, "info", info);
    d = set(d, "servers", append(json_array(), set(json_object(), "url",
                                                   json_string("http://127.0.0.1:7452"))));
    /* a token with --auth, none without: both are this API */
    json_t *security = append(append(json_array(), set(json_object(), "bearer", json_array())),
                              json_object());
    d = set(d, "security", security);
    d = set(d, "paths", paths());
    return set(d, "components", components());
}

char *net_openapi_text(size_t *len)
{
    return net_json_text(document(), JSON_INDENT(2), len);
}
