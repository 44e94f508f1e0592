/*
 * check_raw_sp.c — a client written from docs/PROTOCOL.md ("The SP layer")
 * alone: a plain TCP socket to a real tallyd, no NNG on the client side.
 *
 * tallyd listens on tcp://127.0.0.1:PORT besides the harness's ipc://
 * endpoint. The test speaks the SP framing by hand: the 8-byte header
 * {0x00 'S' 'P' 0x00, protocol id (u16 BE), 0x00 0x00} with REQ0 (0x30)
 * and REP0 (0x31), then per message a u64 big-endian length and the
 * payload, whose first 4 bytes are the request id with its high bit set
 * and which the reply echoes. Requests are built with msgpack-c.
 *
 * Covered: one write and one read, a replay, two requests in flight on one
 * connection matched by id; a bad header and a wrong protocol id closed by
 * tallyd, which still serves afterwards; the size limits measured on the
 * msgpack body (512 KiB accepted, one byte more request_too_large; 2 MiB
 * still answered, one byte more and the connection is dropped); which
 * error wins when several apply (PROTOCOL.md, "The order of the checks"),
 * requests written in PROTOCOL.md's notation (tests/support/doc_requests.h);
 * routing hops carried back and too many of them dropped; a header that
 * does not come in 10 s; hundreds of requests pipelined on one connection
 * through 4 contexts; replies the client does not read for a while (12 MB
 * of them) kept and sent later while another connection is served; a
 * connection closed with requests in flight; --max-connections.
 *
 * Every test runs twice: against tallyd's own tcp:// loop (--tcp-engine
 * epoll, the default) and against NNG's REP socket (--tcp-engine nng), so
 * the two speak the same bytes.
 */
#include "common/clock.h"
#include "common/msgpack_safe.h"
#include "tests/support/doc_requests.h"
#include "tests/support/http_client.h"
#include "tests/support/tallyd_harness.h"
#include "tests/support/test_support.h"
#include "tests/support/wire.h"
#include "tests/support/wait.h"

#include <arpa/inet.h>
#include <check.h>
#include <errno.h>
#include <msgpack.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define SP_REQ0 0x30
#define SP_REP0 0x31
#define SP_PUB0 0x20
#define REQUEST_ID_HIGH_BIT UINT32_C(0x80000000)
#define IO_WAIT_MS 30000
#define REPLY_BYTES_MAX (8 * 1024 * 1024)
#define SOFT_LIMIT_BYTES (512 * 1024)      /* PROTOCOL.md: requests at most */
#define HARD_LIMIT_BYTES (2 * 1024 * 1024) /* PROTOCOL.md: answered up to */

static tallyd_proc proc;
static tally_client *client;
static char tcp_url[64];
static const char *engine = "epoll"; /* the TCase's --tcp-engine */

/* tcp_url: the last listen line of tallyd's ready file (the test's
 * --listen comes after the harness's). */
static void tcp_url_read(void)
{
    unsigned n = 1;
    while (tallyd_endpoint(&proc, "listen", n, tcp_url, sizeof(tcp_url)))
        n++;
    ck_assert_msg(n > 1 && tallyd_endpoint(&proc, "listen", n - 1, tcp_url, sizeof(tcp_url)) &&
                      strncmp(tcp_url, "tcp://", 6) == 0,
                  "no tcp:// listen line of the test's in tallyd's ready file:\n%s", proc.ready);
}

/* tallyd with the TCase's engine on a loopback port of the kernel's
 * (tcp_url), and up to two more args. */
static void start_with(const char *arg, const char *value)
{
    const char *extra[] = {"--listen", "tcp://127.0.0.1:0", "--tcp-engine", engine, arg, value,
                           NULL};
    wire_server_start(&proc, &client, extra);
    tcp_url_read();
}

static void start(void) { start_with(NULL, NULL); }

static void engine_epoll(void) { engine = "epoll"; }
static void engine_nng(void) { engine = "nng"; }

static void stop(void)
{
    wire_server_stop(&proc, &client);
    tallyd_cleanup(&proc);
}

static int64_t deadline(void) { return test_deadline_ms(IO_WAIT_MS); }

static void put_be(uint8_t *out, uint64_t v, int bytes)
{
    for (int i = 0; i < bytes; i++)
        out[i] = (uint8_t)(v >> (8 * (bytes - 1 - i)));
}

static uint64_t get_be(const uint8_t *in, int bytes)
{
    uint64_t v = 0;
    for (int i = 0; i < bytes; i++)
        v = v << 8 | in[i];
    return v;
}

/* Connect and exchange SP headers as protocol; the server's header in
 * peer. Returns the fd. */
