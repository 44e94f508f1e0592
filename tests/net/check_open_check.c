/*
 * check_open_check.c — tallyd's structural check of its store at open
 * (issue 30, item 12): a real tallyd started on damaged copies of a real
 * store.
 *
 * Each test has a real tallyd write its store with tally-bench (more events
 * than the check follows, so it starts in the middle of the log), stops
 * it, damages the store — a byte of an event, a meta page of data.mdb, the
 * head record, the last event — and starts tallyd on it again: it
 * must exit 3 with a message naming data.mdb and the fault; with
 * --skip-open-check it must serve (warned); a healthy store must serve
 * after the check, which it logs.
 */
#include "common/clock.h"
#include "common/error.h"
#include "common/limits.h"
#include "log/log.h"
#include "log/store.h"
#include "tests/support/run.h"
#include "tests/support/suite.h"
#include "tests/support/tallyd_harness.h"
#include "tests/support/test_support.h"
#include "tests/support/wait.h"

#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define TIMEOUT_S 240
#define EXIT_DAMAGED 3
#define STORE_OPS "1500" /* more events than TALLY_OPEN_CHECK_EVENTS */
/* A meta page's transaction id (LMDB data format 1, 64-bit; log/store_meta.c). */
#define META_TXNID_AT 144

/* ---- a real store ---- */

/* A stopped tallyd of the test's own whose store tally-bench wrote (more
 * events than TALLY_OPEN_CHECK_EVENTS, so the check starts in the middle
 * of the log); its head seq. */
static uint64_t build_store(tallyd_proc *p)
{
    memset(p, 0, sizeof(*p));
    tallyd_start(p);
    const char *bench[] = {tallyd_program("tally-bench"), "--url", p->url, "--clients", "2",
                           "--ops", STORE_OPS, "--accounts", "50", "--json", NULL};
    char *out = NULL;
    int status = test_run(bench, NULL, &out, NULL);
    ck_assert_msg(status == 0, "tally-bench exited %d: %.2000s", status, out);
    free(out);
    ck_assert_int_eq(tallyd_stop(p), 0);
    store *st = test_store_open_read_only(p->data_dir);
    store_txn t;
    log_head head;
    ck_assert_int_eq(store_txn_begin(st, NULL, true, &t), TALLY_ok);
    ck_assert_int_eq(log_head_get(&t, &head), TALLY_ok);
    store_txn_abort(&t);
    store_close(st);
    ck_assert_uint_gt(head.seq, TALLY_OPEN_CHECK_EVENTS);
    return head.seq;
}

static store *open_store_of(const tallyd_proc *p)
{
    store_options o = {.path = p->data_dir, .map_size_bytes = UINT64_C(64) << 20};
    store *st = NULL;
    ck_assert_int_eq(store_open(&o, &st), TALLY_ok);
    return st;
}

/* ---- damage ---- */

/* One byte in the middle of an event's bytes, changed. */
static void flip_middle_byte(uint8_t *ev, size_t len) { ev[len / 2] ^= 0x01; }

static void flip_event_byte(const tallyd_proc *p, uint64_t seq)
{
    store *st = open_store_of(p);
    test_event_rewrite(st, seq, flip_middle_byte);
    store_close(st);
}

/* The head record (meta "head": seq and hash) cut to its first bytes. */
static void truncate_head_record(const tallyd_proc *p)
{
    store *st = open_store_of(p);
    store_txn t;
    ck_assert_int_eq(store_txn_begin(st, NULL, true, &t), TALLY_ok);
    MDB_val v;
    ck_assert_int_eq(store_get(&t, STORE_DB_META, "head", 4, &v), TALLY_ok);
    ck_assert_uint_eq(v.mv_size, 8 + LOG_HASH_BYTES);
    uint8_t cut[20];
    memcpy(cut, v.mv_data, sizeof(cut));
    store_txn_abort(&t);
    ck_assert_int_eq(store_txn_begin(st, NULL, false, &t), TALLY_ok);
    ck_assert_int_eq(store_put(&t, STORE_DB_META, "head", 4, cut, sizeof(cut), 0), TALLY_ok);
    ck_assert_int_eq(store_txn_commit(&t), TALLY_ok);
    store_close(st);
}

/* The log loses its last event; the head record still names it. */
static void remove_last_event(const tallyd_proc *p, uint64_t head)
{
    store *st = open_store_of(p);
    store_txn t;
    ck_assert_int_eq(store_txn_begin(st, NULL, false, &t), TALLY_ok);
    uint8_t key[8];
    log_seq_key(head, key);
    ck_assert_int_eq(store_del(&t, STORE_DB_LOG, key, 8), TALLY_ok);
    ck_assert_int_eq(store_txn_commit(&t), TALLY_ok);
    store_close(st);
}

/* The older meta page of data.mdb gets a transaction id two below its
 * own: LMDB still opens the store (it takes the newer page), but the two
 * pages no longer tell a story LMDB could have written. */
static void age_older_meta_page(const tallyd_proc *p)
{
    char file[400];
    snprintf(file, sizeof(file), "%s/data.mdb", p->data_dir);
    int fd = open(file, O_RDWR);
    ck_assert_int_ge(fd, 0);
    long page = sysconf(_SC_PAGESIZE);
    uint64_t ids[2];
    ck_assert_int_eq(pread(fd, &ids[0], 8, META_TXNID_AT), 8);
    ck_assert_int_eq(pread(fd, &ids[1], 8, page + META_TXNID_AT), 8);
    int older = ids[0] < ids[1] ? 0 : 1;
    ck_assert_uint_ge(ids[older], 2);
    uint64_t earlier = ids[older] - 2;
    ck_assert_int_eq(pwrite(fd, &earlier, 8, older * page + META_TXNID_AT), 8);
    close(fd);
}

