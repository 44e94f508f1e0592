/*
 * check_sub_partitions.c — ordered partitions of a durable subscriber
 * (docs/SUBSCRIBERS.md, "Partitions") through a real tallyd: four
 * consumer instances, each libtally's subscriber loop on its own thread
 * and client, share a subscriber with partitions = 4; one of them dies
 * midway (its handler hangs, so it neither fetches, acks nor extends
 * anything), its partitions' leases expire and the others take them.
 * Every entity's events are applied in version order, and each event's
 * effect exactly once (the consumer's inbox dedupes by event id).
 */
#include "clients/libtally/tally.h"
#include "common/clock.h"
#include "tests/support/run.h"
#include "tests/support/tallyd_harness.h"
#include "tests/support/test_support.h"
#include "tests/support/wait.h"
#include "tests/support/wire.h"

#include <check.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ENTITIES 16
#define VERSIONS 16 /* events per entity: a grant, then extensions */
#define EVENTS (ENTITIES * VERSIONS)
#define INSTANCES 4
#define DIES_AFTER 3 /* events the dying instance applies before it hangs */
#define ACK_WAIT_MS 1500 /* scaled by the test slowdown: a live instance keeps its leases */

static tallyd_proc proc;
static tally_client *client;

/* The consumer's side: an inbox of applied event ids and each entity's
 * last applied version, under one lock. */
typedef struct consumer {
    pthread_mutex_t mu;
    pthread_cond_t changed;
    tally_uuid applied[EVENTS];
    size_t applied_count;
    uint64_t version[ENTITIES];
    unsigned out_of_order, duplicates, foreign;
    unsigned by_instance[INSTANCES];
    bool dead;     /* the dying instance hangs */
    bool released; /* the test is over: the hung handler may return */
} consumer;

static consumer con = {.mu = PTHREAD_MUTEX_INITIALIZER, .changed = PTHREAD_COND_INITIALIZER};

typedef struct instance {
    int index;
    char id[16];
    tally_client *client;
    tally_subscriber *sub;
    pthread_t thread;
    int rc;
} instance;

static instance inst[INSTANCES];

static int entity_of(const tally_event *ev)
{
    int n = -1;
    if (ev->kind == TALLY_ENTITY_ENTITLEMENT && sscanf(ev->subject, "user-%d", &n) == 1 &&
        n >= 0 && n < ENTITIES)
        return n;
    return -1;
}

static bool applied_already(const tally_uuid *id)
{
    for (size_t i = 0; i < con.applied_count; i++)
        if (memcmp(con.applied[i].bytes, id->bytes, sizeof(id->bytes)) == 0)
            return true;
    return false;
}

static tally_verdict handle(const tally_delivery *d, tally_answer *answer, void *arg)
{
    (void)answer;
    instance *me = arg;
    pthread_mutex_lock(&con.mu);
    if (me->index == INSTANCES - 1 && con.by_instance[me->index] == DIES_AFTER) {
        con.dead = true; /* dies before applying this one: it is never acked */
        pthread_cond_broadcast(&con.changed);
        while (!con.released)
            pthread_cond_wait(&con.changed, &con.mu);
        pthread_mutex_unlock(&con.mu);
        tally_subscriber_stop(me->sub);
        return TALLY_RETRY;
    }
    int e = entity_of(&d->event);
    if (e < 0) {
        con.foreign++;
    } else if (applied_already(&d->event.id)) {
        con.duplicates++; /* the inbox: applied once, acknowledged again */
    } else {
        if (d->event.entity_version != con.version[e] + 1)
            con.out_of_order++;
        if (d->event.entity_version > con.version[e])
            con.version[e] = d->event.entity_version;
        con.applied[con.applied_count++] = d->event.id;
        con.by_instance[me->index]++;
        pthread_cond_broadcast(&con.changed);
    }
    pthread_mutex_unlock(&con.mu);
    return TALLY_DONE;
}

