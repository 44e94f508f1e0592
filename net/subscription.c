/*
 * subscription.c — subscriber ops: the writer's part and the replies.
 */
#include "net/subscription.h"

#include "common/error.h"
#include "common/msgpack_safe.h"
#include "log/log.h"
#include "net/reply.h"

#include <stdlib.h>
#include <string.h>

/* ---- the writer's part ---- */

static int run_op(store_txn *t, const net_request *req, int64_t now_ms, net_sub_result *res)
{
    const net_sub *u = &req->sub;
    switch (req->op->id) {
    case NET_OP_SUB_CREATE:
        return sub_create(t, u->name, &u->start, &u->config, now_ms, &res->created, &res->state);
    case NET_OP_SUB_DELETE:
        return sub_delete(t, u->name);
    case NET_OP_SUB_FETCH:
        return sub_fetch(t, u->name, u->max, u->restart, now_ms, res->deliveries, &res->count,
                         &res->next_due_ms, &res->state);
    case NET_OP_SUB_ACK:
        return sub_ack(t, u->name, u->seq, u->done, u->done_count, now_ms, &res->acked,
                       &res->state);
    case NET_OP_SUB_NAK:
        return sub_nak(t, u->name, u->seq, u->has_delay, u->delay_ms, u->text, now_ms,
                       &res->attempt, &res->deliver_after_ms);
    case NET_OP_SUB_PARK:
        return sub_park(t, u->name, u->seq, u->text, now_ms, &res->state);
    case NET_OP_DLQ_REPLAY:
        return sub_dlq_replay(t, u->name, u->seq != 0, u->seq, now_ms, &res->replaying);
    case NET_OP_DLQ_DISCARD:
        return sub_dlq_discard(t, u->name, u->seq, now_ms);
    default:
        return TALLY_internal;
    }
}

void net_sub_apply(store_txn *t, const net_request *req, int64_t now_ms, net_sub_result *res)
{
    res->code = TALLY_ok;
    res->count = 0;
    res->created = false;
    res->next_due_ms = INT64_MAX;
    store_txn child;
    int rc = store_txn_begin(t->st, t, false, &child);
    if (rc == TALLY_ok) {
        rc = run_op(&child, req, now_ms, res);
        rc = rc == TALLY_ok ? store_txn_commit(&child) : (store_txn_abort(&child), rc);
    }
    if (rc != TALLY_ok)
        res->count = 0;
    res->code = rc;
}

bool net_sub_fetch_should_wait(const net_request *req, const net_sub_result *res,
                               uint64_t *watermark)
{
    if (req->op->id != NET_OP_SUB_FETCH || req->sub.wait_ms == 0 || res->code != TALLY_ok ||
        res->count > 0)
        return false;
    bool room = res->state.in_flight < res->state.config.max_ack_pending;
    *watermark = room ? res->state.delivered_seq : UINT64_MAX;
    return true;
}

/* ---- packing ---- */

static const char *refusal_detail(int code)
{
    switch (code) {
    case TALLY_subscriber_not_found: return "no subscriber by that name";
    case TALLY_subscriber_exists_with_different_config:
        return "a subscriber by that name exists with another max_deliver, ack_wait_ms, backoff_ms or max_ack_pending";
    case TALLY_too_many_subscribers: return "at most 256 subscribers; delete one first";
    case TALLY_seq_beyond_head: return "beyond the log's head";
    case TALLY_seq_not_delivered: return "a done seq was never delivered to this subscriber";
    case TALLY_seq_not_in_flight: return "not in flight: acknowledged, parked, or never delivered";
    case TALLY_dead_letter_not_found: return "no dead letter with that seq";
    default:
        return tally_error_class_of(code) == TALLY_CLASS_FAULT ? "not applied; retry later" : "";
    }
}

#define KV_U64(pk, k, v) (msgpack_safe_pack_cstr(pk, k) || msgpack_pack_uint64(pk, v))
#define KV_I64(pk, k, v) (msgpack_safe_pack_cstr(pk, k) || msgpack_pack_int64(pk, v))

