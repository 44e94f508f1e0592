/*
 * metrics.c — the process's counters and histograms, and the Prometheus
 * text exposition (metrics.h; the families in docs/OPERATIONS.md).
 */
#include "net/metrics/metrics.h"

#include "common/clock.h"
#include "common/error.h"
#include "common/process_metrics.h"
#include "net/ops/figures.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define RELAXED memory_order_relaxed

/* ---- the registry ---- */

#define BUCKETS_MAX 16

/* Fixed buckets: upper bounds in the histogram's integer unit. */
typedef struct histogram {
    const int64_t *bounds;
    unsigned count;                          /* bounds; one more bucket: +Inf */
    atomic_uint_fast64_t hits[BUCKETS_MAX + 1]; /* per bucket, not cumulative */
    atomic_uint_fast64_t sum;                /* in the integer unit */
} histogram;

#define NS_PER_MS INT64_C(1000000)
static const int64_t group_bounds[] = {1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192};
static const int64_t commit_bounds_ns[] = {
    NS_PER_MS / 2, NS_PER_MS, 2 * NS_PER_MS, 5 * NS_PER_MS, 10 * NS_PER_MS, 20 * NS_PER_MS,
    50 * NS_PER_MS, 100 * NS_PER_MS, 200 * NS_PER_MS, 500 * NS_PER_MS, 1000 * NS_PER_MS,
    2000 * NS_PER_MS, 5000 * NS_PER_MS};
static const int64_t request_bounds_ns[] = {
    NS_PER_MS / 10, NS_PER_MS / 4, NS_PER_MS / 2, NS_PER_MS, 5 * NS_PER_MS / 2, 5 * NS_PER_MS,
    10 * NS_PER_MS, 25 * NS_PER_MS, 50 * NS_PER_MS, 100 * NS_PER_MS, 250 * NS_PER_MS,
    500 * NS_PER_MS, 1000 * NS_PER_MS, 2500 * NS_PER_MS, 5000 * NS_PER_MS, 10000 * NS_PER_MS};
#define COUNT_OF(a) (sizeof(a) / sizeof((a)[0]))
_Static_assert(COUNT_OF(group_bounds) <= BUCKETS_MAX, "buckets");
_Static_assert(COUNT_OF(commit_bounds_ns) <= BUCKETS_MAX, "buckets");
_Static_assert(COUNT_OF(request_bounds_ns) <= BUCKETS_MAX, "buckets");

/* The refusals tally_writes_refused_total counts, in its label order. */
static const int refusal_codes[] = {TALLY_overloaded, TALLY_shutting_down, TALLY_storage_full};
#define REFUSAL_COUNT 3
_Static_assert(COUNT_OF(refusal_codes) == REFUSAL_COUNT, "a counter per refusal");

static struct registry {
    atomic_uint_fast64_t requests[NET_OP_COUNT];
    atomic_uint_fast64_t requests_invalid;
    atomic_uint_fast64_t commands[NET_OP_COUNT][NET_METRICS_CODES_MAX + 1]; /* last: unknown */
    atomic_uint_fast64_t replays[NET_OP_COUNT];
    atomic_uint_fast64_t commits;
    atomic_uint_fast64_t listener_restarts;
    atomic_uint_fast64_t listener_probes;
    atomic_uint_fast64_t auth_refused[2]; /* unauthenticated, forbidden */
    atomic_uint_fast64_t refused[REFUSAL_COUNT]; /* by refusal_codes' order */
    _Atomic int64_t storage_full_ms;     /* wall time of the last storage_full; 0: none */
    atomic_uint_fast64_t publish_dropped;
    atomic_uint_fast64_t connections_refused[NET_REFUSAL_COUNT];
    atomic_uint_fast64_t connections_closed[NET_CLOSURE_COUNT];
    atomic_uint_fast64_t long_polls_refused;
    histogram group_size, commit_duration, request_duration[2];
    histogram cluster_queued, cluster_publish, cluster_applied; /* cluster mode only */
} reg = {
    .group_size = {group_bounds, COUNT_OF(group_bounds)},
    .commit_duration = {commit_bounds_ns, COUNT_OF(commit_bounds_ns)},
    .request_duration = {{request_bounds_ns, COUNT_OF(request_bounds_ns)},
                         {request_bounds_ns, COUNT_OF(request_bounds_ns)}},
    .cluster_queued = {request_bounds_ns, COUNT_OF(request_bounds_ns)},
    .cluster_publish = {request_bounds_ns, COUNT_OF(request_bounds_ns)},
    .cluster_applied = {request_bounds_ns, COUNT_OF(request_bounds_ns)},
};

