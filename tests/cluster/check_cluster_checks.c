/*
 * check_cluster_checks.c — cluster mode's checks on itself (docs/CLUSTER.md,
 * "Divergence is detected, never served", and "Operations"), on three
 * nats-servers in one JetStream cluster and three tallyd
 * (tests/support/cluster_nodes.h):
 *
 * - checkpoints agree on a healthy cluster (accounts opened and a
 *   subscriber's create, fetch and ack, each on another node): every node
 *   compares the
 *   checkpoints (every 32 positions here) with its own digest, and shows
 *   the last one with 3 of 3 nodes agreeing in /metrics, GET /v1/cluster
 *   and `tally cluster status`; none diverged; each warned at start of
 *   the servers' version (2.9.10 cannot sync every write, and is of the
 *   versions Jepsen found losing acknowledged writes); every node that
 *   took writes observed their groups' phases in /metrics (queued,
 *   publish to JetStream's ack, ack to its own apply: counts and sums);
 * - a node that diverges for real (--test-cluster-diverge-at leaves one
 *   request of another node's group out of its apply) stops at the next
 *   checkpoint: tally_cluster_diverged 1, a log line naming the position
 *   and the nodes, writes and reads answered cluster_diverged, /readyz
 *   503; the two others go on taking writes and name it in their log;
 * - the stream lost under running nodes (deleted, an empty one made
 *   again): every node stops with "stream behind this node";
 * - the stream lost and grown again past the nodes' positions between
 *   two answers about it: a node told once that it ended before its
 *   position finds another message there and stops;
 * - a node whose consumer delivers the stream a position short
 *   (--test-cluster-shift-at) answers no write at a cluster_seq where the
 *   stream does not hold it: its first own group acknowledged elsewhere
 *   stops it;
 * - a node whose applier is held while the messages it needs age out of
 *   the stream stops serving once it reads on ("older than the stream's
 *   first message");
 * - /readyz fails while a node is more than --cluster-ready-lag messages
 *   behind the stream (its applier held by --test-writer-hold-file), and
 *   passes once it caught up;
 * - nats-servers that require a user and password: a node without a
 *   login, with a wrong password, or with a password file others may read
 *   refuses to start, saying so; with --cluster-user and
 *   --cluster-password-file it starts and takes writes;
 * - a single-node store becomes the first node of a new cluster with
 *   --cluster-init (refused without it on an empty stream, and with it on
 *   a stream that holds messages), keeping its accounts; a node started
 *   from its backup joins and catches up.
 *
 * Without nats-server installed the program says so and exits 77.
 */
#include "config.h"

#include "common/clock.h"
#include "common/error.h"
#include "net/cluster/server_info.h"
#include "net/cluster/stream.h"

#include "tests/support/cluster_nodes.h"
#include "tests/support/http_client.h"
#include "tests/support/run.h"
#include "tests/support/suite.h"
#include "tests/support/test_support.h"
#include "tests/support/wait.h"
#include "tests/support/wire.h"

#include <check.h>
#include <fcntl.h>
#include <inttypes.h>
#include <nats/nats.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define TEST_TIMEOUT_S 600
#define NODES 3
#define CHECKPOINT_EVERY "32"
#define WAIT_MS 60000

/* account_open of account id (key open-ID) on c: its code must be code. */
static void open_expect(tally_client *c, uint64_t id, const char *code)
{
    wire_reply r;
    char key[32];
    snprintf(key, sizeof(key), "open-%" PRIu64, id);
    wire_call(c, &r, "account_open", "ssuuu", "consumer", "t", "key", key, "id", id, "ledger",
              (uint64_t)1, "code", (uint64_t)1);
    wire_expect(&r, code);
    wire_done(&r);
}

static void open_account(tally_client *c, uint64_t id)
{
    open_expect(c, id, "ok");
}

/* Node i answers a write (account id) cluster_diverged, and with
 * also_read a read too; asked by a client that does not retry (libtally
 * retries cluster_diverged, moving on along a list). */
static void assert_refused(const cluster_nodes *c, int i, uint64_t id, bool also_read)
{
    tally_client_options o = {.url = c->node[i].url, .timeout_ms = 30000, .consumer = "test",
                              .retries = 0, .retries_set = true};
    tally_client *once = NULL;
    ck_assert_int_eq(tally_client_open(&o, &once), TALLY_ok);
    open_expect(once, id, "cluster_diverged");
    if (also_read) {
        wire_reply r;
        wire_call(once, &r, "account_get", "u", "id", (uint64_t)1);
        wire_expect(&r, "cluster_diverged");
        wire_done(&r);
    }
    tally_client_close(once);
}

/* Three nodes checkpointing every `every` positions, node c with the
 * options extra_c too. */
static void cluster_with_every(cluster_nodes *c, const char *every, const char *const *extra_c)
{
    cluster_nodes_init(c, NODES);
    for (int i = 0; i < NODES; i++) {
        c->args[i][0] = "--cluster-checkpoint-every";
        c->args[i][1] = every;
        for (int k = 0; i == NODES - 1 && extra_c && extra_c[k]; k++)
            c->args[i][2 + k] = extra_c[k];
        cluster_nodes_start(c, i);
    }
}

/* A sample of node i's scrape as a double (sums are in seconds); -1 when
 * it is not there. */
