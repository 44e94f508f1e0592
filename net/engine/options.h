/*
 * options.h — what tallyd's engine and its rooms are configured with
 * (net_server_options: tallyd_options.c fills it from the command line
 * and the config file; every room reads its own part).
 */
#ifndef TALLY_NET_ENGINE_OPTIONS_H
#define TALLY_NET_ENGINE_OPTIONS_H

#include "common/logging.h"
#include "net/metrics/health.h"

#include <nng/nng.h>
#include <nng/supplemental/tls/tls.h>

#include <signal.h>
#include <stdbool.h>
#include <stdint.h>

#define NET_LISTEN_URLS_MAX 8

/* Which thread answers a committed group and publishes its events. */
typedef enum net_replies {
    NET_REPLIES_WRITER,    /* the writer, right after the commit */
    NET_REPLIES_COMPLETER, /* a completer thread, while the writer applies the next group */
    NET_REPLIES_AUTO,      /* the completer when requests wait for the writer, else the
                              writer (tallyd's default: docs/BENCHMARKS.md) */
} net_replies;

/* Who serves tcp:// request endpoints (ipc://, ws://, tls+tcp:// are
 * always NNG's). */
typedef enum net_tcp_engine {
    NET_TCP_ENGINE_EPOLL, /* tallyd's own epoll loop (net/sp/sp_loop.c; the default) */
    NET_TCP_ENGINE_NNG,   /* NNG's REP socket, as every other transport */
} net_tcp_engine;

struct server;

/* Cluster mode (docs/CLUSTER.md), reached only through these hooks: tallyd
 * sets them when it is built with the NATS client (net/server/cluster_node.c);
 * the engine stays the same in single-node mode, where they are NULL. */
typedef struct net_cluster_hooks {
    /* Before the store opens: connect, create or check the stream, read
     * the genesis (its store identity in *instance_id, has_instance true).
     * TALLY_ok, or a refusal (logged, naming the setting). */
    int (*connect)(struct server *srv, uint8_t instance_id[16], bool *has_instance);
    /* After the store opened: check it against the stream (the genesis,
     * the recorded position), publish the genesis on an empty stream, set
     * srv->cluster_position. TALLY_ok or a refusal (logged). */
    int (*start)(struct server *srv);
    void *(*writer_main)(void *srv);  /* the writer thread in cluster mode */
    void *(*applier_main)(void *srv); /* the applier thread */
    /* tallyd stopping, its writer or applier still waiting on NATS (a
     * PubAck, a JetStream request: up to their wait) past the stop's
     * grace: every such wait ends now (the connection closed), so both
     * threads end; a group in flight is answered cluster_unavailable. */
    void (*interrupt)(struct server *srv);
    void (*close)(struct server *srv);
} net_cluster_hooks;

