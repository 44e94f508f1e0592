/*
 * expiry.h — the time index of things that expire, and the sweep.
 *
 * Database "expiry": key = at_ms (i64 big-endian) | kind (u8) | id, value
 * empty. id is the 16-byte transfer id of a hold (kind 1) or the
 * entitlement key (kind 2, see entitlement.h). A sweep walks the index from
 * the start up to now, so it costs what expires, not what exists. Entries
 * are removed when the thing resolves another way; a leftover entry whose
 * target no longer matches is skipped and removed.
 */
#ifndef TALLY_LEDGER_EXPIRY_H
#define TALLY_LEDGER_EXPIRY_H

#include "log/store.h"

#include <stddef.h>
#include <stdint.h>

#define LEDGER_EXPIRY_HOLD 1
#define LEDGER_EXPIRY_ENTITLEMENT 2

int ledger_expiry_add(store_txn *t, int64_t at_ms, uint8_t kind, const void *id, size_t id_len);
int ledger_expiry_del(store_txn *t, int64_t at_ms, uint8_t kind, const void *id, size_t id_len);

/* Expire, within t, every hold and entitlement due at or before now_ms, at
 * most items_max index entries (TALLY_SWEEP_ITEMS_MAX if 0). Each expiry is
 * one event without causation. *expired_out (may be NULL) gets the number
 * of holds and entitlements expired, *more_out (may be NULL) whether due
 * entries remain. Returns TALLY_ok or a fault (remembered in t). */
int ledger_sweep(store_txn *t, int64_t now_ms, uint32_t items_max, uint32_t *expired_out,
                 bool *more_out);

#endif
