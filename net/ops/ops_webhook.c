/*
 * ops_webhook.c — the webhook_receive request (ops_webhook.h): its row,
 * packed by the webhook intake and decoded from that map, on the node
 * that took the delivery and on every node that applies it from the
 * cluster's command stream.
 */
#include "net/ops/ops_webhook.h"

#include "common/error.h"
#include "common/limits.h"
#include "common/msgpack_safe.h"
#include "net/ops/ops.h"

#include <string.h>

#define OP_NAME "webhook_receive"

/* Not in the op table (net_ops), so not an op of the wire. */
const net_op net_webhook_op = {
    .id = NET_OP_COUNT, .name = OP_NAME, .kind = NET_KIND_WRITE,
    .doc = "a verified webhook delivery (net/http/webhooks.c)", .apply = net_apply_writes,
    .reply = net_reply_writes,
};

int net_webhook_request_pack(msgpack_sbuffer *sb, tally_str consumer, const ledger_webhook *w)
{
    msgpack_packer pk;
    msgpack_packer_init(&pk, sb, msgpack_sbuffer_write);
    int rc = msgpack_pack_map(&pk, 8);
    rc |= msgpack_safe_pack_cstr(&pk, "op") | msgpack_safe_pack_cstr(&pk, OP_NAME);
    rc |= msgpack_safe_pack_cstr(&pk, "consumer") | msgpack_safe_pack_str(&pk, consumer);
    rc |= msgpack_safe_pack_cstr(&pk, "key") | msgpack_safe_pack_str(&pk, w->event_id);
    rc |= msgpack_safe_pack_cstr(&pk, "source") | msgpack_safe_pack_str(&pk, w->source);
    rc |= msgpack_safe_pack_cstr(&pk, "event_id") | msgpack_safe_pack_str(&pk, w->event_id);
    rc |= msgpack_safe_pack_cstr(&pk, "event_type") |
          (w->event_type.len ? msgpack_safe_pack_str(&pk, w->event_type) : msgpack_pack_nil(&pk));
    rc |= msgpack_safe_pack_cstr(&pk, "signed_at_s") | msgpack_pack_int64(&pk, w->signed_at_s);
    rc |= msgpack_safe_pack_cstr(&pk, "body") | msgpack_safe_pack_bin(&pk, w->body.ptr, w->body.len);
    return rc == 0 ? 0 : -1;
}

static bool get_str_max(const msgpack_object *m, const char *name, size_t min, size_t max,
                        tally_str *out)
{
    return msgpack_safe_get_str(msgpack_safe_map_get(m, name), out) && out->len >= min &&
           out->len <= max;
}

/* The delivery's fields of the map m into w; false when one is missing,
 * of the wrong type or out of its bounds. */
static bool webhook_fields(const msgpack_object *m, tally_str *consumer, tally_str *key,
                           ledger_webhook *w)
{
    const msgpack_object *type = msgpack_safe_map_get(m, "event_type");
    const void *body;
    size_t body_len;
    if (!get_str_max(m, "consumer", 1, TALLY_CONSUMER_BYTES_MAX, consumer) ||
        !get_str_max(m, "key", 1, TALLY_WEBHOOK_EVENT_ID_BYTES_MAX, key) ||
        !get_str_max(m, "source", 1, TALLY_WEBHOOK_SOURCE_BYTES_MAX, &w->source) ||
        !get_str_max(m, "event_id", 1, TALLY_WEBHOOK_EVENT_ID_BYTES_MAX, &w->event_id) ||
        type == NULL ||
        !(type->type == MSGPACK_OBJECT_NIL ||
          get_str_max(m, "event_type", 1, TALLY_WEBHOOK_EVENT_TYPE_BYTES_MAX, &w->event_type)) ||
        !msgpack_safe_get_i64(msgpack_safe_map_get(m, "signed_at_s"), &w->signed_at_s) ||
        !msgpack_safe_get_bin(msgpack_safe_map_get(m, "body"), &body, &body_len) ||
        body_len > TALLY_WEBHOOK_BODY_BYTES_MAX)
        return false;
    w->body = (tally_str){body, body_len};
    return true;
}

int net_webhook_request_decode(net_request *req, const void *bytes, size_t len)
{
    net_request_reset(req);
    msgpack_unpacked_init(&req->unpacked);
    req->unpacked_live = true;
    tally_str op, consumer, key;
    ledger_webhook w = {0};
    const msgpack_object *m = &req->unpacked.data;
    if (msgpack_safe_unpack(bytes, len, TALLY_MSGPACK_DEPTH_MAX, &req->unpacked) != TALLY_ok ||
        m->type != MSGPACK_OBJECT_MAP || !msgpack_safe_get_str(msgpack_safe_map_get(m, "op"), &op) ||
        !tally_str_equal(op, tally_str_from(OP_NAME)) || !webhook_fields(m, &consumer, &key, &w))
        return net_request_fail(req, TALLY_malformed_request, "not a webhook_receive request");
    req->op = &net_webhook_op;
    req->consumer = consumer;
    req->write_count = 1;
    ledger_request *r = &req->writes[0];
    r->consumer = consumer;
    r->key = key;
    r->command.kind = LEDGER_WEBHOOK_RECEIVE;
    r->command.u.webhook = w;
    return TALLY_ok;
}

int net_request_decode_stream(net_request *req, const void *bytes, size_t len)
{
    int rc = net_request_decode(req, bytes, len);
    return rc == TALLY_unknown_op ? net_webhook_request_decode(req, bytes, len) : rc;
}