static void *instance_main(void *arg)
{
    instance *me = arg;
    tally_run_options o = {.fetch_max = 8, .wait_ms = 200, .instance = me->id};
    me->rc = tally_subscriber_run(me->sub, &o, handle, me);
    return NULL;
}

static void write_events(void)
{
    for (int v = 1; v <= VERSIONS; v++)
        for (int e = 0; e < ENTITIES; e++) {
            char subject[32], key[48];
            snprintf(subject, sizeof(subject), "user-%d", e);
            snprintf(key, sizeof(key), "ent-%d-%d", e, v);
            tally_entitlement_args a = {.subject = subject, .feature = "pro",
                                        .duration_ms = 86400000};
            tally_result res;
            int rc = v == 1 ? tally_grant(client, key, &a, &res)
                            : tally_extend(client, key, &a, &res);
            ck_assert_int_eq(rc, TALLY_ok);
            ck_assert_msg(res.code == TALLY_ok, "%s: %s", key, tally_strerror(res.code));
        }
}

/* The holders sub_get shows now: how many partitions instance id holds. */
static unsigned partitions_held_by(const char *id, uint64_t *partitions)
{
    wire_reply r;
    wire_call(client, &r, "sub_get", "s", "name", "orders");
    wire_expect(&r, "ok");
    const msgpack_object *sub = wire_field(r.map, "subscriber");
    *partitions = wire_u64(sub, "partitions");
    const msgpack_object *h = wire_field(sub, "partition_holders");
    ck_assert_int_eq(h->type, MSGPACK_OBJECT_ARRAY);
    unsigned held = 0;
    for (uint32_t i = 0; i < h->via.array.size; i++) {
        const msgpack_object *holder = wire_field(&h->via.array.ptr[i], "holder");
        if (holder->type == MSGPACK_OBJECT_STR && holder->via.str.size == strlen(id) &&
            memcmp(holder->via.str.ptr, id, strlen(id)) == 0)
            held++;
    }
    wire_done(&r);
    return held;
}

/* `tally subscribers show orders`: the partitions and their holders. */
static void cli_shows_the_holders(void)
{
    const char *argv[] = {tallyd_program("tally"), "subscribers", "show", "orders", NULL};
    char url[sizeof(proc.url) + 16];
    snprintf(url, sizeof(url), "TALLY_URL=%s", proc.url);
    const char *env[] = {url, NULL};
    char *out = NULL, *err = NULL;
    int status = test_run(argv, env, &out, &err);
    ck_assert_msg(status == 0, "exit %d: %s", status, err);
    ck_assert_msg(strstr(out, "partitions 4\n") && strstr(out, "PARTITION") &&
                      strstr(out, "worker-") && !strstr(out, "worker-3"),
                  "tally subscribers show orders:\n%s", out);
    free(out);
    free(err);
}

static size_t applied_now(void)
{
    pthread_mutex_lock(&con.mu);
    size_t n = con.applied_count;
    pthread_mutex_unlock(&con.mu);
    return n;
}

static bool dead_now(void)
{
    pthread_mutex_lock(&con.mu);
    bool d = con.dead;
    pthread_mutex_unlock(&con.mu);
    return d;
}

