/*
 * tally_bench.c — tally-bench, the load generator of tally.
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
 * Exit codes: 0 verified, 1 verification failed (or setup failed),
 * 2 usage, 3 server unreachable.
 */
#include "config.h"

#include "clients/tally.h"

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <jansson.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/resource.h>
#include <unistd.h>

#define EXIT_VERIFIED 0
#define EXIT_FAILED 1
#define EXIT_USAGE 2
#define EXIT_UNREACHABLE 3

#define BENCH_CLIENTS_MAX 1024
#define BENCH_ACCOUNTS_MAX 1000000
#define BENCH_SECONDS_MAX 86400.0
#define BENCH_OPS_MAX UINT64_C(1000000000000)
#define BENCH_AMOUNT_MAX_LIMIT 1000000
#define BENCH_ATTEMPTS_MAX_LIMIT 1000
#define BENCH_TIMEOUT_MS_MAX 600000
#define BENCH_SAMPLES_PER_WORKER 16   /* transfers read back per worker */
#define BENCH_READ_THREADS_MAX 16     /* threads snapshotting accounts */
#define BENCH_BACKOFF_MS_FIRST 5
#define BENCH_BACKOFF_MS_MAX 500
#define BENCH_KEY_BYTES 37            /* UUID text + NUL */
#define BENCH_LEDGER 1
#define BENCH_ACCOUNT_CODE 1
#define BENCH_TRANSFER_CODE 1
#define NO_TRACK UINT32_MAX

_Static_assert(BENCH_KEY_BYTES - 1 <= TALLY_CLIENT_KEY_BYTES_MAX, "keys fit the protocol");

/* ---- options ---- */

typedef enum client_mode { CLIENT_SHARED, CLIENT_PER_THREAD } client_mode;

typedef struct bench_options {
    const char *url;      /* NULL: libtally's default ($TALLY_URL, tcp://127.0.0.1:7450) */
    const char *consumer;
    unsigned clients;
    double seconds;       /* run length when ops == 0 */
    uint64_t ops;         /* unique operations to send; 0 = run for seconds */
    unsigned batch;
    uint64_t accounts;
    double dup_ratio;
    double concurrent_share;
    uint64_t seed;
    bool json;
    long server_pid;      /* 0 = not given */
    client_mode mode;
    uint32_t timeout_ms;
    unsigned attempts_max;
    int64_t amount_max;
    bool random_keys;     /* --keys random: keys and ids in no order (UUIDv4-like) */
} bench_options;

/* ---- latency histogram (log-linear, values in ns) ---- */

#define HIST_LINEAR 128
#define HIST_SUB 64
#define HIST_BUCKETS (HIST_LINEAR + 57 * HIST_SUB)

typedef struct histogram {
    uint64_t counts[HIST_BUCKETS];
    uint64_t total, max_ns, sum_ns;
} histogram;

static unsigned hist_index(uint64_t v)
{
    if (v < HIST_LINEAR)
        return (unsigned)v;
    unsigned msb = 63u - (unsigned)__builtin_clzll(v);
    unsigned shift = msb - 6; /* v >> shift is in [64, 128) */
    return HIST_LINEAR + (shift - 1) * HIST_SUB + (unsigned)((v >> shift) - HIST_SUB);
}

/* Middle of bucket i. */
static uint64_t hist_value(unsigned i)
{
    if (i < HIST_LINEAR)
        return i;
    unsigned shift = (i - HIST_LINEAR) / HIST_SUB + 1;
    uint64_t m = (i - HIST_LINEAR) % HIST_SUB + HIST_SUB;
    return (m << shift) + ((UINT64_C(1) << shift) >> 1);
}

static void hist_record(histogram *h, uint64_t ns)
{
    h->counts[hist_index(ns)]++;
    h->total++;
    h->sum_ns += ns;
    if (ns > h->max_ns)
        h->max_ns = ns;
}

static void hist_merge(histogram *into, const histogram *from)
{
    for (unsigned i = 0; i < HIST_BUCKETS; i++)
        into->counts[i] += from->counts[i];
    into->total += from->total;
    into->sum_ns += from->sum_ns;
    if (from->max_ns > into->max_ns)
        into->max_ns = from->max_ns;
}

/* The q-quantile (0 < q <= 1) in ms; 0 when empty. */
static double hist_quantile_ms(const histogram *h, double q)
{
    if (h->total == 0)
        return 0;
    double exact = q * (double)h->total;
    uint64_t rank = (uint64_t)exact, seen = 0; /* ceil without libm */
    if ((double)rank < exact)
        rank++;
    if (rank < 1)
        rank = 1;
    for (unsigned i = 0; i < HIST_BUCKETS; i++) {
        seen += h->counts[i];
        if (seen >= rank) {
            uint64_t v = hist_value(i);
            return (double)(v < h->max_ns ? v : h->max_ns) / 1e6;
        }
    }
    return (double)h->max_ns / 1e6;
}

/* ---- run state ---- */

typedef struct bench_op {
    char key[BENCH_KEY_BYTES];
    tally_transfer_args args;
    uint32_t track;       /* index into the dup job's tracks, or NO_TRACK */
    bool faulted;         /* an attempt of this send got a fault */
} bench_op;

/* What the sends of one resent key saw. */
typedef struct op_track {
    atomic_uint applied, replayed, failed, faulted;
    atomic_int failed_code;
} op_track;

/* Operations sent twice with the same keys: by the originator and by its
 * twin (concurrent) or by the originator again after the answer. */
typedef struct dup_job {
    atomic_int refs;
    bool concurrent;
    size_t count;
    bench_op *ops;
    op_track *tracks;
    int64_t orig_start_ns, orig_end_ns, dup_start_ns, dup_end_ns;
} dup_job;

typedef struct thread_stats {
    histogram hist;
    uint64_t requests, retries, dup_sends;
    int64_t end_ns;
} thread_stats;

typedef struct bench bench;

typedef struct twin {
    bench *b;
    tally_client *client;
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    dup_job *job;   /* mailbox: the job to send now */
    bool busy, closing;
    thread_stats st;
    tally_result *results;
} twin;

typedef struct worker {
    bench *b;
    unsigned index;
    tally_client *client;
    pthread_t thread;
    uint64_t rng;
    bench_op *ops;
    tally_result *results;
    twin *twin;
    thread_stats st;
    uint64_t seen;
    bench_op samples[BENCH_SAMPLES_PER_WORKER];
    unsigned sample_count;
} worker;

typedef struct account_snapshot {
    int64_t *debits_posted, *credits_posted, *debits_pending, *credits_pending;
    uint64_t bad_accounts; /* wrong ledger, limit flags, or unreadable */
} account_snapshot;

typedef struct bench_counters {
    atomic_uint_fast64_t effects, amount_total, applied_results, replayed_results,
        events_caused, rejections, unresolved, unexpected_replays, lost_answers, dup_keys,
        dup_exactly_once, dup_lost_answer, dup_double_applied, dup_anomalies,
        dup_replayed_results, jobs_concurrent, jobs_sequential, jobs_overlapped;
} bench_counters;

