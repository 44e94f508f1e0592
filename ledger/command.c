/*
 * command.c — the op table: one row per command kind (command.h's
 * ledger_op_row) with its name, its stateless validation, its fingerprint,
 * its apply function and the event types it emits. Every decision ledger/
 * makes by a command's kind is a lookup here; adding a command is adding
 * its kind, its row and the functions the row names (docs/DESIGN.md,
 * "Adding an op"). The validations and fingerprints live here; the apply
 * functions live with their state (account.c, transfer.c, entitlement.c,
 * webhook.c).
 */
#include "ledger/command.h"

#include "common/error.h"
#include "common/sha256.h"
#include "ledger/account.h"
#include "ledger/entitlement.h"
#include "ledger/transfer.h"
#include "common/webhook_secret.h"
#include "ledger/endpoint.h"
#include "ledger/webhook.h"


/* An imported record's creation time: given (1 .. TALLY_TIME_MS_MAX),
 * and only with the imported flag (TigerBeetle's timestamp rules; the
 * rules against the store are ledger/imported.c's). */
static int validate_timestamp(bool imported, int64_t timestamp_ms)
{
    if (!imported)
        return timestamp_ms == 0 ? TALLY_ok : TALLY_timestamp_must_be_zero;
    if (timestamp_ms <= 0 || timestamp_ms > TALLY_TIME_MS_MAX)
        return TALLY_imported_event_timestamp_out_of_range;
    return TALLY_ok;
}

static int validate_account_open(const ledger_command *cmd)
{
    const ledger_account_open *a = &cmd->u.account_open;
    if (a->id == 0)
        return TALLY_id_must_not_be_zero;
    if (a->flags & ~LEDGER_ACCOUNT_FLAGS_KNOWN)
        return TALLY_reserved_flag;
    if ((a->flags & LEDGER_ACCOUNT_LIMIT_FLAGS) == LEDGER_ACCOUNT_LIMIT_FLAGS)
        return TALLY_flags_are_mutually_exclusive;
    if (a->ledger == 0)
        return TALLY_ledger_must_not_be_zero;
    if (a->code == 0)
        return TALLY_code_must_not_be_zero;
    return validate_timestamp(a->flags & LEDGER_ACCOUNT_IMPORTED, a->timestamp_ms);
}

static int validate_amount(int64_t amount)
{
    if (amount == 0)
        return TALLY_amount_must_not_be_zero;
    if (amount < 0)
        return TALLY_amount_must_not_be_negative;
    return TALLY_ok;
}

static int validate_transfer(const ledger_command *cmd)
{
    const ledger_transfer *t = &cmd->u.transfer;
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
    if ((t->flags & (LEDGER_TRANSFER_CLOSING_DEBIT | LEDGER_TRANSFER_CLOSING_CREDIT)) &&
        !(t->flags & LEDGER_TRANSFER_PENDING))
        return TALLY_closing_transfer_must_be_pending;
    if (t->timeout_s > TALLY_HOLD_TIMEOUT_S_MAX)
        return TALLY_timeout_too_large;
    bool imported = t->flags & LEDGER_TRANSFER_IMPORTED;
    if (imported && t->timeout_s != 0) /* no clock drives an imported hold */
        return TALLY_imported_event_timeout_must_be_zero;
    return validate_timestamp(imported, t->timestamp_ms);
}

static int validate_reverse(const ledger_command *cmd)
{
    const ledger_reverse *r = &cmd->u.reverse;
    if (tally_id128_is_zero(&r->id))
        return TALLY_id_must_not_be_zero;
    if (tally_id128_is_zero(&r->reverses))
        return TALLY_reverses_must_not_be_zero;
    return r->amount_given ? validate_amount(r->amount) : TALLY_ok;
}

static int validate_post(const ledger_command *cmd)
{
    const ledger_hold_step *h = &cmd->u.hold;
    if (tally_id128_is_zero(&h->pending_id))
        return TALLY_id_must_not_be_zero;
    if (h->amount < 0)
        return TALLY_amount_must_not_be_negative;
    if (h->amount_given && h->amount == 0) /* "all" is said by sending no amount */
        return TALLY_amount_must_not_be_zero;
    return TALLY_ok;
}

