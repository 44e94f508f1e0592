/*
 * check_tallyd.c — integration tests of a real tallyd over the wire.
 *
 * Every test starts its own tallyd on ipc:// endpoints in a temp directory
 * (tests/support/tallyd_harness.h) and speaks docs/PROTOCOL.md to it with
 * raw NNG req0/sub0 sockets and msgpack-c: no libtally, so these tests pin
 * the wire contract itself. After a stop, the data directory is opened
 * read-only and checked with ledger_invariants_check and the inbox.
 *
 * Covered: refused requests (malformed, truncated, trailing bytes, not a
 * map, count bomb, wrong type, unknown field, too large, beyond NNG's
 * limit) with the server still serving afterwards; the data-directory lock;
 * SIGTERM, idle and under write load; SIGKILL under load with clients that
 * retry the same bytes across restarts; one key sent by 16 clients at
 * once; 200 requests in flight; PUB in seq order with the hash chain;
 * the log_read long-poll; reads (history paging, entitlement_list,
 * transfer_get, not_found).
 *
 * The machine is shared and slow: nothing asserts speed except the
 * long-poll, which must return well before its wait (3 s margin).
 * Assertions are made in the test's main thread; client threads record
 * what they saw.
 */
#include "common/clock.h"
#include "tests/support/run.h"
#include "tests/support/suite.h"
#include "tests/support/tallyd_harness.h"
#include "tests/support/test_support.h"
#include "tests/support/wait.h"
#include "tests/support/http_client.h"

#include "common/msgpack_safe.h"

#include <errno.h>
#include <fcntl.h>
#include <nng/nng.h>
#include <nng/protocol/pubsub0/sub.h>
#include <nng/protocol/reqrep0/req.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define CLIENT_TIMEOUT_MS 30000
#define CLIENT_RECV_BYTES_MAX (8 * 1024 * 1024)
#define CODE_BYTES_MAX 64
#define LEDGER_ID 1
#define ACCOUNT_CODE 10
#define TRANSFER_CODE 1

/* ---- leftovers: tallyd processes of a test that failed half-way ----
 *
 * Check forks each test; a failing assertion ends the test process at
 * once, before its tallyd_cleanup. The procs live in shared memory so the
 * runner (parent) can kill what a failed test left running. */

#define PROCS_MAX 2
static tallyd_proc *procs;

static tallyd_proc *proc_fresh(unsigned i)
{
    memset(&procs[i], 0, sizeof(procs[i]));
    return &procs[i];
}

static void reap_leftovers(void)
{
    for (unsigned i = 0; i < PROCS_MAX; i++) {
        tallyd_proc *p = &procs[i];
        if (p->pid > 0) {
            kill(p->pid, SIGKILL);
            waitpid(p->pid, NULL, 0); /* not our child: returns at once */
        }
        if (p->dir[0] && !getenv("TALLY_KEEP_TEST_DIRS"))
            test_remove_dir(p->dir);
        memset(p, 0, sizeof(*p));
    }
}

/* The last line of tallyd's log, for failure messages. */
static void log_tail(const tallyd_proc *p, char *out, size_t size)
{
    out[0] = '\0';
    FILE *f = fopen(p->log_path, "r");
    if (f == NULL)
        return;
    char line[512];
    while (fgets(line, sizeof(line), f))
        snprintf(out, size, "%s", line);
    fclose(f);
    out[strcspn(out, "\n")] = '\0';
}

/* SIGTERM and wait for the exit status like tallyd_stop, but a tallyd that
 * hangs in its shutdown fails here, named, instead of as a test timeout. */
#define STOP_WAIT_MS 30000

static int stop_tallyd(tallyd_proc *p)
{
    ck_assert_int_gt(p->pid, 0);
    ck_assert_int_eq(kill(p->pid, SIGTERM), 0);
    int status = 0;
    if (!test_wait_ms(p->pid, STOP_WAIT_MS, &status)) {
        char last[512];
        log_tail(p, last, sizeof(last));
        ck_abort_msg("tallyd did not exit within %d s of SIGTERM; last log line: %s",
                     STOP_WAIT_MS / 1000, last);
    }
    p->pid = 0;
    int code = test_exit_code(status);
    if (code != 0) { /* why: the end of its log (a sanitizer report, an assertion) */
        char cmd[600];
        snprintf(cmd, sizeof(cmd), "tail -c 6000 '%s' >&2", p->log_path);
        fprintf(stderr, "tallyd exited with %d at SIGTERM; its log ends:\n", code);
        fflush(stderr);
        (void)!system(cmd);
    }
    return code;
}

/* ---- requests: msgpack maps built with msgpack-c ---- */

typedef struct req_buf {
    msgpack_sbuffer sb;
    msgpack_packer pk;
    int bad; /* a pack call failed */
} req_buf;

static void kv_str(req_buf *b, const char *k, const char *v)
{
    b->bad |= msgpack_safe_pack_cstr(&b->pk, k) | msgpack_safe_pack_cstr(&b->pk, v);
}

static void kv_uint(req_buf *b, const char *k, uint64_t v)
{
    b->bad |= msgpack_safe_pack_cstr(&b->pk, k) | msgpack_pack_uint64(&b->pk, v);
}

static void kv_int(req_buf *b, const char *k, int64_t v)
{
    b->bad |= msgpack_safe_pack_cstr(&b->pk, k) | msgpack_pack_int64(&b->pk, v);
}

static void kv_bool(req_buf *b, const char *k, bool v)
{
    b->bad |= msgpack_safe_pack_cstr(&b->pk, k) |
              (v ? msgpack_pack_true(&b->pk) : msgpack_pack_false(&b->pk));
}

static void kv_id(req_buf *b, const char *k, uint64_t n)
{
    tally_id128 id = test_id(n);
    b->bad |= msgpack_safe_pack_cstr(&b->pk, k) | msgpack_safe_pack_bin(&b->pk, id.bytes, 16);
}

/* A request map of `fields` entries besides v and op. */
static void rb_begin(req_buf *b, uint32_t fields, const char *op)
{
    msgpack_sbuffer_init(&b->sb);
    msgpack_packer_init(&b->pk, &b->sb, msgpack_sbuffer_write);
    b->bad = msgpack_pack_map(&b->pk, fields + 2);
    kv_uint(b, "v", 1);
    kv_str(b, "op", op);
}

/* A write: `fields` entries besides v, op, consumer and key. */
static void rb_begin_write(req_buf *b, uint32_t fields, const char *op, const char *consumer,
                           const char *key)
{
    rb_begin(b, fields + 2, op);
    kv_str(b, "consumer", consumer);
    kv_str(b, "key", key);
}

static void rb_free(req_buf *b) { msgpack_sbuffer_destroy(&b->sb); }

static void build_stats(req_buf *b) { rb_begin(b, 0, "stats"); }

static void build_open(req_buf *b, const char *consumer, const char *key, uint64_t id)
{
    rb_begin_write(b, 3, "account_open", consumer, key);
    kv_uint(b, "id", id);
    kv_uint(b, "ledger", LEDGER_ID);
    kv_uint(b, "code", ACCOUNT_CODE);
}

static void build_transfer(req_buf *b, const char *consumer, const char *key, uint64_t tid,
                           uint64_t debit, uint64_t credit, int64_t amount)
{
    rb_begin_write(b, 6, "transfer", consumer, key);
    kv_id(b, "id", tid);
    kv_uint(b, "debit_account_id", debit);
    kv_uint(b, "credit_account_id", credit);
    kv_int(b, "amount", amount);
    kv_uint(b, "ledger", LEDGER_ID);
    kv_uint(b, "code", TRANSFER_CODE);
}

static void build_account_get(req_buf *b, uint64_t id)
{
    rb_begin(b, 1, "account_get");
    kv_uint(b, "id", id);
}

static void build_history(req_buf *b, uint64_t id, uint64_t after_seq, uint32_t limit,
                          bool reverse)
{
    rb_begin(b, 2 + (after_seq ? 1 : 0) + (reverse ? 1 : 0), "account_history");
    kv_uint(b, "id", id);
    kv_uint(b, "limit", limit);
    if (after_seq)
        kv_uint(b, "after_seq", after_seq);
    if (reverse)
        kv_bool(b, "reverse", true);
}

static void build_transfer_get(req_buf *b, uint64_t tid)
{
    rb_begin(b, 1, "transfer_get");
    kv_id(b, "id", tid);
}

/* until_ms 0: for life. */
static void build_grant(req_buf *b, const char *key, const char *subject, const char *feature,
                        int64_t until_ms)
{
    rb_begin_write(b, until_ms ? 3 : 2, "grant", "billing", key);
    kv_str(b, "subject", subject);
    kv_str(b, "feature", feature);
    if (until_ms)
        kv_int(b, "valid_until_ms", until_ms);
}

static void build_entitlement_list(req_buf *b, const char *subject)
{
    rb_begin(b, 1, "entitlement_list");
    kv_str(b, "subject", subject);
}

static void build_log_read(req_buf *b, uint64_t from_seq, uint32_t limit, uint32_t wait_ms)
{
    rb_begin(b, 3, "log_read");
    kv_uint(b, "from_seq", from_seq);
    kv_uint(b, "limit", limit);
    kv_uint(b, "wait_ms", wait_ms);
}

/* ---- replies ---- */

typedef struct reply {
    void *buf; /* the NNG message body; decoded strings point into it */
    size_t len;
    msgpack_unpacked up;
    bool parsed;
} reply;

