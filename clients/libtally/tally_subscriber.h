/*
 * tally_subscriber.h — libtally's durable subscribers (sub_create,
 * sub_fetch, sub_ack, sub_nak, sub_progress, sub_park, the run loop) and
 * their dead letters (dlq_list, dlq_replay, dlq_discard); part of
 * <tally/tally.h>, which includes it at its end (installed beside it).
 * docs/SUBSCRIBERS.md.
 */
#ifndef TALLY_SUBSCRIBER_H
#define TALLY_SUBSCRIBER_H

#include "tally.h"

/* ---- durable subscribers (docs/SUBSCRIBERS.md) ----
 * A durable subscriber is a named cursor kept by tallyd: it remembers the
 * ack floor, counts deliveries, redelivers what was not acknowledged and
 * parks poison events in the dead-letter queue (dlq). Delivery is at least
 * once: an event may come again after a crash, a lost reply or a retry
 * answer, so handlers must be idempotent (entity_version and the event id
 * help). The subscriber ops carry no idempotency key: each is idempotent by
 * itself, so the library retries them like reads.
 *
 * Return codes of the functions below, besides those at the top of this
 * file: TALLY_invalid_subscriber_name (not 1-64 bytes of A-Z a-z 0-9 . _ - :),
 * TALLY_subscriber_not_found, TALLY_subscriber_exists_with_different_config,
 * TALLY_too_many_subscribers, TALLY_start_positions_are_mutually_exclusive,
 * TALLY_seq_beyond_head, TALLY_seq_not_delivered, TALLY_seq_not_in_flight,
 * TALLY_dead_letter_not_found, as the server answers them; and
 * TALLY_invalid_argument for a NULL pointer, a name longer than 64 bytes or
 * an option out of range (nothing sent). */

#define TALLY_CLIENT_SUBSCRIBER_NAME_BYTES_MAX 64
#define TALLY_CLIENT_SUB_BACKOFF_STEPS_MAX 8
#define TALLY_CLIENT_SUB_ERROR_BYTES_MAX 256 /* a retry's error text, a park reason */
#define TALLY_CLIENT_SUB_FETCH_MAX 1000      /* events per fetch */
#define TALLY_CLIENT_SUB_FETCH_DEFAULT 100
#define TALLY_CLIENT_SUB_WAIT_MS_DEFAULT 5000 /* long-poll of a fetch */
#define TALLY_CLIENT_SUB_FILTER_TYPES_BYTES_MAX 528
#define TALLY_CLIENT_SUB_SHOW_IN_FLIGHT_MAX 100 /* in-flight events sub_get shows */

/* The run loop's sub_progress interval when the subscriber's ack wait
 * cannot be read (else a third of it). */
#define TALLY_CLIENT_SUB_PROGRESS_MS_DEFAULT 1000
#define TALLY_CLIENT_SUB_WAIT_MS_MAX 30000
#define TALLY_CLIENT_SUB_FAILURES_DEFAULT 10 /* failed round trips in a row before giving up */
#define TALLY_CLIENT_SUB_FAILURES_MAX 1000
#define TALLY_CLIENT_SUB_INSTANCE_BYTES_MAX 64 /* a consumer instance's id */

typedef enum tally_start {
    TALLY_START_BEGINNING = 0, /* every event in the log */
    TALLY_START_NOW,           /* events committed after the subscriber was created */
    TALLY_START_SEQ,           /* from from_seq on */
    TALLY_START_TIME,          /* from the first event committed at or after from_time_ms */
} tally_start;

