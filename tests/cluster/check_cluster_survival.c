/*
 * check_cluster_survival.c — what a cluster survives beyond one process's
 * loss (docs/CLUSTER.md, "What survives what") and the runbook's
 * procedure for a nats-server's store (docs/OPERATIONS.md, "Cluster
 * runbook"), with three nats-servers and three tallyd on loopback:
 *
 * - stop: a tallyd asked to stop (SIGTERM) while one nats-server is
 *   stopped (SIGSTOP: silent, its connections open) exits cleanly within
 *   the harness's bound, with each of the three servers stopped in turn
 *   (one of them the stream's leader or the meta leader, whose requests
 *   go unanswered); the node then starts again and catches up;
 * - rebuild: a nats-server stopped, its store directory removed, started
 *   again with the same name, becomes a current replica of the stream,
 *   and then is one of the majority a node reads: with another server
 *   stopped, writes are answered and every node applies them;
 * - two of the three nats-servers stopped (SIGTERM): a write is answered
 *   cluster_unavailable, a read is answered from what the node applied
 *   (its cluster_seq); once they are back the write sent again is
 *   applied once and the nodes agree;
 * - all at once: every tallyd and every nats-server killed at the same
 *   moment (kill -9), then all started again: every write acknowledged
 *   before is there once on every node, a retry of its key replays, and
 *   the nodes agree. Killing processes leaves the kernel's page cache:
 *   this shows what a crash of every process keeps, not what a power cut
 *   keeps (that depends on the servers' sync_interval, docs/CLUSTER.md).
 *
 * Without nats-server installed the program says so and exits 77.
 */
#include "config.h"

#include "common/clock.h"

#include "tests/support/cluster_fixture.h"
#include "tests/support/nats_cluster.h"
#include "tests/support/run.h"
#include "tests/support/suite.h"
#include "tests/support/tallyd_harness.h"
#include "tests/support/test_support.h"
#include "tests/support/wait.h"
#include "tests/support/wire.h"

#include <check.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TEST_TIMEOUT_S 600
#define WRITE_WAIT_MS 120000 /* one write through an election, on a loaded machine */
#define WRITE_RETRY_PAUSE_MS 100
#define ACCOUNTS_ALL 30 /* opened before everything is killed */

/* Open account id on c under the key acct-<id>, sent again while the
 * answer is a fault (an election, a node catching up): until ok, which a
 * retry of a key already applied is too (replayed: true, unless replayed
 * is NULL). Returns its cluster_seq. */
static uint64_t open_account_replayed(tally_client *c, uint64_t id, bool *replayed)
{
    char key[32];
    snprintf(key, sizeof(key), "acct-%" PRIu64, id);
    int64_t until = test_deadline_ms(WRITE_WAIT_MS);
    for (;;) {
        wire_reply r;
        int rc = wire_try_call(c, &r, "account_open", "ssuuu", "consumer", "t", "key", key, "id",
                               id, "ledger", (uint64_t)1, "code", (uint64_t)1);
        if (rc == 0 && strcmp(r.code, "ok") == 0) {
            uint64_t seq = wire_u64(r.map, "cluster_seq");
            const msgpack_object *again = wire_field(r.map, "replayed");
            if (replayed)
                *replayed = again->type == MSGPACK_OBJECT_BOOLEAN && again->via.boolean;
            wire_done(&r);
            return seq;
        }
        const char *code = rc == 0 ? r.code : "no reply";
        ck_assert_msg(clock_mono_ms() < until, "account %" PRIu64 ": still %s", id, code);
        ck_assert_msg(rc != 0 || strcmp(code, "cluster_unavailable") == 0 ||
                          strcmp(code, "not_caught_up") == 0 || strcmp(code, "overloaded") == 0,
                      "account %" PRIu64 ": %s", id, code);
        if (rc == 0)
            wire_done(&r);
        test_pause_ms(WRITE_RETRY_PAUSE_MS);
    }
}

static uint64_t open_account(tally_client *c, uint64_t id)
{
    return open_account_replayed(c, id, NULL);
}

