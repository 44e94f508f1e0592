/*
 * subscription.h — the subscriber ops on the server side: run by the writer
 * (sub_create, sub_delete, sub_fetch, sub_ack, sub_nak, sub_park,
 * dlq_replay, dlq_discard) or answered as reads (sub_get, sub_list,
 * dlq_list, stats' subscribers). docs/SUBSCRIBERS.md is the contract;
 * log/subscriber.h keeps the state.
 */
#ifndef TALLY_NET_SUBSCRIPTION_H
#define TALLY_NET_SUBSCRIPTION_H

#include "net/protocol.h"

#include <msgpack.h>

/* What a subscriber write did, kept until its reply is sent. */
typedef struct net_sub_result {
    int code;              /* TALLY_ok, a refusal, or a fault */
    bool created;          /* sub_create */
    sub_state state;       /* the cursor after the op */
    uint32_t count;        /* sub_fetch: deliveries */
    sub_delivery deliveries[TALLY_SUB_FETCH_EVENTS_MAX];
    int64_t next_due_ms;   /* sub_fetch: earliest not-yet-due redelivery */
    uint32_t acked;        /* sub_ack */
    uint32_t attempt;      /* sub_nak */
    int64_t deliver_after_ms;
    uint32_t replaying;    /* dlq_replay */
} net_sub_result;

/* Writer: run req (a subscriber write) in a transaction nested in t, so a
 * refusal or fault undoes only it. res->code gets the outcome. */
void net_sub_apply(store_txn *t, const net_request *req, int64_t now_ms, net_sub_result *res);

/* After the commit: the reply to a subscriber write. fault (non-zero) means
 * the commit failed and replaces the outcome. rt is a read transaction for
 * the fetched events and the metrics. Returns 0 when packed. */
int net_reply_sub_write(msgpack_packer *pk, store_txn *rt, const net_request *req,
                        const net_sub_result *res, int fault, int64_t now_ms);

/* Reads: sub_get, sub_list, dlq_list. Returns 0 when packed. */
int net_reply_sub_read(msgpack_packer *pk, store_txn *t, const net_request *req, int64_t now_ms);

/* "subscribers": array of metrics maps (the key is packed by the caller). */
int net_pack_subscribers(msgpack_packer *pk, store_txn *t, int64_t now_ms);

/* true when a fetch found nothing and asked to wait: the server parks it
 * until head passes *watermark (UINT64_MAX: only time helps) or the wait
 * ends, then runs it again without waiting. */
bool net_sub_fetch_should_wait(const net_request *req, const net_sub_result *res,
                               uint64_t *watermark);

#endif
