/*
 * server.c — tallyd's engine (see server.h): REP contexts, the group-commit
 * writer, long-poll waiters, the publisher, and a clean shutdown.
 *
 * A slot is one REP context with its request and reply state. It belongs
 * to exactly one thread at a time: the NNG callback (receive, decode,
 * reads), the writer (queued writes), or the waiter thread (parked
 * long-polls); ownership passes through the server mutex.
 */
#include "net/server.h"

#include "common/error.h"
#include "common/limits.h"
#include "ledger/ledger.h"
#include "log/log.h"
#include "net/listener_probe.h"
#include "net/protocol.h"
#include "net/reply.h"
#include "net/subscription.h"
#include "common/table.h"
#include "common/msgpack_safe.h"
#include "ledger/retention.h"

#include <nng/nng.h>
#include <nng/protocol/pubsub0/pub.h>
#include <nng/protocol/reqrep0/rep.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* Messages above the protocol limit but below this still get an error
 * reply; above it NNG drops the connection before tally sees them. */
#define RECV_HARD_LIMIT_BYTES (4 * TALLY_REQUEST_BYTES_MAX)
#define IDLE_SWEEP_MS 1000
#define SHUTDOWN_SEND_WAIT_MS 3000
#define RETENTION_INTERVAL_MS 1000

typedef enum slot_state { SLOT_RECV, SLOT_BUSY, SLOT_SEND } slot_state;

typedef struct server server;

typedef struct slot {
    server *srv;
    nng_ctx ctx;
    nng_aio *aio;
    slot_state state;
    nng_msg *msg;        /* the request being served; req borrows from it */
    int64_t deadline_ms; /* parked long-poll */
    struct slot *next;   /* queue or waiter list */
    uint64_t watermark;  /* parked sub_fetch: ready once head passes it */
    int64_t fetch_until_ms; /* sub_fetch: answers empty no sooner (mono clock) */
    net_request req;
    ledger_outcome outcomes[TALLY_BATCH_OPS_MAX];
    int faults[TALLY_BATCH_OPS_MAX];
    net_sub_result sub; /* subscriber writes */
} slot;

struct server {
    const net_server_options *opt;
    store *st;
    nng_socket rep;
    nng_socket pub;
    bool has_pub;
    nng_listener listeners[NET_LISTEN_URLS_MAX];
    unsigned listener_count;
    /* main thread only: listener_stopped[i] probes in a row that found
     * listener i not accepting; listener_down[i]: closed, not yet back */
    unsigned listener_stopped[NET_LISTEN_URLS_MAX];
    bool listener_down[NET_LISTEN_URLS_MAX];
    /* set by the main thread, read by pipe_event: listener i's id, and the
     * connections it handed to the socket (ADD_PRE) */
    atomic_uint listener_ids[NET_LISTEN_URLS_MAX];
    atomic_uint listener_accepted[NET_LISTEN_URLS_MAX];
    slot *slots;
    unsigned slot_count;
    pthread_mutex_t mu;
    pthread_cond_t writer_cv;
    pthread_cond_t waiter_cv;
    slot *queue_head, *queue_tail;
    unsigned queued;
    slot *waiters;
    bool stopping;
    uint64_t head_seq;   /* last committed seq, under mu */
    int64_t last_now_ms; /* writer only: commit times never go backwards */
    int64_t last_retention_ms; /* writer only: when retention last ran */
    pthread_rwlock_t store_rw; /* readers vs closing the store at shutdown */
    bool store_closed;
    atomic_int sends_in_flight;
    pthread_mutex_t pipes_mu;
    table *pipes;                 /* accepted request connections, by pipe id */
    uint64_t connections_refused; /* under pipes_mu */
    int64_t pipes_pruned_ms;      /* under pipes_mu: the last stale-pipe pass */
    table *pub_pipes;             /* connected subscribers (PUB pipes), by pipe id */
    bool pub_pipes_unknown;       /* under pipes_mu: one could not be recorded */
    atomic_uint_fast64_t commits, commands;
    /* The writer hands each committed group to the completer thread, which
     * answers it and publishes its events while the writer applies the
     * next group; one completion at a time (busy until done). */
    pthread_mutex_t completion_mu;
    pthread_cond_t completion_cv; /* handed, done, or stop */
    struct completion {
        slot **group;
        uint32_t count;
        int rc;             /* the commit's result: every request of the group gets it */
        int64_t now_ms;
        uint64_t from_seq, to_seq; /* events to publish; from > to: none */
    } completion;
    bool completion_busy;
    bool completer_stop;
};

/* ---- logging ---- */

static net_log_level log_level = NET_LOG_INFO;

void net_log_set_level(net_log_level level) { log_level = level; }

void net_log(net_log_level level, const char *fmt, ...)
{
    static const char *names[] = {"error", "warn", "info", "debug"};
    if (level > log_level)
        return;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    struct tm tm;
    gmtime_r(&ts.tv_sec, &tm);
    char when[32];
    strftime(when, sizeof(when), "%Y-%m-%dT%H:%M:%S", &tm);
    char line[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof(line), fmt, ap);
    va_end(ap);
    fprintf(stderr, "%s.%03ldZ tallyd %s: %s\n", when, ts.tv_nsec / 1000000, names[level], line);
}

static int64_t wall_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int64_t mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* ---- replies ---- */

/* Packer target: append to the reply, growing its capacity geometrically
 * (NNG 1.5 reallocates and copies the whole message on every append that
 * does not fit, which made large replies quadratic). */
static int msg_write(void *data, const char *buf, size_t len)
{
    nng_msg *m = data;
    size_t need = nng_msg_len(m) + len;
    if (need > TALLY_REPLY_BYTES_MAX)
        return -1;
    size_t cap = nng_msg_capacity(m);
    if (need > cap) {
        size_t grow = cap * 2 > need ? cap * 2 : need;
        if (nng_msg_reserve(m, grow < TALLY_REPLY_BYTES_MAX ? grow : TALLY_REPLY_BYTES_MAX) != 0)
            return -1;
    }
    return nng_msg_append(m, buf, len) == 0 ? 0 : -1;
}

