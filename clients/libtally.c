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
 * a timeout that might have been applied.
 */
#include "clients/libtally_internal.h"
#include "clients/tally_inbox.h"

#include "common/bytes.h"
#include "common/limits.h"
#include "common/msgpack_safe.h"
#include "log/sha256.h"

#include <assert.h>
#include <msgpack.h>
#include <nng/nng.h>
#include <nng/protocol/reqrep0/req.h>
#include <nng/supplemental/util/platform.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define RECONNECT_MS_MIN 20
#define RECONNECT_MS_MAX 500
/* Without a connection for this long, the client makes a new dialer
 * (client_redial). */
#define REDIAL_AFTER_MS 2000
_Static_assert(REDIAL_AFTER_MS >= 2 * RECONNECT_MS_MAX, "a live dialer retries before it is replaced");
#define CODE_NAME_BYTES_MAX 64
/* The largest reply plus room for the transport's header (request id). */
#define RECV_BYTES_MAX (TALLY_REPLY_BYTES_MAX + 1024)
#define KEY_BUFFER_BYTES (TALLY_CLIENT_KEY_BYTES_MAX + 1)

_Static_assert(TALLY_CLIENT_KEY_BYTES_MAX == TALLY_KEY_BYTES_MAX, "key limit as the server's");
_Static_assert(TALLY_CLIENT_CONSUMER_BYTES_MAX == TALLY_CONSUMER_BYTES_MAX,
               "consumer limit as the server's");
_Static_assert(TALLY_CLIENT_CHAIN_MAX == TALLY_CHAIN_COMMANDS_MAX, "chain limit as the server's");
_Static_assert(TALLY_CLIENT_BATCH_MAX == TALLY_BATCH_OPS_MAX, "batch limit as the server's");
_Static_assert(sizeof(tally_uuid) == sizeof(tally_id128), "a tally_uuid is a tally_id128");
_Static_assert(KEY_BUFFER_BYTES >= 37, "a generated key (UUID text) fits a key buffer");

struct tally_client {
    nng_socket socket;
    nng_mtx *mu;
    nng_cv *connected; /* signalled on every pipe event */
    unsigned pipes;    /* live connections, under mu */
    char *url;
    nng_dialer dialer;   /* under mu */
    nng_time idle_since; /* when the last connection went (or the dialer came), under mu */
    bool redialing;      /* under mu */
    char consumer[TALLY_CLIENT_CONSUMER_BYTES_MAX + 1];
    uint32_t timeout_ms;
    uint32_t retries;
    uint32_t backoff_ms;
};

struct tally_batch {
    bool atomic;
    size_t count;
    msgpack_sbuffer members;         /* packed member maps, back to back */
    char (*keys)[KEY_BUFFER_BYTES];  /* batch: member i's key */
    size_t keys_capacity;
    char chain_key[KEY_BUFFER_BYTES]; /* chain: used when sent without a key */
};

/* ---- ids and keys ---- */

static int64_t wall_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int tally_uuid_v7(tally_uuid *out)
{
    if (out == NULL)
        return TALLY_invalid_argument;
    tally_id128 id;
    int rc = tally_id128_uuidv7(wall_ms(), &id);
    if (rc == TALLY_ok)
        memcpy(out->bytes, id.bytes, 16);
    return rc;
}

void tally_uuid_format(const tally_uuid *id, char out[37])
{
    static const char digits[] = "0123456789abcdef";
    assert(id != NULL && out != NULL);
    size_t o = 0;
    for (int i = 0; i < 16; i++) {
        if (i == 4 || i == 6 || i == 8 || i == 10)
            out[o++] = '-';
        out[o++] = digits[id->bytes[i] >> 4];
        out[o++] = digits[id->bytes[i] & 15];
    }
    out[o] = '\0';
}

int tally_uuid_parse(const char *text, tally_uuid *out)
{
    tally_id128 id;
    if (text == NULL || out == NULL || !tally_id128_from_hex(text, &id))
        return TALLY_invalid_argument;
    memcpy(out->bytes, id.bytes, 16);
    return TALLY_ok;
}

void tally_uuid_from_key(const char *consumer, const char *key, tally_uuid *out)
{
    static const char domain[] = "tally.transfer-id.v1";
    static const uint8_t separator = 0;
    assert(out != NULL);
    const char *cons = consumer ? consumer : "";
    const char *k = key ? key : "";
    sha256_ctx ctx;
    uint8_t digest[SHA256_BYTES];
    sha256_begin(&ctx);
    sha256_update(&ctx, domain, sizeof(domain) - 1);
    sha256_update(&ctx, cons, strlen(cons));
    sha256_update(&ctx, &separator, 1);
    sha256_update(&ctx, k, strlen(k));
    sha256_finish(&ctx, digest);
    memcpy(out->bytes, digest, 16);
    /* A UUIDv7 key (libtally's own) lends the id its time: ids then sort
     * like their keys, and a B-tree keyed by them grows at its right edge
     * instead of touching a random page per insert (docs/BENCHMARKS.md). */
    tally_id128 time_key;
    if (key != NULL && tally_id128_from_hex(key, &time_key) && time_key.bytes[6] >> 4 == 7 &&
        time_key.bytes[8] >> 6 == 2) {
        memcpy(out->bytes, time_key.bytes, 6);
        out->bytes[6] = (uint8_t)(0x70 | (out->bytes[6] & 0x0f));
        out->bytes[8] = (uint8_t)(0x80 | (out->bytes[8] & 0x3f));
    }
}

