/*
 * check_http.c — tallyd's HTTP face (net/http/http.c, net/http/http_routes.c,
 * net/metrics/metrics.c) against a real tallyd on a free loopback port:
 *
 *   - a live scrape of /metrics passes `promtool check metrics` (no errors,
 *     no lint warnings) and says what the test did; the shipped rules
 *     (docs/tally-alerts.yml) pass `promtool check rules`, and the readiness
 *     rules fire on the series of tests/net/tally-alerts-test.yml (`promtool
 *     test rules`);
 *   - /healthz answers ok;
 *   - bad input on the HTTP port: unknown paths 404, wrong methods 405,
 *     oversized bodies and headers and malformed requests refused; idle and
 *     slow connections closed by the timeout; over the per-address limit
 *     an idle connection evicted (a busy one: the newcomer refused), over
 *     the total the reserved places answering only health checks;
 *     none of it disturbs the NNG endpoint or its commits.
 */
#include "config.h"

#include "common/limits.h"
#include "tests/support/client_support.h"
#include "tests/support/http_client.h"
#include "tests/support/run.h"
#include "tests/support/suite.h"
#include "tests/support/test_support.h"
#include "tests/support/wait.h"

#include <check.h>
#include <jansson.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

typedef struct http_server {
    test_client_fixture f;
    int port;
    char url[320];
    char timeout[16];
} http_server;

/* tallyd with --http on a port of the kernel's and more options
 * (NULL-terminated). */
static void http_up(http_server *h, const char *const *more)
{
    memset(h, 0, sizeof(*h));
    int n = 0;
    h->f.srv.extra_args[n++] = "--http";
    h->f.srv.extra_args[n++] = "http://127.0.0.1:0"; /* the harness reads the port back */
    for (int i = 0; more && more[i]; i++)
        h->f.srv.extra_args[n++] = more[i];
    tallyd_start(&h->f.srv);
    h->port = h->f.srv.http_port;
    ck_assert_int_gt(h->port, 0);
    snprintf(h->url, sizeof(h->url), "%s", h->f.srv.http_url);
    h->f.c = test_client_open(h->f.srv.url);
}

static void http_down(http_server *h)
{
    tally_client_close(h->f.c);
    ck_assert_int_eq(tallyd_stop(&h->f.srv), 0);
    tallyd_cleanup(&h->f.srv);
}

static char *scrape(const http_server *h)
{
    int status = 0;
    char *body = test_http_get(h->port, "/metrics", &status);
    ck_assert_ptr_nonnull(body);
    ck_assert_int_eq(status, 200);
    return body;
}

/* The value of one sample line "name{labels} value" (the series as text,
 * labels included); fails when absent. */
static unsigned long long sample(const char *text, const char *series)
{
    char line[256];
    snprintf(line, sizeof(line), "\n%s ", series);
    const char *at = strstr(text, line);
    ck_assert_msg(at != NULL, "no sample %s in the scrape", series);
    return strtoull(at + strlen(line), NULL, 10);
}

static const char *srcdir(void)
{
    const char *d = getenv("TALLY_SRCDIR");
    return d ? d : ".";
}

/* promtool with args, stdin from the file at in (or none); exit code,
 * its output in *out (free it). */
static int promtool(const char *args, const char *in, char **out)
{
    char cmd[2200];
    snprintf(cmd, sizeof(cmd), "exec promtool %s%s%s 2>&1", args, in ? " < " : "", in ? in : "");
    const char *argv[] = {"/bin/sh", "-c", cmd, NULL};
    return test_run(argv, NULL, out, NULL);
}