static double metric_value(const cluster_nodes *c, int i, const char *series)
{
    int status = 0;
    char *text = test_http_get(c->node[i].http_port, "/metrics", &status);
    char line[160];
    snprintf(line, sizeof(line), "\n%s ", series);
    const char *at = text && status == 200 ? strstr(text, line) : NULL;
    double v = at ? strtod(at + strlen(line), NULL) : -1;
    free(text);
    return v;
}

/* Node i observed the phases of the groups it took (net_metrics_cluster_group):
 * each histogram counted at least one group, publish and apply wait with a
 * positive sum. */
static void assert_group_phases_observed(const cluster_nodes *c, int i)
{
    static const char *const families[] = {"tally_cluster_queued_seconds",
                                           "tally_cluster_publish_seconds",
                                           "tally_cluster_apply_wait_seconds"};
    for (unsigned f = 0; f < 3; f++) {
        char series[96];
        snprintf(series, sizeof(series), "%s_count", families[f]);
        double count = metric_value(c, i, series);
        snprintf(series, sizeof(series), "%s_sum", families[f]);
        double sum = metric_value(c, i, series);
        ck_assert_msg(count >= 1 && (f == 0 ? sum >= 0 : sum > 0),
                      "node %d: %s count %g sum %g", i, families[f], count, sum);
    }
}

static void cluster_with(cluster_nodes *c, const char *const *extra_c)
{
    cluster_with_every(c, CHECKPOINT_EVERY, extra_c);
}

static char *http_body(const cluster_nodes *c, int i, const char *path, int *status)
{
    char *body = test_http_get(c->node[i].http_port, path, status);
    ck_assert_msg(body != NULL, "GET %s on node %d: no answer", path, i);
    return body;
}

/* Every node compared a checkpoint at position at or later, all three
 * agreeing, none diverged. */
static void assert_all_agree(const cluster_nodes *c, unsigned at)
{
    for (int i = 0; i < NODES; i++) {
        ck_assert_msg(test_metrics_sample_reaches(c->node[i].http_port,
                                                  "tally_cluster_checkpoint_position", at, WAIT_MS),
                      "node %d compared no checkpoint", i);
        ck_assert_msg(test_metrics_sample_reaches(c->node[i].http_port,
                                                  "tally_cluster_checkpoint_agreeing", 3, WAIT_MS),
                      "node %d: fewer than 3 nodes agree (diverged: %d)", i,
                      (int)test_metrics_sample(c->node[i].http_port, "tally_cluster_diverged"));
        ck_assert_int_eq(test_metrics_sample(c->node[i].http_port, "tally_cluster_diverged"), 0);
    }
}

START_TEST(test_checkpoints_agree)
{
    cluster_nodes c;
    cluster_with(&c, NULL);
    for (uint64_t k = 1; k <= 40; k++)
        open_account(c.client[k % NODES], k);
    /* subscriber writes too (their replies read the store): on three nodes */
    wire_reply r;
    wire_call(c.client[0], &r, "sub_create", "su", "name", "audit", "ack_wait_ms",
              (uint64_t)60000);
    wire_expect(&r, "ok");
    wire_done(&r);
    wire_call(c.client[1], &r, "sub_fetch", "su", "name", "audit", "max", (uint64_t)5);
    wire_expect(&r, "ok");
    wire_done(&r);
    wire_call(c.client[2], &r, "sub_ack", "sU", "name", "audit", "done", 1u, (uint64_t[]){1});
    wire_expect(&r, "ok");
    wire_done(&r);
    /* positions move on with the writes and the ticks: each node compares
     * the checkpoint after them (64), all three agreeing */
    assert_all_agree(&c, 64);
    for (int i = 0; i < NODES; i++)
        assert_group_phases_observed(&c, i);
    int status = 0;
    char *body = http_body(&c, 1, "/v1/cluster", &status);
    ck_assert_int_eq(status, 200);
    ck_assert_msg(strstr(body, "\"checkpoint_position\":") && strstr(body, "\"diverged\":false") &&
                      strstr(body, "\"checkpoint_agreeing\":3") &&
                      strstr(body, "\"checkpoint_nodes\":3"),
                  "%s", body);
    free(body);
    /* the start-up warnings about the servers' version (2.9.10 here) */
    char version[CLUSTER_SERVER_VERSION_BYTES], line[128];
    ck_assert_int_eq(cluster_server_version(c.nats.urls[0], 10000, version, sizeof(version)),
                     TALLY_ok);
    snprintf(line, sizeof(line), "cluster: nats-server %s at %s: ", version,
             c.nats.urls[0] + strlen("nats://"));
    bool old = cluster_version_compare(version, "2.10.0") < 0;
    bool jepsen = cluster_version_compare(version, "2.12.2") < 0;
    ck_assert_msg(tallyd_log_wait(&c.node[0], line, jepsen ? 1000 : 1) == jepsen, "%s", line);
    ck_assert(!old || tallyd_log_wait(&c.node[0], "it cannot sync every write to disk", 1000));
    ck_assert(!jepsen || tallyd_log_wait(&c.node[0], "Jepsen's analysis of NATS 2.12.1", 1000));
    char list[1024];
    snprintf(list, sizeof(list), "%s,%s,%s", c.node[0].url, c.node[1].url, c.node[2].url);
    const char *argv[] = {tallyd_program("tally"), "--url", list, "cluster", "status", NULL};
    char *out = NULL, *err = NULL;
    ck_assert_int_eq(test_run(argv, NULL, &out, &err), 0);
    ck_assert_msg(strstr(out, "AGREEMENT") && strstr(out, "3/3"), "%s", out);
    free(out);
    free(err);
    cluster_nodes_down(&c);
}
END_TEST

