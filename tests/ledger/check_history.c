/*
 * check_history.c — tests of ledger/history.c's write path: the history
 * entries of a write transaction are collected (log/store.h's collector
 * STORE_COLLECT_HISTORY) and put in bulk, sorted, at the top-level commit.
 *
 * What must hold, as when each entry was put as its transfer applied:
 *   - a command rolled back inside a batch (a rejected chain whose first
 *     member had applied) leaves no entry; its batch-mates keep theirs;
 *   - a nested transaction aborted after collecting leaves none, also
 *     when it had flushed them early, and its parent's pending entries are
 *     written as they were;
 *   - a group of many transfers, holds and posts over few accounts leaves
 *     exactly one entry per account per transfer event, in seq order;
 *   - reads and deletes inside the same write transaction see the pending
 *     entries (ledger_history_has/seqs/del flush first), and a fresh read
 *     transaction sees what the commit wrote.
 * The layout (keys only, paging) is in check_transfer.c; retention's
 * deletes in check_retention.c.
 */
#include "tests/support/test_support.h"

#include "ledger/history.h"

#include <stdio.h>
#include <string.h>

#define GROUP_TRANSFERS 600
#define GROUP_ACCOUNTS 5
#define PAGE_ENTRIES 37 /* pages that do not divide the counts */

/* A fresh store with accounts 1..accounts (committed), and a write
 * transaction t begun on it. */
static void begin_on_fresh_store(test_store *ts, uint64_t accounts, store_txn *t)
{
    test_store_open(ts);
    for (uint64_t id = 1; id <= accounts; id++)
        test_setup_ok(ts, test_cmd_open(id, 1, 0));
    ck_assert_int_eq(store_txn_begin(ts->st, NULL, false, t), TALLY_ok);
}

/* Apply cmd under key in the write transaction t: nested (ledger_apply)
 * or in place; fails the test on a fault. */
static ledger_outcome apply_in(store_txn *t, const char *key, const ledger_command *cmd,
                               bool in_place)
{
    ledger_request req = {.consumer = tally_str_from("history"), .key = tally_str_from(key),
                          .command = *cmd};
    ledger_outcome out;
    int rc = in_place ? ledger_apply_in_place(t, &req, TEST_NOW_MS, &out)
                      : ledger_apply(t, &req, TEST_NOW_MS, &out);
    ck_assert_msg(rc == TALLY_ok, "%s: fault %s", key, tally_strerror(rc));
    return out;
}

/* The account's whole history in t, read forward in pages of
 * PAGE_ENTRIES; returns the count. */
static uint32_t history_in(store_txn *t, uint64_t account, uint64_t *seqs, uint32_t max)
{
    uint32_t total = 0, n;
    uint64_t after = 0;
    do {
        uint32_t want = max - total < PAGE_ENTRIES ? max - total : PAGE_ENTRIES;
        ck_assert_int_eq(ledger_history_seqs(t, account, false, after, seqs + total, want, &n),
                         TALLY_ok);
        total += n;
        if (n > 0)
            after = seqs[total - 1];
    } while (n == PAGE_ENTRIES && total < max);
    return total;
}

/* Fails the test unless the account's history, in a fresh read-only
 * transaction, is exactly want[0..n). */
static void assert_history(test_store *ts, uint64_t account, const uint64_t *want, uint32_t n)
{
    static uint64_t got[2 * GROUP_TRANSFERS + 1];
    store_txn t;
    ck_assert_int_eq(store_txn_begin(ts->st, NULL, true, &t), TALLY_ok);
    uint32_t count = history_in(&t, account, got, 2 * GROUP_TRANSFERS + 1);
    store_txn_abort(&t);
    ck_assert_msg(count == n, "account %llu: %u entries, want %u", (unsigned long long)account,
                  count, n);
    for (uint32_t i = 0; i < n; i++)
        ck_assert_msg(got[i] == want[i], "account %llu entry %u: seq %llu, want %llu",
                      (unsigned long long)account, i, (unsigned long long)got[i],
                      (unsigned long long)want[i]);
}

/* A batch in one write transaction: a transfer, a chain whose first member
 * applies and whose second fails (the chain rolls back), a transfer. The
 * rolled-back member collected entries for accounts 3 and 4 at the seq
 * the last transfer then takes: none may be left. */
