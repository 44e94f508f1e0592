/*
 * check_invariants.c — tests of ledger/invariants: a clean store built
 * through ledger_apply_one has no findings, and each kind of damage done to
 * it with raw LMDB writes (store_env + store_dbi, outside every ledger
 * function) is found by the check that owns it, naming the entity.
 *
 * A checker that never reports passes every other suite; these tests are
 * what makes its silence mean something.
 */
#include "common/bytes.h"
#include "common/error.h"
#include "ledger/history.h"
#include "ledger/invariants.h"
#include "ledger/ledger.h"
#include "log/log.h"
#include "tests/support/suite.h"
#include "tests/support/test_support.h"

#include <check.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DAY_MS INT64_C(86400000)

/* ---- the store every test starts from ---- */

typedef struct fixture {
    test_store ts;
    uint64_t seq_open[6];   /* account.opened of accounts 1..5 */
    uint64_t seq_t101;      /* 1 -> 2, 100 */
    uint64_t seq_t102;      /* 2 -> 3, 30 */
    uint64_t seq_hold103;   /* hold 2 -> 3, 20, timeout 1 h, left pending */
    uint64_t seq_hold104;   /* hold 1 -> 3, 10, timeout 60 s ... */
    uint64_t seq_post104;   /* ... posted in full */
    uint64_t seq_t105;      /* 4 -> 5, 7 on ledger 2 */
    uint64_t seq_grant;     /* user-1/pro until now + 30 days */
    uint64_t events;
} fixture;

static uint64_t apply_ok(fixture *f, const char *key, const ledger_command *cmd)
{
    ledger_outcome out = test_apply(&f->ts, "test", key, cmd);
    ck_assert_msg(out.code == TALLY_ok, "%s: %s", key, tally_strerror(out.code));
    ck_assert_uint_eq(out.event_count, 1);
    f->events += out.event_count;
    return out.first_seq;
}

static void build(fixture *f)
{
    memset(f, 0, sizeof(*f));
    test_store_open(&f->ts);
    static const struct {
        uint64_t id;
        uint32_t ledger;
        uint16_t flags;
    } accounts[] = {
        {1, 1, 0},
        {2, 1, LEDGER_ACCOUNT_DEBITS_MUST_NOT_EXCEED_CREDITS},
        {3, 1, 0},
        {4, 2, 0},
        {5, 2, LEDGER_ACCOUNT_CREDITS_MUST_NOT_EXCEED_DEBITS},
    };
    for (size_t i = 0; i < 5; i++) {
        char key[32];
        snprintf(key, sizeof(key), "open-%" PRIu64, accounts[i].id);
        ledger_command c = test_cmd_open(accounts[i].id, accounts[i].ledger, accounts[i].flags);
        f->seq_open[accounts[i].id] = apply_ok(f, key, &c);
    }
    ledger_command c = test_cmd_transfer(101, 1, 2, 100);
    f->seq_t101 = apply_ok(f, "t-101", &c);
    c = test_cmd_transfer(102, 2, 3, 30);
    f->seq_t102 = apply_ok(f, "t-102", &c);
    c = test_cmd_hold(103, 2, 3, 20, 3600);
    f->seq_hold103 = apply_ok(f, "hold-103", &c);
    c = test_cmd_hold(104, 1, 3, 10, 60);
    f->seq_hold104 = apply_ok(f, "hold-104", &c);
    c = test_cmd_post(104, 0);
    f->seq_post104 = apply_ok(f, "post-104", &c);
    c = test_cmd_transfer(105, 4, 5, 7);
    c.u.transfer.ledger = 2;
    /* Account 5 may not take credits beyond its debits: give it debits first. */
    ledger_command back = test_cmd_transfer(106, 5, 4, 7);
    back.u.transfer.ledger = 2;
    /* The early attempt, under an id of its own, leaves that id failed. */
    ledger_command early = c;
    early.u.transfer.id = test_id(107);
    ck_assert_int_eq(test_apply(&f->ts, "test", "t-107", &early).code, TALLY_exceeds_debits);
    apply_ok(f, "t-106", &back);
    f->seq_t105 = apply_ok(f, "t-105", &c);
    c = test_cmd_grant("user-1", "pro", f->ts.now_ms + 30 * DAY_MS);
    f->seq_grant = apply_ok(f, "grant-1", &c);
    /* The history from the recent records into the tails, as a later
     * commit would fold it (the recent records' own tests refill them). */
    test_history_fold(&f->ts);
}

/* ---- findings, captured with their entity ---- */

typedef struct finding {
    char check[32];
    char entity[300];
    char detail[256];
} finding;

typedef struct findings {
    finding items[128];
    size_t count;
    size_t dropped;
    ledger_invariant_stats stats;
} findings;

static void capture(const char *check, const char *entity, const char *detail, void *ctx)
{
    findings *f = ctx;
    fprintf(stderr, "finding %s: %s: %s\n", check, entity, detail);
    if (f->count == sizeof(f->items) / sizeof(f->items[0])) {
        f->dropped++;
        return;
    }
    finding *x = &f->items[f->count++];
    snprintf(x->check, sizeof(x->check), "%s", check);
    snprintf(x->entity, sizeof(x->entity), "%s", entity);
    snprintf(x->detail, sizeof(x->detail), "%s", detail);
}

static findings *run_checks(test_store *ts)
{
    findings *f = calloc(1, sizeof(*f));
    ck_assert_ptr_nonnull(f);
    store_txn t;
    ck_assert_int_eq(store_txn_begin(ts->st, NULL, true, &t), TALLY_ok);
    int rc = ledger_invariants_check(&t, capture, f, &f->stats);
    store_txn_abort(&t);
    ck_assert_msg(rc == TALLY_ok, "invariants could not run: %s", tally_strerror(rc));
    ck_assert_uint_eq(f->stats.findings, f->count + f->dropped);
    return f;
}

