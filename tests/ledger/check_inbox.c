/*
 * check_inbox.c — tests of idempotency (ledger/inbox.c and the inbox path of
 * ledger/ledger.c): a (consumer, key) names one operation. The same command
 * again replays the stored outcome without changing anything; another
 * command under the key is idempotency_key_reused and leaves no trace;
 * deterministic rejections are stored and replayed even once the state
 * would let them succeed; unusable requests are not stored; the fingerprint
 * covers every defining field and not the correlation id; every record has
 * one inbox_time entry; records survive a reopen. ledger_apply inside a
 * caller's transaction: an aborted outer transaction leaves nothing, and a
 * rejected command does not disturb its batch-mates.
 */
#include "tests/support/suite.h"
#include "tests/support/test_support.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BANK TEST_BANK
#define USER TEST_USER
#define MERCHANT TEST_MERCHANT
#define USER_FUNDS TEST_USER_FUNDS

/* ---- helpers ---- */

static ledger_request request(const char *consumer, const char *key, ledger_command cmd)
{
    ledger_request r = {.consumer = tally_str_from(consumer), .key = tally_str_from(key),
                        .command = cmd};
    return r;
}

/* ledger_apply_one at ts->now_ms; fails the test on a fault. */
static ledger_outcome apply_request(test_store *ts, const ledger_request *req)
{
    ledger_outcome out;
    int rc = ledger_apply_one(ts->st, req, ts->now_ms, &out);
    ck_assert_msg(rc == TALLY_ok, "ledger_apply_one fault: %s", tally_strerror(rc));
    return out;
}

/* ledger_apply inside an open outer transaction. */
static ledger_outcome apply_in(test_store *ts, store_txn *txn, const char *key,
                               ledger_command cmd)
{
    ledger_request req = request("test", key, cmd);
    ledger_outcome out;
    int rc = ledger_apply(txn, &req, ts->now_ms, &out);
    ck_assert_msg(rc == TALLY_ok, "ledger_apply fault: %s", tally_strerror(rc));
    return out;
}

/* What a command that leaves no trace must not move. */
typedef struct snapshot {
    log_head head;
    uint64_t accounts, transfers, inbox, inbox_time;
    int64_t user_debits, merchant_credits;
} snapshot;

static snapshot take_snapshot(test_store *ts)
{
    snapshot s = {.head = test_head(ts),
                  .accounts = test_count(ts, STORE_DB_ACCOUNTS),
                  .transfers = test_count(ts, STORE_DB_TRANSFERS),
                  .inbox = test_count(ts, STORE_DB_INBOX),
                  .inbox_time = test_count(ts, STORE_DB_INBOX_TIME)};
    if (test_account_exists(ts, USER))
        s.user_debits = test_account(ts, USER).debits_posted;
    if (test_account_exists(ts, MERCHANT))
        s.merchant_credits = test_account(ts, MERCHANT).credits_posted;
    return s;
}

/* Nothing changed but stored_added inbox records. */
static void assert_unchanged(test_store *ts, const snapshot *s, uint64_t stored_added)
{
    snapshot now = take_snapshot(ts);
    ck_assert_uint_eq(now.head.seq, s->head.seq);
    ck_assert_mem_eq(now.head.hash, s->head.hash, LOG_HASH_BYTES);
    ck_assert_uint_eq(now.accounts, s->accounts);
    ck_assert_uint_eq(now.transfers, s->transfers);
    ck_assert_int_eq(now.user_debits, s->user_debits);
    ck_assert_int_eq(now.merchant_credits, s->merchant_credits);
    ck_assert_uint_eq(now.inbox, s->inbox + stored_added);
    ck_assert_uint_eq(now.inbox_time, s->inbox_time + stored_added);
}

static void assert_replay_of(const ledger_outcome *again, const ledger_outcome *first)
{
    ck_assert(again->replayed);
    ck_assert(again->stored);
    ck_assert_int_eq(again->code, first->code);
    ck_assert_int_eq(again->time_ms, first->time_ms);
    ck_assert_uint_eq(again->first_seq, first->first_seq);
    ck_assert_uint_eq(again->event_count, first->event_count);
    ck_assert_uint_eq(again->chain_count, first->chain_count);
    ck_assert_uint_eq(again->failed_index, first->failed_index);
}

static void assert_key_reused(const ledger_outcome *out)
{
    ck_assert_int_eq(out->code, TALLY_idempotency_key_reused);
    ck_assert(!out->replayed);
    ck_assert(!out->stored);
    ck_assert_uint_eq(out->first_seq, 0);
    ck_assert_uint_eq(out->event_count, 0);
}

/* ---- replay ---- */

