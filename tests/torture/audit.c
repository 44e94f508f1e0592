/*
 * audit.c — the torture harness's auditor (torture.h): what the store of a
 * stopped tallyd must hold, computed from the acknowledged outcomes.
 *
 * The clients ran concurrently, so the order in which tallyd applied the
 * commands is unknown; the model needs none. Given each key's outcome, the
 * effects commute: an applied transfer adds its amount whatever came
 * before it, a hold ends posted (with the posted amount) or voided by the
 * one post or void that succeeded, or expired when it had a timeout (the
 * run waits until every timeout has passed), or pending; a transfer's
 * reversed_amount is what its applied reversals moved, each a transfer of
 * its own the other way; a balancing transfer moved at most what it asked,
 * and the accounts are folded with what its record says it moved. Every
 * account's last history entry
 * (ledger_balance_at) holds the account's balances. Entitlement
 * commands carry a source order and a command not newer than the last
 * applied one is stale, so the applied ones were applied in source order:
 * folding them in that order gives the final entitlement, and checks each
 * transition was a legal one.
 *
 * A key that was answered is applied when its outcome is ok; an abandoned
 * key (sent once, reply never read) may or may not have been applied, and
 * its inbox record says which. Either way the key's events in the log must
 * number exactly what it caused (one per write) or none.
 */
#include "tests/torture/torture.h"

#include "common/error.h"
#include "common/table.h"
#include "ledger/balances.h"
#include "ledger/invariants.h"
#include "ledger/ledger.h"
#include "log/log.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct model_transfer {
    torture_write w;         /* fields of the applied creation */
    uint32_t creates;        /* applied creations: must be 1 */
    uint32_t resolutions;    /* applied posts and voids: at most 1 */
    uint8_t resolved_by;     /* LEDGER_POST or LEDGER_VOID */
    int64_t posted_amount;
    unsigned rejected_as;    /* REJECTED_*: how posts and voids of it were refused */
    int64_t reversed_amount; /* what applied reversals of it moved back */
    bool in_store;
} model_transfer;

/* A post or void refused because the hold was already resolved tells how. */
#define REJECTED_POSTED 1u
#define REJECTED_VOIDED 2u
#define REJECTED_EXPIRED 4u

typedef struct model_account {
    uint32_t opens;
    uint8_t flags;
    int64_t created_ms; /* imported: the time given */
    uint64_t created_seq;
    int64_t debits_posted, credits_posted, debits_pending, credits_pending;
    uint64_t version;
} model_account;

typedef struct model_entitlement {
    const torture_write **writes; /* applied grant/extend/revoke */
    size_t count, capacity;
    uint64_t stale_order_max;     /* highest order answered stale */
} model_entitlement;

typedef struct audit {
    torture_store *s;
    table *transfers; /* id -> model_transfer */
    model_account accounts[TORTURE_ACCOUNTS + 1];
    model_entitlement entitlements[TORTURE_ENTITLEMENTS];
    uint64_t expired_events; /* events without causation */
    uint64_t expired_holds;  /* holds the model expects expired */
} audit;

static void id_text(const tally_id128 *id, char out[33]) { tally_id128_to_hex(id, out); }

/* The outcome code of member i of an answered command. */
static int member_code(const torture_cmd *c, uint32_t i)
{
    if (!c->chain)
        return c->first.code;
    return c->first.code == TALLY_ok ? TALLY_ok : c->first.member_codes[i];
}

/* ---- 1. the log: every key's events ---- */

static torture_cmd *cmd_of_key(audit *a, tally_str consumer, tally_str key)
{
    char text[TORTURE_KEY_BYTES_MAX + 1];
    if (!tally_str_equal(consumer, tally_str_from(TORTURE_CONSUMER)) || key.len < 5 ||
        key.len >= sizeof(text) || memcmp(key.ptr, "cmd-", 4) != 0)
        return NULL;
    memcpy(text, key.ptr, key.len);
    text[key.len] = '\0';
    char *end;
    unsigned long index = strtoul(text + 4, &end, 10);
    return *end == '\0' && index < a->s->count ? torture_cmd_at(a->s, (uint32_t)index) : NULL;
}

