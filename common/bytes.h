/*
 * bytes.h — fixed-width integer encoding, string slices and 128-bit ids.
 *
 * Keys in LMDB are big-endian so that byte order equals numeric order;
 * fixed-layout record values use big-endian too, for one rule everywhere.
 */
#ifndef TALLY_BYTES_H
#define TALLY_BYTES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* A byte string that is not NUL-terminated; it borrows its storage. */
typedef struct tally_str {
    const char *ptr;
    size_t len;
} tally_str;

/* A 128-bit identifier (transfer ids, event ids), big-endian bytes. */
typedef struct tally_id128 {
    uint8_t bytes[16];
} tally_id128;

static inline tally_str tally_str_from(const char *cstr)
{
    tally_str s = {cstr, cstr ? strlen(cstr) : 0};
    return s;
}

static inline bool tally_str_equal(tally_str a, tally_str b)
{
    return a.len == b.len && (a.len == 0 || memcmp(a.ptr, b.ptr, a.len) == 0);
}

static inline bool tally_id128_is_zero(const tally_id128 *id)
{
    static const uint8_t zero[16];
    return memcmp(id->bytes, zero, 16) == 0;
}

static inline bool tally_id128_equal(const tally_id128 *a, const tally_id128 *b)
{
    return memcmp(a->bytes, b->bytes, 16) == 0;
}

static inline void put_u16_be(uint8_t *p, uint16_t v)
{
    p[0] = (uint8_t)(v >> 8);
    p[1] = (uint8_t)v;
}

/* Written out byte by byte rather than as loops: GCC at -O2 does not
 * unroll an eight-step loop, and a loop costs about 40 instructions where
 * these compile to one byte swap and one load or store (each transfer
 * puts and gets dozens of big-endian fields: records, keys, index
 * entries). */
static inline void put_u32_be(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)(v >> 24);
    p[1] = (uint8_t)(v >> 16);
    p[2] = (uint8_t)(v >> 8);
    p[3] = (uint8_t)v;
}

static inline void put_u64_be(uint8_t *p, uint64_t v)
{
    put_u32_be(p, (uint32_t)(v >> 32));
    put_u32_be(p + 4, (uint32_t)v);
}

static inline uint16_t get_u16_be(const uint8_t *p)
{
    return (uint16_t)((p[0] << 8) | p[1]);
}

static inline uint32_t get_u32_be(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | (uint32_t)p[3];
}

static inline uint64_t get_u64_be(const uint8_t *p)
{
    return (uint64_t)get_u32_be(p) << 32 | get_u32_be(p + 4);
}

/* Unsigned LEB128 varints (7 bits per byte, low group first, high bit =
 * more): at most UVARINT_BYTES_MAX bytes. put_uvarint returns the bytes
 * written; get_uvarint reads one from *p (not past end), advances *p and
 * returns false for a truncated, overlong (> 10 bytes or beyond 64 bits)
 * or non-minimal encoding, so each value has exactly one encoding. */
#define UVARINT_BYTES_MAX 10

static inline size_t put_uvarint(uint8_t *out, uint64_t v)
{
    size_t n = 0;
    for (; v >= 0x80; v >>= 7)
        out[n++] = (uint8_t)(v | 0x80);
    out[n++] = (uint8_t)v;
    return n;
}

static inline bool get_uvarint(const uint8_t **p, const uint8_t *end, uint64_t *v)
{
    uint64_t x = 0;
    for (unsigned shift = 0, i = 0; *p + i < end && i < UVARINT_BYTES_MAX; i++, shift += 7) {
        uint8_t b = (*p)[i];
        if (shift == 63 && b > 1)
            return false; /* beyond 64 bits */
        x |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80)) {
            if (b == 0 && i > 0)
                return false; /* non-minimal */
            *p += i + 1;
            *v = x;
            return true;
        }
    }
    return false;
}

/* Hex of a 128-bit id into out (33 bytes: 32 digits and a NUL). */
void tally_id128_to_hex(const tally_id128 *id, char out[33]);
/* The same as UUID text (8-4-4-4-12 lower-case hex digits) into out (37
 * bytes with the NUL). */
