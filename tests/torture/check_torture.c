/*
 * check_torture.c — the seeded torture harness: a real tallyd SIGKILLed at
 * random moments while concurrent clients send transfers (a third with user
 * data, a few imported: applied only while no live event came since the
 * last import, a few balancing: what the account has left, a few closing
 * holds that expire and reopen the account), reversals of them, holds (posted, voided or left to expire),
 * entitlement commands with source orders and atomic chains, each command one to three times — sometimes by two
 * threads at once, sometimes over a connection the client drops before
 * the reply, or with a client too impatient to wait for it — and then
 * until it is answered. A few commands are abandoned after one send.
 *
 * At the end an auditor (audit.c) checks the stopped store against the
 * acknowledged outcomes alone: every account, transfer and entitlement,
 * each answered key applied exactly once (its events in the log by
 * causation key), no abandoned key applied twice, every replayed answer
 * equal to the first, and ledger_invariants_check (as tally-recon) clean.
 *
 * Options (or the environment, for `make check`):
 *   --seed N     TALLY_TORTURE_SEED     the choices of every client and of
 *                                       the kills (printed; default: random)
 *   --kills N    TALLY_TORTURE_KILLS    SIGKILLs at least (default 50)
 *   --seconds N  TALLY_TORTURE_SECONDS  and run at least this long (default 0)
 *   --threads N  TALLY_TORTURE_THREADS  client threads (default 6)
 *   --sigterm-percent P  TALLY_TORTURE_SIGTERM_PERCENT  stop this share of
 *                the times with SIGTERM instead, which must exit 0: a clean
 *                shutdown under load, and under valgrind the instances whose
 *                report (written at exit) is checked (default 10)
 * The seed fixes what each thread sends and how, and when the kills come
 * relative to the answers; the interleaving of threads is the machine's,
 * and with it which recent hold or transfer a command refers to.
 */
#include "tests/torture/torture.h"

#include "clients/libtally/tally.h"
#include "common/clock.h"
#include "common/error.h"
#include "tests/support/tallyd_harness.h"
#include "tests/support/test_support.h"
#include "tests/support/wait.h"

#include <check.h>
#include <inttypes.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define THREADS_MAX 64
#define RECENT_MAX 64
/* A key is sent until answered, for this long at most. */
#define ANSWER_WAIT_MS 300000
/* After a restart, the clients must get an answer within this. */
#define PROGRESS_WAIT_MS 120000
#define CLIENT_TIMEOUT_MS 3000
#define IMPATIENT_TIMEOUT_MS 5
#define KILL_AFTER_ANSWERS_MAX 24
#define KILL_DELAY_MS_MAX 150
#define DOWN_MS_MAX 100
#define HANG_UP_LINGER_MS_MAX 20
#define ABANDON_PERCENT 3
#define AMOUNT_MAX 100
#define FUNDING_MAX 500
/* Entitlements end far after the run (none expires while it runs), later
 * for a newer source order so that extends move forward. */
#define VALID_FOR_MS (INT64_C(30) * 24 * 3600 * 1000)
#define ORDER_STEP_MS 1000
#define MAP_SIZE_MB "8192"
/* The longest hold timeout is 3 s and the idle sweep runs after 1 s. */
#define EXPIRY_WAIT_MS 60000

typedef struct torture_options {
    uint64_t seed, kills, seconds, threads, sigterm_percent;
} torture_options;

static torture_options options;

typedef struct hold_ref {
    tally_id128 id;
    int64_t amount;
} hold_ref;

typedef struct run {
    tallyd_proc srv;
    torture_store cmds;
    atomic_bool stop;
    atomic_uint_fast64_t decided;   /* decided answers: progress between kills */
    atomic_uint_fast32_t race;      /* index + 1 of a command offered to race; 0: none */
    atomic_uint_fast64_t orders[TORTURE_ENTITLEMENTS]; /* last source order handed out */
    atomic_uint_fast64_t sends, hang_ups, impatient, races, abandoned;
    int64_t valid_base_ms;
    int64_t import_base_ms;         /* imported history: the accounts, then some transfers */
    pthread_mutex_t recent_lock;    /* what commands may refer to */
    hold_ref holds[RECENT_MAX];
    torture_cmd *transfers[RECENT_MAX];
    uint64_t holds_seen, transfers_seen;
} run;

