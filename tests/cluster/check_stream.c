/*
 * check_stream.c — tests of net/cluster/stream.c, cluster mode's command
 * stream (docs/CLUSTER.md), against a real 3-node NATS JetStream cluster
 * on loopback (tests/support/nats_cluster.h), one per test:
 *
 * - the stream is created with docs/CLUSTER.md's settings, and an
 *   existing sound one is taken;
 * - a stream with 1 replica, memory storage, a short duplicate window,
 *   purge allowed or other subjects is refused, naming the setting;
 * - 1000 messages published from 3 connections at once are read back in
 *   one total order, each exactly once, at the sequence its PubAck gave,
 *   the same order for two independent readers;
 * - a publish retried with the same Nats-Msg-Id is stored once;
 * - kill -9 of the stream leader's nats-server while publishing: the
 *   publishes go on (retried with the same id through the election),
 *   everything acknowledged is read back once at its sequence, also by a
 *   reader reading through the kill, and the killed server rejoins as a
 *   current replica;
 * - a reader reads through two consumers on two servers (a majority of
 *   the 3 replicas: net/cluster/quorum.c); kill -9 of the server holding
 *   one of them: the reader goes on in order from where it was;
 * - a reader (and cluster_stream_get) from a position the stream no
 *   longer holds is told so (TALLY_not_found), not left waiting.
 *
 * Without nats-server installed the program says so and exits 77.
 */
#include "config.h"

#include "common/clock.h"
#include "common/error.h"
#include "net/cluster/stream.h"

#include "tests/support/nats_cluster.h"
#include "tests/support/suite.h"
#include "tests/support/test_support.h"
#include "tests/support/wait.h"

#include <check.h>
#include <inttypes.h>
#include <nats/nats.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TEST_TIMEOUT_S 600
#define WAIT_MS 120000     /* a leader, a message, a rejoin on a loaded machine */
#define READ_WAIT_MS 30000 /* one message of a stream that holds it */
#define ORDER_MESSAGES 1000
#define PUBLISHERS 3
#define KILL_BEFORE 200    /* acknowledged publishes before the kill */
#define KILL_AFTER 200     /* acknowledged after the kill, past the election */
#define KILL_MESSAGES 1000
#define ID_BYTES 32

/* ---- helpers ---- */

/* The cluster's URLs starting at node first (the NATS client shuffles
 * them, so connections spread over the servers either way). */
static void urls_from(const nats_cluster *c, int first, const char *urls[NATS_CLUSTER_NODES])
{
    for (int i = 0; i < NATS_CLUSTER_NODES; i++)
        urls[i] = c->urls[(first + i) % NATS_CLUSTER_NODES];
}

static cluster_stream_config config_of(const char *const *urls, const char *name)
{
    return (cluster_stream_config){.urls = urls, .url_count = NATS_CLUSTER_NODES, .name = name};
}

/* cluster_stream_open, tried again while the cluster has no leader for it
 * (TALLY_unreachable, TALLY_timed_out): its last code and why. */
static int open_when_led(cluster_stream **s, const cluster_stream_config *cfg, char *why)
{
    int rc;
    int64_t until = test_deadline_ms(WAIT_MS);
    while ((rc = cluster_stream_open(s, cfg, why, CLUSTER_WHY_BYTES)) == TALLY_unreachable ||
           rc == TALLY_timed_out) {
        if (clock_mono_ms() >= until)
            break;
        test_pause_ms(50);
    }
    return rc;
}

static cluster_stream *open_ok(const nats_cluster *c, int first, const char *name)
{
    const char *urls[NATS_CLUSTER_NODES];
    urls_from(c, first, urls);
    cluster_stream_config cfg = config_of(urls, name);
    cluster_stream *s = NULL;
    char why[CLUSTER_WHY_BYTES];
    int rc = open_when_led(&s, &cfg, why);
    ck_assert_msg(rc == TALLY_ok, "open %s: %s: %s", name ? name : "(default)",
                  tally_strerror(rc), why);
    return s;
}

/* A plain cnats JetStream context on the cluster, for what the tests set
 * up or look at behind the library's back. */
typedef struct raw_js {
    natsConnection *nc;
    jsCtx *js;
} raw_js;

static raw_js raw_open(const nats_cluster *c)
{
    raw_js r = {0};
    natsOptions *o = NULL;
    ck_assert(natsOptions_Create(&o) == NATS_OK &&
              natsOptions_SetServers(o, (const char **)c->urls, NATS_CLUSTER_NODES) == NATS_OK &&
              natsOptions_SetMaxReconnect(o, -1) == NATS_OK &&
              natsOptions_SetReconnectWait(o, 100) == NATS_OK);
    ck_assert(natsConnection_Connect(&r.nc, o) == NATS_OK);
    natsOptions_Destroy(o);
    ck_assert(natsConnection_JetStream(&r.js, r.nc, NULL) == NATS_OK);
    return r;
}

static void raw_close(raw_js *r)
{
    jsCtx_Destroy(r->js);
    natsConnection_Destroy(r->nc);
}

/* The stream's info, waited for while it has no leader; the caller
 * destroys it. */
