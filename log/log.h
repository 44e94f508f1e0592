/*
 * log.h — the event log (outbox): append-only, gapless, hash-chained.
 *
 * Database "log": key = seq as 8 bytes big-endian, value = one event in its
 * stored form (log/stored_event.h: since store format 13 without what the
 * store knows anyway). Every reader here hands out events in format 2
 * (docs/EVENTS.md), the bytes the chain hashes and the wire carries, so
 * nothing above this file sees the stored form. Events are appended with
 * MDB_APPEND inside the same write transaction as the state change that
 * they describe, so they commit or vanish with it. The head (last seq and
 * its hash) is kept in "meta" under "head". A write transaction reads it
 * from there once and keeps it in memory (store_txn.head, which follows
 * nested transactions: an aborted child's appends leave no trace in it);
 * the commit writes it back once.
 *
 * Encoding, decoding and the hash chain are common/log_event.h's (no LMDB
 * there, so clients share them); this file is only what touches the store.
 */
#ifndef TALLY_LOG_H
#define TALLY_LOG_H

#include "common/bytes.h"
#include "common/limits.h"
#include "common/log_event.h"
#include "log/store.h"
#include "log/stored_event.h"

#include <msgpack.h>
#include <stdbool.h>
#include <stdint.h>

typedef struct log_head {
    uint64_t seq; /* 0 = empty log */
    uint8_t hash[LOG_HASH_BYTES];
} log_head;

/* What the caller supplies to append an event (common/log_event.h). */
typedef log_event_draft log_append_args;

/* Current head as t sees it (seq 0 and a zero hash for an empty log): in
 * a write transaction read from meta at most once, then from memory, with
 * the transaction's own appends. TALLY_ok, TALLY_corrupt_record or a store
 * error. */
int log_head_get(store_txn *t, log_head *head);

/* Append one event at head+1 within the write transaction t and move t's
 * head; meta/head is written once, when the top-level transaction commits.
 * On success *seq_out is its seq. Returns TALLY_ok, TALLY_storage_full,
 * TALLY_internal (body too large or packing failed), TALLY_io_error;
 * errors are remembered in t. */
int log_append(store_txn *t, const log_append_args *args, uint64_t *seq_out);

/* An event's bytes as readers see them (format 2, or 1 for events of old
 * stores): ptr and len, valid until the next use of b or log_bytes_free.
 * Small events are made in b itself, larger ones on the heap. */
typedef struct log_bytes {
    const uint8_t *ptr;
    size_t len;
    uint8_t *heap;
    size_t heap_cap;
    uint8_t small[TALLY_EVENT_SMALL_BYTES_MAX + STORED_EVENT_GROWTH_MAX];
} log_bytes;
void log_bytes_init(log_bytes *b);
void log_bytes_free(log_bytes *b);

/* The event at seq into b. TALLY_ok, TALLY_not_found, TALLY_out_of_memory
 * or a store error; bytes that do not decode (a damaged event, or one
 * whose hash the next event no longer holds) are handed out for the
 * decoder to refuse. */
int log_bytes_get(store_txn *t, uint64_t seq, log_bytes *b);

/* Read and decode the event at seq (log_event_decode's rules; unpacked
 * initialised by the caller and destroyed after use). TALLY_ok,
 * TALLY_not_found, TALLY_corrupt_record or a store error. */
int log_event_load(store_txn *t, uint64_t seq, msgpack_unpacked *unpacked, log_event *out);

/* Call fn for each stored event with from_seq <= seq, at most max_count
 * events, in seq order, with the bytes log_bytes_get gives. fn returns 0
 * to continue, non-zero to stop (that value is returned). Bytes are valid
 * during the call only. */
typedef int (*log_read_fn)(uint64_t seq, const void *bytes, size_t len, void *ctx);
int log_read(store_txn *t, uint64_t from_seq, uint64_t max_count, log_read_fn fn, void *ctx);

/* One page of the log from from_seq (log_read's and sub_fetch's rule,
 * docs/PROTOCOL.md): *count events, at most max_count, whose sizes add up
 * to *bytes <= bytes_max, except that a first event larger than bytes_max
 * still makes a page of one (0 only when no event is at or after
 * from_seq, or max_count is 0). TALLY_ok or a store error. */
int log_page_measure(store_txn *t, uint64_t from_seq, uint64_t max_count, size_t bytes_max,
                     uint64_t *count, size_t *bytes);

/* Lowest seq stored (0 when empty). */
int log_first_seq(store_txn *t, uint64_t *seq);

/* Seq of the last stored event (0 when empty). */
int log_last_seq(store_txn *t, uint64_t *seq);

/* Following the hash chain event by event, in seq order: tally-recon's
 * walk of the whole log (ledger/invariants_log.c) and tallyd's check of
 * the last events at open (ledger/open_check.c) share it. */
typedef struct log_chain {
    uint64_t expect_seq;               /* the seq the next event must have */
    uint8_t prev_hash[LOG_HASH_BYTES]; /* the hash it must chain to */
    bool prev_known;                   /* false: the next event's prev_hash is taken as given */
} log_chain;

/* What is wrong with an event, or with the head after the last one (bits). */
#define LOG_CHAIN_GAP 1u         /* the event's seq is not the one expected */
#define LOG_CHAIN_UNDECODED 2u   /* it does not decode or its own hash is wrong */
#define LOG_CHAIN_SEQ_DIFFERS 4u /* it carries another seq than its key */
#define LOG_CHAIN_LINK 8u        /* its prev_hash is not the previous event's hash */
#define LOG_CHAIN_HEAD_GAP 16u   /* meta head is not the last event's seq */
#define LOG_CHAIN_HEAD_HASH 32u  /* meta head hash differs from the last event's */

/* Start at first_seq, chained to prev_hash (NULL: not known, e.g. in the
 * middle of the log; zeros before seq 1, the retention floor's hash after
 * a floor). */
void log_chain_start(log_chain *c, uint64_t first_seq, const uint8_t *prev_hash);

/* One event: the stored one at seq, ev its decoding (NULL: it did not
 * decode or its hash is wrong). Returns the faults found (0: none) and
 * moves the chain past it; after a gap or an event that does not decode
 * the next link cannot be right and is reported too. */
unsigned log_chain_step(log_chain *c, uint64_t seq, const log_event *ev);

/* After the last event: whether head names it (0, LOG_CHAIN_HEAD_GAP or
 * LOG_CHAIN_HEAD_HASH). */
unsigned log_chain_end(const log_chain *c, const log_head *head);

/* Key bytes for a seq. */
static inline void log_seq_key(uint64_t seq, uint8_t key[8]) { put_u64_be(key, seq); }

#endif
