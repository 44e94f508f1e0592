/*
 * index.c — the keys of the account and transfer indexes and their puts
 * (ledger/index.h). Knows no record format: the records' owners say what
 * they index (ledger_indexed).
 */
#include "ledger/index.h"

#include "common/error.h"
#include "log/log.h"

#include <assert.h>
#include <string.h>

const char ledger_index_pending_key[] = "index_pending";

static const uint8_t value_bytes[LEDGER_INDEX_KINDS] = {
    [LEDGER_INDEX_ALL] = 0,           [LEDGER_INDEX_LEDGER] = 4,
    [LEDGER_INDEX_CODE] = 2,          [LEDGER_INDEX_USER_DATA_128] = 16,
    [LEDGER_INDEX_USER_DATA_64] = 8,  [LEDGER_INDEX_USER_DATA_32] = 4,
    [LEDGER_INDEX_ACCOUNT] = 8,
};

size_t ledger_index_value_bytes(ledger_index_kind kind)
{
    return (unsigned)kind < LEDGER_INDEX_KINDS ? value_bytes[kind] : 0;
}

size_t ledger_index_prefix(ledger_index_kind kind, const uint8_t *value, uint8_t *out)
{
    size_t n = ledger_index_value_bytes(kind);
    out[0] = (uint8_t)kind;
    if (n)
        memcpy(out + 1, value, n);
    return 1 + n;
}

/* One key: kind, value, created_ms, created_seq. */
static void key_of(ledger_index_key *k, ledger_index_kind kind, const uint8_t *value,
                   const ledger_indexed *r)
{
    k->len = ledger_index_prefix(kind, value, k->bytes);
    put_u64_be(k->bytes + k->len, (uint64_t)r->created_ms);
    put_u64_be(k->bytes + k->len + 8, r->created_seq);
    k->len += LEDGER_INDEX_POSITION_BYTES;
}

/* A transfer's two ACCOUNT keys into out: 2. */
static size_t account_keys(const ledger_indexed *r, ledger_index_key out[2])
{
    uint8_t v[8];
    put_u64_be(v, r->debit_account_id);
    key_of(&out[0], LEDGER_INDEX_ACCOUNT, v, r);
    put_u64_be(v, r->credit_account_id);
    key_of(&out[1], LEDGER_INDEX_ACCOUNT, v, r);
    return 2;
}

size_t ledger_index_keys(const ledger_indexed *r, ledger_index_key out[LEDGER_INDEX_ENTRIES_MAX])
{
    uint8_t v[8];
    size_t n = 0;
    if (r->id_bytes == 8 || r->retired) /* live transfers: the log lists them */
        key_of(&out[n++], LEDGER_INDEX_ALL, NULL, r);
    if (r->id_bytes == 8) { /* transfers: ledger and code are checked on the records */
        put_u32_be(v, r->ledger);
        key_of(&out[n++], LEDGER_INDEX_LEDGER, v, r);
        put_u16_be(v, r->code);
        key_of(&out[n++], LEDGER_INDEX_CODE, v, r);
    }
    if (!tally_id128_is_zero(&r->user_data.user_data_128))
        key_of(&out[n++], LEDGER_INDEX_USER_DATA_128, r->user_data.user_data_128.bytes, r);
    if (r->user_data.user_data_64 != 0) {
        put_u64_be(v, r->user_data.user_data_64);
        key_of(&out[n++], LEDGER_INDEX_USER_DATA_64, v, r);
    }
    if (r->user_data.user_data_32 != 0) {
        put_u32_be(v, r->user_data.user_data_32);
        key_of(&out[n++], LEDGER_INDEX_USER_DATA_32, v, r);
    }
    if (r->id_bytes == 16 && r->retired)
        n += account_keys(r, out + n);
    assert(n <= LEDGER_INDEX_ENTRIES_MAX);
    return n;
}

