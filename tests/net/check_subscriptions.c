/*
 * check_subscriptions.c — durable subscribers through a real tallyd over
 * NNG (ipc:// in a temp dir): the ops and their refusals on the wire, a
 * fetch that long-polls and is woken by a commit or by a redelivery falling
 * due, deliveries that survive SIGKILL of tallyd, stats' subscribers, and
 * the store's invariants afterwards.
 *
 * Requests are built with msgpack-c and sent with libtally's raw call; the
 * replies are checked field by field.
 */
#include "clients/libtally/tally.h"
#include "common/clock.h"
#include "common/msgpack_safe.h"
#include "ledger/invariants.h"
#include "log/log.h"
#include "log/store.h"
#include "tests/support/http_client.h"
#include "tests/support/tallyd_harness.h"
#include "tests/support/test_support.h"
#include "tests/support/wait.h"
#include "tests/support/wire.h"

#include <check.h>
#include <msgpack.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static tallyd_proc proc;
static tally_client *client;

static int http_port; /* of start_with_metrics's tallyd */

static void start(void) { wire_server_start(&proc, &client, NULL); }

/* tallyd with /metrics on http_port: a test that must know a long-poll is
 * parked reads tally_long_polls_parked. */
static void start_with_metrics(void)
{
    const char *extra[] = {"--http", "http://127.0.0.1:0", NULL};
    wire_server_start(&proc, &client, extra);
    http_port = proc.http_port;
}

/* Wait until parked long-polls number at least n. */
static void wait_parked(long long n)
{
    ck_assert_msg(test_metrics_sample_reaches(http_port, "tally_long_polls_parked", n, 30000),
                  "never %lld long-polls parked (tally_long_polls_parked %lld)", n,
                  test_metrics_sample(http_port, "tally_long_polls_parked"));
}

static void stop_and_check(void)
{
    wire_server_stop(&proc, &client);
    tallyd_cleanup(&proc);
}

static void open_accounts(uint64_t first, unsigned n)
{
    for (unsigned i = 0; i < n; i++) {
        char key[32];
        snprintf(key, sizeof(key), "open-%llu", (unsigned long long)(first + i));
        tally_account_open_args a = {.id = first + i, .ledger = 1, .code = 1};
        tally_result res;
        ck_assert_int_eq(tally_account_open(client, key, &a, &res), TALLY_ok);
        ck_assert_int_eq(res.code, TALLY_ok);
    }
}

/* ---- tests ---- */

