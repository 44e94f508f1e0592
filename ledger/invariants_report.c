/*
 * invariants_report.c — what every room of the invariant checks shares
 * (invariants_audit.h): the list of checks (invariants.h), findings and
 * progress on their way to the caller, the walk of a database, and the
 * names of entities in findings. Calls nothing else of ledger/.
 */
#include "ledger/invariants_audit.h"

#include "common/error.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

/* The checks in the order they run (see invariants.h). */
static const struct {
    const char *name;
    bool needs_fold;
} checks[] = {
    {"log_gap", false},     {"hash_chain", false},      {"rebuild", true},
    {"balance_sum", false}, {"limit_flags", false},     {"hold_resolution", false},
    {"expiry_index", false}, {"reversals", false},      {"creation_times", true},
    {"inbox_links", false},
    {"failed_ids", false},
    {"inbox_time", false},  {"history", false},         {"record_index", false},
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

void audit_report(audit *a, const char *check, const char *entity, const char *fmt, ...)
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

bool audit_progress(audit *a, const char *phase, uint64_t done, uint64_t total)
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

int audit_walk_db(audit *a, store_db db, const char *phase, uint64_t *count, audit_entry_fn fn,
                  void *ctx)
{
    store_scan s;
    int rc = store_scan_begin(a->t, db, NULL, 0, false, &s);
    if (rc == TALLY_not_found)
        return a->fault; /* a database the store predates: empty */
    if (rc != TALLY_ok)
        return rc;
    uint64_t total = phase_total(a, db), done = 0;
    if (!count)
        count = &done;
    for (; store_scan_on(&s) && !a->fault; store_scan_next(&s)) {
        if (!audit_progress(a, phase, ++*count, total))
            break;
        fn(a, &s.key, &s.val, ctx);
    }
    rc = store_scan_end(&s, TALLY_ok);
    return rc == TALLY_ok ? a->fault : rc;
}

/* prefix and n in decimal (names are made for every event: no printf). */
static void name_u64(const char *prefix, uint64_t n, char out[64])
{
    size_t len = strlen(prefix);
    memcpy(out, prefix, len);
    char digits[20];
    int d = 0;
    do {
        digits[d++] = (char)('0' + n % 10);
        n /= 10;
    } while (n > 0);
    while (d > 0)
        out[len++] = digits[--d];
    out[len] = '\0';
}

void audit_name_account(uint64_t id, char out[64]) { name_u64("account:", id, out); }

void audit_name_transfer(const tally_id128 *id, char out[64])
{
    memcpy(out, "transfer:", 9);
    tally_id128_to_hex(id, out + 9);
}

void audit_name_seq(uint64_t seq, char out[64]) { name_u64("seq:", seq, out); }

void audit_name_entitlement(const ledger_entitlement *e, char out[256])
{
    snprintf(out, 256, "entitlement:%.*s/%.*s", (int)e->subject_len, e->subject,
             (int)e->feature_len, e->feature);
}
