/*
 * check_writer.c — tests of net/engine/writer.c over a real tallyd: groups that
 * mix commands which succeed, fail, fail after appending events (a chain
 * whose second member fails: its nested transaction is aborted after the
 * first member's event), replay and reuse keys, answered by the writer or
 * by the completer (--replies); and a shutdown under that load, with
 * parked long-polls, after which nothing hangs.
 *
 * After each run the stopped store must pass ledger_invariants_check (the
 * checks of tally-recon, which runs too): no gap in the log, the hashes
 * chain, and meta/head names the last event (the writer keeps the head in
 * its transaction and writes it once per commit).
 */
#include "common/clock.h"
#include "common/error.h"
#include "common/limits.h"
#include "ledger/account.h"
#include "ledger/inbox.h"
#include "log/log.h"
#include "tests/support/http_client.h"
#include "tests/support/run.h"
#include "tests/support/suite.h"
#include "tests/support/test_support.h"
#include "tests/support/wire.h"
#include "tests/support/wait.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define CONSUMER "writer-test"
#define LEDGER_ID 1
#define SOURCE 1  /* no limit */
#define LIMITED 2 /* debits must not exceed credits, and it has none */
#define SINK 3

/* The three ways a committed group is answered (--replies), and the
 * default's again with a writer that never spins while idle
 * (--writer-spin-us 0: it sleeps at once, and every request wakes it). */
static const char *const reply_modes[] = {"writer", "completer", "auto", "auto"};
#define MODES 4

static tally_client *client_of(const char *url, uint32_t timeout_ms, bool retry)
{
    tally_client_options o = {.url = url, .consumer = CONSUMER, .timeout_ms = timeout_ms,
                              .retries_set = !retry};
    tally_client *c = NULL;
    ck_assert_int_eq(tally_client_open(&o, &c), TALLY_ok);
    return c;
}

/* http_url: NULL, or where tallyd serves /metrics. */
static void start_mode(tallyd_proc *p, tally_client **c, int mode, const char *http_url)
{
    const char *args[7] = {"--replies", reply_modes[mode]};
    int n = 2;
    if (mode == 3) {
        args[n++] = "--writer-spin-us";
        args[n++] = "0";
    }
    if (http_url) {
        args[n++] = "--http";
        args[n++] = http_url;
    }
    wire_server_start(p, c, args);
    tally_account_open_args a = {.ledger = LEDGER_ID, .code = 1};
    tally_result r;
    for (uint64_t id = SOURCE; id <= SINK; id++) {
        a.id = id;
        a.flags = id == LIMITED ? TALLY_ACCOUNT_DEBITS_MUST_NOT_EXCEED_CREDITS : 0;
        char key[32];
        snprintf(key, sizeof(key), "open-%llu", (unsigned long long)id);
        ck_assert_int_eq(tally_account_open(*c, key, &a, &r), TALLY_ok);
    }
}

static tally_transfer_args transfer_of(const char *key, uint64_t debit, int64_t amount)
{
    tally_transfer_args t = {.debit_account_id = debit, .credit_account_id = SINK,
                             .amount = amount, .ledger = LEDGER_ID, .code = 1};
    tally_uuid_from_key(CONSUMER, key, &t.id);
    return t;
}

/* ---- what a client thread saw ---- */

typedef struct mix_thread {
    const char *url;
    unsigned index, rounds;
    pthread_t thread;
    uint64_t events;  /* events of the writes it saw applied (not replays) */
    int64_t credited; /* what they credited to SINK */
    unsigned wrong;
    char wrong_what[200];
} mix_thread;

static void wrong(mix_thread *m, const char *what, int code)
{
    if (m->wrong++ == 0)
        snprintf(m->wrong_what, sizeof(m->wrong_what), "thread %u: %s: %s", m->index, what,
                 tally_strerror(code));
}

static void expect(mix_thread *m, const char *what, const tally_result *r, int code,
                   bool replayed, uint32_t events)
{
    if (r->code != code || r->replayed != replayed || r->events != events)
        wrong(m, what, r->code);
}

/* A chain of two transfers to SINK, from first and then from second. */
static int send_chain(tally_client *c, const char *key, uint64_t first, uint64_t second,
                      int64_t amount, tally_result *r)
{
    tally_batch *b = tally_batch_new(true);
    ck_assert_ptr_nonnull(b);
    char member[64];
    for (int i = 0; i < 2; i++) {
        snprintf(member, sizeof(member), "%s-m%d", key, i);
        tally_transfer_args t = transfer_of(member, i == 0 ? first : second, amount);
        ck_assert_int_eq(tally_batch_transfer(b, NULL, &t), TALLY_ok);
    }
    int rc = tally_batch_send(c, b, key, r, 1);
    tally_batch_free(b);
    return rc;
}

