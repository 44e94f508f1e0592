/*
 * test_support.h — shared helpers for tally's Check suites: a real store in
 * a temporary directory, command builders, and the invariant assertion that
 * every suite calls after its scenarios.
 */
#ifndef TALLY_TEST_SUPPORT_H
#define TALLY_TEST_SUPPORT_H

#include "common/error.h"
#include "ledger/invariants.h"
#include "ledger/ledger.h"
#include "log/log.h"
#include "log/store.h"

#include <check.h>
#include <stdint.h>

/* A fixed, plausible commit time: 2026-01-01T00:00:00Z. */
#define TEST_NOW_MS INT64_C(1767225600000)

typedef struct test_store {
    char dir[256];
    store *st;
    int64_t now_ms;      /* commit time used by test_apply; tests move it */
    uint64_t map_size_bytes;
    unsigned next_key;   /* for generated keys */
} test_store;

/* Create a temp dir and open a store in it (map 64 MiB unless set). */
void test_store_open(test_store *ts);
void test_store_open_sized(test_store *ts, uint64_t map_size_bytes);
/* The same (64 MiB) with the new store's identity given (a copy of
 * another: store_options.instance_id). */
void test_store_open_as(test_store *ts, const tally_id128 *instance_id);
/* Close and open again on the same directory. */
void test_store_reopen(test_store *ts);
/* Close and remove the directory. */
void test_store_close(test_store *ts);

/* Apply cmd under (consumer, key) at ts->now_ms in its own transaction.
 * key NULL: a fresh unique key. Fails the test on a fault. */
ledger_outcome test_apply(test_store *ts, const char *consumer, const char *key,
                          const ledger_command *cmd);
/* Same but returns the fault code (TALLY_ok when an outcome was produced). */
int test_apply_rc(test_store *ts, const char *consumer, const char *key,
                  const ledger_command *cmd, ledger_outcome *out);
/* Shorthand: apply with a fresh key, return the outcome code. */
int test_code(test_store *ts, const ledger_command *cmd);

/* Apply cmd with a fresh key; fails the test unless its code is ok. */
void test_apply_ok(test_store *ts, const ledger_command *cmd);
/* Apply cmd as consumer "setup" with a fresh key; fails the test unless
 * its code is ok. For what a scenario prepares. */
void test_setup_ok(test_store *ts, ledger_command cmd);

/* The accounts of a payment scenario, on ledger 1, opened with
 * test_setup_ok: a bank that may go negative, a user that may not spend
 * more than it was credited (funded by transfer 1 from the bank with
 * TEST_USER_FUNDS) and a merchant. */
#define TEST_BANK 1
#define TEST_USER 2
#define TEST_MERCHANT 3
#define TEST_USER_FUNDS 100
void test_open_bank_user_merchant(test_store *ts);

/* Fails the test unless account id has these balances. */
void test_assert_balances(test_store *ts, uint64_t id, int64_t debits_posted,
                          int64_t credits_posted, int64_t debits_pending,
                          int64_t credits_pending);

/* The end of a scenario: no invariant findings, then close the store and
 * remove its directory. */
void test_finish(test_store *ts);

/* Run the sweep at ts->now_ms in its own transaction; returns expired count. */
uint32_t test_sweep(test_store *ts);

tally_id128 test_id(uint64_t n);
ledger_command test_cmd_open(uint64_t id, uint32_t ledger, uint16_t flags);
ledger_command test_cmd_transfer(uint64_t tid, uint64_t debit, uint64_t credit, int64_t amount);
ledger_command test_cmd_hold(uint64_t tid, uint64_t debit, uint64_t credit, int64_t amount,
                             uint32_t timeout_s);
ledger_command test_cmd_post(uint64_t tid, int64_t amount);
ledger_command test_cmd_void(uint64_t tid);
/* until_ms 0 and duration_ms 0: for life. */
ledger_command test_cmd_grant(const char *subject, const char *feature, int64_t until_ms);
ledger_command test_cmd_extend(const char *subject, const char *feature, int64_t until_ms);
ledger_command test_cmd_revoke(const char *subject, const char *feature);
ledger_command test_with_order(ledger_command cmd, uint64_t source_order);

/* Reads in a fresh read-only transaction; fail the test unless found. */
ledger_account test_account(test_store *ts, uint64_t id);
ledger_transfer_record test_transfer(test_store *ts, uint64_t tid);
ledger_entitlement test_entitlement(test_store *ts, const char *subject, const char *feature);
int test_entitlement_rc(test_store *ts, const char *subject, const char *feature,
                        ledger_entitlement *out);
/* Whether the account or transfer exists, in a fresh read-only
 * transaction; fails the test on an error other than not_found. */
bool test_account_exists(test_store *ts, uint64_t id);
bool test_transfer_exists(test_store *ts, uint64_t tid);
log_head test_head(test_store *ts);
uint64_t test_count(test_store *ts, store_db db);
/* The seqs held by the blocks of "history" (ledger/history_block.h): in
 * the transaction in, or (in NULL) in a read of ts. */
uint64_t test_history_seqs(test_store *ts, store_txn *in);
/* History entries of all accounts: those of "history", the seqs of the
 * "history_tail" records and the keys of the "history_recent" records
 * (ledger/history.h); a store older than a database has none in it. */
