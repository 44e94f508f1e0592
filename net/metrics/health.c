/*
 * health.c — the health checks, their thresholds, and the alerts they
 * raise (health.h).
 */
#include "net/metrics/health.h"

#include "common/clock.h"
#include "common/error.h"
#include "common/table.h"
#include "log/subscriber.h"
#include "net/ops/figures.h"
#include "common/logging.h"

#include <assert.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define STORE_CHECKS NET_ALERT_SUBSCRIBER_FIRST
#define CHECKS_MAX (STORE_CHECKS + (NET_ALERT_KIND_COUNT - STORE_CHECKS) * TALLY_SUBSCRIBERS_MAX)
#define ALERT_KEY_BYTES (2 + TALLY_SUBSCRIBER_NAME_BYTES_MAX)
#define MAX_OF_MB (UINT64_C(1) << 30) /* a PiB: any disk */

/* A row per check: its option, name, class, the unit of the reason, and
 * whether it fails below its threshold (else above). */
static const struct {
    const char *option, *check, *what;
    net_check_class cls;
    bool below;
    uint64_t min, max; /* the option's range */
} kinds[NET_ALERT_KIND_COUNT] = {
    [NET_ALERT_MAP_USED] = {"alert-map-used-pct", "map_used_pct", "% of the map's limit in use",
                           NET_CHECK_ALERT, false, 0, 100},
    [NET_CHECK_DISK_FREE] = {"ready-disk-free-mb", "disk_free_mb",
                             "MiB free under the data directory", NET_CHECK_READINESS, true,
                             0, MAX_OF_MB},
    [NET_CHECK_MAP_ROOM] = {"ready-map-room-kib", "map_room_kib",
                            "KiB left in the map up to --map-max-mb", NET_CHECK_READINESS, true,
                            0, MAX_OF_MB << 10},
    [NET_CHECK_STORAGE_FULL] = {"ready-storage-full-s", "storage_full", "", NET_CHECK_READINESS,
                                false, 0, 86400},
    [NET_CHECK_WRITER_STALL] = {"writer-stall-ms", "writer_stall_ms",
                                "ms without progress of the writer while writes wait",
                                NET_CHECK_READINESS, false, 100, 3600000},
    [NET_CHECK_CLUSTER_LAG] = {"cluster-ready-lag", "cluster_lag_messages",
                               "messages behind the command stream", NET_CHECK_READINESS, false,
                               0, UINT64_MAX / 2},
    /* no option: a diverged node is never ready */
    [NET_CHECK_CLUSTER_DIVERGED] = {"", "cluster_diverged", "", NET_CHECK_READINESS, false, 0,
                                    1},
    [NET_ALERT_PENDING] = {"alert-pending", "pending", "events pending", NET_CHECK_ALERT, false,
                           0, UINT64_MAX / 2},
    [NET_ALERT_OLDEST_UNACKED] = {"alert-oldest-unacked-s", "oldest_unacked_s",
                                  "s since the oldest unacked event", NET_CHECK_ALERT, false,
                                  0, UINT64_MAX / 2},
    [NET_ALERT_DEAD_LETTERS] = {"alert-dead-letters", "dead_letters", "dead letters",
                                NET_CHECK_ALERT, false, 0, UINT64_MAX / 2},
    [NET_ALERT_IDLE] = {"alert-idle-subscriber-s", "idle_subscriber_s",
                        "s since the last fetch while events are pending", NET_CHECK_ALERT, false,
                        0, UINT64_MAX / 2},
};

struct net_health {
    net_health_config cfg;
    net_health_facts_fn *facts;
    void *facts_ctx;
    pthread_mutex_t mu;
    table *active; /* alert key -> uint64_t round it was last seen failing; under mu */
    uint64_t round;
};

void net_health_config_default(net_health_config *c)
{
    memset(c, 0, sizeof(*c));
    static const uint64_t defaults[STORE_CHECKS] = {
        [NET_ALERT_MAP_USED] = NET_ALERT_MAP_USED_PCT_DEFAULT,
        [NET_CHECK_DISK_FREE] = NET_READY_DISK_FREE_MB_DEFAULT,
        [NET_CHECK_MAP_ROOM] = NET_READY_MAP_ROOM_KIB_DEFAULT,
        [NET_CHECK_STORAGE_FULL] = NET_READY_STORAGE_FULL_S_DEFAULT,
        [NET_CHECK_WRITER_STALL] = NET_WRITER_STALL_MS_DEFAULT,
        [NET_CHECK_CLUSTER_LAG] = TALLY_CLUSTER_READY_LAG_DEFAULT,
        [NET_CHECK_CLUSTER_DIVERGED] = 0,
    };
    for (int k = 0; k < STORE_CHECKS; k++) {
        c->rules[k].set = true;
        c->rules[k].value = defaults[k];
    }
}

