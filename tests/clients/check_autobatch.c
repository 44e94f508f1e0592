/*
 * check_autobatch.c — tests of libtally's auto-batching (clients/libtally/
 * autobatch.c) against a real tallyd: many threads on one client, each
 * checking its own result. Unique transfers merge (fewer requests than
 * calls) and each caller gets ok, not replayed, its own seq and a readable
 * transfer; the same keys again (merged, then alone) give every caller
 * replayed with the same seq; good and failing writes in one merged batch
 * get their own codes, and a write the server refuses as a request
 * (a subject over 128 bytes) fails only its caller; a server that does not
 * answer gives every caller a transport code (timed_out), never an outcome; without
 * contention, or with auto-batching off (option or environment), every
 * call is its own request; chains and tally_batch_send are not merged;
 * tally_client_close with calls waiting ends them all, quickly.
 */
#include "clients/libtally/tally.h"

#include "common/clock.h"
#include "tests/support/client_support.h"
#include "tests/support/suite.h"
#include "tests/support/tallyd_harness.h"
#include "tests/support/test_support.h"
#include "tests/support/wait.h"

#include <check.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define TEST_TIMEOUT_S 300
#define THREADS 32
#define CALLS 40
#define ACCOUNTS 16 /* ids 1..16; 999 is never opened */
#define MISSING_ACCOUNT 999
#define CLOSE_THREADS 16
#define ALL_INSIDE_WAIT_MS 30000 /* for CLOSE_THREADS threads to start, on a loaded machine */

/* ---- many callers at once ---- */

typedef int (*call_fn)(tally_client *c, int thread, int i, tally_result *r);

typedef struct caller {
    tally_client *c;
    call_fn fn;
    pthread_barrier_t *start;
    int thread, calls;
    tally_result *results; /* calls entries */
    int *rcs;
} caller;

static void *caller_main(void *arg)
{
    caller *cl = arg;
    pthread_barrier_wait(cl->start);
    for (int i = 0; i < cl->calls; i++)
        cl->rcs[i] = cl->fn(cl->c, cl->thread, i, &cl->results[i]);
    return NULL;
}

typedef struct callers {
    int threads;
    pthread_barrier_t start;
    caller *cl;
    pthread_t *th;
} callers;

/* Start fn(c, t, i) for i < calls in each of threads threads, all at
 * once; call i of thread t leaves its result and return code at
 * [t * calls + i]. */
static callers *callers_start(tally_client *c, int threads, int calls, call_fn fn,
                              tally_result *results, int *rcs)
{
    callers *g = calloc(1, sizeof(*g));
    ck_assert_ptr_nonnull(g);
    g->threads = threads;
    pthread_barrier_init(&g->start, NULL, (unsigned)threads);
    g->cl = calloc((size_t)threads, sizeof(*g->cl));
    g->th = calloc((size_t)threads, sizeof(*g->th));
    ck_assert_ptr_nonnull(g->cl);
    ck_assert_ptr_nonnull(g->th);
    for (int t = 0; t < threads; t++) {
        g->cl[t] = (caller){c, fn, &g->start, t, calls, &results[t * calls], &rcs[t * calls]};
        ck_assert_int_eq(pthread_create(&g->th[t], NULL, caller_main, &g->cl[t]), 0);
    }
    return g;
}

static void callers_join(callers *g)
{
    for (int t = 0; t < g->threads; t++)
        pthread_join(g->th[t], NULL);
    pthread_barrier_destroy(&g->start);
    free(g->cl);
    free(g->th);
    free(g);
}

static void run_callers(tally_client *c, int threads, int calls, call_fn fn,
                        tally_result *results, int *rcs)
{
    callers_join(callers_start(c, threads, calls, fn, results, rcs));
}

static tally_client *client_with(const char *url, bool no_autobatch, uint32_t timeout_ms,
                                 uint32_t retries)
{
    tally_client_options o = {.url = url, .consumer = "check", .timeout_ms = timeout_ms,
                              .retries = retries, .retries_set = true, .backoff_ms = 10,
                              .no_autobatch = no_autobatch};
    tally_client *c = NULL;
    int rc = tally_client_open(&o, &c);
    ck_assert_msg(rc == TALLY_ok, "tally_client_open: %s", tally_strerror(rc));
    return c;
}

static tally_client_counters counters(const tally_client *c)
{
    tally_client_counters n;
    tally_client_counters_get(c, &n);
    return n;
}

