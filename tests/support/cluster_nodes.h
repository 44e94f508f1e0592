/*
 * cluster_nodes.h — a cluster for tests (docs/CLUSTER.md): three
 * nats-servers in one JetStream cluster (nats_cluster.h) and up to three
 * tallyd on loopback, each with --cluster (every server's URL), its own
 * --node (a, b, c), --http on a kernel-chosen port and ticks every 200 ms,
 * plus the options a test gives each node. Nodes start one after the
 * other: the first creates the stream and publishes its genesis.
 *
 * Everything fails the Check test on an error (tallyd_harness.h).
 */
#ifndef TALLY_TESTS_CLUSTER_NODES_H
#define TALLY_TESTS_CLUSTER_NODES_H

#include "clients/libtally/tally.h"
#include "tests/support/nats_cluster.h"
#include "tests/support/tallyd_harness.h"

#define CLUSTER_NODES_MAX 3
#define CLUSTER_NODE_ARGS_MAX 6 /* a test's own options per node (with their values) */

typedef struct cluster_nodes {
    nats_cluster nats;
    char urls[NATS_CLUSTER_NODES * 64]; /* every server's URL, comma-separated */
    int count;
    tallyd_proc node[CLUSTER_NODES_MAX];
    tally_client *client[CLUSTER_NODES_MAX]; /* NULL while the node is down */
    char name[CLUSTER_NODES_MAX][4];
    const char *args[CLUSTER_NODES_MAX][CLUSTER_NODE_ARGS_MAX + 1]; /* NULL-terminated */
} cluster_nodes;

/* Start the nats-servers only; set count and each node's args (the
 * strings must outlive the nodes), then start the nodes. */
void cluster_nodes_init(cluster_nodes *c, int count);
/* The same with servers that require what auth says (nats_cluster.h);
 * each node's args must then give it what it needs to connect. */
void cluster_nodes_init_with_auth(cluster_nodes *c, int count, const nats_cluster_auth *auth);
/* Start node i (fresh data directory) with its args. */
void cluster_nodes_start(cluster_nodes *c, int i);
/* Start node i again on its store (after cluster_nodes_stop). */
void cluster_nodes_restart(cluster_nodes *c, int i);
/* Stop node i (SIGTERM, exit 0) and close its client. */
void cluster_nodes_stop(cluster_nodes *c, int i);
/* Stop every running node and the servers; remove every temp dir. */
void cluster_nodes_down(cluster_nodes *c);

/* tallyd started with options (after --data: data_dir, or NULL for
 * dir/refused-data; its listeners under dir) must exit non-zero, its
 * stderr holding expect; returns its exit status. */
int cluster_nodes_assert_refused_start(const char *dir, const char *data_dir,
                                       const char *const *options, const char *expect);

#endif
