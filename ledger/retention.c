/*
 * retention.c — inbox and log retention sweeps, the checkpoint.
 *
 * Rules and layout: retention.h and docs/OPERATIONS.md. Each sweep reads
 * the keys it will remove (bounded by the batch) while a cursor is open,
 * then removes them, all inside the caller's write transaction. The inbox
 * sweep bounds its batch by keys: a group entry (inbox_time.h) larger than
 * what is left of the batch is cut, and rewritten with the keys it has left.
 */
#include "ledger/retention.h"

#include "common/error.h"
#include "common/limits.h"
#include "common/msgpack_safe.h"
#include "ledger/account.h"
#include "ledger/context.h"
#include "ledger/entitlement.h"
#include "ledger/failed_id.h"
#include "ledger/history.h"
#include "ledger/index.h"
#include "ledger/inbox.h"
#include "ledger/inbox_time.h"
#include "ledger/transfer.h"
#include "log/subscriber.h"

#include <stdlib.h>
#include <string.h>

static const char meta_inbox_swept[] = "inbox_swept";
static const char meta_log_floor[] = "log_floor";
static const char meta_retention_last[] = "retention_last";
static const char meta_retention_next[] = "retention_next";
#define LOG_FLOOR_BYTES (8 + LOG_HASH_BYTES + 8)
#define CHECKPOINT_KEY_BYTES_MAX (1 + LEDGER_ENTITLEMENT_KEY_BYTES_MAX)

/* ---- meta records ---- */

static int meta_get(store_txn *t, const char *key, void *out, size_t len)
{
    MDB_val v;
    int rc = store_get(t, STORE_DB_META, key, strlen(key), &v);
    if (rc == TALLY_not_found) {
        memset(out, 0, len);
        return TALLY_ok;
    }
    if (rc != TALLY_ok)
        return rc;
    if (v.mv_size != len)
        return TALLY_corrupt_record;
    memcpy(out, v.mv_data, len);
    return TALLY_ok;
}

int ledger_inbox_swept_ms(store_txn *t, int64_t *swept_ms)
{
    uint8_t b[8];
    int rc = meta_get(t, meta_inbox_swept, b, sizeof(b));
    *swept_ms = rc == TALLY_ok ? (int64_t)get_u64_be(b) : 0;
    return rc;
}

int ledger_log_floor_get(store_txn *t, ledger_log_floor *out)
{
    uint8_t b[LOG_FLOOR_BYTES];
    int rc = meta_get(t, meta_log_floor, b, sizeof(b));
    memset(out, 0, sizeof(*out));
    if (rc != TALLY_ok)
        return rc;
    out->seq = get_u64_be(b);
    memcpy(out->hash, b + 8, LOG_HASH_BYTES);
    out->time_ms = (int64_t)get_u64_be(b + 8 + LOG_HASH_BYTES);
    return TALLY_ok;
}

int ledger_inbox_oldest_ms(store_txn *t, int64_t *oldest_ms)
{
    *oldest_ms = 0;
    store_scan first;
    int rc = store_scan_begin(t, STORE_DB_INBOX_TIME, NULL, 0, false, &first);
    if (rc != TALLY_ok)
        return rc;
    bool on = store_scan_on(&first);
    const MDB_val k = first.key;
    rc = store_scan_end(&first, TALLY_ok);
    if (rc != TALLY_ok || !on)
        return rc;
    if (k.mv_size < 8)
        return TALLY_corrupt_record;
    *oldest_ms = (int64_t)get_u64_be(k.mv_data);
    return TALLY_ok;
}

/* ---- inbox ---- */

/* One sweep's work, read while the cursor is open: the inbox keys to
 * remove, the index entries to delete, and at most one group entry cut by
 * the bound, rewritten with the keys it has left. */
typedef struct inbox_batch {
    uint8_t keys[TALLY_RETENTION_BATCH_MAX][LEDGER_INBOX_KEY_BYTES_MAX];
    size_t lens[TALLY_RETENTION_BATCH_MAX];
    uint32_t count;
    uint8_t entries[TALLY_RETENTION_BATCH_MAX][LEDGER_INBOX_TIME_KEY_BYTES_MAX];
    size_t entry_lens[TALLY_RETENTION_BATCH_MAX];
    uint32_t entry_count;
    uint8_t rest_key[LEDGER_INBOX_TIME_GROUP_KEY_BYTES];
    uint8_t *rest; /* malloc'd; NULL: no entry cut */
    size_t rest_len;
} inbox_batch;

