/*
 * check_http_hostile.c — hostile clients against tallyd's HTTP face
 * (docs/OPERATIONS.md, "Overload and limits"), a real tallyd over
 * loopback TCP with its default connection limits (64 in all, 16 from one
 * address, 8 reserved places). Every attack is a bounded loop that stops
 * by itself, from addresses 127.0.0.2 and up (Linux answers the whole
 * 127/8 on loopback), and reconnects what tallyd closes, as an attacker
 * would:
 *
 *   - slowloris: 64 connections sending one header byte every 500 ms
 *     (under --http-timeout-s 2, so an idle timeout never fires): each is
 *     closed by the request deadline (closed_total{reason="timeout"});
 *   - a connect-only flood: 400 sockets that send nothing (at the default
 *     --http-timeout-s): newcomers evict them (reason="evicted");
 *   - endless chunked uploads: fast ones are cut at the 1 MiB body limit
 *     (reason="body_too_large"), slow ones (a byte a chunk) by the
 *     deadline;
 *   - pipelined JSON reads, 8 at a time on each of the 64 places: none is
 *     answered 503 (a slot came back before its connection resumed);
 *   - a held writer (LMDB's write lock taken by this test): webhook
 *     deliveries past --http-webhooks-in-flight (32) get 503, and with
 *     every place waiting for the writer /healthz, /metrics and /readyz
 *     still answer from the reserved places.
 *
 * While each runs, an ordinary client from 127.0.0.1 gets GET /healthz
 * 200 and a POST /v1/transfer 200 (each tried again on a new connection
 * after a refusal, as a client does) within ORDINARY_BOUND_MS; where
 * every place is rightly busy with requests (pipelining, the held
 * writer) the POST gets its 503 within that bound instead, and 200
 * after. tallyd's RSS stays under RSS_BOUND_KB during an attack and comes
 * back within RSS_SLACK_KB of where it was before it.
 *
 * $TALLY_HOSTILE_SCALE (1 in make check; make check-long sets 4)
 * multiplies the attackers, their addresses and the ordinary rounds.
 */
#include "common/clock.h"
#include "tests/support/suite.h"
#include "tests/support/tallyd_harness.h"
#include "tests/support/test_support.h"
#include "tests/support/wait.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <lmdb.h>
#include <netinet/in.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

/* tallyd's defaults, written out: the test is about them. */
#define PLACES 64
#define PER_ADDRESS 16
#define WEBHOOKS_IN_FLIGHT 32

#define ORDINARY_BOUND_MS 10000  /* an ordinary client's answer, under attack */
#define WAIT_MS 60000            /* a fact the attack should bring about */
#define RSS_BOUND_KB (256 * 1024)
#define RSS_SLACK_KB (64 * 1024)
#define SLOW_BYTE_MS 500         /* a slowloris byte: well under the idle timeout */
#define SLOW_TIMEOUT_S "2"
#define FLOOD_SOCKETS 400
#define PIPELINE_DEPTH 8
#define SECRET "hostile-secret-0123456789"
#define ROUND_PAUSE_MS 200       /* between two rounds of the ordinary client */

static int scale(void)
{
    const char *s = getenv("TALLY_HOSTILE_SCALE");
    int v = s ? atoi(s) : 1;
    return v < 1 ? 1 : v > 16 ? 16 : v;
}

/* ---- sockets ---- */

/* A non-blocking TCP connection from 127.0.0.(2 + address) to tallyd,
 * begun (it may still be connecting): its fd, or -1. address -1: from
 * 127.0.0.1, the ordinary client. */
static int connect_from(int address, int port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    struct sockaddr_in from = {.sin_family = AF_INET};
    from.sin_addr.s_addr = htonl(INADDR_LOOPBACK + 1 + (uint32_t)(address + 1));
    if (address < 0)
        from.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    struct sockaddr_in to = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (bind(fd, (struct sockaddr *)&from, sizeof(from)) != 0 ||
        (connect(fd, (struct sockaddr *)&to, sizeof(to)) != 0 && errno != EINPROGRESS)) {
        close(fd);
        return -1;
    }
    return fd;
}

/* Whether tallyd closed fd (EOF, reset, refused); data is read and
 * dropped. */
static bool peer_closed(int fd)
{
    char buf[4096];
    for (;;) {
        ssize_t n = recv(fd, buf, sizeof(buf), MSG_DONTWAIT);
        if (n > 0)
            continue;
        if (n == 0)
            return true;
        return errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR && errno != ENOTCONN;
    }
}