static bool has_finding(const findings *f, const char *check, const char *entity)
{
    for (size_t i = 0; i < f->count; i++)
        if (strcmp(f->items[i].check, check) == 0 && strcmp(f->items[i].entity, entity) == 0)
            return true;
    return false;
}

/* Both: the shared helper counts the check, and our capture names the
 * entity. */
static void expect_finding(test_store *ts, const char *check, const char *entity)
{
    ck_assert_msg(test_invariant_findings(ts, check) > 0, "no %s finding", check);
    findings *f = run_checks(ts);
    ck_assert_msg(has_finding(f, check, entity), "no %s finding for %s (%zu findings, see stderr)",
                  check, entity, f->count);
    free(f);
}

static void expect_no_finding(test_store *ts, const char *check)
{
    ck_assert_msg(test_invariant_findings(ts, check) == 0, "unexpected %s finding", check);
}

static void seq_name(uint64_t seq, char out[64]) { snprintf(out, 64, "seq:%" PRIu64, seq); }

static void transfer_name(uint64_t tid, char out[64])
{
    tally_id128 id = test_id(tid);
    char hex[33];
    tally_id128_to_hex(&id, hex);
    snprintf(out, 64, "transfer:%s", hex);
}

/* ---- raw LMDB access, bypassing every ledger function ---- */

static MDB_txn *raw_begin(test_store *ts)
{
    MDB_txn *txn;
    ck_assert_int_eq(mdb_txn_begin(store_env(ts->st), NULL, 0, &txn), MDB_SUCCESS);
    return txn;
}

static void raw_commit(MDB_txn *txn) { ck_assert_int_eq(mdb_txn_commit(txn), MDB_SUCCESS); }

/* A malloc'd copy of the value under key; *len gets its size. */
static uint8_t *raw_get(MDB_txn *txn, test_store *ts, store_db db, const void *key,
                        size_t key_len, size_t *len)
{
    MDB_val k = {key_len, (void *)key}, v;
    int rc = mdb_get(txn, store_dbi(ts->st, db), &k, &v);
    ck_assert_msg(rc == MDB_SUCCESS, "raw get in %s: %s", store_db_name(db), mdb_strerror(rc));
    uint8_t *copy = malloc(v.mv_size ? v.mv_size : 1);
    ck_assert_ptr_nonnull(copy);
    memcpy(copy, v.mv_data, v.mv_size);
    *len = v.mv_size;
    return copy;
}

static void raw_put(MDB_txn *txn, test_store *ts, store_db db, const void *key,
                    size_t key_len, const void *val, size_t val_len)
{
    MDB_val k = {key_len, (void *)key}, v = {val_len, (void *)val};
    ck_assert_int_eq(mdb_put(txn, store_dbi(ts->st, db), &k, &v, 0), MDB_SUCCESS);
}

static void raw_del(MDB_txn *txn, test_store *ts, store_db db, const void *key,
                    size_t key_len)
{
    MDB_val k = {key_len, (void *)key};
    ck_assert_int_eq(mdb_del(txn, store_dbi(ts->st, db), &k, NULL), MDB_SUCCESS);
}

/* Rewrite the stored account id with edit applied to its decoded record. */
static void tamper_account(test_store *ts, uint64_t id, void (*edit)(ledger_account *))
{
    MDB_txn *txn = raw_begin(ts);
    uint8_t key[8];
    put_u64_be(key, id);
    size_t len;
    uint8_t *val = raw_get(txn, ts, STORE_DB_ACCOUNTS, key, 8, &len);
    ledger_account a;
    ck_assert_int_eq(ledger_account_decode(id, val, len, &a), TALLY_ok);
    edit(&a);
    uint8_t rec[LEDGER_ACCOUNT_RECORD_BYTES_MAX];
    size_t rec_len = ledger_account_encode(&a, rec);
    raw_put(txn, ts, STORE_DB_ACCOUNTS, key, 8, rec, rec_len);
    raw_commit(txn);
    free(val);
}

/* ---- tests ---- */

START_TEST(clean_store_has_no_findings)
{
    fixture f;
    build(&f);
    findings *x = run_checks(&f.ts);
    ck_assert_msg(x->count == 0, "%zu findings on a clean store (see stderr)", x->count);
    ck_assert_uint_eq(x->stats.findings, 0);
    ck_assert_uint_eq(x->stats.events, f.events);
    ck_assert_uint_eq(x->stats.events, test_head(&f.ts).seq);
    ck_assert_uint_eq(x->stats.accounts, 5);
    ck_assert_uint_eq(x->stats.transfers, 6);
    ck_assert_uint_eq(x->stats.entitlements, 1);
    ck_assert_uint_ge(x->stats.inbox_records, f.events);
    free(x);
    test_assert_invariants(&f.ts);
    /* The fold comes from the log, so it holds after a reopen too. */
    test_store_reopen(&f.ts);
    test_assert_invariants(&f.ts);
    test_store_close(&f.ts);
}
END_TEST

START_TEST(deleted_event_is_a_log_gap)
{
    fixture f;
    build(&f);
    MDB_txn *txn = raw_begin(&f.ts);
    uint8_t key[8];
    log_seq_key(f.seq_t102, key);
    raw_del(txn, &f.ts, STORE_DB_LOG, key, 8);
    raw_commit(txn);
    char name[64];
    seq_name(f.seq_t102 + 1, name);
    expect_finding(&f.ts, "log_gap", name);
    test_store_close(&f.ts);
}
END_TEST

