/*
 * log_event.c — the one event codec (see log_event.h; docs/EVENTS.md).
 *
 * Encoding (format 2): a msgpack array of 12 fields in this order: v, seq,
 * id, type, entity, entity_version, time_ms, causation, correlation, body,
 * prev_hash, hash. Format 1, still read, is a map of the same fields by
 * name. The hash entry is last and fixed-size so that anyone can verify
 * the chain from the raw bytes.
 */
#include "common/log_event.h"

#include "common/error.h"
#include "common/limits.h"
#include "common/msgpack_safe.h"
#include "common/sha256.h"

#include <assert.h>
#include <string.h>

#define LOG_EVENT_FIELDS 12

const char *log_entity_kind_name(log_entity_kind kind)
{
    switch (kind) {
    case LOG_ENTITY_ACCOUNT: return "account";
    case LOG_ENTITY_TRANSFER: return "transfer";
    case LOG_ENTITY_ENTITLEMENT: return "entitlement";
    case LOG_ENTITY_DEAD_LETTER: return "dead_letter";
    case LOG_ENTITY_WEBHOOK: return "webhook";
    case LOG_ENTITY_SUBSCRIBER: return "subscriber";
    case LOG_ENTITY_ENDPOINT: return "endpoint";
    }
    return "unknown";
}

static const char *const event_type_names[LOG_EVENT_TYPE_END] = {
#define LOG_EVENT_TYPE_NAME(id, name) [id] = name,
    LOG_EVENT_TYPES(LOG_EVENT_TYPE_NAME)
#undef LOG_EVENT_TYPE_NAME
};

const char *log_event_type_name(log_event_type type)
{
    return type > LOG_EVENT_TYPE_NONE && type < LOG_EVENT_TYPE_END ? event_type_names[type]
                                                                    : NULL;
}

bool log_event_type_of(tally_str name, log_event_type *out)
{
    for (int t = LOG_EVENT_TYPE_NONE + 1; t < LOG_EVENT_TYPE_END; t++)
        if (tally_str_equal(name, tally_str_from(event_type_names[t]))) {
            *out = (log_event_type)t;
            return true;
        }
    *out = LOG_EVENT_TYPE_NONE;
    return false;
}

bool log_event_type_is(const log_event *ev, log_event_type type)
{
    const char *name = log_event_type_name(type);
    return name != NULL && tally_str_equal(ev->type, tally_str_from(name));
}

/* The length of the trailing hash entry of an encoded event, by its first
 * byte (fixarray 12: format 2; fixmap 12: format 1); 0 for neither. */
static size_t hash_entry_bytes(const uint8_t *bytes, size_t len)
{
    if (len == 0)
        return 0;
    if (bytes[0] == 0x90 + LOG_EVENT_FIELDS)
        return LOG_HASH_ENTRY_BYTES;
    if (bytes[0] == 0x80 + LOG_EVENT_FIELDS)
        return LOG_HASH_ENTRY_BYTES_V1;
    return 0;
}

int log_event_hash(const uint8_t prev_hash[LOG_HASH_BYTES], const void *bytes, size_t len,
                   uint8_t out[LOG_HASH_BYTES])
{
    size_t entry = hash_entry_bytes(bytes, len);
    if (entry == 0 || len < entry)
        return TALLY_corrupt_record;
    sha256_ctx ctx;
    sha256_begin(&ctx);
    sha256_update(&ctx, prev_hash, LOG_HASH_BYTES);
    sha256_update(&ctx, bytes, len - entry);
    sha256_finish(&ctx, out);
    return TALLY_ok;
}

/* ---- encoding (format 2) ---- */

