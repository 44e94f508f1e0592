/*
 * tallyd_harness.c — real tallyd processes for integration tests.
 *
 * Every wait here has a bound and marks its place first (mark_point), so a
 * test that times out names the step it was stuck in. The readiness probe
 * speaks the SP/IPC framing over a plain Unix socket with poll() deadlines
 * instead of an NNG socket: NNG 1.5.2 can block in nng_dial (a 10 s
 * negotiation per try) and, rarely, deadlock in nng_close (nanomsg/nng
 * #1543, #1813), and a probe runs many times per start.
 */
#include "tests/support/tallyd_harness.h"
#include "tests/support/run.h"
#include "tests/support/tallyd_tls.h"
#include "tests/support/wait.h"
#include "common/clock.h"
#include "common/sha256.h"

#include <check.h>
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* The start and stop waits, scaled by test_slowdown() (tests/support/wait.h:
 * $TALLYD_WRAPPER, e.g. valgrind, runs tallyd several times slower). */
#define START_WAIT_MS 30000
#define STOP_WAIT_MS 10000
#define WRAPPER_WORDS_MAX 16
#define WRAPPER_BYTES_MAX 1024
#define PROBE_WAIT_MS 1000
#define NEGOTIATION_WAIT_MS 15000
#define READY_PAUSE_MS 10
#define LOG_TAIL_BYTES 4096
#define SP_PROTOCOL_REQ0 0x30

void test_remove_dir(const char *dir);

const char *tallyd_program(const char *name)
{
    static __thread char path[512];
    char env[64];
    size_t i;
    for (i = 0; name[i] && i < sizeof(env) - 1; i++)
        env[i] = name[i] == '-' ? '_' : (char)toupper((unsigned char)name[i]);
    env[i] = '\0';
    const char *v = getenv(env);
    if (v && *v)
        return v;
    snprintf(path, sizeof(path), "./%s", name);
    return path;
}

/* The last LOG_TAIL_BYTES of tallyd's log, to stderr. */
static void log_tail_print(const tallyd_proc *p)
{
    char buf[LOG_TAIL_BYTES + 1];
    int fd = open(p->log_path, O_RDONLY);
    if (fd < 0) {
        fprintf(stderr, "tallyd log %s: %s\n", p->log_path, strerror(errno));
        return;
    }
    off_t size = lseek(fd, 0, SEEK_END);
    off_t from = size > LOG_TAIL_BYTES ? size - LOG_TAIL_BYTES : 0;
    ssize_t n = pread(fd, buf, LOG_TAIL_BYTES, from);
    close(fd);
    buf[n > 0 ? n : 0] = '\0';
    fprintf(stderr, "---- tail of %s ----\n%s---- end of tallyd log ----\n", p->log_path, buf);
}

/* Wait for events on fd until deadline; false on timeout or error. */
static bool fd_ready(int fd, short events, int64_t deadline)
{
    for (;;) {
        int64_t left = deadline - clock_mono_ms();
        if (left <= 0)
            return false;
        struct pollfd pfd = {.fd = fd, .events = events};
        int n = poll(&pfd, 1, (int)left);
        if (n > 0)
            return (pfd.revents & events) != 0;
        if (n < 0 && errno != EINTR)
            return false;
    }
}

static bool send_all(int fd, const uint8_t *buf, size_t len, int64_t deadline)
{
    while (len > 0) {
        if (!fd_ready(fd, POLLOUT, deadline))
            return false;
        ssize_t n = send(fd, buf, len, MSG_NOSIGNAL);
        if (n < 0 && errno != EINTR && errno != EAGAIN)
            return false;
        if (n > 0) {
            buf += n;
            len -= (size_t)n;
        }
    }
    return true;
}

static bool recv_all(int fd, uint8_t *buf, size_t len, int64_t deadline)
{
    while (len > 0) {
        if (!fd_ready(fd, POLLIN, deadline))
            return false;
        ssize_t n = recv(fd, buf, len, 0);
        if (n == 0 || (n < 0 && errno != EINTR && errno != EAGAIN))
            return false;
        if (n > 0) {
            buf += n;
            len -= (size_t)n;
        }
    }
    return true;
}

bool tallyd_fd_send_all(int fd, const void *buf, size_t len, int64_t deadline_ms)
{
    return send_all(fd, buf, len, deadline_ms);
}