START_TEST(test_same_command_replays)
{
    test_store ts;
    test_store_open(&ts);
    test_open_bank_user_merchant(&ts);
    ledger_command pay = test_cmd_transfer(10, USER, MERCHANT, 30);
    uint64_t head = test_head(&ts).seq;
    ledger_outcome first = test_apply(&ts, "shop", "order-1", &pay);
    ck_assert_int_eq(first.code, TALLY_ok);
    ck_assert(!first.replayed);
    ck_assert(first.stored);
    ck_assert_uint_eq(first.first_seq, head + 1);
    ck_assert_uint_eq(first.event_count, 1);
    ck_assert_int_eq(first.time_ms, TEST_NOW_MS);
    snapshot s = take_snapshot(&ts);

    ts.now_ms += 5000; /* the replay reports the original time */
    for (int i = 0; i < 3; i++) {
        ledger_outcome again = test_apply(&ts, "shop", "order-1", &pay);
        assert_replay_of(&again, &first);
    }
    assert_unchanged(&ts, &s, 0);
    ck_assert_int_eq(test_account(&ts, USER).debits_posted, 30); /* applied once */
    ck_assert_int_eq(test_account(&ts, MERCHANT).credits_posted, 30);
    test_finish(&ts);
}
END_TEST

START_TEST(test_same_key_other_command_is_key_reused)
{
    test_store ts;
    test_store_open(&ts);
    test_open_bank_user_merchant(&ts);
    ledger_command pay = test_cmd_transfer(10, USER, MERCHANT, 30);
    ledger_outcome first = test_apply(&ts, "shop", "order-1", &pay);
    ck_assert_int_eq(first.code, TALLY_ok);
    snapshot s = take_snapshot(&ts);

    ledger_command more = test_cmd_transfer(10, USER, MERCHANT, 31);
    ledger_outcome out = test_apply(&ts, "shop", "order-1", &more);
    assert_key_reused(&out);
    ledger_command other = test_cmd_transfer(11, USER, MERCHANT, 5); /* would succeed */
    out = test_apply(&ts, "shop", "order-1", &other);
    assert_key_reused(&out);
    assert_unchanged(&ts, &s, 0);
    ck_assert(!test_transfer_exists(&ts, 11));
    ck_assert_int_eq(test_transfer(&ts, 10).amount, 30);

    ledger_outcome again = test_apply(&ts, "shop", "order-1", &pay); /* original kept */
    assert_replay_of(&again, &first);
    assert_unchanged(&ts, &s, 0);
    test_finish(&ts);
}
END_TEST

START_TEST(test_key_is_scoped_by_consumer)
{
    test_store ts;
    test_store_open(&ts);
    test_open_bank_user_merchant(&ts);
    ledger_command pay = test_cmd_transfer(10, USER, MERCHANT, 30);
    ck_assert_int_eq(test_apply(&ts, "shop", "k", &pay).code, TALLY_ok);

    /* Another consumer's "k" is another operation: it runs (and meets the
     * transfer id already used). */
    uint64_t head = test_head(&ts).seq;
    ledger_outcome out = test_apply(&ts, "billing", "k", &pay);
    ck_assert(!out.replayed);
    ck_assert_int_eq(out.code, TALLY_exists);
    ck_assert_uint_eq(test_head(&ts).seq, head);

    ledger_command other = test_cmd_transfer(11, USER, MERCHANT, 5);
    out = test_apply(&ts, "crm", "k", &other);
    ck_assert(!out.replayed);
    ck_assert_int_eq(out.code, TALLY_ok);
    ck_assert_uint_eq(out.first_seq, head + 1);
    ck_assert_int_eq(test_account(&ts, USER).debits_posted, 35);

    ck_assert(test_apply(&ts, "shop", "k", &pay).replayed);
    ck_assert(test_apply(&ts, "billing", "k", &pay).replayed);
    ck_assert(test_apply(&ts, "crm", "k", &other).replayed);
    test_finish(&ts);
}
END_TEST

START_TEST(test_rejection_replays_after_state_changed)
{
    test_store ts;
    test_store_open(&ts);
    test_open_bank_user_merchant(&ts);
    ledger_command pay = test_cmd_transfer(10, USER, MERCHANT, USER_FUNDS + 50);
    snapshot before = take_snapshot(&ts);
    ledger_outcome first = test_apply(&ts, "shop", "order-1", &pay);
    ck_assert_int_eq(first.code, TALLY_exceeds_credits);
    ck_assert(first.stored);
    ck_assert(!first.replayed);
    ck_assert_uint_eq(first.event_count, 0);
    ck_assert_uint_eq(first.first_seq, 0);
    assert_unchanged(&ts, &before, 1);

    test_setup_ok(&ts, test_cmd_transfer(2, BANK, USER, 1000)); /* now it would succeed */
    snapshot s = take_snapshot(&ts);
    ts.now_ms += 1000;
    ledger_outcome again = test_apply(&ts, "shop", "order-1", &pay);
    assert_replay_of(&again, &first);
    assert_unchanged(&ts, &s, 0);
    ck_assert(!test_transfer_exists(&ts, 10));

    /* A fresh key with the same transfer id: the id failed, and stays so
     * while order-1 replays the failure (failed_id.h). A new id applies. */
    ledger_outcome fresh = test_apply(&ts, "shop", "order-2", &pay);
    ck_assert_int_eq(fresh.code, TALLY_id_already_failed);
    ck_assert(!test_transfer_exists(&ts, 10));
    ledger_command pay_again = test_cmd_transfer(11, USER, MERCHANT, USER_FUNDS + 50);
    ck_assert_int_eq(test_apply(&ts, "shop", "order-3", &pay_again).code, TALLY_ok);
    test_finish(&ts);
}
END_TEST

