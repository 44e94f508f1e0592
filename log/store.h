/*
 * store.h — the one LMDB environment of tally and its named databases.
 *
 * log/ owns the environment: opening it (creating the directory and the
 * databases of BRIEF §4), the per-process writer lock, transactions with
 * "remember the first error" semantics, and the translation of LMDB and
 * errno codes into tally_error. Nothing above log/ sees an MDB_* code as a
 * return value; ledger/ uses MDB_val and cursors through these wrappers.
 */
#ifndef TALLY_STORE_H
#define TALLY_STORE_H

#include <lmdb.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/bytes.h"
#include "common/lmdb_error.h"

/* Named databases; their names (store_db_name) are a stable contract. */
typedef enum store_db {
    STORE_DB_ACCOUNTS,
    STORE_DB_TRANSFERS,
    STORE_DB_ENTITLEMENTS,
    STORE_DB_EXPIRY,
    STORE_DB_LOG,
    STORE_DB_INBOX,
    STORE_DB_INBOX_TIME,
    STORE_DB_CURSORS,
    STORE_DB_DLQ,
    STORE_DB_META,
    STORE_DB_HISTORY,
    STORE_DB_CHECKPOINT,
    STORE_DB_FAILED_IDS, /* ledger/failed_id.h; since December 2026: absent from older
                          * stores opened read-only (see store_cursor_open) */
    STORE_DB_HISTORY_TAIL, /* ledger/history.h; since store format 4, absent as failed_ids */
    STORE_DB_HISTORY_RECENT, /* ledger/history.h; since store format 5, absent as failed_ids */
    STORE_DB_ACCOUNT_INDEX,  /* ledger/index.h; since store format 6, absent as failed_ids */
    STORE_DB_TRANSFER_INDEX, /* ledger/index.h; since store format 6, absent as failed_ids */
    STORE_DB_ENDPOINTS,      /* ledger/endpoint.h; since December 2026, absent as failed_ids */
    STORE_DB_ENDPOINT_ATTEMPTS, /* ledger/endpoint.h; as endpoints */
    STORE_DB_COUNT
} store_db;

/* Format of the environment; a store written by another format is refused
 * with TALLY_store_version_mismatch. Format 13 (December 2026) keeps
 * events in the log in their short stored form (log/stored_event.h:
 * without seq, id and hash, the type as a number, a UUID key as 16
 * bytes), which older builds would call corrupt. Format 12 (December 2026) stores the
 * inbox key that is a UUID's text as its 16 bytes (ledger/inbox.h), which
 * older builds would not find; the upgrade to it puts meta
 * "inbox_text_keys" (the last inbox_time key) when the inbox holds
 * records, so that lookups try a UUID key's text too until retention has
 * removed the records written before. Format 11 (December 2026) writes
 * inbox records of format 4 (uvarints, ledger/inbox.h), which older
 * builds would call corrupt. Format 10 (December 2026) writes the
 * entries of "history" as blocks of an account's seqs
 * (ledger/history_block.h), which older builds would call corrupt; it
 * reads the one-seq entries of the formats before as blocks of one.
 * Format 9 (December 2026) writes a
 * transfer's user data entries in "transfer_index" without its id (the
 * seq in their key names it, ledger/index.h), which older builds would
 * call corrupt; its build reads format 8's entries, which hold the id, as
 * they are. Format 8 (December 2026) writes
 * account records of format 4 (fixed width, ledger/account.h), which
 * older builds would call corrupt. Format 7 (December 2026) puts a
 * transfer's ALL and two account entries into "transfer_index" only when
 * retention removes its creating event: transfer_query walks the log and
 * account_transfers the account's history (ledger/query.h), so a format 6
 * build would miss newer transfers there; the upgrade to it
 * puts meta "index_pending", so the indexes are built anew without those
 * entries; and it may hold subscriber cursor records of format 2 (a
 * tail of tagged settings: filter, inactivity expiry, owner;
 * log/subscriber.h) and partitions records ("g" name,
 * log/subscriber_partition.h), which older builds would call corrupt. Format 6
 * writes account records of
 * format 3 and transfer records of format 3 (creation time and user data,
 * ledger/account.h, ledger/transfer.h), which older builds would call
 * corrupt, and indexes them ("account_index", "transfer_index",
 * ledger/index.h), which older builds would not keep; the upgrade to it
 * also puts meta "index_pending", so that the indexes of the records the
 * store already holds are built (ledger_index_build) before it serves.
 * Format 5 (December 2026) keeps the
 * history entries of the newest commits in "history_recent", one record
 * per commit (ledger/history.h), which older builds would not read, and
 * writes account records of format 2 (varints, ledger/account.h), which
 * they would call corrupt. Format 4 (December 2026) keeps each
 * account's newest history entries in "history_tail" (ledger/history.h),
 * which older builds would not read: their account_history would miss
 * them. Format 3 (December 2026) indexes the
 * inbox by commit group (ledger/inbox_time.h): one inbox_time entry lists
 * the keys of a group; older builds would not sweep such entries. Format 2 (December 2026) may hold
 * records older builds cannot read (transfer and inbox records of format 2,
 * "failed_ids"), so they refuse it rather than report corruption.
 * Format 1 to 12 stores are read as they are and marked 13 by the first
 * writer that opens them with store_options.upgrade (tallyd --upgrade; a
 * writer without it refuses them, saying what to do): nothing is
 * rewritten, new records take the new forms (their per-key inbox_time entries are swept as before; their
 * history has no tails until a writer appends to it). */
