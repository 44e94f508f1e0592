/*
 * cluster_node.c — tallyd as a cluster node (cluster_node.h,
 * docs/CLUSTER.md): at start the stream (created or checked) and the
 * store checked against it; then two threads. The writer takes groups
 * of writes from the engine's queue and publishes each as one cmd
 * message (the requests as received, without their tokens, and the time
 * this node assigns), one after the other, up to
 * TALLY_CLUSTER_GROUPS_IN_FLIGHT published and not yet applied here;
 * their requests are answered once this node's apply committed that
 * message, each with the outcome the apply computed and its cluster_seq
 * (by the applier, right after the commit; by the writer when a group
 * cannot be). The applier reads the stream in order and applies every
 * message — its own, matched by Nats-Msg-Id, on the very slots the
 * writer waits on; the other nodes' decoded from the message — through
 * writer_apply_message, recording meta/cluster_position in the same
 * transaction; the messages that arrived together are applied in one
 * transaction (writer_apply_messages), each as it is alone. A message's
 * time is max(its time, the previous message's), so time comes from the
 * log, never from the applying node; an idle writer appends ticks (a
 * time, no commands) so that time moves on while nothing is written.
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
#include "net/ops/ops_webhook.h"
#include "net/metrics/metrics.h"

#include <assert.h>
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
        size_t len = srv->queue_head->msg ? nng_msg_len(srv->queue_head->msg)
                                          : srv->queue_head->outside_bytes;
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

/* The phases of a group whose publish JetStream acknowledged
 * (net_metrics_cluster_group); any other is not observed. */
static void observe_group(const pending_group *g)
{
    if (g->publish_rc != TALLY_ok)
        return;
    int64_t queued = g->arrived_ns > 0 && g->arrived_ns < g->publish_ns
                         ? g->publish_ns - g->arrived_ns : 0;
    net_metrics_cluster_group(queued, g->acked_ns - g->publish_ns,
                              g->applied ? g->applied_ns - g->acked_ns : -1);
}

/* Answer every request of a group (a copy taken under mu): with what the
 * apply computed when this node applied its message and the stream
 * confirms the position (confirmed TALLY_ok), else with the fault that
 * says what is known (why: its detail). */
static void answer_group(const pending_group *g, int confirmed, const char *why)
{
    char detail[CLUSTER_WHY_BYTES + 16];
    for (uint32_t i = 0; i < g->n; i++) {
        slot *s = g->group[i];
        if (g->applied && confirmed == TALLY_ok) {
            s->cluster_seq = g->rc == TALLY_ok ? g->seq : 0;
            writer_send_or_park(s->srv, s, OWNER_WRITER, g->rc, g->now_ms);
        } else if (g->applied) {
            slot_send_error(s, OWNER_WRITER, confirmed, why);
        } else if (g->publish_rc == TALLY_ok) {
            snprintf(detail, sizeof(detail), "in the stream, not yet applied here: retry with the "
                     "same key");
            slot_send_error(s, OWNER_WRITER, TALLY_cluster_unavailable, detail);
        } else {
            snprintf(detail, sizeof(detail), "JetStream: %s",
                     why && why[0] ? why : tally_strerror(g->publish_rc));
            slot_send_error(s, OWNER_WRITER, TALLY_cluster_unavailable, detail);
        }
    }
}

/* g, answered by whoever ended it, is free again: its message freed,
 * its phases observed, the writer told. */
static void group_answered(server *srv, pending_group *g)
{
    cluster_cmd_free(&g->message);
    pthread_mutex_lock(&srv->mu);
    pending_group done = *g;
    g->in_use = false;
    pthread_cond_broadcast(&srv->writer_cv);
    pthread_mutex_unlock(&srv->mu);
    observe_group(&done);
}

