/*
 * check_stored_event.c — tests of the short form events take in the log
 * (log/stored_event.h): what is stored, that every reader gets the format
 * 2 bytes back exactly (compared with log_event_encode's own), that the
 * hash comes from the next event or the head, that damage to a stored
 * event is found, that a log holding format 2 events before short ones
 * chains across them, and that no input makes the expansion misbehave.
 */
#include "common/bytes.h"
#include "common/error.h"
#include "common/limits.h"
#include "log/log.h"
#include "log/store.h"
#include "log/stored_event.h"
#include "tests/support/suite.h"
#include "tests/support/test_support.h"

#include <check.h>
#include <stdlib.h>
#include <string.h>

static const char uuid_key[] = "0190c2a4-8f1e-7a3b-9c4d-5e6f708192a3";
static const uint8_t uuid_bytes[16] = {0x01, 0x90, 0xc2, 0xa4, 0x8f, 0x1e, 0x7a, 0x3b,
                                       0x9c, 0x4d, 0x5e, 0x6f, 0x70, 0x81, 0x92, 0xa3};

typedef struct body_ctx {
    uint64_t n;
    log_entity entity;
    int64_t time_ms;
} body_ctx;

/* A body of as many rows as the entity's kind has parts (3 for a
 * transfer, else 1), each [id, n, time_ms, "row"] as real rows begin:
 * the id the entity's (an account's number, a transfer's 16 bytes, else
 * n), and in the first row the event's time (a creation time), which the
 * stored form keeps once. */
static int pack_body(msgpack_packer *pk, const void *ctx)
{
    const body_ctx *b = ctx;
    unsigned parts = b->entity.kind == LOG_ENTITY_TRANSFER ? 3 : 1;
    if (msgpack_pack_array(pk, parts))
        return -1;
    for (unsigned i = 0; i < parts; i++) {
        int rc = msgpack_pack_array(pk, 4);
        if (b->entity.kind == LOG_ENTITY_ACCOUNT)
            rc = rc || msgpack_pack_uint64(pk, b->entity.account_id);
        else if (b->entity.kind == LOG_ENTITY_TRANSFER)
            rc = rc || msgpack_pack_bin_with_body(pk, b->entity.transfer_id.bytes, 16);
        else
            rc = rc || msgpack_pack_uint64(pk, b->n);
        rc = rc || msgpack_pack_uint64(pk, b->n) ||
             msgpack_pack_int64(pk, i == 0 ? b->time_ms : b->time_ms - 1) ||
             msgpack_pack_str_with_body(pk, "row", 3);
        if (rc)
            return -1;
    }
    return 0;
}

/* One event of each shape: every type, every entity kind, with and
 * without causation and correlation, keys of UUID text and others. */
static log_event_draft draft_of(unsigned i, body_ctx *b)
{
    static const char *const keys[] = {uuid_key, "order-17", "0190C2A4-8F1E-7A3B-9C4D-5E6F708192A3",
                                       "0190c2a48f1e7a3b9c4d5e6f708192a3", ""};
    log_event_draft d = {
        .type = (log_event_type)(LOG_EVENT_TYPE_NONE + 1 + i % (LOG_EVENT_TYPE_END - 1)),
        .entity_version = 1 + i,
        .time_ms = TEST_NOW_MS + (int64_t)i * 977,
        .pack_body = pack_body,
        .body_ctx = b,
    };
    switch (i % 7) {
    case 0: d.entity = (log_entity){.kind = LOG_ENTITY_ACCOUNT, .account_id = i}; break;
    case 1:
        d.entity = (log_entity){.kind = LOG_ENTITY_TRANSFER, .transfer_id = test_id(i)};
        break;
    case 2:
        d.entity = (log_entity){.kind = LOG_ENTITY_ENTITLEMENT, .subject = tally_str_from("u"),
                                .feature = tally_str_from("f")};
        break;
    case 3:
        d.entity = (log_entity){.kind = LOG_ENTITY_DEAD_LETTER,
                                .subscriber = tally_str_from("s"), .letter_seq = i};
        break;
    case 4:
        d.entity = (log_entity){.kind = LOG_ENTITY_WEBHOOK,
                                .webhook_source = tally_str_from("stripe"),
                                .webhook_event_id = tally_str_from("evt_1")};
        break;
    case 5:
        d.entity = (log_entity){.kind = LOG_ENTITY_SUBSCRIBER, .subscriber = tally_str_from("s")};
        break;
    default:
        d.entity = (log_entity){.kind = LOG_ENTITY_ENDPOINT, .endpoint = tally_str_from("e")};
    }
    const char *key = keys[i % 5];
    if (key[0] != '\0') {
        d.consumer = tally_str_from(i % 2 ? "billing" : "a-consumer-name-of-forty-bytes-long-xxxxx");
        d.key = tally_str_from(key);
    }
    if (i % 3 == 0)
        d.correlation = tally_str_from("corr-1");
    *b = (body_ctx){i * 1000003u, d.entity, d.time_ms};
    return d;
}

