/*
 * http_conns.c — the HTTP face's connection table (http_conns.h): the
 * admission of each connection libmicrohttpd accepts (limits, eviction,
 * the reserved places), every request's arrival deadline, and the guard
 * thread that enforces it. libmicrohttpd's own timeout counts only
 * idleness (each byte resets it), so a client sending a byte every few
 * seconds would hold a place forever; the deadline here counts from the
 * moment the connection became ready for the request.
 *
 * libmicrohttpd's thread adds, updates and removes entries; the guard
 * and /metrics read them: all under mu. An entry is removed (its close
 * notification) before libmicrohttpd closes the socket, so a shutdown
 * under mu never reaches a reused descriptor.
 */
#include "net/http/http_conns.h"

#include "common/clock.h"
#include "common/limits.h"
#include "common/logging.h"

#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/ioctl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* How often the guard looks for requests past their deadline. */
#define GUARD_TICK_MS 100

typedef struct http_address {
    sa_family_t family;
    unsigned char bytes[16];
} http_address;

/* An address with connections in the table: counted as they come and go,
 * so that an admission costs one pass over the table, never one per
 * entry. */
typedef struct http_peer {
    struct http_peer *next;
    http_address address;
    unsigned open;    /* its connections not closing */
    unsigned entries; /* its connections in the table */
} http_peer;

typedef enum http_phase {
    PHASE_READY,     /* waiting for a request's headers (idle, or slow) */
    PHASE_BODY,      /* headers in, the body arriving */
    PHASE_ANSWERING, /* in whole: being answered, its reply leaving */
} http_phase;

struct http_conn {
    http_conn *prev, *next;
    int fd;
    http_peer *peer;
    int64_t ready_ms;    /* when it became ready for the request (mono) */
    uint64_t body_bytes; /* of the request arriving */
    http_phase phase;
    bool reserved;       /* on a reserved place */
    bool closing;        /* shut down: libmicrohttpd closes it next */
};

struct http_conns {
    http_conns_limits limits;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    pthread_t guard;
    bool stop;                 /* under mu */
    http_conn *head;           /* under mu: oldest first */
    http_conn *tail;
    http_peer *peers;          /* under mu */
    unsigned open, reserved;   /* under mu: not closing; of them on reserved places */
    atomic_uint_fast64_t counts[HTTP_CLOSE_REASONS];
};

/* ---- helpers (under mu) ---- */

static void address_of(const struct sockaddr *sa, http_address *a)
{
    memset(a, 0, sizeof(*a));
    if (sa == NULL)
        return;
    a->family = sa->sa_family;
    if (sa->sa_family == AF_INET)
        memcpy(a->bytes, &((const struct sockaddr_in *)sa)->sin_addr, 4);
    else if (sa->sa_family == AF_INET6)
        memcpy(a->bytes, &((const struct sockaddr_in6 *)sa)->sin6_addr, 16);
}

static bool address_equal(const http_address *a, const http_address *b)
{
    return a->family == b->family && memcmp(a->bytes, b->bytes, sizeof(a->bytes)) == 0;
}

/* The record of address a, made when new (NULL: out of memory). */
static http_peer *peer_of(http_conns *t, const http_address *a)
{
    for (http_peer *p = t->peers; p; p = p->next)
        if (address_equal(&p->address, a))
            return p;
    http_peer *p = calloc(1, sizeof(*p));
    if (p == NULL)
        return NULL;
    p->address = *a;
    p->next = t->peers;
    t->peers = p;
    return p;
}

static void peer_release(http_conns *t, http_peer *gone)
{
    if (--gone->entries > 0)
        return;
    for (http_peer **p = &t->peers; *p; p = &(*p)->next)
        if (*p == gone) {
            *p = gone->next;
            break;
        }
    free(gone);
}

