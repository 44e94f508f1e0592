/*
 * event_doc.c — an event as a JSON document (event_doc.h): the event's
 * header fields (as `tally log --json` prints them) and its body's parts
 * under "data", read from either event format: a body part is a map of
 * named fields (format 1) or a row of the same fields in order (format 2,
 * docs/EVENTS.md). Accounts, transfers and entitlements take the shape
 * `tally account get --json` and its siblings print (tests/relay/
 * check_event_doc holds them equal); the parts that are arrays (a dead
 * letter, a webhook delivery) become objects with their fields named as
 * in docs/EVENTS.md, a webhook's body its JSON under "payload", or base64
 * under "body_base64" when it is not JSON.
 */
#include "common/event_doc.h"

#include "common/error.h"
#include "common/json_text.h"
#include "common/json_value.h"
#include "common/log_event.h"
#include "common/msgpack_safe.h"

#include <openssl/evp.h>
#include <stdlib.h>
#include <string.h>

/* The flags the document spells out (docs/EVENTS.md). */
#define ACCOUNT_DEBITS_MUST_NOT_EXCEED_CREDITS 1u
#define ACCOUNT_CREDITS_MUST_NOT_EXCEED_DEBITS 2u
#define ACCOUNT_CLOSED 4u
#define TRANSFER_PENDING 1u

/* ---- reading a body part: a map by name, a row in order ---- */

typedef struct part_reader {
    const msgpack_object *o;
    uint32_t pos;
    bool ok;
} part_reader;

static part_reader reader_of(const msgpack_object *o)
{
    return (part_reader){o, 0, o != NULL && (o->type == MSGPACK_OBJECT_MAP ||
                                             o->type == MSGPACK_OBJECT_ARRAY)};
}

/* The next field (a row) or the one named (a map); NULL (ok false) when
 * missing. peek leaves a row's field for the next call. */
static const msgpack_object *field_of(part_reader *r, const char *name, bool peek)
{
    const msgpack_object *f = NULL;
    if (r->ok && r->o->type == MSGPACK_OBJECT_ARRAY)
        f = r->pos < r->o->via.array.size ? &r->o->via.array.ptr[r->pos] : NULL;
    else if (r->ok)
        f = msgpack_safe_map_get(r->o, name);
    r->pos += f != NULL && !peek;
    r->ok = r->ok && f != NULL;
    return f;
}

static uint64_t read_u64(part_reader *r, const char *name, uint64_t max)
{
    uint64_t v = 0;
    const msgpack_object *f = field_of(r, name, false);
    r->ok = r->ok && msgpack_safe_get_u64(f, &v) && v <= max;
    return r->ok ? v : 0;
}

static int64_t read_i64(part_reader *r, const char *name)
{
    int64_t v = 0;
    const msgpack_object *f = field_of(r, name, false);
    r->ok = r->ok && msgpack_safe_get_i64(f, &v);
    return r->ok ? v : 0;
}

static tally_str read_str(part_reader *r, const char *name)
{
    tally_str s = {NULL, 0};
    const msgpack_object *f = field_of(r, name, false);
    r->ok = r->ok && msgpack_safe_get_str(f, &s);
    return s;
}

/* Whether an appended field is there: a row may end before it, a map
 * lack it (docs/EVENTS.md: a reader takes it as 0). */
static bool has_field(const part_reader *r, const char *name)
{
    if (!r->ok)
        return false;
    if (r->o->type == MSGPACK_OBJECT_ARRAY)
        return r->pos < r->o->via.array.size;
    return msgpack_safe_map_get(r->o, name) != NULL;
}

static uint64_t read_appended_u64(part_reader *r, const char *name, uint64_t max)
{
    return has_field(r, name) ? read_u64(r, name, max) : 0;
}

static int64_t read_appended_i64(part_reader *r, const char *name)
{
    return has_field(r, name) ? read_i64(r, name) : 0;
}

static tally_id128 read_appended_id(part_reader *r, const char *name)
{
    tally_id128 id = {{0}};
    if (has_field(r, name))
        r->ok = r->ok && msgpack_safe_get_id128(field_of(r, name, false), &id);
    return id;
}

/* A field that may be nil: false (the nil read) when it is. */
static bool read_present(part_reader *r, const char *name)
{
    const msgpack_object *f = field_of(r, name, true);
    bool present = r->ok && f->type != MSGPACK_OBJECT_NIL;
    if (r->ok && !present)
        field_of(r, name, false);
    return present;
}

