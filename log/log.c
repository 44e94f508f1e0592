/*
 * log.c — the outbox log in the store: appending, reading, the head. The
 * bytes of an event are common/log_event.c's (encode, decode, hash).
 */
#include "log/log.h"

#include "common/error.h"
#include "common/limits.h"

#include <assert.h>
#include <stdlib.h>
#include <string.h>

static const char meta_key_head[] = "head";

_Static_assert(sizeof(((store_txn_head *)0)->hash) == LOG_HASH_BYTES,
               "a transaction's head holds one event hash");

/* The head as stored in meta (seq 0 and a zero hash when absent). */
static int head_read(store_txn *t, log_head *head)
{
    MDB_val val;
    int rc = store_get(t, STORE_DB_META, meta_key_head, sizeof(meta_key_head) - 1, &val);
    if (rc == TALLY_not_found) {
        memset(head, 0, sizeof(*head));
        return TALLY_ok;
    }
    if (rc != TALLY_ok)
        return rc;
    if (val.mv_size != 8 + LOG_HASH_BYTES)
        return TALLY_corrupt_record;
    head->seq = get_u64_be(val.mv_data);
    memcpy(head->hash, (const uint8_t *)val.mv_data + 8, LOG_HASH_BYTES);
    return TALLY_ok;
}

int log_head_get(store_txn *t, log_head *head)
{
    store_txn_head *h = &t->head;
    if (!t->read_only && h->known) {
        head->seq = h->seq;
        memcpy(head->hash, h->hash, LOG_HASH_BYTES);
        return TALLY_ok;
    }
    int rc = head_read(t, head);
    if (rc == TALLY_ok && !t->read_only) {
        h->seq = h->committed_seq = head->seq;
        memcpy(h->hash, head->hash, LOG_HASH_BYTES);
        h->known = true;
    }
    return rc;
}

/* meta/head := the transaction's head; store_txn_commit calls it once,
 * just before a top-level commit, when appends moved the head. */
static int head_write_back(store_txn *t)
{
    assert(t->parent == NULL && t->head.known && t->head.moved);
    uint8_t val[8 + LOG_HASH_BYTES];
    put_u64_be(val, t->head.seq);
    memcpy(val + 8, t->head.hash, LOG_HASH_BYTES);
    return store_put(t, STORE_DB_META, meta_key_head, sizeof(meta_key_head) - 1, val,
                     sizeof(val), 0);
}

/* An event's id: a UUIDv7 of the time the writer gave its command, 26
 * bits of the store's identity and the event's seq (common/bytes.h), so
 * the same commands applied to copies of a store (same identity) give the
 * same ids, and ids are unique and ordered within a store: seq grows, and
 * the writer's times never go back (net/engine/writer.c). */
static void event_id(store_txn *t, int64_t time_ms, uint64_t seq, tally_id128 *id)
{
    const uint8_t *self = store_instance_id(t->st)->bytes;
    uint32_t tag = ((uint32_t)(self[13] & 0x03) << 24) | ((uint32_t)self[14] << 16) |
                   ((uint32_t)self[15] << 8) | self[12];
    tally_id128_uuidv7_counted(time_ms, tag, seq, id);
}

/* The head is read from meta once per transaction (log_head_get) and then
 * moved here in memory; meta/head is written once, at the commit. A crash
 * between an append and that commit loses the whole transaction (events,
 * state and meta/head commit together or not at all), so on disk meta/head
 * always names the last stored event. */
int log_append(store_txn *t, const log_append_args *args, uint64_t *seq_out)
{
    assert(args != NULL && log_event_type_name(args->type) != NULL && args->pack_body != NULL);
    assert(args->entity_version > 0);
    assert(!t->read_only);
    log_head head;
    int rc = log_head_get(t, &head);
    if (rc != TALLY_ok)
        return store_txn_fail(t, rc);
    uint64_t seq = head.seq + 1;
    tally_id128 id;
    event_id(t, args->time_ms, seq, &id);
    /* Every op's events fit the stack buffer; only a webhook.received
     * event with a large body is encoded again on the heap. */
    uint8_t small[TALLY_EVENT_SMALL_BYTES_MAX], *buf = small, *large = NULL;
    size_t len;
    uint8_t hash[LOG_HASH_BYTES];
    rc = log_event_encode(args, seq, &id, head.hash, small, sizeof(small), &len, hash);
    if (rc != TALLY_ok && (buf = large = malloc(TALLY_EVENT_BYTES_MAX)) == NULL)
        return store_txn_fail(t, TALLY_out_of_memory);
    if (buf == large)
        rc = log_event_encode(args, seq, &id, head.hash, large, TALLY_EVENT_BYTES_MAX, &len, hash);
    uint8_t key[8];
    log_seq_key(seq, key);
    if (rc == TALLY_ok)
        rc = store_put(t, STORE_DB_LOG, key, sizeof(key), buf, len, MDB_APPEND);
    free(large);
    if (rc != TALLY_ok)
        return store_txn_fail(t, rc);
    t->head.seq = seq;
    memcpy(t->head.hash, hash, LOG_HASH_BYTES);
    t->head.moved = true;
    t->head.write_back = head_write_back;
    *seq_out = seq;
    return TALLY_ok;
}

