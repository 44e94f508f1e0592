/*
 * check_stream.c — tests of the live stream (clients/libtally/stream.c) against
 * a real tallyd with its PUB socket on ipc:// in a temp directory.
 *
 * The stream promises every seq from its start exactly once, in order, with
 * nothing skipped, whatever PUB drops. The tests check that on the events
 * themselves: each one carries the next seq and its hash chains to the one
 * before (log_event_decode verifies the hash, the test the links), so an
 * event skipped, repeated or invented fails. The main test makes PUB lose
 * messages for real: a reader slower than the writer, with a one-message
 * receive buffer, must still get every seq, through gap fill. The forger
 * tests put a PUB socket of their own in tallyd's place and publish a
 * damaged event and one that does not chain: the stream must hand out
 * neither, but the real event, read with log_read.
 */
#include "clients/libtally/tally.h"

#include "common/msgpack_safe.h"
#include "log/log.h"
#include "tests/support/client_support.h"
#include "tests/support/tallyd_harness.h"
#include "tests/support/test_support.h"
#include "tests/support/wait.h"

#include <check.h>
#include <inttypes.h>
#include <msgpack.h>
#include <nng/nng.h>
#include <nng/protocol/pubsub0/pub.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define TEST_TIMEOUT_S 300
#define EVENT_WAIT_MS 30000  /* generous: a loaded machine */
#define BURST_BATCHES 20
#define BURST_BATCH_OPS 50
#define TRICKLE_WRITES_MAX 60
#define SLOW_READER_PAUSE_MS 2

static void open_account(tally_client *c, uint64_t id)
{
    test_client_open_accounts(c, id, 1);
}

/* ---- what a reader checks on every event ---- */

typedef struct reader {
    uint64_t expected; /* the seq the next event must carry */
    uint8_t prev_hash[LOG_HASH_BYTES];
    bool has_prev;
} reader;

/* e must be the next seq, decode with a valid hash and chain to the event
 * before; it is released here. */
static void reader_take(reader *r, tally_event *e)
{
    ck_assert_msg(e->seq == r->expected, "got seq %" PRIu64 ", expected %" PRIu64, e->seq,
                  r->expected);
    msgpack_unpacked up;
    log_event ev;
    msgpack_unpacked_init(&up);
    ck_assert_int_eq(log_event_decode(e->raw, e->raw_len, &up, &ev), TALLY_ok);
    ck_assert_uint_eq(ev.seq, e->seq);
    if (r->has_prev)
        ck_assert_msg(memcmp(ev.prev_hash, r->prev_hash, LOG_HASH_BYTES) == 0,
                      "event %" PRIu64 " does not chain to the one before", e->seq);
    memcpy(r->prev_hash, ev.hash, LOG_HASH_BYTES);
    r->has_prev = true;
    msgpack_unpacked_destroy(&up);
    ck_assert_str_eq(e->type, "account.opened");
    ck_assert_str_eq(e->entity_kind, "account");
    ck_assert_uint_ne(e->account_id, 0);
    ck_assert_uint_eq(e->entity_version, 1);
    r->expected++;
    tally_events_release(e, 1);
}

static void stream_take(tally_stream *s, reader *r)
{
    tally_event e;
    int rc = tally_stream_next(s, &e, EVENT_WAIT_MS);
    ck_assert_msg(rc == TALLY_ok, "seq %" PRIu64 " did not come: %s", r->expected,
                  tally_strerror(rc));
    reader_take(r, &e);
}

/* A reader that keeps up gets events from PUB once the subscription is up
 * (PUB sends only to subscribers it knows): open accounts from *id one at a
 * time, taking each, until published of them came from PUB. */
static void trickle_until_published(tally_client *c, tally_stream *s, reader *r, uint64_t *id,
                                    uint64_t published)
{
    tally_stream_counters k;
    uint64_t first = *id;
    do {
        ck_assert_msg(*id - first < TRICKLE_WRITES_MAX, "no event came from PUB in %d writes",
                      TRICKLE_WRITES_MAX);
        open_account(c, (*id)++);
        stream_take(s, r);
        tally_stream_counters_get(s, &k);
    } while (k.from_publish < published);
}

/* ---- the slow reader ---- */

typedef struct burst {
    tally_client *c;
    uint64_t first_id;
    atomic_bool done;
} burst;

