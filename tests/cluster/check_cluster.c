/*
 * check_cluster.c — tallyd in cluster mode (docs/CLUSTER.md): three
 * nats-servers in one JetStream cluster (tests/support/nats_cluster.h)
 * and three tallyd on loopback, each with --cluster and its own --node.
 *
 * - convergence: three clients, one per node, send the same commands
 *   with the same keys at once, each starting at another place in the
 *   list (account_open, transfer, a hold that times out, post, grant):
 *   every reply is ok and carries cluster_seq; every node then holds the
 *   same log, event for event (seq, bytes, so hash chain and event ids),
 *   the same counts, every key applied once (the inbox holds each once),
 *   the hold timed out by the log's time, and tally-recon is clean on
 *   each;
 * - read-your-writes: a write on node a, then a read on node b with the
 *   write's cluster_seq as min_seq sees it; a min_seq far ahead is
 *   not_caught_up after --cluster-read-wait-ms;
 * - a node stopped and started again catches up from its position, and so
 *   does one whose store is replaced by another node's backup; it says
 *   where it is in /metrics, GET /v1/cluster, cluster_status (libtally)
 *   and `tally cluster status`;
 * - a node whose stream was deleted and made again (empty) refuses to
 *   start: stream behind this node, and publishes no genesis;
 * - kill -9 of a tallyd, and of a nats-server, while three writers send
 *   transfers with failover to the next node: every write acknowledged,
 *   each applied once on every node, the killed one back and caught up.
 * - a subscriber fetching on node a, node a killed with kill -9, goes on
 *   on node b: every event delivered, what a held redelivered after its
 *   lease in the log's time, the same cursor on b and c; a long-poll
 *   waits on its own node; every subscriber write, each on another node,
 *   leaves the same cursor on all three.
 * - a libtally client given every node's URL keeps writing through a kill
 *   -9 of the node it used, each write applied once; the CLI with a list
 *   whose first node is dead writes through the next.
 *
 * Without nats-server installed the program says so and exits 77.
 */
#include "config.h"

#include "common/clock.h"
#include "common/error.h"
#include "common/msgpack_safe.h"

#include "tests/support/cluster_fixture.h"
#include "tests/support/http_client.h"
#include "tests/support/nats_cluster.h"
#include "tests/support/run.h"
#include "tests/support/suite.h"
#include "tests/support/tallyd_harness.h"
#include "tests/support/test_support.h"
#include "tests/support/wait.h"
#include "tests/support/wire.h"

#include <check.h>
#include <inttypes.h>
#include <nats/nats.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TEST_TIMEOUT_S 600
#define ACCOUNTS 12
#define TRANSFERS 24
#define GRANTS 8
#define COMMANDS (ACCOUNTS + TRANSFERS + 2 + GRANTS) /* + a hold that times out, a post */

/* ---- the commands ---- */

static void transfer_id(uint8_t id[16], unsigned i)
{
    memset(id, 0, 16);
    id[0] = 0x01;
    id[15] = (uint8_t)(i + 1);
    id[14] = (uint8_t)((i + 1) >> 8);
}

/* Command k of the list, sent on c: its reply must be ok (a replay of the
 * same key is ok too) and carry a cluster_seq. Returns that seq. */
static uint64_t send_command(tally_client *c, unsigned k)
{
    wire_reply r;
    char key[32];
    uint8_t id[16];
    snprintf(key, sizeof(key), "cmd-%u", k);
    if (k < ACCOUNTS) {
        wire_call(c, &r, "account_open", "ssuuu", "consumer", "t", "key", key, "id",
                  (uint64_t)k + 1, "ledger", (uint64_t)1, "code", (uint64_t)1);
    } else if (k < ACCOUNTS + TRANSFERS) {
        unsigned t = k - ACCOUNTS;
        transfer_id(id, t);
        wire_call(c, &r, "transfer", "ssxuuiuu", "consumer", "t", "key", key, "id", id,
                  "debit_account_id", (uint64_t)(t % ACCOUNTS) + 1, "credit_account_id",
                  (uint64_t)((t + 1) % ACCOUNTS) + 1, "amount", (int64_t)(t + 1), "ledger",
                  (uint64_t)1, "code", (uint64_t)1);
    } else if (k == ACCOUNTS + TRANSFERS) { /* a hold of 1 s: it times out by the log's time */
        transfer_id(id, 1000);
        wire_call(c, &r, "transfer", "ssxuuiuuuu", "consumer", "t", "key", key, "id", id,
                  "debit_account_id", (uint64_t)1, "credit_account_id", (uint64_t)2, "amount",
                  (int64_t)5, "ledger", (uint64_t)1, "code", (uint64_t)1, "flags", (uint64_t)1,
                  "timeout_s", (uint64_t)1);
    } else if (k == ACCOUNTS + TRANSFERS + 1) { /* a hold posted at once */
        transfer_id(id, 1001);
        wire_call(c, &r, "transfer", "ssxuuiuuu", "consumer", "t", "key", key, "id", id,
                  "debit_account_id", (uint64_t)3, "credit_account_id", (uint64_t)4, "amount",
                  (int64_t)7, "ledger", (uint64_t)1, "code", (uint64_t)1, "flags", (uint64_t)1);
        ck_assert_msg(strcmp(r.code, "ok") == 0, "hold: %s", r.code);
        wire_done(&r);
        snprintf(key, sizeof(key), "cmd-%u-post", k);
        wire_call(c, &r, "post", "ssx", "consumer", "t", "key", key, "pending_id", id);
    } else {
        char subject[16];
        snprintf(subject, sizeof(subject), "user-%u", k);
        wire_call(c, &r, "grant", "ssssi", "consumer", "t", "key", key, "subject", subject,
                  "feature", "pro", "duration_ms", (int64_t)86400000);
    }
    ck_assert_msg(strcmp(r.code, "ok") == 0, "command %u: %s", k, r.code);
    uint64_t seq = wire_u64(r.map, "cluster_seq");
    ck_assert_uint_gt(seq, 0);
    wire_done(&r);
    return seq;
}

typedef struct sender {
    tally_client *c;
    unsigned start;
    uint64_t last_seq;
} sender;

