/*
 * check_recon.c — tests of tools/tally_recon.c: the real tally-recon binary
 * run against real stores.
 *
 * main() builds one store through the ledger API (accounts on two ledgers
 * with limit flags, transfers, holds posted in full and in part, voided and
 * expired, a rejection, a replay, an atomic chain, entitlements granted,
 * extended, revoked and expired). Each test copies it to a fresh directory,
 * damages the copy through the store API (log/store.h and the ledger headers) and runs
 * `tally-recon --json` on it, asserting the exit code and that the report
 * names the problem: the check and the entity (with U+FFFD for bytes that
 * are not UTF-8). Also covered: a clean copy
 * exits 0; --no-rebuild; the findings cap; statements of balances and of
 * event ids in CSV and JSON lines (matching, missing, extra, mismatched,
 * within drift, duplicates, --through); every exit-2 case; a live tallyd's
 * directory checked while tally-bench writes to it; progress only on a
 * terminal; --help and the check list against ledger/invariants*.c.
 */
#include "common/clock.h"
#include "ledger/history.h"
#include "ledger/retention.h"
#include "log/subscriber.h"
#include "log/subscriber_partition.h"
#include "tests/support/run.h"
#include "tests/support/wait.h"
#include "tests/support/suite.h"
#include "tests/support/tallyd_harness.h"
#include "tests/support/test_support.h"
#include "tools/recon_statement.h"

#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <glob.h>
#include <inttypes.h>
#include <jansson.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define TEST_TIMEOUT_S 120
#define LIVE_TIMEOUT_S 300
#define DAY_MS INT64_C(86400000)
#define EXIT_CLEAN 0
#define EXIT_DISCREPANCIES 1
#define EXIT_CANNOT_RUN 2

/* ---- the store every test copies ---- */

#define SUBSCRIBER "analytics"
/* Offset of the ack floor in a cursor record (log/subscriber.c): version,
 * four u32 of config, the backoff steps; then delivered_seq. */
#define CURSOR_FLOOR_OFFSET (1 + 4 * 4 + 4 * TALLY_SUB_BACKOFF_STEPS_MAX)

typedef struct master {
    char dir[256];
    uint64_t head;
    uint64_t parked_seq; /* the subscriber's dead letter */
    uint64_t seq_t101;  /* transfer 101: 1 -> 2, 100 (key t-101) */
    uint64_t seq_open[8];
    uint64_t accounts;
} master;

static master m;

static int master_apply(store *st, int64_t now_ms, const char *key, const ledger_command *cmd,
                        int expect_code, ledger_outcome *out)
{
    ledger_request req = {.consumer = tally_str_from("test"), .key = tally_str_from(key),
                          .command = *cmd};
    int rc = ledger_apply_one(st, &req, now_ms, out);
    if (rc != TALLY_ok || out->code != expect_code) {
        fprintf(stderr, "master store: %s: %s / %s\n", key, tally_strerror(rc),
                tally_strerror(out->code));
        return -1;
    }
    return 0;
}

static int master_accounts(store *st, int64_t now)
{
    static const struct { uint64_t id; uint32_t ledger; uint16_t flags; } accounts[] = {
        {1, 1, 0}, {2, 1, LEDGER_ACCOUNT_DEBITS_MUST_NOT_EXCEED_CREDITS}, {3, 1, 0},
        {4, 2, 0}, {5, 2, LEDGER_ACCOUNT_CREDITS_MUST_NOT_EXCEED_DEBITS}, {6, 1, 0},
    };
    ledger_outcome out;
    for (size_t i = 0; i < sizeof(accounts) / sizeof(accounts[0]); i++) {
        char key[32];
        snprintf(key, sizeof(key), "open-%" PRIu64, accounts[i].id);
        ledger_command c = test_cmd_open(accounts[i].id, accounts[i].ledger, accounts[i].flags);
        if (master_apply(st, now, key, &c, TALLY_ok, &out) != 0)
            return -1;
        m.seq_open[accounts[i].id] = out.first_seq;
    }
    return 0;
}

/* Transfers, holds resolved every way, a rejection, a replay, entitlements. */
static int master_commands(store *st, int64_t now)
{
    struct { const char *key; ledger_command cmd; int code; } steps[] = {
        {"t-101", test_cmd_transfer(101, 1, 2, 100), TALLY_ok},
        {"t-102", test_cmd_transfer(102, 2, 3, 30), TALLY_ok},
        {"hold-103", test_cmd_hold(103, 2, 3, 20, 3600), TALLY_ok},
        {"hold-104", test_cmd_hold(104, 1, 3, 10, 600), TALLY_ok},
        {"post-104", test_cmd_post(104, 0), TALLY_ok},
        {"hold-105", test_cmd_hold(105, 1, 6, 50, 600), TALLY_ok},
        {"post-105", test_cmd_post(105, 20), TALLY_ok},
        {"hold-106", test_cmd_hold(106, 3, 1, 5, 600), TALLY_ok},
        {"void-106", test_cmd_void(106), TALLY_ok},
        {"hold-107", test_cmd_hold(107, 1, 3, 7, 60), TALLY_ok},
        {"too-much", test_cmd_transfer(199, 2, 3, 1000), TALLY_exceeds_credits},
        {"t-101", test_cmd_transfer(101, 1, 2, 100), TALLY_ok}, /* a replay */
        {"grant-1", test_cmd_grant("user-1", "pro", now + 30 * DAY_MS), TALLY_ok},
        {"grant-2", test_cmd_grant("user-2", "basic", 0), TALLY_ok},
        {"grant-3", test_cmd_grant("user-3", "trial", now + 30000), TALLY_ok},
        {"grant-4", test_cmd_grant("user-4", "pro", now + DAY_MS), TALLY_ok},
        {"revoke-4", test_cmd_revoke("user-4", "pro"), TALLY_ok},
        {"extend-1", test_cmd_extend("user-1", "pro", now + 60 * DAY_MS), TALLY_ok},
    };
    ledger_outcome out;
    for (size_t i = 0; i < sizeof(steps) / sizeof(steps[0]); i++) {
        if (master_apply(st, now, steps[i].key, &steps[i].cmd, steps[i].code, &out) != 0)
            return -1;
        if (i == 0)
            m.seq_t101 = out.first_seq;
    }
    /* Ledger 2, where account 5 may not take more credits than debits. */
    ledger_command back = test_cmd_transfer(108, 5, 4, 7), forth = test_cmd_transfer(109, 4, 5, 3);
    back.u.transfer.ledger = forth.u.transfer.ledger = 2;
    /* A chain: account 7 opened and paid in one commit. */
    ledger_command members[2] = {test_cmd_open(7, 1, 0), test_cmd_transfer(110, 1, 7, 15)};
    ledger_command chain = {.kind = LEDGER_CHAIN};
    chain.u.chain = (ledger_chain){.members = members, .count = 2};
    now += 120000; /* hold 107 and user-3/trial expire in the sweep of the next apply */
    return master_apply(st, now, "t-108", &back, TALLY_ok, &out) ||
                   master_apply(st, now, "t-109", &forth, TALLY_ok, &out) ||
                   master_apply(st, now, "chain-1", &chain, TALLY_ok, &out)
               ? -1
               : 0;
}

/* A subscriber that fetched 5 events, acked 3 and parked the 4th. */
static int master_subscriber(store *st, int64_t now)
{
    store_txn t;
    if (store_txn_begin(st, NULL, false, &t) != TALLY_ok)
        return -1;
    sub_start start = {.kind = SUB_START_BEGINNING};
    sub_config cfg;
    sub_config_default(&cfg);
    sub_delivery d[5];
    uint32_t count = 0, acked;
    int64_t next_due;
    bool created;
    sub_state after;
    tally_str name = tally_str_from(SUBSCRIBER);
    m.parked_seq = 4;
    bool bad = sub_create(&t, name, &start, &cfg, now, &created, &after) != TALLY_ok ||
               sub_fetch(&t, name, 5, false, tally_str_from(NULL), now, d, &count, &next_due,
                         &after) != TALLY_ok ||
               count != 5 || sub_ack(&t, name, 3, NULL, 0, now, &acked, &after) != TALLY_ok ||
               sub_park(&t, name, m.parked_seq, tally_str_from("poison"), now, &after) !=
                   TALLY_ok;
    if (bad) {
        store_txn_abort(&t);
        return -1;
    }
    return store_txn_commit(&t) == TALLY_ok ? 0 : -1;
}

