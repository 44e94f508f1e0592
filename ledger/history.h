/*
 * history.h — the account history index: which transfer events touched an
 * account, in commit order, for `account_history` paged by seq.
 *
 * Database "history" (store format 10): key = account id (u64 BE) | the
 * block's last seq (u64 BE), value = a block of the account's seqs, the
 * 16 or so of one fold, as gaps (ledger/history_block.h): an account's
 * history is one key range in commit order, and the event at each seq
 * names the transfer. Before format 10 an entry held one seq (key =
 * account | seq, value empty, or in stores written before December 2026
 * the 16-byte transfer id, which tally-recon checks); readers take such an
 * entry as a block of one.
 *
 * Database "history_tail" (store format 4): key = account id (u64 BE),
 * value = the format byte 1 then 1 to HISTORY_TAIL_MAX seqs (u64 BE,
 * strictly ascending; the writer leaves at most HISTORY_TAIL_MAX - 1): the account's newest entries, kept out of
 * "history" until there are HISTORY_TAIL_MAX of them, then moved there
 * together ("folded") and the record deleted. Every seq of a tail is above
 * every seq of its account in "history": the account's history is its
 * "history" range followed by its tail. So a commit whose transfers touch
 * many accounts rewrites a few leaves of the small tail database (one
 * short record per active account) and one "history" leaf per fold,
 * instead of one "history" leaf per account, each at the end of that
 * account's range (docs/BENCHMARKS.md, "What bounds the targets still
 * missed"). Stores older than format 4 have no tails; they get them as a
 * writer appends.
 *
 * Database "history_recent" (store format 5): key = a record number (u64
 * BE, 1 up, restarting after each fold), value = the format byte 1 then 1
 * to HISTORY_RECENT_KEYS_MAX 16-byte keys (account | seq), strictly
 * ascending: the entries of one commit (or of one flush, below). The
 * commit appends its record, and only every HISTORY_RECENT_RECORDS_MAX
 * commits (or HISTORY_RECENT_KEYS_MAX keys) folds the records and its own
 * keys together into the tails and "history" as described next, and
 * empties "history_recent". So a commit of single transfers writes one
 * page of it, usually the leaf the previous commit wrote, instead of the
 * tail leaf of every account it touched; the fold writes each touched
 * tail once for up to 16 commits. Each record's seqs are above those of
 * the record before (seqs only grow), and above every seq of their
 * accounts in the tails and "history": an account's history is its
 * "history" range, its tail, then its seqs in the records in record
 * order. A commit with more than HISTORY_RECENT_KEYS_MAX keys (batches of
 * hundreds) folds at once, and so does one with a key whose seq is not of
 * an event it appended (above the head it began from: never written by
 * the ledger; a repair could), so that the order above holds. Stores older than format 5 have no records.
 *
 * Written in bulk, once per top-level commit. ledger_history_put writes
 * nothing: it collects the key in the write transaction (log/store.h's
 * collector STORE_COLLECT_HISTORY), which follows nesting, so a command
 * rolled back in its nested transaction (a rejected chain whose first
 * member had applied, a fault) leaves no entry. store_txn_commit of the
 * top-level transaction, after the log head and inbox_time and before the
 * LMDB commit, sorts the pending keys (big-endian: memcmp order is key
 * order) and, when it folds (above), writes them per account, in ascending account order: the
 * account's new seqs are appended to its tail (read, rewritten); when that
 * makes HISTORY_TAIL_MAX or more, the tail and the new seqs are put into
 * "history" as blocks of up to HISTORY_BLOCK_SEQS_MAX (one put per block)
 * and the tail record deleted. A tail as stored holds 1 to
 * HISTORY_TAIL_MAX - 1 seqs; readers accept up to HISTORY_TAIL_MAX. Seqs only grow, so a new seq is above the account's tail (or,
 * with no tail, its last "history" seq); one that is not (never written
 * by the ledger; a repair could) is folded with the tail, each seq put
 * into the block whose range holds it, so the order above holds. A failed put is remembered in the transaction
 * and the commit refuses it (storage_full, transaction_full, ...). So the
 * pages of a group's entries are taken at its commit, not as each command
 * applies: on a map that can no longer grow, a group whose commands all
 * applied may fail whole at its commit (storage_full for each, retried as
 * any storage_full; nothing of it stored), where per-command puts would
 * have failed one command and committed the rest.
 *
 * Readers in the same write transaction see the pending keys because
 * ledger_history_has, ledger_history_seqs and ledger_history_del first
 * call ledger_history_flush, which writes them into the transaction then
 * (in a child: into the child, so its abort drops them and the parent's
 * keys stay pending). A delete therefore always finds the entry a put
 * collected before it (retention, in its nested transaction of the
 * writer's group, after the expiry sweep's transfers), and a put collected
 * after a delete is written after it. Code that reads "history" directly
 * in a write transaction (the invariant audit's walk) calls
 * ledger_history_flush first. A read-only transaction has nothing pending.
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

#define HISTORY_TAIL_MAX 16   /* seqs in a tail that fold it into "history" */
#define HISTORY_TAIL_FORMAT 1 /* the first byte of a tail record */
#define HISTORY_RECENT_FORMAT 1 /* the first byte of a history_recent record */
#define HISTORY_RECENT_RECORDS_MAX 16 /* records kept before a fold */
#define HISTORY_RECENT_KEYS_MAX 4096  /* keys kept before a fold */

