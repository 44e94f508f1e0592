/*
 * sse.c — GET /v1/events: the log as Server-Sent Events (docs/PROTOCOL.md,
 * "The event stream"). Each event is one message, `id: SEQ` and `data:`
 * its JSON document (common/event_doc.h) on one line; `: keepalive`
 * comments while idle.
 *
 * A stream pulls from the log: whenever its connection can take bytes,
 * the listener's thread reads the next events from a read-only snapshot
 * (catching up and going live are the same loop), so each seq goes out
 * once, in order, with no gap, and a slow client costs no more than what
 * one read renders: at most --http-stream-buffer-bytes per stream (an
 * event whose message would pass it ends the stream), and as much again
 * in the kernel's send buffer of its socket. With nothing to
 * send the connection waits suspended. One thread here wakes streams:
 * when a commit moves the head past where a stream is (server.head_moved),
 * when a heartbeat is due, and when a stream has lived --http-stream-max-s
 * (it then ends; the client resumes with Last-Event-ID). A stream holds
 * its HTTP connection, so the connection limits (total, per address,
 * reserved places) bound streams as they bound long-polls.
 */
#include "net/http/face.h"

#include "common/clock.h"
#include "common/error.h"
#include "common/event_doc.h"
#include "ledger/retention.h"
#include "log/log.h"
#include "net/http/json_codec.h"
#include "net/metrics/metrics.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SSE_TYPE "text/event-stream"
#define TICK_MS_MAX 1000            /* the waker's longest sleep */
#define READ_EVENTS_MAX 256         /* events one read renders at most */
#define READ_BYTES_TARGET (64 * 1024) /* one read stops rendering past this */
#define STOP_WAIT_MS 3000           /* how long the stop waits for streams to end */
#define KEEPALIVE ": keepalive\n\n"

/* Why a stream ended (the metric's label). */
typedef enum stream_end {
    END_NONE,
    END_CLIENT,   /* its client hung up */
    END_LIFE,     /* --http-stream-max-s */
    END_BUFFER,   /* an event's message over --http-stream-buffer-bytes */
    END_FLOOR,    /* retention removed its next event */
    END_STOPPING, /* tallyd stops */
    END_FAULT,    /* the store could not be read, or an event not rendered */
    END_REASONS
} stream_end;

static const char *const end_names[END_REASONS] = {
    "", "client", "max_duration", "buffer", "retention", "stopping", "fault",
};

typedef struct sse_stream {
    server *srv;
    struct http_streams *owner;
    /* the listener's thread only */
    char *buf;
    size_t len, off, cap;
    /* under owner->mu */
    net_http_stream *handle;  /* NULL until attached */
    uint64_t next_seq;        /* the next seq to send */
    int64_t active_ms;        /* mono: the last bytes sent, or the start */
    int64_t deadline_ms;      /* mono: the end of its life */
    bool heartbeat_due;
    stream_end end;           /* set: the next read ends the body */
    struct sse_stream *next, *prev;
} sse_stream;

struct http_streams {
    pthread_mutex_t mu;
    pthread_cond_t cv;       /* a head moved, a stream came or went, or the stop */
    sse_stream *list;        /* under mu */
    unsigned count;          /* under mu */
    uint64_t head;           /* under mu: the head the waker last saw told */
    bool stopping;           /* under mu */
    bool thread_started;
    pthread_t thread;
    atomic_uint_fast64_t events, ended[END_REASONS];
    atomic_int_fast64_t buffered; /* bytes rendered and not yet taken, all streams */
};

/* ---- the waker ---- */

static void head_moved(server *srv, uint64_t seq)
{
    struct http_streams *h = srv->http->streams;
    pthread_mutex_lock(&h->mu);
    h->head = seq;
    if (h->count > 0)
        pthread_cond_signal(&h->cv);
    pthread_mutex_unlock(&h->mu);
}

/* Under h->mu: wake each stream with something to do; the ms until the
 * next heartbeat or end of life. */
