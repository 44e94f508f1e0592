/*
 * ops_endpoint.c — the attempt log of tally-relay's endpoints
 * (docs/RELAY.md, "The attempt log"): endpoint_attempts_record, a writer
 * op without consumer or key (an attempt recorded twice is stored once,
 * so a retried record is harmless), which stores a batch of one
 * endpoint's attempts and removes that endpoint's attempts older than the
 * retention, a bounded number at a time, in a transaction nested in the
 * group's; and endpoint_attempts, the read.
 */
#include "net/ops/ops.h"

#include "common/error.h"
#include "common/msgpack_safe.h"

#include <string.h>

#define ATTEMPT_RETENTION_S_DEFAULT 604800u /* 7 days */

typedef enum attempt_key {
    KEY_SEQ, KEY_ATTEMPT, KEY_TIME_MS, KEY_STATUS, KEY_LATENCY_MS, KEY_ERROR, KEY_RESPONSE,
    KEY_COUNT
} attempt_key;

static const char *const attempt_keys[KEY_COUNT] = {
    "seq", "attempt", "time_ms", "status", "latency_ms", "error", "response"};

/* One value of an attempt map into a; false when it is of the wrong type
 * (or, for the 32-bit numbers, above 2^32-1). */
static bool attempt_value(attempt_key k, const msgpack_object *v, ledger_endpoint_attempt *a)
{
    uint64_t u = 0;
    switch (k) {
    case KEY_TIME_MS: return msgpack_safe_get_i64(v, &a->time_ms);
    case KEY_ERROR: return msgpack_safe_get_str(v, &a->error);
    case KEY_RESPONSE: return msgpack_safe_get_str(v, &a->response);
    case KEY_SEQ: return msgpack_safe_get_u64(v, &a->seq);
    default: break;
    }
    if (!msgpack_safe_get_u64(v, &u) || u > UINT32_MAX)
        return false;
    if (k == KEY_ATTEMPT)
        a->attempt = (uint32_t)u;
    else if (k == KEY_STATUS)
        a->status = (uint32_t)u;
    else
        a->latency_ms = (uint32_t)u;
    return true;
}

/* One attempt map: every key known, seq, attempt and time_ms given, each
 * value within its bounds. TALLY_ok or the refusal, with detail. */
static int attempt_decode(const msgpack_object *m, ledger_endpoint_attempt *a, const char **detail)
{
    memset(a, 0, sizeof(*a));
    *detail = "attempts: a map each";
    if (m->type != MSGPACK_OBJECT_MAP)
        return TALLY_wrong_type;
    bool seen[KEY_COUNT] = {false};
    for (uint32_t i = 0; i < m->via.map.size; i++) {
        const msgpack_object_kv *kv = &m->via.map.ptr[i];
        tally_str name;
        int k = 0;
        if (msgpack_safe_get_str(&kv->key, &name))
            while (k < KEY_COUNT && !tally_str_equal(name, tally_str_from(attempt_keys[k])))
                k++;
        *detail = k < KEY_COUNT ? attempt_keys[k] : "attempts: a key";
        if (k == KEY_COUNT)
            return TALLY_unknown_field;
        if (seen[k])
            return TALLY_duplicate_field;
        seen[k] = true;
        if (!attempt_value((attempt_key)k, &kv->val, a))
            return TALLY_wrong_type;
    }
    for (int k = KEY_SEQ; k <= KEY_TIME_MS; k++)
        if (!seen[k]) {
            *detail = attempt_keys[k];
            return TALLY_missing_field;
        }
    *detail = "attempts: seq and attempt >= 1, time_ms 0..year 9999, status <= 999, texts <= "
              "256 bytes";
    return ledger_endpoint_attempt_valid(a) ? TALLY_ok : TALLY_value_out_of_range;
}

/* req->endpoint cleared and named name: TALLY_ok, or the refusal of a
 * name that is none. */
static int endpoint_args_begin(net_request *req, tally_str name)
{
    net_endpoint_args *e = &req->endpoint;
    memset(e, 0, sizeof(*e));
    if (!ledger_endpoint_name_valid(name))
        return net_request_fail(req, TALLY_invalid_endpoint_name,
                                "endpoint: 1-58 bytes of A-Z a-z 0-9 . _ -");
    e->name = name;
    return TALLY_ok;
}

