/*
 * engine.h — tallyd's engine (net/engine/): the server's requests as slots,
 * the write queue, the group-commit writer and the waiter of long-polls.
 * The rooms above it (net/sp/, the transports; net/http/, the HTTP face;
 * net/server/, the wiring) hand it requests and take its replies through
 * the slot_way of each slot; it knows none of them.
 *
 *   slot.c    a slot's life: decode, check, dispatch by the op table,
 *             answer; reads and control ops on the receiving thread
 *   writer.c  the queue, group commit, sweeps, answering committed
 *             groups and handing their events to the publisher (on the
 *             writer, or on the completer with --replies completer)
 *   waiter.c  parked long-polls (log_read, sub_fetch)
 *
 * A slot is one request with its reply state. It belongs to exactly one
 * owner at a time — its transport (OWNER_NNG), the write queue, the
 * writer's group, the completer, or the waiter list — and ownership passes
 * under the server mutex, by the thread that holds it (the writer hands a
 * committed group's slots straight back to their transport), or at the
 * completion hand-over; slot_own asserts each hand-over.
 */
#ifndef TALLY_NET_ENGINE_ENGINE_H
#define TALLY_NET_ENGINE_ENGINE_H

#include "log/log.h"
#include "log/store.h"
#include "net/auth/auth_guard.h"
#include "net/engine/options.h"
#include "net/metrics/health.h"
#include "net/ops/protocol.h"

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
    /* A write from outside NNG (a webhook delivery, net/http/webhooks.c): no
     * ctx, aio or msg; answered by calling this instead of sending
     * (fault non-zero: nothing of it is durable), on the thread that
     * answers, which then holds it as OWNER_NNG. NULL for NNG's slots. */
    void (*outside_answer)(struct slot *s, int fault);
    size_t outside_bytes; /* its request's size, for the group's byte bound */
    /* The transport that received the request, which sends its reply
     * (net/sp/: NNG's REP contexts, or the tcp:// loop). NULL for a write
     * from outside NNG (outside_answer). */
    const struct slot_way *way;
    /* A request of the tcp:// loop (net/sp/sp_loop.c): no ctx or aio; its
     * connection, and the SP trace (hops and id) its reply carries back.
     * NULL for NNG's slots. */
    struct sp_conn *conn;
    uint8_t trace[32];
    uint8_t trace_len;
    /* NNG's slots: the pipe the request came on, when counted there
     * (pipes_request_begin); 0 otherwise. */
    uint32_t pipe_id;
    /* A long-poll the transport counted for its connection (slot_way's
     * long_poll_begin): its answer lets it go. */
    bool long_poll_held;
    /* Parked for its req.min_seq (a read that waits for a position)
     * rather than for the log's head. */
    bool min_seq_wait;
    /* Cluster mode: the position its reply carries as cluster_seq (a
     * write: where it was applied; a read: what the node had applied); 0:
     * none (single-node mode, refusals). */
    uint64_t cluster_seq;
} slot;

/* Requests (msgpack bytes) above the protocol limit but up to this still
 * get request_too_large; above it the connection is dropped before tally
 * sees them (NNG_OPT_RECVMAXSZ, and the loop's frame limit). The SP frame
 * also holds the REQ request id (docs/PROTOCOL.md, "The SP layer"): it is
 * added, so the limit clients read about is the msgpack body's. */
#define RECV_HARD_LIMIT_BYTES (4 * TALLY_REQUEST_BYTES_MAX)
#define SP_REQUEST_ID_BYTES 4
#define SP_FRAME_BYTES_MAX (RECV_HARD_LIMIT_BYTES + SP_REQUEST_ID_BYTES)

