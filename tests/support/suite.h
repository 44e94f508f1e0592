/*
 * suite.h — a Check suite from a table: a row per test names its test
 * case, the test and its timeout, so a suite's main() is a table and a call
 * instead of written-out tcase_* calls. Run it with test_run_suite
 * (tests/support/test_support.h), which forks each test (CK_FORK).
 */
#ifndef TALLY_TESTS_SUITE_H
#define TALLY_TESTS_SUITE_H

#include <check.h>
#include <stddef.h>

typedef struct test_row {
    const char *tcase; /* consecutive rows with the same name share one test case */
    const TTest *test;
    int timeout_s; /* 0: Check's default; either way scaled by CK_TIMEOUT_MULTIPLIER */
} test_row;

/* Add the rows to s, each test case with the unchecked fixture setup and
 * teardown (both may be NULL), which runs once per test case in the
 * runner, outside the forked test. The rows of one test case must agree
 * on the timeout. */
void test_suite_add_rows(Suite *s, const test_row *rows, size_t count, SFun setup,
                         SFun teardown);

/* A new suite of the rows, without fixtures. */
Suite *test_suite_of_rows(const char *name, const test_row *rows, size_t count);

/* The rows and count of a test_row array, for the two functions above. */
#define TEST_ROWS(rows) (rows), sizeof(rows) / sizeof((rows)[0])

#endif
