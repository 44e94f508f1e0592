/*
 * checkpoint.h — the divergence check's bookkeeping (docs/CLUSTER.md,
 * "Divergence is detected, never served"): the state digest that chains
 * every applied message, and the comparison of the checkpoints the nodes
 * publish with this node's own digests.
 *
 * A node's digest after position P is SHA-256 of: its digest after the
 * message before (32 zero bytes before the first), P (u64 big-endian),
 * the SHA-256 of the message at P, the SHA-256 of every reply its
 * commands produced (in order, built in the message's transaction at its
 * time), and the log's head after it (seq u64
 * big-endian, hash). Every CHECKPOINT_EVERY positions a node publishes
 * its digest; every node applies every checkpoint in stream order, so all
 * of them count the same votes. For a position, the majority is the digest
 * that more than half of the nodes heard hold (at least two nodes): a
 * node whose own digest there differs from it has diverged.
 *
 * Memory only: the own digests of the last CLUSTER_CHECKPOINTS_KEPT
 * checkpoint positions; a checkpoint of a position this node has no
 * digest of (it restarted since, or runs with another
 * --cluster-checkpoint-every) is counted but cannot make it diverge.
 */
#ifndef TALLY_NET_CLUSTER_CHECKPOINT_H
#define TALLY_NET_CLUSTER_CHECKPOINT_H

#include "common/limits.h"
#include "common/sha256.h"
#include "net/cluster/message.h"

#include <stdbool.h>
#include <stdint.h>

#define CLUSTER_CHECKPOINTS_KEPT 32
#define CLUSTER_CHECKPOINT_VOTERS_MAX 16
#define CLUSTER_NODE_LIST_BYTES (CLUSTER_CHECKPOINT_VOTERS_MAX * (TALLY_CLUSTER_NODE_BYTES_MAX + 2))

/* One message's step of the digest chain. */
typedef struct cluster_digest_step {
    sha256_ctx sha;
} cluster_digest_step;

/* Begin the step from digest prev, at position seq, for the message
 * whose SHA-256 is message_hash. */
void cluster_digest_begin(cluster_digest_step *d, const uint8_t prev[CLUSTER_HASH_BYTES],
                          uint64_t seq, const uint8_t message_hash[CLUSTER_HASH_BYTES]);
/* One reply's bytes, in the order of the message's commands. */
void cluster_digest_reply(cluster_digest_step *d, const void *reply, size_t len);
/* The log's head after the message; the new digest into out. */
void cluster_digest_end(cluster_digest_step *d, uint64_t head_seq,
                        const uint8_t head_hash[CLUSTER_HASH_BYTES],
                        uint8_t out[CLUSTER_HASH_BYTES]);

typedef struct cluster_vote {
    char node[TALLY_CLUSTER_NODE_BYTES_MAX + 1];
    uint8_t digest[CLUSTER_HASH_BYTES];
} cluster_vote;

typedef struct cluster_checkpoint_round {
    uint64_t seq; /* 0: unused */
    bool own_known;
    uint8_t own[CLUSTER_HASH_BYTES];
    unsigned votes;
    cluster_vote vote[CLUSTER_CHECKPOINT_VOTERS_MAX];
    bool reported; /* its disagreeing nodes logged once */
} cluster_checkpoint_round;

typedef struct cluster_checkpoints {
    cluster_checkpoint_round round[CLUSTER_CHECKPOINTS_KEPT];
} cluster_checkpoints;

typedef enum cluster_verdict_kind {
    CLUSTER_VERDICT_UNDECIDED, /* fewer than two nodes, or no digest held by a majority */
    CLUSTER_VERDICT_UNKNOWN,   /* a majority, but this node has no digest of the position */
    CLUSTER_VERDICT_AGREES,    /* this node's digest is the majority's */
    CLUSTER_VERDICT_DIVERGED,  /* this node's digest is not the majority's */
} cluster_verdict_kind;

typedef struct cluster_verdict {
    cluster_verdict_kind kind;
    uint64_t seq;
    unsigned nodes;     /* nodes heard at seq */
    unsigned agreeing;  /* of them, with this node's digest (0 when unknown) */
    /* Comma-separated: the nodes holding the majority's digest, and those
     * that do not (when a majority exists). */
    char majority[CLUSTER_NODE_LIST_BYTES];
    char minority[CLUSTER_NODE_LIST_BYTES];
    bool report; /* a minority exists and was not reported for seq yet */
} cluster_verdict;

/* This node's digest at checkpoint position seq. */
void cluster_checkpoints_own(cluster_checkpoints *c, uint64_t seq,
                             const uint8_t digest[CLUSTER_HASH_BYTES]);
/* A checkpoint applied: its vote counted (a node's later vote for the
 * same position replaces its earlier one) and the verdict at its
 * position in *out. false when the checkpoint is older than every
 * position kept (nothing counted). */
bool cluster_checkpoints_vote(cluster_checkpoints *c, const cluster_checkpoint *cp,
                              cluster_verdict *out);

#endif