static jsStreamInfo *info_of(raw_js *r, const char *name)
{
    jsStreamInfo *si = NULL;
    jsErrCode jerr = 0;
    natsStatus s;
    int64_t until = test_deadline_ms(WAIT_MS);
    while ((s = js_GetStreamInfo(&si, r->js, name, NULL, &jerr)) != NATS_OK &&
           clock_mono_ms() < until)
        test_pause_ms(50);
    ck_assert_msg(s == NATS_OK, "stream %s info: %s (%d)", name, natsStatus_GetText(s), (int)jerr);
    return si;
}

/* Create a stream behind the library's back: the sound settings, then
 * whatever change says. */
typedef void (*config_change)(jsStreamConfig *sc);

static void raw_create(raw_js *r, const char *name, config_change change)
{
    char subject[64];
    snprintf(subject, sizeof(subject), "%s.>", name);
    const char *subjects[] = {subject};
    jsStreamConfig sc;
    jsStreamConfig_Init(&sc);
    sc.Name = name;
    sc.Subjects = subjects;
    sc.SubjectsLen = 1;
    sc.Storage = js_FileStorage;
    sc.Replicas = 3;
    sc.Duplicates = INT64_C(120000) * 1000000;
    sc.MaxMsgSize = 1024 * 1024;
    sc.DenyDelete = true;
    sc.DenyPurge = true;
    change(&sc);
    jsErrCode jerr = 0;
    natsStatus s;
    int64_t until = test_deadline_ms(WAIT_MS);
    while ((s = js_AddStream(NULL, r->js, &sc, NULL, &jerr)) != NATS_OK &&
           (jerr == 0 || jerr == JSClusterNotAvailErr || jerr == JSInsufficientResourcesErr ||
            jerr == JSClusterNoPeersErr) && clock_mono_ms() < until)
        test_pause_ms(50); /* no leader yet; a refusal is final */
    ck_assert_msg(s == NATS_OK, "create %s: %s (%d)", name, natsStatus_GetText(s), (int)jerr);
}

/* Publish until acknowledged, again with the same id on a timeout or
 * while no server answers, for WAIT_MS at most: the code, *seq. */
static int publish_until_acked(cluster_stream *s, const char *id, uint64_t *seq, bool *duplicate,
                               char *why)
{
    int rc;
    int64_t until = test_deadline_ms(WAIT_MS);
    while ((rc = cluster_stream_publish(s, "cmd", id, id, strlen(id), seq, duplicate, why,
                                        CLUSTER_WHY_BYTES)) == TALLY_timed_out ||
           rc == TALLY_unreachable) {
        if (clock_mono_ms() >= until)
            break;
        test_pause_ms(10);
    }
    return rc;
}

/* What a reader saw: per message its sequence and id. */
typedef struct read_record {
    uint64_t seq;
    char id[ID_BYTES];
} read_record;

/* Read count messages from sequence 1 through a reader of its own
 * connection (starting at node first). */
static read_record *read_all(const nats_cluster *c, int first, const char *name, size_t count)
{
    cluster_stream *s = open_ok(c, first, name);
    cluster_reader *r = NULL;
    ck_assert_int_eq(cluster_reader_open(&r, s, 1), TALLY_ok);
    read_record *out = calloc(count, sizeof(*out));
    ck_assert_ptr_nonnull(out);
    for (size_t i = 0; i < count; i++) {
        cluster_message m;
        int rc = cluster_reader_next(r, test_scaled_ms(READ_WAIT_MS), &m);
        ck_assert_msg(rc == TALLY_ok, "reader from node %d: message %zu of %zu: %s (resets %" PRIu64 ")",
                      first, i + 1, count, tally_strerror(rc), cluster_reader_resets(r));
        ck_assert_msg(m.len < ID_BYTES, "message %" PRIu64 ": %zu bytes", m.seq, m.len);
        out[i].seq = m.seq;
        memcpy(out[i].id, m.data, m.len);
        ck_assert_str_eq(m.msg_id, out[i].id);
        char subject[64];
        snprintf(subject, sizeof(subject), "%s.cmd", name);
        ck_assert_str_eq(m.subject, subject);
    }
    cluster_message extra;
    ck_assert_int_eq(cluster_reader_next(r, 0, &extra), TALLY_timed_out);
    cluster_reader_close(r);
    cluster_stream_close(s);
    return out;
}

/* ---- the stream's settings ---- */

