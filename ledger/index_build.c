/*
 * index_build.c — the indexes of a store upgraded from a format before 7
 * (ledger/index.h): every account and transfer record's entries, put in
 * batches of their own transactions, then the mark removed. A build
 * interrupted (a crash) leaves the mark, and the next one starts over.
 */
#include "ledger/index_build.h"

#include "common/error.h"
#include "ledger/account.h"
#include "ledger/index.h"
#include "ledger/retention.h"
#include "ledger/transfer.h"

#include <string.h>

#define BUILD_BATCH_RECORDS 10000 /* records per transaction */

/* One batch of db's records from *after (inclusive when !*started):
 * their entries into index; *after moves to the last, *done at the end. */
static int build_batch(store *st, store_db db, store_db index, uint8_t *after, size_t key_bytes,
                       bool *started, bool *done, uint64_t *records)
{
    store_txn t;
    int rc = store_txn_begin(st, NULL, false, &t);
    if (rc != TALLY_ok)
        return rc;
    store_scan s;
    rc = store_scan_begin(&t, db, *started ? after : NULL, *started ? key_bytes : 0, false, &s);
    if (rc == TALLY_ok && *started && store_scan_on(&s) && s.key.mv_size == key_bytes &&
        memcmp(s.key.mv_data, after, key_bytes) == 0)
        store_scan_next(&s); /* done in the batch before */
    ledger_log_floor floor; /* transfers created at or below it are retired */
    if (rc == TALLY_ok)
        rc = ledger_log_floor_get(&t, &floor);
    uint32_t n = 0;
    for (; rc == TALLY_ok && store_scan_on(&s) && n < BUILD_BATCH_RECORDS; store_scan_next(&s), n++) {
        if (s.key.mv_size != key_bytes) {
            rc = TALLY_corrupt_record;
            break;
        }
        ledger_indexed ix;
        if (db == STORE_DB_ACCOUNTS) {
            ledger_account a;
            rc = ledger_account_decode(get_u64_be(s.key.mv_data), s.val.mv_data, s.val.mv_size,
                                       &a);
            ledger_account_indexed(&a, &ix);
        } else {
            tally_id128 id;
            ledger_transfer_record r;
            memcpy(id.bytes, s.key.mv_data, 16);
            rc = ledger_transfer_decode(&id, s.val.mv_data, s.val.mv_size, &r);
            ledger_transfer_indexed(&r, &ix);
            ix.retired = r.created_seq <= floor.seq;
        }
        if (rc == TALLY_ok) {
            memcpy(after, s.key.mv_data, key_bytes);
            rc = ledger_index_put(&t, index, &ix);
        }
    }
    *done = rc == TALLY_ok && !store_scan_on(&s);
    rc = store_scan_end(&s, rc);
    *started = *started || n > 0;
    *records += n;
    if (rc != TALLY_ok) {
        store_txn_abort(&t);
        return rc;
    }
    return store_txn_commit(&t);
}

/* A batch that met a full map is done again once the map has doubled (up
 * to store_map_max), from where it began. */
static int build_db(store *st, store_db db, store_db index, size_t key_bytes, uint64_t *records)
{
    uint8_t after[16], before[16];
    bool started = false, done = false;
    int rc = TALLY_ok;
    while (rc == TALLY_ok && !done) {
        bool was_started = started;
        uint64_t was_records = *records;
        memcpy(before, after, sizeof(before));
        rc = build_batch(st, db, index, after, key_bytes, &started, &done, records);
        if (rc == TALLY_storage_full) {
            uint64_t now;
            memcpy(after, before, sizeof(after));
            started = was_started;
            *records = was_records;
            done = false;
            rc = store_map_grow(st, &now);
        }
    }
    return rc;
}

/* Whether the mark is there; with clear, the indexes emptied as well. */
static int pending(store *st, bool clear, bool *is)
{
    store_txn t;
    int rc = store_txn_begin(st, NULL, !clear, &t);
    if (rc != TALLY_ok)
        return rc;
    MDB_val v;
    rc = store_get(&t, STORE_DB_META, ledger_index_pending_key,
                   strlen(ledger_index_pending_key), &v);
    *is = rc == TALLY_ok;
    if (rc == TALLY_not_found)
        rc = TALLY_ok;
    if (rc == TALLY_ok && clear && *is)
        rc = store_clear(&t, STORE_DB_ACCOUNT_INDEX);
    if (rc == TALLY_ok && clear && *is)
        rc = store_clear(&t, STORE_DB_TRANSFER_INDEX);
    if (rc != TALLY_ok || !clear) {
        store_txn_abort(&t);
        return rc;
    }
    return store_txn_commit(&t);
}

int ledger_index_build(store *st, uint64_t *records)
{
    *records = 0;
    bool is = false;
    int rc = pending(st, true, &is);
    if (rc != TALLY_ok || !is)
        return rc;
    rc = build_db(st, STORE_DB_ACCOUNTS, STORE_DB_ACCOUNT_INDEX, 8, records);
    if (rc == TALLY_ok)
        rc = build_db(st, STORE_DB_TRANSFERS, STORE_DB_TRANSFER_INDEX, 16, records);
    store_txn t;
    if (rc == TALLY_ok)
        rc = store_txn_begin(st, NULL, false, &t);
    if (rc != TALLY_ok)
        return rc;
    rc = store_del(&t, STORE_DB_META, ledger_index_pending_key, strlen(ledger_index_pending_key));
    if (rc != TALLY_ok) {
        store_txn_abort(&t);
        return rc;
    }
    return store_txn_commit(&t);
}

int ledger_index_is_pending(store_txn *t, bool *is)
{
    MDB_val v;
    int rc = store_get(t, STORE_DB_META, ledger_index_pending_key,
                       strlen(ledger_index_pending_key), &v);
    *is = rc == TALLY_ok;
    return rc == TALLY_not_found ? TALLY_ok : rc;
}
