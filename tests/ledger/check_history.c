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
 * And of the per-account tails ("history_tail", history.h):
 *   - an account's newest entries wait in its tail and fold into
 *     "history" when they make exactly HISTORY_TAIL_MAX, in one commit or
 *     over many;
 *   - account_history pages (ledger_history_seqs) across the boundary of
 *     index and tail, both ways, with every cursor and small limits, as a
 *     model of the seqs applied says; has and del find tail entries (a
 *     tail emptied by deletes goes);
 *   - an aborted nested transaction leaves the tails (and folds) as they
 *     were;
 *   - a store of format 3 (no "history_tail") reads as empty tails
 *     read-only, and its first writer creates them and marks it current.
 * And of the recent records ("history_recent", history.h):
 *   - each commit appends one; the one after HISTORY_RECENT_RECORDS_MAX
 *     records, or past HISTORY_RECENT_KEYS_MAX keys, folds them all into
 *     the tails; a commit with more keys than that folds at once;
 *   - the history reads the same wherever its entries sit (every test
 *     above runs with them, as their commits leave them); has and del
 *     find entries in records.
 * The layout (keys only, paging) is in check_transfer.c; retention's
 * deletes in check_retention.c.
 */
#include "tests/support/test_support.h"

#include "ledger/history.h"

#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define GROUP_TRANSFERS 600
#define GROUP_ACCOUNTS 5
#define PAGE_ENTRIES 37 /* pages that do not divide the counts */

/* A fresh store with accounts 1..accounts (committed). */
static void fresh_store(test_store *ts, uint64_t accounts)
{
    test_store_open(ts);
    for (uint64_t id = 1; id <= accounts; id++)
        test_setup_ok(ts, test_cmd_open(id, 1, 0));
}

/* fresh_store, and a write transaction t begun on it. */
static void begin_on_fresh_store(test_store *ts, uint64_t accounts, store_txn *t)
{
    fresh_store(ts, accounts);
    ck_assert_int_eq(store_txn_begin(ts->st, NULL, false, t), TALLY_ok);
}

/* Transfers of 1 between accounts 1 and 2, ids from first_id up, each in
 * a commit of its own (with alternate, each the other way than the one
 * before); their seqs into seqs[0..n). */