static int sp_connect(uint16_t protocol, uint8_t peer[8])
{
    int fd = tallyd_connect(tcp_url, deadline());
    ck_assert_msg(fd >= 0, "cannot connect to %s", tcp_url);
    uint8_t hello[8] = {0x00, 'S', 'P', 0x00, 0, 0, 0x00, 0x00};
    put_be(hello + 4, protocol, 2);
    ck_assert(tallyd_fd_send_all(fd, hello, sizeof(hello), deadline()));
    ck_assert_msg(tallyd_fd_recv_all(fd, peer, 8, deadline()), "no SP header from tallyd");
    return fd;
}

/* One REQ frame: u64 length, request id (high bit set), body. */
static void sp_send(int fd, uint32_t request_id, const void *body, size_t len)
{
    uint8_t head[12];
    put_be(head, 4 + (uint64_t)len, 8);
    put_be(head + 8, request_id | REQUEST_ID_HIGH_BIT, 4);
    ck_assert(tallyd_fd_send_all(fd, head, sizeof(head), deadline()));
    ck_assert(tallyd_fd_send_all(fd, body, len, deadline()));
}

typedef struct sp_reply {
    uint32_t request_id;
    uint8_t *body;
    size_t len;
    msgpack_unpacked up;
    char code[64];
} sp_reply;

/* One REP frame: the echoed request id and a msgpack map with a code. */
static void sp_recv(int fd, sp_reply *r)
{
    uint8_t head[12];
    ck_assert_msg(tallyd_fd_recv_all(fd, head, sizeof(head), deadline()), "no reply");
    uint64_t len = get_be(head, 8);
    ck_assert_uint_ge(len, 4);
    ck_assert_uint_le(len, REPLY_BYTES_MAX);
    r->request_id = (uint32_t)get_be(head + 8, 4);
    r->len = (size_t)len - 4;
    r->body = malloc(r->len ? r->len : 1);
    ck_assert_ptr_nonnull(r->body);
    ck_assert(tallyd_fd_recv_all(fd, r->body, r->len, deadline()));
    msgpack_unpacked_init(&r->up);
    ck_assert_int_eq(msgpack_safe_unpack(r->body, r->len, 16, &r->up), TALLY_ok);
    ck_assert_int_eq(r->up.data.type, MSGPACK_OBJECT_MAP);
    tally_str code;
    ck_assert(msgpack_safe_get_str(wire_field(&r->up.data, "code"), &code));
    ck_assert_uint_lt(code.len, sizeof(r->code));
    memcpy(r->code, code.ptr, code.len);
    r->code[code.len] = '\0';
}

static void sp_reply_free(sp_reply *r)
{
    msgpack_unpacked_destroy(&r->up);
    free(r->body);
}

static int pack_str(msgpack_packer *pk, const char *s) { return msgpack_safe_pack_cstr(pk, s); }

static void build_account_open(msgpack_sbuffer *b, const char *key, uint64_t id)
{
    msgpack_sbuffer_init(b);
    msgpack_packer pk;
    msgpack_packer_init(&pk, b, msgpack_sbuffer_write);
    int rc = msgpack_pack_map(&pk, 7);
    rc |= pack_str(&pk, "v");
    rc |= msgpack_pack_uint64(&pk, 1);
    rc |= pack_str(&pk, "op");
    rc |= pack_str(&pk, "account_open");
    rc |= pack_str(&pk, "consumer");
    rc |= pack_str(&pk, "raw");
    rc |= pack_str(&pk, "key");
    rc |= pack_str(&pk, key);
    rc |= pack_str(&pk, "id");
    rc |= msgpack_pack_uint64(&pk, id);
    rc |= pack_str(&pk, "ledger");
    rc |= msgpack_pack_uint64(&pk, 1);
    rc |= pack_str(&pk, "code");
    rc |= msgpack_pack_uint64(&pk, 10);
    ck_assert_int_eq(rc, 0);
}

static void build_account_get(msgpack_sbuffer *b, uint64_t id)
{
    msgpack_sbuffer_init(b);
    msgpack_packer pk;
    msgpack_packer_init(&pk, b, msgpack_sbuffer_write);
    int rc = msgpack_pack_map(&pk, 3);
    rc |= pack_str(&pk, "v");
    rc |= msgpack_pack_uint64(&pk, 1);
    rc |= pack_str(&pk, "op");
    rc |= pack_str(&pk, "account_get");
    rc |= pack_str(&pk, "id");
    rc |= msgpack_pack_uint64(&pk, id);
    ck_assert_int_eq(rc, 0);
}