/* A cluster whose node c runs with test option option at position at,
 * and 40 accounts opened on node a. */
static void cluster_with_test_option(cluster_nodes *c, const char *option, const char *at)
{
    const char *extra[] = {option, at, NULL};
    cluster_with(c, extra);
    for (uint64_t k = 1; k <= 40; k++)
        open_account(c->client[0], k);
}

START_TEST(test_a_diverged_node_stops)
{
    cluster_nodes c;
    /* node c leaves a request of one of a's groups out: its store differs */
    cluster_with_test_option(&c, "--test-cluster-diverge-at", "4");
    ck_assert_msg(tallyd_log_wait(&c.node[2], "applied without its last request", WAIT_MS),
                  "node c applied every request");
    ck_assert_msg(test_metrics_sample_reaches(c.node[2].http_port, "tally_cluster_diverged", 1,
                                              WAIT_MS),
                  "node c did not stop");
    ck_assert(tallyd_log_wait(&c.node[2], "stops serving: diverged at position 32", 1000));
    ck_assert(tallyd_log_wait(&c.node[2], "differs from the majority's, held by nodes a, b", 1000));
    /* the others: agreeing, naming c, and taking writes */
    for (int i = 0; i < 2; i++) {
        ck_assert_msg(tallyd_log_wait(&c.node[i], "node(s) c diverged from the majority", WAIT_MS),
                      "node %d did not name c", i);
        ck_assert_int_eq(test_metrics_sample(c.node[i].http_port, "tally_cluster_diverged"), 0);
    }
    open_account(c.client[1], 100);
    /* node c: writes and reads refused, not ready */
    assert_refused(&c, 2, 101, true);
    int status = 0;
    char *body = http_body(&c, 2, "/readyz", &status);
    ck_assert_msg(status == 503 && strstr(body, "cluster_diverged"), "%d %s", status, body);
    free(body);
    body = http_body(&c, 2, "/v1/cluster", &status);
    ck_assert_msg(strstr(body, "\"diverged\":true"), "%s", body);
    free(body);
    body = http_body(&c, 0, "/readyz", &status);
    ck_assert_msg(status == 200, "%d %s", status, body);
    free(body);
    cluster_nodes_down(&c);
}
END_TEST

/* Whether the stream's message at seq holds key (the request bytes in
 * it name the key), read from the stream's leader. */
static bool stream_message_holds(const cluster_nodes *c, uint64_t seq, const char *key)
{
    natsConnection *nc = NULL;
    jsCtx *js = NULL;
    natsMsg *m = NULL;
    jsErrCode jerr = 0;
    ck_assert(natsConnection_ConnectTo(&nc, c->urls) == NATS_OK);
    ck_assert(natsConnection_JetStream(&js, nc, NULL) == NATS_OK);
    ck_assert_msg(js_GetMsg(&m, js, "TALLY_COMMANDS", seq, NULL, &jerr) == NATS_OK,
                  "no message at %" PRIu64 " (%d)", seq, (int)jerr);
    bool holds = memmem(natsMsg_GetData(m), (size_t)natsMsg_GetDataLength(m), key,
                        strlen(key)) != NULL;
    natsMsg_Destroy(m);
    jsCtx_Destroy(js);
    natsConnection_Destroy(nc);
    return holds;
}

/* Node c reads the stream one position short from position 8 on
 * (--test-cluster-shift-at: as a consumer served by a replica that lacks
 * message 8 delivers it), so it finds its own groups a position below
 * where JetStream stored them. No write of it is answered ok with a
 * cluster_seq where the stream does not hold the write: the first is
 * refused cluster_diverged and node c stops serving, naming the group and
 * both positions; nodes a and b take writes and read them at their
 * cluster_seq. (Node c publishes no checkpoint before its writes, so
 * only the writer's check can stop it.) */
START_TEST(test_a_write_is_answered_where_the_stream_holds_it)
{
    cluster_nodes c;
    const char *extra[] = {"--test-cluster-shift-at", "8", "--cluster-checkpoint-every",
                           "100000", NULL};
    cluster_with(&c, extra);
    ck_assert_msg(tallyd_log_wait(&c.node[2], "--test-cluster-shift-at: position 8 skipped",
                                  WAIT_MS),
                  "node c never read position 8");
    tally_client_options o = {.url = c.node[2].url, .timeout_ms = 30000, .consumer = "test",
                              .retries = 0, .retries_set = true};
    tally_client *once = NULL;
    ck_assert_int_eq(tally_client_open(&o, &once), TALLY_ok);
    bool refused = false;
    for (uint64_t id = 300; id < 310 && !refused; id++) {
        char key[32];
        snprintf(key, sizeof(key), "open-%" PRIu64, id);
        wire_reply r;
        wire_call(once, &r, "account_open", "ssuuu", "consumer", "t", "key", key, "id", id,
                  "ledger", (uint64_t)1, "code", (uint64_t)1);
        refused = strcmp(r.code, "cluster_diverged") == 0;
        if (!refused) {
            wire_expect(&r, "ok");
            uint64_t seq = wire_u64(r.map, "cluster_seq");
            ck_assert_msg(stream_message_holds(&c, seq, key),
                          "node c answered %s at cluster_seq %" PRIu64 ", where the stream "
                          "holds another message",
                          key, seq);
        }
        wire_done(&r);
    }
    tally_client_close(once);
    ck_assert_msg(refused, "node c took every write");
    ck_assert(tallyd_log_wait(&c.node[2], "stops serving: this node applied its group c-", 1000));
    ck_assert_int_eq(test_metrics_sample(c.node[2].http_port, "tally_cluster_diverged"), 1);
    /* the others take a write and read it on each other at its cluster_seq */
    wire_reply r;
    wire_call(c.client[0], &r, "account_open", "ssuuu", "consumer", "t", "key", "open-400", "id",
              (uint64_t)400, "ledger", (uint64_t)1, "code", (uint64_t)1);
    wire_expect(&r, "ok");
    uint64_t seq = wire_u64(r.map, "cluster_seq");
    wire_done(&r);
    wire_call(c.client[1], &r, "account_get", "uu", "id", (uint64_t)400, "min_seq", seq);
    wire_expect(&r, "ok");
    wire_done(&r);
    ck_assert_int_eq(test_metrics_sample(c.node[0].http_port, "tally_cluster_diverged"), 0);
    cluster_nodes_down(&c);
}
END_TEST

