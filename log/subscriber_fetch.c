/*
 * subscriber_fetch.c — sub_fetch of durable subscribers (subscriber.h,
 * docs/SUBSCRIBERS.md): plans what one fetch hands out — replays of dead
 * letters, in-flight events due again (parked once out of deliveries),
 * new events past the filter (those it does not pass acked past) — and
 * only then writes it. A partitioned subscriber (subscriber_partition.h)
 * hands the instance its partitions' events, one of an entity at a time,
 * and queues the others for their holders.
 */
#include "log/subscriber.h"
#include "log/subscriber_partition.h"
#include "log/subscriber_record.h"

#include "common/error.h"
#include "log/log.h"

#include <stdlib.h>
#include <string.h>

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
    log_bytes ev;
    log_bytes_init(&ev);
    int rc = log_bytes_get(p->t, seq, &ev);
    size_t len = rc == TALLY_ok ? ev.len : 0;
    log_bytes_free(&ev);
    if (rc != TALLY_ok && rc != TALLY_not_found)
        return rc;
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

/* A new event of a partitioned subscriber: one of the instance's
 * partitions whose entity has nothing in flight is delivered; any other
 * is queued for its partition's holder (an "f" record with no attempt
 * yet, due now), so delivered_seq passes it all the same. */
static int plan_new_partition(fetch_plan *p, uint64_t seq)
{
    uint64_t hash;
    uint32_t part;
    bool room = false;
    int rc = sub_event_partition(p->t, seq, p->g->count, p->zone, &hash, &part);
    if (rc == TALLY_ok && sub_partition_held(p->g, part, p->instance, p->now_ms)) {
        if (!sub_entity_set_has(&p->held_back, hash))
            rc = plan_room(p, seq, &room);
        sub_entity_set_add(&p->held_back, hash);
    }
    p->flights++;
    if (rc == TALLY_ok && room) {
        p->steps[p->count++] = (plan_step){PLAN_NEW, KIND_FLIGHT, seq};
        p->deliveries++;
    } else if (rc == TALLY_ok) {
        rc = sub_seq_collect_one(seq, NULL, &p->queued);
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
        return sub_park_record(t, s, st->kind, st->seq, &r, reason, now_ms);
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

/* Whether the event at seq passes the filter (an event gone since passes:
 * the reply leaves it out). */
typedef struct filter_visit {
    const sub_filter *filter;
    bool pass;
} filter_visit;

static void note_pass(const log_event *ev, void *ctx)
{
    filter_visit *v = ctx;
    v->pass = sub_filter_pass(v->filter, ev);
}

static int filter_passes(store_txn *t, const sub_filter *f, uint64_t seq, bool *pass)
{
    filter_visit v = {f, true};
    int rc = sub_event_visit(t, seq, note_pass, &v);
    *pass = v.pass;
    return rc == TALLY_not_found ? TALLY_ok : rc;
}

static bool filter_is_set(const sub_filter *f)
{
    return f->type_count > 0 || f->kinds != 0 || f->subject_glob[0] != 0;
}

/* New events after the delivered seq, while in-flight room and the fetch's
 * budget last (partitioned: while in-flight room lasts, each delivered or
 * queued, plan_new_partition). With a filter, the events it does not pass
 * are skipped, partitioned or not (at most TALLY_SUB_FILTER_SKIP_EVENTS_MAX
 * a fetch): *skipped_to is then the last seq the walk is done with,
 * planned, queued or skipped (0: no filter). */
static int plan_new(store_txn *t, const sub_state *s, uint64_t head_seq, uint64_t first,
                    fetch_plan *p, uint64_t *skipped_to)
{
    bool filtered = filter_is_set(&s->config.filter);
    uint32_t skipped = 0;
    uint64_t next = s->delivered_seq + 1;
    int rc = TALLY_ok;
    if (first && next < first)
        next = first; /* events below the retention floor are gone */
    p->queued.upto = UINT64_MAX;
    for (; rc == TALLY_ok && next <= head_seq && p->flights < s->config.max_ack_pending; next++) {
        bool pass = true;
        if (filtered && (rc = filter_passes(t, &s->config.filter, next, &pass)) != TALLY_ok)
            break;
        if (!pass) {
            if (++skipped == TALLY_SUB_FILTER_SKIP_EVENTS_MAX) {
                next++;
                break;
            }
            continue;
        }
        if (plan_partitioned(p)) {
            rc = plan_new_partition(p, next); /* delivered or queued: never left */
            continue;
        }
        bool room;
        rc = plan_room(p, next, &room);
        if (!room)
            break;
        p->steps[p->count++] = (plan_step){PLAN_NEW, KIND_FLIGHT, next};
        p->deliveries++;
        p->flights++;
    }
    *skipped_to = filtered && skipped > 0 ? next - 1 : 0;
    return rc;
}

/* A fetch that delivers nothing writes nothing, except now and then the
 * time of the last activity of a subscriber that expires without it: at
 * most once an eighth of its inactive expiry. */
static bool activity_due(const sub_state *s, int64_t now_ms)
{
    uint64_t expiry = s->config.inactive_expiry_ms;
    return expiry != 0 && now_ms > s->active_ms &&
           (uint64_t)(now_ms - s->active_ms) >= expiry / 8;
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
    uint64_t skipped_to = 0;
    if (rc == TALLY_ok)
        rc = plan_new(t, s, head.seq, first, p, &skipped_to);
    for (uint32_t i = 0; rc == TALLY_ok && i < p->count; i++)
        rc = run_step(t, s, &p->steps[i], instance, now_ms, out, count);
    if (rc == TALLY_ok)
        rc = run_queued(t, s, &p->queued, now_ms);
    if (skipped_to > s->delivered_seq)
        s->delivered_seq = skipped_to; /* acked past what the filter skips */
    bool moved = p->count > 0 || p->queued.count > 0 || skipped_to > 0;
    if (rc == TALLY_ok && (moved || activity_due(s, now_ms))) {
        rc = sub_floor_update(t, s);
        if (moved)
            s->updated_ms = now_ms;
        s->active_ms = now_ms;
        if (rc == TALLY_ok)
            rc = sub_cursor_save(t, s);
    }
    *next_due_ms = p->next_due_ms;
    plan_free(p);
    return rc;
}