static void commit_transfers(test_store *ts, uint64_t first_id, uint32_t n, bool alternate,
                             uint64_t *seqs)
{
    for (uint32_t i = 0; i < n; i++) {
        uint64_t debit = alternate ? 1 + i % 2 : 1;
        ledger_command cmd = test_cmd_transfer(first_id + i, debit, 3 - debit, 1);
        seqs[i] = test_apply(ts, "history", NULL, &cmd).first_seq;
    }
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

/* ---- the tails ---- */

/* The seqs of the account's tail record (0: none), read in a fresh read
 * transaction. */
static uint32_t tail_of(test_store *ts, uint64_t account, uint64_t seqs[HISTORY_TAIL_MAX])
{
    store_txn t;
    ck_assert_int_eq(store_txn_begin(ts->st, NULL, true, &t), TALLY_ok);
    uint8_t key[8];
    put_u64_be(key, account);
    MDB_val v;
    uint32_t n = 0;
    int rc = store_get(&t, STORE_DB_HISTORY_TAIL, key, sizeof(key), &v);
    if (rc == TALLY_ok) {
        const char *why = "";
        ck_assert_msg(ledger_history_tail_decode(&v, seqs, &n, &why) == TALLY_ok, "tail: %s", why);
    } else {
        ck_assert_int_eq(rc, TALLY_not_found);
    }
    store_txn_abort(&t);
    return n;
}

/* One transfer per commit between accounts 1 and 2: each commit grows
 * both tails by one, and the sixteenth folds them into "history". Then a
 * group of one commit that brings account 1 from 1 to 21 entries folds
 * them all, and account 3's 20 new ones too. */
START_TEST(test_tail_folds_into_history_at_exactly_sixteen)
{
    test_store ts;
    fresh_store(&ts, 3);
    static uint64_t want[4][64];
    uint32_t wanted[4] = {0};
    uint64_t tail[HISTORY_TAIL_MAX];
    for (uint32_t i = 1; i <= HISTORY_TAIL_MAX + 1; i++) {
        ledger_command cmd = test_cmd_transfer(i, 1, 2, 1);
        ledger_outcome out = test_apply(&ts, "history", NULL, &cmd);
        ck_assert_int_eq(out.code, TALLY_ok);
        want[1][wanted[1]++] = want[2][wanted[2]++] = out.first_seq;
        ck_assert_uint_eq(test_count(&ts, STORE_DB_HISTORY_RECENT), 1); /* the commit's record */
        test_history_fold(&ts);
        ck_assert_uint_eq(test_count(&ts, STORE_DB_HISTORY_RECENT), 0);
        uint32_t in_tail = i % HISTORY_TAIL_MAX;
        ck_assert_uint_eq(test_history_seqs(&ts, NULL), 2 * (i - in_tail));
        ck_assert_uint_eq(test_count(&ts, STORE_DB_HISTORY_TAIL), in_tail ? 2 : 0);
        ck_assert_uint_eq(tail_of(&ts, 1, tail), in_tail);
        for (uint32_t k = 0; k < in_tail; k++)
            ck_assert_uint_eq(tail[k], want[1][wanted[1] - in_tail + k]);
        assert_history(&ts, 1, want[1], wanted[1]);
    }
    store_txn t;
    ck_assert_int_eq(store_txn_begin(ts.st, NULL, false, &t), TALLY_ok);
    for (uint64_t i = 0; i < 20; i++) {
        ledger_command cmd = test_cmd_transfer(100 + i, 1, 3, 1);
        char key[32];
        snprintf(key, sizeof(key), "group-%llu", (unsigned long long)i);
        ledger_outcome out = apply_in(&t, key, &cmd, i % 2 == 0);
        ck_assert_int_eq(out.code, TALLY_ok);
        want[1][wanted[1]++] = want[3][wanted[3]++] = out.first_seq;
    }
    ck_assert_int_eq(store_txn_commit(&t), TALLY_ok);
    test_history_fold(&ts);
    ck_assert_uint_eq(tail_of(&ts, 1, tail), 0);
    ck_assert_uint_eq(tail_of(&ts, 2, tail), 1); /* untouched */
    ck_assert_uint_eq(tail_of(&ts, 3, tail), 0);
    ck_assert_uint_eq(test_history_seqs(&ts, NULL), 2 * HISTORY_TAIL_MAX + 21 + 20);
    for (uint64_t account = 1; account <= 3; account++)
        assert_history(&ts, account, want[account], wanted[account]);
    test_finish(&ts);
}
END_TEST

#define MODEL_ACCOUNTS 4
#define MODEL_TRANSFERS 300

/* What ledger_history_seqs must give, from the model list (ascending). */
static uint32_t model_seqs(const uint64_t *list, uint32_t len, bool reverse, uint64_t cursor,
                           uint64_t *out, uint32_t max)
{
    uint32_t n = 0;
    for (uint32_t i = 0; i < len && n < max; i++) {
        uint64_t seq = reverse ? list[len - 1 - i] : list[i];
        if (reverse ? cursor == 0 || seq < cursor : seq > cursor)
            out[n++] = seq;
    }
    return n;
}

/* Every cursor (0, each seq, one past it, the largest) and small limits,
 * both ways, against the model, in the transaction t. */
static void assert_pages(store_txn *t, uint64_t account, const uint64_t *list, uint32_t len)
{
    static const uint32_t limits[] = {1, 2, 3, 5, HISTORY_TAIL_MAX - 1, HISTORY_TAIL_MAX,
                                      HISTORY_TAIL_MAX + 1, 2 * MODEL_TRANSFERS};
    static uint64_t got[2 * MODEL_TRANSFERS], want[2 * MODEL_TRANSFERS];
    for (uint32_t c = 0; c < 2 * len + 2; c++) {
        uint64_t cursor = c == 0 ? 0 : c == 1 ? UINT64_MAX : list[(c - 2) / 2] + (c % 2);
        for (size_t l = 0; l < sizeof(limits) / sizeof(limits[0]); l++)
            for (int reverse = 0; reverse <= 1; reverse++) {
                uint32_t n;
                ck_assert_int_eq(ledger_history_seqs(t, account, reverse, cursor, got, limits[l],
                                                     &n), TALLY_ok);
                uint32_t m = model_seqs(list, len, reverse, cursor, want, limits[l]);
                ck_assert_msg(n == m && memcmp(got, want, n * sizeof(got[0])) == 0,
                              "account %llu %s from %llu limit %u: %u seqs, want %u",
                              (unsigned long long)account, reverse ? "back" : "forward",
                              (unsigned long long)cursor, limits[l], n, m);
            }
    }
    /* The whole list, paged with the last seq of each page as the cursor. */
    for (size_t l = 0; l < 4; l++)
        for (int reverse = 0; reverse <= 1; reverse++) {
            uint32_t total = 0, n;
            uint64_t cursor = 0;
            do {
                ck_assert_int_eq(ledger_history_seqs(t, account, reverse, cursor, got + total,
                                                     limits[l], &n), TALLY_ok);
                total += n;
                if (n)
                    cursor = got[total - 1];
            } while (n == limits[l]);
            ck_assert_uint_eq(total, len);
            for (uint32_t i = 0; i < len; i++)
                ck_assert_uint_eq(got[i], list[reverse ? len - 1 - i : i]);
        }
}

/* Transfers over a few accounts in commits of 1 to 40, each big one left
 * in the recent records and each small one folded, so that the entries
 * sit in "history", the tails and the recent records, the tails at every
 * fill; after each few commits, every page of every account against the
 * model: in a read transaction, and in the write that has entries
 * pending. The invariants find the store clean. */
START_TEST(test_paging_across_index_and_tail_matches_a_model)
{
    test_store ts;
    fresh_store(&ts, MODEL_ACCOUNTS);
    static uint64_t list[MODEL_ACCOUNTS + 1][2 * MODEL_TRANSFERS];
    uint32_t len[MODEL_ACCOUNTS + 1] = {0};
    uint64_t rng = 99, done = 0, commits = 0, seen_tails = 0, seen_recent = 0;
    while (done < MODEL_TRANSFERS) {
        store_txn t;
        ck_assert_int_eq(store_txn_begin(ts.st, NULL, false, &t), TALLY_ok);
        bool small = commits % 3 != 0; /* folded: the entries reach the tails */
        uint64_t group = 1 + test_rng_below(&rng, small ? 3 : 40);
        for (uint64_t g = 0; g < group && done < MODEL_TRANSFERS; g++, done++) {
            uint64_t debit = 1 + test_rng_below(&rng, MODEL_ACCOUNTS);
            uint64_t credit =
                1 + (debit + test_rng_below(&rng, MODEL_ACCOUNTS - 1)) % MODEL_ACCOUNTS;
            ledger_command cmd = test_cmd_transfer(1000 + done, debit, credit, 1);
            char key[32];
            snprintf(key, sizeof(key), "m-%llu", (unsigned long long)done);
            ledger_outcome out = apply_in(&t, key, &cmd, done % 3 == 0);
            ck_assert_int_eq(out.code, TALLY_ok);
            list[debit][len[debit]++] = out.first_seq;
            list[credit][len[credit]++] = out.first_seq;
        }
        if (small) /* the others stay in the recent records */
            ck_assert_int_eq(ledger_history_fold(&t), TALLY_ok);
        if (++commits % 4 == 0) /* pending entries, then flushed by the read */
            assert_pages(&t, 1 + commits / 4 % MODEL_ACCOUNTS,
                         list[1 + commits / 4 % MODEL_ACCOUNTS],
                         len[1 + commits / 4 % MODEL_ACCOUNTS]);
        ck_assert_int_eq(store_txn_commit(&t), TALLY_ok);
        if (commits % 3 == 0) {
            ck_assert_int_eq(store_txn_begin(ts.st, NULL, true, &t), TALLY_ok);
            for (uint64_t account = 1; account <= MODEL_ACCOUNTS; account++)
                assert_pages(&t, account, list[account], len[account]);
            store_txn_abort(&t);
        }
        uint64_t tail[HISTORY_TAIL_MAX];
        for (uint64_t account = 1; account <= MODEL_ACCOUNTS; account++)
            seen_tails += tail_of(&ts, account, tail);
        seen_recent += test_count(&ts, STORE_DB_HISTORY_RECENT);
    }
    store_txn t;
    ck_assert_int_eq(store_txn_begin(ts.st, NULL, true, &t), TALLY_ok);
    for (uint64_t account = 1; account <= MODEL_ACCOUNTS; account++)
        assert_pages(&t, account, list[account], len[account]);
    store_txn_abort(&t);
    ck_assert_uint_gt(seen_tails, 0); /* the three places were in use */
    ck_assert_uint_gt(seen_recent, 0);
    ck_assert_uint_gt(test_history_seqs(&ts, NULL), 0);
    ck_assert_uint_eq(test_history_entries(&ts), 2 * MODEL_TRANSFERS);
    test_finish(&ts); /* the invariants: clean */
}
END_TEST

/* has and del find an entry in the tail as in "history"; a tail emptied
 * by deletes is removed; a later entry starts a new one. */
START_TEST(test_has_and_del_on_tail_entries)
{
    test_store ts;
    fresh_store(&ts, 2);
    uint64_t seqs[HISTORY_TAIL_MAX + 3];
    for (uint32_t i = 0; i < HISTORY_TAIL_MAX + 3; i++) {
        ledger_command cmd = test_cmd_transfer(10 + i, 1, 2, 1);
        seqs[i] = test_apply(&ts, "history", NULL, &cmd).first_seq;
        test_history_fold(&ts);
    }
    uint64_t tail[HISTORY_TAIL_MAX];
    ck_assert_uint_eq(tail_of(&ts, 1, tail), 3);
    store_txn t;
    ck_assert_int_eq(store_txn_begin(ts.st, NULL, false, &t), TALLY_ok);
    uint64_t in_tail = seqs[HISTORY_TAIL_MAX + 1], indexed = seqs[3];
    ck_assert_int_eq(ledger_history_has(&t, 1, in_tail), TALLY_ok);
    ck_assert_int_eq(ledger_history_has(&t, 1, indexed), TALLY_ok);
    ck_assert_int_eq(ledger_history_has(&t, 1, in_tail + 100), TALLY_not_found);
    ck_assert_int_eq(ledger_history_has(&t, 3, in_tail), TALLY_not_found);
    ck_assert_int_eq(ledger_history_del(&t, 1, in_tail), TALLY_ok); /* the middle one */
    ck_assert_int_eq(ledger_history_has(&t, 1, in_tail), TALLY_not_found);
    ck_assert_int_eq(ledger_history_del(&t, 1, in_tail), TALLY_not_found);
    ck_assert_int_eq(ledger_history_del(&t, 1, in_tail + 100), TALLY_not_found);
    ck_assert_int_eq(ledger_history_del(&t, 1, indexed), TALLY_ok);
    ck_assert_int_eq(ledger_history_has(&t, 1, indexed), TALLY_not_found);
    ck_assert_int_eq(store_txn_commit(&t), TALLY_ok);
    ck_assert_uint_eq(tail_of(&ts, 1, tail), 2);
    ck_assert(tail[0] == seqs[HISTORY_TAIL_MAX] && tail[1] == seqs[HISTORY_TAIL_MAX + 2]);

    ck_assert_int_eq(store_txn_begin(ts.st, NULL, false, &t), TALLY_ok);
    ck_assert_int_eq(ledger_history_del(&t, 1, seqs[HISTORY_TAIL_MAX + 2]), TALLY_ok);
    ck_assert_int_eq(ledger_history_del(&t, 1, seqs[HISTORY_TAIL_MAX]), TALLY_ok);
    ck_assert_int_eq(store_txn_commit(&t), TALLY_ok);
    ck_assert_uint_eq(tail_of(&ts, 1, tail), 0);
    ck_assert_uint_eq(test_count(&ts, STORE_DB_HISTORY_TAIL), 1); /* account 2's */
    uint64_t left[HISTORY_TAIL_MAX];
    uint32_t n = 0;
    for (uint32_t i = 0; i < HISTORY_TAIL_MAX; i++)
        if (i != 3)
            left[n++] = seqs[i];
    assert_history(&ts, 1, left, n);

    ledger_command cmd = test_cmd_transfer(99, 2, 1, 1);
    uint64_t later = test_apply(&ts, "history", NULL, &cmd).first_seq;
    test_history_fold(&ts);
    ck_assert_uint_eq(tail_of(&ts, 1, tail), 1);
    ck_assert_uint_eq(tail[0], later);
    left[n++] = later;
    assert_history(&ts, 1, left, n);
    test_store_close(&ts); /* entries deleted by hand: not for the invariants */
}
END_TEST

/* A child that appends to a tail, or folds one, and aborts leaves the
 * parent's tails and "history" as they were. */
START_TEST(test_aborted_child_leaves_tails_untouched)
{
    test_store ts;
    store_txn t, child;
    fresh_store(&ts, 2);
    uint64_t first[2];
    for (int i = 0; i < 2; i++) {
        ledger_command cmd = test_cmd_transfer(1 + (uint64_t)i, 1, 2, 1);
        first[i] = test_apply(&ts, "history", NULL, &cmd).first_seq;
        test_history_fold(&ts);
    }
    ck_assert_int_eq(store_txn_begin(ts.st, NULL, false, &t), TALLY_ok);
    ledger_command cmd = test_cmd_transfer(3, 1, 2, 1);
    uint64_t kept = apply_in(&t, "kept", &cmd, true).first_seq; /* pending in t */

    ck_assert_int_eq(store_txn_begin(ts.st, &t, false, &child), TALLY_ok);
    cmd = test_cmd_transfer(4, 2, 1, 1);
    ledger_outcome out = apply_in(&child, "dropped", &cmd, true);
    ck_assert_int_eq(ledger_history_has(&child, 1, out.first_seq), TALLY_ok); /* flushed */
    store_txn_abort(&child);

    ck_assert_int_eq(store_txn_begin(ts.st, &t, false, &child), TALLY_ok);
    for (uint64_t k = 0; k < HISTORY_TAIL_MAX; k++) /* a fold, in the child */
        ck_assert_int_eq(ledger_history_put(&child, 1, kept + 100 + k), TALLY_ok);
    ck_assert_int_eq(ledger_history_fold(&child), TALLY_ok);
    ck_assert_uint_eq(test_history_seqs(&ts, &child), HISTORY_TAIL_MAX + 3);
    store_txn_abort(&child);

    ck_assert_uint_eq(test_history_seqs(&ts, &t), 0);
    ck_assert_int_eq(ledger_history_has(&t, 1, out.first_seq), TALLY_not_found);
    ck_assert_int_eq(ledger_history_has(&t, 1, kept + 100), TALLY_not_found);
    ck_assert_int_eq(store_txn_commit(&t), TALLY_ok);
    ck_assert_uint_eq(test_count(&ts, STORE_DB_HISTORY_RECENT), 1); /* kept's */
    test_history_fold(&ts);
    uint64_t tail[HISTORY_TAIL_MAX], want[3] = {first[0], first[1], kept};
    ck_assert_uint_eq(tail_of(&ts, 1, tail), 3);
    ck_assert_int_eq(memcmp(tail, want, sizeof(want)), 0);
    ck_assert_uint_eq(tail_of(&ts, 2, tail), 3);
    ck_assert_int_eq(memcmp(tail, want, sizeof(want)), 0);
    ck_assert_uint_eq(test_history_seqs(&ts, NULL), 0);
    test_finish(&ts);
}
END_TEST

/* A store of an older format, as the previous tallyd left it: of format
 * 4, its tails kept and no "history_recent" (the records folded before);
 * of format 3, also every tail entry in "history" and no "history_tail".
 * The format written back. */
static void make_older_format(test_store *ts, uint32_t format)
{
    assert(format == 3 || format == 4);
    store_close(ts->st);
    ts->st = NULL;
    MDB_env *env;
    MDB_txn *txn;
    MDB_dbi tails, recent, history, meta;
    ck_assert_int_eq(mdb_env_create(&env), MDB_SUCCESS);
    ck_assert_int_eq(mdb_env_set_maxdbs(env, STORE_DB_COUNT), MDB_SUCCESS);
    ck_assert_int_eq(mdb_env_open(env, ts->dir, 0, 0600), MDB_SUCCESS);
    ck_assert_int_eq(mdb_txn_begin(env, NULL, 0, &txn), MDB_SUCCESS);
    ck_assert_int_eq(mdb_dbi_open(txn, "history_tail", 0, &tails), MDB_SUCCESS);
    ck_assert_int_eq(mdb_dbi_open(txn, "history_recent", 0, &recent), MDB_SUCCESS);
    ck_assert_int_eq(mdb_dbi_open(txn, "history", 0, &history), MDB_SUCCESS);
    ck_assert_int_eq(mdb_dbi_open(txn, "meta", 0, &meta), MDB_SUCCESS);
    MDB_cursor *cur;
    ck_assert_int_eq(mdb_cursor_open(txn, tails, &cur), MDB_SUCCESS);
    MDB_val k, v;
    for (int rc = mdb_cursor_get(cur, &k, &v, MDB_FIRST); rc == MDB_SUCCESS && format == 3;
         rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT)) {
        uint64_t seqs[HISTORY_TAIL_MAX];
        uint32_t n;
        const char *why;
        ck_assert_int_eq(ledger_history_tail_decode(&v, seqs, &n, &why), TALLY_ok);
        uint64_t account = get_u64_be(k.mv_data);
        for (uint32_t i = 0; i < n; i++) {
            uint8_t key[16];
            ledger_history_key(account, seqs[i], key);
            MDB_val hk = {16, key}, hv = {0, (void *)""};
            ck_assert_int_eq(mdb_put(txn, history, &hk, &hv, 0), MDB_SUCCESS);
        }
    }
    mdb_cursor_close(cur);
    if (format == 3)
        ck_assert_int_eq(mdb_drop(txn, tails, 1), MDB_SUCCESS);
    MDB_stat recent_stat;
    ck_assert_int_eq(mdb_stat(txn, recent, &recent_stat), MDB_SUCCESS);
    ck_assert_uint_eq(recent_stat.ms_entries, 0); /* folded before */
    ck_assert_int_eq(mdb_drop(txn, recent, 1), MDB_SUCCESS);
    uint8_t old[4];
    put_u32_be(old, format);
    MDB_val fk = {14, (void *)"format_version"}, fv = {4, old};
    ck_assert_int_eq(mdb_put(txn, meta, &fk, &fv, 0), MDB_SUCCESS);
    ck_assert_int_eq(mdb_txn_commit(txn), MDB_SUCCESS);
    mdb_env_close(env);
}