/* An invalid command (class V) is answered and not stored: the same key
 * with the command corrected then runs (PROTOCOL.md, "Error codes"). */
START_TEST(test_validation_rejection_leaves_the_key_free)
{
    test_store ts;
    test_store_open(&ts);
    test_open_bank_user_merchant(&ts);
    snapshot s = take_snapshot(&ts);
    ledger_command zero = test_cmd_transfer(10, USER, MERCHANT, 0);
    ledger_outcome first = test_apply(&ts, "shop", "bad", &zero);
    ck_assert_int_eq(first.code, TALLY_amount_must_not_be_zero);
    ck_assert(!first.stored);
    ledger_outcome again = test_apply(&ts, "shop", "bad", &zero);
    ck_assert_int_eq(again.code, TALLY_amount_must_not_be_zero);
    ck_assert(!again.replayed);
    assert_unchanged(&ts, &s, 0);
    ledger_command fixed = test_cmd_transfer(10, USER, MERCHANT, 30);
    ledger_outcome ran = test_apply(&ts, "shop", "bad", &fixed);
    ck_assert_int_eq(ran.code, TALLY_ok);
    ck_assert(ran.stored && !ran.replayed);
    ck_assert_int_eq(test_account(&ts, USER).debits_posted, 30);
    test_finish(&ts);
}
END_TEST

/* ---- unusable requests ---- */

static char *repeat(char c, size_t n)
{
    char *s = malloc(n + 1);
    ck_assert_ptr_nonnull(s);
    memset(s, c, n);
    s[n] = '\0';
    return s;
}

/* The request is refused with code and nothing is stored. */
static void assert_request_error(test_store *ts, const ledger_request *req, int code)
{
    snapshot s = take_snapshot(ts);
    ledger_outcome out = apply_request(ts, req);
    ck_assert_msg(out.code == code, "expected %s, got %s", tally_strerror(code),
                  tally_strerror(out.code));
    ck_assert(!out.stored);
    ck_assert(!out.replayed);
    ck_assert_uint_eq(out.event_count, 0);
    assert_unchanged(ts, &s, 0);
}

START_TEST(test_request_errors_are_not_stored)
{
    test_store ts;
    test_store_open(&ts);
    test_open_bank_user_merchant(&ts);
    ledger_command pay = test_cmd_transfer(10, USER, MERCHANT, 30);
    char *consumer_65 = repeat('c', TALLY_CONSUMER_BYTES_MAX + 1);
    char *key_129 = repeat('k', TALLY_KEY_BYTES_MAX + 1);
    char *correlation_65 = repeat('r', TALLY_CORRELATION_BYTES_MAX + 1);

    ledger_request r = request("", "k", pay);
    assert_request_error(&ts, &r, TALLY_consumer_must_not_be_empty);
    r = request(consumer_65, "k", pay);
    assert_request_error(&ts, &r, TALLY_consumer_too_long);
    r = request("shop", "", pay);
    assert_request_error(&ts, &r, TALLY_key_must_not_be_empty);
    r = request("shop", key_129, pay);
    assert_request_error(&ts, &r, TALLY_key_too_long);
    r = request("shop", "k", pay);
    r.correlation = tally_str_from(correlation_65);
    assert_request_error(&ts, &r, TALLY_correlation_too_long);
    ck_assert(!test_transfer_exists(&ts, 10));

    /* Nothing was stored under shop/k: the same key now runs the command. */
    r.correlation = tally_str_from("");
    ledger_outcome out = apply_request(&ts, &r);
    ck_assert_int_eq(out.code, TALLY_ok);
    ck_assert(!out.replayed);
    free(consumer_65);
    free(key_129);
    free(correlation_65);
    test_finish(&ts);
}
END_TEST

START_TEST(test_longest_consumer_key_and_correlation_are_accepted)
{
    test_store ts;
    test_store_open(&ts);
    test_open_bank_user_merchant(&ts);
    char *consumer = repeat('c', TALLY_CONSUMER_BYTES_MAX);
    char *key = repeat('k', TALLY_KEY_BYTES_MAX);
    char *correlation = repeat('r', TALLY_CORRELATION_BYTES_MAX);
    ledger_request r = request(consumer, key, test_cmd_transfer(10, USER, MERCHANT, 30));
    r.correlation = tally_str_from(correlation);
    ledger_outcome out = apply_request(&ts, &r);
    ck_assert_int_eq(out.code, TALLY_ok);
    ck_assert(out.stored);
    out = apply_request(&ts, &r);
    ck_assert(out.replayed);
    free(consumer);
    free(key);
    free(correlation);
    test_finish(&ts);
}
END_TEST