/* A merged request carried several writes. */
static void assert_merged(const tally_client_counters *n, uint64_t writes)
{
    ck_assert_uint_eq(n->writes, writes);
    ck_assert_msg(n->requests < n->writes, "%" PRIu64 " requests for %" PRIu64 " writes",
                  n->requests, n->writes);
    ck_assert_uint_gt(n->batches, 0);
    ck_assert_uint_ge(n->batched_writes, 2 * n->batches);
}

static tally_uuid transfer_id(int thread, int i)
{
    tally_uuid id = {{0}};
    id.bytes[0] = 0x77; /* never zero */
    id.bytes[14] = (uint8_t)thread;
    id.bytes[15] = (uint8_t)i;
    return id;
}

static tally_transfer_args transfer_args(int thread, int i, uint64_t credit)
{
    return (tally_transfer_args){.id = transfer_id(thread, i),
                                 .debit_account_id = 1 + (uint64_t)thread % ACCOUNTS,
                                 .credit_account_id = credit, .amount = i + 1, .ledger = 1,
                                 .code = 1};
}

static uint64_t credit_of(int thread)
{
    return 1 + (uint64_t)(thread + 1) % ACCOUNTS;
}

static int unique_transfer(tally_client *c, int thread, int i, tally_result *r)
{
    char key[64];
    snprintf(key, sizeof(key), "unique-%d-%d", thread, i);
    tally_transfer_args t = transfer_args(thread, i, credit_of(thread));
    return tally_transfer(c, key, &t, r);
}

/* ---- tests ---- */

static void check_first_results(const tally_result *r, const int *rcs)
{
    for (int t = 0; t < THREADS; t++)
        for (int i = 0; i < CALLS; i++) {
            const tally_result *x = &r[t * CALLS + i];
            char key[64];
            snprintf(key, sizeof(key), "unique-%d-%d", t, i);
            ck_assert_msg(rcs[t * CALLS + i] == TALLY_ok && x->code == TALLY_ok,
                          "%s: %s", key, tally_strerror(x->code));
            ck_assert_msg(!x->replayed, "%s replayed", key);
            ck_assert_str_eq(x->key, key);
            ck_assert_uint_gt(x->seq, 0);
            ck_assert_uint_eq(x->events, 1);
            ck_assert_int_eq(x->failed_index, -1);
        }
}

static void check_transfers_readable(tally_client *c, const tally_result *r)
{
    for (int t = 0; t < THREADS; t++)
        for (int i = 0; i < CALLS; i++) {
            tally_uuid id = transfer_id(t, i);
            tally_transfer_info info;
            ck_assert_int_eq(tally_transfer_get(c, &id, &info), TALLY_ok);
            ck_assert_uint_eq(info.debit_account_id, 1 + (uint64_t)t % ACCOUNTS);
            ck_assert_uint_eq(info.credit_account_id, credit_of(t));
            ck_assert_int_eq(info.amount, i + 1);
            ck_assert_uint_eq(info.created_seq, r[t * CALLS + i].seq); /* its own event */
        }
}

START_TEST(test_concurrent_writes_merge_and_replay_per_caller)
{
    test_client_fixture f;
    test_client_up(&f);
    tally_client *c = client_with(f.srv.url, false, 10000, 3);
    test_client_open_accounts(c, 1, ACCOUNTS);
    static tally_result first[THREADS * CALLS], again[THREADS * CALLS], alone;
    static int rcs[THREADS * CALLS];
    run_callers(c, THREADS, CALLS, unique_transfer, first, rcs);
    check_first_results(first, rcs);
    tally_client_counters n = counters(c);
    assert_merged(&n, THREADS * CALLS);
    check_transfers_readable(c, first);
    tally_stats s;
    ck_assert_int_eq(tally_stats_get(c, &s), TALLY_ok);
    ck_assert_uint_eq(s.transfers, THREADS * CALLS);

    /* The same keys again, merged: every caller gets its stored outcome. */
    run_callers(c, THREADS, CALLS, unique_transfer, again, rcs);
    for (int k = 0; k < THREADS * CALLS; k++) {
        ck_assert_int_eq(rcs[k], TALLY_ok);
        ck_assert_msg(again[k].replayed, "%s not replayed", again[k].key);
        ck_assert_uint_eq(again[k].seq, first[k].seq);
        ck_assert_uint_eq(again[k].events, first[k].events);
        ck_assert_str_eq(again[k].key, first[k].key);
    }
    tally_client_counters n2 = counters(c);
    ck_assert_uint_lt(n2.requests - n.requests, n2.writes - n.writes);
    /* ... and alone: the same result as from a merged batch. */
    for (int k = 0; k < THREADS * CALLS; k += 97) {
        ck_assert_int_eq(unique_transfer(c, k / CALLS, k % CALLS, &alone), TALLY_ok);
        ck_assert(alone.replayed);
        ck_assert_uint_eq(alone.seq, first[k].seq);
        ck_assert_uint_eq(alone.events, first[k].events);
    }
    ck_assert_int_eq(tally_stats_get(c, &s), TALLY_ok);
    ck_assert_uint_eq(s.transfers, THREADS * CALLS);
    tally_client_close(c);
    test_client_down(&f);
}
END_TEST

