/*
 * check_cli.c — tests of clients/cli/: the real `tally` binary against
 * a real tallyd.
 *
 * Each test that needs a server gets its own tallyd (started and stopped by
 * an unchecked fixture, outside the forked test, so a failing test never
 * leaves a server behind) and runs `tally` by fork/exec with TALLY_URL set,
 * reading its exit code, stdout and stderr. --json output is parsed with
 * jansson. Covered: every command, the exit codes 0/1/2/3, replays of a
 * transfer repeated with the same --key (with the id derived from the key)
 * or the same --id (with the key derived from the id), generated keys that a
 * person can reuse, --for and --until, log and history lines, account
 * lists read page by page (more than one server page, the next page's
 * command on stderr), transfer get by either form of id, human tables;
 * keys and subjects that are not UTF-8 in --json output;
 * tail (live, and as a durable subscriber that continues where the last run
 * stopped), subscribers' metrics in `subscribers` and `stats`, and the
 * dead-letter commands.
 */
#include "clients/libtally/tally.h"
#include "common/clock.h"
#include "tests/support/client_support.h"
#include "tests/support/run.h"
#include "tests/support/suite.h"
#include "tests/support/tallyd_harness.h"
#include "tests/support/tallyd_tls.h"
#include "tests/support/test_support.h"
#include "tests/support/wait.h"
#include "tests/support/wire.h"

#include <check.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <signal.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define TEST_TIMEOUT_S 60
/* An ipc path where no server listens. */
#define DEAD_URL "ipc:///nonexistent-tally-cli-test/req.sock"

static tallyd_proc server;
static pid_t keeper_pid;   /* the process that owns tallyd */
static int keeper_fd = -1; /* closing it tells the keeper to stop tallyd */

/* The harness talks NNG to see tallyd answer. It runs in a keeper process
 * of its own, so that the runner (whose forks run the tests) never holds
 * NNG threads or memory: a forked child inheriting them trips
 * LeakSanitizer. The keeper sends the started tallyd_proc back, waits for
 * its pipe to close and then stops tallyd and removes its directory. */
static void server_up(void)
{
    int up[2], down[2];
    ck_assert_int_eq(pipe2(up, O_CLOEXEC), 0);
    ck_assert_int_eq(pipe2(down, O_CLOEXEC), 0);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        close(up[0]);
        close(down[1]);
        memset(&server, 0, sizeof(server));
        tallyd_start(&server);
        if (write(up[1], &server, sizeof(server)) == (ssize_t)sizeof(server)) {
            char byte;
            while (read(down[0], &byte, 1) > 0)
                ;
        }
        tallyd_cleanup(&server);
        _exit(0); /* no exit handlers: this process is a copy of the runner */
    }
    close(up[1]);
    close(down[0]);
    size_t got = 0;
    for (ssize_t n = 1; got < sizeof(server) && n > 0; got += n > 0 ? (size_t)n : 0)
        n = read(up[0], (char *)&server + got, sizeof(server) - got);
    close(up[0]);
    keeper_pid = pid;
    keeper_fd = down[1];
    ck_assert_msg(got == sizeof(server), "tallyd did not start (see the keeper's messages)");
    tallyd_tls_export(&server); /* the keeper's TALLY_TLS_* stayed in the keeper */
}

static void server_down(void)
{
    close(keeper_fd);
    keeper_fd = -1;
    waitpid(keeper_pid, NULL, 0);
    memset(&server, 0, sizeof(server));
}

/* ---- running the CLI ---- */

typedef struct cli_output {
    int status; /* exit code; 128 + signal when killed */
    char *out, *err;
    double seconds;
} cli_output;

/* Run `tally args...` with TALLY_URL = the test's server (or a dead URL). */
static cli_output tally_argv(const char *const *args)
{
    const char *argv[64] = {tallyd_program("tally")};
    int argc = 1;
    for (; args[argc - 1]; argc++) {
        ck_assert_int_lt(argc, 63);
        argv[argc] = args[argc - 1];
    }
    argv[argc] = NULL;
    char url[sizeof(server.url) + 16], pub[sizeof(server.pub_url) + 16];
    snprintf(url, sizeof(url), "TALLY_URL=%s", server.url[0] ? server.url : DEAD_URL);
    snprintf(pub, sizeof(pub), "TALLY_PUBLISH=%s", server.pub_url[0] ? server.pub_url : DEAD_URL);
    const char *env[] = {url, pub, "TALLY_CONSUMER", NULL};
    int64_t start = clock_mono_ms();
    cli_output r;
    r.status = test_run(argv, env, &r.out, &r.err);
    r.seconds = (double)(clock_mono_ms() - start) / 1000;
    return r;
}

#define TALLY(...) tally_argv((const char *const[]){__VA_ARGS__, NULL})

static void output_free(cli_output *r)
{
    free(r->out);
    free(r->err);
}

static void expect_exit(const cli_output *r, int status)
{
    ck_assert_msg(r->status == status, "exit %d, wanted %d\nstdout: %s\nstderr: %s", r->status,
                  status, r->out, r->err);
}

/* ---- JSON ---- */

static json_t *json_of(const char *text)
{
    json_error_t e;
    json_t *j = json_loads(text, 0, &e);
    ck_assert_msg(j != NULL, "not one JSON value (%s): %s", e.text, text);
    return j;
}

/* Run `tally --json args...`, expect the exit code, parse stdout as one value. */
static json_t *tally_json_argv(int status, const char *const *args)
{
    cli_output r = tally_argv(args);
    expect_exit(&r, status);
    json_t *j = json_of(r.out);
    output_free(&r);
    return j;
}

#define TALLY_JSON(status, ...)                                                                    \
    tally_json_argv(status, (const char *const[]){"--json", __VA_ARGS__, NULL})

/* Each non-empty line of text parsed as a JSON object; returns the count. */
static size_t json_lines(const char *text, json_t **out, size_t max)
{
    size_t n = 0;
    const char *p = text;
    while (*p) {
        const char *end = strchr(p, '\n');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        if (len > 0) {
            ck_assert_uint_lt(n, max);
            json_error_t e;
            out[n] = json_loadb(p, len, 0, &e);
            ck_assert_msg(out[n] != NULL && json_is_object(out[n]), "line not a JSON object: %.*s",
                          (int)len, p);
            n++;
        }
        p += len + (end ? 1 : 0);
    }
    return n;
}

static void json_lines_free(json_t **lines, size_t n)
{
    for (size_t i = 0; i < n; i++)
        json_decref(lines[i]);
}

static const char *jstr(const json_t *o, const char *name)
{
    json_t *v = json_object_get(o, name);
    ck_assert_msg(json_is_string(v), "field %s is not a string", name);
    return json_string_value(v);
}

static json_int_t jint(const json_t *o, const char *name)
{
    json_t *v = json_object_get(o, name);
    ck_assert_msg(json_is_integer(v), "field %s is not an integer", name);
    return json_integer_value(v);
}

static bool jbool(const json_t *o, const char *name)
{
    json_t *v = json_object_get(o, name);
    ck_assert_msg(json_is_boolean(v), "field %s is not a boolean", name);
    return json_is_true(v);
}

static bool is_uuid_v7(const char *s)
{
    if (strlen(s) != 36 || s[14] != '7')
        return false;
    for (int i = 0; i < 36; i++) {
        bool dash = i == 8 || i == 13 || i == 18 || i == 23;
        if (dash ? s[i] != '-' : !strchr("0123456789abcdef", s[i]))
            return false;
    }
    return true;
}

/* A write that must succeed (not replayed); returns its JSON result. */
static json_t *write_ok(const char *const *args)
{
    json_t *j = tally_json_argv(0, args);
    ck_assert_str_eq(jstr(j, "code"), "ok");
    ck_assert(!jbool(j, "replayed"));
    ck_assert_int_gt(jint(j, "seq"), 0);
    return j;
}

#define WRITE_OK(...) json_decref(write_ok((const char *const[]){"--json", __VA_ARGS__, NULL}))

static void open_accounts(void)
{
    WRITE_OK("account", "open", "1");
    WRITE_OK("account", "open", "2");
}

/* The account's field after `tally account get`. */
static json_int_t account_field(const char *id, const char *field)
{
    json_t *a = TALLY_JSON(0, "account", "get", id);
    json_int_t v = jint(a, field);
    json_decref(a);
    return v;
}

/* ---- help and usage (no server) ---- */

START_TEST(test_help_explains_keys_ids_and_exit_codes)
{
    cli_output r = TALLY("--help");
    expect_exit(&r, 0);
    const char *wanted[] = {"account open", "account history", "account list", "transfer get",
                            "transfer", "post", "void",
                            "grant", "extend", "revoke", "entitlements", "log", "stats",
                            "tail", "subscribers", "subscribers show", "subscriber update", "subscriber delete", "dlq list",
                            "dlq replay", "dlq discard", "--publish", "TALLY_PUBLISH",
                            "--url", "--json", "--timeout-ms", "--consumer", "TALLY_URL",
                            "TALLY_CONSUMER", "transfer-<32 hex", "derived from the key",
                            "Exit codes", "unreachable"};
    for (size_t i = 0; i < sizeof(wanted) / sizeof(wanted[0]); i++)
        ck_assert_msg(strstr(r.out, wanted[i]), "tally --help lacks '%s'", wanted[i]);
    output_free(&r);

    const char *commands[][2] = {{"account", "open"}, {"account", "get"}, {"account", "history"},
                                 {"account", "list"}, {"transfer", "get"},
                                 {"transfer", NULL},  {"post", NULL},     {"void", NULL},
                                 {"grant", NULL},     {"extend", NULL},   {"revoke", NULL},
                                 {"entitlements", NULL}, {"log", NULL},   {"stats", NULL},
                                 {"tail", NULL},      {"subscribers", NULL},
                                 {"subscriber", "delete"}, {"dlq", "list"}, {"dlq", "replay"},
                                 {"dlq", "discard"}};
    for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++) {
        r = commands[i][1] ? TALLY(commands[i][0], commands[i][1], "--help")
                           : TALLY(commands[i][0], "--help");
        expect_exit(&r, 0);
        ck_assert_msg(strstr(r.out, "usage: tally ") && strstr(r.out, commands[i][0]) &&
                          strstr(r.out, "Exit codes"),
                      "help of %s: %s", commands[i][0], r.out);
        output_free(&r);
    }
    r = TALLY("dlq", "replay", "--help");
    ck_assert_ptr_nonnull(strstr(r.out, "usage: tally dlq replay NAME [SEQ]"));
    output_free(&r);
    r = TALLY("account", "list", "--help");
    ck_assert_ptr_nonnull(strstr(r.out, "usage: tally account list [--limit N] [--after ID]"));
    output_free(&r);
    r = TALLY("transfer", "get", "--help");
    ck_assert_ptr_nonnull(strstr(r.out, "usage: tally transfer get TID"));
    output_free(&r);
    r = TALLY("transfer", "--help");
    ck_assert_ptr_nonnull(strstr(r.out, "--debit ID --credit ID --amount N"));
    ck_assert_ptr_nonnull(strstr(r.out, "derived from the key"));
    ck_assert_ptr_nonnull(strstr(r.out, "transfer-<32 hex digits of the id>"));
    output_free(&r);
}
END_TEST

