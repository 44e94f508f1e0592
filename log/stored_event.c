/*
 * stored_event.c — the short form of an event in the log (stored_event.h).
 *
 * Both directions walk the fields with msgpack_safe_skip and copy the
 * bytes of the fields they keep as they are; only seq, id, the type, a
 * UUID key and the hash are written anew, each exactly as
 * log_event_encode writes it (msgpack-c's shortest forms).
 */
#include "log/stored_event.h"

#include "common/bytes.h"
#include "common/msgpack_safe.h"

#include <string.h>

#define FORMAT2_FIELDS 12
#define SHORT_FIELDS 9
#define UUID_TEXT_BYTES 36
#define BIN16_BYTES 18                  /* c4 10 and 16 bytes */
#define UUID_STR_BYTES (2 + UUID_TEXT_BYTES) /* d9 24 and the text */

/* The stored type numbers are the rows of LOG_EVENT_TYPES (1, 2, ...): rows
 * are only ever appended there, so a number keeps its name. */
_Static_assert(LOG_EVENT_TYPE_END <= 0x80, "a type's number is one positive fixint");

bool stored_event_is_short(const void *rec, size_t len)
{
    const uint8_t *r = rec;
    return len >= 2 && r[0] == 0x90 + SHORT_FIELDS && r[1] == STORED_EVENT_FORMAT;
}

/* A cursor over the fields of one msgpack array's bytes. */
typedef struct fields {
    const uint8_t *p;
    size_t at, len;
} fields;

/* The next field's size (0: truncated or malformed), not moving past it. */
static size_t field_size(const fields *f)
{
    return f->at < f->len ? msgpack_safe_skip(f->p + f->at, f->len - f->at) : 0;
}

/* Move past the next field; its offset into *start. false when malformed. */
static bool field_skip(fields *f, size_t *start)
{
    size_t n = field_size(f);
    if (start != NULL)
        *start = f->at;
    f->at += n;
    return n > 0;
}

/* A str field: its text. The shortest header only (fixstr or str8 up to
 * 255 bytes), as msgpack-c packs. */
static bool str_at(const uint8_t *p, size_t n, const char **text, size_t *len)
{
    if (n >= 1 && (p[0] & 0xe0) == 0xa0 && n == 1 + (size_t)(p[0] & 0x1f)) {
        *text = (const char *)p + 1;
        *len = p[0] & 0x1f;
        return true;
    }
    if (n >= 2 && p[0] == 0xd9 && p[1] >= 32 && n == 2 + (size_t)p[1]) {
        *text = (const char *)p + 2;
        *len = p[1];
        return true;
    }
    return false;
}

/* An int field (any msgpack integer), as int64. */
static bool int_at(const uint8_t *p, size_t n, int64_t *v)
{
    if (n == 1 && (p[0] < 0x80 || p[0] >= 0xe0)) {
        *v = (int8_t)p[0];
        return true;
    }
    if (n < 2 || n > 9)
        return false;
    uint64_t u = 0;
    for (size_t i = 1; i < n; i++)
        u = u << 8 | p[i];
    switch (p[0]) {
    case 0xcc: case 0xcd: case 0xce: *v = (int64_t)u; return true;
    case 0xcf: *v = (int64_t)u; return u <= INT64_MAX;
    case 0xd0: *v = (int8_t)u; return true;
    case 0xd1: *v = (int16_t)u; return true;
    case 0xd2: *v = (int32_t)u; return true;
    case 0xd3: *v = (int64_t)u; return true;
    }
    return false;
}

/* seq as msgpack-c's msgpack_pack_uint64 writes it. */
static size_t put_uint(uint8_t *out, uint64_t v)
{
    if (v < 0x80) {
        out[0] = (uint8_t)v;
        return 1;
    }
    size_t n = v <= 0xff ? 1 : v <= 0xffff ? 2 : v <= 0xffffffffu ? 4 : 8;
    out[0] = n == 1 ? 0xcc : n == 2 ? 0xcd : n == 4 ? 0xce : 0xcf;
    for (size_t i = n; i > 0; i--, v >>= 8)
        out[i] = (uint8_t)v;
    return 1 + n;
}

static bool is_bin(const uint8_t *p, size_t n, size_t bytes)
{
    return n == 2 + bytes && p[0] == 0xc4 && p[1] == bytes;
}

