/*
 * invariants_audit.h — what the rooms of the invariant checks share
 * (internal to ledger/; the public face is invariants.h), and the rooms
 * from the bottom up (each calls only rooms above it in this list):
 *
 *   invariants_report.c  the list of checks (invariants.h), findings and
 *                        progress, the walk of a database, names of entities
 *   invariants_log.c     the log walk (log_gap, hash_chain, rebuild's fold,
 *                        inbox links per event) and the history index
 *   invariants_inbox_time.c  the inbox time index against the inbox
 *   invariants_state.c   the stored records against the fold (accounts,
 *                        transfers, entitlements, sums, expiry entries, inbox
 *                        records) and the subscribers' cursors and dlq
 *   invariants.c         ledger_invariants_check: runs them in order
 */
#ifndef TALLY_LEDGER_INVARIANTS_AUDIT_H
#define TALLY_LEDGER_INVARIANTS_AUDIT_H

#include "common/table.h"
#include "ledger/invariants.h"
#include "ledger/ledger.h"
#include "ledger/retention.h"

#include <stdbool.h>
#include <stdint.h>

/* The multiset fingerprint of history entries (see invariants_log.c). */
typedef struct history_sums {
    uint64_t count;
    uint64_t sum[2];
} history_sums;

/* One run of the checks. */
typedef struct audit {
    store_txn *t;
    ledger_invariant_report_fn fn;
    void *ctx;
    ledger_invariant_stats *stats;
    const ledger_invariant_options *opt;
    table *accounts;      /* u64 id -> ledger_account (folded) */
    table *holds;         /* transfer id -> hold_state */
    table *entitlements;  /* entitlement key -> folded_entitlement */
    uint64_t head_seq;
    uint64_t history_keys[2];     /* random per run: see history_sums */
    history_sums history_log;     /* what the log's transfer events expect */
    uint64_t events_covered; /* events whose causation's record covers them */
    uint64_t events_claimed; /* Σ event_count above the floor of successful inbox records */
    MDB_cursor *inbox_cursor; /* the walk's lookups of causes */
    ledger_log_floor floor; /* log retention: events up to floor.seq are gone */
    int64_t inbox_swept_ms; /* inbox retention: records up to this time are gone */
    history_sums inbox_keys; /* the inbox's keys (see audit_inbox_key_add) */
    uint64_t recent_last_seq; /* the history_recent walk: the last record's largest seq */
    uint64_t block_account, block_last; /* the history walk: the block before's */
    int64_t time_mark_ms; /* creation_times: what an import must pass (ledger/imported.h) */
    int fault;
} audit;

/* What the fold keeps per hold (every hold ever created) and per
 * entitlement: only what later events and the stored records are checked
 * against, so that memory stays small per entity (docs/OPERATIONS.md). */
typedef struct hold_state {
    int64_t amount;   /* as created */
    uint64_t version; /* as created, then as resolved */
    uint8_t state;
    bool resolved;
} hold_state;

typedef struct folded_entitlement {
    uint8_t record[LEDGER_ENTITLEMENT_RECORD_BYTES]; /* encoded as stored */
    uint8_t state;
    uint64_t version;
} folded_entitlement;

/* ---- invariants_pipe.c: the log, decoded ahead of the walk ---- */

/* One event of the log as decoded for the walk (its objects live in a
 * zone that audit_decode_log owns). */
typedef struct audit_decoded_event {
    uint64_t seq;
    int rc; /* log_event_decode_in's: TALLY_ok or TALLY_corrupt_record */
    msgpack_object root;
    log_event ev;
} audit_decoded_event;

/* Decode every event of the log in seq order and hand each to fn (in this
 * thread, in order; d is valid during the call); fn's non-zero return stops
 * the walk and is returned. When a->t is a read-only transaction and a
 * second one sees the same snapshot, the decoding runs on a thread of its
 * own (two cores: decode and check at once); otherwise here, in turn.
 * Returns TALLY_ok, fn's code, or a fault of reading the log. */
