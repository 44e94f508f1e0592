/*
 * subscriber.c — durable subscribers over the cursors and dlq databases.
 *
 * Layout and rules: subscriber.h and docs/SUBSCRIBERS.md. Each operation
 * reads what it needs (collecting the seqs it will touch while a cursor is
 * open), checks, and only then writes, so a refusal writes nothing.
 */
#include "log/subscriber.h"

#include "common/error.h"
#include "log/log.h"

#include <stdlib.h>
#include <string.h>

#define RECORD_VERSION 1
#define KEY_BYTES_MAX (1 + TALLY_SUBSCRIBER_NAME_BYTES_MAX + 1 + 8)
#define CURSOR_VALUE_BYTES (1 + 4 * 4 + 4 * TALLY_SUB_BACKOFF_STEPS_MAX + 8 * 2 + 4 * 2 + 8 * 2 + 8 * 2)
#define FLIGHT_VALUE_HEAD (4 + 8 + 2)
#define DEAD_VALUE_HEAD (4 + 8 + 1 + 2)
#define VALUE_BYTES_MAX (DEAD_VALUE_HEAD + TALLY_SUB_ERROR_BYTES_MAX)

enum { KIND_CURSOR = 'c', KIND_FLIGHT = 'f', KIND_REPLAY = 'r' };

void sub_config_default(sub_config *cfg)
{
    memset(cfg, 0, sizeof(*cfg));
    cfg->max_deliver = TALLY_SUB_MAX_DELIVER_DEFAULT;
    cfg->ack_wait_ms = TALLY_SUB_ACK_WAIT_MS_DEFAULT;
    cfg->max_ack_pending = TALLY_SUB_MAX_ACK_PENDING_DEFAULT;
}

int sub_name_check(tally_str name)
{
    if (name.len == 0 || name.len > TALLY_SUBSCRIBER_NAME_BYTES_MAX)
        return TALLY_invalid_subscriber_name;
    for (size_t i = 0; i < name.len; i++) {
        unsigned char c = (unsigned char)name.ptr[i];
        bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                  c == '.' || c == '_' || c == '-';
        if (!ok)
            return TALLY_invalid_subscriber_name;
    }
    return TALLY_ok;
}

static int config_check(const sub_config *c)
{
    if (c->max_deliver < 1 || c->max_deliver > TALLY_SUB_MAX_DELIVER_MAX ||
        c->ack_wait_ms < TALLY_SUB_ACK_WAIT_MS_MIN || c->ack_wait_ms > TALLY_SUB_ACK_WAIT_MS_MAX ||
        c->max_ack_pending < 1 || c->max_ack_pending > TALLY_SUB_MAX_ACK_PENDING_MAX ||
        c->backoff_count > TALLY_SUB_BACKOFF_STEPS_MAX)
        return TALLY_invalid_argument;
    for (uint32_t i = 0; i < c->backoff_count; i++)
        if (c->backoff_ms[i] > TALLY_SUB_ACK_WAIT_MS_MAX)
            return TALLY_invalid_argument;
    return TALLY_ok;
}

static bool config_equal(const sub_config *a, const sub_config *b)
{
    if (a->max_deliver != b->max_deliver || a->ack_wait_ms != b->ack_wait_ms ||
        a->max_ack_pending != b->max_ack_pending || a->backoff_count != b->backoff_count)
        return false;
    return memcmp(a->backoff_ms, b->backoff_ms, a->backoff_count * sizeof(uint32_t)) == 0;
}

/* ---- keys ---- */

static size_t cursor_key(uint8_t *k, tally_str name)
{
    k[0] = KIND_CURSOR;
    memcpy(k + 1, name.ptr, name.len);
    return 1 + name.len;
}

/* kind + name + 0x00 + seq; kind 0 = none (the dlq's keys). */
static size_t seq_key(uint8_t *k, char kind, tally_str name, uint64_t seq)
{
    size_t n = 0;
    if (kind)
        k[n++] = (uint8_t)kind;
    memcpy(k + n, name.ptr, name.len);
    n += name.len;
    k[n++] = 0;
    put_u64_be(k + n, seq);
    return n + 8;
}

/* ---- values ---- */

static uint8_t *put32(uint8_t *p, uint32_t v) { put_u32_be(p, v); return p + 4; }
static uint8_t *put64(uint8_t *p, uint64_t v) { put_u64_be(p, v); return p + 8; }
static const uint8_t *get32(const uint8_t *p, uint32_t *v) { *v = get_u32_be(p); return p + 4; }
static const uint8_t *get64(const uint8_t *p, uint64_t *v) { *v = get_u64_be(p); return p + 8; }

static void cursor_encode(const sub_state *s, uint8_t out[CURSOR_VALUE_BYTES])
{
    uint8_t *p = out;
    *p++ = RECORD_VERSION;
    p = put32(p, s->config.max_deliver);
    p = put32(p, s->config.ack_wait_ms);
    p = put32(p, s->config.max_ack_pending);
    p = put32(p, s->config.backoff_count);
    for (int i = 0; i < TALLY_SUB_BACKOFF_STEPS_MAX; i++)
        p = put32(p, s->config.backoff_ms[i]);
    p = put64(p, s->ack_floor);
    p = put64(p, s->delivered_seq);
    p = put32(p, s->in_flight);
    p = put32(p, s->replaying);
    p = put64(p, s->dead_letters);
    p = put64(p, s->redelivered);
    p = put64(p, (uint64_t)s->created_ms);
    put64(p, (uint64_t)s->updated_ms);
}

