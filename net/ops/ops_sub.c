/*
 * ops_sub.c — the durable subscriber ops (docs/SUBSCRIBERS.md): their
 * parameters, the writer's part (each in a transaction nested in the
 * group's, so a refusal or fault undoes only it), their replies, and the
 * subscriber reads. log/subscriber.h keeps the state.
 */
#include "net/ops/ops.h"

#include "common/error.h"
#include "common/msgpack_safe.h"
#include "log/log.h"
#include "log/subscriber_partition.h"
#include "net/ops/figures.h"

#include <stdlib.h>
#include <string.h>

/* ---- builders: what the field table cannot say ---- */

static int build_name(net_request *req, tally_str name)
{
    net_sub *u = &req->sub;
    memset(u, 0, sizeof(*u));
    u->name = name;
    if (sub_name_check(u->name) != TALLY_ok)
        return net_request_fail(req, TALLY_invalid_subscriber_name, "1-64 bytes of A-Z a-z 0-9 . _ - :");
    return TALLY_ok;
}

/* A subscriber name, then a seq: one that is given must be a seq (they
 * start at 1). */
static int build_name_seq(net_request *req, tally_str name, bool has_seq, uint64_t seq)
{
    int rc = build_name(req, name);
    if (rc != TALLY_ok)
        return rc;
    req->sub.seq = seq;
    if (has_seq && seq == 0)
        return net_request_fail(req, TALLY_value_out_of_range, "seq: seqs start at 1");
    return TALLY_ok;
}

int net_build_sub_named(net_request *req, const net_args_sub_named *a)
{
    return build_name(req, a->name);
}

static int build_start(net_request *req, const net_args_sub_create *a)
{
    net_sub *u = &req->sub;
    if (a->has_start + a->has_from_seq + a->has_from_time_ms > 1)
        return net_request_fail(req, TALLY_start_positions_are_mutually_exclusive,
                                "start, from_seq, from_time_ms");
    u->start.kind = SUB_START_BEGINNING;
    if (a->has_start) {
        if (tally_str_equal(a->start, tally_str_from("now")))
            u->start.kind = SUB_START_NOW;
        else if (!tally_str_equal(a->start, tally_str_from("beginning")))
            return net_request_fail(req, TALLY_value_out_of_range, "start: beginning or now");
    } else if (a->has_from_seq) {
        u->start = (sub_start){SUB_START_SEQ, a->from_seq, 0};
        if (u->start.seq == 0)
            return net_request_fail(req, TALLY_value_out_of_range, "from_seq: seqs start at 1");
    } else if (a->has_from_time_ms) {
        u->start = (sub_start){SUB_START_TIME, 0, a->from_time_ms};
        if (u->start.time_ms < 0 || u->start.time_ms > TALLY_TIME_MS_MAX)
            return net_request_fail(req, TALLY_time_out_of_range, "from_time_ms");
    }
    return TALLY_ok;
}

/* The settings of sub_create and sub_update, whichever struct they came in. */
typedef struct settings_args {
    bool has_max_deliver, has_ack_wait_ms, has_max_ack_pending, has_backoff_ms, has_filter_types,
        has_filter_kinds, has_filter_subject, has_inactive_expiry_ms, has_contact, has_alert_route;
    uint64_t max_deliver, ack_wait_ms, max_ack_pending, inactive_expiry_ms;
    net_list backoff_ms;
    tally_str filter_types, filter_kinds, filter_subject, contact, alert_route;
} settings_args;

#define SETTINGS_OF(a)                                                                        \
    (settings_args){(a)->has_max_deliver, (a)->has_ack_wait_ms, (a)->has_max_ack_pending,     \
                    (a)->has_backoff_ms, (a)->has_filter_types, (a)->has_filter_kinds,        \
                    (a)->has_filter_subject, (a)->has_inactive_expiry_ms, (a)->has_contact,   \
                    (a)->has_alert_route, (a)->max_deliver, (a)->ack_wait_ms,                 \
                    (a)->max_ack_pending, (a)->inactive_expiry_ms, (a)->backoff_ms,           \
                    (a)->filter_types, (a)->filter_kinds, (a)->filter_subject, (a)->contact,  \
                    (a)->alert_route}

/* Call fn for each comma-separated item of list (none for ""); an empty
 * item is refused. */
typedef int (*item_fn)(tally_str item, void *ctx);
static int each_item(tally_str list, item_fn fn, void *ctx)
{
    size_t at = 0;
    while (at < list.len) {
        size_t end = at;
        while (end < list.len && list.ptr[end] != ',')
            end++;
        if (end == at || (end == list.len - 1 && list.ptr[end] == ','))
            return TALLY_value_out_of_range;
        int rc = fn((tally_str){list.ptr + at, end - at}, ctx);
        if (rc != TALLY_ok)
            return rc;
        at = end + 1;
    }
    return TALLY_ok;
}

