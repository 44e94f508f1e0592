/*
 * check_webhook_limits.c — webhook intake at its limits, against a real
 * tallyd with --http and --webhooks (docs/WEBHOOKS.md, "Limits"; HTTP
 * spoken by the tests' bare client, tests/support/http_client.h, with
 * signatures made here by OpenSSL):
 *   - a 256 KiB body is stored, and its event comes back byte for byte
 *     through log_read, sub_fetch, GET /v1/log and libtally's stream; a
 *     body one byte larger gets 413 and stores nothing;
 *   - a log of 1000 events, 20 of them ~256 KiB: log_read, /v1/log and
 *     sub_fetch pages are bounded by bytes (fewer events than asked, at
 *     least one), the next page goes on from the last seq + 1 with no
 *     gap, and a fetch leases only what it returns; tally-recon passes;
 *   - 64 deliveries waiting for the writer (held by a write transaction
 *     that this test opens on the same LMDB environment): a 65th gets
 *     503 with Retry-After and stores nothing; the 64 are stored after.
 */
#include "clients/libtally/tally.h"
#include "common/clock.h"
#include "common/error.h"
#include "common/limits.h"
#include "common/log_event.h"
#include "tests/support/client_support.h"
#include "tests/support/http_client.h"
#include "tests/support/run.h"
#include "tests/support/suite.h"
#include "tests/support/tallyd_harness.h"
#include "tests/support/test_support.h"
#include "tests/support/wait.h"

#include <jansson.h>
#include <lmdb.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define SECRET "limits-secret-0123456789"
/* The body limit, written out (not BODY_BYTES):
 * a smaller limit in limits.h must fail this suite. */
#define BODY_BYTES (256 * 1024)
#define BIG_EVENTS 20
#define PAGED_EVENTS 1000
#define WAIT_MS 60000
/* --http-webhooks-in-flight, as hook_up sets it (its default is 32) */
#define IN_FLIGHT 64

typedef struct hook_server {
    tallyd_proc p;
    tally_client *c;
    int port;
    char url[320], hooks_dir[256], hooks_file[300], secret_file[300];
} hook_server;

/* tallyd with --http, one hmac-sha256 source "gh" (GitHub's headers),
 * room for 128 HTTP connections from this test's address, 64 deliveries
 * waiting for the writer, and idle HTTP
 * connections kept 10 minutes. */
