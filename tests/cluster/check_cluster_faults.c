/*
 * check_cluster_faults.c — tallyd in cluster mode under faults
 * (docs/CLUSTER.md, "Tests and measurements"): three nats-servers in one
 * JetStream cluster and three tallyd on loopback
 * (tests/support/cluster_fixture.h).
 *
 * - SIGSTOP of a tallyd past a subscriber's lease: the events it held are
 *   redelivered through the other nodes after the lease, in the log's
 *   time; writes sent to it while it is stopped are answered, once it
 *   runs again, as the stream's order makes them (an account another node
 *   opened meanwhile `exists`; a fetch hands out nothing the others
 *   delivered and acknowledged) or not at all, never from its stale state;
 *   it catches up to the same log and cursor.
 * - a seeded random schedule of faults: kill -9, SIGSTOP then SIGCONT,
 *   and SIGTERM then a start again, of tallyd and of nats-server, at most
 *   one of each down at once (sometimes one of each together), while
 *   writers send transfers each under its own key, to a node the seed
 *   chooses, moving with the same key to another on no answer or a fault;
 *   after each acknowledgement a read on another node with its
 *   cluster_seq as min_seq must see the transfer (or say not_caught_up,
 *   or not answer: the node is down). Every 3 faults, while the writers
 *   go on, every node's log must be the same bytes as far as all hold it
 *   (the first event that differs named). At the end a model checks every
 *   node: every acknowledged transfer present, every present one sent by
 *   a writer, each once (the counts and account 2's credits), every log
 *   identical, tally-recon clean on each; and every node compared a
 *   checkpoint (every 32 positions here) and none stopped as diverged.
 *
 * - tally-bench --cluster against the three nodes, verified, and with
 *   --kill-pid of node c: verified, the fail-over reported.
 *
 * TALLY_CLUSTER_FAULTS sets the number of faults (FAULTS_DEFAULT, 15,
 * unless it is set: make check-long runs 200; none on a nats-server older
 * than 2.10),
 * TALLY_FAULT_SEED the seed (printed at the start and on a failure).
 * Without nats-server installed the program says so and exits 77.
 */
#include "config.h"

#include "common/clock.h"
#include "common/error.h"
#include "common/msgpack_safe.h"

#include "tests/support/cluster_fixture.h"
#include "tests/support/http_client.h"
#include "tests/support/run.h"
#include "tests/support/suite.h"
#include "tests/support/test_support.h"
#include "tests/support/wait.h"
#include "tests/support/wire.h"

#include <check.h>
#include <inttypes.h>
#include <nats/nats.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define CLUSTER_TEST_TIMEOUT_S 600

static uint64_t fault_seed;
static uint64_t fault_count;

static void transfer_id(uint8_t id[16], unsigned i)
{
    memset(id, 0, 16);
    id[0] = 0x02;
    id[13] = (uint8_t)(i >> 16);
    id[14] = (uint8_t)(i >> 8);
    id[15] = (uint8_t)i;
}

/* Account id opened on c under key: the reply's code into code. */
static void account_open_on(tally_client *c, const char *key, uint64_t id, wire_reply *r)
{
    wire_call(c, r, "account_open", "ssuuu", "consumer", "t", "key", key, "id", id, "ledger",
              (uint64_t)1, "code", (uint64_t)1);
}

/* A refusal a client meets while a node or a nats-server is down: try
 * another node, or again, with the same key. */
static bool is_fault_code(const char *code)
{
    return strcmp(code, "cluster_unavailable") == 0 || strcmp(code, "shutting_down") == 0 ||
           strcmp(code, "overloaded") == 0 || strcmp(code, "timed_out") == 0;
}

static uint64_t reply_ok_seq(wire_reply *r)
{
    wire_expect(r, "ok");
    uint64_t seq = wire_u64(r->map, "cluster_seq");
    ck_assert_uint_gt(seq, 0);
    wire_done(r);
    return seq;
}

/* A client of node i's URL with a bound on each call and no retries of
 * its own. */
static tally_client *client_of(const cluster_fixture *f, int i, unsigned timeout_ms)
{
    tally_client_options o = {.url = f->node[i].url, .timeout_ms = timeout_ms,
                              .retries_set = true, .retries = 0, .consumer = "t",
                              .no_autobatch = true};
    tally_client *c = NULL;
    ck_assert_int_eq(tally_client_open(&o, &c), TALLY_ok);
    return c;
}

/* ---- SIGSTOP past a lease ---- */

#define STOP_EVENTS 6
#define STOP_HELD 3
#define STOP_ACK_WAIT_MS 4000
#define STOP_LATE_ACCOUNT 710
#define STOP_EVENTS_ALL (STOP_EVENTS + 1) /* with the account opened while a is stopped */
#define STOP_REPLY_WAIT_MS 120000

/* A write sent to the stopped node: its code, or "" when no answer came. */
typedef struct stale_write {
    tally_client *c;
    bool is_fetch;
    char code[64];
    unsigned events; /* a fetch's: how many it handed out */
    uint64_t first_seq;
} stale_write;

