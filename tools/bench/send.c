/*
 * send.c — tally-bench's sending: one request attempt (alone or as a
 * batch), the bench's own retries of faulted members with the same keys,
 * and what each final answer counts for (bench_counters, the resent keys'
 * tracks, the expected balance movements).
 */
#include "config.h"

#include "tools/bench/bench.h"

#include <inttypes.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

bool is_fault(int code)
{
    return code != TALLY_ok && tally_error_class_of(code) == TALLY_CLASS_FAULT &&
           code != TALLY_invalid_argument && code != TALLY_not_found;
}

void backoff(unsigned attempt)
{
    unsigned ms = BENCH_BACKOFF_MS_FIRST;
    while (attempt-- > 1 && ms < BENCH_BACKOFF_MS_MAX)
        ms *= 2;
    usleep((ms < BENCH_BACKOFF_MS_MAX ? ms : BENCH_BACKOFF_MS_MAX) * 1000u);
}

/* ---- recording results ---- */

static void effect_add(bench *b, const tally_transfer_args *t)
{
    atomic_fetch_add(&b->n.effects, 1);
    atomic_fetch_add(&b->n.amount_total, (uint64_t)t->amount);
    atomic_fetch_add(&b->expected_debits[t->debit_account_id - 1], t->amount);
    atomic_fetch_add(&b->expected_credits[t->credit_account_id - 1], t->amount);
}

/* The final outcome of one send of op (code after retries). */
static void record_result(bench *b, dup_job *job, const bench_op *op, int code,
                          const tally_result *r)
{
    bool ok = code == TALLY_ok;
    if (ok && !r->replayed) {
        atomic_fetch_add(&b->n.applied_results, 1);
        atomic_fetch_add(&b->n.events_caused, r->events);
    } else if (ok) {
        atomic_fetch_add(&b->n.replayed_results, 1);
    }
    if (job && op->track != NO_TRACK) {
        op_track *t = &job->tracks[op->track];
        if (op->faulted)
            atomic_fetch_add(&t->faulted, 1);
        if (!ok) {
            atomic_store(&t->failed_code, code);
            atomic_fetch_add(&t->failed, 1);
        } else {
            atomic_fetch_add(r->replayed ? &t->replayed : &t->applied, 1);
        }
        return;
    }
    if (ok) {
        if (r->replayed)
            atomic_fetch_add(op->faulted ? &b->n.lost_answers /* applied by a lost attempt */
                                         : &b->n.unexpected_replays /* a fresh key known? */,
                             1);
        effect_add(b, &op->args);
    } else if (is_fault(code)) {
        atomic_fetch_add(&b->n.unresolved, 1);
        atomic_store(&b->abort, true);
        note_error(b, "key %s: no answer after %u attempts: %s", op->key, b->opt.attempts_max,
                   tally_strerror(code));
    } else {
        atomic_fetch_add(&b->n.rejections, 1);
        note_error(b, "key %s: transfer %" PRIu64 " -> %" PRIu64 " rejected: %s", op->key,
                   op->args.debit_account_id, op->args.credit_account_id, tally_strerror(code));
    }
}

/* Judge one resent key once all its sends are answered. */
static void track_judge(bench *b, const bench_op *op, op_track *t)
{
    unsigned applied = atomic_load(&t->applied), replayed = atomic_load(&t->replayed);
    unsigned failed = atomic_load(&t->failed), faulted = atomic_load(&t->faulted);
    atomic_fetch_add(&b->n.dup_keys, 1);
    atomic_fetch_add(&b->n.dup_replayed_results, replayed);
    if (applied + replayed > 0)
        effect_add(b, &op->args);
    if (failed > 0) {
        int code = atomic_load(&t->failed_code);
        atomic_fetch_add(is_fault(code) ? &b->n.unresolved : &b->n.rejections, 1);
        note_error(b, "resent key %s: %s", op->key, tally_strerror(code));
    }
    if (applied > 1) {
        atomic_fetch_add(&b->n.dup_double_applied, 1);
        note_error(b, "resent key %s was applied %u times", op->key, applied);
    } else if (applied == 1 && replayed == 1) {
        atomic_fetch_add(&b->n.dup_exactly_once, 1);
    } else if (applied == 0 && replayed >= 1 && faulted > 0) {
        atomic_fetch_add(&b->n.dup_lost_answer, 1); /* applied by an attempt whose answer was lost */
    } else if (failed == 0) {
        atomic_fetch_add(&b->n.dup_anomalies, 1);
        note_error(b, "resent key %s: %u applied, %u replayed", op->key, applied, replayed);
    }
}