const char *net_health_option_name(net_alert_kind kind) { return kinds[kind].option; }
const char *net_check_name(net_alert_kind kind) { return kinds[kind].check; }
const char *net_check_class_name(net_check_class cls)
{
    return cls == NET_CHECK_READINESS ? "readiness" : "alert";
}

uint64_t net_health_store_threshold(const net_health_config *c, net_alert_kind kind)
{
    assert(kind < STORE_CHECKS);
    return c->rules[kind].value;
}

static bool parse_u64(const char *text, uint64_t min, uint64_t max, uint64_t *out)
{
    char *end;
    errno = 0;
    unsigned long long v = strtoull(text, &end, 10);
    if (text[0] < '0' || text[0] > '9' || *end != '\0' || errno != 0 || v < min || v > max)
        return false;
    *out = v;
    return true;
}

bool net_health_option(net_health_config *c, net_alert_kind kind, const char *arg, char *err,
                       size_t err_size)
{
    net_alert_rule *r = &c->rules[kind];
    uint64_t min = kinds[kind].min, max = kinds[kind].max;
    bool of_store = kind < STORE_CHECKS;
    const char *eq = strchr(arg, '=');
    if (eq == NULL) {
        if (!parse_u64(arg, min, max, &r->value)) {
            snprintf(err, err_size, "--%s: not a number in range (%llu..%llu): %s",
                     kinds[kind].option, (unsigned long long)min, (unsigned long long)max, arg);
            return false;
        }
        r->set = true;
        return true;
    }
    tally_str name = {arg, (size_t)(eq - arg)};
    if (of_store || sub_name_check(name) != TALLY_ok ||
        r->override_count == NET_ALERT_OVERRIDES_MAX) {
        snprintf(err, err_size, "--%s: %s: %s", kinds[kind].option,
                 of_store ? "one value for the store, no NAME="
                 : r->override_count == NET_ALERT_OVERRIDES_MAX ? "at most 32 NAME=N settings"
                                                                 : "not a subscriber name",
                 arg);
        return false;
    }
    net_alert_override *o = &r->overrides[r->override_count];
    memset(o, 0, sizeof(*o));
    memcpy(o->name, arg, name.len);
    o->off = strcmp(eq + 1, "none") == 0;
    if (!o->off && !parse_u64(eq + 1, min, max, &o->value)) {
        snprintf(err, err_size, "--%s: NAME=N or NAME=none, got %s", kinds[kind].option, arg);
        return false;
    }
    r->override_count++;
    return true;
}

/* The threshold of kind for subscriber (NULL: the store); false: none. */
static bool threshold_of(const net_health_config *c, net_alert_kind kind, const char *subscriber,
                         uint64_t *out)
{
    const net_alert_rule *r = &c->rules[kind];
    for (unsigned i = 0; subscriber && i < r->override_count; i++)
        if (strcmp(r->overrides[i].name, subscriber) == 0) {
            *out = r->overrides[i].value;
            return !r->overrides[i].off;
        }
    *out = r->value;
    return r->set;
}

net_health *net_health_create(const net_health_config *c, net_health_facts_fn *facts, void *ctx)
{
    net_health *h = calloc(1, sizeof(*h));
    if (h == NULL || (h->active = table_create(sizeof(uint64_t))) == NULL) {
        free(h);
        return NULL;
    }
    h->cfg = *c;
    h->facts = facts;
    h->facts_ctx = ctx;
    pthread_mutex_init(&h->mu, NULL);
    return h;
}

void net_health_destroy(net_health *h)
{
    if (h == NULL)
        return;
    table_destroy(h->active);
    pthread_mutex_destroy(&h->mu);
    free(h);
}

/* ---- the checks ---- */

static net_check *add_check(net_health_report *r, net_alert_kind kind, const char *subscriber,
                            uint64_t value, uint64_t threshold)
{
    net_check *k = &r->checks[r->count++];
    memset(k, 0, sizeof(*k));
    k->kind = kind;
    k->cls = kinds[kind].cls;
    snprintf(k->subscriber, sizeof(k->subscriber), "%s", subscriber ? subscriber : "");
    k->value = value;
    k->threshold = threshold;
    k->failing = kinds[kind].below ? value < threshold : value > threshold;
    if (!k->failing)
        return k;
    r->failing++;
    if (k->cls == NET_CHECK_READINESS)
        r->not_ready++;
    snprintf(k->reason, sizeof(k->reason), "%s%s%s%llu %s, %s the threshold %llu",
             subscriber ? "subscriber " : "", subscriber ? subscriber : "",
             subscriber ? ": " : "", (unsigned long long)value, kinds[kind].what,
             kinds[kind].below ? "below" : "above", (unsigned long long)threshold);
    return k;
}