static int scan_event(uint64_t seq, const void *bytes, size_t len, void *ctx)
{
    audit *a = ctx;
    msgpack_unpacked up;
    msgpack_unpacked_init(&up);
    log_event ev;
    if (log_event_decode(bytes, len, &up, &ev) != TALLY_ok) {
        torture_fail(a->s, "event %" PRIu64 " does not decode", seq);
    } else if (!ev.has_causation) {
        if (!tally_str_equal(ev.type, tally_str_from("transfer.expired")))
            torture_fail(a->s, "event %" PRIu64 " (%.*s) has no causation", seq,
                         (int)ev.type.len, ev.type.ptr);
        a->expired_events++;
    } else {
        torture_cmd *c = cmd_of_key(a, ev.consumer, ev.key);
        if (c)
            c->log_events++;
        else
            torture_fail(a->s, "event %" PRIu64 " caused by an unknown key %.*s/%.*s", seq,
                         (int)ev.consumer.len, ev.consumer.ptr, (int)ev.key.len, ev.key.ptr);
    }
    msgpack_unpacked_destroy(&up);
    return 0;
}

static void scan_log(audit *a, store_txn *t)
{
    log_head head;
    int rc = log_head_get(t, &head);
    if (rc == TALLY_ok && head.seq > 0)
        rc = log_read(t, 1, head.seq, scan_event, a);
    if (rc != TALLY_ok)
        torture_fail(a->s, "the log could not be read: %s", tally_strerror(rc));
}

/* ---- 2. the inbox against the answers: exactly once ---- */

static void check_answered(audit *a, torture_cmd *c, const char *key, bool found,
                           const ledger_outcome *o)
{
    uint32_t expected = c->first.code == TALLY_ok ? torture_expected_events(c) : 0;
    if (!found) {
        torture_fail(a->s, "%s was answered %s but has no inbox record", key,
                     tally_strerror(c->first.code));
        return;
    }
    if (o->code != c->first.code || o->event_count != c->first.events ||
        (o->event_count > 0 && o->first_seq != c->first.seq))
        torture_fail(a->s, "%s: inbox says %s (seq %" PRIu64 ", %u events), the answer %s "
                     "(seq %" PRIu64 ", %u events)", key, tally_strerror(o->code), o->first_seq,
                     o->event_count, tally_strerror(c->first.code), c->first.seq,
                     c->first.events);
    if (c->first.events != expected || c->log_events != expected)
        torture_fail(a->s, "%s answered %s: %u events in the log, %u in the answer, %u expected",
                     key, tally_strerror(c->first.code), c->log_events, c->first.events, expected);
}

static void check_abandoned(audit *a, torture_cmd *c, const char *key, bool found,
                            const ledger_outcome *o)
{
    uint32_t expected = found && o->code == TALLY_ok ? torture_expected_events(c) : 0;
    if (c->log_events != expected)
        torture_fail(a->s, "abandoned %s (inbox: %s): %u events in the log, %u expected", key,
                     found ? tally_strerror(o->code) : "none", c->log_events, expected);
}

static void check_inbox(audit *a, store_txn *t)
{
    for (uint32_t i = 0; i < a->s->count; i++) {
        torture_cmd *c = torture_cmd_at(a->s, i);
        char key[TORTURE_KEY_BYTES_MAX];
        torture_key(c, key);
        ledger_inbox_record rec;
        int rc = ledger_inbox_get(t, tally_str_from(TORTURE_CONSUMER), tally_str_from(key), &rec);
        if (rc != TALLY_ok && rc != TALLY_not_found) {
            torture_fail(a->s, "%s: inbox read: %s", key, tally_strerror(rc));
            continue;
        }
        bool found = rc == TALLY_ok;
        if (c->answers > 0)
            check_answered(a, c, key, found, &rec.outcome);
        else if (c->abandoned)
            check_abandoned(a, c, key, found, &rec.outcome);
        else
            torture_fail(a->s, "%s was never answered", key);
        c->applied = found && rec.outcome.code == TALLY_ok;
        c->applied_seq = c->applied ? rec.outcome.first_seq : 0;
    }
}

