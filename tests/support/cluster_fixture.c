/*
 * cluster_fixture.c — three tallyd in cluster mode on a 3-node JetStream
 * cluster, and the checks every cluster suite makes of them
 * (cluster_fixture.h).
 */
#include "config.h"

#include "tests/support/cluster_fixture.h"

#include "common/clock.h"
#include "common/limits.h"
#include "common/msgpack_safe.h"
#include "tests/support/test_support.h"
#include "tests/support/wait.h"
#include "tests/support/wire.h"

#include <check.h>
#include <inttypes.h>
#include <nats/nats.h>
#include <stdio.h>
#include <string.h>

#define LOG_PAGE 100

#define NODE_ARGS_MAX (12 + CLUSTER_FIXTURE_EXTRA_MAX + 1)

static const char *const *node_args(cluster_fixture *f, int i, const char *args[NODE_ARGS_MAX])
{
    snprintf(f->node_arg[i], sizeof(f->node_arg[i]), "%c", 'a' + i);
    const char *const list[] = {"--cluster", f->urls, "--node", f->node_arg[i],
                                "--cluster-read-wait-ms", "3000", "--cluster-tick-ms", "200",
                                "--cluster-checkpoint-every", CLUSTER_FIXTURE_CHECKPOINT_EVERY,
                                "--http", "http://127.0.0.1:0"};
    size_t n = sizeof(list) / sizeof(list[0]);
    memcpy(args, list, sizeof(list));
    for (size_t k = 0; f->extra[k]; k++)
        args[n++] = f->extra[k];
    args[n] = NULL;
    return args;
}

/* One request answered on a node's new client: its connection is up.
 * NNG 1.5.2 never frees a dialer whose socket is closed while it is still
 * connecting (as with a listener stopped in its negotiation,
 * tests/lsan.supp), and tests close a node's client right after the
 * cluster starts. */
static void client_connected(tally_client *c)
{
    wire_reply r;
    wire_call(c, &r, "stats", "");
    wire_expect(&r, "ok");
    wire_done(&r);
}

void node_start(cluster_fixture *f, int i)
{
    const char *args[NODE_ARGS_MAX];
    wire_server_start(&f->node[i], &f->client[i], node_args(f, i, args));
    client_connected(f->client[i]);
}

void node_restart(cluster_fixture *f, int i)
{
    const char *args[NODE_ARGS_MAX];
    tally_client_close(f->client[i]);
    f->client[i] = NULL;
    wire_server_restart(&f->node[i], &f->client[i], node_args(f, i, args));
}

void cluster_up(cluster_fixture *f)
{
    cluster_up_with(f, NULL);
}

void cluster_up_with(cluster_fixture *f, const char *const *extra)
{
    memset(f, 0, sizeof(*f));
    for (size_t k = 0; extra && extra[k]; k++) {
        ck_assert_uint_lt(k, CLUSTER_FIXTURE_EXTRA_MAX);
        f->extra[k] = extra[k];
    }
    nats_cluster_start(&f->nats);
    size_t used = 0;
    for (int i = 0; i < NATS_CLUSTER_NODES; i++)
        used += (size_t)snprintf(f->urls + used, sizeof(f->urls) - used, "%s%s", i ? "," : "",
                                 f->nats.urls[i]);
    /* one after the other: the first creates the stream and its genesis */
    for (int i = 0; i < NODES; i++)
        node_start(f, i);
}

void cluster_down(cluster_fixture *f)
{
    for (int i = 0; i < NODES; i++) {
        if (f->client[i])
            wire_server_stop(&f->node[i], &f->client[i]);
        tallyd_cleanup(&f->node[i]);
    }
    nats_cluster_stop(&f->nats);
}

/* A read with min_seq waits --cluster-read-wait-ms at most, then says
 * not_caught_up; a node whose stream consumer was on a killed
 * nats-server, on a loaded machine, may need several such waits before it
 * reads on: ask again, up to a bound. */
void await_applied(tally_client *c, uint64_t min_seq)
{
    int64_t until = test_deadline_ms(120000);
    for (;;) {
        wire_reply r;
        wire_call(c, &r, "stats", "u", "min_seq", min_seq);
        if (strcmp(r.code, "not_caught_up") != 0 || clock_mono_ms() >= until) {
            wire_expect(&r, "ok");
            wire_done(&r);
            return;
        }
        wire_done(&r);
    }
}

/* c's head seq once it has applied position min_seq. */
static uint64_t node_head(tally_client *c, uint64_t min_seq)
{
    wire_reply r;
    await_applied(c, min_seq);
    wire_call(c, &r, "stats", "u", "min_seq", min_seq);
    wire_expect(&r, "ok");
    uint64_t head = wire_u64(r.map, "head_seq");
    wire_done(&r);
    return head;
}

/* The events 1..upto of c's log, each event's bytes in order, into out:
 * the bytes used. */
static size_t node_log(tally_client *c, uint64_t upto, uint8_t *out)
{
    wire_reply r;
    size_t used = 0;
    for (uint64_t from = 1; from <= upto;) {
        uint64_t limit = upto - from + 1 < LOG_PAGE ? upto - from + 1 : LOG_PAGE;
        wire_call(c, &r, "log_read", "uu", "from_seq", from, "limit", limit);
        wire_expect(&r, "ok");
        const msgpack_object *ev = wire_field(r.map, "events");
        ck_assert_int_eq(ev->type, MSGPACK_OBJECT_ARRAY);
        ck_assert_uint_gt(ev->via.array.size, 0);
        for (uint32_t i = 0; i < ev->via.array.size && from + i <= upto; i++) {
            const void *b;
            size_t n;
            ck_assert(msgpack_safe_get_bin(&ev->via.array.ptr[i], &b, &n));
            ck_assert_uint_le(used + n, LOG_BYTES_MAX);
            memcpy(out + used, b, n);
            used += n;
        }
        from += ev->via.array.size;
        wire_done(&r);
    }
    return used;
}

