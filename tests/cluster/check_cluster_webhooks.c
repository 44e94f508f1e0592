/*
 * check_cluster_webhooks.c — webhook intake in cluster mode (docs/CLUSTER.md,
 * "Webhooks"; docs/WEBHOOKS.md) on three nats-servers in one JetStream
 * cluster and three tallyd, each with the same --webhooks file (one
 * hmac-sha256 source whose event id is the body's "id" field), every
 * delivery signed here with OpenSSL's HMAC, plus a Standard Webhooks source:
 *
 * - a delivery to node a is answered 200 (accepted, its log seq and
 *   cluster_seq) and read on every node at its seq as a webhook.received
 *   event with the delivery's body;
 * - the same delivery retried to node b is answered 200 with
 *   Idempotent-Replayed (outcome replayed, the same seq); the same id with
 *   another body to node c is 409;
 * - another delivery sent to nodes b and c at once: both 200, one accepted
 *   and one replayed, with the same seq;
 * - a Standard Webhooks delivery to node c, and the provider's retry
 *   signed anew 5 s later to node a: accepted, then replayed (the signed
 *   time is not in the fingerprint);
 * - a delivery of the largest body (256 KiB) to node b: accepted, and
 *   read on every node with its whole body;
 * - a delivery with a wrong signature to node b is 401, stored nowhere;
 * - then every node holds the same log byte for byte (heads equal), the
 *   same counts, tally-recon is clean on each, and each log holds exactly
 *   four webhook.received events, one per event id; and the nodes' state
 *   digests agree at the first checkpoint after the deliveries (every 32
 *   positions here).
 *
 * Without nats-server installed the program says so and exits 77.
 */
#include "config.h"

#include "common/clock.h"
#include "common/error.h"
#include "common/limits.h"
#include "common/log_event.h"
#include "common/msgpack_safe.h"

#include "tests/support/cluster_fixture.h"
#include "tests/support/http_client.h"
#include "tests/support/suite.h"
#include "tests/support/test_support.h"
#include "tests/support/wire.h"

#include <check.h>
#include <inttypes.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define TEST_TIMEOUT_S 600
#define CHECKPOINT_EVERY 32 /* the fixture's (CLUSTER_FIXTURE_CHECKPOINT_EVERY) */
#define WAIT_MS 120000
#define SECRET "cluster-webhook-secret-0123456789"
/* the standard source's key, and its secret file's text (whsec_ + base64) */
#define STD_KEY "standard-webhook-key-0123456789"
#define STD_SECRET "whsec_c3RhbmRhcmQtd2ViaG9vay1rZXktMDEyMzQ1Njc4OQ=="

/* The sources file and its secret in a temp dir of the test's. */
typedef struct hooks_files {
    char dir[256], secret[320], std_secret[320], conf[320];
} hooks_files;

static void secret_write(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fprintf(f, "%s\n", text);
    ck_assert_int_eq(fclose(f), 0);
    ck_assert_int_eq(chmod(path, 0600), 0);
}