/* ---- 3. the model: fold what was applied ---- */

static model_transfer *transfer_of(audit *a, const tally_id128 *id)
{
    int inserted;
    model_transfer *m = table_upsert(a->transfers, id->bytes, sizeof(id->bytes), &inserted);
    if (m == NULL) {
        fprintf(stderr, "torture: out of memory in the audit\n");
        abort();
    }
    return m;
}

static void fold_creation(audit *a, const torture_cmd *c, const torture_write *w)
{
    if (w->kind == LEDGER_ACCOUNT_OPEN) {
        model_account *m = &a->accounts[w->debit];
        m->opens++;
        m->flags = w->account_flags;
        m->created_ms = w->timestamp_ms;
        m->created_seq = c->applied_seq;
        m->version = 1;
    } else if (w->kind == LEDGER_TRANSFER || w->kind == LEDGER_REVERSE) {
        model_transfer *m = transfer_of(a, &w->id);
        if (m->creates++ == 0)
            m->w = *w;
        if (w->kind == LEDGER_REVERSE)
            transfer_of(a, &w->reverses)->reversed_amount += w->amount;
    }
}

static void entitlement_add(audit *a, const torture_write *w)
{
    model_entitlement *m = &a->entitlements[w->entitlement];
    if (m->count == m->capacity) {
        m->capacity = m->capacity ? 2 * m->capacity : 64;
        m->writes = realloc(m->writes, m->capacity * sizeof(*m->writes));
        if (m->writes == NULL) {
            fprintf(stderr, "torture: out of memory in the audit\n");
            abort();
        }
    }
    m->writes[m->count++] = w;
}

/* Posts, voids and entitlement writes: applied ones change the model;
 * rejected ones leave hints the final state must agree with. */
static void fold_step(audit *a, const torture_write *w, int code)
{
    bool hold_step = w->kind == LEDGER_POST || w->kind == LEDGER_VOID;
    if (hold_step && code == TALLY_ok) {
        model_transfer *m = transfer_of(a, &w->id);
        m->resolutions++;
        m->resolved_by = w->kind;
        m->posted_amount = w->amount; /* 0 (all) is resolved in compare_transfer */
    } else if (hold_step && code == TALLY_pending_transfer_already_posted) {
        transfer_of(a, &w->id)->rejected_as |= REJECTED_POSTED;
    } else if (hold_step && code == TALLY_pending_transfer_already_voided) {
        transfer_of(a, &w->id)->rejected_as |= REJECTED_VOIDED;
    } else if (hold_step && code == TALLY_pending_transfer_expired) {
        transfer_of(a, &w->id)->rejected_as |= REJECTED_EXPIRED;
    } else if (w->kind >= LEDGER_GRANT && w->kind <= LEDGER_REVOKE && code == TALLY_ok) {
        entitlement_add(a, w);
    } else if (w->kind >= LEDGER_GRANT && w->kind <= LEDGER_REVOKE && code == TALLY_stale) {
        model_entitlement *m = &a->entitlements[w->entitlement];
        if (w->source_order > m->stale_order_max)
            m->stale_order_max = w->source_order;
    }
}

