/*
 * subscriber_dlq.c — the dead-letter queue of durable subscribers
 * (subscriber.h, docs/SUBSCRIBERS.md): listing, marking for replay (the
 * replay marks are the index a fetch walks instead of the whole queue),
 * discarding, and the retention that removes dead letters parked too long.
 */
#include "log/subscriber.h"
#include "log/subscriber_record.h"

#include "common/error.h"

#include <stdlib.h>
#include <string.h>

/* ---- dead letters ---- */

typedef struct dlq_page {
    sub_dead_letter_fn fn;
    void *ctx;
    uint32_t limit, seen;
    uint64_t next;
} dlq_page;

static int dlq_page_one(uint64_t seq, const MDB_val *v, void *ctx)
{
    dlq_page *p = ctx;
    if (p->seen == p->limit) {
        p->next = seq; /* there is more */
        return 1;
    }
    sub_record r;
    int rc = sub_record_decode(v, true, &r);
    if (rc != TALLY_ok)
        return rc;
    const uint8_t *text = (const uint8_t *)v->mv_data + DEAD_VALUE_HEAD;
    sub_dead_letter d = {seq, r.attempts, r.when_ms, r.replaying,
                         {(const char *)text, r.error_len}};
    p->seen++;
    return p->fn(&d, p->ctx);
}

int sub_dlq_list(store_txn *t, tally_str name, uint64_t after_seq, uint32_t limit,
                 sub_dead_letter_fn fn, void *ctx, uint64_t *next)
{
    sub_state s;
    *next = 0;
    int rc = sub_cursor_load(t, name, &s);
    if (rc != TALLY_ok)
        return rc;
    if (after_seq == UINT64_MAX)
        return TALLY_ok;
    dlq_page p = {fn, ctx, limit, 0, 0};
    rc = sub_records_each(t, 0, name, after_seq + 1, dlq_page_one, &p);
    if (rc == 1 && p.next) {
        rc = TALLY_ok;
        *next = p.next - 1; /* pass as after_seq: the page ends before p.next */
    }
    return rc;
}

/* ---- replay marks ---- */

int sub_mark_set(store_txn *t, tally_str name, uint64_t seq)
{
    uint8_t k[KEY_BYTES_MAX];
    return store_put(t, STORE_DB_CURSORS, k, sub_seq_key(k, KIND_MARK, name, seq), "", 0, 0);
}

int sub_mark_clear(store_txn *t, tally_str name, uint64_t seq)
{
    uint8_t k[KEY_BYTES_MAX];
    int rc = store_del(t, STORE_DB_CURSORS, k, sub_seq_key(k, KIND_MARK, name, seq));
    return rc == TALLY_not_found ? TALLY_ok : rc;
}

static int collect_replaying(uint64_t seq, const MDB_val *v, void *ctx)
{
    sub_record r;
    int rc = sub_record_decode(v, true, &r);
    if (rc != TALLY_ok || !r.replaying)
        return rc;
    return sub_seq_collect_one(seq, v, ctx);
}

/* A store written before the marks has dead letters replaying without
 * one: a fetch that finds no mark while the cursor counts replays walks the
 * dlq once and marks them (from then on the marks are kept). */
int sub_marks_repair(store_txn *t, tally_str name)
{
    sub_seq_list l = {.upto = UINT64_MAX};
    int rc = sub_records_each(t, 0, name, 0, collect_replaying, &l);
    for (size_t i = 0; rc == TALLY_ok && i < l.count; i++)
        rc = sub_mark_set(t, name, l.seqs[i]);
    free(l.seqs);
    return rc;
}

static int mark_replay(store_txn *t, sub_state *s, uint64_t seq, bool must_exist)
{
    sub_record r;
    tally_str name = tally_str_from(s->name);
    int rc = sub_record_load(t, 0, name, seq, &r);
    if (rc == TALLY_not_found)
        return must_exist ? TALLY_dead_letter_not_found : TALLY_ok;
    if (rc != TALLY_ok || r.replaying)
        return rc;
    r.replaying = true;
    s->replaying++;
    rc = sub_record_save(t, 0, name, seq, &r);
    return rc == TALLY_ok ? sub_mark_set(t, name, seq) : rc;
}

int sub_dlq_replay(store_txn *t, tally_str name, bool one, uint64_t seq, int64_t now_ms,
                   uint32_t *replaying)
{
    sub_state s;
    int rc = sub_cursor_load(t, name, &s);
    if (rc != TALLY_ok)
        return rc;
    if (one) {
        rc = mark_replay(t, &s, seq, true);
    } else {
        sub_seq_list l = {0};
        rc = sub_seqs_collect(t, 0, name, UINT64_MAX, &l);
        for (size_t i = 0; rc == TALLY_ok && i < l.count; i++)
            rc = mark_replay(t, &s, l.seqs[i], false);
        free(l.seqs);
    }
    *replaying = s.replaying;
    s.updated_ms = now_ms;
    return rc == TALLY_ok ? sub_cursor_save(t, &s) : rc;
}

