/*
 * check_chain.c — tests of atomic chains (LEDGER_CHAIN in ledger/ledger.c):
 * every member applies or none does. A chain that succeeds is one inbox
 * record whose events are contiguous; a chain with a failing member leaves
 * no state and no events (not even those of the members before it), reports
 * the failing member's code at its index and linked_operation_failed for the
 * others, and is stored and replayed under its key like any outcome. Also:
 * pay-and-grant in one chain, members that depend on earlier members, and
 * the chain's own validation (empty, too long, nested); the failing member's
 * transfer id stays failed, a linked one's does not.
 */
#include "tests/support/suite.h"
#include "tests/support/test_support.h"

#include <stdio.h>
#include <string.h>

/* Accounts of every scenario (test_open_bank_user_merchant): a bank that
 * may go negative, a user that may not spend more than it was credited, and
 * a merchant. */
#define BANK TEST_BANK
#define USER TEST_USER
#define MERCHANT TEST_MERCHANT
#define USER_FUNDS TEST_USER_FUNDS

/* ---- helpers ---- */

static ledger_command chain_of(const ledger_command *members, uint32_t count)
{
    ledger_command c = {.kind = LEDGER_CHAIN};
    c.u.chain = (ledger_chain){.members = members, .count = count};
    return c;
}

static void assert_account_unchanged(test_store *ts, const ledger_account *before)
{
    ledger_account now = test_account(ts, before->id);
    uint8_t x[LEDGER_ACCOUNT_RECORD_BYTES_MAX], y[LEDGER_ACCOUNT_RECORD_BYTES_MAX];
    size_t nx = ledger_account_encode(before, x), ny = ledger_account_encode(&now, y);
    ck_assert_uint_eq(nx, ny);
    ck_assert_mem_eq(x, y, nx);
}

typedef struct event_cause {
    char type[64];
    bool has_causation;
    char consumer[TALLY_CONSUMER_BYTES_MAX + 1];
    char key[TALLY_KEY_BYTES_MAX + 1];
} event_cause;

static void copy_cause(const log_event *ev, void *ctx)
{
    event_cause *c = ctx;
    snprintf(c->type, sizeof(c->type), "%.*s", (int)ev->type.len, ev->type.ptr);
    c->has_causation = ev->has_causation;
    snprintf(c->consumer, sizeof(c->consumer), "%.*s", (int)ev->consumer.len, ev->consumer.ptr);
    snprintf(c->key, sizeof(c->key), "%.*s", (int)ev->key.len, ev->key.ptr);
}

/* The event at seq has type and was caused by consumer "test" / key. */
static void assert_event(test_store *ts, uint64_t seq, const char *type, const char *key)
{
    event_cause c;
    memset(&c, 0, sizeof(c));
    test_with_event(ts, seq, copy_cause, &c);
    ck_assert_str_eq(c.type, type);
    ck_assert(c.has_causation);
    ck_assert_str_eq(c.consumer, "test");
    ck_assert_str_eq(c.key, key);
}

/* A chain rejected because of member failed with code: nothing applied,
 * codes in place, stored when code is a business rejection (an invalid
 * member is answered, not stored: PROTOCOL.md, "Error codes"). */
static void assert_chain_failed(const ledger_outcome *out, uint32_t count, uint32_t failed,
                                int code)
{
    ck_assert_msg(out->code == code, "expected %s, got %s", tally_strerror(code),
                  tally_strerror(out->code));
    ck_assert(out->stored == tally_error_is_stored(code));
    ck_assert(!out->replayed);
    ck_assert_uint_eq(out->event_count, 0);
    ck_assert_uint_eq(out->first_seq, 0);
    ck_assert_uint_eq(out->chain_count, count);
    ck_assert_uint_eq(out->failed_index, failed);
    for (uint32_t i = 0; i < count; i++)
        ck_assert_int_eq(out->chain_codes[i], i == failed ? code : TALLY_linked_operation_failed);
}

/* What must not move when a chain is rejected. */
typedef struct snapshot {
    log_head head;
    ledger_account bank, user, merchant;
    uint64_t accounts, transfers, entitlements, expiry, inbox;
} snapshot;

