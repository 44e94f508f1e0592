/*
 * check_retention.c — inbox and log retention on a real LMDB store: what
 * goes and what stays, bounded batches, the subscribers' floors and dead
 * letters holding the log back, the checkpoint the invariants rebuild from
 * (holds and entitlements that continue after the floor), account_transfers
 * still finding the transfers whose creating events went, and a tampered
 * checkpoint being caught.
 */
#include "common/msgpack_safe.h"
#include "ledger/account.h"
#include "ledger/history.h"
#include "ledger/inbox.h"
#include "ledger/index_build.h"
#include "ledger/ledger.h"
#include "ledger/query.h"
#include "ledger/retention.h"
#include "log/subscriber.h"
#include "tests/support/test_support.h"

#include <check.h>
#include <stdio.h>
#include <string.h>

#define DAY_MS INT64_C(86400000)

static test_store ts;

static void setup(void) { test_store_open(&ts); }

static void teardown(void)
{
    test_assert_invariants(&ts);
    test_store_close(&ts);
}

static ledger_retention_work sweep_with(const ledger_retention *opt)
{
    ledger_retention_work w;
    store_txn t;
    ck_assert_int_eq(store_txn_begin(ts.st, NULL, false, &t), TALLY_ok);
    ck_assert_int_eq(ledger_retention_sweep(&t, ts.now_ms, opt, &w), TALLY_ok);
    ck_assert_int_eq(store_txn_commit(&t), TALLY_ok);
    return w;
}

static ledger_retention_work sweep(int64_t window_ms, int64_t age_ms)
{
    ledger_retention opt = {window_ms, age_ms, 0};
    return sweep_with(&opt);
}

static void open_account(uint64_t id, const char *key)
{
    ledger_command c = test_cmd_open(id, 1, 0);
    ck_assert_int_eq(test_apply(&ts, "shop", key, &c).code, TALLY_ok);
}

START_TEST(inbox_records_older_than_the_window_go)
{
    open_account(1, "old-1"); /* day 0 */
    open_account(2, "old-2");
    ts.now_ms += 5 * DAY_MS;
    open_account(3, "mid-3"); /* day 5 */
    ts.now_ms += 3 * DAY_MS;  /* day 8: a 7-day window keeps day >= 1 */
    ledger_retention_work w = sweep(7 * DAY_MS, 0);
    ck_assert_uint_eq(w.inbox_removed, 2);
    ck_assert_uint_eq(test_count(&ts, STORE_DB_INBOX), 1);
    ck_assert_uint_eq(test_count(&ts, STORE_DB_INBOX_TIME), 1);
    store_txn t;
    ck_assert_int_eq(store_txn_begin(ts.st, NULL, true, &t), TALLY_ok);
    int64_t swept, oldest;
    ck_assert_int_eq(ledger_inbox_swept_ms(&t, &swept), TALLY_ok);
    ck_assert_int_eq(ledger_inbox_oldest_ms(&t, &oldest), TALLY_ok);
    store_txn_abort(&t);
    ck_assert_int_eq(swept, TEST_NOW_MS);
    ck_assert_int_eq(oldest, TEST_NOW_MS + 5 * DAY_MS);
    /* inside the window a retry is still a replay */
    ledger_command c = test_cmd_open(3, 1, 0);
    ledger_outcome o = test_apply(&ts, "shop", "mid-3", &c);
    ck_assert(o.replayed);
    /* nothing more to do: a second sweep removes nothing */
    ck_assert_uint_eq(sweep(7 * DAY_MS, 0).inbox_removed, 0);
    /* the log is untouched without log retention */
    ck_assert_uint_eq(test_head(&ts).seq, 3);
    ck_assert_uint_eq(test_count(&ts, STORE_DB_LOG), 3);
}
END_TEST

/* A failed transfer id is failed as long as the inbox record of its
 * attempt lives, and goes with it: after the window the id is free. */
START_TEST(failed_transfer_ids_go_with_their_inbox_records)
{
    ledger_command c = test_cmd_open(1, 1, LEDGER_ACCOUNT_DEBITS_MUST_NOT_EXCEED_CREDITS);
    ck_assert_int_eq(test_apply(&ts, "shop", "open-1", &c).code, TALLY_ok);
    open_account(2, "open-2");
    ledger_command pay = test_cmd_transfer(600, 1, 2, 100);
    ck_assert_int_eq(test_apply(&ts, "shop", "k-d", &pay).code, TALLY_exceeds_credits);
    ledger_command fund = test_cmd_transfer(8, 2, 1, 100);
    ck_assert_int_eq(test_apply(&ts, "shop", "fund", &fund).code, TALLY_ok);
    ts.now_ms += 5 * DAY_MS;
    ck_assert_int_eq(test_apply(&ts, "shop", "k-f", &pay).code, TALLY_id_already_failed);
    ts.now_ms += 3 * DAY_MS; /* day 8: the day-0 records go, k-f (day 5) stays */
    ck_assert_uint_eq(sweep(7 * DAY_MS, 0).inbox_removed, 4);
    ck_assert_uint_eq(test_count(&ts, STORE_DB_FAILED_IDS), 0);
    ck_assert_uint_eq(test_count(&ts, STORE_DB_INBOX), 1);
    test_assert_invariants(&ts);
    /* forgotten: the id is free, and k-f still replays its own outcome */
    ck_assert(test_apply(&ts, "shop", "k-f", &pay).replayed);
    ck_assert_int_eq(test_apply(&ts, "shop", "k-g", &pay).code, TALLY_ok);
    ck_assert(test_transfer_exists(&ts, 600));
}
END_TEST

