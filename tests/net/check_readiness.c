/*
 * check_readiness.c — tallyd's readiness apart from its alerts
 * (net/metrics/health.c, docs/OPERATIONS.md "Health checks and alert
 * thresholds"), on a real tallyd:
 *
 *   - too little free disk (a --ready-disk-free-mb above what the data
 *     directory's filesystem has) or map room makes GET /readyz 503 with
 *     the readiness check that fails, `tally health` exit 5 and
 *     tally_ready 0;
 *   - a write answered storage_full makes tallyd not ready for
 *     --ready-storage-full-s, and counts in
 *     tally_writes_refused_total{reason="storage_full"};
 *   - a subscriber past --alert-pending fails an alert check: shown in
 *     /readyz's JSON and /metrics, `tally health` exits 1, but /readyz
 *     stays 200;
 *   - a writer held (--test-writer-hold-file) while a write waits makes
 *     /healthz 503 after --writer-stall-ms, /readyz 503 with
 *     writer_stall_ms, and tally_write_queue_depth rise; let go, it all
 *     passes again and the write is answered.
 */
#include "tests/support/client_support.h"
#include "tests/support/http_client.h"
#include "tests/support/run.h"
#include "tests/support/suite.h"
#include "tests/support/test_support.h"
#include "tests/support/wait.h"

#include <check.h>
#include <fcntl.h>
#include <jansson.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define WAIT_MS 60000
#define FILL_WRITES_MAX 200000

typedef struct ready_server {
    test_client_fixture f;
    int port;
} ready_server;

static void ready_up(ready_server *a, const char *const *more)
{
    memset(a, 0, sizeof(*a));
    int n = 0;
    a->f.srv.extra_args[n++] = "--http";
    a->f.srv.extra_args[n++] = "http://127.0.0.1:0";
    for (int i = 0; more[i]; i++)
        a->f.srv.extra_args[n++] = more[i];
    tallyd_start(&a->f.srv);
    a->port = a->f.srv.http_port;
    a->f.c = test_client_open(a->f.srv.url);
}

static void ready_down(ready_server *a)
{
    tally_client_close(a->f.c);
    ck_assert_int_eq(tallyd_stop(&a->f.srv), 0);
    tallyd_cleanup(&a->f.srv);
}

/* The check named name in a /readyz or `tally health --json` body's
 * checks (the first, or the one of subscriber), or NULL. */
static json_t *check_of(json_t *body, const char *name, const char *subscriber)
{
    json_t *checks = json_object_get(body, "checks"), *k;
    size_t i;
    json_array_foreach(checks, i, k)
    {
        const char *sub = json_string_value(json_object_get(k, "subscriber"));
        if (strcmp(json_string_value(json_object_get(k, "check")), name) == 0 &&
            (subscriber == NULL || (sub && strcmp(sub, subscriber) == 0)))
            return k;
    }
    return NULL;
}

typedef struct readyz_view {
    int status;
    bool failing; /* the check asked about fails */
    char text[8192];
} readyz_view;

/* GET /readyz: its status, and whether check name (of subscriber) fails,
 * with the class it must have. */
static readyz_view readyz(const ready_server *a, const char *name, const char *subscriber,
                          const char *cls)
{
    readyz_view v = {0};
    char *body = test_http_get(a->port, "/readyz", &v.status);
    ck_assert_ptr_nonnull(body);
    snprintf(v.text, sizeof(v.text), "%s", body);
    json_error_t e;
    json_t *o = json_loads(body, 0, &e);
    ck_assert_msg(o != NULL, "/readyz is not JSON: %s", body);
    json_t *k = check_of(o, name, subscriber);
    ck_assert_msg(k != NULL, "/readyz lacks the check %s: %s", name, body);
    ck_assert_str_eq(json_string_value(json_object_get(k, "class")), cls);
    v.failing = json_is_false(json_object_get(k, "ok"));
    /* the status is the readiness: ready is true exactly when it is 200 */
    ck_assert_msg(json_is_true(json_object_get(o, "ready")) == (v.status == 200),
                  "/readyz %d: %s", v.status, body);
    json_decref(o);
    free(body);
    return v;
}

