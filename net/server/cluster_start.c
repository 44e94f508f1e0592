/*
 * cluster_start.c — a cluster node's start (docs/CLUSTER.md, "Starting a
 * cluster", "Catch-up and bootstrap"): the stream opened (cluster_connect.c)
 * and its genesis read, or published on an empty stream (from a new
 * store, or with --cluster-init from any store); the store checked
 * against the genesis and its recorded position against the stream, all
 * waited out while JetStream does not answer (an election); and the
 * position record kept in meta "cluster_position".
 */
#include "net/server/cluster_node_internal.h"

#include "common/clock.h"
#include "common/error.h"
#include "common/limits.h"
#include "net/server/cluster_connect.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* meta "cluster_position": seq (u64 be), time ms (i64 be), the SHA-256 of
 * the message at seq, the state digest after it (checkpoint.h). A record
 * without the digest (a store of a tallyd before checkpoints) reads as
 * digest zero. */
static const char meta_position[] = "cluster_position";
#define POSITION_RECORD_BYTES_V1 (8 + 8 + SHA256_BYTES)
#define POSITION_RECORD_BYTES (POSITION_RECORD_BYTES_V1 + CLUSTER_HASH_BYTES)

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

int cluster_position_put(store_txn *txn, const position_record *p)
{
    uint8_t b[POSITION_RECORD_BYTES];
    put_be64(b, p->seq);
    put_be64(b + 8, (uint64_t)p->time_ms);
    memcpy(b + 16, p->hash, SHA256_BYTES);
    memcpy(b + POSITION_RECORD_BYTES_V1, p->digest, CLUSTER_HASH_BYTES);
    return store_put(txn, STORE_DB_META, meta_position, strlen(meta_position), b, sizeof(b), 0);
}

/* TALLY_ok with *p (all zero when the store has applied nothing). */
int cluster_position_get(store_txn *txn, position_record *p)
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

bool cluster_subject_is(const char *subject, const char *kind)
{
    const char *dot = strrchr(subject, '.');
    return dot && strcmp(dot + 1, kind) == 0;
}

static void take_genesis(const cluster_message *m, void *ctx)
{
    cluster_node *node = ctx;
    node->has_genesis = cluster_subject_is(m->subject, "genesis") &&
                        cluster_genesis_unpack(m->data, m->len, &node->genesis) == TALLY_ok;
}

/* The genesis, when the stream still holds its first message; a first
 * message that is none is refused by start_on_stream, once the store's
 * position can say why. */
static int read_genesis(cluster_node *node)
{
    uint64_t first, last;
    int rc = cluster_stream_bounds(node->stream, &first, &last);
    if (rc != TALLY_ok || last == 0 || first > 1)
        return rc;
    rc = read_one(node, 1, take_genesis, node);
    node->first_not_genesis = rc == TALLY_ok && !node->has_genesis;
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

int cluster_node_connect(server *srv, uint8_t instance[16], bool *has_instance)
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
    if (rc == TALLY_ok && (rc = cluster_position_put(&t, &fresh)) == TALLY_ok)
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
    if (node->first_not_genesis) {
        /* a node of a cluster whose stream was lost and made again (others
         * appended to it) is told it is ahead: the runbook's restore */
        if (p->seq > 0 && (rc = check_position(node, p)) != TALLY_ok)
            return rc;
        net_log(NET_LOG_ERROR, "cluster: refusing to start: the first message of stream %s is "
                "no genesis of this format: is it another program's?", name);
        return TALLY_invalid_argument;
    }
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

int cluster_node_start(server *srv)
{
    cluster_node *node = srv->cluster;
    store_txn t;
    position_record p;
    log_head head = {0};
    int rc = store_txn_begin(srv->st, NULL, true, &t);
    if (rc == TALLY_ok) {
        rc = cluster_position_get(&t, &p);
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
    memcpy(node->applied_hash, p.hash, SHA256_BYTES);
    node->last_apply_mono_ms = clock_mono_ms();
    net_log(NET_LOG_INFO, "cluster: node %s on stream %s at position %" PRIu64,
            srv->opt->cluster_node, cluster_stream_name(node->stream), p.seq);
    return TALLY_ok;
}

