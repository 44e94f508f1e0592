/*
 * ops_write.c — the ledger write ops: their commands from their structs
 * of checked fields (op_fields.h), the writer's apply (ledger_apply for
 * each command) and the reply.
 */
#include "net/ops/ops.h"

#include "common/error.h"
#include "common/msgpack_safe.h"
#include "common/logging.h"

#include <string.h>

void net_command_account_open(const net_args_account_open *a, ledger_command *c)
{
    memset(c, 0, sizeof(*c));
    c->kind = LEDGER_ACCOUNT_OPEN;
    c->u.account_open = (ledger_account_open){.id = a->id, .ledger = (uint32_t)a->ledger,
                                              .code = (uint16_t)a->code,
                                              .flags = (uint16_t)a->flags,
                                              .timestamp_ms = a->timestamp_ms};
    c->u.account_open.user_data = (ledger_user_data){
        .user_data_128 = a->user_data_128, .user_data_64 = a->user_data_64,
        .user_data_32 = (uint32_t)a->user_data_32};
}

void net_command_transfer(const net_args_transfer *a, ledger_command *c)
{
    memset(c, 0, sizeof(*c));
    c->kind = LEDGER_TRANSFER;
    ledger_transfer *t = &c->u.transfer;
    t->id = a->id;
    t->debit_account_id = a->debit_account_id;
    t->credit_account_id = a->credit_account_id;
    t->amount = a->amount;
    t->ledger = (uint32_t)a->ledger;
    t->code = (uint16_t)a->code;
    t->flags = (uint16_t)a->flags;
    t->timeout_s = (uint32_t)a->timeout_s;
    t->timestamp_ms = a->timestamp_ms;
    t->user_data = (ledger_user_data){.user_data_128 = a->user_data_128,
                                      .user_data_64 = a->user_data_64,
                                      .user_data_32 = (uint32_t)a->user_data_32};
}

void net_command_transfer_reverse(const net_args_transfer_reverse *a, ledger_command *c)
{
    memset(c, 0, sizeof(*c));
    c->kind = LEDGER_REVERSE;
    ledger_reverse *r = &c->u.reverse;
    r->id = a->id;
    r->reverses = a->reverses;
    r->amount = a->amount;
    r->amount_given = a->has_amount;
    r->code = (uint16_t)a->code;
    r->user_data = (ledger_user_data){.user_data_128 = a->user_data_128,
                                      .user_data_64 = a->user_data_64,
                                      .user_data_32 = (uint32_t)a->user_data_32};
}

static void command_hold(ledger_command *c, ledger_command_kind kind, tally_id128 pending_id)
{
    memset(c, 0, sizeof(*c));
    c->kind = kind;
    c->u.hold.pending_id = pending_id;
}

void net_command_post(const net_args_post *a, ledger_command *c)
{
    command_hold(c, LEDGER_POST, a->pending_id);
    c->u.hold.amount = a->amount;
    c->u.hold.amount_given = a->has_amount;
}

void net_command_void(const net_args_void *a, ledger_command *c)
{
    command_hold(c, LEDGER_VOID, a->pending_id);
}

/* What grant, extend and revoke share; each adds its own fields. */
static ledger_entitlement_command *command_entitlement(ledger_command *c, ledger_command_kind kind,
                                                       tally_str subject, tally_str feature,
                                                       bool has_source_order, uint64_t source_order)
{
    memset(c, 0, sizeof(*c));
    c->kind = kind;
    ledger_entitlement_command *e = &c->u.entitlement;
    e->subject = subject;
    e->feature = feature;
    e->has_source_order = has_source_order;
    e->source_order = source_order;
    return e;
}

void net_command_endpoint_disable(const net_args_endpoint_disable *a, ledger_command *c)
{
    memset(c, 0, sizeof(*c));
    c->kind = LEDGER_ENDPOINT_DISABLE;
    c->u.endpoint.name = a->endpoint;
    c->u.endpoint.reason = a->has_reason ? a->reason : (tally_str){0};
}

void net_command_endpoint_enable(const net_args_endpoint_enable *a, ledger_command *c)
{
    memset(c, 0, sizeof(*c));
    c->kind = LEDGER_ENDPOINT_ENABLE;
    c->u.endpoint.name = a->endpoint;
}

