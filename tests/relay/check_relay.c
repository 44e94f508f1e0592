/*
 * check_relay.c — tests of tally-relay (relay/, docs/RELAY.md) against real
 * servers the tests start: a tallyd (tests/support/tallyd_harness.h), a
 * nats-server with JetStream on loopback with a temporary store, and a
 * small HTTP receiver written here (plain sockets, one connection at a
 * time) that records every delivery, verifies its Standard Webhooks
 * signature with mbedTLS (not the relay's OpenSSL) and fails on demand.
 *
 * - JetStream: 10,000 events relayed while the relay is SIGKILLed 5 times
 *   and nats-server restarted once (down while 1,000 more events are
 *   written, until the relay said a publish failed and is retried); the
 *   stream then holds exactly one
 *   message per event id (its message count, and the ids read back) and
 *   each entity's events in version order.
 * - JetStream, a refusal: an event over the stream's message size is
 *   refused while the next event of its entity would fit; that one waits,
 *   another entity's event is stored, and once the limit is lifted both
 *   are stored in their order.
 * - HTTP, failing receiver: the first 2 attempts of every 3rd event fail;
 *   every event arrives, exactly once after dedupe by webhook-id, every
 *   signature verifies.
 * - HTTP, dead receiver: an always-failing endpoint parks its events in
 *   relay:<endpoint>'s dead-letter queue while another endpoint (with a
 *   type filter) keeps receiving.
 *
 * Without nats-server installed the JetStream tests are left out, said on
 * stderr, and the program exits 77 (skipped) when the rest passed.
 */
#include "config.h"

#include "clients/libtally/tally.h"
#include "common/clock.h"

#include "tests/support/client_support.h"
#include "tests/support/http_client.h"
#include "tests/support/relay_receiver.h"
#include "tests/support/run.h"
#include "tests/support/tallyd_harness.h"
#include "tests/support/tallyd_tls.h"
#include "tests/support/test_support.h"
#include "tests/support/wait.h"

#include <arpa/inet.h>
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <jansson.h>
#include <mbedtls/base64.h>
#include <mbedtls/md.h>
#include <nats/nats.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define TEST_TIMEOUT_S 900
#define WAIT_MS 240000 /* for a condition on a loaded machine */
#define JS_EVENTS 10000
#define JS_ACCOUNTS 2000
#define JS_ENTITLEMENTS 100
#define JS_ROUNDS 80 /* a grant and 79 extends of each entitlement */
#define JS_STEPS 10
#define SECRET_B64 RECEIVER_SECRET_B64
#define SECRET_TEXT "whsec_" SECRET_B64
#define SECRET2_B64 RECEIVER_SECRET2_B64
#define SECRET3_B64 RECEIVER_SECRET3_B64

_Static_assert(JS_ACCOUNTS + JS_ENTITLEMENTS * JS_ROUNDS == JS_EVENTS, "the workload's events");

/* ---- small helpers ---- */

/* A config file, mode 0600: one that holds an endpoint's secret must be
 * private (test_config_with_a_secret_must_be_private). */
static void file_write(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    ck_assert_msg(f != NULL, "%s: %s", path, strerror(errno));
    ck_assert_int_ge(fputs(text, f), 0);
    ck_assert_int_eq(fclose(f), 0);
    ck_assert_int_eq(chmod(path, 0600), 0);
}

/* The relay's config file and log in tallyd's temp dir. */
static void relay_paths(const tallyd_proc *srv, char config[320], char log[320])
{
    snprintf(config, 320, "%s/relay.conf", srv->dir);
    snprintf(log, 320, "%s/relay.log", srv->dir);
}

/* The relays under test and their logs: a wait fails at once when one
 * exited. */
#define WATCHED_MAX 2
static struct {
    pid_t pid;
    const char *log;
} watched[WATCHED_MAX];

/* The text of the log at path ("" when there is none yet). Free it. */
static char *log_text(const char *path)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    char *text = fd >= 0 ? test_fd_read_all(fd) : strdup("");
    ck_assert_ptr_nonnull(text);
    return text;
}

static void relay_must_run(void)
{
    int status;
    for (int i = 0; i < WATCHED_MAX; i++) {
        if (watched[i].pid <= 0 || !test_wait_ms(watched[i].pid, 0, &status))
            continue;
        ck_abort_msg("tally-relay exited (%d); its log:\n%s", test_exit_code(status),
                     log_text(watched[i].log));
    }
}

static void unwatch(pid_t pid)
{
    for (int i = 0; i < WATCHED_MAX; i++)
        if (watched[i].pid == pid)
            watched[i].pid = 0;
}

/* The relay's stderr, appended over its restarts; more: NULL or further
 * arguments, NULL-terminated. */
/* The directory of the relay's config (tallyd's temp dir): its --lock-dir,
 * so that the instance claims of a test are its own. */
static const char *lock_dir_of(const char *config)
{
    static char dir[320];
    snprintf(dir, sizeof(dir), "%s", config);
    char *slash = strrchr(dir, '/');
    ck_assert_ptr_nonnull(slash);
    *slash = '\0';
    return dir;
}

static pid_t relay_start_with(const char *config, const char *log_path, const char *const *more)
{
    int fd = open(log_path, O_WRONLY | O_CREAT | O_APPEND, 0600);
    ck_assert_int_ge(fd, 0);
    const char *argv[20] = {tallyd_program("tally-relay"), "--config", config, "--lock-dir",
                            lock_dir_of(config)};
    for (int i = 0; more && more[i]; i++) {
        ck_assert_int_lt(5 + i, 19);
        argv[5 + i] = more[i];
    }
    pid_t pid = test_spawn(argv, NULL, fd, fd);
    close(fd);
    int slot = 0;
    while (slot < WATCHED_MAX - 1 && watched[slot].pid > 0)
        slot++;
    watched[slot].pid = pid;
    watched[slot].log = log_path;
    return pid;
}

static pid_t relay_start(const char *config, const char *log_path)
{
    return relay_start_with(config, log_path, NULL);
}

static bool wait_log_says(const char *path, const char *text);

/* A relay with --http on a port of the kernel's and more args (at most
 * 6, NULL-terminated): its pid, the port read from its --ready-file (a
 * file beside its log, waited for) into *port. */
static pid_t relay_start_http(const char *config, const char *log_path, const char *const *more,
                              int *port)
{
    static char ready[340];
    snprintf(ready, sizeof(ready), "%s.ready", log_path);
    unlink(ready); /* an earlier relay's */
    const char *args[12] = {"--http", "http://127.0.0.1:0", "--ready-file", ready};
    for (int i = 0; more && more[i]; i++) {
        ck_assert_int_lt(4 + i, 11);
        args[4 + i] = more[i];
    }
    pid_t pid = relay_start_with(config, log_path, args);
    char text[400] = "";
    for (int64_t until = test_deadline_ms(WAIT_MS); clock_mono_ms() < until;) {
        int fd = open(ready, O_RDONLY | O_CLOEXEC);
        if (fd >= 0) { /* renamed into place whole */
            ssize_t n = read(fd, text, sizeof(text) - 1);
            close(fd);
            text[n > 0 ? n : 0] = '\0';
            break;
        }
        relay_must_run();
        test_pause_ms(TEST_WAIT_POLL_MS);
    }
    unsigned p = 0;
    ck_assert_msg(sscanf(text, "http http://127.0.0.1:%u\n", &p) == 1 && p > 0 && p < 65536,
                  "the relay's ready file %s: \"%s\"; its log:\n%s", ready, text,
                  log_text(log_path));
    ck_assert_msg(wait_log_says(log_path, "endpoints: http http://127.0.0.1:"),
                  "the relay logged no endpoints line");
    *port = (int)p;
    return pid;
}

static void relay_kill(pid_t pid)
{
    unwatch(pid);
    kill(pid, SIGKILL);
    test_wait(pid);
}

/* SIGTERM: the relay must stop cleanly (exit 0) within its long-poll. */
static void relay_stop(pid_t pid, const char *log_path)
{
    unwatch(pid);
    kill(pid, SIGTERM);
    int status = 0;
    bool ended = test_wait_ms(pid, 60000, &status);
    if (!ended)
        relay_kill(pid);
    if (!ended || test_exit_code(status) != 0) {
        ck_abort_msg("tally-relay did not stop cleanly (exit %d); its log:\n%s",
                     ended ? test_exit_code(status) : -1, log_text(log_path));
    }
}

static tally_subscriber_info sub_info(tally_client *c, const char *name)
{
    tally_subscriber_info i;
    memset(&i, 0, sizeof(i));
    int rc = tally_subscriber_get(c, name, &i);
    ck_assert_msg(rc == TALLY_ok || rc == TALLY_subscriber_not_found, "sub_get %s: %s", name,
                  tally_strerror(rc));
    return i;
}

/* Every event id of the log, as text, in seq order (head of them). */
static char (*log_ids(tally_client *c, uint64_t *head))[37]
{
    *head = test_client_head(c);
    char(*ids)[37] = calloc(*head + 1, sizeof(*ids));
    ck_assert_ptr_nonnull(ids);
    tally_event page[1000];
    for (uint64_t from = 1; from <= *head;) {
        size_t count = 0;
        uint64_t h;
        int rc = tally_log_read(c, from, 1000, 0, page, 1000, &count, &h);
        ck_assert_msg(rc == TALLY_ok && count > 0, "log_read: %s", tally_strerror(rc));
        for (size_t i = 0; i < count; i++)
            tally_uuid_format(&page[i].id, ids[page[i].seq - 1]);
        from = page[count - 1].seq + 1;
        tally_events_release(page, count);
    }
    return ids;
}

static int text_cmp(const void *a, const void *b) { return strcmp(a, b); }

/* ---- workload ---- */

#define DAY_MS INT64_C(86400000)

/* Step s of JS_STEPS: JS_ACCOUNTS / JS_STEPS account opens and the
 * entitlement rounds of this step (a grant in round 0, then extends), in
 * batches of 100: 1000 events. */
static void workload_step(tally_client *c, int step, int64_t base_ms)
{
    tally_result results[100];
    uint64_t per = JS_ACCOUNTS / JS_STEPS;
    test_client_open_accounts(c, 1 + (uint64_t)step * per, per);
    int rounds = JS_ROUNDS / JS_STEPS;
    for (int r = step * rounds; r < (step + 1) * rounds; r++) {
        tally_batch *b = tally_batch_new(false);
        ck_assert_ptr_nonnull(b);
        char subjects[JS_ENTITLEMENTS][16];
        for (int e = 0; e < JS_ENTITLEMENTS; e++) {
            snprintf(subjects[e], sizeof(subjects[e]), "user-%d", e);
            tally_entitlement_args a = {.subject = subjects[e], .feature = "pro",
                                        .valid_until_ms = base_ms + r * DAY_MS};
            ck_assert_int_eq(r == 0 ? tally_batch_grant(b, NULL, &a) : tally_batch_extend(b, NULL, &a),
                             TALLY_ok);
        }
        int rc = tally_batch_send(c, b, NULL, results, JS_ENTITLEMENTS);
        ck_assert_msg(rc == TALLY_ok, "entitlements: %s", tally_strerror(rc));
        for (int e = 0; e < JS_ENTITLEMENTS; e++)
            ck_assert_msg(results[e].code == TALLY_ok, "round %d: %s", r,
                          tally_strerror(results[e].code));
        tally_batch_free(b);
    }
}

/* ---- nats-server ---- */

typedef struct nats_proc {
    char store[300], url[64], log[320], port[12];
    pid_t pid;
} nats_proc;

static const char *nats_server_path(void)
{
    const char *p = getenv("NATS_SERVER");
    return p && *p && access(p, X_OK) == 0 ? p : NULL;
}

/* The port nats-server says it listens on in log (its first start, with
 * -p -1: any), waited for; 0 when it exits or never says. */
static unsigned nats_port_said(const char *log, pid_t pid)
{
    static const char said[] = "Listening for client connections on 127.0.0.1:";
    for (int64_t until = test_deadline_ms(30000); clock_mono_ms() < until;) {
        char *text = log_text(log);
        const char *at = text ? strstr(text, said) : NULL;
        unsigned port = at ? (unsigned)atoi(at + sizeof(said) - 1) : 0;
        free(text);
        int status;
        if (port > 0 || test_wait_ms(pid, 0, &status))
            return port;
        test_pause_ms(TEST_WAIT_POLL_MS);
    }
    return 0;
}

/* nats-server on a port of the kernel's at its first start (n->port ""),
 * on the same port after (the relay's config names it). */
static void nats_start(nats_proc *n)
{
    int fd = open(n->log, O_WRONLY | O_CREAT | O_APPEND, 0600);
    ck_assert_int_ge(fd, 0);
    const char *argv[] = {nats_server_path(), "-js", "-a", "127.0.0.1", "-p",
                          n->port[0] ? n->port : "-1", "-sd", n->store, NULL};
    n->pid = test_spawn(argv, NULL, fd, fd);
    close(fd);
    if (!n->port[0]) {
        unsigned port = nats_port_said(n->log, n->pid);
        ck_assert_msg(port > 0, "nats-server said no port; its log:\n%s", log_text(n->log));
        snprintf(n->port, sizeof(n->port), "%u", port);
        snprintf(n->url, sizeof(n->url), "nats://127.0.0.1:%s", n->port);
    }
    char tcp[64];
    snprintf(tcp, sizeof(tcp), "tcp://127.0.0.1:%s", n->port);
    int64_t until = test_deadline_ms(30000);
    int s = -1;
    while (s < 0 && clock_mono_ms() < until) {
        s = tallyd_connect(tcp, test_deadline_ms(1000));
        if (s < 0)
            test_pause_ms(20);
    }
    ck_assert_msg(s >= 0, "nats-server did not listen on %s", n->url);
    close(s);
}

static void nats_stop(nats_proc *n)
{
    int status;
    kill(n->pid, SIGTERM);
    if (!test_wait_ms(n->pid, 30000, &status)) {
        kill(n->pid, SIGKILL);
        test_wait(n->pid);
    }
    n->pid = 0;
}

/* The stream's message count, 0 while it cannot be read (missing, or the
 * server restarting). */
static uint64_t stream_messages(jsCtx *js)
{
    jsStreamInfo *si = NULL;
    jsErrCode jerr = 0;
    uint64_t n = 0;
    if (js_GetStreamInfo(&si, js, "TALLY", NULL, &jerr) == NATS_OK)
        n = si->State.Msgs;
    jsStreamInfo_Destroy(si);
    return n;
}

static bool wait_stream_beyond(jsCtx *js, uint64_t count)
{
    int64_t until = test_deadline_ms(WAIT_MS);
    while (clock_mono_ms() < until) {
        if (stream_messages(js) > count)
            return true;
        relay_must_run();
        test_pause_ms(20);
    }
    return false;
}

/* Wait until the file at path holds text (the relay's log). */
static bool wait_log_says(const char *path, const char *text)
{
    int64_t until = test_deadline_ms(WAIT_MS);
    while (clock_mono_ms() < until) {
        char *out = log_text(path);
        bool found = strstr(out, text) != NULL;
        free(out);
        if (found)
            return true;
        test_pause_ms(50);
    }
    return false;
}

typedef struct stored {
    char id[40];
    char entity[96];
    uint64_t version, stream_seq, tally_seq;
} stored;