static uint32_t format_of(test_store *ts)
{
    store_txn t;
    ck_assert_int_eq(store_txn_begin(ts->st, NULL, true, &t), TALLY_ok);
    MDB_val v;
    ck_assert_int_eq(store_get(&t, STORE_DB_META, "format_version", 14, &v), TALLY_ok);
    ck_assert_uint_eq(v.mv_size, 4);
    uint32_t format = get_u32_be(v.mv_data);
    store_txn_abort(&t);
    return format;
}

/* Opened read-only, a format 3 store's history is its "history" (no
 * tails: the database is missing and reads as empty); its first writer
 * creates "history_tail", marks it 4, and new entries go to the tails
 * after the old ones. */
START_TEST(test_format_3_store_reads_without_tails_and_is_upgraded)
{
    test_store ts;
    fresh_store(&ts, 2);
    uint64_t want[HISTORY_TAIL_MAX + 8];
    uint32_t n = HISTORY_TAIL_MAX + 4;
    commit_transfers(&ts, 10, n, true, want);
    test_history_fold(&ts); /* a format 3 store had no recent records either */
    make_older_format(&ts, 3);

    store_options ro = {.path = ts.dir, .read_only = true};
    ck_assert_int_eq(store_open(&ro, &ts.st), TALLY_ok);
    ck_assert_uint_eq(format_of(&ts), 3);
    ck_assert_uint_eq(test_count(&ts, STORE_DB_HISTORY_TAIL), 0);
    ck_assert_uint_eq(test_history_seqs(&ts, NULL), 2 * n);
    assert_history(&ts, 1, want, n);
    store_txn t;
    ck_assert_int_eq(store_txn_begin(ts.st, NULL, true, &t), TALLY_ok);
    ck_assert_int_eq(ledger_history_has(&t, 2, want[n - 1]), TALLY_ok);
    store_txn_abort(&t);
    test_assert_invariants(&ts);

    test_store_reopen(&ts); /* the writer */
    ck_assert_uint_eq(format_of(&ts), STORE_FORMAT_VERSION);
    for (uint32_t i = 0; i < 3; i++, n++) {
        ledger_command cmd = test_cmd_transfer(100 + i, 2, 1, 1);
        want[n] = test_apply(&ts, "history", NULL, &cmd).first_seq;
        test_history_fold(&ts);
    }
    uint64_t tail[HISTORY_TAIL_MAX];
    ck_assert_uint_eq(tail_of(&ts, 1, tail), 3);
    ck_assert_uint_eq(tail[0], want[n - 3]);
    assert_history(&ts, 1, want, n);
    assert_history(&ts, 2, want, n);
    test_finish(&ts);
}
END_TEST


