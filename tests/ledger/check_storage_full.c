/*
 * check_storage_full.c — a full map is a fault, never a half-applied
 * command: storage_full is returned, nothing of the command remains, it is
 * not stored (so the same key may be retried), reads keep working, and once
 * the store is reopened with a larger map the retry succeeds exactly once.
 *
 * Scenarios:
 *   - single commands (ledger_apply_one) fill maps of 1 MiB, 1800 KiB and
 *     2 MiB with a mix of transfers, holds with timeouts, timed grants and
 *     chains until
 *     storage_full, which comes at a commit that folds the history's
 *     recent records; the store is compared with a snapshot taken after the
 *     last success (every database's entry count, the log head, the
 *     accounts byte for byte);
 *   - a group-commit batch (many ledger_apply in one outer transaction) that
 *     fills the map midway: the fault comes from an apply or from the
 *     commit, and after the abort nothing of the batch remains;
 *   - on a map filled by groups of 25 commands, a group whose last member
 *     (a 32-member chain) hits storage_full is committed without it: its
 *     batch-mates are kept, each exactly once, the chain leaves nothing;
 *     every try that fails on the way (a command, or the commit, which
 *     also writes the group's history entries) leaves nothing either.
 *     With a larger map the chain then succeeds.
 */
#include "ledger/history.h"
#include "tests/support/test_support.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#define FULL_CONSUMER "full"
#define FULL_ACCOUNTS 2
#define FULL_COMMANDS_MAX 100000 /* far more than any small map holds */
#define FULL_BATCH_MAX 5000
#define FULL_GROUP_COMMANDS 25 /* a group needs fewer pages than the big chain */
#define FULL_BIGGER_MAP_BYTES (UINT64_C(8) << 20)

/* ---- a snapshot of everything a command could change ---- */

typedef struct full_snapshot {
    log_head head;
    uint64_t counts[STORE_DB_COUNT];
    bool present[FULL_ACCOUNTS + 1];
    uint8_t accounts[FULL_ACCOUNTS + 1][LEDGER_ACCOUNT_RECORD_BYTES_MAX];
} full_snapshot;

static void snapshot_take(test_store *ts, full_snapshot *s)
{
    memset(s, 0, sizeof(*s));
    store_txn t;
    ck_assert_int_eq(store_txn_begin(ts->st, NULL, true, &t), TALLY_ok);
    ck_assert_int_eq(log_head_get(&t, &s->head), TALLY_ok);
    for (int db = 0; db < STORE_DB_COUNT; db++)
        ck_assert_int_eq(store_count(&t, (store_db)db, &s->counts[db]), TALLY_ok);
    for (uint64_t id = 1; id <= FULL_ACCOUNTS; id++) {
        ledger_account a;
        int rc = ledger_account_get(&t, id, &a);
        ck_assert(rc == TALLY_ok || rc == TALLY_not_found);
        s->present[id] = rc == TALLY_ok;
        if (rc == TALLY_ok)
            ledger_account_encode(&a, s->accounts[id]);
    }
    store_txn_abort(&t);
}

static void snapshot_assert_equal(const full_snapshot *want, const full_snapshot *have,
                                  const char *when)
{
    ck_assert_msg(have->head.seq == want->head.seq &&
                      memcmp(have->head.hash, want->head.hash, LOG_HASH_BYTES) == 0,
                  "%s: log head moved from %" PRIu64 " to %" PRIu64, when, want->head.seq,
                  have->head.seq);
    for (int db = 0; db < STORE_DB_COUNT; db++)
        ck_assert_msg(have->counts[db] == want->counts[db],
                      "%s: database %s has %" PRIu64 " entries, had %" PRIu64, when,
                      store_db_name((store_db)db), have->counts[db], want->counts[db]);
    for (int id = 1; id <= FULL_ACCOUNTS; id++)
        ck_assert_msg(have->present[id] == want->present[id] &&
                          memcmp(have->accounts[id], want->accounts[id],
                                 LEDGER_ACCOUNT_RECORD_BYTES_MAX) == 0,
                      "%s: account %d changed", when, id);
}

