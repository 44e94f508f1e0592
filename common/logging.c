/*
 * logging.c — tallyd's log lines (see logging.h).
 */
#include "common/logging.h"

#include <stdarg.h>
#include <stdio.h>
#include <time.h>

static net_log_level log_level = NET_LOG_INFO;
static const char *log_program = "tallyd";

void net_log_set_level(net_log_level level) { log_level = level; }
void net_log_set_program(const char *name) { log_program = name; }

void net_log(net_log_level level, const char *fmt, ...)
{
    static const char *names[] = {"error", "warn", "info", "debug"};
    if (level > log_level)
        return;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    struct tm tm;
    gmtime_r(&ts.tv_sec, &tm);
    char when[32];
    strftime(when, sizeof(when), "%Y-%m-%dT%H:%M:%S", &tm);
    char line[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof(line), fmt, ap);
    va_end(ap);
    fprintf(stderr, "%s.%03ldZ %s %s: %s\n", when, ts.tv_nsec / 1000000, log_program, names[level],
            line);
}
