/*
 * options.c — tally-bench's command line: the usage text and the options.
 */
#include "config.h"

#include "common/cli.h"
#include "common/clock.h"
#include "common/file_mode.h"
#include "tools/bench/bench.h"

#include <assert.h>
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void usage(FILE *f)
{
    fprintf(f,
"usage: tally-bench [--url URL] [--clients N] [--seconds S | --ops N] [--batch N]\n"
"                   [--accounts N] [--dup-ratio R] [--json] [more options below]\n"
"       tally-bench --echo [--echo-bytes N] [--url URL] [--clients N] [--seconds S | --ops N]\n"
"       tally-bench --stream [--from-seq N] [--ops N] [--stream-page N] [--publish URL]\n"
"\n"
"Load generator for tallyd: opens bench accounts, sends transfers from N\n"
"concurrent client threads, reports throughput and latency, then verifies\n"
"against the server that every acknowledged operation took effect exactly once.\n"
"\n"
"  --url URL           tallyd request endpoint (default $TALLY_URL, else\n"
"                      tcp://127.0.0.1:7450)\n"
"  --tls-ca FILE       for tls+tcp:// URLs: the CA of tallyd's certificate\n"
"                      (default $TALLY_TLS_CA)\n"
"  --tls-cert FILE, --tls-key FILE  client certificate and its key, when\n"
"                      tallyd asks for one ($TALLY_TLS_CERT, $TALLY_TLS_KEY)\n"
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
"  --token-file FILE   the token for tallyd --auth (mode 600; default\n"
"                      $TALLY_TOKEN_FILE, else $TALLY_TOKEN: tally.h)\n"
"  --client-mode M     shared: one tally_client for all threads (default);\n"
"                      per-thread: one client per thread\n"
"  --no-autobatch      turn libtally's auto-batching off (tally_client_options\n"
"                      .no_autobatch): with a shared client, single transfers\n"
"                      of threads that find two requests in flight are no\n"
"                      longer merged into one batch request (tally.h)\n"
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
"  --echo              measure the transport's ceiling instead: against\n"
"                      tally-echo (not tallyd), each operation is one request of\n"
"                      --echo-bytes sent through libtally's own transport\n"
"                      (tally_request_raw: the client's socket, a context per\n"
"                      call, timeouts, the bench's retries) and checked to come\n"
"                      back byte for byte. No accounts, no server verification;\n"
"                      --clients, --seconds/--ops, --client-mode, --timeout-ms,\n"
"                      --attempts, --server-pid and --json work as for transfers,\n"
"                      --batch and --dup-ratio are refused\n"
"  --echo-bytes N      size of each echo request, %d..%d (default %d; needs --echo)\n"
"  --stream            measure a subscriber catching up instead: one libtally\n"
"                      stream (tally_stream_next, every event's hash and chain\n"
"                      checked) reads the log from --from-seq to the head the\n"
"                      server had at the start (or --ops events) with a handler\n"
"                      that does nothing; reports events/s and CPU per event;\n"
"                      verified when every seq came once, in order\n"
"  --from-seq N        --stream: the first seq to read (default 1)\n"
"  --stream-page N     --stream: events per log_read, 1..1000 (default 1000)\n"
"  --publish URL       --stream: tallyd's PUB endpoint (default none: the\n"
"                      stream reads with log_read only, as a reader catching up\n"
"                      does)\n"
"  --progress          show the progress line on stderr even when it is not a\n"
"                      terminal (default: only when it is one): ops answered\n"
"                      of --ops, of the --seconds run's time, or --stream's events\n"
"                      read; the rate, ETA\n"
"  --no-progress       never show it (stdout and --json are the same either way)\n"
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
"consumer, client_mode, autobatch, keys, duplicate_keys, duplicate_requests_concurrent /\n"
"_overlapping / _sequential, client_cpu_s, server {peak_rss_kb, rss_kb,\n"
"rss_anon_kb, peak_rss_anon_kb (sampled every 100 ms), rss_file_kb, cpu_s,\n"
"transfers_added, head_seq_added, inbox_added, events_added, map_used_bytes},\n"
"checks {name: {ok, counts, detail}}, first_error, echo, echo_bytes.\n"
"With --echo, ops and effects_per_sec count echoes that came back identical,\n"
"the server's store fields are null, and the checks are answered (every echo\n"
"answered) and identical (each byte for byte); verified is both.\n"
"\n"
"Exit status: 0 verified, 1 verification or setup failed, 2 usage error,\n"
"3 server unreachable.\n",
            BENCH_CLIENTS_MAX, TALLY_CLIENT_BATCH_MAX, BENCH_ACCOUNTS_MAX, BENCH_TIMEOUT_MS_MAX,
            BENCH_ATTEMPTS_MAX_LIMIT, BENCH_AMOUNT_MAX_LIMIT, BENCH_ECHO_BYTES_MIN,
            BENCH_ECHO_BYTES_MAX, BENCH_ECHO_BYTES_DEFAULT);
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
    OPT_AMOUNT, OPT_KEYS, OPT_ECHO, OPT_ECHO_BYTES, OPT_STREAM, OPT_FROM_SEQ, OPT_STREAM_PAGE,
    OPT_PUBLISH, OPT_NO_AUTOBATCH, OPT_PROGRESS, OPT_NO_PROGRESS, OPT_TOKEN_FILE, OPT_TLS_CA,
    OPT_TLS_CERT, OPT_TLS_KEY, OPT_HELP
};

