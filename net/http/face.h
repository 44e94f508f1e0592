/*
 * face.h — tallyd's HTTP face (net/http/): /metrics, /healthz, /readyz,
 * the JSON API and webhook intake, over the HTTP listener of http.h.
 *
 *   http_routes.c the routes and the health checks' evaluation once a second
 *   http_json.c   the JSON API (/v1/...): JSON requests sent to the REP
 *                 socket over inproc, replies back as JSON
 *   webhooks.c    POST /webhooks/<source>: verified deliveries written as
 *                 commands through the engine's queue
 *   sse.c         GET /v1/events: the log as Server-Sent Events
 */
#ifndef TALLY_NET_HTTP_FACE_H
#define TALLY_NET_HTTP_FACE_H

#include "common/ready_file.h"
#include "net/engine/engine.h"
#include "net/http/http.h"

#include <stdatomic.h>
#include <stdbool.h>

/* What the HTTP face needs from the transports beside it, which it does
 * not see (net/server/ fills these in). */
typedef struct http_hooks {
    /* Request connections, refusals and subscribers now (net/sp/). */
    void (*counts)(server *srv, uint64_t *connections, uint64_t *refused,
                   uint64_t *subscribers);
    /* The inproc URL of the REP socket the JSON API sends to. */
    nng_socket rep;
} http_hooks;

typedef struct http_room {
    char url[NET_URL_BYTES_MAX];  /* --http as bound */
    net_http *http;
    struct http_json *json;       /* the JSON API's requests (http_json.c) */
    struct http_streams *streams; /* GET /v1/events streams (sse.c) */
    atomic_uint webhooks_in_flight; /* outside slots out (webhooks.c) */
    http_hooks hooks;
} http_room;

/* ---- webhooks.c ---- */
/* POST /webhooks/<source> (a route of http_routes.c: a starter, answered
 * after the commit); /metrics' lines. */
bool webhooks_start(void *ctx, const net_http_request *rq, net_http_reply *out,
                    net_http_pending *p);
void webhooks_metrics(server *srv, net_text *out);

/* ---- http_routes.c ---- */
/* Serve --http (when not none). 0 or an NNG-style non-zero on failure (logged). */
int http_routes_start(server *srv);
void http_routes_stop(server *srv);
/* A read-only transaction on the open store, with store_rw held for
 * reading (release with http_read_end); false while stopping. */
bool http_read_begin(server *srv, store_txn *t);
void http_read_end(server *srv, store_txn *t);
/* Run the health checks (logging alerts that start or clear); the main
 * thread calls it every HEALTH_TICK_MS while serving. */
void health_tick(server *srv);
#define HEALTH_TICK_MS 1000

/* ---- http_json.c ---- */
/* The JSON API's way in: an inproc REQ socket to the REP socket. */
int http_json_open(server *srv);
/* A GET resource: the read op its path names, the path's one parameter
 * as a field, and the query arguments as the op's fields by name
 * (docs/PROTOCOL.md, "Reads"); the JSON face routes by these rows and
 * the OpenAPI document (net/http/openapi.c) describes them. */
typedef struct http_resource {
    const char *prefix;     /* after /v1/; ends with '/' when a parameter follows */
    const char *suffix;     /* after the parameter */
    net_op_id op;
    const char *param;      /* the field the path parameter fills */
    const char *switch_arg; /* a query argument that selects alt_op */
    net_op_id alt_op;
} http_resource;
extern const http_resource http_resources[];
extern const size_t http_resource_count;
/* Query argument names that are shorter than their field's. */
typedef struct http_query_alias {
    const char *arg, *field;
} http_query_alias;
extern const http_query_alias http_query_aliases[];
extern const size_t http_query_alias_count;
/* The /v1/ route (net_http_starter). */
bool http_json_start(void *ctx, const net_http_request *rq, net_http_reply *out,
                     net_http_pending *p);
/* Before the listener stops: true when nothing is in flight any more. */
bool http_json_stop(server *srv);
/* The token of "Authorization: Bearer TOKEN"; ptr NULL when none. */
tally_str http_bearer_token(const net_http_request *rq);
/* An error reply as the JSON API gives it (status by code). */
void http_json_error(net_http_reply *out, int code, const char *detail);

/* ---- sse.c ---- */
/* The streams' waker (and server.head_moved). 0, or NNG_ENOMEM. */
int http_events_start(server *srv);
/* GET /v1/events (a route: answers a refusal, or a stream). */
void http_events_route(void *ctx, const net_http_request *rq, net_http_reply *out);
/* End every stream (before the listener stops; waits a bounded time). */
void http_events_stop(server *srv);
/* tally_http_streams, tally_http_stream_events_total,
 * tally_http_streams_ended_total{reason}. */
void http_events_metrics(server *srv, net_text *out);

#endif
