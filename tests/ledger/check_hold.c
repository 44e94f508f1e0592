/*
 * check_hold.c — tests of ledger/transfer.c and ledger/sweep.c for holds
 * (pending transfers).
 *
 * A hold adds its amount to the debit account's debits_pending and the
 * credit account's credits_pending only. It then resolves exactly once:
 * posted (in full or in part; the rest is released), voided, or expired by
 * the sweep once its timeout is due. Each resolution releases the whole
 * pending amount, makes the transfer version 2, removes its expiry index
 * entry and is one event (transfer.posted, transfer.voided, or
 * transfer.expired without causation). A second resolution, a resolution
 * of something that is not a hold, and a post or void of a hold that is due
 * but not yet swept are rejected without any effect. The sweep is bounded
 * per call and walks due entries in time order.
 */
#include "tests/support/test_support.h"

#include "common/msgpack_safe.h"

#include <stdio.h>
#include <string.h>

#define TIMEOUT_S 60
#define TIMEOUT_MS (TIMEOUT_S * INT64_C(1000))

/* ---- helpers ---- */


/* Apply cmd, expect code and no effect at all (the transfer included). */
static void assert_rejected(test_store *ts, const ledger_command *cmd, int code, uint64_t tid)
{
    test_snapshot before = test_take_snapshot(ts);
    ledger_transfer_record was = test_transfer(ts, tid);
    ledger_outcome out = test_apply(ts, "rejected", NULL, cmd);
    ck_assert_str_eq(tally_strerror(out.code), tally_strerror(code));
    ck_assert_uint_eq(out.event_count, 0);
    test_assert_unchanged(ts, &before);
    ledger_transfer_record now = test_transfer(ts, tid);
    ck_assert_uint_eq(now.state, was.state);
    ck_assert_uint_eq(now.version, was.version);
    ck_assert_int_eq(now.posted_amount, was.posted_amount);
    ck_assert_uint_eq(now.resolved_seq, was.resolved_seq);
}

/* For commands whose transfer does not exist. */
static void assert_rejected_no_transfer(test_store *ts, const ledger_command *cmd, int code)
{
    test_snapshot before = test_take_snapshot(ts);
    ledger_outcome out = test_apply(ts, "rejected", NULL, cmd);
    ck_assert_str_eq(tally_strerror(out.code), tally_strerror(code));
    test_assert_unchanged(ts, &before);
}

static void open_account(test_store *ts, uint64_t id, uint16_t flags)
{
    ledger_command cmd = test_cmd_open(id, 1, flags);
    test_apply_ok(ts, &cmd);
}

/* A store with accounts 1 and 2 on ledger 1. */
static void open_pair(test_store *ts)
{
    test_store_open(ts);
    open_account(ts, 1, 0);
    open_account(ts, 2, 0);
}

/* Hold tid: amount from account 1 to account 2. */
static void hold(test_store *ts, uint64_t tid, int64_t amount, uint32_t timeout_s)
{
    ledger_command cmd = test_cmd_hold(tid, 1, 2, amount, timeout_s);
    test_apply_ok(ts, &cmd);
}

static void post(test_store *ts, uint64_t tid, int64_t amount)
{
    ledger_command cmd = test_cmd_post(tid, amount);
    test_apply_ok(ts, &cmd);
}

static void void_hold(test_store *ts, uint64_t tid)
{
    ledger_command cmd = test_cmd_void(tid);
    test_apply_ok(ts, &cmd);
}

static void assert_state(test_store *ts, uint64_t tid, uint8_t state)
{
    ledger_transfer_record r = test_transfer(ts, tid);
    ck_assert_str_eq(ledger_transfer_state_name(r.state), ledger_transfer_state_name(state));
}


/* The event at seq is a `type` event about transfer tid at entity_version,
 * and its snapshots equal what is stored now. */
