/*
 * libtally.c — the C client of tallyd (see tally.h).
 *
 * One req0 socket per client, dialed in the background and re-dialed by
 * NNG whenever the connection drops; every call opens its own NNG context,
 * so any number of threads may share a client. Every operation takes the
 * same path: its fields are collected in a field list, packed into one
 * msgpack request (request_pack), sent with retries (exchange: the same
 * bytes, hence the same idempotency key, on every attempt), and the reply
 * is decoded with msgpack_safe_unpack (reply_decode) before any field of
 * it is read. Pipe events keep a count of live connections so that a
 * request that could not be delivered is reported as unreachable, not as
 * a timeout that might have been applied. Calls inside the request path
 * are counted (client_enter, client_leave): tally_client_close wakes them
 * (backoffs and connection waits end, nng_close aborts requests in flight)
 * and frees the client only once the last has left. Single writes reach
 * this path through autobatch.c, which may merge them.
 *
 * This file is the client and the one request path (connection, retries,
 * packing requests, decoding replies); keys.c, writes.c and reads.c hold
 * the calls built on it, stream.c and subscriber.c the readers of the log.
 */
#include "clients/libtally/libtally_internal.h"
#include "clients/transport/sp_direct.h"
#include "clients/transport/sp_pipes.h"

#include "common/bytes.h"
#include "common/file_mode.h"
#include "common/limits.h"
#include "common/msgpack_safe.h"
#include "common/tls_config.h"
#include "common/nng_compat.h"

#include <assert.h>
#include <msgpack.h>
#include <nng/nng.h>
#include <nng/protocol/reqrep0/req.h>
#include <nng/supplemental/util/platform.h>
#include <stdio.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#define RECONNECT_MS_MIN 20
#define RECONNECT_MS_MAX 500
/* Without a connection for this long, the client makes a new dialer
 * (client_redial). */
#define REDIAL_AFTER_MS 2000
_Static_assert(REDIAL_AFTER_MS >= 2 * RECONNECT_MS_MAX, "a live dialer retries before it is replaced");
#define CODE_NAME_BYTES_MAX 64
/* The largest reply plus room for the transport's header (request id). */
#define RECV_BYTES_MAX (TALLY_REPLY_BYTES_MAX + 1024)

_Static_assert(TALLY_CLIENT_KEY_BYTES_MAX == TALLY_KEY_BYTES_MAX, "key limit as the server's");
_Static_assert(TALLY_CLIENT_CONSUMER_BYTES_MAX == TALLY_CONSUMER_BYTES_MAX,
               "consumer limit as the server's");

/* One node's URL of the client's list and its connection. */
typedef struct endpoint {
    tally_client *c;
    nng_socket socket;   /* NNG's REQ socket; unused when direct */
    sp_direct *direct;   /* tcp://: the calling thread speaks SP itself (sp_direct.h) */
    unsigned pipes;      /* live connections, under c->mu */
    sp_pipes pipe_set;   /* the socket's pipes, closed before it (sp_pipes.h) */
    char *url;
    nng_tls_config *tls; /* url's TLS configuration; NULL: not tls+tcp:// */
    nng_dialer dialer;   /* under c->mu */
    nng_time idle_since; /* when the last connection went (or the dialer came), under c->mu */
    bool redialing;      /* under c->mu */
    bool opened;
} endpoint;

struct tally_client {
    endpoint ep[TALLY_CLIENT_URLS_MAX]; /* the URL list, in its order */
    unsigned ep_count;
    _Atomic unsigned current; /* the endpoint requests go to; the next after a failure */
    nng_mtx *mu;
    nng_cv *connected; /* signalled on every pipe event and when closing */
    nng_cv *drained;   /* signalled when the last call leaves a closing client */
    unsigned calls;    /* calls inside the request path, under mu */
    bool closing;      /* tally_client_close has begun, under mu */
    client_autobatch *autobatch;
    tls_pem tls_pem;     /* the TLS files, for a tls+tcp:// url or publish URL */
    char consumer[TALLY_CLIENT_CONSUMER_BYTES_MAX + 1];
    char token[TALLY_CLIENT_TOKEN_BYTES_MAX + 1]; /* "" : none; one more byte to see a long file */
    uint32_t timeout_ms;
    uint32_t retries;
    uint32_t backoff_ms;
    /* Cluster mode (docs/CLUSTER.md): the highest cluster_seq a reply
     * carried, and the min_seq this client's reads send (0: none). */
    _Atomic uint64_t cluster_seq_seen;
    _Atomic uint64_t read_min_seq;
};

/* ---- requests: a field list packed into one msgpack map ---- */

void client_fields_begin(fields *fs, const char *op, const tally_client *c, const char *key)
{
    fs->n = 0;
    put_uint(fs, "v", TALLY_PROTOCOL_VERSION);
    put_str(fs, "op", op);
    if (c != NULL)
        put_str(fs, "consumer", c->consumer);
    if (key != NULL)
        put_str(fs, "key", key);
}

