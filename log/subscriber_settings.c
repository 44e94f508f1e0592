/*
 * subscriber_settings.c — what an operator does to a durable subscriber
 * besides its deliveries: change its settings in place (sub_update), see
 * its in-flight events (sub_flights) and expire it after inactivity
 * (sub_expire_inactive). subscriber.h describes each.
 */
#include "log/subscriber.h"
#include "log/subscriber_record.h"

#include "common/error.h"

#include <assert.h>
#include <stdlib.h>
#include <string.h>

static void change_apply(sub_config *c, const sub_change *ch)
{
    const sub_config *n = &ch->config;
    assert(n->backoff_count <= TALLY_SUB_BACKOFF_STEPS_MAX);
    if (ch->has_max_deliver)
        c->max_deliver = n->max_deliver;
    if (ch->has_ack_wait_ms)
        c->ack_wait_ms = n->ack_wait_ms;
    if (ch->has_max_ack_pending)
        c->max_ack_pending = n->max_ack_pending;
    if (ch->has_backoff) {
        c->backoff_count = n->backoff_count;
        memset(c->backoff_ms, 0, sizeof(c->backoff_ms));
        memcpy(c->backoff_ms, n->backoff_ms, n->backoff_count * sizeof(uint32_t));
    }
    if (ch->has_filter_types) {
        c->filter.type_count = n->filter.type_count;
        memcpy(c->filter.types, n->filter.types, sizeof(c->filter.types));
    }
    if (ch->has_filter_kinds)
        c->filter.kinds = n->filter.kinds;
    if (ch->has_filter_subject)
        memcpy(c->filter.subject_glob, n->filter.subject_glob, sizeof(c->filter.subject_glob));
    if (ch->has_inactive_expiry)
        c->inactive_expiry_ms = n->inactive_expiry_ms;
    if (ch->has_contact)
        memcpy(c->contact, n->contact, sizeof(c->contact));
    if (ch->has_alert_route)
        memcpy(c->alert_route, n->alert_route, sizeof(c->alert_route));
}

int sub_update(store_txn *t, tally_str name, const sub_change *change, int64_t now_ms,
               sub_state *after)
{
    int rc = sub_cursor_load(t, name, after);
    if (rc != TALLY_ok)
        return rc;
    sub_config c = after->config;
    change_apply(&c, change);
    if (c.backoff_count > TALLY_SUB_BACKOFF_STEPS_MAX || sub_config_check(&c) != TALLY_ok)
        return TALLY_invalid_argument;
    after->config = c;
    after->updated_ms = after->active_ms = now_ms;
    return sub_cursor_save(t, after);
}

typedef struct flight_walk {
    sub_flight_fn fn;
    void *ctx;
    uint32_t left;
    bool replay;
} flight_walk;

static int flight_one(uint64_t seq, const MDB_val *v, void *ctx)
{
    flight_walk *w = ctx;
    if (w->left == 0)
        return 1;
    w->left--;
    sub_record r;
    int rc = sub_record_decode(v, false, &r);
    if (rc != TALLY_ok)
        return rc;
    sub_flight f = {seq, w->replay, r.attempts, r.when_ms, {r.error, r.error_len},
                    {r.instance, r.instance_len}};
    return w->fn(&f, w->ctx);
}

int sub_flights(store_txn *t, tally_str name, uint32_t limit, sub_flight_fn fn, void *ctx)
{
    sub_state s;
    int rc = sub_cursor_load(t, name, &s);
    flight_walk w = {fn, ctx, limit, false};
    if (rc == TALLY_ok)
        rc = sub_records_each(t, KIND_FLIGHT, name, 0, flight_one, &w);
    w.replay = true;
    if (rc == TALLY_ok)
        rc = sub_records_each(t, KIND_REPLAY, name, 0, flight_one, &w);
    return rc == 1 ? TALLY_ok : rc;
}

typedef struct expiry_walk {
    int64_t now_ms;
    uint32_t max, count;
    sub_state *found; /* max of them */
} expiry_walk;

static int expiry_one(const sub_state *s, void *ctx)
{
    expiry_walk *w = ctx;
    if (s->config.inactive_expiry_ms == 0 || w->now_ms < s->active_ms ||
        (uint64_t)(w->now_ms - s->active_ms) < s->config.inactive_expiry_ms)
        return TALLY_ok;
    w->found[w->count++] = *s;
    return w->count == w->max ? 1 : TALLY_ok;
}

int sub_expire_inactive(store_txn *t, int64_t now_ms, uint32_t max, sub_expired_fn fn, void *ctx,
                        uint32_t *removed)
{
    *removed = 0;
    expiry_walk w = {now_ms, max, 0, calloc(max ? max : 1, sizeof(sub_state))};
    if (!w.found)
        return TALLY_out_of_memory;
    int rc = max ? sub_list(t, expiry_one, &w) : TALLY_ok;
    if (rc == 1)
        rc = TALLY_ok;
    for (uint32_t i = 0; rc == TALLY_ok && i < w.count; i++) {
        rc = fn(&w.found[i], ctx);
        if (rc == TALLY_ok)
            rc = sub_delete(t, tally_str_from(w.found[i].name));
        if (rc == TALLY_ok)
            (*removed)++;
    }
    free(w.found);
    return rc;
}