START_TEST(deleted_last_event_is_a_log_gap_at_the_head)
{
    fixture f;
    build(&f);
    uint64_t head = test_head(&f.ts).seq;
    MDB_txn *txn = raw_begin(&f.ts);
    uint8_t key[8];
    log_seq_key(head, key);
    raw_del(txn, &f.ts, STORE_DB_LOG, key, 8);
    raw_commit(txn);
    char name[64];
    seq_name(head, name);
    expect_finding(&f.ts, "log_gap", name);
    test_store_close(&f.ts);
}
END_TEST

START_TEST(flipped_byte_in_an_event_breaks_the_hash_chain)
{
    fixture f;
    build(&f);
    MDB_txn *txn = raw_begin(&f.ts);
    uint8_t key[8];
    log_seq_key(f.seq_t101, key);
    size_t len;
    uint8_t *ev = raw_get(txn, &f.ts, STORE_DB_LOG, key, 8, &len);
    /* The transfer's entity_version, 1, a positive fixint, in the event
     * as the log stores it (log/stored_event.h: field 3). The event's
     * hash, which the next event's prev_hash holds, no longer matches its
     * bytes. */
    ck_assert_uint_eq(ev[0], 0x99); /* the short form */
    static const uint32_t version_at[] = {3};
    size_t at = test_msgpack_at(ev, len, version_at, 1);
    ck_assert_uint_eq(ev[at], 0x01);
    ev[at] = 0x02; /* still a valid encoding */
    raw_put(txn, &f.ts, STORE_DB_LOG, key, 8, ev, len);
    raw_commit(txn);
    free(ev);
    char name[64];
    seq_name(f.seq_t101, name);
    expect_finding(&f.ts, "hash_chain", name);
    expect_no_finding(&f.ts, "log_gap");
    test_store_close(&f.ts);
}
END_TEST

START_TEST(rehashed_event_breaks_the_link_to_the_next)
{
    fixture f;
    build(&f);
    /* Change the commit time (not folded), then give the event a correct hash
     * of its own, stored in format 2 with it: it decodes, but the next event
     * no longer chains to it. */
    test_event_rewrite(f.ts.st, f.seq_t102, test_event_rehash_other_time);
    store_txn t;
    ck_assert_int_eq(store_txn_begin(f.ts.st, NULL, true, &t), TALLY_ok);
    msgpack_unpacked up;
    msgpack_unpacked_init(&up);
    log_event decoded;
    ck_assert_int_eq(log_event_load(&t, f.seq_t102, &up, &decoded), TALLY_ok);
    msgpack_unpacked_destroy(&up);
    store_txn_abort(&t);
    char name[64];
    seq_name(f.seq_t102 + 1, name);
    expect_finding(&f.ts, "hash_chain", name);
    test_store_close(&f.ts);
}
END_TEST

START_TEST(tampered_meta_head_is_found)
{
    fixture f;
    build(&f);
    log_head h = test_head(&f.ts);
    MDB_txn *txn = raw_begin(&f.ts);
    uint8_t val[8 + 32];
    put_u64_be(val, h.seq);
    memcpy(val + 8, h.hash, 32);
    val[8] ^= 0xff; /* right seq, wrong hash */
    raw_put(txn, &f.ts, STORE_DB_META, "head", 4, val, sizeof(val));
    raw_commit(txn);
    char name[64];
    seq_name(h.seq, name);
    expect_finding(&f.ts, "hash_chain", name);

    txn = raw_begin(&f.ts);
    put_u64_be(val, h.seq + 1); /* a head beyond the log */
    memcpy(val + 8, h.hash, 32);
    raw_put(txn, &f.ts, STORE_DB_META, "head", 4, val, sizeof(val));
    raw_commit(txn);
    seq_name(h.seq + 1, name);
    expect_finding(&f.ts, "log_gap", name);
    test_store_close(&f.ts);
}
END_TEST

static void add_one_debit(ledger_account *a) { a->debits_posted += 1; }

START_TEST(changed_account_balance_fails_rebuild_and_balance_sum)
{
    fixture f;
    build(&f);
    tamper_account(&f.ts, 2, add_one_debit);
    expect_finding(&f.ts, "rebuild", "account:2");
    expect_finding(&f.ts, "balance_sum", "ledger:1");
    /* The other ledger still balances. */
    findings *x = run_checks(&f.ts);
    ck_assert(!has_finding(x, "balance_sum", "ledger:2"));
    ck_assert(!has_finding(x, "rebuild", "account:1"));
    free(x);
    test_store_close(&f.ts);
}
END_TEST

static void set_debit_limit(ledger_account *a)
{
    a->flags = LEDGER_ACCOUNT_DEBITS_MUST_NOT_EXCEED_CREDITS;
}

START_TEST(limit_flag_on_an_overdrawn_account_is_found)
{
    fixture f;
    build(&f);
    /* Account 1 has debits and no credits; give it the limit it never had. */
    tamper_account(&f.ts, 1, set_debit_limit);
    expect_finding(&f.ts, "limit_flags", "account:1");
    expect_finding(&f.ts, "rebuild", "account:1");
    test_store_close(&f.ts);
}
END_TEST

static void take_credits(ledger_account *a) { a->credits_posted -= 60; }
static void give_credits(ledger_account *a) { a->credits_posted += 60; }

START_TEST(balances_moved_past_a_limit_are_found)
{
    fixture f;
    build(&f);
    /* Move 60 of account 2's credits to account 3: the ledger still sums,
     * but account 2 now owes more (30 + 20 pending) than its credits (40). */
    tamper_account(&f.ts, 2, take_credits);
    tamper_account(&f.ts, 3, give_credits);
    expect_finding(&f.ts, "limit_flags", "account:2");
    expect_no_finding(&f.ts, "balance_sum");
    test_store_close(&f.ts);
}
END_TEST

