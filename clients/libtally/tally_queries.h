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

#endif