/* A state: its name (a map) or its number (a row), named by name_of. */
static const char *read_state(part_reader *r, const char *name, const char *(*name_of)(uint64_t))
{
    const msgpack_object *f = field_of(r, name, false);
    uint64_t n;
    tally_str s;
    if (r->ok && f->type == MSGPACK_OBJECT_STR && msgpack_safe_get_str(f, &s)) {
        for (uint64_t i = 1; i < 16 && name_of(i); i++)
            if (strlen(name_of(i)) == s.len && memcmp(name_of(i), s.ptr, s.len) == 0)
                return name_of(i);
    } else if (r->ok && msgpack_safe_get_u64(f, &n) && name_of(n)) {
        return name_of(n);
    }
    r->ok = false;
    return NULL;
}

/* ---- the parts ---- */

/* A time that may be unset (0): its RFC 3339 text, or null. */
static json_t *time_or_null(int64_t ms)
{
    return ms ? json_value_time(ms) : json_null();
}

/* Adds name: v to obj (v's reference taken; NULL v: *ok false). */
static void put(json_t *obj, const char *name, json_t *v, bool *ok)
{
    if (v == NULL || json_object_set_new(obj, name, v) != 0)
        *ok = false;
}

/* The caller's own values of an account or a transfer (docs/EVENTS.md,
 * appended fields). */
typedef struct user_data {
    tally_id128 u128;
    uint64_t u64;
    uint64_t u32;
} user_data;

static user_data read_user_data(part_reader *r)
{
    user_data u;
    u.u128 = read_appended_id(r, "user_data_128");
    u.u64 = read_appended_u64(r, "user_data_64", UINT64_MAX);
    u.u32 = read_appended_u64(r, "user_data_32", UINT32_MAX);
    return u;
}

/* user_data_128 as 32 hex digits, as ids are. */
static void put_user_data(json_t *j, const user_data *u, bool *ok)
{
    put(j, "user_data_128", json_value_id(u->u128.bytes), ok);
    put(j, "user_data_64", json_value_u64(u->u64), ok);
    put(j, "user_data_32", json_value_u64(u->u32), ok);
}

static json_t *account_doc(const msgpack_object *o, bool *ok)
{
    part_reader r = reader_of(o);
    json_t *j = json_object();
    uint64_t id = read_u64(&r, "id", UINT64_MAX);
    uint64_t ledger = read_u64(&r, "ledger", UINT32_MAX);
    uint64_t code = read_u64(&r, "code", UINT16_MAX);
    uint64_t flags = read_u64(&r, "flags", UINT16_MAX);
    int64_t balances[4];
    static const char *const balance_names[] = {"debits_posted", "credits_posted",
                                                "debits_pending", "credits_pending"};
    for (int i = 0; i < 4; i++)
        balances[i] = read_i64(&r, balance_names[i]);
    uint64_t version = read_u64(&r, "version", UINT64_MAX);
    uint64_t created_seq = read_u64(&r, "created_seq", UINT64_MAX);
    int64_t created_ms = read_appended_i64(&r, "created_ms");
    user_data u = read_user_data(&r);
    *ok = r.ok && j != NULL;
    if (!*ok)
        return j;
    put(j, "id", json_value_u64(id), ok);
    put(j, "ledger", json_value_u64(ledger), ok);
    put(j, "code", json_value_u64(code), ok);
    put(j, "flags", json_value_u64(flags), ok);
    put(j, "debits_must_not_exceed_credits",
        json_boolean(flags & ACCOUNT_DEBITS_MUST_NOT_EXCEED_CREDITS), ok);
    put(j, "credits_must_not_exceed_debits",
        json_boolean(flags & ACCOUNT_CREDITS_MUST_NOT_EXCEED_DEBITS), ok);
    for (int i = 0; i < 4; i++)
        put(j, balance_names[i], json_value_i64(balances[i]), ok);
    put(j, "version", json_value_u64(version), ok);
    put(j, "created_seq", json_value_u64(created_seq), ok);
    put(j, "created", time_or_null(created_ms), ok);
    put_user_data(j, &u, ok);
    put(j, "closed", json_boolean(flags & ACCOUNT_CLOSED), ok);
    return j;
}

