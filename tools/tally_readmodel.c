/*
 * tally_readmodel.c — `tally-readmodel`, an example subscriber: keeps a read
 * model of account balances and entitlements in its own LMDB environment,
 * exactly once, through the subscriber-side inbox (clients/tally_inbox.h;
 * the model itself is tools/readmodel.c).
 *
 * It feeds itself with tally_log_read from the seq after its position,
 * long-polling for new events, and applies each page in one transaction
 * that also moves its position: a crash (kill -9 at any moment) resumes
 * exactly where the last commit left, and whatever arrives twice is dropped
 * by the inbox. The feed is one small function (feed_from_log) so that it
 * can be replaced by a durable subscriber of tallyd.
 *
 * Exit codes: 0 ok, 1 failure (server, store, or a gap in the log), 2 usage.
 */
#include "config.h"

#include "clients/inbox/tally_inbox.h"
#include "common/cli.h"
#include "common/options.h"
#include "tools/readmodel.h"

#include <inttypes.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define DATA_DEFAULT "./readmodel-data"
#define PAGE_EVENTS_DEFAULT 500
#define PAGE_EVENTS_MAX 1000 /* a log_read page (TALLY_LOG_READ_EVENTS_MAX) */
#define WAIT_MS_DEFAULT 10000
#define WAIT_MS_MAX 30000    /* TALLY_LOG_WAIT_MS_MAX */
#define TIMEOUT_MS_MAX 600000
#define MAP_SIZE_MB_DEFAULT 256
#define MAP_SIZE_MB_MAX (UINT64_C(1) << 24)
#define RETENTION_HOURS_DEFAULT 168
#define RETENTION_HOURS_MAX 87600
#define MS_PER_HOUR INT64_C(3600000)
#define RETRY_PAUSE_MS 1000

enum exit_code { EXIT_OK = 0, EXIT_FAILED = 1 }; /* 2, a usage error: options_load_command_line */

typedef struct options {
    const char *data;
    const char *url; /* NULL: libtally's default */
    uint64_t map_size_mb, retention_hours, page_events, wait_ms, timeout_ms; /* 0: default */
    bool once, dump, json;
} options;

/* SIGINT or SIGTERM: the feed stops after the read in progress. */
static volatile sig_atomic_t stop_signal;

static void stop_on(int sig) { stop_signal = sig; }

_Static_assert(PAGE_EVENTS_DEFAULT == 500 && WAIT_MS_DEFAULT == 10000 &&
                   MAP_SIZE_MB_DEFAULT == 256 && RETENTION_HOURS_DEFAULT == 168,
               "the defaults' texts in rows");

/* The options (common/options.h); --help is made from them. */
static const options_row rows[] = {
    {"data", "DIR", DATA_DEFAULT, "the read model's environment, created if missing",
     OPTIONS_TEXT(options, data)},
    {"url", "URL", NULL,
     "tallyd request endpoint (default $TALLY_URL, else tcp://127.0.0.1:7450; tls+tcp://: the "
     "CA and client certificate from $TALLY_TLS_CA, $TALLY_TLS_CERT, $TALLY_TLS_KEY)",
     OPTIONS_TEXT(options, url)},
    {"once", NULL, NULL, "catch up to the head of the log, then exit", OPTIONS_FLAG(options, once)},
    {"dump", NULL, NULL,
     "print the read model and exit (after --once if given); without --once the server is not "
     "contacted",
     OPTIONS_FLAG(options, dump)},
    {"json", NULL, NULL, "--dump as one JSON document: position, accounts, entitlements",
     OPTIONS_FLAG(options, json)},
    {"batch", "N", "500", "events per read and per transaction",
     OPTIONS_NUMBER(options, page_events, U64, 1, PAGE_EVENTS_MAX)},
    {"wait-ms", "N", "10000", "long-poll wait for new events",
     OPTIONS_NUMBER(options, wait_ms, U64, 1, WAIT_MS_MAX)},
    {"timeout-ms", "N", NULL,
     "per attempt of a read, on top of the wait; libtally retries 3 times, then a follower "
     "waits for the server and tries again; unset: libtally's 5000",
     OPTIONS_NUMBER(options, timeout_ms, U64, 1, TIMEOUT_MS_MAX)},
    {"map-size-mb", "N", "256", "LMDB map size of the read model in MiB",
     OPTIONS_NUMBER(options, map_size_mb, U64, 1, MAP_SIZE_MB_MAX)},
    {"retention-hours", "N", "168", "keep processed event ids this long",
     OPTIONS_NUMBER(options, retention_hours, U64, 1, RETENTION_HOURS_MAX)},
    OPTIONS_ROW_HELP,
};

static void usage(const options_set *set, FILE *f)
{
    fprintf(f,
"usage: tally-readmodel [--data DIR] [--url URL] [--once] [--dump [--json]]\n"
"                       [--batch N] [--wait-ms N] [--timeout-ms N]\n"
"                       [--map-size-mb N] [--retention-hours N] [--help]\n"
"\n"
"An example subscriber of tallyd: keeps a read model of account balances and\n"
"entitlements in its own LMDB environment, applying every event exactly once\n"
"through the subscriber-side inbox of libtally (docs/SUBSCRIBERS.md). It reads\n"
"the log after its position (log_read, long-polling) and commits each page\n"
"together with the new position, so it resumes after a crash on its own.\n"
"\n");
    options_print_help(set, f);
    fprintf(f,
"\n"
"Without --once or --dump it follows the log until SIGINT or SIGTERM (noticed\n"
"within --wait-ms). Exit codes: 0 ok, 1 failure, 2 usage error.\n");
}