static void inbox_key_of(const char *key, uint8_t out[LEDGER_INBOX_KEY_BYTES_MAX],
                         size_t *len)
{
    *len = ledger_inbox_key(tally_str_from("test"), tally_str_from(key), out);
}

START_TEST(deleted_inbox_record_breaks_inbox_links)
{
    fixture f;
    build(&f);
    uint8_t key[LEDGER_INBOX_KEY_BYTES_MAX];
    size_t key_len;
    inbox_key_of("t-101", key, &key_len);
    MDB_txn *txn = raw_begin(&f.ts);
    raw_del(txn, &f.ts, STORE_DB_INBOX, key, key_len);
    raw_commit(txn);
    char name[64];
    seq_name(f.seq_t101, name);
    expect_finding(&f.ts, "inbox_links", name);
    test_store_close(&f.ts);
}
END_TEST

START_TEST(orphan_inbox_record_claiming_other_events_breaks_inbox_links)
{
    fixture f;
    build(&f);
    /* format | fingerprint | code | time_ms | first_seq | event_count |
     * chain_count | failed_index, as documented in ledger/inbox.h (format 1,
     * with the whole 32-byte fingerprint: recon reads both formats). */
    uint8_t val[1 + 32 + 2 + 8 + 8 + 4 + 1 + 1];
    memset(val, 0, sizeof(val));
    val[0] = 1;
    memset(val + 1, 0xab, 32);
    uint8_t *q = val + 33;
    put_u16_be(q, TALLY_ok);
    put_u64_be(q + 2, (uint64_t)f.ts.now_ms);
    put_u64_be(q + 10, f.seq_t101); /* events caused by "t-101" */
    put_u32_be(q + 18, 1);
    uint8_t key[LEDGER_INBOX_KEY_BYTES_MAX];
    size_t key_len;
    inbox_key_of("orphan", key, &key_len);
    /* The record decodes: only its links are wrong. */
    ledger_inbox_record rec;
    ck_assert_int_eq(ledger_inbox_decode(key, key_len, val, sizeof(val), &rec), TALLY_ok);
    MDB_txn *txn = raw_begin(&f.ts);
    raw_put(txn, &f.ts, STORE_DB_INBOX, key, key_len, val, sizeof(val));
    raw_commit(txn);
    expect_finding(&f.ts, "inbox_links", "inbox:test/orphan");
    /* The genuine record of t-101 is not blamed. */
    findings *x = run_checks(&f.ts);
    ck_assert(!has_finding(x, "inbox_links", "inbox:test/t-101"));
    free(x);
    test_store_close(&f.ts);
}
END_TEST

/* failed_ids: an entry whose attempt's inbox record is gone, an entry
 * for a live transfer, and a record naming an entry that is gone. */
START_TEST(failed_id_without_its_inbox_record_is_found)
{
    fixture f;
    build(&f);
    uint8_t key[LEDGER_INBOX_KEY_BYTES_MAX];
    size_t key_len;
    inbox_key_of("t-107", key, &key_len);
    MDB_txn *txn = raw_begin(&f.ts);
    raw_del(txn, &f.ts, STORE_DB_INBOX, key, key_len);
    raw_commit(txn);
    char name[64];
    transfer_name(107, name);
    expect_finding(&f.ts, "failed_ids", name);
    test_store_close(&f.ts);
}
END_TEST

START_TEST(failed_id_of_a_live_transfer_is_found)
{
    fixture f;
    build(&f);
    tally_id128 failed = test_id(107), live = test_id(101);
    MDB_txn *txn = raw_begin(&f.ts);
    size_t len;
    uint8_t *val = raw_get(txn, &f.ts, STORE_DB_FAILED_IDS, failed.bytes, 16, &len);
    raw_put(txn, &f.ts, STORE_DB_FAILED_IDS, live.bytes, 16, val, len);
    raw_commit(txn);
    free(val);
    char name[64];
    transfer_name(101, name);
    expect_finding(&f.ts, "failed_ids", name);
    test_store_close(&f.ts);
}
END_TEST

START_TEST(inbox_record_naming_a_missing_failed_id_is_found)
{
    fixture f;
    build(&f);
    tally_id128 failed = test_id(107);
    MDB_txn *txn = raw_begin(&f.ts);
    raw_del(txn, &f.ts, STORE_DB_FAILED_IDS, failed.bytes, 16);
    raw_commit(txn);
    expect_finding(&f.ts, "failed_ids", "inbox:test/t-107");
    expect_no_finding(&f.ts, "inbox_links");
    test_store_close(&f.ts);
}
END_TEST

START_TEST(inbox_record_pointing_past_the_log_breaks_inbox_links)
{
    fixture f;
    build(&f);
    uint8_t key[LEDGER_INBOX_KEY_BYTES_MAX];
    size_t key_len, len;
    inbox_key_of("grant-1", key, &key_len);
    MDB_txn *txn = raw_begin(&f.ts);
    uint8_t *val = raw_get(txn, &f.ts, STORE_DB_INBOX, key, key_len, &len);
    /* event_count (format 4: the uvarint after the format byte, the
     * fingerprint, code, time and first_seq): 2, the event after the head */
    ck_assert_uint_eq(val[0], 4);
    const uint8_t *p = val + 1 + LEDGER_FINGERPRINT_STORED_BYTES, *end = val + len;
    uint64_t field;
    for (int i = 0; i < 3; i++)
        ck_assert(get_uvarint(&p, end, &field));
    ck_assert_uint_eq(*p, 1);
    val[p - val] = 2;
    raw_put(txn, &f.ts, STORE_DB_INBOX, key, key_len, val, len);
    raw_commit(txn);
    free(val);
    expect_finding(&f.ts, "inbox_links", "inbox:test/grant-1");
    test_store_close(&f.ts);
}
END_TEST

