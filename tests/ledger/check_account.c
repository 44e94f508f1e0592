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
 *
 * Listing (ledger_account_list, the account_list op): pages in id order
 * from an exclusive cursor, on an empty store, at exact page boundaries
 * (a full last page says no more), with a cursor between ids, past the
 * end and at 2^64-1 (no wrap to the first id), at the limit's bounds,
 * with a callback that stops early, and over records that are corrupt.
 */
#include "tests/support/test_support.h"

#include "common/msgpack_safe.h"

#include <inttypes.h>
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

/* User data (TigerBeetle's user_data_128/64/32): kept as opened,
 * returned by reads and the event, compared field by field on a reopen. */
static ledger_command open_with_user_data(uint8_t u128_last, uint64_t u64, uint32_t u32)
{
    ledger_command c = test_cmd_open(7, 1, 0);
    c.u.account_open.user_data.user_data_128.bytes[15] = u128_last;
    c.u.account_open.user_data.user_data_64 = u64;
    c.u.account_open.user_data.user_data_32 = u32;
    return c;
}

START_TEST(test_open_keeps_user_data)
{
    test_store ts;
    test_store_open(&ts);
    ledger_command cmd = open_with_user_data(0xab, UINT64_MAX, 77);
    ck_assert_int_eq(test_apply(&ts, "svc", "open-ud", &cmd).code, TALLY_ok);
    ledger_account a = test_account(&ts, 7);
    ck_assert_uint_eq(a.user_data.user_data_128.bytes[15], 0xab);
    ck_assert_uint_eq(a.user_data.user_data_64, UINT64_MAX);
    ck_assert_uint_eq(a.user_data.user_data_32, 77);
    ck_assert_int_eq(a.created_ms, TEST_NOW_MS);
    opened_event ev;
    memset(&ev, 0, sizeof(ev));
    test_with_event(&ts, a.created_seq, read_opened_event, &ev);
    ck_assert_int_eq(ev.body_rc, TALLY_ok);
    ck_assert_mem_eq(&ev.body_account, &a, sizeof(a));
    /* The same again: exists; each field changed: its own code. */
    ck_assert_int_eq(test_apply(&ts, "svc", "open-ud-2", &cmd).code, TALLY_exists);
    const struct {
        ledger_command c;
        int code;
    } changed[] = {
        {open_with_user_data(0xac, UINT64_MAX, 77), TALLY_exists_with_different_user_data_128},
        {open_with_user_data(0xab, 1, 77), TALLY_exists_with_different_user_data_64},
        {open_with_user_data(0xab, UINT64_MAX, 78), TALLY_exists_with_different_user_data_32},
        {open_with_user_data(0, 0, 0), TALLY_exists_with_different_user_data_128},
    };
    for (size_t i = 0; i < sizeof(changed) / sizeof(changed[0]); i++) {
        char key[32];
        snprintf(key, sizeof(key), "open-ud-changed-%zu", i);
        ck_assert_str_eq(tally_strerror(test_apply(&ts, "svc", key, &changed[i].c).code),
                         tally_strerror(changed[i].code));
    }
    ledger_account after = test_account(&ts, 7);
    ck_assert_mem_eq(&after, &a, sizeof(a));
    test_assert_invariants(&ts);
    test_store_close(&ts);
}
END_TEST

/* A command without user data keeps the fingerprint it had before user
 * data existed (keys stored by an older tallyd replay); with it, another. */