/* One round: a kind of write by (thread + round) % 5, each also sent a
 * second time (replayed from the inbox, or refused for a changed body). */
static void mix_round(mix_thread *m, tally_client *c, unsigned round)
{
    char key[48];
    snprintf(key, sizeof(key), "t%u-r%u", m->index, round);
    int64_t amount = 1 + round % 5;
    tally_result r;
    tally_transfer_args t;
    switch ((m->index + round) % 5) {
    case 0: /* applied, then replayed */
        t = transfer_of(key, SOURCE, amount);
        tally_transfer(c, key, &t, &r);
        expect(m, "transfer", &r, TALLY_ok, false, 1);
        m->events += 1;
        m->credited += amount;
        tally_transfer(c, key, &t, &r);
        expect(m, "transfer replayed", &r, TALLY_ok, true, 1);
        break;
    case 1: /* refused before any write, stored, replayed */
        t = transfer_of(key, LIMITED, amount);
        tally_transfer(c, key, &t, &r);
        expect(m, "limited transfer", &r, TALLY_exceeds_credits, false, 0);
        tally_transfer(c, key, &t, &r);
        expect(m, "limited transfer replayed", &r, TALLY_exceeds_credits, true, 0);
        break;
    case 2: /* the first member appends its event, the second fails: the
             * chain's nested transaction is aborted after an append */
        send_chain(c, key, SOURCE, LIMITED, amount, &r);
        expect(m, "failing chain", &r, TALLY_exceeds_credits, false, 0);
        if (r.failed_index != 1 || r.chain_codes[0] != TALLY_linked_operation_failed)
            wrong(m, "failing chain's member codes", r.chain_codes[0]);
        send_chain(c, key, SOURCE, LIMITED, amount, &r);
        expect(m, "failing chain replayed", &r, TALLY_exceeds_credits, true, 0);
        break;
    case 3: /* a chain that commits both members */
        send_chain(c, key, SOURCE, SOURCE, amount, &r);
        expect(m, "chain", &r, TALLY_ok, false, 2);
        m->events += 2;
        m->credited += 2 * amount;
        send_chain(c, key, SOURCE, SOURCE, amount, &r);
        expect(m, "chain replayed", &r, TALLY_ok, true, 2);
        break;
    default: /* applied, then the key reused for another amount */
        t = transfer_of(key, SOURCE, amount);
        tally_transfer(c, key, &t, &r);
        expect(m, "transfer", &r, TALLY_ok, false, 1);
        m->events += 1;
        m->credited += amount;
        t.amount++;
        tally_transfer(c, key, &t, &r);
        expect(m, "reused key", &r, TALLY_idempotency_key_reused, false, 0);
        break;
    }
}

static void *mix_main(void *arg)
{
    mix_thread *m = arg;
    tally_client *c = client_of(m->url, 60000, true);
    for (unsigned round = 0; round < m->rounds; round++)
        mix_round(m, c, round);
    tally_client_close(c);
    return NULL;
}

/* ---- the stopped store ---- */

/* meta/head is the last stored event: its seq and its hash. */
static void assert_head_is_last_event(const char *data_dir, uint64_t want_seq)
{
    store *st = test_store_open_read_only(data_dir);
    store_txn t;
    ck_assert_int_eq(store_txn_begin(st, NULL, true, &t), TALLY_ok);
    log_head head;
    ck_assert_int_eq(log_head_get(&t, &head), TALLY_ok);
    ck_assert_uint_eq(head.seq, want_seq);
    MDB_cursor *cur;
    ck_assert_int_eq(store_cursor_open(&t, STORE_DB_LOG, &cur), TALLY_ok);
    MDB_val k, v;
    ck_assert_int_eq(mdb_cursor_get(cur, &k, &v, MDB_LAST), MDB_SUCCESS);
    ck_assert_uint_eq(get_u64_be(k.mv_data), want_seq);
    mdb_cursor_close(cur);
    msgpack_unpacked up;
    msgpack_unpacked_init(&up);
    log_event ev;
    ck_assert_int_eq(log_event_load(&t, want_seq, &up, &ev), TALLY_ok);
    ck_assert_mem_eq(ev.hash, head.hash, LOG_HASH_BYTES);
    msgpack_unpacked_destroy(&up);
    store_txn_abort(&t);
    store_close(st);
}