START_TEST(sweeps_are_bounded)
{
    unsigned n = TALLY_RETENTION_BATCH_MAX + 10;
    for (unsigned i = 1; i <= n; i++) {
        char key[32];
        snprintf(key, sizeof(key), "k-%u", i);
        open_account(i, key);
    }
    ts.now_ms += 8 * DAY_MS;
    open_account(100000, "new");
    ledger_retention_work w = sweep(7 * DAY_MS, DAY_MS);
    ck_assert_uint_eq(w.inbox_removed, TALLY_RETENTION_BATCH_MAX);
    ck_assert_uint_eq(w.events_removed, TALLY_RETENTION_BATCH_MAX);
    ck_assert_uint_eq(w.log_floor, TALLY_RETENTION_BATCH_MAX);
    w = sweep(7 * DAY_MS, DAY_MS);
    ck_assert_uint_eq(w.inbox_removed, 10);
    ck_assert_uint_eq(w.events_removed, 10);
    ck_assert_uint_eq(w.log_floor, n);
    ck_assert_uint_eq(test_count(&ts, STORE_DB_LOG), 1);
}
END_TEST

/* Apply cmd under key in t (a group's transaction, as the writer's). */
static ledger_outcome apply_in(store_txn *t, const char *key, const ledger_command *cmd)
{
    ledger_request req = {.consumer = tally_str_from("shop"), .key = tally_str_from(key),
                          .command = *cmd};
    ledger_outcome o;
    ck_assert_int_eq(ledger_apply(t, &req, ts.now_ms, &o), TALLY_ok);
    return o;
}

/* The inbox_time entries: how many, and the group entries' keys' count. */
static uint64_t index_entries(uint64_t *groups)
{
    store_txn t;
    ck_assert_int_eq(store_txn_begin(ts.st, NULL, true, &t), TALLY_ok);
    MDB_cursor *cur;
    ck_assert_int_eq(store_cursor_open(&t, STORE_DB_INBOX_TIME, &cur), TALLY_ok);
    MDB_val k, v;
    uint64_t n = 0;
    *groups = 0;
    for (int rc = mdb_cursor_get(cur, &k, &v, MDB_FIRST); rc == 0;
         rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT), n++)
        *groups += v.mv_size > 0;
    mdb_cursor_close(cur);
    store_txn_abort(&t);
    return n;
}

/* One commit of 1000 keys (a batch) takes a few index entries (each fits
 * an LMDB node); the sweep removes them over several bounded batches,
 * rewriting the entry it cuts with the keys left, and leaves a newer
 * commit alone. */
START_TEST(a_large_group_is_swept_across_batches)
{
    store_txn t;
    ck_assert_int_eq(store_txn_begin(ts.st, NULL, false, &t), TALLY_ok);
    for (unsigned i = 1; i <= 1000; i++) {
        char key[40]; /* as long as a UUID's text */
        snprintf(key, sizeof(key), "0190ffff-0000-7000-8000-%012u", i * 7919);
        ledger_command c = test_cmd_open(i, 1, 0);
        ck_assert_int_eq(apply_in(&t, key, &c).code, TALLY_ok);
    }
    ck_assert_int_eq(store_txn_commit(&t), TALLY_ok);
    uint64_t groups;
    uint64_t entries = index_entries(&groups);
    ck_assert_uint_eq(groups, entries);
    ck_assert_uint_ge(entries, 2);  /* more than a node holds */
    ck_assert_uint_le(entries, 20); /* front-coded: ~20 bytes a key */
    ts.now_ms += 5 * DAY_MS;
    open_account(5001, "new-1");
    open_account(5002, "new-2");
    ts.now_ms += 3 * DAY_MS;
    uint32_t left = 1000, sweeps = 0;
    while (left > 0) {
        uint32_t want = left < TALLY_RETENTION_BATCH_MAX ? left : TALLY_RETENTION_BATCH_MAX;
        ck_assert_uint_eq(sweep(7 * DAY_MS, 0).inbox_removed, want);
        left -= want;
        sweeps++;
        ck_assert_uint_eq(test_count(&ts, STORE_DB_INBOX), left + 2);
        uint64_t now = index_entries(&groups);
        ck_assert_uint_eq(groups, now);
        ck_assert(left > 0 ? now > 2 : now == 2);
        test_assert_invariants(&ts);
    }
    ck_assert_uint_eq(sweeps, 4);
    ck_assert_uint_eq(sweep(7 * DAY_MS, 0).inbox_removed, 0);
    ledger_command again = test_cmd_open(5001, 1, 0);
    ck_assert(test_apply(&ts, "shop", "new-1", &again).replayed);
}
END_TEST

/* Only the keys whose records stay are indexed: a command refused before
 * storing, a chain rolled back with its failing member (its record
 * stays), and a child transaction aborted after storing (its record and
 * key go). */