START_TEST(test_user_data_in_fingerprint_only_when_set)
{
    ledger_command plain = test_cmd_open(7, 1, 0), with = open_with_user_data(0, 0, 1);
    uint8_t a[32], b[32], c[32];
    ledger_command_fingerprint(&plain, a);
    ledger_command_fingerprint(&with, b);
    ck_assert_mem_ne(a, b, 32);
    /* What the fingerprint was before: the domain, kind, id, ledger,
     * code, flags. */
    sha256_ctx h;
    sha256_begin(&h);
    sha256_update(&h, "tally.command.v1", 16);
    uint8_t bytes[1 + 4 * 8] = {LEDGER_ACCOUNT_OPEN};
    put_u64_be(bytes + 1, 7), put_u64_be(bytes + 9, 1), put_u64_be(bytes + 17, 1);
    put_u64_be(bytes + 25, 0);
    sha256_update(&h, bytes, sizeof(bytes));
    sha256_finish(&h, c);
    ck_assert_mem_eq(a, c, 32);
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
              a->created_seq == b->created_seq && a->created_ms == b->created_ms &&
              tally_id128_equal(&a->user_data.user_data_128, &b->user_data.user_data_128) &&
              a->user_data.user_data_64 == b->user_data.user_data_64 &&
              a->user_data.user_data_32 == b->user_data.user_data_32);
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

/* The same account as format 3 wrote it (stores of format 6 and 7). */
static size_t encode_v3(const ledger_account *a, uint8_t out[1 + 14 * UVARINT_BYTES_MAX])
{
    const uint64_t f[14] = {a->ledger, a->code, a->flags, (uint64_t)a->debits_posted,
                            (uint64_t)a->credits_posted, (uint64_t)a->debits_pending,
                            (uint64_t)a->credits_pending, a->version, a->created_seq,
                            (uint64_t)a->created_ms,
                            get_u64_be(a->user_data.user_data_128.bytes),
                            get_u64_be(a->user_data.user_data_128.bytes + 8),
                            a->user_data.user_data_64, a->user_data.user_data_32};
    return fields_put_uvarints(out, 3, f, 14);
}

/* The record of account id as stored: its format byte and length. */
static void stored_record(test_store *ts, uint64_t id, uint8_t *format, size_t *len)
{
    uint8_t key[8];
    put_u64_be(key, id);
    store_txn t;
    MDB_val v;
    ck_assert_int_eq(store_txn_begin(ts->st, NULL, true, &t), TALLY_ok);
    ck_assert_int_eq(store_get(&t, STORE_DB_ACCOUNTS, key, 8, &v), TALLY_ok);
    *format = ((const uint8_t *)v.mv_data)[0];
    *len = v.mv_size;
    store_txn_abort(&t);
}

/* Overwrite account id's record with bytes of an older format. */
static void put_record(test_store *ts, uint64_t id, const uint8_t *rec, size_t len)
{
    uint8_t key[8];
    put_u64_be(key, id);
    store_txn t;
    ck_assert_int_eq(store_txn_begin(ts->st, NULL, false, &t), TALLY_ok);
    ck_assert_int_eq(store_put(&t, STORE_DB_ACCOUNTS, key, 8, rec, len, 0), TALLY_ok);
    ck_assert_int_eq(store_txn_commit(&t), TALLY_ok);
}

/* An account stored in an older format reads the same (but for what the
 * format lacks) and is rewritten as format 4 when a transfer changes it. */
static void assert_old_format_read_and_rewritten(test_store *ts, const ledger_account *stored,
                                                 const uint8_t *rec, size_t len, int seq)
{
    put_record(ts, stored->id, rec, len);
    ledger_account back = test_account(ts, stored->id);
    assert_accounts_equal(stored, &back);
    char key[32];
    snprintf(key, sizeof(key), "pay-old-%d", seq);
    ledger_command pay = test_cmd_transfer(100 + (uint64_t)seq, stored->id, 2, 5);
    ck_assert_int_eq(test_apply(ts, "svc", key, &pay).code, TALLY_ok);
    back = test_account(ts, stored->id);
    ck_assert_int_eq(back.debits_posted, stored->debits_posted + 5);
    ck_assert_uint_eq(back.version, stored->version + 1);
    ck_assert_int_eq(back.created_ms, stored->created_ms);
    ck_assert_int_eq(ledger_user_data_compare(&back.user_data, &stored->user_data), TALLY_ok);
    uint8_t format;
    size_t stored_len;
    stored_record(ts, stored->id, &format, &stored_len);
    ck_assert_uint_eq(format, 4);
    ck_assert_uint_eq(stored_len, ledger_user_data_is_set(&stored->user_data)
                                      ? LEDGER_ACCOUNT_RECORD_BYTES_MAX
                                      : LEDGER_ACCOUNT_RECORD_BYTES);
}