START_TEST(ops_and_refusals_on_the_wire)
{
    start();
    open_accounts(1, 3);
    wire_reply r;
    wire_call(client, &r, "sub_create", "su", "name", "audit", "max_deliver", (uint64_t)2);
    wire_expect(&r, "ok");
    ck_assert(wire_field(r.map, "created")->via.boolean);
    const msgpack_object *sub = wire_field(r.map, "subscriber");
    ck_assert_uint_eq(wire_u64(sub, "ack_floor"), 0);
    ck_assert_uint_eq(wire_u64(sub, "pending"), 3);
    ck_assert_uint_eq(wire_u64(sub, "max_deliver"), 2);
    wire_done(&r);

    wire_call(client, &r, "sub_get", "s", "name", "no spaces");
    wire_expect(&r, "invalid_subscriber_name");
    wire_done(&r);
    wire_call(client, &r, "sub_fetch", "s", "name", "nobody");
    wire_expect(&r, "subscriber_not_found");
    wire_done(&r);
    wire_call(client, &r, "sub_create", "su", "name", "audit", "max_deliver", (uint64_t)3);
    wire_expect(&r, "subscriber_exists_with_different_config");
    wire_done(&r);
    wire_call(client, &r, "sub_create", "su", "name", "x", "max_deliver", (uint64_t)0);
    wire_expect(&r, "value_out_of_range");
    wire_done(&r);
    wire_call(client, &r, "sub_create", "ss", "name", "x", "start", "yesterday");
    wire_expect(&r, "value_out_of_range");
    wire_done(&r);
    wire_call(client, &r, "sub_create", "su", "name", "x", "from_seq", (uint64_t)9);
    wire_expect(&r, "seq_beyond_head");
    wire_done(&r);
    wire_call(client, &r, "sub_ack", "s", "name", "audit");
    wire_expect(&r, "missing_field");
    wire_done(&r);
    wire_call(client, &r, "sub_fetch", "ss", "name", "audit", "consumer", "shop");
    wire_expect(&r, "unknown_field");
    wire_done(&r);
    wire_call(client, &r, "sub_ack", "su", "name", "audit", "seq", (uint64_t)4);
    wire_expect(&r, "seq_beyond_head");
    wire_done(&r);
    wire_call(client, &r, "dlq_discard", "su", "name", "audit", "seq", (uint64_t)1);
    wire_expect(&r, "dead_letter_not_found");
    wire_done(&r);

    /* fetch, nak, park, list, replay, ack */
    wire_call(client, &r, "sub_fetch", "su", "name", "audit", "max", (uint64_t)2);
    wire_expect(&r, "ok");
    const msgpack_object *ev = wire_field(r.map, "events");
    ck_assert_uint_eq(ev->via.array.size, 2);
    for (uint32_t i = 0; i < 2; i++) {
        const msgpack_object *e = &ev->via.array.ptr[i];
        ck_assert_uint_eq(wire_u64(e, "seq"), i + 1);
        ck_assert_uint_eq(wire_u64(e, "attempt"), 1);
        ck_assert(!wire_field(e, "replay")->via.boolean);
        const msgpack_object *bytes = wire_field(e, "event");
        ck_assert_int_eq(bytes->type, MSGPACK_OBJECT_BIN);
        msgpack_unpacked up;
        log_event le;
        msgpack_unpacked_init(&up);
        ck_assert_int_eq(log_event_decode(bytes->via.bin.ptr, bytes->via.bin.size, &up, &le),
                         TALLY_ok);
        ck_assert_uint_eq(le.seq, i + 1);
        msgpack_unpacked_destroy(&up);
    }
    ck_assert_uint_eq(wire_u64(r.map, "head"), 3);
    wire_done(&r);
    wire_call(client, &r, "sub_nak", "sus", "name", "audit", "seq", (uint64_t)1, "error", "db down");
    wire_expect(&r, "ok");
    ck_assert_uint_eq(wire_u64(r.map, "attempt"), 1);
    wire_done(&r);
    wire_call(client, &r, "sub_park", "sus", "name", "audit", "seq", (uint64_t)2, "reason", "bad amount");
    wire_expect(&r, "ok");
    ck_assert_uint_eq(wire_u64(r.map, "ack_floor"), 0); /* 1 still in flight */
    wire_done(&r);
    wire_call(client, &r, "dlq_list", "s", "name", "audit");
    wire_expect(&r, "ok");
    const msgpack_object *entries = wire_field(r.map, "entries");
    ck_assert_uint_eq(entries->via.array.size, 1);
    const msgpack_object *d = &entries->via.array.ptr[0];
    ck_assert_uint_eq(wire_u64(d, "seq"), 2);
    tally_str text;
    ck_assert(msgpack_safe_get_str(wire_field(d, "error"), &text));
    ck_assert(tally_str_equal(text, tally_str_from("bad amount")));
    ck_assert(msgpack_safe_get_str(wire_field(d, "type"), &text));
    ck_assert(tally_str_equal(text, tally_str_from("account.opened")));
    ck_assert_int_eq(wire_field(d, "event_id")->type, MSGPACK_OBJECT_BIN);
    ck_assert_int_eq(wire_field(r.map, "next")->type, MSGPACK_OBJECT_NIL);
    wire_done(&r);
    wire_call(client, &r, "dlq_replay", "s", "name", "audit");
    wire_expect(&r, "ok");
    ck_assert_uint_eq(wire_u64(r.map, "replaying"), 1);
    wire_done(&r);
    wire_call(client, &r, "sub_fetch", "su", "name", "audit", "max", (uint64_t)10);
    ev = wire_field(r.map, "events");
    ck_assert_uint_eq(ev->via.array.size, 2); /* the replay first, then the new seq 3 */
    ck_assert_uint_eq(wire_u64(&ev->via.array.ptr[0], "seq"), 2);
    ck_assert(wire_field(&ev->via.array.ptr[0], "replay")->via.boolean);
    ck_assert_uint_eq(wire_u64(&ev->via.array.ptr[1], "seq"), 3);
    wire_done(&r);
    wire_call(client, &r, "sub_ack", "sU", "name", "audit", "done", 3u, (uint64_t[]){1, 2, 3});
    wire_expect(&r, "ok");
    ck_assert_uint_eq(wire_u64(r.map, "acked"), 3);
    ck_assert_uint_eq(wire_u64(r.map, "ack_floor"), 3);
    wire_done(&r);

    /* a second subscriber progresses on its own; stats and sub_list show both */
    wire_call(client, &r, "sub_create", "ss", "name", "mail", "start", "now");
    wire_expect(&r, "ok");
    wire_done(&r);
    open_accounts(10, 2);
    wire_call(client, &r, "stats", "");
    const msgpack_object *subs = wire_field(r.map, "subscribers");
    ck_assert_uint_eq(subs->via.array.size, 2);
    const msgpack_object *a = &subs->via.array.ptr[0], *m = &subs->via.array.ptr[1];
    tally_str name;
    ck_assert(msgpack_safe_get_str(wire_field(a, "name"), &name));
    ck_assert(tally_str_equal(name, tally_str_from("audit")));
    ck_assert_uint_eq(wire_u64(a, "pending"), 2);
    ck_assert_uint_eq(wire_u64(m, "pending"), 2);
    ck_assert_uint_eq(wire_u64(a, "redelivered"), 0);
    ck_assert_uint_eq(wire_u64(a, "dead_letters"), 0);
    wire_done(&r);
    wire_call(client, &r, "sub_list", "");
    ck_assert_uint_eq(wire_field(r.map, "subscribers")->via.array.size, 2);
    wire_done(&r);
    wire_call(client, &r, "sub_delete", "s", "name", "mail");
    wire_expect(&r, "ok");
    wire_done(&r);
    wire_call(client, &r, "sub_get", "s", "name", "mail");
    wire_expect(&r, "subscriber_not_found");
    wire_done(&r);
    stop_and_check();
}
END_TEST