static int type_item(tally_str item, void *ctx)
{
    sub_filter *f = ctx;
    if (f->type_count == TALLY_SUB_FILTER_TYPES_MAX || item.len > TALLY_SUB_FILTER_TYPE_BYTES_MAX)
        return TALLY_value_out_of_range;
    memcpy(f->types[f->type_count], item.ptr, item.len);
    f->types[f->type_count++][item.len] = 0;
    return TALLY_ok;
}

static int kind_item(tally_str item, void *ctx)
{
    sub_filter *f = ctx;
    for (int k = LOG_ENTITY_ACCOUNT; k <= LOG_ENTITY_KIND_LAST; k++)
        if (tally_str_equal(item, tally_str_from(log_entity_kind_name((log_entity_kind)k)))) {
            f->kinds |= (uint8_t)(1u << (k - 1));
            return TALLY_ok;
        }
    return TALLY_value_out_of_range;
}

static int owner_text(net_request *req, tally_str text, char *out, const char *why)
{
    if (text.len > 0 && sub_owner_text_check(text) != TALLY_ok)
        return net_request_fail(req, TALLY_value_out_of_range, why);
    memcpy(out, text.ptr, text.len);
    out[text.len] = 0;
    return TALLY_ok;
}

/* The filter's fields into f (only those given; the rest stay). */
static int build_filter(net_request *req, const settings_args *a, sub_filter *f)
{
    if (a->has_filter_types) {
        f->type_count = 0;
        if (each_item(a->filter_types, type_item, f) != TALLY_ok)
            return net_request_fail(req, TALLY_value_out_of_range,
                                    "filter_types: at most 16 names of 1-32 bytes, comma-separated");
    }
    if (a->has_filter_kinds) {
        f->kinds = 0;
        if (each_item(a->filter_kinds, kind_item, f) != TALLY_ok)
            return net_request_fail(req, TALLY_value_out_of_range,
                                    "filter_kinds: account, transfer, entitlement, dead_letter, webhook, subscriber");
    }
    if (a->has_filter_subject) {
        memcpy(f->subject_glob, a->filter_subject.ptr, a->filter_subject.len);
        f->subject_glob[a->filter_subject.len] = 0;
        if (strlen(f->subject_glob) != a->filter_subject.len)
            return net_request_fail(req, TALLY_value_out_of_range, "filter_subject: no NUL bytes");
    }
    return TALLY_ok;
}

/* Settings given into c and the change's has_ flags (ch NULL: a create). */
static int build_settings(net_request *req, const settings_args *a, sub_config *c, sub_change *ch)
{
    if (a->has_max_deliver)
        c->max_deliver = (uint32_t)a->max_deliver;
    if (a->has_ack_wait_ms)
        c->ack_wait_ms = (uint32_t)a->ack_wait_ms;
    if (a->has_max_ack_pending)
        c->max_ack_pending = (uint32_t)a->max_ack_pending;
    if (a->has_max_deliver && c->max_deliver < 1)
        return net_request_fail(req, TALLY_value_out_of_range, "max_deliver: at least 1");
    if (a->has_ack_wait_ms && c->ack_wait_ms < TALLY_SUB_ACK_WAIT_MS_MIN)
        return net_request_fail(req, TALLY_value_out_of_range, "ack_wait_ms: at least 100");
    if (a->has_max_ack_pending && c->max_ack_pending < 1)
        return net_request_fail(req, TALLY_value_out_of_range, "max_ack_pending: at least 1");
    c->backoff_count = a->has_backoff_ms ? 0 : c->backoff_count;
    for (uint32_t i = 0; i < a->backoff_ms.count; i++) {
        uint64_t ms = a->backoff_ms.items[i].via.u64;
        if (ms > TALLY_SUB_ACK_WAIT_MS_MAX)
            return net_request_fail(req, TALLY_value_out_of_range, "backoff_ms: each at most 86400000");
        c->backoff_ms[c->backoff_count++] = (uint32_t)ms;
    }
    c->inactive_expiry_ms = a->has_inactive_expiry_ms ? a->inactive_expiry_ms : c->inactive_expiry_ms;
    if (c->inactive_expiry_ms != 0 && c->inactive_expiry_ms < TALLY_SUB_INACTIVE_EXPIRY_MS_MIN)
        return net_request_fail(req, TALLY_value_out_of_range, "inactive_expiry_ms: 0 or at least 1000");
    int rc = build_filter(req, a, &c->filter);
    if (rc == TALLY_ok && a->has_contact)
        rc = owner_text(req, a->contact, c->contact, "contact: printable ASCII without \" and \\");
    if (rc == TALLY_ok && a->has_alert_route)
        rc = owner_text(req, a->alert_route, c->alert_route,
                        "alert_route: printable ASCII without \" and \\");
    if (ch) {
        ch->has_max_deliver = a->has_max_deliver;
        ch->has_ack_wait_ms = a->has_ack_wait_ms;
        ch->has_max_ack_pending = a->has_max_ack_pending;
        ch->has_backoff = a->has_backoff_ms;
        ch->has_filter_types = a->has_filter_types;
        ch->has_filter_kinds = a->has_filter_kinds;
        ch->has_filter_subject = a->has_filter_subject;
        ch->has_inactive_expiry = a->has_inactive_expiry_ms;
        ch->has_contact = a->has_contact;
        ch->has_alert_route = a->has_alert_route;
    }
    return rc;
}

