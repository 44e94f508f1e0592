/*
 * duration.h — durations as operators write them ("0", "250ms", "5s",
 * "30m", "10h", "3d") and an endpoint's retry schedule, a list of them:
 * one rule for tally-relay's config file and tallyd's endpoint_create and
 * endpoint_update (docs/RELAY.md, "Retry schedule and disabled
 * endpoints").
 */
#ifndef TALLY_COMMON_DURATION_H
#define TALLY_COMMON_DURATION_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define DURATION_SCHEDULE_STEPS_MAX 64          /* attempts of a retry schedule */
#define DURATION_SCHEDULE_DELAY_MS_MAX 86400000u /* one delay: at most a day */
#define DURATION_SCHEDULE_TEXT_BYTES_MAX 512     /* a schedule as text */

/* A duration: "0", or 1-9 digits with a unit ms, s, m, h or d; false when
 * it is none or over max_ms. */
bool duration_parse(const char *text, uint64_t max_ms, uint64_t *out_ms);
/* The shortest text of ms in the units duration_parse reads. */
void duration_text(uint64_t ms, char *out, size_t size);
/* A retry schedule: the n bytes of text, delays separated by spaces or
 * commas, at least one, at most DURATION_SCHEDULE_STEPS_MAX, the first
 * 0 (at once), each at most a day, into ms[] (*count of them). false,
 * with why, for anything else. */
bool duration_schedule_parse(const char *text, size_t n, uint32_t *ms, size_t *count, char *why,
                             size_t why_size);

#endif
