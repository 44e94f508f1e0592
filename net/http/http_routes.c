/*
 * http_routes.c — the routes of tallyd's HTTP face and the periodic
 * health evaluation:
 *
 *   (the three GETs above are answered on the reserved places too, while
 *   every other place is taken: net/http/http_conns.h)
 *
 *   GET /metrics  the Prometheus exposition (net/metrics/metrics.h), from a
 *                 read-only transaction and the counters: never waits for
 *                 the writer
 *   GET /healthz  200 "ok" while tallyd serves with its store open and
 *                 its writer makes progress; 503 once it stops, or while
 *                 writes wait on a writer stalled past --writer-stall-ms
 *   GET /readyz   the health checks as JSON: 200 while every readiness
 *                 check passes (alert checks are shown, never a 503), 503
 *                 with the failing ones and why (net/metrics/health.h)
 *   POST /webhooks/<source>  a signed webhook delivery (net/http/webhooks.c)
 *   GET /v1/openapi.json  the JSON API's OpenAPI document (net/http/openapi.h),
 *                 the bytes of `tallyd --openapi`; no token, like /metrics:
 *                 it is made of the build's tables, nothing of the store
 *
 *   GET /v1/events  the log as Server-Sent Events (net/http/sse.c)
 *   GET /v1/figures, /v1/whoami, /console/...  the web console's
 *                 (net/http/http_console.c)
 *   /v1/...       the JSON API (net/http/http_json.c)
 *
 * More routes (webhooks) are rows of the same table.
 */
#include "net/http/face.h"
#include "net/http/openapi.h"
#include "net/metrics/figures_history.h"

#include "common/clock.h"
#include "common/error.h"

#include <stdlib.h>

#define JSON "application/json"

static bool is_stopping(server *srv)
{
    pthread_mutex_lock(&srv->mu);
    bool stopping = srv->stopping;
    pthread_mutex_unlock(&srv->mu);
    return stopping;
}

bool http_read_begin(server *srv, store_txn *t)
{
    pthread_rwlock_rdlock(&srv->store_rw);
    if (!srv->store_closed && store_txn_begin(srv->st, NULL, true, t) == TALLY_ok)
        return true;
    pthread_rwlock_unlock(&srv->store_rw);
    return false;
}

void http_read_end(server *srv, store_txn *t)
{
    store_txn_abort(t);
    pthread_rwlock_unlock(&srv->store_rw);
}

static void unavailable(net_http_reply *out, const char *why)
{
    out->status = 503;
    net_text_printf(&out->body, "%s\n", why);
}

static void view_of(server *srv, net_metrics_view *v)
{
    srv->http->hooks.counts(srv, &v->connections, &v->connections_refused,
                            &v->publish_subscribers);
    pthread_mutex_lock(&srv->mu);
    v->long_polls_parked = 0;
    for (const slot *s = srv->waiters; s; s = s->next)
        v->long_polls_parked++;
    v->cluster = srv->cluster != NULL;
    v->cluster_position = srv->cluster_position;
    v->cluster_stream_last_seq = srv->cluster_stream_last;
    v->cluster_checkpoint_seq = srv->cluster_checkpoint_seq;
    v->cluster_checkpoint_agreeing = srv->cluster_checkpoint_agreeing;
    v->cluster_diverged = atomic_load(&srv->cluster_diverged);
    pthread_mutex_unlock(&srv->mu);
    v->http_connections = srv->http->http ? net_http_connections(srv->http->http) : 0;
    v->http_waiting = srv->http->http ? net_http_waiting(srv->http->http) : 0;
    v->http_in_flight = srv->http->http ? net_http_in_flight(srv->http->http) : 0;
    v->version = srv->opt->version ? srv->opt->version : "unknown";
    v->writer_stall_ms = writer_stall_ms(srv, &v->write_queue_depth);
}

/* The readiness of a scrape, from its own evaluation of the checks. */
static int view_health(server *srv, store_txn *t, net_metrics_view *v)
{
    net_health_report *r = NULL;
    int rc = net_health_evaluate(srv->health, t, clock_wall_ms(), &r);
    if (rc != TALLY_ok)
        return rc;
    v->ready = r->not_ready == 0;
    v->readiness_failing = r->not_ready;
    v->alerts_failing = r->failing - r->not_ready;
    v->disk_known = r->facts.disk_known;
    v->disk_free_bytes = r->facts.disk_free_bytes;
    free(r);
    return TALLY_ok;
}

static void route_metrics(void *ctx, const net_http_request *rq, net_http_reply *out)
{
    (void)rq;
    server *srv = ctx;
    store_txn t;
    net_metrics_view v;
    view_of(srv, &v);
    if (!http_read_begin(srv, &t))
        return unavailable(out, "shutting down");
    int rc = view_health(srv, &t, &v);
    if (rc == TALLY_ok)
        rc = net_metrics_write(&out->body, &t, &v, clock_wall_ms());
    http_read_end(srv, &t);
    webhooks_metrics(srv, &out->body);
    http_events_metrics(srv, &out->body);
    if (srv->http->http)
        net_http_metrics(srv->http->http, &out->body);
    if (rc != TALLY_ok) {
        net_text_free(&out->body);
        out->status = 500;
        net_text_printf(&out->body, "metrics not read: %s\n", tally_strerror(rc));
        return;
    }
    out->content_type = NET_TEXT_METRICS_TYPE;
}

