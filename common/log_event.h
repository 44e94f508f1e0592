/*
 * log_event.h — the event codec: encode, decode (bounded, checked) and hash
 * one event of the log (docs/EVENTS.md), as stored and as sent on the wire.
 * Pure bytes in, bytes out: no LMDB here, so tallyd's log (log/log.c),
 * libtally's stream and durable subscriber (clients/libtally/events.c), the
 * subscriber-side inbox, tally-relay and tally-recon all share this one
 * codec; it sits in common/ because both sides of the wire use it.
 *
 * Two formats are read; format 2 is written:
 *   1: a map of 12 named fields, bodies of named maps (stores written
 *      before format 2; 700-900 bytes for a transfer);
 *   2: an array of the same 12 fields in the same order, and bodies of rows
 *      (docs/EVENTS.md; about 300 bytes for a transfer).
 * Chain: hash = SHA-256(prev_hash || event bytes without the trailing hash
 * entry). The trailing entry is the last 34 bytes in format 2 (bin8 header,
 * 32 bytes) and the last 39 in format 1 (fixstr "hash" before them). The
 * first event's prev_hash is 32 zero bytes; the chain runs across formats.
 */
#ifndef TALLY_COMMON_LOG_EVENT_H
#define TALLY_COMMON_LOG_EVENT_H

#include "common/bytes.h"

#include <msgpack.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define LOG_HASH_BYTES 32
#define LOG_HASH_ENTRY_BYTES 34    /* format 2: c4 20 + 32 bytes */
#define LOG_HASH_ENTRY_BYTES_V1 39 /* format 1: a4 'h' 'a' 's' 'h' c4 20 + 32 bytes */
#define LOG_EVENT_FORMAT 2         /* the format written */
#define LOG_EVENT_FORMAT_V1 1      /* still read */

typedef enum log_entity_kind {
    LOG_ENTITY_ACCOUNT = 1,
    LOG_ENTITY_TRANSFER = 2,
    LOG_ENTITY_ENTITLEMENT = 3,
    LOG_ENTITY_DEAD_LETTER = 4, /* a subscriber's dead letter: subscriber, seq */
    LOG_ENTITY_WEBHOOK = 5,     /* a received webhook delivery: source, event id */
    LOG_ENTITY_SUBSCRIBER = 6,  /* a durable subscriber: its name (in subscriber) */
    LOG_ENTITY_ENDPOINT = 7,    /* an outbound webhook endpoint of tally-relay: name */
} log_entity_kind;
#define LOG_ENTITY_KIND_LAST LOG_ENTITY_ENDPOINT

/* The entity an event is about; which members are used depends on kind. */
typedef struct log_entity {
    log_entity_kind kind;
    uint64_t account_id;
    tally_id128 transfer_id;
    tally_str subject;
    tally_str feature;
    tally_str subscriber; /* dead letters: the subscriber's name */
    uint64_t letter_seq;  /* and the seq of the event it parked */
    tally_str webhook_source;   /* webhooks: the source's name (--webhooks) */
    tally_str webhook_event_id; /* and the provider's event id */
    tally_str endpoint;         /* endpoints: the endpoint's name */
} log_entity;

/* The event types, each with its wire name, once (docs/EVENTS.md). The
 * name is what the wire carries and the chain hashes, so a name never
 * changes; the enum's number (the row, from 1) is what the log's stored
 * form keeps instead of the name (log/stored_event.h), so rows are only
 * ever appended: a new type is one row at the end (and its section in
 * docs/EVENTS.md). */
