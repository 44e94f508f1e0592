/*
 * cluster_node.c — tallyd as a cluster node (cluster_node.h,
 * docs/CLUSTER.md): at start the stream (created or checked) and the
 * store checked against it; then two threads. The writer takes groups of writes from the engine's queue,
 * publishes each as one cmd message (the requests as received, without
 * their tokens, and the time this node assigns) and answers them once
 * this node's apply committed that message, each with the outcome the
 * apply computed and its cluster_seq. The applier reads the stream in
 * order and applies every message — its own, matched by Nats-Msg-Id, on
 * the very slots the writer waits on; the other nodes' decoded from the
 * message — through writer_apply_message, recording meta/cluster_position
 * in the same transaction. A message's time is max(its time, the previous
 * message's), so time comes from the log, never from the applying node;
 * an idle writer appends ticks (a time, no commands) so that time moves
 * on while nothing is written.
 *
 * Divergence (docs/CLUSTER.md, "Divergence is detected, never served"):
 * every applied message steps the state digest (net/cluster/checkpoint.h),
 * recorded with the position; every --cluster-checkpoint-every positions
 * the applier publishes a checkpoint, and every checkpoint applied is a
 * vote compared with this node's digest there. A node that disagrees
 * with the majority, or whose stream ends before its position, stops:
 * writes and reads are answered cluster_diverged, /readyz fails, the
 * applier applies no more.
 */
#include "net/server/cluster_node.h"
#include "net/server/cluster_node_internal.h"

#include "common/clock.h"
#include "common/error.h"
#include "common/limits.h"
#include "common/sha256.h"
#include "net/cluster/checkpoint.h"
#include "net/server/cluster_checks.h"
#include "net/server/cluster_connect.h"
#include "net/cluster/message.h"
#include "net/cluster/stream.h"
#include "net/engine/engine.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define APPLY_RETRY_US 1000000
#define READ_WAIT_MS 200
#define READ_ERROR_PAUSE_US 200000
#define BOUNDS_EVERY_MS 1000
#define STREAM_BEHIND_ANSWERS 3
#define PUBLISH_RETRY_US 100000
/* A group's request bytes in one message: with one request of the largest
 * size (TALLY_REQUEST_BYTES_MAX) more it stays below NATS's default
 * max_payload, 1 MiB. */
#define GROUP_BYTES_MAX (384 * 1024)

_Static_assert(GROUP_BYTES_MAX + TALLY_REQUEST_BYTES_MAX + 4096 <= 1024 * 1024,
               "a group's message fits NATS's default max_payload");

static void node_close(server *srv)
{
    cluster_node *node = srv->cluster;
    if (node == NULL)
        return;
    if (node->stream)
        cluster_stream_close(node->stream);
    for (uint32_t i = 0; i < node->temps_count; i++)
        net_request_reset(&node->temps[i].req);
    free(node->temps);
    free(node->list);
    free(node);
    srv->cluster = NULL;
}

static bool stopping(server *srv);

/* ---- the writer: propose groups ---- */

/* Under mu: take queued writes while they fit one message. */
static uint32_t take_group(server *srv, slot **group)
{
    uint32_t n = 0, commands = 0;
    size_t bytes = 0;
    while (n < srv->slot_count && srv->queue_head) {
        size_t len = srv->queue_head->msg ? nng_msg_len(srv->queue_head->msg) : 0;
        if (n > 0 && bytes + len > GROUP_BYTES_MAX)
            break;
        slot *s = writer_queue_pop(srv, TALLY_GROUP_COMMANDS_MAX - commands);
        if (s == NULL)
            break;
        group[n++] = s;
        commands += s->req.write_count ? s->req.write_count : 1;
        bytes += len;
    }
    return n;
}

/* Under mu: wait while the applier may still apply the pending group:
 * always once it claimed it; else, when published, up to the apply wait. */
