/*
 * main.c — tally-bench, the load generator of tally: main and the order
 * of a run.
 *
 * It owns one benchmark run against a live tallyd, through libtally only
 * (clients/tally.h):
 *   1. open the bench accounts 1..N idempotently (fixed keys
 *      "bench-open-<id>", so a second run replays them);
 *   2. snapshot the server (stats, every bench account);
 *   3. run --clients worker threads sending transfers between random
 *      accounts, --batch per request, each with a fresh UUIDv7 key and the
 *      transfer id derived from the key (tally_uuid_from_key), so that a
 *      resend with the same key is a true retry; a fraction --dup-ratio of
 *      the operations is sent a second time with the same key, either by
 *      the same thread after the answer (sequential) or by the worker's
 *      "twin" thread at the same moment as the original (concurrent);
 *   4. snapshot again and verify that the server applied exactly the
 *      acknowledged unique keys, once each, and that the balances moved by
 *      exactly the acknowledged amounts.
 *
 * Latency is per request attempt, in a log-linear histogram (HDR-like,
 * 64 sub-buckets per power of two: under 1.6 % error). The bench does its
 * own retries (the client is opened with retries 0) so that every attempt
 * is measured and a lost answer is visible: a fault is retried with the
 * same keys, which is what a real caller does.
 *
 * With --echo (echo.c) the same threads, retries and report measure the
 * transport alone against tally-echo: no accounts, no snapshots, each
 * operation one echo checked byte for byte.
 *
 * With --stream (stream.c) it measures a subscriber instead: one libtally
 * stream reads the log from a seq to the head, verified, with a handler
 * that does nothing.
 *
 * Exit codes: 0 verified, 1 verification failed (or setup failed),
 * 2 usage, 3 server unreachable.
 *
 * The parts: options.c (command line), setup.c (clients, accounts,
 * snapshots), workload.c (the threads), send.c (attempts, retries and
 * what the answers count for), verify.c, report.c, histogram.c, echo.c
 * (--echo), stream.c (--stream); the shared state is bench.h.
 */
#include "config.h"

#include "tools/bench/bench.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

void note_error(bench *b, const char *fmt, ...)
{
    pthread_mutex_lock(&b->error_mu);
    if (b->first_error[0] == '\0') {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(b->first_error, sizeof(b->first_error), fmt, ap);
        va_end(ap);
    }
    pthread_mutex_unlock(&b->error_mu);
}

/* Can tallyd be reached? Returns -1 when yes, else the exit status. */
static int probe_server(bench *b, tally_stats *stats)
{
    tally_client *c;
    int rc = client_open(&b->opt, b->opt.timeout_ms < 3000 ? b->opt.timeout_ms : 3000, &c);
    if (rc != TALLY_ok) {
        fprintf(stderr, "tally-bench: cannot create a client for %s: %s\n",
                effective_url(&b->opt), tally_strerror(rc));
        return rc == TALLY_invalid_argument ? EXIT_USAGE : EXIT_FAILED;
    }
    rc = TALLY_internal;
    for (unsigned attempt = 1; attempt <= 3; attempt++) {
        rc = tally_stats_get(c, stats);
        if (!is_fault(rc))
            break;
        backoff(attempt * 4);
    }
    tally_client_close(c);
    if (rc == TALLY_ok)
        return -1;
    fprintf(stderr, "tally-bench: tallyd at %s does not answer: %s\n", effective_url(&b->opt),
            tally_strerror(rc));
    return rc == TALLY_unreachable || rc == TALLY_timed_out ? EXIT_UNREACHABLE : EXIT_FAILED;
}

static int bench_init(bench *b)
{
    pthread_mutex_init(&b->error_mu, NULL);
    b->expected_debits = calloc(b->opt.accounts, sizeof(*b->expected_debits));
    b->expected_credits = calloc(b->opt.accounts, sizeof(*b->expected_credits));
    return b->expected_debits && b->expected_credits ? TALLY_ok : TALLY_out_of_memory;
}