static void observe(histogram *h, int64_t value)
{
    unsigned i = 0;
    while (i < h->count && value > h->bounds[i])
        i++;
    atomic_fetch_add_explicit(&h->hits[i], 1, RELAXED);
    atomic_fetch_add_explicit(&h->sum, value > 0 ? (uint64_t)value : 0, RELAXED);
}

static void count(atomic_uint_fast64_t *c) { atomic_fetch_add_explicit(c, 1, RELAXED); }

void net_metrics_request(net_op_id op) { count(&reg.requests[op]); }
void net_metrics_request_invalid(void) { count(&reg.requests_invalid); }
void net_metrics_listener_restart(void) { count(&reg.listener_restarts); }
void net_metrics_listener_probe(void) { count(&reg.listener_probes); }
void net_metrics_auth_refused(int code) { count(&reg.auth_refused[code == TALLY_forbidden]); }

void net_metrics_publish_dropped(uint64_t events)
{
    atomic_fetch_add_explicit(&reg.publish_dropped, events, RELAXED);
}

void net_metrics_refused(int code)
{
    for (unsigned i = 0; i < REFUSAL_COUNT; i++)
        if (refusal_codes[i] == code)
            count(&reg.refused[i]);
    if (code == TALLY_storage_full)
        atomic_store_explicit(&reg.storage_full_ms, clock_wall_ms(), RELAXED);
}

int64_t net_metrics_storage_full_age_ms(int64_t now_ms)
{
    int64_t at = atomic_load_explicit(&reg.storage_full_ms, RELAXED);
    if (at == 0)
        return -1;
    return now_ms > at ? now_ms - at : 0;
}
void net_metrics_connection_refused(net_refusal reason)
{
    count(&reg.connections_refused[reason]);
}

void net_metrics_connection_closed(net_closure reason)
{
    count(&reg.connections_closed[reason]);
}

void net_metrics_long_poll_refused(void) { count(&reg.long_polls_refused); }

void net_metrics_request_done(net_request_kind kind, int64_t elapsed_ns)
{
    observe(&reg.request_duration[kind], elapsed_ns);
}

void net_metrics_cluster_group(int64_t queued_ns, int64_t publish_ns, int64_t applied_ns)
{
    observe(&reg.cluster_queued, queued_ns);
    observe(&reg.cluster_publish, publish_ns);
    if (applied_ns >= 0)
        observe(&reg.cluster_applied, applied_ns);
}

void net_metrics_commit(uint32_t commands, int64_t commit_ns)
{
    count(&reg.commits);
    observe(&reg.group_size, commands);
    observe(&reg.commit_duration, commit_ns);
}

/* The op of a batch member: the row named like its command. */
static net_op_id member_op(ledger_command_kind kind)
{
    switch (kind) {
    case LEDGER_ACCOUNT_OPEN: return NET_OP_ACCOUNT_OPEN;
    case LEDGER_TRANSFER: return NET_OP_TRANSFER;
    case LEDGER_POST: return NET_OP_POST;
    case LEDGER_VOID: return NET_OP_VOID;
    case LEDGER_GRANT: return NET_OP_GRANT;
    case LEDGER_EXTEND: return NET_OP_EXTEND;
    case LEDGER_REVOKE: return NET_OP_REVOKE;
    case LEDGER_CHAIN: return NET_OP_CHAIN;
    case LEDGER_REVERSE: return NET_OP_TRANSFER_REVERSE;
    case LEDGER_ENDPOINT_DISABLE: return NET_OP_ENDPOINT_DISABLE;
    case LEDGER_ENDPOINT_ENABLE: return NET_OP_ENDPOINT_ENABLE;
    case LEDGER_ENDPOINT_ROTATE_SECRET: return NET_OP_ENDPOINT_ROTATE_SECRET;
    case LEDGER_ENDPOINT_RECOVER: return NET_OP_ENDPOINT_RECOVER;
    case LEDGER_ENDPOINT_RECOVERED: return NET_OP_ENDPOINT_RECOVERED;
    case LEDGER_ENDPOINT_CREATE: return NET_OP_ENDPOINT_CREATE;
    case LEDGER_ENDPOINT_UPDATE: return NET_OP_ENDPOINT_UPDATE;
    case LEDGER_ENDPOINT_DELETE: return NET_OP_ENDPOINT_DELETE;
    case LEDGER_WEBHOOK_RECEIVE: break; /* not on the wire: counted by net/http/webhooks.c */
    }
    return NET_OP_BATCH;
}

