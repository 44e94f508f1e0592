/*
 * relay.h — what the parts of tally-relay share (docs/RELAY.md): the
 * configuration (config.c), an event as the JSON document and headers the
 * sinks send (event_doc.c), and the two sinks, NATS JetStream
 * (jetstream.c) and HTTP endpoints as outbound webhooks (webhook.c). Each
 * sink is a durable subscriber of tallyd of its own; tally_relay.c starts
 * one thread per sink and stops them on SIGINT/SIGTERM.
 */
#ifndef TALLY_RELAY_H
#define TALLY_RELAY_H

#include "clients/libtally/tally.h"
#include "common/duration.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ---- limits ---- */
#define RELAY_URL_BYTES_MAX 1024
#define RELAY_ENDPOINTS_MAX 32
#define RELAY_INSTANCE_PREFIX "tally-relay" /* the default instance: tally-relay.<host> */
#define RELAY_LOCK_DIR "/tmp" /* the instance claims of the relays of this host (--lock-dir) */
#define RELAY_ENDPOINT_PREFIX "relay:" /* an endpoint's subscriber: relay:<endpoint> */
#define RELAY_ENDPOINT_NAME_BYTES_MAX \
    (TALLY_CLIENT_SUBSCRIBER_NAME_BYTES_MAX - (sizeof(RELAY_ENDPOINT_PREFIX) - 1))
#define RELAY_TYPES_MAX 16          /* event-type patterns of one endpoint: tallyd's filter */
#define RELAY_TYPE_BYTES_MAX 31     /* as tally_event.type */
#define RELAY_SECRET_BYTES_MAX 64   /* an endpoint's HMAC key, decoded */
#define RELAY_SUBJECT_BYTES_MAX 255 /* a NATS subject or its template */
#define RELAY_STREAM_SUBJECTS_MAX 8
#define RELAY_STREAM_NAME_BYTES_MAX 64
#define RELAY_CONFIG_LINE_BYTES_MAX 2048
#define RELAY_CONFIG_LINES_MAX 10000
#define RELAY_DOC_BYTES_MAX 786432  /* one event's JSON document: a 256 KiB webhook body fits */
#define RELAY_ENTITY_TEXT_BYTES_MAX 600 /* Tally-Entity: kind:percent-encoded id */

/* ---- defaults ---- */
#define RELAY_URL_DEFAULT "tcp://127.0.0.1:7450"
#define RELAY_SUBSCRIBER_DEFAULT "relay"
#define RELAY_SUBJECT_DEFAULT "tally.events.{type}"
#define RELAY_STREAM_SUBJECTS_DEFAULT "tally.events.>"
#define RELAY_DUPLICATE_WINDOW_S_DEFAULT 120 /* JetStream's own default */
#define RELAY_MAX_PENDING_DEFAULT 256        /* outstanding PubAcks */
#define RELAY_MAX_PENDING_MAX 1000           /* at most a fetch */
#define RELAY_ACK_TIMEOUT_MS_DEFAULT 10000   /* a PubAck that takes longer is a failure */
#define RELAY_FETCH_DEFAULT 256
#define RELAY_RETRY_MS_MIN 100   /* the relay's pause after a failed batch doubles */
#define RELAY_RETRY_MS_MAX 30000 /* from min to max */
#define RELAY_CONNECT_TIMEOUT_MS_DEFAULT 5000
#define RELAY_TIMEOUT_MS_DEFAULT 10000
#define RELAY_HTTP_TIMEOUT_MS_MAX 600000
#define RELAY_MAX_DELIVER_DEFAULT 8            /* an endpoint's deliveries before its dlq */
#define RELAY_NATS_MAX_DELIVER_DEFAULT 100     /* JetStream refusals before the dlq */
#define RELAY_BACKOFF_MS_FIRST 1000u /* an endpoint's lease backoff: 1 s, 2 s ... 128 s */
/* An endpoint's retry schedule (docs/RELAY.md, "Retry schedule"): the
 * delay before each attempt, the first one's 0 (at once); about 2.8 days
 * in all, then the event is parked. At most RELAY_SCHEDULE_STEPS_MAX
 * attempts, each delay at most a day (a nak's delay_ms). */
#define RELAY_SCHEDULE_DEFAULT "0 5s 5m 30m 2h 5h 10h 10h 10h 10h 10h 10h"
#define RELAY_SCHEDULE_STEPS_MAX DURATION_SCHEDULE_STEPS_MAX
#define RELAY_SCHEDULE_DELAY_MS_MAX DURATION_SCHEDULE_DELAY_MS_MAX
/* An endpoint whose deliveries fail without a success for this long is
 * disabled (endpoint.disabled in tally's log) until enabled again. */