/* Clients, accounts, and the snapshot before the run. */
static int prepare(bench *b, account_snapshot *s0, tally_stats *stats0)
{
    int rc = make_clients(b);
    if (rc != TALLY_ok) {
        note_error(b, "cannot create clients: %s", tally_strerror(rc));
        return rc;
    }
    for (unsigned i = 0; rc == TALLY_ok && i < b->client_count; i++)
        rc = read_with_retries(b, b->clients[i], read_stats, 0, stats0); /* connect them all */
    if (rc == TALLY_ok)
        rc = open_accounts(b);
    cluster_sync_reads(b); /* the accounts, read on every node */
    if (rc == TALLY_ok)
        rc = snapshot_alloc(s0, b->opt.accounts);
    if (rc == TALLY_ok)
        snapshot_take(b, s0);
    if (rc == TALLY_ok && s0->bad_accounts)
        rc = TALLY_invalid_argument;
    if (rc == TALLY_ok)
        rc = read_with_retries(b, b->clients[0], read_stats, 0, stats0);
    if (rc == TALLY_ok)
        rc = make_threads(b);
    if (rc != TALLY_ok)
        note_error(b, "setup failed: %s", tally_strerror(rc));
    return rc;
}

int main(int argc, char **argv)
{
    static bench b; /* large: histograms */
    int rc = parse_options(argc, argv, &b.opt); /* the defaults are options.c's rows */
    if (rc >= 0)
        return rc;
    if (bench_init(&b) != TALLY_ok) {
        fprintf(stderr, "tally-bench: out of memory\n");
        return EXIT_FAILED;
    }
    if (b.opt.stream)
        return stream_run(&b);
    summary s = {0};
    rc = b.opt.echo ? echo_probe(&b) : probe_server(&b, &s.s0);
    if (rc >= 0)
        return rc;
    account_snapshot s0 = {0};
    if ((b.opt.echo ? echo_prepare(&b) : prepare(&b, &s0, &s.s0)) != TALLY_ok) {
        fprintf(stderr, "tally-bench: %s\n", b.first_error);
        return EXIT_FAILED;
    }
    if (!b.opt.json && b.opt.echo)
        fprintf(stderr, "tally-bench --echo: %u clients, %" PRIu32 "-byte requests, %s %g%s...\n",
                b.opt.clients, b.opt.echo_bytes, b.opt.ops ? "ops" : "seconds",
                b.opt.ops ? (double)b.opt.ops : b.opt.seconds, b.opt.ops ? "" : " s");
    else if (!b.opt.json)
        fprintf(stderr, "tally-bench: %u clients, batch %u, %s %g%s, seed %" PRIu64 "...\n",
                b.opt.clients, b.opt.batch, b.opt.ops ? "ops" : "seconds",
                b.opt.ops ? (double)b.opt.ops : b.opt.seconds, b.opt.ops ? "" : " s", b.opt.seed);
    s.server_cpu_s = process_cpu_s(b.opt.server_pid);
    process_io(b.opt.server_pid, &s.io);
    s.client_cpu_s = self_cpu_s();
    pthread_t killer;
    bool killing = cluster_kill_start(&b, &killer);
    int64_t elapsed = run_threads(&b);
    if (killing)
        pthread_join(killer, NULL);
    summarize(&b, elapsed, &s);
    report r = {0};
    if (b.opt.echo)
        echo_verify(&b, &r);
    else
        verify(&b, &s0, &s, &r);
    if (b.opt.json)
        print_json(&b, &s, &r);
    else
        print_text(&b, &s, &r);
    snapshot_free(&s0);
    for (unsigned i = 0; i < b.client_count; i++)
        tally_client_close(b.clients[i]);
    return r.verified ? EXIT_VERIFIED : EXIT_FAILED;
}