bool tallyd_fd_recv_all(int fd, void *buf, size_t len, int64_t deadline_ms)
{
    return recv_all(fd, buf, len, deadline_ms);
}

/* Connect the non-blocking socket fd to sa, waiting until deadline. */
static int connect_by(int fd, const struct sockaddr *sa, socklen_t len, int64_t deadline)
{
    if (fd < 0)
        return -1;
    if (connect(fd, sa, len) == 0 || (errno == EINPROGRESS && fd_ready(fd, POLLOUT, deadline))) {
        int err = 0;
        socklen_t err_len = sizeof(err);
        if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &err_len) == 0 && err == 0)
            return fd;
    }
    close(fd); /* no socket file or listener yet, or the backlog is full (EAGAIN) */
    return -1;
}

int tallyd_connect(const char *url, int64_t deadline_ms)
{
    if (strncmp(url, "tcp://", 6) == 0) {
        struct sockaddr_in sa = {.sin_family = AF_INET};
        char host[64];
        unsigned port;
        if (sscanf(url + 6, "%63[0-9.]:%u", host, &port) != 2 || port == 0 || port > 65535 ||
            inet_pton(AF_INET, host, &sa.sin_addr) != 1)
            return -1;
        sa.sin_port = htons((uint16_t)port);
        int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        return connect_by(fd, (struct sockaddr *)&sa, sizeof(sa), deadline_ms);
    }
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    if (strncmp(url, "ipc://", 6) != 0 || strlen(url + 6) >= sizeof(sa.sun_path))
        return -1;
    strcpy(sa.sun_path, url + 6);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    return connect_by(fd, (struct sockaddr *)&sa, sizeof(sa), deadline_ms);
}

/* The 13-byte head of an SP/IPC request frame: message type 1, the
 * 8-byte length (request id + body), the request id with its high bit set. */
void tallyd_sp_frame_head(uint8_t head[13], uint64_t body_bytes, uint32_t request_id)
{
    uint64_t len = 4 + body_bytes;
    head[0] = 1;
    for (int i = 0; i < 8; i++)
        head[1 + i] = (uint8_t)(len >> (56 - 8 * i));
    request_id |= UINT32_C(0x80000000);
    for (int i = 0; i < 4; i++)
        head[9 + i] = (uint8_t)(request_id >> (24 - 8 * i));
}

/* A connection to an ipc:// url past the SP header exchange, or -1.
 *
 * It waits for tallyd's header up to NEGOTIATION_WAIT_MS, whatever the
 * caller's deadline: NNG 1.5.2 stops accepting connections for good when a
 * peer hangs up during the header exchange (nanomsg/nng#1518, fixed in
 * 1.6.0), and its own negotiation timeout is 10 s, so giving up sooner
 * (a slow tallyd, e.g. under valgrind) would break the server under test.
 * Once tallyd's header has arrived our own was sent before, and hanging up
 * is harmless. */
int tallyd_sp_open(const char *url)
{
    static const uint8_t hello[8] = {0, 'S', 'P', 0, 0, SP_PROTOCOL_REQ0, 0, 0};
    int64_t deadline = clock_mono_ms() + NEGOTIATION_WAIT_MS;
    int fd = tallyd_connect(url, deadline);
    if (fd < 0)
        return -1;
    uint8_t peer[8];
    if (send_all(fd, hello, sizeof(hello), deadline) &&
        recv_all(fd, peer, sizeof(peer), deadline) && peer[1] == 'S' && peer[2] == 'P')
        return fd;
    close(fd);
    return -1;
}

bool tallyd_oversized_is_dropped(const char *url, uint64_t body_bytes)
{
    uint8_t head[13];
    tallyd_sp_frame_head(head, body_bytes, 2);
    int fd = tallyd_sp_open(url);
    if (fd < 0)
        return false;
    int64_t deadline = test_deadline_ms(10000);
    uint8_t chunk[4096] = {0};
    bool ok = send_all(fd, head, sizeof(head), deadline);
    /* Send the body until the server hangs up (it may before the end). */
    for (uint64_t sent = 0; ok && sent < body_bytes; sent += sizeof(chunk))
        if (!send_all(fd, chunk, sizeof(chunk), deadline))
            break;
    bool closed = false;
    while (ok && fd_ready(fd, POLLIN, deadline)) {
        ssize_t n = read(fd, chunk, sizeof(chunk));
        if (n <= 0) {
            closed = true; /* EOF or reset: dropped */
            break;
        }
        ok = false; /* bytes arrived: a reply */
    }
    close(fd);
    return ok && closed;
}

