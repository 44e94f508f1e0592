/*
 * check_crash.c — durability under SIGKILL: a child process applies commands
 * to a real store forever and the parent kills it at random moments.
 *
 * The child reports a key on a pipe only after its commit returned TALLY_ok,
 * so everything reported must survive the kill. After every kill the parent
 * reopens the store and checks that:
 *   - the writer lock was released and the store opens;
 *   - ledger_invariants_check finds nothing;
 *   - every reported key has exactly one inbox record with the outcome its
 *     command must have, and the events that record points at carry that
 *     key (and no other event does);
 *   - the keys in the inbox are exactly 1..M with M at most one batch past
 *     the last reported key (nothing appears that the child never sent);
 *   - Σ event_count of the successful records plus the sweep's expiry
 *     events is the log head.
 * The next child starts at the first unreported key, so the command that
 * was in flight at the kill is retried with its key, as a client would: it
 * must come back replayed if and only if its commit had reached the disk.
 *
 * Kills are timed by a random delay (1..TALLY_CRASH_DELAY_MS_MAX ms) after
 * the fork or after the child's first 0..3 reports, so they land in
 * store_open, in applies, in commits and between a commit and its report.
 * Two tests: one command per durable transaction (ledger_apply_one), and
 * group commit (1..16 ledger_apply_in_place per outer transaction, as
 * tallyd's writer does).
 *
 * The command sequence is a pure function of the key number (transfers,
 * holds with posts, voids and timeouts, grants and revokes, atomic chains
 * that succeed and one that fails), so every outcome is known in advance.
 *
 * Environment: TALLY_CRASH_KILLS (kills per test, default 25),
 * TALLY_CRASH_SEED (PRNG seed; printed on stderr so a run's choices can be
 * repeated), TALLY_CRASH_DELAY_MS_MAX (longest delay before a kill,
 * default 30).
 */
#include "common/clock.h"
#include "tests/support/test_support.h"

#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#ifdef __linux__
#include <sys/prctl.h>
#endif

#define CRASH_CONSUMER "crash"
#define CRASH_MAP_BYTES (UINT64_C(256) << 20)
#define CRASH_ACCOUNTS 4
#define CRASH_KILLS_DEFAULT 25
#define CRASH_DELAY_MS_MAX_DEFAULT 30
#define CRASH_SLOTS 16
#define CRASH_BATCH_MAX 16
/* How long the parent waits for a child to open the store and report the
 * keys it waits for before it gives up (a stalled child is a failure). */
#define CRASH_PROGRESS_WAIT_MS 30000
/* A kill is timed from the child's ready message or its first few reports. */
#define CRASH_WAIT_REPORTS_MAX 3

/* Pipe messages, 8 bytes each (atomic on a pipe). */
#define MSG_CONTROL (UINT64_C(1) << 63)
#define MSG_REPLAYED (UINT64_C(1) << 62)
#define MSG_KEY_MASK (MSG_REPLAYED - 1)
#define MSG_READY (MSG_CONTROL | (UINT64_C(1) << 32))
#define MSG_FAULT (MSG_CONTROL | (UINT64_C(2) << 32))
#define MSG_BAD_OUTCOME (MSG_CONTROL | (UINT64_C(3) << 32))

/* ---- the deterministic command sequence ---- */

static int64_t crash_time_ms(uint64_t n) { return TEST_NOW_MS + (int64_t)n * 10; }

static uint32_t crash_slot(uint64_t n) { return (uint32_t)((n - 1) % CRASH_SLOTS); }
static uint64_t crash_group(uint64_t n) { return (n - 1) / CRASH_SLOTS; }

/* Transfer ids: four per key so that chain members have their own. */
static uint64_t tid(uint64_t n, unsigned member) { return n * 4 + member; }

/* Storage for one command: chain members and the strings they borrow. */
typedef struct crash_command {
    ledger_command cmd;
    ledger_command members[3];
    char subject[32];
    char key[32];
} crash_command;

static ledger_command transfer_between(uint64_t id, uint64_t debit, uint64_t credit,
                                       int64_t amount)
{
    return test_cmd_transfer(id, debit, credit, amount);
}

