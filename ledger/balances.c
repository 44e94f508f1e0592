/*
 * balances.c — an account's balances after each entry of its history, by
 * time or seq (balances.h).
 */
#include "ledger/balances.h"

#include "common/error.h"
#include "common/log_event.h"
#include "ledger/account.h"
#include "ledger/history.h"
#include "ledger/transfer.h"
#include "log/log.h"

#include <string.h>

int ledger_balance_entry(store_txn *t, uint64_t account_id, uint64_t seq, ledger_balance *out)
{
    memset(out, 0, sizeof(*out));
    msgpack_unpacked up;
    msgpack_unpacked_init(&up);
    log_event ev;
    int rc = log_event_load(t, seq, &up, &ev);
    ledger_transfer_record tr;
    ledger_account acc;
    if (rc == TALLY_ok &&
        ledger_transfer_unpack(log_event_part(&ev, LOG_PART_TRANSFER), &tr) != TALLY_ok)
        rc = TALLY_corrupt_record;
    if (rc == TALLY_ok) {
        log_body_part side = tr.debit_account_id == account_id    ? LOG_PART_DEBIT_ACCOUNT
                             : tr.credit_account_id == account_id ? LOG_PART_CREDIT_ACCOUNT
                                                                  : LOG_PART_ACCOUNT;
        if (side == LOG_PART_ACCOUNT ||
            ledger_account_unpack(log_event_part(&ev, side), &acc) != TALLY_ok ||
            acc.id != account_id)
            rc = TALLY_corrupt_record;
    }
    if (rc == TALLY_ok) {
        out->seq = seq;
        out->timestamp_ms =
            log_event_type_is(&ev, LOG_EVENT_TRANSFER_CREATED) ? tr.created_ms : ev.time_ms;
        out->debits_pending = acc.debits_pending;
        out->debits_posted = acc.debits_posted;
        out->credits_pending = acc.credits_pending;
        out->credits_posted = acc.credits_posted;
    }
    msgpack_unpacked_destroy(&up);
    return rc;
}

/* The account's first entry above seq (0: none). */
static int entry_above(store_txn *t, uint64_t account_id, uint64_t seq, uint64_t *found)
{
    uint32_t n = 0;
    *found = 0;
    int rc = ledger_history_seqs(t, account_id, false, seq, found, 1, &n);
    if (rc == TALLY_ok && n == 0)
        *found = 0;
    return rc;
}

/* The account's first entry whose time is at or after time_ms (strict:
 * after it), 0 when none: a binary search over seqs (entry times never go
 * back, balances.h), at most 64 probes. */
static int first_entry_from(store_txn *t, uint64_t account_id, int64_t time_ms, bool strict,
                            uint64_t *found)
{
    log_head head;
    int rc = log_head_get(t, &head);
    uint64_t lo = 0, hi = head.seq; /* the answer is the first entry above some s in [lo, hi] */
    *found = 0;
    while (rc == TALLY_ok && lo < hi) {
        uint64_t mid = lo + (hi - lo) / 2, e;
        ledger_balance b;
        rc = entry_above(t, account_id, mid, &e);
        if (rc != TALLY_ok)
            break;
        bool past = e == 0;
        if (!past) {
            rc = ledger_balance_entry(t, account_id, e, &b);
            past = rc == TALLY_ok && (strict ? b.timestamp_ms > time_ms : b.timestamp_ms >= time_ms);
        }
        if (past)
            hi = mid;
        else
            lo = mid + 1;
    }
    if (rc == TALLY_ok)
        rc = entry_above(t, account_id, lo, found);
    if (rc == TALLY_ok && *found != 0) { /* lo may be past the range's start: check it holds */
        ledger_balance b;
        rc = ledger_balance_entry(t, account_id, *found, &b);
        if (rc == TALLY_ok && (strict ? b.timestamp_ms <= time_ms : b.timestamp_ms < time_ms))
            *found = 0;
    }
    return rc;
}