struct bench {
    bench_options opt;
    tally_client **clients; /* 1 (shared) or one per worker and twin */
    unsigned client_count;
    worker *workers;
    twin *twins;            /* NULL when no concurrent duplicates */
    pthread_barrier_t start;
    int64_t start_ns, deadline_ns;
    atomic_uint_fast64_t ops_claimed;
    atomic_bool abort;
    _Atomic int64_t *expected_debits, *expected_credits; /* per account, index id-1 */
    bench_counters n;
    pthread_mutex_t error_mu;
    char first_error[256];
    atomic_long server_anon_peak_kb; /* sampled while the workers run; -1 unknown */
    atomic_bool sampler_stop;
};

static int64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static uint64_t splitmix64(uint64_t *state)
{
    uint64_t z = (*state += UINT64_C(0x9e3779b97f4a7c15));
    z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
    z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
    return z ^ (z >> 31);
}

static double rand_unit(uint64_t *state)
{
    return (double)(splitmix64(state) >> 11) / 9007199254740992.0;
}

static void note_error(bench *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void note_error(bench *b, const char *fmt, ...)
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

static bool is_fault(int code)
{
    return code != TALLY_ok && tally_error_class_of(code) == TALLY_CLASS_FAULT &&
           code != TALLY_invalid_argument && code != TALLY_not_found;
}

static void backoff(unsigned attempt)
{
    unsigned ms = BENCH_BACKOFF_MS_FIRST;
    while (attempt-- > 1 && ms < BENCH_BACKOFF_MS_MAX)
        ms *= 2;
    usleep((ms < BENCH_BACKOFF_MS_MAX ? ms : BENCH_BACKOFF_MS_MAX) * 1000u);
}

/* ---- recording results ---- */

static void effect_add(bench *b, const tally_transfer_args *t)
{
    atomic_fetch_add(&b->n.effects, 1);
    atomic_fetch_add(&b->n.amount_total, (uint64_t)t->amount);
    atomic_fetch_add(&b->expected_debits[t->debit_account_id - 1], t->amount);
    atomic_fetch_add(&b->expected_credits[t->credit_account_id - 1], t->amount);
}

/* The final outcome of one send of op (code after retries). */
static void record_result(bench *b, dup_job *job, const bench_op *op, int code,
                          const tally_result *r)
{
    bool ok = code == TALLY_ok;
    if (ok && !r->replayed) {
        atomic_fetch_add(&b->n.applied_results, 1);
        atomic_fetch_add(&b->n.events_caused, r->events);
    } else if (ok) {
        atomic_fetch_add(&b->n.replayed_results, 1);
    }
    if (job && op->track != NO_TRACK) {
        op_track *t = &job->tracks[op->track];
        if (op->faulted)
            atomic_fetch_add(&t->faulted, 1);
        if (!ok) {
            atomic_store(&t->failed_code, code);
            atomic_fetch_add(&t->failed, 1);
        } else {
            atomic_fetch_add(r->replayed ? &t->replayed : &t->applied, 1);
        }
        return;
    }
    if (ok) {
        if (r->replayed)
            atomic_fetch_add(op->faulted ? &b->n.lost_answers /* applied by a lost attempt */
                                         : &b->n.unexpected_replays /* a fresh key known? */,
                             1);
        effect_add(b, &op->args);
    } else if (is_fault(code)) {
        atomic_fetch_add(&b->n.unresolved, 1);
        atomic_store(&b->abort, true);
        note_error(b, "key %s: no answer after %u attempts: %s", op->key, b->opt.attempts_max,
                   tally_strerror(code));
    } else {
        atomic_fetch_add(&b->n.rejections, 1);
        note_error(b, "key %s: transfer %" PRIu64 " -> %" PRIu64 " rejected: %s", op->key,
                   op->args.debit_account_id, op->args.credit_account_id, tally_strerror(code));
    }
}

/* Judge one resent key once all its sends are answered. */
static void track_judge(bench *b, const bench_op *op, op_track *t)
{
    unsigned applied = atomic_load(&t->applied), replayed = atomic_load(&t->replayed);
    unsigned failed = atomic_load(&t->failed), faulted = atomic_load(&t->faulted);
    atomic_fetch_add(&b->n.dup_keys, 1);
    atomic_fetch_add(&b->n.dup_replayed_results, replayed);
    if (applied + replayed > 0)
        effect_add(b, &op->args);
    if (failed > 0) {
        int code = atomic_load(&t->failed_code);
        atomic_fetch_add(is_fault(code) ? &b->n.unresolved : &b->n.rejections, 1);
        note_error(b, "resent key %s: %s", op->key, tally_strerror(code));
    }
    if (applied > 1) {
        atomic_fetch_add(&b->n.dup_double_applied, 1);
        note_error(b, "resent key %s was applied %u times", op->key, applied);
    } else if (applied == 1 && replayed == 1) {
        atomic_fetch_add(&b->n.dup_exactly_once, 1);
    } else if (applied == 0 && replayed >= 1 && faulted > 0) {
        atomic_fetch_add(&b->n.dup_lost_answer, 1); /* applied by an attempt whose answer was lost */
    } else if (failed == 0) {
        atomic_fetch_add(&b->n.dup_anomalies, 1);
        note_error(b, "resent key %s: %u applied, %u replayed", op->key, applied, replayed);
    }
}

static void job_release(bench *b, dup_job *job)
{
    if (atomic_fetch_sub(&job->refs, 1) != 1)
        return;
    for (size_t k = 0; k < job->count; k++)
        track_judge(b, &job->ops[k], &job->tracks[k]);
    if (job->concurrent) {
        atomic_fetch_add(&b->n.jobs_concurrent, 1);
        int64_t start = job->orig_start_ns > job->dup_start_ns ? job->orig_start_ns : job->dup_start_ns;
        int64_t end = job->orig_end_ns < job->dup_end_ns ? job->orig_end_ns : job->dup_end_ns;
        if (start < end)
            atomic_fetch_add(&b->n.jobs_overlapped, 1);
    } else {
        atomic_fetch_add(&b->n.jobs_sequential, 1);
    }
    free(job->ops);
    free(job->tracks);
    free(job);
}

/* ---- sending ---- */

/* One attempt for the ops listed in pending[0..n); codes[i] gets each
 * op's code and results[i] its result. Returns nothing: per-op codes say it. */
static void send_attempt(bench *b, tally_client *c, thread_stats *st, bench_op *ops,
                         const uint32_t *pending, size_t n, tally_result *results, int *codes)
{
    int64_t t0 = now_ns();
    if (b->opt.batch == 1 && n == 1) {
        memset(&results[0], 0, sizeof(results[0]));
        codes[0] = tally_transfer(c, ops[pending[0]].key, &ops[pending[0]].args, &results[0]);
    } else {
        tally_batch *batch = tally_batch_new(false);
        int rc = batch ? TALLY_ok : TALLY_out_of_memory;
        for (size_t i = 0; rc == TALLY_ok && i < n; i++)
            rc = tally_batch_transfer(batch, ops[pending[i]].key, &ops[pending[i]].args);
        if (rc == TALLY_ok) {
            memset(results, 0, n * sizeof(*results));
            rc = tally_batch_send(c, batch, NULL, results, n);
        }
        tally_batch_free(batch);
        for (size_t i = 0; i < n; i++)
            codes[i] = rc == TALLY_ok ? results[i].code : rc;
    }
    hist_record(&st->hist, (uint64_t)(now_ns() - t0));
    st->requests++;
}

/* Send ops[0..n) until each has an answer that is not a fault (or the
 * attempts run out), retrying faulted members with the same keys. */
static void send_ops(bench *b, tally_client *c, thread_stats *st, bench_op *ops, size_t n,
                     dup_job *job, tally_result *results)
{
    uint32_t pending[TALLY_CLIENT_BATCH_MAX];
    int codes[TALLY_CLIENT_BATCH_MAX];
    size_t count = n;
    for (size_t i = 0; i < n; i++)
        pending[i] = (uint32_t)i;
    for (unsigned attempt = 1; count > 0; attempt++) {
        if (attempt > 1) {
            st->retries++;
            backoff(attempt - 1);
        }
        send_attempt(b, c, st, ops, pending, count, results, codes);
        size_t still = 0;
        for (size_t i = 0; i < count; i++) {
            bench_op *op = &ops[pending[i]];
            if (is_fault(codes[i]) && attempt < b->opt.attempts_max) {
                op->faulted = true;
                pending[still++] = pending[i];
                continue;
            }
            if (is_fault(codes[i]))
                op->faulted = true;
            record_result(b, job, op, codes[i], &results[i]);
        }
        count = still;
    }
}

/* ---- twins: the second, concurrent sender of duplicates ---- */

static void *twin_main(void *arg)
{
    twin *t = arg;
    pthread_barrier_wait(&t->b->start);
    t->st.end_ns = now_ns();
    pthread_mutex_lock(&t->mu);
    for (;;) {
        while (!t->job && !t->closing)
            pthread_cond_wait(&t->cv, &t->mu);
        dup_job *job = t->job;
        if (!job)
            break;
        pthread_mutex_unlock(&t->mu);
        job->dup_start_ns = now_ns();
        send_ops(t->b, t->client, &t->st, job->ops, job->count, job, t->results);
        job->dup_end_ns = t->st.end_ns = now_ns();
        t->st.dup_sends += job->count;
        job_release(t->b, job);
        pthread_mutex_lock(&t->mu);
        t->job = NULL;
        t->busy = false;
    }
    pthread_mutex_unlock(&t->mu);
    return NULL;
}

/* Hand job to the twin if it is idle; false when it is still busy. */
static bool twin_offer(twin *t, dup_job *job)
{
    pthread_mutex_lock(&t->mu);
    bool idle = !t->busy;
    if (idle) {
        t->busy = true;
        t->job = job;
        pthread_cond_signal(&t->cv);
    }
    pthread_mutex_unlock(&t->mu);
    return idle;
}

static void twin_close(twin *t)
{
    pthread_mutex_lock(&t->mu);
    t->closing = true;
    pthread_cond_signal(&t->cv);
    pthread_mutex_unlock(&t->mu);
}

/* ---- workers ---- */

/* How many ops the next request may carry: 0 when the run is over. */
static size_t claim_ops(bench *b, size_t want)
{
    if (atomic_load(&b->abort))
        return 0;
    if (b->opt.ops == 0)
        return now_ns() < b->deadline_ns ? want : 0;
    uint64_t first = atomic_fetch_add(&b->ops_claimed, want);
    if (first >= b->opt.ops)
        return 0;
    return first + want <= b->opt.ops ? want : (size_t)(b->opt.ops - first);
}

/* --keys random: the UUIDv7's random bytes first and its time last, marked
 * version 4. Still unique (the same bits), but in no time order, like the
 * UUIDv4 or hashed keys many callers use; the transfer ids derived from
 * such keys are random too. */
static void key_scramble(tally_uuid *key)
{
    tally_uuid v7 = *key;
    memcpy(key->bytes, v7.bytes + 6, 10);
    memcpy(key->bytes + 10, v7.bytes, 6);
    key->bytes[6] = (uint8_t)(0x40 | (key->bytes[6] & 0x0f));
    key->bytes[8] = (uint8_t)(0x80 | (key->bytes[8] & 0x3f));
}

static int fill_op(worker *w, bench_op *op)
{
    const bench_options *o = &w->b->opt;
    tally_uuid key;
    int rc = tally_uuid_v7(&key);
    if (rc != TALLY_ok)
        return rc;
    if (o->random_keys)
        key_scramble(&key);
    tally_uuid_format(&key, op->key);
    uint64_t a = 1 + splitmix64(&w->rng) % o->accounts;
    uint64_t c = 1 + splitmix64(&w->rng) % (o->accounts - 1);
    if (c >= a)
        c++;
    op->args = (tally_transfer_args){.debit_account_id = a, .credit_account_id = c,
                                     .amount = 1 + (int64_t)(splitmix64(&w->rng) % (uint64_t)o->amount_max),
                                     .ledger = BENCH_LEDGER, .code = BENCH_TRANSFER_CODE};
    tally_uuid_from_key(o->consumer, op->key, &op->args.id);
    op->track = NO_TRACK;
    op->faulted = false;
    return TALLY_ok;
}

/* Reservoir sample of the worker's ops, read back after the run. */
static void sample_op(worker *w, const bench_op *op)
{
    w->seen++;
    if (w->sample_count < BENCH_SAMPLES_PER_WORKER) {
        w->samples[w->sample_count++] = *op;
        return;
    }
    uint64_t j = splitmix64(&w->rng) % w->seen;
    if (j < BENCH_SAMPLES_PER_WORKER)
        w->samples[j] = *op;
}

/* Pick the ops of this request to send twice; NULL when none. */
static dup_job *make_job(worker *w, size_t n)
{
    const bench_options *o = &w->b->opt;
    if (o->dup_ratio <= 0)
        return NULL;
    size_t count = 0;
    for (size_t i = 0; i < n; i++)
        if (rand_unit(&w->rng) < o->dup_ratio)
            w->ops[i].track = (uint32_t)count++;
    if (count == 0)
        return NULL;
    dup_job *job = calloc(1, sizeof(*job));
    bench_op *ops = calloc(count, sizeof(*ops));
    op_track *tracks = calloc(count, sizeof(*tracks));
    if (!job || !ops || !tracks) {
        free(job), free(ops), free(tracks);
        for (size_t i = 0; i < n; i++)
            w->ops[i].track = NO_TRACK;
        note_error(w->b, "out of memory for a duplicate");
        return NULL;
    }
    for (size_t i = 0; i < n; i++)
        if (w->ops[i].track != NO_TRACK)
            ops[w->ops[i].track] = w->ops[i];
    *job = (dup_job){.count = count, .ops = ops, .tracks = tracks};
    atomic_init(&job->refs, 2);
    bool want_concurrent = w->twin && rand_unit(&w->rng) < o->concurrent_share;
    job->concurrent = want_concurrent && twin_offer(w->twin, job);
    return job;
}

static void worker_request(worker *w, size_t n)
{
    bench *b = w->b;
    for (size_t i = 0; i < n; i++) {
        int rc = fill_op(w, &w->ops[i]);
        if (rc != TALLY_ok) {
            note_error(b, "tally_uuid_v7: %s", tally_strerror(rc));
            atomic_store(&b->abort, true);
            return;
        }
        sample_op(w, &w->ops[i]);
    }
    dup_job *job = make_job(w, n); /* a concurrent twin starts sending now */
    int64_t t0 = now_ns();
    send_ops(b, w->client, &w->st, w->ops, n, job, w->results);
    if (!job)
        return;
    job->orig_start_ns = t0;
    job->orig_end_ns = now_ns();
    if (!job->concurrent) {
        job->dup_start_ns = job->orig_end_ns;
        send_ops(b, w->client, &w->st, job->ops, job->count, job, w->results);
        job->dup_end_ns = now_ns();
        w->st.dup_sends += job->count;
        job_release(b, job);
    }
    job_release(b, job);
}

static void *worker_main(void *arg)
{
    worker *w = arg;
    pthread_barrier_wait(&w->b->start);
    size_t n;
    while ((n = claim_ops(w->b, w->b->opt.batch)) > 0)
        worker_request(w, n);
    w->st.end_ns = now_ns();
    if (w->twin)
        twin_close(w->twin);
    return NULL;
}

/* ---- setup: clients, accounts, snapshots ---- */

static int client_open(const bench_options *o, uint32_t timeout_ms, tally_client **out)
{
    tally_client_options co = {.url = o->url, .consumer = o->consumer,
                               .timeout_ms = timeout_ms, .retries = 0, .retries_set = true};
    return tally_client_open(&co, out);
}

/* A read with the bench's retries: call(c, arg) until it is not a fault. */
typedef int (*read_fn)(tally_client *c, uint64_t id, void *out);

static int read_account(tally_client *c, uint64_t id, void *out)
{
    return tally_account_get(c, id, out);
}

static int read_stats(tally_client *c, uint64_t id, void *out)
{
    (void)id;
    return tally_stats_get(c, out);
}

static int read_with_retries(const bench *b, tally_client *c, read_fn fn, uint64_t id, void *out)
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

static int open_accounts(bench *b)
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

static int snapshot_alloc(account_snapshot *s, uint64_t n)
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

static void snapshot_free(account_snapshot *s)
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
static void snapshot_take(bench *b, account_snapshot *s)
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

/* ---- the run ---- */

static int make_clients(bench *b)
{
    bool twins = b->opt.dup_ratio > 0 && b->opt.concurrent_share > 0;
    unsigned want = b->opt.mode == CLIENT_SHARED ? 1 : b->opt.clients * (twins ? 2u : 1u);
    b->clients = calloc(want, sizeof(*b->clients));
    if (!b->clients)
        return TALLY_out_of_memory;
    for (unsigned i = 0; i < want; i++) {
        int rc = client_open(&b->opt, b->opt.timeout_ms, &b->clients[i]);
        if (rc != TALLY_ok)
            return rc;
        b->client_count++;
    }
    return TALLY_ok;
}

static int make_threads(bench *b)
{
    unsigned n = b->opt.clients;
    bool twins = b->opt.dup_ratio > 0 && b->opt.concurrent_share > 0;
    b->workers = calloc(n, sizeof(*b->workers));
    b->twins = twins ? calloc(n, sizeof(*b->twins)) : NULL;
    if (!b->workers || (twins && !b->twins))
        return TALLY_out_of_memory;
    uint64_t seed_state = b->opt.seed;
    for (unsigned i = 0; i < n; i++) {
        worker *w = &b->workers[i];
        *w = (worker){.b = b, .index = i, .rng = splitmix64(&seed_state)};
        w->client = b->clients[b->client_count == 1 ? 0 : i];
        w->ops = calloc(b->opt.batch, sizeof(*w->ops));
        w->results = calloc(b->opt.batch, sizeof(*w->results));
        if (!w->ops || !w->results)
            return TALLY_out_of_memory;
        if (!twins)
            continue;
        twin *t = &b->twins[i];
        t->b = b;
        t->client = b->clients[b->client_count == 1 ? 0 : n + i];
        t->results = calloc(b->opt.batch, sizeof(*t->results));
        if (!t->results)
            return TALLY_out_of_memory;
        pthread_mutex_init(&t->mu, NULL);
        pthread_cond_init(&t->cv, NULL);
        w->twin = t;
    }
    return TALLY_ok;
}

/* A process's memory in kB from /proc/PID/status; -1 when unreadable. RSS
 * counts the pages of LMDB's map the process touched (file pages, which
 * the kernel may reclaim); RssAnon is the process's own memory. */
typedef struct proc_memory {
    long hwm_kb, rss_kb, anon_kb, file_kb;
} proc_memory;

static void server_memory(long pid, proc_memory *m)
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

#define SAMPLE_INTERVAL_US 100000

/* While the workers run: the server's peak RssAnon (the kernel keeps a
 * peak only of the whole RSS, VmHWM, which includes the map's pages). */
static void *sampler_main(void *arg)
{
    bench *b = arg;
    while (!atomic_load(&b->sampler_stop)) {
        proc_memory m;
        server_memory(b->opt.server_pid, &m);
        if (m.anon_kb > atomic_load(&b->server_anon_peak_kb))
            atomic_store(&b->server_anon_peak_kb, m.anon_kb);
        usleep(SAMPLE_INTERVAL_US);
    }
    return NULL;
}

/* Start workers (and twins) together; wait for all. Returns elapsed ns. */
static int64_t run_threads(bench *b)
{
    unsigned n = b->opt.clients, twins = b->twins ? n : 0;
    pthread_barrier_init(&b->start, NULL, n + twins + 1);
    for (unsigned i = 0; i < n; i++) {
        if (pthread_create(&b->workers[i].thread, NULL, worker_main, &b->workers[i]) != 0) {
            fprintf(stderr, "tally-bench: cannot start thread %u\n", i);
            exit(EXIT_FAILED);
        }
        if (twins && pthread_create(&b->twins[i].thread, NULL, twin_main, &b->twins[i]) != 0) {
            fprintf(stderr, "tally-bench: cannot start twin %u\n", i);
            exit(EXIT_FAILED);
        }
    }
    atomic_store(&b->server_anon_peak_kb, -1);
    pthread_t sampler;
    bool sampling = b->opt.server_pid > 0 && pthread_create(&sampler, NULL, sampler_main, b) == 0;
    b->start_ns = now_ns();
    b->deadline_ns = b->start_ns + (int64_t)(b->opt.seconds * 1e9);
    pthread_barrier_wait(&b->start);
    int64_t end = b->start_ns;
    for (unsigned i = 0; i < n; i++) {
        pthread_join(b->workers[i].thread, NULL);
        if (twins)
            pthread_join(b->twins[i].thread, NULL);
        if (b->workers[i].st.end_ns > end)
            end = b->workers[i].st.end_ns;
        if (twins && b->twins[i].st.end_ns > end)
            end = b->twins[i].st.end_ns;
    }
    pthread_barrier_destroy(&b->start);
    if (sampling) {
        atomic_store(&b->sampler_stop, true);
        pthread_join(sampler, NULL);
    }
    return end - b->start_ns;
}

/* ---- verification ---- */

#define CHECKS_MAX 10

typedef struct check {
    const char *name;
    bool ok, counts; /* counts: part of `verified` (else informational) */
    char detail[256];
} check;

typedef struct report {
    check checks[CHECKS_MAX];
    unsigned count;
    bool verified;
} report;

static void check_add(report *r, const char *name, bool ok, bool counts, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));

