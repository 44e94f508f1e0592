/*
 * check_log.c — tests of log/log: appending (gapless seqs under 8-byte
 * big-endian keys, the head in meta, kept in the transaction and written
 * once at commit through nested commits and aborts), the event encoding and its decoder,
 * the hash chain, reading ranges, and what an aborted or oversized append
 * leaves behind.
 *
 * The chain rule of log.h — hash = SHA-256(prev_hash || the event bytes
 * without their trailing hash entry) — is verified here with mbedTLS directly,
 * not with log_event_hash, so that the test and the code under test do not
 * share a mistake.
 */
#include "common/bytes.h"
#include "common/error.h"
#include "common/limits.h"
#include "common/msgpack_safe.h"
#include "log/log.h"
#include "log/store.h"
#include "tests/support/suite.h"
#include "tests/support/test_support.h"

#include <check.h>
#include <stdlib.h>
#include <string.h>

/* ---- appending ---- */

typedef struct body_spec {
    uint64_t n;
    size_t pad_bytes; /* a pad bin of this size when non-zero, else nil */
} body_spec;

static const uint8_t pad_source[2 * TALLY_EVENT_BYTES_MAX];

static int pack_test_body(msgpack_packer *pk, const void *ctx)
{
    const body_spec *b = ctx;
    /* A body of format 2 has a part per role of the entity's kind (3 for
     * transfers): [n, pad or nil, nil]. */
    if (msgpack_pack_array(pk, 3) || msgpack_pack_uint64(pk, b->n))
        return -1;
    if (b->pad_bytes == 0 ? msgpack_pack_nil(pk)
                          : msgpack_safe_pack_bin(pk, pad_source, b->pad_bytes))
        return -1;
    return msgpack_pack_nil(pk);
}

static log_append_args account_args(uint64_t account_id, const body_spec *body)
{
    log_append_args a = {
        .type = LOG_EVENT_ACCOUNT_OPENED,
        .entity = {.kind = LOG_ENTITY_ACCOUNT, .account_id = account_id},
        .entity_version = 1,
        .time_ms = TEST_NOW_MS,
        .consumer = tally_str_from("billing"),
        .key = tally_str_from("key-1"),
        .pack_body = pack_test_body,
        .body_ctx = body,
    };
    return a;
}

static uint64_t append_ok(store_txn *t, const log_append_args *a)
{
    uint64_t seq = 0;
    int rc = log_append(t, a, &seq);
    ck_assert_msg(rc == TALLY_ok, "log_append: %s", tally_strerror(rc));
    ck_assert_uint_gt(seq, 0);
    return seq;
}

/* Append n events in one committed transaction; returns the last seq. */
static uint64_t append_committed(test_store *ts, unsigned n)
{
    store_txn t;
    uint64_t seq = 0;
    ck_assert_int_eq(store_txn_begin(ts->st, NULL, false, &t), TALLY_ok);
    for (unsigned i = 0; i < n; i++) {
        body_spec body = {.n = i};
        log_append_args a = account_args(1000 + i, &body);
        seq = append_ok(&t, &a);
    }
    ck_assert_int_eq(store_txn_commit(&t), TALLY_ok);
    return seq;
}

/* A malloc'd copy of the event at seq as readers see it. */
static uint8_t *event_copy(test_store *ts, uint64_t seq, size_t *len)
{
    store_txn t;
    ck_assert_int_eq(store_txn_begin(ts->st, NULL, true, &t), TALLY_ok);
    uint8_t *copy = test_event_bytes(&t, seq, len);
    store_txn_abort(&t);
    return copy;
}

static int decode_rc(const uint8_t *bytes, size_t len)
{
    msgpack_unpacked up;
    msgpack_unpacked_init(&up);
    log_event ev;
    int rc = log_event_decode(bytes, len, &up, &ev);
    msgpack_unpacked_destroy(&up);
    return rc;
}

static bool mem_contains(const uint8_t *hay, size_t hay_len, const void *needle, size_t n)
{
    for (size_t i = 0; i + n <= hay_len; i++)
        if (memcmp(hay + i, needle, n) == 0)
            return true;
    return false;
}

START_TEST(seqs_are_gapless_under_big_endian_keys)
{
    test_store ts;
    test_store_open(&ts);
    store_txn t;
    ck_assert_int_eq(store_txn_begin(ts.st, NULL, false, &t), TALLY_ok);
    log_head h;
    ck_assert_int_eq(log_head_get(&t, &h), TALLY_ok);
    ck_assert_uint_eq(h.seq, 0);
    for (uint64_t want = 1; want <= 3; want++) {
        body_spec body = {.n = want};
        log_append_args a = account_args(want, &body);
        ck_assert_uint_eq(append_ok(&t, &a), want);
        ck_assert_int_eq(log_head_get(&t, &h), TALLY_ok);
        ck_assert_uint_eq(h.seq, want); /* the head moves within the txn */
    }
    ck_assert_int_eq(store_txn_commit(&t), TALLY_ok);
    ck_assert_uint_eq(append_committed(&ts, 2), 5);

    /* Raw keys: 8 bytes, big-endian, 1..5 in cursor order. */
    MDB_txn *raw;
    MDB_cursor *cur;
    MDB_val k, v;
    ck_assert_int_eq(mdb_txn_begin(store_env(ts.st), NULL, MDB_RDONLY, &raw), MDB_SUCCESS);
    ck_assert_int_eq(mdb_cursor_open(raw, store_dbi(ts.st, STORE_DB_LOG), &cur), MDB_SUCCESS);
    uint64_t expect = 1;
    for (int rc = mdb_cursor_get(cur, &k, &v, MDB_FIRST); rc == MDB_SUCCESS;
         rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT), expect++) {
        ck_assert_uint_eq(k.mv_size, 8);
        uint8_t want[8] = {0, 0, 0, 0, 0, 0, 0, (uint8_t)expect};
        ck_assert_mem_eq(k.mv_data, want, 8);
    }
    ck_assert_uint_eq(expect, 6);
    mdb_cursor_close(cur);

    /* meta "head" = seq (8 bytes BE) | hash of the last event. */
    MDB_val hk = {4, (void *)"head"};
    ck_assert_int_eq(mdb_get(raw, store_dbi(ts.st, STORE_DB_META), &hk, &v), MDB_SUCCESS);
    ck_assert_uint_eq(v.mv_size, 8 + LOG_HASH_BYTES);
    ck_assert_uint_eq(get_u64_be(v.mv_data), 5);
    uint8_t head_hash[32];
    memcpy(head_hash, (uint8_t *)v.mv_data + 8, 32);
    mdb_txn_abort(raw);

    size_t len;
    uint8_t *last = event_copy(&ts, 5, &len);
    ck_assert_mem_eq(head_hash, last + len - 32, 32);
    free(last);
    h = test_head(&ts);
    ck_assert_uint_eq(h.seq, 5);
    ck_assert_mem_eq(h.hash, head_hash, 32);
    ck_assert_uint_eq(test_count(&ts, STORE_DB_LOG), 5);
    test_store_close(&ts);
}
END_TEST

