/*
 * ledger.h — the state machine's entry point: apply one command with its
 * idempotency key inside a write transaction, and the read helpers.
 *
 * ledger_apply runs the command in a nested transaction of the caller's,
 * so a failure rolls back only that command (its batch-mates are kept).
 * The caller commits; an outcome describes a committed effect only once the
 * caller's commit returned TALLY_ok (replies are sent after the commit).
 */
#ifndef TALLY_LEDGER_H
#define TALLY_LEDGER_H

#include "common/bytes.h"
#include "ledger/account.h"
#include "ledger/command.h"
#include "ledger/entitlement.h"
#include "ledger/expiry.h"
#include "ledger/failed_id.h"
#include "ledger/inbox.h"
#include "ledger/sweep.h"
#include "ledger/transfer.h"
#include "log/store.h"

typedef struct ledger_request {
    tally_str consumer;    /* 1..TALLY_CONSUMER_BYTES_MAX bytes */
    tally_str key;         /* 1..TALLY_KEY_BYTES_MAX bytes */
    tally_str correlation; /* optional, copied into the events */
    ledger_command command;
    /* > 0: a key that is a UUIDv7 (it carries its creation time) older than
     * this is refused with key_expired, unless its record is still in the
     * inbox (then it replays): its record may have been removed by inbox
     * retention, and the command must not apply twice. tallyd sets it to
     * its dedupe window (--dedupe-window-s). */
    int64_t key_max_age_ms;
} ledger_request;

/* Apply req at now_ms (the commit time, 1..TALLY_TIME_MS_MAX) inside txn.
 *
 * Returns TALLY_ok when *out holds the outcome:
 *   - out->replayed: the key was seen with the same fingerprint; the stored
 *     outcome is returned and nothing changes;
 *   - out->code == TALLY_idempotency_key_reused: seen with another
 *     fingerprint; nothing changes, nothing stored;
 *   - consumer/key/correlation unusable (TALLY_CLASS_REQUEST codes): nothing
 *     changes, nothing stored;
 *   - otherwise the command ran: on ok its state and events are in txn; on
 *     a rejection nothing but the inbox record is. out->stored is true.
 * Returns a fault (storage_full, transaction_full, io_error, corrupt_record,
 * internal) when the command could not be decided; then txn is exactly as
 * before the call and nothing is stored, so the key may be retried. */
int ledger_apply(store_txn *txn, const ledger_request *req, int64_t now_ms,
                 ledger_outcome *out);

/* As ledger_apply, but a single command runs directly in txn instead of a
 * nested transaction (a chain still gets one): LMDB's nested transactions
 * cost megabytes of bookkeeping each, and every command checks before it
 * writes, so only faults need a rollback. On a fault (returned, and
 * remembered in txn->error) txn holds a partial command and must be
 * aborted; the group commit writer then re-applies the group with
 * ledger_apply, whose outcomes are the same (same store, same now). */
int ledger_apply_in_place(store_txn *txn, const ledger_request *req, int64_t now_ms,
                          ledger_outcome *out);

/* Convenience for one command in its own durable transaction: begin, sweep
 * what is due, apply, commit. Returns as ledger_apply, plus commit faults
 * (then *out must be ignored). */
int ledger_apply_one(store *st, const ledger_request *req, int64_t now_ms,
                     ledger_outcome *out);
/* The same with ledger_apply_in_place (a fault aborts the transaction). */
int ledger_apply_one_in_place(store *st, const ledger_request *req, int64_t now_ms,
                              ledger_outcome *out);

#endif
