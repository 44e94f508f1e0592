/*
 * check_subscriber.c — durable subscribers on a real LMDB store: start
 * positions, the delivery order, the ack floor, redelivery after the ack
 * wait, restart, nak and backoff, max deliveries and parking, dead-letter
 * replay and discard, refusals that write nothing, and the cursors and dlq
 * invariants. Time is injected (ts.now_ms), so redelivery is exact.
 */
#include "log/subscriber.h"
#include "log/subscriber_record.h" /* the cursor record's formats */
#include "tests/support/test_support.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NAME tally_str_from("sub-a")

static test_store ts;

static void setup(void) { test_store_open(&ts); }

static void teardown(void)
{
    test_assert_invariants(&ts);
    test_store_close(&ts);
}

/* n account.opened events (seq 1..n for a fresh store). */
static void events(uint64_t first_id, unsigned n)
{
    for (unsigned i = 0; i < n; i++) {
        ledger_command c = test_cmd_open(first_id + i, 1, 0);
        ck_assert_int_eq(test_apply(&ts, "t", NULL, &c).code, TALLY_ok);
    }
}

typedef struct op {
    int rc;
    bool created;
    sub_state st;
    sub_delivery d[TALLY_SUB_FETCH_EVENTS_MAX];
    uint32_t count, acked, attempt, replaying;
    int64_t next_due, after_ms;
    uint64_t writes;
} op;

static store_txn begin(void)
{
    store_txn t;
    ck_assert_int_eq(store_txn_begin(ts.st, NULL, false, &t), TALLY_ok);
    return t;
}

/* Commit when rc is ok, else abort and check that nothing was written. */
static int finish(store_txn *t, int rc)
{
    if (rc == TALLY_ok)
        return store_txn_commit(t);
    ck_assert_msg(t->writes == 0, "%s wrote %llu records", tally_strerror(rc),
                  (unsigned long long)t->writes);
    store_txn_abort(t);
    return rc;
}

static op create_cfg(tally_str name, sub_start start, const sub_config *cfg)
{
    op o = {0};
    store_txn t = begin();
    o.rc = finish(&t, sub_create(&t, name, &start, cfg, ts.now_ms, &o.created, &o.st));
    return o;
}

static op create(sub_start start)
{
    sub_config cfg;
    sub_config_default(&cfg);
    return create_cfg(NAME, start, &cfg);
}

/* A fetch by the consumer instance `instance` (NULL: none). */
static op fetch_as(const char *instance, uint32_t max, bool restart)
{
    op o = {0};
    store_txn t = begin();
    o.rc = sub_fetch(&t, NAME, max, restart, tally_str_from(instance), ts.now_ms, o.d, &o.count,
                     &o.next_due, &o.st);
    o.writes = t.writes;
    o.rc = finish(&t, o.rc);
    return o;
}

static op fetch(uint32_t max, bool restart) { return fetch_as(NULL, max, restart); }

static op ack(uint64_t upto, const uint64_t *done, uint32_t n)
{
    op o = {0};
    store_txn t = begin();
    o.rc = finish(&t, sub_ack(&t, NAME, upto, done, n, ts.now_ms, &o.acked, &o.st));
    return o;
}

static op nak(uint64_t seq, bool has_delay, uint32_t delay, const char *err)
{
    op o = {0};
    store_txn t = begin();
    o.rc = finish(&t, sub_nak(&t, NAME, seq, has_delay, delay, tally_str_from(err), ts.now_ms,
                              &o.attempt, &o.after_ms));
    return o;
}

static op park(uint64_t seq, const char *reason)
{
    op o = {0};
    store_txn t = begin();
    o.rc = finish(&t, sub_park(&t, NAME, seq, tally_str_from(reason), ts.now_ms, &o.st));
    return o;
}

static sub_state get(void)
{
    sub_state s;
    store_txn t;
    ck_assert_int_eq(store_txn_begin(ts.st, NULL, true, &t), TALLY_ok);
    ck_assert_int_eq(sub_get(&t, NAME, &s), TALLY_ok);
    store_txn_abort(&t);
    return s;
}

static void expect_seqs(const op *o, const uint64_t *seqs, uint32_t n, uint32_t attempt)
{
    ck_assert_int_eq(o->rc, TALLY_ok);
    ck_assert_uint_eq(o->count, n);
    for (uint32_t i = 0; i < n; i++) {
        ck_assert_uint_eq(o->d[i].seq, seqs[i]);
        if (attempt)
            ck_assert_uint_eq(o->d[i].attempt, attempt);
    }
}

static void expect_fetched(op o, const uint64_t *seqs, uint32_t n, uint32_t attempt)
{
    expect_seqs(&o, seqs, n, attempt);
}

static const sub_start BEGINNING = {SUB_START_BEGINNING, 0, 0};

/* ---- start positions and create ---- */

START_TEST(start_positions)
{
    events(1, 5); /* seq 1..5 at TEST_NOW_MS */
    ts.now_ms += 60000;
    events(100, 3); /* seq 6..8 a minute later */
    sub_config cfg;
    sub_config_default(&cfg);
    struct { const char *name; sub_start start; uint64_t floor; } cases[] = {
        {"b", {SUB_START_BEGINNING, 0, 0}, 0},
        {"n", {SUB_START_NOW, 0, 0}, 8},
        {"s", {SUB_START_SEQ, 4, 0}, 3},
        {"s-end", {SUB_START_SEQ, 9, 0}, 8},
        {"tm", {SUB_START_TIME, 0, TEST_NOW_MS + 1}, 5},
        {"tm-0", {SUB_START_TIME, 0, 0}, 0},
        {"tm-late", {SUB_START_TIME, 0, TEST_NOW_MS + 3600000}, 8},
    };
    for (unsigned i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        op o = create_cfg(tally_str_from(cases[i].name), cases[i].start, &cfg);
        ck_assert_int_eq(o.rc, TALLY_ok);
        ck_assert(o.created);
        ck_assert_msg(o.st.ack_floor == cases[i].floor && o.st.delivered_seq == cases[i].floor,
                      "%s: floor %llu", cases[i].name, (unsigned long long)o.st.ack_floor);
    }
    sub_start beyond = {SUB_START_SEQ, 10, 0};
    ck_assert_int_eq(create_cfg(tally_str_from("x"), beyond, &cfg).rc, TALLY_seq_beyond_head);
}
END_TEST

