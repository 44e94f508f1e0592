/*
 * subscriber.h — durable subscribers: cursors, deliveries, dead letters.
 *
 * A named subscriber follows the event log at least once (docs/SUBSCRIBERS.md
 * is the contract). Its state lives in the store, written in the writer's
 * transactions like everything else:
 *
 *   cursors  "c" name                  -> the cursor record (config, ack floor,
 *                                          delivered seq, counters, times;
 *                                          format 2: then a tail of tagged
 *                                          settings, subscriber_record.h)
 *            "f" name 0x00 seq(8, BE)  -> an in-flight delivery above the floor
 *            "r" name 0x00 seq(8, BE)  -> an in-flight replay of a dead letter
 *            "m" name 0x00 seq(8, BE)  -> empty: that dead letter is marked for
 *                                          replay (what a fetch walks)
 *            "g" name                  -> its partitions, when it has some
 *                                          (log/subscriber_partition.h)
 *   dlq      name 0x00 seq(8, BE)      -> a dead letter (parked event)
 *
 * In-flight values: attempts (u32), deliver_after_ms (i64), error text,
 * then optionally the consumer instance holding it (u8 length 1-64, the
 * id; absent in records written before instances and for fetches without
 * one). Dead-letter values: attempts (u32), parked_ms (i64), replaying
 * (u8), error text. All integers big-endian; every record is length-checked when
 * read (a bad one is TALLY_corrupt_record).
 *
 * The ack floor is the highest seq at or below which every event was acked
 * or parked: it is the seq before the first "f" record, or the delivered
 * seq when there is none. It only moves forward.
 *
 * Every function that changes something checks everything first and writes
 * after, so a refusal (subscriber_not_found, seq_not_in_flight, ...) leaves
 * the transaction as it was; faults are remembered in the transaction.
 */
#ifndef TALLY_LOG_SUBSCRIBER_H
#define TALLY_LOG_SUBSCRIBER_H

#include "common/bytes.h"
#include "common/limits.h"
#include "log/store.h"

#include <stdbool.h>
#include <stdint.h>

/* Which new events a subscriber is handed (docs/SUBSCRIBERS.md,
 * "Filters"): an event passes when each part that is set matches; an
 * empty filter passes every event. Events that do not pass are acked past
 * by the fetch that reaches them. */
typedef struct sub_filter {
    uint32_t type_count; /* event types (wire names); 0: any */
    char types[TALLY_SUB_FILTER_TYPES_MAX][TALLY_SUB_FILTER_TYPE_BYTES_MAX + 1];
    uint8_t kinds; /* entity kinds, bit (kind - 1) of log_entity_kind; 0: any */
    char subject_glob[TALLY_SUB_FILTER_GLOB_BYTES_MAX + 1]; /* fnmatch(3) over the
                                                             * entity's subject; "": any */
} sub_filter;

typedef struct sub_config {
    uint32_t max_deliver;     /* deliveries of one event before it is parked */
    uint32_t ack_wait_ms;     /* redelivery delay without a backoff list */
    uint32_t max_ack_pending; /* in-flight deliveries at most */
    uint32_t backoff_count;   /* 0 = use ack_wait_ms */
    uint32_t backoff_ms[TALLY_SUB_BACKOFF_STEPS_MAX];
    /* The rest is stored in the cursor record's tail (format 2), only when
     * set: records of format 1 read with all of it empty. */
    sub_filter filter;
    uint64_t inactive_expiry_ms; /* removed after this long without activity; 0: never */
    char contact[TALLY_SUB_OWNER_BYTES_MAX + 1];     /* who owns its dead letters; "" none */
    char alert_route[TALLY_SUB_OWNER_BYTES_MAX + 1]; /* where their alerts go; "" none */
} sub_config;

/* Defaults of docs/SUBSCRIBERS.md. */
void sub_config_default(sub_config *cfg);

/* TALLY_ok or TALLY_invalid_argument: an owner text (contact, alert
 * route) is 1-128 bytes of printable ASCII without '"' and '\\' (they are
 * metric label values as they are). */