static int64_t wake_due(struct http_streams *h, const net_server_options *o, int64_t now)
{
    int64_t next = TICK_MS_MAX;
    for (sse_stream *s = h->list; s; s = s->next) {
        if (s->handle == NULL)
            continue;
        bool wake = s->end != END_NONE || s->next_seq <= h->head;
        if (s->end == END_NONE && now >= s->deadline_ms) {
            s->end = END_LIFE;
            wake = true;
        }
        int64_t beat_ms = s->active_ms + (int64_t)o->http_stream_heartbeat_ms;
        if (now >= beat_ms && !s->heartbeat_due) {
            s->heartbeat_due = true;
            wake = true;
        }
        if (wake)
            net_http_stream_wake(s->handle);
        int64_t until = (now >= beat_ms ? (int64_t)o->http_stream_heartbeat_ms : beat_ms - now);
        if (until < next)
            next = until;
        if (s->deadline_ms - now < next)
            next = s->deadline_ms > now ? s->deadline_ms - now : 1;
    }
    return next > 0 ? next : 1;
}

/* The wall-clock time ms from now (pthread_cond_timedwait's deadline). */
static struct timespec wall_after(int64_t ms)
{
    struct timespec t;
    clock_gettime(CLOCK_REALTIME, &t);
    t.tv_sec += (time_t)(ms / 1000);
    t.tv_nsec += (long)(ms % 1000) * 1000000L;
    if (t.tv_nsec >= 1000000000L) {
        t.tv_sec++;
        t.tv_nsec -= 1000000000L;
    }
    return t;
}

static void *waker_main(void *arg)
{
    server *srv = arg;
    struct http_streams *h = srv->http->streams;
    pthread_mutex_lock(&h->mu);
    while (!h->stopping) {
        struct timespec until = wall_after(wake_due(h, srv->opt, clock_mono_ms()));
        pthread_cond_timedwait(&h->cv, &h->mu, &until);
    }
    pthread_mutex_unlock(&h->mu);
    return NULL;
}

/* ---- reading the log into a stream ---- */

typedef struct render {
    sse_stream *s;
    size_t bound;      /* --http-stream-buffer-bytes */
    uint64_t rendered; /* events */
    uint64_t last_seq;
    stream_end end;
} render;

/* s->buf with room for need more bytes (grown up to bound); false when
 * out of memory. */
static bool room_for(sse_stream *s, size_t need, size_t bound)
{
    if (s->len + need <= s->cap)
        return true;
    size_t cap = s->cap ? s->cap * 2 : 4096;
    while (cap < s->len + need)
        cap *= 2;
    if (cap > bound)
        cap = bound;
    char *p = realloc(s->buf, cap);
    if (p == NULL)
        return false;
    s->buf = p;
    s->cap = cap;
    return true;
}

/* log_read's callback: one event's message appended; 1 stops the read
 * (the buffer has enough, or the event does not fit). */
static int render_event(uint64_t seq, const void *bytes, size_t len, void *ctx)
{
    render *r = ctx;
    sse_stream *s = r->s;
    char *doc = NULL;
    size_t doc_len = 0;
    if (event_doc_text(bytes, len, r->bound, &doc, &doc_len) != TALLY_ok) {
        r->end = doc_len > r->bound ? END_BUFFER : END_FAULT;
        return 1;
    }
    char head[40];
    int head_len = snprintf(head, sizeof(head), "id: %" PRIu64 "\ndata: ", seq);
    size_t need = (size_t)head_len + doc_len + 2;
    if (s->len + need > r->bound) {
        free(doc);
        if (s->len == 0)
            r->end = END_BUFFER;
        return 1;
    }
    if (!room_for(s, need, r->bound)) {
        free(doc);
        r->end = END_FAULT;
        return 1;
    }
    memcpy(s->buf + s->len, head, (size_t)head_len);
    memcpy(s->buf + s->len + head_len, doc, doc_len);
    memcpy(s->buf + s->len + head_len + doc_len, "\n\n", 2);
    s->len += need;
    free(doc);
    r->rendered++;
    r->last_seq = seq;
    return s->len >= READ_BYTES_TARGET ? 1 : 0;
}

/* Render the events from seq on into s->buf; END_NONE, or why the stream
 * must end. *last_seq the last rendered (0: none). */
static stream_end fill(sse_stream *s, uint64_t seq, uint64_t *last_seq)
{
    store_txn t;
    *last_seq = 0;
    if (!http_read_begin(s->srv, &t))
        return END_STOPPING;
    ledger_log_floor floor = {0};
    int rc = ledger_log_floor_get(&t, &floor);
    render r = {s, s->srv->opt->http_stream_buffer_bytes, 0, 0, END_NONE};
    if (rc == TALLY_ok && seq <= floor.seq)
        r.end = END_FLOOR;
    else if (rc == TALLY_ok)
        rc = log_read(&t, seq, READ_EVENTS_MAX, render_event, &r);
    http_read_end(s->srv, &t);
    if (rc != TALLY_ok && rc != 1 && r.end == END_NONE)
        r.end = END_FAULT;
    atomic_fetch_add(&s->owner->events, r.rendered);
    atomic_fetch_add(&s->owner->buffered, (int_fast64_t)s->len);
    *last_seq = r.rendered ? r.last_seq : 0;
    return r.rendered ? END_NONE : r.end; /* what was rendered goes out first */
}

