/*
 * transfer.c — double-entry transfers, holds and their resolution.
 *
 * Every command checks everything before its first write, so a rejection
 * leaves nothing to roll back; ledger_apply still runs each command in a
 * nested transaction so that a fault halfway (map full) rolls it back.
 */
#include "ledger/transfer.h"

#include "common/error.h"
#include "common/log_event.h"
#include "common/msgpack_safe.h"
#include "ledger/expiry.h"
#include "ledger/failed_id.h"
#include "ledger/history.h"
#include "ledger/imported.h"
#include "ledger/index.h"

#include <assert.h>
#include <string.h>

#define TRANSFER_RECORD_FORMAT 3

/* The states' numbers are the event format's (log_transfer_state_name). */
const char *ledger_transfer_state_name(uint8_t state)
{
    const char *name = log_transfer_state_name(state);
    return name ? name : "unknown";
}

static bool transfer_is_sane(const ledger_transfer_record *r)
{
    bool pending = r->flags & LEDGER_TRANSFER_PENDING;
    return !tally_id128_is_zero(&r->id) && r->debit_account_id != 0 &&
           r->credit_account_id != 0 && r->debit_account_id != r->credit_account_id &&
           r->amount > 0 && r->ledger != 0 && r->code != 0 &&
           (r->flags & ~LEDGER_TRANSFER_FLAGS_KNOWN) == 0 &&
           (pending ? r->state >= LEDGER_TRANSFER_PENDING_STATE &&
                          r->state <= LEDGER_TRANSFER_HOLD_EXPIRED
                    : r->state == LEDGER_TRANSFER_POSTED) &&
           r->posted_amount >= 0 && r->posted_amount <= r->amount &&
           (r->state == LEDGER_TRANSFER_HOLD_POSTED) == (r->posted_amount > 0) &&
           r->version >= 1 && r->version <= 2 && r->reversed_amount >= 0 &&
           ledger_transfer_unreversed(r) >= 0;
}

int64_t ledger_transfer_unreversed(const ledger_transfer_record *r)
{
    int64_t posted = r->state == LEDGER_TRANSFER_POSTED        ? r->amount
                     : r->state == LEDGER_TRANSFER_HOLD_POSTED ? r->posted_amount
                                                               : 0;
    return posted - r->reversed_amount;
}

/* The fields of a record in their stored order, as unsigned 64-bit
 * values (negative times and amounts are not sane, so never stored). */
#define TRANSFER_FIELDS 21
#define TRANSFER_FIELDS_V2 14 /* formats 1 and 2: up to created_ms */

static void transfer_fields(const ledger_transfer_record *r, uint64_t f[TRANSFER_FIELDS])
{
    const uint64_t v[TRANSFER_FIELDS] = {
        r->debit_account_id,     r->credit_account_id,       (uint64_t)r->amount,
        r->ledger,               r->code,                    r->flags,
        r->state,                r->timeout_s,               (uint64_t)r->expires_at_ms,
        (uint64_t)r->posted_amount, r->version,              r->created_seq,
        r->resolved_seq,         (uint64_t)r->created_ms,
        get_u64_be(r->user_data.user_data_128.bytes),
        get_u64_be(r->user_data.user_data_128.bytes + 8),
        r->user_data.user_data_64, r->user_data.user_data_32, (uint64_t)r->reversed_amount,
        get_u64_be(r->reverses.bytes), get_u64_be(r->reverses.bytes + 8)};
    memcpy(f, v, sizeof(v));
}

/* The fields' widths in format 1, which are also each field's range. */
static const uint8_t transfer_field_bytes[TRANSFER_FIELDS] = {8, 8, 8, 4, 2, 2, 1, 4, 8, 8, 8,
                                                              8, 8, 8, 8, 8, 8, 4, 8, 8, 8};

