/*
 * json_codec.c — JSON requests packed as msgpack requests by the op
 * table's field types, and msgpack replies written as JSON by one generic
 * walk (json_codec.h). The value rule's integers, ids and times are
 * common/json_value.c's, shared with the event document (common/event_doc.c).
 */
#include "net/http/json_codec.h"

#include "common/error.h"
#include "common/event_doc.h"
#include "common/json_text.h"
#include "common/json_value.h"
#include "common/limits.h"
#include "common/msgpack_safe.h"
#include "common/transfer_id.h"

#include <inttypes.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- requests: JSON → msgpack ---- */

typedef struct packing {
    msgpack_packer *pk;
    const net_json_envelope *e;
    int rc; /* the first failure, sticky */
    char *detail;
    size_t detail_size;
} packing;

static void pack_fail(packing *p, int rc, const char *detail)
{
    if (p->rc != TALLY_ok)
        return;
    p->rc = rc;
    snprintf(p->detail, p->detail_size, "%s", detail);
}

static void pack_check(packing *p, int pack_rc)
{
    if (pack_rc != 0)
        pack_fail(p, TALLY_overloaded, "out of memory packing the request");
}

static void pack_str(packing *p, const char *s, size_t n)
{
    pack_check(p, msgpack_pack_str(p->pk, n));
    pack_check(p, msgpack_pack_str_body(p->pk, s, n));
}

/* A decimal integer as text: optional '-', 1-20 digits, within
 * -2^63 .. 2^64-1. */
static bool decimal_parse(const char *s, size_t n, bool *negative, uint64_t *magnitude)
{
    *negative = n > 0 && s[0] == '-';
    size_t i = *negative ? 1 : 0;
    if (i == n || n - i > 20)
        return false;
    uint64_t v = 0;
    for (; i < n; i++) {
        if (s[i] < '0' || s[i] > '9')
            return false;
        unsigned d = (unsigned)(s[i] - '0');
        if (v > (UINT64_MAX - d) / 10)
            return false;
        v = v * 10 + d;
    }
    if (*negative && v > (UINT64_C(1) << 63))
        return false;
    *magnitude = v;
    return true;
}

static void pack_integer(packing *p, bool negative, uint64_t magnitude)
{
    if (negative && magnitude > 0)
        pack_check(p, msgpack_pack_int64(p->pk, magnitude == (UINT64_C(1) << 63)
                                                    ? INT64_MIN
                                                    : -(int64_t)magnitude));
    else
        pack_check(p, msgpack_pack_uint64(p->pk, magnitude));
}

static void pack_json_integer(packing *p, json_int_t v)
{
    if (v < 0)
        pack_check(p, msgpack_pack_int64(p->pk, (int64_t)v));
    else
        pack_check(p, msgpack_pack_uint64(p->pk, (uint64_t)v));
}

static void pack_generic(packing *p, const json_t *v, unsigned depth);

static void pack_too_deep(packing *p)
{
    pack_fail(p, TALLY_malformed_request, "nested deeper than 16");
}

static void pack_generic(packing *p, const json_t *v, unsigned depth)
{
    if (depth > TALLY_MSGPACK_DEPTH_MAX)
        return pack_too_deep(p);
    switch (json_typeof(v)) {
    case JSON_OBJECT: {
        const char *k;
        json_t *m;
        pack_check(p, msgpack_pack_map(p->pk, json_object_size(v)));
        json_object_foreach((json_t *)v, k, m) {
            pack_str(p, k, strlen(k));
            pack_generic(p, m, depth + 1);
        }
        return;
    }
    case JSON_ARRAY:
        pack_check(p, msgpack_pack_array(p->pk, json_array_size(v)));
        for (size_t i = 0; i < json_array_size(v); i++)
            pack_generic(p, json_array_get(v, i), depth + 1);
        return;
    case JSON_STRING: return pack_str(p, json_string_value(v), json_string_length(v));
    case JSON_INTEGER: return pack_json_integer(p, json_integer_value(v));
    case JSON_REAL: return pack_check(p, msgpack_pack_double(p->pk, json_real_value(v)));
    case JSON_TRUE: return pack_check(p, msgpack_pack_true(p->pk));
    case JSON_FALSE: return pack_check(p, msgpack_pack_false(p->pk));
    case JSON_NULL: return pack_check(p, msgpack_pack_nil(p->pk));
    }
}

