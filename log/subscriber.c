/*
 * subscriber.c — durable subscribers over the cursors and dlq databases.
 *
 * Layout and rules: subscriber.h and docs/SUBSCRIBERS.md. Each operation
 * reads what it needs (collecting the seqs it will touch while a cursor is
 * open), checks, and only then writes, so a refusal writes nothing.
 * sub_fetch is in subscriber_fetch.c, the settings, in-flight view and
 * expiry in subscriber_settings.c, partitions in subscriber_partition.c.
 */
#include "log/subscriber.h"
#include "log/subscriber_partition.h"
#include "log/subscriber_record.h"

#include "common/error.h"
#include "log/log.h"

#include <stdlib.h>
#include <string.h>

/* ---- create, get, list, delete ---- */

typedef struct count_ctx {
    uint64_t count;
} count_ctx;

static int count_one(const sub_state *s, void *ctx)
{
    (void)s;
    ((count_ctx *)ctx)->count++;
    return 0;
}

int sub_event_visit(store_txn *t, uint64_t seq, void (*fn)(const log_event *ev, void *ctx),
                    void *ctx)
{
    msgpack_unpacked up;
    log_event ev;
    msgpack_unpacked_init(&up);
    int rc = log_event_load(t, seq, &up, &ev);
    if (rc == TALLY_ok)
        fn(&ev, ctx);
    msgpack_unpacked_destroy(&up);
    return rc;
}

static void note_time(const log_event *ev, void *ctx) { *(int64_t *)ctx = ev->time_ms; }

static int event_time(store_txn *t, uint64_t seq, int64_t *time_ms)
{
    *time_ms = 0;
    int rc = sub_event_visit(t, seq, note_time, time_ms);
    return rc == TALLY_not_found ? TALLY_corrupt_record : rc;
}

/* The log's head and its first kept seq. */
static int log_bounds(store_txn *t, log_head *head, uint64_t *first)
{
    int rc = log_head_get(t, head);
    return rc == TALLY_ok ? log_first_seq(t, first) : rc;
}

/* The seq before the first event committed at or after time_ms. */
static int floor_for_time(store_txn *t, int64_t time_ms, uint64_t *floor)
{
    log_head head;
    uint64_t first;
    int rc = log_bounds(t, &head, &first);
    if (rc != TALLY_ok)
        return rc;
    if (head.seq == 0) {
        *floor = 0;
        return TALLY_ok;
    }
    uint64_t lo = first, hi = head.seq + 1; /* answer in [lo, hi]; times never go back */
    while (lo < hi) {
        uint64_t mid = lo + (hi - lo) / 2;
        int64_t tm;
        rc = event_time(t, mid, &tm);
        if (rc != TALLY_ok)
            return rc;
        if (tm >= time_ms)
            hi = mid;
        else
            lo = mid + 1;
    }
    *floor = lo - 1;
    return TALLY_ok;
}

static int start_floor(store_txn *t, const sub_start *start, uint64_t *floor)
{
    log_head head;
    uint64_t first;
    int rc = log_bounds(t, &head, &first);
    if (rc != TALLY_ok)
        return rc;
    switch (start->kind) {
    case SUB_START_BEGINNING:
        *floor = first ? first - 1 : head.seq;
        return TALLY_ok;
    case SUB_START_NOW:
        *floor = head.seq;
        return TALLY_ok;
    case SUB_START_SEQ:
        if (start->seq == 0)
            return TALLY_invalid_argument;
        if (start->seq > head.seq + 1)
            return TALLY_seq_beyond_head;
        *floor = start->seq - 1;
        if (first && *floor < first - 1)
            *floor = first - 1; /* below the retention floor: from the oldest kept */
        return TALLY_ok;
    case SUB_START_TIME:
        return floor_for_time(t, start->time_ms, floor);
    }
    return TALLY_invalid_argument;
}

