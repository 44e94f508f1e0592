/*
 * writer.c — group commit: one writer thread drains the write queue into
 * one LMDB write transaction per group (the expiry and retention sweeps
 * first), commits once, and then answers every request of the group and
 * publishes its events: itself, right after the commit (--replies writer:
 * no thread between the commit and NNG's send), or through the completer
 * thread, which does it while the writer applies the next group (--replies
 * completer), or (--replies auto, the default) the completer while
 * requests wait for the writer and the writer itself when none do. Nothing
 * of a group is answered or published before its commit returned.
 */
#include "net/engine/engine.h"

#include "common/clock.h"
#include "common/error.h"
#include "common/limits.h"
#include "ledger/retention.h"
#include "log/log.h"
#include "net/ops/figures.h"
#include "net/metrics/metrics.h"

#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#define IDLE_SWEEP_MS 1000
#define WRITER_HOLD_POLL_US 10000
#define RETENTION_INTERVAL_MS 1000

/* A fetch that found nothing waits for a commit, the next redelivery or
 * its deadline, whichever comes first, then runs again; it answers empty
 * only once its whole wait_ms has passed since it arrived. A redelivery
 * that is already due yet gave nothing (a run a hair early, by the
 * writer's clock against the waiter's) is looked at again after
 * FETCH_REPARK_MIN_MS, so a re-run never spins. */
#define FETCH_REPARK_MIN_MS 10

/* Under mu: the first queued request if its commands fit, now the
 * writer's. */
slot *writer_queue_pop(server *srv, uint32_t commands_left)
{
    slot *s = srv->queue_head;
    if (s == NULL || s->req.write_count > commands_left)
        return NULL;
    srv->queue_head = s->next;
    if (srv->queue_head == NULL)
        srv->queue_tail = NULL;
    srv->queued--;
    srv->writer_progress_ms = clock_mono_ms();
    s->next = NULL;
    slot_own(s, OWNER_QUEUE, OWNER_WRITER);
    return s;
}

static int apply_slot(store_txn *txn, slot *s, int64_t now_ms, bool in_place)
{
    /* Keys older than the dedupe window are refused (key_expired). */
    for (uint32_t i = 0; i < s->req.write_count; i++)
        s->req.writes[i].key_max_age_ms = s->srv->opt->inbox_window_ms;
    return s->req.op->apply(txn, &s->req, now_ms, in_place, &s->res);
}

/* Take queued writes while they fit the bounds; apply each in place.
 * *fault is set (and filling stops) when one faults. */
static uint32_t fill_group(server *srv, store_txn *txn, int64_t now_ms, slot **group, int *fault)
{
    uint32_t count = 0, commands = 0;
    size_t bytes = 0;
    int64_t started = clock_mono_ms();
    for (;;) {
        pthread_mutex_lock(&srv->mu);
        slot *s = srv->stopping && count > 0 ? NULL
                                             : writer_queue_pop(srv, TALLY_GROUP_COMMANDS_MAX - commands);
        pthread_mutex_unlock(&srv->mu);
        if (s == NULL)
            break;
        *fault = apply_slot(txn, s, now_ms, true);
        group[count++] = s;
        if (*fault != TALLY_ok)
            break;
        commands += s->req.write_count;
        bytes += s->msg ? nng_msg_len(s->msg) : s->outside_bytes;
        if (count == srv->slot_count || bytes >= TALLY_GROUP_BYTES_MAX ||
            clock_mono_ms() - started >= TALLY_GROUP_APPLY_MS_MAX)
            break;
    }
    return count;
}

static int64_t commit_time(server *srv)
{
    int64_t now = clock_wall_ms();
    if (now <= srv->last_now_ms)
        now = srv->last_now_ms; /* the clock stepped back: keep log times monotone */
    srv->last_now_ms = now;
    return now;
}

/* Retention, at most once a second by the store's own record of it
 * (ledger_retention_run): a failure (logged) costs only the sweep, never
 * the writes around it. Returns the records removed. */
