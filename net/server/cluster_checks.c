/*
 * cluster_checks.c — checkpoints published and compared, and a node that
 * stops serving (cluster_checks.h).
 */
#include "net/server/cluster_checks.h"

#include "common/error.h"
#include "common/limits.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#define CHECKPOINT_ID_BYTES 96

bool cluster_checks_diverged(const server *srv)
{
    return atomic_load_explicit(&srv->cluster_diverged, memory_order_acquire);
}

void cluster_checks_stop(server *srv, const char *fmt, ...)
{
    char why[sizeof(srv->cluster_stop_why)];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof(why), fmt, ap);
    va_end(ap);
    pthread_mutex_lock(&srv->mu); /* the applier and the writer may both stop it: the first says why */
    bool first = !cluster_checks_diverged(srv);
    if (first) {
        memcpy(srv->cluster_stop_why, why, sizeof(why));
        atomic_store_explicit(&srv->cluster_diverged, true, memory_order_release);
        pthread_cond_broadcast(&srv->waiter_cv);
    }
    pthread_mutex_unlock(&srv->mu);
    if (first)
        net_log(NET_LOG_ERROR, "cluster: node %s stops serving: %s; writes and reads are answered "
                "cluster_diverged (docs/CLUSTER.md, \"Divergence is detected, never served\")",
                srv->opt->cluster_node, why);
}

/* This node's checkpoint at seq: published once (the Nats-Msg-Id names
 * node and position); not published is logged, the next one comes. */
static void publish(cluster_checks *k, uint64_t seq, const uint8_t digest[CLUSTER_HASH_BYTES])
{
    const char *name = k->srv->opt->cluster_node;
    char id[CHECKPOINT_ID_BYTES];
    snprintf(id, sizeof(id), "checkpoint-%s-%" PRIu64, name, seq);
    msgpack_sbuffer sb;
    msgpack_sbuffer_init(&sb);
    uint64_t at;
    bool duplicate;
    char why[CLUSTER_WHY_BYTES] = "";
    int rc = cluster_checkpoint_pack(&sb, name, seq, digest) == 0
                 ? cluster_stream_publish(k->stream, "checkpoint", id, sb.data, sb.size, &at,
                                          &duplicate, why, sizeof(why))
                 : TALLY_out_of_memory;
    msgpack_sbuffer_destroy(&sb);
    if (rc != TALLY_ok)
        net_log(NET_LOG_WARN, "cluster: checkpoint at position %" PRIu64 " not published: %s",
                seq, why[0] ? why : tally_strerror(rc));
}

static void note_verdict(cluster_checks *k, const cluster_verdict *v)
{
    server *srv = k->srv;
    pthread_mutex_lock(&srv->mu);
    if (v->seq >= srv->cluster_checkpoint_seq) {
        srv->cluster_checkpoint_seq = v->seq;
        srv->cluster_checkpoint_agreeing = v->agreeing;
        srv->cluster_checkpoint_nodes = v->nodes;
    }
    pthread_mutex_unlock(&srv->mu);
    if (v->kind == CLUSTER_VERDICT_DIVERGED)
        cluster_checks_stop(srv, "diverged at position %" PRIu64 ": this node's state digest "
                            "differs from the majority's, held by nodes %s (of %u heard)",
                            v->seq, v->majority, v->nodes);
    else if (v->report && v->kind == CLUSTER_VERDICT_AGREES)
        net_log(NET_LOG_ERROR, "cluster: checkpoint at position %" PRIu64 ": node(s) %s diverged "
                "from the majority (%s), this node among it", v->seq, v->minority, v->majority);
}

static bool subject_is(const char *subject, const char *kind)
{
    const char *dot = strrchr(subject, '.');
    return dot && strcmp(dot + 1, kind) == 0;
}

/* Whether m's position is a checkpoint's: every N positions, and the
 * first of a new span of the log's time. Both read only the stream's
 * order and the log's times, the same on every node. */
static bool is_checkpoint(const cluster_checks *k, uint64_t seq, int64_t before_ms,
                          int64_t time_ms)
{
    unsigned every = k->srv->opt->cluster_checkpoint_every;
    if (every > 0 && seq % every == 0)
        return true;
    return before_ms > 0 && time_ms / TALLY_CLUSTER_CHECKPOINT_LOG_MS !=
                                before_ms / TALLY_CLUSTER_CHECKPOINT_LOG_MS;
}

void cluster_checks_after(cluster_checks *k, const cluster_message *m,
                          const uint8_t digest[CLUSTER_HASH_BYTES], int64_t before_ms,
                          int64_t time_ms)
{
    cluster_checkpoint cp;
    cluster_verdict v;
    if (subject_is(m->subject, "checkpoint") &&
        cluster_checkpoint_unpack(m->data, m->len, &cp) == TALLY_ok &&
        cluster_checkpoints_vote(&k->checkpoints, &cp, &v))
        note_verdict(k, &v);
    if (is_checkpoint(k, m->seq, before_ms, time_ms) && !cluster_checks_diverged(k->srv)) {
        cluster_checkpoints_own(&k->checkpoints, m->seq, digest);
        publish(k, m->seq, digest);
    }
}
