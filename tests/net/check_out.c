/*
 * check_out.c — replies with counted maps and arrays (net/ops/out.c): the
 * header written after the entries were counted must be byte for byte what
 * msgpack_pack_map/msgpack_pack_array(n) writes up front, at every size
 * class (fix, 16-bit, 32-bit), nested, and failures must be sticky.
 */
#include "common/error.h"
#include "common/limits.h"
#include "net/ops/out.h"
#include "tests/support/suite.h"
#include "tests/support/test_support.h"

#include <check.h>
#include <msgpack.h>
#include <stdlib.h>
#include <string.h>

/* The reference: n entries (key "k", value i) packed with the count given
 * first; arrays get the values only. */
static void reference(msgpack_sbuffer *sb, bool map, uint32_t n, bool nested)
{
    msgpack_packer pk;
    msgpack_sbuffer_init(sb);
    msgpack_packer_init(&pk, sb, msgpack_sbuffer_write);
    if (nested) {
        msgpack_pack_map(&pk, 2);
        msgpack_pack_str(&pk, 1);
        msgpack_pack_str_body(&pk, "a", 1);
    }
    if (map)
        msgpack_pack_map(&pk, n);
    else
        msgpack_pack_array(&pk, n);
    for (uint32_t i = 0; i < n; i++) {
        if (map) {
            msgpack_pack_str(&pk, 1);
            msgpack_pack_str_body(&pk, "k", 1);
        }
        msgpack_pack_uint32(&pk, i);
    }
    if (nested) {
        msgpack_pack_str(&pk, 1);
        msgpack_pack_str_body(&pk, "z", 1);
        msgpack_pack_true(&pk);
    }
}

static nng_msg *counted(bool map, uint32_t n, bool nested)
{
    net_out o;
    ck_assert_int_eq(net_out_begin(&o), 0);
    o.limit = 64u << 20; /* room for the 32-bit sizes */
    if (nested) {
        net_map_begin(&o);
        net_key(&o, "a");
    }
    if (map)
        net_map_begin(&o);
    else
        net_array_begin(&o);
    for (uint32_t i = 0; i < n; i++) {
        if (map) {
            net_key(&o, "k");
        } else {
            net_item(&o);
        }
        msgpack_pack_uint32(&o.pk, i);
    }
    if (map)
        net_map_end(&o);
    else
        net_array_end(&o);
    if (nested) {
        net_kv_bool(&o, "z", true);
        net_map_end(&o);
    }
    nng_msg *m = net_out_take(&o);
    ck_assert_ptr_nonnull(m);
    return m;
}

static void same_bytes(bool map, uint32_t n, bool nested)
{
    msgpack_sbuffer sb;
    reference(&sb, map, n, nested);
    nng_msg *m = counted(map, n, nested);
    ck_assert_msg(nng_msg_len(m) == sb.size && memcmp(nng_msg_body(m), sb.data, sb.size) == 0,
                  "%s of %u%s: %zu bytes, msgpack-c writes %zu", map ? "map" : "array", n,
                  nested ? " (nested)" : "", nng_msg_len(m), sb.size);
    nng_msg_free(m);
    msgpack_sbuffer_destroy(&sb);
}

static const uint32_t sizes[] = {0, 1, 15, 16, 17, 255, 65535, 65536, 70000};

START_TEST(maps_match_msgpack_c)
{
    for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
        same_bytes(true, sizes[i], false);
        same_bytes(true, sizes[i], true);
    }
}
END_TEST

START_TEST(arrays_match_msgpack_c)
{
    for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
        same_bytes(false, sizes[i], false);
        same_bytes(false, sizes[i], true);
    }
}
END_TEST

/* Inner maps that grow past 15 entries move the bytes of their outer
 * map's later entries correctly: three levels, each with 20 entries. */
