/*
 * setup.c — tally-bench's setup: clients, reads with the bench's retries,
 * the bench accounts (opened idempotently) and the snapshots of their
 * balances before and after the run.
 */
#include "config.h"

#include "tools/bench/bench.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int client_open(const bench_options *o, uint32_t timeout_ms, tally_client **out)
{
    tally_client_options co = {.url = o->url, .consumer = o->consumer,
                               .timeout_ms = timeout_ms, .retries = 0, .retries_set = true,
                               .no_autobatch = o->no_autobatch, .token_file = o->token_file,
                               .tls_ca = o->tls_ca, .tls_cert = o->tls_cert, .tls_key = o->tls_key};

    char why[512];
    if (tally_tls_check(&co, NULL, why, sizeof(why)) != TALLY_ok) {
        fprintf(stderr, "tally-bench: %s\n", why);
        return TALLY_invalid_argument;
    }
    return tally_client_open(&co, out);
}

static int read_account(tally_client *c, uint64_t id, void *out)
{
    return tally_account_get(c, id, out);
}

int read_stats(tally_client *c, uint64_t id, void *out)
{
    (void)id;
    return tally_stats_get(c, out);
}

int read_with_retries(const bench *b, tally_client *c, read_fn fn, uint64_t id, void *out)
{
    int rc = TALLY_internal;
    for (unsigned attempt = 1; attempt <= b->opt.attempts_max; attempt++) {
        if (attempt > 1)
            backoff(attempt - 1);
        rc = fn(c, id, out);
        if (!is_fault(rc))
            return rc;
    }
    return rc;
}

/* Open accounts first..first+n-1 in one batch; TALLY_ok when each is ok
 * (opened now or replayed) or `exists` (opened before under another key). */
static int open_account_batch(bench *b, uint64_t first, size_t n, tally_result *results)
{
    int rc = TALLY_internal;
    for (unsigned attempt = 1; attempt <= b->opt.attempts_max; attempt++) {
        if (attempt > 1)
            backoff(attempt - 1);
        tally_batch *batch = tally_batch_new(false);
        rc = batch ? TALLY_ok : TALLY_out_of_memory;
        for (size_t i = 0; rc == TALLY_ok && i < n; i++) {
            char key[48];
            snprintf(key, sizeof(key), "bench-open-%" PRIu64, first + i);
            tally_account_open_args a = {.id = first + i, .ledger = BENCH_LEDGER,
                                         .code = BENCH_ACCOUNT_CODE, .flags = 0};
            rc = tally_batch_account_open(batch, key, &a);
        }
        if (rc == TALLY_ok)
            rc = tally_batch_send(b->clients[0], batch, NULL, results, n);
        tally_batch_free(batch);
        for (size_t i = 0; rc == TALLY_ok && i < n; i++)
            if (results[i].code != TALLY_ok && results[i].code != TALLY_exists)
                rc = results[i].code;
        if (!is_fault(rc))
            break;
    }
    if (rc != TALLY_ok)
        note_error(b, "opening accounts %" PRIu64 "..%" PRIu64 ": %s", first,
                   first + n - 1, tally_strerror(rc));
    return rc;
}

int open_accounts(bench *b)
{
    tally_result *results = calloc(TALLY_CLIENT_BATCH_MAX, sizeof(*results));
    if (!results)
        return TALLY_out_of_memory;
    int rc = TALLY_ok;
    for (uint64_t first = 1; rc == TALLY_ok && first <= b->opt.accounts;
         first += TALLY_CLIENT_BATCH_MAX) {
        uint64_t left = b->opt.accounts - first + 1;
        rc = open_account_batch(b, first, left < TALLY_CLIENT_BATCH_MAX ? (size_t)left
                                                                      : TALLY_CLIENT_BATCH_MAX,
                                results);
    }
    free(results);
    return rc;
}