int net_build_sub_create(net_request *req, const net_args_sub_create *a)
{
    int rc = build_name(req, a->name);
    if (rc == TALLY_ok)
        rc = build_start(req, a);
    if (rc != TALLY_ok)
        return rc;
    sub_config_default(&req->sub.config);
    req->sub.partitions = (uint32_t)(a->has_partitions ? a->partitions : 1);
    if (req->sub.partitions < 1)
        return net_request_fail(req, TALLY_value_out_of_range, "partitions: at least 1");
    settings_args s = SETTINGS_OF(a);
    return build_settings(req, &s, &req->sub.config, NULL);
}

int net_build_sub_update(net_request *req, const net_args_sub_update *a)
{
    int rc = build_name(req, a->name);
    if (rc != TALLY_ok)
        return rc;
    settings_args s = SETTINGS_OF(a);
    return build_settings(req, &s, &req->sub.change.config, &req->sub.change);
}

int net_build_sub_fetch(net_request *req, const net_args_sub_fetch *a)
{
    int rc = build_name(req, a->name);
    if (rc != TALLY_ok)
        return rc;
    req->sub.max = (uint32_t)(a->has_max ? a->max : TALLY_SUB_FETCH_EVENTS_DEFAULT);
    if (req->sub.max == 0)
        return net_request_fail(req, TALLY_value_out_of_range, "max: at least 1");
    req->wait_ms = (uint32_t)a->wait_ms;
    req->sub.restart = a->restart;
    req->sub.instance = a->instance;
    if (a->has_instance && sub_instance_check(req->sub.instance) != TALLY_ok)
        return net_request_fail(req, TALLY_value_out_of_range,
                                "instance: 1-64 bytes of A-Z a-z 0-9 . _ -");
    return TALLY_ok;
}

/* A list of seqs (sub_ack's done, sub_progress's seqs) into req->sub.done. */
static int build_seqs(net_request *req, const net_list *list, const char *why_zero)
{
    net_sub *u = &req->sub;
    for (uint32_t i = 0; i < list->count; i++) {
        u->done[u->done_count] = list->items[i].via.u64;
        if (u->done[u->done_count++] == 0)
            return net_request_fail(req, TALLY_value_out_of_range, why_zero);
    }
    return TALLY_ok;
}

int net_build_sub_ack(net_request *req, const net_args_sub_ack *a)
{
    int rc = build_name_seq(req, a->name, a->has_seq, a->seq);
    if (rc == TALLY_ok)
        rc = build_seqs(req, &a->done, "done: seqs start at 1");
    if (rc != TALLY_ok)
        return rc;
    if (!a->has_seq && req->sub.done_count == 0)
        return net_request_fail(req, TALLY_missing_field, "seq or done");
    return TALLY_ok;
}

int net_build_sub_nak(net_request *req, const net_args_sub_nak *a)
{
    int rc = build_name_seq(req, a->name, a->has_seq, a->seq);
    if (rc != TALLY_ok)
        return rc;
    req->sub.has_delay = a->has_delay_ms;
    req->sub.delay_ms = (uint32_t)a->delay_ms;
    if (a->has_reason && a->has_error)
        return net_request_fail(req, TALLY_value_out_of_range,
                                "reason and error are one field: send reason");
    req->sub.text = a->has_reason ? a->reason : a->error;
    return TALLY_ok;
}

int net_build_sub_progress(net_request *req, const net_args_sub_progress *a)
{
    int rc = build_name(req, a->name);
    if (rc == TALLY_ok)
        rc = build_seqs(req, &a->seqs, "seqs: seqs start at 1");
    if (rc != TALLY_ok)
        return rc;
    req->sub.instance = a->instance;
    if (a->has_instance && sub_instance_check(req->sub.instance) != TALLY_ok)
        return net_request_fail(req, TALLY_value_out_of_range,
                                "instance: 1-64 bytes of A-Z a-z 0-9 . _ -");
    return TALLY_ok;
}

