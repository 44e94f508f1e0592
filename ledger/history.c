/*
 * history.c — the account history index (history.h): one key range of
 * (account, seq) per account in "history", written in bulk per commit.
 */
#include "ledger/history.h"

#include "common/bytes.h"
#include "common/error.h"

#include <assert.h>
#include <stdlib.h>
#include <string.h>

#define HISTORY_KEY_BYTES 16

void ledger_history_key(uint64_t account_id, uint64_t seq, uint8_t out[16])
{
    put_u64_be(out, account_id);
    put_u64_be(out + 8, seq);
}

static int compare_keys(const void *a, const void *b)
{
    return memcmp(a, b, HISTORY_KEY_BYTES);
}

/* The collector's write-back (store_collect_write_fn): the keys sorted,
 * then put in order through one cursor. */
static int write_keys(store_txn *t, uint8_t *keys, size_t len, int64_t tag)
{
    (void)tag;
    assert(len % HISTORY_KEY_BYTES == 0);
    size_t n = len / HISTORY_KEY_BYTES;
    qsort(keys, n, HISTORY_KEY_BYTES, compare_keys);
    return store_put_sorted(t, STORE_DB_HISTORY, keys, HISTORY_KEY_BYTES, n, 0);
}

int ledger_history_put(store_txn *t, uint64_t account_id, uint64_t seq)
{
    uint8_t key[HISTORY_KEY_BYTES];
    ledger_history_key(account_id, seq, key);
    return store_txn_collect_add(t, STORE_COLLECT_HISTORY, key, sizeof(key), 0, write_keys);
}

int ledger_history_flush(store_txn *t)
{
    return t->read_only ? TALLY_ok : store_txn_collect_flush(t, STORE_COLLECT_HISTORY);
}

int ledger_history_del(store_txn *t, uint64_t account_id, uint64_t seq)
{
    int rc = ledger_history_flush(t);
    if (rc != TALLY_ok)
        return rc;
    uint8_t key[HISTORY_KEY_BYTES];
    ledger_history_key(account_id, seq, key);
    return store_del(t, STORE_DB_HISTORY, key, sizeof(key));
}

int ledger_history_has(store_txn *t, uint64_t account_id, uint64_t seq)
{
    int rc = ledger_history_flush(t);
    if (rc != TALLY_ok)
        return rc;
    uint8_t key[HISTORY_KEY_BYTES];
    ledger_history_key(account_id, seq, key);
    MDB_val v;
    return store_get(t, STORE_DB_HISTORY, key, sizeof(key), &v);
}

int ledger_history_seqs(store_txn *t, uint64_t account_id, bool reverse, uint64_t cursor,
                        uint64_t *seqs, uint32_t max, uint32_t *count)
{
    *count = 0;
    if (!reverse && cursor == UINT64_MAX)
        return TALLY_ok; /* nothing after the largest seq (cursor + 1 would wrap to 0) */
    int rc = ledger_history_flush(t);
    if (rc != TALLY_ok)
        return rc;
    MDB_cursor *cur;
    rc = store_cursor_open(t, STORE_DB_HISTORY, &cur);
    if (rc != TALLY_ok)
        return rc;
    uint8_t key[HISTORY_KEY_BYTES];
    uint64_t start = reverse ? (cursor ? cursor : UINT64_MAX) : cursor + 1;
    ledger_history_key(account_id, start, key);
    MDB_val k = {16, key}, v;
    int mrc = mdb_cursor_get(cur, &k, &v, MDB_SET_RANGE);
    if (reverse) /* step back to the last entry below the start */
        mrc = mrc == MDB_SUCCESS ? mdb_cursor_get(cur, &k, &v, MDB_PREV)
                                 : mdb_cursor_get(cur, &k, &v, MDB_LAST);
    while (mrc == MDB_SUCCESS && *count < max && k.mv_size == 16 &&
           get_u64_be(k.mv_data) == account_id) {
        uint64_t seq = get_u64_be((const uint8_t *)k.mv_data + 8);
        if (reverse && cursor && seq >= cursor)
            break;
        seqs[(*count)++] = seq;
        mrc = mdb_cursor_get(cur, &k, &v, reverse ? MDB_PREV : MDB_NEXT);
    }
    mdb_cursor_close(cur);
    return mrc == MDB_SUCCESS || mrc == MDB_NOTFOUND ? TALLY_ok : store_translate(mrc);
}