/* Whether the position this node applied its own message at is where the
 * stream holds it (docs/CLUSTER.md, "Writes", step 3). The applier found
 * the message at done->seq through the node's consumer; acked: JetStream's
 * PubAck came and named ack_seq, the stream leader's word once a quorum
 * holds the message. The same position: TALLY_ok. No PubAck:
 * TALLY_cluster_unavailable (what a consumer delivers is not known to be
 * held by a quorum; retry with the same key). Another position: the
 * stream's leader is asked which message it holds at done->seq: this one,
 * the same bytes (data), is TALLY_ok (a retried publish stored twice,
 * answered at its first copy, where every node applies it);
 * another, or none, means this node applied at done->seq what the stream
 * does not hold there: it stops serving (TALLY_cluster_diverged); no
 * answer is TALLY_cluster_unavailable. why: the detail of a refusal. */
static int confirm_position(cluster_node *node, const pending_group *done, bool acked,
                            uint64_t ack_seq, const void *data, size_t len, char *why,
                            size_t why_size)
{
    if (acked && ack_seq == done->seq)
        return TALLY_ok;
    if (!acked) {
        net_log(NET_LOG_WARN, "cluster: group %s applied at position %" PRIu64 " as this node's "
                "consumer delivered it, with no PubAck: answered cluster_unavailable",
                done->msg_id, done->seq);
        snprintf(why, why_size, "applied here at position %" PRIu64 " but not acknowledged by "
                 "JetStream: retry with the same key", done->seq);
        return TALLY_cluster_unavailable;
    }
    char id[MSG_ID_BYTES];
    uint8_t hash[SHA256_BYTES], sent[SHA256_BYTES];
    sha256_digest(data, len, sent);
    int rc = cluster_stream_get(node->stream, done->seq, id, sizeof(id), hash);
    if (rc == TALLY_ok && strcmp(id, done->msg_id) == 0 && memcmp(hash, sent, SHA256_BYTES) == 0) {
        net_log(NET_LOG_WARN, "cluster: group %s is in the stream at position %" PRIu64
                " and again at %" PRIu64 " (a retried publish stored twice): answered at %"
                PRIu64, done->msg_id, done->seq, ack_seq, done->seq);
        return TALLY_ok;
    }
    if (rc != TALLY_ok && rc != TALLY_not_found) {
        snprintf(why, why_size, "JetStream did not confirm position %" PRIu64 " (%s): retry with "
                 "the same key", done->seq, tally_strerror(rc));
        return TALLY_cluster_unavailable;
    }
    cluster_checks_stop(node->srv, "this node applied its group %s at position %" PRIu64
                        ", JetStream acknowledged it at %" PRIu64 " and holds %s at %" PRIu64
                        ": this node's consumer delivered what the stream does not hold there",
                        done->msg_id, done->seq, ack_seq,
                        rc == TALLY_not_found ? "no message" : id[0] ? id : "a message without id",
                        done->seq);
    snprintf(why, why_size, "this node stops serving: it applied position %" PRIu64 " otherwise "
             "than the stream holds it: retry on another node", done->seq);
    return TALLY_cluster_diverged;
}

/* Publish a group's message. While JetStream has no leader for the
 * stream (an election after a server's loss: no responders), the same
 * message is published again, under the same Nats-Msg-Id (stored once),
 * for up to a PubAck's wait: writes pause through an election rather
 * than fail at once. */
static int publish_group(cluster_node *node, const char *msg_id, const void *data, size_t len,
                         uint64_t *seq, bool *duplicate, char *why, size_t why_size)
{
    int64_t until = clock_mono_ms() + TALLY_CLUSTER_REQUEST_MS_DEFAULT;
    for (;;) {
        int rc = cluster_stream_publish(node->stream, "cmd", msg_id, data, len, seq, duplicate,
                                        why, why_size);
        if (rc != TALLY_unreachable || clock_mono_ms() >= until || stopping(node->srv))
            return rc;
        usleep(PUBLISH_RETRY_US);
    }
}

/* The writer ends g, applied here (claimed) and published, when the
 * applier could not: its position confirmed with JetStream first (a
 * publish again when no PubAck came; confirm_position), which takes
 * requests the applier does not wait for. */