void bytes_id128_uuid_text(const tally_id128 *id, char out[37]);
/* The same from 16 bytes, without the NUL (36 bytes). */
void bytes_uuid_text_write(const uint8_t b[16], char out[36]);
/* Whether text is a UUID's text exactly as bytes_uuid_text_write writes it
 * (36 bytes: 8-4-4-4-12 lower-case hex digits): its 16 bytes into out.
 * The inbox keys (ledger/inbox.c) and the stored events' keys
 * (log/stored_event.c) that are such text are kept as the 16 bytes. */
bool bytes_uuid_text_pack(const char *text, size_t len, uint8_t out[16]);

/* The value of one hex digit (either case), or -1. */
int bytes_hex_value(char c);
/* Parse 32 hex digits (optionally with UUID dashes); false when malformed. */
bool tally_id128_from_hex(const char *text, tally_id128 *id);

/* A new UUIDv7: 48-bit Unix milliseconds, version 7, variant 10, 74 random
 * bits from getrandom(2). Returns 0, or TALLY_io_error when the kernel gives
 * no randomness. */
int tally_id128_uuidv7(int64_t unix_ms, tally_id128 *id);

/* A UUIDv7 drawn from no randomness (RFC 9562's fixed-length counter,
 * method 1): 48-bit Unix milliseconds, version 7, a 26-bit tag (12 bits in
 * rand_a, 14 at the top of rand_b), variant 10, and the low 48 bits of
 * counter. For one tag, unique while equal times come with counters less
 * than 2^48 apart, and ordered by (unix_ms, counter). An event's id
 * (log/log.c): the time the writer gave its command, the store's tag and
 * the event's seq, so applying the same commands to copies of a store
 * gives the same ids. */
void tally_id128_uuidv7_counted(int64_t unix_ms, uint32_t tag, uint64_t counter,
                                tally_id128 *id);

/* Records of n unsigned fields (ledger/account.c, ledger/transfer.c):
 * written as the format byte then one uvarint per field; read either that
 * way or fixed-width big-endian (an older format) with widths[i] bytes
 * per field, widths[i] being also each field's range. */

/* The format byte and the fields as uvarints into out; returns the length
 * (at most 1 + n * UVARINT_BYTES_MAX). */
static inline size_t fields_put_uvarints(uint8_t *out, uint8_t format, const uint64_t *f, int n)
{
    size_t len = 0;
    out[len++] = format;
    for (int i = 0; i < n; i++)
        len += put_uvarint(out + len, f[i]);
    return len;
}

/* The fields after the format byte of p[0..len), as uvarints that fill it
 * exactly: false for a truncated, trailing or non-minimal record. */
static inline bool fields_get_uvarints(const uint8_t *p, size_t len, uint64_t *f, int n)
{
    const uint8_t *q = p + 1, *end = p + len;
    for (int i = 0; i < n; i++)
        if (!get_uvarint(&q, end, &f[i]))
            return false;
    return q == end;
}

/* The fields after the format byte of p[0..len), fixed-width big-endian:
 * false unless len is exactly 1 + the widths' sum. */
static inline bool fields_get_fixed(const uint8_t *p, size_t len, const uint8_t *widths,
                                    uint64_t *f, int n)
{
    size_t want = 1;
    for (int i = 0; i < n; i++)
        want += widths[i];
    if (len != want)
        return false;
    p++;
    for (int i = 0; i < n; p += widths[i++]) {
        f[i] = 0;
        for (int b = 0; b < widths[i]; b++)
            f[i] = f[i] << 8 | p[b];
    }
    return true;
}

/* Whether every field fits its width. */
static inline bool fields_fit(const uint64_t *f, const uint8_t *widths, int n)
{
    for (int i = 0; i < n; i++)
        if (widths[i] < 8 && f[i] >> (8 * widths[i]) != 0)
            return false;
    return true;
}

#endif
