/*
 * check_balances.c — tests of ledger/balances.c: an account's balances
 * after each transfer event of its history, by time and by seq
 * (account_balances, balance_at; TigerBeetle's get_account_balances).
 *
 * What must hold:
 *   - each entry holds the account's four balances right after its event,
 *     and its time is the transfer's creation time (an imported one's
 *     given time) or, for a hold's later step, the event's commit time;
 *   - time and seq bounds are inclusive; pages continue exactly where they
 *     stopped, both ways, with nothing repeated or skipped; a range that
 *     ends inside a page has no next page;
 *   - balance_at gives the balances after the last entry at or before the
 *     point, zero before the first;
 *   - the answers agree with a fold of the same transfers done here, over
 *     a history long enough to be spread over "history", a tail and the
 *     recent records (ledger/history.h).
 */
#include "common/error.h"
#include "ledger/balances.h"
#include "tests/support/test_support.h"

#include <check.h>
#include <string.h>

#define ENTRIES 200
#define STEP_MS 1000

typedef struct expected {
    uint64_t seq;
    int64_t ms;
    int64_t debits_posted, credits_posted;
} expected;

/* Transfers between accounts 1 and 2, one per commit, STEP_MS apart, the
 * first ENTRIES / 2 of them imported: what account 1 should show. */
static void build(test_store *ts, expected *e)
{
    int64_t past = ts->now_ms - INT64_C(86400000) * 30;
    ledger_command open = test_cmd_open(1, 1, 0);
    open.u.account_open.flags = LEDGER_ACCOUNT_IMPORTED;
    open.u.account_open.timestamp_ms = past;
    test_setup_ok(ts, open);
    open.u.account_open.id = 2;
    open.u.account_open.timestamp_ms = past + 1;
    test_setup_ok(ts, open);
    int64_t dp = 0, cp = 0;
    for (int i = 0; i < ENTRIES; i++) {
        bool out = i % 3 != 0;
        ledger_command c = test_cmd_transfer((uint64_t)i + 100, out ? 1 : 2, out ? 2 : 1, i + 1);
        if (i < ENTRIES / 2) {
            c.u.transfer.flags = LEDGER_TRANSFER_IMPORTED;
            c.u.transfer.timestamp_ms = past + 10 + (int64_t)i * STEP_MS;
        } else {
            ts->now_ms += STEP_MS;
        }
        ledger_outcome o = test_apply(ts, "b", NULL, &c);
        ck_assert_int_eq(o.code, TALLY_ok);
        *(out ? &dp : &cp) += i + 1;
        e[i] = (expected){o.first_seq, test_transfer(ts, (uint64_t)i + 100).created_ms, dp, cp};
    }
}

static void assert_entry(const ledger_balance *b, const expected *e)
{
    ck_assert_uint_eq(b->seq, e->seq);
    ck_assert_int_eq(b->timestamp_ms, e->ms);
    ck_assert_int_eq(b->debits_posted, e->debits_posted);
    ck_assert_int_eq(b->credits_posted, e->credits_posted);
    ck_assert_int_eq(b->debits_pending, 0);
    ck_assert_int_eq(b->credits_pending, 0);
}

/* Read the whole range of q page by page: the entries' indexes in e. */
static int read_all(test_store *ts, ledger_balances_query q, const expected *e, int *idx)
{
    static ledger_balance page[ENTRIES];
    int n = 0;
    for (int pages = 0; pages <= ENTRIES; pages++) {
        store_txn t;
        uint32_t count;
        uint64_t next;
        ck_assert_int_eq(store_txn_begin(ts->st, NULL, true, &t), TALLY_ok);
        ck_assert_int_eq(ledger_balances_page(&t, &q, page, &count, &next), TALLY_ok);
        store_txn_abort(&t);
        for (uint32_t i = 0; i < count; i++) {
            int j = 0;
            while (j < ENTRIES && e[j].seq != page[i].seq)
                j++;
            ck_assert_int_lt(j, ENTRIES);
            assert_entry(&page[i], &e[j]);
            idx[n++] = j;
        }
        if (next == 0)
            return n;
        q.after_seq = next;
    }
    ck_abort_msg("pages never ended");
    return n;
}