/* Opened read-only, a format 4 store's history is its "history" and its
 * tails (no "history_recent": it reads as having no records); its first
 * writer creates "history_recent" and marks it 5; new entries wait in
 * records after the tails, and a fold appends them to the tails (and
 * "history", where a tail fills). */
START_TEST(test_format_4_store_with_tails_reads_and_is_upgraded)
{
    test_store ts;
    fresh_store(&ts, 2);
    uint64_t want[HISTORY_TAIL_MAX + 8];
    uint32_t n = HISTORY_TAIL_MAX + 5;
    commit_transfers(&ts, 10, n, true, want);
    test_history_fold(&ts);
    uint64_t tail[HISTORY_TAIL_MAX];
    /* The 17th commit folded 17 entries of each into "history"; 4 in the tail. */
    ck_assert_uint_eq(tail_of(&ts, 1, tail), 4);
    ck_assert_uint_eq(test_history_seqs(&ts, NULL), 2 * (HISTORY_RECENT_RECORDS_MAX + 1));
    make_older_format(&ts, 4);

    store_options ro = {.path = ts.dir, .read_only = true};
    ck_assert_int_eq(store_open(&ro, &ts.st), TALLY_ok);
    ck_assert_uint_eq(format_of(&ts), 4);
    ck_assert_uint_eq(test_count(&ts, STORE_DB_HISTORY_RECENT), 0);
    ck_assert_uint_eq(test_history_entries(&ts), 2 * n);
    assert_history(&ts, 1, want, n);
    assert_history(&ts, 2, want, n);
    store_txn t;
    ck_assert_int_eq(store_txn_begin(ts.st, NULL, true, &t), TALLY_ok);
    ck_assert_int_eq(ledger_history_has(&t, 2, want[n - 1]), TALLY_ok); /* a tail's */
    ck_assert_int_eq(ledger_history_has(&t, 2, want[0]), TALLY_ok);     /* "history"'s */
    uint64_t back[4];
    uint32_t got;
    ck_assert_int_eq(ledger_history_seqs(&t, 1, true, 0, back, 4, &got), TALLY_ok);
    ck_assert(got == 4 && back[0] == want[n - 1] && back[3] == want[n - 4]);
    store_txn_abort(&t);
    test_assert_invariants(&ts);

    test_store_reopen(&ts); /* the writer */
    ck_assert_uint_eq(format_of(&ts), STORE_FORMAT_VERSION);
    commit_transfers(&ts, 100, 3, false, want + n);
    n += 3;
    ck_assert_uint_eq(test_count(&ts, STORE_DB_HISTORY_RECENT), 3);
    ck_assert_uint_eq(tail_of(&ts, 1, tail), 4); /* untouched until the fold */
    assert_history(&ts, 1, want, n);
    test_assert_invariants(&ts);
    test_history_fold(&ts);
    ck_assert_uint_eq(tail_of(&ts, 1, tail), 7);
    ck_assert_uint_eq(tail[6], want[n - 1]);
    assert_history(&ts, 1, want, n);
    assert_history(&ts, 2, want, n);
    test_finish(&ts);
}
END_TEST