static snapshot take_snapshot(test_store *ts)
{
    snapshot s = {.head = test_head(ts),
                  .bank = test_account(ts, BANK),
                  .user = test_account(ts, USER),
                  .merchant = test_account(ts, MERCHANT),
                  .accounts = test_count(ts, STORE_DB_ACCOUNTS),
                  .transfers = test_count(ts, STORE_DB_TRANSFERS),
                  .entitlements = test_count(ts, STORE_DB_ENTITLEMENTS),
                  .expiry = test_count(ts, STORE_DB_EXPIRY),
                  .inbox = test_count(ts, STORE_DB_INBOX)};
    return s;
}

/* Nothing changed but inbox_added records. */
static void assert_nothing_changed(test_store *ts, const snapshot *s, uint64_t inbox_added)
{
    log_head head = test_head(ts);
    ck_assert_uint_eq(head.seq, s->head.seq);
    ck_assert_mem_eq(head.hash, s->head.hash, LOG_HASH_BYTES);
    assert_account_unchanged(ts, &s->bank);
    assert_account_unchanged(ts, &s->user);
    assert_account_unchanged(ts, &s->merchant);
    ck_assert_uint_eq(test_count(ts, STORE_DB_ACCOUNTS), s->accounts);
    ck_assert_uint_eq(test_count(ts, STORE_DB_TRANSFERS), s->transfers);
    ck_assert_uint_eq(test_count(ts, STORE_DB_ENTITLEMENTS), s->entitlements);
    ck_assert_uint_eq(test_count(ts, STORE_DB_EXPIRY), s->expiry);
    ck_assert_uint_eq(test_count(ts, STORE_DB_INBOX), s->inbox + inbox_added);
}

/* ---- success ---- */

START_TEST(test_chain_all_ok_applies_every_member)
{
    test_store ts;
    test_store_open(&ts);
    test_open_bank_user_merchant(&ts);
    uint64_t head = test_head(&ts).seq, inbox = test_count(&ts, STORE_DB_INBOX);
    ledger_command members[] = {
        test_cmd_open(10, 1, 0),
        test_cmd_open(11, 1, 0),
        test_cmd_transfer(100, BANK, 10, 30),
        test_cmd_transfer(101, 10, 11, 5),
    };
    ledger_command chain = chain_of(members, 4);
    ledger_outcome out = test_apply(&ts, "test", "chain-ok", &chain);

    ck_assert_int_eq(out.code, TALLY_ok);
    ck_assert(out.stored);
    ck_assert(!out.replayed);
    ck_assert_uint_eq(out.chain_count, 4);
    for (uint32_t i = 0; i < 4; i++)
        ck_assert_int_eq(out.chain_codes[i], TALLY_ok);
    ck_assert_uint_eq(out.first_seq, head + 1);
    ck_assert_uint_eq(out.event_count, 4);
    ck_assert_uint_eq(test_head(&ts).seq, head + 4);
    ck_assert_uint_eq(test_count(&ts, STORE_DB_INBOX), inbox + 1);
    ck_assert_uint_eq(test_count(&ts, STORE_DB_INBOX_TIME), inbox + 1);

    assert_event(&ts, head + 1, "account.opened", "chain-ok");
    assert_event(&ts, head + 2, "account.opened", "chain-ok");
    assert_event(&ts, head + 3, "transfer.created", "chain-ok");
    assert_event(&ts, head + 4, "transfer.created", "chain-ok");

    ledger_account a10 = test_account(&ts, 10), a11 = test_account(&ts, 11);
    ck_assert_int_eq(a10.credits_posted, 30);
    ck_assert_int_eq(a10.debits_posted, 5);
    ck_assert_uint_eq(a10.created_seq, head + 1);
    ck_assert_int_eq(a11.credits_posted, 5);
    ck_assert_uint_eq(a11.created_seq, head + 2);
    test_finish(&ts);
}
END_TEST