static json_t *transfer_doc(const msgpack_object *o, bool *ok)
{
    part_reader r = reader_of(o);
    json_t *j = json_object();
    tally_id128 id = {{0}};
    r.ok = r.ok && msgpack_safe_get_id128(field_of(&r, "id", false), &id);
    uint64_t debit = read_u64(&r, "debit_account_id", UINT64_MAX);
    uint64_t credit = read_u64(&r, "credit_account_id", UINT64_MAX);
    int64_t amount = read_i64(&r, "amount");
    uint64_t ledger = read_u64(&r, "ledger", UINT32_MAX);
    uint64_t code = read_u64(&r, "code", UINT16_MAX);
    uint64_t flags = read_u64(&r, "flags", UINT16_MAX);
    const char *state = read_state(&r, "state", log_transfer_state_name);
    uint64_t timeout_s = read_u64(&r, "timeout_s", UINT32_MAX);
    int64_t expires_at_ms = read_i64(&r, "expires_at_ms");
    int64_t posted_amount = read_i64(&r, "posted_amount");
    uint64_t version = read_u64(&r, "version", UINT64_MAX);
    uint64_t created_seq = read_u64(&r, "created_seq", UINT64_MAX);
    uint64_t resolved_seq = read_u64(&r, "resolved_seq", UINT64_MAX);
    int64_t created_ms = read_i64(&r, "created_ms");
    user_data u = read_user_data(&r);
    tally_id128 reverses = read_appended_id(&r, "reverses");
    int64_t reversed_amount = read_appended_i64(&r, "reversed_amount");
    *ok = r.ok && j != NULL;
    if (!*ok)
        return j;
    put(j, "id", json_value_id(id.bytes), ok);
    put(j, "debit_account_id", json_value_u64(debit), ok);
    put(j, "credit_account_id", json_value_u64(credit), ok);
    put(j, "amount", json_value_i64(amount), ok);
    put(j, "ledger", json_value_u64(ledger), ok);
    put(j, "code", json_value_u64(code), ok);
    put(j, "flags", json_value_u64(flags), ok);
    put(j, "pending", json_boolean(flags & TRANSFER_PENDING), ok);
    put(j, "state", json_string(state), ok);
    put(j, "timeout_s", json_value_u64(timeout_s), ok);
    put(j, "expires_at", time_or_null(expires_at_ms), ok);
    put(j, "posted_amount", json_value_i64(posted_amount), ok);
    put(j, "version", json_value_u64(version), ok);
    put(j, "created_seq", json_value_u64(created_seq), ok);
    put(j, "resolved_seq", json_value_u64(resolved_seq), ok);
    put(j, "created", time_or_null(created_ms), ok);
    put_user_data(j, &u, ok);
    put(j, "reverses", json_value_id(reverses.bytes), ok);
    put(j, "reversed_amount", json_value_i64(reversed_amount), ok);
    return j;
}

static json_t *entitlement_doc(const msgpack_object *o, bool *ok)
{
    part_reader r = reader_of(o);
    json_t *j = json_object();
    tally_str subject = read_str(&r, "subject");
    tally_str feature = read_str(&r, "feature");
    const char *state = read_state(&r, "state", log_entitlement_state_name);
    bool lifetime = !read_present(&r, "valid_until_ms");
    int64_t valid_until_ms = lifetime ? 0 : read_i64(&r, "valid_until_ms");
    uint64_t version = read_u64(&r, "version", UINT64_MAX);
    bool has_source_order = read_present(&r, "source_order");
    uint64_t source_order = has_source_order ? read_u64(&r, "source_order", UINT64_MAX) : 0;
    int64_t granted_ms = read_i64(&r, "granted_ms");
    int64_t updated_ms = read_i64(&r, "updated_ms");
    *ok = r.ok && j != NULL;
    if (!*ok)
        return j;
    put(j, "subject", json_textn(subject.ptr, subject.len), ok);
    put(j, "feature", json_textn(feature.ptr, feature.len), ok);
    put(j, "state", json_string(state), ok);
    put(j, "lifetime", json_boolean(lifetime), ok);
    put(j, "valid_until", lifetime ? json_null() : json_value_time(valid_until_ms), ok);
    put(j, "valid_until_ms", lifetime ? json_null() : json_value_i64(valid_until_ms), ok);
    put(j, "version", json_value_u64(version), ok);
    put(j, "source_order", has_source_order ? json_value_u64(source_order) : json_null(), ok);
    put(j, "granted", time_or_null(granted_ms), ok);
    put(j, "updated", time_or_null(updated_ms), ok);
    return j;
}

/* The array parts: their fields in order (docs/EVENTS.md). */
static const char *const dead_letter_fields[] = {"subscriber", "seq", "attempts", "parked_ms",
                                                 "error", NULL};
static const char *const webhook_fields[] = {"source", "event_id", "event_type", "signed_at_s",
                                             "body", NULL};