/* Send raw (a request with Connection: close) from address on a new
 * connection and read the answer until tallyd closes, by deadline_ms.
 * Returns the HTTP status (0: no answer); the answer into *answer (free
 * it) when asked. */
static int exchange(int address, int port, const char *raw, size_t len, int64_t deadline_ms,
                    char **answer)
{
    int fd = connect_from(address, port);
    size_t sent = 0, got = 0, cap = 65536;
    char *buf = malloc(cap);
    ck_assert_ptr_nonnull(buf);
    while (fd >= 0 && clock_mono_ms() < deadline_ms) {
        struct pollfd p = {fd, sent < len ? POLLOUT : POLLIN, 0};
        int r = poll(&p, 1, 50);
        if (r <= 0)
            continue;
        if (sent < len) {
            ssize_t n = send(fd, raw + sent, len - sent, MSG_NOSIGNAL);
            if (n < 0 && (errno == EAGAIN || errno == EINTR))
                continue;
            if (n < 0)
                break;
            sent += (size_t)n;
            continue;
        }
        if (got + 1 == cap) {
            buf = realloc(buf, cap *= 2);
            ck_assert_ptr_nonnull(buf);
        }
        ssize_t n = recv(fd, buf + got, cap - 1 - got, 0);
        if (n < 0 && (errno == EAGAIN || errno == EINTR))
            continue;
        if (n <= 0)
            break;
        got += (size_t)n;
    }
    if (fd >= 0)
        close(fd);
    buf[got] = '\0';
    int status = strncmp(buf, "HTTP/1.", 7) == 0 && got > 12 ? atoi(buf + 9) : 0;
    if (answer)
        *answer = buf;
    else
        free(buf);
    return status;
}

static int get(int address, int port, const char *path, int64_t deadline_ms, char **answer)
{
    char raw[256];
    int n = snprintf(raw, sizeof(raw), "GET %s HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
                     path);
    return exchange(address, port, raw, (size_t)n, deadline_ms, answer);
}

static int post(int address, int port, const char *path, const char *key, const char *body,
                int64_t deadline_ms)
{
    char raw[1024];
    int n = snprintf(raw, sizeof(raw),
                     "POST %s HTTP/1.1\r\nHost: x\r\nConnection: close\r\nIdempotency-Key: %s\r\n"
                     "Content-Type: application/json\r\nContent-Length: %zu\r\n\r\n%s",
                     path, key, strlen(body), body);
    return exchange(address, port, raw, (size_t)n, deadline_ms, NULL);
}

/* A sample of /metrics (series as written there), read from 127.0.0.1
 * within the ordinary bound; -1 when there is none. */
static long long metric(int port, const char *series)
{
    char *m = NULL;
    int status = get(-1, port, "/metrics", test_deadline_ms(ORDINARY_BOUND_MS), &m);
    long long v = -1;
    char *at = status == 200 ? strstr(m, series) : NULL;
    for (; at; at = strstr(at + 1, series))
        if (at[-1] == '\n' && at[strlen(series)] == ' ') {
            v = strtoll(at + strlen(series) + 1, NULL, 10);
            break;
        }
    free(m);
    return v;
}

/* A counter before an attack: 0 when absent (a later wait for it to
 * rise fails then). */
static long long metric_base(int port, const char *series)
{
    long long v = metric(port, series);
    return v < 0 ? 0 : v;
}

#define TIMEOUTS "tally_http_connections_closed_total{reason=\"timeout\"}"
#define EVICTED "tally_http_connections_closed_total{reason=\"evicted\"}"
#define TOO_LARGE "tally_http_connections_closed_total{reason=\"body_too_large\"}"

/* tallyd's resident memory in KiB (/proc), -1 when unknown. */
static long rss_kb(pid_t pid)
{
    char path[64], line[256];
    snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
    FILE *f = fopen(path, "r");
    long kb = -1;
    while (f && fgets(line, sizeof(line), f))
        if (strncmp(line, "VmRSS:", 6) == 0)
            kb = strtol(line + 6, NULL, 10);
    if (f)
        fclose(f);
    return kb;
}

/* ---- tallyd ---- */

typedef struct hostile {
    tallyd_proc p;
    int port;
    long rss_start_kb, rss_peak_kb;
    unsigned transfers; /* the ordinary client's, for its ids */
    char hooks_dir[256], hooks_file[300], secret_file[300];
} hostile;

/* tallyd with --http on a kernel port, more (NULL-terminated) after it,
 * and accounts 1 and 2 for the ordinary client's transfers. */
