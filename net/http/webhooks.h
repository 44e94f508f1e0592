/*
 * webhooks.h — webhook intake: the sources of `tallyd --webhooks FILE`
 * and how a delivery is verified (docs/WEBHOOKS.md).
 *
 * The file has one source per line, `NAME SCHEME SECRET-FILE[,SECRET-FILE...]
 * [OPTION=VALUE...]`, `#` starting a comment. Schemes: standard (Standard
 * Webhooks), stripe, hmac-sha256 (GitHub style). A source's secrets are
 * read once at start; a secret file that its group or others may read, a
 * weak secret (webhook_config.c), or any error in the file refuses the
 * start (with the file's name and line). A delivery is deduped on what
 * its signature covers: an hmac-sha256 signature covers the body alone,
 * so its event id is the body's SHA-256 or a field of the body, never an
 * unsigned header. A verified delivery becomes a webhook_receive command
 * (ledger/webhook.h) that goes through the writer like any write
 * (net/http/webhooks.c).
 */
#ifndef TALLY_NET_WEBHOOKS_H
#define TALLY_NET_WEBHOOKS_H

#include "common/bytes.h"
#include "common/limits.h"

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum webhook_scheme {
    WEBHOOK_STANDARD, /* webhook-id, webhook-timestamp, webhook-signature: v1,<base64> */
    WEBHOOK_STRIPE,   /* Stripe-Signature: t=...,v1=<hex>; id and type from the JSON body */
    WEBHOOK_HMAC,     /* <signature_header>: sha256=<hex of the body's HMAC>; id and type
                       * from the body (the signature covers nothing else) */
} webhook_scheme;

/* What happened to deliveries, a counter each (tally_webhooks_total). */
typedef enum webhook_outcome {
    WEBHOOK_ACCEPTED,      /* 200: stored */
    WEBHOOK_REPLAYED,      /* 200 with Idempotent-Replayed: nothing stored */
    WEBHOOK_CONFLICT,      /* 409: the id came before with another body */
    WEBHOOK_BAD_SIGNATURE, /* 401: missing or wrong signature */
    WEBHOOK_STALE,         /* 401: timestamp older than the tolerance, 0, or not seconds */
    WEBHOOK_CLOCK_SKEW,    /* 401: timestamp more than the tolerance ahead of tallyd's clock */
    WEBHOOK_BAD_REQUEST,   /* 400: no event id, an id or type too long, a malformed body */
    WEBHOOK_TOO_LARGE,     /* 413 */
    WEBHOOK_UNAVAILABLE,   /* 503: overloaded, stopping, or a fault (nothing stored) */
    WEBHOOK_OUTCOMES
} webhook_outcome;

typedef struct webhook_secret {
    uint8_t bytes[TALLY_WEBHOOK_SECRET_BYTES_MAX]; /* the HMAC key */
    size_t len;
} webhook_secret;

typedef struct webhook_source {
    char name[TALLY_WEBHOOK_SOURCE_BYTES_MAX + 1];
    char consumer[TALLY_CONSUMER_BYTES_MAX + 1]; /* "webhook:" name */
    webhook_scheme scheme;
    webhook_secret secrets[TALLY_WEBHOOK_SECRETS_MAX];
    unsigned secret_count;
    unsigned tolerance_s;        /* standard, stripe */
    char signature_header[64];   /* hmac-sha256 */
    char id_field[64];           /* hmac-sha256: the event id from this top-level JSON
                                  * string field; "": the hex SHA-256 of the body */
    char type_field[64];         /* hmac-sha256: the event type from this top-level JSON
                                  * string field; "": no type */
    atomic_uint_fast64_t outcomes[WEBHOOK_OUTCOMES];
} webhook_source;

typedef struct net_webhooks {
    webhook_source *sources;
    unsigned count;
    atomic_uint_fast64_t unknown_source; /* 404s */
} net_webhooks;

/* Read the sources file path and the secret files it names. TALLY_ok, or
 * TALLY_invalid_argument with the reason (file name and line) in error. */
int webhooks_load(const char *path, net_webhooks **out, char *error, size_t error_size);
/* The same from text (len bytes, not NUL-terminated) instead of a file;
 * name stands for the file's name in errors. For the fuzz target
 * (tests/fuzz/fuzz_webhook.c) and tests. */
int webhooks_parse(const char *name, const char *text, size_t len, net_webhooks **out,
                   char *error, size_t error_size);
void webhooks_free(net_webhooks *w);
webhook_source *webhooks_find(net_webhooks *w, const char *name);
const char *webhook_outcome_name(webhook_outcome o);

/* A delivery to verify: the headers it needs (NULL when absent) and its body. */
typedef struct webhook_delivery {
    const char *(*header)(const void *ctx, const char *name);
    const void *header_ctx;
    const char *body;
    size_t body_len;
    int64_t now_s;
} webhook_delivery;

/* What verification found. Strings point into the headers or into text. */
typedef struct webhook_verified {
    tally_str event_id;
    tally_str event_type; /* len 0: none */
    int64_t signed_at_s;  /* 0: the scheme signs no time */
    char text[TALLY_WEBHOOK_EVENT_ID_BYTES_MAX + TALLY_WEBHOOK_EVENT_TYPE_BYTES_MAX + 2];
} webhook_verified;

/* Check d's signature against every secret of src (in constant time), its
 * timestamp against the tolerance, and find its event id and type.
 * WEBHOOK_ACCEPTED when it may be stored, else WEBHOOK_BAD_SIGNATURE,
 * WEBHOOK_STALE, WEBHOOK_BAD_REQUEST, WEBHOOK_TOO_LARGE (a body over
 * TALLY_WEBHOOK_BODY_BYTES_MAX) or WEBHOOK_UNAVAILABLE (out of memory). */
webhook_outcome webhook_verify(const webhook_source *src, const webhook_delivery *d,
                               webhook_verified *out);

#endif
