/*
 * verify.c — tally-bench's verification: after the run, the server must
 * show exactly the acknowledged unique keys applied once each, and the
 * balances moved by exactly the acknowledged amounts (the report's checks).
 */
#include "config.h"

#include "tools/bench/bench.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

void check_add(report *r, const char *name, bool ok, bool counts, const char *fmt, ...)
{
    if (r->count == CHECKS_MAX)
        return;
    check *c = &r->checks[r->count++];
    c->name = name;
    c->ok = ok;
    c->counts = counts;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->detail, sizeof(c->detail), fmt, ap);
    va_end(ap);
    if (counts && !ok)
        r->verified = false;
}

static void verify_results(const bench *b, report *r)
{
    uint64_t effects = LOAD(effects), rejected = LOAD(rejections), unresolved = LOAD(unresolved);
    check_add(r, "answered", rejected == 0 && unresolved == 0 && b->first_error[0] == '\0', true,
              "%" PRIu64 " unique keys acknowledged ok, %" PRIu64 " rejected, %" PRIu64
              " without an answer",
              effects, rejected, unresolved);
    uint64_t applied = LOAD(applied_results), lost = LOAD(lost_answers) + LOAD(dup_lost_answer);
    check_add(r, "applied_once", applied + lost == effects && LOAD(unexpected_replays) == 0, true,
              "%" PRIu64 " results applied (not replayed) + %" PRIu64
              " applied by an attempt whose answer was lost = %" PRIu64
              " acknowledged keys; %" PRIu64 " fresh keys answered as replayed",
              applied, lost, effects, LOAD(unexpected_replays));
}

static void verify_stats(const bench *b, const tally_stats *s0, const tally_stats *s1, report *r)
{
    uint64_t effects = LOAD(effects);
    uint64_t transfers = s1->transfers - s0->transfers, head = s1->head_seq - s0->head_seq;
    uint64_t inbox = s1->inbox - s0->inbox, events = s1->events - s0->events;
    check_add(r, "server_transfers", transfers == effects, true,
              "stats.transfers +%" PRIu64 ", acknowledged unique keys %" PRIu64, transfers, effects);
    check_add(r, "server_log", head == effects, true,
              "log head +%" PRIu64 " (stats.events +%" PRIu64 "), one event per transfer: %" PRIu64
              "; events reported by applied results %" PRIu64,
              head, events, effects, LOAD(events_caused));
    check_add(r, "server_inbox", inbox == effects, true,
              "stats.inbox +%" PRIu64 ", acknowledged unique keys %" PRIu64, inbox, effects);
}

static void verify_balances(const bench *b, const account_snapshot *s0, const account_snapshot *s1,
                            report *r)
{
    uint64_t wrong = 0, first_wrong = 0;
    int64_t debits = 0, credits = 0, abs_debits = 0, abs_credits = 0;
    for (uint64_t i = 0; i < b->opt.accounts; i++) {
        int64_t dd = s1->debits_posted[i] - s0->debits_posted[i];
        int64_t dc = s1->credits_posted[i] - s0->credits_posted[i];
        bool pending_moved = s1->debits_pending[i] != s0->debits_pending[i] ||
                             s1->credits_pending[i] != s0->credits_pending[i];
        if (dd != atomic_load(&b->expected_debits[i]) ||
            dc != atomic_load(&b->expected_credits[i]) || pending_moved) {
            if (wrong++ == 0)
                first_wrong = i + 1;
        }
        debits += dd;
        credits += dc;
        abs_debits += s1->debits_posted[i];
        abs_credits += s1->credits_posted[i];
    }
    char first[48] = "";
    if (wrong)
        snprintf(first, sizeof(first), ", first: account %" PRIu64, first_wrong);
    uint64_t amount = LOAD(amount_total);
    bool sums = debits == credits && (uint64_t)debits == amount;
    check_add(r, "balances", wrong == 0 && sums && s0->bad_accounts == 0 && s1->bad_accounts == 0,
              true,
              "sum of debits +%" PRId64 " = sum of credits +%" PRId64 " = acknowledged amounts %" PRIu64
              "; %" PRIu64 " of %" PRIu64 " accounts differ from the expected movement%s",
              debits, credits, amount, wrong, b->opt.accounts, first);
    check_add(r, "balances_absolute", abs_debits == abs_credits, false,
              "over the bench accounts now: sum of debits_posted %" PRId64
              ", sum of credits_posted %" PRId64 " (informational: equal unless other traffic "
              "touched these accounts)",
              abs_debits, abs_credits);
}

