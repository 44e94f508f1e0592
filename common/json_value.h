/*
 * json_value.h — tally's values as JSON values (json_value.c), the JSON
 * API's value rule (docs/PROTOCOL.md, "The value rule") in one place: the
 * HTTP face's replies (net/http/json_codec.c) and the event document
 * (common/event_doc.c) that tallyd's HTTP face and tally-relay send.
 */
#ifndef TALLY_COMMON_JSON_VALUE_H
#define TALLY_COMMON_JSON_VALUE_H

#include <jansson.h>
#include <stdint.h>

/* Integers beyond this (either sign) are decimal strings: JSON numbers
 * are exact only up to 2^53. */
#define JSON_VALUE_EXACT_INT_MAX (UINT64_C(1) << 53)

/* An integer by the rule: a JSON integer up to ±2^53, else its decimal
 * text. Each returns a new reference, NULL when out of memory. */
json_t *json_value_u64(uint64_t v);
json_t *json_value_i64(int64_t v);
/* 16 bytes (a transfer id) as 32 lower-case hex digits. */
json_t *json_value_id(const uint8_t bytes[16]);
/* Unix ms as RFC 3339 UTC text ("2027-01-01T00:00:00Z", ".250" added when
 * not a whole second; out of gmtime's range, the number and "ms"). */
json_t *json_value_time(int64_t ms);
void json_value_time_format(int64_t ms, char out[40]);

#endif