#define EVENTS 140 /* every type, kind and key shape, several times over */

static void append_events(test_store *ts, unsigned from, unsigned count)
{
    store_txn t;
    ck_assert_int_eq(store_txn_begin(ts->st, NULL, false, &t), TALLY_ok);
    for (unsigned i = from; i < from + count; i++) {
        body_ctx n;
        uint64_t seq;
        log_event_draft d = draft_of(i, &n);
        ck_assert_int_eq(log_append(&t, &d, &seq), TALLY_ok);
    }
    ck_assert_int_eq(store_txn_commit(&t), TALLY_ok);
}

/* The stored bytes at seq (a malloc'd copy). */
static uint8_t *stored_copy(store_txn *t, uint64_t seq, size_t *len)
{
    uint8_t k[8];
    MDB_val v;
    log_seq_key(seq, k);
    ck_assert_int_eq(store_get(t, STORE_DB_LOG, k, 8, &v), TALLY_ok);
    uint8_t *copy = malloc(v.mv_size);
    ck_assert_ptr_nonnull(copy);
    memcpy(copy, v.mv_data, v.mv_size);
    *len = v.mv_size;
    return copy;
}

static bool contains(const uint8_t *hay, size_t hay_len, const void *needle, size_t n)
{
    for (size_t i = 0; i + n <= hay_len; i++)
        if (memcmp(hay + i, needle, n) == 0)
            return true;
    return false;
}

static size_t occurrences(const uint8_t *hay, size_t hay_len, const void *needle, size_t n)
{
    size_t count = 0;
    for (size_t i = 0; i + n <= hay_len; i++)
        count += memcmp(hay + i, needle, n) == 0;
    return count;
}

/* The event id log/log.c gives, computed here from its documented parts. */
static tally_id128 expected_id(store *st, int64_t time_ms, uint64_t seq)
{
    const uint8_t *self = store_instance_id(st)->bytes;
    uint32_t tag = ((uint32_t)(self[13] & 3) << 24) | ((uint32_t)self[14] << 16) |
                   ((uint32_t)self[15] << 8) | self[12];
    tally_id128 id;
    tally_id128_uuidv7_counted(time_ms, tag, seq, &id);
    return id;
}

/* Every event is stored short, and readers get exactly the bytes
 * log_event_encode makes of the same draft, seq, id and prev_hash. */
