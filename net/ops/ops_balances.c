/*
 * ops_balances.c — account_balances and balance_at (docs/PROTOCOL.md,
 * "Balances at a point in time"): their fields into a ledger_balances_query
 * or a point, and the balances (ledger/balances.h) as a reply.
 */
#include "net/ops/ops.h"

#include "common/error.h"

#include <string.h>

int net_build_account_balances(net_request *req, const net_args_account_balances *a)
{
    net_build_nothing(req, a);
    ledger_balances_query *q = &req->read.balances;
    *q = (ledger_balances_query){
        .account_id = a->account_id,
        .timestamp_min_ms = a->timestamp_min_ms,
        .timestamp_max_ms = a->timestamp_max_ms,
        .seq_min = a->seq_min,
        .seq_max = a->seq_max,
        .after_seq = a->after_seq,
        .reversed = a->reversed,
        .limit = (uint32_t)(a->has_limit ? a->limit : TALLY_HISTORY_ENTRIES_DEFAULT)};
    if (q->limit == 0)
        return net_request_fail(req, TALLY_value_out_of_range, "limit: at least 1");
    if (q->seq_max != 0 && q->seq_min > q->seq_max)
        return net_request_fail(req, TALLY_value_out_of_range, "seq_min: after seq_max");
    return net_check_time_range(req, q->timestamp_min_ms, q->timestamp_max_ms);
}

int net_build_balance_at(net_request *req, const net_args_balance_at *a)
{
    net_build_nothing(req, a);
    net_read *r = &req->read;
    r->account_id = a->account_id;
    if (a->has_timestamp_ms == a->has_seq)
        return net_request_fail(req, a->has_seq ? TALLY_value_out_of_range : TALLY_missing_field,
                                "timestamp_ms or seq: one of them");
    if (a->has_timestamp_ms && a->timestamp_ms < 0)
        return net_request_fail(req, TALLY_value_out_of_range, "timestamp_ms: at least 0");
    r->at_time = a->has_timestamp_ms;
    r->at_ms = a->timestamp_ms;
    r->at_seq = a->seq;
    return TALLY_ok;
}

static void pack_balance(net_out *o, const ledger_balance *b)
{
    net_map_begin(o);
    net_kv_u64(o, "seq", b->seq);
    net_kv_i64(o, "timestamp_ms", b->timestamp_ms);
    net_kv_i64(o, "debits_pending", b->debits_pending);
    net_kv_i64(o, "debits_posted", b->debits_posted);
    net_kv_i64(o, "credits_pending", b->credits_pending);
    net_kv_i64(o, "credits_posted", b->credits_posted);
    net_map_end(o);
}

static void reply_failed(net_out *o, int rc)
{
    net_reply_error(o, rc, rc == TALLY_not_found ? "no such entity" : "read failed");
}

void net_read_account_balances(net_out *o, store_txn *t, const net_request *req, int64_t now_ms)
{
    (void)now_ms;
    static _Thread_local ledger_balance page[TALLY_HISTORY_ENTRIES_MAX];
    const ledger_balances_query *q = &req->read.balances;
    ledger_account a;
    int rc = ledger_account_get(t, q->account_id, &a);
    uint32_t n = 0;
    uint64_t next = 0;
    if (rc == TALLY_ok)
        rc = ledger_balances_page(t, q, page, &n, &next);
    if (rc != TALLY_ok)
        return reply_failed(o, rc);
    net_reply_open(o, TALLY_ok);
    net_key(o, "balances");
    msgpack_pack_array(&o->pk, n);
    for (uint32_t i = 0; i < n && net_out_ok(o); i++)
        pack_balance(o, &page[i]);
    if (next)
        net_kv_u64(o, "next", next);
    else
        net_kv_nil(o, "next");
    net_map_end(o);
}

void net_read_balance_at(net_out *o, store_txn *t, const net_request *req, int64_t now_ms)
{
    (void)now_ms;
    const net_read *r = &req->read;
    ledger_account a;
    ledger_balance b;
    int rc = ledger_account_get(t, r->account_id, &a);
    if (rc == TALLY_ok)
        rc = ledger_balance_at(t, r->account_id, r->at_time, r->at_ms, r->at_seq, &b);
    if (rc != TALLY_ok)
        return reply_failed(o, rc);
    net_reply_open(o, TALLY_ok);
    net_key(o, "balance");
    pack_balance(o, &b);
    net_map_end(o);
}