/* The invariant checks in-process, then the real tally-recon. */
static void assert_recon_passes(const char *data_dir)
{
    wire_assert_invariants(data_dir);
    const char *argv[] = {tallyd_program("tally-recon"), "--data", data_dir, NULL};
    char *out = NULL, *err = NULL;
    int status = test_run(argv, NULL, &out, &err);
    ck_assert_msg(status == 0, "tally-recon exited %d:\n%s%s", status, out, err);
    free(out);
    free(err);
}

/* ==== groups that mix outcomes ==== */

#define MIX_THREADS 8
#define MIX_ROUNDS 30

START_TEST(mixed_groups_leave_a_gapless_chained_log)
{
    tallyd_proc p;
    tally_client *c;
    start_mode(&p, &c, _i, NULL);
    static mix_thread ms[MIX_THREADS];
    for (unsigned i = 0; i < MIX_THREADS; i++) {
        ms[i] = (mix_thread){.url = p.url, .index = i, .rounds = MIX_ROUNDS};
        ck_assert_int_eq(pthread_create(&ms[i].thread, NULL, mix_main, &ms[i]), 0);
    }
    uint64_t events = 3; /* the accounts */
    int64_t credited = 0;
    for (unsigned i = 0; i < MIX_THREADS; i++) {
        pthread_join(ms[i].thread, NULL);
        ck_assert_msg(ms[i].wrong == 0, "%u wrong answers; the first: %s", ms[i].wrong,
                      ms[i].wrong_what);
        events += ms[i].events;
        credited += ms[i].credited;
    }
    tally_stats stats;
    ck_assert_int_eq(tally_stats_get(c, &stats), TALLY_ok);
    ck_assert_uint_eq(stats.head_seq, events);
    ck_assert_uint_eq(stats.events, events);
    tally_account sink, limited;
    ck_assert_int_eq(tally_account_get(c, SINK, &sink), TALLY_ok);
    ck_assert_int_eq(sink.credits_posted, credited);
    ck_assert_int_eq(tally_account_get(c, LIMITED, &limited), TALLY_ok);
    ck_assert_int_eq(limited.debits_posted, 0);
    ck_assert_uint_eq(limited.version, 1);
    wire_server_stop(&p, &c);
    assert_head_is_last_event(p.data_dir, events);
    assert_recon_passes(p.data_dir);
    tallyd_cleanup(&p);
}
END_TEST

/* ==== shutdown under load, with parked long-polls ==== */

#define LOAD_THREADS 6
#define LOAD_KEYS_MAX 4000
#define LOAD_ACKED_MIN 200
#define CLIENT_TIMEOUT_MS 5000
#define PARKED_WAIT_MS TALLY_LOG_WAIT_MS_MAX
/* After tallyd exits, every client call must have returned within this
 * (one client timeout, with room for a slow machine; scaled), and parked
 * ones before their wait could have ended (stop + PARKED_WAIT_MS). */
#define AFTER_EXIT_MS 20000
#define PARKED_ARRIVE_WAIT_MS 60000 /* for the long-polls begun to reach tallyd */

typedef enum key_status { KEY_UNSENT, KEY_OK, KEY_REFUSED, KEY_UNKNOWN } key_status;

typedef struct load_thread {
    const char *url;
    unsigned index;
    pthread_t thread;
    unsigned sent;
    uint8_t status[LOAD_KEYS_MAX];
    unsigned wrong;
    char wrong_what[200];
    atomic_bool done;
} load_thread;

static atomic_uint load_acked;
static atomic_uint threads_done;

static void load_key(unsigned thread, unsigned i, char out[32])
{
    snprintf(out, 32, "load-%u-%u", thread, i);
}

static int64_t load_amount(unsigned i) { return 1 + i % 7; }

/* Until the first call that tallyd did not decide (shutting_down, or no
 * answer once it is gone): transfers that apply, interleaved with chains
 * that fail after an append. */
