/*
 * events.h — events on the client side of libtally: the log's codec
 * (common/log_event.h, shared with tallyd) turned into the public
 * tally_event, and the chain check of consecutive events. Used by
 * tally_log_read, the live stream, durable subscribers and the
 * subscriber-side inbox; internal (no tally_ prefix, not exported).
 */
#ifndef TALLY_CLIENTS_EVENTS_H
#define TALLY_CLIENTS_EVENTS_H

#include "clients/libtally/tally.h"

#include <msgpack.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Decode one stored event with the log's codec (log_event_decode: bounds,
 * structure, types, its own hash) into *e, and check what the public type
 * needs besides: strings that fit their copies, a non-zero account id,
 * subject and feature not empty, entity_version > 0. e->raw is bytes and
 * e->body points into unpacked (initialised by the caller and destroyed
 * after use). TALLY_ok or TALLY_corrupt_record. */
int client_event_decode(const void *bytes, size_t len, msgpack_unpacked *unpacked,
                        tally_event *e);

/* client_event_decode with e->raw a malloc'd copy of the bytes (free with
 * tally_events_release) and e->body NULL. false when the bytes are not an
 * event or memory ran out (*e then owns nothing). */
bool client_event_from_bytes(const void *bytes, size_t len, tally_event *e);

/* Whether events[0..count) chain wherever one follows another (seq + 1):
 * the check of a log_read page or a fetched batch. */
bool client_events_chained(const tally_event *events, size_t count);

/* The hash chain as a reader sees it: the seq and hash of the last event
 * it took. Before any, that is "seq 0" with 32 zero bytes, which is what
 * seq 1 chains to. */
typedef struct client_chain {
    uint64_t seq;
    uint8_t hash[TALLY_EVENT_HASH_BYTES];
} client_chain;

/* A chain that knows only the genesis (seq 0, zero hash). */
void client_chain_start(client_chain *c);
/* false when e comes right after the event the chain knows (seq + 1) and
 * its prev_hash is not that event's hash: e or its predecessor is not what
 * the log holds. true otherwise (nothing to compare with). */
bool client_chain_follows(const client_chain *c, const tally_event *e);
/* e was taken: the chain now knows its hash. */
void client_chain_take(client_chain *c, const tally_event *e);

#endif
