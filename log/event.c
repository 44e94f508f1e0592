/*
 * event.c — the one event codec (see event.h; docs/EVENTS.md).
 *
 * Encoding: a msgpack map of 12 entries in this order: v, seq, id, type,
 * entity, entity_version, time_ms, causation, correlation, body,
 * prev_hash, hash. The hash entry is last and fixed-size so that anyone
 * can verify the chain from the raw bytes.
 */
#include "log/event.h"

#include "common/error.h"
#include "common/limits.h"
#include "common/msgpack_safe.h"
#include "log/sha256.h"

#include <assert.h>
#include <string.h>

#define LOG_EVENT_FIELDS 12

const char *log_entity_kind_name(log_entity_kind kind)
{
    switch (kind) {
    case LOG_ENTITY_ACCOUNT: return "account";
    case LOG_ENTITY_TRANSFER: return "transfer";
    case LOG_ENTITY_ENTITLEMENT: return "entitlement";
    }
    return "unknown";
}

int log_event_hash(const uint8_t prev_hash[LOG_HASH_BYTES], const void *bytes, size_t len,
                   uint8_t out[LOG_HASH_BYTES])
{
    if (len < LOG_HASH_ENTRY_BYTES)
        return TALLY_corrupt_record;
    sha256_ctx ctx;
    sha256_begin(&ctx);
    sha256_update(&ctx, prev_hash, LOG_HASH_BYTES);
    sha256_update(&ctx, bytes, len - LOG_HASH_ENTRY_BYTES);
    sha256_finish(&ctx, out);
    return TALLY_ok;
}

/* ---- encoding ---- */

static int pack_entity(msgpack_packer *pk, const log_entity *e)
{
    switch (e->kind) {
    case LOG_ENTITY_ACCOUNT:
        return msgpack_pack_array(pk, 2) || msgpack_safe_pack_cstr(pk, "account") ||
               msgpack_pack_uint64(pk, e->account_id);
    case LOG_ENTITY_TRANSFER:
        return msgpack_pack_array(pk, 2) || msgpack_safe_pack_cstr(pk, "transfer") ||
               msgpack_safe_pack_bin(pk, e->transfer_id.bytes, 16);
    case LOG_ENTITY_ENTITLEMENT:
        return msgpack_pack_array(pk, 3) || msgpack_safe_pack_cstr(pk, "entitlement") ||
               msgpack_safe_pack_str(pk, e->subject) || msgpack_safe_pack_str(pk, e->feature);
    }
    return -1;
}

static int pack_optional_str(msgpack_packer *pk, tally_str s)
{
    return s.len == 0 ? msgpack_pack_nil(pk) : msgpack_safe_pack_str(pk, s);
}

/* Everything up to and including prev_hash. */
static int pack_event_head(msgpack_packer *pk, const log_event_draft *a, uint64_t seq,
                           const tally_id128 *id, const uint8_t prev_hash[LOG_HASH_BYTES])
{
    int bad = msgpack_pack_map(pk, LOG_EVENT_FIELDS) ||
              msgpack_safe_pack_cstr(pk, "v") || msgpack_pack_uint32(pk, LOG_EVENT_FORMAT) ||
              msgpack_safe_pack_cstr(pk, "seq") || msgpack_pack_uint64(pk, seq) ||
              msgpack_safe_pack_cstr(pk, "id") || msgpack_safe_pack_bin(pk, id->bytes, 16) ||
              msgpack_safe_pack_cstr(pk, "type") || msgpack_safe_pack_cstr(pk, a->type) ||
              msgpack_safe_pack_cstr(pk, "entity") || pack_entity(pk, &a->entity) ||
              msgpack_safe_pack_cstr(pk, "entity_version") ||
              msgpack_pack_uint64(pk, a->entity_version) ||
              msgpack_safe_pack_cstr(pk, "time_ms") || msgpack_pack_int64(pk, a->time_ms) ||
              msgpack_safe_pack_cstr(pk, "causation");
    if (bad)
        return -1;
    if (a->consumer.len == 0)
        bad = msgpack_pack_nil(pk);
    else
        bad = msgpack_pack_map(pk, 2) || msgpack_safe_pack_cstr(pk, "consumer") ||
              msgpack_safe_pack_str(pk, a->consumer) || msgpack_safe_pack_cstr(pk, "key") ||
              msgpack_safe_pack_str(pk, a->key);
    return bad || msgpack_safe_pack_cstr(pk, "correlation") ||
           pack_optional_str(pk, a->correlation) || msgpack_safe_pack_cstr(pk, "body") ||
           a->pack_body(pk, a->body_ctx) || msgpack_safe_pack_cstr(pk, "prev_hash") ||
           msgpack_safe_pack_bin(pk, prev_hash, LOG_HASH_BYTES);
}

