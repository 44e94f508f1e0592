/*
 * check_alerts.c — tallyd's alert thresholds (net/metrics/health.c): for
 * each threshold, a real tallyd crosses it and GET /readyz shows the
 * failing alert check with the reason while it stays 200 (alerts are not
 * readiness: tests/net/check_readiness.c), `tally health` exits 1, and the
 * log has the warn line; then it clears, `tally health` exits 0 and the
 * log says it cleared. Parking a dead letter logs a warn
 * line. A per-subscriber override (NAME=none) takes a subscriber out.
 */
#include "tests/support/client_support.h"
#include "tests/support/http_client.h"
#include "tests/support/run.h"
#include "tests/support/suite.h"
#include "tests/support/test_support.h"
#include "tests/support/wait.h"

#include <check.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define WAIT_MS 90000 /* time-based checks need seconds to pass; a loaded machine more */

typedef struct alert_server {
    test_client_fixture f;
    int port;
    char url[320];
} alert_server;

static void alert_up(alert_server *a, const char *const *more)
{
    memset(a, 0, sizeof(*a));
    int n = 0;
    a->f.srv.extra_args[n++] = "--http";
    a->f.srv.extra_args[n++] = "http://127.0.0.1:0"; /* the harness reads the port back */
    for (int i = 0; more[i]; i++)
        a->f.srv.extra_args[n++] = more[i];
    tallyd_start(&a->f.srv);
    a->port = a->f.srv.http_port;
    snprintf(a->url, sizeof(a->url), "%s", a->f.srv.http_url);
    a->f.c = test_client_open(a->f.srv.url);
}

static void alert_down(alert_server *a)
{
    tally_client_close(a->f.c);
    ck_assert_int_eq(tallyd_stop(&a->f.srv), 0);
    tallyd_cleanup(&a->f.srv);
}

static char *readyz(const alert_server *a, int *status)
{
    char *body = test_http_get(a->port, "/readyz", status);
    ck_assert_ptr_nonnull(body);
    return body;
}

/* Wait until /readyz's body contains (or, present false, lacks) text. */
static void wait_readyz(const alert_server *a, const char *text, bool present)
{
    char *body = NULL;
    int status = 0;
    int64_t deadline = test_deadline_ms(WAIT_MS);
    for (;;) {
        free(body);
        body = readyz(a, &status);
        if ((strstr(body, text) != NULL) == present || clock_mono_ms() >= deadline)
            break;
        test_pause_ms(100);
    }
    ck_assert_msg((strstr(body, text) != NULL) == present, "/readyz (%d) %s \"%s\":\n%s", status,
                  present ? "never had" : "kept", text, body);
    ck_assert_msg(status == 200, "an alert made /readyz %d:\n%s", status, body);
    free(body);
}

static char *log_text(const alert_server *a)
{
    FILE *f = fopen(a->f.srv.log_path, "r");
    ck_assert_ptr_nonnull(f);
    static char buf[1 << 20];
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = '\0';
    return buf;
}

static void wait_log(const alert_server *a, const char *text)
{
    if (!TEST_WAITED_UNTIL(strstr(log_text(a), text) != NULL, WAIT_MS))
        ck_abort_msg("log lacks \"%s\":\n%s", text, log_text(a));
}

/* `tally health --json`: its exit code; the JSON's healthy must agree. */
static int tally_health_exit(const alert_server *a)
{
    const char *argv[] = {tallyd_program("tally"), "--url", a->f.srv.url, "health", "--json", NULL};
    char *out = NULL;
    int rc = test_run(argv, NULL, &out, NULL);
    json_error_t e;
    json_t *o = json_loads(out, 0, &e);
    ck_assert_msg(o != NULL, "tally health --json printed: %s", out);
    ck_assert_int_eq(json_is_true(json_object_get(o, "healthy")), rc == 0);
    ck_assert(json_array_size(json_object_get(o, "checks")) >= 1);
    json_decref(o);
    free(out);
    return rc;
}

/* A field of subscriber name in `tally subscribers --json` (one object a
 * line). */