static void route_healthz(void *ctx, const net_http_request *rq, net_http_reply *out)
{
    (void)rq;
    server *srv = ctx;
    pthread_rwlock_rdlock(&srv->store_rw);
    bool open = !srv->store_closed;
    pthread_rwlock_unlock(&srv->store_rw);
    if (!open || is_stopping(srv))
        return unavailable(out, "shutting down");
    uint64_t queued = 0, stall_ms = writer_stall_ms(srv, &queued);
    uint64_t limit_ms = net_health_store_threshold(&srv->opt->health, NET_CHECK_WRITER_STALL);
    if (stall_ms > limit_ms) {
        out->status = 503;
        net_text_printf(&out->body,
                        "writer stalled: no progress for %llu ms while %llu writes wait "
                        "(--writer-stall-ms %llu)\n",
                        (unsigned long long)stall_ms, (unsigned long long)queued,
                        (unsigned long long)limit_ms);
        return;
    }
    net_text_printf(&out->body, "ok\n");
}

static void route_readyz(void *ctx, const net_http_request *rq, net_http_reply *out)
{
    (void)rq;
    server *srv = ctx;
    store_txn t;
    net_health_report *r = NULL;
    out->content_type = JSON;
    if (is_stopping(srv) || !http_read_begin(srv, &t)) {
        out->status = 503;
        net_text_printf(&out->body, "{\"status\":\"failing\",\"checks\":[{\"check\":\"store\","
                                    "\"subscriber\":null,\"ok\":false,\"value\":null,"
                                    "\"threshold\":null,\"reason\":\"shutting down\"}]}\n");
        return;
    }
    int rc = net_health_evaluate(srv->health, &t, clock_wall_ms(), &r);
    http_read_end(srv, &t);
    if (rc != TALLY_ok) {
        out->status = 503;
        net_text_printf(&out->body, "{\"status\":\"failing\",\"checks\":[{\"check\":\"store\","
                                    "\"subscriber\":null,\"ok\":false,\"value\":null,"
                                    "\"threshold\":null,\"reason\":\"%s\"}]}\n", tally_strerror(rc));
        return;
    }
    out->status = r->not_ready ? 503 : 200;
    net_health_json(&out->body, r);
    free(r);
}

static void route_openapi(void *ctx, const net_http_request *rq, net_http_reply *out)
{
    (void)ctx;
    (void)rq;
    size_t len;
    char *text = net_openapi_text(&len);
    if (text == NULL) {
        out->status = 503;
        net_text_printf(&out->body, "out of memory\n");
        return;
    }
    out->content_type = JSON;
    out->body = (net_text){text, len, len + 1, false};
}

static const net_http_route routes[] = {
    {"/metrics", "GET", route_metrics, NULL, true},
    {"/healthz", "GET", route_healthz, NULL, true},
    {"/readyz", "GET", route_readyz, NULL, true},
    {"/v1/openapi.json", "GET", route_openapi, NULL, false},
    {"/v1/figures", "GET", http_figures_route, NULL, false},
    {"/v1/whoami", "GET", http_whoami_route, NULL, false},
    {"/console", "GET", http_console_route, NULL, false},
    {"/console/", "GET", http_console_route, NULL, false},
    {"/v1/events", "GET", http_events_route, NULL, false},
    {"/v1/", "GET, POST", NULL, http_json_start},
    {"/webhooks/", "POST", NULL, webhooks_start},
};

int http_routes_start(server *srv)
{
    const net_server_options *o = srv->opt;
    if (o->http_url == NULL)
        return 0;
    net_http_options ho = {o->http_url, o->http_timeout_s, o->http_connections_max,
                           o->http_per_address_max, o->tls_pem, (int)o->tls_client_auth,
                           o->http_reserved_max};
    if (http_json_open(srv) != 0 || http_events_start(srv) != 0)
        return NNG_ENOMEM;
    int rc = net_http_start(&ho, routes, sizeof(routes) / sizeof(routes[0]), srv, &srv->http->http);
    if (rc != TALLY_ok)
        return NNG_EADDRINUSE;
    if (!net_url_with_port(o->http_url, net_http_port(srv->http->http), srv->http->url,
                           sizeof(srv->http->url))) {
        net_log(NET_LOG_ERROR, "%s: a URL over %zu bytes", o->http_url, sizeof(srv->http->url) - 1);
        return NNG_EINVAL;
    }
    return 0;
}

void http_routes_stop(server *srv)
{
    http_events_stop(srv);
    if (!http_json_stop(srv))
        return; /* a suspended connection would stop the listener's stop */
    net_http_stop(srv->http->http);
    srv->http->http = NULL;
}

void health_tick(server *srv)
{
    store_txn t;
    net_health_report *r = NULL;
    if (!http_read_begin(srv, &t))
        return;
    int64_t now_ms = clock_wall_ms();
    int rc = net_health_evaluate(srv->health, &t, now_ms, &r);
    if (rc != TALLY_ok)
        net_log(NET_LOG_WARN, "health checks not run: %s", tally_strerror(rc));
    if (rc == TALLY_ok) {
        net_history_counters c = {atomic_load(&srv->commits), atomic_load(&srv->commands)};
        rc = net_history_sample(srv->history, &t, now_ms, &c, &r->facts);
        if (rc != TALLY_ok)
            net_log(NET_LOG_WARN, "figures not sampled: %s", tally_strerror(rc));
    }
    http_read_end(srv, &t);
    free(r);
}