/* How to create a subscriber. Zero means the server's default. */
typedef struct tally_subscriber_options {
    tally_start start;
    uint64_t from_seq;        /* TALLY_START_SEQ: first seq to deliver (<= head + 1) */
    int64_t from_time_ms;     /* TALLY_START_TIME */
    uint32_t max_deliver;     /* deliveries of one event before it is parked (5) */
    uint32_t ack_wait_ms;     /* redelivery of an unacknowledged event after (30000) */
    uint32_t max_ack_pending; /* events in flight at most (1000) */
    uint32_t backoff_count;   /* 0..8: redelivery delays by attempt instead of ack_wait_ms */
    uint32_t backoff_ms[TALLY_CLIENT_SUB_BACKOFF_STEPS_MAX];
    uint32_t partitions;      /* ordered partitions by entity, 1..64 (0 or 1: none); each is
                                 held by one instance at a time (docs/SUBSCRIBERS.md,
                                 "Partitions"): run one handle per instance, each with
                                 its own tally_run_options.instance */
    const char *filter_types; /* NULL or "": every type; else the server's filter
                                 (docs/SUBSCRIBERS.md, "Filters"): comma-separated
                                 types, "x.*" a prefix, at most 16 */
} tally_subscriber_options;

/* The server's defaults of the settings above left 0. */
#define TALLY_CLIENT_SUB_MAX_DELIVER_DEFAULT 5
#define TALLY_CLIENT_SUB_ACK_WAIT_MS_DEFAULT 30000
#define TALLY_CLIENT_SUB_MAX_ACK_PENDING_DEFAULT 1000

/* A subscriber's metrics and settings (sub_get, sub_list, stats). */
typedef struct tally_subscriber_info {
    char name[TALLY_CLIENT_SUBSCRIBER_NAME_BYTES_MAX + 1];
    uint64_t ack_floor;     /* every event at or below it is acknowledged or parked */
    uint64_t delivered_seq; /* highest seq handed out */
    uint64_t pending;       /* head - ack_floor */
    uint64_t in_flight;     /* delivered, not yet acknowledged, parked or discarded */
    uint64_t oldest_unacked_age_s; /* age of the event at ack_floor + 1; 0 if none */
    uint64_t redelivered;   /* deliveries after the first, in total */
    uint64_t dead_letters;  /* events in the dlq now */
    uint64_t replaying;     /* dead letters waiting to be delivered again */
    uint32_t max_deliver, ack_wait_ms, max_ack_pending;
    uint32_t backoff_count;
    uint32_t backoff_ms[TALLY_CLIENT_SUB_BACKOFF_STEPS_MAX];
    int64_t created_ms, updated_ms;
    uint64_t oldest_dead_letter_age_s; /* since its oldest dead letter was parked; 0 if none */
    uint64_t last_fetch_age_s; /* since its last fetch (or since tallyd started, if it has not
                                  fetched since); 0 from a server before these fields */
    /* Its filter, inactivity limit and owner (docs/SUBSCRIBERS.md); "" and
     * 0 when unset, and from a server before them. The lists are
     * comma-separated. */
    char filter_types[TALLY_CLIENT_SUB_FILTER_TYPES_BYTES_MAX + 1];
    char filter_kinds[64 + 1];
    char filter_subject[128 + 1];
    uint64_t inactive_expiry_ms;
    char contact[128 + 1];     /* who owns its dead letters */
    char alert_route[128 + 1]; /* where their alerts go */
    uint32_t partitions;       /* 1: not partitioned (tally_subscriber_partitions) */
} tally_subscriber_info;

/* An in-flight event of a subscriber, before it is parked: delivered and
 * not acknowledged (held by an instance, or waiting to be delivered again). */
typedef struct tally_in_flight_event {
    uint64_t seq;
    bool replay;               /* a dead letter delivered again */
    uint32_t attempts;         /* deliveries so far */
    char last_error[256 + 1];  /* the last nak's reason; "" none */
    char holder[64 + 1];       /* the instance holding it; "" none */
    int64_t deliver_after_ms;  /* its lease's end, or when it is due again */
} tally_in_flight_event;

/* What sub_update changes (docs/SUBSCRIBERS.md, "Changing a subscriber"):
 * a zero number and a NULL text are left as they are; "" clears a text. */