static int pack_field_value(msgpack_packer *pk, const field *f)
{
    switch (f->type) {
    case FIELD_UINT: return msgpack_pack_uint64(pk, f->v.u);
    case FIELD_INT: return msgpack_pack_int64(pk, f->v.i);
    case FIELD_STR: return msgpack_safe_pack_cstr(pk, f->v.s);
    case FIELD_ID: return msgpack_safe_pack_bin(pk, f->v.id, 16);
    case FIELD_BOOL: return f->v.b ? msgpack_pack_true(pk) : msgpack_pack_false(pk);
    case FIELD_UINTS: {
        int bad = msgpack_pack_array(pk, f->v.uints.count);
        for (size_t i = 0; !bad && i < f->v.uints.count; i++)
            bad = msgpack_pack_uint64(pk, f->v.uints.items[i]);
        return bad;
    }
    case FIELD_OPS: /* the members are packed already: append their bytes */
        return msgpack_pack_array(pk, f->v.ops->count) ||
               (f->v.ops->members.size > 0 &&
                pk->callback(pk->data, f->v.ops->members.data, f->v.ops->members.size));
    }
    return -1;
}

/* Pack fs as one map; returns 0 on success like msgpack-c. */
int client_pack_fields(msgpack_packer *pk, const fields *fs)
{
    int bad = msgpack_pack_map(pk, fs->n);
    for (unsigned i = 0; !bad && i < fs->n; i++)
        bad = msgpack_safe_pack_cstr(pk, fs->f[i].name) || pack_field_value(pk, &fs->f[i]);
    return bad;
}

static bool field_is_top_level(const field *f)
{
    return strcmp(f->name, "v") == 0 || strcmp(f->name, "consumer") == 0;
}

int client_pack_member(msgpack_packer *pk, const fields *fs)
{
    unsigned n = 0;
    for (unsigned i = 0; i < fs->n; i++)
        n += !field_is_top_level(&fs->f[i]);
    int bad = msgpack_pack_map(pk, n);
    for (unsigned i = 0; !bad && i < fs->n; i++)
        if (!field_is_top_level(&fs->f[i]))
            bad = msgpack_safe_pack_cstr(pk, fs->f[i].name) || pack_field_value(pk, &fs->f[i]);
    return bad;
}

/* Pack a whole request into buf (initialised here; the caller destroys it
 * on TALLY_ok), with the client's token as `auth` when it has one.
 * Returns TALLY_ok, TALLY_out_of_memory or TALLY_request_too_large. */
static int request_pack(const tally_client *c, const fields *fs, msgpack_sbuffer *buf)
{
    msgpack_packer pk;
    msgpack_sbuffer_init(buf);
    msgpack_packer_init(&pk, buf, msgpack_sbuffer_write);
    fields with_auth;
    if (c->token[0]) {
        with_auth = *fs;
        put_str(&with_auth, "auth", c->token);
        fs = &with_auth;
    }
    int rc = client_pack_fields(&pk, fs) ? TALLY_out_of_memory
             : buf->size > TALLY_REQUEST_BYTES_MAX ? TALLY_request_too_large
                                                   : TALLY_ok;
    if (rc != TALLY_ok)
        msgpack_sbuffer_destroy(buf);
    return rc;
}

/* ---- replies ---- */

/* The error code named by a msgpack string; TALLY_internal for anything
 * else (not a string, an unknown name). */
int client_code_of(const msgpack_object *o)
{
    tally_str name;
    char text[CODE_NAME_BYTES_MAX];
    if (!msgpack_safe_get_str(o, &name) || name.len >= sizeof(text))
        return TALLY_internal;
    memcpy(text, name.ptr, name.len);
    text[name.len] = '\0';
    int code = tally_error_from_name(text);
    return code < 0 ? TALLY_internal : code;
}

/* Keep the highest cluster_seq seen (tally_client_cluster_seq). */
static void note_cluster_seq(tally_client *c, const reply *r)
{
    uint64_t seq;
    if (r->root == NULL || !msgpack_safe_get_u64(msgpack_safe_map_get(r->root, "cluster_seq"), &seq))
        return;
    uint64_t seen = atomic_load(&c->cluster_seq_seen);
    while (seq > seen && !atomic_compare_exchange_weak(&c->cluster_seq_seen, &seen, seq)) {
    }
}

static void reply_decode(reply *r)
{
    msgpack_unpacked_init(&r->unpacked);
    r->root = NULL;
    r->code = TALLY_internal;
    if (msgpack_safe_unpack(nng_msg_body(r->msg), nng_msg_len(r->msg), TALLY_MSGPACK_DEPTH_MAX,
                            &r->unpacked) != TALLY_ok ||
        r->unpacked.data.type != MSGPACK_OBJECT_MAP)
        return;
    r->root = &r->unpacked.data;
    r->code = client_code_of(msgpack_safe_map_get(r->root, "code"));
}