START_TEST(test_usage_errors_exit_2)
{
    const char *const cases[][12] = {
        {NULL},
        {"frobnicate", NULL},
        {"--bogus", "stats", NULL},
        {"stats", "--bogus", NULL},
        {"stats", "extra", NULL},
        {"account", NULL},
        {"account", "close", "1", NULL},
        {"account", "open", NULL},
        {"account", "open", "0", NULL},
        {"account", "open", "x1", NULL},
        {"account", "open", "1", "--ledger", "0", NULL},
        {"account", "open", "1", "--code", "65536", NULL},
        {"account", "open", "1", "--key", "", NULL},
        {"transfer", "--credit", "2", "--amount", "5", NULL},
        {"transfer", "--debit", "1", "--credit", "2", "--amount", "0", NULL},
        {"transfer", "--debit", "1", "--credit", "2", "--amount", "-5", NULL},
        {"transfer", "--debit", "1", "--credit", "2", "--amount", "9223372036854775808", NULL},
        {"transfer", "--debit", "1", "--credit", "2", "--amount", "5", "--id", "xyz", NULL},
        {"transfer", "--debit", "1", "--credit", "2", "--amount", "5", "--timeout-s", "9", NULL},
        {"transfer", "--debit", "1", "--debit", "1", "--credit", "2", "--amount", "5", NULL},
        {"transfer", "get", NULL},
        {"transfer", "get", "xyz", NULL},
        {"transfer", "get", "1", "2", NULL},
        {"account", "list", "--limit", "0", NULL},
        {"account", "list", "--limit", "1000001", NULL},
        {"account", "list", "--after", "-1", NULL},
        {"account", "list", "--after", "x", NULL},
        {"account", "list", "5", NULL},
        {"post", NULL},
        {"grant", "alice", NULL},
        {"grant", "alice", "pro", "--for", "10x", NULL},
        {"grant", "alice", "pro", "--for", "0d", NULL},
        {"grant", "alice", "pro", "--until", "2027-13-01T00:00:00Z", NULL},
        {"grant", "alice", "pro", "--until", "2027-01-01", "--for", "1d", NULL},
        {"extend", "alice", "pro", NULL},
        {"log", "--limit", "0", NULL},
        {"--timeout-ms", "0", "stats", NULL},
        {"--json=yes", "stats", NULL},
        {"tail", "--from", "1", "--from-now", NULL},
        {"tail", "--from-start", "--from-time", "2027-01-01", "--subscriber", "s", NULL},
        {"tail", "--from-time", "2027-01-01", NULL},
        {"tail", "--max-deliver", "3", NULL},
        {"tail", "--count", "0", NULL},
        {"tail", "--from", "0", NULL},
        {"tail", "--subscriber", "", NULL},
        {"tail", "--subscriber",
         "n123456789n123456789n123456789n123456789n123456789n123456789n1234", NULL},
        {"tail", "--subscriber", "s", "--ack-wait-ms", "99", NULL},
        {"tail", "--instance", "a", NULL},
        {"tail", "--subscriber", "s", "--instance", "", NULL},
        {"tail", "--subscriber", "s", "--instance", "a b", NULL},
        {"tail", "--subscriber", "s", "--instance", "a:b", NULL},
        {"tail", "--subscriber", "s", "--instance",
         "i123456789i123456789i123456789i123456789i123456789i123456789i1234", NULL},
        {"subscribers", "extra", NULL},
        {"subscriber", "delete", NULL},
        {"dlq", NULL},
        {"dlq", "list", NULL},
        {"dlq", "discard", "s", NULL},
        {"dlq", "replay", "s", "y", NULL},
        {"dlq", "replay", "s", "0", NULL},
        {"dlq", "replay", "s", "1", "2", NULL},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        cli_output r = tally_argv(cases[i]);
        ck_assert_msg(r.status == 2, "case %zu (%s ...): exit %d\nstderr: %s", i,
                      cases[i][0] ? cases[i][0] : "", r.status, r.err);
        ck_assert_msg(strstr(r.err, "--help"), "case %zu: no hint to --help: %s", i, r.err);
        ck_assert_str_eq(r.out, "");
        output_free(&r);
    }
    /* a bad URL or consumer: the message says which */
    static const struct {
        const char *argv[6];
        const char *says;
    } which[] = {
        {{"--url", "nope://x", "stats", NULL}, "bad URL 'nope://x' (tcp://HOST:PORT"},
        {{"--consumer", "", "stats", NULL}, "--consumer must be 1 to 64 bytes"},
    };
    for (size_t i = 0; i < sizeof(which) / sizeof(which[0]); i++) {
        cli_output r = tally_argv(which[i].argv);
        ck_assert_msg(r.status == 2 && strstr(r.err, which[i].says), "which %zu: exit %d: %s", i,
                      r.status, r.err);
        output_free(&r);
    }
}
END_TEST

START_TEST(test_unreachable_exits_3)
{
    cli_output r = TALLY("--url", DEAD_URL, "--timeout-ms", "200", "stats");
    expect_exit(&r, 3);
    ck_assert_double_lt(r.seconds, 10);
    output_free(&r);

    json_t *j = TALLY_JSON(3, "--url", DEAD_URL, "--timeout-ms", "200", "transfer", "--debit",
                           "1", "--credit", "2", "--amount", "5");
    const char *code = jstr(j, "code");
    ck_assert_msg(strcmp(code, "unreachable") == 0 || strcmp(code, "timed_out") == 0, "code %s",
                  code);
    ck_assert(!jbool(j, "replayed"));
    ck_assert(json_is_null(json_object_get(j, "seq")));
    ck_assert(is_uuid_v7(jstr(j, "key")));
    ck_assert_uint_eq(strlen(jstr(j, "transfer_id")), 32);
    json_decref(j);

    /* Human mode: the key to retry with is on stderr. */
    r = TALLY("--url", DEAD_URL, "--timeout-ms", "200", "--retries", "0", "account", "open", "1",
              "--key", "retry-me");
    expect_exit(&r, 3);
    ck_assert_ptr_nonnull(strstr(r.err, "--key retry-me"));
    output_free(&r);
}
END_TEST

/* ---- accounts ---- */

START_TEST(test_account_open_and_get)
{
    json_t *j = TALLY_JSON(0, "account", "open", "1");
    ck_assert_str_eq(jstr(j, "code"), "ok");
    ck_assert(!jbool(j, "replayed"));
    ck_assert_int_eq(jint(j, "seq"), 1);
    ck_assert_msg(is_uuid_v7(jstr(j, "key")), "generated key %s", jstr(j, "key"));
    json_decref(j);
    WRITE_OK("account", "open", "9", "--ledger", "7", "--code", "3",
             "--debits-must-not-exceed-credits", "--key", "open-9");

    j = TALLY_JSON(0, "account", "get", "9");
    ck_assert_int_eq(jint(j, "id"), 9);
    ck_assert_int_eq(jint(j, "ledger"), 7);
    ck_assert_int_eq(jint(j, "code"), 3);
    ck_assert_int_eq(jint(j, "flags"), 1);
    ck_assert(jbool(j, "debits_must_not_exceed_credits"));
    ck_assert(!jbool(j, "credits_must_not_exceed_debits"));
    ck_assert_int_eq(jint(j, "debits_posted"), 0);
    ck_assert_int_eq(jint(j, "credits_posted"), 0);
    ck_assert_int_eq(jint(j, "debits_pending"), 0);
    ck_assert_int_eq(jint(j, "credits_pending"), 0);
    ck_assert_int_eq(jint(j, "version"), 1);
    json_decref(j);

    /* The same key again is a replay (exit 0); a new key on the same id is `exists`. */
    j = TALLY_JSON(0, "account", "open", "9", "--ledger", "7", "--code", "3",
                   "--debits-must-not-exceed-credits", "--key", "open-9");
    ck_assert_str_eq(jstr(j, "code"), "ok");
    ck_assert(jbool(j, "replayed"));
    ck_assert_int_eq(jint(j, "seq"), 2);
    json_decref(j);
    j = TALLY_JSON(1, "account", "open", "9", "--ledger", "7", "--code", "3",
                   "--debits-must-not-exceed-credits");
    ck_assert_str_eq(jstr(j, "code"), "exists");
    ck_assert(json_is_null(json_object_get(j, "seq")));
    json_decref(j);

    j = TALLY_JSON(1, "account", "get", "404");
    ck_assert_str_eq(jstr(j, "code"), "not_found");
    json_decref(j);

    cli_output r = TALLY("account", "get", "9");
    expect_exit(&r, 0);
    ck_assert_msg(strstr(r.out, "ID") && strstr(r.out, "LEDGER") &&
                      strstr(r.out, "DEBITS_POSTED") && strstr(r.out, "CREDITS_PENDING") &&
                      strstr(r.out, "VERSION"),
                  "no header: %s", r.out);
    ck_assert_ptr_nonnull(strchr(strchr(r.out, '\n'), '9'));
    output_free(&r);
}
END_TEST

/* User data: given with --user-data-*, kept, shown by `get --json`; the
 * same id with other user data is exists_with_different_user_data_*. */