/* An integer field's value: a decimal string becomes the integer. */
static void pack_integer_value(packing *p, const json_t *v, unsigned depth)
{
    bool negative;
    uint64_t magnitude;
    if (json_is_string(v) &&
        decimal_parse(json_string_value(v), json_string_length(v), &negative, &magnitude))
        return pack_integer(p, negative, magnitude);
    pack_generic(p, v, depth);
}

static void pack_members(packing *p, const net_field *f, const json_t *v, unsigned depth);

/* One value by its field's type; what does not convert is packed as it is
 * and refused by the decoder (wrong_type and the rest). */
static void pack_field(packing *p, const net_field *f, const json_t *v, unsigned depth)
{
    tally_id128 id;
    switch (f ? f->type : NET_FIELD_STR) {
    case NET_FIELD_UINT:
    case NET_FIELD_AMOUNT:
    case NET_FIELD_INT: return pack_integer_value(p, v, depth);
    case NET_FIELD_ID128:
        if (json_is_string(v) && json_string_length(v) <= 36 &&
            tally_id128_from_hex(json_string_value(v), &id)) {
            pack_check(p, msgpack_pack_bin(p->pk, sizeof(id.bytes)));
            return pack_check(p, msgpack_pack_bin_body(p->pk, id.bytes, sizeof(id.bytes)));
        }
        return pack_generic(p, v, depth);
    case NET_FIELD_BOOL: /* only query arguments say true and false as text */
        if (p->e->query && json_is_string(v) && strcmp(json_string_value(v), "true") == 0)
            return pack_check(p, msgpack_pack_true(p->pk));
        if (p->e->query && json_is_string(v) && strcmp(json_string_value(v), "false") == 0)
            return pack_check(p, msgpack_pack_false(p->pk));
        return pack_generic(p, v, depth);
    case NET_FIELD_UINTS:
        if (!json_is_array(v))
            return pack_generic(p, v, depth);
        pack_check(p, msgpack_pack_array(p->pk, json_array_size(v)));
        for (size_t i = 0; i < json_array_size(v); i++)
            pack_integer_value(p, json_array_get(v, i), depth + 1);
        return;
    case NET_FIELD_OPS: return pack_members(p, f, v, depth);
    case NET_FIELD_MAPS: return pack_generic(p, v, depth);
    case NET_FIELD_STR: return pack_generic(p, v, depth);
    }
}

static const net_field *field_of(const net_op *op, const char *name)
{
    for (int i = 0; op && i < NET_OP_FIELDS_MAX && op->fields[i].name; i++)
        if (strcmp(op->fields[i].name, name) == 0)
            return &op->fields[i];
    const net_field *min_seq = net_read_min_seq_field();
    if (op && op->kind == NET_KIND_READ && strcmp(name, min_seq->name) == 0)
        return min_seq;
    return NULL;
}

/* The entries of obj, each by its field in op's row (none: as it is). */
static void pack_entries(packing *p, const net_op *op, const json_t *obj, unsigned depth)
{
    const char *k;
    json_t *m;
    json_object_foreach((json_t *)obj, k, m) {
        pack_str(p, k, strlen(k));
        pack_field(p, field_of(op, k), m, depth + 1);
    }
}

/* A key written in the body (a batch member's): none may start as
 * derived keys do. */
static void check_member_key(packing *p, const json_t *key)
{
    if (json_is_string(key) &&
        !net_key_client_may_send((tally_str){json_string_value(key), json_string_length(key)}))
        pack_fail(p, TALLY_malformed_request, NET_DERIVED_KEY_REFUSAL);
}

/* A chain's or batch's `ops`: each member map by its own op's row. A
 * batch member without a key gets net_derived_key(Idempotency-Key, index). */
