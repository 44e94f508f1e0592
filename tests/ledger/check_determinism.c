/*
 * check_determinism.c — apply is a function of the store and of the
 * commands, with the time the writer gave each (docs/DESIGN.md, "A
 * deterministic apply"): one recorded stream of steps, played into two
 * empty stores of the same identity (store_options.instance_id) at
 * different wall-clock times, leaves every database byte-identical (entry
 * counts and a SHA-256 of every key and value, meta included) and the same
 * head hash. The stream has every command kind, holds that time out,
 * entitlements that expire, a chain, a webhook delivery, refusals and
 * replays, the sweeps, retention of the inbox, the log and dead letters,
 * and subscriber operations. A random draw or a clock read inside apply
 * (an event id from getrandom, a timestamp from the clock) makes the
 * stores differ and the test fail; a store of another identity differs
 * too (its event ids carry it), which the test checks as well.
 */
#include "ledger/retention.h"
#include "log/subscriber.h"
#include "log/subscriber_partition.h"
#include "tests/support/test_support.h"

#include <stdio.h>
#include <string.h>
#include <time.h>

#define T0 TEST_NOW_MS
#define SECOND INT64_C(1000)
#define NAME tally_str_from("reader")

/* One transaction at now_ms: the writer's sweep of due holds and
 * entitlements, then retention, which runs when the store says it is due
 * (at most once a second), as net/engine/writer.c begins each group. */
static void sweep_and_retain(test_store *ts)
{
    store_txn t;
    ck_assert_int_eq(store_txn_begin(ts->st, NULL, false, &t), TALLY_ok);
    ck_assert_int_eq(ledger_sweep(&t, ts->now_ms, 0, NULL, NULL), TALLY_ok);
    ledger_retention opt = {.inbox_window_ms = 30 * SECOND, .log_age_ms = 60 * SECOND,
                            .batch = 0, .dlq_age_ms = 20 * SECOND};
    ledger_retention_work work;
    bool ran;
    ck_assert_int_eq(ledger_retention_run(&t, ts->now_ms, SECOND, &opt, &work, &ran), TALLY_ok);
    ck_assert_int_eq(store_txn_commit(&t), TALLY_ok);
}

static void subscriber_steps(test_store *ts, int phase)
{
    store_txn t;
    ck_assert_int_eq(store_txn_begin(ts->st, NULL, false, &t), TALLY_ok);
    sub_delivery d[8];
    uint32_t count = 0, n = 0;
    int64_t next_due = 0, after_ms = 0;
    sub_state st;
    if (phase == 0) {
        sub_config cfg;
        sub_config_default(&cfg);
        cfg.max_deliver = 2;
        cfg.ack_wait_ms = 5000;
        sub_start start = {.kind = SUB_START_BEGINNING};
        bool created = false;
        ck_assert_int_eq(sub_create(&t, NAME, &start, &cfg, ts->now_ms, &created, &st), TALLY_ok);
        ck_assert(created);
        ck_assert_int_eq(sub_fetch(&t, NAME, 4, false, tally_str_from("i-1"), ts->now_ms, d,
                                   &count, &next_due, &st),
                         TALLY_ok);
        ck_assert_uint_eq(count, 4);
        uint64_t done[] = {d[2].seq};
        ck_assert_int_eq(sub_ack(&t, NAME, d[0].seq, done, 1, ts->now_ms, &n, &st), TALLY_ok);
        ck_assert_int_eq(sub_nak(&t, NAME, d[1].seq, true, 1500, tally_str_from("busy"),
                                 ts->now_ms, &n, &after_ms),
                         TALLY_ok);
        ck_assert_int_eq(sub_park(&t, NAME, d[3].seq, tally_str_from("bad amount"), ts->now_ms,
                                  &st),
                         TALLY_ok);
    } else {
        /* the nak's backoff and the ack wait have passed: redeliveries */
        ck_assert_int_eq(sub_fetch(&t, NAME, 8, false, tally_str_from("i-2"), ts->now_ms, d,
                                   &count, &next_due, &st),
                         TALLY_ok);
        ck_assert_uint_gt(count, 0);
        ck_assert_int_eq(sub_ack(&t, NAME, d[0].seq, NULL, 0, ts->now_ms, &n, &st), TALLY_ok);
        uint32_t replaying = 0;
        ck_assert_int_eq(sub_dlq_replay(&t, NAME, false, 0, ts->now_ms, &replaying), TALLY_ok);
    }
    ck_assert_int_eq(store_txn_commit(&t), TALLY_ok);
}

