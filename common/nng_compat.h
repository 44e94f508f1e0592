/*
 * nng_compat.h — every workaround tally carries for a bug of the NNG it is
 * built against, in one place, each with the upstream issue and the
 * version that fixes it, and switched off when built against a fixed NNG
 * (NNG_MAJOR_VERSION / NNG_MINOR_VERSION of <nng/nng.h>). Debian 12 ships
 * NNG 1.5.2, which needs all of them.
 *
 * 1. NNG_COMPAT_LISTENER_WATCHDOG — nanomsg/nng#1518, fixed in 1.6.0: a
 *    listener stops accepting for good when a peer hangs up during the SP
 *    header exchange (for tls+tcp://: during the TLS handshake). tallyd
 *    probes each tcp/ipc/tls+tcp listener, the publish listener included,
 *    every 2 s and listens again after two failed probes (net/sp/listeners.c,
 *    net/sp/listener_probe.c; a tls+tcp listener is probed through NNG's
 *    statistics, listener_probe_tls). The probe is tallyd's own
 *    connection: its ADD_PRE is told apart (its address, or over ipc://
 *    its peer pid) and takes no client's place under --max-connections.
 * 2. NNG_COMPAT_REDIAL — the same bug on the client side: a dialer stops
 *    for good when the server closes a connection during the exchange.
 *    libtally replaces a dialer that has had no connection for a while
 *    (clients/libtally/libtally.c, REDIAL_AFTER_MS).
 * 3. NNG_COMPAT_STALE_PIPES — NNG 1.5.2 reports a pipe's removal
 *    (NNG_PIPE_EV_REM_POST) late, from its reaper; at the connection limit
 *    tallyd takes back places of connections NNG no longer knows
 *    (net/sp/listeners.c). No upstream issue names it; 1.6.0 reworked the pipe
 *    reaper, so the pass is kept through 1.5.x only.
 * 4. NNG_COMPAT_NO_CLOSE_AT_EXIT — nanomsg/nng#1543 and #1813: nng_close
 *    can deadlock while pipes are torn down under load. tallyd leaves its
 *    sockets to the kernel at exit (net/server/server.c). Kept for every version
 *    until a fixed release is verified here.
 * 5. Message growth — NNG 1.5 reallocates and copies a whole message on
 *    every append that does not fit; replies reserve geometrically
 *    (net/ops/out.c). Harmless on any version, so not switched.
 * 6. Leak suppressions — the listener NNG 1.5.2 never frees after a
 *    watchdog restart, and request or reply messages it loses when a peer
 *    dies mid-send: tests/lsan.supp and tests/valgrind/tallyd.supp, with
 *    the reproduction beside each entry.
 * 7. Pipes first — NNG 1.5.2's nng_close hangs for good when a message
 *    arrives as the socket closes (a dialer's close closes the transport's
 *    side of a pipe before the protocol's; fixed on NNG's main branch,
 *    where a refused aio still calls back). libtally ends each pipe first
 *    (shutdown(2) of a TCP connection under NNG, nng_pipe_close of an ipc
 *    one), holds the last removal until the dialer is closed, then closes
 *    the socket (clients/transport/sp_pipes.c). Harmless on any version, so not
 *    switched.
 * 8. TLS client auth "optional" — NNG 1.5.2 tells a tls+tcp:// connection
 *    only "verified or not", the same for a missing and a bad client
 *    certificate, and mbedTLS's optional mode lets a bad one through.
 *    tallyd refuses --tls-client-auth optional for tls+tcp:// endpoints
 *    (net/server/tallyd.c); https:// keeps it. Not switched: no fixed
 *    release is known.
 * 9. TLS configurations held until exit — a tls+tcp:// listener may still
 *    be handing the configuration a SIGHUP replaced to a new connection;
 *    tallyd never frees a replaced one (net/sp/tls_reload.c). Harmless on
 *    any version, so not switched.
 * 10. Negative redial back-off — NNG 1.5.2 draws a dialer's reconnect
 *    back-off as a negative number half the time, so a dialer whose last
 *    pipe goes redials at once; libtally holds that removal until the
 *    dialer is closed (clients/transport/sp_pipes.h, with 7). Not switched.
 * 11. No aio left in flight at close — NNG 1.5.2 can hang closing a socket
 *    with a pending receive; libtally's SUB reader keeps no aio in flight
 *    between calls (clients/libtally/stream.c). Harmless on any version, so not
 *    switched.
 * 12. TLS listener statistics — NNG 1.5.2 reports a failed handshake to
 *    a tls+tcp:// listener's statistics only while it accepts, so the
 *    watchdog probes such a listener by those statistics
 *    (net/sp/listener_probe.h, listener_probe_tls). Its
 *    nng_stat_find_listener returns the first listener's statistics for
 *    any listener of the process (a TLS publish listener beside a TLS
 *    request listener read the request listener's counters, and the
 *    watchdog took it for stopped); tallyd finds a listener's scope by its
 *    "id" itself (net/sp/listener_probe.c, stat_find_listener). Harmless
 *    on any version, so not switched.
 */
#ifndef TALLY_COMMON_NNG_COMPAT_H
#define TALLY_COMMON_NNG_COMPAT_H

#include <nng/nng.h>

#define NNG_COMPAT_BEFORE(major, minor)                                                    \
    (NNG_MAJOR_VERSION < (major) || (NNG_MAJOR_VERSION == (major) && NNG_MINOR_VERSION < (minor)))

#define NNG_COMPAT_LISTENER_WATCHDOG NNG_COMPAT_BEFORE(1, 6)
#define NNG_COMPAT_REDIAL NNG_COMPAT_BEFORE(1, 6)
#define NNG_COMPAT_STALE_PIPES NNG_COMPAT_BEFORE(1, 6)
#define NNG_COMPAT_NO_CLOSE_AT_EXIT 1

#endif