static void count_command(net_op_id op, int code, bool replayed)
{
    unsigned at = code >= 0 && code < NET_METRICS_CODES_MAX ? (unsigned)code : NET_METRICS_CODES_MAX;
    count(&reg.commands[op][at]);
    if (replayed)
        count(&reg.replays[op]);
}

/* The code command i of a write was answered with. */
static int written_code(const net_result *res, uint32_t i, int fault)
{
    return fault ? fault : res->faults[i] ? res->faults[i] : res->outcomes[i].code;
}

void net_metrics_written_refusals(const net_request *req, const net_result *res, int fault)
{
    if (req->op->kind == NET_KIND_SUBSCRIBER)
        return net_metrics_refused(fault ? fault : res->sub.code);
    for (uint32_t i = 0; i < req->write_count; i++)
        net_metrics_refused(written_code(res, i, fault));
}

void net_metrics_written(const net_request *req, const net_result *res, int fault)
{
    net_metrics_written_refusals(req, res, fault);
    net_op_id op = req->op->id;
    if (req->op->kind == NET_KIND_SUBSCRIBER) {
        count_command(op, fault ? fault : res->sub.code, false);
        return;
    }
    for (uint32_t i = 0; i < req->write_count; i++) {
        int code = written_code(res, i, fault);
        bool replayed = code == res->outcomes[i].code && res->outcomes[i].replayed;
        count_command(op == NET_OP_BATCH ? member_op(req->writes[i].command.kind) : op, code,
                      replayed);
    }
}

/* ---- the exposition ---- */

static uint64_t load(atomic_uint_fast64_t *c) { return atomic_load_explicit(c, RELAXED); }

/* One histogram's series; labels: "" or `kind="read",` (with the comma). */
static void histogram_series(net_text *b, const char *name, const char *labels, histogram *h,
                             double unit)
{
    uint64_t cumulative = 0;
    for (unsigned i = 0; i <= h->count; i++) {
        cumulative += load(&h->hits[i]);
        if (i < h->count)
            net_text_printf(b, "%s_bucket{%sle=\"%.6g\"} %llu\n", name, labels,
                            (double)h->bounds[i] / unit, (unsigned long long)cumulative);
        else
            net_text_printf(b, "%s_bucket{%sle=\"+Inf\"} %llu\n", name, labels,
                            (unsigned long long)cumulative);
    }
    size_t n = strlen(labels);
    char bare[64] = "";
    if (n > 1 && n < sizeof(bare)) /* without the trailing comma */
        snprintf(bare, sizeof(bare), "{%.*s}", (int)n - 1, labels);
    net_text_printf(b, "%s_sum%s %.9g\n", name, bare, (double)load(&h->sum) / unit);
    net_text_printf(b, "%s_count%s %llu\n", name, bare, (unsigned long long)cumulative);
}