#define SUBJECT_TOO_LONG 129

/* Thread 0: a grant the server refuses as a request (subject over 128
 * bytes); odd threads: transfers to an account that does not exist; the
 * others: good transfers; the last call of thread 1: NULL args. */
static int mixed_call(tally_client *c, int thread, int i, tally_result *r)
{
    char key[64];
    snprintf(key, sizeof(key), "mixed-%d-%d", thread, i);
    if (thread == 1 && i == CALLS - 1)
        return tally_transfer(c, key, NULL, r);
    if (thread == 0) {
        char subject[SUBJECT_TOO_LONG + 1];
        memset(subject, 's', SUBJECT_TOO_LONG);
        subject[SUBJECT_TOO_LONG] = '\0';
        tally_entitlement_args e = {.subject = subject, .feature = "pro"};
        return tally_grant(c, key, &e, r);
    }
    tally_transfer_args t = transfer_args(thread, i, thread % 2 ? MISSING_ACCOUNT : credit_of(thread));
    return tally_transfer(c, key, &t, r);
}

static int mixed_expected(int thread, int i)
{
    if (thread == 1 && i == CALLS - 1)
        return TALLY_invalid_argument;
    return thread == 0 ? TALLY_subject_too_long
           : thread % 2 ? TALLY_credit_account_not_found
                        : TALLY_ok;
}

START_TEST(test_mixed_outcomes_in_merged_batches_are_per_caller)
{
    test_client_fixture f;
    test_client_up(&f);
    tally_client *c = client_with(f.srv.url, false, 10000, 3);
    test_client_open_accounts(c, 1, ACCOUNTS);
    static tally_result r[THREADS * CALLS], again[THREADS * CALLS];
    static int rcs[THREADS * CALLS];
    run_callers(c, THREADS, CALLS, mixed_call, r, rcs);
    uint64_t good = 0;
    for (int t = 0; t < THREADS; t++)
        for (int i = 0; i < CALLS; i++) {
            int want = mixed_expected(t, i), k = t * CALLS + i;
            ck_assert_msg(rcs[k] == want && r[k].code == want, "thread %d call %d: %s, not %s",
                          t, i, tally_strerror(r[k].code), tally_strerror(want));
            ck_assert(!r[k].replayed);
            ck_assert_uint_eq(r[k].seq > 0, want == TALLY_ok);
            good += want == TALLY_ok;
        }
    /* Merged, and the refused grant's batches were sent again member by
     * member: requests beyond one per alone write and one per batch. */
    tally_client_counters n = counters(c);
    assert_merged(&n, THREADS * CALLS - 1);
    uint64_t resent = n.requests - (n.writes - n.batched_writes) - n.batches;
    ck_assert_msg(resent > 0, "no merged batch was refused and resent (%" PRIu64 " batches)",
                  n.batches);
    tally_stats s;
    ck_assert_int_eq(tally_stats_get(c, &s), TALLY_ok);
    ck_assert_uint_eq(s.transfers, good);
    ck_assert_uint_eq(s.entitlements, 0);

    /* Stored rejections replay per caller too; the refusal is not stored. */
    run_callers(c, THREADS, CALLS, mixed_call, again, rcs);
    for (int k = 0; k < THREADS * CALLS; k++) {
        int want = mixed_expected(k / CALLS, k % CALLS);
        ck_assert_int_eq(again[k].code, want);
        /* ok and the business rejection are stored; the refused grant and the
         * call with NULL args never reached the inbox */
        ck_assert_int_eq(again[k].replayed, want == TALLY_ok || want == TALLY_credit_account_not_found);
        ck_assert_uint_eq(again[k].seq, r[k].seq);
    }
    tally_client_close(c);
    test_client_down(&f);
}
END_TEST