static int validate_void(const ledger_command *cmd)
{
    const ledger_hold_step *h = &cmd->u.hold;
    if (tally_id128_is_zero(&h->pending_id))
        return TALLY_id_must_not_be_zero;
    return h->amount == 0 ? TALLY_ok : TALLY_field_not_allowed_for_command;
}

/* What grant, extend and revoke check alike, first. */
static int validate_entitlement(const ledger_entitlement_command *e)
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
    if (e->valid_until_ms != 0 && e->duration_ms != 0)
        return TALLY_until_and_duration_are_mutually_exclusive;
    return TALLY_ok;
}

static int validate_grant(const ledger_command *cmd)
{
    const ledger_entitlement_command *e = &cmd->u.entitlement;
    int rc = validate_entitlement(e);
    if (rc == TALLY_ok && e->has_grant_transfer && tally_id128_is_zero(&e->grant_transfer_id))
        rc = TALLY_id_must_not_be_zero;
    return rc;
}

static int validate_extend(const ledger_command *cmd)
{
    const ledger_entitlement_command *e = &cmd->u.entitlement;
    int rc = validate_entitlement(e);
    if (rc == TALLY_ok && e->valid_until_ms == 0 && e->duration_ms == 0)
        rc = TALLY_time_out_of_range;
    if (rc == TALLY_ok && e->has_grant_transfer)
        rc = TALLY_field_not_allowed_for_command;
    return rc;
}

static int validate_revoke(const ledger_command *cmd)
{
    const ledger_entitlement_command *e = &cmd->u.entitlement;
    int rc = validate_entitlement(e);
    if (rc == TALLY_ok && (e->valid_until_ms != 0 || e->duration_ms != 0 || e->has_grant_transfer))
        rc = TALLY_field_not_allowed_for_command;
    return rc;
}

bool ledger_webhook_fits(const ledger_webhook *w)
{
    return w->source.len > 0 && w->source.len <= TALLY_WEBHOOK_SOURCE_BYTES_MAX &&
           w->event_id.len > 0 && w->event_id.len <= TALLY_WEBHOOK_EVENT_ID_BYTES_MAX &&
           w->event_type.len <= TALLY_WEBHOOK_EVENT_TYPE_BYTES_MAX &&
           w->body.len <= TALLY_WEBHOOK_BODY_BYTES_MAX;
}

static int validate_webhook(const ledger_command *cmd)
{
    const ledger_webhook *w = &cmd->u.webhook;
    if (w->signed_at_s < 0 || w->signed_at_s > TALLY_TIME_MS_MAX / 1000)
        return TALLY_time_out_of_range;
    return TALLY_ok;
}

static int validate_endpoint(const ledger_command *cmd)
{
    const ledger_endpoint *e = &cmd->u.endpoint;
    if (!ledger_endpoint_name_valid(e->name))
        return TALLY_invalid_endpoint_name;
    return e->reason.len <= TALLY_ENDPOINT_REASON_BYTES_MAX ? TALLY_ok
                                                            : TALLY_value_out_of_range;
}

static int validate_recover(const ledger_command *cmd)
{
    int rc = validate_endpoint(cmd);
    if (rc != TALLY_ok)
        return rc;
    int64_t since = cmd->u.endpoint.since_ms;
    return since >= 1 && since <= TALLY_TIME_MS_MAX ? TALLY_ok : TALLY_time_out_of_range;
}

static int validate_rotate_secret(const ledger_command *cmd)
{
    const ledger_endpoint *e = &cmd->u.endpoint;
    uint8_t key[STANDARD_SECRET_BYTES_MAX];
    size_t len = 0;
    char why[128];
    int rc = validate_endpoint(cmd);
    if (rc != TALLY_ok)
        return rc;
    if (!standard_secret_decode(e->secret.ptr, e->secret.len, key, &len, why, sizeof(why)))
        return TALLY_invalid_secret;
    return e->overlap_s <= TALLY_ENDPOINT_OVERLAP_S_MAX ? TALLY_ok : TALLY_value_out_of_range;
}

static int validate_endpoint_create(const ledger_command *cmd)
{
    return ledger_endpoint_definition_check(&cmd->u.endpoint, true);
}

static int validate_endpoint_update(const ledger_command *cmd)
{
    return ledger_endpoint_definition_check(&cmd->u.endpoint, false);
}

