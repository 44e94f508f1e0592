/*
 * tallyd_options.c — tallyd's option table: one row per option, each with
 * its placeholder, default, help and the function that applies a value to
 * net_server_options. The engine (common/options.c) turns the rows into
 * getopt_long's array, --help, the config file's keys, --print-config and
 * --example-config (dist/tallyd.conf); help2man turns --help into
 * tallyd(8). Adding an option is adding a row (and, unless an existing
 * parse function fits, one function): docs/DESIGN.md, "The option table".
 */
#include "config.h"

#include "common/error.h"
#include "common/limits.h"
#include "ledger/retention.h"
#include "net/auth/listen_policy.h"
#include "net/http/http.h"
#include "net/http/openapi.h"
#include "net/ops/protocol.h"
#include "net/server/tallyd_options.h"
#include "net/http/webhooks.h"

#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define STRINGIFY(x) #x
#define TEXT_OF(x) STRINGIFY(x) /* a macro's value as text: TEXT_OF(TALLY_CONTEXTS_DEFAULT) */

/* A number's row: options_parse_number stores it in net_server_options. */
#define NUMBER(kind, field, min, max, scale)                                                \
    options_parse_number, min, max, 0, OPTIONS_STORE_##kind,                                \
        offsetof(net_server_options, field), scale

#define RETENTION_S_MAX (UINT64_C(100) * 365 * 24 * 3600)
#define MAP_MB_MIN (TALLY_MAP_SIZE_BYTES_MIN >> 20)
#define MAP_MB_MAX (TALLY_MAP_SIZE_BYTES_MAX >> 20)
_Static_assert((TALLY_MAP_SIZE_BYTES_DEFAULT >> 20) == 1024, "map-size-mb's default text");
_Static_assert(LEDGER_INBOX_WINDOW_MS_DEFAULT == INT64_C(604800) * 1000,
               "dedupe-window-s's default text");
_Static_assert(NET_ALERT_MAP_USED_PCT_DEFAULT == 90, "alert-map-used-pct's default text");

static net_server_options *opts_of(void *target)
{
    return target;
}

/* ---- the parse functions (options_parse_fn), one per kind of value ---- */

static int parse_data(const options_row *row, void *t, const char *text, char *why, size_t n)
{
    (void)row, (void)why, (void)n;
    opts_of(t)->data_dir = text;
    return 0;
}

static int parse_listen(const options_row *row, void *t, const char *text, char *why, size_t n)
{
    (void)row;
    net_server_options *opt = opts_of(t);
    if (!net_url_check(text, why, n))
        return 2;
    if (opt->listen_count == NET_LISTEN_URLS_MAX) {
        snprintf(why, n, "at most %d --listen URLs", NET_LISTEN_URLS_MAX);
        return 2;
    }
    opt->listen_urls[opt->listen_count++] = text;
    return 0;
}

static int parse_publish(const options_row *row, void *t, const char *text, char *why, size_t n)
{
    (void)row;
    if (strcmp(text, "none") != 0 && !net_url_check(text, why, n))
        return 2;
    opts_of(t)->publish_url = strcmp(text, "none") == 0 ? NULL : text;
    return 0;
}

/* The index of text among count names (an enum's values in order). */
static bool parse_name(const char *text, const char *const *names, int count, int *out)
{
    for (int i = 0; i < count; i++)
        if (strcmp(text, names[i]) == 0) {
            *out = i;
            return true;
        }
    return false;
}

static const char *const level_names[] = {"error", "warn", "info", "debug"}; /* net_log_level */
static const char *const replies_names[] = {"writer", "completer", "auto"};  /* net_replies */
static const char *const engine_names[] = {"epoll", "nng"};                  /* net_tcp_engine */
#define NAMES_COUNT(names) ((int)(sizeof(names) / sizeof((names)[0])))
_Static_assert(NAMES_COUNT(level_names) == NET_LOG_DEBUG + 1, "a name per log level");
_Static_assert(NAMES_COUNT(replies_names) == NET_REPLIES_AUTO + 1, "a name per replies mode");
_Static_assert(NAMES_COUNT(engine_names) == NET_TCP_ENGINE_NNG + 1, "a name per tcp engine");

/* log-level, replies and tcp-engine: one of the names of an enum, in its
 * order. */
static int parse_choice(const options_row *row, void *t, const char *text, char *why, size_t n)
{
    static const struct {
        const char *option, *expected;
        const char *const *names;
        int count;
    } sets[] = {
        {"log-level", "error, warn, info or debug", level_names, NAMES_COUNT(level_names)},
        {"replies", "auto, writer or completer", replies_names, NAMES_COUNT(replies_names)},
        {"tcp-engine", "epoll or nng", engine_names, NAMES_COUNT(engine_names)},
    };
    unsigned k = 0;
    while (strcmp(sets[k].option, row->name) != 0)
        k++; /* every row that names this parser is in sets */
    int choice;
    if (!parse_name(text, sets[k].names, sets[k].count, &choice)) {
        snprintf(why, n, "expected %s, got %s", sets[k].expected, text);
        return 2;
    }
    net_server_options *o = opts_of(t);
    if (k == 0)
        o->log_level = (net_log_level)choice;
    else if (k == 1)
        o->replies = (net_replies)choice;
    else
        o->tcp_engine = (net_tcp_engine)choice;
    return 0;
}