START_TEST(test_account_record_formats)
{
    test_store ts;
    test_store_open(&ts);
    test_setup_ok(&ts, test_cmd_open(1, 1, 0));
    test_setup_ok(&ts, test_cmd_open(2, 1, 0));
    test_setup_ok(&ts, open_with_user_data(0xab, 9, 0));
    ledger_command pay = test_cmd_transfer(10, 1, 2, 250);
    ck_assert_int_eq(test_apply(&ts, "svc", "pay-10", &pay).code, TALLY_ok);
    /* Format 4: 65 bytes, 93 with user data. */
    uint8_t format;
    size_t len;
    stored_record(&ts, 1, &format, &len);
    ck_assert_uint_eq(format, 4);
    ck_assert_uint_eq(len, LEDGER_ACCOUNT_RECORD_BYTES);
    ledger_account with_user_data = test_account(&ts, 7);
    stored_record(&ts, 7, &format, &len);
    ck_assert_uint_eq(format, 4);
    ck_assert_uint_eq(len, LEDGER_ACCOUNT_RECORD_BYTES_MAX);

    /* A store holding format 3 (stores of format 6 and 7): all of it,
     * user data and creation time too. */
    ledger_account stored = test_account(&ts, 1), back;
    uint8_t v3[1 + 14 * UVARINT_BYTES_MAX];
    assert_old_format_read_and_rewritten(&ts, &stored, v3, encode_v3(&stored, v3), 1);
    ck_assert_uint_eq(with_user_data.user_data.user_data_64, 9);
    /* account 7 as the debit account of a transfer to 2 */
    assert_old_format_read_and_rewritten(&ts, &with_user_data, v3,
                                         encode_v3(&with_user_data, v3), 2);

    /* A store holding format 1 (written before December 2026): read the
     * same but for what format 1 lacks (creation time, user data). */
    stored = test_account(&ts, 1);
    stored.created_ms = 0;
    uint8_t v1[LEDGER_ACCOUNT_RECORD_V1_BYTES];
    assert_old_format_read_and_rewritten(&ts, &stored, v1, encode_v1(&stored, v1), 3);
    /* No invariant check: the record written as format 1 under an event
     * of format 3 lost its creation time, which the fold still has. */
    test_store_close(&ts);

    /* Extremes round-trip, in every format. */
    ledger_account big = {.id = UINT64_MAX,
                          .ledger = UINT32_MAX,
                          .code = UINT16_MAX,
                          .flags = LEDGER_ACCOUNT_DEBITS_MUST_NOT_EXCEED_CREDITS,
                          .debits_posted = 0,
                          .credits_posted = TALLY_AMOUNT_MAX - 1,
                          .debits_pending = TALLY_AMOUNT_MAX,
                          .credits_pending = 1,
                          .version = UINT64_MAX,
                          .created_seq = UINT64_MAX,
                          .created_ms = INT64_MAX,
                          .user_data = {.user_data_64 = UINT64_MAX,
                                        .user_data_32 = UINT32_MAX}};
    memset(big.user_data.user_data_128.bytes, 0xff, 16);
    uint8_t rec[LEDGER_ACCOUNT_RECORD_BYTES_MAX];
    size_t n = ledger_account_encode(&big, rec);
    ck_assert_uint_eq(n, LEDGER_ACCOUNT_RECORD_BYTES_MAX);
    ck_assert_int_eq(ledger_account_decode(big.id, rec, n, &back), TALLY_ok);
    assert_accounts_equal(&big, &back);
    size_t n3 = encode_v3(&big, v3);
    ck_assert_int_eq(ledger_account_decode(big.id, v3, n3, &back), TALLY_ok);
    assert_accounts_equal(&big, &back);
    big.created_ms = 0; /* format 1 has neither */
    memset(&big.user_data, 0, sizeof(big.user_data));
    encode_v1(&big, v1);
    ck_assert_int_eq(ledger_account_decode(big.id, v1, sizeof(v1), &back), TALLY_ok);
    assert_accounts_equal(&big, &back);
    ck_assert_uint_eq(ledger_account_encode(&big, rec), LEDGER_ACCOUNT_RECORD_BYTES);
    ck_assert_int_eq(ledger_account_decode(big.id, rec, LEDGER_ACCOUNT_RECORD_BYTES, &back),
                     TALLY_ok);
    assert_accounts_equal(&big, &back);

    /* A trailing byte, a truncation, an unknown format, format 4 with
     * user data that is all 0 or of a length between its two: corrupt. */
    n = ledger_account_encode(&with_user_data, rec);
    ck_assert_uint_eq(n, LEDGER_ACCOUNT_RECORD_BYTES_MAX);
    uint8_t longer[LEDGER_ACCOUNT_RECORD_BYTES_MAX + 1];
    memcpy(longer, rec, n);
    longer[n] = 0;
    const uint64_t id = with_user_data.id;
    ck_assert_int_eq(ledger_account_decode(id, longer, n + 1, &back), TALLY_corrupt_record);
    ck_assert_int_eq(ledger_account_decode(id, rec, n - 1, &back), TALLY_corrupt_record);
    ck_assert_int_eq(ledger_account_decode(id, rec, LEDGER_ACCOUNT_RECORD_BYTES + 1, &back),
                     TALLY_corrupt_record);
    ck_assert_int_eq(ledger_account_decode(id, rec, LEDGER_ACCOUNT_RECORD_BYTES - 1, &back),
                     TALLY_corrupt_record);
    ck_assert_int_eq(ledger_account_decode(id, rec, 0, &back), TALLY_corrupt_record);
    ck_assert_int_eq(ledger_account_decode(id, v1, sizeof(v1) - 1, &back),
                     TALLY_corrupt_record);
    ck_assert_int_eq(ledger_account_decode(id, rec, n, &back), TALLY_ok);
    memset(longer + LEDGER_ACCOUNT_RECORD_BYTES, 0, n - LEDGER_ACCOUNT_RECORD_BYTES);
    ck_assert_int_eq(ledger_account_decode(id, longer, n, &back), TALLY_corrupt_record);
    rec[0] = 5;
    ck_assert_int_eq(ledger_account_decode(id, rec, n, &back), TALLY_corrupt_record);
    rec[0] = 4;
    rec[9] = 0x80; /* debits_posted negative */
    ck_assert_int_eq(ledger_account_decode(id, rec, n, &back), TALLY_corrupt_record);

    /* Formats 2 and 3: a field beyond its width (code 2^16), a balance
     * beyond TALLY_AMOUNT_MAX, a non-minimal varint: corrupt. */
    n = encode_v3(&stored, v3);
    for (int bad = 0; bad < 2; bad++) {
        uint8_t wide[1 + 14 * UVARINT_BYTES_MAX + 8];
        size_t w = 0;
        const uint8_t *q = v3 + 1;
        wide[w++] = 2;
        for (int i = 0; i < 9; i++) {
            uint64_t x;
            ck_assert(get_uvarint(&q, v3 + n, &x));
            if (bad == 0 && i == 1)
                x = UINT64_C(1) << 16;
            if (bad == 1 && i == 3)
                x = (uint64_t)TALLY_AMOUNT_MAX + 1;
            w += put_uvarint(wide + w, x);
        }
        ck_assert_int_eq(ledger_account_decode(1, wide, w, &back), TALLY_corrupt_record);
    }
    uint8_t padded[1 + 14 * UVARINT_BYTES_MAX + 1];
    ck_assert_uint_eq(v3[1], 1); /* ledger 1 */
    padded[0] = 3;
    padded[1] = 0x81; /* ledger 1 as 0x81 0x00 */
    padded[2] = 0;
    memcpy(padded + 3, v3 + 2, n - 2);
    ck_assert_int_eq(ledger_account_decode(1, padded, n + 1, &back), TALLY_corrupt_record);
    ck_assert_int_eq(ledger_account_decode(1, v3, n, &back), TALLY_ok);
}
END_TEST