static void *stale_write_main(void *arg)
{
    stale_write *w = arg;
    wire_reply r;
    int rc = w->is_fetch
                 ? wire_try_call(w->c, &r, "sub_fetch", "suu", "name", "mailer", "max",
                                 (uint64_t)STOP_EVENTS_ALL, "wait_ms", (uint64_t)0)
                 : wire_try_call(w->c, &r, "account_open", "ssuuu", "consumer", "t", "key",
                                 "a-late", "id", (uint64_t)STOP_LATE_ACCOUNT, "ledger",
                                 (uint64_t)1, "code", (uint64_t)1);
    if (rc != TALLY_ok)
        return NULL;
    snprintf(w->code, sizeof(w->code), "%s", r.code);
    if (w->is_fetch && strcmp(r.code, "ok") == 0) {
        const msgpack_object *ev = wire_field(r.map, "events");
        ck_assert(ev->type == MSGPACK_OBJECT_ARRAY);
        w->events = ev->via.array.size;
        if (w->events)
            w->first_seq = wire_u64(&ev->via.array.ptr[0], "seq");
    }
    wire_done(&r);
    return NULL;
}

/* Fetch on c (a long-poll of wait_ms) and acknowledge each event on ack:
 * fresh events must come with attempt 1, held ones with 2, none twice. */
static void fetch_and_ack(tally_client *c, tally_client *ack, bool delivered[], const bool held[],
                          unsigned *fresh, unsigned *redelivered, uint64_t *last_seq)
{
    wire_reply r;
    wire_call(c, &r, "sub_fetch", "suu", "name", "mailer", "max", (uint64_t)STOP_EVENTS_ALL,
              "wait_ms", (uint64_t)3000);
    wire_expect(&r, "ok");
    const msgpack_object *ev = wire_field(r.map, "events");
    ck_assert(ev->type == MSGPACK_OBJECT_ARRAY);
    for (uint32_t i = 0; i < ev->via.array.size; i++) {
        uint64_t seq = wire_u64(&ev->via.array.ptr[i], "seq");
        uint64_t attempt = wire_u64(&ev->via.array.ptr[i], "attempt");
        ck_assert_uint_le(seq, STOP_EVENTS_ALL);
        ck_assert_msg(!delivered[seq], "seq %" PRIu64 " delivered again", seq);
        delivered[seq] = true;
        ck_assert_uint_eq(attempt, held[seq] ? 2 : 1);
        (*(held[seq] ? redelivered : fresh))++;
        wire_reply a;
        wire_call(ack, &a, "sub_ack", "sU", "name", "mailer", "done", 1u, (uint64_t[]){seq});
        *last_seq = reply_ok_seq(&a);
    }
    wire_done(&r);
}

/* Subscriber mailer's cursor on every node once it has applied min_seq:
 * everything acknowledged, nothing in flight, the held ones redelivered. */
static void assert_cursor_done(cluster_fixture *f, uint64_t min_seq)
{
    for (int n = 0; n < NODES; n++) {
        await_applied(f->client[n], min_seq);
        wire_reply r;
        wire_call(f->client[n], &r, "sub_get", "su", "name", "mailer", "min_seq", min_seq);
        wire_expect(&r, "ok");
        const msgpack_object *sub = wire_field(r.map, "subscriber");
        ck_assert_msg(wire_u64(sub, "ack_floor") == STOP_EVENTS_ALL, "node %c: ack_floor %" PRIu64,
                      'a' + n, wire_u64(sub, "ack_floor"));
        ck_assert_uint_eq(wire_u64(sub, "in_flight"), 0);
        ck_assert_uint_eq(wire_u64(sub, "redelivered"), STOP_HELD);
        wire_done(&r);
    }
}

/* Node a holds 3 events of subscriber mailer (lease 4 s) and is stopped
 * with SIGSTOP; an account_open and a sub_fetch are sent to it. Node b
 * opens that account and fetches: the 4 events a never handed out at
 * once, a's 3 after their lease, each acknowledged on node c. Node a runs
 * again: its two answers are the stream's (exists; no event handed out
 * again) or none; it catches up to the same cursor and log. */