int net_build_sub_park(net_request *req, const net_args_sub_park *a)
{
    int rc = build_name_seq(req, a->name, a->has_seq, a->seq);
    req->sub.text = a->reason;
    return rc;
}

int net_build_dlq_list(net_request *req, const net_args_dlq_list *a)
{
    int rc = build_name(req, a->name);
    if (rc != TALLY_ok)
        return rc;
    req->sub.limit = (uint32_t)(a->has_limit ? a->limit : TALLY_DLQ_LIST_ENTRIES_DEFAULT);
    if (req->sub.limit == 0)
        return net_request_fail(req, TALLY_value_out_of_range, "limit: at least 1");
    req->sub.after_seq = a->after_seq;
    return TALLY_ok;
}

int net_build_dlq_replay(net_request *req, const net_args_dlq_replay *a)
{
    return build_name_seq(req, a->name, a->has_seq, a->seq);
}

int net_build_dlq_discard(net_request *req, const net_args_dlq_discard *a)
{
    return build_name_seq(req, a->name, a->has_seq, a->seq);
}

/* ---- the writer's part ---- */

typedef int (*sub_run_fn)(store_txn *t, const net_sub *u, int64_t now_ms, net_sub_result *res);

/* Run one subscriber op in a transaction nested in t: a refusal or fault
 * undoes only it, and stays in res->code (never stops the group). */
static int apply_nested(store_txn *t, const net_request *req, int64_t now_ms, net_result *res,
                        sub_run_fn run)
{
    net_sub_result *r = &res->sub;
    r->code = TALLY_ok;
    r->count = 0;
    r->created = false;
    r->next_due_ms = INT64_MAX;
    store_txn child;
    int rc = store_txn_begin(t->st, t, false, &child);
    if (rc == TALLY_ok) {
        rc = run(&child, &req->sub, now_ms, r);
        rc = rc == TALLY_ok ? store_txn_commit(&child) : (store_txn_abort(&child), rc);
    }
    if (rc != TALLY_ok)
        r->count = 0;
    r->code = rc;
    return TALLY_ok;
}

static int run_create(store_txn *t, const net_sub *u, int64_t now_ms, net_sub_result *r)
{
    int rc = sub_create(t, u->name, &u->start, &u->config, now_ms, &r->created, &r->state);
    return rc == TALLY_ok ? sub_partitions_create(t, u->name, u->partitions, r->created) : rc;
}

static int run_update(store_txn *t, const net_sub *u, int64_t now_ms, net_sub_result *r)
{
    return sub_update(t, u->name, &u->change, now_ms, &r->state);
}

static int run_delete(store_txn *t, const net_sub *u, int64_t now_ms, net_sub_result *r)
{
    (void)now_ms;
    (void)r;
    return sub_delete(t, u->name);
}

static int run_fetch(store_txn *t, const net_sub *u, int64_t now_ms, net_sub_result *r)
{
    int rc = sub_fetch(t, u->name, u->max, u->restart, u->instance, now_ms, r->deliveries,
                       &r->count, &r->next_due_ms, &r->state);
    if (rc == TALLY_ok) /* the relay-liveness signal: last_fetch_age_s */
        net_liveness_fetched(u->name, now_ms);
    return rc;
}

static int run_ack(store_txn *t, const net_sub *u, int64_t now_ms, net_sub_result *r)
{
    return sub_ack(t, u->name, u->seq, u->done, u->done_count, now_ms, &r->acked, &r->state);
}

static int run_nak(store_txn *t, const net_sub *u, int64_t now_ms, net_sub_result *r)
{
    return sub_nak(t, u->name, u->seq, u->has_delay, u->delay_ms, u->text, now_ms, &r->attempt,
                   &r->deliver_after_ms);
}

static int run_progress(store_txn *t, const net_sub *u, int64_t now_ms, net_sub_result *r)
{
    return sub_progress(t, u->name, u->done, u->done_count, u->instance, now_ms, &r->extended,
                        &r->deliver_after_ms);
}

static int run_park(store_txn *t, const net_sub *u, int64_t now_ms, net_sub_result *r)
{
    return sub_park(t, u->name, u->seq, u->text, now_ms, &r->state);
}

static int run_dlq_replay(store_txn *t, const net_sub *u, int64_t now_ms, net_sub_result *r)
{
    return sub_dlq_replay(t, u->name, u->seq != 0, u->seq, now_ms, &r->replaying);
}

static int run_dlq_discard(store_txn *t, const net_sub *u, int64_t now_ms, net_sub_result *r)
{
    (void)r;
    return sub_dlq_discard(t, u->name, u->seq, now_ms);
}