static int cursor_decode(const MDB_val *v, tally_str name, sub_state *s)
{
    const uint8_t *p = v->mv_data;
    if (v->mv_size != CURSOR_VALUE_BYTES || p[0] != RECORD_VERSION)
        return TALLY_corrupt_record;
    memset(s, 0, sizeof(*s));
    memcpy(s->name, name.ptr, name.len);
    p++;
    p = get32(p, &s->config.max_deliver);
    p = get32(p, &s->config.ack_wait_ms);
    p = get32(p, &s->config.max_ack_pending);
    p = get32(p, &s->config.backoff_count);
    for (int i = 0; i < TALLY_SUB_BACKOFF_STEPS_MAX; i++)
        p = get32(p, &s->config.backoff_ms[i]);
    p = get64(p, &s->ack_floor);
    p = get64(p, &s->delivered_seq);
    p = get32(p, &s->in_flight);
    p = get32(p, &s->replaying);
    p = get64(p, &s->dead_letters);
    p = get64(p, &s->redelivered);
    uint64_t created, updated;
    p = get64(p, &created);
    get64(p, &updated);
    s->created_ms = (int64_t)created;
    s->updated_ms = (int64_t)updated;
    if (config_check(&s->config) != TALLY_ok || s->ack_floor > s->delivered_seq)
        return TALLY_corrupt_record;
    return TALLY_ok;
}

/* An in-flight record or a dead letter (one layout with an optional flag). */
typedef struct record {
    uint32_t attempts;
    int64_t when_ms; /* deliver_after (in flight) or parked (dead letter) */
    bool replaying;  /* dead letters only */
    uint16_t error_len;
    char error[TALLY_SUB_ERROR_BYTES_MAX];
} record;

static size_t record_encode(const record *r, bool dead, uint8_t out[VALUE_BYTES_MAX])
{
    uint8_t *p = put64(put32(out, r->attempts), (uint64_t)r->when_ms);
    if (dead)
        *p++ = r->replaying;
    put_u16_be(p, r->error_len);
    memcpy(p + 2, r->error, r->error_len);
    return (size_t)(p + 2 - out) + r->error_len;
}

static int record_decode(const MDB_val *v, bool dead, record *r)
{
    size_t head = dead ? DEAD_VALUE_HEAD : FLIGHT_VALUE_HEAD;
    const uint8_t *p = v->mv_data;
    if (v->mv_size < head)
        return TALLY_corrupt_record;
    memset(r, 0, sizeof(*r));
    uint64_t when;
    p = get64(get32(p, &r->attempts), &when);
    r->when_ms = (int64_t)when;
    if (dead) {
        if (*p > 1)
            return TALLY_corrupt_record;
        r->replaying = *p++;
    }
    r->error_len = get_u16_be(p);
    if (r->error_len > TALLY_SUB_ERROR_BYTES_MAX || v->mv_size != head + r->error_len)
        return TALLY_corrupt_record;
    memcpy(r->error, p + 2, r->error_len);
    return TALLY_ok;
}

static void record_set_error(record *r, tally_str text)
{
    size_t n = text.len < TALLY_SUB_ERROR_BYTES_MAX ? text.len : TALLY_SUB_ERROR_BYTES_MAX;
    memcpy(r->error, text.ptr, n);
    r->error_len = (uint16_t)n;
}

/* ---- record access ---- */

static int cursor_load(store_txn *t, tally_str name, sub_state *s)
{
    int rc = sub_name_check(name);
    if (rc != TALLY_ok)
        return rc;
    uint8_t k[KEY_BYTES_MAX];
    MDB_val v;
    rc = store_get(t, STORE_DB_CURSORS, k, cursor_key(k, name), &v);
    if (rc == TALLY_not_found)
        return TALLY_subscriber_not_found;
    return rc == TALLY_ok ? cursor_decode(&v, name, s) : rc;
}

static int cursor_save(store_txn *t, const sub_state *s)
{
    uint8_t k[KEY_BYTES_MAX], v[CURSOR_VALUE_BYTES];
    cursor_encode(s, v);
    return store_put(t, STORE_DB_CURSORS, k, cursor_key(k, tally_str_from(s->name)), v,
                     sizeof(v), 0);
}

/* kind 'f' or 'r' in cursors, or 0 for the dlq. */
static int record_load(store_txn *t, char kind, tally_str name, uint64_t seq, record *r)
{
    uint8_t k[KEY_BYTES_MAX];
    MDB_val v;
    store_db db = kind ? STORE_DB_CURSORS : STORE_DB_DLQ;
    int rc = store_get(t, db, k, seq_key(k, kind, name, seq), &v);
    return rc == TALLY_ok ? record_decode(&v, kind == 0, r) : rc;
}