static void *load_main(void *arg)
{
    load_thread *l = arg;
    tally_client *c = client_of(l->url, CLIENT_TIMEOUT_MS, false);
    for (unsigned i = 0; i < LOAD_KEYS_MAX; i++) {
        char key[32];
        load_key(l->index, i, key);
        tally_result r;
        l->sent = i + 1;
        if (i % 3 == 2) {
            send_chain(c, key, SOURCE, LIMITED, 1, &r);
            if (r.code == TALLY_exceeds_credits)
                continue;
        } else {
            tally_transfer_args t = transfer_of(key, SOURCE, load_amount(i));
            tally_transfer(c, key, &t, &r);
            if (r.code == TALLY_ok) {
                l->status[i] = KEY_OK;
                atomic_fetch_add(&load_acked, 1);
                continue;
            }
        }
        l->status[i] = r.code == TALLY_shutting_down ? KEY_REFUSED : KEY_UNKNOWN;
        if (r.code != TALLY_shutting_down && r.code != TALLY_timed_out &&
            r.code != TALLY_unreachable && l->wrong++ == 0)
            snprintf(l->wrong_what, sizeof(l->wrong_what), "%s: %s", key,
                     tally_strerror(r.code));
        break;
    }
    tally_client_close(c);
    atomic_store(&l->done, true);
    atomic_fetch_add(&threads_done, 1);
    return NULL;
}

/* Long-polls: a log_read far beyond the head (parked until the stop); a
 * subscriber's fetch that acks what it got and fetches again (under load
 * it parks and is woken by commits, again and again); and a fetch of a
 * subscriber with one event in flight at most, never acked, which parks
 * for good after its first event. They start no call once the test is
 * about to stop tallyd. */
typedef enum park_kind { PARK_LOG_READ, PARK_FETCH_ACKING, PARK_FETCH_STUCK, PARK_KINDS } park_kind;

static const char *const park_names[PARK_KINDS] = {"log_read", "acking sub_fetch",
                                                   "stuck sub_fetch"};

typedef struct parked_thread {
    const char *url;
    park_kind kind;
    pthread_t thread;
    atomic_uint calls;    /* long-polls begun */
    atomic_uint acks;     /* sub_acks begun */
    int last_rc;          /* libtally's code of the last call: ok = a reply */
    char last_code[64];   /* the reply's code */
    int64_t returned_ms;  /* when the last call returned (mono) */
    atomic_bool done;
} parked_thread;

/* The test's stop, and the calls begun by then: a thread counts a call and
 * reads the flag under parked_mu, and the test sets the flag and reads the
 * counts under it too, so every call begun is in the counts the test reads
 * (and then waits to see reach tallyd), and none begins after. An
 * unlocked check let a call (a fetch, or the acking thread's sub_ack after
 * a fetch answered at the stop) reach tallyd after its last read: lost with
 * the process, it left that client waiting for its own timeout. */
static pthread_mutex_t parked_mu = PTHREAD_MUTEX_INITIALIZER;
static bool parked_stop;

static bool begin_call(atomic_uint *count)
{
    pthread_mutex_lock(&parked_mu);
    bool go = !parked_stop;
    if (go)
        atomic_fetch_add(count, 1);
    pthread_mutex_unlock(&parked_mu);
    return go;
}

typedef struct parked_counts {
    unsigned reads, fetches, acks;
} parked_counts;

static parked_counts stop_parked_calls(parked_thread *ws)
{
    pthread_mutex_lock(&parked_mu);
    parked_stop = true;
    parked_counts n = {atomic_load(&ws[PARK_LOG_READ].calls),
                       atomic_load(&ws[PARK_FETCH_ACKING].calls) +
                           atomic_load(&ws[PARK_FETCH_STUCK].calls),
                       atomic_load(&ws[PARK_FETCH_ACKING].acks)};
    pthread_mutex_unlock(&parked_mu);
    return n;
}

static int parked_call(parked_thread *w, tally_client *c, wire_reply *r)
{
    if (w->kind == PARK_LOG_READ)
        return wire_try_call(c, r, "log_read", "uuu", "from_seq", (uint64_t)1 << 40, "limit",
                             (uint64_t)1, "wait_ms", (uint64_t)PARKED_WAIT_MS);
    return wire_try_call(c, r, "sub_fetch", "suu", "name",
                         w->kind == PARK_FETCH_STUCK ? "stuck" : "acking", "max", (uint64_t)100,
                         "wait_ms", (uint64_t)PARKED_WAIT_MS);
}

