/*
 * check_subscriber_partition.c — ordered partitions of durable
 * subscribers (log/subscriber_partition.c): how instances share the
 * partitions as they join and leave, the record's checks, a store
 * without partitions records, a partitioned fetch that hands out an
 * entity's next event only once the one before it is acknowledged, and a
 * filter that holds within the partitions.
 */
#include "log/log.h"
#include "log/subscriber.h"
#include "log/subscriber_partition.h"
#include "tests/support/test_support.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NAME tally_str_from("sub-p")
#define LEASE_MS 1000

static test_store ts;

static void setup(void) { test_store_open(&ts); }

static void teardown(void)
{
    test_assert_invariants(&ts);
    test_store_close(&ts);
}

static unsigned held(const sub_partitions *g, const char *id, int64_t now_ms)
{
    unsigned n = 0;
    for (uint32_t i = 0; i < g->count; i++)
        n += sub_partition_held(g, i, tally_str_from(id), now_ms);
    return n;
}

START_TEST(instances_share_the_partitions_as_they_join_and_leave)
{
    static sub_partitions g = {.count = 4};
    sub_partitions_claim(&g, tally_str_from("a"), 0, LEASE_MS);
    ck_assert_uint_eq(held(&g, "a", 0), 4); /* alone: all of them */
    sub_partitions_claim(&g, tally_str_from("b"), 10, LEASE_MS);
    ck_assert_uint_eq(held(&g, "b", 10), 0); /* none free yet */
    sub_partitions_claim(&g, tally_str_from("a"), 20, LEASE_MS);
    ck_assert_uint_eq(held(&g, "a", 20), 2); /* its share of two: the others freed */
    sub_partitions_claim(&g, tally_str_from("b"), 30, LEASE_MS);
    ck_assert_uint_eq(held(&g, "b", 30), 2);
    ck_assert(sub_partition_held(&g, 0, tally_str_from("a"), 30));
    ck_assert(sub_partition_held(&g, 3, tally_str_from("b"), 30));
    ck_assert_int_eq(sub_partitions_check(&g), TALLY_ok);
    /* a stops fetching: once its lease and membership end, b takes all */
    sub_partitions_claim(&g, tally_str_from("b"), 20 + LEASE_MS - 1, LEASE_MS);
    ck_assert_uint_eq(held(&g, "b", 20 + LEASE_MS - 1), 2);
    sub_partitions_claim(&g, tally_str_from("b"), 20 + LEASE_MS, LEASE_MS);
    ck_assert_uint_eq(held(&g, "b", 20 + LEASE_MS), 4);
    ck_assert_uint_eq(g.member_count, 1);
    /* three members: shares of 2, 1 and 1 in id order, whoever came first */
    int64_t t = 30 + LEASE_MS;
    sub_partitions_claim(&g, tally_str_from("c"), t, LEASE_MS);
    sub_partitions_claim(&g, tally_str_from("a"), t + 1, LEASE_MS);
    for (int round = 0; round < 2; round++) {
        sub_partitions_claim(&g, tally_str_from("b"), t + 2, LEASE_MS);
        sub_partitions_claim(&g, tally_str_from("c"), t + 3, LEASE_MS);
        sub_partitions_claim(&g, tally_str_from("a"), t + 4, LEASE_MS);
    }
    ck_assert_uint_eq(held(&g, "a", t + 4), 2);
    ck_assert_uint_eq(held(&g, "b", t + 4), 1);
    ck_assert_uint_eq(held(&g, "c", t + 4), 1);
}
END_TEST

START_TEST(entities_hash_stably)
{
    log_entity a = {.kind = LOG_ENTITY_ACCOUNT, .account_id = 7};
    log_entity b = {.kind = LOG_ENTITY_ENTITLEMENT, .subject = tally_str_from("u"),
                    .feature = tally_str_from("pro")};
    /* FNV-1a 64 over the kind byte and the identity: fixed for ever */
    ck_assert_uint_eq(sub_entity_hash(&a), sub_entity_hash(&a));
    ck_assert_uint_ne(sub_entity_hash(&a), sub_entity_hash(&b));
    log_entity a2 = a;
    a2.account_id = 8;
    ck_assert_uint_ne(sub_entity_hash(&a), sub_entity_hash(&a2));
}
END_TEST

static store_txn begin(void)
{
    store_txn t;
    ck_assert_int_eq(store_txn_begin(ts.st, NULL, false, &t), TALLY_ok);
    return t;
}

