/*
 * msgpack_safe.c — decode msgpack from outside without trusting its counts.
 *
 * msgpack-c allocates an array's or map's element storage from the count in
 * its header before it reads any element, so a 5-byte input can ask for
 * gigabytes (msgpack-c issue 1013). So tally never calls msgpack-c's
 * unpacker on outside bytes: msgpack_safe_check walks the encoding without
 * allocating, and msgpack_safe_unpack parses it in one pass with the same
 * rules, building msgpack-c's object tree itself: every element needs at
 * least one byte, so each declared count must fit the bytes left;
 * str/bin/ext lengths must fit too; nesting is bounded; exactly one object
 * must fill the whole buffer. Its allocation is bounded by a small
 * multiple of the input size.
 */
#include "common/msgpack_safe.h"

#include "common/error.h"

#include <string.h>

typedef struct reader {
    const uint8_t *p;
    size_t left;
} reader;

static bool reader_skip(reader *r, size_t n)
{
    if (n > r->left)
        return false;
    r->p += n;
    r->left -= n;
    return true;
}

static bool reader_uint(reader *r, size_t width, uint64_t *out)
{
    if (width > r->left)
        return false;
    uint64_t v = 0;
    for (size_t i = 0; i < width; i++)
        v = (v << 8) | r->p[i];
    r->p += width;
    r->left -= width;
    *out = v;
    return true;
}

/* Reads one header. Sets *children to the number of nested elements that
 * follow (2 per map entry); returns false on truncation or a bad byte. */
static bool read_header(reader *r, uint64_t *children)
{
    uint64_t n = 0;
    *children = 0;
    if (r->left == 0)
        return false;
    uint8_t b = *r->p;
    reader_skip(r, 1);
    if (b <= 0x7f || b >= 0xe0 || b == 0xc0 || b == 0xc2 || b == 0xc3)
        return true;                          /* fixint, nil, bool */
    if ((b & 0xe0) == 0xa0)                   /* fixstr */
        return reader_skip(r, b & 0x1f);
    if ((b & 0xf0) == 0x90) {                 /* fixarray */
        *children = b & 0x0f;
        return true;
    }
    if ((b & 0xf0) == 0x80) {                 /* fixmap */
        *children = 2u * (b & 0x0f);
        return true;
    }
    switch (b) {
    case 0xcc: case 0xd0: return reader_skip(r, 1);
    case 0xcd: case 0xd1: return reader_skip(r, 2);
    case 0xce: case 0xd2: case 0xca: return reader_skip(r, 4);
    case 0xcf: case 0xd3: case 0xcb: return reader_skip(r, 8);
    case 0xd4: return reader_skip(r, 2);      /* fixext 1 */
    case 0xd5: return reader_skip(r, 3);
    case 0xd6: return reader_skip(r, 5);
    case 0xd7: return reader_skip(r, 9);
    case 0xd8: return reader_skip(r, 17);
    case 0xd9: case 0xc4: return reader_uint(r, 1, &n) && reader_skip(r, n);
    case 0xda: case 0xc5: return reader_uint(r, 2, &n) && reader_skip(r, n);
    case 0xdb: case 0xc6: return reader_uint(r, 4, &n) && reader_skip(r, n);
    case 0xc7: return reader_uint(r, 1, &n) && reader_skip(r, 1 + n);
    case 0xc8: return reader_uint(r, 2, &n) && reader_skip(r, 1 + n);
    case 0xc9: return reader_uint(r, 4, &n) && reader_skip(r, 1 + n);
    case 0xdc: if (!reader_uint(r, 2, &n)) return false; *children = n; return true;
    case 0xdd: if (!reader_uint(r, 4, &n)) return false; *children = n; return true;
    case 0xde: if (!reader_uint(r, 2, &n)) return false; *children = 2 * n; return true;
    case 0xdf: if (!reader_uint(r, 4, &n)) return false; *children = 2 * n; return true;
    default: return false;                    /* 0xc1 is never used */
    }
}

size_t msgpack_safe_skip(const void *buf, size_t len)
{
    reader r = {buf, len};
    uint64_t todo = 1;
    while (todo > 0) {
        uint64_t children;
        if (!read_header(&r, &children) || children > r.left)
            return 0;
        todo += children - 1;
    }
    return len - r.left;
}