int net_build_endpoint_attempts_record(net_request *req,
                                       const net_args_endpoint_attempts_record *a)
{
    net_endpoint_args *e = &req->endpoint;
    int rc = endpoint_args_begin(req, a->endpoint);
    if (rc != TALLY_ok)
        return rc;
    e->retention_s = a->has_retention_s ? (uint32_t)a->retention_s : ATTEMPT_RETENTION_S_DEFAULT;
    for (uint32_t i = 0; i < a->attempts.count; i++) {
        const char *detail = "";
        rc = attempt_decode(&a->attempts.items[i], &e->attempts[i], &detail);
        if (rc != TALLY_ok)
            return net_request_fail(req, rc, detail);
    }
    e->count = a->attempts.count;
    return TALLY_ok;
}

/* Store the attempts, then sweep the endpoint's expired ones. */
static int record_run(store_txn *t, const net_endpoint_args *e, int64_t now_ms, uint32_t *removed)
{
    int rc = TALLY_ok;
    for (uint32_t i = 0; rc == TALLY_ok && i < e->count; i++)
        rc = ledger_endpoint_attempt_put(t, e->name, &e->attempts[i]);
    if (rc != TALLY_ok)
        return rc;
    return ledger_endpoint_attempts_sweep(t, e->name, now_ms - (int64_t)e->retention_s * 1000,
                                          TALLY_ATTEMPTS_SWEEP_MAX, removed);
}

int net_apply_endpoint_attempts_record(store_txn *t, const net_request *req, int64_t now_ms,
                                       bool in_place, net_result *res)
{
    (void)in_place; /* always nested: a fault undoes only this op */
    res->attempts_removed = 0;
    store_txn child;
    int rc = store_txn_begin(t->st, t, false, &child);
    if (rc == TALLY_ok) {
        rc = record_run(&child, &req->endpoint, now_ms, &res->attempts_removed);
        rc = rc == TALLY_ok ? store_txn_commit(&child) : (store_txn_abort(&child), rc);
    }
    res->sub.code = rc;
    return TALLY_ok;
}

void net_reply_endpoint_attempts_record(net_out *o, store_txn *rt, const net_request *req,
                                        const net_result *res, int fault, int64_t now_ms)
{
    (void)rt, (void)now_ms;
    int code = fault ? fault : res->sub.code;
    if (code != TALLY_ok)
        return net_reply_error(o, code, "the attempt log could not be written");
    net_reply_open(o, TALLY_ok);
    net_kv_u64(o, "recorded", req->endpoint.count);
    net_kv_u64(o, "removed", res->attempts_removed);
    net_map_end(o);
}

int net_build_endpoint_attempts(net_request *req, const net_args_endpoint_attempts *a)
{
    net_endpoint_args *e = &req->endpoint;
    int rc = endpoint_args_begin(req, a->endpoint);
    if (rc != TALLY_ok)
        return rc;
    e->seq = a->seq;
    e->limit = a->has_limit ? (uint32_t)a->limit : TALLY_ATTEMPTS_READ_DEFAULT;
    if (e->limit == 0)
        return net_request_fail(req, TALLY_value_out_of_range, "limit: at least 1");
    return TALLY_ok;
}

static int pack_attempt(const ledger_endpoint_attempt *a, void *ctx)
{
    net_out *o = ctx;
    net_item(o);
    net_map_begin(o);
    net_kv_u64(o, "seq", a->seq);
    net_kv_u64(o, "attempt", a->attempt);
    net_kv_i64(o, "time_ms", a->time_ms);
    net_kv_u64(o, "status", a->status);
    net_kv_u64(o, "latency_ms", a->latency_ms);
    net_kv_str(o, "error", a->error.ptr, a->error.len);
    net_kv_str(o, "response", a->response.ptr, a->response.len);
    net_map_end(o);
    return net_out_ok(o) ? 0 : 1;
}

void net_read_endpoint_attempts(net_out *o, store_txn *t, const net_request *req, int64_t now_ms)
{
    (void)now_ms;
    const net_endpoint_args *e = &req->endpoint;
    net_reply_open(o, TALLY_ok);
    net_kv_str(o, "endpoint", e->name.ptr, e->name.len);
    net_key(o, "attempts");
    net_array_begin(o);
    int rc = ledger_endpoint_attempts_each(t, e->name, e->seq, e->limit, pack_attempt, o);
    net_array_end(o);
    net_map_end(o);
    if (rc != TALLY_ok) {
        net_out_discard(o);
        if (net_out_begin(o) == 0)
            net_reply_error(o, rc, "the attempt log could not be read");
    }
}