/* The accounts first, then the rest, each part from the sender's own
 * start: a transfer this sender sends comes after it saw every account
 * opened (its replies come once applied), so it is never refused for an
 * account another sender has not opened yet. */
static void *send_all(void *arg)
{
    sender *s = arg;
    for (unsigned i = 0; i < COMMANDS; i++) {
        unsigned k = i < ACCOUNTS ? (s->start + i) % ACCOUNTS
                                  : ACCOUNTS + (s->start + i) % (COMMANDS - ACCOUNTS);
        uint64_t seq = send_command(s->c, k);
        if (seq > s->last_seq)
            s->last_seq = seq;
    }
    return NULL;
}

/* The state of account id on c, after position min_seq. */
static void account_on(tally_client *c, uint64_t id, uint64_t min_seq, wire_reply *r)
{
    wire_call(c, r, "account_get", "uu", "id", id, "min_seq", min_seq);
}

/* ---- the tests ---- */

START_TEST(test_concurrent_writes_to_every_node_converge)
{
    cluster_fixture f;
    cluster_up(&f);
    sender s[NODES];
    pthread_t th[NODES];
    for (int i = 0; i < NODES; i++) {
        s[i] = (sender){f.client[i], (unsigned)i * COMMANDS / NODES, 0};
        ck_assert_int_eq(pthread_create(&th[i], NULL, send_all, &s[i]), 0);
    }
    uint64_t last = 0;
    for (int i = 0; i < NODES; i++) {
        pthread_join(th[i], NULL);
        if (s[i].last_seq > last)
            last = s[i].last_seq;
    }
    /* nothing more is written: the nodes' ticks carry the log's time past
     * the hold's second, and its expiry is applied on every node */
    uint64_t later = 0;
    int64_t until = test_deadline_ms(120000);
    while (later == 0 && clock_mono_ms() < until) {
        wire_reply r;
        uint8_t id[16];
        transfer_id(id, 1000);
        wire_call(f.client[0], &r, "transfer_get", "x", "id", id);
        wire_expect(&r, "ok");
        const msgpack_object *state = msgpack_safe_map_get(wire_field(r.map, "transfer"), "state");
        tally_str st = {0};
        if (state && msgpack_safe_get_str(state, &st) &&
            tally_str_equal(st, tally_str_from("pending_expired")))
            later = wire_u64(r.map, "cluster_seq");
        wire_done(&r);
        if (later == 0)
            test_pause_ms(50);
    }
    ck_assert_msg(later > 0, "the 1 s hold never timed out (no ticks?)");
    assert_converged(&f, later > last ? later : last);
    /* every key once: the same commands sent three times hold one record each */
    ck_assert_uint_eq(stats_u64(f.client[1], "accounts"), ACCOUNTS);
    ck_assert_uint_eq(stats_u64(f.client[2], "transfers"), TRANSFERS + 2);
    cluster_down(&f);
}
END_TEST

START_TEST(test_a_read_with_min_seq_sees_a_write_made_on_another_node)
{
    cluster_fixture f;
    cluster_up(&f);
    for (unsigned round = 0; round < 20; round++) {
        wire_reply r;
        char key[32];
        snprintf(key, sizeof(key), "ryw-%u", round);
        wire_call(f.client[0], &r, "account_open", "ssuuu", "consumer", "t", "key", key, "id",
                  (uint64_t)round + 500, "ledger", (uint64_t)1, "code", (uint64_t)1);
        wire_expect(&r, "ok");
        uint64_t seq = wire_u64(r.map, "cluster_seq");
        wire_done(&r);
        account_on(f.client[1 + round % 2], round + 500, seq, &r);
        ck_assert_msg(strcmp(r.code, "ok") == 0, "round %u: read at min_seq %" PRIu64 ": %s",
                      round, seq, r.code);
        ck_assert_uint_ge(wire_u64(r.map, "cluster_seq"), seq);
        wire_done(&r);
    }
    wire_reply r;
    account_on(f.client[2], 500, UINT64_C(1) << 40, &r);
    wire_expect(&r, "not_caught_up");
    wire_done(&r);
    /* libtally: the write's cluster_seq, then reads on another client with it */
    tally_result res;
    tally_account_open_args a = {.id = 900, .ledger = 1, .code = 1};
    ck_assert_int_eq(tally_account_open(f.client[1], "lib-900", &a, &res), TALLY_ok);
    uint64_t seq = tally_client_cluster_seq(f.client[1]);
    ck_assert_uint_gt(seq, 0);
    tally_client_set_min_seq(f.client[2], seq);
    tally_account acct;
    ck_assert_int_eq(tally_account_get(f.client[2], 900, &acct), TALLY_ok);
    ck_assert_uint_ge(tally_client_cluster_seq(f.client[2]), seq);
    tally_client_set_min_seq(f.client[2], 0);
    /* the CLI: a write prints its cluster_seq; a read with --min-seq on another node */
    char *out = NULL, *err = NULL, seq_text[24], *at;
    const char *open_argv[] = {tallyd_program("tally"), "--url", f.node[0].url, "--json",
                               "account", "open", "901", "--key", "cli-901", NULL};
    ck_assert_int_eq(test_run(open_argv, NULL, &out, &err), 0);
    ck_assert_msg((at = strstr(out, "\"cluster_seq\":")) != NULL, "%s", out);
    seq = strtoull(at + strlen("\"cluster_seq\":"), NULL, 10);
    ck_assert_uint_gt(seq, 0);
    free(out);
    free(err);
    snprintf(seq_text, sizeof(seq_text), "%" PRIu64, seq);
    const char *get_argv[] = {tallyd_program("tally"), "--url", f.node[2].url, "--min-seq",
                              seq_text, "account", "get", "901", NULL};
    ck_assert_int_eq(test_run(get_argv, NULL, &out, &err), 0);
    free(out);
    free(err);
    cluster_down(&f);
}
END_TEST

