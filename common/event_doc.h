/*
 * event_doc.h — an event as a JSON document (event_doc.c): what tallyd's
 * HTTP face gives for the events of /v1/log, /v1/sub_fetch and
 * /v1/events (docs/PROTOCOL.md, "The event document") and what tally-relay
 * sends (docs/RELAY.md), one definition for both. It is made from the
 * event's stored bytes (either format, docs/EVENTS.md) by the log's own
 * codec, so it sits in common/: the server and the clients both link it.
 */
#ifndef TALLY_COMMON_EVENT_DOC_H
#define TALLY_COMMON_EVENT_DOC_H

#include <jansson.h>
#include <stddef.h>

/* The document of the event whose stored bytes are bytes (len of them):
 * {seq, event_id, type, entity_kind, entity, entity_version, time,
 * time_ms, consumer?, key?, data}, integers by the JSON value rule
 * (common/json_value.h). TALLY_ok with *out a new reference, or
 * TALLY_corrupt_record (the bytes are no event, or a body part does not
 * decode), TALLY_out_of_memory. */
int event_doc_json(const void *bytes, size_t len, json_t **out);

/* The same as compact text without a newline, malloc'd (the caller frees
 * it), *text_len its length; TALLY_corrupt_record also when it is longer
 * than max_bytes. */
int event_doc_text(const void *bytes, size_t len, size_t max_bytes, char **text,
                   size_t *text_len);

#endif
