/*
 * check_subscriber.c — tests of libtally's durable subscribers
 * (clients/libtally/subscriber.c) against a real tallyd on ipc:// in a temp
 * dir.
 *
 * Crash and restart use real processes: this program re-executes itself
 * (/proc/self/exe --child ...) as the subscriber, so the child starts with
 * a clean NNG; its handler reports every event it finishes on a pipe before
 * answering done, and the test SIGKILLs it. Afterwards every seq must have
 * been handled, and a seq handled twice must lie in the window that was
 * delivered but not yet acknowledged when the child died. Also: a poison
 * event is parked after max_deliver deliveries while later events flow,
 * replayed from the dead-letter queue, parked by the handler and discarded;
 * two subscribers move independently; the metrics (sub_get, sub_list,
 * stats) say what the test did; stop, options and bad arguments.
 */
#include "clients/libtally/tally.h"
#include "common/clock.h"

#include "tests/support/client_support.h"
#include "tests/support/run.h"
#include "tests/support/tallyd_harness.h"
#include "tests/support/test_support.h"
#include "tests/support/wait.h"

#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define TEST_TIMEOUT_S 300
#define LINE_WAIT_MS 60000 /* a child's next report, on a loaded machine */
#define RUN_ACKED_WAIT_MS 60000 /* a run's acknowledgements, on a loaded machine */
#define RECORD_MAX 4096
#define CRASH_EVENTS 400
#define CRASH_FETCH_MAX 50
#define CRASH_BLOCK_AT 75 /* the first child stops inside its second batch */

/* ---- fixture ---- */

static tally_subscriber *sub_open(tally_client *c, const char *name,
                                  const tally_subscriber_options *o)
{
    tally_subscriber *s = NULL;
    int rc = tally_subscriber_open(c, name, o, &s);
    ck_assert_msg(rc == TALLY_ok, "open %s: %s", name, tally_strerror(rc));
    return s;
}

static tally_subscriber_info info_of(tally_client *c, const char *name)
{
    tally_subscriber_info i;
    int rc = tally_subscriber_get(c, name, &i);
    ck_assert_msg(rc == TALLY_ok, "sub_get %s: %s", name, tally_strerror(rc));
    return i;
}

/* ---- a handler that records what it was handed ---- */

typedef struct seen {
    uint64_t seq;
    uint32_t attempt;
    bool replay;
    tally_uuid id;
} seen;

typedef struct recorder {
    tally_subscriber *sub;
    seen items[RECORD_MAX];
    size_t count;
    uint64_t poison;    /* answer retry for this seq (0: none) */
    uint64_t park;      /* answer park for this seq (0: none) */
    uint64_t stop_at;   /* stop the run once this seq was handed out (0: never) */
} recorder;

static tally_verdict record(const tally_delivery *d, tally_answer *answer, void *arg)
{
    recorder *r = arg;
    ck_assert_uint_lt(r->count, RECORD_MAX);
    r->items[r->count++] = (seen){d->event.seq, d->attempt, d->replay, d->event.id};
    if (d->event.seq == r->stop_at)
        tally_subscriber_stop(r->sub);
    if (d->event.seq == r->poison) {
        snprintf(answer->error, sizeof(answer->error), "boom %u", d->attempt);
        return TALLY_RETRY;
    }
    if (d->event.seq == r->park) {
        snprintf(answer->error, sizeof(answer->error), "cannot apply");
        return TALLY_PARK;
    }
    return TALLY_DONE;
}

/* Run s with r until r->stop_at is handed out, max_events were, or (both
 * 0) a fetch brings nothing. */
static void run_as(tally_subscriber *s, const char *instance, recorder *r, uint64_t stop_at,
                   uint64_t max_events)
{
    r->sub = s;
    r->stop_at = stop_at;
    tally_run_options o = {.max_events = max_events, .wait_ms = 2000, .fetch_max = 20,
                           .until_idle = stop_at == 0 && max_events == 0, .instance = instance};
    int rc = tally_subscriber_run(s, &o, record, r);
    ck_assert_msg(rc == TALLY_ok, "run: %s", tally_strerror(rc));
}

static void run_until(tally_subscriber *s, recorder *r, uint64_t stop_at, uint64_t max_events)
{
    run_as(s, NULL, r, stop_at, max_events);
}

/* ---- the child: this program run as a subscriber process ---- */

typedef struct child_ctx {
    int fd;
    uint64_t block_at;
    useconds_t pause_us;
    const char *hold_path; /* "-": none; else the first event waits for this file */
    bool held;
} child_ctx;

/* Report "seq attempt" on the pipe (the event is "applied"), then done. At
 * block_at the handler never returns: the parent kills it there. With a
 * hold path, the first event's handler waits until that file exists. */
static tally_verdict child_handle(const tally_delivery *d, tally_answer *answer, void *arg)
{
    (void)answer;
    child_ctx *ctx = arg;
    char line[64];
    int n = snprintf(line, sizeof(line), "%" PRIu64 " %u\n", d->event.seq, d->attempt);
    if (write(ctx->fd, line, (size_t)n) != n)
        _exit(4);
    while (d->event.seq == ctx->block_at)
        pause();
    while (strcmp(ctx->hold_path, "-") != 0 && !ctx->held && access(ctx->hold_path, F_OK) != 0)
        test_pause_ms(2); /* polls for the parent's file; the parent kills a child that hangs */
    ctx->held = true;
    if (ctx->pause_us)
        test_pause_us(ctx->pause_us); /* a handler slow on purpose: the test's input */
    return TALLY_DONE;
}

/* --child URL NAME FD BLOCK_AT PAUSE_US INSTANCE FETCH_MAX HOLD_PATH
 * (INSTANCE "-": the handle's generated one). */
