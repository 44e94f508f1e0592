/*
 * expiry.c — the expiry time index: its keys, adding and removing entries.
 * Transfer and entitlement keep it; sweep.c walks it. Calls only log/store.
 */
#include "ledger/expiry.h"

#include "common/bytes.h"

#include <assert.h>
#include <string.h>

size_t ledger_expiry_key(int64_t at_ms, uint8_t kind, const void *id, size_t id_len,
                         uint8_t out[LEDGER_EXPIRY_KEY_BYTES_MAX])
{
    assert(id_len > 0 && id_len <= LEDGER_EXPIRY_ID_BYTES_MAX);
    put_u64_be(out, (uint64_t)at_ms);
    out[8] = kind;
    memcpy(out + LEDGER_EXPIRY_KEY_OFFSET_ID, id, id_len);
    return LEDGER_EXPIRY_KEY_OFFSET_ID + id_len;
}

/* The key of an entry being written: its time must be a real one. */
static size_t entry_key(int64_t at_ms, uint8_t kind, const void *id, size_t id_len,
                        uint8_t out[LEDGER_EXPIRY_KEY_BYTES_MAX])
{
    assert(at_ms > 0);
    return ledger_expiry_key(at_ms, kind, id, id_len, out);
}

int ledger_expiry_add(store_txn *t, int64_t at_ms, uint8_t kind, const void *id, size_t id_len)
{
    uint8_t key[LEDGER_EXPIRY_KEY_BYTES_MAX];
    size_t n = entry_key(at_ms, kind, id, id_len, key);
    return store_put(t, STORE_DB_EXPIRY, key, n, "", 0, 0);
}

int ledger_expiry_del(store_txn *t, int64_t at_ms, uint8_t kind, const void *id, size_t id_len)
{
    uint8_t key[LEDGER_EXPIRY_KEY_BYTES_MAX];
    size_t n = entry_key(at_ms, kind, id, id_len, key);
    return store_del(t, STORE_DB_EXPIRY, key, n);
}