static const struct option long_options[] = {
    {"url", required_argument, NULL, OPT_URL},
    {"tls-ca", required_argument, NULL, OPT_TLS_CA},
    {"tls-cert", required_argument, NULL, OPT_TLS_CERT},
    {"tls-key", required_argument, NULL, OPT_TLS_KEY},
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
    {"token-file", required_argument, NULL, OPT_TOKEN_FILE},
    {"client-mode", required_argument, NULL, OPT_MODE},
    {"server-pid", required_argument, NULL, OPT_PID},
    {"timeout-ms", required_argument, NULL, OPT_TIMEOUT},
    {"attempts", required_argument, NULL, OPT_ATTEMPTS},
    {"amount-max", required_argument, NULL, OPT_AMOUNT},
    {"keys", required_argument, NULL, OPT_KEYS},
    {"echo", no_argument, NULL, OPT_ECHO},
    {"echo-bytes", required_argument, NULL, OPT_ECHO_BYTES},
    {"stream", no_argument, NULL, OPT_STREAM},
    {"from-seq", required_argument, NULL, OPT_FROM_SEQ},
    {"stream-page", required_argument, NULL, OPT_STREAM_PAGE},
    {"publish", required_argument, NULL, OPT_PUBLISH},
    {"no-autobatch", no_argument, NULL, OPT_NO_AUTOBATCH},
    {"progress", no_argument, NULL, OPT_PROGRESS},
    {"no-progress", no_argument, NULL, OPT_NO_PROGRESS},
    {"help", no_argument, NULL, OPT_HELP},
    {NULL, 0, NULL, 0}};

/* An option whose value is a whole number in [min, max], stored into a
 * field of bench_options of `bytes` bytes (4: unsigned, 8: 64-bit). */
typedef struct count_option {
    int id;
    uint64_t min, max;
    size_t offset, bytes;
    const char *error; /* the usage error when the value does not fit */
} count_option;

#define COUNT_OPTION(id, field, min, max, error)                                                   \
    {id, min, max, offsetof(bench_options, field), sizeof(((bench_options *)0)->field), error}

static const count_option count_options[] = {
    COUNT_OPTION(OPT_CLIENTS, clients, 1, BENCH_CLIENTS_MAX, "--clients: not a count in range"),
    COUNT_OPTION(OPT_OPS, ops, 1, BENCH_OPS_MAX, "--ops: not a count in range"),
    COUNT_OPTION(OPT_BATCH, batch, 1, TALLY_CLIENT_BATCH_MAX, "--batch: not a count in range"),
    COUNT_OPTION(OPT_ACCOUNTS, accounts, 2, BENCH_ACCOUNTS_MAX, "--accounts: not a count in range"),
    COUNT_OPTION(OPT_SEED, seed, 0, UINT64_MAX, "--seed: not a number"),
    COUNT_OPTION(OPT_PID, server_pid, 1, INT32_MAX, "--server-pid: not a pid"),
    COUNT_OPTION(OPT_TIMEOUT, timeout_ms, 1, BENCH_TIMEOUT_MS_MAX,
                 "--timeout-ms: not a time in range"),
    COUNT_OPTION(OPT_ATTEMPTS, attempts_max, 1, BENCH_ATTEMPTS_MAX_LIMIT,
                 "--attempts: not a count in range"),
    COUNT_OPTION(OPT_AMOUNT, amount_max, 1, BENCH_AMOUNT_MAX_LIMIT,
                 "--amount-max: not an amount in range"),
    COUNT_OPTION(OPT_ECHO_BYTES, echo_bytes, BENCH_ECHO_BYTES_MIN, BENCH_ECHO_BYTES_MAX,
                 "--echo-bytes: not a size in range"),
    COUNT_OPTION(OPT_FROM_SEQ, stream_from, 1, UINT64_MAX, "--from-seq: not a seq"),
    COUNT_OPTION(OPT_STREAM_PAGE, stream_page, 1, TALLY_STREAM_FILL_EVENTS_MAX,
                 "--stream-page: not a count in range"),
};

/* The count option c, if it is one: -1 when stored, else the exit status;
 * -2 when c is not a count option. */