static test_transfer_event assert_transfer_event(test_store *ts, uint64_t seq, const char *type,
                                            uint64_t tid, uint64_t entity_version)
{
    test_transfer_event ev;
    memset(&ev, 0, sizeof(ev));
    ev = test_read_transfer_event(ts, seq);
    ck_assert_str_eq(ev.type, type);
    ck_assert_int_eq(ev.entity_kind, LOG_ENTITY_TRANSFER);
    tally_id128 id = test_id(tid);
    ck_assert_mem_eq(ev.entity_transfer_id.bytes, id.bytes, 16);
    ck_assert_uint_eq(ev.entity_version, entity_version);
    ck_assert_int_eq(ev.transfer_rc, TALLY_ok);
    ck_assert_int_eq(ev.debit_rc, TALLY_ok);
    ck_assert_int_eq(ev.credit_rc, TALLY_ok);

    ledger_transfer_record r = test_transfer(ts, tid);
    ck_assert_uint_eq(ev.transfer.state, r.state);
    ck_assert_uint_eq(ev.transfer.version, r.version);
    ck_assert_int_eq(ev.transfer.posted_amount, r.posted_amount);
    ck_assert_uint_eq(ev.transfer.resolved_seq, r.resolved_seq);
    ck_assert_int_eq(ev.transfer.amount, r.amount);
    ledger_account debit = test_account(ts, r.debit_account_id);
    ledger_account credit = test_account(ts, r.credit_account_id);
    ck_assert_mem_eq(&ev.debit, &debit, sizeof(debit));
    ck_assert_mem_eq(&ev.credit, &credit, sizeof(credit));
    return ev;
}

/* Apply cmd in a write transaction without the sweep ledger_apply_one runs
 * first, as a batch does between sweeps. */
static ledger_outcome apply_without_sweep(test_store *ts, const ledger_command *cmd)
{
    char key[32];
    snprintf(key, sizeof(key), "unswept-%u", ++ts->next_key);
    ledger_request req = {.consumer = tally_str_from("test"),
                          .key = tally_str_from(key),
                          .command = *cmd};
    store_txn t;
    ck_assert_int_eq(store_txn_begin(ts->st, NULL, false, &t), TALLY_ok);
    ledger_outcome out;
    int rc = ledger_apply(&t, &req, ts->now_ms, &out);
    ck_assert_msg(rc == TALLY_ok, "ledger_apply: %s", tally_strerror(rc));
    ck_assert_int_eq(store_txn_commit(&t), TALLY_ok);
    return out;
}

/* ledger_sweep with items_max in its own transaction. */
static uint32_t sweep_bounded(test_store *ts, uint32_t items_max, bool *more)
{
    store_txn t;
    ck_assert_int_eq(store_txn_begin(ts->st, NULL, false, &t), TALLY_ok);
    uint32_t expired = 0;
    int rc = ledger_sweep(&t, ts->now_ms, items_max, &expired, more);
    ck_assert_msg(rc == TALLY_ok, "sweep: %s", tally_strerror(rc));
    ck_assert_int_eq(store_txn_commit(&t), TALLY_ok);
    return expired;
}

/* ---- creating a hold ---- */

START_TEST(test_hold_adds_to_pending_only)
{
    test_store ts;
    open_pair(&ts);
    uint64_t head = test_head(&ts).seq;
    hold(&ts, 1, 100, 0);
    ck_assert_uint_eq(test_head(&ts).seq, head + 1);
    test_assert_balances(&ts, 1, 0, 0, 100, 0);
    test_assert_balances(&ts, 2, 0, 0, 0, 100);
    ck_assert_uint_eq(test_account(&ts, 1).version, 2);
    ck_assert_uint_eq(test_account(&ts, 2).version, 2);

    ledger_transfer_record r = test_transfer(&ts, 1);
    ck_assert_uint_eq(r.state, LEDGER_TRANSFER_PENDING_STATE);
    ck_assert_uint_eq(r.flags, LEDGER_TRANSFER_PENDING);
    ck_assert_uint_eq(r.version, 1);
    ck_assert_int_eq(r.posted_amount, 0);
    ck_assert_uint_eq(r.resolved_seq, 0);
    ck_assert_int_eq(r.expires_at_ms, 0);
    ck_assert_uint_eq(r.created_seq, head + 1);
    ck_assert_uint_eq(test_count(&ts, STORE_DB_EXPIRY), 0); /* no timeout, no entry */
    assert_transfer_event(&ts, head + 1, "transfer.created", 1, 1);
    test_finish(&ts);
}
END_TEST

