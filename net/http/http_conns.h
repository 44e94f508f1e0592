/*
 * http_conns.h — who may hold the HTTP face's connections, and for how
 * long (net/http/http.c calls these from libmicrohttpd's callbacks; the
 * table is private to the listener):
 *
 *   - a request must arrive whole (line, headers and body) within the
 *     timeout of the moment its connection became ready for it (accepted,
 *     or the previous reply sent), plus a second per
 *     TALLY_HTTP_BODY_BYTES_PER_S_MIN bytes of body received: a slow or
 *     idle connection is closed however often it sends a byte;
 *   - the total and per-address limits: a newcomer over one evicts the
 *     longest-idle connection (no request begun, idle at least
 *     TALLY_HTTP_EVICT_IDLE_MS_MIN) of the busiest address (of its own
 *     address for the per-address limit), and is refused only when none
 *     can go;
 *   - over the total with nothing to evict, a newcomer takes one of the
 *     reserved places, where only the reserved routes (GET /metrics,
 *     /healthz, /readyz) are answered: the rest get 503.
 *
 * A connection is closed by shutting its socket down (libmicrohttpd then
 * sees the end of it and closes it as usual). Each closure and refusal is
 * counted by reason (http_conns_metrics).
 */
#ifndef TALLY_NET_HTTP_CONNS_H
#define TALLY_NET_HTTP_CONNS_H

#include "common/text.h"

#include <stdbool.h>
#include <stddef.h>
#include <sys/socket.h>

typedef struct http_conns http_conns;
typedef struct http_conn http_conn;

typedef struct http_conns_limits {
    unsigned timeout_s;
    unsigned connections_max;
    unsigned per_address_max;
    unsigned reserved; /* places beyond connections_max for the reserved routes */
} http_conns_limits;

/* What a request whose headers are in may do. */
typedef enum http_admit {
    HTTP_ADMIT_YES,
    HTTP_ADMIT_CLOSING,       /* its connection is being closed: drop it */
    HTTP_ADMIT_RESERVED_ONLY, /* on a reserved place: only the reserved routes (503) */
} http_admit;

/* Why a connection was closed or a request refused (the metrics' labels). */
typedef enum http_close_reason {
    HTTP_CLOSED_TIMEOUT,        /* the request did not arrive whole in time */
    HTTP_CLOSED_EVICTED,        /* idle, and its place taken by a newcomer */
    HTTP_CLOSED_BODY_TOO_LARGE, /* a body without Content-Length passed the limit */
    HTTP_CLOSED_PEER_GONE,      /* the client hung up before its request was in whole */
    HTTP_CLOSED_REFUSED_TOTAL,  /* a newcomer over the total, nothing to evict */
    HTTP_CLOSED_REFUSED_ADDRESS, /* a newcomer over its address's limit, nothing to evict */
    HTTP_REFUSED_RESERVED,      /* 503: not a reserved route, on a reserved place */
    HTTP_CLOSE_REASONS
} http_close_reason;

/* The table and its guard thread (which closes connections past their
 * deadline). 0, or an errno-style code. */
int http_conns_start(const http_conns_limits *l, http_conns **out);
/* Stops the guard; the table must be empty (every connection closed). */
void http_conns_stop(http_conns *t);

/* libmicrohttpd's thread: a connection accepted (fd, the peer's address):
 * its entry (NULL when out of memory: the connection is shut down), after
 * an eviction or a refusal where a limit says so. */
http_conn *http_conns_opened(http_conns *t, int fd, const struct sockaddr *peer);
void http_conns_closed(http_conns *t, http_conn *c);
/* A request's headers are in; reserved_route: a route the reserved places
 * answer. */
http_admit http_conns_request_begin(http_conns *t, http_conn *c, bool reserved_route);
/* bytes of its body came. */
void http_conns_request_body(http_conns *t, http_conn *c, size_t bytes);
/* The request is in whole (no deadline while it is answered). */
void http_conns_request_in(http_conns *t, http_conn *c);
/* Its reply has left: the connection is ready for the next request. */
void http_conns_request_done(http_conns *t, http_conn *c);
/* Count a closure or refusal decided by the caller. */
void http_conns_count(http_conns *t, http_close_reason why);

/* The counters and gauges as Prometheus lines:
 * tally_http_connections_closed_total{reason}, tally_http_refused_total{reason},
 * tally_http_reserved_connections. */
void http_conns_metrics(http_conns *t, net_text *out);

#endif
