/*
 * check_sp_hostile.c — hostile clients of tallyd's SP transport over
 * tcp:// (issue 30, items 2–4), on both --tcp-engine settings, against a
 * real tallyd. Each attack runs in a bounded loop from loopback addresses
 * of its own (127.0.0.2 and up, so that the per-address limit is the
 * attacker's, not the ordinary client's on 127.0.0.1), and while it runs:
 *
 *   - an ordinary libtally client, on a new connection, gets a read and a
 *     write answered within ORDINARY_BOUND_MS (5 s, scaled for a loaded or
 *     sanitized run: a bound, not a speed assertion);
 *   - tallyd's resident memory (/proc/PID/status VmRSS) stays below the
 *     bound the attack states, and falls back to within RSS_AFTER_KIB of
 *     where it was once the attack is over (tallyd closed its connections
 *     by itself, or the attacker hung up).
 *
 * The attacks:
 *   idle_connections_do_not_lock_others_out — connections that send the
 *     8-byte SP header and nothing else, from several addresses, more than
 *     --max-connections in all (1,023 of them locked every other client out);
 *   half_sent_frames_time_out — frames that announce 2 MiB, send part of
 *     it and stall (each pinned 2 MiB forever);
 *   unread_replies_are_bounded — clients that pipeline large log_reads and
 *     never read a reply (each pinned ~5.5 MiB forever);
 *   pipelined_long_polls_leave_room — 256 long-polls pipelined on one
 *     socket (they took every --contexts slot).
 *
 * Sizes: short by default (make check); TALLY_HOSTILE_SCALE=full runs the
 * issue's sizes (make check-long). TALLY_HOSTILE_BASELINE=1 passes only the
 * options every tallyd knows (no shortened timeouts): run so against a
 * tallyd built before the limits ($TALLYD), each attack fails its test.
 */
#include "clients/libtally/tally.h"
#include "common/clock.h"
#include "common/msgpack_safe.h"
#include "tests/support/http_client.h"
#include "tests/support/tallyd_harness.h"
#include "tests/support/test_support.h"
#include "tests/support/wait.h"
#include "tests/support/wire.h"

#include <arpa/inet.h>
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <msgpack.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#define SP_REQ0 0x30
#define REQUEST_ID_HIGH_BIT UINT32_C(0x80000000)
#define ORDINARY_BOUND_MS 5000        /* an ordinary client's answers, during an attack */
#define RSS_AFTER_KIB (32 * 1024)     /* above the start, once an attack is over */
#define CLEARED_WAIT_MS 60000         /* for tallyd to close an attack's connections */
#define CONNECT_WAIT_MS 5000
#define PER_ADDRESS_DEFAULT 64        /* tallyd's --max-connections-per-address */
#define LONG_POLLS_PER_CONNECTION 16  /* tallyd's --max-long-polls-per-connection */
#define LONG_POLLS 256
#define SETUP_ADDRESS 40              /* 127.0.0.42: the test's own raw connection */

static tallyd_proc proc;
static tally_client *client;
static char tcp_url[64];
static int tcp_port;
static const char *engine = "epoll";
static long long connections_at_start;
static long long rss_at_start_kib;

static bool full_size(void)
{
    const char *s = getenv("TALLY_HOSTILE_SCALE");
    return s && strcmp(s, "full") == 0;
}

static bool baseline(void)
{
    const char *s = getenv("TALLY_HOSTILE_BASELINE");
    return s && strcmp(s, "1") == 0;
}

static void engine_epoll(void) { engine = "epoll"; }
static void engine_nng(void) { engine = "nng"; }

static long long rss_kib(void)
{
    char path[64], line[256];
    snprintf(path, sizeof(path), "/proc/%d/status", (int)proc.pid);
    FILE *f = fopen(path, "r");
    ck_assert_msg(f != NULL, "cannot read %s", path);
    long long kib = -1;
    while (fgets(line, sizeof(line), f))
        if (sscanf(line, "VmRSS: %lld kB", &kib) == 1)
            break;
    fclose(f);
    ck_assert_int_gt(kib, 0);
    return kib;
}

static long long metric(const char *series)
{
    return test_metrics_sample(proc.http_port, series);
}

/* The attacker holds thousands of sockets at full size. */
static void raise_fd_limit(void)
{
    struct rlimit rl;
    ck_assert_int_eq(getrlimit(RLIMIT_NOFILE, &rl), 0);
    rl.rlim_cur = rl.rlim_max;
    ck_assert_int_eq(setrlimit(RLIMIT_NOFILE, &rl), 0);
}