typedef struct expect_event {
    uint64_t seq;
    const log_append_args *args;
    uint64_t body_n;
} expect_event;

static void check_fields(const log_event *ev, void *ctx)
{
    const expect_event *x = ctx;
    const log_append_args *a = x->args;
    ck_assert_uint_eq(ev->seq, x->seq);
    ck_assert(log_event_type_is(ev, a->type));
    ck_assert_int_eq(ev->entity.kind, a->entity.kind);
    ck_assert_uint_eq(ev->entity_version, a->entity_version);
    ck_assert_int_eq(ev->time_ms, a->time_ms);
    ck_assert_int_eq(ev->has_causation, a->consumer.len > 0);
    ck_assert(tally_str_equal(ev->consumer, a->consumer));
    ck_assert(tally_str_equal(ev->key, a->key));
    ck_assert(tally_str_equal(ev->correlation, a->correlation));
    ck_assert_ptr_nonnull(ev->body);
    ck_assert_int_eq(ev->format, LOG_EVENT_FORMAT);
    ck_assert_int_eq(ev->body->type, MSGPACK_OBJECT_ARRAY);
    uint64_t n;
    ck_assert(msgpack_safe_get_u64(&ev->body->via.array.ptr[0], &n));
    ck_assert_uint_eq(n, x->body_n);
    ck_assert_ptr_nonnull(ev->raw);
    ck_assert_uint_gt(ev->raw_len, LOG_HASH_ENTRY_BYTES);
}

START_TEST(events_decode_with_their_fields)
{
    test_store ts;
    test_store_open(&ts);
    body_spec body = {.n = 77};
    log_append_args a = account_args(42, &body);
    a.entity_version = 9;
    a.time_ms = TEST_NOW_MS + 123;
    a.correlation = tally_str_from("corr-xyz");
    store_txn t;
    ck_assert_int_eq(store_txn_begin(ts.st, NULL, false, &t), TALLY_ok);
    ck_assert_uint_eq(append_ok(&t, &a), 1);
    ck_assert_int_eq(store_txn_commit(&t), TALLY_ok);
    expect_event x = {.seq = 1, .args = &a, .body_n = 77};
    test_with_event(&ts, 1, check_fields, &x);

    /* Format 2: an array of the 12 documented fields in order, each of its
     * documented type, the hash last (docs/EVENTS.md). */
    size_t len;
    uint8_t *bytes = event_copy(&ts, 1, &len);
    ck_assert_uint_eq(bytes[0], 0x9c);
    msgpack_unpacked up;
    msgpack_unpacked_init(&up);
    ck_assert(msgpack_unpack_next(&up, (const char *)bytes, len, NULL) == MSGPACK_UNPACK_SUCCESS);
    const msgpack_object *f = up.data.via.array.ptr;
    static const msgpack_object_type types[12] = {
        MSGPACK_OBJECT_POSITIVE_INTEGER, MSGPACK_OBJECT_POSITIVE_INTEGER, MSGPACK_OBJECT_BIN,
        MSGPACK_OBJECT_STR, MSGPACK_OBJECT_ARRAY, MSGPACK_OBJECT_POSITIVE_INTEGER,
        MSGPACK_OBJECT_POSITIVE_INTEGER, MSGPACK_OBJECT_ARRAY, MSGPACK_OBJECT_STR,
        MSGPACK_OBJECT_ARRAY, MSGPACK_OBJECT_BIN, MSGPACK_OBJECT_BIN};
    for (int i = 0; i < 12; i++)
        ck_assert_msg(f[i].type == types[i], "field %d of type %d", i, (int)f[i].type);
    ck_assert_uint_eq(f[0].via.u64, 2);
    ck_assert_uint_eq(f[1].via.u64, 1);
    ck_assert_uint_eq(f[4].via.array.ptr[0].via.u64, LOG_ENTITY_ACCOUNT);
    ck_assert_uint_eq(f[4].via.array.ptr[1].via.u64, 42);
    ck_assert_uint_eq(f[5].via.u64, 9);
    ck_assert_int_eq((int64_t)f[6].via.u64, TEST_NOW_MS + 123);
    ck_assert_uint_eq(f[7].via.array.size, 2); /* [consumer, key] */
    msgpack_unpacked_destroy(&up);
    free(bytes);
    test_store_close(&ts);
}
END_TEST

