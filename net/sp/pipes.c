/*
 * pipes.c — request connections: counted (tally_connections), and bounded
 * by --max-connections. One over the limit is closed before the socket sees
 * it (NNG_PIPE_EV_ADD_PRE), so a flood of connections costs a refused
 * connect each, never unbounded memory. The accepted pipes are remembered
 * by id: NNG reports the removal of refused pipes too, and those must not
 * be counted. The tcp:// loop's connections (net/sp/sp_loop.c) are counted
 * here too, with ids NNG never gives (the high bit set). Also per client
 * address (--max-connections-per-address, and the reserved share of
 * --connections-reserved-pct), and for NNG's pipes what each has in flight
 * (its long-polls: --max-long-polls-per-connection) and when it was last
 * active (--idle-timeout-s).
 */
#include "net/sp/sp.h"

#include "common/clock.h"
#include "common/limits.h"
#include "common/nng_compat.h"
#include "common/tls_config.h"
#include "net/metrics/metrics.h"

#include <malloc.h>
#include <netinet/in.h>
#include <string.h>

/* A stale-pipe pass (net/sp/listeners.c) looks at every counted pipe; a flood of
 * connections at the limit must not pay that once per refused one. */
#define STALE_PIPES_PASS_INTERVAL_MS 250

void sp_address_of(const struct sockaddr *sa, sp_address *addr)
{
    static const uint8_t v4_mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    addr->len = 0;
    if (sa->sa_family == AF_INET) {
        addr->len = 4;
        memcpy(addr->bytes, &((const struct sockaddr_in *)sa)->sin_addr, 4);
    } else if (sa->sa_family == AF_INET6) {
        const uint8_t *b = ((const struct sockaddr_in6 *)sa)->sin6_addr.s6_addr;
        bool mapped = memcmp(b, v4_mapped, sizeof(v4_mapped)) == 0;
        addr->len = mapped ? 4 : 16;
        memcpy(addr->bytes, mapped ? b + 12 : b, addr->len);
    }
}

/* The connections addr holds now (0 for no address). Under pipes_mu. */
static uint32_t address_count(server *srv, const sp_address *addr)
{
    const uint32_t *n = addr->len ? table_find(srv->sp->addresses, addr->bytes, addr->len) : NULL;
    return n ? *n : 0;
}

/* Which limit, if any, refuses one more connection from addr while open
 * are open. The reserved share (the last connections_reserved_pct of
 * max_connections) goes only to addresses holding fewer than
 * TALLY_CONNECTIONS_FEW_PER_ADDRESS, and to ipc://. Under pipes_mu. */
static sp_admission admission(server *srv, size_t open, const sp_address *addr)
{
    const net_server_options *o = srv->opt;
    uint32_t held = address_count(srv, addr);
    if (o->connections_per_address_max > 0 && held >= o->connections_per_address_max)
        return SP_REFUSED_PER_ADDRESS;
    if (o->max_connections == 0)
        return SP_ADMITTED;
    if (open >= o->max_connections)
        return SP_REFUSED_TOTAL;
    size_t reserved = (size_t)o->max_connections * o->connections_reserved_pct / 100;
    if (open + reserved >= o->max_connections && held >= TALLY_CONNECTIONS_FEW_PER_ADDRESS)
        return SP_REFUSED_RESERVED;
    return SP_ADMITTED;
}

static const char *const admission_text[] = {
    [SP_REFUSED_TOTAL] = "the --max-connections limit",
    [SP_REFUSED_PER_ADDRESS] = "the --max-connections-per-address limit for its address",
    [SP_REFUSED_RESERVED] = "the share of --connections-reserved-pct kept for addresses with few",
};

/* Count id as open from addr. Under pipes_mu. false: out of memory. */
static bool pipe_add(server *srv, uint32_t id, const sp_address *addr, bool exempt)
{
    int inserted = 0;
    sp_pipe *p = table_upsert(srv->sp->pipes, &id, sizeof(id), &inserted);
    if (p == NULL)
        return false;
    uint32_t *n = addr->len ? table_upsert(srv->sp->addresses, addr->bytes, addr->len, &inserted)
                            : NULL;
    if (addr->len && n == NULL) {
        table_remove(srv->sp->pipes, &id, sizeof(id));
        return false;
    }
    *p = (sp_pipe){.addr = *addr, .exempt = exempt, .active_ms = clock_mono_ms()};
    if (n)
        ++*n;
    return true;
}

/* Forget id and its place in its address's count. Under pipes_mu;
 * returns 1 if it was counted. */
