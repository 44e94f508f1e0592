/*
 * inbox_time.c — the inbox time index: one entry per commit group (layout
 * in inbox_time.h).
 */
#include "ledger/inbox_time.h"

#include "common/error.h"

#include <string.h>

/* The top-level commit's write-back: the group's keys under one entry. */
static int write_group(store_txn *t, const uint8_t *bytes)
{
    uint8_t k[LEDGER_INBOX_TIME_GROUP_KEY_BYTES];
    int64_t time_ms = t->collect.tag;
    uint64_t counter = 0;
    MDB_cursor *cur;
    int rc = store_cursor_open(t, STORE_DB_INBOX_TIME, &cur);
    if (rc != TALLY_ok)
        return store_txn_fail(t, rc);
    MDB_val lk, lv;
    int mrc = mdb_cursor_get(cur, &lk, &lv, MDB_LAST);
    if (mrc == 0 && lk.mv_size >= 8) {
        int64_t last_ms = (int64_t)get_u64_be(lk.mv_data);
        bool last_group = lk.mv_size == LEDGER_INBOX_TIME_GROUP_KEY_BYTES &&
                          ((const uint8_t *)lk.mv_data)[8] == 0;
        if (last_ms > time_ms || (last_ms == time_ms && !last_group)) {
            /* The clock stepped back, or an old per-key entry holds this ms. */
            time_ms = last_group ? last_ms : last_ms + 1;
        }
        if (last_group && last_ms == time_ms)
            counter = get_u64_be((const uint8_t *)lk.mv_data + 9) + 1;
    } else if (mrc != 0 && mrc != MDB_NOTFOUND) {
        mdb_cursor_close(cur);
        return store_txn_fail(t, store_translate(mrc));
    }
    mdb_cursor_close(cur);
    put_u64_be(k, (uint64_t)time_ms);
    k[8] = 0;
    put_u64_be(k + 9, counter);
    return store_put(t, STORE_DB_INBOX_TIME, k, sizeof(k), bytes, t->collect.len, MDB_APPEND);
}

int ledger_inbox_time_collect(store_txn *t, const uint8_t *inbox_key, size_t n, int64_t time_ms)
{
    uint8_t item[UVARINT_BYTES_MAX + LEDGER_INBOX_KEY_BYTES_MAX];
    size_t h = put_uvarint(item, n);
    memcpy(item + h, inbox_key, n);
    return store_txn_collect_add(t, item, h + n, time_ms, write_group);
}

int ledger_inbox_time_decode(const MDB_val *k, const MDB_val *v, ledger_inbox_time_entry *out)
{
    memset(out, 0, sizeof(*out));
    if (k->mv_size <= 8 || k->mv_size > LEDGER_INBOX_TIME_KEY_BYTES_MAX)
        return TALLY_corrupt_record;
    const uint8_t *kb = k->mv_data;
    out->time_ms = (int64_t)get_u64_be(kb);
    out->group = kb[8] == 0;
    if (out->group) {
        if (k->mv_size != LEDGER_INBOX_TIME_GROUP_KEY_BYTES || v->mv_size == 0)
            return TALLY_corrupt_record;
        out->keys = v->mv_data;
        out->keys_len = v->mv_size;
    } else {
        if (v->mv_size != 0)
            return TALLY_corrupt_record;
        out->keys = kb + 8;
        out->keys_len = k->mv_size - 8;
    }
    return TALLY_ok;
}

bool ledger_inbox_time_next(const ledger_inbox_time_entry *e, size_t *pos, const uint8_t **key,
                            size_t *len, bool *corrupt)
{
    *corrupt = false;
    if (*pos >= e->keys_len)
        return false;
    if (!e->group) { /* the whole of it, once */
        *key = e->keys;
        *len = e->keys_len;
        *pos = e->keys_len;
        return true;
    }
    const uint8_t *p = e->keys + *pos, *end = e->keys + e->keys_len;
    uint64_t n;
    if (!get_uvarint(&p, end, &n) || n == 0 || n > LEDGER_INBOX_KEY_BYTES_MAX ||
        n > (uint64_t)(end - p)) {
        *corrupt = true;
        return false;
    }
    *key = p;
    *len = (size_t)n;
    *pos = (size_t)(p + n - e->keys);
    return true;
}
