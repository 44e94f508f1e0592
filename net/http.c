/*
 * http.c — the HTTP listener on GNU libmicrohttpd and the routing of its
 * requests (http.h). libmicrohttpd runs one polling thread that reads
 * every connection and calls access() per request; the bounds (timeout,
 * connection limits, header memory) are its options, the body limit and
 * the routing are here.
 */
#include "net/http.h"

#include "common/error.h"
#include "common/limits.h"
#include "net/logging.h"

#include <assert.h>
#include <microhttpd.h>
#include <netdb.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

struct net_http {
    struct MHD_Daemon *daemon;
    const net_http_route *routes;
    size_t route_count;
    void *ctx;
};

/* One request's state between access() calls: its body so far, and a
 * deferred reply (net_http_defer) once its handler ran. */
typedef struct http_call {
    char *body;
    size_t len, cap;
    bool too_large;
    struct MHD_Connection *connection;
    bool deferred, completed; /* completed: under mu, reply set */
    pthread_mutex_t mu;
    net_http_reply reply;
} http_call;

struct net_http_pending {
    http_call call;
};

/* ---- the URL ---- */

/* Split http://HOST:PORT[/] into host and port. */
static bool url_split(const char *url, char *host, size_t host_size, char *port, size_t port_size)
{
    static const char scheme[] = "http://";
    if (strncmp(url, scheme, sizeof(scheme) - 1) != 0)
        return false;
    const char *h = url + sizeof(scheme) - 1, *colon, *h_end;
    if (*h == '[') {
        h_end = strchr(h, ']');
        if (h_end == NULL || h_end[1] != ':')
            return false;
        h++;
        colon = h_end + 1;
    } else {
        colon = strrchr(h, ':');
        h_end = colon;
    }
    if (colon == NULL || h_end == h || (size_t)(h_end - h) >= host_size)
        return false;
    const char *p = colon + 1;
    size_t plen = strcspn(p, "/");
    if (plen == 0 || plen >= port_size || strspn(p, "0123456789") != plen ||
        (p[plen] != '\0' && strcmp(p + plen, "/") != 0) || atoi(p) > 65535)
        return false;
    memcpy(host, h, (size_t)(h_end - h));
    host[h_end - h] = '\0';
    memcpy(port, p, plen);
    port[plen] = '\0';
    return true;
}

bool net_http_url_valid(const char *url)
{
    char host[256], port[8];
    return url_split(url, host, sizeof(host), port, sizeof(port));
}

/* ---- requests ---- */

static const net_http_route *route_find(const net_http *h, const char *path)
{
    for (size_t i = 0; i < h->route_count; i++) {
        const char *rp = h->routes[i].path;
        size_t n = strlen(rp);
        if (rp[n - 1] == '/' ? strncmp(path, rp, n) == 0 : strcmp(path, rp) == 0)
            return &h->routes[i];
    }
    return NULL;
}

static bool method_allowed(const char *methods, const char *method)
{
    size_t n = strlen(method);
    for (const char *m = methods; (m = strstr(m, method)) != NULL; m += n)
        if ((m == methods || m[-1] == ' ') && (m[n] == '\0' || m[n] == ','))
            return true;
    return false;
}

static enum MHD_Result send_reply(struct MHD_Connection *c, net_http_reply *r, const char *allow)
{
    struct MHD_Response *resp;
    if (r->body.bad) {
        net_text_free(&r->body);
        r->status = MHD_HTTP_INTERNAL_SERVER_ERROR;
    }
    if (r->body.len > 0) {
        resp = MHD_create_response_from_buffer(r->body.len, r->body.ptr, MHD_RESPMEM_MUST_FREE);
        if (resp)
            r->body.ptr = NULL; /* the response frees it */
    } else {
        resp = MHD_create_response_from_buffer(0, (void *)"", MHD_RESPMEM_PERSISTENT);
    }
    net_text_free(&r->body);
    if (resp == NULL)
        return MHD_NO; /* out of memory: libmicrohttpd closes the connection */
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE,
                            r->content_type ? r->content_type : "text/plain; charset=utf-8");
    if (allow)
        MHD_add_response_header(resp, MHD_HTTP_HEADER_ALLOW, allow);
    if (r->header_name && r->header_value)
        MHD_add_response_header(resp, r->header_name, r->header_value);
    enum MHD_Result ok = MHD_queue_response(c, r->status, resp);
    MHD_destroy_response(resp);
    return ok;
}

