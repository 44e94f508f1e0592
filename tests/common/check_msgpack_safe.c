/*
 * check_msgpack_safe.c — tests of common/msgpack_safe (the allocation-free
 * structure check in front of msgpack-c, the typed getters, the fixed-buffer
 * packer), and of the small helpers next to it: common/table (the hash
 * table the invariant checker folds into) and common/bytes (hex, UUIDv7).
 *
 * Hostile inputs are written byte by byte so that each test says exactly
 * which header it feeds; valid nested objects are built with msgpack-c so
 * that truncation covers real encodings.
 */
#include "common/bytes.h"
#include "common/error.h"
#include "common/msgpack_safe.h"
#include "common/table.h"
#include "tests/support/suite.h"
#include "tests/support/test_support.h"

#include <check.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define DEPTH TALLY_MSGPACK_DEPTH_MAX

typedef struct sample {
    const char *name;
    const uint8_t *bytes;
    size_t len;
    msgpack_object_type type;
} sample;

#define SAMPLE(n, t, ...)                                                                   \
    {n, (const uint8_t[]){__VA_ARGS__}, sizeof((const uint8_t[]){__VA_ARGS__}), t}

/* One object of every msgpack format family. */
static const sample valid_samples[] = {
    SAMPLE("nil", MSGPACK_OBJECT_NIL, 0xc0),
    SAMPLE("false", MSGPACK_OBJECT_BOOLEAN, 0xc2),
    SAMPLE("true", MSGPACK_OBJECT_BOOLEAN, 0xc3),
    SAMPLE("positive fixint", MSGPACK_OBJECT_POSITIVE_INTEGER, 0x7f),
    SAMPLE("uint8", MSGPACK_OBJECT_POSITIVE_INTEGER, 0xcc, 0xff),
    SAMPLE("uint16", MSGPACK_OBJECT_POSITIVE_INTEGER, 0xcd, 0xff, 0xff),
    SAMPLE("uint32", MSGPACK_OBJECT_POSITIVE_INTEGER, 0xce, 0xff, 0xff, 0xff, 0xff),
    SAMPLE("uint64", MSGPACK_OBJECT_POSITIVE_INTEGER, 0xcf, 0xff, 0xff, 0xff, 0xff, 0xff,
           0xff, 0xff, 0xff),
    SAMPLE("negative fixint", MSGPACK_OBJECT_NEGATIVE_INTEGER, 0xe0),
    SAMPLE("int8", MSGPACK_OBJECT_NEGATIVE_INTEGER, 0xd0, 0x80),
    SAMPLE("int16", MSGPACK_OBJECT_NEGATIVE_INTEGER, 0xd1, 0x80, 0x00),
    SAMPLE("int32", MSGPACK_OBJECT_NEGATIVE_INTEGER, 0xd2, 0x80, 0x00, 0x00, 0x00),
    SAMPLE("int64", MSGPACK_OBJECT_NEGATIVE_INTEGER, 0xd3, 0x80, 0x00, 0x00, 0x00, 0x00,
           0x00, 0x00, 0x00),
    SAMPLE("float32", MSGPACK_OBJECT_FLOAT32, 0xca, 0x3f, 0x80, 0x00, 0x00),
    SAMPLE("float64", MSGPACK_OBJECT_FLOAT64, 0xcb, 0x3f, 0xf0, 0x00, 0x00, 0x00, 0x00,
           0x00, 0x00),
    SAMPLE("empty fixstr", MSGPACK_OBJECT_STR, 0xa0),
    SAMPLE("fixstr", MSGPACK_OBJECT_STR, 0xa3, 'a', 'b', 'c'),
    SAMPLE("str8", MSGPACK_OBJECT_STR, 0xd9, 0x02, 'a', 'b'),
    SAMPLE("str16", MSGPACK_OBJECT_STR, 0xda, 0x00, 0x02, 'a', 'b'),
    SAMPLE("str32", MSGPACK_OBJECT_STR, 0xdb, 0x00, 0x00, 0x00, 0x02, 'a', 'b'),
    SAMPLE("bin8", MSGPACK_OBJECT_BIN, 0xc4, 0x01, 0x00),
    SAMPLE("bin16", MSGPACK_OBJECT_BIN, 0xc5, 0x00, 0x01, 0x00),
    SAMPLE("bin32", MSGPACK_OBJECT_BIN, 0xc6, 0x00, 0x00, 0x00, 0x01, 0x00),
    SAMPLE("empty fixarray", MSGPACK_OBJECT_ARRAY, 0x90),
    SAMPLE("fixarray", MSGPACK_OBJECT_ARRAY, 0x92, 0x01, 0xc0),
    SAMPLE("array16", MSGPACK_OBJECT_ARRAY, 0xdc, 0x00, 0x02, 0x01, 0x02),
    SAMPLE("array32", MSGPACK_OBJECT_ARRAY, 0xdd, 0x00, 0x00, 0x00, 0x01, 0xc3),
    SAMPLE("empty fixmap", MSGPACK_OBJECT_MAP, 0x80),
    SAMPLE("fixmap", MSGPACK_OBJECT_MAP, 0x81, 0xa1, 'k', 0x05),
    SAMPLE("map16", MSGPACK_OBJECT_MAP, 0xde, 0x00, 0x01, 0xa1, 'k', 0x05),
    SAMPLE("map32", MSGPACK_OBJECT_MAP, 0xdf, 0x00, 0x00, 0x00, 0x01, 0x01, 0x02),
    SAMPLE("fixext1", MSGPACK_OBJECT_EXT, 0xd4, 0x01, 0xaa),
    SAMPLE("fixext2", MSGPACK_OBJECT_EXT, 0xd5, 0x01, 0xaa, 0xbb),
    SAMPLE("fixext4", MSGPACK_OBJECT_EXT, 0xd6, 0x01, 1, 2, 3, 4),
    SAMPLE("fixext8", MSGPACK_OBJECT_EXT, 0xd7, 0x01, 1, 2, 3, 4, 5, 6, 7, 8),
    SAMPLE("fixext16", MSGPACK_OBJECT_EXT, 0xd8, 0x01, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11,
           12, 13, 14, 15, 16),
    SAMPLE("ext8", MSGPACK_OBJECT_EXT, 0xc7, 0x02, 0x01, 0xaa, 0xbb),
    SAMPLE("ext16", MSGPACK_OBJECT_EXT, 0xc8, 0x00, 0x02, 0x01, 0xaa, 0xbb),
    SAMPLE("ext32", MSGPACK_OBJECT_EXT, 0xc9, 0x00, 0x00, 0x00, 0x02, 0x01, 0xaa, 0xbb),
};

/* Unpack buf and expect rc. */
static void expect_unpack(const void *buf, size_t len, unsigned depth_max, int rc)
{
    msgpack_unpacked up;
    msgpack_unpacked_init(&up);
    ck_assert_int_eq(msgpack_safe_unpack(buf, len, depth_max, &up), rc);
    msgpack_unpacked_destroy(&up);
}