/* A subscriber of partitions; glob (NULL: none) its filter_subject. */
static void create_filtered(uint32_t partitions, const char *glob)
{
    store_txn t = begin();
    sub_config cfg;
    sub_config_default(&cfg);
    cfg.ack_wait_ms = LEASE_MS;
    if (glob)
        snprintf(cfg.filter.subject_glob, sizeof(cfg.filter.subject_glob), "%s", glob);
    sub_start start = {SUB_START_BEGINNING, 0, 0};
    bool created;
    sub_state st;
    ck_assert_int_eq(sub_create(&t, NAME, &start, &cfg, 0, &created, &st), TALLY_ok);
    ck_assert_int_eq(sub_partitions_create(&t, NAME, partitions, created), TALLY_ok);
    ck_assert_int_eq(store_txn_commit(&t), TALLY_ok);
}

static void create(uint32_t partitions) { create_filtered(partitions, NULL); }

static uint32_t fetch(const char *instance, int64_t now_ms, sub_delivery *out, int expect_rc)
{
    store_txn t = begin();
    uint32_t count;
    int64_t next_due;
    sub_state st;
    int rc = sub_fetch(&t, NAME, 100, false, tally_str_from(instance), now_ms, out, &count,
                       &next_due, &st);
    ck_assert_int_eq(rc, expect_rc);
    if (rc == TALLY_ok)
        ck_assert_int_eq(store_txn_commit(&t), TALLY_ok);
    else
        store_txn_abort(&t);
    return count;
}

static void ack(const sub_delivery *d, uint32_t count)
{
    uint64_t done[TALLY_SUB_FETCH_EVENTS_MAX];
    for (uint32_t i = 0; i < count; i++)
        done[i] = d[i].seq;
    store_txn t = begin();
    uint32_t acked;
    sub_state st;
    ck_assert_int_eq(sub_ack(&t, NAME, 0, done, count, 0, &acked, &st), TALLY_ok);
    ck_assert_uint_eq(acked, count);
    ck_assert_int_eq(store_txn_commit(&t), TALLY_ok);
}

/* Two entitlements, three events each, interleaved: seqs 1..6 are
 * (u0 v1) (u1 v1) (u0 v2) (u1 v2) (u0 v3) (u1 v3). */
static void entitlement_events(void)
{
    for (int v = 0; v < 3; v++)
        for (int e = 0; e < 2; e++) {
            char subject[8];
            snprintf(subject, sizeof(subject), "u%d", e);
            ledger_command c = v == 0 ? test_cmd_grant(subject, "pro", 4102444800000)
                                      : test_cmd_extend(subject, "pro", 4102444800000 + v);
            ck_assert_int_eq(test_apply(&ts, "t", NULL, &c).code, TALLY_ok);
        }
}

START_TEST(an_entity_waits_for_its_event_in_flight)
{
    entitlement_events();
    create(2);
    static sub_delivery d[TALLY_SUB_FETCH_EVENTS_MAX];
    /* alone, "a" holds both partitions: one event per entity at a time */
    ck_assert_uint_eq(fetch("a", 0, d, TALLY_ok), 2);
    ck_assert_uint_eq(d[0].seq, 1);
    ck_assert_uint_eq(d[1].seq, 2);
    ck_assert_uint_eq(fetch("a", 1, d, TALLY_ok), 0); /* 3..6 wait for 1 and 2 */
    d[0].seq = 1;
    ack(d, 1);
    ck_assert_uint_eq(fetch("a", 2, d, TALLY_ok), 1);
    ck_assert_uint_eq(d[0].seq, 3); /* u0's next; u1's still waits for 2 */
    /* a lease that runs out gives the event again, to whoever holds its
     * partition then, before the entity's next one */
    ck_assert_uint_eq(fetch("a", 2 + LEASE_MS, d, TALLY_ok), 2);
    ck_assert_uint_eq(d[0].seq, 2);
    ck_assert_uint_eq(d[0].attempt, 2);
    ck_assert_uint_eq(d[1].seq, 3);
    ack(d, 2);
    ck_assert_uint_eq(fetch("a", 3 + LEASE_MS, d, TALLY_ok), 2);
    ck_assert_uint_eq(d[0].seq, 4);
    ck_assert_uint_eq(d[1].seq, 5);
    /* without an instance, nothing: which one would hold what? */
    store_txn t = begin();
    uint32_t count;
    int64_t next_due;
    sub_state st;
    ck_assert_int_eq(sub_fetch(&t, NAME, 10, true, (tally_str){NULL, 0}, 4 + LEASE_MS, d,
                               &count, &next_due, &st),
                     TALLY_missing_field);
    ck_assert_uint_eq(t.writes, 0); /* a refusal writes nothing, restart or not */
    store_txn_abort(&t);
    /* deleting the subscriber removes its partitions record too */
    t = begin();
    ck_assert_int_eq(sub_delete(&t, NAME), TALLY_ok);
    sub_partitions *g = malloc(sizeof(*g));
    ck_assert_int_eq(sub_partitions_load(&t, NAME, g), TALLY_ok);
    ck_assert_uint_eq(g->count, 1);
    free(g);
    ck_assert_int_eq(store_txn_commit(&t), TALLY_ok);
}
END_TEST