#define RELAY_DISABLE_AFTER_DEFAULT "5d"
#define RELAY_DISABLE_AFTER_MS_MAX (365ull * 86400000)
#define RELAY_DISABLED_POLL_MS 1000 /* a disabled endpoint asks tallyd this often */
/* The attempt log (docs/RELAY.md, "The attempt log"): attempts sent to
 * tallyd at most this many at once, kept there this long by default. */
#define RELAY_ATTEMPTS_BATCH 32
#define RELAY_RECOVER_PAGE_EVENTS 64 /* a recover reads the log this many at a time */
#define RELAY_ATTEMPT_RETENTION_DEFAULT "7d"
_Static_assert(RELAY_ATTEMPTS_BATCH <= TALLY_CLIENT_ATTEMPTS_RECORD_MAX, "a batch is one op");
#define RELAY_WAIT_MS 1000 /* a fetch's long-poll: how soon a stop is seen */
#define RELAY_RUNTIME_ENDPOINTS_MAX TALLY_CLIENT_ENDPOINTS_DEFINED_MAX /* defined in tallyd */
#define RELAY_ENDPOINTS_POLL_MS 1000 /* tallyd's endpoints listed this often */
#define RELAY_RUNTIME_CLAIMS_MAX 256 /* names of tallyd's endpoints a relay claims in its life */
#define RELAY_FIGURES_MS 2000 /* /metrics: each sink's lag and dead letters read this often */
/* Reading the stream back (stream_scan.c): how far at most, and how far
 * tallyd's and the NATS server's clocks may be apart. */
#define RELAY_SCAN_SEQS_MAX 4000000
#define RELAY_SCAN_SKEW_MS 60000

_Static_assert(RELAY_MAX_PENDING_MAX <= TALLY_CLIENT_SUB_FETCH_MAX, "a window fits a fetch");

/* A durable subscriber's settings in the config file (max_deliver,
 * ack_wait_ms, backoff_ms, max_ack_pending); zero: the server's default.
 * filter_types: tallyd's filter of the events it hands out (an endpoint's
 * types, comma-separated; "": every type). */
typedef struct relay_subscription {
    char name[TALLY_CLIENT_SUBSCRIBER_NAME_BYTES_MAX + 1];
    tally_subscriber_options options;
    uint32_t fetch_max; /* events per fetch */
    char filter_types[RELAY_TYPES_MAX * (RELAY_TYPE_BYTES_MAX + 1)];
} relay_subscription;
_Static_assert(sizeof(((relay_subscription *)0)->filter_types) <=
                   TALLY_CLIENT_SUB_FILTER_TYPES_BYTES_MAX,
               "an endpoint's types fit tallyd's filter");

typedef struct relay_nats {
    bool enabled;
    char url[RELAY_URL_BYTES_MAX + 1];
    char stream[RELAY_STREAM_NAME_BYTES_MAX + 1];
    char subject[RELAY_SUBJECT_BYTES_MAX + 1]; /* template: {type}, {entity_kind} */
    char stream_subjects[RELAY_STREAM_SUBJECTS_MAX][RELAY_SUBJECT_BYTES_MAX + 1];
    size_t stream_subject_count;
    bool memory_storage; /* storage = memory; file otherwise */
    uint32_t replicas;
    uint32_t duplicate_window_s;
    uint32_t max_pending;    /* outstanding PubAcks at most */
    uint32_t ack_timeout_ms; /* no PubAck after this: the publish failed */
    relay_subscription sub;
} relay_nats;

typedef struct relay_endpoint {
    char name[RELAY_ENDPOINT_NAME_BYTES_MAX + 1];
    char url[RELAY_URL_BYTES_MAX + 1];
    uint8_t secret[RELAY_SECRET_BYTES_MAX];
    size_t secret_len;
    char types[RELAY_TYPES_MAX][RELAY_TYPE_BYTES_MAX + 1]; /* none: every type */
    size_t type_count;
    uint32_t connect_timeout_ms, timeout_ms;
    /* retry_schedule: the delay before attempt i + 1 (schedule_ms[0] is
     * the first attempt's, 0); none when backoff_ms is given (the
     * subscriber's backoff then decides) */
    uint32_t schedule_ms[RELAY_SCHEDULE_STEPS_MAX];
    size_t schedule_count;
    bool max_deliver_set, backoff_set, schedule_set; /* given in the file */
    uint64_t disable_after_ms;         /* 0: never disabled */
    uint64_t attempt_retention_ms;     /* the attempt log's, in tallyd */
    relay_subscription sub; /* name: relay:<endpoint> */
} relay_endpoint;

