/*
 * invariants_log.c — the checks that walk the log (see invariants_audit.h):
 * log_gap and hash_chain, the fold of rebuild (from genesis, or from the
 * checkpoint at the log retention floor), the inbox links of each event,
 * and the history index against the log's transfer events.
 */
#include "ledger/invariants_audit.h"

#include "common/clock.h"
#include "common/error.h"
#include "common/limits.h"
#include "common/msgpack_safe.h"
#include "ledger/history.h"
#include "ledger/history_block.h"
#include "log/log.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

/* ---- fold ---- */

ledger_account *audit_fold_account(audit *a, uint64_t id)
{
    uint8_t key[8];
    put_u64_be(key, id);
    return table_find(a->accounts, key, 8);
}

/* Field by field: every field the stored record holds (it runs twice per
 * transfer event). */
bool audit_accounts_equal(const ledger_account *x, const ledger_account *y)
{
    return x->id == y->id && x->ledger == y->ledger && x->code == y->code &&
           x->flags == y->flags && x->debits_posted == y->debits_posted &&
           x->credits_posted == y->credits_posted && x->debits_pending == y->debits_pending &&
           x->credits_pending == y->credits_pending && x->version == y->version &&
           x->created_seq == y->created_seq && x->created_ms == y->created_ms &&
           tally_id128_equal(&x->user_data.user_data_128, &y->user_data.user_data_128) &&
           x->user_data.user_data_64 == y->user_data.user_data_64 &&
           x->user_data.user_data_32 == y->user_data.user_data_32;
}

/* creation_times: a record's created_ms is its event's commit time, or,
 * imported, a time before it and past the mark: every earlier event's
 * time and import's (the rule ledger/imported.c keeps); 0 is a record from
 * before creation times were kept. */
static void check_creation_time(audit *a, const log_event *ev, bool imported,
                                int64_t created_ms, const char *name)
{
    if (created_ms == 0)
        return;
    bool ok = imported ? created_ms < ev->time_ms && created_ms > a->time_mark_ms
                       : created_ms == ev->time_ms;
    if (!ok)
        audit_report(a, "creation_times", name,
                     "%screated_ms %" PRId64 " at seq %" PRIu64 ": its event's time is %" PRId64
                     ", the times before it reach %" PRId64,
                     imported ? "imported, " : "", created_ms, ev->seq, ev->time_ms,
                     a->time_mark_ms);
}

/* The mark after ev (see check_creation_time): an import's own time, else
 * the event's. */
static void mark_time(audit *a, const log_event *ev, int64_t imported_ms)
{
    if (imported_ms != 0)
        a->time_mark_ms = imported_ms;
    else if (ev->time_ms > a->time_mark_ms)
        a->time_mark_ms = ev->time_ms;
}

static void fold_account_opened(audit *a, const log_event *ev)
{
    char name[64];
    ledger_account acc;
    audit_name_seq(ev->seq, name);
    if (ledger_account_unpack(log_event_part(ev, LOG_PART_ACCOUNT), &acc) != TALLY_ok) {
        audit_report(a, "rebuild", name, "account.opened body is not an account");
        return;
    }
    audit_name_account(acc.id, name);
    bool imported = acc.flags & LEDGER_ACCOUNT_IMPORTED;
    check_creation_time(a, ev, imported, acc.created_ms, name);
    mark_time(a, ev, imported ? acc.created_ms : 0);
    int inserted;
    uint8_t key[8];
    put_u64_be(key, acc.id);
    ledger_account *slot = table_upsert(a->accounts, key, 8, &inserted);
    if (!slot) {
        a->fault = TALLY_out_of_memory;
        return;
    }
    if (!inserted) {
        audit_report(a, "rebuild", name, "opened twice (seq %" PRIu64 ")", ev->seq);
        return;
    }
    if (acc.version != 1 || acc.debits_posted || acc.credits_posted || acc.debits_pending ||
        acc.credits_pending || acc.created_seq != ev->seq || ev->entity_version != 1)
        audit_report(a, "rebuild", name, "opened with non-initial state at seq %" PRIu64, ev->seq);
    *slot = acc;
    slot->version = 1;
    slot->created_seq = ev->seq;
    slot->debits_posted = slot->credits_posted = 0;
    slot->debits_pending = slot->credits_pending = 0;
}

/* Compare the event's account snapshots with the fold. */
static void compare_snapshots(audit *a, const log_event *ev, const ledger_account *dr,
                              const ledger_account *cr)
{
    const char *names[2] = {"debit_account", "credit_account"};
    const log_body_part parts[2] = {LOG_PART_DEBIT_ACCOUNT, LOG_PART_CREDIT_ACCOUNT};
    const ledger_account *folded[2] = {dr, cr};
    for (int i = 0; i < 2; i++) {
        ledger_account snap;
        char name[64];
        bool missing =
            ledger_account_unpack(log_event_part(ev, parts[i]), &snap) != TALLY_ok;
        if (!missing && audit_accounts_equal(&snap, folded[i]))
            continue;
        audit_name_account(folded[i]->id, name); /* only now: this runs for every event */
        if (missing)
            audit_report(a, "rebuild", name, "seq %" PRIu64 ": %s snapshot missing", ev->seq,
                   names[i]);
        else
            audit_report(a, "rebuild", name,
                   "seq %" PRIu64 ": snapshot differs from the fold (version %" PRIu64
                   " vs %" PRIu64 ")",
                   ev->seq, snap.version, folded[i]->version);
    }
}