/* A fetch with wait_ms parks until a commit gives it something. */
typedef struct fetcher {
    const char *url;
    const char *name;
    uint64_t wait_ms;
    int64_t elapsed_ms;
    uint32_t events;
    uint64_t first_seq, first_attempt;
    char code[64];
} fetcher;

static void *fetch_main(void *arg)
{
    fetcher *f = arg;
    tally_client *c;
    tally_client_options o = {.url = f->url, .timeout_ms = 60000, .consumer = "t"};
    if (tally_client_open(&o, &c) != TALLY_ok)
        return NULL;
    msgpack_sbuffer sb;
    msgpack_packer pk;
    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    msgpack_pack_map(&pk, 5);
    msgpack_safe_pack_cstr(&pk, "v");
    msgpack_pack_uint32(&pk, 1);
    msgpack_safe_pack_cstr(&pk, "op");
    msgpack_safe_pack_cstr(&pk, "sub_fetch");
    msgpack_safe_pack_cstr(&pk, "name");
    msgpack_safe_pack_cstr(&pk, f->name);
    msgpack_safe_pack_cstr(&pk, "max");
    msgpack_pack_uint32(&pk, 10);
    msgpack_safe_pack_cstr(&pk, "wait_ms");
    msgpack_pack_uint64(&pk, f->wait_ms);
    void *bytes = NULL;
    size_t len = 0;
    int64_t t0 = clock_mono_ms();
    int rc = tally_request_raw(c, sb.data, sb.size, &bytes, &len);
    f->elapsed_ms = clock_mono_ms() - t0;
    msgpack_unpacked up;
    msgpack_unpacked_init(&up);
    if (rc == TALLY_ok && msgpack_safe_unpack(bytes, len, 16, &up) == TALLY_ok) {
        tally_str code;
        if (msgpack_safe_get_str(msgpack_safe_map_get(&up.data, "code"), &code))
            snprintf(f->code, sizeof(f->code), "%.*s", (int)code.len, code.ptr);
        const msgpack_object *ev = msgpack_safe_map_get(&up.data, "events");
        if (ev && ev->type == MSGPACK_OBJECT_ARRAY) {
            f->events = ev->via.array.size;
            if (f->events > 0) {
                msgpack_safe_get_u64(msgpack_safe_map_get(&ev->via.array.ptr[0], "seq"),
                                     &f->first_seq);
                msgpack_safe_get_u64(msgpack_safe_map_get(&ev->via.array.ptr[0], "attempt"),
                                     &f->first_attempt);
            }
        }
    }
    msgpack_unpacked_destroy(&up);
    free(bytes);
    msgpack_sbuffer_destroy(&sb);
    tally_client_close(c);
    return NULL;
}

