/*
 * server_info.h — what a NATS server says of itself before anything else:
 * the INFO line it sends every client on connect (its version among it),
 * read on a plain TCP connection of its own, before any login or TLS.
 * The NATS client library keeps the version to itself (cnats 3.x has no
 * accessor), and tallyd warns about servers known to lose acknowledged
 * writes (docs/CLUSTER.md, "What survives what").
 */
#ifndef TALLY_NET_CLUSTER_SERVER_INFO_H
#define TALLY_NET_CLUSTER_SERVER_INFO_H

#include <stddef.h>
#include <stdint.h>

#define CLUSTER_SERVER_VERSION_BYTES 32
#define CLUSTER_SERVER_INFO_BYTES_MAX 4096 /* the INFO line read, at most */

/* The version (e.g. "2.9.10") of the server at url (nats://, tls:// or
 * host:port, a user before '@' skipped; port 4222 when none), waiting up
 * to wait_ms for the connection and the line: TALLY_ok, TALLY_unreachable
 * (no connection), TALLY_timed_out, TALLY_malformed_request (no INFO line
 * with a version). */
int cluster_server_version(const char *url, int64_t wait_ms, char *version, size_t size);

/* a.b.c compared with x.y.z: < 0, 0, > 0 (missing parts are 0). */
int cluster_version_compare(const char *a, const char *b);

#endif
