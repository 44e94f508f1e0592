/*
 * test_support.c — helpers for tally's Check suites (see test_support.h).
 */
#include "tests/support/test_support.h"

#include "common/msgpack_safe.h"
#include "common/sha256.h"
#include "ledger/history.h"
#include "ledger/history_block.h"

#include <errno.h>
#include <mbedtls/sha256.h>
#include <mbedtls/version.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void store_open_in_temp(test_store *ts, uint64_t map_size_bytes,
                               const tally_id128 *instance_id)
{
    memset(ts, 0, sizeof(*ts));
    const char *tmp = getenv("TMPDIR");
    snprintf(ts->dir, sizeof(ts->dir), "%s/tally-test-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    ck_assert_ptr_nonnull(mkdtemp(ts->dir));
    ts->now_ms = TEST_NOW_MS;
    ts->map_size_bytes = map_size_bytes;
    store_options opt = {.path = ts->dir, .map_size_bytes = map_size_bytes,
                         .instance_id = instance_id};
    int rc = store_open(&opt, &ts->st);
    ck_assert_msg(rc == TALLY_ok, "store_open: %s", tally_strerror(rc));
}

void test_store_open_sized(test_store *ts, uint64_t map_size_bytes)
{
    store_open_in_temp(ts, map_size_bytes, NULL);
}

void test_store_open(test_store *ts) { test_store_open_sized(ts, UINT64_C(64) << 20); }

void test_store_open_as(test_store *ts, const tally_id128 *instance_id)
{
    store_open_in_temp(ts, UINT64_C(64) << 20, instance_id);
}

void test_store_reopen(test_store *ts)
{
    store_close(ts->st);
    store_options opt = {.path = ts->dir, .map_size_bytes = ts->map_size_bytes,
                         .upgrade = true}; /* tests reopen older formats as tallyd --upgrade */
    int rc = store_open(&opt, &ts->st);
    ck_assert_msg(rc == TALLY_ok, "store_open: %s", tally_strerror(rc));
}

static int remove_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb, (void)flag, (void)ftw;
    return remove(path);
}

void test_remove_dir(const char *dir) { nftw(dir, remove_entry, 16, FTW_DEPTH | FTW_PHYS); }

void test_store_close(test_store *ts)
{
    store_close(ts->st);
    ts->st = NULL;
    test_remove_dir(ts->dir);
}

/* Suites run twice (test_run_suite): with ledger_apply's nested
 * transaction per command, and with ledger_apply_in_place as tallyd's
 * writer uses it. */
static bool apply_in_place;

int test_apply_rc(test_store *ts, const char *consumer, const char *key,
                  const ledger_command *cmd, ledger_outcome *out)
{
    char generated[32];
    if (key == NULL) {
        snprintf(generated, sizeof(generated), "test-key-%u", ++ts->next_key);
        key = generated;
    }
    ledger_request req = {.consumer = tally_str_from(consumer),
                          .key = tally_str_from(key),
                          .command = *cmd};
    if (apply_in_place)
        return ledger_apply_one_in_place(ts->st, &req, ts->now_ms, out);
    return ledger_apply_one(ts->st, &req, ts->now_ms, out);
}

ledger_outcome test_apply(test_store *ts, const char *consumer, const char *key,
                          const ledger_command *cmd)
{
    ledger_outcome out;
    int rc = test_apply_rc(ts, consumer, key, cmd, &out);
    ck_assert_msg(rc == TALLY_ok, "ledger_apply fault: %s", tally_strerror(rc));
    return out;
}

int test_code(test_store *ts, const ledger_command *cmd)
{
    return test_apply(ts, "test", NULL, cmd).code;
}

void test_apply_ok(test_store *ts, const ledger_command *cmd)
{
    int code = test_code(ts, cmd);
    ck_assert_msg(code == TALLY_ok, "expected ok, got %s", tally_strerror(code));
}

