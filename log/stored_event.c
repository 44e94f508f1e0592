/*
 * stored_event.c — the short form of an event in the log (stored_event.h).
 *
 * Both directions walk the fields with msgpack_safe_skip and copy the
 * bytes of the fields they keep as they are; only seq, id, the type, a
 * UUID key, the hash and the repeats of the body's first row are written
 * anew, each exactly as log_event_encode writes it (msgpack-c's shortest
 * forms).
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

/* The size of an object by its first byte when that alone says it: 0
 * for the ones whose size follows (str8, bin8), arrays and the rest. */
static const uint8_t first_byte_size[256] = {
#define ONE4(x) [x] = 1, [x + 1] = 1, [x + 2] = 1, [x + 3] = 1
#define ONE16(x) ONE4(x), ONE4(x + 4), ONE4(x + 8), ONE4(x + 12)
    ONE16(0x00), ONE16(0x10), ONE16(0x20), ONE16(0x30), /* positive fixints */
    ONE16(0x40), ONE16(0x50), ONE16(0x60), ONE16(0x70),
    ONE16(0xe0), ONE16(0xf0),                           /* negative fixints */
#undef ONE16
#undef ONE4
#define STR4(x) [x] = x - 0x9f, [x + 1] = x - 0x9e, [x + 2] = x - 0x9d, [x + 3] = x - 0x9c
    STR4(0xa0), STR4(0xa4), STR4(0xa8), STR4(0xac), /* fixstr: 1 + its length */
    STR4(0xb0), STR4(0xb4), STR4(0xb8), STR4(0xbc),
#undef STR4
    [0xc0] = 1, [0xc2] = 1, [0xc3] = 1, [0xcc] = 2, [0xd0] = 2, [0xcd] = 3, [0xd1] = 3,
    [0xca] = 5, [0xce] = 5, [0xd2] = 5, [0xcb] = 9, [0xcf] = 9, [0xd3] = 9,
};

/* The size of the msgpack object at p (n bytes there), 0 when truncated
 * or malformed: the scalars events are made of, and small arrays of them
 * (depth levels down), at once; anything else by msgpack_safe_skip. */
static size_t object_size_in(const uint8_t *p, size_t n, unsigned depth)
{
    if (n == 0)
        return 0;
    uint8_t b = p[0];
    size_t size = first_byte_size[b];
    if (size != 0)
        return size <= n ? size : 0;
    if ((b == 0xc4 || b == 0xd9) && n >= 2)
        size = 2 + (size_t)p[1];
    else if ((b & 0xf0) == 0x90 && depth < 2) { /* a fixarray: an entity, a causation */
        size = 1;
        for (unsigned i = 0; i < (b & 0x0fu); i++) {
            size_t child = object_size_in(p + size, n - size, depth + 1);
            if (child == 0)
                return 0;
            size += child;
        }
    } else
        return msgpack_safe_skip(p, n);
    return size <= n ? size : 0;
}

static size_t object_size(const uint8_t *p, size_t n) { return object_size_in(p, n, 0); }