/* A chain inside a chain. */
static int validate_member_chain(const ledger_command *cmd)
{
    (void)cmd;
    return TALLY_chain_must_not_nest;
}

static int validate_one(const ledger_command *cmd)
{
    const ledger_op_row *row = ledger_op_of(cmd->kind);
    return row ? row->validate(cmd) : TALLY_unknown_command;
}

bool ledger_command_imported(const ledger_command *cmd)
{
    if (cmd->kind == LEDGER_ACCOUNT_OPEN)
        return cmd->u.account_open.flags & LEDGER_ACCOUNT_IMPORTED;
    if (cmd->kind == LEDGER_TRANSFER)
        return cmd->u.transfer.flags & LEDGER_TRANSFER_IMPORTED;
    return false;
}

int ledger_command_import_mix(const ledger_command *first, const ledger_command *cmd)
{
    bool want = ledger_command_imported(first), have = ledger_command_imported(cmd);
    if (want == have)
        return TALLY_ok;
    return want ? TALLY_imported_event_expected : TALLY_imported_event_not_expected;
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
        if (rc == TALLY_ok)
            rc = ledger_command_import_mix(&chain->members[0], &chain->members[i]);
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

/* User data only when set: a command without it keeps the fingerprint it
 * had before user data existed, so keys stored then keep replaying. */
static void fp_user_data(sha256_ctx *h, const ledger_user_data *u)
{
    if (!ledger_user_data_is_set(u))
        return;
    fp_id(h, &u->user_data_128), fp_u64(h, u->user_data_64), fp_u64(h, u->user_data_32);
}

/* An imported record's time; nothing for others, whose fingerprints stay
 * as they were before imports existed. */
static void fp_timestamp(sha256_ctx *h, int64_t timestamp_ms)
{
    if (timestamp_ms != 0)
        fp_u64(h, (uint64_t)timestamp_ms);
}

static void fp_account_open(sha256_ctx *h, const ledger_command *cmd)
{
    const ledger_account_open *a = &cmd->u.account_open;
    fp_u64(h, a->id), fp_u64(h, a->ledger), fp_u64(h, a->code), fp_u64(h, a->flags);
    fp_user_data(h, &a->user_data);
    fp_timestamp(h, a->timestamp_ms);
}

static void fp_transfer(sha256_ctx *h, const ledger_command *cmd)
{
    const ledger_transfer *t = &cmd->u.transfer;
    fp_id(h, &t->id), fp_u64(h, t->debit_account_id), fp_u64(h, t->credit_account_id);
    fp_u64(h, (uint64_t)t->amount), fp_u64(h, t->ledger), fp_u64(h, t->code);
    fp_u64(h, t->flags), fp_u64(h, t->timeout_s);
    fp_user_data(h, &t->user_data);
    fp_timestamp(h, t->timestamp_ms);
}

static void fp_reverse(sha256_ctx *h, const ledger_command *cmd)
{
    const ledger_reverse *r = &cmd->u.reverse;
    fp_id(h, &r->id), fp_id(h, &r->reverses), fp_u8(h, r->amount_given);
    fp_u64(h, (uint64_t)r->amount), fp_u64(h, r->code);
    fp_user_data(h, &r->user_data);
}

/* post and void */
static void fp_hold_step(sha256_ctx *h, const ledger_command *cmd)
{
    fp_id(h, &cmd->u.hold.pending_id), fp_u64(h, (uint64_t)cmd->u.hold.amount);
    /* An amount of 0 sent differs from none sent; other fingerprints
     * stay as they were, so keys stored before keep replaying. */
    if (cmd->u.hold.amount_given && cmd->u.hold.amount == 0)
        fp_u64(h, UINT64_MAX);
}

/* grant, extend and revoke */
static void fp_entitlement(sha256_ctx *h, const ledger_command *cmd)
{
    const ledger_entitlement_command *e = &cmd->u.entitlement;
    fp_str(h, e->subject), fp_str(h, e->feature);
    fp_u64(h, (uint64_t)e->valid_until_ms), fp_u64(h, (uint64_t)e->duration_ms);
    fp_u8(h, e->has_source_order), fp_u64(h, e->source_order);
    fp_u8(h, e->has_grant_transfer);
    if (e->has_grant_transfer)
        fp_id(h, &e->grant_transfer_id);
}

/* not the signed time: a retry signs anew */
static void fp_webhook(sha256_ctx *h, const ledger_command *cmd)
{
    fp_str(h, cmd->u.webhook.source), fp_str(h, cmd->u.webhook.event_id);
    fp_str(h, cmd->u.webhook.body);
}

static void fp_endpoint(sha256_ctx *h, const ledger_command *cmd)
{
    fp_str(h, cmd->u.endpoint.name), fp_str(h, cmd->u.endpoint.reason);
    fp_str(h, cmd->u.endpoint.secret), fp_u64(h, cmd->u.endpoint.overlap_s);
    fp_u64(h, (uint64_t)cmd->u.endpoint.since_ms), fp_u64(h, cmd->u.endpoint.recover_version);
}

/* endpoint_create and endpoint_update: the definition too, each field
 * with whether it was given */
static void fp_endpoint_define(sha256_ctx *h, const ledger_command *cmd)
{
    const ledger_endpoint *e = &cmd->u.endpoint;
    fp_endpoint(h, cmd);
    fp_u8(h, (uint8_t)(e->has_url | e->has_types << 1 | e->has_schedule << 2 |
                       e->has_connect_timeout << 3 | e->has_timeout << 4 | e->has_backfill << 5));
    fp_str(h, e->url), fp_str(h, e->types), fp_str(h, e->schedule), fp_str(h, e->backfill);
    fp_u64(h, e->connect_timeout_ms), fp_u64(h, e->timeout_ms);
}

static void fingerprint_one(sha256_ctx *h, const ledger_command *cmd)
{
    fp_u8(h, (uint8_t)cmd->kind);
    const ledger_op_row *row = ledger_op_of(cmd->kind);
    if (row)
        row->fingerprint(h, cmd);
}

static void fp_chain(sha256_ctx *h, const ledger_command *cmd)
{
    fp_u64(h, cmd->u.chain.count);
    for (uint32_t i = 0; i < cmd->u.chain.count && i < TALLY_CHAIN_COMMANDS_MAX; i++) {
        const ledger_command *m = &cmd->u.chain.members[i];
        if (m->kind == LEDGER_CHAIN) /* rejected as chain_must_not_nest; kind only */
            fp_u8(h, (uint8_t)m->kind);
        else
            fingerprint_one(h, m);
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

/* ---- the op table ---- */

/* A chain inside a chain (ledger.c runs a chain's members itself). */
static int apply_member_chain(struct ledger_ctx *ctx, const ledger_command *cmd)
{
    (void)ctx, (void)cmd;
    return TALLY_chain_must_not_nest;
}

static const ledger_op_row ledger_ops[LEDGER_COMMAND_KIND_END] = {
    [LEDGER_ACCOUNT_OPEN] = {LEDGER_ACCOUNT_OPEN, "account_open", validate_account_open,
                             fp_account_open, ledger_account_open_apply,
                             {LOG_EVENT_ACCOUNT_OPENED}},
    [LEDGER_TRANSFER] = {LEDGER_TRANSFER, "transfer", validate_transfer, fp_transfer,
                         ledger_transfer_apply, {LOG_EVENT_TRANSFER_CREATED}},
    [LEDGER_POST] = {LEDGER_POST, "post", validate_post, fp_hold_step, ledger_hold_post_apply,
                     {LOG_EVENT_TRANSFER_POSTED}},
    [LEDGER_VOID] = {LEDGER_VOID, "void", validate_void, fp_hold_step, ledger_hold_void_apply,
                     {LOG_EVENT_TRANSFER_VOIDED}},
    /* grant and extend first expire an entitlement that is due but not
     * swept yet (entitlement.c) */
    [LEDGER_GRANT] = {LEDGER_GRANT, "grant", validate_grant, fp_entitlement,
                      ledger_entitlement_grant_apply,
                      {LOG_EVENT_ENTITLEMENT_EXPIRED, LOG_EVENT_ENTITLEMENT_GRANTED}},
    [LEDGER_EXTEND] = {LEDGER_EXTEND, "extend", validate_extend, fp_entitlement,
                       ledger_entitlement_extend_apply,
                       {LOG_EVENT_ENTITLEMENT_EXPIRED, LOG_EVENT_ENTITLEMENT_EXTENDED}},
    [LEDGER_REVOKE] = {LEDGER_REVOKE, "revoke", validate_revoke, fp_entitlement,
                       ledger_entitlement_revoke_apply, {LOG_EVENT_ENTITLEMENT_REVOKED}},
    /* as a member: its members' rows say what a chain emits */
    [LEDGER_CHAIN] = {LEDGER_CHAIN, "chain", validate_member_chain, fp_chain,
                      apply_member_chain, {LOG_EVENT_TYPE_NONE}},
    [LEDGER_WEBHOOK_RECEIVE] = {LEDGER_WEBHOOK_RECEIVE, "webhook_receive", validate_webhook,
                                fp_webhook, ledger_webhook_apply,
                                {LOG_EVENT_WEBHOOK_RECEIVED}},
    [LEDGER_REVERSE] = {LEDGER_REVERSE, "transfer_reverse", validate_reverse, fp_reverse,
                        ledger_transfer_reverse_apply, {LOG_EVENT_TRANSFER_CREATED}},
    [LEDGER_ENDPOINT_DISABLE] = {LEDGER_ENDPOINT_DISABLE, "endpoint_disable", validate_endpoint,
                                 fp_endpoint, ledger_endpoint_disable_apply,
                                 {LOG_EVENT_ENDPOINT_DISABLED}},
    [LEDGER_ENDPOINT_ENABLE] = {LEDGER_ENDPOINT_ENABLE, "endpoint_enable", validate_endpoint,
                                fp_endpoint, ledger_endpoint_enable_apply,
                                {LOG_EVENT_ENDPOINT_ENABLED}},
    [LEDGER_ENDPOINT_ROTATE_SECRET] = {LEDGER_ENDPOINT_ROTATE_SECRET, "endpoint_rotate_secret",
                                       validate_rotate_secret, fp_endpoint,
                                       ledger_endpoint_rotate_secret_apply,
                                       {LOG_EVENT_ENDPOINT_SECRET_ROTATED}},
    [LEDGER_ENDPOINT_RECOVER] = {LEDGER_ENDPOINT_RECOVER, "endpoint_recover", validate_recover,
                                 fp_endpoint, ledger_endpoint_recover_apply,
                                 {LOG_EVENT_ENDPOINT_RECOVER_REQUESTED}},
    [LEDGER_ENDPOINT_RECOVERED] = {LEDGER_ENDPOINT_RECOVERED, "endpoint_recovered",
                                   validate_endpoint, fp_endpoint,
                                   ledger_endpoint_recovered_apply,
                                   {LOG_EVENT_ENDPOINT_RECOVERED}},
    [LEDGER_ENDPOINT_CREATE] = {LEDGER_ENDPOINT_CREATE, "endpoint_create",
                                validate_endpoint_create, fp_endpoint_define,
                                ledger_endpoint_create_apply, {LOG_EVENT_ENDPOINT_CREATED}},
    [LEDGER_ENDPOINT_UPDATE] = {LEDGER_ENDPOINT_UPDATE, "endpoint_update",
                                validate_endpoint_update, fp_endpoint_define,
                                ledger_endpoint_update_apply, {LOG_EVENT_ENDPOINT_UPDATED}},
    [LEDGER_ENDPOINT_DELETE] = {LEDGER_ENDPOINT_DELETE, "endpoint_delete", validate_endpoint,
                                fp_endpoint, ledger_endpoint_delete_apply,
                                {LOG_EVENT_ENDPOINT_DELETED}},
};

/* Kinds run 1 .. LEDGER_COMMAND_KIND_END - 1, each with a row (a row left
 * out is a zero row: tests/ledger/check_command.c walks them all). */
_Static_assert(sizeof(ledger_ops) / sizeof(ledger_ops[0]) == LEDGER_COMMAND_KIND_END,
               "the op table has a row for every command kind");
_Static_assert(LEDGER_ACCOUNT_OPEN == 1, "kinds start at 1: row 0 is no kind");

const ledger_op_row *ledger_op_of(ledger_command_kind kind)
{
    if ((unsigned)kind < LEDGER_ACCOUNT_OPEN || (unsigned)kind >= LEDGER_COMMAND_KIND_END)
        return NULL;
    return &ledger_ops[kind];
}

const char *ledger_command_name(ledger_command_kind kind)
{
    const ledger_op_row *row = ledger_op_of(kind);
    return row ? row->name : "unknown";
}
