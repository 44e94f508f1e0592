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
#define PUBLISH_RETRY_US 100000
/* A group's request bytes in one message: with one request of the largest
 * size (TALLY_REQUEST_BYTES_MAX) more it stays below NATS's default
 * max_payload, 1 MiB. */
#define GROUP_BYTES_MAX (384 * 1024)
#define MSG_ID_BYTES 96

typedef struct cluster_node cluster_node;
_Static_assert(GROUP_BYTES_MAX + TALLY_REQUEST_BYTES_MAX + 4096 <= 1024 * 1024,
               "a group's message fits NATS's default max_payload");

/* meta "cluster_position": seq (u64 be), time ms (i64 be), the SHA-256 of
 * the message at seq, the state digest after it (checkpoint.h). A record
 * without the digest (a store of a tallyd before checkpoints) reads as
 * digest zero. */
static const char meta_position[] = "cluster_position";
#define POSITION_RECORD_BYTES_V1 (8 + 8 + SHA256_BYTES)
#define POSITION_RECORD_BYTES (POSITION_RECORD_BYTES_V1 + CLUSTER_HASH_BYTES)

/* The writer's group being proposed (one at a time), under srv->mu. */
typedef struct pending_group {
    bool active;  /* published or being published; the applier may claim it */
    bool claimed; /* the applier applies it on these slots */
    bool applied; /* ... and committed (rc) */
    int rc;
    char msg_id[MSG_ID_BYTES];
    slot **group;
    uint32_t n;
    int64_t now_ms;
    uint64_t seq;
} pending_group;

struct cluster_node {
    server *srv;
    cluster_stream *stream;
    cluster_genesis genesis;
    bool has_genesis;
    uint64_t boot_id; /* with a counter, this run's Nats-Msg-Ids */
    uint64_t counter;
    int64_t last_propose_ms;
    pending_group pending; /* under srv->mu */
    int64_t last_apply_mono_ms; /* under srv->mu: when the applier last committed */
    /* The applier's own. */
    int64_t last_time_ms;
    slot *temps; /* the other nodes' requests, decoded */
    uint32_t temps_count;
    slot **list;
    uint32_t list_count;
    uint8_t digest[CLUSTER_HASH_BYTES]; /* the state digest after the last applied */
    cluster_checks checks;
    bool perturbed; /* --test-cluster-diverge-at done */
};

typedef struct position_record {
    uint64_t seq;
    int64_t time_ms;
    uint8_t hash[SHA256_BYTES];
    uint8_t digest[CLUSTER_HASH_BYTES];
} position_record;

static void put_be64(uint8_t *b, uint64_t v)
{
    for (int i = 7; i >= 0; i--, v >>= 8)
        b[i] = (uint8_t)v;
}

static uint64_t get_be64(const uint8_t *b)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v = v << 8 | b[i];
    return v;
}

static int position_put(store_txn *txn, const position_record *p)
{
    uint8_t b[POSITION_RECORD_BYTES];
    put_be64(b, p->seq);
    put_be64(b + 8, (uint64_t)p->time_ms);
    memcpy(b + 16, p->hash, SHA256_BYTES);
    memcpy(b + POSITION_RECORD_BYTES_V1, p->digest, CLUSTER_HASH_BYTES);
    return store_put(txn, STORE_DB_META, meta_position, strlen(meta_position), b, sizeof(b), 0);
}

/* TALLY_ok with *p (all zero when the store has applied nothing). */
static int position_get(store_txn *txn, position_record *p)
{
    memset(p, 0, sizeof(*p));
    MDB_val v;
    int rc = store_get(txn, STORE_DB_META, meta_position, strlen(meta_position), &v);
    if (rc == TALLY_not_found)
        return TALLY_ok;
    if (rc != TALLY_ok)
        return rc;
    if (v.mv_size != POSITION_RECORD_BYTES && v.mv_size != POSITION_RECORD_BYTES_V1)
        return TALLY_corrupt_record;
    const uint8_t *b = v.mv_data;
    p->seq = get_be64(b);
    p->time_ms = (int64_t)get_be64(b + 8);
    memcpy(p->hash, b + 16, SHA256_BYTES);
    if (v.mv_size == POSITION_RECORD_BYTES)
        memcpy(p->digest, b + POSITION_RECORD_BYTES_V1, CLUSTER_HASH_BYTES);
    return TALLY_ok;
}

