/*
 * runtime.c — the endpoints defined in tallyd at run time (docs/RELAY.md,
 * "Endpoints managed at run time"): a thread lists them (endpoint_list)
 * every RELAY_ENDPOINTS_POLL_MS and starts a webhook sink for each new
 * one, starts it again with its new settings when its definition changed
 * (endpoint_update), and stops it when it is gone (endpoint_delete); a
 * sink whose run ended on its own (a failure: /healthz says so meanwhile)
 * is started again at a listing after 1 s, then 2, 4 ... up to
 * RESTART_PAUSE_MAX_MS while it keeps ending (each said). An
 * endpoint of the config file by the same name wins: tallyd's is not run
 * (said once). Each sink has a stop flag of its own, so one stops without
 * the others; a stop of the relay stops them all.
 */
#include "config.h"

#include "relay/relay.h"

#include "common/clock.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The longest pause before a sink that keeps ending is started again. */
#define RESTART_PAUSE_MAX_MS 30000

/* One endpoint of tallyd's, and the sink that runs it. */
typedef struct runtime_sink {
    bool used;         /* this slot holds an endpoint */
    bool running;      /* its thread was started and not joined */
    bool refused;      /* its definition cannot be run (said once) */
    pthread_t thread;
    atomic_bool stop;  /* this sink's own stop */
    atomic_bool ended; /* its thread returned (result) */
    int result;
    unsigned restarts;       /* since its definition was last taken */
    int64_t restart_at_ms;   /* ended: not started again before (monotonic) */
    tally_endpoint_definition def; /* as last listed */
    relay_endpoint cfg;
    relay_sink_context ctx;
} runtime_sink;

struct relay_runtime {
    pthread_mutex_t mu;         /* held while sinks change, and by a scrape */
    const relay_config *config; /* the file's: its endpoints win */
    tally_client *client;
    atomic_bool *relay_stop;
    pthread_t thread;
    runtime_sink sinks[RELAY_RUNTIME_ENDPOINTS_MAX];
    tally_endpoint_definition listed[RELAY_RUNTIME_ENDPOINTS_MAX];
    bool list_failed;                                  /* said once until it works */
    /* the subscribers this relay claimed (relay_instance_claim_one): a
     * claim holds until the process exits, so one is made once a name */
    char claimed[RELAY_RUNTIME_CLAIMS_MAX][TALLY_CLIENT_SUBSCRIBER_NAME_BYTES_MAX + 1];
    size_t claim_count;
    char clash_said[RELAY_RUNTIME_ENDPOINTS_MAX][RELAY_ENDPOINT_NAME_BYTES_MAX + 1];
};

static void *sink_main(void *arg)
{
    runtime_sink *k = arg;
    k->result = relay_webhook_run(&k->cfg, &k->ctx);
    atomic_store(&k->ctx.metrics.up, false); /* /healthz: 503 until it runs again */
    atomic_store(&k->ended, true);
    return NULL;
}

/* Start the sink of k->def (already in k->cfg), its counters kept when
 * it ran before (a changed definition: its series go on); false when its
 * thread does not start (said). */
static bool sink_start(relay_runtime *r, runtime_sink *k, bool keep_counts)
{
    relay_sink_metrics counts = k->ctx.metrics;
    memset(&k->ctx, 0, sizeof(k->ctx));
    if (keep_counts)
        k->ctx.metrics = counts;
    k->ctx.client = r->client;
    k->ctx.instance = r->config->instance;
    k->ctx.subscriber = k->cfg.sub.name;
    k->ctx.endpoint = k->cfg.name;
    k->ctx.stop = &k->stop;
    atomic_store(&k->stop, false);
    atomic_store(&k->ended, false);
    atomic_store(&k->ctx.metrics.up, true);
    pthread_mutex_init(&k->ctx.mu, NULL);
    k->running = pthread_create(&k->thread, NULL, sink_main, k) == 0;
    if (!k->running) {
        pthread_mutex_destroy(&k->ctx.mu);
        fprintf(stderr, "tally-relay: endpoint %s: no thread for its sink\n", k->cfg.name);
    }
    return k->running;
}

/* Stop k's sink (its run returns within a fetch's long-poll) and join it. */
static void sink_stop(runtime_sink *k)
{
    if (!k->running)
        return;
    atomic_store(&k->stop, true);
    pthread_mutex_lock(&k->ctx.mu);
    if (k->ctx.running)
        tally_subscriber_stop(k->ctx.running);
    pthread_mutex_unlock(&k->ctx.mu);
    pthread_join(k->thread, NULL);
    pthread_mutex_destroy(&k->ctx.mu);
    k->running = false;
}

/* Whether a change of d from was asks for the sink to start again. */
static bool definition_changed(const tally_endpoint_definition *was,
                               const tally_endpoint_definition *d)
{
    return strcmp(was->url, d->url) != 0 || strcmp(was->types, d->types) != 0 ||
           strcmp(was->retry_schedule, d->retry_schedule) != 0 ||
           was->connect_timeout_ms != d->connect_timeout_ms || was->timeout_ms != d->timeout_ms;
}

