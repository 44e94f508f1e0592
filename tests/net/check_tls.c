/*
 * check_tls.c — TLS on every endpoint of a real tallyd (docs/SECURITY.md):
 * request/reply and publish on tls+tcp:// with client certificates
 * required, HTTPS with curl, and the refusals: at start (files missing,
 * unreadable, not PEM, a key others may read) and at the handshake (no
 * client certificate, one from another CA, an expired one, a plaintext
 * client). Certificates are made with the openssl CLI
 * (tests/support/make_test_certs.sh) in each test's temp dir.
 */
#include "common/clock.h"
#include "common/error.h"
#include "tests/support/client_support.h"
#include "tests/support/http_client.h"
#include "tests/support/run.h"
#include "tests/support/suite.h"
#include "tests/support/tallyd_harness.h"
#include "tests/support/tallyd_tls.h"
#include "tests/support/test_support.h"
#include "tests/support/wait.h"

#include <check.h>
#include <signal.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define TEST_TIMEOUT_S 120
#define REFUSED_TIMEOUT_MS 3000
/* A client that must get in: a TLS handshake needs CPU, which a loaded
 * machine (or tallyd under valgrind) gives slowly. */
#define ACCEPTED_TIMEOUT_MS 60000
#define LOG_WAIT_MS 30000

static void tls_up(tallyd_proc *p)
{
    memset(p, 0, sizeof(*p));
    p->tls = true;
    tallyd_start(p);
}

static void tls_down(tallyd_proc *p)
{
    ck_assert_int_eq(tallyd_stop(p), 0);
    tallyd_cleanup(p);
}

static void cert_path(const tallyd_proc *p, const char *name, char *out, size_t n)
{
    snprintf(out, n, "%s/%s", p->tls_dir, name);
}

/* A client of url with the CA and the certificate NAME.pem / NAME.key of
 * p's directory (NULL: no client certificate); no retry, attempts of
 * timeout_ms (REFUSED_TIMEOUT_MS for one tallyd refuses, ACCEPTED_TIMEOUT_MS
 * for one it takes). */
static tally_client *client_with(const tallyd_proc *p, const char *url, const char *name,
                                 uint32_t timeout_ms)
{
    char ca[400], cert[400], key[400];
    cert_path(p, "ca.pem", ca, sizeof(ca));
    snprintf(cert, sizeof(cert), "%s/%s.pem", p->tls_dir, name ? name : "");
    snprintf(key, sizeof(key), "%s/%s.key", p->tls_dir, name ? name : "");
    unsetenv("TALLY_TLS_CERT"); /* the harness's: this client gets exactly what it is given */
    unsetenv("TALLY_TLS_KEY");
    tally_client_options o = {.url = url, .consumer = "tls", .timeout_ms = timeout_ms,
                              .retries_set = true, .retries = 0, .tls_ca = ca,
                              .tls_cert = name ? cert : NULL, .tls_key = name ? key : NULL};
    tally_client *c = NULL;
    int rc = tally_client_open(&o, &c);
    ck_assert_msg(rc == TALLY_ok, "tally_client_open(%s): %s", url, tally_strerror(rc));
    return c;
}

static int open_account(tally_client *c, uint64_t id)
{
    tally_account_open_args a = {.id = id, .ledger = 1, .code = 1};
    tally_result r;
    return tally_account_open(c, NULL, &a, &r);
}

/* tallyd's log so far (free it). */
static char *log_text(const tallyd_proc *p)
{
    int fd = open(p->log_path, O_RDONLY | O_CLOEXEC);
    ck_assert_int_ge(fd, 0);
    return test_fd_read_all(fd);
}

/* Whether tallyd's log holds text, waiting up to LOG_WAIT_MS for it. */
static bool log_shows(const tallyd_proc *p, const char *text)
{
    for (int64_t until = test_deadline_ms(LOG_WAIT_MS);;) {
        char *log = log_text(p);
        bool found = strstr(log, text) != NULL;
        free(log);
        if (found || clock_mono_ms() >= until)
            return found;
        test_pause_ms(100);
    }
}

