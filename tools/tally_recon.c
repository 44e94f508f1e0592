/*
 * tally_recon.c — tally-recon, the reconciliation tool of tally.
 *
 * It opens a store read-only — a live one next to a running tallyd, or a
 * copy — takes one read transaction (a consistent snapshot: LMDB readers
 * never wait for the writer and the writer never waits for them; the
 * writer's lock DIR/tally.lock is not touched) and runs in it:
 *
 *   - every check of ledger/invariants.c (BRIEF §6), listed by
 *     ledger_invariant_check_name, so a check added there shows here;
 *   - `statement`: a statement file compared with the snapshot
 *     (tools/recon_statement.h).
 *
 * It reports per check ok or N findings (each naming its entity), as text
 * or as one JSON document (--json; schema in docs/OPERATIONS.md), with
 * progress on stderr when stderr is a terminal (common/progress.h: the
 * phase, items done of its total (the log walk: events of the head seq),
 * rate and ETA; --progress / --no-progress force it either way).
 *
 * Memory is bounded by what the checks hold (docs/OPERATIONS.md: per
 * account, hold and entitlement for the fold; nothing with --no-rebuild)
 * plus --max-findings listed findings per check.
 *
 * Exit codes: 0 clean, 1 discrepancies found, 2 could not run (usage, the
 * directory is missing or not a tally store, unreadable, a bad statement
 * file, interrupted).
 */
#include "config.h"

#include "common/cli.h"
#include "common/clock.h"
#include "common/error.h"
#include "common/json_text.h"
#include "common/limits.h"
#include "common/options.h"
#include "common/progress.h"
#include "ledger/invariants.h"
#include "ledger/retention.h"
#include "log/log.h"
#include "log/store.h"
#include "tools/recon_statement.h"

#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define EXIT_CLEAN 0
#define EXIT_DISCREPANCIES 1
#define EXIT_CANNOT_RUN 2

#define RECON_JSON_FORMAT 1
/* The invariant checks, `statement`, and a few a newer invariants module
 * may report without listing them. */
#define RECON_CHECKS_MAX (LEDGER_INVARIANT_CHECKS_MAX + 8)
#define RECON_CHECK_NAME_BYTES 32
#define RECON_LISTED_DEFAULT 20
#define RECON_LISTED_MAX 100000
/* Mapped beyond data.mdb's size, for what a live writer adds between the
 * size check and the snapshot (address space, not memory). */
#define RECON_MAP_HEADROOM_BYTES (UINT64_C(1) << 30)
#define RECON_MESSAGE_BYTES 1024

_Static_assert(RECON_LISTED_DEFAULT <= RECON_LISTED_MAX, "default within the maximum");

typedef struct recon_options {
    const char *data;
    const char *statement;
    bool json;
    bool no_rebuild;
    bool drift_set;
    uint64_t drift;
    bool through_set;
    uint64_t through_seq;
    uint64_t listed_max; /* findings listed per check */
    progress_mode progress;
} recon_options;

typedef struct recon_finding {
    char *entity;
    char *detail;
    const char *kind; /* statement findings: missing, extra, ...; else NULL */
} recon_finding;

typedef struct recon_check {
    char name[RECON_CHECK_NAME_BYTES];
    const char *skipped; /* why it did not run, or NULL */
    uint64_t findings;   /* counted */
    size_t listed_count;
    recon_finding *listed; /* the first listed_max findings */
} recon_check;

typedef struct recon {
    recon_options opt;
    recon_check checks[RECON_CHECKS_MAX];
    size_t check_count;
    int fault; /* out of memory while collecting findings */
    ledger_invariant_stats stats;
    log_head head;
    uint64_t first_seq;
    uint64_t floor_seq; /* log retention: events up to here were removed */
    char instance_id[33];
    int stale_readers; /* reader slots of dead processes cleared */
    recon_statement *statement;
    recon_statement_counts statement_counts;
    progress progress;
    double elapsed_s;
} recon;

static volatile sig_atomic_t stop_requested;

static void on_signal(int sig)
{
    (void)sig;
    stop_requested = 1;
}

/* ---- the options ---- */

_Static_assert(RECON_LISTED_DEFAULT == 20, "--max-findings' default text");