/* ---- fingerprint ---- */

typedef void (*transfer_change)(ledger_transfer *t);

static void change_id(ledger_transfer *t) { t->id = test_id(11); }
static void change_debit(ledger_transfer *t) { t->debit_account_id = BANK; }
static void change_credit(ledger_transfer *t) { t->credit_account_id = BANK; }
static void change_amount(ledger_transfer *t) { t->amount += 1; }
static void change_ledger(ledger_transfer *t) { t->ledger = 2; }
static void change_code(ledger_transfer *t) { t->code = 2; }
static void change_flags(ledger_transfer *t) { t->flags = LEDGER_TRANSFER_PENDING; }
static void change_timeout(ledger_transfer *t) { t->timeout_s = 60; }

START_TEST(test_fingerprint_covers_every_transfer_field)
{
    static const transfer_change changes[] = {change_id,     change_debit,  change_credit,
                                              change_amount, change_ledger, change_code,
                                              change_flags,  change_timeout};
    test_store ts;
    test_store_open(&ts);
    test_open_bank_user_merchant(&ts);
    ledger_command pay = test_cmd_transfer(10, USER, MERCHANT, 30);
    ledger_outcome first = test_apply(&ts, "shop", "fp", &pay);
    ck_assert_int_eq(first.code, TALLY_ok);
    snapshot s = take_snapshot(&ts);
    /* The record keeps 16 bytes of the fingerprint (format 4: its format
     * byte, those 16 bytes, 11 bytes of uvarints at the test's times) */
    store_txn t;
    ck_assert_int_eq(store_txn_begin(ts.st, NULL, true, &t), TALLY_ok);
    uint8_t k[LEDGER_INBOX_KEY_BYTES_MAX];
    size_t n = ledger_inbox_key(tally_str_from("shop"), tally_str_from("fp"), k);
    MDB_val v;
    ck_assert_int_eq(store_get(&t, STORE_DB_INBOX, k, n, &v), TALLY_ok);
    ck_assert_uint_eq(v.mv_size, 28);
    ck_assert_uint_eq(((const uint8_t *)v.mv_data)[0], 4);
    store_txn_abort(&t);

    for (size_t i = 0; i < sizeof(changes) / sizeof(changes[0]); i++) {
        ledger_command changed = pay;
        changes[i](&changed.u.transfer);
        ledger_outcome out = test_apply(&ts, "shop", "fp", &changed);
        ck_assert_msg(out.code == TALLY_idempotency_key_reused, "change %zu: %s", i,
                      tally_strerror(out.code));
        ck_assert(!out.stored);
    }
    assert_unchanged(&ts, &s, 0);
    ledger_outcome again = test_apply(&ts, "shop", "fp", &pay);
    assert_replay_of(&again, &first);
    test_finish(&ts);
}
END_TEST

typedef void (*entitlement_change)(ledger_command *c);

static void change_kind(ledger_command *c) { c->kind = LEDGER_EXTEND; }
static void change_subject(ledger_command *c) { c->u.entitlement.subject = tally_str_from("u2"); }
static void change_feature(ledger_command *c) { c->u.entitlement.feature = tally_str_from("f2"); }
static void change_until(ledger_command *c) { c->u.entitlement.valid_until_ms += 1; }
static void change_duration(ledger_command *c)
{
    c->u.entitlement.valid_until_ms = 0;
    c->u.entitlement.duration_ms = 1000;
}
static void change_order_flag(ledger_command *c) { c->u.entitlement.has_source_order = false; }
static void change_order(ledger_command *c) { c->u.entitlement.source_order += 1; }
static void change_grant_transfer(ledger_command *c)
{
    c->u.entitlement.has_grant_transfer = true;
    c->u.entitlement.grant_transfer_id = test_id(1);
}

START_TEST(test_fingerprint_covers_every_entitlement_field)
{
    static const entitlement_change changes[] = {
        change_kind,  change_subject,    change_feature, change_until,
        change_duration, change_order_flag, change_order,   change_grant_transfer};
    test_store ts;
    test_store_open(&ts);
    test_open_bank_user_merchant(&ts);
    ledger_command grant = test_with_order(test_cmd_grant("u1", "f1", TEST_NOW_MS + 60000), 5);
    ledger_outcome first = test_apply(&ts, "shop", "fp", &grant);
    ck_assert_int_eq(first.code, TALLY_ok);
    snapshot s = take_snapshot(&ts);

    for (size_t i = 0; i < sizeof(changes) / sizeof(changes[0]); i++) {
        ledger_command changed = grant;
        changes[i](&changed);
        ledger_outcome out = test_apply(&ts, "shop", "fp", &changed);
        ck_assert_msg(out.code == TALLY_idempotency_key_reused, "change %zu: %s", i,
                      tally_strerror(out.code));
    }
    assert_unchanged(&ts, &s, 0);
    ck_assert_uint_eq(test_entitlement(&ts, "u1", "f1").version, 1);
    test_finish(&ts);
}
END_TEST

