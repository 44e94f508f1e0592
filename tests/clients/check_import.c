/*
 * check_import.c — imported history end to end: a real tallyd, libtally's
 * batches over the msgpack wire, tally-recon on the store.
 *
 * A history of TALLY_IMPORT_TRANSFERS transfers (default 100000; make
 * check runs it at that size) between 100 accounts, every one with its
 * original time, strictly increasing and in the past, is imported in
 * batches of 1000; a few are holds left pending. The test folds the same
 * transfers itself and then requires:
 *   - every write ok, and each record's creation time the given one;
 *   - balance_at at a time in the middle of the history equals the
 *     test's own fold up to that time, for every account, and account 1's
 *     balances up to then, read in pages, are one entry per transfer,
 *     the last the fold's;
 *   - `tally-recon --statement` of the test's balances matches the store
 *     (every check ok);
 *   - after the import a live transfer is accepted, and an import older
 *     than it is refused (imported_event_timestamp_must_not_regress); a
 *     batch that mixes imported and live writes is refused member by
 *     member (imported_event_not_expected after a live first), nothing of
 *     it applied.
 */
#include "clients/libtally/tally.h"
#include "tests/support/run.h"
#include "tests/support/tallyd_harness.h"
#include "tests/support/test_support.h"

#include <check.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ACCOUNTS 100
#define BATCH 1000
#define T0 INT64_C(1262304000000) /* 2010-01-01 */

typedef struct fold {
    int64_t dp, cp, dpend, cpend;
} fold;

static fold balances[ACCOUNTS + 1], at_mid[ACCOUNTS + 1];
static uint64_t entries_to_mid; /* account 1's transfers up to the middle */

static tally_client *client_for(const char *url)
{
    tally_client_options o = {.url = url, .consumer = "importer", .timeout_ms = 60000,
                              .no_autobatch = true};
    tally_client *c = NULL;
    ck_assert_int_eq(tally_client_open(&o, &c), TALLY_ok);
    return c;
}

static void send_ok(tally_client *c, tally_batch *b, tally_result *results)
{
    size_t n = tally_batch_count(b);
    int rc = tally_batch_send(c, b, NULL, results, n);
    ck_assert_msg(rc == TALLY_ok, "batch: %s", tally_strerror(rc));
    for (size_t i = 0; i < n; i++)
        ck_assert_msg(results[i].code == TALLY_ok, "member %zu: %s", i,
                      tally_strerror(results[i].code));
}

static void transfer_args(tally_transfer_args *t, uint64_t n, uint64_t dr, uint64_t cr,
                          int64_t amount, int64_t ms)
{
    memset(t, 0, sizeof(*t));
    t->id.bytes[15] = (uint8_t)n, t->id.bytes[14] = (uint8_t)(n >> 8);
    t->id.bytes[13] = (uint8_t)(n >> 16), t->id.bytes[12] = (uint8_t)(n >> 24);
    t->id.bytes[0] = 0x11;
    t->debit_account_id = dr;
    t->credit_account_id = cr;
    t->amount = amount;
    t->ledger = 1;
    t->code = 1;
    t->flags = TALLY_TRANSFER_IMPORTED;
    t->timestamp_ms = ms;
}

/* The statement file of the test's balances (CSV). */
static void write_statement(const char *path)
{
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fprintf(f, "account_id,debits_posted,credits_posted,debits_pending,credits_pending\n");
    for (int a = 1; a <= ACCOUNTS; a++)
        fprintf(f, "%d,%" PRId64 ",%" PRId64 ",%" PRId64 ",%" PRId64 "\n", a, balances[a].dp,
                balances[a].cp, balances[a].dpend, balances[a].cpend);
    ck_assert_int_eq(fclose(f), 0);
}