START_TEST(a_group_indexes_only_the_records_it_keeps)
{
    open_account(1, "o1");
    open_account(2, "o2");
    uint64_t before = test_count(&ts, STORE_DB_INBOX);
    store_txn t;
    ck_assert_int_eq(store_txn_begin(ts.st, NULL, false, &t), TALLY_ok);
    ledger_command pay = test_cmd_transfer(10, 1, 2, 5);
    ck_assert_int_eq(apply_in(&t, "pay", &pay).code, TALLY_ok);
    ledger_request refused = {.consumer = tally_str_from(""), .key = tally_str_from("x"),
                              .command = pay};
    ledger_outcome o;
    ck_assert_int_eq(ledger_apply(&t, &refused, ts.now_ms, &o), TALLY_ok);
    ck_assert_int_eq(o.code, TALLY_consumer_must_not_be_empty);
    ledger_command members[2] = {test_cmd_transfer(11, 1, 2, 5), test_cmd_transfer(12, 1, 9, 5)};
    ledger_command chain = {.kind = LEDGER_CHAIN};
    chain.u.chain = (ledger_chain){.members = members, .count = 2};
    ck_assert_int_ne(apply_in(&t, "chain", &chain).code, TALLY_ok);
    store_txn child;
    ck_assert_int_eq(store_txn_begin(ts.st, &t, false, &child), TALLY_ok);
    ledger_command gone = test_cmd_transfer(13, 1, 2, 5);
    ck_assert_int_eq(apply_in(&child, "rolled-back", &gone).code, TALLY_ok);
    store_txn_abort(&child);
    ck_assert_int_eq(store_txn_begin(ts.st, &t, false, &child), TALLY_ok);
    ledger_command kept = test_cmd_transfer(14, 1, 2, 5);
    ck_assert_int_eq(apply_in(&child, "kept", &kept).code, TALLY_ok);
    ck_assert_int_eq(store_txn_commit(&child), TALLY_ok);
    ck_assert_int_eq(store_txn_commit(&t), TALLY_ok);
    ck_assert_uint_eq(test_count(&ts, STORE_DB_INBOX), before + 3); /* pay, chain, kept */
    uint64_t groups;
    ck_assert_uint_eq(index_entries(&groups), 3);
    ck_assert_uint_eq(test_invariant_findings(&ts, "inbox_time"), 0);
    ts.now_ms += 8 * DAY_MS;
    ck_assert_uint_eq(sweep(7 * DAY_MS, 0).inbox_removed, before + 3);
    ck_assert_uint_eq(test_count(&ts, STORE_DB_INBOX), 0);
    ck_assert_uint_eq(test_count(&ts, STORE_DB_INBOX_TIME), 0);
}
END_TEST

/* A store of format 2 indexes each key alone (key = time | inbox key,
 * empty value); after the upgrade both layouts live side by side, the
 * sweep removes both, and the invariants read both. Group entries keep
 * their keys growing when the clock steps back. */
START_TEST(both_layouts_are_swept)
{
    open_account(1, "old-1");
    open_account(2, "old-2");
    /* Rewrite the two group entries as format 2 wrote them. */
    store_txn t;
    ck_assert_int_eq(store_txn_begin(ts.st, NULL, false, &t), TALLY_ok);
    const char *keys[] = {"old-1", "old-2"};
    for (int i = 0; i < 2; i++) {
        uint8_t k[8 + LEDGER_INBOX_KEY_BYTES_MAX];
        put_u64_be(k, (uint64_t)ts.now_ms);
        size_t n = ledger_inbox_key(tally_str_from("shop"), tally_str_from(keys[i]), k + 8);
        ck_assert_int_eq(store_put(&t, STORE_DB_INBOX_TIME, k, 8 + n, "", 0, 0), TALLY_ok);
    }
    MDB_cursor *cur;
    ck_assert_int_eq(store_cursor_open(&t, STORE_DB_INBOX_TIME, &cur), TALLY_ok);
    MDB_val k, v;
    for (int rc = mdb_cursor_get(cur, &k, &v, MDB_FIRST); rc == 0;
         rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT))
        if (v.mv_size > 0)
            ck_assert_int_eq(mdb_cursor_del(cur, 0), 0);
    mdb_cursor_close(cur);
    ck_assert_int_eq(store_txn_commit(&t), TALLY_ok);
    uint64_t groups;
    ck_assert_uint_eq(index_entries(&groups), 2);
    ck_assert_uint_eq(groups, 0);
    test_assert_invariants(&ts);
    /* A group at the old entries' ms comes after them. */
    open_account(3, "same-ms");
    ts.now_ms += 5 * DAY_MS;
    open_account(4, "new-4");
    ts.now_ms -= 1000; /* the clock steps back: the entry takes the last one's time */
    open_account(5, "new-5");
    ck_assert_uint_eq(index_entries(&groups), 5);
    ck_assert_uint_eq(groups, 3);
    test_assert_invariants(&ts);
    ts.now_ms += 3 * DAY_MS;
    ck_assert_uint_eq(sweep(7 * DAY_MS, 0).inbox_removed, 3);
    ck_assert_uint_eq(index_entries(&groups), 2);
    ck_assert_uint_eq(groups, 2);
    ck_assert_uint_eq(test_count(&ts, STORE_DB_INBOX), 2);
    ledger_command again = test_cmd_open(5, 1, 0);
    ck_assert(test_apply(&ts, "shop", "new-5", &again).replayed);
}
END_TEST

/* An inbox record without an index entry would never be swept: the
 * inbox_time check names it; so it does an entry naming a missing record. */
START_TEST(an_unindexed_record_is_found)
{
    open_account(1, "o1");
    open_account(2, "o2");
    store_txn t;
    ck_assert_int_eq(store_txn_begin(ts.st, NULL, false, &t), TALLY_ok);
    test_drop_last_inbox_time_entry(&t);
    ck_assert_int_eq(store_txn_commit(&t), TALLY_ok);
    ck_assert_uint_eq(test_invariant_findings(&ts, "inbox_time"), 1);
    /* An entry naming a key with no record (o1's, kept to put back). */
    ck_assert_int_eq(store_txn_begin(ts.st, NULL, false, &t), TALLY_ok);
    uint8_t key[8 + LEDGER_INBOX_KEY_BYTES_MAX], val[512];
    size_t n = ledger_inbox_key(tally_str_from("shop"), tally_str_from("o1"), key);
    MDB_val v;
    ck_assert_int_eq(store_get(&t, STORE_DB_INBOX, key, n, &v), TALLY_ok);
    size_t val_len = v.mv_size;
    memcpy(val, v.mv_data, val_len);
    ck_assert_int_eq(store_del(&t, STORE_DB_INBOX, key, n), TALLY_ok);
    ck_assert_int_eq(store_txn_commit(&t), TALLY_ok);
    ck_assert_uint_eq(test_invariant_findings(&ts, "inbox_time"), 2);
    /* Put o1 back, and index o2 as format 2 did (teardown checks all). */
    ck_assert_int_eq(store_txn_begin(ts.st, NULL, false, &t), TALLY_ok);
    ck_assert_int_eq(store_put(&t, STORE_DB_INBOX, key, n, val, val_len, 0), TALLY_ok);
    put_u64_be(key, (uint64_t)ts.now_ms);
    n = ledger_inbox_key(tally_str_from("shop"), tally_str_from("o2"), key + 8);
    ck_assert_int_eq(store_put(&t, STORE_DB_INBOX_TIME, key, 8 + n, "", 0, 0), TALLY_ok);
    ck_assert_int_eq(store_txn_commit(&t), TALLY_ok);
    ck_assert_uint_eq(test_invariant_findings(&ts, "inbox_time"), 0);
}
END_TEST