static void fold_commands(audit *a)
{
    for (uint32_t i = 0; i < a->s->count; i++) {
        const torture_cmd *c = torture_cmd_at(a->s, i);
        for (uint32_t m = 0; c->applied && m < c->count; m++)
            fold_creation(a, c, &c->w[m]);
    }
    /* Second pass: a post may have been generated before the duplicate
     * transfer that created its hold, so every creation comes first. */
    for (uint32_t i = 0; i < a->s->count; i++) {
        const torture_cmd *c = torture_cmd_at(a->s, i);
        for (uint32_t m = 0; m < c->count; m++) {
            if (c->applied)
                fold_step(a, &c->w[m], TALLY_ok);
            else if (c->answers > 0)
                fold_step(a, &c->w[m], member_code(c, m));
        }
    }
}

/* ---- 4. transfers ---- */

/* The state a created transfer must be in; sets *posted_amount. */
static uint8_t expected_state(const model_transfer *m, int64_t *posted_amount)
{
    *posted_amount = 0;
    if (!m->w.pending)
        return LEDGER_TRANSFER_POSTED;
    if (m->resolutions == 0)
        return m->w.timeout_s ? LEDGER_TRANSFER_HOLD_EXPIRED : LEDGER_TRANSFER_PENDING_STATE;
    if (m->resolved_by == LEDGER_VOID)
        return LEDGER_TRANSFER_HOLD_VOIDED;
    *posted_amount = m->posted_amount ? m->posted_amount : m->w.amount;
    return LEDGER_TRANSFER_HOLD_POSTED;
}

/* The refusals a hold in this state may have given. */
static unsigned rejections_allowed(uint8_t state)
{
    switch (state) {
    case LEDGER_TRANSFER_HOLD_POSTED: return REJECTED_POSTED;
    case LEDGER_TRANSFER_HOLD_VOIDED: return REJECTED_VOIDED;
    case LEDGER_TRANSFER_HOLD_EXPIRED: return REJECTED_EXPIRED;
    default: return 0;
    }
}

static void compare_transfer(audit *a, const ledger_transfer_record *r)
{
    char id[33];
    id_text(&r->id, id);
    model_transfer *m = table_find(a->transfers, r->id.bytes, sizeof(r->id.bytes));
    if (m == NULL || m->creates != 1) {
        torture_fail(a->s, "transfer %s is in the store but was created %u times", id,
                     m ? m->creates : 0);
        return;
    }
    m->in_store = true;
    int64_t posted_amount;
    uint8_t state = expected_state(m, &posted_amount);
    uint16_t flags = (m->w.pending ? LEDGER_TRANSFER_PENDING : 0) | m->w.more_flags |
                     (m->w.timestamp_ms ? LEDGER_TRANSFER_IMPORTED : 0);
    /* a balancing transfer moved what there was, at most what it asked:
     * the accounts (5. below) are folded with what it moved */
    if ((m->w.more_flags & (LEDGER_TRANSFER_BALANCING_DEBIT | LEDGER_TRANSFER_BALANCING_CREDIT)) &&
        r->amount >= 1 && r->amount <= m->w.amount)
        m->w.amount = r->amount;
    if (r->debit_account_id != m->w.debit || r->credit_account_id != m->w.credit ||
        r->amount != m->w.amount || r->ledger != TORTURE_LEDGER || r->code != TORTURE_CODE ||
        r->flags != flags || r->timeout_s != (m->w.pending ? m->w.timeout_s : 0) ||
        r->user_data.user_data_64 != m->w.user_data_64 ||
        !tally_id128_equal(&r->reverses, &m->w.reverses) ||
        (m->w.timestamp_ms != 0 && r->created_ms != m->w.timestamp_ms))
        torture_fail(a->s, "transfer %s: fields differ from the command that created it", id);
    if (r->reversed_amount != m->reversed_amount)
        torture_fail(a->s, "transfer %s: reversed_amount %" PRId64 ", its applied reversals "
                     "moved %" PRId64, id, r->reversed_amount, m->reversed_amount);
    if (m->resolutions > 1)
        torture_fail(a->s, "hold %s was resolved %u times", id, m->resolutions);
    if (r->state != state || r->posted_amount != posted_amount)
        torture_fail(a->s, "transfer %s is %s (posted %" PRId64 "), expected %s (posted %" PRId64
                     ")", id, ledger_transfer_state_name(r->state), r->posted_amount,
                     ledger_transfer_state_name(state), posted_amount);
    if (m->rejected_as & ~rejections_allowed(r->state))
        torture_fail(a->s, "hold %s is %s but a post or void of it was refused as already "
                     "resolved otherwise (%#x)", id, ledger_transfer_state_name(r->state),
                     m->rejected_as);
}