static void hostile_up(hostile *h, const char *const *more)
{
    memset(h, 0, sizeof(*h));
    int n = 0;
    h->p.extra_args[n++] = "--http";
    h->p.extra_args[n++] = "http://127.0.0.1:0";
    for (int i = 0; more && more[i]; i++)
        h->p.extra_args[n++] = more[i];
    h->p.map_size_mb = 64;
    tallyd_start(&h->p);
    h->port = h->p.http_port;
    ck_assert_int_gt(h->port, 0);
    for (int id = 1; id <= 2; id++) {
        char key[16], body[96];
        snprintf(key, sizeof(key), "open-%d", id);
        snprintf(body, sizeof(body), "{\"id\":%d,\"ledger\":1,\"code\":1}", id);
        ck_assert_int_eq(post(-1, h->port, "/v1/account_open", key, body,
                              test_deadline_ms(WAIT_MS)), 200);
    }
    h->rss_start_kb = rss_kb(h->p.pid);
    h->rss_peak_kb = h->rss_start_kb;
}

static void rss_sample(hostile *h)
{
    long kb = rss_kb(h->p.pid);
    if (kb > h->rss_peak_kb)
        h->rss_peak_kb = kb;
    ck_assert_msg(kb < RSS_BOUND_KB, "tallyd's RSS %ld KiB under attack (bound %d KiB)", kb,
                  RSS_BOUND_KB);
}

/* After an attack: RSS back within RSS_SLACK_KB of the start. */
static void rss_comes_back(hostile *h)
{
    long kb = rss_kb(h->p.pid);
    TEST_WAIT_UNTIL((kb = rss_kb(h->p.pid)) <= h->rss_start_kb + RSS_SLACK_KB, WAIT_MS,
                    "RSS back to %ld KiB + %d (it is %ld KiB, peak %ld)", h->rss_start_kb,
                    RSS_SLACK_KB, kb, h->rss_peak_kb);
    fprintf(stderr, "rss: start %ld KiB, peak %ld KiB, after %ld KiB\n", h->rss_start_kb,
            h->rss_peak_kb, kb);
}

static void hostile_down(hostile *h)
{
    ck_assert_int_eq(tallyd_stop(&h->p), 0);
    tallyd_cleanup(&h->p);
    if (h->hooks_dir[0]) {
        unlink(h->secret_file);
        unlink(h->hooks_file);
        rmdir(h->hooks_dir);
    }
}

/* ---- the ordinary client ---- */

/* GET /healthz, then a new transfer POSTed, from 127.0.0.1, each sent
 * again on a new connection after a refusal or a closed connection until
 * it gets 200 (or for the POST 503, when busy_ok: every place is rightly
 * busy with requests) or the bound passes. Fails the test naming what it
 * got. */
static void ordinary_round(hostile *h, bool busy_ok, const char *during)
{
    int64_t start = clock_mono_ms(), deadline = test_deadline_ms(ORDINARY_BOUND_MS);
    int status = 0, tries = 0;
    while (status != 200 && clock_mono_ms() < deadline && ++tries)
        status = get(-1, h->port, "/healthz", deadline, NULL);
    ck_assert_msg(status == 200, "during %s: GET /healthz got %d after %d tries in %lld ms", during,
                  status, tries, (long long)(clock_mono_ms() - start));
    unsigned id = ++h->transfers;
    char key[32], body[256];
    snprintf(key, sizeof(key), "ordinary-%u", id);
    snprintf(body, sizeof(body),
             "{\"id\":\"%032x\",\"debit_account_id\":1,\"credit_account_id\":2,\"amount\":1,"
             "\"ledger\":1,\"code\":1}", id);
    status = tries = 0;
    bool answered = false;
    while (!answered && clock_mono_ms() < deadline && ++tries) {
        status = post(-1, h->port, "/v1/transfer", key, body, deadline);
        answered = status == 200 || (busy_ok && status == 503);
    }
    ck_assert_msg(answered, "during %s: POST /v1/transfer got %d after %d tries in %lld ms", during,
                  status, tries, (long long)(clock_mono_ms() - start));
    rss_sample(h);
}

/* ---- attackers ---- */

typedef enum attack_kind {
    ATTACK_SLOWLORIS,    /* headers, a byte every SLOW_BYTE_MS */
    ATTACK_CONNECT_ONLY, /* nothing sent */
    ATTACK_SLOW_CHUNKED, /* a chunked POST, a one-byte chunk every SLOW_BYTE_MS */
} attack_kind;

