/*
 * json_text.h — a stored string as a JSON string, for the programs that
 * print or send JSON (the tally CLI, tally-relay, tally-recon,
 * tally-readmodel) and tallyd's HTTP face (the event document,
 * common/event_doc.h). Strings reach the store over msgpack as any bytes, and
 * jansson refuses one that is not UTF-8; these follow the JSON API's rule
 * (docs/PROTOCOL.md) instead of failing.
 */
#ifndef TALLY_JSON_TEXT_H
#define TALLY_JSON_TEXT_H

#include <jansson.h>

/* s as a JSON string: as it is when it is UTF-8, else each byte above
 * 0x7f as U+FFFD. A new reference; NULL when s is NULL or out of memory. */
json_t *json_text(const char *s);
/* The same for n bytes (s NULL: NULL), NULs included. */
json_t *json_textn(const char *s, size_t n);

#endif
