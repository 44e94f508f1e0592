/*
 * history_block.c — the blocks of "history" (ledger/history_block.h):
 * their encoding, the puts of a fold, and the lookups, deletes and walks
 * of ledger/history.c.
 */
#include "ledger/history_block.h"

#include "common/bytes.h"
#include "common/error.h"

#include <assert.h>
#include <string.h>

#define BLOCK_KEY_BYTES 16
#define OLD_ID_BYTES 16 /* the transfer id of a one-seq entry of before December 2026 */
/* format byte, a gap per seq but the last, and the 0 byte of a 16-byte block */
#define BLOCK_VALUE_BYTES_MAX (1 + (HISTORY_BLOCK_SEQS_MAX - 1) * UVARINT_BYTES_MAX + 1)

static void block_key(uint64_t account_id, uint64_t seq, uint8_t out[BLOCK_KEY_BYTES])
{
    put_u64_be(out, account_id);
    put_u64_be(out + 8, seq);
}

int ledger_history_block_decode(const MDB_val *k, const MDB_val *v, history_block *out,
                                const char **why)
{
    out->count = 0;
    out->transfer_id = NULL;
    if (k->mv_size != BLOCK_KEY_BYTES) {
        *why = "wrong key length";
        return TALLY_corrupt_record;
    }
    out->account_id = get_u64_be(k->mv_data);
    uint64_t seq = get_u64_be((const uint8_t *)k->mv_data + 8);
    if (v->mv_size == 0 || v->mv_size == OLD_ID_BYTES) {
        out->seqs[0] = seq;
        out->count = 1;
        out->transfer_id = v->mv_size ? v->mv_data : NULL;
        return TALLY_ok;
    }
    const uint8_t *p = v->mv_data, *end = p + v->mv_size;
    if (p[0] != HISTORY_BLOCK_FORMAT) {
        *why = "unknown format";
        return TALLY_corrupt_record;
    }
    if (v->mv_size == OLD_ID_BYTES + 1 && end[-1] == 0)
        end--; /* the 0 byte of a block that would be 16 bytes long */
    uint64_t down[HISTORY_BLOCK_SEQS_MAX];
    uint32_t n = 0;
    down[n++] = seq;
    for (p++; p < end; n++) {
        uint64_t gap;
        if (n == HISTORY_BLOCK_SEQS_MAX || !get_uvarint(&p, end, &gap) || gap == 0 ||
            gap >= down[n - 1]) {
            *why = n == HISTORY_BLOCK_SEQS_MAX ? "too many seqs" : "a gap is garbled";
            return TALLY_corrupt_record;
        }
        down[n] = down[n - 1] - gap;
    }
    if (n < 2) {
        *why = "a block without gaps";
        return TALLY_corrupt_record;
    }
    for (uint32_t i = 0; i < n; i++)
        out->seqs[i] = down[n - 1 - i];
    out->count = n;
    return TALLY_ok;
}

/* Put seqs[0..n) (ascending, 1 <= n <= HISTORY_BLOCK_SEQS_MAX) as one
 * block. */
static int block_put(store_txn *t, uint64_t account_id, const uint64_t *seqs, size_t n)
{
    assert(n >= 1 && n <= HISTORY_BLOCK_SEQS_MAX);
    uint8_t key[BLOCK_KEY_BYTES], value[BLOCK_VALUE_BYTES_MAX];
    block_key(account_id, seqs[n - 1], key);
    size_t len = 0;
    if (n > 1) {
        value[len++] = HISTORY_BLOCK_FORMAT;
        for (size_t i = n - 1; i > 0; i--) {
            assert(seqs[i] > seqs[i - 1]);
            len += put_uvarint(value + len, seqs[i] - seqs[i - 1]);
        }
        if (len == OLD_ID_BYTES)
            value[len++] = 0;
    }
    return store_put(t, STORE_DB_HISTORY, key, sizeof(key), value, len, 0);
}

int ledger_history_blocks_append(store_txn *t, uint64_t account_id, const uint64_t *seqs,
                                 size_t n)
{
    int rc = TALLY_ok;
    for (size_t at = 0; at < n && rc == TALLY_ok; at += HISTORY_BLOCK_SEQS_MAX) {
        size_t take = n - at < HISTORY_BLOCK_SEQS_MAX ? n - at : HISTORY_BLOCK_SEQS_MAX;
        rc = block_put(t, account_id, seqs + at, take);
    }
    return rc;
}

/* The account's block whose range may hold seq: the first at or after
 * (account, seq). TALLY_ok (*out decoded), TALLY_not_found (none of the
 * account's is), TALLY_corrupt_record or a store error. */
static int block_at(store_txn *t, uint64_t account_id, uint64_t seq, history_block *out)
{
    uint8_t key[BLOCK_KEY_BYTES];
    block_key(account_id, seq, key);
    store_scan s;
    int rc = store_scan_begin(t, STORE_DB_HISTORY, key, sizeof(key), false, &s);
    if (rc != TALLY_ok)
        return rc;
    const char *why;
    if (!store_scan_on(&s) || s.key.mv_size != BLOCK_KEY_BYTES ||
        get_u64_be(s.key.mv_data) != account_id)
        rc = TALLY_not_found;
    else
        rc = ledger_history_block_decode(&s.key, &s.val, out, &why);
    return store_scan_end(&s, rc);
}

