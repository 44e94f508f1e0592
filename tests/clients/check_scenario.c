/*
 * check_scenario.c — issue 32's shared scenario, with libtally against a
 * real tallyd (the Python and TypeScript clients run the same one over
 * the JSON API):
 *
 *   - open accounts; a transfer; the same call retried → replayed; the key
 *     reused with another body → idempotency_key_reused; a validation
 *     refusal, then the corrected call with the same key → applied; a
 *     hold, a partial post, a void; grant, extend, check an entitlement;
 *   - a subscriber loop killed (SIGKILL) in the middle of its handler and
 *     started again: with the subscriber-side inbox (clients/inbox/) each
 *     event's effect is applied exactly once.
 */
#include "config.h"

#include "clients/inbox/tally_inbox.h"
#include "clients/libtally/tally.h"
#include "common/clock.h"
#include "tests/support/client_support.h"
#include "tests/support/http_client.h"
#include "tests/support/tallyd_harness.h"
#include "tests/support/test_support.h"
#include "tests/support/wait.h"

#include <check.h>
#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define WAIT_MS 30000
#define DAY_MS (24 * 3600 * 1000LL)

static tally_transfer_args payment(const char *key, int64_t amount, uint16_t flags)
{
    tally_transfer_args t = {.debit_account_id = 1, .credit_account_id = 2, .amount = amount,
                             .ledger = 1, .code = 1, .flags = flags};
    tally_uuid_from_key("test", key, &t.id); /* as the API derives it for consumer "test" */
    return t;
}

static void writes(tally_client *c)
{
    tally_result r;
    for (uint64_t id = 1; id <= 2; id++) {
        char key[16];
        snprintf(key, sizeof(key), "open-%llu", (unsigned long long)id);
        tally_account_open_args a = {.id = id, .ledger = 1, .code = 10};
        ck_assert_int_eq(tally_account_open(c, key, &a, &r), TALLY_ok);
    }
    /* a transfer, retried: replayed; the key with another body: a conflict */
    tally_transfer_args pay = payment("pay-1", 100, 0);
    ck_assert_int_eq(tally_transfer(c, "pay-1", &pay, &r), TALLY_ok);
    ck_assert(!r.replayed);
    uint64_t seq = r.seq;
    ck_assert_int_eq(tally_transfer(c, "pay-1", &pay, &r), TALLY_ok);
    ck_assert(r.replayed);
    ck_assert_int_eq(r.seq, seq);
    pay.amount = 101;
    ck_assert_int_eq(tally_transfer(c, "pay-1", &pay, &r), TALLY_idempotency_key_reused);
    /* refused before it ran: the key is not used up */
    tally_transfer_args zero = payment("pay-2", 0, 0);
    ck_assert_int_eq(tally_transfer(c, "pay-2", &zero, &r), TALLY_amount_must_not_be_zero);
    tally_transfer_args fixed = payment("pay-2", 50, 0);
    ck_assert_int_eq(tally_transfer(c, "pay-2", &fixed, &r), TALLY_ok);
    ck_assert(!r.replayed);
    /* a hold, posted in part; another, voided */
    tally_transfer_args hold = payment("hold-1", 300, TALLY_TRANSFER_PENDING);
    ck_assert_int_eq(tally_transfer(c, "hold-1", &hold, &r), TALLY_ok);
    ck_assert_int_eq(tally_post(c, "post-1", &hold.id, 200, &r), TALLY_ok);
    tally_transfer_info t;
    ck_assert_int_eq(tally_transfer_get(c, &hold.id, &t), TALLY_ok);
    ck_assert_str_eq(t.state, "pending_posted");
    ck_assert_int_eq(t.posted_amount, 200);
    tally_transfer_args hold2 = payment("hold-2", 40, TALLY_TRANSFER_PENDING);
    ck_assert_int_eq(tally_transfer(c, "hold-2", &hold2, &r), TALLY_ok);
    ck_assert_int_eq(tally_void(c, "void-1", &hold2.id, &r), TALLY_ok);
    ck_assert_int_eq(tally_transfer_get(c, &hold2.id, &t), TALLY_ok);
    ck_assert_str_eq(t.state, "pending_voided");
    tally_account a;
    ck_assert_int_eq(tally_account_get(c, 2, &a), TALLY_ok);
    ck_assert_int_eq(a.credits_posted, 100 + 50 + 200);
    ck_assert_int_eq(a.credits_pending, 0);
    /* grant, extend, check */
    tally_entitlement_args e = {.subject = "user-7", .feature = "pro", .duration_ms = DAY_MS};
    ck_assert_int_eq(tally_grant(c, "grant-1", &e, &r), TALLY_ok);
    tally_entitlement before, after;
    ck_assert_int_eq(tally_entitlement_get(c, "user-7", "pro", &before), TALLY_ok);
    ck_assert_int_eq(tally_extend(c, "extend-1", &e, &r), TALLY_ok);
    ck_assert_int_eq(tally_entitlement_get(c, "user-7", "pro", &after), TALLY_ok);
    ck_assert_str_eq(after.state, "active");
    ck_assert_int_eq(after.valid_until_ms, before.valid_until_ms + DAY_MS);
}