static long take(sse_stream *s, char *buf, size_t max)
{
    size_t n = s->len - s->off < max ? s->len - s->off : max;
    memcpy(buf, s->buf + s->off, n);
    s->off += n;
    atomic_fetch_sub(&s->owner->buffered, (int_fast64_t)n);
    return (long)n;
}

static long stream_read(void *ctx, char *buf, size_t max)
{
    sse_stream *s = ctx;
    struct http_streams *h = s->owner;
    if (s->off < s->len)
        return take(s, buf, max);
    s->len = s->off = 0;
    if (s->cap > 2 * READ_BYTES_TARGET) { /* a big event went out: give its room back */
        free(s->buf);
        s->buf = NULL;
        s->cap = 0;
    }
    pthread_mutex_lock(&h->mu);
    stream_end end = s->end;
    bool beat = s->heartbeat_due;
    uint64_t seq = s->next_seq;
    pthread_mutex_unlock(&h->mu);
    uint64_t last = 0;
    if (end == END_NONE)
        end = fill(s, seq, &last);
    pthread_mutex_lock(&h->mu);
    if (end != END_NONE && s->end == END_NONE)
        s->end = end;
    end = s->end;
    if (last)
        s->next_seq = last + 1;
    if (s->len == 0 && beat && end == END_NONE && max >= sizeof(KEEPALIVE) - 1) {
        s->heartbeat_due = false;
        s->active_ms = clock_mono_ms();
        pthread_mutex_unlock(&h->mu);
        memcpy(buf, KEEPALIVE, sizeof(KEEPALIVE) - 1);
        return (long)(sizeof(KEEPALIVE) - 1);
    }
    if (s->len > 0) {
        s->heartbeat_due = false;
        s->active_ms = clock_mono_ms();
    }
    pthread_mutex_unlock(&h->mu);
    if (s->len > 0)
        return take(s, buf, max);
    return end == END_NONE ? 0 : -1;
}

static void stream_attach(void *ctx, net_http_stream *handle)
{
    sse_stream *s = ctx;
    pthread_mutex_lock(&s->owner->mu);
    s->handle = handle;
    pthread_cond_signal(&s->owner->cv);
    pthread_mutex_unlock(&s->owner->mu);
}

static void stream_done(void *ctx)
{
    sse_stream *s = ctx;
    struct http_streams *h = s->owner;
    pthread_mutex_lock(&h->mu);
    if (s->prev)
        s->prev->next = s->next;
    else
        h->list = s->next;
    if (s->next)
        s->next->prev = s->prev;
    h->count--;
    stream_end end = s->end == END_NONE ? END_CLIENT : s->end;
    pthread_cond_broadcast(&h->cv);
    pthread_mutex_unlock(&h->mu);
    atomic_fetch_add(&h->ended[end], 1);
    atomic_fetch_sub(&h->buffered, (int_fast64_t)(s->len - s->off));
    free(s->buf);
    free(s);
}

static const net_http_stream_ops stream_ops = {stream_attach, stream_read, stream_done};

/* ---- the request ---- */

typedef struct start_args {
    json_t *fields;
    int code;     /* an argument refused */
    char bad[64]; /* its name */
} start_args;

/* The query's one argument, `from` (or from_seq), as log_read's field. */
static bool query_arg(void *arg, const char *name, const char *value)
{
    start_args *a = arg;
    for (size_t i = 0; i < http_query_alias_count; i++)
        if (strcmp(name, http_query_aliases[i].arg) == 0)
            name = http_query_aliases[i].field;
    if (strcmp(name, "from_seq") != 0)
        a->code = TALLY_unknown_field;
    else if (json_object_get(a->fields, name))
        a->code = TALLY_duplicate_field;
    else if (json_object_set_new(a->fields, name, json_string(value)) != 0)
        a->code = TALLY_malformed_request; /* not UTF-8 */
    if (a->code != TALLY_ok)
        snprintf(a->bad, sizeof(a->bad), "%s", name);
    return a->code == TALLY_ok;
}

