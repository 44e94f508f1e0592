/*
 * ops_read.c — the read ops: their parameters from their structs of
 * checked fields (op_fields.h) and their replies, each packed from one
 * read-only snapshot that never waits for the writer.
 */
#include "net/ops/ops.h"

#include "common/error.h"
#include "common/msgpack_safe.h"
#include "ledger/endpoint.h"
#include "ledger/history.h"
#include "ledger/retention.h"
#include "log/log.h"
#include "net/ops/figures.h"

#include <openssl/evp.h>
#include <stdlib.h>
#include <string.h>

/* ---- builders ---- */

int net_build_nothing(net_request *req, const void *args)
{
    (void)args;
    memset(&req->read, 0, sizeof(req->read));
    return TALLY_ok;
}

int net_build_account_get(net_request *req, const net_args_account_get *a)
{
    net_build_nothing(req, a);
    req->read.account_id = a->id;
    return TALLY_ok;
}

int net_build_account_history(net_request *req, const net_args_account_history *a)
{
    net_build_nothing(req, a);
    net_read *r = &req->read;
    r->account_id = a->id;
    r->after_seq = a->after_seq;
    r->reverse = a->reverse;
    r->limit = (uint32_t)(a->has_limit ? a->limit : TALLY_HISTORY_ENTRIES_DEFAULT);
    return TALLY_ok;
}

/* The conventions of dlq_list: limit 1 .. max (default 100), after_*
 * exclusive (default 0). */
int net_build_account_list(net_request *req, const net_args_account_list *a)
{
    net_build_nothing(req, a);
    net_read *r = &req->read;
    r->limit = (uint32_t)(a->has_limit ? a->limit : TALLY_ACCOUNT_LIST_ENTRIES_DEFAULT);
    if (r->limit == 0)
        return net_request_fail(req, TALLY_value_out_of_range, "limit: at least 1");
    r->after_id = a->after_id;
    return TALLY_ok;
}

int net_build_transfer_get(net_request *req, const net_args_transfer_get *a)
{
    net_build_nothing(req, a);
    req->read.transfer_id = a->id;
    return TALLY_ok;
}

int net_build_entitlement_get(net_request *req, const net_args_entitlement_get *a)
{
    net_build_nothing(req, a);
    req->read.subject = a->subject;
    req->read.feature = a->feature;
    return TALLY_ok;
}

int net_build_endpoint_get(net_request *req, const net_args_endpoint_get *a)
{
    net_build_nothing(req, a);
    req->read.subject = a->endpoint;
    return TALLY_ok;
}

int net_build_entitlement_list(net_request *req, const net_args_entitlement_list *a)
{
    net_build_nothing(req, a);
    req->read.subject = a->subject;
    return TALLY_ok;
}

int net_build_log_read(net_request *req, const net_args_log_read *a)
{
    net_build_nothing(req, a);
    req->read.from_seq = a->has_from_seq ? a->from_seq : 1;
    req->read.limit = (uint32_t)(a->has_limit ? a->limit : TALLY_LOG_READ_EVENTS_DEFAULT);
    req->wait_ms = (uint32_t)a->wait_ms;
    return TALLY_ok;
}

/* ---- replies ---- */

static void reply_not_found(net_out *o, int rc)
{
    net_reply_error(o, rc, rc == TALLY_not_found ? "no such entity" : "read failed");
}

/* A read that failed after its reply was begun: nothing of the reply can
 * stand, the error goes out alone. */
static void reply_restarted_with_error(net_out *o, int rc)
{
    net_out_discard(o);
    if (net_out_begin(o) == 0)
        reply_not_found(o, rc);
}

void net_read_account(net_out *o, store_txn *t, const net_request *req, int64_t now_ms)
{
    (void)now_ms;
    ledger_account a;
    int rc = ledger_account_get(t, req->read.account_id, &a);
    if (rc != TALLY_ok)
        return reply_not_found(o, rc);
    net_reply_open(o, TALLY_ok);
    net_key(o, "account");
    if (ledger_account_pack(&o->pk, &a, false))
        net_out_fail(o);
    net_map_end(o);
}