static uint64_t min_nonzero(uint64_t a, uint64_t b) { return a == 0 ? b : b == 0 ? a : a < b ? a : b; }

/* The exclusive cursor a page starts from: ascending, entries above it;
 * reversed, entries below it (0: from the last). *empty when the bounds
 * leave nothing. */
static int page_start(store_txn *t, const ledger_balances_query *q, uint64_t *cursor, bool *empty)
{
    *empty = false;
    uint64_t e = 0;
    int rc = TALLY_ok;
    if (!q->reversed) {
        *cursor = q->after_seq;
        if (q->seq_min > 1 && q->seq_min - 1 > *cursor)
            *cursor = q->seq_min - 1;
        if (q->timestamp_min_ms > 0) {
            rc = first_entry_from(t, q->account_id, q->timestamp_min_ms, false, &e);
            if (rc == TALLY_ok && e == 0)
                *empty = true;
            if (rc == TALLY_ok && e > 0 && e - 1 > *cursor)
                *cursor = e - 1;
        }
        return rc;
    }
    *cursor = min_nonzero(q->after_seq, q->seq_max == UINT64_MAX || q->seq_max == 0
                                            ? 0 : q->seq_max + 1);
    if (q->timestamp_max_ms > 0) {
        rc = first_entry_from(t, q->account_id, q->timestamp_max_ms, true, &e);
        if (rc == TALLY_ok && e != 0)
            *cursor = min_nonzero(*cursor, e);
    }
    return rc;
}

static bool in_bounds(const ledger_balances_query *q, const ledger_balance *b)
{
    return (q->seq_min == 0 || b->seq >= q->seq_min) &&
           (q->seq_max == 0 || b->seq <= q->seq_max) &&
           (q->timestamp_min_ms <= 0 || b->timestamp_ms >= q->timestamp_min_ms) &&
           (q->timestamp_max_ms <= 0 || b->timestamp_ms <= q->timestamp_max_ms);
}

int ledger_balances_page(store_txn *t, const ledger_balances_query *q, ledger_balance *out,
                         uint32_t *count, uint64_t *next)
{
    static _Thread_local uint64_t seqs[TALLY_HISTORY_ENTRIES_MAX];
    *count = 0;
    *next = 0;
    if (q->limit == 0 || q->limit > TALLY_HISTORY_ENTRIES_MAX)
        return TALLY_invalid_argument;
    uint64_t cursor;
    bool empty;
    int rc = page_start(t, q, &cursor, &empty);
    if (rc != TALLY_ok || empty)
        return rc;
    uint32_t n = 0;
    rc = ledger_history_seqs(t, q->account_id, q->reversed, cursor, seqs, q->limit, &n);
    for (uint32_t i = 0; rc == TALLY_ok && i < n; i++) {
        rc = ledger_balance_entry(t, q->account_id, seqs[i], &out[*count]);
        if (rc != TALLY_ok)
            break;
        if (!in_bounds(q, &out[*count]))
            return TALLY_ok; /* past the range's far end: no next page */
        (*count)++;
    }
    if (rc == TALLY_ok && n == q->limit && n > 0)
        *next = seqs[n - 1];
    return rc;
}

int ledger_balance_at(store_txn *t, uint64_t account_id, bool by_time, int64_t time_ms,
                      uint64_t seq, ledger_balance *out)
{
    memset(out, 0, sizeof(*out));
    uint64_t below = 0; /* the entries below it (0: every entry) */
    int rc = TALLY_ok;
    if (by_time)
        rc = first_entry_from(t, account_id, time_ms, true, &below);
    else
        below = seq == UINT64_MAX ? 0 : seq + 1;
    uint64_t e;
    uint32_t n = 0;
    if (rc == TALLY_ok && (by_time || below != 1))
        rc = ledger_history_seqs(t, account_id, true, below, &e, 1, &n);
    if (rc == TALLY_ok && n == 1)
        rc = ledger_balance_entry(t, account_id, e, out);
    return rc;
}
