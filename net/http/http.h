/*
 * http.h — tallyd's HTTP face: one listener (GNU libmicrohttpd, its own
 * polling thread) and a table of routes. Bad input is answered here,
 * before any route runs: an unknown path 404, a method the route does not
 * take 405 (with Allow), a body over TALLY_HTTP_BODY_BYTES_MAX 413, a
 * request line and headers over TALLY_HTTP_HEADER_BYTES_MAX or a malformed
 * request refused by libmicrohttpd (400, 413 or 431, or the connection
 * closed). A request must arrive whole within the timeout (more for a
 * big body, at a minimum rate), or its connection is closed; over the
 * total or per-address connection limit an idle connection is evicted
 * for a newcomer, which is refused only when none is idle; reserved places
 * beyond the total answer only the routes marked reserved (health and
 * metrics) while the rest are taken (net/http/http_conns.h).
 * docs/DESIGN.md says why libmicrohttpd.
 *
 * Routes are data: tallyd's own (/metrics, /healthz, /readyz, /v1/) are in
 * net/http/http_routes.c, and more (webhooks) are rows added there. A route
 * either answers at once (handle) or may answer later from another thread
 * (start, then net_http_answer): its connection is suspended meanwhile
 * (MHD_suspend_connection), so the listener's one thread serves the
 * others, and resumed with the answer.
 */
#ifndef TALLY_NET_HTTP_H
#define TALLY_NET_HTTP_H

#include "common/text.h"

#include <stdbool.h>
#include <stddef.h>

typedef struct net_http_options {
    const char *url;          /* http:// or https://HOST:PORT (HOST: IPv4, [IPv6] or a name) */
    unsigned timeout_s;       /* a request not in whole after this (more for a big body): closed */
    unsigned connections_max; /* at once (beyond: an idle one evicted, or a reserved place) */
    unsigned per_address_max; /* at once from one client address (beyond: evict or refuse) */
    /* https:// only: the certificate and key served, and the CA of client
     * certificates (common/tls_config.h); client_auth an nng_tls_auth_mode:
     * 0 none, 1 optional (a certificate presented must verify), 2 required.
     * A client certificate is asked for in the handshake; a required one
     * is checked there (GnuTLS, against the CA, with its dates); a request
     * on a connection whose certificate is missing (required) or fails the
     * check is answered 403 before any route runs. */
    const struct tls_pem *tls;
    int client_auth;
    unsigned reserved_max; /* places beyond connections_max for reserved routes only */
} net_http_options;

typedef struct net_http_request {
    const char *method;
    const char *path;
    const char *body; /* NULL when empty; not NUL-terminated */
    size_t body_len;
    void *connection; /* for net_http_header and net_http_query_each */
} net_http_request;

#define NET_HTTP_EXTRA_HEADERS_MAX 3

/* A body of unknown length sent as it is made (Server-Sent Events): the
 * listener's thread asks read for bytes whenever the connection can take
 * them. A stream is ended by read (-1), by its client hanging up, or by
 * the listener's stop; done runs once after the last read. */
typedef struct net_http_stream net_http_stream;
typedef struct net_http_stream_ops {
    /* The stream's handle, before the first read: wake it with
     * net_http_stream_wake until done has run. */
    void (*attach)(void *ctx, net_http_stream *s);
    /* Up to max bytes into buf: how many (> 0); 0 when none is ready now
     * (the connection then waits, suspended, for net_http_stream_wake);
     * -1 to end the body. On the listener's thread. */
    long (*read)(void *ctx, char *buf, size_t max);
    /* The connection is done with ctx (after the last read). */
    void (*done)(void *ctx);
} net_http_stream_ops;

/* There may be bytes: read is asked again (any thread; until done). */
void net_http_stream_wake(net_http_stream *s);

typedef struct net_http_reply {
    unsigned status;          /* 200 unless the handler sets it */
    const char *content_type; /* a static string */
    net_text body;            /* the handler's text; freed by the server */
    struct {
        const char *name, *value; /* static strings; name NULL: none */
    } headers[NET_HTTP_EXTRA_HEADERS_MAX];
    /* Non-NULL: the body is this stream (body unused), ctx its argument;
     * when the reply is not sent, done still runs. */
    const net_http_stream_ops *stream;
    void *stream_ctx;
    /* A stream's connection: non-zero sets its kernel send buffer
     * (SO_SNDBUF, which Linux doubles) instead of letting the kernel grow
     * it (to tcp_wmem's maximum, 4 MiB): what a client that reads nothing
     * makes the kernel hold for it. */
    int stream_send_buffer;
} net_http_reply;

typedef void (*net_http_handler)(void *ctx, const net_http_request *rq, net_http_reply *out);

/* A request a route answers later, from any thread (net_http_answer). */
typedef struct net_http_pending net_http_pending;

/* Start answering rq: fill out and return false to answer now, or return
 * true and call net_http_answer(p, ...) exactly once later (the
 * connection waits, suspended, without holding the listener's thread). */
typedef bool (*net_http_starter)(void *ctx, const net_http_request *rq, net_http_reply *out,
                                 net_http_pending *p);

typedef struct net_http_route {
    const char *path;    /* exact, or a prefix when it ends with '/' */
    const char *methods; /* allowed, as the Allow header says them: "GET" */
    net_http_handler handle;
    net_http_starter start; /* instead of handle: may answer later */
    bool reserved;          /* a GET of it is answered on the reserved places too */
} net_http_route;

/* A request header's value (the name in any case), or NULL; valid while
 * the handler or starter runs. */
const char *net_http_header(const net_http_request *rq, const char *name);
/* Call each(arg, name, value) for every query argument (value "" when it
 * has none), in order; stops when each returns false. */
void net_http_query_each(const net_http_request *rq,
                         bool (*each)(void *arg, const char *name, const char *value), void *arg);
/* Answer a request its starter kept (any thread; r's body passes to the
 * server). */
void net_http_answer(net_http_pending *p, net_http_reply *r);

typedef struct net_http net_http;

/* Listen on o->url (https://: with TLS, o->tls required) and serve routes (the array must outlive the server)
 * with ctx passed to each handler. TALLY_ok, or TALLY_invalid_argument
 * for a URL that is not http://HOST:PORT or TALLY_io_error when it cannot
 * listen (logged with the reason). */
int net_http_start(const net_http_options *o, const net_http_route *routes, size_t route_count,
                   void *ctx, net_http **out);
/* The port the listener is bound to (the kernel's choice when o->url
 * gave port 0), 0 when libmicrohttpd cannot say. */
unsigned net_http_port(net_http *h);
/* HTTP connections open now. */
unsigned net_http_connections(net_http *h);
/* Requests a starter kept that wait for their answer now (long-polls,
 * requests at the writer). */
unsigned net_http_waiting(net_http *h);
/* Requests begun (their headers in) whose reply has not left: those
 * waiting, those being read or answered, the caller's own. */
unsigned net_http_in_flight(net_http *h);
/* The connection limits' counters as Prometheus lines (closures and
 * refusals by reason: net/http/http_conns.h). */
void net_http_metrics(net_http *h, net_text *out);
/* Close the listener, then every connection; waits for a handler that
 * runs, and (up to 3 s) for requests begun to be read and answered and
 * for their replies to leave. Every kept request must have been answered
 * (net_http_answer). */
void net_http_stop(net_http *h);

/* Whether url is a URL net_http_start takes ("none" aside), for option
 * checks before anything starts: http:// or https://HOST:PORT. */
bool net_http_url_valid(const char *url);

#endif
