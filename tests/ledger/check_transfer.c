/*
 * check_transfer.c — tests of ledger/transfer.c for single-phase transfers
 * (holds are in check_hold.c).
 *
 * A transfer moves its amount from the debit account's debits_posted to the
 * credit account's credits_posted, bumps both versions and appends one
 * transfer.created event whose body snapshots the transfer and both
 * accounts. Everything else is a rejection: invalid commands, unknown or
 * mismatched accounts, a transfer id that exists already or failed within
 * the dedupe window (whoever sends it),
 * balances that would overflow, account limits (which count held amounts)
 * and misused timeouts. A rejection leaves every balance, every transfer
 * and the log head exactly as they were.
 */
#include "tests/support/test_support.h"

#include "common/msgpack_safe.h"
#include "ledger/history.h"
#include "ledger/history_block.h"

#include <stdio.h>
#include <string.h>



/* Apply cmd (under its own consumer, so only the transfer id can clash),
 * expect code and no effect at all. */
static void assert_rejected(test_store *ts, const ledger_command *cmd, int code)
{
    test_snapshot before = test_take_snapshot(ts);
    ledger_outcome out = test_apply(ts, "rejected", NULL, cmd);
    ck_assert_str_eq(tally_strerror(out.code), tally_strerror(code));
    ck_assert_uint_eq(out.event_count, 0);
    ck_assert_uint_eq(out.first_seq, 0);
    test_assert_unchanged(ts, &before);
}

static void open_account(test_store *ts, uint64_t id, uint32_t ledger, uint16_t flags)
{
    ledger_command cmd = test_cmd_open(id, ledger, flags);
    ck_assert_int_eq(test_code(ts, &cmd), TALLY_ok);
}

static void assert_accounts_equal(const ledger_account *x, const ledger_account *y)
{
    ck_assert_uint_eq(x->id, y->id);
    ck_assert_uint_eq(x->ledger, y->ledger);
    ck_assert_uint_eq(x->code, y->code);
    ck_assert_uint_eq(x->flags, y->flags);
    ck_assert_int_eq(x->debits_posted, y->debits_posted);
    ck_assert_int_eq(x->credits_posted, y->credits_posted);
    ck_assert_int_eq(x->debits_pending, y->debits_pending);
    ck_assert_int_eq(x->credits_pending, y->credits_pending);
    ck_assert_uint_eq(x->version, y->version);
    ck_assert_uint_eq(x->created_seq, y->created_seq);
}

static void assert_transfers_equal(const ledger_transfer_record *x,
                                   const ledger_transfer_record *y)
{
    ck_assert_mem_eq(x->id.bytes, y->id.bytes, 16);
    ck_assert_uint_eq(x->debit_account_id, y->debit_account_id);
    ck_assert_uint_eq(x->credit_account_id, y->credit_account_id);
    ck_assert_int_eq(x->amount, y->amount);
    ck_assert_uint_eq(x->ledger, y->ledger);
    ck_assert_uint_eq(x->code, y->code);
    ck_assert_uint_eq(x->flags, y->flags);
    ck_assert_uint_eq(x->state, y->state);
    ck_assert_uint_eq(x->timeout_s, y->timeout_s);
    ck_assert_int_eq(x->expires_at_ms, y->expires_at_ms);
    ck_assert_int_eq(x->posted_amount, y->posted_amount);
    ck_assert_uint_eq(x->version, y->version);
    ck_assert_uint_eq(x->created_seq, y->created_seq);
    ck_assert_uint_eq(x->resolved_seq, y->resolved_seq);
    ck_assert_int_eq(x->created_ms, y->created_ms);
    ck_assert_mem_eq(x->user_data.user_data_128.bytes, y->user_data.user_data_128.bytes, 16);
    ck_assert_uint_eq(x->user_data.user_data_64, y->user_data.user_data_64);
    ck_assert_uint_eq(x->user_data.user_data_32, y->user_data.user_data_32);
    ck_assert_int_eq(x->reversed_amount, y->reversed_amount);
    ck_assert_mem_eq(x->reverses.bytes, y->reverses.bytes, 16);
}

/* A store with accounts 1 and 2 on ledger 1 (flags 0). */
static void open_pair(test_store *ts)
{
    test_store_open(ts);
    open_account(ts, 1, 1, 0);
    open_account(ts, 2, 1, 0);
}

/* ---- success ---- */

START_TEST(test_transfer_moves_balances)
{
    test_store ts;
    open_pair(&ts);
    uint64_t head = test_head(&ts).seq;
    ledger_command cmd = test_cmd_transfer(10, 1, 2, 100);
    cmd.u.transfer.code = 33;
    ledger_outcome out = test_apply(&ts, "svc", "pay-10", &cmd);
    ck_assert_int_eq(out.code, TALLY_ok);
    ck_assert_uint_eq(out.event_count, 1);
    ck_assert_uint_eq(out.first_seq, head + 1);
    ck_assert_uint_eq(test_head(&ts).seq, head + 1);

    test_assert_balances(&ts, 1, 100, 0, 0, 0);
    test_assert_balances(&ts, 2, 0, 100, 0, 0);
    ck_assert_uint_eq(test_account(&ts, 1).version, 2);
    ck_assert_uint_eq(test_account(&ts, 2).version, 2);

    ledger_transfer_record r = test_transfer(&ts, 10);
    ck_assert_uint_eq(r.debit_account_id, 1);
    ck_assert_uint_eq(r.credit_account_id, 2);
    ck_assert_int_eq(r.amount, 100);
    ck_assert_uint_eq(r.ledger, 1);
    ck_assert_uint_eq(r.code, 33);
    ck_assert_uint_eq(r.flags, 0);
    ck_assert_uint_eq(r.state, LEDGER_TRANSFER_POSTED);
    ck_assert_uint_eq(r.version, 1);
    ck_assert_uint_eq(r.created_seq, head + 1);
    ck_assert_uint_eq(r.resolved_seq, 0);
    ck_assert_int_eq(r.expires_at_ms, 0);
    ck_assert_int_eq(r.created_ms, TEST_NOW_MS);
    ck_assert_uint_eq(test_count(&ts, STORE_DB_EXPIRY), 0);
    test_finish(&ts);
}
END_TEST

/* Each account of a transfer gets a history entry keyed (account, seq),
 * with no value: the event at seq names the transfer (docs/BENCHMARKS.md,
 * "Store size"); history pages forward and back from a cursor. The newest
 * entries wait in the account's "history_tail" record until there are
 * HISTORY_TAIL_MAX of them (check_history.c; the newest commits' entries
 * wait in "history_recent" before that); then they are such keys. A
 * store from before December 2026 holds the transfer id as the value,
 * which tally-recon still reads and checks. */
