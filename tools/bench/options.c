/*
 * options.c — tally-bench's command line: the option table (common/options.h),
 * the usage text around it, and what the options must satisfy together.
 */
#include "config.h"

#include "common/cli.h"
#include "common/clock.h"
#include "common/file_mode.h"
#include "common/options.h"
#include "tools/bench/bench.h"

#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define CONSUMER_BYTES_MAX 64

static bench_options *bench_of(void *target)
{
    return target;
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

/* --seconds, --kill-after, --dup-ratio and --concurrent-share: a decimal
 * fraction. */
static int parse_real(const options_row *row, void *t, const char *text, char *why, size_t n)
{
    bench_options *o = bench_of(t);
    bool seconds = strcmp(row->name, "seconds") == 0 || strcmp(row->name, "kill-after") == 0;
    double *field = strcmp(row->name, "seconds") == 0      ? &o->seconds
                    : strcmp(row->name, "kill-after") == 0 ? &o->kill_after_s
                    : strcmp(row->name, "dup-ratio") == 0  ? &o->dup_ratio
                                                           : &o->concurrent_share;
    if (parse_fraction(text, seconds ? 0.001 : 0, seconds ? BENCH_SECONDS_MAX : 1, field))
        return 0;
    snprintf(why, n, "%s: %s", seconds ? "not a duration in range" : "not a fraction 0..1", text);
    return 2;
}

static int parse_consumer(const options_row *row, void *t, const char *text, char *why, size_t n)
{
    (void)row;
    if (strlen(text) < 1 || strlen(text) > CONSUMER_BYTES_MAX) {
        snprintf(why, n, "1 to %d bytes: %s", CONSUMER_BYTES_MAX, text);
        return 2;
    }
    bench_of(t)->consumer = text;
    return 0;
}

static int parse_token_file(const options_row *row, void *t, const char *text, char *why,
                            size_t n)
{
    (void)row;
    if (!file_private_check(text, "token file", why, n))
        return 2;
    bench_of(t)->token_file = text;
    return 0;
}

/* --server-pid and --kill-pid. */
static int parse_pid(const options_row *row, void *t, const char *text, char *why, size_t n)
{
    uint64_t pid;
    if (!cli_parse_u64(text, 1, INT32_MAX, &pid)) {
        snprintf(why, n, "not a pid: %s", text);
        return 2;
    }
    *(strcmp(row->name, "kill-pid") == 0 ? &bench_of(t)->kill_pid : &bench_of(t)->server_pid) =
        (long)pid;
    return 0;
}

/* --client-mode and --keys: one of two names. */
static int parse_choice(const options_row *row, void *t, const char *text, char *why, size_t n)
{
    bench_options *o = bench_of(t);
    bool mode = strcmp(row->name, "client-mode") == 0;
    const char *first = mode ? "shared" : "time", *second = mode ? "per-thread" : "random";
    bool is_second = strcmp(text, second) == 0;
    if (!is_second && strcmp(text, first) != 0) {
        snprintf(why, n, "%s or %s: %s", first, second, text);
        return 2;
    }
    if (mode)
        o->mode = is_second ? CLIENT_PER_THREAD : CLIENT_SHARED;
    else
        o->random_keys = is_second;
    return 0;
}

#define NUMBER(field, kind, min, max) OPTIONS_NUMBER(bench_options, field, kind, min, max)

_Static_assert(BENCH_ECHO_BYTES_DEFAULT == 200, "--echo-bytes' help");

/* The options, in --help's order. */
static const options_row rows[] = {
    {"url", "URL", NULL, "tallyd request endpoint (default $TALLY_URL, else tcp://127.0.0.1:7450)",
     OPTIONS_TEXT(bench_options, url)},
    {"tls-ca", "FILE", NULL,
     "for tls+tcp:// URLs: the CA of tallyd's certificate (default $TALLY_TLS_CA)",
     OPTIONS_TEXT(bench_options, tls_ca)},
    {"tls-cert", "FILE", NULL,
     "client certificate, when tallyd asks for one (default $TALLY_TLS_CERT)",
     OPTIONS_TEXT(bench_options, tls_cert)},
    {"tls-key", "FILE", NULL, "its key (default $TALLY_TLS_KEY)",
     OPTIONS_TEXT(bench_options, tls_key)},
    {"clients", "N", "8", "concurrent client threads",
     NUMBER(clients, UNSIGNED, 1, BENCH_CLIENTS_MAX), .noun = "count"},
    {"seconds", "S", "10",
     "run for S seconds; threads stop starting requests at the deadline and finish the ones in "
     "flight",
     parse_real},
    {"ops", "N", NULL, "instead: send exactly N unique operations (transfers)",
     NUMBER(ops, U64, 1, BENCH_OPS_MAX), .noun = "count"},
    {"batch", "N", "1",
     "operations per request. 1 sends each transfer alone (tally_transfer); more sends a batch "
     "(tally_batch_send), each member with its own key",
     NUMBER(batch, UNSIGNED, 1, TALLY_CLIENT_BATCH_MAX), .noun = "count"},
    {"accounts", "N", "1000", "bench accounts, ids 1..N",
     NUMBER(accounts, U64, 2, BENCH_ACCOUNTS_MAX), .noun = "count"},
    {"dup-ratio", "R", "0",
     "fraction 0..1 of operations sent a second time with the same key. Part of them "
     "(--concurrent-share) is sent by a twin thread at the same moment as the original; the "
     "rest again by the same thread after the answer. Duplicates are extra requests, not extra "
     "ops",
     parse_real},
    {"concurrent-share", "F", "0.5",
     "fraction 0..1 of duplicated requests sent concurrently (falls back to sequential when the "
     "twin is busy)",
     parse_real},
    {"json", NULL, NULL, "print one JSON object instead of text", OPTIONS_FLAG(bench_options, json)},
    {"seed", "N", NULL,
     "seed of the account/amount/duplicate choices (default: from the clock; always printed)",
     NUMBER(seed, U64, 0, UINT64_MAX)},
    {"consumer", "NAME", "bench", "consumer (key namespace) of every write", parse_consumer},
    {"token-file", "FILE", NULL,
     "the token for tallyd --auth (mode 600; default $TALLY_TOKEN_FILE, else $TALLY_TOKEN: "
     "tally.h)",
     parse_token_file},
    {"client-mode", "M", "shared",
     "shared: one tally_client for all threads; per-thread: one client per thread",
     parse_choice},
    {"cluster", "URLS", NULL,
     "a tally cluster (docs/CLUSTER.md) instead of --url: its nodes' URLs, comma-separated; "
     "the clients are spread over the nodes (client i starts at node i of the list, a shared "
     "client is one per node) and move on along the list when their node fails; reads wait "
     "for every write acknowledged before them (min_seq)",
     OPTIONS_TEXT(bench_options, cluster_urls)},
    {"kill-pid", "PID", NULL,
     "with --cluster: kill -9 this process (a node's tallyd) --kill-after seconds into the run, "
     "and report the fail-over time: from the kill to the first write of the clients it "
     "failed that another node acknowledged (the slowest and the fastest such client)",
     parse_pid},
    {"kill-after", "S", "2", "with --kill-pid: seconds into the run", parse_real},
    {"no-autobatch", NULL, NULL,
     "turn libtally's auto-batching off (tally_client_options .no_autobatch): with a shared "
     "client, single transfers of threads that find two requests in flight are no longer "
     "merged into one batch request (tally.h)",
     OPTIONS_FLAG(bench_options, no_autobatch)},
    {"server-pid", "PID", NULL,
     "report tallyd's peak RSS (VmHWM in /proc/PID/status), its own memory (RssAnon, peak "
     "sampled during the run) apart from the LMDB map pages it touched (RssFile), the CPU "
     "time it used during the run (/proc/PID/stat), and the bytes and write calls it wrote "
     "during the run, in all and per effect (write_bytes, syscw in /proc/PID/io)",
     parse_pid},
    {"timeout-ms", "N", "10000", "per request attempt",
     NUMBER(timeout_ms, UNSIGNED, 1, BENCH_TIMEOUT_MS_MAX), .noun = "time"},
    {"attempts", "N", "20",
     "attempts per operation on faults (timed_out, overloaded, ...), each with the same keys",
     NUMBER(attempts_max, UNSIGNED, 1, BENCH_ATTEMPTS_MAX_LIMIT), .noun = "count"},
    {"amount-max", "N", "100", "amounts are 1..N",
     NUMBER(amount_max, I64, 1, BENCH_AMOUNT_MAX_LIMIT), .noun = "amount"},
    {"user-data", NULL, NULL,
     "give every transfer user data, so the transfer index gets its three entries each: "
     "user_data_128 random (like an invoice's UUID), user_data_64 one of 1..1000000 (like a "
     "customer id), user_data_32 one of 1..100 (like a region); read back with the sample",
     OPTIONS_FLAG(bench_options, user_data)},
    {"keys", "ORDER", "time",
     "time: UUIDv7 keys, so keys and transfer ids grow with time; random: the same bits in no "
     "time order (like UUIDv4 keys), so every insert lands on a random page of the inbox and "
     "transfer trees",
     parse_choice},
    {"echo", NULL, NULL,
     "measure the transport's ceiling instead: against tally-echo (not tallyd), each operation "
     "is one request of --echo-bytes sent through libtally's own transport (tally_request_raw: "
     "the client's socket, a context per call, timeouts, the bench's retries) and checked to "
     "come back byte for byte. No accounts, no server verification; --clients, --seconds/--ops, "
     "--client-mode, --timeout-ms, --attempts, --server-pid and --json work as for transfers, "
     "--batch and --dup-ratio are refused",
     OPTIONS_FLAG(bench_options, echo)},
    {"echo-bytes", "N", NULL, "size of each echo request (needs --echo; unset: 200)",
     NUMBER(echo_bytes, UNSIGNED, BENCH_ECHO_BYTES_MIN, BENCH_ECHO_BYTES_MAX), .noun = "size"},
    {"stream", NULL, NULL,
     "measure a subscriber catching up instead: one libtally stream (tally_stream_next, every "
     "event's hash and chain checked) reads the log from --from-seq to the head the server had "
     "at the start (or --ops events) with a handler that does nothing; reports events/s and CPU "
     "per event; verified when every seq came once, in order",
     OPTIONS_FLAG(bench_options, stream)},
    {"from-seq", "N", NULL, "--stream: the first seq to read (unset: 1)",
     NUMBER(stream_from, U64, 1, UINT64_MAX), .noun = "seq"},
    {"stream-page", "N", NULL, "--stream: events per log_read (unset: 1000)",
     NUMBER(stream_page, UNSIGNED, 1, TALLY_STREAM_FILL_EVENTS_MAX), .noun = "count"},
    {"publish", "URL", NULL,
     "--stream: tallyd's PUB endpoint (unset: the stream reads with log_read only, as a reader "
     "catching up does)",
     OPTIONS_TEXT(bench_options, publish_url)},
    {"progress", NULL, NULL,
     "show the progress line on stderr even when it is not a terminal (default: only when it "
     "is one): ops answered of --ops, of the --seconds run's time, or --stream's events read; "
     "the rate, ETA",
     progress_option_parse, 0, 0, 0, OPTIONS_STORE_NONE, offsetof(bench_options, progress), 1},
    {"no-progress", NULL, NULL, "never show it (stdout and --json are the same either way)",
     progress_option_parse, 0, 0, 0, OPTIONS_STORE_NONE, offsetof(bench_options, progress), 1},
    OPTIONS_ROW_HELP,
};

_Static_assert(BENCH_ECHO_BYTES_MAX <= UINT32_MAX && TALLY_STREAM_FILL_EVENTS_MAX <= UINT32_MAX,
               "the uint32_t fields' ranges");

static void usage(const options_set *set, FILE *f)
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
"\n");
    options_print_help(set, f);
    fprintf(f, "\n"
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
"consumer, client_mode, autobatch, keys, user_data, duplicate_keys, duplicate_requests_concurrent /\n"
"_overlapping / _sequential, client_cpu_s, server {peak_rss_kb, rss_kb,\n"
"rss_anon_kb, peak_rss_anon_kb (sampled every 100 ms), rss_file_kb, cpu_s,\n"
"write_bytes, write_calls, write_bytes_per_effect, write_calls_per_effect\n"
"(/proc/PID/io during the run; null without --server-pid),\n"
"transfers_added, head_seq_added, inbox_added, events_added, map_used_bytes},\n"
"checks {name: {ok, counts, detail}}, first_error, echo, echo_bytes.\n"
"With --echo, ops and effects_per_sec count echoes that came back identical,\n"
"the server's store fields are null, and the checks are answered (every echo\n"
"answered) and identical (each byte for byte); verified is both.\n"
"\n"
"Exit status: 0 verified, 1 verification or setup failed, 2 usage error,\n"
"3 server unreachable.\n"
        );
}

