/*
 * retention.h — keeping the store from growing forever without losing the
 * dedupe guarantee or the ability to verify it (docs/OPERATIONS.md).
 *
 * Inbox retention: idempotency records older than the dedupe window are
 * removed through the inbox_time index, oldest first, a bounded batch per
 * call. A key retried after its record is gone would be applied again, so
 * the window must exceed the longest time a client may retry. meta
 * "inbox_swept" keeps the newest commit time removed so far: events up to
 * it may have lost their inbox records, events after it may not. A record
 * that left a transfer id failed (failed_id.h) takes that entry with it,
 * in the same batch: the id is failed exactly as long as the record lives.
 *
 * Log retention (off by default): events are removed only when older than
 * the configured age AND at or below the lowest ack floor of all durable
 * subscribers AND below every dead letter or replay, oldest first, a
 * bounded batch per call. Before an event goes, its body's objects are
 * written to the checkpoint database (the latest snapshot of every account,
 * transfer and entitlement as of the floor), and meta "log_floor" records
 * the seq, hash and commit time of the last removed event, so the chain
 * and the rebuild can still be verified from there (ledger/invariants.c).
 * The history entries of removed transfer events go with them.
 *
 * Dead-letter retention (off by default): dead letters parked longer than
 * the configured age are removed, at most TALLY_DLQ_EXPIRE_ITEMS_MAX per
 * call, each with a `dead_letter.expired` event (docs/EVENTS.md) appended
 * in the same transaction: what left the queue stays on the record.
 *
 * Subscriber expiry (always on; a subscriber opts in with its
 * inactive_expiry_ms): subscribers without a fetch, ack, park or update
 * for that long are removed, at most TALLY_SUB_EXPIRE_ITEMS_MAX per call,
 * each with a `subscriber.expired` event.
 *
 *   checkpoint  'a' id(8)                 -> account snapshot (msgpack)
 *               't' id(16)                -> transfer snapshot
 *               'e' entitlement key       -> entitlement snapshot
 */
#ifndef TALLY_LEDGER_RETENTION_H
#define TALLY_LEDGER_RETENTION_H

#include "log/log.h"
#include "log/store.h"
#include "log/subscriber.h"

#include <stdbool.h>
#include <stdint.h>

#define LEDGER_INBOX_WINDOW_MS_DEFAULT (INT64_C(7) * 24 * 3600 * 1000) /* 7 days */

typedef struct ledger_retention {
    int64_t inbox_window_ms; /* > 0: records older than this go */
    int64_t log_age_ms;      /* > 0: events older than this may go; 0 = keep all */
    uint32_t batch;          /* at most this many of each per call */
    int64_t dlq_age_ms;      /* > 0: dead letters parked longer than this go, each
                                with a dead_letter.expired event; 0 = keep all */
    sub_dlq_position *dlq_position; /* where the dlq pass resumes (the caller's,
                                kept between calls; NULL: from the start) */
} ledger_retention;

typedef struct ledger_retention_work {
    uint32_t inbox_removed;
    uint32_t events_removed;
    uint64_t log_floor;      /* seq of the last removed event after the call */
    uint32_t dead_letters_removed;
    uint32_t subscribers_expired; /* past their inactive_expiry_ms, each with a
                                     subscriber.expired event */
} ledger_retention_work;

/* One bounded sweep of both at now_ms in t (the writer's transaction).
 * When it removed anything it records its work in meta "retention_last". */
int ledger_retention_sweep(store_txn *t, int64_t now_ms, const ledger_retention *opt,
                           ledger_retention_work *work);

/* The writer's retention, as a function of the store and of now_ms alone
 * (a replica applying the same groups does the same): meta
 * "retention_next" keeps when the next sweep is due and where the dead
 * letters' pass resumes. At or after that time one sweep runs, in a
 * transaction nested in t, and the next is due interval_ms later; before
 * it, nothing happens (*ran false). A failed sweep costs only itself (its
 * nested transaction is aborted and its error returned; the next is due
 * as if it had run); the writes around it stay. opt->dlq_position is
 * ignored: the store keeps it. */
int ledger_retention_run(store_txn *t, int64_t now_ms, int64_t interval_ms,
                         const ledger_retention *opt, ledger_retention_work *work, bool *ran);

/* meta "inbox_swept": newest commit time of a removed inbox record (0:
 * none removed yet). */
int ledger_inbox_swept_ms(store_txn *t, int64_t *swept_ms);

/* Time of the oldest inbox_time entry (a group's latest commit time; 0 when
 * the inbox is empty). */
int ledger_inbox_oldest_ms(store_txn *t, int64_t *oldest_ms);

/* meta "log_floor": the last removed event (seq 0 and zero hash: none). */
typedef struct ledger_log_floor {
    uint64_t seq;
    uint8_t hash[LOG_HASH_BYTES];
    int64_t time_ms;
} ledger_log_floor;
int ledger_log_floor_get(store_txn *t, ledger_log_floor *out);

/* meta "retention_last": the last sweep that removed anything. */
typedef struct ledger_retention_last {
    int64_t time_ms;
    uint32_t inbox_removed;
    uint32_t events_removed;
} ledger_retention_last;
int ledger_retention_last_get(store_txn *t, ledger_retention_last *out);

/* Call fn for every checkpoint snapshot: kind 'a', 't' or 'e' and the
 * decoded msgpack object (valid during the call). */
typedef int (*ledger_checkpoint_fn)(char kind, const msgpack_object *snapshot, void *ctx);
int ledger_checkpoint_each(store_txn *t, ledger_checkpoint_fn fn, void *ctx);

#endif