bool tallyd_send_and_hang_up(const char *url, const void *request, size_t len, int linger_ms)
{
    uint8_t head[13];
    tallyd_sp_frame_head(head, len, 3);
    int fd = tallyd_sp_open(url);
    if (fd < 0)
        return false;
    int64_t deadline = test_deadline_ms(PROBE_WAIT_MS);
    bool sent = send_all(fd, head, sizeof(head), deadline) &&
                send_all(fd, request, len, deadline);
    if (sent && linger_ms > 0)
        (void)fd_ready(fd, POLLIN, clock_mono_ms() + linger_ms); /* a reply may come: unread */
    close(fd);
    return sent;
}

/* A listening socket on a tls+tcp:// or tcp://127.0.0.1:PORT url (the
 * harness's TLS and TCP modes), or -1. */
static int listen_tcp_url(const char *url)
{
    unsigned port;
    struct sockaddr_in in = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    if ((sscanf(url, "tls+tcp://127.0.0.1:%u", &port) != 1 &&
         sscanf(url, "tcp://127.0.0.1:%u", &port) != 1) ||
        port == 0 || port > 65535)
        return -1;
    in.sin_port = htons((uint16_t)port);
    int one = 1, lfd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (lfd >= 0)
        setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (lfd >= 0 && (bind(lfd, (struct sockaddr *)&in, sizeof(in)) != 0 || listen(lfd, 16) != 0)) {
        close(lfd);
        return -1;
    }
    return lfd;
}

int tallyd_hang_up_handshakes(const char *url, int count, int wait_ms)
{
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    int lfd = -1;
    if ((strncmp(url, "tls+tcp://", 10) == 0 || strncmp(url, "tcp://", 6) == 0) &&
        (lfd = listen_tcp_url(url)) < 0)
        return -1;
    if (lfd < 0 && (strncmp(url, "ipc://", 6) != 0 || strlen(url + 6) >= sizeof(sa.sun_path)))
        return -1;
    if (lfd < 0) {
        strcpy(sa.sun_path, url + 6);
        unlink(sa.sun_path); /* a stopped tallyd leaves its socket file */
        lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    }
    if (lfd < 0 || (sa.sun_path[0] && (bind(lfd, (struct sockaddr *)&sa, sizeof(sa)) != 0 ||
                                        listen(lfd, 16) != 0))) {
        if (lfd >= 0)
            close(lfd);
        return -1;
    }
    int closed = 0;
    for (int64_t deadline = clock_mono_ms() + wait_ms; closed < count && fd_ready(lfd, POLLIN, deadline);) {
        int fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
        if (fd >= 0) {
            close(fd); /* before the SP header: the client's handshake fails */
            closed++;
        }
    }
    close(lfd);
    if (sa.sun_path[0])
        unlink(sa.sun_path);
    return closed;
}

/* The words of $TALLYD_WRAPPER (split at spaces) before argv[0]; returns
 * how many. buf holds the words. */
static int wrapper_words(const char **argv, char buf[WRAPPER_BYTES_MAX])
{
    const char *w = getenv("TALLYD_WRAPPER");
    if (w == NULL || *w == '\0')
        return 0;
    ck_assert_msg(strlen(w) < WRAPPER_BYTES_MAX, "TALLYD_WRAPPER is over %d bytes",
                  WRAPPER_BYTES_MAX);
    strcpy(buf, w);
    int n = 0;
    for (char *save, *t = strtok_r(buf, " ", &save); t; t = strtok_r(NULL, " ", &save)) {
        ck_assert_msg(n < WRAPPER_WORDS_MAX, "TALLYD_WRAPPER has over %d words",
                      WRAPPER_WORDS_MAX);
        argv[n++] = t;
    }
    return n;
}

static bool test_auth_on(const tallyd_proc *p)
{
    const char *on = getenv("TALLY_TEST_AUTH");
    if (on == NULL || strcmp(on, "1") != 0)
        return false;
    for (int i = 0; i < TALLYD_EXTRA_ARGS_MAX && p->extra_args[i]; i++)
        if (strcmp(p->extra_args[i], "--auth") == 0)
            return false; /* the test's own principals */
    return true;
}

/* Under $TALLY_TEST_AUTH=1 every process of a suite (the runner, its
 * forked tests and fixtures, the programs they start) sends the harness's
 * token: set before main, so a tallyd started in a fixture process still
 * has clients that know it. */