START_TEST(readers_get_the_encoded_bytes_back)
{
    test_store ts;
    test_store_open(&ts);
    append_events(&ts, 0, EVENTS / 2);
    append_events(&ts, EVENTS / 2, EVENTS - EVENTS / 2);
    store_txn t;
    ck_assert_int_eq(store_txn_begin(ts.st, NULL, true, &t), TALLY_ok);
    uint8_t prev[LOG_HASH_BYTES] = {0};
    size_t stored_total = 0, full_total = 0;
    for (uint64_t seq = 1; seq <= EVENTS; seq++) {
        body_ctx n;
        log_event_draft d = draft_of((unsigned)seq - 1, &n);
        tally_id128 id = expected_id(ts.st, d.time_ms, seq);
        uint8_t want[TALLY_EVENT_SMALL_BYTES_MAX], hash[LOG_HASH_BYTES];
        size_t want_len;
        ck_assert_int_eq(log_event_encode(&d, seq, &id, prev, want, sizeof(want), &want_len, hash),
                         TALLY_ok);
        size_t len, stored_len;
        uint8_t *got = test_event_bytes(&t, seq, &len);
        uint8_t *stored = stored_copy(&t, seq, &stored_len);
        ck_assert_msg(len == want_len && memcmp(got, want, len) == 0, "seq %llu differs",
                      (unsigned long long)seq);
        ck_assert_uint_eq(stored[0], 0x99);
        ck_assert_uint_eq(stored[1], STORED_EVENT_FORMAT);
        ck_assert_uint_eq(stored[2], d.type); /* the type's row number */
        ck_assert(!contains(stored, stored_len, hash, LOG_HASH_BYTES));
        ck_assert(!contains(stored, stored_len, id.bytes, 16));
        ck_assert(contains(stored, stored_len, prev, LOG_HASH_BYTES));
        /* A key of UUID text in lower case is kept as its 16 bytes; any
         * other key (upper case, no dashes, not a UUID) as it is. */
        bool packed = d.key.len == 36 && tally_str_equal(d.key, tally_str_from(uuid_key));
        ck_assert(contains(stored, stored_len, uuid_bytes, 16) == packed);
        if (d.key.len > 0 && !packed)
            ck_assert(contains(stored, stored_len, d.key.ptr, d.key.len));
        ck_assert_uint_lt(stored_len + 18 + 34, len + 1);
        /* the first row's repeats of the entity's id and of time_ms are
         * stored once each (the other rows' are not repeats) */
        uint8_t time_be[8];
        put_u64_be(time_be, (uint64_t)d.time_ms);
        ck_assert_uint_eq(occurrences(stored, stored_len, time_be, 8), 1);
        ck_assert_uint_eq(occurrences(got, len, time_be, 8), 2);
        if (d.entity.kind == LOG_ENTITY_TRANSFER) {
            ck_assert_uint_eq(occurrences(stored, stored_len, d.entity.transfer_id.bytes, 16), 3);
            ck_assert_uint_eq(occurrences(got, len, d.entity.transfer_id.bytes, 16), 4);
        }
        stored_total += stored_len;
        full_total += len;
        memcpy(prev, hash, LOG_HASH_BYTES);
        free(got);
        free(stored);
    }
    /* the last event's hash is the head's */
    log_head head;
    ck_assert_int_eq(log_head_get(&t, &head), TALLY_ok);
    ck_assert_mem_eq(head.hash, prev, LOG_HASH_BYTES);
    ck_assert_uint_lt(stored_total, full_total);
    store_txn_abort(&t);
    test_store_close(&ts);
}
END_TEST

/* log_read, log_event_load and log_page_measure see the same bytes and
 * sizes, in a read transaction and in the writer's before its commit
 * (where the head is the transaction's own). */
START_TEST(every_reader_sees_the_same_events)
{
    test_store ts;
    test_store_open(&ts);
    append_events(&ts, 0, 20);
    store_txn t;
    ck_assert_int_eq(store_txn_begin(ts.st, NULL, false, &t), TALLY_ok);
    body_ctx n;
    uint64_t seq;
    log_event_draft d = draft_of(20, &n);
    ck_assert_int_eq(log_append(&t, &d, &seq), TALLY_ok);
    ck_assert_uint_eq(seq, 21);
    for (int pass = 0; pass < 2; pass++) {
        size_t total = 0;
        for (uint64_t s = 1; s <= 21; s++) {
            msgpack_unpacked up;
            msgpack_unpacked_init(&up);
            log_event ev;
            ck_assert_int_eq(log_event_load(&t, s, &up, &ev), TALLY_ok);
            ck_assert_uint_eq(ev.seq, s);
            total += ev.raw_len;
            if (s == 21) {
                log_head head;
                ck_assert_int_eq(log_head_get(&t, &head), TALLY_ok);
                ck_assert_mem_eq(ev.hash, head.hash, LOG_HASH_BYTES);
            }
            msgpack_unpacked_destroy(&up);
        }
        uint64_t count;
        size_t bytes;
        ck_assert_int_eq(log_page_measure(&t, 1, 100, SIZE_MAX, &count, &bytes), TALLY_ok);
        ck_assert_uint_eq(count, 21);
        ck_assert_uint_eq(bytes, total);
        if (pass == 0) { /* again after the commit, in a read transaction */
            ck_assert_int_eq(store_txn_commit(&t), TALLY_ok);
            ck_assert_int_eq(store_txn_begin(ts.st, NULL, true, &t), TALLY_ok);
        }
    }
    store_txn_abort(&t);
    test_store_close(&ts);
}
END_TEST

typedef struct chain_walk {
    log_chain chain;
    unsigned faults;
    uint64_t events;
} chain_walk;