void test_setup_ok(test_store *ts, ledger_command cmd)
{
    ledger_outcome out = test_apply(ts, "setup", NULL, &cmd);
    ck_assert_msg(out.code == TALLY_ok, "setup: %s", tally_strerror(out.code));
}

void test_open_bank_user_merchant(test_store *ts)
{
    test_setup_ok(ts, test_cmd_open(TEST_BANK, 1, 0));
    test_setup_ok(ts, test_cmd_open(TEST_USER, 1, LEDGER_ACCOUNT_DEBITS_MUST_NOT_EXCEED_CREDITS));
    test_setup_ok(ts, test_cmd_open(TEST_MERCHANT, 1, 0));
    test_setup_ok(ts, test_cmd_transfer(1, TEST_BANK, TEST_USER, TEST_USER_FUNDS));
}

void test_assert_balances(test_store *ts, uint64_t id, int64_t debits_posted,
                          int64_t credits_posted, int64_t debits_pending,
                          int64_t credits_pending)
{
    ledger_account a = test_account(ts, id);
    ck_assert_int_eq(a.debits_posted, debits_posted);
    ck_assert_int_eq(a.credits_posted, credits_posted);
    ck_assert_int_eq(a.debits_pending, debits_pending);
    ck_assert_int_eq(a.credits_pending, credits_pending);
}

void test_finish(test_store *ts)
{
    test_assert_invariants(ts);
    test_store_close(ts);
}

uint32_t test_sweep(test_store *ts)
{
    store_txn t;
    ck_assert_int_eq(store_txn_begin(ts->st, NULL, false, &t), TALLY_ok);
    uint32_t expired = 0;
    int rc = ledger_sweep(&t, ts->now_ms, 0, &expired, NULL);
    ck_assert_msg(rc == TALLY_ok, "sweep: %s", tally_strerror(rc));
    ck_assert_int_eq(store_txn_commit(&t), TALLY_ok);
    return expired;
}

tally_id128 test_id(uint64_t n)
{
    tally_id128 id = {{0}};
    put_u64_be(id.bytes + 8, n);
    return id;
}

ledger_command test_cmd_open(uint64_t id, uint32_t ledger, uint16_t flags)
{
    ledger_command c = {.kind = LEDGER_ACCOUNT_OPEN};
    c.u.account_open = (ledger_account_open){.id = id, .ledger = ledger, .code = 1, .flags = flags};
    return c;
}

ledger_command test_cmd_transfer(uint64_t tid, uint64_t debit, uint64_t credit, int64_t amount)
{
    ledger_command c = {.kind = LEDGER_TRANSFER};
    c.u.transfer = (ledger_transfer){.id = test_id(tid), .debit_account_id = debit,
                                     .credit_account_id = credit, .amount = amount,
                                     .ledger = 1, .code = 1};
    return c;
}

ledger_command test_cmd_hold(uint64_t tid, uint64_t debit, uint64_t credit, int64_t amount,
                             uint32_t timeout_s)
{
    ledger_command c = test_cmd_transfer(tid, debit, credit, amount);
    c.u.transfer.flags = LEDGER_TRANSFER_PENDING;
    c.u.transfer.timeout_s = timeout_s;
    return c;
}

ledger_command test_cmd_post(uint64_t tid, int64_t amount)
{
    ledger_command c = {.kind = LEDGER_POST};
    c.u.hold = (ledger_hold_step){.pending_id = test_id(tid), .amount = amount};
    return c;
}

ledger_command test_cmd_void(uint64_t tid)
{
    ledger_command c = {.kind = LEDGER_VOID};
    c.u.hold = (ledger_hold_step){.pending_id = test_id(tid)};
    return c;
}

static ledger_command entitlement_cmd(ledger_command_kind kind, const char *subject,
                                      const char *feature, int64_t until_ms)
{
    ledger_command c = {.kind = kind};
    c.u.entitlement = (ledger_entitlement_command){.subject = tally_str_from(subject),
                                                   .feature = tally_str_from(feature),
                                                   .valid_until_ms = until_ms};
    return c;
}

