/*
 * check_prometheus.c — a real Prometheus server (Debian's `prometheus`)
 * on loopback scrapes a real tallyd through the sample scrape config of
 * docs/OPERATIONS.md (docs/prometheus.yml, its target and interval
 * replaced), and its HTTP API returns what the test did:
 * tally_commits_total and a subscriber's pending count. $PROMETHEUS names
 * the server's binary (default /usr/bin/prometheus).
 */
#include "tests/support/client_support.h"
#include "tests/support/http_client.h"
#include "tests/support/run.h"
#include "tests/support/suite.h"
#include "tests/support/test_support.h"
#include "tests/support/wait.h"

#include <check.h>
#include <jansson.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define QUERY_WAIT_MS 180000 /* Prometheus's start and first scrapes, on a loaded machine */

/* The value of the single series a PromQL query returns, as text
 * ("" while there is none). */
static void query_value(int port, const char *query_escaped, char *out, size_t size)
{
    char path[512];
    snprintf(path, sizeof(path), "/api/v1/query?query=%s", query_escaped);
    int status = 0;
    char *body = test_http_get(port, path, &status);
    out[0] = '\0';
    json_error_t e;
    json_t *o = body && status == 200 ? json_loads(body, 0, &e) : NULL;
    json_t *result = json_object_get(json_object_get(o, "data"), "result");
    if (json_array_size(result) == 1) {
        const char *v = json_string_value(json_array_get(json_object_get(json_array_get(result, 0), "value"), 1));
        if (v)
            snprintf(out, size, "%s", v);
    }
    json_decref(o);
    free(body);
}

static void wait_value(int port, const char *query_escaped, const char *want)
{
    char got[64] = "";
    if (!TEST_WAITED_UNTIL((query_value(port, query_escaped, got, sizeof(got)), strcmp(got, want) == 0),
                           QUERY_WAIT_MS))
        ck_abort_msg("Prometheus says %s = \"%s\", the test did %s", query_escaped, got, want);
}

/* The port Prometheus listens on, given port 0: its log's `msg="Listening
 * on" address=127.0.0.1:PORT` line (waited for). */
static int listening_port(const char *log_path)
{
    static const char said[] = "msg=\"Listening on\" address=127.0.0.1:";
    for (int64_t until = test_deadline_ms(QUERY_WAIT_MS); clock_mono_ms() < until;) {
        FILE *f = fopen(log_path, "r");
        char line[1024];
        const char *at = NULL;
        while (f && at == NULL && fgets(line, sizeof(line), f))
            at = strstr(line, said);
        if (f)
            fclose(f);
        if (at)
            return atoi(at + sizeof(said) - 1);
        test_pause_ms(100);
    }
    ck_abort_msg("Prometheus did not say its port (no `Listening on` in %s)", log_path);
    return 0;
}

/* docs/prometheus.yml with the target and the scrape interval for a
 * test, written to dir/prometheus.yml. */
static void write_config(const char *dir, int tally_port, char *path, size_t size)
{
    const char *src = getenv("TALLY_SRCDIR");
    char sample[512];
    snprintf(sample, sizeof(sample), "%s/docs/prometheus.yml", src ? src : ".");
    FILE *in = fopen(sample, "r");
    ck_assert_msg(in != NULL, "cannot read %s", sample);
    static char text[16384];
    size_t n = fread(text, 1, sizeof(text) - 1, in);
    fclose(in);
    text[n] = '\0';
    snprintf(path, size, "%s/prometheus.yml", dir);
    FILE *out = fopen(path, "w");
    ck_assert_ptr_nonnull(out);
    char target[64];
    snprintf(target, sizeof(target), "127.0.0.1:%d", tally_port);
    for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
        if (strstr(line, "scrape_interval:"))
            fprintf(out, "%.*sscrape_interval: 1s\n", (int)strspn(line, " "), line);
        else if (strstr(line, "127.0.0.1:7452"))
            fprintf(out, "%.*s- %s\n", (int)strspn(line, " "), line, target);
        else
            fprintf(out, "%s\n", line);
    }
    fclose(out);
}

START_TEST(prometheus_scrapes_what_the_test_did)
{
    test_client_fixture f;
    memset(&f, 0, sizeof(f));
    f.srv.extra_args[0] = "--http";
    f.srv.extra_args[1] = "http://127.0.0.1:0";
    tallyd_start(&f.srv);
    int tally_port = f.srv.http_port; /* the kernel's choice, from tallyd's ready file */
    ck_assert_int_gt(tally_port, 0);
    f.c = test_client_open(f.srv.url);
    /* three accounts in one batch (one commit), a subscriber made from the
     * beginning (one commit): two commits, three events pending for it */
    test_client_open_accounts(f.c, 1, 3);
    tally_subscriber *s = NULL;
    ck_assert_int_eq(tally_subscriber_open(f.c, "relay", NULL, &s), TALLY_ok);
    tally_subscriber_close(s);

    char config[512], storage[512], config_arg[600], storage_arg[600];
    write_config(f.srv.dir, tally_port, config, sizeof(config));
    snprintf(storage, sizeof(storage), "%s/prometheus-data", f.srv.dir);
    snprintf(config_arg, sizeof(config_arg), "--config.file=%s", config);
    snprintf(storage_arg, sizeof(storage_arg), "--storage.tsdb.path=%s", storage);
    char log_path[600];
    snprintf(log_path, sizeof(log_path), "%s/prometheus.log", f.srv.dir);
    int log_fd = open(log_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    ck_assert_int_ge(log_fd, 0);
    const char *bin = getenv("PROMETHEUS"); /* Debian's package puts it here */
    const char *argv[] = {bin && *bin ? bin : "/usr/bin/prometheus", config_arg, storage_arg,
                          "--web.listen-address=127.0.0.1:0", NULL};
    pid_t prom = test_spawn(argv, NULL, log_fd, log_fd);
    close(log_fd);
    int prom_port = listening_port(log_path);

    wait_value(prom_port, "tally_commits_total", "2");
    wait_value(prom_port, "tally_subscriber_pending%7Bsubscriber%3D%22relay%22%7D", "3");
    wait_value(prom_port, "up%7Bjob%3D%22tally%22%7D", "1");

    kill(prom, SIGTERM);
    int st = 0;
    if (!test_wait_ms(prom, 30000, &st)) {
        kill(prom, SIGKILL);
        test_wait(prom);
    }
    tally_client_close(f.c);
    ck_assert_int_eq(tallyd_stop(&f.srv), 0);
    tallyd_cleanup(&f.srv);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("prometheus");
    TCase *tc = tcase_create("prometheus");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, prometheus_scrapes_what_the_test_did);
    suite_add_tcase(s, tc);
    return test_run_suite(s);
}