/* Build command n. Slots (n-1) % 16:
 *  0 hold 1->2 (no timeout)       1 post it in full
 *  2 hold 2->3 (timeout 3600 s)   3 void it
 *  4 grant s<g%5>/pro for life    5 revoke it
 *  6 chain: transfer 3->4, transfer 4->1, grant c<n>/pro paid by the first
 *  7 transfer 1->3
 *  8 hold 3->1 (timeout 1 s)      15 posts it in even groups; in odd groups
 *                                    it expires through the sweep
 *  9 transfer 4->2
 * 10 chain: transfer 1->2, transfer 2->999 (no such account): rejected
 * 11 hold 4->3 (no timeout)      12 post 30 of it (partial)
 * 13 grant d<n>/trial for 500 ms (expires through the sweep)
 * 14 transfer 2->4
 * 15 post slot 8's hold (even groups) or transfer 3->2 (odd groups) */
static void crash_command_build(uint64_t n, crash_command *c)
{
    uint32_t slot = crash_slot(n);
    uint64_t group = crash_group(n);
    snprintf(c->key, sizeof(c->key), "k%" PRIu64, n);
    c->subject[0] = '\0';
    switch (slot) {
    case 0: c->cmd = test_cmd_hold(tid(n, 0), 1, 2, 100, 0); break;
    case 1: c->cmd = test_cmd_post(tid(n - 1, 0), 0); break;
    case 2: c->cmd = test_cmd_hold(tid(n, 0), 2, 3, 50, 3600); break;
    case 3: c->cmd = test_cmd_void(tid(n - 1, 0)); break;
    case 4:
    case 5:
        snprintf(c->subject, sizeof(c->subject), "s%" PRIu64, group % 5);
        c->cmd = slot == 4 ? test_cmd_grant(c->subject, "pro", 0)
                           : test_cmd_revoke(c->subject, "pro");
        break;
    case 6:
        snprintf(c->subject, sizeof(c->subject), "c%" PRIu64, n);
        c->members[0] = transfer_between(tid(n, 0), 3, 4, 7);
        c->members[1] = transfer_between(tid(n, 1), 4, 1, 7);
        c->members[2] = test_cmd_grant(c->subject, "pro", 0);
        c->members[2].u.entitlement.duration_ms = INT64_C(3600000);
        c->members[2].u.entitlement.has_grant_transfer = true;
        c->members[2].u.entitlement.grant_transfer_id = test_id(tid(n, 0));
        c->cmd = (ledger_command){.kind = LEDGER_CHAIN};
        c->cmd.u.chain = (ledger_chain){.members = c->members, .count = 3};
        break;
    case 7: c->cmd = transfer_between(tid(n, 0), 1, 3, 11); break;
    case 8: c->cmd = test_cmd_hold(tid(n, 0), 3, 1, 20, 1); break;
    case 9: c->cmd = transfer_between(tid(n, 0), 4, 2, 13); break;
    case 10:
        c->members[0] = transfer_between(tid(n, 0), 1, 2, 5);
        c->members[1] = transfer_between(tid(n, 1), 2, 999, 5);
        c->cmd = (ledger_command){.kind = LEDGER_CHAIN};
        c->cmd.u.chain = (ledger_chain){.members = c->members, .count = 2};
        break;
    case 11: c->cmd = test_cmd_hold(tid(n, 0), 4, 3, 40, 0); break;
    case 12: c->cmd = test_cmd_post(tid(n - 1, 0), 30); break;
    case 13:
        snprintf(c->subject, sizeof(c->subject), "d%" PRIu64, n);
        c->cmd = test_cmd_grant(c->subject, "trial", 0);
        c->cmd.u.entitlement.duration_ms = 500;
        break;
    case 14: c->cmd = transfer_between(tid(n, 0), 2, 4, 17); break;
    default:
        c->cmd = group % 2 == 0 ? test_cmd_post(tid(n - 7, 0), 0)
                                : transfer_between(tid(n, 0), 3, 2, 19);
        break;
    }
}