static void wait_for_apply(server *srv, pending_group *pg, bool published)
{
    int64_t until = clock_mono_ms() + TALLY_CLUSTER_APPLY_WAIT_MS;
    while (!pg->applied && (pg->claimed || (published && !srv->stopping &&
                                            clock_mono_ms() < until))) {
        struct timespec at = clock_realtime_in_ms(100);
        pthread_cond_timedwait(&srv->waiter_cv, &srv->mu, &at);
    }
}

static void answer_group(slot **group, uint32_t n, const pending_group *pg,
                         int publish_rc, const char *why)
{
    char detail[96];
    for (uint32_t i = 0; i < n; i++) {
        slot *s = group[i];
        if (pg->applied) {
            s->cluster_seq = pg->rc == TALLY_ok ? pg->seq : 0;
            writer_send_or_park(s->srv, s, OWNER_WRITER, pg->rc, pg->now_ms);
        } else if (publish_rc == TALLY_ok) {
            snprintf(detail, sizeof(detail), "in the stream, not yet applied here: retry with the "
                     "same key");
            slot_send_error(s, OWNER_WRITER, TALLY_cluster_unavailable, detail);
        } else {
            snprintf(detail, sizeof(detail), "JetStream: %s", why[0] ? why : tally_strerror(publish_rc));
            slot_send_error(s, OWNER_WRITER, TALLY_cluster_unavailable, detail);
        }
    }
}

/* Publish a group's message. While JetStream has no leader for the
 * stream (an election after a server's loss: no responders), the same
 * message is published again, under the same Nats-Msg-Id (stored once),
 * for up to a PubAck's wait: writes pause through an election rather
 * than fail at once. */
static int publish_group(cluster_node *node, const char *msg_id, const void *data, size_t len,
                         char *why, size_t why_size)
{
    int64_t until = clock_mono_ms() + TALLY_CLUSTER_REQUEST_MS_DEFAULT;
    for (;;) {
        uint64_t seq;
        bool duplicate;
        int rc = cluster_stream_publish(node->stream, "cmd", msg_id, data, len, &seq, &duplicate,
                                        why, why_size);
        if (rc != TALLY_unreachable || clock_mono_ms() >= until || stopping(node->srv))
            return rc;
        usleep(PUBLISH_RETRY_US);
    }
}

static void refuse_group(cluster_node *node, slot **group, uint32_t n)
{
    for (uint32_t i = 0; i < n; i++)
        slot_send_error(group[i], OWNER_WRITER, TALLY_cluster_diverged,
                        node->srv->cluster_stop_why);
}

static void propose(cluster_node *node, slot **group, uint32_t n)
{
    server *srv = node->srv;
    if (cluster_checks_diverged(srv))
        return refuse_group(node, group, n);
    int64_t now = clock_wall_ms();
    if (now < node->last_propose_ms)
        now = node->last_propose_ms; /* the clock stepped back: the log's max() holds anyway */
    node->last_propose_ms = now;
    cluster_cmd_builder b;
    cluster_cmd_begin(&b, srv->opt->cluster_node, now, n);
    for (uint32_t i = 0; i < n; i++)
        cluster_cmd_add(&b, &group[i]->req.unpacked.data);
    const void *data;
    size_t len;
    int packed = cluster_cmd_end(&b, &data, &len);
    pending_group *pg = &node->pending;
    pthread_mutex_lock(&srv->mu);
    *pg = (pending_group){.active = packed == 0, .group = group, .n = n};
    snprintf(pg->msg_id, sizeof(pg->msg_id), "%s-%016" PRIx64 "-%" PRIu64, srv->opt->cluster_node,
             node->boot_id, ++node->counter);
    pthread_mutex_unlock(&srv->mu);
    char why[CLUSTER_WHY_BYTES] = "";
    int rc = packed == 0 ? publish_group(node, pg->msg_id, data, len, why, sizeof(why))
                         : TALLY_out_of_memory;
    cluster_cmd_free(&b);
    if (rc != TALLY_ok)
        net_log(NET_LOG_WARN, "cluster: a group of %u requests not published: %s", n,
                why[0] ? why : tally_strerror(rc));
    pthread_mutex_lock(&srv->mu);
    wait_for_apply(srv, pg, rc == TALLY_ok);
    pg->active = false; /* not claimed by now: applied, if ever, from the stream's copy */
    pending_group done = *pg;
    pthread_mutex_unlock(&srv->mu);
    answer_group(group, n, &done, rc, why);
}