/* ---- start ---- */

/* The message at seq, through a reader of its own: TALLY_ok and its bytes
 * handed to fn. */
static int read_one(cluster_node *node, uint64_t seq, void (*fn)(const cluster_message *, void *),
                    void *ctx)
{
    cluster_reader *r;
    int rc = cluster_reader_open(&r, node->stream, seq);
    if (rc != TALLY_ok)
        return rc;
    cluster_message m;
    rc = cluster_reader_next(r, TALLY_CLUSTER_REQUEST_MS_DEFAULT, &m);
    if (rc == TALLY_ok && m.seq != seq)
        rc = TALLY_not_found;
    if (rc == TALLY_ok)
        fn(&m, ctx);
    cluster_reader_close(r);
    return rc;
}

static bool subject_is(const char *subject, const char *kind)
{
    const char *dot = strrchr(subject, '.');
    return dot && strcmp(dot + 1, kind) == 0;
}

static void take_genesis(const cluster_message *m, void *ctx)
{
    cluster_node *node = ctx;
    node->has_genesis = subject_is(m->subject, "genesis") &&
                        cluster_genesis_unpack(m->data, m->len, &node->genesis) == TALLY_ok;
}

/* The genesis, when the stream still holds its first message. */
static int read_genesis(cluster_node *node)
{
    uint64_t first, last;
    int rc = cluster_stream_bounds(node->stream, &first, &last);
    if (rc != TALLY_ok || last == 0 || first > 1)
        return rc;
    rc = read_one(node, 1, take_genesis, node);
    if (rc == TALLY_ok && !node->has_genesis) {
        net_log(NET_LOG_ERROR, "cluster: the stream's first message is no genesis of this "
                "format: is stream %s another program's?", cluster_stream_name(node->stream));
        return TALLY_invalid_argument;
    }
    return rc;
}

/* JetStream not answering now (no server, no leader: an election after a
 * server's loss): at start, waited out up to TALLY_CLUSTER_CONNECT_MS_MAX
 * rather than refused. */
static bool is_transient(int rc)
{
    return rc == TALLY_unreachable || rc == TALLY_timed_out;
}

typedef int (*start_step)(cluster_node *node, void *ctx);

/* step, again while JetStream does not answer, up to the bound; a
 * refusal for that reason is logged here (a step logs its own others). */
static int with_patience(cluster_node *node, start_step step, void *ctx)
{
    int64_t until = clock_mono_ms() + TALLY_CLUSTER_CONNECT_MS_MAX;
    for (;;) {
        int rc = step(node, ctx);
        if (!is_transient(rc))
            return rc;
        if (clock_mono_ms() >= until) {
            net_log(NET_LOG_ERROR, "cluster: refusing to start: JetStream did not answer for "
                    "%d s: %s", TALLY_CLUSTER_CONNECT_MS_MAX / 1000, tally_strerror(rc));
            return rc;
        }
        net_log(NET_LOG_INFO, "cluster: waiting for JetStream: %s", tally_strerror(rc));
        usleep(CLUSTER_CONNECT_RETRY_US);
    }
}

static int read_genesis_step(cluster_node *node, void *ctx)
{
    (void)ctx;
    return read_genesis(node);
}