static void *burst_write(void *arg)
{
    burst *b = arg;
    for (unsigned i = 0; i < BURST_BATCHES; i++)
        test_client_open_accounts(b->c, b->first_id + (uint64_t)i * BURST_BATCH_OPS,
                                  BURST_BATCH_OPS);
    atomic_store(&b->done, true);
    return NULL;
}

START_TEST(test_slow_reader_gets_every_seq_through_gap_fill)
{
    test_client_fixture f;
    test_client_up(&f);
    open_account(f.c, 1); /* written before the stream exists: it comes from a fill */
    tally_stream_options o = {.recv_buffer = 1, .idle_ms = 3000};
    tally_stream *s = NULL;
    ck_assert_int_eq(tally_stream_open(f.c, f.srv.pub_url, 1, &o, &s), TALLY_ok);
    reader r = {.expected = 1};
    stream_take(s, &r);

    uint64_t id = 2;
    trickle_until_published(f.c, s, &r, &id, 3);
    tally_stream_counters k;

    /* A writer in bursts, a reader that sleeps per event and queues one PUB
     * message: PUB loses most of the burst; the fill must not. */
    burst b = {.c = f.c, .first_id = 1000};
    atomic_init(&b.done, false);
    pthread_t writer;
    ck_assert_int_eq(pthread_create(&writer, NULL, burst_write, &b), 0);
    uint64_t head = 0;
    for (;;) {
        if (head == 0 && atomic_load(&b.done))
            head = test_client_head(f.c);
        if (head != 0 && r.expected > head)
            break;
        stream_take(s, &r);
        test_pause_ms(SLOW_READER_PAUSE_MS); /* a slow reader: the test's input */
    }
    pthread_join(writer, NULL);
    ck_assert_uint_eq(head, id - 1 + BURST_BATCHES * BURST_BATCH_OPS);

    tally_stream_counters_get(s, &k);
    fprintf(stderr,
            "slow reader: %" PRIu64 " events, %" PRIu64 " from PUB, %" PRIu64
            " from gap fill; %" PRIu64 " gaps, %" PRIu64 " duplicates, %" PRIu64
            " log reads (%" PRIu64 " polls)\n",
            k.delivered, k.from_publish, k.from_fill, k.gaps, k.duplicates, k.reads, k.polls);
    ck_assert_uint_eq(k.delivered, head);
    ck_assert_uint_eq(k.from_publish + k.from_fill, head);
    ck_assert_uint_eq(k.next_seq, head + 1);
    ck_assert_uint_gt(k.gaps, 0); /* PUB did lose messages ... */
    ck_assert_uint_gt(k.from_fill, 1); /* ... and the fill brought them */
    ck_assert_uint_ge(k.from_publish, 3);

    /* Nothing more: the stream waits and says so. */
    tally_event e;
    ck_assert_int_eq(tally_stream_next(s, &e, 200), TALLY_timed_out);
    tally_stream_close(s);
    test_client_down(&f);
}
END_TEST

/* PUB messages of events the stream has already read with log_read are
 * dropped: here PUB queues a whole batch while the reader is away long
 * enough for a poll to read it first. */
/* One tally_stream_next that must find nothing new; whether the stream has
 * dropped more published events already read than duplicates_before. */
static bool nothing_new_and_dropped_since(tally_stream *s, uint64_t duplicates_before)
{
    tally_event e;
    ck_assert_int_eq(tally_stream_next(s, &e, 100), TALLY_timed_out);
    tally_stream_counters k;
    tally_stream_counters_get(s, &k);
    return k.duplicates > duplicates_before;
}