typedef struct sub_ctx {
    const net_health_config *cfg;
    net_health_report *r;
    store_txn *t;
    int64_t now_ms;
} sub_ctx;

static int check_subscriber(const sub_state *s, void *ctx)
{
    sub_ctx *c = ctx;
    net_sub_figures f;
    int rc = net_sub_figures_get(c->t, s, c->now_ms, &f);
    if (rc != TALLY_ok)
        return rc;
    uint64_t values[NET_ALERT_KIND_COUNT] = {
        [NET_ALERT_PENDING] = f.pending,
        [NET_ALERT_OLDEST_UNACKED] = (uint64_t)f.oldest_unacked_age_s,
        [NET_ALERT_DEAD_LETTERS] = s->dead_letters,
        /* idle only counts while there is something to fetch */
        [NET_ALERT_IDLE] = f.pending > 0 ? (uint64_t)f.last_fetch_age_s : 0,
    };
    for (int k = NET_ALERT_SUBSCRIBER_FIRST; k < NET_ALERT_KIND_COUNT; k++) {
        uint64_t threshold;
        if (threshold_of(c->cfg, (net_alert_kind)k, s->name, &threshold))
            add_check(c->r, (net_alert_kind)k, s->name, values[k], threshold);
    }
    return TALLY_ok;
}

/* The readiness checks of what the server knows (net_health_facts). */
static void check_facts(const net_health_config *cfg, const net_health_facts *f,
                        net_health_report *r)
{
    if (f->disk_known)
        add_check(r, NET_CHECK_DISK_FREE, NULL, f->disk_free_bytes >> 20,
                  cfg->rules[NET_CHECK_DISK_FREE].value);
    uint64_t window_ms = cfg->rules[NET_CHECK_STORAGE_FULL].value * 1000;
    bool recent = f->storage_full_age_ms >= 0 && (uint64_t)f->storage_full_age_ms < window_ms;
    net_check *k = add_check(r, NET_CHECK_STORAGE_FULL, NULL, recent, 0);
    if (k->failing)
        snprintf(k->reason, sizeof(k->reason),
                 "a write was answered storage_full %lld s ago (not ready for %llu s after one)",
                 (long long)(f->storage_full_age_ms / 1000),
                 (unsigned long long)cfg->rules[NET_CHECK_STORAGE_FULL].value);
    add_check(r, NET_CHECK_WRITER_STALL, NULL, f->writer_stall_ms,
              cfg->rules[NET_CHECK_WRITER_STALL].value);
    if (!f->cluster)
        return;
    add_check(r, NET_CHECK_CLUSTER_LAG, NULL, f->cluster_lag_messages,
              cfg->rules[NET_CHECK_CLUSTER_LAG].value);
    k = add_check(r, NET_CHECK_CLUSTER_DIVERGED, NULL, f->cluster_diverged, 0);
    if (k->failing)
        snprintf(k->reason, sizeof(k->reason), "this node stopped serving: %s",
                 f->cluster_why ? f->cluster_why : "see its log");
}

static int run_checks(const net_health *h, store_txn *t, int64_t now_ms, net_health_report *r)
{
    const net_health_config *cfg = &h->cfg;
    uint64_t used, size, threshold;
    int rc = store_map_usage(t, &used, &size);
    if (rc != TALLY_ok)
        return rc;
    uint64_t max = store_map_max(t->st) ? store_map_max(t->st) : size;
    if (threshold_of(cfg, NET_ALERT_MAP_USED, NULL, &threshold))
        add_check(r, NET_ALERT_MAP_USED, NULL, max ? used * 100 / max : 0, threshold);
    add_check(r, NET_CHECK_MAP_ROOM, NULL, max > used ? (max - used) >> 10 : 0,
              cfg->rules[NET_CHECK_MAP_ROOM].value);
    r->facts = (net_health_facts){.storage_full_age_ms = -1};
    if (h->facts)
        h->facts(h->facts_ctx, &r->facts);
    check_facts(cfg, &r->facts, r);
    sub_ctx c = {cfg, r, t, now_ms};
    return sub_list(t, check_subscriber, &c);
}

/* ---- alerts: started and cleared, logged once each ---- */

static size_t alert_key(const net_check *k, char *key)
{
    key[0] = (char)('a' + k->kind);
    key[1] = ':';
    size_t n = strlen(k->subscriber);
    memcpy(key + 2, k->subscriber, n);
    return 2 + n;
}

typedef struct sweep_ctx {
    uint64_t round;
    char (*gone)[ALERT_KEY_BYTES + 1];
    size_t count;
} sweep_ctx;

static int find_cleared(const void *key, size_t len, void *value, void *ctx)
{
    sweep_ctx *s = ctx;
    if (*(uint64_t *)value != s->round && s->count < CHECKS_MAX) {
        memcpy(s->gone[s->count], key, len);
        s->gone[s->count++][len] = '\0';
    }
    return 0;
}

