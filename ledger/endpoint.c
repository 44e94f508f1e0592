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

#define ENDPOINT_RECORD_FORMAT 1
#define ENDPOINT_RECORD_HEAD_BYTES (1 + 1 + 8 + 8 + 2)

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

int ledger_endpoint_get(store_txn *t, tally_str name, ledger_endpoint_state *out)
{
    memset(out, 0, sizeof(*out));
    MDB_val v;
    int rc = store_get(t, STORE_DB_ENDPOINTS, name.ptr, name.len, &v);
    if (rc == TALLY_not_found)
        return TALLY_ok;
    if (rc != TALLY_ok)
        return rc;
    const uint8_t *p = v.mv_data;
    if (v.mv_size < ENDPOINT_RECORD_HEAD_BYTES || p[0] != ENDPOINT_RECORD_FORMAT || p[1] > 1)
        return TALLY_corrupt_record;
    size_t reason_len = get_u16_be(p + 18);
    if (reason_len > TALLY_ENDPOINT_REASON_BYTES_MAX ||
        v.mv_size != ENDPOINT_RECORD_HEAD_BYTES + reason_len || get_u64_be(p + 2) == 0)
        return TALLY_corrupt_record;
    out->disabled = p[1] == 1;
    out->version = get_u64_be(p + 2);
    out->changed_ms = (int64_t)get_u64_be(p + 10);
    memcpy(out->reason, p + ENDPOINT_RECORD_HEAD_BYTES, reason_len);
    return TALLY_ok;
}

typedef struct endpoint_body {
    tally_str name, reason;
    bool disabled;
} endpoint_body;

static int pack_endpoint_body(msgpack_packer *pk, const void *arg)
{
    const endpoint_body *b = arg;
    return msgpack_pack_array(pk, 1) || msgpack_pack_array(pk, 3) ||
           msgpack_safe_pack_str(pk, b->name) ||
           msgpack_safe_pack_cstr(pk, b->disabled ? "disabled" : "enabled") ||
           msgpack_safe_pack_str(pk, b->reason);
}

static int endpoint_set(ledger_ctx *ctx, const ledger_endpoint *cmd, bool disabled)
{
    ledger_endpoint_state was;
    int rc = ledger_endpoint_get(ctx->txn, cmd->name, &was);
    if (rc != TALLY_ok)
        return rc;
    tally_str reason = disabled ? cmd->reason : (tally_str){0};
    assert(reason.len <= TALLY_ENDPOINT_REASON_BYTES_MAX);
    uint8_t record[ENDPOINT_RECORD_HEAD_BYTES + TALLY_ENDPOINT_REASON_BYTES_MAX];
    record[0] = ENDPOINT_RECORD_FORMAT;
    record[1] = disabled ? 1 : 0;
    put_u64_be(record + 2, was.version + 1);
    put_u64_be(record + 10, (uint64_t)ctx->now_ms);
    record[18] = (uint8_t)(reason.len >> 8);
    record[19] = (uint8_t)reason.len;
    if (reason.len)
        memcpy(record + ENDPOINT_RECORD_HEAD_BYTES, reason.ptr, reason.len);
    rc = store_put(ctx->txn, STORE_DB_ENDPOINTS, cmd->name.ptr, cmd->name.len, record,
                   ENDPOINT_RECORD_HEAD_BYTES + reason.len, 0);
    if (rc != TALLY_ok)
        return rc;
    log_entity entity = {.kind = LOG_ENTITY_ENDPOINT, .endpoint = cmd->name};
    endpoint_body body = {.name = cmd->name, .reason = reason, .disabled = disabled};
    return ledger_emit(ctx, disabled ? LOG_EVENT_ENDPOINT_DISABLED : LOG_EVENT_ENDPOINT_ENABLED,
                       &entity, was.version + 1, pack_endpoint_body, &body);
}

int ledger_endpoint_disable_apply(ledger_ctx *ctx, const ledger_command *cmd)
{
    return endpoint_set(ctx, &cmd->u.endpoint, true);
}

int ledger_endpoint_enable_apply(ledger_ctx *ctx, const ledger_command *cmd)
{
    return endpoint_set(ctx, &cmd->u.endpoint, false);
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