static void write_counters(net_text *b)
{
    net_text_sample_u64(b, "tally_commits_total", "counter", "Durable commits of write groups.",
               load(&reg.commits));
    net_text_family(b, "tally_commands_total", "counter",
           "Write commands and subscriber writes answered, by op and result code.");
    for (int op = 0; op < NET_OP_COUNT; op++)
        for (int code = 0; code <= NET_METRICS_CODES_MAX; code++) {
            uint64_t v = load(&reg.commands[op][code]);
            if (v)
                net_text_printf(b, "tally_commands_total{op=\"%s\",code=\"%s\"} %llu\n",
                                net_ops[op].name, tally_strerror(code), (unsigned long long)v);
        }
    net_text_family(b, "tally_replays_total", "counter",
           "Write commands answered with their stored outcome (a retried key), by op.");
    for (int op = 0; op < NET_OP_COUNT; op++)
        if (load(&reg.replays[op]))
            net_text_printf(b, "tally_replays_total{op=\"%s\"} %llu\n", net_ops[op].name,
                            (unsigned long long)load(&reg.replays[op]));
    net_text_family(b, "tally_requests_total", "counter", "Requests decoded and accepted, by op.");
    for (int op = 0; op < NET_OP_COUNT; op++)
        net_text_printf(b, "tally_requests_total{op=\"%s\"} %llu\n", net_ops[op].name,
                        (unsigned long long)load(&reg.requests[op]));
    net_text_sample_u64(b, "tally_requests_invalid_total", "counter",
               "Requests refused before they named a known op (malformed, too large).",
               load(&reg.requests_invalid));
    net_text_sample_u64(b, "tally_listener_restarts_total", "counter",
               "Listeners (request and publish) opened again by the listener watchdog.",
               load(&reg.listener_restarts));
    net_text_sample_u64(b, "tally_listener_probes_total", "counter",
               "Probes of the request and publish listeners by the listener watchdog "
               "(never counted as connections).",
               load(&reg.listener_probes));
    net_text_family(b, "tally_auth_refused_total", "counter",
                    "Requests refused by --auth before anything was stored, by reason.");
    net_text_printf(b, "tally_auth_refused_total{reason=\"unauthenticated\"} %llu\n",
                    (unsigned long long)load(&reg.auth_refused[0]));
    net_text_printf(b, "tally_auth_refused_total{reason=\"forbidden\"} %llu\n",
                    (unsigned long long)load(&reg.auth_refused[1]));
    net_text_family(b, "tally_writes_refused_total", "counter",
                    "Writes and subscriber writes refused, nothing of them stored, by reason "
                    "(overloaded, shutting_down, storage_full).");
    for (unsigned i = 0; i < REFUSAL_COUNT; i++)
        net_text_printf(b, "tally_writes_refused_total{reason=\"%s\"} %llu\n",
                        tally_strerror(refusal_codes[i]), (unsigned long long)load(&reg.refused[i]));
    net_text_sample_u64(b, "tally_publish_dropped_total", "counter",
                        "Events committed but not handed to the PUB socket (too large, beyond a "
                        "commit's publish limit, out of memory, refused); NNG's own drops for a "
                        "slow reader are not counted: NNG 1.5.2 does not report them.",
                        load(&reg.publish_dropped));
}

/* Cluster mode's phases of a write (net_metrics_cluster_group). */
static void write_cluster_histograms(net_text *b)
{
    net_text_family(b, "tally_cluster_queued_seconds", "histogram",
                    "Cluster mode: a group of writes from its oldest request's arrival to its "
                    "publish (waiting for this node's groups before it).");
    histogram_series(b, "tally_cluster_queued_seconds", "", &reg.cluster_queued, 1e9);
    net_text_family(b, "tally_cluster_publish_seconds", "histogram",
                    "Cluster mode: a group's publish to the command stream until JetStream's "
                    "ack (a quorum stored it), retries included.");
    histogram_series(b, "tally_cluster_publish_seconds", "", &reg.cluster_publish, 1e9);
    net_text_family(b, "tally_cluster_apply_wait_seconds", "histogram",
                    "Cluster mode: a group from JetStream's ack until this node committed its "
                    "message (the stream's delivery, the groups before it, the apply's commit).");
    histogram_series(b, "tally_cluster_apply_wait_seconds", "", &reg.cluster_applied, 1e9);
}

static void write_histograms(net_text *b)
{
    net_text_family(b, "tally_group_size", "histogram", "Commands per durable commit.");
    histogram_series(b, "tally_group_size", "", &reg.group_size, 1);
    net_text_family(b, "tally_commit_duration_seconds", "histogram",
           "Time of each durable commit (pages, fdatasync, meta page).");
    histogram_series(b, "tally_commit_duration_seconds", "", &reg.commit_duration, 1e9);
    net_text_family(b, "tally_request_duration_seconds", "histogram",
           "Requests from arrival to the reply leaving, by kind (long-polls not observed).");
    histogram_series(b, "tally_request_duration_seconds", "kind=\"read\",",
                     &reg.request_duration[NET_REQUEST_READ], 1e9);
    histogram_series(b, "tally_request_duration_seconds", "kind=\"write\",",
                     &reg.request_duration[NET_REQUEST_WRITE], 1e9);
}