void net_read_transfer(net_out *o, store_txn *t, const net_request *req, int64_t now_ms)
{
    (void)now_ms;
    ledger_transfer_record r;
    int rc = ledger_transfer_get(t, &req->read.transfer_id, &r);
    if (rc != TALLY_ok)
        return reply_not_found(o, rc);
    net_reply_open(o, TALLY_ok);
    net_key(o, "transfer");
    if (ledger_transfer_pack(&o->pk, &r, false))
        net_out_fail(o);
    net_map_end(o);
}

static int pack_entitlement_at(net_out *o, const ledger_entitlement *e, int64_t now_ms)
{
    ledger_entitlement view = *e;
    view.state = ledger_entitlement_state_at(e, now_ms);
    return ledger_entitlement_pack(&o->pk, &view, false) ? net_out_fail(o) : 0;
}

void net_read_entitlement(net_out *o, store_txn *t, const net_request *req, int64_t now_ms)
{
    if (req->read.subject.len == 0)
        return net_reply_error(o, TALLY_subject_must_not_be_empty, "subject");
    if (req->read.feature.len == 0)
        return net_reply_error(o, TALLY_feature_must_not_be_empty, "feature");
    ledger_entitlement e;
    int rc = ledger_entitlement_get(t, req->read.subject, req->read.feature, &e);
    if (rc != TALLY_ok)
        return reply_not_found(o, rc);
    net_reply_open(o, TALLY_ok);
    net_key(o, "entitlement");
    pack_entitlement_at(o, &e, now_ms);
    net_map_end(o);
}

/* An endpoint's state: {endpoint, state, version, changed_ms, reason}; one
 * tallyd never saw is enabled, version 0. */
/* The state of the endpoint the read names into *e, else the refusal
 * replied: TALLY_ok or that code. */
static int endpoint_read(net_out *o, store_txn *t, const net_request *req,
                         ledger_endpoint_state *e)
{
    if (!ledger_endpoint_name_valid(req->read.subject)) {
        net_reply_error(o, TALLY_invalid_endpoint_name,
                        "endpoint: 1-58 bytes of A-Z a-z 0-9 . _ -");
        return TALLY_invalid_endpoint_name;
    }
    int rc = ledger_endpoint_get(t, req->read.subject, e);
    if (rc != TALLY_ok)
        reply_not_found(o, rc);
    return rc;
}

/* "whsec_" and the base64 of a key, "" for none. */
static void secret_text(const uint8_t *key, size_t len,
                        char out[TALLY_ENDPOINT_SECRET_TEXT_BYTES_MAX])
{
    _Static_assert(6 + 4 * ((TALLY_ENDPOINT_SECRET_BYTES_MAX + 2) / 3) + 1 <=
                       TALLY_ENDPOINT_SECRET_TEXT_BYTES_MAX,
                   "a key's text fits");
    out[0] = '\0';
    if (len == 0)
        return;
    memcpy(out, "whsec_", 6);
    EVP_EncodeBlock((unsigned char *)out + 6, key, (int)len);
}

void net_read_endpoint_secret(net_out *o, store_txn *t, const net_request *req, int64_t now_ms)
{
    (void)now_ms;
    ledger_endpoint_state e;
    if (endpoint_read(o, t, req, &e) != TALLY_ok)
        return;
    char text[TALLY_ENDPOINT_SECRET_TEXT_BYTES_MAX];
    net_reply_open(o, TALLY_ok);
    net_kv_str(o, "endpoint", req->read.subject.ptr, req->read.subject.len);
    net_kv_u64(o, "version", e.version);
    secret_text(e.secret, e.secret_len, text);
    net_kv_cstr(o, "secret", text);
    secret_text(e.previous, e.previous_len, text);
    net_kv_cstr(o, "previous_secret", text);
    net_kv_i64(o, "previous_until_ms", e.previous_until_ms);
    net_map_end(o);
    memset(&e, 0, sizeof(e));
}

