/*
 * json_codec.h — JSON requests as msgpack requests, msgpack replies as
 * JSON, both driven by the op table (docs/PROTOCOL.md, "JSON API").
 *
 * No op has a JSON parser of its own: a JSON request is packed into the
 * msgpack request map the wire decoder (net/ops/protocol.c) takes, each value
 * converted by the type its field has in the op's row (net/ops/op_table.c) —
 * an id from 32 hex digits to 16 bytes, an integer from a decimal string,
 * a bool from the words true and false only in a GET's query arguments —
 * and everything else packed as it is, so the decoder's own checks
 * (unknown, missing, wrong type, out of range) answer for JSON exactly as
 * for msgpack. A reply goes the other way by one generic walk: maps,
 * arrays, strings, booleans and nil as such; integers beyond 2^53 as
 * decimal strings; 16-byte bins as 32 hex digits, other bins as base64;
 * the events of log_read and sub_fetch as their JSON documents
 * (common/event_doc.h), or as base64 bytes when the client asks for them.
 */
#ifndef TALLY_NET_JSON_CODEC_H
#define TALLY_NET_JSON_CODEC_H

#include "common/json_value.h"
#include "net/ops/protocol.h"

#include <jansson.h>
#include <msgpack.h>
#include <stdbool.h>
#include <stddef.h>

/* Integers beyond this (either sign) are decimal strings in replies. */
#define NET_JSON_EXACT_INT_MAX JSON_VALUE_EXACT_INT_MAX

/* What a JSON request is sent as, besides its body's fields. */
typedef struct net_json_envelope {
    const net_op *op;
    const char *consumer; /* writes: the key namespace */
    const char *key;      /* writes: the idempotency key; for a batch, member
                           * i without its own key gets net_derived_key(key, i) */
    tally_str auth;       /* the Bearer token (the request's `auth`); ptr NULL: none */
    bool query;           /* the fields are a GET's query arguments, all text:
                           * booleans come as "true" and "false" */
} net_json_envelope;

/* Pack body (a JSON object; NULL: none) as the msgpack request of e->op
 * into pk. TALLY_ok, or TALLY_malformed_request (not an object, nested
 * deeper than TALLY_MSGPACK_DEPTH_MAX, a key that starts with the byte
 * derived keys start with), TALLY_unknown_field (`auth` among the fields:
 * over HTTP the token is the Authorization header) or TALLY_overloaded
 * (out of memory), with detail filled. Other field errors are left to the
 * wire decoder. */
int net_json_request_pack(const net_json_envelope *e, const json_t *body, msgpack_packer *pk,
                          char *detail, size_t detail_size);

/* Whether a required field of op may be left out of a JSON request's
 * body because the JSON face derives it (a transfer's `id`, from the
 * consumer and key; not in chain or batch members). */
bool net_json_field_derived(const net_op *op, const char *field);

/* j (its reference taken; NULL: none) as text by json_dumps with flags,
 * keys in order, and a newline at the end; malloc'd (the caller frees
 * it), *len its length. NULL when memory ran out. */
char *net_json_text(json_t *j, size_t flags, size_t *len);

/* A msgpack reply as JSON (compact, a newline at the end). With
 * event_docs, the events it carries (the bins of an "events" array, the
 * bin under "event") are their JSON documents (common/event_doc.h); else
 * base64 like other bins. *text is malloc'd (the caller frees it), *code
 * the reply's `code` (-1 when it has none), *replayed its top-level
 * `replayed`. TALLY_ok, or TALLY_internal when the bytes are not one
 * msgpack map, an event does not decode, or memory ran out. */
int net_json_reply(const void *bytes, size_t len, bool event_docs, char **text, size_t *text_len,
                   int *code, bool *replayed);

/* The HTTP status of a reply with this code (-1: none): the rows of
 * docs/PROTOCOL.md's status table (ok 200, idempotency_key_reused 409, the
 * not-found codes 404, request_too_large 413, overloaded, storage_full and
 * shutting_down 503), else by class: B and V 422, R 400, F 500. */
unsigned net_json_status(int code);

#endif
