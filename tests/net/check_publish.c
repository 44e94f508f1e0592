/*
 * check_publish.c — what tallyd's PUB socket delivers by itself, without
 * gap fill: a commit's burst of events must reach a subscriber that reads
 * continuously (issue 16 item 7).
 *
 * A real tallyd publishes on an ipc:// endpoint; a raw NNG SUB socket in
 * the test process is read by its own thread, which records the seq of
 * every event that arrives over PUB (log_read is never called). The main
 * thread commits chains of TALLY_CHAIN_COMMANDS_MAX (32) account_open
 * members, one commit of 32 events each, RUNS times, and after each chain
 * requires every one of its 32 seqs to have arrived. With NNG's default
 * send queue (16 messages per subscriber) 5-15 of each 32 were lost.
 *
 * Nothing is timed: a run waits (up to CHAIN_WAIT_MS, for a loaded
 * machine) for the chain's last seq, and PUB keeps order on one pipe, so
 * once the last seq is there every earlier one has arrived or was dropped.
 * The reader takes READER_WORK_US per message, the work of a realistic
 * subscriber, so the test does not hinge on how fast this machine is.
 */
#include "clients/libtally/tally.h"
#include "common/clock.h"
#include "common/limits.h"
#include "common/log_event.h"
#include "tests/support/tallyd_harness.h"
#include "tests/support/test_support.h"
#include "tests/support/wait.h"
#include "tests/support/wire.h"

#include <check.h>
#include <msgpack.h>
#include <nng/nng.h>
#include <nng/protocol/pubsub0/sub.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define RUNS 25
#define CHAIN_MEMBERS TALLY_CHAIN_COMMANDS_MAX
#define SEQS_MAX 4096 /* seqs the reader records: warm-up + RUNS chains */
#define READER_POLL_MS 100
#define READER_WORK_US 50
#define CHAIN_WAIT_MS 30000
#define SUBSCRIBED_WAIT_MS 30000
#define PUB_MESSAGE_BYTES_MAX (TALLY_EVENT_BYTES_MAX + 1024)

_Static_assert(RUNS * CHAIN_MEMBERS + 1000 < SEQS_MAX, "every seq of the test is recorded");

typedef struct reader {
    nng_socket sub;
    pthread_t thread;
    atomic_bool stop;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool seen[SEQS_MAX];
    uint64_t highest;   /* highest seq received */
    uint64_t refused;   /* messages that are not a stored event */
} reader;

static tallyd_proc proc;
static tally_client *client;

/* The seq of one PUB message; 0 when it is not a well-formed event. */
static uint64_t message_seq(nng_msg *m)
{
    msgpack_unpacked up;
    msgpack_unpacked_init(&up);
    log_event ev;
    uint64_t seq = 0;
    if (log_event_decode(nng_msg_body(m), nng_msg_len(m), &up, &ev) == TALLY_ok)
        seq = ev.seq;
    msgpack_unpacked_destroy(&up);
    return seq;
}

/* Read PUB messages until told to stop; the receive times out every
 * READER_POLL_MS so the thread sees stop (no aio is left pending at close,
 * which NNG 1.5.2 can hang on). */
static void *reader_main(void *arg)
{
    reader *r = arg;
    while (!atomic_load(&r->stop)) {
        nng_msg *m;
        if (nng_recvmsg(r->sub, &m, 0) != 0)
            continue;
        uint64_t seq = message_seq(m);
        nng_msg_free(m);
        pthread_mutex_lock(&r->mu);
        if (seq == 0 || seq >= SEQS_MAX)
            r->refused++;
        else {
            r->seen[seq] = true;
            r->highest = seq > r->highest ? seq : r->highest;
        }
        pthread_cond_broadcast(&r->cv);
        pthread_mutex_unlock(&r->mu);
        test_pause_us(READER_WORK_US); /* the reader's work: the test's input */
    }
    return NULL;
}

static void reader_start(reader *r, const char *url)
{
    memset(r, 0, sizeof(*r));
    pthread_mutex_init(&r->mu, NULL);
    pthread_cond_init(&r->cv, NULL);
    ck_assert_int_eq(nng_sub0_open(&r->sub), 0);
    ck_assert_int_eq(nng_socket_set(r->sub, NNG_OPT_SUB_SUBSCRIBE, "", 0), 0);
    ck_assert_int_eq(nng_socket_set_size(r->sub, NNG_OPT_RECVMAXSZ, PUB_MESSAGE_BYTES_MAX), 0);
    ck_assert_int_eq(nng_socket_set_ms(r->sub, NNG_OPT_RECVTIMEO, READER_POLL_MS), 0);
    ck_assert_int_eq(nng_dial(r->sub, url, NULL, 0), 0);
    ck_assert_int_eq(pthread_create(&r->thread, NULL, reader_main, r), 0);
}