START_TEST(test_hold_with_timeout_is_indexed)
{
    test_store ts;
    open_pair(&ts);
    hold(&ts, 1, 100, TIMEOUT_S);
    ledger_transfer_record r = test_transfer(&ts, 1);
    ck_assert_uint_eq(r.timeout_s, TIMEOUT_S);
    ck_assert_int_eq(r.expires_at_ms, TEST_NOW_MS + TIMEOUT_MS);
    ck_assert_uint_eq(test_count(&ts, STORE_DB_EXPIRY), 1);
    test_finish(&ts);
}
END_TEST

/* ---- post ---- */

START_TEST(test_post_full)
{
    test_store ts;
    open_pair(&ts);
    hold(&ts, 1, 100, 0);
    uint64_t head = test_head(&ts).seq;
    ledger_command cmd = test_cmd_post(1, 0);
    ledger_outcome out = test_apply(&ts, "svc", "capture-1", &cmd);
    ck_assert_int_eq(out.code, TALLY_ok);
    ck_assert_uint_eq(out.event_count, 1);
    ck_assert_uint_eq(out.first_seq, head + 1);
    ck_assert_uint_eq(test_head(&ts).seq, head + 1);

    test_assert_balances(&ts, 1, 100, 0, 0, 0);
    test_assert_balances(&ts, 2, 0, 100, 0, 0);
    ck_assert_uint_eq(test_account(&ts, 1).version, 3);
    ck_assert_uint_eq(test_account(&ts, 2).version, 3);
    ledger_transfer_record r = test_transfer(&ts, 1);
    ck_assert_str_eq(ledger_transfer_state_name(r.state), "pending_posted");
    ck_assert_int_eq(r.posted_amount, 100);
    ck_assert_int_eq(r.amount, 100);
    ck_assert_uint_eq(r.version, 2);
    ck_assert_uint_eq(r.resolved_seq, head + 1);
    test_transfer_event ev = assert_transfer_event(&ts, head + 1, "transfer.posted", 1, 2);
    ck_assert(ev.has_causation);
    test_finish(&ts);
}
END_TEST

START_TEST(test_post_full_by_explicit_amount)
{
    test_store ts;
    open_pair(&ts);
    hold(&ts, 1, 100, 0);
    post(&ts, 1, 100);
    test_assert_balances(&ts, 1, 100, 0, 0, 0);
    test_assert_balances(&ts, 2, 0, 100, 0, 0);
    ck_assert_int_eq(test_transfer(&ts, 1).posted_amount, 100);
    test_finish(&ts);
}
END_TEST

START_TEST(test_post_partial)
{
    test_store ts;
    open_pair(&ts);
    hold(&ts, 1, 100, 0);
    hold(&ts, 2, 5, 0); /* an unrelated hold stays pending */
    uint64_t head = test_head(&ts).seq;
    post(&ts, 1, 30);
    ck_assert_uint_eq(test_head(&ts).seq, head + 1);
    test_assert_balances(&ts, 1, 30, 0, 5, 0);
    test_assert_balances(&ts, 2, 0, 30, 0, 5);
    ledger_transfer_record r = test_transfer(&ts, 1);
    ck_assert_uint_eq(r.state, LEDGER_TRANSFER_HOLD_POSTED);
    ck_assert_int_eq(r.posted_amount, 30);
    ck_assert_int_eq(r.amount, 100);
    assert_transfer_event(&ts, head + 1, "transfer.posted", 1, 2);
    assert_state(&ts, 2, LEDGER_TRANSFER_PENDING_STATE);
    test_finish(&ts);
}
END_TEST

