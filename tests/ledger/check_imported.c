/*
 * check_imported.c — tests of ledger/imported.c and the imported flag of
 * account_open and transfer: records created with a caller-given time.
 *
 * What must hold (TigerBeetle's import rules, its result codes for the
 * same inputs):
 *   - the flag needs a time and a time needs the flag
 *     (imported_event_timestamp_out_of_range, timestamp_must_be_zero);
 *   - an imported hold has no timeout (imported_event_timeout_must_be_zero);
 *   - the time is before the commit time
 *     (imported_event_timestamp_must_not_advance) and after every time
 *     the store holds, an import's own included: strictly increasing
 *     (imported_event_timestamp_must_not_regress);
 *   - a chain is all imported or none (imported_event_expected,
 *     imported_event_not_expected, at the first member that differs);
 *   - the record keeps the given time and the flag; any event that is not
 *     an import closes the import up to its commit time;
 *   - a refusal writes nothing; a replayed key answers the same.
 */
#include "common/error.h"
#include "ledger/imported.h"
#include "ledger/query.h"
#include "tests/support/test_support.h"

#include <check.h>
#include <string.h>

#define PAST (TEST_NOW_MS - INT64_C(86400000) * 365) /* a year before the commit time */

static ledger_command imported_open(uint64_t id, int64_t ms)
{
    ledger_command c = test_cmd_open(id, 1, 0);
    c.u.account_open.flags |= LEDGER_ACCOUNT_IMPORTED;
    c.u.account_open.timestamp_ms = ms;
    return c;
}

static ledger_command imported_transfer(uint64_t tid, uint64_t debit, uint64_t credit,
                                        int64_t amount, int64_t ms)
{
    ledger_command c = test_cmd_transfer(tid, debit, credit, amount);
    c.u.transfer.flags |= LEDGER_TRANSFER_IMPORTED;
    c.u.transfer.timestamp_ms = ms;
    return c;
}

static void assert_refused(test_store *ts, const ledger_command *cmd, int code)
{
    test_snapshot before = test_take_snapshot(ts);
    ledger_outcome out = test_apply(ts, "importer", NULL, cmd);
    ck_assert_str_eq(tally_strerror(out.code), tally_strerror(code));
    ck_assert_uint_eq(out.event_count, 0);
    test_assert_unchanged(ts, &before);
}

START_TEST(test_imported_records_keep_their_time)
{
    test_store ts;
    test_store_open(&ts);
    test_setup_ok(&ts, imported_open(1, PAST));
    test_setup_ok(&ts, imported_open(2, PAST + 1));
    test_setup_ok(&ts, imported_transfer(10, 1, 2, 70, PAST + 5));
    ledger_command hold = imported_transfer(11, 1, 2, 30, PAST + 6);
    hold.u.transfer.flags |= LEDGER_TRANSFER_PENDING;
    test_setup_ok(&ts, hold);
    ledger_account a = test_account(&ts, 1);
    ck_assert_int_eq(a.created_ms, PAST);
    ck_assert_uint_eq(a.flags, LEDGER_ACCOUNT_IMPORTED);
    ledger_transfer_record r = test_transfer(&ts, 10);
    ck_assert_int_eq(r.created_ms, PAST + 5);
    ck_assert_uint_eq(r.flags, LEDGER_TRANSFER_IMPORTED);
    ck_assert_int_eq(test_transfer(&ts, 11).created_ms, PAST + 6);
    test_assert_balances(&ts, 1, 70, 0, 30, 0);
    int64_t watermark;
    store_txn t;
    ck_assert_int_eq(store_txn_begin(ts.st, NULL, true, &t), TALLY_ok);
    ck_assert_int_eq(ledger_imported_watermark(&t, &watermark), TALLY_ok);
    store_txn_abort(&t);
    ck_assert_int_eq(watermark, PAST + 6);
    test_assert_invariants(&ts);
    test_finish(&ts);
}
END_TEST