int sub_owner_text_check(tally_str text);

/* Whether the event ev passes the filter f. */
struct log_event;
bool sub_filter_pass(const sub_filter *f, const struct log_event *ev);

/* A change of settings (sub_update): each has_ member says its value in
 * config is the new one; the others are kept. */
typedef struct sub_change {
    bool has_max_deliver, has_ack_wait_ms, has_max_ack_pending, has_backoff, has_filter_types,
        has_filter_kinds, has_filter_subject, has_inactive_expiry, has_contact, has_alert_route;
    sub_config config;
} sub_change;

typedef enum sub_start_kind {
    SUB_START_BEGINNING, /* every event in the log */
    SUB_START_NOW,       /* events committed after the create */
    SUB_START_SEQ,       /* from seq on */
    SUB_START_TIME,      /* from the first event with time_ms >= time_ms */
} sub_start_kind;

typedef struct sub_start {
    sub_start_kind kind;
    uint64_t seq;
    int64_t time_ms;
} sub_start;

/* The cursor record. */
typedef struct sub_state {
    char name[TALLY_SUBSCRIBER_NAME_BYTES_MAX + 1];
    sub_config config;
    uint64_t ack_floor;
    uint64_t delivered_seq;
    uint32_t in_flight;    /* "f" and "r" records */
    uint32_t replaying;    /* dead letters marked for replay, not yet fetched */
    uint64_t dead_letters; /* dlq entries */
    uint64_t redelivered;  /* deliveries after the first, in total */
    int64_t created_ms;
    int64_t updated_ms;
    /* The last fetch, ack, park or update (with inactive_expiry_ms; the
     * created time in records without it). */
    int64_t active_ms;
} sub_state;

typedef struct sub_delivery {
    uint64_t seq;
    uint32_t attempt; /* 1 on the first delivery */
    bool replay;      /* a dead letter delivered again */
} sub_delivery;

typedef struct sub_dead_letter {
    uint64_t seq;
    uint32_t attempts;
    int64_t parked_ms;
    bool replaying;
    tally_str error; /* points into the map: valid until the txn ends */
} sub_dead_letter;

/* TALLY_ok or TALLY_invalid_subscriber_name (1-64 bytes of A-Z a-z 0-9 . _ - :). */
int sub_name_check(tally_str name);

/* TALLY_ok or TALLY_invalid_subscriber_name: an instance id is 1-64 bytes of
 * A-Z a-z 0-9 . _ - (unlike a name, no ':'). */
int sub_instance_check(tally_str instance);

/* Create a subscriber, or find the identical one (*created false). Returns
 * TALLY_ok, invalid_subscriber_name, invalid_argument (a config out of
 * range), subscriber_exists_with_different_config, too_many_subscribers,
 * seq_beyond_head (SUB_START_SEQ past head + 1), or a fault. */
int sub_create(store_txn *t, tally_str name, const sub_start *start, const sub_config *cfg,
               int64_t now_ms, bool *created, sub_state *out);

/* Change a subscriber's settings, keeping its cursor, in-flight events and
 * dead letters: TALLY_ok, subscriber_not_found, invalid_argument (a
 * setting out of range), or a fault. A new filter applies to events not
 * yet delivered (nor queued for a partition's holder); a new ack wait or
 * backoff to leases and delays set from now on. The partitions set at
 * sub_create are kept: no change names them. */
int sub_update(store_txn *t, tally_str name, const sub_change *change, int64_t now_ms,
               sub_state *after);

/* An in-flight event as sub_flights shows it: before it is parked. */
typedef struct sub_flight {
    uint64_t seq;
    bool replay;              /* a dead letter delivered again */
    uint32_t attempts;        /* deliveries so far (0: queued for its partition) */
    int64_t deliver_after_ms; /* its lease's end, or when it is due again */
    tally_str error;          /* the last nak's reason; points into the map */
    tally_str instance;       /* its holder (len 0: none); points into the map */
} sub_flight;

/* Call fn for up to limit in-flight events of name in seq order (replays
 * after the rest). TALLY_ok, subscriber_not_found, or a fault. */