START_TEST(test_transfer_history_entries_are_keys_only)
{
    test_store ts;
    open_pair(&ts);
    uint64_t seqs_applied[HISTORY_TAIL_MAX];
    for (uint64_t i = 0; i < HISTORY_TAIL_MAX; i++) {
        ledger_command cmd = test_cmd_transfer(11 + 2 * i, 1 + i % 2, 2 - i % 2, 5);
        char key[32];
        snprintf(key, sizeof(key), "pay-%llu", (unsigned long long)(11 + 2 * i));
        ledger_outcome out = test_apply(&ts, "svc", key, &cmd);
        ck_assert_int_eq(out.code, TALLY_ok);
        seqs_applied[i] = out.first_seq;
        test_history_fold(&ts); /* as every HISTORY_RECENT_RECORDS_MAX commits */
    }
    ledger_outcome first = {.first_seq = seqs_applied[0]}, second = {.first_seq = seqs_applied[1]};
    ck_assert_uint_eq(test_count(&ts, STORE_DB_HISTORY_TAIL), 0); /* folded at 16 */
    store_txn t;
    ck_assert_int_eq(store_txn_begin(ts.st, NULL, true, &t), TALLY_ok);
    for (uint64_t account = 1; account <= 2; account++) {
        /* the fold wrote the account's 16 seqs as one block */
        uint8_t key[16];
        ledger_history_key(account, seqs_applied[HISTORY_TAIL_MAX - 1], key);
        MDB_val k = {16, key}, v;
        ck_assert_int_eq(store_get(&t, STORE_DB_HISTORY, key, sizeof(key), &v), TALLY_ok);
        history_block b;
        const char *why = "";
        ck_assert_int_eq(ledger_history_block_decode(&k, &v, &b, &why), TALLY_ok);
        ck_assert_uint_eq(b.count, HISTORY_TAIL_MAX);
        for (uint32_t i = 0; i < HISTORY_TAIL_MAX; i++)
            ck_assert_uint_eq(b.seqs[i], seqs_applied[i]);
        uint64_t seqs[4];
        uint32_t n;
        ck_assert_int_eq(ledger_history_seqs(&t, account, false, 0, seqs, 2, &n), TALLY_ok);
        ck_assert(n == 2 && seqs[0] == first.first_seq && seqs[1] == second.first_seq);
        ck_assert_int_eq(ledger_history_seqs(&t, account, true, 0, seqs, 4, &n), TALLY_ok);
        ck_assert(n == 4 && seqs[0] == seqs_applied[HISTORY_TAIL_MAX - 1]);
        ck_assert_int_eq(ledger_history_seqs(&t, account, true, second.first_seq, seqs, 4, &n),
                         TALLY_ok);
        ck_assert(n == 1 && seqs[0] == first.first_seq);
        ck_assert_int_eq(ledger_history_seqs(&t, account, false, first.first_seq, seqs, 1, &n),
                         TALLY_ok);
        ck_assert(n == 1 && seqs[0] == second.first_seq);
    }
    store_txn_abort(&t);
    ck_assert_uint_eq(test_history_entries(&ts), 2 * HISTORY_TAIL_MAX);
    /* An entry as older stores wrote it (the transfer id as its value),
     * below the block, is read the same; tally-recon finds one naming
     * another transfer. */
    ck_assert_int_eq(store_txn_begin(ts.st, NULL, false, &t), TALLY_ok);
    ck_assert_int_eq(ledger_history_del(&t, 1, first.first_seq), TALLY_ok);
    uint8_t key[16];
    ledger_history_key(1, first.first_seq, key);
    tally_id128 id = test_id(11);
    ck_assert_int_eq(store_put(&t, STORE_DB_HISTORY, key, 16, id.bytes, 16, 0), TALLY_ok);
    ck_assert_int_eq(store_txn_commit(&t), TALLY_ok);
    test_assert_invariants(&ts);
    ck_assert_int_eq(store_txn_begin(ts.st, NULL, false, &t), TALLY_ok);
    id = test_id(13);
    ck_assert_int_eq(store_put(&t, STORE_DB_HISTORY, key, 16, id.bytes, 16, 0), TALLY_ok);
    ck_assert_int_eq(store_txn_commit(&t), TALLY_ok);
    ck_assert_uint_gt(test_invariant_findings(&ts, "history"), 0);
    ck_assert_int_eq(store_txn_begin(ts.st, NULL, false, &t), TALLY_ok);
    ck_assert_int_eq(ledger_history_del(&t, 1, first.first_seq), TALLY_ok);
    ck_assert_int_eq(ledger_history_del(&t, 1, first.first_seq), TALLY_not_found);
    ck_assert_int_eq(ledger_history_put(&t, 1, first.first_seq), TALLY_ok);
    ck_assert_int_eq(store_txn_commit(&t), TALLY_ok);
    test_finish(&ts);
}
END_TEST

/* Transfer records are format 3 (varints, with user data): a typical
 * transfer takes under 36 bytes; every field round-trips at its extremes;
 * format 2 (no user data) and format 1's fixed 86 bytes still decode;
 * malformed records are corrupt. */
START_TEST(test_transfer_record_formats)
{
    test_store ts;
    open_pair(&ts);
    ledger_command cmd = test_cmd_transfer(12, 1, 2, 250);
    ck_assert_int_eq(test_apply(&ts, "svc", "pay-12", &cmd).code, TALLY_ok);
    tally_id128 id = test_id(12);
    store_txn t;
    ck_assert_int_eq(store_txn_begin(ts.st, NULL, true, &t), TALLY_ok);
    MDB_val v;
    ck_assert_int_eq(store_get(&t, STORE_DB_TRANSFERS, id.bytes, 16, &v), TALLY_ok);
    ck_assert_uint_eq(((const uint8_t *)v.mv_data)[0], 3);
    ck_assert_uint_lt(v.mv_size, 36);
    store_txn_abort(&t);
    ledger_transfer_record stored = test_transfer(&ts, 12);
    test_finish(&ts);

    /* Extremes round-trip. */
    ledger_transfer_record big = stored, back;
    big.debit_account_id = UINT64_MAX;
    big.credit_account_id = UINT64_MAX - 1;
    big.amount = INT64_MAX;
    big.ledger = UINT32_MAX;
    big.code = UINT16_MAX;
    big.flags = LEDGER_TRANSFER_PENDING;
    big.state = LEDGER_TRANSFER_HOLD_POSTED;
    big.timeout_s = UINT32_MAX;
    big.expires_at_ms = INT64_MAX;
    big.posted_amount = INT64_MAX;
    big.version = 2;
    big.created_seq = UINT64_MAX;
    big.resolved_seq = UINT64_MAX;
    big.created_ms = INT64_MAX;
    memset(big.user_data.user_data_128.bytes, 0xff, 16);
    big.user_data.user_data_64 = UINT64_MAX;
    big.user_data.user_data_32 = UINT32_MAX;
    big.reversed_amount = INT64_MAX; /* all it posted */
    memset(big.reverses.bytes, 0xff, 16);
    uint8_t rec[LEDGER_TRANSFER_RECORD_BYTES_MAX];
    size_t n = ledger_transfer_encode(&big, rec);
    ck_assert_uint_le(n, LEDGER_TRANSFER_RECORD_BYTES_MAX);
    ck_assert_int_eq(ledger_transfer_decode(&id, rec, n, &back), TALLY_ok);
    assert_transfers_equal(&big, &back);
    /* A trailing byte, a truncation, an unknown format: corrupt. */
    uint8_t longer[LEDGER_TRANSFER_RECORD_BYTES_MAX + 1];
    memcpy(longer, rec, n);
    longer[n] = 0;
    ck_assert_int_eq(ledger_transfer_decode(&id, longer, n + 1, &back), TALLY_corrupt_record);
    ck_assert_int_eq(ledger_transfer_decode(&id, rec, n - 1, &back), TALLY_corrupt_record);
    rec[0] = 4;
    ck_assert_int_eq(ledger_transfer_decode(&id, rec, n, &back), TALLY_corrupt_record);
    /* user_data_32 beyond 32 bits */
    big.user_data.user_data_32 = 0;
    big.reversed_amount = 0;
    memset(big.reverses.bytes, 0, 16);
    n = ledger_transfer_encode(&big, rec); /* ends with user_data_32 0, then the reversal's 0 0 0 */
    uint8_t wide32[LEDGER_TRANSFER_RECORD_BYTES_MAX + 8];
    memcpy(wide32, rec, n - 4);
    n = n - 4 + put_uvarint(wide32 + n - 4, UINT64_C(1) << 32);
    memset(wide32 + n, 0, 3);
    n += 3;
    ck_assert_int_eq(ledger_transfer_decode(&id, wide32, n, &back), TALLY_corrupt_record);

    /* Format 2 (no user data): the first 14 fields. */
    n = ledger_transfer_encode(&stored, rec);
    {
        uint8_t v2[LEDGER_TRANSFER_RECORD_BYTES_MAX];
        size_t l2 = 1;
        const uint8_t *q2 = rec + 1;
        v2[0] = 2;
        for (int i = 0; i < 14; i++) {
            uint64_t x;
            ck_assert(get_uvarint(&q2, rec + n, &x));
            l2 += put_uvarint(v2 + l2, x);
        }
        ck_assert_int_eq(ledger_transfer_decode(&id, v2, l2, &back), TALLY_ok);
        assert_transfers_equal(&stored, &back);
        ck_assert(!ledger_user_data_is_set(&back.user_data));
    }

    /* A field beyond its range (ledger 2^32) and a non-minimal varint. */
    n = ledger_transfer_encode(&stored, rec);
    uint8_t wide[LEDGER_TRANSFER_RECORD_BYTES_MAX + 8];
    size_t w = 0;
    const uint8_t *q = rec + 1;
    wide[w++] = 2;
    for (int i = 0; i < 14; i++) {
        uint64_t x;
        ck_assert(get_uvarint(&q, rec + n, &x));
        w += put_uvarint(wide + w, i == 3 ? UINT64_C(1) << 32 : x);
    }
    ck_assert_int_eq(ledger_transfer_decode(&id, wide, w, &back), TALLY_corrupt_record);
    uint8_t padded[LEDGER_TRANSFER_RECORD_BYTES_MAX + 1];
    padded[0] = 3;
    padded[1] = (uint8_t)(rec[1] | 0x80); /* debit 1 as 0x81 0x00 */
    padded[2] = 0;
    memcpy(padded + 3, rec + 2, n - 2);
    ck_assert_uint_eq(rec[1], 1);
    ck_assert_int_eq(ledger_transfer_decode(&id, padded, n + 1, &back), TALLY_corrupt_record);

    /* Format 1, as stores before December 2026 hold it. */
    uint8_t v1[86] = {1};
    put_u64_be(v1 + 1, stored.debit_account_id);
    put_u64_be(v1 + 9, stored.credit_account_id);
    put_u64_be(v1 + 17, (uint64_t)stored.amount);
    put_u32_be(v1 + 25, stored.ledger);
    put_u16_be(v1 + 29, stored.code);
    put_u16_be(v1 + 31, stored.flags);
    v1[33] = stored.state;
    put_u32_be(v1 + 34, stored.timeout_s);
    put_u64_be(v1 + 38, (uint64_t)stored.expires_at_ms);
    put_u64_be(v1 + 46, (uint64_t)stored.posted_amount);
    put_u64_be(v1 + 54, stored.version);
    put_u64_be(v1 + 62, stored.created_seq);
    put_u64_be(v1 + 70, stored.resolved_seq);
    put_u64_be(v1 + 78, (uint64_t)stored.created_ms);
    ck_assert_int_eq(ledger_transfer_decode(&id, v1, sizeof(v1), &back), TALLY_ok);
    assert_transfers_equal(&stored, &back);
    ck_assert_int_eq(ledger_transfer_decode(&id, v1, sizeof(v1) - 1, &back), TALLY_corrupt_record);
}
END_TEST