START_TEST(test_a_restarted_node_catches_up)
{
    cluster_fixture f;
    cluster_up(&f);
    tally_client_close(f.client[2]);
    f.client[2] = NULL;
    ck_assert_int_eq(tallyd_stop(&f.node[2]), 0);
    uint64_t last = 0;
    for (unsigned k = 0; k < COMMANDS; k++) {
        uint64_t seq = send_command(f.client[k % 2], k);
        if (seq > last)
            last = seq;
    }
    const char *args[] = {"--cluster", f.urls, "--node", f.node_arg[2],
                          "--cluster-read-wait-ms", "60000", "--http", "http://127.0.0.1:0", NULL};
    wire_server_restart(&f.node[2], &f.client[2], args);
    /* its metrics say where it is: at last, with the stream at least there */
    ck_assert_msg(test_metrics_sample_reaches(f.node[2].http_port, "tally_cluster_position",
                                              (long long)last, 120000),
                  "node c never reported position %" PRIu64, last);
    ck_assert_int_ge(test_metrics_sample(f.node[2].http_port, "tally_cluster_stream_last_seq"),
                     (long long)last);
    ck_assert_int_ge(test_metrics_sample(f.node[2].http_port, "tally_cluster_lag_messages"), 0);
    int status = 0;
    char *body = test_http_get(f.node[2].http_port, "/v1/cluster", &status);
    ck_assert_msg(status == 200 && body && strstr(body, "\"node\":\"c\"") &&
                      strstr(body, "\"stream\":\"TALLY_COMMANDS\"") &&
                      strstr(body, "\"position\":"),
                  "GET /v1/cluster: %d %s", status, body ? body : "");
    ck_assert_uint_ge(strtoull(strstr(body, "\"position\":") + strlen("\"position\":"), NULL, 10),
                      last);
    free(body);
    /* the same over msgpack: libtally's cluster_status and the CLI's */
    tally_cluster_status st;
    ck_assert_int_eq(tally_cluster_status_get(f.client[2], &st), TALLY_ok);
    ck_assert_str_eq(st.node, "c");
    ck_assert_str_eq(st.stream, "TALLY_COMMANDS");
    ck_assert_uint_ge(st.position, last);
    ck_assert_uint_ge(st.stream_last_seq, st.position);
    ck_assert_uint_eq(st.lag_messages, st.stream_last_seq - st.position);
    char *out = NULL, *err = NULL;
    const char *argv[] = {tallyd_program("tally"), "--url", f.node[2].url, "--json", "cluster",
                          "status", NULL};
    ck_assert_msg(test_run(argv, NULL, &out, &err) == 0, "%s%s", out, err);
    char *at = strstr(out, "\"position\":");
    ck_assert_msg(strstr(out, "\"node\":\"c\"") && strstr(out, "\"lag_messages\":") && at,
                  "%s", out);
    ck_assert_uint_ge(strtoull(at + strlen("\"position\":"), NULL, 10), last);
    free(out);
    free(err);
    assert_converged(&f, last);
    cluster_down(&f);
}
END_TEST

/* ---- a node replaced from another node's backup ---- */

START_TEST(test_a_node_restored_from_a_backup_catches_up)
{
    cluster_fixture f;
    cluster_up(&f);
    for (unsigned k = 0; k < ACCOUNTS; k++)
        send_command(f.client[k % 2], k);
    /* node c's machine is lost; node a's backup takes its place */
    tally_client_close(f.client[2]);
    f.client[2] = NULL;
    ck_assert_int_eq(tallyd_stop(&f.node[2]), 0);
    char dest[400];
    snprintf(dest, sizeof(dest), "%s/restored", f.node[2].dir);
    wire_reply r;
    wire_call(f.client[0], &r, "backup", "s", "path", dest);
    wire_expect(&r, "ok");
    wire_done(&r);
    const char *rm[] = {"/bin/rm", "-rf", f.node[2].data_dir, NULL};
    ck_assert_int_eq(test_run(rm, NULL, NULL, NULL), 0);
    ck_assert_int_eq(rename(dest, f.node[2].data_dir), 0);
    uint64_t last = 0;
    for (unsigned k = ACCOUNTS; k < COMMANDS; k++) { /* while it is away */
        uint64_t seq = send_command(f.client[k % 2], k);
        last = seq > last ? seq : last;
    }
    const char *args[] = {"--cluster", f.urls, "--node", f.node_arg[2],
                          "--cluster-read-wait-ms", "60000", "--http", "http://127.0.0.1:0", NULL};
    wire_server_restart(&f.node[2], &f.client[2], args);
    assert_converged(&f, last);
    cluster_down(&f);
}
END_TEST

/* ---- a stream that lost what a node applied ---- */

/* Every tallyd stopped (clean), their clients closed. */
static void nodes_stop(cluster_fixture *f)
{
    for (int i = 0; i < NODES; i++) {
        tally_client_close(f->client[i]);
        f->client[i] = NULL;
        ck_assert_int_eq(tallyd_stop(&f->node[i]), 0);
    }
}

START_TEST(test_a_node_refuses_a_stream_behind_it)
{
    cluster_fixture f;
    cluster_up(&f);
    for (unsigned k = 0; k < ACCOUNTS; k++)
        send_command(f.client[k % NODES], k);
    nodes_stop(&f);
    /* the stream is lost (as JetStream losing its acknowledged tail would
     * leave it): deleted behind tallyd's back, then an empty one */
    natsConnection *nc = NULL;
    jsCtx *js = NULL;
    jsErrCode jerr = 0;
    ck_assert(natsConnection_ConnectTo(&nc, f.urls) == NATS_OK);
    ck_assert(natsConnection_JetStream(&js, nc, NULL) == NATS_OK);
    ck_assert_msg(js_DeleteStream(js, "TALLY_COMMANDS", NULL, &jerr) == NATS_OK, "jerr %d",
                  (int)jerr);
    char listen[400];
    snprintf(listen, sizeof(listen), "ipc://%s/again.sock", f.node[2].dir);
    const char *argv[] = {tallyd_program("tallyd"), "--data", f.node[2].data_dir, "--listen",
                          listen, "--publish", "none", "--http", "none", "--cluster", f.urls,
                          "--node", "c", NULL};
    char *out = NULL, *err = NULL;
    int code = test_run(argv, NULL, &out, &err);
    ck_assert_msg(code != 0 && strstr(err, "stream behind this node"), "exit %d: %s", code, err);
    free(out);
    free(err);
    jsStreamInfo *si = NULL; /* and it wrote nothing into the empty stream: no genesis */
    ck_assert(js_GetStreamInfo(&si, js, "TALLY_COMMANDS", NULL, &jerr) == NATS_OK);
    ck_assert_uint_eq(si->State.Msgs, 0);
    jsStreamInfo_Destroy(si);
    jsCtx_Destroy(js);
    natsConnection_Destroy(nc);
    cluster_down(&f);
}
END_TEST

