/*
 * tally_inbox.h — the subscriber-side inbox: apply tally events exactly
 * once to state the subscriber keeps in an LMDB environment of its own.
 *
 * tally delivers every event at least once (durable fetch, PUB stream,
 * log_read): a subscriber sees repeats, and after gap fills or redelivery
 * it may see an entity's events out of order. This helper makes the
 * effects exactly once. The subscriber opens its own environment through
 * it; the helper owns four databases named tally_inbox_* in it and the
 * application opens its own next to them (tally_inbox_db_open). Applying
 * one event is one write transaction, all or nothing:
 *
 *   1. decode the raw event bytes (docs/EVENTS.md; bounded, hash checked):
 *      malformed bytes are TALLY_corrupt_record and nothing is written;
 *   2. processed table (event id -> seq, event time, processed time): an id
 *      already there is a *repeat* and is dropped;
 *   3. version table ((kind, key) -> last applied version): an event whose
 *      entity_version is not newer than the entity's is *stale*, dropped,
 *      and recorded as processed;
 *   4. otherwise the application's callback runs in the same transaction
 *      with the decoded event; then the entity's version and the event id
 *      are recorded and the transaction commits. A callback error aborts
 *      everything: nothing of the event, the callback's writes included,
 *      is kept, and the same event may be applied again later.
 *
 * Why two tables. Every tally event carries its entity's version and a full
 * body (the objects after the change), so the version table alone already
 * makes a repeat harmless: the repeat's version is not newer, it is dropped
 * as stale. The processed table adds: (a) repeats are told apart from
 * stale events (the counters say which); (b) an audit of what was applied
 * (seq, event time and when it was processed, per event id); (c) exactly-
 * once for effects that are not guarded by the event's entity version —
 * an application that applies per-event effects to other keys, or that
 * mixes in events of other sources. It is pruned by processed time
 * (retention window), so it stays bounded; the version table has one row
 * per entity and is never pruned. An event repeated after its processed
 * entry was pruned is still dropped, as stale.
 *
 * Multi-object events. The entity version guards the event's own entity. A
 * transfer event also carries both accounts; an application that keeps
 * those must compare each object's own `version` with what it holds:
 * tally_inbox_account_advance (accounts) or tally_inbox_version_set (any
 * kind) records a version only when it is newer and says whether it was.
 * The helper records each event's entity in the same table, under the
 * kind names "account", "transfer" and "entitlement", so an account.opened
 * event and a transfer event that carries that account guard one row.
 *
 * Threads and processes: an inbox may be shared by threads; LMDB runs one
 * write transaction at a time (a second tally_inbox_txn_begin waits). A
 * tally_inbox_txn belongs to one thread; a callback must not start another
 * transaction of the same inbox. Open the application's databases before
 * sharing the handle. Open an environment once per process (LMDB's rule);
 * other processes may open it too, e.g. to read.
 *
 * Return codes are tally error codes (tally_error.h): TALLY_ok; TALLY_invalid_argument
 * (a NULL pointer, a bad option; nothing done); TALLY_corrupt_record (event
 * bytes that are not a well-formed tally event; stored records of the
 * wrong shape); TALLY_storage_full (the map is full: raise map_size_bytes);
 * TALLY_io_error, TALLY_out_of_memory, TALLY_store_version_mismatch (an
 * environment written by another format of this helper); or a callback's
 * own code, returned unchanged.
 */
#ifndef TALLY_INBOX_H
#define TALLY_INBOX_H

#include "tally.h"

#include <lmdb.h>
#include <msgpack.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define TALLY_INBOX_MAP_SIZE_BYTES_DEFAULT (UINT64_C(256) << 20) /* 256 MiB */
#define TALLY_INBOX_MAP_SIZE_BYTES_MIN (UINT64_C(1) << 20)      /* 1 MiB */
#define TALLY_INBOX_MAP_SIZE_BYTES_MAX (UINT64_C(1) << 44)      /* 16 TiB */
#define TALLY_INBOX_PATH_BYTES_MAX 4000
/* Databases the application may open besides the helper's four. */
#define TALLY_INBOX_APP_DBS_DEFAULT 8
#define TALLY_INBOX_APP_DBS_MAX 64
#define TALLY_INBOX_DB_NAME_BYTES_MAX 64
/* Processed entries are kept this long after they were processed. */
#define TALLY_INBOX_RETENTION_MS_DEFAULT (INT64_C(7) * 24 * 3600 * 1000) /* 7 days */
#define TALLY_INBOX_RETENTION_MS_MAX (INT64_C(3650) * 24 * 3600 * 1000)  /* 10 years */
/* Events applied in one transaction (tally_inbox_txn_apply, _apply_batch). */
#define TALLY_INBOX_TXN_EVENTS_MAX 10000
/* Entries one tally_inbox_prune call removes at most. */
#define TALLY_INBOX_PRUNE_ENTRIES_MAX 10000
/* Every commit also prunes up to (events in it + this) expired entries. */
#define TALLY_INBOX_PRUNE_PER_COMMIT_EXTRA 16
/* Version table: kind 1..32 bytes, key 1..400 bytes. */
#define TALLY_INBOX_KIND_BYTES_MAX 32
#define TALLY_INBOX_KEY_BYTES_MAX 400