START_TEST(hold_resolved_without_an_event_is_found)
{
    fixture f;
    build(&f);
    tally_id128 id = test_id(103);
    MDB_txn *txn = raw_begin(&f.ts);
    size_t len;
    uint8_t *val = raw_get(txn, &f.ts, STORE_DB_TRANSFERS, id.bytes, 16, &len);
    ledger_transfer_record r;
    ck_assert_int_eq(ledger_transfer_decode(&id, val, len, &r), TALLY_ok);
    ck_assert_uint_eq(r.state, LEDGER_TRANSFER_PENDING_STATE);
    /* Voided, version 2, resolved at a seq that never happened. */
    r.state = LEDGER_TRANSFER_HOLD_VOIDED;
    r.version = 2;
    r.resolved_seq = test_head(&f.ts).seq + 1;
    uint8_t changed[LEDGER_TRANSFER_RECORD_BYTES_MAX];
    size_t changed_len = ledger_transfer_encode(&r, changed);
    ck_assert_int_eq(ledger_transfer_decode(&id, changed, changed_len, &r), TALLY_ok);
    raw_put(txn, &f.ts, STORE_DB_TRANSFERS, id.bytes, 16, changed, changed_len);
    raw_commit(txn);
    free(val);
    char name[64];
    transfer_name(103, name);
    expect_finding(&f.ts, "hold_resolution", name);
    /* And the accounts' pending balances no longer match unresolved holds. */
    expect_finding(&f.ts, "hold_resolution", "account:2");
    expect_finding(&f.ts, "hold_resolution", "account:3");
    test_store_close(&f.ts);
}
END_TEST

START_TEST(missing_expiry_entry_of_a_pending_hold_is_found)
{
    fixture f;
    build(&f);
    ledger_transfer_record r = test_transfer(&f.ts, 103);
    ck_assert_int_eq(r.state, LEDGER_TRANSFER_PENDING_STATE);
    ck_assert_int_eq(r.expires_at_ms, f.ts.now_ms + 3600 * 1000);
    uint8_t key[8 + 1 + 16];
    put_u64_be(key, (uint64_t)r.expires_at_ms);
    key[8] = LEDGER_EXPIRY_HOLD;
    memcpy(key + 9, r.id.bytes, 16);
    MDB_txn *txn = raw_begin(&f.ts);
    raw_del(txn, &f.ts, STORE_DB_EXPIRY, key, sizeof(key));
    raw_commit(txn);
    char name[64];
    transfer_name(103, name);
    expect_finding(&f.ts, "expiry_index", name);
    test_store_close(&f.ts);
}
END_TEST

START_TEST(missing_expiry_entry_of_an_active_entitlement_is_found)
{
    fixture f;
    build(&f);
    ledger_entitlement e = test_entitlement(&f.ts, "user-1", "pro");
    ck_assert(!e.lifetime);
    uint8_t key[9 + LEDGER_ENTITLEMENT_KEY_BYTES_MAX];
    put_u64_be(key, (uint64_t)e.valid_until_ms);
    key[8] = LEDGER_EXPIRY_ENTITLEMENT;
    size_t n = ledger_entitlement_key(tally_str_from("user-1"), tally_str_from("pro"), key + 9);
    MDB_txn *txn = raw_begin(&f.ts);
    raw_del(txn, &f.ts, STORE_DB_EXPIRY, key, 9 + n);
    raw_commit(txn);
    expect_finding(&f.ts, "expiry_index", "entitlement:user-1/pro");
    test_store_close(&f.ts);
}
END_TEST

START_TEST(changed_entitlement_record_fails_rebuild)
{
    fixture f;
    build(&f);
    uint8_t key[LEDGER_ENTITLEMENT_KEY_BYTES_MAX];
    size_t key_len =
        ledger_entitlement_key(tally_str_from("user-1"), tally_str_from("pro"), key);
    MDB_txn *txn = raw_begin(&f.ts);
    size_t len;
    uint8_t *val = raw_get(txn, &f.ts, STORE_DB_ENTITLEMENTS, key, key_len, &len);
    ledger_entitlement e;
    ck_assert_int_eq(ledger_entitlement_decode(key, key_len, val, len, &e), TALLY_ok);
    e.updated_ms += 1; /* touches nothing the expiry index depends on */
    uint8_t rec[LEDGER_ENTITLEMENT_RECORD_BYTES];
    ledger_entitlement_encode(&e, rec);
    raw_put(txn, &f.ts, STORE_DB_ENTITLEMENTS, key, key_len, rec, sizeof(rec));
    raw_commit(txn);
    free(val);
    expect_finding(&f.ts, "rebuild", "entitlement:user-1/pro");
    expect_no_finding(&f.ts, "expiry_index");
    test_store_close(&f.ts);
}
END_TEST

static int pack_copied_body(msgpack_packer *pk, const void *body)
{
    return msgpack_pack_object(pk, *(const msgpack_object *)body);
}

START_TEST(hold_resolved_twice_in_the_log_is_found)
{
    fixture f;
    build(&f);
    /* Append, through the log itself (so the chain is intact), a second
     * resolution of hold 104 that was already posted: a void without cause. */
    store_txn t;
    ck_assert_int_eq(store_txn_begin(f.ts.st, NULL, false, &t), TALLY_ok);
    size_t len;
    uint8_t *copy = test_event_bytes(&t, f.seq_post104, &len);
    msgpack_unpacked up;
    msgpack_unpacked_init(&up);
    log_event posted;
    ck_assert_int_eq(log_event_decode(copy, len, &up, &posted), TALLY_ok);
    log_append_args a = {
        .type = LOG_EVENT_TRANSFER_VOIDED,
        .entity = {.kind = LOG_ENTITY_TRANSFER, .transfer_id = test_id(104)},
        .entity_version = 2,
        .time_ms = f.ts.now_ms,
        .pack_body = pack_copied_body,
        .body_ctx = posted.body,
    };
    uint64_t seq;
    ck_assert_int_eq(log_append(&t, &a, &seq), TALLY_ok);
    ck_assert_int_eq(store_txn_commit(&t), TALLY_ok);
    msgpack_unpacked_destroy(&up);
    free(copy);
    char name[64];
    transfer_name(104, name);
    expect_finding(&f.ts, "hold_resolution", name);
    expect_no_finding(&f.ts, "hash_chain");
    expect_no_finding(&f.ts, "log_gap");
    test_store_close(&f.ts);
}
END_TEST

