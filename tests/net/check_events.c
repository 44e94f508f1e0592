/*
 * check_events.c — GET /v1/events (net/http/sse.c, docs/PROTOCOL.md "The
 * event stream") against a real tallyd, read over a bare TCP connection:
 *
 *   - catch-up from the log, then live: each seq once, in order, each
 *     message `id: SEQ` and `data: <the event's JSON document>`;
 *   - Last-Event-ID resumes after the last event seen (over `from`): a
 *     reader that reconnects sees every event exactly once, in order;
 *   - `: keepalive` comments while idle (--http-stream-heartbeat-ms);
 *   - refusals before any stream, as JSON replies: a `from` log_read
 *     refuses, a `from` retention removed, no token or one without the
 *     read grant (--auth);
 *   - the bounds: a stream ends after --http-stream-max-s, an event whose
 *     message passes --http-stream-buffer-bytes ends its stream (each
 *     counted in tally_http_streams_ended_total), and streams hold their
 *     connections, so beyond the limit a newcomer gets a reserved place,
 *     where /healthz answers and /v1/events does not;
 *   - a client that reads nothing while thousands of events commit: tallyd
 *     holds at most the buffer bound for it (tally_http_stream_buffered_bytes)
 *     and renders no further, the stream stays open, and once the client
 *     reads it gets every event once, in order.
 */
#include "config.h"

#include "common/clock.h"
#include "common/sha256.h"
#include "tests/support/http_client.h"
#include "tests/support/tallyd_harness.h"
#include "tests/support/test_support.h"
#include "tests/support/wait.h"

#include <check.h>
#include <jansson.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#define WAIT_MS 30000
#define STREAM_BYTES_MAX (1024 * 1024)

static void up(tallyd_proc *p, const char *const *more)
{
    memset(p, 0, sizeof(*p));
    int n = 0;
    p->extra_args[n++] = "--http";
    p->extra_args[n++] = "http://127.0.0.1:0";
    for (int i = 0; more && more[i]; i++)
        p->extra_args[n++] = more[i];
    tallyd_start(p);
    ck_assert_int_gt(p->http_port, 0);
}

static void down(tallyd_proc *p)
{
    ck_assert_int_eq(tallyd_stop(p), 0);
    tallyd_cleanup(p);
}

/* POST /v1/<op> with an Idempotency-Key (NULL: none) and a token (NULL:
 * none); the status. */
static int post(const tallyd_proc *p, const char *op, const char *key, const char *body)
{
    size_t size = strlen(body) + 512;
    char *req = malloc(size);
    ck_assert_ptr_nonnull(req);
    int n = snprintf(req, size,
                     "POST /v1/%s HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
                     "Content-Type: application/json\r\n%s%s%sContent-Length: %zu\r\n\r\n%s",
                     op, key ? "Idempotency-Key: " : "", key ? key : "", key ? "\r\n" : "",
                     strlen(body), body);
    int status = 0;
    free(test_http_raw(p->http_port, req, (size_t)n, &status));
    free(req);
    return status;
}

static void open_account(const tallyd_proc *p, int id)
{
    char key[32], body[96];
    snprintf(key, sizeof(key), "open-%d", id);
    snprintf(body, sizeof(body), "{\"id\":%d,\"ledger\":1,\"code\":10}", id);
    ck_assert_int_eq(post(p, "account_open", key, body), 200);
}

static void pay(const tallyd_proc *p, const char *key, int amount)
{
    char body[160];
    snprintf(body, sizeof(body),
             "{\"debit_account_id\":1,\"credit_account_id\":2,\"amount\":%d,\"ledger\":1,"
             "\"code\":1}", amount);
    ck_assert_int_eq(post(p, "transfer", key, body), 200);
}

/* ---- a stream, read over a bare connection ---- */

typedef struct stream {
    int fd;
    char *buf; /* what came and was not yet taken */
    size_t len;
    int status;
    char headers[2048];
} stream;

