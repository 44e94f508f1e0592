/*
 * table.c — linear-probing hash table with tombstones (see table.h).
 */
#include "common/table.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

/* An entry is key_len (1 byte) | key | padding | value, the value at an
 * offset aligned for any type a caller stores (max_align_t). */
#define VALUE_ALIGN _Alignof(max_align_t)

static size_t value_offset(size_t key_len)
{
    return (1 + key_len + VALUE_ALIGN - 1) & ~(VALUE_ALIGN - 1);
}

typedef struct slot {
    uint8_t *entry; /* see above; NULL empty */
    bool tomb;
} slot;

struct table {
    slot *slots;
    size_t capacity; /* power of two */
    size_t used;     /* live + tombstones */
    size_t count;
    size_t value_bytes;
};

static uint64_t hash_bytes(const void *key, size_t len)
{
    const uint8_t *p = key;
    uint64_t h = UINT64_C(1469598103934665603); /* FNV-1a */
    for (size_t i = 0; i < len; i++)
        h = (h ^ p[i]) * UINT64_C(1099511628211);
    return h ^ (h >> 29);
}

table *table_create(size_t value_bytes)
{
    table *t = calloc(1, sizeof(*t));
    if (!t)
        return NULL;
    t->capacity = 64;
    t->value_bytes = value_bytes;
    t->slots = calloc(t->capacity, sizeof(slot));
    if (!t->slots) {
        free(t);
        return NULL;
    }
    return t;
}

void table_destroy(table *t)
{
    if (!t)
        return;
    for (size_t i = 0; i < t->capacity; i++)
        free(t->slots[i].entry);
    free(t->slots);
    free(t);
}

static bool entry_matches(const uint8_t *e, const void *key, size_t len)
{
    return e[0] == len && memcmp(e + 1, key, len) == 0;
}

static slot *probe(const table *t, const void *key, size_t len, slot **first_free)
{
    size_t mask = t->capacity - 1;
    *first_free = NULL;
    for (size_t i = hash_bytes(key, len) & mask;; i = (i + 1) & mask) {
        slot *s = &t->slots[i];
        if (s->entry == NULL) {
            if (!s->tomb) {
                if (!*first_free)
                    *first_free = s;
                return NULL;
            }
            if (!*first_free)
                *first_free = s;
        } else if (entry_matches(s->entry, key, len)) {
            return s;
        }
    }
}

void *table_find(const table *t, const void *key, size_t len)
{
    if (len == 0 || len > TABLE_KEY_BYTES_MAX)
        return NULL;
    slot *free_slot;
    slot *s = probe(t, key, len, &free_slot);
    return s ? s->entry + value_offset(s->entry[0]) : NULL;
}

static int grow(table *t)
{
    size_t old_cap = t->capacity;
    slot *old = t->slots;
    size_t cap = t->count * 4 > old_cap ? old_cap * 2 : old_cap;
    slot *slots = calloc(cap, sizeof(slot));
    if (!slots)
        return -1;
    t->slots = slots;
    t->capacity = cap;
    t->used = t->count;
    for (size_t i = 0; i < old_cap; i++) {
        if (!old[i].entry)
            continue;
        size_t mask = cap - 1, j = hash_bytes(old[i].entry + 1, old[i].entry[0]) & mask;
        while (slots[j].entry)
            j = (j + 1) & mask;
        slots[j].entry = old[i].entry;
    }
    free(old);
    return 0;
}

void *table_upsert(table *t, const void *key, size_t len, int *inserted)
{
    *inserted = 0;
    if (len == 0 || len > TABLE_KEY_BYTES_MAX)
        return NULL;
    if ((t->used + 1) * 4 > t->capacity * 3 && grow(t) != 0)
        return NULL;
    slot *free_slot;
    slot *s = probe(t, key, len, &free_slot);
    if (s)
        return s->entry + value_offset(s->entry[0]);
    uint8_t *e = malloc(value_offset(len) + t->value_bytes); /* malloc aligns for max_align_t */
    if (!e)
        return NULL;
    memset(e, 0, value_offset(len) + t->value_bytes);
    e[0] = (uint8_t)len;
    memcpy(e + 1, key, len);
    if (!free_slot->tomb)
        t->used++;
    free_slot->entry = e;
    free_slot->tomb = false;
    t->count++;
    *inserted = 1;
    return e + value_offset(len);
}

int table_remove(table *t, const void *key, size_t len)
{
    if (len == 0 || len > TABLE_KEY_BYTES_MAX)
        return 0;
    slot *free_slot;
    slot *s = probe(t, key, len, &free_slot);
    if (!s)
        return 0;
    free(s->entry);
    s->entry = NULL;
    s->tomb = true;
    t->count--;
    return 1;
}

size_t table_count(const table *t) { return t->count; }

int table_each(table *t, int (*fn)(const void *key, size_t key_len, void *value, void *ctx),
               void *ctx)
{
    for (size_t i = 0; i < t->capacity; i++) {
        uint8_t *e = t->slots[i].entry;
        if (!e)
            continue;
        int rc = fn(e + 1, e[0], e + value_offset(e[0]), ctx);
        if (rc)
            return rc;
    }
    return 0;
}
