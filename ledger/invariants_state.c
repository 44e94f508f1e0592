/*
 * invariants_state.c — the checks of what is stored against the fold (see
 * invariants_audit.h): accounts (rebuild, limit_flags, balance_sum),
 * transfers (hold_resolution), entitlements, their expiry entries
 * (expiry_index), the inbox records (inbox_links), and the subscribers'
 * cursors and dead letters (cursors, dlq).
 */
#include "ledger/invariants_audit.h"

#include "common/error.h"
#include "log/log.h"
#include "log/subscriber.h"
#include "log/subscriber_partition.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

typedef struct ledger_sum {
    uint32_t ledger;
    __int128 debits_posted, credits_posted, debits_pending, credits_pending;
} ledger_sum;

/* What the walks of stored records add up: per ledger, the sums of the
 * balances; per (account, side), the amounts of its unresolved holds. */
typedef struct record_sums {
    table *ledgers; /* u32 ledger -> ledger_sum */
    table *pending; /* (u64 account, u8 side 0 debit / 1 credit) -> int64_t */
    table *reversed; /* transfer id -> reversal_sum: the transfers reversed */
} record_sums;

/* A reversed transfer: what its record says was reversed, and the sum of
 * the amounts of the reversals that name it. */
typedef struct reversal_sum {
    int64_t claimed, reversals;
} reversal_sum;

/* Note a transfer's side of the reversals check: what it reverses, and
 * what it says was reversed of it. */
static void note_reversals(audit *a, table *reversed, const ledger_transfer_record *tr)
{
    int inserted;
    if (!tally_id128_is_zero(&tr->reverses)) {
        reversal_sum *r = table_upsert(reversed, tr->reverses.bytes, 16, &inserted);
        if (!r) {
            a->fault = TALLY_out_of_memory;
            return;
        }
        r->reversals += tr->amount;
    }
    if (tr->reversed_amount != 0) {
        reversal_sum *r = table_upsert(reversed, tr->id.bytes, 16, &inserted);
        if (!r) {
            a->fault = TALLY_out_of_memory;
            return;
        }
        r->claimed = tr->reversed_amount;
    }
}

static int check_reversal_sum(const void *key, size_t key_len, void *value, void *ctx)
{
    audit *a = ctx;
    const reversal_sum *r = value;
    if (r->claimed == r->reversals || key_len != 16)
        return 0;
    tally_id128 id;
    char name[64];
    memcpy(id.bytes, key, 16);
    audit_name_transfer(&id, name);
    audit_report(a, "reversals", name,
                 "reversed_amount %" PRId64 " but the reversals naming it sum to %" PRId64,
                 r->claimed, r->reversals);
    return 0;
}

/* The sum of account's unresolved holds on side (0 debits, 1 credits); with
 * create, made at 0 when missing (NULL when out of memory). */
static int64_t *pending_sum(table *pending, uint64_t account, int side, bool create)
{
    uint8_t key[9];
    put_u64_be(key, account);
    key[8] = (uint8_t)side;
    int inserted;
    return create ? table_upsert(pending, key, 9, &inserted) : table_find(pending, key, 9);
}

static void check_limits(audit *a, const ledger_account *acc)
{
    char name[64];
    audit_name_account(acc->id, name);
    if ((acc->flags & LEDGER_ACCOUNT_DEBITS_MUST_NOT_EXCEED_CREDITS) &&
        acc->debits_posted + acc->debits_pending > acc->credits_posted)
        audit_report(a, "limit_flags", name, "debits exceed credits");
    if ((acc->flags & LEDGER_ACCOUNT_CREDITS_MUST_NOT_EXCEED_DEBITS) &&
        acc->credits_posted + acc->credits_pending > acc->debits_posted)
        audit_report(a, "limit_flags", name, "credits exceed debits");
}

/* Pending balances must equal the sum of the account's unresolved holds. */
static void check_pending(audit *a, table *pending, const ledger_account *acc)
{
    int64_t have[2] = {acc->debits_pending, acc->credits_pending};
    for (int side = 0; side < 2; side++) {
        const int64_t *sum = pending_sum(pending, acc->id, side, false);
        int64_t want = sum ? *sum : 0;
        char name[64];
        audit_name_account(acc->id, name);
        if (have[side] != want)
            audit_report(a, "hold_resolution", name,
                         "%s_pending %" PRId64 " but unresolved holds sum to %" PRId64,
                         side == 0 ? "debits" : "credits", have[side], want);
    }
}

