/*
 * sp_loop.c — tallyd's own transport for tcp:// request endpoints
 * (--tcp-engine epoll, the default): one thread owns the listening and
 * accepted sockets in an epoll loop and speaks the SP layer of
 * docs/PROTOCOL.md ("The SP layer") itself, byte for byte as NNG's REP0
 * over TCP does; ipc://, ws:// and tls+tcp:// stay with NNG.
 *
 * Why: with NNG 1.5 a request crosses at least three threads (the poller,
 * a task thread for the receive, another for the send) before and after
 * the writer; on two vCPUs those switches were the largest part of
 * tallyd's cost per request (docs/BENCHMARKS.md). Here a request is read
 * and decoded on the loop, handed to the writer's queue (one wake-up per
 * group, not per request), and its reply is written to the socket by the
 * thread that has it ready — the writer or completer after the commit, the
 * loop itself for a read — with one sendmsg. Only when the socket's buffer
 * is full does the rest wait for the loop (EPOLLOUT).
 *
 * A connection (sp_conn) is counted with NNG's in tally_connections and
 * bounded by --max-connections and --max-connections-per-address
 * (net/sp/pipes.c). Each request is a slot of its own, taken from a free
 * list; at most --contexts are in flight over all connections and
 * --max-in-flight-per-connection on one, and a connection whose replies
 * are not read (--max-unread-reply-kib pending) is not read either:
 * requests wait in the kernel's buffers, as they do with NNG. Paused
 * connections are resumed in turn (the one served last goes to the back).
 * A slot holds a reference to its connection, so a reply to a connection
 * that has gone is dropped, never written to a reused fd.
 *
 * What a hostile client can hold is bounded (docs/OPERATIONS.md, "Overload
 * and limits"): the SP header and each request must arrive whole within
 * --request-timeout-s of their first byte (plus the request's size at
 * --request-min-kib-per-s); the receive buffer grows as bytes arrive, not
 * to the size a frame announces; a connection with nothing in flight, or
 * whose client reads none of its replies, is closed after --idle-timeout-s;
 * at most --max-long-polls-per-connection of its long-polls park. Big
 * buffers freed are given back to the system by the main thread
 * (pipes_close_idle's malloc_trim).
 * Control ops (backup, health) run on a thread of their own, so a backup
 * does not stall the loop.
 */
#include "net/sp/sp_loop.h"
#include "net/sp/sp_loop_impl.h"

#include "common/bytes.h"
#include "common/clock.h"
#include "common/limits.h"
#include "net/metrics/metrics.h"
#include "net/sp/sp.h"

#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

/* ---- connections ---- */

static void resume_paused(struct sp_loop *lp);

static void conn_unref(sp_conn *c)
{
    if (atomic_fetch_sub(&c->refs, 1) != 1)
        return;
    server *srv = c->lp->srv;
    pipes_forget(srv, c->id);
    close(c->fd);
    pthread_mutex_destroy(&c->mu);
    if (c->in_cap > SP_BIG_BUFFER_BYTES || c->out_cap > SP_BIG_BUFFER_BYTES)
        atomic_store(&c->lp->srv->sp->trim_wanted, true);
    free(c->in);
    free(c->out);
    free(c);
}

/* The loop closes c: no more reads or replies. The loop's reference goes
 * at the end of this turn of the loop (events of the same batch may still
 * name c); c is freed when its last list and slot let go. */
static void conn_close(sp_conn *c)
{
    if (c->dead)
        return;
    c->dead = true;
    c->next_closing = c->lp->closing;
    c->lp->closing = c;
    if (c->prev_open)
        c->prev_open->next_open = c->next_open;
    else
        c->lp->open_list = c->next_open;
    if (c->next_open)
        c->next_open->prev_open = c->prev_open;
    c->prev_open = c->next_open = NULL;
    epoll_ctl(c->lp->epfd, EPOLL_CTL_DEL, c->fd, NULL);
    shutdown(c->fd, SHUT_RDWR);
    pthread_mutex_lock(&c->mu);
    c->closed = true;
    if (c->out_len > c->out_off)
        atomic_fetch_sub(&c->lp->srv->sp->sends_in_flight, 1);
    c->out_len = c->out_off = 0;
    pthread_mutex_unlock(&c->mu);
}

