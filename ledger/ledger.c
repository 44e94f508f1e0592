/*
 * ledger.c — the write path of one command: request checks, the inbox
 * lookup, the command in a nested transaction, atomic chains, the inbox
 * record. See BRIEF §3 and ledger.h.
 */
#include "ledger/ledger.h"

#include "common/error.h"
#include "common/limits.h"
#include "ledger/webhook.h"

#include <assert.h>
#include <string.h>

static int check_request(const ledger_request *req)
{
    if (req->consumer.len == 0)
        return TALLY_consumer_must_not_be_empty;
    if (req->consumer.len > TALLY_CONSUMER_BYTES_MAX)
        return TALLY_consumer_too_long;
    if (req->key.len == 0)
        return TALLY_key_must_not_be_empty;
    if (req->key.len > TALLY_KEY_BYTES_MAX)
        return TALLY_key_too_long;
    if (req->correlation.len > TALLY_CORRELATION_BYTES_MAX)
        return TALLY_correlation_too_long;
    if (req->command.kind == LEDGER_WEBHOOK_RECEIVE && !ledger_webhook_fits(&req->command.u.webhook))
        return TALLY_value_out_of_range;
    return TALLY_ok;
}

/* A UUIDv7 key (32 hex digits, dashes allowed: what libtally and the CLI
 * make) whose 48-bit Unix ms time is more than req->key_max_age_ms before
 * now. Keys of any other form carry no time: the window alone guards them. */
static bool key_expired(const ledger_request *req, int64_t now_ms)
{
    char text[TALLY_KEY_BYTES_MAX + 1];
    tally_id128 id;
    if (req->key_max_age_ms <= 0 || req->key.len > 36 || req->key.len < 32)
        return false;
    memcpy(text, req->key.ptr, req->key.len);
    text[req->key.len] = '\0';
    if (!tally_id128_from_hex(text, &id) || id.bytes[6] >> 4 != 7 || id.bytes[8] >> 6 != 2)
        return false;
    int64_t created_ms = 0;
    for (int i = 0; i < 6; i++)
        created_ms = created_ms << 8 | id.bytes[i];
    return created_ms < now_ms - req->key_max_age_ms;
}

/* One command (a chain's member or a command alone) through its row of
 * the op table; ledger_emit holds it to the row's event types. */
static int apply_member(ledger_ctx *ctx, const ledger_command *cmd)
{
    const ledger_op_row *row = ledger_op_of(cmd->kind);
    if (row == NULL)
        return TALLY_unknown_command;
    ctx->op_events = row->events;
    int rc = row->apply(ctx, cmd);
    ctx->op_events = NULL;
    return rc;
}

/* Mark member failed with code and every other member linked_operation_failed. */
static void chain_failed(ledger_outcome *out, uint32_t count, uint32_t failed, int code)
{
    out->chain_count = count;
    out->failed_index = failed;
    for (uint32_t i = 0; i < count; i++)
        out->chain_codes[i] = (uint16_t)(i == failed ? code : TALLY_linked_operation_failed);
}

/* Run the command (validated already) in ctx; fills the chain part of out. */
static int run_command(ledger_ctx *ctx, const ledger_command *cmd, ledger_outcome *out)
{
    if (cmd->kind != LEDGER_CHAIN)
        return apply_member(ctx, cmd);
    const ledger_chain *chain = &cmd->u.chain;
    for (uint32_t i = 0; i < chain->count; i++) {
        int rc = apply_member(ctx, &chain->members[i]);
        if (rc != TALLY_ok) {
            if (!ledger_is_fault(rc))
                chain_failed(out, chain->count, i, rc);
            return rc;
        }
    }
    out->chain_count = chain->count;
    return TALLY_ok; /* chain_codes are all ok (zero) */
}