static enum MHD_Result send_text(struct MHD_Connection *c, unsigned status, const char *text,
                                 const char *allow)
{
    net_http_reply r = {status, NULL, {0}, NULL, NULL};
    net_text_printf(&r.body, "%s\n", text);
    return send_reply(c, &r, allow);
}

/* Keep the body, up to the limit; past it the request is answered 413
 * once the upload ends (the rest is read and dropped). */
static void take_body(http_call *call, const char *data, size_t len)
{
    if (call->too_large || call->len + len > TALLY_HTTP_BODY_BYTES_MAX) {
        call->too_large = true;
        return;
    }
    if (call->len + len > call->cap) {
        size_t cap = call->cap ? call->cap : 4096;
        while (cap < call->len + len)
            cap *= 2;
        char *p = realloc(call->body, cap);
        if (p == NULL) {
            call->too_large = true; /* no memory for it: refused like an oversized one */
            return;
        }
        call->body = p;
        call->cap = cap;
    }
    memcpy(call->body + call->len, data, len);
    call->len += len;
}

const char *net_http_header(const net_http_request *rq, const char *name)
{
    const http_call *call = rq->call;
    return MHD_lookup_connection_value(call->connection, MHD_HEADER_KIND, name);
}

net_http_pending *net_http_defer(const net_http_request *rq)
{
    http_call *call = rq->call;
    assert(!call->deferred);
    call->deferred = true;
    MHD_suspend_connection(call->connection); /* before anyone may complete it */
    return (net_http_pending *)call;
}

void net_http_complete(net_http_pending *p, net_http_reply *r)
{
    http_call *call = &p->call;
    pthread_mutex_lock(&call->mu);
    assert(call->deferred && !call->completed);
    call->reply = *r;
    r->body = (net_text){0};
    call->completed = true;
    pthread_mutex_unlock(&call->mu);
    MHD_resume_connection(call->connection); /* access() runs again: it sends the reply */
}

/* The reply of a deferred request once it is completed (MHD_YES: nothing
 * to do yet, which does not happen: it is resumed only when completed). */
static enum MHD_Result send_deferred(struct MHD_Connection *c, http_call *call)
{
    pthread_mutex_lock(&call->mu);
    bool done = call->completed;
    net_http_reply r = call->reply;
    call->reply.body = (net_text){0};
    pthread_mutex_unlock(&call->mu);
    return done ? send_reply(c, &r, NULL) : MHD_YES;
}

static enum MHD_Result access_handler(void *cls, struct MHD_Connection *c, const char *url,
                                      const char *method, const char *version,
                                      const char *upload, size_t *upload_size, void **state)
{
    (void)version;
    net_http *h = cls;
    http_call *call = *state;
    if (call == NULL) { /* the headers are in: the first call */
        if ((call = calloc(1, sizeof(net_http_pending))) == NULL)
            return MHD_NO;
        pthread_mutex_init(&call->mu, NULL);
        call->connection = c;
        *state = call;
        const char *length = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Length");
        if (length && strtoull(length, NULL, 10) > TALLY_HTTP_BODY_BYTES_MAX) {
            call->too_large = true; /* refused before it is sent; the connection closes */
            return send_text(c, MHD_HTTP_CONTENT_TOO_LARGE, "request body too large", NULL);
        }
        return MHD_YES;
    }
    if (call->deferred)
        return send_deferred(c, call);
    if (*upload_size > 0) {
        take_body(call, upload, *upload_size);
        *upload_size = 0;
        return MHD_YES;
    }
    if (call->too_large)
        return send_text(c, MHD_HTTP_CONTENT_TOO_LARGE, "request body too large", NULL);
    const net_http_route *route = route_find(h, url);
    if (route == NULL)
        return send_text(c, MHD_HTTP_NOT_FOUND, "not found", NULL);
    if (!method_allowed(route->methods, method))
        return send_text(c, MHD_HTTP_METHOD_NOT_ALLOWED, "method not allowed", route->methods);
    net_http_request rq = {method, url, call->body, call->len, call};
    net_http_reply r = {MHD_HTTP_OK, NULL, {0}, NULL, NULL};
    route->handle(h->ctx, &rq, &r);
    if (call->deferred) {
        net_text_free(&r.body);
        return MHD_YES; /* suspended until net_http_complete */
    }
    return send_reply(c, &r, NULL);
}

