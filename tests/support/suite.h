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

/* Fixtures for every test case of a table; NULL members are none.
 * Unchecked ones run once per test case in the runner, outside the forked
 * test; checked ones run in the forked test, around it. */
typedef struct test_fixtures {
    SFun unchecked_setup, unchecked_teardown;
    SFun checked_setup, checked_teardown;
} test_fixtures;

/* Add the rows to s, each test case with the fixtures (NULL: none). The
 * rows of one test case must agree on the timeout. */
void test_suite_add_rows(Suite *s, const test_row *rows, size_t count,
                         const test_fixtures *fixtures);

/* A new suite of the rows, without fixtures. */
Suite *test_suite_of_rows(const char *name, const test_row *rows, size_t count);

/* The rows and count of a test_row array, for the two functions above. */
#define TEST_ROWS(rows) (rows), sizeof(rows) / sizeof((rows)[0])

#endif