/* ---- kill -9 of a node under load ---- */

#define FAILOVER_WRITERS 3
#define FAILOVER_KEYS 60      /* per writer */
#define FAILOVER_KILL_AFTER 30 /* acknowledged writes before the kill */
#define FAILOVER_KEY_WAIT_MS 120000 /* one write through an election, on a loaded machine */
#define FAILOVER_ROUND_PAUSE_MS 100  /* after every node refused once */

typedef struct failover_writer {
    tally_client *c[NODES]; /* short timeouts, no retries of their own: this moves on */
    unsigned id;
    _Atomic unsigned *acked;
    uint64_t last_seq;
    unsigned moves;
} failover_writer;

static bool is_fault_to_move_on(const char *code)
{
    return strcmp(code, "cluster_unavailable") == 0 || strcmp(code, "shutting_down") == 0 ||
           strcmp(code, "overloaded") == 0;
}

/* Transfers of 1 from account 1 to 2, each under its own key, sent to
 * node id, then to the next node on a transport failure or a fault, with
 * the same key, until one answers ok. */
static void *write_with_failover(void *arg)
{
    failover_writer *w = arg;
    unsigned node = w->id % NODES;
    for (unsigned k = 0; k < FAILOVER_KEYS; k++) {
        char key[32];
        uint8_t id[16];
        snprintf(key, sizeof(key), "fo-%u-%u", w->id, k);
        transfer_id(id, 2000 + w->id * FAILOVER_KEYS + k);
        bool done = false;
        int64_t until = test_deadline_ms(FAILOVER_KEY_WAIT_MS);
        for (unsigned attempt = 1; !done && clock_mono_ms() < until; attempt++) {
            wire_reply r;
            int rc = wire_try_call(w->c[node], &r, "transfer", "ssxuuiuu", "consumer", "t", "key",
                                   key, "id", id, "debit_account_id", (uint64_t)1,
                                   "credit_account_id", (uint64_t)2, "amount", (int64_t)1,
                                   "ledger", (uint64_t)1, "code", (uint64_t)1);
            if (rc == TALLY_ok) {
                done = strcmp(r.code, "ok") == 0;
                ck_assert_msg(done || is_fault_to_move_on(r.code), "%s: %s", key, r.code);
                if (done) {
                    uint64_t seq = wire_u64(r.map, "cluster_seq");
                    if (seq > w->last_seq)
                        w->last_seq = seq;
                }
                wire_done(&r);
            }
            if (!done) {
                node = (node + 1) % NODES;
                w->moves++;
                if (attempt % NODES == 0) /* every node refused: a leader election, wait on */
                    test_pause_ms(FAILOVER_ROUND_PAUSE_MS);
            }
        }
        ck_assert_msg(done, "%s never acknowledged", key);
        atomic_fetch_add(w->acked, 1);
    }
    return NULL;
}

static int64_t credits_posted(tally_client *c, uint64_t id, uint64_t min_seq)
{
    wire_reply r;
    await_applied(c, min_seq);
    account_on(c, id, min_seq, &r);
    wire_expect(&r, "ok");
    int64_t v;
    ck_assert(msgpack_safe_get_i64(wire_field(wire_field(r.map, "account"), "credits_posted"), &v));
    wire_done(&r);
    return v;
}

/* What kill does mid-run: once FAILOVER_KILL_AFTER writes are
 * acknowledged, while FAILOVER_WRITERS write with failover. */
typedef void (*kill_fn)(cluster_fixture *f);

/* Accounts 1 and 2, opened on node a. */
static void open_accounts_1_2(cluster_fixture *f)
{
    for (uint64_t a = 1; a <= 2; a++) {
        wire_reply r;
        char key[16];
        snprintf(key, sizeof(key), "acct-%" PRIu64, a);
        wire_call(f->client[0], &r, "account_open", "ssuuu", "consumer", "t", "key", key, "id", a,
                  "ledger", (uint64_t)1, "code", (uint64_t)1);
        wire_expect(&r, "ok");
        wire_done(&r);
    }
}

/* Accounts 1 and 2, the writers, kill once enough is acknowledged, the
 * writers to their end: every write acknowledged; *last the highest
 * cluster_seq of an acknowledgement; the writers' moves to another node. */
static unsigned run_writers_through(cluster_fixture *f, kill_fn kill, uint64_t *last)
{
    open_accounts_1_2(f);
    _Atomic unsigned acked = 0;
    failover_writer w[FAILOVER_WRITERS];
    pthread_t th[FAILOVER_WRITERS];
    for (unsigned i = 0; i < FAILOVER_WRITERS; i++) {
        w[i] = (failover_writer){.id = i, .acked = &acked};
        for (int n = 0; n < NODES; n++) {
            tally_client_options o = {.url = f->node[n].url, .timeout_ms = 3000,
                                      .retries_set = true, .retries = 0, .consumer = "t",
                                      .no_autobatch = true};
            ck_assert_int_eq(tally_client_open(&o, &w[i].c[n]), TALLY_ok);
        }
        ck_assert_int_eq(pthread_create(&th[i], NULL, write_with_failover, &w[i]), 0);
    }
    int64_t until = test_deadline_ms(120000);
    while (atomic_load(&acked) < FAILOVER_KILL_AFTER && clock_mono_ms() < until)
        test_pause_ms(20);
    ck_assert_uint_ge(atomic_load(&acked), FAILOVER_KILL_AFTER);
    kill(f);
    *last = 0;
    unsigned moves = 0;
    for (unsigned i = 0; i < FAILOVER_WRITERS; i++) {
        pthread_join(th[i], NULL);
        *last = w[i].last_seq > *last ? w[i].last_seq : *last;
        moves += w[i].moves;
        for (int n = 0; n < NODES; n++)
            tally_client_close(w[i].c[n]);
    }
    ck_assert_uint_eq(atomic_load(&acked), FAILOVER_WRITERS * FAILOVER_KEYS);
    return moves;
}