/* A fresh reply message and a packer writing into it. */
/* noinline: tests/lsan.supp names this frame (a message NNG loses) */
__attribute__((noinline)) static nng_msg *reply_begin(msgpack_packer *pk)
{
    nng_msg *m;
    if (nng_msg_alloc(&m, 0) != 0)
        return NULL;
    if (nng_msg_reserve(m, 256) != 0) {
        nng_msg_free(m);
        return NULL;
    }
    msgpack_packer_init(pk, m, msg_write);
    return m;
}

static void slot_recv(slot *s)
{
    s->state = SLOT_RECV;
    nng_ctx_recv(s->ctx, s->aio);
}

/* Send reply (or, if it could not be built, an internal error) and free
 * the request message the decoded request borrowed from. */
static void slot_send(slot *s, nng_msg *reply)
{
    net_request_reset(&s->req);
    if (s->msg) {
        nng_msg_free(s->msg);
        s->msg = NULL;
    }
    if (reply == NULL) {
        net_log(NET_LOG_ERROR, "could not build a reply; the request gets none");
        slot_recv(s);
        return;
    }
    s->state = SLOT_SEND;
    atomic_fetch_add(&s->srv->sends_in_flight, 1);
    nng_aio_set_msg(s->aio, reply);
    nng_ctx_send(s->ctx, s->aio);
}

static void slot_send_error(slot *s, int code, const char *detail)
{
    msgpack_packer pk;
    nng_msg *m = reply_begin(&pk);
    if (m && net_reply_error(&pk, code, detail) != 0) {
        nng_msg_free(m);
        m = NULL;
    }
    slot_send(s, m);
}

/* A reply built in a read-only transaction: a read, or a subscriber write
 * after its group's commit (fault set when the commit failed). */
static void slot_send_snapshot(slot *s, int fault)
{
    server *srv = s->srv;
    store_txn t;
    pthread_rwlock_rdlock(&srv->store_rw);
    int rc = srv->store_closed ? TALLY_shutting_down : store_txn_begin(srv->st, NULL, true, &t);
    if (rc != TALLY_ok) {
        pthread_rwlock_unlock(&srv->store_rw);
        slot_send_error(s, rc, rc == TALLY_shutting_down ? "server is stopping, retry later"
                                                         : "cannot begin a read transaction");
        return;
    }
    msgpack_packer pk;
    nng_msg *m = reply_begin(&pk);
    int64_t now = wall_ms();
    if (m && (s->req.op->control ? net_reply_sub_write(&pk, &t, &s->req, &s->sub, fault, now)
                                 : net_reply_read(&pk, &t, &s->req, now)) != 0) {
        nng_msg_free(m);
        m = NULL;
    }
    store_txn_abort(&t);
    pthread_rwlock_unlock(&srv->store_rw);
    if (m == NULL) {
        slot_send_error(s, TALLY_internal, "reply too large or read failed");
        return;
    }
    slot_send(s, m);
}

static void slot_send_read(slot *s) { slot_send_snapshot(s, TALLY_ok); }

/* backup: the copy runs here, on an NNG thread, in LMDB's own read
 * transaction; the writer goes on. */
static void slot_send_backup(slot *s)
{
    server *srv = s->srv;
    char path[TALLY_PATH_BYTES_MAX];
    tally_str p = s->req.read.path;
    if (p.len == 0 || p.len >= sizeof(path) || memchr(p.ptr, '\0', p.len)) {
        slot_send_error(s, TALLY_backup_destination_invalid, "an absolute directory path");
        return;
    }
    memcpy(path, p.ptr, p.len);
    path[p.len] = '\0';
    uint64_t bytes = 0;
    pthread_rwlock_rdlock(&srv->store_rw);
    int rc = srv->store_closed ? TALLY_shutting_down
                               : store_backup(srv->st, path, srv->opt->backup_dir, &bytes);
    pthread_rwlock_unlock(&srv->store_rw);
    if (rc != TALLY_ok) {
        static const char *const why[] = {"the destination exists; backups go to a new directory",
                                          "the destination must be an absolute path whose parent "
                                          "exists (below --backup-dir when tallyd has one)"};
        slot_send_error(s, rc, rc == TALLY_backup_destination_exists     ? why[0]
                               : rc == TALLY_backup_destination_invalid ? why[1]
                                                                        : "backup failed");
        return;
    }
    net_log(NET_LOG_INFO, "backup written to %s (%llu bytes)", path, (unsigned long long)bytes);
    msgpack_packer pk;
    nng_msg *m = reply_begin(&pk);
    if (m && (net_reply_head(&pk, 4, TALLY_ok) || msgpack_safe_pack_cstr(&pk, "path") ||
              msgpack_safe_pack_cstr(&pk, path) || msgpack_safe_pack_cstr(&pk, "bytes") ||
              msgpack_pack_uint64(&pk, bytes))) {
        nng_msg_free(m);
        m = NULL;
    }
    slot_send(s, m);
}
static void slot_send_sub(slot *s, int fault) { slot_send_snapshot(s, fault); }

static void slot_send_write(slot *s)
{
    msgpack_packer pk;
    nng_msg *m = reply_begin(&pk);
    if (m && net_reply_write(&pk, &s->req, s->outcomes, s->faults) != 0) {
        nng_msg_free(m);
        m = NULL;
    }
    slot_send(s, m);
}

/* ---- request handling (NNG callback thread) ---- */

static bool log_read_would_wait(server *srv, const net_request *req)
{
    if (req->op->id != NET_OP_LOG_READ || req->read.wait_ms == 0)
        return false;
    pthread_mutex_lock(&srv->mu);
    bool nothing_yet = !srv->stopping &&
                       srv->head_seq < (req->read.from_seq ? req->read.from_seq : 1);
    pthread_mutex_unlock(&srv->mu);
    return nothing_yet;
}

static void slot_enqueue_write(slot *s);

/* Hand s to the waiter thread for up to wait_ms; answered now instead when
 * the server began stopping since the caller looked (the waiter may have
 * exited, and a slot parked then would never be answered). */
