/*
 * out.c — building replies with counted maps and arrays (see out.h).
 */
#include "net/ops/out.h"

#include "common/error.h"
#include "common/limits.h"
#include "common/msgpack_safe.h"

#include <assert.h>
#include <string.h>

/* Packer target: append to the reply, growing its capacity geometrically
 * (NNG 1.5 reallocates and copies the whole message on every append that
 * does not fit, which made large replies quadratic). */
static int out_write(void *data, const char *buf, size_t len)
{
    net_out *o = data;
    if (o->bad)
        return -1;
    size_t need = nng_msg_len(o->msg) + len;
    size_t cap = nng_msg_capacity(o->msg);
    if (need > o->limit) {
        o->overflow = true;
        return net_out_fail(o);
    }
    if (need > cap) {
        size_t grow = cap * 2 > need ? cap * 2 : need;
        if (nng_msg_reserve(o->msg, grow < o->limit ? grow : o->limit) != 0)
            return net_out_fail(o);
    }
    return nng_msg_append(o->msg, buf, len) == 0 ? 0 : net_out_fail(o);
}

/* noinline: tests/lsan.supp and tests/valgrind/tallyd.supp name this frame
 * (a reply message NNG 1.5.2 loses when a peer goes away mid-send). */
__attribute__((noinline)) static nng_msg *reply_begin(void)
{
    nng_msg *m;
    if (nng_msg_alloc(&m, 0) != 0)
        return NULL;
    if (nng_msg_reserve(m, 256) != 0) {
        nng_msg_free(m);
        return NULL;
    }
    return m;
}

int net_out_begin(net_out *o)
{
    memset(o, 0, sizeof(*o));
    o->limit = TALLY_REPLY_BYTES_MAX;
    o->msg = reply_begin();
    if (o->msg == NULL)
        return -1;
    msgpack_packer_init(&o->pk, o, out_write);
    return 0;
}

int net_out_fail(net_out *o)
{
    o->bad = true;
    return -1;
}

void net_out_discard(net_out *o)
{
    if (o->msg)
        nng_msg_free(o->msg);
    o->msg = NULL;
    o->bad = true;
}

nng_msg *net_out_take(net_out *o)
{
    if (o->bad || o->depth != 0) {
        net_out_discard(o);
        return NULL;
    }
    nng_msg *m = o->msg;
    o->msg = NULL;
    return m;
}

static void open_counted(net_out *o, bool map)
{
    if (o->bad)
        return;
    if (o->depth == NET_OUT_DEPTH_MAX) {
        net_out_fail(o);
        return;
    }
    o->open[o->depth].at = nng_msg_len(o->msg);
    o->open[o->depth].count = 0;
    o->open[o->depth].map = map;
    o->depth++;
    const char placeholder = 0; /* rewritten by close_counted */
    out_write(o, &placeholder, 1);
}

/* Rewrite the placeholder as the smallest header for the final count:
 * fix (1 byte, in place), 16-bit (3 bytes) or 32-bit (5 bytes; the body
 * moves up to make room). */
static void close_counted(net_out *o, bool map)
{
    if (o->bad)
        return;
    assert(o->depth > 0 && o->open[o->depth - 1].map == map);
    o->depth--;
    size_t at = o->open[o->depth].at;
    uint32_t n = o->open[o->depth].count;
    uint8_t head[5];
    size_t head_len;
    if (n < 16) {
        head[0] = (uint8_t)((map ? 0x80 : 0x90) | n);
        head_len = 1;
    } else if (n <= UINT16_MAX) {
        head[0] = map ? 0xde : 0xdc;
        head[1] = (uint8_t)(n >> 8);
        head[2] = (uint8_t)n;
        head_len = 3;
    } else {
        head[0] = map ? 0xdf : 0xdd;
        for (int i = 0; i < 4; i++)
            head[1 + i] = (uint8_t)(n >> (24 - 8 * i));
        head_len = 5;
    }
    size_t body = nng_msg_len(o->msg) - at - 1;
    if (head_len > 1) {
        static const char room[4];
        if (out_write(o, room, head_len - 1) != 0)
            return;
    }
    uint8_t *p = (uint8_t *)nng_msg_body(o->msg) + at;
    if (head_len > 1)
        memmove(p + head_len, p + 1, body);
    memcpy(p, head, head_len);
}

void net_map_begin(net_out *o) { open_counted(o, true); }
void net_map_end(net_out *o) { close_counted(o, true); }
void net_array_begin(net_out *o) { open_counted(o, false); }
void net_array_end(net_out *o) { close_counted(o, false); }

static void count_one(net_out *o, bool map)
{
    if (o->bad)
        return;
    assert(o->depth > 0 && o->open[o->depth - 1].map == map);
    o->open[o->depth - 1].count++;
}

void net_key(net_out *o, const char *key)
{
    count_one(o, true);
    msgpack_safe_pack_cstr(&o->pk, key);
}

void net_item(net_out *o) { count_one(o, false); }

void net_kv_u64(net_out *o, const char *key, uint64_t v)
{
    net_key(o, key);
    msgpack_pack_uint64(&o->pk, v);
}

void net_kv_i64(net_out *o, const char *key, int64_t v)
{
    net_key(o, key);
    msgpack_pack_int64(&o->pk, v);
}

void net_kv_bool(net_out *o, const char *key, bool v)
{
    net_key(o, key);
    if (v)
        msgpack_pack_true(&o->pk);
    else
        msgpack_pack_false(&o->pk);
}

void net_kv_str(net_out *o, const char *key, const char *ptr, size_t len)
{
    net_key(o, key);
    msgpack_safe_pack_str(&o->pk, (tally_str){ptr, len});
}

void net_kv_bin(net_out *o, const char *key, const void *ptr, size_t len)
{
    net_key(o, key);
    if (msgpack_safe_pack_bin(&o->pk, ptr, len))
        net_out_fail(o);
}

void net_kv_cstr(net_out *o, const char *key, const char *v)
{
    net_key(o, key);
    msgpack_safe_pack_cstr(&o->pk, v);
}

void net_kv_nil(net_out *o, const char *key)
{
    net_key(o, key);
    msgpack_pack_nil(&o->pk);
}

void net_reply_open(net_out *o, int code)
{
    net_map_begin(o);
    net_kv_u64(o, "v", TALLY_PROTOCOL_VERSION);
    net_kv_cstr(o, "code", tally_strerror(code));
}

void net_reply_error(net_out *o, int code, const char *detail)
{
    net_reply_open(o, code);
    net_kv_cstr(o, "message", detail ? detail : "");
    net_map_end(o);
}