/* ---- listing ---- */

#define LIST_CAPACITY (TALLY_ACCOUNT_LIST_ENTRIES_MAX + 1)

typedef struct listed {
    uint64_t ids[LIST_CAPACITY];
    ledger_account accounts[LIST_CAPACITY];
    uint32_t count;
    uint32_t stop_after; /* 0: never stop */
} listed;

static int collect_account(const ledger_account *a, void *ctx)
{
    listed *l = ctx;
    ck_assert_uint_lt(l->count, LIST_CAPACITY);
    l->ids[l->count] = a->id;
    l->accounts[l->count++] = *a;
    return l->stop_after && l->count == l->stop_after ? 7 : 0;
}

/* One page in a fresh read-only transaction: its code, ids in l, *next. */
static int list_page(test_store *ts, uint64_t after_id, uint32_t limit, listed *l,
                     uint64_t *next)
{
    store_txn t;
    ck_assert_int_eq(store_txn_begin(ts->st, NULL, true, &t), TALLY_ok);
    l->count = 0;
    *next = 12345; /* must be overwritten */
    int rc = ledger_account_list(&t, after_id, limit, collect_account, l, next);
    store_txn_abort(&t);
    return rc;
}

/* Fails the test unless the page is ok and holds exactly ids, then next. */
static void assert_page(test_store *ts, uint64_t after_id, uint32_t limit,
                        const uint64_t *ids, uint32_t n, uint64_t want_next)
{
    static listed l;
    uint64_t next;
    int rc = list_page(ts, after_id, limit, &l, &next);
    ck_assert_msg(rc == TALLY_ok, "after %" PRIu64 " limit %u: %s", after_id, limit,
                  tally_strerror(rc));
    ck_assert_msg(l.count == n, "after %" PRIu64 " limit %u: %u accounts, want %u", after_id,
                  limit, l.count, n);
    for (uint32_t i = 0; i < n; i++)
        ck_assert_msg(l.ids[i] == ids[i], "after %" PRIu64 " limit %u: [%u] is %" PRIu64
                      ", want %" PRIu64, after_id, limit, i, l.ids[i], ids[i]);
    ck_assert_msg(next == want_next, "after %" PRIu64 " limit %u: next %" PRIu64 ", want %" PRIu64,
                  after_id, limit, next, want_next);
}

