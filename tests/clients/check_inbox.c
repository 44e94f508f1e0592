/*
 * check_inbox.c — tests of the subscriber-side inbox
 * (clients/inbox/tally_inbox.c) and of the example read model
 * (tools/readmodel.c, `tally-readmodel`) with a real tallyd on an ipc://
 * endpoint and real LMDB environments in its temp directory.
 *
 * The main test runs a workload through libtally (accounts, transfers,
 * holds posted, partly posted, voided and expired, entitlements granted,
 * extended, revoked, re-granted and expired, a stale provider command, a
 * failing chain and a rejected transfer), reads every event with log_read,
 * delivers every event three times in a shuffled order (mixing single
 * applies and batches) into the read model, and asserts that the model
 * equals the server's state field by field and that the counters add up.
 * The seed is printed; TALLY_INBOX_SEED=S repeats a run's order.
 * Then: a callback error or a malformed event changes nothing (every
 * single-byte change of a real event is refused), the processed table
 * prunes (explicitly, in bounded steps, and on its own at commit), the
 * version helpers, the environment's databases, and the tally-readmodel
 * program: --once twice, resume from a position, follow mode, --help.
 */
#include "clients/inbox/tally_inbox.h"
#include "tools/readmodel.h"

#include "common/clock.h"

#include "tests/support/run.h"
#include "tests/support/tallyd_harness.h"
#include "tests/support/test_support.h"
#include "tests/support/wait.h"

#include <check.h>
#include <fcntl.h>
#include <inttypes.h>
#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define TEST_TIMEOUT_S 300
#define LEDGER 1
#define CODE 1
#define BANK 1
#define SHOP 6
#define ACCOUNTS 6          /* ids 1..6: bank, four users, shop */
#define EVENTS_MAX 4096
#define EXPIRY_WAIT_MS 60000
#define FOLLOW_WAIT_MS 30000 /* below the test's bound: the failure is told, not cut */
#define RETRYING_WAIT_MS 60000 /* libtally's retries (4 of at most 1.5 s) given up */
#define DELIVERIES 3
#define CHUNK_MAX 8
#define DAY_MS INT64_C(86400000)

static const char *const subjects[] = {"alice", "bob", "carol", "dave", "erin", "frank", "gina"};
#define SUBJECTS (sizeof(subjects) / sizeof(subjects[0]))

/* ---- fixture ---- */

typedef struct fixture {
    tallyd_proc srv;
    tally_client *c;
    char model_dir[400];
} fixture;

static void up(fixture *f)
{
    memset(f, 0, sizeof(*f));
    tallyd_start(&f->srv);
    tally_client_options o = {.url = f->srv.url, .consumer = "check-inbox", .timeout_ms = 10000};
    int rc = tally_client_open(&o, &f->c);
    ck_assert_msg(rc == TALLY_ok, "tally_client_open: %s", tally_strerror(rc));
    snprintf(f->model_dir, sizeof(f->model_dir), "%s/model", f->srv.dir);
}

static void down(fixture *f)
{
    tally_client_close(f->c);
    tallyd_cleanup(&f->srv);
}

/* Transfer n's id: derived from a key, as tools do. */
static tally_uuid tid(uint64_t n)
{
    char key[32];
    tally_uuid id;
    snprintf(key, sizeof(key), "transfer-%" PRIu64, n);
    tally_uuid_from_key("check-inbox", key, &id);
    return id;
}

/* ---- the workload ---- */

static void expect(int rc, int want, const char *what)
{
    ck_assert_msg(rc == want, "%s: %s (expected %s)", what, tally_strerror(rc),
                  tally_strerror(want));
}

static void open_account(tally_client *c, uint64_t id, uint16_t flags)
{
    tally_account_open_args a = {.id = id, .ledger = LEDGER, .code = CODE, .flags = flags};
    tally_result r;
    expect(tally_account_open(c, NULL, &a, &r), TALLY_ok, "account_open");
}

static tally_transfer_args transfer_of(uint64_t n, uint64_t debit, uint64_t credit,
                                       int64_t amount, bool hold, uint32_t timeout_s)
{
    return (tally_transfer_args){.id = tid(n), .debit_account_id = debit,
                                 .credit_account_id = credit, .amount = amount,
                                 .ledger = LEDGER, .code = CODE,
                                 .flags = hold ? TALLY_TRANSFER_PENDING : 0,
                                 .timeout_s = timeout_s};
}

static void move(tally_client *c, uint64_t n, uint64_t debit, uint64_t credit, int64_t amount,
                 int want)
{
    tally_transfer_args t = transfer_of(n, debit, credit, amount, false, 0);
    tally_result r;
    expect(tally_transfer(c, NULL, &t, &r), want, "transfer");
}

static void hold(tally_client *c, uint64_t n, uint64_t debit, int64_t amount, uint32_t timeout_s)
{
    tally_transfer_args t = transfer_of(n, debit, SHOP, amount, true, timeout_s);
    tally_result r;
    expect(tally_transfer(c, NULL, &t, &r), TALLY_ok, "hold");
}

typedef int (*entitlement_op)(tally_client *, const char *, const tally_entitlement_args *,
                              tally_result *);

static void entitle(tally_client *c, entitlement_op op, const char *subject, const char *feature,
                    int64_t until_ms, int64_t duration_ms, uint64_t order, int want)
{
    tally_entitlement_args e = {.subject = subject, .feature = feature,
                                .valid_until_ms = until_ms, .duration_ms = duration_ms,
                                .has_source_order = order != 0, .source_order = order};
    tally_result r;
    expect(op(c, NULL, &e, &r), want, subject);
}

/* Everything a subscriber must follow; writes nothing that can fail by
 * timing except the expiries, which the caller waits for. */
