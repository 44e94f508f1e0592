/*
 * webhook.c — webhook_receive: one webhook.received event per delivery
 * (webhook.h). The event's entity is (source, provider event id), its
 * version 1 (a delivery never changes); the body is one row:
 * [source, event_id, event_type or nil, signed_at_s, body (bin)].
 */
#include "ledger/webhook.h"

#include "common/log_event.h"
#include "common/msgpack_safe.h"

static int pack_webhook_body(msgpack_packer *pk, const void *body)
{
    const ledger_webhook *w = body;
    return msgpack_pack_array(pk, 1) || msgpack_pack_array(pk, 5) ||
           msgpack_safe_pack_str(pk, w->source) || msgpack_safe_pack_str(pk, w->event_id) ||
           (w->event_type.len ? msgpack_safe_pack_str(pk, w->event_type) : msgpack_pack_nil(pk)) ||
           msgpack_pack_int64(pk, w->signed_at_s) ||
           msgpack_safe_pack_bin(pk, w->body.ptr, w->body.len);
}

int ledger_webhook_apply(ledger_ctx *ctx, const ledger_command *cmd)
{
    const ledger_webhook *w = &cmd->u.webhook;
    log_entity entity = {.kind = LOG_ENTITY_WEBHOOK, .webhook_source = w->source,
                         .webhook_event_id = w->event_id};
    return ledger_emit(ctx, LOG_EVENT_WEBHOOK_RECEIVED, &entity, 1, pack_webhook_body, w);
}