/* The options (common/options.h); --help lists them from here. */
static const options_row rows[] = {
    {"data", "DIR", NULL, "the store's directory (as given to tallyd --data); required",
     OPTIONS_TEXT(recon_options, data)},
    {"json", NULL, NULL, "one JSON document on stdout instead of the text report",
     OPTIONS_FLAG(recon_options, json)},
    {"statement", "FILE", NULL,
     "compare with FILE: CSV with a header line, or JSON lines; account balances (account_id "
     "and one or more of debits_posted, credits_posted, debits_pending, credits_pending, "
     "balance = credits_posted - debits_posted) or event ids a downstream holds (event_id, "
     "optional seq); reports missing, extra, mismatched and duplicate entries",
     OPTIONS_TEXT(recon_options, statement)},
    {"drift", "N", "0", "balances that differ by at most N match",
     OPTIONS_NUMBER(recon_options, drift, U64, 0, UINT64_MAX), .noun = "non-negative integer"},
    {"through", "SEQ", NULL,
     "events after SEQ are not missing from an event statement (unset: the snapshot's head)",
     OPTIONS_NUMBER(recon_options, through_seq, U64, 1, UINT64_MAX), .noun = "seq"},
    {"no-rebuild", NULL, NULL,
     "skip folding the log (the rebuild check): faster, and nothing is held per account, hold "
     "or entitlement",
     OPTIONS_FLAG(recon_options, no_rebuild)},
    {"max-findings", "N", "20", "findings listed per check (all are counted)",
     OPTIONS_NUMBER(recon_options, listed_max, U64, 0, RECON_LISTED_MAX), .noun = "count"},
    PROGRESS_OPTION_ROWS(recon_options, progress),
    OPTIONS_ROW_HELP,
};

static void print_help(const options_set *set, FILE *f)
{
    fprintf(f,
"Usage: tally-recon --data DIR [--json] [--statement FILE] [--no-rebuild]\n"
"                   [--drift N] [--through SEQ] [--max-findings N]\n"
"                   [--progress | --no-progress]\n"
"\n"
"Check a tally store: a live one next to a running tallyd (read-only, from one\n"
"consistent snapshot; tallyd is never blocked and its lock is not taken) or a\n"
"copy. Every invariant check runs and reports ok or its findings, each naming\n"
"the entity it concerns:\n"
"\n");
    for (size_t i = 0; i < ledger_invariant_check_count(); i++)
        fprintf(f, "  %s\n", ledger_invariant_check_name(i));
    fprintf(f,
"  statement        (with --statement) the store against a statement file\n"
"\n"
"Options:\n");
    options_print_help(set, f);
    fprintf(f,
"\n"
"Progress goes to stderr when it is a terminal: a line rewritten in place\n"
"with the phase, items done of its total (the log walk: events of the head\n"
"seq), the rate and the ETA. stdout (the report, --json) is the same either\n"
"way. docs/OPERATIONS.md describes\n"
"the checks, the statement formats and the JSON document.\n"
"\n"
"Exit codes: 0 clean, 1 discrepancies found, 2 could not run (usage, no such\n"
"directory, not a tally store, unreadable, bad statement file, interrupted).\n");
}

/* What the options must satisfy together; -1 when they do. */
static int check_together(const options_set *set, const recon_options *o)
{
    if (o->data == NULL || o->data[0] == '\0')
        return options_usage_error(set, "--data DIR is required");
    if (strlen(o->data) > TALLY_PATH_BYTES_MAX)
        return options_usage_error(set, "--data: longer than %d bytes", TALLY_PATH_BYTES_MAX);
    if ((o->drift_set || o->through_set) && o->statement == NULL)
        return options_usage_error(set, "--drift and --through apply to --statement");
    return -1;
}

/* Returns -1 to go on, or the exit code. */
static int parse_options(int argc, char **argv, recon_options *o)
{
    *o = (recon_options){0};
    options_set set = {0};
    int rc = options_load_command_line(&set, "tally-recon", rows, sizeof(rows) / sizeof(rows[0]),
                                       argc, argv, o, print_help);
    if (rc < 0) {
        o->drift_set = options_given_count(&set, "drift", NULL) > 0;
        o->through_set = options_given_count(&set, "through", NULL) > 0;
        rc = check_together(&set, o);
    }
    options_free(&set);
    return rc;
}