static int stored_by_entity(const void *a, const void *b)
{
    const stored *x = a, *y = b;
    int c = strcmp(x->entity, y->entity);
    return c ? c : (x->stream_seq > y->stream_seq) - (x->stream_seq < y->stream_seq);
}

static const char *header(natsMsg *m, const char *key)
{
    const char *v = NULL;
    ck_assert_msg(natsMsgHeader_Get(m, key, &v) == NATS_OK && v, "header %s missing", key);
    return v;
}

/* Read every message of the stream back: its headers and its body's ids. */
static stored *stream_read(jsCtx *js, uint64_t count)
{
    stored *all = calloc(count, sizeof(*all));
    ck_assert_ptr_nonnull(all);
    for (uint64_t seq = 1; seq <= count; seq++) {
        natsMsg *m = NULL;
        jsErrCode jerr = 0;
        natsStatus s = js_GetMsg(&m, js, "TALLY", seq, NULL, &jerr);
        ck_assert_msg(s == NATS_OK, "stream seq %" PRIu64 ": %s", seq, natsStatus_GetText(s));
        stored *x = &all[seq - 1];
        x->stream_seq = seq;
        snprintf(x->id, sizeof(x->id), "%s", header(m, "Nats-Msg-Id"));
        snprintf(x->entity, sizeof(x->entity), "%s", header(m, "Tally-Entity"));
        x->version = strtoull(header(m, "Tally-Entity-Version"), NULL, 10);
        x->tally_seq = strtoull(header(m, "Tally-Seq"), NULL, 10);
        json_error_t err;
        json_t *doc = json_loadb(natsMsg_GetData(m), (size_t)natsMsg_GetDataLength(m), 0, &err);
        ck_assert_msg(doc != NULL, "stream seq %" PRIu64 ": not JSON: %s", seq, err.text);
        ck_assert_str_eq(json_string_value(json_object_get(doc, "event_id")), x->id);
        ck_assert_uint_eq(json_integer_value(json_object_get(doc, "seq")), x->tally_seq);
        const char *type = json_string_value(json_object_get(doc, "type"));
        char subject[64];
        snprintf(subject, sizeof(subject), "tally.events.%s", type ? type : "?");
        ck_assert_str_eq(natsMsg_GetSubject(m), subject);
        ck_assert_ptr_nonnull(json_object_get(json_object_get(doc, "data"),
                                              strncmp(type, "account", 7) == 0 ? "account"
                                                                               : "entitlement"));
        json_decref(doc);
        natsMsg_Destroy(m);
    }
    return all;
}

/* Exactly one message per event id: the ids read back, sorted, are the
 * log's ids, sorted. */
static void assert_one_message_per_event(stored *all, uint64_t count, char (*ids)[37],
                                         uint64_t head)
{
    ck_assert_uint_eq(count, head);
    char(*got)[37] = calloc(count, sizeof(*got));
    ck_assert_ptr_nonnull(got);
    for (uint64_t i = 0; i < count; i++)
        snprintf(got[i], sizeof(got[i]), "%s", all[i].id);
    qsort(got, count, sizeof(*got), text_cmp);
    qsort(ids, head, sizeof(*ids), text_cmp);
    for (uint64_t i = 0; i < count; i++) {
        ck_assert_msg(i == 0 || strcmp(got[i], got[i - 1]) != 0, "event %s twice in the stream",
                      got[i]);
        ck_assert_msg(strcmp(got[i], ids[i]) == 0, "stream id %s, log id %s", got[i], ids[i]);
    }
    free(got);
}

/* In stream order, each entity's versions only grow. */
static void assert_entity_order(stored *all, uint64_t count)
{
    qsort(all, count, sizeof(*all), stored_by_entity);
    for (uint64_t i = 1; i < count; i++)
        if (strcmp(all[i].entity, all[i - 1].entity) == 0)
            ck_assert_msg(all[i].version > all[i - 1].version,
                          "%s: version %" PRIu64 " stored after %" PRIu64, all[i].entity,
                          all[i].version, all[i - 1].version);
}

/* A tallyd with a client, a nats-server with a client of its own
 * (reconnecting), and the relay's config: [nats] on that server, stream
 * TALLY, a duplicate window of an hour, and the settings given. */
typedef struct js_fixture {
    test_client_fixture f;
    nats_proc n;
    char config[320], log[320];
    natsOptions *options;
    natsConnection *nc;
    jsCtx *js;
} js_fixture;

static void js_up_window(js_fixture *j, unsigned window_s, const char *settings);

static void js_up(js_fixture *j, const char *settings)
{
    js_up_window(j, 3600, settings);
}

static void js_up_window(js_fixture *j, unsigned window_s, const char *settings)
{
    memset(j, 0, sizeof(*j));
    test_client_up(&j->f);
    nats_proc *n = &j->n;
    snprintf(n->store, sizeof(n->store), "%s/nats", j->f.srv.dir);
    snprintf(n->log, sizeof(n->log), "%s/nats.log", j->f.srv.dir);
    nats_start(n); /* on a port of the kernel's: n->port, n->url */
    char text[2048];
    relay_paths(&j->f.srv, j->config, j->log);
    snprintf(text, sizeof(text),
             "url = %s\n[nats]\nurl = %s\nstream = TALLY\nduplicate_window_s = %u\n%s",
             j->f.srv.url, n->url, window_s, settings);
    file_write(j->config, text);
    ck_assert(natsOptions_Create(&j->options) == NATS_OK &&
              natsOptions_SetURL(j->options, n->url) == NATS_OK &&
              natsOptions_SetMaxReconnect(j->options, -1) == NATS_OK &&
              natsOptions_SetReconnectWait(j->options, 100) == NATS_OK);
    ck_assert(natsConnection_Connect(&j->nc, j->options) == NATS_OK);
    ck_assert(natsConnection_JetStream(&j->js, j->nc, NULL) == NATS_OK);
}

static void js_down(js_fixture *j)
{
    jsCtx_Destroy(j->js);
    natsConnection_Destroy(j->nc);
    natsOptions_Destroy(j->options);
    nats_stop(&j->n);
    test_client_down(&j->f);
}

static void wait_ack_floor(tally_client *c, const char *name, uint64_t seq)
{
    int64_t until = test_deadline_ms(WAIT_MS);
    while (clock_mono_ms() < until && sub_info(c, name).ack_floor < seq) {
        relay_must_run();
        test_pause_ms(50);
    }
    ck_assert_uint_eq(sub_info(c, name).ack_floor, seq);
}

/* The length of the file at path (the relay's log so far). */
static size_t log_length(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 ? (size_t)st.st_size : 0;
}

/* The tally seq of the first retry the relay's log at path says after its
 * first `from` bytes ("nats: seq N: ...; again in"), waited for; 0 when
 * it says none. */
static uint64_t wait_retry_said(const char *path, size_t from)
{
    static const char said[] = "tally-relay: nats: seq ";
    for (int64_t until = test_deadline_ms(WAIT_MS); clock_mono_ms() < until;) {
        char *out = log_text(path);
        uint64_t seq = 0;
        for (const char *at = strlen(out) > from ? strstr(out + from, said) : NULL;
             at != NULL && seq == 0; at = strstr(at + 1, said)) {
            const char *end = strchr(at, '\n');
            const char *again = strstr(at, "; again in ");
            if (end != NULL && again != NULL && again < end)
                seq = strtoull(at + sizeof(said) - 1, NULL, 10);
        }
        free(out);
        if (seq > 0)
            return seq;
        relay_must_run();
        test_pause_ms(50);
    }
    return 0;
}

/* Write step `step` while the broker is down, and make sure the relay
 * tried it: first the relay acknowledges every event before it (so it has
 * nothing in flight and its next fetch is this step's), then the broker
 * stops, the step is written, and the relay must say that a publish of
 * one of its events failed and is retried; none of them is acknowledged
 * meanwhile. Then the broker starts again. */
static void step_while_broker_down(js_fixture *j, int step, int64_t base_ms)
{
    uint64_t head = test_client_head(j->f.c);
    wait_ack_floor(j->f.c, "relay", head);
    nats_stop(&j->n);
    size_t said = log_length(j->log);
    workload_step(j->f.c, step, base_ms);
    uint64_t seq = wait_retry_said(j->log, said);
    char *log = log_text(j->log);
    ck_assert_msg(seq > head, "no publish of seq %" PRIu64 " or later failed and was retried "
                  "while the broker was down; the relay's log:\n%s", head + 1, log);
    free(log);
    ck_assert_uint_eq(sub_info(j->f.c, "relay").ack_floor, head);
    nats_start(&j->n);
}

START_TEST(test_jetstream_survives_kills_and_a_broker_restart)
{
    js_fixture j;
    js_up(&j, "max_pending = 128\nfetch = 256\nack_timeout_ms = 3000\n");
    test_client_fixture *f = &j.f;
    jsCtx *js = j.js;
    const char *config = j.config, *relay_log = j.log;
    pid_t relay = relay_start(config, relay_log);
    int64_t base_ms = clock_wall_ms() + 365 * DAY_MS;
    /* Kill the relay after steps 1, 3, 6, 7 and 8, once the stream grew
     * during the step (so most kills land mid-run). Step 5 is written while
     * the broker is down (step_while_broker_down). */
    static const bool kill_after[JS_STEPS] = {[1] = true, [3] = true, [6] = true, [7] = true,
                                              [8] = true};
    int kills = 0;
    for (int step = 0; step < JS_STEPS; step++) {
        uint64_t before = stream_messages(js);
        workload_step(f->c, step, base_ms);
        if (step == 4) {
            step_while_broker_down(&j, ++step, base_ms);
        } else if (kill_after[step]) {
            ck_assert_msg(wait_stream_beyond(js, before), "no progress before kill %d", kills + 1);
            relay_kill(relay);
            kills++;
            relay = relay_start(config, relay_log);
        }
    }
    ck_assert_int_eq(kills, 5);
    uint64_t head = test_client_head(f->c);
    ck_assert_uint_eq(head, JS_EVENTS);
    int64_t until = test_deadline_ms(WAIT_MS);
    while (clock_mono_ms() < until && sub_info(f->c, "relay").ack_floor < head) {
        relay_must_run();
        test_pause_ms(50);
    }
    ck_assert_uint_eq(sub_info(f->c, "relay").ack_floor, head);
    ck_assert_uint_eq(sub_info(f->c, "relay").dead_letters, 0);
    relay_stop(relay, relay_log);

    uint64_t count = stream_messages(js);
    ck_assert_uint_eq(count, JS_EVENTS);
    uint64_t ids_head;
    char(*ids)[37] = log_ids(f->c, &ids_head);
    stored *all = stream_read(js, count);
    assert_one_message_per_event(all, count, ids, ids_head);
    assert_entity_order(all, count);
    free(all);
    free(ids);
    js_down(&j);
}
END_TEST

/* ---- exactly once in the stream, whatever the outage (docs/RELAY.md) ---- */

#define SHORT_WINDOW_S 2

/* The stream TALLY with a short duplicate window, shared with another
 * publisher (the test's probes on probe.>). */
/* The stream TALLY on subjects, file storage, 1 replica, a window of
 * window_s (the subjects must outlive sc). */
static void stream_config(jsStreamConfig *sc, const char **subjects, int count, int64_t window_s)
{
    jsStreamConfig_Init(sc);
    sc->Name = "TALLY";
    sc->Subjects = subjects;
    sc->SubjectsLen = count;
    sc->Storage = js_FileStorage;
    sc->Replicas = 1;
    sc->Duplicates = window_s * 1000000000;
}

static void stream_put_shared(jsCtx *js)
{
    const char *subjects[] = {"tally.events.>", "probe.>"};
    jsStreamConfig sc;
    stream_config(&sc, subjects, 2, SHORT_WINDOW_S);
    jsErrCode jerr = 0;
    natsStatus s = js_AddStream(NULL, js, &sc, NULL, &jerr);
    ck_assert_msg(s == NATS_OK, "stream: %s (%d)", natsStatus_GetText(s), (int)jerr);
}

/* Wait until the stream's duplicate window has passed `windows` times
 * from now: each time a probe with a new Nats-Msg-Id is stored, then
 * published again until JetStream no longer calls it a duplicate (a
 * fact, not a clock). */
static bool probe_is_duplicate(jsCtx *js, const char *id)
{
    jsPubOptions po;
    jsPubOptions_Init(&po);
    po.MsgId = id;
    jsPubAck *pa = NULL;
    jsErrCode jerr = 0;
    natsStatus s = js_Publish(&pa, js, "probe.window", "p", 1, &po, &jerr);
    ck_assert_msg(s == NATS_OK, "probe: %s (%d)", natsStatus_GetText(s), (int)jerr);
    bool duplicate = pa->Duplicate;
    jsPubAck_Destroy(pa);
    return duplicate;
}

static void windows_pass(jsCtx *js, int windows)
{
    static int probes;
    for (int w = 0; w < windows; w++) {
        char id[32];
        snprintf(id, sizeof(id), "probe-%d", ++probes);
        ck_assert(!probe_is_duplicate(js, id));
        bool duplicate = true;
        for (int64_t until = test_deadline_ms(WAIT_MS); duplicate && clock_mono_ms() < until;) {
            test_pause_ms(100);
            duplicate = probe_is_duplicate(js, id);
        }
        ck_assert_msg(!duplicate, "the duplicate window never passed");
    }
}

/* Every message on tally.events.> read back: how many there are of each
 * tally seq 1..head; fails naming every seq that is not there exactly
 * once. The probes are skipped (another publisher). */
static void assert_each_seq_once(jsCtx *js, uint64_t head)
{
    jsStreamInfo *si = NULL;
    jsErrCode jerr = 0;
    ck_assert(js_GetStreamInfo(&si, js, "TALLY", NULL, &jerr) == NATS_OK);
    uint64_t first = si->State.FirstSeq, last = si->State.LastSeq;
    jsStreamInfo_Destroy(si);
    unsigned *count = calloc(head + 1, sizeof(*count));
    ck_assert_ptr_nonnull(count);
    uint64_t extra = 0, foreign = 0;
    for (uint64_t seq = first; seq <= last; seq++) {
        natsMsg *m = NULL;
        natsStatus s = js_GetMsg(&m, js, "TALLY", seq, NULL, &jerr);
        ck_assert_msg(s == NATS_OK, "stream seq %" PRIu64 ": %s", seq, natsStatus_GetText(s));
        if (strncmp(natsMsg_GetSubject(m), "tally.events.", 13) != 0) {
            foreign++;
        } else {
            uint64_t tally_seq = strtoull(header(m, "Tally-Seq"), NULL, 10);
            ck_assert_msg(tally_seq >= 1 && tally_seq <= head, "Tally-Seq %" PRIu64, tally_seq);
            extra += count[tally_seq]++ > 0;
        }
        natsMsg_Destroy(m);
    }
    for (uint64_t seq = 1; seq <= head; seq++)
        if (count[seq] != 1)
            fprintf(stderr, "tally seq %" PRIu64 ": %u messages in the stream\n", seq, count[seq]);
    for (uint64_t seq = 1; seq <= head; seq++)
        ck_assert_msg(count[seq] == 1,
                      "tally seq %" PRIu64 " is %u times in the stream (%" PRIu64
                      " duplicates in all, %" PRIu64 " probes)",
                      seq, count[seq], extra, foreign);
    free(count);
}