static bool transfer_set_fields(ledger_transfer_record *r, const uint64_t f[TRANSFER_FIELDS])
{
    if (!fields_fit(f, transfer_field_bytes, TRANSFER_FIELDS))
        return false;
    r->debit_account_id = f[0];
    r->credit_account_id = f[1];
    r->amount = (int64_t)f[2];
    r->ledger = (uint32_t)f[3];
    r->code = (uint16_t)f[4];
    r->flags = (uint16_t)f[5];
    r->state = (uint8_t)f[6];
    r->timeout_s = (uint32_t)f[7];
    r->expires_at_ms = (int64_t)f[8];
    r->posted_amount = (int64_t)f[9];
    r->version = f[10];
    r->created_seq = f[11];
    r->resolved_seq = f[12];
    r->created_ms = (int64_t)f[13];
    put_u64_be(r->user_data.user_data_128.bytes, f[14]);
    put_u64_be(r->user_data.user_data_128.bytes + 8, f[15]);
    r->user_data.user_data_64 = f[16];
    r->user_data.user_data_32 = (uint32_t)f[17];
    r->reversed_amount = (int64_t)f[18];
    put_u64_be(r->reverses.bytes, f[19]);
    put_u64_be(r->reverses.bytes + 8, f[20]);
    return true;
}

size_t ledger_transfer_encode(const ledger_transfer_record *r,
                              uint8_t out[LEDGER_TRANSFER_RECORD_BYTES_MAX])
{
    uint64_t f[TRANSFER_FIELDS];
    transfer_fields(r, f);
    return fields_put_uvarints(out, TRANSFER_RECORD_FORMAT, f, TRANSFER_FIELDS);
}

int ledger_transfer_decode(const tally_id128 *id, const void *bytes, size_t len,
                           ledger_transfer_record *out)
{
    memset(out, 0, sizeof(*out)); /* padding too: records are compared whole */
    const uint8_t *p = bytes;
    uint64_t f[TRANSFER_FIELDS] = {0}; /* formats 1 and 2 end at created_ms */
    if (len < 1 ||
        !(p[0] == 1   ? fields_get_fixed(p, len, transfer_field_bytes, f, TRANSFER_FIELDS_V2)
          : p[0] == 2 ? fields_get_uvarints(p, len, f, TRANSFER_FIELDS_V2)
          : p[0] == 3 ? fields_get_uvarints(p, len, f, TRANSFER_FIELDS)
                      : false) ||
        !transfer_set_fields(out, f))
        return TALLY_corrupt_record;
    out->id = *id;
    return transfer_is_sane(out) ? TALLY_ok : TALLY_corrupt_record;
}

int ledger_transfer_get(store_txn *t, const tally_id128 *id, ledger_transfer_record *out)
{
    MDB_val val;
    int rc = store_get(t, STORE_DB_TRANSFERS, id->bytes, 16, &val);
    if (rc != TALLY_ok)
        return rc;
    return ledger_transfer_decode(id, val.mv_data, val.mv_size, out);
}

static int transfer_put(store_txn *t, const ledger_transfer_record *r)
{
    assert(transfer_is_sane(r));
    uint8_t val[LEDGER_TRANSFER_RECORD_BYTES_MAX];
    size_t len = ledger_transfer_encode(r, val);
    return store_put(t, STORE_DB_TRANSFERS, r->id.bytes, 16, val, len, 0);
}

/* The three user data fields whatever their values (a row with a
 * reversal's fields after them needs their places). */
static int pack_user_data_always(const msgpack_record *m, const ledger_user_data *u)
{
    if (!m->row)
        return ledger_user_data_pack(m, u);
    return msgpack_safe_pack_bin(m->pk, u->user_data_128.bytes, 16) ||
           msgpack_pack_uint64(m->pk, u->user_data_64) ||
           msgpack_pack_uint32(m->pk, u->user_data_32);
}