START_TEST(test_a_stopped_node_past_a_lease_serves_no_stale_write)
{
    cluster_fixture f;
    cluster_up(&f);
    wire_reply r;
    wire_call(f.client[0], &r, "sub_create", "su", "name", "mailer", "ack_wait_ms",
              (uint64_t)STOP_ACK_WAIT_MS);
    reply_ok_seq(&r);
    for (unsigned i = 0; i < STOP_EVENTS; i++) {
        char key[32];
        snprintf(key, sizeof(key), "stop-%u", i);
        account_open_on(f.client[i % NODES], key, 700 + i, &r);
        reply_ok_seq(&r);
    }
    bool delivered[STOP_EVENTS_ALL + 1] = {false}, held[STOP_EVENTS_ALL + 1] = {false};
    wire_call(f.client[0], &r, "sub_fetch", "suu", "name", "mailer", "max", (uint64_t)STOP_HELD,
              "wait_ms", (uint64_t)5000);
    wire_expect(&r, "ok");
    const msgpack_object *ev = wire_field(r.map, "events");
    ck_assert_uint_eq(ev->via.array.size, STOP_HELD);
    for (unsigned i = 0; i < STOP_HELD; i++)
        held[wire_u64(&ev->via.array.ptr[i], "seq")] = true;
    wire_done(&r);
    /* the stale writes' clients connect before the stop */
    stale_write w[2] = {{.c = client_of(&f, 0, STOP_REPLY_WAIT_MS)},
                        {.c = client_of(&f, 0, STOP_REPLY_WAIT_MS), .is_fetch = true}};
    wire_call(w[0].c, &r, "stats", "");
    wire_done(&r);
    wire_call(w[1].c, &r, "stats", "");
    wire_done(&r);
    tallyd_freeze(&f.node[0]);
    /* the account node a will be asked to open, opened on node b first */
    account_open_on(f.client[1], "b-late", STOP_LATE_ACCOUNT, &r);
    uint64_t last = reply_ok_seq(&r);
    pthread_t th[2];
    for (int i = 0; i < 2; i++)
        ck_assert_int_eq(pthread_create(&th[i], NULL, stale_write_main, &w[i]), 0);
    unsigned fresh = 0, redelivered = 0;
    int64_t until = test_deadline_ms(120000);
    while (fresh + redelivered < STOP_EVENTS_ALL && clock_mono_ms() < until)
        fetch_and_ack(f.client[1], f.client[2], delivered, held, &fresh, &redelivered, &last);
    ck_assert_uint_eq(fresh, STOP_EVENTS_ALL - STOP_HELD);
    ck_assert_uint_eq(redelivered, STOP_HELD);
    tallyd_thaw(&f.node[0]);
    for (int i = 0; i < 2; i++)
        pthread_join(th[i], NULL);
    /* answered as the stream orders them after b's writes, or not at all */
    ck_assert_msg(w[0].code[0] == 0 || strcmp(w[0].code, "exists") == 0 ||
                      is_fault_code(w[0].code),
                  "account_open sent to the stopped node: %s (stale)", w[0].code);
    ck_assert_msg(w[1].code[0] == 0 || is_fault_code(w[1].code) ||
                      (strcmp(w[1].code, "ok") == 0 && w[1].events == 0),
                  "sub_fetch sent to the stopped node: %s, %u events from seq %" PRIu64
                  " (delivered and acknowledged on b and c: stale)",
                  w[1].code, w[1].events, w[1].first_seq);
    fprintf(stderr, "check_cluster_faults: sent to the stopped node: account_open %s, "
                    "sub_fetch %s\n",
            w[0].code[0] ? w[0].code : "(no answer)", w[1].code[0] ? w[1].code : "(no answer)");
    for (int i = 0; i < 2; i++)
        tally_client_close(w[i].c);
    /* a fence write on node a: it runs and writes again */
    account_open_on(f.client[0], "a-after", 720, &r);
    uint64_t fence = reply_ok_seq(&r);
    assert_cursor_done(&f, fence > last ? fence : last);
    assert_converged(&f, fence > last ? fence : last);
    cluster_down(&f);
}
END_TEST

/* ---- tally-bench --cluster ---- */

/* A tally-bench run with args after --cluster LIST --json: exit 0 and its
 * JSON (free it). */
static char *bench_run(const cluster_fixture *f, const char *const *args)
{
    char list[3 * sizeof(f->node[0].url) + 3];
    snprintf(list, sizeof(list), "%s,%s,%s", f->node[0].url, f->node[1].url, f->node[2].url);
    const char *argv[24] = {tallyd_program("tally-bench"), "--cluster", list, "--json"};
    size_t n = 4;
    for (size_t i = 0; args[i] && n < 23; i++)
        argv[n++] = args[i];
    char *out = NULL, *err = NULL;
    int code = test_run(argv, NULL, &out, &err);
    ck_assert_msg(code == 0, "tally-bench exit %d: %s%s", code, out, err);
    ck_assert_msg(strstr(out, "\"verified\":true") && strstr(out, "\"cluster_nodes\":3"), "%s",
                  out);
    free(err);
    return out;
}

/* tally-bench --cluster: its clients spread over the three nodes, every
 * effect verified once (reads at min_seq); with --kill-pid node c is
 * killed mid-run, the clients that were on it go on through the others,
 * the run is verified, and the fail-over is reported. */
START_TEST(test_tally_bench_measures_a_cluster_and_its_failover)
{
    cluster_fixture f;
    cluster_up(&f);
    const char *run[] = {"--clients", "6", "--client-mode", "per-thread", "--ops", "300",
                         "--accounts", "20", NULL};
    free(bench_run(&f, run));
    char pid[24];
    snprintf(pid, sizeof(pid), "%ld", (long)f.node[2].pid);
    const char *kill_run[] = {"--clients", "6", "--client-mode", "per-thread", "--seconds", "4",
                              "--accounts", "20", "--timeout-ms", "2000", "--kill-pid", pid,
                              "--kill-after", "1", NULL};
    char *out = bench_run(&f, kill_run);
    const char *at = strstr(out, "\"failover\":");
    ck_assert_msg(at && strstr(at, "\"killed\":true"), "%s", out);
    at = strstr(at, "\"sends\":");
    ck_assert_msg(at && strtoull(at + strlen("\"sends\":"), NULL, 10) >= 1,
                  "no send failed on the killed node: %s", out);
    fprintf(stderr, "check_cluster_faults: tally-bench --kill-pid: %.200s\n",
            strstr(out, "\"failover\":"));
    free(out);
    tallyd_kill(&f.node[2]); /* reaped */
    tally_client_close(f.client[2]);
    f.client[2] = NULL;
    cluster_down(&f);
}
END_TEST

