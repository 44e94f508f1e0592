/*
 * tally_queries.h — libtally's queries of accounts and transfers
 * (account_query, transfer_query, account_transfers) and reversals
 * (transfer_reverse); part of <tally/tally.h>, which includes it at its
 * end (installed beside it). docs/PROTOCOL.md, "Queries" and "Reversals".
 */
#ifndef TALLY_QUERIES_H
#define TALLY_QUERIES_H

#include "tally.h"

/* transfer_reverse (docs/PROTOCOL.md, "Reversals"): a new transfer id that
 * moves amount of the posted transfer reverses back (amount 0: all that is
 * not reversed yet; code 0: the reversed transfer's code). */
typedef struct tally_reverse_args {
    tally_uuid id;
    tally_uuid reverses;
    int64_t amount;
    uint16_t code;
    tally_user_data user_data;
} tally_reverse_args;

int tally_reverse(tally_client *c, const char *key, const tally_reverse_args *r,
                  tally_result *out);

/* ---- queries (docs/PROTOCOL.md, "Queries") ----
 * Accounts or transfers by any of ledger, code and user data (0: not
 * filtered) and a creation time range (inclusive, Unix ms; 0: no bound),
 * in creation order or newest first (reversed). A page holds at most
 * min(limit, capacity, 1000) records (limit 0: 100); page->has_next with
 * page->next when more may follow: set q->cursor to it and
 * q->has_cursor, same filters, for the next page. */
typedef struct tally_query {
    uint32_t ledger;
    uint16_t code;
    tally_user_data user_data;
    int64_t timestamp_min_ms, timestamp_max_ms;
    uint32_t limit;
    bool reversed;
    bool has_cursor;
    tally_uuid cursor;
} tally_query;

typedef struct tally_query_page {
    size_t count;  /* records written to out */
    bool has_next;
    tally_uuid next;
} tally_query_page;

/* TALLY_ok, TALLY_invalid_argument (a NULL pointer or zero capacity:
 * nothing sent), a refusal of the server (value_out_of_range: a time range
 * that ends before it begins, neither debits nor credits), a transport
 * code, or TALLY_internal for a reply of the wrong shape. */
int tally_account_query(tally_client *c, const tally_query *q, tally_account *out,
                        size_t capacity, tally_query_page *page);
int tally_transfer_query(tally_client *c, const tally_query *q, tally_transfer_info *out,
                         size_t capacity, tally_query_page *page);
/* The transfers that debit (debits) or credit (credits) account_id; q's
 * ledger is not a filter of this op and must be 0. */
int tally_account_transfers(tally_client *c, uint64_t account_id, bool debits, bool credits,
                            const tally_query *q, tally_transfer_info *out, size_t capacity,
                            tally_query_page *page);

/* ---- balances at a point in time (docs/PROTOCOL.md, "Balances at a
 * point in time") ----
 * An account's balances right after one transfer event of its history:
 * the event's seq, its time (a transfer's creation time, else the
 * event's commit time) and the four balances. */
typedef struct tally_balance {
    uint64_t seq;
    int64_t timestamp_ms;
    int64_t debits_pending, debits_posted, credits_pending, credits_posted;
} tally_balance;

/* account_balances: the entries of account_id's history in a time range
 * (Unix ms) and a seq range, all inclusive (0: no bound), oldest first or
 * newest first (reversed); at most min(limit, capacity, 1000) of them
 * (limit 0: 100). page->has_next with page->next when more may follow:
 * pass it as after_seq, same bounds, for the next page. */
typedef struct tally_balances_query {
    int64_t timestamp_min_ms, timestamp_max_ms;
    uint64_t seq_min, seq_max;
    uint32_t limit;
    bool reversed;
    uint64_t after_seq; /* 0: from the start (or the end) */
} tally_balances_query;

typedef struct tally_balances_page {
    size_t count;
    bool has_next;
    uint64_t next;
} tally_balances_page;

/* TALLY_ok, TALLY_invalid_argument (a NULL pointer or zero capacity),
 * TALLY_not_found (no such account), a refusal of the server
 * (value_out_of_range: a range that ends before it begins), a transport
 * code, or TALLY_internal for a reply of the wrong shape. */
int tally_account_balances(tally_client *c, uint64_t account_id, const tally_balances_query *q,
                           tally_balance *out, size_t capacity, tally_balances_page *page);

/* balance_at: the balances after every entry at or before time_ms
 * (by_time) or seq; out->seq 0 and zero balances when none is that early.
 * Returns as tally_account_balances. */
int tally_balance_at(tally_client *c, uint64_t account_id, bool by_time, int64_t time_ms,
                     uint64_t seq, tally_balance *out);

#endif
