/*
 * invariants_inbox_time.c — the inbox time index against the inbox (the
 * inbox_time check of invariants.h): no record the sweeps would never
 * remove, no entry naming what is not there.
 *
 * Both sides are summed up as multiset fingerprints of the inbox keys (as
 * the history index is, invariants_log.c): the inbox walk of
 * audit_check_records sums the records' keys, this walk the keys the
 * entries name. Equal fingerprints: every record is named exactly once.
 * When they differ, a second pass names what is wrong: records no entry
 * names (found in a sorted array of the named keys' hashes), keys named
 * twice, and named keys without a record (unless the sweep's time has
 * passed theirs: inbox_swept).
 */
#include "ledger/invariants_audit.h"

#include "common/error.h"
#include "ledger/inbox_time.h"
#include "ledger/pair_key.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Keyed hash k of an inbox key: 8 bytes at a time through the mixer. */
static uint64_t key_hash(const audit *a, int k, const uint8_t *p, size_t len)
{
    uint64_t x = audit_mix64(a->history_keys[k] ^ len);
    for (size_t i = 0; i < len; i += 8) {
        uint64_t w = 0;
        size_t n = len - i < 8 ? len - i : 8;
        memcpy(&w, p + i, n);
        x = audit_mix64(x ^ w);
    }
    return x;
}

void audit_inbox_key_add(const audit *a, history_sums *s, const void *key, size_t len)
{
    s->count++;
    for (int k = 0; k < 2; k++)
        s->sum[k] += key_hash(a, k, key, len);
}

static void name_key(const uint8_t *key, size_t len, char out[256])
{
    tally_str consumer, k;
    char text[LEDGER_INBOX_UUID_TEXT_BYTES];
    if (ledger_inbox_key_split(key, len, &consumer, &k, text))
        snprintf(out, 256, "inbox:%.*s/%.*s", (int)consumer.len, consumer.ptr, (int)k.len, k.ptr);
    else
        snprintf(out, 256, "inbox_time");
}

/* The second pass's state: the named keys' hashes. */
typedef struct named_keys {
    uint64_t *hashes;
    size_t count, cap;
} named_keys;

typedef struct index_walk {
    history_sums sums;
    named_keys *named; /* NULL in the first pass */
} index_walk;

static void index_entry(audit *a, const MDB_val *k, const MDB_val *v, void *ctx)
{
    index_walk *w = ctx;
    ledger_inbox_time_entry e;
    char name[256];
    if (ledger_inbox_time_decode(k, v, &e) != TALLY_ok) {
        if (!w->named)
            audit_report(a, "inbox_time", "inbox_time", "an entry is corrupt");
        return;
    }
    ledger_inbox_time_iter it;
    ledger_inbox_time_iter_init(&it, &e);
    while (ledger_inbox_time_next(&it)) {
        const uint8_t *key = it.key;
        size_t len = it.len;
        audit_inbox_key_add(a, &w->sums, key, len);
        if (!w->named)
            continue;
        if (w->named->count == w->named->cap) {
            size_t cap = w->named->cap ? 2 * w->named->cap : 4096;
            uint64_t *h = realloc(w->named->hashes, cap * sizeof(*h));
            if (!h) {
                a->fault = TALLY_out_of_memory;
                return;
            }
            w->named->hashes = h;
            w->named->cap = cap;
        }
        w->named->hashes[w->named->count++] = key_hash(a, 0, key, len);
        MDB_val rec;
        int rc = store_get(a->t, STORE_DB_INBOX, key, len, &rec);
        if (rc == TALLY_not_found && e.time_ms > a->inbox_swept_ms) {
            name_key(key, len, name);
            audit_report(a, "inbox_time", name,
                         "named by the entry of %" PRId64 " but has no inbox record", e.time_ms);
        } else if (rc != TALLY_ok && rc != TALLY_not_found) {
            a->fault = rc;
            return;
        }
    }
    if (it.corrupt && !w->named)
        audit_report(a, "inbox_time", "inbox_time", "the key list of the entry of %" PRId64
                     " is corrupt", e.time_ms);
}

static int cmp_u64(const void *x, const void *y)
{
    uint64_t a = *(const uint64_t *)x, b = *(const uint64_t *)y;
    return a < b ? -1 : a > b;
}

/* Second pass over the inbox: records whose key no entry names, or more
 * than one does. */
static void record_entry(audit *a, const MDB_val *k, const MDB_val *v, void *ctx)
{
    (void)v;
    const named_keys *nk = ctx;
    uint64_t h = key_hash(a, 0, k->mv_data, k->mv_size);
    const uint64_t *hit = bsearch(&h, nk->hashes, nk->count, sizeof(h), cmp_u64);
    size_t times = 0;
    if (hit) {
        const uint64_t *lo = hit, *hi = hit;
        while (lo > nk->hashes && lo[-1] == h)
            lo--;
        while (hi + 1 < nk->hashes + nk->count && hi[1] == h)
            hi++;
        times = (size_t)(hi - lo) + 1;
    }
    if (times == 1)
        return;
    char name[256];
    name_key(k->mv_data, k->mv_size, name);
    if (times == 0)
        audit_report(a, "inbox_time", name, "has no inbox_time entry: retention would never "
                     "remove it");
    else
        audit_report(a, "inbox_time", name, "is named by %zu inbox_time entries", times);
}

int audit_check_inbox_time(audit *a)
{
    index_walk w = {{0}, NULL};
    int rc = audit_walk_db(a, STORE_DB_INBOX_TIME, "inbox time", NULL, index_entry, &w);
    if (rc != TALLY_ok || memcmp(&w.sums, &a->inbox_keys, sizeof(w.sums)) == 0)
        return rc;
    named_keys nk = {NULL, 0, 0};
    w = (index_walk){{0}, &nk};
    rc = audit_walk_db(a, STORE_DB_INBOX_TIME, "inbox time names", NULL, index_entry, &w);
    if (rc == TALLY_ok) {
        qsort(nk.hashes, nk.count, sizeof(*nk.hashes), cmp_u64);
        rc = audit_walk_db(a, STORE_DB_INBOX, "inbox indexed", NULL, record_entry, &nk);
    }
    free(nk.hashes);
    return rc;
}