static int walk_one(uint64_t seq, const void *bytes, size_t len, void *ctx)
{
    chain_walk *w = ctx;
    msgpack_unpacked up;
    msgpack_unpacked_init(&up);
    log_event ev;
    bool ok = log_event_decode(bytes, len, &up, &ev) == TALLY_ok;
    w->faults |= log_chain_step(&w->chain, seq, ok ? &ev : NULL);
    msgpack_unpacked_destroy(&up);
    w->events++;
    return 0;
}

static unsigned chain_faults(test_store *ts, uint64_t *events)
{
    store_txn t;
    ck_assert_int_eq(store_txn_begin(ts->st, NULL, true, &t), TALLY_ok);
    static const uint8_t zero[LOG_HASH_BYTES];
    chain_walk w = {.faults = 0};
    log_chain_start(&w.chain, 1, zero);
    ck_assert_int_eq(log_read(&t, 1, UINT64_MAX, walk_one, &w), TALLY_ok);
    log_head head;
    ck_assert_int_eq(log_head_get(&t, &head), TALLY_ok);
    w.faults |= log_chain_end(&w.chain, &head);
    store_txn_abort(&t);
    *events = w.events;
    return w.faults;
}

static void no_edit(uint8_t *ev, size_t len) { (void)ev, (void)len; }

/* A store upgraded from before format 13 holds format 2 events, then
 * short ones: the chain runs across them, the short event after a format 2
 * one chains to its stored hash. */
START_TEST(format_2_events_then_short_ones_chain)
{
    test_store ts;
    test_store_open(&ts);
    append_events(&ts, 0, 6);
    for (uint64_t seq = 1; seq <= 6; seq++)
        test_event_rewrite(ts.st, seq, no_edit); /* stored back in format 2 */
    append_events(&ts, 6, 6);
    store_txn t;
    ck_assert_int_eq(store_txn_begin(ts.st, NULL, true, &t), TALLY_ok);
    for (uint64_t seq = 1; seq <= 12; seq++) {
        size_t len;
        uint8_t *stored = stored_copy(&t, seq, &len);
        ck_assert_uint_eq(stored[0], (seq <= 6 ? 0x9c : 0x99));
        free(stored);
    }
    store_txn_abort(&t);
    uint64_t events;
    ck_assert_uint_eq(chain_faults(&ts, &events), 0);
    ck_assert_uint_eq(events, 12);
    test_store_close(&ts);
}
END_TEST

/* Any one byte of a stored short event changed: the event, or the one
 * before it (whose hash its prev_hash holds), no longer passes. */
START_TEST(any_damage_to_a_stored_event_is_found)
{
    test_store ts;
    test_store_open(&ts);
    append_events(&ts, 0, 5);
    const uint64_t victim = 3;
    store_txn t;
    ck_assert_int_eq(store_txn_begin(ts.st, NULL, true, &t), TALLY_ok);
    size_t len;
    uint8_t *original = stored_copy(&t, victim, &len);
    store_txn_abort(&t);
    uint8_t k[8];
    log_seq_key(victim, k);
    for (size_t i = 0; i < len; i++) {
        for (int bit = 0; bit < 8; bit += 7) {
            uint8_t *bad = malloc(len);
            ck_assert_ptr_nonnull(bad);
            memcpy(bad, original, len);
            bad[i] ^= (uint8_t)(1u << bit);
            ck_assert_int_eq(store_txn_begin(ts.st, NULL, false, &t), TALLY_ok);
            ck_assert_int_eq(store_put(&t, STORE_DB_LOG, k, 8, bad, len, 0), TALLY_ok);
            ck_assert_int_eq(store_txn_commit(&t), TALLY_ok);
            uint64_t events;
            ck_assert_msg(chain_faults(&ts, &events) != 0, "byte %zu bit %d not found", i, bit);
            ck_assert_uint_eq(events, 5);
            free(bad);
        }
    }
    ck_assert_int_eq(store_txn_begin(ts.st, NULL, false, &t), TALLY_ok);
    ck_assert_int_eq(store_put(&t, STORE_DB_LOG, k, 8, original, len, 0), TALLY_ok);
    ck_assert_int_eq(store_txn_commit(&t), TALLY_ok);
    uint64_t events;
    ck_assert_uint_eq(chain_faults(&ts, &events), 0);
    free(original);
    test_store_close(&ts);
}
END_TEST