static void expect_rejected(const void *buf, size_t len, unsigned depth_max)
{
    ck_assert_int_eq(msgpack_safe_check(buf, len, depth_max), TALLY_invalid_argument);
    msgpack_unpacked up;
    msgpack_unpacked_init(&up);
    ck_assert_int_eq(msgpack_safe_unpack(buf, len, depth_max, &up), TALLY_invalid_argument);
    /* Rejected: nothing of the parse stays allocated. */
    ck_assert_ptr_null(up.zone);
    msgpack_unpacked_destroy(&up);
}

START_TEST(valid_objects_of_every_type_are_accepted)
{
    for (size_t i = 0; i < sizeof(valid_samples) / sizeof(valid_samples[0]); i++) {
        const sample *s = &valid_samples[i];
        ck_assert_msg(msgpack_safe_check(s->bytes, s->len, DEPTH) == TALLY_ok, "check %s",
                      s->name);
        msgpack_unpacked up;
        msgpack_unpacked_init(&up);
        ck_assert_msg(msgpack_safe_unpack(s->bytes, s->len, DEPTH, &up) == TALLY_ok,
                      "unpack %s", s->name);
        ck_assert_msg(up.data.type == s->type, "%s: type %d, want %d", s->name,
                      (int)up.data.type, (int)s->type);
        msgpack_unpacked_destroy(&up);
    }
}
END_TEST

/* Two trees alike in every member, types included (floats by their bits,
 * so that NaNs compare). */
static bool same_tree(const msgpack_object *a, const msgpack_object *b)
{
    if (a->type != b->type)
        return false;
    switch (a->type) {
    case MSGPACK_OBJECT_ARRAY:
        if (a->via.array.size != b->via.array.size)
            return false;
        for (uint32_t i = 0; i < a->via.array.size; i++)
            if (!same_tree(&a->via.array.ptr[i], &b->via.array.ptr[i]))
                return false;
        return true;
    case MSGPACK_OBJECT_MAP:
        if (a->via.map.size != b->via.map.size)
            return false;
        for (uint32_t i = 0; i < a->via.map.size; i++)
            if (!same_tree(&a->via.map.ptr[i].key, &b->via.map.ptr[i].key) ||
                !same_tree(&a->via.map.ptr[i].val, &b->via.map.ptr[i].val))
                return false;
        return true;
    case MSGPACK_OBJECT_STR:
    case MSGPACK_OBJECT_BIN:
        return a->via.str.size == b->via.str.size &&
               (a->via.str.size == 0 || /* an empty one may point nowhere */
                memcmp(a->via.str.ptr, b->via.str.ptr, a->via.str.size) == 0);
    case MSGPACK_OBJECT_EXT:
        return a->via.ext.type == b->via.ext.type && a->via.ext.size == b->via.ext.size &&
               (a->via.ext.size == 0 ||
                memcmp(a->via.ext.ptr, b->via.ext.ptr, a->via.ext.size) == 0);
    case MSGPACK_OBJECT_BOOLEAN: return a->via.boolean == b->via.boolean;
    case MSGPACK_OBJECT_NIL: return true;
    default: return memcmp(&a->via.u64, &b->via.u64, sizeof(uint64_t)) == 0; /* ints, floats */
    }
}

/* msgpack-c's own answer for buf: the check, then its unpacker (safe once
 * the check passed), into *up (initialised by the caller). */
static int reference_unpack(const uint8_t *buf, size_t len, msgpack_unpacked *up)
{
    if (len == 0 || msgpack_safe_check(buf, len, DEPTH) != TALLY_ok)
        return TALLY_invalid_argument;
    size_t off = 0;
    return msgpack_unpack_next(up, (const char *)buf, len, &off) == MSGPACK_UNPACK_SUCCESS &&
                   off == len
               ? TALLY_ok
               : TALLY_invalid_argument;
}

/* The one-pass parser against msgpack_safe_check + msgpack-c's unpacker,
 * on every sample and on 200,000 mutations of them (bytes flipped, cut,
 * inserted, samples nested): the same inputs are accepted, and the trees
 * are the same in every member and type. */
START_TEST(one_pass_parser_agrees_with_msgpack_c)
{
    const size_t n_samples = sizeof(valid_samples) / sizeof(valid_samples[0]);
    uint64_t rng = 0x9e3779b97f4a7c15u;
    uint8_t buf[256];
    unsigned accepted = 0;
    for (unsigned iter = 0; iter < 200000; iter++) {
        size_t len = 0;
        bool nested = test_rng_next(&rng) % 2; /* an array of samples, or one sample */
        unsigned items = nested ? 1 + (unsigned)(test_rng_next(&rng) % 3) : 1;
        if (nested)
            buf[len++] = (uint8_t)(0x90 | items);
        for (unsigned i = 0; i < items; i++) {
            const sample *s = &valid_samples[test_rng_next(&rng) % n_samples];
            memcpy(buf + len, s->bytes, s->len); /* 3 samples of < 30 bytes fit */
            len += s->len;
        }
        unsigned mutations = (unsigned)(test_rng_next(&rng) % 3);
        for (unsigned m = 0; m < mutations && len > 0; m++) {
            size_t at = test_rng_next(&rng) % len;
            switch (test_rng_next(&rng) % 3) {
            case 0: buf[at] = (uint8_t)test_rng_next(&rng); break;
            case 1: len = at; break;
            default:
                memmove(buf + at + 1, buf + at, len - at);
                buf[at] = (uint8_t)test_rng_next(&rng);
                len++;
            }
        }
        msgpack_unpacked want, up;
        msgpack_unpacked_init(&want);
        msgpack_unpacked_init(&up);
        int want_rc = reference_unpack(buf, len, &want);
        int rc = msgpack_safe_unpack(buf, len, DEPTH, &up);
        ck_assert_msg(rc == want_rc, "iteration %u: %d, msgpack-c %d", iter, rc, want_rc);
        if (rc == TALLY_ok) {
            ck_assert_msg(same_tree(&up.data, &want.data), "iteration %u: another tree", iter);
            accepted++;
        }
        msgpack_unpacked_destroy(&up);
        msgpack_unpacked_destroy(&want);
    }
    ck_assert_uint_gt(accepted, 10000); /* both sides exercised */
}
END_TEST

START_TEST(unpacked_values_point_into_the_buffer)
{
    static const uint8_t buf[] = {0x82, 0xa1, 's', 0xa3, 'x', 'y', 'z', 0xa1, 'b',
                                  0xc4, 0x02, 0x01, 0x02};
    msgpack_unpacked up;
    msgpack_unpacked_init(&up);
    ck_assert_int_eq(msgpack_safe_unpack(buf, sizeof(buf), DEPTH, &up), TALLY_ok);
    tally_str s;
    ck_assert(msgpack_safe_get_str(msgpack_safe_map_get(&up.data, "s"), &s));
    ck_assert_uint_eq(s.len, 3);
    ck_assert_mem_eq(s.ptr, "xyz", 3);
    ck_assert_ptr_eq(s.ptr, (const char *)buf + 4);
    const void *p;
    size_t n;
    ck_assert(msgpack_safe_get_bin(msgpack_safe_map_get(&up.data, "b"), &p, &n));
    ck_assert_uint_eq(n, 2);
    ck_assert_ptr_eq(p, buf + 11);
    msgpack_unpacked_destroy(&up);
}
END_TEST

