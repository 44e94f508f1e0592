/*
 * http_json.c — the JSON API on the HTTP face (docs/PROTOCOL.md, "JSON
 * API"): POST /v1/<op> for every op of the table but the control ops,
 * GET /v1/<resource> for the reads, each turned into the msgpack request
 * of its op (net/http/json_codec.h) and sent to tallyd's own REP socket over
 * NNG's inproc transport, so that it takes the msgpack path from the
 * decoder on: the same checks, the same dispatcher, the same writer queue
 * and group commit, the reply only after the durable commit. The reply
 * comes back as msgpack and leaves as JSON, its HTTP status chosen by its
 * code (net_json_status).
 *
 * The HTTP connection is suspended while its request is away
 * (net_http_starter): libmicrohttpd's one thread serves other connections,
 * and NNG's threads do what they do for any client. Requests in flight are
 * bounded by the HTTP connection limit (one request per connection at a
 * time); each uses a REQ context of a pool of that size.
 */
#include "net/http/face.h"

#include "common/clock.h"
#include "common/error.h"
#include "net/http/json_codec.h"
#include "net/metrics/metrics.h"

#include <nng/protocol/reqrep0/req.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#define JSON_TYPE "application/json"
#define CONSUMER_DEFAULT "http"
#define STOP_WAIT_MS 5000
#define STOP_ROUND_MS 50
#define HTTP_FORMAT_ARG "format" /* json (the default) or msgpack: how events are given */

/* One request in flight to the REP socket. */
typedef struct json_call {
    struct http_json *owner;
    nng_ctx ctx;
    nng_aio *aio;
    bool receiving;          /* sent: the aio now waits for the reply */
    bool event_bytes;        /* format=msgpack: events as their bytes, base64 */
    net_http_pending *pending;
    struct json_call *next_free;
} json_call;

struct http_json {
    nng_socket req;
    json_call *calls;
    unsigned call_count;
    pthread_mutex_t mu;
    json_call *free_calls;   /* under mu */
    unsigned in_flight;      /* under mu */
    bool stopping;           /* under mu */
};

/* ---- replies ---- */

/* A msgpack reply as the HTTP reply: JSON, status by code, and the
 * headers a replay and a retry-later answer carry. */
static void reply_from_msgpack(const void *bytes, size_t len, bool event_bytes,
                               net_http_reply *out)
{
    char *text;
    size_t text_len;
    int code;
    bool replayed;
    out->content_type = JSON_TYPE;
    if (net_json_reply(bytes, len, !event_bytes, &text, &text_len, &code, &replayed) != TALLY_ok) {
        out->status = 500;
        net_text_printf(&out->body, "{\"v\":1,\"code\":\"internal\",\"message\":\"reply not converted\"}\n");
        return;
    }
    out->body = (net_text){text, text_len, text_len + 1, false};
    out->status = net_json_status(code);
    int h = 0;
    if (replayed)
        out->headers[h].name = "Idempotent-Replayed", out->headers[h++].value = "true";
    if (out->status == 503)
        out->headers[h].name = "Retry-After", out->headers[h++].value = "1";
}

/* An answer made here (bad HTTP-level input): packed as the server packs
 * an error reply, then converted like every reply. */
void http_json_error(net_http_reply *out, int code, const char *detail)
{
    net_out o;
    nng_msg *m = NULL;
    if (net_out_begin(&o) == 0) {
        net_reply_error(&o, code, detail);
        m = net_out_take(&o);
    }
    reply_from_msgpack(m ? nng_msg_body(m) : "", m ? nng_msg_len(m) : 0, false, out);
    if (m)
        nng_msg_free(m);
}

/* ---- requests in flight ---- */

static void call_release(json_call *jc)
{
    struct http_json *hj = jc->owner;
    pthread_mutex_lock(&hj->mu);
    jc->pending = NULL;
    jc->next_free = hj->free_calls;
    hj->free_calls = jc;
    hj->in_flight--;
    pthread_mutex_unlock(&hj->mu);
}

/* The call goes back to the pool before its answer: once answered, the
 * connection's next request (pipelined: already read) may start on the
 * listener's thread at once, and must find a call free. Nothing of jc is
 * touched after the release (another request may be using it). */
static void call_finish(json_call *jc, net_http_reply *r)
{
    net_http_pending *p = jc->pending;
    call_release(jc);
    net_http_answer(p, r);
}

