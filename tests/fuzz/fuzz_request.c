/*
 * fuzz_request.c — fuzz target: one request, the way tallyd handles it.
 *
 * net_request_decode (the bounded msgpack check, the op table); a refusal
 * is packed with net_reply_error. A write then takes the writer's path: a
 * write transaction on a store holding the bad-input setup, the sweep,
 * ledger_apply_in_place for each command (the stateless validation, the
 * fingerprint, the inbox, the state machine), redone nested with
 * ledger_apply after a fault as the group commit does, and the reply
 * packed by the op's reply encoder; the transaction is aborted, so every input
 * sees the same store. A read runs the op's read handler in a read transaction.
 *
 * Oracles besides the sanitizers: decoding never runs out of memory (the
 * count bomb; under libFuzzer -malloc_limit_mb catches large allocations
 * that succeed); the first write applied again in the same
 * transaction must be replayed with its code when its outcome was stored
 * (idempotency); the validation and fingerprint of a command depend on
 * nothing but the command; history and log pages hold only the entries
 * asked for.
 */
#include "tests/fuzz/fuzz.h"

#include "common/error.h"
#include "common/log_event.h"
#include "common/msgpack_safe.h"
#include "net/ops/protocol.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static store *st;
static net_request *req;
static ledger_outcome outcomes[TALLY_BATCH_OPS_MAX];
static int faults[TALLY_BATCH_OPS_MAX];

static void fixture(void)
{
    st = fuzz_store_create();
    req = malloc(sizeof(*req));
    if (st == NULL || req == NULL || fuzz_store_scenario(st, 0) != 0)
        fuzz_fail("cannot set up the store");
    net_request_init(req);
}

/* The reply must fit the reply limit, like tallyd's: the reply, or NULL
 * when it would not have fit. */
static nng_msg *reply_checked(net_out *o, const char *what)
{
    bool overflow = o->overflow;
    nng_msg *m = net_out_take(o);
    if (m == NULL && !overflow)
        fuzz_fail("packing the %s reply failed", what);
    return m;
}

static void reply_free(nng_msg *m)
{
    if (m)
        nng_msg_free(m);
}

static void check_command_is_pure(const ledger_command *cmd)
{
    uint32_t i1, i2;
    uint8_t f1[32], f2[32];
    int v1 = ledger_command_validate(cmd, &i1);
    int v2 = ledger_command_validate(cmd, &i2);
    ledger_command_fingerprint(cmd, f1);
    ledger_command_fingerprint(cmd, f2);
    if (v1 != v2 || i1 != i2 || memcmp(f1, f2, sizeof(f1)) != 0)
        fuzz_fail("validation or fingerprint of a command is not deterministic");
}

/* Apply every write of req in txn like the writer; true when a fault
 * stopped the in-place pass (the caller then redoes it nested). */
static bool apply_writes(store_txn *txn, bool in_place)
{
    for (uint32_t i = 0; i < req->write_count; i++) {
        const ledger_request *w = &req->writes[i];
        faults[i] = in_place ? ledger_apply_in_place(txn, w, FUZZ_NOW_MS, &outcomes[i])
                             : ledger_apply(txn, w, FUZZ_NOW_MS, &outcomes[i]);
        if (faults[i] != TALLY_ok && in_place)
            return true;
    }
    return false;
}

/* Idempotency: a stored outcome comes back replayed, with its code. */
static void check_replay(store_txn *txn)
{
    if (faults[0] != TALLY_ok || !outcomes[0].stored)
        return;
    ledger_outcome again;
    int rc = ledger_apply(txn, &req->writes[0], FUZZ_NOW_MS, &again);
    if (rc != TALLY_ok)
        return; /* a fault (the transaction is full): nothing to compare */
    if (!again.replayed || again.code != outcomes[0].code)
        fuzz_fail("write applied again: code %s replayed %d, first %s",
                  tally_strerror(again.code), again.replayed, tally_strerror(outcomes[0].code));
}

static void run_writes(net_out *o)
{
    for (uint32_t i = 0; i < req->write_count; i++)
        check_command_is_pure(&req->writes[i].command);
    store_txn txn;
    if (store_txn_begin(st, NULL, false, &txn) != TALLY_ok)
        fuzz_fail("cannot begin a write transaction");
    bool faulted = ledger_sweep(&txn, FUZZ_NOW_MS, 0, NULL, NULL) != TALLY_ok ||
                   apply_writes(&txn, true);
    if (faulted) { /* as the writer: abort, then each command nested */
        store_txn_abort(&txn);
        if (store_txn_begin(st, NULL, false, &txn) != TALLY_ok)
            fuzz_fail("cannot begin a write transaction");
        apply_writes(&txn, false);
    }
    check_replay(&txn);
    store_txn_abort(&txn);
    net_result *res = malloc(sizeof(*res));
    if (res == NULL)
        fuzz_fail("out of memory");
    memcpy(res->outcomes, outcomes, sizeof(outcomes));
    memcpy(res->faults, faults, sizeof(faults));
    req->op->reply(o, NULL, req, res, TALLY_ok, FUZZ_NOW_MS);
    free(res);
    reply_free(reply_checked(o, "write"));
}