int ledger_transfer_pack(msgpack_packer *pk, const ledger_transfer_record *r, bool row)
{
    msgpack_record m;
    bool reversal = !tally_id128_is_zero(&r->reverses) || r->reversed_amount != 0;
    /* a row's optional tail: user data (when set or before the reversal's
     * fields), then the reversal's (when set) */
    uint32_t tail = !row || reversal ? 5 : ledger_user_data_fields(&r->user_data, row);
    return msgpack_record_begin(&m, pk, row, 15 + tail) ||
           msgpack_record_key(&m, "id") || msgpack_safe_pack_bin(pk, r->id.bytes, 16) ||
           msgpack_record_key(&m, "debit_account_id") ||
           msgpack_pack_uint64(pk, r->debit_account_id) ||
           msgpack_record_key(&m, "credit_account_id") ||
           msgpack_pack_uint64(pk, r->credit_account_id) ||
           msgpack_record_key(&m, "amount") || msgpack_pack_int64(pk, r->amount) ||
           msgpack_record_key(&m, "ledger") || msgpack_pack_uint32(pk, r->ledger) ||
           msgpack_record_key(&m, "code") || msgpack_pack_uint16(pk, r->code) ||
           msgpack_record_key(&m, "flags") || msgpack_pack_uint16(pk, r->flags) ||
           /* the state: its name in a map, its number in a row */
           msgpack_record_key(&m, "state") ||
           (row ? msgpack_pack_uint8(pk, r->state)
                : msgpack_safe_pack_cstr(pk, ledger_transfer_state_name(r->state))) ||
           msgpack_record_key(&m, "timeout_s") || msgpack_pack_uint32(pk, r->timeout_s) ||
           msgpack_record_key(&m, "expires_at_ms") || msgpack_pack_int64(pk, r->expires_at_ms) ||
           msgpack_record_key(&m, "posted_amount") || msgpack_pack_int64(pk, r->posted_amount) ||
           msgpack_record_key(&m, "version") || msgpack_pack_uint64(pk, r->version) ||
           msgpack_record_key(&m, "created_seq") || msgpack_pack_uint64(pk, r->created_seq) ||
           msgpack_record_key(&m, "resolved_seq") || msgpack_pack_uint64(pk, r->resolved_seq) ||
           msgpack_record_key(&m, "created_ms") || msgpack_pack_int64(pk, r->created_ms) ||
           (tail >= 3 && pack_user_data_always(&m, &r->user_data)) ||
           (tail == 5 && (msgpack_record_key(&m, "reverses") ||
                          msgpack_safe_pack_bin(pk, r->reverses.bytes, 16) ||
                          msgpack_record_key(&m, "reversed_amount") ||
                          msgpack_pack_int64(pk, r->reversed_amount)));
}

/* The state: a name (map) or a number (row), one of ledger_transfer_state. */
static bool unpack_state(const msgpack_object *o, uint8_t *state)
{
    tally_str s;
    uint64_t n;
    for (uint8_t v = LEDGER_TRANSFER_POSTED; v <= LEDGER_TRANSFER_HOLD_EXPIRED; v++) {
        if ((msgpack_safe_get_str(o, &s) &&
             tally_str_equal(s, tally_str_from(ledger_transfer_state_name(v)))) ||
            (msgpack_safe_get_u64(o, &n) && n == v)) {
            *state = v;
            return true;
        }
    }
    return false;
}

int ledger_transfer_unpack(const msgpack_object *o, ledger_transfer_record *out)
{
    uint64_t ledger, code, flags, timeout;
    memset(out, 0, sizeof(*out));
    msgpack_record_reader m = msgpack_record_read(o);
    bool ok = msgpack_safe_get_id128(msgpack_record_next(&m, "id"), &out->id) &&
              msgpack_safe_get_u64(msgpack_record_next(&m, "debit_account_id"),
                                   &out->debit_account_id) &&
              msgpack_safe_get_u64(msgpack_record_next(&m, "credit_account_id"),
                                   &out->credit_account_id) &&
              msgpack_safe_get_i64(msgpack_record_next(&m, "amount"), &out->amount) &&
              msgpack_record_next_u64(&m, "ledger", UINT32_MAX, &ledger) &&
              msgpack_record_next_u64(&m, "code", UINT16_MAX, &code) &&
              msgpack_record_next_u64(&m, "flags", UINT16_MAX, &flags) &&
              unpack_state(msgpack_record_next(&m, "state"), &out->state) &&
              msgpack_record_next_u64(&m, "timeout_s", UINT32_MAX, &timeout) &&
              msgpack_safe_get_i64(msgpack_record_next(&m, "expires_at_ms"),
                                   &out->expires_at_ms) &&
              msgpack_safe_get_i64(msgpack_record_next(&m, "posted_amount"),
                                   &out->posted_amount) &&
              msgpack_safe_get_u64(msgpack_record_next(&m, "version"), &out->version) &&
              msgpack_safe_get_u64(msgpack_record_next(&m, "created_seq"), &out->created_seq) &&
              msgpack_safe_get_u64(msgpack_record_next(&m, "resolved_seq"), &out->resolved_seq) &&
              msgpack_safe_get_i64(msgpack_record_next(&m, "created_ms"), &out->created_ms) &&
              ledger_user_data_unpack(&m, &out->user_data);
    const msgpack_object *reverses = msgpack_record_next_optional(&m, "reverses");
    const msgpack_object *reversed = msgpack_record_next_optional(&m, "reversed_amount");
    ok = ok && (reverses == NULL || msgpack_safe_get_id128(reverses, &out->reverses)) &&
         (reversed == NULL || msgpack_safe_get_i64(reversed, &out->reversed_amount));
    if (!ok)
        return TALLY_corrupt_record;
    out->ledger = (uint32_t)ledger;
    out->code = (uint16_t)code;
    out->flags = (uint16_t)flags;
    out->timeout_s = (uint32_t)timeout;
    return transfer_is_sane(out) ? TALLY_ok : TALLY_corrupt_record;
}