/* ---- errors that stop the run ---- */

static int cannot_run(const recon *r, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Print the reason (stderr; with --json also a document on stdout). */
static int cannot_run(const recon *r, int code, const char *fmt, ...)
{
    char message[RECON_MESSAGE_BYTES];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(message, sizeof(message), fmt, ap);
    va_end(ap);
    fprintf(stderr, "tally-recon: %s\n", message);
    if (r->opt.json) {
        json_t *doc = json_pack("{s:s, s:i, s:s, s:{s:s, s:s}}", "tool", "tally-recon",
                                "format", RECON_JSON_FORMAT, "status", "error", "error", "code",
                                tally_strerror(code), "message", message);
        if (doc) {
            json_dumpf(doc, stdout, JSON_INDENT(2));
            fputc('\n', stdout);
            json_decref(doc);
        }
    }
    return EXIT_CANNOT_RUN;
}

/* ---- collecting findings ---- */

static recon_check *check_named(recon *r, const char *name)
{
    for (size_t i = 0; i < r->check_count; i++)
        if (strcmp(r->checks[i].name, name) == 0)
            return &r->checks[i];
    if (r->check_count == RECON_CHECKS_MAX)
        return &r->checks[RECON_CHECKS_MAX - 1]; /* never with today's module */
    recon_check *c = &r->checks[r->check_count++];
    snprintf(c->name, sizeof(c->name), "%s", name);
    return c;
}

static void check_add(recon *r, recon_check *c, const char *kind, const char *entity,
                      const char *detail)
{
    c->findings++;
    if (c->listed_count >= r->opt.listed_max)
        return;
    if (c->listed == NULL) {
        c->listed = calloc(r->opt.listed_max, sizeof(recon_finding));
        if (c->listed == NULL) {
            r->fault = TALLY_out_of_memory;
            return;
        }
    }
    recon_finding *f = &c->listed[c->listed_count];
    f->entity = strdup(entity);
    f->detail = strdup(detail);
    f->kind = kind;
    if (f->entity == NULL || f->detail == NULL) {
        free(f->entity);
        free(f->detail);
        r->fault = TALLY_out_of_memory;
        return;
    }
    c->listed_count++;
}

static void on_invariant(const char *check, const char *entity, const char *detail, void *ctx)
{
    recon *r = ctx;
    check_add(r, check_named(r, check), NULL, entity, detail);
}

static void on_statement(const char *kind, const char *entity, const char *detail, void *ctx)
{
    recon *r = ctx;
    static const char *const kinds[] = {"missing", "extra", "mismatched", "duplicate"};
    const char *k = kinds[0];
    for (size_t i = 0; i < sizeof(kinds) / sizeof(kinds[0]); i++)
        if (strcmp(kind, kinds[i]) == 0)
            k = kinds[i];
    check_add(r, check_named(r, "statement"), k, entity, detail);
}

/* Called every LEDGER_INVARIANT_PROGRESS_ITEMS items of a phase (a counter
 * check in the walks) and at its end; the line itself is rate-limited. */
static bool on_progress(const char *phase, uint64_t done, uint64_t total, void *ctx)
{
    recon *r = ctx;
    if (stop_requested)
        return false;
    progress_update(&r->progress, phase, done, total);
    return true;
}

/* Every check the invariants module runs, then `statement`. */
static void checks_init(recon *r)
{
    for (size_t i = 0; i < ledger_invariant_check_count(); i++) {
        recon_check *c = check_named(r, ledger_invariant_check_name(i));
        if (r->opt.no_rebuild && ledger_invariant_check_needs_fold(i))
            c->skipped = "--no-rebuild";
    }
    recon_check *c = check_named(r, "statement");
    if (r->opt.statement == NULL)
        c->skipped = "no --statement";
}

static void checks_free(recon *r)
{
    for (size_t i = 0; i < r->check_count; i++) {
        recon_check *c = &r->checks[i];
        for (size_t j = 0; j < c->listed_count; j++) {
            free(c->listed[j].entity);
            free(c->listed[j].detail);
        }
        free(c->listed);
    }
}

/* The module counts every finding, also those past the listing cap. */
static void checks_count(recon *r)
{
    for (size_t i = 0; i < ledger_invariant_check_count(); i++)
        check_named(r, ledger_invariant_check_name(i))->findings = r->stats.findings_by_check[i];
}

static uint64_t findings_total(const recon *r)
{
    uint64_t n = 0;
    for (size_t i = 0; i < r->check_count; i++)
        n += r->checks[i].findings;
    return n;
}

/* ---- the run ---- */

static int open_store(recon *r, store **out)
{
    const char *dir = r->opt.data;
    struct stat sb;
    if (stat(dir, &sb) != 0) {
        int e = errno;
        return cannot_run(r, store_translate(e), "%s: %s", dir,
                          e == ENOENT ? "no such directory" : strerror(e));
    }
    if (!S_ISDIR(sb.st_mode))
        return cannot_run(r, TALLY_invalid_argument, "%s: not a directory", dir);
    char data_path[TALLY_PATH_BYTES_MAX + 16];
    snprintf(data_path, sizeof(data_path), "%s/data.mdb", dir);
    if (stat(data_path, &sb) != 0) {
        int e = errno;
        return cannot_run(r, store_translate(e), "%s: %s", dir,
                          e == ENOENT ? "not a tally store (no data.mdb)" : strerror(e));
    }
    uint64_t size = (uint64_t)sb.st_size;
    if (size > TALLY_MAP_SIZE_BYTES_MAX - RECON_MAP_HEADROOM_BYTES)
        return cannot_run(r, TALLY_invalid_argument, "%s: larger than a tally store can be",
                          data_path);
    char why[TALLY_PATH_BYTES_MAX + 256] = "";
    /* LMDB would use damaged meta pages as it finds them: a file cut short
     * would fault (SIGBUS) in the middle of the checks. */
    int meta = store_meta_pages_check(dir, why, sizeof(why));
    if (meta == TALLY_corrupt_record || meta == TALLY_store_version_mismatch)
        return cannot_run(r, meta, "%s", why);
    why[0] = '\0';
    store_options o = {.path = dir, .read_only = true,
                       .map_size_bytes = (size + RECON_MAP_HEADROOM_BYTES) & ~(uint64_t)0xfffff,
                       .why = why, .why_bytes = sizeof(why)};
    int rc = store_open(&o, out);
    switch (rc) {
    case TALLY_ok: break;
    case TALLY_not_found:
        return cannot_run(r, rc, "%s: not a tally store (its databases are missing; a store "
                                 "written by an older tally lacks some until tallyd opens it)",
                          dir);
    case TALLY_store_version_mismatch:
        if (why[0])
            return cannot_run(r, rc, "%s", why);
        return cannot_run(r, rc, "%s: written in another store format (this tally-recon reads "
                                 "formats %d to %d)", dir, STORE_FORMAT_VERSION_OLDEST,
                          STORE_FORMAT_VERSION);
    case TALLY_corrupt_record:
        if (why[0])
            return cannot_run(r, rc, "%s", why);
        return cannot_run(r, rc, "%s: data.mdb is not an LMDB environment or is damaged", dir);
    case TALLY_read_only:
        return cannot_run(r, rc, "%s: permission denied (tally-recon reads data.mdb and "
                                 "registers as a reader in lock.mdb, which needs write access)",
                          dir);
    default:
        return cannot_run(r, rc, "%s: cannot open the store: %s", dir, tally_strerror(rc));
    }
    /* A reader killed without closing (tally-recon interrupted with
     * SIGKILL, a crashed tool) leaves its slot in lock.mdb and pins its
     * snapshot: the writer cannot reuse pages freed since. Clear slots of
     * processes that no longer exist, as `mdb_stat -rr` does. */
    if (mdb_reader_check(store_env(*out), &r->stale_readers) != MDB_SUCCESS)
        r->stale_readers = 0;
    return -1;
}

static int load_statement(recon *r)
{
    char err[RECON_STATEMENT_ERROR_BYTES + 64];
    int rc = recon_statement_load(r->opt.statement, &r->statement, err, sizeof(err));
    if (rc != TALLY_ok)
        return cannot_run(r, rc, "statement %s", err);
    if (recon_statement_kind_of(r->statement) != RECON_STATEMENT_BALANCES && r->opt.drift_set)
        return cannot_run(r, TALLY_invalid_argument,
                          "--drift applies to a statement of balances, %s holds events",
                          r->opt.statement);
    if (recon_statement_kind_of(r->statement) != RECON_STATEMENT_EVENTS && r->opt.through_set)
        return cannot_run(r, TALLY_invalid_argument,
                          "--through applies to a statement of events, %s holds balances",
                          r->opt.statement);
    return -1;
}

/* All checks in one read transaction. Returns -1 when they ran, or the
 * exit code. */
static int run_checks(recon *r, store *st)
{
    store_txn t;
    int rc = store_txn_begin(st, NULL, true, &t);
    if (rc != TALLY_ok)
        return cannot_run(r, rc, "%s: cannot begin a read transaction: %s", r->opt.data,
                          tally_strerror(rc));
    tally_id128_to_hex(store_instance_id(st), r->instance_id);
    rc = log_head_get(&t, &r->head);
    if (rc == TALLY_ok)
        rc = log_first_seq(&t, &r->first_seq);
    ledger_log_floor floor;
    if (rc == TALLY_ok)
        rc = ledger_log_floor_get(&t, &floor);
    r->floor_seq = rc == TALLY_ok ? floor.seq : 0;
    recon_statement_options so = {.drift = r->opt.drift, .through_seq = r->opt.through_seq,
                                  .progress = on_progress, .progress_ctx = r};
    if (rc == TALLY_ok && r->statement)
        rc = recon_statement_begin(r->statement, &t, &so, on_statement, r);
    ledger_invariant_options io = {
        .skip_rebuild = r->opt.no_rebuild,
        .findings_per_check_max = r->opt.listed_max ? r->opt.listed_max : 1,
        .progress = on_progress,
        .progress_ctx = r,
        /* A statement of events is compared in the checks' one log walk. */
        .each_event = r->statement && recon_statement_kind_of(r->statement) ==
                                          RECON_STATEMENT_EVENTS
                          ? recon_statement_event
                          : NULL,
        .each_event_ctx = r->statement,
    };
    if (rc == TALLY_ok)
        rc = ledger_invariants_check_with(&t, &io, on_invariant, r, &r->stats);
    if (rc == TALLY_ok && r->statement)
        rc = recon_statement_finish(r->statement, &r->statement_counts);
    store_txn_abort(&t);
    progress_end(&r->progress);
    if (rc == TALLY_ok)
        rc = r->fault;
    if (rc == TALLY_shutting_down)
        return cannot_run(r, rc, "interrupted before the checks finished");
    if (rc != TALLY_ok)
        return cannot_run(r, rc, "%s: the checks could not read the store: %s", r->opt.data,
                          tally_strerror(rc));
    checks_count(r);
    return -1;
}

/* ---- reports ---- */

static const char *check_status(const recon_check *c)
{
    return c->skipped ? "skipped" : c->findings ? "failed" : "ok";
}

static void print_statement_summary(const recon *r)
{
    const recon_statement_counts *n = &r->statement_counts;
    char drift[80] = "", floor[80] = "";
    if (recon_statement_kind_of(r->statement) == RECON_STATEMENT_BALANCES)
        snprintf(drift, sizeof(drift), " (%" PRIu64 " within drift %" PRIu64 ")",
                 n->within_drift, r->opt.drift);
    if (n->below_floor)
        snprintf(floor, sizeof(floor), ", %" PRIu64 " below the log floor (not compared)",
                 n->below_floor);
    printf("  %-16s %s of %s, %" PRIu64 " entries: %" PRIu64 " matched%s, %" PRIu64
           " missing, %" PRIu64 " extra, %" PRIu64 " mismatched, %" PRIu64 " duplicates%s\n",
           "", recon_statement_format_name(recon_statement_format_of(r->statement)),
           recon_statement_kind_name(recon_statement_kind_of(r->statement)), n->entries,
           n->matched, drift, n->missing, n->extra, n->mismatched, n->duplicates, floor);
}

static void print_text(const recon *r)
{
    char head_hash[2 * LOG_HASH_BYTES + 1];
    for (int i = 0; i < LOG_HASH_BYTES; i++)
        snprintf(head_hash + 2 * i, 3, "%02x", r->head.hash[i]);
    printf("tally-recon %s\n", r->opt.data);
    printf("snapshot: head seq %" PRIu64 " (hash %.16s...), first seq %" PRIu64
           ", log floor %" PRIu64 ", instance %s\n\n",
           r->head.seq, head_hash, r->first_seq, r->floor_seq, r->instance_id);
    size_t failed = 0;
    for (size_t i = 0; i < r->check_count; i++) {
        const recon_check *c = &r->checks[i];
        if (c->skipped)
            printf("  %-16s skipped (%s)\n", c->name, c->skipped);
        else if (c->findings == 0)
            printf("  %-16s ok\n", c->name);
        else
            printf("  %-16s FAILED: %" PRIu64 " finding%s\n", c->name, c->findings,
                   c->findings == 1 ? "" : "s");
        if (strcmp(c->name, "statement") == 0 && r->statement)
            print_statement_summary(r);
        for (size_t j = 0; j < c->listed_count; j++)
            printf("  %-16s   %s%s%s: %s\n", "", c->listed[j].kind ? c->listed[j].kind : "",
                   c->listed[j].kind ? " " : "", c->listed[j].entity, c->listed[j].detail);
        if (c->findings > c->listed_count)
            printf("  %-16s   ... and %" PRIu64 " more (--max-findings N lists more)\n", "",
                   c->findings - c->listed_count);
        failed += c->findings > 0;
    }
    const ledger_invariant_stats *s = &r->stats;
    printf("\nexamined %" PRIu64 " events, %" PRIu64 " accounts, %" PRIu64 " transfers, %" PRIu64
           " entitlements, %" PRIu64 " inbox records in %.1f s\n",
           s->events, s->accounts, s->transfers, s->entitlements, s->inbox_records,
           r->elapsed_s);
    if (r->stale_readers)
        printf("cleared %d stale reader slot%s of processes that no longer exist\n",
               r->stale_readers, r->stale_readers == 1 ? "" : "s");
    uint64_t total = findings_total(r);
    if (total == 0)
        printf("result: clean\n");
    else
        printf("result: %" PRIu64 " finding%s in %zu check%s: discrepancies found\n", total,
               total == 1 ? "" : "s", failed, failed == 1 ? "" : "s");
}

/* u64 as a JSON integer, or as a decimal string above 2^63-1. */
static json_t *json_u64(uint64_t v)
{
    char text[24];
    snprintf(text, sizeof(text), "%" PRIu64, v);
    return v <= INT64_MAX ? json_integer((json_int_t)v) : json_string(text);
}

static json_t *statement_json(const recon *r)
{
    const recon_statement_counts *n = &r->statement_counts;
    return json_pack("{s:o, s:s, s:s, s:o, s:o*, s:{s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:o}}",
                     "file",
                     json_text(r->opt.statement), "format",
                     recon_statement_format_name(recon_statement_format_of(r->statement)),
                     "kind", recon_statement_kind_name(recon_statement_kind_of(r->statement)),
                     "drift", json_u64(r->opt.drift), "through_seq",
                     r->opt.through_set ? json_u64(r->opt.through_seq) : NULL, "counts",
                     "entries", json_u64(n->entries), "matched", json_u64(n->matched),
                     "within_drift", json_u64(n->within_drift), "missing", json_u64(n->missing),
                     "extra", json_u64(n->extra), "mismatched", json_u64(n->mismatched),
                     "duplicates", json_u64(n->duplicates), "below_floor",
                     json_u64(n->below_floor));
}

static json_t *check_json(const recon *r, const recon_check *c)
{
    json_t *findings = json_array();
    for (size_t j = 0; findings && j < c->listed_count; j++) {
        const recon_finding *f = &c->listed[j];
        json_t *row = json_pack("{s:o, s:o, s:s*}", "entity", json_text(f->entity), "detail",
                                json_text(f->detail), "kind", f->kind);
        if (json_array_append_new(findings, row) != 0) {
            json_decref(findings);
            findings = NULL;
        }
    }
    json_t *o = json_pack("{s:s, s:s, s:s*, s:{s:o, s:o}, s:o}", "name", c->name, "status",
                          check_status(c), "reason", c->skipped, "counts", "findings",
                          json_u64(c->findings), "listed", json_u64(c->listed_count),
                          "findings", findings);
    if (o && strcmp(c->name, "statement") == 0 && r->statement &&
        json_object_set_new(o, "statement", statement_json(r)) != 0) {
        json_decref(o);
        o = NULL;
    }
    return o;
}

static int print_json(const recon *r)
{
    char head_hash[2 * LOG_HASH_BYTES + 1];
    for (int i = 0; i < LOG_HASH_BYTES; i++)
        snprintf(head_hash + 2 * i, 3, "%02x", r->head.hash[i]);
    json_t *checks = json_array();
    for (size_t i = 0; checks && i < r->check_count; i++) {
        if (json_array_append_new(checks, check_json(r, &r->checks[i])) != 0) {
            json_decref(checks);
            checks = NULL;
        }
    }
    const ledger_invariant_stats *s = &r->stats;
    uint64_t total = findings_total(r);
    json_t *doc = json_pack(
        "{s:s, s:i, s:o, s:s, s:o, s:{s:o, s:s, s:o, s:o, s:s, s:i}, "
        "s:{s:o, s:o, s:o, s:o, s:o}, s:o, s:I}",
        "tool", "tally-recon", "format", RECON_JSON_FORMAT, "data", json_text(r->opt.data),
        "status", total ? "discrepancies" : "clean", "findings_total", json_u64(total), "snapshot",
        "head_seq", json_u64(r->head.seq), "head_hash", head_hash, "first_seq",
        json_u64(r->first_seq), "log_floor_seq", json_u64(r->floor_seq), "instance_id",
        r->instance_id, "stale_readers_cleared",
        r->stale_readers, "examined", "events", json_u64(s->events), "accounts",
        json_u64(s->accounts), "transfers", json_u64(s->transfers), "entitlements",
        json_u64(s->entitlements), "inbox_records", json_u64(s->inbox_records), "checks",
        checks, "elapsed_ms", (json_int_t)(r->elapsed_s * 1000.0));
    if (doc == NULL || json_dumpf(doc, stdout, JSON_INDENT(2)) != 0) {
        json_decref(doc);
        fprintf(stderr, "tally-recon: out of memory writing the JSON report\n");
        return EXIT_CANNOT_RUN;
    }
    fputc('\n', stdout);
    json_decref(doc);
    return -1;
}

static int recon_run(recon *r)
{
    checks_init(r);
    if (r->opt.statement) {
        int exit_code = load_statement(r);
        if (exit_code >= 0)
            return exit_code;
    }
    int64_t start = clock_mono_ms();
    store *st = NULL;
    int exit_code = open_store(r, &st);
    if (exit_code >= 0)
        return exit_code;
    progress_init(&r->progress, "tally-recon", r->opt.progress, PROGRESS_ITEMS);
    cli_catch_stop_signals(on_signal, true, false);
    exit_code = run_checks(r, st);
    store_close(st); /* before the report: the snapshot is released */
    if (exit_code >= 0)
        return exit_code;
    r->elapsed_s = (double)(clock_mono_ms() - start) / 1000.0;
    if (r->opt.json)
        exit_code = print_json(r);
    else
        print_text(r);
    if (exit_code >= 0)
        return exit_code;
    if (fflush(stdout) != 0 || ferror(stdout)) {
        fprintf(stderr, "tally-recon: cannot write the report: %s\n", strerror(errno));
        return EXIT_CANNOT_RUN;
    }
    return findings_total(r) ? EXIT_DISCREPANCIES : EXIT_CLEAN;
}

int main(int argc, char **argv)
{
    recon *r = calloc(1, sizeof(*r));
    if (r == NULL) {
        fputs("tally-recon: out of memory\n", stderr);
        return EXIT_CANNOT_RUN;
    }
    int exit_code = parse_options(argc, argv, &r->opt);
    if (exit_code < 0)
        exit_code = recon_run(r);
    checks_free(r);
    recon_statement_free(r->statement);
    free(r);
    return exit_code;
}