static int record_save(store_txn *t, char kind, tally_str name, uint64_t seq, const record *r)
{
    uint8_t k[KEY_BYTES_MAX], v[VALUE_BYTES_MAX];
    store_db db = kind ? STORE_DB_CURSORS : STORE_DB_DLQ;
    return store_put(t, db, k, seq_key(k, kind, name, seq), v, record_encode(r, kind == 0, v), 0);
}

static int record_delete(store_txn *t, char kind, tally_str name, uint64_t seq)
{
    uint8_t k[KEY_BYTES_MAX];
    store_db db = kind ? STORE_DB_CURSORS : STORE_DB_DLQ;
    int rc = store_del(t, db, k, seq_key(k, kind, name, seq));
    return rc == TALLY_not_found ? store_txn_fail(t, TALLY_internal) : rc;
}

/* Call fn(key, value) for each key of db from start on while its first
 * prefix_len bytes equal start's (and, key_len != 0, it is key_len long),
 * until fn returns non-zero (returned). Values are valid during the call. */
typedef int (*entry_fn)(const MDB_val *key, const MDB_val *val, void *ctx);

static int each_with_prefix(store_txn *t, store_db db, const uint8_t *start, size_t start_len,
                            size_t prefix_len, size_t key_len, entry_fn fn, void *ctx)
{
    MDB_cursor *cur;
    int rc = store_cursor_open(t, db, &cur);
    if (rc != TALLY_ok)
        return rc;
    MDB_val key = {start_len, (void *)start}, val;
    int mrc = mdb_cursor_get(cur, &key, &val, MDB_SET_RANGE);
    while (mrc == 0 && rc == TALLY_ok) {
        if (key.mv_size < prefix_len || memcmp(key.mv_data, start, prefix_len) != 0 ||
            (key_len && key.mv_size != key_len))
            break;
        rc = fn(&key, &val, ctx);
        if (rc == TALLY_ok)
            mrc = mdb_cursor_get(cur, &key, &val, MDB_NEXT);
    }
    mdb_cursor_close(cur);
    if (mrc != 0 && mrc != MDB_NOTFOUND)
        return store_translate(mrc);
    return rc;
}

/* Call fn for each record of (kind, name) with seq >= from_seq, in seq
 * order, until fn returns non-zero (returned) or the records end. */
typedef int (*record_fn)(uint64_t seq, const MDB_val *v, void *ctx);

typedef struct record_walk {
    record_fn fn;
    void *ctx;
} record_walk;

static int record_entry(const MDB_val *key, const MDB_val *val, void *ctx)
{
    record_walk *w = ctx;
    return w->fn(get_u64_be((const uint8_t *)key->mv_data + key->mv_size - 8), val, w->ctx);
}

static int records_each(store_txn *t, char kind, tally_str name, uint64_t from_seq,
                        record_fn fn, void *ctx)
{
    uint8_t k[KEY_BYTES_MAX];
    size_t klen = seq_key(k, kind, name, from_seq);
    record_walk w = {fn, ctx};
    return each_with_prefix(t, kind ? STORE_DB_CURSORS : STORE_DB_DLQ, k, klen, klen - 8, klen,
                            record_entry, &w);
}

/* A growable list of seqs (what an operation will touch). */
typedef struct seq_list {
    uint64_t *seqs;
    size_t count, capacity;
    uint64_t upto; /* collect seqs <= upto */
} seq_list;

static int collect_seq(uint64_t seq, const MDB_val *v, void *ctx)
{
    (void)v;
    seq_list *l = ctx;
    if (seq > l->upto)
        return 1;
    if (l->count == l->capacity) {
        size_t cap = l->capacity ? l->capacity * 2 : 64;
        uint64_t *p = realloc(l->seqs, cap * sizeof(uint64_t));
        if (!p)
            return TALLY_out_of_memory;
        l->seqs = p;
        l->capacity = cap;
    }
    l->seqs[l->count++] = seq;
    return TALLY_ok;
}

static int collect(store_txn *t, char kind, tally_str name, uint64_t upto, seq_list *l)
{
    l->count = 0;
    l->upto = upto;
    int rc = records_each(t, kind, name, 0, collect_seq, l);
    return rc == 1 ? TALLY_ok : rc;
}

static int first_seq_cb(uint64_t seq, const MDB_val *v, void *ctx)
{
    (void)v;
    *(uint64_t *)ctx = seq;
    return 1;
}

/* The ack floor after a change: the seq before the first "f" record, or the
 * delivered seq when nothing is in flight; never lower than it was. */
static int floor_update(store_txn *t, sub_state *s)
{
    uint64_t first = 0;
    int rc = records_each(t, KIND_FLIGHT, tally_str_from(s->name), 0, first_seq_cb, &first);
    if (rc != TALLY_ok && rc != 1)
        return rc;
    uint64_t floor = first ? first - 1 : s->delivered_seq;
    if (floor > s->ack_floor)
        s->ack_floor = floor;
    return TALLY_ok;
}

static uint32_t redelivery_delay(const sub_config *c, uint32_t attempt)
{
    if (c->backoff_count == 0)
        return c->ack_wait_ms;
    uint32_t i = attempt < c->backoff_count ? attempt : c->backoff_count;
    return c->backoff_ms[i ? i - 1 : 0];
}