static int node_connect(server *srv, uint8_t instance[16], bool *has_instance)
{
    cluster_node *node = calloc(1, sizeof(*node));
    if (node == NULL)
        return TALLY_out_of_memory;
    node->srv = srv;
    srv->cluster = node;
    int rc = cluster_connect(srv->opt, &node->stream);
    node->checks = (cluster_checks){.srv = srv, .stream = node->stream};
    if (rc == TALLY_ok)
        rc = with_patience(node, read_genesis_step, NULL);
    if (rc == TALLY_ok && node->has_genesis) {
        memcpy(instance, node->genesis.instance.bytes, 16);
        *has_instance = true;
    }
    return rc;
}

/* An empty stream: this store becomes the cluster's base. */
static int publish_genesis(cluster_node *node, const log_head *head)
{
    cluster_genesis g = {0};
    if (tally_id128_uuidv7(clock_wall_ms(), &g.cluster) != TALLY_ok)
        return TALLY_io_error;
    g.instance = *store_instance_id(node->srv->st);
    g.base_seq = head->seq;
    memcpy(g.base_hash, head->hash, CLUSTER_HASH_BYTES);
    msgpack_sbuffer sb;
    msgpack_sbuffer_init(&sb);
    uint64_t seq = 0;
    bool duplicate = false;
    char why[CLUSTER_WHY_BYTES] = "";
    int rc = cluster_genesis_pack(&sb, &g) == 0
                 ? cluster_stream_publish(node->stream, "genesis", "genesis", sb.data, sb.size,
                                          &seq, &duplicate, why, sizeof(why))
                 : TALLY_out_of_memory;
    msgpack_sbuffer_destroy(&sb);
    if (rc == TALLY_ok && seq != 1) {
        net_log(NET_LOG_ERROR, "cluster: the genesis landed at position %" PRIu64 ", not 1: "
                "another program appends to stream %s", seq, cluster_stream_name(node->stream));
        return TALLY_invalid_argument;
    }
    if (rc != TALLY_ok) {
        net_log(NET_LOG_ERROR, "cluster: cannot publish the genesis: %s",
                why[0] ? why : tally_strerror(rc));
        return rc;
    }
    rc = read_one(node, 1, take_genesis, node);
    return rc == TALLY_ok && !node->has_genesis ? TALLY_internal : rc;
}

typedef struct hash_check {
    const uint8_t *want;
    bool same;
} hash_check;

static void compare_hash(const cluster_message *m, void *ctx)
{
    hash_check *h = ctx;
    uint8_t got[SHA256_BYTES];
    sha256_digest(m->data, m->len, got);
    h->same = memcmp(got, h->want, SHA256_BYTES) == 0;
}

/* The store against the genesis: the same identity, and a store that has
 * applied nothing holds the cluster's base. */
static int check_against_genesis(cluster_node *node, const position_record *p,
                                 const log_head *head)
{
    const char *dir = node->srv->opt->data_dir;
    if (memcmp(store_instance_id(node->srv->st)->bytes, node->genesis.instance.bytes, 16) != 0) {
        net_log(NET_LOG_ERROR, "cluster: refusing to start: the store %s is not of this cluster "
                "(its instance id differs from the genesis's): start with an empty data "
                "directory or a backup of a node of this cluster", dir);
        return TALLY_invalid_argument;
    }
    if (p->seq == 0 && (head->seq != node->genesis.base_seq ||
                        memcmp(head->hash, node->genesis.base_hash, CLUSTER_HASH_BYTES) != 0)) {
        net_log(NET_LOG_ERROR, "cluster: refusing to start: the store %s (log head seq %" PRIu64
                ") is not the cluster's base (seq %" PRIu64 "): start from a backup of a node",
                dir, head->seq, node->genesis.base_seq);
        return TALLY_invalid_argument;
    }
    return TALLY_ok;
}

/* The stream against the store's position: it holds the message there,
 * the same one, and nothing before it was lost to age. */