/* The transfer id the inbox record at key left failed goes with it. A
 * record that does not decode names none it could be trusted for: it goes
 * alone (tally-recon's failed_ids check then names what it left). */
static int forget_failed_id(store_txn *t, const uint8_t *key, size_t key_len)
{
    MDB_val v;
    int rc = store_get(t, STORE_DB_INBOX, key, key_len, &v);
    if (rc == TALLY_not_found)
        return TALLY_ok;
    if (rc != TALLY_ok)
        return rc;
    ledger_inbox_record rec;
    if (ledger_inbox_decode(key, key_len, v.mv_data, v.mv_size, &rec) != TALLY_ok ||
        tally_id128_is_zero(&rec.outcome.failed_id))
        return TALLY_ok;
    return ledger_failed_id_forget(t, &rec.outcome.failed_id, key, key_len);
}

/* Take the keys of entry e (key k) into b while the bound allows; a group
 * cut by it is kept in b->rest. */
static int take_entry(inbox_batch *b, const MDB_val *k, const ledger_inbox_time_entry *e,
                      uint32_t max)
{
    ledger_inbox_time_iter it;
    ledger_inbox_time_iter_init(&it, e);
    while (b->count < max && ledger_inbox_time_next(&it)) {
        memcpy(b->keys[b->count], it.key, it.len);
        b->lens[b->count++] = it.len;
    }
    if (!it.corrupt && it.pos < e->keys_len && ledger_inbox_time_next(&it)) {
        /* cut (only a group has more than one key): the keys left, the
         * first of them written whole */
        uint8_t first[2 * UVARINT_BYTES_MAX + LEDGER_INBOX_KEY_BYTES_MAX];
        size_t n = ledger_inbox_time_encode(NULL, 0, it.key, it.len, first);
        b->rest_len = n + e->keys_len - it.pos;
        b->rest = malloc(b->rest_len);
        if (!b->rest)
            return TALLY_out_of_memory;
        memcpy(b->rest, first, n);
        memcpy(b->rest + n, e->keys + it.pos, e->keys_len - it.pos);
        memcpy(b->rest_key, k->mv_data, k->mv_size);
        return TALLY_ok;
    }
    if (it.corrupt)
        return TALLY_corrupt_record;
    memcpy(b->entries[b->entry_count], k->mv_data, k->mv_size);
    b->entry_lens[b->entry_count++] = k->mv_size;
    return TALLY_ok;
}

/* Read the oldest entries before before_ms into b, at most max keys. */
static int inbox_batch_read(store_txn *t, int64_t before_ms, uint32_t max, inbox_batch *b,
                            int64_t *newest)
{
    store_scan s;
    int rc = store_scan_begin(t, STORE_DB_INBOX_TIME, NULL, 0, false, &s);
    if (rc != TALLY_ok)
        return rc;
    for (; store_scan_on(&s) && b->count < max && !b->rest; store_scan_next(&s)) {
        ledger_inbox_time_entry e;
        rc = ledger_inbox_time_decode(&s.key, &s.val, &e);
        if (rc != TALLY_ok || e.time_ms >= before_ms)
            break;
        *newest = e.time_ms;
        rc = take_entry(b, &s.key, &e, max);
        if (rc != TALLY_ok)
            break;
    }
    return store_scan_end(&s, rc);
}