/* The highest Tally-Seq among the stream's messages from stream seq from. */
static uint64_t stream_tally_seq_max(jsCtx *js, uint64_t from)
{
    uint64_t max = 0, last = stream_messages(js);
    for (uint64_t seq = from; seq <= last; seq++) {
        natsMsg *m = NULL;
        jsErrCode jerr = 0;
        if (js_GetMsg(&m, js, "TALLY", seq, NULL, &jerr) != NATS_OK)
            continue;
        const char *v = NULL;
        if (natsMsgHeader_Get(m, "Tally-Seq", &v) == NATS_OK && v && strtoull(v, NULL, 10) > max)
            max = strtoull(v, NULL, 10);
        natsMsg_Destroy(m);
    }
    return max;
}

/* Wait until the log at path holds text after its first `from` bytes. */
static bool wait_log_says_after(const char *path, size_t from, const char *text)
{
    for (int64_t until = test_deadline_ms(WAIT_MS); clock_mono_ms() < until;) {
        char *out = log_text(path);
        bool found = strlen(out) > from && strstr(out + from, text) != NULL;
        free(out);
        if (found)
            return true;
        relay_must_run();
        test_pause_ms(50);
    }
    return false;
}

/* The relay's log at path holds text (said before what the test waited for). */
static void assert_log_says(const char *path, const char *text)
{
    char *log = log_text(path);
    ck_assert_msg(strstr(log, text) != NULL, "the relay's log lacks \"%s\":\n%s", text, log);
    free(log);
}

/* Leave events in the stream that tallyd still has in flight, with the
 * relay (alone on the subscriber) dead: the broker frozen (SIGSTOP), 100
 * events written, the relay publishes them and gets no PubAck; once its
 * retry pause is 1.6 s the broker is thawed and stores them (their
 * PubAcks come too late), and the relay is killed in that pause. Tried
 * again (the relay restarted) when it acknowledged them first. *first_id:
 * the next account id. */
static void leave_stored_unacked(js_fixture *j, pid_t *relay, const char *const *args,
                                 uint64_t *first_id)
{
    for (int attempt = 0; attempt < 5; attempt++) {
        uint64_t before = stream_messages(j->js);
        size_t said = log_length(j->log);
        kill(j->n.pid, SIGSTOP);
        test_client_open_accounts(j->f.c, *first_id, 100);
        *first_id += 100;
        bool waited = wait_log_says_after(j->log, said, "again in 1600 ms");
        kill(j->n.pid, SIGCONT);
        ck_assert_msg(waited, "the relay did not retry; its log:\n%s", log_text(j->log));
        for (int64_t until = test_deadline_ms(WAIT_MS);
             clock_mono_ms() < until && stream_messages(j->js) < before + 100;)
            test_pause_ms(5);
        relay_kill(*relay);
        uint64_t floor = sub_info(j->f.c, "relay").ack_floor;
        if (stream_tally_seq_max(j->js, before + 1) > floor)
            return;
        *relay = relay_start_with(j->config, j->log, args); /* it acked in time: again */
        wait_ack_floor(j->f.c, "relay", test_client_head(j->f.c));
    }
    ck_abort_msg("the relay never left a stored event unacknowledged");
}

/* A fixture with a stream of a short window shared with the test's
 * probes, a relay started with args (NULL-terminated, or NULL) and
 * `events` events relayed and acknowledged: the relay's pid. */
static pid_t short_window_up(js_fixture *j, const char *settings, const char *const *args,
                             uint64_t events)
{
    js_up_window(j, SHORT_WINDOW_S, settings);
    stream_put_shared(j->js);
    pid_t relay = relay_start_with(j->config, j->log, args);
    test_client_open_accounts(j->f.c, 1, events);
    wait_ack_floor(j->f.c, "relay", events);
    return relay;
}

/* Every event up to head acknowledged by the relay logging to log, which
 * is stopped; then each tally seq is in the stream once and the relay
 * said it found some there. */
static void short_window_down(js_fixture *j, pid_t relay, const char *log, uint64_t head)
{
    wait_ack_floor(j->f.c, "relay", head);
    relay_stop(relay, log);
    assert_each_seq_once(j->js, head);
    assert_log_says(log, "in stream TALLY already");
    js_down(j);
}

/* A relay away three times longer than the duplicate window (killed with
 * stored events it had not acknowledged): once restarted, it gets them
 * back from tallyd, finds them in the stream and acknowledges them
 * without publishing them again. */
START_TEST(test_jetstream_relay_away_past_the_window_stores_each_event_once)
{
    js_fixture j;
    pid_t relay = short_window_up(&j, "ack_timeout_ms = 1000\n", NULL, 300);
    uint64_t next_id = 301;
    leave_stored_unacked(&j, &relay, NULL, &next_id);
    windows_pass(j.js, 3); /* away for three windows */
    relay = relay_start(j.config, j.log);
    test_client_open_accounts(j.f.c, next_id, 100);
    short_window_down(&j, relay, j.log, test_client_head(j.f.c));
}
END_TEST

/* The broker frozen (SIGSTOP) while the relay publishes a batch: no
 * PubAck comes, the relay retries with a growing pause; thawed once the
 * pause is 6.4 s (over three windows), the broker stores the first copies
 * and the relay's next round finds them instead of publishing them a
 * second time, past the window. */
START_TEST(test_jetstream_broker_outage_past_the_window_stores_each_event_once)
{
    js_fixture j;
    pid_t relay = short_window_up(&j, "ack_timeout_ms = 1000\n", NULL, 100);
    kill(j.n.pid, SIGSTOP);
    test_client_open_accounts(j.f.c, 101, 100);
    bool waited = wait_log_says(j.log, "again in 6400 ms");
    kill(j.n.pid, SIGCONT);
    ck_assert_msg(waited, "the relay did not retry for long; its log:\n%s", log_text(j.log));
    short_window_down(&j, relay, j.log, 200);
}
END_TEST

/* A fail-over: the relay dies holding stored events it had not
 * acknowledged; a second relay (another instance) takes them over once
 * their 6 s lease (three windows) has ended and the copies are three
 * windows old, finds them in the stream and does not publish them again. */
START_TEST(test_jetstream_failover_past_the_window_stores_each_event_once)
{
    js_fixture j;
    const char *one[] = {"--instance", "one", NULL}, *two[] = {"--instance", "two", NULL};
    pid_t relay1 = short_window_up(&j, "ack_wait_ms = 6000\nack_timeout_ms = 1000\n", one, 300);
    char log2[340];
    snprintf(log2, sizeof(log2), "%s.2", j.log);
    uint64_t next_id = 301;
    leave_stored_unacked(&j, &relay1, one, &next_id);
    windows_pass(j.js, 3); /* the copies are three windows old when the lease ends */
    pid_t relay2 = relay_start_with(j.config, log2, two);
    test_client_open_accounts(j.f.c, next_id, 100);
    short_window_down(&j, relay2, log2, test_client_head(j.f.c));
}
END_TEST

/* The stream TALLY as the relay would create it, with a message size
 * limit (-1: none): created, or updated when it exists. */
static void stream_put(jsCtx *js, int32_t max_msg_size, bool create)
{
    const char *subjects[] = {"tally.events.>"};
    jsStreamConfig sc;
    stream_config(&sc, subjects, 1, 3600);
    sc.MaxMsgSize = max_msg_size;
    jsErrCode jerr = 0;
    natsStatus s = create ? js_AddStream(NULL, js, &sc, NULL, &jerr)
                          : js_UpdateStream(NULL, js, &sc, NULL, &jerr);
    ck_assert_msg(s == NATS_OK, "stream: %s (%d)", natsStatus_GetText(s), (int)jerr);
}

static void grant_or_extend(tally_client *c, bool grant, const char *subject, const char *key,
                            int64_t until_ms)
{
    tally_entitlement_args a = {.subject = subject, .feature = "pro", .valid_until_ms = until_ms};
    tally_result r;
    int rc = grant ? tally_grant(c, key, &a, &r) : tally_extend(c, key, &a, &r);
    ck_assert_msg(rc == TALLY_ok && r.code == TALLY_ok, "%s: %s %s", subject, tally_strerror(rc),
                  tally_strerror(r.code));
}

/* JetStream refuses an event (over the stream's message size: a long
 * idempotency key makes its document larger) while it accepts the next
 * event of the same entity: the next one must wait, other entities go on,
 * and once the limit is lifted both are stored in their order. */
START_TEST(test_jetstream_refusal_holds_back_the_entity)
{
    js_fixture j;
    js_up(&j, "");
    test_client_fixture *f = &j.f;
    jsCtx *js = j.js;
    const char *config = j.config, *relay_log = j.log;
    stream_put(js, -1, true);
    pid_t relay = relay_start(config, relay_log);
    int64_t until_ms = clock_wall_ms() + 365 * DAY_MS;

    /* A probe of the same shape tells the size of a grant with a short key. */
    grant_or_extend(f->c, true, "probe", "p", until_ms);
    ck_assert(wait_stream_beyond(js, 0));
    natsMsg *m = NULL;
    jsErrCode jerr = 0;
    ck_assert(js_GetMsg(&m, js, "TALLY", 1, NULL, &jerr) == NATS_OK);
    int probe_bytes = natsMsg_GetDataLength(m);
    natsMsg_Destroy(m);
    /* The limit counts the headers too (about 135 bytes here, the same for
     * every event below): a grant with a 120-byte key is over it by ~55
     * bytes, one with a 1-byte key under it by ~65. */
    stream_put(js, probe_bytes + 200, false);

    char long_key[121];
    memset(long_key, 'k', 120);
    long_key[120] = '\0';
    grant_or_extend(f->c, true, "alice", long_key, until_ms);       /* refused */
    grant_or_extend(f->c, false, "alice", "y", until_ms + DAY_MS); /* would fit */
    ck_assert_msg(wait_log_says(relay_log, "refused"), "the grant was not refused");
    grant_or_extend(f->c, true, "carol", "c", until_ms); /* another entity: not held back */
    if (!wait_stream_beyond(js, 1))
        ck_abort_msg("carol's grant was held back too; the relay's log:\n%s",
                     log_text(relay_log));
    stored *two = stream_read(js, 2);
    ck_assert_str_eq(two[1].entity, "entitlement:carol/pro");
    free(two);
    ck_assert_uint_eq(stream_messages(js), 2); /* alice's extend waits for her grant */

    stream_put(js, -1, false);
    uint64_t head = test_client_head(f->c);
    int64_t until = test_deadline_ms(WAIT_MS);
    while (clock_mono_ms() < until && sub_info(f->c, "relay").ack_floor < head) {
        relay_must_run();
        test_pause_ms(20);
    }
    relay_stop(relay, relay_log);
    ck_assert_uint_eq(stream_messages(js), head);
    stored *all = stream_read(js, head);
    ck_assert_str_eq(all[2].entity, "entitlement:alice/pro");
    ck_assert_uint_eq(all[2].version, 1);
    ck_assert_str_eq(all[3].entity, "entitlement:alice/pro");
    ck_assert_uint_eq(all[3].version, 2);
    free(all);
    js_down(&j);
}
END_TEST

/* ---- the HTTP receiver (tests/support/relay_receiver.h) ---- */

static bool wait_delivered(receiver *r, const char *path, size_t count)
{
    int64_t until = test_deadline_ms(WAIT_MS);
    while (clock_mono_ms() < until) {
        if (receiver_delivered(r, path, NULL) >= count)
            return true;
        relay_must_run();
        test_pause_ms(20);
    }
    return false;
}

/* A tallyd with a client, the receiver, and the relay's paths. */
typedef struct http_fixture {
    test_client_fixture f;
    receiver *r;
    char config[320], log[320];
} http_fixture;

/* Start them and the relay with a config of endpoints, in which each '@'
 * stands for the receiver's base URL, http://127.0.0.1:PORT; its tallyd
 * url the list first_url,tallyd's when first_url is not NULL. */
/* The receiver and the relay's config of an http_fixture whose tallyd is
 * up, without the relay. */
static void http_config_only(http_fixture *h, const char *endpoints, const char *first_url)
{
    h->r = receiver_start();
    relay_paths(&h->f.srv, h->config, h->log);
    char text[4096], base[32];
    snprintf(base, sizeof(base), "http://127.0.0.1:%u", (unsigned)h->r->port);
    size_t at = (size_t)snprintf(text, sizeof(text), "url = %s%s%s\n", first_url ? first_url : "",
                                 first_url ? "," : "", h->f.srv.url);
    for (const char *p = endpoints; *p && at + sizeof(base) < sizeof(text); p++)
        at += (size_t)snprintf(text + at, sizeof(text) - at, "%.*s", *p == '@' ? 31 : 1,
                               *p == '@' ? base : p);
    file_write(h->config, text);
}

/* tallyd, the receiver and the relay's config, without the relay. */
static void http_config_write(http_fixture *h, const char *endpoints, const char *first_url)
{
    test_client_up(&h->f);
    http_config_only(h, endpoints, first_url);
}

/* The receiver and the relay of an http_fixture whose tallyd is up. */
static pid_t http_relay_up(http_fixture *h, const char *endpoints, const char *first_url)
{
    http_config_only(h, endpoints, first_url);
    return relay_start(h->config, h->log);
}

static pid_t http_up_listed(http_fixture *h, const char *endpoints, const char *first_url)
{
    test_client_up(&h->f);
    return http_relay_up(h, endpoints, first_url);
}

static pid_t http_up(http_fixture *h, const char *endpoints)
{
    return http_up_listed(h, endpoints, NULL);
}

static void http_down(http_fixture *h)
{
    receiver_stop(h->r);
    test_client_down(&h->f);
}

START_TEST(test_http_failing_receiver_gets_every_event_once_after_dedupe)
{
    http_fixture h;
    pid_t relay = http_up(&h, "[endpoint flaky]\nbackfill = all\nurl = @/flaky\nsecret = " SECRET_TEXT "\n"
                              "max_deliver = 5\nbackoff_ms = 20 40\ntimeout_ms = 10000\n");
    test_client_fixture *f = &h.f;
    receiver *r = h.r;
    const char *relay_log = h.log;
    enum { EVENTS = 300 };
    test_client_open_accounts(f->c, 1, EVENTS);
    ck_assert_msg(wait_delivered(r, "/flaky", EVENTS), "not every event arrived");
    relay_stop(relay, relay_log);

    uint64_t head;
    char(*ids)[37] = log_ids(f->c, &head);
    ck_assert_uint_eq(head, EVENTS);
    size_t all = 0;
    ck_assert_uint_eq(receiver_delivered(r, "/flaky", &all), EVENTS); /* exactly once after dedupe */
    ck_assert_uint_ge(all, EVENTS + 2 * (EVENTS / 3));     /* the failures were retried */
    for (uint64_t seq = 1; seq <= head; seq++) {
        int attempts = 0, ok = 0;
        for (size_t i = 0; i < r->count; i++) {
            if (strcmp(r->hooks[i].id, ids[seq - 1]) != 0)
                continue;
            ck_assert_msg(r->hooks[i].signature_ok, "seq %" PRIu64 ": signature", seq);
            ck_assert_uint_eq(r->hooks[i].seq, seq);
            attempts++;
            ok += r->hooks[i].status / 100 == 2;
        }
        ck_assert_msg(ok >= 1, "seq %" PRIu64 " never delivered", seq);
        if (seq % 3 == 0)
            ck_assert_int_ge(attempts, 3);
    }
    tally_subscriber_info info = sub_info(f->c, "relay:flaky");
    ck_assert_uint_eq(info.ack_floor, EVENTS);
    ck_assert_uint_eq(info.dead_letters, 0);
    free(ids);
    http_down(&h);
}
END_TEST