START_TEST(log_retention_keeps_a_checkpoint_the_rebuild_starts_from)
{
    open_account(1, "o1");
    open_account(2, "o2");
    ledger_command c = test_cmd_transfer(10, 1, 2, 100);
    ck_assert_int_eq(test_apply(&ts, "shop", "t10", &c).code, TALLY_ok);
    c = test_cmd_hold(11, 1, 2, 40, 0);
    ck_assert_int_eq(test_apply(&ts, "shop", "h11", &c).code, TALLY_ok);
    c = test_cmd_grant("alice", "pro", TEST_NOW_MS + 100 * DAY_MS);
    ck_assert_int_eq(test_apply(&ts, "shop", "g", &c).code, TALLY_ok);
    /* seq 1..5 old; the hold is posted and the entitlement extended later */
    ts.now_ms += 10 * DAY_MS;
    c = test_cmd_post(11, 30);
    ck_assert_int_eq(test_apply(&ts, "shop", "p11", &c).code, TALLY_ok);
    c = test_cmd_extend("alice", "pro", TEST_NOW_MS + 200 * DAY_MS);
    ck_assert_int_eq(test_apply(&ts, "shop", "x", &c).code, TALLY_ok);
    ledger_retention_work w = sweep(30 * DAY_MS, 5 * DAY_MS);
    ck_assert_uint_eq(w.events_removed, 5);
    ck_assert_uint_eq(w.log_floor, 5);
    uint64_t history = test_history_entries(&ts);
    ck_assert_uint_eq(history, 2); /* only the post's two entries remain */
    ck_assert_uint_eq(test_count(&ts, STORE_DB_CHECKPOINT), 4); /* 2 accounts, 1 hold, 1 entitlement */
    store_txn t;
    ck_assert_int_eq(store_txn_begin(ts.st, NULL, true, &t), TALLY_ok);
    ledger_log_floor floor;
    ck_assert_int_eq(ledger_log_floor_get(&t, &floor), TALLY_ok);
    uint64_t first;
    ck_assert_int_eq(log_first_seq(&t, &first), TALLY_ok);
    store_txn_abort(&t);
    ck_assert_uint_eq(floor.seq, 5);
    ck_assert_uint_eq(first, 6);
    ck_assert_int_eq(floor.time_ms, TEST_NOW_MS);
    /* the state is untouched */
    ledger_account a = test_account(&ts, 2);
    ck_assert_int_eq(a.credits_posted, 130);
    ck_assert_int_eq(a.credits_pending, 0);
    /* the invariants (teardown) fold from the checkpoint and pass */
}
END_TEST

/* The history of removed events goes from each of its places. With
 * fold_each, every commit's entries go to the tails: "history" gets the
 * first HISTORY_TAIL_MAX entries of each account, folded, and the tails
 * the rest of the old ones, below the new ones. Without, as commits leave
 * them: the first HISTORY_RECENT_RECORDS_MAX + 1 commits fold into
 * "history", and the last old ones wait in recent records (emptied by the
 * removal, so deleted) with the young ones. */
static void retention_removes_history(bool fold_each)
{
    open_account(1, "o1");
    open_account(2, "o2");
    const unsigned old = HISTORY_TAIL_MAX + 3, young = 3;
    for (unsigned i = 0; i < old + young; i++) {
        if (i == old)
            ts.now_ms += 10 * DAY_MS;
        ledger_command c = test_cmd_transfer(100 + i, 1 + i % 2, 2 - i % 2, 1);
        char key[16];
        snprintf(key, sizeof(key), "t%u", i);
        ck_assert_int_eq(test_apply(&ts, "shop", key, &c).code, TALLY_ok);
        if (fold_each)
            test_history_fold(&ts);
    }
    /* seqs 1-2 open the accounts, 3.. the transfers */
    ck_assert_uint_eq(test_history_seqs(&ts, NULL),
                      2 * (fold_each ? HISTORY_TAIL_MAX : HISTORY_RECENT_RECORDS_MAX + 1));
    ck_assert_uint_eq(test_count(&ts, STORE_DB_HISTORY_RECENT),
                      fold_each ? 0 : old + young - HISTORY_RECENT_RECORDS_MAX - 1);
    ck_assert_uint_eq(test_history_entries(&ts), 2 * (old + young));
    ledger_retention_work w = sweep(30 * DAY_MS, 5 * DAY_MS);
    ck_assert_uint_eq(w.events_removed, 2 + old);
    ck_assert_uint_eq(test_history_seqs(&ts, NULL), 0);
    ck_assert_uint_eq(test_count(&ts, STORE_DB_HISTORY_RECENT), fold_each ? 0 : young);
    ck_assert_uint_eq(test_history_entries(&ts), 2 * young);
    store_txn t;
    ck_assert_int_eq(store_txn_begin(ts.st, NULL, true, &t), TALLY_ok);
    for (uint64_t account = 1; account <= 2; account++) {
        uint64_t seqs[8];
        uint32_t n;
        ck_assert_int_eq(ledger_history_seqs(&t, account, false, 0, seqs, 8, &n), TALLY_ok);
        ck_assert_uint_eq(n, young);
        for (uint32_t i = 0; i < n; i++)
            ck_assert_uint_eq(seqs[i], 3 + old + i);
    }
    store_txn_abort(&t);
    /* the invariants (teardown) find every event's entries and no others */
}