static void check_add(report *r, const char *name, bool ok, bool counts, const char *fmt, ...)
{
    if (r->count == CHECKS_MAX)
        return;
    check *c = &r->checks[r->count++];
    c->name = name;
    c->ok = ok;
    c->counts = counts;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->detail, sizeof(c->detail), fmt, ap);
    va_end(ap);
    if (counts && !ok)
        r->verified = false;
}

#define LOAD(x) ((uint64_t)atomic_load(&b->n.x))

static void verify_results(const bench *b, report *r)
{
    uint64_t effects = LOAD(effects), rejected = LOAD(rejections), unresolved = LOAD(unresolved);
    check_add(r, "answered", rejected == 0 && unresolved == 0 && b->first_error[0] == '\0', true,
              "%" PRIu64 " unique keys acknowledged ok, %" PRIu64 " rejected, %" PRIu64
              " without an answer",
              effects, rejected, unresolved);
    uint64_t applied = LOAD(applied_results), lost = LOAD(lost_answers) + LOAD(dup_lost_answer);
    check_add(r, "applied_once", applied + lost == effects && LOAD(unexpected_replays) == 0, true,
              "%" PRIu64 " results applied (not replayed) + %" PRIu64
              " applied by an attempt whose answer was lost = %" PRIu64
              " acknowledged keys; %" PRIu64 " fresh keys answered as replayed",
              applied, lost, effects, LOAD(unexpected_replays));
}