/* A relay given a URL list whose first tallyd is down (docs/CLUSTER.md,
 * "Failover for clients") works through the next: every event
 * delivered, its subscriber's ack floor at the head. */
START_TEST(test_http_relay_with_a_url_list_skips_a_dead_tallyd)
{
    tallyd_proc dead;
    memset(&dead, 0, sizeof(dead));
    tallyd_start(&dead);
    ck_assert_int_eq(tallyd_stop(&dead), 0);
    http_fixture h;
    pid_t relay = http_up_listed(&h, "[endpoint ok]\nbackfill = all\nurl = @/ok\nsecret = " SECRET_TEXT "\n",
                                 dead.url);
    enum { EVENTS = 30 };
    test_client_open_accounts(h.f.c, 1, EVENTS);
    ck_assert_msg(wait_delivered(h.r, "/ok", EVENTS), "not every event arrived");
    relay_stop(relay, h.log);
    tally_subscriber_info info = sub_info(h.f.c, "relay:ok");
    ck_assert_uint_eq(info.ack_floor, EVENTS);
    http_down(&h);
    tallyd_cleanup(&dead);
}
END_TEST

/* A new endpoint starts at the next event unless its backfill says
 * otherwise: the events committed before its subscriber was created are
 * not sent; those after are. */
START_TEST(test_http_new_endpoint_starts_at_new_events)
{
    http_fixture h;
    test_client_up(&h.f);
    test_client_open_accounts(h.f.c, 1, 3); /* history: seqs 1-3 */
    pid_t relay = http_relay_up(&h, "[endpoint fresh]\nurl = @/fresh\nsecret = " SECRET_TEXT "\n",
                                NULL);
    tally_subscriber_info info;
    TEST_WAIT_UNTIL(tally_subscriber_get(h.f.c, "relay:fresh", &info) == TALLY_ok, 60000,
                    "the relay creating its endpoint's subscriber");
    ck_assert_uint_eq(info.ack_floor, 3); /* created at the head */
    test_client_open_accounts(h.f.c, 10, 2); /* seqs 4, 5 */
    ck_assert_msg(wait_delivered(h.r, "/fresh", 2), "the new events did not arrive");
    relay_stop(relay, h.log);
    size_t all = 0;
    ck_assert_uint_eq(receiver_delivered(h.r, "/fresh", &all), 2); /* none of the history */
    ck_assert_uint_eq(sub_info(h.f.c, "relay:fresh").ack_floor, 5);
    http_down(&h);
}
END_TEST

START_TEST(test_http_dead_receiver_parks_while_another_endpoint_receives)
{
    http_fixture h;
    pid_t relay = http_up(&h, "[endpoint dead]\nbackfill = all\nurl = @/dead\nsecret = " SECRET_TEXT "\n"
                              "max_deliver = 2\nbackoff_ms = 10\n"
                              "[endpoint live]\nbackfill = all\nurl = @/ok\nsecret = " SECRET_TEXT "\n"
                              "types = account.*\n");
    test_client_fixture *f = &h.f;
    receiver *r = h.r;
    const char *relay_log = h.log;
    enum { ACCOUNTS = 40 };
    test_client_open_accounts(f->c, 1, ACCOUNTS);
    tally_entitlement_args g = {.subject = "alice", .feature = "pro"};
    tally_result res;
    ck_assert_int_eq(tally_grant(f->c, NULL, &g, &res), TALLY_ok);
    ck_assert_int_eq(res.code, TALLY_ok);
    uint64_t events = ACCOUNTS + 1;
    ck_assert_msg(wait_delivered(r, "/ok", ACCOUNTS), "the live endpoint fell behind");
    int64_t until = test_deadline_ms(WAIT_MS);
    while (clock_mono_ms() < until && sub_info(f->c, "relay:dead").dead_letters < events) {
        relay_must_run();
        test_pause_ms(20);
    }
    tally_subscriber_info dead = sub_info(f->c, "relay:dead");
    ck_assert_uint_eq(dead.dead_letters, events);
    ck_assert_uint_eq(dead.ack_floor, events);
    ck_assert_uint_eq(sub_info(f->c, "relay:live").ack_floor, events); /* the grant: filtered */
    relay_stop(relay, relay_log);
    size_t all = 0;
    ck_assert_uint_eq(receiver_delivered(r, "/ok", &all), ACCOUNTS);
    ck_assert_uint_eq(receiver_delivered(r, "/dead", NULL), 0);
    for (size_t i = 0; i < r->count; i++) {
        ck_assert_msg(r->hooks[i].signature_ok, "delivery %zu: signature", i);
        if (strcmp(r->hooks[i].path, "/ok") == 0)
            ck_assert_str_eq(r->hooks[i].type, "account.opened");
    }
    /* Each dead letter was tried max_deliver = 2 times; the CLI lists them. */
    tally_dead_letter letters[64];
    size_t count = 0;
    uint64_t next = 0;
    ck_assert_int_eq(tally_dlq_list(f->c, "relay:dead", 0, 64, letters, 64, &count, &next),
                     TALLY_ok);
    ck_assert_uint_eq(count, events);
    for (size_t i = 0; i < count; i++) {
        ck_assert_uint_eq(letters[i].attempts, 2);
        ck_assert_msg(strstr(letters[i].error, "HTTP 500") != NULL, "error: %s",
                      letters[i].error);
    }
    const char *argv[] = {tallyd_program("tally"), "--url", f->srv.url, "dlq", "list",
                          "relay:dead", NULL};
    char *out = NULL, *err = NULL;
    ck_assert_int_eq(test_run(argv, NULL, &out, &err), 0);
    ck_assert_msg(strstr(out, "account.opened") && strstr(out, "entitlement.granted"),
                  "tally dlq list relay:dead:\n%s%s", out, err);
    free(out);
    free(err);
    /* the relay said each one it parked, with its error and where it waits */
    char *log = log_text(relay_log);
    size_t said = 0;
    for (const char *p = log; (p = strstr(p, "tally-relay: endpoint dead: seq ")) != NULL; p++) {
        const char *end = strchr(p, '\n');
        ck_assert_ptr_nonnull(end);
        char line[512];
        snprintf(line, sizeof(line), "%.*s", (int)(end - p), p);
        ck_assert_msg(strstr(line, "parked after attempt 2 (its last: max_deliver): dead: HTTP 500; "
                                   "tally dlq list relay:dead"),
                      "%s", line);
        said++;
    }
    ck_assert_msg(said == events, "%zu park lines for %" PRIu64 " dead letters:\n%s", said,
                  events, log);
    ck_assert_msg(strstr(log, "endpoint live: seq") == NULL, "the live endpoint parked:\n%s", log);
    free(log);
    http_down(&h);
}
END_TEST

/* ---- the relay's /metrics (--http) and several relays on one config ---- */

/* The value of one sample "name{labels} value" in a scrape; -1 when absent. */
static long long sample(const char *text, const char *series)
{
    char line[320];
    snprintf(line, sizeof(line), "\n%s ", series);
    const char *at = strstr(text, line);
    return at ? strtoll(at + strlen(line), NULL, 10) : -1;
}

static char *scrape(int port)
{
    int status = 0;
    char *body = test_http_get(port, "/metrics", &status);
    ck_assert_msg(body != NULL && status == 200, "GET /metrics: %d", status);
    return body;
}

/* The series of a family for the JetStream sink ("") or an endpoint. */
static const char *series(const char *family, const char *endpoint, const char *reason)
{
    static char out[16][256]; /* enough for one expect table */
    static int turn;
    char *s = out[turn++ % 16];
    if (endpoint[0] == '\0')
        snprintf(s, 256, "%s{sink=\"jetstream\",subscriber=\"relay\"%s%s%s}", family,
                 reason ? ",reason=\"" : "", reason ? reason : "", reason ? "\"" : "");
    else
        snprintf(s, 256, "%s{sink=\"http\",endpoint=\"%s\",subscriber=\"relay:%s\"%s%s%s}",
                 family, endpoint, endpoint, reason ? ",reason=\"" : "",
                 reason ? reason : "", reason ? "\"" : "");
    return s;
}

/* Scrape until every (series, value) holds; the last scrape (free it). */
typedef struct expect {
    const char *series;
    long long value;
} expect;

static char *scrape_until(int port, const expect *e, size_t n)
{
    int64_t until = test_deadline_ms(WAIT_MS);
    for (;;) {
        char *text = scrape(port);
        size_t held = 0;
        while (held < n && sample(text, e[held].series) == e[held].value)
            held++;
        if (held == n)
            return text;
        if (clock_mono_ms() >= until)
            ck_abort_msg("%s is %lld, not %lld; the scrape:\n%s", e[held].series,
                         sample(text, e[held].series), e[held].value, text);
        free(text);
        relay_must_run();
        test_pause_ms(100);
    }
}

/* promtool check metrics on a scrape: no errors, no warnings. */
static void assert_promtool_passes(const char *text)
{
    char path[] = "/tmp/relay-scrape-XXXXXX", cmd[128];
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(write(fd, text, strlen(text)), (ssize_t)strlen(text));
    close(fd);
    snprintf(cmd, sizeof(cmd), "exec promtool check metrics < %s 2>&1", path);
    const char *argv[] = {"/bin/sh", "-c", cmd, NULL};
    char *out = NULL;
    int rc = test_run(argv, NULL, &out, NULL);
    ck_assert_msg(rc == 0 && out && out[0] == '\0', "promtool check metrics (exit %d):\n%s\n%s",
                  rc, out ? out : "", text);
    free(out);
    unlink(path);
}

/* The JetStream sink, an endpoint that answers 204 and one that always
 * fails: after N events /metrics counts N delivered per live sink, none in
 * flight, no lag, the dead endpoint's 2 failed attempts per event (reason
 * "status") and its N dead letters; the text passes promtool. */
START_TEST(test_metrics_count_deliveries_and_failures)
{
    enum { EVENTS = 60 };
    receiver *r = receiver_start();
    char settings[1024];
    snprintf(settings, sizeof(settings),
             "[endpoint ok]\nbackfill = all\nurl = http://127.0.0.1:%u/ok\nsecret = " SECRET_TEXT "\n"
             "[endpoint dead]\nbackfill = all\nurl = http://127.0.0.1:%u/dead\nsecret = " SECRET_TEXT "\n"
             "max_deliver = 2\nbackoff_ms = 10\n",
             (unsigned)r->port, (unsigned)r->port);
    js_fixture j;
    js_up(&j, settings);
    int port;
    double started_s = (double)time(NULL);
    pid_t relay = relay_start_http(j.config, j.log, NULL, &port);
    int status = 0;
    char *ok = NULL;
    for (int64_t until = test_deadline_ms(WAIT_MS); !ok && clock_mono_ms() < until;) {
        ok = test_http_get(port, "/healthz", &status);
        if (!ok) {
            relay_must_run();
            test_pause_ms(50);
        }
    }
    ck_assert_msg(ok && status == 200 && strcmp(ok, "ok\n") == 0, "/healthz: %d %s", status,
                  ok ? ok : "(no answer)");
    free(ok);

    test_client_open_accounts(j.f.c, 1, EVENTS);
    const expect e[] = {
        {series("tally_relay_delivered_total", "", NULL), EVENTS},
        {series("tally_relay_delivered_total", "ok", NULL), EVENTS},
        {series("tally_relay_delivered_total", "dead", NULL), 0},
        {series("tally_relay_dead_letters", "dead", NULL), EVENTS},
        {series("tally_relay_lag_events", "", NULL), 0},
        {series("tally_relay_lag_events", "ok", NULL), 0},
        {series("tally_relay_lag_events", "dead", NULL), 0},
        {series("tally_relay_dead_letters", "", NULL), 0},
        {series("tally_relay_dead_letters", "ok", NULL), 0},
    };
    char *text = scrape_until(port, e, sizeof(e) / sizeof(e[0]));
    /* once delivered, nothing is in flight and the counts stay */
    ck_assert_int_eq(sample(text, series("tally_relay_in_flight", "", NULL)), 0);
    ck_assert_int_eq(sample(text, series("tally_relay_in_flight", "ok", NULL)), 0);
    ck_assert_int_eq(sample(text, series("tally_relay_in_flight", "dead", NULL)), 0);
    ck_assert_int_eq(sample(text, series("tally_relay_failures_total", "dead", "status")),
                     2 * EVENTS);
    ck_assert_int_eq(sample(text, series("tally_relay_failures_total", "ok", "status")), 0);
    ck_assert_int_eq(sample(text, series("tally_relay_failures_total", "", "refused")), 0);
    ck_assert_int_eq(sample(text, series("tally_relay_filtered_total", "ok", NULL)), 0);
    ck_assert_int_eq(sample(text, series("tally_relay_sink_up", "", NULL)), 1);
    ck_assert_int_eq(sample(text, series("tally_relay_sink_up", "dead", NULL)), 1);
    ck_assert_int_gt(sample(text, "tally_relay_start_time_seconds"), 1700000000);
    ck_assert_int_eq(sample(text, "tally_relay_build_info{version=\"" PACKAGE_VERSION "\"}"), 1);
    const char *wrong = test_process_metrics_wrong(text, started_s, (double)time(NULL));
    if (wrong != NULL) /* the scrape is longer than a Check message may be */
        fprintf(stderr, "the scrape:\n%s\n", text);
    ck_assert_msg(wrong == NULL, "%s", wrong);
    ck_assert_int_eq(stream_messages(j.js), EVENTS);
    ck_assert_uint_eq(receiver_delivered(r, "/ok", NULL), EVENTS);
    assert_promtool_passes(text);
    free(text);
    relay_stop(relay, j.log);
    js_down(&j);
    receiver_stop(r);
}
END_TEST

/* GET /healthz until it answers status; the body (free it). */
static char *healthz_until(int port, int status_wanted)
{
    int status = 0;
    char *body = NULL;
    for (int64_t until = test_deadline_ms(WAIT_MS); clock_mono_ms() < until; test_pause_ms(50)) {
        free(body);
        body = test_http_get(port, "/healthz", &status);
        if (body && status == status_wanted)
            return body;
        relay_must_run();
    }
    ck_abort_msg("/healthz: %d %s, not %d", status, body ? body : "(no answer)", status_wanted);
    return NULL;
}

/* The relay says when tallyd stops answering and when it answers again,
 * and its /healthz fails meanwhile (503 naming tallyd); events written
 * after tallyd is back are delivered. */
START_TEST(test_relay_says_when_tallyd_is_away)
{
    test_client_fixture f;
    test_client_up(&f);
    receiver *r = receiver_start();
    char config[320], log[320], text[1024];
    relay_paths(&f.srv, config, log);
    snprintf(text, sizeof(text),
             "url = %s\n[endpoint ok]\nbackfill = all\nurl = http://127.0.0.1:%u/ok\nsecret = " SECRET_TEXT "\n",
             f.srv.url, (unsigned)r->port);
    file_write(config, text);
    int port;
    pid_t relay = relay_start_http(config, log, NULL, &port);
    free(healthz_until(port, 200));
    test_client_open_accounts(f.c, 1, 10);
    ck_assert(wait_delivered(r, "/ok", 10));

    ck_assert_int_eq(tallyd_stop(&f.srv), 0);
    ck_assert_msg(wait_log_says(log, "does not answer"), "the relay did not say tallyd went away");
    char *body = healthz_until(port, 503);
    ck_assert_msg(strstr(body, "tallyd unreachable"), "/healthz: %s", body);
    free(body);

    tallyd_restart(&f.srv);
    ck_assert_msg(wait_log_says(log, "answers again"), "the relay did not say tallyd is back");
    free(healthz_until(port, 200));
    test_client_open_accounts(f.c, 11, 10);
    ck_assert_msg(wait_delivered(r, "/ok", 20), "nothing delivered after tallyd came back");
    relay_stop(relay, log);
    receiver_stop(r);
    test_client_down(&f);
}
END_TEST

