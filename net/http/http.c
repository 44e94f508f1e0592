/*
 * http.c — the HTTP listener on GNU libmicrohttpd and the routing of its
 * requests (http.h). libmicrohttpd runs one polling thread that reads
 * every connection and calls access() per request; the header memory and
 * the idle timeout are its options, the body limit, the refusal of a
 * request with two lengths (request smuggling) and the routing are here,
 * and who may hold a connection for how long is http_conns.c's.
 */
#include "net/http/http.h"

#include "common/error.h"
#include "common/limits.h"
#include "common/tls_config.h"
#include "common/logging.h"
#include "net/http/http_conns.h"

#include <assert.h>
#include <gnutls/gnutls.h>
#include <microhttpd.h>
#include <netdb.h>
#include <pthread.h>
#include <stdatomic.h>
#include <time.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

struct net_http {
    struct MHD_Daemon *daemon;
    const net_http_route *routes;
    size_t route_count;
    void *ctx;
    atomic_uint kept;  /* requests a starter kept whose reply has not left */
    atomic_uint begun; /* requests whose headers are in and whose reply has not left */
    int client_auth;  /* https: an nng_tls_auth_mode (net_http_options); http: 0 */
    http_conns *conns; /* the connection table: limits, deadlines */
};

/* How long net_http_stop lets requests begun finish and their replies
 * leave. */
#define STOP_REPLIES_WAIT_MS 3000

/* One request's state between access() calls: its body so far, and for
 * a route that answers later its reply (under mu: the answer may come
 * from another thread). */
typedef struct net_http_pending {
    char *body;
    size_t len, cap;
    bool too_large;
    bool skip_body;  /* answered at its headers: the body is read and dropped */
    struct MHD_Connection *connection;
    pthread_mutex_t mu;
    bool started;  /* a starter kept it: answered by net_http_answer */
    bool answered; /* the reply is in `reply` */
    net_http_reply reply;
} http_call;

/* ---- the URL ---- */

static bool url_is_https(const char *url)
{
    return strncmp(url, "https://", 8) == 0;
}

