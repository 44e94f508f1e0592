/*
 * tally_relay.c — tally-relay: tally's events out to NATS JetStream and to
 * HTTP endpoints (docs/RELAY.md). Reads the command line and the config
 * file, then runs each sink on a thread of its own, each a durable
 * subscriber of tallyd through libtally, until SIGINT or SIGTERM; the main
 * thread waits for the signal and stops every sink's run (within a fetch's
 * long-poll, 1 s). --check validates the configuration and exits.
 *
 * Exit codes: 0 ok, 1 failure (a sink stopped on an error), 2 usage or
 * configuration error.
 */
#include "config.h"

#include "relay/relay.h"
#include "common/options.h"
#include "common/ready_file.h"

#include <curl/curl.h>
#include <inttypes.h>
#include <nats/nats.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

enum exit_code { EXIT_OK = 0, EXIT_FAILED = 1, EXIT_USAGE = 2 };

typedef struct flags {
    const char *config, *url, *subscriber, *instance, *nats, *stream, *subject, *http, *token_file;
    const char *tls_ca, *tls_cert, *tls_key, *ready_file, *lock_dir;
    bool check;
} flags;

#define TEXT(field) OPTIONS_TEXT(flags, field)

/* The command line (common/options.h); --help is made from it. The config
 * file is relay/config.c's own format, read with --config: these rows are
 * command-line options only. */
static const options_row rows[] = {
    {"config", "FILE", NULL,
     "key = value lines with [nats] and [endpoint NAME] sections (docs/RELAY.md); the options "
     "below override it; mode 600 when it holds an endpoint secret",
     TEXT(config)},
    {"url", "URL", NULL,
     "tallyd's request endpoint (default $TALLY_URL, else " RELAY_URL_DEFAULT ")", TEXT(url)},
    {"tls-ca", "FILE", NULL,
     "for a tls+tcp:// URL: the CA of tallyd's certificate (config tls_ca; default "
     "$TALLY_TLS_CA)",
     TEXT(tls_ca)},
    {"tls-cert", "FILE", NULL,
     "the relay's client certificate (config tls_cert; default $TALLY_TLS_CERT)",
     TEXT(tls_cert)},
    {"tls-key", "FILE", NULL, "its key (config tls_key; default $TALLY_TLS_KEY)",
     TEXT(tls_key)},
    {"subscriber", "NAME", NULL,
     "the JetStream sink's durable subscriber (default " RELAY_SUBSCRIBER_DEFAULT "); an "
     "endpoint's is relay:<endpoint>",
     TEXT(subscriber)},
    {"instance", "ID", NULL,
     "this relay's consumer instance on every subscriber (default " RELAY_INSTANCE_PREFIX
     ".<host name>): keep it across restarts, so a restarted relay gets its unacked events "
     "back at once and in order; several relays on one config each need their own: a second "
     "relay of this host with the same instance on a subscriber is refused (exit 2)",
     TEXT(instance)},
    {"token-file", "FILE", NULL,
     "the token for tallyd --auth, in a private file (mode 600; config key token_file; default "
     "$TALLY_TOKEN_FILE, else $TALLY_TOKEN)",
     TEXT(token_file)},
    {"nats", "URL", NULL, "relay to JetStream at this NATS server (nats://HOST:PORT)",
     TEXT(nats)},
    {"stream", "NAME", NULL,
     "... into this stream, created when missing (subjects " RELAY_STREAM_SUBJECTS_DEFAULT
     ", file storage, 1 replica, duplicate window " OPTIONS_TEXT_OF(
         RELAY_DUPLICATE_WINDOW_S_DEFAULT) " s, unless the config says otherwise) and checked "
     "when present",
     TEXT(stream)},
    {"subject", "TEMPLATE", NULL,
     "the subject of each event; {type} and {entity_kind} are replaced (default "
     RELAY_SUBJECT_DEFAULT ")",
     TEXT(subject)},
    {"http", "URL", NULL,
     "serve GET /metrics (Prometheus: delivered, failures, in flight, lag, dead letters per "
     "sink) and GET /healthz at http://HOST:PORT (PORT 0: one the kernel chooses, see "
     "--ready-file); \"none\" (the default) serves nothing",
     TEXT(http)},
    {"ready-file", "FILE", NULL,
     "once the HTTP face listens and the sinks run, write FILE with the line `http URL` (the "
     "URL as bound, a PORT 0 filled in; no line without --http), whole (a temporary file, then "
     "a rename); removed at a clean stop",
     TEXT(ready_file)},
    {"lock-dir", "DIR", NULL,
     "where the instance claims' lock files live (default " RELAY_LOCK_DIR "; relays that must "
     "see each other's claims share it)",
     TEXT(lock_dir)},
    {"check", NULL, NULL,
     "check the configuration, print what would run, exit (0 valid, 2 not); nothing is "
     "contacted",
     OPTIONS_FLAG(flags, check)},
    OPTIONS_ROW_HELP,
};