/* A tick (docs/CLUSTER.md, "What a message holds"): its Nats-Msg-Id
 * names the tick interval it falls in, so ticks of several idle nodes in
 * one interval are one message (the stream's duplicate window is longer
 * than any interval). Not published is logged: the next comes. */
static void publish_tick(cluster_node *node)
{
    int64_t now = clock_wall_ms(), every = node->srv->opt->cluster_tick_ms;
    char id[MSG_ID_BYTES];
    snprintf(id, sizeof(id), "tick-%" PRId64, now / every);
    msgpack_sbuffer sb;
    msgpack_sbuffer_init(&sb);
    uint64_t seq;
    bool duplicate;
    char why[CLUSTER_WHY_BYTES] = "";
    int rc = cluster_tick_pack(&sb, now) == 0
                 ? cluster_stream_publish(node->stream, "tick", id, sb.data, sb.size, &seq,
                                          &duplicate, why, sizeof(why))
                 : TALLY_out_of_memory;
    msgpack_sbuffer_destroy(&sb);
    if (rc != TALLY_ok)
        net_log(NET_LOG_DEBUG, "cluster: tick not published: %s",
                why[0] ? why : tally_strerror(rc));
}

/* Under mu: wait for writes; while none come, tick when due. */
static void wait_for_writes(cluster_node *node)
{
    server *srv = node->srv;
    int64_t every = srv->opt->cluster_tick_ms;
    while (srv->queue_head == NULL && !srv->stopping) {
        int64_t idle = clock_mono_ms() - node->last_apply_mono_ms;
        if (every > 0 && idle >= every && !cluster_checks_diverged(srv)) {
            node->last_apply_mono_ms = clock_mono_ms(); /* the next try one interval on */
            pthread_mutex_unlock(&srv->mu);
            publish_tick(node);
            pthread_mutex_lock(&srv->mu);
            continue;
        }
        struct timespec at = clock_realtime_in_ms(every > idle ? every - idle : 1000);
        pthread_cond_timedwait(&srv->writer_cv, &srv->mu, &at);
    }
}

static void *node_writer_main(void *arg)
{
    server *srv = arg;
    cluster_node *node = srv->cluster;
    slot **group = srv->groups[0];
    for (;;) {
        pthread_mutex_lock(&srv->mu);
        wait_for_writes(node);
        uint32_t n = srv->stopping ? 0 : take_group(srv, group);
        pthread_mutex_unlock(&srv->mu);
        if (n == 0)
            break;
        propose(node, group, n);
    }
    writer_refuse_queued(srv);
    return NULL;
}

/* ---- the applier ---- */

typedef struct apply_ctx {
    position_record p;
    const cluster_node *node; /* its digest: the one before this message */
    slot **group;
    uint32_t n;
} apply_ctx;

/* The reply of s's outcome as the node that took it answers it: its
 * SHA-256 into the digest. A subscriber write's reply reads the store
 * (cursor figures, the events a fetch leased): from txn, the message's
 * own transaction, which holds what a read after its commit sees. */
static int digest_reply(cluster_digest_step *d, store_txn *txn, slot *s, int64_t now_ms)
{
    net_out o;
    if (net_out_begin(&o) != 0)
        return TALLY_out_of_memory;
    s->req.op->reply(&o, txn, &s->req, &s->res, TALLY_ok, now_ms);
    nng_msg *m = net_out_take(&o);
    if (m == NULL)
        return TALLY_out_of_memory;
    cluster_digest_reply(d, nng_msg_body(m), nng_msg_len(m));
    nng_msg_free(m);
    return TALLY_ok;
}

/* Last in the message's transaction: the state digest after it
 * (checkpoint.h) and the position, recorded together. */