typedef struct attack {
    attack_kind kind;
    int port, conns, addresses;
    int64_t until_ms; /* the attack's own bound */
    atomic_bool stop;
    atomic_long opened, closed;
    pthread_t thread;
} attack;

static const char *attack_head(attack_kind k)
{
    return k == ATTACK_SLOWLORIS ? "GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: "
           : k == ATTACK_SLOW_CHUNKED
               ? "POST /v1/transfer HTTP/1.1\r\nHost: x\r\nIdempotency-Key: slow\r\n"
                 "Transfer-Encoding: chunked\r\n\r\n"
               : "";
}

static void *attack_main(void *arg)
{
    attack *a = arg;
    int *fds = malloc(sizeof(int) * (size_t)a->conns);
    int64_t *next = calloc((size_t)a->conns, sizeof(int64_t));
    bool *headed = calloc((size_t)a->conns, sizeof(bool));
    if (fds == NULL || next == NULL || headed == NULL)
        abort();
    for (int i = 0; i < a->conns; i++)
        fds[i] = -1;
    const char *head = attack_head(a->kind);
    const char *beat = a->kind == ATTACK_SLOW_CHUNKED ? "1\r\na\r\n" : "a";
    while (!atomic_load(&a->stop) && clock_mono_ms() < a->until_ms) {
        int64_t now = clock_mono_ms();
        for (int i = 0; i < a->conns; i++) {
            if (fds[i] < 0 && now < next[i])
                continue; /* closed a moment ago: back at the attacker's pace */
            if (fds[i] < 0) {
                fds[i] = connect_from(i % a->addresses, a->port);
                headed[i] = false;
                next[i] = now;
                if (fds[i] >= 0)
                    atomic_fetch_add(&a->opened, 1);
                continue;
            }
            bool gone = peer_closed(fds[i]);
            if (!gone && a->kind != ATTACK_CONNECT_ONLY && now >= next[i]) {
                const char *what = headed[i] ? beat : head;
                ssize_t n = send(fds[i], what, strlen(what), MSG_NOSIGNAL | MSG_DONTWAIT);
                if (n > 0) {
                    headed[i] = true;
                    next[i] = now + SLOW_BYTE_MS;
                } else if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK) {
                    gone = true;
                }
            }
            if (gone) {
                atomic_fetch_add(&a->closed, 1);
                close(fds[i]);
                fds[i] = -1;
                next[i] = now + SLOW_BYTE_MS;
            }
        }
        test_pause_ms(20); /* the attacker's pace: an input of the test */
    }
    for (int i = 0; i < a->conns; i++)
        if (fds[i] >= 0)
            close(fds[i]);
    free(fds);
    free(next);
    free(headed);
    return NULL;
}

static void attack_start(attack *a, attack_kind kind, int port, int conns, int addresses)
{
    memset(a, 0, sizeof(*a));
    a->kind = kind;
    a->port = port;
    a->conns = conns;
    a->addresses = addresses;
    a->until_ms = test_deadline_ms(4 * WAIT_MS);
    ck_assert_int_eq(pthread_create(&a->thread, NULL, attack_main, a), 0);
    TEST_WAIT_UNTIL(atomic_load(&a->opened) >= conns, WAIT_MS, "%d attacking connections", conns);
}

static void attack_stop(attack *a)
{
    atomic_store(&a->stop, true);
    pthread_join(a->thread, NULL);
}

/* ---- the tests ---- */

START_TEST(slowloris_is_closed_and_others_get_in)
{
    int s = scale();
    hostile h;
    static const char *const more[] = {"--http-timeout-s", SLOW_TIMEOUT_S, NULL};
    hostile_up(&h, more);
    long long timeouts = metric_base(h.port, TIMEOUTS), evicted = metric_base(h.port, EVICTED);
    attack a;
    attack_start(&a, ATTACK_SLOWLORIS, h.port, PLACES * s, (PLACES / PER_ADDRESS) * s);
    /* every place held by slowloris, reconnecting: others still get in,
     * and each slow connection goes at its deadline (or, past the places
     * at a larger scale, evicted for a newcomer once idle) */
    int64_t deadline = test_deadline_ms(WAIT_MS);
    for (int rounds = 0; rounds < 3 * s || (s == 1 && metric(h.port, TIMEOUTS) < timeouts + PLACES) ||
                         metric(h.port, TIMEOUTS) + metric(h.port, EVICTED) <
                             timeouts + evicted + PLACES * s;
         rounds++) {
        ordinary_round(&h, false, "slowloris");
        ck_assert_msg(clock_mono_ms() < deadline, "slow connections not closed: %lld timeouts, "
                      "%lld evicted, %ld seen", metric(h.port, TIMEOUTS) - timeouts,
                      metric(h.port, EVICTED) - evicted, atomic_load(&a.closed));
        test_pause_ms(ROUND_PAUSE_MS);
    }
    TEST_WAIT_UNTIL(atomic_load(&a.closed) >= PLACES * s, WAIT_MS,
                    "the attacker seeing its connections closed (%ld)", atomic_load(&a.closed));
    attack_stop(&a);
    rss_comes_back(&h);
    hostile_down(&h);
}
END_TEST