START_TEST(test_libtally_writes_and_reads_with_client_auth)
{
    tallyd_proc p;
    tls_up(&p);
    ck_assert_ptr_nonnull(strstr(p.url, "tls+tcp://"));
    tally_client *c = client_with(&p, p.url, "client", ACCEPTED_TIMEOUT_MS);
    ck_assert_int_eq(open_account(c, 7), TALLY_ok);
    tally_account a;
    ck_assert_int_eq(tally_account_get(c, 7, &a), TALLY_ok);
    ck_assert_uint_eq(a.ledger, 1);
    /* the name in the URL must be in the certificate: localhost is too */
    char url[sizeof(p.url)];
    snprintf(url, sizeof(url), "tls+tcp://localhost:%.10s", strrchr(p.url, ':') + 1);
    tally_client *by_name = client_with(&p, url, "client", ACCEPTED_TIMEOUT_MS);
    ck_assert_int_eq(tally_account_get(by_name, 7, &a), TALLY_ok);
    tally_client_close(by_name);
    tally_client_close(c);
    tls_down(&p);
}
END_TEST

/* Each refused client: unreachable, nothing stored, tallyd logs it and
 * keeps serving (its listener is not stopped by the refusals). */
START_TEST(test_handshake_refuses_bad_client_certificates)
{
    tallyd_proc p;
    tls_up(&p);
    const char *refused[] = {NULL, "other-client", "expired-client"};
    for (size_t i = 0; i < sizeof(refused) / sizeof(refused[0]); i++) {
        tally_client *c = client_with(&p, p.url, refused[i], REFUSED_TIMEOUT_MS);
        ck_assert_msg(open_account(c, 100 + i) == TALLY_unreachable, "%s was let in",
                      refused[i] ? refused[i] : "no certificate");
        tally_client_close(c);
    }
    /* a plaintext client on the TLS port */
    char plain[sizeof(p.url)];
    snprintf(plain, sizeof(plain), "tcp://%.300s", p.url + strlen("tls+tcp://"));
    tally_client_options o = {.url = plain, .timeout_ms = REFUSED_TIMEOUT_MS,
                              .retries_set = true, .retries = 0};
    tally_client *c;
    ck_assert_int_eq(tally_client_open(&o, &c), TALLY_ok);
    ck_assert_int_eq(open_account(c, 200), TALLY_unreachable);
    tally_client_close(c);
    ck_assert_msg(log_shows(&p, "TLS handshake(s) refused"), "tallyd did not log the refusals");
    tally_client *good = client_with(&p, p.url, "client", ACCEPTED_TIMEOUT_MS);
    tally_stats st;
    ck_assert_int_eq(tally_stats_get(good, &st), TALLY_ok);
    ck_assert_uint_eq(st.head_seq, 0); /* nothing stored */
    tally_account a;
    ck_assert_int_eq(tally_account_get(good, 100, &a), TALLY_not_found);
    tally_client_close(good);
    char *log = log_text(&p);
    ck_assert_ptr_null(strstr(log, "stopped accepting")); /* the watchdog probed, not restarted */
    free(log);
    tls_down(&p);
}
END_TEST

START_TEST(test_client_refuses_tls_without_a_ca)
{
    tallyd_proc p;
    tls_up(&p);
    unsetenv("TALLY_TLS_CA");
    tally_client_options o = {.url = p.url};
    tally_client *c = NULL;
    ck_assert_int_eq(tally_client_open(&o, &c), TALLY_invalid_argument);
    char why[512];
    ck_assert_int_eq(tally_tls_check(&o, NULL, why, sizeof(why)), TALLY_invalid_argument);
    ck_assert_ptr_nonnull(strstr(why, "needs the CA"));
    /* a server certificate from another CA: the client refuses the server */
    char other[400];
    cert_path(&p, "other-ca.pem", other, sizeof(other));
    tally_client_options wrong = {.url = p.url, .tls_ca = other, .timeout_ms = REFUSED_TIMEOUT_MS,
                                  .retries_set = true};
    ck_assert_int_eq(tally_client_open(&wrong, &c), TALLY_ok);
    ck_assert_int_eq(open_account(c, 1), TALLY_unreachable);
    tally_client_close(c);
    tls_down(&p);
}
END_TEST