#define LOG_EVENT_TYPES(X)                                \
    X(LOG_EVENT_ACCOUNT_OPENED, "account.opened")         \
    X(LOG_EVENT_TRANSFER_CREATED, "transfer.created")     \
    X(LOG_EVENT_TRANSFER_POSTED, "transfer.posted")       \
    X(LOG_EVENT_TRANSFER_VOIDED, "transfer.voided")       \
    X(LOG_EVENT_TRANSFER_EXPIRED, "transfer.expired")     \
    X(LOG_EVENT_ENTITLEMENT_GRANTED, "entitlement.granted")   \
    X(LOG_EVENT_ENTITLEMENT_EXTENDED, "entitlement.extended") \
    X(LOG_EVENT_ENTITLEMENT_REVOKED, "entitlement.revoked")   \
    X(LOG_EVENT_ENTITLEMENT_EXPIRED, "entitlement.expired")   \
    X(LOG_EVENT_DEAD_LETTER_EXPIRED, "dead_letter.expired")   \
    X(LOG_EVENT_WEBHOOK_RECEIVED, "webhook.received")       \
    X(LOG_EVENT_SUBSCRIBER_EXPIRED, "subscriber.expired")    \
    X(LOG_EVENT_ENDPOINT_DISABLED, "endpoint.disabled")       \
    X(LOG_EVENT_ENDPOINT_ENABLED, "endpoint.enabled")         \
    X(LOG_EVENT_ENDPOINT_SECRET_ROTATED, "endpoint.secret_rotated") \
    X(LOG_EVENT_ENDPOINT_RECOVER_REQUESTED, "endpoint.recover_requested") \
    X(LOG_EVENT_ENDPOINT_RECOVERED, "endpoint.recovered")                 \
    X(LOG_EVENT_ENDPOINT_CREATED, "endpoint.created")                     \
    X(LOG_EVENT_ENDPOINT_UPDATED, "endpoint.updated")                     \
    X(LOG_EVENT_ENDPOINT_DELETED, "endpoint.deleted")

typedef enum log_event_type {
    LOG_EVENT_TYPE_NONE = 0, /* no type: ends lists, never written */
#define LOG_EVENT_TYPE_ENUM(id, name) id,
    LOG_EVENT_TYPES(LOG_EVENT_TYPE_ENUM)
#undef LOG_EVENT_TYPE_ENUM
    LOG_EVENT_TYPE_END /* one past the last type */
} log_event_type;

/* The wire name of a type ("account.opened", ...), a static string; NULL
 * for LOG_EVENT_TYPE_NONE and numbers that are no type. */
const char *log_event_type_name(log_event_type type);

/* The type a decoded event's name names: true with *out set, or false
 * (with *out LOG_EVENT_TYPE_NONE) for a name that is no type this build
 * writes (a reader must still accept it: the log may be newer). */
bool log_event_type_of(tally_str name, log_event_type *out);

/* What an event says before the log gives it a seq, an id and its place in
 * the chain (log_append's arguments). */
typedef struct log_event_draft {
    log_event_type type; /* written as log_event_type_name(type) */
    /* Packs the body: a msgpack array of rows, in the order of
     * log_body_part for the entity's kind (docs/EVENTS.md). */
    log_entity entity;
    uint64_t entity_version;
    int64_t time_ms;
    tally_str consumer; /* causation; len 0 = none (sweeps) */
    tally_str key;
    tally_str correlation; /* len 0 = none */
    /* Packs the body (one msgpack object) into pk; returns 0 on success. */
    int (*pack_body)(msgpack_packer *pk, const void *ctx);
    const void *body_ctx;
} log_event_draft;

/* A decoded event. Strings, the body and the raw bytes point into the buffer
 * given to log_event_decode, which must outlive this struct. */
typedef struct log_event {
    unsigned format; /* LOG_EVENT_FORMAT or LOG_EVENT_FORMAT_V1 */
    uint64_t seq;
    tally_id128 id;
    tally_str type;
    log_entity entity;
    uint64_t entity_version;
    int64_t time_ms;
    bool has_causation;
    tally_str consumer;
    tally_str key;
    tally_str correlation;
    const msgpack_object *body; /* format 1: a map; 2: an array (log_event_part) */
    uint8_t prev_hash[LOG_HASH_BYTES];
    uint8_t hash[LOG_HASH_BYTES];
    const uint8_t *raw;
    size_t raw_len;
} log_event;

/* Whether a decoded event is of type (its name is type's wire name). */
bool log_event_type_is(const log_event *ev, log_event_type type);

/* Encode draft as the event seq with id, chained to prev_hash, into buf
 * (capacity bytes): *len gets its size and hash its chain hash. Returns
 * TALLY_ok, or TALLY_internal when it does not fit or packing failed. */