/* The outcome command n must have: its code and the events it causes. */
static int crash_expected_code(uint64_t n)
{
    return crash_slot(n) == 10 ? TALLY_credit_account_not_found : TALLY_ok;
}

static uint32_t crash_expected_events(uint64_t n)
{
    switch (crash_slot(n)) {
    case 6: return 3;
    case 10: return 0;
    default: return 1;
    }
}

static ledger_request crash_request(const crash_command *c)
{
    return (ledger_request){.consumer = tally_str_from(CRASH_CONSUMER),
                            .key = tally_str_from(c->key),
                            .command = c->cmd};
}

/* Is out what command n must produce? (checked in the child, reported) */
static bool crash_outcome_ok(uint64_t n, const ledger_outcome *out)
{
    if (out->code != crash_expected_code(n) || !out->stored ||
        out->event_count != crash_expected_events(n))
        return false;
    if (crash_slot(n) == 10)
        return out->chain_count == 2 && out->failed_index == 1 &&
               out->chain_codes[0] == TALLY_linked_operation_failed &&
               out->chain_codes[1] == TALLY_credit_account_not_found;
    return true;
}

/* ---- the child ---- */

static void write_all(int fd, const void *buf, size_t len)
{
    const char *p = buf;
    while (len > 0) {
        ssize_t w = write(fd, p, len);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            _exit(5);
        p += w;
        len -= (size_t)w;
    }
}

static void send_msg(int fd, uint64_t msg) { write_all(fd, &msg, sizeof(msg)); }

/* Apply keys start, start+1, ... forever in batches of 1..batch_max commands
 * (batch_max 1: ledger_apply_one; otherwise one outer txn per batch, as the
 * group-commit writer does). Reports keys after their commit returned ok.
 * Never returns. */
static void crash_child(const char *dir, uint64_t start, uint32_t batch_max, uint64_t seed,
                        int fd)
{
#ifdef __linux__
    prctl(PR_SET_PDEATHSIG, SIGKILL); /* never outlive a failed test */
#endif
    store *st;
    store_options opt = {.path = dir, .map_size_bytes = CRASH_MAP_BYTES};
    int rc = store_open(&opt, &st);
    if (rc != TALLY_ok) {
        send_msg(fd, MSG_FAULT | (uint64_t)rc);
        _exit(3);
    }
    send_msg(fd, MSG_READY);
    uint64_t rng = seed;
    for (uint64_t n = start;;) {
        uint32_t size = batch_max == 1 ? 1 : 1 + (uint32_t)test_rng_below(&rng, batch_max);
        uint64_t msgs[CRASH_BATCH_MAX];
        if (batch_max == 1) {
            crash_command c;
            crash_command_build(n, &c);
            ledger_request req = crash_request(&c);
            ledger_outcome out;
            rc = ledger_apply_one(st, &req, crash_time_ms(n), &out);
            if (rc != TALLY_ok) {
                send_msg(fd, MSG_FAULT | (uint64_t)rc);
                _exit(4);
            }
            if (!crash_outcome_ok(n, &out)) {
                send_msg(fd, MSG_BAD_OUTCOME | (uint64_t)out.code);
                _exit(6);
            }
            msgs[0] = n | (out.replayed ? MSG_REPLAYED : 0);
        } else {
            store_txn txn;
            rc = store_txn_begin(st, NULL, false, &txn);
            if (rc == TALLY_ok)
                rc = ledger_sweep(&txn, crash_time_ms(n), 0, NULL, NULL);
            for (uint32_t i = 0; i < size && rc == TALLY_ok; i++) {
                crash_command c;
                crash_command_build(n + i, &c);
                ledger_request req = crash_request(&c);
                ledger_outcome out;
                rc = ledger_apply_in_place(&txn, &req, crash_time_ms(n + i), &out);
                if (rc == TALLY_ok && !crash_outcome_ok(n + i, &out)) {
                    send_msg(fd, MSG_BAD_OUTCOME | (uint64_t)out.code);
                    _exit(6);
                }
                msgs[i] = (n + i) | (out.replayed ? MSG_REPLAYED : 0);
            }
            if (rc == TALLY_ok)
                rc = store_txn_commit(&txn);
            else
                store_txn_abort(&txn);
            if (rc != TALLY_ok) {
                send_msg(fd, MSG_FAULT | (uint64_t)rc);
                _exit(4);
            }
        }
        /* One write of at most 128 bytes: atomic on a pipe (PIPE_BUF). */
        write_all(fd, msgs, size * sizeof(uint64_t));
        n += size;
    }
}