/* Event body: the transfer and both accounts after the change. */
typedef struct transfer_body {
    const ledger_transfer_record *transfer;
    const ledger_account *debit;
    const ledger_account *credit;
} transfer_body;

/* Format 2: [transfer, debit_account, credit_account], each a row. */
static int pack_transfer_body(msgpack_packer *pk, const void *ctx)
{
    const transfer_body *b = ctx;
    return msgpack_pack_array(pk, 3) || ledger_transfer_pack(pk, b->transfer, true) ||
           ledger_account_pack(pk, b->debit, true) || ledger_account_pack(pk, b->credit, true);
}

/* Write the transfer, both accounts, the event and the history entries. */
static int transfer_commit(ledger_ctx *ctx, log_event_type type, ledger_transfer_record *r,
                           ledger_account *debit, ledger_account *credit)
{
    debit->version++;
    credit->version++;
    int rc = ledger_account_put(ctx->txn, debit);
    if (rc == TALLY_ok)
        rc = ledger_account_put(ctx->txn, credit);
    if (rc == TALLY_ok)
        rc = transfer_put(ctx->txn, r);
    if (rc != TALLY_ok)
        return rc;
    transfer_body body = {r, debit, credit};
    log_entity entity = {.kind = LOG_ENTITY_TRANSFER, .transfer_id = r->id};
    rc = ledger_emit(ctx, type, &entity, r->version, pack_transfer_body, &body);
    uint64_t seq = ctx->first_seq + ctx->event_count - 1; /* the event just appended */
    if (rc == TALLY_ok)
        rc = ledger_history_put(ctx->txn, debit->id, seq);
    if (rc == TALLY_ok)
        rc = ledger_history_put(ctx->txn, credit->id, seq);
    return rc;
}

static int compare_existing(const ledger_transfer_record *have, const ledger_transfer *cmd)
{
    if (have->flags != cmd->flags)
        return TALLY_exists_with_different_flags;
    if (have->debit_account_id != cmd->debit_account_id)
        return TALLY_exists_with_different_debit_account_id;
    if (have->credit_account_id != cmd->credit_account_id)
        return TALLY_exists_with_different_credit_account_id;
    /* a balancing transfer records what it moved, at most what was asked */
    bool balancing = cmd->flags & (LEDGER_TRANSFER_BALANCING_DEBIT |
                                   LEDGER_TRANSFER_BALANCING_CREDIT);
    if (balancing ? cmd->amount < have->amount : have->amount != cmd->amount)
        return TALLY_exists_with_different_amount;
    if (have->ledger != cmd->ledger)
        return TALLY_exists_with_different_ledger;
    if (have->code != cmd->code)
        return TALLY_exists_with_different_code;
    if (have->timeout_s != cmd->timeout_s)
        return TALLY_exists_with_different_timeout;
    int rc = ledger_user_data_compare(&have->user_data, &cmd->user_data);
    return rc != TALLY_ok ? rc : TALLY_exists;
}

static bool adds_overflow(int64_t a, int64_t b) { return a > TALLY_AMOUNT_MAX - b; }