static int pack_metrics(msgpack_packer *pk, store_txn *t, const sub_state *s, int64_t now_ms)
{
    sub_metrics m;
    if (sub_metrics_get(t, s, now_ms, &m) != TALLY_ok)
        return -1;
    int bad = msgpack_pack_map(pk, 15) || msgpack_safe_pack_cstr(pk, "name") ||
              msgpack_safe_pack_cstr(pk, s->name) || KV_U64(pk, "ack_floor", s->ack_floor) ||
              KV_U64(pk, "delivered_seq", s->delivered_seq) || KV_U64(pk, "pending", m.pending) ||
              KV_U64(pk, "in_flight", s->in_flight) ||
              KV_I64(pk, "oldest_unacked_age_s", m.oldest_unacked_age_s) ||
              KV_U64(pk, "redelivered", s->redelivered) ||
              KV_U64(pk, "dead_letters", s->dead_letters) ||
              KV_U64(pk, "replaying", s->replaying) ||
              KV_U64(pk, "max_deliver", s->config.max_deliver) ||
              KV_U64(pk, "ack_wait_ms", s->config.ack_wait_ms) ||
              msgpack_safe_pack_cstr(pk, "backoff_ms") ||
              msgpack_pack_array(pk, s->config.backoff_count);
    for (uint32_t i = 0; !bad && i < s->config.backoff_count; i++)
        bad = msgpack_pack_uint32(pk, s->config.backoff_ms[i]);
    return bad || KV_U64(pk, "max_ack_pending", s->config.max_ack_pending) ||
           KV_I64(pk, "created_ms", s->created_ms) || KV_I64(pk, "updated_ms", s->updated_ms);
}

static int pack_fetch(msgpack_packer *pk, store_txn *rt, const net_sub_result *res)
{
    log_head head;
    if (log_head_get(rt, &head) != TALLY_ok)
        return -1;
    MDB_val events[TALLY_SUB_FETCH_EVENTS_MAX];
    uint32_t found = 0;
    for (uint32_t i = 0; i < res->count; i++) {
        uint8_t k[8];
        log_seq_key(res->deliveries[i].seq, k);
        if (store_get(rt, STORE_DB_LOG, k, 8, &events[i]) == TALLY_ok)
            found++;
        else
            events[i].mv_data = NULL; /* removed by retention since: nothing to deliver */
    }
    int bad = net_reply_head(pk, 5, TALLY_ok) || msgpack_safe_pack_cstr(pk, "events") ||
              msgpack_pack_array(pk, found);
    for (uint32_t i = 0; !bad && i < res->count; i++) {
        const sub_delivery *d = &res->deliveries[i];
        if (!events[i].mv_data)
            continue;
        bad = msgpack_pack_map(pk, 4) || KV_U64(pk, "seq", d->seq) ||
              KV_U64(pk, "attempt", d->attempt) || msgpack_safe_pack_cstr(pk, "replay") ||
              (d->replay ? msgpack_pack_true(pk) : msgpack_pack_false(pk)) ||
              msgpack_safe_pack_cstr(pk, "event") ||
              msgpack_safe_pack_bin(pk, events[i].mv_data, events[i].mv_size);
    }
    return bad || KV_U64(pk, "ack_floor", res->state.ack_floor) || KV_U64(pk, "head", head.seq);
}

int net_reply_sub_write(msgpack_packer *pk, store_txn *rt, const net_request *req,
                        const net_sub_result *res, int fault, int64_t now_ms)
{
    int code = fault ? fault : res->code;
    if (code != TALLY_ok)
        return net_reply_error(pk, code, refusal_detail(code));
    switch (req->op->id) {
    case NET_OP_SUB_CREATE:
        return net_reply_head(pk, 4, TALLY_ok) || msgpack_safe_pack_cstr(pk, "created") ||
               (res->created ? msgpack_pack_true(pk) : msgpack_pack_false(pk)) ||
               msgpack_safe_pack_cstr(pk, "subscriber") ||
               pack_metrics(pk, rt, &res->state, now_ms);
    case NET_OP_SUB_DELETE:
        return net_reply_head(pk, 3, TALLY_ok) || msgpack_safe_pack_cstr(pk, "deleted") ||
               msgpack_pack_true(pk);
    case NET_OP_SUB_FETCH:
        return pack_fetch(pk, rt, res);
    case NET_OP_SUB_ACK:
        return net_reply_head(pk, 4, TALLY_ok) || KV_U64(pk, "ack_floor", res->state.ack_floor) ||
               KV_U64(pk, "acked", res->acked);
    case NET_OP_SUB_NAK:
        return net_reply_head(pk, 4, TALLY_ok) || KV_U64(pk, "attempt", res->attempt) ||
               KV_I64(pk, "deliver_after_ms", res->deliver_after_ms);
    case NET_OP_SUB_PARK:
        return net_reply_head(pk, 3, TALLY_ok) || KV_U64(pk, "ack_floor", res->state.ack_floor);
    case NET_OP_DLQ_REPLAY:
        return net_reply_head(pk, 3, TALLY_ok) || KV_U64(pk, "replaying", res->replaying);
    case NET_OP_DLQ_DISCARD:
        return net_reply_head(pk, 3, TALLY_ok) || msgpack_safe_pack_cstr(pk, "discarded") ||
               msgpack_pack_true(pk);
    default:
        return net_reply_error(pk, TALLY_internal, "not a subscriber write");
    }
}