static void pack_members(packing *p, const net_field *f, const json_t *v, unsigned depth)
{
    (void)f;
    if (!json_is_array(v) || depth + 1 > TALLY_MSGPACK_DEPTH_MAX)
        return pack_generic(p, v, depth);
    bool batch = p->e->op->id == NET_OP_BATCH;
    pack_check(p, msgpack_pack_array(p->pk, json_array_size(v)));
    for (size_t i = 0; i < json_array_size(v); i++) {
        const json_t *m = json_array_get(v, i);
        const json_t *name = json_object_get(m, "op");
        if (!json_is_object(m) || !json_is_string(name)) {
            pack_generic(p, m, depth + 1);
            continue;
        }
        check_member_key(p, json_object_get(m, "key"));
        bool derive_key = batch && p->e->key && !json_object_get(m, "key");
        pack_check(p, msgpack_pack_map(p->pk, json_object_size(m) + (derive_key ? 1 : 0)));
        if (derive_key) {
            char key[NET_DERIVED_KEY_BYTES_MAX + 1];
            pack_str(p, "key", 3);
            pack_str(p, key, net_derived_key(p->e->key, strlen(p->e->key), (uint32_t)i, key));
        }
        tally_str op_name = {json_string_value(name), json_string_length(name)};
        pack_entries(p, net_op_find(op_name), m, depth + 1);
    }
}

bool net_json_field_derived(const net_op *op, const char *field)
{
    return op->id == NET_OP_TRANSFER && strcmp(field, "id") == 0;
}

int net_json_request_pack(const net_json_envelope *e, const json_t *body, msgpack_packer *pk,
                          char *detail, size_t detail_size)
{
    packing p = {pk, e, TALLY_ok, detail, detail_size};
    detail[0] = '\0';
    if (body && !json_is_object(body)) {
        pack_fail(&p, TALLY_malformed_request, "the body is a JSON object");
        return p.rc;
    }
    if (body && json_object_get(body, "auth")) {
        pack_fail(&p, TALLY_unknown_field,
                  "auth: over HTTP the token goes in the Authorization: Bearer header");
        return p.rc;
    }
    bool write = e->op->kind == NET_KIND_WRITE;
    bool batch = e->op->id == NET_OP_BATCH;
    if (write && e->key && !net_key_client_may_send(tally_str_from(e->key))) {
        pack_fail(&p, TALLY_malformed_request, NET_DERIVED_KEY_REFUSAL);
        return p.rc;
    }
    /* a transfer without an id: the id of (consumer, key), as the CLI
     * and libtally's tally_uuid_from_key derive it */
    bool derive_id = net_json_field_derived(e->op, "id") && e->key && !json_object_get(body, "id");
    size_t n = 2 + (write ? 1 : 0) + (write && !batch ? 1 : 0) + (e->auth.ptr ? 1 : 0) +
               (derive_id ? 1 : 0) + (body ? json_object_size(body) : 0);
    pack_check(&p, msgpack_pack_map(pk, n));
    pack_str(&p, "v", 1);
    pack_check(&p, msgpack_pack_uint32(pk, TALLY_PROTOCOL_VERSION));
    pack_str(&p, "op", 2);
    pack_str(&p, e->op->name, strlen(e->op->name));
    if (e->auth.ptr) {
        pack_str(&p, "auth", 4);
        pack_str(&p, e->auth.ptr, e->auth.len);
    }
    if (write) {
        pack_str(&p, "consumer", 8);
        pack_str(&p, e->consumer, strlen(e->consumer));
    }
    if (write && !batch) {
        pack_str(&p, "key", 3);
        pack_str(&p, e->key, strlen(e->key));
    }
    if (derive_id) {
        tally_id128 id;
        transfer_id_from_key(e->consumer, e->key, &id);
        pack_str(&p, "id", 2);
        pack_check(&p, msgpack_pack_bin(pk, sizeof(id.bytes)));
        pack_check(&p, msgpack_pack_bin_body(pk, id.bytes, sizeof(id.bytes)));
    }
    if (body)
        pack_entries(&p, e->op, body, 1);
    return p.rc;
}