START_TEST(test_stateless_rules)
{
    test_store ts;
    test_store_open(&ts);
    test_setup_ok(&ts, imported_open(1, PAST));
    test_setup_ok(&ts, imported_open(2, PAST + 1));
    ledger_command c = imported_open(3, 0);
    assert_refused(&ts, &c, TALLY_imported_event_timestamp_out_of_range);
    c = imported_open(3, -5);
    assert_refused(&ts, &c, TALLY_imported_event_timestamp_out_of_range);
    c = test_cmd_open(3, 1, 0);
    c.u.account_open.timestamp_ms = PAST + 2;
    assert_refused(&ts, &c, TALLY_timestamp_must_be_zero);
    c = test_cmd_transfer(20, 1, 2, 5);
    c.u.transfer.timestamp_ms = PAST + 2;
    assert_refused(&ts, &c, TALLY_timestamp_must_be_zero);
    c = imported_transfer(20, 1, 2, 5, 0);
    assert_refused(&ts, &c, TALLY_imported_event_timestamp_out_of_range);
    c = imported_transfer(20, 1, 2, 5, PAST + 2);
    c.u.transfer.flags |= LEDGER_TRANSFER_PENDING;
    c.u.transfer.timeout_s = 60;
    assert_refused(&ts, &c, TALLY_imported_event_timeout_must_be_zero);
    test_finish(&ts);
}
END_TEST

START_TEST(test_times_strictly_increase_and_stay_past)
{
    test_store ts;
    test_store_open(&ts);
    test_setup_ok(&ts, imported_open(1, PAST));
    ledger_command c = imported_open(2, PAST);
    assert_refused(&ts, &c, TALLY_imported_event_timestamp_must_not_regress); /* unique */
    c = imported_open(2, PAST - 1);
    assert_refused(&ts, &c, TALLY_imported_event_timestamp_must_not_regress);
    c = imported_open(2, ts.now_ms);
    assert_refused(&ts, &c, TALLY_imported_event_timestamp_must_not_advance);
    c = imported_open(2, ts.now_ms + 1000);
    assert_refused(&ts, &c, TALLY_imported_event_timestamp_must_not_advance);
    test_setup_ok(&ts, imported_open(2, PAST + 1));
    c = imported_transfer(20, 1, 2, 5, PAST + 1); /* the account's own time */
    assert_refused(&ts, &c, TALLY_imported_event_timestamp_must_not_regress);
    test_setup_ok(&ts, imported_transfer(10, 1, 2, 5, PAST + 2));
    /* A live event closes the import up to its commit time. */
    ts.now_ms += 1000;
    test_setup_ok(&ts, test_cmd_transfer(11, 1, 2, 5));
    ts.now_ms += 1000;
    c = imported_transfer(21, 1, 2, 5, PAST + 3);
    assert_refused(&ts, &c, TALLY_imported_event_timestamp_must_not_regress);
    c = imported_transfer(22, 1, 2, 5, ts.now_ms - 1000);
    assert_refused(&ts, &c, TALLY_imported_event_timestamp_must_not_regress);
    test_setup_ok(&ts, imported_transfer(12, 1, 2, 5, ts.now_ms - 999));
    test_assert_balances(&ts, 1, 15, 0, 0, 0);
    /* a refused transfer's id stays failed, as for any transfer */
    c = imported_transfer(20, 1, 2, 5, ts.now_ms - 998);
    assert_refused(&ts, &c, TALLY_id_already_failed);
    test_assert_invariants(&ts);
    test_finish(&ts);
}
END_TEST

START_TEST(test_a_chain_is_all_imported_or_none)
{
    test_store ts;
    test_store_open(&ts);
    test_setup_ok(&ts, imported_open(1, PAST));
    test_setup_ok(&ts, imported_open(2, PAST + 1));
    ledger_command members[2] = {imported_transfer(10, 1, 2, 5, PAST + 2),
                                 test_cmd_transfer(11, 1, 2, 5)};
    ledger_command chain = {.kind = LEDGER_CHAIN, .u.chain = {members, 2}};
    ledger_outcome out = test_apply(&ts, "importer", "c1", &chain);
    ck_assert_str_eq(tally_strerror(out.code), "imported_event_expected");
    members[0] = test_cmd_transfer(10, 1, 2, 5);
    members[1] = imported_transfer(11, 1, 2, 5, PAST + 2);
    out = test_apply(&ts, "importer", "c2", &chain);
    ck_assert_str_eq(tally_strerror(out.code), "imported_event_not_expected");
    ck_assert(!test_transfer_exists(&ts, 10));
    members[0] = imported_transfer(10, 1, 2, 5, PAST + 2);
    members[1] = imported_transfer(11, 1, 2, 5, PAST + 3);
    ck_assert_int_eq(test_code(&ts, &chain), TALLY_ok);
    ck_assert_int_eq(test_transfer(&ts, 11).created_ms, PAST + 3);
    test_finish(&ts);
}
END_TEST