/* How a transport answers its slots (net/sp/). */
typedef struct slot_way {
    /* Send reply (NULL: none could be built; logged, nothing sent), then
     * take the slot back for its next request. */
    void (*answer)(slot *s, nng_msg *reply);
    /* Run a control op (slot_send_control) on a thread that may block. */
    void (*control)(slot *s);
    /* A long-poll (wait_ms > 0) is about to wait: true to let it (the
     * transport counts it against its connection, sets long_poll_held and
     * lets it go when it answers), false when the connection holds
     * --max-long-polls-per-connection: it is then answered at once, as if
     * its wait_ms were 0 (tally_long_polls_refused_total). */
    bool (*long_poll_begin)(slot *s);
} slot_way;

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
    slot *slots;                   /* the REP contexts' slots (net/sp/rep.c) */
    unsigned slot_count;
    pthread_mutex_t mu;
    pthread_cond_t writer_cv;
    pthread_cond_t waiter_cv;
    slot *queue_head, *queue_tail; /* under mu */
    unsigned queued;
    /* Under mu (mono clock): the writer's last progress — a dequeue, a
     * commit, or the queue becoming non-empty (work waits from then on);
     * writer_stall_ms reads it. */
    int64_t writer_progress_ms;
    slot *waiters;                 /* under mu */
    bool stopping;
    uint64_t head_seq;   /* last committed seq, under mu */
    int64_t last_now_ms; /* writer only: commit times never go backwards */
    int64_t last_commit_ns;    /* writer only: how long the last durable commit took */
    pthread_rwlock_t store_rw; /* readers vs closing the store at shutdown */
    bool store_closed;
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
    struct net_history *history;  /* the figures of the last hour (net/metrics/figures_history.h) */
    auth_guard *auth;             /* NULL without --auth (net/auth/auth_guard.h) */
    /* A committed group's events, to the PUB socket (net/sp/publisher.c);
     * NULL without --publish. */
    void (*publish)(server *srv, uint64_t from_seq, uint64_t to_seq);
    /* A commit moved the log head to seq (GET /v1/events streams wake:
     * net/http/sse.c); NULL without --http. Set and read under mu (the
     * writer runs when the HTTP face starts), called without it. */
    void (*head_moved)(server *srv, uint64_t seq);
    /* The rooms above, each with its own state (net/server/ makes them). */
    struct sp_room *sp;           /* net/sp/sp.h */
    struct http_room *http;       /* net/http/face.h; NULL without --http */
    /* Cluster mode (docs/CLUSTER.md): the node (net/server/cluster_node.c; NULL
     * in single-node mode) and, under mu, the stream position its store
     * has applied; waiter_cv is broadcast when it moves. */
    struct cluster_node *cluster;
    uint64_t cluster_position;
    uint64_t cluster_stream_last; /* under mu: the stream's last seq as last seen */
    /* Cluster mode: this node stopped taking writes and reads (docs/CLUSTER.md,
     * "Divergence is detected, never served"): its state disagrees with the
     * majority's checkpoint, or the stream contradicts its store. Set once
     * by the applier, never cleared while tallyd runs; read without mu. */
    atomic_bool cluster_diverged;
    char cluster_stop_why[512]; /* why, written before cluster_diverged is set */
    /* Under mu: the last checkpoint this node compared (its position, the
     * nodes whose digest agrees with this node's, the nodes heard). */
    uint64_t cluster_checkpoint_seq;
    unsigned cluster_checkpoint_agreeing, cluster_checkpoint_nodes;
};

/* Under mu: the position reads with min_seq wait for — the cluster
 * position in cluster mode, the log's head seq in single-node mode. */
static inline uint64_t server_position_locked(const server *srv)
{
    return srv->cluster ? srv->cluster_position : srv->head_seq;
}

/* ---- slot.c ---- */
/* Pass s from one owner to the next (asserts it held the slot). */
void slot_own(slot *s, slot_owner from, slot_owner to);
/* Every function that answers or passes on a slot takes the owner the
 * caller holds it as; slot_own asserts it. */