START_TEST(log_retention_removes_history_from_the_index_and_the_tails)
{
    retention_removes_history(true);
}
END_TEST

START_TEST(log_retention_removes_history_from_the_recent_records)
{
    retention_removes_history(false);
}
END_TEST

typedef struct listed {
    uint64_t ids[64];
    uint32_t n;
} listed;

static int list_transfer(const ledger_transfer_record *r, void *ctx)
{
    listed *l = ctx;
    ck_assert_uint_lt(l->n, 64);
    l->ids[l->n++] = get_u64_be(r->id.bytes + 8);
    return 0;
}

/* Every page of an account_transfers (or transfer_query) query. */
static void account_transfers(ledger_query q, listed *l)
{
    memset(l, 0, sizeof(*l));
    for (uint32_t pages = 0;; pages++) {
        ck_assert_uint_lt(pages, 100);
        store_txn t;
        ck_assert_int_eq(store_txn_begin(ts.st, NULL, true, &t), TALLY_ok);
        ledger_query_page page;
        ck_assert_int_eq(ledger_transfer_query(&t, &q, list_transfer, l, &page), TALLY_ok);
        store_txn_abort(&t);
        if (!page.has_next)
            return;
        q.has_cursor = true;
        memcpy(q.cursor, page.next, sizeof(q.cursor));
    }
}

/* Transfers whose creating events retention removed (and whose history
 * entries went with them) are still listed by account_transfers, through
 * the entries by account the sweep put for them, and by transfer_query
 * without a filter, through their ALL entries, before the transfers of
 * the log that remains: in creation order both ways, across pages, with
 * time ranges on either side of the floor. A hold created before the
 * floor and posted after it is listed once. */
START_TEST(account_transfers_lists_transfers_below_the_floor)
{
    open_account(1, "o1");
    open_account(2, "o2");
    open_account(3, "o3");
    const unsigned old = 6, young = 4;
    int64_t old_ms = ts.now_ms;
    uint64_t want[16]; /* account 1's transfers, in creation order */
    unsigned wanted = 0;
    for (unsigned i = 0; i < old + young; i++) {
        if (i == old)
            ts.now_ms += 10 * DAY_MS;
        uint64_t debit = 1 + i % 3, credit = 1 + (i + 1) % 3;
        ledger_command c = i == 2 ? test_cmd_hold(100 + i, debit, credit, 5, 0)
                                  : test_cmd_transfer(100 + i, debit, credit, 5);
        char key[16];
        snprintf(key, sizeof(key), "t%u", i);
        ck_assert_int_eq(test_apply(&ts, "shop", key, &c).code, TALLY_ok);
        if (debit == 1 || credit == 1)
            want[wanted++] = 100 + i;
    }
    ledger_command post = test_cmd_post(102, 5); /* 3 -> 1, held below the floor */
    ck_assert_int_eq(test_apply(&ts, "shop", "p102", &post).code, TALLY_ok);
    uint64_t entries = test_count(&ts, STORE_DB_TRANSFER_INDEX);
    ledger_retention_work w = sweep(30 * DAY_MS, 5 * DAY_MS);
    ck_assert_uint_eq(w.events_removed, 3 + old);
    /* ALL and two entries by account for each old transfer */
    ck_assert_uint_eq(test_count(&ts, STORE_DB_TRANSFER_INDEX), entries + 3 * old);
    listed l;
    for (uint32_t limit = 1; limit <= 8; limit += 7) {
        ledger_query q = {.account_id = 1, .debits = true, .credits = true, .limit = limit};
        account_transfers(q, &l);
        ck_assert_uint_eq(l.n, wanted);
        for (unsigned i = 0; i < wanted; i++)
            ck_assert_uint_eq(l.ids[i], want[i]);
        q.reversed = true;
        account_transfers(q, &l);
        ck_assert_uint_eq(l.n, wanted);
        for (unsigned i = 0; i < wanted; i++)
            ck_assert_uint_eq(l.ids[i], want[wanted - 1 - i]);
        q.timestamp_max_ms = old_ms; /* below the floor only */
        account_transfers(q, &l);
        ck_assert_uint_eq(l.n, 4); /* 105, 103, 102, 100 */
        ck_assert_uint_eq(l.ids[0], 105);
        ck_assert_uint_eq(l.ids[3], 100);
        q.reversed = false, q.timestamp_max_ms = 0, q.timestamp_min_ms = old_ms + 1;
        account_transfers(q, &l); /* above it only */
        ck_assert_uint_eq(l.n, wanted - 4);
        ck_assert_uint_eq(l.ids[0], 106);
        q.timestamp_min_ms = 0, q.debits = false; /* credits: the hold 102 once */
        account_transfers(q, &l);
        ck_assert_uint_eq(l.n, 3);
        ck_assert_uint_eq(l.ids[0], 102);
        ck_assert_uint_eq(l.ids[1], 105);
        ck_assert_uint_eq(l.ids[2], 108);
        /* transfer_query without a filter: every transfer, the same way */
        ledger_query all = {.limit = limit};
        account_transfers(all, &l);
        ck_assert_uint_eq(l.n, old + young);
        for (unsigned i = 0; i < old + young; i++)
            ck_assert_uint_eq(l.ids[i], 100 + i);
        all.reversed = true, all.timestamp_min_ms = old_ms, all.timestamp_max_ms = old_ms;
        account_transfers(all, &l);
        ck_assert_uint_eq(l.n, old);
        for (unsigned i = 0; i < old; i++)
            ck_assert_uint_eq(l.ids[i], 100 + old - 1 - i);
    }
    /* The build of an upgraded store's indexes puts them again. */
    store_txn t;
    ck_assert_int_eq(store_txn_begin(ts.st, NULL, false, &t), TALLY_ok);
    ck_assert_int_eq(store_put(&t, STORE_DB_META, ledger_index_pending_key,
                               strlen(ledger_index_pending_key), "", 1, 0), TALLY_ok);
    ck_assert_int_eq(store_txn_commit(&t), TALLY_ok);
    uint64_t records;
    ck_assert_int_eq(ledger_index_build(ts.st, &records), TALLY_ok);
    ck_assert_uint_eq(test_count(&ts, STORE_DB_TRANSFER_INDEX), entries + 3 * old);
    /* the invariants (teardown) find each retired transfer's two entries */
}
END_TEST