/* The longest wait_ms (TALLY_LOG_WAIT_MS_MAX): a fetch that returns before
 * it was woken, since a fetch whose wait runs out runs again and would
 * find the event too. */
#define WAIT_MS 30000

START_TEST(fetch_long_poll_is_woken_by_a_commit_or_a_due_redelivery)
{
    start_with_metrics();
    open_accounts(1, 1);
    wire_reply r;
    wire_call(client, &r, "sub_create", "ssu", "name", "live", "start", "now", "ack_wait_ms", (uint64_t)500);
    wire_expect(&r, "ok");
    wire_done(&r);

    /* woken by a commit */
    fetcher f = {.url = proc.url, .name = "live", .wait_ms = WAIT_MS};
    pthread_t th;
    ck_assert_int_eq(pthread_create(&th, NULL, fetch_main, &f), 0);
    wait_parked(1);
    open_accounts(2, 1);
    pthread_join(th, NULL);
    ck_assert_str_eq(f.code, "ok");
    ck_assert_uint_eq(f.events, 1);
    ck_assert_uint_eq(f.first_seq, 2);
    ck_assert_msg(f.elapsed_ms < WAIT_MS, "returned after %lld ms: its wait ran out, not woken",
                  (long long)f.elapsed_ms);

    /* not acked: after the 500 ms ack wait the parked fetch gets it again */
    fetcher g = {.url = proc.url, .name = "live", .wait_ms = WAIT_MS};
    fetch_main(&g);
    ck_assert_str_eq(g.code, "ok");
    ck_assert_uint_eq(g.events, 1);
    ck_assert_uint_eq(g.first_seq, 2);
    ck_assert_uint_eq(g.first_attempt, 2);
    ck_assert_msg(g.elapsed_ms < WAIT_MS, "returned after %lld ms: its wait ran out, not woken",
                  (long long)g.elapsed_ms);

    /* nothing new and nothing due: empty after the wait */
    wire_call(client, &r, "sub_ack", "su", "name", "live", "seq", (uint64_t)2);
    wire_expect(&r, "ok");
    wire_done(&r);
    fetcher h = {.url = proc.url, .name = "live", .wait_ms = 1000};
    fetch_main(&h);
    ck_assert_str_eq(h.code, "ok");
    ck_assert_uint_eq(h.events, 0);
    ck_assert_int_ge(h.elapsed_ms, 900);
    stop_and_check();
}
END_TEST

/* A field of subscriber name's sub_get. */
static uint64_t subscriber_u64(const char *name, const char *field)
{
    wire_reply r;
    wire_call(client, &r, "sub_get", "s", "name", name);
    wire_expect(&r, "ok");
    uint64_t v = wire_u64(wire_field(r.map, "subscriber"), field);
    wire_done(&r);
    return v;
}

/* A parked fetch runs again when an in-flight event falls due; when that
 * run gives nothing (the event has had its max_deliver and is parked as a
 * dead letter), the fetch goes on waiting for the rest of its wait_ms and
 * returns the next event committed, rather than answering empty early. */
START_TEST(fetch_waits_on_when_a_due_redelivery_gives_nothing)
{
    start_with_metrics();
    open_accounts(1, 1);
    wire_reply r;
    wire_call(client, &r, "sub_create", "ssuu", "name", "once", "start", "now", "ack_wait_ms",
              (uint64_t)200, "max_deliver", (uint64_t)1);
    wire_expect(&r, "ok");
    wire_done(&r);
    open_accounts(2, 1);
    fetcher a = {.url = proc.url, .name = "once", .wait_ms = 0};
    fetch_main(&a);
    ck_assert_str_eq(a.code, "ok");
    ck_assert_uint_eq(a.events, 1);
    ck_assert_uint_eq(a.first_seq, 2);

    /* not acked: due after 200 ms, and parked then instead of redelivered;
     * the fetch must still be waiting after that when seq 3 is committed */
    fetcher b = {.url = proc.url, .name = "once", .wait_ms = WAIT_MS};
    pthread_t th;
    ck_assert_int_eq(pthread_create(&th, NULL, fetch_main, &b), 0);
    TEST_WAIT_UNTIL(subscriber_u64("once", "dead_letters") == 1, 30000,
                    "seq 2 parked as a dead letter by the fetch's run at its due time");
    wait_parked(1); /* the fetch, parked again after that run */
    open_accounts(3, 1);
    pthread_join(th, NULL);
    ck_assert_str_eq(b.code, "ok");
    ck_assert_msg(b.events == 1, "fetch answered %u events after %lld ms; want seq 3", b.events,
                  (long long)b.elapsed_ms);
    ck_assert_uint_eq(b.first_seq, 3);
    ck_assert_uint_eq(b.first_attempt, 1);

    wire_call(client, &r, "sub_get", "s", "name", "once");
    wire_expect(&r, "ok");
    ck_assert_uint_eq(wire_u64(wire_field(r.map, "subscriber"), "dead_letters"), 1);
    wire_done(&r);
    stop_and_check();
}
END_TEST