/* Checkpoints come with the log's time too (every 10 s of it), not only
 * every N positions: with N = 100000, node c (diverged at position 4)
 * stops once the ticks carry the log's time past the next 10 s, after a
 * dozen writes. Without them it would serve its diverged store until
 * position 100000. */
START_TEST(test_a_diverged_node_stops_with_few_positions)
{
    cluster_nodes c;
    const char *extra[] = {"--test-cluster-diverge-at", "4", NULL};
    cluster_with_every(&c, "100000", extra);
    for (uint64_t k = 1; k <= 12; k++)
        open_account(c.client[0], k);
    ck_assert_msg(tallyd_log_wait(&c.node[2], "applied without its last request", WAIT_MS),
                  "node c applied every request");
    ck_assert_msg(test_metrics_sample_reaches(c.node[2].http_port, "tally_cluster_diverged", 1,
                                              WAIT_MS),
                  "node c did not stop (checkpoint position %d)",
                  (int)test_metrics_sample(c.node[2].http_port,
                                           "tally_cluster_checkpoint_position"));
    ck_assert(tallyd_log_wait(&c.node[2], "differs from the majority's, held by nodes a, b", 1000));
    for (int i = 0; i < 2; i++)
        ck_assert_int_eq(test_metrics_sample(c.node[i].http_port, "tally_cluster_diverged"), 0);
    cluster_nodes_down(&c);
}
END_TEST

/* One server's copy of position 20, as node c reads it (the first server
 * to deliver it, every time), is a message the stream does not hold there
 * (a tick an hour on), as a nats-server deposed as the stream's leader
 * holds and delivers the publishes it stored without its quorum: node c
 * applies a position only when its copies from a majority of the
 * replicas agree, reads position 20 again elsewhere until they do, and
 * so all three agree at every checkpoint. Without the majority rule node
 * c applies the stale copy, its log's times run an hour ahead, and it
 * stops at checkpoint 32 as diverged. */
START_TEST(test_a_stale_copy_is_not_applied)
{
    cluster_nodes c;
    cluster_with_test_option(&c, "--test-cluster-stale-copy-at", "20");
    assert_all_agree(&c, 32);
    ck_assert_msg(tallyd_log_wait(&c.node[2], "position 20: the stream's replicas this node "
                                  "read held different messages there", 1000),
                  "node c was not handed the stale copy");
    ck_assert_msg(tallyd_log_wait(&c.node[2], "the stream's replicas differ at position 20: ",
                                  1000), "node c did not say which server held what");
    ck_assert(tallyd_log_wait(&c.node[2], "holds tick stale-copy (", 1000));
    open_account(c.client[2], 100);
    cluster_nodes_down(&c);
}
END_TEST

static void stream_delete(const cluster_nodes *c)
{
    natsConnection *nc = NULL;
    jsCtx *js = NULL;
    jsErrCode jerr = 0;
    ck_assert(natsConnection_ConnectTo(&nc, c->urls) == NATS_OK);
    ck_assert(natsConnection_JetStream(&js, nc, NULL) == NATS_OK);
    ck_assert_msg(js_DeleteStream(js, "TALLY_COMMANDS", NULL, &jerr) == NATS_OK, "jerr %d",
                  (int)jerr);
    jsCtx_Destroy(js);
    natsConnection_Destroy(nc);
}

/* The stream deleted behind the running nodes and an empty one made in
 * its place, as tallyd would make it. */
static void stream_lost(const cluster_nodes *c)
{
    stream_delete(c);
    const char *urls[NATS_CLUSTER_NODES];
    for (int i = 0; i < NATS_CLUSTER_NODES; i++)
        urls[i] = c->nats.urls[i];
    cluster_stream_config cfg = {.urls = urls, .url_count = NATS_CLUSTER_NODES};
    cluster_stream *s = NULL;
    char why[CLUSTER_WHY_BYTES] = "";
    ck_assert_msg(cluster_stream_open(&s, &cfg, why, sizeof(why)) == TALLY_ok, "%s", why);
    cluster_stream_close(s);
}

/* A cluster that took 30 writes, then lost its stream (stream_lost). */
static void cluster_with_lost_stream(cluster_nodes *c)
{
    cluster_with(c, NULL);
    for (uint64_t k = 1; k <= 30; k++)
        open_account(c->client[k % NODES], k);
    stream_lost(c);
}

