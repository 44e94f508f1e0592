/*
 * wait.c — the slowdown factor, deadlines and the one pause of the tests
 * (see wait.h).
 */
#include "tests/support/wait.h"

#include <check.h>
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#if defined(__SANITIZE_ADDRESS__)
#define TEST_UNDER_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define TEST_UNDER_ASAN 1
#endif
#endif
#ifndef TEST_UNDER_ASAN
#define TEST_UNDER_ASAN 0
#endif

static pthread_once_t slowdown_once = PTHREAD_ONCE_INIT;
static double slowdown = 1;
static const char *slowdown_bad; /* a $TALLY_TEST_SLOWDOWN not taken */

static void slowdown_read(void)
{
    const char *given = getenv("TALLY_TEST_SLOWDOWN");
    const char *wrapper = getenv("TALLYD_WRAPPER");
    if (given && *given) {
        char *end = NULL;
        errno = 0;
        double v = strtod(given, &end);
        if (errno == 0 && *end == '\0' && v >= 1 && v <= TEST_SLOWDOWN_MAX)
            slowdown = v;
        else
            slowdown_bad = given;
    } else if (wrapper && *wrapper) {
        slowdown = TEST_SLOWDOWN_WRAPPER;
    } else if (TEST_UNDER_ASAN) {
        slowdown = TEST_SLOWDOWN_ASAN;
    }
}

double test_slowdown(void)
{
    pthread_once(&slowdown_once, slowdown_read);
    ck_assert_msg(slowdown_bad == NULL, "TALLY_TEST_SLOWDOWN=%s is not a number from 1 to %d",
                  slowdown_bad, TEST_SLOWDOWN_MAX);
    return slowdown;
}

int64_t test_scaled_ms(int64_t base_ms)
{
    double scaled = (double)base_ms * test_slowdown();
    int64_t ms = (int64_t)scaled;
    return ms < scaled ? ms + 1 : ms;
}

int64_t test_deadline_ms(int64_t base_ms)
{
    return clock_mono_ms() + test_scaled_ms(base_ms);
}

void test_pause_us(int64_t us)
{
    if (us <= 0)
        return;
    struct timespec left = {(time_t)(us / 1000000), (long)(us % 1000000) * 1000L};
    while (nanosleep(&left, &left) != 0 && errno == EINTR)
        ;
}

void test_pause_ms(int64_t ms) { test_pause_us(ms * 1000); }

void test_wait_failed(int64_t base_ms, const char *what_format, ...)
{
    char what[512];
    va_list ap;
    va_start(ap, what_format);
    vsnprintf(what, sizeof(what), what_format, ap);
    va_end(ap);
    ck_abort_msg("waited %lld ms (%lld ms, slowdown %g) for: %s", (long long)test_scaled_ms(base_ms),
                 (long long)base_ms, test_slowdown(), what);
    abort(); /* ck_abort_msg does not return; the compiler is told so */
}
