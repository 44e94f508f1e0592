/*
 * cluster_fixture.h — three tallyd in cluster mode over a 3-node NATS
 * JetStream cluster on loopback (tests/support/nats_cluster.h), for the
 * cluster suites (tests/cluster/check_cluster.c,
 * tests/cluster/check_cluster_faults.c): start them, stop them, wait until
 * a node has applied a position, and check that every node holds the same
 * log (byte for byte), the same counts, and passes tally-recon.
 *
 * Everything here fails the Check test on an error; waits are on facts
 * with bounds scaled by tests/support/wait.h.
 */
#ifndef TALLY_TESTS_CLUSTER_FIXTURE_H
#define TALLY_TESTS_CLUSTER_FIXTURE_H

#include "tests/support/nats_cluster.h"
#include "tests/support/tallyd_harness.h"

#include <stddef.h>
#include <stdint.h>
#include "clients/libtally/tally.h"

#define NODES 3
/* The largest log assert_converged compares, per node. */
#define LOG_BYTES_MAX (4 * 1024 * 1024)
/* Options a test gives every node (cluster_up_with), with their values. */
#define CLUSTER_FIXTURE_EXTRA_MAX 4

typedef struct cluster_fixture {
    nats_cluster nats;
    char urls[NATS_CLUSTER_NODES * 64];
    tallyd_proc node[NODES];
    tally_client *client[NODES];
    char node_arg[NODES][8];
    const char *extra[CLUSTER_FIXTURE_EXTRA_MAX + 1]; /* every node's own options, NULL-ended */
} cluster_fixture;

/* Checkpoints this often (the least tallyd takes): a node that diverges
 * stops within about as many positions, in tests that reach few. */
#define CLUSTER_FIXTURE_CHECKPOINT_EVERY "32"

/* Start node i (named a, b, c) with a client on it: --cluster-read-wait-ms
 * 3000, --cluster-tick-ms 200, --cluster-checkpoint-every 32, the HTTP
 * face on a port the kernel chose. */
void node_start(cluster_fixture *f, int i);
/* Start node i again on its store (after a stop or a kill) with
 * node_start's options, its client reopened. */
void node_restart(cluster_fixture *f, int i);
/* The NATS cluster, then the three nodes one after the other (the first
 * creates the stream and its genesis). */
void cluster_up(cluster_fixture *f);
/* The same, every node started with extra too (NULL-terminated, at most
 * CLUSTER_FIXTURE_EXTRA_MAX words that outlive the cluster). */
void cluster_up_with(cluster_fixture *f, const char *const *extra);
/* Stop every node (cleanly: each must exit 0) and the NATS cluster. */
void cluster_down(cluster_fixture *f);

/* Wait until c has applied position min_seq (reads with min_seq, asked
 * again after each not_caught_up, up to 120 s scaled). */
void await_applied(tally_client *c, uint64_t min_seq);
/* A uint field of c's stats reply. */
uint64_t stats_u64(tally_client *c, const char *field);
/* Once each node has applied min_seq: the events every node holds
 * (1..the least head) are the same bytes on every node, else the test
 * fails naming the first event that differs; while writes go on. Returns
 * that least head, each node's head in heads. */
uint64_t assert_logs_agree(cluster_fixture *f, uint64_t min_seq, uint64_t heads[NODES]);
/* Every node the same as node a once each has applied min_seq: head,
 * log bytes, the counts of accounts, transfers, entitlements and inbox
 * records; tally-recon clean on each. */
void assert_converged(cluster_fixture *f, uint64_t min_seq);

/* Wait until the stream has a leader and every other replica is current
 * (a nats-server started again or continued is back in the quorum only
 * then); false past NATS_CLUSTER_WAIT_MS (scaled). */
bool await_stream_current(const cluster_fixture *f);

#endif