START_TEST(scrape_passes_promtool_and_says_what_happened)
{
    double started_s = (double)time(NULL);
    http_server h;
    http_up(&h, NULL);
    test_client_open_accounts(h.f.c, 1, 3); /* one batch: one commit, three commands */
    tally_subscriber *s = NULL;
    ck_assert_int_eq(tally_subscriber_open(h.f.c, "relay", NULL, &s), TALLY_ok);
    tally_subscriber_close(s);
    char *text = scrape(&h);
    ck_assert_uint_eq(sample(text, "tally_commands_total{op=\"account_open\",code=\"ok\"}"), 3);
    ck_assert_uint_eq(sample(text, "tally_log_head_seq"), 3);
    ck_assert_uint_eq(sample(text, "tally_accounts"), 3);
    ck_assert_uint_eq(sample(text, "tally_subscriber_pending{subscriber=\"relay\"}"), 3);
    ck_assert_uint_eq(sample(text, "tally_subscriber_dead_letters{subscriber=\"relay\"}"), 0);
    ck_assert_uint_ge(sample(text, "tally_commits_total"), 2); /* the batch, sub_create */
    ck_assert_uint_ge(sample(text, "tally_connections"), 1);
    ck_assert_uint_eq(sample(text, "tally_build_info{version=\"" PACKAGE_VERSION "\"}"), 1);
    ck_assert_uint_eq(sample(text, "tally_ready"), 1);
    ck_assert_uint_eq(sample(text, "tally_write_queue_depth"), 0);
    ck_assert_uint_eq(sample(text, "tally_writes_refused_total{reason=\"overloaded\"}"), 0);
    ck_assert_uint_eq(sample(text, "tally_health_checks_failing{class=\"readiness\"}"), 0);
    ck_assert_ptr_nonnull(strstr(text, "tally_request_duration_seconds_bucket{kind=\"write\",le=\"+Inf\"}"));
    const char *wrong = test_process_metrics_wrong(text, started_s, (double)time(NULL));
    if (wrong != NULL) /* the scrape is longer than a Check message may be */
        fprintf(stderr, "the scrape:\n%s\n", text);
    ck_assert_msg(wrong == NULL, "%s", wrong);
    char path[] = "/tmp/tally-scrape-XXXXXX";
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(write(fd, text, strlen(text)), (ssize_t)strlen(text));
    close(fd);
    char *out = NULL;
    int rc = promtool("check metrics", path, &out);
    ck_assert_msg(rc == 0 && out[0] == '\0', "promtool check metrics (exit %d):\n%s", rc, out);
    free(out);
    unlink(path);
    free(text);
    int status = 0;
    char *ok = test_http_get(h.port, "/healthz", &status);
    ck_assert_int_eq(status, 200);
    ck_assert_str_eq(ok, "ok\n");
    free(ok);
    http_down(&h);
}
END_TEST

START_TEST(shipped_rules_pass_promtool)
{
    char args[1024], *out = NULL;
    snprintf(args, sizeof(args), "check rules %s/docs/tally-alerts.yml", srcdir());
    int rc = promtool(args, NULL, &out);
    ck_assert_msg(rc == 0 && strstr(out, "SUCCESS"), "promtool check rules (exit %d):\n%s", rc, out);
    free(out);
    /* and they fire on what tallyd exports when it is not ready */
    snprintf(args, sizeof(args), "test rules %s/tests/net/tally-alerts-test.yml", srcdir());
    rc = promtool(args, NULL, &out);
    ck_assert_msg(rc == 0 && strstr(out, "SUCCESS"), "promtool test rules (exit %d):\n%s", rc, out);
    free(out);
}
END_TEST

/* The NNG endpoint answers and commits as before. */
static void nng_still_serves(http_server *h, uint64_t account_id)
{
    tally_stats st;
    ck_assert_int_eq(tally_stats_get(h->f.c, &st), TALLY_ok);
    test_client_open_accounts(h->f.c, account_id, 1);
    tally_stats after;
    ck_assert_int_eq(tally_stats_get(h->f.c, &after), TALLY_ok);
    ck_assert_uint_eq(after.head_seq, st.head_seq + 1);
}

static int status_of(int port, const char *raw, size_t len)
{
    int status = 0;
    char *answer = test_http_raw(port, raw, len, &status);
    ck_assert_ptr_nonnull(answer);
    free(answer);
    return status;
}

static unsigned long long commits_now(const http_server *h)
{
    char *text = scrape(h);
    unsigned long long commits = sample(text, "tally_commits_total");
    free(text);
    return commits;
}

/* Nothing committed since commits was read, and NNG serves as before. */
static void nothing_committed_since(http_server *h, unsigned long long commits,
                                    uint64_t account_id)
{
    ck_assert_uint_eq(commits_now(h), commits);
    nng_still_serves(h, account_id);
}