START_TEST(test_transfers_accumulate)
{
    test_store ts;
    open_pair(&ts);
    open_account(&ts, 3, 1, 0);
    uint64_t head = test_head(&ts).seq;
    ledger_command a = test_cmd_transfer(1, 1, 2, 100);
    ledger_command b = test_cmd_transfer(2, 1, 2, 50);
    ledger_command c = test_cmd_transfer(3, 2, 3, 30);
    test_apply_ok(&ts, &a);
    test_apply_ok(&ts, &b);
    test_apply_ok(&ts, &c);
    ck_assert_uint_eq(test_head(&ts).seq, head + 3);
    test_assert_balances(&ts, 1, 150, 0, 0, 0);
    test_assert_balances(&ts, 2, 30, 150, 0, 0);
    test_assert_balances(&ts, 3, 0, 30, 0, 0);
    ck_assert_uint_eq(test_account(&ts, 1).version, 3);
    ck_assert_uint_eq(test_account(&ts, 2).version, 4);
    ck_assert_uint_eq(test_account(&ts, 3).version, 2);
    test_finish(&ts);
}
END_TEST

START_TEST(test_transfer_amount_max)
{
    test_store ts;
    open_pair(&ts);
    ledger_command cmd = test_cmd_transfer(1, 1, 2, TALLY_AMOUNT_MAX);
    test_apply_ok(&ts, &cmd);
    test_assert_balances(&ts, 1, TALLY_AMOUNT_MAX, 0, 0, 0);
    test_assert_balances(&ts, 2, 0, TALLY_AMOUNT_MAX, 0, 0);
    test_finish(&ts);
}
END_TEST


START_TEST(test_transfer_event_snapshots)
{
    test_store ts;
    open_pair(&ts);
    ledger_command first = test_cmd_transfer(1, 2, 1, 7);
    test_apply_ok(&ts, &first);
    ledger_command cmd = test_cmd_transfer(2, 1, 2, 100);
    test_apply_ok(&ts, &cmd);

    ledger_transfer_record r = test_transfer(&ts, 2);
    test_transfer_event ev;
    memset(&ev, 0, sizeof(ev));
    ev = test_read_transfer_event(&ts, r.created_seq);
    ck_assert_str_eq(ev.type, "transfer.created");
    ck_assert_int_eq(ev.entity_kind, LOG_ENTITY_TRANSFER);
    tally_id128 id = test_id(2);
    ck_assert_mem_eq(ev.entity_transfer_id.bytes, id.bytes, 16);
    ck_assert_uint_eq(ev.entity_version, 1);
    ck_assert(ev.has_causation);
    ck_assert_int_eq(ev.transfer_rc, TALLY_ok);
    ck_assert_int_eq(ev.debit_rc, TALLY_ok);
    ck_assert_int_eq(ev.credit_rc, TALLY_ok);
    assert_transfers_equal(&ev.transfer, &r);
    ledger_account debit = test_account(&ts, 1), credit = test_account(&ts, 2);
    assert_accounts_equal(&ev.debit, &debit);
    assert_accounts_equal(&ev.credit, &credit);
    ck_assert_int_eq(ev.debit.debits_posted, 100);
    ck_assert_int_eq(ev.debit.credits_posted, 7);
    test_finish(&ts);
}
END_TEST

/* ---- invalid commands ---- */

START_TEST(test_same_account)
{
    test_store ts;
    open_pair(&ts);
    ledger_command cmd = test_cmd_transfer(1, 1, 1, 10);
    assert_rejected(&ts, &cmd, TALLY_accounts_must_be_different);
    test_finish(&ts);
}
END_TEST

START_TEST(test_amount_zero)
{
    test_store ts;
    open_pair(&ts);
    ledger_command cmd = test_cmd_transfer(1, 1, 2, 0);
    assert_rejected(&ts, &cmd, TALLY_amount_must_not_be_zero);
    test_finish(&ts);
}
END_TEST

START_TEST(test_amount_negative)
{
    test_store ts;
    open_pair(&ts);
    ledger_command minus_one = test_cmd_transfer(1, 1, 2, -1);
    assert_rejected(&ts, &minus_one, TALLY_amount_must_not_be_negative);
    ledger_command min = test_cmd_transfer(1, 1, 2, INT64_MIN);
    assert_rejected(&ts, &min, TALLY_amount_must_not_be_negative);
    test_finish(&ts);
}
END_TEST

START_TEST(test_zero_fields)
{
    test_store ts;
    open_pair(&ts);
    ledger_command id = test_cmd_transfer(0, 1, 2, 10);
    assert_rejected(&ts, &id, TALLY_id_must_not_be_zero);
    ledger_command debit = test_cmd_transfer(1, 0, 2, 10);
    assert_rejected(&ts, &debit, TALLY_debit_account_id_must_not_be_zero);
    ledger_command credit = test_cmd_transfer(1, 1, 0, 10);
    assert_rejected(&ts, &credit, TALLY_credit_account_id_must_not_be_zero);
    ledger_command ledger = test_cmd_transfer(1, 1, 2, 10);
    ledger.u.transfer.ledger = 0;
    assert_rejected(&ts, &ledger, TALLY_ledger_must_not_be_zero);
    ledger_command code = test_cmd_transfer(1, 1, 2, 10);
    code.u.transfer.code = 0;
    assert_rejected(&ts, &code, TALLY_code_must_not_be_zero);
    test_finish(&ts);
}
END_TEST