/* ---- the recent records ("history_recent") ---- */

/* Single transfers in commits of their own, 1 -> 2 and 3 -> 4 in turn:
 * each commit appends one record, and the history reads right from the
 * records; the commit after HISTORY_RECENT_RECORDS_MAX records folds them
 * all, with its own entries, into the tails (8 or 9 per account: below a
 * tail's fold), and the history reads the same. */
START_TEST(test_recent_records_fold_after_sixteen)
{
    test_store ts;
    fresh_store(&ts, 4);
    static uint64_t want[5][HISTORY_RECENT_RECORDS_MAX + 1];
    uint32_t wanted[5] = {0};
    for (uint32_t i = 1; i <= HISTORY_RECENT_RECORDS_MAX + 1; i++) {
        uint64_t debit = i % 2 ? 1 : 3;
        ledger_command cmd = test_cmd_transfer(i, debit, debit + 1, 1);
        ledger_outcome out = test_apply(&ts, "history", NULL, &cmd);
        ck_assert_int_eq(out.code, TALLY_ok);
        want[debit][wanted[debit]++] = want[debit + 1][wanted[debit + 1]++] = out.first_seq;
        bool folded = i > HISTORY_RECENT_RECORDS_MAX;
        ck_assert_uint_eq(test_count(&ts, STORE_DB_HISTORY_RECENT), folded ? 0 : i);
        ck_assert_uint_eq(test_count(&ts, STORE_DB_HISTORY_TAIL), folded ? 4 : 0);
        ck_assert_uint_eq(test_history_seqs(&ts, NULL), 0);
        for (uint64_t account = 1; account <= 4; account++)
            assert_history(&ts, account, want[account], wanted[account]);
    }
    uint64_t tail[HISTORY_TAIL_MAX];
    ck_assert_uint_eq(tail_of(&ts, 1, tail), wanted[1]);
    ck_assert_int_eq(memcmp(tail, want[1], wanted[1] * sizeof(tail[0])), 0);
    test_finish(&ts);
}
END_TEST

/* Commits of 1000 transfers (2000 entries): two records fit in
 * HISTORY_RECENT_KEYS_MAX, the third commit folds; a commit of more
 * entries than that folds at once, leaving no record. */
START_TEST(test_recent_records_fold_at_the_key_limit)
{
    test_store ts;
    fresh_store(&ts, GROUP_ACCOUNTS);
    static uint64_t want[GROUP_ACCOUNTS + 1][2 * GROUP_TRANSFERS];
    uint32_t wanted[GROUP_ACCOUNTS + 1] = {0};
    const uint64_t sizes[] = {1000, 1000, 1000, HISTORY_RECENT_KEYS_MAX / 2 + 1};
    const uint64_t records_after[] = {1, 2, 0, 0};
    uint64_t id = 1, rng = 7;
    for (size_t c = 0; c < sizeof(sizes) / sizeof(sizes[0]); c++) {
        store_txn t;
        ck_assert_int_eq(store_txn_begin(ts.st, NULL, false, &t), TALLY_ok);
        for (uint64_t i = 0; i < sizes[c]; i++, id++) {
            uint64_t debit = 1 + test_rng_below(&rng, GROUP_ACCOUNTS);
            uint64_t credit = 1 + debit % GROUP_ACCOUNTS;
            ledger_command cmd = test_cmd_transfer(id, debit, credit, 1);
            char key[32];
            snprintf(key, sizeof(key), "k-%llu", (unsigned long long)id);
            ledger_outcome out = apply_in(&t, key, &cmd, true);
            ck_assert_int_eq(out.code, TALLY_ok);
            if (wanted[debit] < 2 * GROUP_TRANSFERS) /* the first ones of each */
                want[debit][wanted[debit]++] = out.first_seq;
            if (wanted[credit] < 2 * GROUP_TRANSFERS)
                want[credit][wanted[credit]++] = out.first_seq;
        }
        ck_assert_int_eq(store_txn_commit(&t), TALLY_ok);
        ck_assert_uint_eq(test_count(&ts, STORE_DB_HISTORY_RECENT), records_after[c]);
    }
    ck_assert_uint_eq(test_history_entries(&ts), 2 * (id - 1));
    store_txn t; /* the first entries of each account, paged */
    ck_assert_int_eq(store_txn_begin(ts.st, NULL, true, &t), TALLY_ok);
    static uint64_t got[2 * GROUP_TRANSFERS];
    for (uint64_t account = 1; account <= GROUP_ACCOUNTS; account++) {
        uint32_t n = history_in(&t, account, got, wanted[account]);
        ck_assert_uint_eq(n, wanted[account]);
        ck_assert_int_eq(memcmp(got, want[account], n * sizeof(got[0])), 0);
    }
    store_txn_abort(&t);
    test_finish(&ts);
}
END_TEST