typedef struct worker {
    run *r;
    uint64_t rng;
    tally_client *patient;   /* retries, waits CLIENT_TIMEOUT_MS per attempt */
    tally_client *impatient; /* one attempt of IMPATIENT_TIMEOUT_MS: drops replies */
    pthread_t thread;
} worker;

static uint64_t below(worker *w, uint64_t bound) { return test_rng_below(&w->rng, bound); }


/* ---- what commands refer to: recent holds and transfers ---- */

static void recent_hold_add(run *r, const torture_write *w)
{
    pthread_mutex_lock(&r->recent_lock);
    r->holds[r->holds_seen++ % RECENT_MAX] = (hold_ref){w->id, w->amount};
    pthread_mutex_unlock(&r->recent_lock);
}

static void recent_transfer_add(run *r, torture_cmd *c)
{
    pthread_mutex_lock(&r->recent_lock);
    r->transfers[r->transfers_seen++ % RECENT_MAX] = c;
    pthread_mutex_unlock(&r->recent_lock);
}

static bool recent_hold(worker *w, hold_ref *out)
{
    run *r = w->r;
    pthread_mutex_lock(&r->recent_lock);
    uint64_t n = r->holds_seen < RECENT_MAX ? r->holds_seen : RECENT_MAX;
    if (n > 0)
        *out = r->holds[below(w, n)];
    pthread_mutex_unlock(&r->recent_lock);
    return n > 0;
}

static const torture_cmd *recent_transfer(worker *w)
{
    run *r = w->r;
    pthread_mutex_lock(&r->recent_lock);
    uint64_t n = r->transfers_seen < RECENT_MAX ? r->transfers_seen : RECENT_MAX;
    const torture_cmd *c = n > 0 ? r->transfers[below(w, n)] : NULL;
    pthread_mutex_unlock(&r->recent_lock);
    return c;
}

/* ---- generating commands ---- */

/* Transfer ids come from the key, as libtally derives them. */
static tally_id128 member_id(const torture_cmd *c, uint32_t member)
{
    char key[TORTURE_KEY_BYTES_MAX + 8];
    snprintf(key, sizeof(key), "cmd-%" PRIu32 "/%" PRIu32, c->index, member);
    tally_uuid u;
    tally_uuid_from_key(TORTURE_CONSUMER, key, &u);
    tally_id128 id;
    memcpy(id.bytes, u.bytes, sizeof(id.bytes));
    return id;
}

static uint64_t customer(worker *w) { return 2 + below(w, TORTURE_ACCOUNTS - 1); }

/* A transfer or hold: often from account 1 (funding), else between the
 * others, whose limits refuse what they cannot pay. */
static void make_transfer(worker *w, torture_cmd *c, uint32_t member, bool pending)
{
    torture_write *t = &c->w[member];
    bool funding = below(w, 100) < 40;
    t->kind = LEDGER_TRANSFER;
    t->id = member_id(c, member);
    t->debit = funding ? 1 : customer(w);
    do
        t->credit = 1 + below(w, TORTURE_ACCOUNTS);
    while (t->credit == t->debit);
    t->amount = 1 + (int64_t)below(w, funding ? FUNDING_MAX : AMOUNT_MAX);
    t->pending = pending;
    t->timeout_s = pending && below(w, 10) < 7 ? 1 + (uint32_t)below(w, 3) : 0;
    /* user data on a third of them, from what is drawn already (the
     * stream of draws stays as it was) */
    t->user_data_64 = t->amount % 3 == 0 ? get_u64_be(t->id.bytes + 8) : 0;
}