START_TEST(connect_only_flood_is_evicted_and_others_get_in)
{
    int s = scale();
    hostile h;
    hostile_up(&h, NULL); /* the default --http-timeout-s: 10 */
    long long evicted = metric_base(h.port, EVICTED);
    attack a;
    attack_start(&a, ATTACK_CONNECT_ONLY, h.port, FLOOD_SOCKETS * s, 4 * s);
    int64_t deadline = test_deadline_ms(WAIT_MS);
    for (int rounds = 0; rounds < 3 * s || metric(h.port, EVICTED) < evicted + PLACES; rounds++) {
        ordinary_round(&h, false, "a connect-only flood");
        ck_assert_msg(clock_mono_ms() < deadline, "idle connections not evicted: %lld",
                      metric(h.port, EVICTED) - evicted);
        test_pause_ms(ROUND_PAUSE_MS);
    }
    attack_stop(&a);
    rss_comes_back(&h);
    hostile_down(&h);
}
END_TEST

/* Send an endless chunked POST from address as fast as tallyd takes it:
 * the bytes sent when tallyd closed it, or -1 when max_bytes went out
 * (or the bound passed) with the connection still open. */
static long long endless_chunked(int address, int port, long long max_bytes)
{
    int fd = connect_from(address, port);
    ck_assert_int_ge(fd, 0);
    const char *head = attack_head(ATTACK_SLOW_CHUNKED);
    static char chunk[16384 + 16];
    int n = snprintf(chunk, sizeof(chunk), "4000\r\n");
    memset(chunk + n, 'x', 16384);
    memcpy(chunk + n + 16384, "\r\n", 2);
    size_t chunk_len = (size_t)n + 16384 + 2;
    long long sent = 0;
    bool headed = false;
    size_t off = 0;
    int64_t deadline = test_deadline_ms(WAIT_MS);
    while (sent < max_bytes && clock_mono_ms() < deadline) {
        struct pollfd p = {fd, POLLOUT, 0};
        if (poll(&p, 1, 100) <= 0)
            continue;
        const char *what = headed ? chunk : head;
        size_t len = headed ? chunk_len : strlen(head);
        ssize_t w = send(fd, what + off, len - off, MSG_NOSIGNAL);
        if (w < 0 && (errno == EAGAIN || errno == EINTR))
            continue;
        if (w < 0) {
            close(fd);
            return sent;
        }
        sent += w;
        off += (size_t)w;
        if (off == len)
            off = 0, headed = true;
    }
    close(fd);
    return -1;
}

START_TEST(endless_chunked_uploads_are_cut_off)
{
    int s = scale();
    hostile h;
    static const char *const more[] = {"--http-timeout-s", SLOW_TIMEOUT_S, NULL};
    hostile_up(&h, more);
    long long too_large = metric_base(h.port, TOO_LARGE), timeouts = metric_base(h.port, TIMEOUTS);
    /* slow ones beside: a one-byte chunk every 500 ms */
    attack a;
    attack_start(&a, ATTACK_SLOW_CHUNKED, h.port, 8 * s, 2 * s);
    for (int i = 0; i < 4 * s; i++) {
        /* past 1 MiB of body, plus what the sockets' buffers hold */
        long long sent = endless_chunked(i % 2, h.port, 64LL << 20);
        ck_assert_msg(sent >= 0, "an endless chunked upload still open after 64 MiB");
        ordinary_round(&h, false, "endless chunked uploads");
    }
    TEST_WAIT_UNTIL(metric(h.port, TOO_LARGE) >= too_large + 4 * s, WAIT_MS,
                    "%d uploads closed at the body limit", 4 * s);
    int64_t deadline = test_deadline_ms(WAIT_MS);
    while (metric(h.port, TIMEOUTS) < timeouts + 8 * s) {
        ordinary_round(&h, false, "slow chunked uploads");
        ck_assert_msg(clock_mono_ms() < deadline, "slow chunked uploads not closed: %lld",
                      metric(h.port, TIMEOUTS) - timeouts);
        test_pause_ms(ROUND_PAUSE_MS);
    }
    TEST_WAIT_UNTIL(atomic_load(&a.closed) >= 8 * s, WAIT_MS,
                    "the attacker seeing its connections closed (%ld)", atomic_load(&a.closed));
    attack_stop(&a);
    rss_comes_back(&h);
    hostile_down(&h);
}
END_TEST