int msgpack_safe_check(const void *buf, size_t len, unsigned depth_max)
{
    if (buf == NULL || len == 0)
        return TALLY_invalid_argument;
    if (depth_max > MSGPACK_SAFE_DEPTH_LIMIT)
        depth_max = MSGPACK_SAFE_DEPTH_LIMIT;
    reader r = {buf, len};
    uint64_t pending[MSGPACK_SAFE_DEPTH_LIMIT + 1];
    unsigned depth = 0;
    pending[0] = 1; /* one top-level object */
    for (;;) {
        while (depth > 0 && pending[depth] == 0)
            depth--;
        if (pending[depth] == 0)
            break;
        pending[depth]--;
        uint64_t children;
        if (!read_header(&r, &children))
            return TALLY_invalid_argument;
        if (children == 0)
            continue;
        if (children > r.left)   /* each element takes at least one byte */
            return TALLY_invalid_argument;
        if (depth + 1 > depth_max)
            return TALLY_invalid_argument;
        pending[++depth] = children;
    }
    return r.left == 0 ? TALLY_ok : TALLY_invalid_argument;
}

/* ---- one pass: check and build the object tree together ----
 * The same rules as msgpack_safe_check (every count fits the bytes left,
 * lengths fit, nesting at most depth_max, one object filling the buffer,
 * 0xc1 refused), and the same objects msgpack-c's unpacker builds (signed
 * types holding a value >= 0 are POSITIVE_INTEGER, strings, bins and exts
 * point into the buffer). A container's children are allocated only once
 * its count is known to fit the bytes left, so the zone never holds more
 * than a small multiple of the input. About twice as fast as the check
 * followed by msgpack-c's unpacker (docs/BENCHMARKS.md). */

typedef struct parser {
    const uint8_t *p, *end;
    msgpack_zone *zone;
    unsigned depth_max;
    int error; /* TALLY_invalid_argument or TALLY_out_of_memory once failed */
} parser;

static bool parse_fail(parser *ps, int code)
{
    if (ps->error == TALLY_ok)
        ps->error = code;
    return false;
}

static bool parse_take(parser *ps, size_t n, const uint8_t **out)
{
    if ((size_t)(ps->end - ps->p) < n)
        return parse_fail(ps, TALLY_invalid_argument);
    *out = ps->p;
    ps->p += n;
    return true;
}

static bool parse_uint(parser *ps, size_t width, uint64_t *out)
{
    const uint8_t *b;
    if (!parse_take(ps, width, &b))
        return false;
    uint64_t v = 0;
    for (size_t i = 0; i < width; i++)
        v = v << 8 | b[i];
    *out = v;
    return true;
}

/* A str, bin or ext payload of n bytes. */
static bool parse_bytes(parser *ps, uint64_t n, const char **ptr, uint32_t *size)
{
    const uint8_t *b;
    if (n > UINT32_MAX || !parse_take(ps, (size_t)n, &b))
        return parse_fail(ps, TALLY_invalid_argument);
    *ptr = (const char *)b;
    *size = (uint32_t)n;
    return true;
}

static bool parse_signed(parser *ps, size_t width, msgpack_object *o)
{
    uint64_t u;
    if (!parse_uint(ps, width, &u))
        return false;
    int64_t v = width == 1   ? (int8_t)u
                : width == 2 ? (int16_t)u
                : width == 4 ? (int32_t)u
                             : (int64_t)u;
    o->type = v < 0 ? MSGPACK_OBJECT_NEGATIVE_INTEGER : MSGPACK_OBJECT_POSITIVE_INTEGER;
    if (v < 0)
        o->via.i64 = v;
    else
        o->via.u64 = (uint64_t)v;
    return true;
}

static bool parse_float(parser *ps, size_t width, msgpack_object *o)
{
    uint64_t u;
    if (!parse_uint(ps, width, &u))
        return false;
    if (width == 4) {
        uint32_t bits = (uint32_t)u;
        float f;
        memcpy(&f, &bits, sizeof(f));
        o->type = MSGPACK_OBJECT_FLOAT32;
        o->via.f64 = f;
    } else {
        memcpy(&o->via.f64, &u, sizeof(u));
        o->type = MSGPACK_OBJECT_FLOAT64;
    }
    return true;
}