START_TEST(bad_http_input_is_refused)
{
    http_server h;
    http_up(&h, NULL);
    test_client_open_accounts(h.f.c, 1, 1);
    unsigned long long commits = commits_now(&h);
    int status = 0;
    free(test_http_get(h.port, "/nope", &status));
    ck_assert_int_eq(status, 404);
    free(test_http_get(h.port, "/metrics/x", &status));
    ck_assert_int_eq(status, 404);
    static const char post[] = "POST /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n"
                               "Connection: close\r\n\r\nhi";
    char *answer = test_http_raw(h.port, post, sizeof(post) - 1, &status);
    ck_assert_int_eq(status, 405);
    ck_assert_ptr_nonnull(strstr(answer, "Allow: GET"));
    free(answer);
    static const char del[] = "DELETE /readyz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
    ck_assert_int_eq(status_of(h.port, del, sizeof(del) - 1), 405);
    /* a body above 1 MiB: refused from its Content-Length, before it is sent */
    static const char big[] = "POST /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 2000000\r\n"
                              "Connection: close\r\n\r\n";
    ck_assert_int_eq(status_of(h.port, big, sizeof(big) - 1), 413);
    /* headers above 32 KiB: refused (431 or 413, or the connection closed) */
    size_t huge_len = 64 * 1024;
    char *huge = malloc(huge_len + 128);
    int n = snprintf(huge, 128, "GET /metrics HTTP/1.1\r\nHost: x\r\nX-Pad: ");
    memset(huge + n, 'a', huge_len);
    memcpy(huge + n + huge_len, "\r\n\r\n", 4);
    status = status_of(h.port, huge, (size_t)n + huge_len + 4);
    ck_assert_msg(status == 0 || status == 413 || status == 431, "huge headers: %d", status);
    free(huge);
    /* malformed request lines */
    static const char junk[] = "\x16\x03\x01 hello\r\n\r\n";
    status = status_of(h.port, junk, sizeof(junk) - 1);
    ck_assert_msg(status == 0 || status == 400, "junk: %d", status);
    static const char no_version[] = "GET /metrics\r\n\r\n";
    status = status_of(h.port, no_version, sizeof(no_version) - 1);
    ck_assert_msg(status == 0 || status == 400 || status == 505, "no version: %d", status);
    nothing_committed_since(&h, commits, 2);
    http_down(&h);
}
END_TEST

/* A request whose body two headers could delimit two ways (RFC 9112 6.3):
 * 400 and the connection closed, before any of it is routed. */
static void framing_refused(int port, const char *headers, const char *what)
{
    char raw[512];
    int n = snprintf(raw, sizeof(raw), "POST /v1/account_open HTTP/1.1\r\nHost: x\r\n"
                                       "Idempotency-Key: smuggle-1\r\n%s\r\n"
                                       "{\"id\":77,\"ledger\":1,\"code\":1}"
                                       "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n", headers);
    int status = 0;
    char *answer = test_http_raw(port, raw, (size_t)n, &status);
    ck_assert_ptr_nonnull(answer);
    ck_assert_msg(status == 400, "%s: %d\n%s", what, status, answer);
    ck_assert_msg(strstr(answer, what) != NULL, "%s: %s", what, answer);
    /* one answer: nothing after the headers was read as a request */
    ck_assert_msg(strstr(strstr(answer, "HTTP/1.1") + 1, "HTTP/1.1") == NULL, "%s: %s", what, answer);
    free(answer);
}

START_TEST(ambiguous_request_lengths_are_refused)
{
    http_server h;
    http_up(&h, NULL);
    unsigned long long commits = commits_now(&h);
    framing_refused(h.port, "Content-Length: 29\r\nContent-Length: 5\r\n",
                    "more than one Content-Length header");
    framing_refused(h.port, "Content-Length: 29\r\nContent-Length: 29\r\n",
                    "more than one Content-Length header");
    framing_refused(h.port, "Content-Length: 29\r\nTransfer-Encoding: chunked\r\n",
                    "both Content-Length and Transfer-Encoding");
    framing_refused(h.port, "Transfer-Encoding: chunked\r\nContent-Length: 29\r\n",
                    "both Content-Length and Transfer-Encoding");
    nothing_committed_since(&h, commits, 1);
    http_down(&h);
}
END_TEST

/* Every check of GET /readyz has the same fields, passing or failing,
 * of the store or of a subscriber (null where none applies); a failing
 * alert check leaves it 200. */
