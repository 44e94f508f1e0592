/*
 * context.c — what every command's application shares: appending the
 * events it causes (counted in its context) and telling faults from
 * rejections. Below account, transfer and entitlement; calls only log/.
 */
#include "ledger/context.h"

#include "common/error.h"
#include "common/limits.h"

#include <assert.h>
#include <stdbool.h>

/* Whether type is in the NONE-ended list types (no list: upkeep, any). */
static bool type_listed(const log_event_type *types, log_event_type type)
{
    if (types == NULL)
        return true;
    for (; *types != LOG_EVENT_TYPE_NONE; types++)
        if (*types == type)
            return true;
    return false;
}

int ledger_is_fault(int code) { return tally_error_class_of(code) == TALLY_CLASS_FAULT; }

int ledger_emit(ledger_ctx *ctx, log_event_type type, const log_entity *entity,
                uint64_t entity_version,
                int (*pack_body)(msgpack_packer *pk, const void *body), const void *body)
{
    assert(type_listed(ctx->op_events, type));
    if (ctx->event_count >= TALLY_COMMAND_EVENTS_MAX)
        return store_txn_fail(ctx->txn, TALLY_internal);
    log_append_args args = {
        .type = type,
        .entity = *entity,
        .entity_version = entity_version,
        .time_ms = ctx->now_ms,
        .consumer = ctx->consumer,
        .key = ctx->key,
        .correlation = ctx->correlation,
        .pack_body = pack_body,
        .body_ctx = body,
    };
    uint64_t seq;
    int rc = log_append(ctx->txn, &args, &seq);
    if (rc != TALLY_ok)
        return rc;
    if (ctx->event_count == 0)
        ctx->first_seq = seq;
    ctx->event_count++;
    return TALLY_ok;
}