static bool parse_ext(parser *ps, uint64_t n, msgpack_object *o)
{
    const uint8_t *t;
    o->type = MSGPACK_OBJECT_EXT;
    if (!parse_take(ps, 1, &t))
        return false;
    o->via.ext.type = (int8_t)t[0];
    return parse_bytes(ps, n, &o->via.ext.ptr, &o->via.ext.size);
}

static bool parse_object(parser *ps, msgpack_object *o, unsigned depth);

/* An array of n elements, or a map of n entries, at nesting level depth. */
static bool parse_container(parser *ps, msgpack_object *o, uint64_t n, bool map, unsigned depth)
{
    o->type = map ? MSGPACK_OBJECT_MAP : MSGPACK_OBJECT_ARRAY;
    o->via.array.size = 0;
    o->via.array.ptr = NULL;
    if (n == 0)
        return true;
    uint64_t children = map ? 2 * n : n;
    if (children > (uint64_t)(ps->end - ps->p) || depth + 1 > ps->depth_max)
        return parse_fail(ps, TALLY_invalid_argument);
    size_t bytes = (size_t)n * (map ? sizeof(msgpack_object_kv) : sizeof(msgpack_object));
    void *items = msgpack_zone_malloc(ps->zone, bytes);
    if (items == NULL)
        return parse_fail(ps, TALLY_out_of_memory);
    for (uint64_t i = 0; i < n; i++) {
        bool ok = map ? parse_object(ps, &((msgpack_object_kv *)items)[i].key, depth + 1) &&
                            parse_object(ps, &((msgpack_object_kv *)items)[i].val, depth + 1)
                      : parse_object(ps, &((msgpack_object *)items)[i], depth + 1);
        if (!ok)
            return false;
    }
    if (map) {
        o->via.map.size = (uint32_t)n;
        o->via.map.ptr = items;
    } else {
        o->via.array.size = (uint32_t)n;
        o->via.array.ptr = items;
    }
    return true;
}

static bool parse_object(parser *ps, msgpack_object *o, unsigned depth)
{
    const uint8_t *head;
    uint64_t n;
    if (!parse_take(ps, 1, &head))
        return false;
    uint8_t b = *head;
    memset(o, 0, sizeof(*o));
    if (b <= 0x7f) {
        o->type = MSGPACK_OBJECT_POSITIVE_INTEGER;
        o->via.u64 = b;
        return true;
    }
    if (b >= 0xe0) {
        o->type = MSGPACK_OBJECT_NEGATIVE_INTEGER;
        o->via.i64 = (int8_t)b;
        return true;
    }
    if ((b & 0xe0) == 0xa0) {
        o->type = MSGPACK_OBJECT_STR;
        return parse_bytes(ps, b & 0x1f, &o->via.str.ptr, &o->via.str.size);
    }
    if ((b & 0xf0) == 0x90)
        return parse_container(ps, o, b & 0x0f, false, depth);
    if ((b & 0xf0) == 0x80)
        return parse_container(ps, o, b & 0x0f, true, depth);
    switch (b) {
    case 0xc0: o->type = MSGPACK_OBJECT_NIL; return true;
    case 0xc2: case 0xc3:
        o->type = MSGPACK_OBJECT_BOOLEAN;
        o->via.boolean = b == 0xc3;
        return true;
    case 0xcc: case 0xcd: case 0xce: case 0xcf:
        o->type = MSGPACK_OBJECT_POSITIVE_INTEGER;
        return parse_uint(ps, (size_t)1 << (b - 0xcc), &o->via.u64);
    case 0xd0: case 0xd1: case 0xd2: case 0xd3:
        return parse_signed(ps, (size_t)1 << (b - 0xd0), o);
    case 0xca: return parse_float(ps, 4, o);
    case 0xcb: return parse_float(ps, 8, o);
    case 0xd9: case 0xda: case 0xdb:
        o->type = MSGPACK_OBJECT_STR;
        return parse_uint(ps, (size_t)1 << (b - 0xd9), &n) &&
               parse_bytes(ps, n, &o->via.str.ptr, &o->via.str.size);
    case 0xc4: case 0xc5: case 0xc6:
        o->type = MSGPACK_OBJECT_BIN;
        return parse_uint(ps, (size_t)1 << (b - 0xc4), &n) &&
               parse_bytes(ps, n, &o->via.bin.ptr, &o->via.bin.size);
    case 0xd4: case 0xd5: case 0xd6: case 0xd7: case 0xd8:
        return parse_ext(ps, (uint64_t)1 << (b - 0xd4), o);
    case 0xc7: case 0xc8: case 0xc9:
        return parse_uint(ps, (size_t)1 << (b - 0xc7), &n) && parse_ext(ps, n, o);
    case 0xdc: case 0xdd:
        return parse_uint(ps, b == 0xdc ? 2 : 4, &n) && parse_container(ps, o, n, false, depth);
    case 0xde: case 0xdf:
        return parse_uint(ps, b == 0xde ? 2 : 4, &n) && parse_container(ps, o, n, true, depth);
    default: return parse_fail(ps, TALLY_invalid_argument); /* 0xc1 is never used */
    }
}