/* ---- create, get, list, delete ---- */

typedef struct count_ctx {
    uint64_t count;
} count_ctx;

static int count_one(const sub_state *s, void *ctx)
{
    (void)s;
    ((count_ctx *)ctx)->count++;
    return 0;
}

static int event_time(store_txn *t, uint64_t seq, int64_t *time_ms)
{
    msgpack_unpacked up;
    log_event ev;
    msgpack_unpacked_init(&up);
    int rc = log_event_load(t, seq, &up, &ev);
    *time_ms = rc == TALLY_ok ? ev.time_ms : 0;
    msgpack_unpacked_destroy(&up);
    return rc == TALLY_not_found ? TALLY_corrupt_record : rc;
}

/* The seq before the first event committed at or after time_ms. */
static int floor_for_time(store_txn *t, int64_t time_ms, uint64_t *floor)
{
    log_head head;
    uint64_t first;
    int rc = log_head_get(t, &head);
    if (rc == TALLY_ok)
        rc = log_first_seq(t, &first);
    if (rc != TALLY_ok)
        return rc;
    if (head.seq == 0) {
        *floor = 0;
        return TALLY_ok;
    }
    uint64_t lo = first, hi = head.seq + 1; /* answer in [lo, hi]; times never go back */
    while (lo < hi) {
        uint64_t mid = lo + (hi - lo) / 2;
        int64_t tm;
        rc = event_time(t, mid, &tm);
        if (rc != TALLY_ok)
            return rc;
        if (tm >= time_ms)
            hi = mid;
        else
            lo = mid + 1;
    }
    *floor = lo - 1;
    return TALLY_ok;
}

static int start_floor(store_txn *t, const sub_start *start, uint64_t *floor)
{
    log_head head;
    uint64_t first;
    int rc = log_head_get(t, &head);
    if (rc == TALLY_ok)
        rc = log_first_seq(t, &first);
    if (rc != TALLY_ok)
        return rc;
    switch (start->kind) {
    case SUB_START_BEGINNING:
        *floor = first ? first - 1 : head.seq;
        return TALLY_ok;
    case SUB_START_NOW:
        *floor = head.seq;
        return TALLY_ok;
    case SUB_START_SEQ:
        if (start->seq == 0)
            return TALLY_invalid_argument;
        if (start->seq > head.seq + 1)
            return TALLY_seq_beyond_head;
        *floor = start->seq - 1;
        if (first && *floor < first - 1)
            *floor = first - 1; /* below the retention floor: from the oldest kept */
        return TALLY_ok;
    case SUB_START_TIME:
        return floor_for_time(t, start->time_ms, floor);
    }
    return TALLY_invalid_argument;
}

int sub_create(store_txn *t, tally_str name, const sub_start *start, const sub_config *cfg,
               int64_t now_ms, bool *created, sub_state *out)
{
    *created = false;
    int rc = cursor_load(t, name, out);
    if (rc == TALLY_ok)
        return config_equal(&out->config, cfg) ? TALLY_ok
                                                : TALLY_subscriber_exists_with_different_config;
    if (rc != TALLY_subscriber_not_found)
        return rc;
    rc = config_check(cfg);
    if (rc != TALLY_ok)
        return rc;
    count_ctx n = {0};
    rc = sub_list(t, count_one, &n);
    if (rc != TALLY_ok)
        return rc;
    if (n.count >= TALLY_SUBSCRIBERS_MAX)
        return TALLY_too_many_subscribers;
    uint64_t floor;
    rc = start_floor(t, start, &floor);
    if (rc != TALLY_ok)
        return rc;
    memset(out, 0, sizeof(*out));
    memcpy(out->name, name.ptr, name.len);
    out->config = *cfg;
    memset(out->config.backoff_ms + cfg->backoff_count, 0,
           (TALLY_SUB_BACKOFF_STEPS_MAX - cfg->backoff_count) * sizeof(uint32_t));
    out->ack_floor = out->delivered_seq = floor;
    out->created_ms = out->updated_ms = now_ms;
    rc = cursor_save(t, out);
    *created = rc == TALLY_ok;
    return rc;
}

int sub_get(store_txn *t, tally_str name, sub_state *out)
{
    return cursor_load(t, name, out);
}

typedef struct list_walk {
    sub_list_fn fn;
    void *ctx;
} list_walk;

static int list_entry(const MDB_val *key, const MDB_val *val, void *ctx)
{
    list_walk *w = ctx;
    sub_state s;
    tally_str name = {(const char *)key->mv_data + 1, key->mv_size - 1};
    int rc = sub_name_check(name) == TALLY_ok ? cursor_decode(val, name, &s) : TALLY_corrupt_record;
    return rc == TALLY_ok ? w->fn(&s, w->ctx) : rc;
}

int sub_list(store_txn *t, sub_list_fn fn, void *ctx)
{
    static const uint8_t first = KIND_CURSOR;
    list_walk w = {fn, ctx};
    return each_with_prefix(t, STORE_DB_CURSORS, &first, 1, 1, 0, list_entry, &w);
}