typedef struct tally_subscriber_update_args {
    uint32_t max_deliver, ack_wait_ms, max_ack_pending;
    bool set_inactive_expiry;    /* with inactive_expiry_ms (0: never) */
    uint64_t inactive_expiry_ms;
    const char *filter_types, *filter_kinds, *filter_subject; /* comma-separated lists, a glob */
    const char *contact, *alert_route;                        /* the dead letters' owner */
    bool set_backoff;            /* with backoff_ms[0 .. backoff_count) (0: none) */
    uint32_t backoff_count;
    uint32_t backoff_ms[TALLY_CLIENT_SUB_BACKOFF_STEPS_MAX];
} tally_subscriber_update_args;

/* Change subscriber name's settings, keeping its cursor, in-flight events
 * and dead letters; *out (may be NULL) gets the subscriber after it.
 * TALLY_ok, TALLY_subscriber_not_found, TALLY_value_out_of_range, a
 * transport code. */
int tally_subscriber_update(tally_client *c, const char *name,
                            const tally_subscriber_update_args *u, tally_subscriber_info *out);

/* sub_get with its first in-flight events (at most 100 and capacity, in
 * seq order): *info and events[0 .. *count). TALLY_ok,
 * TALLY_subscriber_not_found, a transport code. */
int tally_subscriber_show(tally_client *c, const char *name, tally_subscriber_info *info,
                          tally_in_flight_event *events, size_t capacity, size_t *count);

/* A partition of a partitioned subscriber and the instance holding it. */
typedef struct tally_partition_holder {
    uint32_t partition;
    char holder[TALLY_CLIENT_SUB_INSTANCE_BYTES_MAX + 1]; /* "" = free (or its lease ran out) */
    int64_t lease_until_ms;                                /* 0 when free */
} tally_partition_holder;

#define TALLY_CLIENT_SUB_PARTITIONS_MAX 64

typedef struct tally_subscriber tally_subscriber;

/* Open the subscriber name on client c. With options, create it
 * (sub_create; creating an identical one again is fine, so every start of a
 * program may call this); with options NULL, use it as it is, or create it
 * with every default (from the beginning) when it does not exist. Each
 * handle is one consumer instance: what its fetches get is leased to it
 * (several processes on one name share the stream without duplicates),
 * and its first fetch asks the server to redeliver at once whatever its
 * instance id holds (restart) — with a stable id (tally_run_options
 * .instance) a process that crashed gets its unacked window back first;
 * with the generated one, that window falls due after the ack wait. *out
 * is set on success; free it with tally_subscriber_close. Returns TALLY_ok or a code above (e.g.
 * TALLY_subscriber_exists_with_different_config), a transport code, or
 * TALLY_out_of_memory. */
int tally_subscriber_open(tally_client *c, const char *name,
                          const tally_subscriber_options *options, tally_subscriber **out);
/* true when tally_subscriber_open created the subscriber. */
bool tally_subscriber_created(const tally_subscriber *s);
/* The consumer instance id the handle fetches with: a new UUIDv7 text per
 * handle, or the one a run was given (tally_run_options.instance). Valid
 * until the handle is closed or the next run. */
const char *tally_subscriber_instance(const tally_subscriber *s);
/* Free the handle (the subscriber stays on the server). NULL allowed; no
 * run may be in progress. */
void tally_subscriber_close(tally_subscriber *s);

/* One event handed to a handler. event.raw is valid during the call only. */
typedef struct tally_delivery {
    tally_event event;
    uint32_t attempt; /* 1 on the first delivery to this subscriber */
    bool replay;      /* a dead letter delivered again (dlq replay) */
} tally_delivery;

typedef enum tally_verdict {
    TALLY_DONE = 0,  /* handled: acknowledged with the fetched batch */
    TALLY_RETRY = 1, /* deliver again later (sub_nak) */
    TALLY_PARK = 2,  /* give up: into the dead-letter queue at once (sub_park) */
} tally_verdict;

/* Details of a verdict; zeroed before each handler call. */
typedef struct tally_answer {
    bool delay_set;    /* TALLY_RETRY: deliver again after delay_ms, */
    uint32_t delay_ms; /*   else after the subscriber's backoff or ack wait */
    char error[TALLY_CLIENT_SUB_ERROR_BYTES_MAX + 1]; /* RETRY: error text; PARK: reason */
} tally_answer;