size_t stored_event_shorten(const uint8_t *event, size_t len, uint8_t *out)
{
    const size_t tail = 2 * (2 + LOG_HASH_BYTES); /* prev_hash and hash */
    if (len < 2 + tail || event[0] != 0x90 + FORMAT2_FIELDS || event[1] != LOG_EVENT_FORMAT)
        return 0;
    fields f = {event, 2, len - tail};
    size_t id_at, type_at, entity_at, causation_at, correlation_at;
    if (!field_skip(&f, NULL) || !field_skip(&f, &id_at) || !field_skip(&f, &type_at) ||
        !is_bin(event + id_at, type_at - id_at, 16))
        return 0;
    const char *name;
    size_t name_len;
    log_event_type type;
    if (!field_skip(&f, &entity_at) ||
        !str_at(event + type_at, entity_at - type_at, &name, &name_len) ||
        !log_event_type_of((tally_str){name, name_len}, &type))
        return 0;
    /* entity_version, time_ms, causation */
    if (!field_skip(&f, NULL) || !field_skip(&f, NULL) || !field_skip(&f, &causation_at))
        return 0;
    correlation_at = f.at;
    if (!field_skip(&f, NULL) || !field_skip(&f, NULL) || f.at != len - tail ||
        !is_bin(event + f.at, 2 + LOG_HASH_BYTES, LOG_HASH_BYTES) ||
        !is_bin(event + len - tail / 2, 2 + LOG_HASH_BYTES, LOG_HASH_BYTES))
        return 0;
    size_t o = 0;
    out[o++] = 0x90 + SHORT_FIELDS;
    out[o++] = STORED_EVENT_FORMAT;
    out[o++] = (uint8_t)type;
    memcpy(out + o, event + entity_at, causation_at - entity_at);
    o += causation_at - entity_at;
    /* causation: nil, or [consumer, key] with a UUID text key as bin16 */
    const uint8_t *c = event + causation_at;
    size_t c_len = correlation_at - causation_at;
    uint8_t packed[16];
    if (c_len > 1 + UUID_STR_BYTES && c[0] == 0x92 &&
        c[c_len - UUID_STR_BYTES] == 0xd9 && c[c_len - UUID_STR_BYTES + 1] == UUID_TEXT_BYTES &&
        bytes_uuid_text_pack((const char *)c + c_len - UUID_TEXT_BYTES, UUID_TEXT_BYTES, packed)) {
        size_t consumer = c_len - UUID_STR_BYTES;
        memcpy(out + o, c, consumer);
        o += consumer;
        out[o++] = 0xc4;
        out[o++] = 16;
        memcpy(out + o, packed, 16);
        o += 16;
    } else {
        memcpy(out + o, c, c_len);
        o += c_len;
    }
    /* correlation, body and prev_hash as they are; no hash */
    size_t rest = len - tail / 2 - correlation_at;
    memcpy(out + o, event + correlation_at, rest);
    return o + rest;
}

bool stored_event_prev_hash(const void *rec, size_t len, uint8_t out[LOG_HASH_BYTES])
{
    const uint8_t *r = rec;
    size_t after = 0; /* what follows the prev_hash entry: the hash entry */
    if (stored_event_is_short(rec, len))
        after = 0;
    else if (len > 0 && r[0] == 0x90 + FORMAT2_FIELDS)
        after = LOG_HASH_ENTRY_BYTES;
    else if (len > 0 && r[0] == 0x80 + FORMAT2_FIELDS)
        after = LOG_HASH_ENTRY_BYTES_V1;
    else
        return false;
    const size_t entry = 2 + LOG_HASH_BYTES;
    if (len < 1 + entry + after || !is_bin(r + len - after - entry, entry, LOG_HASH_BYTES))
        return false;
    memcpy(out, r + len - after - LOG_HASH_BYTES, LOG_HASH_BYTES);
    return true;
}

size_t stored_event_expand(const void *rec, size_t len, uint64_t seq, uint32_t tag,
                           const uint8_t hash[LOG_HASH_BYTES], uint8_t *out, size_t capacity)
{
    const uint8_t *r = rec;
    if (!stored_event_is_short(rec, len) || capacity < len + STORED_EVENT_GROWTH_MAX)
        return 0;
    fields f = {r, 2, len};
    size_t type_at, entity_at, time_at, causation_at;
    int64_t time_ms, type;
    if (!field_skip(&f, &type_at) || !int_at(r + type_at, f.at - type_at, &type) ||
        type <= LOG_EVENT_TYPE_NONE || type >= LOG_EVENT_TYPE_END)
        return 0;
    if (!field_skip(&f, &entity_at) || !field_skip(&f, NULL) || !field_skip(&f, &time_at) ||
        !field_skip(&f, &causation_at) || !int_at(r + time_at, causation_at - time_at, &time_ms))
        return 0;
    /* causation (f is past it): nil or an array of two, whose key may be
     * bin16 */
    size_t key_at = 0, key_end = 0;
    if (r[causation_at] == 0x92) {
        fields c = {r, causation_at + 1, f.at};
        if (!field_skip(&c, NULL) || !field_skip(&c, &key_at) || c.at != f.at)
            return 0;
        key_end = c.at;
    } else if (r[causation_at] != 0xc0) {
        return 0;
    }
    /* correlation and body, then prev_hash last */
    if (!field_skip(&f, NULL) || !field_skip(&f, NULL) || f.at + 2 + LOG_HASH_BYTES != len ||
        !is_bin(r + f.at, 2 + LOG_HASH_BYTES, LOG_HASH_BYTES))
        return 0;

    size_t o = 0;
    out[o++] = 0x90 + FORMAT2_FIELDS;
    out[o++] = LOG_EVENT_FORMAT;
    o += put_uint(out + o, seq);
    tally_id128 id;
    tally_id128_uuidv7_counted(time_ms, tag, seq, &id);
    out[o++] = 0xc4;
    out[o++] = 16;
    memcpy(out + o, id.bytes, 16);
    o += 16;
    const char *name = log_event_type_name((log_event_type)type);
    size_t name_len = strlen(name);
    out[o++] = (uint8_t)(0xa0 | name_len); /* every name is under 32 bytes */
    memcpy(out + o, name, name_len);
    o += name_len;
    if (key_at != 0 && is_bin(r + key_at, key_end - key_at, 16)) {
        memcpy(out + o, r + entity_at, key_at - entity_at);
        o += key_at - entity_at;
        out[o++] = 0xd9;
        out[o++] = UUID_TEXT_BYTES;
        bytes_uuid_text_write(r + key_at + 2, (char *)out + o);
        o += UUID_TEXT_BYTES;
        memcpy(out + o, r + key_end, len - key_end);
        o += len - key_end;
    } else {
        memcpy(out + o, r + entity_at, len - entity_at);
        o += len - entity_at;
    }
    out[o++] = 0xc4;
    out[o++] = LOG_HASH_BYTES;
    memcpy(out + o, hash, LOG_HASH_BYTES);
    return o + LOG_HASH_BYTES;
}