/* Everything the chain rule says, for the stored event at seq. */
static void verify_link(test_store *ts, uint64_t seq, const uint8_t prev[32],
                        uint8_t hash_out[32])
{
    static const uint8_t bin32_head[2] = {0xc4, 0x20};
    size_t len;
    uint8_t *bytes = event_copy(ts, seq, &len);
    ck_assert_uint_gt(len, LOG_HASH_ENTRY_BYTES + 34);
    ck_assert_uint_eq(LOG_HASH_ENTRY_BYTES, 34);
    ck_assert_mem_eq(bytes + len - 34, bin32_head, 2);
    /* prev_hash sits right before the hash entry. */
    ck_assert_mem_eq(bytes + len - 34 - 34, bin32_head, 2);
    ck_assert_mem_eq(bytes + len - 34 - 32, prev, 32);
    test_sha256_chain(prev, bytes, len - 34, hash_out);
    ck_assert_mem_eq(bytes + len - 32, hash_out, 32);

    msgpack_unpacked up;
    msgpack_unpacked_init(&up);
    log_event ev;
    ck_assert_int_eq(log_event_decode(bytes, len, &up, &ev), TALLY_ok);
    ck_assert_mem_eq(ev.prev_hash, prev, 32);
    ck_assert_mem_eq(ev.hash, hash_out, 32);
    msgpack_unpacked_destroy(&up);
    /* log_event_hash agrees with the independent computation. */
    uint8_t lib[32];
    ck_assert_int_eq(log_event_hash(prev, bytes, len, lib), TALLY_ok);
    ck_assert_mem_eq(lib, hash_out, 32);
    free(bytes);
}

/* Seqs 1..last each chain to the one before (seq 1 to 32 zero bytes), and
 * meta/head is last with its hash. */
static void assert_chained_to_head(test_store *ts, uint64_t last)
{
    uint8_t prev[32] = {0}, hash[32];
    for (uint64_t seq = 1; seq <= last; seq++) {
        verify_link(ts, seq, prev, hash);
        ck_assert_msg(memcmp(prev, hash, 32) != 0, "seq %llu hash equals its prev",
                      (unsigned long long)seq);
        memcpy(prev, hash, 32);
    }
    log_head h = test_head(ts);
    ck_assert_uint_eq(h.seq, last);
    ck_assert_mem_eq(h.hash, prev, 32);
}

START_TEST(hash_chain_verified_independently)
{
    test_store ts;
    test_store_open(&ts);
    append_committed(&ts, 3);
    append_committed(&ts, 4);
    assert_chained_to_head(&ts, 7);
    test_store_close(&ts);
}
END_TEST

START_TEST(first_prev_hash_is_all_zero)
{
    test_store ts;
    test_store_open(&ts);
    append_committed(&ts, 1);
    size_t len;
    uint8_t *bytes = event_copy(&ts, 1, &len);
    msgpack_unpacked up;
    msgpack_unpacked_init(&up);
    log_event ev;
    ck_assert_int_eq(log_event_decode(bytes, len, &up, &ev), TALLY_ok);
    static const uint8_t zero[32];
    ck_assert_mem_eq(ev.prev_hash, zero, 32);
    ck_assert_mem_ne(ev.hash, zero, 32);
    msgpack_unpacked_destroy(&up);
    free(bytes);
    test_store_close(&ts);
}
END_TEST

START_TEST(flipping_any_single_byte_breaks_decode)
{
    test_store ts;
    test_store_open(&ts);
    /* Three events of different shapes: account, transfer, entitlement. */
    store_txn t;
    ck_assert_int_eq(store_txn_begin(ts.st, NULL, false, &t), TALLY_ok);
    body_spec body = {.n = 5, .pad_bytes = 40};
    log_append_args a = account_args(7, &body);
    append_ok(&t, &a);
    a.type = LOG_EVENT_TRANSFER_CREATED;
    a.entity = (log_entity){.kind = LOG_ENTITY_TRANSFER, .transfer_id = test_id(99)};
    a.correlation = tally_str_from("corr");
    append_ok(&t, &a);
    a.type = LOG_EVENT_ENTITLEMENT_GRANTED;
    a.entity = (log_entity){.kind = LOG_ENTITY_ENTITLEMENT,
                            .subject = tally_str_from("user-1"),
                            .feature = tally_str_from("pro")};
    a.consumer = (tally_str){NULL, 0};
    append_ok(&t, &a);
    ck_assert_int_eq(store_txn_commit(&t), TALLY_ok);

    static const uint8_t masks[] = {0x01, 0x80, 0xff};
    for (uint64_t seq = 1; seq <= 3; seq++) {
        size_t len;
        uint8_t *bytes = event_copy(&ts, seq, &len);
        ck_assert_int_eq(decode_rc(bytes, len), TALLY_ok);
        for (size_t i = 0; i < len; i++) {
            for (size_t m = 0; m < sizeof(masks); m++) {
                bytes[i] ^= masks[m];
                int rc = decode_rc(bytes, len);
                bytes[i] ^= masks[m];
                ck_assert_msg(rc == TALLY_corrupt_record,
                              "seq %llu: byte %zu ^ 0x%02x still decodes (rc %d)",
                              (unsigned long long)seq, i, masks[m], rc);
            }
        }
        ck_assert_int_eq(decode_rc(bytes, len), TALLY_ok);
        /* Truncated or extended events do not decode either. */
        for (size_t n = 0; n < len; n++) {
            uint8_t *prefix = malloc(n ? n : 1);
            ck_assert_ptr_nonnull(prefix);
            memcpy(prefix, bytes, n);
            ck_assert_int_eq(decode_rc(prefix, n), TALLY_corrupt_record);
            free(prefix);
        }
        uint8_t *longer = malloc(len + 1);
        ck_assert_ptr_nonnull(longer);
        memcpy(longer, bytes, len);
        longer[len] = 0xc0;
        ck_assert_int_eq(decode_rc(longer, len + 1), TALLY_corrupt_record);
        free(longer);
        free(bytes);
    }
    test_store_close(&ts);
}
END_TEST