static void verify_stats(const bench *b, const tally_stats *s0, const tally_stats *s1, report *r)
{
    uint64_t effects = LOAD(effects);
    uint64_t transfers = s1->transfers - s0->transfers, head = s1->head_seq - s0->head_seq;
    uint64_t inbox = s1->inbox - s0->inbox, events = s1->events - s0->events;
    check_add(r, "server_transfers", transfers == effects, true,
              "stats.transfers +%" PRIu64 ", acknowledged unique keys %" PRIu64, transfers, effects);
    check_add(r, "server_log", head == effects, true,
              "log head +%" PRIu64 " (stats.events +%" PRIu64 "), one event per transfer: %" PRIu64
              "; events reported by applied results %" PRIu64,
              head, events, effects, LOAD(events_caused));
    check_add(r, "server_inbox", inbox == effects, true,
              "stats.inbox +%" PRIu64 ", acknowledged unique keys %" PRIu64, inbox, effects);
}

static void verify_balances(const bench *b, const account_snapshot *s0, const account_snapshot *s1,
                            report *r)
{
    uint64_t wrong = 0, first_wrong = 0;
    int64_t debits = 0, credits = 0, abs_debits = 0, abs_credits = 0;
    for (uint64_t i = 0; i < b->opt.accounts; i++) {
        int64_t dd = s1->debits_posted[i] - s0->debits_posted[i];
        int64_t dc = s1->credits_posted[i] - s0->credits_posted[i];
        bool pending_moved = s1->debits_pending[i] != s0->debits_pending[i] ||
                             s1->credits_pending[i] != s0->credits_pending[i];
        if (dd != atomic_load(&b->expected_debits[i]) ||
            dc != atomic_load(&b->expected_credits[i]) || pending_moved) {
            if (wrong++ == 0)
                first_wrong = i + 1;
        }
        debits += dd;
        credits += dc;
        abs_debits += s1->debits_posted[i];
        abs_credits += s1->credits_posted[i];
    }
    char first[48] = "";
    if (wrong)
        snprintf(first, sizeof(first), ", first: account %" PRIu64, first_wrong);
    uint64_t amount = LOAD(amount_total);
    bool sums = debits == credits && (uint64_t)debits == amount;
    check_add(r, "balances", wrong == 0 && sums && s0->bad_accounts == 0 && s1->bad_accounts == 0,
              true,
              "sum of debits +%" PRId64 " = sum of credits +%" PRId64 " = acknowledged amounts %" PRIu64
              "; %" PRIu64 " of %" PRIu64 " accounts differ from the expected movement%s",
              debits, credits, amount, wrong, b->opt.accounts, first);
    check_add(r, "balances_absolute", abs_debits == abs_credits, false,
              "over the bench accounts now: sum of debits_posted %" PRId64
              ", sum of credits_posted %" PRId64 " (informational: equal unless other traffic "
              "touched these accounts)",
              abs_debits, abs_credits);
}

