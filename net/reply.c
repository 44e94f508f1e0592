/*
 * reply.c — packing replies for errors, writes and reads.
 *
 * Every reply is a msgpack map starting with "v" and "code". Reads run in a
 * read-only transaction and never wait for the writer.
 */
#include "net/reply.h"

#include "common/error.h"
#include "common/msgpack_safe.h"
#include "ledger/retention.h"
#include "log/log.h"
#include "net/subscription.h"

#include <string.h>

int net_reply_head(msgpack_packer *pk, size_t entries, int code)
{
    return msgpack_pack_map(pk, entries) || msgpack_safe_pack_cstr(pk, "v") ||
           msgpack_pack_uint32(pk, TALLY_PROTOCOL_VERSION) ||
           msgpack_safe_pack_cstr(pk, "code") || msgpack_safe_pack_cstr(pk, tally_strerror(code));
}

int net_reply_error(msgpack_packer *pk, int code, const char *detail)
{
    return net_reply_head(pk, 3, code) || msgpack_safe_pack_cstr(pk, "message") ||
           msgpack_safe_pack_cstr(pk, detail ? detail : "");
}

int net_pack_account(msgpack_packer *pk, const ledger_account *a)
{
    return ledger_account_pack(pk, a);
}

/* Fields of one write result (without v): code, replayed, seq, events, key
 * and for chains codes + failed_index. */
static int pack_result_fields(msgpack_packer *pk, const ledger_request *w,
                              const ledger_outcome *o, int fault)
{
    int code = fault ? fault : o->code;
    bool ok_events = !fault && o->event_count > 0;
    bool chain = w->command.kind == LEDGER_CHAIN && !fault && o->stored;
    int bad = msgpack_safe_pack_cstr(pk, "code") || msgpack_safe_pack_cstr(pk, tally_strerror(code)) ||
              msgpack_safe_pack_cstr(pk, "replayed") ||
              (!fault && o->replayed ? msgpack_pack_true(pk) : msgpack_pack_false(pk)) ||
              msgpack_safe_pack_cstr(pk, "seq") ||
              (ok_events ? msgpack_pack_uint64(pk, o->first_seq) : msgpack_pack_nil(pk)) ||
              msgpack_safe_pack_cstr(pk, "events") ||
              msgpack_pack_uint32(pk, ok_events ? o->event_count : 0) ||
              msgpack_safe_pack_cstr(pk, "key") || msgpack_safe_pack_str(pk, w->key);
    if (bad || !chain)
        return bad;
    bad = msgpack_safe_pack_cstr(pk, "codes") || msgpack_pack_array(pk, o->chain_count);
    for (uint32_t i = 0; !bad && i < o->chain_count; i++)
        bad = msgpack_safe_pack_cstr(pk, tally_strerror(o->chain_codes[i]));
    return bad || msgpack_safe_pack_cstr(pk, "failed_index") ||
           (o->code != TALLY_ok ? msgpack_pack_uint32(pk, o->failed_index) : msgpack_pack_nil(pk));
}

static size_t result_field_count(const ledger_request *w, const ledger_outcome *o, int fault)
{
    return 5 + (w->command.kind == LEDGER_CHAIN && !fault && o->stored ? 2 : 0);
}

int net_reply_write(msgpack_packer *pk, const net_request *req, const ledger_outcome *outcomes,
                    const int *faults)
{
    if (req->op->id != NET_OP_BATCH) {
        const ledger_request *w = &req->writes[0];
        size_t n = 1 + result_field_count(w, &outcomes[0], faults[0]);
        return msgpack_pack_map(pk, n) || msgpack_safe_pack_cstr(pk, "v") ||
               msgpack_pack_uint32(pk, TALLY_PROTOCOL_VERSION) ||
               pack_result_fields(pk, w, &outcomes[0], faults[0]);
    }
    int bad = net_reply_head(pk, 3, TALLY_ok) || msgpack_safe_pack_cstr(pk, "results") ||
              msgpack_pack_array(pk, req->write_count);
    for (uint32_t i = 0; !bad && i < req->write_count; i++)
        bad = msgpack_pack_map(pk, result_field_count(&req->writes[i], &outcomes[i], faults[i])) ||
              pack_result_fields(pk, &req->writes[i], &outcomes[i], faults[i]);
    return bad;
}

/* ---- reads ---- */

static int reply_not_found(msgpack_packer *pk, int rc)
{
    return net_reply_error(pk, rc, rc == TALLY_not_found ? "no such entity" : "read failed");
}