/* SIGKILL between fetch and ack: the restarted server still knows what was
 * delivered and counts the next delivery as a second attempt. */
START_TEST(deliveries_survive_sigkill)
{
    start();
    open_accounts(1, 4);
    wire_reply r;
    wire_call(client, &r, "sub_create", "s", "name", "crash");
    wire_done(&r);
    wire_call(client, &r, "sub_fetch", "su", "name", "crash", "max", (uint64_t)3);
    ck_assert_uint_eq(wire_field(r.map, "events")->via.array.size, 3);
    wire_done(&r);
    wire_call(client, &r, "sub_ack", "sU", "name", "crash", "done", 1u, (uint64_t[]){2});
    wire_done(&r);
    tally_client_close(client);
    tallyd_kill(&proc);
    tallyd_restart(&proc);
    tally_client_options o = {.url = proc.url, .timeout_ms = 60000, .consumer = "t"};
    ck_assert_int_eq(tally_client_open(&o, &client), TALLY_ok);
    wire_call(client, &r, "sub_fetch", "sub", "name", "crash", "max", (uint64_t)10, "restart", 1);
    const msgpack_object *ev = wire_field(r.map, "events");
    ck_assert_uint_eq(ev->via.array.size, 3); /* 1 and 3 again, then 4 */
    uint64_t want[3][2] = {{1, 2}, {3, 2}, {4, 1}};
    for (int i = 0; i < 3; i++) {
        ck_assert_uint_eq(wire_u64(&ev->via.array.ptr[i], "seq"), want[i][0]);
        ck_assert_uint_eq(wire_u64(&ev->via.array.ptr[i], "attempt"), want[i][1]);
    }
    wire_done(&r);
    wire_call(client, &r, "sub_get", "s", "name", "crash");
    const msgpack_object *sub = wire_field(r.map, "subscriber");
    ck_assert_uint_eq(wire_u64(sub, "redelivered"), 2);
    ck_assert_uint_eq(wire_u64(sub, "in_flight"), 3);
    ck_assert_uint_eq(wire_u64(sub, "ack_floor"), 0);
    wire_done(&r);
    stop_and_check();
}
END_TEST

/* Park seq 1 of subscriber name: delivered max_deliver (2) times, nak'd
 * each time, then parked by the next fetch. */
static void park_first(const char *name)
{
    wire_reply r;
    wire_call(client, &r, "sub_create", "su", "name", name, "max_deliver", (uint64_t)2);
    wire_expect(&r, "ok");
    wire_done(&r);
    for (int attempt = 1; attempt <= 2; attempt++) {
        wire_call(client, &r, "sub_fetch", "su", "name", name, "max", (uint64_t)1);
        wire_expect(&r, "ok");
        const msgpack_object *ev = wire_field(r.map, "events");
        ck_assert_uint_eq(ev->via.array.size, 1);
        ck_assert_uint_eq(wire_u64(&ev->via.array.ptr[0], "attempt"), (uint64_t)attempt);
        wire_done(&r);
        wire_call(client, &r, "sub_nak", "suus", "name", name, "seq", (uint64_t)1, "delay_ms",
                  (uint64_t)0, "error", "cannot apply");
        wire_expect(&r, "ok");
        wire_done(&r);
    }
    wire_call(client, &r, "sub_fetch", "su", "name", name, "max", (uint64_t)1);
    wire_expect(&r, "ok");
    ck_assert_uint_eq(wire_u64(&wire_field(r.map, "events")->via.array.ptr[0], "seq"), 2);
    wire_done(&r);
}