typedef struct tally_inbox tally_inbox;
typedef struct tally_inbox_txn tally_inbox_txn;

typedef struct tally_inbox_options {
    const char *path;        /* directory of the environment; created (0700) if missing */
    uint64_t map_size_bytes; /* 0 = TALLY_INBOX_MAP_SIZE_BYTES_DEFAULT */
    unsigned app_dbs;        /* databases the application will open; 0 = 8, at most 64 */
    int64_t retention_ms;    /* keep processed entries this long; 0 = 7 days */
} tally_inbox_options;

/* A decoded event, as the callback sees it: libtally's one event type
 * (tally.h). body, raw and the strings are set; body and raw point into
 * the caller's bytes and the decoder's memory: valid during the callback
 * only. The entity's kind as a number is event->kind (tally_entity_kind);
 * event->entity_kind is its name. */
typedef tally_event tally_inbox_event;

typedef enum tally_inbox_outcome {
    TALLY_INBOX_APPLIED = 1,  /* the callback ran and its writes committed */
    TALLY_INBOX_REPEATED = 2, /* the event id was processed before: dropped */
    TALLY_INBOX_STALE = 3,    /* entity_version not newer: dropped, recorded as processed */
} tally_inbox_outcome;

typedef struct tally_inbox_stats {
    uint64_t applied, repeated, stale; /* committed outcomes since the environment was made */
    uint64_t processed_entries;        /* rows in the processed table now */
    uint64_t version_entries;          /* rows in the version table now */
} tally_inbox_stats;

/* What the processed table holds for one event id. */
typedef struct tally_inbox_processed {
    uint64_t seq;
    int64_t event_time_ms;
    int64_t processed_ms;
} tally_inbox_processed;

/* The application's part of applying one event: write its state in txn
 * (databases from tally_inbox_db_open; version helpers below). Return
 * TALLY_ok to keep the writes, anything else to abort the whole
 * transaction (that code is returned to the caller). Must not commit or
 * abort txn. */
typedef int (*tally_inbox_apply_fn)(tally_inbox *inbox, MDB_txn *txn,
                                    const tally_inbox_event *event, void *ctx);

/* ---- the environment ---- */

/* Open (creating if needed) the environment at options->path and the
 * helper's databases. *out is set on success only; close with
 * tally_inbox_close. */
int tally_inbox_open(const tally_inbox_options *options, tally_inbox **out);
/* Close; no transaction may be active. NULL is allowed. */
void tally_inbox_close(tally_inbox *inbox);
/* The environment, e.g. for the application's read-only transactions. */
MDB_env *tally_inbox_env(tally_inbox *inbox);
/* Open (creating) an application database: name 1..64 bytes, not starting
 * with "tally_inbox_"; flags are mdb_dbi_open flags (MDB_CREATE is added).
 * TALLY_invalid_argument also when more than options.app_dbs are opened. */
int tally_inbox_db_open(tally_inbox *inbox, const char *name, unsigned flags, MDB_dbi *out);

/* ---- applying events ---- */

/* One event in its own transaction. outcome may be NULL. On any error
 * nothing is written. */
int tally_inbox_apply(tally_inbox *inbox, const void *bytes, size_t len,
                      tally_inbox_apply_fn fn, void *ctx, tally_inbox_outcome *outcome);

typedef struct tally_inbox_input {
    const void *bytes;
    size_t len;
} tally_inbox_input;

/* count (1..TALLY_INBOX_TXN_EVENTS_MAX) events in one transaction, in the
 * order given: faster, and still all or nothing — on any error (malformed
 * event, callback error) nothing of the batch is written and *failed_index
 * names the event (may be NULL). outcomes (may be NULL) has count slots. A
 * repeat inside the batch is a repeat. */
int tally_inbox_apply_batch(tally_inbox *inbox, const tally_inbox_input *events, size_t count,
                            tally_inbox_apply_fn fn, void *ctx, tally_inbox_outcome *outcomes,
                            size_t *failed_index);