void net_read_endpoint(net_out *o, store_txn *t, const net_request *req, int64_t now_ms)
{
    (void)now_ms;
    ledger_endpoint_state e;
    if (endpoint_read(o, t, req, &e) != TALLY_ok)
        return;
    net_reply_open(o, TALLY_ok);
    net_kv_str(o, "endpoint", req->read.subject.ptr, req->read.subject.len);
    net_kv_cstr(o, "state", e.disabled ? "disabled" : "enabled");
    net_kv_u64(o, "version", e.version);
    net_kv_i64(o, "changed_ms", e.changed_ms);
    net_kv_cstr(o, "reason", e.reason);
    net_kv_i64(o, "previous_secret_until_ms", e.previous_until_ms);
    net_kv_i64(o, "recover_since_ms", e.recover_since_ms);
    net_kv_u64(o, "recover_version", e.recover_version);
    net_map_end(o);
}

/* endpoint_list: the endpoints defined in tallyd, kept while the walk
 * runs (a failed walk replies its error, nothing else). */
typedef struct defined_endpoints {
    char names[TALLY_ENDPOINTS_DEFINED_MAX][TALLY_ENDPOINT_NAME_BYTES_MAX + 1];
    ledger_endpoint_state states[TALLY_ENDPOINTS_DEFINED_MAX];
    size_t count;
} defined_endpoints;

static int keep_defined(tally_str name, const ledger_endpoint_state *s, void *ctx)
{
    defined_endpoints *d = ctx;
    if (!s->defined || d->count == TALLY_ENDPOINTS_DEFINED_MAX)
        return 0; /* more than the limit cannot be created */
    memcpy(d->names[d->count], name.ptr, name.len);
    d->names[d->count][name.len] = '\0';
    d->states[d->count++] = *s;
    return 0;
}

static void pack_defined(net_out *o, const char *name, const ledger_endpoint_state *e)
{
    net_map_begin(o);
    net_kv_cstr(o, "endpoint", name);
    net_kv_cstr(o, "state", e->disabled ? "disabled" : "enabled");
    net_kv_u64(o, "version", e->version);
    net_kv_i64(o, "changed_ms", e->changed_ms);
    net_kv_cstr(o, "url", e->url);
    net_kv_cstr(o, "types", e->types);
    net_kv_cstr(o, "retry_schedule", e->schedule);
    net_kv_u64(o, "connect_timeout_ms", e->connect_timeout_ms);
    net_kv_u64(o, "timeout_ms", e->timeout_ms);
    net_kv_cstr(o, "backfill", e->backfill);
    net_map_end(o);
}

void net_read_endpoint_list(net_out *o, store_txn *t, const net_request *req, int64_t now_ms)
{
    (void)req, (void)now_ms;
    defined_endpoints *d = calloc(1, sizeof(*d));
    if (d == NULL) {
        net_reply_error(o, TALLY_out_of_memory, "");
        return;
    }
    int rc = ledger_endpoint_each(t, keep_defined, d);
    if (rc != TALLY_ok) {
        reply_not_found(o, rc);
        free(d);
        return;
    }
    net_reply_open(o, TALLY_ok);
    net_key(o, "endpoints");
    net_array_begin(o);
    for (size_t i = 0; i < d->count; i++) {
        net_item(o);
        pack_defined(o, d->names[i], &d->states[i]);
    }
    net_array_end(o);
    net_map_end(o);
    memset(d, 0, sizeof(*d)); /* secrets */
    free(d);
}

typedef struct list_ctx {
    net_out *o;
    int64_t now_ms;
} list_ctx;

static int list_one(const ledger_entitlement *e, void *ctx)
{
    list_ctx *l = ctx;
    net_item(l->o);
    pack_entitlement_at(l->o, e, l->now_ms);
    return 0;
}

void net_read_entitlement_list(net_out *o, store_txn *t, const net_request *req, int64_t now_ms)
{
    if (req->read.subject.len == 0)
        return net_reply_error(o, TALLY_subject_must_not_be_empty, "subject");
    net_reply_open(o, TALLY_ok);
    net_key(o, "entitlements");
    net_array_begin(o);
    list_ctx l = {o, now_ms};
    int rc = ledger_entitlement_list(t, req->read.subject, list_one, &l);
    if (rc != TALLY_ok)
        return reply_restarted_with_error(o, rc);
    net_array_end(o);
    net_map_end(o);
}