/* Whether sub_get says name is gone. */
static bool subscriber_gone(const char *name)
{
    wire_reply r;
    wire_call(client, &r, "sub_get", "s", "name", name);
    bool gone = strcmp(r.code, "subscriber_not_found") == 0;
    wire_done(&r);
    return gone;
}

static uint64_t dead_letters_of(const char *name)
{
    wire_reply r;
    wire_call(client, &r, "dlq_list", "s", "name", name);
    wire_expect(&r, "ok");
    uint64_t n = wire_field(r.map, "entries")->via.array.size;
    wire_done(&r);
    return n;
}

/* --dlq-retention-s 1 removes a dead letter once it was parked for a
 * second, with a dead_letter.expired event in the log; without the option
 * it stays. */
START_TEST(dead_letters_expire_with_dlq_retention)
{
    static const char *const args[] = {"--dlq-retention-s", "1", NULL};
    wire_server_start(&proc, &client, args);
    open_accounts(1, 2);
    park_first("expiring");
    ck_assert_uint_eq(dead_letters_of("expiring"), 1);
    TEST_WAIT_UNTIL(dead_letters_of("expiring") == 0, 60000,
                    "the dead letter removed by --dlq-retention-s 1");
    tally_event ev[4];
    size_t got;
    uint64_t head;
    ck_assert_int_eq(tally_log_read(client, 3, 4, 0, ev, 4, &got, &head), TALLY_ok);
    ck_assert_uint_ge(got, 1);
    ck_assert_str_eq(ev[0].type, "dead_letter.expired");
    ck_assert_int_eq(ev[0].kind, TALLY_ENTITY_DEAD_LETTER);
    ck_assert_str_eq(ev[0].entity_kind, "dead_letter");
    ck_assert_str_eq(ev[0].subject, "expiring");
    ck_assert_str_eq(ev[0].feature, "1");
    ck_assert_str_eq(ev[0].consumer, "");
    tally_events_release(ev, got);
    wire_reply r;
    wire_call(client, &r, "sub_get", "s", "name", "expiring");
    ck_assert_uint_eq(wire_u64(wire_field(r.map, "subscriber"), "dead_letters"), 0);
    wire_done(&r);
    wire_call(client, &r, "sub_fetch", "ss", "name", "expiring", "instance", "no spaces");
    wire_expect(&r, "value_out_of_range");
    wire_done(&r);
    /* a name may hold ':', an instance may not (docs/SUBSCRIBERS.md) */
    wire_call(client, &r, "sub_fetch", "ss", "name", "expiring", "instance", "a:b");
    wire_expect(&r, "value_out_of_range");
    wire_done(&r);
    stop_and_check(); /* the invariants accept the event and its chain */

    start(); /* the default keeps dead letters */
    open_accounts(1, 2);
    park_first("kept");
    /* older than the 1 s retention above by more than a retention pass
     * (the idle writer's, about once a second): still there */
    TEST_WAIT_UNTIL(subscriber_u64("kept", "oldest_dead_letter_age_s") >= 3, 60000,
                    "the dead letter 3 s old by tallyd's figures");
    ck_assert_uint_eq(dead_letters_of("kept"), 1);
    stop_and_check();
}
END_TEST


static void transfer(uint8_t id, uint64_t debit, uint64_t credit)
{
    tally_transfer_args t = {.debit_account_id = debit, .credit_account_id = credit,
                             .amount = 5, .ledger = 1, .code = 1};
    t.id.bytes[15] = id;
    char key[32];
    snprintf(key, sizeof(key), "transfer-%u", id);
    tally_result res;
    ck_assert_int_eq(tally_transfer(client, key, &t, &res), TALLY_ok);
    ck_assert_int_eq(res.code, TALLY_ok);
}

static bool text_is(const msgpack_object *o, const char *want)
{
    tally_str got;
    return msgpack_safe_get_str(o, &got) && tally_str_equal(got, tally_str_from(want));
}