static const char *const subscriber_fields[] = {"name", "ack_floor", "delivered_seq", "in_flight",
                                                "dead_letters", "active_ms",
                                                "inactive_expiry_ms", "contact", NULL};
static const char *const endpoint_fields[] = {"name", "state", "reason",
                                              "previous_secret_until_ms", "recover_since_ms",
                                              NULL};

/* A webhook body: its JSON as "payload", else base64 as "body_base64". */
static void body_doc(json_t *obj, const char *ptr, uint32_t n, bool *ok)
{
    json_t *payload = json_loadb(ptr, n, JSON_DECODE_ANY | JSON_REJECT_DUPLICATES, NULL);
    if (payload)
        return put(obj, "payload", payload, ok);
    unsigned char *b64 = malloc(4 * ((size_t)n / 3 + 1) + 1);
    if (b64 == NULL) {
        *ok = false;
        return;
    }
    int w = EVP_EncodeBlock(b64, (const unsigned char *)ptr, (int)n);
    put(obj, "body_base64", json_stringn((const char *)b64, (size_t)w), ok);
    free(b64);
}

/* An array part as an object of its named fields. */
static json_t *array_part_doc(const msgpack_object *o, const char *const *names, bool *ok)
{
    json_t *obj = json_object();
    *ok = obj != NULL && o->type == MSGPACK_OBJECT_ARRAY;
    for (uint32_t i = 0; *ok && names[i]; i++) {
        if (i >= o->via.array.size) {
            *ok = false;
            break;
        }
        const msgpack_object *v = &o->via.array.ptr[i];
        switch (v->type) {
        case MSGPACK_OBJECT_STR: put(obj, names[i], json_textn(v->via.str.ptr, v->via.str.size), ok); break;
        case MSGPACK_OBJECT_POSITIVE_INTEGER: put(obj, names[i], json_value_u64(v->via.u64), ok); break;
        case MSGPACK_OBJECT_NEGATIVE_INTEGER: put(obj, names[i], json_value_i64(v->via.i64), ok); break;
        case MSGPACK_OBJECT_NIL: put(obj, names[i], json_null(), ok); break;
        case MSGPACK_OBJECT_BIN: body_doc(obj, v->via.bin.ptr, v->via.bin.size, ok); break;
        default: *ok = false; break;
        }
    }
    return obj;
}

/* The body's parts by role, under the names the document gives them. */
static const struct {
    log_body_part part;
    const char *name;
    json_t *(*doc)(const msgpack_object *o, bool *ok);
} parts[] = {
    {LOG_PART_ACCOUNT, "account", account_doc},
    {LOG_PART_TRANSFER, "transfer", transfer_doc},
    {LOG_PART_DEBIT_ACCOUNT, "debit_account", account_doc},
    {LOG_PART_CREDIT_ACCOUNT, "credit_account", account_doc},
    {LOG_PART_ENTITLEMENT, "entitlement", entitlement_doc},
};

/* {"account": {...}} etc. from the event's body; NULL (*rc set) when a
 * part does not decode or memory runs out. */
static json_t *data_doc(const log_event *ev, int *rc)
{
    json_t *data = json_object();
    bool ok = data != NULL;
    for (size_t i = 0; ok && i < sizeof(parts) / sizeof(parts[0]); i++) {
        const msgpack_object *o = log_event_part(ev, parts[i].part);
        if (o != NULL)
            put(data, parts[i].name, parts[i].doc(o, &ok), &ok);
    }
    static const struct {
        log_body_part part;
        const char *name;
        const char *const *fields;
    } rows[] = {{LOG_PART_DEAD_LETTER, "dead_letter", dead_letter_fields},
                {LOG_PART_WEBHOOK, "webhook", webhook_fields},
                {LOG_PART_SUBSCRIBER, "subscriber", subscriber_fields},
                {LOG_PART_ENDPOINT, "endpoint", endpoint_fields}};
    for (size_t i = 0; ok && i < sizeof(rows) / sizeof(rows[0]); i++) {
        const msgpack_object *row = log_event_part(ev, rows[i].part);
        if (row)
            put(data, rows[i].name, array_part_doc(row, rows[i].fields, &ok), &ok);
    }
    if (!ok) {
        *rc = data ? TALLY_corrupt_record : TALLY_out_of_memory;
        json_decref(data);
        return NULL;
    }
    return data;
}

/* ---- the header ---- */

/* The entity: {kind, id} for accounts and transfers, {kind, subject,
 * feature} for entitlements, {kind, subscriber, seq} for dead letters,
 * {kind, source, event_id} for webhooks, {kind, name} for subscribers and
 * endpoints. */