/* Balance rules for moving amount from debit to credit. */
static int check_balances(const ledger_account *dr, const ledger_account *cr, int64_t amount,
                          bool pending)
{
    if (pending && adds_overflow(dr->debits_pending, amount))
        return TALLY_overflows_debits_pending;
    if (pending && adds_overflow(cr->credits_pending, amount))
        return TALLY_overflows_credits_pending;
    if (!pending && adds_overflow(dr->debits_posted, amount))
        return TALLY_overflows_debits_posted;
    if (!pending && adds_overflow(cr->credits_posted, amount))
        return TALLY_overflows_credits_posted;
    if (adds_overflow(dr->debits_pending + dr->debits_posted, amount))
        return TALLY_overflows_debits;
    if (adds_overflow(cr->credits_pending + cr->credits_posted, amount))
        return TALLY_overflows_credits;
    if ((dr->flags & LEDGER_ACCOUNT_DEBITS_MUST_NOT_EXCEED_CREDITS) &&
        dr->debits_pending + dr->debits_posted + amount > dr->credits_posted)
        return TALLY_exceeds_credits;
    if ((cr->flags & LEDGER_ACCOUNT_CREDITS_MUST_NOT_EXCEED_DEBITS) &&
        cr->credits_pending + cr->credits_posted + amount > cr->debits_posted)
        return TALLY_exceeds_debits;
    return TALLY_ok;
}

static int load_accounts(store_txn *t, uint64_t debit_id, uint64_t credit_id,
                         ledger_account *dr, ledger_account *cr)
{
    int rc = ledger_account_get(t, debit_id, dr);
    if (rc == TALLY_not_found)
        return TALLY_debit_account_not_found;
    if (rc != TALLY_ok)
        return rc;
    rc = ledger_account_get(t, credit_id, cr);
    if (rc == TALLY_not_found)
        return TALLY_credit_account_not_found;
    return rc;
}

/* The order of the checks (docs/PROTOCOL.md, "Idempotency"): a live
 * transfer with the id (exists, exists_with_different_*), then an id that
 * failed within the dedupe window (id_already_failed), then the accounts,
 * ledgers and balances. */
/* What a transfer moves: its amount, or for a balancing transfer at most
 * what keeps the account's debits (balancing_debit: pending and posted)
 * within its credits posted, and the credits within the debits
 * (balancing_credit), whatever the account's own flags; 0 when nothing
 * can move (TigerBeetle's balancing transfers). */
static int64_t balanced_amount(const ledger_transfer *cmd, const ledger_account *dr,
                               const ledger_account *cr)
{
    int64_t amount = cmd->amount;
    if (cmd->flags & LEDGER_TRANSFER_BALANCING_DEBIT) {
        int64_t room = dr->credits_posted - dr->debits_posted - dr->debits_pending;
        amount = room <= 0 ? 0 : room < amount ? room : amount;
    }
    if (cmd->flags & LEDGER_TRANSFER_BALANCING_CREDIT) {
        int64_t room = cr->debits_posted - cr->credits_posted - cr->credits_pending;
        amount = room <= 0 ? 0 : room < amount ? room : amount;
    }
    return amount;
}

/* An imported transfer's time (TigerBeetle's order): not in the future,
 * past the watermark, after both accounts' creation. */
static int check_imported(ledger_ctx *ctx, const ledger_transfer *cmd, const ledger_account *dr,
                          const ledger_account *cr)
{
    int rc = ledger_imported_check(ctx, cmd->timestamp_ms);
    if (rc != TALLY_ok)
        return rc;
    if (cmd->timestamp_ms <= dr->created_ms)
        return TALLY_imported_event_timestamp_must_postdate_debit_account;
    if (cmd->timestamp_ms <= cr->created_ms)
        return TALLY_imported_event_timestamp_must_postdate_credit_account;
    return TALLY_ok;
}

/* A new transfer: its accounts, ledgers and balances checked, then
 * written with its index entries and event. original: for a reversal, the
 * transfer reversed (its reversed_amount grows by the amount, written
 * with it; the caller checked that much is left), else NULL. */