/* The seq of a history entry or of a stored event (bin), 0 if none. */
static uint64_t seq_of(const msgpack_object *o)
{
    uint64_t seq = 0;
    msgpack_unpacked up;
    if (o->type != MSGPACK_OBJECT_BIN) {
        msgpack_safe_get_u64(msgpack_safe_map_get(o, "seq"), &seq);
        return seq;
    }
    msgpack_unpacked_init(&up);
    log_event ev; /* either event format */
    if (log_event_decode(o->via.bin.ptr, o->via.bin.size, &up, &ev) == TALLY_ok)
        seq = ev.seq;
    msgpack_unpacked_destroy(&up);
    return seq;
}

/* An account_list page: at most limit accounts, ids ascending above the
 * cursor, and a next that is the last id of a full page or nil. */
static void check_account_page(const msgpack_object *reply)
{
    const net_read *r = &req->read;
    const msgpack_object *list = msgpack_safe_map_get(reply, "entries");
    if (list == NULL) /* a refusal */
        return;
    uint32_t n = list->type == MSGPACK_OBJECT_ARRAY ? list->via.array.size : 0;
    if (n > r->limit)
        fuzz_fail("%u accounts for a limit of %u", n, r->limit);
    uint64_t last = r->after_id, next = 0;
    for (uint32_t i = 0; i < n; i++) {
        uint64_t id = 0;
        msgpack_safe_get_u64(msgpack_safe_map_get(&list->via.array.ptr[i], "id"), &id);
        if (id <= last)
            fuzz_fail("account_list page: id %llu at %u is not above %llu",
                      (unsigned long long)id, i, (unsigned long long)last);
        last = id;
    }
    const msgpack_object *more = msgpack_safe_map_get(reply, "next");
    if (more && more->type != MSGPACK_OBJECT_NIL &&
        (!msgpack_safe_get_u64(more, &next) || n != r->limit || next != last))
        fuzz_fail("account_list page of %u: next is not the last id of a full page", n);
}

/* Pages hold what was asked for: at most limit entries, history entries
 * after (reverse: before) the cursor, log events from from_seq on in
 * order, accounts in id order after the cursor. */
static void check_page(nng_msg *m)
{
    const net_read *r = &req->read;
    bool history = req->op->id == NET_OP_ACCOUNT_HISTORY;
    bool accounts = req->op->id == NET_OP_ACCOUNT_LIST;
    if (!history && !accounts && req->op->id != NET_OP_LOG_READ)
        return;
    msgpack_unpacked up;
    msgpack_unpacked_init(&up);
    if (msgpack_safe_unpack(nng_msg_body(m), nng_msg_len(m), TALLY_MSGPACK_DEPTH_MAX, &up) != TALLY_ok)
        fuzz_fail("a read reply does not decode");
    if (accounts) {
        check_account_page(&up.data);
        msgpack_unpacked_destroy(&up);
        return;
    }
    const msgpack_object *list = msgpack_safe_map_get(&up.data, history ? "entries" : "events");
    uint32_t n = list && list->type == MSGPACK_OBJECT_ARRAY ? list->via.array.size : 0;
    if (n > r->limit)
        fuzz_fail("%u entries for a limit of %u", n, r->limit);
    for (uint32_t i = 0; i < n; i++) {
        uint64_t seq = seq_of(&list->via.array.ptr[i]);
        bool in_page = history ? (r->reverse ? r->after_seq == 0 || seq < r->after_seq
                                             : seq > r->after_seq)
                               : seq == (r->from_seq > 1 ? r->from_seq : 1) + i;
        if (!in_page)
            fuzz_fail("%s page: seq %llu at %u is outside the page asked for", req->op->name,
                      (unsigned long long)seq, i);
    }
    msgpack_unpacked_destroy(&up);
}

static void run_read(net_out *o)
{
    store_txn txn;
    if (store_txn_begin(st, NULL, true, &txn) != TALLY_ok)
        fuzz_fail("cannot begin a read transaction");
    req->op->read(o, &txn, req, FUZZ_NOW_MS);
    store_txn_abort(&txn);
    nng_msg *m = reply_checked(o, "read");
    if (m)
        check_page(m);
    reply_free(m);
}

int fuzz_request_one(const uint8_t *data, size_t size)
{
    if (st == NULL)
        fixture();
    net_out o;
    if (net_out_begin(&o) != 0)
        fuzz_fail("cannot allocate a reply");
    int rc = net_request_decode(req, data, size);
    if (rc == TALLY_overloaded) /* msgpack-c could not allocate: a count was trusted */
        fuzz_fail("decoding %zu bytes ran out of memory", size);
    if (rc != TALLY_ok) {
        if (rc != req->error)
            fuzz_fail("refused with %s but remembered %s", tally_strerror(rc),
                      tally_strerror(req->error));
        net_reply_error(&o, rc, req->error_detail);
        reply_free(reply_checked(&o, "error"));
    } else if (req->op->kind == NET_KIND_WRITE) {
        if (req->write_count == 0 || req->write_count > TALLY_BATCH_OPS_MAX)
            fuzz_fail("a write with %u commands", req->write_count);
        run_writes(&o);
    } else if (req->op->kind == NET_KIND_READ) {
        run_read(&o);
    } else { /* subscriber writes and control ops: decoding is what is fuzzed here */
        net_out_discard(&o);
    }
    net_request_reset(req);
    return 0;
}

#ifndef FUZZ_NO_ENTRY
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    return fuzz_request_one(data, size);
}
#endif
