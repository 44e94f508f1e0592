/*
 * inbox.c — encoding and storage of idempotency records.
 */
#include "ledger/inbox.h"

#include "common/error.h"
#include "ledger/inbox_time.h"
#include "ledger/pair_key.h"

#include <assert.h>
#include <string.h>

#define INBOX_RECORD_FORMAT 2
#define INBOX_RECORD_FORMAT_ORIGINAL 3 /* + original_seq, failed transfer id */
#define INBOX_RECORD_FORMAT_VARINTS 4  /* the fields as uvarints (inbox.h) */
/* format byte and fingerprint, then the outcome's fixed fields */
#define INBOX_OUTCOME_FIXED_BYTES (2 + 8 + 8 + 4 + 1 + 1)
#define INBOX_FIXED_BYTES (1 + LEDGER_FINGERPRINT_STORED_BYTES + INBOX_OUTCOME_FIXED_BYTES)
#define INBOX_ORIGINAL_BYTES (8 + 16)
#define INBOX_RECORD_BYTES_MAX \
    (INBOX_FIXED_BYTES + 2 * TALLY_CHAIN_COMMANDS_MAX + INBOX_ORIGINAL_BYTES)
/* Format 4: the format byte, the fingerprint, code, time_ms, first_seq,
 * event_count, chain_count, failed_index, the chain codes and
 * original_seq as uvarints, and the failed transfer id. */
#define INBOX_VARINTS_BYTES_MAX                                                             \
    (1 + LEDGER_FINGERPRINT_STORED_BYTES + (7 + TALLY_CHAIN_COMMANDS_MAX) * UVARINT_BYTES_MAX + \
     16)

/* Bytes of fingerprint a record of format f holds; 0 for an unknown format. */
static size_t fingerprint_bytes_of(uint8_t f)
{
    return f == 1 ? LEDGER_FINGERPRINT_BYTES
           : f == INBOX_RECORD_FORMAT || f == INBOX_RECORD_FORMAT_ORIGINAL ||
                   f == INBOX_RECORD_FORMAT_VARINTS
               ? LEDGER_FINGERPRINT_STORED_BYTES
               : 0;
}

_Static_assert(TALLY_CHAIN_COMMANDS_MAX <= 255, "chain_count is one byte");
_Static_assert(INBOX_RECORD_BYTES_MAX <= INBOX_VARINTS_BYTES_MAX, "one buffer for both");

bool ledger_outcome_names_original(int code)
{
    switch (code) {
    case TALLY_exists:
    case TALLY_exists_with_different_ledger:
    case TALLY_exists_with_different_code:
    case TALLY_exists_with_different_flags:
    case TALLY_exists_with_different_debit_account_id:
    case TALLY_exists_with_different_credit_account_id:
    case TALLY_exists_with_different_amount:
    case TALLY_exists_with_different_timeout:
    case TALLY_exists_with_different_user_data_128:
    case TALLY_exists_with_different_user_data_64:
    case TALLY_exists_with_different_user_data_32:
    case TALLY_exists_with_different_reverses:
    case TALLY_id_already_failed:
        return true;
    default:
        return false;
    }
}

/* The outcome's fields but the format and fingerprint, which must hold
 * (ledger_inbox_decode's rules): false otherwise. */
static bool outcome_is_sane(const ledger_outcome *o)
{
    if (o->chain_count > TALLY_CHAIN_COMMANDS_MAX || !tally_error_is_decided(o->code) ||
        (o->event_count == 0) != (o->first_seq == 0) ||
        (o->code != TALLY_ok && o->event_count != 0))
        return false;
    for (uint32_t i = 0; i < o->chain_count; i++)
        if (!tally_error_is_decided(o->chain_codes[i]))
            return false;
    return true;
}

/* Format 4's fields after the fingerprint, q to end, into o: false for a
 * record that does not decode or holds values out of their ranges. */
static bool outcome_decode_varints(const uint8_t *q, const uint8_t *end, ledger_outcome *o)
{
    uint64_t f[6];
    for (int i = 0; i < 6; i++)
        if (!get_uvarint(&q, end, &f[i]))
            return false;
    if (f[0] > UINT16_MAX || f[1] > INT64_MAX || f[3] > UINT32_MAX ||
        f[4] > TALLY_CHAIN_COMMANDS_MAX || f[5] > UINT8_MAX)
        return false;
    o->code = (int)f[0];
    o->time_ms = (int64_t)f[1];
    o->first_seq = f[2];
    o->event_count = (uint32_t)f[3];
    o->chain_count = (uint32_t)f[4];
    o->failed_index = (uint32_t)f[5];
    o->stored = true;
    for (uint32_t i = 0; i < o->chain_count; i++) {
        uint64_t c;
        if (!get_uvarint(&q, end, &c) || c > UINT16_MAX)
            return false;
        o->chain_codes[i] = (uint16_t)c;
    }
    if (q < end) { /* original_seq and the failed transfer id */
        if (!get_uvarint(&q, end, &o->original_seq) || end - q != 16)
            return false;
        memcpy(o->failed_id.bytes, q, 16);
        q += 16;
        if (o->code == TALLY_ok || (o->original_seq == 0 && tally_id128_is_zero(&o->failed_id)))
            return false;
    }
    return q == end && outcome_is_sane(o);
}