/* ---- the parent ---- */

typedef struct crash_run {
    char dir[256];
    uint32_t batch_max;
    uint64_t rng;
    uint64_t next_key;      /* first key the next child sends */
    uint64_t committed_max; /* highest key in the inbox after the last check */
    uint64_t reported_max;  /* highest key reported, over all rounds */
    /* statistics */
    uint64_t replays;
    uint32_t kills_before_ready;
    uint32_t kills_with_unreported;
} crash_run;

/* What one child said before it died. */
typedef struct child_report {
    bool ready;
    uint64_t fault;          /* 0 or the control message */
    uint64_t keys;           /* keys reported */
    uint64_t last_key;
    bool out_of_order;       /* a key that does not follow the previous one */
    bool bad_replay;         /* replayed flag contradicts the store */
    uint64_t bad_key;
} child_report;

static void take_msg(crash_run *run, child_report *rep, uint64_t msg)
{
    if (msg == MSG_READY) {
        rep->ready = true;
        return;
    }
    if (msg & MSG_CONTROL) {
        rep->fault = msg;
        return;
    }
    uint64_t key = msg & MSG_KEY_MASK;
    bool replayed = (msg & MSG_REPLAYED) != 0;
    uint64_t expect = rep->keys == 0 ? run->next_key : rep->last_key + 1;
    if (key != expect && !rep->out_of_order) {
        rep->out_of_order = true;
        rep->bad_key = key;
    }
    /* Keys up to committed_max were on disk before this child started. */
    if (replayed != (key <= run->committed_max) && !rep->bad_replay) {
        rep->bad_replay = true;
        rep->bad_key = key;
    }
    run->replays += replayed;
    rep->keys++;
    rep->last_key = key;
}

/* Read whatever is in the pipe; false at end of file. */
static bool read_msgs(crash_run *run, child_report *rep, int fd, uint8_t *partial,
                      size_t *partial_len)
{
    uint8_t buf[4096];
    memcpy(buf, partial, *partial_len);
    ssize_t r;
    do
        r = read(fd, buf + *partial_len, sizeof(buf) - *partial_len);
    while (r < 0 && errno == EINTR);
    ck_assert_msg(r >= 0, "read from child pipe: %s", strerror(errno));
    if (r == 0)
        return false;
    size_t have = *partial_len + (size_t)r, off = 0;
    for (; off + 8 <= have; off += 8) {
        uint64_t msg;
        memcpy(&msg, buf + off, 8);
        take_msg(run, rep, msg);
    }
    memcpy(partial, buf + off, have - off);
    *partial_len = have - off;
    return true;
}

/* Fork a child, let it run, SIGKILL it, reap it and collect everything it
 * reported. The moment of the kill: one round in five a random delay after
 * the fork (it may hit store_open); otherwise a random delay after the
 * child reported 0..3 keys, so that kills land inside later commits however
 * slow a commit is on this machine (ASan, a busy disk). */