/* Add acc's balances to its ledger's sums; false when out of memory. */
static bool add_to_ledger_sum(table *ledgers, const ledger_account *acc)
{
    uint8_t lk[4];
    put_u32_be(lk, acc->ledger);
    int inserted;
    ledger_sum *s = table_upsert(ledgers, lk, 4, &inserted);
    if (!s)
        return false;
    s->ledger = acc->ledger;
    s->debits_posted += acc->debits_posted;
    s->credits_posted += acc->credits_posted;
    s->debits_pending += acc->debits_pending;
    s->credits_pending += acc->credits_pending;
    return true;
}

/* One stored account against the fold, its flags and its holds. */
static void account_entry(audit *a, const MDB_val *k, const MDB_val *v, void *ctx)
{
    record_sums *sums = ctx;
    ledger_account acc;
    char name[64];
    uint64_t id = k->mv_size == 8 ? get_u64_be(k->mv_data) : 0;
    audit_name_account(id, name);
    if (k->mv_size != 8 || ledger_account_decode(id, v->mv_data, v->mv_size, &acc) != TALLY_ok) {
        audit_report(a, "rebuild", name, "stored record is corrupt");
        return;
    }
    ledger_account *folded = a->opt->skip_rebuild ? NULL : audit_fold_account(a, id);
    if (!folded && !a->opt->skip_rebuild)
        audit_report(a, "rebuild", name, "stored but never opened in the log");
    else if (folded && !audit_accounts_equal(folded, &acc))
        audit_report(a, "rebuild", name,
                     "stored differs from the fold: posted %" PRId64 "/%" PRId64
                     " pending %" PRId64 "/%" PRId64 " v%" PRIu64 " vs fold %" PRId64
                     "/%" PRId64 " %" PRId64 "/%" PRId64 " v%" PRIu64,
                     acc.debits_posted, acc.credits_posted, acc.debits_pending,
                     acc.credits_pending, acc.version, folded->debits_posted,
                     folded->credits_posted, folded->debits_pending, folded->credits_pending,
                     folded->version);
    check_limits(a, &acc);
    check_pending(a, sums->pending, &acc);
    if (!add_to_ledger_sum(sums->ledgers, &acc))
        a->fault = TALLY_out_of_memory;
}

static int check_ledger_sum(const void *key, size_t key_len, void *value, void *ctx)
{
    (void)key, (void)key_len;
    audit *a = ctx;
    const ledger_sum *s = value;
    char name[64];
    snprintf(name, sizeof(name), "ledger:%" PRIu32, s->ledger);
    if (s->debits_posted != s->credits_posted)
        audit_report(a, "balance_sum", name, "sum of debits_posted != sum of credits_posted");
    if (s->debits_pending != s->credits_pending)
        audit_report(a, "balance_sum", name, "sum of debits_pending != sum of credits_pending");
    return 0;
}

static int check_accounts(audit *a, record_sums *sums)
{
    int rc = audit_walk_db(a, STORE_DB_ACCOUNTS, "accounts", &a->stats->accounts, account_entry,
                           sums);
    if (rc == TALLY_ok && !a->opt->skip_rebuild && a->stats->accounts != table_count(a->accounts))
        audit_report(a, "rebuild", "accounts", "%zu opened in the log, %" PRIu64 " stored",
                     table_count(a->accounts), a->stats->accounts);
    if (rc == TALLY_ok)
        table_each(sums->ledgers, check_ledger_sum, a);
    return rc;
}

static bool expiry_entry_exists(audit *a, int64_t at_ms, uint8_t kind, const void *id,
                                size_t id_len)
{
    uint8_t key[LEDGER_EXPIRY_KEY_BYTES_MAX];
    size_t n = ledger_expiry_key(at_ms, kind, id, id_len, key);
    MDB_val v;
    return store_get(a->t, STORE_DB_EXPIRY, key, n, &v) == TALLY_ok;
}