static void conn_update_mask(sp_conn *c)
{
    if (c->dead)
        return;
    pthread_mutex_lock(&c->mu);
    uint32_t mask = (c->paused || c->ready ? 0 : EPOLLIN) | (c->want_out ? EPOLLOUT : 0);
    pthread_mutex_unlock(&c->mu);
    if (mask != c->mask && sp_loop_epoll_set(c->lp, EPOLL_CTL_MOD, c->fd, mask, c) == 0)
        c->mask = mask;
}

/* Append what did not fit in the socket; the loop sends it (EPOLLOUT).
 * Under c->mu. false: out of memory (the reply is lost; logged). */
static bool conn_keep(sp_conn *c, const struct iovec *iov, int iovcnt, size_t skip)
{
    size_t left = 0;
    for (int i = 0; i < iovcnt; i++)
        left += iov[i].iov_len;
    left -= skip;
    if (c->out_off > 0 && c->out_off == c->out_len)
        c->out_off = c->out_len = 0;
    if (c->out_len + left > c->out_cap) {
        size_t cap = c->out_cap ? c->out_cap : SP_READ_CHUNK;
        while (cap < c->out_len + left)
            cap *= 2;
        uint8_t *b = realloc(c->out, cap);
        if (b == NULL)
            return false;
        c->out = b;
        c->out_cap = cap;
    }
    for (int i = 0; i < iovcnt; i++) {
        size_t len = iov[i].iov_len;
        const uint8_t *p = iov[i].iov_base;
        if (skip >= len) {
            skip -= len;
            continue;
        }
        memcpy(c->out + c->out_len, p + skip, len - skip);
        c->out_len += len - skip;
        skip = 0;
    }
    return true;
}

/* Send a frame (u64 length, the request's trace, the reply) from any
 * thread: straight to the socket when nothing waits before it. */
static void conn_send(sp_conn *c, const uint8_t *trace, size_t trace_len, const void *body,
                      size_t body_len)
{
    uint8_t head[8 + 4 * SP_TRACE_WORDS_MAX];
    put_u64_be(head, trace_len + body_len);
    memcpy(head + 8, trace, trace_len);
    struct iovec iov[2] = {{head, 8 + trace_len}, {(void *)body, body_len}};
    size_t total = 8 + trace_len + body_len;
    sp_loop *lp = c->lp;
    pthread_mutex_lock(&c->mu);
    if (c->closed) {
        pthread_mutex_unlock(&c->mu);
        return;
    }
    size_t sent = 0;
    bool was_empty = c->out_len == c->out_off;
    if (was_empty) {
        struct msghdr mh = {.msg_iov = iov, .msg_iovlen = 2};
        ssize_t n;
        do
            n = sendmsg(c->fd, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
        while (n < 0 && errno == EINTR);
        if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK) {
            pthread_mutex_unlock(&c->mu); /* the loop sees the error and closes it */
            return;
        }
        sent = n > 0 ? (size_t)n : 0;
    }
    if (sent == total) {
        pthread_mutex_unlock(&c->mu);
        return;
    }
    if (!conn_keep(c, iov, 2, sent)) {
        pthread_mutex_unlock(&c->mu);
        net_log(NET_LOG_ERROR, "out of memory keeping a reply; the connection is closed");
        shutdown(c->fd, SHUT_RDWR);
        return;
    }
    if (was_empty) {
        atomic_fetch_add(&lp->srv->sp->sends_in_flight, 1);
        c->out_moved_ms = clock_mono_ms();
    }
    bool list = !c->out_listed;
    c->want_out = true;
    c->out_listed = true;
    pthread_mutex_unlock(&c->mu);
    if (list) {
        atomic_fetch_add(&c->refs, 1); /* the out list's */
        pthread_mutex_lock(&lp->mu);
        c->next_out = lp->out_list;
        lp->out_list = c;
        pthread_mutex_unlock(&lp->mu);
        sp_loop_wake(lp);
    }
}