static void slot_park(slot *s, int64_t wait_ms)
{
    server *srv = s->srv;
    s->deadline_ms = mono_ms() + wait_ms;
    pthread_mutex_lock(&srv->mu);
    bool stopping = srv->stopping;
    if (!stopping) {
        s->next = srv->waiters;
        srv->waiters = s;
        pthread_cond_signal(&srv->waiter_cv);
    }
    pthread_mutex_unlock(&srv->mu);
    if (stopping && s->req.op->id == NET_OP_SUB_FETCH)
        slot_send_sub(s, TALLY_ok);
    else if (stopping)
        slot_send_read(s);
}

static void slot_enqueue_write(slot *s)
{
    server *srv = s->srv;
    pthread_mutex_lock(&srv->mu);
    int refuse = srv->stopping                              ? TALLY_shutting_down
                 : srv->queued >= TALLY_QUEUE_REQUESTS_MAX ? TALLY_overloaded
                                                           : TALLY_ok;
    if (refuse == TALLY_ok) {
        s->next = NULL;
        if (srv->queue_tail)
            srv->queue_tail->next = s;
        else
            srv->queue_head = s;
        srv->queue_tail = s;
        srv->queued++;
        pthread_cond_signal(&srv->writer_cv);
    }
    pthread_mutex_unlock(&srv->mu);
    if (refuse != TALLY_ok)
        slot_send_error(s, refuse, refuse == TALLY_overloaded ? "write queue full, retry later"
                                                              : "server is stopping, retry later");
}

static void slot_handle(slot *s)
{
    s->state = SLOT_BUSY;
    size_t len = nng_msg_len(s->msg);
    if (len > TALLY_REQUEST_BYTES_MAX) {
        slot_send_error(s, TALLY_request_too_large, "requests are at most 512 KiB");
        return;
    }
    int rc = net_request_decode(&s->req, nng_msg_body(s->msg), len);
    if (rc != TALLY_ok) {
        net_log(NET_LOG_DEBUG, "refused request: %s (%s)", tally_strerror(rc), s->req.error_detail);
        slot_send_error(s, rc, s->req.error_detail);
        return;
    }
    if (s->req.op->id == NET_OP_SUB_FETCH)
        s->fetch_until_ms = mono_ms() + s->req.sub.wait_ms;
    if (s->req.op->write || s->req.op->control)
        slot_enqueue_write(s);
    else if (s->req.op->id == NET_OP_BACKUP)
        slot_send_backup(s);
    else if (log_read_would_wait(s->srv, &s->req))
        slot_park(s, s->req.read.wait_ms);
    else
        slot_send_read(s);
}

static void slot_callback(void *arg)
{
    slot *s = arg;
    int rv = nng_aio_result(s->aio);
    if (s->state == SLOT_SEND) {
        if (rv != 0)
            nng_msg_free(nng_aio_get_msg(s->aio));
        atomic_fetch_sub(&s->srv->sends_in_flight, 1);
        slot_recv(s);
        return;
    }
    if (rv == NNG_ECLOSED || rv == NNG_ECANCELED)
        return;
    if (rv != 0) {
        slot_recv(s);
        return;
    }
    s->msg = nng_aio_get_msg(s->aio);
    slot_handle(s);
}

/* ---- the writer: group commit ---- */

static slot *queue_pop_fitting(server *srv, uint32_t commands_left)
{
    slot *s = srv->queue_head;
    if (s == NULL || s->req.write_count > commands_left)
        return NULL;
    srv->queue_head = s->next;
    if (srv->queue_head == NULL)
        srv->queue_tail = NULL;
    srv->queued--;
    s->next = NULL;
    return s;
}

/* Apply a slot's writes. In place (the fast path) the first fault stops
 * and returns it: the group must then be redone nested. */
static int apply_slot(store_txn *txn, slot *s, int64_t now_ms, bool in_place)
{
    if (s->req.op->control) { /* nested: its refusals and faults stay its own */
        net_sub_apply(txn, &s->req, now_ms, &s->sub);
        return TALLY_ok;
    }
    for (uint32_t i = 0; i < s->req.write_count; i++) {
        s->faults[i] = in_place ? ledger_apply_in_place(txn, &s->req.writes[i], now_ms, &s->outcomes[i])
                                : ledger_apply(txn, &s->req.writes[i], now_ms, &s->outcomes[i]);
        if (s->faults[i] != TALLY_ok) {
            net_log(NET_LOG_WARN, "command not applied: %s", tally_strerror(s->faults[i]));
            if (in_place)
                return s->faults[i];
        }
    }
    return TALLY_ok;
}

static void publish_events(server *srv, uint64_t from_seq, uint64_t to_seq);

/* Take queued writes while they fit the bounds; apply each in place.
 * *fault is set (and filling stops) when one faults. */
static uint32_t fill_group(server *srv, store_txn *txn, int64_t now_ms, slot **group, int *fault)
{
    uint32_t count = 0, commands = 0;
    size_t bytes = 0;
    int64_t started = mono_ms();
    for (;;) {
        pthread_mutex_lock(&srv->mu);
        slot *s = srv->stopping && count > 0 ? NULL
                                             : queue_pop_fitting(srv, TALLY_GROUP_COMMANDS_MAX - commands);
        pthread_mutex_unlock(&srv->mu);
        if (s == NULL)
            break;
        *fault = apply_slot(txn, s, now_ms, true);
        group[count++] = s;
        if (*fault != TALLY_ok)
            break;
        commands += s->req.write_count;
        bytes += nng_msg_len(s->msg);
        if (count == srv->slot_count || bytes >= TALLY_GROUP_BYTES_MAX ||
            mono_ms() - started >= TALLY_GROUP_APPLY_MS_MAX)
            break;
    }
    return count;
}

static int64_t commit_time(server *srv)
{
    int64_t now = wall_ms();
    if (now <= srv->last_now_ms)
        now = srv->last_now_ms; /* the clock stepped back: keep log times monotone */
    srv->last_now_ms = now;
    return now;
}

/* Retention, at most once a second, in a transaction nested in txn: a
 * failure (logged) costs only the sweep, never the writes around it.
 * Returns the records removed. */
