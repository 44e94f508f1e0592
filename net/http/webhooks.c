/*
 * webhooks.c — POST /webhooks/<source> (a row of net/http/http_routes.c): a
 * delivery is checked on the HTTP listener's thread (its source, size and
 * signature: webhook_verify), then goes to the writer as a webhook_receive
 * write in a slot of its own (an "outside" slot: no NNG context), joins
 * the same queue and group commit as every write, and is answered only
 * after that commit: the route is a starter (net/http/http.h), its connection
 * suspended meanwhile, so neither the listener nor NNG's threads wait.
 *
 *   200                             stored: one webhook.received event
 *   200 Idempotent-Replayed: true   the same source, id and body again: nothing stored
 *   409                             the same id with another body (logged)
 *   401                             a missing or wrong signature, a stale timestamp
 *   404                             no such source
 *   400 / 413 / 503                 no event id; a body over the limit; overloaded,
 *                                   stopping or a fault (nothing stored, retry)
 *
 * Each outcome counts in tally_webhooks_total{source,outcome} (/metrics).
 */
#include "net/http/face.h"

#include "common/clock.h"
#include "common/error.h"
#include "common/logging.h"
#include "net/ops/ops.h"
#include "net/ops/ops_webhook.h"
#include "net/http/webhooks.h"

#include <stdlib.h>
#include <string.h>

#define PREFIX "/webhooks/"
#define JSON "application/json"

/* One delivery on its way through the writer. The slot comes first: the
 * writer hands back the slot, and this is the whole. */
typedef struct webhook_call {
    slot s;
    net_http_pending *pending;
    webhook_source *src;
    webhook_verified v;
    msgpack_sbuffer request; /* the webhook_receive request: s.req points into it */
    net_http_reply now; /* an answer given while the starter runs (refused at once) */
} webhook_call;

static void call_free(webhook_call *call)
{
    net_request_reset(&call->s.req);
    msgpack_sbuffer_destroy(&call->request);
    free(call);
}

/* The delivery whose starter runs on this thread: slot_enqueue_write
 * answers a refusal (overloaded, stopping) at once, on the caller's
 * thread, and that answer must be the starter's own reply (the listener
 * holds the request's lock while a starter runs). */
static _Thread_local webhook_call *starting;

static void count(webhook_source *src, webhook_outcome o)
{
    atomic_fetch_add_explicit(&src->outcomes[o], 1, memory_order_relaxed);
}

static const unsigned outcome_status[WEBHOOK_OUTCOMES] = {
    [WEBHOOK_ACCEPTED] = 200, [WEBHOOK_REPLAYED] = 200, [WEBHOOK_CONFLICT] = 409,
    [WEBHOOK_BAD_SIGNATURE] = 401, [WEBHOOK_STALE] = 401, [WEBHOOK_CLOCK_SKEW] = 401, [WEBHOOK_BAD_REQUEST] = 400,
    [WEBHOOK_TOO_LARGE] = 413, [WEBHOOK_UNAVAILABLE] = 503,
};

/* The reply of an outcome, counted for src; seq the event's log seq and
 * cluster_seq the stream position it was applied at (cluster mode), 0:
 * none. */
static void answer(net_http_reply *r, webhook_source *src, webhook_outcome o, uint64_t seq,
                   uint64_t cluster_seq)
{
    count(src, o);
    r->status = outcome_status[o];
    r->content_type = JSON;
    net_text_printf(&r->body, "{\"outcome\":\"%s\"", webhook_outcome_name(o));
    if (seq)
        net_text_printf(&r->body, ",\"seq\":%llu", (unsigned long long)seq);
    if (cluster_seq)
        net_text_printf(&r->body, ",\"cluster_seq\":%llu", (unsigned long long)cluster_seq);
    net_text_printf(&r->body, "}\n");
    if (o == WEBHOOK_REPLAYED)
        r->headers[0].name = "Idempotent-Replayed", r->headers[0].value = "true";
    if (o == WEBHOOK_UNAVAILABLE)
        r->headers[0].name = "Retry-After", r->headers[0].value = "1";
}

