/*
 * history.c — the account history index (history.h): the "account_history"
 * sets and, below them, the "history" range of older stores.
 */
#include "ledger/history.h"

#include "common/bytes.h"
#include "common/error.h"

#include <string.h>

void ledger_history_key(uint64_t account_id, uint64_t seq, uint8_t out[16])
{
    put_u64_be(out, account_id);
    put_u64_be(out + 8, seq);
}

int ledger_history_put(store_txn *t, uint64_t account_id, uint64_t seq)
{
    uint8_t key[8], val[8];
    put_u64_be(key, account_id);
    put_u64_be(val, seq);
    return store_put(t, STORE_DB_ACCOUNT_HISTORY, key, 8, val, 8, MDB_APPENDDUP);
}

int ledger_history_del(store_txn *t, uint64_t account_id, uint64_t seq)
{
    uint8_t key[16];
    ledger_history_key(account_id, seq, key);
    int rc = store_del_value(t, STORE_DB_ACCOUNT_HISTORY, key, 8, key + 8, 8);
    return rc == TALLY_not_found ? store_del(t, STORE_DB_HISTORY, key, 16) : rc;
}

int ledger_history_has(store_txn *t, uint64_t account_id, uint64_t seq)
{
    uint8_t key[16];
    ledger_history_key(account_id, seq, key);
    MDB_cursor *cur;
    int rc = store_cursor_open(t, STORE_DB_ACCOUNT_HISTORY, &cur);
    if (rc == TALLY_ok) {
        MDB_val k = {8, key}, v = {8, key + 8};
        rc = store_translate(mdb_cursor_get(cur, &k, &v, MDB_GET_BOTH));
        mdb_cursor_close(cur);
    }
    if (rc != TALLY_not_found)
        return rc;
    MDB_val v;
    return store_get(t, STORE_DB_HISTORY, key, 16, &v);
}

typedef struct seq_page {
    uint64_t *seqs;
    uint32_t max, count;
    bool reverse;
    uint64_t cursor; /* 0: none */
} seq_page;

static bool page_full(const seq_page *p) { return p->count == p->max; }

/* Whether seq lies beyond the cursor in the page's direction. */
static bool page_takes(const seq_page *p, uint64_t seq)
{
    return p->cursor == 0 || (p->reverse ? seq < p->cursor : seq > p->cursor);
}

static int translated(int mrc)
{
    return mrc == MDB_SUCCESS || mrc == MDB_NOTFOUND ? TALLY_ok : store_translate(mrc);
}

/* The account's seqs in "account_history". */
static int sets_collect(store_txn *t, uint64_t account_id, seq_page *p)
{
    MDB_cursor *cur;
    int rc = store_cursor_open(t, STORE_DB_ACCOUNT_HISTORY, &cur);
    if (rc != TALLY_ok)
        return rc == TALLY_not_found ? TALLY_ok : rc; /* an old store, opened read-only */
    uint8_t key[8], from[8];
    put_u64_be(key, account_id);
    MDB_val k = {8, key}, v;
    int mrc;
    if (p->reverse) {
        put_u64_be(from, p->cursor);
        v = (MDB_val){8, from};
        mrc = p->cursor ? mdb_cursor_get(cur, &k, &v, MDB_GET_BOTH_RANGE) : MDB_NOTFOUND;
        if (mrc == MDB_SUCCESS) /* the first seq >= cursor: step below it */
            mrc = mdb_cursor_get(cur, &k, &v, MDB_PREV_DUP);
        else if (mrc == MDB_NOTFOUND) { /* every seq is below the cursor */
            k = (MDB_val){8, key};
            mrc = mdb_cursor_get(cur, &k, &v, MDB_SET_KEY);
            if (mrc == MDB_SUCCESS)
                mrc = mdb_cursor_get(cur, &k, &v, MDB_LAST_DUP);
        }
    } else {
        put_u64_be(from, p->cursor + 1);
        v = (MDB_val){8, from};
        mrc = mdb_cursor_get(cur, &k, &v, MDB_GET_BOTH_RANGE);
    }
    for (; mrc == MDB_SUCCESS && !page_full(p) && v.mv_size == 8;
         mrc = mdb_cursor_get(cur, &k, &v, p->reverse ? MDB_PREV_DUP : MDB_NEXT_DUP)) {
        uint64_t seq = get_u64_be(v.mv_data);
        if (page_takes(p, seq))
            p->seqs[p->count++] = seq;
    }
    mdb_cursor_close(cur);
    return translated(mrc);
}

/* The account's seqs in the old "history" range. */
static int range_collect(store_txn *t, uint64_t account_id, seq_page *p)
{
    MDB_cursor *cur;
    int rc = store_cursor_open(t, STORE_DB_HISTORY, &cur);
    if (rc != TALLY_ok)
        return rc;
    uint8_t key[16];
    uint64_t start = p->reverse ? (p->cursor ? p->cursor : UINT64_MAX) : p->cursor + 1;
    ledger_history_key(account_id, start, key);
    MDB_val k = {16, key}, v;
    int mrc = mdb_cursor_get(cur, &k, &v, MDB_SET_RANGE);
    if (p->reverse) /* step back to the last entry below the start */
        mrc = mrc == MDB_SUCCESS ? mdb_cursor_get(cur, &k, &v, MDB_PREV)
                                 : mdb_cursor_get(cur, &k, &v, MDB_LAST);
    for (; mrc == MDB_SUCCESS && !page_full(p) && k.mv_size == 16 &&
           get_u64_be(k.mv_data) == account_id;
         mrc = mdb_cursor_get(cur, &k, &v, p->reverse ? MDB_PREV : MDB_NEXT)) {
        uint64_t seq = get_u64_be((const uint8_t *)k.mv_data + 8);
        if (page_takes(p, seq))
            p->seqs[p->count++] = seq;
    }
    mdb_cursor_close(cur);
    return translated(mrc);
}

int ledger_history_seqs(store_txn *t, uint64_t account_id, bool reverse, uint64_t cursor,
                        uint64_t *seqs, uint32_t max, uint32_t *count)
{
    seq_page p = {.seqs = seqs, .max = max, .reverse = reverse, .cursor = cursor};
    *count = 0;
    if (!reverse && cursor == UINT64_MAX)
        return TALLY_ok; /* nothing after the largest seq */
    /* The old range holds the lower seqs: first going up, last going down. */
    int rc = reverse ? sets_collect(t, account_id, &p) : range_collect(t, account_id, &p);
    if (rc == TALLY_ok && !page_full(&p))
        rc = reverse ? range_collect(t, account_id, &p) : sets_collect(t, account_id, &p);
    *count = p.count;
    return rc;
}
