/*
 * cluster_node_internal.h — what the parts of a cluster node share
 * (net/server/cluster_writer.c: the writer; cluster_node.c: the applier;
 * net/server/cluster_start.c: the start against the stream): the node's
 * state, the writer's pending group, and the position record kept in
 * meta "cluster_position" in every applied message's transaction.
 */
#ifndef TALLY_NET_SERVER_CLUSTER_NODE_INTERNAL_H
#define TALLY_NET_SERVER_CLUSTER_NODE_INTERNAL_H

#include "common/sha256.h"
#include "net/cluster/checkpoint.h"
#include "net/cluster/message.h"
#include "net/cluster/stream.h"
#include "net/engine/engine.h"
#include "net/server/cluster_checks.h"

#include <stdbool.h>
#include <stdint.h>

#define MSG_ID_BYTES 96

typedef struct cluster_node cluster_node;

typedef struct position_record {
    uint64_t seq;
    int64_t time_ms;
    uint8_t hash[SHA256_BYTES];
    uint8_t digest[CLUSTER_HASH_BYTES];
} position_record;

/* A message of the stream being applied (the applier's): its position
 * record, the state digest before it, the slots it applies. */
typedef struct apply_ctx {
    position_record p;
    const uint8_t *digest_before;
    slot **group;
    uint32_t n;
} apply_ctx;

/* A group of writes this node takes to the stream, under srv->mu. The
 * writer takes a free one (!in_use), publishes it, and goes on to the
 * next group; whoever ends it answers its requests and frees it: the
 * applier once it applied it on these slots (claimed) at the position
 * JetStream's PubAck named; else the writer (applied before the PubAck or
 * elsewhere: the position confirmed first; publish failed; no apply
 * within TALLY_CLUSTER_APPLY_WAIT_MS; stopping). */
typedef struct pending_group {
    bool in_use;
    bool active;   /* published or being published; the applier may claim it */
    bool claimed;  /* the applier applies it on these slots (and answers it) */
    bool applied;  /* ... and committed (rc) */
    bool proposed; /* its publish returned (publish_rc, ack_seq, why) */
    bool handed_back; /* applied, its position for the writer to confirm */
    int rc;
    int publish_rc;
    uint64_t ack_seq; /* the position JetStream's PubAck named */
    char why[CLUSTER_WHY_BYTES];
    char msg_id[MSG_ID_BYTES];
    cluster_cmd_builder message; /* the message published (data, len), until answered */
    const void *data;
    size_t len;
    slot **group; /* its own array of srv->slot_count */
    uint32_t n;
    int64_t now_ms;
    uint64_t seq;
    int64_t deadline_ms; /* mono: published, not claimed by then: answered unavailable */
    /* mono ns, for net_metrics_cluster_group: its oldest request's
     * arrival, its publish, JetStream's ack, this node's commit of it */
    int64_t arrived_ns, publish_ns, acked_ns, applied_ns;
} pending_group;

/* One of the messages the applier applies together. */
typedef struct batch_item {
    const cluster_message *m;
    apply_ctx ctx;
    cluster_cmd c;      /* is_cmd: unpacked (released after the apply) */
    bool is_cmd;        /* on the subject cmd */
    bool is_group;      /* ... and unpacked: a group of requests to apply */
    pending_group *own; /* the writer's group, applied on its slots; NULL: decoded */
    uint32_t n;         /* the slots in group; UINT32_MAX: no memory to decode */
    slot **group;
} batch_item;

struct cluster_node {
    server *srv;
    cluster_stream *stream;
    cluster_genesis genesis;
    bool has_genesis;
    bool first_not_genesis; /* the stream's first message is no genesis: a stream
                               made again after a loss, or another program's */
    uint64_t boot_id; /* with a counter, this run's Nats-Msg-Ids */
    uint64_t counter;
    int64_t last_propose_ms;
    pending_group pending[TALLY_CLUSTER_GROUPS_IN_FLIGHT]; /* under srv->mu */
    int64_t last_apply_mono_ms; /* under srv->mu: when the applier last committed */
    /* The applier's own. */
    int64_t last_time_ms;
    slot *temps; /* the other nodes' requests, decoded */
    uint32_t temps_count;
    slot **list;
    uint32_t list_count;
    uint8_t digest[CLUSTER_HASH_BYTES]; /* the state digest after the last applied */
    uint8_t applied_hash[SHA256_BYTES]; /* the SHA-256 of the message at the position */
    int64_t differed_logged_ms; /* when the reader's differing copies were last logged */
    uint64_t differed_since;    /* positions whose copies differed since, not logged */
    int64_t replicas_seen;      /* the stream's replicas as last logged; 0: not yet */
    int64_t place_logged_ms;    /* when a consumer not made was last logged */
    uint64_t place_failures;    /* consumers not made since, not logged */
    char place_why[CLUSTER_DIFFERED_BYTES]; /* why the last one was not */
    unsigned behind_answers; /* answers in a row of a stream ending before the position */
    uint64_t suspect_seq;    /* the position at the first of them (0: none) ... */
    uint8_t suspect_hash[SHA256_BYTES]; /* ... and its message's SHA-256 */
    /* The messages read together and applied together (one transaction). */
    cluster_message msgs[TALLY_CLUSTER_APPLY_MESSAGES_MAX];
    batch_item items[TALLY_CLUSTER_APPLY_MESSAGES_MAX];
    writer_message wm[TALLY_CLUSTER_APPLY_MESSAGES_MAX];
    cluster_checks checks;
    bool perturbed; /* --test-cluster-diverge-at done */
};


/* The position record of the store (all zero when it has applied
 * nothing): TALLY_ok, TALLY_corrupt_record or a store error. */
int cluster_position_get(store_txn *txn, position_record *p);
/* Record p, in the transaction that applies its message. */
int cluster_position_put(store_txn *txn, const position_record *p);

/* Whether a stream subject ends in ".kind" (cmd, tick, genesis, ...). */
bool cluster_subject_is(const char *subject, const char *kind);

/* Whether tallyd stops (srv->stopping, under srv->mu). */
bool cluster_node_stopping(server *srv);

/* The writer (cluster_writer.c): its thread; answering a group's requests
 * (a copy taken under mu) with what its apply computed (confirmed
 * TALLY_ok) or a fault (why: its detail); ending a group applied on its
 * slots that the applier could not answer (its position confirmed with
 * JetStream first); a group answered, free again (its message freed, its
 * phases observed, the writer told). */
void *cluster_writer_main(void *arg);
void cluster_group_answer(const pending_group *g, int confirmed, const char *why);
void cluster_group_finish_applied(cluster_node *node, pending_group *g);
void cluster_group_answered(server *srv, pending_group *g);

/* The hooks' connect and start (cluster_start.c): the stream opened and
 * the genesis read; the store checked against the stream. */
int cluster_node_connect(server *srv, uint8_t instance[16], bool *has_instance);
int cluster_node_start(server *srv);

#endif