/* A subscriber with partitions: two instances share them (their leases,
 * membership and queued events are stored), then one takes over. */
static void partition_steps(test_store *ts, int phase)
{
    static const tally_str parts = {"parts", 5};
    store_txn t;
    ck_assert_int_eq(store_txn_begin(ts->st, NULL, false, &t), TALLY_ok);
    sub_delivery d[8];
    uint32_t count = 0, n = 0;
    int64_t next_due = 0, after_ms = 0;
    sub_state st;
    if (phase == 0) {
        sub_config cfg;
        sub_config_default(&cfg);
        cfg.ack_wait_ms = 5000;
        sub_start start = {.kind = SUB_START_BEGINNING};
        bool created = false;
        ck_assert_int_eq(sub_create(&t, parts, &start, &cfg, ts->now_ms, &created, &st), TALLY_ok);
        ck_assert_int_eq(sub_partitions_create(&t, parts, 3, created), TALLY_ok);
        ck_assert_int_eq(sub_fetch(&t, parts, 2, false, tally_str_from("p-1"), ts->now_ms, d,
                                   &count, &next_due, &st),
                         TALLY_ok);
        ck_assert_int_eq(sub_fetch(&t, parts, 2, false, tally_str_from("p-2"), ts->now_ms, d,
                                   &count, &next_due, &st),
                         TALLY_ok);
        ck_assert_int_eq(sub_fetch(&t, parts, 2, false, tally_str_from("p-1"), ts->now_ms, d,
                                   &count, &next_due, &st),
                         TALLY_ok);
    } else {
        /* p-1's leases ran out: p-2 takes its partitions and events */
        ck_assert_int_eq(sub_fetch(&t, parts, 8, false, tally_str_from("p-2"), ts->now_ms, d,
                                   &count, &next_due, &st),
                         TALLY_ok);
        ck_assert_uint_gt(count, 0);
        ck_assert_int_eq(sub_progress(&t, parts, &d[0].seq, 1, tally_str_from("p-2"),
                                      ts->now_ms, &n, &after_ms),
                         TALLY_ok);
    }
    ck_assert_int_eq(store_txn_commit(&t), TALLY_ok);
}

static ledger_command chain_of(const ledger_command *members, uint32_t count)
{
    ledger_command c = {.kind = LEDGER_CHAIN};
    c.u.chain = (ledger_chain){.members = members, .count = count};
    return c;
}

static ledger_command delivery(const char *id, const char *body)
{
    ledger_command c = {.kind = LEDGER_WEBHOOK_RECEIVE};
    c.u.webhook = (ledger_webhook){tally_str_from("stripe"), tally_str_from(id),
                                   tally_str_from("charge.succeeded"), T0 / SECOND,
                                   tally_str_from(body)};
    return c;
}

