/*
 * server.c — tallyd's engine, wiring and lifecycle (see server.h): open
 * the store and the sockets, start the writer and waiter threads (and the
 * completer with --replies completer), watch the listeners while serving,
 * and stop cleanly. The rooms are listed in server_internal.h.
 */
#include "net/server/server.h"

#include "common/clock.h"
#include "common/error.h"
#include "common/limits.h"
#include "ledger/index_build.h"
#include "ledger/open_check.h"
#include "log/log.h"
#include "net/http/face.h"
#include "net/metrics/figures_history.h"
#include "net/ops/figures.h"
#include "common/nng_compat.h"
#include "net/sp/sp.h"
#include "net/sp/sp_loop.h"

#include <inttypes.h>
#include <nng/protocol/reqrep0/rep.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/statvfs.h>
#include <unistd.h>

#define SHUTDOWN_SEND_WAIT_MS 3000

/* Stop: no new connections, let replies leave, close the store (durable
 * and unlocked) while reads are held off. The NNG sockets are deliberately
 * not closed (NNG_COMPAT_NO_CLOSE_AT_EXIT: nng_close in NNG 1.5.2 can
 * deadlock while pipes are being torn down under load, nanomsg/nng#1543,
 * #1813 — seen here as a tallyd that never exited after SIGTERM). The
 * process exits right after; the kernel closes the sockets. NNG callbacks
 * that still arrive find the store closed and answer shutting_down, so srv
 * must stay allocated. */
static void close_everything(server *srv)
{
    listeners_close(srv);
    int64_t until = clock_mono_ms() + SHUTDOWN_SEND_WAIT_MS;
    while (atomic_load(&srv->sp->sends_in_flight) > 0 && clock_mono_ms() < until)
        usleep(5000);
    pthread_rwlock_wrlock(&srv->store_rw);
    srv->store_closed = true;
    store_close(srv->st);
    srv->st = NULL;
    pthread_rwlock_unlock(&srv->store_rw);
}

/* A refusal of the store, with what the store said about it. */
static int store_refused(server *srv, int rc, const char *why)
{
    if (rc == TALLY_corrupt_record)
        net_log(NET_LOG_ERROR, "refusing the damaged store %s: %s (tally-recon --data %s tells "
                "more%s)", srv->opt->data_dir, why[0] ? why : tally_strerror(rc),
                srv->opt->data_dir, srv->opt->skip_open_check ? "" : "; --skip-open-check skips "
                "tallyd's own check, for recovery work");
    else
        net_log(NET_LOG_ERROR, "cannot open store %s: %s", srv->opt->data_dir,
                why[0] ? why : tally_strerror(rc));
    return rc;
}

/* The rest of the structural check at open, on the store just opened
 * (store_open checked LMDB's meta pages before LMDB used them, and the
 * format record): the head record and the hash chain of the last events
 * (ledger/open_check.h). */
static int check_open_store(server *srv, int64_t started)
{
    char why[TALLY_PATH_BYTES_MAX + 256] = "";
    store_txn t;
    ledger_open_check_result seen;
    int rc = store_txn_begin(srv->st, NULL, true, &t);
    if (rc == TALLY_ok) {
        rc = ledger_open_check(&t, TALLY_OPEN_CHECK_EVENTS, &seen, why, sizeof(why));
        store_txn_abort(&t);
    }
    if (rc != TALLY_ok)
        return store_refused(srv, rc, why);
    net_log(NET_LOG_INFO, "store checked at open: head seq %llu, the last %llu events chain "
            "(%lld ms)", (unsigned long long)seen.head_seq, (unsigned long long)seen.events,
            (long long)(clock_mono_ms() - started));
    return TALLY_ok;
}

