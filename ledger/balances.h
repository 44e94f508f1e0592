/*
 * balances.h — an account's balances at a point in time (account_balances,
 * balance_at; TigerBeetle's get_account_balances), served from the
 * history tally keeps (ledger/history.h): each transfer event that touched
 * the account is one entry, and its body holds the account as it was
 * right after it.
 *
 * An entry's time is the transfer's creation time for its transfer.created
 * event (an imported transfer's given time), else the event's commit time
 * (a hold's post, void or expiry). These never go back along an account's
 * history: commit times are monotone, and an import's time is past every
 * time the store held (ledger/imported.h). So a time bound is found by a
 * binary search over seqs, each probe one seek in the account's history
 * and one event read: a page costs at most 2 x 64 probes plus one event
 * read per entry returned, whatever the account's length.
 */
#ifndef TALLY_LEDGER_BALANCES_H
#define TALLY_LEDGER_BALANCES_H

#include "log/store.h"

#include <stdbool.h>
#include <stdint.h>

/* The account's balances right after the event at seq. */
typedef struct ledger_balance {
    uint64_t seq;
    int64_t timestamp_ms;
    int64_t debits_pending, debits_posted, credits_pending, credits_posted;
} ledger_balance;

/* A range of an account's history, paged. Bounds are inclusive; 0 is no
 * bound. */
typedef struct ledger_balances_query {
    uint64_t account_id;
    int64_t timestamp_min_ms, timestamp_max_ms;
    uint64_t seq_min, seq_max;
    uint64_t after_seq; /* page cursor: entries after it (reversed: before it); 0: none */
    bool reversed;      /* newest first */
    uint32_t limit;     /* 1 .. TALLY_HISTORY_ENTRIES_MAX */
} ledger_balances_query;

/* Up to q->limit entries of the range into out (*count of them), in
 * order; *next is the last one's seq when the range may go on (pass it
 * as after_seq), else 0. TALLY_ok, TALLY_corrupt_record (an event that is
 * not a transfer event of the account) or a store error. */
int ledger_balances_page(store_txn *t, const ledger_balances_query *q, ledger_balance *out,
                         uint32_t *count, uint64_t *next);

/* The account's balances at a time (by_time: after every entry at or
 * before time_ms) or a seq (after every entry at or before seq): *out,
 * with seq 0 and zero balances when no entry is that early. TALLY_ok or
 * as ledger_balances_page. */
int ledger_balance_at(store_txn *t, uint64_t account_id, bool by_time, int64_t time_ms,
                      uint64_t seq, ledger_balance *out);

/* The entry at seq of the account (its event decoded). */
int ledger_balance_entry(store_txn *t, uint64_t account_id, uint64_t seq, ledger_balance *out);

#endif
