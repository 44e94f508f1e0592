/*
 * invariants.c — BRIEF §6 checked over one snapshot (see invariants.h): the
 * order in which the rooms of invariants_audit.h run, over the fold's
 * tables. Above them all; nothing of ledger/ calls it.
 *
 * The rebuild is a real fold: account balances are recomputed from transfer
 * amounts and hold resolutions, never copied from event snapshots; the
 * snapshots are then compared with the fold, and the fold with the stored
 * records, byte for byte through the record encoders.
 */
#include "ledger/invariants_audit.h"

#include "common/error.h"

#include <string.h>

int ledger_invariants_check(store_txn *t, ledger_invariant_report_fn fn, void *ctx,
                            ledger_invariant_stats *stats)
{
    return ledger_invariants_check_with(t, NULL, fn, ctx, stats);
}

int ledger_invariants_check_with(store_txn *t, const ledger_invariant_options *options,
                                 ledger_invariant_report_fn fn, void *ctx,
                                 ledger_invariant_stats *stats)
{
    static const ledger_invariant_options defaults;
    memset(stats, 0, sizeof(*stats));
    audit a = {.t = t, .fn = fn, .ctx = ctx, .stats = stats,
               .opt = options ? options : &defaults};
    audit_history_keys_init(&a);
    a.accounts = table_create(sizeof(ledger_account));
    a.holds = table_create(sizeof(hold_state));
    a.entitlements = table_create(sizeof(folded_entitlement));
    int rc = a.accounts && a.holds && a.entitlements ? TALLY_ok : TALLY_out_of_memory;
    if (rc == TALLY_ok)
        rc = audit_seed_from_checkpoint(&a);
    if (rc == TALLY_ok)
        rc = audit_check_log(&a);
    if (rc == TALLY_ok)
        rc = a.fault;
    if (rc == TALLY_ok)
        rc = audit_check_records(&a);
    if (rc == TALLY_ok)
        rc = audit_check_inbox_time(&a);
    if (rc == TALLY_ok)
        rc = audit_check_history_index(&a);
    if (rc == TALLY_ok)
        rc = audit_check_record_index(&a);
    if (rc == TALLY_ok)
        rc = audit_check_subscribers(&a);
    if (a.inbox_cursor)
        mdb_cursor_close(a.inbox_cursor);
    table_destroy(a.accounts);
    table_destroy(a.holds);
    table_destroy(a.entitlements);
    return rc;
}