static int inbox_sweep(store_txn *t, int64_t before_ms, uint32_t max, uint32_t *removed)
{
    *removed = 0;
    inbox_batch *b = malloc(sizeof(*b));
    if (!b)
        return TALLY_out_of_memory;
    b->count = b->entry_count = 0;
    b->rest = NULL;
    int64_t newest = 0;
    int rc = inbox_batch_read(t, before_ms, max, b, &newest);
    for (uint32_t i = 0; rc == TALLY_ok && i < b->count; i++) {
        rc = forget_failed_id(t, b->keys[i], b->lens[i]);
        int r2 = store_del(t, STORE_DB_INBOX, b->keys[i], b->lens[i]);
        if (rc == TALLY_ok && r2 != TALLY_not_found)
            rc = r2;
    }
    for (uint32_t i = 0; rc == TALLY_ok && i < b->entry_count; i++)
        rc = store_del(t, STORE_DB_INBOX_TIME, b->entries[i], b->entry_lens[i]);
    if (rc == TALLY_ok && b->rest)
        rc = store_put(t, STORE_DB_INBOX_TIME, b->rest_key, sizeof(b->rest_key), b->rest,
                       b->rest_len, 0);
    if (rc == TALLY_ok && b->count > 0) {
        int64_t swept;
        rc = ledger_inbox_swept_ms(t, &swept);
        if (rc == TALLY_ok && newest > swept) {
            uint8_t val[8];
            put_u64_be(val, (uint64_t)newest);
            rc = store_put(t, STORE_DB_META, meta_inbox_swept, strlen(meta_inbox_swept), val,
                           8, 0);
        }
        *removed = b->count;
    }
    if (rc == TALLY_ok && b->count > 0)
        rc = ledger_inbox_text_keys_unmark(t); /* ledger/inbox.h */
    free(b->rest);
    free(b);
    return rc;
}

/* ---- log ---- */

/* The highest seq log retention may remove: the lowest ack floor, below
 * every dead letter and replay, below the head (the head event stays, so
 * the log is never empty once written). */
typedef struct log_limit {
    uint64_t limit;
} log_limit;

static int limit_by_floor(const sub_state *s, void *ctx)
{
    log_limit *l = ctx;
    if (s->ack_floor < l->limit)
        l->limit = s->ack_floor;
    return 0;
}

static int limit_by_record(char kind, tally_str name, uint64_t seq, void *ctx)
{
    (void)name;
    log_limit *l = ctx;
    if (kind != 'f' && seq - 1 < l->limit)
        l->limit = seq - 1;
    return 0;
}

static int checkpoint_put(store_txn *t, const uint8_t *key, size_t key_len,
                          const msgpack_object *o)
{
    uint8_t buf[TALLY_EVENT_SMALL_BYTES_MAX]; /* an account, hold or entitlement: a part of
                                                 an event of the small kind */
    msgpack_safe_buffer sb;
    msgpack_packer pk;
    msgpack_safe_buffer_init(&sb, buf, sizeof(buf), &pk);
    if (msgpack_pack_object(&pk, *o) != 0)
        return store_txn_fail(t, TALLY_internal);
    return store_put(t, STORE_DB_CHECKPOINT, key, key_len, buf, sb.len, 0);
}

/* Keep the objects of an event's body as the latest snapshots; drop the
 * history entries of a transfer event, and put the account entries of the
 * transfer an event created (ledger/index.h: retired transfers). */
