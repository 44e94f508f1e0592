/*
 * listeners.c — the request listeners: opened on each --listen URL (port
 * 0 bound and reported), watched, closed; with tallyd's workarounds for
 * NNG 1.5.2 on them (common/nng_compat.h lists them all, with their
 * upstream issues and the versions that fix them): the listener watchdog
 * and the stale-pipe pass. Built against a fixed NNG, the watchdog does
 * not probe and the pass takes nothing back.
 */
#include "net/sp/sp.h"
#include "net/metrics/metrics.h"

#include "common/nng_compat.h"
#include "common/sockaddr_nng.h"
#include "common/tls_config.h"
#include "net/sp/sp_loop.h"

#include <stdio.h>
#include <string.h>
#include <sys/un.h>
#include <unistd.h>

/* ---- the listener watchdog (nanomsg/nng#1518, fixed in 1.6.0) ---- */

/* A probe waits for the listener's answer up to 8 probe intervals, within
 * these bounds: the default 2 s interval waits 12 s, beyond NNG's 10 s
 * negotiation timeout; a test that probes every 150 ms waits 1.2 s. */
#define LISTENER_PROBE_WAIT_INTERVALS 8
#define LISTENER_PROBE_WAIT_MIN_MS 1000
#define LISTENER_PROBE_WAIT_MAX_MS 12000
#define LISTENER_STOPPED_PROBES 2    /* in a row before the listener is re-created */

/* The TLS configuration of a tls+tcp:// url (tallyd.c refused one
 * without), NULL for the others. */
static nng_tls_config *listen_tls(const server *srv, const char *url)
{
    return tls_url_is_tls(url) ? srv->sp->tls : NULL;
}

int listener_bound_url(nng_listener l, const char *url, char out[NET_URL_BYTES_MAX])
{
    int port;
    bool fits = nng_listener_get_int(l, NNG_OPT_TCP_BOUND_PORT, &port) == 0
                    ? net_url_with_port(url, (unsigned)port, out, NET_URL_BYTES_MAX)
                    : snprintf(out, NET_URL_BYTES_MAX, "%s", url) < NET_URL_BYTES_MAX;
    if (!fits)
        net_log(NET_LOG_ERROR, "%s: a URL over %d bytes", url, NET_URL_BYTES_MAX - 1);
    return fits ? 0 : NNG_EINVAL;
}

int listeners_open(server *srv)
{
    const net_server_options *opt = srv->opt;
    listeners *ls = &srv->sp->lis;
    for (unsigned i = 0; i < opt->listen_count; i++) {
        const char *url = opt->listen_urls[i];
        ls->count++;
        if ((ls->ours[i] = sp_loop_serves(opt, url)))
            continue; /* the loop listens and sets ls->url[i] (sp_loop_open) */
        int rv = tls_listen(srv->sp->rep, url, listen_tls(srv, url), &ls->l[i]);
        if (rv != 0) {
            net_log(NET_LOG_ERROR, "cannot listen on %s: %s", url, nng_strerror(rv));
            return rv;
        }
        if ((rv = listener_bound_url(ls->l[i], url, ls->url[i])) != 0)
            return rv;
        atomic_store(&ls->ids[i], (unsigned)nng_listener_id(ls->l[i]));
    }
    return 0;
}

void listeners_note_accept(server *srv, nng_pipe p)
{
    int from = nng_listener_id(nng_pipe_listener(p));
    for (unsigned i = 0; i < NET_LISTEN_URLS_MAX && from > 0; i++)
        if (atomic_load(&srv->sp->lis.ids[i]) == (unsigned)from)
            atomic_fetch_add(&srv->sp->lis.accepted[i], 1);
}

/* Close listener *l of sock (once: *down says it is closed) and listen on
 * url again. true when it listens again. */