/* ---- a model of the accounts' histories (the tests below) ---- */

#define HISTORY_MODEL_ACCOUNTS 5
#define HISTORY_MODEL_ENTRIES_MAX 8192 /* per account */

typedef struct history_model {
    uint64_t next_id, rng;
    uint64_t seqs[HISTORY_MODEL_ACCOUNTS + 1][HISTORY_MODEL_ENTRIES_MAX];
    uint32_t len[HISTORY_MODEL_ACCOUNTS + 1];
} history_model;

/* n transfers between random accounts in t, each nested or in place,
 * into the model. */
static void model_transfers(store_txn *t, history_model *m, uint64_t n)
{
    for (uint64_t i = 0; i < n; i++, m->next_id++) {
        uint64_t debit = 1 + test_rng_below(&m->rng, HISTORY_MODEL_ACCOUNTS);
        uint64_t credit =
            1 + (debit + test_rng_below(&m->rng, HISTORY_MODEL_ACCOUNTS - 1)) % HISTORY_MODEL_ACCOUNTS;
        ledger_command cmd = test_cmd_transfer(m->next_id, debit, credit, 1);
        char key[32];
        snprintf(key, sizeof(key), "x-%llu", (unsigned long long)m->next_id);
        uint64_t seq = apply_in(t, key, &cmd, test_rng_below(&m->rng, 2)).first_seq;
        ck_assert(m->len[debit] < HISTORY_MODEL_ENTRIES_MAX &&
                  m->len[credit] < HISTORY_MODEL_ENTRIES_MAX);
        m->seqs[debit][m->len[debit]++] = m->seqs[credit][m->len[credit]++] = seq;
    }
}

/* Delete a random entry of a random account in t (as retention does),
 * and from the model. */
static void model_delete(store_txn *t, history_model *m)
{
    uint64_t account = 1 + test_rng_below(&m->rng, HISTORY_MODEL_ACCOUNTS);
    uint32_t len = m->len[account];
    if (len == 0)
        return;
    uint32_t at = (uint32_t)test_rng_below(&m->rng, len);
    ck_assert_int_eq(ledger_history_del(t, account, m->seqs[account][at]), TALLY_ok);
    memmove(&m->seqs[account][at], &m->seqs[account][at + 1], (len - at - 1) * sizeof(uint64_t));
    m->len[account]--;
}

/* Every account's history in t, paged both ways with a random limit, is
 * the model's; has finds a random entry of each (each read in a write
 * transaction writes its pending entries first). */
static void model_assert(store_txn *t, history_model *m)
{
    static uint64_t got[HISTORY_MODEL_ENTRIES_MAX];
    for (uint64_t account = 1; account <= HISTORY_MODEL_ACCOUNTS; account++) {
        const uint64_t *want = m->seqs[account];
        uint32_t len = m->len[account];
        for (int reverse = 0; reverse <= 1; reverse++) {
            uint32_t limit = 1 + (uint32_t)test_rng_below(&m->rng, 40), total = 0, n;
            uint64_t cursor = 0;
            do {
                ck_assert_int_eq(ledger_history_seqs(t, account, reverse, cursor, got + total,
                                                     limit, &n), TALLY_ok);
                total += n;
                cursor = n ? got[total - 1] : cursor;
            } while (n == limit && total + limit <= HISTORY_MODEL_ENTRIES_MAX);
            ck_assert_msg(total == len, "account %llu %s: %u entries, want %u",
                          (unsigned long long)account, reverse ? "back" : "forward", total, len);
            for (uint32_t i = 0; i < len; i++)
                ck_assert_msg(got[i] == want[reverse ? len - 1 - i : i],
                              "account %llu %s: entry %u differs", (unsigned long long)account,
                              reverse ? "back" : "forward", i);
        }
        if (len > 0)
            ck_assert_int_eq(ledger_history_has(t, account, want[test_rng_below(&m->rng, len)]),
                             TALLY_ok);
    }
}

/* model_assert in a fresh read transaction, and the entries counted where
 * they sit. */
static void model_assert_stored(test_store *ts, history_model *m)
{
    store_txn t;
    ck_assert_int_eq(store_txn_begin(ts->st, NULL, true, &t), TALLY_ok);
    model_assert(&t, m);
    store_txn_abort(&t);
    uint64_t entries = 0;
    for (uint64_t account = 1; account <= HISTORY_MODEL_ACCOUNTS; account++)
        entries += m->len[account];
    ck_assert_uint_eq(test_history_entries(ts), entries);
}

/* One write transaction of n transfers, with a read of the history (which
 * writes the pending entries: a record, or a fold) after the first
 * flush_after of them when that is below n. */
static void model_commit(test_store *ts, history_model *m, uint64_t n, uint64_t flush_after)
{
    store_txn t;
    ck_assert_int_eq(store_txn_begin(ts->st, NULL, false, &t), TALLY_ok);
    model_transfers(&t, m, n < flush_after ? n : flush_after);
    if (flush_after < n) {
        ck_assert_int_eq(ledger_history_has(&t, 1, 1), TALLY_not_found); /* an account.opened */
        model_transfers(&t, m, n - flush_after);
    }
    ck_assert_int_eq(store_txn_commit(&t), TALLY_ok);
}

/* The limits of the recent records exactly: records appended at a flush
 * inside a commit count as any (the 16th at a flush, then the commit's
 * own folds as the 17th; or the 17th at the flush folds and the commit
 * starts anew); HISTORY_RECENT_KEYS_MAX keys in all, and in one record,
 * stay; one key more (4097, after a delete) folds. */