static void verify_duplicates(const bench *b, uint64_t dup_sends, report *r)
{
    uint64_t keys = LOAD(dup_keys), once = LOAD(dup_exactly_once), lost = LOAD(dup_lost_answer);
    uint64_t twice = LOAD(dup_double_applied), odd = LOAD(dup_anomalies);
    check_add(r, "duplicates", twice == 0 && odd == 0 && once + lost == keys, true,
              "%" PRIu64 " keys sent twice (%" PRIu64 " member sends; %" PRIu64
              " requests concurrent with the original, %" PRIu64 " of them overlapping in time; %" PRIu64
              " sequential); %" PRIu64 " applied exactly once with the other send replayed, %" PRIu64
              " applied by a lost attempt, %" PRIu64 " applied twice, %" PRIu64 " otherwise",
              keys, dup_sends, LOAD(jobs_concurrent), LOAD(jobs_overlapped), LOAD(jobs_sequential),
              once, lost, twice, odd);
}

/* Read back the sampled transfers: each exists once, as sent. */
static void verify_samples(bench *b, report *r)
{
    unsigned checked = 0, wrong = 0;
    for (unsigned i = 0; i < b->opt.clients; i++) {
        const worker *w = &b->workers[i];
        for (unsigned j = 0; j < w->sample_count; j++) {
            const tally_transfer_args *a = &w->samples[j].args;
            tally_transfer_info t;
            int rc = TALLY_internal;
            for (unsigned attempt = 1; attempt <= b->opt.attempts_max; attempt++) {
                rc = tally_transfer_get(b->clients[0], &a->id, &t);
                if (!is_fault(rc))
                    break;
                backoff(attempt);
            }
            checked++;
            if (rc != TALLY_ok || t.amount != a->amount || t.debit_account_id != a->debit_account_id ||
                t.credit_account_id != a->credit_account_id || strcmp(t.state, "posted") != 0 ||
                t.version != 1) {
                if (wrong++ == 0)
                    note_error(b, "transfer of key %s read back: %s", w->samples[j].key,
                               rc != TALLY_ok ? tally_strerror(rc) : "fields differ");
            }
        }
    }
    check_add(r, "read_back", wrong == 0, true,
              "%u sampled transfers read back by id (derived from the key): %u differ or are missing",
              checked, wrong);
}

/* ---- results ---- */

typedef struct summary {
    histogram hist;
    uint64_t requests, retries, dup_sends, effects;
    double seconds, effects_per_sec, requests_per_sec;
    proc_memory mem;           /* the server's, at the end; -1 when unknown */
    long anon_peak_kb;         /* the server's peak RssAnon, sampled; -1 when unknown */
    double server_cpu_s;       /* tallyd user+system CPU during the run; -1 when unknown */
    double client_cpu_s;       /* this process's user+system CPU during the run */
    tally_stats s0, s1;
} summary;

/* User+system CPU seconds this process has used. */
static double self_cpu_s(void)
{
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru) != 0)
        return 0;
    return (double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
           (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
}

/* User+system CPU seconds a process has used, from /proc; -1 when unreadable. */
static double process_cpu_s(long pid)
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


static void summarize(bench *b, int64_t elapsed_ns, summary *s)
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
}