START_TEST(test_a_stream_behind_running_nodes)
{
    cluster_nodes c;
    cluster_with_lost_stream(&c);
    for (int i = 0; i < NODES; i++) {
        ck_assert_msg(test_metrics_sample_reaches(c.node[i].http_port, "tally_cluster_diverged", 1,
                                                  WAIT_MS),
                      "node %d goes on", i);
        ck_assert(tallyd_log_wait(&c.node[i], "stops serving: stream behind this node", 1000));
    }
    assert_refused(&c, 0, 200, false);
    cluster_nodes_down(&c);
}
END_TEST

/* count messages of bytes each appended to the stream (subject
 * TALLY_COMMANDS.filler), as another cluster's writes would grow a stream
 * made again. */
static void stream_fill(const cluster_nodes *c, unsigned count, size_t bytes)
{
    natsConnection *nc = NULL;
    jsCtx *js = NULL;
    char *data = calloc(1, bytes);
    ck_assert(data != NULL);
    ck_assert(natsConnection_ConnectTo(&nc, c->urls) == NATS_OK);
    ck_assert(natsConnection_JetStream(&js, nc, NULL) == NATS_OK);
    for (unsigned i = 0; i < count; i++) {
        jsErrCode jerr = 0;
        ck_assert_msg(js_Publish(NULL, js, "TALLY_COMMANDS.filler", data, (int)bytes, NULL,
                                 &jerr) == NATS_OK,
                      "filler %u: jerr %d", i, (int)jerr);
    }
    free(data);
    jsCtx_Destroy(js);
    natsConnection_Destroy(nc);
}

/* The stream lost under running nodes and grown again past their
 * positions before three answers in a row said it ended before them:
 * node a, told once that it does, finds another message at its position
 * than its own there once the stream is long again, and stops (fails
 * when an answer that the stream is long enough forgets the first). */
START_TEST(test_a_lost_stream_grown_again_is_found)
{
    cluster_nodes c;
    cluster_with_lost_stream(&c);
    ck_assert_msg(tallyd_log_wait(&c.node[0], "before this node's position", WAIT_MS),
                  "node a never found the stream behind it");
    stream_fill(&c, 200, 1);
    ck_assert_msg(test_metrics_sample_reaches(c.node[0].http_port, "tally_cluster_diverged", 1,
                                              WAIT_MS),
                  "node a goes on");
    ck_assert(tallyd_log_wait(&c.node[0], "stops serving: stream behind this node", 1000));
    cluster_nodes_down(&c);
}
END_TEST

/* Node i's applier held from its next start (--test-writer-hold-file,
 * its options from slot at on): the file made at hold (hold_size bytes
 * of room, under dir), removed by the test to let it go. */
static void hold_applier(cluster_nodes *c, int i, int at, const char *dir, char *hold,
                         size_t hold_size)
{
    snprintf(hold, hold_size, "%s/hold-%s", dir, c->name[i]);
    FILE *f = fopen(hold, "w");
    ck_assert(f != NULL);
    fclose(f);
    c->args[i][at] = "--test-writer-hold-file";
    c->args[i][at + 1] = hold;
}

/* The stream keeps only its last keep messages from now on (max_msgs,
 * which tallyd does not check), as max_age would age out the older. */
static void stream_keep_only(const cluster_nodes *c, int64_t keep)
{
    natsConnection *nc = NULL;
    jsCtx *js = NULL;
    jsStreamInfo *si = NULL;
    jsErrCode jerr = 0;
    ck_assert(natsConnection_ConnectTo(&nc, c->urls) == NATS_OK);
    ck_assert(natsConnection_JetStream(&js, nc, NULL) == NATS_OK);
    ck_assert(js_GetStreamInfo(&si, js, "TALLY_COMMANDS", NULL, &jerr) == NATS_OK);
    si->Config->MaxMsgs = keep;
    ck_assert_msg(js_UpdateStream(NULL, js, si->Config, NULL, &jerr) == NATS_OK, "jerr %d",
                  (int)jerr);
    jsStreamInfo_Destroy(si);
    jsCtx_Destroy(js);
    natsConnection_Destroy(nc);
}

/* docs/CLUSTER.md, "A node too far behind": node b, its applier held
 * (--test-writer-hold-file) while the messages it needs age out of the
 * stream, stops serving once it reads on (fails when its reader makes
 * consumers again and again instead). The stream grows by more than its
 * consumers push to a reader that takes nothing (JetStream's flow
 * control holds up to 32 MiB), so it reads on past what they delivered. */
#define BEHIND_FILL_MESSAGES 80
#define BEHIND_FILL_BYTES (512 * 1024)

START_TEST(test_a_node_left_behind_by_the_stream_stops)
{
    cluster_nodes c;
    char hold[320];
    cluster_nodes_init(&c, 2);
    cluster_nodes_start(&c, 0);
    hold_applier(&c, 1, 0, c.nats.dir, hold, sizeof(hold));
    cluster_nodes_start(&c, 1);
    stream_keep_only(&c, 20);
    stream_fill(&c, BEHIND_FILL_MESSAGES, BEHIND_FILL_BYTES);
    ck_assert_int_eq(unlink(hold), 0);
    ck_assert_msg(test_metrics_sample_reaches(c.node[1].http_port, "tally_cluster_diverged", 1,
                                              WAIT_MS),
                  "node b goes on");
    ck_assert(tallyd_log_wait(&c.node[1], "older than the stream's first message", 1000));
    assert_refused(&c, 1, 100, true);
    open_account(c.client[0], 1);
    cluster_nodes_down(&c);
}
END_TEST