/* ---- replies: msgpack → JSON ---- */

/* Bytes as the value rule says: 16 as an id's hex, others base64. */
static json_t *json_of_bin(const char *ptr, uint32_t n)
{
    if (n == 16)
        return json_value_id((const uint8_t *)ptr);
    size_t out_len = 4 * ((size_t)n / 3 + 1) + 1;
    unsigned char *b64 = malloc(out_len);
    if (b64 == NULL)
        return NULL;
    int w = EVP_EncodeBlock(b64, (const unsigned char *)ptr, (int)n);
    json_t *s = json_stringn((const char *)b64, (size_t)w);
    free(b64);
    return s;
}

/* An event's stored bytes as its JSON document (common/event_doc.h);
 * NULL when they are no event. */
static json_t *json_of_event(const msgpack_object *o)
{
    json_t *doc = NULL;
    if (o->type != MSGPACK_OBJECT_BIN ||
        event_doc_json(o->via.bin.ptr, o->via.bin.size, &doc) != TALLY_ok)
        return NULL;
    return doc;
}

/* How a walk gives the events a reply carries (log_read's "events",
 * sub_fetch's "events"[i]."event"): as documents, or as their bytes. */
typedef enum walk_mode { WALK_EVENT_BYTES, WALK_EVENT_DOCS } walk_mode;

static json_t *json_of(const msgpack_object *o, walk_mode mode);

/* The value of a map's entry named k: an event's bytes under "event", and
 * the bytes in an "events" array, as documents when mode says so. */
static json_t *json_of_entry(const msgpack_object *k, const msgpack_object *v, walk_mode mode)
{
    bool docs = mode == WALK_EVENT_DOCS;
    if (docs && v->type == MSGPACK_OBJECT_BIN && k->via.str.size == 5 &&
        memcmp(k->via.str.ptr, "event", 5) == 0)
        return json_of_event(v);
    if (!docs || v->type != MSGPACK_OBJECT_ARRAY || k->via.str.size != 6 ||
        memcmp(k->via.str.ptr, "events", 6) != 0)
        return json_of(v, mode);
    json_t *a = json_array();
    for (uint32_t i = 0; a && i < v->via.array.size; i++) {
        const msgpack_object *e = &v->via.array.ptr[i];
        json_t *j = e->type == MSGPACK_OBJECT_BIN ? json_of_event(e) : json_of(e, mode);
        if (j == NULL || json_array_append_new(a, j) != 0) {
            json_decref(a);
            return NULL;
        }
    }
    return a;
}

static json_t *json_of_map(const msgpack_object *o, walk_mode mode)
{
    json_t *m = json_object();
    for (uint32_t i = 0; m && i < o->via.map.size; i++) {
        const msgpack_object *k = &o->via.map.ptr[i].key;
        json_t *v = k->type == MSGPACK_OBJECT_STR ? json_of_entry(k, &o->via.map.ptr[i].val, mode)
                                                  : NULL;
        /* setn_new takes v's reference, also when it fails */
        if (v == NULL || json_object_setn_new(m, k->via.str.ptr, k->via.str.size, v) != 0) {
            json_decref(m);
            return NULL;
        }
    }
    return m;
}