static const char *effective_url(const bench_options *o)
{
    if (o->url)
        return o->url;
    const char *env = getenv("TALLY_URL");
    return env && *env ? env : "tcp://127.0.0.1:7450";
}

static const char *mode_name(client_mode m)
{
    return m == CLIENT_SHARED ? "shared" : "per-thread";
}

static void print_text(const bench *b, const summary *s, const report *r)
{
    const bench_options *o = &b->opt;
    printf("tally-bench: %s, consumer %s, %u clients (%s client), batch %u, %" PRIu64
           " accounts, dup-ratio %.3g, %s keys, seed %" PRIu64 "\n",
           effective_url(o), o->consumer, o->clients, mode_name(o->mode), o->batch, o->accounts,
           o->dup_ratio, o->random_keys ? "random" : "time-ordered", o->seed);
    printf("  ran %.2f s: %" PRIu64 " effects, %" PRIu64 " requests, %" PRIu64
           " duplicate sends, %" PRIu64 " retries\n",
           s->seconds, s->effects, s->requests, s->dup_sends, s->retries);
    printf("  effects/s   %.0f\n  requests/s  %.0f\n", s->effects_per_sec, s->requests_per_sec);
    printf("  bench CPU   %.2f s (load generator, same machine)\n", s->client_cpu_s);
    printf("  latency ms  p50 %.3f  p99 %.3f  p999 %.3f  max %.3f  mean %.3f  (per request)\n",
           hist_quantile_ms(&s->hist, 0.50), hist_quantile_ms(&s->hist, 0.99),
           hist_quantile_ms(&s->hist, 0.999), (double)s->hist.max_ns / 1e6,
           s->hist.total ? (double)s->hist.sum_ns / (double)s->hist.total / 1e6 : 0.0);
    if (o->server_pid > 0 && s->mem.hwm_kb >= 0)
        printf("  tallyd pid %ld: peak RSS (VmHWM) %.1f MiB, RSS now %.1f MiB (own memory "
               "%.1f MiB, peak %.1f; map pages %.1f MiB), CPU %.2f s (%.0f us per effect)\n",
               o->server_pid, (double)s->mem.hwm_kb / 1024, (double)s->mem.rss_kb / 1024,
               (double)s->mem.anon_kb / 1024, (double)s->anon_peak_kb / 1024,
               (double)s->mem.file_kb / 1024, s->server_cpu_s,
               s->effects ? s->server_cpu_s * 1e6 / (double)s->effects : 0.0);
    else if (o->server_pid > 0)
        printf("  tallyd pid %ld: /proc/%ld/status not readable\n", o->server_pid, o->server_pid);
    printf("verification:\n");
    for (unsigned i = 0; i < r->count; i++)
        printf("  %-4s %-18s %s\n", r->checks[i].ok ? "ok" : (r->checks[i].counts ? "FAIL" : "note"),
               r->checks[i].name, r->checks[i].detail);
    if (b->first_error[0])
        printf("  first error: %s\n", b->first_error);
    printf("verified: %s\n", r->verified ? "true" : "false");
}

static json_t *json_server(const summary *s)
{
    json_t *o = json_object();
    json_object_set_new(o, "peak_rss_kb", s->mem.hwm_kb >= 0 ? json_integer(s->mem.hwm_kb) : json_null());
    json_object_set_new(o, "rss_kb", s->mem.rss_kb >= 0 ? json_integer(s->mem.rss_kb) : json_null());
    json_object_set_new(o, "rss_anon_kb", s->mem.anon_kb >= 0 ? json_integer(s->mem.anon_kb) : json_null());
    json_object_set_new(o, "peak_rss_anon_kb", s->anon_peak_kb >= 0 ? json_integer(s->anon_peak_kb) : json_null());
    json_object_set_new(o, "rss_file_kb", s->mem.file_kb >= 0 ? json_integer(s->mem.file_kb) : json_null());
    json_object_set_new(o, "cpu_s", s->server_cpu_s >= 0 ? json_real(s->server_cpu_s) : json_null());
    json_object_set_new(o, "transfers_added", json_integer((json_int_t)(s->s1.transfers - s->s0.transfers)));
    json_object_set_new(o, "head_seq_added", json_integer((json_int_t)(s->s1.head_seq - s->s0.head_seq)));
    json_object_set_new(o, "inbox_added", json_integer((json_int_t)(s->s1.inbox - s->s0.inbox)));
    json_object_set_new(o, "events_added", json_integer((json_int_t)(s->s1.events - s->s0.events)));
    json_object_set_new(o, "map_used_bytes", json_integer((json_int_t)s->s1.map_used_bytes));
    return o;
}

static void print_json(const bench *b, const summary *s, const report *r)
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
    json_object_set_new(j, "accounts", json_integer((json_int_t)o->accounts));
    json_object_set_new(j, "dup_ratio", json_real(o->dup_ratio));
    json_object_set_new(j, "seed", json_integer((json_int_t)o->seed));
    json_object_set_new(j, "url", json_string(effective_url(o)));
    json_object_set_new(j, "consumer", json_string(o->consumer));
    json_object_set_new(j, "client_mode", json_string(mode_name(o->mode)));
    json_object_set_new(j, "keys", json_string(o->random_keys ? "random" : "time"));
    json_object_set_new(j, "mean_ms", json_real(s->hist.total ? (double)s->hist.sum_ns / (double)s->hist.total / 1e6 : 0.0));
    json_object_set_new(j, "duplicate_keys", json_integer((json_int_t)LOAD(dup_keys)));
    json_object_set_new(j, "duplicate_requests_concurrent", json_integer((json_int_t)LOAD(jobs_concurrent)));
    json_object_set_new(j, "duplicate_requests_overlapping", json_integer((json_int_t)LOAD(jobs_overlapped)));
    json_object_set_new(j, "duplicate_requests_sequential", json_integer((json_int_t)LOAD(jobs_sequential)));
    json_object_set_new(j, "client_cpu_s", json_real(s->client_cpu_s));
    json_object_set_new(j, "server", json_server(s));
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

/* ---- options ---- */