#define STORE_FORMAT_VERSION 13
#define STORE_FORMAT_VERSION_OLDEST 1

typedef struct store_options {
    const char *path;        /* data directory; created (mode 0700) if missing */
    uint64_t map_size_bytes; /* 0 = TALLY_MAP_SIZE_BYTES_DEFAULT */
    bool read_only;          /* open an existing store for reading only */
    bool no_lock;            /* skip the writer lock file (tests of two handles) */
    /* A new store's identity (meta/instance_id), e.g. another store's for
     * a copy that must apply the same commands to the same bytes; NULL: a
     * fresh UUIDv7. An existing store keeps its own. */
    const tally_id128 *instance_id;
    /* Where store_open says why it refused, when the store is damaged or
     * of another format: one sentence naming the file and the fault
     * (NULL: not said). */
    char *why;
    size_t why_bytes;
    /* Check LMDB's meta pages of an existing data.mdb before LMDB uses them
     * (store_meta_pages_check): a writer's open, after it took the lock. */
    bool check_meta_pages;
    /* A writer may mark a store of an older format as this one, in place
     * and one way (an older tallyd then refuses it): tallyd --upgrade.
     * Without it a writer refuses such a store with
     * TALLY_store_version_mismatch and why saying what to do; readers read
     * older formats either way. */
    bool upgrade;
} store_options;


typedef struct store store;

/* The log head as a write transaction sees it. log/log.c keeps it: read
 * from "meta" at most once, moved in memory by each append, written back
 * once by write_back at the top-level commit. The store only makes it
 * follow nesting as the data does: a child begins with its parent's, a
 * child's commit hands it back, an abort drops it with the rest of the
 * child (so the events of a failed command leave no trace in the head). */
struct store_txn;
typedef struct store_txn_head {
    uint64_t seq;
    uint8_t hash[32];
    bool known;  /* seq and hash hold this transaction's head */
    uint64_t committed_seq; /* with known: the head's seq when first read (the
                             * last commit's: appends move only seq) */
    bool moved;  /* appended to: meta must get it before the commit */
    int (*write_back)(struct store_txn *t); /* set with moved */
} store_txn_head;