int pipes_drop_locked(server *srv, uint32_t id)
{
    sp_pipe *p = table_find(srv->sp->pipes, &id, sizeof(id));
    if (p == NULL)
        return 0;
    if (p->addr.len) {
        uint32_t *n = table_find(srv->sp->addresses, p->addr.bytes, p->addr.len);
        if (n && --*n == 0)
            table_remove(srv->sp->addresses, p->addr.bytes, p->addr.len);
    }
    return table_remove(srv->sp->pipes, &id, sizeof(id));
}

sp_admission pipes_admit(server *srv, uint32_t id, const sp_address *addr, bool exempt)
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
    sp_admission verdict = exempt ? SP_ADMITTED : admission(srv, open, addr);
    /* one that cannot be counted is still taken without a limit */
    if (verdict == SP_ADMITTED && !pipe_add(srv, id, addr, exempt) && srv->opt->max_connections)
        verdict = SP_REFUSED_TOTAL;
    uint64_t refused = verdict == SP_ADMITTED ? 0 : ++srv->sp->connections_refused;
    pthread_mutex_unlock(&srv->sp->pipes_mu);
    if (pruned > 0)
        net_log(NET_LOG_WARN, "%zu connections counted after they had gone (no REM_POST "
                "from NNG yet): no longer counted", pruned);
    if (verdict == SP_ADMITTED)
        return verdict;
    net_metrics_connection_refused(verdict == SP_REFUSED_TOTAL         ? NET_REFUSED_TOTAL
                                   : verdict == SP_REFUSED_PER_ADDRESS ? NET_REFUSED_PER_ADDRESS
                                                                       : NET_REFUSED_RESERVED);
    if (refused % 1000 == 1)
        net_log(NET_LOG_WARN, "connection refused: %zu open, %s (%llu refused so far)", open,
                admission_text[verdict], (unsigned long long)refused);
    return verdict;
}

void pipes_forget(server *srv, uint32_t id)
{
    pthread_mutex_lock(&srv->sp->pipes_mu);
    pipes_drop_locked(srv, id);
    pthread_mutex_unlock(&srv->sp->pipes_mu);
    if (!(id & 0x80000000u)) /* NNG's: its buffers are NNG's (the loop says for its own) */
        atomic_store(&srv->sp->trim_wanted, true);
}

/* ---- NNG's pipes: what each has in flight ---- */

/* The counted pipe id that caps apply to, or NULL. Under pipes_mu. */
static sp_pipe *capped_pipe(server *srv, uint32_t id)
{
    sp_pipe *p = table_find(srv->sp->pipes, &id, sizeof(id));
    return p && !p->exempt ? p : NULL;
}

void pipes_request_begin(server *srv, uint32_t id)
{
    pthread_mutex_lock(&srv->sp->pipes_mu);
    sp_pipe *p = capped_pipe(srv, id);
    if (p) {
        p->in_flight++;
        p->active_ms = clock_mono_ms();
    }
    pthread_mutex_unlock(&srv->sp->pipes_mu);
}

void pipes_request_end(server *srv, uint32_t id)
{
    pthread_mutex_lock(&srv->sp->pipes_mu);
    sp_pipe *p = capped_pipe(srv, id);
    if (p && p->in_flight > 0) {
        p->in_flight--;
        p->active_ms = clock_mono_ms();
    }
    pthread_mutex_unlock(&srv->sp->pipes_mu);
}

bool pipes_long_poll_begin(server *srv, uint32_t id)
{
    pthread_mutex_lock(&srv->sp->pipes_mu);
    sp_pipe *p = capped_pipe(srv, id);
    bool ok = p == NULL || p->long_polls < srv->opt->long_polls_per_connection_max;
    if (p && ok)
        p->long_polls++;
    pthread_mutex_unlock(&srv->sp->pipes_mu);
    return ok;
}

void pipes_long_poll_end(server *srv, uint32_t id)
{
    pthread_mutex_lock(&srv->sp->pipes_mu);
    sp_pipe *p = capped_pipe(srv, id);
    if (p && p->long_polls > 0)
        p->long_polls--;
    pthread_mutex_unlock(&srv->sp->pipes_mu);
}

void pipes_close(server *srv, uint32_t id, net_closure reason)
{
    pthread_mutex_lock(&srv->sp->pipes_mu);
    sp_pipe *p = table_find(srv->sp->pipes, &id, sizeof(id));
    bool first = p && p->closed_ms == 0;
    if (first)
        p->closed_ms = clock_mono_ms();
    pthread_mutex_unlock(&srv->sp->pipes_mu);
    if (first) /* counted before its client can see it closed */
        net_metrics_connection_closed(reason);
    nng_pipe np = NNG_PIPE_INITIALIZER;
    np.id = id;
    nng_pipe_close(np);
}