START_TEST(test_chain_success_replays)
{
    test_store ts;
    test_store_open(&ts);
    test_open_bank_user_merchant(&ts);
    ledger_command members[] = {test_cmd_open(10, 1, 0), test_cmd_transfer(100, BANK, 10, 7)};
    ledger_command chain = chain_of(members, 2);
    ledger_outcome first = test_apply(&ts, "test", "chain", &chain);
    ck_assert_int_eq(first.code, TALLY_ok);
    uint64_t head = test_head(&ts).seq;

    ts.now_ms += 1000;
    ledger_outcome again = test_apply(&ts, "test", "chain", &chain);
    ck_assert(again.replayed);
    ck_assert_int_eq(again.code, TALLY_ok);
    ck_assert_uint_eq(again.first_seq, first.first_seq);
    ck_assert_uint_eq(again.event_count, 2);
    ck_assert_uint_eq(again.chain_count, 2);
    ck_assert_int_eq(again.time_ms, first.time_ms);
    ck_assert_uint_eq(test_head(&ts).seq, head);
    ck_assert_int_eq(test_account(&ts, 10).credits_posted, 7);
    test_finish(&ts);
}
END_TEST

START_TEST(test_member_depends_on_earlier_member)
{
    test_store ts;
    test_store_open(&ts);
    test_open_bank_user_merchant(&ts);
    ledger_command members[] = {
        test_cmd_open(20, 1, LEDGER_ACCOUNT_DEBITS_MUST_NOT_EXCEED_CREDITS),
        test_cmd_transfer(200, BANK, 20, 40),     /* needs account 20 */
        test_cmd_transfer(201, 20, MERCHANT, 40), /* needs the 40 just credited */
    };
    ledger_command chain = chain_of(members, 3);
    ledger_outcome out = test_apply(&ts, "test", "depends", &chain);
    ck_assert_int_eq(out.code, TALLY_ok);
    ck_assert_uint_eq(out.event_count, 3);
    ledger_account a = test_account(&ts, 20);
    ck_assert_int_eq(a.credits_posted, 40);
    ck_assert_int_eq(a.debits_posted, 40);
    ck_assert_uint_eq(a.version, 3);
    ck_assert_int_eq(test_account(&ts, MERCHANT).credits_posted, 40);
    test_finish(&ts);
}
END_TEST

START_TEST(test_longest_chain_applies)
{
    test_store ts;
    test_store_open(&ts);
    ledger_command members[TALLY_CHAIN_COMMANDS_MAX];
    for (uint32_t i = 0; i < TALLY_CHAIN_COMMANDS_MAX; i++)
        members[i] = test_cmd_open(100 + i, 1, 0);
    ledger_command chain = chain_of(members, TALLY_CHAIN_COMMANDS_MAX);
    ledger_outcome out = test_apply(&ts, "test", "longest", &chain);
    ck_assert_int_eq(out.code, TALLY_ok);
    ck_assert_uint_eq(out.chain_count, TALLY_CHAIN_COMMANDS_MAX);
    ck_assert_uint_eq(out.event_count, TALLY_CHAIN_COMMANDS_MAX);
    ck_assert_uint_eq(out.first_seq, 1);
    ck_assert_uint_eq(test_head(&ts).seq, TALLY_CHAIN_COMMANDS_MAX);
    ck_assert_uint_eq(test_count(&ts, STORE_DB_ACCOUNTS), TALLY_CHAIN_COMMANDS_MAX);
    test_finish(&ts);
}
END_TEST

/* ---- failure ---- */

/* open 10, fund the user, overdraw the user (fails), open 11. */
static void build_failing_chain(ledger_command members[4])
{
    members[0] = test_cmd_open(10, 1, 0);
    members[1] = test_cmd_transfer(200, BANK, USER, 50);
    members[2] = test_cmd_transfer(201, USER, MERCHANT, USER_FUNDS + 51);
    members[3] = test_cmd_open(11, 1, 0);
}

/* A new store with the scenario's accounts, and the failing chain applied
 * under "chain-bad" (its outcome checked). */
static ledger_outcome open_and_fail_chain(test_store *ts, ledger_command members[4],
                                          ledger_command *chain)
{
    test_store_open(ts);
    test_open_bank_user_merchant(ts);
    build_failing_chain(members);
    *chain = chain_of(members, 4);
    ledger_outcome out = test_apply(ts, "test", "chain-bad", chain);
    assert_chain_failed(&out, 4, 2, TALLY_exceeds_credits);
    return out;
}