int log_event_encode(const log_event_draft *draft, uint64_t seq, const tally_id128 *id,
                     const uint8_t prev_hash[LOG_HASH_BYTES], uint8_t *buf, size_t capacity,
                     size_t *len, uint8_t hash[LOG_HASH_BYTES])
{
    assert(draft != NULL && draft->type != NULL && draft->pack_body != NULL);
    assert(draft->entity_version > 0);
    msgpack_safe_buffer out;
    msgpack_packer pk;
    msgpack_safe_buffer_init(&out, buf, capacity, &pk);
    if (pack_event_head(&pk, draft, seq, id, prev_hash) != 0 ||
        msgpack_safe_pack_cstr(&pk, "hash") != 0)
        return TALLY_internal;
    /* The hash entry: bin8 header then the digest, computed over all bytes
     * so far (the buffer now lacks only the 34 bytes still to come). */
    if (out.capacity - out.len < 2 + LOG_HASH_BYTES)
        return TALLY_internal;
    sha256_ctx ctx;
    sha256_begin(&ctx);
    sha256_update(&ctx, prev_hash, LOG_HASH_BYTES);
    sha256_update(&ctx, buf, out.len - 5); /* exclude the "hash" key itself */
    sha256_finish(&ctx, hash);
    if (msgpack_safe_pack_bin(&pk, hash, LOG_HASH_BYTES) != 0)
        return TALLY_internal;
    *len = out.len;
    return TALLY_ok;
}

/* ---- decoding ---- */

static bool decode_entity(const msgpack_object *o, log_entity *e)
{
    memset(e, 0, sizeof(*e));
    tally_str kind;
    if (o == NULL || o->type != MSGPACK_OBJECT_ARRAY || o->via.array.size < 2 ||
        !msgpack_safe_get_str(&o->via.array.ptr[0], &kind))
        return false;
    const msgpack_object *items = o->via.array.ptr;
    if (tally_str_equal(kind, tally_str_from("account")) && o->via.array.size == 2) {
        e->kind = LOG_ENTITY_ACCOUNT;
        return msgpack_safe_get_u64(&items[1], &e->account_id);
    }
    if (tally_str_equal(kind, tally_str_from("transfer")) && o->via.array.size == 2) {
        e->kind = LOG_ENTITY_TRANSFER;
        return msgpack_safe_get_id128(&items[1], &e->transfer_id);
    }
    if (tally_str_equal(kind, tally_str_from("entitlement")) && o->via.array.size == 3) {
        e->kind = LOG_ENTITY_ENTITLEMENT;
        return msgpack_safe_get_str(&items[1], &e->subject) &&
               msgpack_safe_get_str(&items[2], &e->feature);
    }
    return false;
}

static bool decode_causation(const msgpack_object *o, log_event *ev)
{
    if (o == NULL)
        return false;
    if (o->type == MSGPACK_OBJECT_NIL)
        return true;
    ev->has_causation = true;
    return msgpack_safe_get_str(msgpack_safe_map_get(o, "consumer"), &ev->consumer) &&
           msgpack_safe_get_str(msgpack_safe_map_get(o, "key"), &ev->key);
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

static bool decode_fields(const msgpack_object *m, log_event *out)
{
    uint64_t version;
    const msgpack_object *correlation = msgpack_safe_map_get(m, "correlation");
    bool ok = m->type == MSGPACK_OBJECT_MAP && m->via.map.size == LOG_EVENT_FIELDS &&
              msgpack_safe_get_u64(msgpack_safe_map_get(m, "v"), &version) &&
              version == LOG_EVENT_FORMAT &&
              msgpack_safe_get_u64(msgpack_safe_map_get(m, "seq"), &out->seq) &&
              msgpack_safe_get_id128(msgpack_safe_map_get(m, "id"), &out->id) &&
              msgpack_safe_get_str(msgpack_safe_map_get(m, "type"), &out->type) &&
              decode_entity(msgpack_safe_map_get(m, "entity"), &out->entity) &&
              msgpack_safe_get_u64(msgpack_safe_map_get(m, "entity_version"),
                                   &out->entity_version) &&
              msgpack_safe_get_i64(msgpack_safe_map_get(m, "time_ms"), &out->time_ms) &&
              decode_causation(msgpack_safe_map_get(m, "causation"), out) &&
              correlation != NULL &&
              (correlation->type == MSGPACK_OBJECT_NIL ||
               msgpack_safe_get_str(correlation, &out->correlation)) &&
              decode_hash(msgpack_safe_map_get(m, "prev_hash"), out->prev_hash) &&
              decode_hash(msgpack_safe_map_get(m, "hash"), out->hash);
    out->body = msgpack_safe_map_get(m, "body");
    return ok && out->body != NULL && out->body->type == MSGPACK_OBJECT_MAP;
}

int log_event_decode(const void *bytes, size_t len, msgpack_unpacked *unpacked,
                     log_event *out)
{
    memset(out, 0, sizeof(*out));
    if (len > TALLY_EVENT_BYTES_MAX || len < LOG_HASH_ENTRY_BYTES ||
        msgpack_safe_unpack(bytes, len, TALLY_MSGPACK_DEPTH_MAX, unpacked) != TALLY_ok ||
        !decode_fields(&unpacked->data, out))
        return TALLY_corrupt_record;
    /* The hash entry must be the trailing 39 bytes, and must match. */
    static const uint8_t hash_entry_head[7] = {0xa4, 'h', 'a', 's', 'h', 0xc4, 0x20};
    const uint8_t *raw = bytes;
    if (memcmp(raw + len - LOG_HASH_ENTRY_BYTES, hash_entry_head, 7) != 0)
        return TALLY_corrupt_record;
    uint8_t expect[LOG_HASH_BYTES];
    if (log_event_hash(out->prev_hash, bytes, len, expect) != TALLY_ok ||
        memcmp(expect, out->hash, LOG_HASH_BYTES) != 0)
        return TALLY_corrupt_record;
    out->raw = raw;
    out->raw_len = len;
    return TALLY_ok;
}