/* ---- tallyd on the store ---- */

/* tallyd on p's directory, expected to refuse: its exit code, its stderr
 * in *err (free it). */
static int start_refused(tallyd_proc *p, const char *extra, char **err)
{
    char url[400], err_path[400];
    snprintf(url, sizeof(url), "ipc://%s/refused.sock", p->dir);
    snprintf(err_path, sizeof(err_path), "%s/refused.err", p->dir);
    const char *argv[] = {tallyd_program("tallyd"), "--config", "none", "--data", p->data_dir,
                          "--listen", url, "--publish", "none", "--http", "none", extra, NULL};
    int err_fd = test_temp_fd();
    pid_t pid = test_spawn(argv, NULL, -1, err_fd);
    int status = 0;
    if (!test_wait_ms(pid, 60000, &status)) {
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
        ck_abort_msg("tallyd kept running on a damaged store");
    }
    *err = test_fd_read_all(err_fd);
    return test_exit_code(status);
}

/* The store is refused: exit 3 and a message naming data.mdb and what. */
static void expect_refused(tallyd_proc *p, const char *extra, const char *what)
{
    char *err = NULL;
    int code = start_refused(p, extra, &err);
    char file[400];
    snprintf(file, sizeof(file), "%s/data.mdb", p->data_dir);
    ck_assert_msg(code == EXIT_DAMAGED, "tallyd exited %d on a damaged store: %s", code, err);
    ck_assert_msg(strstr(err, "refusing the damaged store") != NULL && strstr(err, file) != NULL,
                  "the refusal does not name %s: %s", file, err);
    ck_assert_msg(strstr(err, what) != NULL, "the refusal lacks '%s': %s", what, err);
    free(err);
}

/* With --skip-open-check tallyd serves the store, and warns. */
static void expect_opened_when_skipped(tallyd_proc *p)
{
    p->extra_args[0] = "--skip-open-check";
    tallyd_restart(p);
    ck_assert_msg(tallyd_log_wait(p, "--skip-open-check: the store is opened without", 0),
                  "no warning for --skip-open-check");
    ck_assert_int_eq(tallyd_stop(p), 0);
    p->extra_args[0] = NULL;
}

/* ---- the cases ---- */

START_TEST(healthy_store_is_checked_and_served)
{
    tallyd_proc p;
    uint64_t head = build_store(&p);
    tallyd_restart(&p);
    char line[200];
    snprintf(line, sizeof(line), "store checked at open: head seq %llu, the last %d events chain",
             (unsigned long long)head, TALLY_OPEN_CHECK_EVENTS);
    ck_assert_msg(tallyd_log_wait(&p, line, 0), "tallyd did not log its check: '%s'", line);
    ck_assert_int_eq(tallyd_stop(&p), 0);
    tallyd_cleanup(&p);
}
END_TEST

START_TEST(changed_event_is_refused)
{
    tallyd_proc p;
    uint64_t head = build_store(&p);
    uint64_t seq = head - 10;
    flip_event_byte(&p, seq);
    char what[160];
    snprintf(what, sizeof(what), "the event at seq %llu does not decode or its hash is wrong",
             (unsigned long long)seq);
    expect_refused(&p, NULL, what);
    expect_opened_when_skipped(&p);
    tallyd_cleanup(&p);
}
END_TEST

START_TEST(damaged_meta_page_is_refused)
{
    tallyd_proc p;
    build_store(&p);
    age_older_meta_page(&p);
    expect_refused(&p, NULL, "LMDB meta pages hold transactions");
    expect_opened_when_skipped(&p);
    tallyd_cleanup(&p);
}
END_TEST

START_TEST(truncated_head_record_is_refused)
{
    tallyd_proc p;
    build_store(&p);
    truncate_head_record(&p);
    expect_refused(&p, NULL, "the head record (meta \"head\") is garbled");
    /* tallyd cannot serve without a head: refused all the same */
    expect_refused(&p, "--skip-open-check", "");
    tallyd_cleanup(&p);
}
END_TEST

START_TEST(head_past_the_log_is_refused)
{
    tallyd_proc p;
    uint64_t head = build_store(&p);
    remove_last_event(&p, head);
    char what[160];
    snprintf(what, sizeof(what), "names seq %llu, but the log ends at seq %llu",
             (unsigned long long)head, (unsigned long long)head - 1);
    expect_refused(&p, NULL, what);
    expect_opened_when_skipped(&p);
    tallyd_cleanup(&p);
}
END_TEST

int main(void)
{
    const test_row tests[] = {
        {"healthy", healthy_store_is_checked_and_served, TIMEOUT_S},
        {"event", changed_event_is_refused, TIMEOUT_S},
        {"meta_page", damaged_meta_page_is_refused, TIMEOUT_S},
        {"head_record", truncated_head_record_is_refused, TIMEOUT_S},
        {"head_past_log", head_past_the_log_is_refused, TIMEOUT_S},
    };
    return test_run_suite(test_suite_of_rows("open_check", TEST_ROWS(tests)));
}