START_TEST(test_published_events_already_read_are_dropped)
{
    test_client_fixture f;
    test_client_up(&f);
    tally_stream_options o = {.idle_ms = 100};
    tally_stream *s = NULL;
    ck_assert_int_eq(tally_stream_open(f.c, f.srv.pub_url, 1, &o, &s), TALLY_ok);
    reader r = {.expected = 1};
    uint64_t id = 1;
    trickle_until_published(f.c, s, &r, &id, 1);
    tally_stream_counters before, after;
    tally_stream_counters_get(s, &before);
    test_client_open_accounts(f.c, 1000, BURST_BATCH_OPS);
    test_pause_ms(500); /* a minimum age, longer than idle_ms: the next call polls first */
    for (unsigned i = 0; i < BURST_BATCH_OPS; i++)
        stream_take(s, &r);
    /* nothing new comes; PUB's copies of the batch, read after the poll's,
     * are dropped (however late PUB hands them over) */
    TEST_WAIT_UNTIL(nothing_new_and_dropped_since(s, before.duplicates), 30000,
                    "PUB's copies of the batch read and dropped");
    tally_stream_counters_get(s, &after);
    ck_assert_uint_eq(after.from_fill - before.from_fill, BURST_BATCH_OPS);
    ck_assert_uint_eq(after.from_publish, before.from_publish);
    ck_assert_uint_gt(after.duplicates, before.duplicates);
    fprintf(stderr, "dropped %" PRIu64 " published events already read\n",
            after.duplicates - before.duplicates);
    tally_stream_close(s);
    test_client_down(&f);
}
END_TEST

/* Without PUB (none, or a publisher that is not there) the stream still
 * gets everything: when PUB is silent it long-polls log_read. This is also
 * what finds a tail PUB dropped, since no later message reveals it. */
START_TEST(test_silent_publisher_is_covered_by_polls)
{
    test_client_fixture f;
    test_client_up(&f);
    for (uint64_t id = 1; id <= 3; id++)
        open_account(f.c, id);
    char dead_pub[400];
    snprintf(dead_pub, sizeof(dead_pub), "ipc://%s/nobody.sock", f.srv.dir);
    const char *urls[] = {dead_pub, NULL};
    for (int u = 0; u < 2; u++) {
        tally_stream_options o = {.idle_ms = 100, .fill_events = 2};
        tally_stream *s = NULL;
        uint64_t from = test_client_head(f.c) - 1; /* two events are there already */
        ck_assert_int_eq(tally_stream_open(f.c, urls[u], from, &o, &s), TALLY_ok);
        reader r = {.expected = from};
        stream_take(s, &r);
        stream_take(s, &r);
        open_account(f.c, 10 + (uint64_t)u);
        stream_take(s, &r); /* committed after the stream caught up: a poll finds it */
        tally_stream_counters k;
        tally_stream_counters_get(s, &k);
        ck_assert_uint_eq(k.from_publish, 0);
        ck_assert_uint_eq(k.from_fill, 3);
        ck_assert_uint_ge(k.polls, 2); /* pages of fill_events = 2 */
        tally_stream_close(s);
    }
    test_client_down(&f);
}
END_TEST

START_TEST(test_from_now_starts_after_the_head)
{
    test_client_fixture f;
    test_client_up(&f);
    for (uint64_t id = 1; id <= 3; id++)
        open_account(f.c, id);
    tally_stream *s = NULL;
    ck_assert_int_eq(tally_stream_open(f.c, f.srv.pub_url, TALLY_STREAM_FROM_NOW, NULL, &s),
                     TALLY_ok);
    tally_stream_counters k;
    tally_stream_counters_get(s, &k);
    ck_assert_uint_eq(k.next_seq, 4);
    tally_event e;
    ck_assert_int_eq(tally_stream_next(s, &e, 0), TALLY_timed_out);
    open_account(f.c, 4);
    open_account(f.c, 5);
    reader r = {.expected = 4};
    stream_take(s, &r);
    stream_take(s, &r);
    tally_stream_close(s);
    test_client_down(&f);
}
END_TEST

START_TEST(test_bad_arguments)
{
    test_client_fixture f;
    test_client_up(&f);
    tally_stream *s = NULL;
    tally_stream_options big = {.fill_events = TALLY_STREAM_FILL_EVENTS_MAX + 1};
    ck_assert_int_eq(tally_stream_open(NULL, NULL, 1, NULL, &s), TALLY_invalid_argument);
    ck_assert_int_eq(tally_stream_open(f.c, NULL, 1, NULL, NULL), TALLY_invalid_argument);
    ck_assert_int_eq(tally_stream_open(f.c, NULL, 1, &big, &s), TALLY_invalid_argument);
    ck_assert_int_eq(tally_stream_open(f.c, "nonsense://x", 1, NULL, &s),
                     TALLY_invalid_argument);
    ck_assert_ptr_null(s);
    ck_assert_int_eq(tally_stream_next(NULL, NULL, 0), TALLY_invalid_argument);
    tally_stream_close(NULL);
    /* An unreachable server: "now" cannot be known. */
    tally_client_options o = {.url = "ipc:///nonexistent-tally-stream/req.sock",
                              .timeout_ms = 300, .retries_set = true};
    tally_client *dead = NULL;
    ck_assert_int_eq(tally_client_open(&o, &dead), TALLY_ok);
    ck_assert_int_eq(tally_stream_open(dead, NULL, TALLY_STREAM_FROM_NOW, NULL, &s),
                     TALLY_unreachable);
    tally_client_close(dead);
    test_client_down(&f);
}
END_TEST