static uint32_t retention_sweep(server *srv, store_txn *txn, int64_t now)
{
    const net_server_options *o = srv->opt; /* subscriber expiry has no option: always */
    ledger_retention opt = {o->inbox_window_ms, o->log_age_ms, 0, o->dlq_age_ms, NULL};
    ledger_retention_work work;
    bool ran;
    int rc = ledger_retention_run(txn, now, RETENTION_INTERVAL_MS, &opt, &work, &ran);
    if (rc != TALLY_ok) {
        net_log(NET_LOG_WARN, "retention sweep not done: %s", tally_strerror(rc));
        return 0;
    }
    if (work.inbox_removed || work.events_removed || work.dead_letters_removed)
        net_log(NET_LOG_DEBUG,
                "retention removed %u inbox records, %u events (log floor %llu), %u dead letters",
                work.inbox_removed, work.events_removed, (unsigned long long)work.log_floor,
                work.dead_letters_removed);
    if (work.subscribers_expired)
        net_log(NET_LOG_INFO, "%u subscribers expired after their inactive_expiry_ms",
                work.subscribers_expired);
    return work.inbox_removed + work.events_removed + work.dead_letters_removed +
           work.subscribers_expired;
}

/* A write transaction with the sweeps done; head before it in *before.
 * That read is the group's only read of meta/head: the transaction keeps
 * the head from then on, every append of the group (sweep, retention,
 * commands) moves it in memory, and the commit writes it back once
 * (log/log.h). */