static void request_done(void *cls, struct MHD_Connection *c, void **state,
                         enum MHD_RequestTerminationCode why)
{
    (void)cls, (void)c, (void)why;
    http_call *call = *state;
    if (call) {
        net_text_free(&call->reply.body);
        pthread_mutex_destroy(&call->mu);
        free(call->body);
        free(call);
        *state = NULL;
    }
}

/* libmicrohttpd's own messages (a refused connection, a malformed
 * request): debug lines, as a flood of them must not flood the log. */
static void mhd_log(void *cls, const char *fmt, va_list ap)
{
    (void)cls;
    char line[256];
    vsnprintf(line, sizeof(line), fmt, ap);
    line[strcspn(line, "\n")] = '\0';
    net_log(NET_LOG_DEBUG, "http: %s", line);
}

int net_http_start(const net_http_options *o, const net_http_route *routes, size_t route_count,
                   void *ctx, net_http **out)
{
    char host[256], port[8];
    *out = NULL;
    if (!url_split(o->url, host, sizeof(host), port, sizeof(port)))
        return TALLY_invalid_argument;
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
                             .ai_flags = AI_PASSIVE | AI_NUMERICSERV}, *ai = NULL;
    int gai = getaddrinfo(host, port, &hints, &ai);
    if (gai != 0) {
        net_log(NET_LOG_ERROR, "--http %s: %s", o->url, gai_strerror(gai));
        return TALLY_io_error;
    }
    net_http *h = calloc(1, sizeof(*h));
    if (h == NULL) {
        freeaddrinfo(ai);
        return TALLY_internal;
    }
    *h = (net_http){NULL, routes, route_count, ctx};
    unsigned flags = MHD_USE_AUTO_INTERNAL_THREAD | MHD_USE_ERROR_LOG | MHD_ALLOW_SUSPEND_RESUME |
                     (ai->ai_family == AF_INET6 ? MHD_USE_IPv6 : 0);
    h->daemon = MHD_start_daemon(
        flags, 0, NULL, NULL, access_handler, h,
        MHD_OPTION_SOCK_ADDR, ai->ai_addr,
        MHD_OPTION_CONNECTION_TIMEOUT, o->timeout_s,
        MHD_OPTION_CONNECTION_LIMIT, o->connections_max,
        MHD_OPTION_PER_IP_CONNECTION_LIMIT, o->per_address_max,
        MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)TALLY_HTTP_HEADER_BYTES_MAX,
        MHD_OPTION_NOTIFY_COMPLETED, request_done, NULL,
        MHD_OPTION_EXTERNAL_LOGGER, mhd_log, NULL,
        MHD_OPTION_END);
    freeaddrinfo(ai);
    if (h->daemon == NULL) {
        net_log(NET_LOG_ERROR, "cannot listen on %s (in use, or not an address of this "
                "machine?): use --http URL, or --http none", o->url);
        free(h);
        return TALLY_io_error;
    }
    *out = h;
    return TALLY_ok;
}

unsigned net_http_connections(net_http *h)
{
    const union MHD_DaemonInfo *i = MHD_get_daemon_info(h->daemon, MHD_DAEMON_INFO_CURRENT_CONNECTIONS);
    return i ? i->num_connections : 0;
}

void net_http_stop(net_http *h)
{
    if (h == NULL)
        return;
    MHD_stop_daemon(h->daemon);
    free(h);
}
