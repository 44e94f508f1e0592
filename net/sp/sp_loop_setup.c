/*
 * sp_loop_setup.c — the tcp:// loop's setting up (net/sp/sp_loop.c serves
 * its connections): the tcp:// URLs and listening sockets, the loop's
 * epoll set and wake-up, the thread that runs its control ops, and its
 * lifecycle (open, start, stop accepting).
 */
#include "net/sp/sp_loop.h"
#include "net/sp/sp_loop_impl.h"

#include "net/sp/sp.h"

#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

/* ---- URLs and listening sockets ---- */

bool sp_loop_serves(const net_server_options *opt, const char *url)
{
    return opt->tcp_engine == NET_TCP_ENGINE_EPOLL && strncmp(url, "tcp://", 6) == 0;
}

/* tcp://HOST:PORT, HOST a name, an IPv4 address, [IPv6], * or empty (any):
 * 0 with the listening socket in *fd_out, or an NNG error code with why. */
static int listen_url(const char *url, int *fd_out, char *why, size_t n)
{
    const char *hp = url + 6;
    const char *colon = strrchr(hp, ':');
    if (colon == NULL || colon[1] == '\0') {
        snprintf(why, n, "no port");
        return NNG_EADDRINVAL;
    }
    char host[256];
    size_t hl = (size_t)(colon - hp);
    if (hl >= 2 && hp[0] == '[' && hp[hl - 1] == ']') {
        hp++;
        hl -= 2;
    }
    if (hl >= sizeof(host)) {
        snprintf(why, n, "host name too long");
        return NNG_EADDRINVAL;
    }
    memcpy(host, hp, hl);
    host[hl] = '\0';
    bool any = hl == 0 || strcmp(host, "*") == 0;
    struct addrinfo hints = {.ai_family = any ? AF_INET : AF_UNSPEC, .ai_socktype = SOCK_STREAM,
                             .ai_flags = AI_PASSIVE | AI_NUMERICSERV};
    struct addrinfo *res = NULL;
    int gai = getaddrinfo(any ? NULL : host, colon + 1, &hints, &res);
    if (gai != 0) {
        snprintf(why, n, "%s", gai_strerror(gai));
        return NNG_EADDRINVAL;
    }
    int fd = socket(res->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    int one = 1;
    int rc = fd < 0 ? -1 : setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (rc == 0)
        rc = bind(fd, res->ai_addr, res->ai_addrlen);
    if (rc == 0)
        rc = listen(fd, SOMAXCONN);
    int e = errno;
    freeaddrinfo(res);
    if (rc != 0) {
        snprintf(why, n, "%s", strerror(e));
        if (fd >= 0)
            close(fd);
        /* the same codes as NNG's listeners: a busy port is "in use" */
        return e == EADDRINUSE ? NNG_EADDRINUSE : e == EACCES || e == EPERM ? NNG_EPERM
                                                                           : NNG_EADDRINVAL;
    }
    *fd_out = fd;
    return 0;
}

/* url with the port listening socket fd is bound to (port 0: the
 * kernel's choice), into out. */
static bool bound_url(int fd, const char *url, char out[NET_URL_BYTES_MAX])
{
    struct sockaddr_storage ss;
    socklen_t len = sizeof(ss);
    if (getsockname(fd, (struct sockaddr *)&ss, &len) != 0)
        return false;
    in_port_t port = ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
                                              : ((struct sockaddr_in *)&ss)->sin_port;
    errno = ENAMETOOLONG;
    return net_url_with_port(url, ntohs(port), out, NET_URL_BYTES_MAX);
}

int sp_loop_epoll_set(sp_loop *lp, int op, int fd, uint32_t events, void *tag)
{
    struct epoll_event ev = {.events = events, .data.ptr = tag};
    return epoll_ctl(lp->epfd, op, fd, &ev);
}

void sp_loop_wake(sp_loop *lp)
{
    uint64_t one = 1;
    ssize_t w = write(lp->wakefd, &one, sizeof(one));
    (void)w; /* a full counter already wakes the loop */
}

/* ---- closing the listening sockets ---- */

void sp_loop_close_listeners(sp_loop *lp)
{
    for (unsigned i = 0; i < lp->listener_count; i++)
        if (lp->listeners[i].fd >= 0) {
            close(lp->listeners[i].fd); /* leaves the epoll set with it */
            lp->listeners[i].fd = -1;
        }
}

/* ---- control ops: their own thread ---- */

void sp_loop_control(slot *s)
{
    sp_loop *lp = s->conn->lp;
    pthread_mutex_lock(&lp->mu);
    s->next = NULL;
    if (lp->control_tail)
        lp->control_tail->next = s;
    else
        lp->control_head = s;
    lp->control_tail = s;
    pthread_cond_signal(&lp->control_cv);
    pthread_mutex_unlock(&lp->mu);
}

void *sp_loop_control_main(void *arg)
{
    sp_loop *lp = arg;
    for (;;) {
        pthread_mutex_lock(&lp->mu);
        while (lp->control_head == NULL)
            pthread_cond_wait(&lp->control_cv, &lp->mu);
        slot *s = lp->control_head;
        lp->control_head = s->next;
        if (lp->control_head == NULL)
            lp->control_tail = NULL;
        pthread_mutex_unlock(&lp->mu);
        slot_send_control(s);
    }
    return NULL;
}

/* ---- lifecycle ---- */

int sp_loop_open(server *srv)
{
    const net_server_options *opt = srv->opt;
    sp_loop *lp = calloc(1, sizeof(*lp));
    if (lp == NULL)
        return NNG_ENOMEM;
    lp->srv = srv;
    lp->wake_kind = SP_WAKE;
    lp->in_flight_max = opt->contexts;
    lp->conn_in_flight_max = opt->in_flight_per_connection_max ? opt->in_flight_per_connection_max
                                                               : opt->contexts;
    lp->conn_long_polls_max = opt->long_polls_per_connection_max;
    lp->unread_bytes_max = (size_t)opt->unread_reply_kib_max * 1024;
    pthread_mutex_init(&lp->mu, NULL);
    pthread_cond_init(&lp->control_cv, NULL);
    lp->epfd = epoll_create1(EPOLL_CLOEXEC);
    lp->wakefd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (lp->epfd < 0 || lp->wakefd < 0 ||
        sp_loop_epoll_set(lp, EPOLL_CTL_ADD, lp->wakefd, EPOLLIN, &lp->wake_kind) != 0) {
        net_log(NET_LOG_ERROR, "cannot start the tcp:// loop: %s", strerror(errno));
        return NNG_ENOMEM;
    }
    srv->sp->loop = lp;
    for (unsigned i = 0; i < opt->listen_count; i++) {
        const char *url = opt->listen_urls[i];
        if (!sp_loop_serves(opt, url))
            continue;
        sp_listener *l = &lp->listeners[lp->listener_count++];
        char why[160];
        l->kind = SP_LISTENER;
        l->url = srv->sp->lis.url[i];
        l->fd = -1;
        int lrc = listen_url(url, &l->fd, why, sizeof(why));
        if (lrc != 0) {
            net_log(NET_LOG_ERROR, "cannot listen on %s: %s", url, why);
            return lrc;
        }
        if (!bound_url(l->fd, url, srv->sp->lis.url[i])) {
            net_log(NET_LOG_ERROR, "cannot tell the port of %s: %s", url, strerror(errno));
            return NNG_EINVAL;
        }
        if (sp_loop_epoll_set(lp, EPOLL_CTL_ADD, l->fd, EPOLLIN, l) != 0)
            return NNG_ENOMEM;
        l->armed = true;
    }
    return 0;
}

int sp_loop_start(server *srv)
{
    sp_loop *lp = srv->sp->loop;
    if (lp == NULL || lp->listener_count == 0)
        return 0;
    int rv = pthread_create(&lp->control_thread, NULL, sp_loop_control_main, lp);
    lp->control_started = rv == 0;
    if (rv == 0)
        rv = pthread_create(&lp->thread, NULL, sp_loop_main, lp);
    lp->started = rv == 0;
    if (rv != 0)
        net_log(NET_LOG_ERROR, "cannot start the tcp:// loop: %s", strerror(rv));
    return rv;
}

void sp_loop_stop_accepting(server *srv)
{
    sp_loop *lp = srv->sp->loop;
    if (lp == NULL)
        return;
    atomic_store(&lp->stop_accepting, true);
    if (lp->started)
        sp_loop_wake(lp);
    else
        sp_loop_close_listeners(lp);
}
