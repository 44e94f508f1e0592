/*
 * server_internal.h — what the rooms of tallyd's engine share (internal
 * to net/): the server, its slots, and each room's entry points.
 *
 *   slot.c       a slot's life: receive, decode, dispatch by the op table,
 *                reply; reads and control ops on the NNG callback thread
 *   writer.c     the queue, group commit, sweeps, answering committed
 *                groups and handing their events to the publisher (on the
 *                writer, or on the completer with --replies completer)
 *   waiter.c     parked long-polls (log_read, sub_fetch)
 *   publisher.c  the PUB socket and its subscriber count
 *   pipes.c      request connections: accounting and --max-connections,
 *                and the log of refused TLS handshakes
 *   http_routes.c the HTTP face's routes (/metrics, /healthz, /readyz) and
 *                the health checks' evaluation once a second
 *   http_json.c  the JSON API (/v1/...): JSON requests sent to the REP
 *                socket over inproc, replies back as JSON
 *   nng_compat.c the NNG 1.5.2 workarounds (listener watchdog, stale pipes)
 *   tls_reload.c SIGHUP: the --tls-* files read again for tls+tcp://
 *   sp_loop.c    tcp:// requests on tallyd's own epoll loop (--tcp-engine
 *                epoll): its slots are answered by sp_loop_answer
 *   server.c     wiring, start and stop
 *
 * A slot is one REP context with its request and reply state. It belongs
 * to exactly one owner at a time — the NNG callback, the write queue, the
 * writer's group, the completer, or the waiter list — and ownership passes
 * under the server mutex, by the thread that holds it (the writer hands a
 * committed group's slots straight back to NNG), or at the completion
 * hand-over; slot_own asserts each hand-over.
 */
#ifndef TALLY_NET_SERVER_INTERNAL_H
#define TALLY_NET_SERVER_INTERNAL_H

#include "common/table.h"
#include "net/auth_guard.h"
#include "log/store.h"
#include "net/health.h"
#include "net/http.h"
#include "net/listener_probe.h"
#include "net/protocol.h"
#include "net/ready_file.h"
#include "net/server.h"

#include <nng/nng.h>
#include <pthread.h>
#include <stdatomic.h>

typedef enum slot_state { SLOT_RECV, SLOT_BUSY, SLOT_SEND } slot_state;

/* Who holds a slot (asserted at every hand-over). */
typedef enum slot_owner {
    OWNER_NNG,       /* receiving, sending, or in the NNG callback */
    OWNER_QUEUE,     /* in the write queue */
    OWNER_WRITER,    /* in the group being applied */
    OWNER_COMPLETER, /* in the group being answered by the completer */
    OWNER_WAITER,    /* parked in the waiter list */
} slot_owner;

typedef struct server server;

typedef struct slot {
    server *srv;
    nng_ctx ctx;
    nng_aio *aio;
    slot_state state;
    _Atomic int owner;   /* slot_owner */
    nng_msg *msg;        /* the request being served; req borrows from it */
    int64_t deadline_ms; /* parked: when the wait ends (mono clock) */
    int64_t until_ms;    /* a long-poll answers empty no sooner (mono clock) */
    uint64_t watermark;  /* parked: ready once the head passes it */
    struct slot *next;   /* queue or waiter list */
    net_request req;
    net_result res;
    int64_t arrived_ns;  /* mono clock: when the request arrived */
    int timed_kind;      /* net_request_kind observed when its reply leaves; -1: none */
    /* A write from outside NNG (a webhook delivery, net/webhooks.c): no
     * ctx, aio or msg; answered by calling this instead of sending
     * (fault non-zero: nothing of it is durable), on the thread that
     * answers, which then holds it as OWNER_NNG. NULL for NNG's slots. */
    void (*outside_answer)(struct slot *s, int fault);
    size_t outside_bytes; /* its request's size, for the group's byte bound */
    /* A request of the tcp:// loop (net/sp_loop.c): no ctx or aio; its
     * connection, and the SP trace (hops and id) its reply carries back.
     * NULL for NNG's slots. */
    struct sp_conn *conn;
    uint8_t trace[32];
    uint8_t trace_len;
} slot;

/* Requests (msgpack bytes) above the protocol limit but up to this still
 * get request_too_large; above it the connection is dropped before tally
 * sees them (NNG_OPT_RECVMAXSZ, and the loop's frame limit). The SP frame
 * also holds the REQ request id (docs/PROTOCOL.md, "The SP layer"): it is
 * added, so the limit clients read about is the msgpack body's. */
#define RECV_HARD_LIMIT_BYTES (4 * TALLY_REQUEST_BYTES_MAX)
#define SP_REQUEST_ID_BYTES 4
#define SP_FRAME_BYTES_MAX (RECV_HARD_LIMIT_BYTES + SP_REQUEST_ID_BYTES)