START_TEST(event_ids_are_unique_uuidv7)
{
    enum { N = 100 };
    test_store ts;
    test_store_open(&ts);
    store_txn t;
    ck_assert_int_eq(store_txn_begin(ts.st, NULL, false, &t), TALLY_ok);
    for (int i = 0; i < N; i++) {
        body_spec body = {.n = (uint64_t)i};
        log_append_args a = account_args(1, &body);
        a.time_ms = TEST_NOW_MS + (i % 3); /* several ids per millisecond */
        append_ok(&t, &a);
    }
    ck_assert_int_eq(store_txn_commit(&t), TALLY_ok);
    tally_id128 ids[N];
    for (int i = 0; i < N; i++) {
        size_t len;
        uint8_t *bytes = event_copy(&ts, (uint64_t)i + 1, &len);
        msgpack_unpacked up;
        msgpack_unpacked_init(&up);
        log_event ev;
        ck_assert_int_eq(log_event_decode(bytes, len, &up, &ev), TALLY_ok);
        ids[i] = ev.id;
        ck_assert_uint_eq(ev.id.bytes[6] >> 4, 7);
        ck_assert_uint_eq(ev.id.bytes[8] >> 6, 2);
        uint64_t ms = 0;
        for (int b = 0; b < 6; b++)
            ms = (ms << 8) | ev.id.bytes[b];
        ck_assert_uint_eq(ms, (uint64_t)(TEST_NOW_MS + (i % 3)));
        msgpack_unpacked_destroy(&up);
        free(bytes);
    }
    for (int i = 0; i < N; i++)
        for (int j = i + 1; j < N; j++)
            ck_assert_msg(!tally_id128_equal(&ids[i], &ids[j]), "events %d and %d share an id",
                          i + 1, j + 1);
    test_store_close(&ts);
}
END_TEST

typedef struct read_log {
    uint64_t seqs[64];
    size_t count;
    size_t stop_after; /* return 7 from the call number stop_after (0 = never) */
} read_log;

static int collect_seq(uint64_t seq, const void *bytes, size_t len, void *ctx)
{
    read_log *r = ctx;
    ck_assert_uint_lt(r->count, 64);
    r->seqs[r->count++] = seq;
    /* The bytes are the event at seq. */
    msgpack_unpacked up;
    msgpack_unpacked_init(&up);
    log_event ev;
    ck_assert_int_eq(log_event_decode(bytes, len, &up, &ev), TALLY_ok);
    ck_assert_uint_eq(ev.seq, seq);
    msgpack_unpacked_destroy(&up);
    return r->stop_after && r->count == r->stop_after ? 7 : 0;
}

static read_log read_range(test_store *ts, uint64_t from, uint64_t max, size_t stop_after,
                           int expect_rc)
{
    read_log r = {.stop_after = stop_after};
    store_txn t;
    ck_assert_int_eq(store_txn_begin(ts->st, NULL, true, &t), TALLY_ok);
    ck_assert_int_eq(log_read(&t, from, max, collect_seq, &r), expect_rc);
    store_txn_abort(&t);
    return r;
}

static void expect_seqs(const read_log *r, uint64_t first, size_t count)
{
    ck_assert_uint_eq(r->count, count);
    for (size_t i = 0; i < count; i++)
        ck_assert_uint_eq(r->seqs[i], first + i);
}

START_TEST(log_read_returns_the_range_and_stops)
{
    test_store ts;
    test_store_open(&ts);
    store_txn t;
    uint64_t first;
    ck_assert_int_eq(store_txn_begin(ts.st, NULL, true, &t), TALLY_ok);
    ck_assert_int_eq(log_first_seq(&t, &first), TALLY_ok);
    ck_assert_uint_eq(first, 0);
    store_txn_abort(&t);
    read_log r = read_range(&ts, 1, 10, 0, TALLY_ok);
    expect_seqs(&r, 1, 0);

    append_committed(&ts, 20);
    r = read_range(&ts, 5, 4, 0, TALLY_ok);
    expect_seqs(&r, 5, 4);
    r = read_range(&ts, 18, 10, 0, TALLY_ok);
    expect_seqs(&r, 18, 3);
    r = read_range(&ts, 21, 10, 0, TALLY_ok);
    expect_seqs(&r, 21, 0);
    r = read_range(&ts, 0, 3, 0, TALLY_ok);
    expect_seqs(&r, 1, 3);
    r = read_range(&ts, 1, 0, 0, TALLY_ok);
    expect_seqs(&r, 1, 0);
    r = read_range(&ts, 1, UINT64_MAX, 0, TALLY_ok);
    expect_seqs(&r, 1, 20);
    r = read_range(&ts, UINT64_MAX, 5, 0, TALLY_ok);
    expect_seqs(&r, 1, 0);
    /* The callback stops the read; its value is returned. */
    r = read_range(&ts, 3, 10, 2, 7);
    expect_seqs(&r, 3, 2);

    ck_assert_int_eq(store_txn_begin(ts.st, NULL, true, &t), TALLY_ok);
    ck_assert_int_eq(log_first_seq(&t, &first), TALLY_ok);
    ck_assert_uint_eq(first, 1);
    store_txn_abort(&t);
    test_store_close(&ts);
}
END_TEST

