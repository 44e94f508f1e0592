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