typedef int (*sub_flight_fn)(const sub_flight *f, void *ctx);
int sub_flights(store_txn *t, tally_str name, uint32_t limit, sub_flight_fn fn, void *ctx);

/* Inactivity expiry: remove up to max subscribers whose inactive_expiry_ms
 * has passed since their last activity at now_ms, calling fn with each
 * just before its removal (fn appends its event; non-zero stops and is
 * returned). *removed counts them. */
typedef int (*sub_expired_fn)(const sub_state *s, void *ctx);
int sub_expire_inactive(store_txn *t, int64_t now_ms, uint32_t max, sub_expired_fn fn, void *ctx,
                        uint32_t *removed);

/* The cursor record: TALLY_ok, subscriber_not_found, or a fault. */
int sub_get(store_txn *t, tally_str name, sub_state *out);

/* Remove a subscriber with its in-flight records and dead letters. */
int sub_delete(store_txn *t, tally_str name);

/* Call fn for every subscriber in name order (fn returns non-zero to stop;
 * that value is returned). */
typedef int (*sub_list_fn)(const sub_state *s, void *ctx);
int sub_list(store_txn *t, sub_list_fn fn, void *ctx);

/* Deliver up to max events (docs/SUBSCRIBERS.md, "Delivery rules"): replays
 * first, then due redeliveries, then new events; at most
 * TALLY_SUB_FETCH_BYTES_MAX bytes of events but at least one (an event
 * that does not fit stays for the next fetch: not leased, not delivered). Each delivery is leased
 * to instance (a consumer instance's id, 1-64 bytes like a name; len 0:
 * none) until it is acked, parked, or falls due again; a due event is
 * delivered to whichever instance fetches. restart makes the in-flight
 * events that instance holds due now (with no instance: every in-flight
 * event). out gets *count deliveries; *next_due_ms the earliest time a
 * not-yet-due in-flight event falls due (INT64_MAX: none); *after the
 * cursor record after the fetch. With a filter, the new events it does
 * not pass are acked past (the delivered seq moves over them). Nothing is
 * written when nothing is delivered, skipped, queued or parked, except the
 * last activity of a subscriber with an inactive expiry, at most once an
 * eighth of it. TALLY_invalid_argument for max or instance out of range.
 * A subscriber with partitions (subscriber_partition.h) needs an instance
 * (else TALLY_missing_field): the fetch shares the partitions out and
 * writes their leases, hands out events of the instance's partitions
 * only, never an entity's event while an earlier one of it is in flight,
 * and queues the new events of other partitions that pass the filter as
 * in-flight records with no attempt yet (due now, for their holder). */
int sub_fetch(store_txn *t, tally_str name, uint32_t max, bool restart, tally_str instance,
              int64_t now_ms, sub_delivery *out, uint32_t *count, int64_t *next_due_ms,
              sub_state *after);

/* Acknowledge: every event <= upto (0: none) and each seq of done.
 * seq_beyond_head when upto > head; seq_not_delivered when a done seq was
 * never handed out. Seqs no longer in flight are ignored. *acked counts the
 * in-flight records removed. A cumulative upto on a subscriber with
 * partitions is TALLY_invalid_argument (it would pass other instances'
 * events). */
int sub_ack(store_txn *t, tally_str name, uint64_t upto, const uint64_t *done,
            uint32_t done_count, int64_t now_ms, uint32_t *acked, sub_state *after);

/* Retry later: the in-flight event seq falls due at now + delay_ms (or the
 * backoff rule without has_delay); error is kept as its last error.
 * seq_not_in_flight when it is not in flight. */
int sub_nak(store_txn *t, tally_str name, uint64_t seq, bool has_delay, uint32_t delay_ms,
            tally_str error, int64_t now_ms, uint32_t *attempt, int64_t *deliver_after_ms);

/* The consumer still works on the count events seqs (JetStream's "in
 * progress", +WPI): each one in flight, and held by instance when instance
 * is not empty, is due again no sooner than now + the ack wait, its lease
 * extended without an attempt. Others (acked, parked, held by another
 * instance) are skipped. *extended: how many were; *deliver_after_ms: the
 * new end of their lease. With instance, its partitions' leases (if the
 * subscriber has partitions) are extended as far. */