static void finish_applied(cluster_node *node, pending_group *g)
{
    server *srv = node->srv;
    pthread_mutex_lock(&srv->mu);
    pending_group done = *g;
    pthread_mutex_unlock(&srv->mu);
    char why[CLUSTER_WHY_BYTES];
    snprintf(why, sizeof(why), "%s", done.why);
    int confirmed = TALLY_ok;
    if (done.rc == TALLY_ok) {
        uint64_t ack_seq = done.ack_seq;
        bool duplicate = false;
        /* applied as the consumer delivered it, with no PubAck: the same
         * message again, for JetStream's word on where it is */
        bool acked = done.publish_rc == TALLY_ok ||
                     publish_group(node, done.msg_id, done.data, done.len, &ack_seq, &duplicate,
                                   why, sizeof(why)) == TALLY_ok;
        confirmed = confirm_position(node, &done, acked, ack_seq, done.data, done.len, why,
                                     sizeof(why));
    }
    answer_group(&done, confirmed, why);
    group_answered(srv, g);
}

/* Under mu: the writer ends the groups that are its to end (mu is let
 * go meanwhile): those the applier applied but left to it (handed_back:
 * their position to confirm), and those it has not claimed, published
 * and not applied here by their deadline (with all: every one, tallyd
 * stopping), answered cluster_unavailable (it is in the stream: a retry
 * with the same key replays). */
static void end_groups(cluster_node *node, bool all)
{
    server *srv = node->srv;
    int64_t now = clock_mono_ms();
    for (unsigned i = 0; i < TALLY_CLUSTER_GROUPS_IN_FLIGHT; i++) {
        pending_group *g = &node->pending[i];
        if (g->in_use && g->handed_back) {
            g->handed_back = false;
            pthread_mutex_unlock(&srv->mu);
            finish_applied(node, g);
            pthread_mutex_lock(&srv->mu);
            continue;
        }
        if (!g->in_use || !g->proposed || g->claimed || (!all && now < g->deadline_ms))
            continue;
        g->active = false; /* applied, if ever, from the stream's copy */
        pending_group done = *g;
        pthread_mutex_unlock(&srv->mu);
        answer_group(&done, TALLY_ok, NULL);
        group_answered(srv, g);
        pthread_mutex_lock(&srv->mu);
    }
}

/* The oldest arrival (mono ns) among a group's requests; 0: none known. */
static int64_t group_arrived_ns(slot **group, uint32_t n)
{
    int64_t oldest = 0;
    for (uint32_t i = 0; i < n; i++)
        if (group[i]->arrived_ns > 0 && (oldest == 0 || group[i]->arrived_ns < oldest))
            oldest = group[i]->arrived_ns;
    return oldest;
}

static void refuse_group(cluster_node *node, slot **group, uint32_t n)
{
    for (uint32_t i = 0; i < n; i++)
        slot_send_error(group[i], OWNER_WRITER, TALLY_cluster_diverged,
                        node->srv->cluster_stop_why);
}

/* Publish group g (n requests, taken from the queue) and go on. The
 * applier answers it once it applied it, when JetStream's PubAck named
 * the position it applied it at; the writer when the publish failed and
 * the applier never took it, or when the applier applied it before the
 * PubAck came or at another position (finish_applied). */
