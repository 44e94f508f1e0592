/*
 * tallyd.c — the tally server: options, signals, and net_server_run.
 */
#include "config.h"

#include "common/cli.h"
#include "common/limits.h"
#include "common/tls_config.h"
#include "ledger/retention.h"
#include "net/http.h"
#include "common/error.h"
#include "net/webhooks.h"
#include "net/protocol.h"
#include "net/server.h"

#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#define TALLYD_DATA_DEFAULT "./tally-data"
#define TALLYD_LISTEN_DEFAULT "tcp://127.0.0.1:7450"
#define TALLYD_PUBLISH_DEFAULT "tcp://127.0.0.1:7451"
#define TALLYD_HTTP_DEFAULT "http://127.0.0.1:7452"

static volatile sig_atomic_t stop_requested;
static volatile sig_atomic_t reload_requested; /* SIGHUP: read the --tls-* files again */

static void on_hangup(int sig)
{
    (void)sig;
    reload_requested = 1;
}

static void on_signal(int sig)
{
    (void)sig;
    stop_requested = 1;
}

static void usage(FILE *f)
{
    fprintf(f,
            "usage: tallyd [--data DIR] [--listen URL]... [--publish URL] [--map-size-mb N]\n"
            "              [--map-max-mb N] [--log-level L] [--contexts N] [--dedupe-window-s N]\n"
            "              [--log-retention-s N] [--dlq-retention-s N] [--backup-dir DIR]\n"
            "              [--max-connections N]\n"
            "              [--replies auto|completer|writer] [--http URL] [--http-timeout-s N]\n"
            "              [--http-max-connections N] [--http-max-per-address N] [--webhooks FILE]\n"
            "              [--alert-pending [NAME=]N] [--alert-oldest-unacked-s [NAME=]S]\n"
            "              [--alert-dead-letters [NAME=]N] [--alert-idle-subscriber-s [NAME=]S]\n"
            "              [--alert-map-used-pct P] [--tls-cert FILE --tls-key FILE]\n"
            "              [--tls-ca FILE] [--tls-client-auth required|optional|none]\n"
            "              [--help] [--version]\n"
            "\n"
            "The tally ledger and entitlement server.\n"
            "\n"
            "  --data DIR        store directory, created if missing (default %s)\n"
            "  --listen URL      NNG request/reply endpoint (tcp://, ipc://, or\n"
            "                    tls+tcp://HOST:PORT with --tls-cert/--tls-key); repeat\n"
            "                    for several\n"
            "                    (default %s)\n"
            "  --publish URL     NNG PUB endpoint for committed events (tls+tcp:// too);\n"
            "                    \"none\" disables\n"
            "                    (default %s)\n"
            "  --map-size-mb N   LMDB map size at start in MiB, %d..%d (default %d)\n"
            "  --map-max-mb N    a full map doubles, up to N MiB (default: the data\n"
            "                    directory's filesystem size, at most 1 TiB); beyond it\n"
            "                    writes get storage_full\n"
            "  --log-level L     error, warn, info or debug (default info); logs go to stderr\n"
            "  --contexts N      requests served concurrently, 1..%d (default %d)\n"
            "  --dedupe-window-s N  keep idempotency records this long, then remove them;\n"
            "                    must exceed the longest time a client retries a key\n"
            "                    (default 604800 = 7 days; 0 keeps them forever)\n"
            "  --log-retention-s N  remove events older than this once every durable\n"
            "                    subscriber has acknowledged them, keeping a checkpoint\n"
            "                    (default 0: keep every event)\n"
            "  --dlq-retention-s N  remove dead letters parked longer than this (not those\n"
            "                    marked for replay), each with a dead_letter.expired event\n"
            "                    (default 0: keep every dead letter)\n"
            "  --max-connections N  request connections at once, 0..%d; one more is\n"
            "                    closed at connect (default %d; 0 = no limit)\n"
            "  --backup-dir DIR  'tally backup' may only write below DIR (default: anywhere\n"
            "                    tallyd may write; the destination must not exist)\n"
            "  --replies T       which thread answers a committed group and publishes its\n"
            "                    events: auto (default: the completer when requests wait\n"
            "                    for the writer, else the writer), completer (its own\n"
            "                    thread, while the writer applies the next group) or\n"
            "                    writer (right after the commit); docs/DESIGN.md\n"
            "  --http URL        HTTP face: GET /metrics (Prometheus), /healthz, /readyz,\n"
            "                    the JSON API /v1/... (docs/PROTOCOL.md);\n"
            "                    http://HOST:PORT, https://HOST:PORT (the --tls-* files),\n"
            "                    \"none\" disables (default %s)\n"
            "  --http-timeout-s N  an idle or slow HTTP connection is closed after N s,\n"
            "                    1..%d (default %d)\n"
            "  --http-max-connections N  HTTP connections at once, 1..%d (default %d)\n"
            "  --http-max-per-address N  HTTP connections from one address, 1..%d\n"
            "                    (default %d)\n"
            "  --webhooks FILE   take signed webhooks at POST /webhooks/NAME (needs --http):\n"
            "                    one source a line, NAME SCHEME SECRET-FILE[,...] [OPT=V...];\n"
            "                    schemes standard, stripe, hmac-sha256 (docs/WEBHOOKS.md)\n"
            "  --alert-pending N          alert when a subscriber has more than N events pending\n"
            "  --alert-oldest-unacked-s S ... when its oldest unacked event is older than S s\n"
            "  --alert-dead-letters N     ... when it has more than N dead letters\n"
            "  --alert-idle-subscriber-s S ... when it has not fetched for S s while events\n"
            "                    are pending; each also as NAME=N (NAME=none: no alert) for one\n"
            "                    subscriber, repeatable; off unless given\n"
            "  --alert-map-used-pct P  alert when more than P %% of --map-max-mb is used\n"
            "                    (default %d); alerts: /readyz 503, 'tally health', a warn line\n"
            "  --tls-cert FILE   PEM certificate (chain) of tls+tcp:// and https:// endpoints\n"
            "  --tls-key FILE    its PEM private key, unencrypted, mode 0600 or stricter\n"
            "  --tls-ca FILE     PEM CA that client certificates must chain to\n"
            "  --tls-client-auth M  required (the default with --tls-ca: a client without\n"
            "                    a valid certificate fails the handshake), optional (https://\n"
            "                    only: checked when presented) or none (the default\n"
            "                    without --tls-ca);\n"
            "                    SIGHUP reads the files again for new tls+tcp://\n"
            "                    connections (HTTPS: at a restart; docs/SECURITY.md)\n"
            "  --protocol-reference  print the op reference of docs/PROTOCOL.md and exit\n"
            "  --help, --version\n"
            "\n"
            "SIGHUP: read the --tls-* files again (new tls+tcp:// connections use them).\n"
            "SIGTERM or SIGINT: stop taking requests, finish and answer the group being\n"
            "committed, close the store cleanly. Only one tallyd may use a data directory.\n",
            TALLYD_DATA_DEFAULT, TALLYD_LISTEN_DEFAULT, TALLYD_PUBLISH_DEFAULT,
            (int)(TALLY_MAP_SIZE_BYTES_MIN >> 20), (int)(TALLY_MAP_SIZE_BYTES_MAX >> 20),
            (int)(TALLY_MAP_SIZE_BYTES_DEFAULT >> 20), TALLY_CONTEXTS_MAX, TALLY_CONTEXTS_DEFAULT,
            TALLY_CONNECTIONS_MAX, TALLY_CONNECTIONS_DEFAULT, TALLYD_HTTP_DEFAULT,
            TALLY_HTTP_TIMEOUT_S_MAX, TALLY_HTTP_TIMEOUT_S_DEFAULT, TALLY_HTTP_CONNECTIONS_MAX,
            TALLY_HTTP_CONNECTIONS_DEFAULT, TALLY_HTTP_CONNECTIONS_MAX,
            TALLY_HTTP_CONNECTIONS_PER_ADDRESS_DEFAULT, NET_ALERT_MAP_USED_PCT_DEFAULT);
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
#define NAMES_COUNT(names) ((int)(sizeof(names) / sizeof((names)[0])))
_Static_assert(NAMES_COUNT(level_names) == NET_LOG_DEBUG + 1, "a name per log level");
_Static_assert(NAMES_COUNT(replies_names) == NET_REPLIES_AUTO + 1, "a name per replies mode");

static int usage_error(const char *fmt, const char *arg)
{
    fprintf(stderr, "tallyd: ");
    fprintf(stderr, fmt, arg);
    fprintf(stderr, "\nTry 'tallyd --help'.\n");
    return 2;
}

enum { OPT_PROTOCOL_REFERENCE = 1000, OPT_CONTEXTS, OPT_DEDUPE, OPT_LOG_RETENTION, OPT_BACKUP_DIR, OPT_MAX_CONNECTIONS,
       OPT_REPLIES, OPT_MAP_MAX, OPT_DLQ_RETENTION, OPT_HTTP, OPT_HTTP_TIMEOUT,
       OPT_HTTP_CONNECTIONS, OPT_HTTP_PER_ADDRESS, OPT_WEBHOOKS, OPT_TLS_CERT, OPT_TLS_KEY,
       OPT_TLS_CA, OPT_TLS_CLIENT_AUTH, OPT_ALERT /* + net_alert_kind */ };

/* The --tls-* options until tls_setup has read them. */
typedef struct tls_choice {
    tls_files files;
    int client_auth; /* an nng_tls_auth_mode, or -1: not given */
    tls_pem pem;
} tls_choice;

static const char *const client_auth_names[] = {"none", "optional", "required"}; /* nng_tls_auth_mode */
_Static_assert(NNG_TLS_AUTH_MODE_NONE == 0 && NNG_TLS_AUTH_MODE_OPTIONAL == 1 &&
                   NNG_TLS_AUTH_MODE_REQUIRED == 2, "client_auth_names in NNG's order");

#define RETENTION_S_MAX (UINT64_C(100) * 365 * 24 * 3600)

static int parse_options(int argc, char **argv, net_server_options *opt, tls_choice *tls)
{
    static const struct option opts[] = {
        {"data", required_argument, NULL, 'd'},    {"listen", required_argument, NULL, 'l'},
        {"publish", required_argument, NULL, 'p'}, {"map-size-mb", required_argument, NULL, 'm'},
        {"log-level", required_argument, NULL, 'L'}, {"contexts", required_argument, NULL, OPT_CONTEXTS},
        {"help", no_argument, NULL, 'h'},          {"version", no_argument, NULL, 'V'},
        {"protocol-reference", no_argument, NULL, OPT_PROTOCOL_REFERENCE},
        {"dedupe-window-s", required_argument, NULL, OPT_DEDUPE},
        {"log-retention-s", required_argument, NULL, OPT_LOG_RETENTION},
        {"dlq-retention-s", required_argument, NULL, OPT_DLQ_RETENTION},
        {"backup-dir", required_argument, NULL, OPT_BACKUP_DIR},
        {"max-connections", required_argument, NULL, OPT_MAX_CONNECTIONS},
        {"replies", required_argument, NULL, OPT_REPLIES},
        {"map-max-mb", required_argument, NULL, OPT_MAP_MAX},
        {"http", required_argument, NULL, OPT_HTTP},
        {"http-timeout-s", required_argument, NULL, OPT_HTTP_TIMEOUT},
        {"http-max-connections", required_argument, NULL, OPT_HTTP_CONNECTIONS},
        {"http-max-per-address", required_argument, NULL, OPT_HTTP_PER_ADDRESS},
        {"webhooks", required_argument, NULL, OPT_WEBHOOKS},
        {"tls-cert", required_argument, NULL, OPT_TLS_CERT},
        {"tls-key", required_argument, NULL, OPT_TLS_KEY},
        {"tls-ca", required_argument, NULL, OPT_TLS_CA},
        {"tls-client-auth", required_argument, NULL, OPT_TLS_CLIENT_AUTH},
        {"alert-map-used-pct", required_argument, NULL, OPT_ALERT + NET_ALERT_MAP_USED},
        {"alert-pending", required_argument, NULL, OPT_ALERT + NET_ALERT_PENDING},
        {"alert-oldest-unacked-s", required_argument, NULL, OPT_ALERT + NET_ALERT_OLDEST_UNACKED},
        {"alert-dead-letters", required_argument, NULL, OPT_ALERT + NET_ALERT_DEAD_LETTERS},
        {"alert-idle-subscriber-s", required_argument, NULL, OPT_ALERT + NET_ALERT_IDLE},
        {NULL, 0, NULL, 0}};
    char why[TALLY_PATH_BYTES_MAX + 200];
    uint64_t n;
    int c, choice;
    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (c) {
        case 'd': opt->data_dir = optarg; break;
        case 'l':
            if (opt->listen_count == NET_LISTEN_URLS_MAX)
                return usage_error("at most 8 --listen URLs%s", "");
            opt->listen_urls[opt->listen_count++] = optarg;
            break;
        case 'p': opt->publish_url = strcmp(optarg, "none") == 0 ? NULL : optarg; break;
        case 'm':
            if (!cli_parse_u64(optarg, TALLY_MAP_SIZE_BYTES_MIN >> 20, TALLY_MAP_SIZE_BYTES_MAX >> 20, &n))
                return usage_error("--map-size-mb: not a size in range: %s", optarg);
            opt->map_size_bytes = (uint64_t)n << 20;
            break;
        case OPT_MAP_MAX:
            if (!cli_parse_u64(optarg, TALLY_MAP_SIZE_BYTES_MIN >> 20, TALLY_MAP_SIZE_BYTES_MAX >> 20, &n))
                return usage_error("--map-max-mb: not a size in range: %s", optarg);
            opt->map_max_bytes = (uint64_t)n << 20;
            break;
        case 'L':
            if (!parse_name(optarg, level_names, NAMES_COUNT(level_names), &choice))
                return usage_error("--log-level: expected error, warn, info or debug, got %s", optarg);
            opt->log_level = (net_log_level)choice;
            break;
        case OPT_CONTEXTS:
            if (!cli_parse_u64(optarg, 1, TALLY_CONTEXTS_MAX, &n))
                return usage_error("--contexts: not a count in range: %s", optarg);
            opt->contexts = (unsigned)n;
            break;
        case OPT_DEDUPE:
        case OPT_LOG_RETENTION:
        case OPT_DLQ_RETENTION:
            if (!cli_parse_u64(optarg, 0, RETENTION_S_MAX, &n))
                return usage_error("not a number of seconds in range (0 .. 100 years): %s", optarg);
            *(c == OPT_DEDUPE          ? &opt->inbox_window_ms
              : c == OPT_LOG_RETENTION ? &opt->log_age_ms
                                       : &opt->dlq_age_ms) = (int64_t)n * 1000;
            break;
        case OPT_MAX_CONNECTIONS:
            if (!cli_parse_u64(optarg, 0, TALLY_CONNECTIONS_MAX, &n))
                return usage_error("--max-connections: not a count in range: %s", optarg);
            opt->max_connections = (unsigned)n;
            break;
        case OPT_REPLIES:
            if (!parse_name(optarg, replies_names, NAMES_COUNT(replies_names), &choice))
                return usage_error("--replies: expected writer or completer, got %s", optarg);
            opt->replies = (net_replies)choice;
            break;
        case OPT_HTTP:
            if (strcmp(optarg, "none") != 0 && !net_http_url_valid(optarg))
                return usage_error("--http: http://HOST:PORT, https://HOST:PORT or none, got %s",
                                   optarg);
            opt->http_url = strcmp(optarg, "none") == 0 ? NULL : optarg;
            break;
        case OPT_HTTP_TIMEOUT:
            if (!cli_parse_u64(optarg, 1, TALLY_HTTP_TIMEOUT_S_MAX, &n))
                return usage_error("--http-timeout-s: not a number of seconds in range: %s", optarg);
            opt->http_timeout_s = (unsigned)n;
            break;
        case OPT_HTTP_CONNECTIONS:
        case OPT_HTTP_PER_ADDRESS:
            if (!cli_parse_u64(optarg, 1, TALLY_HTTP_CONNECTIONS_MAX, &n))
                return usage_error("--http-max-connections/--http-max-per-address: not a count "
                                   "in range: %s", optarg);
            *(c == OPT_HTTP_CONNECTIONS ? &opt->http_connections_max : &opt->http_per_address_max) =
                (unsigned)n;
            break;
        case OPT_WEBHOOKS:
            webhooks_free(opt->webhooks);
            if (webhooks_load(optarg, &opt->webhooks, why, sizeof(why)) != TALLY_ok) {
                fprintf(stderr, "tallyd: --webhooks %s\n", why);
                return 1;
            }
            break;
        case OPT_ALERT + NET_ALERT_MAP_USED:
        case OPT_ALERT + NET_ALERT_PENDING:
        case OPT_ALERT + NET_ALERT_OLDEST_UNACKED:
        case OPT_ALERT + NET_ALERT_DEAD_LETTERS:
        case OPT_ALERT + NET_ALERT_IDLE:
            if (!net_health_option(&opt->health, (net_alert_kind)(c - OPT_ALERT), optarg, why,
                                   sizeof(why)))
                return usage_error("%s", why);
            break;
        case OPT_TLS_CERT: tls->files.cert = optarg; break;
        case OPT_TLS_KEY: tls->files.key = optarg; break;
        case OPT_TLS_CA: tls->files.ca = optarg; break;
        case OPT_TLS_CLIENT_AUTH:
            if (!parse_name(optarg, client_auth_names, NAMES_COUNT(client_auth_names), &choice))
                return usage_error("--tls-client-auth: expected required, optional or none, got %s",
                                   optarg);
            tls->client_auth = choice;
            break;
        case OPT_BACKUP_DIR:
            if (optarg[0] != '/')
                return usage_error("--backup-dir: an absolute path, got %s", optarg);
            opt->backup_dir = optarg;
            break;
        case 'h': usage(stdout); return 0;
        case 'V': printf("tallyd %s\n", PACKAGE_VERSION); return 0;
        case OPT_PROTOCOL_REFERENCE: net_protocol_reference(stdout); return 0;
        default: return usage_error("unknown option%s", "");
        }
    }
    if (optind < argc)
        return usage_error("unexpected argument: %s", argv[optind]);
    if (opt->listen_count == 0)
        opt->listen_urls[opt->listen_count++] = TALLYD_LISTEN_DEFAULT;
    uint64_t start_bytes = opt->map_size_bytes ? opt->map_size_bytes : TALLY_MAP_SIZE_BYTES_DEFAULT;
    if (opt->map_max_bytes && opt->map_max_bytes < start_bytes)
        return usage_error("--map-max-mb must be at least the map at start (--map-size-mb)%s", "");
    return -1;
}

