/*
 * message.h — what a command stream message holds (docs/CLUSTER.md, "What
 * a message holds"): msgpack maps, each with a format version a node
 * checks before applying.
 *
 *   genesis  {v, cluster: bin 16, instance: bin 16, base_seq, base_hash: bin 32}
 *   cmd      {v, node: str, t: ms, cmds: [bin, ...]}  each bin one request as
 *            received (msgpack), its auth token left out
 *   tick     {v, t: ms}
 *   checkpoint {v, node: str, seq, digest: bin 32}  a node's state digest
 *            after applying position seq (docs/CLUSTER.md, "Divergence is
 *            detected, never served")
 *
 * Decoding checks every count against the bytes (msgpack_safe) and
 * borrows from the message: keep its bytes while the decoded one is used.
 */
#ifndef TALLY_NET_CLUSTER_MESSAGE_H
#define TALLY_NET_CLUSTER_MESSAGE_H

#include "common/bytes.h"

#include <msgpack.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define CLUSTER_MESSAGE_VERSION 1
#define CLUSTER_HASH_BYTES 32

typedef struct cluster_genesis {
    tally_id128 cluster;  /* the cluster's identity, random */
    tally_id128 instance; /* the store identity every node uses (meta/instance_id) */
    uint64_t base_seq;    /* the log head the cluster started from */
    uint8_t base_hash[CLUSTER_HASH_BYTES];
} cluster_genesis;

/* Pack g into sb (initialised by the caller). 0, or -1 when packing failed. */
int cluster_genesis_pack(msgpack_sbuffer *sb, const cluster_genesis *g);
/* TALLY_ok, TALLY_malformed_request (not a genesis), or
 * TALLY_unsupported_version (a newer format). */
int cluster_genesis_unpack(const void *data, size_t len, cluster_genesis *g);

/* A tick: a time with no commands. 0, or -1 when packing failed. */
int cluster_tick_pack(msgpack_sbuffer *sb, int64_t time_ms);
/* TALLY_ok, TALLY_malformed_request or TALLY_unsupported_version. */
int cluster_tick_unpack(const void *data, size_t len, int64_t *time_ms);

/* A checkpoint: node's digest after applying position seq. */
typedef struct cluster_checkpoint {
    tally_str node; /* borrows from the message */
    uint64_t seq;
    uint8_t digest[CLUSTER_HASH_BYTES];
} cluster_checkpoint;

/* 0, or -1 when packing failed. */
int cluster_checkpoint_pack(msgpack_sbuffer *sb, const char *node, uint64_t seq,
                            const uint8_t digest[CLUSTER_HASH_BYTES]);
/* TALLY_ok (c->node points into data), TALLY_malformed_request or
 * TALLY_unsupported_version. */
int cluster_checkpoint_unpack(const void *data, size_t len, cluster_checkpoint *c);

/* A cmd message being built: begin, add each request, end. */
typedef struct cluster_cmd_builder {
    msgpack_sbuffer sb;
    msgpack_packer pk;
    bool bad;
} cluster_cmd_builder;

/* count requests will follow. */
void cluster_cmd_begin(cluster_cmd_builder *b, const char *node, int64_t time_ms, uint32_t count);
/* One request: the map request, packed without its "auth" entry. */
void cluster_cmd_add(cluster_cmd_builder *b, const msgpack_object *request);
/* 0 and the bytes (the caller's until cluster_cmd_free), or -1. */
int cluster_cmd_end(cluster_cmd_builder *b, const void **data, size_t *len);
void cluster_cmd_free(cluster_cmd_builder *b);

/* A cmd message decoded: its requests' bytes point into unpacked. */
typedef struct cluster_cmd {
    msgpack_unpacked unpacked;
    tally_str node;
    int64_t time_ms;
    uint32_t count;
    const msgpack_object *cmds; /* count bins */
} cluster_cmd;

/* TALLY_ok (release with cluster_cmd_release), TALLY_malformed_request or
 * TALLY_unsupported_version. */
int cluster_cmd_unpack(const void *data, size_t len, cluster_cmd *c);
void cluster_cmd_release(cluster_cmd *c);

#endif
