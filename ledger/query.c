/*
 * query.c — the walk of one index in creation order, a bounded page at a
 * time, the walk of an account's history for account_transfers, and the
 * record filters of account_query, transfer_query and account_transfers
 * (ledger/query.h).
 */
#include "ledger/query.h"

#include "common/error.h"
#include "common/limits.h"
#include "ledger/history.h"
#include "ledger/retention.h"
#include "log/log.h"

#include <assert.h>
#include <string.h>

/* The index a query walks and its value. */
typedef struct query_index {
    ledger_index_kind kind;
    uint8_t value[LEDGER_INDEX_VALUE_BYTES_MAX];
} query_index;

static query_index choose_index(const ledger_query *q, bool transfers)
{
    query_index ix = {.kind = LEDGER_INDEX_ALL};
    const ledger_user_data *u = &q->user_data;
    if (!tally_id128_is_zero(&u->user_data_128))
        ix.kind = LEDGER_INDEX_USER_DATA_128, memcpy(ix.value, u->user_data_128.bytes, 16);
    else if (u->user_data_64 != 0)
        ix.kind = LEDGER_INDEX_USER_DATA_64, put_u64_be(ix.value, u->user_data_64);
    else if (u->user_data_32 != 0)
        ix.kind = LEDGER_INDEX_USER_DATA_32, put_u32_be(ix.value, u->user_data_32);
    else if (q->code != 0 && !transfers) /* transfers have no code or ledger entries */
        ix.kind = LEDGER_INDEX_CODE, put_u16_be(ix.value, q->code);
    else if (q->ledger != 0 && !transfers)
        ix.kind = LEDGER_INDEX_LEDGER, put_u32_be(ix.value, q->ledger);
    return ix;
}

static bool query_is_sane(const ledger_query *q, bool transfers)
{
    return q->limit >= 1 && q->limit <= TALLY_QUERY_ENTRIES_MAX && q->timestamp_min_ms >= 0 &&
           q->timestamp_max_ms >= 0 &&
           (q->timestamp_max_ms == 0 || q->timestamp_min_ms <= q->timestamp_max_ms) &&
           (q->account_id == 0 || (transfers && (q->debits || q->credits)));
}

/* Whether a record's fields pass the filters (the index's own included:
 * cheap, and a check of the entry). */
static bool fields_match(const ledger_query *q, uint32_t ledger, uint16_t code,
                         const ledger_user_data *u)
{
    const ledger_user_data *want = &q->user_data;
    return (q->ledger == 0 || ledger == q->ledger) && (q->code == 0 || code == q->code) &&
           (tally_id128_is_zero(&want->user_data_128) ||
            tally_id128_equal(&want->user_data_128, &u->user_data_128)) &&
           (want->user_data_64 == 0 || want->user_data_64 == u->user_data_64) &&
           (want->user_data_32 == 0 || want->user_data_32 == u->user_data_32);
}

/* One entry's record (the entry: key, val): decode, filter and hand over.
 * *taken when it was handed to the caller's fn; a return other than
 * TALLY_ok stops the walk. */
typedef int (*visit_fn)(store_txn *t, const ledger_query *q, const MDB_val *key,
                        const MDB_val *val, bool *taken, void *ctx);

typedef struct walk {
    store_txn *t;
    const ledger_query *q;
    store_db db;
    uint8_t prefix[1 + LEDGER_INDEX_VALUE_BYTES_MAX];
    size_t prefix_len;
    int64_t min_ms, max_ms;
    uint64_t seq_max; /* entries of a later creating event are past the range */
} walk;

/* The key to start from: see store_scan_begin for reverse. */
static size_t walk_start(const walk *w, uint8_t from[LEDGER_INDEX_KEY_BYTES_MAX])
{
    const ledger_query *q = w->q;
    memcpy(from, w->prefix, w->prefix_len);
    uint8_t *pos = from + w->prefix_len;
    if (q->has_cursor && !(q->reversed && (int64_t)get_u64_be(q->cursor) > w->max_ms)) {
        memcpy(pos, q->cursor, LEDGER_INDEX_POSITION_BYTES);
        if (!q->reversed) { /* strictly after the cursor: its seq + 1 */
            uint64_t seq = get_u64_be(q->cursor + 8);
            if (seq == UINT64_MAX)
                put_u64_be(pos, get_u64_be(q->cursor) + 1), seq = 0;
            else
                seq++;
            put_u64_be(pos + 8, seq);
        }
    } else {
        put_u64_be(pos, (uint64_t)(q->reversed ? w->max_ms : w->min_ms));
        put_u64_be(pos + 8, q->reversed ? UINT64_MAX : 0);
    }
    return w->prefix_len + LEDGER_INDEX_POSITION_BYTES;
}

