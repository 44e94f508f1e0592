/*
 * expiry.h — the time index of things that expire (the sweep that walks it
 * is sweep.h).
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

#include "common/limits.h"
#include "log/store.h"

#include <stddef.h>
#include <stdint.h>

#define LEDGER_EXPIRY_HOLD 1
#define LEDGER_EXPIRY_ENTITLEMENT 2

/* The longest id: an entitlement key (entitlement.c asserts it fits). */
#define LEDGER_EXPIRY_ID_BYTES_MAX (1 + TALLY_SUBJECT_BYTES_MAX + TALLY_FEATURE_BYTES_MAX)
/* at_ms, kind, id. */
#define LEDGER_EXPIRY_KEY_OFFSET_ID 9
#define LEDGER_EXPIRY_KEY_BYTES_MAX (LEDGER_EXPIRY_KEY_OFFSET_ID + LEDGER_EXPIRY_ID_BYTES_MAX)

/* The index key of (at_ms, kind, id of 1..LEDGER_EXPIRY_ID_BYTES_MAX bytes)
 * into out; returns its length. Adding and removing also assert at_ms > 0;
 * the key alone serves lookups of stored times, which may be corrupt. */
size_t ledger_expiry_key(int64_t at_ms, uint8_t kind, const void *id, size_t id_len,
                         uint8_t out[LEDGER_EXPIRY_KEY_BYTES_MAX]);

int ledger_expiry_add(store_txn *t, int64_t at_ms, uint8_t kind, const void *id, size_t id_len);
int ledger_expiry_del(store_txn *t, int64_t at_ms, uint8_t kind, const void *id, size_t id_len);

#endif