static void workload(tally_client *c)
{
    tally_result r;
    open_account(c, BANK, 0);
    for (uint64_t u = 2; u <= 5; u++)
        open_account(c, u, TALLY_ACCOUNT_DEBITS_MUST_NOT_EXCEED_CREDITS);
    open_account(c, SHOP, 0);
    for (uint64_t u = 2; u <= 5; u++)
        move(c, u, BANK, u, 10000, TALLY_ok);
    move(c, 10, 2, SHOP, 1500, TALLY_ok);
    move(c, 11, 3, SHOP, 700, TALLY_ok);
    move(c, 12, 4, SHOP, 999999, TALLY_exceeds_credits); /* rejected: no event */
    hold(c, 100, 2, 2000, 0);
    hold(c, 101, 3, 3000, 0);
    hold(c, 102, 4, 500, 0);
    hold(c, 103, 5, 800, 1); /* expires */
    hold(c, 104, 5, 300, 0); /* stays pending */
    tally_uuid h100 = tid(100), h101 = tid(101), h102 = tid(102);
    expect(tally_post(c, NULL, &h100, 0, &r), TALLY_ok, "post full");
    expect(tally_post(c, NULL, &h101, 1200, &r), TALLY_ok, "post part");
    expect(tally_void(c, NULL, &h102, &r), TALLY_ok, "void");
    /* A failing chain: nothing of it is applied, no event. */
    tally_batch *chain = tally_batch_new(true);
    ck_assert_ptr_nonnull(chain);
    tally_transfer_args fine = transfer_of(20, 2, SHOP, 100, false, 0);
    tally_transfer_args too_much = transfer_of(21, 3, SHOP, 1000000, false, 0);
    ck_assert_int_eq(tally_batch_transfer(chain, NULL, &fine), TALLY_ok);
    ck_assert_int_eq(tally_batch_transfer(chain, NULL, &too_much), TALLY_ok);
    ck_assert_int_eq(tally_batch_send(c, chain, NULL, &r, 1), TALLY_ok);
    ck_assert_int_eq(r.code, TALLY_exceeds_credits);
    ck_assert_uint_eq(r.events, 0);
    tally_batch_free(chain);
    /* A chain that pays and grants. */
    chain = tally_batch_new(true);
    tally_transfer_args pay = transfer_of(22, 4, SHOP, 250, false, 0);
    tally_entitlement_args gina = {.subject = "gina", .feature = "pro"};
    ck_assert_int_eq(tally_batch_transfer(chain, NULL, &pay), TALLY_ok);
    ck_assert_int_eq(tally_batch_grant(chain, NULL, &gina), TALLY_ok);
    ck_assert_int_eq(tally_batch_send(c, chain, NULL, &r, 1), TALLY_ok);
    ck_assert_int_eq(r.code, TALLY_ok);
    tally_batch_free(chain);
    int64_t now = clock_wall_ms();
    entitle(c, tally_grant, "alice", "pro", 0, 0, 0, TALLY_ok);
    entitle(c, tally_grant, "alice", "api", now + DAY_MS, 0, 0, TALLY_ok);
    entitle(c, tally_grant, "bob", "pro", now + DAY_MS, 0, 0, TALLY_ok);
    entitle(c, tally_extend, "bob", "pro", now + 2 * DAY_MS, 0, 0, TALLY_ok);
    entitle(c, tally_extend, "bob", "pro", 0, DAY_MS, 0, TALLY_ok);
    entitle(c, tally_grant, "carol", "pro", 0, DAY_MS, 0, TALLY_ok);
    entitle(c, tally_revoke, "carol", "pro", 0, 0, 0, TALLY_ok);
    entitle(c, tally_grant, "carol", "pro", 0, 0, 0, TALLY_ok); /* revoked -> active */
    entitle(c, tally_grant, "dave", "trial", 0, 1500, 0, TALLY_ok); /* expires */
    entitle(c, tally_grant, "erin", "pro", 0, DAY_MS, 10, TALLY_ok);
    entitle(c, tally_extend, "erin", "pro", now + 3 * DAY_MS, 0, 5, TALLY_stale); /* no event */
    entitle(c, tally_extend, "erin", "pro", now + 3 * DAY_MS, 0, 11, TALLY_ok);
    entitle(c, tally_grant, "frank", "pro", 0, 0, 0, TALLY_ok);
    entitle(c, tally_revoke, "frank", "pro", 0, 0, 0, TALLY_ok);
    tally_entitlement_args paid = {.subject = "frank", .feature = "api",
                                   .has_grant_transfer = true, .grant_transfer_id = tid(10)};
    expect(tally_grant(c, NULL, &paid, &r), TALLY_ok, "paid grant");
}

/* ---- events from the log ---- */

typedef struct event_copy {
    uint64_t seq;
    tally_uuid id;
    char type[32];
    uint8_t *bytes;
    size_t len;
} event_copy;

typedef struct event_set {
    event_copy items[EVENTS_MAX];
    size_t count;
    uint64_t head;
} event_set;

static void events_free(event_set *s)
{
    for (size_t i = 0; i < s->count; i++)
        free(s->items[i].bytes);
    s->count = 0;
}

/* Every event of the log, in seq order, each checked gapless. */
static void events_read_all(tally_client *c, event_set *s)
{
    static tally_event page[1000];
    s->count = 0;
    for (;;) {
        size_t n = 0;
        int rc = tally_log_read(c, s->count + 1, 1000, 0, page, 1000, &n, &s->head);
        expect(rc, TALLY_ok, "log_read");
        for (size_t i = 0; i < n; i++) {
            ck_assert_uint_lt(s->count, EVENTS_MAX);
            ck_assert_uint_eq(page[i].seq, s->count + 1);
            event_copy *e = &s->items[s->count++];
            e->seq = page[i].seq;
            e->id = page[i].id;
            memcpy(e->type, page[i].type, sizeof(e->type));
            e->len = page[i].raw_len;
            e->bytes = malloc(e->len);
            ck_assert_ptr_nonnull(e->bytes);
            memcpy(e->bytes, page[i].raw, e->len);
        }
        tally_events_release(page, n);
        if (n == 0)
            break;
    }
    ck_assert_uint_eq(s->count, s->head);
}

static size_t events_of_type(const event_set *s, const char *type)
{
    size_t n = 0;
    for (size_t i = 0; i < s->count; i++)
        n += strcmp(s->items[i].type, type) == 0;
    return n;
}

/* Wait (bounded, generously) until the sweep expired the hold and the
 * trial grant, then read the whole log. */
static void events_after_expiries(tally_client *c, event_set *s)
{
    int64_t deadline = test_deadline_ms(EXPIRY_WAIT_MS);
    for (;;) {
        events_read_all(c, s);
        if (events_of_type(s, "transfer.expired") == 1 &&
            events_of_type(s, "entitlement.expired") == 1)
            return;
        ck_assert_msg(clock_mono_ms() < deadline, "the sweep did not expire the hold and the grant");
        events_free(s);
        test_pause_ms(200);
    }
}

/* ---- comparing a read model with the server ---- */

static void assert_account_same(const tally_account *want, const tally_account *got)
{
    ck_assert_uint_eq(got->id, want->id);
    ck_assert_uint_eq(got->ledger, want->ledger);
    ck_assert_uint_eq(got->code, want->code);
    ck_assert_uint_eq(got->flags, want->flags);
    ck_assert_msg(got->debits_posted == want->debits_posted &&
                      got->credits_posted == want->credits_posted &&
                      got->debits_pending == want->debits_pending &&
                      got->credits_pending == want->credits_pending,
                  "account %" PRIu64 ": model %" PRId64 "/%" PRId64 "/%" PRId64 "/%" PRId64
                  " server %" PRId64 "/%" PRId64 "/%" PRId64 "/%" PRId64,
                  want->id, got->debits_posted, got->credits_posted, got->debits_pending,
                  got->credits_pending, want->debits_posted, want->credits_posted,
                  want->debits_pending, want->credits_pending);
    ck_assert_uint_eq(got->version, want->version);
    ck_assert_uint_eq(got->created_seq, want->created_seq);
}

static void assert_entitlement_same(const tally_entitlement *want, const tally_entitlement *got)
{
    ck_assert_str_eq(got->subject, want->subject);
    ck_assert_str_eq(got->feature, want->feature);
    ck_assert_msg(strcmp(got->state, want->state) == 0, "%s/%s: model %s, server %s",
                  want->subject, want->feature, got->state, want->state);
    ck_assert_int_eq(got->lifetime, want->lifetime);
    ck_assert_int_eq(got->valid_until_ms, want->valid_until_ms);
    ck_assert_uint_eq(got->version, want->version);
    ck_assert_int_eq(got->has_source_order, want->has_source_order);
    ck_assert_uint_eq(got->source_order, want->source_order);
    ck_assert_int_eq(got->granted_ms, want->granted_ms);
    ck_assert_int_eq(got->updated_ms, want->updated_ms);
    ck_assert_int_eq(got->has_grant_transfer, want->has_grant_transfer);
    ck_assert_mem_eq(got->grant_transfer_id.bytes, want->grant_transfer_id.bytes, 16);
}