static int record_position(store_txn *txn, void *arg)
{
    apply_ctx *ctx = arg;
    log_head head;
    int rc = log_head_get(txn, &head);
    cluster_digest_step d;
    cluster_digest_begin(&d, ctx->node->digest, ctx->p.seq, ctx->p.hash);
    for (uint32_t i = 0; rc == TALLY_ok && i < ctx->n; i++)
        rc = digest_reply(&d, txn, ctx->group[i], ctx->p.time_ms);
    if (rc != TALLY_ok)
        return rc;
    cluster_digest_end(&d, head.seq, head.hash, ctx->p.digest);
    return cluster_position_put(txn, &ctx->p);
}

static bool stopping(server *srv)
{
    pthread_mutex_lock(&srv->mu);
    bool s = srv->stopping;
    pthread_mutex_unlock(&srv->mu);
    return s;
}

/* Room for count decoded requests and the list to apply. */
static bool temps_reserve(cluster_node *node, uint32_t count)
{
    if (count <= node->temps_count)
        return true;
    slot *t = realloc(node->temps, count * sizeof(slot));
    if (t == NULL)
        return false;
    memset(t + node->temps_count, 0, (count - node->temps_count) * sizeof(slot));
    node->temps = t;
    node->temps_count = count;
    slot **l = realloc(node->list, count * sizeof(slot *));
    if (l == NULL)
        return false;
    node->list = l;
    node->list_count = count;
    return true;
}

/* The slots to apply for a cmd message: the writer's own group when the
 * message is the one it is proposing, else the requests decoded. A
 * request that does not decode (which no node of this version sends) is
 * left out, the same on every node. */
static uint32_t message_slots(cluster_node *node, const cluster_message *m, const cluster_cmd *c,
                              slot ***out, bool *own)
{
    server *srv = node->srv;
    pthread_mutex_lock(&srv->mu);
    pending_group *pg = &node->pending;
    *own = pg->active && m->msg_id && strcmp(pg->msg_id, m->msg_id) == 0 && pg->n == c->count;
    if (*own)
        pg->claimed = true;
    pthread_mutex_unlock(&srv->mu);
    if (*own) {
        *out = pg->group;
        return pg->n;
    }
    if (!temps_reserve(node, c->count))
        return UINT32_MAX;
    uint32_t k = 0;
    for (uint32_t i = 0; i < c->count; i++) {
        slot *t = &node->temps[i];
        t->srv = srv;
        int rc = net_request_decode(&t->req, c->cmds[i].via.bin.ptr, c->cmds[i].via.bin.size);
        if (rc == TALLY_ok &&
            (t->req.op->kind == NET_KIND_WRITE || t->req.op->kind == NET_KIND_SUBSCRIBER))
            node->list[k++] = t;
        else
            net_log(NET_LOG_WARN, "cluster: position %" PRIu64 " request %u left out: %s",
                    m->seq, i, tally_strerror(rc));
    }
    uint64_t at = srv->opt->test_cluster_diverge_at;
    if (at > 0 && m->seq >= at && !node->perturbed && k > 0) { /* tests: a real divergence */
        net_log(NET_LOG_WARN, "cluster: --test-cluster-diverge-at: position %" PRIu64
                " applied without its last request", m->seq);
        net_request_reset(&node->list[--k]->req);
        node->perturbed = true;
    }
    *out = node->list;
    return k;
}

/* The position seq applied (rc TALLY_ok; the log's head now head_seq) or
 * given up (stopping): readers, parked reads and, for the node's own
 * message (own), the writer waiting on it are told. */
static void note_applied(cluster_node *node, uint64_t seq, int rc, bool own, int64_t time_ms,
                         uint64_t head_seq)
{
    server *srv = node->srv;
    pthread_mutex_lock(&srv->mu);
    if (rc == TALLY_ok) {
        srv->cluster_position = seq;
        if (seq > srv->cluster_stream_last)
            srv->cluster_stream_last = seq;
        if (head_seq > srv->head_seq)
            srv->head_seq = head_seq;
        srv->writer_progress_ms = clock_mono_ms();
        node->last_apply_mono_ms = clock_mono_ms();
    }
    if (own) {
        node->pending.applied = true;
        node->pending.rc = rc;
        node->pending.now_ms = time_ms;
        node->pending.seq = seq;
    }
    pthread_cond_broadcast(&srv->waiter_cv);
    pthread_mutex_unlock(&srv->mu);
}