static int delete_all(store_txn *t, char kind, tally_str name, seq_list *l)
{
    int rc = collect(t, kind, name, UINT64_MAX, l);
    for (size_t i = 0; rc == TALLY_ok && i < l->count; i++)
        rc = record_delete(t, kind, name, l->seqs[i]);
    return rc;
}

int sub_delete(store_txn *t, tally_str name)
{
    sub_state s;
    int rc = cursor_load(t, name, &s);
    if (rc != TALLY_ok)
        return rc;
    seq_list l = {0};
    rc = delete_all(t, KIND_FLIGHT, name, &l);
    if (rc == TALLY_ok)
        rc = delete_all(t, KIND_REPLAY, name, &l);
    if (rc == TALLY_ok)
        rc = delete_all(t, 0, name, &l);
    free(l.seqs);
    if (rc == TALLY_ok) {
        uint8_t k[KEY_BYTES_MAX];
        rc = store_del(t, STORE_DB_CURSORS, k, cursor_key(k, name));
    }
    return rc;
}

/* ---- fetch ---- */

typedef enum plan_kind { PLAN_REPLAY_DLQ, PLAN_REDELIVER, PLAN_PARK, PLAN_NEW } plan_kind;

typedef struct plan_step {
    plan_kind what;
    char kind; /* record kind for REDELIVER and PARK */
    uint64_t seq;
} plan_step;

typedef struct fetch_plan {
    const sub_config *cfg;
    bool restart;
    int64_t now_ms;
    uint32_t max, deliveries, parks;
    uint32_t flights; /* "f" records seen */
    char kind;        /* records being scanned */
    int64_t next_due_ms;
    plan_step steps[2 * TALLY_SUB_FETCH_EVENTS_MAX];
    uint32_t count;
} fetch_plan;

static int plan_replay(uint64_t seq, const MDB_val *v, void *ctx)
{
    fetch_plan *p = ctx;
    record r;
    int rc = record_decode(v, true, &r);
    if (rc != TALLY_ok)
        return rc;
    if (!r.replaying)
        return TALLY_ok;
    if (p->deliveries == p->max)
        return 1;
    p->steps[p->count++] = (plan_step){PLAN_REPLAY_DLQ, 0, seq};
    p->deliveries++;
    return TALLY_ok;
}

static int plan_due(uint64_t seq, const MDB_val *v, void *ctx)
{
    fetch_plan *p = ctx;
    record r;
    int rc = record_decode(v, false, &r);
    if (rc != TALLY_ok)
        return rc;
    if (p->kind == KIND_FLIGHT)
        p->flights++;
    bool due = p->restart || r.when_ms <= p->now_ms;
    bool park = r.attempts >= p->cfg->max_deliver;
    bool room = park ? p->parks < TALLY_SUB_FETCH_EVENTS_MAX : p->deliveries < p->max;
    if (!due || !room) {
        int64_t when = due ? p->now_ms : r.when_ms;
        if (when < p->next_due_ms)
            p->next_due_ms = when;
        return TALLY_ok;
    }
    p->steps[p->count++] = (plan_step){park ? PLAN_PARK : PLAN_REDELIVER, p->kind, seq};
    if (park)
        p->parks++;
    else
        p->deliveries++;
    return TALLY_ok;
}

static int park_record(store_txn *t, sub_state *s, char kind, uint64_t seq, const record *r,
                       tally_str reason, int64_t now_ms)
{
    record dead = *r;
    dead.when_ms = now_ms;
    dead.replaying = false;
    record_set_error(&dead, reason);
    int rc = record_delete(t, kind, tally_str_from(s->name), seq);
    if (rc == TALLY_ok)
        rc = record_save(t, 0, tally_str_from(s->name), seq, &dead);
    s->in_flight--;
    s->dead_letters++;
    return rc;
}

static int run_step(store_txn *t, sub_state *s, const plan_step *st, int64_t now_ms,
                    sub_delivery *out, uint32_t *count)
{
    tally_str name = tally_str_from(s->name);
    record r;
    int rc;
    switch (st->what) {
    case PLAN_REPLAY_DLQ:
        rc = record_load(t, 0, name, st->seq, &r);
        if (rc == TALLY_ok)
            rc = record_delete(t, 0, name, st->seq);
        r.attempts = 1;
        r.when_ms = now_ms + redelivery_delay(&s->config, 1);
        if (rc == TALLY_ok)
            rc = record_save(t, KIND_REPLAY, name, st->seq, &r);
        s->dead_letters--;
        s->replaying--;
        s->in_flight++;
        out[(*count)++] = (sub_delivery){st->seq, 1, true};
        return rc;
    case PLAN_REDELIVER:
        rc = record_load(t, st->kind, name, st->seq, &r);
        if (rc != TALLY_ok)
            return rc;
        r.attempts++;
        r.when_ms = now_ms + redelivery_delay(&s->config, r.attempts);
        if (rc == TALLY_ok)
            rc = record_save(t, st->kind, name, st->seq, &r);
        s->redelivered++;
        out[(*count)++] = (sub_delivery){st->seq, r.attempts, st->kind == KIND_REPLAY};
        return rc;
    case PLAN_PARK: {
        rc = record_load(t, st->kind, name, st->seq, &r);
        if (rc != TALLY_ok)
            return rc;
        char text[TALLY_SUB_ERROR_BYTES_MAX + 64];
        int n = snprintf(text, sizeof(text), "max deliveries (%u) reached%s%.*s",
                         s->config.max_deliver, r.error_len ? ": " : "", (int)r.error_len, r.error);
        tally_str reason = {text, n < 0 ? 0 : (size_t)n < sizeof(text) ? (size_t)n : sizeof(text) - 1};
        return park_record(t, s, st->kind, st->seq, &r, reason, now_ms);
    }
    case PLAN_NEW:
        memset(&r, 0, sizeof(r));
        r.attempts = 1;
        r.when_ms = now_ms + redelivery_delay(&s->config, 1);
        s->delivered_seq = st->seq;
        s->in_flight++;
        out[(*count)++] = (sub_delivery){st->seq, 1, false};
        return record_save(t, KIND_FLIGHT, name, st->seq, &r);
    }
    return TALLY_internal;
}

