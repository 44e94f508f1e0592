/*
 * failed_id.c — the failed_ids database: transfer ids that failed within
 * the dedupe window (failed_id.h).
 */
#include "ledger/failed_id.h"

#include "common/error.h"
#include "common/limits.h"
#include "ledger/inbox.h"

#include <assert.h>
#include <string.h>

#define FAILED_ID_FORMAT 1
#define FAILED_ID_FIXED_BYTES (1 + 2 + 8)

bool ledger_failed_id_remembers(int code)
{
    return code != TALLY_ok && tally_error_class_of(code) == TALLY_CLASS_BUSINESS &&
           !ledger_outcome_names_original(code) && /* exists*, id_already_failed */
           code != TALLY_linked_operation_failed && code != TALLY_idempotency_key_reused;
}

int ledger_failed_id_decode(const void *key, size_t key_len, const void *val, size_t val_len,
                            ledger_failed_id *out)
{
    const uint8_t *p = val;
    memset(out, 0, sizeof(*out));
    if (key_len != 16 || val_len <= FAILED_ID_FIXED_BYTES || p[0] != FAILED_ID_FORMAT)
        return TALLY_corrupt_record;
    memcpy(out->id.bytes, key, 16);
    out->code = get_u16_be(p + 1);
    out->time_ms = (int64_t)get_u64_be(p + 3);
    bool split = ledger_inbox_key_split(p + FAILED_ID_FIXED_BYTES, val_len - FAILED_ID_FIXED_BYTES,
                                        &out->consumer, &out->key, out->key_text);
    if (!split || tally_id128_is_zero(&out->id) || !ledger_failed_id_remembers(out->code) ||
        out->time_ms <= 0 || out->time_ms > TALLY_TIME_MS_MAX)
        return TALLY_corrupt_record;
    return TALLY_ok;
}

int ledger_failed_id_get(store_txn *t, const tally_id128 *id, ledger_failed_id *out)
{
    MDB_val val;
    int rc = store_get(t, STORE_DB_FAILED_IDS, id->bytes, 16, &val);
    if (rc != TALLY_ok)
        return rc;
    ledger_failed_id scratch;
    return ledger_failed_id_decode(id->bytes, 16, val.mv_data, val.mv_size, out ? out : &scratch);
}

int ledger_failed_id_put(store_txn *t, const tally_id128 *id, int code, int64_t time_ms,
                         tally_str consumer, tally_str key)
{
    assert(!tally_id128_is_zero(id) && ledger_failed_id_remembers(code));
    assert(time_ms > 0 && time_ms <= TALLY_TIME_MS_MAX);
    uint8_t v[FAILED_ID_FIXED_BYTES + LEDGER_INBOX_KEY_BYTES_MAX];
    v[0] = FAILED_ID_FORMAT;
    put_u16_be(v + 1, (uint16_t)code);
    put_u64_be(v + 3, (uint64_t)time_ms);
    size_t n = ledger_inbox_key(consumer, key, v + FAILED_ID_FIXED_BYTES);
    return store_put(t, STORE_DB_FAILED_IDS, id->bytes, 16, v, FAILED_ID_FIXED_BYTES + n, 0);
}

int ledger_failed_id_forget(store_txn *t, const tally_id128 *id, const void *inbox_key,
                            size_t inbox_key_len)
{
    MDB_val val;
    int rc = store_get(t, STORE_DB_FAILED_IDS, id->bytes, 16, &val);
    if (rc == TALLY_not_found)
        return TALLY_ok;
    if (rc != TALLY_ok)
        return rc;
    /* Only the entry this attempt left: an id is failed by one attempt at
     * a time, but a stray entry must not be removed by another's record. */
    const uint8_t *p = val.mv_data;
    if (val.mv_size != FAILED_ID_FIXED_BYTES + inbox_key_len ||
        memcmp(p + FAILED_ID_FIXED_BYTES, inbox_key, inbox_key_len) != 0)
        return TALLY_ok;
    rc = store_del(t, STORE_DB_FAILED_IDS, id->bytes, 16);
    return rc == TALLY_not_found ? TALLY_ok : rc;
}