/* Apply m until it commits (a fault is retried: a replica cannot skip a
 * message) or tallyd stops. */
static void apply_message(cluster_node *node, const cluster_message *m)
{
    server *srv = node->srv;
    apply_ctx ctx = {.p = {.seq = m->seq, .time_ms = node->last_time_ms}, .node = node};
    sha256_digest(m->data, m->len, ctx.p.hash);
    cluster_cmd c;
    bool is_cmd = cluster_subject_is(m->subject, "cmd"), own = false;
    int decoded = is_cmd ? cluster_cmd_unpack(m->data, m->len, &c) : TALLY_ok;
    if (decoded == TALLY_unsupported_version) {
        net_log(NET_LOG_ERROR, "cluster: cluster message version at position %" PRIu64
                " is newer than this tallyd: applying stops (upgrade this node)", m->seq);
        while (!stopping(srv))
            usleep(APPLY_RETRY_US);
        cluster_cmd_release(&c);
        return;
    }
    slot **group = NULL;
    uint32_t n = 0;
    int64_t tick_ms;
    if (is_cmd && decoded == TALLY_ok) {
        if (c.time_ms > ctx.p.time_ms)
            ctx.p.time_ms = c.time_ms;
        n = message_slots(node, m, &c, &group, &own);
    } else if (cluster_subject_is(m->subject, "tick") &&
               cluster_tick_unpack(m->data, m->len, &tick_ms) == TALLY_ok) {
        if (tick_ms > ctx.p.time_ms)
            ctx.p.time_ms = tick_ms;
    } else if (is_cmd) {
        net_log(NET_LOG_WARN, "cluster: position %" PRIu64 " is no cmd message: applied as "
                "nothing", m->seq);
    }
    int rc = n == UINT32_MAX ? TALLY_out_of_memory : TALLY_ok;
    ctx.group = group;
    ctx.n = n == UINT32_MAX ? 0 : n;
    log_head before = {0}, after = {0};
    for (;;) {
        if (rc == TALLY_ok)
            rc = writer_apply_message(srv, ctx.p.time_ms, group, n, record_position, &ctx,
                                      &before, &after);
        if (rc == TALLY_ok || stopping(srv))
            break;
        net_log(NET_LOG_ERROR, "cluster: position %" PRIu64 " not applied: %s; trying again",
                m->seq, tally_strerror(rc));
        usleep(APPLY_RETRY_US);
        rc = n == UINT32_MAX ? TALLY_out_of_memory : TALLY_ok;
    }
    int64_t before_ms = node->last_time_ms;
    if (rc == TALLY_ok) {
        node->last_time_ms = ctx.p.time_ms;
        memcpy(node->digest, ctx.p.digest, CLUSTER_HASH_BYTES);
    }
    note_applied(node, m->seq, rc, own, ctx.p.time_ms, after.seq);
    if (rc == TALLY_ok)
        cluster_checks_after(&node->checks, m, node->digest, before_ms, ctx.p.time_ms);
    if (rc == TALLY_ok && srv->publish && after.seq > before.seq)
        srv->publish(srv, before.seq + 1, after.seq);
    if (!own)
        for (uint32_t i = 0; i < n && n != UINT32_MAX; i++)
            net_request_reset(&group[i]->req);
    if (is_cmd)
        cluster_cmd_release(&c);
}

/* The stream's last seq, for tally_cluster_lag_messages (a failure
 * leaves the last one seen). */