/* Format 4 of o with the fingerprint into v: its length. */
static size_t outcome_encode_varints(const uint8_t fingerprint[LEDGER_FINGERPRINT_BYTES],
                                     const ledger_outcome *o, uint8_t *v)
{
    size_t len = 0;
    v[len++] = INBOX_RECORD_FORMAT_VARINTS;
    memcpy(v + len, fingerprint, LEDGER_FINGERPRINT_STORED_BYTES);
    len += LEDGER_FINGERPRINT_STORED_BYTES;
    const uint64_t f[6] = {(uint16_t)o->code, (uint64_t)o->time_ms, o->first_seq,
                           o->event_count, o->chain_count, o->failed_index};
    for (int i = 0; i < 6; i++)
        len += put_uvarint(v + len, f[i]);
    for (uint32_t i = 0; i < o->chain_count; i++)
        len += put_uvarint(v + len, o->chain_codes[i]);
    if (o->original_seq != 0 || !tally_id128_is_zero(&o->failed_id)) {
        len += put_uvarint(v + len, o->original_seq);
        memcpy(v + len, o->failed_id.bytes, 16);
        len += 16;
    }
    return len;
}

const char ledger_inbox_text_keys_mark[] = "inbox_text_keys";

size_t ledger_inbox_key(tally_str consumer, tally_str key,
                        uint8_t out[LEDGER_INBOX_KEY_BYTES_MAX])
{
    uint8_t packed[16];
    if (!bytes_uuid_text_pack(key.ptr, key.len, packed))
        return ledger_pair_key(consumer, TALLY_CONSUMER_BYTES_MAX, key, TALLY_KEY_BYTES_MAX, out);
    size_t n = ledger_pair_key_prefix(consumer, TALLY_CONSUMER_BYTES_MAX, out);
    out[0] |= LEDGER_INBOX_KEY_PACKED;
    memcpy(out + n, packed, sizeof(packed));
    return n + sizeof(packed);
}

size_t ledger_inbox_key_text(tally_str consumer, tally_str key,
                             uint8_t out[LEDGER_INBOX_KEY_BYTES_MAX])
{
    uint8_t packed[16];
    return bytes_uuid_text_pack(key.ptr, key.len, packed)
               ? ledger_pair_key(consumer, TALLY_CONSUMER_BYTES_MAX, key, TALLY_KEY_BYTES_MAX, out)
               : 0;
}

bool ledger_inbox_key_split(const void *k, size_t len, tally_str *consumer, tally_str *key,
                            char text[LEDGER_INBOX_UUID_TEXT_BYTES])
{
    const uint8_t *p = k;
    if (len < 1 || !(p[0] & LEDGER_INBOX_KEY_PACKED))
        return ledger_pair_key_split(k, len, TALLY_CONSUMER_BYTES_MAX, TALLY_KEY_BYTES_MAX,
                                     consumer, key);
    size_t c = p[0] & ~LEDGER_INBOX_KEY_PACKED;
    if (c == 0 || c > TALLY_CONSUMER_BYTES_MAX || len != 1 + c + 16)
        return false;
    *consumer = (tally_str){(const char *)p + 1, c};
    bytes_uuid_text_write(p + 1 + c, text);
    *key = (tally_str){text, LEDGER_INBOX_UUID_TEXT_BYTES};
    return true;
}

int ledger_inbox_text_keys_unmark(store_txn *t)
{
    MDB_val mark;
    int rc = store_get(t, STORE_DB_META, ledger_inbox_text_keys_mark,
                       strlen(ledger_inbox_text_keys_mark), &mark);
    if (rc != TALLY_ok)
        return rc == TALLY_not_found ? TALLY_ok : rc;
    uint8_t last[LEDGER_INBOX_TIME_KEY_BYTES_MAX];
    size_t last_len = mark.mv_size < sizeof(last) ? mark.mv_size : sizeof(last);
    memcpy(last, mark.mv_data, last_len);
    store_scan s;
    rc = store_scan_begin(t, STORE_DB_INBOX_TIME, NULL, 0, false, &s);
    if (rc != TALLY_ok)
        return rc;
    bool left = false; /* an entry up to the mark's */
    if (store_scan_on(&s)) {
        size_t n = s.key.mv_size < last_len ? s.key.mv_size : last_len;
        int cmp = memcmp(s.key.mv_data, last, n);
        left = cmp < 0 || (cmp == 0 && s.key.mv_size <= last_len);
    }
    rc = store_scan_end(&s, TALLY_ok);
    if (rc == TALLY_ok && !left)
        rc = store_del(t, STORE_DB_META, ledger_inbox_text_keys_mark,
                       strlen(ledger_inbox_text_keys_mark));
    return rc;
}