static int64_t age_s(int64_t since_ms, int64_t now_ms)
{
    return since_ms > 0 && now_ms > since_ms ? (now_ms - since_ms) / 1000 : 0;
}

static void write_store(net_text *b, const net_store_figures *f, int64_t now_ms)
{
    net_text_sample_u64(b, "tally_log_head_seq", "gauge", "Seq of the last committed event.", f->head.seq);
    net_text_sample_u64(b, "tally_log_floor_seq", "gauge",
               "Last seq removed by log retention (0: none removed).", f->log_floor);
    net_text_sample_u64(b, "tally_events_total", "counter", "Events committed since the store began.",
               f->head.seq);
    net_text_sample_u64(b, "tally_log_events", "gauge", "Events stored in the log now.", f->events);
    net_text_sample_u64(b, "tally_accounts", "gauge", "Accounts stored.", f->accounts);
    net_text_sample_u64(b, "tally_transfers", "gauge", "Transfers and holds stored.", f->transfers);
    net_text_sample_u64(b, "tally_entitlements", "gauge", "Entitlements stored.", f->entitlements);
    net_text_sample_u64(b, "tally_inbox_records", "gauge", "Idempotency records stored.", f->inbox);
    net_text_family(b, "tally_inbox_oldest_age_seconds", "gauge",
           "Age of the oldest idempotency record (0: none).");
    net_text_printf(b, "tally_inbox_oldest_age_seconds %lld\n",
                    (long long)age_s(f->inbox_oldest_ms, now_ms));
    net_text_sample_u64(b, "tally_map_used_bytes", "gauge", "Bytes of the LMDB map in use.",
               f->map_used_bytes);
    net_text_sample_u64(b, "tally_map_size_bytes", "gauge", "Size of the LMDB map now.", f->map_size_bytes);
    net_text_sample_u64(b, "tally_map_max_bytes", "gauge",
               "Size the LMDB map may grow to (--map-max-mb).", f->map_max_bytes);
}