static int replay_or_reject(const ledger_inbox_record *rec, const uint8_t fp[32],
                            ledger_outcome *out)
{
    assert(rec->fingerprint_len >= LEDGER_FINGERPRINT_STORED_BYTES);
    if (memcmp(rec->fingerprint, fp, rec->fingerprint_len) != 0) {
        memset(out, 0, sizeof(*out));
        out->code = TALLY_idempotency_key_reused;
        return TALLY_ok;
    }
    *out = rec->outcome;
    out->replayed = true;
    out->stored = true;
    return TALLY_ok;
}

/* The transfer that failed with code, alone or as the chain member at
 * out->failed_index, when code leaves its id failed (failed_id.h). */
static const tally_id128 *failed_transfer_id(const ledger_command *cmd, int code,
                                             const ledger_outcome *out)
{
    if (!ledger_failed_id_remembers(code))
        return NULL;
    if (cmd->kind == LEDGER_CHAIN)
        cmd = out->failed_index < cmd->u.chain.count ? &cmd->u.chain.members[out->failed_index]
                                                     : NULL;
    if (cmd && cmd->kind == LEDGER_REVERSE)
        return &cmd->u.reverse.id;
    return cmd && cmd->kind == LEDGER_TRANSFER ? &cmd->u.transfer.id : NULL;
}

/* Fill the outcome of a decided command and record it under its key; a
 * transfer that failed leaves its id failed, in the same transaction. An
 * invalid command (class V) is answered and not recorded, so the client
 * may correct it and send it again under the same key. */
static int record_outcome(store_txn *t, const ledger_request *req, const uint8_t fp[32],
                          int code, const ledger_ctx *ctx, int64_t now_ms, ledger_outcome *out)
{
    out->code = code;
    if (!tally_error_is_stored(code))
        return TALLY_ok; /* an invalid command: answered, the key stays free */
    out->stored = true;
    out->time_ms = now_ms;
    out->first_seq = code == TALLY_ok ? ctx->first_seq : 0;
    out->event_count = code == TALLY_ok ? ctx->event_count : 0;
    out->original_seq = ledger_outcome_names_original(code) ? ctx->original_seq : 0;
    const tally_id128 *failed = failed_transfer_id(&req->command, code, out);
    if (failed)
        out->failed_id = *failed;
    int rc = ledger_inbox_put(t, req->consumer, req->key, fp, out);
    if (rc == TALLY_ok && failed)
        rc = ledger_failed_id_put(t, failed, code, now_ms, req->consumer, req->key);
    return rc;
}

/* Validate and run the command in t; the chain part of out is filled. */
static int validate_and_run(ledger_ctx *ctx, const ledger_command *cmd, ledger_outcome *out)
{
    uint32_t failed_index;
    int code = ledger_command_validate(cmd, &failed_index);
    if (code != TALLY_ok && cmd->kind == LEDGER_CHAIN && !ledger_is_fault(code))
        chain_failed(out, cmd->u.chain.count <= TALLY_CHAIN_COMMANDS_MAX ? cmd->u.chain.count : 0,
                     failed_index, code);
    if (code == TALLY_ok)
        code = run_command(ctx, cmd, out);
    return code;
}

/* Decide the command in a child of txn and record the outcome there. */
static int decide_nested(store_txn *txn, const ledger_request *req, const uint8_t fp[32],
                         int64_t now_ms, ledger_outcome *out)
{
    store_txn child;
    int rc = store_txn_begin(txn->st, txn, false, &child);
    if (rc != TALLY_ok)
        return rc;
    ledger_ctx ctx = {.txn = &child, .now_ms = now_ms, .consumer = req->consumer,
                      .key = req->key, .correlation = req->correlation};
    int code = validate_and_run(&ctx, &req->command, out);
    if (ledger_is_fault(code)) {
        store_txn_abort(&child);
        return code;
    }
    if (code != TALLY_ok) {
        /* A rejection keeps nothing of the command, only its record. */
        store_txn_abort(&child);
        rc = store_txn_begin(txn->st, txn, false, &child);
        if (rc != TALLY_ok)
            return rc;
    }
    rc = record_outcome(&child, req, fp, code, &ctx, now_ms, out);
    if (rc != TALLY_ok) {
        store_txn_abort(&child);
        return rc;
    }
    return store_txn_commit(&child);
}

