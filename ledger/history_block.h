/*
 * history_block.h — the entries of "history" (ledger/history.h): blocks
 * of an account's seqs.
 *
 * key = account id (u64 BE) | the block's last (largest) seq (u64 BE);
 * value, one of:
 *   - empty: a block of one seq, the key's;
 *   - 16 bytes: one seq, the key's, with the transfer id (stores written
 *     before December 2026; read, never written);
 *   - store format 10: HISTORY_BLOCK_FORMAT, then one uvarint gap per
 *     seq below the last, going down (each gap >= 1: the seq before is
 *     the last minus the gap, and so on), so 2 to HISTORY_BLOCK_SEQS_MAX
 *     seqs; a block that would be 16 bytes long ends with a 0 byte (no
 *     gap is 0), so that it does not read as a transfer id.
 * An account's blocks hold disjoint ranges of seqs, ascending in key
 * order: the account's history in "history" is its blocks' seqs in key
 * order. A block of the 16 a fold usually writes costs about 55 bytes of
 * its leaf with LMDB's node header, where 16 entries of one seq each cost
 * 16 × 26: the entries were 102 bytes of store per transfer (two each) at
 * 1M transfers, leaves about 55 % full as folds put them at the end of
 * each account's range, in the middle of a leaf (docs/BENCHMARKS.md).
 */
#ifndef TALLY_LEDGER_HISTORY_BLOCK_H
#define TALLY_LEDGER_HISTORY_BLOCK_H

#include "log/store.h"

#include <stdbool.h>
#include <stdint.h>

#define HISTORY_BLOCK_FORMAT 2     /* the first byte of a block of 2 or more seqs */
#define HISTORY_BLOCK_SEQS_MAX 64  /* seqs in one block */

typedef struct history_block {
    uint64_t account_id;
    uint64_t seqs[HISTORY_BLOCK_SEQS_MAX]; /* ascending, the last the key's */
    uint32_t count;
    const uint8_t *transfer_id; /* a one-seq entry of before December 2026: its
                                   value (into the map), else NULL */
} history_block;

/* Decode an entry of "history": TALLY_ok, or TALLY_corrupt_record with
 * *why saying what is wrong. */
int ledger_history_block_decode(const MDB_val *k, const MDB_val *v, history_block *out,
                                const char **why);

/* Put the account's seqs (n >= 1, strictly ascending, all above the seqs
 * of its blocks) as new blocks of up to HISTORY_BLOCK_SEQS_MAX each.
 * TALLY_ok or an error (remembered in t). */
int ledger_history_blocks_append(store_txn *t, uint64_t account_id, const uint64_t *seqs,
                                 size_t n);

/* Add one seq wherever it falls: into the block whose range holds it
 * (split in two when full), else as a block of its own; nothing when it
 * is there. TALLY_ok or an error (remembered in t). */
int ledger_history_block_insert(store_txn *t, uint64_t account_id, uint64_t seq);

/* Whether a block of the account holds seq: TALLY_ok, TALLY_not_found,
 * TALLY_corrupt_record or a store error. */
int ledger_history_block_has(store_txn *t, uint64_t account_id, uint64_t seq);

/* Remove seq from its block (rewritten, under the key of its new last seq
 * when seq was its last; deleted when it held only seq): TALLY_ok,
 * TALLY_not_found, TALLY_corrupt_record or a store error. */
int ledger_history_block_del(store_txn *t, uint64_t account_id, uint64_t seq);

/* The account's seqs in "history" appended to seqs from *count, up to
 * max: ascending above cursor, or with reverse descending below cursor
 * (0: from the last). TALLY_ok, TALLY_corrupt_record or a store error. */
int ledger_history_block_seqs(store_txn *t, uint64_t account_id, bool reverse, uint64_t cursor,
                              uint64_t *seqs, uint32_t max, uint32_t *count);

#endif
