/*
 * subscriber_partition.c — ordered partitions of durable subscribers
 * (subscriber_partition.h): the partitions record, the leases of its
 * partitions and how instances share them, the entity hash that places
 * an event in a partition, and the set of entities held back.
 */
#include "log/subscriber_partition.h"
#include "log/subscriber.h"

#include "common/error.h"
#include "log/log.h"

#include <assert.h>
#include <stdlib.h>
#include <string.h>

#define GROUP_VERSION 1
#define KIND_GROUP 'g'
#define LEASE_BYTES (8 + 1 + TALLY_SUB_INSTANCE_BYTES_MAX)
#define GROUP_VALUE_BYTES_MAX \
    (1 + 4 + TALLY_SUB_PARTITIONS_MAX * LEASE_BYTES + 1 + TALLY_SUB_PARTITION_MEMBERS_MAX * LEASE_BYTES)

static size_t group_key(uint8_t *k, tally_str name)
{
    k[0] = KIND_GROUP;
    memcpy(k + 1, name.ptr, name.len);
    return 1 + name.len;
}

static tally_str lease_holder(const sub_partition_lease *l)
{
    return (tally_str){l->holder, l->holder_len};
}

static void lease_set(sub_partition_lease *l, tally_str holder, int64_t until_ms)
{
    assert(holder.len <= TALLY_SUB_INSTANCE_BYTES_MAX);
    if (holder.len > 0)
        memcpy(l->holder, holder.ptr, holder.len);
    l->holder_len = (uint8_t)holder.len;
    l->until_ms = until_ms;
}

/* ---- encoding ---- */

static uint8_t *lease_encode(uint8_t *p, const sub_partition_lease *l)
{
    put_u64_be(p, (uint64_t)l->until_ms);
    p[8] = l->holder_len;
    memcpy(p + 9, l->holder, l->holder_len);
    return p + 9 + l->holder_len;
}

static size_t group_encode(const sub_partitions *g, uint8_t *out)
{
    uint8_t *p = out;
    *p++ = GROUP_VERSION;
    put_u32_be(p, g->count);
    p += 4;
    for (uint32_t i = 0; i < g->count; i++)
        p = lease_encode(p, &g->lease[i]);
    *p++ = (uint8_t)g->member_count;
    for (uint32_t i = 0; i < g->member_count; i++)
        p = lease_encode(p, &g->members[i]);
    return (size_t)(p - out);
}

static const uint8_t *lease_decode(const uint8_t *p, const uint8_t *end, sub_partition_lease *l)
{
    if (end - p < 9)
        return NULL;
    l->until_ms = (int64_t)get_u64_be(p);
    l->holder_len = p[8];
    if (l->holder_len > TALLY_SUB_INSTANCE_BYTES_MAX || end - (p + 9) < l->holder_len)
        return NULL;
    memcpy(l->holder, p + 9, l->holder_len);
    return p + 9 + l->holder_len;
}

static int group_decode(const MDB_val *v, sub_partitions *g)
{
    const uint8_t *p = v->mv_data, *end = p + v->mv_size;
    memset(g, 0, sizeof(*g));
    if (v->mv_size < 1 + 4 + 1 || p[0] != GROUP_VERSION)
        return TALLY_corrupt_record;
    g->count = get_u32_be(p + 1);
    p += 5;
    if (g->count < 2 || g->count > TALLY_SUB_PARTITIONS_MAX)
        return TALLY_corrupt_record;
    for (uint32_t i = 0; i < g->count && p; i++)
        p = lease_decode(p, end, &g->lease[i]);
    if (!p || p == end)
        return TALLY_corrupt_record;
    g->member_count = *p++;
    if (g->member_count > TALLY_SUB_PARTITION_MEMBERS_MAX)
        return TALLY_corrupt_record;
    for (uint32_t i = 0; i < g->member_count && p; i++)
        p = lease_decode(p, end, &g->members[i]);
    if (p != end)
        return TALLY_corrupt_record;
    return sub_partitions_check(g);
}