/* Whether the scan's entry is in the walk's range (a stop when not). */
static bool walk_in_range(const walk *w, const store_scan *s)
{
    if (s->key.mv_size != w->prefix_len + LEDGER_INDEX_POSITION_BYTES ||
        memcmp(s->key.mv_data, w->prefix, w->prefix_len) != 0)
        return false;
    int64_t ms = (int64_t)get_u64_be((const uint8_t *)s->key.mv_data + w->prefix_len);
    return ms >= w->min_ms && ms <= w->max_ms;
}

static int walk_run(walk *w, store_scan *s, visit_fn visit, void *ctx, ledger_query_page *page,
                    uint32_t *examined)
{
    for (; store_scan_on(s) && walk_in_range(w, s); store_scan_next(s)) {
        const uint8_t *pos = (const uint8_t *)s->key.mv_data + w->prefix_len;
        if (get_u64_be(pos + 8) > w->seq_max) { /* in max_ms, after seq_max */
            if (w->q->reversed)
                continue;
            return TALLY_ok;
        }
        if (page->count == w->q->limit || *examined == TALLY_QUERY_SCAN_ENTRIES_MAX) {
            page->has_next = true; /* the cursor is the last entry examined */
            return TALLY_ok;
        }
        (*examined)++;
        bool taken = false;
        int rc = visit(w->t, w->q, &s->key, &s->val, &taken, ctx);
        if (rc != TALLY_ok)
            return rc;
        page->count += taken;
        memcpy(page->next, pos, LEDGER_INDEX_POSITION_BYTES);
    }
    return TALLY_ok;
}

/* The walk of ix's entries in db, adding to page; *examined counts the
 * entries examined by the page so far. */
static int query_walk(store_txn *t, const ledger_query *q, store_db db, query_index ix,
                      visit_fn visit, void *ctx, ledger_query_page *page, uint32_t *examined)
{
    walk w = {.t = t, .q = q, .db = db, .min_ms = q->timestamp_min_ms,
              .max_ms = q->timestamp_max_ms ? q->timestamp_max_ms : INT64_MAX,
              .seq_max = UINT64_MAX};
    if (db == STORE_DB_TRANSFER_INDEX &&
        (ix.kind == LEDGER_INDEX_ACCOUNT || ix.kind == LEDGER_INDEX_ALL)) {
        /* retired transfers only, up to the floor's (created_ms,
         * created_seq) (a format 6 store, read only, has them all: the
         * history and the log list the rest) */
        ledger_log_floor floor;
        int rc = ledger_log_floor_get(t, &floor);
        if (rc != TALLY_ok)
            return rc;
        w.seq_max = floor.seq;
        w.max_ms = floor.time_ms < w.max_ms ? floor.time_ms : w.max_ms;
    }
    w.prefix_len = ledger_index_prefix(ix.kind, ix.value, w.prefix);
    uint8_t from[LEDGER_INDEX_KEY_BYTES_MAX];
    size_t from_len = walk_start(&w, from);
    store_scan s;
    int rc = store_scan_begin(t, db, from, from_len, q->reversed, &s);
    if (rc == TALLY_not_found) /* a store without the index (read only, older) */
        return TALLY_ok;
    if (rc != TALLY_ok)
        return rc;
    rc = store_scan_end(&s, walk_run(&w, &s, visit, ctx, page, examined));
    if (rc != TALLY_ok || !page->has_next)
        page->has_next = false;
    return rc;
}

/* ---- accounts ---- */

typedef struct account_visit {
    int (*fn)(const ledger_account *a, void *ctx);
    void *ctx;
} account_visit;