START_TEST(create_is_idempotent_and_checked)
{
    op o = create(BEGINNING);
    ck_assert_int_eq(o.rc, TALLY_ok);
    ck_assert(o.created);
    o = create((sub_start){SUB_START_NOW, 0, 0}); /* the start only matters at creation */
    ck_assert_int_eq(o.rc, TALLY_ok);
    ck_assert(!o.created);
    sub_config cfg;
    sub_config_default(&cfg);
    cfg.max_deliver = 9;
    ck_assert_int_eq(create_cfg(NAME, BEGINNING, &cfg).rc,
                     TALLY_subscriber_exists_with_different_config);
    sub_config_default(&cfg);
    static const char *bad[] = {"", "has space", "slash/", "ü",
                                "a-name-that-is-longer-than-sixty-four-bytes-aaaaaaaaaaaaaaaaaaaaaaaaa"};
    for (unsigned i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        ck_assert_int_eq(create_cfg(tally_str_from(bad[i]), BEGINNING, &cfg).rc,
                         TALLY_invalid_subscriber_name);
    /* ':' is allowed: tally-relay's endpoints are relay:<endpoint> */
    ck_assert_int_eq(create_cfg(tally_str_from("relay:hooks"), BEGINNING, &cfg).rc, TALLY_ok);
    cfg.ack_wait_ms = 1;
    ck_assert_int_eq(create_cfg(tally_str_from("low-wait"), BEGINNING, &cfg).rc,
                     TALLY_invalid_argument);
    sub_config_default(&cfg);
    for (unsigned i = 2; i < TALLY_SUBSCRIBERS_MAX; i++) {
        char name[32];
        snprintf(name, sizeof(name), "s%u", i);
        ck_assert_int_eq(create_cfg(tally_str_from(name), BEGINNING, &cfg).rc, TALLY_ok);
    }
    ck_assert_int_eq(create_cfg(tally_str_from("one-too-many"), BEGINNING, &cfg).rc,
                     TALLY_too_many_subscribers);
    ck_assert_int_eq(create(BEGINNING).rc, TALLY_ok); /* an existing one is still fine */
}
END_TEST

/* ---- delivery, acks and the floor ---- */

START_TEST(fetch_in_order_and_the_ack_floor)
{
    events(1, 10);
    ck_assert_int_eq(create(BEGINNING).rc, TALLY_ok);
    op o = fetch(4, false);
    expect_seqs(&o, (uint64_t[]){1, 2, 3, 4}, 4, 1);
    ck_assert_uint_eq(o.st.delivered_seq, 4);
    ck_assert_uint_eq(o.st.in_flight, 4);
    o = fetch(4, false); /* not redelivered before the ack wait: the next ones */
    expect_seqs(&o, (uint64_t[]){5, 6, 7, 8}, 4, 1);
    o = ack(0, (uint64_t[]){2, 3}, 2);
    ck_assert_int_eq(o.rc, TALLY_ok);
    ck_assert_uint_eq(o.acked, 2);
    ck_assert_uint_eq(o.st.ack_floor, 0); /* 1 is still in flight */
    o = ack(0, (uint64_t[]){1, 2}, 2);    /* 2 again: ignored */
    ck_assert_uint_eq(o.acked, 1);
    ck_assert_uint_eq(o.st.ack_floor, 3);
    o = ack(8, NULL, 0);
    ck_assert_uint_eq(o.acked, 5); /* 4..8 */
    ck_assert_uint_eq(o.st.ack_floor, 8);
    ck_assert_uint_eq(o.st.in_flight, 0);
    o = ack(5, NULL, 0); /* the floor never goes back */
    ck_assert_uint_eq(o.st.ack_floor, 8);
    o = fetch(100, false);
    expect_seqs(&o, (uint64_t[]){9, 10}, 2, 1);
    o = fetch(100, false);
    ck_assert_uint_eq(o.count, 0);
    ck_assert_uint_eq(o.writes, 0); /* nothing delivered or parked: nothing written */
    ck_assert_int_eq(o.next_due, ts.now_ms + TALLY_SUB_ACK_WAIT_MS_DEFAULT);
    ck_assert_int_eq(ack(0, (uint64_t[]){9, 10}, 2).st.ack_floor, 10);
    ck_assert_uint_eq(get().redelivered, 0);
}
END_TEST

START_TEST(refusals_write_nothing)
{
    events(1, 3);
    ck_assert_int_eq(fetch(1, false).rc, TALLY_subscriber_not_found);
    ck_assert_int_eq(create(BEGINNING).rc, TALLY_ok);
    fetch(1, false);
    ck_assert_int_eq(ack(4, NULL, 0).rc, TALLY_seq_beyond_head);
    ck_assert_int_eq(ack(0, (uint64_t[]){2}, 1).rc, TALLY_seq_not_delivered);
    ck_assert_int_eq(ack(1, (uint64_t[]){3}, 1).rc, TALLY_seq_not_delivered);
    ck_assert_int_eq(nak(2, false, 0, "").rc, TALLY_seq_not_in_flight);
    ck_assert_int_eq(park(2, "").rc, TALLY_seq_not_in_flight);
    sub_state s = get();
    ck_assert_uint_eq(s.in_flight, 1);
    ck_assert_uint_eq(s.ack_floor, 0);
    /* acking events never fetched is allowed (a consumer skipping ahead) */
    op o = ack(3, NULL, 0);
    ck_assert_int_eq(o.rc, TALLY_ok);
    ck_assert_uint_eq(o.st.ack_floor, 3);
    ck_assert_uint_eq(o.st.delivered_seq, 3);
    ck_assert_uint_eq(o.st.in_flight, 0);
}
END_TEST

START_TEST(redelivery_after_ack_wait_and_restart)
{
    events(1, 3);
    ck_assert_int_eq(create(BEGINNING).rc, TALLY_ok);
    op o = fetch(10, false);
    expect_seqs(&o, (uint64_t[]){1, 2, 3}, 3, 1);
    ck_assert_int_eq(ack(0, (uint64_t[]){2}, 1).rc, TALLY_ok);
    ts.now_ms += TALLY_SUB_ACK_WAIT_MS_DEFAULT - 1;
    ck_assert_uint_eq(fetch(10, false).count, 0);
    ts.now_ms += 1;
    o = fetch(10, false);
    expect_seqs(&o, (uint64_t[]){1, 3}, 2, 2);
    ck_assert_uint_eq(o.st.redelivered, 2);
    /* a consumer (re)starting gets its unacked window at once */
    o = fetch(10, true);
    expect_seqs(&o, (uint64_t[]){1, 3}, 2, 3);
    /* a restart makes the whole window due, not just one fetch's worth */
    o = fetch(1, true);
    expect_seqs(&o, (uint64_t[]){1}, 1, 4);
    o = fetch(10, false);
    expect_seqs(&o, (uint64_t[]){3}, 1, 4);
    ts.now_ms += TALLY_SUB_ACK_WAIT_MS_DEFAULT; /* due again after the wait */
    /* the counts survive a crash: they are in the store */
    test_store_reopen(&ts);
    o = fetch(10, true);
    expect_seqs(&o, (uint64_t[]){1, 3}, 2, 5);
    ck_assert_uint_eq(o.st.redelivered, 8);
}
END_TEST

/* Each instance holds what it was handed: a restart releases only its own
 * in-flight events; another instance takes them over once they fall due. */
START_TEST(instances_hold_their_own_leases)
{
    events(1, 9);
    ck_assert_int_eq(create(BEGINNING).rc, TALLY_ok);
    expect_fetched(fetch_as("a", 3, false), (uint64_t[]){1, 2, 3}, 3, 1);
    expect_fetched(fetch_as("b", 3, true), (uint64_t[]){4, 5, 6}, 3, 1); /* not a's */
    expect_fetched(fetch_as("c", 1, true), (uint64_t[]){7}, 1, 1);
    /* a restart gives b its own window back, and nothing else */
    op o = fetch_as("b", 10, true);
    expect_seqs(&o, (uint64_t[]){4, 5, 6, 8, 9}, 5, 0);
    ck_assert_uint_eq(o.d[0].attempt, 2);
    ck_assert_uint_eq(o.d[3].attempt, 1);
    o = fetch_as("a", 10, true);
    expect_seqs(&o, (uint64_t[]){1, 2, 3}, 3, 2);
    /* an ack from any instance counts */
    ck_assert_uint_eq(ack(0, (uint64_t[]){1, 4, 5, 6, 8, 9}, 6).acked, 6);
    /* a dies holding 2 and 3, c holding 7: after the ack wait b takes them over */
    ck_assert_uint_eq(fetch_as("b", 10, false).count, 0);
    ts.now_ms += TALLY_SUB_ACK_WAIT_MS_DEFAULT;
    o = fetch_as("b", 10, false);
    expect_seqs(&o, (uint64_t[]){2, 3, 7}, 3, 0);
    ck_assert_uint_eq(o.d[0].attempt, 3);
    ck_assert_uint_eq(o.d[2].attempt, 2);
    /* now b's: a restart of a or c leaves them alone, b's brings them back */
    ck_assert_uint_eq(fetch_as("a", 10, true).count, 0);
    ck_assert_uint_eq(fetch_as("c", 10, true).count, 0);
    test_store_reopen(&ts); /* the holder is in the store */
    expect_fetched(fetch_as("b", 10, true), (uint64_t[]){2, 3, 7}, 3, 0);
    /* a fetch without an instance: restart releases every holder's (as before) */
    expect_fetched(fetch(10, true), (uint64_t[]){2, 3, 7}, 3, 0);
    ck_assert_int_eq(fetch_as("bad name", 1, false).rc, TALLY_invalid_argument);
}
END_TEST

/* An in-flight record without an instance (written before instances, or
 * for a fetch without one) is held by no instance: an instance's restart
 * leaves it, a restart without an instance or the ack wait releases it. */
START_TEST(records_without_an_instance)
{
    events(1, 2);
    ck_assert_int_eq(create(BEGINNING).rc, TALLY_ok);
    expect_fetched(fetch(1, false), (uint64_t[]){1}, 1, 1);
    expect_fetched(fetch_as("a", 10, true), (uint64_t[]){2}, 1, 1);
    ck_assert_uint_eq(fetch_as("a", 10, true).count, 1); /* 2 again, not 1 */
    expect_fetched(fetch(10, true), (uint64_t[]){1, 2}, 2, 0);
}
END_TEST

START_TEST(max_ack_pending_bounds_the_window)
{
    events(1, 10);
    sub_config cfg;
    sub_config_default(&cfg);
    cfg.max_ack_pending = 3;
    ck_assert_int_eq(create_cfg(NAME, BEGINNING, &cfg).rc, TALLY_ok);
    op o = fetch(100, false);
    expect_seqs(&o, (uint64_t[]){1, 2, 3}, 3, 1);
    ck_assert_uint_eq(fetch(100, false).count, 0);
    ack(0, (uint64_t[]){2}, 1);
    o = fetch(100, false);
    expect_seqs(&o, (uint64_t[]){4}, 1, 1);
}
END_TEST

START_TEST(nak_and_backoff)
{
    events(1, 2);
    sub_config cfg;
    sub_config_default(&cfg);
    cfg.backoff_count = 2;
    cfg.backoff_ms[0] = 1000;
    cfg.backoff_ms[1] = 5000;
    cfg.max_deliver = 10;
    ck_assert_int_eq(create_cfg(NAME, BEGINNING, &cfg).rc, TALLY_ok);
    op o = fetch(1, false);
    ck_assert_int_eq(o.next_due, INT64_MAX);
    ts.now_ms += cfg.ack_wait_ms - 1; /* the lease is the ack wait, not backoff[0] */
    ck_assert_uint_eq(fetch(1, false).d[0].seq, 2); /* 1 not due yet: 2 is new */
    ck_assert_int_eq(ack(0, (uint64_t[]){2}, 1).rc, TALLY_ok);
    ts.now_ms += 1;
    o = fetch(2, false);
    expect_seqs(&o, (uint64_t[]){1}, 1, 2);
    o = nak(1, false, 0, "db down"); /* a failure: backoff[1] after the 2nd delivery */
    ck_assert_uint_eq(o.attempt, 2);
    ck_assert_int_eq(o.after_ms, ts.now_ms + 5000);
    ts.now_ms += 4999;
    ck_assert_uint_eq(fetch(2, false).count, 0);
    ts.now_ms += 1;
    o = fetch(1, false);
    ck_assert_uint_eq(o.d[0].seq, 1);
    ck_assert_uint_eq(o.d[0].attempt, 3);
    o = nak(1, true, 250, "db down");
    ck_assert_int_eq(o.rc, TALLY_ok);
    ck_assert_uint_eq(o.attempt, 3);
    ck_assert_int_eq(o.after_ms, ts.now_ms + 250);
    o = nak(1, false, 0, "still down"); /* no delay: the backoff rule (last step repeats) */
    ck_assert_int_eq(o.after_ms, ts.now_ms + 5000);
}
END_TEST

static op progress_as(const char *instance, const uint64_t *seqs, uint32_t n)
{
    op o = {0};
    store_txn t = begin();
    o.rc = finish(&t, sub_progress(&t, NAME, seqs, n, tally_str_from(instance), ts.now_ms,
                                   &o.acked, &o.after_ms));
    return o;
}

/* sub_progress: the holder's events are leased again for the ack wait,
 * using no attempt; another instance's, acked and unknown seqs are
 * skipped. */
static void create_with_ack_wait(uint32_t ack_wait_ms)
{
    sub_config cfg;
    sub_config_default(&cfg);
    cfg.ack_wait_ms = ack_wait_ms;
    ck_assert_int_eq(create_cfg(NAME, BEGINNING, &cfg).rc, TALLY_ok);
}

START_TEST(progress_extends_the_lease)
{
    events(1, 3);
    create_with_ack_wait(1000);
    expect_seqs((op[]){fetch_as("a", 2, false)}, (uint64_t[]){1, 2}, 2, 1);
    expect_seqs((op[]){fetch_as("b", 1, false)}, (uint64_t[]){3}, 1, 1);
    ck_assert_int_eq(ack(0, (uint64_t[]){2}, 1).rc, TALLY_ok);
    ts.now_ms += 900;
    op o = progress_as("a", (uint64_t[]){1, 2, 3, 99}, 4);
    ck_assert_int_eq(o.rc, TALLY_ok);
    ck_assert_uint_eq(o.acked, 1); /* 1 only: 2 acked, 3 is b's, 99 never handed out */
    ck_assert_int_eq(o.after_ms, ts.now_ms + 1000);
    ts.now_ms += 100; /* 1 s after the fetch: 3 is due, 1 is not */
    o = fetch_as("b", 10, false);
    expect_seqs(&o, (uint64_t[]){3}, 1, 2);
    ts.now_ms += 900;
    o = fetch_as("b", 10, false);
    expect_seqs(&o, (uint64_t[]){1}, 1, 2); /* the extended lease ended: taken over */
    ck_assert_uint_eq(progress_as("a", (uint64_t[]){1}, 1).acked, 0); /* b holds it now */
    ck_assert_uint_eq(progress_as("", (uint64_t[]){1}, 1).acked, 1);  /* no instance: any */
}
END_TEST

typedef struct dlq_seen {
    uint64_t seqs[16];
    uint32_t attempts[16];
    bool replaying[16];
    char error[16][TALLY_SUB_ERROR_BYTES_MAX + 1];
    unsigned n;
} dlq_seen;

static int dlq_collect(const sub_dead_letter *d, void *ctx)
{
    dlq_seen *s = ctx;
    s->seqs[s->n] = d->seq;
    s->attempts[s->n] = d->attempts;
    s->replaying[s->n] = d->replaying;
    snprintf(s->error[s->n], sizeof(s->error[0]), "%.*s", (int)d->error.len, d->error.ptr);
    s->n++;
    return 0;
}

static dlq_seen dlq(uint64_t after, uint32_t limit, uint64_t *next)
{
    dlq_seen s = {0};
    store_txn t;
    ck_assert_int_eq(store_txn_begin(ts.st, NULL, true, &t), TALLY_ok);
    ck_assert_int_eq(sub_dlq_list(&t, NAME, after, limit, dlq_collect, &s, next), TALLY_ok);
    store_txn_abort(&t);
    return s;
}

START_TEST(poison_event_is_parked_and_the_stream_moves_on)
{
    events(1, 5);
    sub_config cfg;
    sub_config_default(&cfg);
    cfg.max_deliver = 3;
    ck_assert_int_eq(create_cfg(NAME, BEGINNING, &cfg).rc, TALLY_ok);
    /* the handler acks everything but seq 2, which it always answers "retry" */
    for (int round = 0; round < 3; round++) {
        op o = fetch(10, false);
        ck_assert_uint_ge(o.count, 1);
        for (uint32_t i = 0; i < o.count; i++) {
            if (o.d[i].seq == 2) {
                ck_assert_uint_eq(o.d[i].attempt, (uint32_t)round + 1);
                ck_assert_int_eq(nak(2, true, 0, "cannot parse").rc, TALLY_ok);
            } else {
                ck_assert_int_eq(ack(0, &o.d[i].seq, 1).rc, TALLY_ok);
            }
        }
        ck_assert_uint_eq(get().ack_floor, 1);
    }
    events(10, 2); /* seq 6, 7 */
    op o = fetch(10, false); /* 2 would be its 4th delivery: parked instead */
    expect_seqs(&o, (uint64_t[]){6, 7}, 2, 1);
    ck_assert_uint_eq(o.st.dead_letters, 1);
    ck_assert_uint_eq(o.st.in_flight, 2);
    ck_assert_uint_eq(o.st.ack_floor, 5); /* moved past the parked event */
    uint64_t next;
    dlq_seen d = dlq(0, 10, &next);
    ck_assert_uint_eq(d.n, 1);
    ck_assert_uint_eq(d.seqs[0], 2);
    ck_assert_uint_eq(d.attempts[0], 3);
    ck_assert_str_eq(d.error[0], "max deliveries (3) reached: cannot parse");
    ck_assert(!d.replaying[0]);
}
END_TEST

START_TEST(dead_letters_list_replay_discard)
{
    events(1, 6);
    sub_config cfg;
    sub_config_default(&cfg);
    cfg.max_deliver = 1;
    ck_assert_int_eq(create_cfg(NAME, BEGINNING, &cfg).rc, TALLY_ok);
    fetch(10, false);
    ck_assert_int_eq(park(2, "bad amount").rc, TALLY_ok);
    ck_assert_int_eq(park(2, "again").rc, TALLY_ok); /* parking twice: ok, no change */
    ck_assert_int_eq(nak(4, true, 0, "timeout").rc, TALLY_ok);
    ck_assert_int_eq(ack(0, (uint64_t[]){1, 3, 5, 6}, 4).rc, TALLY_ok);
    op o = fetch(10, false); /* 4: max_deliver 1 reached -> parked with its last error */
    ck_assert_uint_eq(o.count, 0);
    ck_assert_uint_eq(o.st.dead_letters, 2);
    ck_assert_uint_eq(o.st.ack_floor, 6);
    uint64_t next;
    dlq_seen s = dlq(0, 10, &next);
    ck_assert_uint_eq(s.n, 2);
    ck_assert_uint_eq(next, 0);
    ck_assert_uint_eq(s.seqs[0], 2);
    ck_assert_str_eq(s.error[0], "bad amount");
    ck_assert_uint_eq(s.seqs[1], 4);
    ck_assert_str_eq(s.error[1], "max deliveries (1) reached: timeout");
    s = dlq(0, 1, &next); /* paging */
    ck_assert_uint_eq(s.n, 1);
    ck_assert_uint_eq(next, 3);
    s = dlq(next, 1, &next);
    ck_assert_uint_eq(s.seqs[0], 4);
    ck_assert_uint_eq(next, 0);

    /* replay: delivered again ahead of new events, with the replay flag */
    events(100, 1); /* seq 7 */
    store_txn t = begin();
    uint32_t replaying;
    ck_assert_int_eq(sub_dlq_replay(&t, NAME, true, 3, ts.now_ms, &replaying),
                     TALLY_dead_letter_not_found);
    ck_assert_int_eq(sub_dlq_replay(&t, NAME, true, 4, ts.now_ms, &replaying), TALLY_ok);
    ck_assert_uint_eq(replaying, 1);
    ck_assert_int_eq(sub_dlq_replay(&t, NAME, false, 0, ts.now_ms, &replaying), TALLY_ok);
    ck_assert_uint_eq(replaying, 2);
    ck_assert_int_eq(store_txn_commit(&t), TALLY_ok);
    o = fetch(2, false);
    ck_assert_uint_eq(o.count, 2);
    ck_assert(o.d[0].replay && o.d[0].seq == 2 && o.d[0].attempt == 1);
    ck_assert(o.d[1].replay && o.d[1].seq == 4);
    ck_assert_uint_eq(o.st.dead_letters, 0);
    ck_assert_uint_eq(o.st.replaying, 0);
    o = fetch(2, false);
    expect_seqs(&o, (uint64_t[]){7}, 1, 1);
    ck_assert(!o.d[0].replay);
    ck_assert_int_eq(ack(0, (uint64_t[]){2, 7}, 2).acked, 2);
    ck_assert_int_eq(park(4, "still bad").rc, TALLY_ok); /* a replay parked again */
    o = fetch(10, false);
    ck_assert_uint_eq(o.count, 0);
    sub_state st = get();
    ck_assert_uint_eq(st.dead_letters, 1);
    ck_assert_uint_eq(st.in_flight, 0);
    ck_assert_uint_eq(st.ack_floor, 7);

    t = begin();
    ck_assert_int_eq(sub_dlq_discard(&t, NAME, 2, ts.now_ms), TALLY_dead_letter_not_found);
    ck_assert_int_eq(sub_dlq_discard(&t, NAME, 4, ts.now_ms), TALLY_ok);
    ck_assert_int_eq(store_txn_commit(&t), TALLY_ok);
    ck_assert_uint_eq(get().dead_letters, 0);
    ck_assert_uint_eq(dlq(0, 10, &next).n, 0);
}
END_TEST

#define MANY_DEAD 5000

/* The dlq key of NAME's dead letter seq. */
static size_t dlq_key(uint8_t *k, uint64_t seq)
{
    tally_str n = NAME;
    memcpy(k, n.ptr, n.len);
    k[n.len] = 0;
    put_u64_be(k + n.len + 1, seq);
    return n.len + 9;
}

/* Replaying a few of many dead letters reads the marked ones only: an
 * unmarked dead letter that cannot be read (its value broken on purpose)
 * is never touched by the fetches that deliver the replays. */
START_TEST(replay_of_a_few_reads_only_the_marked)
{
    events(1, MANY_DEAD);
    ck_assert_int_eq(create(BEGINNING).rc, TALLY_ok);
    store_txn t = begin();
    for (int batch = 0; batch < MANY_DEAD / TALLY_SUB_FETCH_EVENTS_MAX; batch++) {
        op *o = calloc(1, sizeof(*o));
        ck_assert_int_eq(sub_fetch(&t, NAME, TALLY_SUB_FETCH_EVENTS_MAX, false,
                                   tally_str_from(NULL), ts.now_ms, o->d, &o->count,
                                   &o->next_due, &o->st),
                         TALLY_ok);
        for (uint32_t i = 0; i < o->count; i++)
            ck_assert_int_eq(sub_park(&t, NAME, o->d[i].seq, tally_str_from("poison"), ts.now_ms,
                                      &o->st),
                             TALLY_ok);
        free(o);
    }
    ck_assert_int_eq(store_txn_commit(&t), TALLY_ok);
    ck_assert_uint_eq(get().dead_letters, MANY_DEAD);
    static const uint64_t marked[5] = {7, 1234, 2501, 3999, MANY_DEAD};
    for (int i = 0; i < 5; i++) {
        t = begin();
        uint32_t replaying;
        ck_assert_int_eq(sub_dlq_replay(&t, NAME, true, marked[i], ts.now_ms, &replaying),
                         TALLY_ok);
        ck_assert_int_eq(store_txn_commit(&t), TALLY_ok);
    }
    /* Break an unmarked one in the middle (kept to put back). */
    uint8_t k[80], saved[512];
    size_t klen = dlq_key(k, 2500);
    MDB_val v;
    t = begin();
    ck_assert_int_eq(store_get(&t, STORE_DB_DLQ, k, klen, &v), TALLY_ok);
    size_t saved_len = v.mv_size;
    memcpy(saved, v.mv_data, saved_len);
    ck_assert_int_eq(store_put(&t, STORE_DB_DLQ, k, klen, "x", 1, 0), TALLY_ok);
    ck_assert_int_eq(store_txn_commit(&t), TALLY_ok);

    op o = fetch(3, false);
    expect_seqs(&o, (uint64_t[]){7, 1234, 2501}, 3, 1);
    for (int i = 0; i < 3; i++)
        ck_assert(o.d[i].replay);
    expect_fetched(fetch(10, false), (uint64_t[]){3999, MANY_DEAD}, 2, 1);
    ck_assert_uint_eq(fetch(10, false).count, 0);
    sub_state st = get();
    ck_assert_uint_eq(st.dead_letters, MANY_DEAD - 5);
    ck_assert_uint_eq(st.replaying, 0);
    ck_assert_uint_eq(st.in_flight, 5);

    /* Put it back; a store from before the marks (replaying, no mark) is
     * repaired by the first fetch that finds no mark. */
    t = begin();
    ck_assert_int_eq(store_put(&t, STORE_DB_DLQ, k, klen, saved, saved_len, 0), TALLY_ok);
    uint32_t replaying;
    ck_assert_int_eq(sub_dlq_replay(&t, NAME, true, 2500, ts.now_ms, &replaying), TALLY_ok);
    uint8_t mk[80];
    mk[0] = 'm';
    size_t mlen = 1 + dlq_key(mk + 1, 2500);
    ck_assert_int_eq(store_del(&t, STORE_DB_CURSORS, mk, mlen), TALLY_ok);
    ck_assert_int_eq(store_txn_commit(&t), TALLY_ok);
    o = fetch(10, false);
    expect_seqs(&o, (uint64_t[]){2500}, 1, 1);
    ck_assert(o.d[0].replay);
}
END_TEST

START_TEST(delete_removes_everything)
{
    events(1, 5);
    ck_assert_int_eq(create(BEGINNING).rc, TALLY_ok);
    fetch(3, false);
    park(1, "x");
    store_txn t = begin();
    ck_assert_int_eq(sub_delete(&t, NAME), TALLY_ok);
    ck_assert_int_eq(store_txn_commit(&t), TALLY_ok);
    ck_assert_uint_eq(test_count(&ts, STORE_DB_CURSORS), 0);
    ck_assert_uint_eq(test_count(&ts, STORE_DB_DLQ), 0);
    t = begin();
    ck_assert_int_eq(sub_delete(&t, NAME), TALLY_subscriber_not_found);
    store_txn_abort(&t);
    op o = create(BEGINNING); /* a new one starts afresh */
    ck_assert(o.created);
    ck_assert_uint_eq(fetch(10, false).count, 5);
}
END_TEST

/* The invariants see a broken cursor and a dead letter naming no event. */
typedef struct findings {
    char checks[8][32];
    unsigned n;
} findings;

static void note(const char *check, const char *entity, const char *detail, void *ctx)
{
    (void)entity;
    (void)detail;
    findings *f = ctx;
    if (f->n < 8)
        snprintf(f->checks[f->n++], sizeof(f->checks[0]), "%s", check);
}

/* The invariants' findings on the store as it is now. */
static findings invariants_now(void)
{
    store_txn t;
    ck_assert_int_eq(store_txn_begin(ts.st, NULL, true, &t), TALLY_ok);
    findings f = {0};
    ledger_invariant_stats stats;
    ck_assert_int_eq(ledger_invariants_check(&t, note, &f, &stats), TALLY_ok);
    store_txn_abort(&t);
    return f;
}

START_TEST(invariants_catch_broken_cursors_and_dead_letters)
{
    events(1, 3);
    ck_assert_int_eq(create(BEGINNING).rc, TALLY_ok);
    fetch(3, false);
    park(1, "x");
    /* tamper: a dead letter for seq 99 that does not exist */
    store_txn t = begin();
    uint8_t key[64];
    memcpy(key, "sub-a", 5);
    key[5] = 0;
    put_u64_be(key + 6, 99);
    uint8_t val[15] = {0};
    ck_assert_int_eq(store_put(&t, STORE_DB_DLQ, key, 14, val, sizeof(val), 0), TALLY_ok);
    ck_assert_int_eq(store_txn_commit(&t), TALLY_ok);
    findings f = invariants_now();
    ck_assert_uint_eq(f.n, 2); /* the record names no event; the count is off */
    ck_assert_str_eq(f.checks[0], "dlq");
    ck_assert_str_eq(f.checks[1], "dlq");
    /* undo it so teardown's invariant check passes */
    t = begin();
    ck_assert_int_eq(store_del(&t, STORE_DB_DLQ, key, 14), TALLY_ok);
    ck_assert_int_eq(store_txn_commit(&t), TALLY_ok);
}
END_TEST

/* n webhook.received events whose bodies are the largest a delivery may
 * have (each event ~256 KiB). */
static void large_events(unsigned first, unsigned n)
{
    static char body[TALLY_WEBHOOK_BODY_BYTES_MAX];
    memset(body, 'w', sizeof(body));
    for (unsigned i = 0; i < n; i++) {
        char id[32];
        snprintf(id, sizeof(id), "evt-%u", first + i);
        ledger_command c = {.kind = LEDGER_WEBHOOK_RECEIVE};
        c.u.webhook = (ledger_webhook){tally_str_from("src"), tally_str_from(id), {NULL, 0}, 0,
                                       {body, sizeof(body)}};
        ck_assert_int_eq(test_apply(&ts, "webhook:src", id, &c).code, TALLY_ok);
    }
}

/* An event's size as a fetch delivers it. */
static size_t event_bytes(uint64_t seq)
{
    store_txn t;
    ck_assert_int_eq(store_txn_begin(ts.st, NULL, true, &t), TALLY_ok);
    size_t len;
    free(test_event_bytes(&t, seq, &len));
    store_txn_abort(&t);
    return len;
}

/* A fetch delivers at most TALLY_SUB_FETCH_BYTES_MAX of events, however
 * many it may; what does not fit is neither leased nor marked delivered,
 * and the next fetch goes on with it. */
START_TEST(fetch_is_bounded_by_bytes)
{
    events(1, 5);
    large_events(0, 10); /* seqs 6..15 */
    events(100, 5);      /* 16..20 */
    ck_assert_int_eq(create(BEGINNING).rc, TALLY_ok);
    op o = fetch(1000, false);
    ck_assert_int_eq(o.rc, TALLY_ok);
    ck_assert_uint_gt(o.count, 5);
    ck_assert_uint_lt(o.count, 15);
    size_t bytes = 0;
    for (uint32_t i = 0; i < o.count; i++) {
        ck_assert_uint_eq(o.d[i].seq, i + 1);
        bytes += event_bytes(i + 1);
    }
    ck_assert_uint_le(bytes, TALLY_SUB_FETCH_BYTES_MAX);
    ck_assert_uint_gt(bytes + event_bytes(o.count + 1), TALLY_SUB_FETCH_BYTES_MAX);
    ck_assert_uint_eq(o.st.in_flight, o.count); /* nothing more leased */
    ck_assert_uint_eq(o.st.delivered_seq, o.count);
    uint32_t first = o.count;
    o = fetch(1000, false);
    ck_assert_uint_ge(o.count, 1);
    ck_assert_uint_eq(o.d[0].seq, first + 1);
    ck_assert_uint_eq(o.st.in_flight, first + o.count);
    /* redeliveries are bounded the same way: everything falls due again */
    ts.now_ms += 3600 * 1000;
    o = fetch(1000, false);
    ck_assert_uint_eq(o.d[0].seq, 1);
    ck_assert_uint_eq(o.count, first);
}
END_TEST

/* ---- update, filters, in-flight view, owner, inactivity ---- */

static op update(const sub_change *ch)
{
    op o = {0};
    store_txn t = begin();
    o.rc = finish(&t, sub_update(&t, NAME, ch, ts.now_ms, &o.st));
    return o;
}

/* An update keeps the cursor, the in-flight events and the dead letters;
 * what it changes applies from then on, and a record with the new fields
 * reads back as written. */
START_TEST(update_keeps_the_cursor)
{
    events(1, 6);
    ck_assert_int_eq(create(BEGINNING).rc, TALLY_ok);
    expect_fetched(fetch(3, false), (uint64_t[]){1, 2, 3}, 3, 1);
    ck_assert_int_eq(ack(1, NULL, 0).rc, TALLY_ok);
    ck_assert_int_eq(park(2, "bad").rc, TALLY_ok);
    sub_change ch = {0};
    ch.has_ack_wait_ms = ch.has_max_deliver = ch.has_backoff = true;
    ch.config.ack_wait_ms = 500;
    ch.config.max_deliver = 9;
    ch.config.backoff_count = 2;
    ch.config.backoff_ms[0] = 200;
    ch.config.backoff_ms[1] = 700;
    ch.has_contact = ch.has_alert_route = ch.has_inactive_expiry = true;
    strcpy(ch.config.contact, "payments-oncall@example.com");
    strcpy(ch.config.alert_route, "pagerduty:payments");
    ch.config.inactive_expiry_ms = 3600000;
    ts.now_ms += 10;
    op o = update(&ch);
    ck_assert_int_eq(o.rc, TALLY_ok);
    sub_state s = get();
    ck_assert_uint_eq(s.ack_floor, 2);
    ck_assert_uint_eq(s.delivered_seq, 3);
    ck_assert_uint_eq(s.in_flight, 1);
    ck_assert_uint_eq(s.dead_letters, 1);
    ck_assert_uint_eq(s.config.ack_wait_ms, 500);
    ck_assert_uint_eq(s.config.max_deliver, 9);
    ck_assert_uint_eq(s.config.backoff_count, 2);
    ck_assert_uint_eq(s.config.backoff_ms[1], 700);
    ck_assert_uint_eq(s.config.max_ack_pending, TALLY_SUB_MAX_ACK_PENDING_DEFAULT); /* kept */
    ck_assert_str_eq(s.config.contact, "payments-oncall@example.com");
    ck_assert_str_eq(s.config.alert_route, "pagerduty:payments");
    ck_assert_uint_eq(s.config.inactive_expiry_ms, 3600000);
    ck_assert_int_eq(s.active_ms, ts.now_ms);
    o = fetch(10, false); /* the next ones, leased for the new ack wait */
    expect_seqs(&o, (uint64_t[]){4, 5, 6}, 3, 1);
    ts.now_ms += 500;
    o = fetch(10, false); /* 3 has the old lease (30 s), 4..6 the new one */
    expect_seqs(&o, (uint64_t[]){4, 5, 6}, 3, 2);
    /* A bad value is refused and changes nothing. */
    sub_change bad = {0};
    bad.has_ack_wait_ms = true;
    bad.config.ack_wait_ms = 1;
    ck_assert_int_eq(update(&bad).rc, TALLY_invalid_argument);
    ck_assert_uint_eq(get().config.ack_wait_ms, 500);
    /* Clearing the owner and the expiry goes back to a record of format 1. */
    sub_change clear = {0};
    clear.has_contact = clear.has_alert_route = clear.has_inactive_expiry = true;
    ck_assert_int_eq(update(&clear).rc, TALLY_ok);
    s = get();
    ck_assert_str_eq(s.config.contact, "");
    ck_assert_uint_eq(s.config.inactive_expiry_ms, 0);
    store_txn t;
    ck_assert_int_eq(store_txn_begin(ts.st, NULL, true, &t), TALLY_ok);
    MDB_val v;
    uint8_t k[] = "csub-a";
    ck_assert_int_eq(store_get(&t, STORE_DB_CURSORS, k, 6, &v), TALLY_ok);
    ck_assert_uint_eq(((const uint8_t *)v.mv_data)[0], 1);
    store_txn_abort(&t);
    sub_change none = {0};
    ck_assert_int_eq(store_txn_begin(ts.st, NULL, false, &t), TALLY_ok);
    ck_assert_int_eq(sub_update(&t, tally_str_from("nobody"), &none, ts.now_ms, &s),
                     TALLY_subscriber_not_found);
    store_txn_abort(&t);
}
END_TEST

static sub_config filtered(const char *types, uint8_t kinds, const char *glob)
{
    sub_config cfg;
    sub_config_default(&cfg);
    for (const char *p = types; p && *p;) {
        const char *end = strchr(p, ',');
        size_t n = end ? (size_t)(end - p) : strlen(p);
        memcpy(cfg.filter.types[cfg.filter.type_count], p, n);
        cfg.filter.types[cfg.filter.type_count++][n] = 0;
        p += n + (end ? 1 : 0);
    }
    cfg.filter.kinds = kinds;
    strcpy(cfg.filter.subject_glob, glob);
    return cfg;
}

/* A filter hands out only what passes; what it skips is acked past by the
 * fetch itself (the floor moves over it without a round trip). */
START_TEST(filters_skip_on_the_server)
{
    events(1, 2);                                              /* 1, 2: account.opened */
    ledger_command c = test_cmd_grant("user-7", "pro", 0);     /* 3: entitlement.granted */
    ck_assert_int_eq(test_apply(&ts, "t", NULL, &c).code, TALLY_ok);
    c = test_cmd_transfer(1, 1, 2, 5);                         /* 4: transfer.created */
    ck_assert_int_eq(test_apply(&ts, "t", NULL, &c).code, TALLY_ok);
    c = test_cmd_grant("org-1", "pro", 0);                     /* 5: entitlement.granted */
    ck_assert_int_eq(test_apply(&ts, "t", NULL, &c).code, TALLY_ok);
    events(10, 2);                                             /* 6, 7 */

    sub_config by_type = filtered("transfer.created,entitlement.granted", 0, "");
    ck_assert_int_eq(create_cfg(NAME, BEGINNING, &by_type).rc, TALLY_ok);
    op o = fetch(100, false);
    expect_seqs(&o, (uint64_t[]){3, 4, 5}, 3, 1);
    ck_assert_uint_eq(o.st.delivered_seq, 7); /* 6 and 7 skipped too */
    ck_assert_int_eq(ack(0, (uint64_t[]){3, 4, 5}, 3).st.ack_floor, 7);

    sub_config by_subject = filtered(NULL, 0, "user-*");
    ck_assert_int_eq(create_cfg(tally_str_from("subj"), BEGINNING, &by_subject).rc, TALLY_ok);
    sub_config by_kind = filtered(NULL, 1u << (LOG_ENTITY_ACCOUNT - 1), "");
    ck_assert_int_eq(create_cfg(tally_str_from("kind"), BEGINNING, &by_kind).rc, TALLY_ok);
    /* "x.*" a prefix, "*" every type (tally-relay's endpoint types) */
    sub_config by_prefix = filtered("entitlement.*,transfer.posted", 0, "");
    ck_assert_int_eq(create_cfg(tally_str_from("prefix"), BEGINNING, &by_prefix).rc, TALLY_ok);
    sub_config by_star = filtered("*", 0, "");
    ck_assert_int_eq(create_cfg(tally_str_from("star"), BEGINNING, &by_star).rc, TALLY_ok);
    struct { const char *name; uint64_t want[8]; uint32_t n; } cases[] = {
        {"subj", {3}, 1},
        {"kind", {1, 2, 6, 7}, 4},
        {"prefix", {3, 5}, 2},
        {"star", {1, 2, 3, 4, 5, 6, 7}, 7},
    };
    for (unsigned i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        store_txn t = begin();
        sub_delivery d[16];
        uint32_t n;
        int64_t due;
        sub_state st;
        ck_assert_int_eq(sub_fetch(&t, tally_str_from(cases[i].name), 100, false,
                                   tally_str_from(NULL), ts.now_ms, d, &n, &due, &st), TALLY_ok);
        ck_assert_int_eq(store_txn_commit(&t), TALLY_ok);
        ck_assert_msg(n == cases[i].n, "%s: %u events", cases[i].name, n);
        for (uint32_t j = 0; j < n; j++)
            ck_assert_uint_eq(d[j].seq, cases[i].want[j]);
    }
    /* Nothing passes: one fetch moves the floor to the head, nothing in flight. */
    sub_config none = filtered("webhook.received", 0, "");
    ck_assert_int_eq(create_cfg(tally_str_from("none"), BEGINNING, &none).rc, TALLY_ok);
    store_txn t = begin();
    sub_delivery d[4];
    uint32_t n;
    int64_t due;
    sub_state st;
    ck_assert_int_eq(sub_fetch(&t, tally_str_from("none"), 4, false, tally_str_from(NULL),
                               ts.now_ms, d, &n, &due, &st), TALLY_ok);
    ck_assert_int_eq(store_txn_commit(&t), TALLY_ok);
    ck_assert_uint_eq(n, 0);
    ck_assert_uint_eq(st.ack_floor, 7);
    ck_assert_uint_eq(st.in_flight, 0);
    /* An update of the filter applies to what comes next. */
    sub_change ch = {0};
    ch.has_filter_types = true;
    ck_assert_int_eq(update(&ch).rc, TALLY_ok); /* no types: any type */
    events(20, 1);
    expect_fetched(fetch(10, false), (uint64_t[]){8}, 1, 1);
    /* A different filter is a different config for create. */
    ck_assert_int_eq(create_cfg(tally_str_from("subj"), BEGINNING, &by_kind).rc,
                     TALLY_subscriber_exists_with_different_config);
}
END_TEST

typedef struct flights_seen {
    sub_flight f[8];
    char err[8][64], inst[8][64];
    uint32_t n;
} flights_seen;

static int keep_flight(const sub_flight *f, void *ctx)
{
    flights_seen *s = ctx;
    s->f[s->n] = *f;
    snprintf(s->err[s->n], 64, "%.*s", (int)f->error.len, f->error.ptr);
    snprintf(s->inst[s->n], 64, "%.*s", (int)f->instance.len, f->instance.ptr);
    s->n++;
    return TALLY_ok;
}

/* Before it is parked, an in-flight event shows its attempts, last error,
 * holder and next delivery time. */
START_TEST(in_flight_events_are_visible)
{
    events(1, 3);
    ck_assert_int_eq(create(BEGINNING).rc, TALLY_ok);
    expect_fetched(fetch_as("worker-1", 2, false), (uint64_t[]){1, 2}, 2, 1);
    op o = nak(2, true, 5000, "HTTP 503 from the CRM");
    ck_assert_int_eq(o.rc, TALLY_ok);
    flights_seen seen = {0};
    store_txn t;
    ck_assert_int_eq(store_txn_begin(ts.st, NULL, true, &t), TALLY_ok);
    ck_assert_int_eq(sub_flights(&t, NAME, 8, keep_flight, &seen), TALLY_ok);
    store_txn_abort(&t);
    ck_assert_uint_eq(seen.n, 2);
    ck_assert_uint_eq(seen.f[0].seq, 1);
    ck_assert_str_eq(seen.err[0], "");
    ck_assert_str_eq(seen.inst[0], "worker-1");
    ck_assert_int_eq(seen.f[0].deliver_after_ms, ts.now_ms + TALLY_SUB_ACK_WAIT_MS_DEFAULT);
    ck_assert_uint_eq(seen.f[1].seq, 2);
    ck_assert_uint_eq(seen.f[1].attempts, 1);
    ck_assert_str_eq(seen.err[1], "HTTP 503 from the CRM");
    ck_assert_str_eq(seen.inst[1], "worker-1");
    ck_assert_int_eq(seen.f[1].deliver_after_ms, ts.now_ms + 5000);
    seen.n = 0;
    ck_assert_int_eq(store_txn_begin(ts.st, NULL, true, &t), TALLY_ok);
    ck_assert_int_eq(sub_flights(&t, NAME, 1, keep_flight, &seen), TALLY_ok); /* bounded */
    ck_assert_int_eq(sub_flights(&t, tally_str_from("nobody"), 1, keep_flight, &seen),
                     TALLY_subscriber_not_found);
    store_txn_abort(&t);
    ck_assert_uint_eq(seen.n, 1);
}
END_TEST

static int note_expired(const sub_state *s, void *ctx)
{
    snprintf(ctx, TALLY_SUBSCRIBER_NAME_BYTES_MAX + 1, "%s", s->name);
    return TALLY_ok;
}

/* A subscriber with an inactivity limit is removed once it passes without
 * a fetch, ack or park; activity (even an empty fetch) keeps it. */
START_TEST(inactive_subscribers_expire)
{
    events(1, 2);
    sub_config cfg;
    sub_config_default(&cfg);
    cfg.inactive_expiry_ms = 10000;
    ck_assert_int_eq(create_cfg(NAME, BEGINNING, &cfg).rc, TALLY_ok);
    sub_config_default(&cfg);
    ck_assert_int_eq(create_cfg(tally_str_from("forever"), BEGINNING, &cfg).rc, TALLY_ok);
    char gone[TALLY_SUBSCRIBER_NAME_BYTES_MAX + 1] = "";
    uint32_t removed;
    ts.now_ms += 9000;
    expect_fetched(fetch(10, false), (uint64_t[]){1, 2}, 2, 1); /* active at +9 s */
    ack(2, NULL, 0);
    ts.now_ms += 9000;
    op o = fetch(10, false); /* nothing new: still written, as activity */
    ck_assert_uint_eq(o.count, 0);
    ck_assert_uint_gt(o.writes, 0);
    store_txn t = begin();
    ck_assert_int_eq(sub_expire_inactive(&t, ts.now_ms + 9999, 16, note_expired, gone, &removed),
                     TALLY_ok);
    ck_assert_uint_eq(removed, 0);
    ck_assert_int_eq(sub_expire_inactive(&t, ts.now_ms + 10000, 16, note_expired, gone, &removed),
                     TALLY_ok);
    ck_assert_int_eq(store_txn_commit(&t), TALLY_ok);
    ck_assert_uint_eq(removed, 1);
    ck_assert_str_eq(gone, "sub-a");
    ck_assert_int_eq(store_txn_begin(ts.st, NULL, true, &t), TALLY_ok);
    sub_state s;
    ck_assert_int_eq(sub_get(&t, NAME, &s), TALLY_subscriber_not_found);
    ck_assert_int_eq(sub_get(&t, tally_str_from("forever"), &s), TALLY_ok);
    store_txn_abort(&t);
}
END_TEST

/* A cursor record of format 1 (what every store before the filters holds)
 * reads with no filter, owner or expiry; a damaged tail is corrupt. */
START_TEST(cursor_records_of_both_formats)
{
    sub_config cfg = filtered("a.b", 0, "x*");
    strcpy(cfg.contact, "ops");
    ck_assert_int_eq(create_cfg(NAME, BEGINNING, &cfg).rc, TALLY_ok);
    store_txn t = begin();
    MDB_val v;
    uint8_t k[] = "csub-a";
    ck_assert_int_eq(store_get(&t, STORE_DB_CURSORS, k, 6, &v), TALLY_ok);
    uint8_t rec[4096];
    size_t len = v.mv_size;
    memcpy(rec, v.mv_data, len);
    ck_assert_uint_eq(rec[0], 2);
    sub_state s;
    /* Format 1: the fixed part alone. */
    size_t fixed = len - (3 + 5) - (3 + 2) - (3 + 3); /* types "a.b", glob "x*", contact "ops" */
    uint8_t v1[4096];
    memcpy(v1, rec, fixed);
    v1[0] = 1;
    MDB_val old = {fixed, v1};
    ck_assert_int_eq(sub_cursor_decode(&old, NAME, &s), TALLY_ok);
    ck_assert_uint_eq(s.config.filter.type_count, 0);
    ck_assert_str_eq(s.config.contact, "");
    /* A tail with an unknown tag, or cut short, is corrupt. */
    uint8_t bad[4096];
    memcpy(bad, rec, len);
    bad[fixed] = 99;
    MDB_val b = {len, bad};
    ck_assert_int_eq(sub_cursor_decode(&b, NAME, &s), TALLY_corrupt_record);
    b = (MDB_val){len - 1, rec};
    ck_assert_int_eq(sub_cursor_decode(&b, NAME, &s), TALLY_corrupt_record);
    b = (MDB_val){len, rec};
    ck_assert_int_eq(sub_cursor_decode(&b, NAME, &s), TALLY_ok);
    ck_assert_str_eq(s.config.filter.types[0], "a.b");
    ck_assert_str_eq(s.config.filter.subject_glob, "x*");
    ck_assert_str_eq(s.config.contact, "ops");
    store_txn_abort(&t);

    /* tally-recon: a cursor active before its creation is a finding, and
     * a tail that does not read (an owner text with '"') is corrupt. */
    cfg.inactive_expiry_ms = 60000;
    ck_assert_int_eq(create_cfg(tally_str_from("timed"), BEGINNING, &cfg).rc, TALLY_ok);
    t = begin();
    ck_assert_int_eq(sub_cursor_load(&t, tally_str_from("timed"), &s), TALLY_ok);
    s.active_ms = s.created_ms - 1;
    ck_assert_int_eq(sub_cursor_save(&t, &s), TALLY_ok);
    ck_assert_int_eq(store_txn_commit(&t), TALLY_ok);
    findings f = invariants_now();
    ck_assert_uint_eq(f.n, 1);
    ck_assert_str_eq(f.checks[0], "cursors");
    t = begin();
    s.active_ms = s.created_ms;
    ck_assert_int_eq(sub_cursor_save(&t, &s), TALLY_ok);
    ck_assert_int_eq(store_txn_commit(&t), TALLY_ok);
    memcpy(bad, rec, len);
    bad[len - 1] = '"'; /* the contact "ops" ends the record: now "op\"" */
    b = (MDB_val){len, bad};
    ck_assert_int_eq(sub_cursor_decode(&b, NAME, &s), TALLY_corrupt_record);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("subscriber");
    TCase *tc = tcase_create("subscriber");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, start_positions);
    tcase_add_test(tc, create_is_idempotent_and_checked);
    tcase_add_test(tc, fetch_in_order_and_the_ack_floor);
    tcase_add_test(tc, refusals_write_nothing);
    tcase_add_test(tc, redelivery_after_ack_wait_and_restart);
    tcase_add_test(tc, instances_hold_their_own_leases);
    tcase_add_test(tc, records_without_an_instance);
    tcase_add_test(tc, max_ack_pending_bounds_the_window);
    tcase_add_test(tc, nak_and_backoff);
    tcase_add_test(tc, progress_extends_the_lease);
    tcase_add_test(tc, poison_event_is_parked_and_the_stream_moves_on);
    tcase_add_test(tc, dead_letters_list_replay_discard);
    tcase_add_test(tc, replay_of_a_few_reads_only_the_marked);
    tcase_add_test(tc, delete_removes_everything);
    tcase_add_test(tc, invariants_catch_broken_cursors_and_dead_letters);
    tcase_add_test(tc, fetch_is_bounded_by_bytes);
    tcase_add_test(tc, update_keeps_the_cursor);
    tcase_add_test(tc, filters_skip_on_the_server);
    tcase_add_test(tc, in_flight_events_are_visible);
    tcase_add_test(tc, inactive_subscribers_expire);
    tcase_add_test(tc, cursor_records_of_both_formats);
    suite_add_tcase(s, tc);
    return test_run_suite(s);
}