static void usage(FILE *f)
{
    fprintf(f,
"usage: tally-bench [--url URL] [--clients N] [--seconds S | --ops N] [--batch N]\n"
"                   [--accounts N] [--dup-ratio R] [--json] [more options below]\n"
"\n"
"Load generator for tallyd: opens bench accounts, sends transfers from N\n"
"concurrent client threads, reports throughput and latency, then verifies\n"
"against the server that every acknowledged operation took effect exactly once.\n"
"\n"
"  --url URL           tallyd request endpoint (default $TALLY_URL, else\n"
"                      tcp://127.0.0.1:7450)\n"
"  --clients N         concurrent client threads, 1..%d (default 8)\n"
"  --seconds S         run for S seconds (default 10); threads stop starting\n"
"                      requests at the deadline and finish the ones in flight\n"
"  --ops N             instead: send exactly N unique operations (transfers)\n"
"  --batch N           operations per request, 1..%d (default 1). 1 sends each\n"
"                      transfer alone (tally_transfer); more sends a batch\n"
"                      (tally_batch_send), each member with its own key\n"
"  --accounts N        bench accounts, ids 1..N, 2..%d (default 1000)\n"
"  --dup-ratio R       fraction 0..1 of operations sent a second time with the\n"
"                      same key (default 0). Part of them (--concurrent-share)\n"
"                      is sent by a twin thread at the same moment as the\n"
"                      original; the rest again by the same thread after the\n"
"                      answer. Duplicates are extra requests, not extra ops\n"
"  --concurrent-share F  fraction 0..1 of duplicated requests sent concurrently\n"
"                      (default 0.5; falls back to sequential when the twin is busy)\n"
"  --json              print one JSON object instead of text\n"
"  --seed N            seed of the account/amount/duplicate choices (default:\n"
"                      from the clock; always printed)\n"
"  --consumer NAME     consumer (key namespace) of every write (default bench)\n"
"  --client-mode M     shared: one tally_client for all threads (default);\n"
"                      per-thread: one client per thread\n"
"  --server-pid PID    report tallyd's peak RSS (VmHWM in /proc/PID/status), its\n"
"                      own memory (RssAnon, peak sampled during the run) apart\n"
"                      from the LMDB map pages it touched (RssFile), and the\n"
"                      CPU time it used during the run (/proc/PID/stat)\n"
"  --timeout-ms N      per request attempt, 1..%d (default 10000)\n"
"  --attempts N        attempts per operation on faults (timed_out, overloaded,\n"
"                      ...), each with the same keys, 1..%d (default 20)\n"
"  --amount-max N      amounts are 1..N, N <= %d (default 100)\n"
"  --keys ORDER        time: UUIDv7 keys, so keys and transfer ids grow with\n"
"                      time (default); random: the same bits in no time order\n"
"                      (like UUIDv4 keys), so every insert lands on a random\n"
"                      page of the inbox and transfer trees\n"
"  --help\n"
"\n"
"What is measured:\n"
"  effects/s   unique keys acknowledged ok (each applied once) per second of\n"
"              the run; duplicates and retries are not effects\n"
"  requests/s  request attempts per second, duplicates and retries included\n"
"  latency     per request attempt (a batch is one request), HDR-like\n"
"              histogram with under 1.6%% error; p50, p99, p99.9, max\n"
"\n"
"Accounts are opened with keys \"bench-open-<id>\" (ledger 1, code 1, no limit\n"
"flags), so a second run replays the opens. Keys of transfers are UUIDv7\n"
"text; each transfer id is tally_uuid_from_key(consumer, key), so a resend\n"
"is the same transfer (and, for a UUIDv7 key, the id is time-ordered too). The client library's own retries are off: the bench\n"
"retries faults itself with the same keys and counts every attempt.\n"
"\n"
"Verification (the bench assumes no other traffic touches its accounts\n"
"while it runs), each a line of the report:\n"
"  answered          every operation was answered ok (no rejections)\n"
"  applied_once      non-replayed ok results = acknowledged unique keys\n"
"                    (allowing for attempts whose answer was lost)\n"
"  server_transfers  stats.transfers grew by the acknowledged unique keys\n"
"  server_log        the log head grew by one event per acknowledged key\n"
"  server_inbox      stats.inbox grew by the acknowledged unique keys\n"
"  balances          every bench account's debits/credits moved by exactly the\n"
"                    acknowledged amounts; sum of debits = sum of credits\n"
"  duplicates        every key sent twice was applied once and replayed once\n"
"  read_back         a sample of transfers, read by id, is as sent\n"
"  balances_absolute (informational) sums over the accounts' whole history\n"
"\n"
"--json prints one object: effects_per_sec, requests_per_sec, p50_ms, p99_ms,\n"
"p999_ms, max_ms, mean_ms, verified, clients, batch, ops (unique operations\n"
"acknowledged = effects), duplicates (member sends of resent keys), seconds\n"
"(measured run time), requests, retries, accounts, dup_ratio, seed, url,\n"
"consumer, client_mode, keys, duplicate_keys, duplicate_requests_concurrent /\n"
"_overlapping / _sequential, client_cpu_s, server {peak_rss_kb, rss_kb,\n"
"rss_anon_kb, peak_rss_anon_kb (sampled every 100 ms), rss_file_kb, cpu_s,\n"
"transfers_added, head_seq_added, inbox_added, events_added, map_used_bytes},\n"
"checks {name: {ok, counts, detail}}, first_error.\n"
"\n"
"Exit status: 0 verified, 1 verification or setup failed, 2 usage error,\n"
"3 server unreachable.\n",
            BENCH_CLIENTS_MAX, TALLY_CLIENT_BATCH_MAX, BENCH_ACCOUNTS_MAX, BENCH_TIMEOUT_MS_MAX,
            BENCH_ATTEMPTS_MAX_LIMIT, BENCH_AMOUNT_MAX_LIMIT);
}

static bool parse_u64(const char *text, uint64_t min, uint64_t max, uint64_t *out)
{
    char *end;
    errno = 0;
    unsigned long long v = strtoull(text, &end, 10);
    if (errno || end == text || *end || text[0] == '-' || v < min || v > max)
        return false;
    *out = v;
    return true;
}

static bool parse_fraction(const char *text, double min, double max, double *out)
{
    char *end;
    errno = 0;
    double v = strtod(text, &end);
    if (errno || end == text || *end || !(v >= min && v <= max))
        return false;
    *out = v;
    return true;
}

static int usage_error(const char *what, const char *arg)
{
    fprintf(stderr, "tally-bench: %s%s%s\nTry 'tally-bench --help'.\n", what, arg ? ": " : "",
            arg ? arg : "");
    return EXIT_USAGE;
}

enum {
    OPT_URL = 1000, OPT_CLIENTS, OPT_SECONDS, OPT_OPS, OPT_BATCH, OPT_ACCOUNTS, OPT_DUP,
    OPT_SHARE, OPT_JSON, OPT_SEED, OPT_CONSUMER, OPT_MODE, OPT_PID, OPT_TIMEOUT, OPT_ATTEMPTS,
    OPT_AMOUNT, OPT_KEYS, OPT_HELP
};

static const struct option long_options[] = {
    {"url", required_argument, NULL, OPT_URL},
    {"clients", required_argument, NULL, OPT_CLIENTS},
    {"seconds", required_argument, NULL, OPT_SECONDS},
    {"ops", required_argument, NULL, OPT_OPS},
    {"batch", required_argument, NULL, OPT_BATCH},
    {"accounts", required_argument, NULL, OPT_ACCOUNTS},
    {"dup-ratio", required_argument, NULL, OPT_DUP},
    {"concurrent-share", required_argument, NULL, OPT_SHARE},
    {"json", no_argument, NULL, OPT_JSON},
    {"seed", required_argument, NULL, OPT_SEED},
    {"consumer", required_argument, NULL, OPT_CONSUMER},
    {"client-mode", required_argument, NULL, OPT_MODE},
    {"server-pid", required_argument, NULL, OPT_PID},
    {"timeout-ms", required_argument, NULL, OPT_TIMEOUT},
    {"attempts", required_argument, NULL, OPT_ATTEMPTS},
    {"amount-max", required_argument, NULL, OPT_AMOUNT},
    {"keys", required_argument, NULL, OPT_KEYS},
    {"help", no_argument, NULL, OPT_HELP},
    {NULL, 0, NULL, 0}};

