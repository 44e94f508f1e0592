/*
 * http_client.h — a bare HTTP/1.1 client over loopback TCP for the tests
 * of tallyd's HTTP face (and of a Prometheus server's API): no library, so
 * a test can also send what no library would (bad request lines, huge
 * headers, half a request) and watch the connection.
 */
#ifndef TALLY_TESTS_HTTP_CLIENT_H
#define TALLY_TESTS_HTTP_CLIENT_H

#include <stdbool.h>
#include <stddef.h>

/* (No "free port" helper: a port found free and released races other
 * tests under make check -j. Servers get port 0 and say what they bound:
 * tallyd_harness.h, tallyd's and tally-relay's --ready-file.) */
/* A connection to 127.0.0.1:port, or -1. */
int test_tcp_connect(int port);
/* Send raw (len bytes) on a new connection to port and read the whole
 * answer until the server closes (at most 30 s). Returns the answer
 * (NUL-terminated; free it), "" when the server closed without one, NULL
 * when it could not connect. *status gets the HTTP status, 0 without one. */
char *test_http_raw(int port, const char *raw, size_t len, int *status);
/* GET path (Connection: close): the body (free it), NULL when it could not
 * connect; *status as above. */
char *test_http_get(int port, const char *path, int *status);
/* The value of one sample of GET /metrics on port, its series written as
 * in the scrape (name and labels: tally_requests_total{op="log_read"}):
 * -1 when there is no scrape or no such sample. */
long long test_metrics_sample(int port, const char *series);
/* Whether that sample reaches at least min within timeout_ms, scaled by
 * test_slowdown() (polled; tests/support/wait.h). */
bool test_metrics_sample_reaches(int port, const char *series, long long min, int timeout_ms);
/* Whether a scrape's standard process metrics (common/process_metrics.h)
 * are all there with plausible values for a server started between
 * started_s and now_s (seconds since the epoch): NULL when they are, else
 * what is wrong (a static string). */
const char *test_process_metrics_wrong(const char *scrape, double started_s, double now_s);
/* Whether the server closes fd (EOF or reset) within timeout_ms (scaled
 * by test_slowdown()); data it
 * sends first is read and dropped. */
bool test_fd_closed_within(int fd, int timeout_ms);

#endif