/* The model holds exactly the server's accounts and entitlements. */
static void assert_model_is_server(readmodel *rm, tally_client *c)
{
    for (uint64_t id = 1; id <= ACCOUNTS; id++) {
        tally_account want, got;
        expect(tally_account_get(c, id, &want), TALLY_ok, "account_get");
        expect(readmodel_account_get(rm, id, &got), TALLY_ok, "model account");
        assert_account_same(&want, &got);
    }
    size_t entitlements = 0;
    for (size_t i = 0; i < SUBJECTS; i++) {
        tally_entitlement list[8], got;
        size_t n = 0;
        expect(tally_entitlement_list(c, subjects[i], list, 8, &n), TALLY_ok, "list");
        ck_assert_uint_gt(n, 0);
        for (size_t j = 0; j < n; j++) {
            expect(readmodel_entitlement_get(rm, subjects[i], list[j].feature, &got), TALLY_ok,
                   "model entitlement");
            assert_entitlement_same(&list[j], &got);
        }
        entitlements += n;
    }
    tally_stats s;
    uint64_t accounts_held, entitlements_held;
    expect(tally_stats_get(c, &s), TALLY_ok, "stats");
    expect(readmodel_counts(rm, &accounts_held, &entitlements_held), TALLY_ok, "counts");
    ck_assert_uint_eq(s.accounts, ACCOUNTS);
    ck_assert_uint_eq(accounts_held, s.accounts);
    ck_assert_uint_eq(s.entitlements, entitlements);
    ck_assert_uint_eq(entitlements_held, s.entitlements);
}

static readmodel *model_open(const char *dir)
{
    readmodel_options o = {.path = dir, .map_size_bytes = UINT64_C(64) << 20};
    readmodel *rm = NULL;
    expect(readmodel_open(&o, &rm), TALLY_ok, "readmodel_open");
    return rm;
}

/* ---- a seeded order ---- */

static uint64_t rng_state;

static uint64_t rng_next(void)
{
    uint64_t z = (rng_state += UINT64_C(0x9e3779b97f4a7c15));
    z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
    z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
    return z ^ (z >> 31);
}

static void rng_seed(void)
{
    const char *env = getenv("TALLY_INBOX_SEED");
    uint64_t seed = env && *env ? strtoull(env, NULL, 10)
                                : (uint64_t)clock_wall_ms() ^ ((uint64_t)getpid() << 32);
    fprintf(stderr, "check_inbox: seed %" PRIu64 " (TALLY_INBOX_SEED=%" PRIu64 " repeats it)\n",
            seed, seed);
    rng_state = seed;
}

/* ---- the main test: three deliveries in a shuffled order ---- */

typedef struct tallies {
    uint64_t by_outcome[4];
    uint64_t singles, batches;
} tallies;

static void deliver_chunk(readmodel *rm, const event_set *s, const size_t *order, size_t n,
                          tallies *t)
{
    tally_inbox_input in[CHUNK_MAX];
    tally_inbox_outcome out[CHUNK_MAX];
    for (size_t i = 0; i < n; i++)
        in[i] = (tally_inbox_input){s->items[order[i]].bytes, s->items[order[i]].len};
    int rc;
    if (n == 1) {
        rc = tally_inbox_apply(readmodel_inbox(rm), in[0].bytes, in[0].len, readmodel_apply, rm,
                               &out[0]);
        t->singles++;
    } else {
        size_t failed = SIZE_MAX;
        rc = tally_inbox_apply_batch(readmodel_inbox(rm), in, n, readmodel_apply, rm, out,
                                     &failed);
        t->batches++;
    }
    expect(rc, TALLY_ok, "apply");
    for (size_t i = 0; i < n; i++) {
        ck_assert(out[i] >= TALLY_INBOX_APPLIED && out[i] <= TALLY_INBOX_STALE);
        t->by_outcome[out[i]]++;
    }
}

START_TEST(test_three_shuffled_deliveries_equal_server)
{
    fixture f;
    up(&f);
    workload(f.c);
    static event_set s;
    events_after_expiries(f.c, &s);
    ck_assert_uint_eq(s.count, 38); /* what workload() causes, expiries included */
    rng_seed();
    size_t total = DELIVERIES * s.count;
    size_t *order = malloc(total * sizeof(*order));
    ck_assert_ptr_nonnull(order);
    for (size_t i = 0; i < total; i++)
        order[i] = i % s.count;
    for (size_t i = total - 1; i > 0; i--) {
        size_t j = (size_t)(rng_next() % (i + 1)), tmp = order[i];
        order[i] = order[j];
        order[j] = tmp;
    }
    readmodel *rm = model_open(f.model_dir);
    tallies t = {{0}};
    for (size_t at = 0; at < total;) {
        /* the first delivery alone and the next two as a batch, so both
         * forms run whatever the seed; then chunks of random size */
        size_t n = at == 0 ? 1 : at == 1 ? 2 : 1 + (size_t)(rng_next() % CHUNK_MAX);
        n = n < total - at ? n : total - at;
        deliver_chunk(rm, &s, order + at, n, &t);
        at += n;
    }
    ck_assert_uint_gt(t.singles, 0);
    ck_assert_uint_gt(t.batches, 0);
    assert_model_is_server(rm, f.c);
    /* Each event was applied or found stale once and repeated twice. */
    tally_inbox_stats st;
    expect(tally_inbox_stats_get(readmodel_inbox(rm), &st), TALLY_ok, "stats");
    ck_assert_uint_eq(st.applied + st.repeated + st.stale, total);
    ck_assert_uint_eq(st.repeated, 2 * s.count);
    ck_assert_uint_eq(st.applied + st.stale, s.count);
    ck_assert_uint_eq(st.applied, t.by_outcome[TALLY_INBOX_APPLIED]);
    ck_assert_uint_eq(st.repeated, t.by_outcome[TALLY_INBOX_REPEATED]);
    ck_assert_uint_eq(st.stale, t.by_outcome[TALLY_INBOX_STALE]);
    ck_assert_uint_eq(st.processed_entries, s.count);
    /* One version row per entity: accounts, transfers, entitlements. */
    tally_stats server;
    expect(tally_stats_get(f.c, &server), TALLY_ok, "stats");
    ck_assert_uint_eq(st.version_entries, server.accounts + server.transfers + server.entitlements);
    /* Every event's id is in the processed table with its seq. */
    for (size_t i = 0; i < s.count; i++) {
        tally_inbox_processed p;
        expect(tally_inbox_processed_get(readmodel_inbox(rm), NULL, &s.items[i].id, &p),
               TALLY_ok, "processed_get");
        ck_assert_uint_eq(p.seq, s.items[i].seq);
    }
    /* A fourth delivery of everything changes nothing. */
    for (size_t i = 0; i < s.count; i++) {
        tally_inbox_outcome o;
        expect(tally_inbox_apply(readmodel_inbox(rm), s.items[i].bytes, s.items[i].len,
                                 readmodel_apply, rm, &o), TALLY_ok, "again");
        ck_assert_int_eq(o, TALLY_INBOX_REPEATED);
    }
    assert_model_is_server(rm, f.c);
    readmodel_close(rm);
    free(order);
    events_free(&s);
    down(&f);
}
END_TEST