static bool in_file(const relay_runtime *r, const char *name)
{
    for (size_t i = 0; i < r->config->endpoint_count; i++)
        if (strcmp(r->config->endpoints[i].name, name) == 0)
            return true;
    return false;
}

/* Say once that the file's endpoint name wins over tallyd's. */
static void clash_say(relay_runtime *r, const char *name)
{
    size_t free_at = RELAY_RUNTIME_ENDPOINTS_MAX;
    for (size_t i = 0; i < RELAY_RUNTIME_ENDPOINTS_MAX; i++) {
        if (strcmp(r->clash_said[i], name) == 0)
            return;
        if (r->clash_said[i][0] == '\0' && free_at == RELAY_RUNTIME_ENDPOINTS_MAX)
            free_at = i;
    }
    fprintf(stderr, "tally-relay: endpoint %s is in the config file and defined in tallyd: the "
                    "file's runs, tallyd's is not run (said once)\n", name);
    if (free_at < RELAY_RUNTIME_ENDPOINTS_MAX)
        snprintf(r->clash_said[free_at], sizeof(r->clash_said[free_at]), "%s", name);
}

static runtime_sink *sink_named(relay_runtime *r, const char *name)
{
    for (size_t i = 0; i < RELAY_RUNTIME_ENDPOINTS_MAX; i++)
        if (r->sinks[i].used && strcmp(r->sinks[i].def.endpoint, name) == 0)
            return &r->sinks[i];
    return NULL;
}

/* Claim k's subscriber for this relay's instance, as the file's are at
 * start (docs/RELAY.md, "Several relays"): false, said, when another relay
 * of this host runs it with the same instance. */
static bool claim(relay_runtime *r, const runtime_sink *k)
{
    for (size_t i = 0; i < r->claim_count; i++)
        if (strcmp(r->claimed[i], k->cfg.sub.name) == 0)
            return true;
    char error[1024];
    if (!relay_instance_claim_one(r->config, k->cfg.sub.name, error, sizeof(error))) {
        fprintf(stderr, "tally-relay: endpoint %s (defined in tallyd): not run: %s\n",
                k->cfg.name, error);
        return false;
    }
    if (r->claim_count < RELAY_RUNTIME_CLAIMS_MAX)
        snprintf(r->claimed[r->claim_count++], sizeof(r->claimed[0]), "%s", k->cfg.sub.name);
    return true;
}

/* (Re)start k by d: its configuration, then its thread; what says why
 * ("defined in tallyd", ...). A slot in use keeps its counters. */
static void sink_run(relay_runtime *r, runtime_sink *k, const tally_endpoint_definition *d,
                     const char *what)
{
    bool again = k->used;
    char why[300];
    if (!again || definition_changed(&k->def, d))
        k->restarts = 0;
    k->used = true;
    k->restart_at_ms = 0;
    k->def = *d;
    k->refused = !relay_endpoint_from_definition(&k->cfg, d, why, sizeof(why));
    if (k->refused) {
        fprintf(stderr, "tally-relay: endpoint %s (defined in tallyd): not run: %s\n",
                d->endpoint, why);
        return;
    }
    k->refused = !claim(r, k);
    if (k->refused)
        return;
    fprintf(stderr, "tally-relay: endpoint %s %s: delivering to %s\n", d->endpoint, what,
            d->url);
    sink_start(r, k, again);
}

/* k's run ended on its own (a failure, said by it): its thread joined
 * and, once its pause is over, started again; the pause doubles with each
 * restart that ends again. */
static void sink_restart(relay_runtime *r, runtime_sink *k)
{
    int64_t now = clock_mono_ms();
    if (k->restart_at_ms == 0) {
        unsigned shift = k->restarts < 5 ? k->restarts : 5;
        int64_t pause = INT64_C(1000) << shift;
        k->restart_at_ms = now + (pause < RESTART_PAUSE_MAX_MS ? pause : RESTART_PAUSE_MAX_MS);
        fprintf(stderr, "tally-relay: endpoint %s (defined in tallyd): its sink ended (exit %d); "
                        "started again in %lld ms\n", k->def.endpoint, k->result,
                (long long)(k->restart_at_ms - now));
    }
    if (now < k->restart_at_ms || atomic_load(r->relay_stop))
        return;
    sink_stop(k);
    k->restarts++;
    k->restart_at_ms = 0;
    tally_endpoint_definition d = k->def;
    sink_run(r, k, &d, "(defined in tallyd) started again");
}