/* Read more within deadline; false at EOF or past it. */
static bool stream_more(stream *s, int64_t deadline)
{
    int64_t left = deadline - clock_mono_ms();
    struct pollfd pfd = {s->fd, POLLIN, 0};
    if (left <= 0 || poll(&pfd, 1, (int)left) <= 0)
        return false;
    ck_assert_uint_lt(s->len, STREAM_BYTES_MAX - 1);
    ssize_t n = read(s->fd, s->buf + s->len, STREAM_BYTES_MAX - 1 - s->len);
    if (n <= 0)
        return false;
    s->len += (size_t)n;
    s->buf[s->len] = '\0';
    return true;
}

/* GET /v1/events<query> (HTTP/1.0: the body is the stream as it is,
 * unchunked) with more header lines (each ending "\r\n"); the status and
 * headers read. */
static void stream_open_on(stream *s, int fd, const char *query, const char *more)
{
    memset(s, 0, sizeof(*s));
    s->buf = calloc(1, STREAM_BYTES_MAX);
    ck_assert_ptr_nonnull(s->buf);
    s->fd = fd;
    ck_assert_int_ge(s->fd, 0);
    char req[1024];
    int n = snprintf(req, sizeof(req), "GET /v1/events%s HTTP/1.0\r\nHost: x\r\n%s\r\n", query,
                     more ? more : "");
    ck_assert_int_eq(write(s->fd, req, (size_t)n), n);
    int64_t deadline = test_deadline_ms(WAIT_MS);
    char *end;
    while ((end = strstr(s->buf, "\r\n\r\n")) == NULL)
        ck_assert_msg(stream_more(s, deadline), "no reply headers to GET /v1/events%s: %.200s",
                      query, s->buf);
    size_t head = (size_t)(end + 4 - s->buf);
    ck_assert_int_eq(sscanf(s->buf, "HTTP/1.%*d %d", &s->status), 1);
    snprintf(s->headers, sizeof(s->headers), "%.*s", (int)head, s->buf);
    memmove(s->buf, s->buf + head, s->len - head + 1);
    s->len -= head;
}

static void stream_open(stream *s, const tallyd_proc *p, const char *query, const char *more)
{
    stream_open_on(s, test_tcp_connect(p->http_port), query, more);
}

static void stream_close(stream *s)
{
    close(s->fd);
    free(s->buf);
}

/* The next message (up to its blank line) into out; false at EOF or past
 * base_ms. */
static bool stream_message(stream *s, char *out, size_t size, int64_t base_ms)
{
    int64_t deadline = test_deadline_ms(base_ms);
    char *end;
    while ((end = strstr(s->buf, "\n\n")) == NULL)
        if (!stream_more(s, deadline))
            return false;
    size_t n = (size_t)(end - s->buf);
    ck_assert_uint_lt(n, size);
    memcpy(out, s->buf, n);
    out[n] = '\0';
    memmove(s->buf, end + 2, s->len - n - 1);
    s->len -= n + 2;
    return true;
}

/* The next event (skipping comments): its id, and its document parsed
 * (the caller releases it); its seq must be its id. */
static json_t *stream_event(stream *s, uint64_t *id)
{
    char msg[65536];
    do
        ck_assert_msg(stream_message(s, msg, sizeof(msg), WAIT_MS), "no event came (%zu bytes "
                      "left: %.200s)", s->len, s->buf);
    while (msg[0] == ':');
    unsigned long long n = 0;
    ck_assert_msg(sscanf(msg, "id: %llu\n", &n) == 1, "not an event: %.200s", msg);
    const char *data = strstr(msg, "\ndata: ");
    ck_assert_msg(data != NULL && strchr(data + 1, '\n') == NULL,
                  "no one-line data in: %.300s", msg);
    ck_assert_msg(strstr(msg, "event:") == NULL, "an event: field in: %.200s", msg);
    json_error_t err;
    json_t *doc = json_loads(data + 7, 0, &err);
    ck_assert_msg(doc != NULL, "data is not JSON (%s): %.200s", err.text, data + 7);
    ck_assert_int_eq(json_integer_value(json_object_get(doc, "seq")), (json_int_t)n);
    ck_assert_ptr_nonnull(json_object_get(doc, "data"));
    *id = n;
    return doc;
}