/* ---- the commands that fill the map ---- */

typedef struct full_command {
    ledger_command cmd;
    ledger_command members[2];
    char subject[TALLY_SUBJECT_BYTES_MAX + 1];
    char key[32];
} full_command;

/* Command n (n >= 1), cycling through four kinds so that the map fills in
 * different puts: transfer; hold with a timeout (expiry index); timed grant
 * with a long subject (entitlement + expiry); chain transfer + grant. */
static void full_command_build(uint64_t n, full_command *c)
{
    snprintf(c->key, sizeof(c->key), "f%" PRIu64, n);
    switch (n % 4) {
    case 0:
        c->cmd = test_cmd_transfer(n, 1, 2, 1 + (int64_t)(n % 50));
        break;
    case 1:
        c->cmd = test_cmd_hold(n, 2, 1, 5, 3600);
        break;
    case 2:
        snprintf(c->subject, sizeof(c->subject),
                 "subject-%08" PRIu64 "-padded-to-make-the-entitlement-key-long", n);
        c->cmd = test_cmd_grant(c->subject, "feature", 0);
        c->cmd.u.entitlement.duration_ms = INT64_C(86400000);
        break;
    default:
        snprintf(c->subject, sizeof(c->subject), "chain-%" PRIu64, n);
        c->members[0] = test_cmd_transfer(n, 1, 2, 3);
        c->members[1] = test_cmd_grant(c->subject, "pro", 0);
        c->members[1].u.entitlement.has_grant_transfer = true;
        c->members[1].u.entitlement.grant_transfer_id = test_id(n);
        c->cmd = (ledger_command){.kind = LEDGER_CHAIN};
        c->cmd.u.chain = (ledger_chain){.members = c->members, .count = 2};
        break;
    }
}

static uint32_t full_expected_events(uint64_t n) { return n % 4 == 3 ? 2 : 1; }

static ledger_request full_request(const full_command *c)
{
    return (ledger_request){.consumer = tally_str_from(FULL_CONSUMER),
                            .key = tally_str_from(c->key),
                            .command = c->cmd};
}

static void open_accounts(test_store *ts)
{
    for (uint64_t id = 1; id <= FULL_ACCOUNTS; id++) {
        ledger_command open = test_cmd_open(id, 1, 0);
        ck_assert_int_eq(test_code(ts, &open), TALLY_ok);
    }
}

static int inbox_lookup(test_store *ts, const char *key, ledger_inbox_record *rec)
{
    store_txn t;
    ck_assert_int_eq(store_txn_begin(ts->st, NULL, true, &t), TALLY_ok);
    int rc = ledger_inbox_get(&t, tally_str_from(FULL_CONSUMER), tally_str_from(key), rec);
    store_txn_abort(&t);
    return rc;
}

/* Reads of every kind still work on a store whose map is full. */
static void assert_reads_work(test_store *ts, uint64_t last_ok)
{
    store_txn t;
    ck_assert_int_eq(store_txn_begin(ts->st, NULL, true, &t), TALLY_ok);
    ledger_account a;
    ck_assert_int_eq(ledger_account_get(&t, 1, &a), TALLY_ok);
    ck_assert_uint_gt(a.version, 1);
    log_head head;
    ck_assert_int_eq(log_head_get(&t, &head), TALLY_ok);
    uint8_t key[8];
    log_seq_key(head.seq, key);
    MDB_val v;
    ck_assert_int_eq(store_get(&t, STORE_DB_LOG, key, 8, &v), TALLY_ok);
    uint64_t used, map;
    ck_assert_int_eq(store_map_usage(&t, &used, &map), TALLY_ok);
    ck_assert_uint_le(used, map);
    store_txn_abort(&t);
    char last_key[32];
    snprintf(last_key, sizeof(last_key), "f%" PRIu64, last_ok);
    ledger_inbox_record rec;
    ck_assert_int_eq(inbox_lookup(ts, last_key, &rec), TALLY_ok);
    ck_assert_int_eq(rec.outcome.code, TALLY_ok);
}