START_TEST(test_a_replay_answers_the_same)
{
    test_store ts;
    test_store_open(&ts);
    test_setup_ok(&ts, imported_open(1, PAST));
    test_setup_ok(&ts, imported_open(2, PAST + 1));
    ledger_command c = imported_transfer(10, 1, 2, 5, PAST + 2);
    ck_assert_int_eq(test_apply(&ts, "importer", "k", &c).code, TALLY_ok);
    ledger_outcome again = test_apply(&ts, "importer", "k", &c);
    ck_assert_int_eq(again.code, TALLY_ok);
    ck_assert(again.replayed);
    c.u.transfer.timestamp_ms = PAST + 3; /* the time is part of the command */
    ck_assert_int_eq(test_apply(&ts, "importer", "k", &c).code, TALLY_idempotency_key_reused);
    /* the same id under another key: the transfer exists */
    ck_assert_int_eq(test_apply(&ts, "importer", "k2", &c).code, TALLY_exists);
    test_finish(&ts);
}
END_TEST

/* The transfers a query finds, in order, by the low byte of their ids. */
typedef struct found_ids {
    uint8_t ids[16];
    uint32_t count;
} found_ids;

static int add_found(const ledger_transfer_record *r, void *ctx)
{
    found_ids *f = ctx;
    if (f->count < sizeof(f->ids))
        f->ids[f->count] = r->id.bytes[15];
    f->count++;
    return TALLY_ok;
}

static found_ids query_ids(test_store *ts, ledger_query q)
{
    found_ids f = {.count = 0};
    ledger_query_page page;
    store_txn t;
    ck_assert_int_eq(store_txn_begin(ts->st, NULL, true, &t), TALLY_ok);
    ck_assert_int_eq(ledger_transfer_query(&t, &q, add_found, &f, &page), TALLY_ok);
    store_txn_abort(&t);
    ck_assert(!page.has_next);
    return f;
}

/* Time ranges select imported transfers by their given times, not by the
 * commit time of their events: account_transfers walks the history and
 * transfer_query without a filter the log, both ordered by creation time. */
START_TEST(test_time_ranges_select_imported_transfers_by_their_time)
{
    test_store ts;
    test_store_open(&ts);
    test_setup_ok(&ts, imported_open(1, PAST));
    test_setup_ok(&ts, imported_open(2, PAST + 1));
    for (uint64_t i = 0; i < 6; i++) /* transfers 10..15 at PAST + 100, 200, ... */
        test_setup_ok(&ts, imported_transfer(10 + i, 1, 2, 1, PAST + 100 * (int64_t)(i + 1)));
    test_setup_ok(&ts, test_cmd_transfer(16, 1, 2, 1)); /* live: at the commit time */
    ledger_query range = {.limit = 100, .timestamp_min_ms = PAST + 200,
                          .timestamp_max_ms = PAST + 400};
    ledger_query by_account = range;
    by_account.account_id = 2;
    by_account.credits = true;
    for (int reversed = 0; reversed <= 1; reversed++) {
        range.reversed = by_account.reversed = reversed;
        found_ids all = query_ids(&ts, range), acct = query_ids(&ts, by_account);
        ck_assert_uint_eq(all.count, 3);
        ck_assert_uint_eq(acct.count, 3);
        for (uint32_t i = 0; i < 3; i++) {
            uint8_t want = (uint8_t)(reversed ? 13 - i : 11 + i);
            ck_assert_uint_eq(all.ids[i], want);
            ck_assert_uint_eq(acct.ids[i], want);
        }
    }
    ledger_query live = {.limit = 100, .timestamp_min_ms = PAST + 601};
    found_ids l = query_ids(&ts, live);
    ck_assert_uint_eq(l.count, 1);
    ck_assert_uint_eq(l.ids[0], 16);
    test_finish(&ts);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("imported");
    TCase *tc = tcase_create("imported");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_imported_records_keep_their_time);
    tcase_add_test(tc, test_stateless_rules);
    tcase_add_test(tc, test_times_strictly_increase_and_stay_past);
    tcase_add_test(tc, test_a_chain_is_all_imported_or_none);
    tcase_add_test(tc, test_a_replay_answers_the_same);
    tcase_add_test(tc, test_time_ranges_select_imported_transfers_by_their_time);
    suite_add_tcase(s, tc);
    return test_run_suite_both_modes(s);
}