ledger_command test_cmd_grant(const char *subject, const char *feature, int64_t until_ms)
{
    return entitlement_cmd(LEDGER_GRANT, subject, feature, until_ms);
}

ledger_command test_cmd_extend(const char *subject, const char *feature, int64_t until_ms)
{
    return entitlement_cmd(LEDGER_EXTEND, subject, feature, until_ms);
}

ledger_command test_cmd_revoke(const char *subject, const char *feature)
{
    return entitlement_cmd(LEDGER_REVOKE, subject, feature, 0);
}

ledger_command test_with_order(ledger_command cmd, uint64_t source_order)
{
    cmd.u.entitlement.has_source_order = true;
    cmd.u.entitlement.source_order = source_order;
    return cmd;
}

static void begin_read(test_store *ts, store_txn *t)
{
    ck_assert_int_eq(store_txn_begin(ts->st, NULL, true, t), TALLY_ok);
}

/* An account or transfer read in a fresh read-only transaction: the
 * lookup's code. */
static int account_get(test_store *ts, uint64_t id, ledger_account *a)
{
    store_txn t;
    begin_read(ts, &t);
    int rc = ledger_account_get(&t, id, a);
    store_txn_abort(&t);
    return rc;
}

static int transfer_get(test_store *ts, uint64_t tid, ledger_transfer_record *r)
{
    store_txn t;
    tally_id128 id = test_id(tid);
    begin_read(ts, &t);
    int rc = ledger_transfer_get(&t, &id, r);
    store_txn_abort(&t);
    return rc;
}

ledger_account test_account(test_store *ts, uint64_t id)
{
    ledger_account a;
    int rc = account_get(ts, id, &a);
    ck_assert_msg(rc == TALLY_ok, "account %llu: %s", (unsigned long long)id, tally_strerror(rc));
    return a;
}

ledger_transfer_record test_transfer(test_store *ts, uint64_t tid)
{
    ledger_transfer_record r;
    int rc = transfer_get(ts, tid, &r);
    ck_assert_msg(rc == TALLY_ok, "transfer %llu: %s", (unsigned long long)tid, tally_strerror(rc));
    return r;
}

bool test_account_exists(test_store *ts, uint64_t id)
{
    ledger_account a;
    int rc = account_get(ts, id, &a);
    ck_assert_msg(rc == TALLY_ok || rc == TALLY_not_found, "account: %s", tally_strerror(rc));
    return rc == TALLY_ok;
}

bool test_transfer_exists(test_store *ts, uint64_t tid)
{
    ledger_transfer_record r;
    int rc = transfer_get(ts, tid, &r);
    ck_assert_msg(rc == TALLY_ok || rc == TALLY_not_found, "transfer: %s", tally_strerror(rc));
    return rc == TALLY_ok;
}

int test_entitlement_rc(test_store *ts, const char *subject, const char *feature,
                        ledger_entitlement *out)
{
    store_txn t;
    begin_read(ts, &t);
    int rc = ledger_entitlement_get(&t, tally_str_from(subject), tally_str_from(feature), out);
    store_txn_abort(&t);
    return rc;
}

ledger_entitlement test_entitlement(test_store *ts, const char *subject, const char *feature)
{
    ledger_entitlement e;
    int rc = test_entitlement_rc(ts, subject, feature, &e);
    ck_assert_msg(rc == TALLY_ok, "entitlement %s/%s: %s", subject, feature, tally_strerror(rc));
    return e;
}

log_head test_head(test_store *ts)
{
    store_txn t;
    log_head h;
    begin_read(ts, &t);
    ck_assert_int_eq(log_head_get(&t, &h), TALLY_ok);
    store_txn_abort(&t);
    return h;
}

