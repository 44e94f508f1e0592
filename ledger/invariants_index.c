/*
 * invariants_index.c — the record_index check (invariants.h): the account
 * and transfer indexes (ledger/index.h) against the records, both ways.
 * Every record has each of its entries, naming it; every entry names a
 * record whose entries include it. A transfer created at or below the log
 * floor (retired: its creating event is gone) has its two ACCOUNT entries
 * as well. A transfer's user data entries name it by their seq
 * (ledger_index_transfer_id): through the log, or once retired its ALL
 * entry. Skipped while an upgraded store's
 * indexes are still to be built (meta "index_pending").
 */
#include "ledger/invariants_audit.h"

#include "common/error.h"
#include "ledger/index.h"
#include "ledger/index_build.h"
#include "ledger/retention.h"

#include <inttypes.h>
#include <string.h>

#define CHECK "record_index"

/* The record of an id: its index entries; false when it is not there (or
 * not readable, which the records' own checks report). */
static bool entries_of(audit *a, store_db index, const uint8_t *id, size_t id_len,
                       ledger_index_key keys[LEDGER_INDEX_ENTRIES_MAX], size_t *n)
{
    ledger_indexed ix;
    if (index == STORE_DB_ACCOUNT_INDEX) {
        ledger_account acc;
        if (id_len != 8 || ledger_account_get(a->t, get_u64_be(id), &acc) != TALLY_ok)
            return false;
        ledger_account_indexed(&acc, &ix);
    } else {
        tally_id128 tid;
        ledger_transfer_record r;
        if (id_len != 16)
            return false;
        memcpy(tid.bytes, id, 16);
        ledger_log_floor floor;
        if (ledger_transfer_get(a->t, &tid, &r) != TALLY_ok ||
            ledger_log_floor_get(a->t, &floor) != TALLY_ok)
            return false;
        ledger_transfer_indexed(&r, &ix);
        ix.retired = r.created_seq <= floor.seq;
    }
    *n = ledger_index_keys(&ix, keys);
    return true;
}

static void entity_name(store_db index, const uint8_t *id, size_t id_len, char out[64])
{
    if (index == STORE_DB_ACCOUNT_INDEX && id_len == 8) {
        audit_name_account(get_u64_be(id), out);
    } else if (id_len == 16) {
        tally_id128 tid;
        memcpy(tid.bytes, id, 16);
        audit_name_transfer(&tid, out);
    } else {
        memcpy(out, "index entry", 12);
    }
}

/* The id an entry (key, val) of index names into out (its length into
 * *out_len): TALLY_ok, TALLY_corrupt_record (it names none) or a fault. */
static int entry_id(audit *a, store_db index, const MDB_val *key, const MDB_val *val,
                    uint8_t out[16], size_t *out_len)
{
    if (index == STORE_DB_ACCOUNT_INDEX) {
        *out_len = val->mv_size <= 16 ? val->mv_size : 0;
        memcpy(out, val->mv_data, *out_len);
        return TALLY_ok;
    }
    tally_id128 id;
    *out_len = 0;
    int rc = ledger_index_transfer_id(a->t, key, val, &id);
    if (rc == TALLY_ok) {
        memcpy(out, id.bytes, 16);
        *out_len = 16;
    }
    return rc;
}

/* A record: each of its entries is there and names it. */
static void check_record(audit *a, const MDB_val *k, const MDB_val *v, void *ctx)
{
    (void)v;
    store_db index = *(const store_db *)ctx;
    ledger_index_key keys[LEDGER_INDEX_ENTRIES_MAX];
    size_t n = 0;
    if (!entries_of(a, index, k->mv_data, k->mv_size, keys, &n))
        return;
    for (size_t i = 0; i < n; i++) {
        MDB_val key = {keys[i].len, keys[i].bytes}, got;
        uint8_t id[16] = {0};
        size_t id_len = 0;
        int rc = store_get(a->t, index, keys[i].bytes, keys[i].len, &got);
        if (rc == TALLY_ok)
            rc = entry_id(a, index, &key, &got, id, &id_len);
        if (rc != TALLY_ok && rc != TALLY_not_found && rc != TALLY_corrupt_record) {
            a->fault = rc;
            return;
        }
        if (rc == TALLY_ok && id_len == k->mv_size && memcmp(id, k->mv_data, id_len) == 0)
            continue;
        char name[64];
        entity_name(index, k->mv_data, k->mv_size, name);
        audit_report(a, CHECK, name, "%s entry of kind %u %s", store_db_name(index),
                     keys[i].bytes[0],
                     rc == TALLY_ok              ? "names another record"
                     : rc == TALLY_corrupt_record ? "names no record"
                                                  : "is missing");
    }
}

/* An entry: it names a record whose entries include it. */
static void check_entry(audit *a, const MDB_val *k, const MDB_val *v, void *ctx)
{
    store_db index = *(const store_db *)ctx;
    ledger_index_key keys[LEDGER_INDEX_ENTRIES_MAX];
    size_t n = 0;
    char name[64];
    uint8_t id[16] = {0};
    size_t id_len = 0;
    int rc = entry_id(a, index, k, v, id, &id_len);
    if (rc != TALLY_ok && rc != TALLY_corrupt_record) {
        a->fault = rc;
        return;
    }
    entity_name(index, id, id_len, name);
    if (rc != TALLY_ok || !entries_of(a, index, id, id_len, keys, &n)) {
        audit_report(a, CHECK, name, "%s entry (kind %u) names no record", store_db_name(index),
                     k->mv_size ? ((const uint8_t *)k->mv_data)[0] : 0);
        return;
    }
    for (size_t i = 0; i < n; i++)
        if (keys[i].len == k->mv_size && memcmp(keys[i].bytes, k->mv_data, k->mv_size) == 0)
            return;
    audit_report(a, CHECK, name, "%s entry (kind %u) does not match the record",
                 store_db_name(index), k->mv_size ? ((const uint8_t *)k->mv_data)[0] : 0);
}

int audit_check_record_index(audit *a)
{
    bool pending = false;
    int rc = ledger_index_is_pending(a->t, &pending);
    if (rc != TALLY_ok || pending)
        return rc;
    static const store_db records[2] = {STORE_DB_ACCOUNTS, STORE_DB_TRANSFERS};
    static const store_db indexes[2] = {STORE_DB_ACCOUNT_INDEX, STORE_DB_TRANSFER_INDEX};
    for (int i = 0; i < 2 && rc == TALLY_ok; i++) {
        MDB_cursor *probe;
        if (store_cursor_open(a->t, indexes[i], &probe) == TALLY_not_found)
            continue; /* a store older than the indexes, read only */
        mdb_cursor_close(probe);
        store_db index = indexes[i];
        rc = audit_walk_db(a, records[i], "record_index", NULL, check_record, &index);
        if (rc == TALLY_ok)
            rc = audit_walk_db(a, index, "record_index", NULL, check_entry, &index);
    }
    return rc;
}