static void propose(cluster_node *node, pending_group *g, uint32_t n)
{
    server *srv = node->srv;
    if (cluster_checks_diverged(srv))
        return refuse_group(node, g->group, n);
    int64_t now = clock_wall_ms();
    if (now < node->last_propose_ms)
        now = node->last_propose_ms; /* the clock stepped back: the log's max() holds anyway */
    node->last_propose_ms = now;
    pthread_mutex_lock(&srv->mu);
    slot **group = g->group;
    *g = (pending_group){.in_use = true, .group = group, .n = n,
                         .arrived_ns = group_arrived_ns(group, n)};
    pthread_mutex_unlock(&srv->mu);
    cluster_cmd_begin(&g->message, srv->opt->cluster_node, now, n);
    for (uint32_t i = 0; i < n; i++)
        cluster_cmd_add(&g->message, &group[i]->req.unpacked.data);
    int packed = cluster_cmd_end(&g->message, &g->data, &g->len);
    pthread_mutex_lock(&srv->mu);
    g->active = packed == 0;
    g->publish_ns = clock_mono_ns();
    snprintf(g->msg_id, sizeof(g->msg_id), "%s-%016" PRIx64 "-%" PRIu64, srv->opt->cluster_node,
             node->boot_id, ++node->counter);
    pthread_mutex_unlock(&srv->mu);
    char why[CLUSTER_WHY_BYTES] = "";
    uint64_t ack_seq = 0;
    bool duplicate = false;
    int rc = packed == 0 ? publish_group(node, g->msg_id, g->data, g->len, &ack_seq, &duplicate,
                                         why, sizeof(why))
                         : TALLY_out_of_memory;
    int64_t acked_ns = clock_mono_ns();
    if (rc != TALLY_ok)
        net_log(NET_LOG_WARN, "cluster: a group of %u requests not published: %s", n,
                why[0] ? why : tally_strerror(rc));
    pthread_mutex_lock(&srv->mu);
    g->proposed = true;
    g->publish_rc = rc;
    g->ack_seq = ack_seq;
    g->acked_ns = acked_ns;
    snprintf(g->why, sizeof(g->why), "%s", why);
    g->deadline_ms = clock_mono_ms() + TALLY_CLUSTER_APPLY_WAIT_MS;
    bool applied = g->applied; /* before the PubAck: the applier left it to the writer */
    bool mine = !g->claimed && rc != TALLY_ok;
    if (mine)
        g->active = false; /* applied, if it was stored after all, from the stream's copy */
    pending_group done = *g;
    pthread_mutex_unlock(&srv->mu);
    if (applied) {
        finish_applied(node, g);
    } else if (mine) {
        answer_group(&done, TALLY_ok, why);
        group_answered(srv, g);
    }
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

/* Under mu: a group not in flight; NULL when every one is. */
static pending_group *free_group(cluster_node *node)
{
    for (unsigned i = 0; i < TALLY_CLUSTER_GROUPS_IN_FLIGHT; i++)
        if (!node->pending[i].in_use && node->pending[i].group)
            return &node->pending[i];
    return NULL;
}

/* Under mu: wait for writes and a group to take them in (ending the
 * groups that are the writer's to end meanwhile: end_groups); while none
 * come, tick when due. NULL when tallyd stops. */
static pending_group *wait_for_writes(cluster_node *node)
{
    server *srv = node->srv;
    int64_t every = srv->opt->cluster_tick_ms;
    for (;;) {
        end_groups(node, false);
        pending_group *g = free_group(node);
        if (srv->stopping)
            return NULL;
        if (g && srv->queue_head)
            return g;
        int64_t wait_ms = 1000; /* the deadlines are looked at about once a second */
        if (srv->queue_head == NULL && every > 0) {
            int64_t idle = clock_mono_ms() - node->last_apply_mono_ms;
            if (idle >= every && !cluster_checks_diverged(srv)) {
                node->last_apply_mono_ms = clock_mono_ms(); /* the next try one interval on */
                pthread_mutex_unlock(&srv->mu);
                publish_tick(node);
                pthread_mutex_lock(&srv->mu);
                continue;
            }
            if (every - idle < wait_ms)
                wait_ms = every - idle;
        }
        struct timespec at = clock_realtime_in_ms(wait_ms);
        pthread_cond_timedwait(&srv->writer_cv, &srv->mu, &at);
    }
}

/* Each group in flight gets its own array of requests: the engine's two,
 * and the others allocated here (one that cannot be leaves fewer in
 * flight). */
static void groups_alloc(cluster_node *node)
{
    server *srv = node->srv;
    for (unsigned i = 0; i < TALLY_CLUSTER_GROUPS_IN_FLIGHT; i++)
        node->pending[i].group = i < 2 ? srv->groups[i] : calloc(srv->slot_count, sizeof(slot *));
}

static void groups_free(cluster_node *node)
{
    for (unsigned i = 2; i < TALLY_CLUSTER_GROUPS_IN_FLIGHT; i++) {
        free(node->pending[i].group);
        node->pending[i].group = NULL;
    }
}

/* Under mu, tallyd stopping: every group in flight ended, the applier's
 * (claimed) by the applier. */
static void end_every_group(cluster_node *node)
{
    server *srv = node->srv;
    for (;;) {
        end_groups(node, true);
        bool left = false;
        for (unsigned i = 0; i < TALLY_CLUSTER_GROUPS_IN_FLIGHT; i++)
            left |= node->pending[i].in_use;
        if (!left)
            return;
        struct timespec at = clock_realtime_in_ms(100);
        pthread_cond_timedwait(&srv->writer_cv, &srv->mu, &at);
    }
}

static void *node_writer_main(void *arg)
{
    server *srv = arg;
    cluster_node *node = srv->cluster;
    groups_alloc(node);
    for (;;) {
        pthread_mutex_lock(&srv->mu);
        pending_group *g = wait_for_writes(node);
        uint32_t n = g ? take_group(srv, g->group) : 0;
        pthread_mutex_unlock(&srv->mu);
        if (n == 0)
            break;
        propose(node, g, n);
    }
    pthread_mutex_lock(&srv->mu);
    end_every_group(node);
    pthread_mutex_unlock(&srv->mu);
    writer_refuse_queued(srv);
    groups_free(node);
    return NULL;
}

/* ---- the applier ---- */

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

/* Last of each message in its transaction: the state digest after it
 * (checkpoint.h) and the position, recorded together. */
static int record_position(store_txn *txn, void *arg)
{
    apply_ctx *ctx = arg;
    log_head head;
    int rc = log_head_get(txn, &head);
    cluster_digest_step d;
    cluster_digest_begin(&d, ctx->digest_before, ctx->p.seq, ctx->p.hash);
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

/* The slots to apply for a cmd message: the writer's own group (*own,
 * claimed: the applier answers it) when the message is one it has in
 * flight, else the requests decoded into
 * temps and list from base on (reserved). A request that does not decode
 * (which no node of this version sends) is left out, the same on every
 * node. */
static uint32_t message_slots(cluster_node *node, const cluster_message *m, const cluster_cmd *c,
                              uint32_t base, slot ***out, pending_group **own)
{
    server *srv = node->srv;
    pthread_mutex_lock(&srv->mu);
    pending_group *pg = NULL;
    for (unsigned i = 0; i < TALLY_CLUSTER_GROUPS_IN_FLIGHT && pg == NULL && m->msg_id; i++) {
        pending_group *g = &node->pending[i];
        if (g->in_use && g->active && !g->claimed && g->n == c->count &&
            strcmp(g->msg_id, m->msg_id) == 0)
            pg = g;
    }
    if (pg)
        pg->claimed = true;
    pthread_mutex_unlock(&srv->mu);
    *own = pg;
    if (pg) {
        *out = pg->group;
        return pg->n;
    }
    assert(base + c->count <= node->temps_count);
    slot **list = node->list + base;
    uint32_t k = 0;
    for (uint32_t i = 0; i < c->count; i++) {
        slot *t = &node->temps[base + i];
        t->srv = srv;
        int rc = net_request_decode_stream(&t->req, c->cmds[i].via.bin.ptr,
                                           c->cmds[i].via.bin.size);
        if (rc == TALLY_ok &&
            (t->req.op->kind == NET_KIND_WRITE || t->req.op->kind == NET_KIND_SUBSCRIBER))
            list[k++] = t;
        else
            net_log(NET_LOG_WARN, "cluster: position %" PRIu64 " request %u left out: %s",
                    m->seq, i, tally_strerror(rc));
    }
    uint64_t at = srv->opt->test_cluster_diverge_at;
    if (at > 0 && m->seq >= at && !node->perturbed && k > 0) { /* tests: a real divergence */
        net_log(NET_LOG_WARN, "cluster: --test-cluster-diverge-at: position %" PRIu64
                " applied without its last request", m->seq);
        net_request_reset(&list[--k]->req);
        node->perturbed = true;
    }
    *out = list;
    return k;
}

/* The position seq applied (rc TALLY_ok; the log's head now head_seq) or
 * given up (stopping): readers and parked reads are told, and the
 * requests of the writer's group it held (own) answered. */
static void note_applied(cluster_node *node, uint64_t seq, int rc, pending_group *own,
                         int64_t time_ms, uint64_t head_seq)
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
    pending_group done;
    bool answer = false;
    if (own) {
        own->applied = true;
        own->rc = rc;
        own->now_ms = time_ms;
        own->seq = seq;
        own->applied_ns = clock_mono_ns();
        /* answered here, right after its commit, when JetStream's PubAck
         * named this position (or the apply gave up: its fault); else the
         * writer confirms the position first (finish_applied), once its
         * publish returned */
        answer = own->proposed && (rc != TALLY_ok || (own->publish_rc == TALLY_ok &&
                                                      own->ack_seq == seq));
        own->handed_back = own->proposed && !answer;
        if (own->handed_back)
            pthread_cond_broadcast(&srv->writer_cv);
        done = *own;
    }
    pthread_cond_broadcast(&srv->waiter_cv);
    pthread_mutex_unlock(&srv->mu);
    if (answer) {
        answer_group(&done, TALLY_ok, NULL);
        group_answered(srv, own);
    }
}

/* A message read: its position record begun (time, hash) and, for a cmd,
 * its group unpacked. time_ms: the previous message's time, then this
 * one's (max(its time, the previous)). false when its version is newer
 * than this tallyd's (nothing of it to release). */
static bool item_begin(const cluster_message *m, batch_item *it, int64_t *time_ms)
{
    *it = (batch_item){.m = m, .ctx = {.p = {.seq = m->seq, .time_ms = *time_ms}}};
    sha256_digest(m->data, m->len, it->ctx.p.hash);
    it->is_cmd = cluster_subject_is(m->subject, "cmd");
    int decoded = it->is_cmd ? cluster_cmd_unpack(m->data, m->len, &it->c) : TALLY_ok;
    if (decoded == TALLY_unsupported_version) {
        cluster_cmd_release(&it->c);
        it->is_cmd = false;
        return false;
    }
    int64_t tick_ms;
    it->is_group = it->is_cmd && decoded == TALLY_ok;
    if (it->is_group) {
        if (it->c.time_ms > it->ctx.p.time_ms)
            it->ctx.p.time_ms = it->c.time_ms;
    } else if (cluster_subject_is(m->subject, "tick") &&
               cluster_tick_unpack(m->data, m->len, &tick_ms) == TALLY_ok) {
        if (tick_ms > it->ctx.p.time_ms)
            it->ctx.p.time_ms = tick_ms;
    } else if (it->is_cmd) {
        net_log(NET_LOG_WARN, "cluster: position %" PRIu64 " is no cmd message: applied as "
                "nothing", m->seq);
    }
    *time_ms = it->ctx.p.time_ms;
    return true;
}

/* Messages items[0..count-1] (begun) applied in one transaction when
 * several, else (or after a fault of the shared one) each in its own,
 * each tried again until it commits or tallyd stops. The results in
 * rcs. Their slots are set up first (decoded, or the writer's own). */
static void apply_items(cluster_node *node, batch_item *items, uint32_t count, int *rcs)
{
    server *srv = node->srv;
    uint32_t total = 0;
    for (uint32_t k = 0; k < count; k++)
        total += items[k].is_group ? items[k].c.count : 0;
    bool reserved = temps_reserve(node, total);
    for (uint32_t k = 0, base = 0; k < count; k++) {
        batch_item *it = &items[k];
        it->ctx.digest_before = k == 0 ? node->digest : items[k - 1].ctx.p.digest;
        if (it->is_group && reserved)
            it->n = message_slots(node, it->m, &it->c, base, &it->group, &it->own);
        else if (it->is_group)
            it->n = UINT32_MAX;
        base += it->is_group ? it->c.count : 0;
        it->ctx.group = it->group;
        it->ctx.n = it->n == UINT32_MAX ? 0 : it->n;
        node->wm[k] = (writer_message){.now = it->ctx.p.time_ms, .group = it->group,
                                       .n = it->ctx.n, .before_commit = record_position,
                                       .ctx = &it->ctx};
    }
    int rc = reserved ? TALLY_ok : TALLY_out_of_memory;
    if (rc == TALLY_ok && count > 1)
        rc = writer_apply_messages(srv, node->wm, count);
    for (uint32_t k = 0; k < count; k++)
        rcs[k] = rc;
    if (rc == TALLY_ok && count > 1)
        return;
    if (count > 1 && rc != TALLY_out_of_memory)
        net_log(NET_LOG_WARN, "cluster: positions %" PRIu64 "-%" PRIu64 " not applied together: "
                "%s; one by one", items[0].m->seq, items[count - 1].m->seq, tally_strerror(rc));
    for (uint32_t k = 0; k < count; k++) {
        writer_message *w = &node->wm[k];
        for (;;) {
            rcs[k] = items[k].n == UINT32_MAX ? TALLY_out_of_memory
                     : writer_apply_message(srv, w->now, w->group, w->n, record_position,
                                            w->ctx, &w->before, &w->after);
            if (rcs[k] == TALLY_ok || stopping(srv))
                break;
            net_log(NET_LOG_ERROR, "cluster: position %" PRIu64 " not applied: %s; trying again",
                    items[k].m->seq, tally_strerror(rcs[k]));
            usleep(APPLY_RETRY_US);
        }
        if (rcs[k] != TALLY_ok) { /* stopping: the rest is not applied either */
            for (uint32_t j = k + 1; j < count; j++)
                rcs[j] = rcs[k];
            return;
        }
    }
}

/* After items[0..count-1] were applied (or given up: rcs): the node's
 * time and digest move on, readers and the writer are told, checkpoints
 * compared or published, the events handed to the publisher, and what
 * was decoded released. */
static void items_done(cluster_node *node, batch_item *items, uint32_t count, const int *rcs)
{
    server *srv = node->srv;
    uint64_t from = 0, to = 0;
    for (uint32_t k = 0; k < count; k++) {
        batch_item *it = &items[k];
        writer_message *w = &node->wm[k];
        int64_t before_ms = node->last_time_ms;
        if (rcs[k] == TALLY_ok) {
            node->last_time_ms = it->ctx.p.time_ms;
            memcpy(node->digest, it->ctx.p.digest, CLUSTER_HASH_BYTES);
            memcpy(node->applied_hash, it->ctx.p.hash, SHA256_BYTES);
        }
        note_applied(node, it->m->seq, rcs[k], it->own, it->ctx.p.time_ms, w->after.seq);
        if (rcs[k] == TALLY_ok)
            cluster_checks_after(&node->checks, it->m, node->digest, before_ms,
                                 it->ctx.p.time_ms);
        if (rcs[k] == TALLY_ok && w->after.seq > w->before.seq) {
            if (from == 0)
                from = w->before.seq + 1;
            to = w->after.seq;
        }
        if (!it->own && it->n != UINT32_MAX)
            for (uint32_t i = 0; i < it->n; i++)
                net_request_reset(&it->group[i]->req);
        if (it->is_cmd)
            cluster_cmd_release(&it->c);
    }
    if (srv->publish && to >= from && from > 0)
        srv->publish(srv, from, to);
}

/* Apply the messages read together, in order: in one transaction each run
 * of them up to and including a checkpoint (whose vote is compared before
 * anything after it is applied: a node found diverged applies no more,
 * and what it read past that is not applied). A message of a version
 * newer than this tallyd's stops the applying (logged) after those before
 * it. */
static void apply_messages(cluster_node *node, const cluster_message *msgs, uint32_t count)
{
    server *srv = node->srv;
    batch_item *items = node->items;
    int rcs[TALLY_CLUSTER_APPLY_MESSAGES_MAX];
    uint32_t done = 0;
    while (done < count && !cluster_checks_diverged(srv) && !stopping(srv)) {
        int64_t time_ms = node->last_time_ms;
        uint32_t n = 0;
        bool newer = false;
        while (done + n < count) {
            if (!item_begin(&msgs[done + n], &items[n], &time_ms)) {
                newer = true;
                break;
            }
            if (cluster_subject_is(msgs[done + n++].subject, "checkpoint"))
                break;
        }
        if (n > 0) {
            apply_items(node, items, n, rcs);
            items_done(node, items, n, rcs);
        }
        done += n;
        if (newer) {
            net_log(NET_LOG_ERROR, "cluster: cluster message version at position %" PRIu64
                    " is newer than this tallyd: applying stops (upgrade this node)",
                    msgs[done].seq);
            while (!stopping(srv))
                usleep(APPLY_RETRY_US);
            return;
        }
    }
}

/* After answers that said the stream ends before this node's position,
 * one that says otherwise: the stream's message at the position the first
 * of them found (node->suspect_seq) is this node's (they were a server's
 * old state: forgotten) or another (the stream was lost and has grown
 * again: this node stops serving). No answer: asked again next time. */
static void check_suspect(cluster_node *node)
{
    char id[MSG_ID_BYTES];
    uint8_t hash[SHA256_BYTES];
    int rc = cluster_stream_get(node->stream, node->suspect_seq, id, sizeof(id), hash);
    if (rc != TALLY_ok)
        return;
    if (memcmp(hash, node->suspect_hash, SHA256_BYTES) != 0)
        cluster_checks_stop(node->srv, "stream behind this node: it ended before position %" PRIu64
                            " and holds another message there now (%s) than the one this node "
                            "applied", node->suspect_seq, id[0] ? id : "without id");
    node->suspect_seq = 0;
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
     * STREAM_BEHIND_ANSWERS answers in a row, about a second apart, or,
     * when an answer says otherwise before, hold another message than
     * this node's at the position the first of them found it at (a lost
     * stream grown again past it). */
    if (last < position) {
        if (node->behind_answers++ == 0 && node->suspect_seq == 0) {
            node->suspect_seq = position;
            memcpy(node->suspect_hash, node->applied_hash, SHA256_BYTES);
        }
        if (node->behind_answers >= STREAM_BEHIND_ANSWERS)
            cluster_checks_stop(node->srv, "stream behind this node: this node applied position %"
                                PRIu64 ", the stream ends at %" PRIu64, position, last);
        else
            net_log(NET_LOG_WARN, "cluster: the stream ends at %" PRIu64 " before this node's "
                    "position %" PRIu64 " (answer %u of %d in a row before this node stops)",
                    last, position, node->behind_answers, STREAM_BEHIND_ANSWERS);
        return;
    }
    node->behind_answers = 0;
    if (node->suspect_seq > 0)
        check_suspect(node);
}