/* c no longer holds a place (closing, or closed before that). */
static void place_release(http_conns *t, http_conn *c)
{
    t->open--;
    c->peer->open--;
    if (c->reserved)
        t->reserved--;
}

/* Shut c's socket down (libmicrohttpd closes it at once), counted. */
static void close_one(http_conns *t, http_conn *c, http_close_reason why)
{
    if (c->closing)
        return;
    c->closing = true;
    place_release(t, c);
    shutdown(c->fd, SHUT_RDWR);
    atomic_fetch_add_explicit(&t->counts[why], 1, memory_order_relaxed);
}

static bool evictable(const http_conn *c, int64_t now_ms)
{
    return !c->closing && c->phase == PHASE_READY &&
           now_ms - c->ready_ms >= TALLY_HTTP_EVICT_IDLE_MS_MIN;
}

/* The connection to evict for a newcomer: of address `only` when given,
 * else of the address holding the most; the longest idle there. NULL
 * when none may go. */
static http_conn *eviction_pick(const http_conns *t, const http_peer *only, int64_t now_ms)
{
    http_conn *best = NULL;
    for (http_conn *c = t->head; c; c = c->next) {
        if (!evictable(c, now_ms) || (only && c->peer != only))
            continue;
        if (best == NULL || c->peer->open > best->peer->open ||
            (c->peer->open == best->peer->open && c->ready_ms < best->ready_ms))
            best = c;
    }
    return best;
}

/* The moment c's request must be in whole by. */
static int64_t deadline_of(const http_conns *t, const http_conn *c)
{
    return c->ready_ms + (int64_t)t->limits.timeout_s * 1000 +
           (int64_t)(c->body_bytes * 1000 / TALLY_HTTP_BODY_BYTES_PER_S_MIN);
}

/* ---- the guard ---- */

/* Whether c's client has hung up (or the socket failed) with nothing of
 * it left unread, without reading anything: a request not yet in whole
 * can then never complete. */
static bool peer_gone(const http_conn *c)
{
    struct pollfd p = {c->fd, POLLRDHUP, 0};
    int unread = 0;
    return poll(&p, 1, 0) == 1 &&
           (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL)) != 0 &&
           (ioctl(c->fd, FIONREAD, &unread) != 0 || unread == 0);
}

static void *guard_main(void *arg)
{
    http_conns *t = arg;
    pthread_mutex_lock(&t->mu);
    while (!t->stop) {
        int64_t now = clock_mono_ms();
        for (http_conn *c = t->head; c; c = c->next) {
            if (c->closing || c->phase == PHASE_ANSWERING)
                continue;
            if (now >= deadline_of(t, c))
                close_one(t, c, HTTP_CLOSED_TIMEOUT);
            /* libmicrohttpd may not see a hang-up while it waits for the
             * rest of a request (seen under load: the places of gone
             * clients kept for --http-timeout-s); shut it down, so that it
             * notices and the place comes free */
            else if (peer_gone(c))
                close_one(t, c, HTTP_CLOSED_PEER_GONE);
        }
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        until.tv_nsec += GUARD_TICK_MS * 1000000L;
        if (until.tv_nsec >= 1000000000L) {
            until.tv_sec++;
            until.tv_nsec -= 1000000000L;
        }
        pthread_cond_timedwait(&t->cv, &t->mu, &until);
    }
    pthread_mutex_unlock(&t->mu);
    return NULL;
}

int http_conns_start(const http_conns_limits *l, http_conns **out)
{
    *out = NULL;
    http_conns *t = calloc(1, sizeof(*t));
    if (t == NULL)
        return ENOMEM;
    t->limits = *l;
    pthread_mutex_init(&t->mu, NULL);
    pthread_cond_init(&t->cv, NULL);
    int rc = pthread_create(&t->guard, NULL, guard_main, t);
    if (rc != 0) {
        pthread_cond_destroy(&t->cv);
        pthread_mutex_destroy(&t->mu);
        free(t);
        return rc;
    }
    *out = t;
    return 0;
}