/* A post or void of a recent hold; false when there is none yet. */
static bool make_hold_step(worker *w, torture_write *t, bool post)
{
    hold_ref h;
    if (!recent_hold(w, &h))
        return false;
    t->kind = post ? LEDGER_POST : LEDGER_VOID;
    t->id = h.id;
    uint64_t roll = below(w, 10);
    if (post && roll >= 4) /* else 0: all that is held */
        t->amount = roll < 9 ? 1 + (int64_t)below(w, (uint64_t)h.amount) : h.amount + 1;
    return true;
}

/* The next source order of entitlement e, or now and then an older one
 * (stale unless nothing newer was applied yet). */
static uint64_t source_order(worker *w, unsigned e)
{
    uint64_t next = atomic_fetch_add(&w->r->orders[e], 1) + 1;
    if (below(w, 10) == 0 && next > 1)
        return next - 1 - below(w, next - 1 < 4 ? next - 1 : 4);
    return next;
}

static void make_entitlement(worker *w, torture_write *t, uint8_t kind, const tally_id128 *paid_by)
{
    t->kind = kind;
    t->entitlement = (uint8_t)below(w, TORTURE_ENTITLEMENTS);
    t->source_order = source_order(w, t->entitlement);
    int64_t until = w->r->valid_base_ms + (int64_t)t->source_order * ORDER_STEP_MS;
    if (kind == LEDGER_GRANT) {
        t->valid_until_ms = below(w, 4) == 0 ? 0 : until; /* 0: for life */
        const torture_cmd *paid = paid_by ? NULL : below(w, 3) == 0 ? recent_transfer(w) : NULL;
        if (paid_by || paid) {
            t->has_grant_transfer = true;
            t->id = paid_by ? *paid_by : paid->w[0].id;
        }
    } else if (kind == LEDGER_EXTEND) {
        t->valid_until_ms = until + ORDER_STEP_MS / 2;
    }
}

/* A chain of two: pay and grant, two transfers, or a hold and a transfer. */
static void make_chain(worker *w, torture_cmd *c)
{
    c->chain = true;
    c->count = 2;
    uint64_t roll = below(w, 3);
    make_transfer(w, c, 0, roll == 2);
    if (roll == 0) {
        make_entitlement(w, &c->w[1], LEDGER_GRANT, &c->w[0].id);
    } else {
        make_transfer(w, c, 1, false);
        c->w[1].debit = c->w[0].credit; /* pass it on */
        if (c->w[1].credit == c->w[1].debit)
            c->w[1].credit = c->w[1].debit == 1 ? 2 : 1;
    }
    if (roll == 2)
        recent_hold_add(w->r, &c->w[0]);
}

/* A copy of a recent single transfer under a new key: the same id and
 * fields, so at most one of the two may create it. */
static bool make_duplicate(worker *w, torture_cmd *c)
{
    const torture_cmd *orig = recent_transfer(w);
    if (orig == NULL)
        return false;
    c->w[0] = orig->w[0];
    return true;
}

/* A reversal of part or all of a recent single transfer (which may not
 * exist, or have been reversed already: refused then). */
static bool make_reversal(worker *w, torture_cmd *c)
{
    const torture_cmd *orig = recent_transfer(w);
    if (orig == NULL)
        return false;
    torture_write *t = &c->w[0];
    t->kind = LEDGER_REVERSE;
    t->id = member_id(c, 0);
    t->reverses = orig->w[0].id;
    t->debit = orig->w[0].credit;
    t->credit = orig->w[0].debit;
    t->amount = 1 + (int64_t)below(w, (uint64_t)orig->w[0].amount);
    return true;
}

/* A single transfer (now and then a duplicate of a recent one, or a
 * reversal). */
