/*
 * metrics.c — tally-relay's own HTTP face (--http, docs/RELAY.md,
 * "Metrics"), on tallyd's listener (net/http/http.h):
 *
 *   GET /metrics  the Prometheus exposition (text format 0.0.4) of every
 *                 sink's counters, labelled sink="jetstream" or
 *                 sink="http",endpoint="NAME", and subscriber="NAME",
 *                 and the standard process metrics (process_metrics.h)
 *   GET /healthz  200 "ok" while tallyd answers and every sink runs (the
 *                 file's and those of the endpoints defined in tallyd);
 *                 503 saying tallyd is unreachable, or naming a sink
 *                 that stopped
 *
 * A scrape reads atomics only: it never waits for a sink or for tallyd.
 * What only tallyd knows (each subscriber's pending events and dead
 * letters), and whether it answers, the watch thread reads (watch.c).
 */
#include "config.h"

#include "common/limits.h"
#include "net/http/http.h"
#include "common/logging.h"
#include "common/process_metrics.h"
#include "relay/relay.h"

#include <assert.h>
#include <stdio.h>
#include <string.h>
#include <stdlib.h>
#include <time.h>

#define RELAXED memory_order_relaxed

struct relay_http {
    net_http *listener;
    relay_sink_context *const *sinks;
    size_t count;
    int64_t started_s;
    relay_watch *watch;
    relay_runtime *runtime; /* the endpoints defined in tallyd: their sinks too */
};

/* ---- the exposition ---- */

static uint64_t load(const atomic_uint_fast64_t *c) { return atomic_load_explicit(c, RELAXED); }

/* The labels of a sink's series (names are A-Z a-z 0-9 . _ - : nothing to
 * escape), without the braces. */
static void labels(net_text *b, const relay_sink_context *s)
{
    if (s->endpoint)
        net_text_printf(b, "sink=\"http\",endpoint=\"%s\",subscriber=\"%s\"", s->endpoint,
                        s->subscriber);
    else
        net_text_printf(b, "sink=\"jetstream\",subscriber=\"%s\"", s->subscriber);
}

typedef enum sink_value {
    VALUE_UP, VALUE_DELIVERED, VALUE_FILTERED, VALUE_ALREADY_STORED, VALUE_IN_FLIGHT, VALUE_LAG,
    VALUE_DEAD_LETTERS, VALUE_DISABLED, VALUE_COUNT
} sink_value;

static const struct {
    const char *name, *type, *help;
    bool http_only, from_tally; /* from_tally: absent until read from tallyd */
    bool jetstream_only;
} families[VALUE_COUNT] = {
    [VALUE_UP] = {"tally_relay_sink_up", "gauge", "1 while the sink's thread runs, 0 once it stopped."},
    [VALUE_DELIVERED] = {"tally_relay_delivered_total", "counter", "Events the sink took: JetStream PubAcks, 2xx answers of the endpoint."},
    [VALUE_FILTERED] = {"tally_relay_filtered_total", "counter", "Events acknowledged without a request: types the endpoint does not want.", true},
    [VALUE_ALREADY_STORED] = {"tally_relay_already_stored_total", "counter", "Events to publish again (handed back by tallyd, or a publish without an answer) found in the stream already and acknowledged without a publish.", false, false, true},
    [VALUE_IN_FLIGHT] = {"tally_relay_in_flight", "gauge", "Deliveries under way: PubAcks outstanding, HTTP requests without an answer."},
    [VALUE_LAG] = {"tally_relay_lag_events", "gauge", "The subscriber's events after its ack floor in tallyd (head - ack floor), as last read.", false, true},
    [VALUE_DEAD_LETTERS] = {"tally_relay_dead_letters", "gauge", "Events in the subscriber's dead-letter queue in tallyd, as last read.", false, true},
    [VALUE_DISABLED] = {"tally_relay_endpoint_disabled", "gauge", "1 while the endpoint is disabled in tallyd (failing past disable_after, or tally endpoint disable): nothing is delivered to it until it is enabled.", true},
};

static uint64_t value_of(const relay_sink_metrics *m, sink_value v)
{
    switch (v) {
    case VALUE_UP: return atomic_load(&m->up);
    case VALUE_DELIVERED: return load(&m->delivered);
    case VALUE_FILTERED: return load(&m->filtered);
    case VALUE_ALREADY_STORED: return load(&m->already_stored);
    case VALUE_IN_FLIGHT: return load(&m->in_flight);
    case VALUE_LAG: return load(&m->lag);
    case VALUE_DEAD_LETTERS: return load(&m->dead_letters);
    case VALUE_DISABLED: return atomic_load(&m->disabled);
    case VALUE_COUNT: break;
    }
    return 0;
}

/* The reasons each kind of sink can fail with. */
static const struct {
    const char *name;
    bool jetstream, http;
} reasons[RELAY_FAILURE_COUNT] = {
    [RELAY_FAILURE_STATUS] = {"status", false, true},
    [RELAY_FAILURE_TIMEOUT] = {"timeout", true, true},
    [RELAY_FAILURE_CONNECTION] = {"connection", true, true},
    [RELAY_FAILURE_REFUSED] = {"refused", true, false},
    [RELAY_FAILURE_PERMISSION] = {"permission", true, false},
    [RELAY_FAILURE_TOO_LARGE] = {"too_large", true, false},
    [RELAY_FAILURE_TLS] = {"tls", true, true},
    [RELAY_FAILURE_PROTOCOL] = {"protocol", true, false},
    [RELAY_FAILURE_CLIENT] = {"client", true, false},
    [RELAY_FAILURE_DOCUMENT] = {"document", true, true},
    [RELAY_FAILURE_OTHER] = {"other", false, true},
};