void slot_send_error(slot *s, slot_owner from, int code, const char *detail);
/* A read's reply, from a fresh snapshot. */
void slot_send_read(slot *s, slot_owner from);
/* A read: parked while it waits for its min_seq or its long-poll, else
 * answered. */
void slot_dispatch_read(slot *s, slot_owner from);
/* A write's or subscriber write's reply after its group's commit (fault
 * non-zero when the commit failed). */
void slot_send_written(slot *s, slot_owner from, int fault, int64_t now_ms);
void slot_enqueue_write(slot *s, slot_owner from);
/* A request that arrived (s->msg set, owned as OWNER_NNG): decode, check,
 * dispatch by its op's kind. */
void slot_serve(slot *s);
/* A control op's reply, built and sent on the calling thread. */
void slot_send_control(slot *s);
/* cluster_status's and GET /v1/cluster's reply (cluster mode; ctx the
 * server): this node's name and stream, its applied position, the
 * stream's last seq as last seen, the lag. */
void server_cluster_status(net_out *o, void *ctx);

/* ---- waiter.c ---- */
/* Park s (owned by from) until the head passes s->watermark or wait_ms
 * passes; answered now when the server is stopping. */
void slot_park(slot *s, slot_owner from, int64_t wait_ms);
void *waiter_main(void *arg);

/* ---- writer.c ---- */
int writer_init(server *srv);
/* Under mu: the first queued request if its commands fit commands_left,
 * now owned as OWNER_WRITER; NULL when none fits. */
slot *writer_queue_pop(server *srv, uint32_t commands_left);
/* A committed write's answer (fault non-zero: the group's), or, for a
 * subscriber write that asks to wait (a sub_fetch that found nothing),
 * parked until a commit passes what it saw, its next redelivery (now_ms:
 * the time it was applied at) or its deadline, then run again. */
void writer_send_or_park(server *srv, slot *s, slot_owner from, int fault, int64_t now_ms);
/* Answer every queued request shutting_down (the writer's last act). */
void writer_refuse_queued(server *srv);
/* Cluster mode's apply of one message (net/server/cluster_node.c): the n
 * requests of group, decoded, in one write transaction at now with the
 * sweeps first, as a group of single-node mode (a fault redoes it command
 * by command; a full map grows and the message is applied again);
 * before_commit(txn, ctx) runs last in the same transaction (NULL: none).
 * Each request's outcome is left in its slot's res. TALLY_ok when
 * committed, *before and *after the log heads around it. */
int writer_apply_message(server *srv, int64_t now, slot **group, uint32_t n,
                         int (*before_commit)(store_txn *txn, void *ctx), void *ctx,
                         log_head *before, log_head *after);
/* One message of writer_apply_messages: as writer_apply_message's
 * arguments; before and after are set. */
typedef struct writer_message {
    int64_t now;
    slot **group;
    uint32_t n;
    int (*before_commit)(store_txn *txn, void *ctx);
    void *ctx;
    log_head before, after;
} writer_message;
/* Cluster mode's apply of several messages, in order, in one write
 * transaction and one durable commit: each as writer_apply_message does
 * it (its sweeps at its now, its requests in place, its before_commit),
 * with no redo: the first fault of any (a command's, a full map, the
 * commit's) aborts them all and is returned, nothing of them durable;
 * the caller then applies them one by one with writer_apply_message. A
 * message's effects are those it has applied alone: only the commit is
 * shared. TALLY_ok when committed. */
int writer_apply_messages(server *srv, writer_message *m, uint32_t count);
void *writer_main(void *arg);
/* The completer thread (started only with --replies completer). */
void *completer_main(void *arg);
void completer_stop(server *srv);
/* A commit moved the log head: wake long-polls and parked fetches. */
void advance_head(server *srv, uint64_t seq);
/* How long (ms) the writer has made no progress while writes wait in its
 * queue (0 when none waits); *queued gets the queue's depth (NULL: not
 * wanted). */
uint64_t writer_stall_ms(server *srv, uint64_t *queued);

#endif