static sub_state state_now(void)
{
    store_txn t = begin();
    sub_state st;
    ck_assert_int_eq(sub_get(&t, NAME, &st), TALLY_ok);
    store_txn_abort(&t);
    return st;
}

/* A filter holds within the partitions: the events it does not pass are
 * never delivered nor queued for a holder, the delivered seq moves past
 * them, and those that pass keep their entity's order. */
START_TEST(a_filter_holds_within_partitions)
{
    entitlement_events();
    create_filtered(2, "u0"); /* seqs 1, 3, 5 pass; u1's 2, 4, 6 do not */
    static sub_delivery d[TALLY_SUB_FETCH_EVENTS_MAX];
    ck_assert_uint_eq(fetch("a", 0, d, TALLY_ok), 1);
    ck_assert_uint_eq(d[0].seq, 1);
    sub_state st = state_now();
    ck_assert_uint_eq(st.delivered_seq, 6);
    ck_assert_uint_eq(st.in_flight, 3); /* 1 delivered, 3 and 5 held back: none of u1's */
    for (uint64_t want = 3; want <= 5; want += 2) {
        ack(d, 1);
        ck_assert_uint_eq(fetch("a", (int64_t)want, d, TALLY_ok), 1);
        ck_assert_uint_eq(d[0].seq, want);
    }
    ack(d, 1);
    ck_assert_uint_eq(fetch("a", 10, d, TALLY_ok), 0);
    st = state_now();
    ck_assert_uint_eq(st.in_flight, 0);
    ck_assert_uint_eq(st.ack_floor, 6); /* acked past the events the filter skips */
}
END_TEST

/* The fetch reads each event's entity with log_event_peek_in: the same
 * entity as log_event_decode, without the hash check (a wrong hash byte
 * still peeks; the full decode refuses it). */
START_TEST(peek_reads_the_entity_without_the_hash)
{
    entitlement_events();
    store_txn t = begin();
    size_t len;
    uint8_t *copy = test_event_bytes(&t, 2, &len);
    store_txn_abort(&t);
    msgpack_zone *zone = msgpack_zone_new(MSGPACK_ZONE_CHUNK_SIZE);
    msgpack_object root;
    log_event peeked, decoded;
    ck_assert_int_eq(log_event_peek_in(copy, len, zone, &root, &peeked), TALLY_ok);
    ck_assert_int_eq(peeked.entity.kind, LOG_ENTITY_ENTITLEMENT);
    ck_assert(tally_str_equal(peeked.entity.subject, tally_str_from("u1")));
    msgpack_zone_clear(zone);
    ck_assert_int_eq(log_event_decode_in(copy, len, zone, &root, &decoded), TALLY_ok);
    ck_assert_uint_eq(sub_entity_hash(&peeked.entity), sub_entity_hash(&decoded.entity));
    copy[len - 1] ^= 1; /* the last byte of the declared hash */
    msgpack_zone_clear(zone);
    ck_assert_int_eq(log_event_decode_in(copy, len, zone, &root, &decoded),
                     TALLY_corrupt_record);
    msgpack_zone_clear(zone);
    ck_assert_int_eq(log_event_peek_in(copy, len, zone, &root, &peeked), TALLY_ok);
    msgpack_zone_free(zone);
    free(copy);
}
END_TEST

START_TEST(without_a_partitions_record_delivery_is_as_before)
{
    entitlement_events();
    create(1);
    store_txn t = begin();
    sub_partitions *g = malloc(sizeof(*g));
    ck_assert_int_eq(sub_partitions_load(&t, NAME, g), TALLY_ok);
    ck_assert_uint_eq(g->count, 1);
    free(g);
    store_txn_abort(&t);
    static sub_delivery d[TALLY_SUB_FETCH_EVENTS_MAX];
    ck_assert_uint_eq(fetch("a", 0, d, TALLY_ok), 6); /* every event, an entity's too */
    t = begin();
    ck_assert_int_eq(sub_partitions_create(&t, NAME, 3, false),
                     TALLY_subscriber_exists_with_different_config);
    ck_assert_int_eq(sub_partitions_create(&t, NAME, 1, false), TALLY_ok);
    store_txn_abort(&t);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("subscriber_partition");
    TCase *tc = tcase_create("partition");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, instances_share_the_partitions_as_they_join_and_leave);
    tcase_add_test(tc, entities_hash_stably);
    tcase_add_test(tc, an_entity_waits_for_its_event_in_flight);
    tcase_add_test(tc, a_filter_holds_within_partitions);
    tcase_add_test(tc, without_a_partitions_record_delivery_is_as_before);
    tcase_add_test(tc, peek_reads_the_entity_without_the_hash);
    suite_add_tcase(s, tc);
    return test_run_suite(s);
}