/* The first seq to send from `from` and Last-Event-ID; 0 when neither
 * says (then: after the head). Refusals are log_read's for the same
 * `from` (its decoder checks the field), else value_out_of_range. */
static int start_seq(const net_http_request *rq, uint64_t *seq, char *detail, size_t size)
{
    *seq = 0;
    const char *last = net_http_header(rq, "Last-Event-ID");
    if (last) {
        char *end = NULL;
        unsigned long long n = strtoull(last, &end, 10);
        if (*last < '0' || *last > '9' || *end != '\0' || n == UINT64_MAX) {
            snprintf(detail, size, "Last-Event-ID: the seq of the last event seen");
            return TALLY_value_out_of_range;
        }
        *seq = (uint64_t)n + 1;
    }
    start_args a = {json_object(), TALLY_ok, ""};
    if (a.fields == NULL)
        return TALLY_overloaded;
    net_http_query_each(rq, query_arg, &a);
    int rc = a.code;
    snprintf(detail, size, "%s", a.bad);
    bool has_from = json_object_get(a.fields, "from_seq") != NULL;
    msgpack_sbuffer sb;
    msgpack_packer pk;
    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    net_json_envelope e = {&net_ops[NET_OP_LOG_READ], NULL, NULL, {NULL, 0}, true};
    if (rc == TALLY_ok)
        rc = net_json_request_pack(&e, a.fields, &pk, detail, size);
    net_request req;
    net_request_init(&req);
    if (rc == TALLY_ok && (rc = net_request_decode(&req, sb.data, sb.size)) != TALLY_ok)
        snprintf(detail, size, "%s", req.error_detail);
    if (rc == TALLY_ok && has_from && *seq == 0)
        *seq = req.read.from_seq ? req.read.from_seq : 1;
    net_request_reset(&req);
    msgpack_sbuffer_destroy(&sb);
    json_decref(a.fields);
    return rc;
}

/* Where a stream asked to start at seq (0: after the head) starts; a
 * refusal when retention removed seq. */
static int start_check(server *srv, uint64_t *seq, char *detail, size_t size)
{
    store_txn t;
    if (!http_read_begin(srv, &t)) {
        snprintf(detail, size, "server is stopping, retry later");
        return TALLY_shutting_down;
    }
    log_head head;
    ledger_log_floor floor = {0};
    int rc = log_head_get(&t, &head);
    if (rc == TALLY_ok)
        rc = ledger_log_floor_get(&t, &floor);
    http_read_end(srv, &t);
    if (rc != TALLY_ok) {
        snprintf(detail, size, "the log could not be read: %s", tally_strerror(rc));
        return rc;
    }
    if (*seq == 0)
        *seq = head.seq + 1;
    if (*seq <= floor.seq) {
        snprintf(detail, size,
                 "from: %" PRIu64 " was removed by retention; the log starts at %" PRIu64, *seq,
                 floor.seq + 1);
        return TALLY_value_out_of_range;
    }
    return TALLY_ok;
}

/* With --auth: a token whose grants cover log_read's class. */
static int stream_allowed(server *srv, const net_http_request *rq, char *detail, size_t size)
{
    if (srv->auth == NULL)
        return TALLY_ok;
    tally_str token = http_bearer_token(rq);
    auth_request arq = {token.ptr != NULL, token, net_ops[NET_OP_LOG_READ].auth, {NULL, 0},
                        "events"};
    int rc = auth_guard_check(srv->auth, &arq, detail, size);
    if (rc != TALLY_ok)
        net_metrics_auth_refused(rc);
    return rc;
}