/* ---- a seeded random fault schedule ---- */

#define FAULT_WRITERS 3
#define FAULT_KEYS_MAX 20000      /* per writer */
#define FAULT_WRITES 6            /* acknowledged writes under each fault, and after it */
#define FAULT_PROGRESS_WAIT_MS 180000
#define FAULT_KEY_WAIT_MS 240000  /* one write through the faults, on a loaded machine */
#define FAULT_CALL_MS 3000        /* a node that does not answer in this is tried no more */
#define FAULT_ROUND_PAUSE_MS 100  /* after every node refused once */
#define FAULT_LOG_CHECK_EVERY 3   /* faults between two comparisons of the logs */
#define FAULTS_DEFAULT 15         /* the short schedule of make check */

typedef enum fault_kind { FAULT_KILL, FAULT_STOP, FAULT_TERM, FAULT_KINDS } fault_kind;
static const char *const fault_kind_name[FAULT_KINDS] = {"kill -9", "SIGSTOP", "SIGTERM"};

typedef struct fault {
    bool nats; /* a nats-server, else a tallyd */
    int index;
    fault_kind kind;
} fault;

/* Per key of a writer: what became of it. */
enum { KEY_UNSENT, KEY_SENT, KEY_ACKED };

typedef struct fault_run {
    pthread_mutex_t mu;
    pthread_cond_t more; /* budget raised, or done */
    unsigned budget;     /* under mu: the writers stop at this many acknowledged */
    bool done;           /* under mu */
    _Atomic unsigned acked;
    _Atomic unsigned moves, reads_seen, reads_not_caught_up, reads_unanswered;
    _Atomic uint64_t last_seq;
    cluster_fixture *f; /* its URLs, for what a failure prints */
    unsigned stalls;      /* faults under which JetStream's replicas left no majority */
} fault_run;

typedef struct fault_writer {
    fault_run *run;
    unsigned id;
    uint64_t rng;
    tally_client *c[NODES];
    unsigned keys;                /* sent so far */
    uint8_t state[FAULT_KEYS_MAX]; /* KEY_* of each */
} fault_writer;

static unsigned key_number(unsigned writer, unsigned k)
{
    return writer * FAULT_KEYS_MAX + k;
}

/* Whether the writer may send another key: waits while the budget is
 * spent; false once the run is done. */
static bool writer_may_send(fault_run *run)
{
    pthread_mutex_lock(&run->mu);
    while (!run->done && atomic_load(&run->acked) >= run->budget)
        pthread_cond_wait(&run->more, &run->mu);
    bool go = !run->done;
    pthread_mutex_unlock(&run->mu);
    return go;
}


/* What a read that missed its write saw, to stderr: each node's position
 * and the stream's messages from..to (their Nats-Msg-Id, and which hold
 * key), as the stream's leader holds them. */
static void missed_read_report(fault_writer *w, uint64_t from, uint64_t to, const char *key)
{
    for (int n = 0; n < NODES; n++) {
        wire_reply r;
        uint64_t position = 0;
        if (wire_try_call(w->c[n], &r, "cluster_status", "") != TALLY_ok) {
            fprintf(stderr, "check_cluster_faults: node %c: no answer\n", 'a' + n);
            continue;
        }
        const msgpack_object *p = msgpack_safe_map_get(r.map, "position");
        if (p)
            msgpack_safe_get_u64(p, &position);
        fprintf(stderr, "check_cluster_faults: node %c: %s, position %" PRIu64 "\n", 'a' + n,
                r.code, position);
        wire_done(&r);
    }
    natsConnection *nc = NULL;
    jsCtx *js = NULL;
    if (natsConnection_ConnectTo(&nc, w->run->f->urls) != NATS_OK ||
        natsConnection_JetStream(&js, nc, NULL) != NATS_OK) {
        natsConnection_Destroy(nc);
        return;
    }
    for (uint64_t seq = from; seq <= to; seq++) {
        natsMsg *m = NULL;
        jsErrCode jerr = 0;
        if (js_GetMsg(&m, js, "TALLY_COMMANDS", seq, NULL, &jerr) != NATS_OK) {
            fprintf(stderr, "check_cluster_faults: stream %" PRIu64 ": not read (%d)\n", seq,
                    (int)jerr);
            continue;
        }
        const char *id = NULL;
        if (natsMsgHeader_Get(m, "Nats-Msg-Id", &id) != NATS_OK)
            id = NULL;
        bool holds = memmem(natsMsg_GetData(m), (size_t)natsMsg_GetDataLength(m), key,
                            strlen(key)) != NULL;
        fprintf(stderr, "check_cluster_faults: stream %" PRIu64 ": %s %s%s\n", seq,
                natsMsg_GetSubject(m), id ? id : "(no id)", holds ? " (holds the write)" : "");
        natsMsg_Destroy(m);
    }
    jsCtx_Destroy(js);
    natsConnection_Destroy(nc);
}