/* Build the master store; -1 on failure (main reports it). */
static int master_build(void)
{
    const char *tmp = getenv("TMPDIR");
    snprintf(m.dir, sizeof(m.dir), "%s/check-recon-master-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (mkdtemp(m.dir) == NULL)
        return -1;
    store_options opt = {.path = m.dir, .map_size_bytes = UINT64_C(64) << 20};
    store *st;
    if (store_open(&opt, &st) != TALLY_ok)
        return -1;
    int64_t now = TEST_NOW_MS;
    int bad = master_accounts(st, now) || master_commands(st, now) ||
              master_subscriber(st, now + 120000);
    store_txn t;
    log_head head = {0};
    if (!bad && store_txn_begin(st, NULL, true, &t) == TALLY_ok) {
        bad = log_head_get(&t, &head) != TALLY_ok ||
              store_count(&t, STORE_DB_ACCOUNTS, &m.accounts) != TALLY_ok;
        store_txn_abort(&t);
    }
    m.head = head.seq;
    store_close(st);
    return bad || m.head == 0 ? -1 : 0;
}

/* ---- copies ---- */

static void copy_file(const char *from, const char *to)
{
    int in = open(from, O_RDONLY);
    ck_assert_msg(in >= 0, "%s: %s", from, strerror(errno));
    int out = open(to, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    ck_assert_msg(out >= 0, "%s: %s", to, strerror(errno));
    char buf[65536];
    ssize_t n;
    while ((n = read(in, buf, sizeof(buf))) > 0)
        ck_assert_int_eq(write(out, buf, (size_t)n), n);
    ck_assert_int_eq(n, 0);
    close(in);
    ck_assert_int_eq(close(out), 0);
}

/* A fresh copy of the master store, opened for writing in ts. */
static void copy_master(test_store *ts)
{
    memset(ts, 0, sizeof(*ts));
    const char *tmp = getenv("TMPDIR");
    snprintf(ts->dir, sizeof(ts->dir), "%s/check-recon-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    ck_assert_ptr_nonnull(mkdtemp(ts->dir));
    char from[300], to[300];
    snprintf(from, sizeof(from), "%s/data.mdb", m.dir);
    snprintf(to, sizeof(to), "%s/data.mdb", ts->dir);
    copy_file(from, to);
    ts->now_ms = TEST_NOW_MS;
    ts->map_size_bytes = UINT64_C(64) << 20;
    store_options opt = {.path = ts->dir, .map_size_bytes = ts->map_size_bytes};
    ck_assert_int_eq(store_open(&opt, &ts->st), TALLY_ok);
}

/* Close the copy (so recon sees it as a tool would) and keep the dir. */
static void close_copy(test_store *ts)
{
    store_close(ts->st);
    ts->st = NULL;
}

static void begin_write(test_store *ts, store_txn *t)
{
    ck_assert_int_eq(store_txn_begin(ts->st, NULL, false, t), TALLY_ok);
}

static void commit(store_txn *t) { ck_assert_int_eq(store_txn_commit(t), TALLY_ok); }

/* Give account id more credits than the log says, through the ledger's
 * own record writer. */
static void add_credits(test_store *ts, uint64_t id, int64_t amount)
{
    store_txn t;
    begin_write(ts, &t);
    ledger_account a;
    ck_assert_int_eq(ledger_account_get(&t, id, &a), TALLY_ok);
    a.credits_posted += amount;
    ck_assert_int_eq(ledger_account_put(&t, &a), TALLY_ok);
    commit(&t);
}

/* ---- running programs ---- */

typedef struct run_output {
    int status;
    char *out, *err;
} run_output;

/* Run tally-recon with args (NULL-terminated). */
static run_output recon_argv(const char *const *args)
{
    const char *argv[32] = {tallyd_program("tally-recon")};
    int argc = 1;
    for (; args[argc - 1]; argc++) {
        ck_assert_int_lt(argc, 31);
        argv[argc] = args[argc - 1];
    }
    argv[argc] = NULL;
    run_output r;
    r.status = test_run(argv, NULL, &r.out, &r.err);
    return r;
}

#define RECON(...) recon_argv((const char *const[]){__VA_ARGS__, NULL})

static void output_free(run_output *r)
{
    free(r->out);
    free(r->err);
}

static void expect_exit(const run_output *r, int status)
{
    ck_assert_msg(r->status == status, "exit %d, wanted %d\nstdout: %.4000s\nstderr: %s",
                  r->status, status, r->out, r->err);
}

/* ---- the JSON report ---- */

static json_t *json_of(const char *text)
{
    json_error_t e;
    json_t *j = json_loads(text, 0, &e);
    ck_assert_msg(j != NULL, "not one JSON document (%s): %.2000s", e.text, text);
    return j;
}

/* `tally-recon --json --data dir [more...]` (dir_more: dir, more...),
 * expecting the exit code. */
static json_t *recon_json_argv(int status, const char *const *dir_more)
{
    const char *args[24] = {"--json", "--data", dir_more[0]};
    int n = 3;
    for (const char *const *more = dir_more + 1; *more; more++) {
        ck_assert_int_lt(n, 23);
        args[n++] = *more;
    }
    args[n] = NULL;
    run_output r = recon_argv(args);
    expect_exit(&r, status);
    /* A run that reached its report writes nothing to stderr (not a
     * terminal: no progress), so a sanitizer's report there fails it. */
    if (status != EXIT_CANNOT_RUN)
        ck_assert_msg(r.err[0] == '\0', "stderr: %s", r.err);
    json_t *doc = json_of(r.out);
    output_free(&r);
    return doc;
}

#define RECON_JSON(status, ...) \
    recon_json_argv(status, (const char *const[]){__VA_ARGS__, NULL})

static json_t *check_of(json_t *doc, const char *name)
{
    json_t *checks = json_object_get(doc, "checks");
    size_t i;
    json_t *c;
    json_array_foreach(checks, i, c)
        if (strcmp(json_string_value(json_object_get(c, "name")), name) == 0)
            return c;
    ck_abort_msg("no check %s in the report", name);
    return NULL;
}

static const char *status_of(json_t *doc, const char *check)
{
    return json_string_value(json_object_get(check_of(doc, check), "status"));
}

static json_int_t count_of(json_t *check, const char *name)
{
    json_t *v = json_object_get(json_object_get(check, "counts"), name);
    ck_assert_msg(json_is_integer(v), "no count %s", name);
    return json_integer_value(v);
}

/* The listed finding of check about entity (with kind, when not NULL). */
static json_t *finding_of(json_t *doc, const char *check, const char *kind, const char *entity)
{
    json_t *findings = json_object_get(check_of(doc, check), "findings");
    size_t i;
    json_t *f;
    json_array_foreach(findings, i, f) {
        const char *k = json_string_value(json_object_get(f, "kind"));
        if (strcmp(json_string_value(json_object_get(f, "entity")), entity) == 0 &&
            (kind == NULL || (k && strcmp(k, kind) == 0)))
            return f;
    }
    return NULL;
}

static void expect_finding(json_t *doc, const char *check, const char *entity)
{
    if (finding_of(doc, check, NULL, entity))
        return;
    char *text = json_dumps(check_of(doc, check), JSON_INDENT(1));
    ck_abort_msg("no %s finding for %s; the check says: %s", check, entity, text);
}

static void expect_status(json_t *doc, const char *check, const char *status)
{
    const char *s = status_of(doc, check);
    ck_assert_msg(strcmp(s, status) == 0, "%s is %s, wanted %s", check, s, status);
}

/* Every check except those named (NULL-terminated) is ok or skipped. */
static void expect_only_failed(json_t *doc, const char *const *failed)
{
    json_t *checks = json_object_get(doc, "checks");
    size_t i;
    json_t *c;
    json_array_foreach(checks, i, c) {
        const char *name = json_string_value(json_object_get(c, "name"));
        const char *status = json_string_value(json_object_get(c, "status"));
        bool expected = false;
        for (const char *const *f = failed; *f; f++)
            expected |= strcmp(*f, name) == 0;
        if (!expected)
            ck_assert_msg(strcmp(status, "failed") != 0, "%s failed unexpectedly", name);
    }
}

#define EXPECT_ONLY_FAILED(doc, ...) expect_only_failed(doc, (const char *const[]){__VA_ARGS__, NULL})

static void seq_entity(uint64_t seq, char out[64]) { snprintf(out, 64, "seq:%" PRIu64, seq); }

static void event_entity(const tally_id128 *id, char out[64])
{
    char hex[33];
    tally_id128_to_hex(id, hex);
    snprintf(out, 64, "event:%s", hex);
}

/* ---- a clean store ---- */

START_TEST(clean_copy_exits_0_with_every_check_ok)
{
    test_store ts;
    copy_master(&ts);
    close_copy(&ts);
    json_t *doc = RECON_JSON(EXIT_CLEAN, ts.dir, "--max-findings", "5");
    ck_assert_str_eq(json_string_value(json_object_get(doc, "status")), "clean");
    ck_assert_int_eq(json_integer_value(json_object_get(doc, "findings_total")), 0);
    json_t *snap = json_object_get(doc, "snapshot");
    ck_assert_int_eq(json_integer_value(json_object_get(snap, "head_seq")), (json_int_t)m.head);
    ck_assert_int_eq(json_integer_value(json_object_get(snap, "first_seq")), 1);
    json_t *examined = json_object_get(doc, "examined");
    ck_assert_int_eq(json_integer_value(json_object_get(examined, "events")), (json_int_t)m.head);
    ck_assert_int_eq(json_integer_value(json_object_get(examined, "accounts")),
                     (json_int_t)m.accounts);
    ck_assert_int_eq(json_integer_value(json_object_get(examined, "entitlements")), 4);
    /* Every check of the invariants module is listed, in its order, then
     * statement; each ran and is ok. */
    json_t *checks = json_object_get(doc, "checks");
    ck_assert_uint_eq(json_array_size(checks), ledger_invariant_check_count() + 1);
    for (size_t i = 0; i < ledger_invariant_check_count(); i++) {
        json_t *c = json_array_get(checks, i);
        ck_assert_str_eq(json_string_value(json_object_get(c, "name")),
                         ledger_invariant_check_name(i));
        ck_assert_str_eq(json_string_value(json_object_get(c, "status")), "ok");
        ck_assert_int_eq(count_of(c, "findings"), 0);
    }
    expect_status(doc, "statement", "skipped");
    json_decref(doc);

    /* The text report says the same; nothing on stderr (not a terminal). */
    run_output r = RECON("--data", ts.dir);
    expect_exit(&r, EXIT_CLEAN);
    ck_assert_ptr_nonnull(strstr(r.out, "result: clean"));
    ck_assert_ptr_nonnull(strstr(r.out, "rebuild          ok"));
    ck_assert_str_eq(r.err, "");
    output_free(&r);
    test_remove_dir(ts.dir);
}
END_TEST

START_TEST(no_rebuild_skips_only_the_fold)
{
    test_store ts;
    copy_master(&ts);
    close_copy(&ts);
    json_t *doc = RECON_JSON(EXIT_CLEAN, ts.dir, "--no-rebuild");
    expect_status(doc, "rebuild", "skipped");
    ck_assert_str_eq(json_string_value(json_object_get(check_of(doc, "rebuild"), "reason")),
                     "--no-rebuild");
    expect_status(doc, "hash_chain", "ok");
    expect_status(doc, "history", "ok");
    json_decref(doc);
    test_remove_dir(ts.dir);
}
END_TEST

/* ---- damaged copies ---- */

START_TEST(removed_event_is_a_log_gap)
{
    test_store ts;
    copy_master(&ts);
    store_txn t;
    begin_write(&ts, &t);
    uint8_t key[8];
    log_seq_key(m.seq_t101, key);
    ck_assert_int_eq(store_del(&t, STORE_DB_LOG, key, 8), TALLY_ok);
    commit(&t);
    close_copy(&ts);
    json_t *doc = RECON_JSON(EXIT_DISCREPANCIES, ts.dir, "--max-findings", "50");
    char entity[64];
    seq_entity(m.seq_t101 + 1, entity); /* where the log resumes */
    expect_finding(doc, "log_gap", entity);
    ck_assert_str_eq(json_string_value(json_object_get(doc, "status")), "discrepancies");
    /* The fold misses the transfer: account 1 no longer rebuilds. */
    expect_finding(doc, "rebuild", "account:1");
    json_decref(doc);
    test_remove_dir(ts.dir);
}
END_TEST

START_TEST(changed_balance_fails_rebuild_and_balance_sum)
{
    test_store ts;
    copy_master(&ts);
    add_credits(&ts, 2, 5);
    close_copy(&ts);
    json_t *doc = RECON_JSON(EXIT_DISCREPANCIES, ts.dir);
    expect_finding(doc, "rebuild", "account:2");
    expect_finding(doc, "balance_sum", "ledger:1");
    ck_assert_ptr_null(finding_of(doc, "balance_sum", NULL, "ledger:2"));
    EXPECT_ONLY_FAILED(doc, "rebuild", "balance_sum");
    json_decref(doc);
    /* Without the fold the sum still finds it; rebuild did not run. */
    doc = RECON_JSON(EXIT_DISCREPANCIES, ts.dir, "--no-rebuild");
    expect_finding(doc, "balance_sum", "ledger:1");
    expect_status(doc, "rebuild", "skipped");
    ck_assert_int_eq(count_of(check_of(doc, "rebuild"), "findings"), 0);
    json_decref(doc);
    test_remove_dir(ts.dir);
}
END_TEST

/* Rewrite the event at seq with edit applied to a copy of its bytes. */
static void tamper_event(test_store *ts, uint64_t seq, void (*edit)(uint8_t *ev, size_t len))
{
    test_event_rewrite(ts->st, seq, edit);
}

/* The transfer's amount, 100 as a positive fixint, becomes 101: the body's
 * (field 9) transfer (part 0), its fourth field. */
static void flip_amount(uint8_t *ev, size_t len)
{
    static const uint32_t amount_at[] = {9, 0, 3};
    size_t at = test_msgpack_at(ev, len, amount_at, 3);
    ck_assert_uint_eq(ev[at], 0x64);
    ev[at] = 0x65;
}


START_TEST(changed_event_breaks_the_hash_chain)
{
    test_store ts;
    copy_master(&ts);
    tamper_event(&ts, m.seq_t101, flip_amount);
    close_copy(&ts);
    json_t *doc = RECON_JSON(EXIT_DISCREPANCIES, ts.dir);
    char entity[64];
    seq_entity(m.seq_t101, entity);
    expect_finding(doc, "hash_chain", entity);
    expect_status(doc, "log_gap", "ok");
    json_decref(doc);
    test_remove_dir(ts.dir);
}
END_TEST

START_TEST(rehashed_event_breaks_the_link_to_the_next)
{
    test_store ts;
    copy_master(&ts);
    tamper_event(&ts, m.seq_t101, test_event_rehash_other_time);
    close_copy(&ts);
    json_t *doc = RECON_JSON(EXIT_DISCREPANCIES, ts.dir);
    char entity[64];
    seq_entity(m.seq_t101 + 1, entity);
    expect_finding(doc, "hash_chain", entity);
    /* its transfer's created_ms is no longer its event's time */
    expect_status(doc, "creation_times", "failed");
    EXPECT_ONLY_FAILED(doc, "hash_chain", "creation_times");
    json_decref(doc);
    test_remove_dir(ts.dir);
}
END_TEST

START_TEST(orphan_inbox_record_breaks_inbox_links)
{
    test_store ts;
    copy_master(&ts);
    store_txn t;
    begin_write(&ts, &t);
    /* A success that claims an event after the head: no event has it as
     * its cause. Twice: a key is any bytes over msgpack, and the report
     * gives one that is not UTF-8 with U+FFFD rather than leave it out. */
    ledger_outcome o = {.code = TALLY_ok, .time_ms = TEST_NOW_MS, .first_seq = m.head + 1,
                        .event_count = 1};
    uint8_t fingerprint[LEDGER_FINGERPRINT_BYTES] = {0xab};
    ck_assert_int_eq(ledger_inbox_put(&t, tally_str_from("test"), tally_str_from("orphan"),
                                      fingerprint, &o),
                     TALLY_ok);
    ck_assert_int_eq(ledger_inbox_put(&t, tally_str_from("test"), tally_str_from("orphan\xff"),
                                      fingerprint, &o),
                     TALLY_ok);
    commit(&t);
    close_copy(&ts);
    json_t *doc = RECON_JSON(EXIT_DISCREPANCIES, ts.dir);
    expect_finding(doc, "inbox_links", "inbox:test/orphan");
    expect_finding(doc, "inbox_links", "inbox:test/orphan\xef\xbf\xbd");
    ck_assert_int_eq(count_of(check_of(doc, "inbox_links"), "listed"), 2);
    EXPECT_ONLY_FAILED(doc, "inbox_links");
    json_decref(doc);
    test_remove_dir(ts.dir);
}
END_TEST

/* An inbox record whose inbox_time entry is gone: retention would never
 * remove it. */
START_TEST(unindexed_inbox_record_breaks_inbox_time)
{
    test_store ts;
    copy_master(&ts);
    store_txn t;
    begin_write(&ts, &t);
    ledger_outcome o = {.code = TALLY_exceeds_credits, .time_ms = TEST_NOW_MS};
    uint8_t fingerprint[LEDGER_FINGERPRINT_BYTES] = {0xcd};
    ck_assert_int_eq(ledger_inbox_put(&t, tally_str_from("test"), tally_str_from("unindexed"),
                                      fingerprint, &o),
                     TALLY_ok);
    commit(&t);
    begin_write(&ts, &t); /* its commit wrote the last entry: remove it */
    test_drop_last_inbox_time_entry(&t);
    commit(&t);
    close_copy(&ts);
    json_t *doc = RECON_JSON(EXIT_DISCREPANCIES, ts.dir);
    expect_finding(doc, "inbox_time", "inbox:test/unindexed");
    EXPECT_ONLY_FAILED(doc, "inbox_time");
    json_decref(doc);
    test_remove_dir(ts.dir);
}
END_TEST

START_TEST(removed_inbox_record_breaks_inbox_links)
{
    test_store ts;
    copy_master(&ts);
    store_txn t;
    begin_write(&ts, &t);
    uint8_t key[LEDGER_INBOX_KEY_BYTES_MAX];
    size_t n = ledger_inbox_key(tally_str_from("test"), tally_str_from("t-101"), key);
    ck_assert_int_eq(store_del(&t, STORE_DB_INBOX, key, n), TALLY_ok);
    commit(&t);
    close_copy(&ts);
    json_t *doc = RECON_JSON(EXIT_DISCREPANCIES, ts.dir);
    char entity[64];
    seq_entity(m.seq_t101, entity);
    expect_finding(doc, "inbox_links", entity);
    expect_finding(doc, "inbox_time", "inbox:test/t-101"); /* its entry names it */
    json_decref(doc);
    test_remove_dir(ts.dir);
}
END_TEST

/* One history entry moved to another account: the index has as many
 * entries as the log expects, yet both accounts are named. */
START_TEST(moved_history_entry_is_found)
{
    test_store ts;
    copy_master(&ts);
    store_txn t;
    begin_write(&ts, &t);
    ck_assert_int_eq(ledger_history_del(&t, 1, m.seq_t101), TALLY_ok);
    ck_assert_int_eq(ledger_history_put(&t, 3, m.seq_t101), TALLY_ok);
    commit(&t);
    close_copy(&ts);
    json_t *doc = RECON_JSON(EXIT_DISCREPANCIES, ts.dir);
    expect_finding(doc, "history", "account:1"); /* lacks the entry */
    expect_finding(doc, "history", "account:3"); /* has one of another's */
    EXPECT_ONLY_FAILED(doc, "history");
    json_decref(doc);
    test_remove_dir(ts.dir);
}
END_TEST

/* The subscriber's cursor record rewritten with its ack floor (and
 * delivered seq) beyond the head. */
START_TEST(cursor_beyond_the_head_is_found)
{
    test_store ts;
    copy_master(&ts);
    store_txn t;
    begin_write(&ts, &t);
    uint8_t key[1 + sizeof(SUBSCRIBER)] = {'c'};
    memcpy(key + 1, SUBSCRIBER, strlen(SUBSCRIBER));
    size_t key_len = 1 + strlen(SUBSCRIBER);
    MDB_val v;
    ck_assert_int_eq(store_get(&t, STORE_DB_CURSORS, key, key_len, &v), TALLY_ok);
    ck_assert_uint_gt(v.mv_size, CURSOR_FLOOR_OFFSET + 16);
    uint8_t record[512];
    ck_assert_uint_le(v.mv_size, sizeof(record));
    memcpy(record, v.mv_data, v.mv_size);
    ck_assert_uint_eq(get_u64_be(record + CURSOR_FLOOR_OFFSET), m.parked_seq); /* the layout */
    put_u64_be(record + CURSOR_FLOOR_OFFSET, m.head + 10);
    put_u64_be(record + CURSOR_FLOOR_OFFSET + 8, m.head + 10);
    ck_assert_int_eq(store_put(&t, STORE_DB_CURSORS, key, key_len, record, v.mv_size, 0),
                     TALLY_ok);
    commit(&t);
    close_copy(&ts);
    json_t *doc = RECON_JSON(EXIT_DISCREPANCIES, ts.dir);
    expect_finding(doc, "cursors", "subscriber:" SUBSCRIBER);
    json_decref(doc);
    test_remove_dir(ts.dir);
}
END_TEST

/* Partitions records (log/subscriber_partition.h): one of a subscriber
 * that does not exist, and one cut short. */
START_TEST(partitions_records_are_checked)
{
    test_store ts;
    copy_master(&ts);
    store_txn t;
    begin_write(&ts, &t);
    static sub_partitions g = {.count = 4};
    ck_assert_int_eq(sub_partitions_save(&t, tally_str_from("ghost"), &g), TALLY_ok);
    uint8_t key[1 + sizeof(SUBSCRIBER)] = {'g'};
    memcpy(key + 1, SUBSCRIBER, strlen(SUBSCRIBER));
    static const uint8_t cut[] = {1, 0, 0, 0, 4, 0}; /* four partitions, none written */
    ck_assert_int_eq(store_put(&t, STORE_DB_CURSORS, key, 1 + strlen(SUBSCRIBER), cut,
                               sizeof(cut), 0), TALLY_ok);
    commit(&t);
    close_copy(&ts);
    json_t *doc = RECON_JSON(EXIT_DISCREPANCIES, ts.dir);
    expect_finding(doc, "cursors", "subscriber:ghost/partitions");
    expect_finding(doc, "cursors", "subscriber:" SUBSCRIBER "/partitions");
    json_decref(doc);
    test_remove_dir(ts.dir);
}
END_TEST

/* The dead letter moved to a seq the log never had. */
START_TEST(dead_letter_of_a_missing_seq_is_found)
{
    test_store ts;
    copy_master(&ts);
    store_txn t;
    begin_write(&ts, &t);
    uint8_t key[sizeof(SUBSCRIBER) + 8];
    size_t name_len = strlen(SUBSCRIBER), key_len = name_len + 1 + 8;
    memcpy(key, SUBSCRIBER, name_len + 1); /* name, 0x00, seq */
    put_u64_be(key + name_len + 1, m.parked_seq);
    MDB_val v;
    ck_assert_int_eq(store_get(&t, STORE_DB_DLQ, key, key_len, &v), TALLY_ok);
    uint8_t value[512];
    size_t value_len = v.mv_size;
    ck_assert_uint_le(value_len, sizeof(value));
    memcpy(value, v.mv_data, value_len);
    ck_assert_int_eq(store_del(&t, STORE_DB_DLQ, key, key_len), TALLY_ok);
    put_u64_be(key + name_len + 1, m.head + 5);
    ck_assert_int_eq(store_put(&t, STORE_DB_DLQ, key, key_len, value, value_len, 0), TALLY_ok);
    commit(&t);
    close_copy(&ts);
    json_t *doc = RECON_JSON(EXIT_DISCREPANCIES, ts.dir);
    char entity[128];
    snprintf(entity, sizeof(entity), "subscriber:%s/seq:%" PRIu64, SUBSCRIBER, m.head + 5);
    expect_finding(doc, "dlq", entity);
    EXPECT_ONLY_FAILED(doc, "dlq");
    json_decref(doc);
    test_remove_dir(ts.dir);
}
END_TEST

/* Past --max-findings, findings are counted and not listed. */
START_TEST(findings_beyond_the_cap_are_counted)
{
    test_store ts;
    copy_master(&ts);
    store_txn t;
    begin_write(&ts, &t);
    for (uint64_t id = 1; id <= 6; id++) {
        char k[32];
        snprintf(k, sizeof(k), "open-%" PRIu64, id);
        uint8_t key[LEDGER_INBOX_KEY_BYTES_MAX];
        size_t n = ledger_inbox_key(tally_str_from("test"), tally_str_from(k), key);
        ck_assert_int_eq(store_del(&t, STORE_DB_INBOX, key, n), TALLY_ok);
    }
    commit(&t);
    close_copy(&ts);
    json_t *doc = RECON_JSON(EXIT_DISCREPANCIES, ts.dir, "--max-findings", "2");
    json_t *c = check_of(doc, "inbox_links");
    ck_assert_int_eq(count_of(c, "findings"), 6);
    ck_assert_int_eq(count_of(c, "listed"), 2);
    ck_assert_uint_eq(json_array_size(json_object_get(c, "findings")), 2);
    /* each removed record is also named by its inbox_time entry */
    ck_assert_int_eq(count_of(check_of(doc, "inbox_time"), "findings"), 6);
    ck_assert_int_eq(json_integer_value(json_object_get(doc, "findings_total")), 12);
    json_decref(doc);
    /* The text report says how many more there are. */
    run_output r = RECON("--data", ts.dir, "--max-findings", "2");
    expect_exit(&r, EXIT_DISCREPANCIES);
    ck_assert_ptr_nonnull(strstr(r.out, "inbox_links      FAILED: 6 findings"));
    ck_assert_ptr_nonnull(strstr(r.out, "... and 4 more"));
    output_free(&r);
    test_remove_dir(ts.dir);
}
END_TEST

/* ---- statements ---- */

static void write_text(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    ck_assert_int_ge(fputs(text, f), 0);
    ck_assert_int_eq(fclose(f), 0);
}

/* Balances of accounts 1..count of the copy, as statement lines. */
typedef struct balances {
    ledger_account a[16];
    uint64_t count;
} balances;

static balances read_balances(test_store *ts)
{
    balances b = {.count = m.accounts};
    ck_assert_uint_le(b.count, 15);
    for (uint64_t id = 1; id <= b.count; id++)
        b.a[id] = test_account(ts, id);
    return b;
}

typedef enum line_change { AS_STORED, OFF_BY_2, OFF_BY_7, LEFT_OUT } line_change;

/* A statement of the balance and credits_pending of every account, as CSV
 * (spaces, quotes and CRLF line ends as spreadsheets write them) or JSON
 * lines (one value as a decimal string); change[id] alters an account's
 * line, extra_id (if not 0) adds an account the store lacks, repeat_id is
 * listed twice. */
static void write_balances(const char *path, bool json, const balances *b,
                           const line_change *change, uint64_t extra_id, uint64_t repeat_id)
{
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    if (!json)
        fputs("account_id,balance,credits_pending\r\n", f); /* CRLF, as spreadsheets write */
    for (uint64_t id = 1; id <= b->count + 1; id++) {
        uint64_t which = id <= b->count ? id : extra_id;
        if (which == 0 || (id <= b->count && change[id] == LEFT_OUT))
            continue;
        const ledger_account *a = id <= b->count ? &b->a[id] : &b->a[1];
        int64_t balance = a->credits_posted - a->debits_posted;
        if (id <= b->count)
            balance += change[id] == OFF_BY_2 ? 2 : change[id] == OFF_BY_7 ? -7 : 0;
        int times = which == repeat_id ? 2 : 1;
        for (int k = 0; k < times; k++) {
            if (json)
                fprintf(f, "{\"account_id\": %" PRIu64 ", \"balance\": %" PRId64
                           ", \"credits_pending\": \"%" PRId64 "\"}\n",
                        which, balance, a->credits_pending);
            else
                fprintf(f, "%" PRIu64 ", %" PRId64 ",\"%" PRId64 "\"\r\n", which, balance,
                        a->credits_pending);
        }
    }
    ck_assert_int_eq(fclose(f), 0);
}

static json_t *statement_counts(json_t *doc)
{
    return json_object_get(json_object_get(check_of(doc, "statement"), "statement"), "counts");
}

static json_int_t statement_count(json_t *doc, const char *name)
{
    json_t *v = json_object_get(statement_counts(doc), name);
    ck_assert_msg(json_is_integer(v), "no statement count %s", name);
    return json_integer_value(v);
}

static void balances_statement_case(bool json)
{
    test_store ts;
    copy_master(&ts);
    balances b = read_balances(&ts);
    close_copy(&ts);
    char path[320];
    snprintf(path, sizeof(path), "%s/statement.%s", ts.dir, json ? "jsonl" : "csv");
    line_change same[16] = {AS_STORED};

    /* Matching: exit 0, every account matched. */
    write_balances(path, json, &b, same, 0, 0);
    json_t *doc = RECON_JSON(EXIT_CLEAN, ts.dir, "--statement", path);
    expect_status(doc, "statement", "ok");
    json_t *st = json_object_get(check_of(doc, "statement"), "statement");
    ck_assert_str_eq(json_string_value(json_object_get(st, "kind")), "balances");
    ck_assert_str_eq(json_string_value(json_object_get(st, "format")), json ? "json_lines" : "csv");
    ck_assert_int_eq(statement_count(doc, "matched"), (json_int_t)b.count);
    ck_assert_int_eq(statement_count(doc, "entries"), (json_int_t)b.count);
    json_decref(doc);

    /* Account 3 left out, 99 added, 2 off by 7, 1 off by 2, 6 listed twice. */
    line_change change[16] = {AS_STORED};
    change[3] = LEFT_OUT;
    change[2] = OFF_BY_7;
    change[1] = OFF_BY_2;
    write_balances(path, json, &b, change, 99, 6);
    doc = RECON_JSON(EXIT_DISCREPANCIES, ts.dir, "--statement", path);
    ck_assert_ptr_nonnull(finding_of(doc, "statement", "missing", "account:3"));
    ck_assert_ptr_nonnull(finding_of(doc, "statement", "extra", "account:99"));
    ck_assert_ptr_nonnull(finding_of(doc, "statement", "mismatched", "account:2"));
    ck_assert_ptr_nonnull(finding_of(doc, "statement", "mismatched", "account:1"));
    ck_assert_ptr_nonnull(finding_of(doc, "statement", "duplicate", "account:6"));
    ck_assert_int_eq(statement_count(doc, "missing"), 1);
    ck_assert_int_eq(statement_count(doc, "extra"), 1);
    ck_assert_int_eq(statement_count(doc, "mismatched"), 2);
    ck_assert_int_eq(statement_count(doc, "duplicates"), 1);
    EXPECT_ONLY_FAILED(doc, "statement");
    json_decref(doc);

    /* A drift of 2 lets account 1 match; account 2 (7 off) still does not. */
    doc = RECON_JSON(EXIT_DISCREPANCIES, ts.dir, "--statement", path, "--drift", "2");
    ck_assert_ptr_null(finding_of(doc, "statement", "mismatched", "account:1"));
    ck_assert_ptr_nonnull(finding_of(doc, "statement", "mismatched", "account:2"));
    ck_assert_int_eq(statement_count(doc, "within_drift"), 1);
    ck_assert_int_eq(statement_count(doc, "mismatched"), 1);
    json_decref(doc);

    /* Only drift: exit 0 with a drift of 2, 1 without. */
    line_change drift_only[16] = {AS_STORED};
    drift_only[1] = OFF_BY_2;
    write_balances(path, json, &b, drift_only, 0, 0);
    doc = RECON_JSON(EXIT_CLEAN, ts.dir, "--statement", path, "--drift", "2");
    ck_assert_int_eq(statement_count(doc, "within_drift"), 1);
    ck_assert_int_eq(statement_count(doc, "matched"), (json_int_t)b.count);
    json_decref(doc);
    doc = RECON_JSON(EXIT_DISCREPANCIES, ts.dir, "--statement", path, "--drift", "1");
    ck_assert_ptr_nonnull(finding_of(doc, "statement", "mismatched", "account:1"));
    json_decref(doc);
    test_remove_dir(ts.dir);
}

START_TEST(balances_statement_csv) { balances_statement_case(false); }
END_TEST

START_TEST(balances_statement_json_lines) { balances_statement_case(true); }
END_TEST

/* The log as a downstream would hold it. */
typedef struct held_events {
    tally_id128 id[64];
    uint64_t count;
} held_events;

static void copy_event_id(const log_event *ev, void *ctx) { *(tally_id128 *)ctx = ev->id; }

static held_events read_events(test_store *ts)
{
    held_events h = {.count = m.head};
    ck_assert_uint_lt(h.count, 64);
    for (uint64_t seq = 1; seq <= h.count; seq++)
        test_with_event(ts, seq, copy_event_id, &h.id[seq]);
    return h;
}

static void uuid_text(const tally_id128 *id, char out[37])
{
    char hex[33];
    tally_id128_to_hex(id, hex);
    snprintf(out, 37, "%.8s-%.4s-%.4s-%.4s-%.12s", hex, hex + 8, hex + 12, hex + 16, hex + 20);
}

/* Events 1..through as lines; skip_seq left out, wrong_seq given seq+1,
 * plus one id the log never had. JSON lines look like `tally --json log`. */
static void write_events(const char *path, bool json, const held_events *h, uint64_t through,
                         uint64_t skip_seq, uint64_t wrong_seq, bool add_unknown)
{
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    if (!json)
        fputs("seq,event_id\n", f);
    for (uint64_t seq = 1; seq <= through; seq++) {
        if (seq == skip_seq)
            continue;
        char id[37];
        uuid_text(&h->id[seq], id);
        uint64_t said = seq == wrong_seq ? seq + 1 : seq;
        if (json)
            fprintf(f, "{\"seq\": %" PRIu64 ", \"event_id\": \"%s\", \"type\": \"x\"}\n", said, id);
        else
            fprintf(f, "%" PRIu64 ",%s\n", said, id);
    }
    if (add_unknown)
        fputs(json ? "{\"event_id\": \"0190ffff-0000-7000-8000-000000000001\"}\n"
                   : "7777,0190ffff000070008000000000000001\n",
              f);
    ck_assert_int_eq(fclose(f), 0);
}

static void events_statement_case(bool json)
{
    test_store ts;
    copy_master(&ts);
    held_events h = read_events(&ts);
    close_copy(&ts);
    char path[320], through[32];
    snprintf(path, sizeof(path), "%s/events.%s", ts.dir, json ? "jsonl" : "csv");

    write_events(path, json, &h, h.count, 0, 0, false);
    json_t *doc = RECON_JSON(EXIT_CLEAN, ts.dir, "--statement", path);
    expect_status(doc, "statement", "ok");
    ck_assert_int_eq(statement_count(doc, "matched"), (json_int_t)h.count);
    json_decref(doc);

    /* seq 3 not held, seq 5 held under another seq, an unknown id held. */
    write_events(path, json, &h, h.count, 3, 5, true);
    doc = RECON_JSON(EXIT_DISCREPANCIES, ts.dir, "--statement", path);
    char entity[64];
    event_entity(&h.id[3], entity);
    ck_assert_ptr_nonnull(finding_of(doc, "statement", "missing", entity));
    event_entity(&h.id[5], entity);
    ck_assert_ptr_nonnull(finding_of(doc, "statement", "mismatched", entity));
    ck_assert_ptr_nonnull(finding_of(doc, "statement", "extra",
                                     "event:0190ffff000070008000000000000001"));
    ck_assert_int_eq(statement_count(doc, "missing"), 1);
    ck_assert_int_eq(statement_count(doc, "mismatched"), 1);
    ck_assert_int_eq(statement_count(doc, "extra"), 1);
    EXPECT_ONLY_FAILED(doc, "statement");
    json_decref(doc);

    /* A downstream two events behind: missing without --through, clean
     * with --through at its position. */
    write_events(path, json, &h, h.count - 2, 0, 0, false);
    doc = RECON_JSON(EXIT_DISCREPANCIES, ts.dir, "--statement", path);
    ck_assert_int_eq(statement_count(doc, "missing"), 2);
    json_decref(doc);
    snprintf(through, sizeof(through), "%" PRIu64, h.count - 2);
    doc = RECON_JSON(EXIT_CLEAN, ts.dir, "--statement", path, "--through", through);
    ck_assert_int_eq(statement_count(doc, "missing"), 0);
    json_decref(doc);
    test_remove_dir(ts.dir);
}

START_TEST(events_statement_csv) { events_statement_case(false); }
END_TEST

START_TEST(events_statement_json_lines) { events_statement_case(true); }
END_TEST

/* Log retention removed the first events (as far as the subscriber's dead
 * letter allows) and wrote its checkpoint: the checks start from there and
 * the copy is clean; a downstream's lines for removed events are counted
 * apart, not as extra; a changed balance is still found. */
START_TEST(store_after_log_retention_is_checked_from_its_floor)
{
    test_store ts;
    copy_master(&ts);
    held_events h = read_events(&ts);
    store_txn t;
    begin_write(&ts, &t);
    ledger_retention opt = {.inbox_window_ms = 3650 * DAY_MS, .log_age_ms = 1, .batch = 100};
    ledger_retention_work work;
    ck_assert_int_eq(ledger_retention_sweep(&t, TEST_NOW_MS + DAY_MS, &opt, &work), TALLY_ok);
    commit(&t);
    ck_assert_uint_eq(work.log_floor, m.parked_seq - 1); /* below the dead letter */
    close_copy(&ts);
    json_t *doc = RECON_JSON(EXIT_CLEAN, ts.dir);
    json_t *snap = json_object_get(doc, "snapshot");
    ck_assert_int_eq(json_integer_value(json_object_get(snap, "log_floor_seq")),
                     (json_int_t)work.log_floor);
    ck_assert_int_eq(json_integer_value(json_object_get(snap, "first_seq")),
                     (json_int_t)work.log_floor + 1);
    ck_assert_int_eq(json_integer_value(json_object_get(json_object_get(doc, "examined"),
                                                        "events")),
                     (json_int_t)(m.head - work.log_floor));
    json_decref(doc);

    char path[320];
    snprintf(path, sizeof(path), "%s/events.csv", ts.dir);
    write_events(path, false, &h, h.count, 0, 0, false);
    doc = RECON_JSON(EXIT_CLEAN, ts.dir, "--statement", path);
    ck_assert_int_eq(statement_count(doc, "below_floor"), (json_int_t)work.log_floor);
    ck_assert_int_eq(statement_count(doc, "matched"), (json_int_t)(h.count - work.log_floor));
    json_decref(doc);

    store_options o = {.path = ts.dir, .map_size_bytes = ts.map_size_bytes};
    ck_assert_int_eq(store_open(&o, &ts.st), TALLY_ok);
    add_credits(&ts, 6, 1);
    close_copy(&ts);
    doc = RECON_JSON(EXIT_DISCREPANCIES, ts.dir);
    expect_finding(doc, "rebuild", "account:6");
    expect_finding(doc, "balance_sum", "ledger:1");
    json_decref(doc);
    test_remove_dir(ts.dir);
}
END_TEST

/* An empty event statement: every event is missing, counted in full. */
START_TEST(statement_findings_are_capped_too)
{
    test_store ts;
    copy_master(&ts);
    close_copy(&ts);
    char path[320];
    snprintf(path, sizeof(path), "%s/none.csv", ts.dir);
    write_text(path, "event_id\n");
    json_t *doc = RECON_JSON(EXIT_DISCREPANCIES, ts.dir, "--statement", path, "--max-findings", "3");
    json_t *c = check_of(doc, "statement");
    ck_assert_int_eq(count_of(c, "findings"), (json_int_t)m.head);
    ck_assert_int_eq(count_of(c, "listed"), 3);
    ck_assert_int_eq(statement_count(doc, "missing"), (json_int_t)m.head);
    json_decref(doc);
    test_remove_dir(ts.dir);
}
END_TEST

/* ---- could not run: exit 2 ---- */

static void expect_cannot_run(const char *const *args, const char *message)
{
    run_output r = recon_argv(args);
    expect_exit(&r, EXIT_CANNOT_RUN);
    ck_assert_msg(strstr(r.err, message) != NULL, "stderr lacks '%s': %s", message, r.err);
    output_free(&r);
}

#define EXPECT_CANNOT_RUN(message, ...) \
    expect_cannot_run((const char *const[]){__VA_ARGS__, NULL}, message)

START_TEST(missing_or_foreign_directories_exit_2)
{
    test_store ts;
    copy_master(&ts);
    close_copy(&ts);
    char path[400], sub[320];
    snprintf(path, sizeof(path), "%s/nothing-here", ts.dir);
    EXPECT_CANNOT_RUN("no such directory", "--data", path);
    /* With --json, also a document saying why. */
    run_output r = RECON("--json", "--data", path);
    expect_exit(&r, EXIT_CANNOT_RUN);
    json_t *doc = json_of(r.out);
    ck_assert_str_eq(json_string_value(json_object_get(doc, "status")), "error");
    ck_assert_str_eq(json_string_value(json_object_get(json_object_get(doc, "error"), "code")),
                     "not_found");
    json_decref(doc);
    output_free(&r);

    snprintf(path, sizeof(path), "%s/data.mdb", ts.dir);
    EXPECT_CANNOT_RUN("not a directory", "--data", path);

    snprintf(sub, sizeof(sub), "%s/empty", ts.dir);
    ck_assert_int_eq(mkdir(sub, 0700), 0);
    EXPECT_CANNOT_RUN("not a tally store (no data.mdb)", "--data", sub);
    snprintf(path, sizeof(path), "%s/lock.mdb", sub);
    ck_assert_msg(access(path, F_OK) != 0, "a lock.mdb was left in a foreign directory");

    snprintf(path, sizeof(path), "%s/data.mdb", sub);
    write_text(path, "this is not an LMDB environment, only some text long enough to read\n");
    EXPECT_CANNOT_RUN("not an LMDB environment", "--data", sub);

    /* An LMDB environment without tally's databases. */
    snprintf(sub, sizeof(sub), "%s/lmdb", ts.dir);
    ck_assert_int_eq(mkdir(sub, 0700), 0);
    MDB_env *env;
    MDB_txn *txn;
    MDB_dbi dbi;
    ck_assert_int_eq(mdb_env_create(&env), MDB_SUCCESS);
    ck_assert_int_eq(mdb_env_set_maxdbs(env, 2), MDB_SUCCESS);
    ck_assert_int_eq(mdb_env_open(env, sub, 0, 0600), MDB_SUCCESS);
    ck_assert_int_eq(mdb_txn_begin(env, NULL, 0, &txn), MDB_SUCCESS);
    ck_assert_int_eq(mdb_dbi_open(txn, "other", MDB_CREATE, &dbi), MDB_SUCCESS);
    ck_assert_int_eq(mdb_txn_commit(txn), MDB_SUCCESS);
    mdb_env_close(env);
    EXPECT_CANNOT_RUN("not a tally store (its databases are missing", "--data", sub);
    test_remove_dir(ts.dir);
}
END_TEST

/* Damaged LMDB meta pages are named (file, page, fault), before LMDB
 * uses them: a data.mdb cut short would fault in the middle of the checks. */
START_TEST(damaged_meta_pages_exit_2)
{
    test_store ts;
    copy_master(&ts);
    close_copy(&ts);
    char path[400];
    snprintf(path, sizeof(path), "%s/data.mdb", ts.dir);
    int fd = open(path, O_RDWR);
    ck_assert_int_ge(fd, 0);
    uint32_t two = 2; /* page 1's LMDB data format (log/store_meta.c's layout) */
    long page = sysconf(_SC_PAGESIZE);
    uint32_t one;
    ck_assert_int_eq(pread(fd, &one, 4, page + 20), 4);
    ck_assert_int_eq(pwrite(fd, &two, 4, page + 20), 4);
    EXPECT_CANNOT_RUN("LMDB meta page 1 is damaged (it says LMDB data format 2, page 0 says 1)",
                      "--data", ts.dir);
    ck_assert_int_eq(pwrite(fd, &one, 4, page + 20), 4);
    ck_assert_int_eq(ftruncate(fd, 4 * page), 0);
    close(fd);
    EXPECT_CANNOT_RUN("the file was cut short", "--data", ts.dir);
    test_remove_dir(ts.dir);
}
END_TEST

START_TEST(bad_statement_files_exit_2)
{
    test_store ts;
    copy_master(&ts);
    close_copy(&ts);
    char path[320];
    snprintf(path, sizeof(path), "%s/st", ts.dir);
    static const struct { const char *text; const char *message; } cases[] = {
        {"", "empty"},
        {"account_id,balanse\n1,5\n", ":1: header: unknown column 'balanse'"},
        {"account_id\n1\n", ":1: header: account_id needs one or more balance columns"},
        {"account_id,event_id\n", ":1: header: needs exactly one of account_id or event_id"},
        {"account_id,balance\n1,5\n2,five\n", ":3: balance: not an integer"},
        {"account_id,balance\n1,5\n2\n", ":3: 1 cells, the header has 2"},
        {"account_id,credits_posted\n1,-5\n", ":2: credits_posted: must not be negative"},
        {"account_id,balance\n0,5\n", ":2: account_id: not an id"},
        {"account_id,balance\n1,9223372036854775808\n", ":2: balance: not an integer within int64"},
        {"event_id\n0190ffff0000\n", ":2: event_id: not 32 hex digits"},
        {"event_id,seq\n0190ffff000070008000000000000001,0\n", ":2: seq: not a seq"},
        {"{\"account_id\": 1, \"balance\": 5}\n{\"event_id\": \"0190ffff000070008000000000000001\"}\n",
         ":2: a events line in a statement of balances"},
        {"{\"account_id\": 1}\n", ":1: no balance field"},
        {"{\"account_id\": 1, \"balance\": 5\n", ":1: not JSON"},
        {"{\"event_id\": \"0190ffff000070008000000000000001\", \"account_id\": 3}\n",
         ":1: needs exactly one of event_id or account_id"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        write_text(path, cases[i].text);
        EXPECT_CANNOT_RUN(cases[i].message, "--data", ts.dir, "--statement", path);
    }
    /* A NUL byte: not a text file. */
    int fd = open(path, O_WRONLY | O_TRUNC);
    ck_assert_int_eq(write(fd, "event_id\n\0\n", 11), 11);
    close(fd);
    EXPECT_CANNOT_RUN(":2: a NUL byte", "--data", ts.dir, "--statement", path);
    /* A line longer than the limit. */
    FILE *f = fopen(path, "w");
    fputs("event_id\n", f);
    for (int i = 0; i < RECON_STATEMENT_LINE_BYTES_MAX + 1; i++)
        fputc('a', f);
    fclose(f);
    EXPECT_CANNOT_RUN(":2: line longer than", "--data", ts.dir, "--statement", path);
    EXPECT_CANNOT_RUN("No such file", "--data", ts.dir, "--statement", "/nonexistent/statement");
    /* --drift means balances, --through events. */
    write_text(path, "event_id\n0190ffff000070008000000000000001\n");
    EXPECT_CANNOT_RUN("--drift applies to a statement of balances", "--data", ts.dir,
                      "--statement", path, "--drift", "3");
    write_text(path, "account_id,balance\n1,5\n");
    EXPECT_CANNOT_RUN("--through applies to a statement of events", "--data", ts.dir,
                      "--statement", path, "--through", "3");
    test_remove_dir(ts.dir);
}
END_TEST

START_TEST(usage_errors_exit_2)
{
    EXPECT_CANNOT_RUN("--data DIR is required", "--json");
    EXPECT_CANNOT_RUN("unknown option", "--data", "/tmp", "--frobnicate");
    EXPECT_CANNOT_RUN("unexpected argument", "--data", "/tmp", "extra");
    EXPECT_CANNOT_RUN("--drift and --through apply to --statement", "--data", "/tmp", "--drift",
                      "1");
    EXPECT_CANNOT_RUN("--drift: not a non-negative integer", "--data", "/tmp", "--statement",
                      "x", "--drift", "-1");
    EXPECT_CANNOT_RUN("--max-findings: not a count", "--data", "/tmp", "--max-findings",
                      "100001");
    EXPECT_CANNOT_RUN("--through: not a seq", "--data", "/tmp", "--statement", "x", "--through",
                      "0");
}
END_TEST

/* --help lists every check the invariants module runs. */
START_TEST(help_lists_every_check)
{
    run_output r = RECON("--help");
    expect_exit(&r, EXIT_CLEAN);
    for (size_t i = 0; i < ledger_invariant_check_count(); i++) {
        char line[64];
        snprintf(line, sizeof(line), "\n  %s\n", ledger_invariant_check_name(i));
        ck_assert_msg(strstr(r.out, line) != NULL, "--help lacks %s", line + 3);
    }
    ck_assert_ptr_nonnull(strstr(r.out, "Exit codes: 0 clean, 1 discrepancies found, 2"));
    output_free(&r);
}
END_TEST

/* The check names that one file reports, each asserted to be in the list
 * that tally-recon shows. */
static size_t reported_checks_listed(const char *path)
{
    int fd = open(path, O_RDONLY);
    ck_assert_msg(fd >= 0, "%s: %s", path, strerror(errno));
    char *source = test_fd_read_all(fd);
    size_t names = 0;
    /* report(<audit>, "name", ...): the first argument, then a literal. */
    for (const char *p = source; (p = strstr(p, "report(")) != NULL;) {
        p += strlen("report(");
        const char *comma = strpbrk(p, ",)");
        if (comma == NULL || *comma != ',' || comma[1] != ' ' || comma[2] != '"')
            continue;
        const char *name_start = comma + 3, *end = strchr(name_start, '"');
        ck_assert_ptr_nonnull(end);
        char name[64];
        snprintf(name, sizeof(name), "%.*s", (int)(end - name_start), name_start);
        ck_assert_msg(ledger_invariant_check_index(name) >= 0,
                      "%s reports \"%s\", which ledger_invariant_check_name "
                      "does not list", path, name);
        names++;
    }
    free(source);
    return names;
}

/* Every check name that ledger/invariants*.c report is in the list that
 * tally-recon shows (ledger_invariant_check_name): a check added there
 * without its name would be run but never listed as ok. */
START_TEST(every_reported_check_is_listed)
{
    const char *docs = getenv("TALLY_DOCS");
    ck_assert_msg(docs && *docs, "TALLY_DOCS (set by make check) names the source docs/");
    char pattern[1024];
    snprintf(pattern, sizeof(pattern), "%s/../ledger/invariants*.c", docs);
    glob_t rooms;
    ck_assert_int_eq(glob(pattern, 0, NULL, &rooms), 0);
    size_t names = 0;
    for (size_t i = 0; i < rooms.gl_pathc; i++)
        names += reported_checks_listed(rooms.gl_pathv[i]);
    globfree(&rooms);
    ck_assert_uint_gt(names, 10);
}
END_TEST

/* Progress goes to stderr when it is a terminal (and only then: the clean
 * test above saw an empty stderr). */
START_TEST(progress_is_shown_on_a_terminal)
{
    test_store ts;
    copy_master(&ts);
    close_copy(&ts);
    int master_fd = posix_openpt(O_RDWR | O_NOCTTY);
    ck_assert_int_ge(master_fd, 0);
    ck_assert_int_eq(grantpt(master_fd), 0);
    ck_assert_int_eq(unlockpt(master_fd), 0);
    int tty = open(ptsname(master_fd), O_RDWR | O_NOCTTY);
    ck_assert_int_ge(tty, 0);
    int out_fd = test_temp_fd();
    const char *argv[] = {tallyd_program("tally-recon"), "--data", ts.dir, NULL};
    pid_t pid = test_spawn(argv, NULL, out_fd, tty);
    close(tty);
    char seen[8192];
    size_t len = 0;
    for (;;) { /* until the child closes the terminal (EIO) */
        struct pollfd p = {.fd = master_fd, .events = POLLIN};
        if (poll(&p, 1, 60000) <= 0)
            break;
        ssize_t n = read(master_fd, seen + len, sizeof(seen) - 1 - len);
        if (n <= 0)
            break;
        len += (size_t)n;
    }
    seen[len] = '\0';
    ck_assert_int_eq(test_wait(pid), EXIT_CLEAN);
    close(master_fd);
    ck_assert_msg(strstr(seen, "tally-recon: log ") != NULL, "no progress on the tty: %s", seen);
    ck_assert_msg(strstr(seen, "tally-recon: inbox ") != NULL, "no inbox phase: %s", seen);
    char *out = test_fd_read_all(out_fd);
    ck_assert_ptr_nonnull(strstr(out, "result: clean"));
    free(out);
    test_remove_dir(ts.dir);
}
END_TEST

/* ---- a live store ---- */

/* tallyd keeps writing (tally-bench) while tally-recon checks its live
 * directory again and again: every run sees a consistent snapshot (exit
 * 0), the snapshots move on (writes were not blocked), and the bench
 * verifies that every acknowledged write took effect exactly once. Then a
 * `tally backup` of the store passes as well. */
START_TEST(live_directory_is_checked_while_writes_continue)
{
    tallyd_proc p;
    memset(&p, 0, sizeof(p));
    tallyd_start(&p);
    const char *bench[] = {tallyd_program("tally-bench"), "--url", p.url, "--clients", "4",
                           "--seconds", "12", "--accounts", "100", "--batch", "20", NULL};
    int bench_out = test_temp_fd();
    pid_t bench_pid = test_spawn(bench, NULL, bench_out, bench_out);
    uint64_t runs = 0, heads_seen = 0, last_head = 0;
    int64_t deadline = test_deadline_ms(240000);
    int bench_status = -1;
    while (clock_mono_ms() < deadline) {
        int status;
        bool bench_done = test_wait_ms(bench_pid, 0, &status);
        json_t *doc = RECON_JSON(EXIT_CLEAN, p.data_dir, "--max-findings", "5");
        uint64_t head = (uint64_t)json_integer_value(
            json_object_get(json_object_get(doc, "snapshot"), "head_seq"));
        ck_assert_uint_ge(head, last_head);
        heads_seen += head != last_head;
        last_head = head;
        runs++;
        json_decref(doc);
        if (bench_done) {
            bench_status = test_exit_code(status);
            break;
        }
    }
    if (bench_status < 0) {
        kill(bench_pid, SIGKILL);
        waitpid(bench_pid, NULL, 0);
    }
    char *bench_text = test_fd_read_all(bench_out);
    ck_assert_msg(bench_status == 0, "tally-bench exit %d:\n%s", bench_status, bench_text);
    free(bench_text);
    fprintf(stderr, "live: %" PRIu64 " recon runs saw %" PRIu64 " distinct heads, last %" PRIu64
                    "\n", runs, heads_seen, last_head);
    ck_assert_msg(heads_seen >= 3, "only %" PRIu64 " distinct heads in %" PRIu64 " runs",
                  heads_seen, runs);
    /* An online backup (tally backup) passes too. */
    char backup[400];
    snprintf(backup, sizeof(backup), "%s/backup", p.dir);
    const char *tally[] = {tallyd_program("tally"), "--url", p.url, "backup", backup, NULL};
    int tally_out = test_temp_fd();
    int tally_status = test_wait(test_spawn(tally, NULL, tally_out, tally_out));
    char *tally_text = test_fd_read_all(tally_out);
    ck_assert_msg(tally_status == 0, "tally backup exit %d: %s", tally_status, tally_text);
    free(tally_text);
    json_t *doc = RECON_JSON(EXIT_CLEAN, backup);
    ck_assert_uint_ge((uint64_t)json_integer_value(
                          json_object_get(json_object_get(doc, "snapshot"), "head_seq")),
                      last_head);
    json_decref(doc);
    /* tallyd still holds its lock and answers; after it stops, the final
     * store is clean too. */
    ck_assert_int_eq(tallyd_stop(&p), 0);
    doc = RECON_JSON(EXIT_CLEAN, p.data_dir);
    ck_assert_uint_ge((uint64_t)json_integer_value(
                          json_object_get(json_object_get(doc, "snapshot"), "head_seq")),
                      last_head);
    json_decref(doc);
    tallyd_cleanup(&p);
}
END_TEST

static Suite *recon_suite(void)
{
    const test_row tests[] = {
        {"clean", clean_copy_exits_0_with_every_check_ok, TEST_TIMEOUT_S},
        {"no_rebuild", no_rebuild_skips_only_the_fold, TEST_TIMEOUT_S},
        {"log_gap", removed_event_is_a_log_gap, TEST_TIMEOUT_S},
        {"balance", changed_balance_fails_rebuild_and_balance_sum, TEST_TIMEOUT_S},
        {"hash_chain", changed_event_breaks_the_hash_chain, TEST_TIMEOUT_S},
        {"hash_link", rehashed_event_breaks_the_link_to_the_next, TEST_TIMEOUT_S},
        {"inbox_orphan", orphan_inbox_record_breaks_inbox_links, TEST_TIMEOUT_S},
        {"inbox_removed", removed_inbox_record_breaks_inbox_links, TEST_TIMEOUT_S},
        {"inbox_unindexed", unindexed_inbox_record_breaks_inbox_time, TEST_TIMEOUT_S},
        {"history", moved_history_entry_is_found, TEST_TIMEOUT_S},
        {"cursors", cursor_beyond_the_head_is_found, TEST_TIMEOUT_S},
        {"cursors", partitions_records_are_checked, TEST_TIMEOUT_S},
        {"dlq", dead_letter_of_a_missing_seq_is_found, TEST_TIMEOUT_S},
        {"retention", store_after_log_retention_is_checked_from_its_floor, TEST_TIMEOUT_S},
        {"cap", findings_beyond_the_cap_are_counted, TEST_TIMEOUT_S},
        {"balances_csv", balances_statement_csv, TEST_TIMEOUT_S},
        {"balances_jsonl", balances_statement_json_lines, TEST_TIMEOUT_S},
        {"events_csv", events_statement_csv, TEST_TIMEOUT_S},
        {"events_jsonl", events_statement_json_lines, TEST_TIMEOUT_S},
        {"statement_cap", statement_findings_are_capped_too, TEST_TIMEOUT_S},
        {"bad_dirs", missing_or_foreign_directories_exit_2, TEST_TIMEOUT_S},
        {"meta_pages", damaged_meta_pages_exit_2, TEST_TIMEOUT_S},
        {"bad_statements", bad_statement_files_exit_2, TEST_TIMEOUT_S},
        {"usage", usage_errors_exit_2, TEST_TIMEOUT_S},
        {"help", help_lists_every_check, TEST_TIMEOUT_S},
        {"check_list", every_reported_check_is_listed, TEST_TIMEOUT_S},
        {"progress", progress_is_shown_on_a_terminal, TEST_TIMEOUT_S},
        {"live", live_directory_is_checked_while_writes_continue, LIVE_TIMEOUT_S},
    };
    return test_suite_of_rows("recon", TEST_ROWS(tests));
}

int main(void)
{
    if (master_build() != 0) {
        fprintf(stderr, "check_recon: could not build the master store in %s\n", m.dir);
        return EXIT_FAILURE;
    }
    int rc = test_run_suite(recon_suite());
    test_remove_dir(m.dir);
    return rc;
}