typedef struct relay_config {
    char url[RELAY_URL_BYTES_MAX + 1]; /* tallyd */
    /* tls_ca, tls_cert, tls_key: for a tls+tcp:// url, the PEM files of
     * tally_client_options ("": $TALLY_TLS_CA, ... as libtally reads them) */
    char tls_ca[RELAY_URL_BYTES_MAX + 1], tls_cert[RELAY_URL_BYTES_MAX + 1],
        tls_key[RELAY_URL_BYTES_MAX + 1];
    /* this relay's consumer instance id on every sink's subscriber
     * (tally_run_options.instance): stable across restarts, so a restarted
     * relay gets its unacked window back at once, in seq order; each relay
     * sharing a config needs its own (docs/RELAY.md, "Several relays") */
    char instance[TALLY_CLIENT_SUB_INSTANCE_BYTES_MAX + 1];
    char http[RELAY_URL_BYTES_MAX + 1]; /* /metrics at http://HOST:PORT; "": none */
    /* token_file = / --token-file: the token for tallyd --auth (a private
     * file, docs/SECURITY.md); "": libtally's $TALLY_TOKEN_FILE / $TALLY_TOKEN */
    char token_file[RELAY_URL_BYTES_MAX + 1];
    /* flags only, no file keys: --lock-dir (the instance claims' lock
     * files, RELAY_LOCK_DIR by default; relays that must see each other's
     * claims share it) and --ready-file ("": none) */
    char lock_dir[RELAY_URL_BYTES_MAX + 1];
    char ready_file[RELAY_URL_BYTES_MAX + 1];
    relay_nats nats;
    relay_endpoint endpoints[RELAY_ENDPOINTS_MAX];
    size_t endpoint_count;
} relay_config;

/* ---- config.c ---- */

/* Defaults: tallyd's default URL, the default instance, no sink. */
void relay_config_default(relay_config *c);
/* Read the config file path into c (docs/RELAY.md, "Configuration").
 * false with a message "FILE:LINE: what" in error. */
bool relay_config_load(relay_config *c, const char *path, char *error, size_t error_size);
/* The checks after the file and the flags: at least one sink, a stream
 * for NATS, every endpoint complete. false with a message in error. */
bool relay_config_check(relay_config *c, char *error, size_t error_size);
/* An instance id tallyd takes: 1-64 bytes of A-Z a-z 0-9 . _ - */
bool relay_instance_valid(const char *v);
/* http = / --http: "none" (out gets "") or http://HOST:PORT. */
bool relay_http_url_take(const char *v, char *out, size_t size);
/* Print what the relay would do (--check). */
void relay_config_print(const relay_config *c);
/* An endpoint defined in tallyd (endpoint_list) as the relay runs it: the
 * defaults of an [endpoint NAME] with what d gives, read by the config
 * file's own readers. No secret: the relay signs with tallyd's
 * (endpoint_secret_get). false, with why, when d holds what the relay
 * cannot take. */
bool relay_endpoint_from_definition(relay_endpoint *e, const tally_endpoint_definition *d,
                                    char *why, size_t n);
/* The delay before the attempt after attempt (1 on the first delivery)
 * failed, from the endpoint's retry schedule (its last delay repeats);
 * false when the endpoint has no schedule. */
bool relay_endpoint_retry_delay(const relay_endpoint *e, uint32_t attempt, uint32_t *delay_ms);
/* true when type matches one of the endpoint's patterns ("x.y" exact,
 * "x.*" every type starting "x.", "*" all); an endpoint without patterns
 * takes every type. */
bool relay_endpoint_wants(const relay_endpoint *e, const char *type);

/* ---- event_doc.c ---- */

/* The event's JSON document (docs/RELAY.md, "The event document"): a
 * malloc'd NUL-terminated text in *out, its length in *len. TALLY_ok,
 * TALLY_corrupt_record (the raw bytes do not decode) or
 * TALLY_out_of_memory. */
int relay_event_doc(const tally_event *e, char **out, size_t *len);
/* "account:7", "transfer:<32 hex>", "entitlement:<subject>/<feature>"
 * with bytes outside 0x21..0x7e and '%' '/' percent-encoded. */
void relay_entity_text(const tally_event *e, char out[RELAY_ENTITY_TEXT_BYTES_MAX]);
/* The subject template with {type} and {entity_kind} replaced. false when
 * it does not fit. */
