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

/* The same into a zone the caller owns and reuses (msgpack_zone_clear
 * between objects): no allocation per object once the zone has grown. */
int msgpack_safe_unpack_in(const void *buf, size_t len, unsigned depth_max, msgpack_zone *zone,
                           msgpack_object *out);

/* The size in bytes of the first object in buf, or 0 when it is truncated
 * or malformed. Allocates nothing. */
size_t msgpack_safe_skip(const void *buf, size_t len);

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

/* ---- records: one object, two forms ----
 * A record (an account, a transfer, an entitlement) is packed either as a
 * map of named fields (replies, event format 1) or as a row: an array of
 * the same fields in the same order, without names (event format 2,
 * docs/EVENTS.md). One pack function writes both forms and one unpack
 * function reads both, so the field order is written down once. */
typedef struct msgpack_record {
    msgpack_packer *pk;
    bool row;
} msgpack_record;

/* Begin a record of n fields: a map header, or an array header for a row. */
int msgpack_record_begin(msgpack_record *r, msgpack_packer *pk, bool row, uint32_t n);
/* The name of the next field: packed in a map, nothing in a row. */
int msgpack_record_key(const msgpack_record *r, const char *name);

/* Reading a record of either form, field by field in the documented order.
 * A row may be longer than the reader knows (fields added at its end by a
 * later version are ignored); a missing field fails. */
typedef struct msgpack_record_reader {
    const msgpack_object *o;
    uint32_t pos; /* rows: index of the next field */
    bool ok;      /* sticky: false once a field was missing or of a bad type */
} msgpack_record_reader;

/* Start reading o; ok is false unless o is a map or an array. */
msgpack_record_reader msgpack_record_read(const msgpack_object *o);
/* True when the record is a row (event format 2). */
bool msgpack_record_is_row(const msgpack_record_reader *r);
/* How many fields the record has (0 when it is neither form). */
uint32_t msgpack_record_fields(const msgpack_record_reader *r);
/* The next field: by name in a map, the next element of a row. NULL (and
 * ok false) when it is absent. */
const msgpack_object *msgpack_record_next(msgpack_record_reader *r, const char *name);

/* The next field as an unsigned integer of at most max. */
/* The next field if the record has it, else NULL without failing the
 * reader: fields added at a record's end that older writers left out. */
const msgpack_object *msgpack_record_next_optional(msgpack_record_reader *r, const char *name);
bool msgpack_record_next_u64(msgpack_record_reader *r, const char *name, uint64_t max,
                             uint64_t *out);

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