static void call_callback(void *arg)
{
    json_call *jc = arg;
    int rv = nng_aio_result(jc->aio);
    net_http_reply r = {.status = 200};
    if (!jc->receiving && rv == 0) {
        jc->receiving = true;
        nng_ctx_recv(jc->ctx, jc->aio);
        return;
    }
    if (rv != 0) {
        if (!jc->receiving)
            nng_msg_free(nng_aio_get_msg(jc->aio));
        bool stopping = rv == NNG_ECANCELED || rv == NNG_ECLOSED;
        http_json_error(&r, stopping ? TALLY_shutting_down : TALLY_internal,
                    stopping ? "server is stopping, retry later" : nng_strerror(rv));
        return call_finish(jc, &r);
    }
    nng_msg *m = nng_aio_get_msg(jc->aio);
    reply_from_msgpack(nng_msg_body(m), nng_msg_len(m), jc->event_bytes, &r);
    nng_msg_free(m);
    call_finish(jc, &r);
}

/* Send the msgpack request m for p; false (m freed, out filled) when it
 * cannot go. */
static bool call_start(struct http_json *hj, nng_msg *m, bool event_bytes, net_http_pending *p,
                       net_http_reply *out)
{
    pthread_mutex_lock(&hj->mu);
    json_call *jc = hj->stopping ? NULL : hj->free_calls;
    bool stopping = hj->stopping;
    if (jc) {
        hj->free_calls = jc->next_free;
        hj->in_flight++;
        jc->pending = p;
        jc->receiving = false;
        jc->event_bytes = event_bytes;
    }
    pthread_mutex_unlock(&hj->mu);
    if (jc == NULL) {
        nng_msg_free(m);
        http_json_error(out, stopping ? TALLY_shutting_down : TALLY_overloaded,
                    stopping ? "server is stopping, retry later" : "too many HTTP requests in flight");
        return false;
    }
    nng_aio_set_msg(jc->aio, m);
    nng_ctx_send(jc->ctx, jc->aio);
    return true;
}

/* ---- from HTTP to a msgpack request ---- */

const http_resource http_resources[] = {
    {"accounts", NULL, NET_OP_ACCOUNT_LIST, NULL, NULL, 0},
    {"accounts/query", NULL, NET_OP_ACCOUNT_QUERY, NULL, NULL, 0},
    {"accounts/", "/history", NET_OP_ACCOUNT_HISTORY, "id", NULL, 0},
    {"accounts/", "/transfers", NET_OP_ACCOUNT_TRANSFERS, "account_id", NULL, 0},
    {"accounts/", "/balances", NET_OP_ACCOUNT_BALANCES, "account_id", NULL, 0},
    {"accounts/", "/balance_at", NET_OP_BALANCE_AT, "account_id", NULL, 0},
    {"accounts/", "", NET_OP_ACCOUNT_GET, "id", NULL, 0},
    {"transfers/query", NULL, NET_OP_TRANSFER_QUERY, NULL, NULL, 0},
    {"transfers/", "", NET_OP_TRANSFER_GET, "id", NULL, 0},
    {"entitlements/", "", NET_OP_ENTITLEMENT_LIST, "subject", "feature", NET_OP_ENTITLEMENT_GET},
    {"log", NULL, NET_OP_LOG_READ, NULL, NULL, 0},
    {"stats", NULL, NET_OP_STATS, NULL, NULL, 0},
    {"subscribers", NULL, NET_OP_SUB_LIST, NULL, NULL, 0},
    {"subscribers/", "/dead_letters", NET_OP_DLQ_LIST, "name", NULL, 0},
    {"subscribers/", "", NET_OP_SUB_GET, "name", NULL, 0},
};
const size_t http_resource_count = sizeof(http_resources) / sizeof(http_resources[0]);

const http_query_alias http_query_aliases[] = {{"from", "from_seq"}};
const size_t http_query_alias_count = sizeof(http_query_aliases) / sizeof(http_query_aliases[0]);

/* The resource rest (the path after /v1/) names, with its parameter put
 * into fields (*text false when it is not UTF-8); NULL when none does. */
static const http_resource *resource_find(const char *rest, json_t *fields, bool *text)
{
    size_t n = strlen(rest);
    for (size_t i = 0; i < http_resource_count; i++) {
        const http_resource *r = &http_resources[i];
        size_t pl = strlen(r->prefix);
        if (r->param == NULL) {
            if (strcmp(rest, r->prefix) == 0)
                return r;
            continue;
        }
        size_t sl = strlen(r->suffix);
        if (n <= pl + sl || strncmp(rest, r->prefix, pl) != 0 || strcmp(rest + n - sl, r->suffix) != 0)
            continue;
        if (memchr(rest + pl, '/', n - pl - sl) != NULL)
            continue; /* a parameter is one segment: more segments are no resource */
        json_t *param = json_stringn(rest + pl, n - pl - sl);
        *text = json_object_set_new(fields, r->param, param) == 0;
        return r;
    }
    return NULL;
}