/* What the options must satisfy together, and the defaults that depend
 * on others; -1 when fine. */
static int check_together(const options_set *set, bench_options *o)
{
    bool seconds_given = options_given_count(set, "seconds", NULL) > 0;
    if (seconds_given && o->ops)
        return options_usage_error(set, "--seconds and --ops exclude each other");
    if (o->echo_bytes && !o->echo)
        return options_usage_error(set, "--echo-bytes needs --echo");
    if (o->echo && (o->batch != 1 || o->dup_ratio > 0))
        return options_usage_error(set, "--echo sends one request per operation: --batch and "
                                        "--dup-ratio do not apply");
    if ((o->stream_from || o->stream_page || o->publish_url) && !o->stream)
        return options_usage_error(set, "--from-seq, --stream-page and --publish need --stream");
    if (o->stream && (o->echo || seconds_given))
        return options_usage_error(set, "--stream reads the log once: --echo and --seconds do "
                                        "not apply");
    if (o->cluster_urls && options_given_count(set, "url", NULL) > 0)
        return options_usage_error(set, "--cluster and --url exclude each other");
    if (o->cluster_urls && (o->echo || o->stream))
        return options_usage_error(set, "--cluster measures transfers: not with --echo or --stream");
    if ((o->kill_pid || options_given_count(set, "kill-after", NULL) > 0) && !o->cluster_urls)
        return options_usage_error(set, "--kill-pid and --kill-after need --cluster (a node to "
                                        "fail over from)");
    if (o->cluster_urls)
        o->url = o->cluster_urls;
    if (o->stream && !o->stream_page)
        o->stream_page = TALLY_STREAM_FILL_EVENTS_MAX;
    if (o->echo && !o->echo_bytes)
        o->echo_bytes = BENCH_ECHO_BYTES_DEFAULT;
    if (options_given_count(set, "seed", NULL) == 0) {
        o->seed = (uint64_t)clock_wall_ns();
        o->seed ^= (uint64_t)getpid() << 32;
        o->seed &= (UINT64_C(1) << 53) - 1; /* exact in JSON numbers */
    }
    if (o->ops)
        o->seconds = 0;
    return -1;
}

int parse_options(int argc, char **argv, bench_options *o)
{
    options_set set = {0};
    int rc = options_load_command_line(&set, "tally-bench", rows, sizeof(rows) / sizeof(rows[0]),
                                       argc, argv, o, usage);
    if (rc < 0)
        rc = check_together(&set, o);
    options_free(&set);
    return rc;
}