int msgpack_safe_unpack_in(const void *buf, size_t len, unsigned depth_max, msgpack_zone *zone,
                           msgpack_object *out)
{
    if (buf == NULL || len == 0)
        return TALLY_invalid_argument;
    parser ps = {buf, (const uint8_t *)buf + len, zone,
                 depth_max > MSGPACK_SAFE_DEPTH_LIMIT ? MSGPACK_SAFE_DEPTH_LIMIT : depth_max,
                 TALLY_ok};
    if (!parse_object(&ps, out, 0))
        return ps.error;
    return ps.p == ps.end ? TALLY_ok : TALLY_invalid_argument;
}

int msgpack_safe_unpack(const void *buf, size_t len, unsigned depth_max,
                        msgpack_unpacked *out)
{
    msgpack_unpacked_destroy(out); /* as msgpack_unpack_next does with a used one */
    out->zone = msgpack_zone_new(MSGPACK_ZONE_CHUNK_SIZE);
    if (out->zone == NULL)
        return TALLY_out_of_memory;
    int rc = msgpack_safe_unpack_in(buf, len, depth_max, out->zone, &out->data);
    if (rc != TALLY_ok)
        msgpack_unpacked_destroy(out); /* a refused input leaves nothing allocated */
    return rc;
}

const msgpack_object *msgpack_safe_map_get(const msgpack_object *map, const char *key)
{
    if (map == NULL || map->type != MSGPACK_OBJECT_MAP)
        return NULL;
    size_t key_len = strlen(key);
    for (uint32_t i = 0; i < map->via.map.size; i++) {
        const msgpack_object *k = &map->via.map.ptr[i].key;
        if (k->type == MSGPACK_OBJECT_STR && k->via.str.size == key_len &&
            memcmp(k->via.str.ptr, key, key_len) == 0)
            return &map->via.map.ptr[i].val;
    }
    return NULL;
}

int msgpack_record_begin(msgpack_record *r, msgpack_packer *pk, bool row, uint32_t n)
{
    r->pk = pk;
    r->row = row;
    return row ? msgpack_pack_array(pk, n) : msgpack_pack_map(pk, n);
}

int msgpack_record_key(const msgpack_record *r, const char *name)
{
    return r->row ? 0 : msgpack_safe_pack_cstr(r->pk, name);
}

msgpack_record_reader msgpack_record_read(const msgpack_object *o)
{
    bool ok = o != NULL && (o->type == MSGPACK_OBJECT_MAP || o->type == MSGPACK_OBJECT_ARRAY);
    return (msgpack_record_reader){o, 0, ok};
}

bool msgpack_record_is_row(const msgpack_record_reader *r)
{
    return r->o != NULL && r->o->type == MSGPACK_OBJECT_ARRAY;
}

uint32_t msgpack_record_fields(const msgpack_record_reader *r)
{
    if (r->o == NULL)
        return 0;
    if (r->o->type == MSGPACK_OBJECT_MAP)
        return r->o->via.map.size;
    return r->o->type == MSGPACK_OBJECT_ARRAY ? r->o->via.array.size : 0;
}

const msgpack_object *msgpack_record_next(msgpack_record_reader *r, const char *name)
{
    const msgpack_object *v = NULL;
    if (r->ok && msgpack_record_is_row(r))
        v = r->pos < r->o->via.array.size ? &r->o->via.array.ptr[r->pos++] : NULL;
    else if (r->ok)
        v = msgpack_safe_map_get(r->o, name);
    r->ok = r->ok && v != NULL;
    return v;
}

