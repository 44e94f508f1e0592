/*
 * sp_direct.c — libtally's request path on tcp:// without NNG's threads
 * (sp_direct.h): the calling thread speaks the SP layer (docs/PROTOCOL.md,
 * "The SP layer") on a connection of its own from a pool and waits for its
 * reply in poll(2); no hand-off to another thread on either side of the
 * call.
 *
 * A connection carries one request at a time: the caller takes one from
 * the pool (or connects a new one), sends its frame, reads frames until the
 * one with its request id, and gives the connection back. A connection that
 * failed, timed out or was cut is closed, never pooled: a late reply can
 * then never be taken for another request's. An idle pooled connection
 * that has anything to read (the server closed it) is closed before use.
 * Closing the pool shuts down the connections in use, so calls in flight
 * end at once (their threads close them).
 */
#include "clients/transport/sp_direct.h"

#include "common/bytes.h"
#include "common/clock.h"

#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#define SP_DIRECT_IDLE_MAX 256 /* connections kept idle; more are closed */
#define SP_ID_BIT 0x80000000u

typedef struct sp_direct_conn {
    int fd;
    uint32_t next_id;
    struct sp_direct_conn *next;
} sp_direct_conn;

struct sp_direct {
    char host[256];
    char port[16];
    size_t reply_bytes_max;
    pthread_mutex_t mu;
    sp_direct_conn *idle; /* under mu */
    unsigned idle_count;  /* under mu */
    sp_direct_conn **busy; /* under mu: connections in use, shut down at close */
    unsigned busy_count, busy_cap;
    bool closing;          /* under mu */
};

bool sp_direct_serves(const char *url)
{
    const char *env = getenv("TALLY_CLIENT_TRANSPORT");
    if (env && strcmp(env, "nng") == 0)
        return false;
    return url != NULL && strncmp(url, "tcp://", 6) == 0;
}

int sp_direct_open(const char *url, size_t reply_bytes_max, sp_direct **out)
{
    const char *hp = url + 6;
    const char *colon = strrchr(hp, ':');
    if (colon == NULL || colon[1] == '\0' || strlen(colon + 1) >= sizeof(((sp_direct *)0)->port))
        return TALLY_invalid_argument;
    size_t hl = (size_t)(colon - hp);
    if (hl >= 2 && hp[0] == '[' && hp[hl - 1] == ']') {
        hp++;
        hl -= 2;
    }
    if (hl == 0 || hl >= sizeof(((sp_direct *)0)->host))
        return TALLY_invalid_argument;
    sp_direct *d = calloc(1, sizeof(*d));
    if (d == NULL)
        return TALLY_out_of_memory;
    memcpy(d->host, hp, hl);
    d->host[hl] = '\0';
    strcpy(d->port, colon + 1);
    d->reply_bytes_max = reply_bytes_max;
    pthread_mutex_init(&d->mu, NULL);
    *out = d;
    return TALLY_ok;
}

static void conn_free(sp_direct_conn *k)
{
    if (k == NULL)
        return;
    close(k->fd);
    free(k);
}

void sp_direct_shutdown(sp_direct *d)
{
    pthread_mutex_lock(&d->mu);
    d->closing = true;
    for (unsigned i = 0; i < d->busy_count; i++)
        shutdown(d->busy[i]->fd, SHUT_RDWR);
    sp_direct_conn *idle = d->idle;
    d->idle = NULL;
    d->idle_count = 0;
    pthread_mutex_unlock(&d->mu);
    while (idle) {
        sp_direct_conn *k = idle;
        idle = k->next;
        conn_free(k);
    }
}

void sp_direct_close(sp_direct *d)
{
    if (d == NULL)
        return;
    sp_direct_shutdown(d);
    free(d->busy);
    pthread_mutex_destroy(&d->mu);
    free(d);
}