static void *parked_main(void *arg)
{
    parked_thread *w = arg;
    tally_client *c = client_of(w->url, PARKED_WAIT_MS + 10000, false);
    while (begin_call(&w->calls)) {
        wire_reply r;
        w->last_rc = parked_call(w, c, &r);
        w->returned_ms = clock_mono_ms();
        if (w->last_rc != TALLY_ok)
            break;
        snprintf(w->last_code, sizeof(w->last_code), "%s", r.code);
        bool ok = strcmp(r.code, "ok") == 0;
        uint64_t head = ok && w->kind == PARK_FETCH_ACKING ? wire_u64(r.map, "head") : 0;
        wire_done(&r);
        if (!ok)
            break;
        if (head > 0 && begin_call(&w->acks) &&
            wire_try_call(c, &r, "sub_ack", "su", "name", "acking", "seq", head) == TALLY_ok)
            wire_done(&r);
    }
    tally_client_close(c);
    atomic_store(&w->done, true);
    atomic_fetch_add(&threads_done, 1);
    return NULL;
}

/* Whether every call the parked threads began (n: counted at the stop,
 * after which they begin none) has reached tallyd: its request decoded, so
 * parked or answered, as tally_requests_total counts it. No other client
 * sends log_read, sub_fetch or sub_ack. */
static bool parked_calls_counted(int port, parked_counts n)
{
    long long reads = test_metrics_sample(port, "tally_requests_total{op=\"log_read\"}");
    long long fetches = test_metrics_sample(port, "tally_requests_total{op=\"sub_fetch\"}");
    long long acks = test_metrics_sample(port, "tally_requests_total{op=\"sub_ack\"}");
    return reads >= n.reads && fetches >= n.fetches && (n.acks == 0 || acks >= n.acks);
}

static bool parked_calls_arrived(int port, parked_counts n)
{
    return TEST_WAITED_UNTIL(parked_calls_counted(port, n), PARKED_ARRIVE_WAIT_MS);
}

static void create_subscribers(tally_client *c)
{
    wire_reply r;
    wire_call(c, &r, "sub_create", "ss", "name", "acking", "start", "now");
    wire_expect(&r, "ok");
    wire_done(&r);
    wire_call(c, &r, "sub_create", "suu", "name", "stuck", "max_ack_pending", (uint64_t)1,
              "ack_wait_ms", (uint64_t)TALLY_SUB_ACK_WAIT_MS_MAX);
    wire_expect(&r, "ok");
    wire_done(&r);
}

/* Every acknowledged key is in the inbox as ok; the balance is what the
 * inbox says was applied. */
static void assert_acknowledged_durable(const char *data_dir, const load_thread *ls)
{
    store *st = test_store_open_read_only(data_dir);
    store_txn t;
    ck_assert_int_eq(store_txn_begin(st, NULL, true, &t), TALLY_ok);
    int64_t applied = 0;
    for (unsigned th = 0; th < LOAD_THREADS; th++) {
        for (unsigned i = 0; i < ls[th].sent; i++) {
            char key[32];
            load_key(th, i, key);
            ledger_inbox_record rec;
            int rc = ledger_inbox_get(&t, tally_str_from(CONSUMER), tally_str_from(key), &rec);
            ck_assert_msg(rc == TALLY_ok || rc == TALLY_not_found, "inbox %s: %s", key,
                          tally_strerror(rc));
            if (ls[th].status[i] == KEY_OK)
                ck_assert_msg(rc == TALLY_ok && rec.outcome.code == TALLY_ok,
                              "acknowledged key %s is not applied", key);
            if (rc == TALLY_ok && rec.outcome.code == TALLY_ok)
                applied += load_amount(i);
        }
    }
    ledger_account sink;
    ck_assert_int_eq(ledger_account_get(&t, SINK, &sink), TALLY_ok);
    ck_assert_int_eq(sink.credits_posted, applied);
    store_txn_abort(&t);
    store_close(st);
}