/* EPOLLOUT: send what waits. */
static void conn_flush(sp_conn *c)
{
    pthread_mutex_lock(&c->mu);
    while (!c->closed && c->out_off < c->out_len) {
        ssize_t n = send(c->fd, c->out + c->out_off, c->out_len - c->out_off,
                         MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n > 0) {
            c->out_off += (size_t)n;
            c->out_moved_ms = clock_mono_ms();
            continue;
        }
        if (n < 0 && errno == EINTR)
            continue;
        break;
    }
    bool drained = c->out_off == c->out_len;
    if (drained && c->want_out) {
        c->want_out = false;
        c->out_off = c->out_len = 0;
        if (!c->closed)
            atomic_fetch_sub(&c->lp->srv->sp->sends_in_flight, 1);
    }
    if (drained && c->out_cap > SP_BIG_BUFFER_BYTES) { /* a burst went: give its room back */
        free(c->out);
        c->out = NULL;
        c->out_cap = 0;
        atomic_store(&c->lp->srv->sp->trim_wanted, true);
    }
    pthread_mutex_unlock(&c->mu);
    conn_update_mask(c);
    if (drained && c->paused)
        resume_paused(c->lp);
}

/* ---- slots ---- */

static void loop_answer(slot *s, nng_msg *reply);
static bool loop_long_poll_begin(slot *s);
/* Control ops go to the loop's control thread: the loop never blocks. */
static const slot_way loop_way = {loop_answer, sp_loop_control, loop_long_poll_begin};

static slot *slot_take(sp_loop *lp, sp_conn *c)
{
    pthread_mutex_lock(&lp->mu);
    slot *s = lp->free_slots;
    if (s)
        lp->free_slots = s->next;
    pthread_mutex_unlock(&lp->mu);
    if (s == NULL) {
        s = calloc(1, sizeof(*s));
        if (s == NULL)
            return NULL;
        net_request_init(&s->req);
    }
    s->srv = lp->srv;
    atomic_init(&s->owner, OWNER_NNG);
    s->timed_kind = -1;
    s->next = NULL;
    s->way = &loop_way;
    s->conn = c;
    s->long_poll_held = false;
    atomic_fetch_add(&c->refs, 1);
    atomic_fetch_add(&c->in_flight, 1);
    atomic_fetch_add(&lp->in_flight, 1);
    return s;
}

static void slot_give_back(sp_loop *lp, slot *s)
{
    sp_conn *c = s->conn;
    s->conn = NULL;
    pthread_mutex_lock(&lp->mu);
    s->next = lp->free_slots;
    lp->free_slots = s;
    pthread_mutex_unlock(&lp->mu);
    if (s->long_poll_held)
        atomic_fetch_sub(&c->long_polls, 1);
    s->long_poll_held = false;
    atomic_store(&c->active_ms, clock_mono_ms());
    unsigned conn_was = atomic_fetch_sub(&c->in_flight, 1);
    unsigned was = atomic_fetch_sub(&lp->in_flight, 1);
    conn_unref(c);
    if (atomic_load(&lp->paused) > 0 &&
        (was == lp->in_flight_max || conn_was == lp->conn_in_flight_max))
        sp_loop_wake(lp);
}

/* At most --max-long-polls-per-connection of one connection's long-polls
 * park; slot_give_back lets one go. */
static bool loop_long_poll_begin(slot *s)
{
    sp_conn *c = s->conn;
    unsigned held = atomic_fetch_add(&c->long_polls, 1);
    if (held >= c->lp->conn_long_polls_max) {
        atomic_fetch_sub(&c->long_polls, 1);
        return false;
    }
    s->long_poll_held = true;
    return true;
}