/* The key of a write: the caller's (1..128 bytes) or a new UUIDv7 text. */
static int key_resolve(const char *given, char out[KEY_BUFFER_BYTES])
{
    if (given != NULL) {
        size_t n = strlen(given);
        if (n == 0 || n > TALLY_CLIENT_KEY_BYTES_MAX)
            return TALLY_invalid_argument;
        memcpy(out, given, n + 1);
        return TALLY_ok;
    }
    tally_uuid id;
    int rc = tally_uuid_v7(&id);
    if (rc == TALLY_ok)
        tally_uuid_format(&id, out);
    return rc;
}

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
static int pack_fields(msgpack_packer *pk, const fields *fs)
{
    int bad = msgpack_pack_map(pk, fs->n);
    for (unsigned i = 0; !bad && i < fs->n; i++)
        bad = msgpack_safe_pack_cstr(pk, fs->f[i].name) || pack_field_value(pk, &fs->f[i]);
    return bad;
}

/* Pack a whole request into buf (initialised here; the caller destroys it
 * on TALLY_ok). Returns TALLY_ok, TALLY_out_of_memory or
 * TALLY_request_too_large. */
static int request_pack(const fields *fs, msgpack_sbuffer *buf)
{
    msgpack_packer pk;
    msgpack_sbuffer_init(buf);
    msgpack_packer_init(&pk, buf, msgpack_sbuffer_write);
    int rc = pack_fields(&pk, fs) ? TALLY_out_of_memory
             : buf->size > TALLY_REQUEST_BYTES_MAX ? TALLY_request_too_large
                                                   : TALLY_ok;
    if (rc != TALLY_ok)
        msgpack_sbuffer_destroy(buf);
    return rc;
}

/* ---- replies ---- */

/* The error code named by a msgpack string; TALLY_internal for anything
 * else (not a string, an unknown name). */
static int code_of(const msgpack_object *o)
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
    r->code = code_of(msgpack_safe_map_get(r->root, "code"));
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
    (void)pipe;
    tally_client *c = arg;
    nng_mtx_lock(c->mu);
    if (ev == NNG_PIPE_EV_ADD_PRE)
        c->pipes++;
    else if (ev == NNG_PIPE_EV_REM_POST && c->pipes > 0 && --c->pipes == 0)
        c->idle_since = nng_clock();
    nng_cv_wake(c->connected);
    nng_mtx_unlock(c->mu);
}