/* Decide a single command directly in txn. Every command checks before its
 * first write, so a rejection has written nothing (asserted); a fault
 * leaves txn to be aborted by the caller. */
static int decide_in_place(store_txn *txn, const ledger_request *req, const uint8_t fp[32],
                           int64_t now_ms, ledger_outcome *out)
{
    ledger_ctx ctx = {.txn = txn, .now_ms = now_ms, .consumer = req->consumer,
                      .key = req->key, .correlation = req->correlation};
    uint64_t writes_before = txn->writes;
    int code = validate_and_run(&ctx, &req->command, out);
    if (ledger_is_fault(code))
        return store_txn_fail(txn, code);
    assert(code == TALLY_ok || txn->writes == writes_before);
    (void)writes_before;
    return store_txn_fail(txn, record_outcome(txn, req, fp, code, &ctx, now_ms, out));
}

/* Common front of both modes: request checks, fingerprint, inbox lookup. */
static int apply_request(store_txn *txn, const ledger_request *req, int64_t now_ms,
                         ledger_outcome *out, bool in_place)
{
    assert(txn != NULL && txn->active && !txn->read_only && req != NULL && out != NULL);
    assert(now_ms > 0 && now_ms <= TALLY_TIME_MS_MAX);
    memset(out, 0, sizeof(*out));
    int rc = check_request(req);
    if (rc != TALLY_ok) {
        out->code = rc;
        return TALLY_ok;
    }
    if (txn->error != TALLY_ok)
        return txn->error;
    uint8_t fp[LEDGER_FINGERPRINT_BYTES];
    ledger_command_fingerprint(&req->command, fp);
    ledger_inbox_record rec;
    rc = ledger_inbox_get(txn, req->consumer, req->key, &rec);
    if (rc == TALLY_ok)
        return replay_or_reject(&rec, fp, out);
    if (rc != TALLY_not_found)
        return rc;
    if (key_expired(req, now_ms)) {
        out->code = TALLY_key_expired; /* a request refusal: nothing stored */
        return TALLY_ok;
    }
    if (in_place && req->command.kind != LEDGER_CHAIN)
        rc = decide_in_place(txn, req, fp, now_ms, out);
    else
        rc = decide_nested(txn, req, fp, now_ms, out);
    if (rc != TALLY_ok)
        memset(out, 0, sizeof(*out));
    return rc;
}

int ledger_apply(store_txn *txn, const ledger_request *req, int64_t now_ms,
                 ledger_outcome *out)
{
    return apply_request(txn, req, now_ms, out, false);
}

int ledger_apply_in_place(store_txn *txn, const ledger_request *req, int64_t now_ms,
                          ledger_outcome *out)
{
    return apply_request(txn, req, now_ms, out, true);
}

static int apply_one(store *st, const ledger_request *req, int64_t now_ms, ledger_outcome *out,
                     bool in_place)
{
    store_txn txn;
    int rc = store_txn_begin(st, NULL, false, &txn);
    if (rc != TALLY_ok)
        return rc;
    rc = ledger_sweep(&txn, now_ms, 0, NULL, NULL);
    if (rc == TALLY_ok)
        rc = apply_request(&txn, req, now_ms, out, in_place);
    if (rc != TALLY_ok) {
        store_txn_abort(&txn);
        return rc;
    }
    return store_txn_commit(&txn);
}

int ledger_apply_one(store *st, const ledger_request *req, int64_t now_ms,
                     ledger_outcome *out)
{
    return apply_one(st, req, now_ms, out, false);
}

int ledger_apply_one_in_place(store *st, const ledger_request *req, int64_t now_ms,
                              ledger_outcome *out)
{
    return apply_one(st, req, now_ms, out, true);
}