uint64_t test_count(test_store *ts, store_db db)
{
    store_txn t;
    uint64_t n;
    begin_read(ts, &t);
    ck_assert_int_eq(store_count(&t, db, &n), TALLY_ok);
    store_txn_abort(&t);
    return n;
}

/* The entries in the records of "history_tail" or "history_recent" (a
 * database an older store lacks: none). */
static uint64_t history_record_entries(store_txn *t, store_db db)
{
    MDB_cursor *cur;
    int rc = store_cursor_open(t, db, &cur);
    if (rc == TALLY_not_found)
        return 0;
    ck_assert_int_eq(rc, TALLY_ok);
    uint64_t n = 0;
    MDB_val k, v;
    for (rc = mdb_cursor_get(cur, &k, &v, MDB_FIRST); rc == MDB_SUCCESS;
         rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT)) {
        uint64_t seqs[HISTORY_TAIL_MAX];
        uint32_t in_tail;
        const uint8_t *keys;
        size_t in_record;
        const char *why = "";
        int decoded = db == STORE_DB_HISTORY_TAIL
                          ? ledger_history_tail_decode(&v, seqs, &in_tail, &why)
                          : ledger_history_recent_decode(&v, &keys, &in_record, &why);
        ck_assert_msg(decoded == TALLY_ok, "%s: %s", store_db_name(db), why);
        n += db == STORE_DB_HISTORY_TAIL ? in_tail : in_record;
    }
    mdb_cursor_close(cur);
    return n;
}

/* The seqs in the blocks of "history". */
static uint64_t history_block_seqs(store_txn *t)
{
    store_scan s;
    ck_assert_int_eq(store_scan_begin(t, STORE_DB_HISTORY, NULL, 0, false, &s), TALLY_ok);
    uint64_t n = 0;
    for (; store_scan_on(&s); store_scan_next(&s)) {
        history_block b;
        const char *why = "";
        ck_assert_msg(ledger_history_block_decode(&s.key, &s.val, &b, &why) == TALLY_ok,
                      "history: %s", why);
        n += b.count;
    }
    ck_assert_int_eq(store_scan_end(&s, TALLY_ok), TALLY_ok);
    return n;
}

uint64_t test_history_seqs(test_store *ts, store_txn *in)
{
    store_txn t;
    if (in != NULL)
        return history_block_seqs(in);
    begin_read(ts, &t);
    uint64_t n = history_block_seqs(&t);
    store_txn_abort(&t);
    return n;
}

uint64_t test_history_entries(test_store *ts)
{
    store_txn t;
    begin_read(ts, &t);
    uint64_t n = history_block_seqs(&t);
    n += history_record_entries(&t, STORE_DB_HISTORY_TAIL);
    n += history_record_entries(&t, STORE_DB_HISTORY_RECENT);
    store_txn_abort(&t);
    return n;
}

void test_history_fold(test_store *ts)
{
    store_txn t;
    ck_assert_int_eq(store_txn_begin(ts->st, NULL, false, &t), TALLY_ok);
    ck_assert_int_eq(ledger_history_fold(&t), TALLY_ok);
    ck_assert_int_eq(store_txn_commit(&t), TALLY_ok);
}

void test_drop_last_inbox_time_entry(store_txn *t)
{
    MDB_cursor *cur;
    ck_assert_int_eq(store_cursor_open(t, STORE_DB_INBOX_TIME, &cur), TALLY_ok);
    MDB_val k, v;
    ck_assert_int_eq(mdb_cursor_get(cur, &k, &v, MDB_LAST), 0);
    ck_assert_int_eq(mdb_cursor_del(cur, 0), 0);
    mdb_cursor_close(cur);
}

void test_with_event(test_store *ts, uint64_t seq, test_event_fn fn, void *ctx)
{
    store_txn t;
    begin_read(ts, &t);
    msgpack_unpacked up;
    msgpack_unpacked_init(&up);
    log_event ev;
    int rc = log_event_load(&t, seq, &up, &ev);
    ck_assert_msg(rc == TALLY_ok, "event %llu: %s", (unsigned long long)seq, tally_strerror(rc));
    fn(&ev, ctx);
    msgpack_unpacked_destroy(&up);
    store_txn_abort(&t);
}