static int parse_backup_dir(const options_row *row, void *t, const char *text, char *why, size_t n)
{
    (void)row;
    if (text[0] != '/') {
        snprintf(why, n, "an absolute path, got %s", text);
        return 2;
    }
    opts_of(t)->backup_dir = text;
    return 0;
}

static int parse_http(const options_row *row, void *t, const char *text, char *why, size_t n)
{
    (void)row;
    bool none = strcmp(text, "none") == 0;
    if (!none && !net_http_url_valid(text)) {
        snprintf(why, n, "http://HOST:PORT, https://HOST:PORT or none, got %s", text);
        return 2;
    }
    opts_of(t)->http_url = none ? NULL : text;
    return 0;
}

static int parse_console_dir(const options_row *row, void *t, const char *text, char *why,
                             size_t n)
{
    (void)row;
    if (strcmp(text, "none") == 0) {
        opts_of(t)->console_dir = NULL;
        return 0;
    }
    if (strcmp(text, "installed") == 0)
        text = TALLY_CONSOLE_DIR;
    if (text[0] != '/') {
        snprintf(why, n, "an absolute path, installed or none, got %s", text);
        return 2;
    }
    opts_of(t)->console_dir = text;
    return 0;
}

static int parse_ready_file(const options_row *row, void *t, const char *text, char *why,
                            size_t n)
{
    (void)row, (void)why, (void)n;
    opts_of(t)->ready_file = text;
    return 0;
}

static int parse_hold_file(const options_row *row, void *t, const char *text, char *why,
                           size_t n)
{
    (void)row, (void)why, (void)n;
    opts_of(t)->writer_hold_file = text;
    return 0;
}

static int parse_auth(const options_row *row, void *t, const char *text, char *why, size_t n)
{
    (void)row, (void)why, (void)n;
    opts_of(t)->auth_file = text; /* read and checked by tallyd.c's load_auth */
    return 0;
}

/* ---- TLS: the files are read by tallyd.c's tls_setup, once every
 * endpoint is known ---- */

static tallyd_tls_choice tls_choice = {.client_auth = -1};

tallyd_tls_choice *tallyd_options_tls(void)
{
    return &tls_choice;
}

static int parse_tls_file(const options_row *row, void *t, const char *text, char *why, size_t n)
{
    (void)t, (void)why, (void)n;
    const char **field = strcmp(row->name, "tls-cert") == 0  ? &tls_choice.files.cert
                         : strcmp(row->name, "tls-key") == 0 ? &tls_choice.files.key
                                                              : &tls_choice.files.ca;
    *field = text;
    return 0;
}

static const char *const client_auth_names[] = {"none", "optional", "required"}; /* nng_tls_auth_mode */
_Static_assert(NNG_TLS_AUTH_MODE_NONE == 0 && NNG_TLS_AUTH_MODE_OPTIONAL == 1 &&
                   NNG_TLS_AUTH_MODE_REQUIRED == 2, "client_auth_names in NNG's order");

static int parse_tls_client_auth(const options_row *row, void *t, const char *text, char *why,
                                 size_t n)
{
    (void)row, (void)t;
    int choice;
    if (!parse_name(text, client_auth_names, 3, &choice)) {
        snprintf(why, n, "expected required, optional or none, got %s", text);
        return 2;
    }
    tls_choice.client_auth = choice;
    return 0;
}

/* ---- cluster mode (docs/CLUSTER.md) ---- */

static int parse_cluster(const options_row *row, void *t, const char *text, char *why, size_t n)
{
    (void)row;
    size_t count = 1;
    for (const char *c = text; *c; c++)
        count += *c == ',';
    const char *at = text;
    for (size_t i = 0; i < count; i++) {
        const char *end = strchr(at, ',');
        size_t len = end ? (size_t)(end - at) : strlen(at);
        if (len < 8 || strncmp(at, "nats://", 7) != 0) {
            snprintf(why, n, "nats://HOST:PORT[,nats://HOST:PORT...], got %s", text);
            return 2;
        }
        at += len + 1;
    }
    if (count > TALLY_CLUSTER_URLS_MAX) {
        snprintf(why, n, "at most %d URLs", TALLY_CLUSTER_URLS_MAX);
        return 2;
    }
    opts_of(t)->cluster_urls = text;
    return 0;
}

/* The NATS connection's files and user: kept as given, checked when the
 * node connects (cluster_node.c). */
static int parse_cluster_auth(const options_row *row, void *t, const char *text, char *why,
                              size_t n)
{
    (void)why, (void)n;
    net_server_options *o = opts_of(t);
    const char **field = strcmp(row->name, "cluster-creds") == 0         ? &o->cluster_creds
                         : strcmp(row->name, "cluster-user") == 0          ? &o->cluster_user
                         : strcmp(row->name, "cluster-password-file") == 0 ? &o->cluster_password_file
                         : strcmp(row->name, "cluster-tls-ca") == 0        ? &o->cluster_tls_ca
                         : strcmp(row->name, "cluster-tls-cert") == 0      ? &o->cluster_tls_cert
                                                                          : &o->cluster_tls_key;
    *field = text;
    return 0;
}