typedef tally_verdict (*tally_subscriber_handler)(const tally_delivery *d, tally_answer *answer,
                                                  void *arg);

typedef struct tally_run_options {
    uint64_t max_events;   /* return after handing out this many; 0 = no limit */
    uint32_t fetch_max;    /* events per fetch, 1..1000; 0 = 100 */
    uint32_t wait_ms;      /* long-poll of each fetch, 1..30000; 0 = 5000 */
    uint32_t failures_max; /* failed round trips in a row (after the client's own
                              retries) before the run gives up; 0 = 10, at most 1000 */
    bool until_idle;       /* also return once a fetch, after waiting wait_ms,
                              brings nothing: work off what is there, then stop
                              (with partitions: what this instance's
                              partitions hold, or nothing while it holds none) */
    const char *instance;  /* this consumer instance's id (1-64 bytes of A-Z a-z
                              0-9 . _ -), kept by the handle from this run on;
                              NULL = the handle's (generated at open, or the
                              last one given). Stable across restarts of a
                              process, it gets that process's unacked events
                              back at once; never give two live processes the
                              same one (docs/SUBSCRIBERS.md, "Instances") */
} tally_run_options;

/* Counters of a handle, over all its runs. */
typedef struct tally_subscriber_counters {
    uint64_t fetches;     /* sub_fetch calls answered */
    uint64_t delivered;   /* events handed to the handler */
    uint64_t redelivered; /* ... of them with attempt > 1 */
    uint64_t replays;     /* ... of them dead letters delivered again */
    uint64_t done, retried, parked; /* the handler's verdicts */
    uint64_t acks;        /* sub_ack calls answered */
    uint64_t failures;    /* failed round trips that were tried again */
    uint64_t ack_floor;   /* as the last fetch or ack reported */
    uint64_t head;        /* as the last fetch reported */
} tally_subscriber_counters;

/* The run loop: fetch (long-polling up to wait_ms), hand each event to
 * handler in the order fetched, send a retry (sub_nak) or a park
 * (sub_park) as soon as the handler answers so, and acknowledge the done
 * events of each fetched batch with one sub_ack after the batch.
 * Returns TALLY_ok after max_events events, once tally_subscriber_stop was
 * called, or (until_idle) when a fetch brought nothing; events handled so
 * far are acknowledged first, events fetched but not handed out are
 * delivered again later. Transport failures (TALLY_timed_out,
 * TALLY_unreachable, TALLY_overloaded, TALLY_shutting_down) are tried
 * again with a growing pause (0.1 s doubling to 5 s), up to failures_max
 * in a row, then returned; after a failed fetch the next one asks for the
 * unacked window at once (restart). Any other code from the server (e.g.
 * TALLY_subscriber_not_found: deleted meanwhile) ends the run and is
 * returned; TALLY_internal for a reply of the wrong shape (an event that
 * fails its own checks, its hash among them, included);
 * TALLY_corrupt_record when a fetched event that follows the one fetched
 * before it (seq + 1) does not carry that event's hash as prev_hash;
 * TALLY_invalid_argument for a NULL argument, options out of range, a run
 * already in progress on this handle, or a handler answer that is not a
 * tally_verdict; TALLY_out_of_memory. A retry or park refused with
 * TALLY_seq_not_in_flight (the event is no longer in flight, e.g. parked
 * or deleted meanwhile) is skipped. One run at a time per handle; the
 * handler may call tally_subscriber_stop. */
int tally_subscriber_run(tally_subscriber *s, const tally_run_options *options,
                         tally_subscriber_handler handler, void *arg);
/* A handler of whole batches (tally_subscriber_run_batches): it gets the
 * count deliveries of one fetch, in the order fetched (valid during the
 * call), and sets verdicts[i] and answers[i] for each; verdicts come in
 * as TALLY_RETRY and answers zeroed, so an event it leaves alone is
 * delivered again later. For handlers that work on a batch at once, e.g.
 * publish it asynchronously and answer when the broker has confirmed. */
