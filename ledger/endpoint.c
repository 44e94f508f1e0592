/*
 * endpoint.c — endpoint_disable and endpoint_enable (endpoint.h). The
 * record: format byte 1, disabled (u8), version (u64), changed_ms (i64),
 * reason length (u16), reason; integers big-endian. The event's entity is
 * the endpoint, its version the record's; its body one row [name, state
 * ("disabled" or "enabled"), reason].
 */
#include "ledger/endpoint.h"

#include "common/bytes.h"
#include "common/error.h"
#include "common/log_event.h"
#include "common/msgpack_safe.h"

#include <assert.h>
#include <string.h>

#include "common/webhook_secret.h"

#define ENDPOINT_RECORD_FORMAT 1         /* the state */
#define ENDPOINT_RECORD_FORMAT_DEFINED 2 /* ... and a definition (endpoint_create) */
#define ENDPOINT_DEFINITION_BYTES_MAX                                                        \
    (1 + 2 + TALLY_ENDPOINT_URL_BYTES_MAX + 2 + TALLY_ENDPOINT_TYPES_BYTES_MAX + 2 +          \
     TALLY_ENDPOINT_SCHEDULE_BYTES_MAX + 1 + TALLY_ENDPOINT_BACKFILL_BYTES_MAX + 4 + 4)
#define ENDPOINT_RECORD_BYTES_MAX                                                            \
    (1 + 1 + 8 + 8 + 2 + TALLY_ENDPOINT_REASON_BYTES_MAX +                                   \
     2 * (1 + TALLY_ENDPOINT_SECRET_BYTES_MAX) + 8 + 8 + 8 + ENDPOINT_DEFINITION_BYTES_MAX)

