/*
 * subscriber_record.c — encoding, decoding and access of the records of
 * durable subscribers (subscriber_record.h): configs, cursors, in-flight
 * records and dead letters, the walks over them, the ack floor.
 */
#include "log/subscriber_record.h"

#include "common/error.h"
#include "log/log.h"

#include <assert.h>
#include <fnmatch.h>
#include <stdlib.h>
#include <string.h>

void sub_config_default(sub_config *cfg)
{
    memset(cfg, 0, sizeof(*cfg));
    cfg->max_deliver = TALLY_SUB_MAX_DELIVER_DEFAULT;
    cfg->ack_wait_ms = TALLY_SUB_ACK_WAIT_MS_DEFAULT;
    cfg->max_ack_pending = TALLY_SUB_MAX_ACK_PENDING_DEFAULT;
}

/* 1-64 bytes of A-Z a-z 0-9 . _ -, and ':' where colon is true. */
static int name_chars_check(tally_str name, bool colon)
{
    if (name.len == 0 || name.len > TALLY_SUBSCRIBER_NAME_BYTES_MAX)
        return TALLY_invalid_subscriber_name;
    for (size_t i = 0; i < name.len; i++) {
        unsigned char c = (unsigned char)name.ptr[i];
        bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                  c == '.' || c == '_' || c == '-' || (colon && c == ':');
        if (!ok)
            return TALLY_invalid_subscriber_name;
    }
    return TALLY_ok;
}

int sub_name_check(tally_str name)
{
    return name_chars_check(name, true);
}

int sub_instance_check(tally_str instance)
{
    return name_chars_check(instance, false);
}

int sub_owner_text_check(tally_str text)
{
    if (text.len == 0 || text.len > TALLY_SUB_OWNER_BYTES_MAX)
        return TALLY_invalid_argument;
    for (size_t i = 0; i < text.len; i++) {
        unsigned char c = (unsigned char)text.ptr[i];
        if (c < 0x20 || c > 0x7e || c == '"' || c == '\\')
            return TALLY_invalid_argument;
    }
    return TALLY_ok;
}

static int filter_check(const sub_filter *f)
{
    if (f->type_count > TALLY_SUB_FILTER_TYPES_MAX ||
        (f->kinds >> LOG_ENTITY_KIND_LAST) != 0 ||
        strnlen(f->subject_glob, sizeof(f->subject_glob)) == sizeof(f->subject_glob))
        return TALLY_invalid_argument;
    for (uint32_t i = 0; i < f->type_count; i++) {
        size_t n = strnlen(f->types[i], sizeof(f->types[i]));
        if (n == 0 || n == sizeof(f->types[i]))
            return TALLY_invalid_argument;
    }
    return TALLY_ok;
}

/* An owner text as stored: "" or a checked text. */
static bool owner_ok(const char *text, size_t cap)
{
    size_t n = strnlen(text, cap);
    return n < cap && (n == 0 || sub_owner_text_check((tally_str){text, n}) == TALLY_ok);
}

/* Whether type matches the filter's pattern: "x.y" exactly, "x.*" every
 * type that starts "x.", "*" every type (tally-relay's endpoint types
 * are these patterns). */
static bool type_matches(const char *pattern, tally_str type)
{
    size_t len = strlen(pattern);
    if (len == 1 && pattern[0] == '*')
        return true;
    if (len >= 2 && pattern[len - 1] == '*' && pattern[len - 2] == '.')
        return type.len >= len - 1 && memcmp(type.ptr, pattern, len - 1) == 0;
    return tally_str_equal(type, tally_str_from(pattern));
}

bool sub_filter_pass(const sub_filter *f, const log_event *ev)
{
    if (f->type_count > 0) {
        bool found = false;
        for (uint32_t i = 0; i < f->type_count && !found; i++)
            found = type_matches(f->types[i], ev->type);
        if (!found)
            return false;
    }
    if (f->kinds != 0 && (ev->entity.kind < 1 || ev->entity.kind > 8 ||
                          !(f->kinds & (1u << (ev->entity.kind - 1)))))
        return false;
    if (f->subject_glob[0] == 0)
        return true;
    char subject[TALLY_SUBJECT_BYTES_MAX + 1];
    if (ev->entity.subject.len == 0 || ev->entity.subject.len > TALLY_SUBJECT_BYTES_MAX)
        return false; /* no subject: an account, transfer, dead letter or webhook */
    memcpy(subject, ev->entity.subject.ptr, ev->entity.subject.len);
    subject[ev->entity.subject.len] = 0;
    return fnmatch(f->subject_glob, subject, 0) == 0;
}