static void usage(const options_set *set, FILE *f)
{
    fprintf(f,
"usage: tally-relay [--config FILE] [--url TALLY_URL] [--subscriber NAME] [--instance ID]\n"
"                   [--token-file FILE]\n"
"                   [--nats NATS_URL --stream NAME [--subject TEMPLATE]]\n"
"                   [--tls-ca FILE] [--tls-cert FILE --tls-key FILE]\n"
"                   [--http URL] [--ready-file FILE] [--lock-dir DIR] [--check] [--help]\n"
"\n"
"Relays tally's events to NATS JetStream and to HTTP endpoints (outbound\n"
"webhooks), each sink a durable subscriber of tallyd (docs/SUBSCRIBERS.md), so\n"
"a relay that stops or crashes resumes where it was. Delivery to each sink is\n"
"at least once, and exactly once in effect for a receiver that drops repeats by\n"
"event id (docs/RELAY.md).\n"
"\n");
    options_print_help(set, f);
    fprintf(f,
"\n"
"JetStream: each event is published with the headers Nats-Msg-Id (the event\n"
"id), Tally-Seq, Tally-Entity and Tally-Entity-Version and the event as JSON,\n"
"at most max_pending unconfirmed at a time, and acknowledged to tally after\n"
"JetStream's PubAck; two events of one entity are never reordered. An event\n"
"that may be in the stream already (handed back by tally, or a publish\n"
"without an answer) is looked for first, and not published again if found.\n"
"HTTP endpoints, of the config file and those defined in tally (tally endpoint\n"
"create; listed every second, started, changed and stopped without a restart):\n"
"each event of the types an endpoint wants is POSTed with the\n"
"Standard Webhooks headers webhook-id, webhook-timestamp and webhook-signature\n"
"(v1,<base64 HMAC-SHA256 of id.timestamp.body>); a 2xx answer acknowledges,\n"
"anything else retries on the endpoint's retry_schedule (by default 12\n"
"attempts over 2.8 days), then the event waits in the endpoint's dead-letter\n"
"queue: tally dlq list relay:<endpoint>. An endpoint failing for its\n"
"disable_after (5 days) is disabled in tally until tally endpoint enable;\n"
"every attempt goes to tally's attempt log (tally endpoint attempts NAME);\n"
"tally endpoint rotate-secret and tally endpoint recover reach the relay\n"
"through tally. Each event parked, and tally going away and coming back, is\n"
"said on stderr; /healthz fails while tally does not answer.\n"
"\n"
"Runs until SIGINT or SIGTERM. Exit codes: 0 ok, 1 a sink failed, 2 usage or\n"
"configuration error.\n");
}

static int usage_error(const char *what, const char *arg)
{
    fprintf(stderr, "tally-relay: %s%s\nTry 'tally-relay --help'.\n", what, arg);
    return EXIT_USAGE;
}