/* nats-server pid stopped with SIGSTOP, every thread of it. */
static void nats_freeze(pid_t pid)
{
    ck_assert_int_eq(kill(pid, SIGSTOP), 0);
    TEST_WAIT_UNTIL(tallyd_threads_stopped(pid), 10000, "every thread of nats-server %d stopped",
                    (int)pid);
}

/* Still stopped: nothing else continued it (a stop undone under the test
 * would make it prove nothing). */
static void nats_still_frozen(pid_t pid)
{
    ck_assert_msg(tallyd_threads_stopped(pid), "nats-server %d runs again: something other than "
                  "this test continued it", (int)pid);
}

static uint64_t seq_max(uint64_t a, uint64_t b)
{
    return a > b ? a : b;
}

/* Accounts from..to opened, each on the node id % NODES: the greater of
 * last and their cluster_seqs. */
static uint64_t open_accounts(cluster_fixture *f, uint64_t from, uint64_t to, uint64_t last)
{
    for (uint64_t id = from; id <= to; id++)
        last = seq_max(last, open_account(f->client[id % NODES], id));
    return last;
}

/* ---- a clean stop while a nats-server is stopped ---- */

START_TEST(test_a_node_stops_while_a_nats_server_is_stopped)
{
    cluster_fixture f;
    cluster_up(&f);
    uint64_t last = 0;
    for (int i = 0; i < NATS_CLUSTER_NODES; i++) {
        last = seq_max(last, open_account(f.client[0], 100 + (uint64_t)i));
        pid_t pid = f.nats.node[i].pid;
        nats_freeze(pid);
        /* node b writes meanwhile: the stream moves on (after an election
         * when the stopped server led it), and node a's reader, whose
         * consumer may be on the stopped server, has more to read */
        last = seq_max(last, open_account(f.client[1], 200 + (uint64_t)i));
        nats_still_frozen(pid);
        tally_client_close(f.client[0]);
        f.client[0] = NULL;
        int64_t asked = clock_mono_ms();
        ck_assert_msg(tallyd_stop(&f.node[0]) == 0,
                      "node a did not stop cleanly with nats-server n%d stopped", i + 1);
        fprintf(stderr, "node a stopped in %" PRId64 " ms with nats-server n%d stopped\n",
                clock_mono_ms() - asked, i + 1);
        ck_assert_int_eq(kill(pid, SIGCONT), 0);
        ck_assert_msg(await_stream_current(&f), "nats-server n%d never current again", i + 1);
        node_restart(&f, 0);
    }
    assert_converged(&f, last);
    cluster_down(&f);
}
END_TEST

/* ---- a nats-server's store rebuilt ---- */

START_TEST(test_a_nats_server_rebuilt_from_nothing_rejoins_the_majority)
{
    cluster_fixture f;
    cluster_up(&f);
    uint64_t last = 0;
    last = open_accounts(&f, 1, 10, last);
    /* the runbook: stop it, remove its store, start it with the same name */
    nats_cluster_stop_node(&f.nats, 2);
    const char *rm[] = {"/bin/rm", "-rf", f.nats.node[2].store, NULL};
    ck_assert_int_eq(test_run(rm, NULL, NULL, NULL), 0);
    last = open_accounts(&f, 11, 20, last); /* writes go on meanwhile */
    nats_cluster_restart(&f.nats, 2);
    ck_assert_msg(await_stream_current(&f), "the rebuilt nats-server n3 never became current");
    /* it now holds the stream: with n1 stopped, n2 and n3 are the majority
     * every node reads, and writes go on */
    nats_cluster_stop_node(&f.nats, 0);
    last = open_accounts(&f, 21, 30, last);
    for (int i = 0; i < NODES; i++)
        await_applied(f.client[i], last);
    nats_cluster_restart(&f.nats, 0);
    ck_assert(await_stream_current(&f));
    assert_converged(&f, last);
    ck_assert_uint_eq(stats_u64(f.client[2], "accounts"), 30);
    cluster_down(&f);
}
END_TEST

/* ---- two of three nats-servers lost ---- */

