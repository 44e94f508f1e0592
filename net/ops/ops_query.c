/*
 * ops_query.c — account_query, transfer_query and account_transfers
 * (docs/PROTOCOL.md, "Queries"): their fields into a ledger_query, and the
 * page of records (ledger/query.h) as a reply: `entries` and `next`.
 */
#include "net/ops/ops.h"

#include "common/error.h"

#include <string.h>

/* The fields every query shares. The checks the ledger would refuse with
 * invalid_argument are made here, with the field's name. */
#define QUERY_FIELDS(q, a)                                                              \
    do {                                                                                \
        (q)->code = (uint16_t)(a)->code;                                                \
        (q)->user_data.user_data_128 = (a)->user_data_128;                              \
        (q)->user_data.user_data_64 = (a)->user_data_64;                                \
        (q)->user_data.user_data_32 = (uint32_t)(a)->user_data_32;                      \
        (q)->timestamp_min_ms = (a)->timestamp_min_ms;                                  \
        (q)->timestamp_max_ms = (a)->timestamp_max_ms;                                  \
        (q)->limit = (uint32_t)((a)->has_limit ? (a)->limit : TALLY_QUERY_ENTRIES_DEFAULT); \
        (q)->reversed = (a)->reversed;                                                  \
        (q)->has_cursor = (a)->has_cursor;                                              \
        memcpy((q)->cursor, (a)->cursor.bytes, sizeof((q)->cursor));                   \
    } while (0)

int net_check_time_range(net_request *req, int64_t timestamp_min_ms, int64_t timestamp_max_ms)
{
    if (timestamp_min_ms < 0)
        return net_request_fail(req, TALLY_value_out_of_range, "timestamp_min_ms: at least 0");
    if (timestamp_max_ms < 0)
        return net_request_fail(req, TALLY_value_out_of_range, "timestamp_max_ms: at least 0");
    if (timestamp_max_ms != 0 && timestamp_min_ms > timestamp_max_ms)
        return net_request_fail(req, TALLY_value_out_of_range,
                                "timestamp_min_ms: after timestamp_max_ms");
    return TALLY_ok;
}

static int query_check(net_request *req, const ledger_query *q)
{
    if (q->limit == 0)
        return net_request_fail(req, TALLY_value_out_of_range, "limit: at least 1");
    return net_check_time_range(req, q->timestamp_min_ms, q->timestamp_max_ms);
}

int net_build_query(net_request *req, const net_args_query *a)
{
    net_build_nothing(req, a);
    ledger_query *q = &req->read.query;
    memset(q, 0, sizeof(*q));
    q->ledger = (uint32_t)a->ledger;
    QUERY_FIELDS(q, a);
    return query_check(req, q);
}

int net_build_account_transfers(net_request *req, const net_args_account_transfers *a)
{
    net_build_nothing(req, a);
    ledger_query *q = &req->read.query;
    memset(q, 0, sizeof(*q));
    QUERY_FIELDS(q, a);
    q->account_id = a->account_id;
    q->debits = a->has_debits ? a->debits : true;
    q->credits = a->has_credits ? a->credits : true;
    if (q->account_id == 0)
        return net_request_fail(req, TALLY_value_out_of_range, "account_id: not 0");
    if (!q->debits && !q->credits)
        return net_request_fail(req, TALLY_value_out_of_range,
                                "debits, credits: at least one of them true");
    return query_check(req, q);
}

static int account_one(const ledger_account *a, void *ctx)
{
    net_out *o = ctx;
    net_item(o);
    if (ledger_account_pack(&o->pk, a, false))
        net_out_fail(o); /* sticky: the reply fails as a whole */
    return 0;
}

static int transfer_one(const ledger_transfer_record *r, void *ctx)
{
    net_out *o = ctx;
    net_item(o);
    if (ledger_transfer_pack(&o->pk, r, false))
        net_out_fail(o);
    return 0;
}

/* The page's end: `next`, the cursor of the page after, or nil. */
static void reply_page_end(net_out *o, int rc, const ledger_query_page *page)
{
    if (rc != TALLY_ok) { /* nothing of the reply can stand: the error alone */
        net_out_discard(o);
        if (net_out_begin(o) == 0)
            net_reply_error(o, rc, "read failed");
        return;
    }
    net_array_end(o);
    if (page->has_next)
        net_kv_bin(o, "next", page->next, sizeof(page->next));
    else
        net_kv_nil(o, "next");
    net_map_end(o);
}

void net_read_account_query(net_out *o, store_txn *t, const net_request *req, int64_t now_ms)
{
    (void)now_ms;
    net_reply_open(o, TALLY_ok);
    net_key(o, "entries");
    net_array_begin(o);
    ledger_query_page page;
    int rc = ledger_account_query(t, &req->read.query, account_one, o, &page);
    reply_page_end(o, rc, &page);
}

void net_read_transfer_query(net_out *o, store_txn *t, const net_request *req, int64_t now_ms)
{
    (void)now_ms;
    net_reply_open(o, TALLY_ok);
    net_key(o, "entries");
    net_array_begin(o);
    ledger_query_page page;
    int rc = ledger_transfer_query(t, &req->read.query, transfer_one, o, &page);
    reply_page_end(o, rc, &page);
}
