/*
 * cluster_node.h — tallyd as a cluster node (docs/CLUSTER.md): the hooks the
 * engine calls in cluster mode (net/engine/options.h, net_cluster_hooks).
 *
 * The writer thread publishes each group of writes it takes as one
 * message of the command stream and answers them once this node's own
 * apply has committed that message; the applier thread reads the stream
 * in order from meta/cluster_position + 1 and applies every message —
 * its own and the other nodes' — with the writer's deterministic apply,
 * recording the position, the message's SHA-256 and its time in the same
 * transaction. Built only with the NATS client (configure's CLUSTER).
 */
#ifndef TALLY_NET_SERVER_CLUSTER_NODE_H
#define TALLY_NET_SERVER_CLUSTER_NODE_H

#include "net/engine/options.h"

extern const net_cluster_hooks cluster_node_hooks;

#endif
