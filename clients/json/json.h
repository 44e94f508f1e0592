/*
 * json.h — tally's objects as JSON (json.c): what `tally --json` prints
 * and tally-relay sends (libtallyjson, linked by both). Each returns a new
 * reference, NULL when out of memory.
 */
#ifndef TALLY_CLIENTS_JSON_H
#define TALLY_CLIENTS_JSON_H

#include "clients/json/format.h"
#include "clients/libtally/tally.h"
#include "common/json_text.h"

#include <jansson.h>

/* JSON integers are signed 64-bit: larger values (account ids) become strings. */
json_t *json_u64(uint64_t v);
json_t *json_time(int64_t ms); /* RFC 3339 UTC text */
json_t *json_tid(const tally_uuid *id); /* 32 hex digits */
json_t *account_json(const tally_account *a);
json_t *transfer_json(const tally_transfer_info *x);
json_t *entitlement_json(const tally_entitlement *e);
/* {seq, event_id, type, entity_kind, entity, entity_version, time,
 * time_ms, consumer?, key?}: an event without its body. */
json_t *event_json(const tally_event *e);

#endif