/* The first endpoint that speaks TLS (tls+tcp:// or https://), or NULL. */
static const char *first_tls_endpoint(const net_server_options *opt)
{
    for (unsigned i = 0; i < opt->listen_count; i++)
        if (tls_url_is_tls(opt->listen_urls[i]))
            return opt->listen_urls[i];
    if (tls_url_is_tls(opt->publish_url))
        return opt->publish_url;
    return opt->http_url && strncmp(opt->http_url, "https://", 8) == 0 ? opt->http_url : NULL;
}

/* Read the --tls-* files and build the server configuration: -1 when
 * tallyd may go on, else the exit status (2: refused, with the reason). */
static int tls_setup(net_server_options *opt, tls_choice *tls)
{
    char why[TALLY_PATH_BYTES_MAX + 300];
    const char *endpoint = first_tls_endpoint(opt);
    bool any_file = tls->files.cert || tls->files.key || tls->files.ca;
    if (endpoint == NULL && !any_file && tls->client_auth < 0)
        return -1;
    if (endpoint == NULL)
        return usage_error("--tls-* options without a tls+tcp:// or https:// endpoint%s", "");
    if (tls->files.cert == NULL || tls->files.key == NULL)
        return usage_error("%s: a TLS endpoint needs --tls-cert FILE and --tls-key FILE", endpoint);
    if (tls->client_auth < 0)
        tls->client_auth = tls->files.ca ? NNG_TLS_AUTH_MODE_REQUIRED : NNG_TLS_AUTH_MODE_NONE;
    if (tls->client_auth != NNG_TLS_AUTH_MODE_NONE && tls->files.ca == NULL)
        return usage_error("--tls-client-auth %s needs --tls-ca FILE (the CA of the clients' "
                           "certificates)", client_auth_names[tls->client_auth]);
    /* mbedTLS's optional mode lets a bad certificate through as unverified,
     * and NNG 1.5.2 tells a connection only "verified or not", the same for
     * a missing and a bad certificate: optional would let both in. */
    const char *nng_tls = first_tls_endpoint(opt);
    if (tls->client_auth == NNG_TLS_AUTH_MODE_OPTIONAL && strncmp(nng_tls, "tls+", 4) == 0)
        return usage_error("%s: --tls-client-auth optional is for https:// only (NNG cannot tell "
                           "a missing client certificate from a bad one): use required or none",
                           nng_tls);
    if (tls_pem_load(&tls->files, &tls->pem, why, sizeof(why)) != TALLY_ok)
        return usage_error("%s", why);
    opt->tls_pem = &tls->pem;
    opt->tls_files = &tls->files;
    opt->tls_client_auth = (nng_tls_auth_mode)tls->client_auth;
    if (tls_config_server(&tls->pem, opt->tls_client_auth, &opt->tls, why, sizeof(why)) != TALLY_ok)
        return usage_error("%s", why);
    return -1;
}