/* One connection of the pipelined load: requests sent, answers parsed. */
typedef struct piped {
    int fd;
    int due;      /* answers still to come */
    char buf[65536];
    size_t len;
} piped;

/* Take the whole answers at the front of c->buf: their statuses counted
 * into ok and refused (503) and other. */
static void piped_parse(piped *c, long *ok, long *refused, long *other)
{
    for (;;) {
        c->buf[c->len] = '\0';
        char *end = strstr(c->buf, "\r\n\r\n");
        if (end == NULL)
            return;
        char *cl = strcasestr(c->buf, "\r\nContent-Length:");
        size_t body = cl && cl < end ? strtoul(cl + 17, NULL, 10) : 0;
        size_t whole = (size_t)(end + 4 - c->buf) + body;
        if (c->len < whole)
            return;
        int status = atoi(c->buf + 9);
        if (status == 200)
            (*ok)++;
        else if (status == 503)
            (*refused)++;
        else
            (*other)++;
        memmove(c->buf, c->buf + whole, c->len - whole);
        c->len -= whole;
        c->due--;
    }
}

typedef struct pipeline_load {
    int port, conns, rounds;
    long ok, refused, other, lost;
    atomic_int rounds_done;
    atomic_bool done;
    pthread_t thread;
} pipeline_load;

/* Each connection sends PIPELINE_DEPTH GET /v1/stats at once, reads
 * their answers, and again, rounds times. */
static void *pipeline_main(void *arg)
{
    pipeline_load *l = arg;
    piped *c = calloc((size_t)l->conns, sizeof(piped));
    if (c == NULL)
        abort();
    static const char one[] = "GET /v1/stats HTTP/1.1\r\nHost: x\r\n\r\n";
    char batch[sizeof(one) * PIPELINE_DEPTH];
    for (int i = 0; i < PIPELINE_DEPTH; i++)
        memcpy(batch + i * (sizeof(one) - 1), one, sizeof(one) - 1);
    size_t batch_len = (sizeof(one) - 1) * PIPELINE_DEPTH;
    for (int i = 0; i < l->conns; i++)
        c[i].fd = connect_from(i % (l->conns / PER_ADDRESS), l->port);
    int64_t deadline = test_deadline_ms(4 * WAIT_MS);
    for (int r = 0; r < l->rounds && clock_mono_ms() < deadline; r++) {
        for (int i = 0; i < l->conns; i++) {
            struct pollfd p = {c[i].fd, POLLOUT, 0};
            if (c[i].fd >= 0 && poll(&p, 1, 5000) == 1 &&
                send(c[i].fd, batch, batch_len, MSG_NOSIGNAL) == (ssize_t)batch_len)
                c[i].due = PIPELINE_DEPTH;
        }
        for (int i = 0; i < l->conns; i++)
            while (c[i].due > 0 && clock_mono_ms() < deadline) {
                struct pollfd p = {c[i].fd, POLLIN, 0};
                if (poll(&p, 1, 100) <= 0)
                    continue;
                ssize_t n = recv(c[i].fd, c[i].buf + c[i].len, sizeof(c[i].buf) - 1 - c[i].len, 0);
                if (n <= 0) {
                    l->lost += c[i].due;
                    c[i].due = 0;
                    close(c[i].fd);
                    c[i].fd = connect_from(i % (l->conns / PER_ADDRESS), l->port);
                    c[i].len = 0;
                    break;
                }
                c[i].len += (size_t)n;
                piped_parse(&c[i], &l->ok, &l->refused, &l->other);
            }
        atomic_fetch_add(&l->rounds_done, 1);
    }
    for (int i = 0; i < l->conns; i++)
        if (c[i].fd >= 0)
            close(c[i].fd);
    free(c);
    atomic_store(&l->done, true);
    return NULL;
}