/* Apply commands 1, 2, ... one per durable transaction until the map is
 * full; returns the number of the command that failed. *before is the
 * store as it was after the last success. */
static uint64_t fill_until_full(test_store *ts, full_snapshot *before)
{
    snapshot_take(ts, before);
    for (uint64_t n = 1; n <= FULL_COMMANDS_MAX; n++) {
        full_command c;
        full_command_build(n, &c);
        ledger_request req = full_request(&c);
        ledger_outcome out;
        int rc = ledger_apply_one(ts->st, &req, ts->now_ms, &out);
        if (rc == TALLY_storage_full)
            return n;
        ck_assert_msg(rc == TALLY_ok, "command %" PRIu64 ": fault %s before the map filled", n,
                      tally_strerror(rc));
        ck_assert_msg(out.code == TALLY_ok && out.event_count == full_expected_events(n) &&
                          out.first_seq == before->head.seq + 1,
                      "command %" PRIu64 ": %s", n, tally_strerror(out.code));
        snapshot_take(ts, before);
    }
    ck_abort_msg("the map never filled");
    return 0;
}

/* Sizes where the map fills in different commands (a transfer, a hold). */
static const uint64_t fill_map_sizes[] = {UINT64_C(1056) << 10, UINT64_C(1072) << 10,
                                          UINT64_C(1088) << 10};

START_TEST(test_single_command_fills_map)
{
    uint64_t map_bytes = fill_map_sizes[_i];
    test_store ts;
    test_store_open_sized(&ts, map_bytes);
    open_accounts(&ts);

    full_snapshot before, after;
    uint64_t failed = fill_until_full(&ts, &before);
    fprintf(stderr, "storage_full: %" PRIu64 " KiB map full at command %" PRIu64
                    " (kind %" PRIu64 ", log head %" PRIu64 ", %" PRIu64 " recent records)\n",
            map_bytes >> 10, failed, failed % 4, before.head.seq,
            before.counts[STORE_DB_HISTORY_RECENT]);
    ck_assert_uint_gt(failed, 10); /* it filled midway, not at once */
    /* A commit that folds the history's recent records writes more pages
     * than most, and the sizes here are ones where the map fills at one
     * (with "history" in blocks, not at every size; each change of a
     * record's size moves them: tune them again with this test's
     * fprintf over a range of sizes): each fails a command
     * with history entries while 16 records wait, and what follows checks
     * that a fold cut short leaves nothing either. */
    ck_assert_uint_eq(before.counts[STORE_DB_HISTORY_RECENT], HISTORY_RECENT_RECORDS_MAX);
    ck_assert_uint_ne(failed % 4, 2);

    /* The failed command left nothing: no inbox record, no event, no
     * balance, no transfer, no entitlement, no expiry entry. */
    full_command c;
    full_command_build(failed, &c);
    ledger_inbox_record rec;
    ck_assert_int_eq(inbox_lookup(&ts, c.key, &rec), TALLY_not_found);
    snapshot_take(&ts, &after);
    snapshot_assert_equal(&before, &after, "after storage_full");
    assert_reads_work(&ts, failed - 1);
    test_assert_invariants(&ts);

    /* Not stored: the same key fails the same way, again leaving nothing. */
    ledger_request req = full_request(&c);
    ledger_outcome out;
    ck_assert_int_eq(ledger_apply_one(ts.st, &req, ts.now_ms, &out), TALLY_storage_full);
    ck_assert_int_eq(inbox_lookup(&ts, c.key, &rec), TALLY_not_found);
    snapshot_take(&ts, &after);
    snapshot_assert_equal(&before, &after, "after the retry");

    /* A larger map: the same key succeeds, exactly once. */
    ts.map_size_bytes = FULL_BIGGER_MAP_BYTES;
    test_store_reopen(&ts);
    snapshot_take(&ts, &after);
    snapshot_assert_equal(&before, &after, "after reopening");
    ck_assert_int_eq(ledger_apply_one(ts.st, &req, ts.now_ms, &out), TALLY_ok);
    ck_assert_int_eq(out.code, TALLY_ok);
    ck_assert(!out.replayed);
    ck_assert_uint_eq(out.first_seq, before.head.seq + 1);
    ck_assert_uint_eq(out.event_count, full_expected_events(failed));
    uint64_t first_seq = out.first_seq;
    /* It folded: the records and its own entries went to the tails. */
    ck_assert_uint_eq(test_count(&ts, STORE_DB_HISTORY_RECENT), 0);
    ck_assert_int_eq(ledger_apply_one(ts.st, &req, ts.now_ms, &out), TALLY_ok);
    ck_assert(out.replayed && out.code == TALLY_ok && out.first_seq == first_seq);
    ck_assert_uint_eq(test_head(&ts).seq, before.head.seq + full_expected_events(failed));
    ck_assert_uint_eq(test_count(&ts, STORE_DB_INBOX), before.counts[STORE_DB_INBOX] + 1);
    ck_assert_int_eq(inbox_lookup(&ts, c.key, &rec), TALLY_ok);
    ck_assert_uint_eq(rec.outcome.first_seq, first_seq);

    /* The store continues: the next hundred commands all fit. */
    for (uint64_t n = failed + 1; n <= failed + 100; n++) {
        full_command next;
        full_command_build(n, &next);
        ledger_outcome o = test_apply(&ts, FULL_CONSUMER, next.key, &next.cmd);
        ck_assert_msg(o.code == TALLY_ok && !o.replayed, "command %" PRIu64 ": %s", n,
                      tally_strerror(o.code));
    }
    store_txn t;
    uint64_t used, map;
    ck_assert_int_eq(store_txn_begin(ts.st, NULL, true, &t), TALLY_ok);
    ck_assert_int_eq(store_map_usage(&t, &used, &map), TALLY_ok);
    store_txn_abort(&t);
    ck_assert_uint_eq(map, FULL_BIGGER_MAP_BYTES);
    test_assert_invariants(&ts);
    test_store_close(&ts);
}
END_TEST