static int visit_account(store_txn *t, const ledger_query *q, const MDB_val *key,
                         const MDB_val *id, bool *taken, void *ctx)
{
    (void)key;
    account_visit *v = ctx;
    if (id->mv_size != 8)
        return TALLY_corrupt_record;
    ledger_account a;
    int rc = ledger_account_get(t, get_u64_be(id->mv_data), &a);
    if (rc == TALLY_not_found)
        return TALLY_corrupt_record;
    if (rc != TALLY_ok || !fields_match(q, a.ledger, a.code, &a.user_data))
        return rc;
    *taken = true;
    return v->fn(&a, v->ctx);
}

int ledger_account_query(store_txn *t, const ledger_query *q,
                         int (*fn)(const ledger_account *a, void *ctx), void *ctx,
                         ledger_query_page *page)
{
    assert(fn != NULL && page != NULL);
    memset(page, 0, sizeof(*page));
    if (!query_is_sane(q, false))
        return TALLY_invalid_argument;
    account_visit v = {fn, ctx};
    uint32_t examined = 0;
    return query_walk(t, q, STORE_DB_ACCOUNT_INDEX, choose_index(q, false), visit_account, &v,
                      page, &examined);
}

/* ---- transfers ---- */

typedef struct transfer_visit {
    int (*fn)(const ledger_transfer_record *r, void *ctx);
    void *ctx;
} transfer_visit;

/* The transfer id: filter and hand over. */
static int take_transfer(store_txn *t, const ledger_query *q, const tally_id128 *id, bool *taken,
                         transfer_visit *v)
{
    ledger_transfer_record r;
    int rc = ledger_transfer_get(t, id, &r);
    if (rc == TALLY_not_found)
        return TALLY_corrupt_record;
    int64_t max_ms = q->timestamp_max_ms ? q->timestamp_max_ms : INT64_MAX;
    if (rc != TALLY_ok || !fields_match(q, r.ledger, r.code, &r.user_data) ||
        r.created_ms < q->timestamp_min_ms || r.created_ms > max_ms)
        return rc;
    if (q->account_id != 0 && !((q->debits && r.debit_account_id == q->account_id) ||
                                (q->credits && r.credit_account_id == q->account_id)))
        return TALLY_ok;
    *taken = true;
    return v->fn(&r, v->ctx);
}

static int visit_transfer(store_txn *t, const ledger_query *q, const MDB_val *key,
                          const MDB_val *val, bool *taken, void *ctx)
{
    tally_id128 id;
    int rc = ledger_index_transfer_id(t, key, val, &id);
    return rc == TALLY_ok ? take_transfer(t, q, &id, taken, ctx) : rc;
}

/* ---- transfers by seq: an account's history, or the log ---- */

/* Seqs read from the history or the log at a time. */
#define HISTORY_WALK_BATCH 64

/* The time a walk by seq orders ev by: the creation time of the transfer
 * or account it created (an imported record's is its given time, before
 * its event's commit time; an account opened before record format 3 has
 * none), else the event's commit time. These never go back along the log:
 * commit times are monotone and an import's time is past every time the
 * store held (ledger/imported.h), as ledger/balances.h counts on too. A
 * created record that is missing is TALLY_corrupt_record. */
static int event_order_ms(store_txn *t, const log_event *ev, int64_t *ms)
{
    int rc = TALLY_ok;
    *ms = ev->time_ms;
    if (ev->entity.kind == LOG_ENTITY_TRANSFER &&
        log_event_type_is(ev, LOG_EVENT_TRANSFER_CREATED)) {
        ledger_transfer_record r;
        if ((rc = ledger_transfer_get(t, &ev->entity.transfer_id, &r)) == TALLY_ok)
            *ms = r.created_ms;
    } else if (ev->entity.kind == LOG_ENTITY_ACCOUNT &&
               log_event_type_is(ev, LOG_EVENT_ACCOUNT_OPENED)) {
        ledger_account a;
        if ((rc = ledger_account_get(t, ev->entity.account_id, &a)) == TALLY_ok && a.created_ms)
            *ms = a.created_ms;
    }
    return rc == TALLY_not_found ? TALLY_corrupt_record : rc;
}