START_TEST(test_post_more_than_held)
{
    test_store ts;
    open_pair(&ts);
    hold(&ts, 1, 100, TIMEOUT_S);
    ledger_command over = test_cmd_post(1, 101);
    assert_rejected(&ts, &over, TALLY_exceeds_pending_transfer_amount, 1);
    ledger_command max = test_cmd_post(1, TALLY_AMOUNT_MAX);
    assert_rejected(&ts, &max, TALLY_exceeds_pending_transfer_amount, 1);
    assert_state(&ts, 1, LEDGER_TRANSFER_PENDING_STATE);
    post(&ts, 1, 100); /* still open */
    test_assert_balances(&ts, 1, 100, 0, 0, 0);
    test_finish(&ts);
}
END_TEST

START_TEST(test_post_invalid)
{
    test_store ts;
    open_pair(&ts);
    hold(&ts, 1, 100, 0);
    ledger_command negative = test_cmd_post(1, -1);
    assert_rejected(&ts, &negative, TALLY_amount_must_not_be_negative, 1);
    ledger_command zero_id = test_cmd_post(0, 0);
    assert_rejected_no_transfer(&ts, &zero_id, TALLY_id_must_not_be_zero);
    ledger_command zero_void = test_cmd_void(0);
    assert_rejected_no_transfer(&ts, &zero_void, TALLY_id_must_not_be_zero);
    test_finish(&ts);
}
END_TEST

/* ---- void ---- */

START_TEST(test_void)
{
    test_store ts;
    open_pair(&ts);
    hold(&ts, 1, 100, 0);
    uint64_t head = test_head(&ts).seq;
    void_hold(&ts, 1);
    ck_assert_uint_eq(test_head(&ts).seq, head + 1);
    test_assert_balances(&ts, 1, 0, 0, 0, 0);
    test_assert_balances(&ts, 2, 0, 0, 0, 0);
    ck_assert_uint_eq(test_account(&ts, 1).version, 3);
    ledger_transfer_record r = test_transfer(&ts, 1);
    ck_assert_str_eq(ledger_transfer_state_name(r.state), "pending_voided");
    ck_assert_int_eq(r.posted_amount, 0);
    ck_assert_uint_eq(r.version, 2);
    ck_assert_uint_eq(r.resolved_seq, head + 1);
    test_transfer_event ev = assert_transfer_event(&ts, head + 1, "transfer.voided", 1, 2);
    ck_assert(ev.has_causation);
    test_finish(&ts);
}
END_TEST

START_TEST(test_void_releases_limit)
{
    test_store ts;
    test_store_open(&ts);
    open_account(&ts, 1, LEDGER_ACCOUNT_DEBITS_MUST_NOT_EXCEED_CREDITS);
    open_account(&ts, 2, 0);
    ledger_command fund = test_cmd_transfer(9, 2, 1, 100);
    test_apply_ok(&ts, &fund);
    hold(&ts, 1, 100, 0);
    ledger_command spend = test_cmd_transfer(10, 1, 2, 100);
    ck_assert_int_eq(test_code(&ts, &spend), TALLY_exceeds_credits);
    void_hold(&ts, 1);
    spend.u.transfer.id = test_id(11); /* 10 failed, and stays failed */
    test_apply_ok(&ts, &spend);
    test_assert_balances(&ts, 1, 100, 100, 0, 0);
    test_finish(&ts);
}
END_TEST

/* ---- resolving twice, or what is not a hold ---- */

START_TEST(test_post_after_post)
{
    test_store ts;
    open_pair(&ts);
    hold(&ts, 1, 100, 0);
    post(&ts, 1, 40);
    ledger_command again = test_cmd_post(1, 0);
    assert_rejected(&ts, &again, TALLY_pending_transfer_already_posted, 1);
    ledger_command rest = test_cmd_post(1, 60);
    assert_rejected(&ts, &rest, TALLY_pending_transfer_already_posted, 1);
    test_assert_balances(&ts, 1, 40, 0, 0, 0);
    test_finish(&ts);
}
END_TEST