START_TEST(test_list_empty_store)
{
    test_store ts;
    test_store_open(&ts);
    assert_page(&ts, 0, 1, NULL, 0, 0);
    assert_page(&ts, 0, TALLY_ACCOUNT_LIST_ENTRIES_MAX, NULL, 0, 0);
    assert_page(&ts, 77, 100, NULL, 0, 0);
    assert_page(&ts, UINT64_MAX, 100, NULL, 0, 0);
    test_finish(&ts);
}
END_TEST

START_TEST(test_list_pages_at_exact_boundaries)
{
    test_store ts;
    test_store_open(&ts);
    /* ids 2, 4, ... 20, opened out of order: the list is by id, not by
     * when they were opened */
    static const uint64_t order[] = {14, 2, 20, 8, 6, 18, 4, 12, 10, 16};
    for (size_t i = 0; i < sizeof(order) / sizeof(order[0]); i++)
        test_setup_ok(&ts, test_cmd_open(order[i], 1, 0));
    static const uint64_t all[] = {2, 4, 6, 8, 10, 12, 14, 16, 18, 20};

    assert_page(&ts, 0, 10, all, 10, 0);       /* exactly all: a full page, none after */
    assert_page(&ts, 0, 11, all, 10, 0);       /* a short page */
    assert_page(&ts, 0, 9, all, 9, 18);        /* one left after it */
    assert_page(&ts, 18, 9, all + 9, 1, 0);
    assert_page(&ts, 0, 5, all, 5, 10);        /* two exact halves */
    assert_page(&ts, 10, 5, all + 5, 5, 0);
    assert_page(&ts, 0, 1, all, 1, 2);
    assert_page(&ts, 2, 1, all + 1, 1, 4);

    /* Walking by next in pages of 3 meets every id once, in order. */
    uint64_t after = 0, next;
    uint32_t seen = 0, pages = 0;
    static listed l;
    do {
        ck_assert_int_eq(list_page(&ts, after, 3, &l, &next), TALLY_ok);
        for (uint32_t i = 0; i < l.count; i++, seen++)
            ck_assert_uint_eq(l.ids[i], all[seen]);
        after = next;
        pages++;
    } while (next != 0);
    ck_assert_uint_eq(seen, 10);
    ck_assert_uint_eq(pages, 4); /* 3 + 3 + 3 + 1 */

    /* Each listed account is what ledger_account_get reads. */
    ck_assert_int_eq(list_page(&ts, 0, 10, &l, &next), TALLY_ok);
    for (uint32_t i = 0; i < l.count; i++) {
        ledger_account got = test_account(&ts, l.ids[i]);
        assert_accounts_equal(&l.accounts[i], &got);
    }
    test_finish(&ts);
}
END_TEST