/* One stored transfer: a hold matches the fold's view; an unresolved one
 * has its expiry entry and adds to its accounts' pending sums. */
static void transfer_entry(audit *a, const MDB_val *k, const MDB_val *v, void *ctx)
{
    record_sums *sums = ctx;
    tally_id128 id = {{0}};
    char name[64];
    if (k->mv_size == 16)
        memcpy(id.bytes, k->mv_data, 16);
    audit_name_transfer(&id, name);
    ledger_transfer_record tr;
    if (k->mv_size != 16 ||
        ledger_transfer_decode(&id, v->mv_data, v->mv_size, &tr) != TALLY_ok) {
        audit_report(a, "rebuild", name, "stored record is corrupt");
        return;
    }
    note_reversals(a, sums->reversed, &tr);
    if (!(tr.flags & LEDGER_TRANSFER_PENDING))
        return;
    hold_state *h = table_find(a->holds, id.bytes, 16);
    if (!a->opt->skip_rebuild && (!h || h->state != tr.state || h->version != tr.version))
        audit_report(a, "hold_resolution", name, "stored hold state differs from the log");
    if (tr.state != LEDGER_TRANSFER_PENDING_STATE)
        return;
    if (tr.expires_at_ms &&
        !expiry_entry_exists(a, tr.expires_at_ms, LEDGER_EXPIRY_HOLD, id.bytes, 16))
        audit_report(a, "expiry_index", name, "unresolved hold has no expiry entry");
    uint64_t ids[2] = {tr.debit_account_id, tr.credit_account_id};
    for (int side = 0; side < 2; side++) {
        int64_t *sum = pending_sum(sums->pending, ids[side], side, true);
        if (!sum) {
            a->fault = TALLY_out_of_memory;
            return;
        }
        *sum += tr.amount;
    }
}

/* One stored entitlement against the fold, and its expiry entry. */
static void entitlement_entry(audit *a, const MDB_val *k, const MDB_val *v, void *ctx)
{
    (void)ctx;
    ledger_entitlement e;
    char name[256];
    if (ledger_entitlement_decode(k->mv_data, k->mv_size, v->mv_data, v->mv_size, &e) !=
        TALLY_ok) {
        audit_report(a, "rebuild", "entitlement", "stored record is corrupt");
        return;
    }
    audit_name_entitlement(&e, name);
    const folded_entitlement *f = table_find(a->entitlements, k->mv_data, k->mv_size);
    uint8_t es[LEDGER_ENTITLEMENT_RECORD_BYTES];
    ledger_entitlement_encode(&e, es);
    if (!a->opt->skip_rebuild && (!f || memcmp(es, f->record, sizeof(es)) != 0))
        audit_report(a, "rebuild", name, "stored differs from the fold");
    if (e.state == LEDGER_ENTITLEMENT_ACTIVE && !e.lifetime &&
        !expiry_entry_exists(a, e.valid_until_ms, LEDGER_EXPIRY_ENTITLEMENT, k->mv_data,
                             k->mv_size))
        audit_report(a, "expiry_index", name, "active entitlement has no expiry entry");
}

static int check_entitlements(audit *a)
{
    int rc = audit_walk_db(a, STORE_DB_ENTITLEMENTS, "entitlements", &a->stats->entitlements,
                           entitlement_entry, NULL);
    if (rc == TALLY_ok && !a->opt->skip_rebuild &&
        a->stats->entitlements != table_count(a->entitlements))
        audit_report(a, "rebuild", "entitlements", "%zu in the log, %" PRIu64 " stored",
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
        msgpack_unpacked up;
        log_event ev;
        msgpack_unpacked_init(&up);
        int rc = log_event_load(a->t, s, &up, &ev);
        if (rc == TALLY_not_found)
            audit_report(a, "inbox_links", name, "points at missing event %" PRIu64, s);
        if (rc == TALLY_ok && /* else: missing, or hash_chain's finding */
            (!ev.has_causation || !tally_str_equal(ev.consumer, rec->consumer) ||
             !tally_str_equal(ev.key, rec->key)))
            audit_report(a, "inbox_links", name, "event %" PRIu64 " names another cause", s);
        msgpack_unpacked_destroy(&up);
    }
}