static void loop_answer(slot *s, nng_msg *reply)
{
    sp_conn *c = s->conn;
    if (reply == NULL) {
        net_log(NET_LOG_ERROR, "could not build a reply; the request gets none");
    } else {
        conn_send(c, s->trace, s->trace_len, nng_msg_body(reply), nng_msg_len(reply));
        nng_msg_free(reply);
        if (s->timed_kind >= 0)
            net_metrics_request_done((net_request_kind)s->timed_kind,
                                     clock_mono_ns() - s->arrived_ns);
    }
    slot_give_back(c->lp, s);
}

/* ---- reading requests ---- */

/* One frame's payload: the trace (routing hops, then the id with its high
 * bit), then the msgpack request. false: close the connection. */
static bool conn_request(sp_conn *c, const uint8_t *p, size_t len)
{
    size_t at = 0;
    for (;;) {
        if (len - at < 4)
            return false; /* garbage: NNG closes such a peer too */
        uint32_t word = get_u32_be(p + at);
        at += 4;
        if (word & SP_ID_BIT)
            break;
        if (at / 4 >= SP_TRACE_WORDS_MAX)
            return true; /* too many hops: dropped unanswered */
    }
    sp_loop *lp = c->lp;
    slot *s = slot_take(lp, c);
    if (s == NULL || nng_msg_alloc(&s->msg, len - at) != 0) {
        net_log(NET_LOG_ERROR, "out of memory taking a request; its connection is closed");
        if (s) {
            s->msg = NULL;
            slot_give_back(lp, s);
        }
        return false;
    }
    memcpy(nng_msg_body(s->msg), p + at, len - at);
    memcpy(s->trace, p, at);
    s->trace_len = (uint8_t)at;
    s->arrived_ns = clock_mono_ns();
    slot_serve(s);
    return true;
}

static bool header_ok(const uint8_t *h)
{
    return h[0] == 0 && h[1] == 'S' && h[2] == 'P' && h[3] == 0 && get_u16_be(h + 4) == 0x30 &&
           h[6] == 0 && h[7] == 0;
}

/* Stop reading c until slots come back or its replies are read; the
 * paused list holds a reference. Checked again after: a slot that came
 * back before c was listed would not have woken the loop. */
static void conn_pause(sp_conn *c)
{
    sp_loop *lp = c->lp;
    if (c->paused)
        return;
    c->paused = true;
    atomic_fetch_add(&c->refs, 1);
    c->next_paused = NULL;
    if (lp->paused_tail)
        lp->paused_tail->next_paused = c;
    else
        lp->paused_list = c;
    lp->paused_tail = c;
    atomic_fetch_add(&lp->paused, 1);
    conn_update_mask(c);
    if (atomic_load(&lp->in_flight) < lp->in_flight_max)
        sp_loop_wake(lp);
}

static bool conn_must_wait(sp_conn *c)
{
    sp_loop *lp = c->lp;
    if (atomic_load(&lp->in_flight) >= lp->in_flight_max ||
        atomic_load(&c->in_flight) >= lp->conn_in_flight_max)
        return true;
    pthread_mutex_lock(&c->mu);
    bool backlog = c->out_len - c->out_off >= lp->unread_bytes_max;
    pthread_mutex_unlock(&c->mu);
    return backlog;
}

/* The deadline of the request in progress: --request-timeout-s from its
 * first byte, plus its announced size at --request-min-kib-per-s. Not
 * timed while paused (tallyd does not read it then). */
static void conn_time_request(sp_conn *c)
{
    const net_server_options *o = c->lp->srv->opt;
    if (c->in_len == 0 || c->paused || c->ready) {
        c->partial_since_ms = 0;
        return;
    }
    if (c->partial_since_ms == 0)
        c->partial_since_ms = clock_mono_ms();
    uint64_t len = c->in_len >= 8 ? get_u64_be(c->in) : 0;
    uint64_t kib_per_s = o->request_min_kib_per_s ? o->request_min_kib_per_s : 1;
    c->request_deadline_ms = c->partial_since_ms + (int64_t)o->request_timeout_s * 1000 +
                             (int64_t)(len * 1000 / (kib_per_s * 1024));
}

/* c served its turn with whole requests left: the others' turn first
 * (the ready list holds a reference; c is not read meanwhile). */