/* Split http://HOST:PORT[/] or https://HOST:PORT[/] into host and port. */
static bool url_split(const char *url, char *host, size_t host_size, char *port, size_t port_size)
{
    static const char scheme[] = "http://";
    size_t skip = url_is_https(url) ? 8 : sizeof(scheme) - 1;
    if (!url_is_https(url) && strncmp(url, scheme, sizeof(scheme) - 1) != 0)
        return false;
    const char *h = url + skip, *colon, *h_end;
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

/* ---- client certificates (https) ---- */

/* A connection accepted or closed: into or out of the table (which may
 * evict another for it, or refuse it). At its start, before its
 * handshake, with client certificates required: one is required there (GnuTLS then fails the handshake without
 * one) and checked there against the CA libmicrohttpd was given (its chain
 * and dates), so a refused client never gets to send a request. Optional
 * ones are checked at each request (GnuTLS's check in the handshake would
 * refuse a client without one). */
static void on_connection(void *cls, struct MHD_Connection *c, void **socket_context,
                          enum MHD_ConnectionNotificationCode code)
{
    net_http *h = cls;
    if (code == MHD_CONNECTION_NOTIFY_CLOSED) {
        http_conns_closed(h->conns, *socket_context);
        *socket_context = NULL;
        return;
    }
    const union MHD_ConnectionInfo *fd = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    const union MHD_ConnectionInfo *peer = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
    if (fd == NULL)
        return; /* not one libmicrohttpd can say: no entry, its requests are dropped */
    *socket_context = http_conns_opened(h->conns, fd->connect_fd, peer ? peer->client_addr : NULL);
    if (h->client_auth != NNG_TLS_AUTH_MODE_REQUIRED)
        return;
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(c, MHD_CONNECTION_INFO_GNUTLS_SESSION);
    gnutls_session_t s = ci ? (gnutls_session_t)ci->tls_session : NULL;
    if (s == NULL)
        return; /* the check at the first request still refuses */
    gnutls_certificate_server_set_request(s, GNUTLS_CERT_REQUIRE);
    gnutls_session_set_verify_cert(s, NULL, 0);
}

/* At each request (the check of optional certificates, and a second one
 * of required ones): true when the client certificate verifies against
 * the CA, or none was presented and none is required. */
static bool client_certificate_ok(const net_http *h, struct MHD_Connection *c)
{
    if (h->client_auth == NNG_TLS_AUTH_MODE_NONE)
        return true;
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(c, MHD_CONNECTION_INFO_GNUTLS_SESSION);
    gnutls_session_t s = ci ? (gnutls_session_t)ci->tls_session : NULL;
    unsigned count = 0;
    if (s == NULL || gnutls_certificate_get_peers(s, &count) == NULL || count == 0)
        return s != NULL && h->client_auth == NNG_TLS_AUTH_MODE_OPTIONAL;
    unsigned status = 0;
    return gnutls_certificate_verify_peers2(s, &status) == GNUTLS_E_SUCCESS && status == 0;
}

/* ---- requests ---- */

/* The connection's entry in the table (NULL: none). */
static http_conn *conn_of(struct MHD_Connection *c)
{
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    return ci ? ci->socket_context : NULL;
}

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

/* ---- streamed bodies ---- */

/* A stream's connection and whether it waits suspended for a wake. */
struct net_http_stream {
    struct MHD_Connection *connection;
    const net_http_stream_ops *ops;
    void *ctx;
    pthread_mutex_t mu;
    bool suspended; /* under mu: the connection waits for a wake */
    bool woken;     /* under mu: a wake came while read ran */
};

/* libmicrohttpd's content reader: the stream's bytes; with none ready the
 * connection is suspended (the pattern microhttpd.h gives for "no data
 * yet": returning 0 alone would spin the listener's thread) unless a wake
 * came meanwhile, which asks again. */
static ssize_t stream_reader(void *cls, uint64_t pos, char *buf, size_t max)
{
    (void)pos;
    net_http_stream *s = cls;
    for (;;) {
        long n = s->ops->read(s->ctx, buf, max);
        if (n != 0)
            return n > 0 ? (ssize_t)n : MHD_CONTENT_READER_END_OF_STREAM;
        pthread_mutex_lock(&s->mu);
        bool again = s->woken;
        s->woken = false;
        if (!again) {
            s->suspended = true;
            MHD_suspend_connection(s->connection);
        }
        pthread_mutex_unlock(&s->mu);
        if (!again)
            return 0;
    }
}

static void stream_free(void *cls)
{
    net_http_stream *s = cls;
    s->ops->done(s->ctx);
    pthread_mutex_destroy(&s->mu);
    free(s);
}

void net_http_stream_wake(net_http_stream *s)
{
    pthread_mutex_lock(&s->mu);
    if (s->suspended) {
        s->suspended = false;
        MHD_resume_connection(s->connection);
    } else {
        s->woken = true;
    }
    pthread_mutex_unlock(&s->mu);
}

/* The response of a streamed reply (NULL: out of memory, done run). */
static struct MHD_Response *stream_response(struct MHD_Connection *c, net_http_reply *r)
{
    net_text_free(&r->body);
    net_http_stream *s = calloc(1, sizeof(*s));
    if (s == NULL) {
        r->stream->done(r->stream_ctx);
        return NULL;
    }
    *s = (net_http_stream){c, r->stream, r->stream_ctx};
    pthread_mutex_init(&s->mu, NULL);
    struct MHD_Response *resp = MHD_create_response_from_callback(
        MHD_SIZE_UNKNOWN, TALLY_HTTP_STREAM_BLOCK_BYTES, stream_reader, s, stream_free);
    if (resp == NULL) {
        stream_free(s);
        return NULL;
    }
    if (r->stream_send_buffer > 0) {
        const union MHD_ConnectionInfo *fd =
            MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
        /* A failure leaves the kernel's own sizing: the stream still works. */
        if (fd != NULL)
            (void)setsockopt(fd->connect_fd, SOL_SOCKET, SO_SNDBUF, &r->stream_send_buffer,
                             sizeof(r->stream_send_buffer));
    }
    r->stream->attach(r->stream_ctx, s);
    return resp;
}

/* The response of a reply's text body (NULL: out of memory). */
static struct MHD_Response *text_response(net_http_reply *r)
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
    return resp;
}

static enum MHD_Result send_reply(struct MHD_Connection *c, net_http_reply *r, const char *allow)
{
    struct MHD_Response *resp = r->stream ? stream_response(c, r) : text_response(r);
    if (resp == NULL)
        return MHD_NO; /* out of memory: libmicrohttpd closes the connection */
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE,
                            r->content_type ? r->content_type : "text/plain; charset=utf-8");
    for (int i = 0; i < NET_HTTP_EXTRA_HEADERS_MAX && r->headers[i].name; i++)
        MHD_add_response_header(resp, r->headers[i].name, r->headers[i].value);
    if (allow)
        MHD_add_response_header(resp, MHD_HTTP_HEADER_ALLOW, allow);
    enum MHD_Result ok = MHD_queue_response(c, r->status, resp);
    MHD_destroy_response(resp);
    return ok;
}

