/*
 * client_support.c — see client_support.h.
 */
#include "tests/support/client_support.h"

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