static void expect_event(stream *s, uint64_t seq, const char *type)
{
    uint64_t id = 0;
    json_t *doc = stream_event(s, &id);
    ck_assert_msg(id == seq, "event %llu where %llu was next", (unsigned long long)id,
                  (unsigned long long)seq);
    ck_assert_str_eq(json_string_value(json_object_get(doc, "type")), type);
    json_decref(doc);
}

/* The stream's next message is none: it ends (EOF) within base_ms. */
static bool stream_ends(stream *s, int64_t base_ms)
{
    int64_t deadline = test_deadline_ms(base_ms);
    while (stream_more(s, deadline))
        ;
    return clock_mono_ms() < deadline;
}

/* ---- the tests ---- */

/* tallyd (with more options), accounts 1 and 2 opened, a stream from seq 1. */
static void two_accounts_streamed(tallyd_proc *p, const char *const *more, stream *s)
{
    up(p, more);
    open_account(p, 1);
    open_account(p, 2);
    stream_open(s, p, "?from=1", NULL);
    ck_assert_int_eq(s->status, 200);
}

START_TEST(catch_up_then_live_each_once_in_order)
{
    tallyd_proc p;
    stream s;
    two_accounts_streamed(&p, NULL, &s);
    ck_assert_msg(strcasestr(s.headers, "\r\nContent-Type: text/event-stream") != NULL,
                  "headers: %s", s.headers);
    ck_assert_msg(strcasestr(s.headers, "\r\nCache-Control: no-cache") != NULL, "headers: %s",
                  s.headers);
    expect_event(&s, 1, "account.opened");
    expect_event(&s, 2, "account.opened");
    pay(&p, "pay-1", 5); /* live now */
    expect_event(&s, 3, "transfer.created");
    pay(&p, "pay-2", 6);
    pay(&p, "pay-3", 7);
    expect_event(&s, 4, "transfer.created");
    expect_event(&s, 5, "transfer.created");
    stream_close(&s);
    /* without from: only what comes after the head */
    stream_open(&s, &p, "", NULL);
    ck_assert_int_eq(s.status, 200);
    ck_assert(test_metrics_sample_reaches(p.http_port, "tally_http_streams", 1, WAIT_MS));
    pay(&p, "pay-4", 8);
    expect_event(&s, 6, "transfer.created");
    stream_close(&s);
    ck_assert(test_metrics_sample_reaches(p.http_port, "tally_http_stream_events_total", 6,
                                          WAIT_MS));
    down(&p);
}
END_TEST

START_TEST(last_event_id_resumes_each_event_once)
{
    tallyd_proc p;
    stream s;
    two_accounts_streamed(&p, NULL, &s);
    uint64_t seen = 0, id;
    for (int i = 0; i < 2; i++) {
        json_decref(stream_event(&s, &id));
        ck_assert_int_eq(id, seen + 1);
        seen = id;
    }
    stream_close(&s); /* the reader goes away; events go on */
    for (int i = 0; i < 5; i++) {
        char key[16];
        snprintf(key, sizeof(key), "pay-%d", i);
        pay(&p, key, 10 + i);
    }
    char last[64];
    snprintf(last, sizeof(last), "Last-Event-ID: %llu\r\n", (unsigned long long)seen);
    stream_open(&s, &p, "?from=1", last); /* the header wins over from */
    ck_assert_int_eq(s.status, 200);
    for (int i = 0; i < 5; i++) {
        json_decref(stream_event(&s, &id));
        ck_assert_msg(id == seen + 1, "after %llu came %llu", (unsigned long long)seen,
                      (unsigned long long)id);
        seen = id;
    }
    pay(&p, "pay-live", 99);
    json_decref(stream_event(&s, &id));
    ck_assert_int_eq(id, 8);
    stream_close(&s);
    down(&p);
}
END_TEST