/* The next field's size (0: truncated or malformed), not moving past it. */
static size_t field_size(const fields *f)
{
    return f->at < f->len ? object_size(f->p + f->at, f->len - f->at) : 0;
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

/* An array's header at p (fixarray or array 16): its element count and
 * size; false for anything else. */
static bool array_header(const uint8_t *p, size_t n, size_t *count, size_t *size)
{
    if (n >= 1 && (p[0] & 0xf0) == 0x90) {
        *count = p[0] & 0x0f;
        *size = 1;
        return true;
    }
    if (n >= 3 && p[0] == 0xdc) {
        *count = (size_t)p[1] << 8 | p[2];
        *size = 3;
        return true;
    }
    return false;
}

/* The entity's last element (an account id, a transfer id, ...):
 * [*at, *end), only when it is at most a bin16's size (the first row of
 * the body repeats it). */
static bool entity_last(const uint8_t *p, size_t entity_at, size_t entity_end, size_t *at,
                        size_t *end)
{
    size_t count, header;
    if (!array_header(p + entity_at, entity_end - entity_at, &count, &header) || count < 2)
        return false;
    fields f = {p, entity_at + header, entity_end};
    for (size_t i = 0; i + 1 < count; i++)
        if (!field_skip(&f, NULL))
            return false;
    *at = f.at;
    *end = entity_end;
    return field_skip(&f, NULL) && f.at == entity_end && *end - *at <= BIN16_BYTES;
}

/* What a body's first row repeats of the event: a field with the bytes
 * of the entity's last element (first field) or of time_ms (the first
 * other field with them) is stored as the one byte SAME, which msgpack
 * never uses. */
#define SAME 0xc1
typedef struct repeats {
    const uint8_t *id;   /* the entity's last element, NULL: none */
    size_t id_len;
    const uint8_t *time; /* time_ms's bytes */
    size_t time_len;
} repeats;

/* Copy (shorten: stored true) or expand (false) the body at p[0..n) into
 * out; its length, or 0 when the body is not an array whose first element
 * is a row of fields. */
static size_t body_copy(const uint8_t *p, size_t n, const repeats *r, bool shorten, uint8_t *out)
{
    size_t parts, header, row_fields, row_header;
    if (!array_header(p, n, &parts, &header) || parts == 0 ||
        !array_header(p + header, n - header, &row_fields, &row_header))
        return 0;
    /* Bytes kept as they are go out in runs: [run, at) is the run so far. */
    size_t at = header + row_header, run = 0, o = 0;
    bool time_done = false;
    for (size_t i = 0; i < row_fields; i++) {
        if (at >= n)
            return 0;
        bool same_here = !shorten && p[at] == SAME;
        size_t size = same_here ? 1 : object_size(p + at, n - at);
        if (size == 0)
            return 0;
        bool is_id = i == 0 && r->id != NULL;
        const uint8_t *same = is_id ? r->id : time_done ? NULL : r->time;
        size_t same_len = is_id ? r->id_len : r->time_len;
        bool replace = same_here || (shorten && same != NULL && size == same_len && size > 1 &&
                                     p[at] == same[0] && memcmp(p + at, same, size) == 0);
        if (replace) {
            if (same == NULL)
                return 0;
            memcpy(out + o, p + run, at - run);
            o += at - run;
            if (shorten) {
                out[o++] = SAME;
            } else {
                memcpy(out + o, same, same_len);
                o += same_len;
            }
            time_done = time_done || !is_id;
            run = at + size;
        }
        at += size;
    }
    /* The rest, the other parts with it, as it is: a decoder checks the
     * format 2 bytes whole, and their hash whether they are the bytes
     * hashed. */
    memcpy(out + o, p + run, n - run);
    return o + n - run;
}

/* Where the fields of an event lie (offsets into its bytes), from its
 * entity on; the fields before it differ between the forms. */
typedef struct layout {
    size_t entity, time, causation, key, key_end, correlation, body, prev_hash;
    repeats r;
} layout;

/* The fields from entity to the end of the body, and the repeats, with f
 * at the entity; the body is what lies between correlation and the
 * prev_hash entry that ends f (body_copy reads its first row). */
static bool layout_read(fields *f, layout *l)
{
    const uint8_t *p = f->p;
    size_t version;
    if (!field_skip(f, &l->entity) || !field_skip(f, &version) || !field_skip(f, &l->time) ||
        !field_skip(f, &l->causation))
        return false;
    l->r.time = p + l->time;
    l->r.time_len = l->causation - l->time;
    size_t id_at, id_end;
    l->r.id = entity_last(p, l->entity, version, &id_at, &id_end) ? p + id_at : NULL;
    l->r.id_len = l->r.id ? id_end - id_at : 0;
    /* causation: nil, or [consumer, key] */
    l->key = l->key_end = 0;
    if (p[l->causation] == 0x92) {
        fields c = {p, l->causation + 1, f->at};
        if (!field_skip(&c, NULL) || !field_skip(&c, &l->key) || c.at != f->at)
            return false;
        l->key_end = c.at;
    } else if (p[l->causation] != 0xc0) {
        return false;
    }
    if (!field_skip(f, &l->correlation))
        return false;
    l->body = f->at;
    l->prev_hash = f->len - (2 + LOG_HASH_BYTES);
    return is_bin(p + l->prev_hash, 2 + LOG_HASH_BYTES, LOG_HASH_BYTES) && l->body < l->prev_hash;
}

/* From the layout's correlation on, into out: correlation as it is, the
 * body through body_copy, the prev_hash entry. Its length, 0 when the
 * body is no row of fields. */
static size_t rest_copy(const uint8_t *p, const layout *l, bool shorten, uint8_t *out)
{
    size_t o = l->body - l->correlation;
    memcpy(out, p + l->correlation, o);
    size_t body = body_copy(p + l->body, l->prev_hash - l->body, &l->r, shorten, out + o);
    if (body == 0)
        return 0;
    o += body;
    memcpy(out + o, p + l->prev_hash, 2 + LOG_HASH_BYTES);
    return o + 2 + LOG_HASH_BYTES;
}

size_t stored_event_shorten(const uint8_t *event, size_t len, uint8_t *out)
{
    const size_t hash_entry = 2 + LOG_HASH_BYTES;
    if (len < 2 + 2 * hash_entry || event[0] != 0x90 + FORMAT2_FIELDS ||
        event[1] != LOG_EVENT_FORMAT || !is_bin(event + len - hash_entry, hash_entry, LOG_HASH_BYTES))
        return 0;
    fields f = {event, 2, len - hash_entry};
    size_t id_at, type_at;
    if (!field_skip(&f, NULL) || !field_skip(&f, &id_at) || !field_skip(&f, &type_at) ||
        !is_bin(event + id_at, type_at - id_at, 16))
        return 0;
    size_t entity_at = f.at;
    const char *name;
    size_t name_len;
    log_event_type type;
    if (!str_at(event + type_at, entity_at - type_at, &name, &name_len) ||
        !log_event_type_of((tally_str){name, name_len}, &type))
        return 0;
    layout l;
    if (!layout_read(&f, &l))
        return 0;
    size_t o = 0;
    out[o++] = 0x90 + SHORT_FIELDS;
    out[o++] = STORED_EVENT_FORMAT;
    out[o++] = (uint8_t)type;
    uint8_t packed[16];
    const uint8_t *key = event + l.key;
    if (l.key != 0 && l.key_end - l.key == UUID_STR_BYTES && key[0] == 0xd9 &&
        key[1] == UUID_TEXT_BYTES &&
        bytes_uuid_text_pack((const char *)key + 2, UUID_TEXT_BYTES, packed)) {
        /* entity to the key as they are, then the key's 16 bytes */
        memcpy(out + o, event + l.entity, l.key - l.entity);
        o += l.key - l.entity;
        out[o++] = 0xc4;
        out[o++] = 16;
        memcpy(out + o, packed, 16);
        o += 16;
    } else {
        memcpy(out + o, event + l.entity, l.correlation - l.entity);
        o += l.correlation - l.entity;
    }
    size_t rest = rest_copy(event, &l, true, out + o); /* and no hash */
    return rest > 0 ? o + rest : 0;
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
    if (!stored_event_is_short(rec, len) || capacity < len + STORED_EVENT_GROWTH_MAX ||
        len < 3 + 2 + LOG_HASH_BYTES)
        return 0;
    int64_t type, time_ms;
    fields f = {r, 2, len};
    size_t type_at;
    layout l;
    if (!field_skip(&f, &type_at) || !int_at(r + type_at, f.at - type_at, &type) ||
        type <= LOG_EVENT_TYPE_NONE || type >= LOG_EVENT_TYPE_END || !layout_read(&f, &l) ||
        !int_at(r + l.time, l.causation - l.time, &time_ms))
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
    if (l.key != 0 && is_bin(r + l.key, l.key_end - l.key, 16)) {
        memcpy(out + o, r + l.entity, l.key - l.entity);
        o += l.key - l.entity;
        out[o++] = 0xd9;
        out[o++] = UUID_TEXT_BYTES;
        bytes_uuid_text_write(r + l.key + 2, (char *)out + o);
        o += UUID_TEXT_BYTES;
    } else {
        memcpy(out + o, r + l.entity, l.correlation - l.entity);
        o += l.correlation - l.entity;
    }
    size_t rest = rest_copy(r, &l, false, out + o);
    if (rest == 0)
        return 0;
    o += rest;
    out[o++] = 0xc4;
    out[o++] = LOG_HASH_BYTES;
    memcpy(out + o, hash, LOG_HASH_BYTES);
    return o + LOG_HASH_BYTES;
}