static void conn_yield(sp_conn *c)
{
    sp_loop *lp = c->lp;
    c->ready = true;
    atomic_fetch_add(&c->refs, 1);
    c->next_ready = NULL;
    if (lp->ready_tail)
        lp->ready_tail->next_ready = c;
    else
        lp->ready_list = c;
    lp->ready_tail = c;
    conn_update_mask(c);
}

/* Serve the whole frames read so far, SP_FRAMES_PER_TURN at most (then
 * conn_yield); keep a partial one. */
static void conn_serve_input(sp_conn *c)
{
    size_t at = 0;
    unsigned served = 0;
    if (!c->header_in) {
        if (c->in_len < SP_HEADER_BYTES)
            return;
        if (!header_ok(c->in)) {
            conn_close(c);
            return;
        }
        c->header_in = true;
        at = SP_HEADER_BYTES;
    }
    while (!c->dead && c->in_len - at >= 8) {
        if (conn_must_wait(c)) {
            conn_pause(c);
            break;
        }
        if (served == SP_FRAMES_PER_TURN) {
            conn_yield(c);
            break;
        }
        uint64_t len = get_u64_be(c->in + at);
        if (len > SP_FRAME_BYTES_MAX) {
            conn_close(c); /* as NNG does beyond its receive limit */
            return;
        }
        if (c->in_len - at - 8 < len)
            break;
        if (!conn_request(c, c->in + at + 8, (size_t)len)) {
            conn_close(c);
            return;
        }
        at += 8 + (size_t)len;
        served++;
    }
    if (at > 0 && !c->dead) {
        memmove(c->in, c->in + at, c->in_len - at);
        c->in_len -= at;
        c->partial_since_ms = 0; /* a request came whole: the next one's clock starts anew */
    }
    if (!c->dead)
        conn_time_request(c);
}

/* Room for a chunk more. The buffer doubles as bytes arrive, up to what
 * the frame in progress needs: a frame that announces 2 MiB and sends a
 * few bytes costs a few KiB, not 2 MiB. */
static bool conn_in_room(sp_conn *c)
{
    size_t want = c->in_len + SP_READ_CHUNK;
    if (want <= c->in_cap)
        return true;
    size_t cap = c->in_cap * 2 > want ? c->in_cap * 2 : want;
    if (c->header_in && c->in_len >= 8) {
        uint64_t len = get_u64_be(c->in);
        if (len <= SP_FRAME_BYTES_MAX && 8 + (size_t)len >= want && 8 + (size_t)len < cap)
            cap = 8 + (size_t)len;
    }
    want = cap;
    uint8_t *b = realloc(c->in, want);
    if (b == NULL)
        return false;
    c->in = b;
    c->in_cap = want;
    return true;
}

static void conn_read(sp_conn *c)
{
    if (c->paused || c->ready || c->dead)
        return;
    if (!conn_in_room(c)) {
        conn_close(c);
        return;
    }
    ssize_t n;
    do
        n = recv(c->fd, c->in + c->in_len, c->in_cap - c->in_len, 0);
    while (n < 0 && errno == EINTR);
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK)) {
        conn_close(c);
        return;
    }
    if (n > 0) {
        c->in_len += (size_t)n;
        atomic_store(&c->active_ms, clock_mono_ms());
        conn_serve_input(c);
    }
    if (!c->dead && c->in_len == 0 && c->in_cap > SP_BIG_BUFFER_BYTES) {
        free(c->in); /* a large request went: give its room back */
        c->in = NULL;
        c->in_cap = 0;
        atomic_store(&c->lp->srv->sp->trim_wanted, true);
    }
}

/* ---- accepting ---- */

static const uint8_t rep_header[SP_HEADER_BYTES] = {0, 'S', 'P', 0, 0, 0x31, 0, 0};