/* One option; returns -1 when fine, else the exit status. */
static int parse_one(int c, const char *arg, bench_options *o, bool *seconds_given)
{
    uint64_t n;
    switch (c) {
    case OPT_URL: o->url = arg; return -1;
    case OPT_CONSUMER:
        if (strlen(arg) < 1 || strlen(arg) > 64)
            return usage_error("--consumer: 1 to 64 bytes", arg);
        o->consumer = arg;
        return -1;
    case OPT_CLIENTS:
        if (!parse_u64(arg, 1, BENCH_CLIENTS_MAX, &n))
            return usage_error("--clients: not a count in range", arg);
        o->clients = (unsigned)n;
        return -1;
    case OPT_SECONDS:
        if (!parse_fraction(arg, 0.001, BENCH_SECONDS_MAX, &o->seconds))
            return usage_error("--seconds: not a duration in range", arg);
        *seconds_given = true;
        return -1;
    case OPT_OPS:
        if (!parse_u64(arg, 1, BENCH_OPS_MAX, &o->ops))
            return usage_error("--ops: not a count in range", arg);
        return -1;
    case OPT_BATCH:
        if (!parse_u64(arg, 1, TALLY_CLIENT_BATCH_MAX, &n))
            return usage_error("--batch: not a count in range", arg);
        o->batch = (unsigned)n;
        return -1;
    case OPT_ACCOUNTS:
        if (!parse_u64(arg, 2, BENCH_ACCOUNTS_MAX, &o->accounts))
            return usage_error("--accounts: not a count in range", arg);
        return -1;
    case OPT_DUP:
        if (!parse_fraction(arg, 0, 1, &o->dup_ratio))
            return usage_error("--dup-ratio: not a fraction 0..1", arg);
        return -1;
    case OPT_SHARE:
        if (!parse_fraction(arg, 0, 1, &o->concurrent_share))
            return usage_error("--concurrent-share: not a fraction 0..1", arg);
        return -1;
    default: break;
    }
    return -2;
}

static int parse_more(int c, const char *arg, bench_options *o)
{
    uint64_t n;
    switch (c) {
    case OPT_JSON: o->json = true; return -1;
    case OPT_SEED:
        if (!parse_u64(arg, 0, UINT64_MAX, &o->seed))
            return usage_error("--seed: not a number", arg);
        return -1;
    case OPT_MODE:
        if (strcmp(arg, "shared") == 0)
            o->mode = CLIENT_SHARED;
        else if (strcmp(arg, "per-thread") == 0)
            o->mode = CLIENT_PER_THREAD;
        else
            return usage_error("--client-mode: shared or per-thread", arg);
        return -1;
    case OPT_PID:
        if (!parse_u64(arg, 1, INT32_MAX, &n))
            return usage_error("--server-pid: not a pid", arg);
        o->server_pid = (long)n;
        return -1;
    case OPT_TIMEOUT:
        if (!parse_u64(arg, 1, BENCH_TIMEOUT_MS_MAX, &n))
            return usage_error("--timeout-ms: not a time in range", arg);
        o->timeout_ms = (uint32_t)n;
        return -1;
    case OPT_ATTEMPTS:
        if (!parse_u64(arg, 1, BENCH_ATTEMPTS_MAX_LIMIT, &n))
            return usage_error("--attempts: not a count in range", arg);
        o->attempts_max = (unsigned)n;
        return -1;
    case OPT_AMOUNT:
        if (!parse_u64(arg, 1, BENCH_AMOUNT_MAX_LIMIT, &n))
            return usage_error("--amount-max: not an amount in range", arg);
        o->amount_max = (int64_t)n;
        return -1;
    case OPT_KEYS:
        if (strcmp(arg, "time") != 0 && strcmp(arg, "random") != 0)
            return usage_error("--keys: time or random", arg);
        o->random_keys = strcmp(arg, "random") == 0;
        return -1;
    case OPT_HELP: usage(stdout); return EXIT_VERIFIED;
    default: return usage_error("unknown option", NULL);
    }
}

/* Returns -1 to run, else the exit status. */
static int parse_options(int argc, char **argv, bench_options *o)
{
    bool seconds_given = false, seed_given = false;
    int c;
    opterr = 1;
    while ((c = getopt_long(argc, argv, "", long_options, NULL)) != -1) {
        int rc = parse_one(c, optarg, o, &seconds_given);
        if (rc == -2)
            rc = parse_more(c, optarg, o);
        if (rc != -1)
            return rc;
        seed_given = seed_given || c == OPT_SEED;
    }
    if (optind < argc)
        return usage_error("unexpected argument", argv[optind]);
    if (seconds_given && o->ops)
        return usage_error("--seconds and --ops exclude each other", NULL);
    if (!seed_given) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        o->seed = (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
        o->seed ^= (uint64_t)getpid() << 32;
        o->seed &= (UINT64_C(1) << 53) - 1; /* exact in JSON numbers */
    }
    if (o->ops)
        o->seconds = 0;
    return -1;
}

/* ---- main ---- */

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

/* The snapshot after the run and every check. */
static void verify(bench *b, const account_snapshot *s0, summary *s, report *r)
{
    account_snapshot s1;
    r->verified = true;
    int rc = read_with_retries(b, b->clients[0], read_stats, 0, &s->s1);
    if (rc == TALLY_ok)
        rc = snapshot_alloc(&s1, b->opt.accounts);
    if (rc != TALLY_ok) {
        check_add(r, "snapshot", false, true, "cannot read the server after the run: %s",
                  tally_strerror(rc));
        return;
    }
    snapshot_take(b, &s1);
    verify_results(b, r);
    verify_stats(b, &s->s0, &s->s1, r);
    verify_balances(b, s0, &s1, r);
    if (b->opt.dup_ratio > 0)
        verify_duplicates(b, s->dup_sends, r);
    verify_samples(b, r);
    snapshot_free(&s1);
}

int main(int argc, char **argv)
{
    static bench b; /* large: histograms */
    b.opt = (bench_options){.consumer = "bench", .clients = 8, .seconds = 10, .batch = 1,
                            .accounts = 1000, .concurrent_share = 0.5, .mode = CLIENT_SHARED,
                            .timeout_ms = 10000, .attempts_max = 20, .amount_max = 100};
    int rc = parse_options(argc, argv, &b.opt);
    if (rc >= 0)
        return rc;
    if (bench_init(&b) != TALLY_ok) {
        fprintf(stderr, "tally-bench: out of memory\n");
        return EXIT_FAILED;
    }
    summary s = {0};
    rc = probe_server(&b, &s.s0);
    if (rc >= 0)
        return rc;
    account_snapshot s0 = {0};
    if (prepare(&b, &s0, &s.s0) != TALLY_ok) {
        fprintf(stderr, "tally-bench: %s\n", b.first_error);
        return EXIT_FAILED;
    }
    if (!b.opt.json)
        fprintf(stderr, "tally-bench: %u clients, batch %u, %s %g%s, seed %" PRIu64 "...\n",
                b.opt.clients, b.opt.batch, b.opt.ops ? "ops" : "seconds",
                b.opt.ops ? (double)b.opt.ops : b.opt.seconds, b.opt.ops ? "" : " s", b.opt.seed);
    s.server_cpu_s = process_cpu_s(b.opt.server_pid);
    s.client_cpu_s = self_cpu_s();
    int64_t elapsed = run_threads(&b);
    summarize(&b, elapsed, &s);
    report r = {0};
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