int sub_config_check(const sub_config *c)
{
    if (filter_check(&c->filter) != TALLY_ok ||
        (c->inactive_expiry_ms != 0 && (c->inactive_expiry_ms < TALLY_SUB_INACTIVE_EXPIRY_MS_MIN ||
                                        c->inactive_expiry_ms > TALLY_SUB_INACTIVE_EXPIRY_MS_MAX)) ||
        !owner_ok(c->contact, sizeof(c->contact)) ||
        !owner_ok(c->alert_route, sizeof(c->alert_route)))
        return TALLY_invalid_argument;
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

bool sub_config_equal(const sub_config *a, const sub_config *b)
{
    if (a->max_deliver != b->max_deliver || a->ack_wait_ms != b->ack_wait_ms ||
        a->max_ack_pending != b->max_ack_pending || a->backoff_count != b->backoff_count)
        return false;
    if (memcmp(a->backoff_ms, b->backoff_ms, a->backoff_count * sizeof(uint32_t)) != 0 ||
        a->filter.type_count != b->filter.type_count || a->filter.kinds != b->filter.kinds ||
        strcmp(a->filter.subject_glob, b->filter.subject_glob) != 0 ||
        a->inactive_expiry_ms != b->inactive_expiry_ms || strcmp(a->contact, b->contact) != 0 ||
        strcmp(a->alert_route, b->alert_route) != 0)
        return false;
    for (uint32_t i = 0; i < a->filter.type_count; i++)
        if (strcmp(a->filter.types[i], b->filter.types[i]) != 0)
            return false;
    return true;
}

/* ---- keys ---- */

size_t sub_cursor_key(uint8_t *k, tally_str name)
{
    k[0] = KIND_CURSOR;
    memcpy(k + 1, name.ptr, name.len);
    return 1 + name.len;
}

/* kind + name + 0x00 + seq; kind 0 = none (the dlq's keys). */
size_t sub_seq_key(uint8_t *k, char kind, tally_str name, uint64_t seq)
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

/* One tail entry: tag, u16 length, value. */
static uint8_t *put_tag(uint8_t *p, uint8_t tag, const void *value, size_t len)
{
    *p++ = tag;
    put_u16_be(p, (uint16_t)len);
    memcpy(p + 2, value, len);
    return p + 2 + len;
}

static uint8_t *put_tag_text(uint8_t *p, uint8_t tag, const char *text)
{
    size_t n = strlen(text);
    return n ? put_tag(p, tag, text, n) : p;
}

/* The tail of format 2 after the fixed part at p: only what is set. */
static uint8_t *cursor_tail_encode(const sub_state *s, uint8_t *p)
{
    const sub_config *c = &s->config;
    uint8_t v[8];
    if (c->inactive_expiry_ms) {
        put_u64_be(v, c->inactive_expiry_ms);
        p = put_tag(p, CURSOR_TAG_INACTIVE_EXPIRY, v, 8);
        put_u64_be(v, (uint64_t)s->active_ms);
        p = put_tag(p, CURSOR_TAG_ACTIVE, v, 8);
    }
    if (c->filter.type_count) {
        uint8_t types[1 + TALLY_SUB_FILTER_TYPES_MAX * (1 + TALLY_SUB_FILTER_TYPE_BYTES_MAX)];
        size_t n = 0;
        types[n++] = (uint8_t)c->filter.type_count;
        for (uint32_t i = 0; i < c->filter.type_count; i++) {
            size_t len = strlen(c->filter.types[i]);
            types[n++] = (uint8_t)len;
            memcpy(types + n, c->filter.types[i], len);
            n += len;
        }
        p = put_tag(p, CURSOR_TAG_TYPES, types, n);
    }
    if (c->filter.kinds)
        p = put_tag(p, CURSOR_TAG_KINDS, &c->filter.kinds, 1);
    p = put_tag_text(p, CURSOR_TAG_SUBJECT_GLOB, c->filter.subject_glob);
    p = put_tag_text(p, CURSOR_TAG_CONTACT, c->contact);
    return put_tag_text(p, CURSOR_TAG_ALERT_ROUTE, c->alert_route);
}

_Static_assert(3 * 7 + 8 + 8 + 1 + TALLY_SUB_FILTER_TYPES_MAX * (1 + TALLY_SUB_FILTER_TYPE_BYTES_MAX) +
                       1 + TALLY_SUB_FILTER_GLOB_BYTES_MAX + 2 * TALLY_SUB_OWNER_BYTES_MAX <=
                   CURSOR_TAIL_BYTES_MAX,
               "a cursor's tail fits its bound");

/* Format 1 when nothing of the tail is set (what older builds read),
 * else format 2. Returns the length. */
static size_t cursor_encode(const sub_state *s, uint8_t out[CURSOR_VALUE_BYTES_MAX])
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
    p = put64(p, (uint64_t)s->updated_ms);
    uint8_t *end = cursor_tail_encode(s, p);
    if (end != p)
        out[0] = RECORD_VERSION_TAIL;
    return (size_t)(end - out);
}