START_TEST(test_correlation_is_not_in_the_fingerprint)
{
    test_store ts;
    test_store_open(&ts);
    test_open_bank_user_merchant(&ts);
    ledger_request r = request("shop", "order-1", test_cmd_transfer(10, USER, MERCHANT, 30));
    r.correlation = tally_str_from("trace-a");
    ledger_outcome first = apply_request(&ts, &r);
    ck_assert_int_eq(first.code, TALLY_ok);
    r.correlation = tally_str_from("trace-b");
    ledger_outcome again = apply_request(&ts, &r);
    assert_replay_of(&again, &first);
    ck_assert_int_eq(test_account(&ts, USER).debits_posted, 30);
    test_finish(&ts);
}
END_TEST

/* ---- storage of records ---- */

START_TEST(test_inbox_time_has_one_entry_per_record)
{
    test_store ts;
    test_store_open(&ts);
    test_open_bank_user_merchant(&ts); /* 4 records */
    ck_assert_uint_eq(test_count(&ts, STORE_DB_INBOX), 4);
    ck_assert_uint_eq(test_count(&ts, STORE_DB_INBOX_TIME), 4);

    ledger_command ok = test_cmd_transfer(10, USER, MERCHANT, 30);
    ledger_command rejected = test_cmd_transfer(11, USER, MERCHANT, 1000);
    ledger_command invalid = test_cmd_transfer(12, USER, MERCHANT, 0);
    ck_assert_int_eq(test_apply(&ts, "shop", "a", &ok).code, TALLY_ok);
    ck_assert_int_eq(test_apply(&ts, "shop", "b", &rejected).code, TALLY_exceeds_credits);
    ck_assert_int_eq(test_apply(&ts, "shop", "c", &invalid).code,
                     TALLY_amount_must_not_be_zero);
    ck_assert_int_eq(test_apply(&ts, "other", "a", &rejected).code, TALLY_id_already_failed);
    /* the invalid one is not stored */
    ck_assert_uint_eq(test_count(&ts, STORE_DB_INBOX), 7);
    ck_assert_uint_eq(test_count(&ts, STORE_DB_INBOX_TIME), 7);

    ts.now_ms += 1000; /* replays, reuses and request errors add nothing */
    ck_assert(test_apply(&ts, "shop", "a", &ok).replayed);
    ck_assert(test_apply(&ts, "shop", "b", &rejected).replayed);
    ck_assert_int_eq(test_apply(&ts, "shop", "a", &invalid).code, TALLY_idempotency_key_reused);
    ck_assert_int_eq(test_apply(&ts, "", "z", &ok).code, TALLY_consumer_must_not_be_empty);
    ck_assert_uint_eq(test_count(&ts, STORE_DB_INBOX), 7);
    ck_assert_uint_eq(test_count(&ts, STORE_DB_INBOX_TIME), 7);
    test_finish(&ts);
}
END_TEST

START_TEST(test_replay_after_reopen)
{
    test_store ts;
    test_store_open(&ts);
    test_open_bank_user_merchant(&ts);
    ledger_command pay = test_cmd_transfer(10, USER, MERCHANT, 30);
    ledger_command over = test_cmd_transfer(11, USER, MERCHANT, 1000);
    ledger_outcome ok = test_apply(&ts, "shop", "order-1", &pay);
    ledger_outcome rejected = test_apply(&ts, "shop", "order-2", &over);
    ck_assert_int_eq(ok.code, TALLY_ok);
    ck_assert_int_eq(rejected.code, TALLY_exceeds_credits);
    snapshot s = take_snapshot(&ts);

    test_store_reopen(&ts);
    ts.now_ms += 1000;
    ledger_outcome again = test_apply(&ts, "shop", "order-1", &pay);
    assert_replay_of(&again, &ok);
    again = test_apply(&ts, "shop", "order-2", &over);
    assert_replay_of(&again, &rejected);
    ledger_outcome reused = test_apply(&ts, "shop", "order-1", &over);
    assert_key_reused(&reused);
    assert_unchanged(&ts, &s, 0);
    test_finish(&ts);
}
END_TEST

/* ---- inside the caller's transaction ---- */

