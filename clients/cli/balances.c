/*
 * balances.c — `tally account balances` (account_balances) and `tally
 * account balance-at` (balance_at): an account's balances after each
 * transfer event in a range, or at one point (docs/PROTOCOL.md, "Balances
 * at a point in time").
 */
#include "config.h"

#include "clients/cli/tally_cli.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

static json_t *balance_json(const tally_balance *b)
{
    return json_pack("{s:o, s:o, s:I, s:I, s:I, s:I, s:I}", "seq", json_u64(b->seq), "time",
                     json_time(b->timestamp_ms), "time_ms", (json_int_t)b->timestamp_ms,
                     "debits_pending", (json_int_t)b->debits_pending, "debits_posted",
                     (json_int_t)b->debits_posted, "credits_pending",
                     (json_int_t)b->credits_pending, "credits_posted",
                     (json_int_t)b->credits_posted);
}

static void balances_print(const cli *c, const tally_balance *b, size_t count)
{
    if (c->json) {
        for (size_t i = 0; i < count; i++)
            json_emit(balance_json(&b[i]));
        return;
    }
    static const char *const titles[] = {"SEQ",           "TIME",           "DEBITS_POSTED",
                                         "CREDITS_POSTED", "DEBITS_PENDING", "CREDITS_PENDING"};
    cli_table t;
    table_init(&t, titles, 6);
    for (size_t i = 0; i < count; i++) {
        char when[40];
        time_text(b[i].timestamp_ms, when);
        table_add(&t, "%" PRIu64 SEP "%s" SEP "%" PRId64 SEP "%" PRId64 SEP "%" PRId64 SEP
                      "%" PRId64,
                  b[i].seq, when, b[i].debits_posted, b[i].credits_posted, b[i].debits_pending,
                  b[i].credits_pending);
    }
    table_print_free(&t);
}

int run_account_balances(cli *c)
{
    uint64_t id = c->v[SLOT_ACCOUNT].u;
    tally_balances_query q = {
        .timestamp_min_ms = c->v[SLOT_FROM_TIME].set ? c->v[SLOT_FROM_TIME].i : 0,
        .timestamp_max_ms = c->v[SLOT_UNTIL].set ? c->v[SLOT_UNTIL].i : 0,
        .seq_min = value_or(c, SLOT_SEQ_MIN, 0),
        .seq_max = value_or(c, SLOT_SEQ_MAX, 0),
        .limit = (uint32_t)value_or(c, SLOT_LIMIT, TALLY_HISTORY_ENTRIES_DEFAULT),
        .reversed = c->v[SLOT_REVERSE].set,
        .after_seq = value_or(c, SLOT_AFTER, 0)};
    tally_balance *b = calloc(q.limit, sizeof(*b));
    if (!b)
        cli_out_of_memory();
    tally_balances_page page;
    int rc = tally_account_balances(c->client, id, &q, b, q.limit, &page);
    if (rc != TALLY_ok) {
        free(b);
        char what[48];
        snprintf(what, sizeof(what), "balances of account %" PRIu64, id);
        return read_failure(c, what, rc);
    }
    balances_print(c, b, page.count);
    if (page.has_next && !c->json)
        fprintf(stderr, "tally: more: add --after %" PRIu64 " for the next page\n", page.next);
    free(b);
    return CLI_EXIT_OK;
}

int run_account_balance_at(cli *c)
{
    uint64_t id = c->v[SLOT_ACCOUNT].u;
    bool by_time = c->v[SLOT_AT_TIME].set;
    if (by_time == c->v[SLOT_SEQ].set)
        return usage_error(c, "give --time or --seq (one of them)");
    tally_balance b;
    int rc = tally_balance_at(c->client, id, by_time, c->v[SLOT_AT_TIME].i, c->v[SLOT_SEQ].u, &b);
    if (rc != TALLY_ok) {
        char what[48];
        snprintf(what, sizeof(what), "balance of account %" PRIu64, id);
        return read_failure(c, what, rc);
    }
    balances_print(c, &b, 1);
    return CLI_EXIT_OK;
}
