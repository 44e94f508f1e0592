/*
 * query.h — account_query, transfer_query and account_transfers: records
 * found through their indexes (ledger/index.h), filtered, in creation
 * order, a bounded page at a time.
 *
 * A query names any of ledger, code and the three user data values (0:
 * not filtered, as in TigerBeetle's QueryFilter), a creation time range
 * (inclusive; 0: open) and, for account_transfers, an account and which of
 * its sides (debits, credits). account_transfers walks the account's
 * retired transfers (below) and its history (ledger/history.h: "history",
 * its tail, the recent records) in seq order, reading each entry's event
 * (a hold's post, void or expiry is an entry too, skipped: its transfer is
 * listed at its creation); the other queries walk one index: the first of
 * user_data_128, user_data_64, user_data_32, code, ledger (accounts only)
 * that is given, else every account, or for transfers every retired
 * transfer and then the log's events in seq order (only transfer.created
 * ones list a transfer); the other filters are checked on the records. Creation order is
 * (created_ms, created_seq), and as the log's times never decrease (the
 * writer keeps them monotone) seq order is the same order. A time bound
 * of a walk by seq is found by a binary search over the events' order
 * times (a created transfer's or account's creation time, which is an
 * imported record's given time, else the commit time; they never go
 * back: ledger/imported.h), about log2(events) probes, and the walk stops
 * at the first event past the other bound. A page holds at most limit records
 * (1 .. TALLY_QUERY_ENTRIES_MAX) and examines at most
 * TALLY_QUERY_SCAN_ENTRIES_MAX index, history or log entries; it ends with a
 * cursor when it is full or hit that bound (the next page, from the
 * cursor, may be empty), and without one when nothing more can match.
 * Log retention removes the history entries of the events it removes;
 * for a transfer whose creating event it removes it puts ALL and two
 * entries by account into "transfer_index" (ledger/index.h, retired
 * transfers), and the walks by seq take those first (all at or below the
 * log floor), then the history or the log (all above it); reversed, the
 * other way round. So they list every transfer, whatever retention
 * removed.
 */
#ifndef TALLY_LEDGER_QUERY_H
#define TALLY_LEDGER_QUERY_H

#include "ledger/account.h"
#include "ledger/index.h"
#include "ledger/transfer.h"

typedef struct ledger_query {
    uint32_t ledger;          /* 0: any */
    uint16_t code;            /* 0: any */
    ledger_user_data user_data; /* each 0: any */
    int64_t timestamp_min_ms; /* creation time at least; 0: open */
    int64_t timestamp_max_ms; /* creation time at most; 0: open */
    uint64_t account_id;      /* account_transfers: the account (!= 0); else 0 */
    bool debits, credits;     /* account_transfers: its sides wanted (one at least) */
    uint32_t limit;           /* 1 .. TALLY_QUERY_ENTRIES_MAX */
    bool reversed;            /* newest first */
    bool has_cursor;          /* continue after (or, reversed, before) cursor */
    uint8_t cursor[LEDGER_INDEX_POSITION_BYTES];
} ledger_query;

/* Where a page ended: has_next with the cursor for the next page. */
typedef struct ledger_query_page {
    uint32_t count;
    bool has_next;
    uint8_t next[LEDGER_INDEX_POSITION_BYTES];
} ledger_query_page;

/* Each matching record in order to fn, which returns 0 to go on (another
 * value stops the walk and is returned). TALLY_ok,
 * TALLY_invalid_argument (a query out of its bounds: nothing read),
 * TALLY_corrupt_record (an index entry that names no record, or a record
 * that fails its checks) or a store error. An index the store lacks (read
 * only, before format 6) reads as empty. */
int ledger_account_query(store_txn *t, const ledger_query *q,
                         int (*fn)(const ledger_account *a, void *ctx), void *ctx,
                         ledger_query_page *page);
int ledger_transfer_query(store_txn *t, const ledger_query *q,
                          int (*fn)(const ledger_transfer_record *r, void *ctx), void *ctx,
                          ledger_query_page *page);

#endif