/* A read of the acknowledged transfer on a node the seed picks, with its
 * cluster_seq as min_seq: it must see it, or say not_caught_up, or not
 * answer (the node is down or stopped). */
static void read_own_write(fault_writer *w, const uint8_t id[16], uint64_t seq,
                           const char *key, int acked_by, bool replayed)
{
    int node = (int)test_rng_below(&w->rng, NODES);
    wire_reply r;
    if (wire_try_call(w->c[node], &r, "transfer_get", "xu", "id", id, "min_seq", seq) !=
        TALLY_ok) {
        atomic_fetch_add(&w->run->reads_unanswered, 1);
        return;
    }
    if (strcmp(r.code, "not_caught_up") == 0 || is_fault_code(r.code))
        atomic_fetch_add(&w->run->reads_not_caught_up, 1);
    else {
        /* the position the node answered at, when its reply says it */
        const msgpack_object *at = msgpack_safe_map_get(r.map, "cluster_seq");
        uint64_t position = 0;
        if (at)
            msgpack_safe_get_u64(at, &position);
        if (strcmp(r.code, "ok") != 0)
            missed_read_report(w, seq > 3 ? seq - 3 : 1, (position > seq ? position : seq) + 3,
                               key);
        ck_assert_msg(strcmp(r.code, "ok") == 0,
                      "seed %" PRIu64 ": node %c, min_seq %" PRIu64 ": %s at position %" PRIu64
                      ": a read missed its write (%s, acknowledged by node %c%s)",
                      fault_seed, 'a' + node, seq, r.code, position, key, 'a' + acked_by,
                      replayed ? ", replayed" : "");
        ck_assert_uint_ge(wire_u64(r.map, "cluster_seq"), seq);
        atomic_fetch_add(&w->run->reads_seen, 1);
    }
    wire_done(&r);
}

/* Transfer k of the writer (1 from account 1 to 2), to a node the seed
 * picks, then to another with the same key on no answer or a fault, until
 * one answers ok. */
static void send_key(fault_writer *w, unsigned k)
{
    char key[32];
    uint8_t id[16];
    snprintf(key, sizeof(key), "fault-%u-%u", w->id, k);
    transfer_id(id, key_number(w->id, k));
    w->state[k] = KEY_SENT;
    int node = (int)test_rng_below(&w->rng, NODES);
    int64_t until = test_deadline_ms(FAULT_KEY_WAIT_MS);
    for (unsigned attempt = 1; clock_mono_ms() < until; attempt++) {
        wire_reply r;
        int rc = wire_try_call(w->c[node], &r, "transfer", "ssxuuiuu", "consumer", "t", "key",
                               key, "id", id, "debit_account_id", (uint64_t)1,
                               "credit_account_id", (uint64_t)2, "amount", (int64_t)1, "ledger",
                               (uint64_t)1, "code", (uint64_t)1);
        if (rc == TALLY_ok) {
            bool ok = strcmp(r.code, "ok") == 0;
            ck_assert_msg(ok || is_fault_code(r.code), "seed %" PRIu64 ": %s on node %c: %s",
                          fault_seed, key, 'a' + node, r.code);
            uint64_t seq = ok ? wire_u64(r.map, "cluster_seq") : 0;
            const msgpack_object *rep = ok ? msgpack_safe_map_get(r.map, "replayed") : NULL;
            bool replayed = rep && rep->type == MSGPACK_OBJECT_BOOLEAN && rep->via.boolean;
            wire_done(&r);
            if (ok) {
                w->state[k] = KEY_ACKED;
                uint64_t last = atomic_load(&w->run->last_seq);
                while (seq > last && !atomic_compare_exchange_weak(&w->run->last_seq, &last, seq))
                    ;
                atomic_fetch_add(&w->run->acked, 1);
                read_own_write(w, id, seq, key, node, replayed);
                return;
            }
        }
        node = (node + 1 + (int)test_rng_below(&w->rng, NODES - 1)) % NODES;
        atomic_fetch_add(&w->run->moves, 1);
        if (attempt % NODES == 0) /* every node refused: an election, a start: wait on */
            test_pause_ms(FAULT_ROUND_PAUSE_MS);
    }
    ck_abort_msg("seed %" PRIu64 ": %s never acknowledged", fault_seed, key);
}

static void *fault_writer_main(void *arg)
{
    fault_writer *w = arg;
    while (w->keys < FAULT_KEYS_MAX && writer_may_send(w->run))
        send_key(w, w->keys++);
    return NULL;
}

static void budget_raise(fault_run *run, unsigned by)
{
    pthread_mutex_lock(&run->mu);
    run->budget = atomic_load(&run->acked) + by;
    pthread_cond_broadcast(&run->more);
    pthread_mutex_unlock(&run->mu);
}

/* For a failure: each node's last line saying that the stream's replicas
 * differ (nats-server stores that diverged leave no majority to apply
 * from while another server is down: docs/CLUSTER.md, "Applying"). */
static void print_replicas_differ(const fault_run *run)
{
    for (int i = 0; i < NODES; i++) {
        FILE *in = fopen(run->f->node[i].log_path, "r");
        char line[1024], last[1024] = "";
        while (in != NULL && fgets(line, sizeof(line), in) != NULL)
            if (strstr(line, "the stream's replicas differ at") != NULL)
                snprintf(last, sizeof(last), "%s", line);
        if (in != NULL)
            fclose(in);
        if (last[0] != '\0')
            fprintf(stderr, "check_cluster_faults: node %c's last such line: %s", 'a' + i, last);
    }
}