START_TEST(heartbeats_while_idle)
{
    tallyd_proc p;
    up(&p, (const char *const[]){"--http-stream-heartbeat-ms", "200", NULL});
    stream s;
    stream_open(&s, &p, "", NULL);
    ck_assert_int_eq(s.status, 200);
    char msg[256];
    for (int i = 0; i < 2; i++) {
        ck_assert_msg(stream_message(&s, msg, sizeof(msg), WAIT_MS), "no heartbeat");
        ck_assert_str_eq(msg, ": keepalive");
    }
    open_account(&p, 1);
    expect_event(&s, 1, "account.opened"); /* comments skipped */
    stream_close(&s);
    down(&p);
}
END_TEST

/* A refusal: status and the JSON reply's code. */
static void refused(const tallyd_proc *p, const char *query, const char *more, int status,
                    const char *code)
{
    stream s;
    stream_open(&s, p, query, more);
    ck_assert_msg(s.status == status, "GET /v1/events%s: %d, not %d", query, s.status, status);
    ck_assert_msg(strcasestr(s.headers, "Content-Type: application/json") != NULL, "%s",
                  s.headers);
    ck_assert_msg(stream_ends(&s, WAIT_MS), "a refusal's connection stays open");
    json_t *j = json_loads(s.buf, 0, NULL);
    ck_assert_msg(j != NULL, "not JSON: %s", s.buf);
    ck_assert_str_eq(json_string_value(json_object_get(j, "code")), code);
    json_decref(j);
    stream_close(&s);
}

/* GET /v1/stats' log_floor: the last seq retention removed. */
static json_int_t log_floor(const tallyd_proc *p)
{
    int status = 0;
    char *body = test_http_get(p->http_port, "/v1/stats", &status);
    json_t *j = body ? json_loads(body, 0, NULL) : NULL;
    json_int_t floor = json_integer_value(json_object_get(j, "log_floor"));
    json_decref(j);
    free(body);
    return floor;
}

START_TEST(bad_starts_are_refused_before_any_stream)
{
    tallyd_proc p;
    up(&p, (const char *const[]){"--log-retention-s", "1", NULL});
    refused(&p, "?from=abc", NULL, 400, "wrong_type");
    refused(&p, "?from=-1", NULL, 400, "value_out_of_range");
    refused(&p, "?limit=5", NULL, 400, "unknown_field");
    refused(&p, "", "Last-Event-ID: x\r\n", 400, "value_out_of_range");
    open_account(&p, 1);
    open_account(&p, 2);
    /* retention removes seq 1 once it is a second old (no subscribers) */
    json_int_t floor = 0;
    TEST_WAIT_UNTIL((floor = log_floor(&p)) >= 1, WAIT_MS, "retention to remove seq 1");
    refused(&p, "?from=1", NULL, 400, "value_out_of_range");
    refused(&p, "", "Last-Event-ID: 0\r\n", 400, "value_out_of_range");
    stream s;
    char from[32];
    snprintf(from, sizeof(from), "?from=%lld", (long long)floor + 1);
    stream_open(&s, &p, from, NULL); /* what the log holds still streams */
    ck_assert_int_eq(s.status, 200);
    open_account(&p, 3);
    uint64_t id = 0;
    json_decref(stream_event(&s, &id));
    ck_assert_int_eq(id, floor + 1);
    stream_close(&s);
    down(&p);
}
END_TEST