START_TEST(test_alone_caller_sends_its_own_requests)
{
    test_client_fixture f;
    test_client_up(&f);
    tally_client *c = client_with(f.srv.url, false, 10000, 3);
    test_client_open_accounts(c, 1, ACCOUNTS);
    tally_result r;
    for (int i = 0; i < CALLS; i++)
        ck_assert_int_eq(unique_transfer(c, 0, i, &r), TALLY_ok);
    tally_client_counters n = counters(c);
    ck_assert_uint_eq(n.writes, CALLS);
    ck_assert_uint_eq(n.requests, CALLS);
    ck_assert_uint_eq(n.batches, 0);
    /* Chains and explicit batches never go through auto-batching. */
    tally_batch *b = tally_batch_new(false), *chain = tally_batch_new(true);
    tally_transfer_args t = transfer_args(1, 0, credit_of(1));
    ck_assert_int_eq(tally_batch_transfer(b, "explicit", &t), TALLY_ok);
    t = transfer_args(1, 1, credit_of(1));
    ck_assert_int_eq(tally_batch_transfer(chain, NULL, &t), TALLY_ok);
    ck_assert_int_eq(tally_batch_send(c, b, NULL, &r, 1), TALLY_ok);
    ck_assert_int_eq(r.code, TALLY_ok);
    ck_assert_int_eq(tally_batch_send(c, chain, NULL, &r, 1), TALLY_ok);
    ck_assert_int_eq(r.code, TALLY_ok);
    tally_batch_free(b);
    tally_batch_free(chain);
    tally_client_counters n2 = counters(c);
    ck_assert_mem_eq(&n, &n2, sizeof(n));
    tally_client_close(c);
    test_client_down(&f);
}
END_TEST

/* Every call its own request, all ok. */
static void assert_unmerged(tally_client *c, const char *url, tally_result *r, int *rcs)
{
    (void)url;
    run_callers(c, THREADS, CALLS / 4, unique_transfer, r, rcs);
    for (int k = 0; k < THREADS * CALLS / 4; k++)
        ck_assert_int_eq(r[k].code, TALLY_ok);
    tally_client_counters n = counters(c);
    ck_assert_uint_eq(n.writes, THREADS * CALLS / 4);
    ck_assert_uint_eq(n.requests, n.writes);
    ck_assert_uint_eq(n.batches, 0);
    ck_assert_uint_eq(n.batched_writes, 0);
}

START_TEST(test_off_switch_sends_one_request_per_call)
{
    test_client_fixture f;
    test_client_up(&f);
    static tally_result r[THREADS * CALLS];
    static int rcs[THREADS * CALLS];
    tally_client *c = client_with(f.srv.url, true, 10000, 3);
    test_client_open_accounts(c, 1, ACCOUNTS);
    assert_unmerged(c, f.srv.url, r, rcs);
    tally_client_close(c);

    /* The environment turns it off too; replays now, still one each. */
    setenv("TALLY_AUTOBATCH", "off", 1);
    c = client_with(f.srv.url, false, 10000, 3);
    assert_unmerged(c, f.srv.url, r, rcs);
    tally_client_close(c);

    tally_client_options o = {.url = f.srv.url};
    setenv("TALLY_AUTOBATCH", "sometimes", 1);
    ck_assert_int_eq(tally_client_open(&o, &c), TALLY_invalid_argument);
    o.no_autobatch = true; /* the option decides: the variable is not read */
    ck_assert_int_eq(tally_client_open(&o, &c), TALLY_ok);
    tally_client_close(c);
    unsetenv("TALLY_AUTOBATCH");
    test_client_down(&f);
}
END_TEST

/* tallyd with the accounts, then frozen (every thread stopped): requests are
 * delivered, never answered; a client of it with these attempts. */
static tally_client *stopped_server(test_client_fixture *f, uint32_t timeout_ms, uint32_t retries)
{
    test_client_up(f);
    test_client_open_accounts(f->c, 1, ACCOUNTS);
    tally_client *c = client_with(f->srv.url, false, timeout_ms, retries);
    test_client_head(c); /* connected (the handshake needs a running tallyd) */
    tallyd_freeze(&f->srv);
    return c;
}

