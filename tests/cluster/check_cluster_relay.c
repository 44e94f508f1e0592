/*
 * check_cluster_relay.c — tally-relay on a cluster (docs/CLUSTER.md,
 * "Failover for clients"; docs/RELAY.md): three nats-servers in one
 * JetStream cluster, three tallyd, and a relay given the three nodes' URLs
 * (node a first) with one HTTP endpoint, the receiver of the relay tests
 * (tests/support/relay_receiver.h: it records every delivery and verifies
 * its signature; its /slow path takes 30 ms a POST, so the relay is
 * still delivering when its node dies):
 *
 * - 60 accounts opened on node b; once 10 events reached the receiver, node
 *   a — the relay's node — is killed with kill -9, and 20 more accounts are
 *   opened on node c; the relay moves on to node b by itself and the
 *   receiver gets every event of the log at least once (the events node a
 *   had leased come again after their lease, 3 s of the log's time), each
 *   seq always under one webhook-id (the same event id from every node),
 *   every signature valid, and no event that is not in the log: exactly
 *   once by event id. The relay's subscriber then has every event
 *   acknowledged on nodes b and c alike.
 *
 * Without nats-server installed the program says so and exits 77.
 */
#include "config.h"

#include "common/clock.h"

#include "tests/support/client_support.h"
#include "tests/support/cluster_nodes.h"
#include "tests/support/relay_receiver.h"
#include "tests/support/run.h"
#include "tests/support/suite.h"
#include "tests/support/test_support.h"
#include "tests/support/wait.h"
#include "tests/support/wire.h"

#include <check.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define TEST_TIMEOUT_S 600
#define NODES 3
#define WAIT_MS 180000
#define FIRST_EVENTS 60
#define MORE_EVENTS 20
#define KILL_AFTER 10

/* The relay: its config and log in dir, its pid. */
typedef struct relay {
    char dir[256], config[320], log[320];
    pid_t pid;
} relay;

static char *relay_log(const relay *r)
{
    int fd = open(r->log, O_RDONLY | O_CLOEXEC);
    char *text = fd >= 0 ? test_fd_read_all(fd) : strdup("(no log)");
    ck_assert_ptr_nonnull(text);
    return text;
}