bool net_sub_fetch_waits(const net_request *req, const net_result *res, uint64_t *watermark)
{
    const net_sub_result *r = &res->sub;
    if (req->wait_ms == 0 || r->code != TALLY_ok || r->count > 0)
        return false;
    bool room = r->state.in_flight < r->state.config.max_ack_pending;
    *watermark = room ? r->state.delivered_seq : UINT64_MAX;
    return true;
}

/* ---- replies ---- */

/* The detail of a subscriber op's refusal (op: the op's id). */
static const char *refusal_detail(int code, net_op_id op)
{
    switch (code) {
    case TALLY_subscriber_not_found: return "no subscriber by that name";
    case TALLY_subscriber_exists_with_different_config:
        return "a subscriber by that name exists with another max_deliver, ack_wait_ms, backoff_ms, max_ack_pending or partitions";
    case TALLY_missing_field: return "instance: a subscriber with partitions is fetched by named instances";
    case TALLY_invalid_argument:
        return op == NET_OP_SUB_ACK
                   ? "seq: a subscriber with partitions is acknowledged by its done seqs, never cumulatively"
                   : "";
    case TALLY_too_many_subscribers: return "at most 256 subscribers; delete one first";
    case TALLY_seq_beyond_head: return "beyond the log's head";
    case TALLY_seq_not_delivered: return "a done seq was never delivered to this subscriber";
    case TALLY_seq_not_in_flight: return "not in flight: acknowledged, parked, or never delivered";
    case TALLY_dead_letter_not_found: return "no dead letter with that seq";
    default:
        return tally_error_class_of(code) == TALLY_CLASS_FAULT ? "not applied; retry later" : "";
    }
}

/* A text that may be unset: the string, or nil. */
static void kv_text_or_nil(net_out *o, const char *key, const char *text)
{
    if (text[0])
        net_kv_cstr(o, key, text);
    else
        net_kv_nil(o, key);
}

/* The filter, the inactivity expiry and the owner (docs/SUBSCRIBERS.md). */
static void pack_settings(net_out *o, const sub_state *s)
{
    const sub_config *c = &s->config;
    net_key(o, "filter_types");
    msgpack_pack_array(&o->pk, c->filter.type_count);
    for (uint32_t i = 0; i < c->filter.type_count; i++)
        msgpack_safe_pack_cstr(&o->pk, c->filter.types[i]);
    uint32_t kinds = 0;
    for (int k = 0; k < 8; k++)
        kinds += (c->filter.kinds >> k) & 1u;
    net_key(o, "filter_kinds");
    msgpack_pack_array(&o->pk, kinds);
    for (int k = 0; k < 8; k++)
        if ((c->filter.kinds >> k) & 1u)
            msgpack_safe_pack_cstr(&o->pk, log_entity_kind_name((log_entity_kind)(k + 1)));
    kv_text_or_nil(o, "filter_subject", c->filter.subject_glob);
    net_kv_u64(o, "inactive_expiry_ms", c->inactive_expiry_ms);
    net_kv_i64(o, "active_ms", s->active_ms);
    kv_text_or_nil(o, "contact", c->contact);
    kv_text_or_nil(o, "alert_route", c->alert_route);
}

/* A partitioned subscriber's "partitions" and each partition's live
 * holder (nil: free) and the end of its lease (nothing for one without). */
static void pack_partitions(net_out *o, store_txn *t, const sub_state *s, int64_t now_ms)
{
    sub_partitions *g = malloc(sizeof(*g));
    if (!g || sub_partitions_load(t, tally_str_from(s->name), g) != TALLY_ok) {
        free(g);
        net_out_fail(o);
        return;
    }
    if (g->count > 1) {
        net_kv_u64(o, "partitions", g->count);
        net_key(o, "partition_holders");
        msgpack_pack_array(&o->pk, g->count);
    }
    for (uint32_t i = 0; g->count > 1 && i < g->count; i++) {
        const sub_partition_lease *l = &g->lease[i];
        bool live = l->holder_len > 0 && l->until_ms > now_ms;
        net_map_begin(o);
        net_kv_u64(o, "partition", i);
        if (live)
            net_kv_str(o, "holder", l->holder, l->holder_len);
        else
            net_kv_nil(o, "holder");
        net_kv_i64(o, "lease_until_ms", live ? l->until_ms : 0);
        net_map_end(o);
    }
    free(g);
}

