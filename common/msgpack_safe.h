/*
 * msgpack_safe.h — bounded msgpack decoding and packing into fixed buffers.
 *
 * Every msgpack input from outside (requests, stored events) goes through
 * msgpack_safe_unpack: the structure is checked without allocation before
 * msgpack-c builds its object tree (see msgpack_safe.c for why). Decoded
 * strings and bins point into the input buffer and are not NUL-terminated;
 * the buffer must outlive them.
 */
#ifndef TALLY_MSGPACK_SAFE_H
#define TALLY_MSGPACK_SAFE_H

#include "common/bytes.h"

#include <msgpack.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define MSGPACK_SAFE_DEPTH_LIMIT 64

/* Check that buf holds exactly one msgpack object whose declared counts and
 * lengths fit the bytes present and whose nesting is at most depth_max.
 * Returns TALLY_ok or TALLY_invalid_argument. Allocates nothing. */
int msgpack_safe_check(const void *buf, size_t len, unsigned depth_max);

/* msgpack_safe_check, then unpack into out (initialised by the caller with
 * msgpack_unpacked_init and destroyed with msgpack_unpacked_destroy).
 * Returns TALLY_ok, TALLY_invalid_argument or TALLY_out_of_memory. */
int msgpack_safe_unpack(const void *buf, size_t len, unsigned depth_max,
                        msgpack_unpacked *out);

/* Value of the string key in a map object, or NULL (not a map, absent). */
const msgpack_object *msgpack_safe_map_get(const msgpack_object *map, const char *key);

/* Typed getters: false when o is NULL or of another type/range. */
bool msgpack_safe_get_u64(const msgpack_object *o, uint64_t *out);
bool msgpack_safe_get_i64(const msgpack_object *o, int64_t *out);
bool msgpack_safe_get_str(const msgpack_object *o, tally_str *out);
bool msgpack_safe_get_bin(const msgpack_object *o, const void **ptr, size_t *len);
bool msgpack_safe_get_id128(const msgpack_object *o, tally_id128 *out);

/* A packer target of fixed capacity: a write past the end fails (the pack
 * call returns non-zero) and sets overflow; nothing is allocated. */
typedef struct msgpack_safe_buffer {
    uint8_t *data;
    size_t capacity;
    size_t len;
    bool overflow;
} msgpack_safe_buffer;

void msgpack_safe_buffer_init(msgpack_safe_buffer *b, uint8_t *data, size_t capacity,
                              msgpack_packer *pk);

/* Pack helpers; return 0 on success like msgpack-c's pack functions. */
int msgpack_safe_pack_cstr(msgpack_packer *pk, const char *s);
int msgpack_safe_pack_str(msgpack_packer *pk, tally_str s);
int msgpack_safe_pack_bin(msgpack_packer *pk, const void *p, size_t n);

#endif