/* true when a connection is up, waiting for one until `until`. */
static bool wait_connected(tally_client *c, nng_time until)
{
    nng_mtx_lock(c->mu);
    while (c->pipes == 0 && nng_clock() < until)
        nng_cv_until(c->connected, until);
    bool up = c->pipes > 0;
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
 * has nothing to tear down. */
static void client_redial(tally_client *c)
{
    nng_mtx_lock(c->mu);
    bool due = c->pipes == 0 && !c->redialing &&
               nng_clock() - c->idle_since >= REDIAL_AFTER_MS;
    nng_dialer old = c->dialer;
    c->redialing = c->redialing || due;
    nng_mtx_unlock(c->mu);
    if (!due)
        return;
    nng_dialer_close(old);
    nng_dialer fresh;
    int rv = nng_dial(c->socket, c->url, &fresh, NNG_FLAG_NONBLOCK);
    nng_mtx_lock(c->mu);
    if (rv == 0) /* else (out of memory) the next attempt tries again */
        c->dialer = fresh;
    c->idle_since = nng_clock();
    c->redialing = false;
    nng_mtx_unlock(c->mu);
}

/* One attempt: wait for a connection (briefly), send, receive. Returns
 * TALLY_ok with *reply_out, TALLY_unreachable (not delivered),
 * TALLY_timed_out (delivered, no answer), TALLY_out_of_memory. */
/* noinline: tests/lsan.supp names this frame (a message NNG loses) */
__attribute__((noinline)) static int attempt(tally_client *c, const void *bytes, size_t len, uint32_t timeout_ms,
                   nng_msg **reply_out, bool *delivered)
{
    nng_time start = nng_clock();
    nng_time deadline = start + timeout_ms;
    uint32_t connect_ms = timeout_ms < TALLY_CLIENT_CONNECT_WAIT_MS_MAX
                              ? timeout_ms
                              : TALLY_CLIENT_CONNECT_WAIT_MS_MAX;
    if (!wait_connected(c, start + connect_ms)) {
        client_redial(c);
        return TALLY_unreachable;
    }
    nng_ctx ctx;
    nng_aio *aio = NULL;
    nng_msg *msg = NULL;
    int rc = client_nng_error(nng_ctx_open(&ctx, c->socket));
    if (rc != TALLY_ok)
        return rc;
    rc = TALLY_out_of_memory;
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
           code == TALLY_shutting_down;
}

static void backoff_sleep(const tally_client *c, uint64_t retry)
{
    uint64_t ms = c->backoff_ms;
    for (uint64_t i = 1; i < retry && ms < TALLY_CLIENT_BACKOFF_MS_MAX; i++)
        ms *= 2;
    nng_msleep((nng_duration)(ms < TALLY_CLIENT_BACKOFF_MS_MAX ? ms : TALLY_CLIENT_BACKOFF_MS_MAX));
}

/* The one request path: send bytes until a final answer or the retries
 * are spent. Returns TALLY_ok with r live (r->code is the server's code,
 * possibly overloaded/shutting_down after the last retry), or the
 * transport code: TALLY_unreachable only when no attempt was delivered. */
static int exchange(tally_client *c, const void *bytes, size_t len, uint32_t extra_wait_ms,
                    reply *r)
{
    bool delivered = false;
    int rc = TALLY_internal;
    uint32_t timeout_ms = c->timeout_ms + extra_wait_ms;
    if (timeout_ms < c->timeout_ms)
        timeout_ms = UINT32_MAX;
    for (uint64_t i = 0; i <= c->retries; i++) {
        if (i > 0)
            backoff_sleep(c, i);
        rc = attempt(c, bytes, len, timeout_ms, &r->msg, &delivered);
        if (rc != TALLY_ok) {
            if (!retryable(rc))
                return rc;
            continue;
        }
        reply_decode(r);
        if (!retryable(r->code) || i == c->retries)
            return TALLY_ok;
        client_reply_free(r);
    }
    return rc == TALLY_unreachable && delivered ? TALLY_timed_out : rc;
}

/* Pack fs, exchange it; r is live on TALLY_ok. */
int client_call(tally_client *c, const fields *fs, uint32_t extra_wait_ms, reply *r)
{
    msgpack_sbuffer buf;
    int rc = request_pack(fs, &buf);
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
    uint32_t timeout_ms, retries, backoff_ms;
} client_settings;

static const char *first_set(const char *given, const char *env_name, const char *dflt)
{
    const char *env = getenv(env_name);
    return given ? given : env && *env ? env : dflt;
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
    size_t n = strlen(s->consumer);
    return n == 0 || n > TALLY_CLIENT_CONSUMER_BYTES_MAX || *s->url == '\0'
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

/* Open the socket, watch its pipes, start dialing in the background. */
static int socket_open(tally_client *c, const char *url)
{
    int rv = nng_req0_open(&c->socket);
    if (rv != 0)
        return client_nng_error(rv) == TALLY_out_of_memory ? TALLY_out_of_memory : TALLY_internal;
    rv = client_socket_limit(c->socket, RECV_BYTES_MAX);
    if (rv == 0)
        rv = nng_pipe_notify(c->socket, NNG_PIPE_EV_ADD_PRE, pipe_event, c);
    if (rv == 0)
        rv = nng_pipe_notify(c->socket, NNG_PIPE_EV_REM_POST, pipe_event, c);
    c->url = strdup(url);
    c->idle_since = nng_clock();
    if (rv == 0 && c->url == NULL)
        rv = NNG_ENOMEM;
    if (rv == 0)
        rv = nng_dial(c->socket, url, &c->dialer, NNG_FLAG_NONBLOCK);
    if (rv != 0) {
        nng_close(c->socket);
        free(c->url);
    }
    return client_nng_error(rv);
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
    c->timeout_ms = s.timeout_ms;
    c->retries = s.retries;
    c->backoff_ms = s.backoff_ms;
    rc = nng_mtx_alloc(&c->mu) == 0 && nng_cv_alloc(&c->connected, c->mu) == 0
             ? socket_open(c, s.url)
             : TALLY_out_of_memory;
    if (rc != TALLY_ok) {
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

void tally_client_close(tally_client *c)
{
    if (c == NULL)
        return;
    nng_close(c->socket); /* waits for the pipe callbacks */
    nng_cv_free(c->connected);
    nng_mtx_free(c->mu);
    free(c->url);
    free(c);
}

/* ---- writes ---- */

typedef int (*fill_fn)(fields *fs, const void *args);

/* A single write op: its wire name and how its fields are filled. */
typedef struct write_op {
    const char *name;
    fill_fn fill;
    const void *args;
} write_op;

typedef struct hold_args {
    const tally_uuid *pending_id;
    int64_t amount;
} hold_args;

static int fill_account_open(fields *fs, const void *args)
{
    const tally_account_open_args *a = args;
    if (a == NULL)
        return TALLY_invalid_argument;
    put_uint(fs, "id", a->id);
    put_uint(fs, "ledger", a->ledger);
    put_uint(fs, "code", a->code);
    put_uint(fs, "flags", a->flags);
    return TALLY_ok;
}

static int fill_transfer(fields *fs, const void *args)
{
    const tally_transfer_args *t = args;
    if (t == NULL)
        return TALLY_invalid_argument;
    put_id(fs, "id", &t->id);
    put_uint(fs, "debit_account_id", t->debit_account_id);
    put_uint(fs, "credit_account_id", t->credit_account_id);
    put_int(fs, "amount", t->amount);
    put_uint(fs, "ledger", t->ledger);
    put_uint(fs, "code", t->code);
    put_uint(fs, "flags", t->flags);
    if (t->timeout_s != 0)
        put_uint(fs, "timeout_s", t->timeout_s);
    return TALLY_ok;
}

static int fill_post(fields *fs, const void *args)
{
    const hold_args *h = args;
    if (h->pending_id == NULL)
        return TALLY_invalid_argument;
    put_id(fs, "pending_id", h->pending_id);
    if (h->amount != 0)
        put_int(fs, "amount", h->amount);
    return TALLY_ok;
}

static int fill_void(fields *fs, const void *args)
{
    const hold_args *h = args;
    if (h->pending_id == NULL)
        return TALLY_invalid_argument;
    put_id(fs, "pending_id", h->pending_id);
    return TALLY_ok;
}

static int fill_entitlement(fields *fs, const void *args)
{
    const tally_entitlement_args *e = args;
    if (e == NULL || e->subject == NULL || e->feature == NULL)
        return TALLY_invalid_argument;
    put_str(fs, "subject", e->subject);
    put_str(fs, "feature", e->feature);
    if (e->valid_until_ms != 0)
        put_int(fs, "valid_until_ms", e->valid_until_ms);
    if (e->duration_ms != 0)
        put_int(fs, "duration_ms", e->duration_ms);
    if (e->has_source_order)
        put_uint(fs, "source_order", e->source_order);
    if (e->has_grant_transfer)
        put_id(fs, "grant_transfer_id", &e->grant_transfer_id);
    return TALLY_ok;
}

static void result_clear(tally_result *out, const char *key)
{
    memset(out, 0, sizeof(*out));
    out->failed_index = -1;
    if (key != NULL)
        memcpy(out->key, key, strlen(key) + 1);
}

static void result_codes(tally_result *out, const msgpack_object *codes)
{
    if (codes == NULL || codes->type != MSGPACK_OBJECT_ARRAY)
        return;
    uint32_t n = codes->via.array.size;
    out->chain_count = n < TALLY_CLIENT_CHAIN_MAX ? n : TALLY_CLIENT_CHAIN_MAX;
    for (uint32_t i = 0; i < out->chain_count; i++)
        out->chain_codes[i] = code_of(&codes->via.array.ptr[i]);
}

/* Fill a result from one write's reply map m; returns its code. */
static int result_fill(tally_result *out, const msgpack_object *m)
{
    uint64_t v;
    const msgpack_object *replayed = msgpack_safe_map_get(m, "replayed");
    out->code = code_of(msgpack_safe_map_get(m, "code"));
    out->replayed = replayed && replayed->type == MSGPACK_OBJECT_BOOLEAN && replayed->via.boolean;
    out->seq = msgpack_safe_get_u64(msgpack_safe_map_get(m, "seq"), &v) ? v : 0;
    out->events = msgpack_safe_get_u64(msgpack_safe_map_get(m, "events"), &v) && v <= UINT32_MAX
                      ? (uint32_t)v
                      : 0;
    result_codes(out, msgpack_safe_map_get(m, "codes"));
    out->failed_index = msgpack_safe_get_u64(msgpack_safe_map_get(m, "failed_index"), &v) &&
                                v < TALLY_CLIENT_CHAIN_MAX
                            ? (int)v
                            : -1;
    return out->code;
}

/* Send a single write or a chain (fs complete) and fill out. */
static int write_exchange(tally_client *c, const fields *fs, tally_result *out)
{
    reply r;
    int rc = client_call(c, fs, 0, &r);
    if (rc != TALLY_ok)
        return out->code = rc;
    rc = r.root ? result_fill(out, r.root) : (out->code = r.code);
    client_reply_free(&r);
    return rc;
}

static int write_single(tally_client *c, const char *key, write_op op, tally_result *out)
{
    if (out == NULL)
        return TALLY_invalid_argument;
    result_clear(out, NULL);
    int rc = key_resolve(key, out->key);
    if (rc != TALLY_ok || c == NULL)
        return out->code = rc != TALLY_ok ? rc : TALLY_invalid_argument;
    fields fs;
    client_fields_begin(&fs, op.name, c, out->key);
    rc = op.fill(&fs, op.args);
    if (rc != TALLY_ok)
        return out->code = rc;
    return write_exchange(c, &fs, out);
}

int tally_account_open(tally_client *c, const char *key, const tally_account_open_args *a,
                       tally_result *out)
{
    return write_single(c, key, (write_op){"account_open", fill_account_open, a}, out);
}

int tally_transfer(tally_client *c, const char *key, const tally_transfer_args *t,
                   tally_result *out)
{
    return write_single(c, key, (write_op){"transfer", fill_transfer, t}, out);
}

int tally_post(tally_client *c, const char *key, const tally_uuid *pending_id, int64_t amount,
               tally_result *out)
{
    hold_args h = {pending_id, amount};
    return write_single(c, key, (write_op){"post", fill_post, &h}, out);
}

int tally_void(tally_client *c, const char *key, const tally_uuid *pending_id, tally_result *out)
{
    hold_args h = {pending_id, 0};
    return write_single(c, key, (write_op){"void", fill_void, &h}, out);
}

int tally_grant(tally_client *c, const char *key, const tally_entitlement_args *e,
                tally_result *out)
{
    return write_single(c, key, (write_op){"grant", fill_entitlement, e}, out);
}

int tally_extend(tally_client *c, const char *key, const tally_entitlement_args *e,
                 tally_result *out)
{
    return write_single(c, key, (write_op){"extend", fill_entitlement, e}, out);
}

int tally_revoke(tally_client *c, const char *key, const tally_entitlement_args *e,
                 tally_result *out)
{
    return write_single(c, key, (write_op){"revoke", fill_entitlement, e}, out);
}

/* ---- batches and chains ---- */

tally_batch *tally_batch_new(bool atomic)
{
    tally_batch *b = calloc(1, sizeof(*b));
    if (b == NULL)
        return NULL;
    b->atomic = atomic;
    msgpack_sbuffer_init(&b->members);
    if (atomic && key_resolve(NULL, b->chain_key) != TALLY_ok) {
        free(b);
        return NULL;
    }
    return b;
}

void tally_batch_free(tally_batch *b)
{
    if (b == NULL)
        return;
    msgpack_sbuffer_destroy(&b->members);
    free(b->keys);
    free(b);
}

size_t tally_batch_count(const tally_batch *b)
{
    return b ? b->count : 0;
}

static int batch_keys_reserve(tally_batch *b)
{
    if (b->count < b->keys_capacity)
        return TALLY_ok;
    size_t cap = b->keys_capacity ? 2 * b->keys_capacity : 16;
    if (cap > TALLY_CLIENT_BATCH_MAX)
        cap = TALLY_CLIENT_BATCH_MAX;
    void *keys = realloc(b->keys, cap * sizeof(*b->keys));
    if (keys == NULL)
        return TALLY_out_of_memory;
    b->keys = keys;
    b->keys_capacity = cap;
    return TALLY_ok;
}

/* Pack one member (op, key in a batch, the op's fields) onto b. */
static int batch_add(tally_batch *b, const char *key, write_op op)
{
    char k[KEY_BUFFER_BYTES];
    if (b == NULL)
        return TALLY_invalid_argument;
    if (b->count >= (b->atomic ? TALLY_CLIENT_CHAIN_MAX : TALLY_CLIENT_BATCH_MAX))
        return TALLY_too_many_operations;
    int rc = b->atomic ? TALLY_ok : key_resolve(key, k);
    if (rc == TALLY_ok && !b->atomic)
        rc = batch_keys_reserve(b);
    fields fs = {.n = 0};
    put_str(&fs, "op", op.name);
    if (!b->atomic)
        put_str(&fs, "key", k);
    if (rc == TALLY_ok)
        rc = op.fill(&fs, op.args);
    if (rc != TALLY_ok)
        return rc;
    msgpack_packer pk;
    msgpack_packer_init(&pk, &b->members, msgpack_sbuffer_write);
    size_t before = b->members.size;
    if (pack_fields(&pk, &fs) != 0) {
        b->members.size = before; /* drop the partial member */
        return TALLY_out_of_memory;
    }
    if (!b->atomic)
        memcpy(b->keys[b->count], k, strlen(k) + 1);
    b->count++;
    return TALLY_ok;
}

int tally_batch_account_open(tally_batch *b, const char *key, const tally_account_open_args *a)
{
    return batch_add(b, key, (write_op){"account_open", fill_account_open, a});
}

int tally_batch_transfer(tally_batch *b, const char *key, const tally_transfer_args *t)
{
    return batch_add(b, key, (write_op){"transfer", fill_transfer, t});
}

int tally_batch_post(tally_batch *b, const char *key, const tally_uuid *pending_id, int64_t amount)
{
    hold_args h = {pending_id, amount};
    return batch_add(b, key, (write_op){"post", fill_post, &h});
}

int tally_batch_void(tally_batch *b, const char *key, const tally_uuid *pending_id)
{
    hold_args h = {pending_id, 0};
    return batch_add(b, key, (write_op){"void", fill_void, &h});
}

int tally_batch_grant(tally_batch *b, const char *key, const tally_entitlement_args *e)
{
    return batch_add(b, key, (write_op){"grant", fill_entitlement, e});
}

int tally_batch_extend(tally_batch *b, const char *key, const tally_entitlement_args *e)
{
    return batch_add(b, key, (write_op){"extend", fill_entitlement, e});
}

int tally_batch_revoke(tally_batch *b, const char *key, const tally_entitlement_args *e)
{
    return batch_add(b, key, (write_op){"revoke", fill_entitlement, e});
}

/* A chain is one write: TALLY_ok once decided (ok or a stored rejection). */
static int chain_send(tally_client *c, tally_batch *b, const char *key, tally_result *out)
{
    result_clear(out, NULL);
    int rc = key_resolve(key ? key : b->chain_key, out->key);
    if (rc != TALLY_ok)
        return out->code = rc;
    fields fs;
    client_fields_begin(&fs, "chain", c, out->key);
    put_ops(&fs, b);
    rc = write_exchange(c, &fs, out);
    return tally_error_is_stored(rc) ? TALLY_ok : rc;
}

static int batch_fail(tally_result *results, size_t n, int code)
{
    for (size_t i = 0; i < n; i++)
        results[i].code = code;
    return code;
}

static int batch_send(tally_client *c, tally_batch *b, tally_result *results)
{
    for (size_t i = 0; i < b->count; i++)
        result_clear(&results[i], b->keys[i]);
    fields fs;
    client_fields_begin(&fs, "batch", c, NULL);
    put_ops(&fs, b);
    reply r;
    int rc = client_call(c, &fs, 0, &r);
    if (rc != TALLY_ok)
        return batch_fail(results, b->count, rc);
    rc = r.code;
    const msgpack_object *list = msgpack_safe_map_get(r.root, "results");
    if (rc == TALLY_ok && (list == NULL || list->type != MSGPACK_OBJECT_ARRAY ||
                           list->via.array.size != b->count))
        rc = TALLY_internal;
    for (size_t i = 0; rc == TALLY_ok && i < b->count; i++)
        result_fill(&results[i], &list->via.array.ptr[i]);
    client_reply_free(&r);
    return rc == TALLY_ok ? TALLY_ok : batch_fail(results, b->count, rc);
}

int tally_batch_send(tally_client *c, tally_batch *b, const char *key, tally_result *results,
                     size_t results_capacity)
{
    if (c == NULL || b == NULL || results == NULL ||
        results_capacity < (b->atomic ? 1 : b->count))
        return TALLY_invalid_argument;
    return b->atomic ? chain_send(c, b, key, results) : batch_send(c, b, results);
}

/* ---- decoding read replies ---- */

static bool account_decode(const msgpack_object *o, void *out)
{
    tally_account *a = out;
    decoder d = decoder_of(o);
    a->id = dec_uint(&d, "id", UINT64_MAX);
    a->ledger = (uint32_t)dec_uint(&d, "ledger", UINT32_MAX);
    a->code = (uint16_t)dec_uint(&d, "code", UINT16_MAX);
    a->flags = (uint16_t)dec_uint(&d, "flags", UINT16_MAX);
    a->debits_posted = dec_int(&d, "debits_posted");
    a->credits_posted = dec_int(&d, "credits_posted");
    a->debits_pending = dec_int(&d, "debits_pending");
    a->credits_pending = dec_int(&d, "credits_pending");
    a->version = dec_uint(&d, "version", UINT64_MAX);
    a->created_seq = dec_uint(&d, "created_seq", UINT64_MAX);
    return d.ok;
}

static bool transfer_decode(const msgpack_object *o, void *out)
{
    tally_transfer_info *t = out;
    decoder d = decoder_of(o);
    dec_id(&d, "id", &t->id);
    t->debit_account_id = dec_uint(&d, "debit_account_id", UINT64_MAX);
    t->credit_account_id = dec_uint(&d, "credit_account_id", UINT64_MAX);
    t->amount = dec_int(&d, "amount");
    t->ledger = (uint32_t)dec_uint(&d, "ledger", UINT32_MAX);
    t->code = (uint16_t)dec_uint(&d, "code", UINT16_MAX);
    t->flags = (uint16_t)dec_uint(&d, "flags", UINT16_MAX);
    dec_str(&d, "state", t->state, sizeof(t->state));
    t->timeout_s = (uint32_t)dec_uint(&d, "timeout_s", UINT32_MAX);
    t->expires_at_ms = dec_int(&d, "expires_at_ms");
    t->posted_amount = dec_int(&d, "posted_amount");
    t->version = dec_uint(&d, "version", UINT64_MAX);
    t->created_seq = dec_uint(&d, "created_seq", UINT64_MAX);
    t->resolved_seq = dec_uint(&d, "resolved_seq", UINT64_MAX);
    t->created_ms = dec_int(&d, "created_ms");
    return d.ok;
}

static bool entitlement_decode(const msgpack_object *o, void *out)
{
    tally_entitlement *e = out;
    decoder d = decoder_of(o);
    memset(e, 0, sizeof(*e));
    dec_str(&d, "subject", e->subject, sizeof(e->subject));
    dec_str(&d, "feature", e->feature, sizeof(e->feature));
    dec_str(&d, "state", e->state, sizeof(e->state));
    e->lifetime = !dec_present(&d, "valid_until_ms");
    if (!e->lifetime)
        e->valid_until_ms = dec_int(&d, "valid_until_ms");
    e->version = dec_uint(&d, "version", UINT64_MAX);
    e->has_source_order = dec_present(&d, "source_order");
    if (e->has_source_order)
        e->source_order = dec_uint(&d, "source_order", UINT64_MAX);
    e->granted_ms = dec_int(&d, "granted_ms");
    e->updated_ms = dec_int(&d, "updated_ms");
    e->has_grant_transfer = dec_present(&d, "grant_transfer_id");
    if (e->has_grant_transfer)
        dec_id(&d, "grant_transfer_id", &e->grant_transfer_id);
    return d.ok;
}

static bool history_entry_decode(const msgpack_object *o, void *out)
{
    tally_history_entry *h = out;
    decoder d = decoder_of(o);
    h->seq = dec_uint(&d, "seq", UINT64_MAX);
    dec_str(&d, "type", h->type, sizeof(h->type));
    h->time_ms = dec_int(&d, "time_ms");
    return d.ok && transfer_decode(dec_get(&d, "transfer"), &h->transfer) &&
           account_decode(dec_get(&d, "account"), &h->account);
}

/* causation: nil (expiry sweeps) or {consumer, key}. */
static bool causation_decode(const msgpack_object *o, tally_event *e)
{
    e->consumer[0] = e->key[0] = '\0';
    if (o != NULL && o->type == MSGPACK_OBJECT_NIL)
        return true;
    decoder d = decoder_of(o);
    dec_str(&d, "consumer", e->consumer, sizeof(e->consumer));
    dec_str(&d, "key", e->key, sizeof(e->key));
    return d.ok;
}

/* A string element into out (capacity bytes with the NUL), 1..capacity-1 bytes. */
static bool str_copy(const msgpack_object *o, char *out, size_t capacity)
{
    tally_str s;
    if (!msgpack_safe_get_str(o, &s) || s.len == 0 || s.len >= capacity)
        return false;
    memcpy(out, s.ptr, s.len);
    out[s.len] = '\0';
    return true;
}

/* entity: ["account", id], ["transfer", id bin16] or ["entitlement",
 * subject, feature] (docs/EVENTS.md). */
static bool entity_decode(const msgpack_object *o, tally_event *e)
{
    if (o == NULL || o->type != MSGPACK_OBJECT_ARRAY || o->via.array.size < 2 ||
        !str_copy(&o->via.array.ptr[0], e->entity_kind, sizeof(e->entity_kind)))
        return false;
    const msgpack_object *item = o->via.array.ptr;
    uint32_t n = o->via.array.size;
    tally_id128 id;
    if (strcmp(e->entity_kind, "account") == 0)
        return n == 2 && msgpack_safe_get_u64(&item[1], &e->account_id) && e->account_id != 0;
    if (strcmp(e->entity_kind, "transfer") == 0) {
        if (n != 2 || !msgpack_safe_get_id128(&item[1], &id))
            return false;
        memcpy(e->transfer_id.bytes, id.bytes, 16);
        return true;
    }
    return strcmp(e->entity_kind, "entitlement") == 0 && n == 3 &&
           str_copy(&item[1], e->subject, sizeof(e->subject)) &&
           str_copy(&item[2], e->feature, sizeof(e->feature));
}

static bool event_fields_decode(const msgpack_object *m, tally_event *e)
{
    decoder d = decoder_of(m);
    e->seq = dec_uint(&d, "seq", UINT64_MAX);
    dec_id(&d, "id", &e->id);
    dec_str(&d, "type", e->type, sizeof(e->type));
    const msgpack_object *entity = dec_get(&d, "entity");
    if (!d.ok || !entity_decode(entity, e))
        return false;
    e->entity_version = dec_uint(&d, "entity_version", UINT64_MAX);
    e->time_ms = dec_int(&d, "time_ms");
    return d.ok && causation_decode(dec_get(&d, "causation"), e);
}

bool client_event_from_bytes(const void *bytes, size_t len, tally_event *e)
{
    memset(e, 0, sizeof(*e));
    msgpack_unpacked up;
    msgpack_unpacked_init(&up);
    bool ok = msgpack_safe_unpack(bytes, len, TALLY_MSGPACK_DEPTH_MAX, &up) == TALLY_ok &&
              event_fields_decode(&up.data, e);
    msgpack_unpacked_destroy(&up);
    uint8_t *raw = ok ? malloc(len) : NULL;
    if (raw == NULL)
        return false;
    memcpy(raw, bytes, len);
    e->raw = raw;
    e->raw_len = len;
    return true;
}

/* One log_read element: the event's stored bytes (bin). */
static bool event_decode(const msgpack_object *o, void *out)
{
    const void *bytes;
    size_t len;
    if (!msgpack_safe_get_bin(o, &bytes, &len)) {
        memset(out, 0, sizeof(tally_event));
        return false;
    }
    return client_event_from_bytes(bytes, len, out);
}

static bool stats_decode(const msgpack_object *o, void *out)
{
    tally_stats *s = out;
    decoder d = decoder_of(o);
    s->head_seq = dec_uint(&d, "head_seq", UINT64_MAX);
    s->first_seq = dec_uint(&d, "first_seq", UINT64_MAX);
    s->accounts = dec_uint(&d, "accounts", UINT64_MAX);
    s->transfers = dec_uint(&d, "transfers", UINT64_MAX);
    s->entitlements = dec_uint(&d, "entitlements", UINT64_MAX);
    s->inbox = dec_uint(&d, "inbox", UINT64_MAX);
    s->events = dec_uint(&d, "events", UINT64_MAX);
    s->map_used_bytes = dec_uint(&d, "map_used_bytes", UINT64_MAX);
    s->map_size_bytes = dec_uint(&d, "map_size_bytes", UINT64_MAX);
    const msgpack_object *subscribers = dec_get(&d, "subscribers");
    if (d.ok && subscribers->type != MSGPACK_OBJECT_ARRAY)
        return false;
    s->subscribers = d.ok ? subscribers->via.array.size : 0;
    s->inbox_oldest_age_s = dec_uint(&d, "inbox_oldest_age_s", INT64_MAX);
    s->log_floor = dec_uint(&d, "log_floor", UINT64_MAX);
    return d.ok;
}

/* Decode up to capacity elements of array o into out (stride bytes each);
 * *count gets how many decoded, also when one fails (false). */
bool client_array_decode(const msgpack_object *o, decode_fn decode, void *out, size_t stride,
                         size_t capacity, size_t *count)
{
    *count = 0;
    if (o == NULL || o->type != MSGPACK_OBJECT_ARRAY)
        return false;
    size_t n = o->via.array.size < capacity ? o->via.array.size : capacity;
    for (size_t i = 0; i < n; i++) {
        if (!decode(&o->via.array.ptr[i], (char *)out + i * stride))
            return false;
        (*count)++;
    }
    return true;
}

/* ---- event bodies (declared in tally_inbox.h: subscribers decode them) ---- */

static int body_object_decode(decode_fn decode, const msgpack_object *o, void *out)
{
    if (out == NULL)
        return TALLY_invalid_argument;
    return decode(o, out) ? TALLY_ok : TALLY_corrupt_record;
}

int tally_account_from_msgpack(const msgpack_object *o, tally_account *out)
{
    return body_object_decode(account_decode, o, out);
}

int tally_transfer_from_msgpack(const msgpack_object *o, tally_transfer_info *out)
{
    return body_object_decode(transfer_decode, o, out);
}

int tally_entitlement_from_msgpack(const msgpack_object *o, tally_entitlement *out)
{
    return body_object_decode(entitlement_decode, o, out);
}

/* ---- reads ---- */

/* Send a read; on TALLY_ok r is live and its code is ok. */
int client_read_exchange(tally_client *c, const fields *fs, uint32_t extra_wait_ms, reply *r)
{
    int rc = client_call(c, fs, extra_wait_ms, r);
    if (rc == TALLY_ok && r->code != TALLY_ok) {
        rc = r->code;
        client_reply_free(r);
    }
    return rc;
}

/* A read whose reply carries one object under name (NULL: the reply map). */
static int read_object(tally_client *c, const fields *fs, const char *name, decode_fn decode,
                       void *out)
{
    reply r;
    int rc = client_read_exchange(c, fs, 0, &r);
    if (rc != TALLY_ok)
        return rc;
    const msgpack_object *o = name ? msgpack_safe_map_get(r.root, name) : r.root;
    rc = decode(o, out) ? TALLY_ok : TALLY_internal;
    client_reply_free(&r);
    return rc;
}

int client_read_array(tally_client *c, const fields *fs, const char *name, decode_fn decode,
                      void *out, size_t stride, size_t capacity, size_t *count)
{
    reply r;
    int rc = client_read_exchange(c, fs, 0, &r);
    if (rc != TALLY_ok)
        return rc;
    rc = client_array_decode(msgpack_safe_map_get(r.root, name), decode, out, stride, capacity,
                             count)
             ? TALLY_ok
             : TALLY_internal;
    client_reply_free(&r);
    return rc;
}

int client_read_page(tally_client *c, const fields *fs, decode_fn decode, void *out,
                     size_t stride, size_t capacity, size_t *count, uint64_t *next)
{
    reply r;
    int rc = client_read_exchange(c, fs, 0, &r);
    if (rc != TALLY_ok)
        return rc;
    decoder d = decoder_of(r.root);
    *next = dec_present(&d, "next") ? dec_uint(&d, "next", UINT64_MAX) : 0;
    bool ok = d.ok && client_array_decode(msgpack_safe_map_get(r.root, "entries"), decode, out,
                                          stride, capacity, count);
    client_reply_free(&r);
    return ok ? TALLY_ok : TALLY_internal;
}

int tally_account_get(tally_client *c, uint64_t id, tally_account *out)
{
    if (c == NULL || out == NULL)
        return TALLY_invalid_argument;
    fields fs;
    client_fields_begin(&fs, "account_get", NULL, NULL);
    put_uint(&fs, "id", id);
    return read_object(c, &fs, "account", account_decode, out);
}

int tally_transfer_get(tally_client *c, const tally_uuid *id, tally_transfer_info *out)
{
    if (c == NULL || id == NULL || out == NULL)
        return TALLY_invalid_argument;
    fields fs;
    client_fields_begin(&fs, "transfer_get", NULL, NULL);
    put_id(&fs, "id", id);
    return read_object(c, &fs, "transfer", transfer_decode, out);
}

int tally_entitlement_get(tally_client *c, const char *subject, const char *feature,
                          tally_entitlement *out)
{
    if (c == NULL || subject == NULL || feature == NULL || out == NULL)
        return TALLY_invalid_argument;
    fields fs;
    client_fields_begin(&fs, "entitlement_get", NULL, NULL);
    put_str(&fs, "subject", subject);
    put_str(&fs, "feature", feature);
    return read_object(c, &fs, "entitlement", entitlement_decode, out);
}

int tally_stats_get(tally_client *c, tally_stats *out)
{
    if (c == NULL || out == NULL)
        return TALLY_invalid_argument;
    fields fs;
    client_fields_begin(&fs, "stats", NULL, NULL);
    return read_object(c, &fs, NULL, stats_decode, out);
}

static bool backup_decode(const msgpack_object *o, void *out)
{
    decoder d = decoder_of(o);
    *(uint64_t *)out = dec_uint(&d, "bytes", UINT64_MAX);
    return d.ok;
}

#define BACKUP_WAIT_MS 600000 /* a large store takes a while to copy */

int tally_backup(tally_client *c, const char *path, uint64_t *bytes)
{
    if (c == NULL || path == NULL || bytes == NULL || path[0] != '/')
        return TALLY_invalid_argument;
    fields fs;
    client_fields_begin(&fs, "backup", NULL, NULL);
    put_str(&fs, "path", path);
    reply r;
    int rc = client_read_exchange(c, &fs, BACKUP_WAIT_MS, &r);
    if (rc != TALLY_ok)
        return rc;
    rc = backup_decode(r.root, bytes) ? TALLY_ok : TALLY_internal;
    client_reply_free(&r);
    return rc;
}

int tally_entitlement_list(tally_client *c, const char *subject, tally_entitlement *out,
                           size_t capacity, size_t *count)
{
    if (c == NULL || subject == NULL || out == NULL || capacity == 0 || count == NULL)
        return TALLY_invalid_argument;
    fields fs;
    client_fields_begin(&fs, "entitlement_list", NULL, NULL);
    put_str(&fs, "subject", subject);
    return client_read_array(c, &fs, "entitlements", entitlement_decode, out, sizeof(*out),
                             capacity, count);
}

int tally_account_history(tally_client *c, uint64_t id, uint64_t after_seq, uint32_t limit,
                          bool reverse, tally_history_entry *out, size_t capacity,
                          size_t *count, uint64_t *next)
{
    if (c == NULL || out == NULL || capacity == 0 || count == NULL || next == NULL)
        return TALLY_invalid_argument;
    fields fs;
    client_fields_begin(&fs, "account_history", NULL, NULL);
    put_uint(&fs, "id", id);
    put_uint(&fs, "after_seq", after_seq);
    put_uint(&fs, "limit", client_page_limit(limit, capacity, TALLY_HISTORY_ENTRIES_DEFAULT,
                                             TALLY_HISTORY_ENTRIES_MAX));
    put_bool(&fs, "reverse", reverse);
    return client_read_page(c, &fs, history_entry_decode, out, sizeof(*out), capacity, count,
                            next);
}

void tally_events_release(tally_event *events, size_t count)
{
    for (size_t i = 0; events != NULL && i < count; i++) {
        free((void *)events[i].raw);
        events[i].raw = NULL;
        events[i].raw_len = 0;
    }
}

int tally_log_read(tally_client *c, uint64_t from_seq, uint32_t limit, uint32_t wait_ms,
                   tally_event *out, size_t capacity, size_t *count, uint64_t *head_seq)
{
    if (c == NULL || out == NULL || capacity == 0 || count == NULL || head_seq == NULL)
        return TALLY_invalid_argument;
    fields fs;
    client_fields_begin(&fs, "log_read", NULL, NULL);
    put_uint(&fs, "from_seq", from_seq ? from_seq : 1);
    put_uint(&fs, "limit", client_page_limit(limit, capacity, TALLY_LOG_READ_EVENTS_DEFAULT,
                                      TALLY_LOG_READ_EVENTS_MAX));
    put_uint(&fs, "wait_ms", wait_ms);
    reply r;
    int rc = client_read_exchange(c, &fs, wait_ms, &r);
    if (rc != TALLY_ok)
        return rc;
    decoder d = decoder_of(r.root);
    *head_seq = dec_uint(&d, "head", UINT64_MAX);
    bool ok = d.ok && client_array_decode(msgpack_safe_map_get(r.root, "events"), event_decode,
                                          out, sizeof(*out), capacity, count);
    client_reply_free(&r);
    if (!ok) {
        tally_events_release(out, *count);
        *count = 0;
    }
    return ok ? TALLY_ok : TALLY_internal;
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

int tally_request_raw(tally_client *c, const void *request, size_t len, void **reply_out,
                      size_t *reply_len)
{
    if (c == NULL || request == NULL || len == 0 || reply_out == NULL || reply_len == NULL)
        return TALLY_invalid_argument;
    reply r;
    int rc = exchange(c, request, len, raw_wait_ms(request, len), &r);
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