static void batch_with_a_failed_middle(bool in_place)
{
    test_store ts;
    store_txn t;
    begin_on_fresh_store(&ts, 4, &t);
    ledger_command first = test_cmd_transfer(100, 1, 2, 5);
    ledger_outcome a = apply_in(&t, "first", &first, in_place);
    ck_assert_int_eq(a.code, TALLY_ok);
    ledger_command members[2] = {test_cmd_transfer(101, 3, 4, 7),
                                 test_cmd_transfer(102, 3, 99, 7)}; /* no account 99 */
    ledger_command chain = {.kind = LEDGER_CHAIN};
    chain.u.chain = (ledger_chain){.members = members, .count = 2};
    ledger_outcome b = apply_in(&t, "chain", &chain, in_place);
    ck_assert_int_ne(b.code, TALLY_ok);
    ck_assert_uint_eq(b.failed_index, 1);
    ledger_command last = test_cmd_transfer(103, 2, 1, 3);
    ledger_outcome c = apply_in(&t, "last", &last, in_place);
    ck_assert_int_eq(c.code, TALLY_ok);
    ck_assert_uint_eq(c.first_seq, a.first_seq + 1); /* the rolled-back member's seq */
    uint64_t seqs[4];
    ck_assert_uint_eq(history_in(&t, 3, seqs, 4), 0); /* read in the same write */
    ck_assert_uint_eq(history_in(&t, 1, seqs, 4), 2);
    ck_assert_int_eq(store_txn_commit(&t), TALLY_ok);

    uint64_t both[2] = {a.first_seq, c.first_seq};
    assert_history(&ts, 1, both, 2);
    assert_history(&ts, 2, both, 2);
    assert_history(&ts, 3, NULL, 0);
    assert_history(&ts, 4, NULL, 0);
    ck_assert_uint_eq(test_history_entries(&ts), 4);
    test_finish(&ts); /* the invariants (tally-recon's checks) find nothing */
}

START_TEST(test_failed_command_in_a_batch_leaves_no_entry)
{
    batch_with_a_failed_middle(false);
}
END_TEST

START_TEST(test_failed_command_in_a_batch_in_place_leaves_no_entry)
{
    batch_with_a_failed_middle(true);
}
END_TEST

/* Collected and aborted in children, around the parent's own entries. The
 * parent collects its keys in descending order, so a child that sorted
 * the parent's bytes in place would leave them reordered. */
START_TEST(test_aborted_child_leaves_none)
{
    test_store ts;
    store_txn t, child;
    begin_on_fresh_store(&ts, 0, &t);
    ck_assert_int_eq(ledger_history_put(&t, 9, 1), TALLY_ok);
    ck_assert_int_eq(ledger_history_put(&t, 1, 2), TALLY_ok);

    /* collects, aborts: nothing of it */
    ck_assert_int_eq(store_txn_begin(ts.st, &t, false, &child), TALLY_ok);
    ck_assert_int_eq(ledger_history_put(&child, 2, 3), TALLY_ok);
    store_txn_abort(&child);

    /* collects, flushes (a read sees its own and the parent's), aborts */
    ck_assert_int_eq(store_txn_begin(ts.st, &t, false, &child), TALLY_ok);
    ck_assert_int_eq(ledger_history_put(&child, 5, 4), TALLY_ok);
    ck_assert_int_eq(ledger_history_has(&child, 5, 4), TALLY_ok);
    ck_assert_int_eq(ledger_history_has(&child, 9, 1), TALLY_ok);
    ck_assert_int_eq(ledger_history_put(&child, 6, 5), TALLY_ok); /* pending again */
    store_txn_abort(&child);
    ck_assert_int_eq(ledger_history_has(&t, 5, 4), TALLY_not_found);

    /* collects, flushes, collects more, commits: all of it */
    ck_assert_int_eq(store_txn_begin(ts.st, &t, false, &child), TALLY_ok);
    ck_assert_int_eq(ledger_history_put(&child, 7, 6), TALLY_ok);
    ck_assert_int_eq(ledger_history_has(&child, 7, 6), TALLY_ok);
    ck_assert_int_eq(ledger_history_put(&child, 7, 8), TALLY_ok);
    ck_assert_int_eq(store_txn_commit(&child), TALLY_ok);
    ck_assert_int_eq(ledger_history_put(&t, 3, 7), TALLY_ok);
    ck_assert_int_eq(store_txn_commit(&t), TALLY_ok);

    static const uint64_t one[] = {1}, two[] = {2}, seven[] = {7}, six_eight[] = {6, 8};
    assert_history(&ts, 9, one, 1);
    assert_history(&ts, 1, two, 1);
    assert_history(&ts, 3, seven, 1);
    assert_history(&ts, 7, six_eight, 2);
    for (uint64_t account = 2; account <= 6; account++)
        if (account != 3)
            assert_history(&ts, account, NULL, 0);
    ck_assert_uint_eq(test_history_entries(&ts), 5);
    test_store_close(&ts); /* entries without events: not for the invariants */
}
END_TEST

/* Many transfers over few accounts in one commit, as a group of tallyd's
 * writer: every fifth a hold, posted a few commands later. Each account's
 * history is exactly the seqs of the transfer events that touched it. */
