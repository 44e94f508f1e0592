/*
 * wait.h — the tests' one notion of time: a slowdown factor for every wait
 * a test makes, deadlines scaled by it, the only pause under tests/, and a
 * bounded wait on a fact (docs/TESTING.md, "Wait on facts, never on time").
 *
 * A test never sleeps to synchronise: it waits until something it can
 * observe (a metric, a log line, stats, a reply, a counter) says that what
 * it needs has happened, with a generous bound that only a broken program
 * reaches. test_pause_ms is for the poll interval of such a wait and for
 * pauses that are inputs of a test (a random delay in a race, a client
 * that works slowly on purpose); tests/check_no_sleep.sh fails on any
 * other sleep under tests/.
 *
 * Nothing here needs the store, libtally or NNG; it fails a Check test
 * through ck_abort_msg, so a wait in a thread other than the test's should
 * use TEST_WAITED_UNTIL and report in the test's thread.
 */
#ifndef TALLY_TESTS_WAIT_H
#define TALLY_TESTS_WAIT_H

#include "common/clock.h"

#include <stdbool.h>
#include <stdint.h>

/* How much slower than a plain build tests run under $TALLYD_WRAPPER
 * (valgrind) and AddressSanitizer, when $TALLY_TEST_SLOWDOWN does not say. */
#define TEST_SLOWDOWN_WRAPPER 6
#define TEST_SLOWDOWN_ASAN 3
/* The largest $TALLY_TEST_SLOWDOWN taken (a wait of 30 s becomes 50 min). */
#define TEST_SLOWDOWN_MAX 100
/* The pause between two looks of a wait, unscaled: short, so a fact is
 * seen soon after it holds. */
#define TEST_WAIT_POLL_MS 10

/* The factor every wait of a test is multiplied by, read once:
 * $TALLY_TEST_SLOWDOWN (a number from 1 to TEST_SLOWDOWN_MAX), else
 * TEST_SLOWDOWN_WRAPPER when $TALLYD_WRAPPER is set, else
 * TEST_SLOWDOWN_ASAN in an ASan build, else 1. A malformed
 * $TALLY_TEST_SLOWDOWN fails the test. */
double test_slowdown(void);
/* base_ms times test_slowdown(), rounded up. */
int64_t test_scaled_ms(int64_t base_ms);
/* clock_mono_ms() + test_scaled_ms(base_ms): a deadline on the monotonic
 * clock. */
int64_t test_deadline_ms(int64_t base_ms);
/* Pause ms milliseconds (unscaled; resumed after a signal): the only
 * sleep of the tests. A poll interval or a pause that is an input of the
 * test, never a synchronisation. */
void test_pause_ms(int64_t ms);
/* The same in microseconds, for a client whose work per message is paced
 * below a millisecond. */
void test_pause_us(int64_t us);
/* Fail the Check test: what (printf format and arguments) did not happen
 * within base_ms scaled. */
void test_wait_failed(int64_t base_ms, const char *what_format, ...)
    __attribute__((noreturn, format(printf, 2, 3)));

/* Wait until cond holds, looking every TEST_WAIT_POLL_MS, for base_ms
 * scaled; past that fail the test naming what was awaited (a printf
 * format and its arguments) and the bound. cond is evaluated once more
 * after the deadline passes, so a fact that holds by then passes. */
#define TEST_WAIT_UNTIL(cond, base_ms, ...)                                       \
    do {                                                                          \
        int64_t test_wait_deadline_ = test_deadline_ms(base_ms);                  \
        while (!(cond)) {                                                         \
            if (clock_mono_ms() >= test_wait_deadline_)                           \
                test_wait_failed((base_ms), __VA_ARGS__);                         \
            test_pause_ms(TEST_WAIT_POLL_MS);                                     \
        }                                                                         \
    } while (0)

/* The same wait as an expression: true once cond holds, false when
 * base_ms scaled passed first (the caller says what it saw). */
#define TEST_WAITED_UNTIL(cond, base_ms)                                          \
    ({                                                                            \
        int64_t test_wait_deadline_ = test_deadline_ms(base_ms);                  \
        bool test_wait_held_;                                                     \
        while (!(test_wait_held_ = (cond)) && clock_mono_ms() < test_wait_deadline_) \
            test_pause_ms(TEST_WAIT_POLL_MS);                                     \
        test_wait_held_;                                                          \
    })

#endif