START_TEST(test_reserved_transfer_flag)
{
    test_store ts;
    open_pair(&ts);
    ledger_command cmd = test_cmd_transfer(1, 1, 2, 10);
    cmd.u.transfer.flags = 1u << 6; /* the first bit after imported */
    assert_rejected(&ts, &cmd, TALLY_reserved_flag);
    test_finish(&ts);
}
END_TEST

START_TEST(test_timeout_on_single_phase)
{
    test_store ts;
    open_pair(&ts);
    ledger_command cmd = test_cmd_transfer(1, 1, 2, 10);
    cmd.u.transfer.timeout_s = 60;
    assert_rejected(&ts, &cmd, TALLY_timeout_reserved_for_pending_transfer);
    test_finish(&ts);
}
END_TEST

START_TEST(test_timeout_too_large)
{
    test_store ts;
    open_pair(&ts);
    ledger_command over = test_cmd_hold(1, 1, 2, 10, TALLY_HOLD_TIMEOUT_S_MAX + 1);
    assert_rejected(&ts, &over, TALLY_timeout_too_large);
    ledger_command huge = test_cmd_hold(1, 1, 2, 10, UINT32_MAX);
    assert_rejected(&ts, &huge, TALLY_timeout_too_large);

    ledger_command max = test_cmd_hold(1, 1, 2, 10, TALLY_HOLD_TIMEOUT_S_MAX);
    test_apply_ok(&ts, &max);
    ledger_transfer_record r = test_transfer(&ts, 1);
    ck_assert_int_eq(r.expires_at_ms,
                     TEST_NOW_MS + (int64_t)TALLY_HOLD_TIMEOUT_S_MAX * 1000);
    test_finish(&ts);
}
END_TEST

/* ---- accounts ---- */

START_TEST(test_unknown_accounts)
{
    test_store ts;
    open_pair(&ts);
    ledger_command debit = test_cmd_transfer(1, 5, 2, 10);
    assert_rejected(&ts, &debit, TALLY_debit_account_not_found);
    /* each attempt with an id of its own: a failed id stays failed */
    ledger_command credit = test_cmd_transfer(2, 1, 5, 10);
    assert_rejected(&ts, &credit, TALLY_credit_account_not_found);
    ledger_command both = test_cmd_transfer(3, 5, 6, 10);
    assert_rejected(&ts, &both, TALLY_debit_account_not_found);
    test_finish(&ts);
}
END_TEST

START_TEST(test_accounts_on_different_ledgers)
{
    test_store ts;
    open_pair(&ts);
    open_account(&ts, 3, 2, 0);
    ledger_command cmd = test_cmd_transfer(1, 1, 3, 10);
    assert_rejected(&ts, &cmd, TALLY_accounts_must_have_the_same_ledger);
    ledger_command reverse = test_cmd_transfer(2, 3, 1, 10);
    reverse.u.transfer.ledger = 2;
    assert_rejected(&ts, &reverse, TALLY_accounts_must_have_the_same_ledger);
    test_finish(&ts);
}
END_TEST

START_TEST(test_transfer_ledger_differs_from_accounts)
{
    test_store ts;
    open_pair(&ts);
    ledger_command cmd = test_cmd_transfer(1, 1, 2, 10);
    cmd.u.transfer.ledger = 2;
    assert_rejected(&ts, &cmd, TALLY_transfer_must_have_the_same_ledger_as_accounts);
    test_finish(&ts);
}
END_TEST

START_TEST(test_transfer_on_other_ledger)
{
    test_store ts;
    test_store_open(&ts);
    open_account(&ts, 3, 5, 0);
    open_account(&ts, 4, 5, 0);
    ledger_command cmd = test_cmd_transfer(1, 3, 4, 10);
    cmd.u.transfer.ledger = 5;
    test_apply_ok(&ts, &cmd);
    test_assert_balances(&ts, 3, 10, 0, 0, 0);
    test_assert_balances(&ts, 4, 0, 10, 0, 0);
    test_finish(&ts);
}
END_TEST

/* ---- transfer ids are unique ---- */

/* Accounts 1, 2, 3 on ledger 1 and the original transfer stored. */
static void open_with_transfer(test_store *ts, const ledger_command *original)
{
    open_pair(ts);
    open_account(ts, 3, 1, 0);
    test_apply_ok(ts, original);
}

START_TEST(test_duplicate_identical_exists)
{
    test_store ts;
    ledger_command original = test_cmd_transfer(9, 1, 2, 100);
    open_with_transfer(&ts, &original);
    /* Another consumer with another key: the transfer id alone decides. */
    assert_rejected(&ts, &original, TALLY_exists);
    ledger_outcome out = test_apply(&ts, "someone-else", "their-key", &original);
    ck_assert_int_eq(out.code, TALLY_exists);
    test_assert_balances(&ts, 1, 100, 0, 0, 0);
    test_assert_balances(&ts, 2, 0, 100, 0, 0);
    test_finish(&ts);
}
END_TEST

START_TEST(test_duplicate_with_different_fields)
{
    test_store ts;
    ledger_command original = test_cmd_transfer(9, 1, 2, 100);
    open_with_transfer(&ts, &original);

    ledger_command amount = original;
    amount.u.transfer.amount = 101;
    assert_rejected(&ts, &amount, TALLY_exists_with_different_amount);
    ledger_command debit = original;
    debit.u.transfer.debit_account_id = 3;
    assert_rejected(&ts, &debit, TALLY_exists_with_different_debit_account_id);
    ledger_command credit = original;
    credit.u.transfer.credit_account_id = 3;
    assert_rejected(&ts, &credit, TALLY_exists_with_different_credit_account_id);
    ledger_command code = original;
    code.u.transfer.code = 2;
    assert_rejected(&ts, &code, TALLY_exists_with_different_code);
    ledger_command flags = original;
    flags.u.transfer.flags = LEDGER_TRANSFER_PENDING;
    assert_rejected(&ts, &flags, TALLY_exists_with_different_flags);
    ledger_command ledger = original;
    ledger.u.transfer.ledger = 2;
    assert_rejected(&ts, &ledger, TALLY_exists_with_different_ledger);
    test_finish(&ts);
}
END_TEST

/* User data: stored with the transfer, in its event, and compared on a
 * duplicate after every other field (TigerBeetle's order). */
START_TEST(test_transfer_keeps_user_data)
{
    test_store ts;
    ledger_command original = test_cmd_transfer(9, 1, 2, 100);
    original.u.transfer.user_data.user_data_128.bytes[0] = 0x5a;
    original.u.transfer.user_data.user_data_64 = 12345;
    original.u.transfer.user_data.user_data_32 = UINT32_MAX;
    open_with_transfer(&ts, &original);
    ledger_transfer_record r = test_transfer(&ts, 9);
    ck_assert_uint_eq(r.user_data.user_data_128.bytes[0], 0x5a);
    ck_assert_uint_eq(r.user_data.user_data_64, 12345);
    ck_assert_uint_eq(r.user_data.user_data_32, UINT32_MAX);
    assert_rejected(&ts, &original, TALLY_exists);
    ledger_command u128 = original;
    u128.u.transfer.user_data.user_data_128.bytes[0] = 0;
    assert_rejected(&ts, &u128, TALLY_exists_with_different_user_data_128);
    ledger_command u64 = original;
    u64.u.transfer.user_data.user_data_64 = 0;
    assert_rejected(&ts, &u64, TALLY_exists_with_different_user_data_64);
    ledger_command u32 = original;
    u32.u.transfer.user_data.user_data_32 = 1;
    assert_rejected(&ts, &u32, TALLY_exists_with_different_user_data_32);
    ledger_command amount = u32;
    amount.u.transfer.amount = 5;
    assert_rejected(&ts, &amount, TALLY_exists_with_different_amount);
    test_finish(&ts);
}
END_TEST