/* ---- group commit ---- */

typedef struct batch_result {
    uint64_t first;       /* first command number of the batch */
    uint64_t applied;     /* commands applied before the fault */
    int apply_fault;      /* TALLY_ok when every apply succeeded */
    uint64_t first_seq;   /* first event of the batch */
} batch_result;

/* Apply commands first, first+1, ... into txn until a fault or
 * FULL_BATCH_MAX commands. */
static void apply_batch(test_store *ts, store_txn *txn, uint64_t first, batch_result *res)
{
    memset(res, 0, sizeof(*res));
    res->first = first;
    log_head head;
    ck_assert_int_eq(log_head_get(txn, &head), TALLY_ok);
    res->first_seq = head.seq + 1;
    uint64_t expect_seq = res->first_seq;
    for (uint64_t n = first; n < first + FULL_BATCH_MAX; n++) {
        full_command c;
        full_command_build(n, &c);
        ledger_request req = full_request(&c);
        ledger_outcome out;
        int rc = ledger_apply(txn, &req, ts->now_ms, &out);
        if (rc != TALLY_ok) {
            res->apply_fault = rc;
            /* The fault left the outer transaction as it was. */
            ck_assert_int_eq(txn->error, TALLY_ok);
            ck_assert_int_eq(log_head_get(txn, &head), TALLY_ok);
            ck_assert_uint_eq(head.seq, expect_seq - 1);
            ledger_inbox_record rec;
            ck_assert_int_eq(ledger_inbox_get(txn, req.consumer, req.key, &rec),
                             TALLY_not_found);
            return;
        }
        ck_assert_msg(out.code == TALLY_ok && out.first_seq == expect_seq &&
                          out.event_count == full_expected_events(n),
                      "batch command %" PRIu64 ": %s", n, tally_strerror(out.code));
        expect_seq += out.event_count;
        res->applied++;
    }
}

/* Keys first..first+count-1 have (present) or lack (!present) their record;
 * present ones point at their own events, in order from first_seq. */
