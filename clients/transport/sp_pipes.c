/*
 * sp_pipes.c — see sp_pipes.h.
 */
#include "clients/transport/sp_pipes.h"

#include "common/sockaddr_nng.h"

#include <dirent.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

int sp_pipes_init(sp_pipes *ps)
{
    memset(ps, 0, sizeof(*ps));
    int rv = nng_mtx_alloc(&ps->mu);
    if (rv == 0)
        rv = nng_cv_alloc(&ps->dialer_closed, ps->mu);
    if (rv == 0)
        rv = nng_cv_alloc(&ps->removed, ps->mu);
    if (rv != 0)
        sp_pipes_fini(ps);
    return rv;
}

void sp_pipes_fini(sp_pipes *ps)
{
    if (ps->dialer_closed)
        nng_cv_free(ps->dialer_closed);
    if (ps->removed)
        nng_cv_free(ps->removed);
    ps->removed = NULL;
    if (ps->mu)
        nng_mtx_free(ps->mu);
    ps->dialer_closed = NULL;
    ps->mu = NULL;
}

void sp_pipes_event(sp_pipes *ps, nng_pipe pipe, nng_pipe_ev ev)
{
    nng_mtx_lock(ps->mu);
    if (ev == NNG_PIPE_EV_ADD_PRE && ps->closing) {
        nng_mtx_unlock(ps->mu);
        nng_pipe_close(pipe); /* refused: its handshake is done, the server sees a plain close */
        return;
    }
    if (ev == NNG_PIPE_EV_ADD_PRE && ps->count < SP_PIPES_MAX) {
        ps->open[ps->count++] = pipe;
    } else if (ev == NNG_PIPE_EV_REM_POST) {
        for (unsigned i = 0; i < ps->count; i++)
            if (nng_pipe_id(ps->open[i]) == nng_pipe_id(pipe)) {
                ps->open[i] = ps->open[--ps->count];
                break;
            }
        nng_cv_wake(ps->removed);
        /* The last pipe's removal makes the dialer redial, right after
         * this callback: let the redial find the dialer closed. */
        nng_time until = nng_clock() + SP_PIPES_HOLD_MS;
        while (ps->closing && ps->count == 0 && nng_clock() < until)
            nng_cv_until(ps->dialer_closed, until);
    }
    nng_mtx_unlock(ps->mu);
}

/* The descriptor of pipe's TCP connection (tcp:// or tls+tcp://), found in
 * /proc/self/fd by its two addresses; -1 when not exactly one matches (an
 * ipc:// pipe: its addresses do not tell two connections apart). */
static int pipe_fd(nng_pipe pipe)
{
    nng_sockaddr local, remote;
    if (nng_pipe_get_addr(pipe, NNG_OPT_LOCADDR, &local) != 0 ||
        nng_pipe_get_addr(pipe, NNG_OPT_REMADDR, &remote) != 0 ||
        (local.s_family != NNG_AF_INET && local.s_family != NNG_AF_INET6))
        return -1;
    DIR *dir = opendir("/proc/self/fd");
    if (dir == NULL)
        return -1;
    int found = -1, matches = 0;
    struct dirent *e;
    while ((e = readdir(dir)) != NULL) {
        int fd = atoi(e->d_name);
        if (e->d_name[0] == '.' || fd == dirfd(dir))
            continue;
        struct sockaddr_storage a;
        socklen_t n = sizeof(a);
        if (getsockname(fd, (struct sockaddr *)&a, &n) != 0 || !sockaddr_is_nng(&a, &local))
            continue;
        n = sizeof(a);
        if (getpeername(fd, (struct sockaddr *)&a, &n) != 0 || !sockaddr_is_nng(&a, &remote))
            continue;
        found = fd;
        matches++;
    }
    closedir(dir);
    return matches == 1 ? found : -1;
}

void sp_pipes_close_socket(sp_pipes *ps, nng_socket s, nng_dialer d)
{
    nng_pipe open[SP_PIPES_MAX];
    nng_mtx_lock(ps->mu);
    unsigned count = ps->count;
    memcpy(open, ps->open, count * sizeof(open[0]));
    ps->closing = true;
    nng_mtx_unlock(ps->mu);
    /* A TCP connection is shut down under NNG: its reads end as if the
     * server had closed it, the error goes up through NNG's own callbacks
     * (nothing is refused on a closed aio) and NNG closes the pipe. Other
     * pipes are closed protocol side first. Outside the lock: REM_POST
     * callbacks take it; a pipe removed meanwhile is ENOENT, which is fine. */
    for (unsigned i = 0; i < count; i++) {
        int fd = pipe_fd(open[i]);
        if (fd < 0 || shutdown(fd, SHUT_RDWR) != 0)
            (void)nng_pipe_close(open[i]);
    }
    /* Close the dialer only once the pipes are gone: its close would close
     * their transport side under a read in progress. */
    nng_mtx_lock(ps->mu);
    nng_time until = nng_clock() + SP_PIPES_GONE_MS;
    while (ps->count > 0 && nng_clock() < until)
        nng_cv_until(ps->removed, until);
    count = ps->count;
    memcpy(open, ps->open, count * sizeof(open[0]));
    nng_mtx_unlock(ps->mu);
    for (unsigned i = 0; i < count; i++) /* not gone in time: as a plain close would */
        (void)nng_pipe_close(open[i]);
    if (nng_dialer_id(d) > 0)
        (void)nng_dialer_close(d);
    nng_mtx_lock(ps->mu);
    ps->closing = false;
    nng_cv_wake(ps->dialer_closed);
    nng_mtx_unlock(ps->mu);
    nng_close(s);
}