/* {"v": 1, "op": "stats", "pad": bin} of exactly total bytes (bin 32). */
static uint8_t *build_padded_stats(size_t total)
{
    static const uint8_t prefix[] = {0x83, 0xa1, 'v', 0x01, 0xa2, 'o', 'p', 0xa5, 's', 't', 'a',
                                     't', 's', 0xa3, 'p', 'a', 'd', 0xc6};
    size_t head = sizeof(prefix) + 4;
    ck_assert_uint_gt(total, head + 65535); /* the bin needs its 32-bit length */
    uint8_t *b = calloc(1, total);
    ck_assert_ptr_nonnull(b);
    memcpy(b, prefix, sizeof(prefix));
    put_be(b + sizeof(prefix), total - head, 4);
    return b;
}

static void send_and_expect(int fd, uint32_t id, const void *body, size_t len, const char *code,
                            sp_reply *r)
{
    sp_send(fd, id, body, len);
    sp_recv(fd, r);
    ck_assert_uint_eq(r->request_id, id | REQUEST_ID_HIGH_BIT);
    ck_assert_msg(strcmp(r->code, code) == 0, "request %u: code %s, expected %s", id, r->code,
                  code);
}

/* True when the server closes fd (EOF or reset) within IO_WAIT_MS, having
 * sent at most max_bytes before. */
static bool closed_by_server(int fd, size_t max_bytes)
{
    size_t got = 0;
    int64_t until = deadline();
    for (;;) {
        int64_t left = until - clock_mono_ms();
        struct pollfd pfd = {.fd = fd, .events = POLLIN};
        if (left <= 0 || poll(&pfd, 1, (int)left) <= 0)
            return false;
        uint8_t buf[256];
        ssize_t n = recv(fd, buf, sizeof(buf), 0);
        if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR))
            return got <= max_bytes;
        if (n > 0)
            got += (size_t)n;
    }
}

/* ---- tests ---- */

START_TEST(one_write_and_one_read_over_raw_tcp)
{
    start();
    uint8_t peer[8];
    int fd = sp_connect(SP_REQ0, peer);
    static const uint8_t rep0_header[8] = {0x00, 'S', 'P', 0x00, 0x00, SP_REP0, 0x00, 0x00};
    ck_assert_mem_eq(peer, rep0_header, 8);

    msgpack_sbuffer open, get;
    build_account_open(&open, "raw-open-7", 7);
    build_account_get(&get, 7);
    sp_reply r;
    send_and_expect(fd, 1, open.data, open.size, "ok", &r);
    ck_assert_int_eq(wire_field(&r.up.data, "replayed")->via.boolean, false);
    ck_assert_uint_eq(wire_u64(&r.up.data, "seq"), 1);
    ck_assert_uint_eq(wire_u64(&r.up.data, "events"), 1);
    sp_reply_free(&r);

    send_and_expect(fd, 2, get.data, get.size, "ok", &r);
    const msgpack_object *account = wire_field(&r.up.data, "account");
    ck_assert_uint_eq(wire_u64(account, "id"), 7);
    ck_assert_uint_eq(wire_u64(account, "ledger"), 1);
    ck_assert_uint_eq(wire_u64(account, "code"), 10);
    sp_reply_free(&r);

    /* The same write again (a retry): replayed. Any 31-bit id will do. */
    send_and_expect(fd, 0x7fffffff, open.data, open.size, "ok", &r);
    ck_assert_int_eq(wire_field(&r.up.data, "replayed")->via.boolean, true);
    sp_reply_free(&r);

    /* Two requests in flight on one connection: each reply names its id. */
    sp_send(fd, 100, get.data, get.size);
    sp_send(fd, 101, open.data, open.size);
    bool seen[2] = {false, false};
    for (int i = 0; i < 2; i++) {
        sp_recv(fd, &r);
        ck_assert_str_eq(r.code, "ok");
        uint32_t id = r.request_id & ~REQUEST_ID_HIGH_BIT;
        ck_assert_msg(id == 100 || id == 101, "reply to unknown request id %u", id);
        ck_assert_uint_eq(r.request_id >> 31, 1);
        ck_assert(!seen[id - 100]);
        seen[id - 100] = true;
        ck_assert_int_eq(msgpack_safe_map_get(&r.up.data, "account") != NULL, id == 100);
        sp_reply_free(&r);
    }
    msgpack_sbuffer_destroy(&open);
    msgpack_sbuffer_destroy(&get);
    close(fd);
    stop();
}
END_TEST