START_TEST(test_aborted_outer_transaction_leaves_nothing)
{
    test_store ts;
    test_store_open(&ts);
    test_open_bank_user_merchant(&ts);
    snapshot s = take_snapshot(&ts);
    store_txn txn;
    ck_assert_int_eq(store_txn_begin(ts.st, NULL, false, &txn), TALLY_ok);
    ck_assert_int_eq(apply_in(&ts, &txn, "a", test_cmd_open(10, 1, 0)).code, TALLY_ok);
    ck_assert_int_eq(apply_in(&ts, &txn, "b", test_cmd_transfer(10, BANK, 10, 5)).code,
                     TALLY_ok);
    ck_assert_int_eq(apply_in(&ts, &txn, "c", test_cmd_transfer(11, USER, MERCHANT, 999)).code,
                     TALLY_exceeds_credits);
    /* within the transaction the records are already visible */
    ck_assert(apply_in(&ts, &txn, "a", test_cmd_open(10, 1, 0)).replayed);
    store_txn_abort(&txn);

    assert_unchanged(&ts, &s, 0);
    ck_assert(!test_account_exists(&ts, 10));
    ck_assert(!test_transfer_exists(&ts, 10));
    ledger_command open = test_cmd_open(10, 1, 0); /* the keys are fresh again */
    ledger_outcome out = test_apply(&ts, "test", "a", &open);
    ck_assert_int_eq(out.code, TALLY_ok);
    ck_assert(!out.replayed);
    test_finish(&ts);
}
END_TEST

START_TEST(test_rejected_command_keeps_batch_mates)
{
    test_store ts;
    test_store_open(&ts);
    test_open_bank_user_merchant(&ts);
    uint64_t head = test_head(&ts).seq, inbox = test_count(&ts, STORE_DB_INBOX);
    /* B emits an event (opening 11) before its overdraft fails. */
    ledger_command b_members[] = {test_cmd_open(11, 1, 0),
                                  test_cmd_transfer(20, USER, MERCHANT, 5000)};
    ledger_command b = {.kind = LEDGER_CHAIN};
    b.u.chain = (ledger_chain){.members = b_members, .count = 2};

    store_txn txn;
    ck_assert_int_eq(store_txn_begin(ts.st, NULL, false, &txn), TALLY_ok);
    ledger_outcome oa = apply_in(&ts, &txn, "A", test_cmd_open(10, 1, 0));
    ledger_outcome ob = apply_in(&ts, &txn, "B", b);
    ledger_outcome oc = apply_in(&ts, &txn, "C", test_cmd_open(12, 1, 0));
    ck_assert_int_eq(store_txn_commit(&txn), TALLY_ok);

    ck_assert_int_eq(oa.code, TALLY_ok);
    ck_assert_int_eq(ob.code, TALLY_exceeds_credits);
    ck_assert_int_eq(oc.code, TALLY_ok);
    ck_assert_uint_eq(oa.first_seq, head + 1);
    ck_assert_uint_eq(ob.event_count, 0);
    ck_assert_uint_eq(oc.first_seq, head + 2); /* B's rolled-back event left no gap */
    ck_assert_uint_eq(test_head(&ts).seq, head + 2);
    ck_assert(test_account_exists(&ts, 10));
    ck_assert(!test_account_exists(&ts, 11));
    ck_assert(test_account_exists(&ts, 12));
    ck_assert_uint_eq(test_account(&ts, 12).created_seq, head + 2);
    ck_assert_uint_eq(test_count(&ts, STORE_DB_INBOX), inbox + 3);

    ledger_outcome again = test_apply(&ts, "test", "B", &b);
    assert_replay_of(&again, &ob);
    test_finish(&ts);
}
END_TEST

/* ---- record formats ---- */

/* Put o under key in a transaction of its own; the stored value into
 * *val (copied, its length returned). */
static size_t put_outcome(test_store *ts, const char *key, const ledger_outcome *o,
                          uint8_t val[256])
{
    uint8_t fp[LEDGER_FINGERPRINT_BYTES];
    memset(fp, 0x5a, sizeof(fp));
    store_txn t;
    ck_assert_int_eq(store_txn_begin(ts->st, NULL, false, &t), TALLY_ok);
    ck_assert_int_eq(ledger_inbox_put(&t, tally_str_from("fmt"), tally_str_from(key), fp, o),
                     TALLY_ok);
    uint8_t k[LEDGER_INBOX_KEY_BYTES_MAX];
    size_t n = ledger_inbox_key(tally_str_from("fmt"), tally_str_from(key), k);
    MDB_val v;
    ck_assert_int_eq(store_get(&t, STORE_DB_INBOX, k, n, &v), TALLY_ok);
    ck_assert_uint_le(v.mv_size, 256);
    memcpy(val, v.mv_data, v.mv_size);
    ck_assert_int_eq(store_txn_commit(&t), TALLY_ok);
    return v.mv_size;
}