static int checkpoint_event(store_txn *t, const log_event *ev)
{
    static const log_body_part accounts[3] = {LOG_PART_ACCOUNT, LOG_PART_DEBIT_ACCOUNT,
                                              LOG_PART_CREDIT_ACCOUNT};
    uint8_t key[CHECKPOINT_KEY_BYTES_MAX];
    int rc = TALLY_ok;
    for (int i = 0; i < 3 && rc == TALLY_ok; i++) {
        const msgpack_object *o = log_event_part(ev, accounts[i]);
        ledger_account a;
        if (!o)
            continue;
        if (ledger_account_unpack(o, &a) != TALLY_ok)
            return TALLY_corrupt_record;
        key[0] = 'a';
        put_u64_be(key + 1, a.id);
        rc = checkpoint_put(t, key, 9, o);
    }
    const msgpack_object *o = log_event_part(ev, LOG_PART_TRANSFER);
    if (o && rc == TALLY_ok) {
        ledger_transfer_record tr;
        if (ledger_transfer_unpack(o, &tr) != TALLY_ok)
            return TALLY_corrupt_record;
        if (tr.flags & LEDGER_TRANSFER_PENDING) { /* holds: for hold_resolution after the floor */
            key[0] = 't';
            memcpy(key + 1, tr.id.bytes, 16);
            rc = checkpoint_put(t, key, 17, o);
        }
        if (log_event_type_is(ev, LOG_EVENT_TRANSFER_CREATED) && rc == TALLY_ok) {
            ledger_indexed ix; /* account_transfers finds it by its accounts now */
            ledger_transfer_indexed(&tr, &ix);
            ix.retired = true;
            rc = ledger_index_retire(t, &ix);
        }
        uint64_t sides[2] = {tr.debit_account_id, tr.credit_account_id};
        for (int i = 0; i < 2 && rc == TALLY_ok; i++) {
            int r2 = ledger_history_del(t, sides[i], ev->seq);
            rc = r2 == TALLY_not_found ? TALLY_ok : r2;
        }
    }
    o = log_event_part(ev, LOG_PART_ENTITLEMENT);
    if (o && rc == TALLY_ok) {
        ledger_entitlement e;
        if (ledger_entitlement_unpack(o, &e) != TALLY_ok)
            return TALLY_corrupt_record;
        key[0] = 'e';
        size_t n = ledger_entitlement_key_of(&e, key + 1);
        rc = checkpoint_put(t, key, 1 + n, o);
    }
    return rc;
}

static int log_sweep(store_txn *t, int64_t before_ms, uint32_t max, uint32_t *removed)
{
    *removed = 0;
    log_head head;
    uint64_t first;
    int rc = log_head_get(t, &head);
    if (rc == TALLY_ok)
        rc = log_first_seq(t, &first);
    if (rc != TALLY_ok || first == 0 || head.seq < 2)
        return rc;
    log_limit l = {head.seq - 1};
    rc = sub_list(t, limit_by_floor, &l);
    if (rc == TALLY_ok)
        rc = sub_records(t, limit_by_record, &l);
    ledger_log_floor floor = {0};
    for (uint64_t seq = first; rc == TALLY_ok && seq <= l.limit && *removed < max; seq++) {
        msgpack_unpacked up;
        log_event ev;
        msgpack_unpacked_init(&up);
        rc = log_event_load(t, seq, &up, &ev);
        if (rc == TALLY_not_found)
            rc = TALLY_corrupt_record; /* a gap above the floor */
        bool old = rc == TALLY_ok && ev.time_ms < before_ms;
        if (old)
            rc = checkpoint_event(t, &ev);
        if (old && rc == TALLY_ok) {
            floor.seq = seq;
            memcpy(floor.hash, ev.hash, LOG_HASH_BYTES);
            floor.time_ms = ev.time_ms;
        }
        msgpack_unpacked_destroy(&up);
        if (rc != TALLY_ok || !old)
            break;
        uint8_t k[8];
        log_seq_key(seq, k);
        rc = store_del(t, STORE_DB_LOG, k, 8);
        (*removed)++;
    }
    if (rc == TALLY_ok && *removed > 0) {
        uint8_t b[LOG_FLOOR_BYTES];
        put_u64_be(b, floor.seq);
        memcpy(b + 8, floor.hash, LOG_HASH_BYTES);
        put_u64_be(b + 8 + LOG_HASH_BYTES, (uint64_t)floor.time_ms);
        rc = store_put(t, STORE_DB_META, meta_log_floor, strlen(meta_log_floor), b, sizeof(b), 0);
    }
    return rc;
}

/* ---- dead letters ---- */

/* [subscriber, seq, attempts, parked_ms, error]: the dead_letter row. */
typedef struct dead_body {
    tally_str name;
    const sub_dead_letter *d;
} dead_body;

static int pack_dead_letter_body(msgpack_packer *pk, const void *body)
{
    const dead_body *b = body;
    return msgpack_pack_array(pk, 1) || msgpack_pack_array(pk, 5) ||
           msgpack_safe_pack_str(pk, b->name) || msgpack_pack_uint64(pk, b->d->seq) ||
           msgpack_pack_uint32(pk, b->d->attempts) || msgpack_pack_int64(pk, b->d->parked_ms) ||
           msgpack_safe_pack_str(pk, b->d->error);
}

