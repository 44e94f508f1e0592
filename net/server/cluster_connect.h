/*
 * cluster_connect.h — a cluster node's connection to its NATS servers
 * (docs/CLUSTER.md, "Starting a cluster"): the --cluster URLs, the
 * credentials (--cluster-creds, --cluster-user with
 * --cluster-password-file) and TLS (--cluster-tls-ca, --cluster-tls-cert,
 * --cluster-tls-key) of the options, the secret files checked private
 * (docs/SECURITY.md), and the stream created or checked.
 */
#ifndef TALLY_NET_SERVER_CLUSTER_CONNECT_H
#define TALLY_NET_SERVER_CLUSTER_CONNECT_H

#include "net/cluster/stream.h"
#include "net/engine/options.h"

/* How long a start that waits for JetStream pauses between tries. */
#define CLUSTER_CONNECT_RETRY_US 500000

/* Open the command stream of o (waiting up to TALLY_CLUSTER_CONNECT_MS_MAX
 * while JetStream does not answer): TALLY_ok and *out (the caller's to
 * close), or a refusal, logged naming what is wrong: TALLY_invalid_argument
 * (a secret file not private or unreadable, a stream that breaks the
 * guarantees, a login refused), TALLY_unreachable, TALLY_out_of_memory. */
int cluster_connect(const net_server_options *o, cluster_stream **out);

#endif