static bool add_checked(int64_t *field, int64_t delta)
{
    if (delta > 0 && *field > INT64_MAX - delta)
        return false;
    *field += delta;
    return *field >= 0;
}

/* Apply pending/posted deltas to both accounts of a transfer. */
static bool move_amounts(ledger_account *dr, ledger_account *cr, int64_t pending,
                         int64_t posted)
{
    bool ok = add_checked(&dr->debits_pending, pending) &&
              add_checked(&cr->credits_pending, pending) &&
              add_checked(&dr->debits_posted, posted) && add_checked(&cr->credits_posted, posted);
    dr->version++;
    cr->version++;
    return ok;
}

/* ---- history: the log's transfer events against the history index ----
 *
 * Each side is summed up as a multiset fingerprint: the number of entries
 * (account, seq) and two sums of keyed 64-bit hashes of them.
 * Equal fingerprints mean equal multisets but for a chance of about 2^-64
 * per sum (the keys are random per run, so no store can be made to
 * collide); this spares two lookups per transfer event, most of the cost
 * of the check. When they differ, find_history_differences looks every
 * entry up to name the accounts concerned. */
static void history_sums_add(const audit *a, history_sums *s, uint64_t account, uint64_t seq)
{
    const uint64_t words[2] = {account, seq};
    s->count++;
    for (int k = 0; k < 2; k++) {
        uint64_t x = a->history_keys[k];
        for (int i = 0; i < 2; i++)
            x = audit_mix64(x ^ words[i]);
        s->sum[k] += x;
    }
}

/* Both accounts of a transfer event list it in their history. */
static void check_history(audit *a, const log_event *ev, const ledger_transfer_record *tr)
{
    history_sums_add(a, &a->history_log, tr->debit_account_id, ev->seq);
    history_sums_add(a, &a->history_log, tr->credit_account_id, ev->seq);
}

/* A closing transfer closes its accounts when created, and reopens them
 * when voided or expired. */
static void fold_closing(ledger_account *dr, ledger_account *cr, uint16_t flags, bool close)
{
    ledger_account *sides[2] = {dr, cr};
    const uint16_t bits[2] = {LEDGER_TRANSFER_CLOSING_DEBIT, LEDGER_TRANSFER_CLOSING_CREDIT};
    for (int i = 0; i < 2; i++)
        if (flags & bits[i])
            sides[i]->flags = close ? (uint16_t)(sides[i]->flags | LEDGER_ACCOUNT_CLOSED)
                                    : (uint16_t)(sides[i]->flags & ~LEDGER_ACCOUNT_CLOSED);
}

static void fold_transfer_event(audit *a, const log_event *ev)
{
    char name[64]; /* named only for a finding: this runs for every transfer event */
    ledger_transfer_record tr;
    if (ledger_transfer_unpack(log_event_part(ev, LOG_PART_TRANSFER), &tr) != TALLY_ok) {
        audit_report(a, "rebuild", AUDIT_SEQ(name, ev->seq), "transfer event body is not a transfer");
        return;
    }
    ledger_account *dr = audit_fold_account(a, tr.debit_account_id);
    ledger_account *cr = audit_fold_account(a, tr.credit_account_id);
    if (!dr || !cr) {
        audit_report(a, "rebuild", AUDIT_TRANSFER(name, &tr.id), "seq %" PRIu64 ": account not opened before", ev->seq);
        return;
    }
    bool created = log_event_type_is(ev, LOG_EVENT_TRANSFER_CREATED);
    bool imported = created && (tr.flags & LEDGER_TRANSFER_IMPORTED);
    if (created)
        check_creation_time(a, ev, imported, tr.created_ms, AUDIT_TRANSFER(name, &tr.id));
    mark_time(a, ev, imported ? tr.created_ms : 0);
    bool pending = tr.flags & LEDGER_TRANSFER_PENDING;
    int inserted = 0;
    hold_state *hold = NULL;
    if (pending) {
        hold = table_upsert(a->holds, tr.id.bytes, 16, &inserted);
        if (!hold) {
            a->fault = TALLY_out_of_memory;
            return;
        }
    }
    bool ok;
    if (created) {
        if (pending && !inserted)
            audit_report(a, "rebuild", AUDIT_TRANSFER(name, &tr.id), "hold created twice (seq %" PRIu64 ")", ev->seq);
        ok = move_amounts(dr, cr, pending ? tr.amount : 0, pending ? 0 : tr.amount);
        fold_closing(dr, cr, tr.flags, true);
        if (pending) {
            hold->amount = tr.amount;
            hold->version = tr.version;
            hold->state = tr.state;
        }
    } else if (!pending || inserted) {
        audit_report(a, "hold_resolution", AUDIT_TRANSFER(name, &tr.id), "seq %" PRIu64 ": resolves an unknown hold",
               ev->seq);
        return;
    } else if (hold->resolved) {
        audit_report(a, "hold_resolution", AUDIT_TRANSFER(name, &tr.id), "resolved again at seq %" PRIu64, ev->seq);
        return;
    } else {
        int64_t posted = log_event_type_is(ev, LOG_EVENT_TRANSFER_POSTED) ? tr.posted_amount : 0;
        ok = posted <= hold->amount && move_amounts(dr, cr, -hold->amount, posted);
        if (!log_event_type_is(ev, LOG_EVENT_TRANSFER_POSTED))
            fold_closing(dr, cr, tr.flags, false); /* voided or expired: reopened */
        hold->resolved = true;
        hold->version = tr.version;
        hold->state = tr.state;
    }
    if (!ok)
        audit_report(a, "rebuild", AUDIT_TRANSFER(name, &tr.id), "seq %" PRIu64 ": amounts do not fold", ev->seq);
    compare_snapshots(a, ev, dr, cr);
    check_history(a, ev, &tr);
}