static const msgpack_object *reply_map(const reply *r) { return &r->up.data; }

static void reply_free(reply *r)
{
    if (r->parsed)
        msgpack_unpacked_destroy(&r->up);
    if (r->buf)
        nng_free(r->buf, r->len);
    memset(r, 0, sizeof(*r));
}

static bool obj_str_is(const msgpack_object *o, const char *s)
{
    size_t n = strlen(s);
    return o && o->type == MSGPACK_OBJECT_STR && o->via.str.size == n &&
           memcmp(o->via.str.ptr, s, n) == 0;
}

/* The reply must be exactly one map whose first entries are v: 1 and
 * code: str (PROTOCOL.md, Replies). */
static bool reply_parse(reply *r)
{
    msgpack_unpacked_init(&r->up);
    r->parsed = true;
    size_t off = 0;
    if (msgpack_unpack_next(&r->up, r->buf, r->len, &off) != MSGPACK_UNPACK_SUCCESS ||
        off != r->len)
        return false;
    const msgpack_object *m = reply_map(r);
    if (m->type != MSGPACK_OBJECT_MAP || m->via.map.size < 2)
        return false;
    const msgpack_object_kv *kv = m->via.map.ptr;
    return obj_str_is(&kv[0].key, "v") && kv[0].val.type == MSGPACK_OBJECT_POSITIVE_INTEGER &&
           kv[0].val.via.u64 == 1 && obj_str_is(&kv[1].key, "code") &&
           kv[1].val.type == MSGPACK_OBJECT_STR;
}

/* Send bytes, receive and parse the reply. 0, an NNG error, or -1 when
 * the reply is not a well-formed reply map. Never asserts (threads). */
/* noinline: tests/lsan.supp names this frame (a message NNG loses) */
__attribute__((noinline)) static int raw_exchange(nng_socket s, const void *bytes, size_t len, reply *r)
{
    memset(r, 0, sizeof(*r));
    int rv = nng_send(s, (void *)bytes, len, 0);
    if (rv != 0)
        return rv;
    rv = nng_recv(s, &r->buf, &r->len, NNG_FLAG_ALLOC);
    if (rv != 0) {
        r->buf = NULL;
        return rv;
    }
    return reply_parse(r) ? 0 : -1;
}

static void reply_code(const reply *r, char out[CODE_BYTES_MAX])
{
    const msgpack_object *c = msgpack_safe_map_get(reply_map(r), "code");
    if (c && c->type == MSGPACK_OBJECT_STR)
        snprintf(out, CODE_BYTES_MAX, "%.*s", (int)c->via.str.size, c->via.str.ptr);
    else
        snprintf(out, CODE_BYTES_MAX, "(no code)");
}

/* Faults are not stored: the same key may (must) be retried. */
static bool code_is_fault(const char *name)
{
    for (int n = 0; n < 256; n++)
        if (strcmp(tally_strerror(n), name) == 0)
            return tally_error_class_of(n) == TALLY_CLASS_FAULT;
    return false;
}

static nng_socket client_open(const char *url, int recv_timeout_ms)
{
    nng_socket s;
    ck_assert_int_eq(nng_req0_open(&s), 0);
    nng_socket_set_ms(s, NNG_OPT_RECVTIMEO, recv_timeout_ms);
    nng_socket_set_ms(s, NNG_OPT_SENDTIMEO, recv_timeout_ms);
    nng_socket_set_size(s, NNG_OPT_RECVMAXSZ, CLIENT_RECV_BYTES_MAX);
    int rv = nng_dial(s, url, NULL, 0);
    ck_assert_msg(rv == 0, "dial %s: %s", url, nng_strerror(rv));
    return s;
}

/* Send raw bytes; fail the test unless a reply map comes back. */
static void call_raw(nng_socket s, const void *bytes, size_t len, reply *r)
{
    int rv = raw_exchange(s, bytes, len, r);
    ck_assert_msg(rv == 0, "request of %zu bytes: %s", len,
                  rv < 0 ? "reply is not a reply map" : nng_strerror(rv));
}

static void call(nng_socket s, req_buf *b, reply *r)
{
    ck_assert_msg(!b->bad, "could not pack the request");
    call_raw(s, b->sb.data, b->sb.size, r);
    rb_free(b);
}

static void assert_code(const reply *r, const char *want)
{
    char got[CODE_BYTES_MAX];
    reply_code(r, got);
    ck_assert_msg(strcmp(got, want) == 0, "code %s, expected %s", got, want);
}

/* A field of a map; fails the test when absent. */
static const msgpack_object *field(const msgpack_object *map, const char *key)
{
    const msgpack_object *o = msgpack_safe_map_get(map, key);
    ck_assert_msg(o != NULL, "reply has no field %s", key);
    return o;
}

static uint64_t field_u64(const msgpack_object *map, const char *key)
{
    uint64_t v;
    ck_assert_msg(msgpack_safe_get_u64(field(map, key), &v), "field %s is not a uint", key);
    return v;
}

static int64_t field_i64(const msgpack_object *map, const char *key)
{
    int64_t v;
    ck_assert_msg(msgpack_safe_get_i64(field(map, key), &v), "field %s is not an int", key);
    return v;
}

static bool field_bool(const msgpack_object *map, const char *key)
{
    const msgpack_object *o = field(map, key);
    ck_assert_msg(o->type == MSGPACK_OBJECT_BOOLEAN, "field %s is not a bool", key);
    return o->via.boolean;
}

static bool field_is_nil(const msgpack_object *map, const char *key)
{
    return field(map, key)->type == MSGPACK_OBJECT_NIL;
}

static const msgpack_object *field_array(const msgpack_object *map, const char *key)
{
    const msgpack_object *o = field(map, key);
    ck_assert_msg(o->type == MSGPACK_OBJECT_ARRAY, "field %s is not an array", key);
    return o;
}

static void assert_message(const reply *r, const char *want)
{
    ck_assert_msg(obj_str_is(msgpack_safe_map_get(reply_map(r), "message"), want),
                  "message is not \"%s\"", want);
}

/* ---- common steps ---- */

static void expect_ok_write(nng_socket s, req_buf *b)
{
    reply r;
    call(s, b, &r);
    assert_code(&r, "ok");
    ck_assert(!field_bool(reply_map(&r), "replayed"));
    reply_free(&r);
}

/* Transfers 1..count from debit to credit, transfer i moving i under key
 * "<prefix>-i" (consumer "shop"); each must be applied. */
static void write_transfers(nng_socket s, const char *prefix, uint64_t count, uint64_t debit,
                            uint64_t credit)
{
    req_buf b;
    for (uint64_t i = 1; i <= count; i++) {
        char key[32];
        snprintf(key, sizeof(key), "%s-%llu", prefix, (unsigned long long)i);
        build_transfer(&b, "shop", key, i, debit, credit, (int64_t)i);
        expect_ok_write(s, &b);
    }
}

static void open_account(nng_socket s, uint64_t id)
{
    char key[32];
    snprintf(key, sizeof(key), "open-%llu", (unsigned long long)id);
    req_buf b;
    build_open(&b, "setup", key, id);
    expect_ok_write(s, &b);
}

/* Account fields read over the wire. */
static void account_balances(nng_socket s, uint64_t id, int64_t *debits_posted,
                             int64_t *credits_posted)
{
    req_buf b;
    reply r;
    build_account_get(&b, id);
    call(s, &b, &r);
    assert_code(&r, "ok");
    const msgpack_object *a = field(reply_map(&r), "account");
    ck_assert_uint_eq(field_u64(a, "id"), id);
    *debits_posted = field_i64(a, "debits_posted");
    *credits_posted = field_i64(a, "credits_posted");
    reply_free(&r);
}

static uint64_t stats_head(nng_socket s)
{
    req_buf b;
    reply r;
    build_stats(&b);
    call(s, &b, &r);
    assert_code(&r, "ok");
    uint64_t head = field_u64(reply_map(&r), "head_seq");
    reply_free(&r);
    return head;
}

/* ---- the stopped store, read-only ---- */

static store *store_open_stopped(const tallyd_proc *p)
{
    return test_store_open_read_only(p->data_dir);
}

static void print_finding(const char *check, const char *entity, const char *detail, void *ctx)
{
    (void)ctx;
    fprintf(stderr, "invariant %s: %s: %s\n", check, entity, detail);
}

static void assert_store_invariants(store *st)
{
    store_txn t;
    ck_assert_int_eq(store_txn_begin(st, NULL, true, &t), TALLY_ok);
    ledger_invariant_stats stats;
    int rc = ledger_invariants_check(&t, print_finding, NULL, &stats);
    store_txn_abort(&t);
    ck_assert_msg(rc == TALLY_ok, "invariants could not run: %s", tally_strerror(rc));
    ck_assert_msg(stats.findings == 0, "%llu invariant findings (see stderr)",
                  (unsigned long long)stats.findings);
}

static ledger_account store_account(store *st, uint64_t id)
{
    store_txn t;
    ledger_account a;
    ck_assert_int_eq(store_txn_begin(st, NULL, true, &t), TALLY_ok);
    int rc = ledger_account_get(&t, id, &a);
    store_txn_abort(&t);
    ck_assert_msg(rc == TALLY_ok, "account %llu: %s", (unsigned long long)id, tally_strerror(rc));
    return a;
}