START_TEST(test_list_cursor_between_and_past_the_end)
{
    test_store ts;
    test_store_open(&ts);
    static const uint64_t ids[] = {5, 10, 15, UINT64_MAX - 1, UINT64_MAX};
    for (size_t i = 0; i < sizeof(ids) / sizeof(ids[0]); i++)
        test_setup_ok(&ts, test_cmd_open(ids[i], 1, 0));

    assert_page(&ts, 7, 2, ids + 1, 2, 15);          /* an after that is no account's id */
    assert_page(&ts, 4, 1, ids, 1, 5);
    assert_page(&ts, 15, 10, ids + 3, 2, 0);
    assert_page(&ts, 1000, 10, ids + 3, 2, 0);
    assert_page(&ts, UINT64_MAX - 2, 1, ids + 3, 1, UINT64_MAX - 1);
    assert_page(&ts, UINT64_MAX - 1, 10, ids + 4, 1, 0); /* the largest id */
    /* Past every id: empty; after_id + 1 must not wrap to the first page. */
    assert_page(&ts, UINT64_MAX, 10, NULL, 0, 0);
    test_finish(&ts);
}
END_TEST

START_TEST(test_list_limit_bounds)
{
    test_store ts;
    test_store_open(&ts);
    /* one account more than a page holds, written directly (no events:
     * this store is not checked against its log) */
    store_txn t;
    ck_assert_int_eq(store_txn_begin(ts.st, NULL, false, &t), TALLY_ok);
    for (uint64_t id = 1; id <= TALLY_ACCOUNT_LIST_ENTRIES_MAX + 1; id++) {
        ledger_account a = {.id = id, .ledger = 1, .code = 1, .version = 1, .created_seq = id};
        ck_assert_int_eq(ledger_account_put(&t, &a), TALLY_ok);
    }
    ck_assert_int_eq(store_txn_commit(&t), TALLY_ok);

    static listed l;
    uint64_t next;
    ck_assert_int_eq(list_page(&ts, 0, 0, &l, &next), TALLY_invalid_argument);
    ck_assert_uint_eq(l.count, 0);
    ck_assert_uint_eq(next, 0);
    ck_assert_int_eq(list_page(&ts, 0, TALLY_ACCOUNT_LIST_ENTRIES_MAX + 1, &l, &next),
                     TALLY_invalid_argument);
    ck_assert_uint_eq(l.count, 0);
    ck_assert_uint_eq(next, 0);
    ck_assert_int_eq(list_page(&ts, 0, TALLY_ACCOUNT_LIST_ENTRIES_MAX, &l, &next), TALLY_ok);
    ck_assert_uint_eq(l.count, TALLY_ACCOUNT_LIST_ENTRIES_MAX);
    ck_assert_uint_eq(l.ids[0], 1);
    ck_assert_uint_eq(l.ids[TALLY_ACCOUNT_LIST_ENTRIES_MAX - 1], TALLY_ACCOUNT_LIST_ENTRIES_MAX);
    ck_assert_uint_eq(next, TALLY_ACCOUNT_LIST_ENTRIES_MAX);
    ck_assert_int_eq(list_page(&ts, next, TALLY_ACCOUNT_LIST_ENTRIES_MAX, &l, &next), TALLY_ok);
    ck_assert_uint_eq(l.count, 1);
    ck_assert_uint_eq(l.ids[0], TALLY_ACCOUNT_LIST_ENTRIES_MAX + 1);
    ck_assert_uint_eq(next, 0);

    /* A callback that stops: its value comes back, no next. */
    l.stop_after = 3;
    ck_assert_int_eq(list_page(&ts, 0, 10, &l, &next), 7);
    ck_assert_uint_eq(l.count, 3);
    ck_assert_uint_eq(next, 0);
    test_store_close(&ts);
}
END_TEST