START_TEST(test_stream_is_created_with_the_required_settings)
{
    nats_cluster c;
    nats_cluster_start(&c);
    cluster_stream *s = open_ok(&c, 0, NULL);
    ck_assert_str_eq(cluster_stream_name(s), "TALLY_COMMANDS");
    raw_js r = raw_open(&c);
    jsStreamInfo *si = info_of(&r, "TALLY_COMMANDS");
    const jsStreamConfig *sc = si->Config;
    ck_assert_int_eq(sc->SubjectsLen, 1);
    ck_assert_str_eq(sc->Subjects[0], "TALLY_COMMANDS.>");
    ck_assert_int_eq(sc->Storage, js_FileStorage);
    ck_assert_int_eq(sc->Replicas, 3);
    ck_assert_int_eq(sc->Retention, js_LimitsPolicy);
    ck_assert_int_eq(sc->Discard, js_DiscardOld);
    ck_assert(sc->DenyDelete && sc->DenyPurge && !sc->AllowRollup && !sc->Sealed);
    ck_assert_int_ge(sc->Duplicates, INT64_C(120000) * 1000000);
    ck_assert_int_ge(sc->MaxMsgSize, 1024 * 1024);
    ck_assert_int_eq(sc->MaxAge, INT64_C(7) * 24 * 3600 * 1000 * 1000000);
    ck_assert_ptr_nonnull(si->Cluster);
    ck_assert_int_eq(si->Cluster->ReplicasLen, 2); /* the leader and two followers */
    jsStreamInfo_Destroy(si);
    uint64_t first = 9, last = 9;
    ck_assert_int_eq(cluster_stream_bounds(s, &first, &last), TALLY_ok);
    ck_assert(first == 0 && last == 0);
    /* an existing sound stream is taken, from another server */
    cluster_stream *again = open_ok(&c, 2, NULL);
    cluster_stream_close(again);
    cluster_stream_close(s);
    raw_close(&r);
    nats_cluster_stop(&c);
}
END_TEST

static void one_replica(jsStreamConfig *sc) { sc->Replicas = 1; }
static void memory(jsStreamConfig *sc) { sc->Storage = js_MemoryStorage; }
static void short_window(jsStreamConfig *sc) { sc->Duplicates = INT64_C(10) * 1000000000; }
static void purgeable(jsStreamConfig *sc) { sc->DenyPurge = false; }
/* nats-server 2.9 refuses rollups on a stream that denies purges (10052) */
static void rollup(jsStreamConfig *sc)
{
    sc->AllowRollup = true;
    sc->DenyPurge = false;
}
static void small_messages(jsStreamConfig *sc) { sc->MaxMsgSize = 4096; }

static void other_subjects(jsStreamConfig *sc)
{
    static const char *subjects[] = {"OTHER.>", "BAD_SUBJECTS.>"};
    sc->Subjects = subjects;
    sc->SubjectsLen = 2;
}

START_TEST(test_an_unsound_stream_is_refused_naming_the_setting)
{
    static const struct {
        const char *name;
        config_change change;
        const char *said;
    } cases[] = {
        {"ONE_REPLICA", one_replica, "replicas is 1; it must be at least 3"},
        {"MEMORY", memory, "storage is memory; it must be file"},
        {"SHORT_WINDOW", short_window, "duplicate window is 10000 ms; it must be at least 120000 ms"},
        {"PURGEABLE", purgeable, "deny_purge must be true"},
        {"ROLLUP", rollup, "allow_rollup_hdrs must be false"},
        {"SMALL", small_messages, "max_msg_size is 4096"},
        {"BAD_SUBJECTS", other_subjects, "subjects must be exactly BAD_SUBJECTS.>"},
    };
    nats_cluster c;
    nats_cluster_start(&c);
    raw_js r = raw_open(&c);
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        raw_create(&r, cases[i].name, cases[i].change);
        cluster_stream_config cfg = config_of(c.urls, cases[i].name);
        cluster_stream *s = NULL;
        char why[CLUSTER_WHY_BYTES];
        int rc = open_when_led(&s, &cfg, why);
        ck_assert_msg(rc == TALLY_invalid_argument && s == NULL, "%s: %s: %s", cases[i].name,
                      tally_strerror(rc), why);
        ck_assert_msg(strstr(why, cases[i].said) != NULL, "%s said \"%s\", not \"%s\"",
                      cases[i].name, why, cases[i].said);
        ck_assert_msg(strstr(why, cases[i].name) != NULL, "%s: %s", cases[i].name, why);
    }
    /* what the caller asks is checked before any server is asked */
    cluster_stream_config cfg = config_of(c.urls, "FINE");
    cfg.duplicate_window_ms = 1000;
    cluster_stream *s = NULL;
    char why[CLUSTER_WHY_BYTES];
    ck_assert_int_eq(cluster_stream_open(&s, &cfg, why, sizeof(why)), TALLY_invalid_argument);
    ck_assert_msg(strstr(why, "duplicate window 1000 ms: at least 120000 ms"), "%s", why);
    cfg = config_of(c.urls, "FINE");
    cfg.max_age_ms = 60000;
    ck_assert_int_eq(cluster_stream_open(&s, &cfg, why, sizeof(why)), TALLY_invalid_argument);
    ck_assert_msg(strstr(why, "max_age 60000 ms: at least the duplicate window"), "%s", why);
    cfg = config_of(c.urls, "bad.name");
    ck_assert_int_eq(cluster_stream_open(&s, &cfg, why, sizeof(why)), TALLY_invalid_argument);
    ck_assert_msg(strstr(why, "stream name"), "%s", why);
    raw_close(&r);
    nats_cluster_stop(&c);
}
END_TEST

/* ---- one total order ---- */

typedef struct publisher {
    const nats_cluster *c;
    int index;          /* which publisher: its ids and its first server */
    const char *stream;
    size_t count;       /* to publish */
    atomic_size_t acked;
    atomic_bool stop;
    uint64_t *seqs;     /* per message, its PubAck's sequence */
    int rc;             /* the first failure, TALLY_ok when none */
    char why[CLUSTER_WHY_BYTES];
    size_t duplicates;  /* PubAcks that said duplicate */
} publisher;

