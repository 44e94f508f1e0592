/*
 * subscriber.c — durable subscribers over the cursors and dlq databases.
 *
 * Layout and rules: subscriber.h and docs/SUBSCRIBERS.md. Each operation
 * reads what it needs (collecting the seqs it will touch while a cursor is
 * open), checks, and only then writes, so a refusal writes nothing.
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

static int event_time(store_txn *t, uint64_t seq, int64_t *time_ms)
{
    msgpack_unpacked up;
    log_event ev;
    msgpack_unpacked_init(&up);
    int rc = log_event_load(t, seq, &up, &ev);
    *time_ms = rc == TALLY_ok ? ev.time_ms : 0;
    msgpack_unpacked_destroy(&up);
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
    out->created_ms = out->updated_ms = now_ms;
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

/* ---- fetch ---- */

typedef enum plan_kind { PLAN_REPLAY_DLQ, PLAN_REDELIVER, PLAN_PARK, PLAN_NEW } plan_kind;

typedef struct plan_step {
    plan_kind what;
    char kind; /* record kind for REDELIVER and PARK */
    uint64_t seq;
} plan_step;

typedef struct fetch_plan {
    store_txn *t;
    const sub_config *cfg;
    int64_t now_ms;
    uint32_t max, deliveries, parks;
    size_t bytes; /* of the events delivered */
    bool full;    /* at max, or the next event would pass the byte budget */
    uint32_t flights; /* "f" records seen */
    char kind;        /* records being scanned */
    int64_t next_due_ms;
    plan_step steps[2 * TALLY_SUB_FETCH_EVENTS_MAX];
    uint32_t count;
    /* A partitioned subscriber (subscriber_partition.h): the fetching
     * instance, its partitions, the entities with an earlier event in
     * flight in them (held back), and the new events queued in "f"
     * records for their partition's holder (attempts 0, not delivered). */
    sub_partitions *g;
    tally_str instance;
    sub_entity_set held_back;
    sub_seq_list queued;
    msgpack_zone *zone; /* where each event is decoded for its entity */
} fetch_plan;

/* Whether the event at seq may be delivered too: a fetch delivers at most
 * max events and TALLY_SUB_FETCH_BYTES_MAX of them, but at least one (the
 * log_read rule, docs/PROTOCOL.md). An event gone since (retention) weighs
 * nothing. Once one does not fit, nothing more is planned, so what is not
 * delivered is neither leased nor marked delivered. */
static int plan_room(fetch_plan *p, uint64_t seq, bool *room)
{
    *room = false;
    if (p->full || p->deliveries == p->max)
        return TALLY_ok;
    uint8_t k[8];
    MDB_val ev = {0, NULL};
    log_seq_key(seq, k);
    int rc = store_get(p->t, STORE_DB_LOG, k, 8, &ev);
    if (rc != TALLY_ok && rc != TALLY_not_found)
        return rc;
    size_t len = rc == TALLY_ok ? ev.mv_size : 0;
    if (p->deliveries > 0 &&
        (p->bytes >= TALLY_SUB_FETCH_BYTES_MAX || len > TALLY_SUB_FETCH_BYTES_MAX - p->bytes)) {
        p->full = true;
        return TALLY_ok;
    }
    p->bytes += len;
    *room = true;
    return TALLY_ok;
}

/* One replay mark: the dead letter seq is delivered again. The marks are
 * walked, never the dlq, so a fetch costs what it replays. */
static int plan_replay(uint64_t seq, const MDB_val *v, void *ctx)
{
    fetch_plan *p = ctx;
    if (v->mv_size != 0)
        return TALLY_corrupt_record;
    bool room;
    int rc = plan_room(p, seq, &room);
    if (rc != TALLY_ok || !room)
        return rc == TALLY_ok ? 1 : rc;
    p->steps[p->count++] = (plan_step){PLAN_REPLAY_DLQ, 0, seq};
    p->deliveries++;
    return TALLY_ok;
}