void client_reply_free(reply *r)
{
    msgpack_unpacked_destroy(&r->unpacked);
    nng_msg_free(r->msg);
    r->msg = NULL;
    r->root = NULL;
}

/* ---- transport ---- */

int client_nng_error(int rv)
{
    switch (rv) {
    case 0: return TALLY_ok;
    case NNG_ENOMEM: return TALLY_out_of_memory;
    case NNG_EINVAL:
    case NNG_EADDRINVAL:
    case NNG_ENOTSUP: return TALLY_invalid_argument;
    default: return TALLY_internal;
    }
}

/* Connections are counted from ADD_PRE, not ADD_POST: NNG sends REM_POST
 * for every pipe that got ADD_PRE, also one closed before ADD_POST (the
 * server died just after accepting), and sends it late, from its reaper.
 * Counted from ADD_POST, such a REM_POST took the count of the next, live
 * connection to 0, and every call was `unreachable` while it stayed up
 * (the torture test found it). A pipe between ADD_PRE and ADD_POST is
 * not usable yet; a request sent then waits for one within its attempt. */
static void pipe_event(nng_pipe pipe, nng_pipe_ev ev, void *arg)
{
    endpoint *e = arg;
    tally_client *c = e->c;
    sp_pipes_event(&e->pipe_set, pipe, ev);
    nng_mtx_lock(c->mu);
    if (ev == NNG_PIPE_EV_ADD_PRE)
        e->pipes++;
    else if (ev == NNG_PIPE_EV_REM_POST && e->pipes > 0 && --e->pipes == 0)
        e->idle_since = nng_clock();
    nng_cv_wake(c->connected);
    nng_mtx_unlock(c->mu);
}

/* true when a connection is up, waiting for one until `until`; false at
 * once when the client is closing. */
static bool wait_connected(endpoint *e, nng_time until)
{
    tally_client *c = e->c;
    nng_mtx_lock(c->mu);
    while (e->pipes == 0 && !c->closing && nng_clock() < until)
        nng_cv_until(c->connected, until);
    bool up = e->pipes > 0 && !c->closing;
    nng_mtx_unlock(c->mu);
    return up;
}

static nng_duration time_left(nng_time deadline)
{
    nng_time now = nng_clock();
    nng_time left = now < deadline ? deadline - now : 1;
    return left < INT32_MAX ? (nng_duration)left : INT32_MAX;
}

/* Send msg on ctx and receive the reply before deadline. msg is consumed.
 * *delivered is set once the request was handed to a connection. */
static int ctx_round_trip(nng_ctx ctx, nng_aio *aio, nng_msg *msg, nng_time deadline,
                          nng_msg **reply_out, bool *delivered)
{
    nng_aio_set_msg(aio, msg);
    nng_aio_set_timeout(aio, time_left(deadline));
    nng_ctx_send(ctx, aio);
    nng_aio_wait(aio);
    int rv = nng_aio_result(aio);
    if (rv != 0) {
        nng_msg_free(msg); /* a failed send leaves the message with us */
        return rv == NNG_ENOMEM ? TALLY_out_of_memory : TALLY_unreachable;
    }
    *delivered = true;
    nng_aio_set_timeout(aio, time_left(deadline));
    nng_ctx_recv(ctx, aio);
    nng_aio_wait(aio);
    rv = nng_aio_result(aio);
    if (rv != 0)
        return rv == NNG_ENOMEM ? TALLY_out_of_memory : TALLY_timed_out;
    *reply_out = nng_aio_get_msg(aio);
    return TALLY_ok;
}

/* NNG 1.5.2's dialer stops for good when the server closes a connection
 * during the SP handshake, as a tallyd killed at that moment does: it takes
 * the closed connection for its own closing (nanomsg/nng#1518, fixed in
 * 1.6.0), and the client would stay unreachable while the server is back.
 * So a client without a connection for REDIAL_AFTER_MS replaces its dialer
 * (one thread at a time). With no connection up, closing the old dialer
 * has nothing to tear down. Off when built against a fixed NNG
 * (NNG_COMPAT_REDIAL, common/nng_compat.h). */
static void client_redial(endpoint *e)
{
    if (!NNG_COMPAT_REDIAL)
        return;
    tally_client *c = e->c;
    nng_mtx_lock(c->mu);
    bool due = e->pipes == 0 && !e->redialing && !c->closing &&
               nng_clock() - e->idle_since >= REDIAL_AFTER_MS;
    nng_dialer old = e->dialer;
    e->redialing = e->redialing || due;
    nng_mtx_unlock(c->mu);
    if (!due)
        return;
    nng_dialer_close(old);
    nng_dialer fresh;
    int rv = tls_dial(e->socket, e->url, e->tls, &fresh, NNG_FLAG_NONBLOCK);
    nng_mtx_lock(c->mu);
    if (rv == 0) /* else (out of memory) the next attempt tries again */
        e->dialer = fresh;
    e->idle_since = nng_clock();
    e->redialing = false;
    nng_mtx_unlock(c->mu);
}