START_TEST(test_user_data_round_trips)
{
    WRITE_OK("account", "open", "21", "--user-data-128", "0123456789abcdef0123456789abcdef",
             "--user-data-64", "18446744073709551615", "--user-data-32", "7");
    WRITE_OK("account", "open", "22");
    json_t *j = TALLY_JSON(0, "account", "get", "21");
    ck_assert_str_eq(jstr(j, "user_data_128"), "0123456789abcdef0123456789abcdef");
    ck_assert_str_eq(jstr(j, "user_data_64"), "18446744073709551615");
    ck_assert_int_eq(jint(j, "user_data_32"), 7);
    ck_assert_ptr_nonnull(json_object_get(j, "created"));
    json_decref(j);
    j = TALLY_JSON(1, "account", "open", "21", "--user-data-128",
                   "0123456789abcdef0123456789abcdef", "--user-data-64", "1", "--user-data-32",
                   "7");
    ck_assert_str_eq(jstr(j, "code"), "exists_with_different_user_data_64");
    json_decref(j);
    WRITE_OK("transfer", "--debit", "21", "--credit", "22", "--amount", "5", "--id", "77",
             "--user-data-32", "9");
    j = TALLY_JSON(0, "transfer", "get", "77");
    ck_assert_int_eq(jint(j, "user_data_32"), 9);
    ck_assert_str_eq(jstr(j, "user_data_128"), "00000000000000000000000000000000");
    json_decref(j);
}
END_TEST

/* ---- transfers ---- */

START_TEST(test_transfer_same_key_is_a_replay)
{
    open_accounts();
    json_t *first = TALLY_JSON(0, "transfer", "--debit", "1", "--credit", "2", "--amount", "10",
                               "--key", "pay-1");
    ck_assert_str_eq(jstr(first, "code"), "ok");
    ck_assert(!jbool(first, "replayed"));
    ck_assert_str_eq(jstr(first, "key"), "pay-1");
    const char *id = jstr(first, "transfer_id");
    ck_assert_uint_eq(strlen(id), 32);

    json_t *again = TALLY_JSON(0, "transfer", "--debit", "1", "--credit", "2", "--amount", "10",
                               "--key", "pay-1");
    ck_assert_str_eq(jstr(again, "code"), "ok");
    ck_assert(jbool(again, "replayed"));
    ck_assert_str_eq(jstr(again, "transfer_id"), id);
    ck_assert_int_eq(jint(again, "seq"), jint(first, "seq"));
    json_decref(first);
    json_decref(again);

    ck_assert_int_eq(account_field("1", "debits_posted"), 10);
    ck_assert_int_eq(account_field("2", "credits_posted"), 10);

    /* The same key with other fields is refused, not applied. */
    json_t *j = TALLY_JSON(1, "transfer", "--debit", "1", "--credit", "2", "--amount", "11",
                           "--key", "pay-1");
    ck_assert_str_eq(jstr(j, "code"), "idempotency_key_reused");
    json_decref(j);
    ck_assert_int_eq(account_field("2", "credits_posted"), 10);
}
END_TEST

START_TEST(test_transfer_id_without_key_is_a_replay)
{
    open_accounts();
    json_t *first = TALLY_JSON(0, "transfer", "--debit", "1", "--credit", "2", "--amount", "7",
                               "--id", "42");
    ck_assert(!jbool(first, "replayed"));
    ck_assert_str_eq(jstr(first, "transfer_id"), "0000000000000000000000000000002a");
    ck_assert_str_eq(jstr(first, "key"), "transfer-0000000000000000000000000000002a");
    json_decref(first);

    /* The same id in hex with dashes is the same transfer, the same key. */
    json_t *again = TALLY_JSON(0, "transfer", "--debit", "1", "--credit", "2", "--amount", "7",
                               "--id", "00000000-0000-0000-0000-00000000002A");
    ck_assert_str_eq(jstr(again, "code"), "ok");
    ck_assert(jbool(again, "replayed"));
    ck_assert_str_eq(jstr(again, "transfer_id"), "0000000000000000000000000000002a");
    json_decref(again);
    ck_assert_int_eq(account_field("2", "credits_posted"), 7);

    /* The same id under another key is a second command: `exists`, no effect. */
    json_t *other = TALLY_JSON(1, "transfer", "--debit", "1", "--credit", "2", "--amount", "7",
                               "--id", "42", "--key", "other");
    ck_assert_str_eq(jstr(other, "code"), "exists");
    json_decref(other);
    ck_assert_int_eq(account_field("2", "credits_posted"), 7);
}
END_TEST

/* The key printed by a human-mode write retries it by hand. */
START_TEST(test_generated_key_is_printed_and_retries)
{
    open_accounts();
    cli_output r = TALLY("transfer", "--debit", "1", "--credit", "2", "--amount", "3");
    expect_exit(&r, 0);
    const char *at = strstr(r.err, "key ");
    ck_assert_msg(at != NULL, "no key on stderr: %s", r.err);
    char key[37] = {0};
    memcpy(key, at + 4, 36);
    ck_assert_msg(is_uuid_v7(key), "printed key %s", key);
    const char *tid_at = strstr(r.out, "transfer_id");
    ck_assert_ptr_nonnull(tid_at);
    char tid[33] = {0};
    ck_assert_int_eq(sscanf(tid_at, "transfer_id %32s", tid), 1);
    ck_assert_ptr_nonnull(strstr(r.out, "code"));
    ck_assert_ptr_nonnull(strstr(r.out, "ok"));
    output_free(&r);

    json_t *j = TALLY_JSON(0, "transfer", "--debit", "1", "--credit", "2", "--amount", "3",
                           "--key", key);
    ck_assert(jbool(j, "replayed"));
    ck_assert_str_eq(jstr(j, "transfer_id"), tid);
    ck_assert_str_eq(jstr(j, "key"), key);
    json_decref(j);
    ck_assert_int_eq(account_field("2", "credits_posted"), 3);

    /* Two runs without --key are two transfers with two keys. */
    json_t *a = TALLY_JSON(0, "transfer", "--debit", "1", "--credit", "2", "--amount", "1");
    json_t *b = TALLY_JSON(0, "transfer", "--debit", "1", "--credit", "2", "--amount", "1");
    ck_assert_str_ne(jstr(a, "key"), jstr(b, "key"));
    ck_assert_str_ne(jstr(a, "transfer_id"), jstr(b, "transfer_id"));
    json_decref(a);
    json_decref(b);
    ck_assert_int_eq(account_field("2", "credits_posted"), 5);
}
END_TEST

START_TEST(test_rejection_exits_1)
{
    WRITE_OK("account", "open", "1", "--debits-must-not-exceed-credits");
    WRITE_OK("account", "open", "2");
    json_t *j = TALLY_JSON(1, "transfer", "--debit", "1", "--credit", "2", "--amount", "5",
                           "--key", "too-much");
    ck_assert_str_eq(jstr(j, "code"), "exceeds_credits");
    ck_assert(!jbool(j, "replayed"));
    json_decref(j);
    /* A stored rejection is replayed for the same key: still exit 1. */
    j = TALLY_JSON(1, "transfer", "--debit", "1", "--credit", "2", "--amount", "5", "--key",
                   "too-much");
    ck_assert_str_eq(jstr(j, "code"), "exceeds_credits");
    ck_assert(jbool(j, "replayed"));
    json_decref(j);

    cli_output r = TALLY("transfer", "--debit", "2", "--credit", "3", "--amount", "5");
    expect_exit(&r, 1);
    ck_assert_ptr_nonnull(strstr(r.out, "credit_account_not_found"));
    ck_assert_ptr_nonnull(strstr(r.err, "rejected"));
    output_free(&r);
    ck_assert_int_eq(account_field("2", "credits_posted"), 0);
}
END_TEST

START_TEST(test_hold_post_and_void)
{
    open_accounts();
    WRITE_OK("transfer", "--debit", "1", "--credit", "2", "--amount", "30", "--id", "100",
             "--pending", "--timeout-s", "3600");
    ck_assert_int_eq(account_field("1", "debits_pending"), 30);
    ck_assert_int_eq(account_field("1", "debits_posted"), 0);

    json_t *j = TALLY_JSON(0, "post", "100", "--amount", "20", "--key", "capture-100");
    ck_assert_str_eq(jstr(j, "code"), "ok");
    ck_assert_str_eq(jstr(j, "transfer_id"), "00000000000000000000000000000064");
    json_decref(j);
    j = TALLY_JSON(0, "post", "100", "--amount", "20", "--key", "capture-100");
    ck_assert(jbool(j, "replayed"));
    json_decref(j);
    ck_assert_int_eq(account_field("1", "debits_pending"), 0);
    ck_assert_int_eq(account_field("1", "debits_posted"), 20);
    ck_assert_int_eq(account_field("2", "credits_posted"), 20);

    WRITE_OK("transfer", "--debit", "1", "--credit", "2", "--amount", "8", "--id",
             "00000000000000000000000000000065", "--pending");
    ck_assert_int_eq(account_field("2", "credits_pending"), 8);
    WRITE_OK("void", "101");
    ck_assert_int_eq(account_field("2", "credits_pending"), 0);
    j = TALLY_JSON(1, "void", "101");
    ck_assert_str_eq(jstr(j, "code"), "pending_transfer_already_voided");
    json_decref(j);
    j = TALLY_JSON(1, "post", "999");
    ck_assert_str_eq(jstr(j, "code"), "pending_transfer_not_found");
    json_decref(j);
}
END_TEST

/* ---- entitlements ---- */

static json_t *entitlement_of(json_t *list, const char *feature)
{
    ck_assert(json_is_array(list));
    for (size_t i = 0; i < json_array_size(list); i++) {
        json_t *e = json_array_get(list, i);
        if (strcmp(jstr(e, "feature"), feature) == 0)
            return e;
    }
    ck_abort_msg("no entitlement %s", feature);
    return NULL;
}