static int pack_entity(msgpack_packer *pk, const log_entity *e)
{
    switch (e->kind) {
    case LOG_ENTITY_ACCOUNT:
        return msgpack_pack_array(pk, 2) || msgpack_pack_uint8(pk, e->kind) ||
               msgpack_pack_uint64(pk, e->account_id);
    case LOG_ENTITY_TRANSFER:
        return msgpack_pack_array(pk, 2) || msgpack_pack_uint8(pk, e->kind) ||
               msgpack_safe_pack_bin(pk, e->transfer_id.bytes, 16);
    case LOG_ENTITY_ENTITLEMENT:
        return msgpack_pack_array(pk, 3) || msgpack_pack_uint8(pk, e->kind) ||
               msgpack_safe_pack_str(pk, e->subject) || msgpack_safe_pack_str(pk, e->feature);
    case LOG_ENTITY_DEAD_LETTER:
        return msgpack_pack_array(pk, 3) || msgpack_pack_uint8(pk, e->kind) ||
               msgpack_safe_pack_str(pk, e->subscriber) || msgpack_pack_uint64(pk, e->letter_seq);
    case LOG_ENTITY_WEBHOOK:
        return msgpack_pack_array(pk, 3) || msgpack_pack_uint8(pk, e->kind) ||
               msgpack_safe_pack_str(pk, e->webhook_source) ||
               msgpack_safe_pack_str(pk, e->webhook_event_id);
    case LOG_ENTITY_SUBSCRIBER:
        return msgpack_pack_array(pk, 2) || msgpack_pack_uint8(pk, e->kind) ||
               msgpack_safe_pack_str(pk, e->subscriber);
    case LOG_ENTITY_ENDPOINT:
        return msgpack_pack_array(pk, 2) || msgpack_pack_uint8(pk, e->kind) ||
               msgpack_safe_pack_str(pk, e->endpoint);
    }
    return -1;
}

static int pack_optional_str(msgpack_packer *pk, tally_str s)
{
    return s.len == 0 ? msgpack_pack_nil(pk) : msgpack_safe_pack_str(pk, s);
}

/* Everything before the hash entry. */
static int pack_event_head(msgpack_packer *pk, const log_event_draft *a, uint64_t seq,
                           const tally_id128 *id, const uint8_t prev_hash[LOG_HASH_BYTES])
{
    return msgpack_pack_array(pk, LOG_EVENT_FIELDS) ||
           msgpack_pack_uint32(pk, LOG_EVENT_FORMAT) || msgpack_pack_uint64(pk, seq) ||
           msgpack_safe_pack_bin(pk, id->bytes, 16) ||
           msgpack_safe_pack_cstr(pk, log_event_type_name(a->type)) ||
           pack_entity(pk, &a->entity) || msgpack_pack_uint64(pk, a->entity_version) ||
           msgpack_pack_int64(pk, a->time_ms) ||
           (a->consumer.len == 0
                ? msgpack_pack_nil(pk)
                : msgpack_pack_array(pk, 2) || msgpack_safe_pack_str(pk, a->consumer) ||
                      msgpack_safe_pack_str(pk, a->key)) ||
           pack_optional_str(pk, a->correlation) || a->pack_body(pk, a->body_ctx) ||
           msgpack_safe_pack_bin(pk, prev_hash, LOG_HASH_BYTES);
}

int log_event_encode(const log_event_draft *draft, uint64_t seq, const tally_id128 *id,
                     const uint8_t prev_hash[LOG_HASH_BYTES], uint8_t *buf, size_t capacity,
                     size_t *len, uint8_t hash[LOG_HASH_BYTES])
{
    assert(draft != NULL && log_event_type_name(draft->type) != NULL && draft->pack_body != NULL);
    assert(draft->entity_version > 0);
    msgpack_safe_buffer out;
    msgpack_packer pk;
    msgpack_safe_buffer_init(&out, buf, capacity, &pk);
    if (pack_event_head(&pk, draft, seq, id, prev_hash) != 0)
        return TALLY_internal;
    /* The hash entry: computed over all bytes so far, then packed. */
    if (out.capacity - out.len < LOG_HASH_ENTRY_BYTES)
        return TALLY_internal;
    sha256_ctx ctx;
    sha256_begin(&ctx);
    sha256_update(&ctx, prev_hash, LOG_HASH_BYTES);
    sha256_update(&ctx, buf, out.len);
    sha256_finish(&ctx, hash);
    if (msgpack_safe_pack_bin(&pk, hash, LOG_HASH_BYTES) != 0)
        return TALLY_internal;
    *len = out.len;
    return TALLY_ok;
}