/* --test-cluster-shift-at POS (tests only): the stream as a consumer
 * served by a replica that lacks the message at POS would deliver it:
 * that message skipped (left out of m[0..count-1]), each later one a
 * position lower. The messages left. */
static size_t test_shifted(server *srv, cluster_message *m, size_t count)
{
    uint64_t at = srv->opt->test_cluster_shift_at;
    size_t kept = 0;
    for (size_t i = 0; i < count; i++) {
        if (at == 0 || m[i].seq < at) {
            m[kept++] = m[i];
        } else if (m[i].seq == at) {
            net_log(NET_LOG_WARN, "cluster: --test-cluster-shift-at: position %" PRIu64
                    " skipped, each later message read a position lower", m[i].seq);
        } else {
            m[kept] = m[i];
            m[kept++].seq--;
        }
    }
    return kept;
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
        size_t count = 0;
        rc = cluster_reader_next_batch(r, READ_WAIT_MS, TALLY_CLUSTER_APPLY_MESSAGES_MAX,
                                       TALLY_CLUSTER_APPLY_BYTES_MAX, node->msgs, &count);
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
        for (size_t i = 0; i < count; i++)
            if (node->msgs[i].corrected)
                net_log(NET_LOG_WARN, "cluster: position %" PRIu64 ": the server this node reads "
                        "the stream from held another message there than the stream's leader "
                        "(a stale copy); the leader's is applied", node->msgs[i].seq);
        count = test_shifted(srv, node->msgs, count);
        apply_messages(node, node->msgs, (uint32_t)count);
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