/* Account 1's history (t-101, hold-104, post-104) sits in its tail. */
static void put_tail(test_store *ts, uint64_t account, const uint64_t *seqs, size_t n,
                     uint8_t format)
{
    uint8_t key[8], value[1 + 8 * 20];
    ck_assert_uint_le(n, 20);
    put_u64_be(key, account);
    value[0] = format;
    for (size_t i = 0; i < n; i++)
        put_u64_be(value + 1 + 8 * i, seqs[i]);
    MDB_txn *txn = raw_begin(ts);
    raw_put(txn, ts, STORE_DB_HISTORY_TAIL, key, sizeof(key), value, 1 + 8 * n);
    raw_commit(txn);
}

/* A finding of check about entity whose detail contains what. */
static void expect_finding_saying(test_store *ts, const char *check, const char *entity,
                                  const char *what)
{
    findings *f = run_checks(ts);
    bool found = false;
    for (size_t i = 0; i < f->count; i++)
        found = found || (strcmp(f->items[i].check, check) == 0 &&
                          strcmp(f->items[i].entity, entity) == 0 &&
                          strstr(f->items[i].detail, what) != NULL);
    ck_assert_msg(found, "no %s finding for %s saying \"%s\" (%zu findings, see stderr)", check,
                  entity, what, f->count);
    free(f);
}

START_TEST(deleted_history_entry_is_found)
{
    fixture f;
    build(&f);
    ck_assert_uint_eq(test_history_seqs(&f.ts, NULL), 0); /* all in tails */
    test_assert_invariants(&f.ts);
    const uint64_t rest[] = {f.seq_hold104, f.seq_post104}; /* t-101's entry gone */
    put_tail(&f.ts, 1, rest, 2, HISTORY_TAIL_FORMAT);
    expect_finding_saying(&f.ts, "history", "account:1", "no history entry for seq");
    test_store_close(&f.ts);
}
END_TEST

/* Each way a tail record can be wrong is a finding of its own. */
START_TEST(corrupt_history_tail_is_found)
{
    for (int kind = 0; kind < 6; kind++) {
        fixture f;
        build(&f);
        const uint64_t all[] = {f.seq_t101, f.seq_hold104, f.seq_post104};
        const char *what = NULL;
        if (kind == 0) { /* an unknown format byte */
            put_tail(&f.ts, 1, all, 3, HISTORY_TAIL_FORMAT + 1);
            what = "unknown format";
        } else if (kind == 1) { /* more than HISTORY_TAIL_MAX seqs */
            uint64_t many[HISTORY_TAIL_MAX + 1];
            for (uint64_t i = 0; i <= HISTORY_TAIL_MAX; i++)
                many[i] = f.seq_t101 + i;
            put_tail(&f.ts, 1, many, HISTORY_TAIL_MAX + 1, HISTORY_TAIL_FORMAT);
            what = "wrong length";
        } else if (kind == 2) { /* empty */
            put_tail(&f.ts, 1, all, 0, HISTORY_TAIL_FORMAT);
            what = "wrong length";
        } else if (kind == 3) { /* the same seqs, out of order */
            const uint64_t swapped[] = {f.seq_hold104, f.seq_t101, f.seq_post104};
            put_tail(&f.ts, 1, swapped, 3, HISTORY_TAIL_FORMAT);
            what = "not ascending";
        } else if (kind == 4) { /* the same entries, one indexed above the tail */
            uint8_t key[16];
            ledger_history_key(1, f.seq_post104, key);
            MDB_txn *txn = raw_begin(&f.ts);
            raw_put(txn, &f.ts, STORE_DB_HISTORY, key, sizeof(key), "", 0);
            raw_commit(txn);
            put_tail(&f.ts, 1, all, 2, HISTORY_TAIL_FORMAT);
            what = "is not above the indexed seq";
        } else { /* a seq of a transfer between other accounts */
            const uint64_t more[] = {f.seq_t101, f.seq_hold104, f.seq_post104, f.seq_t105};
            put_tail(&f.ts, 1, more, 4, HISTORY_TAIL_FORMAT);
            what = "names no transfer of the account";
        }
        ck_assert_msg(test_invariant_findings(&f.ts, "history") > 0, "kind %d: no finding", kind);
        expect_finding_saying(&f.ts, "history", "account:1", what);
        test_store_close(&f.ts);
    }
}
END_TEST


/* A "history_recent" record number -> format, then n (account, seq) keys
 * as given. */
static void put_recent(test_store *ts, uint64_t number, const uint64_t (*keys)[2], size_t n,
                       uint8_t format)
{
    uint8_t key[8], value[1 + 16 * 8];
    ck_assert_uint_le(n, 8);
    put_u64_be(key, number);
    value[0] = format;
    for (size_t i = 0; i < n; i++)
        ledger_history_key(keys[i][0], keys[i][1], value + 1 + 16 * i);
    MDB_txn *txn = raw_begin(ts);
    raw_put(txn, ts, STORE_DB_HISTORY_RECENT, key, sizeof(key), value, 1 + 16 * n);
    raw_commit(txn);
}

