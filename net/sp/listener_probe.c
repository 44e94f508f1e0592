/*
 * listener_probe.c — see listener_probe.h.
 */
#include "net/sp/listener_probe.h"

#include "common/clock.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#define PROBE_SLICE_MS 100
#define SP_HEADER_BYTES 8
#define SP_PROTOCOL_REQ0 0x30

/* The listener's bound address as a socket address to connect to. */
static bool probe_address(nng_listener l, struct sockaddr_storage *ss, socklen_t *len)
{
    nng_sockaddr sa;
    if (nng_listener_get_addr(l, NNG_OPT_LOCADDR, &sa) != 0)
        return false;
    memset(ss, 0, sizeof(*ss));
    switch (sa.s_family) {
    case NNG_AF_IPC: {
        struct sockaddr_un *un = (struct sockaddr_un *)ss;
        size_t n = strnlen(sa.s_ipc.sa_path, sizeof(sa.s_ipc.sa_path));
        if (n == 0 || n >= sizeof(un->sun_path))
            return false;
        un->sun_family = AF_UNIX;
        memcpy(un->sun_path, sa.s_ipc.sa_path, n);
        *len = (socklen_t)sizeof(*un);
        return true;
    }
    case NNG_AF_INET: {
        struct sockaddr_in *in = (struct sockaddr_in *)ss;
        in->sin_family = AF_INET;
        in->sin_port = sa.s_in.sa_port; /* both in network order */
        in->sin_addr.s_addr = sa.s_in.sa_addr == INADDR_ANY ? htonl(INADDR_LOOPBACK)
                                                             : sa.s_in.sa_addr;
        *len = (socklen_t)sizeof(*in);
        return true;
    }
    case NNG_AF_INET6: {
        struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)ss;
        in6->sin6_family = AF_INET6;
        in6->sin6_port = sa.s_in6.sa_port;
        memcpy(&in6->sin6_addr, sa.s_in6.sa_addr, 16);
        if (IN6_IS_ADDR_UNSPECIFIED(&in6->sin6_addr))
            in6->sin6_addr = in6addr_loopback;
        *len = (socklen_t)sizeof(*in6);
        return true;
    }
    default:
        return false;
    }
}

/* Wait for events on fd in slices, until the deadline or *stop. */
static int wait_fd(int fd, short events, int64_t deadline, volatile sig_atomic_t *stop)
{
    for (;;) {
        if (*stop)
            return -2;
        int64_t left = deadline - clock_mono_ms();
        if (left <= 0)
            return 0;
        struct pollfd p = {.fd = fd, .events = events};
        int rv = poll(&p, 1, left < PROBE_SLICE_MS ? (int)left : PROBE_SLICE_MS);
        if (rv > 0)
            return 1;
        if (rv < 0 && errno != EINTR)
            return -1;
    }
}

static const uint8_t hello[SP_HEADER_BYTES] = {0, 'S', 'P', 0, 0, SP_PROTOCOL_REQ0, 0, 0};

/* A socket connected to listener l that has sent the SP header, or -1
 * with *result saying why (STOPPED: refused or timed out; UNKNOWN: not
 * probed). */
static int probe_connect(nng_listener l, int64_t deadline, volatile sig_atomic_t *stop,
                         listener_probe_result *result, listener_probe_mark_fn mark,
                         void *mark_ctx)
{
    struct sockaddr_storage ss;
    socklen_t len;
    *result = LISTENER_UNKNOWN;
    if (!probe_address(l, &ss, &len))
        return -1;
    int fd = socket(ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1; /* out of descriptors: says nothing of the listener */
    *result = LISTENER_STOPPED;
    if (connect(fd, (struct sockaddr *)&ss, len) != 0) {
        if (errno != EINPROGRESS)
            goto fail; /* refused: nothing listens there */
        int w = wait_fd(fd, POLLOUT, deadline, stop);
        int err = 0;
        socklen_t elen = sizeof(err);
        if (w == -2)
            *result = LISTENER_UNKNOWN;
        if (w != 1 || getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &elen) != 0 || err != 0)
            goto fail;
    }
    if (mark) {
        struct sockaddr_storage self;
        socklen_t self_len = sizeof(self);
        if (getsockname(fd, (struct sockaddr *)&self, &self_len) != 0)
            goto fail;
        mark(mark_ctx, (struct sockaddr *)&self, self_len);
    }
    if (send(fd, hello, sizeof(hello), MSG_NOSIGNAL) == (ssize_t)sizeof(hello))
        return fd; /* a fresh socket's buffer takes 8 bytes at once */
    if (mark)
        mark(mark_ctx, NULL, 0);
fail:
    close(fd);
    return -1;
}

static const char *const all_outcomes[] = {"accept", "disconnect", "canceled", "other",
                                           "timeout", "proto", "auth", "oom", "reject", NULL};

