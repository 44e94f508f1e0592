/*
 * history.c — the account history index (history.h): one key range of
 * (account, seq) per account in "history", then the account's newer
 * seqs in its "history_tail" record, then the newest commits' entries in
 * "history_recent", one record per commit; written in bulk per commit.
 */
#include "ledger/history.h"

#include "common/bytes.h"
#include "common/error.h"
#include "ledger/history_block.h"

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

/* A fold whose seqs are all above the account's in "history" (the
 * writer's: seqs only grow): the tail's, then the new keys', as blocks
 * (ledger/history_block.h), HISTORY_BLOCK_SEQS_MAX at a time. */
static int fold_blocks(store_txn *t, uint64_t account_id, const uint64_t *tail, uint32_t stored,
                       const uint8_t *keys, size_t n)
{
    uint64_t seqs[HISTORY_BLOCK_SEQS_MAX];
    size_t have = 0;
    int rc = TALLY_ok;
    for (size_t i = 0; i < stored + n && rc == TALLY_ok; i++) {
        seqs[have++] = i < stored ? tail[i] : get_u64_be(keys + (i - stored) * HISTORY_KEY_BYTES + 8);
        if (have == HISTORY_BLOCK_SEQS_MAX || i + 1 == stored + n) {
            rc = ledger_history_blocks_append(t, account_id, seqs, have);
            have = 0;
        }
    }
    return rc;
}

/* A fold with a seq not above the account's in "history" or its tail
 * (never the writer's; a repair could): each seq put where it falls. */
static int fold_each(store_txn *t, uint64_t account_id, const uint64_t *tail, uint32_t stored,
                     const uint8_t *keys, size_t n)
{
    int rc = TALLY_ok;
    for (size_t i = 0; i < stored + n && rc == TALLY_ok; i++)
        rc = ledger_history_block_insert(
            t, account_id, i < stored ? tail[i] : get_u64_be(keys + (i - stored) * HISTORY_KEY_BYTES + 8));
    return rc;
}

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
    rc = first > last ? fold_blocks(t, account_id, tail, stored, keys, n)
                      : fold_each(t, account_id, tail, stored, keys, n);
    return rc == TALLY_ok && stored > 0 ? tail_write(t, account_id, NULL, 0) : rc;
}

/* Sorted keys (ascending, no two alike) into "history_tail" and
 * "history": each account's run of them written (write_account), in
 * ascending account order. */
static int index_keys(store_txn *t, const uint8_t *keys, size_t n)
{
    int rc = TALLY_ok;
    for (size_t i = 0, j; i < n && rc == TALLY_ok; i = j) {
        uint64_t account_id = get_u64_be(keys + i * HISTORY_KEY_BYTES);
        for (j = i + 1; j < n && get_u64_be(keys + j * HISTORY_KEY_BYTES) == account_id; j++)
            ;
        rc = write_account(t, account_id, keys + i * HISTORY_KEY_BYTES, j - i);
    }
    return rc;
}

/* Sort n keys and drop repeats; returns how many remain. */
static size_t sort_keys(uint8_t *keys, size_t n)
{
    qsort(keys, n, HISTORY_KEY_BYTES, compare_keys);
    size_t m = 0;
    for (size_t i = 0; i < n; i++) {
        if (m > 0 && memcmp(keys + (m - 1) * HISTORY_KEY_BYTES, keys + i * HISTORY_KEY_BYTES,
                            HISTORY_KEY_BYTES) == 0)
            continue;
        if (m != i)
            memcpy(keys + m * HISTORY_KEY_BYTES, keys + i * HISTORY_KEY_BYTES, HISTORY_KEY_BYTES);
        m++;
    }
    return m;
}

int ledger_history_recent_decode(const MDB_val *v, const uint8_t **keys, size_t *n,
                                 const char **why)
{
    const uint8_t *p = v->mv_data;
    *keys = NULL;
    *n = 0;
    if (v->mv_size < 1 || p[0] != HISTORY_RECENT_FORMAT) {
        *why = "unknown format";
        return TALLY_corrupt_record;
    }
    size_t count = (v->mv_size - 1) / HISTORY_KEY_BYTES;
    if ((v->mv_size - 1) % HISTORY_KEY_BYTES != 0 || count < 1 ||
        count > HISTORY_RECENT_KEYS_MAX) {
        *why = "wrong length";
        return TALLY_corrupt_record;
    }
    for (size_t i = 1; i < count; i++) {
        if (memcmp(p + 1 + (i - 1) * HISTORY_KEY_BYTES, p + 1 + i * HISTORY_KEY_BYTES,
                   HISTORY_KEY_BYTES) >= 0) {
            *why = "keys not ascending";
            return TALLY_corrupt_record;
        }
    }
    *keys = p + 1;
    *n = count;
    return TALLY_ok;
}