static bool kind_is_user_data(unsigned kind)
{
    return kind == LEDGER_INDEX_USER_DATA_128 || kind == LEDGER_INDEX_USER_DATA_64 ||
           kind == LEDGER_INDEX_USER_DATA_32;
}

int ledger_index_put(store_txn *t, store_db db, const ledger_indexed *r)
{
    assert(r->id_bytes == 8 || r->id_bytes == 16);
    assert(db == STORE_DB_ACCOUNT_INDEX || db == STORE_DB_TRANSFER_INDEX);
    ledger_index_key keys[LEDGER_INDEX_ENTRIES_MAX];
    size_t n = ledger_index_keys(r, keys);
    int rc = TALLY_ok;
    for (size_t i = 0; i < n && rc == TALLY_ok; i++) {
        /* a transfer's user data entries: the seq in the key names it */
        size_t id_bytes = r->id_bytes == 16 && kind_is_user_data(keys[i].bytes[0]) ? 0
                                                                                   : r->id_bytes;
        rc = store_put(t, db, keys[i].bytes, keys[i].len, r->id, id_bytes, 0);
    }
    return rc;
}

/* The transfer the event at seq created into *out: TALLY_not_found when
 * the log no longer holds seq. */
static int created_by_event(store_txn *t, uint64_t seq, tally_id128 *out)
{
    msgpack_unpacked up;
    msgpack_unpacked_init(&up);
    log_event ev;
    int rc = log_event_load(t, seq, &up, &ev);
    if (rc == TALLY_ok && ev.entity.kind == LOG_ENTITY_TRANSFER &&
        log_event_type_is(&ev, LOG_EVENT_TRANSFER_CREATED))
        *out = ev.entity.transfer_id;
    else if (rc == TALLY_ok)
        rc = TALLY_corrupt_record;
    msgpack_unpacked_destroy(&up);
    return rc;
}

int ledger_index_transfer_id(store_txn *t, const MDB_val *key, const MDB_val *val,
                             tally_id128 *out)
{
    if (val->mv_size == 16) { /* ALL, ACCOUNT, or user data of store format 8 */
        memcpy(out->bytes, val->mv_data, 16);
        return TALLY_ok;
    }
    const uint8_t *k = key->mv_data;
    if (val->mv_size != 0 || key->mv_size < 1 || !kind_is_user_data(k[0]) ||
        key->mv_size != 1 + ledger_index_value_bytes(k[0]) + LEDGER_INDEX_POSITION_BYTES)
        return TALLY_corrupt_record;
    const uint8_t *pos = k + key->mv_size - LEDGER_INDEX_POSITION_BYTES;
    int rc = created_by_event(t, get_u64_be(pos + 8), out);
    if (rc != TALLY_not_found)
        return rc;
    /* retired: its creating event is gone, its ALL entry is at the same
     * position (ledger_index_retire, in the sweep that removed it) */
    uint8_t all[1 + LEDGER_INDEX_POSITION_BYTES];
    all[0] = LEDGER_INDEX_ALL;
    memcpy(all + 1, pos, LEDGER_INDEX_POSITION_BYTES);
    MDB_val v;
    rc = store_get(t, STORE_DB_TRANSFER_INDEX, all, sizeof(all), &v);
    if (rc == TALLY_ok && v.mv_size == 16)
        memcpy(out->bytes, v.mv_data, 16);
    return rc == TALLY_not_found || (rc == TALLY_ok && v.mv_size != 16) ? TALLY_corrupt_record
                                                                         : rc;
}

int ledger_index_retire(store_txn *t, const ledger_indexed *r)
{
    assert(r->id_bytes == 16 && r->retired);
    ledger_index_key keys[3];
    key_of(&keys[0], LEDGER_INDEX_ALL, NULL, r);
    size_t n = 1 + account_keys(r, keys + 1);
    int rc = TALLY_ok;
    for (size_t i = 0; i < n && rc == TALLY_ok; i++)
        rc = store_put(t, STORE_DB_TRANSFER_INDEX, keys[i].bytes, keys[i].len, r->id, 16, 0);
    return rc;
}