START_TEST(bad_headers_are_closed_and_tallyd_serves_on)
{
    start();
    /* Not an SP header at all: tallyd sends its own header (at most 8
     * bytes) and closes. */
    int fd = tallyd_connect(tcp_url, deadline());
    ck_assert_int_ge(fd, 0);
    ck_assert(tallyd_fd_send_all(fd, "GET / HT", 8, deadline()));
    ck_assert_msg(closed_by_server(fd, 8), "a bad SP header was not closed");
    close(fd);

    /* A good header of the wrong protocol (PUB to tallyd's REP). */
    uint8_t peer[8];
    fd = sp_connect(SP_PUB0, peer);
    ck_assert_msg(closed_by_server(fd, 0), "a PUB peer on the REP socket was not closed");
    close(fd);

    /* A REQ peer is still answered. */
    fd = sp_connect(SP_REQ0, peer);
    msgpack_sbuffer get;
    build_account_get(&get, 1);
    sp_reply r;
    send_and_expect(fd, 5, get.data, get.size, "not_found", &r);
    tally_str message;
    ck_assert(msgpack_safe_get_str(wire_field(&r.up.data, "message"), &message));
    ck_assert_int_eq(message.len, strlen("no such entity"));
    ck_assert_uint_eq(r.up.data.via.map.size, 3); /* v, code, message */
    sp_reply_free(&r);
    msgpack_sbuffer_destroy(&get);
    close(fd);
    stop();
}
END_TEST

START_TEST(size_limits_are_measured_on_the_msgpack_body)
{
    start();
    uint8_t peer[8];
    int fd = sp_connect(SP_REQ0, peer);
    sp_reply r;
    /* Exactly 512 KiB passes the size check: decoding finds the pad. */
    uint8_t *b = build_padded_stats(SOFT_LIMIT_BYTES);
    send_and_expect(fd, 1, b, SOFT_LIMIT_BYTES, "unknown_field", &r);
    sp_reply_free(&r);
    free(b);
    b = build_padded_stats(SOFT_LIMIT_BYTES + 1);
    send_and_expect(fd, 2, b, SOFT_LIMIT_BYTES + 1, "request_too_large", &r);
    sp_reply_free(&r);
    free(b);
    /* Exactly 2 MiB of msgpack (a frame of 2 MiB + 4) is still answered. */
    b = build_padded_stats(HARD_LIMIT_BYTES);
    send_and_expect(fd, 3, b, HARD_LIMIT_BYTES, "request_too_large", &r);
    sp_reply_free(&r);
    free(b);
    /* One byte more: NNG drops the connection on reading the length. */
    uint8_t head[12];
    put_be(head, 4 + (uint64_t)HARD_LIMIT_BYTES + 1, 8);
    put_be(head + 8, 4 | REQUEST_ID_HIGH_BIT, 4);
    ck_assert(tallyd_fd_send_all(fd, head, sizeof(head), deadline()));
    ck_assert_msg(closed_by_server(fd, 0), "a request of 2 MiB + 1 was not dropped");
    close(fd);
    /* tallyd serves on. */
    fd = sp_connect(SP_REQ0, peer);
    msgpack_sbuffer get;
    build_account_get(&get, 1);
    send_and_expect(fd, 6, get.data, get.size, "not_found", &r);
    sp_reply_free(&r);
    msgpack_sbuffer_destroy(&get);
    close(fd);
    stop();
}
END_TEST

/* PROTOCOL.md, "The order of the checks": one row per rule about which
 * error wins. message NULL: a write result (no message), code only. */
typedef struct precedence_row {
    const char *what, *request, *code, *message;
} precedence_row;

static const precedence_row precedence[] = {
    {"v is checked first, wherever it is sent", "{\"op\": \"stats\", \"x\": 1, \"v\": 2}",
     "unsupported_version", "this server speaks v 1"},
    {"of two bad fields the first sent wins (unknown)",
     "{\"v\": 1, \"op\": \"account_get\", \"colour\": \"red\", \"id\": \"1\"}", "unknown_field",
     "colour"},
    {"of two bad fields the first sent wins (type)",
     "{\"v\": 1, \"op\": \"account_get\", \"id\": \"1\", \"colour\": \"red\"}", "wrong_type", "id"},
    {"a bad field wins over a missing one", "{\"v\": 1, \"op\": \"transfer\", \"amount\": 1.5}",
     "wrong_type", "amount"},
    {"missing fields: consumer before key before the op's",
     "{\"v\": 1, \"op\": \"transfer\", \"id\": bin(00)*16}", "missing_field", "consumer"},
    {"missing fields: key before the op's", "{\"v\": 1, \"op\": \"transfer\", \"consumer\": \"shop\"}",
     "missing_field", "key"},
    {"a bad batch member refuses the whole batch (the first member is not applied)",
     "{\"v\": 1, \"op\": \"batch\", \"consumer\": \"shop\", \"ops\": [{\"op\": \"account_open\", "
     "\"key\": \"w-1\", \"id\": 50, \"ledger\": 1, \"code\": 10}, {\"op\": \"account_open\", \"key\": "
     "\"w-2\", \"id\": 51, \"ledger\": 1, \"code\": 10, \"colour\": 1}]}",
     "unknown_field", "colour"},
    {"... so account 50 does not exist", "{\"v\": 1, \"op\": \"account_get\", \"id\": 50}", "not_found",
     "no such entity"},
    {"a decided key", "{\"v\": 1, \"op\": \"account_open\", \"consumer\": \"shop\", \"key\": \"w-3\", "
     "\"id\": 52, \"ledger\": 1, \"code\": 10}", "ok", NULL},
    {"a reused key wins over the command's own checks",
     "{\"v\": 1, \"op\": \"account_open\", \"consumer\": \"shop\", \"key\": \"w-3\", \"id\": 0, "
     "\"ledger\": 0, \"code\": 10}", "idempotency_key_reused", NULL},
    {"transfer checks: the id first",
     "{\"v\": 1, \"op\": \"transfer\", \"consumer\": \"shop\", \"key\": \"w-4\", \"id\": bin(00)*16, "
     "\"debit_account_id\": 0, \"credit_account_id\": 0, \"amount\": 0, \"ledger\": 0, \"code\": 0}",
     "id_must_not_be_zero", NULL},
    {"transfer checks: the accounts before the amount",
     "{\"v\": 1, \"op\": \"transfer\", \"consumer\": \"shop\", \"key\": \"w-5\", \"id\": "
     "bin(00000000000000000000000000000063), \"debit_account_id\": 7, \"credit_account_id\": 7, "
     "\"amount\": 0, \"ledger\": 0, \"code\": 0}",
     "accounts_must_be_different", NULL},
};

