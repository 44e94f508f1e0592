/*
 * queries.c — `tally account list` with a filter (account_query) and
 * `tally transfer list` (transfer_query, account_transfers): the options
 * as a tally_query, pages read until --limit records are shown or none
 * follow (docs/PROTOCOL.md, "Queries").
 */
#include "config.h"

#include "clients/cli/tally_cli.h"

#include <stdlib.h>
#include <string.h>

bool account_list_filtered(const cli *c)
{
    static const cli_slot filters[] = {SLOT_LEDGER,       SLOT_CODE,      SLOT_USER_DATA_128,
                                       SLOT_USER_DATA_64, SLOT_USER_DATA_32, SLOT_FROM_TIME,
                                       SLOT_UNTIL,        SLOT_REVERSE};
    for (size_t i = 0; i < sizeof(filters) / sizeof(filters[0]); i++)
        if (c->v[filters[i]].set)
            return true;
    return false;
}

static tally_query query_of(const cli *c)
{
    tally_query q = {.ledger = (uint32_t)value_or(c, SLOT_LEDGER, 0),
                     .code = (uint16_t)value_or(c, SLOT_CODE, 0),
                     .user_data = {.user_data_64 = value_or(c, SLOT_USER_DATA_64, 0),
                                   .user_data_32 = (uint32_t)value_or(c, SLOT_USER_DATA_32, 0)},
                     .timestamp_min_ms = c->v[SLOT_FROM_TIME].set ? c->v[SLOT_FROM_TIME].i : 0,
                     .timestamp_max_ms = c->v[SLOT_UNTIL].set ? c->v[SLOT_UNTIL].i : 0,
                     .reversed = c->v[SLOT_REVERSE].set};
    if (c->v[SLOT_USER_DATA_128].set)
        q.user_data.user_data_128 = c->v[SLOT_USER_DATA_128].id;
    return q;
}

/* One page of the listing's kind into l->page. */
typedef int (*query_read_fn)(cli *c, tally_query *q, void *page, uint32_t limit,
                             tally_query_page *got);
typedef void (*query_show_fn)(const cli *c, cli_table *t, const void *page, size_t count);

/* Pages from the query's start until --limit records were shown or none
 * follow. */
static int query_listing(cli *c, const cli_listing_kind *kind, tally_query q, query_read_fn read,
                         query_show_fn show, const char *what)
{
    cli_listing l;
    listing_begin(c, &l, kind);
    for (uint32_t limit; (limit = listing_next(&l)) > 0;) {
        tally_query_page got;
        q.limit = limit;
        l.rc = read(c, &q, l.page, limit, &got);
        if (l.rc != TALLY_ok)
            break;
        show(c, &l.table, l.page, got.count);
        listing_took(&l, got.count);
        if (!got.has_next)
            break;
        q.has_cursor = true;
        q.cursor = got.next;
    }
    int rc = l.rc;
    listing_end(c, &l, rc == TALLY_ok || l.table.rows > 0);
    return rc == TALLY_ok ? CLI_EXIT_OK : read_failure(c, what, rc);
}

static int accounts_query_read(cli *c, tally_query *q, void *page, uint32_t limit,
                               tally_query_page *got)
{
    return tally_account_query(c->client, q, page, limit, got);
}

int run_account_query(cli *c)
{
    if (c->v[SLOT_AFTER].set)
        return usage_error(c, "--after is for the listing by id: leave it out with a filter");
    return query_listing(c, &account_listing, query_of(c), accounts_query_read, accounts_output,
                         "accounts");
}

static const cli_listing_kind transfer_listing = {transfer_titles, 12, 1000,
                                                  sizeof(tally_transfer_info)};

static void transfers_output(const cli *c, cli_table *t, const void *page, size_t count)
{
    const tally_transfer_info *transfers = page;
    for (size_t i = 0; i < count; i++) {
        if (c->json)
            json_emit(transfer_json(&transfers[i]));
        else
            transfer_row(t, &transfers[i]);
    }
}

static int transfers_query_read(cli *c, tally_query *q, void *page, uint32_t limit,
                                tally_query_page *got)
{
    if (!c->v[SLOT_DEBIT].set)
        return tally_transfer_query(c->client, q, page, limit, got);
    /* Neither --debits nor --credits: both sides. */
    bool debits = c->v[SLOT_DEBITS_LIMITED].set || !c->v[SLOT_CREDITS_LIMITED].set;
    bool credits = c->v[SLOT_CREDITS_LIMITED].set || !c->v[SLOT_DEBITS_LIMITED].set;
    return tally_account_transfers(c->client, c->v[SLOT_DEBIT].u, debits, credits, q, page,
                                   limit, got);
}

int run_transfer_list(cli *c)
{
    bool account = c->v[SLOT_DEBIT].set;
    if (!account && (c->v[SLOT_DEBITS_LIMITED].set || c->v[SLOT_CREDITS_LIMITED].set))
        return usage_error(c, "--debits and --credits are for --account");
    if (account && c->v[SLOT_LEDGER].set)
        return usage_error(c, "--ledger is not a filter of --account (its transfers share its "
                              "ledger)");
    return query_listing(c, &transfer_listing, query_of(c), transfers_query_read,
                         transfers_output, "transfers");
}