int sub_create(store_txn *t, tally_str name, const sub_start *start, const sub_config *cfg,
               int64_t now_ms, bool *created, sub_state *out)
{
    *created = false;
    int rc = sub_cursor_load(t, name, out);
    if (rc == TALLY_ok)
        return sub_config_equal(&out->config, cfg) ? TALLY_ok
                                                : TALLY_subscriber_exists_with_different_config;
    if (rc != TALLY_subscriber_not_found)
        return rc;
    rc = sub_config_check(cfg);
    if (rc != TALLY_ok)
        return rc;
    count_ctx n = {0};
    rc = sub_list(t, count_one, &n);
    if (rc != TALLY_ok)
        return rc;
    if (n.count >= TALLY_SUBSCRIBERS_MAX)
        return TALLY_too_many_subscribers;
    uint64_t floor;
    rc = start_floor(t, start, &floor);
    if (rc != TALLY_ok)
        return rc;
    memset(out, 0, sizeof(*out));
    memcpy(out->name, name.ptr, name.len);
    out->config = *cfg;
    memset(out->config.backoff_ms + cfg->backoff_count, 0,
           (TALLY_SUB_BACKOFF_STEPS_MAX - cfg->backoff_count) * sizeof(uint32_t));
    out->ack_floor = out->delivered_seq = floor;
    out->created_ms = out->updated_ms = out->active_ms = now_ms;
    rc = sub_cursor_save(t, out);
    *created = rc == TALLY_ok;
    return rc;
}

int sub_get(store_txn *t, tally_str name, sub_state *out)
{
    return sub_cursor_load(t, name, out);
}

typedef struct list_walk {
    sub_list_fn fn;
    void *ctx;
} list_walk;

static int list_entry(const MDB_val *key, const MDB_val *val, void *ctx)
{
    list_walk *w = ctx;
    sub_state s;
    tally_str name = {(const char *)key->mv_data + 1, key->mv_size - 1};
    int rc = sub_name_check(name) == TALLY_ok ? sub_cursor_decode(val, name, &s) : TALLY_corrupt_record;
    return rc == TALLY_ok ? w->fn(&s, w->ctx) : rc;
}

int sub_list(store_txn *t, sub_list_fn fn, void *ctx)
{
    static const uint8_t first = KIND_CURSOR;
    list_walk w = {fn, ctx};
    return sub_each_with_prefix(t, STORE_DB_CURSORS, &first, 1, 1, 0, list_entry, &w);
}

static int delete_all(store_txn *t, char kind, tally_str name, sub_seq_list *l)
{
    int rc = sub_seqs_collect(t, kind, name, UINT64_MAX, l);
    for (size_t i = 0; rc == TALLY_ok && i < l->count; i++)
        rc = sub_record_delete(t, kind, name, l->seqs[i]);
    return rc;
}

int sub_delete(store_txn *t, tally_str name)
{
    sub_state s;
    int rc = sub_cursor_load(t, name, &s);
    if (rc != TALLY_ok)
        return rc;
    sub_seq_list l = {0};
    rc = delete_all(t, KIND_FLIGHT, name, &l);
    if (rc == TALLY_ok)
        rc = delete_all(t, KIND_REPLAY, name, &l);
    if (rc == TALLY_ok)
        rc = delete_all(t, KIND_MARK, name, &l);
    if (rc == TALLY_ok)
        rc = delete_all(t, 0, name, &l);
    if (rc == TALLY_ok)
        rc = sub_partitions_delete(t, name);
    free(l.seqs);
    if (rc == TALLY_ok) {
        uint8_t k[KEY_BYTES_MAX];
        rc = store_del(t, STORE_DB_CURSORS, k, sub_cursor_key(k, name));
    }
    return rc;
}

/* ---- ack, nak, park ---- */

static sub_park_observer park_observer;

void sub_park_observer_set(sub_park_observer fn) { park_observer = fn; }

int sub_park_record(store_txn *t, sub_state *s, char kind, uint64_t seq, const sub_record *r,
                    tally_str reason, int64_t now_ms)
{
    sub_record dead = *r;
    dead.when_ms = now_ms;
    dead.replaying = false;
    sub_record_set_error(&dead, reason);
    int rc = sub_record_delete(t, kind, tally_str_from(s->name), seq);
    if (rc == TALLY_ok)
        rc = sub_record_save(t, 0, tally_str_from(s->name), seq, &dead);
    s->in_flight--;
    s->dead_letters++;
    if (rc == TALLY_ok && park_observer)
        park_observer(s->name, seq, dead.attempts, reason);
    return rc;
}

/* Which in-flight record holds seq: 'f', 'r', or 0 (none). */
static int flight_find(store_txn *t, tally_str name, uint64_t seq, char *kind, sub_record *r)
{
    *kind = 0;
    static const char kinds[2] = {KIND_FLIGHT, KIND_REPLAY};
    for (int i = 0; i < 2; i++) {
        int rc = sub_record_load(t, kinds[i], name, seq, r);
        if (rc == TALLY_ok) {
            *kind = kinds[i];
            return TALLY_ok;
        }
        if (rc != TALLY_not_found)
            return rc;
    }
    return TALLY_ok;
}