START_TEST(count_bomb_is_rejected_without_allocation)
{
    static const uint8_t array_bomb[] = {0xdd, 0xff, 0xff, 0xff, 0xff};
    static const uint8_t map_bomb[] = {0xdf, 0xff, 0xff, 0xff, 0xff};
    static const uint8_t array16_bomb[] = {0xdc, 0xff, 0xff};
    static const uint8_t map16_bomb[] = {0xde, 0xff, 0xff};
    static const uint8_t nested_bomb[] = {0x81, 0xa1, 'a', 0xdd, 0xff, 0xff, 0xff, 0xff};
    expect_rejected(array_bomb, sizeof(array_bomb), DEPTH);
    expect_rejected(map_bomb, sizeof(map_bomb), DEPTH);
    expect_rejected(array16_bomb, sizeof(array16_bomb), DEPTH);
    expect_rejected(map16_bomb, sizeof(map16_bomb), DEPTH);
    expect_rejected(nested_bomb, sizeof(nested_bomb), DEPTH);
}
END_TEST

START_TEST(count_larger_than_bytes_left_is_rejected)
{
    /* Padding after the header does not help: the count still needs one byte per
     * element (two per map entry). */
    uint8_t buf[5 + 64];
    memset(buf, 0xc0, sizeof(buf));
    buf[0] = 0xdd;
    put_u32_be(buf + 1, 65);
    expect_rejected(buf, sizeof(buf), DEPTH);
    put_u32_be(buf + 1, 64);
    ck_assert_int_eq(msgpack_safe_check(buf, sizeof(buf), DEPTH), TALLY_ok);
    expect_unpack(buf, sizeof(buf), DEPTH, TALLY_ok);
    buf[0] = 0xdf; /* 64 entries need 128 bytes */
    expect_rejected(buf, sizeof(buf), DEPTH);
    put_u32_be(buf + 1, 32);
    ck_assert_int_eq(msgpack_safe_check(buf, sizeof(buf), DEPTH), TALLY_ok);
    expect_unpack(buf, sizeof(buf), DEPTH, TALLY_ok);
}
END_TEST

START_TEST(lengths_larger_than_the_buffer_are_rejected)
{
    static const uint8_t str32[] = {0xdb, 0x00, 0x00, 0x00, 0x10, 'a', 'b'};
    static const uint8_t str32_huge[] = {0xdb, 0xff, 0xff, 0xff, 0xff};
    static const uint8_t bin32[] = {0xc6, 0x00, 0x00, 0x00, 0x03, 0x01, 0x02};
    static const uint8_t bin32_huge[] = {0xc6, 0xff, 0xff, 0xff, 0xff, 0x00};
    static const uint8_t str8[] = {0xd9, 0x05, 'a'};
    static const uint8_t bin16[] = {0xc5, 0x01, 0x00, 0x00};
    static const uint8_t fixstr[] = {0xa5, 'a', 'b'};
    static const uint8_t ext32[] = {0xc9, 0xff, 0xff, 0xff, 0xff, 0x01};
    static const uint8_t fixext16[] = {0xd8, 0x01, 0x00};
    expect_rejected(str32, sizeof(str32), DEPTH);
    expect_rejected(str32_huge, sizeof(str32_huge), DEPTH);
    expect_rejected(bin32, sizeof(bin32), DEPTH);
    expect_rejected(bin32_huge, sizeof(bin32_huge), DEPTH);
    expect_rejected(str8, sizeof(str8), DEPTH);
    expect_rejected(bin16, sizeof(bin16), DEPTH);
    expect_rejected(fixstr, sizeof(fixstr), DEPTH);
    expect_rejected(ext32, sizeof(ext32), DEPTH);
    expect_rejected(fixext16, sizeof(fixext16), DEPTH);
}
END_TEST

START_TEST(trailing_bytes_are_rejected)
{
    static const uint8_t one_extra[] = {0x81, 0xa1, 'k', 0x05, 0x00};
    static const uint8_t two_objects[] = {0xc0, 0xc0};
    static const uint8_t str_then_junk[] = {0xa1, 'a', 0xff};
    expect_rejected(one_extra, sizeof(one_extra), DEPTH);
    expect_rejected(two_objects, sizeof(two_objects), DEPTH);
    expect_rejected(str_then_junk, sizeof(str_then_junk), DEPTH);
    /* The same bytes without the trailer are fine (off == len). */
    expect_unpack(one_extra, sizeof(one_extra) - 1, DEPTH, TALLY_ok);
}
END_TEST

/* A nested object with every width of header, packed by msgpack-c. */
static size_t pack_nested(msgpack_sbuffer *sb)
{
    msgpack_packer pk;
    msgpack_packer_init(&pk, sb, msgpack_sbuffer_write);
    char big[300];
    memset(big, 'x', sizeof(big));
    ck_assert_int_eq(msgpack_pack_map(&pk, 5), 0);
    ck_assert_int_eq(msgpack_safe_pack_cstr(&pk, "ints"), 0);
    ck_assert_int_eq(msgpack_pack_array(&pk, 8), 0);
    ck_assert_int_eq(msgpack_pack_uint8(&pk, 200), 0);
    ck_assert_int_eq(msgpack_pack_uint16(&pk, 60000), 0);
    ck_assert_int_eq(msgpack_pack_uint32(&pk, 4000000000u), 0);
    ck_assert_int_eq(msgpack_pack_uint64(&pk, UINT64_MAX), 0);
    ck_assert_int_eq(msgpack_pack_int8(&pk, -100), 0);
    ck_assert_int_eq(msgpack_pack_int64(&pk, INT64_MIN), 0);
    ck_assert_int_eq(msgpack_pack_double(&pk, 1.5), 0);
    ck_assert_int_eq(msgpack_pack_nil(&pk), 0);
    ck_assert_int_eq(msgpack_safe_pack_cstr(&pk, "strs"), 0);
    ck_assert_int_eq(msgpack_pack_array(&pk, 3), 0);
    ck_assert_int_eq(msgpack_safe_pack_cstr(&pk, "short"), 0);
    ck_assert_int_eq(msgpack_safe_pack_str(&pk, (tally_str){big, 40}), 0);
    ck_assert_int_eq(msgpack_safe_pack_str(&pk, (tally_str){big, sizeof(big)}), 0);
    ck_assert_int_eq(msgpack_safe_pack_cstr(&pk, "bin"), 0);
    ck_assert_int_eq(msgpack_safe_pack_bin(&pk, big, 20), 0);
    ck_assert_int_eq(msgpack_safe_pack_cstr(&pk, "nested"), 0);
    ck_assert_int_eq(msgpack_pack_array(&pk, 2), 0);
    ck_assert_int_eq(msgpack_pack_map(&pk, 1), 0);
    ck_assert_int_eq(msgpack_safe_pack_cstr(&pk, "deep"), 0);
    ck_assert_int_eq(msgpack_pack_array(&pk, 1), 0);
    ck_assert_int_eq(msgpack_pack_true(&pk), 0);
    ck_assert_int_eq(msgpack_pack_ext(&pk, 3, 5), 0);
    ck_assert_int_eq(msgpack_pack_ext_body(&pk, "abc", 3), 0);
    ck_assert_int_eq(msgpack_safe_pack_cstr(&pk, "empty"), 0);
    ck_assert_int_eq(msgpack_pack_map(&pk, 0), 0);
    return sb->size;
}