/* One history entry: the event's seq, type, time, transfer and this
 * account as it was right after the event. */
static void pack_history_entry(net_out *o, store_txn *t, uint64_t account_id, uint64_t seq)
{
    msgpack_unpacked up;
    msgpack_unpacked_init(&up);
    log_event ev;
    if (log_event_load(t, seq, &up, &ev) != TALLY_ok) {
        net_out_fail(o);
        msgpack_unpacked_destroy(&up);
        return;
    }
    /* The body's objects, of either event format, go out as maps. */
    ledger_transfer_record tr;
    ledger_account acc;
    bool debit_side = ledger_account_unpack(log_event_part(&ev, LOG_PART_DEBIT_ACCOUNT), &acc) ==
                          TALLY_ok &&
                      acc.id == account_id;
    if (ledger_transfer_unpack(log_event_part(&ev, LOG_PART_TRANSFER), &tr) != TALLY_ok ||
        (!debit_side &&
         ledger_account_unpack(log_event_part(&ev, LOG_PART_CREDIT_ACCOUNT), &acc) != TALLY_ok)) {
        net_out_fail(o);
    } else {
        net_map_begin(o);
        net_kv_u64(o, "seq", seq);
        net_kv_str(o, "type", ev.type.ptr, ev.type.len);
        net_kv_i64(o, "time_ms", ev.time_ms);
        net_key(o, "transfer");
        if (ledger_transfer_pack(&o->pk, &tr, false))
            net_out_fail(o);
        net_key(o, "account");
        if (ledger_account_pack(&o->pk, &acc, false))
            net_out_fail(o);
        net_map_end(o);
    }
    msgpack_unpacked_destroy(&up);
}

void net_read_history(net_out *o, store_txn *t, const net_request *req, int64_t now_ms)
{
    (void)now_ms;
    ledger_account a;
    int rc = ledger_account_get(t, req->read.account_id, &a);
    if (rc != TALLY_ok)
        return reply_not_found(o, rc);
    static _Thread_local uint64_t seqs[TALLY_HISTORY_ENTRIES_MAX];
    uint32_t n;
    const net_read *r = &req->read;
    rc = ledger_history_seqs(t, r->account_id, r->reverse, r->after_seq, seqs, r->limit, &n);
    if (rc != TALLY_ok)
        return reply_not_found(o, rc);
    bool full = n == req->read.limit && n > 0;
    net_reply_open(o, TALLY_ok);
    net_key(o, "entries");
    msgpack_pack_array(&o->pk, n);
    for (uint32_t i = 0; i < n && net_out_ok(o); i++)
        pack_history_entry(o, t, req->read.account_id, seqs[i]);
    if (full)
        net_kv_u64(o, "next", seqs[n - 1]);
    else
        net_kv_nil(o, "next");
    net_map_end(o);
}

static int account_list_one(const ledger_account *a, void *ctx)
{
    net_out *o = ctx;
    net_item(o);
    if (ledger_account_pack(&o->pk, a, false))
        net_out_fail(o); /* sticky: the reply fails as a whole */
    return 0;
}

void net_read_account_list(net_out *o, store_txn *t, const net_request *req, int64_t now_ms)
{
    (void)now_ms;
    net_reply_open(o, TALLY_ok);
    net_key(o, "entries");
    net_array_begin(o);
    uint64_t next = 0;
    int rc = ledger_account_list(t, req->read.after_id, req->read.limit, account_list_one, o,
                                 &next);
    if (rc != TALLY_ok)
        return reply_restarted_with_error(o, rc);
    net_array_end(o);
    if (next)
        net_kv_u64(o, "next", next);
    else
        net_kv_nil(o, "next");
    net_map_end(o);
}

static int pack_event_bin(uint64_t seq, const void *bytes, size_t len, void *ctx)
{
    (void)seq;
    net_out *o = ctx;
    return msgpack_safe_pack_bin(&o->pk, bytes, len) ? net_out_fail(o) : 0;
}

