/*
 * cluster_writer.c — a cluster node's writer (docs/CLUSTER.md, "Writes"):
 * it takes groups of writes from the engine's queue and publishes each as
 * one cmd message (the requests as received, without their tokens, and
 * the time this node assigns), up to TALLY_CLUSTER_GROUPS_IN_FLIGHT
 * groups at once; the applier (cluster_node.c) applies the message on the
 * group's slots and answers them, at the position JetStream's PubAck
 * named; a group the applier cannot answer so is answered here (its
 * position confirmed with a majority of the stream's replicas first, or
 * its fault). An
 * idle writer appends ticks (a time, no commands) so that time moves on
 * while nothing is written.
 */
#include "net/server/cluster_node_internal.h"

#include "common/clock.h"
#include "common/error.h"
#include "common/limits.h"
#include "net/cluster/message.h"
#include "net/cluster/stream.h"
#include "net/engine/engine.h"
#include "net/metrics/metrics.h"
#include "net/ops/ops_webhook.h"
#include "net/server/cluster_checks.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define PUBLISH_RETRY_US 100000
/* A group's request bytes in one message: with one request of the largest
 * size (TALLY_REQUEST_BYTES_MAX) more it stays below NATS's default
 * max_payload, 1 MiB. */
#define GROUP_BYTES_MAX (384 * 1024)

_Static_assert(GROUP_BYTES_MAX + TALLY_REQUEST_BYTES_MAX + 4096 <= 1024 * 1024,
               "a group's message fits NATS's default max_payload");

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
void cluster_group_answer(const pending_group *g, int confirmed, const char *why)
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
void cluster_group_answered(server *srv, pending_group *g)
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
 * the message at done->seq through the node's reader; acked: JetStream's
 * PubAck came and named ack_seq, the stream leader's word once a quorum
 * holds the message. The same position: TALLY_ok. No PubAck:
 * TALLY_cluster_unavailable (retry with the same key). Another position:
 * the message a majority of the stream's replicas hold at done->seq is
 * read (cluster_stream_get, as the reader reads): this one, the same
 * bytes (data), is TALLY_ok (a retried publish stored twice, answered at
 * its first copy, where every node applies it); another, or none (the
 * stream's first message past done->seq), means this node applied at
 * done->seq what the stream does not hold there: it stops serving
 * (TALLY_cluster_diverged); no majority in time is
 * TALLY_cluster_unavailable. why: the detail of a refusal. */
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
        if (rc != TALLY_unreachable || clock_mono_ms() >= until || cluster_node_stopping(node->srv))
            return rc;
        usleep(PUBLISH_RETRY_US);
    }
}

/* The writer ends g, applied here (claimed) and published, when the
 * applier could not: its position confirmed with JetStream first (a
 * publish again when no PubAck came; confirm_position), which takes
 * requests the applier does not wait for. */
void cluster_group_finish_applied(cluster_node *node, pending_group *g)
{
    server *srv = node->srv;
    pthread_mutex_lock(&srv->mu);
    pending_group done = *g;
    pthread_mutex_unlock(&srv->mu);
    char why[CLUSTER_WHY_BYTES];
    snprintf(why, sizeof(why), "%s", done.why);
    int confirmed = TALLY_ok;
    if (done.rc == TALLY_ok && cluster_node_stopping(srv)) {
        /* no requests to JetStream now: a stop waits for none (a retry replays) */
        snprintf(why, sizeof(why), "tallyd is stopping: applied here at position %" PRIu64
                 ", its position not confirmed with JetStream: retry with the same key",
                 done.seq);
        confirmed = TALLY_cluster_unavailable;
    } else if (done.rc == TALLY_ok) {
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
    cluster_group_answer(&done, confirmed, why);
    cluster_group_answered(srv, g);
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
            cluster_group_finish_applied(node, g);
            pthread_mutex_lock(&srv->mu);
            continue;
        }
        if (!g->in_use || !g->proposed || g->claimed || (!all && now < g->deadline_ms))
            continue;
        g->active = false; /* applied, if ever, from the stream's copy */
        pending_group done = *g;
        pthread_mutex_unlock(&srv->mu);
        cluster_group_answer(&done, TALLY_ok, NULL);
        cluster_group_answered(srv, g);
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
 * PubAck came or at another position (cluster_group_finish_applied). */
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
        cluster_group_finish_applied(node, g);
    } else if (mine) {
        cluster_group_answer(&done, TALLY_ok, why);
        cluster_group_answered(srv, g);
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

void *cluster_writer_main(void *arg)
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
