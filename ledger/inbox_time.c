/*
 * inbox_time.c — the inbox time index: one entry per commit group (layout
 * in inbox_time.h).
 */
#include "ledger/inbox_time.h"

#include "common/error.h"

#include <string.h>

size_t ledger_inbox_time_encode(const uint8_t *prev, size_t prev_len, const uint8_t *key,
                                size_t len, uint8_t *out)
{
    size_t shared = 0;
    while (shared < prev_len && shared < len && prev[shared] == key[shared])
        shared++;
    size_t n = put_uvarint(out, shared);
    n += put_uvarint(out + n, len - shared);
    memcpy(out + n, key + shared, len - shared);
    return n + len - shared;
}

/* The key after the table's last (time_ms, or later: see inbox_time.h). */
static int next_group_key(store_txn *t, int64_t time_ms,
                          uint8_t k[LEDGER_INBOX_TIME_GROUP_KEY_BYTES])
{
    uint64_t counter = 0;
    store_scan last;
    int rc = store_scan_begin(t, STORE_DB_INBOX_TIME, NULL, 0, true, &last);
    if (rc != TALLY_ok)
        return rc;
    const MDB_val lk = last.key;
    if (store_scan_on(&last) && lk.mv_size >= 8) {
        int64_t last_ms = (int64_t)get_u64_be(lk.mv_data);
        bool last_group = lk.mv_size == LEDGER_INBOX_TIME_GROUP_KEY_BYTES &&
                          ((const uint8_t *)lk.mv_data)[8] == 0;
        if (last_ms > time_ms || (last_ms == time_ms && !last_group))
            time_ms = last_group ? last_ms : last_ms + 1; /* a clock step back, or a
                                                             per-key entry at this ms */
        if (last_group && last_ms == time_ms)
            counter = get_u64_be((const uint8_t *)lk.mv_data + 9) + 1;
    }
    rc = store_scan_end(&last, TALLY_ok);
    if (rc != TALLY_ok)
        return rc;
    put_u64_be(k, (uint64_t)time_ms);
    k[8] = 0;
    put_u64_be(k + 9, counter);
    return TALLY_ok;
}

/* The top-level commit's write-back: the group's keys (collected as
 * uvarint length | key), front-coded, in entries that fit a node. */
static int write_group(store_txn *t, uint8_t *bytes, size_t len, int64_t time_ms)
{
    uint8_t k[LEDGER_INBOX_TIME_GROUP_KEY_BYTES];
    uint8_t chunk[LEDGER_INBOX_TIME_VALUE_BYTES_MAX];
    uint8_t item[2 * UVARINT_BYTES_MAX + LEDGER_INBOX_KEY_BYTES_MAX];
    int rc = next_group_key(t, time_ms, k);
    if (rc != TALLY_ok)
        return store_txn_fail(t, rc);
    const uint8_t *p = bytes, *end = bytes + len, *prev = NULL;
    size_t prev_len = 0, used = 0;
    while (rc == TALLY_ok && p < end) {
        uint64_t n = 0;
        if (!get_uvarint(&p, end, &n) || n > (uint64_t)(end - p))
            return store_txn_fail(t, TALLY_internal); /* collect wrote them well formed */
        size_t m = ledger_inbox_time_encode(prev, prev_len, p, (size_t)n, item);
        if (used + m > sizeof(chunk)) { /* full: this entry ends, the next begins */
            rc = store_put(t, STORE_DB_INBOX_TIME, k, sizeof(k), chunk, used, MDB_APPEND);
            put_u64_be(k + 9, get_u64_be(k + 9) + 1);
            used = 0;
            m = ledger_inbox_time_encode(NULL, 0, p, (size_t)n, item);
        }
        memcpy(chunk + used, item, m);
        used += m;
        prev = p;
        prev_len = (size_t)n;
        p += n;
    }
    if (rc == TALLY_ok && used > 0)
        rc = store_put(t, STORE_DB_INBOX_TIME, k, sizeof(k), chunk, used, MDB_APPEND);
    return rc;
}

int ledger_inbox_time_collect(store_txn *t, const uint8_t *inbox_key, size_t n, int64_t time_ms)
{
    uint8_t item[UVARINT_BYTES_MAX + LEDGER_INBOX_KEY_BYTES_MAX];
    size_t h = put_uvarint(item, n);
    memcpy(item + h, inbox_key, n);
    return store_txn_collect_add(t, STORE_COLLECT_INBOX_TIME, item, h + n, time_ms,
                                 write_group);
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

void ledger_inbox_time_iter_init(ledger_inbox_time_iter *it, const ledger_inbox_time_entry *e)
{
    it->e = e;
    it->pos = 0;
    it->len = 0;
    it->corrupt = false;
}

bool ledger_inbox_time_next(ledger_inbox_time_iter *it)
{
    const ledger_inbox_time_entry *e = it->e;
    if (it->pos >= e->keys_len)
        return false;
    if (!e->group) { /* the whole of it, once */
        memcpy(it->key, e->keys, e->keys_len);
        it->len = e->keys_len;
        it->pos = e->keys_len;
        return true;
    }
    const uint8_t *p = e->keys + it->pos, *end = e->keys + e->keys_len;
    uint64_t shared, rest;
    if (!get_uvarint(&p, end, &shared) || !get_uvarint(&p, end, &rest) || shared > it->len ||
        rest > LEDGER_INBOX_KEY_BYTES_MAX - shared || shared + rest == 0 ||
        rest > (uint64_t)(end - p)) {
        it->corrupt = true;
        return false;
    }
    memcpy(it->key + shared, p, rest);
    it->len = (size_t)(shared + rest);
    it->pos = (size_t)(p + rest - e->keys);
    return true;
}
