/*
 * sweep.c — the sweep that expires holds and entitlements whose time has
 * come: it copies due keys of the expiry index (expiry.h) and hands each to
 * transfer or entitlement, which remove the entry as they expire.
 */
#include "ledger/sweep.h"

#include "common/error.h"
#include "common/limits.h"
#include "ledger/context.h"
#include "ledger/entitlement.h"
#include "ledger/expiry.h"
#include "ledger/transfer.h"

#include <string.h>

#define SWEEP_CHUNK 32

typedef struct due_entry {
    uint8_t key[LEDGER_EXPIRY_KEY_BYTES_MAX];
    size_t len;
} due_entry;

/* Copy up to max due index keys (at_ms <= now) so that expiring them can
 * change the index without a cursor on it. */
static int collect_due(store_txn *t, int64_t now_ms, due_entry *due, uint32_t max,
                       uint32_t *count)
{
    *count = 0;
    store_scan s;
    int rc = store_scan_begin(t, STORE_DB_EXPIRY, NULL, 0, false, &s);
    if (rc != TALLY_ok)
        return rc;
    for (; store_scan_on(&s) && *count < max; store_scan_next(&s)) {
        const MDB_val *k = &s.key;
        if (k->mv_size <= LEDGER_EXPIRY_KEY_OFFSET_ID || k->mv_size > LEDGER_EXPIRY_KEY_BYTES_MAX) {
            rc = TALLY_corrupt_record;
            break;
        }
        if ((int64_t)get_u64_be(k->mv_data) > now_ms)
            break;
        memcpy(due[*count].key, k->mv_data, k->mv_size);
        due[*count].len = k->mv_size;
        (*count)++;
    }
    return store_scan_end(&s, rc);
}

static int expire_entry(ledger_ctx *ctx, const due_entry *d, bool *expired)
{
    *expired = false;
    const uint8_t *id = d->key + LEDGER_EXPIRY_KEY_OFFSET_ID;
    size_t id_len = d->len - LEDGER_EXPIRY_KEY_OFFSET_ID;
    int rc = TALLY_ok;
    if (d->key[8] == LEDGER_EXPIRY_HOLD && id_len == 16) {
        tally_id128 tid;
        memcpy(tid.bytes, id, 16);
        rc = ledger_hold_expire(ctx, &tid, expired);
    } else if (d->key[8] == LEDGER_EXPIRY_ENTITLEMENT) {
        rc = ledger_entitlement_expire(ctx, id, id_len, expired);
    } else {
        return TALLY_corrupt_record;
    }
    if (rc != TALLY_ok)
        return rc;
    /* Expiring removed the entry; a stale one is removed here. */
    rc = store_del(ctx->txn, STORE_DB_EXPIRY, d->key, d->len);
    return rc == TALLY_not_found ? TALLY_ok : rc;
}

int ledger_sweep(store_txn *t, int64_t now_ms, uint32_t items_max, uint32_t *expired_out,
                 bool *more_out)
{
    if (items_max == 0 || items_max > TALLY_SWEEP_ITEMS_MAX)
        items_max = TALLY_SWEEP_ITEMS_MAX;
    due_entry due[SWEEP_CHUNK];
    uint32_t done = 0, expired = 0, got = 0;
    int rc = TALLY_ok;
    bool more = false;
    while (rc == TALLY_ok && done < items_max) {
        uint32_t want = items_max - done < SWEEP_CHUNK ? items_max - done : SWEEP_CHUNK;
        rc = collect_due(t, now_ms, due, want, &got);
        for (uint32_t i = 0; rc == TALLY_ok && i < got; i++) {
            bool one;
            ledger_ctx ctx = {.txn = t, .now_ms = now_ms}; /* one expiry, its own events */
            rc = expire_entry(&ctx, &due[i], &one);
            expired += one;
        }
        done += got;
        if (got < want)
            break;
    }
    if (rc == TALLY_ok && done >= items_max) {
        rc = collect_due(t, now_ms, due, 1, &got);
        more = got > 0;
    }
    if (expired_out)
        *expired_out = expired;
    if (more_out)
        *more_out = more;
    return store_txn_fail(t, rc);
}