START_TEST(pipelining_at_the_connection_limit_is_not_refused)
{
    int s = scale();
    hostile h;
    hostile_up(&h, NULL);
    pipeline_load l = {.port = h.port, .conns = PLACES, .rounds = 150 * s};
    ck_assert_int_eq(pthread_create(&l.thread, NULL, pipeline_main, &l), 0);
    /* the load has every place before the ordinary client comes */
    TEST_WAIT_UNTIL(atomic_load(&l.rounds_done) > 0 || atomic_load(&l.done), WAIT_MS,
                    "a first pipelined round");
    /* every place busy with requests: the ordinary client's health check
     * answers from a reserved place, its POST is refused there (503) */
    while (!atomic_load(&l.done)) {
        ordinary_round(&h, true, "pipelined load at the connection limit");
        test_pause_ms(ROUND_PAUSE_MS);
    }
    pthread_join(l.thread, NULL);
    fprintf(stderr, "pipelined: %ld ok, %ld 503, %ld other, %ld lost\n", l.ok, l.refused, l.other,
            l.lost);
    ck_assert_msg(l.refused == 0 && l.other == 0 && l.lost == 0,
                  "pipelined at the limit: %ld ok, %ld 503, %ld other, %ld lost", l.ok, l.refused,
                  l.other, l.lost);
    ck_assert_int_eq(l.ok, (long)PLACES * PIPELINE_DEPTH * l.rounds);
    ordinary_round(&h, false, "after the pipelined load");
    hostile_down(&h);
}
END_TEST

/* A webhook delivery to source gh (hmac-sha256) with event id id. */
static char *delivery(unsigned id, size_t *len)
{
    char body[64], hex[65];
    int n = snprintf(body, sizeof(body), "{\"delivery\":%u}", id);
    uint8_t mac[32];
    unsigned mac_len = sizeof(mac);
    HMAC(EVP_sha256(), SECRET, (int)strlen(SECRET), (const uint8_t *)body, (size_t)n, mac,
         &mac_len);
    for (int i = 0; i < 32; i++)
        sprintf(hex + 2 * i, "%02x", mac[i]);
    char *raw = malloc(1024);
    ck_assert_ptr_nonnull(raw);
    *len = (size_t)snprintf(raw, 1024,
                            "POST /webhooks/gh HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
                            "Content-Length: %d\r\nX-Hub-Signature-256: sha256=%s\r\n"
                            "X-GitHub-Delivery: d-%u\r\nX-GitHub-Event: push\r\n\r\n%s",
                            n, hex, id, body);
    return raw;
}

/* A request sent on its own connection, its answer read as it comes. */
typedef struct held {
    int fd;
    char answer[1024];
    size_t len;
} held;

static void held_send(held *r, int address, int port, const char *raw, size_t len)
{
    memset(r, 0, sizeof(*r));
    r->fd = connect_from(address, port);
    ck_assert_int_ge(r->fd, 0);
    struct pollfd p = {r->fd, POLLOUT, 0};
    ck_assert_int_eq(poll(&p, 1, (int)test_scaled_ms(WAIT_MS)), 1);
    ck_assert_int_eq(send(r->fd, raw, len, MSG_NOSIGNAL), (ssize_t)len);
}

/* Its status once answered (0: not yet). */
static int held_status(held *r)
{
    ssize_t n = recv(r->fd, r->answer + r->len, sizeof(r->answer) - 1 - r->len, MSG_DONTWAIT);
    if (n > 0)
        r->len += (size_t)n;
    r->answer[r->len] = '\0';
    return r->len > 12 && strncmp(r->answer, "HTTP/1.", 7) == 0 ? atoi(r->answer + 9) : 0;
}

static int count_status(held *rs, int n, int status)
{
    int k = 0;
    for (int i = 0; i < n; i++)
        k += held_status(&rs[i]) == status;
    return k;
}

