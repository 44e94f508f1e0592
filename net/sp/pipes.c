/*
 * pipes.c — request connections: counted (tally_connections), and bounded
 * by --max-connections. One over the limit is closed before the socket sees
 * it (NNG_PIPE_EV_ADD_PRE), so a flood of connections costs a refused
 * connect each, never unbounded memory. The accepted pipes are remembered
 * by id: NNG reports the removal of refused pipes too, and those must not
 * be counted. The tcp:// loop's connections (net/sp/sp_loop.c) are counted
 * here too, with ids NNG never gives (the high bit set).
 */
#include "net/sp/sp.h"

#include "common/clock.h"
#include "common/nng_compat.h"
#include "common/tls_config.h"

/* A stale-pipe pass (net/sp/listeners.c) looks at every counted pipe; a flood of
 * connections at the limit must not pay that once per refused one. */
#define STALE_PIPES_PASS_INTERVAL_MS 250

bool pipes_admit(server *srv, uint32_t id)
{
    pthread_mutex_lock(&srv->sp->pipes_mu);
    size_t pruned = 0;
    if (NNG_COMPAT_STALE_PIPES && srv->opt->max_connections > 0 &&
        table_count(srv->sp->pipes) >= srv->opt->max_connections) {
        int64_t now = clock_mono_ms();
        if (now - srv->sp->pipes_pruned_ms >= STALE_PIPES_PASS_INTERVAL_MS) {
            srv->sp->pipes_pruned_ms = now;
            pruned = pipes_prune_stale(srv);
        }
    }
    size_t open = table_count(srv->sp->pipes);
    int inserted = 0;
    bool unlimited = srv->opt->max_connections == 0;
    bool accept = (unlimited || open < srv->opt->max_connections) &&
                  table_upsert(srv->sp->pipes, &id, sizeof(id), &inserted) != NULL;
    accept = accept || unlimited; /* without a limit, one not counted is still taken */
    uint64_t refused = accept ? 0 : ++srv->sp->connections_refused;
    pthread_mutex_unlock(&srv->sp->pipes_mu);
    if (pruned > 0)
        net_log(NET_LOG_WARN, "%zu connections counted after they had gone (no REM_POST "
                "from NNG yet): no longer counted", pruned);
    if (!accept && refused % 1000 == 1)
        net_log(NET_LOG_WARN, "connection refused: %zu open, the --max-connections limit "
                "(%llu refused so far)", open, (unsigned long long)refused);
    return accept;
}

void pipes_forget(server *srv, uint32_t id)
{
    pthread_mutex_lock(&srv->sp->pipes_mu);
    table_remove(srv->sp->pipes, &id, sizeof(id));
    pthread_mutex_unlock(&srv->sp->pipes_mu);
}

static void pipe_event(nng_pipe p, nng_pipe_ev ev, void *arg)
{
    server *srv = arg;
    uint32_t id = (uint32_t)nng_pipe_id(p);
    if (ev == NNG_PIPE_EV_REM_POST) {
        pipes_forget(srv, id);
        return;
    }
    listeners_note_accept(srv, p);
    if (listeners_pipe_is_probe(srv, p))
        return; /* the watchdog's: gone at once, never a client's place */
    if (!pipes_admit(srv, id))
        nng_pipe_close(p); /* no further events for this pipe */
}

int pipes_watch(server *srv)
{
    /* Always: the listener watchdog counts connections taken, and
     * tally_connections reports those open */
    int rv = nng_pipe_notify(srv->sp->rep, NNG_PIPE_EV_ADD_PRE, pipe_event, srv);
    if (rv == 0)
        rv = nng_pipe_notify(srv->sp->rep, NNG_PIPE_EV_REM_POST, pipe_event, srv);
    return rv;
}

/* NNG counts a handshake it refused (no client certificate, one that does
 * not chain to --tls-ca or has expired, a peer that is not TLS) as an
 * "auth" failure of the listener; it tells the socket nothing else. */
void listeners_log_tls_refusals(server *srv)
{
    static const char *const refused[] = {"auth", "proto", NULL};
    listeners *ls = &srv->sp->lis;
    for (unsigned i = 0; i < ls->count; i++) {
        if (ls->down[i] || ls->ours[i] || !tls_url_is_tls(ls->url[i]))
            continue;
        int64_t now = listener_stats_sum(ls->l[i], refused);
        if (now < ls->tls_refused[i]) /* a listener made again counts from 0 */
            ls->tls_refused[i] = 0;
        if (now > ls->tls_refused[i])
            net_log(NET_LOG_WARN, "%s: %lld TLS handshake(s) refused (no client certificate, "
                    "one not signed by --tls-ca or expired, or not TLS)",
                    ls->url[i], (long long)(now - ls->tls_refused[i]));
        if (now >= 0)
            ls->tls_refused[i] = now;
    }
}

void sp_counts_get(server *srv, sp_counts *out)
{
    pthread_mutex_lock(&srv->sp->pipes_mu);
    out->connections = table_count(srv->sp->pipes);
    out->connections_refused = srv->sp->connections_refused;
    out->publish_subscribers = table_count(srv->sp->pub_pipes);
    pthread_mutex_unlock(&srv->sp->pipes_mu);
}
