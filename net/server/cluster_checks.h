/*
 * cluster_checks.h — a cluster node's checks on itself (docs/CLUSTER.md,
 * "Divergence is detected, never served"): its checkpoints published and
 * the others' compared with its own digests (net/cluster/checkpoint.h),
 * and the node stopping to serve — for good while tallyd runs — when it
 * disagrees with the majority or the stream contradicts its store. Used
 * by net/server/cluster_node.c's applier thread; cluster_checks_stop by
 * its writer too.
 */
#ifndef TALLY_NET_SERVER_CLUSTER_CHECKS_H
#define TALLY_NET_SERVER_CLUSTER_CHECKS_H

#include "net/cluster/checkpoint.h"
#include "net/cluster/stream.h"
#include "net/engine/engine.h"

typedef struct cluster_checks {
    server *srv;
    cluster_stream *stream; /* the node's: checkpoints are published on it */
    cluster_checkpoints checkpoints;
} cluster_checks;

/* Whether the node stopped serving (any thread). */
bool cluster_checks_diverged(const server *srv);

/* Stop serving: srv->cluster_stop_why set from fmt, srv->cluster_diverged
 * true, waiting reads woken, one error line logged; nothing when stopped
 * already. Any thread; takes srv->mu. */
__attribute__((format(printf, 2, 3))) void cluster_checks_stop(server *srv, const char *fmt,
                                                               ...);

/* After the message m committed, with digest the node's state digest
 * after it, at log time time_ms (the message before it at before_ms): a
 * checkpoint message is counted as a vote (and may stop the node), and
 * at a checkpoint position (every --cluster-checkpoint-every positions,
 * and the first in each TALLY_CLUSTER_CHECKPOINT_LOG_MS of the log's
 * time) the digest is kept and published. */
void cluster_checks_after(cluster_checks *k, const cluster_message *m,
                          const uint8_t digest[CLUSTER_HASH_BYTES], int64_t before_ms,
                          int64_t time_ms);

#endif