static void compare_transfers(audit *a, store_txn *t)
{
    MDB_cursor *cur;
    int rc = store_cursor_open(t, STORE_DB_TRANSFERS, &cur);
    if (rc != TALLY_ok) {
        torture_fail(a->s, "transfers: %s", tally_strerror(rc));
        return;
    }
    MDB_val k, v;
    for (int mrc = mdb_cursor_get(cur, &k, &v, MDB_FIRST); mrc == MDB_SUCCESS;
         mrc = mdb_cursor_get(cur, &k, &v, MDB_NEXT)) {
        tally_id128 id = {{0}};
        ledger_transfer_record r;
        memcpy(id.bytes, k.mv_data, k.mv_size < 16 ? k.mv_size : 16);
        if (k.mv_size != 16 || ledger_transfer_decode(&id, v.mv_data, v.mv_size, &r) != TALLY_ok)
            torture_fail(a->s, "a transfer record does not decode");
        else
            compare_transfer(a, &r);
    }
    mdb_cursor_close(cur);
}

/* ---- 5. accounts, from the model's transfers ---- */

static void account_moves(audit *a, uint64_t debit, uint64_t credit, int64_t posted,
                          int64_t pending, bool resolved)
{
    model_account *d = &a->accounts[debit], *c = &a->accounts[credit];
    d->debits_posted += posted;
    c->credits_posted += posted;
    d->debits_pending += pending;
    c->credits_pending += pending;
    d->version += 1 + resolved; /* the creation's event, and the resolution's */
    c->version += 1 + resolved;
}

static int transfer_effects(const void *key, size_t key_len, void *value, void *ctx)
{
    (void)key_len;
    audit *a = ctx;
    model_transfer *m = value;
    char id[33];
    tally_id128 tid;
    memcpy(tid.bytes, key, 16);
    id_text(&tid, id);
    if (m->creates == 0) {
        if (m->resolutions > 0 || m->rejected_as != 0)
            torture_fail(a->s, "hold %s was never created but a post or void of it was answered "
                         "%s", id, m->resolutions ? "ok" : "already resolved");
        if (m->reversed_amount != 0)
            torture_fail(a->s, "transfer %s was never created but a reversal of it applied", id);
        return 0;
    }
    if (!m->in_store)
        torture_fail(a->s, "transfer %s was created but is not in the store", id);
    int64_t posted_amount;
    uint8_t state = expected_state(m, &posted_amount);
    if (!m->w.pending)
        account_moves(a, m->w.debit, m->w.credit, m->w.amount, 0, false);
    else if (state == LEDGER_TRANSFER_PENDING_STATE)
        account_moves(a, m->w.debit, m->w.credit, 0, m->w.amount, false);
    else
        account_moves(a, m->w.debit, m->w.credit, posted_amount, 0, true);
    a->expired_holds += state == LEDGER_TRANSFER_HOLD_EXPIRED;
    return 0;
}

