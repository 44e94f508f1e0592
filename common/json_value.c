/*
 * json_value.c — tally's values as JSON values (json_value.h): the
 * integer rule, ids as hex, times as RFC 3339.
 */
#include "common/json_value.h"

#include "common/bytes.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

static json_t *decimal_text(bool negative, uint64_t magnitude)
{
    char text[24];
    snprintf(text, sizeof(text), "%s%" PRIu64, negative ? "-" : "", magnitude);
    return json_string(text);
}

json_t *json_value_u64(uint64_t v)
{
    return v <= JSON_VALUE_EXACT_INT_MAX ? json_integer((json_int_t)v) : decimal_text(false, v);
}

json_t *json_value_i64(int64_t v)
{
    if (v >= 0)
        return json_value_u64((uint64_t)v);
    return v >= -(int64_t)JSON_VALUE_EXACT_INT_MAX ? json_integer((json_int_t)v)
                                                   : decimal_text(true, (uint64_t)0 - (uint64_t)v);
}

json_t *json_value_id(const uint8_t bytes[16])
{
    tally_id128 id;
    char hex[33];
    memcpy(id.bytes, bytes, 16);
    tally_id128_to_hex(&id, hex);
    return json_string(hex);
}

void json_value_time_format(int64_t ms, char out[40])
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

json_t *json_value_time(int64_t ms)
{
    char text[40];
    json_value_time_format(ms, text);
    return json_string(text);
}