START_TEST(test_grant_for_and_until)
{
    long long now_ms = (long long)time(NULL) * 1000;
    WRITE_OK("grant", "alice", "pro", "--for", "30d");
    WRITE_OK("grant", "alice", "team", "--until", "2099-01-01T00:00:00Z");
    WRITE_OK("grant", "alice", "beta", "--until", "2099-01-01T02:30:00+02:30");
    WRITE_OK("grant", "alice", "hours", "--for", "1w");
    WRITE_OK("grant", "alice", "life");

    json_t *list = TALLY_JSON(0, "entitlements", "alice");
    ck_assert_uint_eq(json_array_size(list), 5);
    json_t *e = entitlement_of(list, "pro");
    ck_assert_str_eq(jstr(e, "state"), "active");
    ck_assert_int_eq(jint(e, "version"), 1);
    long long until = jint(e, "valid_until_ms"), month = 30LL * 86400 * 1000;
    ck_assert_msg(until > now_ms + month - 300000 && until < now_ms + month + 300000,
                  "pro until %lld, now %lld", until, now_ms);
    ck_assert_uint_eq(strlen(jstr(e, "valid_until")), 20 + (until % 1000 ? 4 : 0));
    until = jint(entitlement_of(list, "hours"), "valid_until_ms");
    ck_assert(until > now_ms + 7 * 86400000LL - 300000 && until < now_ms + 7 * 86400000LL + 300000);
    ck_assert_str_eq(jstr(entitlement_of(list, "team"), "valid_until"), "2099-01-01T00:00:00Z");
    ck_assert_str_eq(jstr(entitlement_of(list, "beta"), "valid_until"), "2099-01-01T00:00:00Z");
    e = entitlement_of(list, "life");
    ck_assert(json_is_null(json_object_get(e, "valid_until")));
    ck_assert(jbool(e, "lifetime"));
    json_decref(list);

    cli_output r = TALLY("entitlements", "alice");
    expect_exit(&r, 0);
    ck_assert_msg(strstr(r.out, "FEATURE") && strstr(r.out, "STATE") &&
                      strstr(r.out, "VALID_UNTIL") && strstr(r.out, "VERSION") &&
                      strstr(r.out, "lifetime") && strstr(r.out, "2099-01-01T00:00:00Z"),
                  "table: %s", r.out);
    output_free(&r);

    list = TALLY_JSON(0, "entitlements", "nobody");
    ck_assert_uint_eq(json_array_size(list), 0);
    json_decref(list);
}
END_TEST

START_TEST(test_extend_and_revoke)
{
    WRITE_OK("grant", "bob", "pro", "--until", "2090-01-01T00:00:00Z", "--source-order", "1");
    WRITE_OK("extend", "bob", "pro", "--until", "2091-06-01T12:00:00Z", "--source-order", "2");
    json_t *list = TALLY_JSON(0, "entitlements", "bob");
    json_t *e = entitlement_of(list, "pro");
    ck_assert_str_eq(jstr(e, "valid_until"), "2091-06-01T12:00:00Z");
    ck_assert_int_eq(jint(e, "version"), 2);
    ck_assert_int_eq(jint(e, "source_order"), 2);
    json_decref(list);

    json_t *j = TALLY_JSON(1, "extend", "bob", "pro", "--until", "2091-01-01T00:00:00Z");
    ck_assert_str_eq(jstr(j, "code"), "extension_must_move_forward");
    json_decref(j);
    j = TALLY_JSON(1, "revoke", "bob", "pro", "--source-order", "1");
    ck_assert_str_eq(jstr(j, "code"), "stale");
    json_decref(j);
    WRITE_OK("revoke", "bob", "pro", "--source-order", "3");
    list = TALLY_JSON(0, "entitlements", "bob");
    ck_assert_str_eq(jstr(entitlement_of(list, "pro"), "state"), "revoked");
    json_decref(list);
    j = TALLY_JSON(1, "revoke", "bob", "pro");
    ck_assert_str_eq(jstr(j, "code"), "entitlement_already_revoked");
    json_decref(j);
    j = TALLY_JSON(1, "extend", "bob", "nothing", "--for", "1d");
    ck_assert_str_eq(jstr(j, "code"), "entitlement_not_found");
    json_decref(j);
}
END_TEST

/* ---- log, history, stats ---- */

START_TEST(test_log_lines_are_json)
{
    open_accounts();
    WRITE_OK("transfer", "--debit", "1", "--credit", "2", "--amount", "4", "--key", "t-1");
    cli_output r = TALLY("--json", "log");
    expect_exit(&r, 0);
    json_t *lines[8];
    size_t n = json_lines(r.out, lines, 8);
    output_free(&r);
    ck_assert_uint_eq(n, 3);
    const char *types[] = {"account.opened", "account.opened", "transfer.created"};
    for (size_t i = 0; i < n; i++) {
        ck_assert_int_eq(jint(lines[i], "seq"), (json_int_t)i + 1);
        ck_assert_str_eq(jstr(lines[i], "type"), types[i]);
        ck_assert_int_eq(jint(lines[i], "entity_version"), 1);
        ck_assert_uint_eq(strlen(jstr(lines[i], "event_id")), 36);
        ck_assert_str_eq(jstr(lines[i], "consumer"), "cli");
        const char *time_text = jstr(lines[i], "time");
        ck_assert_int_eq(time_text[strlen(time_text) - 1], 'Z');
    }
    ck_assert_str_eq(jstr(lines[2], "key"), "t-1");
    json_lines_free(lines, n);

    r = TALLY("--json", "log", "--from", "2", "--limit", "1");
    expect_exit(&r, 0);
    n = json_lines(r.out, lines, 8);
    ck_assert_uint_eq(n, 1);
    ck_assert_int_eq(jint(lines[0], "seq"), 2);
    json_lines_free(lines, n);
    output_free(&r);

    r = TALLY("log", "--from", "3");
    expect_exit(&r, 0);
    ck_assert_msg(strstr(r.out, "SEQ") && strstr(r.out, "TYPE") && strstr(r.out, "KEY") &&
                      strstr(r.out, "transfer.created") && !strstr(r.out, "account.opened"),
                  "log table: %s", r.out);
    output_free(&r);
}
END_TEST

START_TEST(test_account_history_lines_are_json)
{
    open_accounts();
    WRITE_OK("transfer", "--debit", "1", "--credit", "2", "--amount", "4");
    WRITE_OK("transfer", "--debit", "2", "--credit", "1", "--amount", "1");
    WRITE_OK("transfer", "--debit", "1", "--credit", "2", "--amount", "9", "--id", "77",
             "--pending");
    cli_output r = TALLY("--json", "account", "history", "1");
    expect_exit(&r, 0);
    json_t *lines[8];
    size_t n = json_lines(r.out, lines, 8);
    output_free(&r);
    ck_assert_uint_eq(n, 3);
    json_int_t last_seq = 0;
    for (size_t i = 0; i < n; i++) {
        ck_assert_int_gt(jint(lines[i], "seq"), last_seq);
        last_seq = jint(lines[i], "seq");
        ck_assert_str_eq(jstr(lines[i], "type"), "transfer.created");
        ck_assert(json_is_object(json_object_get(lines[i], "transfer")));
        ck_assert_int_eq(jint(json_object_get(lines[i], "account"), "id"), 1);
    }
    json_t *third = lines[2], *transfer = json_object_get(third, "transfer");
    ck_assert_int_eq(jint(transfer, "amount"), 9);
    ck_assert_str_eq(jstr(transfer, "state"), "pending");
    ck_assert_str_eq(jstr(transfer, "id"), "0000000000000000000000000000004d");
    ck_assert_int_eq(jint(json_object_get(third, "account"), "debits_pending"), 9);
    ck_assert_int_eq(jint(json_object_get(lines[1], "account"), "credits_posted"), 1);
    json_lines_free(lines, n);

    r = TALLY("--json", "account", "history", "1", "--limit", "1");
    expect_exit(&r, 0);
    n = json_lines(r.out, lines, 8);
    ck_assert_uint_eq(n, 1);
    json_lines_free(lines, n);
    output_free(&r);

    r = TALLY("account", "history", "1");
    expect_exit(&r, 0);
    ck_assert_msg(strstr(r.out, "SEQ") && strstr(r.out, "TYPE") && strstr(r.out, "AMOUNT") &&
                      strstr(r.out, "transfer.created"),
                  "history table: %s", r.out);
    output_free(&r);
}
END_TEST

/* Run `tally --json args...` and parse each line of stdout into lines
 * (malloc'd, max entries); returns the count. */
static size_t json_lines_of(const char *const *args, json_t ***lines, size_t max)
{
    cli_output r = tally_argv(args);
    expect_exit(&r, 0);
    *lines = calloc(max, sizeof(**lines));
    ck_assert_ptr_nonnull(*lines);
    size_t n = json_lines(r.out, *lines, max);
    output_free(&r);
    return n;
}

#define LIST_LINES_MAX 1100

START_TEST(test_account_list_pages)
{
    cli_output r = TALLY("--json", "account", "list");
    expect_exit(&r, 0);
    ck_assert_str_eq(r.out, ""); /* an empty store: no lines */
    output_free(&r);

    WRITE_OK("account", "open", "5");
    WRITE_OK("account", "open", "1");
    WRITE_OK("account", "open", "3", "--debits-must-not-exceed-credits");
    WRITE_OK("transfer", "--debit", "1", "--credit", "3", "--amount", "7");
    /* 1001 more, by batches: a listing past one server page (1000) */
    tally_client *c = test_client_open(server.url);
    test_client_open_accounts(c, 100, 1001);
    tally_client_close(c);

    /* Every line is what `account get` prints for that id. */
    json_t **lines;
    size_t n = json_lines_of((const char *const[]){"--json", "account", "list", "--limit", "2",
                                                   NULL},
                             &lines, LIST_LINES_MAX);
    ck_assert_uint_eq(n, 2);
    const char *ids[] = {"1", "3"};
    for (size_t i = 0; i < n; i++) {
        json_t *get = TALLY_JSON(0, "account", "get", ids[i]);
        ck_assert_msg(json_equal(lines[i], get), "list line %zu differs from account get", i);
        json_decref(get);
    }
    ck_assert_int_eq(jint(lines[0], "debits_posted"), 7);
    ck_assert(jbool(lines[1], "debits_must_not_exceed_credits"));
    json_lines_free(lines, n);
    free(lines);

    /* Across the server's pages: 1000 + 3, in id order, no id twice. */
    n = json_lines_of((const char *const[]){"--json", "account", "list", "--limit", "1003", NULL},
                      &lines, LIST_LINES_MAX);
    ck_assert_uint_eq(n, 1003);
    json_int_t last = 0;
    for (size_t i = 0; i < n; i++) {
        ck_assert_int_gt(jint(lines[i], "id"), last);
        last = jint(lines[i], "id");
    }
    ck_assert_int_eq(last, 1099);
    json_lines_free(lines, n);
    free(lines);
    n = json_lines_of((const char *const[]){"--json", "account", "list", "--limit", "1000000",
                                            NULL},
                      &lines, LIST_LINES_MAX);
    ck_assert_uint_eq(n, 1004);
    ck_assert_int_eq(jint(lines[n - 1], "id"), 1100);
    json_lines_free(lines, n);
    free(lines);

    /* --after: the page after an id (one that is no account's too). */
    n = json_lines_of((const char *const[]){"--json", "account", "list", "--after", "1098",
                                            NULL},
                      &lines, LIST_LINES_MAX);
    ck_assert_uint_eq(n, 2);
    ck_assert_int_eq(jint(lines[0], "id"), 1099);
    json_lines_free(lines, n);
    free(lines);
    n = json_lines_of((const char *const[]){"--json", "account", "list", "--after", "4",
                                            "--limit", "2", NULL},
                      &lines, LIST_LINES_MAX);
    ck_assert_uint_eq(n, 2);
    ck_assert_int_eq(jint(lines[0], "id"), 5);
    ck_assert_int_eq(jint(lines[1], "id"), 100);
    json_lines_free(lines, n);
    free(lines);

    /* The human table; the next page's command on stderr when more follow. */
    r = TALLY("account", "list", "--limit", "2");
    expect_exit(&r, 0);
    ck_assert_msg(strstr(r.out, "ID") && strstr(r.out, "DEBITS_POSTED") &&
                      strstr(r.out, "VERSION") && strstr(r.out, "debits<=credits"),
                  "account list table: %s", r.out);
    ck_assert_msg(strstr(r.err, "tally: more: tally account list --after 3\n"), "stderr: %s",
                  r.err);
    output_free(&r);
    r = TALLY("account", "list", "--after", "1099");
    expect_exit(&r, 0);
    ck_assert_msg(strstr(r.out, "1100") && !strstr(r.out, "1099"), "last page: %s", r.out);
    ck_assert_msg(!strstr(r.err, "more"), "no more after the last page: %s", r.err);
    output_free(&r);
    r = TALLY("--json", "account", "list", "--after", "1100");
    expect_exit(&r, 0);
    ck_assert_str_eq(r.out, "");
    output_free(&r);
}
END_TEST

