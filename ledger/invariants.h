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
 *   reversals      every transfer's reversed_amount is the sum of the
 *                  amounts of the transfers whose `reverses` names it
 *   creation_times every account's and transfer's created_ms is its creating
 *                  event's commit time, or, imported (ledger/imported.h), a
 *                  time before it and past every earlier event's time and
 *                  import's time (imported times strictly increase)
 *   inbox_links    every successful inbox record points at the events it
 *                  caused; every caused event has its inbox record
 *   failed_ids     every failed transfer id (failed_id.h) has the inbox
 *                  record of its attempt, which names it, and is no live
 *                  transfer; every inbox record naming a failed id has it
 *   inbox_time     every inbox record is named by exactly one inbox_time
 *                  entry (per group or, in older stores, per key), and
 *                  every key an entry names has its record or was swept
 *   history        every transfer event is in both accounts' history
 *   record_index   every account and transfer has its entries in its index
 *                  (ledger/index.h), each naming it, and every index entry
 *                  names a record whose entries include it
 *   cursors        every subscriber's ack floor <= delivered seq <= head;
 *                  in-flight records belong to a subscriber, lie above its
 *                  floor and at or below its delivered seq, and match its
 *                  in-flight count
 *   dlq            every dead letter (and replay in flight) belongs to a
 *                  subscriber and names an existing seq; counts match
 *
 * The names of the checks are listed by ledger_invariant_check_name, in the
 * order they run; a new check adds its name there, so tools that list the
 * checks (tally-recon) show it without a change of their own.
 *
 * Defined in invariants_report.c (the list of checks) and invariants.c
 * (the run); the rooms of the checks are named in invariants_audit.h.
 */
#ifndef TALLY_LEDGER_INVARIANTS_H
#define TALLY_LEDGER_INVARIANTS_H

#include "log/log.h"
#include "log/store.h"

#include <stdbool.h>
#include <stdint.h>

typedef void (*ledger_invariant_report_fn)(const char *check, const char *entity,
                                           const char *detail, void *ctx);

/* Checks that can be listed; ledger_invariant_check_count() is at most this. */
#define LEDGER_INVARIANT_CHECKS_MAX 32
/* Items of a phase between two calls of the progress callback. */
#define LEDGER_INVARIANT_PROGRESS_ITEMS 16384

typedef struct ledger_invariant_stats {
    uint64_t events;
    uint64_t accounts;
    uint64_t transfers;
    uint64_t entitlements;
    uint64_t inbox_records;
    uint64_t findings;
    /* Findings per check, indexed as ledger_invariant_check_name; a finding
     * of a check not in that list counts in findings only. */
    uint64_t findings_by_check[LEDGER_INVARIANT_CHECKS_MAX];
    /* Findings counted but not passed to the report callback because their
     * check had reached options->findings_per_check_max. */
    uint64_t findings_not_reported;
} ledger_invariant_stats;

/* How far a phase is ("log", "transfers", "accounts", "entitlements",
 * "inbox"): done of total items. Return true to go on, false to stop. */
typedef bool (*ledger_invariant_progress_fn)(const char *phase, uint64_t done, uint64_t total,
                                             void *ctx);

typedef struct ledger_invariant_options {
    /* Do not fold the log: no `rebuild` (and no "resolved at most once"
     * part of hold_resolution); nothing is held per account, hold or
     * entitlement. The other checks run in full. */
    bool skip_rebuild;
    /* Report at most this many findings per check to the callback (0: all);
     * the rest are only counted, so a broken store costs no formatting. */
    uint64_t findings_per_check_max;
    /* Called every LEDGER_INVARIANT_PROGRESS_ITEMS items and at the end of a
     * phase (may be NULL). */
    ledger_invariant_progress_fn progress;
    void *progress_ctx;
    /* Called with every event the log walk decodes, in seq order (may be
     * NULL): another comparison can ride along instead of reading and
     * decoding the log again. ev is valid during the call only. */
    void (*each_event)(const log_event *ev, void *ctx);
    void *each_event_ctx;
} ledger_invariant_options;

/* The checks that ledger_invariants_check runs, in order: name of check
 * index (0 .. count-1; NULL past the end), the index of a name (-1 when it
 * is not a check), and whether a check needs the fold (skipped with
 * options->skip_rebuild). */
size_t ledger_invariant_check_count(void);
const char *ledger_invariant_check_name(size_t index);
int ledger_invariant_check_index(const char *name);
bool ledger_invariant_check_needs_fold(size_t index);

/* Run every check in the (read-only or write) transaction t. Findings go to
 * fn (may be NULL) and are counted in stats->findings. Returns TALLY_ok when
 * the checks ran (findings or not), or a fault when the store could not be
 * read (out_of_memory, io_error, ...). */
int ledger_invariants_check(store_txn *t, ledger_invariant_report_fn fn, void *ctx,
                            ledger_invariant_stats *stats);

/* The same with options (NULL: the defaults, as ledger_invariants_check).
 * Also returns TALLY_shutting_down when the progress callback asked to
 * stop; stats then hold what was counted so far. */
int ledger_invariants_check_with(store_txn *t, const ledger_invariant_options *options,
                                 ledger_invariant_report_fn fn, void *ctx,
                                 ledger_invariant_stats *stats);

#endif
