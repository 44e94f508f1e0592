/*
 * check_options.c — tests of common/options.c beyond tallyd's use of it
 * (tests/net/check_config runs tallyd's table): short options, flags and
 * texts stored by offset, the order of command-line-only rows (the last of
 * --progress and --no-progress wins), a number's noun and range in the
 * error, operands, and options_load_command_line's --help and usage errors.
 */
#include "config.h"

#include "common/options.h"
#include "common/progress.h"
#include "tests/support/suite.h"
#include "tests/support/test_support.h"

#include <check.h>
#include <stddef.h>
#include <string.h>

typedef struct sample {
    const char *path;
    bool verbose;
    unsigned count;
    uint64_t big;
    progress_mode progress;
} sample;

static const options_row rows[] = {
    {"path", "DIR", "./here", "a directory", OPTIONS_TEXT(sample, path), .short_name = 'p'},
    {"verbose", NULL, NULL, "say more", OPTIONS_FLAG(sample, verbose), .short_name = 'v'},
    {"count", "N", "3", "how many", OPTIONS_NUMBER(sample, count, UNSIGNED, 1, 10),
     .noun = "count"},
    {"big", "N", NULL, "a large one", OPTIONS_NUMBER(sample, big, U64, 0, UINT64_MAX)},
    PROGRESS_OPTION_ROWS(sample, progress),
    OPTIONS_ROW_HELP,
};
#define ROW_COUNT (sizeof(rows) / sizeof(rows[0]))

static int usage_calls;

static void usage(const options_set *s, FILE *f)
{
    (void)s, (void)f;
    usage_calls++;
}

/* Load argv (NULL-terminated, argv[0] first) into *out; the exit status
 * or -1; arguments_max as given. */
static int load(char **argv, size_t arguments_max, sample *out, options_set *s)
{
    int argc = 0;
    while (argv[argc])
        argc++;
    memset(out, 0, sizeof(*out));
    memset(s, 0, sizeof(*s));
    s->arguments_max = arguments_max;
    return options_load_command_line(s, "sample", rows, ROW_COUNT, argc, argv, out, usage);
}

START_TEST(defaults_long_and_short_options)
{
    sample o;
    options_set s;
    char *none[] = {"sample", NULL};
    ck_assert_int_eq(load(none, 0, &o, &s), -1);
    ck_assert_str_eq(o.path, "./here");
    ck_assert(!o.verbose);
    ck_assert_uint_eq(o.count, 3);
    ck_assert_int_eq(o.progress, PROGRESS_AUTO);
    options_free(&s);

    char *given[] = {"sample", "-p", "/x", "-v", "--count=7", "--big", "18446744073709551615",
                     NULL};
    ck_assert_int_eq(load(given, 0, &o, &s), -1);
    ck_assert_str_eq(o.path, "/x");
    ck_assert(o.verbose);
    ck_assert_uint_eq(o.count, 7);
    ck_assert_uint_eq(o.big, UINT64_MAX);
    options_free(&s);

    char *bundled[] = {"sample", "-vp/y", NULL};
    ck_assert_int_eq(load(bundled, 0, &o, &s), -1);
    ck_assert(o.verbose);
    ck_assert_str_eq(o.path, "/y");
    options_free(&s);
}
END_TEST

/* Rows that are no config settings apply in the command line's order. */
START_TEST(the_last_of_progress_and_no_progress_wins)
{
    sample o;
    options_set s;
    char *on_last[] = {"sample", "--no-progress", "--count", "2", "--progress", NULL};
    ck_assert_int_eq(load(on_last, 0, &o, &s), -1);
    ck_assert_int_eq(o.progress, PROGRESS_ON);
    options_free(&s);
    char *off_last[] = {"sample", "--progress", "--no-progress", NULL};
    ck_assert_int_eq(load(off_last, 0, &o, &s), -1);
    ck_assert_int_eq(o.progress, PROGRESS_OFF);
    options_free(&s);
}
END_TEST