/* A relay of every node's URL (node a first) to the receiver's /slow. */
static void relay_start(relay *r, const cluster_nodes *c, const receiver *rc)
{
    const char *tmp = getenv("TMPDIR");
    snprintf(r->dir, sizeof(r->dir), "%s/cluster-relay-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    ck_assert_ptr_nonnull(mkdtemp(r->dir));
    snprintf(r->config, sizeof(r->config), "%s/relay.conf", r->dir);
    snprintf(r->log, sizeof(r->log), "%s/relay.log", r->dir);
    FILE *f = fopen(r->config, "w");
    ck_assert_ptr_nonnull(f);
    fprintf(f, "url = %s,%s,%s\n[endpoint hooks]\nbackfill = all\nack_wait_ms = 3000\n"
               "url = http://127.0.0.1:%u/slow\nsecret = whsec_" RECEIVER_SECRET_B64 "\n",
            c->node[0].url, c->node[1].url, c->node[2].url, (unsigned)rc->port);
    ck_assert_int_eq(fclose(f), 0);
    ck_assert_int_eq(chmod(r->config, 0600), 0);
    int fd = open(r->log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
    ck_assert_int_ge(fd, 0);
    const char *argv[] = {tallyd_program("tally-relay"), "--config", r->config, "--lock-dir",
                          r->dir, NULL};
    r->pid = test_spawn(argv, NULL, fd, fd);
    close(fd);
}

static void relay_must_run(const relay *r)
{
    int status;
    if (test_wait_ms(r->pid, 0, &status))
        ck_abort_msg("tally-relay exited (%d); its log:\n%s", test_exit_code(status),
                     relay_log(r));
}

/* SIGTERM: the relay must stop cleanly (exit 0). */
static void relay_stop(relay *r)
{
    kill(r->pid, SIGTERM);
    int status = 0;
    bool ended = test_wait_ms(r->pid, 60000, &status);
    if (!ended) {
        kill(r->pid, SIGKILL);
        test_wait(r->pid);
    }
    ck_assert_msg(ended && test_exit_code(status) == 0,
                  "tally-relay did not stop cleanly (exit %d); its log:\n%s",
                  ended ? test_exit_code(status) : -1, relay_log(r));
    test_remove_dir(r->dir);
}

static void wait_delivered(receiver *rc, const relay *r, size_t count)
{
    int64_t until = test_deadline_ms(WAIT_MS);
    size_t now = 0;
    while ((now = receiver_delivered(rc, "/slow", NULL)) < count && clock_mono_ms() < until) {
        relay_must_run(r);
        test_pause_ms(20);
    }
    ck_assert_msg(now >= count, "%zu of %zu events delivered; the relay's log:\n%s", now, count,
                  relay_log(r));
}

/* Every delivery: a valid signature, a seq of the log (1..head), each seq
 * always under one id and each id under one seq; every seq delivered
 * (2xx) at least once. */
static void assert_each_event_once(receiver *rc, uint64_t head)
{
    char (*ids)[40] = calloc(head + 1, sizeof(*ids));
    bool *ok = calloc(head + 1, sizeof(bool));
    ck_assert(ids && ok);
    pthread_mutex_lock(&rc->mu);
    for (size_t i = 0; i < rc->count; i++) {
        const hook *h = &rc->hooks[i];
        ck_assert_msg(h->signature_ok, "delivery %zu (seq %" PRIu64 "): signature", i, h->seq);
        ck_assert_msg(h->seq >= 1 && h->seq <= head, "seq %" PRIu64 " beyond the log (%" PRIu64
                      ")", h->seq, head);
        if (ids[h->seq][0] == '\0')
            snprintf(ids[h->seq], sizeof(ids[h->seq]), "%s", h->id);
        ck_assert_msg(strcmp(ids[h->seq], h->id) == 0, "seq %" PRIu64 " came as %s and as %s",
                      h->seq, ids[h->seq], h->id);
        ok[h->seq] = ok[h->seq] || h->status / 100 == 2;
    }
    pthread_mutex_unlock(&rc->mu);
    for (uint64_t s = 1; s <= head; s++) {
        ck_assert_msg(ok[s], "seq %" PRIu64 " never delivered", s);
        for (uint64_t t = s + 1; t <= head; t++)
            ck_assert_msg(strcmp(ids[s], ids[t]) != 0, "seqs %" PRIu64 " and %" PRIu64
                          " share the id %s", s, t, ids[s]);
    }
    ck_assert_uint_eq(receiver_delivered(rc, "/slow", NULL), head);
    free(ids);
    free(ok);
}

/* The relay's subscriber on node i has acknowledged every event up to
 * head (waited for: its last acks may still be on their way). */
static void assert_acked_on(cluster_nodes *c, int i, uint64_t head)
{
    tally_subscriber_info info;
    int64_t until = test_deadline_ms(WAIT_MS);
    for (;;) {
        ck_assert_int_eq(tally_subscriber_get(c->client[i], "relay:hooks", &info), TALLY_ok);
        if (info.ack_floor >= head || clock_mono_ms() >= until)
            break;
        test_pause_ms(50);
    }
    ck_assert_msg(info.ack_floor == head && info.in_flight == 0,
                  "node %c: ack_floor %" PRIu64 ", in flight %" PRIu64 ", head %" PRIu64,
                  'a' + i, info.ack_floor, (uint64_t)info.in_flight, head);
}

START_TEST(test_a_relay_moves_on_when_its_node_dies)
{
    cluster_nodes c;
    cluster_nodes_init(&c, NODES);
    for (int i = 0; i < NODES; i++)
        cluster_nodes_start(&c, i);
    receiver *rc = receiver_start();
    relay r;
    relay_start(&r, &c, rc);
    test_client_open_accounts(c.client[1], 1, FIRST_EVENTS);
    wait_delivered(rc, &r, KILL_AFTER);
    tallyd_kill(&c.node[0]); /* the relay's node, while it delivers */
    size_t at_kill = receiver_delivered(rc, "/slow", NULL);
    ck_assert_msg(at_kill < FIRST_EVENTS, "all %zu events arrived before the kill", at_kill);
    tally_client_close(c.client[0]);
    c.client[0] = NULL;
    test_client_open_accounts(c.client[2], FIRST_EVENTS + 1, MORE_EVENTS);
    uint64_t head = test_client_head(c.client[2]);
    ck_assert_uint_ge(head, FIRST_EVENTS + MORE_EVENTS);
    wait_delivered(rc, &r, head);
    assert_each_event_once(rc, head);
    assert_acked_on(&c, 1, head);
    assert_acked_on(&c, 2, head);
    relay_stop(&r);
    receiver_stop(rc);
    cluster_nodes_down(&c);
}
END_TEST

int main(void)
{
    if (nats_cluster_server_path() == NULL) {
        fprintf(stderr, "check_cluster_relay: skipped: $NATS_SERVER is not an executable "
                        "nats-server (setup.sh installs Debian's)\n");
        return 77;
    }
    const test_row rows[] = {
        {"relay", test_a_relay_moves_on_when_its_node_dies, TEST_TIMEOUT_S},
    };
    return test_run_suite(test_suite_of_rows("cluster_relay", TEST_ROWS(rows)));
}