__attribute__((constructor)) static void test_auth_token_env(void)
{
    const char *on = getenv("TALLY_TEST_AUTH");
    if (on && strcmp(on, "1") == 0)
        setenv("TALLY_TOKEN", TALLYD_TEST_TOKEN, 0);
}

/* The harness's auth file (mode 600) in p->dir, into path. */
static void test_auth_file(const tallyd_proc *p, char *path, size_t size)
{
    uint8_t h[SHA256_BYTES];
    char hex[2 * SHA256_BYTES + 1];
    sha256_digest(TALLYD_TEST_TOKEN, strlen(TALLYD_TEST_TOKEN), h);
    for (int i = 0; i < SHA256_BYTES; i++)
        snprintf(hex + 2 * i, 3, "%02x", h[i]);
    snprintf(path, size, "%s/test-auth", p->dir);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    ck_assert_msg(fd >= 0, "%s: %s", path, strerror(errno));
    char line[256];
    int n = snprintf(line, sizeof(line), "test %s read,write:*,subscribe:*,admin\n", hex);
    ck_assert(write(fd, line, (size_t)n) == n);
    close(fd);
}

bool tallyd_endpoint(const tallyd_proc *p, const char *role, unsigned nth, char *out,
                     size_t size)
{
    size_t role_len = strlen(role);
    for (const char *line = p->ready; *line;) {
        size_t len = strcspn(line, "\n");
        if (len > role_len + 1 && strncmp(line, role, role_len) == 0 && line[role_len] == ' ' &&
            nth-- == 0) {
            size_t url_len = len - role_len - 1;
            if (url_len >= size)
                return false;
            memcpy(out, line + role_len + 1, url_len);
            out[url_len] = '\0';
            return true;
        }
        line += len + (line[len] == '\n');
    }
    return false;
}

/* Whether tallyd has written its ready file; then p->ready holds it and
 * url, pub_url and http_url are the bound ones. tallyd renames a whole
 * file into place, so a file that is there is complete. */