static void crash_round(crash_run *run, uint32_t round, uint64_t delay_ms_max,
                        child_report *rep)
{
    memset(rep, 0, sizeof(*rep));
    int64_t delay_ms = 1 + (int64_t)test_rng_below(&run->rng, delay_ms_max);
    bool from_fork = test_rng_below(&run->rng, 5) == 0;
    uint64_t wait_keys = test_rng_below(&run->rng, CRASH_WAIT_REPORTS_MAX + 1);
    uint64_t child_seed = test_rng_next(&run->rng);
    int fds[2];
    ck_assert_int_eq(pipe(fds), 0);
    fflush(NULL);
    pid_t pid = fork();
    ck_assert_msg(pid >= 0, "fork: %s", strerror(errno));
    if (pid == 0) {
        close(fds[0]);
        crash_child(run->dir, run->next_key, run->batch_max, child_seed, fds[1]);
        _exit(7);
    }
    close(fds[1]);
    uint8_t partial[8];
    size_t partial_len = 0;
    int64_t start = clock_mono_ms();
    int64_t deadline = from_fork ? start + delay_ms : start + CRASH_PROGRESS_WAIT_MS;
    bool timed = from_fork, open = true, stalled = false;
    for (;;) {
        int64_t now = clock_mono_ms();
        if (now >= deadline) {
            stalled = !timed;
            break;
        }
        struct pollfd pfd = {.fd = fds[0], .events = POLLIN};
        int prc = poll(&pfd, 1, (int)(deadline - now));
        if (prc < 0 && errno == EINTR)
            continue;
        ck_assert_msg(prc >= 0, "poll: %s", strerror(errno));
        if (prc > 0 && !read_msgs(run, rep, fds[0], partial, &partial_len)) {
            open = false; /* the child exited by itself: a fault */
            break;
        }
        if (rep->ready && rep->keys >= wait_keys && !timed) {
            timed = true;
            deadline = clock_mono_ms() + delay_ms;
        }
        if (rep->fault)
            break;
    }
    kill(pid, SIGKILL);
    int status;
    pid_t w;
    do
        w = waitpid(pid, &status, 0);
    while (w < 0 && errno == EINTR);
    ck_assert_int_eq(w, pid);
    while (open && read_msgs(run, rep, fds[0], partial, &partial_len))
        ;
    close(fds[0]);
    ck_assert_msg(partial_len == 0, "round %u: torn message on the pipe", round);
    ck_assert_msg(rep->fault == 0, "round %u: child failed: %s %s", round,
                  (rep->fault & ~MSG_CONTROL) >> 32 == 2 ? "fault" : "unexpected outcome",
                  tally_strerror((int)(rep->fault & 0xffffffffu)));
    ck_assert_msg(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL,
                  "round %u: child ended by itself (status 0x%x)", round, status);
    ck_assert_msg(!stalled, "round %u: child %s within %d ms", round,
                  rep->ready ? "reported too few keys" : "did not open the store",
                  CRASH_PROGRESS_WAIT_MS);
    ck_assert_msg(!rep->out_of_order, "round %u: key %" PRIu64 " reported out of order",
                  round, rep->bad_key);
    ck_assert_msg(!rep->bad_replay,
                  "round %u: key %" PRIu64 " replayed flag wrong (committed up to %" PRIu64 ")",
                  round, rep->bad_key, run->committed_max);
    if (!rep->ready)
        run->kills_before_ready++;
}

/* ---- verification of the reopened store ---- */

typedef struct log_tally {
    uint32_t *events_by_key; /* index: key number */
    uint64_t keys_cap;
    uint64_t caused;
    uint64_t swept;
    uint64_t total;
    uint64_t bad;            /* events that break an expectation */
    char problem[256];
} log_tally;

static bool parse_key(tally_str key, uint64_t *n)
{
    if (key.len < 2 || key.len > 20 || key.ptr[0] != 'k')
        return false;
    uint64_t v = 0;
    for (size_t i = 1; i < key.len; i++) {
        if (key.ptr[i] < '0' || key.ptr[i] > '9')
            return false;
        v = v * 10 + (uint64_t)(key.ptr[i] - '0');
    }
    *n = v;
    return v > 0;
}

static void tally_problem(log_tally *lt, const char *what, uint64_t seq)
{
    if (lt->bad++ == 0)
        snprintf(lt->problem, sizeof(lt->problem), "seq %" PRIu64 ": %s", seq, what);
}