/* Every node holds the same log, and each acknowledged write once. */
static void assert_each_write_once(cluster_fixture *f, uint64_t last)
{
    assert_converged(f, last);
    for (int n = 0; n < NODES; n++)
        ck_assert_int_eq(credits_posted(f->client[n], 2, last), FAILOVER_WRITERS * FAILOVER_KEYS);
}

static void kill_tallyd_b(cluster_fixture *f)
{
    tallyd_kill(&f->node[1]);
}

START_TEST(test_a_killed_node_loses_no_acknowledged_write)
{
    cluster_fixture f;
    cluster_up(&f);
    uint64_t last;
    unsigned moves = run_writers_through(&f, kill_tallyd_b, &last);
    /* node b comes back and catches up */
    tally_client_close(f.client[1]);
    const char *args[] = {"--cluster", f.urls, "--node", f.node_arg[1],
                          "--cluster-read-wait-ms", "60000", "--http", "http://127.0.0.1:0", NULL};
    wire_server_restart(&f.node[1], &f.client[1], args);
    assert_each_write_once(&f, last);
    fprintf(stderr, "check_cluster: kill -9 of node b: %u moves to another node\n", moves);
    cluster_down(&f);
}
END_TEST

static void kill_nats_1(cluster_fixture *f)
{
    nats_cluster_kill(&f->nats, 0);
}

START_TEST(test_a_killed_nats_server_loses_no_acknowledged_write)
{
    cluster_fixture f;
    cluster_up(&f);
    uint64_t last;
    unsigned moves = run_writers_through(&f, kill_nats_1, &last);
    nats_cluster_restart(&f.nats, 0); /* it rejoins */
    assert_each_write_once(&f, last);
    fprintf(stderr, "check_cluster: kill -9 of nats-server n1: %u moves to another node\n", moves);
    cluster_down(&f);
}
END_TEST

/* ---- subscribers ---- */

#define SUB_EVENTS 10
#define SUB_ACKED_ON_A 4
#define SUB_HELD_BY_A 3
#define SUB_ACK_WAIT_MS 8000
#define SUB_WAIT_MS 60000

/* A subscriber's fetch on c: its events' seqs and attempts into seqs and
 * attempts (up to max), their count; *head the log's head it saw. */
static unsigned sub_fetch_on_named(tally_client *c, const char *name, unsigned max,
                                   uint64_t wait_ms, uint64_t *seqs, uint64_t *attempts,
                                   uint64_t *head)
{
    wire_reply r;
    wire_call(c, &r, "sub_fetch", "suu", "name", name, "max", (uint64_t)max, "wait_ms", wait_ms);
    wire_expect(&r, "ok");
    ck_assert_uint_gt(wire_u64(r.map, "cluster_seq"), 0);
    const msgpack_object *ev = wire_field(r.map, "events");
    ck_assert(ev != NULL && ev->type == MSGPACK_OBJECT_ARRAY);
    unsigned n = ev->via.array.size;
    ck_assert_uint_le(n, max);
    for (unsigned i = 0; i < n; i++) {
        seqs[i] = wire_u64(&ev->via.array.ptr[i], "seq");
        attempts[i] = wire_u64(&ev->via.array.ptr[i], "attempt");
    }
    *head = wire_u64(r.map, "head");
    wire_done(&r);
    return n;
}

static unsigned sub_fetch_on(tally_client *c, unsigned max, uint64_t wait_ms, uint64_t *seqs,
                             uint64_t *attempts, uint64_t *head)
{
    return sub_fetch_on_named(c, "mailer", max, wait_ms, seqs, attempts, head);
}

static void sub_ack_done_on(tally_client *c, uint64_t seq)
{
    wire_reply r;
    wire_call(c, &r, "sub_ack", "sU", "name", "mailer", "done", 1u, (uint64_t[]){seq});
    wire_expect(&r, "ok");
    wire_done(&r);
}

typedef struct sub_poll {
    tally_client *c;
    unsigned n;
    uint64_t seq;
} sub_poll;

static void *sub_poll_main(void *arg)
{
    sub_poll *p = arg;
    uint64_t seqs[SUB_EVENTS], attempts[SUB_EVENTS], head;
    p->n = sub_fetch_on(p->c, 1, 30000, seqs, attempts, &head);
    p->seq = p->n ? seqs[0] : 0;
    return NULL;
}

/* A subscriber fetches and acknowledges on node a, fetches more without
 * acknowledging, node a is killed with kill -9; on node b it goes on:
 * what a acknowledged is not delivered again, the new events come at
 * once (attempt 1), the ones a held only after their lease ran out in
 * the log's time (attempt 2; the ticks of b and c carry that time), each
 * once; every event delivered, and node c holds the same cursor; a
 * long-poll on node b parks there until a write on node c wakes it. */