int sub_partitions_check(const sub_partitions *g)
{
    if (g->count < 2 || g->count > TALLY_SUB_PARTITIONS_MAX ||
        g->member_count > TALLY_SUB_PARTITION_MEMBERS_MAX)
        return TALLY_corrupt_record;
    for (uint32_t i = 0; i < g->count; i++) {
        const sub_partition_lease *l = &g->lease[i];
        if ((l->holder_len > 0) != (l->until_ms != 0) || /* a lease end exactly where a holder is */
            (l->holder_len > 0 && sub_instance_check(lease_holder(l)) != TALLY_ok))
            return TALLY_corrupt_record;
    }
    for (uint32_t i = 0; i < g->member_count; i++)
        if (sub_instance_check(lease_holder(&g->members[i])) != TALLY_ok)
            return TALLY_corrupt_record;
    return TALLY_ok;
}

/* ---- access ---- */

int sub_partitions_load(store_txn *t, tally_str name, sub_partitions *out)
{
    uint8_t k[1 + TALLY_SUBSCRIBER_NAME_BYTES_MAX];
    MDB_val v;
    int rc = store_get(t, STORE_DB_CURSORS, k, group_key(k, name), &v);
    if (rc == TALLY_not_found) {
        memset(out, 0, sizeof(*out));
        out->count = 1;
        return TALLY_ok;
    }
    return rc == TALLY_ok ? group_decode(&v, out) : rc;
}

int sub_partitions_save(store_txn *t, tally_str name, const sub_partitions *g)
{
    assert(sub_partitions_check(g) == TALLY_ok);
    uint8_t k[1 + TALLY_SUBSCRIBER_NAME_BYTES_MAX];
    uint8_t *v = malloc(GROUP_VALUE_BYTES_MAX);
    if (!v)
        return store_txn_fail(t, TALLY_out_of_memory);
    int rc = store_put(t, STORE_DB_CURSORS, k, group_key(k, name), v, group_encode(g, v), 0);
    free(v);
    return rc;
}

int sub_partitions_create(store_txn *t, tally_str name, uint32_t count, bool created)
{
    if (count < 1 || count > TALLY_SUB_PARTITIONS_MAX)
        return TALLY_invalid_argument;
    sub_partitions *g = calloc(1, sizeof(*g));
    if (!g)
        return TALLY_out_of_memory;
    int rc = TALLY_ok;
    if (!created) {
        rc = sub_partitions_load(t, name, g);
        if (rc == TALLY_ok && g->count != count)
            rc = TALLY_subscriber_exists_with_different_config;
    } else if (count > 1) {
        g->count = count;
        rc = sub_partitions_save(t, name, g);
    }
    free(g);
    return rc;
}

int sub_partitions_delete(store_txn *t, tally_str name)
{
    uint8_t k[1 + TALLY_SUBSCRIBER_NAME_BYTES_MAX];
    int rc = store_del(t, STORE_DB_CURSORS, k, group_key(k, name));
    return rc == TALLY_not_found ? TALLY_ok : rc;
}

/* ---- sharing the partitions out ---- */

bool sub_partition_held(const sub_partitions *g, uint32_t index, tally_str instance,
                        int64_t now_ms)
{
    const sub_partition_lease *l = &g->lease[index];
    return l->until_ms > now_ms && tally_str_equal(lease_holder(l), instance);
}

/* Drop expired members, then renew (or add) instance; a full list leaves a
 * newcomer out of the count (it still takes what is free). */
static void members_update(sub_partitions *g, tally_str instance, int64_t until_ms,
                           int64_t now_ms)
{
    uint32_t kept = 0;
    bool found = false;
    for (uint32_t i = 0; i < g->member_count; i++) {
        sub_partition_lease *m = &g->members[i];
        if (tally_str_equal(lease_holder(m), instance)) {
            m->until_ms = until_ms;
            found = true;
        }
        if (m->until_ms > now_ms)
            g->members[kept++] = *m;
    }
    g->member_count = kept;
    if (!found && kept < TALLY_SUB_PARTITION_MEMBERS_MAX)
        lease_set(&g->members[g->member_count++], instance, until_ms);
}

/* Byte order of two ids, the shorter first on a tie. */
static int id_compare(tally_str a, tally_str b)
{
    size_t n = a.len < b.len ? a.len : b.len;
    int c = n ? memcmp(a.ptr, b.ptr, n) : 0;
    return c ? c : (a.len > b.len) - (a.len < b.len);
}

/* The instance's share: N / m each, and one more for the first N % m
 * members in id order, so the shares add up to N and every member gets
 * its own (a newcomer left out of a full list: what is free). */
