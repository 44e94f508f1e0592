/*
 * index.h — the secondary indexes of accounts and transfers, which the
 * queries (ledger/query.h) walk: by ledger, code, user data and, for
 * transfers retired by log retention, every one and either account, each
 * in creation order.
 *
 * Databases "account_index" and "transfer_index" (store format 7): key =
 * kind u8, the indexed value big-endian (its width fixed by the kind),
 * created_ms i64, created_seq u64; value = the record's id (8 bytes for an
 * account, 16 for a transfer), except on a transfer's USER_DATA_* entries
 * (store format 9): empty, the key's created_seq names the transfer
 * (ledger_index_transfer_id): the transfer.created event at that seq, or
 * once retention removed it, the transfer's ALL entry at the same
 * (created_ms, created_seq). The 16 bytes of id were a third of such an
 * entry (about 25 bytes of store each, with LMDB's node and page fill);
 * format 8's entries, which hold the id, are read as well, so the upgrade
 * rewrites none. An account has the entries ALL, LEDGER,
 * CODE, and each USER_DATA_* that is not 0. A transfer has each
 * USER_DATA_* that is not 0, and no LEDGER or CODE: they would cost two
 * entries (about 100 bytes with their pages) on every transfer, and a
 * transfer's ledger and code select little that its user data does not;
 * queries check them on the records. Nor has a transfer ALL or entries by
 * its accounts while its creating event is in the log: transfer_query
 * without an indexed filter walks the log's transfer.created events, and
 * account_transfers the account's history (ledger/history.h), which
 * already lists the transfer events of each account in commit order,
 * written in bulk per commit so that a commit does not dirty one random
 * leaf per account it touches. Entries keyed by account, put as each
 * transfer is created (store format 6 did: two per transfer, one random
 * leaf each), tripled the bytes written per commit at 64 clients of
 * single transfers; ALL cost 45 bytes of store per transfer.
 *
 * Log retention removes events and their history entries; so when it
 * removes a transfer's creating event (the transfer is "retired") it puts
 * the transfer's ALL and two ACCOUNT entries (its debit and its credit
 * account), in the sweep's transaction, off the path of the commands.
 * The walks by seq take those first (every retired transfer's seq is at
 * or below the log floor), then the log or the history (above it).
 *
 * The fields indexed never change after creation, so the entries are put
 * once, in the transaction that creates the record (or retires it), and
 * never removed (retention keeps account and transfer records). Within
 * one value the keys sort by creation time, then by the seq of the
 * creating event (unique): a query's page cursor is that (created_ms,
 * created_seq) pair, which the walks by seq continue from as well (the
 * log's times never decrease: seq order is creation order).
 *
 * A store upgraded from a format before 7 has records without entries
 * (before 6) or entries format 7 does not keep (6): meta "index_pending"
 * (set by log/store.c with the upgrade) says so, and ledger_index_build,
 * run by tallyd before it serves, empties both indexes, puts every
 * record's entries and removes the mark.
 */
#ifndef TALLY_LEDGER_INDEX_H
#define TALLY_LEDGER_INDEX_H

#include "ledger/command.h"
#include "log/store.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum ledger_index_kind {
    LEDGER_INDEX_ALL = 0,           /* no value: every account, every retired transfer */
    LEDGER_INDEX_LEDGER = 1,        /* u32 */
    LEDGER_INDEX_CODE = 2,          /* u16 */
    LEDGER_INDEX_USER_DATA_128 = 3, /* 16 bytes */
    LEDGER_INDEX_USER_DATA_64 = 4,  /* u64 */
    LEDGER_INDEX_USER_DATA_32 = 5,  /* u32 */
    LEDGER_INDEX_ACCOUNT = 6,       /* retired transfers (below): the debit or the credit
                                       account, u64 */
    LEDGER_INDEX_KINDS = 7,
} ledger_index_kind;

/* The longest value, the position (created_ms, created_seq) and a key. */
#define LEDGER_INDEX_VALUE_BYTES_MAX 16
#define LEDGER_INDEX_POSITION_BYTES 16
#define LEDGER_INDEX_KEY_BYTES_MAX (1 + LEDGER_INDEX_VALUE_BYTES_MAX + LEDGER_INDEX_POSITION_BYTES)
/* Entries of one record at most: ALL, LEDGER, CODE, three user data, two
 * accounts. */
#define LEDGER_INDEX_ENTRIES_MAX 8

/* What a record puts into its index. */
typedef struct ledger_indexed {
    uint8_t id[16];
    size_t id_bytes; /* 8: an account (id u64 big-endian), 16: a transfer */
    uint32_t ledger;
    uint16_t code;
    ledger_user_data user_data;
    uint64_t debit_account_id, credit_account_id; /* transfers; 0 for accounts */
    int64_t created_ms;
    uint64_t created_seq;
    bool retired; /* a transfer whose creating event is at or below the log floor */
} ledger_indexed;

typedef struct ledger_index_key {
    uint8_t bytes[LEDGER_INDEX_KEY_BYTES_MAX];
    size_t len;
} ledger_index_key;

/* The width of a kind's value (0 for ALL); an unknown kind has none and
 * is for no record. */
size_t ledger_index_value_bytes(ledger_index_kind kind);

/* The prefix of kind's entries with value (kind's width, big-endian):
 * its length. */
size_t ledger_index_prefix(ledger_index_kind kind, const uint8_t *value, uint8_t *out);

/* The keys of r's entries in out (at most LEDGER_INDEX_ENTRIES_MAX): their
 * count. */
size_t ledger_index_keys(const ledger_indexed *r, ledger_index_key out[LEDGER_INDEX_ENTRIES_MAX]);

/* Put r's entries into db (STORE_DB_ACCOUNT_INDEX or
 * STORE_DB_TRANSFER_INDEX), a transfer's USER_DATA_* ones with no value:
 * TALLY_ok or a fault. */
int ledger_index_put(store_txn *t, store_db db, const ledger_indexed *r);

/* Put the ALL and ACCOUNT entries of the transfer r, whose creating event
 * log retention removes (r->retired): TALLY_ok or a fault. */
int ledger_index_retire(store_txn *t, const ledger_indexed *r);

/* The id of the transfer a transfer_index entry (key, val) names into
 * *out: its value, or for an entry without one (a USER_DATA_* entry,
 * store format 9) the transfer created by the log event at the key's
 * created_seq, else (retention removed that event) the value of the ALL
 * entry at the key's position. TALLY_ok, TALLY_corrupt_record (a garbled
 * entry, an event that created no transfer, neither event nor ALL entry)
 * or a fault. */
int ledger_index_transfer_id(store_txn *t, const MDB_val *key, const MDB_val *val,
                             tally_id128 *out);

/* The meta mark of an upgraded store whose indexes are still to build. */
extern const char ledger_index_pending_key[];

#endif