/* Calls fn with every event of the log, decoded; counts undecodable ones. */
typedef void (*event_fn)(const log_event *ev, void *ctx);

typedef struct scan_ctx {
    event_fn fn;
    void *ctx;
    uint64_t undecodable;
} scan_ctx;

static int scan_one(uint64_t seq, const void *bytes, size_t len, void *arg)
{
    (void)seq;
    scan_ctx *sc = arg;
    msgpack_unpacked up;
    msgpack_unpacked_init(&up);
    log_event ev;
    if (log_event_decode(bytes, len, &up, &ev) == TALLY_ok)
        sc->fn(&ev, sc->ctx);
    else
        sc->undecodable++;
    msgpack_unpacked_destroy(&up);
    return 0;
}

static void store_scan_events(store *st, event_fn fn, void *ctx)
{
    store_txn t;
    ck_assert_int_eq(store_txn_begin(st, NULL, true, &t), TALLY_ok);
    log_head head;
    ck_assert_int_eq(log_head_get(&t, &head), TALLY_ok);
    scan_ctx sc = {fn, ctx, 0};
    int rc = head.seq ? log_read(&t, 1, head.seq, scan_one, &sc) : TALLY_ok;
    store_txn_abort(&t);
    ck_assert_msg(rc == TALLY_ok, "log_read: %s", tally_strerror(rc));
    ck_assert_uint_eq(sc.undecodable, 0);
}

/* ==== 1. refused requests, and the server keeps serving ==== */

static void expect_refusal(nng_socket s, const void *bytes, size_t len, const char *code,
                           const char *message)
{
    reply r;
    call_raw(s, bytes, len, &r);
    assert_code(&r, code);
    if (message)
        assert_message(&r, message);
    ck_assert_uint_eq(reply_map(&r)->via.map.size, 3); /* v, code, message */
    reply_free(&r);
}

static void expect_refusal_rb(nng_socket s, req_buf *b, const char *code, const char *message)
{
    ck_assert(!b->bad);
    expect_refusal(s, b->sb.data, b->sb.size, code, message);
    rb_free(b);
}

/* A stats request padded with a bin field to total about `bytes`. */
static void build_padded(req_buf *b, size_t bytes)
{
    rb_begin(b, 1, "stats");
    char *pad = calloc(1, bytes);
    ck_assert_ptr_nonnull(pad);
    b->bad |= msgpack_safe_pack_cstr(&b->pk, "pad") | msgpack_safe_pack_bin(&b->pk, pad, bytes);
    free(pad);
}

static const char NOT_ONE_OBJECT[] =
    "not one whole msgpack object (truncated, trailing bytes, counts beyond the bytes, nested > 16)";

static void send_malformed_requests(nng_socket s)
{
    static const uint8_t stats[] = "\x82\xa1v\x01\xa2op\xa5stats";
    size_t stats_len = sizeof(stats) - 1;
    uint8_t trailing[32];
    memcpy(trailing, stats, stats_len);
    trailing[stats_len] = 0x00;

    expect_refusal(s, "\xc1", 1, "malformed_request", NOT_ONE_OBJECT);        /* not msgpack */
    expect_refusal(s, "", 0, "malformed_request", NOT_ONE_OBJECT);            /* empty */
    expect_refusal(s, stats, stats_len - 1, "malformed_request", NOT_ONE_OBJECT); /* truncated */
    expect_refusal(s, trailing, stats_len + 1, "malformed_request", NOT_ONE_OBJECT);
    expect_refusal(s, "\x01", 1, "malformed_request", "a request is a msgpack map");
    expect_refusal(s, "\x93\x01\x02\x03", 4, "malformed_request", "a request is a msgpack map");
    expect_refusal(s, "\xdd\xff\xff\xff\xff", 5, "malformed_request", NOT_ONE_OBJECT);
    expect_refusal(s, "\xdf\xff\xff\xff\xff", 5, "malformed_request", NOT_ONE_OBJECT);
    expect_refusal(s, "\xdb\xff\xff\xff\xff", 5, "malformed_request", NOT_ONE_OBJECT);

    req_buf b;
    rb_begin(&b, 1, "account_get"); /* wrong type: the id as a string */
    kv_str(&b, "id", "1");
    expect_refusal_rb(s, &b, "wrong_type", "id");

    rb_begin(&b, 1, "log_read"); /* wrong type: the limit as a bool */
    kv_bool(&b, "limit", true);
    expect_refusal_rb(s, &b, "wrong_type", "limit");

    msgpack_sbuffer_init(&b.sb); /* the op as an integer */
    msgpack_packer_init(&b.pk, &b.sb, msgpack_sbuffer_write);
    b.bad = msgpack_pack_map(&b.pk, 2);
    kv_uint(&b, "v", 1);
    kv_uint(&b, "op", 7);
    expect_refusal_rb(s, &b, "wrong_type", "op");

    rb_begin(&b, 2, "account_get");
    kv_uint(&b, "id", 1);
    kv_str(&b, "colour", "red");
    expect_refusal_rb(s, &b, "unknown_field", "colour");

    rb_begin(&b, 2, "account_get");
    kv_uint(&b, "id", 1);
    kv_uint(&b, "id", 2);
    expect_refusal_rb(s, &b, "duplicate_field", "id");

    rb_begin(&b, 0, "account_get");
    expect_refusal_rb(s, &b, "missing_field", "id");

    rb_begin(&b, 0, "teleport");
    expect_refusal_rb(s, &b, "unknown_op", NULL);

    msgpack_sbuffer_init(&b.sb); /* another protocol version */
    msgpack_packer_init(&b.pk, &b.sb, msgpack_sbuffer_write);
    b.bad = msgpack_pack_map(&b.pk, 2);
    kv_uint(&b, "v", 2);
    kv_str(&b, "op", "stats");
    expect_refusal_rb(s, &b, "unsupported_version", NULL);

    rb_begin(&b, 1, "log_read");
    kv_uint(&b, "limit", 1001);
    expect_refusal_rb(s, &b, "value_out_of_range", "limit");

    build_padded(&b, 600 * 1024); /* above 512 KiB, below NNG's limit */
    expect_refusal_rb(s, &b, "request_too_large", NULL);
    build_padded(&b, 1536 * 1024);
    expect_refusal_rb(s, &b, "request_too_large", NULL);
}

/* A refused write is not stored: the same key then works as new. */
static void refused_write_is_not_stored(nng_socket s)
{
    req_buf b;
    rb_begin_write(&b, 7, "transfer", "shop", "pay-refused");
    kv_id(&b, "id", 100);
    kv_uint(&b, "debit_account_id", 1);
    kv_uint(&b, "credit_account_id", 2);
    kv_int(&b, "amount", 5);
    kv_uint(&b, "ledger", LEDGER_ID);
    kv_uint(&b, "code", TRANSFER_CODE);
    kv_str(&b, "colour", "red");
    expect_refusal_rb(s, &b, "unknown_field", "colour");

    build_transfer(&b, "shop", "pay-refused", 100, 1, 2, 5);
    expect_ok_write(s, &b);
}

static void assert_serving(const char *url, uint64_t tid, int64_t *moved)
{
    nng_socket s = client_open(url, CLIENT_TIMEOUT_MS);
    stats_head(s);
    char key[32];
    snprintf(key, sizeof(key), "pay-%llu", (unsigned long long)tid);
    req_buf b;
    build_transfer(&b, "shop", key, tid, 1, 2, 7);
    expect_ok_write(s, &b);
    *moved += 7;
    nng_close(s);
}

/* A raw req0 socket sends the 3 MiB request once: a cooked one would
 * resend it on every reconnect, and closing a socket in that churn makes
 * this process's NNG 1.5.2 hang now and then (nanomsg/nng#1543). */
/* A request beyond NNG's receive limit: the connection is dropped without
 * a reply. Spoken by hand over the ipc socket (tallyd_oversized_is_dropped):
 * an NNG socket here would need nng_close after its pipe was dropped, which
 * can deadlock in NNG 1.5.2 (nanomsg/nng#1543). */
static void assert_oversized_connection_dropped(const char *url)
{
    ck_assert_msg(tallyd_oversized_is_dropped(url, 3 * 1024 * 1024),
                  "a 3 MiB request was answered or its connection not dropped");
}

START_TEST(refused_requests_leave_the_server_serving)
{
    tallyd_proc *p = proc_fresh(0);
    tallyd_start(p);
    nng_socket s = client_open(p->url, CLIENT_TIMEOUT_MS);
    open_account(s, 1);
    open_account(s, 2);
    uint64_t head_before = stats_head(s);

    send_malformed_requests(s);
    ck_assert_uint_eq(stats_head(s), head_before); /* refusals append nothing */
    int64_t moved = 0;
    assert_serving(p->url, 200, &moved);
    refused_write_is_not_stored(s);
    moved += 5;

    /* Beyond 2 MiB NNG drops the connection: no reply, the pipe closes. */
    assert_oversized_connection_dropped(p->url);

    assert_serving(p->url, 201, &moved); /* a new connection */
    stats_head(s);                       /* and the old one */
    int64_t debits, credits;
    account_balances(s, 2, &debits, &credits);
    ck_assert_int_eq(credits, moved);
    nng_close(s);

    ck_assert_int_eq(stop_tallyd(p), 0);
    store *st = store_open_stopped(p);
    assert_store_invariants(st);
    store_close(st);
    tallyd_cleanup(p);
}
END_TEST