uint8_t *test_event_bytes(store_txn *t, uint64_t seq, size_t *len)
{
    log_bytes b;
    log_bytes_init(&b);
    int rc = log_bytes_get(t, seq, &b);
    ck_assert_msg(rc == TALLY_ok, "event %llu: %s", (unsigned long long)seq, tally_strerror(rc));
    uint8_t *copy = malloc(b.len);
    ck_assert_ptr_nonnull(copy);
    memcpy(copy, b.ptr, b.len);
    *len = b.len;
    log_bytes_free(&b);
    return copy;
}

void test_event_rewrite(store *st, uint64_t seq, void (*edit)(uint8_t *ev, size_t len))
{
    store_txn t;
    ck_assert_int_eq(store_txn_begin(st, NULL, false, &t), TALLY_ok);
    size_t len;
    uint8_t *ev = test_event_bytes(&t, seq, &len);
    edit(ev, len);
    uint8_t key[8];
    log_seq_key(seq, key);
    ck_assert_int_eq(store_put(&t, STORE_DB_LOG, key, 8, ev, len, 0), TALLY_ok);
    ck_assert_int_eq(store_txn_commit(&t), TALLY_ok);
    free(ev);
}

void test_event_rehash_other_time(uint8_t *ev, size_t len)
{
    static const uint32_t time_at[] = {6}; /* time_ms: 0xcf and 8 bytes */
    size_t at = test_msgpack_at(ev, len, time_at, 1);
    ck_assert_uint_eq(ev[at], 0xcf);
    ev[at + 8] ^= 1;
    uint8_t prev[LOG_HASH_BYTES];
    memcpy(prev, ev + len - LOG_HASH_ENTRY_BYTES - LOG_HASH_BYTES, LOG_HASH_BYTES);
    ck_assert_int_eq(log_event_hash(prev, ev, len, ev + len - LOG_HASH_BYTES), TALLY_ok);
}

static void copy_type(const log_event *ev, void *ctx)
{
    char *out = ctx;
    snprintf(out, 64, "%.*s", (int)ev->type.len, ev->type.ptr);
}

void test_event_type(test_store *ts, uint64_t seq, char out[64])
{
    test_with_event(ts, seq, copy_type, out);
}

test_snapshot test_take_snapshot(test_store *ts)
{
    test_snapshot s;
    memset(&s, 0, sizeof(s));
    s.head = test_head(ts);
    s.transfers = test_count(ts, STORE_DB_TRANSFERS);
    s.expiry_entries = test_count(ts, STORE_DB_EXPIRY);
    store_txn t;
    ck_assert_int_eq(store_txn_begin(ts->st, NULL, true, &t), TALLY_ok);
    for (uint64_t id = 1; id <= TEST_SNAPSHOT_ACCOUNTS_MAX; id++) {
        int rc = ledger_account_get(&t, id, &s.accounts[id]);
        ck_assert(rc == TALLY_ok || rc == TALLY_not_found);
        s.has[id] = rc == TALLY_ok;
    }
    store_txn_abort(&t);
    return s;
}

void test_assert_unchanged(test_store *ts, const test_snapshot *before)
{
    test_snapshot now = test_take_snapshot(ts);
    ck_assert_uint_eq(now.head.seq, before->head.seq);
    ck_assert_mem_eq(now.head.hash, before->head.hash, LOG_HASH_BYTES);
    ck_assert_uint_eq(now.transfers, before->transfers);
    ck_assert_uint_eq(now.expiry_entries, before->expiry_entries);
    for (uint64_t id = 1; id <= TEST_SNAPSHOT_ACCOUNTS_MAX; id++) {
        ck_assert_int_eq(now.has[id], before->has[id]);
        if (now.has[id])
            ck_assert_mem_eq(&now.accounts[id], &before->accounts[id], sizeof(ledger_account));
    }
}