START_TEST(test_failing_member_leaves_no_state_and_no_events)
{
    test_store ts;
    test_store_open(&ts);
    test_open_bank_user_merchant(&ts);
    snapshot s = take_snapshot(&ts);
    ledger_command members[4];
    build_failing_chain(members);
    ledger_command chain = chain_of(members, 4);
    ledger_outcome out = test_apply(&ts, "test", "chain-bad", &chain);

    assert_chain_failed(&out, 4, 2, TALLY_exceeds_credits);
    assert_nothing_changed(&ts, &s, 1);
    ck_assert(!test_account_exists(&ts, 10)); /* opened by member 0, rolled back */
    ck_assert(!test_account_exists(&ts, 11));
    ck_assert(!test_transfer_exists(&ts, 200));
    ck_assert(!test_transfer_exists(&ts, 201));
    test_finish(&ts);
}
END_TEST

START_TEST(test_failed_chain_is_recorded_and_replays)
{
    test_store ts;
    ledger_command members[4], chain;
    ledger_outcome first = open_and_fail_chain(&ts, members, &chain);

    /* Fund the user so that the chain would now succeed: the replay must
     * still be the recorded outcome. */
    test_setup_ok(&ts, test_cmd_transfer(2, BANK, USER, 1000));
    snapshot s = take_snapshot(&ts);
    ts.now_ms += 60000;
    ledger_outcome again = test_apply(&ts, "test", "chain-bad", &chain);
    ck_assert(again.replayed);
    ck_assert(again.stored);
    ck_assert_int_eq(again.code, first.code);
    ck_assert_int_eq(again.time_ms, first.time_ms);
    ck_assert_uint_eq(again.first_seq, 0);
    ck_assert_uint_eq(again.event_count, 0);
    ck_assert_uint_eq(again.chain_count, first.chain_count);
    ck_assert_uint_eq(again.failed_index, first.failed_index);
    ck_assert_mem_eq(again.chain_codes, first.chain_codes, sizeof(first.chain_codes));
    assert_nothing_changed(&ts, &s, 0);
    ck_assert(!test_account_exists(&ts, 10));
    test_finish(&ts);
}
END_TEST

/* The failing member's transfer id stays failed (failed_id.h); a member
 * that only got linked_operation_failed leaves its id free. */
START_TEST(test_failing_member_leaves_its_transfer_id_failed)
{
    test_store ts;
    ledger_command members[4], chain;
    open_and_fail_chain(&ts, members, &chain);
    ck_assert_uint_eq(test_count(&ts, STORE_DB_FAILED_IDS), 1);
    test_setup_ok(&ts, test_cmd_transfer(2, BANK, USER, 1000));
    snapshot s = take_snapshot(&ts);
    ledger_command again = members[2];
    ck_assert_str_eq(tally_strerror(test_code(&ts, &again)), "id_already_failed");
    assert_nothing_changed(&ts, &s, 1);
    /* in a chain too: the member fails with it, the chain with the member */
    ledger_command retry[2] = {test_cmd_transfer(202, BANK, USER, 1), members[2]};
    ledger_command chain2 = chain_of(retry, 2);
    ledger_outcome out = test_apply(&ts, "test", "chain-retry", &chain2);
    assert_chain_failed(&out, 2, 1, TALLY_id_already_failed);
    ck_assert_uint_eq(test_count(&ts, STORE_DB_FAILED_IDS), 1);
    test_apply_ok(&ts, &members[1]); /* linked_operation_failed: free */
    test_finish(&ts);
}
END_TEST

START_TEST(test_failing_first_and_last_member)
{
    test_store ts;
    test_store_open(&ts);
    test_open_bank_user_merchant(&ts);
    snapshot s = take_snapshot(&ts);
    ledger_command first_fails[] = {test_cmd_transfer(300, 99, MERCHANT, 1),
                                    test_cmd_open(10, 1, 0)};
    ledger_command chain = chain_of(first_fails, 2);
    ledger_outcome out = test_apply(&ts, "test", "first", &chain);
    assert_chain_failed(&out, 2, 0, TALLY_debit_account_not_found);

    ledger_command last_fails[] = {test_cmd_open(10, 1, 0), test_cmd_open(11, 1, 0),
                                   test_cmd_open(BANK, 2, 0)};
    chain = chain_of(last_fails, 3);
    out = test_apply(&ts, "test", "last", &chain);
    assert_chain_failed(&out, 3, 2, TALLY_exists_with_different_ledger);
    assert_nothing_changed(&ts, &s, 2);
    ck_assert(!test_account_exists(&ts, 10));
    ck_assert(!test_account_exists(&ts, 11));
    test_finish(&ts);
}
END_TEST