static enum MHD_Result send_text(struct MHD_Connection *c, unsigned status, const char *text,
                                 const char *allow)
{
    net_http_reply r = {.status = status};
    net_text_printf(&r.body, "%s\n", text);
    return send_reply(c, &r, allow);
}

/* ---- the framing of a request ---- */

typedef struct framing {
    unsigned content_lengths;
    bool transfer_encoding;
} framing;

static enum MHD_Result framing_count(void *cls, enum MHD_ValueKind kind, const char *name,
                                     const char *value)
{
    (void)kind, (void)value;
    framing *f = cls;
    if (strcasecmp(name, MHD_HTTP_HEADER_CONTENT_LENGTH) == 0)
        f->content_lengths++;
    else if (strcasecmp(name, MHD_HTTP_HEADER_TRANSFER_ENCODING) == 0)
        f->transfer_encoding = true;
    return MHD_YES;
}

/* Why c's request has no one length (RFC 9112 6.3), or NULL. Behind a
 * proxy that reads the length another way, such a request smuggles a
 * second one past it; so Content-Length twice (even with the same value)
 * and Content-Length beside Transfer-Encoding are refused, not resolved. */
static const char *framing_refusal(struct MHD_Connection *c)
{
    framing f = {0, false};
    MHD_get_connection_values(c, MHD_HEADER_KIND, framing_count, &f);
    if (f.content_lengths > 1)
        return "more than one Content-Length header";
    if (f.content_lengths == 1 && f.transfer_encoding)
        return "both Content-Length and Transfer-Encoding";
    return NULL;
}

/* 400 for a request whose body cannot be delimited: the connection closes
 * after it, as nothing after the headers can be read as a next request. */
static enum MHD_Result send_framing_refusal(struct MHD_Connection *c, const char *why)
{
    net_http_reply r = {.status = MHD_HTTP_BAD_REQUEST};
    r.headers[0].name = MHD_HTTP_HEADER_CONNECTION;
    r.headers[0].value = "close";
    net_text_printf(&r.body, "request refused: %s\n", why);
    return send_reply(c, &r, NULL);
}

/* Keep the body, up to the limit; past it (a body without Content-Length,
 * or no memory) too_large is set and the connection is closed. */
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

/* A request on a reserved place that is not for a reserved route: 503,
 * and the connection closes, so its place serves the next health check. */
static enum MHD_Result send_busy(struct MHD_Connection *c)
{
    net_http_reply r = {.status = MHD_HTTP_SERVICE_UNAVAILABLE,
                        .headers = {{"Retry-After", "1"}, {"Connection", "close"}}};
    net_text_printf(&r.body, "overloaded: every HTTP connection is taken; this one answers only "
                             "GET /metrics, /healthz and /readyz, retry later\n");
    return send_reply(c, &r, NULL);
}

/* The first call of a request (its headers in): whether its connection
 * may go on, then the refusals made before the body is read. */
static enum MHD_Result request_begin(net_http *h, http_call *call, struct MHD_Connection *c,
                                     const char *url, const char *method)
{
    const net_http_route *route = route_find(h, url);
    bool reserved = route && route->reserved && strcmp(method, "GET") == 0;
    switch (http_conns_request_begin(h->conns, conn_of(c), reserved)) {
    case HTTP_ADMIT_CLOSING:
        return MHD_NO;
    case HTTP_ADMIT_RESERVED_ONLY:
        call->skip_body = true;
        return send_busy(c);
    case HTTP_ADMIT_YES:
        break;
    }
    if (!client_certificate_ok(h, c)) {
        net_log(NET_LOG_WARN, "https: refused a request without a valid client certificate");
        call->skip_body = true; /* nothing of it is read or routed */
        return send_text(c, MHD_HTTP_FORBIDDEN, "a valid client certificate is required", NULL);
    }
    const char *framing_bad = framing_refusal(c);
    if (framing_bad) {
        call->skip_body = true; /* nothing of it is read or routed */
        return send_framing_refusal(c, framing_bad);
    }
    const char *length = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Length");
    if (length && strtoull(length, NULL, 10) > TALLY_HTTP_BODY_BYTES_MAX) {
        call->skip_body = true; /* refused before it is sent; the connection closes */
        return send_text(c, MHD_HTTP_CONTENT_TOO_LARGE, "request body too large", NULL);
    }
    return MHD_YES;
}