static int text_of_tag(const uint8_t *v, size_t len, char *out, size_t cap)
{
    if (len == 0 || len >= cap)
        return TALLY_corrupt_record;
    memcpy(out, v, len);
    out[len] = 0;
    return TALLY_ok;
}

static int types_of_tag(const uint8_t *v, size_t len, sub_filter *f)
{
    if (len < 1 || v[0] == 0 || v[0] > TALLY_SUB_FILTER_TYPES_MAX)
        return TALLY_corrupt_record;
    size_t at = 1;
    for (uint32_t i = 0; i < v[0]; i++) {
        if (at >= len || at + 1 + v[at] > len ||
            text_of_tag(v + at + 1, v[at], f->types[i], sizeof(f->types[i])) != TALLY_ok)
            return TALLY_corrupt_record;
        at += 1 + v[at];
    }
    f->type_count = v[0];
    return at == len ? TALLY_ok : TALLY_corrupt_record;
}

/* One tail entry into s. */
static int cursor_tag_decode(uint8_t tag, const uint8_t *v, size_t len, sub_state *s)
{
    sub_config *c = &s->config;
    switch (tag) {
    case CURSOR_TAG_INACTIVE_EXPIRY:
        if (len != 8)
            return TALLY_corrupt_record;
        c->inactive_expiry_ms = get_u64_be(v);
        return TALLY_ok;
    case CURSOR_TAG_ACTIVE:
        if (len != 8)
            return TALLY_corrupt_record;
        s->active_ms = (int64_t)get_u64_be(v);
        return TALLY_ok;
    case CURSOR_TAG_TYPES: return types_of_tag(v, len, &c->filter);
    case CURSOR_TAG_KINDS:
        if (len != 1 || v[0] == 0)
            return TALLY_corrupt_record;
        c->filter.kinds = v[0];
        return TALLY_ok;
    case CURSOR_TAG_SUBJECT_GLOB:
        return text_of_tag(v, len, c->filter.subject_glob, sizeof(c->filter.subject_glob));
    case CURSOR_TAG_CONTACT: return text_of_tag(v, len, c->contact, sizeof(c->contact));
    case CURSOR_TAG_ALERT_ROUTE: return text_of_tag(v, len, c->alert_route, sizeof(c->alert_route));
    }
    return TALLY_corrupt_record; /* a tag this build does not know */
}

static int cursor_tail_decode(const uint8_t *p, size_t len, sub_state *s)
{
    size_t at = 0;
    while (at < len) {
        if (len - at < 3)
            return TALLY_corrupt_record;
        size_t n = get_u16_be(p + at + 1);
        if (n > len - at - 3)
            return TALLY_corrupt_record;
        int rc = cursor_tag_decode(p[at], p + at + 3, n, s);
        if (rc != TALLY_ok)
            return rc;
        at += 3 + n;
    }
    return TALLY_ok;
}