static uint32_t retention_sweep(server *srv, store_txn *txn, int64_t now)
{
    const net_server_options *o = srv->opt;
    if ((o->inbox_window_ms == 0 && o->log_age_ms == 0) ||
        now - srv->last_retention_ms < RETENTION_INTERVAL_MS)
        return 0;
    srv->last_retention_ms = now;
    ledger_retention opt = {o->inbox_window_ms, o->log_age_ms, 0};
    ledger_retention_work work;
    store_txn child;
    int rc = store_txn_begin(srv->st, txn, false, &child);
    if (rc == TALLY_ok)
        rc = ledger_retention_sweep(&child, now, &opt, &work);
    rc = rc == TALLY_ok ? store_txn_commit(&child) : (store_txn_abort(&child), rc);
    if (rc != TALLY_ok) {
        net_log(NET_LOG_WARN, "retention sweep not done: %s", tally_strerror(rc));
        return 0;
    }
    if (work.inbox_removed || work.events_removed)
        net_log(NET_LOG_DEBUG, "retention removed %u inbox records, %u events (log floor %llu)",
                work.inbox_removed, work.events_removed, (unsigned long long)work.log_floor);
    return work.inbox_removed + work.events_removed;
}

/* A write transaction with the sweeps done; head before it in *before. */
static int begin_group_txn(server *srv, int64_t now, store_txn *txn, log_head *before)
{
    int rc = store_txn_begin(srv->st, NULL, false, txn);
    if (rc != TALLY_ok)
        return rc;
    rc = log_head_get(txn, before);
    if (rc == TALLY_ok)
        rc = ledger_sweep(txn, now, 0, NULL, NULL);
    if (rc == TALLY_ok)
        retention_sweep(srv, txn, now);
    if (rc != TALLY_ok)
        store_txn_abort(txn);
    return rc;
}

/* A fault in the fast path: abort, and apply the same group again with a
 * nested transaction per command, so only the faulting ones fail. */
static int redo_nested(server *srv, int64_t now, store_txn *txn, log_head *before, slot **group,
                       uint32_t n)
{
    store_txn_abort(txn);
    net_log(NET_LOG_WARN, "group of %u requests redone command by command after a fault", n);
    int rc = begin_group_txn(srv, now, txn, before);
    for (uint32_t i = 0; rc == TALLY_ok && i < n; i++)
        apply_slot(txn, group[i], now, false);
    return rc;
}

/* Answer every request of a group that nothing of became durable. */
static uint32_t take_queue_on_fault(server *srv, slot **group)
{
    uint32_t n = 0;
    pthread_mutex_lock(&srv->mu);
    while (n < srv->slot_count && (group[n] = queue_pop_fitting(srv, UINT32_MAX)))
        n++;
    pthread_mutex_unlock(&srv->mu);
    return n;
}

/* A fetch that found nothing waits for a commit, the next redelivery or
 * its deadline, whichever comes first, then runs again; it answers empty
 * only once its whole wait_ms has passed since it arrived. A redelivery
 * that is already due yet gave nothing (a run a hair early, by the
 * writer's clock against the waiter's) is looked at again after
 * FETCH_REPARK_MIN_MS, so a re-run never spins. */
#define FETCH_REPARK_MIN_MS 10

static void send_or_park_sub(server *srv, slot *s, int fault, int64_t now)
{
    uint64_t watermark;
    int64_t mono = mono_ms();
    if (fault != TALLY_ok || !net_sub_fetch_should_wait(&s->req, &s->sub, &watermark) ||
        mono >= s->fetch_until_ms) {
        slot_send_sub(s, fault);
        return;
    }
    int64_t wait = s->fetch_until_ms - mono;
    if (s->sub.next_due_ms != INT64_MAX) {
        int64_t due_in = s->sub.next_due_ms - now;
        if (due_in < FETCH_REPARK_MIN_MS)
            due_in = FETCH_REPARK_MIN_MS;
        if (due_in < wait)
            wait = due_in;
    }
    pthread_mutex_lock(&srv->mu);
    bool passed = srv->head_seq > watermark;
    pthread_mutex_unlock(&srv->mu);
    s->watermark = watermark;
    if (passed)
        slot_enqueue_write(s);
    else
        slot_park(s, wait);
}

/* A commit moved the log head: wake long-polls and parked fetches. */
static void advance_head(server *srv, uint64_t seq)
{
    pthread_mutex_lock(&srv->mu);
    srv->head_seq = seq;
    pthread_cond_broadcast(&srv->waiter_cv);
    pthread_mutex_unlock(&srv->mu);
}

/* Give a finished group (and the events its commit appended) to the
 * completer. Waits while the completer still works on the previous one, so
 * at most two groups exist: one being applied, one being answered; the
 * caller's array is the completer's until the next hand-over returns. */
static void hand_to_completer(server *srv, slot **group, uint32_t count, int rc, int64_t now,
                              uint64_t from_seq, uint64_t to_seq)
{
    pthread_mutex_lock(&srv->completion_mu);
    while (srv->completion_busy)
        pthread_cond_wait(&srv->completion_cv, &srv->completion_mu);
    srv->completion = (struct completion){group, count, rc, now, from_seq, to_seq};
    srv->completion_busy = true;
    pthread_cond_broadcast(&srv->completion_cv);
    pthread_mutex_unlock(&srv->completion_mu);
}

/* Answer every request of a group with its outcome (or, when the commit
 * failed, with that fault: nothing of the group is durable). */
static void answer_group(server *srv, const struct completion *c)
{
    for (uint32_t i = 0; i < c->count; i++) {
        slot *s = c->group[i];
        if (s->req.op->control) {
            send_or_park_sub(srv, s, c->rc, c->now_ms);
            continue;
        }
        if (c->rc != TALLY_ok)
            for (uint32_t j = 0; j < s->req.write_count; j++)
                s->faults[j] = c->rc;
        slot_send_write(s);
    }
}

/* Wait until the completer has answered everything handed to it. */
static void completer_drain(server *srv)
{
    pthread_mutex_lock(&srv->completion_mu);
    while (srv->completion_busy)
        pthread_cond_wait(&srv->completion_cv, &srv->completion_mu);
    pthread_mutex_unlock(&srv->completion_mu);
}