/* Collectors: items a write transaction gathers to write once, in bulk, at
 * its top-level commit, instead of one put each as it goes. A small fixed
 * set, one per owner, each with its own bytes and write-back:
 *   STORE_COLLECT_INBOX_TIME  ledger/inbox_time.h: the inbox keys of a
 *                             commit group, one entry per group
 *   STORE_COLLECT_HISTORY     ledger/history.h: the 16-byte (account, seq)
 *                             keys, sorted, appended to the accounts'
 *                             "history_tail" records (a full tail put
 *                             into "history" through one cursor)
 * Each follows nesting as the head does: a child begins with its parent's
 * collections, a child's commit hands them back, an abort drops what the
 * child added (and what it wrote back early: see store_txn_collect_flush).
 * A collector's bytes live in one buffer owned by the top-level
 * transaction (freed when it ends); a transaction sees the first len of
 * them, of which the first written were already written back (by a flush
 * in it or in a child it committed) and the rest are pending. A child
 * only appends past its parent's len and never reorders bytes below it, so
 * an abort leaves the parent's bytes as they were. Commit write-backs run
 * in enum order, after the head's. */
typedef enum store_collector {
    STORE_COLLECT_INBOX_TIME,
    STORE_COLLECT_HISTORY,
    STORE_COLLECT_COUNT
} store_collector;

/* Write len collected bytes (whole items) into t; bytes are the caller's
 * to reorder (a private copy when t is nested). tag: the largest tag given
 * with an item since the collection began. Returns TALLY_ok or an error,
 * which it remembers in t (store_put does). */
typedef int (*store_collect_write_fn)(struct store_txn *t, uint8_t *bytes, size_t len,
                                      int64_t tag);

typedef struct store_txn_collect {
    size_t len;      /* bytes collected, as this transaction sees them */
    size_t written;  /* of len: written back already (store_txn_collect_flush) */
    int64_t tag;     /* the largest tag given with an item */
    store_collect_write_fn write_back; /* set with the first item */
} store_txn_collect;

typedef struct store_txn {
    store *st;
    MDB_txn *txn;
    struct store_txn *parent;
    int error;      /* first error seen in this transaction; commit refuses it */
    bool read_only;
    bool active;
    uint64_t writes; /* successful puts and deletes in this txn (not children) */
    store_txn_head head; /* write transactions only; log/log.h's */
    store_txn_collect collect[STORE_COLLECT_COUNT]; /* write transactions only;
                                                      store_txn_collect_add */
    uint8_t *collect_buf[STORE_COLLECT_COUNT]; /* top-level only: the collected bytes */
    size_t collect_cap[STORE_COLLECT_COUNT];
} store_txn;

/* Open (and for writers create) the store. A database added after the
 * first stores were written (failed_ids, history_tail) is created by the first writer
 * that opens an older store; a read-only open of a store that no writer of
 * this version has opened finds it missing, and it then reads as empty:
 * store_get gives TALLY_not_found, store_count 0 entries, and
 * store_cursor_open TALLY_not_found. A writer takes an exclusive lock
 * on DIR/tally.lock: a second writer gets TALLY_store_locked. Returns
 * TALLY_ok, TALLY_invalid_argument (bad options), TALLY_store_locked,
 * TALLY_store_version_mismatch (a store format this build does not read,
 * or data.mdb or lock.mdb of another LMDB data format), TALLY_corrupt_record
 * (data.mdb is no LMDB environment or is damaged: a meta page, the format
 * record), TALLY_not_found (read-only and missing), TALLY_storage_full,
 * TALLY_io_error or TALLY_out_of_memory; for the version and damage
 * refusals options->why says which file and what. *out is set only on
 * success; close it with store_close. */
int store_open(const store_options *options, store **out);

/* Write the reason of a refusal, printf-style, into why (why_bytes; NULL:
 * not said) and return code: the "why" buffers of store_open,
 * store_meta_pages_check and the checks built on them. */
