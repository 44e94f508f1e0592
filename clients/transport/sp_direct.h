/*
 * sp_direct.h — libtally's request path on tcp:// without NNG's threads:
 * a pool of blocking SP connections (REQ0 over TCP, docs/PROTOCOL.md "The
 * SP layer"), one request at a time each, sent and awaited by the calling
 * thread (clients/transport/sp_direct.c). ipc://, ws:// and tls+tcp:// stay on
 * NNG.
 */
#ifndef TALLY_CLIENTS_SP_DIRECT_H
#define TALLY_CLIENTS_SP_DIRECT_H

#include "common/tally_error.h"

#include <nng/nng.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct sp_direct sp_direct;

/* Whether url is served so: tcp://, unless $TALLY_CLIENT_TRANSPORT is
 * "nng" (NNG's REQ socket, as before). */
bool sp_direct_serves(const char *url);

/* A pool for tcp://HOST:PORT (no connection yet): TALLY_ok,
 * TALLY_invalid_argument (no host or port) or TALLY_out_of_memory.
 * Replies above reply_bytes_max cut their connection. */
int sp_direct_open(const char *url, size_t reply_bytes_max, sp_direct **out);

/* One attempt, as libtally's NNG path: a connection within connect_ms,
 * the request sent and its reply read within timeout_ms. TALLY_ok with
 * *reply_out (the reply's msgpack, an nng_msg), TALLY_unreachable (not
 * delivered: no connection, or the frame not sent whole, which the server
 * never serves) or TALLY_timed_out (delivered, no reply: *delivered). */
int sp_direct_attempt(sp_direct *d, const void *bytes, size_t len, uint32_t timeout_ms,
                      uint32_t connect_ms, nng_msg **reply_out, bool *delivered);

/* No more attempts; those in flight end now (their connections shut
 * down), idle connections closed. */
void sp_direct_shutdown(sp_direct *d);
/* Free the pool (after shutdown and once no attempt is in flight). */
void sp_direct_close(sp_direct *d);

#endif