/* ---- reversals (transfer_reverse) ---- */

static ledger_command reverse_cmd(uint64_t tid, uint64_t reverses, int64_t amount)
{
    ledger_command c = {.kind = LEDGER_REVERSE};
    c.u.reverse.id = test_id(tid);
    c.u.reverse.reverses = test_id(reverses);
    c.u.reverse.amount = amount;
    c.u.reverse.amount_given = amount != 0;
    return c;
}

/* In full by default: the opposite transfer, linked both ways; then
 * nothing is left to reverse. */
START_TEST(test_reverse_in_full)
{
    test_store ts;
    ledger_command pay = test_cmd_transfer(9, 1, 2, 100);
    open_with_transfer(&ts, &pay);
    ledger_command rev = reverse_cmd(20, 9, 0);
    ledger_outcome out = test_apply(&ts, "svc", "rev-20", &rev);
    ck_assert_int_eq(out.code, TALLY_ok);
    ck_assert_uint_eq(out.event_count, 1);
    test_assert_balances(&ts, 1, 100, 100, 0, 0);
    test_assert_balances(&ts, 2, 100, 100, 0, 0);
    ledger_transfer_record r = test_transfer(&ts, 20), o = test_transfer(&ts, 9);
    ck_assert_uint_eq(r.debit_account_id, 2);
    ck_assert_uint_eq(r.credit_account_id, 1);
    ck_assert_int_eq(r.amount, 100);
    ck_assert_uint_eq(r.code, o.code);
    ck_assert_mem_eq(r.reverses.bytes, o.id.bytes, 16);
    ck_assert_int_eq(o.reversed_amount, 100);
    ck_assert_int_eq(ledger_transfer_unreversed(&o), 0);
    /* The same key again replays; the same reversal under another key is
     * exists; a new one finds nothing left. */
    ck_assert(test_apply(&ts, "svc", "rev-20", &rev).replayed);
    assert_rejected(&ts, &rev, TALLY_exists);
    ledger_command other = reverse_cmd(20, 10, 0);
    assert_rejected(&ts, &other, TALLY_exists_with_different_reverses);
    ledger_command more = reverse_cmd(21, 9, 1);
    assert_rejected(&ts, &more, TALLY_exceeds_unreversed_amount);
    /* The event is a transfer.created of the reversal, naming what it reverses. */
    test_transfer_event ev = test_read_transfer_event(&ts, r.created_seq);
    ck_assert_mem_eq(ev.transfer.reverses.bytes, o.id.bytes, 16);
    test_finish(&ts);
}
END_TEST

/* In parts, never beyond what is left; only what was posted, of a hold. */
START_TEST(test_reverse_in_parts_and_holds)
{
    test_store ts;
    ledger_command pay = test_cmd_transfer(9, 1, 2, 100);
    open_with_transfer(&ts, &pay);
    test_setup_ok(&ts, reverse_cmd(20, 9, 30));
    ledger_command too_much = reverse_cmd(21, 9, 71);
    assert_rejected(&ts, &too_much, TALLY_exceeds_unreversed_amount);
    /* a refused reversal's id is failed, as a refused transfer's */
    ledger_command retry = reverse_cmd(21, 9, 70);
    assert_rejected(&ts, &retry, TALLY_id_already_failed);
    test_setup_ok(&ts, reverse_cmd(22, 9, 70));
    ck_assert_int_eq(test_transfer(&ts, 9).reversed_amount, 100);
    ledger_command amount = reverse_cmd(22, 9, 69);
    assert_rejected(&ts, &amount, TALLY_exists_with_different_amount);
    /* holds: pending, then posted in part */
    test_setup_ok(&ts, test_cmd_hold(30, 1, 2, 50, 0));
    ledger_command pending = reverse_cmd(31, 30, 0);
    assert_rejected(&ts, &pending, TALLY_transfer_not_reversible);
    test_setup_ok(&ts, test_cmd_post(30, 20));
    ledger_command beyond = reverse_cmd(32, 30, 21);
    assert_rejected(&ts, &beyond, TALLY_exceeds_unreversed_amount);
    test_setup_ok(&ts, reverse_cmd(33, 30, 0));
    ck_assert_int_eq(test_transfer(&ts, 33).amount, 20);
    ledger_command missing = reverse_cmd(40, 99, 0);
    assert_rejected(&ts, &missing, TALLY_reversed_transfer_not_found);
    ledger_command zero = reverse_cmd(40, 0, 0);
    assert_rejected(&ts, &zero, TALLY_reverses_must_not_be_zero);
    test_finish(&ts);
}
END_TEST

/* tally-recon's reversals check: a reversed_amount that the reversals do
 * not add up to is reported. */
START_TEST(test_recon_checks_reversed_amounts)
{
    test_store ts;
    ledger_command pay = test_cmd_transfer(9, 1, 2, 100);
    open_with_transfer(&ts, &pay);
    test_setup_ok(&ts, reverse_cmd(20, 9, 30));
    ck_assert_uint_eq(test_invariant_findings(&ts, "reversals"), 0);
    ledger_transfer_record o = test_transfer(&ts, 9);
    o.reversed_amount = 40;
    uint8_t rec[LEDGER_TRANSFER_RECORD_BYTES_MAX];
    size_t n = ledger_transfer_encode(&o, rec);
    store_txn t;
    ck_assert_int_eq(store_txn_begin(ts.st, NULL, false, &t), TALLY_ok);
    ck_assert_int_eq(store_put(&t, STORE_DB_TRANSFERS, o.id.bytes, 16, rec, n, 0), TALLY_ok);
    ck_assert_int_eq(store_txn_commit(&t), TALLY_ok);
    ck_assert_uint_eq(test_invariant_findings(&ts, "reversals"), 1);
    test_store_close(&ts);
}
END_TEST

/* A reversal is a transfer: the account's limits hold for it too. */
START_TEST(test_reverse_obeys_limits)
{
    test_store ts;
    test_store_open(&ts);
    test_open_bank_user_merchant(&ts);
    ledger_command buy = test_cmd_transfer(50, TEST_USER, TEST_MERCHANT, 60);
    test_apply_ok(&ts, &buy);
    /* refunding the user: the merchant (no limit) gives back, fine */
    test_setup_ok(&ts, reverse_cmd(51, 50, 10));
    /* reversing the user's funding while the user has spent it: refused */
    ledger_command unfund = reverse_cmd(52, 1, 0);
    assert_rejected(&ts, &unfund, TALLY_exceeds_credits);
    test_finish(&ts);
}
END_TEST

/* ---- balancing and closing transfers (TigerBeetle's flags) ---- */

static ledger_command flagged(uint64_t tid, uint64_t debit, uint64_t credit, int64_t amount,
                              uint16_t flags)
{
    ledger_command c = test_cmd_transfer(tid, debit, credit, amount);
    c.u.transfer.flags = flags;
    return c;
}

/* balancing_debit moves at most what keeps the debit account's debits
 * within its credits, records that amount, and a retry asking at least as
 * much is `exists`. */