START_TEST(test_group_of_many_transfers_indexes_each_event)
{
    test_store ts;
    store_txn t;
    begin_on_fresh_store(&ts, GROUP_ACCOUNTS, &t);
    static uint64_t want[GROUP_ACCOUNTS + 1][2 * GROUP_TRANSFERS];
    uint32_t wanted[GROUP_ACCOUNTS + 1] = {0};
    uint64_t rng = 17, events = 0;
    uint64_t held[GROUP_TRANSFERS][2] = {{0}}; /* each command's debit and credit */
    for (uint64_t i = 0; i < GROUP_TRANSFERS; i++) {
        uint64_t debit = 1 + test_rng_below(&rng, GROUP_ACCOUNTS);
        uint64_t credit = 1 + (debit + test_rng_below(&rng, GROUP_ACCOUNTS - 1)) % GROUP_ACCOUNTS;
        ledger_command cmd = i % 5 == 1 ? test_cmd_hold(1000 + i, debit, credit, 2, 3600)
                                        : test_cmd_transfer(1000 + i, debit, credit, 1);
        if (i % 5 == 4) { /* post the hold of three commands ago */
            cmd = test_cmd_post(1000 + i - 3, 2);
            debit = held[i - 3][0];
            credit = held[i - 3][1];
        }
        held[i][0] = debit;
        held[i][1] = credit;
        char key[32];
        snprintf(key, sizeof(key), "group-%llu", (unsigned long long)i);
        ledger_outcome out = apply_in(&t, key, &cmd, i % 2 == 0);
        ck_assert_msg(out.code == TALLY_ok, "%s: %s", key, tally_strerror(out.code));
        ck_assert_uint_eq(out.event_count, 1);
        want[debit][wanted[debit]++] = out.first_seq;
        want[credit][wanted[credit]++] = out.first_seq;
        events++;
    }
    ck_assert_int_eq(store_txn_commit(&t), TALLY_ok);
    for (uint64_t account = 1; account <= GROUP_ACCOUNTS; account++)
        assert_history(&ts, account, want[account], wanted[account]);
    ck_assert_uint_eq(test_history_entries(&ts), 2 * events);
    test_finish(&ts);
}
END_TEST

/* Inside the write that collected them, the entries are there for
 * ledger_history_has, ledger_history_seqs and ledger_history_del (which
 * removes a pending one for good); after the commit, for a fresh read. */
START_TEST(test_reads_in_the_same_write_see_pending_entries)
{
    test_store ts;
    store_txn t;
    begin_on_fresh_store(&ts, 3, &t);
    ledger_command cmd = test_cmd_transfer(200, 1, 2, 5);
    uint64_t first = apply_in(&t, "first", &cmd, true).first_seq;
    ck_assert_int_eq(ledger_history_has(&t, 1, first), TALLY_ok);
    ck_assert_int_eq(ledger_history_has(&t, 2, first), TALLY_ok);
    cmd = test_cmd_transfer(201, 2, 3, 1);
    uint64_t second = apply_in(&t, "second", &cmd, false).first_seq;
    uint64_t seqs[4];
    uint32_t n;
    ck_assert_int_eq(ledger_history_seqs(&t, 2, true, 0, seqs, 4, &n), TALLY_ok);
    ck_assert(n == 2 && seqs[0] == second && seqs[1] == first);
    cmd = test_cmd_transfer(202, 3, 1, 1);
    uint64_t third = apply_in(&t, "third", &cmd, true).first_seq;
    ck_assert_int_eq(ledger_history_del(&t, 3, third), TALLY_ok); /* still pending */
    ck_assert_int_eq(ledger_history_has(&t, 3, third), TALLY_not_found);
    ck_assert_int_eq(store_txn_commit(&t), TALLY_ok);

    uint64_t one[] = {first, third}, two[] = {first, second}, three[] = {second};
    assert_history(&ts, 1, one, 2);
    assert_history(&ts, 2, two, 2);
    assert_history(&ts, 3, three, 1);
    ck_assert_uint_eq(test_history_entries(&ts), 5);
    test_store_close(&ts); /* one entry deleted by hand: not for the invariants */
}
END_TEST

int main(void)
{
    Suite *s = suite_create("history");
    TCase *tc = tcase_create("bulk");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_failed_command_in_a_batch_leaves_no_entry);
    tcase_add_test(tc, test_failed_command_in_a_batch_in_place_leaves_no_entry);
    tcase_add_test(tc, test_aborted_child_leaves_none);
    tcase_add_test(tc, test_group_of_many_transfers_indexes_each_event);
    tcase_add_test(tc, test_reads_in_the_same_write_see_pending_entries);
    suite_add_tcase(s, tc);
    return test_run_suite(s);
}