/* ==== 2. one tallyd per data directory ==== */

static int run_second_tallyd(tallyd_proc *first, tallyd_proc *second, const char *err_path)
{
    char url[400];
    snprintf(url, sizeof(url), "ipc://%s/second.sock", first->dir);
    const char *argv[] = {tallyd_program("tallyd"), "--data", first->data_dir, "--listen", url,
                          "--publish", "none", "--http", "none", NULL};
    int err_fd = open(err_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    ck_assert_int_ge(err_fd, 0);
    pid_t pid = test_spawn(argv, NULL, -1, err_fd);
    close(err_fd);
    second->pid = pid;
    int status = 0;
    if (!test_wait_ms(pid, 30000, &status)) {
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
        second->pid = 0;
        ck_abort_msg("a second tallyd on the same data directory kept running");
    }
    second->pid = 0;
    ck_assert_msg(WIFEXITED(status), "second tallyd died of signal %d", WTERMSIG(status));
    return WEXITSTATUS(status);
}

START_TEST(second_tallyd_on_same_data_dir_is_refused)
{
    tallyd_proc *p = proc_fresh(0);
    tallyd_start(p);
    char err_path[400];
    snprintf(err_path, sizeof(err_path), "%s/second.err", p->dir);

    int status = run_second_tallyd(p, proc_fresh(1), err_path);
    ck_assert_int_ne(status, 0);
    ck_assert_int_ne(status, 127); /* it did run */
    FILE *f = fopen(err_path, "r");
    ck_assert_ptr_nonnull(f);
    char err[4096];
    size_t n = fread(err, 1, sizeof(err) - 1, f);
    fclose(f);
    err[n] = '\0';
    ck_assert_msg(strstr(err, "tally.lock") != NULL, "stderr does not name the lock: %s", err);

    nng_socket s = client_open(p->url, CLIENT_TIMEOUT_MS); /* the first is unharmed */
    open_account(s, 1);
    stats_head(s);
    nng_close(s);
    ck_assert_int_eq(stop_tallyd(p), 0);
    tallyd_cleanup(p);
}
END_TEST

/* ==== 3. SIGTERM: clean exit, a sound store, a restart ==== */

START_TEST(sigterm_exits_cleanly_and_store_reopens)
{
    tallyd_proc *p = proc_fresh(0);
    tallyd_start(p);
    nng_socket s = client_open(p->url, CLIENT_TIMEOUT_MS);
    open_account(s, 1);
    open_account(s, 2);
    write_transfers(s, "pay", 5, 1, 2);
    uint64_t head = stats_head(s);
    nng_close(s);

    ck_assert_int_eq(stop_tallyd(p), 0);
    store *st = store_open_stopped(p);
    assert_store_invariants(st);
    store_txn t;
    log_head h;
    ck_assert_int_eq(store_txn_begin(st, NULL, true, &t), TALLY_ok);
    ck_assert_int_eq(log_head_get(&t, &h), TALLY_ok);
    store_txn_abort(&t);
    ck_assert_uint_eq(h.seq, head);
    ck_assert_int_eq(store_account(st, 2).credits_posted, 15);
    store_close(st);

    tallyd_restart(p);
    s = client_open(p->url, CLIENT_TIMEOUT_MS);
    ck_assert_uint_eq(stats_head(s), head);
    req_buf b;
    build_transfer(&b, "shop", "pay-6", 6, 1, 2, 6);
    expect_ok_write(s, &b);
    build_transfer(&b, "shop", "pay-1", 1, 1, 2, 1); /* the inbox survived */
    reply r;
    call(s, &b, &r);
    assert_code(&r, "ok");
    ck_assert(field_bool(reply_map(&r), "replayed"));
    reply_free(&r);
    int64_t debits, credits;
    account_balances(s, 2, &debits, &credits);
    ck_assert_int_eq(credits, 21);
    nng_close(s);
    ck_assert_int_eq(stop_tallyd(p), 0);
    tallyd_cleanup(p);
}
END_TEST

/* ==== load: client threads sending transfers with unique keys ==== */

enum key_status { KEY_UNSENT, KEY_OK, KEY_REJECTED, KEY_FAULT, KEY_NO_REPLY };

#define LOAD_THREADS 8
#define LOAD_KEYS_MAX 20000
#define LOAD_CONSUMER "load"

typedef struct load_thread {
    const char *url;
    unsigned index;
    int recv_timeout_ms;
    bool retry;          /* retry each key until a definitive reply */
    unsigned keys_min;   /* with retry: keys to send before looking at load_kills_done */
    int64_t deadline_ms; /* with retry: give up on a key after this (mono) */
    unsigned sent;       /* keys 0..sent-1 were sent */
    uint8_t status[LOAD_KEYS_MAX];
    unsigned attempts, no_reply, replayed, gave_up, unexpected, redials;
    char unexpected_code[CODE_BYTES_MAX];
} load_thread;

static atomic_bool load_stop;      /* test 4: stop sending new keys */
static atomic_bool load_kills_done; /* test 5: finish after keys_min */
static atomic_uint load_acked;

static void load_key(unsigned thread, unsigned i, char key[32])
{
    snprintf(key, 32, "L%02u-%06u", thread, i);
}

static uint64_t load_tid(unsigned thread, unsigned i)
{
    return ((uint64_t)(thread + 1) << 32) | (i + 1);
}

static int64_t load_amount(unsigned i) { return 1 + (int64_t)(i % 7); }

/* One socket for the thread's whole run: when tallyd is killed its dialer
 * redials by itself (every 50-200 ms) and the thread resends the same
 * bytes. Closing and reopening sockets at each timeout instead makes this
 * test process's own NNG 1.5.2 hang now and then (nng_close racing pipes
 * that are going away, nanomsg/nng#1543), which is not what is tested. */
static int load_socket(load_thread *lt, nng_socket *s)
{
    int rv = nng_req0_open(s);
    if (rv != 0)
        return rv;
    nng_socket_set_ms(*s, NNG_OPT_RECVTIMEO, lt->recv_timeout_ms);
    nng_socket_set_ms(*s, NNG_OPT_SENDTIMEO, lt->recv_timeout_ms);
    nng_socket_set_ms(*s, NNG_OPT_RECONNMINT, 50);
    nng_socket_set_ms(*s, NNG_OPT_RECONNMAXT, 200);
    return nng_dial(*s, lt->url, NULL, NNG_FLAG_NONBLOCK);
}

/* Without a reply for this long, the thread adds a dialer to its socket:
 * NNG 1.5.2's dialer stops for good when the server dies during the SP
 * handshake (nanomsg/nng#1518; libtally's client_redial does the same).
 * The stopped dialer is left alone (closing it would race its pipes). */
#define LOAD_REDIAL_AFTER_MS 2000

static void load_redial(load_thread *lt, nng_socket s, int64_t *last_reply_ms)
{
    if (clock_mono_ms() - *last_reply_ms < LOAD_REDIAL_AFTER_MS)
        return;
    if (nng_dial(s, lt->url, NULL, NNG_FLAG_NONBLOCK) == 0)
        lt->redials++;
    *last_reply_ms = clock_mono_ms();
}

/* One attempt: KEY_OK, KEY_REJECTED, KEY_FAULT or KEY_NO_REPLY. */
static int load_attempt(load_thread *lt, nng_socket s, const req_buf *b)
{
    reply r;
    lt->attempts++;
    int rv = raw_exchange(s, b->sb.data, b->sb.size, &r);
    int status = KEY_NO_REPLY;
    if (rv == 0) {
        char code[CODE_BYTES_MAX];
        reply_code(&r, code);
        if (strcmp(code, "ok") == 0) {
            status = KEY_OK;
            const msgpack_object *rp = msgpack_safe_map_get(reply_map(&r), "replayed");
            lt->replayed += rp && rp->type == MSGPACK_OBJECT_BOOLEAN && rp->via.boolean;
        } else if (code_is_fault(code)) {
            status = KEY_FAULT;
        } else {
            status = KEY_REJECTED;
            lt->unexpected++;
            memcpy(lt->unexpected_code, code, sizeof(code));
        }
    }
    reply_free(&r);
    return status;
}

static void *load_main(void *arg)
{
    load_thread *lt = arg;
    nng_socket s;
    if (load_socket(lt, &s) != 0)
        return NULL;
    for (unsigned i = 0; i < LOAD_KEYS_MAX; i++) {
        if (!lt->retry && atomic_load(&load_stop))
            break;
        if (lt->retry && i >= lt->keys_min && atomic_load(&load_kills_done))
            break;
        char key[32];
        load_key(lt->index, i, key);
        req_buf b;
        build_transfer(&b, LOAD_CONSUMER, key, load_tid(lt->index, i), 1, 2, load_amount(i));
        lt->sent = i + 1;
        int status = b.bad ? KEY_NO_REPLY : load_attempt(lt, s, &b);
        int64_t last_reply_ms = clock_mono_ms();
        while (lt->retry && !b.bad && (status == KEY_NO_REPLY || status == KEY_FAULT)) {
            if (clock_mono_ms() > lt->deadline_ms) {
                lt->gave_up++;
                break;
            }
            if (status == KEY_NO_REPLY) { /* killed or slow: resend at once */
                lt->no_reply++;
                load_redial(lt, s, &last_reply_ms);
            } else {
                last_reply_ms = clock_mono_ms();
                test_pause_ms(20); /* a client's pause before it retries */
            }
            status = load_attempt(lt, s, &b);
        }
        rb_free(&b);
        lt->status[i] = (uint8_t)status;
        if (status == KEY_OK)
            atomic_fetch_add(&load_acked, 1);
    }
    nng_close(s);
    return NULL;
}

static load_thread *load_start(const char *url, pthread_t *threads, bool retry,
                               int recv_timeout_ms, unsigned keys_min, int64_t deadline_ms)
{
    load_thread *lts = calloc(LOAD_THREADS, sizeof(*lts));
    ck_assert_ptr_nonnull(lts);
    atomic_store(&load_acked, 0);
    for (unsigned i = 0; i < LOAD_THREADS; i++) {
        lts[i] = (load_thread){.url = url, .index = i, .recv_timeout_ms = recv_timeout_ms,
                               .retry = retry, .keys_min = keys_min, .deadline_ms = deadline_ms};
        ck_assert_int_eq(pthread_create(&threads[i], NULL, load_main, &lts[i]), 0);
    }
    return lts;
}

static void load_join(pthread_t *threads)
{
    for (unsigned i = 0; i < LOAD_THREADS; i++)
        pthread_join(threads[i], NULL);
}

/* What the stopped store holds for the load's keys. */
typedef struct load_effects {
    uint32_t *events_by_key[LOAD_THREADS]; /* transfer.created events caused */
    uint64_t foreign_events;               /* load events with an unknown key */
} load_effects;

static void count_load_event(const log_event *ev, void *ctx)
{
    load_effects *e = ctx;
    if (!ev->has_causation || !tally_str_equal(ev->consumer, tally_str_from(LOAD_CONSUMER)))
        return;
    unsigned thread, i;
    char key[40];
    snprintf(key, sizeof(key), "%.*s", (int)(ev->key.len < 39 ? ev->key.len : 39), ev->key.ptr);
    if (sscanf(key, "L%02u-%06u", &thread, &i) != 2 || thread >= LOAD_THREADS ||
        i >= LOAD_KEYS_MAX) {
        e->foreign_events++;
        return;
    }
    e->events_by_key[thread][i]++;
}

/* Every acknowledged key is in the inbox as ok and caused exactly one
 * event; keys not acknowledged caused at most one; the balances equal the
 * sum of what the inbox says was applied. With all_acked, every sent key
 * must have been acknowledged. */
static void assert_load_effects(store *st, load_thread *lts, bool all_acked)
{
    load_effects e = {{0}};
    for (unsigned t = 0; t < LOAD_THREADS; t++) {
        e.events_by_key[t] = calloc(LOAD_KEYS_MAX, sizeof(uint32_t));
        ck_assert_ptr_nonnull(e.events_by_key[t]);
    }
    store_scan_events(st, count_load_event, &e);
    ck_assert_uint_eq(e.foreign_events, 0);

    store_txn t;
    ck_assert_int_eq(store_txn_begin(st, NULL, true, &t), TALLY_ok);
    int64_t applied = 0;
    unsigned acked = 0;
    for (unsigned th = 0; th < LOAD_THREADS; th++) {
        for (unsigned i = 0; i < LOAD_KEYS_MAX; i++) {
            char key[32];
            load_key(th, i, key);
            uint32_t events = e.events_by_key[th][i];
            ledger_inbox_record rec;
            int rc = ledger_inbox_get(&t, tally_str_from(LOAD_CONSUMER), tally_str_from(key), &rec);
            ck_assert_msg(rc == TALLY_ok || rc == TALLY_not_found, "inbox %s: %s", key,
                          tally_strerror(rc));
            bool in_inbox = rc == TALLY_ok;
            if (i >= lts[th].sent) {
                ck_assert_msg(!in_inbox && events == 0, "key %s was never sent", key);
                continue;
            }
            if (lts[th].status[i] == KEY_OK) {
                acked++;
                ck_assert_msg(in_inbox, "acknowledged key %s is not in the inbox", key);
                ck_assert_msg(rec.outcome.code == TALLY_ok, "key %s: inbox says %s", key,
                              tally_strerror(rec.outcome.code));
                ck_assert_msg(events == 1, "acknowledged key %s caused %u events", key, events);
            } else {
                ck_assert_msg(!all_acked, "key %s never got a definitive reply (status %d)", key,
                              lts[th].status[i]);
                ck_assert_msg(events == (in_inbox ? 1u : 0u), "key %s: %u events, inbox %d", key,
                              events, in_inbox);
            }
            if (in_inbox && rec.outcome.code == TALLY_ok) {
                ck_assert_uint_eq(rec.outcome.event_count, 1);
                applied += load_amount(i);
            }
        }
        free(e.events_by_key[th]);
    }
    store_txn_abort(&t);
    ck_assert_uint_gt(acked, 0);
    ledger_account debit = store_account(st, 1), credit = store_account(st, 2);
    ck_assert_int_eq(debit.debits_posted, applied);
    ck_assert_int_eq(credit.credits_posted, applied);
    ck_assert_int_eq(debit.credits_posted, 0);
    ck_assert_int_eq(credit.debits_posted, 0);
}

static void assert_no_unexpected_codes(const load_thread *lts)
{
    for (unsigned i = 0; i < LOAD_THREADS; i++)
        ck_assert_msg(lts[i].unexpected == 0, "thread %u got %u rejections, e.g. %s", i,
                      lts[i].unexpected, lts[i].unexpected_code);
}

/* ==== 4. SIGTERM under write load ==== */

START_TEST(sigterm_under_load_keeps_every_acknowledged_write)
{
    tallyd_proc *p = proc_fresh(0);
    tallyd_start(p);
    nng_socket s = client_open(p->url, CLIENT_TIMEOUT_MS);
    open_account(s, 1);
    open_account(s, 2);
    nng_close(s);

    pthread_t threads[LOAD_THREADS];
    load_thread *lts = load_start(p->url, threads, false, 2000, 0, 0);
    (void)TEST_WAITED_UNTIL(atomic_load(&load_acked) >= 100, 40000); /* mid-load: at least one */
    ck_assert_uint_gt(atomic_load(&load_acked), 0);
    ck_assert_int_eq(stop_tallyd(p), 0); /* SIGTERM mid-load */
    atomic_store(&load_stop, true);
    load_join(threads);
    assert_no_unexpected_codes(lts);

    unsigned sent = 0, acked = 0, refused = 0;
    for (unsigned i = 0; i < LOAD_THREADS; i++) {
        sent += lts[i].sent;
        for (unsigned k = 0; k < lts[i].sent; k++) {
            acked += lts[i].status[k] == KEY_OK;
            refused += lts[i].status[k] == KEY_FAULT;
        }
    }
    fprintf(stderr, "sigterm under load: %u sent, %u acknowledged, %u shutting_down\n", sent,
            acked, refused);
    store *st = store_open_stopped(p);
    assert_load_effects(st, lts, false);
    assert_store_invariants(st);
    store_close(st);
    free(lts);
    tallyd_cleanup(p);
}
END_TEST

/* ==== 5. SIGKILL under load, clients retrying across restarts ==== */

#define KILLS 6

START_TEST(sigkill_under_load_every_key_applied_once)
{
    tallyd_proc *p = proc_fresh(0);
    tallyd_start(p);
    nng_socket s = client_open(p->url, CLIENT_TIMEOUT_MS);
    open_account(s, 1);
    open_account(s, 2);
    nng_close(s);

    pthread_t threads[LOAD_THREADS];
    /* a generous deadline: a loaded shared machine is slow, and a key given
     * up would fail the test for the machine's sake, not tallyd's */
    load_thread *lts = load_start(p->url, threads, true, 300, 30, test_deadline_ms(240000));
    unsigned seed = (unsigned)getpid();
    for (int k = 0; k < KILLS; k++) {
        unsigned from = atomic_load(&load_acked);
        (void)TEST_WAITED_UNTIL(atomic_load(&load_acked) >= from + 10, 20000); /* some load */
        test_pause_ms(rand_r(&seed) % 200); /* a random kill point: the test's input */
        tallyd_kill(p);
        test_pause_ms(rand_r(&seed) % 300); /* a random time down */
        tallyd_restart(p);
    }
    atomic_store(&load_kills_done, true);
    load_join(threads);

    unsigned attempts = 0, no_reply = 0, replayed = 0, keys = 0, redials = 0;
    for (unsigned i = 0; i < LOAD_THREADS; i++) {
        ck_assert_msg(lts[i].gave_up == 0, "thread %u gave up on %u keys", i, lts[i].gave_up);
        redials += lts[i].redials;
        attempts += lts[i].attempts;
        no_reply += lts[i].no_reply;
        replayed += lts[i].replayed;
        keys += lts[i].sent;
    }
    fprintf(stderr, "sigkill under load: %d kills, %u keys, %u attempts, %u without reply, "
            "%u replayed, %u dialers added\n", KILLS, keys, attempts, no_reply, replayed, redials);
    assert_no_unexpected_codes(lts);

    s = client_open(p->url, CLIENT_TIMEOUT_MS);
    int64_t debits, credits;
    account_balances(s, 2, &debits, &credits);
    int64_t expected = 0;
    for (unsigned i = 0; i < LOAD_THREADS; i++)
        for (unsigned k = 0; k < lts[i].sent; k++)
            expected += load_amount(k);
    ck_assert_int_eq(credits, expected);
    nng_close(s);

    ck_assert_int_eq(stop_tallyd(p), 0);
    store *st = store_open_stopped(p);
    assert_load_effects(st, lts, true);
    assert_store_invariants(st);
    store_close(st);
    free(lts);
    tallyd_cleanup(p);
}
END_TEST

/* ==== 6. one key from 16 clients at once ==== */

#define SAME_KEY_THREADS 16

typedef struct same_key_thread {
    const char *url;
    pthread_barrier_t *barrier;
    int rv;
    char code[CODE_BYTES_MAX];
    int replayed; /* -1 unknown */
    uint64_t seq;
} same_key_thread;

static void *same_key_main(void *arg)
{
    same_key_thread *st = arg;
    st->replayed = -1;
    nng_socket s;
    st->rv = nng_req0_open(&s);
    if (st->rv == 0) {
        nng_socket_set_ms(s, NNG_OPT_RECVTIMEO, CLIENT_TIMEOUT_MS);
        st->rv = nng_dial(s, st->url, NULL, 0);
    }
    req_buf b;
    build_transfer(&b, "shop", "same-key", 77, 1, 2, 42);
    pthread_barrier_wait(st->barrier);
    if (st->rv == 0 && !b.bad) {
        reply r;
        st->rv = raw_exchange(s, b.sb.data, b.sb.size, &r);
        if (st->rv == 0) {
            reply_code(&r, st->code);
            const msgpack_object *rp = msgpack_safe_map_get(reply_map(&r), "replayed");
            if (rp && rp->type == MSGPACK_OBJECT_BOOLEAN)
                st->replayed = rp->via.boolean;
            msgpack_safe_get_u64(msgpack_safe_map_get(reply_map(&r), "seq"), &st->seq);
        }
        reply_free(&r);
    }
    rb_free(&b);
    nng_close(s);
    return NULL;
}

typedef struct key_events {
    const char *key;
    unsigned count;
} key_events;

static void count_key_events(const log_event *ev, void *ctx)
{
    key_events *k = ctx;
    if (ev->has_causation && tally_str_equal(ev->key, tally_str_from(k->key)))
        k->count++;
}

START_TEST(same_key_from_sixteen_clients_applies_once)
{
    tallyd_proc *p = proc_fresh(0);
    tallyd_start(p);
    nng_socket s = client_open(p->url, CLIENT_TIMEOUT_MS);
    open_account(s, 1);
    open_account(s, 2);

    pthread_barrier_t barrier;
    pthread_barrier_init(&barrier, NULL, SAME_KEY_THREADS);
    same_key_thread sts[SAME_KEY_THREADS];
    pthread_t threads[SAME_KEY_THREADS];
    for (int i = 0; i < SAME_KEY_THREADS; i++) {
        sts[i] = (same_key_thread){.url = p->url, .barrier = &barrier};
        ck_assert_int_eq(pthread_create(&threads[i], NULL, same_key_main, &sts[i]), 0);
    }
    for (int i = 0; i < SAME_KEY_THREADS; i++)
        pthread_join(threads[i], NULL);
    pthread_barrier_destroy(&barrier);

    int fresh = 0, replayed = 0;
    for (int i = 0; i < SAME_KEY_THREADS; i++) {
        ck_assert_msg(sts[i].rv == 0, "client %d: %s", i,
                      sts[i].rv < 0 ? "bad reply" : nng_strerror(sts[i].rv));
        ck_assert_msg(strcmp(sts[i].code, "ok") == 0, "client %d: %s", i, sts[i].code);
        ck_assert_int_ge(sts[i].replayed, 0);
        fresh += sts[i].replayed == 0;
        replayed += sts[i].replayed == 1;
        ck_assert_uint_eq(sts[i].seq, sts[0].seq); /* the one stored outcome */
    }
    ck_assert_int_eq(fresh, 1);
    ck_assert_int_eq(replayed, SAME_KEY_THREADS - 1);

    int64_t debits, credits;
    account_balances(s, 2, &debits, &credits);
    ck_assert_int_eq(credits, 42);
    account_balances(s, 1, &debits, &credits);
    ck_assert_int_eq(debits, 42);
    nng_close(s);

    ck_assert_int_eq(stop_tallyd(p), 0);
    store *st = store_open_stopped(p);
    key_events k = {"same-key", 0};
    store_scan_events(st, count_key_events, &k);
    ck_assert_uint_eq(k.count, 1);
    assert_store_invariants(st);
    store_close(st);
    tallyd_cleanup(p);
}
END_TEST

/* ==== 7. 200 requests in flight at once ==== */

#define IN_FLIGHT 200
#define IN_FLIGHT_READ_EVERY 4 /* every 4th request is a read */

START_TEST(two_hundred_requests_in_flight_all_answered)
{
    tallyd_proc *p = proc_fresh(0);
    tallyd_start(p);
    nng_socket s = client_open(p->url, CLIENT_TIMEOUT_MS);
    open_account(s, 1);
    open_account(s, 2);

    static nng_ctx ctxs[IN_FLIGHT];
    static nng_aio *aios[IN_FLIGHT];
    int64_t expected = 0;
    unsigned writes = 0;
    for (unsigned i = 0; i < IN_FLIGHT; i++) {
        req_buf b;
        char key[32];
        snprintf(key, sizeof(key), "fl-%u", i);
        if (i % IN_FLIGHT_READ_EVERY == 0) {
            build_account_get(&b, 1);
        } else {
            build_transfer(&b, "shop", key, 1000 + i, 1, 2, (int64_t)i);
            expected += i;
            writes++;
        }
        ck_assert(!b.bad);
        ck_assert_int_eq(nng_ctx_open(&ctxs[i], s), 0);
        ck_assert_int_eq(nng_aio_alloc(&aios[i], NULL, NULL), 0);
        nng_aio_set_timeout(aios[i], 90000);
        nng_msg *m;
        ck_assert_int_eq(nng_msg_alloc(&m, 0), 0);
        ck_assert_int_eq(nng_msg_append(m, b.sb.data, b.sb.size), 0);
        rb_free(&b);
        nng_aio_set_msg(aios[i], m);
        nng_ctx_send(ctxs[i], aios[i]);
    }
    for (unsigned i = 0; i < IN_FLIGHT; i++) { /* all sent before any reply is read */
        nng_aio_wait(aios[i]);
        int rv = nng_aio_result(aios[i]);
        ck_assert_msg(rv == 0, "send %u: %s", i, nng_strerror(rv));
    }
    for (unsigned i = 0; i < IN_FLIGHT; i++)
        nng_ctx_recv(ctxs[i], aios[i]);
    for (unsigned i = 0; i < IN_FLIGHT; i++) {
        nng_aio_wait(aios[i]);
        int rv = nng_aio_result(aios[i]);
        ck_assert_msg(rv == 0, "request %u got no reply: %s", i, nng_strerror(rv));
        nng_msg *m = nng_aio_get_msg(aios[i]);
        reply r = {0};
        r.len = nng_msg_len(m);
        r.buf = nng_alloc(r.len ? r.len : 1);
        memcpy(r.buf, nng_msg_body(m), r.len);
        nng_msg_free(m);
        ck_assert_msg(reply_parse(&r), "request %u: bad reply", i);
        assert_code(&r, "ok");
        if (i % IN_FLIGHT_READ_EVERY == 0) {
            ck_assert_uint_eq(field_u64(field(reply_map(&r), "account"), "id"), 1);
        } else {
            char key[32];
            snprintf(key, sizeof(key), "fl-%u", i);
            ck_assert(obj_str_is(field(reply_map(&r), "key"), key)); /* its own reply */
            ck_assert(!field_bool(reply_map(&r), "replayed"));
            ck_assert_uint_eq(field_u64(reply_map(&r), "events"), 1);
        }
        reply_free(&r);
        nng_ctx_close(ctxs[i]);
        nng_aio_free(aios[i]);
    }

    int64_t debits, credits;
    account_balances(s, 2, &debits, &credits);
    ck_assert_int_eq(credits, expected);
    ck_assert_uint_eq(stats_head(s), 2 + writes);
    nng_close(s);
    ck_assert_int_eq(stop_tallyd(p), 0);
    store *st = store_open_stopped(p);
    assert_store_invariants(st);
    store_close(st);
    tallyd_cleanup(p);
}
END_TEST

/* ==== 8. PUB: committed events in seq order, hash-chained ==== */

#define PUB_EVENTS_MAX 64

typedef struct stored_event {
    uint8_t *bytes;
    size_t len;
} stored_event;

/* Receive one PUB message; false on timeout. */
static bool sub_recv(nng_socket sub, stored_event *out)
{
    void *buf;
    size_t len;
    if (nng_recv(sub, &buf, &len, NNG_FLAG_ALLOC) != 0)
        return false;
    out->bytes = malloc(len ? len : 1);
    ck_assert_ptr_nonnull(out->bytes);
    memcpy(out->bytes, buf, len);
    out->len = len;
    nng_free(buf, len);
    return true;
}

static void decode_event(const stored_event *se, msgpack_unpacked *up, log_event *ev)
{
    msgpack_unpacked_init(up);
    int rc = log_event_decode(se->bytes, se->len, up, ev);
    ck_assert_msg(rc == TALLY_ok, "a published event does not decode or its hash is wrong");
}

/* The log's bytes for seq, read over the wire. */
static void log_read_one(nng_socket s, uint64_t seq, stored_event *out)
{
    req_buf b;
    reply r;
    build_log_read(&b, seq, 1, 0);
    call(s, &b, &r);
    assert_code(&r, "ok");
    const msgpack_object *events = field_array(reply_map(&r), "events");
    ck_assert_uint_eq(events->via.array.size, 1);
    const msgpack_object *e = &events->via.array.ptr[0];
    ck_assert_int_eq(e->type, MSGPACK_OBJECT_BIN);
    out->len = e->via.bin.size;
    out->bytes = malloc(out->len);
    memcpy(out->bytes, e->via.bin.ptr, out->len);
    reply_free(&r);
}

/* How long one published event may take to arrive (a slow machine; no
 * timing is asserted). */
#define PUB_RECV_TIMEOUT_MS 10000

START_TEST(pub_delivers_committed_events_in_order)
{
    tallyd_proc *p = proc_fresh(0);
    tallyd_start(p);
    nng_socket s = client_open(p->url, CLIENT_TIMEOUT_MS);
    nng_socket sub;
    ck_assert_int_eq(nng_sub0_open(&sub), 0);
    ck_assert_int_eq(nng_socket_set(sub, NNG_OPT_SUB_SUBSCRIBE, "", 0), 0);
    nng_socket_set_ms(sub, NNG_OPT_RECVTIMEO, 200);
    nng_socket_set_size(sub, NNG_OPT_RECVMAXSZ, CLIENT_RECV_BYTES_MAX);
    ck_assert_int_eq(nng_dial(sub, p->pub_url, NULL, 0), 0);

    /* PUB sends only to subscribers it already knows: open accounts until
     * the first event arrives, then everything after it must follow. */
    static stored_event got[PUB_EVENTS_MAX];
    unsigned n = 0;
    uint64_t id = 1;
    int64_t until = test_deadline_ms(30000);
    while (n == 0) {
        ck_assert_msg(id < 1000 && clock_mono_ms() < until, "no event published within %llu writes",
                      (unsigned long long)id);
        open_account(s, id++);
        if (sub_recv(sub, &got[0]))
            n = 1;
    }
    nng_socket_set_ms(sub, NNG_OPT_RECVTIMEO, PUB_RECV_TIMEOUT_MS);
    open_account(s, 1000);
    open_account(s, 1001);
    write_transfers(s, "pub", 8, 1000, 1001);
    uint64_t head = stats_head(s);

    msgpack_unpacked up;
    log_event ev;
    decode_event(&got[0], &up, &ev);
    uint64_t first = ev.seq;
    msgpack_unpacked_destroy(&up);
    ck_assert_uint_le(first, head);
    while (n < head - first + 1) {
        ck_assert_uint_lt(n, PUB_EVENTS_MAX);
        ck_assert_msg(sub_recv(sub, &got[n]), "event %llu was not published",
                      (unsigned long long)(first + n));
        n++;
    }
    uint8_t prev_hash[LOG_HASH_BYTES];
    for (unsigned i = 0; i < n; i++) {
        decode_event(&got[i], &up, &ev);
        ck_assert_uint_eq(ev.seq, first + i); /* seq order, no gap */
        if (i > 0)
            ck_assert_msg(memcmp(ev.prev_hash, prev_hash, LOG_HASH_BYTES) == 0,
                          "event %llu does not chain to the one before",
                          (unsigned long long)ev.seq);
        memcpy(prev_hash, ev.hash, LOG_HASH_BYTES);
        if (ev.seq > head - 8)
            ck_assert(tally_str_equal(ev.type, tally_str_from("transfer.created")));
        msgpack_unpacked_destroy(&up);

        stored_event stored; /* the published bytes are the stored bytes */
        log_read_one(s, first + i, &stored);
        ck_assert_uint_eq(stored.len, got[i].len);
        ck_assert(memcmp(stored.bytes, got[i].bytes, stored.len) == 0);
        free(stored.bytes);
        free(got[i].bytes);
    }
    nng_close(sub);
    nng_close(s);
    ck_assert_int_eq(stop_tallyd(p), 0);
    tallyd_cleanup(p);
}
END_TEST

/* ==== 9. log_read long-poll ==== */

/* The longest wait_ms (TALLY_LOG_WAIT_MS_MAX): a long-poll that returns
 * before it ran out was woken (one whose wait ran out reads the log again
 * and would find the event too). */
#define LONG_POLL_WAIT_MS 30000

typedef struct long_poll {
    const char *url;
    uint64_t from_seq;
    uint32_t wait_ms;
    int rv;
    int64_t elapsed_ms;
    char code[CODE_BYTES_MAX];
    uint64_t head;
    unsigned events;
    stored_event first;
    atomic_bool sent;
} long_poll;

static void *long_poll_main(void *arg)
{
    long_poll *lp = arg;
    nng_socket s;
    lp->rv = nng_req0_open(&s);
    if (lp->rv == 0) {
        nng_socket_set_ms(s, NNG_OPT_RECVTIMEO, CLIENT_TIMEOUT_MS);
        nng_socket_set_size(s, NNG_OPT_RECVMAXSZ, CLIENT_RECV_BYTES_MAX);
        lp->rv = nng_dial(s, lp->url, NULL, 0);
    }
    if (lp->rv != 0) {
        atomic_store(&lp->sent, true);
        return NULL;
    }
    req_buf b;
    build_log_read(&b, lp->from_seq, 10, lp->wait_ms);
    reply r;
    int64_t start = clock_mono_ms();
    lp->rv = nng_send(s, b.sb.data, b.sb.size, 0);
    atomic_store(&lp->sent, true);
    if (lp->rv == 0) {
        memset(&r, 0, sizeof(r));
        lp->rv = nng_recv(s, &r.buf, &r.len, NNG_FLAG_ALLOC);
        lp->elapsed_ms = clock_mono_ms() - start;
        if (lp->rv == 0 && !reply_parse(&r))
            lp->rv = -1;
        if (lp->rv == 0) {
            reply_code(&r, lp->code);
            msgpack_safe_get_u64(msgpack_safe_map_get(reply_map(&r), "head"), &lp->head);
            const msgpack_object *ev = msgpack_safe_map_get(reply_map(&r), "events");
            if (ev && ev->type == MSGPACK_OBJECT_ARRAY) {
                lp->events = ev->via.array.size;
                if (lp->events > 0 && ev->via.array.ptr[0].type == MSGPACK_OBJECT_BIN) {
                    lp->first.len = ev->via.array.ptr[0].via.bin.size;
                    lp->first.bytes = malloc(lp->first.len);
                    memcpy(lp->first.bytes, ev->via.array.ptr[0].via.bin.ptr, lp->first.len);
                }
            }
        }
        if (lp->rv == 0 || r.buf)
            reply_free(&r);
    }
    rb_free(&b);
    nng_close(s);
    return NULL;
}

START_TEST(log_read_long_poll_returns_on_commit_or_after_wait)
{
    tallyd_proc *p = proc_fresh(0);
    p->extra_args[0] = "--http"; /* /metrics: tally_long_polls_parked */
    p->extra_args[1] = "http://127.0.0.1:0";
    tallyd_start(p);
    int port = p->http_port;
    nng_socket s = client_open(p->url, CLIENT_TIMEOUT_MS);
    open_account(s, 1);
    open_account(s, 2);
    uint64_t head = stats_head(s);

    /* A write while the long-poll waits: it returns with that event. */
    long_poll lp = {.url = p->url, .from_seq = head + 1, .wait_ms = LONG_POLL_WAIT_MS};
    pthread_t thread;
    ck_assert_int_eq(pthread_create(&thread, NULL, long_poll_main, &lp), 0);
    ck_assert_msg(test_metrics_sample_reaches(port, "tally_long_polls_parked", 1, 30000),
                  "the long-poll never parked (sent: %d)", (int)atomic_load(&lp.sent));
    req_buf b;
    build_transfer(&b, "shop", "poll-1", 1, 1, 2, 3);
    expect_ok_write(s, &b);
    pthread_join(thread, NULL);
    ck_assert_msg(lp.rv == 0, "long-poll: %s", lp.rv < 0 ? "bad reply" : nng_strerror(lp.rv));
    ck_assert_str_eq(lp.code, "ok");
    ck_assert_msg(lp.elapsed_ms < LONG_POLL_WAIT_MS,
                  "long-poll returned after %lld ms: its wait ran out, not woken by the commit",
                  (long long)lp.elapsed_ms);
    ck_assert_uint_eq(lp.events, 1);
    ck_assert_uint_eq(lp.head, head + 1);
    msgpack_unpacked up;
    log_event ev;
    decode_event(&lp.first, &up, &ev);
    ck_assert_uint_eq(ev.seq, head + 1);
    ck_assert(tally_str_equal(ev.key, tally_str_from("poll-1")));
    msgpack_unpacked_destroy(&up);
    free(lp.first.bytes);

    /* No write: an empty events array after about wait_ms. */
    long_poll idle = {.url = p->url, .from_seq = head + 2, .wait_ms = 1500};
    long_poll_main(&idle);
    ck_assert_msg(idle.rv == 0, "idle long-poll: %s", nng_strerror(idle.rv));
    ck_assert_str_eq(idle.code, "ok");
    ck_assert_uint_eq(idle.events, 0);
    ck_assert_uint_eq(idle.head, head + 1);
    ck_assert_msg(idle.elapsed_ms >= 1400, "idle long-poll returned after %lld ms",
                  (long long)idle.elapsed_ms);

    /* wait_ms with events already there: at once, no waiting needed. */
    long_poll ready = {.url = p->url, .from_seq = head + 1, .wait_ms = 30000};
    long_poll_main(&ready);
    ck_assert_int_eq(ready.rv, 0);
    ck_assert_uint_eq(ready.events, 1);
    free(ready.first.bytes);

    nng_close(s);
    ck_assert_int_eq(stop_tallyd(p), 0);
    tallyd_cleanup(p);
}
END_TEST

/* ==== 10. reads: history paging, entitlement_list, transfer_get ==== */

#define HISTORY_TRANSFERS 7
#define HISTORY_PAGE 3

/* Page through account 1's history; amounts[] get the transfers' amounts
 * in the order returned. Returns the entry count. */
static unsigned history_pages(nng_socket s, bool reverse, int64_t *amounts, uint64_t *seqs)
{
    unsigned count = 0;
    uint64_t after = 0;
    for (int page = 0; page < 10; page++) {
        req_buf b;
        reply r;
        build_history(&b, 1, after, HISTORY_PAGE, reverse);
        call(s, &b, &r);
        assert_code(&r, "ok");
        const msgpack_object *entries = field_array(reply_map(&r), "entries");
        ck_assert_uint_le(entries->via.array.size, HISTORY_PAGE);
        for (uint32_t i = 0; i < entries->via.array.size; i++) {
            const msgpack_object *e = &entries->via.array.ptr[i];
            ck_assert_uint_lt(count, HISTORY_TRANSFERS);
            ck_assert(obj_str_is(field(e, "type"), "transfer.created"));
            ck_assert_int_gt(field_i64(e, "time_ms"), 0);
            seqs[count] = field_u64(e, "seq");
            amounts[count] = field_i64(field(e, "transfer"), "amount");
            ck_assert_uint_eq(field_u64(field(e, "transfer"), "debit_account_id"), 1);
            /* the account right after the event: cumulative debits */
            const msgpack_object *acc = field(e, "account");
            ck_assert_uint_eq(field_u64(acc, "id"), 1);
            int64_t a = amounts[count];
            ck_assert_int_eq(field_i64(acc, "debits_posted"), a * (a + 1) / 2);
            count++;
        }
        bool more = !field_is_nil(reply_map(&r), "next");
        if (more) {
            after = field_u64(reply_map(&r), "next");
            ck_assert_uint_eq(after, seqs[count - 1]);
        }
        reply_free(&r);
        if (!more)
            return count;
    }
    ck_abort_msg("history paging did not end");
    return count;
}

static void assert_history(nng_socket s)
{
    int64_t amounts[HISTORY_TRANSFERS];
    uint64_t seqs[HISTORY_TRANSFERS];
    ck_assert_uint_eq(history_pages(s, false, amounts, seqs), HISTORY_TRANSFERS);
    for (int i = 0; i < HISTORY_TRANSFERS; i++) {
        ck_assert_int_eq(amounts[i], i + 1);
        if (i > 0)
            ck_assert_uint_gt(seqs[i], seqs[i - 1]);
    }
    ck_assert_uint_eq(history_pages(s, true, amounts, seqs), HISTORY_TRANSFERS);
    for (int i = 0; i < HISTORY_TRANSFERS; i++) {
        ck_assert_int_eq(amounts[i], HISTORY_TRANSFERS - i);
        if (i > 0)
            ck_assert_uint_lt(seqs[i], seqs[i - 1]);
    }
    req_buf b; /* account 4 has no transfers */
    reply r;
    build_history(&b, 4, 0, 10, false);
    call(s, &b, &r);
    assert_code(&r, "ok");
    ck_assert_uint_eq(field_array(reply_map(&r), "entries")->via.array.size, 0);
    ck_assert(field_is_nil(reply_map(&r), "next"));
    reply_free(&r);
    build_history(&b, 999, 0, 10, false);
    call(s, &b, &r);
    assert_code(&r, "not_found");
    reply_free(&r);
}

static void assert_entitlements(nng_socket s)
{
    int64_t until = clock_wall_ms() + INT64_C(86400000);
    req_buf b;
    build_grant(&b, "g-1", "alice", "pro", 0);
    expect_ok_write(s, &b);
    build_grant(&b, "g-2", "alice", "team", until);
    expect_ok_write(s, &b);
    build_grant(&b, "g-3", "bob", "pro", 0);
    expect_ok_write(s, &b);

    reply r;
    build_entitlement_list(&b, "alice");
    call(s, &b, &r);
    assert_code(&r, "ok");
    const msgpack_object *list = field_array(reply_map(&r), "entitlements");
    ck_assert_uint_eq(list->via.array.size, 2);
    bool pro = false, team = false;
    for (uint32_t i = 0; i < list->via.array.size; i++) {
        const msgpack_object *e = &list->via.array.ptr[i];
        ck_assert(obj_str_is(field(e, "subject"), "alice"));
        ck_assert(obj_str_is(field(e, "state"), "active"));
        if (obj_str_is(field(e, "feature"), "pro")) {
            pro = true;
            ck_assert(field_is_nil(e, "valid_until_ms"));
        } else if (obj_str_is(field(e, "feature"), "team")) {
            team = true;
            ck_assert_int_eq(field_i64(e, "valid_until_ms"), until);
        }
    }
    ck_assert(pro && team);
    reply_free(&r);

    build_entitlement_list(&b, "nobody");
    call(s, &b, &r);
    assert_code(&r, "ok");
    ck_assert_uint_eq(field_array(reply_map(&r), "entitlements")->via.array.size, 0);
    reply_free(&r);
}

static void assert_transfer_get(nng_socket s)
{
    req_buf b;
    reply r;
    build_transfer_get(&b, 4);
    call(s, &b, &r);
    assert_code(&r, "ok");
    const msgpack_object *t = field(reply_map(&r), "transfer");
    const void *id;
    size_t len;
    ck_assert(msgpack_safe_get_bin(field(t, "id"), &id, &len));
    tally_id128 want = test_id(4);
    ck_assert_uint_eq(len, 16);
    ck_assert(memcmp(id, want.bytes, 16) == 0);
    ck_assert_int_eq(field_i64(t, "amount"), 4);
    ck_assert_uint_eq(field_u64(t, "debit_account_id"), 1);
    ck_assert_uint_eq(field_u64(t, "credit_account_id"), 2);
    ck_assert(obj_str_is(field(t, "state"), "posted"));
    reply_free(&r);

    build_transfer_get(&b, 404);
    call(s, &b, &r);
    assert_code(&r, "not_found");
    reply_free(&r);

    build_account_get(&b, 999);
    call(s, &b, &r);
    assert_code(&r, "not_found");
    reply_free(&r);
}

START_TEST(reads_history_entitlements_transfers)
{
    tallyd_proc *p = proc_fresh(0);
    tallyd_start(p);
    nng_socket s = client_open(p->url, CLIENT_TIMEOUT_MS);
    open_account(s, 1);
    open_account(s, 2);
    open_account(s, 3);
    open_account(s, 4);
    req_buf b;
    for (uint64_t i = 1; i <= HISTORY_TRANSFERS; i++) {
        char key[32];
        snprintf(key, sizeof(key), "h-%llu", (unsigned long long)i);
        build_transfer(&b, "shop", key, i, 1, 2, (int64_t)i);
        expect_ok_write(s, &b);
        if (i == 3) { /* another account's transfer in between */
            build_transfer(&b, "shop", "h-other", 50, 3, 2, 1);
            expect_ok_write(s, &b);
        }
    }
    assert_history(s);
    assert_entitlements(s);
    assert_transfer_get(s);
    nng_close(s);
    ck_assert_int_eq(stop_tallyd(p), 0);
    store *st = store_open_stopped(p);
    assert_store_invariants(st);
    store_close(st);
    tallyd_cleanup(p);
}
END_TEST

/* ---- the suite ---- */

int main(void)
{
    procs = mmap(NULL, PROCS_MAX * sizeof(tallyd_proc), PROT_READ | PROT_WRITE,
                 MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (procs == MAP_FAILED) {
        perror("mmap");
        return EXIT_FAILURE;
    }
    memset(procs, 0, PROCS_MAX * sizeof(tallyd_proc));
    const test_row tests[] = {
        {"refused", refused_requests_leave_the_server_serving, 90},
        {"lock", second_tallyd_on_same_data_dir_is_refused, 60},
        {"sigterm", sigterm_exits_cleanly_and_store_reopens, 60},
        {"sigterm_load", sigterm_under_load_keeps_every_acknowledged_write, 300},
        {"sigkill_load", sigkill_under_load_every_key_applied_once, 300},
        {"same_key", same_key_from_sixteen_clients_applies_once, 60},
        {"in_flight", two_hundred_requests_in_flight_all_answered, 120},
        {"pub", pub_delivers_committed_events_in_order, 60},
        {"long_poll", log_read_long_poll_returns_on_commit_or_after_wait, 60},
        {"reads", reads_history_entitlements_transfers, 60},
    };
    /* reap_leftovers: what a failed test left running; nng_fini: NNG frees
     * closed pipes late */
    const test_fixtures fixtures = {.unchecked_teardown = reap_leftovers,
                                    .checked_teardown = nng_fini};
    Suite *s = suite_create("tallyd");
    test_suite_add_rows(s, TEST_ROWS(tests), &fixtures);
    return test_run_suite(s);
}