static long long subscriber_field(const alert_server *a, const char *name, const char *field)
{
    const char *argv[] = {tallyd_program("tally"), "--url", a->f.srv.url, "subscribers", "--json",
                          NULL};
    char *out = NULL;
    ck_assert_int_eq(test_run(argv, NULL, &out, NULL), 0);
    long long value = -1;
    for (char *line = strtok(out, "\n"); line; line = strtok(NULL, "\n")) {
        json_error_t e;
        json_t *o = json_loads(line, 0, &e);
        if (o && strcmp(json_string_value(json_object_get(o, "name")), name) == 0)
            value = json_integer_value(json_object_get(o, field));
        json_decref(o);
    }
    free(out);
    ck_assert_msg(value >= 0, "no %s of %s in tally subscribers --json", field, name);
    return value;
}

static void wait_field_at_least(const alert_server *a, const char *name, const char *field,
                                long long min)
{
    TEST_WAIT_UNTIL(subscriber_field(a, name, field) >= min, WAIT_MS, "%s of %s at least %lld",
                    field, name, min);
}

static tally_verdict park_first(const tally_delivery *d, tally_answer *answer, void *arg)
{
    (void)arg;
    if (d->event.seq == 1) {
        snprintf(answer->error, sizeof(answer->error), "cannot handle it");
        return TALLY_PARK;
    }
    return TALLY_DONE;
}

START_TEST(each_subscriber_threshold_crosses_and_clears)
{
    alert_server a;
    static const char *const more[] = {"--alert-pending", "2", "--alert-pending", "audit=none",
                                       "--alert-oldest-unacked-s", "1", "--alert-dead-letters", "0",
                                       "--alert-idle-subscriber-s", "1", NULL};
    alert_up(&a, more);
    int status = 0;
    free(readyz(&a, &status));
    ck_assert_int_eq(status, 200);
    ck_assert_int_eq(tally_health_exit(&a), 0);
    test_client_open_accounts(a.f.c, 1, 3); /* seqs 1..3 */
    tally_subscriber *relay = NULL, *audit = NULL;
    ck_assert_int_eq(tally_subscriber_open(a.f.c, "relay", NULL, &relay), TALLY_ok);
    ck_assert_int_eq(tally_subscriber_open(a.f.c, "audit", NULL, &audit), TALLY_ok);
    /* pending 3 > 2; after a second, the oldest unacked and idleness too */
    wait_readyz(&a, "subscriber relay: 3 events pending, above the threshold 2", true);
    wait_readyz(&a, "s since the oldest unacked event", true);
    wait_readyz(&a, "s since the last fetch while events are pending", true);
    wait_log(&a, "alert started: pending: subscriber relay");
    wait_log(&a, "alert started: oldest_unacked_s: subscriber relay");
    wait_log(&a, "alert started: idle_subscriber_s: subscriber relay");
    ck_assert_ptr_null(strstr(log_text(&a), "pending: subscriber audit")); /* audit=none */
    ck_assert_int_eq(tally_health_exit(&a), 1);
    ck_assert_int_eq(subscriber_field(&a, "relay", "oldest_dead_letter_age_s"), 0);
    /* relay works off its events, parking the first: a dead letter */
    tally_run_options ro = {.max_events = 3, .until_idle = true, .wait_ms = 100};
    ck_assert_int_eq(tally_subscriber_run(relay, &ro, park_first, NULL), TALLY_ok);
    wait_log(&a, "dead letter: subscriber relay parked seq 1 after 1 attempts: cannot handle it");
    wait_readyz(&a, "subscriber relay: 1 dead letters, above the threshold 0", true);
    wait_log(&a, "alert started: dead_letters: subscriber relay");
    wait_log(&a, "alert cleared: pending of subscriber relay");
    wait_log(&a, "alert cleared: oldest_unacked_s of subscriber relay");
    wait_log(&a, "alert cleared: idle_subscriber_s of subscriber relay");
    ck_assert_int_eq(tally_health_exit(&a), 1);
    /* tally subscribers: the dead letter ages; relay fetched at least a
     * second after tallyd started (its alerts needed that), audit never */
    wait_field_at_least(&a, "relay", "oldest_dead_letter_age_s", 1);
    ck_assert_int_eq(subscriber_field(&a, "audit", "oldest_dead_letter_age_s"), 0);
    ck_assert_int_lt(subscriber_field(&a, "relay", "last_fetch_age_s"),
                     subscriber_field(&a, "audit", "last_fetch_age_s"));
    /* audit too works off its events; then the dead letter is discarded */
    ck_assert_int_eq(tally_subscriber_run(audit, &ro, park_first, NULL), TALLY_ok);
    ck_assert_int_eq(tally_dlq_discard(a.f.c, "relay", 1), TALLY_ok);
    ck_assert_int_eq(tally_dlq_discard(a.f.c, "audit", 1), TALLY_ok);
    wait_readyz(&a, "\"ok\":false", false);
    wait_log(&a, "alert cleared: dead_letters of subscriber relay");
    ck_assert_int_eq(tally_health_exit(&a), 0);
    tally_subscriber_close(relay);
    tally_subscriber_close(audit);
    alert_down(&a);
}
END_TEST

