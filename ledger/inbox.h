/*
 * inbox.h — idempotency records: one outcome per (consumer, key).
 *
 * Database "inbox": key = consumer length (u8) | consumer | key, or
 * (store format 12) for a key that is a UUID's text in lower case, as
 * libtally and the CLI make them, consumer length | 0x80, consumer, the
 * UUID's 16 bytes: 20 bytes less a key, about 32 bytes of store per
 * record with LMDB's node and page fill, and 12 in inbox_time's copy
 * (measured at 1M transfers). A store upgraded from before keeps such
 * keys' records under their text; meta "inbox_text_keys" says so, and
 * lookups try the text after the packed key until retention has removed
 * them (ledger_inbox_text_keys_unmark). Value
 * (format 4, store format 11) = 4 | fingerprint (the first 16 bytes of
 * the SHA-256) | code | time_ms | first_seq | event_count | chain_count |
 * failed_index | chain codes, each a uvarint, then, only for a rejection
 * that has one of the two, original_seq (uvarint) | failed transfer id (16
 * bytes, zero: none). Against format 2's fixed fields that is 30 bytes
 * instead of 41 for a transfer's record (time_ms 6 bytes, first_seq 3 at
 * a million events), about 17 bytes of store per record with LMDB's node
 * and page fill. A time_ms before 1970 (which no writer gives) keeps
 * format 2 or 3. Format 2 = 2 | fingerprint | code u16 | time_ms i64 |
 * first_seq u64 | event_count u32 | chain_count u8 | failed_index u8 |
 * chain codes (u16 each); format 3 appends original_seq u64 | failed
 * transfer id. Format 1, written before December 2026, is format 2 with
 * the whole 32-byte fingerprint. All four are read.
 * Database "inbox_time": the index retention sweeps walk, one entry per
 * commit group listing its keys (format 3; per key before): inbox_time.h.
 */
#ifndef TALLY_LEDGER_INBOX_H
#define TALLY_LEDGER_INBOX_H

#include "common/bytes.h"
#include "common/limits.h"
#include "log/store.h"

#include <stdbool.h>
#include <stdint.h>

#define LEDGER_INBOX_KEY_BYTES_MAX (1 + TALLY_CONSUMER_BYTES_MAX + TALLY_KEY_BYTES_MAX)
#define LEDGER_INBOX_UUID_TEXT_BYTES 36   /* a UUID's text: 8-4-4-4-12 hex digits */
#define LEDGER_INBOX_KEY_PACKED 0x80      /* the consumer length's flag: a packed key */
_Static_assert(TALLY_CONSUMER_BYTES_MAX < LEDGER_INBOX_KEY_PACKED, "the flag is no length");
#define LEDGER_FINGERPRINT_BYTES 32        /* a request's SHA-256 */
#define LEDGER_FINGERPRINT_STORED_BYTES 16 /* the part format 2 keeps */

/* What a command did; stored for deterministic outcomes and replayed. */
typedef struct ledger_outcome {
    int code;             /* TALLY_ok or the rejection */
    bool replayed;        /* true when returned from the inbox */
    bool stored;          /* true when recorded (or replayed) in the inbox */
    int64_t time_ms;      /* when first applied */
    uint64_t first_seq;   /* first event it caused, 0 if none */
    uint32_t event_count;
    uint32_t chain_count; /* members, 0 for a single command */
    uint32_t failed_index;/* chain member that failed (code != ok) */
    uint16_t chain_codes[TALLY_CHAIN_COMMANDS_MAX];
    uint64_t original_seq;/* an exists* rejection: the seq that created the
                             existing account or transfer; 0 otherwise */
    tally_id128 failed_id;/* the transfer id this rejection left failed
                             (failed_id.h); zero: none */
} ledger_outcome;

typedef struct ledger_inbox_record {
    tally_str consumer;   /* point into the key given to decode */
    tally_str key;        /* also, for a packed key, into key_text below */
    char key_text[LEDGER_INBOX_UUID_TEXT_BYTES];
    uint8_t fingerprint[LEDGER_FINGERPRINT_BYTES];
    uint8_t fingerprint_len; /* bytes of it stored: 16, or 32 (format 1) */
    ledger_outcome outcome;
} ledger_inbox_record;

/* The stored key of (consumer, key) into out: its length. A key that is
 * a UUID's text in lower case (36 bytes) is packed (store format 12):
 * consumer length | LEDGER_INBOX_KEY_PACKED, consumer, the UUID's 16
 * bytes; any other key is the consumer length, the consumer and the key
 * as given. */
size_t ledger_inbox_key(tally_str consumer, tally_str key,
                        uint8_t out[LEDGER_INBOX_KEY_BYTES_MAX]);

/* Split a stored key of either form into its consumer and key (pointing
 * into k, or for a packed key into text, which receives its UUID's
 * text): false when it is malformed. */
bool ledger_inbox_key_split(const void *k, size_t len, tally_str *consumer, tally_str *key,
                            char text[LEDGER_INBOX_UUID_TEXT_BYTES]);

/* The meta mark of a store upgraded from a format before 12 whose inbox
 * may hold records of UUID keys under their text (log/store.h): the
 * inbox_time key that was last when it was upgraded. While it is there,
 * a lookup that misses a packed key tries the text; retention removes it
 * once no inbox_time key up to it is left (ledger/retention.c). */
extern const char ledger_inbox_text_keys_mark[];

/* The stored key of (consumer, key) as a store of a format before 12 may
 * hold it, when that is not ledger_inbox_key's (a key that packs): its
 * length, or 0. */
size_t ledger_inbox_key_text(tally_str consumer, tally_str key,
                             uint8_t out[LEDGER_INBOX_KEY_BYTES_MAX]);

/* Whether the mark is there: TALLY_ok (*is) or a store error. */
int ledger_inbox_text_keys_marked(store_txn *t, bool *is);

/* Remove the mark when no inbox_time entry up to its key is left (the
 * records of the format before are all gone): TALLY_ok or a store error.
 * Retention calls it after a sweep that removed records. */
int ledger_inbox_text_keys_unmark(store_txn *t);

/* TALLY_ok, TALLY_not_found, TALLY_corrupt_record or a store error. */
int ledger_inbox_get(store_txn *t, tally_str consumer, tally_str key,
                     ledger_inbox_record *out);

/* Codes whose replies carry original_seq (net/ops/ops_write.c): the exists
 * family and id_already_failed. */
bool ledger_outcome_names_original(int code);

/* Record an outcome; its key is collected for the time index entry the
 * transaction's top-level commit writes (inbox_time.h). */
int ledger_inbox_put(store_txn *t, tally_str consumer, tally_str key,
                     const uint8_t fingerprint[LEDGER_FINGERPRINT_BYTES],
                     const ledger_outcome *outcome);

int ledger_inbox_decode(const void *key, size_t key_len, const void *val, size_t val_len,
                        ledger_inbox_record *out);

#endif