static int emit_dead_letter_expired(tally_str name, const sub_dead_letter *d, void *ctx)
{
    const ledger_ctx *sweep = ctx;
    ledger_ctx one = {.txn = sweep->txn, .now_ms = sweep->now_ms}; /* no causation: upkeep */
    log_entity entity = {.kind = LOG_ENTITY_DEAD_LETTER, .subscriber = name,
                         .letter_seq = d->seq};
    dead_body body = {name, d};
    return ledger_emit(&one, LOG_EVENT_DEAD_LETTER_EXPIRED, &entity, 1, pack_dead_letter_body, &body);
}

/* [name, ack_floor, delivered_seq, in_flight, dead_letters, active_ms,
 * inactive_expiry_ms, contact or nil]: the subscriber row. */
static int pack_subscriber_body(msgpack_packer *pk, const void *body)
{
    const sub_state *s = body;
    tally_str contact = tally_str_from(s->config.contact);
    return msgpack_pack_array(pk, 1) || msgpack_pack_array(pk, 8) ||
           msgpack_safe_pack_cstr(pk, s->name) || msgpack_pack_uint64(pk, s->ack_floor) ||
           msgpack_pack_uint64(pk, s->delivered_seq) || msgpack_pack_uint32(pk, s->in_flight) ||
           msgpack_pack_uint64(pk, s->dead_letters) || msgpack_pack_int64(pk, s->active_ms) ||
           msgpack_pack_uint64(pk, s->config.inactive_expiry_ms) ||
           (contact.len ? msgpack_safe_pack_str(pk, contact) : msgpack_pack_nil(pk));
}

static int emit_subscriber_expired(const sub_state *s, void *ctx)
{
    const ledger_ctx *sweep = ctx;
    ledger_ctx one = {.txn = sweep->txn, .now_ms = sweep->now_ms}; /* no causation: upkeep */
    log_entity entity = {.kind = LOG_ENTITY_SUBSCRIBER, .subscriber = tally_str_from(s->name)};
    return ledger_emit(&one, LOG_EVENT_SUBSCRIBER_EXPIRED, &entity, 1, pack_subscriber_body, s);
}

static int dlq_sweep(store_txn *t, int64_t now_ms, const ledger_retention *opt, uint32_t *removed)
{
    sub_dlq_position start = {.len = 0};
    ledger_ctx sweep = {.txn = t, .now_ms = now_ms};
    return sub_dlq_expire(t, now_ms - opt->dlq_age_ms, TALLY_DLQ_EXPIRE_ITEMS_MAX,
                          opt->dlq_position ? opt->dlq_position : &start,
                          emit_dead_letter_expired, &sweep, removed);
}

int ledger_retention_sweep(store_txn *t, int64_t now_ms, const ledger_retention *opt,
                           ledger_retention_work *work)
{
    memset(work, 0, sizeof(*work));
    uint32_t batch = opt->batch == 0 || opt->batch > TALLY_RETENTION_BATCH_MAX
                         ? TALLY_RETENTION_BATCH_MAX
                         : opt->batch;
    int rc = TALLY_ok;
    if (opt->inbox_window_ms > 0)
        rc = inbox_sweep(t, now_ms - opt->inbox_window_ms, batch, &work->inbox_removed);
    if (rc == TALLY_ok && opt->log_age_ms > 0)
        rc = log_sweep(t, now_ms - opt->log_age_ms, batch, &work->events_removed);
    if (rc == TALLY_ok && opt->dlq_age_ms > 0)
        rc = dlq_sweep(t, now_ms, opt, &work->dead_letters_removed);
    if (rc == TALLY_ok) { /* subscribers with an inactivity limit: no option */
        ledger_ctx sweep = {.txn = t, .now_ms = now_ms};
        rc = sub_expire_inactive(t, now_ms, TALLY_SUB_EXPIRE_ITEMS_MAX, emit_subscriber_expired,
                                 &sweep, &work->subscribers_expired);
    }
    if (rc == TALLY_ok && (work->inbox_removed || work->events_removed)) {
        uint8_t b[16];
        put_u64_be(b, (uint64_t)now_ms);
        put_u32_be(b + 8, work->inbox_removed);
        put_u32_be(b + 12, work->events_removed);
        rc = store_put(t, STORE_DB_META, meta_retention_last, strlen(meta_retention_last), b,
                       sizeof(b), 0);
    }
    ledger_log_floor floor;
    if (rc == TALLY_ok)
        rc = ledger_log_floor_get(t, &floor);
    work->log_floor = floor.seq;
    return rc;
}

