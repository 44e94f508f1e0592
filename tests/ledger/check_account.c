/*
 * check_account.c — tests of ledger/account.c: the account_open command.
 *
 * Opening an account creates version 1 with zero balances and exactly one
 * account.opened event whose body carries the account; invalid commands
 * (zero id, ledger or code, conflicting or unknown flags) are refused
 * without an effect; opening an existing id again is `exists` when the
 * command is identical and `exists_with_different_<field>` otherwise, and
 * never writes anything. The record: format 2 (varints) is what is written,
 * under 32 bytes for a typical account; every field round-trips at its
 * extremes; format 1's fixed 57 bytes still decode (and a store holding
 * them keeps working, the next change rewriting them as format 2);
 * malformed records are corrupt.
 */
#include "tests/support/test_support.h"

#include "common/msgpack_safe.h"

#include <stdio.h>
#include <string.h>

/* What an account.opened event says, copied out of the read transaction. */
typedef struct opened_event {
    char type[64];
    log_entity_kind entity_kind;
    uint64_t entity_account_id;
    uint64_t entity_version;
    int64_t time_ms;
    bool has_causation;
    int body_rc; /* ledger_account_unpack of body["account"] */
    ledger_account body_account;
} opened_event;

static void read_opened_event(const log_event *ev, void *ctx)
{
    opened_event *out = ctx;
    snprintf(out->type, sizeof(out->type), "%.*s", (int)ev->type.len, ev->type.ptr);
    out->entity_kind = ev->entity.kind;
    out->entity_account_id = ev->entity.account_id;
    out->entity_version = ev->entity_version;
    out->time_ms = ev->time_ms;
    out->has_causation = ev->has_causation;
    out->body_rc = ledger_account_unpack(log_event_part(ev, LOG_PART_ACCOUNT),
                                         &out->body_account);
}

static void assert_zero_balances(const ledger_account *a)
{
    ck_assert_int_eq(a->debits_posted, 0);
    ck_assert_int_eq(a->credits_posted, 0);
    ck_assert_int_eq(a->debits_pending, 0);
    ck_assert_int_eq(a->credits_pending, 0);
}

/* Apply cmd and check that it is rejected with code and changes nothing:
 * no event, and no account under the command's id. */
static void assert_invalid_open(const ledger_command *cmd, int code)
{
    test_store ts;
    test_store_open(&ts);
    ck_assert_str_eq(tally_strerror(test_code(&ts, cmd)), tally_strerror(code));
    ck_assert_uint_eq(test_head(&ts).seq, 0);
    ck_assert_uint_eq(test_count(&ts, STORE_DB_ACCOUNTS), 0);
    test_assert_invariants(&ts);
    test_store_close(&ts);
}

/* Open id 7 (ledger 1, code 1, flags), then apply again with changes and
 * expect code; the stored account and the log must not move. */
static void assert_reopen(uint16_t flags, const ledger_command *again, int code)
{
    test_store ts;
    test_store_open(&ts);
    ledger_command open = test_cmd_open(7, 1, flags);
    ck_assert_int_eq(test_code(&ts, &open), TALLY_ok);
    log_head before = test_head(&ts);
    ledger_account stored = test_account(&ts, 7);

    ledger_outcome out = test_apply(&ts, "other-consumer", NULL, again);
    ck_assert_str_eq(tally_strerror(out.code), tally_strerror(code));
    ck_assert_uint_eq(out.event_count, 0);
    ck_assert_uint_eq(out.first_seq, 0);

    log_head after = test_head(&ts);
    ck_assert_uint_eq(after.seq, before.seq);
    ck_assert_mem_eq(after.hash, before.hash, LOG_HASH_BYTES);
    ledger_account now = test_account(&ts, 7);
    ck_assert_mem_eq(&now, &stored, sizeof(now));
    ck_assert_uint_eq(test_count(&ts, STORE_DB_ACCOUNTS), 1);
    test_assert_invariants(&ts);
    test_store_close(&ts);
}

START_TEST(test_open_creates_account)
{
    test_store ts;
    test_store_open(&ts);
    ledger_command cmd = test_cmd_open(42, 9, LEDGER_ACCOUNT_DEBITS_MUST_NOT_EXCEED_CREDITS);
    cmd.u.account_open.code = 777;
    ledger_outcome out = test_apply(&ts, "svc", "k1", &cmd);
    ck_assert_int_eq(out.code, TALLY_ok);
    ck_assert(out.stored);
    ck_assert(!out.replayed);
    ck_assert_uint_eq(out.event_count, 1);
    ck_assert_uint_eq(out.first_seq, 1);
    ck_assert_uint_eq(test_head(&ts).seq, 1);

    ledger_account a = test_account(&ts, 42);
    ck_assert_uint_eq(a.id, 42);
    ck_assert_uint_eq(a.ledger, 9);
    ck_assert_uint_eq(a.code, 777);
    ck_assert_uint_eq(a.flags, LEDGER_ACCOUNT_DEBITS_MUST_NOT_EXCEED_CREDITS);
    ck_assert_uint_eq(a.version, 1);
    ck_assert_uint_eq(a.created_seq, 1);
    assert_zero_balances(&a);
    test_assert_invariants(&ts);
    test_store_close(&ts);
}
END_TEST