/* The batch form by hand, for applications that write more in the same
 * transaction (e.g. their position in the log). begin, then any number of
 * applies and writes in tally_inbox_txn_mdb, then commit or abort. The
 * first error of an apply is remembered: commit then aborts and returns it.
 * Commit and abort free t. */
int tally_inbox_txn_begin(tally_inbox *inbox, tally_inbox_txn **out);
MDB_txn *tally_inbox_txn_mdb(tally_inbox_txn *t);
int tally_inbox_txn_apply(tally_inbox_txn *t, const void *bytes, size_t len,
                          tally_inbox_apply_fn fn, void *ctx, tally_inbox_outcome *outcome);
int tally_inbox_txn_commit(tally_inbox_txn *t);
void tally_inbox_txn_abort(tally_inbox_txn *t);

/* ---- versions of objects (inside a transaction of this inbox) ----
 * kind: 1..32 bytes naming the object kind; key: 1..400 bytes. */

/* *version = the recorded version, 0 when none. */
int tally_inbox_version_get(tally_inbox *inbox, MDB_txn *txn, const char *kind,
                            const void *key, size_t key_len, uint64_t *version);
/* *newer = version is greater than the recorded one (or none is recorded). */
int tally_inbox_version_newer(tally_inbox *inbox, MDB_txn *txn, const char *kind,
                              const void *key, size_t key_len, uint64_t version, bool *newer);
/* Record version when it is newer; an older or equal one changes nothing.
 * *advanced (may be NULL) says whether it was recorded. */
int tally_inbox_version_set(tally_inbox *inbox, MDB_txn *txn, const char *kind,
                            const void *key, size_t key_len, uint64_t version, bool *advanced);
/* The same for an account object (kind "account", key the id, the row the
 * helper uses for account events): *newer says whether a->version was newer
 * and is now recorded — then write the account, else leave it. */
int tally_inbox_account_advance(tally_inbox *inbox, MDB_txn *txn, const tally_account *a,
                                bool *newer);

/* ---- the processed table ---- */

/* TALLY_ok with *out, or TALLY_not_found. txn NULL: a read transaction of
 * its own. */
int tally_inbox_processed_get(tally_inbox *inbox, MDB_txn *txn, const tally_uuid *id,
                              tally_inbox_processed *out);
/* Remove entries processed before now_ms - retention_ms, oldest first, at
 * most max_entries (0 = 1000; at most TALLY_INBOX_PRUNE_ENTRIES_MAX) in one
 * transaction; now_ms >= 0. *pruned (may be NULL) gets how many; *more (may be NULL)
 * whether expired entries remain. Commits also prune a few on their own. */
int tally_inbox_prune(tally_inbox *inbox, int64_t now_ms, uint32_t max_entries,
                      uint32_t *pruned, bool *more);
int tally_inbox_stats_get(tally_inbox *inbox, tally_inbox_stats *out);

/* ---- decoding bodies ----
 * The objects of an event body (docs/EVENTS.md "Objects in bodies"), e.g.
 * tally_account_from_msgpack(tally_event_part(ev, TALLY_PART_DEBIT_ACCOUNT), &a).
 * The body is a map of named objects in events of format 1 and an array of
 * rows in format 2: tally_event_part (tally.h) finds a part in either, and the
 * *_from_msgpack functions read either form of an object.
 * TALLY_ok, or TALLY_corrupt_record when o is not such an object. */
int tally_account_from_msgpack(const msgpack_object *o, tally_account *out);
int tally_transfer_from_msgpack(const msgpack_object *o, tally_transfer_info *out);
int tally_entitlement_from_msgpack(const msgpack_object *o, tally_entitlement *out);
/* The value of key in map o, or NULL (o not a map, key absent). */
const msgpack_object *tally_msgpack_get(const msgpack_object *o, const char *key);
/* An LMDB return code (of the application's own mdb_* calls) as a tally
 * code: MDB_NOTFOUND is TALLY_not_found, MDB_MAP_FULL TALLY_storage_full, ... */
int tally_lmdb_error(int mdb_rc);
/* Unpack one msgpack object (e.g. a stored copy of a body object) without
 * trusting its counts: the structure is checked before msgpack-c allocates
 * (at most 16 levels; the object must fill len exactly). out is initialised
 * by the caller (msgpack_unpacked_init) and destroyed by it. TALLY_ok,
 * TALLY_corrupt_record or TALLY_out_of_memory. */
int tally_msgpack_unpack(const void *bytes, size_t len, msgpack_unpacked *out);

#ifdef __cplusplus
}
#endif
#endif