static enum MHD_Result access_handler(void *cls, struct MHD_Connection *c, const char *url,
                                      const char *method, const char *version,
                                      const char *upload, size_t *upload_size, void **state)
{
    (void)version;
    net_http *h = cls;
    http_call *call = *state;
    if (call == NULL) { /* the headers are in: the first call */
        if ((call = calloc(1, sizeof(*call))) == NULL)
            return MHD_NO;
        call->connection = c;
        pthread_mutex_init(&call->mu, NULL);
        *state = call;
        atomic_fetch_add(&h->begun, 1);
        return request_begin(h, call, c, url, method);
    }
    if (call->started) { /* resumed: net_http_answer has run */
        pthread_mutex_lock(&call->mu);
        assert(call->answered);
        net_http_reply r = call->reply;
        call->reply.body = (net_text){0};
        pthread_mutex_unlock(&call->mu);
        return send_reply(c, &r, NULL);
    }
    if (*upload_size > 0) {
        size_t n = *upload_size;
        *upload_size = 0;
        if (call->skip_body)
            return MHD_YES;
        http_conns_request_body(h->conns, conn_of(c), n);
        take_body(call, upload, n);
        if (!call->too_large)
            return MHD_YES;
        /* libmicrohttpd cannot answer while a body arrives: close it */
        net_log(NET_LOG_DEBUG, "http: a body over %d bytes without Content-Length: closed",
                TALLY_HTTP_BODY_BYTES_MAX);
        http_conns_count(h->conns, HTTP_CLOSED_BODY_TOO_LARGE);
        return MHD_NO;
    }
    if (call->skip_body)
        return MHD_YES; /* answered at its headers */
    http_conns_request_in(h->conns, conn_of(c));
    const net_http_route *route = route_find(h, url);
    if (route == NULL)
        return send_text(c, MHD_HTTP_NOT_FOUND, "not found", NULL);
    if (!method_allowed(route->methods, method))
        return send_text(c, MHD_HTTP_METHOD_NOT_ALLOWED, "method not allowed", route->methods);
    net_http_request rq = {method, url, call->body, call->len, c};
    net_http_reply r = {.status = MHD_HTTP_OK};
    if (route->start == NULL) {
        route->handle(h->ctx, &rq, &r);
        return send_reply(c, &r, NULL);
    }
    /* Held across the start and the suspend, so that an answer from
     * another thread resumes only a suspended connection. */
    pthread_mutex_lock(&call->mu);
    call->started = route->start(h->ctx, &rq, &r, call);
    if (call->started) {
        atomic_fetch_add(&h->kept, 1);
        MHD_suspend_connection(c);
    }
    pthread_mutex_unlock(&call->mu);
    return call->started ? MHD_YES : send_reply(c, &r, NULL);
}

const char *net_http_header(const net_http_request *rq, const char *name)
{
    return MHD_lookup_connection_value(rq->connection, MHD_HEADER_KIND, name);
}

typedef struct query_walk {
    bool (*each)(void *arg, const char *name, const char *value);
    void *arg;
} query_walk;

static enum MHD_Result query_one(void *cls, enum MHD_ValueKind kind, const char *key,
                                 const char *value)
{
    (void)kind;
    query_walk *w = cls;
    return w->each(w->arg, key, value ? value : "") ? MHD_YES : MHD_NO;
}

void net_http_query_each(const net_http_request *rq,
                         bool (*each)(void *arg, const char *name, const char *value), void *arg)
{
    query_walk w = {each, arg};
    MHD_get_connection_values(rq->connection, MHD_GET_ARGUMENT_KIND, query_one, &w);
}

void net_http_answer(net_http_pending *p, net_http_reply *r)
{
    pthread_mutex_lock(&p->mu);
    assert(p->started && !p->answered);
    p->reply = *r;
    r->body = (net_text){0};
    p->answered = true;
    MHD_resume_connection(p->connection);
    pthread_mutex_unlock(&p->mu);
}

