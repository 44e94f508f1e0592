/*
 * log.h — the event log (outbox): append-only, gapless, hash-chained.
 *
 * Database "log": key = seq as 8 bytes big-endian, value = one event encoded
 * as a msgpack map (format in docs/EVENTS.md). Events are appended with
 * MDB_APPEND inside the same write transaction as the state change that
 * they describe, so they commit or vanish with it. The head (last seq and
 * its hash) is kept in "meta" under "head".
 *
 * Chain: hash = SHA-256(prev_hash || event bytes without the trailing
 * "hash" entry), where the trailing entry is always the last 39 bytes of
 * the encoded event (fixstr "hash", bin8 header, 32 bytes). The first
 * event's prev_hash is 32 zero bytes.
 */
#ifndef TALLY_LOG_H
#define TALLY_LOG_H

#include "common/bytes.h"
#include "log/store.h"

#include <msgpack.h>
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

typedef struct log_head {
    uint64_t seq; /* 0 = empty log */
    uint8_t hash[LOG_HASH_BYTES];
} log_head;

/* What the caller supplies to append an event. */
typedef struct log_append_args {
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
} log_append_args;

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

/* Current head (seq 0 and a zero hash for an empty log). */
int log_head_get(store_txn *t, log_head *head);

/* Append one event at head+1 within t. On success *seq_out is its seq.
 * Returns TALLY_ok, TALLY_storage_full, TALLY_internal (body too large or
 * packing failed), TALLY_io_error; errors are remembered in t. */
int log_append(store_txn *t, const log_append_args *args, uint64_t *seq_out);

/* Decode and check one stored event: structure, field types, that the
 * declared hash matches prev_hash and the bytes. unpacked must be
 * initialised by the caller (msgpack_unpacked_init) and destroyed after use.
 * Returns TALLY_ok or TALLY_corrupt_record. */
int log_event_decode(const void *bytes, size_t len, msgpack_unpacked *unpacked,
                     log_event *out);

/* Read and decode the event at seq (log_event_decode's rules; unpacked
 * initialised by the caller and destroyed after use). TALLY_ok,
 * TALLY_not_found, TALLY_corrupt_record or a store error. */
int log_event_load(store_txn *t, uint64_t seq, msgpack_unpacked *unpacked, log_event *out);

/* Compute the hash an event must carry, from prev_hash and its bytes. */
int log_event_hash(const uint8_t prev_hash[LOG_HASH_BYTES], const void *bytes, size_t len,
                   uint8_t out[LOG_HASH_BYTES]);

/* Call fn for each stored event with from_seq <= seq, at most max_count
 * events, in seq order. fn returns 0 to continue, non-zero to stop (that
 * value is returned). Bytes are valid during the call only. */
typedef int (*log_read_fn)(uint64_t seq, const void *bytes, size_t len, void *ctx);
int log_read(store_txn *t, uint64_t from_seq, uint64_t max_count, log_read_fn fn, void *ctx);

/* Lowest seq stored (0 when empty). */
int log_first_seq(store_txn *t, uint64_t *seq);

/* Key bytes for a seq. */
static inline void log_seq_key(uint64_t seq, uint8_t key[8]) { put_u64_be(key, seq); }

/* Name of an entity kind ("account", "transfer", "entitlement"). */
const char *log_entity_kind_name(log_entity_kind kind);

#endif