static int begin_group_txn(server *srv, int64_t now, store_txn *txn, log_head *before)
{
    net_parks_forget(); /* those of an earlier try of this group were not committed */
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

static void completer_drain(server *srv);

static bool map_can_grow(server *srv)
{
    return store_map_size(srv->st) < store_map_max(srv->st);
}

/* The map is full: grow it, up to the limit (store_map_max, --map-max-mb),
 * or TALLY_storage_full there, at once: at the limit nobody is made to
 * wait. LMDB resizes only while no transaction of the process is active:
 * the writer has aborted its own, the completer's earlier group (its
 * publishing reads the log) is answered first, and the readers wait on
 * store_rw meanwhile. */
static int grow_map(server *srv)
{
    if (!map_can_grow(srv))
        return TALLY_storage_full; /* the faulting commands get storage_full, as before */
    completer_drain(srv);
    pthread_rwlock_wrlock(&srv->store_rw);
    uint64_t now_bytes = 0;
    int rc = store_map_grow(srv->st, &now_bytes);
    pthread_rwlock_unlock(&srv->store_rw);
    if (rc == TALLY_ok)
        net_log(NET_LOG_INFO, "map full: grown to %llu MiB (at most %llu MiB)",
                (unsigned long long)(now_bytes >> 20),
                (unsigned long long)(store_map_max(srv->st) >> 20));
    else
        net_log(NET_LOG_ERROR, "map full and it could not grow: %s", tally_strerror(rc));
    return rc;
}

/* A group applied in txn (fault: the first fault of the fast path): commit
 * it, after redoing it command by command when a command faulted. A full
 * map while the map may still grow aborts at once (TALLY_storage_full) so
 * that the group is applied again in a larger map. txn is finished. */
static int settle_group(server *srv, int64_t now, store_txn *txn, log_head *before,
                        log_head *after, slot **group, uint32_t n, int fault,
                        int (*before_commit)(store_txn *, void *), void *ctx)
{
    int rc = TALLY_ok;
    if (fault == TALLY_storage_full && map_can_grow(srv)) {
        store_txn_abort(txn);
        return TALLY_storage_full;
    }
    if (fault != TALLY_ok)
        rc = redo_nested(srv, now, txn, before, group, n);
    if (rc == TALLY_ok && before_commit)
        rc = before_commit(txn, ctx);
    if (rc == TALLY_ok) {
        rc = log_head_get(txn, after);
        int64_t started = clock_mono_ns();
        rc = rc == TALLY_ok ? store_txn_commit(txn) : (store_txn_abort(txn), rc);
        srv->last_commit_ns = clock_mono_ns() - started;
    }
    return rc;
}

/* The commands of a group, for tally_group_size (a subscriber op is one). */
static uint32_t group_commands(slot **group, uint32_t n)
{
    uint32_t commands = 0;
    for (uint32_t i = 0; i < n; i++)
        commands += group[i]->req.write_count ? group[i]->req.write_count : 1;
    return commands;
}

/* Answer every request of a group that nothing of became durable. */
static uint32_t take_queue_on_fault(server *srv, slot **group)
{
    uint32_t n = 0;
    pthread_mutex_lock(&srv->mu);
    while (n < srv->slot_count && (group[n] = writer_queue_pop(srv, UINT32_MAX)))
        n++;
    pthread_mutex_unlock(&srv->mu);
    return n;
}

/* Parked long-polls are woken only when there are any: otherwise every
 * commit would wake the waiter thread for nothing. */
void advance_head(server *srv, uint64_t seq)
{
    pthread_mutex_lock(&srv->mu);
    srv->head_seq = seq;
    srv->writer_progress_ms = clock_mono_ms();
    if (srv->waiters != NULL)
        pthread_cond_broadcast(&srv->waiter_cv);
    void (*moved)(server *, uint64_t) = srv->head_moved;
    pthread_mutex_unlock(&srv->mu);
    if (moved)
        moved(srv, seq);
}

/* ---- answering a committed group ---- */

/* A subscriber write that asks to wait (a sub_fetch that found nothing)
 * parks until a commit passes what it saw, its next redelivery, or its
 * deadline; everything else is answered. from: the writer or the
 * completer, whichever answers the group. */
void writer_send_or_park(server *srv, slot *s, slot_owner from, int fault, int64_t now)
{
    uint64_t watermark;
    int64_t mono = clock_mono_ms();
    const net_op *op = s->req.op;
    if (fault != TALLY_ok || !op->apply_waits || !op->apply_waits(&s->req, &s->res, &watermark) ||
        mono >= s->until_ms) {
        slot_send_written(s, from, fault, now);
        return;
    }
    int64_t wait = s->until_ms - mono;
    if (s->res.sub.next_due_ms != INT64_MAX) {
        int64_t due_in = s->res.sub.next_due_ms - now;
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
        slot_enqueue_write(s, from);
    else
        slot_park(s, from, wait);
}

/* Answer every request of a group with its outcome (or, when the commit
 * failed, with that fault: nothing of the group is durable), then publish
 * its events. No send waits for a client: on NNG, nng_ctx_send with the
 * slot's aio queues the reply; on the tcp:// loop, a non-blocking sendmsg
 * writes it, and what the socket does not take waits for the loop. */
static void answer_group(server *srv, const completion *c, slot_owner from)
{
    for (uint32_t i = 0; i < c->count; i++)
        writer_send_or_park(srv, c->group[i], from, c->rc, c->now_ms);
    if (srv->publish && c->to_seq >= c->from_seq && c->to_seq > 0)
        srv->publish(srv, c->from_seq, c->to_seq);
}

/* ---- the completer (--replies completer) ---- */

/* Give a finished group (and the events its commit appended) to the
 * completer. Waits while the completer still works on the previous one, so
 * at most two groups exist: one being applied, one being answered; the
 * caller's array is the completer's until the next hand-over returns. */
static void hand_to_completer(server *srv, const completion *c)
{
    for (uint32_t i = 0; i < c->count; i++)
        slot_own(c->group[i], OWNER_WRITER, OWNER_COMPLETER);
    pthread_mutex_lock(&srv->completion_mu);
    while (srv->completion_busy)
        pthread_cond_wait(&srv->completion_cv, &srv->completion_mu);
    srv->done = *c;
    srv->completion_busy = true;
    pthread_cond_broadcast(&srv->completion_cv);
    pthread_mutex_unlock(&srv->completion_mu);
}

/* Wait until the completer has answered everything handed to it (at once
 * when there is none). */
static void completer_drain(server *srv)
{
    pthread_mutex_lock(&srv->completion_mu);
    while (srv->completion_busy)
        pthread_cond_wait(&srv->completion_cv, &srv->completion_mu);
    pthread_mutex_unlock(&srv->completion_mu);
}

void completer_stop(server *srv)
{
    pthread_mutex_lock(&srv->completion_mu);
    srv->completer_stop = true;
    pthread_cond_broadcast(&srv->completion_cv);
    pthread_mutex_unlock(&srv->completion_mu);
}

void *completer_main(void *arg)
{
    server *srv = arg;
    pthread_mutex_lock(&srv->completion_mu);
    for (;;) {
        while (!srv->completion_busy && !srv->completer_stop)
            pthread_cond_wait(&srv->completion_cv, &srv->completion_mu);
        if (!srv->completion_busy)
            break; /* stopping, and everything handed over is answered */
        completion c = srv->done;
        pthread_mutex_unlock(&srv->completion_mu);
        answer_group(srv, &c, OWNER_COMPLETER);
        pthread_mutex_lock(&srv->completion_mu);
        srv->completion_busy = false;
        pthread_cond_broadcast(&srv->completion_cv);
    }
    pthread_mutex_unlock(&srv->completion_mu);
    return NULL;
}

/* --replies auto: answer on the writer when no request waits for it (the
 * overlap would gain nothing and the hand-over costs a wake-up on the
 * reply's path) and the completer holds no earlier group (so replies and
 * events stay in commit order). Only the writer sets completion_busy, so
 * "not busy" read here stays true until it hands over again. */
static bool writer_is_free(server *srv)
{
    pthread_mutex_lock(&srv->mu);
    bool idle = srv->queued == 0;
    pthread_mutex_unlock(&srv->mu);
    if (!idle)
        return false;
    pthread_mutex_lock(&srv->completion_mu);
    bool free = !srv->completion_busy;
    pthread_mutex_unlock(&srv->completion_mu);
    return free;
}

/* A committed (or failed) group is answered and its events published:
 * here on the writer, or by the completer (see the file's head). */
static void finish_group(server *srv, const completion *c)
{
    bool inline_answer = srv->opt->replies == NET_REPLIES_WRITER ||
                         (srv->opt->replies == NET_REPLIES_AUTO && writer_is_free(srv));
    if (inline_answer)
        answer_group(srv, c, OWNER_WRITER);
    else
        hand_to_completer(srv, c);
}

/* ---- the writer ---- */

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
        rc = settle_group(srv, now, &txn, &before, &after, group, n, fault, NULL, NULL);
    } else {
        n = take_queue_on_fault(srv, group);
    }
    /* A full map (in a command or at the commit): nothing of the group is
     * durable; grow the map and apply the same group again. */
    while (rc == TALLY_storage_full && grow_map(srv) == TALLY_ok) {
        rc = begin_group_txn(srv, now, &txn, &before);
        fault = TALLY_ok;
        for (uint32_t i = 0; rc == TALLY_ok && fault == TALLY_ok && i < n; i++)
            fault = apply_slot(&txn, group[i], now, true);
        if (rc == TALLY_ok)
            rc = settle_group(srv, now, &txn, &before, &after, group, n, fault, NULL, NULL);
    }
    if (rc != TALLY_ok)
        net_log(NET_LOG_ERROR, "group of %u requests not committed: %s", n, tally_strerror(rc));
    if (rc == TALLY_ok) {
        uint32_t commands = group_commands(group, n);
        atomic_fetch_add(&srv->commits, 1);
        atomic_fetch_add(&srv->commands, commands);
        net_metrics_commit(commands, srv->last_commit_ns);
        net_parks_log();
        advance_head(srv, after.seq);
    }
    /* Only now, after the durable commit, may anything of the group be
     * answered or published. */
    finish_group(srv, &(completion){group, n, rc, now, before.seq + 1,
                                    rc == TALLY_ok ? after.seq : 0});
}