static uint32_t share_of(const sub_partitions *g, tally_str instance)
{
    uint32_t rank = 0;
    bool member = false;
    for (uint32_t i = 0; i < g->member_count; i++) {
        int c = id_compare(lease_holder(&g->members[i]), instance);
        rank += c < 0;
        member = member || c == 0;
    }
    if (!member)
        return g->count;
    return g->count / g->member_count + (rank < g->count % g->member_count ? 1 : 0);
}

void sub_partitions_claim(sub_partitions *g, tally_str instance, int64_t now_ms,
                          uint32_t lease_ms)
{
    if (g->count <= 1)
        return;
    int64_t until = now_ms + lease_ms;
    members_update(g, instance, until, now_ms);
    uint32_t share = share_of(g, instance);
    uint32_t held = 0;
    for (uint32_t i = 0; i < g->count; i++) {
        sub_partition_lease *l = &g->lease[i];
        if (l->until_ms <= now_ms)
            lease_set(l, (tally_str){NULL, 0}, 0); /* expired: free */
        else if (tally_str_equal(lease_holder(l), instance)) {
            if (held < share) {
                l->until_ms = until;
                held++;
            } else {
                lease_set(l, (tally_str){NULL, 0}, 0); /* more than its share */
            }
        }
    }
    for (uint32_t i = 0; i < g->count && held < share; i++)
        if (g->lease[i].holder_len == 0) {
            lease_set(&g->lease[i], instance, until);
            held++;
        }
}

int sub_partitions_renew(store_txn *t, tally_str name, tally_str instance, int64_t now_ms,
                         uint32_t lease_ms)
{
    sub_partitions *g = malloc(sizeof(*g));
    if (!g)
        return TALLY_out_of_memory;
    int rc = sub_partitions_load(t, name, g);
    bool changed = false;
    int64_t until = now_ms + lease_ms;
    for (uint32_t i = 0; rc == TALLY_ok && g->count > 1 && i < g->count; i++)
        if (sub_partition_held(g, i, instance, now_ms) && g->lease[i].until_ms < until) {
            g->lease[i].until_ms = until;
            changed = true;
        }
    for (uint32_t i = 0; rc == TALLY_ok && g->count > 1 && i < g->member_count; i++)
        if (tally_str_equal(lease_holder(&g->members[i]), instance) &&
            g->members[i].until_ms > now_ms && g->members[i].until_ms < until) {
            g->members[i].until_ms = until;
            changed = true;
        }
    if (rc == TALLY_ok && changed)
        rc = sub_partitions_save(t, name, g);
    free(g);
    return rc;
}

/* ---- the entity hash ---- */

static uint64_t fnv1a(uint64_t h, const void *data, size_t len)
{
    const uint8_t *p = data;
    for (size_t i = 0; i < len; i++) {
        h ^= p[i];
        h *= 1099511628211ULL;
    }
    return h;
}

static uint64_t fnv_u64(uint64_t h, uint64_t v)
{
    uint8_t b[8];
    put_u64_be(b, v);
    return fnv1a(h, b, 8);
}

/* Two strings with a 0x00 between them. */
static uint64_t fnv_pair(uint64_t h, tally_str a, tally_str b)
{
    static const uint8_t zero = 0;
    return fnv1a(fnv1a(fnv1a(h, a.ptr, a.len), &zero, 1), b.ptr, b.len);
}

uint64_t sub_entity_hash(const log_entity *e)
{
    uint8_t kind = (uint8_t)e->kind;
    uint64_t h = fnv1a(14695981039346656037ULL, &kind, 1);
    switch (e->kind) {
    case LOG_ENTITY_ACCOUNT: return fnv_u64(h, e->account_id);
    case LOG_ENTITY_TRANSFER: return fnv1a(h, e->transfer_id.bytes, 16);
    case LOG_ENTITY_ENTITLEMENT: return fnv_pair(h, e->subject, e->feature);
    case LOG_ENTITY_DEAD_LETTER:
        return fnv_u64(fnv1a(fnv1a(h, e->subscriber.ptr, e->subscriber.len), "", 1), e->letter_seq);
    case LOG_ENTITY_WEBHOOK: return fnv_pair(h, e->webhook_source, e->webhook_event_id);
    case LOG_ENTITY_SUBSCRIBER: return fnv1a(h, e->subscriber.ptr, e->subscriber.len);
    case LOG_ENTITY_ENDPOINT: return fnv1a(h, e->endpoint.ptr, e->endpoint.len);
    }
    return h;
}