/* One attempt: wait for a connection (briefly), send, receive. Returns
 * TALLY_ok with *reply_out, TALLY_unreachable (not delivered),
 * TALLY_timed_out (delivered, no answer), TALLY_out_of_memory. */
/* noinline: tests/lsan.supp names this frame (a message NNG loses) */
__attribute__((noinline)) static int attempt(endpoint *e, const void *bytes, size_t len, uint32_t timeout_ms,
                   nng_msg **reply_out, bool *delivered)
{
    nng_time start = nng_clock();
    nng_time deadline = start + timeout_ms;
    uint32_t connect_ms = timeout_ms < TALLY_CLIENT_CONNECT_WAIT_MS_MAX
                              ? timeout_ms
                              : TALLY_CLIENT_CONNECT_WAIT_MS_MAX;
    if (e->direct)
        return sp_direct_attempt(e->direct, bytes, len, timeout_ms, connect_ms, reply_out,
                                 delivered);
    if (!wait_connected(e, start + connect_ms)) {
        client_redial(e);
        return TALLY_unreachable;
    }
    nng_ctx ctx;
    nng_aio *aio = NULL;
    nng_msg *msg = NULL;
    int rv = nng_ctx_open(&ctx, e->socket);
    if (rv != 0) /* closed: tally_client_close has begun, nothing was sent */
        return rv == NNG_ECLOSED ? TALLY_unreachable : client_nng_error(rv);
    int rc = TALLY_out_of_memory;
    if (nng_aio_alloc(&aio, NULL, NULL) == 0 && nng_msg_alloc(&msg, len) == 0) {
        memcpy(nng_msg_body(msg), bytes, len);
        rc = ctx_round_trip(ctx, aio, msg, deadline, reply_out, delivered);
    }
    nng_aio_free(aio);
    nng_ctx_close(ctx);
    return rc;
}

static bool retryable(int code)
{
    return code == TALLY_timed_out || code == TALLY_unreachable || code == TALLY_overloaded ||
           code == TALLY_shutting_down || code == TALLY_cluster_unavailable ||
           code == TALLY_cluster_diverged;
}

/* Whether a failure sends the next attempt to the next node of the list
 * (docs/CLUSTER.md, "Failover for clients"): the node did not answer, is
 * stopping, could not append to the stream, or stopped serving. */
static bool moves_on(int code)
{
    return code == TALLY_timed_out || code == TALLY_unreachable || code == TALLY_shutting_down ||
           code == TALLY_cluster_unavailable || code == TALLY_cluster_diverged;
}

/* After a failure on endpoint `used` (moves_on): the next one becomes
 * current, unless another call has moved on already. */
static void move_on(tally_client *c, unsigned used)
{
    unsigned expected = used;
    atomic_compare_exchange_strong(&c->current, &expected, (used + 1) % c->ep_count);
}

/* Wait before retry number `retry` (1, 2, ...); false, at once, when the
 * client is closing. */
static bool backoff_wait(tally_client *c, uint64_t retry)
{
    uint64_t ms = c->backoff_ms;
    for (uint64_t i = 1; i < retry && ms < TALLY_CLIENT_BACKOFF_MS_MAX; i++)
        ms *= 2;
    nng_time until = nng_clock() + (ms < TALLY_CLIENT_BACKOFF_MS_MAX ? ms : TALLY_CLIENT_BACKOFF_MS_MAX);
    nng_mtx_lock(c->mu);
    while (!c->closing && nng_clock() < until)
        nng_cv_until(c->connected, until);
    bool open = !c->closing;
    nng_mtx_unlock(c->mu);
    return open;
}

bool client_enter(tally_client *c)
{
    nng_mtx_lock(c->mu);
    bool open = !c->closing;
    c->calls += open;
    nng_mtx_unlock(c->mu);
    return open;
}

void client_leave(tally_client *c)
{
    nng_mtx_lock(c->mu);
    assert(c->calls > 0);
    if (--c->calls == 0 && c->closing)
        nng_cv_wake(c->drained);
    nng_mtx_unlock(c->mu);
}

client_autobatch *client_autobatch_of(const tally_client *c)
{
    return c->autobatch;
}

/* The attempts of exchange: the same bytes until a final answer, the
 * retries are spent or the client closes. */
