/*
 * client_support.c — see client_support.h.
 */
#include "tests/support/client_support.h"

#include "common/clock.h"
#include "tests/support/wait.h"

#include <check.h>
#include <inttypes.h>
#include <string.h>
#include <time.h>

void test_client_up(test_client_fixture *f)
{
    memset(f, 0, sizeof(*f));
    tallyd_start(&f->srv);
    f->c = test_client_open(f->srv.url);
}

void test_client_down(test_client_fixture *f)
{
    tally_client_close(f->c);
    tallyd_cleanup(&f->srv);
}

tally_client *test_client_open(const char *url)
{
    tally_client_options o = {.url = url, .consumer = "test", .timeout_ms = 10000};
    tally_client *c = NULL;
    int rc = tally_client_open(&o, &c);
    ck_assert_msg(rc == TALLY_ok, "tally_client_open: %s", tally_strerror(rc));
    return c;
}

void test_client_open_accounts(tally_client *c, uint64_t first_id, uint64_t n)
{
    tally_result results[TEST_CLIENT_BATCH_OPS];
    for (uint64_t done = 0; done < n;) {
        tally_batch *b = tally_batch_new(false);
        ck_assert_ptr_nonnull(b);
        size_t count = 0;
        for (; count < TEST_CLIENT_BATCH_OPS && done + count < n; count++) {
            tally_account_open_args a = {.id = first_id + done + count, .ledger = 1, .code = 1};
            ck_assert_int_eq(tally_batch_account_open(b, NULL, &a), TALLY_ok);
        }
        int rc = tally_batch_send(c, b, NULL, results, count);
        ck_assert_msg(rc == TALLY_ok, "batch of account opens: %s", tally_strerror(rc));
        for (size_t i = 0; i < count; i++)
            ck_assert_msg(results[i].code == TALLY_ok, "open %" PRIu64 ": %s",
                          first_id + done + i, tally_strerror(results[i].code));
        tally_batch_free(b);
        done += count;
    }
}

uint64_t test_client_head(tally_client *c)
{
    tally_stats s;
    int rc = tally_stats_get(c, &s);
    ck_assert_msg(rc == TALLY_ok, "stats: %s", tally_strerror(rc));
    return s.head_seq;
}

static void *writer_main(void *arg)
{
    test_client_writer *w = arg;
    for (uint64_t id = w->first_id; !atomic_load(&w->stop); id++) {
        tally_account_open_args a = {.id = id, .ledger = 1, .code = 1};
        tally_result r;
        if (tally_account_open(w->client, NULL, &a, &r) == TALLY_ok)
            w->written++;
    }
    return NULL;
}

void test_client_writer_start(test_client_writer *w)
{
    atomic_store(&w->stop, false);
    w->written = 0;
    ck_assert_int_eq(pthread_create(&w->thread, NULL, writer_main, w), 0);
}

uint64_t test_client_writer_stop(test_client_writer *w)
{
    atomic_store(&w->stop, true);
    ck_assert_int_eq(pthread_join(w->thread, NULL), 0);
    return w->written;
}

uint64_t test_client_stream_cycle(tally_client *c, const char *pub_url)
{
    tally_stream *s;
    ck_assert_int_eq(tally_stream_open(c, pub_url, TALLY_STREAM_FROM_NOW, NULL, &s), TALLY_ok);
    tally_stream_counters n = {0};
    for (int64_t until = test_deadline_ms(60000);
         n.from_publish == 0 && clock_mono_ms() < until;) {
        tally_event ev;
        ck_assert_int_eq(tally_stream_next(s, &ev, 10000), TALLY_ok);
        tally_events_release(&ev, 1);
        tally_stream_counters_get(s, &n);
    }
    tally_stream_close(s);
    return n.from_publish;
}