/* ---- reads ---- */

typedef struct list_ctx {
    msgpack_packer *pk;
    store_txn *t;
    int64_t now_ms;
    uint32_t count;
    bool packing;
} list_ctx;

static int list_one(const sub_state *s, void *ctx)
{
    list_ctx *l = ctx;
    l->count++;
    return l->packing && pack_metrics(l->pk, l->t, s, l->now_ms) ? TALLY_internal : TALLY_ok;
}

int net_pack_subscribers(msgpack_packer *pk, store_txn *t, int64_t now_ms)
{
    list_ctx l = {pk, t, now_ms, 0, false};
    if (sub_list(t, list_one, &l) != TALLY_ok || msgpack_pack_array(pk, l.count))
        return -1;
    l.packing = true;
    l.count = 0;
    return sub_list(t, list_one, &l) != TALLY_ok;
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
static int pack_event_names(msgpack_packer *pk, store_txn *t, uint64_t seq)
{
    msgpack_unpacked up;
    log_event ev;
    msgpack_unpacked_init(&up);
    bool have = log_event_load(t, seq, &up, &ev) == TALLY_ok;
    int bad = msgpack_safe_pack_cstr(pk, "event_id") ||
              (have ? msgpack_safe_pack_bin(pk, ev.id.bytes, 16) : msgpack_pack_nil(pk)) ||
              msgpack_safe_pack_cstr(pk, "type") ||
              (have ? msgpack_safe_pack_str(pk, ev.type) : msgpack_pack_nil(pk));
    msgpack_unpacked_destroy(&up);
    return bad;
}

static int read_dlq(msgpack_packer *pk, store_txn *t, const net_request *req)
{
    dlq_ctx c = {calloc(req->sub.limit, sizeof(dead_copy)), 0};
    if (!c.entries)
        return net_reply_error(pk, TALLY_overloaded, "out of memory");
    uint64_t next = 0;
    int rc = sub_dlq_list(t, req->sub.name, req->sub.after_seq, req->sub.limit, dlq_keep, &c,
                          &next);
    int bad;
    if (rc != TALLY_ok) {
        bad = net_reply_error(pk, rc, refusal_detail(rc));
    } else {
        bad = net_reply_head(pk, 4, TALLY_ok) || msgpack_safe_pack_cstr(pk, "entries") ||
              msgpack_pack_array(pk, c.count);
        for (uint32_t i = 0; !bad && i < c.count; i++) {
            const sub_dead_letter *d = &c.entries[i].d;
            bad = msgpack_pack_map(pk, 7) || KV_U64(pk, "seq", d->seq) ||
                  KV_U64(pk, "attempts", d->attempts) || msgpack_safe_pack_cstr(pk, "error") ||
                  msgpack_safe_pack_str(pk, d->error) || KV_I64(pk, "parked_ms", d->parked_ms) ||
                  msgpack_safe_pack_cstr(pk, "replaying") ||
                  (d->replaying ? msgpack_pack_true(pk) : msgpack_pack_false(pk)) ||
                  pack_event_names(pk, t, d->seq);
        }
        bad = bad || msgpack_safe_pack_cstr(pk, "next") ||
              (next ? msgpack_pack_uint64(pk, next) : msgpack_pack_nil(pk));
    }
    free(c.entries);
    return bad;
}

int net_reply_sub_read(msgpack_packer *pk, store_txn *t, const net_request *req, int64_t now_ms)
{
    switch (req->op->id) {
    case NET_OP_SUB_GET: {
        sub_state s;
        int rc = sub_get(t, req->sub.name, &s);
        if (rc != TALLY_ok)
            return net_reply_error(pk, rc, refusal_detail(rc));
        return net_reply_head(pk, 3, TALLY_ok) || msgpack_safe_pack_cstr(pk, "subscriber") ||
               pack_metrics(pk, t, &s, now_ms);
    }
    case NET_OP_SUB_LIST:
        return net_reply_head(pk, 3, TALLY_ok) || msgpack_safe_pack_cstr(pk, "subscribers") ||
               net_pack_subscribers(pk, t, now_ms);
    case NET_OP_DLQ_LIST:
        return read_dlq(pk, t, req);
    default:
        return net_reply_error(pk, TALLY_internal, "not a subscriber read");
    }
}