/* File descriptors beyond the connections: the store, its lock file,
 * listeners, the PUB socket's subscribers, backups, NNG's own. */
#define FDS_BESIDES_CONNECTIONS 256

/* Each connection is a file descriptor: raise the soft limit (up to the
 * hard one) so that --max-connections, not EMFILE, is what refuses. */
static void raise_fd_limit(unsigned max_connections)
{
    struct rlimit rl;
    if (max_connections == 0 || getrlimit(RLIMIT_NOFILE, &rl) != 0)
        return;
    rlim_t want = (rlim_t)max_connections + FDS_BESIDES_CONNECTIONS;
    if (rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur < want) {
        rl.rlim_cur = rl.rlim_max == RLIM_INFINITY || rl.rlim_max > want ? want : rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur < want)
        net_log(NET_LOG_WARN, "the open-files limit (%llu) is below --max-connections + %d: "
                "connections may be refused earlier (raise ulimit -n)",
                (unsigned long long)rl.rlim_cur, FDS_BESIDES_CONNECTIONS);
}

int main(int argc, char **argv)
{
    net_server_options opt = {.data_dir = TALLYD_DATA_DEFAULT,
                              .publish_url = TALLYD_PUBLISH_DEFAULT,
                              .log_level = NET_LOG_INFO,
                              .contexts = TALLY_CONTEXTS_DEFAULT,
                              .inbox_window_ms = LEDGER_INBOX_WINDOW_MS_DEFAULT,
                              .max_connections = TALLY_CONNECTIONS_DEFAULT,
                              .replies = NET_REPLIES_AUTO,
                              .http_url = TALLYD_HTTP_DEFAULT,
                              .version = PACKAGE_VERSION,
                              .http_timeout_s = TALLY_HTTP_TIMEOUT_S_DEFAULT,
                              .http_connections_max = TALLY_HTTP_CONNECTIONS_DEFAULT,
                              .http_per_address_max = TALLY_HTTP_CONNECTIONS_PER_ADDRESS_DEFAULT};
    net_health_config_default(&opt.health);
    tls_choice tls = {.client_auth = -1};
    int rc = parse_options(argc, argv, &opt, &tls);
    if (rc < 0 && opt.webhooks && opt.http_url == NULL)
        rc = usage_error("--webhooks %s needs the HTTP face: not with --http none", "");
    if (rc < 0)
        rc = tls_setup(&opt, &tls);
    if (rc >= 0) {
        webhooks_free(opt.webhooks);
        tls_pem_free(&tls.pem);
        if (opt.tls)
            nng_tls_config_free(opt.tls);
        return rc;
    }
    net_log_set_level(opt.log_level);
    cli_catch_stop_signals(on_signal, false, true);
    struct sigaction hup = {.sa_handler = on_hangup};
    sigemptyset(&hup.sa_mask);
    sigaction(SIGHUP, &hup, NULL);
    opt.reload = &reload_requested;
    raise_fd_limit(opt.max_connections);
    rc = net_server_run(&opt, &stop_requested);
    webhooks_free(opt.webhooks);
    tls_pem_free(&tls.pem); /* the configuration stays: NNG's sockets are never closed */
    return rc;
}
