/*
 * log.c — the outbox log in the store: appending, reading, the head. The
 * bytes of an event are common/log_event.c's (encode, decode, hash).
 */
#include "log/log.h"

#include "common/error.h"
#include "common/limits.h"
#include "log/stored_event.h"

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

/* The 26 bits of the store's identity in its events' ids. */
static uint32_t id_tag(const store *st)
{
    const uint8_t *self = store_instance_id(st)->bytes;
    return ((uint32_t)(self[13] & 0x03) << 24) | ((uint32_t)self[14] << 16) |
           ((uint32_t)self[15] << 8) | self[12];
}

/* An event's id: a UUIDv7 of the time the writer gave its command, 26
 * bits of the store's identity and the event's seq (common/bytes.h), so
 * the same commands applied to copies of a store (same identity) give the
 * same ids, and ids are unique and ordered within a store: seq grows, and
 * the writer's times never go back (net/engine/writer.c). A stored event
 * keeps none of it: stored_event_expand makes it again from the same. */
static void event_id(store_txn *t, int64_t time_ms, uint64_t seq, tally_id128 *id)
{
    tally_id128_uuidv7_counted(time_ms, id_tag(t->st), seq, id);
}

/* What log_append stores of the format 2 bytes event[0..len): the short
 * form (log/stored_event.h) into out (len bytes) when it gives the same
 * bytes back, else event as it is. */