START_TEST(aborted_txn_leaves_no_events_and_the_head_unchanged)
{
    test_store ts;
    test_store_open(&ts);
    append_committed(&ts, 2);
    log_head before = test_head(&ts);
    ck_assert_uint_eq(before.seq, 2);

    store_txn t;
    ck_assert_int_eq(store_txn_begin(ts.st, NULL, false, &t), TALLY_ok);
    body_spec body = {.n = 1};
    log_append_args a = account_args(1, &body);
    ck_assert_uint_eq(append_ok(&t, &a), 3);
    ck_assert_uint_eq(append_ok(&t, &a), 4);
    store_txn_abort(&t);
    log_head after = test_head(&ts);
    ck_assert_uint_eq(after.seq, 2);
    ck_assert_mem_eq(after.hash, before.hash, 32);
    ck_assert_uint_eq(test_count(&ts, STORE_DB_LOG), 2);

    /* A nested txn's events vanish with it; the parent's stay. */
    store_txn child;
    ck_assert_int_eq(store_txn_begin(ts.st, NULL, false, &t), TALLY_ok);
    ck_assert_uint_eq(append_ok(&t, &a), 3);
    log_head mid;
    ck_assert_int_eq(log_head_get(&t, &mid), TALLY_ok);
    ck_assert_int_eq(store_txn_begin(ts.st, &t, false, &child), TALLY_ok);
    ck_assert_uint_eq(append_ok(&child, &a), 4);
    store_txn_abort(&child);
    log_head h;
    ck_assert_int_eq(log_head_get(&t, &h), TALLY_ok);
    ck_assert_uint_eq(h.seq, 3);
    ck_assert_mem_eq(h.hash, mid.hash, 32);
    ck_assert_uint_eq(append_ok(&t, &a), 4);
    ck_assert_int_eq(store_txn_commit(&t), TALLY_ok);

    /* The chain continues from the committed head. */
    uint8_t hash[32];
    verify_link(&ts, 3, before.hash, hash);
    uint8_t next[32];
    verify_link(&ts, 4, hash, next);
    ck_assert_uint_eq(test_head(&ts).seq, 4);
    test_store_close(&ts);
}
END_TEST

/* meta/head as stored, read raw inside t (what a crash would leave). */
static uint64_t meta_head_seq_in(test_store *ts, store_txn *t)
{
    MDB_val k = {4, (void *)"head"}, v;
    int rc = mdb_get(t->txn, store_dbi(ts->st, STORE_DB_META), &k, &v);
    if (rc == MDB_NOTFOUND)
        return 0;
    ck_assert_int_eq(rc, MDB_SUCCESS);
    ck_assert_uint_eq(v.mv_size, 8 + LOG_HASH_BYTES);
    return get_u64_be(v.mv_data);
}

static uint64_t head_seq_of(store_txn *t)
{
    log_head h;
    ck_assert_int_eq(log_head_get(t, &h), TALLY_ok);
    return h.seq;
}

/* The head lives in the transaction: appends move it in memory (one put
 * per event: the event), meta/head is written once at the top-level
 * commit, and nested transactions carry it both ways: a committed child's
 * appends move the parent's head, an aborted child's (at any depth) leave
 * no trace, so the log stays gapless and chained. */
START_TEST(head_kept_in_the_txn_and_written_once_at_commit)
{
    test_store ts;
    test_store_open(&ts);
    append_committed(&ts, 2);
    body_spec body = {.n = 7};
    log_append_args a = account_args(7, &body);

    store_txn t, c1, c2;
    ck_assert_int_eq(store_txn_begin(ts.st, NULL, false, &t), TALLY_ok);
    for (uint64_t want = 3; want <= 5; want++)
        ck_assert_uint_eq(append_ok(&t, &a), want);
    ck_assert_uint_eq(t.writes, 3);                /* the events, not meta per event */
    ck_assert_uint_eq(meta_head_seq_in(&ts, &t), 2); /* not yet written */
    ck_assert_uint_eq(head_seq_of(&t), 5);

    /* A child that commits, with a grandchild that commits and one that
     * aborts after appending. */
    ck_assert_int_eq(store_txn_begin(ts.st, &t, false, &c1), TALLY_ok);
    ck_assert_uint_eq(head_seq_of(&c1), 5);
    ck_assert_uint_eq(append_ok(&c1, &a), 6);
    ck_assert_int_eq(store_txn_begin(ts.st, &c1, false, &c2), TALLY_ok);
    ck_assert_uint_eq(append_ok(&c2, &a), 7);
    ck_assert_int_eq(store_txn_commit(&c2), TALLY_ok);
    ck_assert_uint_eq(head_seq_of(&c1), 7);
    ck_assert_int_eq(store_txn_begin(ts.st, &c1, false, &c2), TALLY_ok);
    ck_assert_uint_eq(append_ok(&c2, &a), 8);
    ck_assert_uint_eq(append_ok(&c2, &a), 9);
    store_txn_abort(&c2);
    ck_assert_uint_eq(head_seq_of(&c1), 7);
    ck_assert_uint_eq(head_seq_of(&t), 5); /* the parent sees nothing before c1 commits */
    ck_assert_int_eq(store_txn_commit(&c1), TALLY_ok);
    ck_assert_uint_eq(head_seq_of(&t), 7);

    /* A child that aborts after appending. */
    ck_assert_int_eq(store_txn_begin(ts.st, &t, false, &c1), TALLY_ok);
    ck_assert_uint_eq(append_ok(&c1, &a), 8);
    store_txn_abort(&c1);
    ck_assert_uint_eq(head_seq_of(&t), 7);
    ck_assert_uint_eq(append_ok(&t, &a), 8);
    ck_assert_uint_eq(meta_head_seq_in(&ts, &t), 2);
    ck_assert_int_eq(store_txn_commit(&t), TALLY_ok);

    /* A transaction whose first append is in a child that aborts reads
     * meta again afterwards. */
    ck_assert_int_eq(store_txn_begin(ts.st, NULL, false, &t), TALLY_ok);
    ck_assert_int_eq(store_txn_begin(ts.st, &t, false, &c1), TALLY_ok);
    ck_assert_uint_eq(append_ok(&c1, &a), 9);
    store_txn_abort(&c1);
    ck_assert_uint_eq(append_ok(&t, &a), 9);
    ck_assert_int_eq(store_txn_commit(&t), TALLY_ok);

    /* Gapless, chained, and meta/head names the last event. */
    ck_assert_uint_eq(test_count(&ts, STORE_DB_LOG), 9);
    assert_chained_to_head(&ts, 9);
    test_store_close(&ts);
}
END_TEST