static void note_alerts(net_health *h, const net_health_report *r)
{
    char key[ALERT_KEY_BYTES];
    pthread_mutex_lock(&h->mu);
    uint64_t round = ++h->round;
    for (unsigned i = 0; i < r->count; i++) {
        const net_check *k = &r->checks[i];
        if (!k->failing)
            continue;
        int inserted = 0;
        uint64_t *seen = table_upsert(h->active, key, alert_key(k, key), &inserted);
        if (seen)
            *seen = round;
        if (inserted)
            net_log(NET_LOG_WARN, "%s: %s: %s",
                    k->cls == NET_CHECK_READINESS ? "not ready" : "alert started",
                    kinds[k->kind].check, k->reason);
    }
    sweep_ctx s = {round, calloc(CHECKS_MAX, ALERT_KEY_BYTES + 1), 0};
    if (s.gone)
        table_each(h->active, find_cleared, &s);
    for (size_t i = 0; i < s.count; i++) {
        const char *name = s.gone[i] + 2;
        int kind = s.gone[i][0] - 'a';
        net_log(NET_LOG_WARN, "%s: %s%s%s",
                kinds[kind].cls == NET_CHECK_READINESS ? "ready again" : "alert cleared",
                kinds[kind].check, *name ? " of subscriber " : "", name);
        table_remove(h->active, s.gone[i], strlen(s.gone[i]));
    }
    free(s.gone);
    pthread_mutex_unlock(&h->mu);
}

int net_health_evaluate(net_health *h, store_txn *t, int64_t now_ms, net_health_report **out)
{
    net_health_report *r = malloc(sizeof(*r) + CHECKS_MAX * sizeof(net_check));
    *out = NULL;
    if (r == NULL)
        return TALLY_internal;
    r->count = r->failing = r->not_ready = 0;
    int rc = run_checks(h, t, now_ms, r);
    if (rc != TALLY_ok) {
        free(r);
        return rc;
    }
    note_alerts(h, r);
    *out = r;
    return TALLY_ok;
}

void net_health_json(net_text *b, const net_health_report *r)
{
    net_text_printf(b, "{\"status\":\"%s\",\"ready\":%s,\"alerts_failing\":%u,\"checks\":[",
                    r->not_ready ? "failing" : "ok", r->not_ready ? "false" : "true",
                    r->failing - r->not_ready);
    for (unsigned i = 0; i < r->count; i++) {
        const net_check *k = &r->checks[i];
        net_text_printf(b, "%s{\"check\":\"%s\",\"class\":\"%s\",", i ? "," : "",
                        kinds[k->kind].check, net_check_class_name(k->cls));
        /* every check has every field, as the health op's (null: none) */
        if (k->subscriber[0])
            net_text_printf(b, "\"subscriber\":\"%s\",", k->subscriber);
        else
            net_text_printf(b, "\"subscriber\":null,");
        net_text_printf(b, "\"ok\":%s,\"value\":%llu,\"threshold\":%llu", k->failing ? "false" : "true",
                        (unsigned long long)k->value, (unsigned long long)k->threshold);
        net_text_printf(b, ",\"reason\":\"");
        net_text_escaped(b, k->reason);
        net_text_printf(b, "\"}");
    }
    net_text_printf(b, "]}\n");
}

void net_health_reply(net_out *o, void *h, store *st)
{
    store_txn t;
    net_health_report *r = NULL;
    int rc = store_txn_begin(st, NULL, true, &t);
    if (rc == TALLY_ok) {
        rc = net_health_evaluate(h, &t, clock_wall_ms(), &r);
        store_txn_abort(&t);
    }
    if (rc != TALLY_ok)
        return net_reply_error(o, rc, "health checks not run");
    net_reply_open(o, TALLY_ok);
    net_kv_bool(o, "healthy", r->failing == 0);
    net_kv_bool(o, "ready", r->not_ready == 0);
    net_key(o, "checks");
    net_array_begin(o);
    for (unsigned i = 0; i < r->count; i++) {
        const net_check *k = &r->checks[i];
        net_item(o);
        net_map_begin(o);
        net_kv_cstr(o, "check", net_check_name(k->kind));
        net_kv_cstr(o, "class", net_check_class_name(k->cls));
        if (k->subscriber[0])
            net_kv_cstr(o, "subscriber", k->subscriber);
        else
            net_kv_nil(o, "subscriber");
        net_kv_bool(o, "ok", !k->failing);
        net_kv_u64(o, "value", k->value);
        net_kv_u64(o, "threshold", k->threshold);
        net_kv_cstr(o, "reason", k->reason);
        net_map_end(o);
    }
    net_array_end(o);
    net_map_end(o);
    free(r);
}
