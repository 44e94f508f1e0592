/*
 * tallyd_harness.h — start and stop a real tallyd for integration tests,
 * like Redis's start_server: a temp data directory, ipc:// endpoints inside
 * it, the binary from $TALLYD (set by `make check`) or ./tallyd.
 *
 * $TALLYD_WRAPPER, when set, is a command line (words split at spaces)
 * that runs tallyd, e.g. "valgrind --error-exitcode=99 ..."; the start and
 * stop waits then grow to allow for the slowdown.
 *
 * $TALLY_TEST_AUTH=1 runs every tallyd with --auth (docs/SECURITY.md): a
 * file in the temp dir with one principal holding every grant (read,
 * write:*, subscribe:*, admin) and --backup-dir at the temp dir, unless the
 * test passes its own --auth; $TALLY_TOKEN is then set to that
 * principal's token (TALLYD_TEST_TOKEN) before main in every process
 * linking the harness, so libtally, the CLI and the tools it starts send
 * it. `make check` runs the libtally
 * suite this way once (tests/clients/check_with_auth.sh).
 */
#ifndef TALLY_TALLYD_HARNESS_H
#define TALLY_TALLYD_HARNESS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define TALLYD_EXTRA_ARGS_MAX 16
/* The token of the harness's principal under $TALLY_TEST_AUTH=1. */
#define TALLYD_TEST_TOKEN "tally-test-token"

typedef struct tallyd_proc {
    char dir[256];        /* temp dir; data in dir/data */
    char data_dir[300];
    char url[320];        /* ipc://dir/req.sock (the first --listen line of the ready file) */
    char pub_url[320];    /* ipc://dir/pub.sock (its publish line) */
    char http_url[320];   /* its http line: the HTTP face as bound; "" with --http none */
    int http_port;        /* http_url's port; 0 without it */
    char ready_path[320]; /* dir/ready: tallyd's --ready-file */
    char ready[2048];     /* what it said at the last start (tallyd_endpoint) */
    char log_path[320];   /* tallyd's stderr */
    pid_t pid;
    unsigned map_size_mb; /* 0 = default */
    const char *extra_args[TALLYD_EXTRA_ARGS_MAX]; /* more tallyd options, NULL-terminated */
    uint64_t file_size_limit_bytes; /* > 0: RLIMIT_FSIZE for tallyd (SIGXFSZ ignored) */
    /* TLS mode (tallyd_tls.h; or $TALLY_TEST_TLS): url and pub_url are
     * tls+tcp://127.0.0.1:PORT, plain_url the ipc:// one beside them */
    bool tls;
    char tls_dir[320];    /* the certificates (make_test_certs.sh) */
    char plain_url[320];
} tallyd_proc;

/* tallyd runs with --http none (several run at once; the default port is
 * one): a test of the HTTP face puts --http http://127.0.0.1:0 in
 * extra_args and finds the port tallyd bound in http_url / http_port.
 * Every TCP port is the kernel's choice (port 0) read back from tallyd's
 * --ready-file, never a "free port" found beforehand (that races other
 * tests under make check -j). */
/* Make the temp dir and start tallyd with --ready-file dir/ready; waits
 * for that file (tallyd writes it once every listener is up and the
 * threads that answer run) and fills url, pub_url and http_url from it.
 * Fails the Check test (printing the tail of tallyd's log) if tallyd exits
 * or writes no file within 30 s. */
void tallyd_start(tallyd_proc *p);
/* Start again on the same directory (after a stop or kill), on the URLs
 * of the last start (url, pub_url, and http_url when the test's --http
 * asked for port 0: the ports clients hold); a port taken meanwhile fails
 * the test, naming it. */
void tallyd_restart(tallyd_proc *p);
/* The URL of the nth (from 0) line of role ("listen", "publish", "http")
 * in the ready file of the last start, into out; false when there is none. */
bool tallyd_endpoint(const tallyd_proc *p, const char *role, unsigned nth, char *out,
                     size_t size);