static bool listen_again(server *srv, nng_socket sock, const char *url, nng_listener *l,
                         bool *down)
{
    if (!*down) {
        net_log(NET_LOG_WARN, "%s stopped accepting connections (NNG 1.5.2 after a peer hung "
                "up during the SP header exchange, nanomsg/nng#1518): listening again; its "
                "connections are closed and their clients reconnect", url);
        nng_listener_close(*l);
        *down = true;
    }
    int rv = tls_listen(sock, url, listen_tls(srv, url), l);
    if (rv != 0) {
        net_log(NET_LOG_ERROR, "cannot listen on %s again: %s (trying again)", url,
                nng_strerror(rv));
        return false;
    }
    *down = false;
    net_metrics_listener_restart();
    net_log(NET_LOG_INFO, "listening on %s again", url);
    return true;
}

/* The probe's own end, for listeners_pipe_is_probe (self NULL: done). */
static void mark_probe(void *ctx, const struct sockaddr *self, socklen_t len)
{
    server *srv = ctx;
    pthread_mutex_lock(&srv->sp->pipes_mu);
    srv->sp->probe_self_len = self && len <= sizeof(srv->sp->probe_self) ? len : 0;
    if (srv->sp->probe_self_len)
        memcpy(&srv->sp->probe_self, self, len);
    pthread_mutex_unlock(&srv->sp->pipes_mu);
}

bool listeners_pipe_is_probe(server *srv, nng_pipe p)
{
    struct sockaddr_storage self;
    pthread_mutex_lock(&srv->sp->pipes_mu);
    bool probing = srv->sp->probe_self_len > 0;
    self = srv->sp->probe_self;
    pthread_mutex_unlock(&srv->sp->pipes_mu);
    if (!probing)
        return false; /* the common case: no NNG option read per connection */
    if (self.ss_family == AF_UNIX) { /* only tallyd's own probe connects from tallyd */
        uint64_t pid = 0;          /* NNG_OPT_IPC_PEER_PID is a uint64 */
        return nng_pipe_get_uint64(p, NNG_OPT_IPC_PEER_PID, &pid) == 0 &&
               pid == (uint64_t)getpid();
    }
    nng_sockaddr peer;
    return nng_pipe_get_addr(p, NNG_OPT_REMADDR, &peer) == 0 && sockaddr_is_nng(&self, &peer);
}

static listener_probe_result probe(server *srv, const char *url, nng_listener l,
                                   const atomic_uint *accepted, volatile sig_atomic_t *stop)
{
    uint64_t wait_ms = (uint64_t)srv->opt->listener_probe_ms * LISTENER_PROBE_WAIT_INTERVALS;
    if (wait_ms < LISTENER_PROBE_WAIT_MIN_MS)
        wait_ms = LISTENER_PROBE_WAIT_MIN_MS;
    if (wait_ms > LISTENER_PROBE_WAIT_MAX_MS)
        wait_ms = LISTENER_PROBE_WAIT_MAX_MS;
    listener_probe_result r =
        tls_url_is_tls(url) ? listener_probe_tls(l, (int)wait_ms, stop)
                            : listener_probe(l, accepted, mark_probe, srv, (int)wait_ms, stop);
    if (r != LISTENER_UNKNOWN)
        net_metrics_listener_probe();
    if (r != LISTENER_ACCEPTING)
        net_log(NET_LOG_DEBUG, "probe of %s: %s", url,
                r == LISTENER_STOPPED ? "not accepting" : "not probed");
    return r;
}

static void relisten(server *srv, unsigned i)
{
    listeners *ls = &srv->sp->lis;
    if (!listen_again(srv, srv->sp->rep, ls->url[i], &ls->l[i], &ls->down[i]))
        return;
    atomic_store(&ls->ids[i], (unsigned)nng_listener_id(ls->l[i]));
    ls->stopped[i] = 0;
}

/* The publish listener stops the same way (a subscriber that hangs up
 * during the handshake, or closes just as it redials): subscribers then
 * read by log_read until it is back. */