START_TEST(test_balancing_debit_moves_what_is_there)
{
    test_store ts;
    test_store_open(&ts);
    test_open_bank_user_merchant(&ts); /* the user holds 100 */
    ledger_command all = flagged(60, TEST_USER, TEST_MERCHANT, 1000,
                                 LEDGER_TRANSFER_BALANCING_DEBIT);
    test_apply_ok(&ts, &all);
    ck_assert_int_eq(test_transfer(&ts, 60).amount, TEST_USER_FUNDS);
    test_assert_balances(&ts, TEST_USER, TEST_USER_FUNDS, TEST_USER_FUNDS, 0, 0);
    assert_rejected(&ts, &all, TALLY_exists);
    ledger_command less = flagged(60, TEST_USER, TEST_MERCHANT, 99,
                                  LEDGER_TRANSFER_BALANCING_DEBIT);
    assert_rejected(&ts, &less, TALLY_exists_with_different_amount);
    /* nothing left to move */
    ledger_command more = flagged(61, TEST_USER, TEST_MERCHANT, 5,
                                  LEDGER_TRANSFER_BALANCING_DEBIT);
    assert_rejected(&ts, &more, TALLY_exceeds_credits);
    /* balancing_credit: at most what keeps the credit account's credits
     * within its debits (the bank's debits are 100, its credits 0) */
    ledger_command back = flagged(62, TEST_MERCHANT, TEST_BANK, 500,
                                  LEDGER_TRANSFER_BALANCING_CREDIT);
    test_apply_ok(&ts, &back);
    ck_assert_int_eq(test_transfer(&ts, 62).amount, TEST_USER_FUNDS);
    /* a balancing hold counts as pending for the next */
    test_setup_ok(&ts, test_cmd_transfer(63, TEST_BANK, TEST_USER, 30));
    test_setup_ok(&ts, flagged(64, TEST_USER, TEST_MERCHANT, 1000,
                               LEDGER_TRANSFER_BALANCING_DEBIT | LEDGER_TRANSFER_PENDING));
    ck_assert_int_eq(test_transfer(&ts, 64).amount, 30);
    ledger_command again = flagged(65, TEST_USER, TEST_MERCHANT, 1,
                                   LEDGER_TRANSFER_BALANCING_DEBIT);
    assert_rejected(&ts, &again, TALLY_exceeds_credits);
    test_finish(&ts);
}
END_TEST

/* A closing hold closes its account to new transfers; voiding it (or its
 * expiry) reopens it, posting it keeps it closed. */
START_TEST(test_closing_transfers_close_and_reopen)
{
    test_store ts;
    open_pair(&ts);
    open_account(&ts, 3, 1, 0);
    ledger_command single = flagged(70, 1, 2, 1, LEDGER_TRANSFER_CLOSING_DEBIT);
    assert_rejected(&ts, &single, TALLY_closing_transfer_must_be_pending);
    test_setup_ok(&ts, flagged(71, 1, 2, 1,
                               LEDGER_TRANSFER_CLOSING_DEBIT | LEDGER_TRANSFER_PENDING));
    ck_assert(test_account(&ts, 1).flags & LEDGER_ACCOUNT_CLOSED);
    ck_assert(!(test_account(&ts, 2).flags & LEDGER_ACCOUNT_CLOSED));
    ledger_command from = test_cmd_transfer(72, 1, 3, 5);
    assert_rejected(&ts, &from, TALLY_debit_account_already_closed);
    ledger_command to = test_cmd_transfer(76, 3, 1, 5);
    assert_rejected(&ts, &to, TALLY_credit_account_already_closed);
    test_setup_ok(&ts, test_cmd_void(71));
    ck_assert(!(test_account(&ts, 1).flags & LEDGER_ACCOUNT_CLOSED));
    test_setup_ok(&ts, test_cmd_transfer(77, 1, 3, 5));
    /* closing the credit side, posted: stays closed */
    test_setup_ok(&ts, flagged(73, 3, 2, 1,
                               LEDGER_TRANSFER_CLOSING_CREDIT | LEDGER_TRANSFER_PENDING));
    test_setup_ok(&ts, test_cmd_post(73, 0));
    ck_assert(test_account(&ts, 2).flags & LEDGER_ACCOUNT_CLOSED);
    ledger_command into = test_cmd_transfer(74, 1, 2, 1);
    assert_rejected(&ts, &into, TALLY_credit_account_already_closed);
    /* an expiring closing hold reopens when it expires */
    ledger_command timed = flagged(75, 3, 1, 1,
                                   LEDGER_TRANSFER_CLOSING_DEBIT | LEDGER_TRANSFER_PENDING);
    timed.u.transfer.timeout_s = 1;
    test_setup_ok(&ts, timed);
    ck_assert(test_account(&ts, 3).flags & LEDGER_ACCOUNT_CLOSED);
    ts.now_ms += 2000;
    ck_assert_uint_eq(test_sweep(&ts), 1);
    ck_assert(!(test_account(&ts, 3).flags & LEDGER_ACCOUNT_CLOSED));
    /* account_open may not set the flag itself */
    ledger_command open = test_cmd_open(9, 1, LEDGER_ACCOUNT_CLOSED);
    ck_assert_int_eq(test_code(&ts, &open), TALLY_reserved_flag);
    test_finish(&ts);
}
END_TEST

START_TEST(test_duplicate_with_unknown_accounts_is_still_exists)
{
    /* The id is checked first: a clash is reported even for accounts that
     * do not exist. */
    test_store ts;
    ledger_command original = test_cmd_transfer(9, 1, 2, 100);
    open_with_transfer(&ts, &original);
    ledger_command other = test_cmd_transfer(9, 7, 8, 100);
    assert_rejected(&ts, &other, TALLY_exists_with_different_debit_account_id);
    test_finish(&ts);
}
END_TEST

START_TEST(test_duplicate_hold_with_different_timeout)
{
    test_store ts;
    ledger_command original = test_cmd_hold(9, 1, 2, 100, 60);
    open_with_transfer(&ts, &original);
    ledger_command same = original;
    assert_rejected(&ts, &same, TALLY_exists);
    ledger_command timeout = test_cmd_hold(9, 1, 2, 100, 120);
    assert_rejected(&ts, &timeout, TALLY_exists_with_different_timeout);
    ledger_command flags = test_cmd_transfer(9, 1, 2, 100);
    assert_rejected(&ts, &flags, TALLY_exists_with_different_flags);
    test_assert_balances(&ts, 1, 0, 0, 100, 0);
    test_assert_balances(&ts, 2, 0, 0, 0, 100);
    test_finish(&ts);
}
END_TEST

/* The case (issue 16, item 2): transfer 600 fails with
 * exceeds_credits under key k-d; once the account could pay, the same id
 * under key k-f is id_already_failed and stores nothing but its record;
 * k-d still replays the failure; nothing is applied. */
START_TEST(test_failed_transfer_id_stays_failed)
{
    test_store ts;
    test_store_open(&ts);
    open_account(&ts, 1, 1, LEDGER_ACCOUNT_DEBITS_MUST_NOT_EXCEED_CREDITS);
    open_account(&ts, 2, 1, 0);
    ledger_command pay = test_cmd_transfer(600, 1, 2, 100);
    ck_assert_int_eq(test_apply(&ts, "shop", "k-d", &pay).code, TALLY_exceeds_credits);
    ck_assert_uint_eq(test_count(&ts, STORE_DB_FAILED_IDS), 1);
    ledger_command fund = test_cmd_transfer(8, 2, 1, 100);
    test_apply_ok(&ts, &fund);
    test_snapshot before = test_take_snapshot(&ts);
    uint64_t inbox = test_count(&ts, STORE_DB_INBOX);

    ledger_outcome f = test_apply(&ts, "shop", "k-f", &pay);
    ck_assert_str_eq(tally_strerror(f.code), "id_already_failed");
    ck_assert(!f.replayed && f.stored);
    ck_assert_uint_eq(f.event_count, 0);
    ck_assert_uint_eq(f.original_seq, 0); /* the failed attempt caused no event */
    test_assert_unchanged(&ts, &before);
    ck_assert_uint_eq(test_count(&ts, STORE_DB_INBOX), inbox + 1);
    ck_assert_uint_eq(test_count(&ts, STORE_DB_FAILED_IDS), 1);
    ck_assert(!test_transfer_exists(&ts, 600));

    ledger_outcome d = test_apply(&ts, "shop", "k-d", &pay);
    ck_assert(d.replayed);
    ck_assert_str_eq(tally_strerror(d.code), "exceeds_credits");
    ck_assert(test_apply(&ts, "shop", "k-f", &pay).replayed);
    /* the id is checked before the accounts: any transfer with it fails so */
    ledger_command other = test_cmd_transfer(600, 7, 9, 1);
    ck_assert_str_eq(tally_strerror(test_code(&ts, &other)), "id_already_failed");
    test_assert_unchanged(&ts, &before);
    test_assert_balances(&ts, 1, 0, 100, 0, 0);
    test_finish(&ts);
}
END_TEST