/* The recorded stream: each step's time is the one the writer gave it. */
static void play(test_store *ts)
{
    ts->now_ms = T0;
    for (uint64_t id = 1; id <= 4; id++) {
        ledger_command open = test_cmd_open(id, 1, 0);
        char key[16];
        snprintf(key, sizeof(key), "open-%llu", (unsigned long long)id);
        /* imported history first: accounts 1 and 2 and a transfer of
         * the past (the mark of the last import in meta) */
        if (id <= 2) {
            open.u.account_open.flags |= LEDGER_ACCOUNT_IMPORTED;
            open.u.account_open.timestamp_ms = T0 - 1000 + (int64_t)id;
        }
        ck_assert_int_eq(test_apply(ts, "setup", key, &open).code, TALLY_ok);
        if (id == 2) {
            ledger_command old = test_cmd_transfer(40, 1, 2, 9);
            old.u.transfer.flags = LEDGER_TRANSFER_IMPORTED;
            old.u.transfer.timestamp_ms = T0 - 500;
            ck_assert_int_eq(test_apply(ts, "setup", "import-40", &old).code, TALLY_ok);
        }
    }
    ts->now_ms += 10;
    ledger_command t1 = test_cmd_transfer(1, 1, 2, 500);
    ck_assert_int_eq(test_apply(ts, "app", "t1", &t1).code, TALLY_ok);
    ck_assert_int_eq(test_apply(ts, "app", "t1", &t1).code, TALLY_ok); /* a replay */
    ledger_command clash = test_cmd_transfer(2, 1, 2, 7);
    ck_assert_int_eq(test_apply(ts, "app", "t1", &clash).code, TALLY_idempotency_key_reused);
    ledger_command self = test_cmd_transfer(3, 1, 1, 5);
    ck_assert_int_ne(test_apply(ts, "app", "t3", &self).code, TALLY_ok); /* refused, stored */
    ts->now_ms += 10;
    ledger_command h1 = test_cmd_hold(10, 2, 3, 100, 2); /* times out after 2 s */
    ledger_command h2 = test_cmd_hold(11, 2, 3, 50, 0);
    ledger_command h3 = test_cmd_hold(12, 2, 4, 30, 0);
    ck_assert_int_eq(test_apply(ts, "app", "h1", &h1).code, TALLY_ok);
    ck_assert_int_eq(test_apply(ts, "app", "h2", &h2).code, TALLY_ok);
    ck_assert_int_eq(test_apply(ts, "app", "h3", &h3).code, TALLY_ok);
    ledger_command post = test_cmd_post(11, 40);
    ledger_command vd = test_cmd_void(12);
    ck_assert_int_eq(test_apply(ts, "app", "p11", &post).code, TALLY_ok);
    ck_assert_int_eq(test_apply(ts, "app", "v12", &vd).code, TALLY_ok);
    ledger_command g1 = test_cmd_grant("user-1", "pro", T0 + 5 * SECOND);
    ledger_command g2 = test_cmd_grant("user-2", "pro", T0 + 50 * SECOND);
    ck_assert_int_eq(test_apply(ts, "app", "g1", &g1).code, TALLY_ok);
    ck_assert_int_eq(test_apply(ts, "app", "g2", &g2).code, TALLY_ok);
    ledger_command ext = test_cmd_extend("user-2", "pro", T0 + 90 * SECOND);
    ck_assert_int_eq(test_apply(ts, "app", "x2", &ext).code, TALLY_ok);
    ledger_command members[] = {test_cmd_transfer(20, 1, 4, 9), test_cmd_grant("user-3", "api", 0)};
    ledger_command chain = chain_of(members, 2);
    ck_assert_int_eq(test_apply(ts, "app", "c1", &chain).code, TALLY_ok);
    ledger_command hook = delivery("evt_1", "{\"id\":\"evt_1\",\"amount\":7}");
    ck_assert_int_eq(test_apply(ts, "webhook:stripe", "evt_1", &hook).code, TALLY_ok);
    subscriber_steps(ts, 0);
    partition_steps(ts, 0);

    ts->now_ms = T0 + 3 * SECOND; /* h1 times out */
    sweep_and_retain(ts);
    ledger_command late = test_cmd_transfer(30, 3, 1, 1);
    ck_assert_int_eq(test_apply(ts, "app", "t30", &late).code, TALLY_ok);
    /* user data (indexed) and a reversal of part of t1 */
    ledger_command tagged = test_cmd_transfer(32, 1, 3, 4);
    tagged.u.transfer.user_data.user_data_64 = 77;
    tagged.u.transfer.user_data.user_data_128.bytes[3] = 1;
    ck_assert_int_eq(test_apply(ts, "app", "t32", &tagged).code, TALLY_ok);
    ledger_command rev = {.kind = LEDGER_REVERSE};
    rev.u.reverse.id = test_id(33);
    rev.u.reverse.reverses = test_id(1);
    rev.u.reverse.amount = 100;
    rev.u.reverse.amount_given = true;
    ck_assert_int_eq(test_apply(ts, "app", "rev1", &rev).code, TALLY_ok);
    /* a balancing transfer and a closing hold, voided (the account reopens) */
    ledger_command bal = test_cmd_transfer(34, 3, 4, 1000000);
    bal.u.transfer.flags = LEDGER_TRANSFER_BALANCING_DEBIT;
    ck_assert_int_eq(test_apply(ts, "app", "bal", &bal).code, TALLY_ok);
    ledger_command closing = test_cmd_hold(35, 4, 1, 1, 0);
    closing.u.transfer.flags |= LEDGER_TRANSFER_CLOSING_DEBIT;
    ck_assert_int_eq(test_apply(ts, "app", "close4", &closing).code, TALLY_ok);
    ledger_command reopen = test_cmd_void(35);
    ck_assert_int_eq(test_apply(ts, "app", "reopen4", &reopen).code, TALLY_ok);

    ts->now_ms = T0 + 6 * SECOND; /* g1 expires; redeliveries are due */
    sweep_and_retain(ts);
    subscriber_steps(ts, 1);
    partition_steps(ts, 1);
    ledger_command rv = test_cmd_revoke("user-3", "api");
    ck_assert_int_eq(test_apply(ts, "app", "r3", &rv).code, TALLY_ok);

    /* retention: the inbox window, the log age and the dead letters' age
     * have passed for the first commands */
    ts->now_ms = T0 + 70 * SECOND;
    sweep_and_retain(ts);
    ledger_command after = test_cmd_transfer(31, 4, 1, 2);
    ck_assert_int_eq(test_apply(ts, "app", "t31", &after).code, TALLY_ok);
    ts->now_ms = T0 + 100 * SECOND; /* user-2's extension ends */
    sweep_and_retain(ts);
}