static int tally_event(uint64_t seq, const void *bytes, size_t len, void *ctx)
{
    log_tally *lt = ctx;
    msgpack_unpacked up;
    msgpack_unpacked_init(&up);
    log_event ev;
    lt->total++;
    if (log_event_decode(bytes, len, &up, &ev) != TALLY_ok) {
        tally_problem(lt, "does not decode", seq);
    } else if (!ev.has_causation) {
        lt->swept++;
        if (!tally_str_equal(ev.type, tally_str_from("transfer.expired")) &&
            !tally_str_equal(ev.type, tally_str_from("entitlement.expired")))
            tally_problem(lt, "event without causation is not an expiry", seq);
    } else {
        uint64_t n;
        if (tally_str_equal(ev.consumer, tally_str_from("setup"))) {
            lt->caused++;
        } else if (!tally_str_equal(ev.consumer, tally_str_from(CRASH_CONSUMER)) ||
                   !parse_key(ev.key, &n) || n >= lt->keys_cap) {
            tally_problem(lt, "caused by an unknown key", seq);
        } else {
            lt->caused++;
            lt->events_by_key[n]++;
        }
    }
    msgpack_unpacked_destroy(&up);
    return 0;
}

static void print_finding(const char *check, const char *entity, const char *detail, void *ctx)
{
    (void)ctx;
    fprintf(stderr, "invariant %s: %s: %s\n", check, entity, detail);
}

/* Count the inbox records of the crash consumer and find the highest key. */
static void scan_inbox(store_txn *t, uint64_t *records, uint64_t *max_key)
{
    MDB_cursor *cur;
    ck_assert_int_eq(store_cursor_open(t, STORE_DB_INBOX, &cur), TALLY_ok);
    MDB_val k, v;
    *records = 0;
    *max_key = 0;
    for (int mrc = mdb_cursor_get(cur, &k, &v, MDB_FIRST); mrc == MDB_SUCCESS;
         mrc = mdb_cursor_get(cur, &k, &v, MDB_NEXT)) {
        ledger_inbox_record rec;
        ck_assert_int_eq(ledger_inbox_decode(k.mv_data, k.mv_size, v.mv_data, v.mv_size, &rec),
                         TALLY_ok);
        if (tally_str_equal(rec.consumer, tally_str_from("setup")))
            continue;
        uint64_t n;
        ck_assert_msg(tally_str_equal(rec.consumer, tally_str_from(CRASH_CONSUMER)) &&
                          parse_key(rec.key, &n),
                      "inbox holds a record the test never sent");
        (*records)++;
        if (n > *max_key)
            *max_key = n;
    }
    mdb_cursor_close(cur);
}

/* Check the record of key n against the command and the log. */
static void check_key(store_txn *t, const log_tally *lt, uint64_t n)
{
    char key[32];
    snprintf(key, sizeof(key), "k%" PRIu64, n);
    ledger_inbox_record rec;
    int rc = ledger_inbox_get(t, tally_str_from(CRASH_CONSUMER), tally_str_from(key), &rec);
    ck_assert_msg(rc == TALLY_ok, "key %s: inbox record %s", key, tally_strerror(rc));
    const ledger_outcome *o = &rec.outcome;
    ck_assert_msg(o->code == crash_expected_code(n), "key %s: code %s, expected %s", key,
                  tally_strerror(o->code), tally_strerror(crash_expected_code(n)));
    ck_assert_msg(o->event_count == crash_expected_events(n),
                  "key %s: %" PRIu32 " events, expected %" PRIu32, key, o->event_count,
                  crash_expected_events(n));
    ck_assert_msg(o->time_ms == crash_time_ms(n), "key %s: time %" PRId64, key, o->time_ms);
    /* Exactly once: the log holds as many events of this key as the record
     * says, and they are the ones the record points at. */
    ck_assert_msg(lt->events_by_key[n] == o->event_count,
                  "key %s: %" PRIu32 " events carry it, record says %" PRIu32, key,
                  lt->events_by_key[n], o->event_count);
    crash_command c;
    crash_command_build(n, &c);
    uint8_t fp[LEDGER_FINGERPRINT_BYTES];
    ledger_command_fingerprint(&c.cmd, fp);
    ck_assert_msg(rec.fingerprint_len == LEDGER_FINGERPRINT_STORED_BYTES &&
                      memcmp(fp, rec.fingerprint, rec.fingerprint_len) == 0,
                  "key %s: fingerprint", key);
    for (uint32_t i = 0; i < o->event_count; i++) {
        msgpack_unpacked up;
        msgpack_unpacked_init(&up);
        log_event ev;
        ck_assert_int_eq(log_event_load(t, o->first_seq + i, &up, &ev), TALLY_ok);
        bool ours = ev.has_causation && tally_str_equal(ev.key, tally_str_from(key)) &&
                    tally_str_equal(ev.consumer, tally_str_from(CRASH_CONSUMER)) &&
                    ev.time_ms == o->time_ms;
        msgpack_unpacked_destroy(&up);
        ck_assert_msg(ours, "key %s: event %" PRIu64 " is not its own", key, o->first_seq + i);
    }
}