START_TEST(test_unanswered_merged_request_is_every_callers_timeout)
{
    test_client_fixture f;
    tally_client *c = stopped_server(&f, 300, 0);
    static tally_result r[CLOSE_THREADS * 2];
    static int rcs[CLOSE_THREADS * 2];
    run_callers(c, CLOSE_THREADS, 2, unique_transfer, r, rcs);
    /* timed_out, or unreachable for an attempt NNG could not hand to the
     * connection within its 300 ms (a busy machine): a transport code, as
     * alone, never an outcome */
    int timed_out = 0;
    for (int k = 0; k < CLOSE_THREADS * 2; k++) {
        ck_assert_msg((r[k].code == TALLY_timed_out || r[k].code == TALLY_unreachable) &&
                          rcs[k] == r[k].code && !r[k].replayed && r[k].seq == 0 &&
                          r[k].events == 0,
                      "call %d: %s", k, tally_strerror(r[k].code));
        timed_out += r[k].code == TALLY_timed_out;
    }
    ck_assert_int_gt(timed_out, 0);
    tally_client_counters n = counters(c);
    assert_merged(&n, CLOSE_THREADS * 2);
    tallyd_thaw(&f.srv);
    /* Retried by key once the server is back (patiently): each applied once. */
    tally_client_close(c);
    c = client_with(f.srv.url, false, 10000, 3);
    run_callers(c, CLOSE_THREADS, 2, unique_transfer, r, rcs);
    for (int k = 0; k < CLOSE_THREADS * 2; k++)
        ck_assert_msg(r[k].code == TALLY_ok, "call %d: %s", k, tally_strerror(r[k].code));
    tally_stats s;
    ck_assert_int_eq(tally_stats_get(f.c, &s), TALLY_ok);
    ck_assert_uint_eq(s.transfers, CLOSE_THREADS * 2);
    tally_client_close(c);
    test_client_down(&f);
}
END_TEST

/* A client whose server does not answer, with calls in flight and queued,
 * is closed: every call returns (queued ones unreachable, sent ones
 * timed_out), soon, although each attempt could wait a minute. */
START_TEST(test_close_ends_waiting_calls)
{
    test_client_fixture f;
    tally_client *c = stopped_server(&f, 60000, 3);
    tally_result r[CLOSE_THREADS];
    int rcs[CLOSE_THREADS];
    callers *g = callers_start(c, CLOSE_THREADS, 1, unique_transfer, r, rcs);
    /* all of them inside before the close (a fixed pause was not enough
     * for 16 threads to start on a loaded machine) */
    TEST_WAIT_UNTIL(counters(c).writes >= CLOSE_THREADS, ALL_INSIDE_WAIT_MS,
                    "%d calls inside the client (%llu)", CLOSE_THREADS,
                    (unsigned long long)counters(c).writes);
    ck_assert_uint_eq(counters(c).writes, CLOSE_THREADS);
    int64_t start = clock_mono_ms();
    tally_client_close(c);
    callers_join(g);
    int64_t took = clock_mono_ms() - start;
    ck_assert_msg(took < 60000, /* the calls' timeout: they were ended by the close */
                  "close and the calls took %" PRId64 " ms: the calls timed out", took);
    int unreachable = 0;
    for (int t = 0; t < CLOSE_THREADS; t++) {
        ck_assert_msg(rcs[t] == TALLY_unreachable || rcs[t] == TALLY_timed_out, "call %d: %s", t,
                      tally_strerror(rcs[t]));
        ck_assert_int_eq(r[t].code, rcs[t]);
        unreachable += rcs[t] == TALLY_unreachable;
    }
    ck_assert_int_ge(unreachable, CLOSE_THREADS - 2); /* two requests were in flight */
    tallyd_thaw(&f.srv);
    test_client_down(&f);
}
END_TEST

int main(void)
{
    const test_row rows[] = {
        {"autobatch", test_concurrent_writes_merge_and_replay_per_caller, TEST_TIMEOUT_S},
        {"autobatch", test_mixed_outcomes_in_merged_batches_are_per_caller, TEST_TIMEOUT_S},
        {"autobatch", test_alone_caller_sends_its_own_requests, TEST_TIMEOUT_S},
        {"autobatch", test_off_switch_sends_one_request_per_call, TEST_TIMEOUT_S},
        {"autobatch", test_unanswered_merged_request_is_every_callers_timeout, TEST_TIMEOUT_S},
        {"autobatch", test_close_ends_waiting_calls, TEST_TIMEOUT_S},
    };
    return test_run_suite(test_suite_of_rows("autobatch", TEST_ROWS(rows)));
}