static void pack_metrics(net_out *o, store_txn *t, const sub_state *s, int64_t now_ms)
{
    net_sub_figures m;
    if (net_sub_figures_get(t, s, now_ms, &m) != TALLY_ok) {
        net_out_fail(o);
        return;
    }
    net_map_begin(o);
    net_kv_cstr(o, "name", s->name);
    net_kv_u64(o, "ack_floor", s->ack_floor);
    net_kv_u64(o, "delivered_seq", s->delivered_seq);
    net_kv_u64(o, "pending", m.pending);
    net_kv_u64(o, "in_flight", s->in_flight);
    net_kv_i64(o, "oldest_unacked_age_s", m.oldest_unacked_age_s);
    net_kv_u64(o, "redelivered", s->redelivered);
    net_kv_u64(o, "dead_letters", s->dead_letters);
    net_kv_u64(o, "replaying", s->replaying);
    net_kv_u64(o, "max_deliver", s->config.max_deliver);
    net_kv_u64(o, "ack_wait_ms", s->config.ack_wait_ms);
    net_key(o, "backoff_ms");
    msgpack_pack_array(&o->pk, s->config.backoff_count);
    for (uint32_t i = 0; i < s->config.backoff_count; i++)
        msgpack_pack_uint32(&o->pk, s->config.backoff_ms[i]);
    net_kv_u64(o, "max_ack_pending", s->config.max_ack_pending);
    pack_partitions(o, t, s, now_ms);
    net_kv_i64(o, "created_ms", s->created_ms);
    net_kv_i64(o, "updated_ms", s->updated_ms);
    net_kv_i64(o, "oldest_dead_letter_age_s", m.oldest_dead_letter_age_s);
    net_kv_i64(o, "last_fetch_age_s", o->for_digest ? 0 : m.last_fetch_age_s);
    pack_settings(o, s);
    net_map_end(o);
}

/* The reply of a subscriber write: the refusal or fault, or true when the
 * caller packs the ok reply (already opened). */
static bool reply_opened(net_out *o, const net_request *req, const net_result *res, int fault)
{
    int code = fault ? fault : res->sub.code;
    if (code != TALLY_ok) {
        net_reply_error(o, code, refusal_detail(code, req->op->id));
        return false;
    }
    net_reply_open(o, TALLY_ok);
    return true;
}

void net_reply_sub_create(net_out *o, store_txn *rt, const net_request *req,
                          const net_result *res, int fault, int64_t now_ms)
{
    (void)req;
    if (!reply_opened(o, req, res, fault))
        return;
    net_kv_bool(o, "created", res->sub.created);
    net_key(o, "subscriber");
    pack_metrics(o, rt, &res->sub.state, now_ms);
    net_map_end(o);
}

void net_reply_sub_update(net_out *o, store_txn *rt, const net_request *req,
                          const net_result *res, int fault, int64_t now_ms)
{
    (void)req;
    if (!reply_opened(o, req, res, fault))
        return;
    net_key(o, "subscriber");
    pack_metrics(o, rt, &res->sub.state, now_ms);
    net_map_end(o);
}

void net_reply_sub_delete(net_out *o, store_txn *rt, const net_request *req,
                          const net_result *res, int fault, int64_t now_ms)
{
    (void)rt, (void)req, (void)now_ms;
    if (!reply_opened(o, req, res, fault))
        return;
    net_kv_bool(o, "deleted", true);
    net_map_end(o);
}

void net_reply_sub_fetch(net_out *o, store_txn *rt, const net_request *req,
                         const net_result *res, int fault, int64_t now_ms)
{
    (void)req, (void)now_ms;
    const net_sub_result *r = &res->sub;
    log_head head;
    if (!reply_opened(o, req, res, fault))
        return;
    if (log_head_get(rt, &head) != TALLY_ok) {
        net_out_fail(o);
        return;
    }
    log_bytes ev;
    log_bytes_init(&ev);
    net_key(o, "events");
    net_array_begin(o);
    for (uint32_t i = 0; i < r->count; i++) {
        const sub_delivery *d = &r->deliveries[i];
        if (log_bytes_get(rt, d->seq, &ev) != TALLY_ok)
            continue; /* removed by retention since: nothing to deliver */
        net_item(o);
        net_map_begin(o);
        net_kv_u64(o, "seq", d->seq);
        net_kv_u64(o, "attempt", d->attempt);
        net_kv_bool(o, "replay", d->replay);
        net_key(o, "event");
        msgpack_safe_pack_bin(&o->pk, ev.ptr, ev.len);
        net_map_end(o);
    }
    log_bytes_free(&ev);
    net_array_end(o);
    net_kv_u64(o, "ack_floor", r->state.ack_floor);
    net_kv_u64(o, "head", head.seq);
    net_map_end(o);
}

void net_reply_sub_ack(net_out *o, store_txn *rt, const net_request *req, const net_result *res,
                       int fault, int64_t now_ms)
{
    (void)rt, (void)req, (void)now_ms;
    if (!reply_opened(o, req, res, fault))
        return;
    net_kv_u64(o, "ack_floor", res->sub.state.ack_floor);
    net_kv_u64(o, "acked", res->sub.acked);
    net_map_end(o);
}