int log_read(store_txn *t, uint64_t from_seq, uint64_t max_count, log_read_fn fn, void *ctx)
{
    MDB_cursor *cur;
    int rc = store_cursor_open(t, STORE_DB_LOG, &cur);
    if (rc != TALLY_ok)
        return rc;
    uint8_t key[8];
    log_seq_key(from_seq, key);
    MDB_val k = {8, key}, v;
    int mrc = mdb_cursor_get(cur, &k, &v, MDB_SET_RANGE);
    uint64_t n = 0;
    rc = TALLY_ok;
    while (mrc == MDB_SUCCESS && n < max_count) {
        if (k.mv_size != 8) {
            rc = TALLY_corrupt_record;
            break;
        }
        rc = fn(get_u64_be(k.mv_data), v.mv_data, v.mv_size, ctx);
        if (rc != 0)
            break;
        n++;
        mrc = mdb_cursor_get(cur, &k, &v, MDB_NEXT);
    }
    if (rc == TALLY_ok && mrc != MDB_SUCCESS && mrc != MDB_NOTFOUND)
        rc = store_translate(mrc);
    mdb_cursor_close(cur);
    return rc;
}

typedef struct page_walk {
    uint64_t count;
    size_t bytes, bytes_max;
} page_walk;

static int page_add(uint64_t seq, const void *bytes, size_t len, void *ctx)
{
    (void)seq, (void)bytes;
    page_walk *p = ctx;
    if (p->count > 0 && (p->bytes >= p->bytes_max || len > p->bytes_max - p->bytes))
        return 1; /* the next event would pass the budget: the page ends before it */
    p->count++;
    p->bytes += len;
    return 0;
}

int log_page_measure(store_txn *t, uint64_t from_seq, uint64_t max_count, size_t bytes_max,
                     uint64_t *count, size_t *bytes)
{
    page_walk p = {0, 0, bytes_max};
    int rc = max_count ? log_read(t, from_seq, max_count, page_add, &p) : TALLY_ok;
    *count = p.count;
    *bytes = p.bytes;
    return rc == 1 ? TALLY_ok : rc;
}

int log_first_seq(store_txn *t, uint64_t *seq)
{
    MDB_cursor *cur;
    int rc = store_cursor_open(t, STORE_DB_LOG, &cur);
    if (rc != TALLY_ok)
        return rc;
    MDB_val k, v;
    int mrc = mdb_cursor_get(cur, &k, &v, MDB_FIRST);
    mdb_cursor_close(cur);
    if (mrc == MDB_NOTFOUND) {
        *seq = 0;
        return TALLY_ok;
    }
    if (mrc != MDB_SUCCESS)
        return store_translate(mrc);
    if (k.mv_size != 8)
        return TALLY_corrupt_record;
    *seq = get_u64_be(k.mv_data);
    return TALLY_ok;
}

int log_event_load(store_txn *t, uint64_t seq, msgpack_unpacked *unpacked, log_event *out)
{
    uint8_t k[8];
    MDB_val v;
    log_seq_key(seq, k);
    int rc = store_get(t, STORE_DB_LOG, k, 8, &v);
    return rc == TALLY_ok ? log_event_decode(v.mv_data, v.mv_size, unpacked, out) : rc;
}

int log_last_seq(store_txn *t, uint64_t *seq)
{
    store_scan s;
    int rc = store_scan_begin(t, STORE_DB_LOG, NULL, 0, true, &s);
    if (rc != TALLY_ok)
        return rc;
    *seq = 0;
    if (store_scan_on(&s) && s.key.mv_size != 8)
        rc = TALLY_corrupt_record;
    else if (store_scan_on(&s))
        *seq = get_u64_be(s.key.mv_data);
    return store_scan_end(&s, rc);
}

/* ---- the hash chain ---- */

void log_chain_start(log_chain *c, uint64_t first_seq, const uint8_t *prev_hash)
{
    c->expect_seq = first_seq;
    c->prev_known = prev_hash != NULL;
    if (prev_hash != NULL)
        memcpy(c->prev_hash, prev_hash, LOG_HASH_BYTES);
}

unsigned log_chain_step(log_chain *c, uint64_t seq, const log_event *ev)
{
    unsigned faults = 0;
    if (seq != c->expect_seq) {
        faults |= LOG_CHAIN_GAP;
        memset(c->prev_hash, 0xff, LOG_HASH_BYTES); /* the chain is unknown across a gap */
    }
    c->expect_seq = seq + 1;
    if (ev == NULL) {
        memset(c->prev_hash, 0xff, LOG_HASH_BYTES);
        c->prev_known = true;
        return faults | LOG_CHAIN_UNDECODED;
    }
    if (ev->seq != seq)
        faults |= LOG_CHAIN_SEQ_DIFFERS;
    if ((c->prev_known || (faults & LOG_CHAIN_GAP)) &&
        memcmp(ev->prev_hash, c->prev_hash, LOG_HASH_BYTES) != 0)
        faults |= LOG_CHAIN_LINK;
    memcpy(c->prev_hash, ev->hash, LOG_HASH_BYTES);
    c->prev_known = true;
    return faults;
}

unsigned log_chain_end(const log_chain *c, const log_head *head)
{
    if (c->expect_seq != head->seq + 1)
        return LOG_CHAIN_HEAD_GAP;
    if (head->seq > 0 && c->prev_known && memcmp(c->prev_hash, head->hash, LOG_HASH_BYTES) != 0)
        return LOG_CHAIN_HEAD_HASH;
    return 0;
}