int snapshot_alloc(account_snapshot *s, uint64_t n)
{
    memset(s, 0, sizeof(*s));
    s->debits_posted = calloc(n, sizeof(int64_t));
    s->credits_posted = calloc(n, sizeof(int64_t));
    s->debits_pending = calloc(n, sizeof(int64_t));
    s->credits_pending = calloc(n, sizeof(int64_t));
    return s->debits_posted && s->credits_posted && s->debits_pending && s->credits_pending
               ? TALLY_ok
               : TALLY_out_of_memory;
}

void snapshot_free(account_snapshot *s)
{
    free(s->debits_posted);
    free(s->credits_posted);
    free(s->debits_pending);
    free(s->credits_pending);
}

typedef struct snapshot_part {
    bench *b;
    account_snapshot *s;
    unsigned part, parts;
    uint64_t bad;
    pthread_t thread;
} snapshot_part;

static void *snapshot_main(void *arg)
{
    snapshot_part *p = arg;
    bench *b = p->b;
    tally_client *c = b->clients[p->part % b->client_count];
    for (uint64_t id = 1 + p->part; id <= b->opt.accounts; id += p->parts) {
        tally_account a;
        int rc = read_with_retries(b, c, read_account, id, &a);
        if (rc != TALLY_ok || a.ledger != BENCH_LEDGER || a.flags != 0) {
            if (p->bad++ == 0)
                note_error(b, "account %" PRIu64 ": %s", id,
                           rc != TALLY_ok ? tally_strerror(rc)
                                          : "has another ledger or limit flags (bench accounts must "
                                            "have ledger 1 and no flags)");
            continue;
        }
        p->s->debits_posted[id - 1] = a.debits_posted;
        p->s->credits_posted[id - 1] = a.credits_posted;
        p->s->debits_pending[id - 1] = a.debits_pending;
        p->s->credits_pending[id - 1] = a.credits_pending;
    }
    return NULL;
}

/* Read every bench account, in parallel. */
void snapshot_take(bench *b, account_snapshot *s)
{
    unsigned parts = b->opt.clients < BENCH_READ_THREADS_MAX ? b->opt.clients : BENCH_READ_THREADS_MAX;
    snapshot_part p[BENCH_READ_THREADS_MAX];
    s->bad_accounts = 0;
    for (unsigned i = 0; i < parts; i++) {
        p[i] = (snapshot_part){.b = b, .s = s, .part = i, .parts = parts};
        if (pthread_create(&p[i].thread, NULL, snapshot_main, &p[i]) != 0) {
            p[i].thread = 0;
            snapshot_main(&p[i]);
        }
    }
    for (unsigned i = 0; i < parts; i++) {
        if (p[i].thread)
            pthread_join(p[i].thread, NULL);
        s->bad_accounts += p[i].bad;
    }
}

/* ---- clients ---- */

int make_clients(bench *b)
{
    bool twins = b->opt.dup_ratio > 0 && b->opt.concurrent_share > 0;
    unsigned want = b->opt.mode == CLIENT_SHARED ? 1 : b->opt.clients * (twins ? 2u : 1u);
    b->clients = calloc(want, sizeof(*b->clients));
    if (!b->clients)
        return TALLY_out_of_memory;
    unsigned nodes = cluster_node_count(&b->opt);
    if (b->opt.mode == CLIENT_SHARED && nodes)
        want = nodes; /* one shared client per node */
    for (unsigned i = 0; i < want; i++) {
        bench_options o = b->opt;
        char list[TALLY_CLIENT_URLS_MAX * 256];
        if (nodes && cluster_client_url(&b->opt, i, list, sizeof(list)) != TALLY_ok)
            return TALLY_invalid_argument;
        if (nodes)
            o.url = list;
        int rc = client_open(&o, b->opt.timeout_ms, &b->clients[i]);
        if (rc != TALLY_ok)
            return rc;
        b->client_count++;
    }
    return TALLY_ok;
}
