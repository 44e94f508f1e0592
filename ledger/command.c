/*
 * command.c — stateless validation and fingerprints of commands.
 */
#include "ledger/command.h"

#include "common/error.h"
#include "common/sha256.h"


const char *ledger_command_name(ledger_command_kind kind)
{
    switch (kind) {
    case LEDGER_ACCOUNT_OPEN: return "account_open";
    case LEDGER_TRANSFER: return "transfer";
    case LEDGER_POST: return "post";
    case LEDGER_VOID: return "void";
    case LEDGER_GRANT: return "grant";
    case LEDGER_EXTEND: return "extend";
    case LEDGER_REVOKE: return "revoke";
    case LEDGER_CHAIN: return "chain";
    case LEDGER_WEBHOOK_RECEIVE: return "webhook_receive";
    }
    return "unknown";
}

static int validate_account_open(const ledger_account_open *a)
{
    if (a->id == 0)
        return TALLY_id_must_not_be_zero;
    if (a->flags & ~LEDGER_ACCOUNT_FLAGS_KNOWN)
        return TALLY_reserved_flag;
    if ((a->flags & LEDGER_ACCOUNT_FLAGS_KNOWN) == LEDGER_ACCOUNT_FLAGS_KNOWN)
        return TALLY_flags_are_mutually_exclusive;
    if (a->ledger == 0)
        return TALLY_ledger_must_not_be_zero;
    if (a->code == 0)
        return TALLY_code_must_not_be_zero;
    return TALLY_ok;
}

static int validate_amount(int64_t amount)
{
    if (amount == 0)
        return TALLY_amount_must_not_be_zero;
    if (amount < 0)
        return TALLY_amount_must_not_be_negative;
    return TALLY_ok;
}

static int validate_transfer(const ledger_transfer *t)
{
    if (tally_id128_is_zero(&t->id))
        return TALLY_id_must_not_be_zero;
    if (t->flags & ~LEDGER_TRANSFER_FLAGS_KNOWN)
        return TALLY_reserved_flag;
    if (t->debit_account_id == 0)
        return TALLY_debit_account_id_must_not_be_zero;
    if (t->credit_account_id == 0)
        return TALLY_credit_account_id_must_not_be_zero;
    if (t->debit_account_id == t->credit_account_id)
        return TALLY_accounts_must_be_different;
    int rc = validate_amount(t->amount);
    if (rc != TALLY_ok)
        return rc;
    if (t->ledger == 0)
        return TALLY_ledger_must_not_be_zero;
    if (t->code == 0)
        return TALLY_code_must_not_be_zero;
    if (t->timeout_s != 0 && !(t->flags & LEDGER_TRANSFER_PENDING))
        return TALLY_timeout_reserved_for_pending_transfer;
    if (t->timeout_s > TALLY_HOLD_TIMEOUT_S_MAX)
        return TALLY_timeout_too_large;
    return TALLY_ok;
}

static int validate_hold_step(ledger_command_kind kind, const ledger_hold_step *h)
{
    if (tally_id128_is_zero(&h->pending_id))
        return TALLY_id_must_not_be_zero;
    if (kind == LEDGER_VOID)
        return h->amount == 0 ? TALLY_ok : TALLY_field_not_allowed_for_command;
    if (h->amount < 0)
        return TALLY_amount_must_not_be_negative;
    if (h->amount_given && h->amount == 0) /* "all" is said by sending no amount */
        return TALLY_amount_must_not_be_zero;
    return TALLY_ok;
}

static int validate_entitlement(ledger_command_kind kind, const ledger_entitlement_command *e)
{
    if (e->subject.len == 0)
        return TALLY_subject_must_not_be_empty;
    if (e->subject.len > TALLY_SUBJECT_BYTES_MAX)
        return TALLY_subject_too_long;
    if (e->feature.len == 0)
        return TALLY_feature_must_not_be_empty;
    if (e->feature.len > TALLY_FEATURE_BYTES_MAX)
        return TALLY_feature_too_long;
    if (e->valid_until_ms < 0 || e->valid_until_ms > TALLY_TIME_MS_MAX)
        return TALLY_time_out_of_range;
    if (e->duration_ms < 0 || e->duration_ms > TALLY_GRANT_DURATION_MS_MAX)
        return TALLY_duration_out_of_range;
    bool has_until = e->valid_until_ms != 0, has_duration = e->duration_ms != 0;
    if (has_until && has_duration)
        return TALLY_until_and_duration_are_mutually_exclusive;
    if (kind == LEDGER_EXTEND && !has_until && !has_duration)
        return TALLY_time_out_of_range;
    if (kind == LEDGER_REVOKE && (has_until || has_duration))
        return TALLY_field_not_allowed_for_command;
    if (kind != LEDGER_GRANT && e->has_grant_transfer)
        return TALLY_field_not_allowed_for_command;
    if (e->has_grant_transfer && tally_id128_is_zero(&e->grant_transfer_id))
        return TALLY_id_must_not_be_zero;
    return TALLY_ok;
}

bool ledger_webhook_fits(const ledger_webhook *w)
{
    return w->source.len > 0 && w->source.len <= TALLY_WEBHOOK_SOURCE_BYTES_MAX &&
           w->event_id.len > 0 && w->event_id.len <= TALLY_WEBHOOK_EVENT_ID_BYTES_MAX &&
           w->event_type.len <= TALLY_WEBHOOK_EVENT_TYPE_BYTES_MAX &&
           w->body.len <= TALLY_WEBHOOK_BODY_BYTES_MAX;
}