START_TEST(the_scenario_s_writes_and_reads)
{
    tallyd_proc p = {0};
    tallyd_start(&p);
    tally_client *c = test_client_open(p.url);
    writes(c);
    tally_client_close(c);
    ck_assert_int_eq(tallyd_stop(&p), 0);
    tallyd_cleanup(&p);
}
END_TEST

/* ---- a subscriber killed in its handler ---- */

typedef struct loop {
    const char *url, *dir;
    uint64_t block_seq; /* 0: none; else the handler stops in the middle of it */
    tally_inbox *inbox;
    MDB_dbi handled;    /* seq (8 bytes big-endian) -> times its effect was applied */
} loop;

/* The handler's effect, in the inbox's transaction: one more for seq. */
static int effect(tally_inbox *inbox, MDB_txn *txn, const tally_inbox_event *ev, void *ctx)
{
    (void)inbox;
    loop *l = ctx;
    uint8_t key[8];
    for (int i = 0; i < 8; i++)
        key[i] = (uint8_t)(ev->seq >> (56 - 8 * i));
    MDB_val k = {8, key}, v;
    uint32_t n = 0;
    if (mdb_get(txn, l->handled, &k, &v) == 0 && v.mv_size == sizeof(n))
        memcpy(&n, v.mv_data, sizeof(n));
    n++;
    v = (MDB_val){sizeof(n), &n};
    if (mdb_put(txn, l->handled, &k, &v, 0) != 0)
        return TALLY_io_error;
    if (ev->seq == l->block_seq) { /* its writes are not committed: killed here */
        char path[512];
        snprintf(path, sizeof(path), "%s/in-handler", l->dir);
        fclose(fopen(path, "w"));
        for (;;)
            pause();
    }
    return TALLY_ok;
}

static tally_verdict handle(const tally_delivery *d, tally_answer *answer, void *arg)
{
    (void)answer;
    loop *l = arg;
    int rc = tally_inbox_apply(l->inbox, d->event.raw, d->event.raw_len, effect, l, NULL);
    return rc == TALLY_ok ? TALLY_DONE : TALLY_RETRY;
}

/* The subscriber process: until idle (or killed). Exit status 0 on a run
 * that ended well. */
static void loop_main(loop *l)
{
    char path[512];
    snprintf(path, sizeof(path), "%s/inbox", l->dir);
    tally_inbox_options io = {.path = path};
    tally_client *c = test_client_open(l->url);
    tally_subscriber *s = NULL;
    tally_subscriber_options so = {.start = TALLY_START_BEGINNING};
    if (tally_inbox_open(&io, &l->inbox) != TALLY_ok ||
        tally_inbox_db_open(l->inbox, "handled", 0, &l->handled) != TALLY_ok ||
        tally_subscriber_open(c, "scenario", &so, &s) != TALLY_ok)
        _exit(2);
    /* one instance id across restarts: its unacked window comes back at once */
    tally_run_options ro = {.until_idle = true, .wait_ms = 200, .fetch_max = 5,
                            .instance = "scenario-1"};
    int rc = tally_subscriber_run(s, &ro, handle, l);
    tally_subscriber_close(s);
    tally_inbox_close(l->inbox);
    tally_client_close(c);
    _exit(rc == TALLY_ok ? 0 : 3);
}

static pid_t loop_start(loop *l)
{
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0)
        loop_main(l);
    return pid;
}

static bool file_exists(const char *dir, const char *name)
{
    char path[512];
    struct stat st;
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    return stat(path, &st) == 0;
}

/* How often each seq 1..head was applied, from the inbox's own
 * environment; fails on any count but 1, and when no event was delivered
 * twice (then the kill proved nothing). */