START_TEST(test_invalid_transfer_id_is_free)
{
    /* A validation error says the command itself is wrong: it does not
     * depend on the store, and the id stays free (as in TigerBeetle). */
    test_store ts;
    open_pair(&ts);
    ledger_command zero = test_cmd_transfer(9, 1, 2, 0);
    ck_assert_int_eq(test_code(&ts, &zero), TALLY_amount_must_not_be_zero);
    ck_assert_uint_eq(test_count(&ts, STORE_DB_FAILED_IDS), 0);
    ledger_command pay = test_cmd_transfer(9, 1, 2, 5);
    test_apply_ok(&ts, &pay);
    test_finish(&ts);
}
END_TEST

START_TEST(test_exists_names_the_original_seq)
{
    /* exists and exists_with_different_* carry the seq of the event that
     * created the transfer (or account), stored and replayed with them. */
    test_store ts;
    open_pair(&ts);
    ledger_command first = test_cmd_transfer(9, 1, 2, 5);
    test_apply_ok(&ts, &first);
    uint64_t created = test_transfer(&ts, 9).created_seq;
    ck_assert_uint_eq(created, test_head(&ts).seq);
    ledger_outcome o = test_apply(&ts, "other", "again", &first);
    ck_assert_int_eq(o.code, TALLY_exists);
    ck_assert_uint_eq(o.original_seq, created);
    ledger_command more = test_cmd_transfer(9, 1, 2, 6);
    o = test_apply(&ts, "other", "more", &more);
    ck_assert_int_eq(o.code, TALLY_exists_with_different_amount);
    ck_assert_uint_eq(o.original_seq, created);
    o = test_apply(&ts, "other", "more", &more);
    ck_assert(o.replayed);
    ck_assert_uint_eq(o.original_seq, created);
    ledger_command open = test_cmd_open(2, 1, 0);
    o = test_apply(&ts, "other", "open-2", &open);
    ck_assert_int_eq(o.code, TALLY_exists);
    ck_assert_uint_eq(o.original_seq, test_account(&ts, 2).created_seq);
    /* other rejections carry none */
    ledger_command unknown = test_cmd_transfer(10, 1, 7, 5);
    ck_assert_uint_eq(test_apply(&ts, "other", "unknown", &unknown).original_seq, 0);
    ck_assert_uint_eq(test_count(&ts, STORE_DB_FAILED_IDS), 1);
    test_finish(&ts);
}
END_TEST

/* ---- overflow: never wrap ---- */

START_TEST(test_overflow_posted)
{
    test_store ts;
    ledger_command max = test_cmd_transfer(1, 1, 2, TALLY_AMOUNT_MAX);
    open_with_transfer(&ts, &max);
    ledger_command into_credit = test_cmd_transfer(2, 3, 2, 1);
    assert_rejected(&ts, &into_credit, TALLY_overflows_credits_posted);
    ledger_command from_debit = test_cmd_transfer(3, 1, 3, 1);
    assert_rejected(&ts, &from_debit, TALLY_overflows_debits_posted);
    ledger_command big = test_cmd_transfer(4, 3, 2, TALLY_AMOUNT_MAX);
    assert_rejected(&ts, &big, TALLY_overflows_credits_posted);
    test_assert_balances(&ts, 1, TALLY_AMOUNT_MAX, 0, 0, 0);
    test_assert_balances(&ts, 2, 0, TALLY_AMOUNT_MAX, 0, 0);
    test_assert_balances(&ts, 3, 0, 0, 0, 0);
    test_finish(&ts);
}
END_TEST

START_TEST(test_overflow_pending)
{
    test_store ts;
    ledger_command max = test_cmd_hold(1, 1, 2, TALLY_AMOUNT_MAX, 0);
    open_with_transfer(&ts, &max);
    ledger_command into_credit = test_cmd_hold(2, 3, 2, 1, 0);
    assert_rejected(&ts, &into_credit, TALLY_overflows_credits_pending);
    ledger_command from_debit = test_cmd_hold(3, 1, 3, 1, 0);
    assert_rejected(&ts, &from_debit, TALLY_overflows_debits_pending);
    test_assert_balances(&ts, 1, 0, 0, TALLY_AMOUNT_MAX, 0);
    test_assert_balances(&ts, 2, 0, 0, 0, TALLY_AMOUNT_MAX);
    test_finish(&ts);
}
END_TEST

START_TEST(test_overflow_pending_plus_posted)
{
    /* Each balance fits on its own, but pending + posted would not. */
    test_store ts;
    ledger_command max = test_cmd_hold(1, 1, 2, TALLY_AMOUNT_MAX, 0);
    open_with_transfer(&ts, &max);
    ledger_command from_debit = test_cmd_transfer(2, 1, 3, 1);
    assert_rejected(&ts, &from_debit, TALLY_overflows_debits);
    ledger_command into_credit = test_cmd_transfer(3, 3, 2, 1);
    assert_rejected(&ts, &into_credit, TALLY_overflows_credits);
    test_assert_balances(&ts, 1, 0, 0, TALLY_AMOUNT_MAX, 0);
    test_assert_balances(&ts, 2, 0, 0, 0, TALLY_AMOUNT_MAX);
    test_assert_balances(&ts, 3, 0, 0, 0, 0);
    test_finish(&ts);
}
END_TEST

START_TEST(test_overflow_posted_plus_pending)
{
    test_store ts;
    ledger_command most = test_cmd_transfer(1, 1, 2, TALLY_AMOUNT_MAX - 10);
    open_with_transfer(&ts, &most);
    ledger_command fits = test_cmd_hold(2, 1, 2, 10, 0);
    test_apply_ok(&ts, &fits);
    ledger_command hold = test_cmd_hold(3, 1, 3, 1, 0);
    assert_rejected(&ts, &hold, TALLY_overflows_debits);
    ledger_command hold_in = test_cmd_hold(4, 3, 2, 1, 0);
    assert_rejected(&ts, &hold_in, TALLY_overflows_credits);
    test_assert_balances(&ts, 1, TALLY_AMOUNT_MAX - 10, 0, 10, 0);
    test_assert_balances(&ts, 2, 0, TALLY_AMOUNT_MAX - 10, 0, 10);
    test_finish(&ts);
}
END_TEST

/* ---- account limits ---- */

START_TEST(test_debits_must_not_exceed_credits)
{
    test_store ts;
    test_store_open(&ts);
    open_account(&ts, 1, 1, LEDGER_ACCOUNT_DEBITS_MUST_NOT_EXCEED_CREDITS);
    open_account(&ts, 2, 1, 0);
    ledger_command empty = test_cmd_transfer(1, 1, 2, 1);
    assert_rejected(&ts, &empty, TALLY_exceeds_credits);

    ledger_command fund = test_cmd_transfer(2, 2, 1, 100);
    test_apply_ok(&ts, &fund);
    ledger_command over = test_cmd_transfer(3, 1, 2, 101);
    assert_rejected(&ts, &over, TALLY_exceeds_credits);
    ledger_command exact = test_cmd_transfer(4, 1, 2, 100);
    test_apply_ok(&ts, &exact);
    ledger_command one_more = test_cmd_transfer(5, 1, 2, 1);
    assert_rejected(&ts, &one_more, TALLY_exceeds_credits);
    test_assert_balances(&ts, 1, 100, 100, 0, 0);
    test_finish(&ts);
}
END_TEST