/* Returns -1 to go on, else the exit code. */
static int parse_options(int argc, char **argv, options *o)
{
    *o = (options){0};
    options_set set = {0};
    int rc = options_load_command_line(&set, "tally-readmodel", rows,
                                       sizeof(rows) / sizeof(rows[0]), argc, argv, o, usage);
    if (rc < 0 && o->json && !o->dump)
        rc = options_usage_error(&set, "--json goes with --dump");
    options_free(&set);
    return rc;
}

/* ---- the feed ---- */

typedef int (*page_fn)(const tally_event *events, size_t count, void *ctx);

typedef struct feed_options {
    uint32_t page_events;
    uint32_t wait_ms;
    bool once; /* return once the head seen at the last read is reached */
} feed_options;

/* A page must start right after the last one and have no gap: events
 * removed by retention (or another store behind the URL) would otherwise
 * be missed silently. */
static int page_check(const tally_event *page, size_t n, uint64_t next)
{
    for (size_t i = 0; i < n; i++)
        if (page[i].seq != next + i) {
            fprintf(stderr, "tally-readmodel: the log gave seq %" PRIu64 " where %" PRIu64
                    " was due (events removed by retention, or another store?)\n",
                    page[i].seq, next + i);
            return TALLY_corrupt_record;
        }
    return TALLY_ok;
}

/* Faults a follower waits out: the server is restarting or busy. */
static bool server_away(int rc)
{
    return rc == TALLY_unreachable || rc == TALLY_timed_out || rc == TALLY_overloaded ||
           rc == TALLY_shutting_down;
}

/* Hand every event after after_seq to sink, page by page in seq order,
 * until caught up (once) or a stop is requested. Following, a server that
 * is away is retried every RETRY_PAUSE_MS; with once it is an error. */
static int feed_from_log(tally_client *c, uint64_t after_seq, const feed_options *o,
                         page_fn sink, void *ctx)
{
    tally_event *page = calloc(o->page_events, sizeof(*page));
    if (page == NULL)
        return TALLY_out_of_memory;
    uint64_t next = after_seq + 1, head = 0;
    int rc = TALLY_ok;
    while (rc == TALLY_ok && !stop_signal) {
        size_t n = 0;
        rc = tally_log_read(c, next, o->page_events, o->once ? 0 : o->wait_ms, page,
                            o->page_events, &n, &head);
        if (!o->once && server_away(rc)) {
            fprintf(stderr, "tally-readmodel: %s; retrying\n", tally_strerror(rc));
            usleep(RETRY_PAUSE_MS * 1000); /* a signal ends it early */
            rc = TALLY_ok;
            continue;
        }
        if (rc == TALLY_ok)
            rc = page_check(page, n, next);
        if (rc == TALLY_ok && n > 0)
            rc = sink(page, n, ctx);
        tally_events_release(page, n);
        next += n;
        if (rc == TALLY_ok && head < after_seq) {
            fprintf(stderr, "tally-readmodel: the server's head %" PRIu64 " is behind the "
                    "read model's position %" PRIu64 " (another store?)\n", head, after_seq);
            rc = TALLY_corrupt_record;
        }
        if (o->once && next > head)
            break;
    }
    free(page);
    return rc;
}

/* ---- main ---- */

static int apply_page(const tally_event *events, size_t count, void *ctx)
{
    return readmodel_apply_page(ctx, events, count);
}

static int follow(readmodel *rm, const options *o)
{
    tally_client_options co = {.url = o->url, .consumer = "readmodel",
                               .timeout_ms = (uint32_t)o->timeout_ms};
    tally_client *c = NULL;
    uint64_t position;
    int rc = readmodel_position(rm, &position);
    if (rc == TALLY_ok)
        rc = tally_client_open(&co, &c);
    if (rc != TALLY_ok)
        return rc;
    feed_options fo = {(uint32_t)o->page_events, (uint32_t)o->wait_ms, o->once};
    rc = feed_from_log(c, position, &fo, apply_page, rm);
    tally_client_close(c);
    tally_inbox_stats s;
    uint64_t now;
    if (rc == TALLY_ok && readmodel_position(rm, &now) == TALLY_ok &&
        tally_inbox_stats_get(readmodel_inbox(rm), &s) == TALLY_ok)
        fprintf(stderr, "tally-readmodel: at seq %" PRIu64 " (was %" PRIu64 "); inbox totals: "
                "applied %" PRIu64 ", repeated %" PRIu64 ", stale %" PRIu64 "\n", now, position,
                s.applied, s.repeated, s.stale);
    return rc;
}

int main(int argc, char **argv)
{
    options o;
    int rc = parse_options(argc, argv, &o);
    if (rc >= 0)
        return rc;
    cli_catch_stop_signals(stop_on, false, false);
    readmodel_options ro = {.path = o.data, .map_size_bytes = o.map_size_mb << 20,
                            .retention_ms = (int64_t)o.retention_hours * MS_PER_HOUR};
    readmodel *rm = NULL;
    rc = readmodel_open(&ro, &rm);
    if (rc != TALLY_ok) {
        fprintf(stderr, "tally-readmodel: cannot open %s: %s\n", o.data, tally_strerror(rc));
        return EXIT_FAILED;
    }
    const char *step = "follow";
    if (o.once || !o.dump)
        rc = follow(rm, &o);
    else
        rc = TALLY_ok;
    if (rc == TALLY_ok && o.dump) {
        step = "dump";
        rc = readmodel_dump(rm, o.json, stdout);
    }
    readmodel_close(rm);
    if (rc != TALLY_ok) {
        fprintf(stderr, "tally-readmodel: %s failed: %s\n", step, tally_strerror(rc));
        return EXIT_FAILED;
    }
    return EXIT_OK;
}