START_TEST(which_error_wins)
{
    start();
    uint8_t peer[8];
    int fd = sp_connect(SP_REQ0, peer);
    for (size_t i = 0; i < sizeof(precedence) / sizeof(precedence[0]); i++) {
        const precedence_row *row = &precedence[i];
        doc_bytes b;
        char err[128];
        ck_assert_msg(doc_request_build(row->request, &b, err, sizeof(err)) == 0, "row %zu: %s",
                      i + 1, err);
        sp_reply r;
        sp_send(fd, (uint32_t)(10 + i), b.data, b.len);
        sp_recv(fd, &r);
        doc_bytes_free(&b);
        ck_assert_msg(strcmp(r.code, row->code) == 0, "%s: code %s, expected %s", row->what,
                      r.code, row->code);
        const msgpack_object *m = msgpack_safe_map_get(&r.up.data, "message");
        tally_str message = {NULL, 0};
        ck_assert_msg(row->message == NULL ? m == NULL
                                           : m && msgpack_safe_get_str(m, &message) &&
                                                 tally_str_equal(message, tally_str_from(row->message)),
                      "%s: wrong message", row->what);
        sp_reply_free(&r);
    }
    close(fd);
    stop();
}
END_TEST

/* A frame with a raw payload (the trace written by the caller). */
static void sp_send_payload(int fd, const uint8_t *trace, size_t trace_len, const void *body,
                            size_t len)
{
    uint8_t head[8];
    put_be(head, trace_len + (uint64_t)len, 8);
    ck_assert(tallyd_fd_send_all(fd, head, sizeof(head), deadline()));
    ck_assert(tallyd_fd_send_all(fd, trace, trace_len, deadline()));
    ck_assert(tallyd_fd_send_all(fd, body, len, deadline()));
}

START_TEST(routing_hops_come_back_and_too_many_are_dropped)
{
    start();
    uint8_t peer[8];
    int fd = sp_connect(SP_REQ0, peer);
    msgpack_sbuffer get;
    build_account_get(&get, 3);
    /* Two hops, then the id: the reply carries all three words back. */
    uint8_t trace[9 * 4];
    put_be(trace, 0x11, 4);
    put_be(trace + 4, 0x22, 4);
    put_be(trace + 8, REQUEST_ID_HIGH_BIT | 9, 4);
    sp_send_payload(fd, trace, 12, get.data, get.size);
    uint8_t head[20];
    ck_assert(tallyd_fd_recv_all(fd, head, sizeof(head), deadline()));
    ck_assert_uint_gt(get_be(head, 8), 12);
    ck_assert_mem_eq(head + 8, trace, 12);
    uint8_t rest[256];
    size_t body = (size_t)get_be(head, 8) - 12;
    ck_assert_uint_le(body, sizeof(rest));
    ck_assert(tallyd_fd_recv_all(fd, rest, body, deadline()));
    /* Eight hops before the id: dropped unanswered; the connection serves
     * the next request, whose reply is the first to come. */
    for (int i = 0; i < 8; i++)
        put_be(trace + 4 * i, (uint64_t)i + 1, 4);
    put_be(trace + 32, REQUEST_ID_HIGH_BIT | 10, 4);
    sp_send_payload(fd, trace, 36, get.data, get.size);
    sp_reply r;
    send_and_expect(fd, 11, get.data, get.size, "not_found", &r);
    sp_reply_free(&r);
    /* A payload shorter than an id: the connection is closed. */
    sp_send_payload(fd, trace, 3, "", 0);
    ck_assert_msg(closed_by_server(fd, 0), "a 3-byte payload was not closed");
    close(fd);
    msgpack_sbuffer_destroy(&get);
    stop();
}
END_TEST