static void webhooks_up(hostile *h)
{
    const char *tmp = getenv("TMPDIR");
    char dir[256];
    snprintf(dir, sizeof(dir), "%s/tally-hostile-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    ck_assert_ptr_nonnull(mkdtemp(dir));
    char secret[300], file[300];
    snprintf(secret, sizeof(secret), "%s/gh.secret", dir);
    snprintf(file, sizeof(file), "%s/hooks.conf", dir);
    FILE *f = fopen(secret, "w");
    ck_assert_ptr_nonnull(f);
    fputs(SECRET "\n", f);
    fclose(f);
    ck_assert_int_eq(chmod(secret, 0600), 0);
    f = fopen(file, "w");
    ck_assert_ptr_nonnull(f);
    fprintf(f, "gh hmac-sha256 %s\n", secret);
    fclose(f);
    const char *more[] = {"--webhooks", file, "--http-timeout-s", "600", NULL};
    hostile_up(h, more);
    snprintf(h->hooks_dir, sizeof(h->hooks_dir), "%s", dir);
    snprintf(h->secret_file, sizeof(h->secret_file), "%s", secret);
    snprintf(h->hooks_file, sizeof(h->hooks_file), "%s", file);
}

START_TEST(a_held_writer_leaves_health_and_refuses_webhooks_past_their_limit)
{
    hostile h;
    webhooks_up(&h);
    /* the writer held: this test takes LMDB's write lock */
    MDB_env *env;
    MDB_txn *hold;
    ck_assert_int_eq(mdb_env_create(&env), 0);
    ck_assert_int_eq(mdb_env_set_maxdbs(env, 32), 0);
    ck_assert_int_eq(mdb_env_open(env, h.p.data_dir, MDB_NOTLS, 0600), 0);
    ck_assert_int_eq(mdb_txn_begin(env, NULL, 0, &hold), 0);
    /* 48 deliveries from three addresses: 32 wait for the writer, 16 get 503 */
    enum { DELIVERIES = 48, WRITES = PLACES - WEBHOOKS_IN_FLIGHT };
    held hooks[DELIVERIES], writes[WRITES];
    for (int i = 0; i < DELIVERIES; i++) {
        size_t len;
        char *raw = delivery((unsigned)i, &len);
        held_send(&hooks[i], i / PER_ADDRESS, h.port, raw, len);
        free(raw);
    }
    TEST_WAIT_UNTIL(count_status(hooks, DELIVERIES, 503) == DELIVERIES - WEBHOOKS_IN_FLIGHT,
                    WAIT_MS, "%d deliveries refused past --http-webhooks-in-flight (%d so far)",
                    DELIVERIES - WEBHOOKS_IN_FLIGHT, count_status(hooks, DELIVERIES, 503));
    for (int i = 0; i < DELIVERIES; i++)
        if (held_status(&hooks[i]) == 503)
            close(hooks[i].fd), hooks[i].fd = -1;
    /* JSON writes fill the other places: every one waits for the writer */
    for (int i = 0; i < WRITES; i++) {
        char raw[512], body[64];
        int bn = snprintf(body, sizeof(body), "{\"id\":%d,\"ledger\":1,\"code\":1}", 100 + i);
        int n = snprintf(raw, sizeof(raw),
                         "POST /v1/account_open HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
                         "Idempotency-Key: held-%d\r\nContent-Length: %d\r\n\r\n%s", i, bn, body);
        held_send(&writes[i], 3 + i / PER_ADDRESS, h.port, raw, (size_t)n);
    }
    TEST_WAIT_UNTIL(metric(h.port, "tally_http_requests_waiting") == PLACES, WAIT_MS,
                    "%d requests waiting for the writer", PLACES);
    /* every place waits for the writer: health and metrics still answer */
    for (int r = 0; r < 3; r++) {
        ordinary_round(&h, true, "a held writer");
        char *m = NULL;
        int64_t deadline = test_deadline_ms(ORDINARY_BOUND_MS);
        ck_assert_int_eq(get(-1, h.port, "/metrics", deadline, &m), 200);
        free(m);
        ck_assert_int_ne(get(-1, h.port, "/readyz", deadline, NULL), 0);
    }
    ck_assert_int_eq(metric(h.port, "tally_webhooks_in_flight"), WEBHOOKS_IN_FLIGHT);
    mdb_txn_abort(hold); /* the writer goes on: every held request is answered */
    mdb_env_close(env);
    TEST_WAIT_UNTIL(count_status(hooks, WEBHOOKS_IN_FLIGHT, 200) == WEBHOOKS_IN_FLIGHT &&
                        count_status(writes, WRITES, 200) == WRITES,
                    WAIT_MS, "the held deliveries and writes answered 200");
    for (int i = 0; i < DELIVERIES; i++)
        if (hooks[i].fd >= 0)
            close(hooks[i].fd);
    for (int i = 0; i < WRITES; i++)
        close(writes[i].fd);
    ordinary_round(&h, false, "after the held writer");
    hostile_down(&h);
}
END_TEST

int main(void)
{
    const test_row rows[] = {
        {"slowloris", slowloris_is_closed_and_others_get_in, 600},
        {"flood", connect_only_flood_is_evicted_and_others_get_in, 600},
        {"chunked", endless_chunked_uploads_are_cut_off, 600},
        {"pipelined", pipelining_at_the_connection_limit_is_not_refused, 600},
        {"held_writer", a_held_writer_leaves_health_and_refuses_webhooks_past_their_limit, 600},
    };
    return test_run_suite(test_suite_of_rows("http_hostile", TEST_ROWS(rows)));
}
