/*
 * table.h — an open-addressing hash table keyed by short byte strings, for
 * in-memory folds (the invariant checker rebuilds accounts, holds and
 * entitlements from the log). Values are fixed-size blobs owned by the
 * table. Not thread-safe.
 */
#ifndef TALLY_TABLE_H
#define TALLY_TABLE_H

#include <stddef.h>
#include <stdint.h>

#define TABLE_KEY_BYTES_MAX 255

typedef struct table table;

/* A table whose values are value_bytes long. NULL when out of memory. */
table *table_create(size_t value_bytes);
void table_destroy(table *t);

/* The value stored under key, or NULL. */
void *table_find(const table *t, const void *key, size_t key_len);

/* The value under key, inserted zeroed if absent (*inserted tells which).
 * NULL when out of memory or key_len is 0 or > TABLE_KEY_BYTES_MAX. */
void *table_upsert(table *t, const void *key, size_t key_len, int *inserted);

/* Remove key; returns 1 if it was present. */
int table_remove(table *t, const void *key, size_t key_len);

size_t table_count(const table *t);

/* Visit every entry; fn returns non-zero to stop (returned). */
int table_each(table *t, int (*fn)(const void *key, size_t key_len, void *value, void *ctx),
               void *ctx);

#endif