bool net_log_read_waits(const net_request *req, uint64_t *watermark)
{
    if (req->wait_ms == 0)
        return false;
    uint64_t from = req->read.from_seq ? req->read.from_seq : 1;
    *watermark = from - 1; /* ready once the head reaches from_seq */
    return true;
}

void net_read_log(net_out *o, store_txn *t, const net_request *req, int64_t now_ms)
{
    (void)now_ms;
    log_head head;
    ledger_log_floor floor = {0};
    int rc = log_head_get(t, &head);
    uint64_t first = 0;
    if (rc == TALLY_ok)
        rc = log_first_seq(t, &first);
    if (rc == TALLY_ok)
        rc = ledger_log_floor_get(t, &floor);
    if (rc != TALLY_ok)
        return reply_not_found(o, rc);
    uint64_t from = req->read.from_seq ? req->read.from_seq : 1;
    if (from < first)
        from = first;
    /* At most limit events and TALLY_LOG_READ_BYTES_MAX of them, at least
     * one: the reader goes on from the last seq + 1. */
    uint64_t n = 0;
    size_t bytes;
    if (head.seq >= from)
        rc = log_page_measure(t, from, req->read.limit, TALLY_LOG_READ_BYTES_MAX, &n, &bytes);
    if (rc != TALLY_ok)
        return reply_not_found(o, rc);
    net_reply_open(o, TALLY_ok);
    net_kv_u64(o, "head", head.seq);
    net_key(o, "events");
    msgpack_pack_array(&o->pk, (size_t)n);
    if (n && log_read(t, from, n, pack_event_bin, o) != TALLY_ok)
        net_out_fail(o);
    /* the retention anchor: the last removed event's seq and hash */
    net_kv_u64(o, "log_floor", floor.seq);
    net_key(o, "log_floor_hash");
    msgpack_safe_pack_bin(&o->pk, floor.hash, sizeof(floor.hash));
    net_map_end(o);
}

void net_read_stats(net_out *o, store_txn *t, const net_request *req, int64_t now_ms)
{
    (void)req;
    net_store_figures f;
    ledger_retention_last last = {0};
    int rc = net_store_figures_get(t, &f);
    if (rc == TALLY_ok)
        rc = ledger_retention_last_get(t, &last);
    if (rc != TALLY_ok)
        return reply_not_found(o, rc);
    int64_t oldest_ms = f.inbox_oldest_ms;
    int64_t oldest_age_s = oldest_ms && now_ms > oldest_ms ? (now_ms - oldest_ms) / 1000 : 0;
    net_reply_open(o, TALLY_ok);
    net_kv_u64(o, "head_seq", f.head.seq);
    net_kv_u64(o, "first_seq", f.first_seq);
    net_kv_u64(o, "accounts", f.accounts);
    net_kv_u64(o, "transfers", f.transfers);
    net_kv_u64(o, "entitlements", f.entitlements);
    net_kv_u64(o, "inbox", f.inbox);
    net_kv_u64(o, "events", f.events);
    net_kv_u64(o, "map_used_bytes", f.map_used_bytes);
    net_kv_u64(o, "map_size_bytes", f.map_size_bytes);
    net_kv_u64(o, "map_max_bytes", f.map_max_bytes); /* what it may grow to */
    net_key(o, "subscribers");
    net_pack_subscribers(o, t, now_ms);
    net_kv_i64(o, "inbox_oldest_age_s", oldest_age_s);
    net_kv_u64(o, "log_floor", f.log_floor);
    net_key(o, "log_floor_hash");
    msgpack_safe_pack_bin(&o->pk, f.log_floor_hash, sizeof(f.log_floor_hash));
    net_key(o, "last_sweep");
    net_map_begin(o);
    net_kv_i64(o, "time_ms", last.time_ms);
    net_kv_u64(o, "inbox_removed", last.inbox_removed);
    net_kv_u64(o, "events_removed", last.events_removed);
    net_map_end(o);
    net_map_end(o);
}