static void check_entity(const log_event *ev, void *ctx)
{
    const log_entity *want = ctx;
    ck_assert_int_eq(ev->entity.kind, want->kind);
    switch (want->kind) {
    case LOG_ENTITY_ACCOUNT:
        ck_assert(ev->entity.account_id == want->account_id);
        break;
    case LOG_ENTITY_TRANSFER:
        ck_assert(tally_id128_equal(&ev->entity.transfer_id, &want->transfer_id));
        break;
    case LOG_ENTITY_ENTITLEMENT:
        ck_assert(tally_str_equal(ev->entity.subject, want->subject));
        ck_assert(tally_str_equal(ev->entity.feature, want->feature));
        break;
    case LOG_ENTITY_DEAD_LETTER:
        ck_assert(tally_str_equal(ev->entity.subscriber, want->subscriber));
        ck_assert_uint_eq(ev->entity.letter_seq, want->letter_seq);
        break;
    case LOG_ENTITY_WEBHOOK:
        ck_assert(tally_str_equal(ev->entity.webhook_source, want->webhook_source));
        ck_assert(tally_str_equal(ev->entity.webhook_event_id, want->webhook_event_id));
        break;
    case LOG_ENTITY_SUBSCRIBER:
        ck_assert(tally_str_equal(ev->entity.subscriber, want->subscriber));
    case LOG_ENTITY_ENDPOINT:
        ck_assert(tally_str_equal(ev->entity.endpoint, want->endpoint));
        break;
    }
}

START_TEST(entity_kinds_round_trip)
{
    test_store ts;
    test_store_open(&ts);
    char subject[TALLY_SUBJECT_BYTES_MAX], feature[TALLY_FEATURE_BYTES_MAX];
    memset(subject, 's', sizeof(subject));
    memset(feature, 'f', sizeof(feature));
    tally_id128 tid;
    for (int i = 0; i < 16; i++)
        tid.bytes[i] = (uint8_t)(0xf0 ^ i);
    log_entity entities[] = {
        {.kind = LOG_ENTITY_ACCOUNT, .account_id = 1},
        {.kind = LOG_ENTITY_ACCOUNT, .account_id = UINT64_MAX},
        {.kind = LOG_ENTITY_TRANSFER, .transfer_id = tid},
        {.kind = LOG_ENTITY_ENTITLEMENT, .subject = tally_str_from("user-1"),
         .feature = tally_str_from("pro")},
        {.kind = LOG_ENTITY_ENTITLEMENT, .subject = {subject, sizeof(subject)},
         .feature = {feature, sizeof(feature)}},
        {.kind = LOG_ENTITY_DEAD_LETTER, .subscriber = tally_str_from("billing"),
         .letter_seq = 42},
        {.kind = LOG_ENTITY_WEBHOOK, .webhook_source = tally_str_from("stripe"),
         .webhook_event_id = tally_str_from("evt_1")},
        {.kind = LOG_ENTITY_SUBSCRIBER, .subscriber = tally_str_from("relay:hooks")},
        {.kind = LOG_ENTITY_ENDPOINT, .endpoint = tally_str_from("billing")},
    };
    const size_t n = sizeof(entities) / sizeof(entities[0]);
    store_txn t;
    ck_assert_int_eq(store_txn_begin(ts.st, NULL, false, &t), TALLY_ok);
    for (size_t i = 0; i < n; i++) {
        body_spec body = {.n = i};
        log_append_args a = account_args(1, &body);
        a.type = LOG_EVENT_ACCOUNT_OPENED; /* the entity is what is tested */
        a.entity = entities[i];
        append_ok(&t, &a);
    }
    ck_assert_int_eq(store_txn_commit(&t), TALLY_ok);
    for (size_t i = 0; i < n; i++)
        test_with_event(&ts, i + 1, check_entity, &entities[i]);
    ck_assert_str_eq(log_entity_kind_name(LOG_ENTITY_ACCOUNT), "account");
    ck_assert_str_eq(log_entity_kind_name(LOG_ENTITY_TRANSFER), "transfer");
    ck_assert_str_eq(log_entity_kind_name(LOG_ENTITY_ENTITLEMENT), "entitlement");
    ck_assert_str_eq(log_entity_kind_name(LOG_ENTITY_DEAD_LETTER), "dead_letter");
    ck_assert_str_eq(log_entity_kind_name(LOG_ENTITY_WEBHOOK), "webhook");
    ck_assert_str_eq(log_entity_kind_name(LOG_ENTITY_SUBSCRIBER), "subscriber");
    ck_assert_str_eq(log_entity_kind_name(LOG_ENTITY_ENDPOINT), "endpoint");
    ck_assert_str_eq(log_entity_kind_name((log_entity_kind)0), "unknown");
    test_store_close(&ts);
}
END_TEST

/* The event types' wire names are what the chain hashes, and their
 * numbers what the log stores (log/stored_event.h): each type has its
 * name and its number, the names in the order of docs/EVENTS.md, and a
 * decoder finds the type by its name (and no type for another name). */