static json_t *entity_doc(const log_entity *en, bool *ok)
{
    json_t *j = json_object();
    if (j == NULL) {
        *ok = false;
        return NULL;
    }
    put(j, "kind", json_string(log_entity_kind_name(en->kind)), ok);
    switch (en->kind) {
    case LOG_ENTITY_ACCOUNT: put(j, "id", json_value_u64(en->account_id), ok); break;
    case LOG_ENTITY_TRANSFER: put(j, "id", json_value_id(en->transfer_id.bytes), ok); break;
    case LOG_ENTITY_DEAD_LETTER:
        put(j, "subscriber", json_textn(en->subscriber.ptr, en->subscriber.len), ok);
        put(j, "seq", json_value_u64(en->letter_seq), ok);
        break;
    case LOG_ENTITY_WEBHOOK:
        put(j, "source", json_textn(en->webhook_source.ptr, en->webhook_source.len), ok);
        put(j, "event_id", json_textn(en->webhook_event_id.ptr, en->webhook_event_id.len), ok);
        break;
    case LOG_ENTITY_SUBSCRIBER:
        put(j, "name", json_textn(en->subscriber.ptr, en->subscriber.len), ok);
        break;
    case LOG_ENTITY_ENDPOINT:
        put(j, "name", json_textn(en->endpoint.ptr, en->endpoint.len), ok);
        break;
    default:
        put(j, "subject", json_textn(en->subject.ptr, en->subject.len), ok);
        put(j, "feature", json_textn(en->feature.ptr, en->feature.len), ok);
        break;
    }
    return j;
}

/* The event id as a UUID's text, with dashes. */
static json_t *uuid_text(const tally_id128 *id)
{
    char out[37];
    bytes_id128_uuid_text(id, out);
    return json_string(out);
}

static json_t *header_doc(const log_event *ev, bool *ok)
{
    json_t *j = json_object();
    if (j == NULL) {
        *ok = false;
        return NULL;
    }
    put(j, "seq", json_value_u64(ev->seq), ok);
    put(j, "event_id", uuid_text(&ev->id), ok);
    put(j, "type", json_textn(ev->type.ptr, ev->type.len), ok);
    put(j, "entity_kind", json_string(log_entity_kind_name(ev->entity.kind)), ok);
    put(j, "entity", entity_doc(&ev->entity, ok), ok);
    put(j, "entity_version", json_value_u64(ev->entity_version), ok);
    put(j, "time", json_value_time(ev->time_ms), ok);
    put(j, "time_ms", json_value_i64(ev->time_ms), ok);
    bool consumer = ev->has_causation && ev->consumer.len > 0;
    bool key = ev->has_causation && ev->key.len > 0;
    put(j, "consumer", consumer ? json_textn(ev->consumer.ptr, ev->consumer.len) : json_null(), ok);
    put(j, "key", key ? json_textn(ev->key.ptr, ev->key.len) : json_null(), ok);
    return j;
}

int event_doc_json(const void *bytes, size_t len, json_t **out)
{
    msgpack_unpacked up;
    msgpack_unpacked_init(&up);
    log_event ev;
    int rc = log_event_decode(bytes, len, &up, &ev);
    bool ok = rc == TALLY_ok;
    json_t *doc = ok ? header_doc(&ev, &ok) : NULL;
    if (rc == TALLY_ok && !ok)
        rc = TALLY_out_of_memory;
    json_t *data = rc == TALLY_ok ? data_doc(&ev, &rc) : NULL;
    if (rc == TALLY_ok && json_object_set_new(doc, "data", data) != 0)
        rc = TALLY_out_of_memory;
    msgpack_unpacked_destroy(&up);
    if (rc != TALLY_ok) {
        json_decref(doc);
        return rc;
    }
    *out = doc;
    return TALLY_ok;
}

int event_doc_text(const void *bytes, size_t len, size_t max_bytes, char **text,
                   size_t *text_len)
{
    json_t *doc = NULL;
    int rc = event_doc_json(bytes, len, &doc);
    if (rc != TALLY_ok)
        return rc;
    char *s = json_dumps(doc, JSON_COMPACT | JSON_PRESERVE_ORDER);
    json_decref(doc);
    if (s == NULL)
        return TALLY_out_of_memory;
    *text_len = strlen(s);
    if (*text_len > max_bytes) {
        free(s);
        return TALLY_corrupt_record;
    }
    *text = s;
    return TALLY_ok;
}