static void assert_batch_keys(test_store *ts, uint64_t first, uint64_t count, bool present,
                              uint64_t first_seq)
{
    store_txn t;
    ck_assert_int_eq(store_txn_begin(ts->st, NULL, true, &t), TALLY_ok);
    uint64_t seq = first_seq;
    for (uint64_t n = first; n < first + count; n++) {
        full_command c;
        full_command_build(n, &c);
        ledger_inbox_record rec;
        int rc = ledger_inbox_get(&t, tally_str_from(FULL_CONSUMER), tally_str_from(c.key),
                                  &rec);
        if (!present) {
            ck_assert_msg(rc == TALLY_not_found, "key %s of the aborted batch remains", c.key);
            continue;
        }
        ck_assert_msg(rc == TALLY_ok, "key %s of the committed batch: %s", c.key,
                      tally_strerror(rc));
        ck_assert_uint_eq(rec.outcome.first_seq, seq);
        ck_assert_uint_eq(rec.outcome.event_count, full_expected_events(n));
        seq += rec.outcome.event_count;
    }
    store_txn_abort(&t);
}

/* Fill a fresh map with one batch, which is aborted if an apply fails;
 * returns TALLY_storage_full from the apply or the commit. *before is the
 * store before the batch. */
static int run_full_batch(test_store *ts, full_snapshot *before,
                          batch_result *res)
{
    test_store_open_sized(ts, TALLY_MAP_SIZE_BYTES_MIN);
    open_accounts(ts);
    /* Some earlier single commands, so the batch starts on a used map. */
    for (uint64_t n = 1; n <= 20; n++) {
        full_command c;
        full_command_build(n, &c);
        ck_assert_int_eq(test_apply(ts, FULL_CONSUMER, c.key, &c.cmd).code, TALLY_ok);
    }
    snapshot_take(ts, before);
    store_txn txn;
    ck_assert_int_eq(store_txn_begin(ts->st, NULL, false, &txn), TALLY_ok);
    ck_assert_int_eq(ledger_sweep(&txn, ts->now_ms, 0, NULL, NULL), TALLY_ok);
    apply_batch(ts, &txn, 21, res);
    fprintf(stderr, "storage_full: batch applied %" PRIu64 " commands, then %s\n",
            res->applied, tally_strerror(res->apply_fault));
    ck_assert_uint_gt(res->applied, 10); /* the map filled midway */
    int rc;
    if (res->apply_fault == TALLY_ok) {
        /* Every apply fit in the transaction: the commit must not. */
        rc = store_txn_commit(&txn);
        ck_assert_int_eq(rc, TALLY_storage_full);
    } else {
        ck_assert_int_eq(res->apply_fault, TALLY_storage_full);
        store_txn_abort(&txn);
        rc = TALLY_storage_full;
    }
    return rc;
}

START_TEST(test_group_batch_fills_map_abort)
{
    test_store ts;
    full_snapshot before, after;
    batch_result res;
    int rc = run_full_batch(&ts, &before, &res);
    ck_assert_int_eq(rc, TALLY_storage_full);
    /* Nothing of the batch remains. */
    snapshot_take(&ts, &after);
    snapshot_assert_equal(&before, &after, "after the aborted batch");
    assert_batch_keys(&ts, res.first, res.applied + 1, false, 0);
    assert_reads_work(&ts, 20);
    test_assert_invariants(&ts);

    /* The writer continues with smaller batches: the failed key first. */
    ledger_outcome out;
    full_command c;
    full_command_build(res.first, &c);
    ledger_request req = full_request(&c);
    ck_assert_int_eq(ledger_apply_one(ts.st, &req, ts.now_ms, &out), TALLY_ok);
    ck_assert(out.code == TALLY_ok && !out.replayed && out.first_seq == before.head.seq + 1);
    test_assert_invariants(&ts);
    test_store_close(&ts);
}
END_TEST

/* A chain of TALLY_CHAIN_COMMANDS_MAX timed grants with the longest
 * subjects and features: one command that needs many pages. */
typedef struct big_chain {
    ledger_command cmd;
    ledger_command members[TALLY_CHAIN_COMMANDS_MAX];
    char subjects[TALLY_CHAIN_COMMANDS_MAX][TALLY_SUBJECT_BYTES_MAX + 1];
    char feature[TALLY_FEATURE_BYTES_MAX + 1];
} big_chain;