static int exchange_attempts(tally_client *c, const void *bytes, size_t len,
                             uint32_t extra_wait_ms, reply *r)
{
    bool delivered = false;
    int rc = TALLY_internal;
    uint32_t timeout_ms = c->timeout_ms + extra_wait_ms;
    if (timeout_ms < c->timeout_ms)
        timeout_ms = UINT32_MAX;
    /* With a list, a failure moves on to the next node at once; the
     * backoff comes after a whole round of the list has failed. */
    uint64_t moved = 0;
    for (uint64_t i = 0; i <= c->retries; i++) {
        if (i > 0 && moved % c->ep_count == 0 && !backoff_wait(c, i))
            break; /* closing: rc is the last attempt's transport code */
        unsigned used = atomic_load(&c->current);
        rc = attempt(&c->ep[used], bytes, len, timeout_ms, &r->msg, &delivered);
        if (rc != TALLY_ok) {
            if (!retryable(rc))
                return rc;
            if (c->ep_count > 1 && moves_on(rc)) {
                move_on(c, used);
                moved++;
            } else {
                moved = 0;
            }
            continue;
        }
        reply_decode(r);
        note_cluster_seq(c, r);
        if (!retryable(r->code) || i == c->retries)
            return TALLY_ok;
        rc = r->code; /* reported as it is if the client closes before the next attempt */
        if (c->ep_count > 1 && moves_on(rc)) {
            move_on(c, used);
            moved++;
        } else {
            moved = 0;
        }
        client_reply_free(r);
    }
    return rc == TALLY_unreachable && delivered ? TALLY_timed_out : rc;
}

/* The one request path: send bytes until a final answer or the retries
 * are spent. Returns TALLY_ok with r live (r->code is the server's code,
 * possibly overloaded/shutting_down after the last retry), or the
 * transport code: TALLY_unreachable only when no attempt was delivered
 * (also when the client is closing and nothing was). */
static int exchange(tally_client *c, const void *bytes, size_t len, uint32_t extra_wait_ms,
                    reply *r)
{
    if (!client_enter(c))
        return TALLY_unreachable;
    int rc = exchange_attempts(c, bytes, len, extra_wait_ms, r);
    client_leave(c);
    return rc;
}

/* Pack fs, exchange it; r is live on TALLY_ok. */
int client_call(tally_client *c, const fields *fs, uint32_t extra_wait_ms, reply *r)
{
    msgpack_sbuffer buf;
    int rc = request_pack(c, fs, &buf);
    if (rc != TALLY_ok)
        return rc;
    rc = exchange(c, buf.data, buf.size, extra_wait_ms, r);
    msgpack_sbuffer_destroy(&buf);
    return rc;
}

/* ---- the client ---- */

typedef struct client_settings {
    const char *url;
    const char *consumer;
    const char *token;      /* NULL: none, or read token_file */
    const char *token_file;
    uint32_t timeout_ms, retries, backoff_ms;
    bool autobatch;
} client_settings;

static const char *first_set(const char *given, const char *env_name, const char *dflt)
{
    const char *env = getenv(env_name);
    return given ? given : env && *env ? env : dflt;
}

/* Auto-batching: off when the options say so, else as $TALLY_AUTOBATCH
 * says ("on"/"1", "off"/"0"; unset or empty: on). false for another value. */
static bool autobatch_resolve(const tally_client_options *o, bool *on)
{
    const char *env = getenv("TALLY_AUTOBATCH");
    *on = !o->no_autobatch;
    if (o->no_autobatch || env == NULL || *env == '\0')
        return true;
    bool off = strcmp(env, "off") == 0 || strcmp(env, "0") == 0;
    *on = !off;
    return off || strcmp(env, "on") == 0 || strcmp(env, "1") == 0;
}

static int settings_resolve(const tally_client_options *o, client_settings *s)
{
    static const tally_client_options none = {0};
    if (o == NULL)
        o = &none;
    s->url = first_set(o->url, "TALLY_URL", TALLY_CLIENT_URL_DEFAULT);
    s->consumer = first_set(o->consumer, "TALLY_CONSUMER", TALLY_CLIENT_CONSUMER_DEFAULT);
    s->timeout_ms = o->timeout_ms ? o->timeout_ms : TALLY_CLIENT_TIMEOUT_MS_DEFAULT;
    s->retries = o->retries_set ? o->retries : TALLY_CLIENT_RETRIES_DEFAULT;
    s->backoff_ms = o->backoff_ms ? o->backoff_ms : TALLY_CLIENT_BACKOFF_MS_DEFAULT;
    const char *env_token = getenv("TALLY_TOKEN"), *env_file = getenv("TALLY_TOKEN_FILE");
    bool given = o->token || o->token_file;
    s->token = given ? o->token : env_token && *env_token ? env_token : NULL;
    s->token_file = given ? o->token_file : s->token == NULL && env_file && *env_file ? env_file : NULL;
    if (s->token && (*s->token == '\0' || strlen(s->token) > TALLY_CLIENT_TOKEN_BYTES_MAX))
        return TALLY_invalid_argument;
    size_t n = strlen(s->consumer);
    bool autobatch_valid = autobatch_resolve(o, &s->autobatch);
    return n == 0 || n > TALLY_CLIENT_CONSUMER_BYTES_MAX || *s->url == '\0' || !autobatch_valid
               ? TALLY_invalid_argument
               : TALLY_ok;
}