/* Record that the transfer event at seq touched the account: collected in
 * the write transaction t, written at its top-level commit or at the next
 * ledger_history_flush. TALLY_ok or TALLY_out_of_memory (remembered). */
int ledger_history_put(store_txn *t, uint64_t account_id, uint64_t seq);

/* Write the keys t has pending into t now, sorted, through one cursor.
 * TALLY_ok (also for a read-only t, or nothing pending) or t's remembered
 * error. */
int ledger_history_flush(store_txn *t);

/* Fold now: what t has pending and every "history_recent" record into
 * the tails and "history", and empty "history_recent" (what a commit does
 * every HISTORY_RECENT_RECORDS_MAX records). TALLY_ok or t's remembered
 * error. */
int ledger_history_fold(store_txn *t);

/* Remove the account's entry for seq (pending ones flushed first), from
 * "history", its tail (an emptied tail record is deleted) or its recent
 * record (rewritten without it; an emptied one deleted):
 * TALLY_ok, TALLY_not_found, or a store error. */
int ledger_history_del(store_txn *t, uint64_t account_id, uint64_t seq);

/* Whether the account's history ("history", else its tail, else the
 * recent records) has seq (pending ones flushed first): TALLY_ok,
 * TALLY_not_found or a store error (TALLY_corrupt_record: a tail or recent
 * record that does not decode). */
int ledger_history_has(store_txn *t, uint64_t account_id, uint64_t seq);

/* Up to max seqs of the account's history into seqs: ascending, above
 * cursor (0: from the first), the "history" range, the tail, then the
 * recent records; or with reverse, descending, below cursor (0: from the
 * last), the same reversed. Pending entries are flushed first. */
int ledger_history_seqs(store_txn *t, uint64_t account_id, bool reverse, uint64_t cursor,
                        uint64_t *seqs, uint32_t max, uint32_t *count);

/* Key of an entry. */
void ledger_history_key(uint64_t account_id, uint64_t seq, uint8_t out[16]);

/* Decode a "history_tail" value into seqs: TALLY_ok with *count (1 to
 * HISTORY_TAIL_MAX), or TALLY_corrupt_record with *why saying what is
 * wrong (the format byte, the length, the order). */
int ledger_history_tail_decode(const MDB_val *v, uint64_t seqs[HISTORY_TAIL_MAX],
                               uint32_t *count, const char **why);

/* Decode a "history_recent" value: TALLY_ok with *keys (into v) and *n
 * (1 to HISTORY_RECENT_KEYS_MAX 16-byte keys, strictly ascending), or
 * TALLY_corrupt_record with *why saying what is wrong. */
int ledger_history_recent_decode(const MDB_val *v, const uint8_t **keys, size_t *n,
                                 const char **why);

/* The largest seq of the account in its tail, else in "history" (not the
 * recent records): TALLY_ok, TALLY_not_found (none) or a store error. For
 * the invariant checks. */
int ledger_history_settled_last(store_txn *t, uint64_t account_id, uint64_t *seq);

/* The largest seq of the account in "history" (not its tail): TALLY_ok,
 * TALLY_not_found (none) or a store error. For the invariant checks. */
int ledger_history_indexed_last(store_txn *t, uint64_t account_id, uint64_t *seq);

#endif