int store_why(char *why, size_t why_bytes, int code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* Read LMDB's two meta pages of DIR/data.mdb from the file and check them:
 * each marked as a meta page, LMDB's magic number and data format, its own
 * page number, its last page within the file and its roots within that,
 * one page size, and transaction ids that LMDB's alternation explains (an
 * empty data.mdb is a new environment to LMDB: TALLY_ok).
 * LMDB itself checks only the first three, and only at its open; the rest
 * it uses as it finds them (store_meta.c). No lock is taken: beside a live
 * writer, ids that a commit between the two reads could explain are read
 * again before they count. Returns TALLY_ok, TALLY_corrupt_record,
 * TALLY_store_version_mismatch (another LMDB data format) or the file's
 * error, with a sentence naming the file and the page in why (NULL: not
 * said). */
int store_meta_pages_check(const char *dir, char *why, size_t why_bytes);

/* Close the environment and release the lock. NULL is allowed. No
 * transaction may be active. */
void store_close(store *st);

/* Stable name of a database ("accounts", "log", ...). */
const char *store_db_name(store_db db);

/* The environment and a database handle, for read-only tools and tests. */
MDB_env *store_env(store *st);
MDB_dbi store_dbi(store *st, store_db db);
const char *store_path(const store *st);

/* Random 128-bit id chosen when the store was created. */
/* The format a writer's open upgraded the store from (store_options.upgrade),
 * or 0 when it was already current or new. */
uint32_t store_upgraded_from(const store *st);
const tally_id128 *store_instance_id(const store *st);

/* Begin a transaction; with parent non-NULL a nested write transaction whose
 * commit merges into the parent and whose abort leaves the parent as it was.
 * Returns TALLY_ok, TALLY_read_only (write txn on a read-only store),
 * TALLY_out_of_memory or TALLY_internal. */
int store_txn_begin(store *st, store_txn *parent, bool read_only, store_txn *out);

/* Add len bytes (one item, with tag) to what collector c gathers in t for
 * its top-level commit, which calls write_back first when anything is
 * pending. TALLY_ok or TALLY_out_of_memory (remembered). */
int store_txn_collect_add(store_txn *t, store_collector c, const void *bytes, size_t len,
                          int64_t tag, store_collect_write_fn write_back);

/* Write what collector c has pending in t into t now (write_back), for a
 * reader of the same transaction that must see it; the commit then writes
 * only what is collected after. In a child, the writes go into the child:
 * an abort drops them and leaves the parent's items pending as they were.
 * TALLY_ok (also with nothing pending) or t's remembered error. */
int store_txn_collect_flush(store_txn *t, store_collector c);

/* Commit; if the transaction remembered an error it is aborted instead and
 * that error returned. A top-level commit first writes back a moved log
 * head (head.write_back) and what each collector has pending
 * (store_txn_collect_flush); a child's commit hands its head and
 * collections to the parent.
 * Otherwise TALLY_ok, TALLY_storage_full (map or disk full),
 * TALLY_io_error. The txn is finished either way. */
int store_txn_commit(store_txn *t);

/* Abort; safe on a finished or never-begun (zeroed) transaction. */
void store_txn_abort(store_txn *t);

/* Get: TALLY_ok with *val pointing into the map (valid until the txn ends),
 * TALLY_not_found, or a translated error. Lookups do not set txn->error. */
int store_get(store_txn *t, store_db db, const void *key, size_t key_len, MDB_val *val);

/* Put (flags: 0, MDB_APPEND, MDB_NOOVERWRITE): TALLY_ok or the translated
 * error, which is also remembered in t->error. */
int store_put(store_txn *t, store_db db, const void *key, size_t key_len, const void *val,
              size_t val_len, unsigned flags);

/* Delete a key: TALLY_ok, TALLY_not_found (not remembered) or an error
 * (remembered). */
int store_del(store_txn *t, store_db db, const void *key, size_t key_len);

/* Open a cursor on db; close it with mdb_cursor_close before the txn ends.
 * TALLY_not_found for a database the store was written without (a store
 * older than it, opened read-only, where it cannot be created): such a
 * database reads as empty, in store_get and store_count too. */
int store_cursor_open(store_txn *t, store_db db, MDB_cursor **out);

