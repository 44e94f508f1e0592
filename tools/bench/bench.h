/*
 * bench.h — what the parts of tally-bench share (tools/bench/main.c says
 * what a run is): the options, the run state of the threads, the counters
 * the answers go to, the report and the summary, and the functions each
 * part offers the others.
 */
#ifndef TALLY_BENCH_H
#define TALLY_BENCH_H

#include "clients/libtally/tally.h"
#include "common/clock.h"
#include "common/limits.h"
#include "common/progress.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define EXIT_VERIFIED 0
#define EXIT_FAILED 1
#define EXIT_USAGE 2
#define EXIT_UNREACHABLE 3

#define BENCH_CLIENTS_MAX 1024
#define BENCH_ACCOUNTS_MAX 1000000
#define BENCH_SECONDS_MAX 86400.0
#define BENCH_OPS_MAX UINT64_C(1000000000000)
#define BENCH_AMOUNT_MAX_LIMIT 1000000
#define BENCH_USER_DATA_64_VALUES 1000000 /* --user-data: user_data_64 is 1..this */
#define BENCH_USER_DATA_32_VALUES 100     /* and user_data_32 1..this */
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
/* --echo: a request of ECHO_HEADER_BYTES (a msgpack map {op, seq, pad}
 * with a bin32 pad) plus the pad; at most what tallyd (and tally-echo by
 * default) accepts. */
#define BENCH_ECHO_HEADER_BYTES 31
#define BENCH_ECHO_BYTES_MIN BENCH_ECHO_HEADER_BYTES
#define BENCH_ECHO_BYTES_MAX TALLY_REQUEST_BYTES_MAX
#define BENCH_ECHO_BYTES_DEFAULT 200

_Static_assert(BENCH_KEY_BYTES - 1 <= TALLY_CLIENT_KEY_BYTES_MAX, "keys fit the protocol");

/* ---- options ---- */

typedef enum client_mode { CLIENT_SHARED, CLIENT_PER_THREAD } client_mode;

typedef struct bench_options {
    const char *url;      /* NULL: libtally's default ($TALLY_URL, tcp://127.0.0.1:7450) */
    const char *tls_ca, *tls_cert, *tls_key; /* NULL: $TALLY_TLS_CA, ... (tally_client_options) */
    const char *consumer;
    const char *token_file; /* NULL: libtally's $TALLY_TOKEN_FILE / $TALLY_TOKEN */
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
    bool user_data;       /* --user-data: every transfer carries user data (workload.c) */
    bool random_keys;     /* --keys random: keys and ids in no order (UUIDv4-like) */
    bool echo;            /* --echo: one echo request per operation (echo.c) */
    uint32_t echo_bytes;  /* size of each echo request; 0 until set */
    bool stream;          /* --stream: read the log with one stream (stream.c) */
    uint64_t stream_from; /* first seq; 0 = 1 */
    uint32_t stream_page; /* events per log_read; 0 until set */
    const char *publish_url; /* NULL: log_read only */
    bool no_autobatch;    /* --no-autobatch: libtally sends every single write alone */
    progress_mode progress; /* --progress / --no-progress; else when stderr is a terminal */
    const char *cluster_urls; /* --cluster: the nodes' URLs; NULL: one tallyd at url */
    long kill_pid;        /* --kill-pid: kill -9 it after kill_after_s; 0 = not given */
    double kill_after_s;
} bench_options;

/* ---- latency histogram (log-linear, values in ns) ---- */

#define HIST_LINEAR 128
#define HIST_SUB 64
#define HIST_BUCKETS (HIST_LINEAR + 57 * HIST_SUB)

typedef struct histogram {
    uint64_t counts[HIST_BUCKETS];
    uint64_t total, max_ns, sum_ns;
} histogram;

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
    uint8_t *echo_request; /* --echo: this worker's request, its seq rewritten per op */
    uint64_t echo_seq;
} worker;

typedef struct account_snapshot {
    int64_t *debits_posted, *credits_posted, *debits_pending, *credits_pending;
    uint64_t bad_accounts; /* wrong ledger, limit flags, or unreadable */
} account_snapshot;

typedef struct bench_counters {
    atomic_uint_fast64_t effects, amount_total, applied_results, replayed_results,
        events_caused, rejections, unresolved, unexpected_replays, lost_answers, dup_keys,
        dup_exactly_once, dup_lost_answer, dup_double_applied, dup_anomalies,
        dup_replayed_results, jobs_concurrent, jobs_sequential, jobs_overlapped,
        echo_mismatches;
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
    atomic_uint_fast64_t ops_done; /* ops whose request was answered (the progress line) */
    atomic_bool abort;
    _Atomic int64_t *expected_debits, *expected_credits; /* per account, index id-1 */
    bench_counters n;
    pthread_mutex_t error_mu;
    char first_error[256];
    atomic_long server_anon_peak_kb; /* sampled while the workers run; -1 unknown */
    atomic_bool sampler_stop; /* also stops the progress line */
    _Atomic int64_t kill_ns;  /* --kill-pid: when the kill was sent (mono ns); 0 before */
    atomic_uint_fast64_t failover_sends; /* sends that faulted after the kill, then ok */
    _Atomic int64_t failover_min_ns, failover_max_ns; /* from the kill to their ok */
};

/* A process's memory in kB from /proc/PID/status; -1 when unreadable. RSS
 * counts the pages of LMDB's map the process touched (file pages, which
 * the kernel may reclaim); RssAnon is the process's own memory. */