/* The writer (or completer) answers the slot: after the group's commit,
 * or with the fault that kept it from being applied or committed. */
static void webhook_answered(slot *s, int fault)
{
    webhook_call *call = (webhook_call *)s;
    const ledger_outcome *o = &s->res.outcomes[0];
    int code = fault ? fault : s->res.faults[0] ? s->res.faults[0] : o->code;
    webhook_outcome w = code == TALLY_ok && o->replayed           ? WEBHOOK_REPLAYED
                        : code == TALLY_ok                        ? WEBHOOK_ACCEPTED
                        : code == TALLY_idempotency_key_reused    ? WEBHOOK_CONFLICT
                        : tally_error_class_of(code) == TALLY_CLASS_FAULT ? WEBHOOK_UNAVAILABLE
                                                                          : WEBHOOK_BAD_REQUEST;
    if (w == WEBHOOK_CONFLICT)
        net_log(NET_LOG_WARN, "webhook %s: event id %.*s came again with a different body: 409",
                call->src->name, (int)call->v.event_id.len, call->v.event_id.ptr);
    else if (w != WEBHOOK_ACCEPTED && w != WEBHOOK_REPLAYED)
        net_log(NET_LOG_WARN, "webhook %s: event id %.*s not stored: %s", call->src->name,
                (int)call->v.event_id.len, call->v.event_id.ptr, tally_strerror(code));
    net_http_reply r = {0};
    bool stored = w == WEBHOOK_ACCEPTED || w == WEBHOOK_REPLAYED;
    answer(&r, call->src, w, stored ? o->first_seq : 0, stored ? s->cluster_seq : 0);
    if (call == starting) { /* refused at once: the starter answers and frees */
        call->now = r;
        return;
    }
    /* out of the count before the answer leaves: a client that has its
     * answer never sees itself still counted */
    atomic_fetch_sub(&s->srv->http->webhooks_in_flight, 1);
    net_http_answer(call->pending, &r); /* the request's body is not ours from here */
    call_free(call);
}

static const char *header_of(const void *rq, const char *name)
{
    return net_http_header(rq, name);
}

/* The webhook_receive write of a verified delivery, in a fresh slot: its
 * request packed (ops_webhook.h) as the cluster's command stream carries
 * it, and decoded from there, so a single node and every cluster node
 * apply the same request. */
static webhook_call *call_new(server *srv, webhook_source *src, const net_http_request *rq,
                              const webhook_verified *v)
{
    webhook_call *call = calloc(1, sizeof(*call));
    if (call == NULL)
        return NULL;
    call->src = src;
    call->v = *v; /* its strings point into v->text: moved with it */
    call->v.event_id.ptr = call->v.text + (v->event_id.ptr - v->text);
    if (v->event_type.len)
        call->v.event_type.ptr = call->v.text + (v->event_type.ptr - v->text);
    msgpack_sbuffer_init(&call->request);
    ledger_webhook w = {tally_str_from(src->name), call->v.event_id, call->v.event_type,
                        call->v.signed_at_s, {rq->body, rq->body_len}};
    slot *s = &call->s;
    if (net_webhook_request_pack(&call->request, tally_str_from(src->consumer), &w) != 0 ||
        net_webhook_request_decode(&s->req, call->request.data, call->request.size) != TALLY_ok) {
        call_free(call);
        return NULL;
    }
    s->srv = srv;
    atomic_init(&s->owner, OWNER_NNG);
    s->timed_kind = -1;
    s->outside_answer = webhook_answered;
    s->outside_bytes = call->request.size;
    return call;
}