/* --node and --cluster-stream: names of a restricted alphabet. */
static int parse_cluster_name(const options_row *row, void *t, const char *text, char *why,
                              size_t n)
{
    bool node = strcmp(row->name, "node") == 0;
    size_t len = strlen(text), max = node ? TALLY_CLUSTER_NODE_BYTES_MAX
                                          : TALLY_CLUSTER_STREAM_NAME_BYTES_MAX;
    bool ok = len >= 1 && len <= max;
    for (size_t i = 0; ok && i < len; i++) {
        char c = text[i];
        ok = node ? ((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-')
                  : ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                     c == '_' || c == '-');
    }
    if (!ok) {
        snprintf(why, n, "1-%zu bytes of %s, got %s", max, node ? "a-z 0-9 -" : "A-Z a-z 0-9 _ -",
                 text);
        return 2;
    }
    if (node)
        opts_of(t)->cluster_node = text;
    else
        opts_of(t)->cluster_stream = text;
    return 0;
}

/* The sources file is read at once: its errors stop the start with 1. */
static int parse_webhooks(const options_row *row, void *t, const char *text, char *why, size_t n)
{
    (void)row;
    net_server_options *opt = opts_of(t);
    webhooks_free(opt->webhooks);
    opt->webhooks = NULL;
    return webhooks_load(text, &opt->webhooks, why, n) == TALLY_ok ? 0 : 1;
}

static int parse_alert(const options_row *row, void *t, const char *text, char *why, size_t n)
{
    for (int kind = 0; kind < NET_ALERT_KIND_COUNT; kind++) {
        if (strcmp(row->name, net_health_option_name((net_alert_kind)kind)) != 0)
            continue;
        char inner[OPTIONS_WHY_BYTES_MAX];
        if (net_health_option(&opts_of(t)->health, (net_alert_kind)kind, text, inner,
                              sizeof(inner)))
            return 0;
        /* net_health_option names the option ("--alert-pending: ..."); the
         * caller does too. */
        size_t skip = strlen(row->name) + 4;
        snprintf(why, n, "%s", strncmp(inner, "--", 2) == 0 && strlen(inner) > skip ? inner + skip
                                                                                  : inner);
        return 2;
    }
    assert(!"an alert row without its kind");
    return 2;
}

#define ALERT_HELP_EACH                                                                   \
    "; also NAME=N for one subscriber (NAME=none: no alert for it); off unless given"

/* The rows, in --help's order. Settings first; then the command line's
 * actions (their value is read by tallyd_options_load). */
static const options_row rows[] = {
    {"config", "FILE", NULL,
     "read settings from FILE, `key = value` lines (docs/OPERATIONS.md); the default is "
     TALLYD_CONFIG_DEFAULT " when it exists; none: no file",
     NULL, 0, 0, OPTIONS_COMMAND_LINE},
    {"data", "DIR", "./tally-data", "store directory, created if missing", parse_data},
    {"listen", "URL", "tcp://127.0.0.1:7450",
     "NNG request/reply endpoint: tcp://, ipc://, or tls+tcp://HOST:PORT with tls-cert and "
     "tls-key; PORT 0: one the kernel chooses (see ready-file)", parse_listen, 0, 0,
     OPTIONS_REPEATABLE},
    {"publish", "URL", "tcp://127.0.0.1:7451",
     "NNG PUB endpoint for committed events (tls+tcp:// too; PORT 0 as for listen); none "
     "disables", parse_publish},
    {"ready-file", "FILE", NULL,
     "once every listener is up (before systemd's READY=1), write FILE with a line per "
     "endpoint, as bound (a PORT 0 filled in): `listen URL` for each listen in order, "
     "`publish URL`, `http URL`; written whole (a temporary file in FILE's directory, then a "
     "rename), replaced at each start, removed at a clean stop (a crash leaves it: remove it "
     "before a start you wait on)",
     parse_ready_file},
    {"map-size-mb", "N", "1024", "LMDB map size at start in MiB",
     NUMBER(U64, map_size_bytes, MAP_MB_MIN, MAP_MB_MAX, UINT64_C(1) << 20)},
    {"map-max-mb", "N", NULL,
     "a full map doubles, up to N MiB (unset: the data directory's filesystem size, at most 1 "
     "TiB); beyond it writes get storage_full",
     NUMBER(U64, map_max_bytes, MAP_MB_MIN, MAP_MB_MAX, UINT64_C(1) << 20)},
    {"log-level", "L", "info", "error, warn, info or debug; logs go to stderr", parse_choice},
    {"contexts", "N", TEXT_OF(TALLY_CONTEXTS_DEFAULT), "requests served concurrently",
     NUMBER(UNSIGNED, contexts, 1, TALLY_CONTEXTS_MAX, 1)},
    {"dedupe-window-s", "N", "604800",
     "keep idempotency records this long (7 days), then remove them; must exceed the longest "
     "time a client retries a key; 0 keeps them forever",
     NUMBER(I64, inbox_window_ms, 0, RETENTION_S_MAX, 1000)},
    {"log-retention-s", "N", "0",
     "remove events older than this once every durable subscriber has acknowledged them, "
     "keeping a checkpoint; 0 keeps every event",
     NUMBER(I64, log_age_ms, 0, RETENTION_S_MAX, 1000)},
    {"dlq-retention-s", "N", "0",
     "remove dead letters parked longer than this (not those marked for replay), each with a "
     "dead_letter.expired event; 0 keeps every dead letter",
     NUMBER(I64, dlq_age_ms, 0, RETENTION_S_MAX, 1000)},
    {"max-connections", "N", TEXT_OF(TALLY_CONNECTIONS_DEFAULT),
     "request connections at once; one more is closed at connect; 0 = no limit",
     NUMBER(UNSIGNED, max_connections, 0, TALLY_CONNECTIONS_MAX, 1)},
    {"max-connections-per-address", "N", TEXT_OF(TALLY_CONNECTIONS_PER_ADDRESS_DEFAULT),
     "request connections from one client address (tcp://, tls+tcp://, ws://; not ipc://); one "
     "more is closed at connect; 0 = no limit",
     NUMBER(UNSIGNED, connections_per_address_max, 0, TALLY_CONNECTIONS_MAX, 1)},
    {"connections-reserved-pct", "P", TEXT_OF(TALLY_CONNECTIONS_RESERVED_PCT_DEFAULT),
     "the last P % of max-connections go only to addresses holding fewer than "
     TEXT_OF(TALLY_CONNECTIONS_FEW_PER_ADDRESS) " connections",
     NUMBER(UNSIGNED, connections_reserved_pct, 0, 90, 1)},
    {"request-timeout-s", "N", TEXT_OF(TALLY_REQUEST_TIMEOUT_S_DEFAULT),
     "tcp:// (epoll engine): a request, once its first byte came, and the SP header exchange "
     "must arrive whole within N s (plus its size at request-min-kib-per-s); else the "
     "connection is closed",
     NUMBER(UNSIGNED, request_timeout_s, 1, TALLY_REQUEST_TIMEOUT_S_MAX, 1)},
    {"request-min-kib-per-s", "N", TEXT_OF(TALLY_REQUEST_MIN_KIB_PER_S_DEFAULT),
     "the slowest rate a large request may arrive at: its deadline is request-timeout-s plus "
     "its size at N KiB/s",
     NUMBER(UNSIGNED, request_min_kib_per_s, 1, 1024 * 1024, 1)},
    {"idle-timeout-s", "N", TEXT_OF(TALLY_IDLE_TIMEOUT_S_DEFAULT),
     "a request connection with nothing in flight for N s is closed, and so is one whose "
     "client has read none of its replies for N s (clients redial)",
     NUMBER(UNSIGNED, idle_timeout_s, 1, TALLY_IDLE_TIMEOUT_S_MAX, 1)},
    {"max-unread-reply-kib", "N", TEXT_OF(TALLY_UNREAD_REPLY_KIB_DEFAULT),
     "tcp:// (epoll engine): replies a client has not read, per connection; beyond N KiB "
     "tallyd reads no more of its requests until it reads",
     NUMBER(UNSIGNED, unread_reply_kib_max, TALLY_UNREAD_REPLY_KIB_MIN,
            TALLY_UNREAD_REPLY_KIB_MAX, 1)},
    {"max-in-flight-per-connection", "N", TEXT_OF(TALLY_IN_FLIGHT_PER_CONNECTION_DEFAULT),
     "tcp:// (epoll engine): requests of one connection served at once; its further requests "
     "wait in the socket",
     NUMBER(UNSIGNED, in_flight_per_connection_max, 1, TALLY_CONTEXTS_MAX, 1)},
    {"max-long-polls-per-connection", "N", TEXT_OF(TALLY_LONG_POLLS_PER_CONNECTION_DEFAULT),
     "long-polls (log_read, sub_fetch with wait_ms) one connection may have parked; one more "
     "is answered at once, as if its wait_ms were 0",
     NUMBER(UNSIGNED, long_polls_per_connection_max, 1, TALLY_CONTEXTS_MAX, 1)},
    {"backup-dir", "DIR", NULL,
     "'tally backup' may only write below DIR, an absolute path (unset: anywhere tallyd may "
     "write; the destination must not exist)",
     parse_backup_dir},
    {"replies", "T", "auto",
     "which thread answers a committed group and publishes its events: auto (the completer "
     "when requests wait for the writer, else the writer), completer (its own thread, while the "
     "writer applies the next group) or writer (right after the commit); docs/DESIGN.md",
     parse_choice},
    {"writer-spin-us", "N", "150",
     "an idle writer watches its queue this long before it sleeps, so that a request coming "
     "within it (the next of a client that waits for each answer) is taken without a thread "
     "wake-up; costs up to N us of CPU per commit when idle; 0 never spins",
     NUMBER(UNSIGNED, writer_spin_us, 0, 10000, 1)},
    {"tcp-engine", "E", "epoll",
     "who serves tcp:// --listen URLs: epoll (tallyd's own loop: a request is read, queued and "
     "answered with no thread hand-off but the writer's) or nng (NNG's REP socket, as for ipc://, "
     "ws:// and tls+tcp://); docs/DESIGN.md",
     parse_choice},
    {"http", "URL", "http://127.0.0.1:7452",
     "HTTP face: GET /metrics (Prometheus), /healthz, /readyz, the JSON API /v1/... "
     "(docs/PROTOCOL.md); http://HOST:PORT, https://HOST:PORT (with the tls-* files; PORT 0 "
     "as for listen); none disables",
     parse_http},
    {"console-dir", "DIR", "installed",
     "the web console's files, served at /console on the HTTP face (docs/CONSOLE.md): an "
     "absolute path, installed (those installed with tallyd, in DATADIR/tally/console) or "
     "none (no console)",
     parse_console_dir},
    {"listener-probe-ms", "MS", TEXT_OF(TALLY_LISTENER_PROBE_MS_DEFAULT),
     "the watchdog of NNG's listeners (docs/OPERATIONS.md) probes each this often; a knob for "
     "tests and tuning, the default suits production",
     NUMBER(UNSIGNED, listener_probe_ms, TALLY_LISTENER_PROBE_MS_MIN,
            TALLY_LISTENER_PROBE_MS_MAX, 1)},
    {"http-timeout-s", "N", TEXT_OF(TALLY_HTTP_TIMEOUT_S_DEFAULT),
     "an idle or slow HTTP connection is closed after N s",
     NUMBER(UNSIGNED, http_timeout_s, 1, TALLY_HTTP_TIMEOUT_S_MAX, 1)},
    {"http-max-connections", "N", TEXT_OF(TALLY_HTTP_CONNECTIONS_DEFAULT),
     "HTTP connections at once",
     NUMBER(UNSIGNED, http_connections_max, 1, TALLY_HTTP_CONNECTIONS_MAX, 1)},
    {"http-max-per-address", "N", TEXT_OF(TALLY_HTTP_CONNECTIONS_PER_ADDRESS_DEFAULT),
     "HTTP connections from one address",
     NUMBER(UNSIGNED, http_per_address_max, 1, TALLY_HTTP_CONNECTIONS_MAX, 1)},
    {"http-reserved-connections", "N", TEXT_OF(TALLY_HTTP_RESERVED_CONNECTIONS_DEFAULT),
     "HTTP connections beyond --http-max-connections that answer only GET /metrics, /healthz "
     "and /readyz (503 to anything else), so that these answer while the rest are taken",
     NUMBER(UNSIGNED, http_reserved_max, 0, TALLY_HTTP_RESERVED_CONNECTIONS_MAX, 1)},
    {"http-stream-heartbeat-ms", "MS", TEXT_OF(TALLY_HTTP_STREAM_HEARTBEAT_MS_DEFAULT),
     "GET /v1/events (docs/PROTOCOL.md, \"The event stream\") sends the comment \": keepalive\" "
     "after MS ms without an event",
     NUMBER(UNSIGNED, http_stream_heartbeat_ms, TALLY_HTTP_STREAM_HEARTBEAT_MS_MIN,
            TALLY_HTTP_STREAM_HEARTBEAT_MS_MAX, 1)},
    {"http-stream-max-s", "N", TEXT_OF(TALLY_HTTP_STREAM_LIFE_S_DEFAULT),
     "a GET /v1/events stream ends after N s (its client resumes with Last-Event-ID)",
     NUMBER(UNSIGNED, http_stream_life_s, 1, TALLY_HTTP_STREAM_LIFE_S_MAX, 1)},
    {"http-stream-buffer-bytes", "N", TEXT_OF(TALLY_HTTP_STREAM_BUFFER_BYTES_DEFAULT),
     "bytes of events a GET /v1/events stream holds rendered and not yet sent; an event "
     "whose message would pass it ends the stream (the default holds the largest event)",
     NUMBER(UNSIGNED, http_stream_buffer_bytes, TALLY_HTTP_STREAM_BUFFER_BYTES_MIN,
            TALLY_HTTP_STREAM_BUFFER_BYTES_MAX, 1)},
    {"http-webhooks-in-flight", "N", TEXT_OF(TALLY_WEBHOOK_IN_FLIGHT_DEFAULT),
     "webhook deliveries waiting for the writer at once; more get 503 with Retry-After "
     "(docs/WEBHOOKS.md); below --http-max-connections, so that other clients keep places",
     NUMBER(UNSIGNED, http_webhooks_in_flight, 1, TALLY_HTTP_CONNECTIONS_MAX, 1)},
    {"webhooks", "FILE", NULL,
     "take signed webhooks at POST /webhooks/NAME (needs --http): one source a line, NAME "
     "SCHEME SECRET-FILE[,...] [OPT=V...]; schemes standard, stripe, hmac-sha256 "
     "(docs/WEBHOOKS.md)",
     parse_webhooks},
    {"cluster", "URLS", NULL,
     "cluster mode (docs/CLUSTER.md): the NATS JetStream servers, nats://HOST:PORT "
     "comma-separated; every write goes through the command stream and every node applies it; "
     "unset: single-node mode",
     parse_cluster},
    {"node", "NAME", NULL,
     "this node's name in cluster mode (required there): 1-32 bytes of a-z 0-9 -, unique in "
     "the cluster",
     parse_cluster_name},
    {"cluster-stream", "NAME", "TALLY_COMMANDS",
     "the command stream: created when missing, else checked; tallyd refuses one whose "
     "settings break the guarantees, naming the setting (docs/CLUSTER.md, \"The stream\")",
     parse_cluster_name},
    {"cluster-replicas", "N", TEXT_OF(TALLY_CLUSTER_REPLICAS_DEFAULT),
     "the replicas the stream gets when tallyd creates it; an existing stream with fewer is "
     "refused",
     NUMBER(UNSIGNED, cluster_replicas, 1, TALLY_CLUSTER_REPLICAS_MAX, 1)},
    {"cluster-read-wait-ms", "MS", TEXT_OF(TALLY_CLUSTER_READ_WAIT_MS_DEFAULT),
     "a read with min_seq waits up to MS ms for this node to have applied that position (in "
     "single-node mode: for the log's head seq to reach it), then gets not_caught_up",
     NUMBER(UNSIGNED, cluster_read_wait_ms, 0, TALLY_CLUSTER_READ_WAIT_MS_MAX, 1)},
    {"cluster-tick-ms", "MS", TEXT_OF(TALLY_CLUSTER_TICK_MS_DEFAULT),
     "cluster mode: when this node has applied nothing for MS ms it appends a tick (a time, "
     "no commands), at most about one per MS across the cluster, so that holds time out and "
     "entitlements expire while nothing is written; 0: never",
     NUMBER(UNSIGNED, cluster_tick_ms, 0, TALLY_CLUSTER_TICK_MS_MAX, 1)},
    {"cluster-checkpoint-every", "N", TEXT_OF(TALLY_CLUSTER_CHECKPOINT_EVERY_DEFAULT),
     "cluster mode: every N positions (and at the first of every 10 s of the log's time) each "
     "node appends a checkpoint (its state digest) and compares the others' with its own; a "
     "node that disagrees with the majority stops serving (cluster_diverged). Every node of a "
     "cluster must run with the same N",
     NUMBER(UNSIGNED, cluster_checkpoint_every, TALLY_CLUSTER_CHECKPOINT_EVERY_MIN,
            TALLY_CLUSTER_CHECKPOINT_EVERY_MAX, 1)},
    {"cluster-init", NULL, NULL,
     "cluster mode: make this store (a single-node store, or a node's of a lost cluster) the "
     "first node of a new cluster on an empty stream: its log is the cluster's base, the other "
     "nodes start from a tally backup of it (docs/CLUSTER.md); refused on a stream that holds "
     "messages. A command-line flag only, never a config key",
     NULL, 0, 0, OPTIONS_COMMAND_LINE},
    {"cluster-creds", "FILE", NULL,
     "cluster mode: a NATS credentials file (JWT and nkey seed) for the connection to the "
     "NATS servers; mode 0600 or stricter",
     parse_cluster_auth},
    {"cluster-user", "NAME", NULL,
     "cluster mode: the NATS user the connection authenticates as, with "
     "--cluster-password-file",
     parse_cluster_auth},
    {"cluster-password-file", "FILE", NULL,
     "cluster mode: a file holding --cluster-user's password on one line; mode 0600 or "
     "stricter",
     parse_cluster_auth},
    {"cluster-tls-ca", "FILE", NULL,
     "cluster mode: PEM CA certificate(s) the NATS servers' certificates must chain to; the "
     "connection then uses TLS",
     parse_cluster_auth},
    {"cluster-tls-cert", "FILE", NULL,
     "cluster mode: PEM client certificate for NATS servers that verify clients (with "
     "--cluster-tls-key)",
     parse_cluster_auth},
    {"cluster-tls-key", "FILE", NULL,
     "cluster mode: the client certificate's PEM private key, unencrypted; mode 0600 or "
     "stricter",
     parse_cluster_auth},
    {"cluster-ready-lag", "N", TEXT_OF(TALLY_CLUSTER_READY_LAG_DEFAULT),
     "cluster mode: not ready (/readyz 503) while this node is more than N messages behind the "
     "command stream",
     parse_alert},
    {"tls-cert", "FILE", NULL,
     "PEM certificate (chain) of the tls+tcp:// and https:// endpoints (docs/SECURITY.md)",
     parse_tls_file},
    {"tls-key", "FILE", NULL, "its PEM private key, unencrypted, mode 0600 or stricter",
     parse_tls_file},
    {"tls-ca", "FILE", NULL, "PEM CA that client certificates must chain to", parse_tls_file},
    {"tls-client-auth", "M", NULL,
     "required (unset: the default with tls-ca; a client without a valid certificate fails the "
     "handshake), optional (https:// only: checked when presented) or none (the default "
     "without tls-ca); SIGHUP reads the files again for new tls+tcp:// connections (HTTPS: at "
     "a restart)",
     parse_tls_client_auth},
    {"auth", "FILE", NULL,
     "principals and grants, one a line: NAME SHA256-HEX-OF-TOKEN GRANTS (read, "
     "write:CONSUMER, subscribe:NAME, admin; * globs); every request then carries a token "
     "(docs/SECURITY.md); the file must be private (mode 600); needs backup-dir; SIGHUP "
     "reloads it",
     parse_auth},
    {"skip-open-check", NULL, NULL,
     "open the store without the structural check at start (LMDB's meta pages, the head "
     "record, the hash chain of the last " TEXT_OF(TALLY_OPEN_CHECK_EVENTS) " events), which "
     "otherwise refuses a damaged store with exit 3; for recovery work only (warned at the "
     "start). A command-line flag only, never a config key",
     NULL, 0, 0, OPTIONS_COMMAND_LINE},
    {"upgrade", NULL, NULL,
     "open a store of an older format and upgrade it to this tallyd's, in place and one way "
     "(an older tallyd then refuses it; logged); without it tallyd refuses such a store and "
     "says so. Keep a copy of the data directory first. A command-line flag only, never a "
     "config key",
     NULL, 0, 0, OPTIONS_COMMAND_LINE},
    {"insecure", NULL, NULL,
     "allow plaintext listeners on non-loopback addresses and non-loopback listeners without "
     "--auth (warned at every start); without it tallyd refuses them and exits 2. A command-line "
     "flag only, never a config key: turning the safe defaults off shows in the command line",
     NULL, 0, 0, OPTIONS_COMMAND_LINE},
    {"alert-pending", "N", NULL,
     "alert when a subscriber has more than N events pending" ALERT_HELP_EACH, parse_alert, 0, 0,
     OPTIONS_REPEATABLE},
    {"alert-oldest-unacked-s", "S", NULL,
     "alert when a subscriber's oldest unacked event is older than S s" ALERT_HELP_EACH,
     parse_alert, 0, 0, OPTIONS_REPEATABLE},
    {"alert-dead-letters", "N", NULL,
     "alert when a subscriber has more than N dead letters" ALERT_HELP_EACH, parse_alert, 0, 0,
     OPTIONS_REPEATABLE},
    {"alert-idle-subscriber-s", "S", NULL,
     "alert when a subscriber has not fetched for S s while events are pending" ALERT_HELP_EACH,
     parse_alert, 0, 0, OPTIONS_REPEATABLE},
    {"alert-map-used-pct", "P", TEXT_OF(NET_ALERT_MAP_USED_PCT_DEFAULT),
     "alert when more than P % of --map-max-mb is used; alerts show in /readyz's checks, "
     "'tally health' (exit 1), /metrics and a warn line, and never make /readyz 503",
     parse_alert},
    {"ready-disk-free-mb", "N", TEXT_OF(NET_READY_DISK_FREE_MB_DEFAULT),
     "not ready (/readyz 503, 'tally health' exit 5) while less than N MiB are free under the "
     "data directory",
     parse_alert},
    {"ready-map-room-kib", "N", TEXT_OF(NET_READY_MAP_ROOM_KIB_DEFAULT),
     "not ready while less than N KiB are left in the map up to --map-max-mb", parse_alert},
    {"ready-storage-full-s", "S", TEXT_OF(NET_READY_STORAGE_FULL_S_DEFAULT),
     "not ready for S s after a write was answered storage_full; 0: never", parse_alert},
    {"writer-stall-ms", "MS", TEXT_OF(NET_WRITER_STALL_MS_DEFAULT),
     "while writes wait and the writer has taken or committed none for MS ms, /healthz "
     "answers 503 and tallyd is not ready",
     parse_alert},
    {"test-writer-hold-file", "FILE", NULL,
     "for tests only: while FILE exists the writer takes no work (a hung writer on demand; "
     "in cluster mode the applier applies nothing); "
     "a command-line flag only, never a config key",
     parse_hold_file, 0, 0, OPTIONS_COMMAND_LINE},
    {"test-cluster-diverge-at", "POS", NULL,
     "for tests only: in cluster mode, the first other node's group at or after position POS "
     "is applied without its last request (a node that diverges on demand); a command-line "
     "flag only, never a config key",
     options_parse_number, 1, UINT32_MAX, OPTIONS_COMMAND_LINE, OPTIONS_STORE_UNSIGNED,
     offsetof(net_server_options, test_cluster_diverge_at), 1},
    {"test-cluster-shift-at", "POS", NULL,
     "for tests only: in cluster mode, the stream is read as a consumer served by a replica "
     "that lacks the message at position POS would deliver it (each later message one "
     "position lower); a command-line flag only, never a config key",
     options_parse_number, 1, UINT32_MAX, OPTIONS_COMMAND_LINE, OPTIONS_STORE_UNSIGNED,
     offsetof(net_server_options, test_cluster_shift_at), 1},
    {"test-cluster-stale-copy-at", "POS", NULL,
     "for tests only: in cluster mode, one server's copy of position POS (the first to "
     "deliver it to this node) is replaced, every time, by a message the stream does not hold "
     "there (as a server's stale store delivers it); the node must apply what a majority of "
     "the replicas holds; a command-line flag only, never a config key",
     options_parse_number, 1, UINT32_MAX, OPTIONS_COMMAND_LINE, OPTIONS_STORE_UNSIGNED,
     offsetof(net_server_options, test_cluster_stale_copy_at), 1},
    {"print-config", NULL, NULL,
     "print the configuration in effect (the file, the flags, the defaults) as a config file "
     "and exit",
     NULL, 0, 0, OPTIONS_COMMAND_LINE},
    {"example-config", NULL, NULL,
     "print the example config file, every key commented out with its default, and exit",
     NULL, 0, 0, OPTIONS_COMMAND_LINE},
    {"protocol-reference", NULL, NULL, "print the op reference of docs/PROTOCOL.md and exit",
     NULL, 0, 0, OPTIONS_COMMAND_LINE},
    {"openapi", NULL, NULL,
     "print the JSON API's OpenAPI 3.1 document (docs/openapi.json, GET /v1/openapi.json) and "
     "exit",
     NULL, 0, 0, OPTIONS_COMMAND_LINE},
    {"help", NULL, NULL, "print this help and exit", NULL, 0, 0, OPTIONS_COMMAND_LINE},
    {"version", NULL, NULL, "print the version and exit", NULL, 0, 0, OPTIONS_COMMAND_LINE},
};

static void usage(const options_set *set, FILE *f)
{
    fprintf(f, "Usage: tallyd [OPTION]...\n"
               "\n"
               "The tally ledger and entitlement server.\n"
               "\n"
               "Options (each is also a key of the config file: its name without the dashes):\n");
    options_print_help(set, f);
    fprintf(f, "\n"
               "The config file: `key = value` lines, `#` comments; a flag on the command line\n"
               "overrides its key (a repeatable one's values replace the file's list).\n"
               "SIGTERM or SIGINT: stop taking requests, finish and answer the group being\n"
               "committed, close the store cleanly. SIGHUP: read the --auth file (one that\n"
               "does not parse keeps the old table) and the --tls-* files again (new tls+tcp://\n"
               "connections use them). Only one tallyd may use a data directory.\n");
}

static int usage_error(const char *message)
{
    fprintf(stderr, "tallyd: %s\nTry 'tallyd --help'.\n", message);
    return 2;
}

/* The file named by --config, else the default one when it exists. */
static int read_config_file(options_set *set)
{
    const char *path = NULL;
    char why[OPTIONS_WHY_BYTES_MAX + TALLY_PATH_BYTES_MAX];
    if (options_given_count(set, "config", &path) == 0)
        path = access(TALLYD_CONFIG_DEFAULT, F_OK) == 0 ? TALLYD_CONFIG_DEFAULT : "none";
    if (strcmp(path, "none") == 0)
        return 0;
    if (options_read_file(set, path, why, sizeof(why)) != 0)
        return usage_error(why);
    return 0;
}

/* What the settings must satisfy together. */
static int check_together(const net_server_options *opt)
{
    uint64_t start_bytes = opt->map_size_bytes ? opt->map_size_bytes : TALLY_MAP_SIZE_BYTES_DEFAULT;
    if (opt->map_max_bytes && opt->map_max_bytes < start_bytes)
        return usage_error("--map-max-mb must be at least the map at start (--map-size-mb)");
    if (opt->webhooks && opt->http_url == NULL)
        return usage_error("--webhooks needs the HTTP face: not with --http none");
    if (opt->webhooks && opt->http_webhooks_in_flight >= opt->http_connections_max)
        return usage_error("--http-webhooks-in-flight must be below --http-max-connections: "
                           "deliveries waiting for the writer must leave places for others");
    if (opt->cluster_urls && opt->cluster_node == NULL)
        return usage_error("--cluster needs --node NAME, this node's name in the cluster");
    if (opt->cluster_node && opt->cluster_urls == NULL)
        return usage_error("--node is for cluster mode: give --cluster URLS too");
    if ((opt->cluster_user == NULL) != (opt->cluster_password_file == NULL))
        return usage_error("--cluster-user and --cluster-password-file go together");
    if ((opt->cluster_tls_cert == NULL) != (opt->cluster_tls_key == NULL))
        return usage_error("--cluster-tls-cert and --cluster-tls-key go together");
    if (opt->auth_file && opt->backup_dir == NULL)
        return usage_error("--auth needs --backup-dir: with auth on, backups are written only "
                           "below it");
    return -1;
}

int tallyd_options_load(int argc, char **argv, net_server_options *opt, options_set *set)
{
    if (!options_init(set, "tallyd", rows, sizeof(rows) / sizeof(rows[0]))) {
        fprintf(stderr, "tallyd: out of memory\n");
        return 1;
    }
    int rc = options_parse_command_line(set, argc, argv);
    if (rc != 0)
        return rc;
    if (options_given_count(set, "help", NULL)) {
        usage(set, stdout);
        return 0;
    }
    if (options_given_count(set, "version", NULL)) {
        printf("tallyd %s\n", PACKAGE_VERSION);
        return 0;
    }
    if (options_given_count(set, "protocol-reference", NULL)) {
        net_protocol_reference(stdout);
        return 0;
    }
    if (options_given_count(set, "openapi", NULL)) {
        size_t len;
        char *text = net_openapi_text(&len);
        if (text == NULL) {
            fprintf(stderr, "tallyd: out of memory\n");
            return 1;
        }
        fwrite(text, 1, len, stdout);
        free(text);
        return 0;
    }
    if (options_given_count(set, "example-config", NULL)) {
        options_print_example(set, stdout);
        return 0;
    }
    if ((rc = read_config_file(set)) != 0)
        return rc;
    char why[OPTIONS_WHY_BYTES_MAX + TALLY_PATH_BYTES_MAX];
    rc = options_apply(set, opt, why, sizeof(why));
    if (rc == 2)
        return usage_error(why);
    if (rc != 0) {
        fprintf(stderr, "tallyd: %s\n", why);
        return rc;
    }
    if ((rc = check_together(opt)) >= 0)
        return rc;
    if (options_given_count(set, "print-config", NULL)) {
        options_print_config(set, stdout);
        return 0;
    }
    return -1;
}
