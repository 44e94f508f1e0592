/*
 * openapi.h — the OpenAPI 3.1 description of the JSON API (docs/
 * openapi.json), generated from the tables the server itself runs on:
 * the op table's rows and field types (net/ops/op_table.c), the GET
 * resources of the JSON face (net/http/http_json.c), the error enum with
 * each code's HTTP status (net_json_status) and the value rule of
 * net/http/json_codec.c. `tallyd --openapi` prints it and
 * `GET /v1/openapi.json` serves the same bytes; a test compares
 * docs/openapi.json with it and validates it (tests/openapi/).
 */
#ifndef TALLY_NET_OPENAPI_H
#define TALLY_NET_OPENAPI_H

#include <stddef.h>

/* The document as JSON text (indented, a newline at the end), malloc'd:
 * the caller frees it. NULL when memory ran out. */
char *net_openapi_text(size_t *len);

#endif