static void watch_publisher(server *srv, volatile sig_atomic_t *stop)
{
    const char *url = srv->sp->pub_url;
    if (!srv->sp->has_pub || *stop)
        return;
    if (srv->sp->pub_down) {
        if (listen_again(srv, srv->sp->pub, url, &srv->sp->pub_listener, &srv->sp->pub_down))
            srv->sp->pub_stopped = 0;
        return;
    }
    listener_probe_result r = probe(srv, url, srv->sp->pub_listener, &srv->sp->pub_accepted, stop);
    if (r == LISTENER_ACCEPTING)
        srv->sp->pub_stopped = 0;
    else if (r == LISTENER_STOPPED && ++srv->sp->pub_stopped >= LISTENER_STOPPED_PROBES &&
             listen_again(srv, srv->sp->pub, url, &srv->sp->pub_listener, &srv->sp->pub_down))
        srv->sp->pub_stopped = 0;
}

void listeners_watch(server *srv, volatile sig_atomic_t *stop)
{
    if (!NNG_COMPAT_LISTENER_WATCHDOG)
        return;
    listeners *ls = &srv->sp->lis;
    for (unsigned i = 0; i < ls->count && !*stop; i++) {
        if (ls->ours[i])
            continue; /* the loop's own accept does not stop */
        if (ls->down[i]) {
            relisten(srv, i);
            continue;
        }
        const char *url = ls->url[i];
        listener_probe_result r = probe(srv, url, ls->l[i], &ls->accepted[i], stop);
        if (r == LISTENER_ACCEPTING)
            ls->stopped[i] = 0;
        if (r == LISTENER_ACCEPTING && tls_url_is_tls(url))
            ls->tls_refused[i]++; /* the probe's own refused handshake: not logged */
        else if (r == LISTENER_STOPPED && ++ls->stopped[i] >= LISTENER_STOPPED_PROBES)
            relisten(srv, i);
    }
    watch_publisher(srv, stop);
}

void listeners_close(server *srv)
{
    for (unsigned i = 0; i < srv->sp->lis.count; i++)
        if (!srv->sp->lis.down[i] && !srv->sp->lis.ours[i])
            nng_listener_close(srv->sp->lis.l[i]);
    sp_loop_stop_accepting(srv);
}

/* ---- stale pipes (NNG 1.5.2's late REM_POST) ---- */

/* Counted connections NNG no longer knows. Their REM_POST should have
 * removed them, but NNG 1.5.2 sends it late, from its reaper, and under
 * load (ASan, a busy machine) a place was seen held long after its
 * connection had gone; at the limit, such places are taken back. */
#define STALE_PIPES_PER_PASS 64

typedef struct stale_pipes {
    uint32_t ids[STALE_PIPES_PER_PASS];
    unsigned count;
} stale_pipes;

static int collect_stale_pipe(const void *key, size_t key_len, void *value, void *ctx)
{
    (void)value;
    stale_pipes *sp = ctx;
    nng_pipe p = NNG_PIPE_INITIALIZER;
    if (key_len != sizeof(p.id))
        return 0;
    memcpy(&p.id, key, sizeof(p.id));
    if (p.id & 0x80000000u)
        return 0; /* the tcp:// loop's: it forgets its own */
    nng_sockaddr sa;
    int rv = nng_pipe_get_addr(p, NNG_OPT_REMADDR, &sa);
    if (rv == NNG_ENOENT || rv == NNG_ECLOSED)
        sp->ids[sp->count++] = p.id;
    return sp->count == STALE_PIPES_PER_PASS;
}

size_t pipes_prune_stale(server *srv)
{
    size_t pruned = 0;
    stale_pipes sp;
    do {
        sp.count = 0;
        table_each(srv->sp->pipes, collect_stale_pipe, &sp);
        for (unsigned i = 0; i < sp.count; i++)
            pruned += (size_t)pipes_drop_locked(srv, sp.ids[i]);
    } while (sp.count == STALE_PIPES_PER_PASS);
    return pruned;
}