static void big_chain_build(big_chain *b)
{
    memset(b->feature, 'f', TALLY_FEATURE_BYTES_MAX);
    b->feature[TALLY_FEATURE_BYTES_MAX] = '\0';
    for (int i = 0; i < TALLY_CHAIN_COMMANDS_MAX; i++) {
        char prefix[16];
        int len = snprintf(prefix, sizeof(prefix), "big-%02d-", i);
        memset(b->subjects[i], 's', TALLY_SUBJECT_BYTES_MAX); /* the longest subject */
        memcpy(b->subjects[i], prefix, (size_t)len);
        b->subjects[i][TALLY_SUBJECT_BYTES_MAX] = '\0';
        b->members[i] = test_cmd_grant(b->subjects[i], b->feature, 0);
        b->members[i].u.entitlement.duration_ms = INT64_C(86400000);
    }
    b->cmd = (ledger_command){.kind = LEDGER_CHAIN};
    b->cmd.u.chain = (ledger_chain){.members = b->members, .count = TALLY_CHAIN_COMMANDS_MAX};
}

/* Fill a fresh map as tallyd's writer does, FULL_GROUP_COMMANDS commands
 * in each committed transaction, until a group does not fit (an apply or
 * its commit fails; nothing of it may remain). Returns the group's first
 * command: the map has less room left than that group needs. */
static uint64_t fill_in_groups(test_store *ts)
{
    test_store_open_sized(ts, TALLY_MAP_SIZE_BYTES_MIN);
    open_accounts(ts);
    for (uint64_t first = 1; first < FULL_COMMANDS_MAX; first += FULL_GROUP_COMMANDS) {
        full_snapshot before, after;
        snapshot_take(ts, &before);
        store_txn txn;
        ck_assert_int_eq(store_txn_begin(ts->st, NULL, false, &txn), TALLY_ok);
        int rc = TALLY_ok;
        for (uint64_t n = first; rc == TALLY_ok && n < first + FULL_GROUP_COMMANDS; n++) {
            full_command c;
            full_command_build(n, &c);
            ledger_request req = full_request(&c);
            ledger_outcome out;
            rc = ledger_apply(&txn, &req, ts->now_ms, &out);
            ck_assert(rc != TALLY_ok || out.code == TALLY_ok);
        }
        rc = rc == TALLY_ok ? store_txn_commit(&txn) : (store_txn_abort(&txn), rc);
        if (rc == TALLY_storage_full) {
            snapshot_take(ts, &after);
            snapshot_assert_equal(&before, &after, "after a group that did not fit");
            return first;
        }
        ck_assert_msg(rc == TALLY_ok, "group from %" PRIu64 ": %s", first, tally_strerror(rc));
    }
    ck_abort_msg("the map never filled");
    return 0;
}

