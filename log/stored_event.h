/*
 * stored_event.h — the form an event takes in the "log" database.
 *
 * Readers see events in format 2 (common/log_event.h, docs/EVENTS.md):
 * log_read, log_event_load and log_bytes_get (log/log.h) hand out those
 * bytes, and the chain hashes them. Since store format 13 the log keeps a
 * shorter form of the same event, stored format 3, which leaves out what
 * the store knows anyway:
 *
 *   - seq: the key holds it;
 *   - id: a UUIDv7 of time_ms, the store's identity and seq (log/log.c);
 *   - hash: the next event's prev_hash holds it, or meta "head" for the
 *     last event;
 *   - the type's name: its row in LOG_EVENT_TYPES (rows only appended);
 *   - a causation key that is a UUID's text in lower case: its 16 bytes;
 *   - what the body's first row repeats (the object the event is about):
 *     its first field when it has the bytes of the entity's last element
 *     (the account's or transfer's id), and the first other field with
 *     the bytes of time_ms (a creation time), each as the byte 0xc1,
 *     which msgpack never uses.
 *
 * Stored format 3, a msgpack array of 9 (first byte 0x99):
 *
 *   [3, type:uint, entity, entity_version, time_ms, causation,
 *    correlation, body, prev_hash:bin32]
 *
 * where every field but type, causation's key and the body's first row
 * holds the same bytes as in format 2, and causation is nil or
 * [consumer:str, key:str|bin16]. A
 * bin16 key is the text bytes_uuid_text_write gives of its 16 bytes, as a
 * str8 (d9 24). Expanding puts the format 2 bytes back exactly, so the
 * hash a reader recomputes is the one the writer computed; log_append
 * checks that on every event and stores format 2 as it is in the rare
 * case the short form would not give the same bytes back.
 *
 * Events written before store format 13 stay in format 2 or 1; a stored
 * event's first byte says which (0x9c, 0x8c, 0x99). Pure bytes: no LMDB.
 */
#ifndef TALLY_LOG_STORED_EVENT_H
#define TALLY_LOG_STORED_EVENT_H

#include "common/log_event.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define STORED_EVENT_FORMAT 3
/* At most this many bytes more in format 2 than stored: seq (9), id (18),
 * hash (34), the type's name (32 for a number's byte), a UUID key's text
 * (38 for 18) and the row's repeats (18 and 9 for a byte each). */
#define STORED_EVENT_GROWTH_MAX 160

/* Whether a stored event is in the short form (needs stored_event_expand). */
bool stored_event_is_short(const void *rec, size_t len);

/* The short form of an event's format 2 bytes (log_event_encode's, len
 * bytes) into out (at least len bytes): its length, or 0 when the bytes
 * are not of the shape log_event_encode writes. */
size_t stored_event_shorten(const uint8_t *event, size_t len, uint8_t *out);

/* The prev_hash a stored event of any format carries, into out: false
 * when it is not where its format puts it (a damaged event). */
bool stored_event_prev_hash(const void *rec, size_t len, uint8_t out[LOG_HASH_BYTES]);

/* The format 2 bytes of a short stored event: the event at seq of the
 * store whose id tag is tag (log/log.c), whose chain hash is hash. Into out
 * (capacity bytes); returns their length, or 0 when rec is no well-formed
 * short event or out is too small (len + STORED_EVENT_GROWTH_MAX always
 * suffices). */
size_t stored_event_expand(const void *rec, size_t len, uint64_t seq, uint32_t tag,
                           const uint8_t hash[LOG_HASH_BYTES], uint8_t *out, size_t capacity);

#endif