static int read_account(msgpack_packer *pk, store_txn *t, const net_request *req)
{
    ledger_account a;
    int rc = ledger_account_get(t, req->read.account_id, &a);
    if (rc != TALLY_ok)
        return reply_not_found(pk, rc);
    return net_reply_head(pk, 3, TALLY_ok) || msgpack_safe_pack_cstr(pk, "account") ||
           net_pack_account(pk, &a);
}

static int read_transfer(msgpack_packer *pk, store_txn *t, const net_request *req)
{
    ledger_transfer_record r;
    int rc = ledger_transfer_get(t, &req->read.transfer_id, &r);
    if (rc != TALLY_ok)
        return reply_not_found(pk, rc);
    return net_reply_head(pk, 3, TALLY_ok) || msgpack_safe_pack_cstr(pk, "transfer") ||
           ledger_transfer_pack(pk, &r);
}

static int pack_entitlement_at(msgpack_packer *pk, const ledger_entitlement *e, int64_t now_ms)
{
    ledger_entitlement view = *e;
    view.state = ledger_entitlement_state_at(e, now_ms);
    return ledger_entitlement_pack(pk, &view);
}

static int read_entitlement(msgpack_packer *pk, store_txn *t, const net_request *req,
                            int64_t now_ms)
{
    if (req->read.subject.len == 0)
        return net_reply_error(pk, TALLY_subject_must_not_be_empty, "subject");
    if (req->read.feature.len == 0)
        return net_reply_error(pk, TALLY_feature_must_not_be_empty, "feature");
    ledger_entitlement e;
    int rc = ledger_entitlement_get(t, req->read.subject, req->read.feature, &e);
    if (rc != TALLY_ok)
        return reply_not_found(pk, rc);
    return net_reply_head(pk, 3, TALLY_ok) || msgpack_safe_pack_cstr(pk, "entitlement") ||
           pack_entitlement_at(pk, &e, now_ms);
}

typedef struct list_ctx {
    msgpack_packer *pk;
    int64_t now_ms;
    uint32_t count;
    bool counting;
    int bad;
} list_ctx;

static int list_one(const ledger_entitlement *e, void *ctx)
{
    list_ctx *l = ctx;
    l->count++;
    if (!l->counting)
        l->bad = l->bad || pack_entitlement_at(l->pk, e, l->now_ms);
    return 0;
}

static int read_entitlement_list(msgpack_packer *pk, store_txn *t, const net_request *req,
                                 int64_t now_ms)
{
    if (req->read.subject.len == 0)
        return net_reply_error(pk, TALLY_subject_must_not_be_empty, "subject");
    /* Count first: a msgpack array header needs its size. Same snapshot. */
    list_ctx l = {.pk = pk, .now_ms = now_ms, .counting = true};
    int rc = ledger_entitlement_list(t, req->read.subject, list_one, &l);
    if (rc != TALLY_ok)
        return reply_not_found(pk, rc);
    if (net_reply_head(pk, 3, TALLY_ok) || msgpack_safe_pack_cstr(pk, "entitlements") ||
        msgpack_pack_array(pk, l.count))
        return -1;
    l.counting = false;
    rc = ledger_entitlement_list(t, req->read.subject, list_one, &l);
    return rc != TALLY_ok || l.bad;
}

/* One history entry: the event's seq, type, time, transfer and this
 * account as it was right after the event. */
static int pack_history_entry(msgpack_packer *pk, store_txn *t, uint64_t account_id,
                              uint64_t seq)
{
    uint8_t key[8];
    log_seq_key(seq, key);
    MDB_val v;
    if (store_get(t, STORE_DB_LOG, key, 8, &v) != TALLY_ok)
        return -1;
    msgpack_unpacked up;
    msgpack_unpacked_init(&up);
    log_event ev;
    int bad = log_event_decode(v.mv_data, v.mv_size, &up, &ev) != TALLY_ok;
    if (!bad) {
        const msgpack_object *dr = msgpack_safe_map_get(ev.body, "debit_account");
        uint64_t dr_id = 0;
        msgpack_safe_get_u64(msgpack_safe_map_get(dr, "id"), &dr_id);
        const char *side = dr_id == account_id ? "debit_account" : "credit_account";
        const msgpack_object *acc = msgpack_safe_map_get(ev.body, side);
        const msgpack_object *tr = msgpack_safe_map_get(ev.body, "transfer");
        bad = !acc || !tr || msgpack_pack_map(pk, 5) || msgpack_safe_pack_cstr(pk, "seq") ||
              msgpack_pack_uint64(pk, seq) || msgpack_safe_pack_cstr(pk, "type") ||
              msgpack_safe_pack_str(pk, ev.type) || msgpack_safe_pack_cstr(pk, "time_ms") ||
              msgpack_pack_int64(pk, ev.time_ms) || msgpack_safe_pack_cstr(pk, "transfer") ||
              msgpack_pack_object(pk, *tr) || msgpack_safe_pack_cstr(pk, "account") ||
              msgpack_pack_object(pk, *acc);
    }
    msgpack_unpacked_destroy(&up);
    return bad;
}