static void assert_same(test_store *a, test_store *b)
{
    test_store_digest da = test_store_digest_take(a->st), db = test_store_digest_take(b->st);
    for (int i = 0; i < STORE_DB_COUNT; i++) {
        ck_assert_msg(da.entries[i] == db.entries[i], "database %d: %llu entries vs %llu", i,
                      (unsigned long long)da.entries[i], (unsigned long long)db.entries[i]);
        ck_assert_msg(memcmp(da.sha256[i], db.sha256[i], 32) == 0,
                      "database %d differs between the two stores", i);
    }
    log_head ha = test_head(a), hb = test_head(b);
    ck_assert_uint_eq(ha.seq, hb.seq);
    ck_assert_mem_eq(ha.hash, hb.hash, 32);
}

/* Wall-clock time moves on between the two plays (by at least 2 ms), so
 * that a clock read inside apply could not give both the same value. */
static void let_the_clock_move(void)
{
    struct timespec now, start;
    clock_gettime(CLOCK_REALTIME, &start);
    do
        clock_gettime(CLOCK_REALTIME, &now);
    while ((now.tv_sec - start.tv_sec) * 1000 + (now.tv_nsec - start.tv_nsec) / 1000000 < 2);
}

START_TEST(same_stream_same_bytes)
{
    test_store a, b;
    test_store_open(&a);
    play(&a);
    ck_assert_uint_gt(test_head(&a).seq, 20);
    test_assert_invariants(&a);
    let_the_clock_move();
    test_store_open_as(&b, store_instance_id(a.st));
    play(&b);
    assert_same(&a, &b);
    /* and again after both are reopened: nothing lived only in memory */
    test_store_reopen(&a);
    test_store_reopen(&b);
    assert_same(&a, &b);
    test_store_close(&a);
    test_store_close(&b);
}
END_TEST

/* Another identity: the same stream gives other event ids, so another
 * log (the ids are part of each event and of the hash chain). */
START_TEST(another_identity_other_ids)
{
    test_store a, c;
    test_store_open(&a);
    tally_id128 other = *store_instance_id(a.st);
    other.bytes[15] ^= 1; /* in the 26 bits event ids carry */
    test_store_open_as(&c, &other);
    play(&a);
    play(&c);
    ck_assert_uint_eq(test_head(&a).seq, test_head(&c).seq);
    ck_assert_mem_ne(test_head(&a).hash, test_head(&c).hash, 32);
    test_store_close(&a);
    test_store_close(&c);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("determinism");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, same_stream_same_bytes);
    tcase_add_test(tc, another_identity_other_ids);
    suite_add_tcase(s, tc);
    return test_run_suite(s);
}