/* restart: every in-flight event (and replay) not yet due becomes due now,
 * so a (re)starting consumer gets its whole unacked window over as many
 * fetches as it takes, not just the first fetch's worth. */
typedef struct due_ctx {
    int64_t now_ms;
    seq_list later;
} due_ctx;

static int collect_later(uint64_t seq, const MDB_val *v, void *ctx)
{
    due_ctx *d = ctx;
    record r;
    int rc = record_decode(v, false, &r);
    if (rc != TALLY_ok || r.when_ms <= d->now_ms)
        return rc;
    d->later.upto = UINT64_MAX;
    return collect_seq(seq, v, &d->later);
}

static int make_all_due(store_txn *t, tally_str name, int64_t now_ms)
{
    static const char kinds[2] = {KIND_REPLAY, KIND_FLIGHT};
    int rc = TALLY_ok;
    due_ctx d = {now_ms, {0}};
    for (int i = 0; i < 2 && rc == TALLY_ok; i++) {
        d.later.count = 0;
        rc = records_each(t, kinds[i], name, 0, collect_later, &d);
        for (size_t j = 0; rc == TALLY_ok && j < d.later.count; j++) {
            record r;
            rc = record_load(t, kinds[i], name, d.later.seqs[j], &r);
            r.when_ms = now_ms;
            if (rc == TALLY_ok)
                rc = record_save(t, kinds[i], name, d.later.seqs[j], &r);
        }
    }
    free(d.later.seqs);
    return rc;
}

int sub_fetch(store_txn *t, tally_str name, uint32_t max, bool restart, int64_t now_ms,
              sub_delivery *out, uint32_t *count, int64_t *next_due_ms, sub_state *after)
{
    *count = 0;
    *next_due_ms = INT64_MAX;
    if (max == 0 || max > TALLY_SUB_FETCH_EVENTS_MAX)
        return TALLY_invalid_argument;
    sub_state *s = after;
    int rc = cursor_load(t, name, s);
    log_head head;
    uint64_t first = 0;
    if (rc == TALLY_ok)
        rc = log_head_get(t, &head);
    if (rc == TALLY_ok)
        rc = log_first_seq(t, &first);
    if (rc != TALLY_ok)
        return rc;
    if (restart) {
        rc = make_all_due(t, name, now_ms);
        if (rc != TALLY_ok)
            return rc;
    }
    fetch_plan *p = calloc(1, sizeof(*p));
    if (!p)
        return TALLY_out_of_memory;
    p->cfg = &s->config;
    p->restart = false; /* made due above */
    p->now_ms = now_ms;
    p->max = max;
    p->next_due_ms = INT64_MAX;
    if (s->replaying > 0)
        rc = records_each(t, 0, name, 0, plan_replay, p);
    static const char kinds[2] = {KIND_REPLAY, KIND_FLIGHT};
    for (int i = 0; i < 2 && (rc == TALLY_ok || rc == 1); i++) {
        p->kind = kinds[i];
        rc = records_each(t, kinds[i], name, 0, plan_due, p);
    }
    if (rc == 1)
        rc = TALLY_ok;
    uint64_t next = s->delivered_seq + 1;
    if (first && next < first)
        next = first; /* events below the retention floor are gone */
    for (; rc == TALLY_ok && next <= head.seq && p->deliveries < max &&
           p->flights < s->config.max_ack_pending;
         next++, p->deliveries++, p->flights++)
        p->steps[p->count++] = (plan_step){PLAN_NEW, KIND_FLIGHT, next};
    for (uint32_t i = 0; rc == TALLY_ok && i < p->count; i++)
        rc = run_step(t, s, &p->steps[i], now_ms, out, count);
    if (rc == TALLY_ok && p->count > 0) {
        rc = floor_update(t, s);
        s->updated_ms = now_ms;
        if (rc == TALLY_ok)
            rc = cursor_save(t, s);
    }
    *next_due_ms = p->next_due_ms;
    free(p);
    return rc;
}

/* ---- ack, nak, park ---- */