/* tallyd with the TCase's engine on tcp://127.0.0.1:0, the HTTP face for
 * /metrics, max_connections, and (unless baseline) the shortened clock the
 * attacks wait out (a request whole within 2 s, plus its size at 1 MiB/s)
 * and the option key = value (NULL: none), e.g. 3 s of --idle-timeout-s. */
static void start(unsigned max_connections, const char *key, const char *value)
{
    raise_fd_limit();
    char max[16];
    snprintf(max, sizeof(max), "%u", max_connections);
    const char *extra[] = {"--listen", "tcp://127.0.0.1:0", "--tcp-engine", engine,
                           "--http", "http://127.0.0.1:0", "--max-connections", max,
                           "--request-timeout-s", "2", "--request-min-kib-per-s", "1024",
                           key, value, NULL};
    if (baseline())
        extra[8] = NULL;
    wire_server_start(&proc, &client, extra);
    unsigned n = 1;
    while (tallyd_endpoint(&proc, "listen", n, tcp_url, sizeof(tcp_url)))
        n++;
    ck_assert(tallyd_endpoint(&proc, "listen", n - 1, tcp_url, sizeof(tcp_url)));
    ck_assert_msg(strncmp(tcp_url, "tcp://127.0.0.1:", 16) == 0, "tcp url %s", tcp_url);
    tcp_port = atoi(tcp_url + 16);
    tally_stats st;
    ck_assert_int_eq(tally_stats_get(client, &st), TALLY_ok);
    connections_at_start = metric("tally_connections");
    rss_at_start_kib = rss_kib();
}

static void stop(void)
{
    wire_server_stop(&proc, &client);
    tallyd_cleanup(&proc);
}

/* A TCP connection from 127.0.0.(2 + address) to tallyd's tcp:// port,
 * with a small receive buffer when rcvbuf > 0: its fd (non-blocking), or
 * -1 when it could not connect in time (a backlog full, a refusal). */
