/*
 * duration.c — durations and retry schedules as text (duration.h).
 */
#include "common/duration.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

bool duration_parse(const char *text, uint64_t max_ms, uint64_t *out_ms)
{
    static const struct {
        const char *unit;
        uint64_t ms;
    } units[] = {{"ms", 1}, {"s", 1000}, {"m", 60000}, {"h", 3600000}, {"d", 86400000}};
    if (strcmp(text, "0") == 0) {
        *out_ms = 0;
        return true;
    }
    size_t digits = strspn(text, "0123456789");
    if (digits == 0 || digits > 9)
        return false;
    for (size_t i = 0; i < sizeof(units) / sizeof(units[0]); i++) {
        if (strcmp(text + digits, units[i].unit) != 0)
            continue;
        uint64_t v = strtoull(text, NULL, 10) * units[i].ms;
        if (v > max_ms)
            return false;
        *out_ms = v;
        return true;
    }
    return false;
}

void duration_text(uint64_t ms, char *out, size_t size)
{
    static const struct {
        const char *unit;
        uint64_t ms;
    } units[] = {{"d", 86400000}, {"h", 3600000}, {"m", 60000}, {"s", 1000}};
    for (size_t i = 0; ms && i < sizeof(units) / sizeof(units[0]); i++)
        if (ms % units[i].ms == 0) {
            snprintf(out, size, "%" PRIu64 "%s", ms / units[i].ms, units[i].unit);
            return;
        }
    snprintf(out, size, ms ? "%" PRIu64 "ms" : "0", ms);
}

bool duration_schedule_parse(const char *text, size_t n, uint32_t *ms, size_t *count, char *why,
                             size_t why_size)
{
    char copy[DURATION_SCHEDULE_TEXT_BYTES_MAX + 1];
    *count = 0;
    if (n > DURATION_SCHEDULE_TEXT_BYTES_MAX || memchr(text, '\0', n) != NULL) {
        snprintf(why, why_size, "at most %d bytes", DURATION_SCHEDULE_TEXT_BYTES_MAX);
        return false;
    }
    memcpy(copy, text, n);
    copy[n] = '\0';
    for (char *save, *p = strtok_r(copy, " ,", &save); p; p = strtok_r(NULL, " ,", &save)) {
        uint64_t v;
        if (*count == DURATION_SCHEDULE_STEPS_MAX) {
            snprintf(why, why_size, "more than %d attempts", DURATION_SCHEDULE_STEPS_MAX);
            return false;
        }
        if (!duration_parse(p, DURATION_SCHEDULE_DELAY_MS_MAX, &v)) {
            snprintf(why, why_size, "%.32s: a delay is 0 or a number with ms, s, m, h or d, at "
                                    "most 1d", p);
            return false;
        }
        if (*count == 0 && v != 0) {
            snprintf(why, why_size, "the first attempt's delay is 0 (at once)");
            return false;
        }
        ms[(*count)++] = (uint32_t)v;
    }
    if (*count == 0) {
        snprintf(why, why_size, "at least one attempt (0)");
        return false;
    }
    return true;
}