void net_command_endpoint_rotate_secret(const net_args_endpoint_rotate_secret *a,
                                        ledger_command *c)
{
    memset(c, 0, sizeof(*c));
    c->kind = LEDGER_ENDPOINT_ROTATE_SECRET;
    c->u.endpoint.name = a->endpoint;
    c->u.endpoint.secret = a->secret;
    c->u.endpoint.overlap_s =
        a->has_overlap_s ? (uint32_t)a->overlap_s : TALLY_ENDPOINT_OVERLAP_S_DEFAULT;
}

void net_command_endpoint_recover(const net_args_endpoint_recover *a, ledger_command *c)
{
    memset(c, 0, sizeof(*c));
    c->kind = LEDGER_ENDPOINT_RECOVER;
    c->u.endpoint.name = a->endpoint;
    c->u.endpoint.since_ms = a->since_ms;
}

void net_command_endpoint_recovered(const net_args_endpoint_recovered *a, ledger_command *c)
{
    memset(c, 0, sizeof(*c));
    c->kind = LEDGER_ENDPOINT_RECOVERED;
    c->u.endpoint.name = a->endpoint;
    c->u.endpoint.recover_version = a->recover_version;
}

/* The settings endpoint_create and endpoint_update share. */
#define ENDPOINT_SETTINGS_INTO(e, a)                                                          \
    do {                                                                                      \
        (e)->has_types = (a)->has_types, (e)->types = (a)->types;                             \
        (e)->has_schedule = (a)->has_retry_schedule, (e)->schedule = (a)->retry_schedule;     \
        (e)->has_connect_timeout = (a)->has_connect_timeout_ms;                               \
        (e)->connect_timeout_ms = (uint32_t)(a)->connect_timeout_ms;                          \
        (e)->has_timeout = (a)->has_timeout_ms, (e)->timeout_ms = (uint32_t)(a)->timeout_ms;  \
    } while (0)

void net_command_endpoint_create(const net_args_endpoint_create *a, ledger_command *c)
{
    memset(c, 0, sizeof(*c));
    c->kind = LEDGER_ENDPOINT_CREATE;
    ledger_endpoint *e = &c->u.endpoint;
    e->name = a->endpoint;
    e->secret = a->secret;
    e->has_url = true, e->url = a->url;
    e->has_backfill = a->has_backfill, e->backfill = a->backfill;
    ENDPOINT_SETTINGS_INTO(e, a);
}

void net_command_endpoint_update(const net_args_endpoint_update *a, ledger_command *c)
{
    memset(c, 0, sizeof(*c));
    c->kind = LEDGER_ENDPOINT_UPDATE;
    ledger_endpoint *e = &c->u.endpoint;
    e->name = a->endpoint;
    e->has_url = a->has_url, e->url = a->url;
    ENDPOINT_SETTINGS_INTO(e, a);
}

void net_command_endpoint_delete(const net_args_endpoint_delete *a, ledger_command *c)
{
    memset(c, 0, sizeof(*c));
    c->kind = LEDGER_ENDPOINT_DELETE;
    c->u.endpoint.name = a->endpoint;
}

void net_command_grant(const net_args_grant *a, ledger_command *c)
{
    ledger_entitlement_command *e = command_entitlement(c, LEDGER_GRANT, a->subject, a->feature,
                                                        a->has_source_order, a->source_order);
    e->valid_until_ms = a->valid_until_ms;
    e->duration_ms = a->duration_ms;
    e->has_grant_transfer = a->has_grant_transfer_id;
    e->grant_transfer_id = a->grant_transfer_id;
}

void net_command_extend(const net_args_extend *a, ledger_command *c)
{
    ledger_entitlement_command *e = command_entitlement(c, LEDGER_EXTEND, a->subject, a->feature,
                                                        a->has_source_order, a->source_order);
    e->valid_until_ms = a->valid_until_ms;
    e->duration_ms = a->duration_ms;
}

void net_command_revoke(const net_args_revoke *a, ledger_command *c)
{
    command_entitlement(c, LEDGER_REVOKE, a->subject, a->feature, a->has_source_order,
                        a->source_order);
}

int net_build_write(net_request *req, const void *args)
{
    req->op->command(args, &req->writes[0].command);
    return TALLY_ok;
}

int net_build_chain(net_request *req, const net_args_chain *a)
{
    return net_request_members(req, a->ops);
}

int net_build_batch(net_request *req, const net_args_batch *a)
{
    return net_request_members(req, a->ops);
}

/* A fault is not logged here but when the request is answered
 * (net/engine/slot.c): a group the map was too small for is applied again
 * once the map has grown, and its commands are then applied after all. */