/* What "history_recent" holds: records, keys in all, the last record's
 * number (0: none). Only lengths are checked here; readers check the rest. */
typedef struct recent_survey {
    size_t records, keys;
    uint64_t last;
} recent_survey;

static int survey_recent(store_txn *t, recent_survey *out)
{
    memset(out, 0, sizeof(*out));
    store_scan s;
    int rc = store_scan_begin(t, STORE_DB_HISTORY_RECENT, NULL, 0, false, &s);
    if (rc != TALLY_ok)
        return rc;
    for (; store_scan_on(&s); store_scan_next(&s)) {
        size_t value_len = s.val.mv_size;
        if (s.key.mv_size != 8 || value_len < 1 + HISTORY_KEY_BYTES ||
            (value_len - 1) % HISTORY_KEY_BYTES != 0) {
            rc = TALLY_corrupt_record;
            break;
        }
        out->records++;
        out->keys += (value_len - 1) / HISTORY_KEY_BYTES;
        out->last = get_u64_be(s.key.mv_data);
    }
    return store_scan_end(&s, rc);
}

/* The sorted keys as the next "history_recent" record. */
static int append_recent(store_txn *t, uint64_t number, const uint8_t *keys, size_t n)
{
    size_t len = 1 + n * HISTORY_KEY_BYTES;
    uint8_t *value = malloc(len), key[8];
    if (value == NULL)
        return store_txn_fail(t, TALLY_out_of_memory);
    value[0] = HISTORY_RECENT_FORMAT;
    memcpy(value + 1, keys, n * HISTORY_KEY_BYTES);
    put_u64_be(key, number);
    int rc = store_put(t, STORE_DB_HISTORY_RECENT, key, sizeof(key), value, len, MDB_APPEND);
    free(value);
    return rc;
}

/* Fold: every "history_recent" record's keys and the n new ones, sorted,
 * into "history_tail" and "history" (index_keys), and the records
 * deleted. */
static int fold_recent(store_txn *t, const uint8_t *keys, size_t n, const recent_survey *s)
{
    uint8_t *all = malloc((s->keys + n) * HISTORY_KEY_BYTES);
    if (all == NULL)
        return store_txn_fail(t, TALLY_out_of_memory);
    size_t m = 0;
    store_scan scan;
    int rc = store_scan_begin(t, STORE_DB_HISTORY_RECENT, NULL, 0, false, &scan);
    if (rc == TALLY_ok) {
        for (; store_scan_on(&scan); store_scan_next(&scan)) {
            const uint8_t *rk;
            size_t rn;
            const char *why;
            rc = ledger_history_recent_decode(&scan.val, &rk, &rn, &why);
            if (rc != TALLY_ok || m + rn > s->keys)
                break;
            memcpy(all + m * HISTORY_KEY_BYTES, rk, rn * HISTORY_KEY_BYTES);
            m += rn;
        }
        bool stopped = store_scan_on(&scan); /* more keys than the survey saw */
        rc = store_scan_end(&scan, rc);
        if (rc == TALLY_ok && (stopped || m != s->keys))
            rc = TALLY_corrupt_record;
    }
    if (rc == TALLY_ok) {
        if (n > 0)
            memcpy(all + m * HISTORY_KEY_BYTES, keys, n * HISTORY_KEY_BYTES);
        m = sort_keys(all, m + n);
        rc = index_keys(t, all, m);
    }
    free(all);
    if (rc == TALLY_ok)
        rc = store_clear(t, STORE_DB_HISTORY_RECENT);
    return store_txn_fail(t, rc);
}

/* The collector's write-back (store_collect_write_fn): the keys sorted,
 * then appended as one "history_recent" record, or, when that would make
 * more than HISTORY_RECENT_RECORDS_MAX records or HISTORY_RECENT_KEYS_MAX
 * keys (or a key is not of an event this transaction appended), folded
 * with the records into the tails and "history". */
static int write_keys(store_txn *t, uint8_t *keys, size_t len, int64_t tag)
{
    (void)tag;
    assert(len % HISTORY_KEY_BYTES == 0);
    size_t n = sort_keys(keys, len / HISTORY_KEY_BYTES);
    /* Only seqs this transaction appended are sure to be above every
     * entry stored (a record's order rule); others (a repair) fold. */
    bool fresh = t->head.known;
    for (size_t i = 0; i < n && fresh; i++)
        fresh = get_u64_be(keys + i * HISTORY_KEY_BYTES + 8) > t->head.committed_seq;
    recent_survey s;
    int rc = survey_recent(t, &s);
    if (rc == TALLY_not_found) /* not in this store: never in a writer's */
        return index_keys(t, keys, n);
    if (rc != TALLY_ok)
        return store_txn_fail(t, rc);
    if (fresh && s.records < HISTORY_RECENT_RECORDS_MAX && s.keys + n <= HISTORY_RECENT_KEYS_MAX)
        return append_recent(t, s.last + 1, keys, n);
    if (s.records == 0)
        return index_keys(t, keys, n);
    return fold_recent(t, keys, n, &s);
}

