/*
 * subscriber_partition.h — ordered partitions of a durable subscriber
 * (docs/SUBSCRIBERS.md, "Partitions"): a subscriber created with
 * partitions = N > 1 spreads events by entity over N partitions by a
 * stable hash; each partition is leased to at most one consumer instance
 * at a time, and the instances that fetch share the partitions out.
 *
 * Stored beside the cursor, in the cursors database:
 *
 *   "g" name -> version (u8 1), partitions (u32 BE), then per partition
 *               its lease end (i64 BE, 0 = free) and holder (u8 length
 *               0-64, the id), then the member count (u8) and per member
 *               (an instance seen fetching) its expiry (i64 BE) and id
 *               (u8 length 1-64, the id).
 *
 * A subscriber without the record has one partition: today's delivery,
 * unchanged (every record written before partitions reads so). Times are
 * the command's (log time), never the node's clock.
 */
#ifndef TALLY_LOG_SUBSCRIBER_PARTITION_H
#define TALLY_LOG_SUBSCRIBER_PARTITION_H

#include "common/bytes.h"
#include "common/limits.h"
#include "common/log_event.h"
#include "log/store.h"

#include <stdbool.h>
#include <stdint.h>

/* A partition's lease, or a member instance: who and until when. */
typedef struct sub_partition_lease {
    int64_t until_ms; /* the lease (or membership) ends then; 0 = free */
    uint8_t holder_len;
    char holder[TALLY_SUB_INSTANCE_BYTES_MAX];
} sub_partition_lease;

typedef struct sub_partitions {
    uint32_t count; /* 1 = not partitioned (no record) */
    sub_partition_lease lease[TALLY_SUB_PARTITIONS_MAX];
    uint32_t member_count;
    sub_partition_lease members[TALLY_SUB_PARTITION_MEMBERS_MAX];
} sub_partitions;

/* The partitions of name (count 1, nothing leased, when it has none).
 * TALLY_ok, corrupt_record, or a fault. */
int sub_partitions_load(store_txn *t, tally_str name, sub_partitions *out);

/* At sub_create: a new subscriber (created) gets count partitions (a
 * record only when count > 1); an existing one must have count already,
 * else TALLY_subscriber_exists_with_different_config. TALLY_invalid_argument
 * for count outside 1..TALLY_SUB_PARTITIONS_MAX. */
int sub_partitions_create(store_txn *t, tally_str name, uint32_t count, bool created);

/* Remove the record (none is fine). */
int sub_partitions_delete(store_txn *t, tally_str name);

/* The fetch of instance at now_ms: it becomes (or stays) a member until
 * now + lease_ms, its partitions are leased again until then, and the
 * partitions are shared out: with m live members, each holds N / m, and
 * the first N % m members in id order one more; an instance holding more
 * than its share frees its highest ones, and one holding fewer takes the
 * lowest free or expired ones. Deterministic: a function of the record,
 * the instance and the time only. */
void sub_partitions_claim(sub_partitions *g, tally_str instance, int64_t now_ms,
                          uint32_t lease_ms);

/* sub_progress of instance: its partitions and membership are leased
 * again until now + lease_ms (nothing else changes). Written only when
 * partitioned and instance holds something or is a member. */
int sub_partitions_renew(store_txn *t, tally_str name, tally_str instance, int64_t now_ms,
                         uint32_t lease_ms);

int sub_partitions_save(store_txn *t, tally_str name, const sub_partitions *g);

/* Whether instance holds partition index at now_ms. */
bool sub_partition_held(const sub_partitions *g, uint32_t index, tally_str instance,
                        int64_t now_ms);

/* The stable hash of an entity (FNV-1a 64 over its kind byte and its
 * identity, docs/SUBSCRIBERS.md) and so its partition: hash % count. */
uint64_t sub_entity_hash(const log_entity *e);

/* The entity hash of the event at seq and its partition among count,
 * decoded in zone (the caller's, cleared here for each event). An event
 * gone (retention) gets a hash of its seq. TALLY_ok, corrupt_record, or a
 * fault. */
int sub_event_partition(store_txn *t, uint64_t seq, uint32_t count, msgpack_zone *zone,
                        uint64_t *hash, uint32_t *partition);

/* A set of entity hashes (entities with an earlier event in flight). */
typedef struct sub_entity_set {
    uint64_t *slots;
    size_t mask; /* capacity - 1, a power of two */
    size_t count;
} sub_entity_set;
int sub_entity_set_init(sub_entity_set *s, size_t capacity);
bool sub_entity_set_has(const sub_entity_set *s, uint64_t hash);
void sub_entity_set_add(sub_entity_set *s, uint64_t hash);
void sub_entity_set_free(sub_entity_set *s);

/* For tally-recon: TALLY_ok when g is sound (count in 2..max, holders
 * and members valid instance ids, counts in range). */
int sub_partitions_check(const sub_partitions *g);

/* Call fn for each partitions record (tally-recon): the subscriber's
 * name and its decoded record; a record that does not decode is passed
 * with ok false. */
typedef int (*sub_partitions_fn)(tally_str name, const sub_partitions *g, bool ok, void *ctx);
int sub_partitions_each(store_txn *t, sub_partitions_fn fn, void *ctx);

#endif