static void make_single_transfer(worker *w, torture_cmd *c)
{
    uint64_t roll = below(w, 20);
    if (roll == 0 && make_duplicate(w, c))
        return;
    if (roll == 1 && make_reversal(w, c))
        return;
    if (roll == 4 && below(w, 8) == 0) { /* a closing hold on a customer, now and then
                                            (it blocks the account): it expires, reopening */
        make_transfer(w, c, 0, true);
        c->w[0].debit = customer(w);
        if (c->w[0].credit == c->w[0].debit)
            c->w[0].credit = 1;
        c->w[0].timeout_s = 1;
        c->w[0].more_flags = LEDGER_TRANSFER_CLOSING_DEBIT;
        return;
    }
    if (roll == 3) { /* balancing: a customer's whatever is left, at most ten times a payment */
        make_transfer(w, c, 0, false);
        c->w[0].debit = customer(w);
        if (c->w[0].credit == c->w[0].debit)
            c->w[0].credit = 1;
        c->w[0].amount *= 10;
        c->w[0].more_flags = LEDGER_TRANSFER_BALANCING_DEBIT;
        return;
    }
    if (roll == 2) { /* imported: applied only while no live event came since the last import */
        make_transfer(w, c, 0, false);
        c->w[0].timestamp_ms = w->r->import_base_ms + TORTURE_ACCOUNTS + 1 + (int64_t)c->index;
        return;
    }
    make_transfer(w, c, 0, false);
    recent_transfer_add(w->r, c);
}

static torture_cmd *generate(worker *w)
{
    torture_cmd *c = torture_cmd_new(&w->r->cmds);
    if (c == NULL)
        return NULL;
    uint64_t roll = below(w, 100);
    if (roll < 33) {
        make_single_transfer(w, c);
    } else if (roll < 53) {
        make_transfer(w, c, 0, true);
        recent_hold_add(w->r, &c->w[0]);
    } else if (roll < 70) {
        if (!make_hold_step(w, &c->w[0], roll < 62))
            make_single_transfer(w, c);
    } else if (roll < 85) {
        uint64_t kind = below(w, 20);
        make_entitlement(w, &c->w[0], kind < 9 ? LEDGER_GRANT : kind < 15 ? LEDGER_EXTEND
                                                                            : LEDGER_REVOKE, NULL);
    } else {
        make_chain(w, c);
    }
    return c;
}

/* ---- sending ---- */

/* Send c once through client; true when a decided answer came back.
 * *rc_out (may be NULL) gets libtally's code. */
static bool send_with(run *r, tally_client *client, torture_cmd *c, int *rc_out)
{
    msgpack_sbuffer sb;
    torture_request_pack(c, &sb);
    void *reply = NULL;
    size_t len = 0;
    bool decided = false;
    int rc = tally_request_raw(client, sb.data, sb.size, &reply, &len);
    if (rc == TALLY_ok) {
        decided = torture_answer_record(&r->cmds, c, reply, len);
        free(reply);
    }
    if (rc_out)
        *rc_out = rc;
    msgpack_sbuffer_destroy(&sb);
    if (decided)
        atomic_fetch_add(&r->decided, 1);
    return decided;
}

/* Send c over a connection closed before the reply can be read. */
static void send_and_hang_up(worker *w, torture_cmd *c)
{
    msgpack_sbuffer sb;
    torture_request_pack(c, &sb);
    tallyd_send_and_hang_up(w->r->srv.url, sb.data, sb.size, (int)below(w, HANG_UP_LINGER_MS_MAX));
    msgpack_sbuffer_destroy(&sb);
    atomic_fetch_add(&w->r->hang_ups, 1);
}

static void answer_until_decided(run *r, tally_client *client, torture_cmd *c)
{
    int64_t deadline = test_deadline_ms(ANSWER_WAIT_MS);
    int rc;
    while (!send_with(r, client, c, &rc)) {
        if (clock_mono_ms() > deadline) {
            char key[TORTURE_KEY_BYTES_MAX];
            torture_key(c, key);
            torture_fail(&r->cmds, "%s: no answer within %d s (last: %s)", key,
                         ANSWER_WAIT_MS / 1000, rc == TALLY_ok ? "a fault" : tally_strerror(rc));
            return;
        }
    }
}