/* As tallyd's writer runs it: log retention in a transaction nested in a
 * group's, between the group's commands, whose history entries are still
 * pending. The sweep's first delete writes them (a record, in the nested
 * transaction), then the removed events' entries go from "history" and
 * the records; the group's later entries make a record at its commit.
 * Aborted, the sweep leaves nothing, and the pending entries are written
 * at the commit as they were. */
static void retention_in_a_group(bool abort)
{
    open_account(1, "o1");
    open_account(2, "o2");
    const unsigned old = HISTORY_RECENT_RECORDS_MAX + 3; /* 17 folded, 2 in records */
    uint64_t seqs[HISTORY_RECENT_RECORDS_MAX + 8];
    unsigned n = 0;
    for (; n < old; n++) {
        ledger_command c = test_cmd_transfer(100 + n, 1 + n % 2, 2 - n % 2, 1);
        char key[16];
        snprintf(key, sizeof(key), "t%u", n);
        seqs[n] = test_apply(&ts, "shop", key, &c).first_seq;
    }
    ck_assert_uint_eq(test_history_seqs(&ts, NULL), 2 * (HISTORY_RECENT_RECORDS_MAX + 1));
    ck_assert_uint_eq(test_count(&ts, STORE_DB_HISTORY_RECENT), 2);
    ts.now_ms += 10 * DAY_MS;
    store_txn t, child;
    ck_assert_int_eq(store_txn_begin(ts.st, NULL, false, &t), TALLY_ok);
    for (unsigned i = 0; i < 4; i++, n++) {
        if (i == 2) {
            ck_assert_int_eq(store_txn_begin(ts.st, &t, false, &child), TALLY_ok);
            ledger_retention opt = {0, 5 * DAY_MS, 0};
            ledger_retention_work w;
            ck_assert_int_eq(ledger_retention_sweep(&child, ts.now_ms, &opt, &w), TALLY_ok);
            ck_assert_uint_eq(w.events_removed, 2 + old);
            if (abort)
                store_txn_abort(&child);
            else
                ck_assert_int_eq(store_txn_commit(&child), TALLY_ok);
        }
        ledger_command c = test_cmd_transfer(200 + i, 2 - i % 2, 1 + i % 2, 1);
        char key[16];
        snprintf(key, sizeof(key), "g%u", i);
        seqs[n] = apply_in(&t, key, &c).first_seq;
    }
    ck_assert_int_eq(store_txn_commit(&t), TALLY_ok);
    unsigned first = abort ? 0 : old; /* the entries that stay */
    ck_assert_uint_eq(test_history_entries(&ts), 2 * (n - first));
    ck_assert_uint_eq(test_count(&ts, STORE_DB_HISTORY_RECENT), abort ? 3 : 2);
    store_txn r;
    ck_assert_int_eq(store_txn_begin(ts.st, NULL, true, &r), TALLY_ok);
    for (uint64_t account = 1; account <= 2; account++)
        for (int reverse = 0; reverse <= 1; reverse++) {
            uint64_t got[HISTORY_RECENT_RECORDS_MAX + 8];
            uint32_t count;
            ck_assert_int_eq(ledger_history_seqs(&r, account, reverse, 0, got, n + 1, &count),
                             TALLY_ok);
            ck_assert_uint_eq(count, n - first);
            for (uint32_t i = 0; i < count; i++)
                ck_assert_uint_eq(got[i], seqs[reverse ? n - 1 - i : first + i]);
        }
    store_txn_abort(&r);
    /* the invariants (teardown) find every event's entries and no others */
}

START_TEST(log_retention_in_a_group_with_pending_history)
{
    retention_in_a_group(false);
}
END_TEST

START_TEST(log_retention_aborted_in_a_group_leaves_pending_history)
{
    retention_in_a_group(true);
}
END_TEST

/* Create subscriber name in t with the defaults, from the beginning. */
static sub_state sub_from_beginning(store_txn *t, const char *name)
{
    sub_config cfg;
    sub_config_default(&cfg);
    sub_start beginning = {SUB_START_BEGINNING, 0, 0};
    bool created;
    sub_state st;
    ck_assert_int_eq(sub_create(t, tally_str_from(name), &beginning, &cfg, ts.now_ms, &created,
                                &st), TALLY_ok);
    return st;
}