static void each_applied_once(const char *dir, uint64_t head)
{
    char path[512];
    snprintf(path, sizeof(path), "%s/inbox", dir);
    tally_inbox_options io = {.path = path};
    tally_inbox *inbox;
    MDB_dbi handled;
    ck_assert_int_eq(tally_inbox_open(&io, &inbox), TALLY_ok);
    ck_assert_int_eq(tally_inbox_db_open(inbox, "handled", 0, &handled), TALLY_ok);
    MDB_txn *txn;
    ck_assert_int_eq(mdb_txn_begin(tally_inbox_env(inbox), NULL, MDB_RDONLY, &txn), 0);
    for (uint64_t seq = 1; seq <= head; seq++) {
        uint8_t key[8];
        for (int i = 0; i < 8; i++)
            key[i] = (uint8_t)(seq >> (56 - 8 * i));
        MDB_val k = {8, key}, v;
        uint32_t n = 0;
        if (mdb_get(txn, handled, &k, &v) == 0)
            memcpy(&n, v.mv_data, sizeof(n));
        ck_assert_msg(n == 1, "seq %llu applied %u times", (unsigned long long)seq, n);
    }
    mdb_txn_abort(txn);
    /* the restart got again what was handled and not yet acknowledged */
    tally_inbox_stats st;
    ck_assert_int_eq(tally_inbox_stats_get(inbox, &st), TALLY_ok);
    ck_assert_msg(st.repeated >= 1, "no event came twice: %llu applied",
                  (unsigned long long)st.applied);
    tally_inbox_close(inbox);
}

/* A number of GET path's JSON reply (over HTTP: this process keeps off
 * NNG, which a child forked after NNG started cannot use: NNG panics,
 * "nng is not fork-reentrant safe"). */
static uint64_t http_number(const tallyd_proc *p, const char *path, const char *outer,
                            const char *name)
{
    int status = 0;
    char *body = test_http_get(p->http_port, path, &status);
    ck_assert_msg(status == 200, "GET %s: %d %s", path, status, body ? body : "");
    json_t *j = json_loads(body, 0, NULL);
    json_t *o = outer ? json_object_get(j, outer) : j;
    uint64_t n = (uint64_t)json_integer_value(json_object_get(o, name));
    json_decref(j);
    free(body);
    return n;
}

/* The scenario's writes, in a child process (NNG and fork: above). */
static void writes_in_a_child(const char *url)
{
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        tally_client *c = test_client_open(url);
        writes(c);
        tally_client_close(c);
        _exit(0);
    }
    int status = 0;
    ck_assert_int_eq(waitpid(pid, &status, 0), pid);
    ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "the writes failed: %d", status);
}

START_TEST(a_subscriber_killed_in_its_handler_applies_each_event_once)
{
    tallyd_proc p = {0};
    p.extra_args[0] = "--http";
    p.extra_args[1] = "http://127.0.0.1:0";
    tallyd_start(&p);
    writes_in_a_child(p.url);
    uint64_t head = http_number(&p, "/v1/stats", NULL, "head_seq");
    ck_assert_uint_ge(head, 10);
    char dir[] = "/tmp/check_scenario.XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(dir));
    loop l = {p.url, dir, 7, NULL, 0};
    pid_t pid = loop_start(&l);
    TEST_WAIT_UNTIL(file_exists(dir, "in-handler"), WAIT_MS, "the handler to reach seq 7");
    ck_assert_int_eq(kill(pid, SIGKILL), 0);
    int status = 0;
    ck_assert_int_eq(waitpid(pid, &status, 0), pid);
    ck_assert(WIFSIGNALED(status));
    l.block_seq = 0; /* started again: runs until nothing is left */
    pid = loop_start(&l);
    ck_assert_int_eq(waitpid(pid, &status, 0), pid);
    ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "the restarted loop: %d",
                  status);
    each_applied_once(dir, head);
    ck_assert_uint_eq(http_number(&p, "/v1/subscribers/scenario", "subscriber", "ack_floor"),
                      head);
    char cmd[600];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    ck_assert_int_eq(system(cmd), 0);
    ck_assert_int_eq(tallyd_stop(&p), 0);
    tallyd_cleanup(&p);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("scenario");
    TCase *tc = tcase_create("scenario");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, the_scenario_s_writes_and_reads);
    tcase_add_test(tc, a_subscriber_killed_in_its_handler_applies_each_event_once);
    suite_add_tcase(s, tc);
    return test_run_suite(s);
}