/* Offer c to another thread, which sends it too (race_take). */
static void race_offer(run *r, const torture_cmd *c)
{
    uint_fast32_t none = 0;
    if (atomic_compare_exchange_strong(&r->race, &none, c->index + 1))
        atomic_fetch_add(&r->races, 1);
}

static void race_take(worker *w)
{
    uint_fast32_t offered = atomic_exchange(&w->r->race, 0);
    if (offered != 0)
        send_with(w->r, w->patient, torture_cmd_at(&w->r->cmds, (uint32_t)(offered - 1)), NULL);
}

/* One to three sends in mixed ways, then until answered; or, now and
 * then, one send whose reply is never read (abandoned). */
static void send_command(worker *w, torture_cmd *c)
{
    run *r = w->r;
    if (below(w, 100) < ABANDON_PERCENT) {
        c->abandoned = true;
        atomic_fetch_add(&r->abandoned, 1);
        send_and_hang_up(w, c);
        return;
    }
    bool decided = false;
    for (uint64_t i = 0, sends = 1 + below(w, 3); i < sends; i++) {
        atomic_fetch_add(&r->sends, 1);
        uint64_t how = below(w, 10);
        if (how < 2) {
            send_and_hang_up(w, c);
        } else if (how < 4) {
            atomic_fetch_add(&r->impatient, 1);
            decided |= send_with(r, w->impatient, c, NULL);
        } else {
            if (how == 4)
                race_offer(r, c);
            decided |= send_with(r, w->patient, c, NULL);
        }
    }
    if (!decided)
        answer_until_decided(r, w->patient, c);
}

static void *worker_main(void *arg)
{
    worker *w = arg;
    while (!atomic_load(&w->r->stop)) {
        race_take(w);
        torture_cmd *c = generate(w);
        if (c == NULL) {
            torture_fail(&w->r->cmds, "the command store is full");
            break;
        }
        send_command(w, c);
    }
    return NULL;
}

static tally_client *client_open(const run *r, uint32_t timeout_ms, bool retry)
{
    tally_client_options o = {.url = r->srv.url, .consumer = TORTURE_CONSUMER,
                              .timeout_ms = timeout_ms, .retries = retry ? 3 : 0,
                              .retries_set = true};
    tally_client *c = NULL;
    ck_assert_int_eq(tally_client_open(&o, &c), TALLY_ok);
    return c;
}

/* ---- the run ---- */

static void open_accounts(run *r, tally_client *client)
{
    for (uint64_t id = 1; id <= TORTURE_ACCOUNTS; id++) {
        torture_cmd *c = torture_cmd_new(&r->cmds);
        ck_assert_ptr_nonnull(c);
        c->w[0].kind = LEDGER_ACCOUNT_OPEN;
        c->w[0].debit = id;
        c->w[0].account_flags = id == 1 ? 0
                                : id < TORTURE_ACCOUNTS ? LEDGER_ACCOUNT_DEBITS_MUST_NOT_EXCEED_CREDITS
                                                        : LEDGER_ACCOUNT_CREDITS_MUST_NOT_EXCEED_DEBITS;
        /* imported history: opened before anything else, at past times */
        c->w[0].account_flags |= LEDGER_ACCOUNT_IMPORTED;
        c->w[0].timestamp_ms = r->import_base_ms + (int64_t)id;
        answer_until_decided(r, client, c);
        ck_assert_int_eq(c->first.code, TALLY_ok);
    }
}

/* Wait until the clients got `answers` more decided answers. */
static bool progress_wait(run *r, uint64_t answers)
{
    uint64_t from = atomic_load(&r->decided);
    int64_t deadline = test_deadline_ms(PROGRESS_WAIT_MS);
    while (atomic_load(&r->decided) < from + answers) {
        if (clock_mono_ms() > deadline || torture_failures(&r->cmds) > 0)
            return false;
        test_pause_ms(2);
    }
    return true;
}

/* Stop tallyd: mostly SIGKILL (counted in *kills), now and then SIGTERM,
 * after which it must have exited cleanly. */
