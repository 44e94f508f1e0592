/*
 * health.h — tallyd's health checks and alert thresholds: the store's map
 * use and, per durable subscriber, pending events, the oldest unacked
 * event's age, dead letters and idleness (no fetch while events are
 * pending). GET /readyz, the `health` op and a once-a-second evaluation on
 * tallyd's main thread run the same checks; whichever evaluation first sees
 * an alert start or clear logs it, once (docs/OPERATIONS.md, "Health and
 * alerts").
 *
 * A check fails when its value is above its threshold. Each threshold is
 * off unless given, except the map's (90 %); a subscriber may have its own
 * (`--alert-pending relay=5000`) or none (`--alert-pending relay=none`).
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
    NET_ALERT_MAP_USED,        /* percent of --map-max-mb in use */
    NET_ALERT_PENDING,         /* events after the ack floor */
    NET_ALERT_OLDEST_UNACKED,  /* seconds */
    NET_ALERT_DEAD_LETTERS,    /* events parked */
    NET_ALERT_IDLE,            /* seconds since the last fetch, while events are pending */
    NET_ALERT_KIND_COUNT
} net_alert_kind;

#define NET_ALERT_OVERRIDES_MAX 32 /* NAME=N settings per threshold */
#define NET_ALERT_MAP_USED_PCT_DEFAULT 90

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

/* The defaults: the map at 90 %, the rest off. */
void net_health_config_default(net_health_config *c);
/* The option's name without "--" ("alert-pending"). */
const char *net_health_option_name(net_alert_kind kind);
/* Apply one option's argument: N, or NAME=N / NAME=none for one
 * subscriber (not for the map). false (with why in err) when it is
 * not valid. */
bool net_health_option(net_health_config *c, net_alert_kind kind, const char *arg, char *err,
                       size_t err_size);

typedef struct net_check {
    net_alert_kind kind;
    char subscriber[TALLY_SUBSCRIBER_NAME_BYTES_MAX + 1]; /* "" for the store */
    bool failing;
    uint64_t value, threshold;
    char reason[192]; /* why it fails; "" when it passes */
} net_check;

typedef struct net_health_report {
    unsigned count, failing;
    net_check checks[]; /* count of them */
} net_health_report;

/* A check's name in replies and logs ("pending", "map_used_pct", ...). */
const char *net_check_name(net_alert_kind kind);

typedef struct net_health net_health;

/* NULL when out of memory. The config is copied. */
net_health *net_health_create(const net_health_config *c);
/* Free h (NULL: nothing). */
void net_health_destroy(net_health *h);
/* Run every check against the read-only transaction t at now_ms, log the
 * alerts that started or cleared since the last evaluation, and return the
 * report in *out (free() it). TALLY_ok, or a fault (nothing logged). */
int net_health_evaluate(net_health *h, store_txn *t, int64_t now_ms, net_health_report **out);

/* The health op's reply (docs/PROTOCOL.md, "health"): every check of h
 * evaluated now in a read of st (net_control_env's health). */
void net_health_reply(net_out *o, void *h, store *st);
/* The report as JSON ({"status":"ok"|"failing","checks":[...]}), the body
 * of GET /readyz. */
void net_health_json(net_text *b, const net_health_report *r);

#endif