START_TEST(test_void_after_void)
{
    test_store ts;
    open_pair(&ts);
    hold(&ts, 1, 100, 0);
    void_hold(&ts, 1);
    ledger_command again = test_cmd_void(1);
    assert_rejected(&ts, &again, TALLY_pending_transfer_already_voided, 1);
    test_finish(&ts);
}
END_TEST

START_TEST(test_post_after_void)
{
    test_store ts;
    open_pair(&ts);
    hold(&ts, 1, 100, 0);
    void_hold(&ts, 1);
    ledger_command cmd = test_cmd_post(1, 0);
    assert_rejected(&ts, &cmd, TALLY_pending_transfer_already_voided, 1);
    test_assert_balances(&ts, 1, 0, 0, 0, 0);
    test_finish(&ts);
}
END_TEST

START_TEST(test_void_after_post)
{
    test_store ts;
    open_pair(&ts);
    hold(&ts, 1, 100, 0);
    post(&ts, 1, 0);
    ledger_command cmd = test_cmd_void(1);
    assert_rejected(&ts, &cmd, TALLY_pending_transfer_already_posted, 1);
    test_assert_balances(&ts, 1, 100, 0, 0, 0);
    test_finish(&ts);
}
END_TEST

START_TEST(test_resolve_single_phase)
{
    test_store ts;
    open_pair(&ts);
    ledger_command t = test_cmd_transfer(1, 1, 2, 100);
    test_apply_ok(&ts, &t);
    ledger_command p = test_cmd_post(1, 0);
    assert_rejected(&ts, &p, TALLY_pending_transfer_not_pending, 1);
    ledger_command v = test_cmd_void(1);
    assert_rejected(&ts, &v, TALLY_pending_transfer_not_pending, 1);
    test_assert_balances(&ts, 1, 100, 0, 0, 0);
    test_finish(&ts);
}
END_TEST

START_TEST(test_resolve_unknown)
{
    test_store ts;
    open_pair(&ts);
    hold(&ts, 1, 100, 0);
    ledger_command p = test_cmd_post(2, 0);
    assert_rejected_no_transfer(&ts, &p, TALLY_pending_transfer_not_found);
    ledger_command v = test_cmd_void(2);
    assert_rejected_no_transfer(&ts, &v, TALLY_pending_transfer_not_found);
    test_finish(&ts);
}
END_TEST

/* ---- expiry ---- */

START_TEST(test_expiry_by_sweep)
{
    test_store ts;
    open_pair(&ts);
    hold(&ts, 1, 100, TIMEOUT_S);
    uint64_t head = test_head(&ts).seq;

    ts.now_ms = TEST_NOW_MS + TIMEOUT_MS - 1; /* not due yet */
    ck_assert_uint_eq(test_sweep(&ts), 0);
    ck_assert_uint_eq(test_head(&ts).seq, head);
    assert_state(&ts, 1, LEDGER_TRANSFER_PENDING_STATE);

    ts.now_ms = TEST_NOW_MS + TIMEOUT_MS; /* due exactly now */
    ck_assert_uint_eq(test_sweep(&ts), 1);
    ck_assert_uint_eq(test_head(&ts).seq, head + 1);
    test_assert_balances(&ts, 1, 0, 0, 0, 0);
    test_assert_balances(&ts, 2, 0, 0, 0, 0);
    ledger_transfer_record r = test_transfer(&ts, 1);
    ck_assert_str_eq(ledger_transfer_state_name(r.state), "pending_expired");
    ck_assert_int_eq(r.posted_amount, 0);
    ck_assert_uint_eq(r.version, 2);
    ck_assert_uint_eq(r.resolved_seq, head + 1);
    test_transfer_event ev = assert_transfer_event(&ts, head + 1, "transfer.expired", 1, 2);
    ck_assert(!ev.has_causation);
    ck_assert_uint_eq(test_count(&ts, STORE_DB_EXPIRY), 0);

    ck_assert_uint_eq(test_sweep(&ts), 0); /* once only */
    ck_assert_uint_eq(test_head(&ts).seq, head + 1);
    test_finish(&ts);
}
END_TEST