static size_t stored_form(store_txn *t, uint64_t seq, const uint8_t *event, size_t len,
                          const uint8_t hash[LOG_HASH_BYTES], uint8_t *out, uint8_t *check,
                          const uint8_t **stored)
{
    size_t n = stored_event_shorten(event, len, out);
    if (n > 0 && stored_event_expand(out, n, seq, id_tag(t->st), hash, check,
                                     len + STORED_EVENT_GROWTH_MAX) == len &&
        memcmp(check, event, len) == 0) {
        *stored = out;
        return n;
    }
    *stored = event;
    return len;
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
    /* Every op's events fit the stack buffers; only a webhook.received
     * event with a large body is encoded again on the heap. */
    enum { SMALL = TALLY_EVENT_SMALL_BYTES_MAX, GROWTH = STORED_EVENT_GROWTH_MAX };
    uint8_t small[SMALL], small_short[SMALL], small_check[SMALL + GROWTH];
    uint8_t *buf = small, *shortened = small_short, *check = small_check, *large = NULL;
    size_t len;
    uint8_t hash[LOG_HASH_BYTES];
    rc = log_event_encode(args, seq, &id, head.hash, small, sizeof(small), &len, hash);
    if (rc != TALLY_ok) {
        large = malloc(3 * (size_t)TALLY_EVENT_BYTES_MAX + GROWTH);
        if (large == NULL)
            return store_txn_fail(t, TALLY_out_of_memory);
        buf = large;
        shortened = large + TALLY_EVENT_BYTES_MAX;
        check = large + 2 * (size_t)TALLY_EVENT_BYTES_MAX;
        rc = log_event_encode(args, seq, &id, head.hash, buf, TALLY_EVENT_BYTES_MAX, &len, hash);
    }
    uint8_t key[8];
    log_seq_key(seq, key);
    if (rc == TALLY_ok) {
        const uint8_t *stored;
        size_t stored_len = stored_form(t, seq, buf, len, hash, shortened, check, &stored);
        rc = store_put(t, STORE_DB_LOG, key, sizeof(key), stored, stored_len, MDB_APPEND);
    }
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

/* ---- reading: the bytes readers see ---- */

void log_bytes_init(log_bytes *b)
{
    b->ptr = NULL;
    b->len = 0;
    b->heap = NULL;
    b->heap_cap = 0;
}

void log_bytes_free(log_bytes *b)
{
    free(b->heap);
    log_bytes_init(b);
}

/* b := the event stored at seq as rec, as readers see it: rec itself, or
 * its format 2 bytes with the hash that next carries as its prev_hash
 * (next: the stored event at seq + 1, NULL when there is none: then meta
 * "head" names seq and holds it). When nothing holds its hash (the next
 * event is missing or damaged, or the head names another seq: a damaged
 * store), the event gets the hash of its own bytes: the fault is then
 * where the chain's checks find it, at the gap, the next event's link or
 * the head (log_chain_step, log_chain_end), as for a log of format 2. A
 * short event that does not expand is handed out as stored, which no
 * decoder takes. */
static int reader_bytes(store_txn *t, uint64_t seq, const MDB_val *rec, const MDB_val *next,
                        log_bytes *b)
{
    b->ptr = rec->mv_data;
    b->len = rec->mv_size;
    if (!stored_event_is_short(rec->mv_data, rec->mv_size))
        return TALLY_ok;
    uint8_t hash[LOG_HASH_BYTES];
    bool known;
    if (next != NULL) {
        known = stored_event_prev_hash(next->mv_data, next->mv_size, hash);
    } else {
        log_head head = {0};
        int rc = log_head_get(t, &head); /* a garbled head is the chain's finding */
        if (rc != TALLY_ok && rc != TALLY_corrupt_record)
            return rc;
        known = rc == TALLY_ok && head.seq == seq;
        memcpy(hash, head.hash, LOG_HASH_BYTES);
    }
    size_t need = rec->mv_size + STORED_EVENT_GROWTH_MAX;
    uint8_t *out = b->small;
    if (need > sizeof(b->small)) {
        if (need > b->heap_cap) {
            uint8_t *grown = realloc(b->heap, need);
            if (grown == NULL)
                return TALLY_out_of_memory;
            b->heap = grown;
            b->heap_cap = need;
        }
        out = b->heap;
    }
    size_t n = stored_event_expand(rec->mv_data, rec->mv_size, seq, id_tag(t->st), hash, out, need);
    uint8_t prev[LOG_HASH_BYTES];
    if (n > 0 && !known &&
        (!stored_event_prev_hash(rec->mv_data, rec->mv_size, prev) ||
         log_event_hash(prev, out, n, out + n - LOG_HASH_BYTES) != TALLY_ok))
        n = 0;
    if (n > 0) {
        b->ptr = out;
        b->len = n;
    }
    return TALLY_ok;
}

int log_bytes_get(store_txn *t, uint64_t seq, log_bytes *b)
{
    uint8_t key[8];
    MDB_val rec, next;
    log_seq_key(seq, key);
    int rc = store_get(t, STORE_DB_LOG, key, 8, &rec);
    if (rc != TALLY_ok || !stored_event_is_short(rec.mv_data, rec.mv_size))
        return rc == TALLY_ok ? reader_bytes(t, seq, &rec, NULL, b) : rc;
    log_seq_key(seq + 1, key);
    rc = store_get(t, STORE_DB_LOG, key, 8, &next);
    if (rc != TALLY_ok && rc != TALLY_not_found)
        return rc;
    return reader_bytes(t, seq, &rec, rc == TALLY_ok ? &next : NULL, b);
}

int log_read(store_txn *t, uint64_t from_seq, uint64_t max_count, log_read_fn fn, void *ctx)
{
    MDB_cursor *cur;
    int rc = store_cursor_open(t, STORE_DB_LOG, &cur);
    if (rc != TALLY_ok)
        return rc;
    log_bytes b;
    log_bytes_init(&b);
    uint8_t key[8];
    log_seq_key(from_seq, key);
    MDB_val k = {8, key}, v, next_k, next_v;
    int mrc = mdb_cursor_get(cur, &k, &v, MDB_SET_RANGE);
    uint64_t n = 0;
    while (mrc == MDB_SUCCESS && n < max_count) {
        if (k.mv_size != 8) {
            rc = TALLY_corrupt_record;
            break;
        }
        uint64_t seq = get_u64_be(k.mv_data);
        /* One event ahead: a short event's hash is the next one's prev_hash. */
        int next_rc = mdb_cursor_get(cur, &next_k, &next_v, MDB_NEXT);
        if (next_rc != MDB_SUCCESS && next_rc != MDB_NOTFOUND) {
            mrc = next_rc;
            break;
        }
        bool adjacent = next_rc == MDB_SUCCESS && next_k.mv_size == 8 &&
                        get_u64_be(next_k.mv_data) == seq + 1;
        rc = reader_bytes(t, seq, &v, adjacent ? &next_v : NULL, &b);
        if (rc == TALLY_ok)
            rc = fn(seq, b.ptr, b.len, ctx);
        if (rc != 0)
            break;
        n++;
        mrc = next_rc;
        k = next_k;
        v = next_v;
    }
    if (rc == TALLY_ok && mrc != MDB_SUCCESS && mrc != MDB_NOTFOUND)
        rc = store_translate(mrc);
    log_bytes_free(&b);
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
    log_bytes b;
    log_bytes_init(&b);
    int rc = log_bytes_get(t, seq, &b);
    if (rc == TALLY_ok && b.ptr == b.small) {
        /* Expanded here: the bytes go where the decoding lives, so they
         * last as long as unpacked does. */
        msgpack_unpacked_destroy(unpacked);
        unpacked->zone = msgpack_zone_new(MSGPACK_ZONE_CHUNK_SIZE);
        uint8_t *kept = unpacked->zone ? msgpack_zone_malloc(unpacked->zone, b.len) : NULL;
        if (kept == NULL) {
            log_bytes_free(&b);
            return TALLY_out_of_memory;
        }
        memcpy(kept, b.ptr, b.len);
        rc = log_event_decode_in(kept, b.len, unpacked->zone, &unpacked->data, out);
    } else if (rc == TALLY_ok && b.ptr == b.heap) {
        /* A large event: its buffer is handed to the zone to free. */
        msgpack_unpacked_destroy(unpacked);
        unpacked->zone = msgpack_zone_new(MSGPACK_ZONE_CHUNK_SIZE);
        if (unpacked->zone == NULL ||
            !msgpack_zone_push_finalizer(unpacked->zone, free, b.heap)) {
            log_bytes_free(&b);
            return TALLY_out_of_memory;
        }
        rc = log_event_decode_in(b.heap, b.len, unpacked->zone, &unpacked->data, out);
        return rc;
    } else if (rc == TALLY_ok) {
        rc = log_event_decode(b.ptr, b.len, unpacked, out);
    }
    log_bytes_free(&b);
    return rc;
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