START_TEST(a_header_that_does_not_come_is_closed_after_10_s)
{
    start();
    int fd = tallyd_connect(tcp_url, deadline());
    ck_assert_int_ge(fd, 0);
    int64_t t0 = clock_mono_ms();
    ck_assert_msg(closed_by_server(fd, 8), "a silent peer was never closed");
    ck_assert_int_ge(clock_mono_ms() - t0, 9000);
    close(fd);
    stop();
}
END_TEST

/* Read n replies, each to one of the ids first..first+n-1, each once, all
 * with code; returns how many events the log_read replies held in all. */
static size_t recv_all_once(int fd, uint32_t first, unsigned n, const char *code)
{
    bool *seen = calloc(n, sizeof(bool));
    ck_assert_ptr_nonnull(seen);
    size_t events = 0;
    for (unsigned i = 0; i < n; i++) {
        sp_reply r;
        sp_recv(fd, &r);
        uint32_t id = (r.request_id & ~REQUEST_ID_HIGH_BIT) - first;
        ck_assert_msg(id < n && !seen[id], "reply %u: unknown or twice", id + first);
        seen[id] = true;
        ck_assert_msg(strcmp(r.code, code) == 0, "reply %u: %s", id + first, r.code);
        const msgpack_object *ev = msgpack_safe_map_get(&r.up.data, "events");
        if (ev && ev->type == MSGPACK_OBJECT_ARRAY)
            events += ev->via.array.size;
        sp_reply_free(&r);
    }
    free(seen);
    return events;
}

static void build_log_read(msgpack_sbuffer *b, uint64_t from, uint64_t limit)
{
    msgpack_sbuffer_init(b);
    msgpack_packer pk;
    msgpack_packer_init(&pk, b, msgpack_sbuffer_write);
    int rc = msgpack_pack_map(&pk, 4);
    rc |= pack_str(&pk, "v") | msgpack_pack_uint64(&pk, 1);
    rc |= pack_str(&pk, "op") | pack_str(&pk, "log_read");
    rc |= pack_str(&pk, "from_seq") | msgpack_pack_uint64(&pk, from);
    rc |= pack_str(&pk, "limit") | msgpack_pack_uint64(&pk, limit);
    ck_assert_int_eq(rc, 0);
}

/* Send n account_open requests at once on fd, ids first_id.., keys
 * PREFIX-i, request ids 1..n; no reply read. */
static void send_opens(int fd, const char *prefix, uint32_t n, uint64_t first_id)
{
    for (uint32_t i = 0; i < n; i++) {
        msgpack_sbuffer open;
        char key[32];
        snprintf(key, sizeof(key), "%s-%u", prefix, i);
        build_account_open(&open, key, first_id + i);
        sp_send(fd, 1 + i, open.data, open.size);
        msgpack_sbuffer_destroy(&open);
    }
}

#define PIPELINED 600

/* 600 writes sent at once on one connection to a tallyd with 4 contexts:
 * the rest wait (in the socket, not lost), and every one is answered once
 * and applied once. */
START_TEST(hundreds_pipelined_through_four_contexts)
{
    start_with("--contexts", "4");
    uint8_t peer[8];
    int fd = sp_connect(SP_REQ0, peer);
    send_opens(fd, "pipelined", PIPELINED, 1000);
    recv_all_once(fd, 1, PIPELINED, "ok");
    /* Each applied once: the log holds exactly PIPELINED events. */
    msgpack_sbuffer rd;
    build_log_read(&rd, PIPELINED, 1000);
    sp_reply r;
    send_and_expect(fd, 5000, rd.data, rd.size, "ok", &r);
    ck_assert_uint_eq(wire_u64(&r.up.data, "head"), PIPELINED);
    ck_assert_uint_eq(wire_field(&r.up.data, "events")->via.array.size, 1);
    sp_reply_free(&r);
    msgpack_sbuffer_destroy(&rd);
    close(fd);
    stop();
}
END_TEST

#define BIG_READS 40

/* A client that sends 40 reads of 1000 events (~12 MB of replies; its
 * --max-unread-reply-kib raised to 16 MiB for it) and
 * reads nothing for a while: tallyd keeps what the socket does not take,
 * serves another connection meanwhile, and sends it all, in whole frames,
 * once the client reads. */
