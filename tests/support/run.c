/*
 * run.c — run a built program from a test (see run.h).
 */
#include "tests/support/run.h"

#include "common/clock.h"
#include "tests/support/wait.h"

#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

static size_t name_len(const char *entry)
{
    const char *eq = strchr(entry, '=');
    return eq ? (size_t)(eq - entry) : strlen(entry);
}

static bool changed_by(const char *entry, const char *const *env)
{
    size_t n = name_len(entry);
    for (size_t i = 0; env[i]; i++)
        if (name_len(env[i]) == n && strncmp(entry, env[i], n) == 0)
            return true;
    return false;
}

/* The test's environment with env's changes, in a malloc'ed array that
 * points into both (free only the array). */
static char **environment_with(const char *const *env)
{
    char **out = calloc(TEST_ENV_ENTRIES_MAX + 1, sizeof(*out));
    ck_assert_ptr_nonnull(out);
    size_t n = 0;
    for (char **e = environ; *e; e++) {
        if (changed_by(*e, env))
            continue;
        ck_assert_msg(n < TEST_ENV_ENTRIES_MAX, "over %d environment entries",
                      TEST_ENV_ENTRIES_MAX);
        out[n++] = *e;
    }
    for (size_t i = 0; env[i]; i++) {
        if (strchr(env[i], '=') == NULL)
            continue; /* a name alone: removed above */
        ck_assert_msg(n < TEST_ENV_ENTRIES_MAX, "over %d environment entries",
                      TEST_ENV_ENTRIES_MAX);
        out[n++] = (char *)env[i];
    }
    return out;
}

pid_t test_spawn(const char *const *argv, const char *const *env, int out_fd, int err_fd)
{
    char **envp = env ? environment_with(env) : environ;
    pid_t pid = fork();
    if (pid == 0) { /* only async-signal-safe calls here: no Check, no stdio */
        if (out_fd >= 0)
            dup2(out_fd, STDOUT_FILENO);
        if (err_fd >= 0)
            dup2(err_fd, STDERR_FILENO);
        execve(argv[0], (char *const *)argv, envp);
        static const char failed[] = "test_spawn: exec failed: ";
        (void)!write(STDERR_FILENO, failed, sizeof(failed) - 1);
        (void)!write(STDERR_FILENO, argv[0], strlen(argv[0]));
        (void)!write(STDERR_FILENO, "\n", 1);
        _exit(127);
    }
    int fork_errno = errno;
    if (env)
        free(envp);
    ck_assert_msg(pid > 0, "fork: %s", strerror(fork_errno));
    return pid;
}

int test_exit_code(int wait_status)
{
    return WIFEXITED(wait_status) ? WEXITSTATUS(wait_status) : 128 + WTERMSIG(wait_status);
}

int test_wait(pid_t pid)
{
    int status = 0;
    ck_assert_int_eq(waitpid(pid, &status, 0), pid);
    return test_exit_code(status);
}

bool test_wait_ms(pid_t pid, int64_t timeout_ms, int *wait_status)
{
    int64_t until = test_deadline_ms(timeout_ms);
    for (;;) {
        pid_t w = waitpid(pid, wait_status, WNOHANG);
        ck_assert_msg(w >= 0, "waitpid %ld: %s", (long)pid, strerror(errno));
        if (w == pid)
            return true;
        if (clock_mono_ms() >= until)
            return false;
        test_pause_ms(TEST_WAIT_POLL_MS);
    }
}

int test_run(const char *const *argv, const char *const *env, char **out, char **err)
{
    int out_fd = out ? test_temp_fd() : -1;
    int err_fd = err ? test_temp_fd() : -1;
    int code = test_wait(test_spawn(argv, env, out_fd, err_fd));
    if (out)
        *out = test_fd_read_all(out_fd);
    if (err)
        *err = test_fd_read_all(err_fd);
    return code;
}

int test_temp_fd(void)
{
    const char *tmp = getenv("TMPDIR");
    char path[512];
    snprintf(path, sizeof(path), "%s/tally-test-out-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    int fd = mkstemp(path);
    ck_assert_msg(fd >= 0, "mkstemp %s: %s", path, strerror(errno));
    unlink(path);
    return fd;
}

char *test_fd_read_all(int fd)
{
    struct stat sb;
    ck_assert_int_eq(fstat(fd, &sb), 0);
    size_t size = (size_t)sb.st_size < TEST_OUTPUT_BYTES_MAX ? (size_t)sb.st_size
                                                             : TEST_OUTPUT_BYTES_MAX;
    char *buf = malloc(size + 1);
    ck_assert_ptr_nonnull(buf);
    size_t len = 0;
    ssize_t n = 1;
    while (len < size && n > 0) {
        n = pread(fd, buf + len, size - len, (off_t)len);
        len += n > 0 ? (size_t)n : 0;
    }
    buf[len] = '\0';
    close(fd);
    return buf;
}