/* seqs of a fetch's events into out (at most 8); how many. */
static uint32_t fetched(const char *name, const char *instance, uint64_t out[8])
{
    wire_reply r;
    wire_call(client, &r, "sub_fetch", "sus", "name", name, "max", (uint64_t)8, "instance",
              instance);
    wire_expect(&r, "ok");
    const msgpack_object *ev = wire_field(r.map, "events");
    uint32_t n = ev->via.array.size;
    for (uint32_t i = 0; i < n && i < 8; i++)
        out[i] = wire_u64(&ev->via.array.ptr[i], "seq");
    wire_done(&r);
    return n;
}

/* sub_update changes settings and keeps the cursor; a filter hands out
 * only what passes and acks the rest past on the server; sub_get shows an
 * in-flight event's attempts, last error (a nak's reason), holder and next
 * delivery; the dead letters' owner is in dlq_list and the dead-letter
 * metrics' labels. */
START_TEST(update_filters_and_owner_on_the_wire)
{
    start_with_metrics();
    open_accounts(1, 3);                 /* seqs 1-3: account.opened */
    wire_reply r;
    wire_call(client, &r, "sub_create", "sssss", "name", "hooks", "filter_types",
              "transfer.created", "contact", "payments-oncall@example.com", "alert_route",
              "pagerduty:payments", "filter_kinds", "transfer,account");
    wire_expect(&r, "ok");
    const msgpack_object *sub = wire_field(r.map, "subscriber");
    ck_assert(text_is(&wire_field(sub, "filter_types")->via.array.ptr[0], "transfer.created"));
    ck_assert_uint_eq(wire_field(sub, "filter_kinds")->via.array.size, 2);
    wire_done(&r);
    transfer(1, 1, 2);                   /* seq 4: transfer.created */
    open_accounts(4, 1);                 /* seq 5 */
    uint64_t seqs[8];
    ck_assert_uint_eq(fetched("hooks", "w1", seqs), 1);
    ck_assert_uint_eq(seqs[0], 4);
    ck_assert_uint_eq(subscriber_u64("hooks", "delivered_seq"), 5); /* 5 skipped, no round trip */
    wire_call(client, &r, "sub_ack", "su", "name", "hooks", "seq", (uint64_t)4);
    wire_expect(&r, "ok");
    ck_assert_uint_eq(wire_u64(r.map, "ack_floor"), 5);
    wire_done(&r);

    /* Update: every type now, a shorter lease; the cursor stays at 5. */
    wire_call(client, &r, "sub_update", "ssu", "name", "hooks", "filter_types", "",
              "ack_wait_ms", (uint64_t)60000);
    wire_expect(&r, "ok");
    sub = wire_field(r.map, "subscriber");
    ck_assert_uint_eq(wire_u64(sub, "ack_floor"), 5);
    ck_assert_uint_eq(wire_u64(sub, "ack_wait_ms"), 60000);
    ck_assert_uint_eq(wire_field(sub, "filter_types")->via.array.size, 0);
    ck_assert(text_is(wire_field(sub, "contact"), "payments-oncall@example.com"));
    wire_done(&r);
    open_accounts(6, 2);                 /* seqs 6, 7 */
    ck_assert_uint_eq(fetched("hooks", "w1", seqs), 2);
    ck_assert_uint_eq(seqs[0], 6);      /* not replayed from 1 */
    ck_assert_uint_eq(seqs[1], 7);

    /* Why 6 is stuck, before it is parked. */
    wire_call(client, &r, "sub_nak", "susu", "name", "hooks", "seq", (uint64_t)6, "reason",
              "CRM answered 503", "delay_ms", (uint64_t)3600000);
    wire_expect(&r, "ok");
    wire_done(&r);
    wire_call(client, &r, "sub_nak", "suss", "name", "hooks", "seq", (uint64_t)6, "reason", "a",
              "error", "b");
    wire_expect(&r, "value_out_of_range");
    wire_done(&r);
    wire_call(client, &r, "sub_get", "s", "name", "hooks");
    wire_expect(&r, "ok");
    const msgpack_object *flights = wire_field(r.map, "in_flight_events");
    ck_assert_uint_eq(flights->via.array.size, 2);
    const msgpack_object *f = &flights->via.array.ptr[0];
    ck_assert_uint_eq(wire_u64(f, "seq"), 6);
    ck_assert_uint_eq(wire_u64(f, "attempts"), 1);
    ck_assert(text_is(wire_field(f, "last_error"), "CRM answered 503"));
    ck_assert(text_is(wire_field(f, "holder"), "w1"));
    ck_assert_uint_gt(wire_u64(f, "deliver_after_ms"), wire_u64(&flights->via.array.ptr[1],
                                                                "deliver_after_ms"));
    ck_assert_int_eq(wire_field(&flights->via.array.ptr[1], "last_error")->type,
                     MSGPACK_OBJECT_NIL);
    wire_done(&r);

    /* The dead letter's owner: dlq_list and the metric's labels. */
    wire_call(client, &r, "sub_park", "sus", "name", "hooks", "seq", (uint64_t)6, "reason",
              "gave up");
    wire_expect(&r, "ok");
    wire_done(&r);
    wire_call(client, &r, "dlq_list", "s", "name", "hooks");
    wire_expect(&r, "ok");
    ck_assert(text_is(wire_field(r.map, "contact"), "payments-oncall@example.com"));
    ck_assert(text_is(wire_field(r.map, "alert_route"), "pagerduty:payments"));
    wire_done(&r);
    long long dead = test_metrics_sample(
        http_port, "tally_subscriber_dead_letters{subscriber=\"hooks\",contact=\"payments-oncall@"
                   "example.com\",alert_route=\"pagerduty:payments\"}");
    ck_assert_msg(dead == 1, "dead-letter metric with the owner's labels: %lld", dead);

    /* Refusals. */
    wire_call(client, &r, "sub_update", "ss", "name", "hooks", "contact", "say \"hi\"");
    wire_expect(&r, "value_out_of_range");
    wire_done(&r);
    wire_call(client, &r, "sub_update", "ss", "name", "hooks", "filter_kinds", "planet");
    wire_expect(&r, "value_out_of_range");
    wire_done(&r);
    wire_call(client, &r, "sub_update", "su", "name", "nobody", "max_deliver", (uint64_t)3);
    wire_expect(&r, "subscriber_not_found");
    wire_done(&r);
    stop_and_check();
}
END_TEST