/* The listener watchdog's state (nng_compat.c). The main thread owns
 * it, except listener ids and accepted counts, which pipe callbacks read. */
typedef struct listeners {
    nng_listener l[NET_LISTEN_URLS_MAX];
    unsigned count;
    unsigned stopped[NET_LISTEN_URLS_MAX]; /* probes in a row that found it not accepting */
    bool down[NET_LISTEN_URLS_MAX];        /* closed, not yet back */
    bool ours[NET_LISTEN_URLS_MAX];        /* served by the tcp:// loop, not NNG */
    atomic_uint ids[NET_LISTEN_URLS_MAX];
    atomic_uint accepted[NET_LISTEN_URLS_MAX]; /* connections handed over (ADD_PRE) */
    int64_t tls_refused[NET_LISTEN_URLS_MAX]; /* TLS handshakes refused, as last logged */
    /* Each --listen URL as bound: port 0 replaced by the kernel's choice
     * (set at start, then read-only). The watchdog listens on it again, so
     * a re-created listener keeps the port its clients know; logs, the
     * ready file and the probe name it. */
    char url[NET_LISTEN_URLS_MAX][NET_URL_BYTES_MAX];
} listeners;

/* One committed group, to be answered (by the writer or the completer). */
typedef struct completion {
    slot **group;
    uint32_t count;
    int rc;             /* the commit's result: every request of the group gets it */
    int64_t now_ms;
    uint64_t from_seq, to_seq; /* events to publish; from > to: none */
} completion;

struct server {
    const net_server_options *opt;
    store *st;
    nng_socket rep;
    nng_socket pub;
    bool has_pub;
    listeners lis;
    nng_listener pub_listener; /* when has_pub; main thread */
    atomic_uint pub_accepted;  /* PUB connections handed to the socket (ADD_PRE), for the probe */
    unsigned pub_stopped;      /* probes in a row that found pub_listener not accepting */
    bool pub_down;             /* pub_listener closed by the watchdog, not yet back */
    char pub_url[NET_URL_BYTES_MAX];  /* --publish as bound (as lis.url); "" without PUB */
    char http_url[NET_URL_BYTES_MAX]; /* --http as bound; "" without the HTTP face */
    nng_tls_config *tls;       /* the live TLS configuration of tls+tcp:// listeners
                                  (opt->tls, then each reload's); main thread */
    nng_tls_config **tls_held; /* the ones a reload replaced, held until exit */
    unsigned tls_held_count;   /* (tls_reload.c); main thread */
    slot *slots;
    unsigned slot_count;
    pthread_mutex_t mu;
    pthread_cond_t writer_cv;
    pthread_cond_t waiter_cv;
    slot *queue_head, *queue_tail; /* under mu */
    unsigned queued;
    slot *waiters;                 /* under mu */
    bool stopping;
    uint64_t head_seq;   /* last committed seq, under mu */
    int64_t last_now_ms; /* writer only: commit times never go backwards */
    int64_t last_commit_ns;    /* writer only: how long the last durable commit took */
    pthread_rwlock_t store_rw; /* readers vs closing the store at shutdown */
    bool store_closed;
    atomic_int sends_in_flight;
    pthread_mutex_t pipes_mu;
    table *pipes;                 /* accepted request connections, by pipe id */
    uint64_t connections_refused; /* under pipes_mu */
    int64_t pipes_pruned_ms;      /* under pipes_mu: the last stale-pipe pass */
    struct sockaddr_storage probe_self; /* under pipes_mu: the watchdog's probe's own end */
    socklen_t probe_self_len;           /* under pipes_mu: 0 while no probe is under way */
    table *pub_pipes;             /* connected subscribers (PUB pipes), by pipe id */
    bool pub_pipes_unknown;       /* under pipes_mu: one could not be recorded */
    atomic_uint_fast64_t commits, commands;
    atomic_uint_fast64_t enqueued; /* writes queued so far (the idle writer watches it) */
    /* With --replies completer the writer hands each committed group to
     * the completer thread, which answers it and publishes its events
     * while the writer applies the next group; one completion at a time
     * (busy until done). Unused otherwise. */
    pthread_mutex_t completion_mu;
    pthread_cond_t completion_cv; /* handed, done, or stop */
    completion done;
    bool completion_busy;
    bool completer_stop;
    slot **groups[2];             /* the writer's two group arrays */
    net_health *health;           /* the checks and their alerts */
    net_http *http;               /* NULL without --http */
    struct http_json *http_json;  /* the JSON API's requests (http_json.c) */
    atomic_uint webhooks_in_flight; /* outside slots out (net/webhooks.c) */
    auth_guard *auth;             /* NULL without --auth (net/auth_guard.h) */
    struct sp_loop *loop;         /* the tcp:// loop; NULL with --tcp-engine nng */
};