START_TEST(test_open_event_describes_account)
{
    test_store ts;
    test_store_open(&ts);
    ledger_command first = test_cmd_open(1, 1, 0);
    ck_assert_int_eq(test_code(&ts, &first), TALLY_ok);
    ledger_command cmd = test_cmd_open(2, 1, LEDGER_ACCOUNT_CREDITS_MUST_NOT_EXCEED_DEBITS);
    ledger_outcome out = test_apply(&ts, "svc", "open-2", &cmd);
    ck_assert_int_eq(out.code, TALLY_ok);
    ck_assert_uint_eq(out.first_seq, 2);
    ck_assert_uint_eq(test_head(&ts).seq, 2);

    ledger_account a = test_account(&ts, 2);
    ck_assert_uint_eq(a.created_seq, 2); /* the seq of its own event */
    opened_event ev;
    memset(&ev, 0, sizeof(ev));
    test_with_event(&ts, a.created_seq, read_opened_event, &ev);
    ck_assert_str_eq(ev.type, "account.opened");
    ck_assert_int_eq(ev.entity_kind, LOG_ENTITY_ACCOUNT);
    ck_assert_uint_eq(ev.entity_account_id, 2);
    ck_assert_uint_eq(ev.entity_version, 1);
    ck_assert_int_eq(ev.time_ms, TEST_NOW_MS);
    ck_assert(ev.has_causation);
    ck_assert_int_eq(ev.body_rc, TALLY_ok);
    ck_assert_mem_eq(&ev.body_account, &a, sizeof(a));
    assert_zero_balances(&ev.body_account);
    test_assert_invariants(&ts);
    test_store_close(&ts);
}
END_TEST

START_TEST(test_open_id_zero)
{
    ledger_command cmd = test_cmd_open(0, 1, 0);
    assert_invalid_open(&cmd, TALLY_id_must_not_be_zero);
}
END_TEST

START_TEST(test_open_ledger_zero)
{
    ledger_command cmd = test_cmd_open(5, 0, 0);
    assert_invalid_open(&cmd, TALLY_ledger_must_not_be_zero);
}
END_TEST

START_TEST(test_open_code_zero)
{
    ledger_command cmd = test_cmd_open(5, 1, 0);
    cmd.u.account_open.code = 0;
    assert_invalid_open(&cmd, TALLY_code_must_not_be_zero);
}
END_TEST

START_TEST(test_open_both_limit_flags)
{
    ledger_command cmd = test_cmd_open(5, 1,
                                       LEDGER_ACCOUNT_DEBITS_MUST_NOT_EXCEED_CREDITS |
                                           LEDGER_ACCOUNT_CREDITS_MUST_NOT_EXCEED_DEBITS);
    assert_invalid_open(&cmd, TALLY_flags_are_mutually_exclusive);
}
END_TEST

START_TEST(test_open_unknown_flag)
{
    ledger_command low = test_cmd_open(5, 1, 1u << 2);
    assert_invalid_open(&low, TALLY_reserved_flag);
    ledger_command high = test_cmd_open(5, 1, 1u << 15);
    assert_invalid_open(&high, TALLY_reserved_flag);
}
END_TEST

START_TEST(test_reopen_identical_exists)
{
    ledger_command again = test_cmd_open(7, 1, LEDGER_ACCOUNT_DEBITS_MUST_NOT_EXCEED_CREDITS);
    assert_reopen(LEDGER_ACCOUNT_DEBITS_MUST_NOT_EXCEED_CREDITS, &again, TALLY_exists);
}
END_TEST

START_TEST(test_reopen_different_ledger)
{
    ledger_command again = test_cmd_open(7, 2, 0);
    assert_reopen(0, &again, TALLY_exists_with_different_ledger);
}
END_TEST

START_TEST(test_reopen_different_code)
{
    ledger_command again = test_cmd_open(7, 1, 0);
    again.u.account_open.code = 2;
    assert_reopen(0, &again, TALLY_exists_with_different_code);
}
END_TEST

START_TEST(test_reopen_different_flags)
{
    ledger_command again = test_cmd_open(7, 1, LEDGER_ACCOUNT_CREDITS_MUST_NOT_EXCEED_DEBITS);
    assert_reopen(0, &again, TALLY_exists_with_different_flags);
}
END_TEST