static void fold_entitlement_event(audit *a, const log_event *ev)
{
    char name[256];
    ledger_entitlement e;
    if (ledger_entitlement_unpack(log_event_part(ev, LOG_PART_ENTITLEMENT), &e) !=
        TALLY_ok) {
        audit_name_seq(ev->seq, name);
        audit_report(a, "rebuild", name, "entitlement event body is not an entitlement");
        return;
    }
    audit_name_entitlement(&e, name);
    uint8_t key[LEDGER_ENTITLEMENT_KEY_BYTES_MAX];
    size_t key_len = ledger_entitlement_key_of(&e, key);
    int inserted;
    folded_entitlement *slot = table_upsert(a->entitlements, key, key_len, &inserted);
    if (!slot) {
        a->fault = TALLY_out_of_memory;
        return;
    }
    uint64_t expect_version = inserted ? 1 : slot->version + 1;
    static const struct { log_event_type type; uint8_t state; } kinds[] = {
        {LOG_EVENT_ENTITLEMENT_GRANTED, LEDGER_ENTITLEMENT_ACTIVE},
        {LOG_EVENT_ENTITLEMENT_EXTENDED, LEDGER_ENTITLEMENT_ACTIVE},
        {LOG_EVENT_ENTITLEMENT_REVOKED, LEDGER_ENTITLEMENT_REVOKED},
        {LOG_EVENT_ENTITLEMENT_EXPIRED, LEDGER_ENTITLEMENT_EXPIRED},
    };
    log_event_type type;
    log_event_type_of(ev->type, &type);
    int kind = -1;
    for (int i = 0; i < 4; i++)
        if (type == kinds[i].type)
            kind = i;
    if (kind < 0 || e.state != kinds[kind].state)
        audit_report(a, "rebuild", name, "seq %" PRIu64 ": state does not match event type", ev->seq);
    bool legal = kind == 0 ? inserted || slot->state != LEDGER_ENTITLEMENT_ACTIVE
               : kind == 1 ? !inserted && slot->state != LEDGER_ENTITLEMENT_REVOKED
               : kind == 2 ? !inserted && slot->state != LEDGER_ENTITLEMENT_REVOKED
               : !inserted && slot->state == LEDGER_ENTITLEMENT_ACTIVE;
    if (kind >= 0 && !legal)
        audit_report(a, "rebuild", name, "seq %" PRIu64 ": illegal transition", ev->seq);
    if (e.version != expect_version || ev->entity_version != e.version)
        audit_report(a, "rebuild", name, "seq %" PRIu64 ": version %" PRIu64 ", expected %" PRIu64,
               ev->seq, e.version, expect_version);
    ledger_entitlement_encode(&e, slot->record);
    slot->state = e.state;
    slot->version = e.version;
}

/* Without the fold (options->skip_rebuild): only the history entries of
 * transfer events. */
static void check_event_history(audit *a, const log_event *ev)
{
    ledger_transfer_record tr;
    if (ev->entity.kind == LOG_ENTITY_TRANSFER &&
        ledger_transfer_unpack(log_event_part(ev, LOG_PART_TRANSFER), &tr) == TALLY_ok)
        check_history(a, ev, &tr);
}

/* A dead_letter.expired event changes no account or entitlement: it must
 * be well-formed, its body naming the dead letter its entity names. */
static void check_dead_letter_event(audit *a, const log_event *ev)
{
    const msgpack_object *row = log_event_part(ev, LOG_PART_DEAD_LETTER);
    msgpack_record_reader r = msgpack_record_read(row);
    tally_str name, error;
    uint64_t seq = 0, attempts = 0;
    int64_t parked_ms = 0;
    bool ok = row != NULL && msgpack_record_fields(&r) >= 5 &&
              msgpack_safe_get_str(msgpack_record_next(&r, "subscriber"), &name) &&
              msgpack_safe_get_u64(msgpack_record_next(&r, "seq"), &seq) &&
              msgpack_safe_get_u64(msgpack_record_next(&r, "attempts"), &attempts) &&
              msgpack_safe_get_i64(msgpack_record_next(&r, "parked_ms"), &parked_ms) &&
              msgpack_safe_get_str(msgpack_record_next(&r, "error"), &error);
    if (!ok || !log_event_type_is(ev, LOG_EVENT_DEAD_LETTER_EXPIRED) ||
        !tally_str_equal(name, ev->entity.subscriber) || seq != ev->entity.letter_seq ||
        seq == 0 || seq >= ev->seq || ev->entity_version != 1 || parked_ms > ev->time_ms ||
        ev->has_causation) {
        char where[64];
        audit_name_seq(ev->seq, where);
        audit_report(a, "rebuild", where, "a dead_letter event that does not hold together");
    }
}

