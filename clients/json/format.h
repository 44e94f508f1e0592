/*
 * format.h — tally's values as text (format.c), shared by the CLI and
 * tally-relay: what their JSON (json.h) and the CLI's tables print.
 */
#ifndef TALLY_CLIENTS_JSON_FORMAT_H
#define TALLY_CLIENTS_JSON_FORMAT_H

#include "clients/libtally/tally.h"

#include <stdint.h>

/* 32 lower-case hex digits and a NUL. */
void tid_format(const tally_uuid *id, char out[33]);
/* Unix ms to "2027-01-01T00:00:00Z" (".250" added when not a whole second);
 * out of gmtime's range, the number followed by "ms". */
void time_format(int64_t ms, char out[40]);

#endif