START_TEST(test_resolve_after_expiry)
{
    test_store ts;
    open_pair(&ts);
    hold(&ts, 1, 100, TIMEOUT_S);
    ts.now_ms = TEST_NOW_MS + TIMEOUT_MS + 1000;
    ck_assert_uint_eq(test_sweep(&ts), 1);
    ledger_command p = test_cmd_post(1, 0);
    assert_rejected(&ts, &p, TALLY_pending_transfer_expired, 1);
    ledger_command v = test_cmd_void(1);
    assert_rejected(&ts, &v, TALLY_pending_transfer_expired, 1);
    test_assert_balances(&ts, 1, 0, 0, 0, 0);
    test_finish(&ts);
}
END_TEST

START_TEST(test_resolve_due_before_sweep)
{
    test_store ts;
    open_pair(&ts);
    hold(&ts, 1, 100, TIMEOUT_S);
    ts.now_ms = TEST_NOW_MS + TIMEOUT_MS;
    test_snapshot before = test_take_snapshot(&ts);

    ledger_command p = test_cmd_post(1, 0);
    ledger_outcome out = apply_without_sweep(&ts, &p);
    ck_assert_str_eq(tally_strerror(out.code), "pending_transfer_expired");
    ck_assert_uint_eq(out.event_count, 0);
    ledger_command v = test_cmd_void(1);
    out = apply_without_sweep(&ts, &v);
    ck_assert_str_eq(tally_strerror(out.code), "pending_transfer_expired");
    test_assert_unchanged(&ts, &before);
    assert_state(&ts, 1, LEDGER_TRANSFER_PENDING_STATE); /* not swept yet */
    test_assert_balances(&ts, 1, 0, 0, 100, 0);

    ck_assert_uint_eq(test_sweep(&ts), 1);
    assert_state(&ts, 1, LEDGER_TRANSFER_HOLD_EXPIRED);
    test_assert_balances(&ts, 1, 0, 0, 0, 0);
    test_finish(&ts);
}
END_TEST

START_TEST(test_post_just_before_due)
{
    test_store ts;
    open_pair(&ts);
    hold(&ts, 1, 100, TIMEOUT_S);
    ts.now_ms = TEST_NOW_MS + TIMEOUT_MS - 1;
    ledger_command p = test_cmd_post(1, 0);
    ck_assert_int_eq(apply_without_sweep(&ts, &p).code, TALLY_ok);
    assert_state(&ts, 1, LEDGER_TRANSFER_HOLD_POSTED);
    test_assert_balances(&ts, 1, 100, 0, 0, 0);
    test_finish(&ts);
}
END_TEST

START_TEST(test_sweep_skips_resolved_holds)
{
    test_store ts;
    open_pair(&ts);
    hold(&ts, 1, 100, TIMEOUT_S);
    hold(&ts, 2, 50, TIMEOUT_S);
    post(&ts, 1, 70);
    void_hold(&ts, 2);
    uint64_t head = test_head(&ts).seq;
    ts.now_ms = TEST_NOW_MS + 10 * TIMEOUT_MS;
    ck_assert_uint_eq(test_sweep(&ts), 0);
    ck_assert_uint_eq(test_head(&ts).seq, head);
    assert_state(&ts, 1, LEDGER_TRANSFER_HOLD_POSTED);
    assert_state(&ts, 2, LEDGER_TRANSFER_HOLD_VOIDED);
    test_assert_balances(&ts, 1, 70, 0, 0, 0);
    test_assert_balances(&ts, 2, 0, 70, 0, 0);
    test_finish(&ts);
}
END_TEST

