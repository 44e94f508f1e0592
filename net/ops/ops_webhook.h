/*
 * ops_webhook.h — the webhook_receive request: a verified webhook delivery
 * (net/http/webhooks.c) as a write the writer applies and the cluster's
 * command stream carries (docs/CLUSTER.md, "Webhooks"). It is no op of the
 * table: a client cannot send it (the wire's decoder answers unknown_op);
 * only the webhook intake makes one, after it checked the signature, and
 * a cluster node decodes one from a message of the stream.
 *
 * The request is one msgpack map, the same on the receiving node and in
 * the stream: {op: "webhook_receive", consumer: "webhook:<source>",
 * key: <event id>, source, event_id, event_type (str or nil),
 * signed_at_s (int), body (bin)}. Internal to net/.
 */
#ifndef TALLY_NET_OPS_WEBHOOK_H
#define TALLY_NET_OPS_WEBHOOK_H

#include "ledger/command.h"
#include "net/ops/protocol.h"

#include <msgpack.h>

/* The row the writer applies (net_apply_writes) and whose reply a cluster
 * node digests (net_reply_writes). */
extern const net_op net_webhook_op;

/* Pack the delivery w for consumer into sb (initialised by the caller).
 * 0, or -1 when packing failed (out of memory). */
int net_webhook_request_pack(msgpack_sbuffer *sb, tally_str consumer, const ledger_webhook *w);

/* Decode bytes (what net_webhook_request_pack made) into req: its op
 * net_webhook_op, one write whose strings point into bytes, which must
 * outlive req (until net_request_reset). TALLY_ok, or
 * TALLY_malformed_request (also in req->error). */
int net_webhook_request_decode(net_request *req, const void *bytes, size_t len);

/* A request of the command stream into req: an op of the table
 * (net_request_decode) or a webhook_receive. The same return codes. */
int net_request_decode_stream(net_request *req, const void *bytes, size_t len);

#endif