static int open_store(server *srv, const tally_id128 *instance_id)
{
    char why[TALLY_PATH_BYTES_MAX + 256] = "";
    if (srv->opt->skip_open_check)
        net_log(NET_LOG_WARN, "--skip-open-check: the store is opened without its structural "
                "check; for recovery work only");
    store_options so = {.path = srv->opt->data_dir, .map_size_bytes = srv->opt->map_size_bytes,
                        .why = why, .why_bytes = sizeof(why),
                        .check_meta_pages = !srv->opt->skip_open_check,
                        .upgrade = srv->opt->upgrade, .instance_id = instance_id};
    int64_t started = clock_mono_ms();
    int rc = store_open(&so, &srv->st);
    if (rc == TALLY_store_locked) {
        net_log(NET_LOG_ERROR, "%s is in use by another tallyd (lock %s/tally.lock held)",
                srv->opt->data_dir, srv->opt->data_dir);
        return rc;
    }
    if (rc != TALLY_ok)
        return store_refused(srv, rc, why);
    if (store_upgraded_from(srv->st))
        net_log(NET_LOG_WARN, "--upgrade: store %s upgraded from format %u to %d, one way (an "
                "older tallyd refuses it now)", srv->opt->data_dir, store_upgraded_from(srv->st),
                STORE_FORMAT_VERSION);
    else if (srv->opt->upgrade)
        net_log(NET_LOG_INFO, "--upgrade: store %s is of the current format %d: nothing to do",
                srv->opt->data_dir, STORE_FORMAT_VERSION);
    if (!srv->opt->skip_open_check && (rc = check_open_store(srv, started)) != TALLY_ok) {
        store_close(srv->st);
        srv->st = NULL;
        return rc;
    }
    uint64_t max = srv->opt->map_max_bytes;
    if (max == 0) { /* the default, bounded by the filesystem */
        struct statvfs fs;
        max = TALLY_MAP_MAX_BYTES_DEFAULT;
        if (statvfs(srv->opt->data_dir, &fs) == 0 && (uint64_t)fs.f_blocks * fs.f_frsize < max)
            max = (uint64_t)fs.f_blocks * fs.f_frsize;
    }
    store_set_map_max(srv->st, max); /* never below a map grown before */
    uint64_t indexed = 0;
    rc = ledger_index_build(srv->st, &indexed); /* an upgraded store's records */
    if (rc != TALLY_ok) {
        net_log(NET_LOG_ERROR, "store %s: building the account and transfer indexes: %s",
                srv->opt->data_dir, tally_strerror(rc));
        store_close(srv->st);
        srv->st = NULL;
        return rc;
    }
    if (indexed)
        net_log(NET_LOG_INFO, "store %s: indexed %" PRIu64 " accounts and transfers",
                srv->opt->data_dir, indexed);
    store_txn t;
    log_head head = {0};
    rc = store_txn_begin(srv->st, NULL, true, &t);
    if (rc == TALLY_ok) {
        rc = log_head_get(&t, &head);
        store_txn_abort(&t);
    }
    srv->head_seq = head.seq;
    if (rc != TALLY_ok) { /* even with --skip-open-check: the writer starts from the head */
        snprintf(why, sizeof(why), "%s/data.mdb: the head record (meta \"head\"): %s",
                 srv->opt->data_dir, tally_strerror(rc));
        store_close(srv->st);
        srv->st = NULL;
        return store_refused(srv, rc, why);
    }
    return rc;
}

/* The HTTP face's view of the transports beside it (net/http/face.h). */
static void http_counts(server *srv, uint64_t *connections, uint64_t *refused,
                        uint64_t *subscribers)
{
    sp_counts c;
    sp_counts_get(srv, &c);
    *connections = c.connections;
    *refused = c.connections_refused;
    *subscribers = c.publish_subscribers;
}

static int open_sockets(server *srv)
{
    int rv = nng_rep0_open(&srv->sp->rep);
    srv->http->hooks.rep = srv->sp->rep;
    srv->http->hooks.counts = http_counts;
    if (rv == 0)
        rv = slots_limit_requests(srv);
    if (rv == 0)
        rv = pipes_watch(srv);
    if (rv == 0)
        rv = listeners_open(srv);
    if (rv == 0)
        rv = sp_loop_open(srv);
    if (rv == 0)
        rv = publisher_open(srv);
    if (rv == 0)
        rv = slots_open(srv);
    if (rv == 0)
        rv = writer_init(srv);
    return rv;
}

/* Every endpoint as bound, a "ROLE URL" line each (the ready file's
 * lines, docs/OPERATIONS.md), into text. */
static void endpoints_text(const server *srv, char *text, size_t size)
{
    size_t used = 0;
    text[0] = '\0';
    for (unsigned i = 0; i < srv->sp->lis.count && used < size; i++)
        used += (size_t)snprintf(text + used, size - used, "listen %s\n", srv->sp->lis.url[i]);
    if (srv->sp->has_pub && used < size)
        used += (size_t)snprintf(text + used, size - used, "publish %s\n", srv->sp->pub_url);
    if (srv->http->http && used < size)
        snprintf(text + used, size - used, "http %s\n", srv->http->url);
}