static void *publisher_run(void *arg)
{
    publisher *p = arg;
    const char *urls[NATS_CLUSTER_NODES];
    urls_from(p->c, p->index, urls);
    cluster_stream_config cfg = config_of(urls, p->stream);
    cluster_stream *s = NULL;
    p->rc = open_when_led(&s, &cfg, p->why);
    for (size_t i = 0; p->rc == TALLY_ok && i < p->count && !atomic_load(&p->stop); i++) {
        char id[ID_BYTES];
        snprintf(id, sizeof(id), "p%d-%zu", p->index, i);
        bool duplicate = false;
        p->rc = publish_until_acked(s, id, &p->seqs[i], &duplicate, p->why);
        p->duplicates += duplicate;
        if (p->rc == TALLY_ok)
            atomic_fetch_add(&p->acked, 1);
    }
    cluster_stream_close(s);
    return NULL;
}

static void publishers_start(publisher *p, pthread_t *t, int n, const nats_cluster *c,
                             const char *stream, size_t total)
{
    for (int i = 0; i < n; i++) {
        p[i] = (publisher){.c = c, .index = i, .stream = stream,
                           .count = total / (size_t)n + ((size_t)i < total % (size_t)n)};
        p[i].seqs = calloc(p[i].count, sizeof(uint64_t));
        ck_assert_ptr_nonnull(p[i].seqs);
        ck_assert_int_eq(pthread_create(&t[i], NULL, publisher_run, &p[i]), 0);
    }
}

static void publishers_join(publisher *p, pthread_t *t, int n)
{
    for (int i = 0; i < n; i++) {
        ck_assert_int_eq(pthread_join(t[i], NULL), 0);
        ck_assert_msg(p[i].rc == TALLY_ok, "publisher %d: %s: %s", i, tally_strerror(p[i].rc),
                      p[i].why);
    }
}

/* Every acknowledged publish is in read at the sequence of its PubAck,
 * read holds nothing else and every sequence once, 1..count in order. */
static void assert_read_matches(const read_record *read, size_t count, const publisher *p, int n)
{
    for (size_t i = 0; i < count; i++)
        ck_assert_msg(read[i].seq == i + 1, "position %zu holds seq %" PRIu64, i, read[i].seq);
    size_t acked = 0;
    for (int k = 0; k < n; k++) {
        uint64_t before = 0;
        for (size_t i = 0; i < atomic_load(&p[k].acked); i++) {
            char id[ID_BYTES];
            snprintf(id, sizeof(id), "p%d-%zu", k, i);
            uint64_t seq = p[k].seqs[i];
            ck_assert_msg(seq >= 1 && seq <= count, "%s acked at %" PRIu64, id, seq);
            ck_assert_msg(strcmp(read[seq - 1].id, id) == 0, "seq %" PRIu64 " holds %s, acked %s",
                          seq, read[seq - 1].id, id);
            ck_assert_msg(seq > before, "%s at %" PRIu64 " after %" PRIu64, id, seq, before);
            before = seq;
            acked++;
        }
    }
    ck_assert_msg(acked == count, "%zu acknowledged, %zu read", acked, count);
}

START_TEST(test_concurrent_publishes_are_read_in_one_order_once)
{
    nats_cluster c;
    nats_cluster_start(&c);
    cluster_stream *s = open_ok(&c, 0, "ORDER"); /* created before the race */
    publisher p[PUBLISHERS];
    pthread_t t[PUBLISHERS];
    publishers_start(p, t, PUBLISHERS, &c, "ORDER", ORDER_MESSAGES);
    publishers_join(p, t, PUBLISHERS);
    uint64_t first = 0, last = 0;
    ck_assert_int_eq(cluster_stream_bounds(s, &first, &last), TALLY_ok);
    ck_assert_msg(first == 1 && last == ORDER_MESSAGES, "bounds %" PRIu64 "..%" PRIu64, first,
                  last);
    read_record *a = read_all(&c, 1, "ORDER", ORDER_MESSAGES);
    read_record *b = read_all(&c, 2, "ORDER", ORDER_MESSAGES);
    assert_read_matches(a, ORDER_MESSAGES, p, PUBLISHERS);
    for (size_t i = 0; i < ORDER_MESSAGES; i++)
        ck_assert_msg(a[i].seq == b[i].seq && strcmp(a[i].id, b[i].id) == 0,
                      "readers differ at %zu: %s, %s", i, a[i].id, b[i].id);
    /* a reader from the middle starts there */
    cluster_reader *r = NULL;
    cluster_message m;
    ck_assert_int_eq(cluster_reader_open(&r, s, 500), TALLY_ok);
    ck_assert_int_eq(cluster_reader_next(r, test_scaled_ms(READ_WAIT_MS), &m), TALLY_ok);
    ck_assert_int_eq(m.seq, 500);
    ck_assert_str_eq(m.msg_id, a[499].id);
    cluster_reader_close(r);
    for (int i = 0; i < PUBLISHERS; i++)
        free(p[i].seqs);
    free(a);
    free(b);
    cluster_stream_close(s);
    nats_cluster_stop(&c);
}
END_TEST