bool relay_subject(const char *template_text, const tally_event *e, char *out, size_t size);
/* The filter of every subject the template can make: the template up to
 * its first token with a {placeholder}, then ">" (the template itself
 * without one). false when it does not fit size. */
bool relay_subject_filter(const char *template_text, char *out, size_t size);
/* Whether every subject matching filter also matches subject (both NATS
 * subjects with * and > wildcards). */
bool relay_subject_within(const char *filter, const char *subject);

/* ---- instance.c: which relay is which (docs/RELAY.md, "Several relays") ---- */

/* "tally-relay.<host name>" (bytes outside A-Z a-z 0-9 . _ - as '-', cut
 * at 64 bytes), or "tally-relay" without a host name: stable across
 * restarts, distinct across hosts. */
void relay_instance_default(char out[TALLY_CLIENT_SUB_INSTANCE_BYTES_MAX + 1]);
/* Claim (url, subscriber, instance) of every sink of c for this process
 * with a lock file in c->lock_dir, held until it exits: false, with
 * what in error, when another relay of this host holds one. A lock file
 * that cannot be opened is said on stderr and not checked. */
bool relay_instance_claim(const relay_config *c, char *error, size_t error_size);
/* The same for one more subscriber (an endpoint defined in tallyd). */
bool relay_instance_claim_one(const relay_config *c, const char *subscriber, char *error,
                              size_t error_size);
/* FNV-1a of a text (the lock files' names, the JetStream sink's entities). */
uint64_t relay_text_hash(const char *s);

/* ---- metrics.c: what a sink counts, for /metrics ---- */

/* Why a delivery failed: the reason label of tally_relay_failures_total.
 * Every NATS status has one of the NATS reasons (jetstream.c); "other"
 * is the HTTP sink's rest (libcurl's other errors). */
typedef enum relay_failure {
    RELAY_FAILURE_STATUS,     /* HTTP: an answer other than 2xx */
    RELAY_FAILURE_TIMEOUT,    /* no PubAck or no HTTP answer in time */
    RELAY_FAILURE_CONNECTION, /* not connected, the connection lost or refused, reconnecting,
                                 no responders */
    RELAY_FAILURE_REFUSED,    /* JetStream: an API error (the stream said no) */
    RELAY_FAILURE_PERMISSION, /* NATS: not permitted, authentication failed */
    RELAY_FAILURE_TOO_LARGE,  /* NATS: over the server's max_payload */
    RELAY_FAILURE_TLS,        /* the TLS handshake or the peer's certificate */
    RELAY_FAILURE_PROTOCOL,   /* NATS: a protocol error, a server without the feature */
    RELAY_FAILURE_CLIENT,     /* NATS: the client library's own (memory, state, argument) */
    RELAY_FAILURE_DOCUMENT,   /* the event's document or subject cannot be made */
    RELAY_FAILURE_OTHER,      /* HTTP: libcurl's other errors */
    RELAY_FAILURE_COUNT
} relay_failure;

/* Written by the sink's thread (and the PubAck callbacks) and the figures
 * thread, read by scrapes: relaxed atomics, no lock. */
typedef struct relay_sink_metrics {
    atomic_bool up;                    /* the sink's thread runs */
    atomic_uint_fast64_t delivered;    /* PubAcks, 2xx answers */
    atomic_uint_fast64_t filtered;     /* HTTP: events of types the endpoint does not want */
    atomic_uint_fast64_t already_stored; /* JetStream: found in the stream, not published again */
    atomic_uint_fast64_t failures[RELAY_FAILURE_COUNT];
    atomic_uint_fast64_t in_flight;    /* PubAcks outstanding, HTTP requests under way */
    atomic_bool figures_known;         /* the two below were read from tallyd */
    atomic_uint_fast64_t lag;          /* the subscriber's pending: head - ack floor */
    atomic_uint_fast64_t dead_letters; /* the subscriber's dead-letter queue */
    atomic_bool disabled;              /* HTTP: the endpoint is disabled in tallyd */
} relay_sink_metrics;

static inline void relay_count(atomic_uint_fast64_t *c, uint64_t n)
{
    atomic_fetch_add_explicit(c, n, memory_order_relaxed);
}

/* ---- the sinks: each runs until *stop is set, then returns 0, or returns
 * 1 on a fatal error (said on stderr). ---- */

typedef struct relay_sink_context {
    tally_client *client;
    const char *instance;       /* relay_config.instance */
    const char *subscriber;     /* the sink's subscriber */
    const char *endpoint;       /* the endpoint's name; NULL: the JetStream sink */
    atomic_bool *stop;
    pthread_mutex_t mu;         /* guards running */
    tally_subscriber *running;  /* the handle in a run now, for a stop to reach */
    uint32_t max_deliver;       /* the subscriber's, read at its open: its last attempt */
    relay_sink_metrics metrics;
} relay_sink_context;

