/*
 * listener_probe.h — is a listener still accepting?
 *
 * NNG 1.5.2 stops accepting on a listener for good when a peer hangs up
 * during the SP header exchange (nanomsg/nng#1518, fixed in 1.6.0): one
 * connect() and close() on tallyd's port — a port scan, a TCP health
 * check, a client killed at the wrong moment — and every new client waits
 * forever. tallyd's main thread probes each listener every few seconds
 * with this and re-creates a listener that stopped (net/server/server.c).
 */
#ifndef TALLY_NET_LISTENER_PROBE_H
#define TALLY_NET_LISTENER_PROBE_H

#include <nng/nng.h>
#include <signal.h>
#include <stdint.h>
#include <stdatomic.h>
#include <sys/socket.h>

typedef enum listener_probe_result {
    LISTENER_ACCEPTING, /* the listener handed a new connection to the socket */
    LISTENER_STOPPED,   /* no connection, or none handed over within wait_ms */
    LISTENER_UNKNOWN,   /* not probed: a transport other than tcp or ipc, or *stop was set */
} listener_probe_result;

/* Tells who probes: called with the probe's own end of its connection
 * before its SP header leaves (an unnamed AF_UNIX address for ipc://),
 * and with NULL once the connection is closed, so that the socket's
 * ADD_PRE can tell the probe from a client. */
typedef void (*listener_probe_mark_fn)(void *ctx, const struct sockaddr *self, socklen_t len);

/* Connect to the address listener l is bound to (a wildcard tcp address
 * through loopback), do the SP header exchange as a REQ0 peer, and wait up
 * to wait_ms for *accepted (the count of connections the listener handed
 * to the socket: NNG_PIPE_EV_ADD_PRE of its pipes) to move past its value
 * before the probe. The stopped listener of NNG 1.5.2 still completes the
 * header exchange in its transport — the connection then waits forever
 * for the socket to take it — so the exchange alone proves nothing. Hangs
 * up only after the exchange, or after wait_ms, which must exceed NNG's
 * own negotiation timeout (10 s). Returns early with LISTENER_UNKNOWN when
 * *stop becomes set. mark (NULL: none) is told the probe's own end. */
listener_probe_result listener_probe(nng_listener l, const atomic_uint *accepted,
                                     listener_probe_mark_fn mark, void *mark_ctx, int wait_ms,
                                     volatile sig_atomic_t *stop);

/* The sum of NNG's statistics of listener l named in names (NULL-ended:
 * "accept", "auth", "proto", ...), or -1 without statistics. */
int64_t listener_stats_sum(nng_listener l, const char *const *names);

/* The same question for a tls+tcp:// listener, which a probe cannot pass
 * (the handshake may require a client certificate). NNG 1.5.2's TLS
 * transport has the same bug (a peer hanging up during the handshake
 * stops the listener), and it reports a failed handshake to the listener
 * only while the listener is accepting. So: connect, send the SP header
 * (no TLS record: the handshake fails at once and the server hangs up),
 * and wait up to wait_ms for NNG's statistics of l (accept and each kind
 * of failed accept) to move. LISTENER_UNKNOWN without statistics. */
listener_probe_result listener_probe_tls(nng_listener l, int wait_ms, volatile sig_atomic_t *stop);

#endif