/* Wait until check name's failing is as wanted; then /readyz's status must
 * be status. */
static void wait_check(const ready_server *a, const char *name, const char *subscriber,
                       const char *cls, bool failing, int status)
{
    readyz_view v;
    int64_t deadline = test_deadline_ms(WAIT_MS);
    while ((v = readyz(a, name, subscriber, cls)).failing != failing &&
           clock_mono_ms() < deadline)
        test_pause_ms(50);
    ck_assert_msg(v.failing == failing, "/readyz (%d): %s %s: %s", v.status, name,
                  failing ? "never failed" : "kept failing", v.text);
    ck_assert_msg(v.status == status, "/readyz %d, not %d: %s", v.status, status, v.text);
}

/* `tally health --json`: its exit code (its ready and healthy must agree). */
static int tally_health_exit(const ready_server *a)
{
    const char *argv[] = {tallyd_program("tally"), "--url", a->f.srv.url, "health", "--json", NULL};
    char *out = NULL;
    int rc = test_run(argv, NULL, &out, NULL);
    json_error_t e;
    json_t *o = json_loads(out, 0, &e);
    ck_assert_msg(o != NULL, "tally health --json printed: %s", out);
    bool ready = json_is_true(json_object_get(o, "ready"));
    bool healthy = json_is_true(json_object_get(o, "healthy"));
    ck_assert_msg(rc == (!ready ? 5 : healthy ? 0 : 1), "tally health exit %d: %s", rc, out);
    ck_assert_ptr_nonnull(check_of(o, "writer_stall_ms", NULL));
    json_decref(o);
    free(out);
    return rc;
}

static long long metric(const ready_server *a, const char *series)
{
    return test_metrics_sample(a->port, series);
}

START_TEST(too_little_disk_or_map_room_is_not_ready)
{
    ready_server a;
    /* more than any disk has: the data directory's filesystem is "full" */
    static const char *const full_disk[] = {"--ready-disk-free-mb", "1073741824", NULL};
    ready_up(&a, full_disk);
    wait_check(&a, "disk_free_mb", NULL, "readiness", true, 503);
    readyz_view v = readyz(&a, "disk_free_mb", NULL, "readiness");
    ck_assert_msg(strstr(v.text, "MiB free under the data directory, below the threshold "
                                 "1073741824"), "%s", v.text);
    ck_assert_int_eq(tally_health_exit(&a), 5);
    ck_assert_int_eq(metric(&a, "tally_ready"), 0);
    ck_assert_int_eq(metric(&a, "tally_health_checks_failing{class=\"readiness\"}"), 1);
    ck_assert_int_gt(metric(&a, "tally_disk_free_bytes"), 0);
    ck_assert(tallyd_log_wait(&a.f.srv, "not ready: disk_free_mb:", WAIT_MS));
    tally_client_close(a.f.c);
    ck_assert_int_eq(tallyd_stop(&a.f.srv), 0);
    /* the same store, the default disk threshold but more map room asked
     * for than --map-max-mb holds */
    a.f.srv.extra_args[2] = "--map-max-mb";
    a.f.srv.extra_args[3] = "2048";
    a.f.srv.extra_args[4] = "--ready-map-room-kib";
    a.f.srv.extra_args[5] = "4194304";
    tallyd_restart(&a.f.srv);
    a.f.c = test_client_open(a.f.srv.url);
    wait_check(&a, "map_room_kib", NULL, "readiness", true, 503);
    wait_check(&a, "disk_free_mb", NULL, "readiness", false, 503);
    ck_assert_int_eq(tally_health_exit(&a), 5);
    tally_client_close(a.f.c);
    ck_assert_int_eq(tallyd_stop(&a.f.srv), 0);
    /* and with the defaults: ready */
    a.f.srv.extra_args[2] = NULL;
    tallyd_restart(&a.f.srv);
    a.f.c = test_client_open(a.f.srv.url);
    wait_check(&a, "map_room_kib", NULL, "readiness", false, 200);
    ck_assert_int_eq(tally_health_exit(&a), 0);
    ck_assert_int_eq(metric(&a, "tally_ready"), 1);
    ready_down(&a);
}
END_TEST