static void verify_duplicates(const bench *b, uint64_t dup_sends, report *r)
{
    uint64_t keys = LOAD(dup_keys), once = LOAD(dup_exactly_once), lost = LOAD(dup_lost_answer);
    uint64_t twice = LOAD(dup_double_applied), odd = LOAD(dup_anomalies);
    check_add(r, "duplicates", twice == 0 && odd == 0 && once + lost == keys, true,
              "%" PRIu64 " keys sent twice (%" PRIu64 " member sends; %" PRIu64
              " requests concurrent with the original, %" PRIu64 " of them overlapping in time; %" PRIu64
              " sequential); %" PRIu64 " applied exactly once with the other send replayed, %" PRIu64
              " applied by a lost attempt, %" PRIu64 " applied twice, %" PRIu64 " otherwise",
              keys, dup_sends, LOAD(jobs_concurrent), LOAD(jobs_overlapped), LOAD(jobs_sequential),
              once, lost, twice, odd);
}

static bool user_data_equal(const tally_user_data *x, const tally_user_data *y)
{
    return memcmp(x->user_data_128.bytes, y->user_data_128.bytes, 16) == 0 &&
           x->user_data_64 == y->user_data_64 && x->user_data_32 == y->user_data_32;
}

/* Read back the sampled transfers: each exists once, as sent. */
static void verify_samples(bench *b, report *r)
{
    unsigned checked = 0, wrong = 0;
    for (unsigned i = 0; i < b->opt.clients; i++) {
        const worker *w = &b->workers[i];
        for (unsigned j = 0; j < w->sample_count; j++) {
            const tally_transfer_args *a = &w->samples[j].args;
            tally_transfer_info t;
            int rc = TALLY_internal;
            for (unsigned attempt = 1; attempt <= b->opt.attempts_max; attempt++) {
                rc = tally_transfer_get(b->clients[0], &a->id, &t);
                if (!is_fault(rc))
                    break;
                backoff(attempt);
            }
            checked++;
            if (rc != TALLY_ok || t.amount != a->amount || t.debit_account_id != a->debit_account_id ||
                t.credit_account_id != a->credit_account_id || strcmp(t.state, "posted") != 0 ||
                t.version != 1 || !user_data_equal(&t.user_data, &a->user_data)) {
                if (wrong++ == 0)
                    note_error(b, "transfer of key %s read back: %s", w->samples[j].key,
                               rc != TALLY_ok ? tally_strerror(rc) : "fields differ");
            }
        }
    }
    check_add(r, "read_back", wrong == 0, true,
              "%u sampled transfers read back by id (derived from the key): %u differ or are missing",
              checked, wrong);
}

/* The snapshot after the run and every check. */
void verify(bench *b, const account_snapshot *s0, summary *s, report *r)
{
    account_snapshot s1;
    r->verified = true;
    cluster_sync_reads(b); /* every node read has applied every acknowledged write */
    int rc = read_with_retries(b, b->clients[0], read_stats, 0, &s->s1);
    if (rc == TALLY_ok)
        rc = snapshot_alloc(&s1, b->opt.accounts);
    if (rc != TALLY_ok) {
        check_add(r, "snapshot", false, true, "cannot read the server after the run: %s",
                  tally_strerror(rc));
        return;
    }
    snapshot_take(b, &s1);
    verify_results(b, r);
    verify_stats(b, &s->s0, &s->s1, r);
    verify_balances(b, s0, &s1, r);
    if (b->opt.dup_ratio > 0)
        verify_duplicates(b, s->dup_sends, r);
    verify_samples(b, r);
    snapshot_free(&s1);
}