START_TEST(test_import_a_history_and_reconcile)
{
    uint64_t transfers = test_env_u64("TALLY_IMPORT_TRANSFERS", 100000);
    tallyd_proc srv;
    memset(&srv, 0, sizeof(srv));
    tallyd_start(&srv);
    tally_client *c = client_for(srv.url);
    static tally_result results[BATCH];
    tally_batch *b = tally_batch_new(false);
    for (uint64_t a = 1; a <= ACCOUNTS; a++) {
        tally_account_open_args o = {.id = a, .ledger = 1, .code = 1,
                                     .flags = TALLY_ACCOUNT_IMPORTED,
                                     .timestamp_ms = T0 + (int64_t)a};
        ck_assert_int_eq(tally_batch_account_open(b, NULL, &o), TALLY_ok);
    }
    send_ok(c, b, results);
    tally_batch_free(b);

    uint64_t rng = 34;
    int64_t ms = T0 + 1000, mid_ms = 0;
    for (uint64_t n = 0; n < transfers; n += BATCH) {
        b = tally_batch_new(false);
        for (uint64_t i = n; i < n + BATCH && i < transfers; i++) {
            uint64_t dr = 1 + test_rng_below(&rng, ACCOUNTS);
            uint64_t cr = 1 + (dr + test_rng_below(&rng, ACCOUNTS - 1)) % ACCOUNTS;
            int64_t amount = 1 + (int64_t)test_rng_below(&rng, 100000);
            ms += 1 + (int64_t)test_rng_below(&rng, 60000);
            tally_transfer_args t;
            transfer_args(&t, i + 1, dr, cr, amount, ms);
            bool hold = i % 997 == 0;
            if (hold)
                t.flags |= TALLY_TRANSFER_PENDING;
            ck_assert_int_eq(tally_batch_transfer(b, NULL, &t), TALLY_ok);
            if ((dr == 1 || cr == 1) && i <= transfers / 2)
                entries_to_mid++;
            *(hold ? &balances[dr].dpend : &balances[dr].dp) += amount;
            *(hold ? &balances[cr].cpend : &balances[cr].cp) += amount;
            if (i == transfers / 2) {
                mid_ms = ms;
                memcpy(at_mid, balances, sizeof(balances));
            }
        }
        send_ok(c, b, results);
        tally_batch_free(b);
    }

    /* The records keep their times; balances at a time in the middle. */
    tally_transfer_info info;
    tally_uuid last;
    tally_transfer_args t;
    transfer_args(&t, transfers, 1, 2, 1, 0);
    last = t.id;
    ck_assert_int_eq(tally_transfer_get(c, &last, &info), TALLY_ok);
    ck_assert_int_eq(info.created_ms, ms);
    for (uint64_t a = 1; a <= ACCOUNTS; a++) {
        tally_balance bal;
        ck_assert_int_eq(tally_balance_at(c, a, true, mid_ms, 0, &bal), TALLY_ok);
        ck_assert_msg(bal.debits_posted == at_mid[a].dp && bal.credits_posted == at_mid[a].cp &&
                          bal.debits_pending == at_mid[a].dpend &&
                          bal.credits_pending == at_mid[a].cpend,
                      "account %" PRIu64 " at %" PRId64 ": %" PRId64 "/%" PRId64 ", wanted %" PRId64
                      "/%" PRId64,
                      a, mid_ms, bal.debits_posted, bal.credits_posted, at_mid[a].dp,
                      at_mid[a].cp);
    }

    /* Account 1's balances up to the middle, in pages: one entry per
     * transfer, the last one the fold's. */
    static tally_balance page[1000];
    tally_balances_query q = {.timestamp_max_ms = mid_ms, .limit = 1000};
    tally_balances_page pg;
    uint64_t seen = 0;
    tally_balance last_entry = {0};
    do {
        ck_assert_int_eq(tally_account_balances(c, 1, &q, page, 1000, &pg), TALLY_ok);
        for (size_t i = 0; i < pg.count; i++, seen++)
            ck_assert_int_le(page[i].timestamp_ms, mid_ms);
        if (pg.count > 0)
            last_entry = page[pg.count - 1];
        q.after_seq = pg.next;
    } while (pg.has_next);
    ck_assert_uint_eq(seen, entries_to_mid);
    ck_assert_int_eq(last_entry.debits_posted, at_mid[1].dp);
    ck_assert_int_eq(last_entry.credits_posted, at_mid[1].cp);
    ck_assert_int_eq(last_entry.debits_pending, at_mid[1].dpend);

    /* tally-recon: the store against the test's own balances. */
    char path[512];
    snprintf(path, sizeof(path), "%s/statement.csv", srv.dir);
    write_statement(path);
    const char *argv[] = {tallyd_program("tally-recon"), "--data", srv.data_dir, "--statement",
                          path, NULL};
    char *out = NULL, *err = NULL;
    int status = test_run(argv, NULL, &out, &err);
    ck_assert_msg(status == 0, "tally-recon exit %d\n%.4000s\n%s", status, out, err);
    ck_assert_msg(strstr(out, "statement") != NULL, "no statement check: %s", out);
    free(out);
    free(err);

    /* After the import: a live transfer, then nothing older imports. */
    tally_result r;
    tally_transfer_args live;
    transfer_args(&live, transfers + 1, 1, 2, 5, 0);
    live.flags = 0;
    ck_assert_int_eq(tally_transfer(c, NULL, &live, &r), TALLY_ok);
    ck_assert_int_eq(r.code, TALLY_ok);
    transfer_args(&t, transfers + 2, 1, 2, 5, ms + 1);
    tally_transfer(c, NULL, &t, &r);
    ck_assert_str_eq(tally_strerror(r.code), "imported_event_timestamp_must_not_regress");
    b = tally_batch_new(false);
    transfer_args(&live, transfers + 3, 1, 2, 5, 0);
    live.flags = 0;
    transfer_args(&t, transfers + 4, 1, 2, 5, 0);
    ck_assert_int_eq(tally_batch_transfer(b, NULL, &live), TALLY_ok);
    t.flags = TALLY_TRANSFER_IMPORTED;
    t.timestamp_ms = ms + 2;
    ck_assert_int_eq(tally_batch_transfer(b, NULL, &t), TALLY_ok);
    ck_assert_int_eq(tally_batch_send(c, b, NULL, results, 2), TALLY_ok);
    ck_assert_int_eq(results[0].code, TALLY_ok);
    ck_assert_str_eq(tally_strerror(results[1].code), "imported_event_not_expected");
    ck_assert_int_eq(tally_transfer_get(c, &t.id, &info), TALLY_not_found);
    tally_batch_free(b);

    tally_client_close(c);
    ck_assert_int_eq(tallyd_stop(&srv), 0);
    tallyd_cleanup(&srv);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("import");
    TCase *tc = tcase_create("import");
    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, test_import_a_history_and_reconcile);
    suite_add_tcase(s, tc);
    return test_run_suite(s);
}