/* The broker stopped while the relay publishes: its failed publishes are
 * counted by cause (connection), and no JetStream failure is "other". */
START_TEST(test_jetstream_failures_are_labelled_by_cause)
{
    js_fixture j;
    js_up(&j, "ack_timeout_ms = 1000\n");
    int port;
    pid_t relay = relay_start_http(j.config, j.log, NULL, &port);
    test_client_open_accounts(j.f.c, 1, 50);
    wait_ack_floor(j.f.c, "relay", 50);
    size_t said = log_length(j.log);
    nats_stop(&j.n);
    test_client_open_accounts(j.f.c, 51, 50);
    bool failed = wait_log_says_after(j.log, said, "again in");
    nats_start(&j.n);
    ck_assert_msg(failed, "no failed publish; the relay's log:\n%s", log_text(j.log));
    wait_ack_floor(j.f.c, "relay", 100);
    char *text = scrape(port);
    long long connection = sample(text, series("tally_relay_failures_total", "", "connection"));
    ck_assert_msg(connection > 0, "no connection failure counted:\n%s", text);
    ck_assert_msg(sample(text, series("tally_relay_failures_total", "", "other")) == -1,
                  "a JetStream failure without a cause:\n%s", text);
    static const char *const causes[] = {"timeout", "refused", "permission", "too_large", "tls",
                                         "protocol", "client", "document"};
    for (size_t i = 0; i < sizeof(causes) / sizeof(causes[0]); i++)
        ck_assert_msg(sample(text, series("tally_relay_failures_total", "", causes[i])) >= 0,
                      "no %s series:\n%s", causes[i], text);
    ck_assert_int_eq(sample(text, series("tally_relay_failures_total", "", "client")), 0);
    assert_promtool_passes(text);
    free(text);
    relay_stop(relay, j.log);
    js_down(&j);
}
END_TEST

/* Two relays on one endpoint whose POSTs are slow (30 ms each, one at a
 * time at the receiver): a fetch of 100 takes seconds, longer than the 1 s
 * lease, and the relays' run loops keep extending the lease of what they
 * still hold (sub_progress), so no event is taken over by the other
 * relay and POSTed twice. docs/RELAY.md, "Several relays on one config". */
START_TEST(test_two_relays_on_a_slow_endpoint_post_each_event_once)
{
    enum { EVENTS = 400 };
    test_client_fixture f;
    test_client_up(&f);
    receiver *r = receiver_start();
    char config[320], log[320], log2[340], text[1024];
    relay_paths(&f.srv, config, log);
    snprintf(log2, sizeof(log2), "%s.2", log);
    snprintf(text, sizeof(text),
             "url = %s\n[endpoint slow]\nbackfill = all\nurl = http://127.0.0.1:%u/slow\nsecret = " SECRET_TEXT
             "\nack_wait_ms = 1000\n",
             f.srv.url, (unsigned)r->port);
    file_write(config, text);
    const char *one[] = {"--instance", "one", NULL}, *two[] = {"--instance", "two", NULL};
    pid_t relay1 = relay_start_with(config, log, one);
    pid_t relay2 = relay_start_with(config, log2, two);
    test_client_open_accounts(f.c, 1, EVENTS);
    ck_assert_msg(wait_delivered(r, "/slow", EVENTS), "not every event arrived");
    int64_t until = test_deadline_ms(WAIT_MS);
    while (clock_mono_ms() < until && sub_info(f.c, "relay:slow").ack_floor < EVENTS)
        test_pause_ms(50);
    ck_assert_uint_eq(sub_info(f.c, "relay:slow").ack_floor, EVENTS);
    relay_stop(relay1, log);
    relay_stop(relay2, log2);
    size_t all = 0;
    ck_assert_uint_eq(receiver_delivered(r, "/slow", &all), EVENTS);
    ck_assert_msg(all == EVENTS, "%zu POSTs for %d events: some were taken over and POSTed twice",
                  all, EVENTS);
    ck_assert_uint_eq(sub_info(f.c, "relay:slow").redelivered, 0);
    receiver_stop(r);
    test_client_down(&f);
}
END_TEST

/* Wait for a relay to exit on its own; its exit code. */
static int relay_exit_code(pid_t pid)
{
    int status = 0;
    if (test_wait_ms(pid, 60000, &status))
        return test_exit_code(status);
    kill(pid, SIGKILL);
    test_wait(pid);
    return -1;
}

/* The config of the several-relays tests: JetStream and one endpoint
 * "ok" at the receiver, both leasing a delivery for lease_ms (the ack
 * wait; the endpoint's backoff too, which applies after a failure). */
static void two_sink_settings(char *out, size_t size, const receiver *r, unsigned lease_ms)
{
    snprintf(out, size,
             "ack_wait_ms = %u\n"
             "[endpoint ok]\nbackfill = all\nurl = http://127.0.0.1:%u/ok\nsecret = " SECRET_TEXT "\n"
             "ack_wait_ms = %u\nbackoff_ms = %u\n",
             lease_ms, (unsigned)r->port, lease_ms, lease_ms);
}

/* Both sinks' subscribers acknowledged every event up to events. */
static void assert_ack_floors_reach(tally_client *c, uint64_t events)
{
    int64_t until = test_deadline_ms(WAIT_MS);
    while (clock_mono_ms() < until && (sub_info(c, "relay").ack_floor < events ||
                                       sub_info(c, "relay:ok").ack_floor < events)) {
        relay_must_run();
        test_pause_ms(50);
    }
    ck_assert_uint_eq(sub_info(c, "relay").ack_floor, events);
    ck_assert_uint_eq(sub_info(c, "relay:ok").ack_floor, events);
}

/* The stream holds exactly one message per event of the log. */
static void assert_stream_once_per_event(js_fixture *j)
{
    uint64_t count = stream_messages(j->js), head;
    char(*ids)[37] = log_ids(j->f.c, &head);
    stored *msgs = stream_read(j->js, count);
    assert_one_message_per_event(msgs, count, ids, head);
    free(msgs);
    free(ids);
}

/* Two relays at once on one config, each with its own instance: every
 * event reaches JetStream and the endpoint, and none twice (the relays'
 * own delivered counters add up to the events, the receiver saw each
 * webhook-id once). A third relay of this host with an instance in use is
 * refused. */