/* The event at seq: its order time (event_order_ms), and whether it
 * created a transfer (its id into *id). An entry without its event is
 * TALLY_corrupt_record. */
static int seq_event(store_txn *t, uint64_t seq, int64_t *time_ms, bool *created,
                         tally_id128 *id)
{
    msgpack_unpacked up;
    msgpack_unpacked_init(&up);
    log_event ev;
    int rc = log_event_load(t, seq, &up, &ev);
    if (rc == TALLY_ok) {
        *created = ev.entity.kind == LOG_ENTITY_TRANSFER &&
                   log_event_type_is(&ev, LOG_EVENT_TRANSFER_CREATED);
        if (*created)
            *id = ev.entity.transfer_id;
        rc = event_order_ms(t, &ev, time_ms);
    }
    msgpack_unpacked_destroy(&up);
    return rc == TALLY_not_found ? TALLY_corrupt_record : rc;
}

/* The first seq of the log whose event is later than ms by its order time
 * (event_order_ms), or the last seq + 1 when none is (1 for an empty
 * log): a binary search, as the order times never decrease. */
static int log_seq_after(store_txn *t, int64_t ms, uint64_t *out)
{
    uint64_t lo, hi;
    int rc = log_first_seq(t, &lo);
    if (rc == TALLY_ok)
        rc = log_last_seq(t, &hi);
    if (rc != TALLY_ok || lo == 0) {
        *out = 1;
        return rc == TALLY_not_found ? TALLY_ok : rc;
    }
    for (hi++; lo < hi && rc == TALLY_ok;) {
        uint64_t mid = lo + (hi - lo) / 2;
        msgpack_unpacked up;
        msgpack_unpacked_init(&up);
        log_event ev;
        int64_t at = 0;
        rc = log_event_load(t, mid, &up, &ev);
        if (rc == TALLY_ok)
            rc = event_order_ms(t, &ev, &at);
        if (rc == TALLY_ok && at > ms)
            hi = mid;
        else if (rc == TALLY_ok)
            lo = mid + 1;
        msgpack_unpacked_destroy(&up);
    }
    *out = lo;
    return rc == TALLY_not_found ? TALLY_corrupt_record : rc;
}

/* Where the walk by seq starts: for ledger_history_seqs or log_seqs, the seq
 * to go above (forward) or below (reversed; 0: from the last), from the
 * cursor and the time bound on that side, whichever is further on. */
static int seq_start(store_txn *t, const ledger_query *q, uint64_t *from)
{
    *from = q->has_cursor ? get_u64_be(q->cursor + 8) : 0;
    uint64_t bound;
    int rc = TALLY_ok;
    if (!q->reversed && q->timestamp_min_ms > 0 &&
        (rc = log_seq_after(t, q->timestamp_min_ms - 1, &bound)) == TALLY_ok && bound - 1 > *from)
        *from = bound - 1;
    if (q->reversed && q->timestamp_max_ms > 0 &&
        (rc = log_seq_after(t, q->timestamp_max_ms, &bound)) == TALLY_ok &&
        (*from == 0 || bound < *from))
        *from = bound;
    return rc;
}

/* Up to max seqs of the log, ascending above from, or with reverse
 * descending below from (0: from the last), as ledger_history_seqs gives
 * an account's. */
static int log_seqs(store_txn *t, bool reverse, uint64_t from, uint64_t *seqs, uint32_t max,
                    uint32_t *count)
{
    uint64_t first, last;
    *count = 0;
    int rc = log_first_seq(t, &first);
    if (rc == TALLY_ok)
        rc = log_last_seq(t, &last);
    if (rc != TALLY_ok || first == 0)
        return rc == TALLY_not_found ? TALLY_ok : rc;
    if (!reverse) {
        for (uint64_t s = from < first ? first : from + 1; from != UINT64_MAX && s <= last &&
                                                           *count < max;
             s++)
            seqs[(*count)++] = s;
        return TALLY_ok;
    }
    for (uint64_t s = from == 0 || from > last ? last : from - 1; s >= first && *count < max; s--)
        seqs[(*count)++] = s;
    return TALLY_ok;
}