/* ---- decoding (both formats) ---- */

/* The entity: [kind, ...] with kind a number (format 2) or a name (1). */
static bool decode_entity(const msgpack_object *o, log_entity *e)
{
    memset(e, 0, sizeof(*e));
    if (o == NULL || o->type != MSGPACK_OBJECT_ARRAY || o->via.array.size < 2)
        return false;
    const msgpack_object *items = o->via.array.ptr;
    tally_str name;
    uint64_t code = 0;
    if (msgpack_safe_get_str(&items[0], &name)) {
        for (uint64_t k = LOG_ENTITY_ACCOUNT; k <= LOG_ENTITY_KIND_LAST; k++)
            if (tally_str_equal(name, tally_str_from(log_entity_kind_name(k))))
                code = k;
    } else if (!msgpack_safe_get_u64(&items[0], &code)) {
        return false;
    }
    e->kind = (log_entity_kind)code;
    switch (code) {
    case LOG_ENTITY_ACCOUNT:
        return o->via.array.size == 2 && msgpack_safe_get_u64(&items[1], &e->account_id);
    case LOG_ENTITY_TRANSFER:
        return o->via.array.size == 2 && msgpack_safe_get_id128(&items[1], &e->transfer_id);
    case LOG_ENTITY_ENTITLEMENT:
        return o->via.array.size == 3 && msgpack_safe_get_str(&items[1], &e->subject) &&
               msgpack_safe_get_str(&items[2], &e->feature);
    case LOG_ENTITY_DEAD_LETTER:
        return o->via.array.size == 3 && msgpack_safe_get_str(&items[1], &e->subscriber) &&
               msgpack_safe_get_u64(&items[2], &e->letter_seq);
    case LOG_ENTITY_WEBHOOK:
        return o->via.array.size == 3 && msgpack_safe_get_str(&items[1], &e->webhook_source) &&
               msgpack_safe_get_str(&items[2], &e->webhook_event_id);
    case LOG_ENTITY_SUBSCRIBER:
        return o->via.array.size == 2 && msgpack_safe_get_str(&items[1], &e->subscriber);
    case LOG_ENTITY_ENDPOINT:
        return o->via.array.size == 2 && msgpack_safe_get_str(&items[1], &e->endpoint);
    }
    return false;
}

/* The causation: nil, [consumer, key] (format 2) or {consumer, key} (1). */
static bool decode_causation(const msgpack_object *o, log_event *ev)
{
    if (o == NULL)
        return false;
    if (o->type == MSGPACK_OBJECT_NIL)
        return true;
    ev->has_causation = true;
    msgpack_record_reader r = msgpack_record_read(o);
    return msgpack_record_fields(&r) == 2 &&
           msgpack_safe_get_str(msgpack_record_next(&r, "consumer"), &ev->consumer) &&
           msgpack_safe_get_str(msgpack_record_next(&r, "key"), &ev->key);
}

static bool decode_hash(const msgpack_object *o, uint8_t out[LOG_HASH_BYTES])
{
    const void *p;
    size_t n;
    if (!msgpack_safe_get_bin(o, &p, &n) || n != LOG_HASH_BYTES)
        return false;
    memcpy(out, p, LOG_HASH_BYTES);
    return true;
}

/* The parts a format 2 body must have for the entity's kind. */
static uint32_t body_parts(log_entity_kind kind)
{
    return kind == LOG_ENTITY_TRANSFER ? 3 : 1;
}