START_TEST(a_number_out_of_range_names_its_noun_and_range)
{
    options_set s;
    ck_assert(options_init(&s, "sample", rows, ROW_COUNT));
    char *argv[] = {"sample", "--count", "11", NULL};
    ck_assert_int_eq(options_parse_command_line(&s, 3, argv), 0);
    sample o = {0};
    char why[OPTIONS_WHY_BYTES_MAX];
    ck_assert_int_eq(options_apply(&s, &o, why, sizeof(why)), 2);
    ck_assert_str_eq(why, "--count: not a count in range 1..10: 11");
    options_free(&s);
    ck_assert(options_init(&s, "sample", rows, ROW_COUNT));
    char *big[] = {"sample", "--big", "-1", NULL};
    ck_assert_int_eq(options_parse_command_line(&s, 3, big), 0);
    ck_assert_int_eq(options_apply(&s, &o, why, sizeof(why)), 2);
    ck_assert_str_eq(why, "--big: not a number in range 0..18446744073709551615: -1");
    options_free(&s);
}
END_TEST

START_TEST(usage_errors_exit_2)
{
    sample o;
    options_set s;
    char *unknown[] = {"sample", "--nope", NULL};
    char *unknown_short[] = {"sample", "-x", NULL};
    char *missing[] = {"sample", "--path", NULL};
    char *missing_short[] = {"sample", "-p", NULL};
    char *stray[] = {"sample", "word", NULL};
    char *flag_value[] = {"sample", "--verbose=yes", NULL};
    char **cases[] = {unknown, unknown_short, missing, missing_short, stray, flag_value};
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        ck_assert_msg(load(cases[i], 0, &o, &s) == 2, "case %zu", i);
        options_free(&s);
    }
    ck_assert_int_eq(usage_calls, 0);
}
END_TEST

START_TEST(operands_up_to_the_maximum)
{
    sample o;
    options_set s;
    char *argv[] = {"sample", "one", "-v", "two", NULL};
    ck_assert_int_eq(load(argv, 2, &o, &s), -1);
    ck_assert(o.verbose);
    ck_assert_uint_eq(s.argument_count, 2);
    ck_assert_str_eq(s.arguments[0], "one");
    ck_assert_str_eq(s.arguments[1], "two");
    options_free(&s);
    ck_assert_int_eq(load(argv, 1, &o, &s), 2);
    options_free(&s);
}
END_TEST

START_TEST(help_calls_the_usage_and_applies_nothing)
{
    sample o;
    options_set s;
    char *argv[] = {"sample", "--count", "99", "--help", NULL};
    ck_assert_int_eq(load(argv, 0, &o, &s), 0);
    ck_assert_int_eq(usage_calls, 1);
    ck_assert_uint_eq(o.count, 0);
    options_free(&s);
}
END_TEST

/* --help's lines: a short option before the long one, each row once. */
START_TEST(help_lists_every_row)
{
    options_set s;
    ck_assert(options_init(&s, "sample", rows, ROW_COUNT));
    char *text = NULL;
    size_t size = 0;
    FILE *f = open_memstream(&text, &size);
    ck_assert_ptr_nonnull(f);
    options_print_help(&s, f);
    fclose(f);
    ck_assert_ptr_nonnull(strstr(text, "\n  -v, --verbose "));
    ck_assert(strncmp(text, "  -p, --path DIR ", 17) == 0);
    ck_assert_ptr_nonnull(strstr(text, "how many, 1..10 (default 3)"));
    for (size_t i = 0; i < ROW_COUNT; i++) {
        char head[64];
        snprintf(head, sizeof(head), "--%s", rows[i].name);
        ck_assert_msg(strstr(text, head) != NULL, "--help lacks %s:\n%s", head, text);
    }
    free(text);
    options_free(&s);
}
END_TEST

static Suite *options_suite(void)
{
    const test_row tests[] = {
        {"forms", defaults_long_and_short_options, 0},
        {"order", the_last_of_progress_and_no_progress_wins, 0},
        {"numbers", a_number_out_of_range_names_its_noun_and_range, 0},
        {"usage", usage_errors_exit_2, 0},
        {"operands", operands_up_to_the_maximum, 0},
        {"help", help_calls_the_usage_and_applies_nothing, 0},
        {"help_rows", help_lists_every_row, 0},
    };
    return test_suite_of_rows("options", TEST_ROWS(tests));
}

int main(void) { return test_run_suite(options_suite()); }
