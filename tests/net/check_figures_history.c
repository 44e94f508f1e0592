/*
 * check_figures_history.c — the figures' ring (net/metrics/figures_history.c)
 * on a real LMDB store: it keeps the newest TALLY_FIGURES_SAMPLES_MAX
 * samples, gives rates between neighbours, gives only the samples after
 * since_ms, samples the first TALLY_FIGURES_SUBSCRIBERS_MAX subscribers by
 * name and counts the rest, and hands a gone subscriber's column to a
 * newcomer emptied. Times are injected, so nothing waits.
 */
#include "net/metrics/figures_history.h"
#include "log/subscriber.h"
#include "tests/support/suite.h"
#include "tests/support/test_support.h"

#include <jansson.h>
#include <stdio.h>
#include <string.h>

static test_store ts;
static net_history *h;
static net_history_counters counters;

static void setup(void)
{
    test_store_open(&ts);
    h = net_history_create();
    ck_assert_ptr_nonnull(h);
    memset(&counters, 0, sizeof(counters));
}

static void teardown(void)
{
    net_history_destroy(h);
    test_store_close(&ts);
}

/* One sample at t_ms; commits grow by 2 and commands by 5 a sample. */
static void sample(int64_t t_ms)
{
    store_txn t;
    net_health_facts facts = {true, 1000, 0, -1};
    counters.commits += 2;
    counters.commands += 5;
    ck_assert_int_eq(store_txn_begin(ts.st, NULL, true, &t), TALLY_ok);
    ck_assert_int_eq(net_history_sample(h, &t, t_ms, &counters, &facts), TALLY_ok);
    store_txn_abort(&t);
}

static json_t *figures(int64_t since_ms)
{
    net_text out = {0};
    net_history_json(h, since_ms, &out);
    ck_assert(!out.bad);
    json_error_t err;
    json_t *doc = json_loadb(out.ptr, out.len, 0, &err);
    ck_assert_msg(doc != NULL, "not JSON: %s: %.200s", err.text, out.ptr);
    net_text_free(&out);
    return doc;
}

static json_t *column(json_t *doc, const char *name)
{
    json_t *c = json_object_get(doc, name);
    ck_assert_msg(json_is_array(c), "no column %s", name);
    return c;
}

static void subscriber_create(const char *name)
{
    store_txn t;
    sub_config cfg;
    sub_state st;
    bool created;
    sub_start start = {SUB_START_BEGINNING, 0, 0};
    sub_config_default(&cfg);
    ck_assert_int_eq(store_txn_begin(ts.st, NULL, false, &t), TALLY_ok);
    ck_assert_int_eq(sub_create(&t, tally_str_from(name), &start, &cfg, ts.now_ms, &created, &st),
                     TALLY_ok);
    ck_assert_int_eq(store_txn_commit(&t), TALLY_ok);
}

static void subscriber_delete(const char *name)
{
    store_txn t;
    ck_assert_int_eq(store_txn_begin(ts.st, NULL, false, &t), TALLY_ok);
    ck_assert_int_eq(sub_delete(&t, tally_str_from(name)), TALLY_ok);
    ck_assert_int_eq(store_txn_commit(&t), TALLY_ok);
}

/* The subscribers' columns of doc, by name, "a b c". */
static void column_names(json_t *doc, char *out, size_t size)
{
    size_t i;
    json_t *s;
    out[0] = '\0';
    json_array_foreach(column(doc, "subscribers"), i, s) {
        size_t n = strlen(out);
        snprintf(out + n, size - n, "%s%s", n ? " " : "", json_string_value(json_object_get(s, "name")));
    }
}

static json_t *subscriber_of(json_t *doc, const char *name)
{
    size_t i;
    json_t *s;
    json_array_foreach(column(doc, "subscribers"), i, s)
        if (strcmp(json_string_value(json_object_get(s, "name")), name) == 0)
            return s;
    return NULL;
}

START_TEST(the_ring_keeps_the_last_hour)
{
    const int extra = 5;
    for (int i = 1; i <= TALLY_FIGURES_SAMPLES_MAX + extra; i++)
        sample(TEST_NOW_MS + 1000 * i);
    json_t *doc = figures(0);
    ck_assert_int_eq(json_integer_value(json_object_get(doc, "samples")), TALLY_FIGURES_SAMPLES_MAX);
    json_t *t = column(doc, "t_ms");
    ck_assert_uint_eq(json_array_size(t), TALLY_FIGURES_SAMPLES_MAX);
    ck_assert_int_eq(json_integer_value(json_array_get(t, 0)), TEST_NOW_MS + 1000 * (extra + 1));
    ck_assert_int_eq(json_integer_value(json_array_get(t, TALLY_FIGURES_SAMPLES_MAX - 1)),
                     TEST_NOW_MS + 1000 * (TALLY_FIGURES_SAMPLES_MAX + extra));
    /* the oldest held has no neighbour before it; the others a rate */
    ck_assert(json_is_null(json_array_get(column(doc, "commits_per_s"), 0)));
    ck_assert(json_real_value(json_array_get(column(doc, "commits_per_s"), 1)) == 2.0);
    ck_assert(json_real_value(json_array_get(column(doc, "commands_per_s"), 1)) == 5.0);
    ck_assert_int_eq(json_integer_value(json_array_get(column(doc, "disk_free_bytes"), 1)), 1000);
    json_decref(doc);
}
END_TEST