/* tally reverse: part, then the rest; beyond it a rejection (exit 1). */
START_TEST(test_reverse)
{
    WRITE_OK("account", "open", "41");
    WRITE_OK("account", "open", "42");
    WRITE_OK("transfer", "--debit", "41", "--credit", "42", "--amount", "10", "--id", "401");
    WRITE_OK("reverse", "401", "--amount", "4", "--id", "402", "--user-data-32", "8");
    json_t *j = TALLY_JSON(0, "transfer", "get", "402");
    ck_assert_int_eq(jint(j, "debit_account_id"), 42);
    ck_assert_int_eq(jint(j, "credit_account_id"), 41);
    ck_assert_int_eq(jint(j, "amount"), 4);
    ck_assert_str_eq(jstr(j, "reverses"), "00000000000000000000000000000191");
    ck_assert_int_eq(jint(j, "user_data_32"), 8);
    json_decref(j);
    j = TALLY_JSON(1, "reverse", "401", "--amount", "7", "--id", "403");
    ck_assert_str_eq(jstr(j, "code"), "exceeds_unreversed_amount");
    json_decref(j);
    WRITE_OK("reverse", "401", "--id", "404"); /* the 6 left */
    j = TALLY_JSON(0, "transfer", "get", "401");
    ck_assert_int_eq(jint(j, "reversed_amount"), 10);
    json_decref(j);
    j = TALLY_JSON(0, "account", "get", "41");
    ck_assert_int_eq(jint(j, "debits_posted"), 10);
    ck_assert_int_eq(jint(j, "credits_posted"), 10);
    json_decref(j);
}
END_TEST

/* --balancing-debit moves what there is; --closing-debit closes the
 * account until its hold is voided. */
START_TEST(test_balancing_and_closing)
{
    WRITE_OK("account", "open", "51", "--debits-must-not-exceed-credits");
    WRITE_OK("account", "open", "52");
    WRITE_OK("transfer", "--debit", "52", "--credit", "51", "--amount", "30", "--id", "501");
    WRITE_OK("transfer", "--debit", "51", "--credit", "52", "--amount", "1000", "--id", "502",
             "--balancing-debit");
    json_t *j = TALLY_JSON(0, "transfer", "get", "502");
    ck_assert_int_eq(jint(j, "amount"), 30);
    json_decref(j);
    WRITE_OK("transfer", "--debit", "52", "--credit", "51", "--amount", "1", "--id", "503",
             "--pending", "--closing-credit");
    j = TALLY_JSON(0, "account", "get", "51");
    ck_assert(jbool(j, "closed"));
    json_decref(j);
    j = TALLY_JSON(1, "transfer", "--debit", "52", "--credit", "51", "--amount", "1", "--id",
                   "504");
    ck_assert_str_eq(jstr(j, "code"), "credit_account_already_closed");
    json_decref(j);
    WRITE_OK("void", "0000000000000000000000000000" "01f7");
    j = TALLY_JSON(0, "account", "get", "51");
    ck_assert(!jbool(j, "closed"));
    json_decref(j);
}
END_TEST

/* --imported-at sends the imported flag and the time (on this server,
 * which holds later events, an old time is refused as a regression);
 * `account balances` lists the balances after each transfer event and
 * `account balance-at` the balances at a seq. */
START_TEST(test_imported_and_balances)
{
    WRITE_OK("account", "open", "61");
    WRITE_OK("account", "open", "62");
    json_t *j = TALLY_JSON(1, "account", "open", "63", "--imported-at", "2020-01-01T00:00:00Z");
    ck_assert_str_eq(jstr(j, "code"), "imported_event_timestamp_must_not_regress");
    json_decref(j);
    j = TALLY_JSON(1, "transfer", "--debit", "61", "--credit", "62", "--amount", "5", "--id",
                   "601", "--imported-at", "2020-01-01T00:00:00Z");
    ck_assert_str_eq(jstr(j, "code"), "imported_event_timestamp_must_not_regress");
    json_decref(j);
    WRITE_OK("transfer", "--debit", "61", "--credit", "62", "--amount", "5", "--id", "602");
    WRITE_OK("transfer", "--debit", "61", "--credit", "62", "--amount", "7", "--id", "603");
    json_t **lines;
    size_t n = json_lines_of((const char *const[]){"--json", "account", "balances", "62", NULL},
                             &lines, 8);
    ck_assert_uint_eq(n, 2);
    ck_assert_int_eq(jint(lines[0], "credits_posted"), 5);
    ck_assert_int_eq(jint(lines[1], "credits_posted"), 12);
    json_int_t first_seq = jint(lines[0], "seq");
    for (size_t i = 0; i < n; i++)
        json_decref(lines[i]);
    free(lines);
    char seq[32];
    snprintf(seq, sizeof(seq), "%lld", (long long)first_seq);
    j = TALLY_JSON(0, "account", "balance-at", "62", "--seq", seq);
    ck_assert_int_eq(jint(j, "credits_posted"), 5);
    json_decref(j);
    j = TALLY_JSON(0, "account", "balance-at", "62", "--time", "2020-01-01T00:00:00Z");
    ck_assert_int_eq(jint(j, "seq"), 0);
    json_decref(j);
}
END_TEST

/* The ids that `tally --json ARGS` printed, one object a line. */
static void expect_listed(const char *const *args, const char *field, const char *const *want,
                          size_t n)
{
    json_t **lines;
    size_t got = json_lines_of(args, &lines, 16);
    ck_assert_uint_eq(got, n);
    for (size_t i = 0; i < n; i++) {
        json_t *v = json_object_get(lines[i], field);
        char text[40];
        if (json_is_integer(v))
            snprintf(text, sizeof(text), "%lld", (long long)json_integer_value(v));
        else
            snprintf(text, sizeof(text), "%s", json_string_value(v));
        ck_assert_str_eq(text, want[i]);
    }
    json_lines_free(lines, got);
    free(lines);
}

/* account list with a filter (account_query), transfer list
 * (transfer_query, account_transfers), across pages of one record. */
START_TEST(test_account_and_transfer_list_queries)
{
    WRITE_OK("account", "open", "31", "--code", "77", "--user-data-64", "5");
    WRITE_OK("account", "open", "32", "--code", "77");
    WRITE_OK("account", "open", "33", "--code", "78", "--user-data-64", "5");
    WRITE_OK("transfer", "--debit", "31", "--credit", "32", "--amount", "1", "--id", "301",
             "--code", "9");
    WRITE_OK("transfer", "--debit", "32", "--credit", "31", "--amount", "2", "--id", "302");
    WRITE_OK("transfer", "--debit", "33", "--credit", "32", "--amount", "3", "--id", "303",
             "--code", "9");
    expect_listed((const char *const[]){"--json", "account", "list", "--code", "77", NULL}, "id",
                  (const char *const[]){"31", "32"}, 2);
    expect_listed((const char *const[]){"--json", "account", "list", "--code", "77", "--reverse",
                                        NULL},
                  "id", (const char *const[]){"32", "31"}, 2);
    expect_listed((const char *const[]){"--json", "account", "list", "--user-data-64", "5",
                                        "--limit", "1", NULL},
                  "id", (const char *const[]){"31"}, 1);
    expect_listed((const char *const[]){"--json", "transfer", "list", "--code", "9", NULL}, "id",
                  (const char *const[]){"0000000000000000000000000000012d",
                                        "0000000000000000000000000000012f"},
                  2);
    expect_listed((const char *const[]){"--json", "transfer", "list", "--account", "32",
                                        "--credits", "--reverse", NULL},
                  "id", (const char *const[]){"0000000000000000000000000000012f",
                                              "0000000000000000000000000000012d"},
                  2);
    expect_listed((const char *const[]){"--json", "transfer", "list", "--account", "31", NULL},
                  "id", (const char *const[]){"0000000000000000000000000000012d",
                                              "0000000000000000000000000000012e"},
                  2);
    cli_output r = TALLY("account", "list", "--code", "77", "--after", "3");
    expect_exit(&r, 2);
    output_free(&r);
}
END_TEST