START_TEST(the_read_grant_is_needed)
{
    char dir[] = "/tmp/check_events.XXXXXX", path[64], line[256];
    ck_assert_ptr_nonnull(mkdtemp(dir));
    snprintf(path, sizeof(path), "%s/auth", dir);
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    const char *names[] = {"reader", "writer"}, *tokens[] = {"reader-token", "writer-token"};
    const char *grants[] = {"read", "write:*"};
    for (int i = 0; i < 2; i++) {
        uint8_t h[32];
        char hex[65];
        sha256_digest(tokens[i], strlen(tokens[i]), h);
        for (int b = 0; b < 32; b++)
            snprintf(hex + 2 * b, 3, "%02x", h[b]);
        snprintf(line, sizeof(line), "%s %s %s\n", names[i], hex, grants[i]);
        fputs(line, f);
    }
    fclose(f);
    ck_assert_int_eq(chmod(path, 0600), 0);
    tallyd_proc p;
    up(&p, (const char *const[]){"--auth", path, "--backup-dir", dir, NULL});
    refused(&p, "?from=1", NULL, 401, "unauthenticated");
    refused(&p, "?from=1", "Authorization: Bearer writer-token\r\n", 403, "forbidden");
    stream s;
    stream_open(&s, &p, "?from=1", "Authorization: Bearer reader-token\r\n");
    ck_assert_int_eq(s.status, 200);
    stream_close(&s);
    down(&p);
    unlink(path);
    rmdir(dir);
}
END_TEST

START_TEST(streams_end_at_their_bounds)
{
    tallyd_proc p;
    stream s;
    two_accounts_streamed(&p, (const char *const[]){"--http-stream-max-s", "1",
                                                     "--http-stream-buffer-bytes", "1024", NULL},
                          &s);
    expect_event(&s, 1, "account.opened");
    expect_event(&s, 2, "account.opened");
    ck_assert_msg(stream_ends(&s, WAIT_MS), "the stream outlived --http-stream-max-s");
    stream_close(&s);
    ck_assert(test_metrics_sample_reaches(
        p.http_port, "tally_http_streams_ended_total{reason=\"max_duration\"}", 1, WAIT_MS));
    /* a transfer's document (three objects) is over 1024 bytes */
    pay(&p, "pay-1", 5);
    stream_open(&s, &p, "?from=3", NULL);
    ck_assert_int_eq(s.status, 200);
    ck_assert_msg(stream_ends(&s, WAIT_MS), "an event over the buffer bound was sent");
    ck_assert_msg(strstr(s.buf, "id: 3") == NULL, "it was sent: %.200s", s.buf);
    stream_close(&s);
    ck_assert(test_metrics_sample_reaches(
        p.http_port, "tally_http_streams_ended_total{reason=\"buffer\"}", 1, WAIT_MS));
    down(&p);
}
END_TEST

START_TEST(streams_hold_their_places)
{
    tallyd_proc p;
    /* heartbeats find a stream whose client left (a suspended connection
     * is not watched) */
    up(&p, (const char *const[]){"--http-max-connections", "2", "--http-reserved-connections",
                                 "1", "--http-stream-heartbeat-ms", "100", NULL});
    stream a, b;
    stream_open(&a, &p, "", NULL);
    stream_open(&b, &p, "", NULL);
    ck_assert_int_eq(a.status, 200);
    ck_assert_int_eq(b.status, 200);
    /* every place is a stream's: a newcomer is on the reserved place */
    stream c;
    stream_open(&c, &p, "", NULL);
    ck_assert_int_eq(c.status, 503);
    stream_close(&c);
    int status = 0;
    free(test_http_get(p.http_port, "/healthz", &status));
    ck_assert_int_eq(status, 200);
    stream_close(&a); /* its place is free again */
    TEST_WAIT_UNTIL(test_metrics_sample(p.http_port, "tally_http_streams") == 1, WAIT_MS,
                    "the closed stream to end");
    open_account(&p, 1);
    expect_event(&b, 1, "account.opened");
    stream_close(&b);
    down(&p);
}
END_TEST

/* A connection to 127.0.0.1:port whose receive buffer is small (set
 * before connecting: the window the server sees). */