START_TEST(test_a_retried_publish_is_stored_once)
{
    nats_cluster c;
    nats_cluster_start(&c);
    cluster_stream *s = open_ok(&c, 0, "RETRY");
    char why[CLUSTER_WHY_BYTES];
    uint64_t seq1 = 0, seq2 = 0, seq3 = 0, first = 0, last = 0;
    bool dup1 = true, dup2 = false, dup3 = true;
    ck_assert_int_eq(publish_until_acked(s, "node-a-1", &seq1, &dup1, why), TALLY_ok);
    ck_assert_int_eq(publish_until_acked(s, "node-a-1", &seq2, &dup2, why), TALLY_ok);
    ck_assert_int_eq(publish_until_acked(s, "node-a-2", &seq3, &dup3, why), TALLY_ok);
    ck_assert(!dup1 && dup2 && !dup3);
    ck_assert_int_eq(seq1, 1);
    ck_assert_int_eq(seq2, 1);
    ck_assert_int_eq(seq3, 2);
    /* the retry through another server is the same message too */
    cluster_stream *other = open_ok(&c, 2, "RETRY");
    ck_assert_int_eq(publish_until_acked(other, "node-a-1", &seq2, &dup2, why), TALLY_ok);
    ck_assert(dup2 && seq2 == 1);
    ck_assert_int_eq(cluster_stream_bounds(s, &first, &last), TALLY_ok);
    ck_assert(first == 1 && last == 2);
    cluster_reader *r = NULL;
    cluster_message m;
    ck_assert_int_eq(cluster_reader_open(&r, other, 1), TALLY_ok);
    ck_assert_int_eq(cluster_reader_next(r, test_scaled_ms(READ_WAIT_MS), &m), TALLY_ok);
    ck_assert_str_eq(m.msg_id, "node-a-1");
    ck_assert_int_eq(cluster_reader_next(r, test_scaled_ms(READ_WAIT_MS), &m), TALLY_ok);
    ck_assert_str_eq(m.msg_id, "node-a-2");
    ck_assert_int_eq(cluster_reader_next(r, 200, &m), TALLY_timed_out);
    cluster_reader_close(r);
    cluster_stream_close(other);
    cluster_stream_close(s);
    nats_cluster_stop(&c);
}
END_TEST

/* ---- kill -9 of a nats-server ---- */

/* The node whose server leads stream name, -1 while none does. */
static int leader_of(raw_js *r, const nats_cluster *c, const char *name)
{
    jsStreamInfo *si = info_of(r, name);
    int leader = -1;
    for (int i = 0; si->Cluster && si->Cluster->Leader && i < NATS_CLUSTER_NODES; i++)
        if (strcmp(si->Cluster->Leader, c->node[i].name) == 0)
            leader = i;
    jsStreamInfo_Destroy(si);
    return leader;
}

/* Whether node i's server is the leader of stream name or a current,
 * online replica of it. */
static bool is_current_replica(raw_js *r, const nats_cluster *c, int i, const char *name)
{
    jsStreamInfo *si = NULL;
    if (js_GetStreamInfo(&si, r->js, name, NULL, NULL) != NATS_OK)
        return false;
    bool yes = si->Cluster && si->Cluster->Leader &&
               strcmp(si->Cluster->Leader, c->node[i].name) == 0;
    for (int k = 0; !yes && si->Cluster && k < si->Cluster->ReplicasLen; k++) {
        const jsPeerInfo *peer = si->Cluster->Replicas[k];
        yes = strcmp(peer->Name, c->node[i].name) == 0 && peer->Current && !peer->Offline;
    }
    jsStreamInfo_Destroy(si);
    return yes;
}

/* A reader that reads through the kill: count messages from 1, each
 * waited for with a short bound again and again, as a cluster node reads
 * (its consumer may be on the killed server). */
typedef struct live_reader {
    const nats_cluster *c;
    const char *stream;
    size_t count;
    read_record *read;
    size_t got;
    int rc;
    uint64_t resets;
} live_reader;

static void *live_reader_run(void *arg)
{
    live_reader *lr = arg;
    const char *urls[NATS_CLUSTER_NODES];
    urls_from(lr->c, 0, urls);
    cluster_stream_config cfg = config_of(urls, lr->stream);
    cluster_stream *s = NULL;
    cluster_reader *r = NULL;
    char why[CLUSTER_WHY_BYTES];
    lr->rc = open_when_led(&s, &cfg, why);
    if (lr->rc == TALLY_ok)
        lr->rc = cluster_reader_open(&r, s, 1);
    int64_t until = test_deadline_ms(2 * WAIT_MS);
    while (lr->rc == TALLY_ok && lr->got < lr->count && clock_mono_ms() < until) {
        cluster_message m;
        int rc = cluster_reader_next(r, 200, &m);
        if (rc == TALLY_timed_out)
            continue;
        lr->rc = rc;
        if (rc == TALLY_ok && m.len < ID_BYTES) {
            lr->read[lr->got].seq = m.seq;
            memcpy(lr->read[lr->got].id, m.data, m.len);
            lr->got++;
        }
    }
    lr->resets = r ? cluster_reader_resets(r) : 0;
    cluster_reader_close(r);
    cluster_stream_close(s);
    return NULL;
}

