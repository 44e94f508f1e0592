/*
 * format.c — tally's values as text (format.h): transfer ids as 32 hex
 * digits and times as RFC 3339 UTC, as the CLI prints them, in its tables
 * and its JSON, and as tally-relay sends them.
 */
#include "config.h"

#include "clients/json/format.h"

#include "common/json_value.h"

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

/* Unix ms to "2027-01-01T00:00:00Z" (".250" added when not a whole second):
 * the JSON value rule's time text (common/json_value.c). */
void time_format(int64_t ms, char out[40])
{
    json_value_time_format(ms, out);
}