/* Open accounts one by one until a write is answered storage_full. */
static void fill_until_storage_full(tally_client *c)
{
    for (uint64_t id = 1; id <= FILL_WRITES_MAX; id++) {
        char key[32];
        snprintf(key, sizeof(key), "open-%llu", (unsigned long long)id);
        tally_account_open_args args = {.id = id, .ledger = 1, .code = 1};
        tally_result res;
        int rc = tally_account_open(c, key, &args, &res);
        if (rc == TALLY_storage_full || res.code == TALLY_storage_full)
            return;
        ck_assert_msg(rc == TALLY_ok && res.code == TALLY_ok, "account %llu: %s / %s",
                      (unsigned long long)id, tally_strerror(rc), tally_strerror(res.code));
    }
    ck_abort_msg("a 1 MiB map never filled up");
}

START_TEST(a_write_answered_storage_full_is_not_ready)
{
    ready_server a;
    /* not ready for 5 s (more on a slow machine) after a refusal: time to
     * see it, short enough to wait out */
    static char window_s[24];
    snprintf(window_s, sizeof(window_s), "%lld", (long long)test_scaled_ms(5000) / 1000);
    /* a 1 MiB map that may not grow; the room check off, to see this one */
    static const char *const small[] = {"--map-size-mb", "1", "--map-max-mb", "1",
                                        "--ready-map-room-kib", "0", "--ready-storage-full-s",
                                        window_s, NULL};
    ready_up(&a, small);
    wait_check(&a, "storage_full", NULL, "readiness", false, 200);
    ck_assert_int_eq(metric(&a, "tally_writes_refused_total{reason=\"storage_full\"}"), 0);
    fill_until_storage_full(a.f.c);
    ck_assert_int_ge(metric(&a, "tally_writes_refused_total{reason=\"storage_full\"}"), 1);
    /* no further writes: not ready until the window passed since the refusal */
    wait_check(&a, "storage_full", NULL, "readiness", true, 503);
    readyz_view v = readyz(&a, "storage_full", NULL, "readiness");
    ck_assert_msg(strstr(v.text, "a write was answered storage_full"), "%s", v.text);
    ck_assert_int_eq(tally_health_exit(&a), 5);
    wait_check(&a, "storage_full", NULL, "readiness", false, 200);
    ck_assert(tallyd_log_wait(&a.f.srv, "ready again: storage_full", WAIT_MS));
    ready_down(&a);
}
END_TEST

START_TEST(a_lagging_subscriber_alerts_and_stays_ready)
{
    ready_server a;
    static const char *const more[] = {"--alert-pending", "2", NULL};
    ready_up(&a, more);
    tally_subscriber *relay = NULL;
    ck_assert_int_eq(tally_subscriber_open(a.f.c, "relay", NULL, &relay), TALLY_ok);
    test_client_open_accounts(a.f.c, 1, 3); /* 3 pending > 2 */
    wait_check(&a, "pending", "relay", "alert", true, 200);
    readyz_view v = readyz(&a, "pending", "relay", "alert");
    ck_assert_msg(strstr(v.text, "\"status\":\"ok\"") && strstr(v.text, "\"alerts_failing\":1"),
                  "%s", v.text);
    ck_assert_int_eq(tally_health_exit(&a), 1);
    ck_assert_int_eq(metric(&a, "tally_ready"), 1);
    ck_assert_int_eq(metric(&a, "tally_health_checks_failing{class=\"alert\"}"), 1);
    ck_assert_int_eq(metric(&a, "tally_health_checks_failing{class=\"readiness\"}"), 0);
    ck_assert_int_eq(metric(&a, "tally_subscriber_pending{subscriber=\"relay\"}"), 3);
    int status = 0;
    free(test_http_get(a.port, "/healthz", &status));
    ck_assert_int_eq(status, 200);
    tally_subscriber_close(relay);
    ready_down(&a);
}
END_TEST