static void read_transfer_event(const log_event *ev, void *ctx)
{
    test_transfer_event *out = ctx;
    snprintf(out->type, sizeof(out->type), "%.*s", (int)ev->type.len, ev->type.ptr);
    out->entity_kind = ev->entity.kind;
    out->entity_transfer_id = ev->entity.transfer_id;
    out->entity_version = ev->entity_version;
    out->has_causation = ev->has_causation;
    out->transfer_rc =
        ledger_transfer_unpack(log_event_part(ev, LOG_PART_TRANSFER), &out->transfer);
    out->debit_rc =
        ledger_account_unpack(log_event_part(ev, LOG_PART_DEBIT_ACCOUNT), &out->debit);
    out->credit_rc =
        ledger_account_unpack(log_event_part(ev, LOG_PART_CREDIT_ACCOUNT), &out->credit);
}

test_transfer_event test_read_transfer_event(test_store *ts, uint64_t seq)
{
    test_transfer_event ev;
    memset(&ev, 0, sizeof(ev));
    test_with_event(ts, seq, read_transfer_event, &ev);
    return ev;
}

test_store_digest test_store_digest_take(store *st)
{
    test_store_digest d;
    memset(&d, 0, sizeof(d));
    store_txn t;
    ck_assert_int_eq(store_txn_begin(st, NULL, true, &t), TALLY_ok);
    for (int db = 0; db < STORE_DB_COUNT; db++) {
        MDB_cursor *cur;
        ck_assert_int_eq(store_cursor_open(&t, (store_db)db, &cur), TALLY_ok);
        sha256_ctx h;
        sha256_begin(&h);
        MDB_val k, v;
        int mrc = mdb_cursor_get(cur, &k, &v, MDB_FIRST);
        for (; mrc == MDB_SUCCESS; mrc = mdb_cursor_get(cur, &k, &v, MDB_NEXT)) {
            uint8_t lens[16];
            put_u64_be(lens, k.mv_size);
            put_u64_be(lens + 8, v.mv_size);
            sha256_update(&h, lens, sizeof(lens));
            sha256_update(&h, k.mv_data, k.mv_size);
            sha256_update(&h, v.mv_data, v.mv_size);
            d.entries[db]++;
        }
        mdb_cursor_close(cur);
        ck_assert_msg(mrc == MDB_NOTFOUND, "reading %s: %s", store_db_name((store_db)db),
                      mdb_strerror(mrc));
        sha256_finish(&h, d.sha256[db]);
    }
    store_txn_abort(&t);
    return d;
}

store *test_store_open_read_only(const char *dir)
{
    store_options o = {.path = dir, .read_only = true};
    store *st = NULL;
    int rc = store_open(&o, &st);
    ck_assert_msg(rc == TALLY_ok, "read-only store_open %s: %s", dir, tally_strerror(rc));
    return st;
}

typedef struct finding_filter {
    const char *only;
    uint64_t matched;
} finding_filter;

static void print_finding(const char *check, const char *entity, const char *detail, void *ctx)
{
    finding_filter *f = ctx;
    if (f->only == NULL || strcmp(f->only, check) == 0)
        f->matched++;
    fprintf(stderr, "invariant %s: %s: %s\n", check, entity, detail);
}

uint64_t test_invariant_findings(test_store *ts, const char *only_check)
{
    store_txn t;
    begin_read(ts, &t);
    finding_filter f = {only_check, 0};
    ledger_invariant_stats stats;
    int rc = ledger_invariants_check(&t, print_finding, &f, &stats);
    store_txn_abort(&t);
    ck_assert_msg(rc == TALLY_ok, "invariants could not run: %s", tally_strerror(rc));
    return f.matched;
}