/* meta "retention_next": next due time (u64 be), then the dlq position's
 * key bytes (0 of them: from the start). */
static int retention_next_get(store_txn *t, int64_t *due_ms, sub_dlq_position *pos)
{
    MDB_val v;
    *due_ms = 0;
    pos->len = 0;
    int rc = store_get(t, STORE_DB_META, meta_retention_next, strlen(meta_retention_next), &v);
    if (rc == TALLY_not_found)
        return TALLY_ok;
    if (rc != TALLY_ok)
        return rc;
    if (v.mv_size < 8 || v.mv_size - 8 > sizeof(pos->key))
        return TALLY_corrupt_record;
    *due_ms = (int64_t)get_u64_be(v.mv_data);
    pos->len = v.mv_size - 8;
    memcpy(pos->key, (const uint8_t *)v.mv_data + 8, pos->len);
    return TALLY_ok;
}

static int retention_next_put(store_txn *t, int64_t due_ms, const sub_dlq_position *pos)
{
    uint8_t b[8 + sizeof(pos->key)];
    put_u64_be(b, (uint64_t)due_ms);
    memcpy(b + 8, pos->key, pos->len);
    return store_put(t, STORE_DB_META, meta_retention_next, strlen(meta_retention_next), b,
                     8 + pos->len, 0);
}

int ledger_retention_run(store_txn *t, int64_t now_ms, int64_t interval_ms,
                         const ledger_retention *opt, ledger_retention_work *work, bool *ran)
{
    memset(work, 0, sizeof(*work));
    *ran = false;
    int64_t due_ms;
    sub_dlq_position pos;
    int rc = retention_next_get(t, &due_ms, &pos);
    if (rc != TALLY_ok || now_ms < due_ms)
        return rc;
    *ran = true;
    rc = retention_next_put(t, now_ms + interval_ms, &pos); /* a failed sweep waits too */
    if (rc != TALLY_ok)
        return rc;
    ledger_retention run = *opt;
    run.dlq_position = &pos;
    store_txn child;
    rc = store_txn_begin(t->st, t, false, &child);
    if (rc != TALLY_ok)
        return rc;
    rc = ledger_retention_sweep(&child, now_ms, &run, work);
    if (rc != TALLY_ok) {
        store_txn_abort(&child);
        return rc;
    }
    rc = store_txn_commit(&child);
    return rc == TALLY_ok ? retention_next_put(t, now_ms + interval_ms, &pos) : rc;
}

int ledger_retention_last_get(store_txn *t, ledger_retention_last *out)
{
    uint8_t b[16];
    int rc = meta_get(t, meta_retention_last, b, sizeof(b));
    out->time_ms = (int64_t)get_u64_be(b);
    out->inbox_removed = get_u32_be(b + 8);
    out->events_removed = get_u32_be(b + 12);
    return rc;
}

/* ---- reading the checkpoint ---- */

int ledger_checkpoint_each(store_txn *t, ledger_checkpoint_fn fn, void *ctx)
{
    store_scan s;
    int rc = store_scan_begin(t, STORE_DB_CHECKPOINT, NULL, 0, false, &s);
    if (rc != TALLY_ok)
        return rc;
    for (; store_scan_on(&s) && rc == TALLY_ok; store_scan_next(&s)) {
        msgpack_unpacked up;
        msgpack_unpacked_init(&up);
        rc = s.key.mv_size < 2 ? TALLY_corrupt_record
                               : msgpack_safe_unpack(s.val.mv_data, s.val.mv_size,
                                                     TALLY_MSGPACK_DEPTH_MAX, &up);
        if (rc == TALLY_ok)
            rc = fn(*(const char *)s.key.mv_data, &up.data, ctx);
        msgpack_unpacked_destroy(&up);
    }
    return store_scan_end(&s, rc);
}