START_TEST(test_reopen_after_transfer_keeps_balances)
{
    /* `exists` must not reset an account that has moved money. */
    test_store ts;
    test_store_open(&ts);
    ledger_command a = test_cmd_open(1, 1, 0), b = test_cmd_open(2, 1, 0);
    ck_assert_int_eq(test_code(&ts, &a), TALLY_ok);
    ck_assert_int_eq(test_code(&ts, &b), TALLY_ok);
    ledger_command t = test_cmd_transfer(1, 1, 2, 250);
    ck_assert_int_eq(test_code(&ts, &t), TALLY_ok);
    uint64_t head = test_head(&ts).seq;

    ck_assert_int_eq(test_code(&ts, &a), TALLY_exists);
    ledger_account acc = test_account(&ts, 1);
    ck_assert_int_eq(acc.debits_posted, 250);
    ck_assert_uint_eq(acc.version, 2);
    ck_assert_uint_eq(test_head(&ts).seq, head);
    test_assert_invariants(&ts);
    test_store_close(&ts);
}
END_TEST


static void assert_accounts_equal(const ledger_account *a, const ledger_account *b)
{
    ck_assert(a->id == b->id && a->ledger == b->ledger && a->code == b->code &&
              a->flags == b->flags && a->debits_posted == b->debits_posted &&
              a->credits_posted == b->credits_posted && a->debits_pending == b->debits_pending &&
              a->credits_pending == b->credits_pending && a->version == b->version &&
              a->created_seq == b->created_seq);
}

/* The same account as format 1 wrote it. */
static size_t encode_v1(const ledger_account *a, uint8_t out[LEDGER_ACCOUNT_RECORD_V1_BYTES])
{
    out[0] = 1;
    put_u32_be(out + 1, a->ledger);
    put_u16_be(out + 5, a->code);
    put_u16_be(out + 7, a->flags);
    put_u64_be(out + 9, (uint64_t)a->debits_posted);
    put_u64_be(out + 17, (uint64_t)a->credits_posted);
    put_u64_be(out + 25, (uint64_t)a->debits_pending);
    put_u64_be(out + 33, (uint64_t)a->credits_pending);
    put_u64_be(out + 41, a->version);
    put_u64_be(out + 49, a->created_seq);
    return LEDGER_ACCOUNT_RECORD_V1_BYTES;
}