/* A batch's members are all imported history or none, as its first
 * (ledger_command_import_mix); another is refused, like an invalid
 * command: not applied, not stored. */
static int batch_import_mix(const net_request *req, uint32_t i)
{
    if (req->op->id != NET_OP_BATCH || i == 0)
        return TALLY_ok;
    return ledger_command_import_mix(&req->writes[0].command, &req->writes[i].command);
}

int net_apply_writes(store_txn *t, const net_request *req, int64_t now_ms, bool in_place,
                     net_result *res)
{
    for (uint32_t i = 0; i < req->write_count; i++) {
        int mix = batch_import_mix(req, i);
        if (mix != TALLY_ok) {
            memset(&res->outcomes[i], 0, sizeof(res->outcomes[i]));
            res->outcomes[i].code = mix;
            res->faults[i] = TALLY_ok;
            continue;
        }
        res->faults[i] = in_place ? ledger_apply_in_place(t, &req->writes[i], now_ms, &res->outcomes[i])
                                  : ledger_apply(t, &req->writes[i], now_ms, &res->outcomes[i]);
        if (res->faults[i] != TALLY_ok && in_place)
            return res->faults[i];
    }
    return TALLY_ok;
}

/* The entries of one write result (the enclosing map is the caller's):
 * code, replayed, seq, events, key; for an exists* or id_already_failed
 * code original_seq (the seq that created the existing account or
 * transfer; nil for id_already_failed: a failed attempt caused no event);
 * and for a chain always codes and failed_index: nil when the chain was
 * not decided (refused as a request, e.g. idempotency_key_reused, or a
 * fault); failed_index is nil too when no member failed (ok, or an empty
 * chain: chain_must_not_be_empty, codes []). */
static void pack_result(net_out *o, const ledger_request *w, const ledger_outcome *r, int fault)
{
    int code = fault ? fault : r->code;
    bool ok_events = !fault && r->event_count > 0;
    net_kv_cstr(o, "code", tally_strerror(code));
    net_kv_bool(o, "replayed", !fault && r->replayed);
    if (ok_events)
        net_kv_u64(o, "seq", r->first_seq);
    else
        net_kv_nil(o, "seq");
    net_kv_u64(o, "events", ok_events ? r->event_count : 0);
    net_key(o, "key");
    msgpack_safe_pack_str(&o->pk, w->key);
    if (!fault && ledger_outcome_names_original(r->code)) {
        if (r->original_seq)
            net_kv_u64(o, "original_seq", r->original_seq);
        else
            net_kv_nil(o, "original_seq");
    }
    if (w->command.kind != LEDGER_CHAIN)
        return;
    /* a chain judged by the ledger: stored, or refused as invalid (class V,
     * not stored) with the failing member named */
    bool decided = !fault && (r->stored || (tally_error_class_of(r->code) == TALLY_CLASS_VALIDATION &&
                                            r->chain_count > 0));
    if (decided) {
        net_key(o, "codes");
        msgpack_pack_array(&o->pk, r->chain_count);
        for (uint32_t i = 0; i < r->chain_count; i++)
            msgpack_safe_pack_cstr(&o->pk, tally_strerror(r->chain_codes[i]));
    } else {
        net_kv_nil(o, "codes");
    }
    if (decided && r->code != TALLY_ok && r->failed_index < r->chain_count)
        net_kv_u64(o, "failed_index", r->failed_index);
    else
        net_kv_nil(o, "failed_index");
}

void net_reply_writes(net_out *o, store_txn *rt, const net_request *req, const net_result *res,
                      int fault, int64_t now_ms)
{
    (void)rt;
    (void)now_ms;
    net_map_begin(o);
    net_kv_u64(o, "v", TALLY_PROTOCOL_VERSION);
    if (req->op->id != NET_OP_BATCH) {
        pack_result(o, &req->writes[0], &res->outcomes[0], fault ? fault : res->faults[0]);
        net_map_end(o);
        return;
    }
    net_kv_cstr(o, "code", tally_strerror(TALLY_ok));
    net_key(o, "results");
    msgpack_pack_array(&o->pk, req->write_count);
    for (uint32_t i = 0; i < req->write_count; i++) {
        net_map_begin(o);
        pack_result(o, &req->writes[i], &res->outcomes[i], fault ? fault : res->faults[i]);
        net_map_end(o);
    }
    net_map_end(o);
}