uint64_t test_history_entries(test_store *ts);

/* Fold the history's recent records into the tails and "history" now, in
 * a write transaction of its own (ledger_history_fold): what a commit does
 * every HISTORY_RECENT_RECORDS_MAX records, for tests of the tails. */
void test_history_fold(test_store *ts);
/* Delete the last inbox_time entry in the write transaction t (the last
 * commit's keys, if it fit one entry): a store whose records lost their
 * index entry. */
void test_drop_last_inbox_time_entry(store_txn *t);

/* Decode the event at seq; the callback sees it inside a read txn. */
typedef void (*test_event_fn)(const log_event *ev, void *ctx);
void test_with_event(test_store *ts, uint64_t seq, test_event_fn fn, void *ctx);
/* A malloc'd copy of the event at seq as readers see it (format 2, what
 * log_bytes_get gives; exact size, for the sanitizers): *len its size. */
uint8_t *test_event_bytes(store_txn *t, uint64_t seq, size_t *len);
/* Rewrite the stored event at seq in st (a writer) with edit applied to a
 * copy of its format 2 bytes, stored back in format 2 (which the log reads
 * as it is: damage for the checks to find). */
void test_event_rewrite(store *st, uint64_t seq, void (*edit)(uint8_t *ev, size_t len));
/* An edit for test_event_rewrite: another commit time, and a hash of its
 * own that is right again: the event decodes, but the next one no longer
 * chains to it. */
void test_event_rehash_other_time(uint8_t *ev, size_t len);
/* Type of the event at seq, copied into out (64 bytes). */
void test_event_type(test_store *ts, uint64_t seq, char out[64]);

/* What a transfer event says (type, entity, causation, the transfer and
 * both account snapshots with their unpack codes), copied out of the read
 * transaction. */
typedef struct test_transfer_event {
    char type[64];
    log_entity_kind entity_kind;
    tally_id128 entity_transfer_id;
    uint64_t entity_version;
    bool has_causation;
    int transfer_rc, debit_rc, credit_rc;
    ledger_transfer_record transfer;
    ledger_account debit, credit;
} test_transfer_event;
test_transfer_event test_read_transfer_event(test_store *ts, uint64_t seq);

/* What a rejection must leave alone: the log head (seq and hash), the
 * transfer and expiry-index counts, accounts 1..TEST_SNAPSHOT_ACCOUNTS_MAX. */
#define TEST_SNAPSHOT_ACCOUNTS_MAX 8
typedef struct test_snapshot {
    log_head head;
    uint64_t transfers;
    uint64_t expiry_entries;
    bool has[TEST_SNAPSHOT_ACCOUNTS_MAX + 1];
    ledger_account accounts[TEST_SNAPSHOT_ACCOUNTS_MAX + 1];
} test_snapshot;
test_snapshot test_take_snapshot(test_store *ts);
/* Fails the test unless the store matches the snapshot. */
void test_assert_unchanged(test_store *ts, const test_snapshot *before);

/* Every named database of a store summed up: its entry count and the
 * SHA-256 of its keys and values in key order, so equal digests mean equal
 * contents. For "nothing changed" checks wider than test_snapshot. */
typedef struct test_store_digest {
    uint64_t entries[STORE_DB_COUNT];
    uint8_t sha256[STORE_DB_COUNT][32];
} test_store_digest;
test_store_digest test_store_digest_take(store *st);
/* Open a stopped tallyd's data directory read-only; fails the test if it
 * cannot. Close with store_close. */
store *test_store_open_read_only(const char *dir);

/* Run ledger_invariants_check; findings are printed to stderr.
 * test_assert_invariants fails the test on any finding. */
uint64_t test_invariant_findings(test_store *ts, const char *only_check);
void test_assert_invariants(test_store *ts);

/* Run a suite forked (CK_FORK, whatever the environment says; output as
 * CK_VERBOSITY says); returns the exit code. test_run_suite_both_modes runs
 * it twice: test_apply through ledger_apply (a nested transaction per
 * command), then through ledger_apply_in_place (tallyd's fast path). */
int test_run_suite(Suite *s);
int test_run_suite_both_modes(Suite *s);

/* A reproducible PRNG (splitmix64): the next value of *state, and one
 * below bound (> 0). */
uint64_t test_rng_next(uint64_t *state);
uint64_t test_rng_below(uint64_t *state, uint64_t bound);

/* The number in environment variable name (any base strtoull takes), or
 * fallback when unset or empty; exits (failing the test) when it is not a
 * number. Usable outside a test (in main). */
uint64_t test_env_u64(const char *name, uint64_t fallback);

/* SHA-256(prev || bytes), the log's hash chain, computed with mbedTLS:
 * independent of common/sha256.c, which it checks. */
void test_sha256_chain(const uint8_t prev[32], const uint8_t *bytes, size_t len,
                       uint8_t out[32]);

/* rm -rf dir (tests only). */
void test_remove_dir(const char *dir);

/* The offset in buf of the element reached by path through nested arrays
 * (e.g. {9, 0, 3}: a format 2 event's body, its first part, that part's
 * fourth field); the test fails when the path does not exist. */
size_t test_msgpack_at(const uint8_t *buf, size_t len, const uint32_t *path, size_t depth);

#endif
