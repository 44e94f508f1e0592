/*
 * msgpack_safe.c — decode msgpack from outside without trusting its counts.
 *
 * msgpack-c allocates an array's or map's element storage from the count in
 * its header before it reads any element, so a 5-byte input can ask for
 * gigabytes (msgpack-c issue 1013). msgpack_safe_check walks the encoding
 * first without allocating: every element needs at least one byte, so each
 * declared count must fit the bytes left; str/bin/ext lengths must fit too;
 * nesting is bounded; exactly one object must fill the whole buffer. Only
 * then is msgpack_unpack_next called, whose allocation is now bounded by a
 * small multiple of the input size.
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

int msgpack_safe_unpack_in(const void *buf, size_t len, unsigned depth_max, msgpack_zone *zone,
                           msgpack_object *out)
{
    int rc = msgpack_safe_check(buf, len, depth_max);
    if (rc != TALLY_ok)
        return rc;
    size_t off = 0;
    msgpack_unpack_return ur = msgpack_unpack(buf, len, &off, zone, out);
    if (ur == MSGPACK_UNPACK_NOMEM_ERROR)
        return TALLY_out_of_memory;
    if ((ur != MSGPACK_UNPACK_SUCCESS && ur != MSGPACK_UNPACK_EXTRA_BYTES) || off != len)
        return TALLY_invalid_argument;
    return TALLY_ok;
}

int msgpack_safe_unpack(const void *buf, size_t len, unsigned depth_max,
                        msgpack_unpacked *out)
{
    int rc = msgpack_safe_check(buf, len, depth_max);
    if (rc != TALLY_ok)
        return rc;
    size_t off = 0;
    msgpack_unpack_return ur = msgpack_unpack_next(out, buf, len, &off);
    if (ur == MSGPACK_UNPACK_NOMEM_ERROR)
        return TALLY_out_of_memory;
    if (ur != MSGPACK_UNPACK_SUCCESS || off != len)
        return TALLY_invalid_argument;
    return TALLY_ok;
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