START_TEST(test_group_member_fails_batch_commits)
{
    /* BRIEF §3: one failing command rolls back only its own nested
     * transaction. The map is filled by groups as the writer fills it; the
     * group that no longer fits is applied again, shortened one command
     * at a time and ended with one big chain that does not fit, until its
     * commands apply and its commit (which also writes the history
     * entries the group collected, ledger/history.h) succeeds without the
     * chain. Every try that fails on the way (a command, or the commit)
     * must leave nothing. */
    test_store ts;
    full_snapshot before, after;
    uint64_t first = fill_in_groups(&ts);
    big_chain big;
    big_chain_build(&big);
    ledger_request big_req = {.consumer = tally_str_from(FULL_CONSUMER),
                              .key = tally_str_from("big"),
                              .command = big.cmd};
    uint64_t kept = 0;
    int rc;
    for (uint64_t drop = 1; drop < FULL_GROUP_COMMANDS && kept == 0; drop++) {
        snapshot_take(&ts, &before);
        store_txn txn;
        ck_assert_int_eq(store_txn_begin(ts.st, NULL, false, &txn), TALLY_ok);
        uint64_t count = FULL_GROUP_COMMANDS - drop, seq = before.head.seq + 1;
        rc = TALLY_ok;
        for (uint64_t n = first; rc == TALLY_ok && n < first + count; n++) {
            full_command c;
            full_command_build(n, &c);
            ledger_request req = full_request(&c);
            ledger_outcome out;
            rc = ledger_apply(&txn, &req, ts.now_ms, &out);
            ck_assert(rc != TALLY_ok || (out.code == TALLY_ok && out.first_seq == seq));
            seq += rc == TALLY_ok ? out.event_count : 0;
        }
        ledger_outcome out;
        if (rc == TALLY_ok) {
            rc = ledger_apply(&txn, &big_req, ts.now_ms, &out);
            if (rc == TALLY_ok) {
                /* The room left holds the chain: no shorter group will
                 * make it fail. */
                store_txn_abort(&txn);
                ck_abort_msg("dropping %" PRIu64 " commands: chain fits before a commit did",
                             drop);
            }
            ck_assert_int_eq(rc, TALLY_storage_full);
            ck_assert_int_eq(txn.error, TALLY_ok); /* the batch is not poisoned */
            rc = store_txn_commit(&txn);
        } else {
            ck_assert_int_eq(rc, TALLY_storage_full); /* a command of the group */
            store_txn_abort(&txn);
        }
        snapshot_take(&ts, &after);
        if (rc == TALLY_storage_full) {
            snapshot_assert_equal(&before, &after, "after a failed try");
            continue;
        }
        ck_assert_msg(rc == TALLY_ok, "commit: %s", tally_strerror(rc));
        kept = count;
        fprintf(stderr, "storage_full: batch of %" PRIu64 " + failing chain committed "
                        "(%" PRIu64 " dropped)\n", count, drop);
        assert_batch_keys(&ts, first, count, true, before.head.seq + 1);
        ck_assert_uint_eq(after.counts[STORE_DB_INBOX], before.counts[STORE_DB_INBOX] + count);
        ck_assert_uint_eq(after.head.seq, seq - 1);
        ledger_inbox_record rec;
        ck_assert_int_eq(inbox_lookup(&ts, "big", &rec), TALLY_not_found);
        for (int i = 0; i < TALLY_CHAIN_COMMANDS_MAX; i++) {
            ledger_entitlement e;
            ck_assert_int_eq(test_entitlement_rc(&ts, big.subjects[i], big.feature, &e),
                             TALLY_not_found);
        }
    }
    ck_assert_msg(kept > 0, "no batch committed with a failed member");
    test_assert_invariants(&ts);

    /* With a larger map the chain goes through, exactly once. */
    ts.map_size_bytes = FULL_BIGGER_MAP_BYTES;
    test_store_reopen(&ts);
    log_head head = test_head(&ts);
    ledger_outcome out;
    ck_assert_int_eq(ledger_apply_one(ts.st, &big_req, ts.now_ms, &out), TALLY_ok);
    ck_assert(out.code == TALLY_ok && !out.replayed && out.first_seq == head.seq + 1 &&
              out.event_count == TALLY_CHAIN_COMMANDS_MAX);
    ck_assert_int_eq(ledger_apply_one(ts.st, &big_req, ts.now_ms, &out), TALLY_ok);
    ck_assert(out.replayed);
    ck_assert_uint_eq(test_head(&ts).seq, head.seq + TALLY_CHAIN_COMMANDS_MAX);
    test_assert_invariants(&ts);
    test_store_close(&ts);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("storage_full");
    TCase *tc = tcase_create("map_full");
    tcase_set_timeout(tc, 600); /* thousands of fsyncs; slow under ASan */
    tcase_add_loop_test(tc, test_single_command_fills_map, 0,
                        (int)(sizeof(fill_map_sizes) / sizeof(fill_map_sizes[0])));
    tcase_add_test(tc, test_group_batch_fills_map_abort);
    tcase_add_test(tc, test_group_member_fails_batch_commits);
    suite_add_tcase(s, tc);
    return test_run_suite_both_modes(s);
}