static void hook_up(hook_server *s)
{
    memset(s, 0, sizeof(*s));
    const char *tmp = getenv("TMPDIR");
    snprintf(s->hooks_dir, sizeof(s->hooks_dir), "%s/tally-hooks-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    ck_assert_ptr_nonnull(mkdtemp(s->hooks_dir));
    snprintf(s->secret_file, sizeof(s->secret_file), "%s/gh.secret", s->hooks_dir);
    snprintf(s->hooks_file, sizeof(s->hooks_file), "%s/hooks.conf", s->hooks_dir);
    FILE *f = fopen(s->secret_file, "w");
    ck_assert_ptr_nonnull(f);
    fputs(SECRET "\n", f);
    fclose(f);
    ck_assert_int_eq(chmod(s->secret_file, 0600), 0);
    f = fopen(s->hooks_file, "w");
    ck_assert_ptr_nonnull(f);
    fprintf(f, "gh hmac-sha256 %s\n", s->secret_file);
    fclose(f);
    const char *args[] = {"--http", "http://127.0.0.1:0", "--webhooks", s->hooks_file,
                          "--http-max-connections", "128", "--http-max-per-address", "128",
                          "--http-timeout-s", "600", /* held deliveries outlast a slow machine */
                          "--http-webhooks-in-flight", "64",
                          NULL};
    for (int i = 0; args[i]; i++)
        s->p.extra_args[i] = args[i];
    s->p.map_size_mb = 64;
    tallyd_start(&s->p);
    s->port = s->p.http_port; /* the kernel's choice, from tallyd's ready file */
    ck_assert_int_gt(s->port, 0);
    snprintf(s->url, sizeof(s->url), "%s", s->p.http_url);
    s->c = test_client_open(s->p.url);
}

static void hook_down(hook_server *s)
{
    tally_client_close(s->c);
    ck_assert_int_eq(tallyd_stop(&s->p), 0);
    tallyd_cleanup(&s->p);
    unlink(s->secret_file);
    unlink(s->hooks_file);
    rmdir(s->hooks_dir);
}

/* A body of n bytes that differs for each id (no two deliveries alike). */
static char *body_make(size_t n, unsigned id)
{
    char *b = malloc(n + 1);
    ck_assert_ptr_nonnull(b);
    for (size_t i = 0; i < n; i++)
        b[i] = (char)('a' + (i * 7 + id) % 26);
    b[n] = '\0';
    return b;
}

/* The raw HTTP request of a delivery to gh with event id id, signed. */
static char *delivery_request(const char *id, const char *body, size_t n, size_t *len)
{
    uint8_t mac[32];
    unsigned mac_len = sizeof(mac);
    HMAC(EVP_sha256(), SECRET, (int)strlen(SECRET), (const uint8_t *)body, n, mac, &mac_len);
    char hex[65];
    for (int i = 0; i < 32; i++)
        sprintf(hex + 2 * i, "%02x", mac[i]);
    char head[512];
    int h = snprintf(head, sizeof(head),
                     "POST /webhooks/gh HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n"
                     "Content-Type: application/octet-stream\r\nContent-Length: %zu\r\n"
                     "X-Hub-Signature-256: sha256=%s\r\nX-GitHub-Delivery: %s\r\n"
                     "X-GitHub-Event: push\r\n\r\n",
                     n, hex, id);
    char *raw = malloc((size_t)h + n);
    ck_assert_ptr_nonnull(raw);
    memcpy(raw, head, (size_t)h);
    memcpy(raw + h, body, n);
    *len = (size_t)h + n;
    return raw;
}

/* POST a delivery; its status, and the answer in *answer (free it) if asked. */
static int deliver(const hook_server *s, const char *id, const char *body, size_t n, char **answer)
{
    size_t len;
    char *raw = delivery_request(id, body, n, &len);
    int status = 0;
    char *a = test_http_raw(s->port, raw, len, &status);
    free(raw);
    ck_assert_ptr_nonnull(a);
    if (answer)
        *answer = a;
    else
        free(a);
    return status;
}

/* The seq of an accepted delivery's answer ({"outcome":"accepted","seq":N}). */
static uint64_t answer_seq(const char *answer)
{
    const char *at = strstr(answer, "\"seq\":");
    ck_assert_msg(at != NULL, "no seq in %s", answer);
    return strtoull(at + 6, NULL, 10);
}

/* The delivery body inside an event's bytes (its webhook part's bin). */
static void webhook_body_of(const void *raw, size_t len, const char **body, size_t *n)
{
    msgpack_unpacked up;
    msgpack_unpacked_init(&up);
    log_event ev;
    ck_assert_int_eq(log_event_decode(raw, len, &up, &ev), TALLY_ok);
    const msgpack_object *w = log_event_part(&ev, LOG_PART_WEBHOOK);
    ck_assert_ptr_nonnull(w);
    ck_assert_int_eq(w->type, MSGPACK_OBJECT_ARRAY);
    ck_assert_uint_eq(w->via.array.size, 5);
    const msgpack_object *b = &w->via.array.ptr[4];
    ck_assert_int_eq(b->type, MSGPACK_OBJECT_BIN);
    /* the bin points into raw (msgpack-c references the buffer) */
    *body = b->via.bin.ptr;
    *n = b->via.bin.size;
    ck_assert(*body >= (const char *)raw && *body + *n <= (const char *)raw + len);
    msgpack_unpacked_destroy(&up);
}

static void assert_body_is(const void *raw, size_t len, const char *body, size_t n)
{
    const char *got;
    size_t got_n;
    webhook_body_of(raw, len, &got, &got_n);
    ck_assert_uint_eq(got_n, n);
    ck_assert_msg(memcmp(got, body, n) == 0, "the stored body differs from the delivered one");
}

/* GET /v1/log?from=&limit=&format=msgpack: the events' bytes (base64 in
 * the JSON) into out (each malloc'd), their count returned. */
static size_t json_log(const hook_server *s, uint64_t from, unsigned limit, uint8_t **out,
                       size_t *lens, size_t capacity)
{
    char path[96];
    snprintf(path, sizeof(path), "/v1/log?from=%llu&limit=%u&format=msgpack",
             (unsigned long long)from, limit);
    int status = 0;
    char *text = test_http_get(s->port, path, &status);
    ck_assert_ptr_nonnull(text);
    ck_assert_msg(status == 200, "GET %s: %d %.200s", path, status, text);
    json_error_t err;
    json_t *root = json_loads(text, 0, &err);
    ck_assert_msg(root != NULL, "not JSON: %s", err.text);
    json_t *events = json_object_get(root, "events");
    ck_assert(json_is_array(events));
    size_t n = json_array_size(events);
    ck_assert_uint_le(n, capacity);
    for (size_t i = 0; i < n; i++) {
        const char *b64 = json_string_value(json_array_get(events, i));
        ck_assert_ptr_nonnull(b64);
        size_t b64_len = strlen(b64);
        out[i] = malloc(b64_len);
        ck_assert_ptr_nonnull(out[i]);
        int m = EVP_DecodeBlock(out[i], (const unsigned char *)b64, (int)b64_len);
        ck_assert_int_gt(m, 0);
        lens[i] = (size_t)m - (b64_len >= 1 && b64[b64_len - 1] == '=') -
                  (b64_len >= 2 && b64[b64_len - 2] == '=');
    }
    json_decref(root);
    free(text);
    return n;
}

/* ---- a 256 KiB body, every way back ---- */

typedef struct fetched {
    const char *body;
    size_t n;
    uint64_t seq;
    bool seen;
} fetched;

static void find_big(const tally_delivery *batch, size_t count, tally_verdict *verdicts,
                     tally_answer *answers, void *arg)
{
    (void)answers;
    fetched *f = arg;
    for (size_t i = 0; i < count; i++) {
        verdicts[i] = TALLY_DONE;
        if (batch[i].event.seq == f->seq) {
            assert_body_is(batch[i].event.raw, batch[i].event.raw_len, f->body, f->n);
            f->seen = true;
        }
    }
}

START_TEST(largest_body_round_trips)
{
    hook_server s;
    hook_up(&s);
    tally_stream *stream = NULL;
    ck_assert_int_eq(tally_stream_open(s.c, s.p.pub_url, 1, NULL, &stream), TALLY_ok);
    test_client_open_accounts(s.c, 1, 3); /* events before and after: PUB brings those */
    char *body = body_make(BODY_BYTES, 1), *answer = NULL;
    ck_assert_int_eq(deliver(&s, "big-1", body, BODY_BYTES, &answer), 200);
    uint64_t seq = answer_seq(answer);
    free(answer);
    test_client_open_accounts(s.c, 10, 2);

    /* log_read */
    tally_event ev;
    size_t count = 0;
    uint64_t head = 0;
    ck_assert_int_eq(tally_log_read(s.c, seq, 1, 0, &ev, 1, &count, &head), TALLY_ok);
    ck_assert_uint_eq(count, 1);
    ck_assert_uint_eq(ev.seq, seq);
    ck_assert_str_eq(ev.type, "webhook.received");
    assert_body_is(ev.raw, ev.raw_len, body, BODY_BYTES);
    ck_assert_uint_gt(ev.raw_len, BODY_BYTES);
    ck_assert_uint_le(ev.raw_len, TALLY_EVENT_BYTES_MAX);

    /* GET /v1/log: the same bytes */
    uint8_t *bytes[1];
    size_t lens[1];
    ck_assert_uint_eq(json_log(&s, seq, 1, bytes, lens, 1), 1);
    ck_assert_uint_eq(lens[0], ev.raw_len);
    ck_assert(memcmp(bytes[0], ev.raw, ev.raw_len) == 0);
    free(bytes[0]);

    /* libtally's stream: the others from PUB, this one filled in by log_read */
    for (uint64_t want = 1; want <= head; want++) {
        tally_event got;
        ck_assert_int_eq(tally_stream_next(stream, &got, WAIT_MS), TALLY_ok);
        ck_assert_uint_eq(got.seq, want);
        if (want == seq) {
            ck_assert_uint_eq(got.raw_len, ev.raw_len);
            ck_assert(memcmp(got.raw, ev.raw, ev.raw_len) == 0);
        }
        tally_events_release(&got, 1);
    }
    tally_stream_counters sc;
    tally_stream_counters_get(stream, &sc);
    ck_assert_uint_ge(sc.from_fill, 1); /* the large event is never published */
    tally_stream_close(stream);

    /* sub_fetch */
    tally_subscriber *sub = NULL;
    ck_assert_int_eq(tally_subscriber_open(s.c, "big", NULL, &sub), TALLY_ok);
    fetched f = {body, BODY_BYTES, seq, false};
    tally_run_options ro = {.fetch_max = 1000, .wait_ms = 100, .until_idle = true};
    ck_assert_int_eq(tally_subscriber_run_batches(sub, &ro, find_big, &f), TALLY_ok);
    ck_assert(f.seen);
    tally_subscriber_close(sub);
    tally_events_release(&ev, 1);

    /* one byte more: 413, nothing stored */
    char *over = body_make(BODY_BYTES + 1, 2);
    ck_assert_int_eq(deliver(&s, "big-2", over, BODY_BYTES + 1, &answer), 413);
    ck_assert_msg(strstr(answer, "too_large") != NULL, "%s", answer);
    free(answer);
    ck_assert_uint_eq(test_client_head(s.c), head);
    /* the id was not taken: the same id with the largest body is new */
    ck_assert_int_eq(deliver(&s, "big-2", over, BODY_BYTES, &answer), 200);
    ck_assert_msg(strstr(answer, "\"accepted\"") != NULL, "%s", answer);
    free(answer);
    free(over);
    free(body);
    hook_down(&s);
}
END_TEST

/* ---- pages bounded by bytes ---- */

/* 1000 events: 49 account.opened, a ~256 KiB webhook event, and again,
 * 20 times. */
static void fill_log(hook_server *s)
{
    uint64_t id = 1;
    for (unsigned i = 0; i < BIG_EVENTS; i++) {
        test_client_open_accounts(s->c, id, PAGED_EVENTS / BIG_EVENTS - 1);
        id += PAGED_EVENTS / BIG_EVENTS - 1;
        char name[32];
        snprintf(name, sizeof(name), "page-%u", i);
        char *body = body_make(BODY_BYTES - i, i);
        ck_assert_int_eq(deliver(s, name, body, BODY_BYTES - i, NULL), 200);
        free(body);
    }
    ck_assert_uint_eq(test_client_head(s->c), PAGED_EVENTS);
}

typedef struct pages {
    tally_client *c;
    uint64_t next;     /* the seq the next delivery must have */
    size_t batches, first_count;
    uint64_t in_flight_at_first; /* the server's in_flight while the first batch is handled */
} pages;

static void page_batch(const tally_delivery *batch, size_t count, tally_verdict *verdicts,
                       tally_answer *answers, void *arg)
{
    (void)answers;
    pages *p = arg;
    size_t bytes = 0;
    ck_assert_uint_ge(count, 1);
    for (size_t i = 0; i < count; i++) {
        ck_assert_uint_eq(batch[i].event.seq, p->next++);
        bytes += batch[i].event.raw_len;
        verdicts[i] = TALLY_DONE;
    }
    ck_assert_uint_le(bytes, TALLY_SUB_FETCH_BYTES_MAX);
    if (p->batches++ == 0) {
        p->first_count = count;
        tally_subscriber_info info;
        ck_assert_int_eq(tally_subscriber_get(p->c, "pager", &info), TALLY_ok);
        p->in_flight_at_first = info.in_flight;
    }
}

START_TEST(pages_are_bounded_by_bytes)
{
    hook_server s;
    hook_up(&s);
    fill_log(&s);

    /* log_read: fewer than 1000, at most the byte budget, then on from
     * the last seq + 1 with no gap */
    tally_event *page = calloc(PAGED_EVENTS, sizeof(*page));
    ck_assert_ptr_nonnull(page);
    uint64_t next = 1, head = 0;
    size_t pages_read = 0, first_count = 0;
    while (next <= PAGED_EVENTS) {
        size_t count = 0, bytes = 0;
        ck_assert_int_eq(tally_log_read(s.c, next, PAGED_EVENTS, 0, page, PAGED_EVENTS, &count,
                                        &head), TALLY_ok);
        ck_assert_uint_ge(count, 1);
        for (size_t i = 0; i < count; i++) {
            ck_assert_uint_eq(page[i].seq, next + i);
            bytes += page[i].raw_len;
        }
        ck_assert_uint_le(bytes, TALLY_LOG_READ_BYTES_MAX);
        if (pages_read++ == 0)
            first_count = count;
        next += count;
        tally_events_release(page, count);
    }
    ck_assert_uint_eq(next, PAGED_EVENTS + 1);
    ck_assert_uint_lt(first_count, PAGED_EVENTS);
    ck_assert_uint_ge(pages_read, 3); /* 20 x 256 KiB in 2 MiB pages */

    /* GET /v1/log: the same first page */
    uint8_t **bytes = calloc(PAGED_EVENTS, sizeof(*bytes));
    size_t *lens = calloc(PAGED_EVENTS, sizeof(*lens));
    ck_assert(bytes && lens);
    size_t n = json_log(&s, 1, PAGED_EVENTS, bytes, lens, PAGED_EVENTS);
    ck_assert_uint_eq(n, first_count);
    for (size_t i = 0; i < n; i++)
        free(bytes[i]);
    free(bytes);
    free(lens);
    free(page);

    /* sub_fetch: the same rule, and only what a fetch returns is leased */
    tally_subscriber *sub = NULL;
    ck_assert_int_eq(tally_subscriber_open(s.c, "pager", NULL, &sub), TALLY_ok);
    pages p = {s.c, 1, 0, 0, 0};
    tally_run_options ro = {.fetch_max = 1000, .wait_ms = 100, .until_idle = true};
    ck_assert_int_eq(tally_subscriber_run_batches(sub, &ro, page_batch, &p), TALLY_ok);
    ck_assert_uint_eq(p.next, PAGED_EVENTS + 1);
    ck_assert_uint_lt(p.first_count, PAGED_EVENTS);
    ck_assert_uint_eq(p.in_flight_at_first, p.first_count);
    ck_assert_uint_ge(p.batches, 3);
    tally_subscriber_info info;
    ck_assert_int_eq(tally_subscriber_get(s.c, "pager", &info), TALLY_ok);
    ck_assert_uint_eq(info.ack_floor, PAGED_EVENTS);
    ck_assert_uint_eq(info.in_flight, 0);
    tally_subscriber_close(sub);

    /* tally-recon on the store with the large events */
    tallyd_recon_clean(&s.p);
    hook_down(&s);
}
END_TEST

/* ---- 64 in flight: the 65th gets 503 ---- */

/* tally_webhooks_in_flight in /metrics (-1 when absent). */
static long in_flight(const hook_server *s)
{
    int status = 0;
    char *m = test_http_get(s->port, "/metrics", &status);
    ck_assert_ptr_nonnull(m);
    const char *at = strstr(m, "\ntally_webhooks_in_flight ");
    long v = at ? strtol(at + strlen("\ntally_webhooks_in_flight "), NULL, 10) : -1;
    free(m);
    return v;
}

/* Read a whole answer from fd until the server closes (the request said
 * Connection: close); its status. */
static int answer_status(int fd)
{
    char buf[4096];
    size_t len = 0;
    int64_t deadline = test_deadline_ms(WAIT_MS);
    while (len < sizeof(buf) - 1 && clock_mono_ms() < deadline) {
        struct pollfd pfd = {fd, POLLIN, 0};
        if (poll(&pfd, 1, 100) <= 0)
            continue;
        ssize_t r = read(fd, buf + len, sizeof(buf) - 1 - len);
        if (r <= 0)
            break;
        len += (size_t)r;
    }
    buf[len] = '\0';
    close(fd);
    return strncmp(buf, "HTTP/1.1 ", 9) == 0 ? atoi(buf + 9) : 0;
}

START_TEST(sixty_fifth_delivery_in_flight_gets_503)
{
    hook_server s;
    hook_up(&s);
    uint64_t head = test_client_head(s.c);
    ck_assert_int_eq(in_flight(&s), 0);

    /* Hold LMDB's writer lock from here: tallyd's writer waits for it, so
     * every delivery stays in flight (the environment is shared between
     * processes by LMDB's lock file). */
    MDB_env *env;
    MDB_txn *hold;
    ck_assert_int_eq(mdb_env_create(&env), 0);
    ck_assert_int_eq(mdb_env_set_maxdbs(env, 32), 0);
    ck_assert_int_eq(mdb_env_open(env, s.p.data_dir, MDB_NOTLS, 0600), 0);
    ck_assert_int_eq(mdb_txn_begin(env, NULL, 0, &hold), 0);

    int fds[IN_FLIGHT];
    for (int i = 0; i < IN_FLIGHT; i++) {
        char id[32], body[64];
        snprintf(id, sizeof(id), "held-%d", i);
        snprintf(body, sizeof(body), "{\"n\":%d}", i);
        size_t len;
        char *raw = delivery_request(id, body, strlen(body), &len);
        fds[i] = test_tcp_connect(s.port);
        ck_assert_int_ge(fds[i], 0);
        ck_assert(tallyd_fd_send_all(fds[i], raw, len, test_deadline_ms(WAIT_MS)));
        free(raw);
    }
    TEST_WAIT_UNTIL(in_flight(&s) == IN_FLIGHT, WAIT_MS,
                    "%d webhook deliveries in flight (%lld)", IN_FLIGHT,
                    (long long)in_flight(&s));

    char *answer = NULL;
    ck_assert_int_eq(deliver(&s, "held-65", "{\"n\":65}", 8, &answer), 503);
    ck_assert_msg(strstr(answer, "\r\nRetry-After: 1\r\n") != NULL, "%s", answer);
    ck_assert_msg(strstr(answer, "\"unavailable\"") != NULL, "%s", answer);
    free(answer);
    ck_assert_int_eq(in_flight(&s), IN_FLIGHT);

    mdb_txn_abort(hold); /* the writer goes on: the 64 are stored */
    for (int i = 0; i < IN_FLIGHT; i++)
        ck_assert_int_eq(answer_status(fds[i]), 200);
    mdb_env_close(env);
    ck_assert_uint_eq(test_client_head(s.c), head + IN_FLIGHT);
    /* the writer hands each answer over, then counts its delivery out:
     * the last count may come a moment after its answer was read */
    TEST_WAIT_UNTIL(in_flight(&s) == 0, WAIT_MS, "no webhook delivery in flight (%lld)",
                    (long long)in_flight(&s));
    /* the 65th stored nothing: sent again it is new, not a replay */
    ck_assert_int_eq(deliver(&s, "held-65", "{\"n\":65}", 8, &answer), 200);
    ck_assert_msg(strstr(answer, "\"accepted\"") != NULL, "%s", answer);
    free(answer);
    hook_down(&s);
}
END_TEST

int main(void)
{
    const test_row rows[] = {
        {"body", largest_body_round_trips, 600},
        {"pages", pages_are_bounded_by_bytes, 900},
        {"in_flight", sixty_fifth_delivery_in_flight_gets_503, 600},
    };
    return test_run_suite(test_suite_of_rows("webhook_limits", TEST_ROWS(rows)));
}
