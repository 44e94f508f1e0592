/*
 * figures.c — the store's and each subscriber's figures, and the last
 * fetch of each durable subscriber, in memory (figures.h).
 */
#include "net/ops/figures.h"

#include "common/error.h"
#include "common/table.h"
#include "common/logging.h"
#include "ledger/retention.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>

/* Names of subscribers that were deleted stay: the table is bounded by
 * this many entries, then emptied (every subscriber counts from then on,
 * as after a restart). */
#define FETCH_NAMES_MAX (4 * TALLY_SUBSCRIBERS_MAX)

static pthread_mutex_t fetch_mu = PTHREAD_MUTEX_INITIALIZER;
static table *fetch_times; /* name -> int64_t last fetch ms; under fetch_mu */
static int64_t started_ms; /* under fetch_mu */

static void start_locked(int64_t now_ms)
{
    if (started_ms == 0)
        started_ms = now_ms;
}

void net_liveness_start(int64_t now_ms)
{
    pthread_mutex_lock(&fetch_mu);
    start_locked(now_ms);
    pthread_mutex_unlock(&fetch_mu);
}

void net_liveness_fetched(tally_str name, int64_t now_ms)
{
    pthread_mutex_lock(&fetch_mu);
    start_locked(now_ms);
    if (fetch_times == NULL)
        fetch_times = table_create(sizeof(int64_t));
    if (fetch_times && table_count(fetch_times) >= FETCH_NAMES_MAX &&
        !table_find(fetch_times, name.ptr, name.len)) {
        table_destroy(fetch_times);
        fetch_times = table_create(sizeof(int64_t));
        started_ms = now_ms;
    }
    int inserted;
    int64_t *at = fetch_times ? table_upsert(fetch_times, name.ptr, name.len, &inserted) : NULL;
    if (at) /* out of memory: the age grows, and an idle alert may show it */
        *at = now_ms;
    pthread_mutex_unlock(&fetch_mu);
}

static int64_t last_fetch_ms(const char *name, int64_t now_ms)
{
    pthread_mutex_lock(&fetch_mu);
    start_locked(now_ms);
    const int64_t *at = fetch_times ? table_find(fetch_times, name, strlen(name)) : NULL;
    int64_t ms = at ? *at : started_ms;
    pthread_mutex_unlock(&fetch_mu);
    return ms;
}

static int64_t age_s(int64_t since_ms, int64_t now_ms)
{
    return since_ms > 0 && now_ms > since_ms ? (now_ms - since_ms) / 1000 : 0;
}

int net_sub_figures_get(store_txn *t, const sub_state *s, int64_t now_ms, net_sub_figures *out)
{
    sub_metrics m;
    int64_t parked_ms = 0;
    memset(out, 0, sizeof(*out));
    int rc = sub_metrics_get(t, s, now_ms, &m);
    if (rc == TALLY_ok && s->dead_letters > 0)
        rc = sub_dlq_oldest_parked(t, tally_str_from(s->name), &parked_ms);
    if (rc != TALLY_ok)
        return rc;
    out->pending = m.pending;
    out->oldest_unacked_age_s = m.oldest_unacked_age_s;
    out->oldest_dead_letter_age_s = age_s(parked_ms, now_ms);
    out->last_fetch_age_s = age_s(last_fetch_ms(s->name, now_ms), now_ms);
    return TALLY_ok;
}

int net_store_figures_get(store_txn *t, net_store_figures *out)
{
    static const store_db dbs[5] = {STORE_DB_ACCOUNTS, STORE_DB_TRANSFERS, STORE_DB_ENTITLEMENTS,
                                    STORE_DB_INBOX, STORE_DB_LOG};
    uint64_t *counts[5] = {&out->accounts, &out->transfers, &out->entitlements, &out->inbox,
                           &out->events};
    ledger_log_floor floor = {0};
    memset(out, 0, sizeof(*out));
    int rc = log_head_get(t, &out->head);
    if (rc == TALLY_ok)
        rc = log_first_seq(t, &out->first_seq);
    for (int i = 0; rc == TALLY_ok && i < 5; i++)
        rc = store_count(t, dbs[i], counts[i]);
    if (rc == TALLY_ok)
        rc = store_map_usage(t, &out->map_used_bytes, &out->map_size_bytes);
    if (rc == TALLY_ok)
        rc = ledger_inbox_oldest_ms(t, &out->inbox_oldest_ms);
    if (rc == TALLY_ok)
        rc = ledger_log_floor_get(t, &floor);
    out->map_max_bytes = store_map_max(t->st);
    out->log_floor = floor.seq;
    memcpy(out->log_floor_hash, floor.hash, sizeof(out->log_floor_hash));
    return rc;
}

/* ---- dead letters parked by the group being applied ---- */

#define PARKS_LOGGED_MAX 64 /* per group; beyond it one line says how many more */

typedef struct park_note {
    char name[TALLY_SUBSCRIBER_NAME_BYTES_MAX + 1];
    uint64_t seq;
    uint32_t attempts;
    int reason_len;
    char reason[TALLY_SUB_ERROR_BYTES_MAX];
} park_note;

static park_note parks[PARKS_LOGGED_MAX]; /* the writer thread's */
static uint32_t park_count, parks_unlogged;

void net_parks_note(const char *name, uint64_t seq, uint32_t attempts, tally_str reason)
{
    if (park_count == PARKS_LOGGED_MAX) {
        parks_unlogged++;
        return;
    }
    park_note *p = &parks[park_count++];
    snprintf(p->name, sizeof(p->name), "%s", name);
    p->seq = seq;
    p->attempts = attempts;
    p->reason_len = (int)(reason.len < sizeof(p->reason) ? reason.len : sizeof(p->reason));
    if (p->reason_len)
        memcpy(p->reason, reason.ptr, (size_t)p->reason_len);
}

void net_parks_forget(void) { park_count = parks_unlogged = 0; }

void net_parks_log(void)
{
    for (uint32_t i = 0; i < park_count; i++) {
        const park_note *p = &parks[i];
        static const char none[] = "(no reason given)";
        net_log(NET_LOG_WARN, "dead letter: subscriber %s parked seq %llu after %u attempts: %.*s",
                p->name, (unsigned long long)p->seq, p->attempts,
                p->reason_len ? p->reason_len : (int)sizeof(none) - 1,
                p->reason_len ? p->reason : none);
    }
    if (parks_unlogged)
        net_log(NET_LOG_WARN, "dead letter: %u more events parked in the same commit",
                parks_unlogged);
    net_parks_forget();
}