/* A webhook.received event changes no account or entitlement: it must be
 * well-formed, its body naming the delivery its entity names, caused by
 * the inbox key (webhook:<source>, event id). */
static void check_webhook_event(audit *a, const log_event *ev)
{
    const msgpack_object *row = log_event_part(ev, LOG_PART_WEBHOOK);
    msgpack_record_reader r = msgpack_record_read(row);
    tally_str source, id;
    const void *body;
    size_t body_len;
    int64_t signed_at_s = 0;
    bool ok = row != NULL && msgpack_record_fields(&r) >= 5 &&
              msgpack_safe_get_str(msgpack_record_next(&r, "source"), &source) &&
              msgpack_safe_get_str(msgpack_record_next(&r, "event_id"), &id) &&
              msgpack_record_next(&r, "event_type") != NULL &&
              msgpack_safe_get_i64(msgpack_record_next(&r, "signed_at_s"), &signed_at_s) &&
              msgpack_safe_get_bin(msgpack_record_next(&r, "body"), &body, &body_len);
    static const char prefix[] = TALLY_WEBHOOK_CONSUMER_PREFIX;
    const size_t plen = sizeof(prefix) - 1;
    if (!ok || !log_event_type_is(ev, LOG_EVENT_WEBHOOK_RECEIVED) ||
        !tally_str_equal(source, ev->entity.webhook_source) ||
        !tally_str_equal(id, ev->entity.webhook_event_id) || ev->entity_version != 1 ||
        !ev->has_causation || !tally_str_equal(ev->key, id) ||
        ev->consumer.len != plen + source.len || memcmp(ev->consumer.ptr, prefix, plen) != 0 ||
        memcmp(ev->consumer.ptr + plen, source.ptr, source.len) != 0) {
        char where[64];
        audit_name_seq(ev->seq, where);
        audit_report(a, "rebuild", where, "a webhook event that does not hold together");
    }
}

/* A subscriber.expired event changes no account or entitlement: it must
 * be well-formed, its body naming the subscriber its entity names. */
static void check_subscriber_event(audit *a, const log_event *ev)
{
    const msgpack_object *row = log_event_part(ev, LOG_PART_SUBSCRIBER);
    msgpack_record_reader r = msgpack_record_read(row);
    tally_str name;
    uint64_t ack_floor = 0, delivered = 0;
    bool ok = row != NULL && msgpack_record_fields(&r) >= 8 &&
              msgpack_safe_get_str(msgpack_record_next(&r, "name"), &name) &&
              msgpack_safe_get_u64(msgpack_record_next(&r, "ack_floor"), &ack_floor) &&
              msgpack_safe_get_u64(msgpack_record_next(&r, "delivered_seq"), &delivered);
    if (!ok || !log_event_type_is(ev, LOG_EVENT_SUBSCRIBER_EXPIRED) ||
        !tally_str_equal(name, ev->entity.subscriber) || ack_floor > delivered ||
        delivered >= ev->seq || ev->entity_version != 1 || ev->has_causation) {
        char where[64];
        audit_name_seq(ev->seq, where);
        audit_report(a, "rebuild", where, "a subscriber event that does not hold together");
    }
}

/* An endpoint event changes no account or entitlement: it must be
 * well-formed, its body naming its entity's endpoint and the state its
 * type says. */
static void check_endpoint_event(audit *a, const log_event *ev)
{
    const msgpack_object *row = log_event_part(ev, LOG_PART_ENDPOINT);
    msgpack_record_reader r = msgpack_record_read(row);
    tally_str name = {0}, state = {0}, reason = {0};
    int64_t until_ms = 0;
    bool ok = row != NULL && msgpack_record_fields(&r) >= 4 &&
              msgpack_safe_get_str(msgpack_record_next(&r, "name"), &name) &&
              msgpack_safe_get_str(msgpack_record_next(&r, "state"), &state) &&
              msgpack_safe_get_str(msgpack_record_next(&r, "reason"), &reason) &&
              msgpack_safe_get_i64(msgpack_record_next(&r, "previous_secret_until_ms"), &until_ms);
    bool disabled = tally_str_equal(state, tally_str_from("disabled"));
    bool typed = log_event_type_is(ev, LOG_EVENT_ENDPOINT_SECRET_ROTATED) ||
                 log_event_type_is(ev, LOG_EVENT_ENDPOINT_RECOVER_REQUESTED) ||
                 log_event_type_is(ev, LOG_EVENT_ENDPOINT_RECOVERED) ||
                 log_event_type_is(ev, LOG_EVENT_ENDPOINT_CREATED) ||
                 log_event_type_is(ev, LOG_EVENT_ENDPOINT_UPDATED) ||
                 log_event_type_is(ev, LOG_EVENT_ENDPOINT_DELETED) ||
                 log_event_type_is(ev, disabled ? LOG_EVENT_ENDPOINT_DISABLED
                                                : LOG_EVENT_ENDPOINT_ENABLED);
    if (!ok || !typed || !tally_str_equal(name, ev->entity.endpoint) ||
        (!disabled && !tally_str_equal(state, tally_str_from("enabled"))) ||
        (!disabled && reason.len > 0) || until_ms < 0 || !ev->has_causation) {
        char where[64];
        audit_name_seq(ev->seq, where);
        audit_report(a, "rebuild", where, "an endpoint event that does not hold together");
    }
}

