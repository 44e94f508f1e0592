/*
 * workload.c — tally-bench's threads: workers that claim operations and
 * send them, their twins that send duplicates at the same moment, the
 * sampler of the server's memory, and the start and end of the run.
 */
#include "config.h"

#include "tools/bench/bench.h"

#include "common/bytes.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

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

/* ---- twins: the second, concurrent sender of duplicates ---- */

static void *twin_main(void *arg)
{
    twin *t = arg;
    pthread_barrier_wait(&t->b->start);
    t->st.end_ns = clock_mono_ns();
    pthread_mutex_lock(&t->mu);
    for (;;) {
        while (!t->job && !t->closing)
            pthread_cond_wait(&t->cv, &t->mu);
        dup_job *job = t->job;
        if (!job)
            break;
        pthread_mutex_unlock(&t->mu);
        job->dup_start_ns = clock_mono_ns();
        send_ops(t->b, t->client, &t->st, job->ops, job->count, job, t->results);
        job->dup_end_ns = t->st.end_ns = clock_mono_ns();
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
        return clock_mono_ns() < b->deadline_ns ? want : 0;
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

/* --user-data: values none of which is 0 (each gets its index entry),
 * spread as a caller's would be (--help). */
static void fill_user_data(worker *w, tally_user_data *u)
{
    put_u64_be(u->user_data_128.bytes, splitmix64(&w->rng));
    put_u64_be(u->user_data_128.bytes + 8, splitmix64(&w->rng) | 1);
    u->user_data_64 = 1 + splitmix64(&w->rng) % BENCH_USER_DATA_64_VALUES;
    u->user_data_32 = (uint32_t)(1 + splitmix64(&w->rng) % BENCH_USER_DATA_32_VALUES);
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
    if (o->user_data)
        fill_user_data(w, &op->args.user_data);
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
    int64_t t0 = clock_mono_ns();
    send_ops(b, w->client, &w->st, w->ops, n, job, w->results);
    if (!job)
        return;
    job->orig_start_ns = t0;
    job->orig_end_ns = clock_mono_ns();
    if (!job->concurrent) {
        job->dup_start_ns = job->orig_end_ns;
        send_ops(b, w->client, &w->st, job->ops, job->count, job, w->results);
        job->dup_end_ns = clock_mono_ns();
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
    while ((n = claim_ops(w->b, w->b->opt.batch)) > 0) {
        if (w->b->opt.echo)
            echo_send(w); /* batch is 1 */
        else
            worker_request(w, n);
        atomic_fetch_add_explicit(&w->b->ops_done, n, memory_order_relaxed);
    }
    w->st.end_ns = clock_mono_ns();
    if (w->twin)
        twin_close(w->twin);
    return NULL;
}

/* ---- the run ---- */

int make_threads(bench *b)
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
        w->client = b->clients[i % b->client_count]; /* shared: one, or one per node */
        w->ops = calloc(b->opt.batch, sizeof(*w->ops));
        w->results = calloc(b->opt.batch, sizeof(*w->results));
        if (!w->ops || !w->results)
            return TALLY_out_of_memory;
        if (!twins)
            continue;
        twin *t = &b->twins[i];
        t->b = b;
        /* shared: the next node's client (the same with one) */
        t->client = b->clients[b->opt.mode == CLIENT_SHARED ? (i + 1) % b->client_count : n + i];
        t->results = calloc(b->opt.batch, sizeof(*t->results));
        if (!t->results)
            return TALLY_out_of_memory;
        pthread_mutex_init(&t->mu, NULL);
        pthread_cond_init(&t->cv, NULL);
        w->twin = t;
    }
    return TALLY_ok;
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

#define PROGRESS_POLL_US 50000

/* While the workers run: the progress line (common/progress.h), ops
 * answered of --ops, or of the time of a --seconds run. */
static void *progress_main(void *arg)
{
    bench *b = arg;
    progress line;
    progress_init(&line, "tally-bench", b->opt.progress, PROGRESS_ITEMS);
    while (line.on && !atomic_load(&b->sampler_stop)) {
        uint64_t done = atomic_load_explicit(&b->ops_done, memory_order_relaxed);
        if (b->opt.ops)
            progress_update(&line, "ops", done, b->opt.ops);
        else
            progress_update_timed(&line, "ops", done, (clock_mono_ns() - b->start_ns) / 1000000,
                                  (int64_t)(b->opt.seconds * 1000.0));
        usleep(PROGRESS_POLL_US);
    }
    progress_end(&line);
    return NULL;
}

/* Start workers (and twins) together; wait for all. Returns elapsed ns. */
int64_t run_threads(bench *b)
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
    b->start_ns = clock_mono_ns();
    b->deadline_ns = b->start_ns + (int64_t)(b->opt.seconds * 1e9);
    pthread_t progress_thread;
    bool progressing = pthread_create(&progress_thread, NULL, progress_main, b) == 0;
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
    atomic_store(&b->sampler_stop, true);
    if (sampling)
        pthread_join(sampler, NULL);
    if (progressing)
        pthread_join(progress_thread, NULL);
    return end - b->start_ns;
}
