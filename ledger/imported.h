/*
 * imported.h — imported history: accounts and transfers created with a
 * caller-given creation time (the imported flag, TigerBeetle's rules), so
 * a team can bring in years of books with their original times and carry
 * on live.
 *
 * A caller-given time must be before the commit time (not in the future)
 * and after every time the store holds already (the watermark): the last
 * imported time, kept in meta "imported_last" (its time, Unix ms, then the
 * seq of its event, 8 bytes each, big-endian), and, when events followed
 * that one (or there was none), the time of the last event: live records
 * are created at their event's commit time, and the writer keeps commit
 * times monotone (when log retention removed the last event, its time is
 * unknown and nothing is imported until an event comes). So any event
 * after an import that is not itself
 * imported (a live transfer, a hold's post, an entitlement, a hold's
 * expiry) closes the import up to its commit time: stricter than
 * TigerBeetle, whose watermark is the last object created, because it
 * keeps every account's history in time order. So creation times grow
 * strictly through an import, the indexes' order by creation time is the
 * order of creation, and an account's history entries (ledger/history.h)
 * have times that never go back. The event of an imported record carries
 * the commit time like any other; the record's created_ms is the given
 * time. Whether a request mixes imported and live commands is checked
 * before (ledger_command_import_mix).
 */
#ifndef TALLY_LEDGER_IMPORTED_H
#define TALLY_LEDGER_IMPORTED_H

#include "ledger/context.h"

#include <stdint.h>

/* The meta key of the last imported time. */
extern const char ledger_imported_last_key[];

/* The time an import must pass (above; 0: none). TALLY_ok,
 * TALLY_corrupt_record (meta's record) or a store error. */
int ledger_imported_watermark(store_txn *t, int64_t *out_ms);

/* Check a caller-given time against the commit time and the store:
 * TALLY_ok, imported_event_timestamp_must_not_advance (not before
 * ctx->now_ms), imported_event_timestamp_must_not_regress (not after the
 * watermark) or a store error. */
int ledger_imported_check(ledger_ctx *ctx, int64_t timestamp_ms);

/* Remember timestamp_ms as the last imported time, of the event at seq
 * (after the checks): TALLY_ok or a fault. */
int ledger_imported_note(ledger_ctx *ctx, int64_t timestamp_ms, uint64_t seq);

#endif