static int check_position(cluster_node *node, const position_record *p)
{
    uint64_t first, last;
    int rc = cluster_stream_bounds(node->stream, &first, &last);
    if (rc != TALLY_ok)
        return rc;
    if (p->seq > last) {
        net_log(NET_LOG_ERROR, "cluster: refusing to start: stream behind this node: this node "
                "applied position %" PRIu64 ", the stream ends at %" PRIu64 " (docs/CLUSTER.md, "
                "\"Divergence is detected, never served\"; to start a new cluster from this "
                "store: --cluster-init on an empty stream)", p->seq, last);
        return TALLY_corrupt_record;
    }
    if (p->seq + 1 < first) {
        net_log(NET_LOG_ERROR, "cluster: refusing to start: position %" PRIu64 " is older than "
                "the stream's first message %" PRIu64 ": restore from another node's backup",
                p->seq, first);
        return TALLY_corrupt_record;
    }
    if (p->seq == 0 || p->seq < first)
        return TALLY_ok;
    hash_check h = {p->hash, false};
    rc = read_one(node, p->seq, compare_hash, &h);
    if (rc == TALLY_ok && !h.same) {
        net_log(NET_LOG_ERROR, "cluster: refusing to start: the stream holds another message at "
                "position %" PRIu64 " than the one this node applied", p->seq);
        return TALLY_corrupt_record;
    }
    return rc;
}

/* --cluster-init: this store, whatever it holds, the base of a new
 * cluster on an empty stream: its position (of a cluster it was a node
 * of, if any) forgotten, its log head the genesis's base. */
static int init_cluster(cluster_node *node, position_record *p, const log_head *head)
{
    store_txn t;
    position_record fresh = {.time_ms = p->time_ms}; /* time never goes back */
    int rc = store_txn_begin(node->srv->st, NULL, false, &t);
    if (rc == TALLY_ok && (rc = position_put(&t, &fresh)) == TALLY_ok)
        rc = store_txn_commit(&t);
    else if (rc == TALLY_ok)
        store_txn_abort(&t);
    if (rc != TALLY_ok)
        return rc;
    *p = fresh;
    net_log(NET_LOG_WARN, "cluster: --cluster-init: this store (log head seq %" PRIu64 ") is the "
            "base of a new cluster on stream %s; start the other nodes from a tally backup of "
            "this node", head->seq, cluster_stream_name(node->stream));
    return publish_genesis(node, head);
}

/* The stream as the store finds it, before the genesis checks: an empty
 * stream gets a genesis from a new store, or with --cluster-init from any
 * store; --cluster-init on a stream that holds messages is refused. */
static int start_on_stream(cluster_node *node, position_record *p, const log_head *head)
{
    uint64_t first = 0, last = 0;
    int rc = cluster_stream_bounds(node->stream, &first, &last);
    const char *name = cluster_stream_name(node->stream);
    bool init = node->srv->opt->cluster_init;
    if (rc == TALLY_ok && init && last > 0) {
        net_log(NET_LOG_ERROR, "cluster: refusing to start: --cluster-init makes a new cluster "
                "on an empty stream, and stream %s holds messages up to %" PRIu64 ": delete it "
                "(or name another with --cluster-stream) first, or start without "
                "--cluster-init to join it", name, last);
        return TALLY_invalid_argument;
    }
    if (rc != TALLY_ok || node->has_genesis)
        return rc;
    if (last == 0 && init)
        return init_cluster(node, p, head);
    if (last == 0 && (p->seq > 0 || head->seq > 0)) {
        if (p->seq > 0) /* never a genesis from a node ahead */
            return check_position(node, p);
        net_log(NET_LOG_ERROR, "cluster: refusing to start: stream %s is empty and this store "
                "holds a log (head seq %" PRIu64 "): start it with --cluster-init to make it "
                "the first node of a new cluster", name, head->seq);
        return TALLY_invalid_argument;
    }
    if (last == 0)
        return publish_genesis(node, head);
    if (p->seq == 0) {
        net_log(NET_LOG_ERROR, "cluster: refusing to start: the stream's genesis is gone "
                "(its first message is %" PRIu64 ") and this store has applied none of it: "
                "restore from another node's backup", first);
        return TALLY_invalid_argument;
    }
    return TALLY_ok;
}