/* Account 1's history moved from its tail into recent records: clean when
 * in order; each way a record can be wrong is a finding of its own, and so
 * is a corrupt tail of an account with recent entries (the order check
 * reads it: a finding, never a fault that stops the checks). */
START_TEST(corrupt_history_recent_is_found)
{
    for (int kind = -1; kind < 8; kind++) {
        fixture f;
        build(&f);
        uint8_t tail_key[8];
        put_u64_be(tail_key, 1);
        MDB_txn *txn = raw_begin(&f.ts);
        raw_del(txn, &f.ts, STORE_DB_HISTORY_TAIL, tail_key, sizeof(tail_key));
        raw_commit(txn);
        const uint64_t first[][2] = {{1, f.seq_t101}, {1, f.seq_hold104}};
        const uint64_t last[][2] = {{1, f.seq_post104}};
        const char *what = NULL, *entity = "account:1";
        if (kind == -1) { /* in order, in two records: clean */
            put_recent(&f.ts, 1, first, 2, HISTORY_RECENT_FORMAT);
            put_recent(&f.ts, 2, last, 1, HISTORY_RECENT_FORMAT);
            expect_no_finding(&f.ts, "history");
            test_store_close(&f.ts);
            continue;
        }
        if (kind == 0) { /* an unknown format byte */
            put_recent(&f.ts, 1, first, 2, HISTORY_RECENT_FORMAT + 1);
            put_recent(&f.ts, 2, last, 1, HISTORY_RECENT_FORMAT);
            what = "unknown format", entity = "history_recent:1";
        } else if (kind == 1) { /* no keys */
            put_recent(&f.ts, 1, first, 0, HISTORY_RECENT_FORMAT);
            what = "wrong length", entity = "history_recent:1";
        } else if (kind == 2) { /* the keys out of order */
            const uint64_t swapped[][2] = {{1, f.seq_hold104}, {1, f.seq_t101}};
            put_recent(&f.ts, 1, swapped, 2, HISTORY_RECENT_FORMAT);
            put_recent(&f.ts, 2, last, 1, HISTORY_RECENT_FORMAT);
            what = "keys not ascending", entity = "history_recent:1";
        } else if (kind == 3) { /* the records out of order */
            put_recent(&f.ts, 1, last, 1, HISTORY_RECENT_FORMAT);
            put_recent(&f.ts, 2, first, 2, HISTORY_RECENT_FORMAT);
            what = "is not above the record before's", entity = "history_recent:2";
        } else if (kind == 4) { /* a seq below the account's tail */
            const uint64_t tail[] = {f.seq_post104};
            put_tail(&f.ts, 1, tail, 1, HISTORY_TAIL_FORMAT);
            put_recent(&f.ts, 1, first, 2, HISTORY_RECENT_FORMAT);
            what = "is not above the tail or indexed seq";
        } else if (kind == 5) { /* a seq of a transfer between other accounts */
            const uint64_t more[][2] = {{1, f.seq_post104}, {1, f.seq_t105}};
            put_recent(&f.ts, 1, first, 2, HISTORY_RECENT_FORMAT);
            put_recent(&f.ts, 2, more, 2, HISTORY_RECENT_FORMAT);
            what = "names no transfer of the account";
        } else if (kind == 6) { /* a corrupt tail under the account's recent entries */
            const uint64_t tail[] = {f.seq_t101}, later[][2] = {{1, f.seq_hold104}};
            put_tail(&f.ts, 1, tail, 1, HISTORY_TAIL_FORMAT + 1);
            put_recent(&f.ts, 1, later, 1, HISTORY_RECENT_FORMAT);
            put_recent(&f.ts, 2, last, 1, HISTORY_RECENT_FORMAT);
            what = "tail record is corrupt";
        } else { /* a key of the wrong length */
            put_recent(&f.ts, 1, first, 2, HISTORY_RECENT_FORMAT);
            put_recent(&f.ts, 2, last, 1, HISTORY_RECENT_FORMAT);
            txn = raw_begin(&f.ts);
            uint8_t value[17] = {HISTORY_RECENT_FORMAT};
            ledger_history_key(1, f.seq_post104, value + 1);
            raw_put(txn, &f.ts, STORE_DB_HISTORY_RECENT, "abc", 3, value, sizeof(value));
            raw_commit(txn);
            what = "wrong key length", entity = "history_recent:0";
        }
        ck_assert_msg(test_invariant_findings(&f.ts, "history") > 0, "kind %d: no finding", kind);
        expect_finding_saying(&f.ts, "history", entity, what);
        test_store_close(&f.ts);
    }
}
END_TEST

/* ---- the log walk on two threads (a read-only snapshot) and on one ---- */

typedef struct stop_at {
    uint64_t log_calls;
    bool stop;
} stop_at;

static bool stop_in_log(const char *phase, uint64_t done, uint64_t total, void *ctx)
{
    stop_at *s = ctx;
    (void)total;
    if (strcmp(phase, "log") == 0 && done < total)
        s->log_calls++;
    return !(s->stop && s->log_calls > 0);
}

static int check_in(test_store *ts, bool read_only, stop_at *stop, findings *out)
{
    store_txn t;
    ck_assert_int_eq(store_txn_begin(ts->st, NULL, read_only, &t), TALLY_ok);
    ledger_invariant_options o = {.progress = stop_in_log, .progress_ctx = stop};
    memset(out, 0, sizeof(*out));
    int rc = ledger_invariants_check_with(&t, &o, capture, out, &out->stats);
    store_txn_abort(&t);
    return rc;
}