void net_reply_sub_nak(net_out *o, store_txn *rt, const net_request *req, const net_result *res,
                       int fault, int64_t now_ms)
{
    (void)rt, (void)req, (void)now_ms;
    if (!reply_opened(o, req, res, fault))
        return;
    net_kv_u64(o, "attempt", res->sub.attempt);
    net_kv_i64(o, "deliver_after_ms", res->sub.deliver_after_ms);
    net_map_end(o);
}

void net_reply_sub_progress(net_out *o, store_txn *rt, const net_request *req,
                            const net_result *res, int fault, int64_t now_ms)
{
    (void)rt, (void)req, (void)now_ms;
    if (!reply_opened(o, req, res, fault))
        return;
    net_kv_u64(o, "extended", res->sub.extended);
    net_kv_i64(o, "deliver_after_ms", res->sub.deliver_after_ms);
    net_map_end(o);
}

void net_reply_sub_park(net_out *o, store_txn *rt, const net_request *req, const net_result *res,
                        int fault, int64_t now_ms)
{
    (void)rt, (void)req, (void)now_ms;
    if (!reply_opened(o, req, res, fault))
        return;
    net_kv_u64(o, "ack_floor", res->sub.state.ack_floor);
    net_map_end(o);
}

void net_reply_dlq_replay(net_out *o, store_txn *rt, const net_request *req,
                          const net_result *res, int fault, int64_t now_ms)
{
    (void)rt, (void)req, (void)now_ms;
    if (!reply_opened(o, req, res, fault))
        return;
    net_kv_u64(o, "replaying", res->sub.replaying);
    net_map_end(o);
}

void net_reply_dlq_discard(net_out *o, store_txn *rt, const net_request *req,
                           const net_result *res, int fault, int64_t now_ms)
{
    (void)rt, (void)req, (void)now_ms;
    if (!reply_opened(o, req, res, fault))
        return;
    net_kv_bool(o, "discarded", true);
    net_map_end(o);
}

#define APPLY(op, run)                                                                        \
    int net_apply_##op(store_txn *t, const net_request *req, int64_t now_ms, bool in_place,  \
                       net_result *res)                                                    \
    {                                                                                       \
        (void)in_place; /* always nested: its refusals and faults stay its own */           \
        return apply_nested(t, req, now_ms, res, run);                                      \
    }
APPLY(sub_create, run_create)
APPLY(sub_update, run_update)
APPLY(sub_delete, run_delete)
APPLY(sub_fetch, run_fetch)
APPLY(sub_ack, run_ack)
APPLY(sub_nak, run_nak)
APPLY(sub_progress, run_progress)
APPLY(sub_park, run_park)
APPLY(dlq_replay, run_dlq_replay)
APPLY(dlq_discard, run_dlq_discard)
#undef APPLY

/* ---- reads ---- */

typedef struct list_ctx {
    net_out *o;
    store_txn *t;
    int64_t now_ms;
} list_ctx;

static int list_one(const sub_state *s, void *ctx)
{
    list_ctx *l = ctx;
    net_item(l->o);
    pack_metrics(l->o, l->t, s, l->now_ms);
    return net_out_ok(l->o) ? TALLY_ok : TALLY_internal;
}

void net_pack_subscribers(net_out *o, store_txn *t, int64_t now_ms)
{
    list_ctx l = {o, t, now_ms};
    net_array_begin(o);
    if (sub_list(t, list_one, &l) != TALLY_ok)
        net_out_fail(o);
    net_array_end(o);
}

typedef struct flight_copy {
    sub_flight f;
    char error[TALLY_SUB_ERROR_BYTES_MAX];
    char instance[TALLY_SUB_INSTANCE_BYTES_MAX];
} flight_copy;

typedef struct flight_list {
    flight_copy items[TALLY_SUB_SHOW_IN_FLIGHT_MAX];
    uint32_t count;
} flight_list;

static int flight_keep(const sub_flight *f, void *ctx)
{
    flight_list *l = ctx;
    flight_copy *c = &l->items[l->count++];
    c->f = *f;
    memcpy(c->error, f->error.ptr, f->error.len);
    memcpy(c->instance, f->instance.ptr, f->instance.len);
    c->f.error.ptr = c->error;
    c->f.instance.ptr = c->instance;
    return TALLY_ok;
}

static void flight_pack(net_out *o, const sub_flight *f)
{
    net_map_begin(o);
    net_kv_u64(o, "seq", f->seq);
    net_kv_bool(o, "replay", f->replay);
    net_kv_u64(o, "attempts", f->attempts);
    if (f->error.len)
        net_kv_str(o, "last_error", f->error.ptr, f->error.len);
    else
        net_kv_nil(o, "last_error");
    if (f->instance.len)
        net_kv_str(o, "holder", f->instance.ptr, f->instance.len);
    else
        net_kv_nil(o, "holder");
    net_kv_i64(o, "deliver_after_ms", f->deliver_after_ms);
    net_map_end(o);
}