static bool ready_read(tallyd_proc *p)
{
    int fd = open(p->ready_path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return false;
    ssize_t n = read(fd, p->ready, sizeof(p->ready) - 1);
    close(fd);
    ck_assert_msg(n > 0 && (size_t)n < sizeof(p->ready) - 1, "%s: empty or over %zu bytes",
                  p->ready_path, sizeof(p->ready) - 2);
    p->ready[n] = '\0';
    ck_assert_msg(tallyd_endpoint(p, "listen", 0, p->url, sizeof(p->url)),
                  "%s names no listen URL:\n%s", p->ready_path, p->ready);
    if (!tallyd_endpoint(p, "publish", 0, p->pub_url, sizeof(p->pub_url)))
        p->pub_url[0] = '\0';
    p->http_port = 0;
    if (!tallyd_endpoint(p, "http", 0, p->http_url, sizeof(p->http_url)))
        p->http_url[0] = '\0';
    const char *colon = p->http_url[0] ? strrchr(p->http_url, ':') : NULL;
    if (colon)
        p->http_port = atoi(colon + 1);
    return true;
}

/* Whether the test's --http (the last in extra_args) asks for port 0. */
static bool http_port_is_kernels(const tallyd_proc *p)
{
    const char *http = NULL;
    for (int i = 0; i + 1 < TALLYD_EXTRA_ARGS_MAX && p->extra_args[i]; i++)
        if (strcmp(p->extra_args[i], "--http") == 0)
            http = p->extra_args[i + 1];
    size_t n = http ? strlen(http) : 0;
    return n > 2 && strcmp(http + n - 2, ":0") == 0;
}

static void spawn(tallyd_proc *p, bool again)
{
    char auth_path[320];
    char map[32], wrapper[WRAPPER_BYTES_MAX];
    const char *argv[WRAPPER_WORDS_MAX + 28 + TALLYD_TLS_ARGS_MAX + TALLYD_EXTRA_ARGS_MAX];
    int argc = wrapper_words(argv, wrapper);
    const char *args[] = {tallyd_program("tallyd"), "--data", p->data_dir, "--listen", p->url,
                          "--publish", p->pub_url[0] ? p->pub_url : "none",
                          "--log-level", "info",
                          "--http", "none", /* a test that wants it passes --http again */
                          "--ready-file", p->ready_path,
                          "--config", "none"}; /* never the machine's /etc/tally/tallyd.conf */
    for (size_t i = 0; i < sizeof(args) / sizeof(args[0]); i++)
        argv[argc++] = args[i];
    if (test_auth_on(p)) { /* before extra_args: a test's --backup-dir wins */
        test_auth_file(p, auth_path, sizeof(auth_path));
        argv[argc++] = "--auth";
        argv[argc++] = auth_path;
        argv[argc++] = "--backup-dir";
        argv[argc++] = p->dir;
    }
    if (p->map_size_mb) {
        snprintf(map, sizeof(map), "%u", p->map_size_mb);
        argv[argc++] = "--map-size-mb";
        argv[argc++] = map;
    }
    argc += tallyd_tls_args(p, argv + argc);
    for (int i = 0; i < TALLYD_EXTRA_ARGS_MAX && p->extra_args[i]; i++)
        argv[argc++] = p->extra_args[i];
    if (again && p->http_url[0] && http_port_is_kernels(p)) { /* the port its clients know */
        argv[argc++] = "--http";
        argv[argc++] = p->http_url;
    }
    argv[argc] = NULL;
    unlink(p->ready_path); /* a killed tallyd's file is not this one's */
    pid_t pid = fork();
    if (pid == 0) { /* only async-signal-safe calls here: no Check, no stdio */
        int fd = open(p->log_path, O_WRONLY | O_CREAT | O_APPEND, 0600);
        if (fd >= 0)
            dup2(fd, 2);
        if (p->file_size_limit_bytes) { /* writes past it fail with EFBIG */
            struct rlimit rl = {p->file_size_limit_bytes, p->file_size_limit_bytes};
            signal(SIGXFSZ, SIG_IGN);
            setrlimit(RLIMIT_FSIZE, &rl);
        }
        execvp(argv[0], (char *const *)argv); /* a wrapper may be named without its path */
        static const char failed[] = "harness: exec of tallyd failed\n";
        (void)!write(2, failed, sizeof(failed) - 1);
        _exit(127);
    }
    ck_assert_msg(pid > 0, "fork: %s", strerror(errno));
    p->pid = pid;
    mark_point(); /* waiting for tallyd's ready file */
    int64_t deadline = test_deadline_ms(START_WAIT_MS);
    while (clock_mono_ms() < deadline) {
        if (ready_read(p))
            return;
        int status;
        if (waitpid(pid, &status, WNOHANG) == pid) {
            p->pid = 0;
            log_tail_print(p);
            ck_abort_msg("tallyd exited at start (status %d)%s%s%s; log in %s", status,
                         again ? ": restarted on the ports of its last start (" : "",
                         again ? p->ready : "",
                         again ? "), one of them taken meanwhile is a real failure" : "",
                         p->log_path);
        }
        test_pause_ms(READY_PAUSE_MS);
    }
    log_tail_print(p);
    tallyd_kill(p);
    ck_abort_msg("tallyd wrote no %s within %lld ms; log in %s", p->ready_path,
                 (long long)test_scaled_ms(START_WAIT_MS), p->log_path);
}

void tallyd_start(tallyd_proc *p)
{
    const char *tmp = getenv("TMPDIR");
    snprintf(p->dir, sizeof(p->dir), "%s/tallyd-test-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    ck_assert_ptr_nonnull(mkdtemp(p->dir));
    snprintf(p->data_dir, sizeof(p->data_dir), "%s/data", p->dir);
    snprintf(p->url, sizeof(p->url), "ipc://%s/req.sock", p->dir);
    snprintf(p->pub_url, sizeof(p->pub_url), "ipc://%s/pub.sock", p->dir);
    snprintf(p->log_path, sizeof(p->log_path), "%s/tallyd.log", p->dir);
    snprintf(p->ready_path, sizeof(p->ready_path), "%s/ready", p->dir);
    p->http_url[0] = '\0';
    p->http_port = 0;
    p->ready[0] = '\0';
    tallyd_tls_prepare(p);
    spawn(p, false);
    mark_point(); /* tallyd answers */
}

void tallyd_restart(tallyd_proc *p)
{
    ck_assert_int_eq(p->pid, 0);
    spawn(p, true);
    mark_point(); /* tallyd answers again */
}

/* Reap pid within base_ms scaled; true with *status when it exited. */
static bool reap_within(pid_t pid, int base_ms, int *status)
{
    int64_t deadline = test_deadline_ms(base_ms);
    for (;;) {
        pid_t r = waitpid(pid, status, WNOHANG);
        if (r == pid || (r < 0 && errno != EINTR))
            return r == pid;
        if (clock_mono_ms() >= deadline)
            return false;
        test_pause_ms(TEST_WAIT_POLL_MS);
    }
}

/* Whether a line of p's log contains text. */
static bool log_has(const tallyd_proc *p, const char *text)
{
    FILE *f = fopen(p->log_path, "r");
    char line[1024];
    bool found = false;
    while (f && !found && fgets(line, sizeof(line), f))
        found = strstr(line, text) != NULL;
    if (f)
        fclose(f);
    return found;
}

bool tallyd_log_wait(const tallyd_proc *p, const char *text, int timeout_ms)
{
    return TEST_WAITED_UNTIL(log_has(p, text), timeout_ms);
}

int tallyd_stop(tallyd_proc *p)
{
    if (p->pid <= 0)
        return -1;
    mark_point(); /* stopping tallyd */
    kill(p->pid, SIGTERM);
    int status = 0;
    if (!reap_within(p->pid, STOP_WAIT_MS, &status)) {
        fprintf(stderr, "tallyd %d did not exit within %lld ms of SIGTERM; killing it\n",
                (int)p->pid, (long long)test_scaled_ms(STOP_WAIT_MS));
        log_tail_print(p);
        kill(p->pid, SIGKILL);
        waitpid(p->pid, &status, 0);
    }
    p->pid = 0;
    int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    if (code != 0) { /* show why (a sanitizer report, an assertion) before the dir goes */
        fprintf(stderr, "tallyd exited with %d at SIGTERM\n", code);
        log_tail_print(p);
    }
    return code;
}

void tallyd_kill(tallyd_proc *p)
{
    if (p->pid <= 0)
        return;
    mark_point(); /* killing tallyd */
    kill(p->pid, SIGKILL);
    waitpid(p->pid, NULL, 0);
    p->pid = 0;
}

bool tallyd_threads_stopped(pid_t pid)
{
    char path[64];
    snprintf(path, sizeof(path), "/proc/%d/task", (int)pid);
    DIR *dir = opendir(path);
    if (dir == NULL)
        return false;
    bool stopped = true, seen = false;
    for (struct dirent *e; stopped && (e = readdir(dir)) != NULL;) {
        if (e->d_name[0] == '.')
            continue;
        char stat[400], buf[512];
        snprintf(stat, sizeof(stat), "%s/%s/stat", path, e->d_name);
        FILE *f = fopen(stat, "r");
        size_t n = f ? fread(buf, 1, sizeof(buf) - 1, f) : 0;
        if (f)
            fclose(f);
        buf[n] = '\0';
        const char *end = strrchr(buf, ')'); /* the name may hold spaces and parens */
        stopped = end != NULL && end[1] == ' ' && (end[2] == 'T' || end[2] == 't');
        seen = true;
    }
    closedir(dir);
    return stopped && seen;
}

void tallyd_freeze(tallyd_proc *p)
{
    ck_assert_int_gt(p->pid, 0);
    ck_assert_int_eq(kill(p->pid, SIGSTOP), 0);
    TEST_WAIT_UNTIL(tallyd_threads_stopped(p->pid), 10000, "every thread of tallyd %d stopped",
                    (int)p->pid);
}

void tallyd_thaw(tallyd_proc *p)
{
    ck_assert_int_gt(p->pid, 0);
    ck_assert_int_eq(kill(p->pid, SIGCONT), 0);
}

void tallyd_cleanup(tallyd_proc *p)
{
    mark_point(); /* cleaning up tallyd */
    const char *wrapper = getenv("TALLYD_WRAPPER");
    if (wrapper && *wrapper)
        tallyd_stop(p); /* a wrapper such as valgrind reports only when tallyd exits */
    tallyd_kill(p);
    if (p->dir[0] && !getenv("TALLY_KEEP_TEST_DIRS"))
        test_remove_dir(p->dir);
}

void tallyd_recon_clean(const tallyd_proc *p)
{
    const char *argv[] = {tallyd_program("tally-recon"), "--data", p->data_dir, NULL};
    char *out = NULL, *err = NULL;
    int rc = test_run(argv, NULL, &out, &err);
    ck_assert_msg(rc == 0, "tally-recon exited %d: %s %s", rc, out, err);
    free(out);
    free(err);
}