START_TEST(since_ms_gives_the_samples_after_it)
{
    for (int i = 1; i <= 10; i++)
        sample(TEST_NOW_MS + 500 * i); /* two a second: the rate counts the time */
    json_t *doc = figures(TEST_NOW_MS + 500 * 7);
    json_t *t = column(doc, "t_ms");
    ck_assert_uint_eq(json_array_size(t), 3);
    ck_assert_int_eq(json_integer_value(json_array_get(t, 0)), TEST_NOW_MS + 500 * 8);
    /* the sample before the first given is in the ring: a rate */
    ck_assert(json_real_value(json_array_get(column(doc, "commits_per_s"), 0)) == 4.0);
    json_decref(doc);
    doc = figures(TEST_NOW_MS + 500 * 10);
    ck_assert_int_eq(json_integer_value(json_object_get(doc, "samples")), 0);
    ck_assert_uint_eq(json_array_size(column(doc, "head_seq")), 0);
    json_decref(doc);
}
END_TEST

START_TEST(the_first_subscribers_by_name_are_sampled)
{
    char name[16], names[512], want[512] = "";
    for (int i = TALLY_FIGURES_SUBSCRIBERS_MAX + 1; i >= 0; i--) { /* created out of order */
        snprintf(name, sizeof(name), "s%02d", i);
        subscriber_create(name);
    }
    for (int i = 0; i < TALLY_FIGURES_SUBSCRIBERS_MAX; i++) {
        size_t n = strlen(want);
        snprintf(want + n, sizeof(want) - n, "%ss%02d", i ? " " : "", i);
    }
    sample(TEST_NOW_MS);
    json_t *doc = figures(0);
    ck_assert_int_eq(json_integer_value(json_array_get(column(doc, "subscribers_total"), 0)),
                     TALLY_FIGURES_SUBSCRIBERS_MAX + 2);
    column_names(doc, names, sizeof(names));
    ck_assert_str_eq(names, want);
    json_decref(doc);
}
END_TEST

START_TEST(a_gone_subscribers_column_goes_to_a_newcomer_emptied)
{
    char name[16];
    for (int i = 0; i < TALLY_FIGURES_SUBSCRIBERS_MAX; i++) {
        snprintf(name, sizeof(name), "s%02d", i);
        subscriber_create(name);
    }
    for (int i = 1; i <= 3; i++)
        sample(TEST_NOW_MS + 1000 * i);
    subscriber_delete("s03");
    subscriber_create("t-new");
    sample(TEST_NOW_MS + 4000);
    json_t *doc = figures(0);
    ck_assert_ptr_null(subscriber_of(doc, "s03")); /* its history went with its column */
    json_t *s = subscriber_of(doc, "t-new");
    ck_assert_ptr_nonnull(s);
    json_t *pending = json_object_get(s, "pending");
    ck_assert_uint_eq(json_array_size(pending), 4);
    for (int i = 0; i < 3; i++)
        ck_assert(json_is_null(json_array_get(pending, i)));
    ck_assert_int_eq(json_integer_value(json_array_get(pending, 3)), 0);
    json_t *other = json_object_get(subscriber_of(doc, "s04"), "pending");
    for (int i = 0; i < 4; i++) /* the others keep theirs */
        ck_assert(json_is_integer(json_array_get(other, i)));
    json_decref(doc);
}
END_TEST

int main(void)
{
    const test_row rows[] = {
        {"ring", the_ring_keeps_the_last_hour, 120},
        {"ring", since_ms_gives_the_samples_after_it, 120},
        {"ring", the_first_subscribers_by_name_are_sampled, 120},
        {"ring", a_gone_subscribers_column_goes_to_a_newcomer_emptied, 120},
    };
    Suite *s = suite_create("figures_history");
    const test_fixtures fx = {NULL, NULL, setup, teardown};
    test_suite_add_rows(s, TEST_ROWS(rows), &fx);
    return test_run_suite(s);
}