START_TEST(test_publish_stream_over_tls)
{
    tallyd_proc p;
    tls_up(&p);
    ck_assert_ptr_nonnull(strstr(p.pub_url, "tls+tcp://"));
    tally_client *c = client_with(&p, p.url, "client", ACCEPTED_TIMEOUT_MS);
    tally_stream *s;
    ck_assert_int_eq(tally_stream_open(c, p.pub_url, 1, NULL, &s), TALLY_ok);
    tally_stream_counters n = {0};
    uint64_t id = 1;
    /* write until events arrive over PUB (its connection comes up in the
     * background), reading each in order */
    for (int64_t until = test_deadline_ms(60000);
         n.from_publish == 0 && clock_mono_ms() < until; id++) {
        ck_assert_int_eq(open_account(c, id), TALLY_ok);
        tally_event ev;
        ck_assert_int_eq(tally_stream_next(s, &ev, 10000), TALLY_ok);
        ck_assert_uint_eq(ev.seq, id);
        tally_events_release(&ev, 1);
        tally_stream_counters_get(s, &n);
    }
    ck_assert_msg(n.from_publish > 0, "no event came over the tls+tcp:// publisher");
    /* The closes are marked, so that a timeout report names the last mark
     * reached: runs of sessions 9 and 12 hung in tally_stream_close (NNG
     * 1.5.2's nng_close as a message arrived; libtally now closes pipes
     * first, see close_under_publish below). */
    mark_point();
    tally_stream_close(s);
    mark_point();
    /* without a CA the publish URL is refused too */
    unsetenv("TALLY_TLS_CA");
    tally_client_options o = {.url = "tcp://127.0.0.1:1"};
    tally_client *plain;
    ck_assert_int_eq(tally_client_open(&o, &plain), TALLY_ok);
    ck_assert_int_eq(tally_stream_open(plain, p.pub_url, 1, NULL, &s), TALLY_invalid_argument);
    tally_client_close(plain);
    mark_point();
    tally_client_close(c);
    mark_point();
    tls_down(&p);
}
END_TEST

/* ---- closing a stream while events arrive ---- */

#define CLOSE_CYCLES 120

/* NNG 1.5.2 could hang nng_close for good when a PUB message arrived as a
 * SUB socket closed (clients/transport/sp_pipes.h): the stream closes its pipes
 * first. Each cycle opens a stream, reads an event that came over PUB (so
 * the connection is up and busy), and closes it with events still coming;
 * before the fix one close in about a hundred hung, and the test timed
 * out. */
START_TEST(test_stream_closes_while_events_arrive)
{
    tallyd_proc p;
    tls_up(&p);
    test_client_writer w = {.client = client_with(&p, p.url, "client", ACCEPTED_TIMEOUT_MS),
                            .first_id = 1000000};
    tally_client *c = client_with(&p, p.url, "client", ACCEPTED_TIMEOUT_MS);
    test_client_writer_start(&w);
    uint64_t heard = 0;
    for (int cycle = 0; cycle < CLOSE_CYCLES; cycle++) {
        uint64_t got = test_client_stream_cycle(c, p.pub_url);
        ck_assert_msg(got > 0, "cycle %d: no event over PUB", cycle);
        heard += got;
    }
    ck_assert_uint_gt(test_client_writer_stop(&w), 0);
    ck_assert_uint_ge(heard, CLOSE_CYCLES);
    tally_client_close(w.client);
    tally_client_close(c);
    tls_down(&p);
}
END_TEST

/* cp from to (certificate files); fails the test when it cannot. */
static void copy_file(const char *from, const char *to)
{
    const char *argv[] = {"/bin/cp", from, to, NULL};
    ck_assert_int_eq(test_run(argv, NULL, NULL, NULL), 0);
}

/* SIGHUP: new certificates (another CA) for new connections; a file that
 * fails to load keeps the old ones. */
