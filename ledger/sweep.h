/*
 * sweep.h — expiring what is due: walks the time index of expiry.h and
 * expires holds (transfer.h) and entitlements (entitlement.h).
 */
#ifndef TALLY_LEDGER_SWEEP_H
#define TALLY_LEDGER_SWEEP_H

#include "log/store.h"

#include <stdbool.h>
#include <stdint.h>

/* Expire, within t, every hold and entitlement due at or before now_ms, at
 * most items_max index entries (TALLY_SWEEP_ITEMS_MAX if 0). Each expiry is
 * one event without causation. *expired_out (may be NULL) gets the number
 * of holds and entitlements expired, *more_out (may be NULL) whether due
 * entries remain. Returns TALLY_ok or a fault (remembered in t). */
int ledger_sweep(store_txn *t, int64_t now_ms, uint32_t items_max, uint32_t *expired_out,
                 bool *more_out);

#endif