static void expect_outcome(const ledger_inbox_record *r, const ledger_outcome *o)
{
    ck_assert_int_eq(r->outcome.code, o->code);
    ck_assert_int_eq(r->outcome.time_ms, o->time_ms);
    ck_assert_uint_eq(r->outcome.first_seq, o->first_seq);
    ck_assert_uint_eq(r->outcome.event_count, o->event_count);
    ck_assert_uint_eq(r->outcome.chain_count, o->chain_count);
    ck_assert_uint_eq(r->outcome.failed_index, o->failed_index);
    for (uint32_t i = 0; i < o->chain_count; i++)
        ck_assert_uint_eq(r->outcome.chain_codes[i], o->chain_codes[i]);
    ck_assert_uint_eq(r->outcome.original_seq, o->original_seq);
    ck_assert_mem_eq(r->outcome.failed_id.bytes, o->failed_id.bytes, 16);
    ck_assert_uint_eq(r->fingerprint_len, LEDGER_FINGERPRINT_STORED_BYTES);
}

static int get_record(test_store *ts, const char *key, ledger_inbox_record *r)
{
    store_txn t;
    ck_assert_int_eq(store_txn_begin(ts->st, NULL, true, &t), TALLY_ok);
    int rc = ledger_inbox_get(&t, tally_str_from("fmt"), tally_str_from(key), r);
    store_txn_abort(&t);
    return rc;
}

static int decode(const char *key, const uint8_t *val, size_t len, ledger_inbox_record *r)
{
    uint8_t k[LEDGER_INBOX_KEY_BYTES_MAX];
    size_t n = ledger_inbox_key(tally_str_from("fmt"), tally_str_from(key), k);
    return ledger_inbox_decode(k, n, val, len, r);
}

/* Records are written in format 4 (uvarints: 30 bytes for a transfer's)
 * and read back whole, the tail of an exists or failed rejection too;
 * formats 2 and 3 (fixed width) are still read; a time before 1970 keeps
 * format 2; a garbled format 4 record is corrupt. */
START_TEST(test_record_formats_read_and_round_trip)
{
    test_store ts;
    test_store_open(&ts);
    ledger_outcome ok = {.code = TALLY_ok, .time_ms = INT64_C(1800000000000),
                         .first_seq = 1000000, .event_count = 3};
    ledger_outcome chain = {.code = TALLY_exists, .time_ms = 5, .chain_count = 3,
                            .failed_index = 1, .original_seq = 77,
                            .chain_codes = {TALLY_linked_operation_failed, TALLY_exists,
                                            TALLY_linked_operation_failed}};
    ledger_outcome failed = {.code = TALLY_exceeds_credits, .time_ms = 6};
    failed.failed_id.bytes[3] = 9;
    ledger_outcome before_1970 = {.code = TALLY_exceeds_credits, .time_ms = -5};
    const ledger_outcome *all[] = {&ok, &chain, &failed, &before_1970};
    const char *keys[] = {"ok", "chain", "failed", "1969"};
    const uint8_t formats[] = {4, 4, 4, 2};
    const size_t lens[] = {30, 1 + 16 + 6 + 3 + 1 + 16, 1 + 16 + 6 + 1 + 16, 41};
    uint8_t val[256];
    for (size_t i = 0; i < 4; i++) {
        size_t len = put_outcome(&ts, keys[i], all[i], val);
        ck_assert_uint_eq(val[0], formats[i]);
        ck_assert_uint_eq(len, lens[i]);
        ledger_inbox_record r;
        ck_assert_int_eq(get_record(&ts, keys[i], &r), TALLY_ok);
        expect_outcome(&r, all[i]);
    }
    /* format 2 of ok and format 3 of chain, as older builds wrote them */
    uint8_t f2[41] = {2}, f3[1 + 16 + 24 + 6 + 24] = {3};
    memset(f2 + 1, 0x5a, 16);
    put_u16_be(f2 + 17, TALLY_ok);
    put_u64_be(f2 + 19, (uint64_t)ok.time_ms);
    put_u64_be(f2 + 27, ok.first_seq);
    put_u32_be(f2 + 35, ok.event_count);
    ledger_inbox_record r;
    ck_assert_int_eq(decode("old-ok", f2, sizeof(f2), &r), TALLY_ok);
    expect_outcome(&r, &ok);
    memset(f3 + 1, 0x5a, 16);
    put_u16_be(f3 + 17, TALLY_exists);
    put_u64_be(f3 + 19, 5);
    f3[39] = 3, f3[40] = 1;
    for (int i = 0; i < 3; i++)
        put_u16_be(f3 + 41 + 2 * i, chain.chain_codes[i]);
    put_u64_be(f3 + 47, 77);
    ck_assert_int_eq(decode("old-chain", f3, sizeof(f3), &r), TALLY_ok);
    expect_outcome(&r, &chain);
    /* garbled format 4: a byte short, a byte over, a code past u16, 33
     * chain members */
    size_t len = put_outcome(&ts, "ok2", &ok, val);
    ck_assert_int_eq(decode("ok2", val, len, &r), TALLY_ok);
    ck_assert_int_eq(decode("ok2", val, len - 1, &r), TALLY_corrupt_record);
    val[len] = 0;
    ck_assert_int_eq(decode("ok2", val, len + 1, &r), TALLY_corrupt_record);
    uint8_t big[40] = {4};
    size_t at = 17;
    at += put_uvarint(big + at, 70000);
    for (int i = 0; i < 5; i++)
        big[at++] = 0;
    ck_assert_int_eq(decode("big", big, at, &r), TALLY_corrupt_record);
    at = 17;
    big[at++] = (uint8_t)TALLY_exceeds_credits, big[at++] = 1, big[at++] = 0, big[at++] = 0;
    big[at++] = TALLY_CHAIN_COMMANDS_MAX + 1, big[at++] = 0;
    ck_assert_int_eq(decode("big", big, at, &r), TALLY_corrupt_record);
    test_store_close(&ts);
}
END_TEST