/* Whether a node logged that the stream's replicas differ (a node
 * stalled at such a position does not say it again): a nats-server's
 * store diverged (nats-server 2.9.10 leaves one
 * so after its leader was stopped), and with another server down no
 * majority holds the next position, so the nodes wait rather than apply
 * (docs/CLUSTER.md, "Applying"). */
static bool replicas_differed(const fault_run *run)
{
    bool said = false;
    for (int i = 0; i < NODES && !said; i++) {
        FILE *in = fopen(run->f->node[i].log_path, "r");
        char line[1024];
        if (in != NULL && fseek(in, 0, SEEK_SET) == 0)
            while (!said && fgets(line, sizeof(line), in) != NULL)
                said = strstr(line, "the stream's replicas differ at") != NULL;
        if (in != NULL)
            fclose(in);
    }
    return said;
}

/* Wait until count writes more than from are acknowledged: true, or,
 * with may_stall, false when none came while the nodes said that the
 * stream's replicas differ (the fault is then healed first: a minority
 * down beside a diverged replica leaves JetStream no healthy majority). */
static bool await_progress_or_stall(fault_run *run, unsigned from, unsigned count,
                                    const char *when, bool may_stall)
{
    int64_t until = test_deadline_ms(FAULT_PROGRESS_WAIT_MS);
    while (atomic_load(&run->acked) < from + count && clock_mono_ms() < until)
        test_pause_ms(20);
    if (may_stall && atomic_load(&run->acked) < from + count && replicas_differed(run)) {
        print_replicas_differ(run);
        fprintf(stderr, "check_cluster_faults: seed %" PRIu64 ": OPEN FINDING: %u of %u writes "
                        "acknowledged %s: the stream's replicas differ (JetStream's own "
                        "divergence) with a server down; healing the fault first\n",
                fault_seed, atomic_load(&run->acked) - from, count, when);
        run->stalls++;
        return false;
    }
    if (atomic_load(&run->acked) < from + count)
        print_replicas_differ(run);
    ck_assert_msg(atomic_load(&run->acked) >= from + count,
                  "seed %" PRIu64 ": no %u writes acknowledged %s (%u)", fault_seed, count, when,
                  atomic_load(&run->acked) - from);
    return true;
}

static void await_progress(fault_run *run, unsigned from, unsigned count, const char *when)
{
    (void)await_progress_or_stall(run, from, count, when, false);
}

static void fault_inflict(cluster_fixture *f, const fault *x)
{
    if (x->nats) {
        nats_node *n = &f->nats.node[x->index];
        if (x->kind == FAULT_KILL)
            nats_cluster_kill(&f->nats, x->index);
        else if (x->kind == FAULT_TERM)
            nats_cluster_stop_node(&f->nats, x->index);
        else
            ck_assert_int_eq(kill(n->pid, SIGSTOP), 0);
        return;
    }
    tallyd_proc *p = &f->node[x->index];
    if (x->kind == FAULT_KILL)
        tallyd_kill(p);
    else if (x->kind == FAULT_TERM)
        ck_assert_msg(tallyd_stop(p) == 0, "seed %" PRIu64 ": node %c did not stop cleanly",
                      fault_seed, 'a' + x->index);
    else
        tallyd_freeze(p);
}

static void fault_heal(cluster_fixture *f, const fault *x)
{
    if (x->nats) {
        if (x->kind == FAULT_STOP)
            ck_assert_int_eq(kill(f->nats.node[x->index].pid, SIGCONT), 0);
        else
            nats_cluster_restart(&f->nats, x->index);
        ck_assert_msg(await_stream_current(f), "seed %" PRIu64 ": nats-server n%d never current "
                      "again", fault_seed, x->index + 1);
        return;
    }
    if (x->kind == FAULT_STOP)
        tallyd_thaw(&f->node[x->index]);
    else
        node_restart(f, x->index);
}

/* The next faults (one, or a tallyd's and a nats-server's together): at
 * most one of each down at once, a minority. */
static unsigned faults_next(uint64_t *rng, fault out[2])
{
    unsigned n = test_rng_below(rng, 3) == 0 ? 2 : 1;
    bool nats = test_rng_below(rng, 2) == 0;
    for (unsigned i = 0; i < n; i++, nats = !nats)
        out[i] = (fault){.nats = nats, .index = (int)test_rng_below(rng, NODES),
                         .kind = (fault_kind)test_rng_below(rng, FAULT_KINDS)};
    return n;
}

/* Every key the writers sent, on node c at min_seq: an acknowledged one
 * present, each present one sent; returns how many are present. */