static int delete_upto(store_txn *t, char kind, tally_str name, uint64_t upto, sub_seq_list *l,
                       sub_state *s, uint32_t *acked)
{
    int rc = sub_seqs_collect(t, kind, name, upto, l);
    for (size_t i = 0; rc == TALLY_ok && i < l->count; i++) {
        rc = sub_record_delete(t, kind, name, l->seqs[i]);
        s->in_flight--;
        (*acked)++;
    }
    return rc;
}

int sub_ack(store_txn *t, tally_str name, uint64_t upto, const uint64_t *done,
            uint32_t done_count, int64_t now_ms, uint32_t *acked, sub_state *after)
{
    *acked = 0;
    sub_state *s = after;
    log_head head;
    int rc = sub_cursor_load(t, name, s);
    if (rc == TALLY_ok)
        rc = log_head_get(t, &head);
    if (rc != TALLY_ok)
        return rc;
    if (upto > head.seq)
        return TALLY_seq_beyond_head;
    if (upto > 0) { /* it would acknowledge other instances' partitions, queued ones too */
        sub_partitions *g = malloc(sizeof(*g));
        rc = g ? sub_partitions_load(t, name, g) : TALLY_out_of_memory;
        if (rc == TALLY_ok && g->count > 1)
            rc = TALLY_invalid_argument;
        free(g);
        if (rc != TALLY_ok)
            return rc;
    }
    uint64_t handed = upto > s->delivered_seq ? upto : s->delivered_seq;
    for (uint32_t i = 0; i < done_count; i++)
        if (done[i] == 0 || done[i] > handed)
            return TALLY_seq_not_delivered;
    sub_seq_list l = {0};
    if (upto > 0) {
        rc = delete_upto(t, KIND_FLIGHT, name, upto, &l, s, acked);
        if (rc == TALLY_ok)
            rc = delete_upto(t, KIND_REPLAY, name, upto, &l, s, acked);
        if (upto > s->delivered_seq)
            s->delivered_seq = upto; /* events never fetched, acknowledged all the same */
    }
    free(l.seqs);
    for (uint32_t i = 0; rc == TALLY_ok && i < done_count; i++) {
        char kind;
        sub_record r;
        rc = flight_find(t, name, done[i], &kind, &r);
        if (rc != TALLY_ok || kind == 0)
            continue; /* already acknowledged or parked: acks are retried freely */
        rc = sub_record_delete(t, kind, name, done[i]);
        s->in_flight--;
        (*acked)++;
    }
    if (rc == TALLY_ok)
        rc = sub_floor_update(t, s);
    s->updated_ms = s->active_ms = now_ms;
    return rc == TALLY_ok ? sub_cursor_save(t, s) : rc;
}

int sub_nak(store_txn *t, tally_str name, uint64_t seq, bool has_delay, uint32_t delay_ms,
            tally_str error, int64_t now_ms, uint32_t *attempt, int64_t *deliver_after_ms)
{
    sub_state s;
    char kind;
    sub_record r;
    int rc = sub_cursor_load(t, name, &s);
    if (rc == TALLY_ok)
        rc = flight_find(t, name, seq, &kind, &r);
    if (rc != TALLY_ok)
        return rc;
    if (kind == 0)
        return TALLY_seq_not_in_flight;
    r.when_ms = now_ms + (has_delay ? delay_ms : sub_redelivery_delay(&s.config, r.attempts));
    sub_record_set_error(&r, error);
    *attempt = r.attempts;
    *deliver_after_ms = r.when_ms;
    return sub_record_save(t, kind, name, seq, &r);
}

int sub_progress(store_txn *t, tally_str name, const uint64_t *seqs, uint32_t count,
                 tally_str instance, int64_t now_ms, uint32_t *extended,
                 int64_t *deliver_after_ms)
{
    sub_state s;
    int rc = sub_cursor_load(t, name, &s);
    *extended = 0;
    *deliver_after_ms = now_ms + s.config.ack_wait_ms;
    for (uint32_t i = 0; rc == TALLY_ok && i < count; i++) {
        char kind;
        sub_record r;
        rc = flight_find(t, name, seqs[i], &kind, &r);
        if (rc != TALLY_ok || kind == 0)
            continue; /* acked, parked, or never handed out: nothing to hold */
        if (instance.len > 0 && (r.instance_len != instance.len ||
                                 memcmp(r.instance, instance.ptr, instance.len) != 0))
            continue; /* its lease ended and another instance holds it now */
        if (r.when_ms < *deliver_after_ms) {
            r.when_ms = *deliver_after_ms;
            rc = sub_record_save(t, kind, name, seqs[i], &r);
        }
        (*extended)++;
    }
    if (rc == TALLY_ok && instance.len > 0) /* its partitions stay its own too */
        rc = sub_partitions_renew(t, name, instance, now_ms, s.config.ack_wait_ms);
    return rc;
}