typedef void (*tally_batch_handler)(const tally_delivery *batch, size_t count,
                                    tally_verdict *verdicts, tally_answer *answers, void *arg);
/* tally_subscriber_run with a batch handler: the same loop, options,
 * returns and acknowledgement (the batch's done events with one sub_ack,
 * retries and parks sent in the batch's order once the handler returned);
 * max_events and a stop take effect between batches. */
int tally_subscriber_run_batches(tally_subscriber *s, const tally_run_options *options,
                                 tally_batch_handler handler, void *arg);
/* Ask a run to return (thread-safe and async-signal-safe: a signal
 * handler may call it). A running fetch ends within its wait_ms. Asked
 * while no run is in progress, it ends the next run before its first
 * fetch. A run that returns TALLY_ok clears it. */
void tally_subscriber_stop(tally_subscriber *s);
/* The consumer is still at work on the count events seqs that s's
 * instance was handed (sub_progress, JetStream's "in progress"): each one
 * still in flight and held by it is leased again for the subscriber's ack
 * wait, using no attempt. The run loop sends it by itself between the
 * events of a batch every third of the ack wait; a batch handler that
 * works longer than the ack wait calls it. Any thread may call it during
 * a run. TALLY_ok, TALLY_invalid_argument (count 0 or over
 * TALLY_CLIENT_SUB_FETCH_MAX), or the request's error. */
int tally_subscriber_progress(tally_subscriber *s, const uint64_t *seqs, size_t count);
void tally_subscriber_counters_get(const tally_subscriber *s, tally_subscriber_counters *out);

/* Metrics of one subscriber, of all (in name order; *count gets how many
 * were stored, at most capacity), or delete one with its in-flight records
 * and dead letters. */
int tally_subscriber_get(tally_client *c, const char *name, tally_subscriber_info *out);
int tally_subscriber_list(tally_client *c, tally_subscriber_info *out, size_t capacity,
                          size_t *count);
int tally_subscriber_delete(tally_client *c, const char *name);
/* The partitions of subscriber name and who holds each (sub_get): up to
 * capacity, *count gets how many (0 for a subscriber without partitions).
 * TALLY_ok, TALLY_invalid_argument, or the request's error. */
int tally_subscriber_partitions(tally_client *c, const char *name, tally_partition_holder *out,
                                size_t capacity, size_t *count);
/* The same metrics as they appear in `stats` (stats.subscribers). */
int tally_stats_subscribers(tally_client *c, tally_subscriber_info *out, size_t capacity,
                            size_t *count);

/* ---- dead letters ---- */

typedef struct tally_dead_letter {
    uint64_t seq;
    uint32_t attempts;
    char error[TALLY_CLIENT_SUB_ERROR_BYTES_MAX + 1]; /* last error text or park reason */
    int64_t parked_ms;
    bool replaying; /* marked by tally_dlq_replay, not yet fetched */
    tally_uuid event_id;
    char type[32];
} tally_dead_letter;

/* Dead letters of subscriber name with seq > after_seq, in seq order, at
 * most min(limit, capacity, 1000) (limit 0: 100); *next = the seq to pass
 * as after_seq for the next page, 0 when no more. */
int tally_dlq_list(tally_client *c, const char *name, uint64_t after_seq, uint32_t limit,
                   tally_dead_letter *out, size_t capacity, size_t *count, uint64_t *next);
/* Mark the dead letter seq (0: all of them) to be delivered again, ahead of
 * new events; *replaying (may be NULL) gets how many are marked now.
 * TALLY_dead_letter_not_found when seq is not parked. */
int tally_dlq_replay(tally_client *c, const char *name, uint64_t seq, uint64_t *replaying);
/* Remove the dead letter seq for good. TALLY_dead_letter_not_found when it
 * is not parked. */
int tally_dlq_discard(tally_client *c, const char *name, uint64_t seq);

#endif