static int plan_replays(store_txn *t, const sub_state *s, fetch_plan *p)
{
    tally_str name = tally_str_from(s->name);
    if (s->replaying == 0)
        return TALLY_ok;
    int rc = sub_records_each(t, KIND_MARK, name, 0, plan_replay, p);
    if (rc == TALLY_ok && p->count == 0) { /* replays without marks: an older store */
        rc = sub_marks_repair(t, name);
        if (rc == TALLY_ok)
            rc = sub_records_each(t, KIND_MARK, name, 0, plan_replay, p);
    }
    return rc;
}

static int plan_due(uint64_t seq, const MDB_val *v, void *ctx)
{
    fetch_plan *p = ctx;
    sub_record r;
    int rc = sub_record_decode(v, false, &r);
    if (rc != TALLY_ok)
        return rc;
    if (p->kind == KIND_FLIGHT)
        p->flights++;
    bool due = r.when_ms <= p->now_ms; /* held by anyone: its lease ran out */
    bool park = r.attempts >= p->cfg->max_deliver;
    bool room = park && p->parks < TALLY_SUB_FETCH_EVENTS_MAX;
    if (due && !park && (rc = plan_room(p, seq, &room)) != TALLY_ok)
        return rc;
    if (!due || !room) {
        int64_t when = due ? p->now_ms : r.when_ms;
        if (when < p->next_due_ms)
            p->next_due_ms = when;
        return TALLY_ok;
    }
    p->steps[p->count++] = (plan_step){park ? PLAN_PARK : PLAN_REDELIVER, p->kind, seq};
    if (park)
        p->parks++;
    else
        p->deliveries++;
    return TALLY_ok;
}

/* An in-flight record of a partitioned subscriber: only those of the
 * fetching instance's partitions count, and an entity with an earlier
 * event in flight (leased, or due but held back itself) waits for it:
 * one event of an entity out at a time, in seq order. */
static int plan_due_partition(uint64_t seq, const MDB_val *v, void *ctx)
{
    fetch_plan *p = ctx;
    sub_record r;
    uint64_t hash;
    uint32_t part;
    int rc = sub_record_decode(v, false, &r);
    if (rc == TALLY_ok)
        rc = sub_event_partition(p->t, seq, p->g->count, p->zone, &hash, &part);
    p->flights++;
    if (rc != TALLY_ok || !sub_partition_held(p->g, part, p->instance, p->now_ms))
        return rc;
    bool due = r.when_ms <= p->now_ms;
    bool room = false;
    if (due && r.attempts >= p->cfg->max_deliver) { /* parked: no longer ahead of the rest */
        room = p->parks < TALLY_SUB_FETCH_EVENTS_MAX;
        if (room) {
            p->steps[p->count++] = (plan_step){PLAN_PARK, KIND_FLIGHT, seq};
            p->parks++;
        }
    } else if (!sub_entity_set_has(&p->held_back, hash)) {
        sub_entity_set_add(&p->held_back, hash);
        if (due && (rc = plan_room(p, seq, &room)) == TALLY_ok && room) {
            p->steps[p->count++] = (plan_step){PLAN_REDELIVER, KIND_FLIGHT, seq};
            p->deliveries++;
        }
    } else {
        return TALLY_ok; /* held back: the event before it decides when */
    }
    int64_t when = due ? p->now_ms : r.when_ms;
    if (!room && when < p->next_due_ms)
        p->next_due_ms = when;
    return rc;
}

/* New events of a partitioned subscriber: those of the instance's
 * partitions whose entity has nothing in flight are delivered; every
 * other one is queued for its partition's holder (an "f" record with no
 * attempt yet, due now), so delivered_seq passes it. */