void job_release(bench *b, dup_job *job)
{
    if (atomic_fetch_sub(&job->refs, 1) != 1)
        return;
    for (size_t k = 0; k < job->count; k++)
        track_judge(b, &job->ops[k], &job->tracks[k]);
    if (job->concurrent) {
        atomic_fetch_add(&b->n.jobs_concurrent, 1);
        int64_t start = job->orig_start_ns > job->dup_start_ns ? job->orig_start_ns : job->dup_start_ns;
        int64_t end = job->orig_end_ns < job->dup_end_ns ? job->orig_end_ns : job->dup_end_ns;
        if (start < end)
            atomic_fetch_add(&b->n.jobs_overlapped, 1);
    } else {
        atomic_fetch_add(&b->n.jobs_sequential, 1);
    }
    free(job->ops);
    free(job->tracks);
    free(job);
}

/* ---- sending ---- */

/* One attempt for the ops listed in pending[0..n); codes[i] gets each
 * op's code and results[i] its result. Returns nothing: per-op codes say it. */
static void send_attempt(bench *b, tally_client *c, thread_stats *st, bench_op *ops,
                         const uint32_t *pending, size_t n, tally_result *results, int *codes)
{
    int64_t t0 = clock_mono_ns();
    if (b->opt.batch == 1 && n == 1) {
        memset(&results[0], 0, sizeof(results[0]));
        codes[0] = tally_transfer(c, ops[pending[0]].key, &ops[pending[0]].args, &results[0]);
    } else {
        tally_batch *batch = tally_batch_new(false);
        int rc = batch ? TALLY_ok : TALLY_out_of_memory;
        for (size_t i = 0; rc == TALLY_ok && i < n; i++)
            rc = tally_batch_transfer(batch, ops[pending[i]].key, &ops[pending[i]].args);
        if (rc == TALLY_ok) {
            memset(results, 0, n * sizeof(*results));
            rc = tally_batch_send(c, batch, NULL, results, n);
        }
        tally_batch_free(batch);
        for (size_t i = 0; i < n; i++)
            codes[i] = rc == TALLY_ok ? results[i].code : rc;
    }
    hist_record(&st->hist, (uint64_t)(clock_mono_ns() - t0));
    st->requests++;
}

/* Send ops[0..n) until each has an answer that is not a fault (or the
 * attempts run out), retrying faulted members with the same keys. */
void send_ops(bench *b, tally_client *c, thread_stats *st, bench_op *ops, size_t n,
                     dup_job *job, tally_result *results)
{
    uint32_t pending[TALLY_CLIENT_BATCH_MAX];
    int codes[TALLY_CLIENT_BATCH_MAX];
    size_t count = n;
    bool failed_after_kill = false; /* --kill-pid: a fault after the kill */
    for (size_t i = 0; i < n; i++)
        pending[i] = (uint32_t)i;
    for (unsigned attempt = 1; count > 0; attempt++) {
        if (attempt > 1) {
            st->retries++;
            backoff(attempt - 1);
        }
        send_attempt(b, c, st, ops, pending, count, results, codes);
        size_t still = 0;
        for (size_t i = 0; i < count; i++) {
            bench_op *op = &ops[pending[i]];
            failed_after_kill |= is_fault(codes[i]) && atomic_load(&b->kill_ns) != 0;
            if (is_fault(codes[i]) && attempt < b->opt.attempts_max) {
                op->faulted = true;
                pending[still++] = pending[i];
                continue;
            }
            if (is_fault(codes[i]))
                op->faulted = true;
            record_result(b, job, op, codes[i], &results[i]);
        }
        count = still;
    }
    if (failed_after_kill)
        cluster_failover_note(b, clock_mono_ns() - atomic_load(&b->kill_ns));
}