static void compare_accounts(audit *a, store_txn *t)
{
    uint64_t count;
    if (store_count(t, STORE_DB_ACCOUNTS, &count) != TALLY_ok || count != TORTURE_ACCOUNTS)
        torture_fail(a->s, "the store does not hold exactly the %d accounts", TORTURE_ACCOUNTS);
    for (uint64_t id = 1; id <= TORTURE_ACCOUNTS; id++) {
        const model_account *m = &a->accounts[id];
        ledger_account s;
        int rc = ledger_account_get(t, id, &s);
        if (rc != TALLY_ok || m->opens != 1) {
            torture_fail(a->s, "account %" PRIu64 ": %s, opened %u times", id,
                         tally_strerror(rc), m->opens);
            continue;
        }
        if (s.ledger != TORTURE_LEDGER || s.code != TORTURE_CODE || s.flags != m->flags ||
            s.created_ms != m->created_ms ||
            s.created_seq != m->created_seq || s.debits_posted != m->debits_posted ||
            s.credits_posted != m->credits_posted || s.debits_pending != m->debits_pending ||
            s.credits_pending != m->credits_pending || s.version != m->version)
            torture_fail(a->s, "account %" PRIu64 ": store %" PRId64 "/%" PRId64 " posted, %"
                         PRId64 "/%" PRId64 " pending, version %" PRIu64 "; model %" PRId64
                         "/%" PRId64 ", %" PRId64 "/%" PRId64 ", %" PRIu64, id, s.debits_posted,
                         s.credits_posted, s.debits_pending, s.credits_pending, s.version,
                         m->debits_posted, m->credits_posted, m->debits_pending,
                         m->credits_pending, m->version);
        ledger_balance last; /* balance_at the head: the account as it is */
        rc = ledger_balance_at(t, id, false, 0, UINT64_MAX, &last);
        if (rc != TALLY_ok || (last.seq != 0 &&
                               (last.debits_posted != s.debits_posted ||
                                last.credits_posted != s.credits_posted ||
                                last.debits_pending != s.debits_pending ||
                                last.credits_pending != s.credits_pending)))
            torture_fail(a->s, "account %" PRIu64 ": balance_at its last entry (%s, seq %" PRIu64
                         ") is not the account", id, tally_strerror(rc), last.seq);
    }
}

/* ---- 6. entitlements: applied writes folded in source order ---- */

static int by_source_order(const void *x, const void *y)
{
    const torture_write *a = *(const torture_write *const *)x;
    const torture_write *b = *(const torture_write *const *)y;
    return a->source_order < b->source_order ? -1 : a->source_order > b->source_order;
}

/* Apply w to e as tallyd must have; returns why it could not have been
 * applied, or NULL. */
static const char *entitlement_step(ledger_entitlement *e, bool exists, const torture_write *w)
{
    bool active = exists && e->state == LEDGER_ENTITLEMENT_ACTIVE;
    if (w->kind == LEDGER_GRANT) {
        if (active)
            return "a grant succeeded on an active entitlement";
        e->state = LEDGER_ENTITLEMENT_ACTIVE;
        e->lifetime = w->valid_until_ms == 0;
        e->valid_until_ms = w->valid_until_ms;
        e->has_grant_transfer = w->has_grant_transfer;
        e->grant_transfer_id = w->has_grant_transfer ? w->id : (tally_id128){{0}};
    } else if (w->kind == LEDGER_EXTEND) {
        if (!active || e->lifetime || w->valid_until_ms <= e->valid_until_ms)
            return "an extend succeeded on an entitlement it could not extend";
        e->lifetime = false;
        e->valid_until_ms = w->valid_until_ms;
    } else {
        if (!exists || e->state == LEDGER_ENTITLEMENT_REVOKED)
            return "a revoke succeeded on an entitlement it could not revoke";
        e->state = LEDGER_ENTITLEMENT_REVOKED;
    }
    e->version++;
    e->has_source_order = true;
    e->source_order = w->source_order;
    return NULL;
}

static bool entitlement_same(const ledger_entitlement *s, const ledger_entitlement *m)
{
    return s->state == m->state && s->lifetime == m->lifetime &&
           s->valid_until_ms == m->valid_until_ms && s->version == m->version &&
           s->has_source_order == m->has_source_order && s->source_order == m->source_order &&
           s->has_grant_transfer == m->has_grant_transfer &&
           (!m->has_grant_transfer || tally_id128_equal(&s->grant_transfer_id, &m->grant_transfer_id));
}