/* Log the bound endpoints on one line and write --ready-file: 0, or 1
 * when the file cannot be written (logged). */
static int announce_endpoints(server *srv)
{
    static char text[NET_READY_FILE_BYTES_MAX]; /* main thread only */
    static char line[2 * NET_READY_FILE_BYTES_MAX];
    endpoints_text(srv, text, sizeof(text));
    char *out = line; /* one line: "listen URL, publish URL, ..." */
    for (const char *c = text; *c; c++) {
        if (*c != '\n')
            *out++ = *c;
        else if (c[1])
            out += sprintf(out, ", "); /* line has room for two bytes per byte of text */
    }
    *out = '\0';
    net_log(NET_LOG_INFO, "endpoints: %s", line);
    char why[TALLY_PATH_BYTES_MAX + 200];
    if (srv->opt->ready_file &&
        net_ready_file_write(srv->opt->ready_file, text, why, sizeof(why)) != TALLY_ok) {
        net_log(NET_LOG_ERROR, "cannot write the ready file: %s", why);
        return 1;
    }
    return 0;
}

/* The threads, started in this order (the completer only when it answers
 * groups) and stopped in reverse; only those that started are joined. */
typedef struct threads {
    pthread_t completer, writer, waiter, applier;
    bool completer_started, writer_started, waiter_started, applier_started;
} threads;

static int start_thread(pthread_t *id, void *(*main_fn)(void *), server *srv, bool *started)
{
    int rv = pthread_create(id, NULL, main_fn, srv);
    if (rv != 0)
        net_log(NET_LOG_ERROR, "cannot start a thread: %s", strerror(rv));
    *started = rv == 0;
    return rv;
}

static int start_threads(server *srv, threads *th)
{
    int rv = 0;
    if (srv->opt->replies != NET_REPLIES_WRITER)
        rv = start_thread(&th->completer, completer_main, srv, &th->completer_started);
    const net_cluster_hooks *cluster = srv->cluster ? srv->opt->cluster : NULL;
    if (rv == 0)
        rv = start_thread(&th->writer, cluster ? cluster->writer_main : writer_main, srv,
                          &th->writer_started);
    if (rv == 0)
        rv = start_thread(&th->waiter, waiter_main, srv, &th->waiter_started);
    if (rv == 0 && cluster)
        rv = start_thread(&th->applier, cluster->applier_main, srv, &th->applier_started);
    return rv;
}

/* Stop taking requests, let the writer finish and answer its group (it
 * drains the completer before it returns), then the completer and the
 * waiter. */
/* How long a stop waits for the cluster's writer and applier to end on
 * their own (a PubAck coming back answers its group ok). */
#define STOP_GRACE_MS 1000

/* Whether t ended within ms (joined then). */
static bool joined_within(pthread_t t, int64_t ms)
{
    struct timespec at = clock_realtime_in_ms(ms);
    return pthread_timedjoin_np(t, NULL, &at) == 0;
}

/* The writer and the applier ended: in cluster mode, those still waiting
 * on NATS after STOP_GRACE_MS have their waits cut (the cluster's
 * interrupt), so a stop takes about that long, not a request's wait. */
static void join_writers(server *srv, threads *th)
{
    const net_cluster_hooks *cl = srv->cluster ? srv->opt->cluster : NULL;
    bool writer_left = th->writer_started, applier_left = th->applier_started;
    if (cl && cl->interrupt) {
        int64_t until = clock_mono_ms() + STOP_GRACE_MS;
        if (writer_left && joined_within(th->writer, STOP_GRACE_MS))
            writer_left = false;
        int64_t left = until - clock_mono_ms();
        if (applier_left && joined_within(th->applier, left > 0 ? left : 0))
            applier_left = false;
        if (writer_left || applier_left) {
            net_log(NET_LOG_INFO, "stopping: the cluster's waits on NATS cut after %d ms",
                    STOP_GRACE_MS);
            cl->interrupt(srv);
        }
    }
    if (writer_left)
        pthread_join(th->writer, NULL);
    if (applier_left)
        pthread_join(th->applier, NULL);
}