/* Reopen the store after a kill and check everything the header promises. */
static void crash_verify(crash_run *run, uint32_t round, const child_report *rep)
{
    store *st;
    store_options opt = {.path = run->dir, .map_size_bytes = CRASH_MAP_BYTES};
    int rc = store_open(&opt, &st);
    ck_assert_msg(rc == TALLY_ok, "round %u: reopen after kill: %s", round, tally_strerror(rc));
    store_txn t;
    ck_assert_int_eq(store_txn_begin(st, NULL, true, &t), TALLY_ok);

    ledger_invariant_stats stats;
    rc = ledger_invariants_check(&t, print_finding, NULL, &stats);
    ck_assert_msg(rc == TALLY_ok, "round %u: invariants could not run: %s", round,
                  tally_strerror(rc));
    ck_assert_msg(stats.findings == 0, "round %u: %" PRIu64 " invariant findings (stderr)",
                  round, stats.findings);

    if (rep->keys > 0)
        run->reported_max = rep->last_key;
    uint64_t records, max_key;
    scan_inbox(&t, &records, &max_key);
    /* Keys 1..M, contiguous, M covering every reported key and at most one
     * batch (the one in flight) beyond it. */
    ck_assert_msg(max_key >= run->reported_max,
                  "round %u: reported key %" PRIu64 " lost (inbox ends at %" PRIu64 ")", round,
                  run->reported_max, max_key);
    ck_assert_msg(max_key <= run->reported_max + run->batch_max,
                  "round %u: key %" PRIu64 " is past the batch in flight", round, max_key);
    ck_assert_msg(records == max_key, "round %u: %" PRIu64 " records for keys 1..%" PRIu64,
                  round, records, max_key);
    if (max_key > run->reported_max)
        run->kills_with_unreported++;

    log_tally lt = {.keys_cap = max_key + 1};
    lt.events_by_key = calloc(lt.keys_cap, sizeof(uint32_t));
    ck_assert_ptr_nonnull(lt.events_by_key);
    ck_assert_int_eq(log_read(&t, 1, UINT64_MAX, tally_event, &lt), TALLY_ok);
    ck_assert_msg(lt.bad == 0, "round %u: %" PRIu64 " bad events, first: %s", round, lt.bad,
                  lt.problem);
    uint64_t expected_caused = CRASH_ACCOUNTS; /* the setup's account.opened */
    for (uint64_t n = 1; n <= max_key; n++) {
        check_key(&t, &lt, n);
        expected_caused += crash_expected_events(n);
    }
    log_head head;
    ck_assert_int_eq(log_head_get(&t, &head), TALLY_ok);
    ck_assert_msg(lt.caused == expected_caused,
                  "round %u: %" PRIu64 " caused events, records account for %" PRIu64, round,
                  lt.caused, expected_caused);
    ck_assert_msg(head.seq == lt.total && lt.total == lt.caused + lt.swept,
                  "round %u: head %" PRIu64 ", %" PRIu64 " events", round, head.seq, lt.total);
    free(lt.events_by_key);

    for (uint64_t id = 1; id <= CRASH_ACCOUNTS; id++) {
        ledger_account a;
        ck_assert_int_eq(ledger_account_get(&t, id, &a), TALLY_ok);
    }
    store_txn_abort(&t);
    store_close(st); /* before the next fork */
    run->committed_max = max_key;
    run->next_key = run->reported_max + 1;
}