/* sub_get: the subscriber, and its first in-flight events (held, or
 * waiting to be delivered again) with their attempts, last error, holder
 * and next delivery time. */
void net_read_sub(net_out *o, store_txn *t, const net_request *req, int64_t now_ms)
{
    sub_state s;
    int rc = sub_get(t, req->sub.name, &s);
    if (rc != TALLY_ok)
        return net_reply_error(o, rc, refusal_detail(rc, req->op->id));
    net_reply_open(o, TALLY_ok);
    net_key(o, "subscriber");
    pack_metrics(o, t, &s, now_ms);
    flight_list *l = calloc(1, sizeof(*l));
    if (!l || sub_flights(t, req->sub.name, TALLY_SUB_SHOW_IN_FLIGHT_MAX, flight_keep, l) != TALLY_ok)
        net_out_fail(o);
    net_key(o, "in_flight_events");
    msgpack_pack_array(&o->pk, l ? l->count : 0);
    for (uint32_t i = 0; l && i < l->count; i++)
        flight_pack(o, &l->items[i].f);
    free(l);
    net_map_end(o);
}

void net_read_sub_list(net_out *o, store_txn *t, const net_request *req, int64_t now_ms)
{
    (void)req;
    net_reply_open(o, TALLY_ok);
    net_key(o, "subscribers");
    net_pack_subscribers(o, t, now_ms);
    net_map_end(o);
}

typedef struct dead_copy {
    sub_dead_letter d;
    char text[TALLY_SUB_ERROR_BYTES_MAX];
} dead_copy;

typedef struct dlq_ctx {
    dead_copy *entries;
    uint32_t count;
} dlq_ctx;

static int dlq_keep(const sub_dead_letter *d, void *ctx)
{
    dlq_ctx *c = ctx;
    dead_copy *e = &c->entries[c->count++];
    e->d = *d;
    memcpy(e->text, d->error.ptr, d->error.len);
    e->d.error.ptr = e->text;
    return TALLY_ok;
}

/* The event's id and type, or nils when the event is gone. */
static void pack_event_names(net_out *o, store_txn *t, uint64_t seq)
{
    msgpack_unpacked up;
    log_event ev;
    msgpack_unpacked_init(&up);
    bool have = log_event_load(t, seq, &up, &ev) == TALLY_ok;
    net_key(o, "event_id");
    if (have)
        msgpack_safe_pack_bin(&o->pk, ev.id.bytes, 16);
    else
        msgpack_pack_nil(&o->pk);
    if (have)
        net_kv_str(o, "type", ev.type.ptr, ev.type.len);
    else
        net_kv_nil(o, "type");
    msgpack_unpacked_destroy(&up);
}

void net_read_dlq(net_out *o, store_txn *t, const net_request *req, int64_t now_ms)
{
    (void)now_ms;
    dlq_ctx c = {calloc(req->sub.limit, sizeof(dead_copy)), 0};
    if (!c.entries)
        return net_reply_error(o, TALLY_overloaded, "out of memory");
    uint64_t next = 0;
    int rc = sub_dlq_list(t, req->sub.name, req->sub.after_seq, req->sub.limit, dlq_keep, &c,
                          &next);
    if (rc != TALLY_ok) {
        net_reply_error(o, rc, refusal_detail(rc, req->op->id));
        free(c.entries);
        return;
    }
    net_reply_open(o, TALLY_ok);
    net_key(o, "entries");
    msgpack_pack_array(&o->pk, c.count);
    for (uint32_t i = 0; i < c.count; i++) {
        const sub_dead_letter *d = &c.entries[i].d;
        net_map_begin(o);
        net_kv_u64(o, "seq", d->seq);
        net_kv_u64(o, "attempts", d->attempts);
        net_kv_str(o, "error", d->error.ptr, d->error.len);
        net_kv_i64(o, "parked_ms", d->parked_ms);
        net_kv_bool(o, "replaying", d->replaying);
        pack_event_names(o, t, d->seq);
        net_map_end(o);
    }
    if (next)
        net_kv_u64(o, "next", next);
    else
        net_kv_nil(o, "next");
    sub_state s; /* the owner of these dead letters */
    if (sub_get(t, req->sub.name, &s) != TALLY_ok)
        net_out_fail(o);
    kv_text_or_nil(o, "contact", s.config.contact);
    kv_text_or_nil(o, "alert_route", s.config.alert_route);
    net_map_end(o);
    free(c.entries);
}