static void request_done(void *cls, struct MHD_Connection *c, void **state,
                         enum MHD_RequestTerminationCode why)
{
    (void)why;
    net_http *h = cls;
    http_call *call = *state;
    http_conns_request_done(h->conns, conn_of(c));
    if (call && call->started)
        atomic_fetch_sub(&h->kept, 1);
    if (call) {
        atomic_fetch_sub(&h->begun, 1);
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
    bool https = url_is_https(o->url);
    assert(!https || (o->tls && o->tls->cert && o->tls->key));
    *h = (net_http){.routes = routes, .route_count = route_count, .ctx = ctx,
                    .client_auth = https ? o->client_auth : NNG_TLS_AUTH_MODE_NONE};
    unsigned flags = MHD_USE_AUTO_INTERNAL_THREAD | MHD_USE_ERROR_LOG | MHD_ALLOW_SUSPEND_RESUME |
                     (ai->ai_family == AF_INET6 ? MHD_USE_IPv6 : 0) | (https ? MHD_USE_TLS : 0);
    /* The TLS options lead the list; without https the list starts past
     * them. With a CA, libmicrohttpd asks clients for a certificate. */
    bool trust = https && h->client_auth != NNG_TLS_AUTH_MODE_NONE;
    struct MHD_OptionItem tls_items[] = {
        {MHD_OPTION_HTTPS_MEM_CERT, 0, https ? (void *)o->tls->cert : NULL},
        {MHD_OPTION_HTTPS_MEM_KEY, 0, https ? (void *)o->tls->key : NULL},
        {trust ? MHD_OPTION_HTTPS_MEM_TRUST : MHD_OPTION_END, 0, trust ? (void *)o->tls->ca : NULL},
        {MHD_OPTION_END, 0, NULL},
    };
    http_conns_limits limits = {o->timeout_s, o->connections_max, o->per_address_max,
                                o->reserved_max};
    if (http_conns_start(&limits, &h->conns) != 0) {
        freeaddrinfo(ai);
        free(h);
        return TALLY_internal;
    }
    /* libmicrohttpd's own limits only back the table's up: it takes every
     * place and those closing, and no per-address limit (the table evicts
     * or refuses). */
    unsigned accepted_max = o->connections_max + o->reserved_max + TALLY_HTTP_CLOSING_CONNECTIONS_MAX;
    h->daemon = MHD_start_daemon(
        flags, 0, NULL, NULL, access_handler, h,
        MHD_OPTION_ARRAY, https ? tls_items : &tls_items[3],
        MHD_OPTION_NOTIFY_CONNECTION, on_connection, h,
        MHD_OPTION_SOCK_ADDR, ai->ai_addr,
        MHD_OPTION_CONNECTION_TIMEOUT, o->timeout_s,
        MHD_OPTION_CONNECTION_LIMIT, accepted_max,
        MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)TALLY_HTTP_HEADER_BYTES_MAX,
        MHD_OPTION_NOTIFY_COMPLETED, request_done, h,
        MHD_OPTION_EXTERNAL_LOGGER, mhd_log, NULL,
        MHD_OPTION_END);
    freeaddrinfo(ai);
    if (h->daemon == NULL) {
        net_log(NET_LOG_ERROR, "cannot listen on %s (in use, or not an address of this "
                "machine%s?): use --http URL, or --http none", o->url,
                https ? ", or the TLS certificate refused by GnuTLS" : "");
        http_conns_stop(h->conns);
        free(h);
        return TALLY_io_error;
    }
    *out = h;
    return TALLY_ok;
}

unsigned net_http_port(net_http *h)
{
    const union MHD_DaemonInfo *i = MHD_get_daemon_info(h->daemon, MHD_DAEMON_INFO_BIND_PORT);
    return i ? i->port : 0;
}

unsigned net_http_connections(net_http *h)
{
    const union MHD_DaemonInfo *i = MHD_get_daemon_info(h->daemon, MHD_DAEMON_INFO_CURRENT_CONNECTIONS);
    return i ? i->num_connections : 0;
}

unsigned net_http_waiting(net_http *h)
{
    return atomic_load(&h->kept);
}

unsigned net_http_in_flight(net_http *h)
{
    return atomic_load(&h->begun);
}

void net_http_metrics(net_http *h, net_text *out)
{
    http_conns_metrics(h->conns, out);
}

void net_http_stop(net_http *h)
{
    if (h == NULL)
        return;
    /* No new connection; a request begun on an open one is read to its
     * end and answered (the JSON API and webhooks say shutting_down by
     * now), and replies of kept requests, answered by now, leave on the
     * listener's thread after their resume: stopping at once would close
     * their connections without a reply. */
    MHD_socket listener = MHD_quiesce_daemon(h->daemon);
    if (listener != MHD_INVALID_SOCKET)
        close(listener);
    net_log(NET_LOG_INFO, "HTTP: listener closed; answering the %u requests begun",
            (unsigned)atomic_load(&h->begun));
    for (int waited = 0; atomic_load(&h->begun) > 0 && waited < STOP_REPLIES_WAIT_MS; waited += 5)
        nanosleep(&(struct timespec){0, 5 * 1000 * 1000}, NULL);
    MHD_stop_daemon(h->daemon);
    http_conns_stop(h->conns);
    free(h);
}