static int parse_count(int c, const char *arg, bench_options *o)
{
    for (size_t i = 0; i < sizeof(count_options) / sizeof(count_options[0]); i++) {
        const count_option *co = &count_options[i];
        if (co->id != c)
            continue;
        uint64_t n;
        if (!cli_parse_u64(arg, co->min, co->max, &n))
            return usage_error(co->error, arg);
        uint32_t narrow = (uint32_t)n; /* every 4-byte field's max fits */
        assert(co->bytes == sizeof(narrow) || co->bytes == sizeof(n));
        memcpy((char *)o + co->offset, co->bytes == sizeof(narrow) ? (void *)&narrow : (void *)&n,
               co->bytes);
        return -1;
    }
    return -2;
}

/* One option that is not a count; returns -1 when fine, else the exit status. */
static int parse_one(int c, const char *arg, bench_options *o, bool *seconds_given)
{
    switch (c) {
    case OPT_URL: o->url = arg; return -1;
    case OPT_TOKEN_FILE: {
        char why[4200];
        if (!file_private_check(arg, "--token-file", why, sizeof(why)))
            return usage_error(why, NULL);
        o->token_file = arg;
        return -1;
    }
    case OPT_TLS_CA: o->tls_ca = arg; return -1;
    case OPT_TLS_CERT: o->tls_cert = arg; return -1;
    case OPT_TLS_KEY: o->tls_key = arg; return -1;
    case OPT_CONSUMER:
        if (strlen(arg) < 1 || strlen(arg) > 64)
            return usage_error("--consumer: 1 to 64 bytes", arg);
        o->consumer = arg;
        return -1;
    case OPT_SECONDS:
        if (!parse_fraction(arg, 0.001, BENCH_SECONDS_MAX, &o->seconds))
            return usage_error("--seconds: not a duration in range", arg);
        *seconds_given = true;
        return -1;
    case OPT_DUP:
        if (!parse_fraction(arg, 0, 1, &o->dup_ratio))
            return usage_error("--dup-ratio: not a fraction 0..1", arg);
        return -1;
    case OPT_SHARE:
        if (!parse_fraction(arg, 0, 1, &o->concurrent_share))
            return usage_error("--concurrent-share: not a fraction 0..1", arg);
        return -1;
    case OPT_JSON: o->json = true; return -1;
    case OPT_ECHO: o->echo = true; return -1;
    case OPT_STREAM: o->stream = true; return -1;
    case OPT_PUBLISH: o->publish_url = arg; return -1;
    case OPT_NO_AUTOBATCH: o->no_autobatch = true; return -1;
    case OPT_PROGRESS: o->progress = PROGRESS_ON; return -1;
    case OPT_NO_PROGRESS: o->progress = PROGRESS_OFF; return -1;
    case OPT_MODE:
        if (strcmp(arg, "shared") == 0)
            o->mode = CLIENT_SHARED;
        else if (strcmp(arg, "per-thread") == 0)
            o->mode = CLIENT_PER_THREAD;
        else
            return usage_error("--client-mode: shared or per-thread", arg);
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

int parse_options(int argc, char **argv, bench_options *o)
{
    bool seconds_given = false, seed_given = false;
    int c;
    opterr = 1;
    while ((c = getopt_long(argc, argv, "", long_options, NULL)) != -1) {
        int rc = parse_count(c, optarg, o);
        if (rc == -2)
            rc = parse_one(c, optarg, o, &seconds_given);
        if (rc != -1)
            return rc;
        seed_given = seed_given || c == OPT_SEED;
    }
    if (optind < argc)
        return usage_error("unexpected argument", argv[optind]);
    if (seconds_given && o->ops)
        return usage_error("--seconds and --ops exclude each other", NULL);
    if (o->echo_bytes && !o->echo)
        return usage_error("--echo-bytes needs --echo", NULL);
    if (o->echo && (o->batch != 1 || o->dup_ratio > 0))
        return usage_error("--echo sends one request per operation: --batch and --dup-ratio "
                           "do not apply", NULL);
    if ((o->stream_from || o->stream_page || o->publish_url) && !o->stream)
        return usage_error("--from-seq, --stream-page and --publish need --stream", NULL);
    if (o->stream && (o->echo || seconds_given))
        return usage_error("--stream reads the log once: --echo and --seconds do not apply",
                           NULL);
    if (o->stream && !o->stream_page)
        o->stream_page = TALLY_STREAM_FILL_EVENTS_MAX;
    if (o->echo && !o->echo_bytes)
        o->echo_bytes = BENCH_ECHO_BYTES_DEFAULT;
    if (!seed_given) {
        o->seed = (uint64_t)clock_wall_ns();
        o->seed ^= (uint64_t)getpid() << 32;
        o->seed &= (UINT64_C(1) << 53) - 1; /* exact in JSON numbers */
    }
    if (o->ops)
        o->seconds = 0;
    return -1;
}