static void write_sinks(net_text *b, relay_sink_context *const *sinks, size_t count)
{
    for (int v = 0; v < VALUE_COUNT; v++) {
        net_text_family(b, families[v].name, families[v].type, families[v].help);
        for (size_t i = 0; i < count; i++) {
            const relay_sink_metrics *m = &sinks[i]->metrics;
            if ((families[v].http_only && !sinks[i]->endpoint) ||
                (families[v].jetstream_only && sinks[i]->endpoint) ||
                (families[v].from_tally && !atomic_load(&m->figures_known)))
                continue;
            net_text_printf(b, "%s{", families[v].name);
            labels(b, sinks[i]);
            net_text_printf(b, "} %llu\n", (unsigned long long)value_of(m, (sink_value)v));
        }
    }
    net_text_family(b, "tally_relay_failures_total", "counter",
                    "Failed deliveries (each attempt), by reason.");
    for (size_t i = 0; i < count; i++)
        for (int r = 0; r < RELAY_FAILURE_COUNT; r++) {
            if (!(sinks[i]->endpoint ? reasons[r].http : reasons[r].jetstream))
                continue;
            net_text_printf(b, "tally_relay_failures_total{");
            labels(b, sinks[i]);
            net_text_printf(b, ",reason=\"%s\"} %llu\n", reasons[r].name,
                            (unsigned long long)load(&sinks[i]->metrics.failures[r]));
        }
}

/* The sinks of the file and those defined in tallyd, into all; the
 * latter held as they are (relay_runtime_sinks_unlock after). */
#define SINKS_MAX (1 + RELAY_ENDPOINTS_MAX + RELAY_RUNTIME_ENDPOINTS_MAX)
static size_t sinks_hold(relay_http *h, relay_sink_context *all[SINKS_MAX])
{
    size_t count = h->count;
    memcpy(all, h->sinks, count * sizeof(all[0]));
    relay_runtime_sinks_lock(h->runtime, all, SINKS_MAX, &count);
    return count;
}

static void route_metrics(void *ctx, const net_http_request *rq, net_http_reply *out)
{
    (void)rq;
    relay_http *h = ctx;
    net_text *b = &out->body;
    net_text_sample_u64(b, "tally_relay_start_time_seconds", "gauge",
                        "When the relay started, in seconds since the Unix epoch.",
                        (uint64_t)h->started_s);
    net_text_family(b, "tally_relay_build_info", "gauge",
                    "Always 1; the version of tally-relay as a label.");
    net_text_printf(b, "tally_relay_build_info{version=\"");
    net_text_escaped(b, PACKAGE_VERSION);
    net_text_printf(b, "\"} 1\n");
    net_text_sample_u64(b, "tally_relay_http_connections", "gauge", "HTTP connections open.",
                        net_http_connections(h->listener));
    relay_sink_context *all[SINKS_MAX];
    size_t count = sinks_hold(h, all);
    write_sinks(b, all, count); /* the run-time sinks stay as they are meanwhile */
    relay_runtime_sinks_unlock(h->runtime);
    process_metrics_write(b);
    out->content_type = NET_TEXT_METRICS_TYPE;
}

static void route_healthz(void *ctx, const net_http_request *rq, net_http_reply *out)
{
    (void)rq;
    relay_http *h = ctx;
    int64_t since_s;
    const char *why;
    if (!relay_watch_tallyd_up(h->watch, &since_s, &why)) {
        out->status = 503;
        net_text_printf(&out->body, "tallyd unreachable for %lld s: %s\n",
                        (long long)((int64_t)time(NULL) - since_s), why);
        return;
    }
    relay_sink_context *all[SINKS_MAX];
    size_t count = sinks_hold(h, all);
    for (size_t i = 0; i < count && out->status != 503; i++)
        if (!atomic_load(&all[i]->metrics.up)) {
            out->status = 503;
            net_text_printf(&out->body, "sink %s stopped\n", all[i]->subscriber);
        }
    relay_runtime_sinks_unlock(h->runtime);
    if (out->status != 503)
        net_text_printf(&out->body, "ok\n");
}

static const net_http_route routes[] = {
    {"/metrics", "GET", route_metrics, NULL},
    {"/healthz", "GET", route_healthz, NULL},
};

int relay_http_start(const char *url, relay_sink_context *const *sinks, size_t count,
                     relay_watch *watch, relay_runtime *runtime, relay_http **out)
{
    relay_http *h = calloc(1, sizeof(*h));
    *out = NULL;
    if (h == NULL)
        return 1;
    assert(count <= 1 + RELAY_ENDPOINTS_MAX);
    h->sinks = sinks;
    h->count = count;
    h->watch = watch;
    h->runtime = runtime;
    h->started_s = (int64_t)time(NULL);
    net_log_set_program("tally-relay");
    net_http_options o = {url, TALLY_HTTP_TIMEOUT_S_DEFAULT, TALLY_HTTP_CONNECTIONS_DEFAULT,
                          TALLY_HTTP_CONNECTIONS_PER_ADDRESS_DEFAULT};
    if (net_http_start(&o, routes, sizeof(routes) / sizeof(routes[0]), h, &h->listener) !=
        TALLY_ok) {
        free(h);
        return 1;
    }
    *out = h;
    return 0;
}

unsigned relay_http_port(relay_http *h)
{
    return net_http_port(h->listener);
}

void relay_http_stop(relay_http *h)
{
    if (h == NULL)
        return;
    net_http_stop(h->listener);
    free(h);
}