START_TEST(test_recent_records_at_their_limits_exactly)
{
    test_store ts;
    fresh_store(&ts, HISTORY_MODEL_ACCOUNTS);
    static history_model m;
    memset(&m, 0, sizeof(m));
    m.next_id = 1, m.rng = 5;
    for (uint32_t i = 0; i < HISTORY_RECENT_RECORDS_MAX - 2; i++)
        model_commit(&ts, &m, 1, 1);
    model_commit(&ts, &m, 2, 1); /* a record at the flush, one at the commit */
    ck_assert_uint_eq(test_count(&ts, STORE_DB_HISTORY_RECENT), HISTORY_RECENT_RECORDS_MAX);
    model_assert_stored(&ts, &m);
    model_commit(&ts, &m, 2, 1); /* the flush folds; the commit's record */
    ck_assert_uint_eq(test_count(&ts, STORE_DB_HISTORY_RECENT), 1);
    model_assert_stored(&ts, &m);
    test_assert_invariants(&ts);

    /* 2 + 2 + 4092 keys: exactly HISTORY_RECENT_KEYS_MAX, kept; 2 more fold. */
    model_commit(&ts, &m, 1, 1);
    model_commit(&ts, &m, HISTORY_RECENT_KEYS_MAX / 2 - 2, UINT64_MAX);
    ck_assert_uint_eq(test_count(&ts, STORE_DB_HISTORY_RECENT), 3);
    model_assert_stored(&ts, &m);
    model_commit(&ts, &m, 1, 1);
    ck_assert_uint_eq(test_count(&ts, STORE_DB_HISTORY_RECENT), 0);
    model_assert_stored(&ts, &m);
    /* One record of HISTORY_RECENT_KEYS_MAX keys, read back. */
    model_commit(&ts, &m, HISTORY_RECENT_KEYS_MAX / 2, UINT64_MAX);
    ck_assert_uint_eq(test_count(&ts, STORE_DB_HISTORY_RECENT), 1);
    model_assert_stored(&ts, &m);
    test_assert_invariants(&ts);

    /* A delete leaves 4095; a commit of 2 makes 4097: folded. */
    uint64_t gone = m.seqs[1][m.len[1] - 1];
    store_txn t;
    ck_assert_int_eq(store_txn_begin(ts.st, NULL, false, &t), TALLY_ok);
    ck_assert_int_eq(ledger_history_del(&t, 1, gone), TALLY_ok);
    ck_assert_int_eq(store_txn_commit(&t), TALLY_ok);
    m.len[1]--;
    model_assert_stored(&ts, &m);
    model_commit(&ts, &m, 1, 1);
    ck_assert_uint_eq(test_count(&ts, STORE_DB_HISTORY_RECENT), 0);
    model_assert_stored(&ts, &m);
    test_store_close(&ts); /* an entry deleted by hand: not for the invariants */
}
END_TEST

/* A key whose seq is at or below the head the transaction began from (not
 * of an event it appended: a repair putting back deleted entries) is not
 * sure to be above what is stored, so its commit folds the records at
 * once instead of appending one, with the transaction's fresh keys: the
 * entry of the head itself, then the account's first entry behind later
 * ones. The history reads in order, and the invariants find it whole. */
START_TEST(test_keys_at_or_below_the_head_fold_at_once)
{
    test_store ts;
    fresh_store(&ts, 2);
    uint64_t seqs[5];
    commit_transfers(&ts, 10, 3, false, seqs);
    store_txn t;
    ck_assert_int_eq(store_txn_begin(ts.st, NULL, false, &t), TALLY_ok);
    ck_assert_int_eq(ledger_history_del(&t, 1, seqs[0]), TALLY_ok);
    ck_assert_int_eq(ledger_history_del(&t, 1, seqs[2]), TALLY_ok);
    ck_assert_int_eq(store_txn_commit(&t), TALLY_ok);
    ck_assert_uint_eq(test_count(&ts, STORE_DB_HISTORY_RECENT), 3);

    for (int i = 3; i < 5; i++) {
        uint64_t head = test_head(&ts).seq, again = i == 3 ? seqs[2] : seqs[0];
        ck_assert(i == 3 ? again == head : again < head);
        ck_assert_int_eq(store_txn_begin(ts.st, NULL, false, &t), TALLY_ok);
        ledger_command cmd = test_cmd_transfer(10 + (uint64_t)i, 2, 1, 1);
        seqs[i] = apply_in(&t, i == 3 ? "13" : "14", &cmd, true).first_seq; /* fresh */
        ck_assert_int_eq(ledger_history_put(&t, 1, again), TALLY_ok);
        ck_assert_int_eq(store_txn_commit(&t), TALLY_ok);
        ck_assert_uint_eq(test_count(&ts, STORE_DB_HISTORY_RECENT), 0);
        uint64_t one[5] = {seqs[1], seqs[2], seqs[3]}, n = 3;
        if (i == 4) {
            memcpy(one, seqs, sizeof(one));
            n = 5;
        }
        assert_history(&ts, 1, one, (uint32_t)n);
        assert_history(&ts, 2, seqs, (uint32_t)i + 1);
    }
    test_finish(&ts);
}
END_TEST

#define MIXED_COMMITS 80

/* Commits of single transfers and of hundreds to thousands (past
 * HISTORY_RECENT_KEYS_MAX), with reads and deletes inside them and inside
 * nested transactions that commit or abort (after writing their parent's
 * pending entries early), so that entries sit in "history", the tails and
 * the records in every mix, records are appended at flushes, folded at
 * flushes and commits, and rewritten by deletes: after each commit, a
 * fresh read sees each account's history as the model says, in pages
 * both ways; the entries are counted where they sit; the records never
 * pass their limits. */
START_TEST(test_writes_reads_and_deletes_in_any_order_match_a_model)
{
    test_store ts;
    fresh_store(&ts, HISTORY_MODEL_ACCOUNTS);
    static history_model m, saved;
    memset(&m, 0, sizeof(m));
    m.next_id = 1, m.rng = 2026;
    for (int c = 0; c < MIXED_COMMITS; c++) {
        store_txn t, child;
        ck_assert_int_eq(store_txn_begin(ts.st, NULL, false, &t), TALLY_ok);
        for (uint64_t steps = 1 + test_rng_below(&m.rng, 5); steps > 0; steps--) {
            uint64_t what = test_rng_below(&m.rng, 100);
            if (what < 50) {
                bool big = test_rng_below(&m.rng, 20) == 0;
                model_transfers(&t, &m, big ? 200 + test_rng_below(&m.rng, 2000)
                                            : 1 + test_rng_below(&m.rng, 4));
            } else if (what < 80) { /* nested: abort (the model as before) or commit */
                bool abort = what < 65;
                if (abort)
                    saved = m;
                ck_assert_int_eq(store_txn_begin(ts.st, &t, false, &child), TALLY_ok);
                model_transfers(&child, &m, 1 + test_rng_below(&m.rng, 5));
                if (test_rng_below(&m.rng, 2))
                    model_assert(&child, &m);
                if (test_rng_below(&m.rng, 2))
                    model_delete(&child, &m);
                if (abort) {
                    store_txn_abort(&child);
                    uint64_t next_id = m.next_id, rng = m.rng;
                    m = saved;
                    m.next_id = next_id, m.rng = rng; /* transfer ids are not reused */
                } else {
                    ck_assert_int_eq(store_txn_commit(&child), TALLY_ok);
                }
            } else if (what < 90) {
                model_assert(&t, &m);
            } else {
                model_delete(&t, &m);
            }
        }
        ck_assert_int_eq(store_txn_commit(&t), TALLY_ok);
        model_assert_stored(&ts, &m);
        ck_assert_uint_le(test_count(&ts, STORE_DB_HISTORY_RECENT), HISTORY_RECENT_RECORDS_MAX);
    }
    test_store_close(&ts); /* entries deleted by hand: not for the invariants */
}
END_TEST