/* The inbox_time database of node i's store, dumped (mdb_dump, lmdb-utils). */
static char *inbox_time_dump(const cluster_nodes *c, int i)
{
    const char *argv[] = {"/usr/bin/mdb_dump", "-s", "inbox_time", c->node[i].data_dir, NULL};
    char *out = NULL, *err = NULL;
    ck_assert_msg(test_run(argv, NULL, &out, &err) == 0, "mdb_dump: %s", err);
    free(err);
    return out;
}

/* Node c, its applier held while nodes a and b take 24 writes, each its
 * own message, then catching up several messages per transaction: every
 * node's inbox_time is the same, entry for entry (one per message), so
 * retention removes the same idempotency records at the same log time on
 * every node (fails when a node's entries follow its own transactions:
 * node c's hold several messages' keys). */
START_TEST(test_every_node_indexes_the_inbox_alike)
{
    cluster_nodes c;
    char hold[320];
    cluster_with(&c, NULL);
    hold_applier(&c, 2, 2, c.node[2].dir, hold, sizeof(hold));
    cluster_nodes_stop(&c, 2);
    cluster_nodes_restart(&c, 2);
    for (uint64_t k = 1; k <= 24; k++)
        open_account(c.client[k % 2], k);
    ck_assert_int_eq(unlink(hold), 0);
    double at = test_metrics_sample(c.node[0].http_port, "tally_cluster_position");
    ck_assert(test_metrics_sample_reaches(c.node[2].http_port, "tally_cluster_position", at,
                                          WAIT_MS));
    for (int i = NODES - 1; i >= 0; i--)
        cluster_nodes_stop(&c, i);
    char *dumps[NODES];
    for (int i = 0; i < NODES; i++)
        dumps[i] = inbox_time_dump(&c, i);
    for (int i = 1; i < NODES; i++)
        ck_assert_msg(strcmp(dumps[0], dumps[i]) == 0, "inbox_time of node %d differs:\n%s\n"
                      "node a's:\n%s", i, dumps[i], dumps[0]);
    for (int i = 0; i < NODES; i++)
        free(dumps[i]);
    cluster_nodes_down(&c);
}
END_TEST

START_TEST(test_not_ready_while_far_behind)
{
    cluster_nodes c;
    char hold[320];
    cluster_nodes_init(&c, 2);
    for (int i = 0; i < 2; i++) {
        c.args[i][0] = "--cluster-ready-lag";
        c.args[i][1] = "5";
        cluster_nodes_start(&c, i);
    }
    hold_applier(&c, 1, 2, c.node[1].dir, hold, sizeof(hold));
    cluster_nodes_stop(&c, 1);
    cluster_nodes_restart(&c, 1);
    int status = 0;
    char *body = http_body(&c, 1, "/readyz", &status);
    free(body);
    for (uint64_t k = 1; k <= 20; k++)
        open_account(c.client[0], k);
    /* node b applies nothing while the file is there: more than 5 behind */
    ck_assert_msg(test_metrics_sample_reaches(c.node[1].http_port, "tally_cluster_lag_messages", 6,
                                              WAIT_MS),
                  "node b does not see the stream grow");
    body = http_body(&c, 1, "/readyz", &status);
    ck_assert_msg(status == 503 && strstr(body, "cluster_lag_messages"), "%d %s", status, body);
    free(body);
    ck_assert_int_eq(test_metrics_sample(c.node[1].http_port, "tally_ready"), 0);
    ck_assert_int_eq(unlink(hold), 0);
    int64_t until = test_deadline_ms(WAIT_MS);
    for (;;) {
        body = http_body(&c, 1, "/readyz", &status);
        free(body);
        if (status == 200)
            break;
        if (clock_mono_ms() >= until)
            test_wait_failed(WAIT_MS, "node b ready again after catching up");
        test_pause_ms(100);
    }
    cluster_nodes_down(&c);
}
END_TEST

static void write_file(const char *path, const char *text, mode_t mode)
{
    FILE *f = fopen(path, "w");
    ck_assert_msg(f != NULL, "%s", path);
    ck_assert(fputs(text, f) >= 0);
    ck_assert_int_eq(fclose(f), 0);
    ck_assert_int_eq(chmod(path, mode), 0);
}

START_TEST(test_a_node_logs_in_to_servers_that_require_it)
{
    nats_cluster nats;
    nats_cluster_start_with_user(&nats, "tally", "s3cret-pass");
    char urls[NATS_CLUSTER_NODES * 64], password[400], open_password[400];
    snprintf(urls, sizeof(urls), "%s,%s,%s", nats.node[0].plain_url, nats.node[1].plain_url,
             nats.node[2].plain_url);
    snprintf(password, sizeof(password), "%s/password", nats.dir);
    snprintf(open_password, sizeof(open_password), "%s/password-open", nats.dir);
    write_file(password, "s3cret-pass\n", 0600);
    write_file(open_password, "s3cret-pass\n", 0644);
    /* no login, a wrong password, a password file others may read */
    const char *none[] = {"--cluster", urls, "--node", "a", NULL};
    cluster_nodes_assert_refused_start(nats.dir, NULL, none, "cannot connect to NATS");
    write_file(password, "wrong\n", 0600);
    const char *wrong[] = {"--cluster", urls, "--node", "a", "--cluster-user", "tally",
                           "--cluster-password-file", password, NULL};
    cluster_nodes_assert_refused_start(nats.dir, NULL, wrong, "cannot connect to NATS");
    const char *open[] = {"--cluster", urls, "--node", "a", "--cluster-user", "tally",
                          "--cluster-password-file", open_password, NULL};
    cluster_nodes_assert_refused_start(nats.dir, NULL, open, "group or others may read it");
    /* the right one: the node starts and takes writes */
    write_file(password, "s3cret-pass\n", 0600);
    tallyd_proc p;
    tally_client *client = NULL;
    wire_server_start(&p, &client, wrong);
    open_account(client, 1);
    wire_server_stop(&p, &client);
    tallyd_cleanup(&p);
    nats_cluster_stop(&nats);
}
END_TEST