bool ledger_endpoint_name_valid(tally_str name)
{
    if (name.len == 0 || name.len > TALLY_ENDPOINT_NAME_BYTES_MAX)
        return false;
    for (size_t i = 0; i < name.len; i++) {
        char c = name.ptr[i];
        if (!((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
              c == '.' || c == '_' || c == '-'))
            return false;
    }
    return true;
}

/* A reader of a record that remembers whether it ran past its end. */
typedef struct record_reader {
    const uint8_t *p, *end;
    bool ok;
} record_reader;

static const uint8_t *take(record_reader *r, size_t n)
{
    if (!r->ok || (size_t)(r->end - r->p) < n) {
        r->ok = false;
        return NULL;
    }
    const uint8_t *at = r->p;
    r->p += n;
    return at;
}

/* A length (len_bytes: 1 or 2) and that many bytes, at most max, into out. */
static size_t take_bytes(record_reader *r, size_t len_bytes, size_t max, uint8_t *out)
{
    const uint8_t *l = take(r, len_bytes);
    size_t n = l == NULL ? 0 : len_bytes == 1 ? l[0] : get_u16_be(l);
    r->ok = r->ok && n <= max;
    const uint8_t *at = take(r, r->ok ? n : 0);
    if (at && n)
        memcpy(out, at, n);
    return r->ok ? n : 0;
}

/* A text of at most max bytes (u16 length) into out, NUL-terminated;
 * one with a NUL inside fails the reader. */
static void take_text(record_reader *r, size_t max, char *out)
{
    size_t n = take_bytes(r, 2, max, (uint8_t *)out);
    out[n] = '\0';
    r->ok = r->ok && strlen(out) == n;
}

/* Format 2's definition: defined u8, url, types, schedule (u16 lengths),
 * backfill (u8 length), connect_timeout_ms u32, timeout_ms u32. */
static void definition_read(record_reader *r, ledger_endpoint_state *out)
{
    const uint8_t *defined = take(r, 1);
    out->defined = defined && defined[0] == 1;
    r->ok = r->ok && defined != NULL && defined[0] <= 1;
    take_text(r, TALLY_ENDPOINT_URL_BYTES_MAX, out->url);
    take_text(r, TALLY_ENDPOINT_TYPES_BYTES_MAX, out->types);
    take_text(r, TALLY_ENDPOINT_SCHEDULE_BYTES_MAX, out->schedule);
    size_t n = take_bytes(r, 1, TALLY_ENDPOINT_BACKFILL_BYTES_MAX, (uint8_t *)out->backfill);
    out->backfill[n] = '\0';
    const uint8_t *timeouts = take(r, 8);
    if (timeouts) {
        out->connect_timeout_ms = get_u32_be(timeouts);
        out->timeout_ms = get_u32_be(timeouts + 4);
    }
    r->ok = r->ok && (out->defined || out->url[0] == '\0');
}

static int record_decode(const MDB_val *v, ledger_endpoint_state *out)
{
    memset(out, 0, sizeof(*out));
    record_reader r = {v->mv_data, (const uint8_t *)v->mv_data + v->mv_size, true};
    const uint8_t *head = take(&r, 18);
    if (head == NULL || (head[0] != ENDPOINT_RECORD_FORMAT &&
                         head[0] != ENDPOINT_RECORD_FORMAT_DEFINED) || head[1] > 1)
        return TALLY_corrupt_record;
    out->disabled = head[1] == 1;
    out->version = get_u64_be(head + 2);
    out->changed_ms = (int64_t)get_u64_be(head + 10);
    take_bytes(&r, 2, TALLY_ENDPOINT_REASON_BYTES_MAX, (uint8_t *)out->reason);
    out->secret_len = take_bytes(&r, 1, TALLY_ENDPOINT_SECRET_BYTES_MAX, out->secret);
    out->previous_len = take_bytes(&r, 1, TALLY_ENDPOINT_SECRET_BYTES_MAX, out->previous);
    const uint8_t *tail = take(&r, 24);
    if (tail && head[0] == ENDPOINT_RECORD_FORMAT_DEFINED)
        definition_read(&r, out);
    if (!r.ok || r.p != r.end || out->version == 0)
        return TALLY_corrupt_record;
    out->previous_until_ms = (int64_t)get_u64_be(tail);
    out->recover_since_ms = (int64_t)get_u64_be(tail + 8);
    out->recover_version = get_u64_be(tail + 16);
    return TALLY_ok;
}

/* The record: format byte 1 (2 with a definition), disabled u8, version
 * u64, changed_ms i64, reason (u16 length), secret (u8 length), previous
 * secret (u8 length), previous_until_ms i64, recover_since_ms i64,
 * recover_version u64, then format 2's definition (definition_read);
 * integers big-endian. */
int ledger_endpoint_get(store_txn *t, tally_str name, ledger_endpoint_state *out)
{
    memset(out, 0, sizeof(*out));
    MDB_val v;
    int rc = store_get(t, STORE_DB_ENDPOINTS, name.ptr, name.len, &v);
    if (rc == TALLY_not_found)
        return TALLY_ok;
    return rc == TALLY_ok ? record_decode(&v, out) : rc;
}

int ledger_endpoint_each(store_txn *t,
                         int (*each)(tally_str name, const ledger_endpoint_state *s, void *ctx),
                         void *ctx)
{
    store_scan sc;
    int rc = store_scan_begin(t, STORE_DB_ENDPOINTS, NULL, 0, false, &sc);
    if (rc != TALLY_ok)
        return rc == TALLY_not_found ? TALLY_ok : rc;
    ledger_endpoint_state s;
    for (; rc == TALLY_ok && store_scan_on(&sc); store_scan_next(&sc)) {
        tally_str name = {sc.key.mv_data, sc.key.mv_size};
        rc = ledger_endpoint_name_valid(name) ? record_decode(&sc.val, &s) : TALLY_corrupt_record;
        if (rc == TALLY_ok)
            rc = each(name, &s, ctx);
    }
    return store_scan_end(&sc, rc);
}

static uint8_t *put_bytes(uint8_t *p, size_t len_bytes, const void *bytes, size_t n)
{
    if (len_bytes == 2)
        *p++ = (uint8_t)(n >> 8);
    *p++ = (uint8_t)n;
    if (n)
        memcpy(p, bytes, n);
    return p + n;
}

static uint8_t *definition_put(uint8_t *p, const ledger_endpoint_state *s)
{
    *p++ = s->defined ? 1 : 0;
    p = put_bytes(p, 2, s->url, strlen(s->url));
    p = put_bytes(p, 2, s->types, strlen(s->types));
    p = put_bytes(p, 2, s->schedule, strlen(s->schedule));
    p = put_bytes(p, 1, s->backfill, strlen(s->backfill));
    put_u32_be(p, s->connect_timeout_ms);
    put_u32_be(p + 4, s->timeout_ms);
    return p + 8;
}

int ledger_endpoint_put(store_txn *t, tally_str name, const ledger_endpoint_state *s)
{
    uint8_t record[ENDPOINT_RECORD_BYTES_MAX], *p = record;
    size_t reason_len = strlen(s->reason);
    assert(s->version > 0 && reason_len <= TALLY_ENDPOINT_REASON_BYTES_MAX &&
           s->secret_len <= TALLY_ENDPOINT_SECRET_BYTES_MAX &&
           s->previous_len <= TALLY_ENDPOINT_SECRET_BYTES_MAX);
    bool definition = s->defined || s->url[0];
    *p++ = definition ? ENDPOINT_RECORD_FORMAT_DEFINED : ENDPOINT_RECORD_FORMAT;
    *p++ = s->disabled ? 1 : 0;
    put_u64_be(p, s->version);
    put_u64_be(p + 8, (uint64_t)s->changed_ms);
    p = put_bytes(p + 16, 2, s->reason, reason_len);
    p = put_bytes(p, 1, s->secret, s->secret_len);
    p = put_bytes(p, 1, s->previous, s->previous_len);
    put_u64_be(p, (uint64_t)s->previous_until_ms);
    put_u64_be(p + 8, (uint64_t)s->recover_since_ms);
    put_u64_be(p + 16, s->recover_version);
    p += 24;
    if (definition)
        p = definition_put(p, s);
    return store_put(t, STORE_DB_ENDPOINTS, name.ptr, name.len, record, (size_t)(p - record), 0);
}

typedef struct endpoint_body {
    tally_str name;
    const ledger_endpoint_state *s;
} endpoint_body;

static int pack_endpoint_body(msgpack_packer *pk, const void *arg)
{
    const endpoint_body *b = arg;
    return msgpack_pack_array(pk, 1) || msgpack_pack_array(pk, 5) ||
           msgpack_safe_pack_str(pk, b->name) ||
           msgpack_safe_pack_cstr(pk, b->s->disabled ? "disabled" : "enabled") ||
           msgpack_safe_pack_cstr(pk, b->s->reason) ||
           msgpack_pack_int64(pk, b->s->previous_until_ms) ||
           msgpack_pack_int64(pk, b->s->recover_since_ms);
}

typedef void (*endpoint_change_fn)(ledger_endpoint_state *s, const ledger_endpoint *cmd,
                                   int64_t now_ms);

/* Read name's state, let change alter it, store it as the next version and
 * append the event of type. */
static int endpoint_change(ledger_ctx *ctx, const ledger_endpoint *cmd, log_event_type type,
                           endpoint_change_fn change)
{
    ledger_endpoint_state s;
    int rc = ledger_endpoint_get(ctx->txn, cmd->name, &s);
    if (rc != TALLY_ok)
        return rc;
    change(&s, cmd, ctx->now_ms);
    return ledger_endpoint_commit(ctx, cmd->name, &s, type);
}

int ledger_endpoint_commit(ledger_ctx *ctx, tally_str name, ledger_endpoint_state *s,
                           log_event_type type)
{
    s->version++;
    s->changed_ms = ctx->now_ms;
    int rc = ledger_endpoint_put(ctx->txn, name, s);
    if (rc != TALLY_ok)
        return rc;
    log_entity entity = {.kind = LOG_ENTITY_ENDPOINT, .endpoint = name};
    endpoint_body body = {.name = name, .s = s};
    return ledger_emit(ctx, type, &entity, s->version, pack_endpoint_body, &body);
}

static void set_disabled(ledger_endpoint_state *s, const ledger_endpoint *cmd, int64_t now_ms)
{
    (void)now_ms;
    assert(cmd->reason.len <= TALLY_ENDPOINT_REASON_BYTES_MAX);
    s->disabled = true;
    if (cmd->reason.len > 0) /* no reason: ptr may be NULL */
        memcpy(s->reason, cmd->reason.ptr, cmd->reason.len);
    s->reason[cmd->reason.len] = '\0';
}

static void set_enabled(ledger_endpoint_state *s, const ledger_endpoint *cmd, int64_t now_ms)
{
    (void)cmd, (void)now_ms;
    s->disabled = false;
    s->reason[0] = '\0';
}

/* The previous secret is the current one (none while tallyd has none: the
 * config file's then signs through the overlap). */
static void set_secret(ledger_endpoint_state *s, const ledger_endpoint *cmd, int64_t now_ms)
{
    uint8_t key[STANDARD_SECRET_BYTES_MAX];
    size_t len = 0;
    char why[128];
    bool ok = standard_secret_decode(cmd->secret.ptr, cmd->secret.len, key, &len, why,
                                     sizeof(why));
    assert(ok && len <= sizeof(s->secret)); /* validated */
    (void)ok;
    memcpy(s->previous, s->secret, s->secret_len);
    s->previous_len = s->secret_len;
    s->previous_until_ms = cmd->overlap_s ? now_ms + (int64_t)cmd->overlap_s * 1000 : 0;
    memcpy(s->secret, key, len);
    s->secret_len = len;
}

static void set_recover(ledger_endpoint_state *s, const ledger_endpoint *cmd, int64_t now_ms)
{
    (void)now_ms;
    s->recover_since_ms = cmd->since_ms;
    s->recover_version = s->version + 1; /* the version this change makes */
}

static void set_recovered(ledger_endpoint_state *s, const ledger_endpoint *cmd, int64_t now_ms)
{
    (void)cmd, (void)now_ms;
    s->recover_since_ms = 0;
    s->recover_version = 0;
}

int ledger_endpoint_recover_apply(ledger_ctx *ctx, const ledger_command *cmd)
{
    return endpoint_change(ctx, &cmd->u.endpoint, LOG_EVENT_ENDPOINT_RECOVER_REQUESTED,
                           set_recover);
}

int ledger_endpoint_recovered_apply(ledger_ctx *ctx, const ledger_command *cmd)
{
    ledger_endpoint_state s;
    int rc = ledger_endpoint_get(ctx->txn, cmd->u.endpoint.name, &s);
    if (rc != TALLY_ok || s.recover_since_ms == 0 ||
        s.recover_version != cmd->u.endpoint.recover_version)
        return rc; /* done already, or another asked since: that one stays */
    return endpoint_change(ctx, &cmd->u.endpoint, LOG_EVENT_ENDPOINT_RECOVERED, set_recovered);
}

int ledger_endpoint_disable_apply(ledger_ctx *ctx, const ledger_command *cmd)
{
    return endpoint_change(ctx, &cmd->u.endpoint, LOG_EVENT_ENDPOINT_DISABLED, set_disabled);
}

int ledger_endpoint_enable_apply(ledger_ctx *ctx, const ledger_command *cmd)
{
    return endpoint_change(ctx, &cmd->u.endpoint, LOG_EVENT_ENDPOINT_ENABLED, set_enabled);
}

int ledger_endpoint_rotate_secret_apply(ledger_ctx *ctx, const ledger_command *cmd)
{
    return endpoint_change(ctx, &cmd->u.endpoint, LOG_EVENT_ENDPOINT_SECRET_ROTATED, set_secret);
}

/* ---- the attempt log ---- */

#define ATTEMPT_RECORD_FORMAT 1
#define ATTEMPT_KEY_BYTES_MAX (1 + TALLY_ENDPOINT_NAME_BYTES_MAX + 8 + 8 + 4)
#define ATTEMPT_VALUE_BYTES_MAX (1 + 2 + 4 + 2 + 2 * TALLY_ATTEMPT_TEXT_BYTES_MAX + 2)

/* name length, name: the prefix of every key of name. */
static size_t attempt_prefix(tally_str name, uint8_t *key)
{
    assert(name.len > 0 && name.len <= TALLY_ENDPOINT_NAME_BYTES_MAX);
    key[0] = (uint8_t)name.len;
    memcpy(key + 1, name.ptr, name.len);
    return 1 + name.len;
}

bool ledger_endpoint_attempt_valid(const ledger_endpoint_attempt *a)
{
    return a->seq > 0 && a->attempt > 0 && a->time_ms >= 0 && a->time_ms <= TALLY_TIME_MS_MAX &&
           a->status <= 999 && a->error.len <= TALLY_ATTEMPT_TEXT_BYTES_MAX &&
           a->response.len <= TALLY_ATTEMPT_TEXT_BYTES_MAX;
}

static uint8_t *put_text(uint8_t *p, tally_str s)
{
    p[0] = (uint8_t)(s.len >> 8);
    p[1] = (uint8_t)s.len;
    if (s.len)
        memcpy(p + 2, s.ptr, s.len);
    return p + 2 + s.len;
}

int ledger_endpoint_attempt_put(store_txn *t, tally_str name, const ledger_endpoint_attempt *a)
{
    assert(ledger_endpoint_name_valid(name) && ledger_endpoint_attempt_valid(a));
    uint8_t key[ATTEMPT_KEY_BYTES_MAX], val[ATTEMPT_VALUE_BYTES_MAX];
    size_t k = attempt_prefix(name, key);
    put_u64_be(key + k, (uint64_t)a->time_ms);
    put_u64_be(key + k + 8, a->seq);
    key[k + 16] = (uint8_t)(a->attempt >> 24), key[k + 17] = (uint8_t)(a->attempt >> 16);
    key[k + 18] = (uint8_t)(a->attempt >> 8), key[k + 19] = (uint8_t)a->attempt;
    uint8_t *p = val;
    *p++ = ATTEMPT_RECORD_FORMAT;
    *p++ = (uint8_t)(a->status >> 8), *p++ = (uint8_t)a->status;
    *p++ = (uint8_t)(a->latency_ms >> 24), *p++ = (uint8_t)(a->latency_ms >> 16);
    *p++ = (uint8_t)(a->latency_ms >> 8), *p++ = (uint8_t)a->latency_ms;
    p = put_text(put_text(p, a->error), a->response);
    return store_put(t, STORE_DB_ENDPOINT_ATTEMPTS, key, k + 20, val, (size_t)(p - val), 0);
}

/* The attempt of one entry of name's (prefix_len bytes of prefix). */
static int attempt_decode(const MDB_val *k, const MDB_val *v, size_t prefix_len,
                          ledger_endpoint_attempt *a)
{
    const uint8_t *key = k->mv_data, *val = v->mv_data;
    if (k->mv_size != prefix_len + 20 || v->mv_size < 11 || val[0] != ATTEMPT_RECORD_FORMAT)
        return TALLY_corrupt_record;
    a->time_ms = (int64_t)get_u64_be(key + prefix_len);
    a->seq = get_u64_be(key + prefix_len + 8);
    a->attempt = get_u32_be(key + prefix_len + 16);
    a->status = get_u16_be(val + 1);
    a->latency_ms = get_u32_be(val + 3);
    size_t error_len = get_u16_be(val + 7);
    if (9 + error_len + 2 > v->mv_size)
        return TALLY_corrupt_record;
    size_t response_len = get_u16_be(val + 9 + error_len);
    if (11 + error_len + response_len != v->mv_size)
        return TALLY_corrupt_record;
    a->error = (tally_str){(const char *)val + 9, error_len};
    a->response = (tally_str){(const char *)val + 11 + error_len, response_len};
    return ledger_endpoint_attempt_valid(a) ? TALLY_ok : TALLY_corrupt_record;
}

static bool key_has_prefix(const MDB_val *k, const uint8_t *prefix, size_t len)
{
    return k->mv_size > len && memcmp(k->mv_data, prefix, len) == 0;
}

int ledger_endpoint_attempts_sweep(store_txn *t, tally_str name, int64_t before_ms, uint32_t max,
                                   uint32_t *removed)
{
    uint8_t prefix[ATTEMPT_KEY_BYTES_MAX];
    size_t len = attempt_prefix(name, prefix);
    *removed = 0;
    while (*removed < max) {
        store_scan s;
        int rc = store_scan_begin(t, STORE_DB_ENDPOINT_ATTEMPTS, prefix, len, false, &s);
        if (rc != TALLY_ok)
            return rc == TALLY_not_found ? TALLY_ok : rc;
        bool due = store_scan_on(&s) && key_has_prefix(&s.key, prefix, len) &&
                   s.key.mv_size == len + 20 &&
                   (int64_t)get_u64_be((const uint8_t *)s.key.mv_data + len) < before_ms;
        uint8_t key[ATTEMPT_KEY_BYTES_MAX];
        size_t key_len = due ? s.key.mv_size : 0;
        if (due)
            memcpy(key, s.key.mv_data, key_len);
        rc = store_scan_end(&s, TALLY_ok);
        if (rc != TALLY_ok || !due)
            return rc;
        rc = store_del(t, STORE_DB_ENDPOINT_ATTEMPTS, key, key_len);
        if (rc != TALLY_ok)
            return rc;
        (*removed)++;
    }
    return TALLY_ok;
}

int ledger_endpoint_attempts_each(store_txn *t, tally_str name, uint64_t seq, uint32_t limit,
                                  int (*each)(const ledger_endpoint_attempt *a, void *ctx),
                                  void *ctx)
{
    uint8_t prefix[ATTEMPT_KEY_BYTES_MAX + 1];
    size_t len = attempt_prefix(name, prefix);
    /* past the last key of name: its prefix with the length byte + 1 */
    uint8_t after[1 + TALLY_ENDPOINT_NAME_BYTES_MAX + 1];
    memcpy(after, prefix, len);
    after[len] = 0xff;
    store_scan s;
    int rc = store_scan_begin(t, STORE_DB_ENDPOINT_ATTEMPTS, after, len + 1, true, &s);
    if (rc != TALLY_ok)
        return rc == TALLY_not_found ? TALLY_ok : rc;
    uint32_t given = 0;
    for (; rc == TALLY_ok && given < limit && store_scan_on(&s) &&
           key_has_prefix(&s.key, prefix, len);
         store_scan_next(&s)) {
        ledger_endpoint_attempt a;
        rc = attempt_decode(&s.key, &s.val, len, &a);
        if (rc != TALLY_ok || (seq && a.seq != seq))
            continue;
        given++;
        if (each(&a, ctx) != 0)
            break;
    }
    return store_scan_end(&s, rc);
}