START_TEST(test_sweep_leaves_holds_without_timeout)
{
    test_store ts;
    open_pair(&ts);
    hold(&ts, 1, 100, 0);
    ts.now_ms = TALLY_TIME_MS_MAX;
    ck_assert_uint_eq(test_sweep(&ts), 0);
    assert_state(&ts, 1, LEDGER_TRANSFER_PENDING_STATE);
    post(&ts, 1, 0);
    test_assert_balances(&ts, 1, 100, 0, 0, 0);
    test_finish(&ts);
}
END_TEST

START_TEST(test_sweep_is_bounded)
{
    test_store ts;
    open_pair(&ts);
    /* Hold i is due after (6 - i) * 10 s: hold 5 is due first. */
    for (uint64_t i = 1; i <= 5; i++)
        hold(&ts, i, (int64_t)i, (uint32_t)(6 - i) * 10);
    uint64_t head = test_head(&ts).seq;
    ts.now_ms = TEST_NOW_MS + TIMEOUT_MS;

    bool more = false;
    ck_assert_uint_eq(sweep_bounded(&ts, 2, &more), 2);
    ck_assert(more);
    ck_assert_uint_eq(test_head(&ts).seq, head + 2);
    ck_assert_uint_eq(test_count(&ts, STORE_DB_EXPIRY), 3);
    assert_state(&ts, 5, LEDGER_TRANSFER_HOLD_EXPIRED);
    assert_state(&ts, 4, LEDGER_TRANSFER_HOLD_EXPIRED);
    for (uint64_t i = 1; i <= 3; i++)
        assert_state(&ts, i, LEDGER_TRANSFER_PENDING_STATE);
    test_assert_balances(&ts, 1, 0, 0, 1 + 2 + 3, 0);

    ck_assert_uint_eq(sweep_bounded(&ts, 3, &more), 3);
    ck_assert(!more);
    ck_assert_uint_eq(test_head(&ts).seq, head + 5);
    ck_assert_uint_eq(test_count(&ts, STORE_DB_EXPIRY), 0);
    test_assert_balances(&ts, 1, 0, 0, 0, 0);
    test_assert_balances(&ts, 2, 0, 0, 0, 0);
    test_finish(&ts);
}
END_TEST

START_TEST(test_sweep_more_only_when_due_remain)
{
    /* Two due, one not: a bound of 2 expires both and reports no more. */
    test_store ts;
    open_pair(&ts);
    hold(&ts, 1, 10, 10);
    hold(&ts, 2, 10, 20);
    hold(&ts, 3, 10, 1000);
    ts.now_ms = TEST_NOW_MS + 20 * 1000;
    bool more = true;
    ck_assert_uint_eq(sweep_bounded(&ts, 2, &more), 2);
    ck_assert(!more);
    assert_state(&ts, 3, LEDGER_TRANSFER_PENDING_STATE);
    test_assert_balances(&ts, 1, 0, 0, 10, 0);
    test_finish(&ts);
}
END_TEST

START_TEST(test_expiry_entries_removed_on_resolution)
{
    test_store ts;
    open_pair(&ts);
    hold(&ts, 1, 10, TIMEOUT_S);
    hold(&ts, 2, 20, TIMEOUT_S);
    hold(&ts, 3, 30, 2 * TIMEOUT_S);
    ck_assert_uint_eq(test_count(&ts, STORE_DB_EXPIRY), 3);
    post(&ts, 1, 0);
    ck_assert_uint_eq(test_count(&ts, STORE_DB_EXPIRY), 2);
    void_hold(&ts, 2);
    ck_assert_uint_eq(test_count(&ts, STORE_DB_EXPIRY), 1);
    ts.now_ms = TEST_NOW_MS + 2 * TIMEOUT_MS;
    ck_assert_uint_eq(test_sweep(&ts), 1);
    ck_assert_uint_eq(test_count(&ts, STORE_DB_EXPIRY), 0);
    assert_state(&ts, 3, LEDGER_TRANSFER_HOLD_EXPIRED);
    test_assert_balances(&ts, 1, 10, 0, 0, 0);
    test_assert_balances(&ts, 2, 0, 10, 0, 0);
    test_finish(&ts);
}
END_TEST

