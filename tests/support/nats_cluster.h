/*
 * nats_cluster.h — a real 3-node NATS JetStream cluster on loopback for
 * the cluster tests (docs/CLUSTER.md): three nats-server processes
 * ($NATS_SERVER, Debian's nats-server), each with -js, its own store
 * directory under one temp dir, a client port and a route port the kernel
 * chose, routes to the other two, one cluster name and its own server
 * name (n1, n2, n3). Started, it waits until JetStream has a meta leader
 * (every running node answers $JS.API.INFO without an error); a node can
 * be stopped (SIGTERM), killed (SIGKILL) and started again on the same
 * ports and store.
 *
 * Everything here fails the Check test on an error (a server that does
 * not start, a wait past its bound), printing the node's log. Waits are
 * on facts with bounds scaled by tests/support/wait.h.
 */
#ifndef TALLY_TESTS_NATS_CLUSTER_H
#define TALLY_TESTS_NATS_CLUSTER_H

#include <stdbool.h>
#include <sys/types.h>

#define NATS_CLUSTER_NODES 3
/* The bound of a wait for a node or the cluster (scaled by wait.h). */
#define NATS_CLUSTER_WAIT_MS 120000
/* A new cluster's first starts: each bounded so, at most this many
 * (nats_cluster.c, cluster_booted). */
#define NATS_CLUSTER_BOOT_MS 30000
#define NATS_CLUSTER_BOOT_ATTEMPTS 3

typedef struct nats_node {
    char name[8];     /* n1, n2, n3: its -n server name */
    char store[300];  /* its -sd store directory */
    char log[300];    /* its stdout and stderr, appended over restarts */
    char url[160];    /* nats://127.0.0.1:PORT, its clients' URL (nats://USER:PASS@...
                         when the cluster requires a user) */
    char plain_url[64]; /* nats://127.0.0.1:PORT, without the user */
    unsigned port, route_port;
    pid_t pid;        /* 0 while it is down */
} nats_node;

/* What the servers require of their clients, and how the test's own
 * connections (nats_cluster_js_ready's) meet it; every string must
 * outlive the cluster. NULL: not required, not given. */
typedef struct nats_cluster_auth {
    const char *config;       /* a configuration file every server reads (-c): e.g. an
                               * operator, its resolver and accounts */
    const char *tls_cert, *tls_key; /* the servers' certificate: clients must use TLS */
    const char *tls_verify_ca;      /* ... and present a certificate this CA signed */
    const char *client_ca, *client_cert, *client_key, *client_creds;
} nats_cluster_auth;

typedef struct nats_cluster {
    char dir[256];
    char user[32], pass[64]; /* "": no user required */
    nats_cluster_auth auth;
    nats_node node[NATS_CLUSTER_NODES];
    const char *urls[NATS_CLUSTER_NODES]; /* every node's url, for a client */
} nats_cluster;

/* $NATS_SERVER when it names an executable, else NULL: then a test is
 * skipped, saying so. */
const char *nats_cluster_server_path(void);

/* Whether that nats-server is of version major.minor or later (from its
 * --version: "nats-server: v2.10.27"); false when it cannot be told. */
bool nats_cluster_server_at_least(int major, int minor);

/* $NATS_SERVER set to $NATS_SERVER_RECENT when that names an executable:
 * the nats-server 2.10 or later that tools/fetch_nats_server.sh fetched
 * and configure found, for the suites whose faults 2.9.10 does not
 * survive (its replicas drift apart: docs/CLUSTER.md, "Which
 * nats-server"). Call it first in main. */
void nats_cluster_prefer_recent(void);

/* Start the three nodes and wait until JetStream has a meta leader. */
void nats_cluster_start(nats_cluster *c);
/* The same, each server requiring clients to log in as user with pass
 * (nats-server --user --pass); every url carries them, plain_url not. */
void nats_cluster_start_with_user(nats_cluster *c, const char *user, const char *pass);
/* The same, each server requiring what auth says (copied: its strings
 * must outlive the cluster), and the test's own connections meeting it. */
void nats_cluster_start_with_auth(nats_cluster *c, const nats_cluster_auth *auth);
/* Stop every running node (SIGTERM, then SIGKILL past the bound), remove
 * the temp dir and close the NATS client library (nats_Close): call it
 * after every connection of the test is closed. */
void nats_cluster_stop(nats_cluster *c);

/* kill -9 node i and reap it. */
void nats_cluster_kill(nats_cluster *c, int i);
/* Stop node i with SIGTERM (SIGKILL past the bound) and reap it. */
void nats_cluster_stop_node(nats_cluster *c, int i);
/* Start node i again (same ports and store) and wait until it answers
 * $JS.API.INFO. */
void nats_cluster_restart(nats_cluster *c, int i);

/* Start every node that is down (same ports and stores) at once, then
 * wait until each answers $JS.API.INFO: after the whole cluster went
 * down, where one alone could not elect a meta leader. */
void nats_cluster_restart_all(nats_cluster *c);

/* Whether the server at url answers $JS.API.INFO without an error within
 * a second: it is up and JetStream has a meta leader. */
bool nats_cluster_js_ready(const char *url);
/* The same, connecting as auth's client_* say (NULL: as plainly as
 * nats_cluster_js_ready). */
bool nats_cluster_js_ready_with(const char *url, const nats_cluster_auth *auth);

/* The text of node i's log (NUL-terminated; free it), for a failure. */
char *nats_cluster_log(const nats_cluster *c, int i);

#endif