static void stop_once(run *r, uint64_t *rng, uint64_t *kills, uint64_t *sigterms)
{
    if (test_rng_below(rng, 100) >= options.sigterm_percent) {
        tallyd_kill(&r->srv);
        ++*kills;
        return;
    }
    int status = tallyd_stop(&r->srv);
    ++*sigterms;
    if (status != 0)
        torture_fail(&r->cmds, "tallyd exited %d after SIGTERM (log in %s)", status,
                     r->srv.log_path);
}

static uint64_t kill_loop(run *r, uint64_t *rng, uint64_t *sigterms)
{
    int64_t start = clock_mono_ms();
    uint64_t kills = 0;
    while (kills < options.kills || clock_mono_ms() - start < (int64_t)options.seconds * 1000) {
        if (!progress_wait(r, 1 + test_rng_below(rng, KILL_AFTER_ANSWERS_MAX))) {
            if (torture_failures(&r->cmds) == 0)
                torture_fail(&r->cmds, "no answers for %lld s after a restart",
                             (long long)test_scaled_ms(PROGRESS_WAIT_MS) / 1000);
            break;
        }
        test_pause_ms(test_rng_below(rng, KILL_DELAY_MS_MAX)); /* the random kill point: an input */
        stop_once(r, rng, &kills, sigterms);
        test_pause_ms(test_rng_below(rng, DOWN_MS_MAX)); /* the random time down: an input */
        tallyd_restart(&r->srv);
        if ((kills + *sigterms) % 100 == 0)
            fprintf(stderr, "torture: %" PRIu64 " kills, %" PRIu32 " commands, %" PRId64 " s\n",
                    kills, r->cmds.count, (clock_mono_ms() - start) / 1000);
    }
    return kills;
}

/* true when hold t of c may exist: its command was applied or abandoned. */
static bool hold_may_expire(const torture_cmd *c, const torture_write *t)
{
    return t->kind == LEDGER_TRANSFER && t->pending && t->timeout_s > 0 &&
           (c->abandoned || (c->answers > 0 && c->first.code == TALLY_ok));
}

/* Wait until no hold with a timeout is pending any more (the idle sweep
 * expires them), so that the audit knows every hold's final state. The
 * newest holds expire last: once they have, the older ones are read once. */
static void expiries_wait(run *r, tally_client *client)
{
    int64_t deadline = test_deadline_ms(EXPIRY_WAIT_MS);
    for (uint32_t i = r->cmds.count; i-- > 0;) {
        const torture_cmd *c = torture_cmd_at(&r->cmds, i);
        for (uint32_t m = 0; m < c->count; m++) {
            if (!hold_may_expire(c, &c->w[m]))
                continue;
            tally_transfer_info info;
            tally_uuid id;
            memcpy(id.bytes, c->w[m].id.bytes, sizeof(id.bytes));
            while (tally_transfer_get(client, &id, &info) == TALLY_ok &&
                   strcmp(info.state, "pending") == 0 && clock_mono_ms() < deadline)
                test_pause_ms(100);
        }
    }
}

static void report(const run *r, uint64_t kills, uint64_t sigterms, int64_t elapsed_ms)
{
    const torture_store *s = &r->cmds;
    fprintf(stderr,
            "torture: seed %" PRIu64 " (TALLY_TORTURE_SEED=%" PRIu64 " or --seed repeats the "
            "choices): %" PRIu64 " kills, %" PRIu64 " SIGTERMs, %" PRIu32 " commands, %" PRIu64 " sends (%" PRIu64
            " hung up, %" PRIu64 " impatient, %" PRIu64 " raced), %" PRIu64 " abandoned, answers %"
            PRIu64 " fresh + %" PRIu64 " replayed, %" PRId64 " s, %" PRIu64 " failures\n",
            options.seed, options.seed, kills, sigterms, s->count, (uint64_t)atomic_load(&r->sends),
            (uint64_t)atomic_load(&r->hang_ups), (uint64_t)atomic_load(&r->impatient),
            (uint64_t)atomic_load(&r->races), (uint64_t)atomic_load(&r->abandoned), s->fresh_answers,
            s->replayed_answers, elapsed_ms / 1000, s->failures);
}

