/*
 * figures_history.h — the last hour of the figures the console's charts draw
 * (GET /v1/figures, docs/PROTOCOL.md "Figures"): one sample a second of
 * the head seq, the commit and command counters, map and disk use, and
 * each subscriber's pending events, oldest unacked age, redeliveries and
 * dead letters.
 *
 * Bounded: a ring of TALLY_FIGURES_SAMPLES_MAX samples, allocated once by
 * net_history_create (about 2 MiB), never grown. The first
 * TALLY_FIGURES_SUBSCRIBERS_MAX subscribers in name order are sampled;
 * the others are counted in each sample, not sampled. A subscriber that
 * leaves the sampled set keeps its column until a newcomer needs the
 * place; the newcomer's column starts empty.
 *
 * Kept in memory only: a restart starts an empty history. One thread
 * samples (tallyd's main loop, with the health checks), any thread reads.
 */
#ifndef TALLY_NET_FIGURES_HISTORY_H
#define TALLY_NET_FIGURES_HISTORY_H

#include "common/text.h"
#include "log/store.h"
#include "net/metrics/health.h"

#include <stdint.h>

typedef struct net_history net_history;

/* NULL when out of memory. */
net_history *net_history_create(void);
/* Free h (NULL: nothing). */
void net_history_destroy(net_history *h);

/* The counters sampled beside the store (tallyd's totals since start). */
typedef struct net_history_counters {
    uint64_t commits, commands;
} net_history_counters;

/* Take a sample at now_ms from the read-only transaction t, with facts
 * (disk) from the health checks' evaluation. TALLY_ok or the store's
 * fault (then nothing is sampled). */
int net_history_sample(net_history *h, store_txn *t, int64_t now_ms,
                       const net_history_counters *c, const net_health_facts *facts);

/* The samples taken after since_ms (0: all) as the JSON document of
 * GET /v1/figures into out. */
void net_history_json(net_history *h, int64_t since_ms, net_text *out);

#endif