void http_conns_stop(http_conns *t)
{
    if (t == NULL)
        return;
    pthread_mutex_lock(&t->mu);
    t->stop = true;
    pthread_cond_signal(&t->cv);
    pthread_mutex_unlock(&t->mu);
    pthread_join(t->guard, NULL);
    while (t->head) { /* libmicrohttpd said every close; this is only a fence */
        http_conn *c = t->head;
        t->head = c->next;
        free(c);
    }
    while (t->peers) {
        http_peer *p = t->peers;
        t->peers = p->next;
        free(p);
    }
    pthread_cond_destroy(&t->cv);
    pthread_mutex_destroy(&t->mu);
    free(t);
}

/* ---- libmicrohttpd's thread ---- */

/* Make room for c (just added): evict, take a reserved place, or refuse. */
static void admit(http_conns *t, http_conn *c, int64_t now_ms)
{
    const http_conns_limits *l = &t->limits;
    if (c->peer->open > l->per_address_max) {
        http_conn *victim = eviction_pick(t, c->peer, now_ms);
        if (victim == NULL)
            return close_one(t, c, HTTP_CLOSED_REFUSED_ADDRESS);
        close_one(t, victim, HTTP_CLOSED_EVICTED);
    }
    if (t->open - t->reserved <= l->connections_max)
        return;
    http_conn *victim = eviction_pick(t, NULL, now_ms);
    if (victim) {
        bool was_reserved = victim->reserved;
        close_one(t, victim, HTTP_CLOSED_EVICTED);
        if (!was_reserved)
            return; /* an ordinary place came free: c's */
        /* a reserved place came free: c takes it below */
    }
    if (t->reserved < l->reserved) {
        c->reserved = true;
        t->reserved++;
        return;
    }
    close_one(t, c, HTTP_CLOSED_REFUSED_TOTAL);
}

http_conn *http_conns_opened(http_conns *t, int fd, const struct sockaddr *peer)
{
    http_conn *c = calloc(1, sizeof(*c));
    if (c == NULL) {
        shutdown(fd, SHUT_RDWR);
        return NULL;
    }
    c->fd = fd;
    http_address address;
    address_of(peer, &address);
    int64_t now = clock_mono_ms();
    c->ready_ms = now;
    pthread_mutex_lock(&t->mu);
    if ((c->peer = peer_of(t, &address)) == NULL) {
        pthread_mutex_unlock(&t->mu);
        free(c);
        shutdown(fd, SHUT_RDWR);
        return NULL;
    }
    c->peer->entries++;
    c->peer->open++;
    c->prev = t->tail;
    if (t->tail)
        t->tail->next = c;
    else
        t->head = c;
    t->tail = c;
    t->open++;
    admit(t, c, now);
    pthread_mutex_unlock(&t->mu);
    return c;
}

void http_conns_closed(http_conns *t, http_conn *c)
{
    if (c == NULL)
        return;
    pthread_mutex_lock(&t->mu);
    if (!c->closing)
        place_release(t, c);
    peer_release(t, c->peer);
    if (c->prev)
        c->prev->next = c->next;
    else
        t->head = c->next;
    if (c->next)
        c->next->prev = c->prev;
    else
        t->tail = c->prev;
    pthread_mutex_unlock(&t->mu);
    free(c);
}

http_admit http_conns_request_begin(http_conns *t, http_conn *c, bool reserved_route)
{
    if (c == NULL)
        return HTTP_ADMIT_CLOSING;
    http_admit a = HTTP_ADMIT_YES;
    pthread_mutex_lock(&t->mu);
    if (c->closing) {
        a = HTTP_ADMIT_CLOSING;
    } else if (c->reserved && t->open - t->reserved < t->limits.connections_max) {
        c->reserved = false; /* a place came free: it is an ordinary one now */
        t->reserved--;
    } else if (c->reserved && !reserved_route) {
        a = HTTP_ADMIT_RESERVED_ONLY;
        atomic_fetch_add_explicit(&t->counts[HTTP_REFUSED_RESERVED], 1, memory_order_relaxed);
    }
    if (a == HTTP_ADMIT_YES)
        c->phase = PHASE_BODY;
    pthread_mutex_unlock(&t->mu);
    return a;
}