START_TEST(test_sighup_reloads_certificates)
{
    tallyd_proc p;
    tls_up(&p);
    char fresh[400], from[500], to[500], old_ca[400];
    snprintf(fresh, sizeof(fresh), "%s/fresh", p.dir);
    tallyd_tls_make_certs(fresh); /* a new CA, server and client certificates */
    snprintf(old_ca, sizeof(old_ca), "%s/old-ca.pem", p.dir);
    cert_path(&p, "ca.pem", from, sizeof(from));
    copy_file(from, old_ca);
    /* a broken certificate first: logged, the old ones stay */
    cert_path(&p, "server.pem", to, sizeof(to));
    copy_file(old_ca, to); /* a CA certificate, not the key's */
    kill(p.pid, SIGHUP);
    ck_assert_msg(log_shows(&p, "TLS files not reloaded"), "no reload error in the log");
    tally_client *c = client_with(&p, p.url, "client", ACCEPTED_TIMEOUT_MS);
    ck_assert_int_eq(open_account(c, 1), TALLY_ok);
    tally_client_close(c);
    static const char *const files[] = {"ca.pem", "server.pem", "server.key", "client.pem",
                                        "client.key"};
    for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++) {
        snprintf(from, sizeof(from), "%s/%s", fresh, files[i]);
        cert_path(&p, files[i], to, sizeof(to));
        copy_file(from, to);
    }
    kill(p.pid, SIGHUP);
    ck_assert_msg(log_shows(&p, "TLS certificates reloaded"), "no reload in the log");
    /* the new CA and client certificate */
    c = client_with(&p, p.url, "client", ACCEPTED_TIMEOUT_MS);
    ck_assert_int_eq(open_account(c, 2), TALLY_ok);
    tally_client_close(c);
    /* a client that trusts only the old CA no longer accepts tallyd */
    char cert[500], key[500];
    cert_path(&p, "client.pem", cert, sizeof(cert));
    cert_path(&p, "client.key", key, sizeof(key));
    tally_client_options o = {.url = p.url, .timeout_ms = REFUSED_TIMEOUT_MS, .retries_set = true,
                              .tls_ca = old_ca, .tls_cert = cert, .tls_key = key};
    ck_assert_int_eq(tally_client_open(&o, &c), TALLY_ok);
    ck_assert_int_eq(open_account(c, 3), TALLY_unreachable);
    tally_client_close(c);
    tls_down(&p);
}
END_TEST

/* curl with the given TLS arguments (a NULL-ended list) and, with a body,
 * the Idempotency-Key header key_header; its exit code,
 * the HTTP status in *status (0 when none came). */
static int curl_tls(const char *const *tls_args, const char *method, const char *url,
                    const char *body, const char *key_header, int *status)
{
    const char *argv[40] = {"/bin/sh", "-c", "exec curl \"$@\"", "curl", "-sS", "-o",
                            "/dev/null", "-w", "%{http_code}", "--max-time", "60", "-X", method};
    int n = 13;
    for (int i = 0; tls_args[i]; i++)
        argv[n++] = tls_args[i];
    if (body) {
        argv[n++] = "-H";
        argv[n++] = key_header;
        argv[n++] = "--data-binary";
        argv[n++] = body;
    }
    argv[n++] = url;
    argv[n] = NULL;
    char *out = NULL, *err = NULL;
    int code = test_run(argv, NULL, &out, &err);
    *status = out ? atoi(out) : 0;
    free(out);
    free(err);
    return code;
}

START_TEST(test_https_with_curl)
{
    tallyd_proc p;
    memset(&p, 0, sizeof(p));
    p.tls = true;
    char http[320];
    p.extra_args[0] = "--http";
    p.extra_args[1] = "https://127.0.0.1:0";
    tallyd_start(&p);
    snprintf(http, sizeof(http), "%s", p.http_url); /* the port tallyd's ready file says */
    ck_assert_int_gt(p.http_port, 0);
    char ca[400], cert[400], key[400], url[400];
    cert_path(&p, "ca.pem", ca, sizeof(ca));
    cert_path(&p, "client.pem", cert, sizeof(cert));
    cert_path(&p, "client.key", key, sizeof(key));
    const char *with_cert[] = {"--cacert", ca, "--cert", cert, "--key", key, NULL};
    const char *without_cert[] = {"--cacert", ca, NULL};
    const char *without_ca[] = {"--cert", cert, "--key", key, NULL};
    int status;
    snprintf(url, sizeof(url), "%s/healthz", http);
    ck_assert_int_eq(curl_tls(with_cert, "GET", url, NULL, NULL, &status), 0);
    ck_assert_int_eq(status, 200);
    snprintf(url, sizeof(url), "%s/v1/account_open", http);
    ck_assert_int_eq(curl_tls(with_cert, "POST", url, "{\"id\":5,\"ledger\":1,\"code\":10}",
                              "Idempotency-Key: https-5", &status), 0);
    ck_assert_int_eq(status, 200);
    /* curl cannot verify tallyd without the CA (60: peer certificate) */
    snprintf(url, sizeof(url), "%s/healthz", http);
    ck_assert_int_eq(curl_tls(without_ca, "GET", url, NULL, NULL, &status), 60);
    /* client certificates are required: none, nothing stored */
    snprintf(url, sizeof(url), "%s/v1/account_open", http);
    int code = curl_tls(without_cert, "POST", url, "{\"id\":6,\"ledger\":1,\"code\":10}",
                        "Idempotency-Key: https-6", &status);
    ck_assert_msg(code != 0 || status == 403, "no client certificate: curl %d, HTTP %d", code,
                  status);
    ck_assert_int_ne(status, 200);
    tally_client *c = client_with(&p, p.url, "client", ACCEPTED_TIMEOUT_MS);
    tally_account a;
    ck_assert_int_eq(tally_account_get(c, 5, &a), TALLY_ok);
    ck_assert_int_eq(tally_account_get(c, 6, &a), TALLY_not_found);
    tally_client_close(c);
    tls_down(&p);
}
END_TEST