/* Returns -1 to go on, else the exit code. */
static int flags_parse(int argc, char **argv, flags *f)
{
    options_set set = {0};
    int code = options_load_command_line(&set, "tally-relay", rows, sizeof(rows) / sizeof(rows[0]),
                                         argc, argv, f, usage);
    options_free(&set);
    return code;
}

/* The flags over the file: the same keys, the flag wins. */
static bool flags_apply(const flags *f, relay_config *c)
{
    const struct {
        const char *value;
        char *out;
        size_t size;
    } texts[] = {
        {f->url, c->url, sizeof(c->url)},
        {f->subscriber, c->nats.sub.name, sizeof(c->nats.sub.name)},
        {f->instance, c->instance, sizeof(c->instance)},
        {f->nats, c->nats.url, sizeof(c->nats.url)},
        {f->stream, c->nats.stream, sizeof(c->nats.stream)},
        {f->subject, c->nats.subject, sizeof(c->nats.subject)},
        {f->token_file, c->token_file, sizeof(c->token_file)},
        {f->tls_ca, c->tls_ca, sizeof(c->tls_ca)},
        {f->tls_cert, c->tls_cert, sizeof(c->tls_cert)},
        {f->tls_key, c->tls_key, sizeof(c->tls_key)},
        {f->ready_file, c->ready_file, sizeof(c->ready_file)},
        {f->lock_dir, c->lock_dir, sizeof(c->lock_dir)},
    };
    for (size_t i = 0; i < sizeof(texts) / sizeof(texts[0]); i++) {
        if (texts[i].value == NULL)
            continue;
        if (strlen(texts[i].value) >= texts[i].size)
            return false;
        snprintf(texts[i].out, texts[i].size, "%s", texts[i].value);
    }
    if (f->nats || f->stream)
        c->nats.enabled = true;
    return true;
}

/* --http over the file's http =: false when it is not a URL we take. */
static bool flag_http_apply(const flags *f, relay_config *c)
{
    return f->http == NULL || relay_http_url_take(f->http, c->http, sizeof(c->http));
}

/* ---- what the sinks share ---- */

void relay_pause(const atomic_bool *stop, uint32_t ms)
{
    for (uint32_t slept = 0; slept < ms && !atomic_load(stop); slept += 50) {
        struct timespec t = {0, 50 * 1000000L};
        nanosleep(&t, NULL);
    }
}

bool relay_sink_begin(relay_sink_context *ctx, tally_subscriber *s)
{
    pthread_mutex_lock(&ctx->mu);
    bool go = !atomic_load(ctx->stop);
    if (go)
        ctx->running = s;
    pthread_mutex_unlock(&ctx->mu);
    return go;
}

void relay_sink_end(relay_sink_context *ctx)
{
    pthread_mutex_lock(&ctx->mu);
    ctx->running = NULL;
    pthread_mutex_unlock(&ctx->mu);
}

void relay_say_parked(const relay_sink_context *ctx, const tally_delivery *d, bool parked_now,
                      const char *error)
{
    bool last = parked_now || (ctx->max_deliver > 0 && d->attempt >= ctx->max_deliver);
    if (!last)
        return;
    char id[37];
    tally_uuid_format(&d->event.id, id);
    fprintf(stderr,
            "tally-relay: %s%s: seq %" PRIu64 " (%s, event %s) parked after attempt %" PRIu32
            "%s: %s; tally dlq list %s\n",
            ctx->endpoint ? "endpoint " : "nats", ctx->endpoint ? ctx->endpoint : "",
            d->event.seq, d->event.type, id, d->attempt,
            parked_now ? "" : " (its last: max_deliver)", error[0] ? error : "failed",
            ctx->subscriber);
}

/* ---- the threads ---- */

typedef struct sink_thread {
    pthread_t thread;
    bool started;
    relay_sink_context ctx;
    const relay_nats *nats;         /* this sink: JetStream, */
    const relay_endpoint *endpoint; /* or an endpoint */
    int result;
} sink_thread;