static int slow_connect(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    ck_assert_int_ge(fd, 0);
    int size = 4096;
    ck_assert_int_eq(setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &size, sizeof(size)), 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ck_assert_int_eq(connect(fd, (struct sockaddr *)&a, sizeof(a)), 0);
    return fd;
}

/* count accounts from first_id on, in batches of 1000. */
static void open_many(const tallyd_proc *p, int first_id, int count)
{
    static char body[128 * 1024];
    for (int done = 0; done < count;) {
        int n = count - done < 1000 ? count - done : 1000, at = 0;
        at += snprintf(body + at, sizeof(body) - (size_t)at, "{\"ops\":[");
        for (int i = 0; i < n; i++)
            at += snprintf(body + at, sizeof(body) - (size_t)at,
                           "%s{\"op\":\"account_open\",\"key\":\"o-%d\",\"id\":%d,"
                           "\"ledger\":1,\"code\":10}", i ? "," : "", first_id + done + i,
                           first_id + done + i);
        snprintf(body + at, sizeof(body) - (size_t)at, "]}");
        char key[32];
        snprintf(key, sizeof(key), "batch-%d", first_id + done);
        ck_assert_int_eq(post(p, "batch", key, body), 200);
        done += n;
    }
}

START_TEST(a_slow_reader_is_sent_the_log_at_its_pace)
{
    tallyd_proc p;
    up(&p, (const char *const[]){"--http-stream-buffer-bytes", "65536", NULL});
    stream s;
    stream_open_on(&s, slow_connect(p.http_port), "?from=1", NULL);
    ck_assert_int_eq(s.status, 200);
    enum { EVENTS = 4000 }; /* about 1.8 MB of documents: more than the socket holds */
    open_many(&p, 1, EVENTS);
    /* The client reads nothing: tallyd holds at most its bound rendered,
     * and the socket's send buffer (set from the bound) at most as much
     * again, so of the 4000 events (about 650 bytes each) fewer than 1000
     * can have been rendered: 64 KiB in tallyd, about 64 KiB in the
     * kernel, 16 KiB in libmicrohttpd's buffer, 4 KiB in the client's. */
    TEST_WAIT_UNTIL(test_metrics_sample(p.http_port, "tally_http_stream_events_total") > 0,
                    WAIT_MS, "the stream to render events");
    long long held = test_metrics_sample(p.http_port, "tally_http_stream_buffered_bytes");
    long long sent = test_metrics_sample(p.http_port, "tally_http_stream_events_total");
    ck_assert_msg(held <= 65536, "a stream holds %lld bytes, over its bound", held);
    ck_assert_msg(sent < EVENTS / 4, "%lld of %d events were rendered for a client that read none",
                  sent, (int)EVENTS);
    ck_assert_int_eq(test_metrics_sample(p.http_port, "tally_http_streams"), 1);
    /* it reads now: every event, once, in order */
    for (uint64_t seq = 1; seq <= EVENTS; seq++) {
        uint64_t id = 0;
        json_decref(stream_event(&s, &id));
        ck_assert_msg(id == seq, "event %llu where %llu was next", (unsigned long long)id,
                      (unsigned long long)seq);
    }
    stream_close(&s);
    down(&p);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("events");
    TCase *tc = tcase_create("events");
    tcase_set_timeout(tc, 180);
    tcase_add_test(tc, catch_up_then_live_each_once_in_order);
    tcase_add_test(tc, last_event_id_resumes_each_event_once);
    tcase_add_test(tc, heartbeats_while_idle);
    tcase_add_test(tc, bad_starts_are_refused_before_any_stream);
    tcase_add_test(tc, the_read_grant_is_needed);
    tcase_add_test(tc, streams_end_at_their_bounds);
    tcase_add_test(tc, streams_hold_their_places);
    tcase_add_test(tc, a_slow_reader_is_sent_the_log_at_its_pace);
    suite_add_tcase(s, tc);
    return test_run_suite(s);
}