static size_t acked_total(publisher *p, int n)
{
    size_t sum = 0;
    for (int i = 0; i < n; i++)
        sum += atomic_load(&p[i].acked);
    return sum;
}

START_TEST(test_publishes_go_on_through_a_killed_server)
{
    nats_cluster c;
    nats_cluster_start(&c);
    cluster_stream *s = open_ok(&c, 0, "KILL");
    raw_js r = raw_open(&c);
    publisher p[PUBLISHERS];
    pthread_t t[PUBLISHERS];
    live_reader lr = {.c = &c, .stream = "KILL", .count = KILL_MESSAGES,
                      .read = calloc(KILL_MESSAGES, sizeof(read_record))};
    ck_assert_ptr_nonnull(lr.read);
    pthread_t reader;
    ck_assert_int_eq(pthread_create(&reader, NULL, live_reader_run, &lr), 0);
    publishers_start(p, t, PUBLISHERS, &c, "KILL", KILL_MESSAGES);
    TEST_WAIT_UNTIL(acked_total(p, PUBLISHERS) >= KILL_BEFORE, WAIT_MS,
                    "%d publishes acknowledged before the kill", KILL_BEFORE);
    int victim = -1;
    TEST_WAIT_UNTIL((victim = leader_of(&r, &c, "KILL")) >= 0, WAIT_MS, "a leader of KILL");
    nats_cluster_kill(&c, victim);
    size_t at_kill = acked_total(p, PUBLISHERS);
    TEST_WAIT_UNTIL(acked_total(p, PUBLISHERS) >= at_kill + KILL_AFTER ||
                        acked_total(p, PUBLISHERS) == KILL_MESSAGES,
                    WAIT_MS, "publishes go on after kill -9 of %s (%zu acknowledged at the kill)",
                    c.node[victim].name, at_kill);
    ck_assert_msg(acked_total(p, PUBLISHERS) > at_kill, "nothing acknowledged after the kill");
    int now_leader = -1;
    TEST_WAIT_UNTIL((now_leader = leader_of(&r, &c, "KILL")) >= 0, WAIT_MS, "a new leader");
    ck_assert_int_ne(now_leader, victim);
    publishers_join(p, t, PUBLISHERS);
    /* a connection opened now, with the dead server in its list, checks
     * the stream on the two left */
    cluster_stream *late = open_ok(&c, victim, "KILL");
    cluster_stream_close(late);
    nats_cluster_restart(&c, victim);
    TEST_WAIT_UNTIL(is_current_replica(&r, &c, victim, "KILL"), WAIT_MS,
                    "%s rejoins KILL as a current replica", c.node[victim].name);
    uint64_t first = 0, last = 0;
    ck_assert_int_eq(cluster_stream_bounds(s, &first, &last), TALLY_ok);
    ck_assert_msg(first == 1 && last == KILL_MESSAGES, "bounds %" PRIu64 "..%" PRIu64
                  " after %d acknowledged", first, last, KILL_MESSAGES);
    read_record *a = read_all(&c, victim, "KILL", KILL_MESSAGES); /* the rejoined one first */
    assert_read_matches(a, KILL_MESSAGES, p, PUBLISHERS);
    ck_assert_int_eq(pthread_join(reader, NULL), 0);
    ck_assert_msg(lr.rc == TALLY_ok && lr.got == KILL_MESSAGES,
                  "the reader through the kill: %s, %zu of %d read, %" PRIu64 " resets",
                  tally_strerror(lr.rc), lr.got, KILL_MESSAGES, lr.resets);
    for (size_t i = 0; i < KILL_MESSAGES; i++)
        ck_assert_msg(lr.read[i].seq == a[i].seq && strcmp(lr.read[i].id, a[i].id) == 0,
                      "the reader through the kill differs at %zu: %s, %s", i, lr.read[i].id,
                      a[i].id);
    fprintf(stderr,
            "check_stream: killed %s (leader) at %zu acknowledged; new leader %s; the reader "
            "through the kill recreated its consumer %" PRIu64 " times\n",
            c.node[victim].name, at_kill, c.node[now_leader].name, lr.resets);
    free(lr.read);
    for (int i = 0; i < PUBLISHERS; i++)
        free(p[i].seqs);
    free(a);
    raw_close(&r);
    cluster_stream_close(s);
    nats_cluster_stop(&c);
}
END_TEST

/* The node whose server holds the first of the reader's consumers, -1
 * while the stream has not exactly two (a majority of its 3 replicas:
 * the reader reads each position from two servers) on two servers. */
static int consumer_host(raw_js *r, const nats_cluster *c, const char *name)
{
    jsConsumerInfoList *list = NULL;
    int host[2] = {-1, -1};
    if (js_Consumers(&list, r->js, name, NULL, NULL) != NATS_OK)
        return -1;
    for (int k = 0; list->Count == 2 && k < 2; k++)
        for (int i = 0; i < NATS_CLUSTER_NODES; i++)
            if (list->List[k]->Cluster && list->List[k]->Cluster->Leader &&
                strcmp(list->List[k]->Cluster->Leader, c->node[i].name) == 0)
                host[k] = i;
    jsConsumerInfoList_Destroy(list);
    return host[0] >= 0 && host[1] >= 0 && host[0] != host[1] ? host[0] : -1;
}