/* ---- failures change nothing ---- */

typedef struct probe {
    MDB_dbi things;
    unsigned fail_at; /* the call (1-based) from which on it fails; 0: never */
    int fail_with;
    unsigned calls;
} probe;

/* Writes a row of its own and a version, then succeeds or fails. */
static int probe_apply(tally_inbox *ib, MDB_txn *txn, const tally_inbox_event *ev, void *ctx)
{
    probe *p = ctx;
    p->calls++;
    MDB_val k = {8, (void *)&ev->seq}, v = {ev->raw_len, (void *)ev->raw};
    ck_assert_int_eq(mdb_put(txn, p->things, &k, &v, 0), MDB_SUCCESS);
    bool advanced;
    expect(tally_inbox_version_set(ib, txn, "thing", &ev->seq, 8, 7, &advanced), TALLY_ok,
           "version_set");
    ck_assert(advanced);
    return p->fail_at != 0 && p->calls >= p->fail_at ? p->fail_with : TALLY_ok;
}

static uint64_t rows_in(tally_inbox *ib, MDB_dbi dbi)
{
    MDB_txn *txn;
    MDB_stat st;
    ck_assert_int_eq(mdb_txn_begin(tally_inbox_env(ib), NULL, MDB_RDONLY, &txn), MDB_SUCCESS);
    ck_assert_int_eq(mdb_stat(txn, dbi, &st), MDB_SUCCESS);
    mdb_txn_abort(txn);
    return st.ms_entries;
}

static tally_inbox *inbox_open(const char *dir, int64_t retention_ms, unsigned app_dbs)
{
    tally_inbox_options o = {.path = dir, .map_size_bytes = UINT64_C(16) << 20,
                             .app_dbs = app_dbs, .retention_ms = retention_ms};
    tally_inbox *ib = NULL;
    expect(tally_inbox_open(&o, &ib), TALLY_ok, "tally_inbox_open");
    return ib;
}

/* An inbox with the probe's database "things". */
static tally_inbox *probe_inbox_open(const char *dir, int64_t retention_ms, probe *p)
{
    tally_inbox *ib = inbox_open(dir, retention_ms, 1);
    expect(tally_inbox_db_open(ib, "things", 0, &p->things), TALLY_ok, "db_open");
    return ib;
}

/* Nothing at all recorded: counters, processed and version tables, rows. */
static void assert_inbox_empty(tally_inbox *ib, const probe *p)
{
    tally_inbox_stats st;
    expect(tally_inbox_stats_get(ib, &st), TALLY_ok, "stats");
    ck_assert_uint_eq(st.applied + st.repeated + st.stale, 0);
    ck_assert_uint_eq(st.processed_entries, 0);
    ck_assert_uint_eq(st.version_entries, 0);
    ck_assert_uint_eq(rows_in(ib, p->things), 0);
}

/* A small log: two accounts and a transfer. */
static void small_log(fixture *f, event_set *s)
{
    open_account(f->c, 1, 0);
    open_account(f->c, 2, 0);
    move(f->c, 1, 1, 2, 5, TALLY_ok);
    events_read_all(f->c, s);
    ck_assert_uint_eq(s->count, 3);
}

START_TEST(test_callback_error_writes_nothing)
{
    fixture f;
    up(&f);
    static event_set s;
    small_log(&f, &s);
    probe p = {.fail_at = 1, .fail_with = TALLY_exceeds_credits};
    tally_inbox *ib = probe_inbox_open(f.model_dir, 0, &p);
    tally_inbox_outcome o = 0;
    expect(tally_inbox_apply(ib, s.items[0].bytes, s.items[0].len, probe_apply, &p, &o),
           TALLY_exceeds_credits, "failing apply");
    ck_assert_uint_eq(p.calls, 1);
    assert_inbox_empty(ib, &p);
    tally_inbox_processed seen;
    expect(tally_inbox_processed_get(ib, NULL, &s.items[0].id, &seen), TALLY_not_found, "seen");
    /* A batch whose last event fails: none of it is kept. */
    tally_inbox_input in[3] = {{s.items[0].bytes, s.items[0].len},
                               {s.items[1].bytes, s.items[1].len},
                               {s.items[2].bytes, s.items[2].len}};
    size_t failed = 99;
    p = (probe){.things = p.things, .fail_at = 3, .fail_with = TALLY_io_error};
    expect(tally_inbox_apply_batch(ib, in, 3, probe_apply, &p, NULL, &failed), TALLY_io_error,
           "failing batch");
    ck_assert_uint_eq(failed, 2);
    ck_assert_uint_eq(p.calls, 3);
    assert_inbox_empty(ib, &p);
    /* The transaction form: the first error is remembered, commit refuses. */
    tally_inbox_txn *t;
    expect(tally_inbox_txn_begin(ib, &t), TALLY_ok, "begin");
    p = (probe){.things = p.things, .fail_at = 3, .fail_with = TALLY_internal};
    expect(tally_inbox_txn_apply(t, in[0].bytes, in[0].len, probe_apply, &p, &o), TALLY_ok, "a");
    ck_assert_int_eq(o, TALLY_INBOX_APPLIED);
    expect(tally_inbox_txn_apply(t, in[1].bytes, in[1].len, probe_apply, &p, &o), TALLY_ok, "b");
    expect(tally_inbox_txn_apply(t, in[2].bytes, in[2].len, probe_apply, &p, &o), TALLY_internal,
           "c");
    p.fail_at = 0;
    expect(tally_inbox_txn_apply(t, in[2].bytes, in[2].len, probe_apply, &p, &o), TALLY_internal,
           "after a failure");
    expect(tally_inbox_txn_commit(t), TALLY_internal, "commit refuses");
    assert_inbox_empty(ib, &p);
    /* Now all three apply: nothing was recorded as processed before. */
    tally_inbox_outcome out[3];
    expect(tally_inbox_apply_batch(ib, in, 3, probe_apply, &p, out, &failed), TALLY_ok, "batch");
    for (int i = 0; i < 3; i++)
        ck_assert_int_eq(out[i], TALLY_INBOX_APPLIED);
    ck_assert_uint_eq(rows_in(ib, p.things), 3);
    tally_inbox_stats st;
    expect(tally_inbox_stats_get(ib, &st), TALLY_ok, "stats");
    ck_assert_uint_eq(st.applied, 3);
    ck_assert_uint_eq(st.processed_entries, 3);
    ck_assert_uint_eq(st.version_entries, 3 + 3); /* 3 entities + 3 "thing" rows */
    tally_inbox_close(ib);
    events_free(&s);
    down(&f);
}
END_TEST

static int never_apply(tally_inbox *ib, MDB_txn *txn, const tally_inbox_event *ev, void *ctx)
{
    (void)ib, (void)txn, (void)ev;
    ck_abort_msg("the callback ran for malformed bytes (%p)", ctx);
    return TALLY_internal;
}

static void assert_refused(tally_inbox *ib, const void *bytes, size_t len, const char *what)
{
    tally_inbox_outcome o = 0;
    int rc = tally_inbox_apply(ib, bytes, len, never_apply, NULL, &o);
    ck_assert_msg(rc == TALLY_corrupt_record, "%s: %s", what, tally_strerror(rc));
}