/* Where seq is in b: its index, or b->count when it is not there. */
static uint32_t block_find(const history_block *b, uint64_t seq)
{
    uint32_t i = 0;
    while (i < b->count && b->seqs[i] != seq)
        i++;
    return i;
}

int ledger_history_block_has(store_txn *t, uint64_t account_id, uint64_t seq)
{
    history_block b;
    int rc = block_at(t, account_id, seq, &b);
    if (rc == TALLY_ok && block_find(&b, seq) == b.count)
        rc = TALLY_not_found;
    return rc;
}

int ledger_history_block_insert(store_txn *t, uint64_t account_id, uint64_t seq)
{
    history_block b;
    int rc = block_at(t, account_id, seq, &b);
    if (rc == TALLY_not_found || (rc == TALLY_ok && b.seqs[0] > seq))
        return block_put(t, account_id, &seq, 1); /* below every block's range */
    if (rc != TALLY_ok || block_find(&b, seq) < b.count)
        return store_txn_fail(t, rc);
    /* Inside b's range (below its last): b with seq, split when full. */
    uint64_t seqs[HISTORY_BLOCK_SEQS_MAX + 1];
    uint32_t n = 0;
    for (uint32_t i = 0; i < b.count; i++) {
        if (b.seqs[i] > seq && (i == 0 || b.seqs[i - 1] < seq))
            seqs[n++] = seq;
        seqs[n++] = b.seqs[i];
    }
    if (n <= HISTORY_BLOCK_SEQS_MAX)
        return block_put(t, account_id, seqs, n); /* the same key: its last */
    rc = block_put(t, account_id, seqs, n / 2);
    return rc == TALLY_ok ? block_put(t, account_id, seqs + n / 2, n - n / 2) : rc;
}

int ledger_history_block_del(store_txn *t, uint64_t account_id, uint64_t seq)
{
    history_block b;
    int rc = block_at(t, account_id, seq, &b);
    if (rc != TALLY_ok)
        return rc;
    uint32_t at = block_find(&b, seq);
    if (at == b.count)
        return TALLY_not_found;
    if (at == b.count - 1) { /* its last: the key goes */
        uint8_t key[BLOCK_KEY_BYTES];
        block_key(account_id, seq, key);
        rc = store_del(t, STORE_DB_HISTORY, key, sizeof(key));
        if (rc != TALLY_ok)
            return store_txn_fail(t, rc == TALLY_not_found ? TALLY_internal : rc);
        return b.count > 1 ? block_put(t, account_id, b.seqs, b.count - 1) : TALLY_ok;
    }
    memmove(b.seqs + at, b.seqs + at + 1, (b.count - at - 1) * sizeof(b.seqs[0]));
    return block_put(t, account_id, b.seqs, b.count - 1);
}

/* Append b's seqs in the walk's direction, those above cursor (forward)
 * or below it (reverse; 0: all), up to max. */
static void take_seqs(const history_block *b, bool reverse, uint64_t cursor, uint64_t *seqs,
                      uint32_t max, uint32_t *count)
{
    for (uint32_t i = 0; i < b->count && *count < max; i++) {
        uint64_t seq = b->seqs[reverse ? b->count - 1 - i : i];
        if (reverse ? cursor == 0 || seq < cursor : seq > cursor)
            seqs[(*count)++] = seq;
    }
}

int ledger_history_block_seqs(store_txn *t, uint64_t account_id, bool reverse, uint64_t cursor,
                              uint64_t *seqs, uint32_t max, uint32_t *count)
{
    history_block b;
    int rc = TALLY_ok;
    /* Reversed from a cursor: the block whose range holds it first (the
     * walk below takes the blocks whose keys are under it). */
    if (reverse && cursor != 0 && *count < max) {
        rc = block_at(t, account_id, cursor, &b);
        if (rc == TALLY_ok)
            take_seqs(&b, true, cursor, seqs, max, count);
        if (rc != TALLY_ok && rc != TALLY_not_found)
            return rc;
    }
    uint8_t key[BLOCK_KEY_BYTES];
    block_key(account_id, reverse ? (cursor ? cursor : UINT64_MAX) : cursor + 1, key);
    store_scan s;
    rc = store_scan_begin(t, STORE_DB_HISTORY, key, sizeof(key), reverse, &s);
    if (rc != TALLY_ok)
        return rc;
    const char *why;
    for (; rc == TALLY_ok && store_scan_on(&s) && *count < max && s.key.mv_size == BLOCK_KEY_BYTES &&
           get_u64_be(s.key.mv_data) == account_id;
         store_scan_next(&s)) {
        rc = ledger_history_block_decode(&s.key, &s.val, &b, &why);
        if (rc == TALLY_ok)
            take_seqs(&b, reverse, cursor, seqs, max, count);
    }
    return store_scan_end(&s, rc);
}