/* The store of node i replaced by a backup of node `from` (running). */
static void store_from_backup(cluster_nodes *c, int from, int i)
{
    char dest[400];
    snprintf(dest, sizeof(dest), "%s/restored", c->node[i].dir);
    wire_reply r;
    wire_call(c->client[from], &r, "backup", "s", "path", dest);
    wire_expect(&r, "ok");
    wire_done(&r);
    const char *rm[] = {"/bin/rm", "-rf", c->node[i].data_dir, NULL};
    ck_assert_int_eq(test_run(rm, NULL, NULL, NULL), 0);
    ck_assert_int_eq(rename(dest, c->node[i].data_dir), 0);
}

START_TEST(test_a_single_node_store_becomes_a_cluster)
{
    cluster_nodes c;
    cluster_nodes_init(&c, 2);
    /* a single-node tallyd with 5 accounts; and one that will be node b */
    for (int i = 0; i < 2; i++)
        wire_server_start(&c.node[i], &c.client[i], NULL);
    for (uint64_t k = 1; k <= 5; k++)
        open_account(c.client[0], k);
    cluster_nodes_stop(&c, 1);
    cluster_nodes_stop(&c, 0);
    /* in cluster mode on the empty stream: only with --cluster-init */
    const char *join[] = {"--cluster", c.urls, "--node", "a", NULL};
    cluster_nodes_assert_refused_start(c.node[0].dir, c.node[0].data_dir, join,
                         "start it with --cluster-init");
    c.args[0][0] = "--cluster-init";
    cluster_nodes_restart(&c, 0);
    ck_assert(tallyd_log_wait(&c.node[0], "--cluster-init: this store (log head seq 5) is the base "
                              "of a new cluster", 1000));
    wire_reply r;
    wire_call(c.client[0], &r, "account_get", "u", "id", (uint64_t)5);
    wire_expect(&r, "ok");
    wire_done(&r);
    open_account(c.client[0], 6);
    /* node b from node a's backup joins, and sees what a wrote after it */
    store_from_backup(&c, 0, 1);
    open_account(c.client[0], 7);
    cluster_nodes_restart(&c, 1);
    wire_call(c.client[1], &r, "account_open", "ssuuu", "consumer", "t", "key", "open-8", "id",
              (uint64_t)8, "ledger", (uint64_t)1, "code", (uint64_t)1);
    wire_expect(&r, "ok");
    uint64_t seq = wire_u64(r.map, "cluster_seq");
    wire_done(&r);
    for (uint64_t id = 1; id <= 8; id++) {
        wire_call(c.client[id % 2], &r, "account_get", "uu", "id", id, "min_seq", seq);
        wire_expect(&r, "ok");
        wire_done(&r);
    }
    /* --cluster-init on a stream that holds messages is refused */
    cluster_nodes_stop(&c, 1);
    const char *again[] = {"--cluster", c.urls, "--node", "b", "--cluster-init", NULL};
    cluster_nodes_assert_refused_start(c.node[1].dir, c.node[1].data_dir, again, "holds messages up to");
    cluster_nodes_down(&c);
}
END_TEST

/* Nodes started seconds apart, then a subscriber made and fetched from:
 * the replies of sub_create and sub_fetch carry last_fetch_age_s, which
 * each node counts in its own memory from its own start (no fetch yet),
 * so it differs from node to node; all three still agree at every
 * checkpoint (fails when the state digest takes the reply as the client
 * gets it: three digests, no majority). */
START_TEST(test_nodes_started_apart_agree_on_subscriber_replies)
{
    cluster_nodes c;
    cluster_nodes_init(&c, NODES);
    for (int i = 0; i < NODES; i++) {
        c.args[i][0] = "--cluster-checkpoint-every";
        c.args[i][1] = CHECKPOINT_EVERY;
        if (i > 0) /* ticks every 200 ms: 10 positions are 2 s of the log's time */
            ck_assert(test_metrics_sample_reaches(c.node[i - 1].http_port,
                                                  "tally_cluster_position", 10.0 * i, WAIT_MS));
        cluster_nodes_start(&c, i);
    }
    wire_reply r;
    wire_call(c.client[0], &r, "sub_create", "s", "name", "apart");
    wire_expect(&r, "ok");
    wire_done(&r);
    wire_call(c.client[1], &r, "sub_fetch", "su", "name", "apart", "max", (uint64_t)5);
    wire_expect(&r, "ok");
    wire_done(&r);
    wire_call(c.client[2], &r, "sub_update", "su", "name", "apart", "ack_wait_ms",
              (uint64_t)5000);
    wire_expect(&r, "ok");
    wire_done(&r);
    assert_all_agree(&c, 32);
    cluster_nodes_down(&c);
}
END_TEST