typedef struct held_write {
    const char *url;
    int rc, code;
} held_write;

/* One write, from a client of its own (answered once the writer is let go). */
static void *write_one(void *arg)
{
    held_write *w = arg;
    tally_client_options o = {.url = w->url, .timeout_ms = 120000, .consumer = "held"};
    tally_client *c = NULL;
    w->rc = tally_client_open(&o, &c);
    if (w->rc != TALLY_ok)
        return NULL;
    tally_account_open_args args = {.id = 77, .ledger = 1, .code = 1};
    tally_result res = {0};
    w->rc = tally_account_open(c, "held-1", &args, &res);
    w->code = res.code;
    tally_client_close(c);
    return NULL;
}

static void touch(const char *path)
{
    int fd = open(path, O_CREAT | O_WRONLY, 0600);
    ck_assert_int_ge(fd, 0);
    close(fd);
}

static char *healthz(const ready_server *a, int *status)
{
    char *body = test_http_get(a->port, "/healthz", status);
    ck_assert_ptr_nonnull(body);
    return body;
}

START_TEST(a_held_writer_fails_healthz_and_readiness)
{
    ready_server a;
    static char hold[400];
    memset(&a, 0, sizeof(a));
    static const char *const more[] = {"--writer-stall-ms", "300", "--test-writer-hold-file",
                                       hold, NULL};
    /* the hold file lives in the test's own directory, known only after
     * the start: a path in the data directory's parent, made later */
    snprintf(hold, sizeof(hold), "%s/hold-%ld", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp",
             (long)getpid());
    ready_up(&a, more);
    int status = 0;
    free(healthz(&a, &status));
    ck_assert_int_eq(status, 200);
    touch(hold);
    held_write w = {a.f.srv.url, -1, -1};
    pthread_t t;
    ck_assert_int_eq(pthread_create(&t, NULL, write_one, &w), 0);
    ck_assert_msg(test_metrics_sample_reaches(a.port, "tally_write_queue_depth", 1, WAIT_MS),
                  "the held write never showed in tally_write_queue_depth");
    char *body = NULL;
    bool stalled = TEST_WAITED_UNTIL((free(body), body = healthz(&a, &status), status == 503),
                                     WAIT_MS);
    ck_assert_msg(stalled && strstr(body, "writer stalled: no progress for"), "/healthz %d: %s",
                  status, body);
    free(body);
    wait_check(&a, "writer_stall_ms", NULL, "readiness", true, 503);
    ck_assert_int_eq(tally_health_exit(&a), 5);
    ck_assert_int_ge(metric(&a, "tally_write_queue_depth"), 1);
    ck_assert_int_eq(metric(&a, "tally_ready"), 0);
    ck_assert(tallyd_log_wait(&a.f.srv, "not ready: writer_stall_ms:", WAIT_MS));
    /* let go: the write is answered, and everything passes again */
    ck_assert_int_eq(unlink(hold), 0);
    ck_assert_int_eq(pthread_join(t, NULL), 0);
    ck_assert_msg(w.rc == TALLY_ok && w.code == TALLY_ok, "held write: %s / %s",
                  tally_strerror(w.rc), tally_strerror(w.code));
    ck_assert_int_eq(metric(&a, "tally_write_queue_depth"), 0);
    free(healthz(&a, &status));
    ck_assert_int_eq(status, 200);
    wait_check(&a, "writer_stall_ms", NULL, "readiness", false, 200);
    ready_down(&a);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("readiness");
    TCase *tc = tcase_create("readiness");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, too_little_disk_or_map_room_is_not_ready);
    tcase_add_test(tc, a_write_answered_storage_full_is_not_ready);
    tcase_add_test(tc, a_lagging_subscriber_alerts_and_stays_ready);
    tcase_add_test(tc, a_held_writer_fails_healthz_and_readiness);
    suite_add_tcase(s, tc);
    return test_run_suite(s);
}