START_TEST(event_type_names_are_stable)
{
    static const char *const names[] = {
        "account.opened",       "transfer.created",     "transfer.posted",
        "transfer.voided",      "transfer.expired",     "entitlement.granted",
        "entitlement.extended", "entitlement.revoked",  "entitlement.expired",
        "dead_letter.expired",  "webhook.received",     "subscriber.expired",
        "endpoint.disabled",    "endpoint.enabled",     "endpoint.secret_rotated",
        "endpoint.recover_requested", "endpoint.recovered", "endpoint.created",
        "endpoint.updated",     "endpoint.deleted",
    };
    ck_assert_uint_eq(sizeof(names) / sizeof(names[0]), LOG_EVENT_TYPE_END - 1);
    for (int t = LOG_EVENT_TYPE_NONE + 1; t < LOG_EVENT_TYPE_END; t++) {
        ck_assert_str_eq(log_event_type_name((log_event_type)t), names[t - 1]);
        log_event_type back;
        ck_assert(log_event_type_of(tally_str_from(names[t - 1]), &back));
        ck_assert_int_eq(back, t);
    }
    ck_assert_ptr_null(log_event_type_name(LOG_EVENT_TYPE_NONE));
    ck_assert_ptr_null(log_event_type_name(LOG_EVENT_TYPE_END));
    log_event_type none = LOG_EVENT_ACCOUNT_OPENED;
    ck_assert(!log_event_type_of(tally_str_from("account.closed"), &none));
    ck_assert_int_eq(none, LOG_EVENT_TYPE_NONE);
    ck_assert(!log_event_type_of(tally_str_from("account.opene"), &none));
}
END_TEST

START_TEST(causation_and_correlation_nil_or_present)
{
    test_store ts;
    test_store_open(&ts);
    body_spec body = {.n = 1};
    log_append_args with = account_args(1, &body);
    with.correlation = tally_str_from("trace-7");
    log_append_args without = account_args(2, &body);
    without.consumer = (tally_str){NULL, 0};
    without.key = (tally_str){NULL, 0};
    store_txn t;
    ck_assert_int_eq(store_txn_begin(ts.st, NULL, false, &t), TALLY_ok);
    append_ok(&t, &with);
    append_ok(&t, &without);
    ck_assert_int_eq(store_txn_commit(&t), TALLY_ok);

    expect_event x1 = {.seq = 1, .args = &with, .body_n = 1};
    expect_event x2 = {.seq = 2, .args = &without, .body_n = 1};
    test_with_event(&ts, 1, check_fields, &x1);
    test_with_event(&ts, 2, check_fields, &x2);

    /* causation (field 7): [consumer, key] or nil; correlation (8): a
     * string or nil. */
    static const uint32_t causation_at[] = {7}, correlation_at[] = {8};
    size_t len;
    uint8_t *bytes = event_copy(&ts, 1, &len);
    ck_assert_uint_eq(bytes[test_msgpack_at(bytes, len, causation_at, 1)], 0x92);
    ck_assert_uint_eq(bytes[test_msgpack_at(bytes, len, correlation_at, 1)], 0xa0 | 7);
    ck_assert(mem_contains(bytes, len, "trace-7", 7));
    free(bytes);
    bytes = event_copy(&ts, 2, &len);
    ck_assert_uint_eq(bytes[test_msgpack_at(bytes, len, causation_at, 1)], 0xc0);
    ck_assert_uint_eq(bytes[test_msgpack_at(bytes, len, correlation_at, 1)], 0xc0);
    ck_assert(!mem_contains(bytes, len, "billing", 7));
    free(bytes);
    test_store_close(&ts);
}
END_TEST

/* Length of the event a body with pad_bytes of padding makes at seq 1. */
static size_t measure_event(test_store *ts, size_t pad_bytes)
{
    store_txn t;
    ck_assert_int_eq(store_txn_begin(ts->st, NULL, false, &t), TALLY_ok);
    body_spec body = {.n = 1, .pad_bytes = pad_bytes};
    log_append_args a = account_args(1, &body);
    ck_assert_uint_eq(append_ok(&t, &a), 1);
    size_t len;
    free(test_event_bytes(&t, 1, &len)); /* its size as readers see it */
    store_txn_abort(&t);
    return len;
}

START_TEST(oversized_event_is_refused_and_remembered)
{
    test_store ts;
    test_store_open(&ts);
    append_committed(&ts, 1);
    log_head before = test_head(&ts);

    store_txn t;
    ck_assert_int_eq(store_txn_begin(ts.st, NULL, false, &t), TALLY_ok);
    body_spec body = {.n = 1, .pad_bytes = TALLY_EVENT_BYTES_MAX + 100};
    log_append_args a = account_args(1, &body);
    uint64_t seq = 12345;
    ck_assert_int_eq(log_append(&t, &a, &seq), TALLY_internal);
    ck_assert_uint_eq(seq, 12345);
    ck_assert_int_eq(t.error, TALLY_internal);
    log_head h;
    ck_assert_int_eq(log_head_get(&t, &h), TALLY_ok);
    ck_assert_uint_eq(h.seq, 1);
    /* Whatever comes next in this txn is refused too. */
    body.pad_bytes = 0;
    ck_assert_int_ne(log_append(&t, &a, &seq), TALLY_ok);
    ck_assert_int_eq(store_txn_commit(&t), TALLY_internal);
    h = test_head(&ts);
    ck_assert_uint_eq(h.seq, before.seq);
    ck_assert_mem_eq(h.hash, before.hash, 32);
    ck_assert_uint_eq(test_count(&ts, STORE_DB_LOG), 1);
    test_store_close(&ts);
}
END_TEST