static void write_view(net_text *b, const net_metrics_view *v)
{
    net_text_sample_u64(b, "tally_connections", "gauge", "Request connections open.", v->connections);
    static const char *const refusals[NET_REFUSAL_COUNT] = {"total", "per_address", "reserved"};
    net_text_family(b, "tally_connections_refused_total", "counter",
                    "Request connections closed at connect, by the limit that refused them.");
    for (int i = 0; i < NET_REFUSAL_COUNT; i++)
        net_text_printf(b, "tally_connections_refused_total{reason=\"%s\"} %llu\n", refusals[i],
                        (unsigned long long)load(&reg.connections_refused[i]));
    static const char *const closures[NET_CLOSURE_COUNT] = {"request_timeout", "idle",
                                                            "unread_replies"};
    net_text_family(b, "tally_connections_closed_total", "counter",
                    "Request connections closed by tallyd, by reason.");
    for (int i = 0; i < NET_CLOSURE_COUNT; i++)
        net_text_printf(b, "tally_connections_closed_total{reason=\"%s\"} %llu\n", closures[i],
                        (unsigned long long)load(&reg.connections_closed[i]));
    net_text_sample_u64(b, "tally_long_polls_refused_total", "counter",
                        "Long-polls beyond --max-long-polls-per-connection, answered at once.",
                        load(&reg.long_polls_refused));
    net_text_sample_u64(b, "tally_publish_connections", "gauge", "Connections to the PUB endpoint.",
               v->publish_subscribers);
    net_text_sample_u64(b, "tally_long_polls_parked", "gauge",
               "Long-polls parked now: log_reads with wait_ms that found nothing new, "
               "sub_fetches that found nothing to deliver and reads waiting for their min_seq, "
               "over any transport.",
               v->long_polls_parked);
    net_text_sample_u64(b, "tally_http_connections", "gauge", "HTTP connections open.",
               v->http_connections);
    net_text_sample_u64(b, "tally_http_requests_waiting", "gauge",
               "HTTP requests waiting for their answer (long-polls, requests at the writer).",
               v->http_waiting);
    net_text_sample_u64(b, "tally_http_requests_in_flight", "gauge",
               "HTTP requests begun (headers in) whose reply has not left, this scrape included.",
               v->http_in_flight);
    net_text_sample_u64(b, "tally_write_queue_depth", "gauge", "Writes waiting for the writer.",
                        v->write_queue_depth);
    net_text_family(b, "tally_writer_stalled_seconds", "gauge",
                    "Time the writer has made no progress while writes wait (0: none waits).");
    net_text_printf(b, "tally_writer_stalled_seconds %.3f\n", (double)v->writer_stall_ms / 1000);
    if (v->cluster) {
        net_text_sample_u64(b, "tally_cluster_position", "gauge",
                            "The command stream position this node has applied (cluster mode).",
                            v->cluster_position);
        net_text_sample_u64(b, "tally_cluster_stream_last_seq", "gauge",
                            "The command stream's last message, as this node last saw it.",
                            v->cluster_stream_last_seq);
        net_text_sample_u64(b, "tally_cluster_lag_messages", "gauge",
                            "Messages of the stream this node has not applied yet.",
                            v->cluster_stream_last_seq > v->cluster_position
                                ? v->cluster_stream_last_seq - v->cluster_position
                                : 0);
        net_text_sample_u64(b, "tally_cluster_checkpoint_position", "gauge",
                            "The last checkpoint position this node compared (0: none yet).",
                            v->cluster_checkpoint_seq);
        net_text_sample_u64(b, "tally_cluster_checkpoint_agreeing", "gauge",
                            "Nodes whose state digest at the last checkpoint is this node's.",
                            v->cluster_checkpoint_agreeing);
        net_text_sample_u64(b, "tally_cluster_diverged", "gauge",
                            "1 when this node stopped serving: it disagrees with the majority's "
                            "checkpoint, or the stream contradicts its store (docs/CLUSTER.md).",
                            v->cluster_diverged);
    }
    if (v->disk_known)
        net_text_sample_u64(b, "tally_disk_free_bytes", "gauge",
                            "Bytes free for tallyd on the data directory's filesystem.",
                            v->disk_free_bytes);
    net_text_sample_u64(b, "tally_ready", "gauge",
                        "1 when every readiness check passes (GET /readyz 200), else 0.", v->ready);
    net_text_family(b, "tally_health_checks_failing", "gauge",
                    "Health checks failing now, by class (readiness, alert).");
    net_text_printf(b, "tally_health_checks_failing{class=\"readiness\"} %u\n",
                    v->readiness_failing);
    net_text_printf(b, "tally_health_checks_failing{class=\"alert\"} %u\n", v->alerts_failing);
    net_text_family(b, "tally_build_info", "gauge", "Always 1; the version of tallyd as a label.");
    net_text_printf(b, "tally_build_info{version=\"");
    net_text_escaped(b, v->version);
    net_text_printf(b, "\"} 1\n");
}

/* ---- per durable subscriber ---- */

typedef struct sub_row {
    sub_state state;
    net_sub_figures fig;
} sub_row;

typedef struct sub_rows {
    sub_row *rows;
    size_t count;
    store_txn *t;
    int64_t now_ms;
} sub_rows;

static int collect_sub(const sub_state *s, void *ctx)
{
    sub_rows *r = ctx;
    if (r->count == TALLY_SUBSCRIBERS_MAX)
        return TALLY_ok; /* cannot happen: sub_create refuses more */
    sub_row *row = &r->rows[r->count];
    row->state = *s;
    int rc = net_sub_figures_get(r->t, s, r->now_ms, &row->fig);
    if (rc == TALLY_ok)
        r->count++;
    return rc;
}

typedef enum sub_value {
    SUB_PENDING, SUB_IN_FLIGHT, SUB_ACK_FLOOR, SUB_OLDEST_UNACKED, SUB_REDELIVERED,
    SUB_DEAD_LETTERS, SUB_OLDEST_DEAD_LETTER, SUB_LAST_FETCH, SUB_VALUE_COUNT
} sub_value;

