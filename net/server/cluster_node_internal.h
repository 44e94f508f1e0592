/*
 * cluster_node_internal.h — what the parts of a cluster node share
 * (net/server/cluster_node.c: the writer and the applier;
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
    unsigned behind_answers; /* answers in a row of a stream ending before the position */
    cluster_checks checks;
    bool perturbed; /* --test-cluster-diverge-at done */
};

typedef struct position_record {
    uint64_t seq;
    int64_t time_ms;
    uint8_t hash[SHA256_BYTES];
    uint8_t digest[CLUSTER_HASH_BYTES];
} position_record;

/* The position record of the store (all zero when it has applied
 * nothing): TALLY_ok, TALLY_corrupt_record or a store error. */
int cluster_position_get(store_txn *txn, position_record *p);
/* Record p, in the transaction that applies its message. */
int cluster_position_put(store_txn *txn, const position_record *p);

/* Whether a stream subject ends in ".kind" (cmd, tick, genesis, ...). */
bool cluster_subject_is(const char *subject, const char *kind);

/* The hooks' connect and start (cluster_start.c): the stream opened and
 * the genesis read; the store checked against the stream. */
int cluster_node_connect(server *srv, uint8_t instance[16], bool *has_instance);
int cluster_node_start(server *srv);

#endif
