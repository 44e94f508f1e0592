/*
 * health.h — tallyd's health checks, in two classes (docs/OPERATIONS.md,
 * "Health checks and alert thresholds"):
 *
 *   readiness  whether tallyd can take writes now: free disk under the
 *              data directory, room left in the map up to --map-max-mb, no
 *              write answered storage_full lately, a writer that makes
 *              progress while work waits; in cluster mode, a node not too far
 *              behind the stream and not diverged. One failing makes GET
 *              /readyz 503.
 *   alert      what an operator should look at but a load balancer must not
 *              act on: the map's use in %, and per durable subscriber
 *              pending events, the oldest unacked event's age, dead letters
 *              and idleness (no fetch while events are pending). Shown in
 *              /readyz's JSON, `tally health`, /metrics; never a 503.
 *
 * GET /readyz, the `health` op, GET /metrics and a once-a-second evaluation
 * on tallyd's main thread run the same checks; whichever evaluation first
 * sees a check start or stop failing logs it, once.
 *
 * An alert check fails when its value is above its threshold; the disk and
 * map room checks when below. The subscriber thresholds are off unless
 * given; a subscriber may have its own (`--alert-pending relay=5000`) or
 * none (`--alert-pending relay=none`). The store's checks are always on.
 */
#ifndef TALLY_NET_HEALTH_H
#define TALLY_NET_HEALTH_H

#include "common/limits.h"
#include "log/store.h"
#include "net/metrics/metrics.h"
#include "net/ops/out.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

typedef enum net_alert_kind {
    NET_ALERT_MAP_USED,        /* alert: percent of --map-max-mb in use */
    NET_CHECK_DISK_FREE,       /* readiness: MiB free under the data directory (below fails) */
    NET_CHECK_MAP_ROOM,        /* readiness: KiB left in the map up to --map-max-mb (below fails) */
    NET_CHECK_STORAGE_FULL,    /* readiness: 1 when a write was answered storage_full within
                                  the rule's value in s (--ready-storage-full-s), else 0 */
    NET_CHECK_WRITER_STALL,    /* readiness: ms the writer made no progress while work waits */
    NET_CHECK_CLUSTER_LAG,     /* readiness (cluster mode): messages behind the stream */
    NET_CHECK_CLUSTER_DIVERGED, /* readiness (cluster mode): 1 when the node stopped serving */
    NET_ALERT_PENDING,         /* events after the ack floor */
    NET_ALERT_OLDEST_UNACKED,  /* seconds */
    NET_ALERT_DEAD_LETTERS,    /* events parked */
    NET_ALERT_IDLE,            /* seconds since the last fetch, while events are pending */
    NET_ALERT_KIND_COUNT
} net_alert_kind;

/* The first per-subscriber kind: those before it are the store's. */
#define NET_ALERT_SUBSCRIBER_FIRST NET_ALERT_PENDING

#define NET_ALERT_OVERRIDES_MAX 32 /* NAME=N settings per threshold */
#define NET_ALERT_MAP_USED_PCT_DEFAULT 90
#define NET_READY_DISK_FREE_MB_DEFAULT 256
#define NET_READY_MAP_ROOM_KIB_DEFAULT 512
#define NET_READY_STORAGE_FULL_S_DEFAULT 60
#define NET_WRITER_STALL_MS_DEFAULT 10000

typedef enum net_check_class { NET_CHECK_READINESS, NET_CHECK_ALERT } net_check_class;

/* What the checks read beside the store, from the server (net/server/). */
typedef struct net_health_facts {
    bool disk_known;            /* statvfs of the data directory answered */
    uint64_t disk_free_bytes;   /* for an unprivileged user (f_bavail) */
    uint64_t writer_stall_ms;   /* no dequeue or commit while work waited; 0: none waits */
    int64_t storage_full_age_ms; /* since a write was last answered storage_full; -1: never */
    bool cluster;                 /* cluster mode: the two below are checked */
    uint64_t cluster_lag_messages; /* the stream's last seq minus this node's position */
    bool cluster_diverged;        /* the node stopped serving (docs/CLUSTER.md) */
    const char *cluster_why;      /* why it stopped (the server's; lives as long) */
} net_health_facts;

/* Fill out with the facts now; ctx is net_health_create's. */
typedef void net_health_facts_fn(void *ctx, net_health_facts *out);

typedef struct net_alert_override {
    char name[TALLY_SUBSCRIBER_NAME_BYTES_MAX + 1];
    bool off;
    uint64_t value;
} net_alert_override;

typedef struct net_alert_rule {
    bool set; /* a threshold for every subscriber (or the store) */
    uint64_t value;
    net_alert_override overrides[NET_ALERT_OVERRIDES_MAX];
    unsigned override_count;
} net_alert_rule;

typedef struct net_health_config {
    net_alert_rule rules[NET_ALERT_KIND_COUNT];
} net_health_config;

/* The defaults: the map at 90 %, the readiness checks at their
 * NET_READY_* and NET_WRITER_STALL_MS defaults, the rest off. */
void net_health_config_default(net_health_config *c);
/* The option's name without "--" ("alert-pending"). */
const char *net_health_option_name(net_alert_kind kind);
/* Apply one option's argument: N, or NAME=N / NAME=none for one
 * subscriber (not for the store's checks). false (with why in err) when
 * it is not valid. */
bool net_health_option(net_health_config *c, net_alert_kind kind, const char *arg, char *err,
                       size_t err_size);

typedef struct net_check {
    net_alert_kind kind;
    net_check_class cls;
    char subscriber[TALLY_SUBSCRIBER_NAME_BYTES_MAX + 1]; /* "" for the store */
    bool failing;
    uint64_t value, threshold;
    char reason[192]; /* why it fails; "" when it passes */
} net_check;

typedef struct net_health_report {
    unsigned count, failing;
    unsigned not_ready; /* failing readiness checks: /readyz is 503 when non-zero */
    net_health_facts facts; /* what the checks read beside the store */
    net_check checks[]; /* count of them */
} net_health_report;

/* A check's name in replies and logs ("pending", "map_used_pct", ...). */
const char *net_check_name(net_alert_kind kind);
/* Its class's name: "readiness" or "alert". */
const char *net_check_class_name(net_check_class cls);

typedef struct net_health net_health;

/* NULL when out of memory. The config is copied; facts (with ctx) is
 * called at every evaluation (NULL: no facts, the readiness checks that
 * need them pass). */
net_health *net_health_create(const net_health_config *c, net_health_facts_fn *facts, void *ctx);
/* Free h (NULL: nothing). */
void net_health_destroy(net_health *h);
/* Run every check against the read-only transaction t at now_ms, log the
 * alerts that started or cleared since the last evaluation, and return the
 * report in *out (free() it). TALLY_ok, or a fault (nothing logged). */
int net_health_evaluate(net_health *h, store_txn *t, int64_t now_ms, net_health_report **out);

/* The health op's reply (docs/PROTOCOL.md, "health"): every check of h
 * evaluated now in a read of st (net_control_env's health). */
void net_health_reply(net_out *o, void *h, store *st);
/* The threshold of a store check (NET_CHECK_WRITER_STALL: /healthz's). */
uint64_t net_health_store_threshold(const net_health_config *c, net_alert_kind kind);
/* The report as JSON ({"status":"ok"|"failing","ready":B,"alerts_failing":N,
 * "checks":[...]}, each check with its class), the body of GET /readyz:
 * status is "failing" when a readiness check fails. */
void net_health_json(net_text *b, const net_health_report *r);

#endif