/* Collect up to limit seqs of the account's history after/before cursor. */
static int history_seqs(store_txn *t, const net_read *r, uint64_t *seqs, uint32_t *count)
{
    *count = 0;
    if (!r->reverse && r->after_seq == UINT64_MAX)
        return TALLY_ok; /* nothing after the largest seq (after_seq + 1 would wrap to 0) */
    MDB_cursor *cur;
    int rc = store_cursor_open(t, STORE_DB_HISTORY, &cur);
    if (rc != TALLY_ok)
        return rc;
    uint8_t key[16];
    uint64_t start = r->reverse ? (r->after_seq ? r->after_seq : UINT64_MAX) : r->after_seq + 1;
    ledger_history_key(r->account_id, start, key);
    MDB_val k = {16, key}, v;
    int mrc = mdb_cursor_get(cur, &k, &v, MDB_SET_RANGE);
    if (r->reverse) /* step back to the last entry below the cursor */
        mrc = mrc == MDB_SUCCESS ? mdb_cursor_get(cur, &k, &v, MDB_PREV)
                                 : mdb_cursor_get(cur, &k, &v, MDB_LAST);
    while (mrc == MDB_SUCCESS && *count < r->limit && k.mv_size == 16 &&
           get_u64_be(k.mv_data) == r->account_id) {
        uint64_t seq = get_u64_be((const uint8_t *)k.mv_data + 8);
        if (r->reverse && r->after_seq && seq >= r->after_seq)
            break;
        seqs[(*count)++] = seq;
        mrc = mdb_cursor_get(cur, &k, &v, r->reverse ? MDB_PREV : MDB_NEXT);
    }
    mdb_cursor_close(cur);
    return mrc == MDB_SUCCESS || mrc == MDB_NOTFOUND ? TALLY_ok : store_translate(mrc);
}

static int read_history(msgpack_packer *pk, store_txn *t, const net_request *req)
{
    ledger_account a;
    int rc = ledger_account_get(t, req->read.account_id, &a);
    if (rc != TALLY_ok)
        return reply_not_found(pk, rc);
    static _Thread_local uint64_t seqs[TALLY_HISTORY_ENTRIES_MAX];
    uint32_t n;
    rc = history_seqs(t, &req->read, seqs, &n);
    if (rc != TALLY_ok)
        return reply_not_found(pk, rc);
    bool full = n == req->read.limit && n > 0;
    int bad = net_reply_head(pk, 4, TALLY_ok) || msgpack_safe_pack_cstr(pk, "entries") ||
              msgpack_pack_array(pk, n);
    for (uint32_t i = 0; !bad && i < n; i++)
        bad = pack_history_entry(pk, t, req->read.account_id, seqs[i]);
    return bad || msgpack_safe_pack_cstr(pk, "next") ||
           (full ? msgpack_pack_uint64(pk, seqs[n - 1]) : msgpack_pack_nil(pk));
}

typedef struct log_pack_ctx {
    msgpack_packer *pk;
    int bad;
} log_pack_ctx;

static int pack_event_bin(uint64_t seq, const void *bytes, size_t len, void *ctx)
{
    (void)seq;
    log_pack_ctx *l = ctx;
    l->bad = msgpack_safe_pack_bin(l->pk, bytes, len);
    return l->bad;
}

static int read_log(msgpack_packer *pk, store_txn *t, const net_request *req)
{
    log_head head;
    int rc = log_head_get(t, &head);
    if (rc != TALLY_ok)
        return reply_not_found(pk, rc);
    uint64_t from = req->read.from_seq ? req->read.from_seq : 1;
    uint64_t first;
    rc = log_first_seq(t, &first);
    if (rc != TALLY_ok)
        return reply_not_found(pk, rc);
    if (from < first)
        from = first;
    uint64_t available = head.seq >= from ? head.seq - from + 1 : 0;
    uint32_t n = available < req->read.limit ? (uint32_t)available : req->read.limit;
    if (net_reply_head(pk, 4, TALLY_ok) || msgpack_safe_pack_cstr(pk, "head") ||
        msgpack_pack_uint64(pk, head.seq) || msgpack_safe_pack_cstr(pk, "events") ||
        msgpack_pack_array(pk, n))
        return -1;
    log_pack_ctx l = {pk, 0};
    rc = n ? log_read(t, from, n, pack_event_bin, &l) : TALLY_ok;
    return rc != TALLY_ok || l.bad;
}