static void note_stream_last(cluster_node *node)
{
    uint64_t first, last;
    if (cluster_stream_bounds(node->stream, &first, &last) != TALLY_ok)
        return;
    pthread_mutex_lock(&node->srv->mu);
    uint64_t position = node->srv->cluster_position;
    if (last > node->srv->cluster_stream_last)
        node->srv->cluster_stream_last = last;
    pthread_mutex_unlock(&node->srv->mu);
    /* checked against every answer (so after every reconnect too): a
     * stream that ends before what this node applied lost acknowledged
     * messages. One answer may come from a server that was stopped and
     * does not know yet of the leader elected meanwhile (seen with
     * nats-server 2.9.10 after SIGCONT): the stream must say so on
     * STREAM_BEHIND_ANSWERS answers in a row, about a second apart. */
    node->behind_answers = last < position ? node->behind_answers + 1 : 0;
    if (node->behind_answers >= STREAM_BEHIND_ANSWERS)
        cluster_checks_stop(node->srv, "stream behind this node: this node applied position %"
                            PRIu64 ", the stream ends at %" PRIu64, position, last);
    else if (last < position)
        net_log(NET_LOG_WARN, "cluster: the stream ends at %" PRIu64 " before this node's "
                "position %" PRIu64 " (answer %u of %d in a row before this node stops)", last,
                position, node->behind_answers, STREAM_BEHIND_ANSWERS);
}

/* --test-cluster-stale-copy-at: the copy a stale server would deliver at
 * position at, a tick an hour on (applied, every later time would be). */
static void stale_copy_prepare(cluster_reader *r, uint64_t at)
{
    msgpack_sbuffer sb;
    msgpack_sbuffer_init(&sb);
    if (cluster_tick_pack(&sb, clock_wall_ms() + 3600 * 1000) == 0)
        cluster_reader_test_stale_copy_at(r, at, "tick", sb.data, sb.size);
    msgpack_sbuffer_destroy(&sb);
}

static void *node_applier_main(void *arg)
{
    server *srv = arg;
    cluster_node *node = srv->cluster;
    pthread_mutex_lock(&srv->mu);
    uint64_t from = srv->cluster_position + 1;
    pthread_mutex_unlock(&srv->mu);
    cluster_reader *r = NULL;
    int rc = cluster_reader_open(&r, node->stream, from);
    if (rc != TALLY_ok)
        net_log(NET_LOG_ERROR, "cluster: cannot read the stream from %" PRIu64 ": %s", from,
                tally_strerror(rc));
    if (r != NULL && srv->opt->test_cluster_stale_copy_at > 0)
        stale_copy_prepare(r, srv->opt->test_cluster_stale_copy_at);
    bool told = false;
    int64_t bounds_due = 0;
    while (!stopping(srv)) {
        if (clock_mono_ms() >= bounds_due) { /* for the lag metric, once a second */
            note_stream_last(node);
            bounds_due = clock_mono_ms() + BOUNDS_EVERY_MS;
        }
        /* a diverged node applies no more; for tests, --test-writer-hold-file
         * holds the applier (the writer of a cluster node's store) */
        const char *hold = srv->opt->writer_hold_file;
        if (r == NULL || cluster_checks_diverged(srv) || (hold && access(hold, F_OK) == 0)) {
            usleep(READ_ERROR_PAUSE_US);
            continue;
        }
        cluster_message m;
        rc = cluster_reader_next(r, READ_WAIT_MS, &m);
        if (rc == TALLY_timed_out)
            continue;
        if (rc == TALLY_not_found) {
            cluster_checks_stop(srv, "position %" PRIu64 " is older than the stream's first "
                                "message: restore from another node's backup",
                                srv->cluster_position);
            continue;
        }
        if (rc != TALLY_ok) {
            if (!told)
                net_log(NET_LOG_ERROR, "cluster: reading the stream: %s", tally_strerror(rc));
            told = true;
            usleep(READ_ERROR_PAUSE_US);
            continue;
        }
        told = false;
        if (m.corrected)
            net_log(NET_LOG_WARN, "cluster: position %" PRIu64 ": the server this node reads "
                    "the stream from held another message there than the stream's leader (a "
                    "stale copy); the leader's is applied", m.seq);
        apply_message(node, &m);
    }
    if (r)
        cluster_reader_close(r);
    return NULL;
}

const net_cluster_hooks cluster_node_hooks = {
    .connect = cluster_node_connect,
    .start = cluster_node_start,
    .writer_main = node_writer_main,
    .applier_main = node_applier_main,
    .close = node_close,
};
