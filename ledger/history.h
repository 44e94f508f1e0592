/*
 * history.h — the account history index: which transfer events touched an
 * account, in commit order, for `account_history` paged by seq.
 *
 * Database "history": key = account id (u64 BE) | seq (u64 BE), value
 * empty: one entry per account per transfer event, so an account's history
 * is one key range in commit order, and the event at seq names the
 * transfer. Stores written before December 2026 hold the 16-byte transfer
 * id as the value; readers accept both, and tally-recon checks such an id.
 *
 * A layout with a sorted set of 8-byte seqs per account (MDB_DUPSORT |
 * MDB_DUPFIXED, appended with MDB_APPENDDUP) was built and measured: 67
 * bytes less store per transfer, but each account's set becomes a sub-tree
 * whose root page is written with every append, and at 12M effects 64
 * clients of single transfers ran at half the rate (docs/BENCHMARKS.md,
 * "Store size"). Not kept.
 */
#ifndef TALLY_LEDGER_HISTORY_H
#define TALLY_LEDGER_HISTORY_H

#include "log/store.h"

#include <stdbool.h>
#include <stdint.h>

/* Record that the transfer event at seq touched the account. */
int ledger_history_put(store_txn *t, uint64_t account_id, uint64_t seq);

/* Remove the account's entry for seq: TALLY_ok, TALLY_not_found, or a
 * store error. */
int ledger_history_del(store_txn *t, uint64_t account_id, uint64_t seq);

/* Whether the account's history has seq: TALLY_ok, TALLY_not_found or a
 * store error. */
int ledger_history_has(store_txn *t, uint64_t account_id, uint64_t seq);

/* Up to max seqs of the account's history into seqs: ascending, above
 * cursor (0: from the first); or with reverse, descending, below cursor
 * (0: from the last). */
int ledger_history_seqs(store_txn *t, uint64_t account_id, bool reverse, uint64_t cursor,
                        uint64_t *seqs, uint32_t max, uint32_t *count);

/* Key of an entry. */
void ledger_history_key(uint64_t account_id, uint64_t seq, uint8_t out[16]);

#endif