static void completer_stop(server *srv)
{
    pthread_mutex_lock(&srv->completion_mu);
    srv->completer_stop = true;
    pthread_cond_broadcast(&srv->completion_cv);
    pthread_mutex_unlock(&srv->completion_mu);
}

static void *completer_main(void *arg)
{
    server *srv = arg;
    pthread_mutex_lock(&srv->completion_mu);
    for (;;) {
        while (!srv->completion_busy && !srv->completer_stop)
            pthread_cond_wait(&srv->completion_cv, &srv->completion_mu);
        if (!srv->completion_busy)
            break; /* stopping, and everything handed over is answered */
        struct completion c = srv->completion;
        pthread_mutex_unlock(&srv->completion_mu);
        answer_group(srv, &c);
        if (c.to_seq >= c.from_seq && c.to_seq > 0)
            publish_events(srv, c.from_seq, c.to_seq);
        pthread_mutex_lock(&srv->completion_mu);
        srv->completion_busy = false;
        pthread_cond_broadcast(&srv->completion_cv);
    }
    pthread_mutex_unlock(&srv->completion_mu);
    return NULL;
}

static void run_group(server *srv, slot **group)
{
    int64_t now = commit_time(srv);
    store_txn txn;
    log_head before = {0}, after = {0};
    uint32_t n = 0;
    int fault = TALLY_ok;
    int rc = begin_group_txn(srv, now, &txn, &before);
    if (rc == TALLY_ok) {
        n = fill_group(srv, &txn, now, group, &fault);
        if (fault != TALLY_ok)
            rc = redo_nested(srv, now, &txn, &before, group, n);
    } else {
        n = take_queue_on_fault(srv, group);
    }
    if (rc == TALLY_ok) {
        rc = log_head_get(&txn, &after);
        rc = rc == TALLY_ok ? store_txn_commit(&txn) : (store_txn_abort(&txn), rc);
    }
    if (rc != TALLY_ok)
        net_log(NET_LOG_ERROR, "group of %u requests not committed: %s", n, tally_strerror(rc));
    if (rc == TALLY_ok) {
        atomic_fetch_add(&srv->commits, 1);
        advance_head(srv, after.seq);
    }
    /* Only now, after the durable commit, may anything of the group be
     * answered or published. */
    hand_to_completer(srv, group, n, rc, now, before.seq + 1, rc == TALLY_ok ? after.seq : 0);
}

/* Expire due holds and entitlements while no writes arrive. */
static void idle_sweep(server *srv)
{
    int64_t now = commit_time(srv);
    store_txn txn;
    uint32_t expired = 0;
    log_head before, after;
    if (store_txn_begin(srv->st, NULL, false, &txn) != TALLY_ok)
        return;
    int rc = log_head_get(&txn, &before);
    if (rc == TALLY_ok)
        rc = ledger_sweep(&txn, now, 0, &expired, NULL);
    uint32_t removed = rc == TALLY_ok ? retention_sweep(srv, &txn, now) : 0;
    if (rc == TALLY_ok)
        rc = log_head_get(&txn, &after);
    if (rc != TALLY_ok || (expired == 0 && removed == 0)) {
        store_txn_abort(&txn);
        return;
    }
    if (store_txn_commit(&txn) != TALLY_ok)
        return;
    net_log(NET_LOG_DEBUG, "sweep expired %u", expired);
    advance_head(srv, after.seq);
    hand_to_completer(srv, NULL, 0, TALLY_ok, now, before.seq + 1, after.seq);
}

static void refuse_queued(server *srv)
{
    for (;;) {
        pthread_mutex_lock(&srv->mu);
        slot *s = queue_pop_fitting(srv, UINT32_MAX);
        pthread_mutex_unlock(&srv->mu);
        if (s == NULL)
            return;
        slot_send_error(s, TALLY_shutting_down, "server is stopping, retry later");
    }
}

static void *writer_main(void *arg)
{
    server *srv = arg;
    /* Two group arrays: one being applied, one with the completer. */
    slot **groups[2] = {calloc(srv->slot_count, sizeof(slot *)),
                        calloc(srv->slot_count, sizeof(slot *))};
    if (groups[0] == NULL || groups[1] == NULL) {
        net_log(NET_LOG_ERROR, "writer: out of memory");
        abort();
    }
    for (unsigned turn = 0;; turn ^= 1) {
        pthread_mutex_lock(&srv->mu);
        bool timed_out = false;
        while (srv->queue_head == NULL && !srv->stopping && !timed_out) {
            struct timespec until;
            clock_gettime(CLOCK_REALTIME, &until);
            until.tv_sec += IDLE_SWEEP_MS / 1000;
            timed_out = pthread_cond_timedwait(&srv->writer_cv, &srv->mu, &until) != 0;
        }
        bool stop = srv->stopping, work = srv->queue_head != NULL;
        pthread_mutex_unlock(&srv->mu);
        if (work)
            run_group(srv, groups[turn]); /* when stopping: this group is finished and answered */
        else if (timed_out)
            idle_sweep(srv);
        if (stop)
            break;
    }
    refuse_queued(srv);
    completer_drain(srv);
    free(groups[0]);
    free(groups[1]);
    return NULL;
}

/* ---- publishing ---- */

typedef struct publish_ctx {
    server *srv;
    uint64_t sent;
} publish_ctx;

/* noinline: tests/lsan.supp names this frame (a message NNG loses) */
__attribute__((noinline)) static int publish_one(uint64_t seq, const void *bytes, size_t len, void *ctx)
{
    (void)seq;
    publish_ctx *p = ctx;
    nng_msg *m;
    if (nng_msg_alloc(&m, len) != 0)
        return 0;
    memcpy(nng_msg_body(m), bytes, len);
    if (nng_sendmsg(p->srv->pub, m, NNG_FLAG_NONBLOCK) != 0)
        nng_msg_free(m); /* PUB drops for slow readers; subscribers fill gaps by seq */
    else
        p->sent++;
    return 0;
}