static unsigned model_check_node(tally_client *c, int node, fault_writer *w, uint64_t min_seq)
{
    unsigned present = 0;
    for (unsigned i = 0; i < FAULT_WRITERS; i++)
        for (unsigned k = 0; k < w[i].keys; k++) {
            uint8_t id[16];
            transfer_id(id, key_number(i, k));
            wire_reply r;
            wire_call(c, &r, "transfer_get", "xu", "id", id, "min_seq", min_seq);
            bool found = strcmp(r.code, "ok") == 0;
            ck_assert_msg(found || strcmp(r.code, "not_found") == 0,
                          "seed %" PRIu64 ": node %c: fault-%u-%u: %s", fault_seed, 'a' + node,
                          i, k, r.code);
            ck_assert_msg(found || w[i].state[k] != KEY_ACKED,
                          "seed %" PRIu64 ": node %c lost acknowledged fault-%u-%u", fault_seed,
                          'a' + node, i, k);
            present += found;
            wire_done(&r);
        }
    return present;
}

static int64_t credits_posted_on(tally_client *c, uint64_t id, uint64_t min_seq)
{
    wire_reply r;
    wire_call(c, &r, "account_get", "uu", "id", id, "min_seq", min_seq);
    wire_expect(&r, "ok");
    int64_t v;
    ck_assert(msgpack_safe_get_i64(wire_field(wire_field(r.map, "account"), "credits_posted"), &v));
    wire_done(&r);
    return v;
}

/* After the schedule, everything running: the same log everywhere, and
 * the model holds on every node. */
static void fault_run_check(cluster_fixture *f, fault_run *run, fault_writer *w)
{
    wire_reply r;
    account_open_on(f->client[0], "fault-fence", 3, &r);
    uint64_t fence = reply_ok_seq(&r);
    uint64_t last = atomic_load(&run->last_seq);
    uint64_t at = fence > last ? fence : last;
    assert_converged(f, at);
    unsigned sent = 0, acked = 0;
    for (unsigned i = 0; i < FAULT_WRITERS; i++)
        for (unsigned k = 0; k < w[i].keys; k++) {
            sent++;
            acked += w[i].state[k] == KEY_ACKED;
        }
    for (int n = 0; n < NODES; n++) {
        unsigned present = model_check_node(f->client[n], n, w, at);
        /* nothing applied that no writer sent, and each once */
        ck_assert_msg(stats_u64(f->client[n], "transfers") == present,
                      "seed %" PRIu64 ": node %c holds %" PRIu64 " transfers, %u sent present",
                      fault_seed, 'a' + n, stats_u64(f->client[n], "transfers"), present);
        ck_assert_int_eq(credits_posted_on(f->client[n], 2, at), (int64_t)present);
        ck_assert_uint_ge(present, acked);
        if (n == 0)
            fprintf(stderr, "check_cluster_faults: %u keys sent, %u acknowledged, %u present "
                            "on every node\n",
                    sent, acked, present);
    }
}

/* While the writers go on: every node's log the same bytes as far as all
 * hold it (the test fails naming the first event that differs), so a
 * divergence is caught within a few faults of where it starts. */
static void faults_logs_agree(cluster_fixture *f, fault_run *run, uint64_t done)
{
    uint64_t heads[NODES];
    uint64_t upto = assert_logs_agree(f, atomic_load(&run->last_seq), heads);
    fprintf(stderr, "check_cluster_faults: after fault %" PRIu64 ": the logs agree up to event %"
                    PRIu64 " (heads %" PRIu64 ", %" PRIu64 ", %" PRIu64 ")\n",
            done, upto, heads[0], heads[1], heads[2]);
}

/* The running check agrees: every node compared a checkpoint and none
 * stopped as diverged (one that had would answer cluster_diverged). */
static void faults_checkpoints_agree(cluster_fixture *f)
{
    for (int i = 0; i < NODES; i++) {
        ck_assert_msg(test_metrics_sample_reaches(f->node[i].http_port,
                                                  "tally_cluster_checkpoint_position", 1, 60000),
                      "seed %" PRIu64 ": node %c compared no checkpoint", fault_seed, 'a' + i);
        ck_assert_msg(test_metrics_sample(f->node[i].http_port, "tally_cluster_diverged") == 0,
                      "seed %" PRIu64 ": node %c diverged", fault_seed, 'a' + i);
    }
}