int writer_apply_message(server *srv, int64_t now, slot **group, uint32_t n,
                         int (*before_commit)(store_txn *txn, void *ctx), void *ctx,
                         log_head *before, log_head *after)
{
    store_txn txn;
    int rc;
    do {
        rc = begin_group_txn(srv, now, &txn, before);
        int fault = TALLY_ok;
        for (uint32_t i = 0; rc == TALLY_ok && fault == TALLY_ok && i < n; i++)
            fault = apply_slot(&txn, group[i], now, true);
        if (rc == TALLY_ok)
            rc = settle_group(srv, now, &txn, before, after, group, n, fault, before_commit, ctx);
    } while (rc == TALLY_storage_full && grow_map(srv) == TALLY_ok);
    if (rc == TALLY_ok) {
        atomic_fetch_add(&srv->commits, 1);
        net_metrics_commit(group_commands(group, n), srv->last_commit_ns);
        net_parks_log();
    }
    return rc;
}

int writer_apply_messages(server *srv, writer_message *m, uint32_t count)
{
    store_txn txn;
    net_parks_forget();
    int rc = store_txn_begin(srv->st, NULL, false, &txn);
    if (rc != TALLY_ok)
        return rc;
    uint32_t commands = 0;
    for (uint32_t k = 0; rc == TALLY_ok && k < count; k++) {
        writer_message *w = &m[k];
        rc = log_head_get(&txn, &w->before);
        if (rc == TALLY_ok)
            rc = ledger_sweep(&txn, w->now, 0, NULL, NULL);
        if (rc == TALLY_ok)
            retention_sweep(srv, &txn, w->now);
        for (uint32_t i = 0; rc == TALLY_ok && i < w->n; i++)
            rc = apply_slot(&txn, w->group[i], w->now, true);
        if (rc == TALLY_ok && w->before_commit)
            rc = w->before_commit(&txn, w->ctx);
        if (rc == TALLY_ok)
            rc = log_head_get(&txn, &w->after);
        commands += group_commands(w->group, w->n);
    }
    if (rc != TALLY_ok) {
        store_txn_abort(&txn);
        return rc;
    }
    int64_t started = clock_mono_ns();
    rc = store_txn_commit(&txn);
    srv->last_commit_ns = clock_mono_ns() - started;
    if (rc == TALLY_ok) {
        atomic_fetch_add(&srv->commits, 1);
        net_metrics_commit(commands, srv->last_commit_ns);
        net_parks_log();
    }
    return rc;
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
    finish_group(srv, &(completion){NULL, 0, TALLY_ok, now, before.seq + 1, after.seq});
}

