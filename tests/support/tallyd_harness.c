/*
 * tallyd_harness.c — real tallyd processes for integration tests.
 */
#include "tests/support/tallyd_harness.h"

#include <check.h>
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <nng/nng.h>
#include <nng/protocol/reqrep0/req.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

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

/* true when tallyd answers a stats request. */
static bool answers(const char *url)
{
    nng_socket s;
    if (nng_req0_open(&s) != 0)
        return false;
    nng_socket_set_ms(s, NNG_OPT_RECVTIMEO, 500);
    nng_socket_set_ms(s, NNG_OPT_SENDTIMEO, 500);
    bool ok = false;
    static const char stats[] = "\x82\xa1v\x01\xa2op\xa5stats";
    if (nng_dial(s, url, NULL, 0) == 0 && nng_send(s, (void *)stats, sizeof(stats) - 1, 0) == 0) {
        void *buf;
        size_t len;
        if (nng_recv(s, &buf, &len, NNG_FLAG_ALLOC) == 0) {
            ok = len > 0;
            nng_free(buf, len);
        }
    }
    nng_close(s);
    return ok;
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
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        int fd = open(p->log_path, O_WRONLY | O_CREAT | O_APPEND, 0600);
        if (fd >= 0)
            dup2(fd, 2);
        execv(argv[0], (char *const *)argv);
        fprintf(stderr, "exec %s: %s\n", argv[0], strerror(errno));
        _exit(127);
    }
    p->pid = pid;
    for (int i = 0; i < 200; i++) {
        if (answers(p->url))
            return;
        int status;
        if (waitpid(pid, &status, WNOHANG) == pid) {
            p->pid = 0;
            ck_abort_msg("tallyd exited at start (status %d); log in %s", status, p->log_path);
        }
        usleep(50000);
    }
    ck_abort_msg("tallyd did not answer within 10 s; log in %s", p->log_path);
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
}

void tallyd_restart(tallyd_proc *p)
{
    ck_assert_int_eq(p->pid, 0);
    spawn(p);
}

int tallyd_stop(tallyd_proc *p)
{
    if (p->pid <= 0)
        return -1;
    kill(p->pid, SIGTERM);
    int status = 0;
    waitpid(p->pid, &status, 0);
    p->pid = 0;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

void tallyd_kill(tallyd_proc *p)
{
    if (p->pid <= 0)
        return;
    kill(p->pid, SIGKILL);
    waitpid(p->pid, NULL, 0);
    p->pid = 0;
}

void tallyd_cleanup(tallyd_proc *p)
{
    tallyd_kill(p);
    if (p->dir[0] && !getenv("TALLY_KEEP_TEST_DIRS"))
        test_remove_dir(p->dir);
}