START_TEST(map_threshold_crosses_and_clears)
{
    alert_server a;
    /* a 1 MiB map that may not grow: a fresh store uses a few % of it */
    static const char *const low[] = {"--map-size-mb", "1", "--map-max-mb", "1",
                                      "--alert-map-used-pct", "0", NULL};
    alert_up(&a, low);
    test_client_open_accounts(a.f.c, 1, 3);
    wait_readyz(&a, "% of the map's limit in use, above the threshold 0", true);
    wait_log(&a, "alert started: map_used_pct:");
    ck_assert_int_eq(tally_health_exit(&a), 1);
    tally_client_close(a.f.c);
    ck_assert_int_eq(tallyd_stop(&a.f.srv), 0);
    /* the same store under the default threshold (90 %): healthy */
    a.f.srv.extra_args[6] = NULL;
    a.f.srv.extra_args[7] = NULL;
    tallyd_restart(&a.f.srv);
    a.f.c = test_client_open(a.f.srv.url);
    wait_readyz(&a, "\"check\":\"map_used_pct\",\"class\":\"alert\",\"subscriber\":null,\"ok\":true", true);
    ck_assert_int_eq(tally_health_exit(&a), 0);
    alert_down(&a);
}
END_TEST

/* The alert and readiness thresholds' options (tests/net/check_readiness). */
START_TEST(bad_threshold_options_are_usage_errors)
{
    static const char *const bad[][3] = {
        {"--alert-pending", "x", "--alert-pending"},
        {"--alert-map-used-pct", "101", "--alert-map-used-pct"},
        {"--alert-map-used-pct", "relay=5", "--alert-map-used-pct"},
        {"--alert-dead-letters", "no spaces=1", "not a subscriber name"},
        {"--alert-idle-subscriber-s", "relay=soon", "NAME=N or NAME=none"},
        {"--writer-stall-ms", "99", "--writer-stall-ms"},
        {"--ready-disk-free-mb", "x", "--ready-disk-free-mb"},
        {"--ready-map-room-kib", "relay=5", "one value for the store"},
        {"--ready-storage-full-s", "86401", "--ready-storage-full-s"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        const char *argv[] = {tallyd_program("tallyd"), bad[i][0], bad[i][1], NULL};
        char *err = NULL;
        ck_assert_int_eq(test_run(argv, NULL, NULL, &err), 2);
        ck_assert_msg(strstr(err, bad[i][2]), "%s %s: %s", bad[i][0], bad[i][1], err);
        free(err);
    }
}
END_TEST

int main(void)
{
    Suite *s = suite_create("alerts");
    TCase *tc = tcase_create("alerts");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, each_subscriber_threshold_crosses_and_clears);
    tcase_add_test(tc, map_threshold_crosses_and_clears);
    tcase_add_test(tc, bad_threshold_options_are_usage_errors);
    suite_add_tcase(s, tc);
    return test_run_suite(s);
}