static int plan_new_partition(fetch_plan *p, const sub_state *s, uint64_t next, uint64_t head)
{
    int rc = TALLY_ok;
    p->queued.upto = UINT64_MAX;
    for (; rc == TALLY_ok && next <= head && p->flights < s->config.max_ack_pending;
         next++, p->flights++) {
        uint64_t hash;
        uint32_t part;
        rc = sub_event_partition(p->t, next, p->g->count, p->zone, &hash, &part);
        bool room = false;
        if (rc == TALLY_ok && sub_partition_held(p->g, part, p->instance, p->now_ms)) {
            if (!sub_entity_set_has(&p->held_back, hash))
                rc = plan_room(p, next, &room);
            sub_entity_set_add(&p->held_back, hash);
        }
        if (rc == TALLY_ok && room) {
            p->steps[p->count++] = (plan_step){PLAN_NEW, KIND_FLIGHT, next};
            p->deliveries++;
        } else if (rc == TALLY_ok) {
            rc = sub_seq_collect_one(next, NULL, &p->queued);
        }
    }
    return rc;
}

/* Write the queued events' records (plan_new_partition). */
static int run_queued(store_txn *t, sub_state *s, const sub_seq_list *queued, int64_t now_ms)
{
    int rc = TALLY_ok;
    for (size_t i = 0; rc == TALLY_ok && i < queued->count; i++) {
        sub_record r;
        memset(&r, 0, sizeof(r));
        r.when_ms = now_ms; /* due for whoever holds its partition */
        rc = sub_record_save(t, KIND_FLIGHT, tally_str_from(s->name), queued->seqs[i], &r);
        s->in_flight++;
        if (queued->seqs[i] > s->delivered_seq)
            s->delivered_seq = queued->seqs[i];
    }
    return rc;
}

/* A partitioned fetch: the instance is a member and its partitions are
 * shared out (subscriber_partition.h) before anything is planned. */
static int plan_partitions_begin(store_txn *t, const sub_state *s, tally_str instance,
                                 fetch_plan *p)
{
    p->g = malloc(sizeof(*p->g));
    if (!p->g)
        return TALLY_out_of_memory;
    int rc = sub_partitions_load(t, tally_str_from(s->name), p->g);
    if (rc != TALLY_ok || p->g->count <= 1)
        return rc;
    if (instance.len == 0)
        return TALLY_missing_field; /* which instance would hold what? */
    p->instance = instance;
    p->zone = msgpack_zone_new(MSGPACK_ZONE_CHUNK_SIZE);
    if (!p->zone)
        return TALLY_out_of_memory;
    sub_partitions_claim(p->g, instance, p->now_ms, s->config.ack_wait_ms);
    rc = sub_entity_set_init(&p->held_back, (size_t)s->in_flight + s->config.max_ack_pending + 16);
    return rc == TALLY_ok ? sub_partitions_save(t, tally_str_from(s->name), p->g) : rc;
}

static bool plan_partitioned(const fetch_plan *p) { return p->g && p->g->count > 1; }

static void plan_free(fetch_plan *p)
{
    sub_entity_set_free(&p->held_back);
    if (p->zone)
        msgpack_zone_free(p->zone);
    free(p->queued.seqs);
    free(p->g);
    free(p);
}

static sub_park_observer park_observer;

void sub_park_observer_set(sub_park_observer fn) { park_observer = fn; }

