/*
 * cluster_node.c — tallyd as a cluster node (cluster_node.h,
 * docs/CLUSTER.md): the applier and the node's hooks. Two threads run a
 * node: the writer (cluster_writer.c) publishes groups of writes to the
 * stream; the applier here reads the stream in order and applies every
 * message — its own, matched by Nats-Msg-Id, on the very slots the writer
 * waits on; the other nodes' decoded from the message — through
 * writer_apply_message, recording meta/cluster_position in the same
 * transaction, several messages that arrived together in one commit. A
 * message's time is max(its time, the previous message's), so time comes
 * from the log, never from the applying node.
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
#define DIFFERED_LOG_EVERY_MS 10000

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

static void node_interrupt(server *srv)
{
    if (srv->cluster && srv->cluster->stream)
        cluster_stream_interrupt(srv->cluster->stream);
}

/* ---- the applier ---- */

/* The reply of s's outcome as the node that took it answers it, less
 * what only this node knows (net_out.for_digest: a subscriber's last
 * fetch, in this node's memory since it started): its SHA-256 into the
 * digest. A subscriber write's reply reads the store (cursor figures, the
 * events a fetch leased): from txn, the message's own transaction, which
 * holds what a read after its commit sees. */
static int digest_reply(cluster_digest_step *d, store_txn *txn, slot *s, int64_t now_ms)
{
    net_out o;
    if (net_out_begin(&o) != 0)
        return TALLY_out_of_memory;
    o.for_digest = true;
    s->req.op->reply(&o, txn, &s->req, &s->res, TALLY_ok, now_ms);
    nng_msg *m = net_out_take(&o);
    if (m == NULL)
        return TALLY_out_of_memory;
    cluster_digest_reply(d, nng_msg_body(m), nng_msg_len(m));
    nng_msg_free(m);
    return TALLY_ok;
}

/* Last of each message in its transaction: the state digest after it
 * (checkpoint.h) and the position, recorded together; and the message's
 * inbox keys written as their own inbox_time entry (ledger/inbox_time.h),
 * as every node writes them however many messages its transaction
 * applies, so that retention removes the same idempotency records at the
 * same log time on every node. */
static int record_position(store_txn *txn, void *arg)
{
    apply_ctx *ctx = arg;
    log_head head;
    int rc = store_txn_collect_flush(txn, STORE_COLLECT_INBOX_TIME);
    if (rc == TALLY_ok)
        rc = log_head_get(txn, &head);
    cluster_digest_step d;
    cluster_digest_begin(&d, ctx->digest_before, ctx->p.seq, ctx->p.hash);
    for (uint32_t i = 0; rc == TALLY_ok && i < ctx->n; i++)
        rc = digest_reply(&d, txn, ctx->group[i], ctx->p.time_ms);
    if (rc != TALLY_ok)
        return rc;
    cluster_digest_end(&d, head.seq, head.hash, ctx->p.digest);
    return cluster_position_put(txn, &ctx->p);
}

bool cluster_node_stopping(server *srv)
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
         * writer confirms the position first (cluster_group_finish_applied), once its
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
        cluster_group_answer(&done, TALLY_ok, NULL);
        cluster_group_answered(srv, own);
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
            if (rcs[k] == TALLY_ok || cluster_node_stopping(srv))
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
    while (done < count && !cluster_checks_diverged(srv) && !cluster_node_stopping(srv)) {
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
            while (!cluster_node_stopping(srv))
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
/* The stream's replicas changed while the node runs (an operator's
 * stream edit): logged, as an error below what --cluster-replicas
 * requires; readers read from a majority of the new number. */
static void note_replicas(cluster_node *node)
{
    uint32_t required = 0;
    int64_t replicas = cluster_stream_replicas(node->stream, &required);
    if (node->replicas_seen != 0 && replicas != node->replicas_seen) {
        bool below = replicas < (int64_t)required;
        net_log(below ? NET_LOG_ERROR : NET_LOG_WARN,
                "cluster: the stream's replicas changed from %" PRId64 " to %" PRId64 ": each "
                "position is now applied once %" PRId64 " of them hold it%s", node->replicas_seen,
                replicas, replicas / 2 + 1,
                below ? "; that is below the replicas this node requires (--cluster-replicas): "
                        "an acknowledged write is held by fewer servers than docs/CLUSTER.md's "
                        "guarantees assume: set them back"
                      : "");
    }
    node->replicas_seen = replicas;
}

static void note_stream_last(cluster_node *node)
{
    uint64_t first, last;
    if (cluster_stream_bounds(node->stream, &first, &last) != TALLY_ok)
        return;
    note_replicas(node);
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

/* The reader's copies that differed, logged at most every
 * DIFFERED_LOG_EVERY_MS (a diverged store differs at every position). */
static void note_differed(cluster_node *node, cluster_reader *r)
{
    char differed[CLUSTER_DIFFERED_BYTES];
    if (!cluster_reader_differed(r, differed, sizeof(differed)))
        return;
    int64_t now = clock_mono_ms();
    if (node->differed_logged_ms != 0 && now - node->differed_logged_ms < DIFFERED_LOG_EVERY_MS) {
        node->differed_since++;
        return;
    }
    net_log(NET_LOG_WARN, "cluster: the stream's replicas differ at %s (and at %" PRIu64
            " positions since the last such line); this node applies a position only once a "
            "majority of them hold the same message there, and reads it again until they do "
            "(docs/CLUSTER.md, \"Applying\")", differed, node->differed_since);
    node->differed_logged_ms = now;
    node->differed_since = 0;
}

/* Consumers r could not make: logged with why, at most every
 * DIFFERED_LOG_EVERY_MS (they are tried again on every read). */
static void note_place_failed(cluster_node *node, cluster_reader *r)
{
    node->place_failures += cluster_reader_place_failed(r, node->place_why,
                                                        sizeof(node->place_why));
    int64_t now = clock_mono_ms();
    if (node->place_failures == 0 ||
        (node->place_logged_ms != 0 && now - node->place_logged_ms < DIFFERED_LOG_EVERY_MS))
        return;
    net_log(NET_LOG_WARN, "cluster: a consumer of the stream could not be made (%" PRIu64
            " times since the last such line; tried again on every read): %s", node->place_failures,
            node->place_why);
    node->place_logged_ms = now;
    node->place_failures = 0;
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
    while (!cluster_node_stopping(srv)) {
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
        note_differed(node, r);
        note_place_failed(node, r);
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
            if (node->msgs[i].corrected && node->differed_since == 0)
                net_log(NET_LOG_WARN, "cluster: position %" PRIu64 ": the stream's replicas "
                        "this node read held different messages there (a server held one the "
                        "stream does not: a stale copy); what a majority of them holds is "
                        "applied", node->msgs[i].seq);
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
    .writer_main = cluster_writer_main,
    .applier_main = node_applier_main,
    .interrupt = node_interrupt,
    .close = node_close,
};
