/*
 * check_bench.c — tally-bench against a real tallyd: a short run verifies
 * (exactly-once checks against the server), reports the server's memory,
 * and its transfer ids are time-ordered by default (UUIDv7 keys, ids that
 * keep the key's time) and in no time order with --keys random; with
 * --user-data every transfer has its three user data index entries. The
 * ids and entries are read from the stopped server's store.
 */
#include "common/bytes.h"
#include "common/clock.h"
#include "common/error.h"
#include "ledger/index.h"
#include "log/store.h"
#include "tests/support/run.h"
#include "tests/support/tallyd_harness.h"
#include "tests/support/test_support.h"

#include <check.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BENCH_OPS 400
#define SLACK_MS 5000 /* ids' times may lead or trail the run by this much */

/* Run tally-bench with args; its stdout into *out (NUL-terminated; free
 * it); returns its exit code (128 + a signal that ended it). */
static int run_bench(const char *const *args, char **out)
{
    const char *argv[32] = {tallyd_program("tally-bench")};
    int argc = 1;
    for (; args[argc - 1] && argc < 31; argc++)
        argv[argc] = args[argc - 1];
    argv[argc] = NULL;
    return test_run(argv, NULL, out, NULL);
}

/* Each key of database db in the stopped store at data_dir, to fn. */
static void each_key(const char *data_dir, store_db db, void (*fn)(const MDB_val *k, void *ctx),
                     void *ctx)
{
    store *st = test_store_open_read_only(data_dir);
    store_txn t;
    ck_assert_int_eq(store_txn_begin(st, NULL, true, &t), TALLY_ok);
    MDB_cursor *cur;
    ck_assert_int_eq(store_cursor_open(&t, db, &cur), TALLY_ok);
    MDB_val k, v;
    for (int rc = mdb_cursor_get(cur, &k, &v, MDB_FIRST); rc == MDB_SUCCESS;
         rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT))
        fn(&k, ctx);
    mdb_cursor_close(cur);
    store_txn_abort(&t);
    store_close(st);
}

typedef struct id_times {
    int64_t from_ms, to_ms;
    uint64_t total, in_window;
} id_times;

static void count_id(const MDB_val *k, void *ctx)
{
    id_times *c = ctx;
    ck_assert_uint_eq(k->mv_size, 16);
    const uint8_t *id = k->mv_data;
    int64_t ms = 0;
    for (int i = 0; i < 6; i++)
        ms = ms << 8 | id[i];
    c->total++;
    if (ms >= c->from_ms && ms <= c->to_ms && id[6] >> 4 == 7 && id[8] >> 6 == 2)
        c->in_window++;
}

/* Transfer ids in the store whose UUIDv7 time lies in [from_ms, to_ms]. */
static void count_ids(const char *data_dir, int64_t from_ms, int64_t to_ms, uint64_t *total,
                      uint64_t *in_window)
{
    id_times c = {.from_ms = from_ms, .to_ms = to_ms};
    each_key(data_dir, STORE_DB_TRANSFERS, count_id, &c);
    *total = c.total;
    *in_window = c.in_window;
}

/* A verified run of BENCH_OPS transfers with the given --keys order;
 * returns how many of the stored ids carry the run's time. */