START_TEST(test_invalid_member_fails_the_chain)
{
    test_store ts;
    test_store_open(&ts);
    test_open_bank_user_merchant(&ts);
    snapshot s = take_snapshot(&ts);
    ledger_command members[] = {test_cmd_open(10, 1, 0), test_cmd_transfer(300, BANK, 10, 0),
                                test_cmd_open(11, 1, 0)};
    ledger_command chain = chain_of(members, 3);
    ledger_outcome out = test_apply(&ts, "test", "invalid", &chain);
    assert_chain_failed(&out, 3, 1, TALLY_amount_must_not_be_zero);
    assert_nothing_changed(&ts, &s, 0); /* invalid: not stored */
    ck_assert(!test_account_exists(&ts, 10));
    test_finish(&ts);
}
END_TEST

/* ---- pay and grant ---- */

static ledger_command grant_paid_by(uint64_t tid)
{
    ledger_command g = test_cmd_grant("user-2", "pro", 0);
    g.u.entitlement.duration_ms = INT64_C(30) * 24 * 3600 * 1000;
    g.u.entitlement.has_grant_transfer = true;
    g.u.entitlement.grant_transfer_id = test_id(tid);
    return g;
}

START_TEST(test_pay_and_grant_in_one_chain)
{
    test_store ts;
    test_store_open(&ts);
    test_open_bank_user_merchant(&ts);
    uint64_t head = test_head(&ts).seq;
    ledger_command members[] = {test_cmd_transfer(300, USER, MERCHANT, 40), grant_paid_by(300)};
    ledger_command chain = chain_of(members, 2);
    ledger_outcome out = test_apply(&ts, "test", "pay-grant", &chain);
    ck_assert_int_eq(out.code, TALLY_ok);
    ck_assert_uint_eq(out.event_count, 2);
    ck_assert_uint_eq(out.first_seq, head + 1);
    assert_event(&ts, head + 1, "transfer.created", "pay-grant");
    assert_event(&ts, head + 2, "entitlement.granted", "pay-grant");

    ledger_entitlement e = test_entitlement(&ts, "user-2", "pro");
    ck_assert_int_eq(e.state, LEDGER_ENTITLEMENT_ACTIVE);
    ck_assert(e.has_grant_transfer);
    tally_id128 paid = test_id(300);
    ck_assert_mem_eq(e.grant_transfer_id.bytes, paid.bytes, 16);
    ck_assert_int_eq(e.valid_until_ms, TEST_NOW_MS + INT64_C(30) * 24 * 3600 * 1000);
    ck_assert_int_eq(test_account(&ts, USER).debits_posted, 40);
    test_finish(&ts);
}
END_TEST

START_TEST(test_failed_payment_grants_nothing)
{
    test_store ts;
    test_store_open(&ts);
    test_open_bank_user_merchant(&ts);
    snapshot s = take_snapshot(&ts);
    ledger_command members[] = {test_cmd_transfer(300, USER, MERCHANT, USER_FUNDS + 1),
                                grant_paid_by(300)};
    ledger_command chain = chain_of(members, 2);
    ledger_outcome out = test_apply(&ts, "test", "pay-grant", &chain);
    assert_chain_failed(&out, 2, 0, TALLY_exceeds_credits);
    ck_assert_int_eq(test_entitlement_rc(&ts, "user-2", "pro", &(ledger_entitlement){0}),
                     TALLY_not_found);

    /* A grant naming a transfer that no member created: the payment of
     * member 0 is rolled back too. */
    ledger_command wrong[] = {test_cmd_transfer(301, USER, MERCHANT, 10), grant_paid_by(999)};
    chain = chain_of(wrong, 2);
    out = test_apply(&ts, "test", "pay-grant-wrong", &chain);
    assert_chain_failed(&out, 2, 1, TALLY_grant_transfer_not_found);
    assert_nothing_changed(&ts, &s, 2);
    ck_assert(!test_transfer_exists(&ts, 301));
    test_finish(&ts);
}
END_TEST