/* An inbox record that left a transfer id failed: the entry is there and
 * names this record. */
static void check_failed_id_of(audit *a, const ledger_inbox_record *rec)
{
    ledger_failed_id f;
    int rc = ledger_failed_id_get(a->t, &rec->outcome.failed_id, &f);
    if (rc == TALLY_ok && tally_str_equal(f.consumer, rec->consumer) &&
        tally_str_equal(f.key, rec->key) && f.code == rec->outcome.code)
        return;
    char name[256], transfer[64];
    name_inbox(rec, name);
    audit_name_transfer(&rec->outcome.failed_id, transfer);
    audit_report(a, "failed_ids", name, "left %s failed, whose entry %s", transfer,
                 rc == TALLY_ok ? "names another attempt" : "is missing or unreadable");
}

/* One failed transfer id: its attempt's inbox record names it, and no
 * transfer has the id. */
static void failed_id_entry(audit *a, const MDB_val *k, const MDB_val *v, void *ctx)
{
    (void)ctx;
    ledger_failed_id f;
    char name[64];
    if (ledger_failed_id_decode(k->mv_data, k->mv_size, v->mv_data, v->mv_size, &f) != TALLY_ok) {
        audit_report(a, "failed_ids", "failed_ids", "entry is corrupt");
        return;
    }
    audit_name_transfer(&f.id, name);
    ledger_transfer_record tr;
    int rc = ledger_transfer_get(a->t, &f.id, &tr);
    if (rc != TALLY_not_found)
        audit_report(a, "failed_ids", name, "failed, yet a transfer (%s)", tally_strerror(rc));
    ledger_inbox_record rec;
    rc = ledger_inbox_get(a->t, f.consumer, f.key, &rec);
    if (rc != TALLY_ok)
        audit_report(a, "failed_ids", name, "its attempt %.*s/%.*s has no inbox record (%s)",
                     (int)f.consumer.len, f.consumer.ptr, (int)f.key.len, f.key.ptr,
                     tally_strerror(rc));
    else if (!tally_id128_equal(&rec.outcome.failed_id, &f.id) || rec.outcome.code != f.code)
        audit_report(a, "failed_ids", name, "the inbox record of %.*s/%.*s does not name it",
                     (int)f.consumer.len, f.consumer.ptr, (int)f.key.len, f.key.ptr);
}

/* One inbox record. The first pass (*each_event false) counts the events
 * that successful records claim and checks what needs no event; the
 * second looks every claimed event up, to name the records that claim
 * wrongly. */