START_TEST(test_transfer_get)
{
    open_accounts();
    WRITE_OK("transfer", "--debit", "1", "--credit", "2", "--amount", "9", "--id", "77",
             "--pending", "--timeout-s", "3600");
    json_t *w = TALLY_JSON(0, "transfer", "--debit", "2", "--credit", "1", "--amount", "4",
                           "--key", "pay-back");
    char hex[33];
    snprintf(hex, sizeof(hex), "%s", jstr(w, "transfer_id"));
    json_decref(w);

    json_t *t = TALLY_JSON(0, "transfer", "get", "77");
    ck_assert_str_eq(jstr(t, "id"), "0000000000000000000000000000004d");
    ck_assert_int_eq(jint(t, "debit_account_id"), 1);
    ck_assert_int_eq(jint(t, "credit_account_id"), 2);
    ck_assert_int_eq(jint(t, "amount"), 9);
    ck_assert(jbool(t, "pending"));
    ck_assert_str_eq(jstr(t, "state"), "pending");
    ck_assert_int_eq(jint(t, "timeout_s"), 3600);
    ck_assert_ptr_nonnull(json_string_value(json_object_get(t, "expires_at")));
    ck_assert_int_eq(jint(t, "version"), 1);
    ck_assert_int_eq(jint(t, "resolved_seq"), 0);
    json_decref(t);

    /* By its 32 hex digits, and in the dashed form */
    t = TALLY_JSON(0, "transfer", "get", hex);
    ck_assert_str_eq(jstr(t, "id"), hex);
    ck_assert_int_eq(jint(t, "amount"), 4);
    ck_assert_str_eq(jstr(t, "state"), "posted");
    ck_assert(!jbool(t, "pending"));
    json_decref(t);
    char dashed[37];
    snprintf(dashed, sizeof(dashed), "%.8s-%.4s-%.4s-%.4s-%.12s", hex, hex + 8, hex + 12,
             hex + 16, hex + 20);
    t = TALLY_JSON(0, "transfer", "get", dashed);
    ck_assert_str_eq(jstr(t, "id"), hex);
    json_decref(t);

    /* A hold posted in part: the state, amount posted and version follow. */
    WRITE_OK("post", "77", "--amount", "5");
    t = TALLY_JSON(0, "transfer", "get", "77");
    ck_assert_str_eq(jstr(t, "state"), "pending_posted");
    ck_assert_int_eq(jint(t, "posted_amount"), 5);
    ck_assert_int_eq(jint(t, "version"), 2);
    ck_assert_int_gt(jint(t, "resolved_seq"), jint(t, "created_seq"));
    json_decref(t);

    cli_output r = TALLY("transfer", "get", "77");
    expect_exit(&r, 0);
    ck_assert_msg(strstr(r.out, "ID") && strstr(r.out, "STATE") && strstr(r.out, "POSTED_AMOUNT") &&
                      strstr(r.out, "0000000000000000000000000000004d") &&
                      strstr(r.out, "pending_posted"),
                  "transfer table: %s", r.out);
    output_free(&r);

    /* Not found: exit 1, the code on stderr (or as JSON), nothing on stdout. */
    r = TALLY("transfer", "get", "404");
    expect_exit(&r, 1);
    ck_assert_str_eq(r.out, "");
    ck_assert_msg(strstr(r.err, "transfer 00000000000000000000000000000194 failed: not_found"),
                  "stderr: %s", r.err);
    output_free(&r);
    t = TALLY_JSON(1, "transfer", "get", "404");
    ck_assert_str_eq(jstr(t, "code"), "not_found");
    json_decref(t);
}
END_TEST

START_TEST(test_stats)
{
    open_accounts();
    WRITE_OK("transfer", "--debit", "1", "--credit", "2", "--amount", "4");
    WRITE_OK("grant", "carol", "pro");
    json_t *s = TALLY_JSON(0, "stats");
    ck_assert_int_eq(jint(s, "head_seq"), 4);
    ck_assert_int_eq(jint(s, "accounts"), 2);
    ck_assert_int_eq(jint(s, "transfers"), 1);
    ck_assert_int_eq(jint(s, "entitlements"), 1);
    ck_assert_int_eq(jint(s, "inbox"), 4);
    ck_assert_int_gt(jint(s, "map_size_bytes"), 0);
    json_decref(s);

    cli_output r = TALLY("stats");
    expect_exit(&r, 0);
    ck_assert_msg(strstr(r.out, "NAME") && strstr(r.out, "VALUE") && strstr(r.out, "head_seq"),
                  "stats table: %s", r.out);
    output_free(&r);
    /* a single-node tallyd has no cluster status (tests/cluster/check_cluster has one) */
    json_t *c = TALLY_JSON(1, "cluster", "status");
    ck_assert_str_eq(jstr(c, "code"), "not_in_cluster_mode");
    json_decref(c);
}
END_TEST

/* Keys live under the consumer: the same key under another consumer is
 * another command (and, without --id, another transfer id). */
START_TEST(test_consumer_namespaces_keys)
{
    open_accounts();
    json_t *a = TALLY_JSON(0, "transfer", "--debit", "1", "--credit", "2", "--amount", "2",
                           "--key", "same");
    json_t *b = TALLY_JSON(0, "--consumer", "billing", "transfer", "--debit", "1", "--credit",
                           "2", "--amount", "2", "--key", "same");
    ck_assert(!jbool(b, "replayed"));
    ck_assert_str_ne(jstr(a, "transfer_id"), jstr(b, "transfer_id"));
    json_decref(a);
    json_decref(b);
    ck_assert_int_eq(account_field("2", "credits_posted"), 4);

    cli_output r = TALLY("--json", "log", "--from", "4");
    json_t *lines[4];
    size_t n = json_lines(r.out, lines, 4);
    ck_assert_uint_eq(n, 1);
    ck_assert_str_eq(jstr(lines[0], "consumer"), "billing");
    json_lines_free(lines, n);
    output_free(&r);
}
END_TEST

/* A key and a subject are any bytes over msgpack: --json gives those that
 * are not UTF-8 with U+FFFD (docs/PROTOCOL.md's rule), where it used to
 * say "out of memory" and exit 1 after the write had been committed. */
START_TEST(test_json_of_strings_not_utf8)
{
    json_t *w = TALLY_JSON(0, "account", "open", "1", "--key", "k\xff");
    ck_assert_str_eq(jstr(w, "key"), "k\xef\xbf\xbd");
    json_decref(w);
    WRITE_OK("grant", "al\xff" "ce", "pro", "--for", "1d");
    json_t *list = TALLY_JSON(0, "entitlements", "al\xff" "ce");
    ck_assert_uint_eq(json_array_size(list), 1);
    ck_assert_str_eq(jstr(json_array_get(list, 0), "subject"), "al\xef\xbf\xbd" "ce");
    json_decref(list);
    cli_output r = TALLY("--json", "log");
    expect_exit(&r, 0);
    json_t *lines[4];
    size_t n = json_lines(r.out, lines, 4);
    output_free(&r);
    ck_assert_uint_eq(n, 2);
    ck_assert_str_eq(jstr(lines[0], "key"), "k\xef\xbf\xbd");
    ck_assert_str_eq(jstr(json_object_get(lines[1], "entity"), "subject"), "al\xef\xbf\xbd" "ce");
    json_lines_free(lines, n);
}
END_TEST

/* ---- tail, subscribers, dead letters ---- */

/* The seqs of --json tail lines, which must carry the documented fields. */
static size_t tail_lines(const char *out, json_int_t *seqs, size_t max, bool durable)
{
    json_t *lines[64];
    size_t n = json_lines(out, lines, 64);
    ck_assert_uint_le(n, max);
    for (size_t i = 0; i < n; i++) {
        seqs[i] = jint(lines[i], "seq");
        ck_assert(is_uuid_v7(jstr(lines[i], "event_id")));
        ck_assert_str_eq(jstr(lines[i], "type"), "account.opened");
        ck_assert_int_eq(jint(lines[i], "entity_version"), 1);
        json_t *entity = json_object_get(lines[i], "entity");
        ck_assert_str_eq(jstr(entity, "kind"), "account");
        ck_assert_int_gt(jint(entity, "id"), 0);
        ck_assert_int_gt(jint(lines[i], "time_ms"), 0);
        if (durable)
            ck_assert_int_ge(jint(lines[i], "attempt"), 1);
        else
            ck_assert_ptr_null(json_object_get(lines[i], "attempt"));
    }
    json_lines_free(lines, n);
    return n;
}

static json_t *subscriber_named(json_t *list, const char *name)
{
    for (size_t i = 0; i < json_array_size(list); i++)
        if (strcmp(jstr(json_array_get(list, i), "name"), name) == 0)
            return json_array_get(list, i);
    ck_abort_msg("no subscriber %s", name);
    return NULL;
}