/* An event whose next one is gone (a damaged log) has no hash to take:
 * it gets the hash of its own bytes, and the chain's checks report the
 * gap, where the damage is (as for a log of format 2). */
START_TEST(the_gap_after_an_event_is_what_is_found)
{
    test_store ts;
    test_store_open(&ts);
    append_events(&ts, 0, 5);
    store_txn t;
    ck_assert_int_eq(store_txn_begin(ts.st, NULL, false, &t), TALLY_ok);
    uint8_t k[8];
    log_seq_key(4, k);
    ck_assert_int_eq(store_del(&t, STORE_DB_LOG, k, 8), TALLY_ok);
    ck_assert_int_eq(store_txn_commit(&t), TALLY_ok);
    ck_assert_int_eq(store_txn_begin(ts.st, NULL, true, &t), TALLY_ok);
    msgpack_unpacked up;
    msgpack_unpacked_init(&up);
    log_event ev;
    ck_assert_int_eq(log_event_load(&t, 3, &up, &ev), TALLY_ok);
    ck_assert_int_eq(log_event_load(&t, 2, &up, &ev), TALLY_ok);
    ck_assert_int_eq(log_event_load(&t, 5, &up, &ev), TALLY_ok); /* the head's */
    ck_assert_int_eq(log_event_load(&t, 4, &up, &ev), TALLY_not_found);
    msgpack_unpacked_destroy(&up);
    store_txn_abort(&t);
    uint64_t events;
    ck_assert_uint_eq(chain_faults(&ts, &events), LOG_CHAIN_GAP | LOG_CHAIN_LINK);
    test_store_close(&ts);
}
END_TEST

/* Truncations and garbage: expansion gives 0 or bytes within its bound,
 * and never reads or writes outside (the sanitizers and valgrind watch). */
START_TEST(expansion_of_any_bytes_is_bounded)
{
    test_store ts;
    test_store_open(&ts);
    append_events(&ts, 0, EVENTS);
    store_txn t;
    ck_assert_int_eq(store_txn_begin(ts.st, NULL, true, &t), TALLY_ok);
    static const uint8_t hash[LOG_HASH_BYTES];
    uint64_t state = 0x9e3779b97f4a7c15u;
    for (uint64_t seq = 1; seq <= EVENTS; seq++) {
        size_t len;
        uint8_t *stored = stored_copy(&t, seq, &len);
        for (size_t cut = 0; cut <= len; cut++) {
            uint8_t *part = malloc(cut ? cut : 1);
            ck_assert_ptr_nonnull(part);
            memcpy(part, stored, cut);
            for (int round = 0; round < 3; round++) {
                size_t cap = cut + STORED_EVENT_GROWTH_MAX;
                uint8_t *out = malloc(cap);
                ck_assert_ptr_nonnull(out);
                size_t n = stored_event_expand(part, cut, seq, 7, hash, out, cap);
                ck_assert(n == 0 || (cut == len && round == 0) || n <= cap);
                if (cut == len && round == 0)
                    ck_assert_uint_gt(n, len);
                free(out);
                uint8_t prev[LOG_HASH_BYTES];
                (void)stored_event_prev_hash(part, cut, prev);
                if (cut > 0) { /* scramble one byte for the next round */
                    state ^= state << 13, state ^= state >> 7, state ^= state << 17;
                    part[state % cut] = (uint8_t)(state >> 32);
                }
            }
            free(part);
        }
        free(stored);
    }
    store_txn_abort(&t);
    test_store_close(&ts);
}
END_TEST

#define TIMEOUT_S 120

static Suite *stored_event_suite(void)
{
    const test_row tests[] = {
        {"round_trip", readers_get_the_encoded_bytes_back, TIMEOUT_S},
        {"readers", every_reader_sees_the_same_events, TIMEOUT_S},
        {"mixed", format_2_events_then_short_ones_chain, TIMEOUT_S},
        {"damage", any_damage_to_a_stored_event_is_found, TIMEOUT_S},
        {"gap", the_gap_after_an_event_is_what_is_found, TIMEOUT_S},
        {"garbage", expansion_of_any_bytes_is_bounded, TIMEOUT_S},
    };
    return test_suite_of_rows("stored_event", TEST_ROWS(tests));
}

int main(void) { return test_run_suite(stored_event_suite()); }