int log_event_encode(const log_event_draft *draft, uint64_t seq, const tally_id128 *id,
                     const uint8_t prev_hash[LOG_HASH_BYTES], uint8_t *buf, size_t capacity,
                     size_t *len, uint8_t hash[LOG_HASH_BYTES]);

/* Decode and check one stored event of either format: at most
 * TALLY_EVENT_BYTES_MAX bytes, counts bounded before msgpack-c allocates,
 * exactly the 12 fields of the format with their types, a body with the
 * parts of its entity's kind, the hash entry trailing, and the declared hash
 * matching prev_hash and the bytes (the event's own integrity; whether
 * prev_hash is the previous event's hash is for the reader who knows it).
 * unpacked must be initialised by the caller (msgpack_unpacked_init) and
 * destroyed after use. Returns TALLY_ok or TALLY_corrupt_record. */
int log_event_decode(const void *bytes, size_t len, msgpack_unpacked *unpacked,
                     log_event *out);

/* log_event_decode into a zone the caller owns (and clears with
 * msgpack_zone_clear before reusing it for the next event), with the root
 * object in *root: for readers of many events, no allocation per event.
 * *root and zone must outlive out. */
int log_event_decode_in(const void *bytes, size_t len, msgpack_zone *zone, msgpack_object *root,
                        log_event *out);

/* log_event_decode_in without the hash check (fields, types and counts
 * are checked all the same): for a reader of its own store's events that
 * needs a field of many of them again and again (a partitioned
 * subscriber's fetch places each in-flight event by its entity), where
 * the SHA-256 of every event each time would cost more than the rest.
 * out->hash is the declared one, unchecked. */
int log_event_peek_in(const void *bytes, size_t len, msgpack_zone *zone, msgpack_object *root,
                      log_event *out);

/* Compute the hash an event of either format must carry, from prev_hash and
 * its bytes. TALLY_ok, or TALLY_corrupt_record when the bytes are of
 * neither format (by their first byte) or shorter than the hash entry. */
int log_event_hash(const uint8_t prev_hash[LOG_HASH_BYTES], const void *bytes, size_t len,
                   uint8_t out[LOG_HASH_BYTES]);

/* The parts of an event body, by role. */
typedef enum log_body_part {
    LOG_PART_ACCOUNT,        /* account events: the account */
    LOG_PART_TRANSFER,       /* transfer events: the transfer, */
    LOG_PART_DEBIT_ACCOUNT,  /* its debit account */
    LOG_PART_CREDIT_ACCOUNT, /* and its credit account, after the change */
    LOG_PART_ENTITLEMENT,    /* entitlement events: the entitlement */
    LOG_PART_DEAD_LETTER,    /* dead-letter events: the dead letter */
    LOG_PART_WEBHOOK,        /* webhook events: the delivery */
    LOG_PART_SUBSCRIBER,     /* subscriber events: the subscriber */
    LOG_PART_ENDPOINT,       /* endpoint events: [name, state, reason, overlap_until_ms,
                                recover_since_ms] */
} log_body_part;

/* The part of a decoded event's body (a map in format 1, a row in 2: read
 * either with the ledger's or libtally's unpack functions), or NULL when
 * the event's kind has no such part. log_body_part_of does the same from a
 * body and its entity's kind. */
const msgpack_object *log_event_part(const log_event *ev, log_body_part part);
const msgpack_object *log_body_part_of(const msgpack_object *body, log_entity_kind kind,
                                       log_body_part part);

/* The closed vocabularies of bodies: a state is its name in a map (format
 * 1, replies) and its number in a row (format 2). The name of a number, or
 * NULL when it names none. Transfers: 1 posted, 2 pending, 3 pending_posted,
 * 4 pending_voided, 5 pending_expired. Entitlements: 1 active, 2 revoked,
 * 3 expired. */
const char *log_transfer_state_name(uint64_t state);
const char *log_entitlement_state_name(uint64_t state);

/* Name of an entity kind ("account", "transfer", "entitlement",
 * "dead_letter", "webhook"). */
const char *log_entity_kind_name(log_entity_kind kind);

#endif