/* Event seq of c's log: its length, its first size bytes into out. */
static size_t event_bytes(tally_client *c, uint64_t seq, uint8_t *out, size_t size)
{
    wire_reply r;
    wire_call(c, &r, "log_read", "uu", "from_seq", seq, "limit", (uint64_t)1);
    wire_expect(&r, "ok");
    const msgpack_object *ev = wire_field(r.map, "events");
    ck_assert(ev->type == MSGPACK_OBJECT_ARRAY && ev->via.array.size == 1);
    const void *b;
    size_t n;
    ck_assert(msgpack_safe_get_bin(&ev->via.array.ptr[0], &b, &n));
    memcpy(out, b, n < size ? n : size);
    wire_done(&r);
    return n;
}

/* The first event where other's log differs from a's, of events
 * 1..upto (upto + 1 when none does). */
static uint64_t first_difference(tally_client *a, tally_client *other, uint64_t upto)
{
    static uint8_t ea[TALLY_EVENT_BYTES_MAX], eb[TALLY_EVENT_BYTES_MAX];
    uint64_t seq = 1;
    for (; seq <= upto; seq++) {
        size_t na = event_bytes(a, seq, ea, sizeof(ea));
        size_t nb = event_bytes(other, seq, eb, sizeof(eb));
        if (na != nb || memcmp(ea, eb, na < sizeof(ea) ? na : sizeof(ea)) != 0)
            break;
    }
    return seq;
}

uint64_t assert_logs_agree(cluster_fixture *f, uint64_t min_seq, uint64_t heads[NODES])
{
    static uint8_t logs[NODES][LOG_BYTES_MAX];
    size_t len[NODES];
    uint64_t upto = UINT64_MAX;
    for (int i = 0; i < NODES; i++) {
        heads[i] = node_head(f->client[i], min_seq);
        if (heads[i] < upto)
            upto = heads[i];
    }
    for (int i = 0; i < NODES; i++)
        len[i] = node_log(f->client[i], upto, logs[i]);
    for (int i = 1; i < NODES; i++)
        ck_assert_msg(len[i] == len[0] && memcmp(logs[i], logs[0], len[0]) == 0,
                      "node %c's log differs from node a's, first at event %" PRIu64
                      " (of the %" PRIu64 " both hold)",
                      'a' + i, first_difference(f->client[0], f->client[i], upto), upto);
    return upto;
}

uint64_t stats_u64(tally_client *c, const char *field)
{
    wire_reply r;
    wire_call(c, &r, "stats", "");
    uint64_t v = wire_u64(r.map, field);
    wire_done(&r);
    return v;
}

void assert_converged(cluster_fixture *f, uint64_t min_seq)
{
    uint64_t head[NODES];
    assert_logs_agree(f, min_seq, head);
    for (int i = 1; i < NODES; i++) {
        ck_assert_msg(head[i] == head[0], "node %c head %" PRIu64 ", node a %" PRIu64, 'a' + i,
                      head[i], head[0]);
        static const char *const counts[] = {"accounts", "transfers", "entitlements", "inbox"};
        for (size_t k = 0; k < sizeof(counts) / sizeof(counts[0]); k++)
            ck_assert_uint_eq(stats_u64(f->client[i], counts[k]),
                              stats_u64(f->client[0], counts[k]));
    }
    for (int i = 0; i < NODES; i++)
        tallyd_recon_clean(&f->node[i]);
}

/* Whether the stream has a leader and every other replica is current. */
static bool stream_replicas_current(const cluster_fixture *f)
{
    natsConnection *nc = NULL;
    jsCtx *js = NULL;
    jsStreamInfo *si = NULL;
    jsErrCode jerr = 0;
    jsOptions o;
    bool current = false;
    if (natsConnection_ConnectTo(&nc, f->urls) == NATS_OK && jsOptions_Init(&o) == NATS_OK) {
        o.Wait = 1000;
        if (natsConnection_JetStream(&js, nc, &o) == NATS_OK &&
            js_GetStreamInfo(&si, js, "TALLY_COMMANDS", NULL, &jerr) == NATS_OK && si->Cluster &&
            si->Cluster->Leader && si->Cluster->Leader[0]) {
            current = si->Cluster->ReplicasLen == NATS_CLUSTER_NODES - 1;
            for (int i = 0; current && i < si->Cluster->ReplicasLen; i++)
                current = si->Cluster->Replicas[i]->Current && !si->Cluster->Replicas[i]->Offline;
        }
    }
    jsStreamInfo_Destroy(si);
    jsCtx_Destroy(js);
    natsConnection_Destroy(nc);
    return current;
}

bool await_stream_current(const cluster_fixture *f)
{
    int64_t until = test_deadline_ms(NATS_CLUSTER_WAIT_MS);
    while (!stream_replicas_current(f)) {
        if (clock_mono_ms() >= until)
            return false;
        test_pause_ms(200);
    }
    return true;
}