static int refuse_write(void *data, const char *buf, size_t len)
{
    (void)data, (void)buf, (void)len;
    return -1;
}

/* The one-call fixstr path writes exactly msgpack-c's bytes, at every
 * length around the fixstr/str8 boundary, and passes a writer's refusal on. */
START_TEST(pack_str_matches_msgpack_c)
{
    char text[300];
    for (size_t i = 0; i < sizeof(text); i++)
        text[i] = (char)('a' + i % 26);
    static const size_t lengths[] = {0, 1, 5, 30, 31, 32, 33, 255, 256, 300};
    for (size_t k = 0; k < sizeof(lengths) / sizeof(lengths[0]); k++) {
        size_t n = lengths[k];
        msgpack_sbuffer ours, theirs;
        msgpack_sbuffer_init(&ours);
        msgpack_sbuffer_init(&theirs);
        msgpack_packer a, b;
        msgpack_packer_init(&a, &ours, msgpack_sbuffer_write);
        msgpack_packer_init(&b, &theirs, msgpack_sbuffer_write);
        ck_assert_int_eq(msgpack_safe_pack_str(&a, (tally_str){text, n}), 0);
        ck_assert_int_eq(msgpack_pack_str(&b, n), 0);
        ck_assert_int_eq(msgpack_pack_str_body(&b, text, n), 0);
        ck_assert_uint_eq(ours.size, theirs.size);
        ck_assert_mem_eq(ours.data, theirs.data, ours.size);
        if (n < sizeof(text)) {
            char c[301];
            memcpy(c, text, n);
            c[n] = '\0';
            msgpack_sbuffer_clear(&ours);
            ck_assert_int_eq(msgpack_safe_pack_cstr(&a, c), 0);
            ck_assert_mem_eq(ours.data, theirs.data, theirs.size);
        }
        msgpack_packer refusing;
        msgpack_packer_init(&refusing, NULL, refuse_write);
        ck_assert_int_ne(msgpack_safe_pack_str(&refusing, (tally_str){text, n}), 0);
        msgpack_sbuffer_destroy(&ours);
        msgpack_sbuffer_destroy(&theirs);
    }
}
END_TEST

START_TEST(every_truncation_of_a_nested_object_is_rejected)
{
    msgpack_sbuffer sb;
    msgpack_sbuffer_init(&sb);
    size_t len = pack_nested(&sb);
    ck_assert_uint_gt(len, 300);
    ck_assert_int_eq(msgpack_safe_check(sb.data, len, DEPTH), TALLY_ok);
    expect_unpack(sb.data, len, DEPTH, TALLY_ok);
    /* Each prefix in its own allocation so that a read past it is caught by
     * the sanitizers, not hidden by the rest of the buffer. */
    for (size_t n = 1; n < len; n++) {
        uint8_t *prefix = malloc(n);
        ck_assert_ptr_nonnull(prefix);
        memcpy(prefix, sb.data, n);
        ck_assert_msg(msgpack_safe_check(prefix, n, DEPTH) == TALLY_invalid_argument,
                      "prefix of %zu/%zu bytes accepted", n, len);
        msgpack_unpacked up;
        msgpack_unpacked_init(&up);
        ck_assert_int_eq(msgpack_safe_unpack(prefix, n, DEPTH, &up), TALLY_invalid_argument);
        msgpack_unpacked_destroy(&up);
        free(prefix);
    }
    msgpack_sbuffer_destroy(&sb);
}
END_TEST

/* n nested one-element arrays around a nil (n containers deep). */
static size_t nested_arrays(uint8_t *buf, size_t n, uint8_t header)
{
    memset(buf, header, n);
    buf[n] = 0xc0;
    return n + 1;
}

START_TEST(nesting_deeper_than_depth_max_is_rejected)
{
    uint8_t buf[128];
    for (unsigned depth_max = 1; depth_max <= 20; depth_max++) {
        size_t len = nested_arrays(buf, depth_max, 0x91);
        ck_assert_msg(msgpack_safe_check(buf, len, depth_max) == TALLY_ok,
                      "%u levels refused with depth_max %u", depth_max, depth_max);
        expect_unpack(buf, len, depth_max, TALLY_ok);
        len = nested_arrays(buf, depth_max + 1, 0x91);
        expect_rejected(buf, len, depth_max);
    }
    /* Maps count as levels too: {"":{"":nil}} is two deep. */
    static const uint8_t maps[] = {0x81, 0xa0, 0x81, 0xa0, 0xc0};
    ck_assert_int_eq(msgpack_safe_check(maps, sizeof(maps), 2), TALLY_ok);
    expect_rejected(maps, sizeof(maps), 1);
    /* Scalars need no depth at all. */
    static const uint8_t scalar[] = {0x01};
    ck_assert_int_eq(msgpack_safe_check(scalar, 1, 0), TALLY_ok);
    static const uint8_t empty_array[] = {0x90};
    ck_assert_int_eq(msgpack_safe_check(empty_array, 1, 0), TALLY_ok);
}
END_TEST

START_TEST(depth_max_is_capped_at_the_library_limit)
{
    uint8_t buf[MSGPACK_SAFE_DEPTH_LIMIT + 8];
    size_t len = nested_arrays(buf, MSGPACK_SAFE_DEPTH_LIMIT, 0x91);
    ck_assert_int_eq(msgpack_safe_check(buf, len, MSGPACK_SAFE_DEPTH_LIMIT), TALLY_ok);
    len = nested_arrays(buf, MSGPACK_SAFE_DEPTH_LIMIT + 1, 0x91);
    expect_rejected(buf, len, 1000);
    expect_rejected(buf, len, UINT32_MAX);
}
END_TEST

START_TEST(byte_0xc1_is_rejected)
{
    static const uint8_t alone[] = {0xc1};
    static const uint8_t in_array[] = {0x92, 0x01, 0xc1};
    static const uint8_t as_map_value[] = {0x81, 0xa1, 'k', 0xc1};
    expect_rejected(alone, sizeof(alone), DEPTH);
    expect_rejected(in_array, sizeof(in_array), DEPTH);
    expect_rejected(as_map_value, sizeof(as_map_value), DEPTH);
}
END_TEST

START_TEST(empty_input_is_rejected)
{
    static const uint8_t nil = 0xc0;
    ck_assert_int_eq(msgpack_safe_check(&nil, 0, DEPTH), TALLY_invalid_argument);
    ck_assert_int_eq(msgpack_safe_check(NULL, 0, DEPTH), TALLY_invalid_argument);
    ck_assert_int_eq(msgpack_safe_check(NULL, 5, DEPTH), TALLY_invalid_argument);
    expect_rejected(&nil, 0, DEPTH);
}
END_TEST