static void accept_one(sp_loop *lp, int fd, const struct sockaddr_storage *peer)
{
    sp_conn *c = calloc(1, sizeof(*c));
    uint32_t id = SP_ID_BIT | (++lp->next_id & ~SP_ID_BIT);
    sp_address addr;
    sp_address_of((const struct sockaddr *)peer, &addr);
    if (c == NULL || pipes_admit(lp->srv, id, &addr, false) != SP_ADMITTED) {
        free(c);
        close(fd);
        return;
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    c->kind = SP_CONN;
    c->fd = fd;
    c->id = id;
    c->lp = lp;
    atomic_init(&c->refs, 2); /* the loop's and the header list's */
    pthread_mutex_init(&c->mu, NULL);
    c->header_deadline_ms = clock_mono_ms() + (int64_t)lp->srv->opt->request_timeout_s * 1000;
    atomic_init(&c->active_ms, clock_mono_ms());
    c->mask = EPOLLIN;
    if (send(fd, rep_header, sizeof(rep_header), MSG_NOSIGNAL | MSG_DONTWAIT) !=
            (ssize_t)sizeof(rep_header) ||
        sp_loop_epoll_set(lp, EPOLL_CTL_ADD, fd, EPOLLIN, c) != 0) {
        atomic_store(&c->refs, 1);
        conn_unref(c);
        return;
    }
    c->next_wait = lp->waiting_header;
    lp->waiting_header = c;
    c->next_open = lp->open_list;
    if (lp->open_list)
        lp->open_list->prev_open = c;
    lp->open_list = c;
}

static void accept_all(sp_loop *lp, sp_listener *l)
{
    for (;;) {
        struct sockaddr_storage peer = {0};
        socklen_t peer_len = sizeof(peer);
        int fd = accept4(l->fd, (struct sockaddr *)&peer, &peer_len, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd >= 0) {
            accept_one(lp, fd, &peer);
            continue;
        }
        if (errno == EINTR || errno == ECONNABORTED)
            continue;
        if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
            net_log(NET_LOG_WARN, "%s: cannot accept a connection: %s (trying again in 1 s)",
                    l->url, strerror(errno));
            epoll_ctl(lp->epfd, EPOLL_CTL_DEL, l->fd, NULL);
            l->armed = false;
        }
        return;
    }
}

/* ---- the loop ---- */

/* c, its SP header read, against the clock: a request not whole by its
 * deadline, replies its client has not taken for --idle-timeout-s,
 * nothing at all for --idle-timeout-s. */
static void conn_check_time(sp_conn *c, int64_t now)
{
    int64_t idle_ms = (int64_t)c->lp->srv->opt->idle_timeout_s * 1000;
    if (c->partial_since_ms && !c->paused && now >= c->request_deadline_ms) {
        net_metrics_connection_closed(NET_CLOSED_REQUEST_TIMEOUT);
        conn_close(c);
        return;
    }
    pthread_mutex_lock(&c->mu);
    bool unread = c->out_len > c->out_off;
    int64_t moved_ms = c->out_moved_ms;
    pthread_mutex_unlock(&c->mu);
    if (unread && now - moved_ms >= idle_ms) {
        net_metrics_connection_closed(NET_CLOSED_UNREAD_REPLIES);
        conn_close(c);
    } else if (!unread && c->in_len == 0 && atomic_load(&c->in_flight) == 0 &&
               now - atomic_load(&c->active_ms) >= idle_ms) {
        net_metrics_connection_closed(NET_CLOSED_IDLE);
        conn_close(c);
    }
}

/* Once a second: headers and requests that did not come in time, idle
 * connections, listeners to arm again. */
static void tick(sp_loop *lp)
{
    int64_t now = clock_mono_ms();
    sp_conn **pp = &lp->waiting_header;
    while (*pp) {
        sp_conn *c = *pp;
        if (!c->header_in && !c->dead && now < c->header_deadline_ms) {
            pp = &c->next_wait;
            continue;
        }
        *pp = c->next_wait;
        if (!c->header_in && !c->dead) {
            net_metrics_connection_closed(NET_CLOSED_REQUEST_TIMEOUT);
            conn_close(c);
        }
        conn_unref(c); /* the list's */
    }
    for (sp_conn *c = lp->open_list, *next; c; c = next) {
        next = c->next_open; /* conn_close takes c off the list */
        if (c->header_in)
            conn_check_time(c, now);
    }

    for (unsigned i = 0; i < lp->listener_count; i++) {
        sp_listener *l = &lp->listeners[i];
        if (l->fd >= 0 && !l->armed && sp_loop_epoll_set(lp, EPOLL_CTL_ADD, l->fd, EPOLLIN, l) == 0)
            l->armed = true;
    }
}