static void outcomes_report(const torture_store *s)
{
    uint64_t counts[256] = {0}, applied = 0;
    for (uint32_t i = 0; i < s->count; i++) {
        const torture_cmd *c = torture_cmd_at(s, i);
        counts[c->answers > 0 && c->first.code >= 0 && c->first.code < 256 ? c->first.code : 255]++;
        applied += c->applied;
    }
    fprintf(stderr, "torture: %" PRIu64 " applied; outcomes:", applied);
    for (int code = 0; code < 255; code++)
        if (counts[code])
            fprintf(stderr, " %s %" PRIu64, tally_strerror(code), counts[code]);
    fprintf(stderr, ", unanswered (abandoned) %" PRIu64 "\n", counts[255]);
}

static void audit_stopped(run *r)
{
    store *st = NULL;
    store_options so = {.path = r->srv.data_dir, .read_only = true};
    int rc = store_open(&so, &st);
    ck_assert_msg(rc == TALLY_ok, "read-only store_open: %s", tally_strerror(rc));
    torture_audit(&r->cmds, st);
    store_close(st);
}

START_TEST(torture_kills_lose_nothing_apply_nothing_twice)
{
    static run r; /* large: not on the stack */
    memset(&r, 0, sizeof(r));
    torture_store_init(&r.cmds);
    pthread_mutex_init(&r.recent_lock, NULL);
    r.valid_base_ms = clock_wall_ms() + VALID_FOR_MS;
    r.import_base_ms = clock_wall_ms() - VALID_FOR_MS;
    r.srv.extra_args[0] = "--map-size-mb";
    r.srv.extra_args[1] = MAP_SIZE_MB;
    int64_t start = clock_mono_ms();
    tallyd_start(&r.srv);
    tally_client *main_client = client_open(&r, CLIENT_TIMEOUT_MS, true);
    open_accounts(&r, main_client);

    static worker workers[THREADS_MAX];
    uint64_t rng = options.seed;
    for (uint64_t i = 0; i < options.threads; i++) {
        workers[i] = (worker){.r = &r, .rng = test_rng_next(&rng)};
        workers[i].patient = client_open(&r, CLIENT_TIMEOUT_MS, true);
        workers[i].impatient = client_open(&r, IMPATIENT_TIMEOUT_MS, false);
        ck_assert_int_eq(pthread_create(&workers[i].thread, NULL, worker_main, &workers[i]), 0);
    }
    uint64_t sigterms = 0;
    uint64_t kills = kill_loop(&r, &rng, &sigterms);
    atomic_store(&r.stop, true);
    for (uint64_t i = 0; i < options.threads; i++)
        pthread_join(workers[i].thread, NULL);
    for (uint64_t i = 0; i < options.threads; i++) {
        tally_client_close(workers[i].patient);
        tally_client_close(workers[i].impatient);
    }
    expiries_wait(&r, main_client);
    tally_client_close(main_client);
    ck_assert_int_eq(tallyd_stop(&r.srv), 0);
    audit_stopped(&r);
    report(&r, kills, sigterms, clock_mono_ms() - start);
    outcomes_report(&r.cmds);
    ck_assert_msg(r.cmds.failures == 0, "%" PRIu64 " failures; the first: %s", r.cmds.failures,
                  r.cmds.failure[0]);
    ck_assert_msg(kills >= options.kills, "only %" PRIu64 " kills", kills);
    tallyd_cleanup(&r.srv);
    torture_store_free(&r.cmds);
}
END_TEST

/* ---- options ---- */

