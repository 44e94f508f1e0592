/*
 * report.c — tally-bench's results: the summary of the run (throughput,
 * latency, the server's memory and CPU from /proc) printed as text or as
 * one JSON object.
 */
#include "config.h"

#include "tools/bench/bench.h"

#include <inttypes.h>
#include <jansson.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

void server_memory(long pid, proc_memory *m)
{
    *m = (proc_memory){-1, -1, -1, -1};
    if (pid <= 0)
        return;
    char path[64], line[256];
    snprintf(path, sizeof(path), "/proc/%ld/status", pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return;
    static const struct { const char *name; size_t off; } fields[] = {
        {"VmHWM:", offsetof(proc_memory, hwm_kb)}, {"VmRSS:", offsetof(proc_memory, rss_kb)},
        {"RssAnon:", offsetof(proc_memory, anon_kb)}, {"RssFile:", offsetof(proc_memory, file_kb)}};
    while (fgets(line, sizeof(line), f))
        for (size_t i = 0; i < sizeof(fields) / sizeof(fields[0]); i++)
            if (strncmp(line, fields[i].name, strlen(fields[i].name)) == 0)
                *(long *)((char *)m + fields[i].off) = strtol(line + strlen(fields[i].name), NULL, 10);
    fclose(f);
}

/* User+system CPU seconds this process has used. */
double self_cpu_s(void)
{
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru) != 0)
        return 0;
    return (double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
           (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
}

/* User+system CPU seconds a process has used, from /proc; -1 when unreadable. */
double process_cpu_s(long pid)
{
    if (pid <= 0)
        return -1;
    char path[64], line[1024];
    snprintf(path, sizeof(path), "/proc/%ld/stat", pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    size_t n = fread(line, 1, sizeof(line) - 1, f);
    fclose(f);
    line[n] = '\0';
    const char *p = strrchr(line, ')'); /* the command name may hold spaces */
    unsigned long long utime, stime;
    if (!p || sscanf(p + 1, " %*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &utime,
                     &stime) != 2)
        return -1;
    long ticks = sysconf(_SC_CLK_TCK);
    return ticks > 0 ? (double)(utime + stime) / (double)ticks : -1;
}

void process_io(long pid, proc_io *io)
{
    *io = (proc_io){-1, -1};
    if (pid <= 0)
        return;
    char path[64], line[128];
    snprintf(path, sizeof(path), "/proc/%ld/io", pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return;
    while (fgets(line, sizeof(line), f)) {
        if (strncmp(line, "write_bytes:", 12) == 0)
            io->write_bytes = strtoll(line + 12, NULL, 10);
        else if (strncmp(line, "syscw:", 6) == 0)
            io->write_calls = strtoll(line + 6, NULL, 10);
    }
    fclose(f);
}

void summarize(bench *b, int64_t elapsed_ns, summary *s)
{
    for (unsigned i = 0; i < b->opt.clients; i++) {
        const thread_stats *ts[2] = {&b->workers[i].st, b->twins ? &b->twins[i].st : NULL};
        for (int k = 0; k < 2 && ts[k]; k++) {
            hist_merge(&s->hist, &ts[k]->hist);
            s->requests += ts[k]->requests;
            s->retries += ts[k]->retries;
            s->dup_sends += ts[k]->dup_sends;
        }
    }
    s->effects = LOAD(effects);
    s->seconds = (double)elapsed_ns / 1e9;
    s->effects_per_sec = s->seconds > 0 ? (double)s->effects / s->seconds : 0;
    s->requests_per_sec = s->seconds > 0 ? (double)s->requests / s->seconds : 0;
    server_memory(b->opt.server_pid, &s->mem);
    s->anon_peak_kb = atomic_load(&b->server_anon_peak_kb);
    if (s->mem.anon_kb > s->anon_peak_kb)
        s->anon_peak_kb = s->mem.anon_kb;
    s->client_cpu_s = self_cpu_s() - s->client_cpu_s;
    double cpu = process_cpu_s(b->opt.server_pid);
    s->server_cpu_s = cpu >= 0 && s->server_cpu_s >= 0 ? cpu - s->server_cpu_s : -1;
    proc_io io;
    process_io(b->opt.server_pid, &io);
    s->io.write_bytes = io.write_bytes >= 0 && s->io.write_bytes >= 0
                            ? io.write_bytes - s->io.write_bytes : -1;
    s->io.write_calls = io.write_calls >= 0 && s->io.write_calls >= 0
                            ? io.write_calls - s->io.write_calls : -1;
}

/* A per-effect figure of the server's writes; -1 when unknown. */
static double per_effect(const summary *s, long long total)
{
    return total >= 0 && s->effects ? (double)total / (double)s->effects : -1;
}

const char *effective_url(const bench_options *o)
{
    if (o->url)
        return o->url;
    const char *env = getenv("TALLY_URL");
    return env && *env ? env : "tcp://127.0.0.1:7450";
}

/* Whether libtally merges single writes: --no-autobatch, else as
 * $TALLY_AUTOBATCH says (tally.h). */
static bool autobatch_on(const bench_options *o)
{
    const char *env = getenv("TALLY_AUTOBATCH");
    return !o->no_autobatch && !(env && (strcmp(env, "off") == 0 || strcmp(env, "0") == 0));
}

static const char *mode_name(client_mode m)
{
    return m == CLIENT_SHARED ? "shared" : "per-thread";
}

/* --kill-pid: the fail-over of the clients the kill failed. */
static void print_failover_text(const bench *b)
{
    uint64_t sends = atomic_load(&b->failover_sends);
    if (sends == 0) {
        printf("  fail-over   kill -9 of pid %ld at %.2f s: no send failed%s\n", b->opt.kill_pid,
               b->opt.kill_after_s, atomic_load(&b->kill_ns) ? "" : " (the run ended before it)");
        return;
    }
    printf("  fail-over   kill -9 of pid %ld at %.2f s: %" PRIu64 " sends failed on it, each "
           "acknowledged by another node %.1f ms (first) to %.1f ms (last) after the kill\n",
           b->opt.kill_pid, b->opt.kill_after_s, sends,
           (double)atomic_load(&b->failover_min_ns) / 1e6,
           (double)atomic_load(&b->failover_max_ns) / 1e6);
}

void print_text(const bench *b, const summary *s, const report *r)
{
    const bench_options *o = &b->opt;
    const char *unit = o->echo ? "echoes" : "effects";
    if (o->echo)
        printf("tally-bench --echo: %s, %u clients (%s client), %" PRIu32 "-byte requests\n",
               effective_url(o), o->clients, mode_name(o->mode), o->echo_bytes);
    else
        printf("tally-bench: %s, consumer %s, %u clients (%s client, auto-batching %s), batch "
               "%u, %" PRIu64 " accounts, dup-ratio %.3g, %s keys, %s, seed %" PRIu64 "\n",
               effective_url(o), o->consumer, o->clients, mode_name(o->mode),
               autobatch_on(o) ? "on" : "off", o->batch, o->accounts, o->dup_ratio,
               o->random_keys ? "random" : "time-ordered",
               o->user_data ? "user data" : "no user data", o->seed);
    printf("  ran %.2f s: %" PRIu64 " %s, %" PRIu64 " requests, %" PRIu64
           " duplicate sends, %" PRIu64 " retries\n",
           s->seconds, s->effects, unit, s->requests, s->dup_sends, s->retries);
    printf("  %-11s %.0f\n  requests/s  %.0f\n", o->echo ? "echoes/s" : "effects/s",
           s->effects_per_sec, s->requests_per_sec);
    printf("  bench CPU   %.2f s (load generator, same machine)\n", s->client_cpu_s);
    printf("  latency ms  p50 %.3f  p99 %.3f  p999 %.3f  max %.3f  mean %.3f  (per request)\n",
           hist_quantile_ms(&s->hist, 0.50), hist_quantile_ms(&s->hist, 0.99),
           hist_quantile_ms(&s->hist, 0.999), (double)s->hist.max_ns / 1e6,
           s->hist.total ? (double)s->hist.sum_ns / (double)s->hist.total / 1e6 : 0.0);
    if (o->kill_pid > 0)
        print_failover_text(b);
    const char *server = o->echo ? "tally-echo" : "tallyd";
    if (o->server_pid > 0 && s->mem.hwm_kb >= 0)
        printf("  %s pid %ld: peak RSS (VmHWM) %.1f MiB, RSS now %.1f MiB (own memory "
               "%.1f MiB, peak %.1f; map pages %.1f MiB), CPU %.2f s (%.0f us per %s)\n",
               server, o->server_pid, (double)s->mem.hwm_kb / 1024, (double)s->mem.rss_kb / 1024,
               (double)s->mem.anon_kb / 1024, (double)s->anon_peak_kb / 1024,
               (double)s->mem.file_kb / 1024, s->server_cpu_s,
               s->effects ? s->server_cpu_s * 1e6 / (double)s->effects : 0.0,
               o->echo ? "echo" : "effect");
    else if (o->server_pid > 0)
        printf("  %s pid %ld: /proc/%ld/status not readable\n", server, o->server_pid,
               o->server_pid);
    if (o->server_pid > 0 && s->io.write_bytes >= 0)
        printf("  %s writes: %.1f KB and %.2f write calls per %s (/proc/%ld/io write_bytes "
               "%lld, syscw %lld)\n",
               server, per_effect(s, s->io.write_bytes) / 1000, per_effect(s, s->io.write_calls),
               o->echo ? "echo" : "effect", o->server_pid, s->io.write_bytes, s->io.write_calls);
    printf("verification:\n");
    for (unsigned i = 0; i < r->count; i++)
        printf("  %-4s %-18s %s\n", r->checks[i].ok ? "ok" : (r->checks[i].counts ? "FAIL" : "note"),
               r->checks[i].name, r->checks[i].detail);
    if (b->first_error[0])
        printf("  first error: %s\n", b->first_error);
    printf("verified: %s\n", r->verified ? "true" : "false");
}

/* The store's growth: null with --echo (no store). */
static json_t *json_added(bool echo, uint64_t before, uint64_t after)
{
    return echo ? json_null() : json_integer((json_int_t)(after - before));
}

static json_t *json_server(const summary *s, bool echo)
{
    json_t *o = json_object();
    json_object_set_new(o, "peak_rss_kb", s->mem.hwm_kb >= 0 ? json_integer(s->mem.hwm_kb) : json_null());
    json_object_set_new(o, "rss_kb", s->mem.rss_kb >= 0 ? json_integer(s->mem.rss_kb) : json_null());
    json_object_set_new(o, "rss_anon_kb", s->mem.anon_kb >= 0 ? json_integer(s->mem.anon_kb) : json_null());
    json_object_set_new(o, "peak_rss_anon_kb", s->anon_peak_kb >= 0 ? json_integer(s->anon_peak_kb) : json_null());
    json_object_set_new(o, "rss_file_kb", s->mem.file_kb >= 0 ? json_integer(s->mem.file_kb) : json_null());
    json_object_set_new(o, "cpu_s", s->server_cpu_s >= 0 ? json_real(s->server_cpu_s) : json_null());
    json_object_set_new(o, "write_bytes",
                        s->io.write_bytes >= 0 ? json_integer(s->io.write_bytes) : json_null());
    json_object_set_new(o, "write_calls",
                        s->io.write_calls >= 0 ? json_integer(s->io.write_calls) : json_null());
    double wb = per_effect(s, s->io.write_bytes), wc = per_effect(s, s->io.write_calls);
    json_object_set_new(o, "write_bytes_per_effect", wb >= 0 ? json_real(wb) : json_null());
    json_object_set_new(o, "write_calls_per_effect", wc >= 0 ? json_real(wc) : json_null());
    json_object_set_new(o, "transfers_added", json_added(echo, s->s0.transfers, s->s1.transfers));
    json_object_set_new(o, "head_seq_added", json_added(echo, s->s0.head_seq, s->s1.head_seq));
    json_object_set_new(o, "inbox_added", json_added(echo, s->s0.inbox, s->s1.inbox));
    json_object_set_new(o, "events_added", json_added(echo, s->s0.events, s->s1.events));
    json_object_set_new(o, "map_used_bytes", json_added(echo, 0, s->s1.map_used_bytes));
    return o;
}

static json_t *json_failover(const bench *b)
{
    if (b->opt.kill_pid <= 0)
        return json_null();
    uint64_t sends = atomic_load(&b->failover_sends);
    json_t *o = json_object();
    json_object_set_new(o, "kill_pid", json_integer(b->opt.kill_pid));
    json_object_set_new(o, "kill_after_s", json_real(b->opt.kill_after_s));
    json_object_set_new(o, "killed", json_boolean(atomic_load(&b->kill_ns) != 0));
    json_object_set_new(o, "sends", json_integer((json_int_t)sends));
    json_object_set_new(o, "first_ms", sends ? json_real((double)atomic_load(&b->failover_min_ns) / 1e6)
                                             : json_null());
    json_object_set_new(o, "last_ms", sends ? json_real((double)atomic_load(&b->failover_max_ns) / 1e6)
                                            : json_null());
    return o;
}

void print_json(const bench *b, const summary *s, const report *r)
{
    const bench_options *o = &b->opt;
    json_t *j = json_object();
    json_object_set_new(j, "effects_per_sec", json_real(s->effects_per_sec));
    json_object_set_new(j, "requests_per_sec", json_real(s->requests_per_sec));
    json_object_set_new(j, "p50_ms", json_real(hist_quantile_ms(&s->hist, 0.50)));
    json_object_set_new(j, "p99_ms", json_real(hist_quantile_ms(&s->hist, 0.99)));
    json_object_set_new(j, "p999_ms", json_real(hist_quantile_ms(&s->hist, 0.999)));
    json_object_set_new(j, "max_ms", json_real((double)s->hist.max_ns / 1e6));
    json_object_set_new(j, "verified", json_boolean(r->verified));
    json_object_set_new(j, "clients", json_integer(o->clients));
    json_object_set_new(j, "batch", json_integer(o->batch));
    json_object_set_new(j, "ops", json_integer((json_int_t)s->effects));
    json_object_set_new(j, "duplicates", json_integer((json_int_t)s->dup_sends));
    json_object_set_new(j, "seconds", json_real(s->seconds));
    json_object_set_new(j, "requests", json_integer((json_int_t)s->requests));
    json_object_set_new(j, "retries", json_integer((json_int_t)s->retries));
    json_object_set_new(j, "cluster_nodes", json_integer(cluster_node_count(o)));
    json_object_set_new(j, "failover", json_failover(b));
    json_object_set_new(j, "accounts", json_integer((json_int_t)o->accounts));
    json_object_set_new(j, "dup_ratio", json_real(o->dup_ratio));
    json_object_set_new(j, "seed", json_integer((json_int_t)o->seed));
    json_object_set_new(j, "url", json_string(effective_url(o)));
    json_object_set_new(j, "consumer", json_string(o->consumer));
    json_object_set_new(j, "client_mode", json_string(mode_name(o->mode)));
    json_object_set_new(j, "autobatch", json_boolean(autobatch_on(o)));
    json_object_set_new(j, "keys", json_string(o->random_keys ? "random" : "time"));
    json_object_set_new(j, "user_data", json_boolean(o->user_data));
    json_object_set_new(j, "mean_ms", json_real(s->hist.total ? (double)s->hist.sum_ns / (double)s->hist.total / 1e6 : 0.0));
    json_object_set_new(j, "duplicate_keys", json_integer((json_int_t)LOAD(dup_keys)));
    json_object_set_new(j, "duplicate_requests_concurrent", json_integer((json_int_t)LOAD(jobs_concurrent)));
    json_object_set_new(j, "duplicate_requests_overlapping", json_integer((json_int_t)LOAD(jobs_overlapped)));
    json_object_set_new(j, "duplicate_requests_sequential", json_integer((json_int_t)LOAD(jobs_sequential)));
    json_object_set_new(j, "client_cpu_s", json_real(s->client_cpu_s));
    json_object_set_new(j, "server", json_server(s, o->echo));
    json_object_set_new(j, "echo", json_boolean(o->echo));
    json_object_set_new(j, "echo_bytes", o->echo ? json_integer(o->echo_bytes) : json_null());
    json_t *checks = json_object();
    for (unsigned i = 0; i < r->count; i++) {
        json_t *c = json_object();
        json_object_set_new(c, "ok", json_boolean(r->checks[i].ok));
        json_object_set_new(c, "counts", json_boolean(r->checks[i].counts));
        json_object_set_new(c, "detail", json_string(r->checks[i].detail));
        json_object_set_new(checks, r->checks[i].name, c);
    }
    json_object_set_new(j, "checks", checks);
    json_object_set_new(j, "first_error", b->first_error[0] ? json_string(b->first_error) : json_null());
    char *text = json_dumps(j, JSON_COMPACT | JSON_REAL_PRECISION(9));
    if (text)
        printf("%s\n", text);
    free(text);
    json_decref(j);
}
