/*
 * queries.c — account_query, transfer_query and account_transfers
 * (tally.h, "queries"): the filters as fields, the page and its cursor
 * from the reply.
 */
#include "clients/libtally/libtally_internal.h"

#include "common/limits.h"

#include <string.h>

/* The filters and the page of q, those that are set. */
static void put_query(fields *fs, const tally_query *q, size_t capacity)
{
    static const tally_uuid zero;
    if (q->code)
        put_uint(fs, "code", q->code);
    if (memcmp(q->user_data.user_data_128.bytes, zero.bytes, 16) != 0)
        put_id(fs, "user_data_128", &q->user_data.user_data_128);
    if (q->user_data.user_data_64)
        put_uint(fs, "user_data_64", q->user_data.user_data_64);
    if (q->user_data.user_data_32)
        put_uint(fs, "user_data_32", q->user_data.user_data_32);
    if (q->timestamp_min_ms)
        put_int(fs, "timestamp_min_ms", q->timestamp_min_ms);
    if (q->timestamp_max_ms)
        put_int(fs, "timestamp_max_ms", q->timestamp_max_ms);
    put_uint(fs, "limit", client_page_limit(q->limit, capacity, TALLY_QUERY_ENTRIES_DEFAULT,
                                            TALLY_QUERY_ENTRIES_MAX));
    if (q->reversed)
        put_bool(fs, "reversed", true);
    if (q->has_cursor)
        put_id(fs, "cursor", &q->cursor);
}

static int query_page(tally_client *c, const fields *fs, decode_fn decode, void *out,
                      size_t stride, size_t capacity, tally_query_page *page)
{
    memset(page, 0, sizeof(*page));
    reply r;
    int rc = client_read_exchange(c, fs, 0, &r);
    if (rc != TALLY_ok)
        return rc;
    decoder d = decoder_of(r.root);
    page->has_next = dec_present(&d, "next");
    if (page->has_next)
        dec_id(&d, "next", &page->next);
    bool ok = d.ok && client_array_decode(msgpack_safe_map_get(r.root, "entries"), decode, out,
                                          stride, capacity, &page->count);
    client_reply_free(&r);
    return ok ? TALLY_ok : TALLY_internal;
}

int tally_account_query(tally_client *c, const tally_query *q, tally_account *out,
                        size_t capacity, tally_query_page *page)
{
    if (c == NULL || q == NULL || out == NULL || capacity == 0 || page == NULL)
        return TALLY_invalid_argument;
    fields fs;
    client_fields_begin(&fs, "account_query", NULL, NULL);
    if (q->ledger)
        put_uint(&fs, "ledger", q->ledger);
    put_query(&fs, q, capacity);
    return query_page(c, &fs, client_account_decode, out, sizeof(*out), capacity, page);
}

int tally_transfer_query(tally_client *c, const tally_query *q, tally_transfer_info *out,
                         size_t capacity, tally_query_page *page)
{
    if (c == NULL || q == NULL || out == NULL || capacity == 0 || page == NULL)
        return TALLY_invalid_argument;
    fields fs;
    client_fields_begin(&fs, "transfer_query", NULL, NULL);
    if (q->ledger)
        put_uint(&fs, "ledger", q->ledger);
    put_query(&fs, q, capacity);
    return query_page(c, &fs, client_transfer_decode, out, sizeof(*out), capacity, page);
}

int tally_account_transfers(tally_client *c, uint64_t account_id, bool debits, bool credits,
                            const tally_query *q, tally_transfer_info *out, size_t capacity,
                            tally_query_page *page)
{
    if (c == NULL || q == NULL || out == NULL || capacity == 0 || page == NULL || q->ledger)
        return TALLY_invalid_argument;
    fields fs;
    client_fields_begin(&fs, "account_transfers", NULL, NULL);
    put_uint(&fs, "account_id", account_id);
    put_bool(&fs, "debits", debits);
    put_bool(&fs, "credits", credits);
    put_query(&fs, q, capacity);
    return query_page(c, &fs, client_transfer_decode, out, sizeof(*out), capacity, page);
}

/* ---- balances at a point in time ---- */

static bool balance_decode(const msgpack_object *o, void *out)
{
    tally_balance *b = out;
    decoder d = decoder_of(o);
    b->seq = dec_uint(&d, "seq", UINT64_MAX);
    b->timestamp_ms = dec_int(&d, "timestamp_ms");
    b->debits_pending = dec_int(&d, "debits_pending");
    b->debits_posted = dec_int(&d, "debits_posted");
    b->credits_pending = dec_int(&d, "credits_pending");
    b->credits_posted = dec_int(&d, "credits_posted");
    return d.ok;
}

int tally_account_balances(tally_client *c, uint64_t account_id, const tally_balances_query *q,
                           tally_balance *out, size_t capacity, tally_balances_page *page)
{
    if (c == NULL || q == NULL || out == NULL || capacity == 0 || page == NULL)
        return TALLY_invalid_argument;
    memset(page, 0, sizeof(*page));
    fields fs;
    client_fields_begin(&fs, "account_balances", NULL, NULL);
    put_uint(&fs, "account_id", account_id);
    if (q->timestamp_min_ms)
        put_int(&fs, "timestamp_min_ms", q->timestamp_min_ms);
    if (q->timestamp_max_ms)
        put_int(&fs, "timestamp_max_ms", q->timestamp_max_ms);
    if (q->seq_min)
        put_uint(&fs, "seq_min", q->seq_min);
    if (q->seq_max)
        put_uint(&fs, "seq_max", q->seq_max);
    put_uint(&fs, "limit", client_page_limit(q->limit, capacity, TALLY_HISTORY_ENTRIES_DEFAULT,
                                             TALLY_HISTORY_ENTRIES_MAX));
    if (q->reversed)
        put_bool(&fs, "reversed", true);
    if (q->after_seq)
        put_uint(&fs, "after_seq", q->after_seq);
    reply r;
    int rc = client_read_exchange(c, &fs, 0, &r);
    if (rc != TALLY_ok)
        return rc;
    decoder d = decoder_of(r.root);
    page->has_next = dec_present(&d, "next");
    if (page->has_next)
        page->next = dec_uint(&d, "next", UINT64_MAX);
    bool ok = d.ok && client_array_decode(msgpack_safe_map_get(r.root, "balances"),
                                          balance_decode, out, sizeof(*out), capacity,
                                          &page->count);
    client_reply_free(&r);
    return ok ? TALLY_ok : TALLY_internal;
}

int tally_balance_at(tally_client *c, uint64_t account_id, bool by_time, int64_t time_ms,
                     uint64_t seq, tally_balance *out)
{
    if (c == NULL || out == NULL)
        return TALLY_invalid_argument;
    memset(out, 0, sizeof(*out));
    fields fs;
    client_fields_begin(&fs, "balance_at", NULL, NULL);
    put_uint(&fs, "account_id", account_id);
    if (by_time)
        put_int(&fs, "timestamp_ms", time_ms);
    else
        put_uint(&fs, "seq", seq);
    reply r;
    int rc = client_read_exchange(c, &fs, 0, &r);
    if (rc != TALLY_ok)
        return rc;
    bool ok = balance_decode(msgpack_safe_map_get(r.root, "balance"), out);
    client_reply_free(&r);
    return ok ? TALLY_ok : TALLY_internal;
}