START_TEST(shutdown_under_load_answers_everything_and_nothing_hangs)
{
    tallyd_proc p;
    tally_client *c;
    start_mode(&p, &c, _i, "http://127.0.0.1:0");
    int port = p.http_port; /* the kernel's choice, from tallyd's ready file */
    ck_assert_int_gt(port, 0);
    create_subscribers(c);
    atomic_store(&load_acked, 0);
    atomic_store(&threads_done, 0);
    parked_stop = false;
    static load_thread ls[LOAD_THREADS];
    for (unsigned i = 0; i < LOAD_THREADS; i++) {
        ls[i] = (load_thread){.url = p.url, .index = i};
        ck_assert_int_eq(pthread_create(&ls[i].thread, NULL, load_main, &ls[i]), 0);
    }
    static parked_thread ws[PARK_KINDS];
    for (unsigned i = 0; i < PARK_KINDS; i++) {
        ws[i] = (parked_thread){.url = p.url, .kind = i};
        ck_assert_int_eq(pthread_create(&ws[i].thread, NULL, parked_main, &ws[i]), 0);
    }
    (void)TEST_WAITED_UNTIL(atomic_load(&load_acked) >= LOAD_ACKED_MIN &&
                                atomic_load(&ws[PARK_FETCH_ACKING].calls) >= 3 &&
                                atomic_load(&ws[PARK_FETCH_STUCK].calls) >= 2,
                            60000); /* the asserts below say which did not */
    ck_assert_uint_ge(atomic_load(&load_acked), LOAD_ACKED_MIN);
    ck_assert_uint_ge(atomic_load(&ws[PARK_FETCH_ACKING].calls), 3); /* woken by commits */
    ck_assert_uint_ge(atomic_load(&ws[PARK_FETCH_STUCK].calls), 2); /* then parked */
    tally_client_close(c);
    ck_assert_msg(parked_calls_arrived(port, stop_parked_calls(ws)),
                  "calls begun never reached tallyd");
    int64_t stop = clock_mono_ms();
    ck_assert_int_eq(tallyd_stop(&p), 0); /* SIGTERM mid-load; it must exit 0 */
    const unsigned threads = LOAD_THREADS + PARK_KINDS;
    if (!TEST_WAITED_UNTIL(atomic_load(&threads_done) >= threads, AFTER_EXIT_MS)) {
        char who[256] = "";
        for (unsigned i = 0; i < LOAD_THREADS; i++)
            if (!atomic_load(&ls[i].done))
                snprintf(who + strlen(who), sizeof(who) - strlen(who), " load %u (key %u)", i,
                         ls[i].sent);
        for (unsigned i = 0; i < PARK_KINDS; i++)
            if (!atomic_load(&ws[i].done))
                snprintf(who + strlen(who), sizeof(who) - strlen(who), " %s (%u calls, %u acks)",
                         park_names[i], atomic_load(&ws[i].calls), atomic_load(&ws[i].acks));
        ck_abort_msg("%u of %u client threads still waiting %lld ms after tallyd exited:%s",
                     threads - atomic_load(&threads_done), threads,
                     (long long)test_scaled_ms(AFTER_EXIT_MS), who);
    }
    for (unsigned i = 0; i < LOAD_THREADS; i++) {
        pthread_join(ls[i].thread, NULL);
        ck_assert_msg(ls[i].wrong == 0, "thread %u: %s", i, ls[i].wrong_what);
    }
    for (unsigned i = 0; i < PARK_KINDS; i++) {
        pthread_join(ws[i].thread, NULL);
        if (i == PARK_FETCH_ACKING)
            continue; /* it may have been between calls at the stop */
        /* Parked when the stop came: answered then (ok or shutting_down),
         * not left to the end of its wait. */
        ck_assert_msg(ws[i].last_rc == TALLY_ok, "parked %s got no answer: %s", park_names[i],
                      tally_strerror(ws[i].last_rc));
        ck_assert_msg(strcmp(ws[i].last_code, "ok") == 0 ||
                          strcmp(ws[i].last_code, "shutting_down") == 0,
                      "parked %s answered %s", park_names[i], ws[i].last_code);
        ck_assert_msg(ws[i].returned_ms >= stop, "parked %s returned before the stop",
                      park_names[i]);
        ck_assert_msg(ws[i].returned_ms < stop + PARKED_WAIT_MS,
                      "parked %s waited its wait out, not answered at the stop", park_names[i]);
    }
    assert_acknowledged_durable(p.data_dir, ls);
    assert_recon_passes(p.data_dir);
    tallyd_cleanup(&p);
}
END_TEST

#define TIMEOUT_S 240

int main(void)
{
    Suite *s = suite_create("writer");
    TCase *tc = tcase_create("mixed");
    tcase_set_timeout(tc, TIMEOUT_S);
    tcase_add_loop_test(tc, mixed_groups_leave_a_gapless_chained_log, 0, MODES);
    suite_add_tcase(s, tc);
    tc = tcase_create("shutdown");
    tcase_set_timeout(tc, TIMEOUT_S);
    tcase_add_loop_test(tc, shutdown_under_load_answers_everything_and_nothing_hangs, 0, MODES);
    suite_add_tcase(s, tc);
    return test_run_suite(s);
}
