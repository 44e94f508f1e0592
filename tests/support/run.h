/*
 * run.h — run a built program from a test (tally, tally-recon,
 * tally-bench, tally-readmodel, a second tallyd) and read what it wrote.
 *
 * The program is started by fork and execve of argv[0] (a path; no PATH
 * search). Its environment is the test's with the changes given, built
 * before the fork, so the child calls nothing but dup2 and execve (a test
 * may hold library threads). Output is captured in unlinked temp files,
 * never pipes, so a program that writes much cannot block on a full pipe.
 *
 * Everything here fails the Check test on an error of the machine (fork,
 * temp files); an exec that fails is the child's exit code 127.
 * Nothing here needs the store or libtally.
 */
#ifndef TALLY_TESTS_RUN_H
#define TALLY_TESTS_RUN_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

/* The most of a program's output a test reads back; more is cut off. */
#define TEST_OUTPUT_BYTES_MAX (8u * 1024 * 1024)
/* How many environment entries a spawned program may get. */
#define TEST_ENV_ENTRIES_MAX 1024

/* Start argv[0] with argv (NULL-terminated). env: NULL, or a
 * NULL-terminated list of changes to the test's environment, "NAME=value"
 * to set and "NAME" to remove. out_fd and err_fd become its stdout and
 * stderr; -1 leaves the test's own (both may be the same fd). Returns its
 * pid; the caller waits for it. */
pid_t test_spawn(const char *const *argv, const char *const *env, int out_fd, int err_fd);

/* The exit code in a wait status, or 128 + the signal that ended it. */
int test_exit_code(int wait_status);

/* Wait for the child pid to end; its exit code as test_exit_code says. */
int test_wait(pid_t pid);

/* Wait up to timeout_ms, scaled by test_slowdown() (tests/support/wait.h;
 * 0: only look), for the child pid to end: true,
 * with its raw wait status in *wait_status, when it did; false when it is
 * still running (then it is still the caller's to wait for or kill). */
bool test_wait_ms(pid_t pid, int64_t timeout_ms, int *wait_status);

/* Run argv to its end (test_spawn's argv and env). *out and *err (each
 * NULL to leave that stream the test's own) receive what it wrote,
 * NUL-terminated, at most TEST_OUTPUT_BYTES_MAX bytes; free them. Returns
 * its exit code as test_exit_code says. */
int test_run(const char *const *argv, const char *const *env, char **out, char **err);

/* An unlinked temp file opened for reading and writing. */
int test_temp_fd(void);

/* Everything written to fd, a regular file such as test_temp_fd's (from
 * its start, at most TEST_OUTPUT_BYTES_MAX bytes), NUL-terminated; closes
 * fd. Free the result. */
char *test_fd_read_all(int fd);

#endif