/* --tls-client-auth optional (HTTPS only): no certificate is let in, one
 * from another CA is not. */
START_TEST(test_optional_client_auth_on_https)
{
    char dir[] = "/tmp/tally-tls-XXXXXX", certs[64], cert[128], key[128], ca[128];
    char other_cert[128], other_key[128], http[320], url[400];
    ck_assert_ptr_nonnull(mkdtemp(dir));
    snprintf(certs, sizeof(certs), "%s/tls", dir);
    tallyd_tls_make_certs(certs);
    snprintf(cert, sizeof(cert), "%s/server.pem", certs);
    snprintf(key, sizeof(key), "%s/server.key", certs);
    snprintf(ca, sizeof(ca), "%s/ca.pem", certs);
    snprintf(other_cert, sizeof(other_cert), "%s/other-client.pem", certs);
    snprintf(other_key, sizeof(other_key), "%s/other-client.key", certs);
    tallyd_proc p;
    memset(&p, 0, sizeof(p));
    const char *extra[] = {"--http", "https://127.0.0.1:0", "--tls-cert", cert, "--tls-key", key, "--tls-ca", ca,
                           "--tls-client-auth", "optional", NULL};
    memcpy(p.extra_args, extra, sizeof(extra));
    tallyd_start(&p);
    snprintf(http, sizeof(http), "%s", p.http_url); /* the port tallyd's ready file says */
    ck_assert_int_gt(p.http_port, 0);
    const char *without_cert[] = {"--cacert", ca, NULL};
    const char *other[] = {"--cacert", ca, "--cert", other_cert, "--key", other_key, NULL};
    int status;
    snprintf(url, sizeof(url), "%s/v1/account_open", http);
    ck_assert_int_eq(curl_tls(without_cert, "POST", url, "{\"id\":1,\"ledger\":1,\"code\":10}",
                              "Idempotency-Key: https-1", &status), 0);
    ck_assert_int_eq(status, 200);
    int code = curl_tls(other, "POST", url, "{\"id\":2,\"ledger\":1,\"code\":10}",
                        "Idempotency-Key: https-2", &status);
    ck_assert_msg(code != 0 || status == 403, "another CA's certificate: curl %d, HTTP %d", code,
                  status);
    ck_assert_int_ne(status, 200);
    tally_client *c = test_client_open(p.url);
    tally_account a;
    ck_assert_int_eq(tally_account_get(c, 1, &a), TALLY_ok);
    ck_assert_int_eq(tally_account_get(c, 2, &a), TALLY_not_found);
    tally_client_close(c);
    tls_down(&p);
    test_remove_dir(dir);
}
END_TEST

/* tallyd with args exits 2 at start, its stderr holding want. */
static void refused_at_start(const char *const *args, const char *want)
{
    const char *argv[24] = {tallyd_program("tallyd")};
    int n = 1;
    for (int i = 0; args[i]; i++)
        argv[n++] = args[i];
    argv[n] = NULL;
    char *out = NULL, *err = NULL;
    int code = test_run(argv, NULL, &out, &err);
    ck_assert_msg(code == 2 && err && strstr(err, want), "exit %d, stderr %s (wanted %s)", code,
                  err ? err : "", want);
    free(out);
    free(err);
}