/* ---- a forged publisher ---- */

#define FORGER_TRIES 100
#define FORGER_WAIT_MS 200

typedef struct forger {
    test_client_fixture f;
    nng_socket pub;
    char url[400];
    tally_stream *s;
    tally_event real[2]; /* the log's events 1 and 2 (forger_write) */
} forger;

/* Open account seq (event seq) and keep its event in g->real[seq - 1]. */
static void forger_write(forger *g, uint64_t seq)
{
    test_client_open_accounts(g->f.c, seq, 1);
    size_t count = 0;
    uint64_t head = 0;
    ck_assert_int_eq(tally_log_read(g->f.c, seq, 1, 0, &g->real[seq - 1], 1, &count, &head),
                     TALLY_ok);
    ck_assert_uint_eq(count, 1);
    ck_assert_uint_eq(g->real[seq - 1].seq, seq);
}

/* tallyd with event 1, a PUB socket of the test's own, and a stream
 * from seq 1 that listens to it (and never polls on its own: idle 30 s). */
static void forger_up(forger *g)
{
    memset(g, 0, sizeof(*g));
    test_client_up(&g->f);
    forger_write(g, 1);
    snprintf(g->url, sizeof(g->url), "ipc://%s/forger.sock", g->f.srv.dir);
    ck_assert_int_eq(nng_pub0_open(&g->pub), 0);
    ck_assert_int_eq(nng_listen(g->pub, g->url, NULL, 0), 0);
    tally_stream_options o = {.idle_ms = TALLY_STREAM_IDLE_MS_MAX};
    ck_assert_int_eq(tally_stream_open(g->f.c, g->url, 1, &o, &g->s), TALLY_ok);
}

static void forger_down(forger *g)
{
    tally_stream_close(g->s);
    nng_close(g->pub);
    tally_events_release(g->real, 2);
    test_client_down(&g->f);
}

/* Publish bytes until the stream hands out an event (PUB sends only once
 * the subscription is up, so the first copies may be lost); it must be the
 * log's event expected, read with log_read, and the forgery refused. */
static void forger_expect_real(forger *g, const void *bytes, size_t len, const tally_event *expected)
{
    tally_stream_counters before, after;
    tally_stream_counters_get(g->s, &before);
    tally_event e;
    int rc = TALLY_timed_out;
    for (int i = 0; i < FORGER_TRIES && rc == TALLY_timed_out; i++) {
        nng_msg *m;
        ck_assert_int_eq(nng_msg_alloc(&m, 0), 0);
        ck_assert_int_eq(nng_msg_append(m, bytes, len), 0);
        ck_assert_int_eq(nng_sendmsg(g->pub, m, 0), 0);
        rc = tally_stream_next(g->s, &e, FORGER_WAIT_MS);
    }
    ck_assert_msg(rc == TALLY_ok, "no event: %s", tally_strerror(rc));
    ck_assert_uint_eq(e.seq, expected->seq);
    ck_assert_uint_eq(e.raw_len, expected->raw_len);
    ck_assert_msg(memcmp(e.raw, expected->raw, e.raw_len) == 0,
                  "the stream handed out the forged event %" PRIu64, e.seq);
    ck_assert_msg(memcmp(e.hash, expected->hash, sizeof(e.hash)) == 0, "hash as the log's");
    tally_events_release(&e, 1);
    tally_stream_counters_get(g->s, &after);
    ck_assert_uint_ge(after.refused - before.refused, 1);
    ck_assert_uint_eq(after.from_publish, before.from_publish);
    ck_assert_uint_eq(after.from_fill - before.from_fill, 1);
}

/* The real event 1 with one byte of its hash changed: still msgpack of the
 * right shape, but its bytes no longer match its hash. */