START_TEST(test_a_subscriber_continues_on_another_node_after_a_kill)
{
    cluster_fixture f;
    cluster_up(&f);
    wire_reply r;
    wire_call(f.client[0], &r, "sub_create", "su", "name", "mailer", "ack_wait_ms",
              (uint64_t)SUB_ACK_WAIT_MS);
    wire_expect(&r, "ok");
    ck_assert_uint_gt(wire_u64(r.map, "cluster_seq"), 0);
    wire_done(&r);
    for (unsigned i = 0; i < SUB_EVENTS; i++) {
        char key[32];
        snprintf(key, sizeof(key), "sub-%u", i);
        wire_call(f.client[i % NODES], &r, "account_open", "ssuuu", "consumer", "t", "key", key,
                  "id", (uint64_t)i + 700, "ledger", (uint64_t)1, "code", (uint64_t)1);
        wire_expect(&r, "ok");
        wire_done(&r);
    }
    bool delivered[SUB_EVENTS + 1] = {false}, held[SUB_EVENTS + 1] = {false};
    uint64_t seqs[SUB_EVENTS], attempts[SUB_EVENTS], head = 0;
    /* on node a: a long-poll fetch delivers (every event is in by now) */
    unsigned n = sub_fetch_on(f.client[0], SUB_ACKED_ON_A, 5000, seqs, attempts, &head);
    ck_assert_uint_eq(n, SUB_ACKED_ON_A);
    ck_assert_uint_eq(head, SUB_EVENTS);
    for (unsigned i = 0; i < n; i++) {
        ck_assert_uint_eq(attempts[i], 1);
        sub_ack_done_on(f.client[0], seqs[i]);
        delivered[seqs[i]] = true;
    }
    n = sub_fetch_on(f.client[0], SUB_HELD_BY_A, 0, seqs, attempts, &head);
    ck_assert_uint_eq(n, SUB_HELD_BY_A);
    for (unsigned i = 0; i < n; i++)
        held[seqs[i]] = true;
    tallyd_kill(&f.node[0]);
    tally_client_close(f.client[0]);
    f.client[0] = NULL;
    /* on node b: the events a never handed out at once, its held ones
     * after their lease */
    unsigned fresh = 0, redelivered = 0;
    int64_t until = test_deadline_ms(SUB_WAIT_MS);
    while (fresh + redelivered < SUB_EVENTS - SUB_ACKED_ON_A && clock_mono_ms() < until) {
        n = sub_fetch_on(f.client[1], SUB_EVENTS, 3000, seqs, attempts, &head);
        for (unsigned i = 0; i < n; i++) {
            ck_assert_uint_le(seqs[i], SUB_EVENTS);
            ck_assert_msg(!delivered[seqs[i]], "seq %" PRIu64 " delivered again on b", seqs[i]);
            delivered[seqs[i]] = true;
            if (held[seqs[i]]) {
                ck_assert_uint_eq(attempts[i], 2);
                redelivered++;
            } else {
                ck_assert_uint_eq(attempts[i], 1);
                ck_assert_msg(redelivered == 0, "a new event after a redelivery");
                fresh++;
            }
            sub_ack_done_on(f.client[1], seqs[i]);
        }
    }
    ck_assert_uint_eq(fresh, SUB_EVENTS - SUB_ACKED_ON_A - SUB_HELD_BY_A);
    ck_assert_uint_eq(redelivered, SUB_HELD_BY_A);
    for (unsigned s = 1; s <= SUB_EVENTS; s++)
        ck_assert_msg(delivered[s], "seq %u never delivered", s);
    /* node c holds the same cursor: everything acknowledged, nothing in flight */
    wire_call(f.client[1], &r, "sub_get", "s", "name", "mailer");
    wire_expect(&r, "ok");
    uint64_t at = wire_u64(r.map, "cluster_seq");
    wire_done(&r);
    uint64_t floors[2];
    for (int k = 1; k < NODES; k++) {
        wire_call(f.client[k], &r, "sub_get", "su", "name", "mailer", "min_seq", at);
        wire_expect(&r, "ok");
        const msgpack_object *sub = wire_field(r.map, "subscriber");
        floors[k - 1] = wire_u64(sub, "ack_floor");
        ck_assert_uint_eq(wire_u64(sub, "in_flight"), 0);
        ck_assert_uint_eq(wire_u64(sub, "redelivered"), SUB_HELD_BY_A);
        wire_done(&r);
    }
    ck_assert_uint_eq(floors[0], SUB_EVENTS);
    ck_assert_uint_eq(floors[1], SUB_EVENTS);
    /* a long-poll on node b waits there, parked, until a write taken by
     * node c reaches it */
    sub_poll poll = {.c = f.client[1]};
    pthread_t th;
    ck_assert_int_eq(pthread_create(&th, NULL, sub_poll_main, &poll), 0);
    ck_assert_msg(test_metrics_sample_reaches(f.node[1].http_port, "tally_long_polls_parked", 1,
                                              60000),
                  "the fetch on node b never parked");
    wire_call(f.client[2], &r, "account_open", "ssuuu", "consumer", "t", "key", "sub-late", "id",
              (uint64_t)799, "ledger", (uint64_t)1, "code", (uint64_t)1);
    wire_expect(&r, "ok");
    wire_done(&r);
    pthread_join(th, NULL);
    ck_assert_uint_eq(poll.n, 1);
    ck_assert_uint_eq(poll.seq, SUB_EVENTS + 1);
    cluster_down(&f); /* node a: its client closed, its process gone */
}
END_TEST

/* ---- failover in libtally and the CLI ---- */

#define LIST_KEYS 60
#define LIST_KILL_AFTER 20

typedef struct list_writer {
    tally_client *c;
    _Atomic unsigned acked;
    unsigned replayed;
} list_writer;

/* Transfers of 1 from account 1 to 2, one after the other, each under its
 * own key, on a client given every node's URL: each must be ok. */
static void *write_through_list(void *arg)
{
    list_writer *w = arg;
    for (unsigned k = 0; k < LIST_KEYS; k++) {
        char key[32];
        snprintf(key, sizeof(key), "list-%u", k);
        tally_transfer_args t = {.debit_account_id = 1, .credit_account_id = 2, .amount = 1,
                                 .ledger = 1, .code = 1};
        transfer_id(t.id.bytes, 3000 + k);
        tally_result res;
        int rc = tally_transfer(w->c, key, &t, &res);
        ck_assert_msg(rc == TALLY_ok && res.code == TALLY_ok, "%s: %s / %s", key,
                      tally_strerror(rc), tally_strerror(res.code));
        w->replayed += res.replayed;
        atomic_fetch_add(&w->acked, 1);
    }
    return NULL;
}

/* A libtally client given the three nodes' URLs writes on node a, the
 * first of its list; node a is killed with kill -9 mid-run: the client
 * moves on by itself, every write is acknowledged, and each is applied
 * once (account 2 holds exactly LIST_KEYS on nodes b and c). The CLI
 * with the same list, node a first and dead, writes through node b. */
