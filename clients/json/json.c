/*
 * json.c — tally's objects as JSON (jansson): accounts, transfers,
 * entitlements and events, as `tally ... --json` prints them and as
 * tally-relay sends them (docs/RELAY.md). Shared by the CLI and the relay.
 */
#include "config.h"

#include "clients/json/json.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* JSON integers are signed 64-bit: larger values (account ids) become strings. */
json_t *json_u64(uint64_t v)
{
    if (v <= INT64_MAX)
        return json_integer((json_int_t)v);
    char text[24];
    snprintf(text, sizeof(text), "%" PRIu64, v);
    return json_string(text);
}

json_t *json_time(int64_t ms)
{
    char text[40];
    time_format(ms, text);
    return json_string(text);
}

json_t *json_tid(const tally_uuid *id)
{
    char hex[33];
    tid_format(id, hex);
    return json_string(hex);
}

/* The user data, added to an object: user_data_128 as 32 hex digits,
 * as ids are. */
static json_t *with_user_data(json_t *o, const tally_user_data *u)
{
    if (o != NULL &&
        (json_object_set_new(o, "user_data_128", json_tid(&u->user_data_128)) != 0 ||
         json_object_set_new(o, "user_data_64", json_u64(u->user_data_64)) != 0 ||
         json_object_set_new(o, "user_data_32", json_integer(u->user_data_32)) != 0)) {
        json_decref(o);
        return NULL;
    }
    return o;
}

json_t *account_json(const tally_account *a)
{
    json_t *o = json_pack(
        "{s:o, s:I, s:I, s:I, s:b, s:b, s:I, s:I, s:I, s:I, s:o, s:o, s:o?}", "id",
        json_u64(a->id), "ledger", (json_int_t)a->ledger, "code", (json_int_t)a->code, "flags",
        (json_int_t)a->flags, "debits_must_not_exceed_credits",
        (int)((a->flags & TALLY_ACCOUNT_DEBITS_MUST_NOT_EXCEED_CREDITS) != 0),
        "credits_must_not_exceed_debits",
        (int)((a->flags & TALLY_ACCOUNT_CREDITS_MUST_NOT_EXCEED_DEBITS) != 0), "debits_posted",
        (json_int_t)a->debits_posted, "credits_posted", (json_int_t)a->credits_posted,
        "debits_pending", (json_int_t)a->debits_pending, "credits_pending",
        (json_int_t)a->credits_pending, "version", json_u64(a->version), "created_seq",
        json_u64(a->created_seq), "created", a->created_ms ? json_time(a->created_ms) : NULL);
    o = with_user_data(o, &a->user_data);
    if (o != NULL &&
        json_object_set_new(o, "closed", json_boolean(a->flags & TALLY_ACCOUNT_CLOSED)) != 0) {
        json_decref(o);
        return NULL;
    }
    return o;
}

json_t *transfer_json(const tally_transfer_info *x)
{
    json_t *o = json_pack(
        "{s:o, s:o, s:o, s:I, s:I, s:I, s:I, s:b, s:s, s:I, s:o?, s:I, s:o, s:o, s:o, s:o?}", "id",
        json_tid(&x->id), "debit_account_id", json_u64(x->debit_account_id), "credit_account_id",
        json_u64(x->credit_account_id), "amount", (json_int_t)x->amount, "ledger",
        (json_int_t)x->ledger, "code", (json_int_t)x->code, "flags", (json_int_t)x->flags,
        "pending", (int)((x->flags & TALLY_TRANSFER_PENDING) != 0), "state", x->state, "timeout_s",
        (json_int_t)x->timeout_s, "expires_at",
        x->expires_at_ms ? json_time(x->expires_at_ms) : NULL, "posted_amount",
        (json_int_t)x->posted_amount, "version", json_u64(x->version), "created_seq",
        json_u64(x->created_seq), "resolved_seq", json_u64(x->resolved_seq), "created",
        x->created_ms ? json_time(x->created_ms) : NULL);
    o = with_user_data(o, &x->user_data);
    if (o != NULL && (json_object_set_new(o, "reverses", json_tid(&x->reverses)) != 0 ||
                      json_object_set_new(o, "reversed_amount",
                                          json_integer(x->reversed_amount)) != 0)) {
        json_decref(o);
        return NULL;
    }
    return o;
}

json_t *entitlement_json(const tally_entitlement *e)
{
    bool until = !e->lifetime;
    return json_pack("{s:o, s:o, s:s, s:b, s:o?, s:o?, s:o, s:o?, s:o?, s:o?}", "subject",
                     json_text(e->subject), "feature", json_text(e->feature), "state", e->state,
                     "lifetime", (int)e->lifetime, "valid_until",
                     until ? json_time(e->valid_until_ms) : NULL, "valid_until_ms",
                     until ? json_integer(e->valid_until_ms) : NULL, "version",
                     json_u64(e->version), "source_order",
                     e->has_source_order ? json_u64(e->source_order) : NULL, "granted",
                     e->granted_ms ? json_time(e->granted_ms) : NULL, "updated",
                     e->updated_ms ? json_time(e->updated_ms) : NULL);
}

/* The entity of an event: {kind, id} for accounts and transfers, {kind,
 * subject, feature} for entitlements. */
static json_t *entity_json(const tally_event *e)
{
    if (strcmp(e->entity_kind, "account") == 0)
        return json_pack("{s:s, s:o}", "kind", e->entity_kind, "id", json_u64(e->account_id));
    if (strcmp(e->entity_kind, "transfer") == 0)
        return json_pack("{s:s, s:o}", "kind", e->entity_kind, "id", json_tid(&e->transfer_id));
    if (e->kind == TALLY_ENTITY_DEAD_LETTER)
        return json_pack("{s:s, s:o, s:o}", "kind", e->entity_kind, "subscriber",
                         json_text(e->subject), "seq", json_u64(strtoull(e->feature, NULL, 10)));
    if (e->kind == TALLY_ENTITY_ENDPOINT)
        return json_pack("{s:s, s:o}", "kind", e->entity_kind, "name", json_text(e->subject));
    if (e->kind == TALLY_ENTITY_WEBHOOK)
        return json_pack("{s:s, s:o, s:o}", "kind", e->entity_kind, "source",
                         json_text(e->subject), "event_id", json_text(e->feature));
    if (e->kind == TALLY_ENTITY_SUBSCRIBER)
        return json_pack("{s:s, s:o}", "kind", e->entity_kind, "name", json_text(e->subject));
    return json_pack("{s:s, s:o, s:o}", "kind", e->entity_kind, "subject", json_text(e->subject),
                     "feature", json_text(e->feature));
}

json_t *event_json(const tally_event *e)
{
    char id[37];
    tally_uuid_format(&e->id, id);
    return json_pack("{s:o, s:s, s:s, s:s, s:o, s:o, s:o, s:I, s:o?, s:o?}", "seq",
                     json_u64(e->seq), "event_id", id, "type", e->type, "entity_kind",
                     e->entity_kind, "entity", entity_json(e), "entity_version",
                     json_u64(e->entity_version), "time", json_time(e->time_ms), "time_ms",
                     (json_int_t)e->time_ms, "consumer",
                     e->consumer[0] ? json_text(e->consumer) : NULL, "key",
                     e->key[0] ? json_text(e->key) : NULL);
}