START_TEST(replies_not_read_are_kept_and_others_served)
{
    const char *extra[] = {"--listen", "tcp://127.0.0.1:0", "--tcp-engine", engine, "--http",
                           "http://127.0.0.1:0", "--max-unread-reply-kib", "16384", NULL};
    wire_server_start(&proc, &client, extra);
    tcp_url_read();
    int port = proc.http_port;
    uint8_t peer[8];
    int fd = sp_connect(SP_REQ0, peer);
    send_opens(fd, "big", 1000, 5000);
    recv_all_once(fd, 1, 1000, "ok");
    msgpack_sbuffer rd;
    build_log_read(&rd, 1, 1000);
    for (uint32_t i = 0; i < BIG_READS; i++)
        sp_send(fd, 2000 + i, rd.data, rd.size);
    /* every read decoded: their replies pile up unread */
    ck_assert_msg(test_metrics_sample_reaches(port, "tally_requests_total{op=\"log_read\"}", BIG_READS,
                                              30000),
                  "tallyd never decoded the %d reads", BIG_READS);
    int other = sp_connect(SP_REQ0, peer);
    msgpack_sbuffer get;
    build_account_get(&get, 5000);
    sp_reply r;
    send_and_expect(other, 1, get.data, get.size, "ok", &r);
    sp_reply_free(&r);
    close(other);
    ck_assert_uint_eq(recv_all_once(fd, 2000, BIG_READS, "ok"), (size_t)BIG_READS * 1000);
    msgpack_sbuffer_destroy(&get);
    msgpack_sbuffer_destroy(&rd);
    close(fd);
    stop();
}
END_TEST

/* A connection that goes with 200 writes in flight: tallyd drops their
 * replies, stays up, and each write is applied at most once (a retry of
 * every key on a new connection leaves exactly one event per key). */
START_TEST(a_connection_closed_with_requests_in_flight)
{
    start();
    uint8_t peer[8];
    int fd = sp_connect(SP_REQ0, peer);
    send_opens(fd, "gone", 200, 9000);
    close(fd);
    fd = sp_connect(SP_REQ0, peer);
    send_opens(fd, "gone", 200, 9000);
    recv_all_once(fd, 1, 200, "ok");
    msgpack_sbuffer rd;
    build_log_read(&rd, 200, 1);
    sp_reply r;
    send_and_expect(fd, 500, rd.data, rd.size, "ok", &r);
    ck_assert_uint_eq(wire_u64(&r.up.data, "head"), 200);
    sp_reply_free(&r);
    msgpack_sbuffer_destroy(&rd);
    close(fd);
    stop();
}
END_TEST

/* Connect and ask something: true when tallyd answers (accepted), false
 * when it closes the connection (refused: at connect with tallyd's loop,
 * right after the SP header exchange with NNG's). */
static bool sp_try_connect(int *fd_out)
{
    int fd = tallyd_connect(tcp_url, deadline());
    ck_assert_int_ge(fd, 0);
    static const uint8_t hello[8] = {0x00, 'S', 'P', 0x00, 0x00, SP_REQ0, 0x00, 0x00};
    static const uint8_t stats[] = {0x82, 0xa1, 'v', 0x01, 0xa2, 'o', 'p', 0xa5, 's', 't', 'a', 't', 's'};
    uint8_t head[12], peer[8];
    put_be(head, 4 + sizeof(stats), 8);
    put_be(head + 8, REQUEST_ID_HIGH_BIT | 1, 4);
    bool ok = tallyd_fd_send_all(fd, hello, sizeof(hello), deadline()) &&
              tallyd_fd_recv_all(fd, peer, sizeof(peer), deadline()) &&
              tallyd_fd_send_all(fd, head, sizeof(head), deadline()) &&
              tallyd_fd_send_all(fd, stats, sizeof(stats), deadline()) &&
              tallyd_fd_recv_all(fd, head, sizeof(head), deadline());
    uint8_t body[4096];
    size_t len = ok ? (size_t)get_be(head, 8) - 4 : 0;
    ok = ok && len <= sizeof(body) && tallyd_fd_recv_all(fd, body, len, deadline());
    if (!ok) {
        close(fd);
        return false;
    }
    *fd_out = fd;
    return true;
}

/* --max-connections 3: the harness's own client holds one place (a call
 * through it first: tally_client_open dials in the background, and a
 * client still dialing would take the place the test frees below and keep
 * it), the listener watchdog's probe may hold another for a moment, the
 * test's connections get the rest; one more is closed at connect; once
 * one of them goes, a new one is taken. */