static void fold_event(audit *a, const log_event *ev)
{
    if (a->opt->skip_rebuild) {
        check_event_history(a, ev);
        return;
    }
    if (!log_event_type_is(ev, LOG_EVENT_ACCOUNT_OPENED) && ev->entity.kind != LOG_ENTITY_TRANSFER)
        mark_time(a, ev, 0); /* the folds of accounts and transfers mark their own */
    if (log_event_type_is(ev, LOG_EVENT_ACCOUNT_OPENED))
        fold_account_opened(a, ev);
    else if (ev->entity.kind == LOG_ENTITY_TRANSFER)
        fold_transfer_event(a, ev);
    else if (ev->entity.kind == LOG_ENTITY_ENTITLEMENT)
        fold_entitlement_event(a, ev);
    else if (ev->entity.kind == LOG_ENTITY_DEAD_LETTER)
        check_dead_letter_event(a, ev);
    else if (ev->entity.kind == LOG_ENTITY_WEBHOOK)
        check_webhook_event(a, ev);
    else if (ev->entity.kind == LOG_ENTITY_SUBSCRIBER)
        check_subscriber_event(a, ev);
    else if (ev->entity.kind == LOG_ENTITY_ENDPOINT)
        check_endpoint_event(a, ev);
    else {
        char name[64];
        audit_name_seq(ev->seq, name);
        audit_report(a, "rebuild", name, "unknown event type %.*s", (int)ev->type.len, ev->type.ptr);
    }
}

/* ---- the checkpoint: the fold's state at the log retention floor ---- */

static int seed_one(char kind, const msgpack_object *o, void *ctx)
{
    audit *a = ctx;
    int inserted;
    if (kind == 'a') {
        ledger_account acc;
        if (ledger_account_unpack(o, &acc) != TALLY_ok) {
            audit_report(a, "rebuild", "checkpoint", "an account snapshot does not decode");
            return TALLY_ok;
        }
        uint8_t key[8];
        put_u64_be(key, acc.id);
        ledger_account *slot = table_upsert(a->accounts, key, 8, &inserted);
        if (!slot)
            return TALLY_out_of_memory;
        *slot = acc;
    } else if (kind == 't') {
        ledger_transfer_record tr;
        if (ledger_transfer_unpack(o, &tr) != TALLY_ok) {
            audit_report(a, "rebuild", "checkpoint", "a hold snapshot does not decode");
            return TALLY_ok;
        }
        hold_state *h = table_upsert(a->holds, tr.id.bytes, 16, &inserted);
        if (!h)
            return TALLY_out_of_memory;
        *h = (hold_state){.amount = tr.amount, .version = tr.version, .state = tr.state,
                          .resolved = tr.state != LEDGER_TRANSFER_PENDING_STATE};
    } else if (kind == 'e') {
        ledger_entitlement e;
        if (ledger_entitlement_unpack(o, &e) != TALLY_ok) {
            audit_report(a, "rebuild", "checkpoint", "an entitlement snapshot does not decode");
            return TALLY_ok;
        }
        uint8_t key[LEDGER_ENTITLEMENT_KEY_BYTES_MAX];
        size_t n = ledger_entitlement_key_of(&e, key);
        folded_entitlement *slot = table_upsert(a->entitlements, key, n, &inserted);
        if (!slot)
            return TALLY_out_of_memory;
        ledger_entitlement_encode(&e, slot->record);
        slot->state = e.state;
        slot->version = e.version;
    } else {
        audit_report(a, "rebuild", "checkpoint", "unknown snapshot kind");
    }
    return TALLY_ok;
}

/* With log retention the fold starts from the checkpoint instead of empty. */
int audit_seed_from_checkpoint(audit *a)
{
    int rc = ledger_log_floor_get(a->t, &a->floor);
    if (rc == TALLY_ok)
        rc = ledger_inbox_swept_ms(a->t, &a->inbox_swept_ms);
    if (rc == TALLY_ok && a->floor.seq > 0 && !a->opt->skip_rebuild)
        rc = ledger_checkpoint_each(a->t, seed_one, a);
    return rc;
}

/* ---- inbox links, per event ---- */

/* The inbox record of an event's cause, through one cursor for the whole
 * walk: LMDB searches a cursor's current page first, so causes that come in
 * key order (time-ordered keys such as UUIDv7) need no descent from the
 * root. As ledger_inbox_get otherwise. */