/* A walk over one database through a cursor, forward or backward: the
 * loops of ledger/ (lists, sweeps, retention, the audit's walks) without
 * raw cursor calls or LMDB codes. Typical use:
 *     store_scan s;
 *     int rc = store_scan_begin(t, db, NULL, 0, false, &s);
 *     if (rc != TALLY_ok) return rc;
 *     for (; rc == TALLY_ok && store_scan_on(&s); store_scan_next(&s))
 *         rc = use(&s.key, &s.val);
 *     return store_scan_end(&s, rc); */
typedef struct store_scan {
    MDB_cursor *cursor;
    MDB_val key, val; /* the entry the scan is on: into the map, valid until
                         the next step, a write in the txn, or its end */
    bool reverse;
    int rc;           /* TALLY_ok on an entry, TALLY_not_found past the end,
                         or the translated error of the last step */
} store_scan;

/* Open a scan of db in t and put it on its first entry: forward, the first
 * key at or after from (from NULL: the first key); with reverse, the last
 * key before from (from NULL: the last key). Returns TALLY_ok, and then
 * the scan must be ended with store_scan_end whether or not it is on an
 * entry; TALLY_not_found for a database the store was written without (as
 * store_cursor_open); or a translated error (no scan to end). */
int store_scan_begin(store_txn *t, store_db db, const void *from, size_t from_len, bool reverse,
                     store_scan *s);

/* Whether the scan is on an entry (s->key, s->val). */
static inline bool store_scan_on(const store_scan *s) { return s->rc == 0; /* TALLY_ok */ }

/* Step to the next entry (the previous one with reverse): store_scan_on. */
bool store_scan_next(store_scan *s);

/* Close the scan's cursor. Returns rc when it is an error (the caller's
 * own, which wins), else the scan's: TALLY_ok when it ran off its end or
 * was left on an entry, the translated error of a step that failed.
 * s->key and s->val keep pointing into the map until the txn ends. */
int store_scan_end(store_scan *s, int rc);

/* Translate an LMDB or errno code into tally_error (common/lmdb_error.h). */
static inline int store_translate(int rc) { return lmdb_error_translate(rc); }

/* Remember err as the transaction's first error (no-op if err is ok or an
 * error is already remembered); returns err. */
int store_txn_fail(store_txn *t, int err);

/* Map use: bytes of the map in use (last page number * page size) and the
 * map size. */
int store_map_usage(store_txn *t, uint64_t *used_bytes, uint64_t *map_bytes);

/* The map's size now; the limit it may grow to (set by tallyd from
 * --map-max-mb; never below the size now). */
uint64_t store_map_size(store *st);
void store_set_map_max(store *st, uint64_t bytes);
uint64_t store_map_max(store *st);

/* Double the map, up to store_map_max (rounded down to whole pages);
 * *now_bytes gets the new size. TALLY_storage_full when it already is at
 * the limit. No transaction of this process may be active (LMDB's rule for
 * mdb_env_set_mapsize): the caller makes sure. */
int store_map_grow(store *st, uint64_t *now_bytes);

/* An online, compacting, consistent copy of the environment into the new
 * directory dest (absolute; created with mode 0700; must not exist), with
 * LMDB's mdb_env_copy2(MDB_CP_COMPACT): a read transaction's snapshot,
 * never blocking the writer. With root non-NULL, dest must lie below root.
 * *bytes gets the copy's size. Returns TALLY_ok,
 * TALLY_backup_destination_exists, TALLY_backup_destination_invalid (not
 * absolute, parent missing, outside root), TALLY_storage_full,
 * TALLY_io_error; a failed copy is removed. On a refusal why (why_size
 * bytes) says what is wrong with dest, naming the path. */
int store_backup(store *st, const char *dest, const char *root, uint64_t *bytes, char *why,
                 size_t why_size);

/* Delete every entry of db (mdb_drop without deleting the database):
 * TALLY_ok or the translated error, remembered as store_put does. */
int store_clear(store_txn *t, store_db db);

/* Entries in a database. */
int store_count(store_txn *t, store_db db, uint64_t *entries);

#endif
