/*
 * check_echo.c — tally-echo (tools/tally_echo.c) and tally-bench --echo
 * (tools/bench/echo.c) together: a real tally-echo on an ipc:// path in a
 * temp dir, tally-bench --echo against it in both client modes (the JSON
 * report counts the echoes, all identical, and tally-echo's own count at
 * its clean stop agrees), the size bound (a request over --max-bytes is
 * dropped and counted, and the bench says nobody echoes), tallyd refused
 * as an echo server, and the usage errors of both programs.
 */
#include "tests/support/run.h"
#include "tests/support/suite.h"
#include "tests/support/tallyd_harness.h"
#include "tests/support/test_support.h"
#include "tests/support/wait.h"

#include <check.h>
#include <inttypes.h>
#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define ECHO_OPS 300
#define ECHO_START_WAIT_MS 20000
#define ECHO_STOP_WAIT_MS 10000

typedef struct echo_proc {
    char dir[256];
    char url[300];
    pid_t pid;
    int err_fd; /* its stderr, an unlinked temp file */
} echo_proc;

/* What the program wrote to fd so far (NUL-terminated, at most size-1 bytes). */
static void fd_peek(int fd, char *buf, size_t size)
{
    ssize_t n = pread(fd, buf, size - 1, 0);
    buf[n > 0 ? n : 0] = '\0';
}

/* Start tally-echo on ipc://DIR/echo.sock with the extra args (NULL-ended)
 * and wait for its "serving" line. */
