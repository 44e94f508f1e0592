/*
 * check_config.c — tallyd's config file and option table
 * (net/server/tallyd_options.c, common/options.c) and its readiness for systemd,
 * against a real tallyd:
 *   - a file's keys are honoured: tallyd started with only --config answers
 *     on the file's two listen URLs and keeps its store in the file's data;
 *   - a flag overrides a key (a repeatable one's whole list);
 *   - an unknown key, a bad value, a key given twice: exit 2 with FILE:LINE;
 *   - --print-config round-trips: printed, read back, printed again: the same;
 *   - dist/tallyd.conf is what --example-config prints, and tallyd takes it;
 *   - NOTIFY_SOCKET: READY=1 arrives only when the request/reply listener
 *     and the HTTP face answer at once (and the --ready-file is there),
 *     STOPPING=1 on SIGTERM; SIGHUP (the unit's ExecReload) leaves it
 *     serving;
 *   - port 0 (tcp://, tls+tcp://, http://): --ready-file and the log's
 *     endpoints line name the ports the kernel chose, and tallyd answers
 *     there; the file is gone after a clean stop.
 */
#include "config.h"

#include "clients/libtally/tally.h"
#include "common/clock.h"
#include "tests/support/http_client.h"
#include "tests/support/run.h"
#include "tests/support/suite.h"
#include "tests/support/tallyd_harness.h"
#include "tests/support/tallyd_tls.h"
#include "tests/support/test_support.h"
#include "tests/support/wait.h"

#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#define ANSWER_WAIT_MS 60000

typedef struct fixture {
    char dir[256];
    char path[320]; /* dir/tallyd.conf */
} fixture;