START_TEST(readyz_checks_have_one_shape)
{
    static const char *const fields[] = {"check",     "class",     "subscriber", "ok",
                                         "value",     "threshold", "reason"};
    http_server h;
    http_up(&h, (const char *const[]){"--alert-pending", "1", NULL});
    tally_subscriber *mailer = NULL;
    ck_assert_int_eq(tally_subscriber_open(h.f.c, "mailer", NULL, &mailer), TALLY_ok);
    test_client_open_accounts(h.f.c, 1, 2); /* two events pending: that check fails */
    int status = 0;
    char *body = test_http_get(h.port, "/readyz", &status);
    ck_assert_int_eq(status, 200); /* an alert, not readiness */
    json_error_t err;
    json_t *j = json_loads(body, 0, &err);
    ck_assert_msg(j != NULL, "not JSON: %s", body);
    json_t *checks = json_object_get(j, "checks");
    bool store_seen = false, failing_seen = false;
    for (size_t i = 0; i < json_array_size(checks); i++) {
        json_t *k = json_array_get(checks, i);
        ck_assert_msg(json_object_size(k) == 7, "check %zu: %s", i, body);
        for (size_t f = 0; f < 7; f++)
            ck_assert_msg(json_object_get(k, fields[f]) != NULL, "check %zu lacks %s: %s", i,
                          fields[f], body);
        json_t *sub = json_object_get(k, "subscriber");
        if (json_is_null(sub))
            store_seen = true;
        else
            ck_assert_str_eq(json_string_value(sub), "mailer");
        bool ok = json_is_true(json_object_get(k, "ok"));
        failing_seen |= !ok;
        ck_assert_msg(ok == (json_string_length(json_object_get(k, "reason")) == 0), "%s", body);
    }
    ck_assert_msg(store_seen && failing_seen, "%s", body);
    json_decref(j);
    free(body);
    tally_subscriber_close(mailer);
    http_down(&h);
}
END_TEST

START_TEST(idle_and_slow_connections_are_closed)
{
    http_server h;
    static const char *const more[] = {"--http-timeout-s", "1", NULL};
    http_up(&h, more);
    int idle = test_tcp_connect(h.port), slow = test_tcp_connect(h.port);
    ck_assert_int_ge(idle, 0);
    ck_assert_int_ge(slow, 0);
    static const char half[] = "GET /metrics HTTP/1.1\r\nHo";
    ck_assert_int_eq(write(slow, half, sizeof(half) - 1), (ssize_t)sizeof(half) - 1);
    ck_assert_msg(test_fd_closed_within(idle, 60000), "an idle connection stayed open");
    ck_assert_msg(test_fd_closed_within(slow, 60000), "a half-sent request stayed open");
    close(idle);
    close(slow);
    nng_still_serves(&h, 1);
    int status = 0;
    free(test_http_get(h.port, "/healthz", &status));
    ck_assert_int_eq(status, 200);
    http_down(&h);
}
END_TEST

static void hold(int port, int *fds, int count)
{
    for (int i = 0; i < count; i++) {
        fds[i] = test_tcp_connect(port);
        ck_assert_int_ge(fds[i], 0);
    }
}

/* A request on fd gets 200 (within 30 s). */
static bool answers_ok(int fd, int timeout_ms)
{
    static const char get[] = "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n";
    if (write(fd, get, sizeof(get) - 1) != (ssize_t)sizeof(get) - 1)
        return false;
    struct pollfd p = {fd, POLLIN, 0};
    char buf[256] = {0};
    return poll(&p, 1, timeout_ms) == 1 && read(fd, buf, sizeof(buf) - 1) > 0 &&
           strstr(buf, " 200 ") != NULL;
}

/* A connection whose request is begun and not in (its body half sent):
 * busy, never evicted. path: a GET of it (a reserved route), else a POST. */
static int busy(int port, const char *get_path)
{
    int fd = test_tcp_connect(port);
    ck_assert_int_ge(fd, 0);
    char raw[256];
    int n = snprintf(raw, sizeof(raw), "%s %s HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\nabc",
                     get_path ? "GET" : "POST", get_path ? get_path : "/v1/stats");
    ck_assert_int_eq(write(fd, raw, (size_t)n), n);
    return fd;
}

START_TEST(connections_beyond_the_per_address_limit_evict_or_are_refused)
{
    http_server h;
    static const char *const more[] = {"--http-max-connections", "8", "--http-max-per-address",
                                       "2", "--http-timeout-s", "600", NULL};
    http_up(&h, more);
    /* two busy ones from 127.0.0.1: a third from there is closed at once */
    int held[2] = {busy(h.port, NULL), busy(h.port, NULL)};
    int third = test_tcp_connect(h.port);
    ck_assert_int_ge(third, 0);
    ck_assert_msg(test_fd_closed_within(third, 30000), "a third connection from one address was kept");
    close(third);
    for (int i = 0; i < 2; i++)
        close(held[i]);
    TEST_WAIT_UNTIL(test_metrics_sample(h.port, "tally_http_refused_total{reason=\"per_address\"}") >= 1,
                    30000, "the refusal counted");
    /* two idle ones (a request answered each, then idle past the
     * eviction age): a third evicts the older one and is served */
    hold(h.port, held, 2);
    ck_assert(answers_ok(held[0], 30000));
    ck_assert(answers_ok(held[1], 30000));
    test_pause_ms(TALLY_HTTP_EVICT_IDLE_MS_MIN + 500); /* input: idle longer than the eviction age */
    third = test_tcp_connect(h.port);
    ck_assert_int_ge(third, 0);
    ck_assert_msg(test_fd_closed_within(held[0], 30000), "the longest idle one was not evicted");
    ck_assert(answers_ok(third, 30000));
    close(third);
    close(held[0]);
    close(held[1]);
    ck_assert_int_ge(test_metrics_sample(h.port, "tally_http_connections_closed_total{reason=\"evicted\"}"), 1);
    nng_still_serves(&h, 1);
    http_down(&h);
}
END_TEST