typedef struct proc_memory {
    long hwm_kb, rss_kb, anon_kb, file_kb;
} proc_memory;

/* ---- verification and results ---- */

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

/* A process's writes (/proc/PID/io): bytes it caused to reach the block
 * layer (write_bytes: the store's pages and the log) and write system
 * calls (syscw); -1 when unreadable. */
typedef struct proc_io {
    long long write_bytes, write_calls;
} proc_io;

typedef struct summary {
    histogram hist;
    uint64_t requests, retries, dup_sends, effects;
    double seconds, effects_per_sec, requests_per_sec;
    proc_memory mem;           /* the server's, at the end; -1 when unknown */
    long anon_peak_kb;         /* the server's peak RssAnon, sampled; -1 when unknown */
    double server_cpu_s;       /* tallyd user+system CPU during the run; -1 when unknown */
    double client_cpu_s;       /* this process's user+system CPU during the run */
    proc_io io;                /* the server's writes during the run; -1 when unknown */
    tally_stats s0, s1;
} summary;

#define LOAD(x) ((uint64_t)atomic_load(&b->n.x))

/* ---- main.c ---- */

/* Keep the run's first error (thread-safe); later ones are dropped. */
void note_error(bench *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* ---- options.c ---- */

/* Returns -1 to run, else the exit status (help, or a usage error). */
int parse_options(int argc, char **argv, bench_options *o);

/* ---- histogram.c ---- */

void hist_record(histogram *h, uint64_t ns);
void hist_merge(histogram *into, const histogram *from);
/* The q-quantile (0 < q <= 1) in ms; 0 when empty. */
double hist_quantile_ms(const histogram *h, double q);

/* ---- send.c ---- */

/* A code worth retrying with the same keys (no answer, overloaded...). */
bool is_fault(int code);
/* Sleep before retry number attempt: 5 ms doubling up to 500 ms. */
void backoff(unsigned attempt);
/* Send ops[0..n) until each has an answer that is not a fault (or the
 * attempts run out), retrying faulted members with the same keys; job: the
 * duplicate job the ops belong to, or NULL. */
void send_ops(bench *b, tally_client *c, thread_stats *st, bench_op *ops, size_t n,
              dup_job *job, tally_result *results);
/* Drop one of the job's two references; the last one judges its keys and
 * frees it. */
void job_release(bench *b, dup_job *job);

/* ---- setup.c ---- */

int client_open(const bench_options *o, uint32_t timeout_ms, tally_client **out);
/* A read with the bench's retries: fn(c, id, out) until it is not a fault. */
typedef int (*read_fn)(tally_client *c, uint64_t id, void *out);
int read_stats(tally_client *c, uint64_t id, void *out);
int read_with_retries(const bench *b, tally_client *c, read_fn fn, uint64_t id, void *out);
int make_clients(bench *b);
int open_accounts(bench *b);
int snapshot_alloc(account_snapshot *s, uint64_t n);
void snapshot_free(account_snapshot *s);
/* Read every bench account, in parallel. */
void snapshot_take(bench *b, account_snapshot *s);

/* ---- workload.c ---- */

int make_threads(bench *b);
/* Start workers (and twins) together; wait for all. Returns elapsed ns. */
int64_t run_threads(bench *b);

/* ---- verify.c ---- */

/* The snapshot after the run and every check. */
void verify(bench *b, const account_snapshot *s0, summary *s, report *r);
/* Add one line to the report; a failed check that counts clears verified. */
void check_add(report *r, const char *name, bool ok, bool counts, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));

/* ---- echo.c: --echo, the transport's ceiling against tally-echo ---- */

/* Can the echo server be reached, and does it echo? -1 when yes, else the
 * exit status. */
int echo_probe(bench *b);
/* Clients (each connected by one echo) and the threads with their requests. */
int echo_prepare(bench *b);
/* One operation of worker w: one echo, retried on faults. */
void echo_send(worker *w);
/* The report: every echo answered, and each came back byte for byte. */
void echo_verify(bench *b, report *r);

/* ---- stream.c: --stream, a subscriber catching up ---- */

/* The whole --stream run; returns the exit status. */
int stream_run(bench *b);

/* ---- cluster.c: --cluster and --kill-pid ---- */

/* The nodes in --cluster's list; 0 without it. */
unsigned cluster_node_count(const bench_options *o);
/* Client i's URL list: --cluster's, starting at node i (mod the count). */
int cluster_client_url(const bench_options *o, unsigned i, char *out, size_t size);
/* With --cluster: every client's reads wait (min_seq) until the node read
 * has applied the last write any client saw acknowledged. */
void cluster_sync_reads(bench *b);
/* With --kill-pid: a thread that kill -9s it after --kill-after; false
 * when there is none to join. */
bool cluster_kill_start(bench *b, pthread_t *thread);
/* A send that faulted after the kill was acknowledged ns after it. */
void cluster_failover_note(bench *b, int64_t ns);

/* ---- report.c ---- */

void server_memory(long pid, proc_memory *m);
/* User+system CPU seconds this process has used. */
double self_cpu_s(void);
/* User+system CPU seconds a process has used, from /proc; -1 when unreadable. */
double process_cpu_s(long pid);
/* A process's write counters from /proc/PID/io (-1 each when unreadable:
 * no such process, or another user's without the capability). */
void process_io(long pid, proc_io *io);
void summarize(bench *b, int64_t elapsed_ns, summary *s);
const char *effective_url(const bench_options *o);
void print_text(const bench *b, const summary *s, const report *r);
void print_json(const bench *b, const summary *s, const report *r);

#endif