static json_t *json_of(const msgpack_object *o, walk_mode mode)
{
    switch (o->type) {
    case MSGPACK_OBJECT_NIL: return json_null();
    case MSGPACK_OBJECT_BOOLEAN: return json_boolean(o->via.boolean);
    case MSGPACK_OBJECT_POSITIVE_INTEGER: return json_value_u64(o->via.u64);
    case MSGPACK_OBJECT_NEGATIVE_INTEGER: return json_value_i64(o->via.i64);
    case MSGPACK_OBJECT_FLOAT32:
    case MSGPACK_OBJECT_FLOAT64: return json_real(o->via.f64);
    /* a string stored through msgpack that is not UTF-8: each byte above
     * 0x7f as U+FFFD */
    case MSGPACK_OBJECT_STR: return json_textn(o->via.str.ptr, o->via.str.size);
    case MSGPACK_OBJECT_BIN: return json_of_bin(o->via.bin.ptr, o->via.bin.size);
    case MSGPACK_OBJECT_ARRAY: {
        json_t *a = json_array();
        for (uint32_t i = 0; a && i < o->via.array.size; i++) {
            json_t *v = json_of(&o->via.array.ptr[i], mode);
            if (v == NULL || json_array_append_new(a, v) != 0) {
                json_decref(a);
                return NULL;
            }
        }
        return a;
    }
    case MSGPACK_OBJECT_MAP: return json_of_map(o, mode);
    case MSGPACK_OBJECT_EXT: return json_null(); /* tally packs none */
    }
    return NULL;
}

static int reply_code(const msgpack_object *m)
{
    tally_str s;
    char name[64];
    if (!msgpack_safe_get_str(msgpack_safe_map_get(m, "code"), &s) || s.len >= sizeof(name))
        return -1;
    memcpy(name, s.ptr, s.len);
    name[s.len] = '\0';
    return tally_error_from_name(name);
}

char *net_json_text(json_t *j, size_t flags, size_t *len)
{
    char *s = j ? json_dumps(j, flags | JSON_PRESERVE_ORDER) : NULL;
    json_decref(j);
    char *nl = s ? realloc(s, strlen(s) + 2) : NULL;
    if (nl == NULL) {
        free(s);
        return NULL;
    }
    *len = strlen(nl);
    nl[(*len)++] = '\n';
    nl[*len] = '\0';
    return nl;
}

int net_json_reply(const void *bytes, size_t len, bool event_docs, char **text, size_t *text_len,
                   int *code, bool *replayed)
{
    msgpack_unpacked u;
    msgpack_unpacked_init(&u);
    *text = NULL;
    *code = -1;
    *replayed = false;
    int rc = msgpack_safe_unpack(bytes, len, MSGPACK_SAFE_DEPTH_LIMIT, &u);
    json_t *j = rc == TALLY_ok && u.data.type == MSGPACK_OBJECT_MAP
                    ? json_of(&u.data, event_docs ? WALK_EVENT_DOCS : WALK_EVENT_BYTES)
                    : NULL;
    if (j) {
        *code = reply_code(&u.data);
        const msgpack_object *r = msgpack_safe_map_get(&u.data, "replayed");
        *replayed = r && r->type == MSGPACK_OBJECT_BOOLEAN && r->via.boolean;
    }
    msgpack_unpacked_destroy(&u);
    if (j == NULL)
        return TALLY_internal;
    *text = net_json_text(j, JSON_COMPACT, text_len);
    return *text ? TALLY_ok : TALLY_internal;
}

/* ---- statuses ---- */

unsigned net_json_status(int code)
{
    static const struct {
        int code;
        unsigned status;
    } rows[] = {
        {TALLY_ok, 200},
        {TALLY_idempotency_key_reused, 409},
        {TALLY_unknown_op, 404},
        {TALLY_not_found, 404},
        {TALLY_subscriber_not_found, 404},
        {TALLY_dead_letter_not_found, 404},
        {TALLY_request_too_large, 413},
        {TALLY_unauthenticated, 401},
        {TALLY_forbidden, 403},
        {TALLY_overloaded, 503},
        {TALLY_storage_full, 503},
        {TALLY_shutting_down, 503},
        {TALLY_cluster_unavailable, 503},
        {TALLY_not_caught_up, 503},
        {TALLY_cluster_diverged, 503},
    };
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++)
        if (rows[i].code == code)
            return rows[i].status;
    if (code < 0)
        return 500;
    switch (tally_error_class_of(code)) {
    case TALLY_CLASS_BUSINESS:
    case TALLY_CLASS_VALIDATION: return 422;
    case TALLY_CLASS_REQUEST: return 400;
    case TALLY_CLASS_FAULT: return 500;
    }
    return 500;
}
