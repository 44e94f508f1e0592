/*
 * out.h — a reply being built: a msgpack packer over a growing NNG
 * message, with maps and arrays whose sizes are counted by the code that
 * writes their entries (never by hand).
 *
 *     net_out o;
 *     if (net_out_begin(&o) != 0) ...
 *     net_map_begin(&o);
 *     net_key(&o, "code"); msgpack_safe_pack_cstr(&o.pk, "ok");
 *     net_map_end(&o);
 *     nng_msg *m = net_out_take(&o);   // NULL if anything failed
 *
 * Errors are sticky: after the first failure (the reply limit, out of
 * memory, a pack function's own failure reported with net_out_fail) every
 * later write is a no-op and net_out_take returns NULL. The header of a
 * counted map or array is written as the smallest msgpack form its final
 * count takes (fixmap, map16, map32), byte for byte what
 * msgpack_pack_map(n) would have written.
 */
#ifndef TALLY_NET_OUT_H
#define TALLY_NET_OUT_H

#include <msgpack.h>
#include <nng/nng.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define NET_OUT_DEPTH_MAX 8

typedef struct net_out {
    msgpack_packer pk;  /* pack values with it: msgpack_pack_*(&o->pk, ...) */
    nng_msg *msg;
    size_t limit;       /* bytes at most (TALLY_REPLY_BYTES_MAX) */
    bool bad;
    bool overflow;      /* the reply would have passed the limit */
    unsigned depth;     /* open counted maps and arrays */
    bool for_digest;    /* cluster mode's state digest (net/cluster/checkpoint.h): the
                           figures only this node knows (a subscriber's last fetch,
                           kept in its memory) are written as 0, so that every node
                           computes the same bytes */
    struct {
        size_t at;      /* offset of the 1-byte placeholder header */
        uint32_t count;
        bool map;
    } open[NET_OUT_DEPTH_MAX];
} net_out;

/* A fresh reply. 0, or -1 when no message could be allocated. */
int net_out_begin(net_out *o);

/* The finished message (ownership passes), or NULL when building failed
 * (the message is freed then). Counted maps left open count as failure. */
nng_msg *net_out_take(net_out *o);

/* Drop the reply being built. */
void net_out_discard(net_out *o);

/* Mark the reply failed (a value could not be packed). Returns -1. */
int net_out_fail(net_out *o);

/* true when nothing has failed so far. */
static inline bool net_out_ok(const net_out *o) { return !o->bad; }

/* A map whose entries are counted by net_key, closed by net_map_end. */
void net_map_begin(net_out *o);
void net_map_end(net_out *o);

/* The next entry's key (its value follows); counts one entry. */
void net_key(net_out *o, const char *key);

/* An array whose elements are counted by net_item, closed by
 * net_array_end. */
void net_array_begin(net_out *o);
void net_item(net_out *o);
void net_array_end(net_out *o);

/* Shorthands for a key and its value. */
void net_kv_u64(net_out *o, const char *key, uint64_t v);
void net_kv_i64(net_out *o, const char *key, int64_t v);
void net_kv_bool(net_out *o, const char *key, bool v);
void net_kv_str(net_out *o, const char *key, const char *ptr, size_t len);
void net_kv_bin(net_out *o, const char *key, const void *ptr, size_t len);
void net_kv_cstr(net_out *o, const char *key, const char *v);
void net_kv_nil(net_out *o, const char *key);

/* The head every reply starts with: opens the reply map and packs "v" and
 * "code". Close it with net_map_end. */
void net_reply_open(net_out *o, int code);

/* A whole error reply: {"v":1, "code": name, "message": detail}. */
void net_reply_error(net_out *o, int code, const char *detail);

#endif