/* The runbook's "restore after losing the stream" (docs/OPERATIONS.md):
 * a cluster that took 30 writes loses its stream; every node stops
 * serving; stopped, each refuses to start on the lost stream naming the
 * position it applied (a new store is refused: the stream's first
 * message is no genesis); the stream deleted, the node with the highest
 * starts with --cluster-init, the others from its backup, and every
 * write acknowledged before is read on every node, which all take new
 * writes and agree at a checkpoint. */
START_TEST(test_the_runbook_restores_a_lost_stream)
{
    cluster_nodes c;
    cluster_with_lost_stream(&c);
    for (int i = 0; i < NODES; i++)
        ck_assert_msg(test_metrics_sample_reaches(c.node[i].http_port, "tally_cluster_diverged",
                                                  1, WAIT_MS),
                      "node %d goes on", i);
    for (int i = NODES - 1; i >= 0; i--)
        cluster_nodes_stop(&c, i);
    int best = -1;
    uint64_t best_position = 0;
    for (int i = 0; i < NODES; i++) {
        const char *start[] = {"--cluster", c.urls, "--node", c.name[i], NULL};
        cluster_nodes_assert_refused_start(c.node[i].dir, c.node[i].data_dir, start,
                                           "stream behind this node");
        int fd = open(c.node[i].log_path, O_RDONLY | O_CLOEXEC);
        ck_assert_int_ge(fd, 0);
        char *log = test_fd_read_all(fd);
        close(fd);
        ck_assert_ptr_nonnull(log);
        const char *at = strstr(log, "this node applied position ");
        uint64_t position = 0;
        ck_assert_msg(at && sscanf(at, "this node applied position %" SCNu64, &position) == 1,
                      "node %d: no position in its refusal", i);
        if (position > best_position)
            best = i, best_position = position;
        free(log);
    }
    ck_assert_int_ge(best_position, 30);
    /* a new store on a stream whose first message is no genesis: refused */
    stream_fill(&c, 1, 1);
    const char *fresh[] = {"--cluster", c.urls, "--node", "d", NULL};
    cluster_nodes_assert_refused_start(c.node[0].dir, NULL, fresh, "is it another program's");
    /* the stream deleted; the best node is the new base */
    stream_delete(&c);
    c.args[best][2] = "--cluster-init";
    cluster_nodes_restart(&c, best);
    ck_assert(tallyd_log_wait(&c.node[best], "is the base of a new cluster", 1000));
    c.args[best][2] = NULL;
    for (int i = 0; i < NODES; i++) {
        if (i == best)
            continue;
        store_from_backup(&c, best, i);
        cluster_nodes_restart(&c, i);
    }
    uint64_t seq = 0;
    for (int i = 0; i < NODES; i++) {
        wire_reply r;
        char key[32];
        snprintf(key, sizeof(key), "open-%d", 100 + i);
        wire_call(c.client[i], &r, "account_open", "ssuuu", "consumer", "t", "key", key, "id",
                  (uint64_t)(100 + i), "ledger", (uint64_t)1, "code", (uint64_t)1);
        wire_expect(&r, "ok");
        uint64_t at = wire_u64(r.map, "cluster_seq");
        seq = at > seq ? at : seq;
        wire_done(&r);
    }
    for (int i = 0; i < NODES; i++)
        for (uint64_t id = 1; id <= 102; id = id == 30 ? 100 : id + 1) {
            wire_reply r;
            wire_call(c.client[i], &r, "account_get", "uu", "id", id, "min_seq", seq);
            wire_expect(&r, "ok");
            wire_done(&r);
        }
    assert_all_agree(&c, 32);
    cluster_nodes_down(&c);
}
END_TEST

int main(void)
{
    if (nats_cluster_server_path() == NULL) {
        fprintf(stderr, "check_cluster_checks: nats-server is not installed ($NATS_SERVER: %s); "
                        "skipped (apt-get install nats-server)\n",
                getenv("NATS_SERVER") ? getenv("NATS_SERVER") : "unset");
        return 77;
    }
    const test_row rows[] = {
        {"checkpoint", test_checkpoints_agree, TEST_TIMEOUT_S},
        {"divergence", test_a_diverged_node_stops, TEST_TIMEOUT_S},
        {"divergence", test_a_stream_behind_running_nodes, TEST_TIMEOUT_S},
        {"divergence", test_a_write_is_answered_where_the_stream_holds_it, TEST_TIMEOUT_S},
        {"stale", test_a_stale_copy_is_not_applied, TEST_TIMEOUT_S},
        {"divergence", test_a_lost_stream_grown_again_is_found, TEST_TIMEOUT_S},
        {"logtime", test_a_diverged_node_stops_with_few_positions, TEST_TIMEOUT_S},
        {"ready", test_not_ready_while_far_behind, TEST_TIMEOUT_S},
        {"behind", test_a_node_left_behind_by_the_stream_stops, TEST_TIMEOUT_S},
        {"login", test_a_node_logs_in_to_servers_that_require_it, TEST_TIMEOUT_S},
        {"init", test_a_single_node_store_becomes_a_cluster, TEST_TIMEOUT_S},
        {"restore", test_the_runbook_restores_a_lost_stream, TEST_TIMEOUT_S},
        {"apart", test_nodes_started_apart_agree_on_subscriber_replies, TEST_TIMEOUT_S},
        {"inbox_time", test_every_node_indexes_the_inbox_alike, TEST_TIMEOUT_S},
    };
    return test_run_suite(test_suite_of_rows("cluster_checks", TEST_ROWS(rows)));
}