void pipes_reply_dropped(server *srv, uint32_t id)
{
    pthread_mutex_lock(&srv->sp->pipes_mu);
    sp_pipe *p = capped_pipe(srv, id);
    if (p)
        p->replies_dropped = true;
    pthread_mutex_unlock(&srv->sp->pipes_mu);
}

#define IDLE_PIPES_PER_PASS 256
/* NNG 1.5.2 keeps a pipe closed with replies its client never read (the
 * socket in FIN-WAIT-1) and reports its removal late or never: after
 * this long it no longer holds a place (the socket is closed). */
#define CLOSED_PIPE_FORGET_MS 5000

typedef struct idle_pipes {
    uint32_t ids[IDLE_PIPES_PER_PASS];
    bool unread[IDLE_PIPES_PER_PASS]; /* its replies were dropped */
    unsigned count;
    uint32_t gone[IDLE_PIPES_PER_PASS]; /* closed long ago: forgotten */
    unsigned gone_count;
    int64_t now_ms;
    int64_t before_ms; /* active before this: idle */
} idle_pipes;

static int collect_idle_pipe(const void *key, size_t key_len, void *value, void *ctx)
{
    idle_pipes *ip = ctx;
    const sp_pipe *p = value;
    uint32_t id;
    if (key_len != sizeof(id))
        return 0;
    memcpy(&id, key, sizeof(id));
    if ((id & 0x80000000u) || p->exempt)
        return 0; /* the tcp:// loop times out its own */
    if (p->closed_ms && ip->now_ms - p->closed_ms >= CLOSED_PIPE_FORGET_MS)
        ip->gone[ip->gone_count++] = id;
    else if (!p->closed_ms && p->in_flight == 0 &&
             (p->replies_dropped || p->active_ms < ip->before_ms)) {
        ip->unread[ip->count] = p->replies_dropped;
        ip->ids[ip->count++] = id;
    }
    return ip->count == IDLE_PIPES_PER_PASS || ip->gone_count == IDLE_PIPES_PER_PASS;
}

void pipes_close_idle(server *srv)
{
    int64_t now = clock_mono_ms();
    if (now - srv->sp->idle_swept_ms < 1000)
        return;
    srv->sp->idle_swept_ms = now;
    if (atomic_exchange(&srv->sp->trim_wanted, false))
        malloc_trim(0);
    idle_pipes ip = {.now_ms = now, .before_ms = now - (int64_t)srv->opt->idle_timeout_s * 1000};
    pthread_mutex_lock(&srv->sp->pipes_mu);
    table_each(srv->sp->pipes, collect_idle_pipe, &ip);
    for (unsigned i = 0; i < ip.gone_count; i++)
        pipes_drop_locked(srv, ip.gone[i]);
    pthread_mutex_unlock(&srv->sp->pipes_mu);
    if (ip.gone_count > 0)
        net_log(NET_LOG_INFO, "%u connections closed by tallyd %d s ago are still held by NNG "
                "(their clients read nothing): no longer counted", ip.gone_count,
                CLOSED_PIPE_FORGET_MS / 1000);
    for (unsigned i = 0; i < ip.count; i++) /* its REM_POST forgets it */
        pipes_close(srv, ip.ids[i], ip.unread[i] ? NET_CLOSED_UNREAD_REPLIES : NET_CLOSED_IDLE);
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
    nng_sockaddr na;
    sp_address addr = {0};
    bool exempt = false;
    if (nng_pipe_get_addr(p, NNG_OPT_REMADDR, &na) == 0) {
        struct sockaddr_storage ss = {0};
        if (na.s_family == NNG_AF_INET) {
            struct sockaddr_in *in = (struct sockaddr_in *)&ss;
            in->sin_family = AF_INET;
            memcpy(&in->sin_addr, &na.s_in.sa_addr, 4);
        } else if (na.s_family == NNG_AF_INET6) {
            struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)&ss;
            in6->sin6_family = AF_INET6;
            memcpy(in6->sin6_addr.s6_addr, na.s_in6.sa_addr, 16);
        }
        sp_address_of((struct sockaddr *)&ss, &addr);
        exempt = na.s_family == NNG_AF_INPROC; /* the HTTP face's own: its limits are its own */
    }
    if (pipes_admit(srv, id, &addr, exempt) != SP_ADMITTED)
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