int ledger_inbox_text_keys_marked(store_txn *t, bool *is)
{
    MDB_val v;
    int rc = store_get(t, STORE_DB_META, ledger_inbox_text_keys_mark,
                       strlen(ledger_inbox_text_keys_mark), &v);
    *is = rc == TALLY_ok;
    return rc == TALLY_not_found ? TALLY_ok : rc;
}

int ledger_inbox_decode(const void *key, size_t key_len, const void *val, size_t val_len,
                        ledger_inbox_record *out)
{
    const uint8_t *p = val;
    tally_str consumer, idempotency_key;
    memset(out, 0, sizeof(*out));
    if (!ledger_inbox_key_split(key, key_len, &consumer, &idempotency_key, out->key_text) ||
        val_len < 1)
        return TALLY_corrupt_record;
    size_t fp_len = fingerprint_bytes_of(p[0]);
    size_t fixed = 1 + fp_len + INBOX_OUTCOME_FIXED_BYTES;
    if (fp_len == 0 || (p[0] != INBOX_RECORD_FORMAT_VARINTS && val_len < fixed) ||
        val_len < 1 + fp_len)
        return TALLY_corrupt_record;
    size_t tail = p[0] == INBOX_RECORD_FORMAT_ORIGINAL ? INBOX_ORIGINAL_BYTES : 0;
    out->consumer = consumer;
    out->key = idempotency_key;
    memcpy(out->fingerprint, p + 1, fp_len);
    out->fingerprint_len = (uint8_t)fp_len;
    const uint8_t *q = p + 1 + fp_len;
    ledger_outcome *o = &out->outcome;
    if (p[0] == INBOX_RECORD_FORMAT_VARINTS)
        return outcome_decode_varints(q, p + val_len, o) ? TALLY_ok : TALLY_corrupt_record;
    o->code = get_u16_be(q);
    o->time_ms = (int64_t)get_u64_be(q + 2);
    o->first_seq = get_u64_be(q + 10);
    o->event_count = get_u32_be(q + 18);
    o->chain_count = q[22];
    o->failed_index = q[23];
    o->stored = true;
    if (o->chain_count > TALLY_CHAIN_COMMANDS_MAX ||
        val_len != fixed + 2 * o->chain_count + tail)
        return TALLY_corrupt_record;
    for (uint32_t i = 0; i < o->chain_count; i++)
        o->chain_codes[i] = get_u16_be(q + 24 + 2 * i);
    if (!outcome_is_sane(o))
        return TALLY_corrupt_record;
    if (tail) {
        const uint8_t *e = q + 24 + 2 * o->chain_count;
        o->original_seq = get_u64_be(e);
        memcpy(o->failed_id.bytes, e + 8, 16);
        if (o->code == TALLY_ok || (o->original_seq == 0 && tally_id128_is_zero(&o->failed_id)))
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
    bool marked = false;
    size_t text_n;
    if (rc == TALLY_not_found && (text_n = ledger_inbox_key_text(consumer, key, k)) != 0 &&
        (rc = ledger_inbox_text_keys_marked(t, &marked)) == TALLY_ok)
        rc = marked ? store_get(t, STORE_DB_INBOX, k, (n = text_n), &val) : TALLY_not_found;
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
    uint8_t k[LEDGER_INBOX_KEY_BYTES_MAX], v[INBOX_VARINTS_BYTES_MAX];
    size_t n = ledger_inbox_key(consumer, key, k);
    if (o->time_ms >= 0) { /* format 4; a time before 1970 keeps format 2's field */
        size_t v_len = outcome_encode_varints(fingerprint, o, v);
        int rc = store_put(t, STORE_DB_INBOX, k, n, v, v_len, MDB_NOOVERWRITE);
        return rc == TALLY_ok ? ledger_inbox_time_collect(t, k, n, o->time_ms) : rc;
    }
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
    if (o->original_seq != 0 || !tally_id128_is_zero(&o->failed_id)) {
        assert(o->code != TALLY_ok);
        v[0] = INBOX_RECORD_FORMAT_ORIGINAL;
        put_u64_be(v + v_len, o->original_seq);
        memcpy(v + v_len + 8, o->failed_id.bytes, 16);
        v_len += INBOX_ORIGINAL_BYTES;
    }
    int rc = store_put(t, STORE_DB_INBOX, k, n, v, v_len, MDB_NOOVERWRITE);
    if (rc != TALLY_ok)
        return rc;
    return ledger_inbox_time_collect(t, k, n, o->time_ms);
}