/* One history entry: a transfer it created handed to v when it matches.
 * *past when the entry is beyond the time range (so are all after it). */
static int seq_visit(store_txn *t, const ledger_query *q, uint64_t seq, transfer_visit *v,
                         ledger_query_page *page, bool *past)
{
    int64_t time_ms, max_ms = q->timestamp_max_ms ? q->timestamp_max_ms : INT64_MAX;
    bool created = false;
    tally_id128 id;
    int rc = seq_event(t, seq, &time_ms, &created, &id);
    if (rc != TALLY_ok)
        return rc;
    *past = q->reversed ? time_ms < q->timestamp_min_ms : time_ms > max_ms;
    if (*past)
        return TALLY_ok;
    put_u64_be(page->next, (uint64_t)time_ms);
    put_u64_be(page->next + 8, seq);
    if (!created) /* a hold's post, void or expiry: the transfer's creation lists it */
        return TALLY_ok;
    bool taken = false;
    rc = take_transfer(t, q, &id, &taken, v);
    page->count += taken;
    return rc;
}

/* account_transfers: the account's history ("history", its tail, the
 * recent records: ledger/history.h), else (transfer_query without an
 * indexed filter) the log, walked in seq order, which is the order of
 * creation, each entry's event read, and the transfers those events
 * created filtered as any query's. */
static int seq_walk(store_txn *t, const ledger_query *q, transfer_visit *v,
                        ledger_query_page *page, uint32_t *examined)
{
    uint64_t from, seqs[HISTORY_WALK_BATCH];
    uint32_t n = HISTORY_WALK_BATCH;
    int rc = seq_start(t, q, &from);
    while (rc == TALLY_ok && n == HISTORY_WALK_BATCH) {
        rc = q->account_id
                 ? ledger_history_seqs(t, q->account_id, q->reversed, from, seqs,
                                       HISTORY_WALK_BATCH, &n)
                 : log_seqs(t, q->reversed, from, seqs, HISTORY_WALK_BATCH, &n);
        for (uint32_t i = 0; i < n && rc == TALLY_ok; i++) {
            if (page->count == q->limit || *examined == TALLY_QUERY_SCAN_ENTRIES_MAX) {
                page->has_next = true; /* the cursor is the last entry examined */
                return TALLY_ok;
            }
            (*examined)++;
            bool past = false;
            rc = seq_visit(t, q, seqs[i], v, page, &past);
            if (past)
                return rc;
            from = seqs[i];
        }
    }
    return rc;
}

int ledger_transfer_query(store_txn *t, const ledger_query *q,
                          int (*fn)(const ledger_transfer_record *r, void *ctx), void *ctx,
                          ledger_query_page *page)
{
    assert(fn != NULL && page != NULL);
    memset(page, 0, sizeof(*page));
    if (!query_is_sane(q, true))
        return TALLY_invalid_argument;
    transfer_visit v = {fn, ctx};
    uint32_t examined = 0;
    query_index retired = choose_index(q, true);
    if (q->account_id == 0 && retired.kind != LEDGER_INDEX_ALL)
        return query_walk(t, q, STORE_DB_TRANSFER_INDEX, retired, visit_transfer, &v, page,
                          &examined);
    /* account_transfers, or transfer_query with no indexed filter: the
     * retired transfers' ACCOUNT (or ALL) entries, then the account's
     * history (or the log), above the log floor: after them; reversed,
     * the other way round. Either part past the time range stops at its
     * first entry. */
    if (q->account_id != 0) {
        retired.kind = LEDGER_INDEX_ACCOUNT;
        put_u64_be(retired.value, q->account_id);
    }
    int rc = q->reversed ? seq_walk(t, q, &v, page, &examined)
                         : query_walk(t, q, STORE_DB_TRANSFER_INDEX, retired, visit_transfer, &v,
                                      page, &examined);
    if (rc == TALLY_ok && !page->has_next)
        rc = q->reversed ? query_walk(t, q, STORE_DB_TRANSFER_INDEX, retired, visit_transfer, &v,
                                      page, &examined)
                         : seq_walk(t, q, &v, page, &examined);
    if (rc != TALLY_ok)
        page->has_next = false;
    return rc;
}