START_TEST(test_ranges_by_time_and_seq)
{
    test_store ts;
    test_store_open(&ts);
    static expected e[ENTRIES];
    build(&ts, e);
    static int idx[ENTRIES];
    struct {
        int64_t tmin, tmax;
        uint64_t smin, smax;
        int first, last; /* the indexes expected, inclusive */
    } cases[] = {
        {0, 0, 0, 0, 0, ENTRIES - 1},
        {e[37].ms, e[150].ms, 0, 0, 37, 150},
        {e[37].ms + 1, e[150].ms - 1, 0, 0, 38, 149},
        {0, 0, e[10].seq, e[120].seq, 10, 120},
        {e[20].ms, 0, 0, e[99].seq, 20, 99},
        {e[99].ms, e[100].ms, 0, 0, 99, 100}, /* across the import's end */
    };
    for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
        for (int reversed = 0; reversed < 2; reversed++) {
            for (uint32_t limit = 1; limit <= 64; limit *= 7) {
                ledger_balances_query q = {.account_id = 1,
                                           .timestamp_min_ms = cases[c].tmin,
                                           .timestamp_max_ms = cases[c].tmax,
                                           .seq_min = cases[c].smin,
                                           .seq_max = cases[c].smax,
                                           .reversed = reversed,
                                           .limit = limit};
                int n = read_all(&ts, q, e, idx);
                ck_assert_msg(n == cases[c].last - cases[c].first + 1,
                              "case %zu reversed %d limit %u: %d entries", c, reversed, limit, n);
                for (int i = 0; i < n; i++)
                    ck_assert_int_eq(idx[i], reversed ? cases[c].last - i : cases[c].first + i);
            }
        }
    }
    ledger_balances_query none = {.account_id = 1, .timestamp_min_ms = e[ENTRIES - 1].ms + 1,
                                  .limit = 10};
    ck_assert_int_eq(read_all(&ts, none, e, idx), 0);
    test_finish(&ts);
}
END_TEST

START_TEST(test_balance_at_a_point)
{
    test_store ts;
    test_store_open(&ts);
    static expected e[ENTRIES];
    build(&ts, e);
    store_txn t;
    ledger_balance b;
    ck_assert_int_eq(store_txn_begin(ts.st, NULL, true, &t), TALLY_ok);
    for (int i = 0; i < ENTRIES; i += 7) {
        ck_assert_int_eq(ledger_balance_at(&t, 1, true, e[i].ms, 0, &b), TALLY_ok);
        assert_entry(&b, &e[i]);
        ck_assert_int_eq(ledger_balance_at(&t, 1, true, e[i].ms + 1, 0, &b), TALLY_ok);
        assert_entry(&b, &e[i]);
        ck_assert_int_eq(ledger_balance_at(&t, 1, false, 0, e[i].seq, &b), TALLY_ok);
        assert_entry(&b, &e[i]);
    }
    ck_assert_int_eq(ledger_balance_at(&t, 1, true, e[0].ms - 1, 0, &b), TALLY_ok);
    ck_assert_uint_eq(b.seq, 0);
    ck_assert_int_eq(b.debits_posted + b.credits_posted, 0);
    ck_assert_int_eq(ledger_balance_at(&t, 1, false, 0, e[0].seq - 1, &b), TALLY_ok);
    ck_assert_uint_eq(b.seq, 0);
    ck_assert_int_eq(ledger_balance_at(&t, 1, false, 0, UINT64_MAX, &b), TALLY_ok);
    assert_entry(&b, &e[ENTRIES - 1]);
    ck_assert_int_eq(ledger_balance_at(&t, 1, true, INT64_MAX, 0, &b), TALLY_ok);
    assert_entry(&b, &e[ENTRIES - 1]);
    store_txn_abort(&t);
    test_finish(&ts);
}
END_TEST

START_TEST(test_a_hold_steps_at_its_commit_time)
{
    test_store ts;
    test_store_open(&ts);
    test_open_bank_user_merchant(&ts);
    test_setup_ok(&ts, test_cmd_transfer(501, TEST_BANK, TEST_USER, 100));
    ts.now_ms += 5000;
    test_setup_ok(&ts, test_cmd_hold(502, TEST_USER, TEST_MERCHANT, 40, 0));
    ts.now_ms += 5000;
    test_setup_ok(&ts, test_cmd_post(502, 30));
    store_txn t;
    ledger_balance page[8];
    uint32_t n;
    uint64_t next;
    ledger_balances_query q = {.account_id = TEST_USER, .limit = 8};
    ck_assert_int_eq(store_txn_begin(ts.st, NULL, true, &t), TALLY_ok);
    ck_assert_int_eq(ledger_balances_page(&t, &q, page, &n, &next), TALLY_ok);
    ck_assert_uint_ge(n, 3); /* the setup's own entries, then ours */
    ck_assert_uint_eq(next, 0);
    const ledger_balance *hold = &page[n - 2], *posted = &page[n - 1];
    ck_assert_int_eq(hold->debits_pending, 40);
    ck_assert_int_eq(posted->debits_pending, 0);
    ck_assert_int_eq(posted->debits_posted - hold->debits_posted, 30);
    ck_assert_int_eq(posted->timestamp_ms, ts.now_ms);
    ck_assert_int_eq(hold->timestamp_ms, ts.now_ms - 5000);
    q.timestamp_min_ms = ts.now_ms;
    ck_assert_int_eq(ledger_balances_page(&t, &q, page, &n, &next), TALLY_ok);
    ck_assert_uint_eq(n, 1);
    q.timestamp_min_ms = 0;
    q.limit = 0;
    ck_assert_int_eq(ledger_balances_page(&t, &q, page, &n, &next), TALLY_invalid_argument);
    store_txn_abort(&t);
    test_finish(&ts);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("balances");
    TCase *tc = tcase_create("balances");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_ranges_by_time_and_seq);
    tcase_add_test(tc, test_balance_at_a_point);
    tcase_add_test(tc, test_a_hold_steps_at_its_commit_time);
    suite_add_tcase(s, tc);
    return test_run_suite(s);
}