START_TEST(test_list_corrupt_records)
{
    test_store ts;
    test_store_open(&ts);
    test_setup_ok(&ts, test_cmd_open(1, 1, 0));
    test_setup_ok(&ts, test_cmd_open(3, 1, 0));
    /* account 2's record is one byte; a key of 4 bytes is no account id */
    store_txn t;
    uint8_t key[8], bad = 2;
    put_u64_be(key, 2);
    ck_assert_int_eq(store_txn_begin(ts.st, NULL, false, &t), TALLY_ok);
    ck_assert_int_eq(store_put(&t, STORE_DB_ACCOUNTS, key, 8, &bad, 1, 0), TALLY_ok);
    ck_assert_int_eq(store_txn_commit(&t), TALLY_ok);
    static listed l;
    uint64_t next;
    ck_assert_int_eq(list_page(&ts, 0, 10, &l, &next), TALLY_corrupt_record);
    ck_assert_uint_eq(next, 0);
    assert_page(&ts, 2, 10, (const uint64_t[]){3}, 1, 0); /* after it: readable */

    ck_assert_int_eq(store_txn_begin(ts.st, NULL, false, &t), TALLY_ok);
    ck_assert_int_eq(store_del(&t, STORE_DB_ACCOUNTS, key, 8), TALLY_ok);
    uint8_t short_key[4] = {0xff, 0xff, 0xff, 0xff}; /* sorts after every 8-byte id below it */
    ck_assert_int_eq(store_put(&t, STORE_DB_ACCOUNTS, short_key, 4, &bad, 1, 0), TALLY_ok);
    ck_assert_int_eq(store_txn_commit(&t), TALLY_ok);
    assert_page(&ts, 0, 1, (const uint64_t[]){1}, 1, 1);
    ck_assert_int_eq(list_page(&ts, 3, 10, &l, &next), TALLY_corrupt_record);
    ck_assert_uint_eq(next, 0);
    test_store_close(&ts);
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
    tcase_add_test(reopen, test_open_keeps_user_data);
    tcase_add_test(reopen, test_user_data_in_fingerprint_only_when_set);
    suite_add_tcase(s, reopen);

    TCase *list = tcase_create("list");
    tcase_add_test(list, test_list_empty_store);
    tcase_add_test(list, test_list_pages_at_exact_boundaries);
    tcase_add_test(list, test_list_cursor_between_and_past_the_end);
    tcase_add_test(list, test_list_limit_bounds);
    tcase_add_test(list, test_list_corrupt_records);
    suite_add_tcase(s, list);
    return test_run_suite_both_modes(s);
}