typedef struct query_fields {
    json_t *fields; /* NULL: only `format` is taken (a POST) */
    char bad[64]; /* a repeated argument */
    bool not_text; /* an argument's name or value is not UTF-8 */
    const char *format; /* the `format` argument, or NULL */
} query_fields;

static bool query_field(void *arg, const char *name, const char *value)
{
    query_fields *q = arg;
    if (strcmp(name, HTTP_FORMAT_ARG) == 0) {
        if (q->format) {
            snprintf(q->bad, sizeof(q->bad), "%s", name);
            return false;
        }
        q->format = value;
        return true;
    }
    if (q->fields == NULL)
        return true;
    for (size_t i = 0; i < http_query_alias_count; i++)
        if (strcmp(name, http_query_aliases[i].arg) == 0)
            name = http_query_aliases[i].field;
    if (json_object_get(q->fields, name)) {
        snprintf(q->bad, sizeof(q->bad), "%s", name);
        return false;
    }
    if (json_object_set_new(q->fields, name, json_string(value)) != 0) {
        q->not_text = true;
        return false;
    }
    return true;
}

/* The `format` argument (docs/PROTOCOL.md, "The event document"): false
 * (out filled) for a value that is neither json nor msgpack. */
static bool format_take(const query_fields *q, bool *event_bytes, net_http_reply *out)
{
    *event_bytes = q->format && strcmp(q->format, "msgpack") == 0;
    if (q->format == NULL || *event_bytes || strcmp(q->format, "json") == 0)
        return true;
    http_json_error(out, TALLY_value_out_of_range, HTTP_FORMAT_ARG ": json or msgpack");
    return false;
}

/* GET /v1/<resource>: the op and its fields, or false (out filled). */
static bool get_request(const net_http_request *rq, const char *rest, const net_op **op,
                        json_t *fields, bool *event_bytes, net_http_reply *out)
{
    bool text = true;
    const http_resource *r = resource_find(rest, fields, &text);
    if (r == NULL) {
        http_json_error(out, TALLY_not_found, "no such resource (docs/PROTOCOL.md, JSON API)");
        return false;
    }
    query_fields q = {fields, "", false, NULL};
    if (text)
        net_http_query_each(rq, query_field, &q);
    if (!text || q.not_text) {
        http_json_error(out, TALLY_malformed_request, "a path parameter or query argument not UTF-8");
        return false;
    }
    if (q.bad[0]) {
        http_json_error(out, TALLY_duplicate_field, q.bad);
        return false;
    }
    if (!format_take(&q, event_bytes, out))
        return false;
    *op = &net_ops[r->op];
    if (r->switch_arg && json_object_get(fields, r->switch_arg))
        *op = &net_ops[r->alt_op];
    return true;
}

/* POST /v1/<op>: the op and its body, or false (out filled). */
static bool post_request(const net_http_request *rq, const char *rest, const net_op **op,
                         json_t **body, bool *event_bytes, net_http_reply *out)
{
    *op = net_op_find(tally_str_from(rest));
    if (*op == NULL || (*op)->kind == NET_KIND_CONTROL) {
        http_json_error(out, TALLY_unknown_op, *op ? "control ops are not offered over HTTP"
                                               : "see docs/PROTOCOL.md for the ops");
        return false;
    }
    query_fields q = {NULL, "", false, NULL};
    net_http_query_each(rq, query_field, &q);
    if (q.bad[0]) {
        http_json_error(out, TALLY_duplicate_field, q.bad);
        return false;
    }
    if (!format_take(&q, event_bytes, out))
        return false;
    if (rq->body_len == 0)
        return true;
    json_error_t err;
    *body = json_loadb(rq->body, rq->body_len, JSON_REJECT_DUPLICATES, &err);
    if (*body == NULL) {
        char detail[96];
        snprintf(detail, sizeof(detail), "not JSON: %.60s (offset %d)", err.text, err.position);
        http_json_error(out, TALLY_malformed_request, detail);
        return false;
    }
    return true;
}

/* The token of "Authorization: Bearer TOKEN" (the scheme's case does
 * not matter; spaces and tabs around the token are optional whitespace,
 * RFC 9110 11.4 and 5.6.3), or ptr NULL: then the request carries no
 * `auth`, and tallyd with --auth answers it 401 unauthenticated. */