static int cause_record(audit *a, const log_event *ev, ledger_inbox_record *rec)
{
    int rc = a->inbox_cursor ? TALLY_ok
                             : store_cursor_open(a->t, STORE_DB_INBOX, &a->inbox_cursor);
    uint8_t k[LEDGER_INBOX_KEY_BYTES_MAX];
    size_t n = ledger_inbox_key(ev->consumer, ev->key, k);
    MDB_val key = {n, k}, val;
    if (rc == TALLY_ok)
        rc = store_translate(mdb_cursor_get(a->inbox_cursor, &key, &val, MDB_SET));
    /* a UUID key's record of a store upgraded from before format 12 */
    if (rc == TALLY_not_found && (n = ledger_inbox_key_text(ev->consumer, ev->key, k)) != 0) {
        key = (MDB_val){n, k};
        rc = store_translate(mdb_cursor_get(a->inbox_cursor, &key, &val, MDB_SET));
    }
    if (rc == TALLY_ok)
        rc = ledger_inbox_decode(k, n, val.mv_data, val.mv_size, rec);
    rec->consumer = ev->consumer; /* not the stack copy of the key */
    rec->key = ev->key;
    return rc;
}

static void check_event_causation(audit *a, const log_event *ev)
{
    if (!ev->has_causation)
        return;
    char name[64]; /* named only for a finding */
    if (ev->consumer.len == 0 || ev->consumer.len > TALLY_CONSUMER_BYTES_MAX ||
        ev->key.len == 0 || ev->key.len > TALLY_KEY_BYTES_MAX) {
        audit_report(a, "inbox_links", AUDIT_SEQ(name, ev->seq), "causation is malformed");
        return;
    }
    ledger_inbox_record rec;
    int rc = cause_record(a, ev, &rec);
    if (rc == TALLY_not_found && ev->time_ms <= a->inbox_swept_ms)
        return; /* removed by inbox retention with the rest of its time */
    if (rc == TALLY_not_found)
        audit_report(a, "inbox_links", AUDIT_SEQ(name, ev->seq), "caused by %.*s/%.*s which has no inbox record",
               (int)ev->consumer.len, ev->consumer.ptr, (int)ev->key.len, ev->key.ptr);
    else if (rc != TALLY_ok)
        audit_report(a, "inbox_links", AUDIT_SEQ(name, ev->seq), "inbox record unreadable: %s", tally_strerror(rc));
    else if (rec.outcome.code != TALLY_ok || ev->seq < rec.outcome.first_seq ||
             ev->seq >= rec.outcome.first_seq + rec.outcome.event_count)
        audit_report(a, "inbox_links", AUDIT_SEQ(name, ev->seq), "inbox record of %.*s/%.*s does not cover this event",
               (int)ev->consumer.len, ev->consumer.ptr, (int)ev->key.len, ev->key.ptr);
    else
        a->events_covered++;
}

/* ---- the log walk: gaps, chain, fold ---- */

typedef struct log_walk {
    audit *a;
    uint64_t head_seq;
    log_chain chain;
} log_walk;

/* Everything the walk checks of one event, decoded or not (d->rc). */
static int walk_decoded(log_walk *w, audit_decoded_event *d)
{
    audit *a = w->a;
    char name[64]; /* named only for a finding: this runs for every event */
    uint64_t expected = w->chain.expect_seq;
    const log_event *ev = &d->ev;
    unsigned faults = log_chain_step(&w->chain, d->seq, d->rc == TALLY_ok ? ev : NULL);
    if (faults & LOG_CHAIN_GAP)
        audit_report(a, "log_gap", AUDIT_SEQ(name, d->seq), "expected seq %" PRIu64, expected);
    a->stats->events++;
    if (faults & LOG_CHAIN_UNDECODED) {
        audit_report(a, "hash_chain", AUDIT_SEQ(name, d->seq), "event does not decode or its hash is wrong");
    } else {
        if (faults & LOG_CHAIN_SEQ_DIFFERS)
            audit_report(a, "hash_chain", AUDIT_SEQ(name, d->seq), "event carries seq %" PRIu64, ev->seq);
        if (faults & LOG_CHAIN_LINK)
            audit_report(a, "hash_chain", AUDIT_SEQ(name, d->seq), "prev_hash does not match the previous event");
        fold_event(a, ev);
        check_event_causation(a, ev);
        if (a->opt->each_event)
            a->opt->each_event(ev, a->opt->each_event_ctx);
    }
    audit_progress(a, "log", a->stats->events, w->head_seq);
    return a->fault;
}

static int walk_decoded_fn(audit_decoded_event *d, void *ctx) { return walk_decoded(ctx, d); }

int audit_check_log(audit *a)
{
    log_head head;
    int rc = log_head_get(a->t, &head);
    if (rc != TALLY_ok)
        return rc;
    a->head_seq = head.seq;
    log_walk w = {.a = a, .head_seq = head.seq};
    log_chain_start(&w.chain, a->floor.seq + 1, a->floor.hash); /* zeros without retention */
    /* Decoding (msgpack and the hash) is most of the work: it runs on a
     * thread of its own over the same snapshot when it can (invariants_pipe.c). */
    rc = audit_decode_log(a, walk_decoded_fn, &w);
    if (rc != TALLY_ok)
        return rc;
    char name[64];
    audit_name_seq(head.seq, name);
    unsigned end = log_chain_end(&w.chain, &head);
    if (end == LOG_CHAIN_HEAD_GAP)
        audit_report(a, "log_gap", name, "meta head is %" PRIu64 " but the log ends at %" PRIu64,
               head.seq, w.chain.expect_seq - 1);
    else if (end == LOG_CHAIN_HEAD_HASH)
        audit_report(a, "hash_chain", name, "meta head hash differs from the last event's");
    return TALLY_ok;
}