static void inbox_entry(audit *a, const MDB_val *k, const MDB_val *v, void *ctx)
{
    bool each_event = *(const bool *)ctx;
    a->stats->inbox_records += !each_event;
    if (!each_event)
        audit_inbox_key_add(a, &a->inbox_keys, k->mv_data, k->mv_size);
    ledger_inbox_record rec;
    char name[256];
    if (ledger_inbox_decode(k->mv_data, k->mv_size, v->mv_data, v->mv_size, &rec) != TALLY_ok) {
        if (!each_event)
            audit_report(a, "inbox_links", "inbox", "record is corrupt");
        return;
    }
    if (!each_event && !tally_id128_is_zero(&rec.outcome.failed_id))
        check_failed_id_of(a, &rec);
    if (rec.outcome.code != TALLY_ok)
        return;
    if (each_event) {
        check_record_events(a, &rec);
        return;
    }
    if (rec.outcome.event_count == 0) {
        name_inbox(&rec, name);
        audit_report(a, "inbox_links", name, "succeeded without events");
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
    int rc = audit_walk_db(a, STORE_DB_INBOX, "inbox", NULL, inbox_entry, &each_event);
    each_event = true;
    if (rc == TALLY_ok && a->events_claimed != a->events_covered)
        rc = audit_walk_db(a, STORE_DB_INBOX, "inbox links", NULL, inbox_entry, &each_event);
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
        audit_report(sa->a, "cursors", name, "ack floor %" PRIu64 ", delivered %" PRIu64
               ", head %" PRIu64, st->ack_floor, st->delivered_seq, sa->a->head_seq);
    if (st->active_ms < st->created_ms) /* its settings were checked as it was read */
        audit_report(sa->a, "cursors", name, "last active at %" PRId64 ", before its creation at %"
               PRId64, st->active_ms, st->created_ms);
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
        audit_report(sa->a, check, name, "belongs to no subscriber");
        return TALLY_ok;
    }
    if (kind == 'f') {
        tl->flights++;
        if (seq <= tl->state.ack_floor || seq > tl->state.delivered_seq)
            audit_report(sa->a, check, name, "in flight outside (ack floor %" PRIu64 ", delivered %"
                   PRIu64 "]", tl->state.ack_floor, tl->state.delivered_seq);
    } else {
        kind == 'r' ? tl->replays++ : tl->dead++;
        if (seq == 0 || seq > sa->a->head_seq || (sa->first_seq && seq < sa->first_seq))
            audit_report(sa->a, check, name, "names an event that does not exist (log %" PRIu64
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
        audit_report(sa->a, "cursors", name, "counts %" PRIu32 " in flight, %" PRIu64 " records",
               tl->state.in_flight, tl->flights + tl->replays);
    if (tl->state.dead_letters != tl->dead)
        audit_report(sa->a, "dlq", name, "counts %" PRIu64 " dead letters, %" PRIu64 " records",
               tl->state.dead_letters, tl->dead);
    return 0;
}

/* A partitions record (log/subscriber_partition.h): it decodes (counts,
 * holders and members in range, a lease end exactly where a holder is)
 * and belongs to a subscriber. */
static int sub_partitions_seen(tally_str n, const sub_partitions *g, bool ok, void *ctx)
{
    sub_audit *sa = ctx;
    char name[128];
    snprintf(name, sizeof(name), "subscriber:%.*s/partitions", (int)n.len, n.ptr);
    if (!ok)
        audit_report(sa->a, "cursors", name, "the partitions record is corrupt");
    else if (!table_find(sa->subs, n.ptr, n.len))
        audit_report(sa->a, "cursors", name, "belongs to no subscriber (%" PRIu32 " partitions)",
                     g->count);
    return TALLY_ok;
}

int audit_check_subscribers(audit *a)
{
    sub_audit sa = {a, table_create(sizeof(sub_tally)), 0};
    if (!sa.subs)
        return TALLY_out_of_memory;
    int rc = log_first_seq(a->t, &sa.first_seq);
    if (rc == TALLY_ok)
        rc = sub_list(a->t, sub_collect, &sa);
    if (rc == TALLY_corrupt_record) {
        audit_report(a, "cursors", "cursors", "a cursor record is corrupt");
        rc = TALLY_ok;
    }
    if (rc == TALLY_ok)
        rc = sub_records(a->t, sub_record_seen, &sa);
    if (rc == TALLY_corrupt_record) {
        audit_report(a, "cursors", "cursors", "a subscriber record key is corrupt");
        rc = TALLY_ok;
    } else if (rc == TALLY_ok) {
        table_each(sa.subs, sub_counts, &sa);
    }
    if (rc == TALLY_ok)
        rc = sub_partitions_each(a->t, sub_partitions_seen, &sa);
    table_destroy(sa.subs);
    return rc;
}

int audit_check_records(audit *a)
{
    record_sums sums = {table_create(sizeof(ledger_sum)), table_create(sizeof(int64_t)),
                        table_create(sizeof(reversal_sum))};
    int rc = sums.ledgers && sums.pending && sums.reversed ? TALLY_ok : TALLY_out_of_memory;
    if (rc == TALLY_ok)
        rc = audit_walk_db(a, STORE_DB_TRANSFERS, "transfers", &a->stats->transfers,
                           transfer_entry, &sums);
    if (rc == TALLY_ok)
        table_each(sums.reversed, check_reversal_sum, a);
    if (rc == TALLY_ok)
        rc = check_accounts(a, &sums);
    if (rc == TALLY_ok)
        rc = check_entitlements(a);
    if (rc == TALLY_ok)
        rc = check_inbox(a);
    if (rc == TALLY_ok)
        rc = audit_walk_db(a, STORE_DB_FAILED_IDS, "failed ids", NULL, failed_id_entry, NULL);
    table_destroy(sums.ledgers);
    table_destroy(sums.pending);
    table_destroy(sums.reversed);
    return rc;
}