static bool has_subscribers(server *srv)
{
    pthread_mutex_lock(&srv->pipes_mu);
    bool any = srv->pub_pipes_unknown || table_count(srv->pub_pipes) > 0;
    pthread_mutex_unlock(&srv->pipes_mu);
    return any;
}

/* With no subscriber connected PUB would drop every message: then the
 * events are not read back and copied at all (that was about a sixth of
 * tallyd's CPU at 8 clients x 1000, docs/BENCHMARKS.md). */
static void publish_events(server *srv, uint64_t from_seq, uint64_t to_seq)
{
    if (!srv->has_pub || !has_subscribers(srv))
        return;
    store_txn t;
    if (store_txn_begin(srv->st, NULL, true, &t) != TALLY_ok)
        return;
    publish_ctx p = {srv, 0};
    uint64_t count = to_seq - from_seq + 1;
    log_read(&t, from_seq, count < TALLY_PUBLISH_EVENTS_MAX ? count : TALLY_PUBLISH_EVENTS_MAX,
             publish_one, &p);
    store_txn_abort(&t);
}

/* ---- long-poll waiters ---- */

/* Remove and return a waiter that is ready (events or deadline), or NULL;
 * *next_deadline gets the earliest remaining deadline. Called under mu. */
static slot *take_ready_waiter(server *srv, int64_t now, int64_t *next_deadline)
{
    *next_deadline = INT64_MAX;
    for (slot **p = &srv->waiters; *p; p = &(*p)->next) {
        slot *s = *p;
        bool fetch = s->req.op->id == NET_OP_SUB_FETCH;
        uint64_t from = s->req.read.from_seq ? s->req.read.from_seq : 1;
        bool arrived = fetch ? srv->head_seq > s->watermark : srv->head_seq >= from;
        if (srv->stopping || arrived || s->deadline_ms <= now) {
            *p = s->next;
            s->next = NULL;
            return s;
        }
        if (s->deadline_ms < *next_deadline)
            *next_deadline = s->deadline_ms;
    }
    return NULL;
}

static void *waiter_main(void *arg)
{
    server *srv = arg;
    pthread_mutex_lock(&srv->mu);
    for (;;) {
        int64_t next_deadline;
        slot *s = take_ready_waiter(srv, mono_ms(), &next_deadline);
        if (s) {
            pthread_mutex_unlock(&srv->mu);
            if (s->req.op->id == NET_OP_SUB_FETCH)
                slot_enqueue_write(s); /* runs again */
            else
                slot_send_read(s);
            pthread_mutex_lock(&srv->mu);
            continue;
        }
        if (srv->stopping && srv->waiters == NULL)
            break;
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        int64_t wait = next_deadline == INT64_MAX ? 1000 : next_deadline - mono_ms();
        if (wait < 1)
            wait = 1;
        until.tv_sec += wait / 1000;
        until.tv_nsec += (wait % 1000) * 1000000;
        if (until.tv_nsec >= 1000000000) {
            until.tv_sec++;
            until.tv_nsec -= 1000000000;
        }
        pthread_cond_timedwait(&srv->waiter_cv, &srv->mu, &until);
    }
    pthread_mutex_unlock(&srv->mu);
    return NULL;
}

/* ---- start and stop ---- */

/* Connections are bounded: one over --max-connections is closed before
 * the socket sees it (NNG_PIPE_EV_ADD_PRE), so a flood of connections
 * costs a refused connect each, never unbounded memory. The accepted
 * pipes are remembered by id: NNG reports the removal of refused pipes
 * too, and those must not be counted. */
/* Counted connections NNG no longer knows. Their REM_POST should have
 * removed them, but NNG 1.5.2 sends it late, from its reaper, and under
 * load (ASan, a busy machine) a place was seen held long after its
 * connection had gone; at the limit, such places are taken back. */
#define STALE_PIPES_PER_PASS 64
/* A pass looks at every counted pipe; a flood of connections at the limit
 * must not pay that once per refused connection. */
#define STALE_PIPES_PASS_INTERVAL_MS 250

typedef struct stale_pipes {
    uint32_t ids[STALE_PIPES_PER_PASS];
    unsigned count;
} stale_pipes;

static int collect_stale_pipe(const void *key, size_t key_len, void *value, void *ctx)
{
    (void)value;
    stale_pipes *sp = ctx;
    nng_pipe p = NNG_PIPE_INITIALIZER;
    if (key_len != sizeof(p.id))
        return 0;
    memcpy(&p.id, key, sizeof(p.id));
    nng_sockaddr sa;
    int rv = nng_pipe_get_addr(p, NNG_OPT_REMADDR, &sa);
    if (rv == NNG_ENOENT || rv == NNG_ECLOSED)
        sp->ids[sp->count++] = p.id;
    return sp->count == STALE_PIPES_PER_PASS;
}

/* Under pipes_mu. Returns how many places were taken back. */
static size_t prune_stale_pipes(server *srv)
{
    size_t pruned = 0;
    stale_pipes sp;
    do {
        sp.count = 0;
        table_each(srv->pipes, collect_stale_pipe, &sp);
        for (unsigned i = 0; i < sp.count; i++)
            pruned += (size_t)table_remove(srv->pipes, &sp.ids[i], sizeof(sp.ids[i]));
    } while (sp.count == STALE_PIPES_PER_PASS);
    return pruned;
}