static void usage(FILE *out)
{
    fprintf(out,
            "usage: check_torture [--seed N] [--kills N] [--seconds N] [--threads N]\n"
            "                     [--sigterm-percent P] [--help]\n"
            "\n"
            "SIGKILL a real tallyd at random moments under concurrent clients that retry\n"
            "every command with its key until answered, then check the stopped store\n"
            "against the acknowledged outcomes (docs/TESTING.md).\n"
            "\n"
            "  --seed N     seed of every choice (default: random; printed)\n"
            "  --kills N    kill tallyd at least N times (default 50)\n"
            "  --seconds N  and keep going for at least N seconds (default 0)\n"
            "  --threads N  client threads, 1..%d (default 6)\n"
            "  --sigterm-percent P  stop tallyd with SIGTERM instead of SIGKILL this share\n"
            "               of the times, 0..100; it must then exit 0 (default 10)\n"
            "\n"
            "The environment variables TALLY_TORTURE_SEED, _KILLS, _SECONDS, _THREADS and\n"
            "_SIGTERM_PERCENT set the same (options win). $TALLYD names the tallyd binary (./tallyd by\n"
            "default) and $TALLYD_WRAPPER a command to run it under (e.g. valgrind).\n",
            THREADS_MAX);
}

static bool number_arg(const char *text, uint64_t *out)
{
    char *end;
    unsigned long long v = strtoull(text, &end, 10);
    if (*text == '\0' || *text == '-' || *end != '\0')
        return false;
    *out = v;
    return true;
}

static int options_parse(int argc, char **argv)
{
    options.seed = test_env_u64("TALLY_TORTURE_SEED", 0);
    if (options.seed == 0)
        options.seed = (uint64_t)clock_wall_ms() ^ ((uint64_t)getpid() << 32);
    options.kills = test_env_u64("TALLY_TORTURE_KILLS", 50);
    options.seconds = test_env_u64("TALLY_TORTURE_SECONDS", 0);
    options.threads = test_env_u64("TALLY_TORTURE_THREADS", 6);
    options.sigterm_percent = test_env_u64("TALLY_TORTURE_SIGTERM_PERCENT", 10);
    for (int i = 1; i < argc; i++) {
        uint64_t *target = strcmp(argv[i], "--seed") == 0      ? &options.seed
                           : strcmp(argv[i], "--kills") == 0   ? &options.kills
                           : strcmp(argv[i], "--seconds") == 0 ? &options.seconds
                           : strcmp(argv[i], "--threads") == 0 ? &options.threads
                           : strcmp(argv[i], "--sigterm-percent") == 0 ? &options.sigterm_percent
                                                                       : NULL;
        if (strcmp(argv[i], "--help") == 0) {
            usage(stdout);
            exit(EXIT_SUCCESS);
        }
        if (target == NULL || i + 1 == argc || !number_arg(argv[++i], target)) {
            fprintf(stderr, "check_torture: bad argument %s\n", argv[i]);
            usage(stderr);
            return 2;
        }
    }
    if (options.threads < 1 || options.threads > THREADS_MAX || options.sigterm_percent > 100 ||
        (options.sigterm_percent == 100 && options.kills > 0)) {
        fprintf(stderr, "check_torture: --threads must be 1..%d and --sigterm-percent 0..100 "
                "(below 100 when there are kills to make)\n", THREADS_MAX);
        return 2;
    }
    return 0;
}

int main(int argc, char **argv)
{
    int rc = options_parse(argc, argv);
    if (rc != 0)
        return rc;
    fprintf(stderr, "torture: seed %" PRIu64 ", at least %" PRIu64 " kills and %" PRIu64
            " s, %" PRIu64 " threads, %" PRIu64 "%% of stops by SIGTERM\n", options.seed,
            options.kills, options.seconds, options.threads, options.sigterm_percent);
    Suite *s = suite_create("torture");
    TCase *tc = tcase_create("kills");
    /* the run's own bounds come first; this only catches a hang */
    tcase_set_timeout(tc, (double)(900 + 2 * options.seconds));
    tcase_add_test(tc, torture_kills_lose_nothing_apply_nothing_twice);
    suite_add_tcase(s, tc);
    return test_run_suite(s);
}