int ledger_history_fold(store_txn *t)
{
    int rc = ledger_history_flush(t);
    recent_survey s;
    if (rc == TALLY_ok)
        rc = survey_recent(t, &s);
    if (rc == TALLY_not_found)
        return TALLY_ok;
    if (rc != TALLY_ok)
        return store_txn_fail(t, rc);
    return s.records > 0 ? fold_recent(t, NULL, 0, &s) : TALLY_ok;
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

/* The first of n sorted keys whose account is at least account_id (with
 * after: above it). */
static size_t account_bound(const uint8_t *keys, size_t n, uint64_t account_id, bool after)
{
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        uint64_t a = get_u64_be(keys + mid * HISTORY_KEY_BYTES);
        if (a < account_id || (after && a == account_id))
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* Calls fn for each "history_recent" record, oldest first (with reverse:
 * newest first), until fn returns other than TALLY_ok (returned, with
 * TALLY_not_found turned into TALLY_ok by none of them); a record whose
 * key is not a record number, or whose value does not decode, is
 * TALLY_corrupt_record. A store without the database has no records. */
typedef int (*recent_fn)(const MDB_val *k, const uint8_t *keys, size_t n, void *ctx);

static int each_recent(store_txn *t, bool reverse, recent_fn fn, void *ctx)
{
    store_scan s;
    int rc = store_scan_begin(t, STORE_DB_HISTORY_RECENT, NULL, 0, reverse, &s);
    if (rc == TALLY_not_found)
        return TALLY_ok;
    if (rc != TALLY_ok)
        return rc;
    while (store_scan_on(&s) && rc == TALLY_ok) {
        const uint8_t *keys;
        size_t n;
        const char *why;
        rc = s.key.mv_size == 8 ? ledger_history_recent_decode(&s.val, &keys, &n, &why)
                                : TALLY_corrupt_record;
        if (rc == TALLY_ok)
            rc = fn(&s.key, keys, n, ctx);
        if (rc == TALLY_ok)
            store_scan_next(&s);
    }
    return store_scan_end(&s, rc);
}

/* ledger_history_seqs's walk over the recent records. */
typedef struct recent_walk {
    uint64_t account_id, cursor;
    bool reverse;
    uint64_t *seqs;
    uint32_t max, *count;
} recent_walk;

static int recent_collect(const MDB_val *k, const uint8_t *keys, size_t n, void *ctx)
{
    (void)k;
    recent_walk *w = ctx;
    size_t lo = account_bound(keys, n, w->account_id, false);
    size_t hi = account_bound(keys, n, w->account_id, true);
    for (size_t i = 0; i < hi - lo && *w->count < w->max; i++) {
        size_t at = w->reverse ? hi - 1 - i : lo + i;
        uint64_t seq = get_u64_be(keys + at * HISTORY_KEY_BYTES + 8);
        if (w->reverse ? w->cursor == 0 || seq < w->cursor : seq > w->cursor)
            w->seqs[(*w->count)++] = seq;
    }
    return *w->count < w->max ? TALLY_ok : TALLY_not_found; /* full: stop */
}

/* The account's seqs in "history_recent" appended to seqs from *count, up
 * to max: ledger_history_seqs's order and cursor rule. */
static int recent_seqs(store_txn *t, uint64_t account_id, bool reverse, uint64_t cursor,
                       uint64_t *seqs, uint32_t max, uint32_t *count)
{
    recent_walk w = {account_id, cursor, reverse, seqs, max, count};
    if (*count >= max)
        return TALLY_ok;
    int rc = each_recent(t, reverse, recent_collect, &w);
    return rc == TALLY_not_found ? TALLY_ok : rc;
}

/* Where a key sits in the recent records: the record's number, how many
 * keys it holds, and the key's index among them. */
typedef struct recent_hit {
    const uint8_t *key;
    bool found;
    uint8_t number[8];
    size_t n, at; /* with found: the record's keys, and the key's index */
} recent_hit;

static int recent_match(const MDB_val *k, const uint8_t *keys, size_t n, void *ctx)
{
    recent_hit *h = ctx;
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = memcmp(keys + mid * HISTORY_KEY_BYTES, h->key, HISTORY_KEY_BYTES);
        if (c == 0) {
            h->found = true;
            h->at = mid;
            h->n = n;
            memcpy(h->number, k->mv_data, 8);
            return TALLY_not_found; /* found: stop */
        }
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return TALLY_ok;
}

/* Whether the recent records hold key: TALLY_ok, TALLY_not_found or an
 * error. */
static int recent_find(store_txn *t, const uint8_t key[HISTORY_KEY_BYTES], recent_hit *h)
{
    memset(h, 0, sizeof(*h));
    h->key = key;
    int rc = each_recent(t, true, recent_match, h); /* newest first */
    if (rc != TALLY_ok && rc != TALLY_not_found)
        return rc;
    return h->found ? TALLY_ok : TALLY_not_found;
}

/* Remove key from its recent record (rewritten without it, or deleted
 * when it held only that key): TALLY_ok, TALLY_not_found or an error. */
static int recent_del(store_txn *t, const uint8_t key[HISTORY_KEY_BYTES])
{
    recent_hit h;
    int rc = recent_find(t, key, &h);
    if (rc != TALLY_ok)
        return rc;
    if (h.n == 1)
        return store_del(t, STORE_DB_HISTORY_RECENT, h.number, 8);
    MDB_val v;
    rc = store_get(t, STORE_DB_HISTORY_RECENT, h.number, 8, &v);
    if (rc != TALLY_ok)
        return store_txn_fail(t, rc == TALLY_not_found ? TALLY_internal : rc);
    size_t len = v.mv_size - HISTORY_KEY_BYTES, before = 1 + h.at * HISTORY_KEY_BYTES;
    uint8_t *value = malloc(len);
    if (value == NULL)
        return store_txn_fail(t, TALLY_out_of_memory);
    memcpy(value, v.mv_data, before);
    memcpy(value + before, (const uint8_t *)v.mv_data + before + HISTORY_KEY_BYTES,
           len - before);
    rc = store_put(t, STORE_DB_HISTORY_RECENT, h.number, 8, value, len, 0);
    free(value);
    return rc;
}

int ledger_history_del(store_txn *t, uint64_t account_id, uint64_t seq)
{
    int rc = ledger_history_flush(t);
    if (rc != TALLY_ok)
        return rc;
    uint8_t key[HISTORY_KEY_BYTES];
    ledger_history_key(account_id, seq, key);
    rc = ledger_history_block_del(t, account_id, seq);
    if (rc != TALLY_not_found)
        return rc;
    uint64_t tail[HISTORY_TAIL_MAX];
    uint32_t have, i = 0;
    rc = tail_read(t, account_id, tail, &have);
    while (rc == TALLY_ok && i < have && tail[i] != seq)
        i++;
    if (rc == TALLY_ok && i == have)
        return recent_del(t, key);
    if (rc != TALLY_ok)
        return rc;
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
    rc = ledger_history_block_has(t, account_id, seq);
    if (rc != TALLY_not_found)
        return rc;
    uint64_t tail[HISTORY_TAIL_MAX];
    uint32_t have;
    rc = tail_read(t, account_id, tail, &have);
    for (uint32_t i = 0; rc == TALLY_ok && i < have; i++)
        if (tail[i] == seq)
            return TALLY_ok;
    if (rc != TALLY_ok)
        return rc;
    recent_hit h;
    return recent_find(t, key, &h);
}

/* The account's seqs in "history" appended to seqs from *count, up to max:
 * ledger_history_seqs's order and cursor rule. */
static int indexed_seqs(store_txn *t, uint64_t account_id, bool reverse, uint64_t cursor,
                        uint64_t *seqs, uint32_t max, uint32_t *count)
{
    return ledger_history_block_seqs(t, account_id, reverse, cursor, seqs, max, count);
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
    /* The "history" range, then the tail (every seq of which is above
     * it), then the recent records (above both, oldest first). */
    if (!reverse) {
        rc = indexed_seqs(t, account_id, false, cursor, seqs, max, count);
        for (uint32_t i = 0; rc == TALLY_ok && i < have && *count < max; i++)
            if (tail[i] > cursor)
                seqs[(*count)++] = tail[i];
        return rc == TALLY_ok ? recent_seqs(t, account_id, false, cursor, seqs, max, count) : rc;
    }
    rc = recent_seqs(t, account_id, true, cursor, seqs, max, count);
    for (uint32_t i = have; rc == TALLY_ok && i-- > 0 && *count < max;)
        if (cursor == 0 || tail[i] < cursor)
            seqs[(*count)++] = tail[i];
    if (rc != TALLY_ok || *count >= max)
        return rc;
    return indexed_seqs(t, account_id, true, cursor, seqs, max, count);
}

int ledger_history_settled_last(store_txn *t, uint64_t account_id, uint64_t *seq)
{
    uint64_t tail[HISTORY_TAIL_MAX];
    uint32_t have;
    int rc = tail_read(t, account_id, tail, &have);
    if (rc != TALLY_ok)
        return rc;
    if (have > 0) {
        *seq = tail[have - 1];
        return TALLY_ok;
    }
    return ledger_history_indexed_last(t, account_id, seq);
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