/* The 12 fields, by name (format 1) or by position (format 2): the field
 * names are written once, here, in their order. */
static bool decode_fields(const msgpack_object *m, log_event *out)
{
    uint64_t version = 0;
    msgpack_record_reader r = msgpack_record_read(m);
    bool ok = msgpack_record_fields(&r) == LOG_EVENT_FIELDS &&
              msgpack_safe_get_u64(msgpack_record_next(&r, "v"), &version) &&
              version == (msgpack_record_is_row(&r) ? LOG_EVENT_FORMAT : LOG_EVENT_FORMAT_V1) &&
              msgpack_safe_get_u64(msgpack_record_next(&r, "seq"), &out->seq) &&
              msgpack_safe_get_id128(msgpack_record_next(&r, "id"), &out->id) &&
              msgpack_safe_get_str(msgpack_record_next(&r, "type"), &out->type) &&
              decode_entity(msgpack_record_next(&r, "entity"), &out->entity) &&
              msgpack_safe_get_u64(msgpack_record_next(&r, "entity_version"),
                                   &out->entity_version) &&
              msgpack_safe_get_i64(msgpack_record_next(&r, "time_ms"), &out->time_ms) &&
              decode_causation(msgpack_record_next(&r, "causation"), out);
    const msgpack_object *correlation = msgpack_record_next(&r, "correlation");
    ok = ok && correlation != NULL &&
         (correlation->type == MSGPACK_OBJECT_NIL ||
          msgpack_safe_get_str(correlation, &out->correlation));
    out->body = msgpack_record_next(&r, "body");
    ok = ok && decode_hash(msgpack_record_next(&r, "prev_hash"), out->prev_hash) &&
         decode_hash(msgpack_record_next(&r, "hash"), out->hash) && out->body != NULL;
    out->format = (unsigned)version;
    if (!ok)
        return false;
    if (out->format == LOG_EVENT_FORMAT_V1)
        return out->body->type == MSGPACK_OBJECT_MAP;
    return out->body->type == MSGPACK_OBJECT_ARRAY &&
           out->body->via.array.size >= body_parts(out->entity.kind);
}

static const char *name_of(const char *const *names, size_t n, uint64_t code)
{
    return code >= 1 && code <= n ? names[code - 1] : NULL;
}

const char *log_transfer_state_name(uint64_t state)
{
    static const char *const names[] = {"posted", "pending", "pending_posted",
                                        "pending_voided", "pending_expired"};
    return name_of(names, sizeof(names) / sizeof(names[0]), state);
}

const char *log_entitlement_state_name(uint64_t state)
{
    static const char *const names[] = {"active", "revoked", "expired"};
    return name_of(names, sizeof(names) / sizeof(names[0]), state);
}

const msgpack_object *log_event_part(const log_event *ev, log_body_part part)
{
    return ev == NULL ? NULL : log_body_part_of(ev->body, ev->entity.kind, part);
}

const msgpack_object *log_body_part_of(const msgpack_object *body, log_entity_kind kind,
                                       log_body_part part)
{
    static const struct {
        log_entity_kind kind;
        uint32_t pos;
        const char *name; /* format 1 */
    } parts[] = {
        [LOG_PART_ACCOUNT] = {LOG_ENTITY_ACCOUNT, 0, "account"},
        [LOG_PART_TRANSFER] = {LOG_ENTITY_TRANSFER, 0, "transfer"},
        [LOG_PART_DEBIT_ACCOUNT] = {LOG_ENTITY_TRANSFER, 1, "debit_account"},
        [LOG_PART_CREDIT_ACCOUNT] = {LOG_ENTITY_TRANSFER, 2, "credit_account"},
        [LOG_PART_ENTITLEMENT] = {LOG_ENTITY_ENTITLEMENT, 0, "entitlement"},
        [LOG_PART_DEAD_LETTER] = {LOG_ENTITY_DEAD_LETTER, 0, "dead_letter"},
        [LOG_PART_WEBHOOK] = {LOG_ENTITY_WEBHOOK, 0, "webhook"},
        [LOG_PART_SUBSCRIBER] = {LOG_ENTITY_SUBSCRIBER, 0, "subscriber"},
        [LOG_PART_ENDPOINT] = {LOG_ENTITY_ENDPOINT, 0, "endpoint"},
    };
    if (body == NULL || (unsigned)part >= sizeof(parts) / sizeof(parts[0]) ||
        kind != parts[part].kind)
        return NULL;
    if (body->type == MSGPACK_OBJECT_MAP)
        return msgpack_safe_map_get(body, parts[part].name);
    if (body->type == MSGPACK_OBJECT_ARRAY && parts[part].pos < body->via.array.size)
        return &body->via.array.ptr[parts[part].pos];
    return NULL;
}

