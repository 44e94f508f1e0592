/*
 * history.c — the account history index (history.h): one key range of
 * (account, seq) per account in "history", then the account's newest
 * seqs in its "history_tail" record; written in bulk per commit.
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

int ledger_history_tail_decode(const MDB_val *v, uint64_t seqs[HISTORY_TAIL_MAX],
                               uint32_t *count, const char **why)
{
    const uint8_t *p = v->mv_data;
    *count = 0;
    if (v->mv_size < 1 || p[0] != HISTORY_TAIL_FORMAT) {
        *why = "unknown format";
        return TALLY_corrupt_record;
    }
    size_t n = (v->mv_size - 1) / 8;
    if ((v->mv_size - 1) % 8 != 0 || n < 1 || n > HISTORY_TAIL_MAX) {
        *why = "wrong length";
        return TALLY_corrupt_record;
    }
    for (size_t i = 0; i < n; i++) {
        seqs[i] = get_u64_be(p + 1 + 8 * i);
        if (i > 0 && seqs[i] <= seqs[i - 1]) {
            *why = "seqs not ascending";
            return TALLY_corrupt_record;
        }
    }
    *count = (uint32_t)n;
    return TALLY_ok;
}

/* The account's tail into seqs (*count 0 when it has none). TALLY_ok,
 * TALLY_corrupt_record or a store error. */
static int tail_read(store_txn *t, uint64_t account_id, uint64_t seqs[HISTORY_TAIL_MAX],
                     uint32_t *count)
{
    uint8_t key[8];
    put_u64_be(key, account_id);
    MDB_val v;
    *count = 0;
    int rc = store_get(t, STORE_DB_HISTORY_TAIL, key, sizeof(key), &v);
    if (rc == TALLY_not_found)
        return TALLY_ok;
    const char *why;
    return rc == TALLY_ok ? ledger_history_tail_decode(&v, seqs, count, &why) : rc;
}

/* Write the account's tail of count seqs (none: delete the record).
 * Errors are remembered in t. */
static int tail_write(store_txn *t, uint64_t account_id, const uint64_t *seqs, uint32_t count)
{
    assert(count < HISTORY_TAIL_MAX);
    uint8_t key[8], value[1 + 8 * HISTORY_TAIL_MAX];
    put_u64_be(key, account_id);
    if (count == 0) {
        int rc = store_del(t, STORE_DB_HISTORY_TAIL, key, sizeof(key));
        return rc == TALLY_not_found ? TALLY_ok : rc;
    }
    value[0] = HISTORY_TAIL_FORMAT;
    for (uint32_t i = 0; i < count; i++)
        put_u64_be(value + 1 + 8 * i, seqs[i]);
    return store_put(t, STORE_DB_HISTORY_TAIL, key, sizeof(key), value, 1 + 8 * (size_t)count, 0);
}

static int indexed_seqs(store_txn *t, uint64_t account_id, bool reverse, uint64_t cursor,
                        uint64_t *seqs, uint32_t max, uint32_t *count);

/* One account's new keys (n, sorted) appended to its tail, or with the
 * tail folded into "history" when that makes HISTORY_TAIL_MAX seqs or
 * more (or when a new seq is not above the tail: see history.h). */
static int write_account(store_txn *t, uint64_t account_id, const uint8_t *keys, size_t n)
{
    uint64_t tail[HISTORY_TAIL_MAX];
    uint32_t have;
    int rc = tail_read(t, account_id, tail, &have);
    if (rc != TALLY_ok)
        return store_txn_fail(t, rc);
    uint32_t stored = have;
    uint64_t first = get_u64_be(keys + 8), last = 0;
    if (have > 0)
        last = tail[have - 1];
    else if ((rc = ledger_history_indexed_last(t, account_id, &last)) != TALLY_ok &&
             rc != TALLY_not_found)
        return store_txn_fail(t, rc);
    if (first > last) { /* else fold: see history.h */
        size_t i;
        for (i = 0; i < n; i++) {
            uint64_t seq = get_u64_be(keys + i * HISTORY_KEY_BYTES + 8);
            if (have > 0 && seq == tail[have - 1])
                continue; /* the same entry twice */
            if (have >= HISTORY_TAIL_MAX - 1)
                break; /* it would make HISTORY_TAIL_MAX: fold */
            tail[have++] = seq;
        }
        if (i == n && have < HISTORY_TAIL_MAX)
            return tail_write(t, account_id, tail, have);
    }
    /* Fold: the tail as stored (tail[0..stored)), then the new keys. */
    uint8_t tail_keys[HISTORY_TAIL_MAX * HISTORY_KEY_BYTES];
    for (uint32_t i = 0; i < stored; i++)
        ledger_history_key(account_id, tail[i], tail_keys + i * HISTORY_KEY_BYTES);
    rc = store_put_sorted(t, STORE_DB_HISTORY, tail_keys, HISTORY_KEY_BYTES, stored, 0);
    if (rc == TALLY_ok)
        rc = store_put_sorted(t, STORE_DB_HISTORY, keys, HISTORY_KEY_BYTES, n, 0);
    return rc == TALLY_ok && stored > 0 ? tail_write(t, account_id, NULL, 0) : rc;
}