static void compare_entitlement(audit *a, store_txn *t, unsigned i)
{
    model_entitlement *m = &a->entitlements[i];
    const char *subject = torture_subjects[i], *feature = torture_features[i];
    qsort(m->writes, m->count, sizeof(*m->writes), by_source_order);
    ledger_entitlement e;
    memset(&e, 0, sizeof(e));
    for (size_t k = 0; k < m->count; k++) {
        const torture_write *w = m->writes[k];
        const char *wrong = k > 0 && w->source_order == m->writes[k - 1]->source_order
                                ? "two writes with one source order both succeeded"
                                : entitlement_step(&e, k > 0, w);
        if (wrong)
            torture_fail(a->s, "entitlement %s/%s, source order %" PRIu64 ": %s", subject,
                         feature, w->source_order, wrong);
        const model_transfer *paid =
            w->has_grant_transfer ? table_find(a->transfers, w->id.bytes, sizeof(w->id.bytes)) : NULL;
        if (w->kind == LEDGER_GRANT && w->has_grant_transfer && (paid == NULL || paid->creates != 1))
            torture_fail(a->s, "entitlement %s/%s: granted for a transfer that does not exist",
                         subject, feature);
    }
    ledger_entitlement s;
    int rc = ledger_entitlement_get(t, tally_str_from(subject), tally_str_from(feature), &s);
    if (m->count == 0 ? rc != TALLY_not_found : rc != TALLY_ok || !entitlement_same(&s, &e))
        torture_fail(a->s, "entitlement %s/%s: store %s (version %" PRIu64 ", order %" PRIu64
                     ", until %" PRId64 ") differs from the %zu applied writes (version %" PRIu64
                     ", order %" PRIu64 ", until %" PRId64 ")", subject, feature,
                     rc == TALLY_ok ? ledger_entitlement_state_name(s.state) : tally_strerror(rc),
                     rc == TALLY_ok ? s.version : 0, rc == TALLY_ok ? s.source_order : 0,
                     rc == TALLY_ok ? s.valid_until_ms : 0, m->count, e.version,
                     e.source_order, e.valid_until_ms);
    if (m->stale_order_max > e.source_order)
        torture_fail(a->s, "entitlement %s/%s: a write with source order %" PRIu64 " was stale "
                     "but the last applied order is %" PRIu64, subject, feature,
                     m->stale_order_max, e.source_order);
    free(m->writes);
}

/* ---- 7. the invariant checker ---- */

static void report_finding(const char *check, const char *entity, const char *detail, void *ctx)
{
    torture_fail(ctx, "invariant %s: %s: %s", check, entity, detail);
}

void torture_audit(torture_store *s, store *st)
{
    audit a;
    memset(&a, 0, sizeof(a));
    a.s = s;
    a.transfers = table_create(sizeof(model_transfer));
    store_txn t;
    if (a.transfers == NULL || store_txn_begin(st, NULL, true, &t) != TALLY_ok) {
        torture_fail(s, "the audit could not start");
        table_destroy(a.transfers);
        return;
    }
    scan_log(&a, &t);
    check_inbox(&a, &t);
    fold_commands(&a);
    compare_transfers(&a, &t);
    table_each(a.transfers, transfer_effects, &a);
    compare_accounts(&a, &t);
    for (unsigned i = 0; i < TORTURE_ENTITLEMENTS; i++)
        compare_entitlement(&a, &t, i);
    if (a.expired_events != a.expired_holds)
        torture_fail(s, "%" PRIu64 " transfer.expired events, %" PRIu64 " holds expected to expire",
                     a.expired_events, a.expired_holds);
    ledger_invariant_stats stats;
    int rc = ledger_invariants_check(&t, report_finding, s, &stats);
    if (rc != TALLY_ok)
        torture_fail(s, "the invariant check could not run: %s", tally_strerror(rc));
    store_txn_abort(&t);
    table_destroy(a.transfers);
}