START_TEST(test_writes_wait_out_the_loss_of_two_nats_servers)
{
    cluster_fixture f;
    cluster_up(&f);
    uint64_t last = 0;
    last = open_accounts(&f, 1, 5, last);
    for (int i = 0; i < NODES; i++)
        await_applied(f.client[i], last);
    nats_cluster_stop_node(&f.nats, 0);
    nats_cluster_stop_node(&f.nats, 1);
    /* no quorum: a write is refused, a fault (retry with the same key) */
    wire_reply r;
    int rc = wire_try_call(f.client[0], &r, "account_open", "ssuuu", "consumer", "t", "key",
                           "acct-6", "id", (uint64_t)6, "ledger", (uint64_t)1, "code",
                           (uint64_t)1);
    ck_assert_msg(rc == 0, "no answer to a write without a quorum: %d", rc);
    ck_assert_msg(strcmp(r.code, "cluster_unavailable") == 0, "a write without a quorum: %s",
                  r.code);
    wire_done(&r);
    /* reads go on, from what the node applied, saying where it is */
    wire_call(f.client[2], &r, "account_get", "u", "id", (uint64_t)1);
    wire_expect(&r, "ok");
    ck_assert_uint_ge(wire_u64(r.map, "cluster_seq"), last);
    wire_done(&r);
    nats_cluster_restart_all(&f.nats);
    ck_assert_msg(await_stream_current(&f), "the stream never had a quorum again");
    /* the refused write sent again: applied once, whether or not the
     * stream had taken it */
    last = seq_max(last, open_account(f.client[1], 6));
    assert_converged(&f, last);
    ck_assert_uint_eq(stats_u64(f.client[2], "accounts"), 6);
    cluster_down(&f);
}
END_TEST

/* ---- every process killed at once ---- */

START_TEST(test_every_process_killed_at_once_keeps_every_acknowledged_write)
{
    cluster_fixture f;
    cluster_up(&f);
    uint64_t last = 0;
    last = open_accounts(&f, 1, ACCOUNTS_ALL, last);
    for (int i = 0; i < NODES; i++) {
        tally_client_close(f.client[i]);
        f.client[i] = NULL;
        tallyd_kill(&f.node[i]);
    }
    for (int i = 0; i < NATS_CLUSTER_NODES; i++)
        nats_cluster_kill(&f.nats, i);
    nats_cluster_restart_all(&f.nats);
    ck_assert_msg(await_stream_current(&f), "the stream never had a leader and current replicas "
                  "again");
    for (int i = 0; i < NODES; i++)
        node_restart(&f, i);
    for (int i = 0; i < NODES; i++) {
        await_applied(f.client[i], last);
        ck_assert_uint_eq(stats_u64(f.client[i], "accounts"), ACCOUNTS_ALL);
    }
    /* a client that never heard an answer sends its key again: a replay */
    for (uint64_t id = 1; id <= ACCOUNTS_ALL; id++) {
        bool replayed = false;
        open_account_replayed(f.client[(id + 1) % NODES], id, &replayed);
        ck_assert_msg(replayed, "account %" PRIu64 " was opened again", id);
    }
    uint64_t after = open_account(f.client[0], ACCOUNTS_ALL + 1); /* and writes go on */
    assert_converged(&f, after);
    ck_assert_uint_eq(stats_u64(f.client[1], "accounts"), ACCOUNTS_ALL + 1);
    cluster_down(&f);
}
END_TEST

int main(void)
{
    nats_cluster_prefer_recent(); /* 2.9.10's replicas drift apart under these faults */
    if (nats_cluster_server_path() == NULL) {
        fprintf(stderr, "check_cluster_survival: nats-server is not installed ($NATS_SERVER: "
                        "%s); skipped (apt-get install nats-server)\n",
                getenv("NATS_SERVER") ? getenv("NATS_SERVER") : "unset");
        return 77;
    }
    const test_row rows[] = {
        {"stop", test_a_node_stops_while_a_nats_server_is_stopped, TEST_TIMEOUT_S},
        {"rebuild", test_a_nats_server_rebuilt_from_nothing_rejoins_the_majority, TEST_TIMEOUT_S},
        {"majority", test_writes_wait_out_the_loss_of_two_nats_servers, TEST_TIMEOUT_S},
        {"all", test_every_process_killed_at_once_keeps_every_acknowledged_write, TEST_TIMEOUT_S},
    };
    return test_run_suite(test_suite_of_rows("cluster_survival", TEST_ROWS(rows)));
}