static void fixture_up(fixture *f)
{
    const char *tmp = getenv("TMPDIR");
    snprintf(f->dir, sizeof(f->dir), "%s/tally-config-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    ck_assert_ptr_nonnull(mkdtemp(f->dir));
    snprintf(f->path, sizeof(f->path), "%s/tallyd.conf", f->dir);
}

static void fixture_down(fixture *f)
{
    char cmd[300];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", f->dir);
    ck_assert_int_eq(system(cmd), 0);
}

static void write_text(const char *path, const char *text)
{
    FILE *out = fopen(path, "w");
    ck_assert_msg(out != NULL, "%s: %s", path, strerror(errno));
    ck_assert_int_eq(fputs(text, out) >= 0, 1);
    ck_assert_int_eq(fclose(out), 0);
}

static char *read_text(const char *path)
{
    int fd = open(path, O_RDONLY);
    ck_assert_msg(fd >= 0, "%s: %s", path, strerror(errno));
    return test_fd_read_all(fd);
}

/* tallyd with args (NULL-terminated, at most 12) to its end: its exit code. */
static int tallyd_run(const char *const *args, char **out, char **err)
{
    const char *argv[16] = {tallyd_program("tallyd")};
    for (int i = 0; args[i]; i++) {
        ck_assert_int_lt(i, 12);
        argv[i + 1] = args[i];
    }
    return test_run(argv, NULL, out, err);
}

/* True once url answers `stats` within wait_ms. */
/* Whether tallyd answers stats on url within wait_ms (ca: the CA of a
 * tls+tcp:// url's certificate, else NULL). */
static bool answers_within_tls(const char *url, const char *ca, int64_t wait_ms)
{
    tally_client_options o = {.url = url, .timeout_ms = 1000, .retries_set = true, .tls_ca = ca};
    tally_client *c = NULL;
    ck_assert_int_eq(tally_client_open(&o, &c), TALLY_ok);
    tally_stats st;
    int rc;
    (void)TEST_WAITED_UNTIL((rc = tally_stats_get(c, &st)) == TALLY_ok, wait_ms);
    tally_client_close(c);
    return rc == TALLY_ok;
}

static bool answers_within(const char *url, int64_t wait_ms)
{
    return answers_within_tls(url, NULL, wait_ms);
}

/* Start tallyd with args and env (NULL-terminated), stderr into dir/log. */
static pid_t tallyd_spawn(const fixture *f, const char *const *args, const char *const *env)
{
    const char *argv[24] = {tallyd_program("tallyd")};
    for (int i = 0; args[i]; i++) {
        ck_assert_int_lt(i, 20);
        argv[i + 1] = args[i];
    }
    char log[320];
    snprintf(log, sizeof(log), "%s/tallyd.log", f->dir);
    int fd = open(log, O_WRONLY | O_CREAT | O_APPEND, 0600);
    ck_assert_int_ge(fd, 0);
    pid_t pid = test_spawn(argv, env, -1, fd);
    close(fd);
    return pid;
}

static int tallyd_term(pid_t pid)
{
    ck_assert_int_eq(kill(pid, SIGTERM), 0);
    int status;
    ck_assert_msg(test_wait_ms(pid, ANSWER_WAIT_MS, &status), "tallyd did not stop");
    return test_exit_code(status);
}

/* The URL of role's line in a ready file's text (NULL: none), into out;
 * its port is non-zero. */
static void ready_url(const char *text, const char *role, char *out, size_t size)
{
    char head[32];
    snprintf(head, sizeof(head), "%s ", role);
    const char *at = strncmp(text, head, strlen(head)) == 0 ? text : NULL;
    if (at == NULL) {
        snprintf(head, sizeof(head), "\n%s ", role);
        at = strstr(text, head);
        at = at ? at + 1 : NULL;
    }
    ck_assert_msg(at != NULL, "no %s line in the ready file:\n%s", role, text);
    at += strlen(role) + 1;
    size_t len = strcspn(at, "\n");
    ck_assert_uint_lt(len, size);
    memcpy(out, at, len);
    out[len] = '\0';
    const char *colon = strrchr(out, ':');
    ck_assert_msg(colon && atoi(colon + 1) > 0 && atoi(colon + 1) < 65536,
                  "%s line without a bound port: %s", role, out);
}

/* Wait for path (tallyd renames it into place whole) while pid runs. */
static char *ready_wait(const char *path, pid_t pid)
{
    for (int64_t until = test_deadline_ms(ANSWER_WAIT_MS); clock_mono_ms() < until;) {
        if (access(path, F_OK) == 0)
            return read_text(path);
        int status;
        ck_assert_msg(!test_wait_ms(pid, 0, &status), "tallyd exited (%d) before its ready file",
                      test_exit_code(status));
        test_pause_ms(TEST_WAIT_POLL_MS);
    }
    ck_abort_msg("no ready file %s", path);
    return NULL;
}

/* Every TCP endpoint on port 0: the kernel chooses, the ready file and the
 * log's endpoints line say which, tallyd answers there. Then tls+tcp://
 * the same, with the certificates of tests/support/make_test_certs.sh. */
START_TEST(port_0_is_bound_and_said)
{
    fixture f;
    fixture_up(&f);
    char data[300], ready[300], listen[300], publish[300], http[300], log[320];
    snprintf(data, sizeof(data), "%s/data", f.dir);
    snprintf(ready, sizeof(ready), "%s/ready", f.dir);
    snprintf(log, sizeof(log), "%s/tallyd.log", f.dir);
    const char *args[] = {"--config", "none", "--data", data, "--listen", "tcp://127.0.0.1:0",
                          "--publish", "tcp://127.0.0.1:0", "--http", "http://127.0.0.1:0",
                          "--ready-file", ready, NULL};
    pid_t pid = tallyd_spawn(&f, args, NULL);
    char *said = ready_wait(ready, pid);
    ready_url(said, "listen", listen, sizeof(listen));
    ready_url(said, "publish", publish, sizeof(publish));
    ready_url(said, "http", http, sizeof(http));
    ck_assert_msg(strncmp(listen, "tcp://127.0.0.1:", 16) == 0 &&
                      strncmp(publish, "tcp://127.0.0.1:", 16) == 0 &&
                      strncmp(http, "http://127.0.0.1:", 17) == 0 &&
                      strcmp(listen, publish) != 0,
                  "the ready file:\n%s", said);
    ck_assert_msg(answers_within(listen, ANSWER_WAIT_MS), "no answer on %s", listen);
    int status = 0;
    free(test_http_get(atoi(strrchr(http, ':') + 1), "/healthz", &status));
    ck_assert_int_eq(status, 200);
    char line[1200];
    snprintf(line, sizeof(line), "endpoints: listen %s, publish %s, http %s", listen, publish,
             http);
    char *text = read_text(log);
    ck_assert_msg(strstr(text, line), "no line \"%s\" in the log:\n%s", line, text);
    free(text);
    free(said);
    ck_assert_int_eq(tallyd_term(pid), 0);
    ck_assert_msg(access(ready, F_OK) != 0, "the ready file stayed after a clean stop");

    char certs[300], cert[400], key[400], ca[400];
    snprintf(certs, sizeof(certs), "%s/tls", f.dir);
    tallyd_tls_make_certs(certs);
    snprintf(cert, sizeof(cert), "%s/server.pem", certs);
    snprintf(key, sizeof(key), "%s/server.key", certs);
    snprintf(ca, sizeof(ca), "%s/ca.pem", certs);
    const char *tls[] = {"--config", "none", "--data", data, "--listen", "tls+tcp://127.0.0.1:0",
                         "--publish", "none", "--http", "none", "--ready-file", ready,
                         "--tls-cert", cert, "--tls-key", key, NULL};
    pid = tallyd_spawn(&f, tls, NULL);
    said = ready_wait(ready, pid);
    ready_url(said, "listen", listen, sizeof(listen));
    ck_assert_msg(strncmp(listen, "tls+tcp://127.0.0.1:", 20) == 0 && !strstr(said, "publish") &&
                      !strstr(said, "http"),
                  "the ready file:\n%s", said);
    ck_assert_msg(answers_within_tls(listen, ca, ANSWER_WAIT_MS), "no answer on %s", listen);
    free(said);
    ck_assert_int_eq(tallyd_term(pid), 0);
    fixture_down(&f);
}
END_TEST

START_TEST(config_file_keys_are_honoured)
{
    fixture f;
    fixture_up(&f);
    char text[2048], url_a[300], url_b[300], data[300];
    snprintf(url_a, sizeof(url_a), "ipc://%s/a.sock", f.dir);
    snprintf(url_b, sizeof(url_b), "ipc://%s/b.sock", f.dir);
    snprintf(data, sizeof(data), "%s/store", f.dir);
    snprintf(text, sizeof(text),
             "# a config file with comments, blank lines and several keys\n"
             "\n"
             "data = \"%s\"\n"
             "  listen=%s   \n"
             "listen = '%s' # a trailing comment; quotes are not part of a value\n"
             "publish = ipc://%s/pub.sock\n"
             "http = none\n"
             "contexts = \"8\"\n"
             "log-level = debug\n",
             data, url_a, url_b, f.dir);
    write_text(f.path, text);
    const char *args[] = {"--config", f.path, NULL};
    pid_t pid = tallyd_spawn(&f, args, NULL);
    ck_assert_msg(answers_within(url_a, ANSWER_WAIT_MS), "no answer on the file's first listen");
    ck_assert_msg(answers_within(url_b, ANSWER_WAIT_MS), "no answer on the file's second listen");
    char lock[400];
    snprintf(lock, sizeof(lock), "%s/data.mdb", data);
    struct stat st;
    ck_assert_msg(stat(lock, &st) == 0, "no store in the file's data directory %s", data);
    snprintf(lock, sizeof(lock), "%s/pub.sock", f.dir);
    ck_assert_msg(stat(lock, &st) == 0, "the file's publish URL is not bound");
    ck_assert_int_eq(tallyd_term(pid), 0);
    const char *print[] = {"--config", f.path, "--print-config", NULL};
    char *out = NULL;
    ck_assert_int_eq(tallyd_run(print, &out, NULL), 0);
    ck_assert_msg(strstr(out, "\ncontexts = 8\n") && strstr(out, "\nlog-level = debug\n") &&
                      strstr(out, "\nhttp = none\n"),
                  "%s", out);
    free(out);
    fixture_down(&f);
}
END_TEST

START_TEST(a_flag_overrides_a_key)
{
    fixture f;
    fixture_up(&f);
    char text[1024], url_file[300], url_flag[300];
    snprintf(url_file, sizeof(url_file), "ipc://%s/file.sock", f.dir);
    snprintf(url_flag, sizeof(url_flag), "ipc://%s/flag.sock", f.dir);
    snprintf(text, sizeof(text), "contexts = 8\nlisten = %s\nlisten = ipc://%s/file2.sock\n",
             url_file, f.dir);
    write_text(f.path, text);
    const char *args[] = {"--config", f.path, "--contexts", "9", "--listen", url_flag,
                          "--print-config", NULL};
    char *out = NULL;
    ck_assert_int_eq(tallyd_run(args, &out, NULL), 0);
    ck_assert_msg(strstr(out, "\ncontexts = 9\n") && !strstr(out, "contexts = 8"), "%s", out);
    char want[400];
    snprintf(want, sizeof(want), "\nlisten = %s\npublish = ", url_flag);
    ck_assert_msg(strstr(out, want), "the flag's listen replaces the file's list: %s", out);
    free(out);

    /* A real tallyd: it answers on the flag's URL, never binds the file's. */
    char data[300];
    snprintf(data, sizeof(data), "%s/data", f.dir);
    const char *serve[] = {"--config", f.path, "--listen", url_flag, "--data", data,
                           "--publish", "none", "--http", "none", NULL};
    pid_t pid = tallyd_spawn(&f, serve, NULL);
    ck_assert(answers_within(url_flag, ANSWER_WAIT_MS));
    char sock[300];
    snprintf(sock, sizeof(sock), "%s/file.sock", f.dir);
    ck_assert_msg(access(sock, F_OK) != 0, "the file's listen was bound too");
    ck_assert_int_eq(tallyd_term(pid), 0);
    fixture_down(&f);
}
END_TEST

/* The file's text, and what stderr must hold ("%s" is the file's path). */
static void assert_refused(const char *text, const char *want_format)
{
    fixture f;
    fixture_up(&f);
    write_text(f.path, text);
    char want[600];
    snprintf(want, sizeof(want), want_format, f.path);
    const char *args[] = {"--config", f.path, "--print-config", NULL};
    char *err = NULL;
    ck_assert_int_eq(tallyd_run(args, NULL, &err), 2);
    ck_assert_msg(strstr(err, want), "want '%s' in: %s", want, err);
    free(err);
    fixture_down(&f);
}

START_TEST(an_unknown_key_is_refused_with_its_line)
{
    assert_refused("data = /tmp/x\n\n# comment\nlisten-url = tcp://127.0.0.1:1\n",
                   "%s:4: unknown key 'listen-url'");
    assert_refused("help = yes\n", "%s:1: unknown key 'help'");
    assert_refused("contexts 8\n", "%s:1: expected key = value");
}
END_TEST

START_TEST(a_bad_value_is_refused_with_its_line)
{
    assert_refused("contexts = 8\nmap-size-mb = lots\n", "%s:2: map-size-mb: not a number in range");
    assert_refused("# x\nlog-level = loud\n", "%s:2: log-level: expected error, warn");
    assert_refused("backup-dir = relative/dir\n", "%s:1: backup-dir: an absolute path");
    assert_refused("alert-pending = no spaces=1\n", "%s:1: alert-pending: not a subscriber name");
    assert_refused("data = /a\ndata = /b\n", "%s:2: data: given twice (first on line 1)");
    /* A trailing comment is cut: the value is "8", the rest is no value. */
    assert_refused("contexts = 8 9 # x\n", "%s:1: contexts: not a number in range");
    /* listeners that could not be opened: refused here, and so by
     * --print-config too, not at the start */
    assert_refused("listen = foo://x:1\n", "%s:1: listen: foo://x:1: not a URL tallyd serves");
    assert_refused("listen = tcp://127.0.0.1:99999\n", "%s:1: listen: tcp://127.0.0.1:99999: HOST:PORT");
    assert_refused("listen = tcp://localhost\n", "%s:1: listen: tcp://localhost: HOST:PORT");
    assert_refused("listen = tcp://999.1.1.1:7450\n", "%s:1: listen: tcp://999.1.1.1:7450: 999.1.1.1 is no IPv4");
    assert_refused("publish = ipc://\n", "%s:1: publish: ipc://: no path or name");
    /* quotes: one around the value, or refused */
    assert_refused("data = \"/tmp/x\n", "%s:1: data: a quoted value is one quote");
    assert_refused("data = \"/tmp/a#b\"\n", "%s:1: data: a quoted value is one quote");
    assert_refused("data = \"/tmp/x'\n", "%s:1: data: a quoted value is one quote");
}
END_TEST

START_TEST(a_missing_config_file_is_refused)
{
    const char *args[] = {"--config", "/nonexistent/tallyd.conf", "--print-config", NULL};
    char *err = NULL;
    ck_assert_int_eq(tallyd_run(args, NULL, &err), 2);
    ck_assert_msg(strstr(err, "/nonexistent/tallyd.conf: No such file"), "%s", err);
    free(err);
}
END_TEST

START_TEST(print_config_round_trips)
{
    fixture f;
    fixture_up(&f);
    write_text(f.path, "listen = ipc:///tmp/one.sock\nlisten = tcp://127.0.0.1:9999\n"
                       "alert-pending = 100\nalert-pending = relay=none\nhttp = none\n"
                       "backup-dir = /srv/backups\n");
    const char *first_args[] = {"--config", f.path, "--contexts", "12", "--print-config", NULL};
    char *first = NULL, *second = NULL;
    ck_assert_int_eq(tallyd_run(first_args, &first, NULL), 0);
    ck_assert_msg(strstr(first, "\nalert-pending = 100\nalert-pending = relay=none\n"), "%s", first);
    ck_assert_msg(strstr(first, "\n# map-max-mb is not set\n"), "%s", first);
    char again[330];
    snprintf(again, sizeof(again), "%s/again.conf", f.dir);
    write_text(again, first);
    const char *second_args[] = {"--config", again, "--print-config", NULL};
    ck_assert_int_eq(tallyd_run(second_args, &second, NULL), 0);
    ck_assert_str_eq(second, first);
    free(first);
    free(second);
    fixture_down(&f);
}
END_TEST

START_TEST(the_shipped_example_config_is_generated_and_accepted)
{
    const char *srcdir = getenv("TALLY_SRCDIR");
    ck_assert_ptr_nonnull(srcdir);
    char shipped_path[512];
    snprintf(shipped_path, sizeof(shipped_path), "%s/dist/tallyd.conf", srcdir);
    char *shipped = read_text(shipped_path);
    const char *example_args[] = {"--example-config", NULL};
    char *generated = NULL;
    ck_assert_int_eq(tallyd_run(example_args, &generated, NULL), 0);
    ck_assert_msg(strcmp(shipped, generated) == 0,
                  "dist/tallyd.conf differs from tallyd --example-config: run make update-config");
    /* Every key commented out: the file gives the defaults. */
    const char *with_file[] = {"--config", shipped_path, "--print-config", NULL};
    const char *without[] = {"--config", "none", "--print-config", NULL};
    char *a = NULL, *b = NULL;
    ck_assert_int_eq(tallyd_run(with_file, &a, NULL), 0);
    ck_assert_int_eq(tallyd_run(without, &b, NULL), 0);
    ck_assert_str_eq(a, b);
    free(a);
    free(b);
    free(shipped);
    free(generated);
}
END_TEST

#ifdef HAVE_SYSTEMD
/* A datagram from the notify socket within wait_ms, NUL-terminated. */
static bool notify_recv(int fd, char *buf, size_t size, int wait_ms)
{
    int64_t deadline = test_deadline_ms(wait_ms);
    while (clock_mono_ms() < deadline) {
        ssize_t n = recv(fd, buf, size - 1, MSG_DONTWAIT);
        if (n >= 0) {
            buf[n] = '\0';
            return true;
        }
        ck_assert_msg(errno == EAGAIN || errno == EWOULDBLOCK, "recv: %s", strerror(errno));
        test_pause_ms(2);
    }
    return false;
}

START_TEST(ready_only_once_the_listeners_answer)
{
    fixture f;
    fixture_up(&f);
    struct sockaddr_un sun = {.sun_family = AF_UNIX};
    int n = snprintf(sun.sun_path, sizeof(sun.sun_path), "%.90s/notify.sock", f.dir);
    ck_assert_int_lt(n, (int)sizeof(sun.sun_path));
    int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(bind(fd, (struct sockaddr *)&sun, sizeof(sun)), 0);
    char env_socket[400], url[300], data[300], ready[300];
    snprintf(env_socket, sizeof(env_socket), "NOTIFY_SOCKET=%s", sun.sun_path);
    snprintf(url, sizeof(url), "ipc://%s/req.sock", f.dir);
    snprintf(data, sizeof(data), "%s/data", f.dir);
    snprintf(ready, sizeof(ready), "%s/ready", f.dir);
    const char *args[] = {"--config", "none", "--data", data, "--listen", url, "--publish",
                          "none", "--http", "http://127.0.0.1:0", "--ready-file", ready, NULL};
    const char *env[] = {env_socket, NULL};
    /* tallyd inherits an ignored SIGHUP (make under nohup): it must ignore
     * it by itself. */
    signal(SIGHUP, SIG_DFL);
    pid_t pid = tallyd_spawn(&f, args, env);
    char msg[512];
    ck_assert_msg(notify_recv(fd, msg, sizeof(msg), ANSWER_WAIT_MS), "no READY=1");
    ck_assert_msg(strstr(msg, "READY=1"), "first notification: %s", msg);
    /* At once: the listener is bound (a connect succeeds without waiting)
     * and the HTTP face answers. */
    struct sockaddr_un listener = {.sun_family = AF_UNIX};
    snprintf(listener.sun_path, sizeof(listener.sun_path), "%.90s/req.sock", f.dir);
    int conn = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    ck_assert_int_ge(conn, 0);
    ck_assert_msg(connect(conn, (struct sockaddr *)&listener, sizeof(listener)) == 0,
                  "READY=1 came before the request/reply listener was up: %s", strerror(errno));
    close(conn);
    char *said = read_text(ready); /* written before READY=1 */
    const char *at = strstr(said, "\nhttp http://127.0.0.1:");
    int port = at ? atoi(at + strlen("\nhttp http://127.0.0.1:")) : 0;
    ck_assert_msg(port > 0, "the ready file at READY=1:\n%s", said);
    free(said);
    int status = 0;
    char *body = test_http_get(port, "/healthz", &status);
    ck_assert_msg(status == 200, "READY=1 came before the HTTP face answered (%d)", status);
    free(body);
    ck_assert(answers_within(url, ANSWER_WAIT_MS));
    /* systemctl reload (ExecReload: SIGHUP) leaves tallyd serving, and
     * says RELOADING=1, then READY=1 once the reload is done. */
    ck_assert_int_eq(kill(pid, SIGHUP), 0);
    ck_assert_msg(notify_recv(fd, msg, sizeof(msg), ANSWER_WAIT_MS), "no RELOADING=1");
    ck_assert_msg(strstr(msg, "RELOADING=1"), "at SIGHUP: %s", msg);
    ck_assert_msg(notify_recv(fd, msg, sizeof(msg), ANSWER_WAIT_MS), "no READY=1 after reload");
    ck_assert_msg(strstr(msg, "READY=1"), "after the reload: %s", msg);
    ck_assert_msg(answers_within(url, ANSWER_WAIT_MS), "SIGHUP stopped tallyd");
    ck_assert_int_eq(kill(pid, SIGTERM), 0);
    ck_assert_msg(notify_recv(fd, msg, sizeof(msg), ANSWER_WAIT_MS), "no STOPPING=1");
    ck_assert_msg(strstr(msg, "STOPPING=1"), "at the stop: %s", msg);
    int wait_status;
    ck_assert(test_wait_ms(pid, ANSWER_WAIT_MS, &wait_status));
    ck_assert_int_eq(test_exit_code(wait_status), 0);
    close(fd);
    fixture_down(&f);
}
END_TEST
#endif

/* A port another program holds: both engines say "in use", never that
 * the address is invalid. */
START_TEST(a_busy_port_is_said_to_be_in_use)
{
    fixture f;
    fixture_up(&f);
    int holder = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof(a);
    ck_assert_int_eq(bind(holder, (struct sockaddr *)&a, sizeof(a)), 0);
    ck_assert_int_eq(listen(holder, 4), 0);
    ck_assert_int_eq(getsockname(holder, (struct sockaddr *)&a, &len), 0);
    char data[300], url[64];
    snprintf(data, sizeof(data), "%s/data", f.dir);
    snprintf(url, sizeof(url), "tcp://127.0.0.1:%u", (unsigned)ntohs(a.sin_port));
    static const char *const engines[] = {"epoll", "nng"};
    for (int i = 0; i < 2; i++) {
        const char *args[] = {"--config", "none", "--data", data, "--listen", url, "--publish",
                              "none", "--http", "none", "--tcp-engine", engines[i], NULL};
        char *out = NULL, *err = NULL;
        int status = tallyd_run(args, &out, &err);
        ck_assert_msg(status != 0 && strstr(err, "in use") && !strstr(err, "invalid"),
                      "--tcp-engine %s: exit %d: %s", engines[i], status, err);
        free(out);
        free(err);
    }
    close(holder);
    fixture_down(&f);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("config");
    TCase *tc = tcase_create("config");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, config_file_keys_are_honoured);
    tcase_add_test(tc, a_flag_overrides_a_key);
    tcase_add_test(tc, an_unknown_key_is_refused_with_its_line);
    tcase_add_test(tc, a_bad_value_is_refused_with_its_line);
    tcase_add_test(tc, a_missing_config_file_is_refused);
    tcase_add_test(tc, print_config_round_trips);
    tcase_add_test(tc, the_shipped_example_config_is_generated_and_accepted);
    tcase_add_test(tc, port_0_is_bound_and_said);
    tcase_add_test(tc, a_busy_port_is_said_to_be_in_use);
#ifdef HAVE_SYSTEMD
    tcase_add_test(tc, ready_only_once_the_listeners_answer);
#endif
    suite_add_tcase(s, tc);
    return test_run_suite(s);
}
