/*
 * invariants.c — BRIEF §6 checked over one snapshot (see invariants.h).
 *
 * The rebuild is a real fold: account balances are recomputed from transfer
 * amounts and hold resolutions, never copied from event snapshots; the
 * snapshots are then compared with the fold, and the fold with the stored
 * records, byte for byte through the record encoders.
 */
#include "ledger/invariants.h"

#include "common/error.h"
#include "common/msgpack_safe.h"
#include "common/table.h"
#include "ledger/ledger.h"
#include "log/log.h"
#include "ledger/retention.h"
#include "log/subscriber.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

typedef struct audit {
    store_txn *t;
    ledger_invariant_report_fn fn;
    void *ctx;
    ledger_invariant_stats *stats;
    const ledger_invariant_options *opt;
    table *accounts;      /* u64 id -> ledger_account (folded) */
    table *holds;         /* transfer id -> hold_state */
    table *entitlements;  /* entitlement key -> folded_entitlement */
    uint64_t head_seq;
    uint64_t history_keys[2];     /* random per run: see history_sums */
    struct history_sums {
        uint64_t count;
        uint64_t sum[2];
    } history_log;               /* what the log's transfer events expect */
    uint64_t events_covered; /* events whose causation's record covers them */
    uint64_t events_claimed; /* Σ event_count above the floor of successful inbox records */
    MDB_cursor *inbox_cursor; /* the walk's lookups of causes */
    ledger_log_floor floor; /* log retention: events up to floor.seq are gone */
    int64_t inbox_swept_ms; /* inbox retention: records up to this time are gone */
    int fault;
} audit;

/* What the fold keeps per hold (every hold ever created) and per
 * entitlement: only what later events and the stored records are checked
 * against, so that memory stays small per entity (docs/OPERATIONS.md). */
typedef struct hold_state {
    int64_t amount;   /* as created */
    uint64_t version; /* as created, then as resolved */
    uint8_t state;
    bool resolved;
} hold_state;

typedef struct folded_entitlement {
    uint8_t record[LEDGER_ENTITLEMENT_RECORD_BYTES]; /* encoded as stored */
    uint8_t state;
    uint64_t version;
} folded_entitlement;

/* The checks in the order they run (see invariants.h). */
static const struct {
    const char *name;
    bool needs_fold;
} checks[] = {
    {"log_gap", false},     {"hash_chain", false},      {"rebuild", true},
    {"balance_sum", false}, {"limit_flags", false},     {"hold_resolution", false},
    {"expiry_index", false}, {"inbox_links", false},    {"history", false},
    {"cursors", false},     {"dlq", false},
};
#define CHECKS_COUNT (sizeof(checks) / sizeof(checks[0]))
_Static_assert(CHECKS_COUNT <= LEDGER_INVARIANT_CHECKS_MAX, "checks fit the stats");

size_t ledger_invariant_check_count(void) { return CHECKS_COUNT; }

const char *ledger_invariant_check_name(size_t index)
{
    return index < CHECKS_COUNT ? checks[index].name : NULL;
}

int ledger_invariant_check_index(const char *name)
{
    for (size_t i = 0; i < CHECKS_COUNT; i++)
        if (strcmp(checks[i].name, name) == 0)
            return (int)i;
    return -1;
}

bool ledger_invariant_check_needs_fold(size_t index)
{
    return index < CHECKS_COUNT && checks[index].needs_fold;
}