static void pipe_event(nng_pipe p, nng_pipe_ev ev, void *arg)
{
    server *srv = arg;
    uint32_t id = (uint32_t)nng_pipe_id(p);
    if (ev == NNG_PIPE_EV_ADD_PRE) {
        int from = nng_listener_id(nng_pipe_listener(p));
        for (unsigned i = 0; i < NET_LISTEN_URLS_MAX && from > 0; i++)
            if (atomic_load(&srv->listener_ids[i]) == (unsigned)from)
                atomic_fetch_add(&srv->listener_accepted[i], 1);
        if (srv->opt->max_connections == 0)
            return;
    }
    pthread_mutex_lock(&srv->pipes_mu);
    if (ev == NNG_PIPE_EV_REM_POST) {
        table_remove(srv->pipes, &id, sizeof(id));
        pthread_mutex_unlock(&srv->pipes_mu);
        return;
    }
    size_t pruned = 0;
    if (table_count(srv->pipes) >= srv->opt->max_connections) {
        int64_t now = mono_ms();
        if (now - srv->pipes_pruned_ms >= STALE_PIPES_PASS_INTERVAL_MS) {
            srv->pipes_pruned_ms = now;
            pruned = prune_stale_pipes(srv);
        }
    }
    size_t open = table_count(srv->pipes);
    int inserted = 0;
    bool accept = open < srv->opt->max_connections &&
                  table_upsert(srv->pipes, &id, sizeof(id), &inserted) != NULL;
    uint64_t refused = accept ? 0 : ++srv->connections_refused;
    pthread_mutex_unlock(&srv->pipes_mu);
    if (pruned > 0)
        net_log(NET_LOG_WARN, "%zu connections counted after they had gone (no REM_POST "
                "from NNG yet): no longer counted", pruned);
    if (accept)
        return;
    if (refused % 1000 == 1)
        net_log(NET_LOG_WARN, "connection refused: %zu open, the --max-connections limit "
                "(%llu refused so far)", open, (unsigned long long)refused);
    nng_pipe_close(p); /* no further events for this pipe */
}

/* Subscribers are the PUB pipes seen at ADD_POST until their REM_POST
 * (NNG reports the removal of pipes that never got to ADD_POST too). One
 * that cannot be recorded (out of memory) makes every publish go out. */
static void pub_pipe_event(nng_pipe p, nng_pipe_ev ev, void *arg)
{
    server *srv = arg;
    uint32_t id = (uint32_t)nng_pipe_id(p);
    int inserted;
    pthread_mutex_lock(&srv->pipes_mu);
    if (ev == NNG_PIPE_EV_REM_POST)
        table_remove(srv->pub_pipes, &id, sizeof(id));
    else if (table_upsert(srv->pub_pipes, &id, sizeof(id), &inserted) == NULL)
        srv->pub_pipes_unknown = true;
    pthread_mutex_unlock(&srv->pipes_mu);
}

static int open_sockets(server *srv)
{
    const net_server_options *opt = srv->opt;
    int rv = nng_rep0_open(&srv->rep);
    if (rv == 0)
        rv = nng_socket_set_size(srv->rep, NNG_OPT_RECVMAXSZ, RECV_HARD_LIMIT_BYTES);
    if (rv == 0) /* the listener watchdog counts connections taken */
        rv = nng_pipe_notify(srv->rep, NNG_PIPE_EV_ADD_PRE, pipe_event, srv);
    if (rv == 0 && opt->max_connections > 0)
        rv = nng_pipe_notify(srv->rep, NNG_PIPE_EV_REM_POST, pipe_event, srv);
    for (unsigned i = 0; rv == 0 && i < opt->listen_count; i++) {
        rv = nng_listen(srv->rep, opt->listen_urls[i], &srv->listeners[i], 0);
        if (rv != 0)
            net_log(NET_LOG_ERROR, "cannot listen on %s: %s", opt->listen_urls[i], nng_strerror(rv));
        else
            atomic_store(&srv->listener_ids[srv->listener_count++],
                         (unsigned)nng_listener_id(srv->listeners[i]));
    }
    if (rv == 0 && opt->publish_url && *opt->publish_url) {
        rv = nng_pub0_open(&srv->pub);
        if (rv == 0)
            srv->has_pub = true;
        if (rv == 0)
            rv = nng_pipe_notify(srv->pub, NNG_PIPE_EV_ADD_POST, pub_pipe_event, srv);
        if (rv == 0)
            rv = nng_pipe_notify(srv->pub, NNG_PIPE_EV_REM_POST, pub_pipe_event, srv);
        if (rv == 0 && (rv = nng_listen(srv->pub, opt->publish_url, NULL, 0)) != 0)
            net_log(NET_LOG_ERROR, "cannot publish on %s: %s", opt->publish_url, nng_strerror(rv));
    }
    return rv;
}

/* ---- the listener watchdog (net/listener_probe.h) ---- */

#define LISTENER_PROBE_INTERVAL_MS 2000
#define LISTENER_PROBE_WAIT_MS 12000 /* beyond NNG's 10 s negotiation timeout */
#define LISTENER_STOPPED_PROBES 2    /* in a row before the listener is re-created */

static void relisten(server *srv, unsigned i)
{
    const char *url = srv->opt->listen_urls[i];
    if (!srv->listener_down[i]) {
        net_log(NET_LOG_WARN, "%s stopped accepting connections (NNG 1.5.2 after a peer hung "
                "up during the SP header exchange, nanomsg/nng#1518): listening again; its "
                "connections are closed and their clients reconnect", url);
        nng_listener_close(srv->listeners[i]);
        srv->listener_down[i] = true;
    }
    int rv = nng_listen(srv->rep, url, &srv->listeners[i], 0);
    if (rv != 0) {
        net_log(NET_LOG_ERROR, "cannot listen on %s again: %s (trying again)", url,
                nng_strerror(rv));
        return;
    }
    atomic_store(&srv->listener_ids[i], (unsigned)nng_listener_id(srv->listeners[i]));
    srv->listener_down[i] = false;
    srv->listener_stopped[i] = 0;
    net_log(NET_LOG_INFO, "listening on %s again", url);
}

/* Main thread, every LISTENER_PROBE_INTERVAL_MS while serving. */
static void watch_listeners(server *srv, volatile sig_atomic_t *stop)
{
    for (unsigned i = 0; i < srv->listener_count && !*stop; i++) {
        if (srv->listener_down[i]) {
            relisten(srv, i);
            continue;
        }
        listener_probe_result r = listener_probe(srv->listeners[i], &srv->listener_accepted[i],
                                                 LISTENER_PROBE_WAIT_MS, stop);
        if (r != LISTENER_ACCEPTING)
            net_log(NET_LOG_DEBUG, "probe of %s: %s", srv->opt->listen_urls[i],
                    r == LISTENER_STOPPED ? "not accepting" : "not probed");
        if (r == LISTENER_ACCEPTING)
            srv->listener_stopped[i] = 0;
        else if (r == LISTENER_STOPPED && ++srv->listener_stopped[i] >= LISTENER_STOPPED_PROBES)
            relisten(srv, i);
    }
}

