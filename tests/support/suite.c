/*
 * suite.c — a Check suite from a table (see suite.h).
 */
#include "tests/support/suite.h"

#include <assert.h>
#include <stdbool.h>
#include <string.h>

void test_suite_add_rows(Suite *s, const test_row *rows, size_t count,
                         const test_fixtures *fixtures)
{
    TCase *tc = NULL;
    for (size_t i = 0; i < count; i++) {
        bool same = i > 0 && strcmp(rows[i].tcase, rows[i - 1].tcase) == 0;
        assert(!same || rows[i].timeout_s == rows[i - 1].timeout_s);
        if (!same) {
            tc = tcase_create(rows[i].tcase);
            if (rows[i].timeout_s > 0)
                tcase_set_timeout(tc, rows[i].timeout_s);
            if (fixtures && (fixtures->unchecked_setup || fixtures->unchecked_teardown))
                tcase_add_unchecked_fixture(tc, fixtures->unchecked_setup,
                                            fixtures->unchecked_teardown);
            if (fixtures && (fixtures->checked_setup || fixtures->checked_teardown))
                tcase_add_checked_fixture(tc, fixtures->checked_setup,
                                          fixtures->checked_teardown);
            suite_add_tcase(s, tc);
        }
        tcase_add_test(tc, rows[i].test);
    }
}

Suite *test_suite_of_rows(const char *name, const test_row *rows, size_t count)
{
    Suite *s = suite_create(name);
    test_suite_add_rows(s, rows, count, NULL);
    return s;
}