/* The collector's write-back (store_collect_write_fn): the keys sorted,
 * then each account's run of them written (write_account), in ascending
 * account order. */
static int write_keys(store_txn *t, uint8_t *keys, size_t len, int64_t tag)
{
    (void)tag;
    assert(len % HISTORY_KEY_BYTES == 0);
    size_t n = len / HISTORY_KEY_BYTES;
    qsort(keys, n, HISTORY_KEY_BYTES, compare_keys);
    int rc = TALLY_ok;
    for (size_t i = 0, j; i < n && rc == TALLY_ok; i = j) {
        uint64_t account_id = get_u64_be(keys + i * HISTORY_KEY_BYTES);
        for (j = i + 1; j < n && get_u64_be(keys + j * HISTORY_KEY_BYTES) == account_id; j++)
            ;
        rc = write_account(t, account_id, keys + i * HISTORY_KEY_BYTES, j - i);
    }
    return rc;
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
    rc = store_del(t, STORE_DB_HISTORY, key, sizeof(key));
    if (rc != TALLY_not_found)
        return rc;
    uint64_t tail[HISTORY_TAIL_MAX];
    uint32_t have, i = 0;
    rc = tail_read(t, account_id, tail, &have);
    while (rc == TALLY_ok && i < have && tail[i] != seq)
        i++;
    if (rc != TALLY_ok || i == have)
        return rc != TALLY_ok ? rc : TALLY_not_found;
    memmove(tail + i, tail + i + 1, (have - i - 1) * sizeof(tail[0]));
    return tail_write(t, account_id, tail, have - 1);
}

int ledger_history_has(store_txn *t, uint64_t account_id, uint64_t seq)
{
    int rc = ledger_history_flush(t);
    if (rc != TALLY_ok)
        return rc;
    uint8_t key[HISTORY_KEY_BYTES];
    ledger_history_key(account_id, seq, key);
    MDB_val v;
    rc = store_get(t, STORE_DB_HISTORY, key, sizeof(key), &v);
    if (rc != TALLY_not_found)
        return rc;
    uint64_t tail[HISTORY_TAIL_MAX];
    uint32_t have;
    rc = tail_read(t, account_id, tail, &have);
    for (uint32_t i = 0; rc == TALLY_ok && i < have; i++)
        if (tail[i] == seq)
            return TALLY_ok;
    return rc != TALLY_ok ? rc : TALLY_not_found;
}

/* The account's seqs in "history" appended to seqs from *count, up to max:
 * ledger_history_seqs's order and cursor rule. */
static int indexed_seqs(store_txn *t, uint64_t account_id, bool reverse, uint64_t cursor,
                        uint64_t *seqs, uint32_t max, uint32_t *count)
{
    MDB_cursor *cur;
    int rc = store_cursor_open(t, STORE_DB_HISTORY, &cur);
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

int ledger_history_seqs(store_txn *t, uint64_t account_id, bool reverse, uint64_t cursor,
                        uint64_t *seqs, uint32_t max, uint32_t *count)
{
    *count = 0;
    if (!reverse && cursor == UINT64_MAX)
        return TALLY_ok; /* nothing after the largest seq (cursor + 1 would wrap to 0) */
    int rc = ledger_history_flush(t);
    uint64_t tail[HISTORY_TAIL_MAX];
    uint32_t have = 0;
    if (rc == TALLY_ok)
        rc = tail_read(t, account_id, tail, &have);
    if (rc != TALLY_ok)
        return rc;
    /* The "history" range, then the tail (every seq of which is above it). */
    if (!reverse) {
        rc = indexed_seqs(t, account_id, false, cursor, seqs, max, count);
        for (uint32_t i = 0; rc == TALLY_ok && i < have && *count < max; i++)
            if (tail[i] > cursor)
                seqs[(*count)++] = tail[i];
        return rc;
    }
    for (uint32_t i = have; i-- > 0 && *count < max;)
        if (cursor == 0 || tail[i] < cursor)
            seqs[(*count)++] = tail[i];
    return *count < max ? indexed_seqs(t, account_id, true, cursor, seqs, max, count) : TALLY_ok;
}

int ledger_history_indexed_last(store_txn *t, uint64_t account_id, uint64_t *seq)
{
    uint64_t last[1];
    uint32_t n = 0;
    int rc = indexed_seqs(t, account_id, true, 0, last, 1, &n);
    if (rc == TALLY_ok && n == 0)
        rc = TALLY_not_found;
    *seq = n ? last[0] : 0;
    return rc;
}