START_TEST(event_of_exactly_the_maximum_size_is_accepted)
{
    test_store ts;
    test_store_open(&ts);
    /* bin32 padding keeps a 5-byte header from 65536 bytes up, so the
     * event grows byte for byte with the padding (encoded on the heap: it
     * is larger than log_append's stack buffer). */
    size_t base = measure_event(&ts, 70000);
    ck_assert_uint_lt(base, TALLY_EVENT_BYTES_MAX);
    size_t exact = 70000 + (TALLY_EVENT_BYTES_MAX - base);
    ck_assert_uint_eq(measure_event(&ts, exact), TALLY_EVENT_BYTES_MAX);

    store_txn t;
    ck_assert_int_eq(store_txn_begin(ts.st, NULL, false, &t), TALLY_ok);
    body_spec body = {.n = 1, .pad_bytes = exact};
    log_append_args a = account_args(1, &body);
    ck_assert_uint_eq(append_ok(&t, &a), 1);
    ck_assert_int_eq(store_txn_commit(&t), TALLY_ok);
    uint8_t prev[32] = {0}, hash[32];
    verify_link(&ts, 1, prev, hash);

    ck_assert_int_eq(store_txn_begin(ts.st, NULL, false, &t), TALLY_ok);
    body.pad_bytes = exact + 1;
    uint64_t seq;
    ck_assert_int_eq(log_append(&t, &a, &seq), TALLY_internal);
    ck_assert_int_eq(store_txn_commit(&t), TALLY_internal);
    ck_assert_uint_eq(test_head(&ts).seq, 1);
    test_store_close(&ts);
}
END_TEST

/* An event's size as readers see it (what a page carries). */
static size_t stored_bytes(store_txn *t, uint64_t seq)
{
    size_t len;
    free(test_event_bytes(t, seq, &len));
    return len;
}

/* log_read's page rule (log_page_measure): at most max_count events and
 * bytes_max of them, but at least one. */
START_TEST(page_is_bounded_by_count_and_bytes)
{
    test_store ts;
    test_store_open(&ts);
    append_committed(&ts, 10);
    store_txn t;
    ck_assert_int_eq(store_txn_begin(ts.st, NULL, true, &t), TALLY_ok);
    uint64_t n;
    size_t bytes;
    ck_assert_int_eq(log_page_measure(&t, 1, 100, SIZE_MAX, &n, &bytes), TALLY_ok);
    ck_assert_uint_eq(n, 10);
    ck_assert_int_eq(log_page_measure(&t, 1, 4, SIZE_MAX, &n, &bytes), TALLY_ok);
    ck_assert_uint_eq(n, 4);
    size_t three = stored_bytes(&t, 3) + stored_bytes(&t, 4) + stored_bytes(&t, 5);
    size_t budget = three + stored_bytes(&t, 6) / 2;
    ck_assert_int_eq(log_page_measure(&t, 3, 100, budget, &n, &bytes), TALLY_ok);
    ck_assert_uint_eq(n, 3); /* the fourth would pass the budget */
    ck_assert_uint_eq(bytes, three);
    ck_assert_int_eq(log_page_measure(&t, 5, 100, 1, &n, &bytes), TALLY_ok);
    ck_assert_uint_eq(n, 1); /* always one, even larger than the budget */
    ck_assert_int_eq(log_page_measure(&t, 11, 100, SIZE_MAX, &n, &bytes), TALLY_ok);
    ck_assert_uint_eq(n, 0);
    ck_assert_int_eq(log_page_measure(&t, 1, 0, SIZE_MAX, &n, &bytes), TALLY_ok);
    ck_assert_uint_eq(n, 0);
    store_txn_abort(&t);
    test_store_close(&ts);
}
END_TEST

START_TEST(decode_rejects_wrong_sizes_and_garbage)
{
    static uint8_t buf[TALLY_EVENT_BYTES_MAX + 1];
    memset(buf, 0, sizeof(buf));
    ck_assert_int_eq(decode_rc(buf, 0), TALLY_corrupt_record);
    ck_assert_int_eq(decode_rc(buf, LOG_HASH_ENTRY_BYTES - 1), TALLY_corrupt_record);
    ck_assert_int_eq(decode_rc(buf, sizeof(buf)), TALLY_corrupt_record);
    /* A valid msgpack map that is not an event. */
    static const uint8_t map[] = {0x81, 0xa1, 'v', 0x01};
    ck_assert_int_eq(decode_rc(map, sizeof(map)), TALLY_corrupt_record);
    uint8_t nils[64];
    memset(nils, 0xc0, sizeof(nils));
    ck_assert_int_eq(decode_rc(nils, sizeof(nils)), TALLY_corrupt_record);
}
END_TEST

#define TIMEOUT_S 60

static Suite *log_suite(void)
{
    const test_row tests[] = {
        {"gapless", seqs_are_gapless_under_big_endian_keys, TIMEOUT_S},
        {"fields", events_decode_with_their_fields, TIMEOUT_S},
        {"chain", hash_chain_verified_independently, TIMEOUT_S},
        {"first_prev", first_prev_hash_is_all_zero, TIMEOUT_S},
        {"flip", flipping_any_single_byte_breaks_decode, TIMEOUT_S},
        {"ids", event_ids_are_unique_uuidv7, TIMEOUT_S},
        {"read", log_read_returns_the_range_and_stops, TIMEOUT_S},
        {"abort", aborted_txn_leaves_no_events_and_the_head_unchanged, TIMEOUT_S},
        {"head_in_txn", head_kept_in_the_txn_and_written_once_at_commit, TIMEOUT_S},
        {"entities", entity_kinds_round_trip, TIMEOUT_S},
        {"entities", event_type_names_are_stable, TIMEOUT_S},
        {"causation", causation_and_correlation_nil_or_present, TIMEOUT_S},
        {"oversized", oversized_event_is_refused_and_remembered, TIMEOUT_S},
        {"max_size", event_of_exactly_the_maximum_size_is_accepted, TIMEOUT_S},
        {"decode_bad", decode_rejects_wrong_sizes_and_garbage, TIMEOUT_S},
        {"page", page_is_bounded_by_count_and_bytes, TIMEOUT_S},
    };
    return test_suite_of_rows("log", TEST_ROWS(tests));
}

int main(void) { return test_run_suite(log_suite()); }