static int validate_webhook(const ledger_webhook *w)
{
    if (w->signed_at_s < 0 || w->signed_at_s > TALLY_TIME_MS_MAX / 1000)
        return TALLY_time_out_of_range;
    return TALLY_ok;
}

static int validate_one(const ledger_command *cmd)
{
    switch (cmd->kind) {
    case LEDGER_ACCOUNT_OPEN: return validate_account_open(&cmd->u.account_open);
    case LEDGER_TRANSFER: return validate_transfer(&cmd->u.transfer);
    case LEDGER_POST:
    case LEDGER_VOID: return validate_hold_step(cmd->kind, &cmd->u.hold);
    case LEDGER_GRANT:
    case LEDGER_EXTEND:
    case LEDGER_REVOKE: return validate_entitlement(cmd->kind, &cmd->u.entitlement);
    case LEDGER_CHAIN: return TALLY_chain_must_not_nest;
    case LEDGER_WEBHOOK_RECEIVE: return validate_webhook(&cmd->u.webhook);
    }
    return TALLY_unknown_command;
}

int ledger_command_validate(const ledger_command *cmd, uint32_t *failed_index)
{
    *failed_index = 0;
    if (cmd->kind != LEDGER_CHAIN)
        return validate_one(cmd);
    const ledger_chain *chain = &cmd->u.chain;
    if (chain->count == 0)
        return TALLY_chain_must_not_be_empty;
    if (chain->count > TALLY_CHAIN_COMMANDS_MAX)
        return TALLY_chain_too_long;
    for (uint32_t i = 0; i < chain->count; i++) {
        int rc = validate_one(&chain->members[i]);
        if (rc != TALLY_ok) {
            *failed_index = i;
            return rc;
        }
    }
    return TALLY_ok;
}

/* ---- fingerprint: canonical encoding fed to SHA-256 ---- */

static void fp_u8(sha256_ctx *h, uint8_t v) { sha256_update(h, &v, 1); }

static void fp_u64(sha256_ctx *h, uint64_t v)
{
    uint8_t b[8];
    put_u64_be(b, v);
    sha256_update(h, b, 8);
}

static void fp_str(sha256_ctx *h, tally_str s)
{
    fp_u64(h, s.len);
    if (s.len)
        sha256_update(h, s.ptr, s.len);
}

static void fp_id(sha256_ctx *h, const tally_id128 *id) { sha256_update(h, id->bytes, 16); }

static void fingerprint_one(sha256_ctx *h, const ledger_command *cmd)
{
    fp_u8(h, (uint8_t)cmd->kind);
    switch (cmd->kind) {
    case LEDGER_ACCOUNT_OPEN: {
        const ledger_account_open *a = &cmd->u.account_open;
        fp_u64(h, a->id), fp_u64(h, a->ledger), fp_u64(h, a->code), fp_u64(h, a->flags);
        break;
    }
    case LEDGER_TRANSFER: {
        const ledger_transfer *t = &cmd->u.transfer;
        fp_id(h, &t->id), fp_u64(h, t->debit_account_id), fp_u64(h, t->credit_account_id);
        fp_u64(h, (uint64_t)t->amount), fp_u64(h, t->ledger), fp_u64(h, t->code);
        fp_u64(h, t->flags), fp_u64(h, t->timeout_s);
        break;
    }
    case LEDGER_POST:
    case LEDGER_VOID:
        fp_id(h, &cmd->u.hold.pending_id), fp_u64(h, (uint64_t)cmd->u.hold.amount);
        /* An amount of 0 sent differs from none sent; other fingerprints
         * stay as they were, so keys stored before keep replaying. */
        if (cmd->u.hold.amount_given && cmd->u.hold.amount == 0)
            fp_u64(h, UINT64_MAX);
        break;
    case LEDGER_GRANT:
    case LEDGER_EXTEND:
    case LEDGER_REVOKE: {
        const ledger_entitlement_command *e = &cmd->u.entitlement;
        fp_str(h, e->subject), fp_str(h, e->feature);
        fp_u64(h, (uint64_t)e->valid_until_ms), fp_u64(h, (uint64_t)e->duration_ms);
        fp_u8(h, e->has_source_order), fp_u64(h, e->source_order);
        fp_u8(h, e->has_grant_transfer);
        if (e->has_grant_transfer)
            fp_id(h, &e->grant_transfer_id);
        break;
    }
    case LEDGER_WEBHOOK_RECEIVE: /* not the signed time: a retry signs anew */
        fp_str(h, cmd->u.webhook.source), fp_str(h, cmd->u.webhook.event_id);
        fp_str(h, cmd->u.webhook.body);
        break;
    case LEDGER_CHAIN:
        fp_u64(h, cmd->u.chain.count);
        for (uint32_t i = 0; i < cmd->u.chain.count && i < TALLY_CHAIN_COMMANDS_MAX; i++) {
            const ledger_command *m = &cmd->u.chain.members[i];
            if (m->kind == LEDGER_CHAIN) /* rejected as chain_must_not_nest; kind only */
                fp_u8(h, (uint8_t)m->kind);
            else
                fingerprint_one(h, m);
        }
        break;
    }
}

void ledger_command_fingerprint(const ledger_command *cmd, uint8_t out[32])
{
    sha256_ctx h;
    sha256_begin(&h);
    static const char domain[] = "tally.command.v1";
    sha256_update(&h, domain, sizeof(domain) - 1);
    fingerprint_one(&h, cmd);
    sha256_finish(&h, out);
}