/* The running sinks' lag and dead letters from tallyd, for /metrics. */
static void figures_read(relay_runtime *r)
{
    for (size_t i = 0; i < RELAY_RUNTIME_ENDPOINTS_MAX; i++) {
        runtime_sink *k = &r->sinks[i];
        tally_subscriber_info info;
        if (!k->running || tally_subscriber_get(r->client, k->cfg.sub.name, &info) != TALLY_ok)
            continue;
        atomic_store(&k->ctx.metrics.lag, info.pending);
        atomic_store(&k->ctx.metrics.dead_letters, info.dead_letters);
        atomic_store(&k->ctx.metrics.figures_known, true);
    }
}

void relay_runtime_sinks_lock(relay_runtime *r, relay_sink_context **out, size_t capacity,
                              size_t *count)
{
    if (r == NULL)
        return;
    pthread_mutex_lock(&r->mu);
    for (size_t i = 0; i < RELAY_RUNTIME_ENDPOINTS_MAX && *count < capacity; i++)
        if (r->sinks[i].running)
            out[(*count)++] = &r->sinks[i].ctx;
}

void relay_runtime_sinks_unlock(relay_runtime *r)
{
    if (r != NULL)
        pthread_mutex_unlock(&r->mu);
}

/* One endpoint listed by tallyd: run it, or run it again when changed. */
static void endpoint_take(relay_runtime *r, const tally_endpoint_definition *d)
{
    if (in_file(r, d->endpoint)) {
        clash_say(r, d->endpoint);
        return;
    }
    runtime_sink *k = sink_named(r, d->endpoint);
    if (k && k->running && atomic_load(&k->ended) && !definition_changed(&k->def, d)) {
        sink_restart(r, k);
        return;
    }
    if (k && !definition_changed(&k->def, d))
        return;
    if (k) {
        sink_stop(k);
        sink_run(r, k, d, "changed in tallyd");
        return;
    }
    for (size_t i = 0; i < RELAY_RUNTIME_ENDPOINTS_MAX && k == NULL; i++)
        if (!r->sinks[i].used)
            k = &r->sinks[i];
    if (k)
        sink_run(r, k, d, "defined in tallyd");
}

/* List tallyd's endpoints and bring the sinks to match. */
static void runtime_poll(relay_runtime *r)
{
    size_t count = 0;
    int rc = tally_endpoint_list(r->client, r->listed, RELAY_RUNTIME_ENDPOINTS_MAX, &count);
    if (rc != TALLY_ok) {
        if (!r->list_failed)
            fprintf(stderr, "tally-relay: the endpoints defined in tallyd: %s; the running ones "
                            "go on, asked again every second (said once)\n",
                    tally_strerror(rc));
        r->list_failed = true;
        return;
    }
    r->list_failed = false;
    pthread_mutex_lock(&r->mu);
    for (size_t i = 0; i < count; i++)
        endpoint_take(r, &r->listed[i]);
    for (size_t i = 0; i < RELAY_RUNTIME_ENDPOINTS_MAX; i++) {
        runtime_sink *k = &r->sinks[i];
        bool listed = false;
        for (size_t j = 0; j < count && k->used && !listed; j++)
            listed = strcmp(r->listed[j].endpoint, k->def.endpoint) == 0 &&
                     !in_file(r, k->def.endpoint);
        if (!k->used || listed)
            continue;
        sink_stop(k);
        k->used = false;
        fprintf(stderr, "tally-relay: endpoint %s deleted in tallyd: nothing more is delivered "
                        "to it\n", k->def.endpoint);
    }
    pthread_mutex_unlock(&r->mu);
    figures_read(r);
}

static void *runtime_main(void *arg)
{
    relay_runtime *r = arg;
    while (!atomic_load(r->relay_stop)) {
        runtime_poll(r);
        relay_pause(r->relay_stop, RELAY_ENDPOINTS_POLL_MS);
    }
    return NULL;
}

int relay_runtime_start(const relay_config *c, tally_client *client, atomic_bool *stop,
                        relay_runtime **out)
{
    relay_runtime *r = calloc(1, sizeof(*r));
    if (r == NULL) {
        fprintf(stderr, "tally-relay: out of memory for the endpoints defined in tallyd\n");
        return 1;
    }
    pthread_mutex_init(&r->mu, NULL);
    r->config = c;
    r->client = client;
    r->relay_stop = stop;
    runtime_poll(r); /* the ones defined now run from the start */
    if (pthread_create(&r->thread, NULL, runtime_main, r) != 0) {
        fprintf(stderr, "tally-relay: no thread to watch the endpoints defined in tallyd\n");
        relay_runtime_stop(r);
        return 1;
    }
    *out = r;
    return 0;
}

void relay_runtime_stop(relay_runtime *r)
{
    if (r == NULL)
        return;
    if (r->thread)
        pthread_join(r->thread, NULL); /* *relay_stop is set */
    pthread_mutex_lock(&r->mu);
    for (size_t i = 0; i < RELAY_RUNTIME_ENDPOINTS_MAX; i++)
        sink_stop(&r->sinks[i]);
    pthread_mutex_unlock(&r->mu);
    pthread_mutex_destroy(&r->mu);
    free(r);
}