/* Wait for fd to be ready for events before deadline (mono ms). */
static bool ready(int fd, short events, int64_t deadline)
{
    for (;;) {
        int64_t left = deadline - clock_mono_ms();
        if (left <= 0)
            return false;
        struct pollfd p = {.fd = fd, .events = events};
        int n = poll(&p, 1, left > INT32_MAX ? INT32_MAX : (int)left);
        if (n > 0)
            return true;
        if (n < 0 && errno != EINTR)
            return false;
    }
}

static bool send_all(int fd, struct iovec *iov, int iovcnt, int64_t deadline)
{
    while (iovcnt > 0) {
        struct msghdr mh = {.msg_iov = iov, .msg_iovlen = (size_t)iovcnt};
        ssize_t n = sendmsg(fd, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            if ((errno != EAGAIN && errno != EWOULDBLOCK) || !ready(fd, POLLOUT, deadline))
                return false;
            continue;
        }
        size_t done = (size_t)n;
        while (iovcnt > 0 && done >= iov->iov_len) {
            done -= iov->iov_len;
            iov++;
            iovcnt--;
        }
        if (iovcnt > 0) {
            iov->iov_base = (uint8_t *)iov->iov_base + done;
            iov->iov_len -= done;
        }
    }
    return true;
}

static bool recv_all(int fd, void *buf, size_t len, int64_t deadline)
{
    uint8_t *p = buf;
    while (len > 0) {
        ssize_t n = recv(fd, p, len, MSG_DONTWAIT);
        if (n > 0) {
            p += n;
            len -= (size_t)n;
            continue;
        }
        if (n == 0)
            return false;
        if (errno == EINTR)
            continue;
        if ((errno != EAGAIN && errno != EWOULDBLOCK) || !ready(fd, POLLIN, deadline))
            return false;
    }
    return true;
}

/* Connect and exchange SP headers (REQ0 out, REP0 expected) before
 * deadline; NULL when that fails. */
static sp_direct_conn *conn_new(sp_direct *d, int64_t deadline)
{
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
                             .ai_flags = AI_NUMERICSERV};
    struct addrinfo *res = NULL;
    if (getaddrinfo(d->host, d->port, &hints, &res) != 0)
        return NULL;
    int fd = -1;
    for (struct addrinfo *ai = res; ai && fd < 0; ai = ai->ai_next) {
        fd = socket(ai->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (fd < 0)
            continue;
        int rc = connect(fd, ai->ai_addr, ai->ai_addrlen);
        int err = 0;
        socklen_t el = sizeof(err);
        if (rc != 0 && errno == EINPROGRESS && ready(fd, POLLOUT, deadline) &&
            getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &el) == 0 && err == 0)
            rc = 0;
        if (rc != 0) {
            close(fd);
            fd = -1;
        }
    }
    freeaddrinfo(res);
    if (fd < 0)
        return NULL;
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    uint8_t hello[8] = {0, 'S', 'P', 0, 0, 0x30, 0, 0}, peer[8];
    struct iovec iov = {hello, sizeof(hello)};
    sp_direct_conn *k = calloc(1, sizeof(*k));
    if (k == NULL || !send_all(fd, &iov, 1, deadline) || !recv_all(fd, peer, 8, deadline) ||
        peer[0] != 0 || peer[1] != 'S' || peer[2] != 'P' || peer[3] != 0 ||
        get_u16_be(peer + 4) != 0x31) {
        free(k);
        close(fd);
        return NULL;
    }
    k->fd = fd;
    k->next_id = (uint32_t)clock_mono_ns(); /* any start will do: one request at a time */
    return k;
}

/* List k as busy (so a close can shut it down); false when closing or
 * out of memory. */
static bool busy_add(sp_direct *d, sp_direct_conn *k)
{
    pthread_mutex_lock(&d->mu);
    bool listed = false;
    if (!d->closing && d->busy_count == d->busy_cap) {
        unsigned cap = d->busy_cap * 2 + 16;
        sp_direct_conn **b = realloc(d->busy, cap * sizeof(*b));
        if (b) {
            d->busy = b;
            d->busy_cap = cap;
        }
    }
    if (!d->closing && d->busy_count < d->busy_cap) {
        d->busy[d->busy_count++] = k;
        listed = true;
    }
    pthread_mutex_unlock(&d->mu);
    return listed;
}