/* ---- watch.c: the relay's view of tallyd ---- */

/* A thread that reads each of the count sinks' lag and dead letters from
 * tallyd (at url, through client) every RELAY_FIGURES_MS, and says on
 * stderr when tallyd stops and starts answering; its first round is done
 * before this returns. 0, or 1 without a thread (said on stderr). */
typedef struct relay_watch relay_watch;
int relay_watch_start(tally_client *client, const char *url, relay_sink_context *const *sinks,
                      size_t count, relay_watch **out);
/* Whether tallyd answered the last round; since when (Unix seconds) that
 * holds; why it did not (a static text, "" while up). */
bool relay_watch_tallyd_up(relay_watch *w, int64_t *since_s, const char **why);
void relay_watch_stop(relay_watch *w);

/* /metrics and /healthz at url for the count sinks (at most 1 +
 * RELAY_ENDPOINTS_MAX) and the watch, and /metrics for the sinks of
 * runtime (NULL: none) too (they outlive it). 0, or 1 when it cannot
 * listen (said on stderr). */
typedef struct relay_http relay_http;
typedef struct relay_runtime relay_runtime;
int relay_http_start(const char *url, relay_sink_context *const *sinks, size_t count,
                     relay_watch *watch, relay_runtime *runtime, relay_http **out);
/* The port its listener is bound to (the kernel's choice for port 0). */
unsigned relay_http_port(relay_http *h);
void relay_http_stop(relay_http *h);

/* The JetStream sink: connect, create or check the stream, relay. */
int relay_jetstream_run(const relay_nats *cfg, relay_sink_context *ctx);
/* One HTTP endpoint. */
int relay_webhook_run(const relay_endpoint *cfg, relay_sink_context *ctx);
/* "v1,<base64 HMAC-SHA256 of id.timestamp.body>" (Standard Webhooks).
 * false when out is too small. */
bool relay_webhook_signature(const uint8_t *secret, size_t secret_len, const char *id,
                             int64_t timestamp_s, const char *body, size_t body_len, char *out,
                             size_t size);

/* ---- subscription.c ---- */

/* Open (create or find) the subscriber sub on ctx's client, trying again
 * while tallyd is unreachable, until *ctx->stop. An existing subscriber
 * with other settings of those the relay owns is changed with sub_update
 * (said on stderr); one with other partitions is refused. NULL when
 * stopped or on a fatal error (said on stderr). */
tally_subscriber *relay_subscriber_open(relay_sink_context *ctx, const relay_subscription *sub);

/* ---- runtime.c: the endpoints defined in tallyd ---- */

/* A thread that lists the endpoints defined in tallyd every
 * RELAY_ENDPOINTS_POLL_MS and runs a webhook sink for each (not those of
 * c's file: the file's win), starting it again when its definition
 * changed and stopping it when it is deleted, until *stop. Its first
 * listing is done before this returns. 0, or 1 without it (said). */
typedef struct relay_runtime relay_runtime;
int relay_runtime_start(const relay_config *c, tally_client *client, atomic_bool *stop,
                        relay_runtime **out);
/* After *stop was set: join the thread, stop and join every sink. NULL
 * allowed. */
void relay_runtime_stop(relay_runtime *r);
/* For a scrape: hold r's sinks as they are (NULL: nothing) and append
 * the contexts of those running to out[*count .. capacity); their lag and
 * dead letters are read with each listing. relay_runtime_sinks_unlock
 * after. */
void relay_runtime_sinks_lock(relay_runtime *r, relay_sink_context **out, size_t capacity,
                              size_t *count);
void relay_runtime_sinks_unlock(relay_runtime *r);

/* ---- tally_relay.c ---- */
/* Mark s as the handle ctx runs: false (and nothing marked) when a stop
 * came first. relay_sink_end unmarks it before it is closed. */
bool relay_sink_begin(relay_sink_context *ctx, tally_subscriber *s);
void relay_sink_end(relay_sink_context *ctx);
/* Say on stderr that tallyd parks d in the sink's dead-letter queue, with
 * error: when parked_now (the sink parked it), or when this failed attempt
 * was its last (max_deliver); nothing otherwise. */
void relay_say_parked(const relay_sink_context *ctx, const tally_delivery *d, bool parked_now,
                      const char *error);
/* Sleep up to ms, waking early when *stop is set. */
void relay_pause(const atomic_bool *stop, uint32_t ms);

#endif
