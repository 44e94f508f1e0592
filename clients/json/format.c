/*
 * format.c — tally's values as text (format.h): transfer ids as 32 hex
 * digits and times as RFC 3339 UTC, as the CLI prints them, in its tables
 * and its JSON, and as tally-relay sends them.
 */
#include "config.h"

#include "clients/json/format.h"

#include <inttypes.h>
#include <stdio.h>
#include <time.h>

/* 32 lower-case hex digits: the UUID's text without its dashes. */
void tid_format(const tally_uuid *id, char out[33])
{
    char text[37];
    size_t n = 0;
    tally_uuid_format(id, text);
    for (const char *p = text; *p; p++)
        if (*p != '-')
            out[n++] = *p;
    out[n] = '\0';
}

/* Unix ms to "2027-01-01T00:00:00Z" (".250" added when not a whole second). */
void time_format(int64_t ms, char out[40])
{
    time_t secs = (time_t)(ms >= 0 ? ms / 1000 : (ms - 999) / 1000);
    int frac = (int)(ms - (int64_t)secs * 1000);
    struct tm tm;
    if (!gmtime_r(&secs, &tm)) {
        snprintf(out, 40, "%" PRId64 "ms", ms);
        return;
    }
    size_t n = strftime(out, 40, "%Y-%m-%dT%H:%M:%S", &tm);
    if (frac)
        snprintf(out + n, 40 - n, ".%03dZ", frac);
    else
        snprintf(out + n, 40 - n, "Z");
}
