/*
 * invariants.h — the checks of BRIEF §6 over one read snapshot of a store.
 *
 * Every test suite calls ledger_invariants_check after its scenarios, and
 * tally-recon builds on the same checks. Each problem found is reported
 * with the name of the check and the entity it concerns:
 *
 *   log_gap        seqs run 1..head without a gap; meta head matches
 *   hash_chain     every event decodes, carries its seq, chains to the last
 *   rebuild        folding the log from genesis (amounts, not snapshots)
 *                  reproduces every stored account and entitlement byte for
 *                  byte, and every event's snapshots match the fold
 *   balance_sum    per ledger, Σ debits_posted = Σ credits_posted and
 *                  Σ debits_pending = Σ credits_pending
 *   limit_flags    no account breaks its flags
 *   hold_resolution every hold resolves at most once; pending balances equal
 *                  the sum of unresolved holds
 *   expiry_index   every unresolved hold with a timeout and every active
 *                  entitlement with an end has its expiry entry
 *   inbox_links    every successful inbox record points at the events it
 *                  caused; every caused event has its inbox record
 *   history        every transfer event is in both accounts' history
 *   cursors        every subscriber's ack floor <= delivered seq <= head;
 *                  in-flight records belong to a subscriber, lie above its
 *                  floor and at or below its delivered seq, and match its
 *                  in-flight count
 *   dlq            every dead letter (and replay in flight) belongs to a
 *                  subscriber and names an existing seq; counts match
 */
#ifndef TALLY_LEDGER_INVARIANTS_H
#define TALLY_LEDGER_INVARIANTS_H

#include "log/store.h"

#include <stdint.h>

typedef void (*ledger_invariant_report_fn)(const char *check, const char *entity,
                                           const char *detail, void *ctx);

typedef struct ledger_invariant_stats {
    uint64_t events;
    uint64_t accounts;
    uint64_t transfers;
    uint64_t entitlements;
    uint64_t inbox_records;
    uint64_t findings;
} ledger_invariant_stats;

/* Run every check in the (read-only or write) transaction t. Findings go to
 * fn (may be NULL) and are counted in stats->findings. Returns TALLY_ok when
 * the checks ran (findings or not), or a fault when the store could not be
 * read (out_of_memory, io_error, ...). */
int ledger_invariants_check(store_txn *t, ledger_invariant_report_fn fn, void *ctx,
                            ledger_invariant_stats *stats);

#endif