/* ---- the history index against the log (see history_sums) ---- */

void audit_history_keys_init(audit *a)
{
    if (getrandom(a->history_keys, sizeof(a->history_keys), 0) != sizeof(a->history_keys)) {
        /* no kernel randomness: still differs per run */
        uint64_t now_ms = (uint64_t)clock_wall_ms();
        a->history_keys[0] = audit_mix64(now_ms ^ (uint64_t)getpid());
        a->history_keys[1] = audit_mix64(now_ms + a->history_keys[0]);
    }
}

/* A transfer event's entries that the index lacks (or holds for another
 * transfer). */
static int find_missing_history(uint64_t seq, const void *bytes, size_t len, void *ctx)
{
    audit *a = ctx;
    msgpack_unpacked up;
    msgpack_unpacked_init(&up);
    log_event ev;
    ledger_transfer_record tr;
    if (log_event_decode(bytes, len, &up, &ev) == TALLY_ok &&
        ev.entity.kind == LOG_ENTITY_TRANSFER &&
        ledger_transfer_unpack(log_event_part(&ev, LOG_PART_TRANSFER), &tr) == TALLY_ok) {
        uint64_t ids[2] = {tr.debit_account_id, tr.credit_account_id};
        for (int i = 0; i < 2; i++) {
            char name[64];
            audit_name_account(ids[i], name);
            if (ledger_history_has(a->t, ids[i], seq) != TALLY_ok)
                audit_report(a, "history", name, "no history entry for seq %" PRIu64, seq);
        }
    }
    msgpack_unpacked_destroy(&up);
    audit_progress(a, "history log", seq, a->head_seq);
    return a->fault;
}

/* An index entry must name a transfer event of its account (and, in the
 * entries that still hold a transfer id as their value, that transfer). */
static void check_history_entry(audit *a, uint64_t account, uint64_t seq,
                                const uint8_t *transfer_id)
{
    char name[64];
    audit_name_account(account, name);
    msgpack_unpacked up;
    msgpack_unpacked_init(&up);
    log_event ev;
    ledger_transfer_record tr;
    int rc = log_event_load(a->t, seq, &up, &ev);
    if (rc == TALLY_not_found)
        audit_report(a, "history", name, "entry for seq %" PRIu64 ": no such event", seq);
    if (rc == TALLY_ok && /* else: missing, or hash_chain's finding */
        (ev.entity.kind != LOG_ENTITY_TRANSFER ||
         ledger_transfer_unpack(log_event_part(&ev, LOG_PART_TRANSFER), &tr) != TALLY_ok ||
         (transfer_id != NULL && memcmp(tr.id.bytes, transfer_id, 16) != 0) ||
         (tr.debit_account_id != account && tr.credit_account_id != account)))
        audit_report(a, "history", name, "entry for seq %" PRIu64 " names no transfer of the account",
               seq);
    msgpack_unpacked_destroy(&up);
}

/* A "history" entry, a block of an account's seqs (ledger/history_block.h;
 * one seq with its transfer id in stores from before December 2026): well
 * formed and above the account's block before; its seqs' fingerprints
 * into *sums, or (sums NULL) each checked against the log. */
static void history_entry(audit *a, const MDB_val *k, const MDB_val *v, void *ctx)
{
    history_sums *sums = ctx;
    history_block b;
    const char *why;
    if (ledger_history_block_decode(k, v, &b, &why) != TALLY_ok) {
        if (sums)
            audit_report(a, "history", "history", "an entry of %zu/%zu bytes is corrupt: %s",
                         k->mv_size, v->mv_size, why);
        return;
    }
    if (sums && b.account_id == a->block_account && b.seqs[0] <= a->block_last) {
        char name[64];
        audit_name_account(b.account_id, name);
        audit_report(a, "history", name,
                     "block seq %" PRIu64 " is not above the block before's (%" PRIu64 ")",
                     b.seqs[0], a->block_last);
    }
    a->block_account = b.account_id;
    a->block_last = b.seqs[b.count - 1];
    for (uint32_t i = 0; i < b.count; i++) {
        if (sums)
            history_sums_add(a, sums, b.account_id, b.seqs[i]);
        /* The sums cover (account, seq): an old entry's transfer id is
         * checked against its event in the first walk (sums given); the
         * second walk, run when the sums differ, checks the others. */
        if (sums ? b.transfer_id != NULL : b.transfer_id == NULL)
            check_history_entry(a, b.account_id, b.seqs[i], b.transfer_id);
    }
}

/* A "history_tail" record (account id -> format, seqs): well formed, every
 * seq above the account's largest in "history"; its seqs' fingerprints
 * into *sums, or (sums NULL) each checked against the log. */