tally_str http_bearer_token(const net_http_request *rq)
{
    static const char ows[] = " \t";
    const char *h = net_http_header(rq, "Authorization");
    if (h == NULL)
        return (tally_str){NULL, 0};
    h += strspn(h, ows);
    if (strncasecmp(h, "Bearer", 6) != 0 || h[6] == '\0' || strchr(ows, h[6]) == NULL)
        return (tally_str){NULL, 0};
    h += 6 + strspn(h + 6, ows);
    size_t n = strlen(h);
    while (n > 0 && strchr(ows, h[n - 1]) != NULL)
        n--;
    return n > 0 ? (tally_str){h, n} : (tally_str){NULL, 0};
}

/* With --auth: a caller without a token of a principal learns nothing
 * else, whatever is wrong with its request (no 404 for an op, no
 * missing_field, no JSON error): 401 first, as over msgpack (PROTOCOL.md,
 * "The order of the checks", step 5). false: refused (out filled). The
 * grants of the JSON API's ops are checked on the msgpack path, where the
 * op is known (read_op NULL); a route of the face's own names its read. */
bool http_caller_check(server *srv, const net_http_request *rq, const char *read_op,
                       net_http_reply *out)
{
    if (srv->auth == NULL)
        return true;
    tally_str token = http_bearer_token(rq);
    auth_request arq = {token.ptr != NULL, token, AUTH_CLASS_READ, {NULL, 0}, read_op};
    char detail[96];
    int rc = auth_guard_check(srv->auth, &arq, detail, sizeof(detail));
    if (rc == TALLY_ok)
        return true;
    net_metrics_auth_refused(rc);
    http_json_error(out, rc, detail);
    return false;
}

/* Whether a header is absent or UTF-8: a key or consumer that is not
 * could not be answered as it was sent (JSON strings are UTF-8). */
static bool header_is_text(const char *value)
{
    if (value == NULL)
        return true;
    json_t *s = json_string(value);
    json_decref(s);
    return s != NULL;
}

/* The request as msgpack, or NULL (out filled). */
static nng_msg *pack_request(const net_http_request *rq, const net_op *op, const json_t *body,
                             net_http_reply *out)
{
    net_json_envelope e = {op, net_http_header(rq, "Tally-Consumer"),
                           net_http_header(rq, "Idempotency-Key"), http_bearer_token(rq),
                           strcmp(rq->method, "GET") == 0};
    if (!header_is_text(e.consumer) || !header_is_text(e.key)) {
        http_json_error(out, TALLY_malformed_request,
                    "Idempotency-Key and Tally-Consumer are UTF-8 text");
        return NULL;
    }
    if (e.consumer == NULL)
        e.consumer = CONSUMER_DEFAULT;
    if (op->kind == NET_KIND_WRITE && e.key == NULL) {
        http_json_error(out, TALLY_missing_field, "Idempotency-Key header (required on writes)");
        return NULL;
    }
    msgpack_sbuffer sb;
    msgpack_packer pk;
    char detail[96];
    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    int rc = net_json_request_pack(&e, body, &pk, detail, sizeof(detail));
    nng_msg *m = NULL;
    if (rc == TALLY_ok && nng_msg_alloc(&m, 0) == 0 && nng_msg_append(m, sb.data, sb.size) != 0) {
        nng_msg_free(m);
        m = NULL;
    }
    msgpack_sbuffer_destroy(&sb);
    if (m == NULL)
        http_json_error(out, rc != TALLY_ok ? rc : TALLY_overloaded,
                    rc != TALLY_ok ? detail : "out of memory");
    return m;
}

/* GET /v1/cluster (docs/CLUSTER.md, "Operations"): this node's place in
 * the command stream, from the server's own state; not_in_cluster_mode
 * in single-node mode. */
static void cluster_reply(server *srv, net_http_reply *out)
{
    if (srv->cluster == NULL) {
        http_json_error(out, TALLY_not_in_cluster_mode, "tallyd runs single-node (no --cluster)");
        return;
    }
    net_out o;
    nng_msg *m = NULL;
    if (net_out_begin(&o) == 0) {
        server_cluster_status(&o, srv);
        m = net_out_take(&o);
    }
    if (m == NULL) {
        http_json_error(out, TALLY_overloaded, "out of memory");
        return;
    }
    reply_from_msgpack(nng_msg_body(m), nng_msg_len(m), false, out);
    nng_msg_free(m);
}

