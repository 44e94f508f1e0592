/*
 * figures.h — the figures of the store and of each durable subscriber that
 * the replies (stats, sub_get, sub_list), the metrics and the health checks
 * share, and what tallyd knows of its subscribers beyond their stored
 * records: when each last fetched (kept in memory, one entry per name, no
 * write per fetch).
 *
 * The fetch times are one table per process, like the metrics registry.
 * A subscriber that has not fetched since tallyd started counts from the
 * start: its last-fetch age is the time tallyd has been running.
 */
#ifndef TALLY_NET_FIGURES_H
#define TALLY_NET_FIGURES_H

#include "log/log.h"
#include "log/subscriber.h"

#include <stdint.h>

/* The clock the ages count from (tallyd's start); the first call to any
 * function here sets it when this was not called. */
void net_liveness_start(int64_t now_ms);
/* The subscriber name fetched at now_ms (a sub_fetch that ran). */
void net_liveness_fetched(tally_str name, int64_t now_ms);

/* A subscriber's figures at now_ms, in seconds where they are ages. */
typedef struct net_sub_figures {
    uint64_t pending;                 /* head - ack floor */
    int64_t oldest_unacked_age_s;     /* 0 when nothing is pending */
    int64_t oldest_dead_letter_age_s; /* since it was parked; 0 without any */
    int64_t last_fetch_age_s;         /* since its last fetch, or since tallyd started */
} net_sub_figures;

/* TALLY_ok or the store's fault. */
int net_sub_figures_get(store_txn *t, const sub_state *s, int64_t now_ms, net_sub_figures *out);

/* Dead letters parked by the writer's current group (sub_park_observer;
 * writer thread only): forgotten when the group starts (again), logged as
 * one warn line each once it committed, so a group that is redone or not
 * committed logs nothing of its own. */
void net_parks_note(const char *name, uint64_t seq, uint32_t attempts, tally_str reason);
void net_parks_forget(void);
void net_parks_log(void);

/* The store's figures, from one read-only transaction. */
typedef struct net_store_figures {
    log_head head;
    uint64_t first_seq;    /* the first stored event's seq (0: none) */
    uint64_t accounts, transfers, entitlements, inbox, events; /* records stored */
    uint64_t map_used_bytes, map_size_bytes, map_max_bytes;
    int64_t inbox_oldest_ms; /* the oldest idempotency record's time, 0: none */
    uint64_t log_floor;      /* the last seq removed by log retention */
    uint8_t log_floor_hash[LOG_HASH_BYTES]; /* its hash: the anchor of the chain */
} net_store_figures;

/* TALLY_ok or the store's fault. */
int net_store_figures_get(store_txn *t, net_store_figures *out);

#endif