START_TEST(test_a_client_with_every_node_fails_over)
{
    cluster_fixture f;
    cluster_up(&f);
    open_accounts_1_2(&f);
    char list[3 * sizeof(f.node[0].url) + 3];
    snprintf(list, sizeof(list), "%s,%s,%s", f.node[0].url, f.node[1].url, f.node[2].url);
    tally_client_options o = {.url = list, .timeout_ms = 3000, .retries_set = true,
                              .retries = 40, .consumer = "t", .no_autobatch = true};
    list_writer w = {0};
    ck_assert_int_eq(tally_client_open(&o, &w.c), TALLY_ok);
    pthread_t th;
    ck_assert_int_eq(pthread_create(&th, NULL, write_through_list, &w), 0);
    int64_t until = test_deadline_ms(120000);
    while (atomic_load(&w.acked) < LIST_KILL_AFTER && clock_mono_ms() < until)
        test_pause_ms(20);
    ck_assert_uint_ge(atomic_load(&w.acked), LIST_KILL_AFTER);
    tallyd_kill(&f.node[0]);
    tally_client_close(f.client[0]);
    f.client[0] = NULL;
    pthread_join(th, NULL);
    ck_assert_uint_eq(atomic_load(&w.acked), LIST_KEYS);
    uint64_t last = tally_client_cluster_seq(w.c);
    tally_client_close(w.c);
    for (int n = 1; n < NODES; n++)
        ck_assert_int_eq(credits_posted(f.client[n], 2, last), LIST_KEYS);
    /* the CLI: the same list, node a (dead) first */
    char *out = NULL, *err = NULL;
    const char *argv[] = {tallyd_program("tally"), "--url", list, "--timeout-ms", "2000",
                          "--json", "account", "open", "902", "--key", "cli-902", NULL};
    ck_assert_msg(test_run(argv, NULL, &out, &err) == 0, "%s%s", out, err);
    char *at = strstr(out, "\"cluster_seq\":");
    ck_assert_msg(at != NULL, "%s", out);
    uint64_t seq = strtoull(at + strlen("\"cluster_seq\":"), NULL, 10);
    free(out);
    free(err);
    wire_reply r;
    account_on(f.client[2], 902, seq, &r);
    wire_expect(&r, "ok");
    wire_done(&r);
    /* tally cluster status with the list: a line per node, node a's saying
     * it did not answer (exit 3), b and c theirs at least at seq */
    const char *status_argv[] = {tallyd_program("tally"), "--url", list, "--timeout-ms", "2000",
                                 "--retries", "0", "--json", "cluster", "status", NULL};
    ck_assert_int_eq(test_run(status_argv, NULL, &out, &err), 3);
    char dead[sizeof(f.node[0].url) + 32];
    snprintf(dead, sizeof(dead), "{\"url\":\"%s\",\"code\":", f.node[0].url);
    ck_assert_msg(strstr(out, dead) != NULL, "%s", out);
    for (int n = 1; n < NODES; n++) {
        char line[sizeof(f.node[0].url) + 64];
        snprintf(line, sizeof(line), "{\"url\":\"%s\",\"node\":\"%c\"", f.node[n].url, 'a' + n);
        ck_assert_msg((at = strstr(out, line)) != NULL, "%s", out);
        at = strstr(at, "\"position\":");
        ck_assert_uint_gt(strtoull(at + strlen("\"position\":"), NULL, 10), 0);
    }
    free(out);
    free(err);
    fprintf(stderr, "check_cluster: a client with three URLs through kill -9 of node a: %u "
            "replayed\n", w.replayed);
    cluster_down(&f); /* node a: its client closed, its process gone */
}
END_TEST

/* A subscriber write's reply r, ok: its cluster_seq. */
static uint64_t sub_write_ok(wire_reply *r)
{
    wire_expect(r, "ok");
    uint64_t seq = wire_u64(r->map, "cluster_seq");
    ck_assert_uint_gt(seq, 0);
    wire_done(r);
    return seq;
}

/* Subscriber "audit"'s cursor on every node at min_seq: the same on all. */
static void assert_same_cursor(cluster_fixture *f, uint64_t min_seq, uint64_t dead_letters)
{
    static const char *const fields[] = {"ack_floor", "delivered_seq", "in_flight", "redelivered",
                                         "dead_letters", "replaying"};
    uint64_t first[6] = {0};
    for (int n = 0; n < NODES; n++) {
        wire_reply r;
        wire_call(f->client[n], &r, "sub_get", "su", "name", "audit", "min_seq", min_seq);
        wire_expect(&r, "ok");
        const msgpack_object *sub = wire_field(r.map, "subscriber");
        for (int k = 0; k < 6; k++) {
            uint64_t v = wire_u64(sub, fields[k]);
            if (n == 0)
                first[k] = v;
            ck_assert_msg(v == first[k], "node %c: %s %" PRIu64 ", node a %" PRIu64, 'a' + n,
                          fields[k], v, first[k]);
        }
        wire_done(&r);
    }
    ck_assert_uint_eq(first[4], dead_letters);
}

/* Account 600 + i opened on node a: event i + 1. */
static void audit_account(cluster_fixture *f, unsigned i)
{
    wire_reply r;
    char key[32];
    snprintf(key, sizeof(key), "audit-%u", i);
    wire_call(f->client[0], &r, "account_open", "ssuuu", "consumer", "t", "key", key, "id",
              (uint64_t)i + 600, "ledger", (uint64_t)1, "code", (uint64_t)1);
    wire_expect(&r, "ok");
    wire_done(&r);
}

/* Every subscriber write, each sent to another node than the one before
 * (create, fetch, nak, park, ack, update, dlq_replay, dlq_discard, delete): each
 * answered ok, and every node holds the same cursor after each step. */
