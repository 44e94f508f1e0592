/*
 * sp_pipes.c — see sp_pipes.h.
 */
#include "clients/transport/sp_pipes.h"

#include "common/sockaddr_nng.h"

#include <dirent.h>
#include <pthread.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

/* ---- the descriptors of ipc:// pipes ----
 *
 * An ipc:// connection's addresses do not tell it from another one to the
 * same path, so its descriptor is found by elimination: the one socket of
 * the process connected to that path that no pipe has claimed. A pipe's
 * own connection is always among them while it is open and unclaimed, so
 * a single one is it. That is tried at ADD_PRE and again at the close;
 * with more (two clients that connected at once, a socket that is not
 * libtally's) none is claimed, and the pipe is closed with nng_pipe_close,
 * as a pipe past SP_PIPES_MAX. A claim keeps the descriptor's inode,
 * checked before the shutdown: a number closed and reused meanwhile is
 * never shut down. */

/* Claims held at once in the process: pipes of libtally's sockets. */
#define SP_IPC_CLAIMS_MAX 256

static pthread_mutex_t claims_mu = PTHREAD_MUTEX_INITIALIZER;
static struct {
    int fd;
    ino_t ino;
} claims[SP_IPC_CLAIMS_MAX];
static unsigned claim_count;

static bool socket_inode(int fd, ino_t *ino)
{
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISSOCK(st.st_mode))
        return false;
    *ino = st.st_ino;
    return true;
}

/* Under claims_mu: whether the socket fd, of inode ino, is claimed (a
 * claim of that number with another inode is not: that socket is gone). */
static bool claimed_locked(int fd, ino_t ino)
{
    for (unsigned i = 0; i < claim_count; i++)
        if (claims[i].fd == fd && claims[i].ino == ino)
            return true;
    return false;
}

/* Whether fd is a socket connected to the ipc path. */
static bool connected_to(int fd, const char *path)
{
    struct sockaddr_un a;
    socklen_t n = sizeof(a);
    if (getpeername(fd, (struct sockaddr *)&a, &n) != 0 || a.sun_family != AF_UNIX ||
        n <= offsetof(struct sockaddr_un, sun_path))
        return false;
    char got[sizeof(a.sun_path) + 1];
    size_t len = n - offsetof(struct sockaddr_un, sun_path);
    memcpy(got, a.sun_path, len);
    got[len] = '\0';
    return strcmp(got, path) == 0;
}

/* Claim the descriptor of pipe, an ipc:// pipe that has just connected,
 * into p (p->fd stays -1 when it is not found alone). */
static void ipc_claim(nng_pipe pipe, sp_pipe *p)
{
    nng_sockaddr remote;
    if (nng_pipe_get_addr(pipe, NNG_OPT_REMADDR, &remote) != 0 ||
        remote.s_family != NNG_AF_IPC || remote.s_ipc.sa_path[0] == '\0')
        return;
    pthread_mutex_lock(&claims_mu);
    DIR *dir = claim_count < SP_IPC_CLAIMS_MAX ? opendir("/proc/self/fd") : NULL;
    int found = -1, matches = 0;
    ino_t found_ino = 0;
    for (struct dirent *e; dir != NULL && (e = readdir(dir)) != NULL;) {
        int fd = atoi(e->d_name);
        ino_t ino;
        if (e->d_name[0] == '.' || fd == dirfd(dir) || !socket_inode(fd, &ino) ||
            claimed_locked(fd, ino) || !connected_to(fd, remote.s_ipc.sa_path))
            continue;
        found = fd;
        found_ino = ino;
        matches++;
    }
    if (dir != NULL)
        closedir(dir);
    if (matches == 1) {
        claims[claim_count].fd = p->fd = found;
        claims[claim_count++].ino = p->ino = found_ino;
    }
    pthread_mutex_unlock(&claims_mu);
}

/* The pipe of p is gone: its claim too. */
static void ipc_release(const sp_pipe *p)
{
    if (p->fd < 0)
        return;
    pthread_mutex_lock(&claims_mu);
    for (unsigned i = 0; i < claim_count; i++)
        if (claims[i].fd == p->fd && claims[i].ino == p->ino) {
            claims[i] = claims[--claim_count];
            break;
        }
    pthread_mutex_unlock(&claims_mu);
}

/* p's claimed descriptor while it is still its connection, else -1. */
static int ipc_fd(const sp_pipe *p)
{
    ino_t ino;
    return p->fd >= 0 && socket_inode(p->fd, &ino) && ino == p->ino ? p->fd : -1;
}

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
        sp_pipe *p = &ps->open[ps->count++];
        *p = (sp_pipe){.pipe = pipe, .fd = -1};
        ipc_claim(pipe, p);
    } else if (ev == NNG_PIPE_EV_REM_POST) {
        for (unsigned i = 0; i < ps->count; i++)
            if (nng_pipe_id(ps->open[i].pipe) == nng_pipe_id(pipe)) {
                ipc_release(&ps->open[i]);
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
    sp_pipe open[SP_PIPES_MAX];
    nng_mtx_lock(ps->mu);
    for (unsigned i = 0; i < ps->count; i++) /* found alone now that others are claimed? */
        if (ps->open[i].fd < 0)
            ipc_claim(ps->open[i].pipe, &ps->open[i]);
    unsigned count = ps->count;
    memcpy(open, ps->open, count * sizeof(open[0]));
    ps->closing = true;
    nng_mtx_unlock(ps->mu);
    /* A connection is shut down under NNG: its reads end as if the server
     * had closed it, the error goes up through NNG's own callbacks
     * (nothing is refused on a closed aio) and NNG closes the pipe. A pipe
     * whose descriptor is not known is closed protocol side first. Outside
     * the lock: REM_POST callbacks take it; a pipe removed meanwhile is
     * ENOENT, which is fine. */
    for (unsigned i = 0; i < count; i++) {
        int fd = open[i].fd >= 0 ? ipc_fd(&open[i]) : pipe_fd(open[i].pipe);
        if (fd < 0 || shutdown(fd, SHUT_RDWR) != 0)
            (void)nng_pipe_close(open[i].pipe);
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
        (void)nng_pipe_close(open[i].pipe);
    if (nng_dialer_id(d) > 0)
        (void)nng_dialer_close(d);
    nng_mtx_lock(ps->mu);
    ps->closing = false;
    nng_cv_wake(ps->dialer_closed);
    nng_mtx_unlock(ps->mu);
    nng_close(s);
}