static int child_main(char **argv)
{
    child_ctx ctx = {.fd = atoi(argv[4]),
                     .block_at = strtoull(argv[5], NULL, 10),
                     .pause_us = (useconds_t)atoi(argv[6]),
                     .hold_path = argv[9]};
    tally_client_options co = {.url = argv[2], .consumer = "child", .timeout_ms = 10000};
    tally_client *c = NULL;
    tally_subscriber *s = NULL;
    if (tally_client_open(&co, &c) != TALLY_ok || tally_subscriber_open(c, argv[3], NULL, &s))
        return 2;
    tally_run_options o = {.fetch_max = (uint32_t)atoi(argv[8]), .wait_ms = 1000,
                           .instance = strcmp(argv[7], "-") == 0 ? NULL : argv[7]};
    int rc = tally_subscriber_run(s, &o, child_handle, &ctx);
    fprintf(stderr, "child: run ended: %s\n", tally_strerror(rc));
    return 3;
}

typedef struct child {
    pid_t pid;
    int fd; /* read end of its reports */
    char buf[4096];
    size_t len;
} child;

/* How a child runs besides its name: its instance id (NULL: generated),
 * fetch size, the seq it blocks at for good (0: none), a pause per event,
 * and a file its first event waits for (NULL: none). */
typedef struct child_plan {
    const char *instance;
    unsigned fetch_max;
    uint64_t block_at;
    unsigned pause_us;
    const char *hold_path;
} child_plan;

static void child_start_plan(child *ch, const char *url, const char *name, const child_plan *p)
{
    int fds[2];
    ck_assert_int_eq(pipe2(fds, O_CLOEXEC), 0);
    ck_assert_int_eq(fcntl(fds[1], F_SETFD, 0), 0); /* the child writes its reports here */
    char fd_text[16], block[24], pause_text[16], fetch_text[16];
    snprintf(fd_text, sizeof(fd_text), "%d", fds[1]);
    snprintf(block, sizeof(block), "%" PRIu64, p->block_at);
    snprintf(pause_text, sizeof(pause_text), "%u", p->pause_us);
    snprintf(fetch_text, sizeof(fetch_text), "%u", p->fetch_max);
    const char *argv[] = {"/proc/self/exe", "--child", url, name, fd_text, block, pause_text,
                          p->instance ? p->instance : "-", fetch_text,
                          p->hold_path ? p->hold_path : "-", NULL};
    pid_t pid = test_spawn(argv, NULL, -1, -1);
    close(fds[1]);
    memset(ch, 0, sizeof(*ch));
    ch->pid = pid;
    ch->fd = fds[0];
}

/* The crash test's children: one stable instance id, so a restarted child
 * gets the killed one's unacked window back at once. */
static void child_start(child *ch, const char *url, const char *name, uint64_t block_at,
                        unsigned pause_us)
{
    child_plan p = {"crashy-1", CRASH_FETCH_MAX, block_at, pause_us, NULL};
    child_start_plan(ch, url, name, &p);
}

/* The next "seq attempt" report of the child; fails after LINE_WAIT_MS or
 * when the child dies. */
static void child_next(child *ch, uint64_t *seq, uint32_t *attempt)
{
    int64_t deadline = test_deadline_ms(LINE_WAIT_MS);
    for (;;) {
        char *nl = memchr(ch->buf, '\n', ch->len);
        if (nl) {
            *nl = '\0';
            ck_assert_int_eq(sscanf(ch->buf, "%" SCNu64 " %u", seq, attempt), 2);
            size_t used = (size_t)(nl - ch->buf) + 1;
            memmove(ch->buf, nl + 1, ch->len - used);
            ch->len -= used;
            return;
        }
        int left = (int)(deadline - clock_mono_ms());
        ck_assert_msg(left > 0, "the subscriber child reported nothing for %d ms", LINE_WAIT_MS);
        struct pollfd p = {.fd = ch->fd, .events = POLLIN};
        if (poll(&p, 1, left) <= 0)
            continue;
        ssize_t n = read(ch->fd, ch->buf + ch->len, sizeof(ch->buf) - ch->len);
        ck_assert_msg(n > 0, "the subscriber child died");
        ch->len += (size_t)n;
    }
}