int client_socket_limit(nng_socket s, size_t recv_bytes_max)
{
    int rv = nng_socket_set_size(s, NNG_OPT_RECVMAXSZ, recv_bytes_max);
    if (rv == 0)
        rv = nng_socket_set_ms(s, NNG_OPT_RECONNMINT, RECONNECT_MS_MIN);
    if (rv == 0)
        rv = nng_socket_set_ms(s, NNG_OPT_RECONNMAXT, RECONNECT_MS_MAX);
    return rv;
}

/* Open the socket, watch its pipes, start dialing in the background; on
 * tcp://, only the direct pool (connections made by the calls). */
static int socket_open(endpoint *e, const char *url)
{
    if (e->tls == NULL && sp_direct_serves(url)) {
        e->url = strdup(url);
        int rc = e->url ? sp_direct_open(url, RECV_BYTES_MAX, &e->direct) : TALLY_out_of_memory;
        if (rc != TALLY_ok)
            free(e->url);
        e->opened = rc == TALLY_ok;
        return rc;
    }
    int rv = sp_pipes_init(&e->pipe_set);
    if (rv == 0)
        rv = nng_req0_open(&e->socket);
    if (rv != 0) {
        sp_pipes_fini(&e->pipe_set);
        return client_nng_error(rv) == TALLY_out_of_memory ? TALLY_out_of_memory : TALLY_internal;
    }
    rv = client_socket_limit(e->socket, RECV_BYTES_MAX);
    if (rv == 0)
        rv = nng_pipe_notify(e->socket, NNG_PIPE_EV_ADD_PRE, pipe_event, e);
    if (rv == 0)
        rv = nng_pipe_notify(e->socket, NNG_PIPE_EV_REM_POST, pipe_event, e);
    e->url = strdup(url);
    e->idle_since = nng_clock();
    if (rv == 0 && e->url == NULL)
        rv = NNG_ENOMEM;
    if (rv == 0)
        rv = tls_dial(e->socket, url, e->tls, &e->dialer, NNG_FLAG_NONBLOCK);
    if (rv != 0) {
        nng_close(e->socket);
        sp_pipes_fini(&e->pipe_set);
        free(e->url);
    }
    e->opened = rv == 0;
    return client_nng_error(rv);
}

/* The TLS files of options, else of the environment. */
static tls_files tls_files_resolve(const tally_client_options *o)
{
    static const tally_client_options none = {0};
    if (o == NULL)
        o = &none;
    tls_files f = {first_set(o->tls_ca, "TALLY_TLS_CA", NULL),
                   first_set(o->tls_cert, "TALLY_TLS_CERT", NULL),
                   first_set(o->tls_key, "TALLY_TLS_KEY", NULL)};
    return f;
}

int tally_tls_check(const tally_client_options *options, const char *url, char *why,
                    size_t why_len)
{
    static const char none[] = "";
    if (why == NULL || why_len == 0)
        return TALLY_invalid_argument;
    snprintf(why, why_len, "%s", none);
    if (url == NULL)
        url = first_set(options ? options->url : NULL, "TALLY_URL", TALLY_CLIENT_URL_DEFAULT);
    char buf[TALLY_CLIENT_URL_LIST_BYTES_MAX + 1];
    const char *urls[TALLY_CLIENT_URLS_MAX];
    unsigned count;
    if (client_url_list_split(url, buf, sizeof(buf), urls, &count) != TALLY_ok) {
        snprintf(why, why_len, "a URL list is 1-%d URLs, comma-separated, none empty, "
                 "at most %d bytes", TALLY_CLIENT_URLS_MAX, TALLY_CLIENT_URL_LIST_BYTES_MAX);
        return TALLY_invalid_argument;
    }
    int rc = TALLY_ok;
    for (unsigned i = 0; rc == TALLY_ok && i < count; i++) {
        if (!tls_url_is_tls(urls[i]))
            continue;
        tls_files f = tls_files_resolve(options);
        tls_pem pem;
        rc = tls_pem_load(&f, &pem, why, why_len);
        nng_tls_config *cfg = NULL;
        if (rc == TALLY_ok)
            rc = tls_config_client(&pem, urls[i], &cfg, why, why_len);
        if (cfg)
            nng_tls_config_free(cfg);
        tls_pem_free(&pem);
    }
    return rc;
}