/* Which in-flight record holds seq: 'f', 'r', or 0 (none). */
static int flight_find(store_txn *t, tally_str name, uint64_t seq, char *kind, record *r)
{
    *kind = 0;
    static const char kinds[2] = {KIND_FLIGHT, KIND_REPLAY};
    for (int i = 0; i < 2; i++) {
        int rc = record_load(t, kinds[i], name, seq, r);
        if (rc == TALLY_ok) {
            *kind = kinds[i];
            return TALLY_ok;
        }
        if (rc != TALLY_not_found)
            return rc;
    }
    return TALLY_ok;
}

static int delete_upto(store_txn *t, char kind, tally_str name, uint64_t upto, seq_list *l,
                       sub_state *s, uint32_t *acked)
{
    int rc = collect(t, kind, name, upto, l);
    for (size_t i = 0; rc == TALLY_ok && i < l->count; i++) {
        rc = record_delete(t, kind, name, l->seqs[i]);
        s->in_flight--;
        (*acked)++;
    }
    return rc;
}

int sub_ack(store_txn *t, tally_str name, uint64_t upto, const uint64_t *done,
            uint32_t done_count, int64_t now_ms, uint32_t *acked, sub_state *after)
{
    *acked = 0;
    sub_state *s = after;
    log_head head;
    int rc = cursor_load(t, name, s);
    if (rc == TALLY_ok)
        rc = log_head_get(t, &head);
    if (rc != TALLY_ok)
        return rc;
    if (upto > head.seq)
        return TALLY_seq_beyond_head;
    uint64_t handed = upto > s->delivered_seq ? upto : s->delivered_seq;
    for (uint32_t i = 0; i < done_count; i++)
        if (done[i] == 0 || done[i] > handed)
            return TALLY_seq_not_delivered;
    seq_list l = {0};
    if (upto > 0) {
        rc = delete_upto(t, KIND_FLIGHT, name, upto, &l, s, acked);
        if (rc == TALLY_ok)
            rc = delete_upto(t, KIND_REPLAY, name, upto, &l, s, acked);
        if (upto > s->delivered_seq)
            s->delivered_seq = upto; /* events never fetched, acknowledged all the same */
    }
    free(l.seqs);
    for (uint32_t i = 0; rc == TALLY_ok && i < done_count; i++) {
        char kind;
        record r;
        rc = flight_find(t, name, done[i], &kind, &r);
        if (rc != TALLY_ok || kind == 0)
            continue; /* already acknowledged or parked: acks are retried freely */
        rc = record_delete(t, kind, name, done[i]);
        s->in_flight--;
        (*acked)++;
    }
    if (rc == TALLY_ok)
        rc = floor_update(t, s);
    s->updated_ms = now_ms;
    return rc == TALLY_ok ? cursor_save(t, s) : rc;
}

int sub_nak(store_txn *t, tally_str name, uint64_t seq, bool has_delay, uint32_t delay_ms,
            tally_str error, int64_t now_ms, uint32_t *attempt, int64_t *deliver_after_ms)
{
    sub_state s;
    char kind;
    record r;
    int rc = cursor_load(t, name, &s);
    if (rc == TALLY_ok)
        rc = flight_find(t, name, seq, &kind, &r);
    if (rc != TALLY_ok)
        return rc;
    if (kind == 0)
        return TALLY_seq_not_in_flight;
    r.when_ms = now_ms + (has_delay ? delay_ms : redelivery_delay(&s.config, r.attempts));
    record_set_error(&r, error);
    *attempt = r.attempts;
    *deliver_after_ms = r.when_ms;
    return record_save(t, kind, name, seq, &r);
}

int sub_park(store_txn *t, tally_str name, uint64_t seq, tally_str reason, int64_t now_ms,
             sub_state *after)
{
    char kind;
    record r;
    int rc = cursor_load(t, name, after);
    if (rc == TALLY_ok)
        rc = flight_find(t, name, seq, &kind, &r);
    if (rc != TALLY_ok)
        return rc;
    if (kind == 0) {
        rc = record_load(t, 0, name, seq, &r);
        return rc == TALLY_not_found ? TALLY_seq_not_in_flight : rc; /* parked already: ok */
    }
    rc = park_record(t, after, kind, seq, &r, reason, now_ms);
    if (rc == TALLY_ok && kind == KIND_FLIGHT)
        rc = floor_update(t, after);
    after->updated_ms = now_ms;
    return rc == TALLY_ok ? cursor_save(t, after) : rc;
}

/* ---- dead letters ---- */

typedef struct dlq_page {
    sub_dead_letter_fn fn;
    void *ctx;
    uint32_t limit, seen;
    uint64_t next;
} dlq_page;

static int dlq_page_one(uint64_t seq, const MDB_val *v, void *ctx)
{
    dlq_page *p = ctx;
    if (p->seen == p->limit) {
        p->next = seq; /* there is more */
        return 1;
    }
    record r;
    int rc = record_decode(v, true, &r);
    if (rc != TALLY_ok)
        return rc;
    const uint8_t *text = (const uint8_t *)v->mv_data + DEAD_VALUE_HEAD;
    sub_dead_letter d = {seq, r.attempts, r.when_ms, r.replaying,
                         {(const char *)text, r.error_len}};
    p->seen++;
    return p->fn(&d, p->ctx);
}