static void echo_start(echo_proc *e, const char *const *extra)
{
    const char *tmp = getenv("TMPDIR");
    snprintf(e->dir, sizeof(e->dir), "%s/echo-test-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    ck_assert_ptr_nonnull(mkdtemp(e->dir));
    snprintf(e->url, sizeof(e->url), "ipc://%s/echo.sock", e->dir);
    const char *argv[16] = {tallyd_program("tally-echo"), "--listen", e->url};
    int argc = 3;
    for (; extra && extra[argc - 3] && argc < 15; argc++)
        argv[argc] = extra[argc - 3];
    argv[argc] = NULL;
    e->err_fd = test_temp_fd();
    e->pid = test_spawn(argv, NULL, e->err_fd, e->err_fd);
    char log[1024];
    for (int64_t deadline = test_deadline_ms(ECHO_START_WAIT_MS);;) {
        fd_peek(e->err_fd, log, sizeof(log));
        if (strstr(log, "serving"))
            return;
        int status;
        ck_assert_msg(!test_wait_ms(e->pid, 0, &status), "tally-echo exited %d: %s",
                      test_exit_code(status), log);
        ck_assert_msg(clock_mono_ms() < deadline, "tally-echo not serving: %s", log);
        test_pause_ms(10);
    }
}

/* SIGTERM; returns its exit code and (in *log, to free) all it wrote. */
static int echo_stop(echo_proc *e, char **log)
{
    ck_assert_int_eq(kill(e->pid, SIGTERM), 0);
    int status;
    if (!test_wait_ms(e->pid, ECHO_STOP_WAIT_MS, &status)) {
        kill(e->pid, SIGKILL);
        test_wait(e->pid);
        ck_abort_msg("tally-echo still running %d ms after SIGTERM", ECHO_STOP_WAIT_MS);
    }
    *log = test_fd_read_all(e->err_fd);
    test_remove_dir(e->dir);
    return test_exit_code(status);
}

/* The counts of tally-echo's last line: echoed and dropped. */
static void echo_counts(const char *log, uint64_t *echoed, uint64_t *dropped)
{
    const char *line = strstr(log, "stopped: ");
    ck_assert_msg(line != NULL, "no counts in: %s", log);
    ck_assert_int_eq(sscanf(line, "stopped: %" SCNu64 " requests echoed, %" SCNu64 " dropped",
                            echoed, dropped),
                     2);
}

/* Run a program with args (NULL-ended) after argv0; stdout and stderr to
 * free; returns its exit code. */
static int run_tool(const char *name, const char *const *args, char **out, char **err)
{
    const char *argv[32] = {tallyd_program(name)};
    int argc = 1;
    for (; args[argc - 1] && argc < 31; argc++)
        argv[argc] = args[argc - 1];
    argv[argc] = NULL;
    return test_run(argv, NULL, out, err);
}

/* tally-bench --echo --ops ECHO_OPS in mode; checks its report and
 * returns the request attempts it counted. */
static uint64_t bench_echo(const echo_proc *e, const char *mode, const char *bytes)
{
    char pid[32];
    snprintf(pid, sizeof(pid), "%ld", (long)e->pid);
    const char *args[] = {"--echo", "--echo-bytes", bytes, "--url", e->url, "--ops", "300",
                          "--clients", "4", "--client-mode", mode, "--server-pid", pid, "--json",
                          NULL};
    char *out, *err;
    int status = run_tool("tally-bench", args, &out, &err);
    ck_assert_msg(status == 0, "tally-bench --echo exited %d: %s %s", status, out, err);
    json_error_t jerr;
    json_t *j = json_loads(out, 0, &jerr);
    ck_assert_msg(j != NULL, "not JSON (%s): %s", jerr.text, out);
    ck_assert(json_is_true(json_object_get(j, "verified")));
    ck_assert(json_is_true(json_object_get(j, "echo")));
    ck_assert_int_eq(json_integer_value(json_object_get(j, "echo_bytes")), atoi(bytes));
    ck_assert_int_eq(json_integer_value(json_object_get(j, "ops")), ECHO_OPS);
    ck_assert_str_eq(json_string_value(json_object_get(j, "client_mode")), mode);
    json_int_t requests = json_integer_value(json_object_get(j, "requests"));
    ck_assert_int_ge(requests, ECHO_OPS);
    ck_assert(json_real_value(json_object_get(j, "effects_per_sec")) > 0);
    ck_assert(json_real_value(json_object_get(j, "p50_ms")) > 0);
    json_t *checks = json_object_get(j, "checks");
    ck_assert(json_is_true(json_object_get(json_object_get(checks, "identical"), "ok")));
    ck_assert(json_is_true(json_object_get(json_object_get(checks, "answered"), "ok")));
    json_t *server = json_object_get(j, "server");
    ck_assert(json_integer_value(json_object_get(server, "rss_kb")) > 0); /* tally-echo's */
    ck_assert(json_is_null(json_object_get(server, "transfers_added"))); /* no store */
    json_decref(j);
    free(out);
    free(err);
    return (uint64_t)requests;
}

START_TEST(test_echo_in_both_client_modes)
{
    echo_proc e;
    echo_start(&e, NULL);
    uint64_t requests = bench_echo(&e, "shared", "200");
    requests += bench_echo(&e, "per-thread", "1000");
    char *log;
    ck_assert_int_eq(echo_stop(&e, &log), 0);
    uint64_t echoed, dropped;
    echo_counts(log, &echoed, &dropped);
    /* The runs' attempts, plus per run one probe and one echo per client
     * (1 shared, 4 per-thread) to connect them. */
    ck_assert_uint_ge(echoed, requests + 2 + 1 + 4);
    ck_assert_uint_eq(dropped, 0);
    free(log);
}
END_TEST

START_TEST(test_oversized_requests_are_dropped_and_counted)
{
    echo_proc e;
    const char *extra[] = {"--max-bytes", "100", NULL};
    echo_start(&e, extra);
    const char *args[] = {"--echo", "--echo-bytes", "200", "--url", e.url, "--ops", "1",
                          "--timeout-ms", "1000", NULL};
    char *out, *err;
    ck_assert_int_eq(run_tool("tally-bench", args, &out, &err), 3); /* unreachable */
    ck_assert_msg(strstr(err, "no echo server answers") && strstr(err, "timed_out"), "%s", err);
    free(out);
    free(err);
    char *log;
    ck_assert_int_eq(echo_stop(&e, &log), 0);
    uint64_t echoed, dropped;
    echo_counts(log, &echoed, &dropped);
    ck_assert_uint_eq(echoed, 0);
    ck_assert_uint_eq(dropped, 3); /* the probe's three attempts */
    ck_assert_msg(strstr(log, "over 100 bytes") != NULL, "%s", log);
    free(log);
}
END_TEST

START_TEST(test_tallyd_is_not_an_echo_server)
{
    tallyd_proc p = {0};
    tallyd_start(&p);
    const char *args[] = {"--echo", "--url", p.url, "--ops", "10", NULL};
    char *out, *err;
    ck_assert_int_eq(run_tool("tally-bench", args, &out, &err), 1);
    ck_assert_msg(strstr(err, "does not echo") != NULL, "%s", err);
    free(out);
    free(err);
    ck_assert_int_eq(tallyd_stop(&p), 0);
    tallyd_cleanup(&p);
}
END_TEST

START_TEST(test_second_echo_on_a_busy_url_fails)
{
    echo_proc e;
    echo_start(&e, NULL);
    const char *args[] = {"--listen", e.url, NULL};
    char *out, *err;
    ck_assert_int_eq(run_tool("tally-echo", args, &out, &err), 1);
    ck_assert_msg(strstr(err, "cannot serve") != NULL, "%s", err);
    free(out);
    free(err);
    char *log;
    ck_assert_int_eq(echo_stop(&e, &log), 0);
    free(log);
}
END_TEST

/* A usage error: exit status 2 and a message naming what is wrong. */
static void assert_usage_error(const char *name, const char *const *args, const char *says)
{
    char *out, *err;
    int status = run_tool(name, args, &out, &err);
    ck_assert_msg(status == 2, "%s %s exited %d: %s", name, args[0], status, err);
    ck_assert_msg(strstr(err, says) != NULL, "%s: expected \"%s\" in: %s", name, says, err);
    free(out);
    free(err);
}

START_TEST(test_usage_errors)
{
    const char *batch[] = {"--echo", "--batch", "5", NULL};
    assert_usage_error("tally-bench", batch, "--batch and --dup-ratio do not apply");
    const char *dup[] = {"--echo", "--dup-ratio", "0.1", NULL};
    assert_usage_error("tally-bench", dup, "--batch and --dup-ratio do not apply");
    const char *small[] = {"--echo", "--echo-bytes", "30", NULL};
    assert_usage_error("tally-bench", small, "--echo-bytes: not a size in range");
    const char *large[] = {"--echo", "--echo-bytes", "524289", NULL};
    assert_usage_error("tally-bench", large, "--echo-bytes: not a size in range");
    const char *alone[] = {"--echo-bytes", "200", NULL};
    assert_usage_error("tally-bench", alone, "--echo-bytes needs --echo");
    const char *bogus[] = {"--echo", "--bogus", NULL};
    assert_usage_error("tally-bench", bogus, "unknown option");
    const char *no_listen[] = {"--contexts", "8", NULL};
    assert_usage_error("tally-echo", no_listen, "--listen URL is required");
    const char *contexts[] = {"--listen", "ipc:///tmp/x.sock", "--contexts", "0", NULL};
    assert_usage_error("tally-echo", contexts, "--contexts: not a count in range");
    const char *bytes[] = {"--listen", "ipc:///tmp/x.sock", "--max-bytes", "524289", NULL};
    assert_usage_error("tally-echo", bytes, "--max-bytes: not a size in range");
    const char *url[] = {"--listen", "nosuch://x", NULL};
    assert_usage_error("tally-echo", url, "cannot serve nosuch://x");
    const char *extra[] = {"--listen", "ipc:///tmp/x.sock", "more", NULL};
    assert_usage_error("tally-echo", extra, "unexpected argument: more");
}
END_TEST

START_TEST(test_help_names_the_echo_options)
{
    const char *help[] = {"--help", NULL};
    char *out, *err;
    ck_assert_int_eq(run_tool("tally-bench", help, &out, &err), 0);
    ck_assert(strstr(out, "--echo ") && strstr(out, "--echo-bytes N"));
    free(out);
    free(err);
    ck_assert_int_eq(run_tool("tally-echo", help, &out, &err), 0);
    ck_assert(strstr(out, "--listen URL") && strstr(out, "--contexts N") &&
              strstr(out, "--max-bytes N"));
    free(out);
    free(err);
}
END_TEST

int main(void)
{
    const test_row rows[] = {
        {"echo", test_echo_in_both_client_modes, 120},
        {"echo", test_oversized_requests_are_dropped_and_counted, 120},
        {"echo", test_tallyd_is_not_an_echo_server, 120},
        {"echo", test_second_echo_on_a_busy_url_fails, 120},
        {"echo", test_usage_errors, 120},
        {"echo", test_help_names_the_echo_options, 120},
    };
    return test_run_suite(test_suite_of_rows("echo", TEST_ROWS(rows)));
}
