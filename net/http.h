/*
 * http.h — tallyd's HTTP face: one listener (GNU libmicrohttpd, its own
 * polling thread) and a table of routes. Bad input is answered here,
 * before any route runs: an unknown path 404, a method the route does not
 * take 405 (with Allow), a body over TALLY_HTTP_BODY_BYTES_MAX 413, a
 * request line and headers over TALLY_HTTP_HEADER_BYTES_MAX or a malformed
 * request refused by libmicrohttpd (400, 413 or 431, or the connection
 * closed). Connections idle or slow for the timeout are closed, and the
 * total and per-address connection limits refuse more at accept.
 * docs/DESIGN.md says why libmicrohttpd.
 *
 * Routes are data: tallyd's own (/metrics, /healthz, /readyz) are in
 * net/http_routes.c, and more (/v1/<op>, webhooks) are rows added there.
 */
#ifndef TALLY_NET_HTTP_H
#define TALLY_NET_HTTP_H

#include "net/metrics.h"

#include <stdbool.h>
#include <stddef.h>

typedef struct net_http_options {
    const char *url;          /* http://HOST:PORT (HOST: IPv4, [IPv6] or a name) */
    unsigned timeout_s;       /* idle or slow connections closed after this */
    unsigned connections_max; /* at once */
    unsigned per_address_max; /* at once from one client address */
} net_http_options;

typedef struct net_http_request {
    const char *method;
    const char *path;
    const char *body; /* NULL when empty; not NUL-terminated */
    size_t body_len;
    void *call;       /* the server's: for net_http_header and net_http_defer */
} net_http_request;

typedef struct net_http_reply {
    unsigned status;          /* 200 unless the handler sets it */
    const char *content_type; /* a static string */
    net_text body;            /* the handler's text; freed by the server */
    const char *header_name;  /* one more header (static strings), or NULL */
    const char *header_value;
} net_http_reply;

/* A request header's value (the name's case does not matter), or NULL;
 * valid while the handler runs. */
const char *net_http_header(const net_http_request *rq, const char *name);

/* Answer later, from another thread: called in a handler, it suspends the
 * connection (the listener's thread serves the others meanwhile) and
 * returns the token to pass to net_http_complete exactly once; the
 * handler's own reply is then ignored. The request's body stays valid
 * until net_http_complete. */
typedef struct net_http_pending net_http_pending;
net_http_pending *net_http_defer(const net_http_request *rq);
/* Send r (its body is taken over) as the deferred request's reply and
 * resume its connection; any thread, once. */
void net_http_complete(net_http_pending *p, net_http_reply *r);

typedef void (*net_http_handler)(void *ctx, const net_http_request *rq, net_http_reply *out);

typedef struct net_http_route {
    const char *path;    /* exact, or a prefix when it ends with '/' */
    const char *methods; /* allowed, as the Allow header says them: "GET" */
    net_http_handler handle;
} net_http_route;

typedef struct net_http net_http;

/* Listen on o->url and serve routes (the array must outlive the server)
 * with ctx passed to each handler. TALLY_ok, or TALLY_invalid_argument
 * for a URL that is not http://HOST:PORT or TALLY_io_error when it cannot
 * listen (logged with the reason). */
int net_http_start(const net_http_options *o, const net_http_route *routes, size_t route_count,
                   void *ctx, net_http **out);
/* HTTP connections open now. */
unsigned net_http_connections(net_http *h);
/* Close the listener and every connection; waits for a handler that runs.
 * Every deferred request must have been completed before. */
void net_http_stop(net_http *h);

/* Whether url is a URL net_http_start takes ("none" aside), for option
 * checks before anything starts. */
bool net_http_url_valid(const char *url);

#endif