int sub_event_partition(store_txn *t, uint64_t seq, uint32_t count, msgpack_zone *zone,
                        uint64_t *hash, uint32_t *partition)
{
    log_bytes v;
    log_bytes_init(&v);
    int rc = log_bytes_get(t, seq, &v);
    if (rc == TALLY_ok) { /* the entity only: the hash was checked as it was written */
        msgpack_object root;
        log_event ev;
        msgpack_zone_clear(zone);
        rc = log_event_peek_in(v.ptr, v.len, zone, &root, &ev);
        if (rc == TALLY_ok)
            *hash = sub_entity_hash(&ev.entity);
    } else if (rc == TALLY_not_found) {
        *hash = fnv_u64(0, seq); /* gone: no entity to keep in order */
    }
    log_bytes_free(&v);
    *partition = (uint32_t)(*hash % (count ? count : 1));
    return rc == TALLY_not_found ? TALLY_ok : rc;
}

/* ---- the set of entities held back ---- */

int sub_entity_set_init(sub_entity_set *s, size_t capacity)
{
    size_t n = 64;
    while (n < 2 * capacity)
        n *= 2;
    s->slots = calloc(n, sizeof(uint64_t));
    s->mask = n - 1;
    s->count = 0;
    return s->slots ? TALLY_ok : TALLY_out_of_memory;
}

/* 0 marks an empty slot: the hash 0 is kept as 1 (a collision only holds
 * an entity back, never lets one through). */
static uint64_t set_key(uint64_t hash) { return hash ? hash : 1; }

bool sub_entity_set_has(const sub_entity_set *s, uint64_t hash)
{
    uint64_t k = set_key(hash);
    for (size_t i = k & s->mask;; i = (i + 1) & s->mask) {
        if (s->slots[i] == k)
            return true;
        if (s->slots[i] == 0)
            return false;
    }
}

void sub_entity_set_add(sub_entity_set *s, uint64_t hash)
{
    uint64_t k = set_key(hash);
    assert(s->count < s->mask); /* sized for what a fetch can add */
    size_t i = k & s->mask;
    while (s->slots[i] != 0 && s->slots[i] != k)
        i = (i + 1) & s->mask;
    if (s->slots[i] == 0) {
        s->slots[i] = k;
        s->count++;
    }
}

void sub_entity_set_free(sub_entity_set *s)
{
    free(s->slots);
    s->slots = NULL;
}

/* ---- every record, for tally-recon ---- */

typedef struct each_ctx {
    sub_partitions_fn fn;
    void *ctx;
    sub_partitions *g;
} each_ctx;

static int each_one(store_txn *t, const MDB_val *key, const MDB_val *val, each_ctx *e)
{
    (void)t;
    tally_str name = {(const char *)key->mv_data + 1, key->mv_size - 1};
    bool ok = sub_name_check(name) == TALLY_ok && group_decode(val, e->g) == TALLY_ok;
    return e->fn(name, e->g, ok, e->ctx);
}

int sub_partitions_each(store_txn *t, sub_partitions_fn fn, void *ctx)
{
    each_ctx e = {fn, ctx, malloc(sizeof(sub_partitions))};
    if (!e.g)
        return TALLY_out_of_memory;
    MDB_cursor *cur;
    int rc = store_cursor_open(t, STORE_DB_CURSORS, &cur);
    if (rc != TALLY_ok) {
        free(e.g);
        return rc;
    }
    static const uint8_t first = KIND_GROUP;
    MDB_val key = {1, (void *)&first}, val;
    int mrc = mdb_cursor_get(cur, &key, &val, MDB_SET_RANGE);
    while (mrc == 0 && rc == TALLY_ok && ((const uint8_t *)key.mv_data)[0] == KIND_GROUP) {
        rc = each_one(t, &key, &val, &e);
        if (rc == TALLY_ok)
            mrc = mdb_cursor_get(cur, &key, &val, MDB_NEXT);
    }
    mdb_cursor_close(cur);
    free(e.g);
    if (mrc != 0 && mrc != MDB_NOTFOUND)
        return store_translate(mrc);
    return rc;
}
