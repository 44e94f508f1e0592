/*
 * listen_policy.h — tallyd's safe defaults (docs/SECURITY.md): which
 * listener URLs are plaintext on a network, which are loopback, and the
 * start-up check that refuses a plaintext listener on a non-loopback
 * address, or any non-loopback listener without --auth, unless
 * --insecure. The TLS schemes (tls+tcp://, wss://, https://) count as
 * encrypted by their scheme alone.
 */
#ifndef TALLY_NET_LISTEN_POLICY_H
#define TALLY_NET_LISTEN_POLICY_H

#include <stdbool.h>
#include <stddef.h>

/* tcp:// (tcp4, tcp6), ws://, http://: bytes in the clear on a network.
 * tls+tcp://, wss://, https:// are encrypted; ipc://, inproc://,
 * abstract:// never leave the host. */
bool net_url_is_plaintext(const char *url);
/* ipc://, inproc://, abstract://: not on a network at all. */
bool net_url_is_local(const char *url);
/* The URL's host is 127.0.0.0/8, ::1 or localhost (not 0.0.0.0, *, an
 * empty host or any other name). */
bool net_url_is_loopback(const char *url);

/* Whether url can be an SP listener at all, without opening it: a scheme
 * tallyd serves (tcp, tcp4, tcp6, tls+tcp, ws, ws4, ws6, wss, ipc,
 * inproc, abstract); for the network ones HOST:PORT with a port of 0 to
 * 65535 (an empty host or * is every address; a dotted host must be an
 * IPv4 address; names resolve at start); for the local ones a name. false
 * with why saying what is wrong. */
bool net_url_check(const char *url, char *why, size_t why_size);

/* Check one listener (role: "--listen", "--publish", "--http"): true when
 * it may be opened; else false with why naming the listener and the
 * option that would allow it. */
bool net_listener_allowed(const char *role, const char *url, bool auth_on, char *why,
                          size_t why_size);

#endif