START_TEST(fixed_buffer_reports_overflow_instead_of_writing_past_capacity)
{
    uint8_t mem[64];
    memset(mem, 0xee, sizeof(mem));
    msgpack_safe_buffer b;
    msgpack_packer pk;
    msgpack_safe_buffer_init(&b, mem, 8, &pk);
    ck_assert_uint_eq(b.len, 0);
    ck_assert(!b.overflow);
    ck_assert_int_eq(msgpack_pack_uint8(&pk, 7), 0); /* 1 byte */
    ck_assert_int_ne(msgpack_safe_pack_cstr(&pk, "a long string"), 0);
    ck_assert(b.overflow);
    ck_assert_uint_le(b.len, b.capacity);
    for (size_t i = 8; i < sizeof(mem); i++)
        ck_assert_msg(mem[i] == 0xee, "byte %zu past capacity written", i);
    /* Further writes keep failing rather than wrapping. */
    ck_assert_int_ne(msgpack_safe_pack_bin(&pk, mem, 32), 0);
    ck_assert_uint_le(b.len, b.capacity);
    for (size_t i = 8; i < sizeof(mem); i++)
        ck_assert_uint_eq(mem[i], 0xee);

    /* An exact fit is no overflow. */
    memset(mem, 0xee, sizeof(mem));
    msgpack_safe_buffer_init(&b, mem, 4, &pk);
    ck_assert_int_eq(msgpack_safe_pack_cstr(&pk, "abc"), 0);
    ck_assert(!b.overflow);
    ck_assert_uint_eq(b.len, 4);
    ck_assert_mem_eq(mem, "\xa3" "abc", 4);
    ck_assert_uint_eq(mem[4], 0xee);
    ck_assert_int_ne(msgpack_pack_nil(&pk), 0);
    ck_assert(b.overflow);
    ck_assert_uint_eq(mem[4], 0xee);

    /* Capacity zero. */
    msgpack_safe_buffer_init(&b, mem, 0, &pk);
    ck_assert_int_ne(msgpack_pack_nil(&pk), 0);
    ck_assert(b.overflow);
    ck_assert_uint_eq(b.len, 0);
}
END_TEST

START_TEST(fixed_buffer_output_round_trips)
{
    uint8_t mem[128];
    msgpack_safe_buffer b;
    msgpack_packer pk;
    msgpack_safe_buffer_init(&b, mem, sizeof(mem), &pk);
    uint8_t id[16];
    for (int i = 0; i < 16; i++)
        id[i] = (uint8_t)(i * 7);
    ck_assert_int_eq(msgpack_pack_map(&pk, 3), 0);
    ck_assert_int_eq(msgpack_safe_pack_cstr(&pk, "n"), 0);
    ck_assert_int_eq(msgpack_pack_int64(&pk, -42), 0);
    ck_assert_int_eq(msgpack_safe_pack_cstr(&pk, "id"), 0);
    ck_assert_int_eq(msgpack_safe_pack_bin(&pk, id, 16), 0);
    ck_assert_int_eq(msgpack_safe_pack_str(&pk, tally_str_from("s")), 0);
    ck_assert_int_eq(msgpack_safe_pack_str(&pk, (tally_str){"hello!", 5}), 0);
    ck_assert(!b.overflow);
    msgpack_unpacked up;
    msgpack_unpacked_init(&up);
    ck_assert_int_eq(msgpack_safe_unpack(mem, b.len, DEPTH, &up), TALLY_ok);
    int64_t n;
    tally_id128 got;
    tally_str s;
    ck_assert(msgpack_safe_get_i64(msgpack_safe_map_get(&up.data, "n"), &n));
    ck_assert_int_eq(n, -42);
    ck_assert(msgpack_safe_get_id128(msgpack_safe_map_get(&up.data, "id"), &got));
    ck_assert_mem_eq(got.bytes, id, 16);
    ck_assert(msgpack_safe_get_str(msgpack_safe_map_get(&up.data, "s"), &s));
    ck_assert(tally_str_equal(s, tally_str_from("hello")));
    msgpack_unpacked_destroy(&up);
}
END_TEST

/* Unpack a literal and hand out its root. */
typedef struct held {
    msgpack_unpacked up;
} held;

static const msgpack_object *hold(held *h, const void *buf, size_t len)
{
    msgpack_unpacked_init(&h->up);
    ck_assert_int_eq(msgpack_safe_unpack(buf, len, DEPTH, &h->up), TALLY_ok);
    return &h->up.data;
}

#define HOLD(h, ...)                                                                       \
    hold(h, (const uint8_t[]){__VA_ARGS__}, sizeof((const uint8_t[]){__VA_ARGS__}))

START_TEST(get_u64_rejects_negative_and_other_types)
{
    held h;
    uint64_t v = 12345;
    ck_assert(msgpack_safe_get_u64(HOLD(&h, 0x00), &v));
    ck_assert_uint_eq(v, 0);
    msgpack_unpacked_destroy(&h.up);
    ck_assert(msgpack_safe_get_u64(HOLD(&h, 0xcf, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
                                        0xff), &v));
    ck_assert(v == UINT64_MAX);
    msgpack_unpacked_destroy(&h.up);
    v = 99;
    ck_assert(!msgpack_safe_get_u64(HOLD(&h, 0xff), &v)); /* -1 */
    ck_assert_uint_eq(v, 99);
    msgpack_unpacked_destroy(&h.up);
    ck_assert(!msgpack_safe_get_u64(HOLD(&h, 0xd3, 0x80, 0, 0, 0, 0, 0, 0, 0), &v));
    msgpack_unpacked_destroy(&h.up);
    ck_assert(!msgpack_safe_get_u64(HOLD(&h, 0xa1, '1'), &v));
    msgpack_unpacked_destroy(&h.up);
    ck_assert(!msgpack_safe_get_u64(HOLD(&h, 0xc0), &v));
    msgpack_unpacked_destroy(&h.up);
    ck_assert(!msgpack_safe_get_u64(HOLD(&h, 0xca, 0x3f, 0x80, 0, 0), &v));
    msgpack_unpacked_destroy(&h.up);
    ck_assert(!msgpack_safe_get_u64(NULL, &v));
    ck_assert_uint_eq(v, 99);
}
END_TEST

START_TEST(get_i64_rejects_values_above_int64_max)
{
    held h;
    int64_t v = 0;
    ck_assert(msgpack_safe_get_i64(HOLD(&h, 0xcf, 0x7f, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
                                        0xff), &v));
    ck_assert(v == INT64_MAX);
    msgpack_unpacked_destroy(&h.up);
    v = 7;
    ck_assert(!msgpack_safe_get_i64(HOLD(&h, 0xcf, 0x80, 0, 0, 0, 0, 0, 0, 0), &v));
    ck_assert_int_eq(v, 7);
    msgpack_unpacked_destroy(&h.up);
    ck_assert(!msgpack_safe_get_i64(HOLD(&h, 0xcf, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
                                         0xff), &v));
    msgpack_unpacked_destroy(&h.up);
    ck_assert(msgpack_safe_get_i64(HOLD(&h, 0xd3, 0x80, 0, 0, 0, 0, 0, 0, 0), &v));
    ck_assert(v == INT64_MIN);
    msgpack_unpacked_destroy(&h.up);
    ck_assert(msgpack_safe_get_i64(HOLD(&h, 0xff), &v));
    ck_assert_int_eq(v, -1);
    msgpack_unpacked_destroy(&h.up);
    ck_assert(msgpack_safe_get_i64(HOLD(&h, 0x05), &v));
    ck_assert_int_eq(v, 5);
    msgpack_unpacked_destroy(&h.up);
    ck_assert(!msgpack_safe_get_i64(HOLD(&h, 0xc3), &v));
    msgpack_unpacked_destroy(&h.up);
    ck_assert(!msgpack_safe_get_i64(NULL, &v));
}
END_TEST