/* Read the TLS files (when url is tls+tcp:// or one was given: a stream
 * may dial a tls+tcp:// publish URL) and make url's configuration. For
 * another url, files that do not load are left out (a stream's tls+tcp://
 * publish URL is then refused: tally_tls_check says why). */
static int client_tls_open(tally_client *c, const tally_client_options *o, const char **urls,
                           unsigned count)
{
    char why[256];
    bool any_tls = false;
    for (unsigned i = 0; i < count; i++)
        any_tls = any_tls || tls_url_is_tls(urls[i]);
    tls_files f = tls_files_resolve(o);
    if (!(f.ca || f.cert || f.key) && !any_tls)
        return TALLY_ok;
    int rc = tls_pem_load(&f, &c->tls_pem, why, sizeof(why));
    if (rc == TALLY_invalid_argument && !any_tls)
        return TALLY_ok;
    for (unsigned i = 0; rc == TALLY_ok && i < count; i++)
        if (tls_url_is_tls(urls[i]))
            rc = tls_config_client(&c->tls_pem, urls[i], &c->ep[i].tls, why, sizeof(why));
    return rc == TALLY_out_of_memory ? rc : rc == TALLY_ok ? TALLY_ok : TALLY_invalid_argument;
}

/* Each endpoint's connection, as far as it was opened (tally_client_close
 * and a failed open): calls in progress end, their sockets close. */
static void endpoints_shutdown(tally_client *c)
{
    for (unsigned i = 0; i < c->ep_count; i++) {
        endpoint *e = &c->ep[i];
        if (!e->opened)
            continue;
        if (e->direct) {
            sp_direct_shutdown(e->direct); /* aborts requests in flight */
        } else {
            nng_mtx_lock(c->mu);
            nng_dialer d = e->dialer; /* client_redial replaces it only while not closing */
            nng_mtx_unlock(c->mu);
            /* waits for the pipe callbacks, aborts requests in flight */
            sp_pipes_close_socket(&e->pipe_set, e->socket, d);
        }
    }
}

static void endpoints_free(tally_client *c)
{
    for (unsigned i = 0; i < c->ep_count; i++) {
        endpoint *e = &c->ep[i];
        if (e->opened) {
            sp_direct_close(e->direct);
            if (!e->direct)
                sp_pipes_fini(&e->pipe_set);
            free(e->url);
        }
        if (e->tls)
            nng_tls_config_free(e->tls);
    }
}

int client_tls_config(tally_client *c, const char *url, nng_tls_config **out)
{
    char why[256];
    *out = NULL;
    if (!tls_url_is_tls(url))
        return TALLY_ok;
    return tls_config_client(&c->tls_pem, url, out, why, sizeof(why)) == TALLY_out_of_memory
               ? TALLY_out_of_memory
               : *out ? TALLY_ok : TALLY_invalid_argument;
}

int tally_client_open(const tally_client_options *options, tally_client **out)
{
    client_settings s;
    if (out == NULL)
        return TALLY_invalid_argument;
    int rc = settings_resolve(options, &s);
    if (rc != TALLY_ok)
        return rc;
    tally_client *c = calloc(1, sizeof(*c));
    if (c == NULL)
        return TALLY_out_of_memory;
    memcpy(c->consumer, s.consumer, strlen(s.consumer) + 1);
    char why[256];
    if (s.token)
        memcpy(c->token, s.token, strlen(s.token) + 1);
    else if (s.token_file &&
             !file_secret_read(s.token_file, "token file", c->token, TALLY_CLIENT_TOKEN_BYTES_MAX + 1,
                               why, sizeof(why))) {
        free(c);
        return TALLY_invalid_argument;
    }
    c->timeout_ms = s.timeout_ms;
    c->retries = s.retries;
    c->backoff_ms = s.backoff_ms;
    rc = nng_mtx_alloc(&c->mu) == 0 && nng_cv_alloc(&c->connected, c->mu) == 0 &&
                 nng_cv_alloc(&c->drained, c->mu) == 0
             ? client_autobatch_new(s.autobatch, &c->autobatch)
             : TALLY_out_of_memory;
    char list[TALLY_CLIENT_URL_LIST_BYTES_MAX + 1];
    const char *urls[TALLY_CLIENT_URLS_MAX];
    if (rc == TALLY_ok)
        rc = client_url_list_split(s.url, list, sizeof(list), urls, &c->ep_count);
    for (unsigned i = 0; i < c->ep_count; i++)
        c->ep[i].c = c;
    if (rc == TALLY_ok)
        rc = client_tls_open(c, options, urls, c->ep_count);
    for (unsigned i = 0; rc == TALLY_ok && i < c->ep_count; i++)
        rc = socket_open(&c->ep[i], urls[i]);
    if (rc != TALLY_ok) {
        endpoints_shutdown(c);
        endpoints_free(c);
        tls_pem_free(&c->tls_pem);
        client_autobatch_free(c->autobatch);
        if (c->drained)
            nng_cv_free(c->drained);
        if (c->connected)
            nng_cv_free(c->connected);
        if (c->mu)
            nng_mtx_free(c->mu);
        free(c);
        return rc;
    }
    *out = c;
    return TALLY_ok;
}