/* Read paused connections again, in the order they paused, while slots
 * are free: first the frames they hold (which may pause them again, at
 * the back of the list: the next resume starts with the others). */
static void resume_paused(sp_loop *lp)
{
    unsigned listed = atomic_load(&lp->paused);
    while (listed-- > 0 && lp->paused_list &&
           atomic_load(&lp->in_flight) < lp->in_flight_max) {
        sp_conn *c = lp->paused_list;
        lp->paused_list = c->next_paused;
        if (lp->paused_list == NULL)
            lp->paused_tail = NULL;
        atomic_fetch_sub(&lp->paused, 1);
        c->paused = false;
        if (!c->dead) {
            conn_serve_input(c);
            conn_update_mask(c);
        }
        conn_unref(c); /* the list's */
    }
}

/* A turn for each connection on the ready list, in order (one that still
 * has whole requests after it goes to the back). */
static void serve_ready(sp_loop *lp)
{
    sp_conn *list = lp->ready_list;
    lp->ready_list = lp->ready_tail = NULL;
    while (list) {
        sp_conn *c = list;
        list = c->next_ready;
        c->ready = false;
        if (!c->dead && !c->paused) {
            conn_serve_input(c);
            conn_update_mask(c);
        }
        conn_unref(c); /* the list's */
    }
}

/* Woken: replies left for EPOLLOUT, slots back for paused connections,
 * the stop. */
static void on_wake(sp_loop *lp)
{
    uint64_t count;
    ssize_t r = read(lp->wakefd, &count, sizeof(count));
    (void)r;
    pthread_mutex_lock(&lp->mu);
    sp_conn *list = lp->out_list;
    lp->out_list = NULL;
    pthread_mutex_unlock(&lp->mu);
    while (list) {
        sp_conn *c = list;
        list = c->next_out;
        pthread_mutex_lock(&c->mu);
        c->out_listed = false;
        pthread_mutex_unlock(&c->mu);
        conn_update_mask(c);
        conn_unref(c); /* the out list's */
    }
    resume_paused(lp);
    if (atomic_load(&lp->stop_accepting))
        sp_loop_close_listeners(lp);
}

void *sp_loop_main(void *arg)
{
    sp_loop *lp = arg;
    struct epoll_event ev[SP_EVENTS_MAX];
    int64_t next_tick = clock_mono_ms() + SP_TICK_MS;
    for (;;) {
        int n = epoll_wait(lp->epfd, ev, SP_EVENTS_MAX, lp->ready_list ? 0 : SP_TICK_MS);
        for (int i = 0; i < n; i++) {
            int kind = *(int *)ev[i].data.ptr;
            if (kind == SP_WAKE) {
                on_wake(lp);
                continue;
            }
            if (kind == SP_LISTENER) {
                accept_all(lp, ev[i].data.ptr);
                continue;
            }
            sp_conn *c = ev[i].data.ptr;
            if (c->dead)
                continue;
            if (ev[i].events & EPOLLOUT)
                conn_flush(c);
            if ((ev[i].events & (EPOLLHUP | EPOLLERR)) && (c->paused || c->ready))
                conn_close(c);
            else if (ev[i].events & (EPOLLIN | EPOLLHUP | EPOLLERR))
                conn_read(c);
        }
        serve_ready(lp);
        if (clock_mono_ms() >= next_tick) {
            tick(lp);
            next_tick = clock_mono_ms() + SP_TICK_MS;
        }
        while (lp->closing) { /* after the batch that may still name them */
            sp_conn *c = lp->closing;
            lp->closing = c->next_closing;
            conn_unref(c); /* the loop's */
        }
    }
    return NULL;
}