START_TEST(test_malformed_events_change_nothing)
{
    fixture f;
    up(&f);
    static event_set s;
    small_log(&f, &s);
    probe p = {.fail_with = TALLY_ok};
    tally_inbox *ib = probe_inbox_open(f.model_dir, 0, &p);
    const event_copy *e = &s.items[2]; /* the transfer: the largest */
    uint8_t buf[8192];
    char what[64];
    /* Every truncation, every single-byte change, one byte more. */
    for (size_t n = 0; n < e->len; n++) {
        snprintf(what, sizeof(what), "truncated to %zu", n);
        assert_refused(ib, n ? e->bytes : NULL, n, what);
    }
    for (size_t i = 0; i < e->len; i++) {
        memcpy(buf, e->bytes, e->len);
        buf[i] ^= 0x5a;
        snprintf(what, sizeof(what), "byte %zu changed", i);
        assert_refused(ib, buf, e->len, what);
    }
    memcpy(buf, e->bytes, e->len);
    buf[e->len] = 0xc0;
    assert_refused(ib, buf, e->len + 1, "trailing byte");
    /* A count bomb, garbage, an oversized map, something else entirely. */
    static const uint8_t bomb[] = {0xdf, 0xff, 0xff, 0xff, 0xff};
    assert_refused(ib, bomb, sizeof(bomb), "count bomb");
    memset(buf, 0x91, 200);
    buf[199] = 0xc0;
    assert_refused(ib, buf, 200, "nested 200 deep");
    memset(buf, 0, 5000);
    buf[0] = 0xc6; /* bin32 of 4995 bytes: well-formed msgpack, too large */
    buf[1] = 0, buf[2] = 0, buf[3] = 0x13, buf[4] = 0x83;
    assert_refused(ib, buf, 5000, "oversized");
    static const uint8_t map[] = {0x81, 0xa1, 'v', 0x01};
    assert_refused(ib, map, sizeof(map), "a map that is no event");
    assert_inbox_empty(ib, &p);
    /* The real event still applies. */
    tally_inbox_outcome o;
    expect(tally_inbox_apply(ib, e->bytes, e->len, probe_apply, &p, &o), TALLY_ok, "real");
    ck_assert_int_eq(o, TALLY_INBOX_APPLIED);
    ck_assert_int_eq(tally_inbox_apply(ib, NULL, 0, NULL, NULL, NULL), TALLY_invalid_argument);
    tally_inbox_close(ib);
    events_free(&s);
    down(&f);
}
END_TEST

/* ---- the processed table prunes ---- */

static int64_t processed_ms_of(tally_inbox *ib, const event_copy *e)
{
    tally_inbox_processed p;
    expect(tally_inbox_processed_get(ib, NULL, &e->id, &p), TALLY_ok, "processed_get");
    ck_assert_uint_eq(p.seq, e->seq);
    return p.processed_ms;
}

START_TEST(test_processed_table_prunes)
{
    fixture f;
    up(&f);
    static event_set s;
    workload(f.c);
    events_read_all(f.c, &s);
    ck_assert_uint_ge(s.count, 36);
    const int64_t retention = 60000;
    readmodel_options ro = {.path = f.model_dir, .retention_ms = retention};
    readmodel *rm;
    expect(readmodel_open(&ro, &rm), TALLY_ok, "open");
    tally_inbox *ib = readmodel_inbox(rm);
    size_t first = s.count / 2;
    int64_t last_first = 0;
    for (size_t i = 0; i < first; i++) {
        expect(tally_inbox_apply(ib, s.items[i].bytes, s.items[i].len, readmodel_apply, rm, NULL),
               TALLY_ok, "apply");
        int64_t ms = processed_ms_of(ib, &s.items[i]);
        last_first = ms > last_first ? ms : last_first;
    }
    TEST_WAIT_UNTIL(clock_wall_ms() > last_first, 10000, /* the second half is processed later */
                    "the wall clock past %lld", (long long)last_first);
    for (size_t i = first; i < s.count; i++)
        expect(tally_inbox_apply(ib, s.items[i].bytes, s.items[i].len, readmodel_apply, rm, NULL),
               TALLY_ok, "apply");
    /* Nothing is older than the window yet. */
    uint32_t pruned = 99;
    bool more = true;
    expect(tally_inbox_prune(ib, clock_wall_ms(), 0, &pruned, &more), TALLY_ok, "prune now");
    ck_assert_uint_eq(pruned, 0);
    ck_assert(!more);
    /* At the end of the first half's window: exactly the first half goes,
     * at most 3 per call. */
    uint64_t total = 0;
    for (int calls = 0;; calls++) {
        ck_assert_int_lt(calls, 1000);
        expect(tally_inbox_prune(ib, last_first + 1 + retention, 3, &pruned, &more), TALLY_ok,
               "prune");
        ck_assert_uint_le(pruned, 3);
        total += pruned;
        if (!more)
            break;
        ck_assert_uint_eq(pruned, 3);
    }
    ck_assert_uint_eq(total, first);
    tally_inbox_stats st;
    expect(tally_inbox_stats_get(ib, &st), TALLY_ok, "stats");
    ck_assert_uint_eq(st.processed_entries, s.count - first);
    tally_inbox_processed p;
    for (size_t i = 0; i < s.count; i++)
        expect(tally_inbox_processed_get(ib, NULL, &s.items[i].id, &p),
               i < first ? TALLY_not_found : TALLY_ok, "after prune");
    /* A pruned event delivered again is still dropped: by its version. */
    tally_inbox_outcome o;
    expect(tally_inbox_apply(ib, s.items[0].bytes, s.items[0].len, readmodel_apply, rm, &o),
           TALLY_ok, "again");
    ck_assert_int_eq(o, TALLY_INBOX_STALE);
    expect(tally_inbox_apply(ib, s.items[first].bytes, s.items[first].len, readmodel_apply, rm,
                             &o), TALLY_ok, "kept one again");
    ck_assert_int_eq(o, TALLY_INBOX_REPEATED);
    ck_assert_int_eq(tally_inbox_prune(ib, clock_wall_ms(), TALLY_INBOX_PRUNE_ENTRIES_MAX + 1, NULL,
                                       NULL), TALLY_invalid_argument);
    readmodel_close(rm);
    events_free(&s);
    down(&f);
}
END_TEST

START_TEST(test_commits_prune_a_bounded_number)
{
    fixture f;
    up(&f);
    static event_set s;
    workload(f.c);
    events_read_all(f.c, &s);
    size_t n = 30;
    ck_assert_uint_gt(s.count, n);
    /* A window of 1 ms: everything older is expired at the next commit. */
    probe p = {.fail_with = TALLY_ok};
    tally_inbox *ib = probe_inbox_open(f.model_dir, 1, &p);
    tally_inbox_input in[30];
    for (size_t i = 0; i < n; i++)
        in[i] = (tally_inbox_input){s.items[i].bytes, s.items[i].len};
    expect(tally_inbox_apply_batch(ib, in, n, probe_apply, &p, NULL, NULL), TALLY_ok, "batch");
    int64_t done = processed_ms_of(ib, &s.items[0]);
    TEST_WAIT_UNTIL(clock_wall_ms() > done + 1, 10000, "the wall clock past %lld",
                    (long long)(done + 1));
    expect(tally_inbox_apply(ib, s.items[n].bytes, s.items[n].len, probe_apply, &p, NULL),
           TALLY_ok, "one more");
    /* That commit pruned (its events + 16) = 17 of the 40. */
    tally_inbox_stats st;
    expect(tally_inbox_stats_get(ib, &st), TALLY_ok, "stats");
    ck_assert_uint_eq(st.processed_entries, n - (1 + TALLY_INBOX_PRUNE_PER_COMMIT_EXTRA) + 1);
    ck_assert_uint_eq(st.applied, n + 1);
    tally_inbox_close(ib);
    events_free(&s);
    down(&f);
}
END_TEST