static int transfer_create(ledger_ctx *ctx, const ledger_transfer *cmd,
                           ledger_transfer_record *original)
{
    ledger_transfer_record r;
    ledger_account dr, cr;
    int rc = load_accounts(ctx->txn, cmd->debit_account_id, cmd->credit_account_id, &dr, &cr);
    if (rc != TALLY_ok)
        return rc;
    if (dr.ledger != cr.ledger)
        return TALLY_accounts_must_have_the_same_ledger;
    if (cmd->ledger != dr.ledger)
        return TALLY_transfer_must_have_the_same_ledger_as_accounts;
    bool imported = cmd->flags & LEDGER_TRANSFER_IMPORTED;
    if (imported && (rc = check_imported(ctx, cmd, &dr, &cr)) != TALLY_ok)
        return rc;
    if (dr.flags & LEDGER_ACCOUNT_CLOSED)
        return TALLY_debit_account_already_closed;
    if (cr.flags & LEDGER_ACCOUNT_CLOSED)
        return TALLY_credit_account_already_closed;
    bool pending = cmd->flags & LEDGER_TRANSFER_PENDING;
    int64_t amount = balanced_amount(cmd, &dr, &cr);
    if (amount == 0) /* a balancing transfer with nothing to move */
        return cmd->flags & LEDGER_TRANSFER_BALANCING_DEBIT ? TALLY_exceeds_credits
                                                            : TALLY_exceeds_debits;
    rc = check_balances(&dr, &cr, amount, pending);
    if (rc != TALLY_ok)
        return rc;
    log_head head;
    rc = log_head_get(ctx->txn, &head);
    if (rc != TALLY_ok)
        return rc;

    memset(&r, 0, sizeof(r));
    r.id = cmd->id;
    r.debit_account_id = cmd->debit_account_id;
    r.credit_account_id = cmd->credit_account_id;
    r.amount = amount;
    r.ledger = cmd->ledger;
    r.code = cmd->code;
    r.flags = cmd->flags;
    r.state = pending ? LEDGER_TRANSFER_PENDING_STATE : LEDGER_TRANSFER_POSTED;
    r.timeout_s = cmd->timeout_s;
    r.expires_at_ms = cmd->timeout_s ? ctx->now_ms + (int64_t)cmd->timeout_s * 1000 : 0;
    r.version = 1;
    r.created_seq = head.seq + 1;
    r.created_ms = imported ? cmd->timestamp_ms : ctx->now_ms;
    r.user_data = cmd->user_data;
    if (cmd->flags & LEDGER_TRANSFER_CLOSING_DEBIT)
        dr.flags |= LEDGER_ACCOUNT_CLOSED;
    if (cmd->flags & LEDGER_TRANSFER_CLOSING_CREDIT)
        cr.flags |= LEDGER_ACCOUNT_CLOSED;
    if (original) {
        r.reverses = original->id;
        original->reversed_amount += cmd->amount;
        rc = transfer_put(ctx->txn, original);
        if (rc != TALLY_ok)
            return rc;
    }
    if (pending) {
        dr.debits_pending += amount;
        cr.credits_pending += amount;
    } else {
        dr.debits_posted += amount;
        cr.credits_posted += amount;
    }
    if (r.expires_at_ms != 0) {
        rc = ledger_expiry_add(ctx->txn, r.expires_at_ms, LEDGER_EXPIRY_HOLD, r.id.bytes, 16);
        if (rc != TALLY_ok)
            return rc;
    }
    ledger_indexed indexed;
    ledger_transfer_indexed(&r, &indexed);
    rc = ledger_index_put(ctx->txn, STORE_DB_TRANSFER_INDEX, &indexed);
    if (rc == TALLY_ok)
        rc = transfer_commit(ctx, LOG_EVENT_TRANSFER_CREATED, &r, &dr, &cr);
    if (rc == TALLY_ok && imported)
        rc = ledger_imported_note(ctx, r.created_ms, r.created_seq);
    return rc;
}

/* Whether id is free for a new transfer: TALLY_ok, or exists (with
 * *have, the transfer there), id_already_failed or a fault. */
static int id_is_free(ledger_ctx *ctx, const tally_id128 *id, ledger_transfer_record *have)
{
    int rc = ledger_transfer_get(ctx->txn, id, have);
    if (rc == TALLY_ok) {
        ctx->original_seq = have->created_seq;
        return TALLY_exists;
    }
    if (rc != TALLY_not_found)
        return rc;
    rc = ledger_failed_id_get(ctx->txn, id, NULL);
    return rc == TALLY_ok ? TALLY_id_already_failed : rc == TALLY_not_found ? TALLY_ok : rc;
}