START_TEST(subscribers_and_dead_letters_hold_the_log_back)
{
    for (unsigned i = 1; i <= 6; i++) {
        char key[8];
        snprintf(key, sizeof(key), "o%u", i);
        open_account(i, key);
    }
    store_txn t;
    ck_assert_int_eq(store_txn_begin(ts.st, NULL, false, &t), TALLY_ok);
    sub_state st = sub_from_beginning(&t, "slow");
    sub_delivery d[8];
    uint32_t count, acked;
    int64_t due;
    ck_assert_int_eq(sub_fetch(&t, tally_str_from("slow"), 5, false, tally_str_from(NULL),
                               ts.now_ms, d, &count, &due, &st), TALLY_ok);
    ck_assert_int_eq(sub_park(&t, tally_str_from("slow"), 3, tally_str_from("bad"), ts.now_ms,
                              &st), TALLY_ok);
    uint64_t done[] = {1, 2, 4};
    ck_assert_int_eq(sub_ack(&t, tally_str_from("slow"), 0, done, 3, ts.now_ms, &acked, &st),
                     TALLY_ok);
    ck_assert_uint_eq(st.ack_floor, 4);
    ck_assert_int_eq(store_txn_commit(&t), TALLY_ok);
    ts.now_ms += 10 * DAY_MS;
    ledger_retention_work w = sweep(0, DAY_MS);
    ck_assert_uint_eq(w.events_removed, 2); /* the dead letter at 3 holds the rest */
    ck_assert_int_eq(store_txn_begin(ts.st, NULL, false, &t), TALLY_ok);
    ck_assert_int_eq(sub_dlq_discard(&t, tally_str_from("slow"), 3, ts.now_ms), TALLY_ok);
    ck_assert_int_eq(store_txn_commit(&t), TALLY_ok);
    w = sweep(0, DAY_MS);
    ck_assert_uint_eq(w.events_removed, 2); /* now up to the ack floor, 4 */
    ck_assert_uint_eq(w.log_floor, 4);
}
END_TEST

#define DEAD_MANY 300 /* more than one pass removes */

/* n events, each parked as a dead letter of subscriber "dlq" at ts.now_ms. */
static void park_all(unsigned n)
{
    for (unsigned i = 1; i <= n; i++) {
        ledger_command c = test_cmd_open(1000 + i, 1, 0);
        ck_assert_int_eq(test_apply(&ts, "shop", NULL, &c).code, TALLY_ok);
    }
    store_txn t;
    ck_assert_int_eq(store_txn_begin(ts.st, NULL, false, &t), TALLY_ok);
    sub_state st = sub_from_beginning(&t, "dlq");
    static sub_delivery d[TALLY_SUB_FETCH_EVENTS_MAX];
    uint32_t count;
    int64_t due;
    ck_assert_int_eq(sub_fetch(&t, tally_str_from("dlq"), n, false, tally_str_from(NULL),
                               ts.now_ms, d, &count, &due, &st), TALLY_ok);
    ck_assert_uint_eq(count, n);
    for (unsigned i = 0; i < count; i++)
        ck_assert_int_eq(sub_park(&t, tally_str_from("dlq"), d[i].seq, tally_str_from("no handler"),
                                  ts.now_ms, &st), TALLY_ok);
    ck_assert_int_eq(store_txn_commit(&t), TALLY_ok);
}

static ledger_retention_work dlq_sweep(int64_t age_ms, sub_dlq_position *pos)
{
    ledger_retention opt = {.dlq_age_ms = age_ms, .dlq_position = pos};
    return sweep_with(&opt);
}

static sub_state dlq_state(void)
{
    store_txn t;
    sub_state st;
    ck_assert_int_eq(store_txn_begin(ts.st, NULL, true, &t), TALLY_ok);
    ck_assert_int_eq(sub_get(&t, tally_str_from("dlq"), &st), TALLY_ok);
    store_txn_abort(&t);
    return st;
}

typedef struct expired_seen {
    uint64_t count, last_letter;
} expired_seen;

static void expect_expired_event(const log_event *ev, void *ctx)
{
    expired_seen *x = ctx;
    ck_assert(tally_str_equal(ev->type, tally_str_from("dead_letter.expired")));
    ck_assert_int_eq(ev->entity.kind, LOG_ENTITY_DEAD_LETTER);
    ck_assert(tally_str_equal(ev->entity.subscriber, tally_str_from("dlq")));
    ck_assert_uint_eq(ev->entity_version, 1);
    ck_assert(!ev->has_causation);
    const msgpack_object *row = log_event_part(ev, LOG_PART_DEAD_LETTER);
    ck_assert_ptr_nonnull(row);
    ck_assert_uint_eq(row->via.array.size, 5);
    ck_assert_uint_eq(row->via.array.ptr[1].via.u64, ev->entity.letter_seq);
    ck_assert_uint_eq(row->via.array.ptr[2].via.u64, 1);                   /* attempts */
    ck_assert_int_eq(row->via.array.ptr[3].via.i64, TEST_NOW_MS);         /* parked */
    ck_assert_uint_eq(row->via.array.ptr[4].via.str.size, strlen("no handler"));
    ck_assert_uint_gt(ev->entity.letter_seq, x->last_letter);             /* in dlq order */
    x->last_letter = ev->entity.letter_seq;
    x->count++;
}

/* Dead letters parked longer than the age go, a bounded number per pass,
 * each with a dead_letter.expired event in the same transaction; one
 * marked for replay stays; younger ones and no age keep them. */
