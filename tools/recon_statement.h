/*
 * recon_statement.h — tally-recon's `statement` check: an external system's
 * view of the ledger (a statement file) compared with one store snapshot.
 *
 * A statement is either a list of account balances or a list of event ids
 * that a downstream system holds, in CSV (a header line, then one row per
 * entry) or JSON lines (one object per line); docs/OPERATIONS.md defines
 * both formats. The store is the reference:
 *
 *   missing     in the store, absent from the statement
 *   extra       in the statement, absent from the store
 *   mismatched  in both, with values that differ (by more than the drift,
 *               for balances; a different seq, for events)
 *   duplicate   listed more than once in the statement
 *
 * Events that log retention removed (seq at or below the log floor) cannot
 * be compared: statement lines that give such a seq are counted apart
 * (below_floor), not reported as extra.
 *
 * Memory: the statement is held in a hash table, one entry per line (about
 * 150 bytes each), at most RECON_STATEMENT_ENTRIES_MAX lines of at most
 * RECON_STATEMENT_LINE_BYTES_MAX bytes. The comparison holds nothing more.
 */
#ifndef TALLY_RECON_STATEMENT_H
#define TALLY_RECON_STATEMENT_H

#include "common/log_event.h"
#include "ledger/invariants.h"
#include "log/store.h"

#include <stddef.h>
#include <stdint.h>

#define RECON_STATEMENT_ENTRIES_MAX UINT64_C(10000000)
#define RECON_STATEMENT_LINE_BYTES_MAX 65536
#define RECON_STATEMENT_ERROR_BYTES 512

typedef enum recon_statement_kind {
    RECON_STATEMENT_BALANCES = 1, /* account id -> expected balance fields */
    RECON_STATEMENT_EVENTS = 2,   /* event ids (and seqs) a downstream holds */
} recon_statement_kind;

typedef enum recon_statement_format {
    RECON_STATEMENT_CSV = 1,
    RECON_STATEMENT_JSON_LINES = 2,
} recon_statement_format;

typedef struct recon_statement recon_statement;

/* Read and check the whole file at path. Returns TALLY_ok with *out set
 * (free it with recon_statement_free), or an error with a message naming
 * the file and line in err: TALLY_invalid_argument (not a statement: bad
 * header, bad value, mixed kinds, too many lines, a line too long),
 * TALLY_not_found, TALLY_read_only (no permission), TALLY_io_error,
 * TALLY_out_of_memory. */
int recon_statement_load(const char *path, recon_statement **out, char *err, size_t err_bytes);
void recon_statement_free(recon_statement *s);

recon_statement_kind recon_statement_kind_of(const recon_statement *s);
recon_statement_format recon_statement_format_of(const recon_statement *s);
/* "balances"/"events", "csv"/"json_lines". */
const char *recon_statement_kind_name(recon_statement_kind kind);
const char *recon_statement_format_name(recon_statement_format format);
/* Entries loaded (duplicates included). */
uint64_t recon_statement_entries(const recon_statement *s);

typedef struct recon_statement_options {
    uint64_t drift;       /* balances: |statement - store| <= drift matches */
    uint64_t through_seq; /* events: missing only for seq <= this (0: head) */
    ledger_invariant_progress_fn progress; /* phase "statement"; may be NULL */
    void *progress_ctx;
} recon_statement_options;

typedef struct recon_statement_counts {
    uint64_t entries;      /* lines in the statement */
    uint64_t matched;      /* equal (balances: every field; events: id and seq) */
    uint64_t within_drift; /* balances matched only thanks to the drift */
    uint64_t missing;
    uint64_t extra;
    uint64_t mismatched;
    uint64_t duplicates;   /* lines repeating an earlier line's id */
    uint64_t below_floor;  /* events: lines whose seq log retention removed */
} recon_statement_counts;

/* kind is "missing", "extra", "mismatched" or "duplicate"; entity is
 * "account:ID" or "event:HEX32". */
typedef void (*recon_statement_report_fn)(const char *kind, const char *entity,
                                          const char *detail, void *ctx);

/* Start comparing s with the store in t (a read transaction that stays
 * open until recon_statement_finish); findings go to fn. One comparison
 * per load: it marks the entries it finds. TALLY_ok or a store error. */
int recon_statement_begin(recon_statement *s, store_txn *t,
                          const recon_statement_options *options, recon_statement_report_fn fn,
                          void *ctx);

/* A statement of events is compared while the log is walked once for all
 * checks: call this with every decoded event of the snapshot, in seq order
 * (it has the shape of ledger_invariant_options.each_event; statement is
 * the recon_statement). Statements of balances ignore it. */
void recon_statement_event(const log_event *ev, void *statement);

/* Balances are compared now (one pass over the accounts); then what the
 * store did not have is reported as extra, and duplicates. *counts gets
 * the totals. Returns TALLY_ok, TALLY_shutting_down (progress asked to
 * stop) or a store error. */
int recon_statement_finish(recon_statement *s, recon_statement_counts *counts);

#endif
