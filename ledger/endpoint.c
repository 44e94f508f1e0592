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