START_TEST(max_connections_refuses_one_more_and_frees_a_place)
{
    start_with("--max-connections", "3");
    tally_stats st;
    ck_assert_int_eq(tally_stats_get(client, &st), TALLY_ok);
    int fds[6];
    unsigned accepted = 0, refused = 0;
    for (int i = 0; i < 6; i++) {
        int fd;
        if (sp_try_connect(&fd))
            fds[accepted++] = fd;
        else
            refused++;
    }
    ck_assert_uint_ge(accepted, 1); /* a probe holds one place at most */
    ck_assert_uint_le(accepted, 2);
    ck_assert_uint_ge(refused, 4);
    close(fds[--accepted]);
    bool again = false;
    for (int64_t until = deadline(); !again && clock_mono_ms() < until;) {
        int fd;
        if ((again = sp_try_connect(&fd)))
            fds[accepted++] = fd;
        else
            test_pause_ms(50);
    }
    ck_assert_msg(again, "the place of a closed connection was never given back");
    msgpack_sbuffer get;
    build_account_get(&get, 1);
    sp_reply r;
    send_and_expect(fds[accepted - 1], 1, get.data, get.size, "not_found", &r);
    sp_reply_free(&r);
    msgpack_sbuffer_destroy(&get);
    while (accepted > 0)
        close(fds[--accepted]);
    stop();
}
END_TEST

#define REFUSED_TOTAL "tally_connections_refused_total{reason=\"total\"}"

/* The listener watchdog's probe (every 2 s, each NNG listener: the
 * harness's ipc:// one and, with the nng engine, tcp_url) is tallyd's own:
 * at --max-connections it takes no client's place and is never refused,
 * counted or logged as a connection. With two places, held by the
 * JSON API's in-process connection (--http: docs/DESIGN.md) and the
 * harness's client, probes come and go; then a client is refused. */
START_TEST(the_watchdog_probe_takes_no_place)
{
    const char *extra[] = {"--listen", "tcp://127.0.0.1:0", "--tcp-engine", engine,
                           "--max-connections", "2", "--http", "http://127.0.0.1:0", NULL};
    wire_server_start(&proc, &client, extra);
    tcp_url_read();
    int port = proc.http_port; /* the kernel's choices, from tallyd's ready file */
    ck_assert_int_gt(port, 0);
    tally_stats st;
    ck_assert_int_eq(tally_stats_get(client, &st), TALLY_ok); /* the last place */
    /* A connection closed just before (the client's first dial, redialed)
     * may still hold its place while the client dials: that dial is
     * refused and redialed (CI saw it). Count from here. */
    long long refused = test_metrics_sample(port, REFUSED_TOTAL);
    ck_assert_int_ge(refused, 0);
    /* two rounds at least: the request listeners (ipc, and tcp with NNG)
     * and the publish listener, each probed once a round */
    long long probes = 0;
    TEST_WAIT_UNTIL((probes = test_metrics_sample(port, "tally_listener_probes_total")) >= 6, 60000,
                    "6 listener probes (%lld so far)", probes);
    ck_assert_int_eq(test_metrics_sample(port, REFUSED_TOTAL), refused);
    ck_assert_int_eq(test_metrics_sample(port, "tally_connections"), 2);
    int fd;
    ck_assert_msg(!sp_try_connect(&fd), "a client got a third place");
    ck_assert_int_eq(test_metrics_sample(port, REFUSED_TOTAL), refused + 1);
    ck_assert_int_eq(tally_stats_get(client, &st), TALLY_ok);
    stop();
}
END_TEST

int main(void)
{
    Suite *s = suite_create("raw_sp");
    static const struct {
        const char *name;
        void (*setup)(void);
    } engines[] = {{"tcp_epoll", engine_epoll}, {"tcp_nng", engine_nng}};
    for (unsigned i = 0; i < 2; i++) {
        TCase *tc = tcase_create(engines[i].name);
        tcase_add_checked_fixture(tc, engines[i].setup, NULL);
        tcase_set_timeout(tc, 240);
        tcase_add_test(tc, one_write_and_one_read_over_raw_tcp);
        tcase_add_test(tc, bad_headers_are_closed_and_tallyd_serves_on);
        tcase_add_test(tc, size_limits_are_measured_on_the_msgpack_body);
        tcase_add_test(tc, which_error_wins);
        tcase_add_test(tc, routing_hops_come_back_and_too_many_are_dropped);
        tcase_add_test(tc, a_header_that_does_not_come_is_closed_after_10_s);
        tcase_add_test(tc, hundreds_pipelined_through_four_contexts);
        tcase_add_test(tc, replies_not_read_are_kept_and_others_served);
        tcase_add_test(tc, a_connection_closed_with_requests_in_flight);
        tcase_add_test(tc, max_connections_refuses_one_more_and_frees_a_place);
        tcase_add_test(tc, the_watchdog_probe_takes_no_place);
        suite_add_tcase(s, tc);
    }
    return test_run_suite(s);
}
