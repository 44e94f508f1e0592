/*
 * publisher.c — committed events on the PUB socket, in seq order (the
 * completer calls it after each commit), one message per event. Each
 * subscriber's queue holds TALLY_PUBLISH_QUEUE_MESSAGES, so a commit's
 * burst reaches a subscriber that keeps up; one that falls further behind
 * loses messages, never blocks the writer, and fills the gap with log_read.
 * NNG bounds the queue by messages only, so events above
 * TALLY_PUBLISH_EVENT_BYTES_MAX (a webhook.received with a large body) are
 * not published at all: subscribers fill them in with log_read like any
 * gap, and a lagging subscriber's queue stays within 8192 x 4 KiB.
 */
#include "net/sp/sp.h"

#include "common/error.h"
#include "common/limits.h"
#include "common/tls_config.h"
#include "log/log.h"
#include "net/metrics/metrics.h"

#include <nng/protocol/pubsub0/pub.h>
#include <string.h>

/* Subscribers are the PUB pipes seen at ADD_POST until their REM_POST
 * (NNG reports the removal of pipes that never got to ADD_POST too). One
 * that cannot be recorded (out of memory) makes every publish go out. */
static void pub_pipe_event(nng_pipe p, nng_pipe_ev ev, void *arg)
{
    server *srv = arg;
    uint32_t id = (uint32_t)nng_pipe_id(p);
    int inserted;
    pthread_mutex_lock(&srv->sp->pipes_mu);
    if (ev == NNG_PIPE_EV_REM_POST)
        table_remove(srv->sp->pub_pipes, &id, sizeof(id));
    else if (table_upsert(srv->sp->pub_pipes, &id, sizeof(id), &inserted) == NULL)
        srv->sp->pub_pipes_unknown = true;
    pthread_mutex_unlock(&srv->sp->pipes_mu);
}

/* ADD_PRE: counted for the listener watchdog's probe (net/sp/listeners.c). */
static void pub_pipe_accepted(nng_pipe p, nng_pipe_ev ev, void *arg)
{
    (void)p;
    (void)ev;
    atomic_fetch_add(&((server *)arg)->sp->pub_accepted, 1);
}

static void publish_events(server *srv, uint64_t from_seq, uint64_t to_seq);

int publisher_open(server *srv)
{
    const char *url = srv->opt->publish_url;
    if (url == NULL || *url == '\0')
        return 0;
    int rv = nng_pub0_open(&srv->sp->pub);
    if (rv == 0) {
        srv->sp->has_pub = true;
        srv->publish = publish_events;
    }
    if (rv == 0) /* per subscriber; NNG's default (16) dropped events of one chain */
        rv = nng_socket_set_int(srv->sp->pub, NNG_OPT_SENDBUF, TALLY_PUBLISH_QUEUE_MESSAGES);
    if (rv == 0)
        rv = nng_pipe_notify(srv->sp->pub, NNG_PIPE_EV_ADD_PRE, pub_pipe_accepted, srv);
    if (rv == 0)
        rv = nng_pipe_notify(srv->sp->pub, NNG_PIPE_EV_ADD_POST, pub_pipe_event, srv);
    if (rv == 0)
        rv = nng_pipe_notify(srv->sp->pub, NNG_PIPE_EV_REM_POST, pub_pipe_event, srv);
    nng_tls_config *tls = tls_url_is_tls(url) ? srv->sp->tls : NULL;
    if (rv == 0 && (rv = tls_listen(srv->sp->pub, url, tls, &srv->sp->pub_listener)) != 0)
        net_log(NET_LOG_ERROR, "cannot publish on %s: %s", url, nng_strerror(rv));
    if (rv == 0) /* the watchdog listens on the bound port again (net/sp/listeners.c) */
        rv = listener_bound_url(srv->sp->pub_listener, url, srv->sp->pub_url);
    return rv;
}

/* noinline: tests/lsan.supp names this frame (a message NNG loses) */
__attribute__((noinline)) static int publish_one(uint64_t seq, const void *bytes, size_t len, void *ctx)
{
    (void)seq;
    server *srv = ctx;
    nng_msg *m;
    if (len > TALLY_PUBLISH_EVENT_BYTES_MAX || nng_msg_alloc(&m, len) != 0) {
        net_metrics_publish_dropped(1); /* too large to queue 8192 of: log_read brings it */
        return 0;
    }
    memcpy(nng_msg_body(m), bytes, len);
    /* NNG's PUB drops a slow reader's oldest message itself, uncounted (NNG
     * 1.5.2 has no statistic of it); subscribers fill gaps by seq. */
    if (nng_sendmsg(srv->sp->pub, m, NNG_FLAG_NONBLOCK) != 0) {
        nng_msg_free(m);
        net_metrics_publish_dropped(1);
    }
    return 0;
}

static bool has_subscribers(server *srv)
{
    pthread_mutex_lock(&srv->sp->pipes_mu);
    bool any = srv->sp->pub_pipes_unknown || table_count(srv->sp->pub_pipes) > 0;
    pthread_mutex_unlock(&srv->sp->pipes_mu);
    return any;
}

/* With no subscriber connected PUB would drop every message: then the
 * events are not read back and copied at all (that was about a sixth of
 * tallyd's CPU at 8 clients x 1000, docs/BENCHMARKS.md). */
static void publish_events(server *srv, uint64_t from_seq, uint64_t to_seq)
{
    if (!has_subscribers(srv))
        return;
    store_txn t;
    if (store_txn_begin(srv->st, NULL, true, &t) != TALLY_ok)
        return;
    uint64_t count = to_seq - from_seq + 1;
    if (count > TALLY_PUBLISH_EVENTS_MAX)
        net_metrics_publish_dropped(count - TALLY_PUBLISH_EVENTS_MAX);
    log_read(&t, from_seq, count < TALLY_PUBLISH_EVENTS_MAX ? count : TALLY_PUBLISH_EVENTS_MAX,
             publish_one, srv);
    store_txn_abort(&t);
}