START_TEST(test_credits_must_not_exceed_debits)
{
    test_store ts;
    test_store_open(&ts);
    open_account(&ts, 1, 1, 0);
    open_account(&ts, 2, 1, LEDGER_ACCOUNT_CREDITS_MUST_NOT_EXCEED_DEBITS);
    ledger_command empty = test_cmd_transfer(1, 1, 2, 1);
    assert_rejected(&ts, &empty, TALLY_exceeds_debits);

    ledger_command spend = test_cmd_transfer(2, 2, 1, 50);
    test_apply_ok(&ts, &spend);
    ledger_command over = test_cmd_transfer(3, 1, 2, 51);
    assert_rejected(&ts, &over, TALLY_exceeds_debits);
    ledger_command exact = test_cmd_transfer(4, 1, 2, 50);
    test_apply_ok(&ts, &exact);
    ledger_command one_more = test_cmd_transfer(5, 1, 2, 1);
    assert_rejected(&ts, &one_more, TALLY_exceeds_debits);
    test_assert_balances(&ts, 2, 50, 50, 0, 0);
    test_finish(&ts);
}
END_TEST

START_TEST(test_limit_does_not_bind_other_side)
{
    /* debits_must_not_exceed_credits limits debits only: crediting the
     * account, or debiting its unflagged counterpart, is always fine. */
    test_store ts;
    test_store_open(&ts);
    open_account(&ts, 1, 1, LEDGER_ACCOUNT_DEBITS_MUST_NOT_EXCEED_CREDITS);
    open_account(&ts, 2, 1, LEDGER_ACCOUNT_CREDITS_MUST_NOT_EXCEED_DEBITS);
    open_account(&ts, 3, 1, 0);
    ledger_command credit_1 = test_cmd_transfer(1, 3, 1, 40);
    test_apply_ok(&ts, &credit_1);
    ledger_command debit_2 = test_cmd_transfer(2, 2, 3, 40);
    test_apply_ok(&ts, &debit_2);
    test_assert_balances(&ts, 1, 0, 40, 0, 0);
    test_assert_balances(&ts, 2, 40, 0, 0, 0);
    test_finish(&ts);
}
END_TEST

START_TEST(test_hold_consumes_debit_limit)
{
    test_store ts;
    test_store_open(&ts);
    open_account(&ts, 1, 1, LEDGER_ACCOUNT_DEBITS_MUST_NOT_EXCEED_CREDITS);
    open_account(&ts, 2, 1, 0);
    ledger_command fund = test_cmd_transfer(1, 2, 1, 100);
    test_apply_ok(&ts, &fund);
    ledger_command hold = test_cmd_hold(2, 1, 2, 60, 0);
    test_apply_ok(&ts, &hold);

    ledger_command too_much = test_cmd_transfer(3, 1, 2, 41);
    assert_rejected(&ts, &too_much, TALLY_exceeds_credits);
    ledger_command second_hold = test_cmd_hold(4, 1, 2, 41, 0);
    assert_rejected(&ts, &second_hold, TALLY_exceeds_credits);
    ledger_command rest = test_cmd_transfer(5, 1, 2, 40);
    test_apply_ok(&ts, &rest);
    ledger_command one_more = test_cmd_hold(6, 1, 2, 1, 0);
    assert_rejected(&ts, &one_more, TALLY_exceeds_credits);
    test_assert_balances(&ts, 1, 40, 100, 60, 0);
    test_finish(&ts);
}
END_TEST

START_TEST(test_hold_consumes_credit_limit)
{
    test_store ts;
    test_store_open(&ts);
    open_account(&ts, 1, 1, 0);
    open_account(&ts, 2, 1, LEDGER_ACCOUNT_CREDITS_MUST_NOT_EXCEED_DEBITS);
    ledger_command spend = test_cmd_transfer(1, 2, 1, 100);
    test_apply_ok(&ts, &spend);
    ledger_command hold = test_cmd_hold(2, 1, 2, 60, 0);
    test_apply_ok(&ts, &hold);

    ledger_command too_much = test_cmd_transfer(3, 1, 2, 41);
    assert_rejected(&ts, &too_much, TALLY_exceeds_debits);
    ledger_command rest = test_cmd_transfer(4, 1, 2, 40);
    test_apply_ok(&ts, &rest);
    test_assert_balances(&ts, 2, 100, 40, 0, 60);
    test_finish(&ts);
}
END_TEST

START_TEST(test_pending_credits_do_not_fund_debits)
{
    /* Money held for the account is not its money yet. */
    test_store ts;
    test_store_open(&ts);
    open_account(&ts, 1, 1, LEDGER_ACCOUNT_DEBITS_MUST_NOT_EXCEED_CREDITS);
    open_account(&ts, 2, 1, 0);
    ledger_command incoming = test_cmd_hold(1, 2, 1, 100, 0);
    test_apply_ok(&ts, &incoming);
    ledger_command spend = test_cmd_transfer(2, 1, 2, 1);
    assert_rejected(&ts, &spend, TALLY_exceeds_credits);
    test_finish(&ts);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("transfer");
    TCase *ok = tcase_create("success");
    tcase_add_test(ok, test_transfer_moves_balances);
    tcase_add_test(ok, test_transfer_history_entries_are_keys_only);
    tcase_add_test(ok, test_transfer_record_formats);
    tcase_add_test(ok, test_transfers_accumulate);
    tcase_add_test(ok, test_transfer_amount_max);
    tcase_add_test(ok, test_transfer_event_snapshots);
    tcase_add_test(ok, test_transfer_on_other_ledger);
    suite_add_tcase(s, ok);

    TCase *invalid = tcase_create("invalid");
    tcase_add_test(invalid, test_same_account);
    tcase_add_test(invalid, test_amount_zero);
    tcase_add_test(invalid, test_amount_negative);
    tcase_add_test(invalid, test_zero_fields);
    tcase_add_test(invalid, test_reserved_transfer_flag);
    tcase_add_test(invalid, test_timeout_on_single_phase);
    tcase_add_test(invalid, test_timeout_too_large);
    suite_add_tcase(s, invalid);

    TCase *accounts = tcase_create("accounts");
    tcase_add_test(accounts, test_unknown_accounts);
    tcase_add_test(accounts, test_accounts_on_different_ledgers);
    tcase_add_test(accounts, test_transfer_ledger_differs_from_accounts);
    suite_add_tcase(s, accounts);

    TCase *ids = tcase_create("unique_ids");
    tcase_add_test(ids, test_duplicate_identical_exists);
    tcase_add_test(ids, test_transfer_keeps_user_data);
    tcase_add_test(ids, test_reverse_in_full);
    tcase_add_test(ids, test_reverse_in_parts_and_holds);
    tcase_add_test(ids, test_reverse_obeys_limits);
    tcase_add_test(ids, test_recon_checks_reversed_amounts);
    tcase_add_test(ids, test_balancing_debit_moves_what_is_there);
    tcase_add_test(ids, test_closing_transfers_close_and_reopen);
    tcase_add_test(ids, test_duplicate_with_different_fields);
    tcase_add_test(ids, test_duplicate_with_unknown_accounts_is_still_exists);
    tcase_add_test(ids, test_duplicate_hold_with_different_timeout);
    tcase_add_test(ids, test_failed_transfer_id_stays_failed);
    tcase_add_test(ids, test_invalid_transfer_id_is_free);
    tcase_add_test(ids, test_exists_names_the_original_seq);
    suite_add_tcase(s, ids);

    TCase *overflow = tcase_create("overflow");
    tcase_add_test(overflow, test_overflow_posted);
    tcase_add_test(overflow, test_overflow_pending);
    tcase_add_test(overflow, test_overflow_pending_plus_posted);
    tcase_add_test(overflow, test_overflow_posted_plus_pending);
    suite_add_tcase(s, overflow);

    TCase *limits = tcase_create("limits");
    tcase_add_test(limits, test_debits_must_not_exceed_credits);
    tcase_add_test(limits, test_credits_must_not_exceed_debits);
    tcase_add_test(limits, test_limit_does_not_bind_other_side);
    tcase_add_test(limits, test_hold_consumes_debit_limit);
    tcase_add_test(limits, test_hold_consumes_credit_limit);
    tcase_add_test(limits, test_pending_credits_do_not_fund_debits);
    suite_add_tcase(s, limits);
    return test_run_suite_both_modes(s);
}