static int park_record(store_txn *t, sub_state *s, char kind, uint64_t seq, const sub_record *r,
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

/* Each delivery is leased to the fetching instance (none: no instance). */
static int run_step(store_txn *t, sub_state *s, const plan_step *st, tally_str instance,
                    int64_t now_ms, sub_delivery *out, uint32_t *count)
{
    tally_str name = tally_str_from(s->name);
    sub_record r;
    int rc;
    switch (st->what) {
    case PLAN_REPLAY_DLQ:
        rc = sub_record_load(t, 0, name, st->seq, &r);
        if (rc == TALLY_ok)
            rc = sub_record_delete(t, 0, name, st->seq);
        if (rc == TALLY_ok)
            rc = sub_mark_clear(t, name, st->seq);
        r.attempts = 1;
        r.when_ms = now_ms + s->config.ack_wait_ms; /* the lease */
        sub_record_set_instance(&r, instance);
        if (rc == TALLY_ok)
            rc = sub_record_save(t, KIND_REPLAY, name, st->seq, &r);
        s->dead_letters--;
        s->replaying--;
        s->in_flight++;
        out[(*count)++] = (sub_delivery){st->seq, 1, true};
        return rc;
    case PLAN_REDELIVER:
        rc = sub_record_load(t, st->kind, name, st->seq, &r);
        if (rc != TALLY_ok)
            return rc;
        r.attempts++;
        r.when_ms = now_ms + s->config.ack_wait_ms; /* the lease */
        sub_record_set_instance(&r, instance); /* taken over, or back to its holder */
        rc = sub_record_save(t, st->kind, name, st->seq, &r);
        if (r.attempts > 1) /* 1: a queued event of a partition, delivered first */
            s->redelivered++;
        out[(*count)++] = (sub_delivery){st->seq, r.attempts, st->kind == KIND_REPLAY};
        return rc;
    case PLAN_PARK: {
        rc = sub_record_load(t, st->kind, name, st->seq, &r);
        if (rc != TALLY_ok)
            return rc;
        char text[TALLY_SUB_ERROR_BYTES_MAX + 64];
        int n = snprintf(text, sizeof(text), "max deliveries (%u) reached%s%.*s",
                         s->config.max_deliver, r.error_len ? ": " : "", (int)r.error_len, r.error);
        tally_str reason = {text, n < 0 ? 0 : (size_t)n < sizeof(text) ? (size_t)n : sizeof(text) - 1};
        return park_record(t, s, st->kind, st->seq, &r, reason, now_ms);
    }
    case PLAN_NEW:
        memset(&r, 0, sizeof(r));
        r.attempts = 1;
        r.when_ms = now_ms + s->config.ack_wait_ms; /* the lease */
        sub_record_set_instance(&r, instance);
        if (st->seq > s->delivered_seq) /* queued events of partitions may be above */
            s->delivered_seq = st->seq;
        s->in_flight++;
        out[(*count)++] = (sub_delivery){st->seq, 1, false};
        return sub_record_save(t, KIND_FLIGHT, name, st->seq, &r);
    }
    return TALLY_internal;
}

/* restart: every in-flight event (and replay) not yet due that the
 * instance holds becomes due now — every one, whoever holds it, for a fetch
 * without an instance — so a (re)starting consumer gets its whole unacked
 * window over as many fetches as it takes, not just the first fetch's
 * worth, and never another instance's. */
typedef struct due_ctx {
    int64_t now_ms;
    tally_str instance; /* len 0: every holder */
    sub_seq_list later;
} due_ctx;

static int collect_later(uint64_t seq, const MDB_val *v, void *ctx)
{
    due_ctx *d = ctx;
    sub_record r;
    int rc = sub_record_decode(v, false, &r);
    if (rc != TALLY_ok || r.when_ms <= d->now_ms ||
        (d->instance.len > 0 && !sub_record_held_by(&r, d->instance)))
        return rc;
    d->later.upto = UINT64_MAX;
    return sub_seq_collect_one(seq, v, &d->later);
}

static int make_due(store_txn *t, tally_str name, tally_str instance, int64_t now_ms)
{
    static const char kinds[2] = {KIND_REPLAY, KIND_FLIGHT};
    int rc = TALLY_ok;
    due_ctx d = {now_ms, instance, {0}};
    for (int i = 0; i < 2 && rc == TALLY_ok; i++) {
        d.later.count = 0;
        rc = sub_records_each(t, kinds[i], name, 0, collect_later, &d);
        for (size_t j = 0; rc == TALLY_ok && j < d.later.count; j++) {
            sub_record r;
            rc = sub_record_load(t, kinds[i], name, d.later.seqs[j], &r);
            r.when_ms = now_ms;
            if (rc == TALLY_ok)
                rc = sub_record_save(t, kinds[i], name, d.later.seqs[j], &r);
        }
    }
    free(d.later.seqs);
    return rc;
}

int sub_fetch(store_txn *t, tally_str name, uint32_t max, bool restart, tally_str instance,
              int64_t now_ms, sub_delivery *out, uint32_t *count, int64_t *next_due_ms,
              sub_state *after)
{
    *count = 0;
    *next_due_ms = INT64_MAX;
    if (max == 0 || max > TALLY_SUB_FETCH_EVENTS_MAX ||
        (instance.len > 0 && sub_instance_check(instance) != TALLY_ok))
        return TALLY_invalid_argument;
    sub_state *s = after;
    int rc = sub_cursor_load(t, name, s);
    log_head head;
    uint64_t first = 0;
    if (rc == TALLY_ok)
        rc = log_head_get(t, &head);
    if (rc == TALLY_ok)
        rc = log_first_seq(t, &first);
    if (rc != TALLY_ok)
        return rc;
    fetch_plan *p = calloc(1, sizeof(*p));
    if (!p)
        return TALLY_out_of_memory;
    p->t = t;
    p->cfg = &s->config;
    p->now_ms = now_ms;
    p->max = max;
    p->next_due_ms = INT64_MAX;
    rc = plan_partitions_begin(t, s, instance, p); /* its refusal comes before any write */
    if (rc == TALLY_ok && restart)
        rc = make_due(t, name, instance, now_ms);
    if (rc == TALLY_ok)
        rc = plan_replays(t, s, p);
    static const char kinds[2] = {KIND_REPLAY, KIND_FLIGHT};
    for (int i = 0; i < 2 && (rc == TALLY_ok || rc == 1); i++) {
        p->kind = kinds[i];
        bool by_partition = kinds[i] == KIND_FLIGHT && plan_partitioned(p);
        rc = sub_records_each(t, kinds[i], name, 0, by_partition ? plan_due_partition : plan_due, p);
    }
    if (rc == 1)
        rc = TALLY_ok;
    uint64_t next = s->delivered_seq + 1;
    if (first && next < first)
        next = first; /* events below the retention floor are gone */
    if (rc == TALLY_ok && plan_partitioned(p))
        rc = plan_new_partition(p, s, next, head.seq);
    for (; rc == TALLY_ok && !plan_partitioned(p) && next <= head.seq &&
           p->flights < s->config.max_ack_pending;
         next++, p->deliveries++, p->flights++) {
        bool room;
        rc = plan_room(p, next, &room);
        if (!room)
            break;
        p->steps[p->count++] = (plan_step){PLAN_NEW, KIND_FLIGHT, next};
    }
    for (uint32_t i = 0; rc == TALLY_ok && i < p->count; i++)
        rc = run_step(t, s, &p->steps[i], instance, now_ms, out, count);
    if (rc == TALLY_ok)
        rc = run_queued(t, s, &p->queued, now_ms);
    if (rc == TALLY_ok && (p->count > 0 || p->queued.count > 0)) {
        rc = sub_floor_update(t, s);
        s->updated_ms = now_ms;
        if (rc == TALLY_ok)
            rc = sub_cursor_save(t, s);
    }
    *next_due_ms = p->next_due_ms;
    plan_free(p);
    return rc;
}

/* ---- ack, nak, park ---- */

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
    s->updated_ms = now_ms;
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
    rc = park_record(t, after, kind, seq, &r, reason, now_ms);
    if (rc == TALLY_ok && kind == KIND_FLIGHT)
        rc = sub_floor_update(t, after);
    after->updated_ms = now_ms;
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
