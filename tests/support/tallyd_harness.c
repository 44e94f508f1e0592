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

#include <check.h>
#include <ctype.h>
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
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define START_WAIT_MS 30000
#define STOP_WAIT_MS 10000
#define PROBE_WAIT_MS 1000
#define PROBE_PAUSE_US 50000
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

static int64_t mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
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
        int64_t left = deadline - mono_ms();
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

/* A non-blocking Unix socket connected to an ipc:// url, or -1. */
static int ipc_connect(const char *url, int64_t deadline)
{
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    if (strncmp(url, "ipc://", 6) != 0 || strlen(url + 6) >= sizeof(sa.sun_path))
        return -1;
    strcpy(sa.sun_path, url + 6);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0 ||
        (errno == EINPROGRESS && fd_ready(fd, POLLOUT, deadline)))
        return fd;
    close(fd); /* no socket file yet, or the backlog is full (EAGAIN) */
    return -1;
}

/* true when tallyd answers a stats request on its ipc:// url within
 * PROBE_WAIT_MS: the SP header exchange, then one REQ frame (length,
 * request id, body) and the start of the REP frame back. */
static bool answers(const char *url)
{
    static const uint8_t hello[8] = {0, 'S', 'P', 0, 0, SP_PROTOCOL_REQ0, 0, 0};
    static const char stats[] = "\x82\xa1v\x01\xa2op\xa5stats";
    uint8_t frame[9 + 4 + sizeof(stats) - 1] = {1};
    uint64_t len = 4 + sizeof(stats) - 1;
    for (int i = 0; i < 8; i++)
        frame[1 + i] = (uint8_t)(len >> (56 - 8 * i));
    memcpy(frame + 9, "\x80\x00\x00\x01", 4); /* request id 1, high bit set */
    memcpy(frame + 13, stats, sizeof(stats) - 1);
    int64_t deadline = mono_ms() + PROBE_WAIT_MS;
    int fd = ipc_connect(url, deadline);
    if (fd < 0)
        return false;
    uint8_t peer[8], head[9];
    bool ok = send_all(fd, hello, sizeof(hello), deadline) &&
              recv_all(fd, peer, sizeof(peer), deadline) && peer[1] == 'S' && peer[2] == 'P' &&
              send_all(fd, frame, sizeof(frame), deadline) &&
              recv_all(fd, head, sizeof(head), deadline) && head[0] == 1;
    close(fd);
    uint64_t reply_len = 0;
    for (int i = 1; ok && i < 9; i++)
        reply_len = reply_len << 8 | head[i];
    return ok && reply_len > 4; /* more than the echoed request id */
}

bool tallyd_oversized_is_dropped(const char *url, uint64_t body_bytes)
{
    static const uint8_t hello[8] = {0, 'S', 'P', 0, 0, SP_PROTOCOL_REQ0, 0, 0};
    uint8_t head[13] = {1};
    uint64_t len = 4 + body_bytes;
    for (int i = 0; i < 8; i++)
        head[1 + i] = (uint8_t)(len >> (56 - 8 * i));
    memcpy(head + 9, "\x80\x00\x00\x02", 4);
    int64_t deadline = mono_ms() + 10000;
    int fd = ipc_connect(url, deadline);
    if (fd < 0)
        return false;
    uint8_t peer[8], chunk[4096] = {0};
    bool ok = send_all(fd, hello, sizeof(hello), deadline) &&
              recv_all(fd, peer, sizeof(peer), deadline) && send_all(fd, head, sizeof(head), deadline);
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

static void spawn(tallyd_proc *p)
{
    char map[32];
    const char *argv[24] = {tallyd_program("tallyd"), "--data", p->data_dir, "--listen", p->url,
                            "--publish", p->pub_url, "--log-level", "info"};
    int argc = 9;
    if (p->map_size_mb) {
        snprintf(map, sizeof(map), "%u", p->map_size_mb);
        argv[argc++] = "--map-size-mb";
        argv[argc++] = map;
    }
    for (int i = 0; i < 8 && p->extra_args[i]; i++)
        argv[argc++] = p->extra_args[i];
    argv[argc] = NULL;
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
        execv(argv[0], (char *const *)argv);
        static const char failed[] = "harness: exec of tallyd failed\n";
        (void)!write(2, failed, sizeof(failed) - 1);
        _exit(127);
    }
    ck_assert_msg(pid > 0, "fork: %s", strerror(errno));
    p->pid = pid;
    mark_point(); /* waiting for tallyd to answer */
    int64_t started = mono_ms();
    while (mono_ms() - started < START_WAIT_MS) {
        if (answers(p->url))
            return;
        int status;
        if (waitpid(pid, &status, WNOHANG) == pid) {
            p->pid = 0;
            log_tail_print(p);
            ck_abort_msg("tallyd exited at start (status %d); log in %s", status, p->log_path);
        }
        usleep(PROBE_PAUSE_US);
    }
    log_tail_print(p);
    tallyd_kill(p);
    ck_abort_msg("tallyd did not answer within %d ms; log in %s", START_WAIT_MS, p->log_path);
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
    spawn(p);
    mark_point(); /* tallyd answers */
}

void tallyd_restart(tallyd_proc *p)
{
    ck_assert_int_eq(p->pid, 0);
    spawn(p);
    mark_point(); /* tallyd answers again */
}

/* Reap pid within wait_ms; true with *status when it exited. */
static bool reap_within(pid_t pid, int wait_ms, int *status)
{
    int64_t deadline = mono_ms() + wait_ms;
    for (;;) {
        pid_t r = waitpid(pid, status, WNOHANG);
        if (r == pid || (r < 0 && errno != EINTR))
            return r == pid;
        if (mono_ms() >= deadline)
            return false;
        usleep(10000);
    }
}

int tallyd_stop(tallyd_proc *p)
{
    if (p->pid <= 0)
        return -1;
    mark_point(); /* stopping tallyd */
    kill(p->pid, SIGTERM);
    int status = 0;
    if (!reap_within(p->pid, STOP_WAIT_MS, &status)) {
        fprintf(stderr, "tallyd %d did not exit within %d ms of SIGTERM; killing it\n",
                (int)p->pid, STOP_WAIT_MS);
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

void tallyd_cleanup(tallyd_proc *p)
{
    mark_point(); /* cleaning up tallyd */
    tallyd_kill(p);
    if (p->dir[0] && !getenv("TALLY_KEEP_TEST_DIRS"))
        test_remove_dir(p->dir);
}