START_TEST(get_id128_rejects_bins_of_other_sizes)
{
    uint8_t buf[2 + 17];
    buf[0] = 0xc4;
    for (int i = 0; i < 17; i++)
        buf[2 + i] = (uint8_t)(0xa0 + i);
    held h;
    tally_id128 id;
    for (uint8_t n = 0; n <= 17; n++) {
        buf[1] = n;
        memset(id.bytes, 0x55, 16);
        bool ok = msgpack_safe_get_id128(hold(&h, buf, 2u + n), &id);
        ck_assert_msg(ok == (n == 16), "bin of %u bytes: %d", n, ok);
        if (n == 16)
            ck_assert_mem_eq(id.bytes, buf + 2, 16);
        else
            for (int i = 0; i < 16; i++)
                ck_assert_uint_eq(id.bytes[i], 0x55);
        msgpack_unpacked_destroy(&h.up);
    }
    /* A 16-byte string is not an id. */
    buf[0] = 0xb0;
    ck_assert(!msgpack_safe_get_id128(hold(&h, buf, 17), &id));
    msgpack_unpacked_destroy(&h.up);
    ck_assert(!msgpack_safe_get_id128(NULL, &id));
}
END_TEST

START_TEST(get_str_and_bin_check_their_types)
{
    held h;
    tally_str s;
    const void *p;
    size_t n;
    ck_assert(!msgpack_safe_get_str(HOLD(&h, 0xc4, 0x01, 'a'), &s));
    ck_assert(msgpack_safe_get_bin(&h.up.data, &p, &n));
    ck_assert_uint_eq(n, 1);
    msgpack_unpacked_destroy(&h.up);
    ck_assert(!msgpack_safe_get_bin(HOLD(&h, 0xa1, 'a'), &p, &n));
    ck_assert(msgpack_safe_get_str(&h.up.data, &s));
    ck_assert(tally_str_equal(s, tally_str_from("a")));
    msgpack_unpacked_destroy(&h.up);
    ck_assert(msgpack_safe_get_str(HOLD(&h, 0xa0), &s));
    ck_assert_uint_eq(s.len, 0);
    msgpack_unpacked_destroy(&h.up);
    ck_assert(!msgpack_safe_get_str(HOLD(&h, 0xc0), &s));
    msgpack_unpacked_destroy(&h.up);
    ck_assert(!msgpack_safe_get_str(NULL, &s));
    ck_assert(!msgpack_safe_get_bin(NULL, &p, &n));
}
END_TEST

START_TEST(map_get_matches_whole_string_keys_only)
{
    held h;
    /* {"ab": 1, 2: 3, "a": 4} */
    const msgpack_object *m =
        HOLD(&h, 0x83, 0xa2, 'a', 'b', 0x01, 0x02, 0x03, 0xa1, 'a', 0x04);
    uint64_t v;
    ck_assert(msgpack_safe_get_u64(msgpack_safe_map_get(m, "ab"), &v));
    ck_assert_uint_eq(v, 1);
    ck_assert(msgpack_safe_get_u64(msgpack_safe_map_get(m, "a"), &v));
    ck_assert_uint_eq(v, 4);
    ck_assert_ptr_null(msgpack_safe_map_get(m, "abc"));
    ck_assert_ptr_null(msgpack_safe_map_get(m, "b"));
    ck_assert_ptr_null(msgpack_safe_map_get(m, ""));
    ck_assert_ptr_null(msgpack_safe_map_get(NULL, "a"));
    msgpack_unpacked_destroy(&h.up);
    ck_assert_ptr_null(msgpack_safe_map_get(HOLD(&h, 0x92, 0xa1, 'a', 0x01), "a"));
    msgpack_unpacked_destroy(&h.up);
}
END_TEST

/* ---- common/table ---- */

static void u64_key(uint64_t n, uint8_t key[8]) { put_u64_be(key, n); }

/* Values are read and written with memcpy in the tests of the table's
 * bookkeeping, so that they do not depend on value alignment, which has its
 * own test (table_values_are_aligned). */
static uint64_t val_get(const void *v)
{
    uint64_t x;
    memcpy(&x, v, sizeof(x));
    return x;
}

static void val_set(void *v, uint64_t x) { memcpy(v, &x, sizeof(x)); }

START_TEST(table_insert_find_remove)
{
    table *t = table_create(sizeof(uint64_t));
    ck_assert_ptr_nonnull(t);
    ck_assert_uint_eq(table_count(t), 0);
    int inserted = -1;
    void *v = table_upsert(t, "alpha", 5, &inserted);
    ck_assert_ptr_nonnull(v);
    ck_assert_int_eq(inserted, 1);
    ck_assert_uint_eq(val_get(v), 0); /* inserted zeroed */
    val_set(v, 11);
    v = table_upsert(t, "alpha", 5, &inserted);
    ck_assert_int_eq(inserted, 0);
    ck_assert_uint_eq(val_get(v), 11);
    ck_assert_uint_eq(table_count(t), 1);
    /* Keys that are prefixes of each other are distinct. */
    v = table_upsert(t, "alph", 4, &inserted);
    ck_assert_int_eq(inserted, 1);
    val_set(v, 22);
    ck_assert_uint_eq(val_get(table_find(t, "alpha", 5)), 11);
    ck_assert_uint_eq(val_get(table_find(t, "alph", 4)), 22);
    ck_assert_ptr_null(table_find(t, "alphab", 6));
    ck_assert_int_eq(table_remove(t, "alpha", 5), 1);
    ck_assert_int_eq(table_remove(t, "alpha", 5), 0);
    ck_assert_ptr_null(table_find(t, "alpha", 5));
    ck_assert_uint_eq(val_get(table_find(t, "alph", 4)), 22);
    ck_assert_uint_eq(table_count(t), 1);
    /* Re-inserting a removed key starts from zero again. */
    v = table_upsert(t, "alpha", 5, &inserted);
    ck_assert_int_eq(inserted, 1);
    ck_assert_uint_eq(val_get(v), 0);
    table_destroy(t);
    table_destroy(NULL);
}
END_TEST

START_TEST(table_rejects_bad_key_lengths)
{
    table *t = table_create(4);
    ck_assert_ptr_nonnull(t);
    uint8_t key[TABLE_KEY_BYTES_MAX + 1];
    memset(key, 'k', sizeof(key));
    int inserted = -1;
    ck_assert_ptr_null(table_upsert(t, key, 0, &inserted));
    ck_assert_int_eq(inserted, 0);
    ck_assert_ptr_null(table_upsert(t, key, TABLE_KEY_BYTES_MAX + 1, &inserted));
    ck_assert_int_eq(inserted, 0);
    ck_assert_ptr_nonnull(table_upsert(t, key, TABLE_KEY_BYTES_MAX, &inserted));
    ck_assert_int_eq(inserted, 1);
    ck_assert_ptr_nonnull(table_find(t, key, TABLE_KEY_BYTES_MAX));
    ck_assert_ptr_null(table_find(t, key, 0));
    ck_assert_ptr_null(table_find(t, key, TABLE_KEY_BYTES_MAX + 1));
    ck_assert_int_eq(table_remove(t, key, 0), 0);
    ck_assert_uint_eq(table_count(t), 1);
    table_destroy(t);
}
END_TEST