int sub_progress(store_txn *t, tally_str name, const uint64_t *seqs, uint32_t count,
                 tally_str instance, int64_t now_ms, uint32_t *extended,
                 int64_t *deliver_after_ms);

/* Park the in-flight event seq in the dlq with reason. Parking a dead letter
 * again is ok; anything else not in flight is seq_not_in_flight. */
int sub_park(store_txn *t, tally_str name, uint64_t seq, tally_str reason, int64_t now_ms,
             sub_state *after);

/* Dead letters of a subscriber with seq > after_seq, up to limit, in seq
 * order; *next is the seq to pass as after_seq for the next page, 0 when
 * there are no more. */
typedef int (*sub_dead_letter_fn)(const sub_dead_letter *d, void *ctx);
int sub_dlq_list(store_txn *t, tally_str name, uint64_t after_seq, uint32_t limit,
                 sub_dead_letter_fn fn, void *ctx, uint64_t *next);

/* Mark dead letters for replay: seq, or all when !one. *replaying gets the
 * subscriber's count of marked dead letters after the call.
 * dead_letter_not_found when seq is not parked. */
int sub_dlq_replay(store_txn *t, tally_str name, bool one, uint64_t seq, int64_t now_ms,
                   uint32_t *replaying);

/* Remove a dead letter: TALLY_ok or dead_letter_not_found. */
int sub_dlq_discard(store_txn *t, tally_str name, uint64_t seq, int64_t now_ms);

/* Retention of dead letters (tallyd --dlq-retention-s): one bounded pass
 * over the dlq of every subscriber, from *pos on (len 0: the start; the
 * pass leaves where the next one starts, 0 again after the end). It reads
 * at most 16 × max entries and removes at most max dead letters parked
 * before before_ms and not marked for replay (a replay asked for is kept
 * until it is delivered), calling fn for each just before its removal (fn
 * appends its event; non-zero stops and is returned). The subscriber's
 * dead-letter count follows. *removed counts them. */
typedef struct sub_dlq_position {
    uint8_t key[TALLY_SUBSCRIBER_NAME_BYTES_MAX + 1 + 8];
    size_t len;
} sub_dlq_position;
typedef int (*sub_dlq_expired_fn)(tally_str name, const sub_dead_letter *d, void *ctx);
int sub_dlq_expire(store_txn *t, int64_t before_ms, uint32_t max, sub_dlq_position *pos,
                   sub_dlq_expired_fn fn, void *ctx, uint32_t *removed);

/* The earliest time any of name's dead letters was parked (*parked_ms 0
 * when it has none): one pass over its dead letters, in a read-only
 * transaction of the caller. TALLY_ok or a fault. */
int sub_dlq_oldest_parked(store_txn *t, tally_str name, int64_t *parked_ms);

/* Told of every event parked as a dead letter (by sub_fetch after its
 * last delivery, or by sub_park), inside the transaction that parks it;
 * NULL (the default) for none. tallyd logs them once the commit is done. */
typedef void (*sub_park_observer)(const char *name, uint64_t seq, uint32_t attempts,
                                  tally_str reason);
void sub_park_observer_set(sub_park_observer fn);

/* Lag of a subscriber: head, pending (head - ack floor) and the age in
 * seconds of the oldest unacked event (the one after the floor; 0 when
 * nothing is pending). */
typedef struct sub_metrics {
    uint64_t head_seq;
    uint64_t pending;
    int64_t oldest_unacked_age_s;
} sub_metrics;
int sub_metrics_get(store_txn *t, const sub_state *s, int64_t now_ms, sub_metrics *out);

/* For tally-recon and the invariants: call fn for every in-flight record
 * and dead letter of every subscriber (kind 'f', 'r' or 'd'). */
typedef int (*sub_record_fn)(char kind, tally_str name, uint64_t seq, void *ctx);
int sub_records(store_txn *t, sub_record_fn fn, void *ctx);

#endif