START_TEST(test_partial_post_removes_expiry_entry)
{
    test_store ts;
    open_pair(&ts);
    hold(&ts, 1, 100, TIMEOUT_S);
    post(&ts, 1, 1);
    ck_assert_uint_eq(test_count(&ts, STORE_DB_EXPIRY), 0);
    ts.now_ms = TEST_NOW_MS + 2 * TIMEOUT_MS;
    ck_assert_uint_eq(test_sweep(&ts), 0);
    test_assert_balances(&ts, 1, 1, 0, 0, 0);
    test_assert_balances(&ts, 2, 0, 1, 0, 0);
    test_finish(&ts);
}
END_TEST

/* One sweep call may expire far more holds than one command may append
 * events (TALLY_COMMAND_EVENTS_MAX): each expiry counts on its own. */
START_TEST(test_sweep_expires_many_in_one_call)
{
    test_store ts;
    open_pair(&ts);
    const uint64_t holds = TALLY_COMMAND_EVENTS_MAX * 2 + 7;
    for (uint64_t tid = 1; tid <= holds; tid++)
        hold(&ts, tid, 1, TIMEOUT_S);
    log_head before = test_head(&ts);
    ts.now_ms += TIMEOUT_MS;
    ck_assert_uint_eq(test_sweep(&ts), holds);
    ck_assert_uint_eq(test_head(&ts).seq, before.seq + holds);
    ck_assert_int_eq(test_account(&ts, 1).debits_pending, 0);
    ck_assert_uint_eq(test_count(&ts, STORE_DB_EXPIRY), 0);
    test_assert_invariants(&ts);
    test_store_close(&ts);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("hold");
    TCase *create = tcase_create("create");
    tcase_add_test(create, test_hold_adds_to_pending_only);
    tcase_add_test(create, test_hold_with_timeout_is_indexed);
    suite_add_tcase(s, create);

    TCase *resolve = tcase_create("post_void");
    tcase_add_test(resolve, test_post_full);
    tcase_add_test(resolve, test_post_full_by_explicit_amount);
    tcase_add_test(resolve, test_post_partial);
    tcase_add_test(resolve, test_post_more_than_held);
    tcase_add_test(resolve, test_post_invalid);
    tcase_add_test(resolve, test_void);
    tcase_add_test(resolve, test_void_releases_limit);
    suite_add_tcase(s, resolve);

    TCase *once = tcase_create("resolve_once");
    tcase_add_test(once, test_post_after_post);
    tcase_add_test(once, test_void_after_void);
    tcase_add_test(once, test_post_after_void);
    tcase_add_test(once, test_void_after_post);
    tcase_add_test(once, test_resolve_single_phase);
    tcase_add_test(once, test_resolve_unknown);
    suite_add_tcase(s, once);

    TCase *expiry = tcase_create("expiry");
    tcase_add_test(expiry, test_expiry_by_sweep);
    tcase_add_test(expiry, test_resolve_after_expiry);
    tcase_add_test(expiry, test_resolve_due_before_sweep);
    tcase_add_test(expiry, test_post_just_before_due);
    tcase_add_test(expiry, test_sweep_skips_resolved_holds);
    tcase_add_test(expiry, test_sweep_leaves_holds_without_timeout);
    tcase_add_test(expiry, test_sweep_is_bounded);
    tcase_add_test(expiry, test_sweep_more_only_when_due_remain);
    tcase_add_test(expiry, test_expiry_entries_removed_on_resolution);
    tcase_add_test(expiry, test_partial_post_removes_expiry_entry);
    tcase_add_test(expiry, test_sweep_expires_many_in_one_call);
    suite_add_tcase(s, expiry);
    return test_run_suite_both_modes(s);
}