START_TEST(test_account_record_formats)
{
    test_store ts;
    test_store_open(&ts);
    test_setup_ok(&ts, test_cmd_open(1, 1, 0));
    test_setup_ok(&ts, test_cmd_open(2, 1, 0));
    ledger_command pay = test_cmd_transfer(10, 1, 2, 250);
    ck_assert_int_eq(test_apply(&ts, "svc", "pay-10", &pay).code, TALLY_ok);
    uint8_t key[8];
    put_u64_be(key, 1);
    store_txn t;
    ck_assert_int_eq(store_txn_begin(ts.st, NULL, true, &t), TALLY_ok);
    MDB_val v;
    ck_assert_int_eq(store_get(&t, STORE_DB_ACCOUNTS, key, 8, &v), TALLY_ok);
    ck_assert_uint_eq(((const uint8_t *)v.mv_data)[0], 2);
    ck_assert_uint_lt(v.mv_size, 32);
    store_txn_abort(&t);
    ledger_account stored = test_account(&ts, 1), back;

    /* A store holding format 1 (written before December 2026): read the
     * same, changed as usual, rewritten as format 2. */
    uint8_t v1[LEDGER_ACCOUNT_RECORD_V1_BYTES];
    encode_v1(&stored, v1);
    ck_assert_int_eq(store_txn_begin(ts.st, NULL, false, &t), TALLY_ok);
    ck_assert_int_eq(store_put(&t, STORE_DB_ACCOUNTS, key, 8, v1, sizeof(v1), 0), TALLY_ok);
    ck_assert_int_eq(store_txn_commit(&t), TALLY_ok);
    back = test_account(&ts, 1);
    assert_accounts_equal(&stored, &back);
    pay = test_cmd_transfer(11, 1, 2, 5);
    ck_assert_int_eq(test_apply(&ts, "svc", "pay-11", &pay).code, TALLY_ok);
    back = test_account(&ts, 1);
    ck_assert_int_eq(back.debits_posted, 255);
    ck_assert_uint_eq(back.version, stored.version + 1);
    ck_assert_int_eq(store_txn_begin(ts.st, NULL, true, &t), TALLY_ok);
    ck_assert_int_eq(store_get(&t, STORE_DB_ACCOUNTS, key, 8, &v), TALLY_ok);
    ck_assert_uint_eq(((const uint8_t *)v.mv_data)[0], 2);
    store_txn_abort(&t);
    test_finish(&ts);

    /* Extremes round-trip, in both formats. */
    ledger_account big = {.id = UINT64_MAX,
                          .ledger = UINT32_MAX,
                          .code = UINT16_MAX,
                          .flags = LEDGER_ACCOUNT_DEBITS_MUST_NOT_EXCEED_CREDITS,
                          .debits_posted = 0,
                          .credits_posted = TALLY_AMOUNT_MAX - 1,
                          .debits_pending = TALLY_AMOUNT_MAX,
                          .credits_pending = 1,
                          .version = UINT64_MAX,
                          .created_seq = UINT64_MAX};
    uint8_t rec[LEDGER_ACCOUNT_RECORD_BYTES_MAX];
    size_t n = ledger_account_encode(&big, rec);
    ck_assert_uint_le(n, LEDGER_ACCOUNT_RECORD_BYTES_MAX);
    ck_assert_int_eq(ledger_account_decode(big.id, rec, n, &back), TALLY_ok);
    assert_accounts_equal(&big, &back);
    encode_v1(&big, v1);
    ck_assert_int_eq(ledger_account_decode(big.id, v1, sizeof(v1), &back), TALLY_ok);
    assert_accounts_equal(&big, &back);

    /* A trailing byte, a truncation, an unknown format: corrupt. */
    uint8_t longer[LEDGER_ACCOUNT_RECORD_BYTES_MAX + 1];
    memcpy(longer, rec, n);
    longer[n] = 0;
    ck_assert_int_eq(ledger_account_decode(big.id, longer, n + 1, &back), TALLY_corrupt_record);
    ck_assert_int_eq(ledger_account_decode(big.id, rec, n - 1, &back), TALLY_corrupt_record);
    ck_assert_int_eq(ledger_account_decode(big.id, rec, 0, &back), TALLY_corrupt_record);
    ck_assert_int_eq(ledger_account_decode(big.id, v1, sizeof(v1) - 1, &back),
                     TALLY_corrupt_record);
    rec[0] = 3;
    ck_assert_int_eq(ledger_account_decode(big.id, rec, n, &back), TALLY_corrupt_record);

    /* A field beyond its width (code 2^16), a balance beyond
     * TALLY_AMOUNT_MAX, a non-minimal varint: corrupt. */
    n = ledger_account_encode(&stored, rec);
    for (int bad = 0; bad < 2; bad++) {
        uint8_t wide[LEDGER_ACCOUNT_RECORD_BYTES_MAX + 8];
        size_t w = 0;
        const uint8_t *q = rec + 1;
        wide[w++] = 2;
        for (int i = 0; i < 9; i++) {
            uint64_t x;
            ck_assert(get_uvarint(&q, rec + n, &x));
            if (bad == 0 && i == 1)
                x = UINT64_C(1) << 16;
            if (bad == 1 && i == 3)
                x = (uint64_t)TALLY_AMOUNT_MAX + 1;
            w += put_uvarint(wide + w, x);
        }
        ck_assert_int_eq(ledger_account_decode(1, wide, w, &back), TALLY_corrupt_record);
    }
    uint8_t padded[LEDGER_ACCOUNT_RECORD_BYTES_MAX + 1];
    ck_assert_uint_eq(rec[1], 1); /* ledger 1 */
    padded[0] = 2;
    padded[1] = 0x81; /* ledger 1 as 0x81 0x00 */
    padded[2] = 0;
    memcpy(padded + 3, rec + 2, n - 2);
    ck_assert_int_eq(ledger_account_decode(1, padded, n + 1, &back), TALLY_corrupt_record);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("account");
    TCase *open = tcase_create("open");
    tcase_add_test(open, test_open_creates_account);
    tcase_add_test(open, test_open_event_describes_account);
    tcase_add_test(open, test_account_record_formats);
    suite_add_tcase(s, open);

    TCase *invalid = tcase_create("invalid");
    tcase_add_test(invalid, test_open_id_zero);
    tcase_add_test(invalid, test_open_ledger_zero);
    tcase_add_test(invalid, test_open_code_zero);
    tcase_add_test(invalid, test_open_both_limit_flags);
    tcase_add_test(invalid, test_open_unknown_flag);
    suite_add_tcase(s, invalid);

    TCase *reopen = tcase_create("reopen");
    tcase_add_test(reopen, test_reopen_identical_exists);
    tcase_add_test(reopen, test_reopen_different_ledger);
    tcase_add_test(reopen, test_reopen_different_code);
    tcase_add_test(reopen, test_reopen_different_flags);
    tcase_add_test(reopen, test_reopen_after_transfer_keeps_balances);
    suite_add_tcase(s, reopen);
    return test_run_suite_both_modes(s);
}