void writer_refuse_queued(server *srv)
{
    for (;;) {
        pthread_mutex_lock(&srv->mu);
        slot *s = writer_queue_pop(srv, UINT32_MAX);
        pthread_mutex_unlock(&srv->mu);
        if (s == NULL)
            return;
        net_metrics_refused(TALLY_shutting_down);
        slot_send_error(s, OWNER_WRITER, TALLY_shutting_down, "server is stopping, retry later");
    }
}

/* The two group arrays (one being applied, one with the completer; a
 * writer that answers its own groups just alternates them), allocated
 * before the writer starts, so it never runs out of memory. */
int writer_init(server *srv)
{
    for (int i = 0; i < 2; i++) {
        srv->groups[i] = calloc(srv->slot_count, sizeof(slot *));
        if (srv->groups[i] == NULL)
            return NNG_ENOMEM;
    }
    return 0;
}

#if defined(__x86_64__) || defined(__i386__)
#define cpu_relax() __builtin_ia32_pause()
#elif defined(__aarch64__)
#define cpu_relax() __asm__ __volatile__("yield")
#else
#define cpu_relax() ((void)0)
#endif

/* An idle writer watches the queue for up to --writer-spin-us before it
 * sleeps: a request that comes within it (the next of a client that waits
 * for each answer) is taken without a wake-up (docs/BENCHMARKS.md: 1x1 p50
 * 0.51 -> 0.47 ms for ~15 us more CPU per commit). Called and returns with
 * srv->mu held, the queue empty. */
static void spin_for_work(server *srv)
{
    uint64_t seen = atomic_load_explicit(&srv->enqueued, memory_order_acquire);
    pthread_mutex_unlock(&srv->mu);
    int64_t until = clock_mono_ns() + (int64_t)srv->opt->writer_spin_us * 1000;
    while (atomic_load_explicit(&srv->enqueued, memory_order_acquire) == seen &&
           clock_mono_ns() < until)
        cpu_relax();
    pthread_mutex_lock(&srv->mu);
}

uint64_t writer_stall_ms(server *srv, uint64_t *queued)
{
    int64_t now = clock_mono_ms();
    pthread_mutex_lock(&srv->mu);
    unsigned depth = srv->queued;
    int64_t since = srv->writer_progress_ms;
    pthread_mutex_unlock(&srv->mu);
    if (queued)
        *queued = depth;
    return depth > 0 && now > since ? (uint64_t)(now - since) : 0;
}

/* For tests only (--test-writer-hold-file): while the file exists the
 * writer takes no work, as a hung writer would not; a stop ends the
 * hold. */
static void hold_for_tests(server *srv)
{
    const char *path = srv->opt->writer_hold_file;
    while (path && access(path, F_OK) == 0) {
        pthread_mutex_lock(&srv->mu);
        bool stopping = srv->stopping;
        pthread_mutex_unlock(&srv->mu);
        if (stopping)
            return;
        usleep(WRITER_HOLD_POLL_US);
    }
}

void *writer_main(void *arg)
{
    server *srv = arg;
    for (unsigned turn = 0;; turn ^= 1) {
        pthread_mutex_lock(&srv->mu);
        if (srv->queue_head == NULL && !srv->stopping && srv->opt->writer_spin_us > 0)
            spin_for_work(srv);
        bool timed_out = false;
        while (srv->queue_head == NULL && !srv->stopping && !timed_out) {
            struct timespec until;
            clock_gettime(CLOCK_REALTIME, &until);
            until.tv_sec += IDLE_SWEEP_MS / 1000;
            timed_out = pthread_cond_timedwait(&srv->writer_cv, &srv->mu, &until) != 0;
        }
        bool stop = srv->stopping, work = srv->queue_head != NULL;
        pthread_mutex_unlock(&srv->mu);
        if (work) {
            hold_for_tests(srv);
            run_group(srv, srv->groups[turn]); /* when stopping: this group is finished and answered */
        } else if (timed_out)
            idle_sweep(srv);
        if (stop)
            break;
    }
    writer_refuse_queued(srv);
    completer_drain(srv);
    return NULL;
}