static void report(audit *a, const char *check, const char *entity, const char *fmt, ...)
{
    a->stats->findings++;
    int index = ledger_invariant_check_index(check);
    uint64_t of_check = index >= 0 ? ++a->stats->findings_by_check[index] : 0;
    if (a->opt->findings_per_check_max && of_check > a->opt->findings_per_check_max) {
        a->stats->findings_not_reported++;
        return;
    }
    char detail[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(detail, sizeof(detail), fmt, ap);
    va_end(ap);
    if (a->fn)
        a->fn(check, entity, detail, a->ctx);
}

/* Tell the caller how far a phase is, every LEDGER_INVARIANT_PROGRESS_ITEMS
 * items and at its end; false (and a->fault set) when it asked to stop. */
static bool progress(audit *a, const char *phase, uint64_t done, uint64_t total)
{
    if (!a->opt->progress || (done % LEDGER_INVARIANT_PROGRESS_ITEMS != 0 && done != total))
        return true;
    if (a->opt->progress(phase, done, total, a->opt->progress_ctx))
        return true;
    a->fault = TALLY_shutting_down;
    return false;
}

/* Entries of db, the total of a progress phase (0 when unknown). */
static uint64_t phase_total(audit *a, store_db db)
{
    uint64_t n = 0;
    return a->opt->progress && store_count(a->t, db, &n) == TALLY_ok ? n : 0;
}

static void name_account(uint64_t id, char out[64])
{
    snprintf(out, 64, "account:%" PRIu64, id);
}

static void name_transfer(const tally_id128 *id, char out[64])
{
    char hex[33];
    tally_id128_to_hex(id, hex);
    snprintf(out, 64, "transfer:%s", hex);
}

static void name_seq(uint64_t seq, char out[64]) { snprintf(out, 64, "seq:%" PRIu64, seq); }

static void name_entitlement(const ledger_entitlement *e, char out[256])
{
    snprintf(out, 256, "entitlement:%.*s/%.*s", (int)e->subject_len, e->subject,
             (int)e->feature_len, e->feature);
}

/* ---- fold ---- */

static ledger_account *fold_account(audit *a, uint64_t id)
{
    uint8_t key[8];
    put_u64_be(key, id);
    return table_find(a->accounts, key, 8);
}

static bool accounts_equal(const ledger_account *x, const ledger_account *y)
{
    uint8_t ex[LEDGER_ACCOUNT_RECORD_BYTES], ey[LEDGER_ACCOUNT_RECORD_BYTES];
    ledger_account_encode(x, ex);
    ledger_account_encode(y, ey);
    return x->id == y->id && memcmp(ex, ey, sizeof(ex)) == 0;
}

static void fold_account_opened(audit *a, const log_event *ev)
{
    char name[64];
    ledger_account acc;
    name_seq(ev->seq, name);
    if (ledger_account_unpack(msgpack_safe_map_get(ev->body, "account"), &acc) != TALLY_ok) {
        report(a, "rebuild", name, "account.opened body is not an account");
        return;
    }
    name_account(acc.id, name);
    int inserted;
    uint8_t key[8];
    put_u64_be(key, acc.id);
    ledger_account *slot = table_upsert(a->accounts, key, 8, &inserted);
    if (!slot) {
        a->fault = TALLY_out_of_memory;
        return;
    }
    if (!inserted) {
        report(a, "rebuild", name, "opened twice (seq %" PRIu64 ")", ev->seq);
        return;
    }
    if (acc.version != 1 || acc.debits_posted || acc.credits_posted || acc.debits_pending ||
        acc.credits_pending || acc.created_seq != ev->seq || ev->entity_version != 1)
        report(a, "rebuild", name, "opened with non-initial state at seq %" PRIu64, ev->seq);
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
    const ledger_account *folded[2] = {dr, cr};
    for (int i = 0; i < 2; i++) {
        ledger_account snap;
        char name[64];
        bool missing =
            ledger_account_unpack(msgpack_safe_map_get(ev->body, names[i]), &snap) != TALLY_ok;
        if (!missing && accounts_equal(&snap, folded[i]))
            continue;
        name_account(folded[i]->id, name); /* only now: this runs for every event */
        if (missing)
            report(a, "rebuild", name, "seq %" PRIu64 ": %s snapshot missing", ev->seq,
                   names[i]);
        else
            report(a, "rebuild", name,
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
 * (account, seq, transfer id) and two sums of keyed 64-bit hashes of them.
 * Equal fingerprints mean equal multisets but for a chance of about 2^-64
 * per sum (the keys are random per run, so no store can be made to
 * collide); this spares two lookups per transfer event, most of the cost
 * of the check. When they differ, find_history_differences looks every
 * entry up to name the accounts concerned. */
typedef struct history_sums history_sums;

static uint64_t mix64(uint64_t z) /* splitmix64's finalizer, a bijection */
{
    z = (z ^ (z >> 30)) * UINT64_C(0xBF58476D1CE4E5B9);
    z = (z ^ (z >> 27)) * UINT64_C(0x94D049BB133111EB);
    return z ^ (z >> 31);
}

static void history_sums_add(const audit *a, history_sums *s, uint64_t account, uint64_t seq,
                             const uint8_t transfer_id[16])
{
    const uint64_t words[4] = {account, seq, get_u64_be(transfer_id),
                               get_u64_be(transfer_id + 8)};
    s->count++;
    for (int k = 0; k < 2; k++) {
        uint64_t x = a->history_keys[k];
        for (int i = 0; i < 4; i++)
            x = mix64(x ^ words[i]);
        s->sum[k] += x;
    }
}

/* Both accounts of a transfer event list it in their history. */
static void check_history(audit *a, const log_event *ev, const ledger_transfer_record *tr)
{
    history_sums_add(a, &a->history_log, tr->debit_account_id, ev->seq, tr->id.bytes);
    history_sums_add(a, &a->history_log, tr->credit_account_id, ev->seq, tr->id.bytes);
}

static void fold_transfer_event(audit *a, const log_event *ev)
{
    char name[64];
    name_seq(ev->seq, name);
    ledger_transfer_record tr;
    if (ledger_transfer_unpack(msgpack_safe_map_get(ev->body, "transfer"), &tr) != TALLY_ok) {
        report(a, "rebuild", name, "transfer event body is not a transfer");
        return;
    }
    name_transfer(&tr.id, name);
    ledger_account *dr = fold_account(a, tr.debit_account_id);
    ledger_account *cr = fold_account(a, tr.credit_account_id);
    if (!dr || !cr) {
        report(a, "rebuild", name, "seq %" PRIu64 ": account not opened before", ev->seq);
        return;
    }
    bool created = tally_str_equal(ev->type, tally_str_from("transfer.created"));
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
            report(a, "rebuild", name, "hold created twice (seq %" PRIu64 ")", ev->seq);
        ok = move_amounts(dr, cr, pending ? tr.amount : 0, pending ? 0 : tr.amount);
        if (pending) {
            hold->amount = tr.amount;
            hold->version = tr.version;
            hold->state = tr.state;
        }
    } else if (!pending || inserted) {
        report(a, "hold_resolution", name, "seq %" PRIu64 ": resolves an unknown hold",
               ev->seq);
        return;
    } else if (hold->resolved) {
        report(a, "hold_resolution", name, "resolved again at seq %" PRIu64, ev->seq);
        return;
    } else {
        int64_t posted = tally_str_equal(ev->type, tally_str_from("transfer.posted"))
                             ? tr.posted_amount : 0;
        ok = posted <= hold->amount && move_amounts(dr, cr, -hold->amount, posted);
        hold->resolved = true;
        hold->version = tr.version;
        hold->state = tr.state;
    }
    if (!ok)
        report(a, "rebuild", name, "seq %" PRIu64 ": amounts do not fold", ev->seq);
    compare_snapshots(a, ev, dr, cr);
    check_history(a, ev, &tr);
}

static void fold_entitlement_event(audit *a, const log_event *ev)
{
    char name[256];
    ledger_entitlement e;
    if (ledger_entitlement_unpack(msgpack_safe_map_get(ev->body, "entitlement"), &e) !=
        TALLY_ok) {
        name_seq(ev->seq, name);
        report(a, "rebuild", name, "entitlement event body is not an entitlement");
        return;
    }
    name_entitlement(&e, name);
    uint8_t key[LEDGER_ENTITLEMENT_KEY_BYTES_MAX];
    size_t key_len = ledger_entitlement_key((tally_str){e.subject, e.subject_len},
                                            (tally_str){e.feature, e.feature_len}, key);
    int inserted;
    folded_entitlement *slot = table_upsert(a->entitlements, key, key_len, &inserted);
    if (!slot) {
        a->fault = TALLY_out_of_memory;
        return;
    }
    uint64_t expect_version = inserted ? 1 : slot->version + 1;
    static const struct { const char *type; uint8_t state; } kinds[] = {
        {"entitlement.granted", LEDGER_ENTITLEMENT_ACTIVE},
        {"entitlement.extended", LEDGER_ENTITLEMENT_ACTIVE},
        {"entitlement.revoked", LEDGER_ENTITLEMENT_REVOKED},
        {"entitlement.expired", LEDGER_ENTITLEMENT_EXPIRED},
    };
    int kind = -1;
    for (int i = 0; i < 4; i++)
        if (tally_str_equal(ev->type, tally_str_from(kinds[i].type)))
            kind = i;
    if (kind < 0 || e.state != kinds[kind].state)
        report(a, "rebuild", name, "seq %" PRIu64 ": state does not match event type", ev->seq);
    bool legal = kind == 0 ? inserted || slot->state != LEDGER_ENTITLEMENT_ACTIVE
               : kind == 1 ? !inserted && slot->state != LEDGER_ENTITLEMENT_REVOKED
               : kind == 2 ? !inserted && slot->state != LEDGER_ENTITLEMENT_REVOKED
               : !inserted && slot->state == LEDGER_ENTITLEMENT_ACTIVE;
    if (kind >= 0 && !legal)
        report(a, "rebuild", name, "seq %" PRIu64 ": illegal transition", ev->seq);
    if (e.version != expect_version || ev->entity_version != e.version)
        report(a, "rebuild", name, "seq %" PRIu64 ": version %" PRIu64 ", expected %" PRIu64,
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
        ledger_transfer_unpack(msgpack_safe_map_get(ev->body, "transfer"), &tr) == TALLY_ok)
        check_history(a, ev, &tr);
}

static void fold_event(audit *a, const log_event *ev)
{
    if (a->opt->skip_rebuild) {
        check_event_history(a, ev);
        return;
    }
    tally_str type = ev->type;
    if (tally_str_equal(type, tally_str_from("account.opened")))
        fold_account_opened(a, ev);
    else if (ev->entity.kind == LOG_ENTITY_TRANSFER)
        fold_transfer_event(a, ev);
    else if (ev->entity.kind == LOG_ENTITY_ENTITLEMENT)
        fold_entitlement_event(a, ev);
    else {
        char name[64];
        name_seq(ev->seq, name);
        report(a, "rebuild", name, "unknown event type %.*s", (int)type.len, type.ptr);
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
            report(a, "rebuild", "checkpoint", "an account snapshot does not decode");
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
            report(a, "rebuild", "checkpoint", "a hold snapshot does not decode");
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
            report(a, "rebuild", "checkpoint", "an entitlement snapshot does not decode");
            return TALLY_ok;
        }
        uint8_t key[LEDGER_ENTITLEMENT_KEY_BYTES_MAX];
        size_t n = ledger_entitlement_key((tally_str){e.subject, e.subject_len},
                                          (tally_str){e.feature, e.feature_len}, key);
        folded_entitlement *slot = table_upsert(a->entitlements, key, n, &inserted);
        if (!slot)
            return TALLY_out_of_memory;
        ledger_entitlement_encode(&e, slot->record);
        slot->state = e.state;
        slot->version = e.version;
    } else {
        report(a, "rebuild", "checkpoint", "unknown snapshot kind");
    }
    return TALLY_ok;
}

/* With log retention the fold starts from the checkpoint instead of empty. */
static int seed_from_checkpoint(audit *a)
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
    char name[64];
    name_seq(ev->seq, name);
    if (ev->consumer.len == 0 || ev->consumer.len > TALLY_CONSUMER_BYTES_MAX ||
        ev->key.len == 0 || ev->key.len > TALLY_KEY_BYTES_MAX) {
        report(a, "inbox_links", name, "causation is malformed");
        return;
    }
    ledger_inbox_record rec;
    int rc = cause_record(a, ev, &rec);
    if (rc == TALLY_not_found && ev->time_ms <= a->inbox_swept_ms)
        return; /* removed by inbox retention with the rest of its time */
    if (rc == TALLY_not_found)
        report(a, "inbox_links", name, "caused by %.*s/%.*s which has no inbox record",
               (int)ev->consumer.len, ev->consumer.ptr, (int)ev->key.len, ev->key.ptr);
    else if (rc != TALLY_ok)
        report(a, "inbox_links", name, "inbox record unreadable: %s", tally_strerror(rc));
    else if (rec.outcome.code != TALLY_ok || ev->seq < rec.outcome.first_seq ||
             ev->seq >= rec.outcome.first_seq + rec.outcome.event_count)
        report(a, "inbox_links", name, "inbox record of %.*s/%.*s does not cover this event",
               (int)ev->consumer.len, ev->consumer.ptr, (int)ev->key.len, ev->key.ptr);
    else
        a->events_covered++;
}

/* ---- the log walk: gaps, chain, fold ---- */

typedef struct log_walk {
    audit *a;
    uint64_t head_seq;
    uint64_t expect_seq;
    uint8_t prev_hash[LOG_HASH_BYTES];
} log_walk;

static int walk_event(uint64_t seq, const void *bytes, size_t len, void *ctx)
{
    log_walk *w = ctx;
    audit *a = w->a;
    char name[64];
    name_seq(seq, name);
    if (seq != w->expect_seq) {
        report(a, "log_gap", name, "expected seq %" PRIu64, w->expect_seq);
        memset(w->prev_hash, 0xff, LOG_HASH_BYTES); /* chain unknown across a gap */
    }
    w->expect_seq = seq + 1;
    a->stats->events++;
    msgpack_unpacked up;
    msgpack_unpacked_init(&up);
    log_event ev;
    if (log_event_decode(bytes, len, &up, &ev) != TALLY_ok) {
        report(a, "hash_chain", name, "event does not decode or its hash is wrong");
        memset(w->prev_hash, 0xff, LOG_HASH_BYTES);
    } else {
        if (ev.seq != seq)
            report(a, "hash_chain", name, "event carries seq %" PRIu64, ev.seq);
        if (memcmp(ev.prev_hash, w->prev_hash, LOG_HASH_BYTES) != 0)
            report(a, "hash_chain", name, "prev_hash does not match the previous event");
        memcpy(w->prev_hash, ev.hash, LOG_HASH_BYTES);
        fold_event(a, &ev);
        check_event_causation(a, &ev);
        if (a->opt->each_event)
            a->opt->each_event(&ev, a->opt->each_event_ctx);
    }
    msgpack_unpacked_destroy(&up);
    progress(a, "log", a->stats->events, w->head_seq);
    return a->fault;
}

static int check_log(audit *a)
{
    log_head head;
    int rc = log_head_get(a->t, &head);
    if (rc != TALLY_ok)
        return rc;
    a->head_seq = head.seq;
    log_walk w = {.a = a, .head_seq = head.seq, .expect_seq = a->floor.seq + 1};
    memcpy(w.prev_hash, a->floor.hash, LOG_HASH_BYTES); /* zeros without retention */
    rc = log_read(a->t, 1, UINT64_MAX, walk_event, &w);
    if (rc != TALLY_ok)
        return rc;
    char name[64];
    name_seq(head.seq, name);
    if (w.expect_seq != head.seq + 1)
        report(a, "log_gap", name, "meta head is %" PRIu64 " but the log ends at %" PRIu64,
               head.seq, w.expect_seq - 1);
    else if (head.seq > 0 && memcmp(w.prev_hash, head.hash, LOG_HASH_BYTES) != 0)
        report(a, "hash_chain", name, "meta head hash differs from the last event's");
    return TALLY_ok;
}

/* ---- stored state against the fold ---- */

typedef struct ledger_sum {
    uint32_t ledger;
    __int128 debits_posted, credits_posted, debits_pending, credits_pending;
} ledger_sum;

static void check_limits(audit *a, const ledger_account *acc)
{
    char name[64];
    name_account(acc->id, name);
    if ((acc->flags & LEDGER_ACCOUNT_DEBITS_MUST_NOT_EXCEED_CREDITS) &&
        acc->debits_posted + acc->debits_pending > acc->credits_posted)
        report(a, "limit_flags", name, "debits exceed credits");
    if ((acc->flags & LEDGER_ACCOUNT_CREDITS_MUST_NOT_EXCEED_DEBITS) &&
        acc->credits_posted + acc->credits_pending > acc->debits_posted)
        report(a, "limit_flags", name, "credits exceed debits");
}

/* Pending balances must equal the sum of the account's unresolved holds. */
static void check_pending(audit *a, table *pending, const ledger_account *acc)
{
    int64_t have[2] = {acc->debits_pending, acc->credits_pending};
    for (int side = 0; side < 2; side++) {
        uint8_t key[9];
        put_u64_be(key, acc->id);
        key[8] = (uint8_t)side;
        const int64_t *sum = table_find(pending, key, 9);
        int64_t want = sum ? *sum : 0;
        char name[64];
        name_account(acc->id, name);
        if (have[side] != want)
            report(a, "hold_resolution", name,
                   "%s_pending %" PRId64 " but unresolved holds sum to %" PRId64,
                   side == 0 ? "debits" : "credits", have[side], want);
    }
}

static int check_accounts(audit *a, table *sums, table *pending)
{
    MDB_cursor *cur;
    int rc = store_cursor_open(a->t, STORE_DB_ACCOUNTS, &cur);
    if (rc != TALLY_ok)
        return rc;
    uint64_t total = phase_total(a, STORE_DB_ACCOUNTS);
    MDB_val k, v;
    int mrc;
    for (mrc = mdb_cursor_get(cur, &k, &v, MDB_FIRST); mrc == MDB_SUCCESS;
         mrc = mdb_cursor_get(cur, &k, &v, MDB_NEXT)) {
        a->stats->accounts++;
        if (!progress(a, "accounts", a->stats->accounts, total))
            break;
        ledger_account acc;
        char name[64];
        uint64_t id = k.mv_size == 8 ? get_u64_be(k.mv_data) : 0;
        name_account(id, name);
        if (k.mv_size != 8 || ledger_account_decode(id, v.mv_data, v.mv_size, &acc) != TALLY_ok) {
            report(a, "rebuild", name, "stored record is corrupt");
            continue;
        }
        ledger_account *folded = a->opt->skip_rebuild ? NULL : fold_account(a, id);
        if (!folded && !a->opt->skip_rebuild)
            report(a, "rebuild", name, "stored but never opened in the log");
        else if (folded && !accounts_equal(folded, &acc))
            report(a, "rebuild", name,
                   "stored differs from the fold: posted %" PRId64 "/%" PRId64
                   " pending %" PRId64 "/%" PRId64 " v%" PRIu64 " vs fold %" PRId64 "/%" PRId64
                   " %" PRId64 "/%" PRId64 " v%" PRIu64,
                   acc.debits_posted, acc.credits_posted, acc.debits_pending,
                   acc.credits_pending, acc.version, folded->debits_posted,
                   folded->credits_posted, folded->debits_pending, folded->credits_pending,
                   folded->version);
        check_limits(a, &acc);
        check_pending(a, pending, &acc);
        uint8_t lk[4];
        put_u32_be(lk, acc.ledger);
        int inserted;
        ledger_sum *s = table_upsert(sums, lk, 4, &inserted);
        if (!s) {
            rc = TALLY_out_of_memory;
            break;
        }
        s->ledger = acc.ledger;
        s->debits_posted += acc.debits_posted;
        s->credits_posted += acc.credits_posted;
        s->debits_pending += acc.debits_pending;
        s->credits_pending += acc.credits_pending;
    }
    if (rc == TALLY_ok && mrc != MDB_NOTFOUND && mrc != MDB_SUCCESS)
        rc = store_translate(mrc);
    mdb_cursor_close(cur);
    if (rc == TALLY_ok)
        rc = a->fault;
    if (rc == TALLY_ok && !a->opt->skip_rebuild && a->stats->accounts != table_count(a->accounts))
        report(a, "rebuild", "accounts", "%zu opened in the log, %" PRIu64 " stored",
               table_count(a->accounts), a->stats->accounts);
    return rc;
}

static int check_ledger_sum(const void *key, size_t key_len, void *value, void *ctx)
{
    (void)key, (void)key_len;
    audit *a = ctx;
    const ledger_sum *s = value;
    char name[64];
    snprintf(name, sizeof(name), "ledger:%" PRIu32, s->ledger);
    if (s->debits_posted != s->credits_posted)
        report(a, "balance_sum", name, "sum of debits_posted != sum of credits_posted");
    if (s->debits_pending != s->credits_pending)
        report(a, "balance_sum", name, "sum of debits_pending != sum of credits_pending");
    return 0;
}

static bool expiry_entry_exists(audit *a, int64_t at_ms, uint8_t kind, const void *id,
                                size_t id_len)
{
    uint8_t key[9 + LEDGER_ENTITLEMENT_KEY_BYTES_MAX];
    put_u64_be(key, (uint64_t)at_ms);
    key[8] = kind;
    memcpy(key + 9, id, id_len);
    MDB_val v;
    return store_get(a->t, STORE_DB_EXPIRY, key, 9 + id_len, &v) == TALLY_ok;
}

/* Transfers: every hold record matches the fold's view; unresolved holds
 * add up to the accounts' pending balances. */
static int check_transfers(audit *a, table *pending_by_account)
{
    MDB_cursor *cur;
    int rc = store_cursor_open(a->t, STORE_DB_TRANSFERS, &cur);
    if (rc != TALLY_ok)
        return rc;
    uint64_t total = phase_total(a, STORE_DB_TRANSFERS);
    MDB_val k, v;
    int mrc;
    for (mrc = mdb_cursor_get(cur, &k, &v, MDB_FIRST); mrc == MDB_SUCCESS && rc == TALLY_ok;
         mrc = mdb_cursor_get(cur, &k, &v, MDB_NEXT)) {
        a->stats->transfers++;
        if (!progress(a, "transfers", a->stats->transfers, total))
            break;
        tally_id128 id = {{0}};
        char name[64];
        if (k.mv_size == 16)
            memcpy(id.bytes, k.mv_data, 16);
        name_transfer(&id, name);
        ledger_transfer_record tr;
        if (k.mv_size != 16 || ledger_transfer_decode(&id, v.mv_data, v.mv_size, &tr) != TALLY_ok) {
            report(a, "rebuild", name, "stored record is corrupt");
            continue;
        }
        if (!(tr.flags & LEDGER_TRANSFER_PENDING))
            continue;
        hold_state *h = table_find(a->holds, id.bytes, 16);
        if (!a->opt->skip_rebuild &&
            (!h || h->state != tr.state || h->version != tr.version))
            report(a, "hold_resolution", name, "stored hold state differs from the log");
        if (tr.state != LEDGER_TRANSFER_PENDING_STATE)
            continue;
        if (tr.expires_at_ms && !expiry_entry_exists(a, tr.expires_at_ms, LEDGER_EXPIRY_HOLD,
                                                     id.bytes, 16))
            report(a, "expiry_index", name, "unresolved hold has no expiry entry");
        uint64_t ids[2] = {tr.debit_account_id, tr.credit_account_id};
        for (int side = 0; side < 2 && rc == TALLY_ok; side++) {
            uint8_t key[9];
            put_u64_be(key, ids[side]);
            key[8] = (uint8_t)side;
            int inserted;
            int64_t *sum = table_upsert(pending_by_account, key, 9, &inserted);
            if (!sum)
                rc = TALLY_out_of_memory;
            else
                *sum += tr.amount;
        }
    }
    if (rc == TALLY_ok && mrc != MDB_NOTFOUND && mrc != MDB_SUCCESS)
        rc = store_translate(mrc);
    mdb_cursor_close(cur);
    return rc == TALLY_ok ? a->fault : rc;
}

static int check_entitlements(audit *a)
{
    MDB_cursor *cur;
    int rc = store_cursor_open(a->t, STORE_DB_ENTITLEMENTS, &cur);
    if (rc != TALLY_ok)
        return rc;
    uint64_t total = phase_total(a, STORE_DB_ENTITLEMENTS);
    MDB_val k, v;
    int mrc;
    for (mrc = mdb_cursor_get(cur, &k, &v, MDB_FIRST); mrc == MDB_SUCCESS;
         mrc = mdb_cursor_get(cur, &k, &v, MDB_NEXT)) {
        a->stats->entitlements++;
        if (!progress(a, "entitlements", a->stats->entitlements, total))
            break;
        ledger_entitlement e;
        char name[256];
        if (ledger_entitlement_decode(k.mv_data, k.mv_size, v.mv_data, v.mv_size, &e) !=
            TALLY_ok) {
            report(a, "rebuild", "entitlement", "stored record is corrupt");
            continue;
        }
        name_entitlement(&e, name);
        const folded_entitlement *f = table_find(a->entitlements, k.mv_data, k.mv_size);
        uint8_t es[LEDGER_ENTITLEMENT_RECORD_BYTES];
        ledger_entitlement_encode(&e, es);
        if (!a->opt->skip_rebuild && (!f || memcmp(es, f->record, sizeof(es)) != 0))
            report(a, "rebuild", name, "stored differs from the fold");
        if (e.state == LEDGER_ENTITLEMENT_ACTIVE && !e.lifetime &&
            !expiry_entry_exists(a, e.valid_until_ms, LEDGER_EXPIRY_ENTITLEMENT, k.mv_data,
                                 k.mv_size))
            report(a, "expiry_index", name, "active entitlement has no expiry entry");
    }
    if (mrc != MDB_NOTFOUND && mrc != MDB_SUCCESS)
        rc = store_translate(mrc);
    mdb_cursor_close(cur);
    if (rc == TALLY_ok)
        rc = a->fault;
    if (rc == TALLY_ok && !a->opt->skip_rebuild &&
        a->stats->entitlements != table_count(a->entitlements))
        report(a, "rebuild", "entitlements", "%zu in the log, %" PRIu64 " stored",
               table_count(a->entitlements), a->stats->entitlements);
    return rc;
}

static void name_inbox(const ledger_inbox_record *rec, char out[256])
{
    snprintf(out, 256, "inbox:%.*s/%.*s", (int)rec->consumer.len, rec->consumer.ptr,
             (int)rec->key.len, rec->key.ptr);
}

/* The events of one successful record exist and name it as their cause. */
static void check_record_events(audit *a, const ledger_inbox_record *rec)
{
    char name[256];
    name_inbox(rec, name);
    for (uint64_t s = rec->outcome.first_seq;
         s - rec->outcome.first_seq < rec->outcome.event_count; s++) {
        if (s <= a->floor.seq)
            continue; /* removed by log retention */
        uint8_t key[8];
        log_seq_key(s, key);
        MDB_val ev_val;
        msgpack_unpacked up;
        log_event ev;
        if (store_get(a->t, STORE_DB_LOG, key, 8, &ev_val) != TALLY_ok) {
            report(a, "inbox_links", name, "points at missing event %" PRIu64, s);
            continue;
        }
        msgpack_unpacked_init(&up);
        if (log_event_decode(ev_val.mv_data, ev_val.mv_size, &up, &ev) == TALLY_ok &&
            (!ev.has_causation || !tally_str_equal(ev.consumer, rec->consumer) ||
             !tally_str_equal(ev.key, rec->key)))
            report(a, "inbox_links", name, "event %" PRIu64 " names another cause", s);
        msgpack_unpacked_destroy(&up);
    }
}

/* Call fn for every entry of db in key order, reporting progress as phase.
 * Returns TALLY_ok, a store error, or a->fault (progress asked to stop). */
static int walk_db(audit *a, store_db db, const char *phase,
                   void (*fn)(audit *a, const MDB_val *k, const MDB_val *v, void *ctx),
                   void *ctx)
{
    MDB_cursor *cur;
    int rc = store_cursor_open(a->t, db, &cur);
    if (rc != TALLY_ok)
        return rc;
    uint64_t total = phase_total(a, db), done = 0;
    MDB_val k, v;
    int mrc;
    for (mrc = mdb_cursor_get(cur, &k, &v, MDB_FIRST); mrc == MDB_SUCCESS;
         mrc = mdb_cursor_get(cur, &k, &v, MDB_NEXT)) {
        if (!progress(a, phase, ++done, total))
            break;
        fn(a, &k, &v, ctx);
    }
    if (mrc != MDB_NOTFOUND && mrc != MDB_SUCCESS)
        rc = store_translate(mrc);
    mdb_cursor_close(cur);
    return rc == TALLY_ok ? a->fault : rc;
}

/* One inbox record. The first pass (*each_event false) counts the events
 * that successful records claim and checks what needs no event; the
 * second looks every claimed event up, to name the records that claim
 * wrongly. */
static void inbox_entry(audit *a, const MDB_val *k, const MDB_val *v, void *ctx)
{
    bool each_event = *(const bool *)ctx;
    a->stats->inbox_records += !each_event;
    ledger_inbox_record rec;
    char name[256];
    if (ledger_inbox_decode(k->mv_data, k->mv_size, v->mv_data, v->mv_size, &rec) != TALLY_ok) {
        if (!each_event)
            report(a, "inbox_links", "inbox", "record is corrupt");
        return;
    }
    if (rec.outcome.code != TALLY_ok)
        return;
    if (each_event) {
        check_record_events(a, &rec);
        return;
    }
    if (rec.outcome.event_count == 0) {
        name_inbox(&rec, name);
        report(a, "inbox_links", name, "succeeded without events");
    }
    /* The claims on events above the log retention floor (the walk saw no
     * others). */
    uint64_t first = rec.outcome.first_seq, count = rec.outcome.event_count;
    if (first <= a->floor.seq)
        count = a->floor.seq - first >= count ? 0 : count - (a->floor.seq - first + 1);
    a->events_claimed += count;
}

/* Every successful record's events exist and name it as their cause.
 *
 * The log walk counted the events whose cause's record covers them
 * (events_covered): the pairs (event, record) that are right. The records
 * claim events_claimed pairs. Every claim is right exactly when the two
 * counts are equal, so a clean store needs no lookup per event; otherwise
 * a second pass looks each claimed event up and names the records. */
static int check_inbox(audit *a)
{
    bool each_event = false;
    int rc = walk_db(a, STORE_DB_INBOX, "inbox", inbox_entry, &each_event);
    each_event = true;
    if (rc == TALLY_ok && a->events_claimed != a->events_covered)
        rc = walk_db(a, STORE_DB_INBOX, "inbox links", inbox_entry, &each_event);
    return rc;
}

/* ---- the history index against the log (see history_sums) ---- */

static void history_keys_init(audit *a)
{
    if (getrandom(a->history_keys, sizeof(a->history_keys), 0) != sizeof(a->history_keys)) {
        struct timespec ts; /* no kernel randomness: still differs per run */
        clock_gettime(CLOCK_REALTIME, &ts);
        a->history_keys[0] = mix64((uint64_t)ts.tv_nsec ^ (uint64_t)getpid());
        a->history_keys[1] = mix64((uint64_t)ts.tv_sec + a->history_keys[0]);
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
        ledger_transfer_unpack(msgpack_safe_map_get(ev.body, "transfer"), &tr) == TALLY_ok) {
        uint64_t ids[2] = {tr.debit_account_id, tr.credit_account_id};
        for (int i = 0; i < 2; i++) {
            uint8_t key[16];
            ledger_history_key(ids[i], seq, key);
            MDB_val v;
            char name[64];
            name_account(ids[i], name);
            if (store_get(a->t, STORE_DB_HISTORY, key, 16, &v) != TALLY_ok || v.mv_size != 16 ||
                memcmp(v.mv_data, tr.id.bytes, 16) != 0)
                report(a, "history", name, "no history entry for seq %" PRIu64, seq);
        }
    }
    msgpack_unpacked_destroy(&up);
    progress(a, "history log", seq, a->head_seq);
    return a->fault;
}

/* An index entry must name a transfer event of its account. */
static void check_history_entry(audit *a, uint64_t account, uint64_t seq,
                                const uint8_t transfer_id[16])
{
    char name[64];
    name_account(account, name);
    uint8_t key[8];
    log_seq_key(seq, key);
    MDB_val v;
    if (store_get(a->t, STORE_DB_LOG, key, 8, &v) != TALLY_ok) {
        report(a, "history", name, "entry for seq %" PRIu64 ": no such event", seq);
        return;
    }
    msgpack_unpacked up;
    msgpack_unpacked_init(&up);
    log_event ev;
    ledger_transfer_record tr;
    if (log_event_decode(v.mv_data, v.mv_size, &up, &ev) == TALLY_ok && /* else: hash_chain */
        (ev.entity.kind != LOG_ENTITY_TRANSFER ||
         ledger_transfer_unpack(msgpack_safe_map_get(ev.body, "transfer"), &tr) != TALLY_ok ||
         memcmp(tr.id.bytes, transfer_id, 16) != 0 ||
         (tr.debit_account_id != account && tr.credit_account_id != account)))
        report(a, "history", name, "entry for seq %" PRIu64 " names no transfer of the account",
               seq);
    msgpack_unpacked_destroy(&up);
}

/* One index entry: its fingerprint into *sums, or (sums NULL) the entry
 * checked against the log. */
static void history_entry(audit *a, const MDB_val *k, const MDB_val *v, void *ctx)
{
    history_sums *sums = ctx;
    if (k->mv_size != 16 || v->mv_size != 16) {
        if (sums)
            report(a, "history", "history", "an entry of %zu/%zu bytes is corrupt", k->mv_size,
                   v->mv_size);
        return;
    }
    uint64_t account = get_u64_be(k->mv_data), seq = get_u64_be((uint8_t *)k->mv_data + 8);
    if (sums)
        history_sums_add(a, sums, account, seq, v->mv_data);
    else
        check_history_entry(a, account, seq, v->mv_data);
}

/* Every transfer event is in both accounts' history, and the history
 * holds nothing else. */
static int check_history_index(audit *a)
{
    history_sums stored = {0};
    int rc = walk_db(a, STORE_DB_HISTORY, "history", history_entry, &stored);
    if (rc != TALLY_ok || memcmp(&stored, &a->history_log, sizeof(stored)) == 0)
        return rc;
    uint64_t findings = a->stats->findings;
    rc = log_read(a->t, 1, UINT64_MAX, find_missing_history, a);
    if (rc == TALLY_ok)
        rc = walk_db(a, STORE_DB_HISTORY, "history entries", history_entry, NULL);
    if (rc == TALLY_ok && a->stats->findings == findings)
        report(a, "history", "history",
               "the index (%" PRIu64 " entries) differs from the transfer events (%" PRIu64
               " entries expected)", stored.count, a->history_log.count);
    return rc;
}

/* ---- cursors and dlq (BRIEF §6: every cursor <= head; every dead letter
 * names an existing seq) ---- */

typedef struct sub_tally {
    sub_state state;
    uint64_t flights, replays, dead;
} sub_tally;

typedef struct sub_audit {
    audit *a;
    table *subs; /* name -> sub_tally */
    uint64_t first_seq;
} sub_audit;

static int sub_collect(const sub_state *st, void *ctx)
{
    sub_audit *sa = ctx;
    int inserted;
    sub_tally *tl = table_upsert(sa->subs, st->name, strlen(st->name), &inserted);
    if (!tl)
        return TALLY_out_of_memory;
    memset(tl, 0, sizeof(*tl));
    tl->state = *st;
    char name[96];
    snprintf(name, sizeof(name), "subscriber:%s", st->name);
    if (st->ack_floor > st->delivered_seq || st->delivered_seq > sa->a->head_seq)
        report(sa->a, "cursors", name, "ack floor %" PRIu64 ", delivered %" PRIu64
               ", head %" PRIu64, st->ack_floor, st->delivered_seq, sa->a->head_seq);
    return TALLY_ok;
}

static int sub_record_seen(char kind, tally_str n, uint64_t seq, void *ctx)
{
    sub_audit *sa = ctx;
    char name[128];
    snprintf(name, sizeof(name), "subscriber:%.*s/seq:%" PRIu64, (int)n.len, n.ptr, seq);
    const char *check = kind == 'd' ? "dlq" : "cursors";
    sub_tally *tl = table_find(sa->subs, n.ptr, n.len);
    if (!tl) {
        report(sa->a, check, name, "belongs to no subscriber");
        return TALLY_ok;
    }
    if (kind == 'f') {
        tl->flights++;
        if (seq <= tl->state.ack_floor || seq > tl->state.delivered_seq)
            report(sa->a, check, name, "in flight outside (ack floor %" PRIu64 ", delivered %"
                   PRIu64 "]", tl->state.ack_floor, tl->state.delivered_seq);
    } else {
        kind == 'r' ? tl->replays++ : tl->dead++;
        if (seq == 0 || seq > sa->a->head_seq || (sa->first_seq && seq < sa->first_seq))
            report(sa->a, check, name, "names an event that does not exist (log %" PRIu64
                   "..%" PRIu64 ")", sa->first_seq, sa->a->head_seq);
    }
    return TALLY_ok;
}

static int sub_counts(const void *key, size_t key_len, void *value, void *ctx)
{
    (void)key;
    (void)key_len;
    sub_audit *sa = ctx;
    const sub_tally *tl = value;
    char name[96];
    snprintf(name, sizeof(name), "subscriber:%s", tl->state.name);
    if (tl->state.in_flight != tl->flights + tl->replays)
        report(sa->a, "cursors", name, "counts %" PRIu32 " in flight, %" PRIu64 " records",
               tl->state.in_flight, tl->flights + tl->replays);
    if (tl->state.dead_letters != tl->dead)
        report(sa->a, "dlq", name, "counts %" PRIu64 " dead letters, %" PRIu64 " records",
               tl->state.dead_letters, tl->dead);
    return 0;
}

static int check_subscribers(audit *a)
{
    sub_audit sa = {a, table_create(sizeof(sub_tally)), 0};
    if (!sa.subs)
        return TALLY_out_of_memory;
    int rc = log_first_seq(a->t, &sa.first_seq);
    if (rc == TALLY_ok)
        rc = sub_list(a->t, sub_collect, &sa);
    if (rc == TALLY_corrupt_record) {
        report(a, "cursors", "cursors", "a cursor record is corrupt");
        rc = TALLY_ok;
    }
    if (rc == TALLY_ok)
        rc = sub_records(a->t, sub_record_seen, &sa);
    if (rc == TALLY_corrupt_record) {
        report(a, "cursors", "cursors", "a subscriber record key is corrupt");
        rc = TALLY_ok;
    } else if (rc == TALLY_ok) {
        table_each(sa.subs, sub_counts, &sa);
    }
    table_destroy(sa.subs);
    return rc;
}

int ledger_invariants_check(store_txn *t, ledger_invariant_report_fn fn, void *ctx,
                            ledger_invariant_stats *stats)
{
    return ledger_invariants_check_with(t, NULL, fn, ctx, stats);
}

int ledger_invariants_check_with(store_txn *t, const ledger_invariant_options *options,
                                 ledger_invariant_report_fn fn, void *ctx,
                                 ledger_invariant_stats *stats)
{
    static const ledger_invariant_options defaults;
    memset(stats, 0, sizeof(*stats));
    audit a = {.t = t, .fn = fn, .ctx = ctx, .stats = stats,
               .opt = options ? options : &defaults};
    history_keys_init(&a);
    a.accounts = table_create(sizeof(ledger_account));
    a.holds = table_create(sizeof(hold_state));
    a.entitlements = table_create(sizeof(folded_entitlement));
    table *sums = table_create(sizeof(ledger_sum));
    table *pending = table_create(sizeof(int64_t));
    int rc = a.accounts && a.holds && a.entitlements && sums && pending ? TALLY_ok
                                                                        : TALLY_out_of_memory;
    if (rc == TALLY_ok)
        rc = seed_from_checkpoint(&a);
    if (rc == TALLY_ok)
        rc = check_log(&a);
    if (rc == TALLY_ok)
        rc = a.fault;
    if (rc == TALLY_ok)
        rc = check_transfers(&a, pending);
    if (rc == TALLY_ok)
        rc = check_accounts(&a, sums, pending);
    if (rc == TALLY_ok)
        table_each(sums, check_ledger_sum, &a);
    if (rc == TALLY_ok)
        rc = check_entitlements(&a);
    if (rc == TALLY_ok)
        rc = check_inbox(&a);
    if (rc == TALLY_ok)
        rc = check_history_index(&a);
    if (rc == TALLY_ok)
        rc = check_subscribers(&a);
    if (a.inbox_cursor)
        mdb_cursor_close(a.inbox_cursor);
    table_destroy(a.accounts);
    table_destroy(a.holds);
    table_destroy(a.entitlements);
    table_destroy(sums);
    table_destroy(pending);
    return rc;
}