/* The statistics of listener id under s: the scope named "listener"
 * whose "id" is id (NULL: none). NNG 1.5.2's nng_stat_find_listener
 * returns the first listener's for any (common/nng_compat.h, entry 12). */
static nng_stat *stat_find_listener(nng_stat *s, int id)
{
    for (; s != NULL; s = nng_stat_next(s)) {
        if (nng_stat_type(s) != NNG_STAT_SCOPE)
            continue;
        if (strcmp(nng_stat_name(s), "listener") == 0) {
            nng_stat *sid = nng_stat_find(s, "id");
            if (sid != NULL && sid != s && nng_stat_type(sid) == NNG_STAT_ID &&
                nng_stat_value(sid) == (uint64_t)id)
                return s;
        }
        nng_stat *found = stat_find_listener(nng_stat_child(s), id);
        if (found != NULL)
            return found;
    }
    return NULL;
}

int64_t listener_stats_sum(nng_listener l, const char *const *names)
{
    int id = nng_listener_id(l);
    nng_stat *all;
    if (id <= 0 || nng_stats_get(&all) != 0)
        return -1;
    int64_t sum = -1;
    nng_stat *ls = stat_find_listener(all, id);
    for (nng_stat *c = ls ? nng_stat_child(ls) : NULL; c; c = nng_stat_next(c))
        for (size_t i = 0; names[i]; i++)
            if (strcmp(nng_stat_name(c), names[i]) == 0)
                sum = (sum < 0 ? 0 : sum) + (int64_t)nng_stat_value(c);
    nng_stats_free(all);
    return sum;
}

listener_probe_result listener_probe_tls(nng_listener l, int wait_ms, volatile sig_atomic_t *stop)
{
    int64_t before = listener_stats_sum(l, all_outcomes);
    if (before < 0)
        return LISTENER_UNKNOWN;
    int64_t deadline = clock_mono_ms() + wait_ms;
    listener_probe_result result;
    int fd = probe_connect(l, deadline, stop, &result, NULL, NULL);
    if (fd < 0)
        return result;
    /* The SP header is no TLS record: the handshake fails at once and
     * tallyd closes the connection. Wait for that, never hang up first. */
    uint8_t sink[64];
    for (;;) {
        int w = wait_fd(fd, POLLIN, deadline, stop);
        if (w != 1) {
            close(fd);
            return w == -2 ? LISTENER_UNKNOWN : LISTENER_STOPPED;
        }
        ssize_t n = recv(fd, sink, sizeof(sink), 0);
        if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR))
            break;
    }
    close(fd);
    while (listener_stats_sum(l, all_outcomes) == before) {
        if (*stop)
            return LISTENER_UNKNOWN;
        if (clock_mono_ms() >= deadline)
            return LISTENER_STOPPED;
        struct timespec slice = {0, 10 * 1000000};
        nanosleep(&slice, NULL);
    }
    return LISTENER_ACCEPTING;
}

listener_probe_result listener_probe(nng_listener l, const atomic_uint *accepted,
                                     listener_probe_mark_fn mark, void *mark_ctx, int wait_ms,
                                     volatile sig_atomic_t *stop)
{
    unsigned before = atomic_load(accepted);
    int64_t deadline = clock_mono_ms() + wait_ms;
    listener_probe_result result;
    int fd = probe_connect(l, deadline, stop, &result, mark, mark_ctx);
    if (fd < 0)
        return result;
    uint8_t peer[SP_HEADER_BYTES];
    size_t got = 0;
    while (got < sizeof(peer)) {
        int w = wait_fd(fd, POLLIN, deadline, stop);
        if (w == -2)
            result = LISTENER_UNKNOWN;
        if (w != 1)
            goto done;
        ssize_t n = recv(fd, peer + got, sizeof(peer) - got, 0);
        if (n == 0)
            break; /* hung up on */
        if (n < 0 && errno != EAGAIN && errno != EINTR)
            goto done;
        if (n > 0)
            got += (size_t)n;
    }
    if (got != sizeof(peer) || peer[1] != 'S' || peer[2] != 'P')
        goto done; /* hung up on before the header, or not SP: not accepting */
    /* The exchange is done; now the socket must take the connection (a
     * refusal at --max-connections takes it first, so it counts too). */
    while (atomic_load(accepted) == before) {
        if (*stop) {
            result = LISTENER_UNKNOWN;
            goto done;
        }
        if (clock_mono_ms() >= deadline)
            goto done;
        struct timespec slice = {0, 10 * 1000000};
        nanosleep(&slice, NULL);
    }
    result = LISTENER_ACCEPTING;
done:
    close(fd);
    if (mark)
        mark(mark_ctx, NULL, 0);
    return result;
}