static void reader_stop(reader *r)
{
    atomic_store(&r->stop, true);
    pthread_join(r->thread, NULL);
    nng_close(r->sub);
}

/* Wait until the reader has received seq (or anything after it); false
 * when it did not within wait_ms. */
static bool reader_wait(reader *r, uint64_t seq, int64_t wait_ms)
{
    int64_t deadline = test_deadline_ms(wait_ms);
    pthread_mutex_lock(&r->mu);
    while (r->highest < seq && clock_mono_ms() < deadline) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 50 * 1000000L;
        if (ts.tv_nsec >= 1000000000L) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000L;
        }
        pthread_cond_timedwait(&r->cv, &r->mu, &ts);
    }
    bool got = r->highest >= seq;
    pthread_mutex_unlock(&r->mu);
    return got;
}

static unsigned reader_count(reader *r, uint64_t first, uint64_t last)
{
    unsigned n = 0;
    pthread_mutex_lock(&r->mu);
    for (uint64_t s = first; s <= last; s++)
        n += r->seen[s];
    pthread_mutex_unlock(&r->mu);
    return n;
}

/* PUB sends only to subscribers it already knows: write single events
 * until one arrives over PUB. */
static void wait_subscribed(reader *r, uint64_t *next_id)
{
    int64_t deadline = test_deadline_ms(SUBSCRIBED_WAIT_MS);
    for (;;) {
        tally_account_open_args a = {.id = (*next_id)++, .ledger = 1, .code = 1};
        tally_result res;
        ck_assert_int_eq(tally_account_open(client, NULL, &a, &res), TALLY_ok);
        if (reader_wait(r, res.seq, 200))
            return;
        ck_assert_msg(clock_mono_ms() < deadline && *next_id < 1000,
                      "no event arrived over PUB within %d ms", SUBSCRIBED_WAIT_MS);
    }
}

/* One chain of CHAIN_MEMBERS account opens: one commit, CHAIN_MEMBERS
 * events. Returns the first seq. */
static uint64_t commit_chain(uint64_t *next_id)
{
    tally_batch *b = tally_batch_new(true);
    ck_assert_ptr_nonnull(b);
    for (unsigned i = 0; i < CHAIN_MEMBERS; i++) {
        tally_account_open_args a = {.id = (*next_id)++, .ledger = 1, .code = 1};
        ck_assert_int_eq(tally_batch_account_open(b, NULL, &a), TALLY_ok);
    }
    tally_result res;
    ck_assert_int_eq(tally_batch_send(client, b, NULL, &res, 1), TALLY_ok);
    tally_batch_free(b);
    ck_assert_int_eq(res.code, TALLY_ok);
    ck_assert_uint_eq(res.events, CHAIN_MEMBERS);
    return res.seq;
}

START_TEST(chain_events_all_arrive_over_pub)
{
    wire_server_start(&proc, &client, NULL);
    reader r;
    reader_start(&r, proc.pub_url);
    uint64_t next_id = 1;
    wait_subscribed(&r, &next_id);
    for (int run = 1; run <= RUNS; run++) {
        uint64_t first = commit_chain(&next_id), last = first + CHAIN_MEMBERS - 1;
        ck_assert_uint_lt(last, SEQS_MAX);
        ck_assert_msg(reader_wait(&r, last, CHAIN_WAIT_MS),
                      "run %d: the chain's last event (seq %llu) never arrived over PUB", run,
                      (unsigned long long)last);
        unsigned got = reader_count(&r, first, last);
        ck_assert_msg(got == CHAIN_MEMBERS,
                      "run %d: %u of the chain's %d events arrived over PUB (seqs %llu-%llu)",
                      run, got, CHAIN_MEMBERS, (unsigned long long)first,
                      (unsigned long long)last);
    }
    reader_stop(&r);
    ck_assert_uint_eq(r.refused, 0);
    wire_server_stop(&proc, &client);
    tallyd_cleanup(&proc);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("publish");
    TCase *tc = tcase_create("burst");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, chain_events_all_arrive_over_pub);
    suite_add_tcase(s, tc);
    return test_run_suite(s);
}