static void *sink_main(void *arg)
{
    sink_thread *t = arg;
    t->result = t->nats ? relay_jetstream_run(t->nats, &t->ctx)
                        : relay_webhook_run(t->endpoint, &t->ctx);
    atomic_store(&t->ctx.metrics.up, false);
    return NULL;
}

static void stop_all(sink_thread *threads, size_t count)
{
    for (size_t i = 0; i < count; i++) {
        pthread_mutex_lock(&threads[i].ctx.mu);
        if (threads[i].ctx.running)
            tally_subscriber_stop(threads[i].ctx.running);
        pthread_mutex_unlock(&threads[i].ctx.mu);
    }
}

/* Say where the HTTP face listens (its port as bound) on stderr and in
 * --ready-file: false when the file cannot be written (said). */
static bool relay_announce(const relay_config *c, relay_http *http)
{
    char bound[RELAY_URL_BYTES_MAX + 1] = "", text[RELAY_URL_BYTES_MAX + 8] = "";
    if (http && net_url_with_port(c->http, relay_http_port(http), bound, sizeof(bound))) {
        snprintf(text, sizeof(text), "http %s\n", bound);
        fprintf(stderr, "tally-relay: endpoints: http %s\n", bound);
    }
    char why[RELAY_URL_BYTES_MAX + 200];
    if (c->ready_file[0] && net_ready_file_write(c->ready_file, text, why, sizeof(why)) != TALLY_ok) {
        fprintf(stderr, "tally-relay: cannot write the ready file: %s\n", why);
        return false;
    }
    return true;
}

/* Start the HTTP face (--http) and a thread per sink, wait for
 * SIGINT/SIGTERM (or every sink ending), stop and join them. */
static int relay_run(const relay_config *c, tally_client *client, const sigset_t *signals)
{
    static sink_thread threads[1 + RELAY_ENDPOINTS_MAX];
    static relay_sink_context *contexts[1 + RELAY_ENDPOINTS_MAX];
    static atomic_bool stop;
    size_t count = 0;
    if (c->nats.enabled)
        threads[count++] = (sink_thread){.nats = &c->nats};
    for (size_t i = 0; i < c->endpoint_count; i++)
        threads[count++] = (sink_thread){.endpoint = &c->endpoints[i]};
    for (size_t i = 0; i < count; i++) {
        relay_sink_context *ctx = contexts[i] = &threads[i].ctx;
        ctx->client = client;
        ctx->instance = c->instance;
        ctx->subscriber = threads[i].nats ? c->nats.sub.name : threads[i].endpoint->sub.name;
        ctx->endpoint = threads[i].nats ? NULL : threads[i].endpoint->name;
        ctx->stop = &stop;
        atomic_store(&ctx->metrics.up, true);
        pthread_mutex_init(&ctx->mu, NULL);
    }
    relay_http *http = NULL;
    relay_watch *watch = NULL;
    relay_runtime *runtime = NULL;
    if (relay_watch_start(client, c->url, contexts, count, &watch) != 0 ||
        relay_runtime_start(c, client, &stop, &runtime) != 0 ||
        (c->http[0] && relay_http_start(c->http, contexts, count, watch, runtime, &http) != 0)) {
        atomic_store(&stop, true);
        relay_runtime_stop(runtime);
        relay_watch_stop(watch);
        for (size_t i = 0; i < count; i++)
            pthread_mutex_destroy(&threads[i].ctx.mu);
        return EXIT_FAILED;
    }
    for (size_t i = 0; i < count; i++) {
        threads[i].started = pthread_create(&threads[i].thread, NULL, sink_main, &threads[i]) == 0;
        if (!threads[i].started) {
            atomic_store(&threads[i].ctx.metrics.up, false);
            atomic_store(&stop, true);
        }
    }
    bool unannounced = !atomic_load(&stop) && !relay_announce(c, http);
    if (unannounced)
        atomic_store(&stop, true);
    /* A sink that fails on its own ends the relay too: poll for that. */
    struct timespec tick = {0, 200 * 1000000L};
    while (!atomic_load(&stop)) {
        if (sigtimedwait(signals, NULL, &tick) > 0)
            atomic_store(&stop, true);
        for (size_t i = 0; i < count; i++)
            if (threads[i].started && pthread_tryjoin_np(threads[i].thread, NULL) == 0) {
                threads[i].started = false;
                if (threads[i].result != 0)
                    atomic_store(&stop, true);
            }
    }
    if (c->ready_file[0]) /* what it named is going */
        unlink(c->ready_file);
    stop_all(threads, count);
    int result = unannounced ? EXIT_FAILED : EXIT_OK;
    for (size_t i = 0; i < count; i++) {
        if (threads[i].started)
            pthread_join(threads[i].thread, NULL);
        if (threads[i].result != 0)
            result = EXIT_FAILED;
    }
    relay_http_stop(http); /* before the contexts, the watch and the runtime it reads go */
    relay_runtime_stop(runtime);
    relay_watch_stop(watch);
    for (size_t i = 0; i < count; i++)
        pthread_mutex_destroy(&threads[i].ctx.mu);
    return result;
}