void test_assert_invariants(test_store *ts)
{
    uint64_t n = test_invariant_findings(ts, NULL);
    ck_assert_msg(n == 0, "%llu invariant findings (see stderr)", (unsigned long long)n);
}

static int run_suite(Suite *s, int modes)
{
    int failed = 0;
    SRunner *sr = srunner_create(s);
    srunner_set_fork_status(sr, CK_FORK);
    for (int mode = 0; mode < modes; mode++) {
        apply_in_place = mode == 1;
        fprintf(stderr, "-- commands applied %s\n",
                apply_in_place ? "in place (ledger_apply_in_place)" : "nested (ledger_apply)");
        srunner_run_all(sr, CK_ENV); /* CK_VERBOSITY, CK_NORMAL when unset */
        failed += srunner_ntests_failed(sr);
    }
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}

int test_run_suite(Suite *s) { return run_suite(s, 1); }

int test_run_suite_both_modes(Suite *s) { return run_suite(s, 2); }

uint64_t test_rng_next(uint64_t *state)
{
    uint64_t z = (*state += UINT64_C(0x9E3779B97F4A7C15));
    z = (z ^ (z >> 30)) * UINT64_C(0xBF58476D1CE4E5B9);
    z = (z ^ (z >> 27)) * UINT64_C(0x94D049BB133111EB);
    return z ^ (z >> 31);
}

uint64_t test_rng_below(uint64_t *state, uint64_t bound) { return test_rng_next(state) % bound; }

void test_sha256_chain(const uint8_t prev[32], const uint8_t *bytes, size_t len,
                       uint8_t out[32])
{
    mbedtls_sha256_context c;
    mbedtls_sha256_init(&c);
#if MBEDTLS_VERSION_NUMBER >= 0x03000000
    ck_assert_int_eq(mbedtls_sha256_starts(&c, 0), 0);
    ck_assert_int_eq(mbedtls_sha256_update(&c, prev, 32), 0);
    ck_assert_int_eq(mbedtls_sha256_update(&c, bytes, len), 0);
    ck_assert_int_eq(mbedtls_sha256_finish(&c, out), 0);
#else
    ck_assert_int_eq(mbedtls_sha256_starts_ret(&c, 0), 0);
    ck_assert_int_eq(mbedtls_sha256_update_ret(&c, prev, 32), 0);
    ck_assert_int_eq(mbedtls_sha256_update_ret(&c, bytes, len), 0);
    ck_assert_int_eq(mbedtls_sha256_finish_ret(&c, out), 0);
#endif
    mbedtls_sha256_free(&c);
}

uint64_t test_env_u64(const char *name, uint64_t fallback)
{
    const char *s = getenv(name);
    if (s == NULL || *s == '\0')
        return fallback;
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 0);
    if (errno != 0 || *end != '\0' || *s == '-') { /* no Check here: main() uses it too */
        fprintf(stderr, "%s is not a number: %s\n", name, s);
        exit(EXIT_FAILURE);
    }
    return v;
}

size_t test_msgpack_at(const uint8_t *buf, size_t len, const uint32_t *path, size_t depth)
{
    size_t at = 0;
    for (size_t d = 0; d < depth; d++) {
        ck_assert_uint_lt(at, len);
        uint8_t b = buf[at];
        uint32_t n;
        if ((b & 0xf0) == 0x90) {
            n = b & 0x0f;
            at += 1;
        } else if (b == 0xdc && at + 3 <= len) {
            n = (uint32_t)buf[at + 1] << 8 | buf[at + 2];
            at += 3;
        } else {
            ck_abort_msg("no array at depth %zu", d);
            return 0;
        }
        ck_assert_uint_lt(path[d], n);
        for (uint32_t i = 0; i < path[d]; i++) {
            size_t skip = msgpack_safe_skip(buf + at, len - at);
            ck_assert_uint_gt(skip, 0);
            at += skip;
        }
    }
    return at;
}