/* A key that is a UUID's text in lower case is stored as its 16 bytes
 * (the consumer length flagged); any other key, an upper-case UUID's text
 * too, as given. Either replays, and reads back with its text. */
START_TEST(test_uuid_keys_are_packed)
{
    test_store ts;
    test_store_open(&ts);
    test_open_bank_user_merchant(&ts);
    const char *keys[] = {"0190ffff-0000-7000-8000-00000000abcd",
                          "0190FFFF-0000-7000-8000-00000000ABCD",
                          "0190ffff-0000-7000-8000-00000000abcg", "not-a-uuid"};
    const size_t stored[] = {1 + 4 + 16, 1 + 4 + 36, 1 + 4 + 36, 1 + 4 + 10};
    for (size_t i = 0; i < 4; i++) {
        ledger_command pay = test_cmd_transfer(20 + i, USER, MERCHANT, 1);
        ledger_outcome first = test_apply(&ts, "shop", keys[i], &pay);
        ck_assert_int_eq(first.code, TALLY_ok);
        uint8_t k[LEDGER_INBOX_KEY_BYTES_MAX];
        size_t n = ledger_inbox_key(tally_str_from("shop"), tally_str_from(keys[i]), k);
        ck_assert_uint_eq(n, stored[i]);
        ck_assert_uint_eq(k[0], i == 0 ? (4 | LEDGER_INBOX_KEY_PACKED) : 4);
        ck_assert_uint_eq(ledger_inbox_key_text(tally_str_from("shop"), tally_str_from(keys[i]),
                                                k),
                          i == 0 ? 1 + 4 + 36 : 0);
        store_txn t;
        ck_assert_int_eq(store_txn_begin(ts.st, NULL, true, &t), TALLY_ok);
        n = ledger_inbox_key(tally_str_from("shop"), tally_str_from(keys[i]), k);
        MDB_val v;
        ck_assert_int_eq(store_get(&t, STORE_DB_INBOX, k, n, &v), TALLY_ok);
        ledger_inbox_record r;
        ck_assert_int_eq(ledger_inbox_decode(k, n, v.mv_data, v.mv_size, &r), TALLY_ok);
        ck_assert(tally_str_equal(r.key, tally_str_from(keys[i])));
        ck_assert(tally_str_equal(r.consumer, tally_str_from("shop")));
        store_txn_abort(&t);
        ledger_outcome again = test_apply(&ts, "shop", keys[i], &pay);
        assert_replay_of(&again, &first);
    }
    test_finish(&ts);
}
END_TEST

/* ---- suite ---- */

#define TIMEOUT_S 60

static Suite *inbox_suite(void)
{
    const test_row tests[] = {
        {"replay", test_same_command_replays, TIMEOUT_S},
        {"replay", test_same_key_other_command_is_key_reused, TIMEOUT_S},
        {"replay", test_key_is_scoped_by_consumer, TIMEOUT_S},
        {"replay", test_rejection_replays_after_state_changed, TIMEOUT_S},
        {"replay", test_validation_rejection_leaves_the_key_free, TIMEOUT_S},
        {"request_errors", test_request_errors_are_not_stored, TIMEOUT_S},
        {"request_errors", test_longest_consumer_key_and_correlation_are_accepted, TIMEOUT_S},
        {"fingerprint", test_fingerprint_covers_every_transfer_field, TIMEOUT_S},
        {"fingerprint", test_fingerprint_covers_every_entitlement_field, TIMEOUT_S},
        {"fingerprint", test_correlation_is_not_in_the_fingerprint, TIMEOUT_S},
        {"storage", test_inbox_time_has_one_entry_per_record, TIMEOUT_S},
        {"storage", test_replay_after_reopen, TIMEOUT_S},
        {"storage", test_record_formats_read_and_round_trip, TIMEOUT_S},
        {"storage", test_uuid_keys_are_packed, TIMEOUT_S},
        {"outer_transaction", test_aborted_outer_transaction_leaves_nothing, TIMEOUT_S},
        {"outer_transaction", test_rejected_command_keeps_batch_mates, TIMEOUT_S},
    };
    return test_suite_of_rows("inbox", TEST_ROWS(tests));
}

int main(void) { return test_run_suite_both_modes(inbox_suite()); }