/* The checks after the unpack (into root). */
static int decode_checked(const void *bytes, size_t len, const msgpack_object *root,
                          log_event *out);

int log_event_decode(const void *bytes, size_t len, msgpack_unpacked *unpacked,
                     log_event *out)
{
    memset(out, 0, sizeof(*out));
    size_t entry = hash_entry_bytes(bytes, len);
    if (len > TALLY_EVENT_BYTES_MAX || entry == 0 || len < entry ||
        msgpack_safe_unpack(bytes, len, TALLY_MSGPACK_DEPTH_MAX, unpacked) != TALLY_ok)
        return TALLY_corrupt_record;
    return decode_checked(bytes, len, &unpacked->data, out);
}

int log_event_decode_in(const void *bytes, size_t len, msgpack_zone *zone, msgpack_object *root,
                        log_event *out)
{
    memset(out, 0, sizeof(*out));
    size_t entry = hash_entry_bytes(bytes, len);
    if (len > TALLY_EVENT_BYTES_MAX || entry == 0 || len < entry ||
        msgpack_safe_unpack_in(bytes, len, TALLY_MSGPACK_DEPTH_MAX, zone, root) != TALLY_ok)
        return TALLY_corrupt_record;
    return decode_checked(bytes, len, root, out);
}

int log_event_peek_in(const void *bytes, size_t len, msgpack_zone *zone, msgpack_object *root,
                      log_event *out)
{
    memset(out, 0, sizeof(*out));
    size_t entry = hash_entry_bytes(bytes, len);
    if (len > TALLY_EVENT_BYTES_MAX || entry == 0 || len < entry ||
        msgpack_safe_unpack_in(bytes, len, TALLY_MSGPACK_DEPTH_MAX, zone, root) != TALLY_ok ||
        !decode_fields(root, out))
        return TALLY_corrupt_record;
    out->raw = bytes;
    out->raw_len = len;
    return TALLY_ok;
}

static int decode_checked(const void *bytes, size_t len, const msgpack_object *root,
                          log_event *out)
{
    size_t entry = hash_entry_bytes(bytes, len);
    if (!decode_fields(root, out))
        return TALLY_corrupt_record;
    /* The hash entry must be the trailing bytes, and must match. */
    static const uint8_t hash_entry_head[7] = {0xa4, 'h', 'a', 's', 'h', 0xc4, 0x20};
    const uint8_t *raw = bytes;
    const uint8_t *head = hash_entry_head + (entry == LOG_HASH_ENTRY_BYTES ? 5 : 0);
    if (memcmp(raw + len - entry, head, entry - LOG_HASH_BYTES) != 0)
        return TALLY_corrupt_record;
    uint8_t expect[LOG_HASH_BYTES];
    if (log_event_hash(out->prev_hash, bytes, len, expect) != TALLY_ok ||
        memcmp(expect, out->hash, LOG_HASH_BYTES) != 0)
        return TALLY_corrupt_record;
    out->raw = raw;
    out->raw_len = len;
    return TALLY_ok;
}