int sub_cursor_decode(const MDB_val *v, tally_str name, sub_state *s)
{
    const uint8_t *p = v->mv_data;
    if (v->mv_size < CURSOR_VALUE_BYTES || v->mv_size > CURSOR_VALUE_BYTES_MAX ||
        (p[0] != RECORD_VERSION && p[0] != RECORD_VERSION_TAIL) ||
        (p[0] == RECORD_VERSION) != (v->mv_size == CURSOR_VALUE_BYTES))
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
    p = get64(p, &updated);
    s->created_ms = (int64_t)created;
    s->updated_ms = (int64_t)updated;
    s->active_ms = s->created_ms;
    int rc = cursor_tail_decode(p, v->mv_size - CURSOR_VALUE_BYTES, s);
    if (rc != TALLY_ok || sub_config_check(&s->config) != TALLY_ok || s->ack_floor > s->delivered_seq)
        return TALLY_corrupt_record;
    return TALLY_ok;
}


static size_t record_encode(const sub_record *r, bool dead, uint8_t out[VALUE_BYTES_MAX])
{
    uint8_t *p = put64(put32(out, r->attempts), (uint64_t)r->when_ms);
    if (dead)
        *p++ = r->replaying;
    put_u16_be(p, r->error_len);
    memcpy(p + 2, r->error, r->error_len);
    p += 2 + r->error_len;
    if (!dead && r->instance_len > 0) { /* the holder, after the text */
        *p++ = r->instance_len;
        memcpy(p, r->instance, r->instance_len);
        p += r->instance_len;
    }
    return (size_t)(p - out);
}

int sub_record_decode(const MDB_val *v, bool dead, sub_record *r)
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
    if (r->error_len > TALLY_SUB_ERROR_BYTES_MAX || v->mv_size < head + r->error_len)
        return TALLY_corrupt_record;
    memcpy(r->error, p + 2, r->error_len);
    size_t rest = v->mv_size - head - r->error_len;
    if (rest == 0)
        return TALLY_ok; /* no instance: a dead letter, or an in-flight record without one */
    const uint8_t *inst = p + 2 + r->error_len;
    if (dead || inst[0] == 0 || inst[0] > TALLY_SUB_INSTANCE_BYTES_MAX || rest != 1u + inst[0])
        return TALLY_corrupt_record;
    r->instance_len = inst[0];
    memcpy(r->instance, inst + 1, r->instance_len);
    return TALLY_ok;
}

void sub_record_set_error(sub_record *r, tally_str text)
{
    size_t n = text.len < TALLY_SUB_ERROR_BYTES_MAX ? text.len : TALLY_SUB_ERROR_BYTES_MAX;
    if (n > 0) /* an absent text has no pointer: memcpy's source must not be NULL */
        memcpy(r->error, text.ptr, n);
    r->error_len = (uint16_t)n;
}

void sub_record_set_instance(sub_record *r, tally_str instance)
{
    assert(instance.len <= TALLY_SUB_INSTANCE_BYTES_MAX);
    if (instance.len > 0) /* none: no pointer, and memcpy's source must not be NULL */
        memcpy(r->instance, instance.ptr, instance.len);
    r->instance_len = (uint8_t)instance.len;
}

bool sub_record_held_by(const sub_record *r, tally_str instance)
{
    return tally_str_equal((tally_str){r->instance, r->instance_len}, instance);
}

/* ---- record access ---- */

int sub_cursor_load(store_txn *t, tally_str name, sub_state *s)
{
    int rc = sub_name_check(name);
    if (rc != TALLY_ok)
        return rc;
    uint8_t k[KEY_BYTES_MAX];
    MDB_val v;
    rc = store_get(t, STORE_DB_CURSORS, k, sub_cursor_key(k, name), &v);
    if (rc == TALLY_not_found)
        return TALLY_subscriber_not_found;
    return rc == TALLY_ok ? sub_cursor_decode(&v, name, s) : rc;
}