START_TEST(test_tallyd_refuses_bad_tls_setups)
{
    char dir[] = "/tmp/tally-tls-XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(dir));
    char certs[300], data[300], cert[400], key[400], ca[400], listen[64];
    snprintf(certs, sizeof(certs), "%s/tls", dir);
    snprintf(data, sizeof(data), "%s/data", dir);
    tallyd_tls_make_certs(certs);
    snprintf(cert, sizeof(cert), "%s/server.pem", certs);
    snprintf(key, sizeof(key), "%s/server.key", certs);
    snprintf(ca, sizeof(ca), "%s/ca.pem", certs);
    snprintf(listen, sizeof(listen), "tls+tcp://127.0.0.1:0"); /* refused before it listens */
#define BASE "--data", data, "--listen", listen, "--publish", "none", "--http", "none"
    refused_at_start((const char *[]){BASE, NULL}, "needs --tls-cert FILE and --tls-key FILE");
    refused_at_start((const char *[]){BASE, "--tls-cert", key, "--tls-key", key, NULL},
                     "not a PEM certificate (mbedTLS:");
    refused_at_start((const char *[]){BASE, "--tls-cert", cert, "--tls-key", "/nonexistent.key",
                                      NULL}, "/nonexistent.key: No such file");
    refused_at_start((const char *[]){BASE, "--tls-cert", cert, "--tls-key", key,
                                      "--tls-client-auth", "required", NULL}, "needs --tls-ca");
    refused_at_start((const char *[]){BASE, "--tls-cert", cert, "--tls-key", key, "--tls-ca", key,
                                      NULL}, "not a PEM CA certificate");
    refused_at_start((const char *[]){BASE, "--tls-cert", cert, "--tls-key", key, "--tls-ca", ca,
                                      "--tls-client-auth", "optional", NULL}, "https:// only");
    char other_key[400];
    snprintf(other_key, sizeof(other_key), "%s/client.key", certs);
    refused_at_start((const char *[]){BASE, "--tls-cert", cert, "--tls-key", other_key, NULL},
                     "not the key of the certificate");
    ck_assert_int_eq(chmod(key, 0640), 0);
    refused_at_start((const char *[]){BASE, "--tls-cert", cert, "--tls-key", key, "--tls-ca", ca,
                                      NULL}, "group or others may read it");
    test_remove_dir(dir);
#undef BASE
}
END_TEST

/* The listener watchdog probes a tls+tcp:// listener through NNG's
 * statistics of that listener. NNG 1.5.2's nng_stat_find_listener finds
 * the first listener's statistics for any listener: the publish
 * listener's probes then read the request listener's counters, never see
 * their handshake fail, and the watchdog takes a listener that accepts
 * for stopped and listens again (common/nng_compat.h, entry 12). Both
 * listeners probed several times: none is opened again, and both serve. */
START_TEST(test_watchdog_probes_each_tls_listener_by_its_own_statistics)
{
    tallyd_proc p;
    memset(&p, 0, sizeof(p));
    p.tls = true;
    const char *extra[] = {"--http", "http://127.0.0.1:0", "--listener-probe-ms", "100", NULL};
    memcpy(p.extra_args, extra, sizeof(extra));
    tallyd_start(&p);
    ck_assert_ptr_nonnull(strstr(p.pub_url, "tls+tcp://"));
    long long probes = 0;
    /* three rounds: a listener is listened to again after two failed probes */
    TEST_WAIT_UNTIL((probes = test_metrics_sample(p.http_port, "tally_listener_probes_total")) >= 6,
                    60000, "6 listener probes (%lld so far)", probes);
    ck_assert_int_eq(test_metrics_sample(p.http_port, "tally_listener_restarts_total"), 0);
    tally_client *c = client_with(&p, p.url, "client", ACCEPTED_TIMEOUT_MS);
    ck_assert_int_eq(open_account(c, 9), TALLY_ok);
    tally_client_close(c);
    char *log = log_text(&p);
    ck_assert_msg(strstr(log, "stopped accepting") == NULL, "a listener was taken for stopped:\n%s",
                  log);
    free(log);
    tls_down(&p);
}
END_TEST

int main(void)
{
    const test_row rows[] = {
        {"request_reply", test_libtally_writes_and_reads_with_client_auth, TEST_TIMEOUT_S},
        {"handshake", test_handshake_refuses_bad_client_certificates, TEST_TIMEOUT_S},
        {"client_ca", test_client_refuses_tls_without_a_ca, TEST_TIMEOUT_S},
        {"publish", test_publish_stream_over_tls, TEST_TIMEOUT_S},
        {"close_under_publish", test_stream_closes_while_events_arrive, TEST_TIMEOUT_S},
        {"https", test_https_with_curl, TEST_TIMEOUT_S},
        {"optional", test_optional_client_auth_on_https, TEST_TIMEOUT_S},
        {"start", test_tallyd_refuses_bad_tls_setups, TEST_TIMEOUT_S},
        {"reload", test_sighup_reloads_certificates, TEST_TIMEOUT_S},
        {"watchdog", test_watchdog_probes_each_tls_listener_by_its_own_statistics, TEST_TIMEOUT_S},
    };
    return test_run_suite(test_suite_of_rows("tls", TEST_ROWS(rows)));
}
