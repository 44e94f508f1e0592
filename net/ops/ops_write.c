/*
 * ops_write.c — the ledger write ops: their commands from checked fields,
 * the writer's apply (ledger_apply for each command) and the reply.
 */
#include "net/ops/ops.h"

#include "common/error.h"
#include "common/msgpack_safe.h"
#include "common/logging.h"

#include <string.h>

void net_command_account_open(const net_fields *fs, ledger_command *c)
{
    memset(c, 0, sizeof(*c));
    c->kind = LEDGER_ACCOUNT_OPEN;
    c->u.account_open = (ledger_account_open){
        .id = net_fields_u64(fs, "id", 0), .ledger = (uint32_t)net_fields_u64(fs, "ledger", 0),
        .code = (uint16_t)net_fields_u64(fs, "code", 0),
        .flags = (uint16_t)net_fields_u64(fs, "flags", 0)};
}

void net_command_transfer(const net_fields *fs, ledger_command *c)
{
    memset(c, 0, sizeof(*c));
    c->kind = LEDGER_TRANSFER;
    ledger_transfer *t = &c->u.transfer;
    net_fields_id(fs, "id", &t->id);
    t->debit_account_id = net_fields_u64(fs, "debit_account_id", 0);
    t->credit_account_id = net_fields_u64(fs, "credit_account_id", 0);
    t->amount = net_fields_i64(fs, "amount");
    t->ledger = (uint32_t)net_fields_u64(fs, "ledger", 0);
    t->code = (uint16_t)net_fields_u64(fs, "code", 0);
    t->flags = (uint16_t)net_fields_u64(fs, "flags", 0);
    t->timeout_s = (uint32_t)net_fields_u64(fs, "timeout_s", 0);
}

static void command_hold(const net_fields *fs, ledger_command *c, ledger_command_kind kind)
{
    memset(c, 0, sizeof(*c));
    c->kind = kind;
    net_fields_id(fs, "pending_id", &c->u.hold.pending_id);
    c->u.hold.amount = net_fields_i64(fs, "amount");
    c->u.hold.amount_given = net_fields_value(fs, "amount") != NULL;
}

void net_command_post(const net_fields *fs, ledger_command *c) { command_hold(fs, c, LEDGER_POST); }
void net_command_void(const net_fields *fs, ledger_command *c) { command_hold(fs, c, LEDGER_VOID); }

static void command_entitlement(const net_fields *fs, ledger_command *c, ledger_command_kind kind)
{
    memset(c, 0, sizeof(*c));
    c->kind = kind;
    ledger_entitlement_command *e = &c->u.entitlement;
    e->subject = net_fields_str(fs, "subject");
    e->feature = net_fields_str(fs, "feature");
    e->valid_until_ms = net_fields_i64(fs, "valid_until_ms");
    e->duration_ms = net_fields_i64(fs, "duration_ms");
    e->has_source_order = net_fields_value(fs, "source_order") != NULL;
    e->source_order = net_fields_u64(fs, "source_order", 0);
    e->has_grant_transfer = net_fields_id(fs, "grant_transfer_id", &e->grant_transfer_id);
}

void net_command_grant(const net_fields *fs, ledger_command *c) { command_entitlement(fs, c, LEDGER_GRANT); }
void net_command_extend(const net_fields *fs, ledger_command *c) { command_entitlement(fs, c, LEDGER_EXTEND); }
void net_command_revoke(const net_fields *fs, ledger_command *c) { command_entitlement(fs, c, LEDGER_REVOKE); }

int net_build_write(net_request *req, const net_fields *fs)
{
    req->op->command(fs, &req->writes[0].command);
    return TALLY_ok;
}

int net_apply_writes(store_txn *t, const net_request *req, int64_t now_ms, bool in_place,
                     net_result *res)
{
    for (uint32_t i = 0; i < req->write_count; i++) {
        res->faults[i] = in_place ? ledger_apply_in_place(t, &req->writes[i], now_ms, &res->outcomes[i])
                                  : ledger_apply(t, &req->writes[i], now_ms, &res->outcomes[i]);
        if (res->faults[i] != TALLY_ok) {
            net_log(NET_LOG_WARN, "command not applied: %s", tally_strerror(res->faults[i]));
            if (in_place)
                return res->faults[i];
        }
    }
    return TALLY_ok;
}

/* The entries of one write result (the enclosing map is the caller's):
 * code, replayed, seq, events, key; for an exists* or id_already_failed
 * code original_seq (the seq that created the existing account or
 * transfer; nil for id_already_failed: a failed attempt caused no event);
 * and for a chain always codes and failed_index: nil when the chain was
 * not decided (refused as a request, e.g. idempotency_key_reused, or a
 * fault). */
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
    bool decided = !fault && r->stored;
    if (decided) {
        net_key(o, "codes");
        msgpack_pack_array(&o->pk, r->chain_count);
        for (uint32_t i = 0; i < r->chain_count; i++)
            msgpack_safe_pack_cstr(&o->pk, tally_strerror(r->chain_codes[i]));
    } else {
        net_kv_nil(o, "codes");
    }
    if (decided && r->code != TALLY_ok)
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