static void stop_threads(server *srv, threads *th)
{
    pthread_mutex_lock(&srv->mu);
    srv->stopping = true;
    pthread_cond_broadcast(&srv->writer_cv);
    pthread_cond_broadcast(&srv->waiter_cv);
    pthread_mutex_unlock(&srv->mu);
    join_writers(srv, th);
    completer_stop(srv);
    if (th->completer_started)
        pthread_join(th->completer, NULL);
    if (th->waiter_started)
        pthread_join(th->waiter, NULL);
}

/* What the health checks read beside the store (net_health_facts_fn):
 * the data directory's free space, the writer's progress, the last
 * storage_full answer. */
static void health_facts(void *ctx, net_health_facts *out)
{
    server *srv = ctx;
    struct statvfs vfs;
    out->disk_known = statvfs(srv->opt->data_dir, &vfs) == 0;
    out->disk_free_bytes = out->disk_known ? (uint64_t)vfs.f_bavail * vfs.f_frsize : 0;
    out->writer_stall_ms = writer_stall_ms(srv, NULL);
    out->storage_full_age_ms = net_metrics_storage_full_age_ms(clock_wall_ms());
    out->cluster = srv->cluster != NULL;
    if (!out->cluster)
        return;
    pthread_mutex_lock(&srv->mu);
    uint64_t position = srv->cluster_position, last = srv->cluster_stream_last;
    pthread_mutex_unlock(&srv->mu);
    out->cluster_lag_messages = last > position ? last - position : 0;
    out->cluster_diverged = atomic_load(&srv->cluster_diverged);
    out->cluster_why = srv->cluster_stop_why;
}

/* The running server stays reachable after net_server_run returns (see
 * close_everything), which also keeps leak checkers quiet about it. */
static server *volatile running_server; /* volatile: a write-only static would be optimised away */

/* The engine with the state of the rooms above it, in one allocation. */
typedef struct server_rooms {
    server srv;
    sp_room sp;
    http_room http;
} server_rooms;

/* Cluster mode: the stream before the store (a new store takes the
 * cluster's identity from its genesis). TALLY_ok in single-node mode. */
static int cluster_connect(server *srv, tally_id128 *instance, bool *has_instance)
{
    *has_instance = false;
    if (srv->opt->cluster_urls == NULL)
        return TALLY_ok;
    if (srv->opt->cluster == NULL) {
        net_log(NET_LOG_ERROR, "--cluster: this tallyd was built without cluster mode (configure "
                "found no libnats)");
        return TALLY_invalid_argument;
    }
    return srv->opt->cluster->connect(srv, instance->bytes, has_instance);
}

static int cluster_start(server *srv)
{
    return srv->cluster ? srv->opt->cluster->start(srv) : TALLY_ok;
}

static server *server_new(const net_server_options *opt, int *refusal)
{
    tally_id128 instance;
    bool has_instance;
    server_rooms *rooms = calloc(1, sizeof(*rooms));
    if (rooms == NULL)
        return NULL;
    server *srv = &rooms->srv;
    srv->sp = &rooms->sp;
    srv->http = &rooms->http;
    srv->opt = opt;
    srv->sp->tls = opt->tls;
    pthread_rwlock_init(&srv->store_rw, NULL);
    pthread_mutex_init(&srv->mu, NULL);
    pthread_cond_init(&srv->writer_cv, NULL);
    pthread_cond_init(&srv->waiter_cv, NULL);
    pthread_mutex_init(&srv->sp->pipes_mu, NULL);
    pthread_mutex_init(&srv->completion_mu, NULL);
    pthread_cond_init(&srv->completion_cv, NULL);
    srv->sp->pipes = table_create(sizeof(sp_pipe));
    srv->sp->addresses = table_create(sizeof(uint32_t));
    srv->sp->pub_pipes = table_create(1);
    srv->health = net_health_create(&opt->health, health_facts, srv);
    srv->history = net_history_create();
    if (opt->auth && (srv->auth = auth_guard_create(opt->auth)) == NULL)
        auth_table_free(opt->auth);
    if (srv->sp->pipes == NULL || srv->sp->addresses == NULL || srv->sp->pub_pipes == NULL ||
        srv->health == NULL || srv->history == NULL ||
        (opt->auth && srv->auth == NULL) ||
        (*refusal = cluster_connect(srv, &instance, &has_instance)) != TALLY_ok ||
        (*refusal = open_store(srv, has_instance ? &instance : NULL)) != TALLY_ok ||
        (*refusal = cluster_start(srv)) != TALLY_ok) {
        if (srv->cluster)
            opt->cluster->close(srv);
        if (srv->st)
            store_close(srv->st);
        if (srv->sp->pipes)
            table_destroy(srv->sp->pipes);
        if (srv->sp->pub_pipes)
            table_destroy(srv->sp->pub_pipes);
        if (srv->sp->addresses)
            table_destroy(srv->sp->addresses);
        net_health_destroy(srv->health);
        net_history_destroy(srv->history);
        auth_guard_destroy(srv->auth);
        free(rooms); /* nothing else has seen it yet */
        return NULL;
    }
    return srv;
}