typedef struct each_sum {
    uint64_t entries;
    uint64_t key_sum;
    uint64_t value_sum;
} each_sum;

static int sum_entry(const void *key, size_t key_len, void *value, void *ctx)
{
    each_sum *s = ctx;
    ck_assert_uint_eq(key_len, 8);
    s->entries++;
    s->key_sum += get_u64_be(key);
    s->value_sum += val_get(value);
    return 0;
}

static int stop_at_third(const void *key, size_t key_len, void *value, void *ctx)
{
    (void)key, (void)key_len, (void)value;
    return ++*(int *)ctx == 3 ? 42 : 0;
}

START_TEST(table_grows_to_100k_entries)
{
    enum { N = 100000 };
    table *t = table_create(sizeof(uint64_t));
    ck_assert_ptr_nonnull(t);
    uint8_t key[8];
    for (uint64_t i = 1; i <= N; i++) {
        int inserted;
        u64_key(i, key);
        void *v = table_upsert(t, key, 8, &inserted);
        ck_assert_ptr_nonnull(v);
        ck_assert_int_eq(inserted, 1);
        val_set(v, i * 3);
    }
    ck_assert_uint_eq(table_count(t), N);
    for (uint64_t i = 1; i <= N; i++) {
        u64_key(i, key);
        void *v = table_find(t, key, 8);
        ck_assert_msg(v != NULL, "key %llu lost after growth", (unsigned long long)i);
        ck_assert_uint_eq(val_get(v), i * 3);
    }
    u64_key(N + 1, key);
    ck_assert_ptr_null(table_find(t, key, 8));

    each_sum s = {0};
    ck_assert_int_eq(table_each(t, sum_entry, &s), 0);
    ck_assert_uint_eq(s.entries, N);
    ck_assert_uint_eq(s.key_sum, (uint64_t)N * (N + 1) / 2);
    ck_assert_uint_eq(s.value_sum, 3 * ((uint64_t)N * (N + 1) / 2));
    int visited = 0;
    ck_assert_int_eq(table_each(t, stop_at_third, &visited), 42);
    ck_assert_int_eq(visited, 3);

    /* Remove the even keys; the odd ones must survive the tombstones. */
    for (uint64_t i = 2; i <= N; i += 2) {
        u64_key(i, key);
        ck_assert_int_eq(table_remove(t, key, 8), 1);
    }
    ck_assert_uint_eq(table_count(t), N / 2);
    for (uint64_t i = 1; i <= N; i++) {
        u64_key(i, key);
        void *v = table_find(t, key, 8);
        if (i % 2)
            ck_assert(v != NULL && val_get(v) == i * 3);
        else
            ck_assert_ptr_null(v);
    }
    /* Insert them again: none is found as already present. */
    for (uint64_t i = 2; i <= N; i += 2) {
        int inserted;
        u64_key(i, key);
        void *v = table_upsert(t, key, 8, &inserted);
        ck_assert_ptr_nonnull(v);
        ck_assert_int_eq(inserted, 1);
        val_set(v, i * 3);
    }
    ck_assert_uint_eq(table_count(t), N);
    memset(&s, 0, sizeof(s));
    table_each(t, sum_entry, &s);
    ck_assert_uint_eq(s.entries, N);
    ck_assert_uint_eq(s.value_sum, 3 * ((uint64_t)N * (N + 1) / 2));
    table_destroy(t);
}
END_TEST

START_TEST(table_survives_insert_remove_churn)
{
    /* Many distinct keys, never more than two live: tombstones must not fill
     * the table (a probe with no empty slot would never end). */
    table *t = table_create(sizeof(uint64_t));
    ck_assert_ptr_nonnull(t);
    uint8_t key[8], prev[8];
    for (uint64_t i = 1; i <= 200000; i++) {
        int inserted;
        u64_key(i, key);
        void *v = table_upsert(t, key, 8, &inserted);
        ck_assert_ptr_nonnull(v);
        ck_assert_int_eq(inserted, 1);
        val_set(v, i);
        if (i > 1) {
            u64_key(i - 1, prev);
            ck_assert_int_eq(table_remove(t, prev, 8), 1);
        }
        ck_assert_uint_eq(table_count(t), 1);
    }
    ck_assert_uint_eq(val_get(table_find(t, key, 8)), 200000);
    u64_key(12345, key);
    ck_assert_ptr_null(table_find(t, key, 8));
    table_destroy(t);
}
END_TEST

START_TEST(table_values_are_aligned)
{
    /* Callers keep structs in the values (the invariant checker folds
     * ledger_account, hold states and __int128 sums into tables), so a value
     * must be aligned like malloc's memory, whatever the key length. */
    const size_t align = _Alignof(max_align_t);
    table *t = table_create(sizeof(max_align_t));
    ck_assert_ptr_nonnull(t);
    uint8_t key[TABLE_KEY_BYTES_MAX];
    memset(key, 'k', sizeof(key));
    for (size_t len = 1; len <= 40; len++) {
        int inserted;
        void *v = table_upsert(t, key, len, &inserted);
        ck_assert_ptr_nonnull(v);
        ck_assert_msg((uintptr_t)v % align == 0,
                      "value of a %zu-byte key at %p is not %zu-byte aligned", len, v, align);
        ck_assert_msg((uintptr_t)table_find(t, key, len) % align == 0,
                      "found value of a %zu-byte key is not aligned", len);
    }
    table_destroy(t);
}
END_TEST

/* ---- common/bytes ---- */

START_TEST(hex_round_trip)
{
    tally_id128 id, back;
    for (int i = 0; i < 16; i++)
        id.bytes[i] = (uint8_t)(0x0f + i * 0x11);
    char hex[33];
    tally_id128_to_hex(&id, hex);
    ck_assert_uint_eq(strlen(hex), 32);
    ck_assert_str_eq(hex, "0f2031425364758697a8b9cadbecfd0e");
    ck_assert(tally_id128_from_hex(hex, &back));
    ck_assert(tally_id128_equal(&id, &back));
    /* UUID dashes and upper case are accepted. */
    ck_assert(tally_id128_from_hex("0F203142-5364-7586-97A8-B9CADBECFD0E", &back));
    ck_assert(tally_id128_equal(&id, &back));
    tally_id128 zero = {{0}};
    tally_id128_to_hex(&zero, hex);
    ck_assert_str_eq(hex, "00000000000000000000000000000000");
    ck_assert(tally_id128_from_hex(hex, &back));
    ck_assert(tally_id128_is_zero(&back));
}
END_TEST

START_TEST(hex_rejects_malformed_text)
{
    tally_id128 id;
    memset(id.bytes, 0x5a, 16);
    ck_assert(!tally_id128_from_hex("", &id));
    ck_assert(!tally_id128_from_hex("0f2031425364758697a8b9cadbecfd0", &id));   /* 31 */
    ck_assert(!tally_id128_from_hex("0f2031425364758697a8b9cadbecfd0e0", &id)); /* 33 */
    ck_assert(!tally_id128_from_hex("0g2031425364758697a8b9cadbecfd0e", &id));
    ck_assert(!tally_id128_from_hex("0f2031425364758697a8b9cadbecfd0 ", &id));
    ck_assert(!tally_id128_from_hex("0x2031425364758697a8b9cadbecfd0e", &id));
    for (int i = 0; i < 16; i++)
        ck_assert_uint_eq(id.bytes[i], 0x5a); /* untouched on failure */
}
END_TEST