/* A subscriber with inactive_expiry_ms is removed once that long passes
 * without activity, with a subscriber.expired event; an active one stays. */
START_TEST(inactive_subscriber_expires_with_an_event)
{
    start();
    open_accounts(1, 2);
    wire_reply r;
    wire_call(client, &r, "sub_create", "sus", "name", "abandoned", "inactive_expiry_ms",
              (uint64_t)1000, "contact", "ops");
    wire_expect(&r, "ok");
    wire_done(&r);
    wire_call(client, &r, "sub_create", "s", "name", "kept");
    wire_expect(&r, "ok");
    wire_done(&r);
    uint64_t seqs[8];
    ck_assert_uint_eq(fetched("abandoned", "w1", seqs), 2);
    TEST_WAIT_UNTIL(subscriber_gone("abandoned"), 30000,
                    "the subscriber removed after 1 s without activity");
    tally_event ev[4];
    size_t got;
    uint64_t head;
    ck_assert_int_eq(tally_log_read(client, 3, 4, 0, ev, 4, &got, &head), TALLY_ok);
    ck_assert_uint_ge(got, 1);
    ck_assert_str_eq(ev[0].type, "subscriber.expired");
    ck_assert_int_eq(ev[0].kind, TALLY_ENTITY_SUBSCRIBER);
    ck_assert_str_eq(ev[0].subject, "abandoned");
    ck_assert_str_eq(ev[0].consumer, "");
    tally_events_release(ev, got);
    ck_assert_uint_eq(subscriber_u64("kept", "ack_floor"), 0);
    stop_and_check(); /* the invariants accept the event */
}
END_TEST

int main(void)
{
    Suite *s = suite_create("subscriptions");
    TCase *tc = tcase_create("wire");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, ops_and_refusals_on_the_wire);
    tcase_add_test(tc, fetch_long_poll_is_woken_by_a_commit_or_a_due_redelivery);
    tcase_add_test(tc, fetch_waits_on_when_a_due_redelivery_gives_nothing);
    tcase_add_test(tc, deliveries_survive_sigkill);
    tcase_add_test(tc, dead_letters_expire_with_dlq_retention);
    tcase_add_test(tc, update_filters_and_owner_on_the_wire);
    tcase_add_test(tc, inactive_subscriber_expires_with_an_event);
    suite_add_tcase(s, tc);
    return test_run_suite(s);
}