START_TEST(test_a_random_fault_schedule_loses_and_doubles_nothing)
{
    fprintf(stderr, "check_cluster_faults: seed %" PRIu64 " (TALLY_FAULT_SEED=%" PRIu64
                    " repeats the schedule), %" PRIu64 " faults\n",
            fault_seed, fault_seed, fault_count);
    cluster_fixture f;
    cluster_up(&f);
    for (uint64_t a = 1; a <= 2; a++) {
        char key[16];
        snprintf(key, sizeof(key), "acct-%" PRIu64, a);
        wire_reply r;
        account_open_on(f.client[0], key, a, &r);
        reply_ok_seq(&r);
    }
    static fault_writer w[FAULT_WRITERS];
    fault_run run = {.budget = FAULT_WRITES, .f = &f};
    pthread_mutex_init(&run.mu, NULL);
    pthread_cond_init(&run.more, NULL);
    pthread_t th[FAULT_WRITERS];
    for (unsigned i = 0; i < FAULT_WRITERS; i++) {
        memset(&w[i], 0, sizeof(w[i]));
        w[i].run = &run;
        w[i].id = i;
        w[i].rng = fault_seed ^ (0x9e3779b97f4a7c15ULL * (i + 1));
        for (int n = 0; n < NODES; n++)
            w[i].c[n] = client_of(&f, n, FAULT_CALL_MS);
        ck_assert_int_eq(pthread_create(&th[i], NULL, fault_writer_main, &w[i]), 0);
    }
    uint64_t rng = fault_seed;
    await_progress(&run, 0, FAULT_WRITES, "before the first fault");
    for (uint64_t done = 0; done < fault_count;) {
        fault x[2];
        unsigned n = faults_next(&rng, x);
        unsigned from = atomic_load(&run.acked);
        budget_raise(&run, 2 * FAULT_WRITES);
        for (unsigned i = 0; i < n; i++) {
            fprintf(stderr, "check_cluster_faults: fault %" PRIu64 ": %s of %s %c%s\n", done + i + 1,
                    fault_kind_name[x[i].kind], x[i].nats ? "nats-server" : "tallyd",
                    x[i].nats ? '1' + x[i].index : 'a' + x[i].index,
                    n == 2 && i == 0 ? " (with the next)" : "");
            fault_inflict(&f, &x[i]);
        }
        (void)await_progress_or_stall(&run, from, FAULT_WRITES, "under the fault", true);
        for (int nats = 1; nats >= 0; nats--) /* the servers first: a tallyd starts on all */
            for (unsigned i = 0; i < n; i++)
                if (x[i].nats == (nats == 1))
                    fault_heal(&f, &x[i]);
        await_progress(&run, from, 2 * FAULT_WRITES, "after the fault healed");
        done += n;
        if (done / FAULT_LOG_CHECK_EVERY != (done - n) / FAULT_LOG_CHECK_EVERY)
            faults_logs_agree(&f, &run, done);
    }
    pthread_mutex_lock(&run.mu);
    run.done = true;
    pthread_cond_broadcast(&run.more);
    pthread_mutex_unlock(&run.mu);
    for (unsigned i = 0; i < FAULT_WRITERS; i++) {
        pthread_join(th[i], NULL);
        for (int n = 0; n < NODES; n++)
            tally_client_close(w[i].c[n]);
    }
    fault_run_check(&f, &run, w);
    faults_checkpoints_agree(&f);
    fprintf(stderr, "check_cluster_faults: %u moves to another node; reads with min_seq: %u saw "
                    "their write, %u not caught up, %u unanswered; %u faults stalled by "
                    "replicas that differ (healed first)\n",
            atomic_load(&run.moves), atomic_load(&run.reads_seen),
            atomic_load(&run.reads_not_caught_up), atomic_load(&run.reads_unanswered),
            run.stalls);
    cluster_down(&f);
}
END_TEST

int main(void)
{
    /* the random schedule needs nats-server 2.10 or later: the one
     * tools/fetch_nats_server.sh fetched, when configure found it */
    nats_cluster_prefer_recent();
    if (nats_cluster_server_path() == NULL) {
        fprintf(stderr, "check_cluster_faults: nats-server is not installed ($NATS_SERVER: %s); "
                        "skipped (apt-get install nats-server)\n",
                getenv("NATS_SERVER") ? getenv("NATS_SERVER") : "unset");
        return 77;
    }
    fault_seed = test_env_u64("TALLY_FAULT_SEED", 0);
    if (fault_seed == 0)
        fault_seed = (uint64_t)clock_wall_ms() ^ ((uint64_t)getpid() << 32);
    /* The schedule runs on nats-server 2.10 or later (make check: a short
     * one, make check-long: 200): on 2.9.10 the stream's replicas
     * themselves diverge or stop taking publishes under these faults often
     * enough to stall it (docs/CLUSTER.md, "Tests and measurements"). */
    bool recent_server = nats_cluster_server_at_least(2, 10);
    fault_count = test_env_u64("TALLY_CLUSTER_FAULTS", recent_server ? FAULTS_DEFAULT : 0);
    /* a fault takes some seconds; allow a minute each, on a loaded machine */
    int faults_timeout_s = (int)(300 + 60 * fault_count);
    const test_row rows[] = {
        {"sigstop", test_a_stopped_node_past_a_lease_serves_no_stale_write, CLUSTER_TEST_TIMEOUT_S},
        {"bench", test_tally_bench_measures_a_cluster_and_its_failover, CLUSTER_TEST_TIMEOUT_S},
        {"faults", test_a_random_fault_schedule_loses_and_doubles_nothing, faults_timeout_s},
    };
    size_t row_count = sizeof(rows) / sizeof(rows[0]) - (fault_count == 0 ? 1 : 0);
    if (fault_count == 0)
        fprintf(stderr, "check_cluster_faults: the random fault schedule is not run (%s; "
                        "TALLY_CLUSTER_FAULTS=N runs N faults; make check-long runs 200)\n",
                recent_server ? "TALLY_CLUSTER_FAULTS=0"
                              : "nats-server older than 2.10: tools/fetch_nats_server.sh");
    int rc = test_run_suite(test_suite_of_rows("cluster_faults", rows, row_count));
    if (rc != 0)
        fprintf(stderr, "check_cluster_faults: failed; seed %" PRIu64
                        " (TALLY_FAULT_SEED=%" PRIu64 " repeats the fault schedule)\n",
                fault_seed, fault_seed);
    return rc;
}