START_TEST(test_subscriber_writes_on_every_node_agree)
{
    cluster_fixture f;
    cluster_up(&f);
    wire_reply r;
    wire_call(f.client[2], &r, "sub_create", "su", "name", "audit", "ack_wait_ms",
              (uint64_t)60000);
    sub_write_ok(&r);
    for (unsigned i = 0; i < 3; i++)
        audit_account(&f, i);
    uint64_t seqs[SUB_EVENTS], attempts[SUB_EVENTS], head;
    ck_assert_uint_eq(sub_fetch_on_named(f.client[0], "audit", 3, 5000, seqs, attempts, &head), 3);
    for (unsigned i = 0; i < 3; i++)
        ck_assert_uint_eq(seqs[i], i + 1);
    /* a: 1, 2, 3 delivered; b: 1 nak'd; c: 2 parked; a: 3 acked */
    wire_call(f.client[1], &r, "sub_nak", "suu", "name", "audit", "seq", (uint64_t)1,
              "delay_ms", (uint64_t)100);
    sub_write_ok(&r);
    wire_call(f.client[2], &r, "sub_park", "sus", "name", "audit", "seq", (uint64_t)2, "reason",
              "bad");
    sub_write_ok(&r);
    wire_call(f.client[0], &r, "sub_ack", "sU", "name", "audit", "done", 1u, (uint64_t[]){3});
    uint64_t at = sub_write_ok(&r);
    assert_same_cursor(&f, at, 1);
    /* b: updated (a lease, an owner): every node holds it, the cursor kept */
    wire_call(f.client[1], &r, "sub_update", "sus", "name", "audit", "ack_wait_ms",
              (uint64_t)50000, "contact", "audit-team");
    at = sub_write_ok(&r);
    for (int k = 0; k < NODES; k++) {
        wire_call(f.client[k], &r, "sub_get", "su", "name", "audit", "min_seq", at);
        wire_expect(&r, "ok");
        const msgpack_object *s = wire_field(r.map, "subscriber");
        tally_str contact;
        ck_assert_uint_eq(wire_u64(s, "ack_wait_ms"), 50000);
        ck_assert(msgpack_safe_get_str(wire_field(s, "contact"), &contact) &&
                  tally_str_equal(contact, tally_str_from("audit-team")));
        wire_done(&r);
    }
    assert_same_cursor(&f, at, 1);
    wire_call(f.client[1], &r, "dlq_list", "su", "name", "audit", "min_seq", at);
    wire_expect(&r, "ok");
    const msgpack_object *entries = wire_field(r.map, "entries");
    ck_assert_uint_eq(entries->via.array.size, 1);
    ck_assert_uint_eq(wire_u64(&entries->via.array.ptr[0], "seq"), 2);
    wire_done(&r);
    /* a: 2 replayed; b: 1 (nak'd) and 2 (replayed) fetched; c: both acked */
    wire_call(f.client[0], &r, "dlq_replay", "su", "name", "audit", "seq", (uint64_t)2);
    sub_write_ok(&r);
    bool got[3] = {false};
    int64_t until = test_deadline_ms(SUB_WAIT_MS);
    while (!(got[1] && got[2]) && clock_mono_ms() < until) {
        unsigned n = sub_fetch_on_named(f.client[1], "audit", 3, 3000, seqs, attempts, &head);
        for (unsigned i = 0; i < n; i++) {
            ck_assert_uint_le(seqs[i], 2);
            got[seqs[i]] = true;
            wire_call(f.client[2], &r, "sub_ack", "sU", "name", "audit", "done", 1u,
                      (uint64_t[]){seqs[i]});
            at = sub_write_ok(&r);
        }
    }
    ck_assert(got[1] && got[2]);
    assert_same_cursor(&f, at, 0);
    /* c: 4 fetched; a: parked; b: discarded */
    audit_account(&f, 3);
    unsigned n = sub_fetch_on_named(f.client[2], "audit", 3, 5000, seqs, attempts, &head);
    ck_assert_uint_eq(n, 1);
    ck_assert_uint_eq(seqs[0], 4);
    wire_call(f.client[0], &r, "sub_park", "su", "name", "audit", "seq", (uint64_t)4);
    at = sub_write_ok(&r);
    assert_same_cursor(&f, at, 1);
    wire_call(f.client[1], &r, "dlq_discard", "su", "name", "audit", "seq", (uint64_t)4);
    at = sub_write_ok(&r);
    assert_same_cursor(&f, at, 0);
    /* c: deleted, on every node */
    wire_call(f.client[2], &r, "sub_delete", "s", "name", "audit");
    at = sub_write_ok(&r);
    for (int k = 0; k < NODES; k++) {
        wire_call(f.client[k], &r, "sub_get", "su", "name", "audit", "min_seq", at);
        wire_expect(&r, "subscriber_not_found");
        wire_done(&r);
    }
    cluster_down(&f);
}
END_TEST

int main(void)
{
    if (nats_cluster_server_path() == NULL) {
        fprintf(stderr, "check_cluster: nats-server is not installed ($NATS_SERVER: %s); "
                        "skipped (apt-get install nats-server)\n",
                getenv("NATS_SERVER") ? getenv("NATS_SERVER") : "unset");
        return 77;
    }
    const test_row rows[] = {
        {"converge", test_concurrent_writes_to_every_node_converge, TEST_TIMEOUT_S},
        {"read", test_a_read_with_min_seq_sees_a_write_made_on_another_node, TEST_TIMEOUT_S},
        {"catch_up", test_a_restarted_node_catches_up, TEST_TIMEOUT_S},
        {"catch_up", test_a_node_restored_from_a_backup_catches_up, TEST_TIMEOUT_S},
        {"divergence", test_a_node_refuses_a_stream_behind_it, TEST_TIMEOUT_S},
        {"kill", test_a_killed_node_loses_no_acknowledged_write, TEST_TIMEOUT_S},
        {"kill", test_a_killed_nats_server_loses_no_acknowledged_write, TEST_TIMEOUT_S},
        {"subscriber", test_a_subscriber_continues_on_another_node_after_a_kill, TEST_TIMEOUT_S},
        {"failover", test_a_client_with_every_node_fails_over, TEST_TIMEOUT_S},
        {"subscriber", test_subscriber_writes_on_every_node_agree, TEST_TIMEOUT_S},
    };
    return test_run_suite(test_suite_of_rows("cluster", TEST_ROWS(rows)));
}