/* A connection for one request, listed as busy: an idle one the server
 * has not closed, else a new one. */
static sp_direct_conn *conn_take(sp_direct *d, int64_t deadline)
{
    for (;;) {
        pthread_mutex_lock(&d->mu);
        sp_direct_conn *k = d->closing ? NULL : d->idle;
        if (k) {
            d->idle = k->next;
            d->idle_count--;
        }
        bool closing = d->closing;
        pthread_mutex_unlock(&d->mu);
        if (closing)
            return NULL;
        if (k == NULL)
            break;
        struct pollfd p = {.fd = k->fd, .events = POLLIN};
        if (poll(&p, 1, 0) == 0 && busy_add(d, k)) /* nothing to read: still open */
            return k;
        conn_free(k);
    }
    sp_direct_conn *k = conn_new(d, deadline);
    if (k != NULL && !busy_add(d, k)) {
        conn_free(k);
        k = NULL;
    }
    return k;
}

/* Done with k: back to the pool when it is sound (keep), else closed. */
static void conn_give_back(sp_direct *d, sp_direct_conn *k, bool keep)
{
    pthread_mutex_lock(&d->mu);
    for (unsigned i = 0; i < d->busy_count; i++)
        if (d->busy[i] == k) {
            d->busy[i] = d->busy[--d->busy_count];
            break;
        }
    if (keep && !d->closing && d->idle_count < SP_DIRECT_IDLE_MAX) {
        k->next = d->idle;
        d->idle = k;
        d->idle_count++;
        k = NULL;
    }
    pthread_mutex_unlock(&d->mu);
    conn_free(k);
}

/* Read frames until the reply to id; NULL when the connection fails. */
static nng_msg *recv_reply(sp_direct *d, int fd, uint32_t id, int64_t deadline)
{
    for (;;) {
        uint8_t head[12];
        if (!recv_all(fd, head, sizeof(head), deadline))
            return NULL;
        uint64_t len = get_u64_be(head);
        if (len < 4 || len - 4 > d->reply_bytes_max)
            return NULL;
        nng_msg *m;
        if (nng_msg_alloc(&m, (size_t)len - 4) != 0)
            return NULL;
        if (!recv_all(fd, nng_msg_body(m), (size_t)len - 4, deadline)) {
            nng_msg_free(m);
            return NULL;
        }
        if (get_u32_be(head + 8) == id)
            return m;
        nng_msg_free(m); /* not ours (cannot happen with one request at a time) */
    }
}

int sp_direct_attempt(sp_direct *d, const void *bytes, size_t len, uint32_t timeout_ms,
                      uint32_t connect_ms, nng_msg **reply_out, bool *delivered)
{
    int64_t start = clock_mono_ms();
    sp_direct_conn *k = conn_take(d, start + connect_ms);
    if (k == NULL)
        return TALLY_unreachable;
    int64_t deadline = start + timeout_ms;
    uint32_t id = SP_ID_BIT | (k->next_id++ & ~SP_ID_BIT);
    uint8_t head[12];
    put_u64_be(head, 4 + (uint64_t)len);
    put_u32_be(head + 8, id);
    struct iovec iov[2] = {{head, sizeof(head)}, {(void *)bytes, len}};
    if (!send_all(k->fd, iov, 2, deadline)) {
        conn_give_back(d, k, false);
        return TALLY_unreachable; /* a partial frame is never served */
    }
    *delivered = true;
    nng_msg *m = recv_reply(d, k->fd, id, deadline);
    conn_give_back(d, k, m != NULL);
    if (m == NULL)
        return TALLY_timed_out;
    *reply_out = m;
    return TALLY_ok;
}