START_TEST(test_several_relays_deliver_each_event_once)
{
    enum { STEPS = 4, PER_STEP = 500, EVENTS = STEPS * PER_STEP };
    receiver *r = receiver_start();
    char settings[1024], log2[340];
    two_sink_settings(settings, sizeof(settings), r, 300000);
    js_fixture j;
    js_up(&j, settings);
    snprintf(log2, sizeof(log2), "%s.2", j.log);
    int port[2];
    pid_t relay[2];
    for (int i = 0; i < 2; i++) {
        const char *more[] = {"--instance", i ? "two" : "one", NULL};
        relay[i] = relay_start_http(j.config, i ? log2 : j.log, more, &port[i]);
    }
    char same_log[360];
    snprintf(same_log, sizeof(same_log), "%s.same", j.log);
    int fd = open(same_log, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    ck_assert_int_ge(fd, 0);
    const char *same[] = {tallyd_program("tally-relay"), "--config", j.config, "--instance", "one",
                          "--lock-dir", lock_dir_of(j.config), NULL};
    /* the first relay claims its instance before it contacts anything: wait for its listener */
    int status = 0;
    char *ok = NULL;
    for (int64_t until = test_deadline_ms(WAIT_MS); !ok && clock_mono_ms() < until;)
        if (!(ok = test_http_get(port[0], "/healthz", &status)))
            test_pause_ms(50);
    free(ok);
    pid_t third = test_spawn(same, NULL, fd, fd);
    close(fd);
    ck_assert_int_eq(relay_exit_code(third), 2);
    ck_assert_msg(wait_log_says(same_log, "already runs subscriber"), "the third relay's log");

    for (int step = 0; step < STEPS; step++)
        test_client_open_accounts(j.f.c, 1 + (uint64_t)step * PER_STEP, PER_STEP);
    ck_assert_msg(wait_delivered(r, "/ok", EVENTS), "not every event reached the endpoint");
    assert_ack_floors_reach(j.f.c, EVENTS);
    long long published = 0, posted = 0;
    char *text[2];
    for (int i = 0; i < 2; i++) {
        text[i] = scrape(port[i]);
        long long js = sample(text[i], series("tally_relay_delivered_total", "", NULL));
        long long http = sample(text[i], series("tally_relay_delivered_total", "ok", NULL));
        ck_assert_msg(js >= 0 && http >= 0, "relay %d's scrape:\n%s", i + 1, text[i]);
        published += js;
        posted += http;
    }
    relay_stop(relay[0], j.log);
    relay_stop(relay[1], log2);
    if (published != EVENTS || posted != EVENTS) /* say why before failing */
        for (int i = 0; i < 2; i++) {
            char *log = log_text(i ? log2 : j.log);
            fprintf(stderr, "relay %d's scrape:\n%s\nits log:\n%s\n", i + 1, text[i], log);
            free(log);
        }
    free(text[0]);
    free(text[1]);
    ck_assert_int_eq(published, EVENTS); /* no event published twice */
    ck_assert_int_eq(posted, EVENTS);
    size_t all = 0;
    ck_assert_uint_eq(receiver_delivered(r, "/ok", &all), EVENTS);
    ck_assert_uint_eq(all, EVENTS); /* no webhook-id twice */
    assert_stream_once_per_event(&j);
    js_down(&j);
    receiver_stop(r);
}
END_TEST

/* Two relays on one config, and one of them dies (SIGKILL) right after a
 * burst: the events it had leased go to the other after the ack wait, so
 * every event still reaches JetStream (once: Nats-Msg-Id) and the endpoint
 * (at least once: each webhook-id is there), and both subscribers' ack
 * floors reach the head. docs/RELAY.md, "Several relays on one config". */
START_TEST(test_a_dead_relays_events_go_to_the_other)
{
    enum { BURST = 500, EVENTS = 2 * BURST };
    receiver *r = receiver_start();
    char settings[1024], log2[340];
    two_sink_settings(settings, sizeof(settings), r, 3000);
    js_fixture j;
    js_up(&j, settings);
    snprintf(log2, sizeof(log2), "%s.2", j.log);
    const char *one[] = {"--instance", "one", NULL}, *two[] = {"--instance", "two", NULL};
    pid_t relay1 = relay_start_with(j.config, j.log, one);
    pid_t relay2 = relay_start_with(j.config, log2, two);
    test_client_open_accounts(j.f.c, 1, BURST);
    ck_assert_msg(wait_delivered(r, "/ok", 1), "no event reached the endpoint");
    relay_kill(relay1); /* mid-burst: what it leased and did not ack is left to its lease */
    test_client_open_accounts(j.f.c, 1 + BURST, BURST);
    ck_assert_msg(wait_delivered(r, "/ok", EVENTS), "the dead relay's events never arrived");
    assert_ack_floors_reach(j.f.c, EVENTS);
    relay_stop(relay2, log2);
    ck_assert_uint_eq(receiver_delivered(r, "/ok", NULL), EVENTS); /* every webhook-id, at least once */
    assert_stream_once_per_event(&j); /* JetStream: once each */
    js_down(&j);
    receiver_stop(r);
}
END_TEST

/* --check with a tls+tcp:// url: tls_ca, tls_cert and tls_key are read
 * and checked as libtally will (the flags win); a CA is required. */
START_TEST(test_check_reads_the_tls_keys)
{
    char dir[] = "/tmp/check_relay.XXXXXX", path[64], certs[64], text[600], other[128];
    ck_assert_ptr_nonnull(mkdtemp(dir));
    snprintf(path, sizeof(path), "%s/relay.conf", dir);
    snprintf(certs, sizeof(certs), "%s/tls", dir);
    tallyd_tls_make_certs(certs);
    unsetenv("TALLY_TLS_CA");
    unsetenv("TALLY_TLS_CERT");
    unsetenv("TALLY_TLS_KEY");
    const char *relay = tallyd_program("tally-relay");
    static const char sink[] = "[nats]\nurl = nats://127.0.0.1:4222\nstream = TALLY\n";
    snprintf(text, sizeof(text), "url = tls+tcp://127.0.0.1:7450\ntls_ca = %s/ca.pem\n"
             "tls_cert = %s/client.pem\ntls_key = %s/client.key\n%s", certs, certs, certs, sink);
    file_write(path, text);
    const char *ok[] = {relay, "--config", path, "--check", NULL};
    char *out = NULL, *err = NULL;
    ck_assert_int_eq(test_run(ok, NULL, &out, &err), 0);
    ck_assert_msg(strstr(out, "tls: ca ") && strstr(out, "configuration ok"), "%s", out);
    free(out);
    free(err);
    snprintf(other, sizeof(other), "%s/other-client.key", certs); /* not client.pem's key */
    const char *flag[] = {relay, "--config", path, "--tls-key", other, "--check", NULL};
    ck_assert_int_eq(test_run(flag, NULL, &out, &err), 2);
    ck_assert_msg(strstr(err, "not the key of the certificate"), "%s", err);
    free(out);
    free(err);
    snprintf(text, sizeof(text), "url = tls+tcp://127.0.0.1:7450\n%s", sink);
    file_write(path, text);
    ck_assert_int_eq(test_run(ok, NULL, &out, &err), 2);
    ck_assert_msg(strstr(err, "needs the CA"), "%s", err);
    free(out);
    free(err);
    test_remove_dir(dir);
}
END_TEST

/* A temp directory dir (a mkdtemp template) for a config file at path;
 * the relay program that reads it. */
static const char *config_dir_make(char *dir, char path[64])
{
    ck_assert_ptr_nonnull(mkdtemp(dir));
    snprintf(path, 64, "%s/relay.conf", dir);
    return tallyd_program("tally-relay");
}

/* --check: a valid file passes and is printed; each bad line is an error
 * naming the file and the line, exit 2. */
START_TEST(test_check_validates_the_configuration)
{
    char dir[] = "/tmp/check_relay.XXXXXX", path[64];
    const char *relay = config_dir_make(dir, path);
    file_write(path, "url = tcp://127.0.0.1:7450\n[nats]\nurl = nats://127.0.0.1:4222\n"
                     "stream = TALLY\n[endpoint hooks]\nurl = https://example.com/h\n"
                     "secret = " SECRET_TEXT "\ntypes = transfer.* account.opened\n");
    const char *ok[] = {relay, "--config", path, "--check", NULL};
    char *out = NULL, *err = NULL;
    ck_assert_int_eq(test_run(ok, NULL, &out, &err), 0);
    ck_assert_msg(strstr(out, "stream TALLY") && strstr(out, "subscriber relay:hooks") &&
                      strstr(out, "configuration ok"),
                  "%s", out);
    free(out);
    free(err);
    static const struct {
        const char *text, *says;
    } bad[] = {
        {"[nats]\nurl = nats://x:1\n", "needs url and stream"},
        {"[nats]\nurl = nats://x:1\nstream = S\nstorage = tape\n", ":4: storage: file or memory"},
        {"[endpoint a]\nurl = https://x/\n", "secret: required"},
        {"[endpoint a]\nurl = https://x/\nsecret = nope!\n", ":3: secret: a Standard Webhooks secret is base64"},
        {"[endpoint a]\nurl = https://x/\nsecret = whsec_====\n", ":3: secret: a Standard Webhooks secret is base64"},
        {"[endpoint a]\nurl = https://x/\nsecret = whsec_AAECAw==\n", ":3: secret: the key is 4 bytes; Standard Webhooks keys are 24 to 64"},
        {"[endpoint a b]\n", "an endpoint name is"},
        {"[endpoint a]\nurl = ftp://x/\nsecret = " SECRET_TEXT "\n", "http:// or https://"},
        {"[endpoint a]\nmax_deliver = 0\n", ":2: max_deliver: not a number from 1"},
        {"[endpoint a]\nbackoff_ms = 1 2 3 4 5 6 7 8 9\n", "more than 8 delays"},
        {"[mqtt]\n", "unknown section [mqtt]"},
        {"colour = blue\n", ":1: unknown key colour"},
        {"instance = no spaces\n", ":1: instance: an instance is 1-64 bytes"},
        {"http = 127.0.0.1:9\n", ":1: http: http://HOST:PORT or none"},
        {"http = http://127.0.0.1:99999\n", ":1: http: http://HOST:PORT or none"},
        {"just text\n", ":1: expected key = value"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        file_write(path, bad[i].text);
        const char *argv[] = {relay, "--config", path, "--check", NULL};
        ck_assert_int_eq(test_run(argv, NULL, &out, &err), 2);
        ck_assert_msg(strstr(err, bad[i].says), "config %zu: %s", i, err);
        free(out);
        free(err);
    }
    const char *instance[] = {relay, "--nats", "nats://x:1", "--stream", "S", "--instance", "a b",
                              "--check", NULL};
    ck_assert_int_eq(test_run(instance, NULL, &out, &err), 2);
    ck_assert_msg(strstr(err, "--instance"), "%s", err);
    free(out);
    free(err);
    const char *http[] = {relay, "--nats", "nats://x:1", "--stream", "S", "--http", ":9", NULL};
    ck_assert_int_eq(test_run(http, NULL, &out, &err), 2);
    ck_assert_msg(strstr(err, "--http: http://HOST:PORT or none"), "%s", err);
    free(out);
    free(err);
    /* the whsec_ prefix is optional, as in tallyd's intake */
    file_write(path, "[endpoint a]\nurl = https://x/\nsecret = " SECRET_B64 "\n");
    const char *bare[] = {relay, "--config", path, "--check", NULL};
    ck_assert_int_eq(test_run(bare, NULL, &out, &err), 0);
    free(out);
    free(err);
    const char *http_ok[] = {relay, "--nats", "nats://x:1", "--stream", "S", "--http",
                             "http://127.0.0.1:9", "--check", NULL};
    ck_assert_int_eq(test_run(http_ok, NULL, &out, &err), 0);
    ck_assert_msg(strstr(out, "metrics: http://127.0.0.1:9/metrics"), "%s", out);
    free(out);
    free(err);
    unlink(path);
    rmdir(dir);
}
END_TEST

/* A config holding an endpoint's signing secret that its group or others
 * may read or write is refused, at start and by --check (exit 2, the
 * file, its mode and the endpoint named); mode 0600 passes, and a config
 * without a secret may be read by others. A duplicate window shorter
 * than the JetStream sink's lease passes. */
START_TEST(test_config_with_a_secret_must_be_private)
{
    char dir[] = "/tmp/check_relay.XXXXXX", path[64];
    const char *relay = config_dir_make(dir, path);
    file_write(path, "url = tcp://127.0.0.1:1\n[endpoint hooks]\nurl = https://example.com/h\n"
                     "secret = " SECRET_TEXT "\n");
    const char *check[] = {relay, "--config", path, "--check", NULL};
    const char *start[] = {relay, "--config", path, NULL};
    char *out = NULL, *err = NULL;
    static const mode_t open_modes[] = {0644, 0640, 0620, 0604, 0602};
    for (size_t i = 0; i < sizeof(open_modes) / sizeof(open_modes[0]); i++) {
        ck_assert_int_eq(chmod(path, open_modes[i]), 0);
        for (int run = 0; run < 2; run++) {
            ck_assert_int_eq(test_run(run ? start : check, NULL, &out, &err), 2);
            char mode[32];
            snprintf(mode, sizeof(mode), "has mode %04o", (unsigned)open_modes[i]);
            ck_assert_msg(strstr(err, path) && strstr(err, mode) &&
                              strstr(err, "signing secret of [endpoint hooks]") &&
                              strstr(err, "chmod 600"),
                          "mode %04o: %s", (unsigned)open_modes[i], err);
            free(out);
            free(err);
        }
    }
    ck_assert_int_eq(chmod(path, 0600), 0);
    ck_assert_int_eq(test_run(check, NULL, &out, &err), 0);
    free(out);
    free(err);
    /* the relay reads the stream back before it publishes again: a window
     * shorter than the lease is no longer refused */
    file_write(path, "[nats]\nurl = nats://x:1\nstream = S\nack_wait_ms = 300000\n"
                     "duplicate_window_s = 2\n");
    ck_assert_int_eq(chmod(path, 0644), 0);
    ck_assert_int_eq(test_run(check, NULL, &out, &err), 0);
    ck_assert_msg(strstr(out, "configuration ok"), "%s %s", out, err);
    free(out);
    free(err);
    unlink(path);
    rmdir(dir);
}
END_TEST

/* ---- the retry schedule and disabled endpoints ---- */

/* The attempts to path of the event with id. */
static int attempts_of(receiver *r, const char *path, const char *id)
{
    pthread_mutex_lock(&r->mu);
    int n = receiver_attempts_before(r, path, id);
    pthread_mutex_unlock(&r->mu);
    return n;
}

/* An endpoint with retry_schedule = 0 50ms 100ms and no max_deliver: each
 * event is POSTed three times, the delays apart, then parked after its
 * third attempt (max_deliver follows the schedule). */
START_TEST(test_http_retry_schedule_parks_after_its_last_attempt)
{
    http_fixture h;
    pid_t relay = http_up(&h, "[endpoint dead]\nbackfill = all\nurl = @/dead\nsecret = " SECRET_TEXT "\n"
                              "retry_schedule = 0 50ms 100ms\ndisable_after = never\n");
    enum { EVENTS = 10 };
    test_client_open_accounts(h.f.c, 1, EVENTS);
    int64_t until = test_deadline_ms(WAIT_MS);
    while (clock_mono_ms() < until && sub_info(h.f.c, "relay:dead").dead_letters < EVENTS) {
        relay_must_run();
        test_pause_ms(20);
    }
    tally_subscriber_info info = sub_info(h.f.c, "relay:dead");
    ck_assert_uint_eq(info.dead_letters, EVENTS);
    ck_assert_uint_eq(info.max_deliver, 3);
    relay_stop(relay, h.log);
    uint64_t head;
    char(*ids)[37] = log_ids(h.f.c, &head);
    for (uint64_t seq = 1; seq <= head; seq++)
        ck_assert_msg(attempts_of(h.r, "/dead", ids[seq - 1]) == 3, "seq %" PRIu64 ": %d POSTs",
                      seq, attempts_of(h.r, "/dead", ids[seq - 1]));
    tally_dead_letter letters[EVENTS];
    size_t count = 0;
    uint64_t next = 0;
    ck_assert_int_eq(tally_dlq_list(h.f.c, "relay:dead", 0, EVENTS, letters, EVENTS, &count,
                                    &next), TALLY_ok);
    ck_assert_uint_eq(count, EVENTS);
    for (size_t i = 0; i < count; i++)
        ck_assert_uint_eq(letters[i].attempts, 3);
    /* the attempt log: each attempt with its status, latency, error and the
     * answer's first bytes, newest first; by event too */
    tally_endpoint_attempt log[3 * EVENTS];
    ck_assert_int_eq(tally_endpoint_attempts(h.f.c, "dead", 0, 1000, log, 3 * EVENTS, &count),
                     TALLY_ok);
    ck_assert_uint_eq(count, 3 * EVENTS);
    for (size_t i = 0; i < count; i++) {
        ck_assert_uint_eq(log[i].status, 500);
        ck_assert_str_eq(log[i].response, "status 500 from /dead.");
        ck_assert_str_eq(log[i].error, "dead: HTTP 500");
        ck_assert(log[i].attempt >= 1 && log[i].attempt <= 3);
        ck_assert(log[i].time_ms > 1700000000000);
        if (i > 0)
            ck_assert_int_le(log[i].time_ms, log[i - 1].time_ms);
    }
    ck_assert_int_eq(tally_endpoint_attempts(h.f.c, "dead", 4, 0, log, 3 * EVENTS, &count),
                     TALLY_ok);
    ck_assert_uint_eq(count, 3);
    for (size_t i = 0; i < count; i++) {
        ck_assert_uint_eq(log[i].seq, 4);
        ck_assert_uint_eq(log[i].attempt, 3 - i);
    }
    const char *argv[] = {tallyd_program("tally"), "--url", h.f.srv.url, "endpoint", "attempts",
                          "dead", "--seq", "4", NULL};
    char *out = NULL, *err = NULL;
    ck_assert_int_eq(test_run(argv, NULL, &out, &err), 0);
    ck_assert_msg(strstr(out, "TIME") && strstr(out, "LATENCY_MS") &&
                      strstr(out, "dead: HTTP 500") && strstr(out, "status 500 from /dead."),
                  "tally endpoint attempts dead --seq 4:\n%s%s", out, err);
    free(out);
    free(err);
    free(ids);
    http_down(&h);
}
END_TEST

/* The attempt log's own rules on a real tallyd: an attempt recorded twice
 * is kept once; attempts older than the retention go at the next record;
 * bad attempts and names are refused with their field. */
START_TEST(test_attempt_log_keeps_its_retention)
{
    test_client_fixture f;
    test_client_up(&f);
    int64_t now_ms = (int64_t)time(NULL) * 1000;
    tally_endpoint_attempt a[2] = {
        {.seq = 1, .attempt = 1, .time_ms = now_ms - 7200000, .status = 503,
         .latency_ms = 12, .error = "x: HTTP 503", .response = "busy"},
        {.seq = 1, .attempt = 2, .time_ms = now_ms, .status = 200, .latency_ms = 3},
    };
    ck_assert_int_eq(tally_endpoint_attempts_record(f.c, "x", a, 2, 0), TALLY_ok);
    ck_assert_int_eq(tally_endpoint_attempts_record(f.c, "x", a, 2, 0), TALLY_ok);
    tally_endpoint_attempt got[4];
    size_t count = 0;
    ck_assert_int_eq(tally_endpoint_attempts(f.c, "x", 0, 0, got, 4, &count), TALLY_ok);
    ck_assert_uint_eq(count, 2);
    ck_assert_uint_eq(got[0].attempt, 2);
    ck_assert_uint_eq(got[1].status, 503);
    ck_assert_str_eq(got[1].response, "busy");
    ck_assert_uint_eq(got[1].latency_ms, 12);
    /* an hour's retention: the attempt of two hours ago goes */
    ck_assert_int_eq(tally_endpoint_attempts_record(f.c, "x", &a[1], 1, 3600), TALLY_ok);
    ck_assert_int_eq(tally_endpoint_attempts(f.c, "x", 0, 0, got, 4, &count), TALLY_ok);
    ck_assert_uint_eq(count, 1);
    ck_assert_uint_eq(got[0].attempt, 2);
    ck_assert_int_eq(tally_endpoint_attempts(f.c, "y", 0, 0, got, 4, &count), TALLY_ok);
    ck_assert_uint_eq(count, 0);
    tally_endpoint_attempt bad = a[1];
    bad.attempt = 0;
    ck_assert_int_eq(tally_endpoint_attempts_record(f.c, "x", &bad, 1, 0),
                     TALLY_value_out_of_range);
    ck_assert_int_eq(tally_endpoint_attempts_record(f.c, "no spaces", &a[1], 1, 0),
                     TALLY_invalid_endpoint_name);
    ck_assert_int_eq(tally_endpoint_attempts(f.c, "a/b", 0, 0, got, 4, &count),
                     TALLY_invalid_endpoint_name);
    test_client_down(&f);
}
END_TEST

static size_t log_count_type(tally_client *c, const char *type, const char *subject);

/* The hook of the last delivery to path (under r->mu). */
static hook last_hook(receiver *r, const char *path)
{
    hook h = {0};
    pthread_mutex_lock(&r->mu);
    for (size_t i = 0; i < r->count; i++)
        if (strcmp(r->hooks[i].path, path) == 0)
            h = r->hooks[i];
    pthread_mutex_unlock(&r->mu);
    return h;
}

static void tally_endpoint_cli(const tallyd_proc *srv, const char *stdin_text, const char *args);

/* `tally endpoint rotate-secret` with the secret on stdin. */
static void rotate_secret(const tallyd_proc *srv, const char *secret, const char *overlap)
{
    char args[128];
    snprintf(args, sizeof(args), "rotate-secret ok --overlap %s", overlap);
    tally_endpoint_cli(srv, secret, args);
}

/* Events one at a time until one reaches /ok signed with exactly the keys
 * of mask: the relay takes a rotation within a second or so. */
static void wait_signed_with(http_fixture *h, unsigned mask, unsigned signatures, int *next_id)
{
    hook last = {0};
    for (int64_t until = test_deadline_ms(WAIT_MS); clock_mono_ms() < until;) {
        size_t before = receiver_delivered(h->r, "/ok", NULL);
        test_client_open_accounts(h->f.c, (uint64_t)*next_id, 1);
        (*next_id)++;
        ck_assert(wait_delivered(h->r, "/ok", before + 1));
        last = last_hook(h->r, "/ok");
        if (last.keys_ok == mask && last.signatures == signatures)
            return;
        test_pause_ms(100); /* the next event, not a wait for one */
    }
    ck_abort_msg("no delivery signed with keys %u (%u signatures); the last: keys %u, %u "
                 "signatures", mask, signatures, last.keys_ok, last.signatures);
}

/* Secret rotation with overlap (Standard Webhooks): after `tally endpoint
 * rotate-secret` with an overlap, deliveries carry two signatures, by the
 * new secret and by the one before it (the config file's), each valid;
 * after a rotation without overlap, one signature by the newest. The log
 * has endpoint.secret_rotated events, which carry no secret. */
START_TEST(test_http_secret_rotation_signs_with_both_during_overlap)
{
    http_fixture h;
    pid_t relay = http_up(&h, "[endpoint ok]\nbackfill = all\nurl = @/ok\nsecret = " SECRET_TEXT "\n");
    int next_id = 1;
    wait_signed_with(&h, 1u, 1, &next_id);
    rotate_secret(&h.f.srv, "whsec_" SECRET2_B64, "1h");
    wait_signed_with(&h, 3u, 2, &next_id);
    rotate_secret(&h.f.srv, SECRET3_B64, "0");
    wait_signed_with(&h, 4u, 1, &next_id);
    relay_stop(relay, h.log);
    ck_assert_uint_eq(log_count_type(h.f.c, "endpoint.secret_rotated", "ok"), 2);
    const char *argv[] = {tallyd_program("tally"), "--url", h.f.srv.url, "--json", "log",
                          "--limit", "1000", NULL};
    char *out = NULL, *err = NULL;
    ck_assert_int_eq(test_run(argv, NULL, &out, &err), 0);
    ck_assert_msg(strstr(out, SECRET2_B64) == NULL && strstr(out, SECRET3_B64) == NULL &&
                      strstr(out, "endpoint.secret_rotated"),
                  "%s", out);
    free(out);
    free(err);
    /* a bad secret is refused with its code */
    tally_result res;
    ck_assert_int_eq(tally_endpoint_rotate_secret(h.f.c, NULL, "ok", "whsec_AAECAw==", 0, &res),
                     TALLY_invalid_secret);
    http_down(&h);
}
END_TEST

/* `tally endpoint recover ok --since` a time before every event: each
 * event is POSTed to the endpoint a second time (both answered 2xx, the
 * same webhook-id), then endpoint.recovered, and the endpoint goes on with
 * new events. */
START_TEST(test_http_recover_resends_every_event_since_a_time)
{
    http_fixture h;
    pid_t relay = http_up(&h, "[endpoint ok]\nbackfill = all\nurl = @/ok\nsecret = " SECRET_TEXT "\n"
                              "types = account.*\n");
    enum { EVENTS = 5 };
    test_client_open_accounts(h.f.c, 1, EVENTS);
    ck_assert(wait_delivered(h.r, "/ok", EVENTS));
    const char *argv[] = {tallyd_program("tally"), "--url", h.f.srv.url, "endpoint", "recover",
                          "ok", "--since", "2000-01-01T00:00:00Z", NULL};
    char *out = NULL, *err = NULL;
    ck_assert_msg(test_run(argv, NULL, &out, &err) == 0, "%s%s", out, err);
    free(out);
    free(err);
    size_t all = 0;
    for (int64_t until = test_deadline_ms(WAIT_MS); clock_mono_ms() < until;) {
        receiver_delivered(h.r, "/ok", &all);
        if (all >= 2 * EVENTS)
            break;
        relay_must_run();
        test_pause_ms(20);
    }
    ck_assert_msg(all == 2 * EVENTS, "%zu POSTs; the relay's log:\n%s", all, log_text(h.log));
    tally_endpoint_info info;
    for (int64_t until = test_deadline_ms(WAIT_MS); clock_mono_ms() < until;) {
        ck_assert_int_eq(tally_endpoint_get(h.f.c, "ok", &info), TALLY_ok);
        if (info.recover_since_ms == 0)
            break;
        test_pause_ms(20);
    }
    ck_assert_int_eq(info.recover_since_ms, 0);
    ck_assert_uint_eq(log_count_type(h.f.c, "endpoint.recover_requested", "ok"), 1);
    ck_assert_uint_eq(log_count_type(h.f.c, "endpoint.recovered", "ok"), 1);
    ck_assert_uint_eq(receiver_delivered(h.r, "/ok", NULL), EVENTS); /* the same ids, twice each */
    pthread_mutex_lock(&h.r->mu);
    for (size_t i = 0; i < h.r->count; i++) {
        ck_assert(h.r->hooks[i].signature_ok && h.r->hooks[i].status / 100 == 2);
        ck_assert_int_eq(receiver_attempts_before(h.r, "/ok", h.r->hooks[i].id), 2);
    }
    pthread_mutex_unlock(&h.r->mu);
    test_client_open_accounts(h.f.c, EVENTS + 1, 1);
    ck_assert(wait_delivered(h.r, "/ok", EVENTS + 1));
    relay_stop(relay, h.log);
    char *said = log_text(h.log);
    ck_assert_msg(strstr(said, "tally-relay: endpoint ok: recovered, 5 events sent again"), "%s",
                  said);
    free(said);
    http_down(&h);
}
END_TEST

/* The types of the log's events from seq 1: how many are type. */
static size_t log_count_type(tally_client *c, const char *type, const char *subject)
{
    uint64_t head = test_client_head(c);
    tally_event page[1000];
    size_t n = 0;
    for (uint64_t from = 1; from <= head;) {
        size_t count = 0;
        uint64_t h;
        ck_assert_int_eq(tally_log_read(c, from, 1000, 0, page, 1000, &count, &h), TALLY_ok);
        if (count == 0)
            break;
        for (size_t i = 0; i < count; i++)
            n += strcmp(page[i].type, type) == 0 && strcmp(page[i].subject, subject) == 0;
        from = page[count - 1].seq + 1;
        tally_events_release(page, count);
    }
    return n;
}

/* An endpoint failing without a 2xx for its disable_after (300 ms here,
 * well inside its schedule) is disabled: an endpoint.disabled event in
 * tally's log with the reason, endpoint_get says disabled, the relay's
 * tally_relay_endpoint_disabled is 1 and it says so; nothing is parked.
 * `tally endpoint enable` brings it back: every event delivered, the
 * gauge 0, an endpoint.enabled event. */
START_TEST(test_http_failing_endpoint_is_disabled_until_enabled)
{
    http_fixture h;
    http_config_write(&h, "[endpoint toggle]\nbackfill = all\nurl = @/toggle\nsecret = " SECRET_TEXT "\n"
                          "retry_schedule = 0 100ms 100ms 100ms 100ms 100ms 100ms 100ms 100ms "
                          "100ms 100ms 100ms 100ms 100ms 100ms 100ms 100ms 100ms 100ms 100ms\n"
                          "disable_after = 300ms\n",
                      NULL);
    atomic_store(&h.r->toggle_fails, true);
    int port;
    pid_t relay = relay_start_http(h.config, h.log, NULL, &port);
    enum { EVENTS = 5 };
    test_client_open_accounts(h.f.c, 1, EVENTS);
    tally_endpoint_info info;
    int64_t until = test_deadline_ms(WAIT_MS);
    do {
        relay_must_run();
        test_pause_ms(50);
        ck_assert_int_eq(tally_endpoint_get(h.f.c, "toggle", &info), TALLY_ok);
    } while (!info.disabled && clock_mono_ms() < until);
    ck_assert_msg(info.disabled, "not disabled; the relay's log:\n%s", log_text(h.log));
    ck_assert_msg(strstr(info.reason, "(disable_after): toggle: HTTP 500"), "%s", info.reason);
    ck_assert_uint_eq(info.version, 1);
    ck_assert_uint_eq(log_count_type(h.f.c, "endpoint.disabled", "toggle"), 1);
    const expect off[] = {{series("tally_relay_endpoint_disabled", "toggle", NULL), 1}};
    free(scrape_until(port, off, 1));
    ck_assert(wait_log_says(h.log, "tally-relay: endpoint toggle disabled (seq "));
    ck_assert_uint_eq(sub_info(h.f.c, "relay:toggle").dead_letters, 0);

    atomic_store(&h.r->toggle_fails, false);
    const char *argv[] = {tallyd_program("tally"), "--url", h.f.srv.url, "endpoint", "enable",
                          "toggle", NULL};
    char *out = NULL, *err = NULL;
    ck_assert_msg(test_run(argv, NULL, &out, &err) == 0, "%s%s", out, err);
    free(out);
    free(err);
    ck_assert_msg(wait_delivered(h.r, "/toggle", EVENTS), "not every event arrived");
    const expect on[] = {{series("tally_relay_endpoint_disabled", "toggle", NULL), 0}};
    free(scrape_until(port, on, 1));
    ck_assert(wait_log_says(h.log, "tally-relay: endpoint toggle enabled again"));
    ck_assert_int_eq(tally_endpoint_get(h.f.c, "toggle", &info), TALLY_ok);
    ck_assert(!info.disabled);
    ck_assert_uint_eq(info.version, 2);
    ck_assert_uint_eq(log_count_type(h.f.c, "endpoint.enabled", "toggle"), 1);
    relay_stop(relay, h.log);
    ck_assert_uint_eq(sub_info(h.f.c, "relay:toggle").dead_letters, 0);
    http_down(&h);
}
END_TEST

/* The default schedule and disable limit, read back from --check rather
 * than waited out; a schedule of the file is printed as given, and bad
 * ones are refused. */
START_TEST(test_check_prints_the_retry_schedule)
{
    char dir[] = "/tmp/check_relay.XXXXXX", path[64];
    const char *relay = config_dir_make(dir, path);
    file_write(path, "[endpoint a]\nurl = https://x/\nsecret = " SECRET_TEXT "\n"
                     "[endpoint b]\nurl = https://x/\nsecret = " SECRET_TEXT "\n"
                     "retry_schedule = 0 1s 90s\ndisable_after = never\n"
                     "[endpoint c]\nurl = https://x/\nsecret = " SECRET_TEXT "\n"
                     "backoff_ms = 10 20\n");
    const char *argv[] = {relay, "--config", path, "--check", NULL};
    char *out = NULL, *err = NULL;
    ck_assert_int_eq(test_run(argv, NULL, &out, &err), 0);
    ck_assert_msg(strstr(out, "subscriber relay:a: fetch 100, max_deliver 12,") &&
                      strstr(out, "  retry_schedule 0 5s 5m 30m 2h 5h 10h 10h 10h 10h 10h 10h "
                                  "(12 attempts over 67.6 h), disable_after 5d, "
                                  "attempt_retention 7d\n") &&
                      strstr(out, "subscriber relay:b: fetch 100, max_deliver 3,") &&
                      strstr(out, "  retry_schedule 0 1s 90s (3 attempts over 0.0 h), "
                                  "disable_after never, attempt_retention 7d\n") &&
                      strstr(out, "subscriber relay:c: fetch 100, max_deliver 8, when new, from "
                                  "the next event, backoff_ms 10 20\n") &&
                      strstr(out, "  retry_schedule (the subscriber's backoff_ms), disable_after "
                                  "5d, attempt_retention 7d\n"),
                  "%s", out);
    free(out);
    free(err);
    static const struct {
        const char *line, *says;
    } bad[] = {
        {"retry_schedule = 5s 10s", "the first attempt's delay is 0"},
        {"retry_schedule = 0 2d", "2d: a delay is 0 or a number with ms, s, m, h or d, at most 1d"},
        {"retry_schedule = 0 5x", "5x: a delay is"},
        {"disable_after = 0", "disable_after: never, or a number"},
        {"disable_after = 400d", "disable_after: never, or a number"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        char text[512];
        snprintf(text, sizeof(text), "[endpoint a]\nurl = https://x/\nsecret = " SECRET_TEXT
                                     "\n%s\n", bad[i].line);
        file_write(path, text);
        ck_assert_int_eq(test_run(argv, NULL, &out, &err), 2);
        ck_assert_msg(strstr(err, ":4: ") && strstr(err, bad[i].says), "%s: %s", bad[i].line,
                      err);
        free(out);
        free(err);
    }
    unlink(path);
    rmdir(dir);
}
END_TEST

/* ---- the subscriber's settings converge (docs/RELAY.md, "The subscriber's settings") ---- */

/* A handler that parks seq 3 and takes the rest. */
static tally_verdict park_third(const tally_delivery *d, tally_answer *answer, void *arg)
{
    (void)arg;
    if (d->event.seq != 3)
        return TALLY_DONE;
    snprintf(answer->error, sizeof(answer->error), "parked by the test");
    return TALLY_PARK;
}

/* An endpoint's subscriber as an older relay made it (max_deliver 8, its
 * default then), its cursor at seq 5 with seq 3 parked, meets a relay
 * whose default is the retry schedule's 12: the relay changes it with
 * sub_update, says so and delivers; the cursor and the dead letter stay,
 * and nothing of seqs 1-5 is sent (with backfill = all a new subscriber
 * would send them all). */
START_TEST(test_relay_updates_an_old_subscriber_without_replay)
{
    http_fixture h;
    test_client_up(&h.f);
    tally_client *c = h.f.c;
    test_client_open_accounts(c, 1, 5); /* seqs 1-5 */
    tally_subscriber_options old = {.start = TALLY_START_BEGINNING, .max_deliver = 8,
                                    .backoff_count = TALLY_CLIENT_SUB_BACKOFF_STEPS_MAX};
    for (uint32_t i = 0; i < old.backoff_count; i++)
        old.backoff_ms[i] = 1000u << i;
    tally_subscriber *s = NULL;
    ck_assert_int_eq(tally_subscriber_open(c, "relay:old", &old, &s), TALLY_ok);
    tally_run_options ro = {.max_events = 5, .wait_ms = 1000};
    ck_assert_int_eq(tally_subscriber_run(s, &ro, park_third, NULL), TALLY_ok);
    tally_subscriber_close(s);
    tally_subscriber_info before = sub_info(c, "relay:old");
    ck_assert_uint_eq(before.ack_floor, 5);
    ck_assert_uint_eq(before.dead_letters, 1);
    ck_assert_uint_eq(before.max_deliver, 8);

    pid_t relay = http_relay_up(&h, "[endpoint old]\nbackfill = all\nurl = @/old\nsecret = "
                                    SECRET_TEXT "\n", NULL);
    ck_assert_msg(wait_log_says(h.log, "tally-relay: subscriber relay:old: max_deliver 8 -> 12 "
                                       "(sub_update: its cursor, in-flight events and dead "
                                       "letters kept)"),
                  "the relay did not say what it changed");
    test_client_open_accounts(c, 10, 3); /* seqs 6-8 */
    ck_assert_msg(wait_delivered(h.r, "/old", 3), "the new events did not arrive");
    relay_stop(relay, h.log);
    size_t all = 0;
    ck_assert_uint_eq(receiver_delivered(h.r, "/old", &all), 3);
    ck_assert_uint_eq(all, 3);
    for (size_t i = 0; i < h.r->count; i++)
        ck_assert_msg(h.r->hooks[i].seq > 5, "seq %" PRIu64 " sent again", h.r->hooks[i].seq);
    tally_subscriber_info after = sub_info(c, "relay:old");
    ck_assert_uint_eq(after.max_deliver, 12);
    ck_assert_uint_eq(after.ack_floor, 8);
    ck_assert_uint_eq(after.dead_letters, 1);
    ck_assert_int_eq(after.created_ms, before.created_ms); /* the same subscriber */
    http_down(&h);
}
END_TEST

/* What sub_update cannot change stops the sink with a line saying what to
 * do: a subscriber with partitions under an endpoint's name. */
START_TEST(test_relay_refuses_a_subscriber_with_partitions)
{
    http_fixture h;
    test_client_up(&h.f);
    tally_subscriber_options parted = {.partitions = 2};
    tally_subscriber *s = NULL;
    ck_assert_int_eq(tally_subscriber_open(h.f.c, "relay:parted", &parted, &s), TALLY_ok);
    tally_subscriber_close(s);
    pid_t relay = http_relay_up(&h, "[endpoint parted]\nurl = @/p\nsecret = " SECRET_TEXT "\n",
                                NULL);
    unwatch(relay);
    ck_assert_int_eq(relay_exit_code(relay), 1);
    char *log = log_text(h.log);
    ck_assert_msg(strstr(log, "tally-relay: subscriber relay:parted has 2 partitions in tallyd, "
                              "the relay's 1; sub_update cannot change partitions: delete it "
                              "(tally subscriber delete relay:parted;"),
                  "%s", log);
    free(log);
    ck_assert_uint_eq(sub_info(h.f.c, "relay:parted").partitions, 2);
    http_down(&h);
}
END_TEST

/* An endpoint's types are its subscriber's filter in tallyd: the relay
 * fetches only the events it takes (none acknowledged unsent:
 * tally_relay_filtered_total stays 0) and delivers each once. */
START_TEST(test_http_endpoint_types_filter_on_the_server)
{
    http_fixture h;
    test_client_up(&h.f);
    http_config_only(&h, "[endpoint grants]\nbackfill = all\nurl = @/g\nsecret = " SECRET_TEXT
                         "\ntypes = entitlement.* transfer.posted\n", NULL);
    int port;
    pid_t relay = relay_start_http(h.config, h.log, NULL, &port);
    enum { ACCOUNTS = 30, GRANTS = 10 };
    test_client_open_accounts(h.f.c, 1, ACCOUNTS / 2);
    for (int i = 0; i < GRANTS; i++) {
        char subject[32];
        snprintf(subject, sizeof(subject), "user-%d", i);
        tally_entitlement_args g = {.subject = subject, .feature = "pro"};
        tally_result res;
        ck_assert_int_eq(tally_grant(h.f.c, NULL, &g, &res), TALLY_ok);
        ck_assert_int_eq(res.code, TALLY_ok);
    }
    test_client_open_accounts(h.f.c, 100, ACCOUNTS / 2);
    ck_assert_msg(wait_delivered(h.r, "/g", GRANTS), "the grants did not arrive");
    tally_subscriber_info info;
    TEST_WAIT_UNTIL((info = sub_info(h.f.c, "relay:grants")).ack_floor == ACCOUNTS + GRANTS,
                    60000, "the ack floor reaching the head");
    ck_assert_str_eq(info.filter_types, "entitlement.*,transfer.posted");
    const expect e[] = {{series("tally_relay_delivered_total", "grants", NULL), GRANTS}};
    char *text = scrape_until(port, e, 1);
    ck_assert_int_eq(sample(text, series("tally_relay_filtered_total", "grants", NULL)), 0);
    free(text);
    relay_stop(relay, h.log);
    size_t all = 0;
    ck_assert_uint_eq(receiver_delivered(h.r, "/g", &all), GRANTS);
    ck_assert_uint_eq(all, GRANTS);
    for (size_t i = 0; i < h.r->count; i++)
        ck_assert_str_eq(h.r->hooks[i].type, "entitlement.granted");
    http_down(&h);
}
END_TEST

/* ---- endpoints managed at run time (docs/RELAY.md, "Endpoints managed at run time") ---- */

/* `tally endpoint ARGS...` against srv, stdin (NULL: none) piped in; it must
 * succeed. */
static void tally_endpoint_cli(const tallyd_proc *srv, const char *stdin_text, const char *args)
{
    char cmd[1024];
    snprintf(cmd, sizeof(cmd), "%s%s%s exec '%s' --url '%s' endpoint %s",
             stdin_text ? "printf '%s\\n' '" : "", stdin_text ? stdin_text : "",
             stdin_text ? "' |" : "", tallyd_program("tally"), srv->url, args);
    const char *argv[] = {"/bin/sh", "-c", cmd, NULL};
    char *out = NULL, *err = NULL;
    ck_assert_msg(test_run(argv, NULL, &out, &err) == 0, "tally endpoint %s: %s%s", args, out,
                  err);
    free(out);
    free(err);
}

static void grants(tally_client *c, const char *prefix, int count)
{
    for (int i = 0; i < count; i++) {
        char subject[48];
        snprintf(subject, sizeof(subject), "%s-%d", prefix, i);
        tally_entitlement_args g = {.subject = subject, .feature = "pro"};
        tally_result res;
        ck_assert_int_eq(tally_grant(c, NULL, &g, &res), TALLY_ok);
        ck_assert_int_eq(res.code, TALLY_ok);
    }
}

/* A relay whose file has no sink runs the endpoints defined in tallyd: one
 * created with the CLI while it runs is delivered to (signed with its
 * secret), its types changed with the CLI apply from then on, and once it
 * is deleted nothing more reaches it; no event is delivered twice. */
START_TEST(test_http_endpoint_created_updated_deleted_at_run_time)
{
    http_fixture h;
    test_client_up(&h.f);
    tally_client *c = h.f.c;
    http_config_only(&h, "", NULL);
    int port;
    pid_t relay = relay_start_http(h.config, h.log, NULL, &port);
    char create[256];
    snprintf(create, sizeof(create), "create rt http://127.0.0.1:%u/rt --types 'account.*'",
             (unsigned)h.r->port);
    tally_endpoint_cli(&h.f.srv, SECRET_TEXT, create);
    if (!wait_log_says(h.log, "tally-relay: endpoint rt defined in tallyd: delivering"))
        assert_log_says(h.log, "tally-relay: endpoint rt defined in tallyd: delivering"); /* fails, showing the log */
    tally_subscriber_info info;
    TEST_WAIT_UNTIL(tally_subscriber_get(c, "relay:rt", &info) == TALLY_ok, 60000,
                    "the relay creating the endpoint's subscriber");
    enum { ACCOUNTS = 10, GRANTS = 3 };
    test_client_open_accounts(c, 1, ACCOUNTS);
    grants(c, "before", 2); /* not its type yet */
    ck_assert_msg(wait_delivered(h.r, "/rt", ACCOUNTS), "the accounts did not arrive");

    tally_endpoint_cli(&h.f.srv, NULL, "update rt --types 'entitlement.*'");
    if (!wait_log_says(h.log, "tally-relay: endpoint rt changed in tallyd"))
        assert_log_says(h.log, "tally-relay: endpoint rt changed in tallyd"); /* fails, showing the log */
    TEST_WAIT_UNTIL(strcmp(sub_info(c, "relay:rt").filter_types, "entitlement.*") == 0, 60000,
                    "the endpoint's subscriber filtering by its new types");
    test_client_open_accounts(c, 100, 5); /* no longer its type */
    grants(c, "after", GRANTS);
    ck_assert_msg(wait_delivered(h.r, "/rt", ACCOUNTS + GRANTS), "the grants did not arrive");
    /* its series in /metrics, counting on across the restart */
    const expect e[] = {{series("tally_relay_delivered_total", "rt", NULL), ACCOUNTS + GRANTS},
                        {series("tally_relay_lag_events", "rt", NULL), 0}};
    free(scrape_until(port, e, sizeof(e) / sizeof(e[0])));

    tally_endpoint_cli(&h.f.srv, NULL, "delete rt");
    if (!wait_log_says(h.log, "tally-relay: endpoint rt deleted in tallyd: nothing more "
                                       "is delivered to it"))
        assert_log_says(h.log, "tally-relay: endpoint rt deleted in tallyd: nothing more "
                                       "is delivered to it"); /* fails, showing the log */
    grants(c, "gone", GRANTS); /* its sink is joined before the line: none can reach it */
    relay_stop(relay, h.log);
    size_t all = 0;
    ck_assert_uint_eq(receiver_delivered(h.r, "/rt", &all), ACCOUNTS + GRANTS);
    ck_assert_uint_eq(all, ACCOUNTS + GRANTS); /* none twice */
    size_t accounts = 0, granted = 0;
    for (size_t i = 0; i < h.r->count; i++) {
        ck_assert_msg(h.r->hooks[i].signature_ok, "delivery %zu: signature", i);
        accounts += strcmp(h.r->hooks[i].type, "account.opened") == 0;
        granted += strcmp(h.r->hooks[i].type, "entitlement.granted") == 0;
    }
    ck_assert_uint_eq(accounts, ACCOUNTS);
    ck_assert_uint_eq(granted, GRANTS); /* the three after the update, not those before */
    ck_assert_uint_eq(log_count_type(c, "endpoint.created", "rt"), 1);
    ck_assert_uint_eq(log_count_type(c, "endpoint.updated", "rt"), 1);
    ck_assert_uint_eq(log_count_type(c, "endpoint.deleted", "rt"), 1);
    http_down(&h);
}
END_TEST

/* A sink of an endpoint defined in tallyd that cannot run (its
 * subscriber has partitions, which sub_update cannot change) fails
 * /healthz, naming it, and is started again, after a pause, until it
 * runs: once the subscriber is deleted it delivers, and /healthz is ok. */
START_TEST(test_http_endpoint_defined_in_tallyd_that_stops_fails_health)
{
    http_fixture h;
    test_client_up(&h.f);
    tally_client *c = h.f.c;
    tally_subscriber_options parted = {.partitions = 2};
    tally_subscriber *s = NULL;
    ck_assert_int_eq(tally_subscriber_open(c, "relay:stuck", &parted, &s), TALLY_ok);
    tally_subscriber_close(s);
    http_config_only(&h, "", NULL);
    int port;
    pid_t relay = relay_start_http(h.config, h.log, NULL, &port);
    free(healthz_until(port, 200)); /* no sink yet */
    char create[256];
    snprintf(create, sizeof(create), "create stuck http://127.0.0.1:%u/stuck",
             (unsigned)h.r->port);
    tally_endpoint_cli(&h.f.srv, SECRET_TEXT, create);
    const char *ended = "tally-relay: endpoint stuck (defined in tallyd): its sink ended (exit 1)";
    if (!wait_log_says(h.log, ended))
        assert_log_says(h.log, ended); /* fails, showing the log */
    char *body = healthz_until(port, 503);
    ck_assert_msg(strstr(body, "sink relay:stuck stopped"), "/healthz: %s", body);
    free(body);
    ck_assert_int_eq(tally_subscriber_delete(c, "relay:stuck"), TALLY_ok);
    const char *again = "tally-relay: endpoint stuck (defined in tallyd) started again: "
                        "delivering";
    if (!wait_log_says(h.log, again))
        assert_log_says(h.log, again); /* fails, showing the log */
    TEST_WAIT_UNTIL(tally_subscriber_get(c, "relay:stuck", &(tally_subscriber_info){0}) ==
                        TALLY_ok && sub_info(c, "relay:stuck").partitions == 1,
                    60000, "the relay creating the endpoint's subscriber again");
    free(healthz_until(port, 200));
    test_client_open_accounts(c, 1, 3);
    ck_assert_msg(wait_delivered(h.r, "/stuck", 3), "the accounts did not arrive");
    relay_stop(relay, h.log);
    http_down(&h);
}
END_TEST

/* An endpoint of the relay's file and one defined in tallyd by the same
 * name: the file's runs, tallyd's is said and not run. */
START_TEST(test_http_file_endpoint_wins_over_tallyds)
{
    http_fixture h;
    test_client_up(&h.f);
    http_config_only(&h, "[endpoint same]\nurl = @/file\nsecret = " SECRET_TEXT "\n", NULL);
    char create[256];
    snprintf(create, sizeof(create), "create same http://127.0.0.1:%u/tallyd --backfill all",
             (unsigned)h.r->port);
    tally_endpoint_cli(&h.f.srv, SECRET_TEXT, create);
    pid_t relay = relay_start(h.config, h.log);
    if (!wait_log_says(h.log, "tally-relay: endpoint same is in the config file and "
                                       "defined in tallyd: the file's runs, tallyd's is not run"))
        assert_log_says(h.log, "tally-relay: endpoint same is in the config file and "
                                       "defined in tallyd: the file's runs, tallyd's is not run"); /* fails, showing the log */
    tally_subscriber_info info;
    TEST_WAIT_UNTIL(tally_subscriber_get(h.f.c, "relay:same", &info) == TALLY_ok, 60000,
                    "the relay creating the endpoint's subscriber");
    test_client_open_accounts(h.f.c, 1, 3);
    ck_assert_msg(wait_delivered(h.r, "/file", 3), "the file's endpoint did not receive");
    relay_stop(relay, h.log);
    ck_assert_uint_eq(receiver_delivered(h.r, "/tallyd", NULL), 0);
    http_down(&h);
}
END_TEST

/* A case of the suite; CK_RUN_CASE=name runs it alone. */
static TCase *case_new(Suite *s, const char *name)
{
    TCase *tc = tcase_create(name);
    tcase_set_timeout(tc, TEST_TIMEOUT_S);
    suite_add_tcase(s, tc);
    return tc;
}

int main(void)
{
    Suite *s = suite_create("relay");
    TCase *tc = case_new(s, "relay"), *several = case_new(s, "metrics");
    TCase *once = case_new(s, "once"), *seen = case_new(s, "seen");
    bool nats = nats_server_path() != NULL;
    if (nats) {
        tcase_add_test(tc, test_jetstream_survives_kills_and_a_broker_restart);
        tcase_add_test(tc, test_jetstream_refusal_holds_back_the_entity);
        tcase_add_test(several, test_metrics_count_deliveries_and_failures);
        tcase_add_test(several, test_several_relays_deliver_each_event_once);
        tcase_add_test(several, test_a_dead_relays_events_go_to_the_other);
        tcase_add_test(once, test_jetstream_relay_away_past_the_window_stores_each_event_once);
        tcase_add_test(once, test_jetstream_broker_outage_past_the_window_stores_each_event_once);
        tcase_add_test(once, test_jetstream_failover_past_the_window_stores_each_event_once);
        tcase_add_test(seen, test_jetstream_failures_are_labelled_by_cause);
    } else {
        fprintf(stderr, "check_relay: nats-server is not installed ($NATS_SERVER: %s); the "
                        "JetStream tests are skipped (apt-get install nats-server)\n",
                getenv("NATS_SERVER") ? getenv("NATS_SERVER") : "unset");
    }
    tcase_add_test(tc, test_check_validates_the_configuration);
    tcase_add_test(tc, test_config_with_a_secret_must_be_private);
    tcase_add_test(tc, test_check_reads_the_tls_keys);
    tcase_add_test(tc, test_http_failing_receiver_gets_every_event_once_after_dedupe);
    tcase_add_test(tc, test_http_dead_receiver_parks_while_another_endpoint_receives);
    tcase_add_test(tc, test_http_new_endpoint_starts_at_new_events);
    tcase_add_test(tc, test_http_relay_with_a_url_list_skips_a_dead_tallyd);
    tcase_add_test(seen, test_relay_says_when_tallyd_is_away);
    TCase *hooks = case_new(s, "hooks");
    tcase_add_test(hooks, test_check_prints_the_retry_schedule);
    tcase_add_test(hooks, test_http_retry_schedule_parks_after_its_last_attempt);
    tcase_add_test(hooks, test_http_failing_endpoint_is_disabled_until_enabled);
    tcase_add_test(hooks, test_attempt_log_keeps_its_retention);
    tcase_add_test(hooks, test_http_secret_rotation_signs_with_both_during_overlap);
    tcase_add_test(hooks, test_http_recover_resends_every_event_since_a_time);
    TCase *lease = case_new(s, "lease");
    tcase_add_test(lease, test_two_relays_on_a_slow_endpoint_post_each_event_once);
    TCase *settings = case_new(s, "settings");
    tcase_add_test(settings, test_relay_updates_an_old_subscriber_without_replay);
    tcase_add_test(settings, test_relay_refuses_a_subscriber_with_partitions);
    tcase_add_test(settings, test_http_endpoint_types_filter_on_the_server);
    tcase_add_test(settings, test_http_endpoint_created_updated_deleted_at_run_time);
    tcase_add_test(settings, test_http_file_endpoint_wins_over_tallyds);
    tcase_add_test(settings, test_http_endpoint_defined_in_tallyd_that_stops_fails_health);
    int rc = test_run_suite(s);
    return rc == 0 && !nats ? 77 : rc;
}