int sub_dlq_discard(store_txn *t, tally_str name, uint64_t seq, int64_t now_ms)
{
    sub_state s;
    sub_record r;
    int rc = sub_cursor_load(t, name, &s);
    if (rc == TALLY_ok)
        rc = sub_record_load(t, 0, name, seq, &r);
    if (rc == TALLY_not_found)
        return TALLY_dead_letter_not_found;
    if (rc != TALLY_ok)
        return rc;
    rc = sub_record_delete(t, 0, name, seq);
    s.dead_letters--;
    if (r.replaying) {
        s.replaying--;
        if (rc == TALLY_ok)
            rc = sub_mark_clear(t, name, seq);
    }
    s.updated_ms = now_ms;
    return rc == TALLY_ok ? sub_cursor_save(t, &s) : rc;
}


/* ---- retention ---- */

#define EXPIRE_VISITS_PER_REMOVAL 16

typedef struct expiring {
    char name[TALLY_SUBSCRIBER_NAME_BYTES_MAX];
    size_t name_len;
    uint64_t seq;
    sub_record r;
} expiring;

typedef struct expire_scan {
    int64_t before_ms;
    uint32_t max, visits_left;
    expiring *found;
    uint32_t count;
} expire_scan;

/* One dlq entry: kept as expiring when it is due. 1 stops the scan. */
static int expire_visit(const MDB_val *key, const MDB_val *val, expire_scan *x)
{
    const uint8_t *k = key->mv_data;
    if (key->mv_size < 1 + 1 + 8 || key->mv_size > sizeof(((sub_dlq_position *)0)->key) ||
        k[key->mv_size - 9] != 0)
        return TALLY_corrupt_record;
    expiring *e = &x->found[x->count];
    int rc = sub_record_decode(val, true, &e->r);
    if (rc != TALLY_ok)
        return rc;
    if (e->r.when_ms < x->before_ms && !e->r.replaying) {
        e->name_len = key->mv_size - 9;
        memcpy(e->name, k, e->name_len);
        e->seq = get_u64_be(k + key->mv_size - 8);
        x->count++;
    }
    return --x->visits_left == 0 || x->count == x->max ? 1 : TALLY_ok;
}

/* Collect due dead letters from pos on; pos moves past what was read. */
static int expire_collect(store_txn *t, sub_dlq_position *pos, expire_scan *x)
{
    MDB_cursor *cur;
    int rc = store_cursor_open(t, STORE_DB_DLQ, &cur);
    if (rc != TALLY_ok)
        return rc;
    MDB_val key = {pos->len, pos->key}, val;
    int mrc = mdb_cursor_get(cur, &key, &val, pos->len ? MDB_SET_RANGE : MDB_FIRST);
    while (mrc == 0 && rc == TALLY_ok) {
        rc = expire_visit(&key, &val, x);
        mrc = mdb_cursor_get(cur, &key, &val, MDB_NEXT);
    }
    if (rc == 1 && mrc == 0 && key.mv_size <= sizeof(pos->key)) {
        /* stopped early: the next pass starts at the next entry */
        rc = TALLY_ok;
        memcpy(pos->key, key.mv_data, key.mv_size);
        pos->len = key.mv_size;
    } else if (rc == TALLY_ok || rc == 1) {
        rc = mrc == 0 || mrc == MDB_NOTFOUND ? TALLY_ok : store_translate(mrc);
        pos->len = 0; /* the end: from the start next time */
    }
    mdb_cursor_close(cur);
    return rc;
}

static int expire_one(store_txn *t, const expiring *e, sub_dlq_expired_fn fn, void *ctx)
{
    tally_str name = {e->name, e->name_len};
    sub_state s;
    int rc = sub_cursor_load(t, name, &s);
    if (rc == TALLY_subscriber_not_found)
        rc = TALLY_corrupt_record; /* a dead letter of no subscriber */
    if (rc != TALLY_ok)
        return rc;
    sub_dead_letter d = {e->seq, e->r.attempts, e->r.when_ms, false,
                         {e->r.error, e->r.error_len}};
    rc = fn(name, &d, ctx);
    if (rc == TALLY_ok)
        rc = sub_record_delete(t, 0, name, e->seq);
    s.dead_letters--;
    return rc == TALLY_ok ? sub_cursor_save(t, &s) : rc;
}

int sub_dlq_expire(store_txn *t, int64_t before_ms, uint32_t max, sub_dlq_position *pos,
                   sub_dlq_expired_fn fn, void *ctx, uint32_t *removed)
{
    *removed = 0;
    if (max == 0)
        return TALLY_ok;
    expire_scan x = {before_ms, max, max * EXPIRE_VISITS_PER_REMOVAL,
                     calloc(max, sizeof(expiring)), 0};
    if (x.found == NULL)
        return TALLY_out_of_memory;
    int rc = expire_collect(t, pos, &x);
    for (uint32_t i = 0; rc == TALLY_ok && i < x.count; i++) {
        rc = expire_one(t, &x.found[i], fn, ctx);
        *removed += rc == TALLY_ok;
    }
    free(x.found);
    return rc;
}