int net_server_run(const net_server_options *opt, volatile sig_atomic_t *stop)
{
    int refusal = TALLY_internal;
    server *srv = server_new(opt, &refusal);
    if (srv == NULL)
        return refusal == TALLY_corrupt_record ? NET_EXIT_STORE_DAMAGED : 1;
    running_server = srv;
    threads th = {0};
    net_liveness_start(clock_wall_ms());
    sub_park_observer_set(net_parks_note); /* logged by the writer after each commit */
    int rv = open_sockets(srv);
    if (rv != 0)
        net_log(NET_LOG_ERROR, "cannot start: %s", nng_strerror(rv));
    else
        rv = start_threads(srv, &th);
    if (rv == 0)
        rv = http_routes_start(srv);
    if (rv != 0) {
        stop_threads(srv, &th);
        close_everything(srv);
        http_routes_stop(srv);
        return 1;
    }
    slots_start(srv); /* only now: every thread that answers a request runs */
    if (sp_loop_start(srv) != 0 || announce_endpoints(srv) != 0) {
        stop_threads(srv, &th);
        close_everything(srv);
        http_routes_stop(srv);
        return 1;
    }
    static const char *const answered_by[] = {
        [NET_REPLIES_WRITER] = "the writer",
        [NET_REPLIES_COMPLETER] = "the completer",
        [NET_REPLIES_AUTO] = "the completer under load, else the writer",
    };
    net_log(NET_LOG_INFO, "serving %s on %s (%u contexts, head seq %llu, replies from %s)%s%s%s%s",
            opt->data_dir, srv->sp->lis.url[0], srv->slot_count, (unsigned long long)srv->head_seq,
            answered_by[opt->replies],
            srv->sp->has_pub ? ", publishing on " : "", srv->sp->has_pub ? srv->sp->pub_url : "",
            srv->http->http ? ", http on " : "", srv->http->http ? srv->http->url : "");
    if (opt->notify)
        opt->notify("READY=1");
    int64_t next_probe_ms = clock_mono_ms() + opt->listener_probe_ms;
    int64_t next_health_ms = clock_mono_ms();
    while (!*stop) {
        usleep(20000);
        if (clock_mono_ms() >= next_health_ms) {
            health_tick(srv);
            next_health_ms = clock_mono_ms() + HEALTH_TICK_MS;
        }
        pipes_close_idle(srv);
        if (opt->reload && *opt->reload) {
            *opt->reload = 0;
            if (opt->notify)
                opt->notify("RELOADING=1");
            if (srv->auth)
                auth_guard_reload(srv->auth, opt->auth_file);
            else
                net_log(NET_LOG_INFO, "SIGHUP: no --auth file to read again");
            tls_reload(srv, srv->http->http && strncmp(srv->http->url, "https://", 8) == 0);
            if (opt->notify)
                opt->notify("READY=1");
        }
        if (clock_mono_ms() >= next_probe_ms) {
            listeners_watch(srv, stop);
            listeners_log_tls_refusals(srv);
            next_probe_ms = clock_mono_ms() + opt->listener_probe_ms;
        }
    }
    net_log(NET_LOG_INFO, "stopping: finishing the group in progress");
    if (opt->notify)
        opt->notify("STOPPING=1");
    if (opt->ready_file) /* the endpoints are going: a file present names a running tallyd */
        unlink(opt->ready_file);
    stop_threads(srv, &th);
    close_everything(srv);
    if (srv->cluster)
        opt->cluster->close(srv);
    http_routes_stop(srv); /* /healthz said 503 from the stop on */
    net_log(NET_LOG_INFO, "stopped cleanly after %llu commits",
            (unsigned long long)atomic_load(&srv->commits));
    return 0;
}