static const struct {
    const char *name, *type, *help;
} sub_families[SUB_VALUE_COUNT] = {
    [SUB_PENDING] = {"tally_subscriber_pending", "gauge", "Events after the ack floor (head - ack floor)."},
    [SUB_IN_FLIGHT] = {"tally_subscriber_in_flight", "gauge", "Events delivered and not yet acknowledged."},
    [SUB_ACK_FLOOR] = {"tally_subscriber_ack_floor_seq", "gauge", "Seq at or below which every event is acknowledged or parked."},
    [SUB_OLDEST_UNACKED] = {"tally_subscriber_oldest_unacked_age_seconds", "gauge", "Age of the first event after the ack floor (0: none pending)."},
    [SUB_REDELIVERED] = {"tally_subscriber_redelivered_total", "counter", "Deliveries after the first, since the subscriber was created."},
    [SUB_DEAD_LETTERS] = {"tally_subscriber_dead_letters", "gauge", "Events in the dead-letter queue."},
    [SUB_OLDEST_DEAD_LETTER] = {"tally_subscriber_oldest_dead_letter_age_seconds", "gauge", "Time since the oldest dead letter was parked (0: none)."},
    [SUB_LAST_FETCH] = {"tally_subscriber_last_fetch_age_seconds", "gauge", "Time since the subscriber last fetched (since tallyd started, if it has not)."},
};

static long long sub_value_of(const sub_row *r, sub_value v)
{
    switch (v) {
    case SUB_PENDING: return (long long)r->fig.pending;
    case SUB_IN_FLIGHT: return r->state.in_flight;
    case SUB_ACK_FLOOR: return (long long)r->state.ack_floor;
    case SUB_OLDEST_UNACKED: return r->fig.oldest_unacked_age_s;
    case SUB_REDELIVERED: return (long long)r->state.redelivered;
    case SUB_DEAD_LETTERS: return (long long)r->state.dead_letters;
    case SUB_OLDEST_DEAD_LETTER: return r->fig.oldest_dead_letter_age_s;
    case SUB_LAST_FETCH: return r->fig.last_fetch_age_s;
    case SUB_VALUE_COUNT: break;
    }
    return 0;
}

/* The dead letters' owner as labels (docs/SUBSCRIBERS.md, "Owner"):
 * ,contact="..",alert_route=".." for those set. Their texts hold no '"',
 * '\\' or control characters (sub_owner_text_check): nothing to escape. */
static void owner_labels(const sub_config *c, char *out, size_t cap)
{
    int n = 0;
    if (c->contact[0])
        n = snprintf(out, cap, ",contact=\"%s\"", c->contact);
    if (c->alert_route[0] && n >= 0 && (size_t)n < cap)
        snprintf(out + n, cap - (size_t)n, ",alert_route=\"%s\"", c->alert_route);
}

static int write_subscribers(net_text *b, store_txn *t, int64_t now_ms)
{
    sub_rows r = {calloc(TALLY_SUBSCRIBERS_MAX, sizeof(sub_row)), 0, t, now_ms};
    if (r.rows == NULL)
        return TALLY_internal;
    int rc = sub_list(t, collect_sub, &r);
    net_text_sample_u64(b, "tally_subscribers", "gauge", "Durable subscribers.", r.count);
    for (int v = 0; rc == TALLY_ok && v < SUB_VALUE_COUNT; v++) {
        net_text_family(b, sub_families[v].name, sub_families[v].type, sub_families[v].help);
        for (size_t i = 0; i < r.count; i++) { /* names are A-Z a-z 0-9 . _ - : nothing to escape */
            char owner[2 * TALLY_SUB_OWNER_BYTES_MAX + 32] = "";
            if (v == SUB_DEAD_LETTERS || v == SUB_OLDEST_DEAD_LETTER)
                owner_labels(&r.rows[i].state.config, owner, sizeof(owner));
            net_text_printf(b, "%s{subscriber=\"%s\"%s} %lld\n", sub_families[v].name,
                            r.rows[i].state.name, owner, sub_value_of(&r.rows[i], (sub_value)v));
        }
    }
    free(r.rows);
    return rc;
}

int net_metrics_write(net_text *out, store_txn *t, const net_metrics_view *view, int64_t now_ms)
{
    net_store_figures f;
    int rc = net_store_figures_get(t, &f);
    if (rc != TALLY_ok)
        return rc;
    write_counters(out);
    write_histograms(out);
    if (view->cluster)
        write_cluster_histograms(out);
    write_store(out, &f, now_ms);
    write_view(out, view);
    rc = write_subscribers(out, t, now_ms);
    process_metrics_write(out);
    return rc == TALLY_ok && out->bad ? TALLY_internal : rc;
}