/* Publish ids host-<from>..host-<to - 1>, each until acknowledged. */
static void publish_range(cluster_stream *s, int from, int to)
{
    char why[CLUSTER_WHY_BYTES];
    for (int i = from; i < to; i++) {
        char id[ID_BYTES];
        uint64_t seq = 0;
        snprintf(id, sizeof(id), "host-%d", i);
        int rc = publish_until_acked(s, id, &seq, NULL, why);
        ck_assert_msg(rc == TALLY_ok, "%s: %s: %s", id, tally_strerror(rc), why);
        ck_assert_int_eq(seq, (uint64_t)i + 1);
    }
}

/* Read ids host-<from>..host-<to - 1> in order at their sequences. */
static void read_range(cluster_reader *r, int from, int to)
{
    for (int i = from; i < to; i++) {
        char id[ID_BYTES];
        cluster_message m;
        snprintf(id, sizeof(id), "host-%d", i);
        int rc = cluster_reader_next(r, test_scaled_ms(WAIT_MS), &m);
        ck_assert_msg(rc == TALLY_ok, "reading %s: %s (resets %" PRIu64 ")", id,
                      tally_strerror(rc), cluster_reader_resets(r));
        ck_assert_int_eq(m.seq, (uint64_t)i + 1);
        ck_assert_str_eq(m.msg_id, id);
    }
}

START_TEST(test_a_reader_goes_on_when_its_consumers_server_dies)
{
    nats_cluster c;
    nats_cluster_start(&c);
    cluster_stream *s = open_ok(&c, 0, "HOST");
    raw_js r = raw_open(&c);
    publish_range(s, 0, 100);
    cluster_reader *reader = NULL;
    ck_assert_int_eq(cluster_reader_open(&reader, s, 1), TALLY_ok);
    read_range(reader, 0, 50);
    int host = -1;
    TEST_WAIT_UNTIL((host = consumer_host(&r, &c, "HOST")) >= 0, WAIT_MS,
                    "the reader's two consumers on two servers");
    nats_cluster_kill(&c, host);
    read_range(reader, 50, 100);
    publish_range(s, 100, 150);
    read_range(reader, 100, 150);
    cluster_message m;
    ck_assert_int_eq(cluster_reader_next(reader, 200, &m), TALLY_timed_out);
    fprintf(stderr, "check_stream: killed %s, the host of a reader's consumer; %" PRIu64
            " resets\n", c.node[host].name, cluster_reader_resets(reader));
    cluster_reader_close(reader);
    raw_close(&r);
    cluster_stream_close(s);
    nats_cluster_stop(&c);
}
END_TEST

/* A stream that keeps at most AGED_KEPT messages (max_msgs, which the
 * library does not check): its first ones are gone, as max_age removes
 * them from a node too far behind. */
#define AGED_KEPT 3
static void few_messages(jsStreamConfig *sc) { sc->MaxMsgs = AGED_KEPT; }

START_TEST(test_a_reader_from_an_aged_out_position_is_told_so)
{
    nats_cluster c;
    nats_cluster_start(&c);
    raw_js r = raw_open(&c);
    raw_create(&r, "AGED", few_messages);
    cluster_stream *s = open_ok(&c, 0, "AGED");
    publish_range(s, 0, 2 * AGED_KEPT);
    uint64_t first = 0, last = 0;
    ck_assert_int_eq(cluster_stream_bounds(s, &first, &last), TALLY_ok);
    ck_assert(first == AGED_KEPT + 1 && last == 2 * AGED_KEPT);
    /* docs/CLUSTER.md, "A node too far behind": not_found, not a wait */
    cluster_reader *reader = NULL;
    ck_assert_int_eq(cluster_reader_open(&reader, s, 1), TALLY_ok);
    cluster_message m;
    int rc = cluster_reader_next(reader, test_scaled_ms(READ_WAIT_MS), &m);
    ck_assert_msg(rc == TALLY_not_found, "reading aged-out position 1: %s (resets %" PRIu64 ")",
                  tally_strerror(rc), cluster_reader_resets(reader));
    cluster_reader_close(reader);
    char id[ID_BYTES];
    uint8_t hash[SHA256_BYTES];
    ck_assert_int_eq(cluster_stream_get(s, 1, id, sizeof(id), hash), TALLY_not_found);
    ck_assert_int_eq(cluster_stream_get(s, AGED_KEPT + 1, id, sizeof(id), hash), TALLY_ok);
    ck_assert_str_eq(id, "host-3");
    raw_close(&r);
    cluster_stream_close(s);
    nats_cluster_stop(&c);
}
END_TEST

/* A consumer JetStream refuses to make (here: the stream deleted behind
 * the reader) is reported with why, and every read still ends within its
 * wait; after cluster_stream_interrupt every call fails at once. */