/* A log of several blocks of the decoder (PIPE_BLOCK_EVENTS 512) and more
 * than one progress step: the walk of a read-only snapshot (decoded on a
 * thread of its own) and of a write transaction (in turn) count and find
 * the same; a progress callback that stops in the middle of the log stops
 * both, with what was counted so far and nothing leaked (ASan, valgrind). */
START_TEST(log_walk_on_two_threads_finds_what_one_finds)
{
    fixture f;
    build(&f);
    for (uint64_t i = 0; i < LEDGER_INVARIANT_PROGRESS_ITEMS + 600; i++) {
        ledger_command c = test_cmd_transfer(1000 + i, 1, 3, 1);
        test_apply_ok(&f.ts, &c);
    }
    findings par, ser;
    stop_at go = {0};
    ck_assert_int_eq(check_in(&f.ts, true, &go, &par), TALLY_ok);
    ck_assert_int_eq(check_in(&f.ts, false, &go, &ser), TALLY_ok);
    ck_assert_uint_eq(par.stats.findings, 0);
    ck_assert_uint_eq(ser.stats.findings, 0);
    ck_assert_uint_eq(par.stats.events, f.events + LEDGER_INVARIANT_PROGRESS_ITEMS + 600);
    ck_assert_uint_eq(par.stats.events, ser.stats.events);
    ck_assert_uint_eq(par.stats.transfers, ser.stats.transfers);
    ck_assert_uint_eq(par.stats.inbox_records, ser.stats.inbox_records);

    /* A broken event in the middle: both find it, once. */
    MDB_txn *txn = raw_begin(&f.ts);
    uint8_t key[8];
    log_seq_key(f.events + 3000, key);
    size_t len;
    uint8_t *ev = raw_get(txn, &f.ts, STORE_DB_LOG, key, 8, &len);
    ev[len - 36] ^= 1; /* the body's last byte, before prev_hash (c4 20 and 32 bytes) */
    raw_put(txn, &f.ts, STORE_DB_LOG, key, 8, ev, len);
    raw_commit(txn);
    free(ev);
    ck_assert_int_eq(check_in(&f.ts, true, &go, &par), TALLY_ok);
    ck_assert_int_eq(check_in(&f.ts, false, &go, &ser), TALLY_ok);
    ck_assert_uint_eq(par.stats.findings, ser.stats.findings);
    ck_assert_uint_ge(par.stats.findings, 1);
    ck_assert_uint_eq(par.stats.findings_by_check[ledger_invariant_check_index("hash_chain")],
                      ser.stats.findings_by_check[ledger_invariant_check_index("hash_chain")]);

    stop_at stop = {.stop = true};
    ck_assert_int_eq(check_in(&f.ts, true, &stop, &par), TALLY_shutting_down);
    ck_assert_uint_eq(par.stats.events, LEDGER_INVARIANT_PROGRESS_ITEMS);
    stop = (stop_at){.stop = true};
    ck_assert_int_eq(check_in(&f.ts, false, &stop, &ser), TALLY_shutting_down);
    ck_assert_uint_eq(ser.stats.events, LEDGER_INVARIANT_PROGRESS_ITEMS);
    test_store_close(&f.ts);
}
END_TEST

#define TIMEOUT_S 60

static Suite *invariants_suite(void)
{
    const test_row tests[] = {
        {"clean", clean_store_has_no_findings, TIMEOUT_S},
        {"log_gap", deleted_event_is_a_log_gap, TIMEOUT_S},
        {"log_gap_head", deleted_last_event_is_a_log_gap_at_the_head, TIMEOUT_S},
        {"hash_flip", flipped_byte_in_an_event_breaks_the_hash_chain, TIMEOUT_S},
        {"hash_rehash", rehashed_event_breaks_the_link_to_the_next, TIMEOUT_S},
        {"meta_head", tampered_meta_head_is_found, TIMEOUT_S},
        {"balance", changed_account_balance_fails_rebuild_and_balance_sum, TIMEOUT_S},
        {"limit_flag", limit_flag_on_an_overdrawn_account_is_found, TIMEOUT_S},
        {"limit_balance", balances_moved_past_a_limit_are_found, TIMEOUT_S},
        {"inbox_deleted", deleted_inbox_record_breaks_inbox_links, TIMEOUT_S},
        {"inbox_orphan", orphan_inbox_record_claiming_other_events_breaks_inbox_links, TIMEOUT_S},
        {"inbox_past_log", inbox_record_pointing_past_the_log_breaks_inbox_links, TIMEOUT_S},
        {"failed_id_no_inbox", failed_id_without_its_inbox_record_is_found, TIMEOUT_S},
        {"failed_id_live", failed_id_of_a_live_transfer_is_found, TIMEOUT_S},
        {"failed_id_missing", inbox_record_naming_a_missing_failed_id_is_found, TIMEOUT_S},
        {"hold_resolved", hold_resolved_without_an_event_is_found, TIMEOUT_S},
        {"hold_twice", hold_resolved_twice_in_the_log_is_found, TIMEOUT_S},
        {"expiry_hold", missing_expiry_entry_of_a_pending_hold_is_found, TIMEOUT_S},
        {"expiry_entitlement", missing_expiry_entry_of_an_active_entitlement_is_found, TIMEOUT_S},
        {"entitlement", changed_entitlement_record_fails_rebuild, TIMEOUT_S},
        {"history", deleted_history_entry_is_found, TIMEOUT_S},
        {"history_tail", corrupt_history_tail_is_found, TIMEOUT_S},
        {"history_recent", corrupt_history_recent_is_found, TIMEOUT_S},
        {"two_threads", log_walk_on_two_threads_finds_what_one_finds, 4 * TIMEOUT_S},
    };
    return test_suite_of_rows("invariants", TEST_ROWS(tests));
}

int main(void) { return test_run_suite_both_modes(invariants_suite()); }