static void crash_setup(crash_run *run)
{
    test_store ts;
    test_store_open_sized(&ts, CRASH_MAP_BYTES);
    for (uint64_t id = 1; id <= CRASH_ACCOUNTS; id++) {
        ledger_command open = test_cmd_open(id, 1, 0);
        char key[16];
        snprintf(key, sizeof(key), "open-%" PRIu64, id);
        ck_assert_int_eq(test_apply(&ts, "setup", key, &open).code, TALLY_ok);
    }
    test_assert_invariants(&ts);
    snprintf(run->dir, sizeof(run->dir), "%s", ts.dir);
    store_close(ts.st); /* the children open it; the directory stays */
}

static void crash_test(uint32_t batch_max, const char *name)
{
    uint64_t kills = test_env_u64("TALLY_CRASH_KILLS", CRASH_KILLS_DEFAULT);
    uint64_t delay_max = test_env_u64("TALLY_CRASH_DELAY_MS_MAX", CRASH_DELAY_MS_MAX_DEFAULT);
    const char *seed_env = getenv("TALLY_CRASH_SEED");
    uint64_t seed = seed_env && *seed_env
                        ? test_env_u64("TALLY_CRASH_SEED", 0)
                        : (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 32) ^
                              (uint64_t)clock_mono_ms();
    ck_assert_msg(kills >= 1 && delay_max >= 1, "TALLY_CRASH_KILLS/DELAY must be >= 1");
    fprintf(stderr, "%s: TALLY_CRASH_SEED=%" PRIu64 " TALLY_CRASH_KILLS=%" PRIu64 "\n", name,
            seed, kills);

    crash_run run = {.batch_max = batch_max, .rng = seed, .next_key = 1};
    crash_setup(&run);
    for (uint32_t round = 1; round <= kills; round++) {
        child_report rep;
        crash_round(&run, round, delay_max, &rep);
        crash_verify(&run, round, &rep);
    }
    fprintf(stderr,
            "%s: %" PRIu64 " kills, %" PRIu64 " keys committed, %" PRIu64
            " replayed after a kill, %u kills before the store was open, %u with a "
            "committed but unreported key\n",
            name, kills, run.committed_max, run.replays, run.kills_before_ready,
            run.kills_with_unreported);
    /* The kills must have landed on a working writer, not only on opens. */
    ck_assert_msg(run.reported_max > 0, "no command was ever committed");

    /* A last writer in this process continues where the children stopped. */
    test_store ts = {.now_ms = crash_time_ms(run.next_key), .map_size_bytes = CRASH_MAP_BYTES};
    snprintf(ts.dir, sizeof(ts.dir), "%s", run.dir);
    store_options opt = {.path = ts.dir, .map_size_bytes = CRASH_MAP_BYTES};
    ck_assert_int_eq(store_open(&opt, &ts.st), TALLY_ok);
    for (uint64_t n = run.next_key; n < run.next_key + CRASH_SLOTS; n++) {
        crash_command c;
        crash_command_build(n, &c);
        ledger_request req = crash_request(&c);
        ledger_outcome out;
        ck_assert_int_eq(ledger_apply_one(ts.st, &req, crash_time_ms(n), &out), TALLY_ok);
        ck_assert_msg(crash_outcome_ok(n, &out), "key %" PRIu64 " after the kills: %s", n,
                      tally_strerror(out.code));
        ck_assert(out.replayed == (n <= run.committed_max));
    }
    test_assert_invariants(&ts);
    test_store_close(&ts);
}

START_TEST(test_crash_apply_one)
{
    /* One command per durable transaction (ledger_apply_one). */
    crash_test(1, "crash_apply_one");
}
END_TEST

START_TEST(test_crash_group_commit)
{
    /* Batches of 1..16 commands per outer transaction; a kill loses or keeps
     * a whole batch, and the retry may cut batches differently. */
    crash_test(CRASH_BATCH_MAX, "crash_group_commit");
}
END_TEST

int main(void)
{
    Suite *s = suite_create("crash");
    TCase *tc = tcase_create("kill");
    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, test_crash_apply_one);
    tcase_add_test(tc, test_crash_group_commit);
    suite_add_tcase(s, tc);
    return test_run_suite(s);
}