/* ---- version helpers and the environment (no server needed) ---- */

static void temp_dir(char *out, size_t size)
{
    const char *tmp = getenv("TMPDIR");
    snprintf(out, size, "%s/check-inbox-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    ck_assert_ptr_nonnull(mkdtemp(out));
}

START_TEST(test_version_helpers)
{
    char dir[256];
    temp_dir(dir, sizeof(dir));
    tally_inbox *ib = inbox_open(dir, 0, 1);
    MDB_txn *txn;
    ck_assert_int_eq(mdb_txn_begin(tally_inbox_env(ib), NULL, 0, &txn), MDB_SUCCESS);
    uint64_t v = 99;
    bool newer = false, advanced = true;
    expect(tally_inbox_version_get(ib, txn, "doc", "k", 1, &v), TALLY_ok, "get none");
    ck_assert_uint_eq(v, 0);
    expect(tally_inbox_version_newer(ib, txn, "doc", "k", 1, 1, &newer), TALLY_ok, "newer");
    ck_assert(newer);
    expect(tally_inbox_version_set(ib, txn, "doc", "k", 1, 5, &advanced), TALLY_ok, "set 5");
    ck_assert(advanced);
    expect(tally_inbox_version_set(ib, txn, "doc", "k", 1, 5, &advanced), TALLY_ok, "set 5 again");
    ck_assert(!advanced);
    expect(tally_inbox_version_set(ib, txn, "doc", "k", 1, 3, &advanced), TALLY_ok, "set 3");
    ck_assert(!advanced);
    expect(tally_inbox_version_get(ib, txn, "doc", "k", 1, &v), TALLY_ok, "get");
    ck_assert_uint_eq(v, 5);
    expect(tally_inbox_version_newer(ib, txn, "doc", "k", 1, 5, &newer), TALLY_ok, "newer 5");
    ck_assert(!newer);
    /* Kinds are separate rows. */
    expect(tally_inbox_version_get(ib, txn, "other", "k", 1, &v), TALLY_ok, "other kind");
    ck_assert_uint_eq(v, 0);
    /* Accounts: the row account events use. */
    tally_account a = {.id = 7, .version = 2};
    expect(tally_inbox_account_advance(ib, txn, &a, &newer), TALLY_ok, "account v2");
    ck_assert(newer);
    a.version = 1;
    expect(tally_inbox_account_advance(ib, txn, &a, &newer), TALLY_ok, "account v1");
    ck_assert(!newer);
    uint8_t id7[8] = {0, 0, 0, 0, 0, 0, 0, 7};
    expect(tally_inbox_version_get(ib, txn, "account", id7, 8, &v), TALLY_ok, "account row");
    ck_assert_uint_eq(v, 2);
    /* Bad arguments. */
    char kind[40], key[402];
    memset(kind, 'k', sizeof(kind));
    kind[TALLY_INBOX_KIND_BYTES_MAX + 1] = '\0';
    memset(key, 'x', sizeof(key));
    ck_assert_int_eq(tally_inbox_version_get(ib, txn, "", "k", 1, &v), TALLY_invalid_argument);
    ck_assert_int_eq(tally_inbox_version_get(ib, txn, kind, "k", 1, &v), TALLY_invalid_argument);
    ck_assert_int_eq(tally_inbox_version_get(ib, txn, "doc", key, TALLY_INBOX_KEY_BYTES_MAX + 1,
                                             &v), TALLY_invalid_argument);
    ck_assert_int_eq(tally_inbox_version_get(ib, txn, "doc", key, TALLY_INBOX_KEY_BYTES_MAX, &v),
                     TALLY_ok);
    ck_assert_int_eq(tally_inbox_version_get(ib, txn, "doc", "k", 0, &v), TALLY_invalid_argument);
    ck_assert_int_eq(tally_inbox_version_get(ib, NULL, "doc", "k", 1, &v), TALLY_invalid_argument);
    ck_assert_int_eq(tally_inbox_account_advance(ib, txn, NULL, &newer), TALLY_invalid_argument);
    ck_assert_int_eq(mdb_txn_commit(txn), MDB_SUCCESS);
    /* A transaction of another environment is refused. */
    char dir2[256];
    temp_dir(dir2, sizeof(dir2));
    tally_inbox *ib2 = inbox_open(dir2, 0, 1);
    ck_assert_int_eq(mdb_txn_begin(tally_inbox_env(ib2), NULL, MDB_RDONLY, &txn), MDB_SUCCESS);
    ck_assert_int_eq(tally_inbox_version_get(ib, txn, "doc", "k", 1, &v), TALLY_invalid_argument);
    mdb_txn_abort(txn);
    tally_inbox_close(ib2);
    tally_inbox_close(ib);
    /* Versions survive a reopen. */
    ib = inbox_open(dir, 0, 1);
    ck_assert_int_eq(mdb_txn_begin(tally_inbox_env(ib), NULL, MDB_RDONLY, &txn), MDB_SUCCESS);
    expect(tally_inbox_version_get(ib, txn, "doc", "k", 1, &v), TALLY_ok, "reopened");
    ck_assert_uint_eq(v, 5);
    mdb_txn_abort(txn);
    tally_inbox_close(ib);
    test_remove_dir(dir2);
    test_remove_dir(dir);
}
END_TEST

START_TEST(test_environment)
{
    char dir[256], file[300];
    temp_dir(dir, sizeof(dir));
    tally_inbox_options o = {.path = dir, .app_dbs = 2};
    tally_inbox *ib = NULL;
    ck_assert_int_eq(tally_inbox_open(NULL, &ib), TALLY_invalid_argument);
    o.map_size_bytes = 1000; /* below 1 MiB */
    ck_assert_int_eq(tally_inbox_open(&o, &ib), TALLY_invalid_argument);
    o.map_size_bytes = 0;
    o.retention_ms = -1;
    ck_assert_int_eq(tally_inbox_open(&o, &ib), TALLY_invalid_argument);
    o.retention_ms = 0;
    o.app_dbs = TALLY_INBOX_APP_DBS_MAX + 1;
    ck_assert_int_eq(tally_inbox_open(&o, &ib), TALLY_invalid_argument);
    o.app_dbs = 2;
    snprintf(file, sizeof(file), "%s/file", dir);
    FILE *fp = fopen(file, "w");
    ck_assert_ptr_nonnull(fp);
    fclose(fp);
    tally_inbox_options on_file = {.path = file};
    ck_assert_int_eq(tally_inbox_open(&on_file, &ib), TALLY_invalid_argument);
    ck_assert_ptr_null(ib);
    snprintf(file, sizeof(file), "%s/env", dir);
    o.path = file; /* created */
    expect(tally_inbox_open(&o, &ib), TALLY_ok, "open");
    MDB_dbi a, b, c;
    ck_assert_int_eq(tally_inbox_db_open(ib, "tally_inbox_mine", 0, &a), TALLY_invalid_argument);
    ck_assert_int_eq(tally_inbox_db_open(ib, "", 0, &a), TALLY_invalid_argument);
    expect(tally_inbox_db_open(ib, "one", 0, &a), TALLY_ok, "one");
    expect(tally_inbox_db_open(ib, "two", MDB_DUPSORT, &b), TALLY_ok, "two");
    ck_assert_int_eq(tally_inbox_db_open(ib, "three", 0, &c), TALLY_invalid_argument);
    expect(tally_inbox_db_open(ib, "one", 0, &c), TALLY_ok, "one again");
    ck_assert_uint_eq(a, c);
    /* An environment of another format is refused. */
    MDB_txn *txn;
    MDB_dbi meta;
    ck_assert_int_eq(mdb_txn_begin(tally_inbox_env(ib), NULL, 0, &txn), MDB_SUCCESS);
    ck_assert_int_eq(mdb_dbi_open(txn, "tally_inbox_meta", 0, &meta), MDB_SUCCESS);
    uint8_t format[4] = {0, 0, 0, 9};
    MDB_val k = {6, "format"}, v = {4, format};
    ck_assert_int_eq(mdb_put(txn, meta, &k, &v, 0), MDB_SUCCESS);
    ck_assert_int_eq(mdb_txn_commit(txn), MDB_SUCCESS);
    tally_inbox_close(ib);
    ib = NULL;
    ck_assert_int_eq(tally_inbox_open(&o, &ib), TALLY_store_version_mismatch);
    ck_assert_ptr_null(ib);
    test_remove_dir(dir);
}
END_TEST

/* ---- tally-readmodel ---- */

typedef struct run_output {
    int status;
    char *out;
} run_output;

/* Start tally-readmodel --data <model> args... with TALLY_URL = the
 * fixture's server; err_fd -1: stderr is the test's. */
static pid_t spawn_readmodel(const fixture *f, const char *const *args, int out_fd, int err_fd)
{
    const char *argv[16] = {tallyd_program("tally-readmodel"), "--data", f->model_dir};
    int argc = 3;
    for (; args[argc - 3]; argc++)
        argv[argc] = args[argc - 3];
    argv[argc] = NULL;
    char url[sizeof(f->srv.url) + 16];
    snprintf(url, sizeof(url), "TALLY_URL=%s", f->srv.url);
    const char *env[] = {url, NULL};
    return test_spawn(argv, env, out_fd, err_fd);
}

/* Run tally-readmodel --data <model> args... to the end. */
static run_output run_readmodel(const fixture *f, const char *const *args)
{
    int out = test_temp_fd();
    run_output r = {.status = test_wait(spawn_readmodel(f, args, out, -1))};
    r.out = test_fd_read_all(out);
    return r;
}

static int64_t json_int_of(json_t *o, const char *name)
{
    json_t *v = json_object_get(o, name);
    ck_assert_msg(json_is_integer(v), "%s is not an integer", name);
    return (int64_t)json_integer_value(v);
}

/* The --json dump holds exactly the server's objects, field by field. */
static void assert_dump_is_server(const char *text, tally_client *c, uint64_t head)
{
    json_error_t err;
    json_t *doc = json_loads(text, 0, &err);
    ck_assert_msg(doc != NULL, "dump is not JSON: %s", err.text);
    ck_assert_int_eq(json_int_of(doc, "position"), (int64_t)head);
    json_t *accounts = json_object_get(doc, "accounts"), *item;
    ck_assert_uint_eq(json_array_size(accounts), ACCOUNTS);
    size_t i;
    json_array_foreach(accounts, i, item) {
        tally_account a;
        expect(tally_account_get(c, (uint64_t)json_int_of(item, "id"), &a), TALLY_ok, "get");
        tally_account got = {(uint64_t)json_int_of(item, "id"), (uint32_t)json_int_of(item, "ledger"),
                             (uint16_t)json_int_of(item, "code"), (uint16_t)json_int_of(item, "flags"),
                             json_int_of(item, "debits_posted"), json_int_of(item, "credits_posted"),
                             json_int_of(item, "debits_pending"), json_int_of(item, "credits_pending"),
                             (uint64_t)json_int_of(item, "version"),
                             (uint64_t)json_int_of(item, "created_seq")};
        assert_account_same(&a, &got);
    }
    json_t *entitlements = json_object_get(doc, "entitlements");
    tally_stats s;
    expect(tally_stats_get(c, &s), TALLY_ok, "stats");
    ck_assert_uint_eq(json_array_size(entitlements), s.entitlements);
    json_array_foreach(entitlements, i, item) {
        const char *subject = json_string_value(json_object_get(item, "subject"));
        const char *feature = json_string_value(json_object_get(item, "feature"));
        tally_entitlement e;
        expect(tally_entitlement_get(c, subject, feature, &e), TALLY_ok, "entitlement_get");
        ck_assert_str_eq(json_string_value(json_object_get(item, "state")), e.state);
        ck_assert_int_eq(json_int_of(item, "version"), (int64_t)e.version);
        ck_assert_int_eq(json_int_of(item, "updated_ms"), e.updated_ms);
        ck_assert_int_eq(json_int_of(item, "granted_ms"), e.granted_ms);
        json_t *until = json_object_get(item, "valid_until_ms");
        ck_assert_int_eq(json_is_null(until), e.lifetime);
        if (!e.lifetime)
            ck_assert_int_eq(json_integer_value(until), e.valid_until_ms);
        ck_assert_int_eq(json_is_null(json_object_get(item, "grant_transfer_id")),
                         !e.has_grant_transfer);
    }
    json_decref(doc);
}

START_TEST(test_readmodel_once_twice)
{
    fixture f;
    up(&f);
    workload(f.c);
    static event_set s;
    events_after_expiries(f.c, &s);
    static const char *const once[] = {"--once", "--dump", "--json", "--batch", "7", NULL};
    run_output first = run_readmodel(&f, once);
    ck_assert_msg(first.status == 0, "tally-readmodel exited %d", first.status);
    assert_dump_is_server(first.out, f.c, s.head);
    run_output second = run_readmodel(&f, once);
    ck_assert_int_eq(second.status, 0);
    ck_assert_str_eq(second.out, first.out);
    static const char *const dump_only[] = {"--dump", "--json", NULL};
    run_output third = run_readmodel(&f, dump_only);
    ck_assert_int_eq(third.status, 0);
    ck_assert_str_eq(third.out, first.out);
    /* The model behind it: every field, every entity, nothing repeated. */
    readmodel *rm = model_open(f.model_dir);
    assert_model_is_server(rm, f.c);
    tally_inbox_stats st;
    expect(tally_inbox_stats_get(readmodel_inbox(rm), &st), TALLY_ok, "stats");
    ck_assert_uint_eq(st.applied + st.stale, s.count);
    ck_assert_uint_eq(st.repeated, 0);
    readmodel_close(rm);
    free(first.out);
    free(second.out);
    free(third.out);
    events_free(&s);
    down(&f);
}
END_TEST

/* A model that committed part of the log (as if killed after that commit)
 * resumes from its position and ends equal to the server. */
START_TEST(test_readmodel_resumes_from_its_position)
{
    fixture f;
    up(&f);
    workload(f.c);
    static event_set s;
    events_after_expiries(f.c, &s);
    readmodel *rm = model_open(f.model_dir);
    static tally_event page[EVENTS_MAX];
    size_t half = s.count / 2;
    for (size_t i = 0; i < half; i++)
        page[i] = (tally_event){.seq = s.items[i].seq, .raw = s.items[i].bytes,
                                .raw_len = s.items[i].len};
    expect(readmodel_apply_page(rm, page, half), TALLY_ok, "first half");
    uint64_t position;
    expect(readmodel_position(rm, &position), TALLY_ok, "position");
    ck_assert_uint_eq(position, half);
    readmodel_close(rm);
    static const char *const once[] = {"--once", NULL};
    run_output r = run_readmodel(&f, once);
    ck_assert_int_eq(r.status, 0);
    rm = model_open(f.model_dir);
    expect(readmodel_position(rm, &position), TALLY_ok, "position");
    ck_assert_uint_eq(position, s.head);
    assert_model_is_server(rm, f.c);
    tally_inbox_stats st;
    expect(tally_inbox_stats_get(readmodel_inbox(rm), &st), TALLY_ok, "stats");
    ck_assert_uint_eq(st.applied + st.stale, s.count);
    ck_assert_uint_eq(st.repeated, 0); /* nothing was fed twice */
    readmodel_close(rm);
    free(r.out);
    events_free(&s);
    down(&f);
}
END_TEST

/* Wait (bounded) until a follower committed up to the server's head, then
 * compare its model with the server. */
/* Whether what was written to fd (a test_temp_fd, kept open) holds text. */
static bool fd_holds(int fd, const char *text)
{
    char *all = test_fd_read_all(dup(fd)); /* which closes what it reads */
    bool held = strstr(all, text) != NULL;
    free(all);
    return held;
}

/* The follower (its stderr on err) reaches the server's head; if it does
 * not in time, the failure says where it is and what it printed. */
static void follower_caught_up(const fixture *f, pid_t pid, int err)
{
    tally_stats server;
    expect(tally_stats_get(f->c, &server), TALLY_ok, "stats");
    readmodel *rm = model_open(f->model_dir);
    int64_t deadline = test_deadline_ms(FOLLOW_WAIT_MS);
    uint64_t position = 0;
    while (readmodel_position(rm, &position) == TALLY_ok && position < server.head_seq) {
        if (clock_mono_ms() >= deadline) {
            char *said = test_fd_read_all(dup(err));
            ck_abort_msg("the follower (pid %d, %s) is at %" PRIu64 " of %" PRIu64
                         "; its stderr:\n%s",
                         (int)pid, kill(pid, 0) == 0 ? "running" : "gone", position,
                         server.head_seq, said);
        }
        test_pause_ms(50);
    }
    ck_assert_uint_eq(position, server.head_seq);
    assert_model_is_server(rm, f->c);
    readmodel_close(rm);
}

START_TEST(test_readmodel_follows_until_sigterm)
{
    fixture f;
    up(&f);
    open_account(f.c, BANK, 0);
    int out = test_temp_fd(), err = test_temp_fd();
    static const char *const follow[] = {"--wait-ms", "500", "--timeout-ms", "1000", NULL};
    pid_t pid = spawn_readmodel(&f, follow, out, err);
    for (uint64_t u = 2; u <= ACCOUNTS; u++)
        open_account(f.c, u, 0);
    for (uint64_t n = 1; n <= 20; n++)
        move(f.c, n, BANK, 2 + n % 5, (int64_t)n, TALLY_ok);
    for (size_t i = 0; i < SUBJECTS; i++)
        entitle(f.c, tally_grant, subjects[i], "pro", 0, 0, 0, TALLY_ok);
    follower_caught_up(&f, pid, err);
    /* The server goes away for longer than libtally's own retries last
     * (4 attempts of at most 1.5 s each), until the follower says it is
     * retrying itself, and comes back: the follower waits. */
    ck_assert_int_eq(tallyd_stop(&f.srv), 0);
    TEST_WAIT_UNTIL(fd_holds(err, "; retrying"), RETRYING_WAIT_MS,
                    "tally-readmodel retrying on its own after libtally's retries");
    tallyd_restart(&f.srv);
    for (uint64_t n = 21; n <= 30; n++)
        move(f.c, n, 2 + n % 5, BANK, 1, TALLY_ok);
    entitle(f.c, tally_revoke, "alice", "pro", 0, 0, 0, TALLY_ok);
    follower_caught_up(&f, pid, err);
    kill(pid, SIGTERM);
    run_output r = {.status = test_wait(pid)};
    r.out = test_fd_read_all(out);
    ck_assert_int_eq(r.status, 0);
    free(r.out);
    run_output e = {.out = test_fd_read_all(err)};
    /* unreachable, or timed_out when a long-poll was in flight at the stop */
    ck_assert_msg(strstr(e.out, "; retrying") != NULL, "stderr: %s", e.out);
    free(e.out);
    down(&f);
}
END_TEST

START_TEST(test_readmodel_usage)
{
    fixture f;
    memset(&f, 0, sizeof(f));
    snprintf(f.model_dir, sizeof(f.model_dir), "/nonexistent-dir/model");
    static const char *const help[] = {"--help", NULL};
    run_output r = run_readmodel(&f, help);
    ck_assert_int_eq(r.status, 0);
    ck_assert_ptr_nonnull(strstr(r.out, "usage: tally-readmodel"));
    ck_assert_ptr_nonnull(strstr(r.out, "--once"));
    free(r.out);
    static const char *const bad[][3] = {{"--batch", "0", NULL}, {"--batch", "1001", NULL},
                                         {"--wait-ms", "x", NULL}, {"--json", NULL, NULL},
                                         {"--nope", NULL, NULL}, {"extra", NULL, NULL}};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        r = run_readmodel(&f, bad[i]);
        ck_assert_msg(r.status == 2, "%s: exit %d", bad[i][0], r.status);
        free(r.out);
    }
    /* A directory that cannot be made is a failure, not a crash. */
    static const char *const dump[] = {"--dump", NULL};
    r = run_readmodel(&f, dump);
    ck_assert_int_eq(r.status, 1);
    free(r.out);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("inbox");
    TCase *tc = tcase_create("inbox");
    tcase_set_timeout(tc, TEST_TIMEOUT_S);
    tcase_add_test(tc, test_three_shuffled_deliveries_equal_server);
    tcase_add_test(tc, test_callback_error_writes_nothing);
    tcase_add_test(tc, test_malformed_events_change_nothing);
    tcase_add_test(tc, test_processed_table_prunes);
    tcase_add_test(tc, test_commits_prune_a_bounded_number);
    tcase_add_test(tc, test_version_helpers);
    tcase_add_test(tc, test_environment);
    tcase_add_test(tc, test_readmodel_once_twice);
    tcase_add_test(tc, test_readmodel_resumes_from_its_position);
    tcase_add_test(tc, test_readmodel_follows_until_sigterm);
    tcase_add_test(tc, test_readmodel_usage);
    suite_add_tcase(s, tc);
    return test_run_suite(s);
}