static void child_kill(child *ch)
{
    kill(ch->pid, SIGKILL);
    int status;
    ck_assert_int_eq(waitpid(ch->pid, &status, 0), ch->pid);
    ck_assert(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
    close(ch->fd);
}

/* ---- crash and restart ---- */

typedef struct window {
    uint64_t floor, delivered; /* (floor, delivered]: unacknowledged at a kill */
} window;

/* Read reports of ch until it handled `until` events (or reports seq
 * stop_seq), counting each seq in handled[]. */
static void child_collect(child *ch, uint32_t *handled, uint64_t stop_seq, uint64_t until)
{
    for (uint64_t n = 0; n < until;) {
        uint64_t seq;
        uint32_t attempt;
        child_next(ch, &seq, &attempt);
        ck_assert_uint_ge(seq, 1);
        ck_assert_uint_le(seq, CRASH_EVENTS);
        handled[seq]++;
        n++;
        if (seq == stop_seq)
            return;
    }
}

START_TEST(test_killed_subscriber_resumes_from_the_ack_floor)
{
    test_client_fixture f;
    test_client_up(&f);
    test_client_open_accounts(f.c, 1, CRASH_EVENTS);
    tally_subscriber *s = sub_open(f.c, "crashy", NULL);
    tally_subscriber_close(s);
    static uint32_t handled[CRASH_EVENTS + 1];
    memset(handled, 0, sizeof(handled));
    window w[2];

    /* Child 1 finishes 1..75 and stops inside its second batch (51..100):
     * acknowledged up to 50, 51..75 handled and not acknowledged. */
    child ch;
    child_start(&ch, f.srv.url, "crashy", CRASH_BLOCK_AT, 0);
    child_collect(&ch, handled, CRASH_BLOCK_AT, CRASH_EVENTS);
    child_kill(&ch);
    tally_subscriber_info i = info_of(f.c, "crashy");
    w[0] = (window){i.ack_floor, i.delivered_seq};
    ck_assert_uint_eq(i.ack_floor, CRASH_FETCH_MAX);
    ck_assert_uint_eq(i.delivered_seq, 2 * CRASH_FETCH_MAX);
    ck_assert_uint_eq(i.in_flight, CRASH_FETCH_MAX);

    /* Child 2 gets that window back first (restart), then goes on; it is
     * killed at whatever point it reached after 120 more events. */
    child_start(&ch, f.srv.url, "crashy", 0, 1000);
    uint64_t seq;
    uint32_t attempt;
    for (uint64_t k = w[0].floor + 1; k <= w[0].delivered; k++) {
        child_next(&ch, &seq, &attempt);
        ck_assert_uint_eq(seq, k); /* the unacked window, in order, again */
        ck_assert_uint_eq(attempt, 2);
        handled[seq]++;
    }
    child_collect(&ch, handled, 0, 120);
    child_kill(&ch);
    i = info_of(f.c, "crashy");
    w[1] = (window){i.ack_floor, i.delivered_seq};
    ck_assert_uint_ge(w[1].floor, w[0].delivered);
    ck_assert_uint_le(w[1].delivered - w[1].floor, CRASH_FETCH_MAX);

    /* This process, as the same instance, finishes the log. */
    s = sub_open(f.c, "crashy", NULL);
    recorder *r = calloc(1, sizeof(*r));
    run_as(s, "crashy-1", r, CRASH_EVENTS, 0);
    ck_assert_str_eq(tally_subscriber_instance(s), "crashy-1");
    for (size_t k = 0; k < r->count; k++)
        handled[r->items[k].seq]++;
    i = info_of(f.c, "crashy");
    ck_assert_uint_eq(i.ack_floor, CRASH_EVENTS);
    ck_assert_uint_eq(i.pending, 0);
    ck_assert_uint_eq(i.in_flight, 0);
    ck_assert_uint_eq(i.dead_letters, 0);

    /* Nothing missed; twice only inside a window that was unacked at a kill. */
    uint64_t twice = 0;
    for (uint64_t k = 1; k <= CRASH_EVENTS; k++) {
        ck_assert_msg(handled[k] >= 1, "seq %" PRIu64 " was never handled", k);
        unsigned windows = 0;
        for (int n = 0; n < 2; n++)
            windows += k > w[n].floor && k <= w[n].delivered;
        ck_assert_msg(handled[k] <= 1 + windows,
                      "seq %" PRIu64 " handled %u times, in %u unacked windows", k, handled[k],
                      windows);
        twice += handled[k] > 1;
    }
    ck_assert_uint_ge(twice, CRASH_BLOCK_AT - CRASH_FETCH_MAX); /* 51..75 at least */
    fprintf(stderr, "crash: %d events, %" PRIu64 " handled twice; windows (%" PRIu64
            ", %" PRIu64 "] and (%" PRIu64 ", %" PRIu64 "]\n",
            CRASH_EVENTS, twice, w[0].floor, w[0].delivered, w[1].floor, w[1].delivered);
    free(r);
    tally_subscriber_close(s);
    test_client_down(&f);
}
END_TEST

/* ---- several instances on one name ---- */

#define SHARE_EVENTS 300
#define SHARE_FETCH_MAX 10
#define SHARE_KILL_AFTER 150       /* reports before one instance is killed */
#define SHARE_ACK_WAIT_MS 15000    /* longer than any batch takes on a loaded machine */
#define SHARE_WAIT_MS 180000       /* for the rest, the ack wait included */

typedef struct report {
    uint64_t seq;
    uint32_t attempt;
    int who; /* the child's index */
} report;

typedef struct reports {
    report items[4 * SHARE_EVENTS];
    size_t count;
    uint32_t handled[SHARE_EVENTS + 1];
} reports;

static void reports_add(reports *rs, int who, uint64_t seq, uint32_t attempt)
{
    ck_assert_uint_ge(seq, 1);
    ck_assert_uint_le(seq, SHARE_EVENTS);
    ck_assert_uint_lt(rs->count, sizeof(rs->items) / sizeof(rs->items[0]));
    rs->items[rs->count++] = (report){seq, attempt, who};
    rs->handled[seq]++;
}

/* Take every whole report line of ch's buffer. */
static void child_take_lines(child *ch, int who, reports *rs)
{
    char *nl;
    while ((nl = memchr(ch->buf, '\n', ch->len)) != NULL) {
        uint64_t seq;
        uint32_t attempt;
        *nl = '\0';
        ck_assert_int_eq(sscanf(ch->buf, "%" SCNu64 " %u", &seq, &attempt), 2);
        reports_add(rs, who, seq, attempt);
        size_t used = (size_t)(nl - ch->buf) + 1;
        memmove(ch->buf, nl + 1, ch->len - used);
        ch->len -= used;
    }
}

/* Read what the live children reported within wait_ms (one poll). A child
 * whose pipe ends (it was killed) gets fd -1. */
static void children_read(child *chs, int n, reports *rs, int wait_ms)
{
    struct pollfd p[4];
    for (int i = 0; i < n; i++)
        p[i] = (struct pollfd){.fd = chs[i].fd, .events = POLLIN};
    if (poll(p, (nfds_t)n, wait_ms) <= 0)
        return;
    for (int i = 0; i < n; i++) {
        if (chs[i].fd < 0 || !(p[i].revents & (POLLIN | POLLHUP)))
            continue;
        ssize_t got = read(chs[i].fd, chs[i].buf + chs[i].len, sizeof(chs[i].buf) - chs[i].len);
        if (got <= 0) {
            close(chs[i].fd);
            chs[i].fd = -1;
            continue;
        }
        chs[i].len += (size_t)got;
        child_take_lines(&chs[i], i, rs);
    }
}

/* SIGKILL a child and take what it reported before it died. */
static void child_kill_drain(child *chs, int n, int who, reports *rs)
{
    kill(chs[who].pid, SIGKILL);
    int status;
    ck_assert_int_eq(waitpid(chs[who].pid, &status, 0), chs[who].pid);
    while (chs[who].fd >= 0)
        children_read(chs, n, rs, 100);
}

static size_t reports_of(const reports *rs, int who)
{
    size_t k = 0;
    for (size_t i = 0; i < rs->count; i++)
        k += rs->items[i].who == who;
    return k;
}

/* Whether seq is among the last `last` reports of who. */
static bool reported_late(const reports *rs, int who, uint64_t seq, size_t last)
{
    size_t looked = 0;
    for (size_t i = rs->count; i-- > 0 && looked < last;) {
        if (rs->items[i].who != who)
            continue;
        if (rs->items[i].seq == seq)
            return true;
        looked++;
    }
    return false;
}

/* Three processes on one name, each its own instance (libtally's generated
 * id): they share the stream with no event twice, even though each start
 * sends restart and the first one holds a batch while the others start.
 * One is SIGKILLed mid-way: the other two take over its unacked events
 * after the ack wait; only those come twice. */
START_TEST(test_three_instances_share_one_name)
{
    test_client_fixture f;
    test_client_up(&f);
    test_client_open_accounts(f.c, 1, SHARE_EVENTS);
    tally_subscriber_options so = {.ack_wait_ms = SHARE_ACK_WAIT_MS};
    tally_subscriber_close(sub_open(f.c, "shared", &so));
    static reports rs;
    memset(&rs, 0, sizeof(rs));
    char go[300];
    snprintf(go, sizeof(go), "%s/go", f.srv.dir);
    child chs[3];

    /* A takes the first batch and holds it (its first event waits for the
     * go file) while B and C start, each with restart on its first fetch. */
    child_plan hold = {NULL, SHARE_FETCH_MAX, 0, 3000, go};
    child_plan flow = {NULL, SHARE_FETCH_MAX, 0, 3000, NULL};
    child_start_plan(&chs[0], f.srv.url, "shared", &hold);
    int64_t deadline = test_deadline_ms(LINE_WAIT_MS);
    while (rs.count == 0 && clock_mono_ms() < deadline)
        children_read(chs, 1, &rs, 100);
    ck_assert_msg(rs.count == 1 && rs.items[0].seq == 1, "A's first report");
    child_start_plan(&chs[1], f.srv.url, "shared", &flow);
    child_start_plan(&chs[2], f.srv.url, "shared", &flow);
    while ((reports_of(&rs, 1) == 0 || reports_of(&rs, 2) == 0) && clock_mono_ms() < deadline)
        children_read(chs, 3, &rs, 100);
    ck_assert_msg(reports_of(&rs, 1) > 0 && reports_of(&rs, 2) > 0, "B and C report");
    int fd = open(go, O_CREAT | O_WRONLY, 0600);
    ck_assert_int_ge(fd, 0);
    close(fd);

    /* Normal operation: all three share the stream, nothing twice. */
    while (rs.count < SHARE_KILL_AFTER && clock_mono_ms() < deadline)
        children_read(chs, 3, &rs, 100);
    child_kill_drain(chs, 3, 2, &rs);
    size_t before_kill = rs.count;
    ck_assert_uint_ge(before_kill, SHARE_KILL_AFTER);
    for (int who = 0; who < 3; who++)
        ck_assert_msg(reports_of(&rs, who) > 0, "instance %d handled nothing", who);
    for (uint64_t k = 1; k <= SHARE_EVENTS; k++)
        ck_assert_msg(rs.handled[k] <= 1, "seq %" PRIu64 " handled %u times before the kill",
                      k, rs.handled[k]);

    /* A and B finish, C's unacked events included once their lease ends. */
    deadline = test_deadline_ms(SHARE_WAIT_MS);
    tally_subscriber_info i = info_of(f.c, "shared");
    while ((i.ack_floor < SHARE_EVENTS || i.in_flight > 0) && clock_mono_ms() < deadline) {
        children_read(chs, 2, &rs, 200);
        i = info_of(f.c, "shared");
    }
    ck_assert_uint_eq(i.ack_floor, SHARE_EVENTS);
    ck_assert_uint_eq(i.in_flight, 0);
    child_kill_drain(chs, 2, 0, &rs);
    child_kill_drain(chs, 2, 1, &rs);

    /* Every event handled; twice only for what C held unacked (its last
     * batch at most), the second time by A or B, a redelivery. */
    uint64_t twice = 0;
    for (uint64_t k = 1; k <= SHARE_EVENTS; k++) {
        ck_assert_msg(rs.handled[k] >= 1, "seq %" PRIu64 " was never handled", k);
        if (rs.handled[k] == 1)
            continue;
        twice++;
        ck_assert_msg(rs.handled[k] == 2 && reported_late(&rs, 2, k, SHARE_FETCH_MAX),
                      "seq %" PRIu64 " handled %u times, not one C held at its death", k,
                      rs.handled[k]);
    }
    for (size_t n = before_kill; n < rs.count; n++)
        if (rs.handled[rs.items[n].seq] > 1)
            ck_assert_uint_ge(rs.items[n].attempt, 2);
    ck_assert_uint_le(twice, SHARE_FETCH_MAX);
    fprintf(stderr, "three instances: %zu, %zu, %zu reports; %" PRIu64 " handled twice\n",
            reports_of(&rs, 0), reports_of(&rs, 1), reports_of(&rs, 2), twice);
    unlink(go);
    test_client_down(&f);
}
END_TEST

/* ---- poison events and the dead-letter queue ---- */

static size_t count_seq(const recorder *r, uint64_t seq)
{
    size_t n = 0;
    for (size_t k = 0; k < r->count; k++)
        n += r->items[k].seq == seq;
    return n;
}

START_TEST(test_poison_event_is_parked_and_replayed)
{
    test_client_fixture f;
    test_client_up(&f);
    test_client_open_accounts(f.c, 1, 10);
    tally_subscriber_options o = {.max_deliver = 3, .backoff_count = 1, .backoff_ms = {50}};
    tally_subscriber *s = sub_open(f.c, "poison", &o);
    ck_assert(tally_subscriber_created(s));
    recorder *r = calloc(1, sizeof(*r));
    r->poison = 4;
    /* 1..10 (4 answered retry), 4 again twice: 12 deliveries. */
    run_until(s, r, 0, 12);
    ck_assert_uint_eq(count_seq(r, 4), 3);
    for (uint64_t k = 1; k <= 10; k++)
        ck_assert_uint_ge(count_seq(r, k), 1);
    for (size_t k = 0, n = 0; k < r->count; k++)
        if (r->items[k].seq == 4)
            ck_assert_uint_eq(r->items[k].attempt, ++n);
    /* Later events keep flowing; a fetch parks 4 instead of delivering it
     * a 4th time, once its redelivery is due (backoff 50 ms after the 3rd
     * answer; a fetch parked then is woken by it): runs until idle, until
     * tallyd counts 4 as a dead letter. */
    test_client_open_accounts(f.c, 11, 5);
    r->count = 0;
    TEST_WAIT_UNTIL((run_until(s, r, 0, 0), info_of(f.c, "poison").dead_letters == 1), 30000,
                    "seq 4 parked as a dead letter (%zu events run)", (size_t)r->count);
    ck_assert_uint_eq(count_seq(r, 4), 0);
    ck_assert_uint_eq(r->count, 5);
    ck_assert_uint_eq(r->items[4].seq, 15);
    tally_subscriber_info i = info_of(f.c, "poison");
    ck_assert_uint_eq(i.ack_floor, 15);
    ck_assert_uint_eq(i.dead_letters, 1);
    ck_assert_uint_eq(i.in_flight, 0);
    ck_assert_uint_eq(i.redelivered, 2);
    ck_assert_uint_eq(i.max_deliver, 3);
    ck_assert_uint_eq(i.backoff_count, 1);
    ck_assert_uint_eq(i.backoff_ms[0], 50);

    tally_dead_letter dl[4];
    size_t n = 0;
    uint64_t next = 99;
    ck_assert_int_eq(tally_dlq_list(f.c, "poison", 0, 0, dl, 4, &n, &next), TALLY_ok);
    ck_assert_uint_eq(n, 1);
    ck_assert_uint_eq(next, 0);
    ck_assert_uint_eq(dl[0].seq, 4);
    ck_assert_uint_eq(dl[0].attempts, 3);
    ck_assert_msg(strstr(dl[0].error, "boom 3") != NULL, "last error: %s", dl[0].error);
    ck_assert_str_eq(dl[0].type, "account.opened");
    ck_assert(!dl[0].replaying);
    ck_assert_int_gt(dl[0].parked_ms, 0);
    tally_event ev;
    size_t got;
    uint64_t head;
    ck_assert_int_eq(tally_log_read(f.c, 4, 1, 0, &ev, 1, &got, &head), TALLY_ok);
    ck_assert_mem_eq(dl[0].event_id.bytes, ev.id.bytes, 16);
    tally_events_release(&ev, got);

    /* Replay: delivered again, first, as a replay with attempt 1. */
    uint64_t replaying = 0;
    ck_assert_int_eq(tally_dlq_replay(f.c, "poison", 4, &replaying), TALLY_ok);
    ck_assert_uint_eq(replaying, 1);
    ck_assert_uint_eq(info_of(f.c, "poison").replaying, 1);
    r->count = 0;
    r->poison = 0;
    run_until(s, r, 0, 1);
    ck_assert_uint_eq(r->items[0].seq, 4);
    ck_assert(r->items[0].replay);
    ck_assert_uint_eq(r->items[0].attempt, 1);
    i = info_of(f.c, "poison");
    ck_assert_uint_eq(i.dead_letters, 0);
    ck_assert_uint_eq(i.replaying, 0);
    ck_assert_uint_eq(i.in_flight, 0);
    ck_assert_int_eq(tally_dlq_list(f.c, "poison", 0, 0, dl, 4, &n, &next), TALLY_ok);
    ck_assert_uint_eq(n, 0);

    /* The handler parks 16 and 17 itself; replay all, discard one. */
    test_client_open_accounts(f.c, 16, 3);
    r->count = 0;
    r->park = 16;
    run_until(s, r, 18, 0);
    ck_assert_uint_eq(r->count, 3);
    r->count = 0;
    ck_assert_int_eq(tally_dlq_replay(f.c, "poison", 16, NULL), TALLY_ok);
    run_until(s, r, 0, 1); /* 16 replayed, parked again by the handler */
    ck_assert_uint_eq(r->items[0].seq, 16);
    ck_assert_int_eq(tally_dlq_list(f.c, "poison", 0, 0, dl, 4, &n, &next), TALLY_ok);
    ck_assert_uint_eq(n, 1);
    ck_assert_str_eq(dl[0].error, "cannot apply");
    ck_assert_int_eq(tally_dlq_discard(f.c, "poison", 16), TALLY_ok);
    ck_assert_int_eq(tally_dlq_discard(f.c, "poison", 16), TALLY_dead_letter_not_found);
    ck_assert_int_eq(tally_dlq_replay(f.c, "poison", 16, NULL), TALLY_dead_letter_not_found);
    ck_assert_int_eq(tally_dlq_replay(f.c, "poison", 0, &replaying), TALLY_ok);
    ck_assert_uint_eq(replaying, 0);
    i = info_of(f.c, "poison");
    ck_assert_uint_eq(i.dead_letters, 0);
    ck_assert_uint_eq(i.ack_floor, 18);
    free(r);
    tally_subscriber_close(s);
    test_client_down(&f);
}
END_TEST

/* ---- several subscribers, metrics ---- */

static void assert_same_metrics(const tally_subscriber_info *a, const tally_subscriber_info *b)
{
    ck_assert_str_eq(a->name, b->name);
    ck_assert_uint_eq(a->ack_floor, b->ack_floor);
    ck_assert_uint_eq(a->delivered_seq, b->delivered_seq);
    ck_assert_uint_eq(a->pending, b->pending);
    ck_assert_uint_eq(a->in_flight, b->in_flight);
    ck_assert_uint_eq(a->dead_letters, b->dead_letters);
    ck_assert_uint_eq(a->redelivered, b->redelivered);
}

START_TEST(test_two_subscribers_progress_independently)
{
    test_client_fixture f;
    test_client_up(&f);
    test_client_open_accounts(f.c, 1, 10);
    tally_subscriber *a = sub_open(f.c, "alpha", NULL);
    tally_subscriber_options from_now = {.start = TALLY_START_NOW};
    tally_subscriber *b = sub_open(f.c, "beta", &from_now);
    recorder *r = calloc(1, sizeof(*r));
    run_until(a, r, 10, 0);
    ck_assert_uint_eq(r->count, 10);
    for (size_t k = 0; k < 10; k++)
        ck_assert_uint_eq(r->items[k].seq, k + 1);
    test_client_open_accounts(f.c, 11, 5);
    r->count = 0;
    run_until(b, r, 0, 3); /* beta: only events after its creation */
    ck_assert_uint_eq(r->items[0].seq, 11);
    ck_assert_uint_eq(r->items[2].seq, 13);

    tally_subscriber_info ia = info_of(f.c, "alpha"), ib = info_of(f.c, "beta");
    ck_assert_uint_eq(ia.ack_floor, 10);
    ck_assert_uint_eq(ia.pending, 5);
    ck_assert_uint_eq(ib.ack_floor, 13);
    ck_assert_uint_eq(ib.pending, 2);
    ck_assert_uint_eq(ib.in_flight, 0);

    tally_subscriber_info list[4], from_stats[4];
    size_t n = 0, m = 0;
    ck_assert_int_eq(tally_subscriber_list(f.c, list, 4, &n), TALLY_ok);
    ck_assert_uint_eq(n, 2);
    assert_same_metrics(&list[0], &ia);
    assert_same_metrics(&list[1], &ib);
    ck_assert_int_eq(tally_stats_subscribers(f.c, from_stats, 4, &m), TALLY_ok);
    ck_assert_uint_eq(m, 2);
    assert_same_metrics(&from_stats[0], &ia);
    assert_same_metrics(&from_stats[1], &ib);
    tally_stats st;
    ck_assert_int_eq(tally_stats_get(f.c, &st), TALLY_ok);
    ck_assert_uint_eq(st.subscribers, 2);

    /* Counters of a handle: what its runs did. */
    tally_subscriber_counters k;
    tally_subscriber_counters_get(b, &k);
    ck_assert_uint_eq(k.delivered, 3);
    ck_assert_uint_eq(k.done, 3);
    ck_assert_uint_eq(k.acks, 1);
    ck_assert_uint_eq(k.ack_floor, 13);
    ck_assert_uint_eq(k.head, 15);

    /* Caught up: nothing pending, no unacked age. */
    r->count = 0;
    run_until(a, r, 15, 0);
    ia = info_of(f.c, "alpha");
    ck_assert_uint_eq(ia.pending, 0);
    ck_assert_uint_eq(ia.oldest_unacked_age_s, 0);

    /* Deleting one leaves the other. */
    ck_assert_int_eq(tally_subscriber_delete(f.c, "alpha"), TALLY_ok);
    ck_assert_int_eq(tally_subscriber_get(f.c, "alpha", &ia), TALLY_subscriber_not_found);
    ck_assert_int_eq(tally_subscriber_run(a, NULL, record, r), TALLY_subscriber_not_found);
    ck_assert_uint_eq(info_of(f.c, "beta").ack_floor, 13);
    free(r);
    tally_subscriber_close(a);
    tally_subscriber_close(b);
    test_client_down(&f);
}
END_TEST

/* ---- stopping, starting points, refusals ---- */

/* Stop a run from another thread once the server shows its subscriber's
 * ack floor at ack_floor (the run handled and acknowledged that far and
 * goes on to wait for more), after a pause in which it most likely parks
 * in its next fetch: a stop sooner or later than that ends the run the
 * same. A stop before the run had its events would end it with none. */
typedef struct stop_when_acked {
    tally_subscriber *sub;
    const char *url;
    const char *name;
    uint64_t ack_floor;
} stop_when_acked;

static void *stop_once_acked(void *arg)
{
    stop_when_acked *w = arg;
    tally_client *c = test_client_open(w->url);
    tally_subscriber_info i = {0};
    (void)TEST_WAITED_UNTIL(tally_subscriber_get(c, w->name, &i) == TALLY_ok &&
                                i.ack_floor >= w->ack_floor,
                            RUN_ACKED_WAIT_MS); /* the run's caller checks what it did */
    tally_client_close(c);
    test_pause_ms(300); /* an input: the run most likely parks in its next fetch by then */
    tally_subscriber_stop(w->sub); /* on time or not: the run's caller checks what it did */
    return NULL;
}

START_TEST(test_stop_ends_a_run)
{
    test_client_fixture f;
    test_client_up(&f);
    test_client_open_accounts(f.c, 1, 3);
    tally_subscriber *s = sub_open(f.c, "waiter", NULL);
    recorder *r = calloc(1, sizeof(*r));
    r->sub = s;
    /* Asked before the run: it returns at once, having fetched nothing. */
    tally_subscriber_stop(s);
    ck_assert_int_eq(tally_subscriber_run(s, NULL, record, r), TALLY_ok);
    ck_assert_uint_eq(r->count, 0);
    tally_subscriber_counters k;
    tally_subscriber_counters_get(s, &k);
    ck_assert_uint_eq(k.fetches, 0);
    /* Asked from another thread while the run waits for events. */
    pthread_t th;
    stop_when_acked w = {s, f.srv.url, "waiter", 3};
    ck_assert_int_eq(pthread_create(&th, NULL, stop_once_acked, &w), 0);
    tally_run_options o = {.wait_ms = 1000};
    ck_assert_int_eq(tally_subscriber_run(s, &o, record, r), TALLY_ok);
    pthread_join(th, NULL);
    ck_assert_uint_eq(r->count, 3);
    ck_assert_uint_eq(info_of(f.c, "waiter").ack_floor, 3);
    free(r);
    tally_subscriber_close(s);
    test_client_down(&f);
}
END_TEST

START_TEST(test_start_positions_and_options)
{
    test_client_fixture f;
    test_client_up(&f);
    test_client_open_accounts(f.c, 1, 6);
    tally_subscriber_options at = {.start = TALLY_START_SEQ, .from_seq = 5};
    tally_subscriber *s = sub_open(f.c, "from5", &at);
    recorder *r = calloc(1, sizeof(*r));
    run_until(s, r, 6, 0);
    ck_assert_uint_eq(r->count, 2);
    ck_assert_uint_eq(r->items[0].seq, 5);
    tally_subscriber_close(s);

    /* The same options again: the same subscriber; other options: refused;
     * no options: used as it is. */
    s = sub_open(f.c, "from5", &at);
    ck_assert(!tally_subscriber_created(s));
    tally_subscriber_close(s);
    tally_subscriber_options other = {.max_deliver = 9};
    ck_assert_int_eq(tally_subscriber_open(f.c, "from5", &other, &s),
                     TALLY_subscriber_exists_with_different_config);
    s = sub_open(f.c, "from5", NULL);
    ck_assert(!tally_subscriber_created(s));
    tally_subscriber_close(s);

    /* From a time: the events committed at or after it. */
    tally_event ev;
    size_t got;
    uint64_t head;
    ck_assert_int_eq(tally_log_read(f.c, 6, 1, 0, &ev, 1, &got, &head), TALLY_ok);
    tally_subscriber_options when = {.start = TALLY_START_TIME, .from_time_ms = ev.time_ms};
    tally_events_release(&ev, got);
    s = sub_open(f.c, "bytime", &when);
    ck_assert_uint_le(info_of(f.c, "bytime").ack_floor, 5);
    tally_subscriber_close(s);

    tally_subscriber_options beyond = {.start = TALLY_START_SEQ, .from_seq = 99};
    ck_assert_int_eq(tally_subscriber_open(f.c, "beyond", &beyond, &s), TALLY_seq_beyond_head);
    ck_assert_int_eq(tally_subscriber_open(f.c, "bad name!", NULL, &s),
                     TALLY_invalid_subscriber_name);
    ck_assert_int_eq(tally_subscriber_get(f.c, "nobody", &(tally_subscriber_info){0}),
                     TALLY_subscriber_not_found);
    free(r);
    test_client_down(&f);
}
END_TEST

START_TEST(test_bad_arguments_send_nothing)
{
    test_client_fixture f;
    test_client_up(&f);
    char long_name[80];
    memset(long_name, 'n', sizeof(long_name) - 1);
    long_name[sizeof(long_name) - 1] = '\0';
    tally_subscriber *s = NULL;
    tally_subscriber_options bad_backoff = {.backoff_count = 9};
    ck_assert_int_eq(tally_subscriber_open(NULL, "x", NULL, &s), TALLY_invalid_argument);
    ck_assert_int_eq(tally_subscriber_open(f.c, NULL, NULL, &s), TALLY_invalid_argument);
    ck_assert_int_eq(tally_subscriber_open(f.c, "", NULL, &s), TALLY_invalid_argument);
    ck_assert_int_eq(tally_subscriber_open(f.c, long_name, NULL, &s), TALLY_invalid_argument);
    ck_assert_int_eq(tally_subscriber_open(f.c, "x", &bad_backoff, &s), TALLY_invalid_argument);
    ck_assert_int_eq(tally_subscriber_open(f.c, "x", NULL, NULL), TALLY_invalid_argument);
    ck_assert_ptr_null(s);
    s = sub_open(f.c, "x", NULL);
    tally_run_options big = {.fetch_max = TALLY_CLIENT_SUB_FETCH_MAX + 1};
    ck_assert_int_eq(tally_subscriber_run(s, &big, record, NULL), TALLY_invalid_argument);
    ck_assert_int_eq(tally_subscriber_run(s, NULL, NULL, NULL), TALLY_invalid_argument);
    ck_assert_int_eq(tally_dlq_discard(f.c, "x", 0), TALLY_invalid_argument);
    ck_assert_int_eq(tally_dlq_discard(f.c, "x", 1), TALLY_dead_letter_not_found);
    ck_assert_int_eq(tally_subscriber_list(f.c, NULL, 0, NULL), TALLY_invalid_argument);
    /* Nothing of the refused calls reached the server. */
    size_t n = 0;
    tally_subscriber_info list[2];
    ck_assert_int_eq(tally_subscriber_list(f.c, list, 2, &n), TALLY_ok);
    ck_assert_uint_eq(n, 1);
    tally_subscriber_close(s);
    test_client_down(&f);
}
END_TEST

/* A server that goes away: the run tries failures_max times, then returns
 * the transport code; the subscriber is intact when the server is back. */
START_TEST(test_unreachable_server_ends_the_run_after_bounded_retries)
{
    test_client_fixture f;
    test_client_up(&f);
    test_client_open_accounts(f.c, 1, 2);
    tally_subscriber *s = sub_open(f.c, "patient", NULL);
    recorder *r = calloc(1, sizeof(*r));
    run_until(s, r, 2, 0);
    ck_assert_int_eq(tallyd_stop(&f.srv), 0);
    tally_run_options o = {.wait_ms = 100, .failures_max = 2};
    r->count = 0;
    int rc = tally_subscriber_run(s, &o, record, r);
    ck_assert_msg(rc == TALLY_unreachable || rc == TALLY_timed_out, "run: %s",
                  tally_strerror(rc));
    tally_subscriber_counters k;
    tally_subscriber_counters_get(s, &k);
    ck_assert_uint_eq(k.failures, 2);
    tallyd_restart(&f.srv);
    test_client_open_accounts(f.c, 3, 1);
    run_until(s, r, 3, 0);
    ck_assert_uint_eq(r->count, 1);
    ck_assert_uint_eq(info_of(f.c, "patient").ack_floor, 3);
    free(r);
    tally_subscriber_close(s);
    test_client_down(&f);
}
END_TEST

/* A batch handler (tally_subscriber_run_batches) answers a whole fetch at
 * once: done events are acknowledged, a retry comes back, a park goes to
 * the dlq, and an event it leaves alone comes back as a retry. */
typedef struct batch_log {
    size_t batches, events;
    uint64_t seqs[64];
    uint32_t attempts[64];
} batch_log;

static void answer_batch(const tally_delivery *batch, size_t count, tally_verdict *verdicts,
                         tally_answer *answers, void *arg)
{
    batch_log *b = arg;
    b->batches++;
    for (size_t i = 0; i < count && b->events < 64; i++, b->events++) {
        uint64_t seq = batch[i].event.seq;
        b->seqs[b->events] = seq;
        b->attempts[b->events] = batch[i].attempt;
        ck_assert_int_eq(verdicts[i], TALLY_RETRY); /* the default */
        if (seq == 2 && batch[i].attempt == 1) {
            snprintf(answers[i].error, sizeof(answers[i].error), "later");
            answers[i].delay_set = true;
            answers[i].delay_ms = 0;
        } else if (seq == 3) {
            verdicts[i] = TALLY_PARK;
            snprintf(answers[i].error, sizeof(answers[i].error), "bad event");
        } else if (seq != 4 || batch[i].attempt > 1) {
            verdicts[i] = TALLY_DONE; /* seq 4, first time: left alone */
        }
    }
}

START_TEST(test_batch_handler_answers_a_whole_fetch)
{
    test_client_fixture f;
    test_client_up(&f);
    test_client_open_accounts(f.c, 1, 5);
    tally_subscriber_options o = {.ack_wait_ms = 100};
    tally_subscriber *s = sub_open(f.c, "batches", &o);
    batch_log *b = calloc(1, sizeof(*b));
    tally_run_options ro = {.fetch_max = 10, .wait_ms = 200, .max_events = 7};
    ck_assert_int_eq(tally_subscriber_run_batches(s, &ro, answer_batch, b), TALLY_ok);
    ck_assert_uint_eq(b->seqs[0], 1);
    ck_assert_uint_eq(b->events, 7); /* 1..5, then 2 and 4 again */
    ck_assert_uint_eq(b->batches >= 2, true);
    tally_subscriber_info i = info_of(f.c, "batches");
    ck_assert_uint_eq(i.ack_floor, 5);
    ck_assert_uint_eq(i.in_flight, 0);
    ck_assert_uint_eq(i.dead_letters, 1);
    tally_subscriber_counters c;
    tally_subscriber_counters_get(s, &c);
    ck_assert_uint_eq(c.delivered, 7);
    ck_assert_uint_eq(c.done, 4);
    ck_assert_uint_eq(c.retried, 2);
    ck_assert_uint_eq(c.parked, 1);
    ck_assert_int_eq(tally_subscriber_run_batches(s, &ro, NULL, b), TALLY_invalid_argument);
    free(b);
    tally_subscriber_close(s);
    test_client_down(&f);
}
END_TEST

int main(int argc, char **argv)
{
    if (argc == 10 && strcmp(argv[1], "--child") == 0)
        return child_main(argv);
    Suite *s = suite_create("subscriber");
    TCase *tc = tcase_create("subscriber");
    tcase_set_timeout(tc, TEST_TIMEOUT_S);
    tcase_add_test(tc, test_killed_subscriber_resumes_from_the_ack_floor);
    tcase_add_test(tc, test_three_instances_share_one_name);
    tcase_add_test(tc, test_poison_event_is_parked_and_replayed);
    tcase_add_test(tc, test_two_subscribers_progress_independently);
    tcase_add_test(tc, test_stop_ends_a_run);
    tcase_add_test(tc, test_batch_handler_answers_a_whole_fetch);
    tcase_add_test(tc, test_start_positions_and_options);
    tcase_add_test(tc, test_bad_arguments_send_nothing);
    tcase_add_test(tc, test_unreachable_server_ends_the_run_after_bounded_retries);
    suite_add_tcase(s, tc);
    return test_run_suite(s);
}