static void hooks_files_make(hooks_files *h)
{
    const char *tmp = getenv("TMPDIR");
    snprintf(h->dir, sizeof(h->dir), "%s/cluster-hooks-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    ck_assert_ptr_nonnull(mkdtemp(h->dir));
    snprintf(h->secret, sizeof(h->secret), "%s/gh.secret", h->dir);
    snprintf(h->std_secret, sizeof(h->std_secret), "%s/std.secret", h->dir);
    snprintf(h->conf, sizeof(h->conf), "%s/hooks.conf", h->dir);
    secret_write(h->secret, SECRET);
    secret_write(h->std_secret, STD_SECRET);
    FILE *f = fopen(h->conf, "w");
    ck_assert_ptr_nonnull(f);
    fprintf(f, "gh hmac-sha256 %s id_field=id type_field=type\nstd standard %s\n", h->secret,
            h->std_secret);
    ck_assert_int_eq(fclose(f), 0);
}

/* A delivery's answer: status, outcome, seq, cluster_seq, replayed. */
typedef struct answer {
    int status;
    char outcome[32];
    uint64_t seq, cluster_seq;
    bool replayed;
    char *raw;
} answer;

static uint64_t number_after(const char *text, const char *key)
{
    const char *at = strstr(text, key);
    return at ? strtoull(at + strlen(key), NULL, 10) : 0;
}

/* POST body to node's /webhooks/<source> with the headers (each ending
 * in CRLF); the answer parsed. */
static answer post(int http_port, const char *source, const char *headers, const char *body)
{
    size_t size = strlen(body) + 1024;
    char *raw = malloc(size);
    ck_assert_ptr_nonnull(raw);
    int len = snprintf(raw, size,
                       "POST /webhooks/%s HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n"
                       "Content-Type: application/json\r\nContent-Length: %zu\r\n%s\r\n%s",
                       source, strlen(body), headers, body);
    ck_assert(len > 0 && (size_t)len < size);
    answer a = {0};
    a.raw = test_http_raw(http_port, raw, (size_t)len, &a.status);
    free(raw);
    ck_assert_msg(a.raw != NULL, "no connection to port %d", http_port);
    const char *o = strstr(a.raw, "\"outcome\":\"");
    if (o)
        snprintf(a.outcome, sizeof(a.outcome), "%.*s", (int)strcspn(o + 11, "\""), o + 11);
    a.seq = number_after(a.raw, "\"seq\":");
    a.cluster_seq = number_after(a.raw, "\"cluster_seq\":");
    a.replayed = strcasestr(a.raw, "Idempotent-Replayed: true") != NULL;
    return a;
}

/* A delivery to the hmac-sha256 source gh, signed with key (SECRET, or
 * another to be refused): the hex HMAC of the body. */
static answer deliver(int http_port, const char *body, const char *key)
{
    uint8_t mac[32];
    unsigned mac_len = sizeof(mac);
    HMAC(EVP_sha256(), key, (int)strlen(key), (const uint8_t *)body, strlen(body), mac, &mac_len);
    char hex[65], headers[128];
    for (int i = 0; i < 32; i++)
        snprintf(hex + 2 * i, 3, "%02x", mac[i]);
    snprintf(headers, sizeof(headers), "X-Hub-Signature-256: sha256=%s\r\n", hex);
    return post(http_port, "gh", headers, body);
}

/* A delivery to the standard source std, id and body signed at signed_s
 * (Standard Webhooks: v1, the base64 HMAC of "id.time.body"). */
static answer deliver_standard(int http_port, const char *id, long long signed_s,
                               const char *body)
{
    char text[1024];
    int n = snprintf(text, sizeof(text), "%s.%lld.%s", id, signed_s, body);
    ck_assert(n > 0 && (size_t)n < sizeof(text));
    uint8_t mac[32];
    unsigned mac_len = sizeof(mac);
    HMAC(EVP_sha256(), STD_KEY, (int)strlen(STD_KEY), (const uint8_t *)text, (size_t)n, mac,
         &mac_len);
    unsigned char b64[64];
    EVP_EncodeBlock(b64, mac, (int)mac_len);
    char headers[256];
    snprintf(headers, sizeof(headers),
             "webhook-id: %s\r\nwebhook-timestamp: %lld\r\nwebhook-signature: v1,%s\r\n", id,
             signed_s, b64);
    return post(http_port, "std", headers, body);
}

static void expect(const answer *a, int status, const char *outcome, bool replayed)
{
    ck_assert_msg(a->status == status && strcmp(a->outcome, outcome) == 0 &&
                      a->replayed == replayed,
                  "wanted %d %s%s, got: %s", status, outcome, replayed ? " (replayed)" : "",
                  a->raw);
}

/* Node c's event at seq, read once it applied min_seq: a webhook.received
 * whose body part is body. */
static void assert_event_at(tally_client *c, uint64_t seq, uint64_t min_seq, const char *body)
{
    await_applied(c, min_seq);
    wire_reply r;
    wire_call(c, &r, "log_read", "uu", "from_seq", seq, "limit", (uint64_t)1);
    wire_expect(&r, "ok");
    const msgpack_object *events = wire_field(r.map, "events");
    ck_assert_int_eq(events->type, MSGPACK_OBJECT_ARRAY);
    ck_assert_uint_eq(events->via.array.size, 1);
    const void *bytes;
    size_t len;
    ck_assert(msgpack_safe_get_bin(&events->via.array.ptr[0], &bytes, &len));
    msgpack_unpacked up;
    msgpack_unpacked_init(&up);
    log_event ev;
    ck_assert_int_eq(log_event_decode(bytes, len, &up, &ev), TALLY_ok);
    ck_assert(log_event_type_is(&ev, LOG_EVENT_WEBHOOK_RECEIVED));
    const msgpack_object *w = log_event_part(&ev, LOG_PART_WEBHOOK);
    ck_assert(w && w->type == MSGPACK_OBJECT_ARRAY && w->via.array.size == 5);
    const msgpack_object *b = &w->via.array.ptr[4];
    ck_assert(b->type == MSGPACK_OBJECT_BIN && b->via.bin.size == strlen(body) &&
              memcmp(b->via.bin.ptr, body, b->via.bin.size) == 0);
    msgpack_unpacked_destroy(&up);
    wire_done(&r);
}

/* How many webhook.received events c's log holds (1..head). */
static unsigned webhook_events(tally_client *c)
{
    uint64_t head = stats_u64(c, "head_seq");
    unsigned count = 0;
    for (uint64_t from = 1; from <= head;) {
        wire_reply r;
        wire_call(c, &r, "log_read", "uu", "from_seq", from, "limit", (uint64_t)100);
        wire_expect(&r, "ok");
        const msgpack_object *events = wire_field(r.map, "events");
        ck_assert_uint_gt(events->via.array.size, 0);
        for (uint32_t i = 0; i < events->via.array.size; i++) {
            const void *bytes;
            size_t len;
            ck_assert(msgpack_safe_get_bin(&events->via.array.ptr[i], &bytes, &len));
            msgpack_unpacked up;
            msgpack_unpacked_init(&up);
            log_event ev;
            ck_assert_int_eq(log_event_decode(bytes, len, &up, &ev), TALLY_ok);
            count += log_event_type_is(&ev, LOG_EVENT_WEBHOOK_RECEIVED);
            msgpack_unpacked_destroy(&up);
        }
        from += events->via.array.size;
        wire_done(&r);
    }
    return count;
}

/* A JSON body of TALLY_WEBHOOK_BODY_BYTES_MAX bytes with id (free it). */
static char *big_body(const char *id)
{
    char *b = malloc(TALLY_WEBHOOK_BODY_BYTES_MAX + 1);
    ck_assert_ptr_nonnull(b);
    int head = snprintf(b, 64, "{\"id\":\"%s\",\"pad\":\"", id);
    memset(b + head, 'p', TALLY_WEBHOOK_BODY_BYTES_MAX - (size_t)head - 2);
    memcpy(b + TALLY_WEBHOOK_BODY_BYTES_MAX - 2, "\"}", 3);
    ck_assert_uint_eq(strlen(b), TALLY_WEBHOOK_BODY_BYTES_MAX);
    return b;
}

typedef struct racer {
    int port;
    const char *body;
    answer a;
} racer;

static void *race(void *arg)
{
    racer *r = arg;
    r->a = deliver(r->port, r->body, SECRET);
    return NULL;
}

START_TEST(test_a_delivery_is_stored_once_on_every_node)
{
    hooks_files h;
    hooks_files_make(&h);
    const char *extra[] = {"--webhooks", h.conf, NULL}; /* checkpoints: the fixture's */
    cluster_fixture f;
    cluster_up_with(&f, extra);
    const char *one = "{\"id\":\"evt_1\",\"type\":\"invoice.paid\",\"n\":1}";
    answer a = deliver(f.node[0].http_port, one, SECRET);
    expect(&a, 200, "accepted", false);
    ck_assert_msg(a.seq > 0 && a.cluster_seq > 0, "no seq or cluster_seq: %s", a.raw);
    for (int i = 0; i < NODES; i++)
        assert_event_at(f.client[i], a.seq, a.cluster_seq, one);
    /* the provider's retry, to another node: replayed from the inbox */
    answer again = deliver(f.node[1].http_port, one, SECRET);
    expect(&again, 200, "replayed", true);
    ck_assert_uint_eq(again.seq, a.seq);
    const char *other = "{\"id\":\"evt_1\",\"type\":\"invoice.paid\",\"n\":2}";
    answer conflict = deliver(f.node[2].http_port, other, SECRET);
    expect(&conflict, 409, "conflict", false);
    /* one delivery to two nodes at once: stored once */
    const char *two = "{\"id\":\"evt_2\",\"type\":\"invoice.paid\",\"n\":3}";
    racer r[2] = {{f.node[1].http_port, two, {0}}, {f.node[2].http_port, two, {0}}};
    pthread_t th[2];
    for (int i = 0; i < 2; i++)
        ck_assert_int_eq(pthread_create(&th[i], NULL, race, &r[i]), 0);
    for (int i = 0; i < 2; i++)
        pthread_join(th[i], NULL);
    ck_assert_msg(r[0].a.status == 200 && r[1].a.status == 200 && r[0].a.seq == r[1].a.seq &&
                      r[0].a.replayed != r[1].a.replayed,
                  "one accepted, one replayed, the same seq: %s\n%s", r[0].a.raw, r[1].a.raw);
    /* a standard delivery, its retry signed anew a few seconds later to
     * another node: the signed time is not part of the fingerprint */
    const char *three = "{\"type\":\"invoice.paid\",\"n\":4}";
    long long now_s = (long long)(clock_wall_ms() / 1000);
    answer std = deliver_standard(f.node[2].http_port, "msg_3", now_s - 5, three);
    expect(&std, 200, "accepted", false);
    answer std_again = deliver_standard(f.node[0].http_port, "msg_3", now_s, three);
    expect(&std_again, 200, "replayed", true);
    ck_assert_uint_eq(std_again.seq, std.seq);
    /* a body of the largest size (256 KiB) goes through the stream too */
    char *big = big_body("evt_big");
    answer large = deliver(f.node[1].http_port, big, SECRET);
    expect(&large, 200, "accepted", false);
    for (int i = 0; i < NODES; i++)
        assert_event_at(f.client[i], large.seq, large.cluster_seq, big);
    free(big);
    answer forged = deliver(f.node[1].http_port, "{\"id\":\"evt_3\"}", "not-the-secret-at-all");
    expect(&forged, 401, "bad_signature", false);
    assert_converged(&f, large.cluster_seq);
    for (int i = 0; i < NODES; i++)
        ck_assert_uint_eq(webhook_events(f.client[i]), 4);
    /* the state digests agree at the first checkpoint past the deliveries
     * (every node's replies to them among what each digest covers) */
    long long past = (long long)((large.cluster_seq / CHECKPOINT_EVERY + 1) * CHECKPOINT_EVERY);
    for (int i = 0; i < NODES; i++) {
        int port = f.node[i].http_port;
        ck_assert_msg(test_metrics_sample_reaches(port, "tally_cluster_checkpoint_position", past,
                                                  WAIT_MS),
                      "node %c compared no checkpoint at %lld", 'a' + i, past);
        ck_assert_msg(test_metrics_sample_reaches(port, "tally_cluster_checkpoint_agreeing", 3,
                                                  WAIT_MS),
                      "node %c: fewer than 3 nodes agree", 'a' + i);
        ck_assert_int_eq(test_metrics_sample(port, "tally_cluster_diverged"), 0);
    }
    answer *all[] = {&a, &again, &conflict, &r[0].a, &r[1].a, &std, &std_again, &large, &forged};
    for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++)
        free(all[i]->raw);
    cluster_down(&f);
    test_remove_dir(h.dir);
}
END_TEST

int main(void)
{
    if (nats_cluster_server_path() == NULL) {
        fprintf(stderr, "check_cluster_webhooks: skipped: $NATS_SERVER is not an executable "
                        "nats-server (setup.sh installs Debian's)\n");
        return 77;
    }
    const test_row rows[] = {
        {"webhooks", test_a_delivery_is_stored_once_on_every_node, TEST_TIMEOUT_S},
    };
    return test_run_suite(test_suite_of_rows("cluster_webhooks", TEST_ROWS(rows)));
}
