/*
 * cluster.c — tally-bench --cluster (docs/CLUSTER.md, docs/BENCHMARKS.md,
 * "Cluster mode"): the clients spread over the nodes (client i starts at
 * node i of the list and moves on along it when its node fails, libtally's
 * failover), reads that wait until the node read has applied every write
 * the bench saw acknowledged (min_seq), and --kill-pid: a kill -9 of one
 * node mid-run and the fail-over time it costs the clients that were on
 * it, from the kill to the first of their writes another node
 * acknowledged.
 */
#include "config.h"

#include "tools/bench/bench.h"

#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

unsigned cluster_node_count(const bench_options *o)
{
    if (o->cluster_urls == NULL)
        return 0;
    unsigned n = 1;
    for (const char *p = o->cluster_urls; *p; p++)
        n += *p == ',';
    return n;
}

int cluster_client_url(const bench_options *o, unsigned i, char *out, size_t size)
{
    unsigned n = cluster_node_count(o), first = i % n;
    const char *urls[TALLY_CLIENT_URLS_MAX];
    size_t lens[TALLY_CLIENT_URLS_MAX];
    const char *at = o->cluster_urls;
    for (unsigned k = 0; k < n; k++) {
        const char *comma = strchr(at, ',');
        urls[k] = at;
        lens[k] = comma ? (size_t)(comma - at) : strlen(at);
        at = comma ? comma + 1 : at + lens[k];
    }
    size_t used = 0;
    for (unsigned k = 0; k < n; k++) {
        unsigned j = (first + k) % n;
        int w = snprintf(out + used, size - used, "%s%.*s", k ? "," : "", (int)lens[j], urls[j]);
        if (w < 0 || (size_t)w >= size - used)
            return TALLY_invalid_argument;
        used += (size_t)w;
    }
    return TALLY_ok;
}

void cluster_sync_reads(bench *b)
{
    if (b->opt.cluster_urls == NULL)
        return;
    uint64_t seen = 0;
    for (unsigned i = 0; i < b->client_count; i++) {
        uint64_t seq = tally_client_cluster_seq(b->clients[i]);
        seen = seq > seen ? seq : seen;
    }
    for (unsigned i = 0; i < b->client_count; i++)
        tally_client_set_min_seq(b->clients[i], seen);
}

static void *kill_main(void *arg)
{
    bench *b = arg;
    struct timespec ts = {(time_t)b->opt.kill_after_s,
                          (long)((b->opt.kill_after_s - (double)(time_t)b->opt.kill_after_s) * 1e9)};
    while (nanosleep(&ts, &ts) != 0)
        ;
    atomic_store(&b->kill_ns, clock_mono_ns());
    if (kill((pid_t)b->opt.kill_pid, SIGKILL) != 0)
        note_error(b, "kill -9 of pid %ld failed", b->opt.kill_pid);
    return NULL;
}

bool cluster_kill_start(bench *b, pthread_t *thread)
{
    atomic_store(&b->failover_min_ns, INT64_MAX);
    return b->opt.kill_pid > 0 && pthread_create(thread, NULL, kill_main, b) == 0;
}

void cluster_failover_note(bench *b, int64_t ns)
{
    atomic_fetch_add(&b->failover_sends, 1);
    int64_t v = atomic_load(&b->failover_min_ns);
    while (ns < v && !atomic_compare_exchange_weak(&b->failover_min_ns, &v, ns))
        ;
    v = atomic_load(&b->failover_max_ns);
    while (ns > v && !atomic_compare_exchange_weak(&b->failover_max_ns, &v, ns))
        ;
}