START_TEST(four_instances_one_dies_order_and_exactly_once_hold)
{
    wire_server_start(&proc, &client, NULL);
    write_events();
    wire_reply r;
    wire_call(client, &r, "sub_create", "suu", "name", "orders", "partitions", (uint64_t)INSTANCES,
              "ack_wait_ms", (uint64_t)test_scaled_ms(ACK_WAIT_MS));
    wire_expect(&r, "ok");
    ck_assert_uint_eq(wire_u64(wire_field(r.map, "subscriber"), "partitions"), INSTANCES);
    wire_done(&r);
    /* the same again is fine; another count is another config */
    wire_call(client, &r, "sub_create", "suu", "name", "orders", "partitions", (uint64_t)2,
              "ack_wait_ms", (uint64_t)test_scaled_ms(ACK_WAIT_MS));
    wire_expect(&r, "subscriber_exists_with_different_config");
    wire_done(&r);
    /* a partitioned subscriber is fetched by named instances */
    wire_call(client, &r, "sub_fetch", "s", "name", "orders");
    wire_expect(&r, "missing_field");
    wire_done(&r);
    /* nor acknowledged cumulatively: that would pass other instances' events */
    wire_call(client, &r, "sub_ack", "su", "name", "orders", "seq", (uint64_t)1);
    wire_expect(&r, "invalid_argument");
    wire_done(&r);

    for (int i = 0; i < INSTANCES; i++) {
        inst[i].index = i;
        snprintf(inst[i].id, sizeof(inst[i].id), "worker-%d", i);
        tally_client_options o = {.url = proc.url, .timeout_ms = 60000, .consumer = "test"};
        ck_assert_int_eq(tally_client_open(&o, &inst[i].client), TALLY_ok);
        ck_assert_int_eq(tally_subscriber_open(inst[i].client, "orders", NULL, &inst[i].sub),
                         TALLY_ok);
        ck_assert_int_eq(pthread_create(&inst[i].thread, NULL, instance_main, &inst[i]), 0);
    }
    TEST_WAIT_UNTIL(dead_now(), 60000, "worker-3 applying %d events (applied %zu in all)",
                    DIES_AFTER, applied_now());
    TEST_WAIT_UNTIL(applied_now() == EVENTS, 120000,
                    "every event applied (%zu of %d; by instance %u %u %u %u)", applied_now(),
                    EVENTS, con.by_instance[0], con.by_instance[1], con.by_instance[2],
                    con.by_instance[3]);
    uint64_t partitions;
    ck_assert_uint_eq(partitions_held_by("worker-3", &partitions), 0); /* its leases ran out */
    ck_assert_uint_eq(partitions, INSTANCES);
    cli_shows_the_holders();
    for (int i = 0; i < INSTANCES - 1; i++)
        tally_subscriber_stop(inst[i].sub);
    pthread_mutex_lock(&con.mu);
    con.released = true;
    pthread_cond_broadcast(&con.changed);
    pthread_mutex_unlock(&con.mu);
    for (int i = 0; i < INSTANCES; i++) {
        ck_assert_int_eq(pthread_join(inst[i].thread, NULL), 0);
        ck_assert_msg(inst[i].rc == TALLY_ok, "%s: %s", inst[i].id, tally_strerror(inst[i].rc));
        tally_subscriber_close(inst[i].sub);
        tally_client_close(inst[i].client);
    }
    fprintf(stderr, "applied by instance: %u %u %u %u; duplicates %u\n", con.by_instance[0],
            con.by_instance[1], con.by_instance[2], con.by_instance[3], con.duplicates);
    ck_assert_uint_eq(con.out_of_order, 0);
    ck_assert_uint_eq(con.foreign, 0);
    ck_assert_uint_eq(con.applied_count, EVENTS);
    ck_assert_uint_eq(con.by_instance[INSTANCES - 1], DIES_AFTER);
    for (int i = 0; i < INSTANCES - 1; i++) /* each live one got partitions of its own */
        ck_assert_msg(con.by_instance[i] > 0, "%s applied nothing", inst[i].id);
    for (int e = 0; e < ENTITIES; e++)
        ck_assert_uint_eq(con.version[e], VERSIONS);
    wire_server_stop(&proc, &client); /* and the store's invariants */
    tallyd_cleanup(&proc);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("sub_partitions");
    TCase *tc = tcase_create("partitions");
    tcase_set_timeout(tc, 0);
    tcase_add_test(tc, four_instances_one_dies_order_and_exactly_once_hold);
    suite_add_tcase(s, tc);
    return test_run_suite(s);
}