START_TEST(test_tail_subscriber_continues_where_it_stopped)
{
    for (int i = 1; i <= 5; i++) {
        char id[8];
        snprintf(id, sizeof(id), "%d", i);
        WRITE_OK("account", "open", id);
    }
    json_int_t seqs[8];
    cli_output r = TALLY("--json", "tail", "--subscriber", "audit", "--count", "3");
    expect_exit(&r, 0);
    ck_assert_uint_eq(tail_lines(r.out, seqs, 8, true), 3);
    for (int i = 0; i < 3; i++)
        ck_assert_int_eq(seqs[i], i + 1);
    output_free(&r);
    r = TALLY("--json", "tail", "--subscriber", "audit", "--count", "2");
    expect_exit(&r, 0);
    ck_assert_uint_eq(tail_lines(r.out, seqs, 8, true), 2);
    ck_assert_int_eq(seqs[0], 4);
    ck_assert_int_eq(seqs[1], 5);
    output_free(&r);
    /* Another subscriber, from seq 4 and with its own settings. */
    r = TALLY("--json", "tail", "--subscriber", "late", "--from", "4", "--max-deliver", "2",
              "--count", "1");
    expect_exit(&r, 0);
    ck_assert_uint_eq(tail_lines(r.out, seqs, 8, true), 1);
    ck_assert_int_eq(seqs[0], 4);
    output_free(&r);
    r = TALLY("tail", "--subscriber", "late", "--max-deliver", "3", "--count", "1");
    expect_exit(&r, 1); /* other settings than it has */
    ck_assert_ptr_nonnull(strstr(r.err, "subscriber_exists_with_different_config"));
    output_free(&r);

    /* Metrics: subscribers --json (one line each) and stats --json agree. */
    r = TALLY("--json", "subscribers");
    expect_exit(&r, 0);
    json_t *lines[4];
    ck_assert_uint_eq(json_lines(r.out, lines, 4), 2);
    output_free(&r);
    ck_assert_str_eq(jstr(lines[0], "name"), "audit");
    ck_assert_int_eq(jint(lines[0], "ack_floor"), 5);
    ck_assert_int_eq(jint(lines[0], "pending"), 0);
    ck_assert_int_eq(jint(lines[0], "in_flight"), 0);
    ck_assert_int_eq(jint(lines[0], "oldest_unacked_age_s"), 0);
    ck_assert_int_eq(jint(lines[0], "dead_letters"), 0);
    ck_assert_int_eq(jint(lines[0], "redelivered"), 0);
    ck_assert_str_eq(jstr(lines[1], "name"), "late");
    ck_assert_int_eq(jint(lines[1], "ack_floor"), 4);
    ck_assert_int_eq(jint(lines[1], "pending"), 1);
    ck_assert_int_eq(jint(lines[1], "max_deliver"), 2);
    json_t *stats = TALLY_JSON(0, "stats");
    json_t *list = json_object_get(stats, "subscribers");
    ck_assert_uint_eq(json_array_size(list), 2);
    for (int i = 0; i < 2; i++) {
        json_t *m = subscriber_named(list, jstr(lines[i], "name"));
        ck_assert_int_eq(jint(m, "ack_floor"), jint(lines[i], "ack_floor"));
        ck_assert_int_eq(jint(m, "pending"), jint(lines[i], "pending"));
        ck_assert_int_eq(jint(m, "in_flight"), jint(lines[i], "in_flight"));
    }
    json_decref(stats);
    json_lines_free(lines, 2);
    r = TALLY("subscribers");
    expect_exit(&r, 0);
    ck_assert_msg(strstr(r.out, "NAME") && strstr(r.out, "ACK_FLOOR") && strstr(r.out, "PENDING") &&
                      strstr(r.out, "OLDEST_UNACKED_AGE_S") && strstr(r.out, "REDELIVERED") &&
                      strstr(r.out, "DEAD_LETTERS") && strstr(r.out, "audit"),
                  "subscribers table: %s", r.out);
    output_free(&r);

    /* Deleted: gone from the list; a tail under the name starts afresh. */
    r = TALLY("subscriber", "delete", "late");
    expect_exit(&r, 0);
    output_free(&r);
    r = TALLY("subscriber", "delete", "late");
    expect_exit(&r, 1);
    ck_assert_ptr_nonnull(strstr(r.err, "subscriber_not_found"));
    output_free(&r);
    r = TALLY("--json", "tail", "--subscriber", "late", "--count", "1");
    expect_exit(&r, 0);
    ck_assert_uint_eq(tail_lines(r.out, seqs, 8, true), 1);
    ck_assert_int_eq(seqs[0], 1);
    output_free(&r);
}
END_TEST

/* Takes the first event, then stops the run: what the fetch brought after
 * it stays in flight, leased to the run's instance. */
static tally_verdict take_one_then_stop(const tally_delivery *d, tally_answer *answer, void *arg)
{
    (void)d;
    (void)answer;
    tally_subscriber_stop(arg);
    return TALLY_DONE;
}

/* --instance: a tail of the instance that left events in flight gets them
 * back at once; a tail of another instance does not take them (they stay
 * leased until the ack wait) and reads on after them. */
START_TEST(test_tail_instance_gets_its_unacked_window)
{
    for (int i = 1; i <= 5; i++) {
        char id[8];
        snprintf(id, sizeof(id), "%d", i);
        WRITE_OK("account", "open", id);
    }
    tally_client *c = test_client_open(server.url);
    tally_subscriber *s = NULL;
    /* An hour's ack wait: only worker-a's restart makes its events due in
     * the test's time. */
    tally_subscriber_options so = {.ack_wait_ms = 3600000};
    ck_assert_int_eq(tally_subscriber_open(c, "pair", &so, &s), TALLY_ok);
    tally_run_options o = {.wait_ms = 500, .instance = "worker-a"};
    ck_assert_int_eq(tally_subscriber_run(s, &o, take_one_then_stop, s), TALLY_ok);
    tally_subscriber_close(s);
    tally_client_close(c);
    WRITE_OK("account", "open", "6"); /* seq 6 */

    json_t *lines[8];
    cli_output r = TALLY("--json", "tail", "--subscriber", "pair", "--instance", "worker-b",
                         "--count", "1");
    expect_exit(&r, 0);
    ck_assert_uint_eq(json_lines(r.out, lines, 8), 1);
    output_free(&r);
    ck_assert_int_eq(jint(lines[0], "seq"), 6);
    ck_assert_int_eq(jint(lines[0], "attempt"), 1);
    json_lines_free(lines, 1);

    r = TALLY("--json", "tail", "--subscriber", "pair", "--instance", "worker-a", "--count", "4");
    expect_exit(&r, 0);
    ck_assert_uint_eq(json_lines(r.out, lines, 8), 4);
    output_free(&r);
    for (size_t i = 0; i < 4; i++) {
        ck_assert_int_eq(jint(lines[i], "seq"), (json_int_t)i + 2);
        ck_assert_int_eq(jint(lines[i], "attempt"), 2);
    }
    json_lines_free(lines, 4);

    r = TALLY("--json", "subscribers"); /* one line each: "pair" is the only one */
    expect_exit(&r, 0);
    ck_assert_uint_eq(json_lines(r.out, lines, 8), 1);
    output_free(&r);
    ck_assert_str_eq(jstr(lines[0], "name"), "pair");
    ck_assert_int_eq(jint(lines[0], "ack_floor"), 6);
    ck_assert_int_eq(jint(lines[0], "in_flight"), 0);
    json_lines_free(lines, 1);
}
END_TEST

/* A tail process whose stdout is a pipe. */
typedef struct tail_proc {
    pid_t pid;
    int fd;
} tail_proc;

static tail_proc tail_spawn(const char *const *args)
{
    int fds[2];
    ck_assert_int_eq(pipe2(fds, O_CLOEXEC), 0); /* dup2 gives the child its stdout */
    const char *argv[16] = {tallyd_program("tally")};
    for (int i = 0; args[i]; i++) {
        ck_assert_int_lt(i, 14);
        argv[i + 1] = args[i];
    }
    char url[sizeof(server.url) + 16], pub[sizeof(server.pub_url) + 16];
    snprintf(url, sizeof(url), "TALLY_URL=%s", server.url);
    snprintf(pub, sizeof(pub), "TALLY_PUBLISH=%s", server.pub_url);
    const char *env[] = {url, pub, NULL};
    pid_t pid = test_spawn(argv, env, fds[1], -1);
    close(fds[1]);
    return (tail_proc){pid, fds[0]};
}

/* Read from p until text holds `lines` lines (60 s at most). */
static void tail_read_lines(tail_proc *p, char *text, size_t size, size_t lines)
{
    size_t len = strlen(text), have = 0;
    int64_t deadline = test_deadline_ms(60000);
    for (const char *q = text; (q = strchr(q, '\n')); q++)
        have++;
    while (have < lines) {
        int left = (int)(deadline - clock_mono_ms());
        ck_assert_msg(left > 0, "tail printed %zu of %zu lines: %s", have, lines, text);
        struct pollfd pfd = {.fd = p->fd, .events = POLLIN};
        if (poll(&pfd, 1, left) <= 0)
            continue;
        ssize_t n = read(p->fd, text + len, size - 1 - len);
        ck_assert_msg(n > 0, "tail ended early: %s", text);
        for (ssize_t i = 0; i < n; i++)
            have += text[len + (size_t)i] == '\n';
        len += (size_t)n;
        text[len] = '\0';
    }
}

/* Without --subscriber: the live stream from now, followed until SIGINT. */
START_TEST(test_tail_follows_the_live_stream)
{
    WRITE_OK("account", "open", "1");
    tail_proc p = tail_spawn((const char *const[]){"--json", "tail", NULL});
    char text[8192] = "";
    /* PUB delivers only once the tail is subscribed: keep writing until the
     * first new event shows; every later one must follow in order. */
    uint64_t id = 2;
    while (strchr(text, '\n') == NULL) {
        char arg[16];
        ck_assert_uint_lt(id, 50);
        snprintf(arg, sizeof(arg), "%" PRIu64, id++);
        WRITE_OK("account", "open", arg);
        struct pollfd pfd = {.fd = p.fd, .events = POLLIN};
        if (poll(&pfd, 1, 500) > 0)
            tail_read_lines(&p, text, sizeof(text), 1);
    }
    WRITE_OK("account", "open", "100");
    WRITE_OK("account", "open", "101");
    json_int_t seqs[64], head = (json_int_t)id + 1; /* accounts 1 .. id-1, 100, 101 */
    tail_lines(text, seqs, 64, false);
    json_int_t first = seqs[0]; /* "now" was when the tail started: after seq 1 */
    ck_assert_int_ge(first, 2);
    size_t expected = (size_t)(head - first + 1);
    tail_read_lines(&p, text, sizeof(text), expected);
    ck_assert_uint_eq(tail_lines(text, seqs, 64, false), expected);
    for (size_t i = 0; i < expected; i++)
        ck_assert_int_eq(seqs[i], first + (json_int_t)i); /* in order, none missing */
    kill(p.pid, SIGINT);
    int status;
    ck_assert_int_eq(waitpid(p.pid, &status, 0), p.pid);
    ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "status %d", status);
    close(p.fd);

    cli_output r = TALLY("tail", "--from-start", "--count", "2");
    expect_exit(&r, 0);
    ck_assert_msg(strstr(r.out, "SEQ") && strstr(r.out, "ENTITY") && strstr(r.out, "account 1") &&
                      strstr(r.out, "account 2") && !strstr(r.out, "account 3"),
                  "tail table: %s", r.out);
    output_free(&r);
}
END_TEST

/* Parks what the test names, acknowledges the rest. */
static tally_verdict park_named(const tally_delivery *d, tally_answer *answer, void *arg)
{
    const uint64_t *park = arg;
    for (; *park; park++)
        if (d->event.seq == *park) {
            snprintf(answer->error, sizeof(answer->error), "cannot apply %" PRIu64, *park);
            return TALLY_PARK;
        }
    return TALLY_DONE;
}