int sub_park(store_txn *t, tally_str name, uint64_t seq, tally_str reason, int64_t now_ms,
             sub_state *after)
{
    char kind;
    sub_record r;
    int rc = sub_cursor_load(t, name, after);
    if (rc == TALLY_ok)
        rc = flight_find(t, name, seq, &kind, &r);
    if (rc != TALLY_ok)
        return rc;
    if (kind == 0) {
        rc = sub_record_load(t, 0, name, seq, &r);
        return rc == TALLY_not_found ? TALLY_seq_not_in_flight : rc; /* parked already: ok */
    }
    rc = sub_park_record(t, after, kind, seq, &r, reason, now_ms);
    if (rc == TALLY_ok && kind == KIND_FLIGHT)
        rc = sub_floor_update(t, after);
    after->updated_ms = after->active_ms = now_ms;
    return rc == TALLY_ok ? sub_cursor_save(t, after) : rc;
}

/* ---- metrics ---- */

static int oldest_parked_one(uint64_t seq, const MDB_val *v, void *ctx)
{
    (void)seq;
    int64_t *oldest = ctx;
    sub_record r;
    int rc = sub_record_decode(v, true, &r);
    if (rc == TALLY_ok && (*oldest == 0 || r.when_ms < *oldest))
        *oldest = r.when_ms;
    return rc;
}

int sub_dlq_oldest_parked(store_txn *t, tally_str name, int64_t *parked_ms)
{
    *parked_ms = 0;
    return sub_records_each(t, 0, name, 0, oldest_parked_one, parked_ms);
}

int sub_metrics_get(store_txn *t, const sub_state *s, int64_t now_ms, sub_metrics *out)
{
    log_head head;
    uint64_t first;
    memset(out, 0, sizeof(*out));
    int rc = log_head_get(t, &head);
    if (rc == TALLY_ok)
        rc = log_first_seq(t, &first);
    if (rc != TALLY_ok)
        return rc;
    out->head_seq = head.seq;
    out->pending = head.seq > s->ack_floor ? head.seq - s->ack_floor : 0;
    if (out->pending == 0)
        return TALLY_ok;
    uint64_t oldest = s->ack_floor + 1 < first ? first : s->ack_floor + 1;
    int64_t time_ms;
    rc = event_time(t, oldest, &time_ms);
    if (rc == TALLY_ok && now_ms > time_ms)
        out->oldest_unacked_age_s = (now_ms - time_ms) / 1000;
    return rc;
}

/* ---- every record, for the invariants ---- */

int sub_records(store_txn *t, sub_record_fn fn, void *ctx)
{
    static const store_db dbs[2] = {STORE_DB_CURSORS, STORE_DB_DLQ};
    int rc = TALLY_ok;
    for (int d = 0; d < 2 && rc == TALLY_ok; d++) {
        MDB_cursor *cur;
        rc = store_cursor_open(t, dbs[d], &cur);
        if (rc != TALLY_ok)
            return rc;
        MDB_val key, val;
        int mrc = mdb_cursor_get(cur, &key, &val, MDB_FIRST);
        while (mrc == 0 && rc == TALLY_ok) {
            const uint8_t *k = key.mv_data;
            size_t skip = d == 0 ? 1 : 0;
            char kind = d == 0 ? (char)k[0] : 'd';
            if (kind != KIND_CURSOR && kind != 'g') { /* 'g': partitions, one per name */
                if (key.mv_size < skip + 1 + 1 + 8 || k[key.mv_size - 9] != 0 ||
                    (d == 0 && kind != KIND_FLIGHT && kind != KIND_REPLAY && kind != KIND_MARK))
                    rc = TALLY_corrupt_record;
                else if (kind != KIND_MARK) /* a mark stands beside its dead letter */
                    rc = fn(kind, (tally_str){(const char *)k + skip, key.mv_size - 9 - skip},
                            get_u64_be(k + key.mv_size - 8), ctx);
            }
            if (rc == TALLY_ok)
                mrc = mdb_cursor_get(cur, &key, &val, MDB_NEXT);
        }
        mdb_cursor_close(cur);
        if (mrc != 0 && mrc != MDB_NOTFOUND)
            rc = store_translate(mrc);
    }
    return rc;
}