static int read_stats(msgpack_packer *pk, store_txn *t, int64_t now_ms)
{
    log_head head;
    uint64_t first = 0, counts[5] = {0}, used = 0, size = 0;
    static const store_db dbs[5] = {STORE_DB_ACCOUNTS, STORE_DB_TRANSFERS, STORE_DB_ENTITLEMENTS,
                                    STORE_DB_INBOX, STORE_DB_LOG};
    static const char *names[5] = {"accounts", "transfers", "entitlements", "inbox", "events"};
    int rc = log_head_get(t, &head);
    if (rc == TALLY_ok)
        rc = log_first_seq(t, &first);
    for (int i = 0; rc == TALLY_ok && i < 5; i++)
        rc = store_count(t, dbs[i], &counts[i]);
    if (rc == TALLY_ok)
        rc = store_map_usage(t, &used, &size);
    if (rc != TALLY_ok)
        return reply_not_found(pk, rc);
    int64_t oldest_ms = 0;
    ledger_log_floor floor = {0};
    ledger_retention_last last = {0};
    rc = ledger_inbox_oldest_ms(t, &oldest_ms);
    if (rc == TALLY_ok)
        rc = ledger_log_floor_get(t, &floor);
    if (rc == TALLY_ok)
        rc = ledger_retention_last_get(t, &last);
    if (rc != TALLY_ok)
        return reply_not_found(pk, rc);
    int64_t oldest_age_s = oldest_ms && now_ms > oldest_ms ? (now_ms - oldest_ms) / 1000 : 0;
    int bad = net_reply_head(pk, 15, TALLY_ok) || msgpack_safe_pack_cstr(pk, "head_seq") ||
              msgpack_pack_uint64(pk, head.seq) || msgpack_safe_pack_cstr(pk, "first_seq") ||
              msgpack_pack_uint64(pk, first);
    for (int i = 0; !bad && i < 5; i++)
        bad = msgpack_safe_pack_cstr(pk, names[i]) || msgpack_pack_uint64(pk, counts[i]);
    return bad || msgpack_safe_pack_cstr(pk, "map_used_bytes") || msgpack_pack_uint64(pk, used) ||
           msgpack_safe_pack_cstr(pk, "map_size_bytes") || msgpack_pack_uint64(pk, size) ||
           msgpack_safe_pack_cstr(pk, "subscribers") || net_pack_subscribers(pk, t, now_ms) ||
           msgpack_safe_pack_cstr(pk, "inbox_oldest_age_s") || msgpack_pack_int64(pk, oldest_age_s) ||
           msgpack_safe_pack_cstr(pk, "log_floor") || msgpack_pack_uint64(pk, floor.seq) ||
           msgpack_safe_pack_cstr(pk, "last_sweep") || msgpack_pack_map(pk, 3) ||
           msgpack_safe_pack_cstr(pk, "time_ms") || msgpack_pack_int64(pk, last.time_ms) ||
           msgpack_safe_pack_cstr(pk, "inbox_removed") || msgpack_pack_uint32(pk, last.inbox_removed) ||
           msgpack_safe_pack_cstr(pk, "events_removed") || msgpack_pack_uint32(pk, last.events_removed);
}

int net_reply_read(msgpack_packer *pk, store_txn *t, const net_request *req, int64_t now_ms)
{
    switch (req->op->id) {
    case NET_OP_ACCOUNT_GET: return read_account(pk, t, req);
    case NET_OP_ACCOUNT_HISTORY: return read_history(pk, t, req);
    case NET_OP_TRANSFER_GET: return read_transfer(pk, t, req);
    case NET_OP_ENTITLEMENT_GET: return read_entitlement(pk, t, req, now_ms);
    case NET_OP_ENTITLEMENT_LIST: return read_entitlement_list(pk, t, req, now_ms);
    case NET_OP_LOG_READ: return read_log(pk, t, req);
    case NET_OP_STATS: return read_stats(pk, t, now_ms);
    case NET_OP_SUB_GET:
    case NET_OP_SUB_LIST:
    case NET_OP_DLQ_LIST: return net_reply_sub_read(pk, t, req, now_ms);
    default: return net_reply_error(pk, TALLY_unknown_op, "not a read op");
    }
}