typedef struct start_state {
    position_record *p;
    const log_head *head;
} start_state;

/* The store against the stream: an empty stream gets a genesis (from a
 * new store, or with --cluster-init from any store; one published
 * meanwhile is read), the store is checked against the genesis and its
 * position against the stream. */
static int check_stream_step(cluster_node *node, void *ctx)
{
    const start_state *st = ctx;
    int rc = node->has_genesis ? TALLY_ok : read_genesis(node);
    if (rc == TALLY_ok)
        rc = start_on_stream(node, st->p, st->head);
    if (rc == TALLY_ok && node->has_genesis)
        rc = check_against_genesis(node, st->p, st->head);
    if (rc == TALLY_ok)
        rc = check_position(node, st->p);
    return rc;
}

static int node_start(server *srv)
{
    cluster_node *node = srv->cluster;
    store_txn t;
    position_record p;
    log_head head = {0};
    int rc = store_txn_begin(srv->st, NULL, true, &t);
    if (rc == TALLY_ok) {
        rc = position_get(&t, &p);
        if (rc == TALLY_ok)
            rc = log_head_get(&t, &head);
        store_txn_abort(&t);
    }
    start_state st = {&p, &head};
    if (rc == TALLY_ok)
        rc = with_patience(node, check_stream_step, &st);
    tally_id128 boot; /* this run's Nats-Msg-Ids: never those of an earlier run */
    if (rc == TALLY_ok && (rc = tally_id128_uuidv7(clock_wall_ms(), &boot)) == TALLY_ok)
        memcpy(&node->boot_id, boot.bytes + 8, sizeof(node->boot_id));
    /* the refusals of a check (invalid_argument, corrupt_record) and of
     * a JetStream that never answered are logged where they are found */
    if (rc != TALLY_ok && rc != TALLY_invalid_argument && rc != TALLY_corrupt_record &&
        !is_transient(rc))
        net_log(NET_LOG_ERROR, "cluster: refusing to start: %s", tally_strerror(rc));
    if (rc != TALLY_ok)
        return rc;
    srv->cluster_position = p.seq;
    node->last_time_ms = p.time_ms;
    memcpy(node->digest, p.digest, CLUSTER_HASH_BYTES);
    node->last_apply_mono_ms = clock_mono_ms();
    net_log(NET_LOG_INFO, "cluster: node %s on stream %s at position %" PRIu64,
            srv->opt->cluster_node, cluster_stream_name(node->stream), p.seq);
    return TALLY_ok;
}

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
    return position_put(txn, &ctx->p);
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
    bool is_cmd = subject_is(m->subject, "cmd"), own = false;
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
    } else if (subject_is(m->subject, "tick") &&
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
    if (rc == TALLY_ok) {
        node->last_time_ms = ctx.p.time_ms;
        memcpy(node->digest, ctx.p.digest, CLUSTER_HASH_BYTES);
    }
    note_applied(node, m->seq, rc, own, ctx.p.time_ms, after.seq);
    if (rc == TALLY_ok)
        cluster_checks_after(&node->checks, m, node->digest);
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
     * messages */
    if (last < position)
        cluster_checks_stop(node->srv, "stream behind this node: this node applied position %"
                            PRIu64 ", the stream ends at %" PRIu64, position, last);
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
        apply_message(node, &m);
    }
    if (r)
        cluster_reader_close(r);
    return NULL;
}

const net_cluster_hooks cluster_node_hooks = {
    .connect = node_connect,
    .start = node_start,
    .writer_main = node_writer_main,
    .applier_main = node_applier_main,
    .close = node_close,
};