static uint64_t bench_run(const char *keys, uint64_t *total)
{
    tallyd_proc p = {0};
    tallyd_start(&p);
    char pid[32];
    snprintf(pid, sizeof(pid), "%ld", (long)p.pid);
    char *out;
    int64_t from = clock_wall_ms();
    const char *args[] = {"--url", p.url, "--ops", "400", "--clients", "4", "--batch", "20",
                          "--accounts", "10", "--keys", keys, "--server-pid", pid, "--json", NULL};
    int status = run_bench(args, &out);
    int64_t to = clock_wall_ms();
    ck_assert_msg(status == 0, "tally-bench exited %d: %s", status, out);
    json_error_t err;
    json_t *j = json_loads(out, 0, &err);
    ck_assert_msg(j != NULL, "not JSON (%s): %s", err.text, out);
    ck_assert(json_is_true(json_object_get(j, "verified")));
    ck_assert_int_eq(json_integer_value(json_object_get(j, "ops")), BENCH_OPS);
    ck_assert_str_eq(json_string_value(json_object_get(j, "keys")), keys);
    json_t *server = json_object_get(j, "server");
    /* The server's own memory is reported apart from the map pages. */
    json_int_t anon_peak = json_integer_value(json_object_get(server, "peak_rss_anon_kb"));
    json_int_t rss = json_integer_value(json_object_get(server, "rss_kb"));
    ck_assert(anon_peak > 0);
    ck_assert(json_integer_value(json_object_get(server, "rss_anon_kb")) > 0);
    ck_assert(json_integer_value(json_object_get(server, "rss_anon_kb")) <= anon_peak);
    ck_assert(json_integer_value(json_object_get(server, "rss_file_kb")) >= 0);
    ck_assert(rss > 0);
    /* Its writes during the run (/proc/PID/io): write calls (the commits)
     * in all and per effect; write_bytes is 0 on a tmpfs, never null. */
    json_int_t calls = json_integer_value(json_object_get(server, "write_calls"));
    ck_assert_msg(calls > 0, "write_calls %lld", (long long)calls);
    ck_assert(json_is_integer(json_object_get(server, "write_bytes")));
    ck_assert(json_integer_value(json_object_get(server, "write_bytes")) >= 0);
    ck_assert(json_real_value(json_object_get(server, "write_calls_per_effect")) ==
              (double)calls / BENCH_OPS);
    ck_assert(json_is_real(json_object_get(server, "write_bytes_per_effect")));
    json_decref(j);
    free(out);
    ck_assert_int_eq(tallyd_stop(&p), 0);
    uint64_t in_window;
    count_ids(p.data_dir, from - SLACK_MS, to + SLACK_MS, total, &in_window);
    tallyd_cleanup(&p);
    return in_window;
}

START_TEST(test_time_ordered_ids_by_default)
{
    uint64_t total;
    uint64_t timed = bench_run("time", &total);
    ck_assert_uint_eq(total, BENCH_OPS);
    ck_assert_uint_eq(timed, BENCH_OPS); /* every id carries its key's time */
}
END_TEST

START_TEST(test_random_keys_give_random_ids)
{
    uint64_t total;
    uint64_t timed = bench_run("random", &total);
    ck_assert_uint_eq(total, BENCH_OPS);
    /* A random 48-bit prefix falls in a window of seconds with chance ~1e-10. */
    ck_assert_uint_eq(timed, 0);
}
END_TEST

static void count_kind(const MDB_val *k, void *ctx)
{
    uint64_t *counts = ctx;
    uint8_t kind = ((const uint8_t *)k->mv_data)[0];
    ck_assert_uint_lt(kind, LEDGER_INDEX_KINDS);
    counts[kind]++;
}

/* --user-data: every transfer carries all three (read back with the
 * sample), so each has its three entries in the transfer index. */
START_TEST(test_user_data_fills_the_transfer_index)
{
    tallyd_proc p = {0};
    tallyd_start(&p);
    char *out;
    const char *args[] = {"--url", p.url, "--ops", "400", "--clients", "4", "--batch", "20",
                          "--accounts", "10", "--user-data", "--json", NULL};
    int status = run_bench(args, &out);
    ck_assert_msg(status == 0, "tally-bench exited %d: %s", status, out);
    json_error_t err;
    json_t *j = json_loads(out, 0, &err);
    ck_assert_msg(j != NULL, "not JSON (%s): %s", err.text, out);
    ck_assert(json_is_true(json_object_get(j, "verified")));
    ck_assert(json_is_true(json_object_get(j, "user_data")));
    json_decref(j);
    free(out);
    ck_assert_int_eq(tallyd_stop(&p), 0);
    uint64_t counts[LEDGER_INDEX_KINDS] = {0};
    each_key(p.data_dir, STORE_DB_TRANSFER_INDEX, count_kind, counts);
    tallyd_cleanup(&p);
    ck_assert_uint_eq(counts[LEDGER_INDEX_USER_DATA_128], BENCH_OPS);
    ck_assert_uint_eq(counts[LEDGER_INDEX_USER_DATA_64], BENCH_OPS);
    ck_assert_uint_eq(counts[LEDGER_INDEX_USER_DATA_32], BENCH_OPS);
}
END_TEST