/* SIGTERM and wait; returns the exit status (0 = clean). A tallyd still
 * running 10 s after SIGTERM is reported on stderr and killed (137). */
int tallyd_stop(tallyd_proc *p);
/* Whether a line of tallyd's log holds text, waiting up to timeout_ms
 * (scaled by test_slowdown(), tests/support/wait.h) for it to come. */
bool tallyd_log_wait(const tallyd_proc *p, const char *text, int timeout_ms);
/* SIGKILL and reap. */
void tallyd_kill(tallyd_proc *p);
/* SIGSTOP, then wait until the kernel reports every thread of tallyd
 * stopped: kill() returns before that (a stop signal wakes one thread,
 * which stops the others), and on a loaded machine a reply can still
 * leave in between. Fails the test if that takes over 10 s (scaled). */
void tallyd_freeze(tallyd_proc *p);
/* Whether every thread of pid (any process) is stopped (state T or t in
 * /proc/pid/task/TID/stat); false while one runs or cannot be read. */
bool tallyd_threads_stopped(pid_t pid);
/* SIGCONT: a frozen tallyd runs again. */
void tallyd_thaw(tallyd_proc *p);
/* Stop if running (SIGKILL; SIGTERM first under $TALLYD_WRAPPER, whose
 * report comes at exit) and remove the temp dir. */
void tallyd_cleanup(tallyd_proc *p);

/* A non-blocking socket connected to an ipc:// or tcp://IPV4:PORT url,
 * nothing sent yet: its fd, or -1 (nothing listens, or deadline passed). */
int tallyd_connect(const char *url, int64_t deadline_ms);
/* Send or receive exactly len bytes on such a socket by deadline_ms
 * (clock_mono_ms); false on timeout, EOF or error. */
bool tallyd_fd_send_all(int fd, const void *buf, size_t len, int64_t deadline_ms);
bool tallyd_fd_recv_all(int fd, void *buf, size_t len, int64_t deadline_ms);

/* A connection to tallyd's ipc:// (or tcp://) url that has done the SP
 * header exchange by hand (no NNG in the test process), as a REQ peer: its
 * fd, or -1.
 * Closing it is harmless (see the .c file); a connection tallyd refuses
 * (--max-connections) reads EOF after the exchange. */
int tallyd_sp_open(const char *url);

/* The 13-byte head of an SP/IPC request frame (message type 1, the 8-byte
 * length of request id + body, the request id with its high bit set):
 * write it, then body_bytes of request, on a tallyd_sp_open connection. */
void tallyd_sp_frame_head(uint8_t head[13], uint64_t body_bytes, uint32_t request_id);

/* Speak the SP protocol over the ipc socket by hand (no NNG in the test
 * process): send one request frame declaring body_bytes and return true
 * when tallyd hangs up without replying. */
bool tallyd_oversized_is_dropped(const char *url, uint64_t body_bytes);

/* Speak the SP protocol over the ipc socket by hand: send one request
 * frame holding request, wait up to linger_ms (a reply may arrive and is
 * left unread), and hang up, as a client that dies with its request in
 * flight. Returns true when the whole frame was sent (tallyd may or may
 * not have applied it). */
bool tallyd_send_and_hang_up(const char *url, const void *request, size_t len, int linger_ms);

/* Play a server that dies during the SP handshake: listen on the ipc://
 * url (or tls+tcp://127.0.0.1:PORT url: during the TLS handshake) (of a stopped tallyd) and close each connection at once, before the
 * SP header, until count were closed or wait_ms passed; then remove the
 * socket file. Returns how many were closed, or -1 when the url could not
 * be bound. */
int tallyd_hang_up_handshakes(const char *url, int count, int wait_ms);

/* Path of a built program: $name_upper env var, else ./name (e.g. "tally"). */
const char *tallyd_program(const char *name);
/* Run tally-recon on p's store (tallyd may be serving it); fail the test,
 * with recon's output, unless it exits 0. */
void tallyd_recon_clean(const tallyd_proc *p);

#endif