void http_conns_request_body(http_conns *t, http_conn *c, size_t bytes)
{
    if (c == NULL)
        return;
    pthread_mutex_lock(&t->mu);
    c->body_bytes += bytes;
    pthread_mutex_unlock(&t->mu);
}

void http_conns_request_in(http_conns *t, http_conn *c)
{
    if (c == NULL)
        return;
    pthread_mutex_lock(&t->mu);
    c->phase = PHASE_ANSWERING;
    pthread_mutex_unlock(&t->mu);
}

void http_conns_request_done(http_conns *t, http_conn *c)
{
    if (c == NULL)
        return;
    pthread_mutex_lock(&t->mu);
    c->phase = PHASE_READY;
    c->ready_ms = clock_mono_ms();
    c->body_bytes = 0;
    pthread_mutex_unlock(&t->mu);
}

void http_conns_count(http_conns *t, http_close_reason why)
{
    atomic_fetch_add_explicit(&t->counts[why], 1, memory_order_relaxed);
}

/* ---- /metrics ---- */

static const struct {
    bool refused; /* tally_http_refused_total, else tally_http_connections_closed_total */
    const char *label;
} reason_rows[HTTP_CLOSE_REASONS] = {
    [HTTP_CLOSED_TIMEOUT] = {false, "timeout"},
    [HTTP_CLOSED_EVICTED] = {false, "evicted"},
    [HTTP_CLOSED_BODY_TOO_LARGE] = {false, "body_too_large"},
    [HTTP_CLOSED_PEER_GONE] = {false, "peer_gone"},
    [HTTP_CLOSED_REFUSED_TOTAL] = {true, "connections"},
    [HTTP_CLOSED_REFUSED_ADDRESS] = {true, "per_address"},
    [HTTP_REFUSED_RESERVED] = {true, "reserved_only"},
};

void http_conns_metrics(http_conns *t, net_text *out)
{
    net_text_family(out, "tally_http_connections_closed_total", "counter",
                    "HTTP connections tallyd closed, by reason: timeout (a request not in whole "
                    "within --http-timeout-s), evicted (idle, its place taken by a newcomer), "
                    "body_too_large (a body without Content-Length over the limit), peer_gone "
                    "(the client hung up before its request was in whole).");
    for (int r = 0; r < HTTP_CLOSE_REASONS; r++)
        if (!reason_rows[r].refused)
            net_text_printf(out, "tally_http_connections_closed_total{reason=\"%s\"} %llu\n",
                            reason_rows[r].label,
                            (unsigned long long)atomic_load(&t->counts[r]));
    net_text_family(out, "tally_http_refused_total", "counter",
                    "HTTP connections or requests refused, by reason: connections (closed at "
                    "accept: every place taken, none idle), per_address (closed at accept: "
                    "--http-max-per-address, none idle), reserved_only (503 on a reserved place).");
    for (int r = 0; r < HTTP_CLOSE_REASONS; r++)
        if (reason_rows[r].refused)
            net_text_printf(out, "tally_http_refused_total{reason=\"%s\"} %llu\n",
                            reason_rows[r].label,
                            (unsigned long long)atomic_load(&t->counts[r]));
    pthread_mutex_lock(&t->mu);
    unsigned reserved = t->reserved;
    pthread_mutex_unlock(&t->mu);
    net_text_sample_u64(out, "tally_http_reserved_connections", "gauge",
                        "HTTP connections on the reserved places (--http-reserved-connections).",
                        reserved);
}