static json_t *bench_json(const char *const *args, int want_status)
{
    char *out;
    int status = run_bench(args, &out);
    ck_assert_msg(status == want_status, "tally-bench exited %d: %s", status, out);
    json_error_t err;
    json_t *j = json_loads(out, 0, &err);
    ck_assert_msg(j != NULL, "not JSON (%s): %s", err.text, out);
    free(out);
    return j;
}

/* --stream reads the whole log with one verified libtally stream, in small
 * pages or large; from a seq; and counts what it read. */
START_TEST(test_stream_reads_the_log)
{
    tallyd_proc p = {0};
    tallyd_start(&p);
    const char *load[] = {"--url", p.url, "--ops", "400", "--clients", "4", "--batch", "20",
                          "--accounts", "10", "--json", NULL};
    json_decref(bench_json(load, 0));
    const uint64_t head = 410; /* 10 accounts opened, 400 transfers */
    const char *all[] = {"--url", p.url, "--stream", "--stream-page", "7", "--json", NULL};
    json_t *j = bench_json(all, 0);
    ck_assert(json_is_true(json_object_get(j, "verified")));
    ck_assert_int_eq(json_integer_value(json_object_get(j, "events")), head);
    ck_assert_int_eq(json_integer_value(json_object_get(j, "first_seq")), 1);
    ck_assert_int_eq(json_integer_value(json_object_get(j, "last_seq")), head);
    ck_assert_int_eq(json_integer_value(json_object_get(j, "page_events")), 7);
    json_decref(j);
    const char *part[] = {"--url", p.url, "--stream", "--from-seq", "400", "--ops", "5",
                          "--json", NULL};
    j = bench_json(part, 0);
    ck_assert(json_is_true(json_object_get(j, "verified")));
    ck_assert_int_eq(json_integer_value(json_object_get(j, "events")), 5);
    ck_assert_int_eq(json_integer_value(json_object_get(j, "last_seq")), 404);
    json_decref(j);
    ck_assert_int_eq(tallyd_stop(&p), 0);
    tallyd_cleanup(&p);
}
END_TEST

/* Each argument list (NULL-separated, a second NULL ends them) is a usage
 * error: exit status 2. */
static void expect_usage_errors(const char *const *lists)
{
    for (const char *const *a = lists; *a != NULL; a++) {
        char *out;
        ck_assert_msg(run_bench(a, &out) == 2, "%s: not refused", a[0]);
        free(out);
        while (*a != NULL)
            a++;
    }
}

START_TEST(test_stream_options_need_stream)
{
    static const char *const lists[] = {"--from-seq", "3", NULL,
                                        "--stream", "--seconds", "3", NULL,
                                        "--stream", "--stream-page", "1001", NULL,
                                        NULL};
    expect_usage_errors(lists);
}
END_TEST

START_TEST(test_keys_option_refuses_other_orders)
{
    static const char *const lists[] = {"--keys", "sorted", NULL, NULL};
    expect_usage_errors(lists);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("bench");
    TCase *tc = tcase_create("bench");
    tcase_set_timeout(tc, 180);
    tcase_add_test(tc, test_time_ordered_ids_by_default);
    tcase_add_test(tc, test_random_keys_give_random_ids);
    tcase_add_test(tc, test_user_data_fills_the_transfer_index);
    tcase_add_test(tc, test_keys_option_refuses_other_orders);
    tcase_add_test(tc, test_stream_reads_the_log);
    tcase_add_test(tc, test_stream_options_need_stream);
    suite_add_tcase(s, tc);
    return test_run_suite(s);
}
