/*
 * inbox.c — encoding and storage of idempotency records.
 */
#include "ledger/inbox.h"

#include "common/error.h"
#include "ledger/pair_key.h"

#include <assert.h>
#include <string.h>

#define INBOX_RECORD_FORMAT 2
/* format byte and fingerprint, then the outcome's fixed fields */
#define INBOX_OUTCOME_FIXED_BYTES (2 + 8 + 8 + 4 + 1 + 1)
#define INBOX_FIXED_BYTES (1 + LEDGER_FINGERPRINT_STORED_BYTES + INBOX_OUTCOME_FIXED_BYTES)
#define INBOX_RECORD_BYTES_MAX (INBOX_FIXED_BYTES + 2 * TALLY_CHAIN_COMMANDS_MAX)

/* Bytes of fingerprint a record of format f holds; 0 for an unknown format. */
static size_t fingerprint_bytes_of(uint8_t f)
{
    return f == 1 ? LEDGER_FINGERPRINT_BYTES : f == 2 ? LEDGER_FINGERPRINT_STORED_BYTES : 0;
}

_Static_assert(TALLY_CHAIN_COMMANDS_MAX <= 255, "chain_count is one byte");

size_t ledger_inbox_key(tally_str consumer, tally_str key,
                        uint8_t out[LEDGER_INBOX_KEY_BYTES_MAX])
{
    return ledger_pair_key(consumer, TALLY_CONSUMER_BYTES_MAX, key, TALLY_KEY_BYTES_MAX, out);
}

int ledger_inbox_decode(const void *key, size_t key_len, const void *val, size_t val_len,
                        ledger_inbox_record *out)
{
    const uint8_t *p = val;
    tally_str consumer, idempotency_key;
    memset(out, 0, sizeof(*out));
    if (!ledger_pair_key_split(key, key_len, TALLY_CONSUMER_BYTES_MAX, TALLY_KEY_BYTES_MAX,
                               &consumer, &idempotency_key) ||
        val_len < 1)
        return TALLY_corrupt_record;
    size_t fp_len = fingerprint_bytes_of(p[0]);
    size_t fixed = 1 + fp_len + INBOX_OUTCOME_FIXED_BYTES;
    if (fp_len == 0 || val_len < fixed)
        return TALLY_corrupt_record;
    out->consumer = consumer;
    out->key = idempotency_key;
    memcpy(out->fingerprint, p + 1, fp_len);
    out->fingerprint_len = (uint8_t)fp_len;
    const uint8_t *q = p + 1 + fp_len;
    ledger_outcome *o = &out->outcome;
    o->code = get_u16_be(q);
    o->time_ms = (int64_t)get_u64_be(q + 2);
    o->first_seq = get_u64_be(q + 10);
    o->event_count = get_u32_be(q + 18);
    o->chain_count = q[22];
    o->failed_index = q[23];
    o->stored = true;
    if (o->chain_count > TALLY_CHAIN_COMMANDS_MAX ||
        val_len != fixed + 2 * o->chain_count ||
        !tally_error_is_stored(o->code) || (o->event_count == 0) != (o->first_seq == 0) ||
        (o->code != TALLY_ok && o->event_count != 0))
        return TALLY_corrupt_record;
    for (uint32_t i = 0; i < o->chain_count; i++) {
        o->chain_codes[i] = get_u16_be(q + 24 + 2 * i);
        if (!tally_error_is_stored(o->chain_codes[i]))
            return TALLY_corrupt_record;
    }
    return TALLY_ok;
}

int ledger_inbox_get(store_txn *t, tally_str consumer, tally_str key,
                     ledger_inbox_record *out)
{
    uint8_t k[LEDGER_INBOX_KEY_BYTES_MAX];
    size_t n = ledger_inbox_key(consumer, key, k);
    MDB_val val;
    int rc = store_get(t, STORE_DB_INBOX, k, n, &val);
    if (rc != TALLY_ok)
        return rc;
    rc = ledger_inbox_decode(k, n, val.mv_data, val.mv_size, out);
    /* The decoded strings must not point at the stack copy of the key. */
    out->consumer = consumer;
    out->key = key;
    return rc;
}

int ledger_inbox_put(store_txn *t, tally_str consumer, tally_str key,
                     const uint8_t fingerprint[LEDGER_FINGERPRINT_BYTES],
                     const ledger_outcome *o)
{
    assert(tally_error_is_stored(o->code));
    assert(o->chain_count <= TALLY_CHAIN_COMMANDS_MAX);
    uint8_t k[8 + LEDGER_INBOX_KEY_BYTES_MAX], v[INBOX_RECORD_BYTES_MAX];
    size_t n = ledger_inbox_key(consumer, key, k + 8);
    v[0] = INBOX_RECORD_FORMAT;
    memcpy(v + 1, fingerprint, LEDGER_FINGERPRINT_STORED_BYTES);
    uint8_t *q = v + 1 + LEDGER_FINGERPRINT_STORED_BYTES;
    put_u16_be(q, (uint16_t)o->code);
    put_u64_be(q + 2, (uint64_t)o->time_ms);
    put_u64_be(q + 10, o->first_seq);
    put_u32_be(q + 18, o->event_count);
    q[22] = (uint8_t)o->chain_count;
    q[23] = (uint8_t)o->failed_index;
    for (uint32_t i = 0; i < o->chain_count; i++)
        put_u16_be(q + 24 + 2 * i, o->chain_codes[i]);
    size_t v_len = INBOX_FIXED_BYTES + 2 * o->chain_count;
    int rc = store_put(t, STORE_DB_INBOX, k + 8, n, v, v_len, MDB_NOOVERWRITE);
    if (rc != TALLY_ok)
        return rc;
    put_u64_be(k, (uint64_t)o->time_ms);
    return store_put(t, STORE_DB_INBOX_TIME, k, 8 + n, "", 0, 0);
}