int sub_cursor_save(store_txn *t, const sub_state *s)
{
    uint8_t k[KEY_BYTES_MAX], v[CURSOR_VALUE_BYTES_MAX];
    assert(sub_config_check(&s->config) == TALLY_ok);
    size_t len = cursor_encode(s, v);
    return store_put(t, STORE_DB_CURSORS, k, sub_cursor_key(k, tally_str_from(s->name)), v,
                     len, 0);
}

/* kind 'f' or 'r' in cursors, or 0 for the dlq. */
int sub_record_load(store_txn *t, char kind, tally_str name, uint64_t seq, sub_record *r)
{
    uint8_t k[KEY_BYTES_MAX];
    MDB_val v;
    store_db db = kind ? STORE_DB_CURSORS : STORE_DB_DLQ;
    int rc = store_get(t, db, k, sub_seq_key(k, kind, name, seq), &v);
    return rc == TALLY_ok ? sub_record_decode(&v, kind == 0, r) : rc;
}

int sub_record_save(store_txn *t, char kind, tally_str name, uint64_t seq, const sub_record *r)
{
    uint8_t k[KEY_BYTES_MAX], v[VALUE_BYTES_MAX];
    store_db db = kind ? STORE_DB_CURSORS : STORE_DB_DLQ;
    return store_put(t, db, k, sub_seq_key(k, kind, name, seq), v, record_encode(r, kind == 0, v), 0);
}

int sub_record_delete(store_txn *t, char kind, tally_str name, uint64_t seq)
{
    uint8_t k[KEY_BYTES_MAX];
    store_db db = kind ? STORE_DB_CURSORS : STORE_DB_DLQ;
    int rc = store_del(t, db, k, sub_seq_key(k, kind, name, seq));
    return rc == TALLY_not_found ? store_txn_fail(t, TALLY_internal) : rc;
}


int sub_each_with_prefix(store_txn *t, store_db db, const uint8_t *start, size_t start_len,
                         size_t prefix_len, size_t key_len, sub_entry_fn fn, void *ctx)
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


typedef struct record_walk {
    sub_seq_fn fn;
    void *ctx;
} record_walk;

static int record_entry(const MDB_val *key, const MDB_val *val, void *ctx)
{
    record_walk *w = ctx;
    return w->fn(get_u64_be((const uint8_t *)key->mv_data + key->mv_size - 8), val, w->ctx);
}

int sub_records_each(store_txn *t, char kind, tally_str name, uint64_t from_seq,
                     sub_seq_fn fn, void *ctx)
{
    uint8_t k[KEY_BYTES_MAX];
    size_t klen = sub_seq_key(k, kind, name, from_seq);
    record_walk w = {fn, ctx};
    return sub_each_with_prefix(t, kind ? STORE_DB_CURSORS : STORE_DB_DLQ, k, klen, klen - 8, klen,
                            record_entry, &w);
}


int sub_seq_collect_one(uint64_t seq, const MDB_val *v, void *ctx)
{
    (void)v;
    sub_seq_list *l = ctx;
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

int sub_seqs_collect(store_txn *t, char kind, tally_str name, uint64_t upto, sub_seq_list *l)
{
    l->count = 0;
    l->upto = upto;
    int rc = sub_records_each(t, kind, name, 0, sub_seq_collect_one, l);
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
int sub_floor_update(store_txn *t, sub_state *s)
{
    uint64_t first = 0;
    int rc = sub_records_each(t, KIND_FLIGHT, tally_str_from(s->name), 0, first_seq_cb, &first);
    if (rc != TALLY_ok && rc != 1)
        return rc;
    uint64_t floor = first ? first - 1 : s->delivered_seq;
    if (floor > s->ack_floor)
        s->ack_floor = floor;
    return TALLY_ok;
}

uint32_t sub_redelivery_delay(const sub_config *c, uint32_t attempt)
{
    if (c->backoff_count == 0)
        return c->ack_wait_ms;
    uint32_t i = attempt < c->backoff_count ? attempt : c->backoff_count;
    return c->backoff_ms[i ? i - 1 : 0];
}