int main(int argc, char **argv)
{
    flags f = {0};
    int code = flags_parse(argc, argv, &f);
    if (code >= 0)
        return code;
    static relay_config config;
    char error[1024];
    relay_config_default(&config);
    const char *env_url = getenv("TALLY_URL"); /* the default; the file and --url win */
    if (env_url && *env_url && strlen(env_url) < sizeof(config.url))
        snprintf(config.url, sizeof(config.url), "%s", env_url);
    if (f.config && !relay_config_load(&config, f.config, error, sizeof(error)))
        return usage_error("", error);
    if (!flags_apply(&f, &config))
        return usage_error("a flag's value is too long", "");
    if (!flag_http_apply(&f, &config))
        return usage_error("--http: http://HOST:PORT or none, got ", f.http);
    if (!relay_instance_valid(config.instance))
        return usage_error("--instance: 1-64 bytes of A-Z a-z 0-9 . _ -: ", config.instance);
    if (!relay_config_check(&config, error, sizeof(error)))
        return usage_error("", error);
    tally_client_options co = {.url = config.url, .consumer = "tally-relay",
                               .token_file = config.token_file[0] ? config.token_file : NULL,
                               .tls_ca = config.tls_ca[0] ? config.tls_ca : NULL,
                               .tls_cert = config.tls_cert[0] ? config.tls_cert : NULL,
                               .tls_key = config.tls_key[0] ? config.tls_key : NULL};
    if (tally_tls_check(&co, NULL, error, sizeof(error)) != TALLY_ok)
        return usage_error("", error); /* the files are read, nothing is contacted */
    if (f.check) {
        relay_config_print(&config);
        printf("configuration ok\n");
        return EXIT_OK;
    }
    if (!relay_instance_claim(&config, error, sizeof(error)))
        return usage_error("", error);
    /* SIGINT and SIGTERM are taken by the main thread's sigtimedwait: block
     * them before any thread starts, so every thread inherits the mask. */
    sigset_t signals;
    sigemptyset(&signals);
    sigaddset(&signals, SIGINT);
    sigaddset(&signals, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &signals, NULL);
    signal(SIGPIPE, SIG_IGN);
    if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) {
        fprintf(stderr, "tally-relay: libcurl does not start\n");
        return EXIT_FAILED;
    }
    tally_client *client = NULL;
    int rc = tally_client_open(&co, &client);
    if (rc != TALLY_ok) {
        fprintf(stderr, "tally-relay: %s: %s\n", config.url, tally_strerror(rc));
        curl_global_cleanup();
        return EXIT_FAILED;
    }
    code = relay_run(&config, client, &signals);
    tally_client_close(client);
    curl_global_cleanup();
    nats_Close();
    return code;
}