int sub_dlq_list(store_txn *t, tally_str name, uint64_t after_seq, uint32_t limit,
                 sub_dead_letter_fn fn, void *ctx, uint64_t *next)
{
    sub_state s;
    *next = 0;
    int rc = cursor_load(t, name, &s);
    if (rc != TALLY_ok)
        return rc;
    if (after_seq == UINT64_MAX)
        return TALLY_ok;
    dlq_page p = {fn, ctx, limit, 0, 0};
    rc = records_each(t, 0, name, after_seq + 1, dlq_page_one, &p);
    if (rc == 1 && p.next) {
        rc = TALLY_ok;
        *next = p.next - 1; /* pass as after_seq: the page ends before p.next */
    }
    return rc;
}

static int mark_replay(store_txn *t, sub_state *s, uint64_t seq, bool must_exist)
{
    record r;
    tally_str name = tally_str_from(s->name);
    int rc = record_load(t, 0, name, seq, &r);
    if (rc == TALLY_not_found)
        return must_exist ? TALLY_dead_letter_not_found : TALLY_ok;
    if (rc != TALLY_ok || r.replaying)
        return rc;
    r.replaying = true;
    s->replaying++;
    return record_save(t, 0, name, seq, &r);
}

int sub_dlq_replay(store_txn *t, tally_str name, bool one, uint64_t seq, int64_t now_ms,
                   uint32_t *replaying)
{
    sub_state s;
    int rc = cursor_load(t, name, &s);
    if (rc != TALLY_ok)
        return rc;
    if (one) {
        rc = mark_replay(t, &s, seq, true);
    } else {
        seq_list l = {0};
        rc = collect(t, 0, name, UINT64_MAX, &l);
        for (size_t i = 0; rc == TALLY_ok && i < l.count; i++)
            rc = mark_replay(t, &s, l.seqs[i], false);
        free(l.seqs);
    }
    *replaying = s.replaying;
    s.updated_ms = now_ms;
    return rc == TALLY_ok ? cursor_save(t, &s) : rc;
}

int sub_dlq_discard(store_txn *t, tally_str name, uint64_t seq, int64_t now_ms)
{
    sub_state s;
    record r;
    int rc = cursor_load(t, name, &s);
    if (rc == TALLY_ok)
        rc = record_load(t, 0, name, seq, &r);
    if (rc == TALLY_not_found)
        return TALLY_dead_letter_not_found;
    if (rc != TALLY_ok)
        return rc;
    rc = record_delete(t, 0, name, seq);
    s.dead_letters--;
    if (r.replaying)
        s.replaying--;
    s.updated_ms = now_ms;
    return rc == TALLY_ok ? cursor_save(t, &s) : rc;
}

/* ---- metrics ---- */

int sub_metrics_get(store_txn *t, const sub_state *s, int64_t now_ms, sub_metrics *out)
{
    log_head head;
    uint64_t first;
    memset(out, 0, sizeof(*out));
    int rc = log_head_get(t, &head);
    if (rc == TALLY_ok)
        rc = log_first_seq(t, &first);
    if (rc != TALLY_ok)
        return rc;
    out->head_seq = head.seq;
    out->pending = head.seq > s->ack_floor ? head.seq - s->ack_floor : 0;
    if (out->pending == 0)
        return TALLY_ok;
    uint64_t oldest = s->ack_floor + 1 < first ? first : s->ack_floor + 1;
    int64_t time_ms;
    rc = event_time(t, oldest, &time_ms);
    if (rc == TALLY_ok && now_ms > time_ms)
        out->oldest_unacked_age_s = (now_ms - time_ms) / 1000;
    return rc;
}

/* ---- every record, for the invariants ---- */

int sub_records(store_txn *t, sub_record_fn fn, void *ctx)
{
    static const store_db dbs[2] = {STORE_DB_CURSORS, STORE_DB_DLQ};
    int rc = TALLY_ok;
    for (int d = 0; d < 2 && rc == TALLY_ok; d++) {
        MDB_cursor *cur;
        rc = store_cursor_open(t, dbs[d], &cur);
        if (rc != TALLY_ok)
            return rc;
        MDB_val key, val;
        int mrc = mdb_cursor_get(cur, &key, &val, MDB_FIRST);
        while (mrc == 0 && rc == TALLY_ok) {
            const uint8_t *k = key.mv_data;
            size_t skip = d == 0 ? 1 : 0;
            char kind = d == 0 ? (char)k[0] : 'd';
            if (kind != KIND_CURSOR) {
                if (key.mv_size < skip + 1 + 1 + 8 || k[key.mv_size - 9] != 0 ||
                    (d == 0 && kind != KIND_FLIGHT && kind != KIND_REPLAY))
                    rc = TALLY_corrupt_record;
                else
                    rc = fn(kind, (tally_str){(const char *)k + skip, key.mv_size - 9 - skip},
                            get_u64_be(k + key.mv_size - 8), ctx);
            }
            if (rc == TALLY_ok)
                mrc = mdb_cursor_get(cur, &key, &val, MDB_NEXT);
        }
        mdb_cursor_close(cur);
        if (mrc != 0 && mrc != MDB_NOTFOUND)
            rc = store_translate(mrc);
    }
    return rc;
}