void http_events_route(void *ctx, const net_http_request *rq, net_http_reply *out)
{
    server *srv = ctx;
    struct http_streams *h = srv->http->streams;
    char detail[128] = "";
    uint64_t seq = 0;
    int rc = stream_allowed(srv, rq, detail, sizeof(detail));
    if (rc == TALLY_ok)
        rc = start_seq(rq, &seq, detail, sizeof(detail));
    if (rc == TALLY_ok)
        rc = start_check(srv, &seq, detail, sizeof(detail));
    sse_stream *s = rc == TALLY_ok ? calloc(1, sizeof(*s)) : NULL;
    if (rc == TALLY_ok && s == NULL)
        rc = TALLY_overloaded, snprintf(detail, sizeof(detail), "out of memory");
    if (rc != TALLY_ok)
        return http_json_error(out, rc, detail);
    int64_t now = clock_mono_ms();
    *s = (sse_stream){srv, h, NULL, 0, 0, 0, NULL, seq, now,
                      now + (int64_t)srv->opt->http_stream_life_s * 1000, false, END_NONE,
                      NULL, NULL};
    pthread_mutex_lock(&h->mu);
    if (h->stopping)
        s->end = END_STOPPING;
    s->next = h->list;
    if (h->list)
        h->list->prev = s;
    h->list = s;
    h->count++;
    pthread_mutex_unlock(&h->mu);
    out->content_type = SSE_TYPE;
    out->headers[0].name = "Cache-Control", out->headers[0].value = "no-cache";
    out->headers[1].name = "X-Accel-Buffering", out->headers[1].value = "no";
    out->stream = &stream_ops;
    out->stream_ctx = s;
    /* The kernel holds as much again as tallyd at most (Linux doubles it). */
    out->stream_send_buffer = (int)(srv->opt->http_stream_buffer_bytes / 2);
}

/* ---- start, stop, metrics ---- */

int http_events_start(server *srv)
{
    struct http_streams *h = calloc(1, sizeof(*h));
    if (h == NULL)
        return NNG_ENOMEM;
    pthread_mutex_init(&h->mu, NULL);
    pthread_cond_init(&h->cv, NULL);
    srv->http->streams = h;
    if (pthread_create(&h->thread, NULL, waker_main, srv) != 0)
        return NNG_ENOMEM;
    h->thread_started = true;
    pthread_mutex_lock(&srv->mu);
    pthread_mutex_lock(&h->mu);
    h->head = srv->head_seq;
    pthread_mutex_unlock(&h->mu);
    srv->head_moved = head_moved;
    pthread_mutex_unlock(&srv->mu);
    return 0;
}

void http_events_stop(server *srv)
{
    struct http_streams *h = srv->http ? srv->http->streams : NULL;
    if (h == NULL)
        return;
    pthread_mutex_lock(&h->mu);
    h->stopping = true;
    for (sse_stream *s = h->list; s; s = s->next) {
        if (s->end == END_NONE)
            s->end = END_STOPPING;
        if (s->handle)
            net_http_stream_wake(s->handle);
    }
    pthread_cond_broadcast(&h->cv);
    pthread_mutex_unlock(&h->mu);
    if (h->thread_started)
        pthread_join(h->thread, NULL);
    h->thread_started = false;
    /* the listener's thread ends each stream at its next read */
    int64_t deadline = clock_mono_ms() + STOP_WAIT_MS;
    pthread_mutex_lock(&h->mu);
    while (h->count > 0 && clock_mono_ms() < deadline) {
        struct timespec until = wall_after(50);
        pthread_cond_timedwait(&h->cv, &h->mu, &until);
    }
    if (h->count > 0)
        net_log(NET_LOG_WARN, "HTTP: %u event streams still open at stop", h->count);
    pthread_mutex_unlock(&h->mu);
}

void http_events_metrics(server *srv, net_text *out)
{
    struct http_streams *h = srv->http ? srv->http->streams : NULL;
    if (h == NULL)
        return;
    pthread_mutex_lock(&h->mu);
    unsigned open = h->count;
    pthread_mutex_unlock(&h->mu);
    net_text_printf(out, "# HELP tally_http_streams GET /v1/events streams open.\n"
                         "# TYPE tally_http_streams gauge\ntally_http_streams %u\n", open);
    net_text_printf(out, "# HELP tally_http_stream_buffered_bytes Bytes of events GET /v1/events "
                         "streams hold rendered and not yet sent.\n"
                         "# TYPE tally_http_stream_buffered_bytes gauge\n"
                         "tally_http_stream_buffered_bytes %" PRIdFAST64 "\n",
                    atomic_load(&h->buffered));
    net_text_printf(out, "# HELP tally_http_stream_events_total Events sent on GET /v1/events "
                         "streams.\n# TYPE tally_http_stream_events_total counter\n"
                         "tally_http_stream_events_total %" PRIuFAST64 "\n",
                    atomic_load(&h->events));
    net_text_printf(out, "# HELP tally_http_streams_ended_total GET /v1/events streams ended, "
                         "by reason.\n# TYPE tally_http_streams_ended_total counter\n");
    for (int i = END_CLIENT; i < END_REASONS; i++)
        net_text_printf(out, "tally_http_streams_ended_total{reason=\"%s\"} %" PRIuFAST64 "\n",
                        end_names[i], atomic_load(&h->ended[i]));
}