START_TEST(uuidv7_has_version_variant_and_time_prefix)
{
    const int64_t ms = INT64_C(0x0123456789ab);
    tally_id128 a, b;
    ck_assert_int_eq(tally_id128_uuidv7(ms, &a), TALLY_ok);
    ck_assert_int_eq(tally_id128_uuidv7(ms, &b), TALLY_ok);
    const tally_id128 *both[2] = {&a, &b};
    for (int k = 0; k < 2; k++) {
        const tally_id128 *id = both[k];
        ck_assert_uint_eq(id->bytes[6] >> 4, 7);
        ck_assert_uint_eq(id->bytes[8] >> 6, 2);
        uint64_t prefix = 0;
        for (int i = 0; i < 6; i++)
            prefix = (prefix << 8) | id->bytes[i];
        ck_assert_uint_eq(prefix, (uint64_t)ms);
    }
    ck_assert(!tally_id128_equal(&a, &b)); /* 74 random bits */
    /* Only the low 48 bits of the time are kept. */
    ck_assert_int_eq(tally_id128_uuidv7(INT64_C(0x7fff000000000001), &a), TALLY_ok);
    ck_assert_mem_eq(a.bytes, "\x00\x00\x00\x00\x00\x01", 6);
    /* Across many ids the random part varies in every random byte. */
    uint8_t seen_or[16] = {0}, seen_and[16];
    memset(seen_and, 0xff, sizeof(seen_and));
    for (int n = 0; n < 64; n++) {
        ck_assert_int_eq(tally_id128_uuidv7(ms, &a), TALLY_ok);
        for (int i = 0; i < 16; i++) {
            seen_or[i] |= a.bytes[i];
            seen_and[i] &= a.bytes[i];
        }
    }
    for (int i = 9; i < 16; i++)
        ck_assert_msg(seen_or[i] != seen_and[i], "byte %d never varies", i);
}
END_TEST

/* Ids come from a per-thread pool of random bytes: a forked child must draw
 * fresh bytes, never the ones its parent would use next. */
START_TEST(uuidv7_differs_across_fork)
{
    tally_id128 first, parent, child;
    ck_assert_int_eq(tally_id128_uuidv7(1, &first), TALLY_ok); /* the pool is filled */
    int fds[2];
    ck_assert_int_eq(pipe(fds), 0);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        bool ok = tally_id128_uuidv7(1, &child) == TALLY_ok &&
                  write(fds[1], child.bytes, 16) == 16;
        _exit(ok ? 0 : 1);
    }
    ck_assert_int_eq(tally_id128_uuidv7(1, &parent), TALLY_ok);
    ck_assert_int_eq(read(fds[0], child.bytes, 16), 16);
    int status;
    ck_assert_int_eq(waitpid(pid, &status, 0), pid);
    ck_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    close(fds[0]);
    close(fds[1]);
    ck_assert(!tally_id128_equal(&parent, &child));
    ck_assert(!tally_id128_equal(&first, &child));
}
END_TEST

START_TEST(big_endian_helpers_round_trip)
{
    uint8_t b[8];
    put_u16_be(b, 0x1234);
    ck_assert_mem_eq(b, "\x12\x34", 2);
    ck_assert_uint_eq(get_u16_be(b), 0x1234);
    put_u32_be(b, 0x89abcdefu);
    ck_assert_mem_eq(b, "\x89\xab\xcd\xef", 4);
    ck_assert_uint_eq(get_u32_be(b), 0x89abcdefu);
    put_u64_be(b, UINT64_C(0x0102030405060708));
    ck_assert_mem_eq(b, "\x01\x02\x03\x04\x05\x06\x07\x08", 8);
    ck_assert(get_u64_be(b) == UINT64_C(0x0102030405060708));
    put_u64_be(b, UINT64_MAX);
    ck_assert(get_u64_be(b) == UINT64_MAX);
    ck_assert(tally_str_equal(tally_str_from(NULL), (tally_str){NULL, 0}));
    ck_assert(!tally_str_equal(tally_str_from("ab"), tally_str_from("abc")));
}
END_TEST

#define TIMEOUT_S 60

static Suite *msgpack_safe_suite(void)
{
    const test_row tests[] = {
        {"valid", valid_objects_of_every_type_are_accepted, TIMEOUT_S},
        {"into_buffer", unpacked_values_point_into_the_buffer, TIMEOUT_S},
        {"one_pass", one_pass_parser_agrees_with_msgpack_c, TIMEOUT_S},
        {"count_bomb", count_bomb_is_rejected_without_allocation, TIMEOUT_S},
        {"count_vs_bytes", count_larger_than_bytes_left_is_rejected, TIMEOUT_S},
        {"lengths", lengths_larger_than_the_buffer_are_rejected, TIMEOUT_S},
        {"trailing", trailing_bytes_are_rejected, TIMEOUT_S},
        {"truncation", every_truncation_of_a_nested_object_is_rejected, TIMEOUT_S},
        {"depth", nesting_deeper_than_depth_max_is_rejected, TIMEOUT_S},
        {"depth_cap", depth_max_is_capped_at_the_library_limit, TIMEOUT_S},
        {"c1", byte_0xc1_is_rejected, TIMEOUT_S},
        {"empty", empty_input_is_rejected, TIMEOUT_S},
        {"fixed_overflow", fixed_buffer_reports_overflow_instead_of_writing_past_capacity, TIMEOUT_S},
        {"fixed_round_trip", fixed_buffer_output_round_trips, TIMEOUT_S},
        {"get_u64", get_u64_rejects_negative_and_other_types, TIMEOUT_S},
        {"get_i64", get_i64_rejects_values_above_int64_max, TIMEOUT_S},
        {"get_id128", get_id128_rejects_bins_of_other_sizes, TIMEOUT_S},
        {"get_str_bin", get_str_and_bin_check_their_types, TIMEOUT_S},
        {"map_get", map_get_matches_whole_string_keys_only, TIMEOUT_S},
        {"table_basic", table_insert_find_remove, TIMEOUT_S},
        {"table_key_len", table_rejects_bad_key_lengths, TIMEOUT_S},
        {"table_100k", table_grows_to_100k_entries, TIMEOUT_S},
        {"table_churn", table_survives_insert_remove_churn, TIMEOUT_S},
        {"table_aligned", table_values_are_aligned, TIMEOUT_S},
        {"hex", hex_round_trip, TIMEOUT_S},
        {"hex_bad", hex_rejects_malformed_text, TIMEOUT_S},
        {"uuidv7", uuidv7_has_version_variant_and_time_prefix, TIMEOUT_S},
        {"uuidv7_fork", uuidv7_differs_across_fork, TIMEOUT_S},
        {"pack_str", pack_str_matches_msgpack_c, TIMEOUT_S},
        {"big_endian", big_endian_helpers_round_trip, TIMEOUT_S},
    };
    return test_suite_of_rows("msgpack_safe", TEST_ROWS(tests));
}

int main(void) { return test_run_suite(msgpack_safe_suite()); }