bool http_json_start(void *ctx, const net_http_request *rq, net_http_reply *out,
                     net_http_pending *p)
{
    server *srv = ctx;
    const char *rest = rq->path + strlen("/v1/");
    const net_op *op = NULL;
    json_t *body = NULL;
    bool get = strcmp(rq->method, "GET") == 0;
    if (!http_caller_check(srv, rq, NULL, out))
        return false;
    if (get && strcmp(rest, "cluster") == 0) {
        cluster_reply(srv, out);
        return false;
    }
    if (get) {
        body = json_object();
        if (body == NULL) {
            http_json_error(out, TALLY_overloaded, "out of memory");
            return false;
        }
    }
    bool event_bytes = false;
    bool ok = get ? get_request(rq, rest, &op, body, &event_bytes, out)
                  : post_request(rq, rest, &op, &body, &event_bytes, out);
    nng_msg *m = ok ? pack_request(rq, op, body, out) : NULL;
    json_decref(body);
    return m != NULL && call_start(srv->http->json, m, event_bytes, p, out);
}

/* ---- start and stop ---- */

static int open_pool(struct http_json *hj, unsigned count)
{
    hj->calls = calloc(count, sizeof(json_call));
    if (hj->calls == NULL)
        return NNG_ENOMEM;
    for (unsigned i = 0; i < count; i++) {
        json_call *jc = &hj->calls[i];
        jc->owner = hj;
        int rv = nng_ctx_open(&jc->ctx, hj->req);
        if (rv == 0)
            rv = nng_aio_alloc(&jc->aio, call_callback, jc);
        if (rv != 0)
            return rv;
        hj->call_count = i + 1;
        jc->next_free = hj->free_calls;
        hj->free_calls = jc;
    }
    return 0;
}

/* The REQ socket on an inproc listener of tallyd's REP socket; a write's
 * reply waits for its group's commit however long it takes, so the REQ
 * never resends (a resend would be a retry: answered from the inbox, but
 * a second trip through the writer for nothing). */
int http_json_open(server *srv)
{
    char url[96];
    snprintf(url, sizeof(url), "inproc://tallyd-json-%ld-%p", (long)getpid(), (void *)srv);
    struct http_json *hj = calloc(1, sizeof(*hj));
    if (hj == NULL)
        return NNG_ENOMEM;
    pthread_mutex_init(&hj->mu, NULL);
    srv->http->json = hj;
    int rv = nng_listen(srv->http->hooks.rep, url, NULL, 0);
    if (rv == 0)
        rv = nng_req0_open(&hj->req);
    if (rv == 0)
        rv = nng_socket_set_ms(hj->req, NNG_OPT_REQ_RESENDTIME, NNG_DURATION_INFINITE);
    if (rv == 0)
        rv = nng_socket_set_size(hj->req, NNG_OPT_RECVMAXSZ, 0); /* replies: bounded by the server */
    if (rv == 0)
        rv = nng_dial(hj->req, url, NULL, 0);
    if (rv == 0)
        rv = open_pool(hj, srv->opt->http_connections_max);
    if (rv != 0)
        net_log(NET_LOG_ERROR, "cannot start the JSON API: %s", nng_strerror(rv));
    return rv;
}

/* Answer what is in flight (503 shutting_down) and refuse what comes;
 * false when some request was still out after STOP_WAIT_MS. The REQ socket is left to the kernel like tallyd's other sockets (see
 * server.c, close_everything). */
bool http_json_stop(server *srv)
{
    struct http_json *hj = srv->http->json;
    if (hj == NULL)
        return true;
    pthread_mutex_lock(&hj->mu);
    hj->stopping = true;
    /* Cancel in rounds: a request whose send completed as a round ran has
     * only then begun to wait for its reply. */
    int64_t deadline_ms = clock_mono_ms() + STOP_WAIT_MS;
    while (hj->in_flight > 0 && clock_mono_ms() < deadline_ms) {
        pthread_mutex_unlock(&hj->mu);
        for (unsigned i = 0; i < hj->call_count; i++)
            nng_aio_cancel(hj->calls[i].aio); /* an idle one: nothing happens */
        usleep(STOP_ROUND_MS * 1000);
        pthread_mutex_lock(&hj->mu);
    }
    bool idle = hj->in_flight == 0;
    pthread_mutex_unlock(&hj->mu);
    if (!idle) {
        net_log(NET_LOG_ERROR, "JSON API: requests still in flight at stop");
        return false; /* their connections stay suspended: the process is exiting */
    }
    for (unsigned i = 0; i < hj->call_count; i++) {
        nng_aio_free(hj->calls[i].aio);
        nng_ctx_close(hj->calls[i].ctx);
    }
    free(hj->calls);
    hj->calls = NULL;
    hj->call_count = 0;
    return true;
}
