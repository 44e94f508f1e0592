/*
 * history.h — the account history index: which transfer events touched an
 * account, in commit order, for `account_history` paged by seq.
 *
 * Database "account_history" (MDB_DUPSORT | MDB_DUPFIXED): key = account
 * id (u64 BE), values = the seqs of its transfer events (u64 BE, 8 bytes
 * each). Seqs only grow, so each put appends to the account's sorted set
 * (MDB_APPENDDUP), whose pages LMDB then fills whole: about 16 bytes of
 * store per transfer for both accounts.
 *
 * Database "history", written before December 2026 and only read and
 * pruned since: key = account id (u64 BE) | seq (u64 BE), value empty or
 * the 16-byte transfer id. Every seq an account has there is below every
 * seq it has in "account_history" (a store switches once, when a tallyd of
 * this format first writes it), so an account's history is the old range
 * followed by the new set.
 */
#ifndef TALLY_LEDGER_HISTORY_H
#define TALLY_LEDGER_HISTORY_H

#include "log/store.h"

#include <stdbool.h>
#include <stdint.h>

/* Record that the transfer event at seq touched the account; seq must be
 * above every seq the account has (TALLY_internal otherwise). */
int ledger_history_put(store_txn *t, uint64_t account_id, uint64_t seq);

/* Remove the account's entry for seq from whichever table holds it:
 * TALLY_ok, TALLY_not_found, or a store error. */
int ledger_history_del(store_txn *t, uint64_t account_id, uint64_t seq);

/* Whether the account's history has seq: TALLY_ok, TALLY_not_found or a
 * store error. */
int ledger_history_has(store_txn *t, uint64_t account_id, uint64_t seq);

/* Up to max seqs of the account's history into seqs: ascending, above
 * cursor (0: from the first); or with reverse, descending, below cursor
 * (0: from the last). */
int ledger_history_seqs(store_txn *t, uint64_t account_id, bool reverse, uint64_t cursor,
                        uint64_t *seqs, uint32_t max, uint32_t *count);

/* Key of an entry of the old "history" table. */
void ledger_history_key(uint64_t account_id, uint64_t seq, uint8_t out[16]);

#endif