static void forger_damaged_first(forger *g)
{
    static uint8_t damaged[TALLY_EVENT_BYTES_MAX];
    memcpy(damaged, g->real[0].raw, g->real[0].raw_len);
    damaged[g->real[0].raw_len - 1] ^= 0x01;
    forger_expect_real(g, damaged, g->real[0].raw_len, &g->real[0]);
}

START_TEST(test_event_failing_its_hash_is_refused)
{
    forger g;
    forger_up(&g);
    forger_damaged_first(&g);
    forger_down(&g);
}
END_TEST

static int pack_empty_body(msgpack_packer *pk, const void *ctx)
{
    (void)ctx; /* one part, as an account event's body has */
    return msgpack_pack_array(pk, 1) || msgpack_pack_nil(pk);
}

/* After event 1, an event 2 with a hash of its own that is right, but a
 * prev_hash that is not event 1's hash: a forgery that only the chain
 * reveals. */
START_TEST(test_event_not_chained_is_refused)
{
    forger g;
    forger_up(&g);
    forger_damaged_first(&g); /* event 1, read with log_read */
    forger_write(&g, 2);         /* the stream knows no head past 1: it listens */
    log_event_draft d = {.type = LOG_EVENT_ACCOUNT_OPENED,
                         .entity = {.kind = LOG_ENTITY_ACCOUNT, .account_id = 2},
                         .entity_version = 1,
                         .time_ms = g.real[1].time_ms,
                         .pack_body = pack_empty_body};
    uint8_t wrong_prev[LOG_HASH_BYTES], hash[LOG_HASH_BYTES];
    static uint8_t buf[TALLY_EVENT_BYTES_MAX];
    memset(wrong_prev, 0x55, sizeof(wrong_prev));
    tally_id128 id;
    memcpy(id.bytes, g.real[1].id.bytes, 16);
    size_t len;
    ck_assert_int_eq(log_event_encode(&d, 2, &id, wrong_prev, buf, sizeof(buf), &len, hash),
                     TALLY_ok);
    msgpack_unpacked up;
    log_event ev;
    msgpack_unpacked_init(&up);
    ck_assert_int_eq(log_event_decode(buf, len, &up, &ev), TALLY_ok); /* sound by itself */
    msgpack_unpacked_destroy(&up);
    forger_expect_real(&g, buf, len, &g.real[1]);
    forger_down(&g);
}
END_TEST

/* ---- closes while events arrive ---- */

#define CLOSE_CYCLES 120

/* NNG 1.5.2 could hang nng_close for good when a message arrived as a
 * pipe closed (clients/transport/sp_pipes.h); an ipc:// pipe is shut down
 * under NNG by its descriptor, found by elimination. Each cycle opens a
 * stream, reads an event that came over PUB (the connection is up and
 * busy), and closes it with events still coming. */
START_TEST(test_stream_closes_while_events_arrive)
{
    test_client_fixture f;
    test_client_up(&f);
    test_client_writer w = {.client = test_client_open(f.srv.url), .first_id = 1};
    test_client_writer_start(&w);
    uint64_t heard = 0;
    for (int cycle = 0; cycle < CLOSE_CYCLES; cycle++) {
        uint64_t got = test_client_stream_cycle(f.c, f.srv.pub_url);
        ck_assert_msg(got > 0, "cycle %d: no event over PUB", cycle);
        heard += got;
    }
    ck_assert_uint_gt(test_client_writer_stop(&w), 0);
    ck_assert_uint_ge(heard, CLOSE_CYCLES);
    tally_client_close(w.client);
    test_client_down(&f);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("stream");
    TCase *tc = tcase_create("stream");
    tcase_set_timeout(tc, TEST_TIMEOUT_S);
    tcase_add_test(tc, test_slow_reader_gets_every_seq_through_gap_fill);
    tcase_add_test(tc, test_published_events_already_read_are_dropped);
    tcase_add_test(tc, test_silent_publisher_is_covered_by_polls);
    tcase_add_test(tc, test_from_now_starts_after_the_head);
    tcase_add_test(tc, test_bad_arguments);
    tcase_add_test(tc, test_event_failing_its_hash_is_refused);
    tcase_add_test(tc, test_event_not_chained_is_refused);
    tcase_add_test(tc, test_stream_closes_while_events_arrive);
    suite_add_tcase(s, tc);
    return test_run_suite(s);
}