START_TEST(test_dead_letter_commands)
{
    for (int i = 1; i <= 4; i++) {
        char id[8];
        snprintf(id, sizeof(id), "%d", i);
        WRITE_OK("account", "open", id);
    }
    /* A subscriber whose handler parks 2 and 3. */
    tally_client *c = test_client_open(server.url);
    tally_subscriber *s = NULL;
    ck_assert_int_eq(tally_subscriber_open(c, "mail", NULL, &s), TALLY_ok);
    uint64_t park[] = {2, 3, 0};
    tally_run_options o = {.wait_ms = 500, .until_idle = true};
    ck_assert_int_eq(tally_subscriber_run(s, &o, park_named, park), TALLY_ok);
    tally_subscriber_close(s);
    tally_client_close(c);

    cli_output r = TALLY("--json", "dlq", "list", "mail");
    expect_exit(&r, 0);
    json_t *lines[4];
    ck_assert_uint_eq(json_lines(r.out, lines, 4), 2);
    output_free(&r);
    ck_assert_int_eq(jint(lines[0], "seq"), 2);
    ck_assert_int_eq(jint(lines[0], "attempts"), 1);
    ck_assert_str_eq(jstr(lines[0], "error"), "cannot apply 2");
    ck_assert_str_eq(jstr(lines[0], "type"), "account.opened");
    ck_assert(is_uuid_v7(jstr(lines[0], "event_id")));
    ck_assert(!jbool(lines[0], "replaying"));
    ck_assert_int_eq(jint(lines[1], "seq"), 3);
    json_lines_free(lines, 2);
    r = TALLY("--json", "subscribers");
    ck_assert_uint_eq(json_lines(r.out, lines, 4), 1);
    ck_assert_int_eq(jint(lines[0], "dead_letters"), 2);
    ck_assert_int_eq(jint(lines[0], "ack_floor"), 4);
    json_lines_free(lines, 1);
    output_free(&r);
    r = TALLY("dlq", "list", "mail");
    expect_exit(&r, 0);
    ck_assert_msg(strstr(r.out, "ATTEMPTS") && strstr(r.out, "cannot apply 3"), "%s", r.out);
    output_free(&r);

    /* Replay 2 only: the next tail gets it, as a replay; discard 3. */
    json_t *j = TALLY_JSON(0, "dlq", "replay", "mail", "2");
    ck_assert_int_eq(jint(j, "replaying"), 1);
    json_decref(j);
    r = TALLY("--json", "tail", "--subscriber", "mail", "--count", "1");
    expect_exit(&r, 0);
    ck_assert_uint_eq(json_lines(r.out, lines, 4), 1);
    ck_assert_int_eq(jint(lines[0], "seq"), 2);
    ck_assert(jbool(lines[0], "replay"));
    ck_assert_int_eq(jint(lines[0], "attempt"), 1);
    json_lines_free(lines, 1);
    output_free(&r);
    j = TALLY_JSON(0, "dlq", "discard", "mail", "3");
    ck_assert(jbool(j, "discarded"));
    json_decref(j);
    r = TALLY("dlq", "discard", "mail", "3");
    expect_exit(&r, 1);
    ck_assert_ptr_nonnull(strstr(r.err, "dead_letter_not_found"));
    output_free(&r);
    j = TALLY_JSON(0, "dlq", "replay", "mail");
    ck_assert_int_eq(jint(j, "replaying"), 0);
    json_decref(j);
    r = TALLY("--json", "dlq", "list", "mail");
    expect_exit(&r, 0);
    ck_assert_str_eq(r.out, "");
    output_free(&r);
    r = TALLY("dlq", "list", "nobody");
    expect_exit(&r, 1);
    ck_assert_ptr_nonnull(strstr(r.err, "subscriber_not_found"));
    ck_assert_str_eq(r.out, "");
    output_free(&r);
}
END_TEST

/* `subscribers show` says why an event waits (attempts, holder, next
 * delivery, the nak's reason) before it is parked; `dlq list` names the
 * dead letters' owner. */
START_TEST(test_subscriber_show_and_dlq_owner)
{
    WRITE_OK("account", "open", "1");
    WRITE_OK("account", "open", "2");
    tally_client *c = test_client_open(server.url);
    wire_reply r;
    wire_call(c, &r, "sub_create", "sss", "name", "crm", "contact", "crm-team@example.com",
              "alert_route", "pagerduty:crm");
    wire_expect(&r, "ok");
    wire_done(&r);
    wire_call(c, &r, "sub_fetch", "sus", "name", "crm", "max", (uint64_t)2, "instance", "sync-1");
    wire_expect(&r, "ok");
    wire_done(&r);
    wire_call(c, &r, "sub_nak", "susu", "name", "crm", "seq", (uint64_t)1, "reason",
              "CRM answered 503", "delay_ms", (uint64_t)600000);
    wire_expect(&r, "ok");
    wire_done(&r);

    cli_output o = TALLY("subscribers", "show", "crm");
    expect_exit(&o, 0);
    ck_assert_msg(strstr(o.out, "CRM answered 503") && strstr(o.out, "sync-1") &&
                      strstr(o.out, "NEXT_DELIVERY") && strstr(o.out, "crm-team@example.com"),
                  "%s", o.out);
    output_free(&o);
    json_t *j = TALLY_JSON(0, "subscribers", "show", "crm");
    json_t *flights = json_object_get(j, "in_flight_events");
    ck_assert_uint_eq(json_array_size(flights), 2);
    json_t *first = json_array_get(flights, 0);
    ck_assert_int_eq(jint(first, "seq"), 1);
    ck_assert_int_eq(jint(first, "attempts"), 1);
    ck_assert_str_eq(jstr(first, "last_error"), "CRM answered 503");
    ck_assert_str_eq(jstr(first, "holder"), "sync-1");
    ck_assert_str_eq(jstr(j, "alert_route"), "pagerduty:crm");
    json_decref(j);

    wire_call(c, &r, "sub_park", "sus", "name", "crm", "seq", (uint64_t)1, "reason", "gave up");
    wire_expect(&r, "ok");
    wire_done(&r);
    tally_client_close(c);
    o = TALLY("dlq", "list", "crm");
    expect_exit(&o, 0);
    ck_assert_msg(strstr(o.out, "owner: contact crm-team@example.com, alert route pagerduty:crm"),
                  "%s", o.out);
    output_free(&o);
    o = TALLY("--json", "dlq", "list", "crm");
    json_t *lines[2];
    ck_assert_uint_eq(json_lines(o.out, lines, 2), 1);
    ck_assert_str_eq(jstr(lines[0], "contact"), "crm-team@example.com");
    json_lines_free(lines, 1);
    output_free(&o);
    o = TALLY("subscribers", "show", "nobody");
    expect_exit(&o, 1);
    ck_assert_ptr_nonnull(strstr(o.err, "subscriber_not_found"));
    output_free(&o);

    /* subscriber update: the owner changed, the cursor kept */
    j = TALLY_JSON(0, "subscriber", "update", "crm", "--ack-wait-ms", "60000", "--contact", "",
                   "--alert-route", "pagerduty:crm-2");
    ck_assert_int_eq(jint(j, "ack_wait_ms"), 60000);
    ck_assert_int_eq(jint(j, "delivered_seq"), 2);
    ck_assert(json_is_null(json_object_get(j, "contact")));
    ck_assert_str_eq(jstr(j, "alert_route"), "pagerduty:crm-2");
    json_decref(j);
    o = TALLY("subscriber", "update", "crm", "--contact", "say \"hi\"");
    expect_exit(&o, 1);
    ck_assert_msg(strstr(o.err, "value_out_of_range"), "%s", o.err);
    output_free(&o);
}
END_TEST

/* ---- the runner ---- */

int main(void)
{
    const test_row without_server[] = {
        {"help", test_help_explains_keys_ids_and_exit_codes, TEST_TIMEOUT_S},
        {"usage", test_usage_errors_exit_2, TEST_TIMEOUT_S},
        {"unreachable", test_unreachable_exits_3, TEST_TIMEOUT_S},
    };
    const test_row with_server[] = {
        {"account", test_account_open_and_get, TEST_TIMEOUT_S},
        {"user_data", test_user_data_round_trips, TEST_TIMEOUT_S},
        {"queries", test_account_and_transfer_list_queries, TEST_TIMEOUT_S},
        {"reverse", test_reverse, TEST_TIMEOUT_S},
        {"balancing_closing", test_balancing_and_closing, TEST_TIMEOUT_S},
        {"imported_balances", test_imported_and_balances, TEST_TIMEOUT_S},
        {"replay_key", test_transfer_same_key_is_a_replay, TEST_TIMEOUT_S},
        {"replay_id", test_transfer_id_without_key_is_a_replay, TEST_TIMEOUT_S},
        {"generated_key", test_generated_key_is_printed_and_retries, TEST_TIMEOUT_S},
        {"rejection", test_rejection_exits_1, TEST_TIMEOUT_S},
        {"hold", test_hold_post_and_void, TEST_TIMEOUT_S},
        {"grant", test_grant_for_and_until, TEST_TIMEOUT_S},
        {"extend_revoke", test_extend_and_revoke, TEST_TIMEOUT_S},
        {"log", test_log_lines_are_json, TEST_TIMEOUT_S},
        {"history", test_account_history_lines_are_json, TEST_TIMEOUT_S},
        {"account_list", test_account_list_pages, TEST_TIMEOUT_S},
        {"transfer_get", test_transfer_get, TEST_TIMEOUT_S},
        {"stats", test_stats, TEST_TIMEOUT_S},
        {"consumer", test_consumer_namespaces_keys, TEST_TIMEOUT_S},
        {"not_utf8", test_json_of_strings_not_utf8, TEST_TIMEOUT_S},
        {"tail_subscriber", test_tail_subscriber_continues_where_it_stopped, TEST_TIMEOUT_S},
        {"tail_live", test_tail_follows_the_live_stream, TEST_TIMEOUT_S},
        {"tail_instance", test_tail_instance_gets_its_unacked_window, TEST_TIMEOUT_S},
        {"dlq", test_dead_letter_commands, TEST_TIMEOUT_S},
        {"subscriber_show", test_subscriber_show_and_dlq_owner, TEST_TIMEOUT_S},
    };
    Suite *s = test_suite_of_rows("cli", TEST_ROWS(without_server));
    const test_fixtures keeper = {.unchecked_setup = server_up, .unchecked_teardown = server_down};
    test_suite_add_rows(s, TEST_ROWS(with_server), &keeper);
    return test_run_suite(s);
}