/* ---- slot.c ---- */
/* Pass s from one owner to the next (asserts it held the slot). */
void slot_own(slot *s, slot_owner from, slot_owner to);
/* The request size limit: set before any listener exists (listeners of
 * newer NNG copy the socket's options when they are made). */
int slots_limit_requests(server *srv);
/* The slots, receiving only once slots_start runs (after the threads
 * that answer them have started). */
int slots_open(server *srv);
void slots_start(server *srv);
/* Every function that answers or passes on a slot takes the owner the
 * caller holds it as; slot_own asserts it. */
void slot_send_error(slot *s, slot_owner from, int code, const char *detail);
/* A read's reply, from a fresh snapshot. */
void slot_send_read(slot *s, slot_owner from);
/* A write's or subscriber write's reply after its group's commit (fault
 * non-zero when the commit failed). */
void slot_send_written(slot *s, slot_owner from, int fault, int64_t now_ms);
void slot_enqueue_write(slot *s, slot_owner from);
/* A request that arrived (s->msg set, owned as OWNER_NNG): decode, check,
 * dispatch by its op's kind. */
void slot_serve(slot *s);
/* A control op's reply, built and sent on the calling thread. */
void slot_send_control(slot *s);

/* ---- webhooks.c ---- */
/* POST /webhooks/<source> (a route of http_routes.c: a starter, answered
 * after the commit); /metrics' lines. */
bool webhooks_start(void *ctx, const net_http_request *rq, net_http_reply *out,
                    net_http_pending *p);
void webhooks_metrics(server *srv, net_text *out);

/* ---- waiter.c ---- */
/* Park s (owned by from) until the head passes s->watermark or wait_ms
 * passes; answered now when the server is stopping. */
void slot_park(slot *s, slot_owner from, int64_t wait_ms);
void *waiter_main(void *arg);

/* ---- writer.c ---- */
int writer_init(server *srv);
void *writer_main(void *arg);
/* The completer thread (started only with --replies completer). */
void *completer_main(void *arg);
void completer_stop(server *srv);
/* A commit moved the log head: wake long-polls and parked fetches. */
void advance_head(server *srv, uint64_t seq);

/* ---- publisher.c ---- */
int publisher_open(server *srv);
void publish_events(server *srv, uint64_t from_seq, uint64_t to_seq);

/* ---- pipes.c ---- */
int pipes_watch(server *srv);
/* Count a new request connection (an NNG pipe id, or one of the loop's
 * with the high bit), unless --max-connections are open (logged): false,
 * and the caller closes it. pipes_forget: it has gone. */
bool pipes_admit(server *srv, uint32_t id);
void pipes_forget(server *srv, uint32_t id);

/* ---- http_routes.c ---- */
/* Serve --http (when not none). 0 or an NNG-style non-zero on failure (logged). */
int http_routes_start(server *srv);
void http_routes_stop(server *srv);
/* Run the health checks (logging alerts that start or clear); the main
 * thread calls it every HEALTH_TICK_MS while serving. */
void health_tick(server *srv);
#define HEALTH_TICK_MS 1000

/* ---- http_json.c ---- */
/* The JSON API's way in: an inproc REQ socket to the REP socket. */
int http_json_open(server *srv);
/* The /v1/ route (net_http_starter). */
bool http_json_start(void *ctx, const net_http_request *rq, net_http_reply *out,
                     net_http_pending *p);
/* Before the listener stops: true when nothing is in flight any more. */
bool http_json_stop(server *srv);

/* ---- nng_compat.c ---- */
int listeners_open(server *srv);
/* url with the port listener l is bound to (a tcp:// or tls+tcp:// port 0
 * is the kernel's choice), into out; url itself for ipc://. 0, or
 * NNG_EINVAL when it does not fit (logged). */
int listener_bound_url(nng_listener l, const char *url, char out[NET_URL_BYTES_MAX]);
/* A pipe callback's ADD_PRE: count it for its listener's probe. */
void listeners_note_accept(server *srv, nng_pipe p);
/* A pipe callback's ADD_PRE: whether p is the watchdog's own probe (it
 * takes no client's place under --max-connections and is not counted). */
bool listeners_pipe_is_probe(server *srv, nng_pipe p);
/* Main thread, every --listener-probe-ms while serving. */
void listeners_watch(server *srv, volatile sig_atomic_t *stop);
/* Log the TLS handshakes each tls+tcp:// listener refused since the last
 * call (a warn line per listener and call at most: pipes.c). */
void listeners_log_tls_refusals(server *srv);
/* Read the --tls-* files again and give the tls+tcp:// listeners the new
 * configuration (tls_reload.c); main thread. */
void tls_reload(server *srv);
void listeners_close(server *srv);
/* At the connection limit: places of connections NNG no longer knows
 * taken back (under pipes_mu). Returns how many. */
size_t pipes_prune_stale(server *srv);

#endif
