/*
 * values.c — the values of `tally`'s arguments: transfer ids, RFC 3339 times and
 * durations, read from the command line (clients/json/format.c writes ids
 * and times back).
 */
#include "config.h"

#include "clients/cli/tally_cli.h"
#include "common/cli.h"

#include <inttypes.h>
#include <string.h>

/* A transfer id: exactly 32 hex digits (dashes anywhere are ignored), or a
 * decimal number n (1 .. 2^64-1) standing for the 16-byte big-endian n. */
bool parse_tid(const char *text, tally_uuid *out)
{
    if (tally_uuid_parse(text, out) == TALLY_ok)
        return true;
    uint64_t n;
    if (!cli_parse_u64(text, 0, UINT64_MAX, &n))
        return false;
    memset(out, 0, sizeof(*out));
    for (int i = 0; i < 8; i++)
        out->bytes[15 - i] = (uint8_t)(n >> (8 * i));
    return true;
}

/* Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant). */
static int64_t days_from_civil(int64_t y, unsigned m, unsigned d)
{
    y -= m <= 2;
    int64_t era = (y >= 0 ? y : y - 399) / 400;
    unsigned yoe = (unsigned)(y - era * 400);
    unsigned doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
    unsigned doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    return era * 146097 + (int64_t)doe - 719468;
}

static unsigned days_in_month(unsigned y, unsigned m)
{
    static const unsigned days[] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
    bool leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
    return m == 2 && leap ? 29 : days[m - 1];
}

/* Read exactly n digits at *p into *out; advance *p. */
static bool read_digits(const char **p, int n, unsigned *out)
{
    unsigned v = 0;
    for (int i = 0; i < n; i++) {
        char ch = (*p)[i];
        if (ch < '0' || ch > '9')
            return false;
        v = v * 10 + (unsigned)(ch - '0');
    }
    *p += n;
    *out = v;
    return true;
}

/* "[.fraction](Z | +hh:mm | -hh:mm)": adds the milliseconds of the fraction
 * to *ms and stores the offset east of UTC in minutes. */
static bool parse_fraction_and_offset(const char *p, int64_t *ms, int64_t *offset_min)
{
    if (*p == '.') {
        int n = 0;
        for (p++; *p >= '0' && *p <= '9'; p++, n++)
            if (n < 3)
                *ms += (*p - '0') * (n == 0 ? 100 : n == 1 ? 10 : 1);
        if (n == 0 || n > 9)
            return false;
    }
    if ((*p == 'Z' || *p == 'z') && p[1] == '\0') {
        *offset_min = 0;
        return true;
    }
    unsigned oh, om;
    int sign = *p == '+' ? 1 : *p == '-' ? -1 : 0;
    if (sign == 0)
        return false;
    p++;
    if (!read_digits(&p, 2, &oh) || *p++ != ':' || !read_digits(&p, 2, &om) || *p || oh > 23 ||
        om > 59)
        return false;
    *offset_min = sign * (int64_t)(oh * 60 + om);
    return true;
}

/* RFC 3339 date-time ("2027-01-01T00:00:00Z", "...T12:00:00.250+02:00") or a
 * bare date (midnight UTC) to Unix milliseconds, 1 .. TALLY_TIME_MS_MAX. */
bool parse_time(const char *text, int64_t *out)
{
    const char *p = text;
    unsigned y, mo, d, h = 0, mi = 0, s = 0;
    int64_t ms = 0, offset_min = 0;
    if (!read_digits(&p, 4, &y) || *p++ != '-' || !read_digits(&p, 2, &mo) || *p++ != '-' ||
        !read_digits(&p, 2, &d) || mo < 1 || mo > 12 || d < 1 || d > days_in_month(y, mo))
        return false;
    if (*p) {
        if (*p != 'T' && *p != 't' && *p != ' ')
            return false;
        p++;
        if (!read_digits(&p, 2, &h) || *p++ != ':' || !read_digits(&p, 2, &mi) || *p++ != ':' ||
            !read_digits(&p, 2, &s) || h > 23 || mi > 59 || s > 59)
            return false;
        if (!parse_fraction_and_offset(p, &ms, &offset_min))
            return false;
    }
    int64_t secs = days_from_civil(y, mo, d) * 86400 + h * 3600 + mi * 60 + s - offset_min * 60;
    int64_t total = secs * 1000 + ms;
    if (total < 1 || total > TALLY_TIME_MS_MAX)
        return false;
    *out = total;
    return true;
}

/* "30d", "12h", "90m", "45s", "1w", "500ms", or several: "1d12h". */
bool parse_duration(const char *text, int64_t *out)
{
    static const struct { const char *unit; int64_t ms; } units[] = {
        {"ms", 1}, {"s", 1000}, {"m", 60000}, {"h", 3600000}, {"d", 86400000}, {"w", 604800000}};
    int64_t total = 0;
    const char *p = text;
    if (!*p)
        return false;
    while (*p) {
        int64_t n = 0;
        const char *start = p;
        for (; *p >= '0' && *p <= '9'; p++)
            if (__builtin_mul_overflow(n, 10, &n) || __builtin_add_overflow(n, *p - '0', &n))
                return false;
        size_t u = 0;
        while (u < sizeof(units) / sizeof(units[0]) &&
               strncmp(p, units[u].unit, strlen(units[u].unit)) != 0)
            u++;
        if (p == start || u == sizeof(units) / sizeof(units[0]))
            return false;
        p += strlen(units[u].unit);
        if (__builtin_mul_overflow(n, units[u].ms, &n) || __builtin_add_overflow(total, n, &total))
            return false;
    }
    if (total < 1 || total > TALLY_GRANT_DURATION_MS_MAX)
        return false;
    *out = total;
    return true;
}