/* ---- chain validation ---- */

START_TEST(test_empty_chain_is_rejected)
{
    test_store ts;
    test_store_open(&ts);
    test_open_bank_user_merchant(&ts);
    snapshot s = take_snapshot(&ts);
    ledger_command chain = chain_of(NULL, 0);
    ledger_outcome out = test_apply(&ts, "test", "empty", &chain);
    ck_assert_int_eq(out.code, TALLY_chain_must_not_be_empty);
    ck_assert(!out.stored);
    ck_assert_uint_eq(out.event_count, 0);
    ck_assert_uint_eq(out.chain_count, 0);
    assert_nothing_changed(&ts, &s, 0);
    test_finish(&ts);
}
END_TEST

START_TEST(test_too_long_chain_is_rejected)
{
    test_store ts;
    test_store_open(&ts);
    test_open_bank_user_merchant(&ts);
    snapshot s = take_snapshot(&ts);
    ledger_command members[TALLY_CHAIN_COMMANDS_MAX + 1];
    for (uint32_t i = 0; i < TALLY_CHAIN_COMMANDS_MAX + 1; i++)
        members[i] = test_cmd_open(100 + i, 1, 0);
    ledger_command chain = chain_of(members, TALLY_CHAIN_COMMANDS_MAX + 1);
    ledger_outcome out = test_apply(&ts, "test", "too-long", &chain);
    ck_assert_int_eq(out.code, TALLY_chain_too_long);
    ck_assert(!out.stored);
    ck_assert_uint_eq(out.event_count, 0);
    assert_nothing_changed(&ts, &s, 0);
    ck_assert(!test_account_exists(&ts, 100));
    test_finish(&ts);
}
END_TEST

START_TEST(test_nested_chain_is_rejected)
{
    test_store ts;
    test_store_open(&ts);
    test_open_bank_user_merchant(&ts);
    snapshot s = take_snapshot(&ts);
    ledger_command inner_members[] = {test_cmd_open(11, 1, 0)};
    ledger_command members[] = {test_cmd_open(10, 1, 0), chain_of(inner_members, 1)};
    ledger_command chain = chain_of(members, 2);
    ledger_outcome out = test_apply(&ts, "test", "nested", &chain);
    assert_chain_failed(&out, 2, 1, TALLY_chain_must_not_nest);
    assert_nothing_changed(&ts, &s, 0); /* invalid: not stored */
    ck_assert(!test_account_exists(&ts, 10));
    ck_assert(!test_account_exists(&ts, 11));
    test_finish(&ts);
}
END_TEST

/* ---- suite ---- */

#define TIMEOUT_S 60

static Suite *chain_suite(void)
{
    const test_row tests[] = {
        {"success", test_chain_all_ok_applies_every_member, TIMEOUT_S},
        {"success", test_chain_success_replays, TIMEOUT_S},
        {"success", test_member_depends_on_earlier_member, TIMEOUT_S},
        {"success", test_longest_chain_applies, TIMEOUT_S},
        {"failure", test_failing_member_leaves_no_state_and_no_events, TIMEOUT_S},
        {"failure", test_failed_chain_is_recorded_and_replays, TIMEOUT_S},
        {"failure", test_failing_first_and_last_member, TIMEOUT_S},
        {"failure", test_failing_member_leaves_its_transfer_id_failed, TIMEOUT_S},
        {"failure", test_invalid_member_fails_the_chain, TIMEOUT_S},
        {"pay_and_grant", test_pay_and_grant_in_one_chain, TIMEOUT_S},
        {"pay_and_grant", test_failed_payment_grants_nothing, TIMEOUT_S},
        {"validation", test_empty_chain_is_rejected, TIMEOUT_S},
        {"validation", test_too_long_chain_is_rejected, TIMEOUT_S},
        {"validation", test_nested_chain_is_rejected, TIMEOUT_S},
    };
    return test_suite_of_rows("chain", TEST_ROWS(tests));
}

int main(void) { return test_run_suite_both_modes(chain_suite()); }