static void history_tail_entry(audit *a, const MDB_val *k, const MDB_val *v, void *ctx)
{
    history_sums *sums = ctx;
    if (k->mv_size != 8) {
        if (sums)
            audit_report(a, "history", "history_tail", "a key of %zu bytes is corrupt", k->mv_size);
        return;
    }
    uint64_t account = get_u64_be(k->mv_data), seqs[HISTORY_TAIL_MAX], last;
    uint32_t n;
    const char *why;
    char name[64];
    audit_name_account(account, name);
    if (ledger_history_tail_decode(v, seqs, &n, &why) != TALLY_ok) {
        if (sums)
            audit_report(a, "history", name, "tail record is corrupt: %s", why);
        return;
    }
    for (uint32_t i = 0; i < n; i++) {
        if (sums)
            history_sums_add(a, sums, account, seqs[i]);
        else
            check_history_entry(a, account, seqs[i], NULL);
    }
    int rc = sums ? ledger_history_indexed_last(a->t, account, &last) : TALLY_not_found;
    if (rc == TALLY_ok && seqs[0] <= last)
        audit_report(a, "history", name,
                     "tail seq %" PRIu64 " is not above the indexed seq %" PRIu64, seqs[0], last);
    else if (rc != TALLY_ok && rc != TALLY_not_found)
        a->fault = rc;
}

/* A "history_recent" record (number -> format, keys): well formed, its
 * seqs above the record before's and above their accounts' tails and
 * ranges; its keys' fingerprints into *sums, or (sums NULL) each checked
 * against the log. */
static void history_recent_entry(audit *a, const MDB_val *k, const MDB_val *v, void *ctx)
{
    history_sums *sums = ctx;
    const uint8_t *keys;
    size_t n;
    const char *why;
    char name[64];
    snprintf(name, sizeof(name), "history_recent:%" PRIu64,
             k->mv_size == 8 ? get_u64_be(k->mv_data) : 0);
    if (k->mv_size != 8 || ledger_history_recent_decode(v, &keys, &n, &why) != TALLY_ok) {
        if (sums)
            audit_report(a, "history", name, "record is corrupt: %s",
                         k->mv_size != 8 ? "wrong key length" : why);
        return;
    }
    uint64_t low = UINT64_MAX, high = 0;
    for (size_t i = 0; i < n && a->fault == TALLY_ok; i++) {
        uint64_t account = get_u64_be(keys + 16 * i), seq = get_u64_be(keys + 16 * i + 8), last;
        low = seq < low ? seq : low;
        high = seq > high ? seq : high;
        if (!sums) {
            check_history_entry(a, account, seq, NULL);
            continue;
        }
        history_sums_add(a, sums, account, seq);
        int rc = ledger_history_settled_last(a->t, account, &last);
        if (rc == TALLY_ok && seq <= last) {
            char acct[64];
            audit_name_account(account, acct);
            audit_report(a, "history", acct,
                         "recent seq %" PRIu64 " is not above the tail or indexed seq %" PRIu64,
                         seq, last);
        } else if (rc != TALLY_ok && rc != TALLY_not_found && rc != TALLY_corrupt_record)
            a->fault = rc; /* a corrupt tail: history_tail_entry reported it */
    }
    if (sums && low <= a->recent_last_seq)
        audit_report(a, "history", name,
                     "seq %" PRIu64 " is not above the record before's seqs (up to %" PRIu64 ")",
                     low, a->recent_last_seq);
    a->recent_last_seq = high > a->recent_last_seq ? high : a->recent_last_seq;
}

/* The walks of the index: "history", "history_tail", "history_recent". */
static int walk_history(audit *a, history_sums *sums)
{
    a->block_account = a->block_last = 0;
    int rc = audit_walk_db(a, STORE_DB_HISTORY, sums ? "history" : "history entries", NULL,
                           history_entry, sums);
    if (rc == TALLY_ok)
        rc = audit_walk_db(a, STORE_DB_HISTORY_TAIL, sums ? "history_tail" : "history_tail entries",
                           NULL, history_tail_entry, sums);
    a->recent_last_seq = 0;
    if (rc == TALLY_ok)
        rc = audit_walk_db(a, STORE_DB_HISTORY_RECENT,
                           sums ? "history_recent" : "history_recent entries", NULL,
                           history_recent_entry, sums);
    return rc;
}

/* Every transfer event is in both accounts' history (its "history" range,
 * its tail, the recent records), the history holds nothing else, the
 * tails are well formed and above their accounts' ranges, and the recent
 * records well formed, in seq order and above both. */
int audit_check_history_index(audit *a)
{
    history_sums stored = {0};
    int rc = ledger_history_flush(a->t); /* a write transaction's pending entries: walked too */
    if (rc == TALLY_ok)
        rc = walk_history(a, &stored);
    if (rc != TALLY_ok || memcmp(&stored, &a->history_log, sizeof(stored)) == 0)
        return rc;
    uint64_t findings = a->stats->findings;
    rc = log_read(a->t, 1, UINT64_MAX, find_missing_history, a);
    if (rc == TALLY_ok)
        rc = walk_history(a, NULL);
    if (rc == TALLY_ok && a->stats->findings == findings)
        audit_report(a, "history", "history",
               "the index (%" PRIu64 " entries) differs from the transfer events (%" PRIu64
               " entries expected)", stored.count, a->history_log.count);
    return rc;
}