/* has and del find entries in the recent records: a record losing one of
 * several keys is rewritten without it, one losing its only key goes; the
 * history pages around the holes; a read-only transaction sees it. */
START_TEST(test_has_and_del_on_recent_entries)
{
    test_store ts;
    fresh_store(&ts, 3);
    uint64_t seqs[4];
    commit_transfers(&ts, 10, 3, false, seqs);
    store_txn t;
    ck_assert_int_eq(store_txn_begin(ts.st, NULL, false, &t), TALLY_ok);
    ledger_command cmd = test_cmd_transfer(13, 2, 3, 1); /* a record of 2 keys */
    seqs[3] = apply_in(&t, "13", &cmd, true).first_seq;
    ck_assert_int_eq(store_txn_commit(&t), TALLY_ok);
    ck_assert_uint_eq(test_count(&ts, STORE_DB_HISTORY_RECENT), 4);
    ck_assert_uint_eq(test_count(&ts, STORE_DB_HISTORY_TAIL), 0);

    ck_assert_int_eq(store_txn_begin(ts.st, NULL, false, &t), TALLY_ok);
    for (int i = 0; i < 3; i++)
        ck_assert_int_eq(ledger_history_has(&t, 1, seqs[i]), TALLY_ok);
    ck_assert_int_eq(ledger_history_has(&t, 1, seqs[3]), TALLY_not_found);
    ck_assert_int_eq(ledger_history_has(&t, 3, seqs[3]), TALLY_ok);
    ck_assert_int_eq(ledger_history_has(&t, 3, seqs[0]), TALLY_not_found);
    ck_assert_int_eq(ledger_history_del(&t, 1, seqs[1]), TALLY_ok); /* 2 keys -> 1 */
    ck_assert_int_eq(ledger_history_del(&t, 1, seqs[1]), TALLY_not_found);
    ck_assert_int_eq(ledger_history_has(&t, 2, seqs[1]), TALLY_ok);
    ck_assert_int_eq(ledger_history_del(&t, 2, seqs[1]), TALLY_ok); /* 1 key -> gone */
    ck_assert_int_eq(ledger_history_del(&t, 3, seqs[3] + 1), TALLY_not_found);
    ck_assert_int_eq(store_txn_commit(&t), TALLY_ok);
    ck_assert_uint_eq(test_count(&ts, STORE_DB_HISTORY_RECENT), 3);
    const uint64_t one[] = {seqs[0], seqs[2]}, two[] = {seqs[0], seqs[2], seqs[3]},
                   three[] = {seqs[3]};
    assert_history(&ts, 1, one, 2);
    assert_history(&ts, 2, two, 3);
    assert_history(&ts, 3, three, 1);
    ck_assert_uint_eq(test_history_entries(&ts), 6);
    test_store_close(&ts); /* entries deleted by hand: not for the invariants */
}
END_TEST

/* A record under a key that is not a record number (8 bytes) is corrupt
 * for every reader, as for the writer's survey: has, seqs and del say
 * corrupt_record instead of finding a key in it (del: rewriting it under
 * a number read past the key's end). */
START_TEST(test_recent_record_with_a_bad_key_is_corrupt)
{
    test_store ts;
    fresh_store(&ts, 2);
    ledger_command cmd = test_cmd_transfer(10, 1, 2, 1);
    uint64_t seq = test_apply(&ts, "history", NULL, &cmd).first_seq;
    ck_assert_uint_eq(test_count(&ts, STORE_DB_HISTORY_RECENT), 1);
    store_txn t;
    ck_assert_int_eq(store_txn_begin(ts.st, NULL, false, &t), TALLY_ok);
    uint8_t value[1 + 2 * 16] = {HISTORY_RECENT_FORMAT};
    ledger_history_key(1, seq + 1, value + 1);
    ledger_history_key(2, seq + 1, value + 17);
    ck_assert_int_eq(store_put(&t, STORE_DB_HISTORY_RECENT, "abc", 3, value, sizeof(value), 0),
                     TALLY_ok);
    ck_assert_int_eq(store_txn_commit(&t), TALLY_ok);

    for (int read_only = 1; read_only >= 0; read_only--) {
        ck_assert_int_eq(store_txn_begin(ts.st, NULL, read_only, &t), TALLY_ok);
        ck_assert_int_eq(ledger_history_has(&t, 1, seq + 1), TALLY_corrupt_record);
        uint64_t seqs[4];
        uint32_t n;
        for (int reverse = 0; reverse <= 1; reverse++)
            ck_assert_int_eq(ledger_history_seqs(&t, 1, reverse, 0, seqs, 4, &n),
                             TALLY_corrupt_record);
        if (!read_only) {
            ck_assert_int_eq(ledger_history_del(&t, 1, seq + 1), TALLY_corrupt_record);
            ck_assert_int_eq(ledger_history_del(&t, 2, seq), TALLY_corrupt_record);
        }
        store_txn_abort(&t);
    }
    test_store_close(&ts); /* a record written by hand: not for the invariants */
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
    tc = tcase_create("tail");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, test_tail_folds_into_history_at_exactly_sixteen);
    tcase_add_test(tc, test_paging_across_index_and_tail_matches_a_model);
    tcase_add_test(tc, test_has_and_del_on_tail_entries);
    tcase_add_test(tc, test_aborted_child_leaves_tails_untouched);
    tcase_add_test(tc, test_format_3_store_reads_without_tails_and_is_upgraded);
    tcase_add_test(tc, test_format_4_store_with_tails_reads_and_is_upgraded);
    suite_add_tcase(s, tc);
    tc = tcase_create("recent");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, test_recent_records_fold_after_sixteen);
    tcase_add_test(tc, test_recent_records_fold_at_the_key_limit);
    tcase_add_test(tc, test_recent_records_at_their_limits_exactly);
    tcase_add_test(tc, test_keys_at_or_below_the_head_fold_at_once);
    tcase_add_test(tc, test_has_and_del_on_recent_entries);
    tcase_add_test(tc, test_recent_record_with_a_bad_key_is_corrupt);
    tcase_add_test(tc, test_writes_reads_and_deletes_in_any_order_match_a_model);
    suite_add_tcase(s, tc);
    return test_run_suite(s);
}