static int open_slots(server *srv)
{
    srv->slot_count = srv->opt->contexts;
    srv->slots = calloc(srv->slot_count, sizeof(slot));
    if (srv->slots == NULL)
        return NNG_ENOMEM;
    for (unsigned i = 0; i < srv->slot_count; i++) {
        slot *s = &srv->slots[i];
        s->srv = srv;
        net_request_init(&s->req);
        int rv = nng_aio_alloc(&s->aio, slot_callback, s);
        if (rv == 0)
            rv = nng_ctx_open(&s->ctx, srv->rep);
        if (rv != 0)
            return rv;
    }
    for (unsigned i = 0; i < srv->slot_count; i++)
        slot_recv(&srv->slots[i]);
    return 0;
}

/* Stop: no new connections, let replies leave, close the store (durable
 * and unlocked) while reads are held off. The NNG sockets are deliberately
 * not closed: nng_close in NNG 1.5.2 can deadlock while pipes are being
 * torn down under load (nanomsg/nng#1543, #1813) — seen here as a tallyd
 * that never exited after SIGTERM. The process exits right after; the
 * kernel closes the sockets. NNG callbacks that still arrive find the store
 * closed and answer shutting_down, so srv must stay allocated. */
static void close_everything(server *srv)
{
    for (unsigned i = 0; i < srv->listener_count; i++)
        if (!srv->listener_down[i])
            nng_listener_close(srv->listeners[i]);
    int64_t until = mono_ms() + SHUTDOWN_SEND_WAIT_MS;
    while (atomic_load(&srv->sends_in_flight) > 0 && mono_ms() < until)
        usleep(5000);
    pthread_rwlock_wrlock(&srv->store_rw);
    srv->store_closed = true;
    store_close(srv->st);
    srv->st = NULL;
    pthread_rwlock_unlock(&srv->store_rw);
}

static int open_store(server *srv)
{
    store_options so = {.path = srv->opt->data_dir, .map_size_bytes = srv->opt->map_size_bytes};
    int rc = store_open(&so, &srv->st);
    if (rc == TALLY_store_locked) {
        net_log(NET_LOG_ERROR, "%s is in use by another tallyd (lock %s/tally.lock held)",
                srv->opt->data_dir, srv->opt->data_dir);
        return rc;
    }
    if (rc != TALLY_ok) {
        net_log(NET_LOG_ERROR, "cannot open store %s: %s", srv->opt->data_dir, tally_strerror(rc));
        return rc;
    }
    store_txn t;
    log_head head = {0};
    rc = store_txn_begin(srv->st, NULL, true, &t);
    if (rc == TALLY_ok) {
        rc = log_head_get(&t, &head);
        store_txn_abort(&t);
    }
    srv->head_seq = head.seq;
    return rc;
}

/* The running server stays reachable after net_server_run returns (see
 * close_everything), which also keeps leak checkers quiet about it. */
static server *volatile running_server; /* volatile: a write-only static would be optimised away */

int net_server_run(const net_server_options *opt, volatile sig_atomic_t *stop)
{
    server *srv = calloc(1, sizeof(*srv));
    if (srv == NULL)
        return 1;
    running_server = srv;
    srv->opt = opt;
    pthread_rwlock_init(&srv->store_rw, NULL);
    pthread_mutex_init(&srv->mu, NULL);
    pthread_cond_init(&srv->writer_cv, NULL);
    pthread_cond_init(&srv->waiter_cv, NULL);
    pthread_mutex_init(&srv->pipes_mu, NULL);
    pthread_mutex_init(&srv->completion_mu, NULL);
    pthread_cond_init(&srv->completion_cv, NULL);
    srv->pipes = table_create(1); /* sets: values unused */
    srv->pub_pipes = table_create(1);
    if (srv->pipes == NULL || srv->pub_pipes == NULL || open_store(srv) != TALLY_ok) {
        running_server = NULL;
        if (srv->pipes)
            table_destroy(srv->pipes);
        if (srv->pub_pipes)
            table_destroy(srv->pub_pipes);
        free(srv); /* nothing else has seen it yet */
        return 1;
    }
    pthread_t writer, waiter, completer;
    int rv = open_sockets(srv);
    if (rv == 0)
        rv = open_slots(srv);
    if (rv != 0) {
        net_log(NET_LOG_ERROR, "cannot start: %s", nng_strerror(rv));
        close_everything(srv);
        return 1;
    }
    pthread_create(&completer, NULL, completer_main, srv);
    pthread_create(&writer, NULL, writer_main, srv);
    pthread_create(&waiter, NULL, waiter_main, srv);
    net_log(NET_LOG_INFO, "serving %s on %s (%u contexts, head seq %llu)%s%s", opt->data_dir,
            opt->listen_urls[0], srv->slot_count, (unsigned long long)srv->head_seq,
            srv->has_pub ? ", publishing on " : "", srv->has_pub ? opt->publish_url : "");
    int64_t next_probe_ms = mono_ms() + LISTENER_PROBE_INTERVAL_MS;
    while (!*stop) {
        usleep(20000);
        if (mono_ms() >= next_probe_ms) {
            watch_listeners(srv, stop);
            next_probe_ms = mono_ms() + LISTENER_PROBE_INTERVAL_MS;
        }
    }
    net_log(NET_LOG_INFO, "stopping: finishing the group in progress");
    pthread_mutex_lock(&srv->mu);
    srv->stopping = true;
    pthread_cond_broadcast(&srv->writer_cv);
    pthread_cond_broadcast(&srv->waiter_cv);
    pthread_mutex_unlock(&srv->mu);
    pthread_join(writer, NULL); /* it drains the completer before it returns */
    completer_stop(srv);
    pthread_join(completer, NULL);
    pthread_join(waiter, NULL);
    close_everything(srv);
    net_log(NET_LOG_INFO, "stopped cleanly after %llu commits",
            (unsigned long long)atomic_load(&srv->commits));
    return 0;
}