START_TEST(deep_nesting_decodes)
{
    net_out o;
    ck_assert_int_eq(net_out_begin(&o), 0);
    net_map_begin(&o);
    for (int i = 0; i < 20; i++) {
        net_key(&o, i == 10 ? "inner" : "x");
        if (i != 10) {
            msgpack_pack_int(&o.pk, i);
            continue;
        }
        net_map_begin(&o);
        for (int j = 0; j < 20; j++) {
            net_key(&o, "y");
            net_array_begin(&o);
            for (int k = 0; k < 20; k++) {
                net_item(&o);
                msgpack_pack_int(&o.pk, k);
            }
            net_array_end(&o);
        }
        net_map_end(&o);
    }
    net_map_end(&o);
    nng_msg *m = net_out_take(&o);
    ck_assert_ptr_nonnull(m);
    msgpack_unpacked up;
    msgpack_unpacked_init(&up);
    size_t off = 0;
    ck_assert_int_eq(msgpack_unpack_next(&up, nng_msg_body(m), nng_msg_len(m), &off),
                     MSGPACK_UNPACK_SUCCESS);
    ck_assert_uint_eq(off, nng_msg_len(m));
    ck_assert_int_eq(up.data.type, MSGPACK_OBJECT_MAP);
    ck_assert_uint_eq(up.data.via.map.size, 20);
    const msgpack_object *inner = &up.data.via.map.ptr[10].val;
    ck_assert_int_eq(inner->type, MSGPACK_OBJECT_MAP);
    ck_assert_uint_eq(inner->via.map.size, 20);
    ck_assert_uint_eq(inner->via.map.ptr[19].val.via.array.size, 20);
    ck_assert_uint_eq(inner->via.map.ptr[19].val.via.array.ptr[19].via.u64, 19);
    ck_assert_uint_eq(up.data.via.map.ptr[19].val.via.u64, 19);
    msgpack_unpacked_destroy(&up);
    nng_msg_free(m);
}
END_TEST

/* Past the reply limit, and after net_out_fail or a map left open, the
 * reply is gone: net_out_take gives NULL and later writes are no-ops. */
START_TEST(failures_are_sticky)
{
    net_out o;
    ck_assert_int_eq(net_out_begin(&o), 0);
    o.limit = 64;
    net_map_begin(&o);
    char big[100];
    memset(big, 'x', sizeof(big));
    net_kv_str(&o, "big", big, sizeof(big));
    ck_assert(o.overflow);
    ck_assert(!net_out_ok(&o));
    net_kv_u64(&o, "after", 1);
    net_map_end(&o);
    ck_assert_ptr_null(net_out_take(&o));

    ck_assert_int_eq(net_out_begin(&o), 0);
    net_reply_open(&o, 0);
    net_out_fail(&o);
    net_map_end(&o);
    ck_assert(!o.overflow);
    ck_assert_ptr_null(net_out_take(&o));

    ck_assert_int_eq(net_out_begin(&o), 0);
    net_map_begin(&o); /* never closed */
    net_kv_u64(&o, "v", 1);
    ck_assert_ptr_null(net_out_take(&o));
}
END_TEST

/* An error reply is {"v":1, "code": name, "message": detail}. */
START_TEST(error_reply_shape)
{
    net_out o;
    ck_assert_int_eq(net_out_begin(&o), 0);
    net_reply_error(&o, TALLY_not_found, "no such entity");
    nng_msg *m = net_out_take(&o);
    ck_assert_ptr_nonnull(m);
    static const char want[] = "\x83\xa1v\x01\xa4" "code\xa9not_found\xa7message\xaeno such entity";
    ck_assert_uint_eq(nng_msg_len(m), sizeof(want) - 1);
    ck_assert(memcmp(nng_msg_body(m), want, sizeof(want) - 1) == 0);
    nng_msg_free(m);
}
END_TEST

int main(void)
{
    const test_row rows[] = {
        {"counted", maps_match_msgpack_c, 60},
        {"counted", arrays_match_msgpack_c, 60},
        {"counted", deep_nesting_decodes, 60},
        {"counted", failures_are_sticky, 60},
        {"counted", error_reply_shape, 60},
    };
    return test_run_suite(test_suite_of_rows("out", TEST_ROWS(rows)));
}