int audit_decode_log(audit *a, int (*fn)(audit_decoded_event *d, void *ctx), void *ctx);

/* splitmix64's finalizer, a bijection: the mixer of the keyed hashes of
 * the multiset fingerprints (history_sums). */
static inline uint64_t audit_mix64(uint64_t z)
{
    z = (z ^ (z >> 30)) * UINT64_C(0xBF58476D1CE4E5B9);
    z = (z ^ (z >> 27)) * UINT64_C(0x94D049BB133111EB);
    return z ^ (z >> 31);
}

/* ---- invariants_report.c ---- */

/* Count a finding of check about entity and pass it on (unless its check
 * reached findings_per_check_max). */
void audit_report(audit *a, const char *check, const char *entity, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* Tell the caller how far a phase is, every LEDGER_INVARIANT_PROGRESS_ITEMS
 * items and at its end; false (and a->fault set) when it asked to stop. */
bool audit_progress(audit *a, const char *phase, uint64_t done, uint64_t total);

typedef void (*audit_entry_fn)(audit *a, const MDB_val *k, const MDB_val *v, void *ctx);

/* Call fn for every entry of db in key order, reporting progress as phase;
 * entries are counted in *count (NULL: a count of the walk's own). Stops
 * when fn sets a->fault. Returns TALLY_ok, a store error, or a->fault
 * (progress asked to stop, or fn failed). */
int audit_walk_db(audit *a, store_db db, const char *phase, uint64_t *count, audit_entry_fn fn,
                  void *ctx);

/* Names of entities in findings. */
void audit_name_account(uint64_t id, char out[64]);
void audit_name_transfer(const tally_id128 *id, char out[64]);
void audit_name_seq(uint64_t seq, char out[64]);

/* The name written into buf, as an argument of audit_report: so that a
 * check run for every record names its entity only when it reports. */
static inline const char *audit_seq_name(char buf[64], uint64_t seq)
{
    audit_name_seq(seq, buf);
    return buf;
}
static inline const char *audit_transfer_name(char buf[64], const tally_id128 *id)
{
    audit_name_transfer(id, buf);
    return buf;
}
#define AUDIT_SEQ(buf, seq) audit_seq_name((buf), (seq))
#define AUDIT_TRANSFER(buf, id) audit_transfer_name((buf), (id))
void audit_name_entitlement(const ledger_entitlement *e, char out[256]);

/* ---- invariants_log.c ---- */

/* The fold's account id (NULL when never opened). */
ledger_account *audit_fold_account(audit *a, uint64_t id);
/* Two accounts equal byte for byte as stored. */
bool audit_accounts_equal(const ledger_account *x, const ledger_account *y);

void audit_history_keys_init(audit *a);
/* Retention's floors, and with log retention the fold's state from the
 * checkpoint. */
int audit_seed_from_checkpoint(audit *a);
/* log_gap, hash_chain, the fold, inbox links per event. */
int audit_check_log(audit *a);
/* The history index against the transfer events of the log. */
int audit_check_history_index(audit *a);

/* ---- invariants_state.c ---- */

/* Stored transfers, then accounts (with the per-ledger sums), entitlements
 * and inbox records against the fold. */
int audit_check_records(audit *a);

/* ---- invariants_inbox_time.c ---- */

/* Add an inbox key to the fingerprint s (a->history_keys hash it). */
void audit_inbox_key_add(const audit *a, history_sums *s, const void *key, size_t len);

/* inbox_time: every inbox record (a->inbox_keys, summed by the inbox walk
 * of audit_check_records) is named by exactly one index entry, and every
 * key an entry names has its record, unless swept already. */
int audit_check_inbox_time(audit *a);
/* ---- invariants_index.c ---- */

/* record_index: the account and transfer indexes against the records. */
int audit_check_record_index(audit *a);

/* Cursors and dead letters of the subscribers. */
int audit_check_subscribers(audit *a);

#endif