int ledger_transfer_apply(ledger_ctx *ctx, const ledger_command *command)
{
    const ledger_transfer *cmd = &command->u.transfer;
    ledger_transfer_record have;
    int rc = id_is_free(ctx, &cmd->id, &have);
    if (rc == TALLY_exists)
        return compare_existing(&have, cmd);
    return rc != TALLY_ok ? rc : transfer_create(ctx, cmd, NULL);
}

/* A reversal's id taken already: the same reversal is exists. */
static int compare_existing_reversal(const ledger_transfer_record *have,
                                     const ledger_reverse *cmd)
{
    if (!tally_id128_equal(&have->reverses, &cmd->reverses))
        return TALLY_exists_with_different_reverses;
    if (cmd->amount_given && have->amount != cmd->amount)
        return TALLY_exists_with_different_amount;
    if (cmd->code != 0 && have->code != cmd->code)
        return TALLY_exists_with_different_code;
    int rc = ledger_user_data_compare(&have->user_data, &cmd->user_data);
    return rc != TALLY_ok ? rc : TALLY_exists;
}

/* The order of the checks: the reversal's id (exists...,
 * id_already_failed), the transfer reversed (found, posted, enough left),
 * then those of any transfer (accounts, balances: a reversal may be
 * refused with exceeds_credits when the money moved on). */
int ledger_transfer_reverse_apply(ledger_ctx *ctx, const ledger_command *command)
{
    const ledger_reverse *cmd = &command->u.reverse;
    ledger_transfer_record have, original;
    int rc = id_is_free(ctx, &cmd->id, &have);
    if (rc == TALLY_exists)
        return compare_existing_reversal(&have, cmd);
    if (rc != TALLY_ok)
        return rc;
    rc = ledger_transfer_get(ctx->txn, &cmd->reverses, &original);
    if (rc == TALLY_not_found)
        return TALLY_reversed_transfer_not_found;
    if (rc != TALLY_ok)
        return rc;
    if (original.state != LEDGER_TRANSFER_POSTED &&
        original.state != LEDGER_TRANSFER_HOLD_POSTED)
        return TALLY_transfer_not_reversible;
    int64_t left = ledger_transfer_unreversed(&original);
    int64_t amount = cmd->amount_given ? cmd->amount : left;
    if (left == 0 || amount > left)
        return TALLY_exceeds_unreversed_amount;
    ledger_transfer t = {.id = cmd->id,
                         .debit_account_id = original.credit_account_id,
                         .credit_account_id = original.debit_account_id,
                         .amount = amount,
                         .ledger = original.ledger,
                         .code = cmd->code ? cmd->code : original.code,
                         .user_data = cmd->user_data};
    return transfer_create(ctx, &t, &original);
}

/* Load a hold that can still be resolved now, or say why not. */
static int load_open_hold(ledger_ctx *ctx, const tally_id128 *id, ledger_transfer_record *r)
{
    int rc = ledger_transfer_get(ctx->txn, id, r);
    if (rc == TALLY_not_found)
        return TALLY_pending_transfer_not_found;
    if (rc != TALLY_ok)
        return rc;
    switch (r->state) {
    case LEDGER_TRANSFER_POSTED: return TALLY_pending_transfer_not_pending;
    case LEDGER_TRANSFER_HOLD_POSTED: return TALLY_pending_transfer_already_posted;
    case LEDGER_TRANSFER_HOLD_VOIDED: return TALLY_pending_transfer_already_voided;
    case LEDGER_TRANSFER_HOLD_EXPIRED: return TALLY_pending_transfer_expired;
    default: break;
    }
    /* Due but not swept yet: it is expired all the same. */
    if (r->expires_at_ms != 0 && r->expires_at_ms <= ctx->now_ms)
        return TALLY_pending_transfer_expired;
    return TALLY_ok;
}