START_TEST(connections_beyond_the_total_get_the_reserved_places)
{
    http_server h;
    static const char *const more[] = {"--http-max-connections", "2", "--http-max-per-address",
                                       "8", "--http-reserved-connections", "1",
                                       "--http-timeout-s", "600", NULL};
    http_up(&h, more);
    int held[2] = {busy(h.port, NULL), busy(h.port, NULL)};
    /* every place busy: a third is on the reserved place, where health
     * checks answer and anything else gets 503 (and the connection closes) */
    int third = test_tcp_connect(h.port);
    ck_assert_int_ge(third, 0);
    ck_assert(answers_ok(third, 30000));
    static const char post[] = "POST /v1/stats HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}";
    ck_assert_int_eq(write(third, post, sizeof(post) - 1), (ssize_t)sizeof(post) - 1);
    struct pollfd p = {third, POLLIN, 0};
    char buf[512] = {0};
    ck_assert_int_eq(poll(&p, 1, 30000), 1);
    ck_assert_int_gt(read(third, buf, sizeof(buf) - 1), 0);
    ck_assert_msg(strstr(buf, " 503 ") && strstr(buf, "Retry-After: 1") && strstr(buf, "overloaded"),
                  "%s", buf);
    ck_assert_msg(test_fd_closed_within(third, 30000), "a refused reserved place stayed open");
    close(third);
    /* the reserved place busy too: a newcomer is closed at once */
    int fourth = busy(h.port, "/healthz");
    int fifth = test_tcp_connect(h.port);
    ck_assert_int_ge(fifth, 0);
    ck_assert_msg(test_fd_closed_within(fifth, 30000), "a connection beyond every place was kept");
    close(fifth);
    close(fourth);
    for (int i = 0; i < 2; i++)
        close(held[i]);
    TEST_WAIT_UNTIL(test_metrics_sample(h.port, "tally_http_refused_total{reason=\"connections\"}") >= 1 &&
                        test_metrics_sample(h.port, "tally_http_refused_total{reason=\"reserved_only\"}") >= 1,
                    30000, "the refusals counted");
    nng_still_serves(&h, 1);
    http_down(&h);
}
END_TEST

START_TEST(http_none_and_bad_urls)
{
    /* the harness runs tallyd with --http none: nothing listens */
    test_client_fixture f;
    test_client_up(&f);
    tally_stats st;
    ck_assert_int_eq(tally_stats_get(f.c, &st), TALLY_ok);
    test_client_down(&f);
    char *err = NULL;
    const char *argv[] = {tallyd_program("tallyd"), "--http", "ftp://x:1", NULL};
    ck_assert_int_eq(test_run(argv, NULL, NULL, &err), 2);
    ck_assert_ptr_nonnull(strstr(err, "--http"));
    free(err);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("http");
    TCase *tc = tcase_create("http");
    tcase_set_timeout(tc, 180);
    tcase_add_test(tc, scrape_passes_promtool_and_says_what_happened);
    tcase_add_test(tc, shipped_rules_pass_promtool);
    tcase_add_test(tc, bad_http_input_is_refused);
    tcase_add_test(tc, ambiguous_request_lengths_are_refused);
    tcase_add_test(tc, readyz_checks_have_one_shape);
    tcase_add_test(tc, idle_and_slow_connections_are_closed);
    tcase_add_test(tc, connections_beyond_the_per_address_limit_evict_or_are_refused);
    tcase_add_test(tc, connections_beyond_the_total_get_the_reserved_places);
    tcase_add_test(tc, http_none_and_bad_urls);
    suite_add_tcase(s, tc);
    return test_run_suite(s);
}