START_TEST(expired_dead_letters_go_with_an_event_each)
{
    park_all(DEAD_MANY);
    uint64_t head = test_head(&ts).seq;
    sub_dlq_position pos = {.len = 0};
    ts.now_ms += DAY_MS;
    ck_assert_uint_eq(dlq_sweep(0, &pos).dead_letters_removed, 0); /* off: kept */
    ck_assert_uint_eq(dlq_sweep(2 * DAY_MS, &pos).dead_letters_removed, 0); /* young */
    store_txn t;
    uint32_t replaying;
    ck_assert_int_eq(store_txn_begin(ts.st, NULL, false, &t), TALLY_ok);
    ck_assert_int_eq(sub_dlq_replay(&t, tally_str_from("dlq"), true, 7, ts.now_ms, &replaying),
                     TALLY_ok);
    ck_assert_int_eq(store_txn_commit(&t), TALLY_ok);
    ledger_retention_work w = dlq_sweep(DAY_MS - 1, &pos);
    ck_assert_uint_eq(w.dead_letters_removed, TALLY_DLQ_EXPIRE_ITEMS_MAX);
    ck_assert_uint_eq(dlq_state().dead_letters, DEAD_MANY - TALLY_DLQ_EXPIRE_ITEMS_MAX);
    w = dlq_sweep(DAY_MS - 1, &pos);
    ck_assert_uint_eq(w.dead_letters_removed, DEAD_MANY - TALLY_DLQ_EXPIRE_ITEMS_MAX - 1);
    ck_assert_uint_eq(dlq_sweep(DAY_MS - 1, &pos).dead_letters_removed, 0);
    sub_state st = dlq_state();
    ck_assert_uint_eq(st.dead_letters, 1); /* 7, marked for replay */
    ck_assert_uint_eq(st.replaying, 1);
    ck_assert_uint_eq(test_count(&ts, STORE_DB_DLQ), 1);
    /* one event per removal, after the head, in the chain (the teardown's
     * invariants walk it and fold past them) */
    ck_assert_uint_eq(test_head(&ts).seq, head + DEAD_MANY - 1);
    expired_seen x = {0};
    for (uint64_t seq = head + 1; seq <= head + DEAD_MANY - 1; seq++)
        test_with_event(&ts, seq, expect_expired_event, &x); /* the 2nd pass resumes */
    ck_assert_uint_eq(x.count, DEAD_MANY - 1);
}
END_TEST

static void note(const char *check, const char *entity, const char *detail, void *ctx)
{
    (void)detail;
    char *out = ctx;
    if (out[0] == '\0')
        snprintf(out, 128, "%s %s", check, entity);
}

START_TEST(a_tampered_checkpoint_is_caught)
{
    open_account(1, "o1");
    open_account(2, "o2");
    ledger_command c = test_cmd_transfer(10, 1, 2, 100);
    ck_assert_int_eq(test_apply(&ts, "shop", "t10", &c).code, TALLY_ok);
    ts.now_ms += 10 * DAY_MS;
    c = test_cmd_transfer(11, 1, 2, 5);
    ck_assert_int_eq(test_apply(&ts, "shop", "t11", &c).code, TALLY_ok);
    ck_assert_uint_eq(sweep(0, DAY_MS).events_removed, 3);
    /* tamper: account 2's snapshot says 99 instead of 100 */
    store_txn t;
    ck_assert_int_eq(store_txn_begin(ts.st, NULL, false, &t), TALLY_ok);
    uint8_t key[9] = {'a'};
    put_u64_be(key + 1, 2);
    MDB_val v;
    ck_assert_int_eq(store_get(&t, STORE_DB_CHECKPOINT, key, 9, &v), TALLY_ok);
    msgpack_unpacked up;
    msgpack_unpacked_init(&up);
    ck_assert_int_eq(msgpack_safe_unpack(v.mv_data, v.mv_size, 16, &up), TALLY_ok);
    ledger_account a;
    ck_assert_int_eq(ledger_account_unpack(&up.data, &a), TALLY_ok);
    msgpack_unpacked_destroy(&up);
    a.credits_posted = 99;
    uint8_t buf[512];
    msgpack_safe_buffer sb;
    msgpack_packer pk;
    msgpack_safe_buffer_init(&sb, buf, sizeof(buf), &pk);
    ck_assert_int_eq(ledger_account_pack(&pk, &a, false), 0);
    ck_assert_int_eq(store_put(&t, STORE_DB_CHECKPOINT, key, 9, buf, sb.len, 0), TALLY_ok);
    ck_assert_int_eq(store_txn_commit(&t), TALLY_ok);
    ck_assert_int_eq(store_txn_begin(ts.st, NULL, true, &t), TALLY_ok);
    char first[128] = "";
    ledger_invariant_stats stats;
    ck_assert_int_eq(ledger_invariants_check(&t, note, first, &stats), TALLY_ok);
    store_txn_abort(&t);
    ck_assert_uint_gt(stats.findings, 0);
    ck_assert_msg(strncmp(first, "rebuild account:2", 17) == 0, "first finding: %s", first);
    /* put it back for teardown */
    a.credits_posted = 100;
    ck_assert_int_eq(store_txn_begin(ts.st, NULL, false, &t), TALLY_ok);
    msgpack_safe_buffer_init(&sb, buf, sizeof(buf), &pk);
    ck_assert_int_eq(ledger_account_pack(&pk, &a, false), 0);
    ck_assert_int_eq(store_put(&t, STORE_DB_CHECKPOINT, key, 9, buf, sb.len, 0), TALLY_ok);
    ck_assert_int_eq(store_txn_commit(&t), TALLY_ok);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("retention");
    TCase *tc = tcase_create("retention");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, inbox_records_older_than_the_window_go);
    tcase_add_test(tc, failed_transfer_ids_go_with_their_inbox_records);
    tcase_add_test(tc, sweeps_are_bounded);
    tcase_add_test(tc, a_large_group_is_swept_across_batches);
    tcase_add_test(tc, a_group_indexes_only_the_records_it_keeps);
    tcase_add_test(tc, both_layouts_are_swept);
    tcase_add_test(tc, an_unindexed_record_is_found);
    tcase_add_test(tc, log_retention_keeps_a_checkpoint_the_rebuild_starts_from);
    tcase_add_test(tc, log_retention_removes_history_from_the_index_and_the_tails);
    tcase_add_test(tc, log_retention_removes_history_from_the_recent_records);
    tcase_add_test(tc, account_transfers_lists_transfers_below_the_floor);
    tcase_add_test(tc, log_retention_in_a_group_with_pending_history);
    tcase_add_test(tc, log_retention_aborted_in_a_group_leaves_pending_history);
    tcase_add_test(tc, subscribers_and_dead_letters_hold_the_log_back);
    tcase_add_test(tc, a_tampered_checkpoint_is_caught);
    tcase_add_test(tc, expired_dead_letters_go_with_an_event_each);
    suite_add_tcase(s, tc);
    return test_run_suite(s);
}
