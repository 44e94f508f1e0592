/*
 * event.h — the event codec: encode, decode (bounded, checked) and hash one
 * stored event (docs/EVENTS.md). Pure bytes in, bytes out: no LMDB here, so
 * tallyd's log (log/log.c), libtally's stream and durable subscriber, the
 * subscriber-side inbox and tally-recon all share this one codec.
 *
 * Chain: hash = SHA-256(prev_hash || event bytes without the trailing
 * "hash" entry), where the trailing entry is always the last 39 bytes of
 * the encoded event (fixstr "hash", bin8 header, 32 bytes). The first
 * event's prev_hash is 32 zero bytes.
 */
#ifndef TALLY_LOG_EVENT_H
#define TALLY_LOG_EVENT_H

#include "common/bytes.h"

#include <msgpack.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define LOG_HASH_BYTES 32
#define LOG_HASH_ENTRY_BYTES 39 /* a4 'h' 'a' 's' 'h' c4 20 + 32 bytes */
#define LOG_EVENT_FORMAT 1

typedef enum log_entity_kind {
    LOG_ENTITY_ACCOUNT = 1,
    LOG_ENTITY_TRANSFER = 2,
    LOG_ENTITY_ENTITLEMENT = 3,
} log_entity_kind;

/* The entity an event is about; which members are used depends on kind. */
typedef struct log_entity {
    log_entity_kind kind;
    uint64_t account_id;
    tally_id128 transfer_id;
    tally_str subject;
    tally_str feature;
} log_entity;

/* What an event says before the log gives it a seq, an id and its place in
 * the chain (log_append's arguments). */
typedef struct log_event_draft {
    const char *type; /* "account.opened", ... (docs/EVENTS.md) */
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
    const msgpack_object *body;
    uint8_t prev_hash[LOG_HASH_BYTES];
    uint8_t hash[LOG_HASH_BYTES];
    const uint8_t *raw;
    size_t raw_len;
} log_event;

/* Encode draft as the event seq with id, chained to prev_hash, into buf
 * (capacity bytes): *len gets its size and hash its chain hash. Returns
 * TALLY_ok, or TALLY_internal when it does not fit or packing failed. */
int log_event_encode(const log_event_draft *draft, uint64_t seq, const tally_id128 *id,
                     const uint8_t prev_hash[LOG_HASH_BYTES], uint8_t *buf, size_t capacity,
                     size_t *len, uint8_t hash[LOG_HASH_BYTES]);

/* Decode and check one stored event: at most TALLY_EVENT_BYTES_MAX bytes,
 * counts bounded before msgpack-c allocates, exactly the 12 fields of the
 * format with their types, the hash entry trailing, and the declared hash
 * matching prev_hash and the bytes (the event's own integrity; whether
 * prev_hash is the previous event's hash is for the reader who knows it).
 * unpacked must be initialised by the caller (msgpack_unpacked_init) and
 * destroyed after use. Returns TALLY_ok or TALLY_corrupt_record. */
int log_event_decode(const void *bytes, size_t len, msgpack_unpacked *unpacked,
                     log_event *out);

/* Compute the hash an event must carry, from prev_hash and its bytes.
 * TALLY_ok, or TALLY_corrupt_record when len is shorter than the hash entry. */
int log_event_hash(const uint8_t prev_hash[LOG_HASH_BYTES], const void *bytes, size_t len,
                   uint8_t out[LOG_HASH_BYTES]);

/* Name of an entity kind ("account", "transfer", "entitlement"). */
const char *log_entity_kind_name(log_entity_kind kind);

#endif