typedef struct net_server_options {
    const char *data_dir;
    const char *listen_urls[NET_LISTEN_URLS_MAX];
    unsigned listen_count;
    const char *publish_url;   /* NULL or "" = no PUB socket */
    uint64_t map_size_bytes;   /* the map at start; 0 = TALLY_MAP_SIZE_BYTES_DEFAULT */
    uint64_t map_max_bytes;    /* the map grows up to this; 0 = as large as the filesystem,
                                  at most TALLY_MAP_MAX_BYTES_DEFAULT */
    bool skip_open_check;      /* --skip-open-check: open a store without its structural
                                  check (recovery work; warned) */
    bool upgrade;              /* --upgrade: mark a store of an older format as current */
    net_log_level log_level;
    unsigned contexts;         /* REP contexts in flight */
    int64_t inbox_window_ms;   /* inbox retention; 0 = keep every record */
    int64_t log_age_ms;        /* log retention; 0 = keep every event */
    int64_t dlq_age_ms;        /* dead-letter retention; 0 = keep every dead letter */
    const char *backup_dir;    /* NULL: backups anywhere; else only below it */
    unsigned max_connections;  /* request connections at once; 0 = no limit */
    unsigned connections_per_address_max; /* from one address (not ipc://); 0 = no limit */
    unsigned connections_reserved_pct;    /* of max_connections, for addresses with few */
    unsigned request_timeout_s;           /* a request (and the SP header) arrives whole */
    unsigned request_min_kib_per_s;       /* ... plus its size at this rate */
    unsigned idle_timeout_s;              /* nothing in flight, or replies unread: closed */
    unsigned unread_reply_kib_max;        /* replies unread: the connection is not read */
    unsigned in_flight_per_connection_max;
    unsigned long_polls_per_connection_max;
    net_replies replies;       /* who answers committed groups */
    net_tcp_engine tcp_engine; /* who serves tcp:// --listen URLs */
    unsigned writer_spin_us;   /* an idle writer watches its queue this long before it sleeps */
    const char *http_url;      /* NULL: no HTTP face; else http://HOST:PORT */
    const char *console_dir;   /* the web console's files (/console); NULL: none */
    unsigned http_timeout_s;   /* idle or slow HTTP connections closed after this */
    unsigned http_connections_max, http_per_address_max;
    net_health_config health;  /* readiness and alert thresholds */
    /* For tests only (--test-writer-hold-file): while this file exists
     * the writer takes no work (a hung writer, on demand); NULL: never. */
    const char *writer_hold_file;
    unsigned http_reserved_max;        /* more places, for /metrics, /healthz, /readyz only */
    unsigned http_webhooks_in_flight;  /* webhook deliveries waiting for the writer; more: 503 */
    unsigned http_stream_heartbeat_ms; /* GET /v1/events: a keepalive comment while idle */
    unsigned http_stream_life_s;       /* a stream ends after this (the client resumes) */
    unsigned http_stream_buffer_bytes; /* rendered, unsent bytes per stream; more: it ends */
    struct net_webhooks *webhooks; /* --webhooks: the sources (net/http/webhooks.h); NULL: none */
    const char *version;       /* tally_build_info's label */
    /* NULL, or a file written once every listener is up, before READY=1:
     * a line per endpoint, "listen URL" (each --listen, in order), "publish
     * URL", "http URL", each URL as bound (a port 0 given is the kernel's
     * choice); written whole (a temporary file, then a rename), removed at
     * a clean stop. */
    const char *ready_file;
    unsigned listener_probe_ms; /* the listener watchdog probes this often */
    /* NULL, or told the server's state for a service manager (tallyd:
     * sd_notify): "READY=1" once the store is open and every listener
     * (request/reply, PUB, HTTP) is up, "STOPPING=1" when the stop begins.
     * A reload (SIGHUP) says "RELOADING=1" before it and "READY=1" after. */
    void (*notify)(const char *state);
    /* --auth (docs/SECURITY.md): the principals at start (owned by the
     * server from net_server_run on; NULL: no auth, loopback only), the
     * file reloaded when *reload becomes non-zero (SIGHUP). */
    struct auth_table *auth;
    const char *auth_file;
    /* TLS (docs/SECURITY.md): the server configuration of every tls+tcp://
     * --listen and --publish URL, and the PEM text an https:// --http
     * serves; NULL when none is given. tallyd.c builds both (common/tls_config.h). */
    nng_tls_config *tls;
    const struct tls_pem *tls_pem;
    nng_tls_auth_mode tls_client_auth;
    const struct tls_files *tls_files; /* the --tls-* paths, read again at *reload */
    /* Set (from a SIGHUP handler) to read the --tls-* files again: new
     * tls+tcp:// connections get the new certificates, open ones keep
     * theirs, a file that fails keeps the old ones (logged); the HTTPS face
     * keeps its certificate until a restart. NULL: never. */
    volatile sig_atomic_t *reload;
    /* Cluster mode (docs/CLUSTER.md): cluster_urls NULL is single-node
     * mode. The URLs comma-separated, this node's name, the stream, the
     * replicas a created stream gets (fewer are refused), how long a read
     * with min_seq waits (single-node mode too: for the log's head). */
    const char *cluster_urls;
    const char *cluster_node;
    const char *cluster_stream;
    unsigned cluster_replicas;
    unsigned cluster_read_wait_ms;
    unsigned cluster_tick_ms;  /* an idle node appends a tick this often; 0: never */
    unsigned cluster_checkpoint_every; /* positions between checkpoints; 0: none */
    /* The NATS connection's credentials and TLS (NULL: none), files read
     * when the node connects; the secret ones must be private (mode 0600). */
    const char *cluster_creds;         /* a NATS credentials file */
    const char *cluster_user;          /* with cluster_password_file */
    const char *cluster_password_file; /* one line: the user's password */
    const char *cluster_tls_ca, *cluster_tls_cert, *cluster_tls_key;
    unsigned test_cluster_diverge_at;  /* tests: leave a request out at this position */
    unsigned test_cluster_shift_at;    /* tests: read the stream one short from here on */
    unsigned test_cluster_stale_copy_at; /* tests: the consumer delivers a stale copy here */
    bool cluster_init; /* this store, on an empty stream, the base of a new cluster */
    const net_cluster_hooks *cluster; /* NULL: built without cluster mode */
} net_server_options;


#endif