/* Release the held amount, post posted_amount of it, resolve the hold. */
static int resolve_hold(ledger_ctx *ctx, ledger_transfer_record *r, uint8_t state,
                        int64_t posted_amount, log_event_type event_type)
{
    ledger_account dr, cr;
    int rc = load_accounts(ctx->txn, r->debit_account_id, r->credit_account_id, &dr, &cr);
    if (rc != TALLY_ok) /* a hold's accounts always exist */
        return ledger_is_fault(rc) ? rc : TALLY_corrupt_record;
    if (dr.debits_pending < r->amount || cr.credits_pending < r->amount)
        return TALLY_corrupt_record;
    log_head head;
    rc = log_head_get(ctx->txn, &head);
    if (rc != TALLY_ok)
        return rc;
    dr.debits_pending -= r->amount;
    cr.credits_pending -= r->amount;
    if (state != LEDGER_TRANSFER_HOLD_POSTED) { /* voided or expired: reopen what it closed */
        if (r->flags & LEDGER_TRANSFER_CLOSING_DEBIT)
            dr.flags &= (uint16_t)~LEDGER_ACCOUNT_CLOSED;
        if (r->flags & LEDGER_TRANSFER_CLOSING_CREDIT)
            cr.flags &= (uint16_t)~LEDGER_ACCOUNT_CLOSED;
    }
    dr.debits_posted += posted_amount; /* fits: it was counted as pending */
    cr.credits_posted += posted_amount;
    if (r->expires_at_ms != 0) {
        rc = ledger_expiry_del(ctx->txn, r->expires_at_ms, LEDGER_EXPIRY_HOLD, r->id.bytes, 16);
        if (rc != TALLY_ok && rc != TALLY_not_found)
            return rc;
    }
    r->state = state;
    r->posted_amount = posted_amount;
    r->version = 2;
    r->resolved_seq = head.seq + 1;
    return transfer_commit(ctx, event_type, r, &dr, &cr);
}

int ledger_hold_post_apply(ledger_ctx *ctx, const ledger_command *command)
{
    const ledger_hold_step *cmd = &command->u.hold;
    ledger_transfer_record r;
    int rc = load_open_hold(ctx, &cmd->pending_id, &r);
    if (rc != TALLY_ok)
        return rc;
    int64_t amount = cmd->amount == 0 ? r.amount : cmd->amount;
    if (amount > r.amount)
        return TALLY_exceeds_pending_transfer_amount;
    return resolve_hold(ctx, &r, LEDGER_TRANSFER_HOLD_POSTED, amount, LOG_EVENT_TRANSFER_POSTED);
}

int ledger_hold_void_apply(ledger_ctx *ctx, const ledger_command *command)
{
    const ledger_hold_step *cmd = &command->u.hold;
    ledger_transfer_record r;
    int rc = load_open_hold(ctx, &cmd->pending_id, &r);
    if (rc != TALLY_ok)
        return rc;
    return resolve_hold(ctx, &r, LEDGER_TRANSFER_HOLD_VOIDED, 0, LOG_EVENT_TRANSFER_VOIDED);
}

int ledger_hold_expire(ledger_ctx *ctx, const tally_id128 *id, bool *expired)
{
    *expired = false;
    ledger_transfer_record r;
    int rc = ledger_transfer_get(ctx->txn, id, &r);
    if (rc == TALLY_not_found)
        return TALLY_ok; /* stale index entry */
    if (rc != TALLY_ok)
        return rc;
    if (r.state != LEDGER_TRANSFER_PENDING_STATE || r.expires_at_ms == 0 ||
        r.expires_at_ms > ctx->now_ms)
        return TALLY_ok;
    rc = resolve_hold(ctx, &r, LEDGER_TRANSFER_HOLD_EXPIRED, 0, LOG_EVENT_TRANSFER_EXPIRED);
    *expired = rc == TALLY_ok;
    return rc;
}

void ledger_transfer_indexed(const ledger_transfer_record *r, ledger_indexed *out)
{
    memset(out, 0, sizeof(*out));
    memcpy(out->id, r->id.bytes, 16);
    out->id_bytes = 16;
    out->ledger = r->ledger;
    out->code = r->code;
    out->user_data = r->user_data;
    out->debit_account_id = r->debit_account_id;
    out->credit_account_id = r->credit_account_id;
    out->created_ms = r->created_ms;
    out->created_seq = r->created_seq;
}