/* Calls in progress end first: queued writes at once (unreachable), a
 * backoff or a wait for a connection at once, a request in flight when
 * nng_close aborts it; then nothing of the client is in use. */
void tally_client_close(tally_client *c)
{
    if (c == NULL)
        return;
    nng_mtx_lock(c->mu);
    c->closing = true;
    nng_cv_wake(c->connected);
    nng_mtx_unlock(c->mu);
    client_autobatch_close(c->autobatch);
    endpoints_shutdown(c);
    nng_mtx_lock(c->mu);
    while (c->calls > 0)
        nng_cv_wait(c->drained);
    nng_mtx_unlock(c->mu);
    client_autobatch_free(c->autobatch);
    endpoints_free(c);
    nng_cv_free(c->drained);
    nng_cv_free(c->connected);
    nng_mtx_free(c->mu);
    tls_pem_free(&c->tls_pem);
    free(c);
}

/* ---- raw requests ---- */

/* A top-level wait_ms of a raw request (0 when absent or unreadable). */
static uint32_t raw_wait_ms(const void *request, size_t len)
{
    msgpack_unpacked up;
    uint64_t wait = 0;
    msgpack_unpacked_init(&up);
    if (msgpack_safe_unpack(request, len, TALLY_MSGPACK_DEPTH_MAX, &up) != TALLY_ok ||
        !msgpack_safe_get_u64(msgpack_safe_map_get(&up.data, "wait_ms"), &wait) ||
        wait > TALLY_LOG_WAIT_MS_MAX)
        wait = 0;
    msgpack_unpacked_destroy(&up);
    return (uint32_t)wait;
}

/* A raw request map without `auth` gets the client's token (into buf,
 * initialised here: *bytes and *len then point into it); anything else
 * goes as it is. */
static void raw_with_token(const tally_client *c, const void **bytes, size_t *len,
                           msgpack_sbuffer *buf)
{
    msgpack_unpacked up;
    msgpack_sbuffer_init(buf);
    if (!c->token[0])
        return;
    msgpack_unpacked_init(&up);
    const msgpack_object *m = &up.data;
    if (msgpack_safe_unpack(*bytes, *len, TALLY_MSGPACK_DEPTH_MAX, &up) == TALLY_ok &&
        m->type == MSGPACK_OBJECT_MAP && msgpack_safe_map_get(m, "auth") == NULL) {
        msgpack_packer pk;
        msgpack_packer_init(&pk, buf, msgpack_sbuffer_write);
        int bad = msgpack_pack_map(&pk, m->via.map.size + 1);
        for (uint32_t i = 0; !bad && i < m->via.map.size; i++)
            bad = msgpack_pack_object(&pk, m->via.map.ptr[i].key) ||
                  msgpack_pack_object(&pk, m->via.map.ptr[i].val);
        bad = bad || msgpack_safe_pack_cstr(&pk, "auth") || msgpack_safe_pack_cstr(&pk, c->token);
        if (!bad) {
            *bytes = buf->data;
            *len = buf->size;
        }
    }
    msgpack_unpacked_destroy(&up);
}

uint64_t tally_client_cluster_seq(tally_client *c)
{
    return c ? atomic_load(&c->cluster_seq_seen) : 0;
}

void tally_client_set_min_seq(tally_client *c, uint64_t min_seq)
{
    if (c)
        atomic_store(&c->read_min_seq, min_seq);
}

uint64_t client_read_min_seq(const tally_client *c)
{
    return atomic_load(&((tally_client *)c)->read_min_seq);
}

int tally_request_raw(tally_client *c, const void *request, size_t len, void **reply_out,
                      size_t *reply_len)
{
    if (c == NULL || request == NULL || len == 0 || reply_out == NULL || reply_len == NULL)
        return TALLY_invalid_argument;
    reply r;
    msgpack_sbuffer buf;
    raw_with_token(c, &request, &len, &buf);
    int rc = exchange(c, request, len, raw_wait_ms(request, len), &r);
    msgpack_sbuffer_destroy(&buf);
    if (rc != TALLY_ok)
        return rc;
    size_t n = nng_msg_len(r.msg);
    void *copy = malloc(n ? n : 1);
    if (copy != NULL)
        memcpy(copy, nng_msg_body(r.msg), n);
    client_reply_free(&r);
    if (copy == NULL)
        return TALLY_out_of_memory;
    *reply_out = copy;
    *reply_len = n;
    return TALLY_ok;
}