const msgpack_object *msgpack_record_next_optional(msgpack_record_reader *r, const char *name)
{
    if (!r->ok)
        return NULL;
    if (msgpack_record_is_row(r))
        return r->pos < r->o->via.array.size ? &r->o->via.array.ptr[r->pos++] : NULL;
    return msgpack_safe_map_get(r->o, name);
}

bool msgpack_record_next_u64(msgpack_record_reader *r, const char *name, uint64_t max,
                             uint64_t *out)
{
    bool ok = msgpack_safe_get_u64(msgpack_record_next(r, name), out) && *out <= max;
    r->ok = r->ok && ok;
    return ok;
}

bool msgpack_safe_get_u64(const msgpack_object *o, uint64_t *out)
{
    if (o == NULL || o->type != MSGPACK_OBJECT_POSITIVE_INTEGER)
        return false;
    *out = o->via.u64;
    return true;
}

bool msgpack_safe_get_i64(const msgpack_object *o, int64_t *out)
{
    if (o == NULL)
        return false;
    if (o->type == MSGPACK_OBJECT_NEGATIVE_INTEGER) {
        *out = o->via.i64;
        return true;
    }
    if (o->type == MSGPACK_OBJECT_POSITIVE_INTEGER && o->via.u64 <= INT64_MAX) {
        *out = (int64_t)o->via.u64;
        return true;
    }
    return false;
}

bool msgpack_safe_get_str(const msgpack_object *o, tally_str *out)
{
    if (o == NULL || o->type != MSGPACK_OBJECT_STR)
        return false;
    out->ptr = o->via.str.ptr;
    out->len = o->via.str.size;
    return true;
}

bool msgpack_safe_get_bin(const msgpack_object *o, const void **ptr, size_t *len)
{
    if (o == NULL || o->type != MSGPACK_OBJECT_BIN)
        return false;
    *ptr = o->via.bin.ptr;
    *len = o->via.bin.size;
    return true;
}

bool msgpack_safe_get_id128(const msgpack_object *o, tally_id128 *out)
{
    const void *ptr;
    size_t len;
    if (!msgpack_safe_get_bin(o, &ptr, &len) || len != 16)
        return false;
    memcpy(out->bytes, ptr, 16);
    return true;
}

/* ---- packing into a caller-owned fixed buffer ---- */

static int fixed_buffer_write(void *data, const char *buf, size_t len)
{
    msgpack_safe_buffer *b = data;
    if (len > b->capacity - b->len) {
        b->overflow = true;
        return -1;
    }
    memcpy(b->data + b->len, buf, len);
    b->len += len;
    return 0;
}

void msgpack_safe_buffer_init(msgpack_safe_buffer *b, uint8_t *data, size_t capacity,
                              msgpack_packer *pk)
{
    b->data = data;
    b->capacity = capacity;
    b->len = 0;
    b->overflow = false;
    msgpack_packer_init(pk, b, fixed_buffer_write);
}

/* Field names and short values are fixstr (under 32 bytes): header and
 * bytes go to the writer in one call instead of two (every event and reply
 * packs dozens of them). The bytes are the same as msgpack_pack_str's. */
#define FIXSTR_BYTES_MAX 31

int msgpack_safe_pack_str(msgpack_packer *pk, tally_str s)
{
    if (s.len <= FIXSTR_BYTES_MAX) {
        char buf[1 + FIXSTR_BYTES_MAX];
        buf[0] = (char)(0xa0 | s.len);
        if (s.len)
            memcpy(buf + 1, s.ptr, s.len);
        return pk->callback(pk->data, buf, 1 + s.len);
    }
    return msgpack_pack_str(pk, s.len) || msgpack_pack_str_body(pk, s.ptr, s.len);
}

int msgpack_safe_pack_cstr(msgpack_packer *pk, const char *s)
{
    return msgpack_safe_pack_str(pk, (tally_str){s, strlen(s)});
}

int msgpack_safe_pack_bin(msgpack_packer *pk, const void *p, size_t n)
{
    return msgpack_pack_bin(pk, n) || msgpack_pack_bin_body(pk, p, n);
}