bool webhooks_start(void *ctx, const net_http_request *rq, net_http_reply *out,
                    net_http_pending *p)
{
    server *srv = ctx;
    net_webhooks *hooks = srv->opt->webhooks;
    webhook_source *src = webhooks_find(hooks, rq->path + strlen(PREFIX));
    if (src == NULL) {
        if (hooks)
            atomic_fetch_add_explicit(&hooks->unknown_source, 1, memory_order_relaxed);
        out->status = 404;
        net_text_printf(&out->body, "no such webhook source\n");
        return false;
    }
    webhook_delivery d = {header_of, rq, rq->body ? rq->body : "", rq->body_len,
                          clock_wall_ms() / 1000};
    webhook_verified v;
    webhook_outcome o = webhook_verify(src, &d, &v);
    if (o == WEBHOOK_CLOCK_SKEW || (o == WEBHOOK_STALE && v.signed_at_s == 0)) {
        /* a clock to fix, or a sender that signs no Unix seconds: say so */
        if (o == WEBHOOK_CLOCK_SKEW)
            net_log(NET_LOG_WARN,
                    "webhook %s refused: clock_skew: signed %lld s ahead of tallyd's clock "
                    "(more than its tolerance: check both clocks)",
                    src->name, (long long)(v.signed_at_s - d.now_s));
        else
            net_log(NET_LOG_WARN,
                    "webhook %s refused: stale_timestamp: the signed time is 0 or not in Unix "
                    "seconds (milliseconds?)",
                    src->name);
    } else if (o != WEBHOOK_ACCEPTED) {
        net_log(NET_LOG_DEBUG, "webhook %s refused: %s", src->name, webhook_outcome_name(o));
    }
    if (o != WEBHOOK_ACCEPTED) {
        answer(out, src, o, 0, 0);
        return false;
    }
    webhook_call *call = NULL;
    if (atomic_fetch_add(&srv->http->webhooks_in_flight, 1) >= srv->opt->http_webhooks_in_flight ||
        (call = call_new(srv, src, rq, &v)) == NULL) {
        atomic_fetch_sub(&srv->http->webhooks_in_flight, 1);
        answer(out, src, WEBHOOK_UNAVAILABLE, 0, 0);
        return false;
    }
    call->pending = p;
    starting = call;
    slot_enqueue_write(&call->s, OWNER_NNG); /* answered by webhook_answered */
    starting = NULL;
    if (call->now.status == 0)
        return true; /* queued: net_http_answer after the commit */
    *out = call->now; /* refused at once */
    call_free(call);
    atomic_fetch_sub(&srv->http->webhooks_in_flight, 1);
    return false;
}

void webhooks_metrics(server *srv, net_text *out)
{
    net_webhooks *hooks = srv->opt->webhooks;
    if (hooks == NULL)
        return;
    net_text_printf(out, "# HELP tally_webhooks_total Webhook deliveries by source and outcome "
                         "(docs/WEBHOOKS.md).\n# TYPE tally_webhooks_total counter\n");
    for (unsigned i = 0; i < hooks->count; i++)
        for (int o = 0; o < WEBHOOK_OUTCOMES; o++)
            net_text_printf(out, "tally_webhooks_total{source=\"%s\",outcome=\"%s\"} %llu\n",
                            hooks->sources[i].name, webhook_outcome_name((webhook_outcome)o),
                            (unsigned long long)atomic_load(&hooks->sources[i].outcomes[o]));
    net_text_printf(out, "# HELP tally_webhooks_unknown_source_total Deliveries to a source "
                         "not in --webhooks (404).\n# TYPE tally_webhooks_unknown_source_total "
                         "counter\ntally_webhooks_unknown_source_total %llu\n",
                    (unsigned long long)atomic_load(&hooks->unknown_source));
    net_text_printf(out, "# HELP tally_webhooks_in_flight Verified deliveries waiting for their "
                         "commit (at most %u; more: 503).\n# TYPE tally_webhooks_in_flight "
                         "gauge\ntally_webhooks_in_flight %lld\n",
                    srv->opt->http_webhooks_in_flight,
                    (long long)atomic_load(&srv->http->webhooks_in_flight));
}