static int attacker_connect(unsigned address, int rcvbuf)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    ck_assert_int_ge(fd, 0);
    if (rcvbuf > 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof(rcvbuf));
    struct sockaddr_in from = {.sin_family = AF_INET};
    from.sin_addr.s_addr = htonl(INADDR_LOOPBACK + 2 + address);
    ck_assert_msg(bind(fd, (struct sockaddr *)&from, sizeof(from)) == 0,
                  "cannot bind 127.0.0.%u: %s", 2 + address, strerror(errno));
    struct sockaddr_in to = {.sin_family = AF_INET, .sin_port = htons((uint16_t)tcp_port)};
    to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, (struct sockaddr *)&to, sizeof(to)) != 0 && errno != EINPROGRESS) {
        close(fd);
        return -1;
    }
    struct pollfd p = {.fd = fd, .events = POLLOUT};
    int err = 0;
    socklen_t len = sizeof(err);
    if (poll(&p, 1, (int)test_scaled_ms(CONNECT_WAIT_MS)) != 1 ||
        getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0 || err != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

static void put_be(uint8_t *out, uint64_t v, int bytes)
{
    for (int i = 0; i < bytes; i++)
        out[i] = (uint8_t)(v >> (8 * (bytes - 1 - i)));
}

static const uint8_t req_header[8] = {0x00, 'S', 'P', 0x00, 0x00, SP_REQ0, 0x00, 0x00};

/* Send all of buf within the I/O bound; false when tallyd closed it. */
static bool send_all(int fd, const void *buf, size_t len)
{
    return tallyd_fd_send_all(fd, buf, len, test_deadline_ms(30000));
}

/* A request frame (length, id, body) for body into out; returns its size. */
static size_t frame(uint8_t *out, size_t cap, uint32_t id, const msgpack_sbuffer *body)
{
    ck_assert_uint_le(12 + body->size, cap);
    put_be(out, 4 + (uint64_t)body->size, 8);
    put_be(out + 8, id | REQUEST_ID_HIGH_BIT, 4);
    memcpy(out + 12, body->data, body->size);
    return 12 + body->size;
}

static void build_log_read(msgpack_sbuffer *b, uint64_t from, uint64_t limit, uint64_t wait_ms)
{
    msgpack_sbuffer_init(b);
    msgpack_packer pk;
    msgpack_packer_init(&pk, b, msgpack_sbuffer_write);
    int rc = msgpack_pack_map(&pk, wait_ms ? 5 : 4);
    rc |= msgpack_safe_pack_cstr(&pk, "v") | msgpack_pack_uint64(&pk, 1);
    rc |= msgpack_safe_pack_cstr(&pk, "op") | msgpack_safe_pack_cstr(&pk, "log_read");
    rc |= msgpack_safe_pack_cstr(&pk, "from_seq") | msgpack_pack_uint64(&pk, from);
    rc |= msgpack_safe_pack_cstr(&pk, "limit") | msgpack_pack_uint64(&pk, limit);
    if (wait_ms)
        rc |= msgpack_safe_pack_cstr(&pk, "wait_ms") | msgpack_pack_uint64(&pk, wait_ms);
    ck_assert_int_eq(rc, 0);
}

/* A new libtally client on tcp_url (a new connection, from 127.0.0.1)
 * gets a read and a write answered, all within ORDINARY_BOUND_MS. */
static void ordinary_client_served(const char *during)
{
    static unsigned serial;
    int64_t bound = test_scaled_ms(ORDINARY_BOUND_MS);
    tally_client_options o = {.url = tcp_url, .consumer = "ordinary",
                              .timeout_ms = (uint32_t)bound, .no_autobatch = true};
    int64_t t0 = clock_mono_ms();
    tally_client *c;
    ck_assert_int_eq(tally_client_open(&o, &c), TALLY_ok);
    tally_stats st;
    int read_rc = tally_stats_get(c, &st);
    int64_t read_ms = clock_mono_ms() - t0;
    char key[48];
    snprintf(key, sizeof(key), "ordinary-%s-%u", engine, ++serial);
    tally_account_open_args a = {.id = 900000 + serial, .ledger = 1, .code = 1};
    tally_result res = {0};
    int write_rc = tally_account_open(c, key, &a, &res);
    int64_t took = clock_mono_ms() - t0;
    tally_client_close(c);
    fprintf(stderr, "%s (%s): ordinary client: read %s after %lld ms, write %s after %lld ms "
            "(bound %lld ms); tallyd RSS %lld KiB\n", during, engine, tally_strerror(read_rc),
            (long long)read_ms, tally_strerror(write_rc ? write_rc : res.code), (long long)took,
            (long long)bound, rss_kib());
    ck_assert_msg(read_rc == TALLY_ok && write_rc == TALLY_ok && res.code == TALLY_ok &&
                      took <= bound,
                  "%s (%s): an ordinary client was not served within %lld ms: read %s, write "
                  "%s, after %lld ms",
                  during, engine, (long long)bound, tally_strerror(read_rc),
                  tally_strerror(write_rc ? write_rc : res.code), (long long)took);
}

/* What a bound allows above the start is doubled under AddressSanitizer
 * (.ci/run's san-test sets ASAN_OPTIONS): its shadow memory, redzones and
 * quarantine grow with what tallyd allocates, not with what it keeps. */
static long long allowance_kib(long long kib)
{
    return getenv("ASAN_OPTIONS") ? 2 * kib : kib;
}

/* RSS now, failing the test above bound_kib (its allowance above the start
 * scaled by allowance_kib). Returns it. */
static long long rss_within(long long bound_kib, const char *during)
{
    bound_kib = rss_at_start_kib + allowance_kib(bound_kib - rss_at_start_kib);
    long long now = rss_kib();
    ck_assert_msg(now <= bound_kib, "%s (%s): tallyd's RSS %lld KiB, over the bound %lld KiB "
                  "(%lld KiB at the start)", during, engine, now, bound_kib, rss_at_start_kib);
    return now;
}

/* tallyd's connections back to those at the start, and its RSS back to
 * within RSS_AFTER_KIB of the start, within CLEARED_WAIT_MS; meanwhile
 * RSS stays under bound_kib. */
static void attack_cleared(long long bound_kib, const char *during)
{
    long long open = -1, rss = -1;
    bool cleared = TEST_WAITED_UNTIL(
        (rss = rss_within(bound_kib, during)) <= rss_at_start_kib + allowance_kib(RSS_AFTER_KIB) &&
            (open = metric("tally_connections")) <= connections_at_start,
        CLEARED_WAIT_MS);
    fprintf(stderr, "%s (%s): after the attack: %lld connections (%lld at the start), RSS %lld "
            "KiB (%lld at the start)\n", during, engine, open, connections_at_start, rss,
            rss_at_start_kib);
    ck_assert_msg(cleared, "%s (%s): not cleared within %d ms: %lld connections (%lld at the "
                  "start), RSS %lld KiB (%lld KiB at the start)", during, engine,
                  CLEARED_WAIT_MS, open, connections_at_start, rss, rss_at_start_kib);
}

/* conns attacker connections, per_address from each address in turn
 * (127.0.0.2, then .3, ...), each with rcvbuf (0: the default), each
 * sending the SP header and then len bytes (none: len 0). Returns their
 * fds (-1: could not connect); *sent_whole counts those that took it all. */
static int *attackers_open(unsigned conns, unsigned per_address, int rcvbuf, const void *bytes,
                           size_t len, unsigned *sent_whole)
{
    int *fds = calloc(conns, sizeof(int));
    ck_assert_ptr_nonnull(fds);
    *sent_whole = 0;
    for (unsigned i = 0; i < conns; i++) {
        fds[i] = attacker_connect(i / per_address, rcvbuf);
        if (fds[i] >= 0 && send_all(fds[i], req_header, sizeof(req_header)) &&
            (len == 0 || send_all(fds[i], bytes, len)))
            ++*sent_whole;
    }
    return fds;
}

static void close_all(int *fds, unsigned n)
{
    for (unsigned i = 0; i < n; i++)
        if (fds[i] >= 0)
            close(fds[i]);
}

/* While the attack of fds goes on (none of them hung up): the ordinary
 * client is served, RSS stays under bound_kib, and tallyd closes the
 * attack's connections by itself (attack_cleared). Then fds are closed
 * and freed. */
static void attack_closed_by_tallyd(int *fds, unsigned n, long long bound_kib, const char *during)
{
    ordinary_client_served(during);
    rss_within(bound_kib, during);
    attack_cleared(bound_kib, during);
    close_all(fds, n);
    free(fds);
}

/* ---- the attacks ---- */

/* Header-only connections from addresses holding more than the
 * per-address limit each, --max-connections + a per-address limit's
 * worth in all: one address gets its limit, the last share of the places
 * is kept for addresses with few, and the ordinary client gets in. RSS
 * bound: the start + 64 MiB. */
START_TEST(idle_connections_do_not_lock_others_out)
{
    unsigned max = full_size() ? 1024 : 128;
    start(max, NULL, NULL);
    unsigned addresses = max / PER_ADDRESS_DEFAULT + 1, per_address = PER_ADDRESS_DEFAULT + 16;
    unsigned attempts = addresses * per_address, connected, answered = 0;
    int *fds = attackers_open(attempts, per_address, 0, NULL, 0, &connected);
    /* each decided: tallyd's header came (taken), or EOF (refused) */
    for (unsigned i = 0; i < attempts; i++) {
        uint8_t peer[8];
        if (fds[i] >= 0 && tallyd_fd_recv_all(fds[i], peer, sizeof(peer), test_deadline_ms(10000)))
            answered++;
    }
    long long open = metric("tally_connections");
    fprintf(stderr, "idle connections (%s): %u attempts from %u addresses, %u connected, %u got "
            "the SP header; tallyd holds %lld connections (limit %u)\n", engine, attempts,
            addresses, connected, answered, open, max);
    ordinary_client_served("idle connections");
    ck_assert_int_ge(metric("tally_connections_refused_total{reason=\"per_address\"}"), 1);
    ck_assert_int_ge(metric("tally_connections_refused_total{reason=\"reserved\"}"), 1);
    rss_within(rss_at_start_kib + 64 * 1024, "idle connections");
    close_all(fds, attempts);
    free(fds);
    attack_cleared(rss_at_start_kib + 64 * 1024, "idle connections");
    stop();
}
END_TEST

#define ANNOUNCED_BYTES (2 * 1024 * 1024)

/* Frames that announce 2 MiB, send part of it and stall: tallyd holds
 * what arrived (not what was announced) and closes each once its request
 * deadline passes (the nng engine: once --idle-timeout-s passes with
 * nothing whole from it). RSS bound: the start + twice what the attacker
 * sent + 64 MiB. */
START_TEST(half_sent_frames_time_out)
{
    start(1024, "--idle-timeout-s", "3");
    unsigned conns = full_size() ? 960 : 48, per_address = 48;
    size_t sent = 512 * 1024;
    long long bound = rss_at_start_kib + (long long)(conns * 2 * sent / 1024) + 64 * 1024;
    uint8_t *part = calloc(1, 12 + sent);
    ck_assert_ptr_nonnull(part);
    put_be(part, ANNOUNCED_BYTES, 8);
    put_be(part + 8, REQUEST_ID_HIGH_BIT | 1, 4);
    unsigned stalled;
    int *fds = attackers_open(conns, per_address, 0, part, 12 + sent, &stalled);
    fprintf(stderr, "half-sent frames (%s): %u of %u connections sent %zu of %d bytes and "
            "stalled\n", engine, stalled, conns, sent, ANNOUNCED_BYTES);
    ck_assert_uint_ge(stalled, conns / 2);
    attack_closed_by_tallyd(fds, conns, bound, "half-sent frames");
    free(part);
    stop();
}
END_TEST

/* Read replies on fd until want came or the bound passed: how many. */
static unsigned replies_read(int fd, unsigned want, int64_t base_ms)
{
    unsigned got = 0;
    int64_t until = test_deadline_ms(base_ms);
    while (got < want) {
        uint8_t head[12];
        if (!tallyd_fd_recv_all(fd, head, sizeof(head), until))
            break;
        uint64_t body = 0;
        for (int i = 0; i < 8; i++)
            body = body << 8 | head[i];
        ck_assert_uint_ge(body, 4);
        ck_assert_uint_le(body, 8 * 1024 * 1024);
        uint8_t *b = malloc(body);
        ck_assert_ptr_nonnull(b);
        bool whole = tallyd_fd_recv_all(fd, b, body - 4, until);
        free(b);
        if (!whole)
            break;
        got++;
    }
    return got;
}

#define EVENTS 1000
#define READS_PER_CONNECTION 40

static void build_account_open(msgpack_sbuffer *b, uint64_t id)
{
    char key[32];
    snprintf(key, sizeof(key), "fill-%llu", (unsigned long long)id);
    msgpack_sbuffer_init(b);
    msgpack_packer pk;
    msgpack_packer_init(&pk, b, msgpack_sbuffer_write);
    int rc = msgpack_pack_map(&pk, 7);
    rc |= msgpack_safe_pack_cstr(&pk, "v") | msgpack_pack_uint64(&pk, 1);
    rc |= msgpack_safe_pack_cstr(&pk, "op") | msgpack_safe_pack_cstr(&pk, "account_open");
    rc |= msgpack_safe_pack_cstr(&pk, "consumer") | msgpack_safe_pack_cstr(&pk, "fill");
    rc |= msgpack_safe_pack_cstr(&pk, "key") | msgpack_safe_pack_cstr(&pk, key);
    rc |= msgpack_safe_pack_cstr(&pk, "id") | msgpack_pack_uint64(&pk, id);
    rc |= msgpack_safe_pack_cstr(&pk, "ledger") | msgpack_pack_uint64(&pk, 1);
    rc |= msgpack_safe_pack_cstr(&pk, "code") | msgpack_pack_uint64(&pk, 1);
    ck_assert_int_eq(rc, 0);
}

/* EVENTS accounts opened, pipelined on a raw connection of the test's,
 * then the log read once (the map's pages a log_read touches are then
 * resident before RSS is taken). */
static void fill_log(void)
{
    int fd = attacker_connect(SETUP_ADDRESS, 0);
    ck_assert_int_ge(fd, 0);
    ck_assert(send_all(fd, req_header, sizeof(req_header)));
    uint8_t f[256];
    ck_assert(tallyd_fd_recv_all(fd, f, 8, test_deadline_ms(10000))); /* tallyd's SP header */
    for (uint32_t i = 0; i < EVENTS; i++) {
        msgpack_sbuffer b;
        build_account_open(&b, 1 + i);
        ck_assert(send_all(fd, f, frame(f, sizeof(f), 1 + i, &b)));
        msgpack_sbuffer_destroy(&b);
    }
    ck_assert_uint_eq(replies_read(fd, EVENTS, 60000), EVENTS);
    msgpack_sbuffer rd;
    build_log_read(&rd, 1, EVENTS, 0);
    ck_assert(send_all(fd, f, frame(f, sizeof(f), 1 + EVENTS, &rd)));
    ck_assert_uint_eq(replies_read(fd, 1, 60000), 1);
    msgpack_sbuffer_destroy(&rd);
    close(fd);
}

/* Clients that pipeline log_reads of EVENTS events (hundreds of KiB of
 * reply each) and never read: tallyd keeps at most --max-unread-reply-kib
 * (and a reply) for each, and closes them after --idle-timeout-s (the nng
 * engine: a reply not taken within --request-timeout-s closes its
 * connection). RSS bound: the start + 1.5 MiB per connection + 48 MiB. */
START_TEST(unread_replies_are_bounded)
{
    start(1024, "--idle-timeout-s", "3");
    fill_log();
    rss_at_start_kib = rss_kib(); /* the map's pages the log_reads touch, counted */
    unsigned conns = full_size() ? 200 : 16, per_address = 48;
    long long bound = rss_at_start_kib + (long long)conns * 1536 + 48 * 1024;
    msgpack_sbuffer rd;
    build_log_read(&rd, 1, EVENTS, 0);
    uint8_t *frames = malloc(READS_PER_CONNECTION * (12 + rd.size));
    ck_assert_ptr_nonnull(frames);
    size_t len = 0;
    for (uint32_t i = 0; i < READS_PER_CONNECTION; i++)
        len += frame(frames + len, 12 + rd.size, 1 + i, &rd);
    unsigned sending;
    int *fds = attackers_open(conns, per_address, 4096, frames, len, &sending);
    fprintf(stderr, "unread replies (%s): %u connections each asked for %d log_reads of %d "
            "events and read nothing\n", engine, sending, READS_PER_CONNECTION, EVENTS);
    ck_assert_uint_ge(sending, conns / 2);
    attack_closed_by_tallyd(fds, conns, bound, "unread replies");
    free(frames);
    msgpack_sbuffer_destroy(&rd);
    stop();
}
END_TEST

/* 256 log_reads that wait 30 s, pipelined on one socket: at most
 * --max-long-polls-per-connection park, the rest are answered at once,
 * and the ordinary client is served meanwhile. RSS bound: the start + 64
 * MiB. */
START_TEST(pipelined_long_polls_leave_room)
{
    start(1024, NULL, NULL);
    tally_stats st;
    ck_assert_int_eq(tally_stats_get(client, &st), TALLY_ok);
    msgpack_sbuffer rd;
    build_log_read(&rd, st.head_seq + 1, 10, 30000);
    uint8_t *frames = malloc(LONG_POLLS * (12 + rd.size));
    ck_assert_ptr_nonnull(frames);
    size_t len = 0;
    for (uint32_t i = 0; i < LONG_POLLS; i++)
        len += frame(frames + len, 12 + rd.size, 1 + i, &rd);
    int fd = attacker_connect(0, 0);
    ck_assert_int_ge(fd, 0);
    ck_assert(send_all(fd, req_header, sizeof(req_header)));
    uint8_t peer[8];
    ck_assert(tallyd_fd_recv_all(fd, peer, sizeof(peer), test_deadline_ms(10000)));
    ck_assert(send_all(fd, frames, len));
    ck_assert_msg(test_metrics_sample_reaches(proc.http_port, "tally_long_polls_parked",
                                              LONG_POLLS_PER_CONNECTION, 10000),
                  "the long-polls never parked");
    unsigned early = replies_read(fd, LONG_POLLS - LONG_POLLS_PER_CONNECTION, 10000);
    fprintf(stderr, "pipelined long-polls (%s): %u of %d answered at once, %lld parked, %lld "
            "refused\n", engine, early, LONG_POLLS, metric("tally_long_polls_parked"),
            metric("tally_long_polls_refused_total"));
    ordinary_client_served("pipelined long-polls");
    ck_assert_uint_eq(early, LONG_POLLS - LONG_POLLS_PER_CONNECTION);
    ck_assert_int_le(metric("tally_long_polls_parked"), LONG_POLLS_PER_CONNECTION);
    /* the ordinary client's write woke the parked ones */
    ck_assert_uint_eq(replies_read(fd, LONG_POLLS_PER_CONNECTION, 10000),
                      LONG_POLLS_PER_CONNECTION);
    close(fd);
    free(frames);
    msgpack_sbuffer_destroy(&rd);
    attack_cleared(rss_at_start_kib + 64 * 1024, "pipelined long-polls");
    stop();
}
END_TEST

#define IN_FLIGHT_CAP 4
#define PIPELINED_POLLS 10

/* 10 long-polls pipelined on one connection with
 * --max-in-flight-per-connection 4: tallyd's loop takes 4 and leaves the
 * rest in the socket (4 parked); NNG, which hands its contexts requests
 * from any pipe, parks all 10 (its bound is --contexts: docs/OPERATIONS.md,
 * "what each engine enforces"). A commit answers the parked ones and the
 * rest follow. */
START_TEST(requests_in_flight_per_connection_are_bounded)
{
    char cap[8];
    snprintf(cap, sizeof(cap), "%d", IN_FLIGHT_CAP);
    start(1024, "--max-in-flight-per-connection", cap);
    bool loop = strcmp(engine, "epoll") == 0;
    tally_stats st;
    ck_assert_int_eq(tally_stats_get(client, &st), TALLY_ok);
    msgpack_sbuffer rd;
    build_log_read(&rd, st.head_seq + 1, 10, 30000);
    uint8_t f[128];
    size_t len = frame(f, sizeof(f), 1, &rd);
    int fd = attacker_connect(0, 0);
    ck_assert_int_ge(fd, 0);
    ck_assert(send_all(fd, req_header, sizeof(req_header)));
    for (uint32_t i = 0; i < PIPELINED_POLLS; i++) {
        put_be(f + 8, REQUEST_ID_HIGH_BIT | (1 + i), 4);
        ck_assert(send_all(fd, f, len));
    }
    long long want = loop ? IN_FLIGHT_CAP : PIPELINED_POLLS;
    ck_assert_msg(test_metrics_sample_reaches(proc.http_port, "tally_long_polls_parked", want,
                                              10000),
                  "%s: %lld long-polls parked, expected %lld", engine,
                  metric("tally_long_polls_parked"), want);
    /* the harness's own requests: the rest would have parked by now */
    ck_assert_int_eq(tally_stats_get(client, &st), TALLY_ok);
    ck_assert_int_eq(metric("tally_long_polls_parked"), want);
    ordinary_client_served("in flight per connection"); /* its write wakes them */
    uint8_t peer[8];
    ck_assert(tallyd_fd_recv_all(fd, peer, sizeof(peer), test_deadline_ms(10000)));
    ck_assert_uint_eq(replies_read(fd, PIPELINED_POLLS, 30000), PIPELINED_POLLS);
    close(fd);
    msgpack_sbuffer_destroy(&rd);
    stop();
}
END_TEST

/* A connection that did its SP header exchange and sends nothing more is
 * closed after --idle-timeout-s, counted, and its client redials. */
START_TEST(an_idle_connection_is_closed_after_the_idle_timeout)
{
    start(1024, "--idle-timeout-s", "3");
    int fd = attacker_connect(0, 0);
    ck_assert_int_ge(fd, 0);
    ck_assert(send_all(fd, req_header, sizeof(req_header)));
    uint8_t peer[8];
    ck_assert(tallyd_fd_recv_all(fd, peer, sizeof(peer), test_deadline_ms(10000)));
    ck_assert_msg(test_fd_closed_within(fd, 30000), "an idle connection was never closed");
    ck_assert_int_ge(metric("tally_connections_closed_total{reason=\"idle\"}"), 1);
    close(fd);
    ordinary_client_served("after an idle timeout");
    stop();
}
END_TEST

int main(void)
{
    Suite *s = suite_create("sp_hostile");
    const TTest *const tests[] = {idle_connections_do_not_lock_others_out,
                                  half_sent_frames_time_out, unread_replies_are_bounded,
                                  pipelined_long_polls_leave_room,
                                  requests_in_flight_per_connection_are_bounded,
                                  an_idle_connection_is_closed_after_the_idle_timeout};
    TCase *epoll = tcase_create("tcp_epoll"), *nng = tcase_create("tcp_nng");
    tcase_add_checked_fixture(epoll, engine_epoll, NULL);
    tcase_add_checked_fixture(nng, engine_nng, NULL);
    for (TCase *tc = epoll; tc; tc = tc == epoll ? nng : NULL) {
        tcase_set_timeout(tc, 600);
        for (size_t k = 0; k < sizeof(tests) / sizeof(tests[0]); k++)
            tcase_add_test(tc, tests[k]);
        suite_add_tcase(s, tc);
    }
    return test_run_suite(s);
}
