/*
 * subscriber_record.h — the stored records of durable subscribers, shared
 * by log/subscriber.c and its neighbours (the operations) and
 * log/subscriber_record.c (their encoding and access): a cursor per
 * subscriber, in-flight records and dead letters keyed by (kind, name,
 * seq), the walks over them and the ack floor. Internal to log/.
 */
#ifndef TALLY_LOG_SUBSCRIBER_RECORD_H
#define TALLY_LOG_SUBSCRIBER_RECORD_H

#include "log/store.h"
#include "log/subscriber.h"

/* Internal to these files: short names are theirs alone. */
#define RECORD_VERSION 1
/* Format 2: format 1's bytes (with the byte 2 first), then a tail of
 * entries tag (u8), length (u16), value, each only when set (CURSOR_TAG_*,
 * subscriber.h). A new field is a new tag. */
#define RECORD_VERSION_TAIL 2
#define KEY_BYTES_MAX (1 + TALLY_SUBSCRIBER_NAME_BYTES_MAX + 1 + 8)
#define CURSOR_VALUE_BYTES (1 + 4 * 4 + 4 * TALLY_SUB_BACKOFF_STEPS_MAX + 8 * 2 + 4 * 2 + 8 * 2 + 8 * 2)
#define CURSOR_TAIL_BYTES_MAX 2048
#define CURSOR_VALUE_BYTES_MAX (CURSOR_VALUE_BYTES + CURSOR_TAIL_BYTES_MAX)
enum {
    CURSOR_TAG_INACTIVE_EXPIRY = 1, /* u64 ms */
    CURSOR_TAG_ACTIVE = 2,          /* i64 ms: the last activity */
    CURSOR_TAG_TYPES = 3,           /* u8 count, then each: u8 length, the name */
    CURSOR_TAG_KINDS = 4,           /* u8 bit set */
    CURSOR_TAG_SUBJECT_GLOB = 5,    /* the glob's bytes */
    CURSOR_TAG_CONTACT = 6,         /* the text's bytes */
    CURSOR_TAG_ALERT_ROUTE = 7,     /* the text's bytes */
};
#define FLIGHT_VALUE_HEAD (4 + 8 + 2)
#define DEAD_VALUE_HEAD (4 + 8 + 1 + 2)
/* An in-flight record may end with its holder: instance length (1) and id. */
#define VALUE_BYTES_MAX \
    (FLIGHT_VALUE_HEAD + TALLY_SUB_ERROR_BYTES_MAX + 1 + TALLY_SUB_INSTANCE_BYTES_MAX)

/* 'm' name 0x00 seq -> empty: the dead letter seq is marked for replay (the
 * index a fetch walks, so it never reads the unmarked rest of the dlq). */
enum { KIND_CURSOR = 'c', KIND_FLIGHT = 'f', KIND_REPLAY = 'r', KIND_MARK = 'm' };

/* An in-flight record or a dead letter (one layout with an optional flag).
 * An in-flight record names the consumer instance that holds it (its
 * lease); records written before instances existed, and deliveries to a
 * fetch without an instance, have none (instance_len 0). */
typedef struct sub_record {
    uint32_t attempts;
    int64_t when_ms; /* deliver_after (in flight) or parked (dead letter) */
    bool replaying;  /* dead letters only */
    uint16_t error_len;
    char error[TALLY_SUB_ERROR_BYTES_MAX];
    uint8_t instance_len; /* in flight only; 0 = no instance */
    char instance[TALLY_SUB_INSTANCE_BYTES_MAX];
} sub_record;

/* Call fn(key, value) for each key of db from start on while its first
 * prefix_len bytes equal start's (and, key_len != 0, it is key_len long),
 * until fn returns non-zero (returned). Values are valid during the call. */
typedef int (*sub_entry_fn)(const MDB_val *key, const MDB_val *val, void *ctx);

/* Call fn for each record of (kind, name) with seq >= from_seq, in seq
 * order, until fn returns non-zero (returned) or the records end. */
typedef int (*sub_seq_fn)(uint64_t seq, const MDB_val *v, void *ctx);

/* A growable list of seqs (what an operation will touch). */
typedef struct sub_seq_list {
    uint64_t *seqs;
    size_t count, capacity;
    uint64_t upto; /* collect seqs <= upto */
} sub_seq_list;

/* The record layer (subscriber_record.c, where each is described):
 * configs, keys, cursors, records, walks, the ack floor, redelivery delay. */
int sub_seqs_collect(store_txn *t, char kind, tally_str name, uint64_t upto, sub_seq_list *l);
int sub_config_check(const sub_config *c);
bool sub_config_equal(const sub_config *a, const sub_config *b);
int sub_cursor_decode(const MDB_val *v, tally_str name, sub_state *s);
size_t sub_cursor_key(uint8_t *k, tally_str name);
size_t sub_seq_key(uint8_t *k, char kind, tally_str name, uint64_t seq);
int sub_cursor_load(store_txn *t, tally_str name, sub_state *s);
int sub_cursor_save(store_txn *t, const sub_state *s);
int sub_each_with_prefix(store_txn *t, store_db db, const uint8_t *start, size_t start_len,
                         size_t prefix_len, size_t key_len, sub_entry_fn fn, void *ctx);
int sub_floor_update(store_txn *t, sub_state *s);
int sub_record_decode(const MDB_val *v, bool dead, sub_record *r);
int sub_record_delete(store_txn *t, char kind, tally_str name, uint64_t seq);
int sub_record_load(store_txn *t, char kind, tally_str name, uint64_t seq, sub_record *r);
int sub_record_save(store_txn *t, char kind, tally_str name, uint64_t seq, const sub_record *r);
void sub_record_set_error(sub_record *r, tally_str text);
void sub_record_set_instance(sub_record *r, tally_str instance);
bool sub_record_held_by(const sub_record *r, tally_str instance);
int sub_records_each(store_txn *t, char kind, tally_str name, uint64_t from_seq,
                     sub_seq_fn fn, void *ctx);
uint32_t sub_redelivery_delay(const sub_config *c, uint32_t attempt);
/* Replay marks (subscriber_dlq.c): set, clear (a missing mark is fine:
 * stores from before the marks), and the repair that marks what a store
 * from before them has replaying without a mark. */
int sub_mark_set(store_txn *t, tally_str name, uint64_t seq);
int sub_mark_clear(store_txn *t, tally_str name, uint64_t seq);
int sub_marks_repair(store_txn *t, tally_str name);
int sub_seq_collect_one(uint64_t seq, const MDB_val *v, void *ctx);
/* The operations' shared steps (subscriber.c): load the event at seq and
 * call fn with it (log_event_load's returns); park the in-flight record
 * r of kind at seq with reason (s's counts follow; the park observer is
 * told). */
int sub_event_visit(store_txn *t, uint64_t seq,
                    void (*fn)(const struct log_event *ev, void *ctx), void *ctx);
int sub_park_record(store_txn *t, sub_state *s, char kind, uint64_t seq, const sub_record *r,
                    tally_str reason, int64_t now_ms);

#endif