START_TEST(test_a_consumer_not_made_is_reported_and_a_read_ends_in_its_wait)
{
    nats_cluster c;
    nats_cluster_start(&c);
    cluster_stream *s = open_ok(&c, 0, "GONE");
    raw_js r = raw_open(&c);
    publish_range(s, 0, 5);
    ck_assert(js_DeleteStream(r.js, "GONE", NULL, NULL) == NATS_OK);
    cluster_reader *reader = NULL;
    ck_assert_int_eq(cluster_reader_open(&reader, s, 1), TALLY_ok);
    cluster_message m;
    ck_assert_int_eq(cluster_reader_next(reader, 500, &m), TALLY_timed_out);
    char why[CLUSTER_DIFFERED_BYTES] = "";
    uint64_t failed = cluster_reader_place_failed(reader, why, sizeof(why));
    ck_assert_msg(failed > 0 && strstr(why, "stream not found"), "%" PRIu64 " failures: %s",
                  failed, why);
    ck_assert_uint_eq(cluster_reader_place_failed(reader, why, sizeof(why)), 0); /* taken */
    cluster_stream_interrupt(s);
    ck_assert_int_eq(cluster_reader_next(reader, 60000, &m), TALLY_unreachable);
    uint64_t seq = 0;
    bool duplicate = false;
    ck_assert_int_ne(cluster_stream_publish(s, "cmd", "after", "x", 1, &seq, &duplicate, why,
                                            sizeof(why)),
                     TALLY_ok);
    cluster_reader_close(reader);
    raw_close(&r);
    cluster_stream_close(s);
    nats_cluster_stop(&c);
}
END_TEST

/* The stream's replicas set to n behind the library's back (an
 * operator's edit), then the library told of it by a bounds answer. */
static void replicas_set(raw_js *r, cluster_stream *s, const char *name, int64_t n)
{
    jsStreamInfo *si = info_of(r, name);
    si->Config->Replicas = n;
    jsErrCode jerr = 0;
    natsStatus st = js_UpdateStream(NULL, r->js, si->Config, NULL, &jerr);
    ck_assert_msg(st == NATS_OK, "replicas %" PRId64 ": %s (%d)", n, natsStatus_GetText(st),
                  (int)jerr);
    jsStreamInfo_Destroy(si);
    uint64_t first = 0, last = 0;
    TEST_WAIT_UNTIL(cluster_stream_bounds(s, &first, &last) == TALLY_ok &&
                        cluster_stream_replicas(s, NULL) == n,
                    WAIT_MS, "the library sees %" PRId64 " replicas", n);
}

START_TEST(test_a_reader_follows_a_change_of_the_streams_replicas)
{
    nats_cluster c;
    nats_cluster_start(&c);
    cluster_stream *s = open_ok(&c, 0, "RESIZED");
    raw_js r = raw_open(&c);
    uint32_t required = 0;
    ck_assert_int_eq(cluster_stream_replicas(s, &required), 3);
    ck_assert_uint_eq(required, 3);
    cluster_reader *reader = NULL;
    ck_assert_int_eq(cluster_reader_open(&reader, s, 1), TALLY_ok);
    publish_range(s, 0, 5);
    read_range(reader, 0, 5);
    ck_assert_uint_eq(cluster_reader_copies(reader), 2);
    replicas_set(&r, s, "RESIZED", 1); /* a majority of one */
    publish_range(s, 5, 10);
    read_range(reader, 5, 10);
    ck_assert_uint_eq(cluster_reader_copies(reader), 1);
    replicas_set(&r, s, "RESIZED", 3); /* two again, once the new replicas hold the stream */
    publish_range(s, 10, 15);
    read_range(reader, 10, 15);
    ck_assert_uint_eq(cluster_reader_copies(reader), 2);
    cluster_reader_close(reader);
    raw_close(&r);
    cluster_stream_close(s);
    nats_cluster_stop(&c);
}
END_TEST

int main(void)
{
    if (nats_cluster_server_path() == NULL) {
        fprintf(stderr, "check_stream: nats-server is not installed ($NATS_SERVER: %s); "
                        "skipped (apt-get install nats-server)\n",
                getenv("NATS_SERVER") ? getenv("NATS_SERVER") : "unset");
        return 77;
    }
    const test_row rows[] = {
        {"settings", test_stream_is_created_with_the_required_settings, TEST_TIMEOUT_S},
        {"settings", test_an_unsound_stream_is_refused_naming_the_setting, TEST_TIMEOUT_S},
        {"order", test_concurrent_publishes_are_read_in_one_order_once, TEST_TIMEOUT_S},
        {"order", test_a_retried_publish_is_stored_once, TEST_TIMEOUT_S},
        {"kill", test_publishes_go_on_through_a_killed_server, TEST_TIMEOUT_S},
        {"kill", test_a_reader_goes_on_when_its_consumers_server_dies, TEST_TIMEOUT_S},
        {"aged", test_a_reader_from_an_aged_out_position_is_told_so, TEST_TIMEOUT_S},
        {"replicas", test_a_reader_follows_a_change_of_the_streams_replicas, TEST_TIMEOUT_S},
        {"refused", test_a_consumer_not_made_is_reported_and_a_read_ends_in_its_wait,
         TEST_TIMEOUT_S},
    };
    return test_run_suite(test_suite_of_rows("cluster_stream", TEST_ROWS(rows)));
}
