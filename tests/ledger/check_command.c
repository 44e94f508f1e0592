/*
 * check_command.c — tests of ledger/command.c's op table: a row for every
 * command kind, at its own index, with every function it must have, a
 * stable name and a NONE-ended list of event types that all have wire
 * names; no row outside the kinds; and the names the wire and tools use.
 * (What each row's functions do is tested with their state: check_account,
 * check_transfer, check_hold, check_entitlement, check_chain,
 * check_webhook; ledger_emit asserts in all of them that an op emits only
 * the event types its row lists.)
 */
#include "tests/support/suite.h"
#include "tests/support/test_support.h"

#include <string.h>

START_TEST(test_every_kind_has_a_whole_row)
{
    for (unsigned k = LEDGER_ACCOUNT_OPEN; k < LEDGER_COMMAND_KIND_END; k++) {
        const ledger_op_row *row = ledger_op_of((ledger_command_kind)k);
        ck_assert_msg(row != NULL, "kind %u has no row", k);
        ck_assert_msg(row->kind == (ledger_command_kind)k, "row %u says kind %u", k,
                      (unsigned)row->kind);
        ck_assert_msg(row->name != NULL && row->validate != NULL && row->fingerprint != NULL &&
                          row->apply != NULL,
                      "row %u (%s) lacks a member", k, row->name ? row->name : "?");
        ck_assert_msg(row->events[LEDGER_OP_EVENT_TYPES_MAX] == LOG_EVENT_TYPE_NONE,
                      "row %s: its event types are not NONE-ended", row->name);
        for (const log_event_type *t = row->events; *t != LOG_EVENT_TYPE_NONE; t++)
            ck_assert_msg(log_event_type_name(*t) != NULL, "row %s: event type %d has no name",
                          row->name, (int)*t);
        for (unsigned j = LEDGER_ACCOUNT_OPEN; j < k; j++)
            ck_assert_str_ne(ledger_op_of((ledger_command_kind)j)->name, row->name);
    }
}
END_TEST

START_TEST(test_no_row_outside_the_kinds)
{
    ck_assert_ptr_null(ledger_op_of((ledger_command_kind)0));
    ck_assert_ptr_null(ledger_op_of((ledger_command_kind)LEDGER_COMMAND_KIND_END));
    ck_assert_ptr_null(ledger_op_of((ledger_command_kind)-1));
    ck_assert_str_eq(ledger_command_name((ledger_command_kind)0), "unknown");
    ledger_command odd = {.kind = (ledger_command_kind)LEDGER_COMMAND_KIND_END};
    uint32_t failed;
    ck_assert_int_eq(ledger_command_validate(&odd, &failed), TALLY_unknown_command);
}
END_TEST

/* The names are a contract (the torture harness, tally-demo and the
 * protocol name ops by them): a row renamed fails here. */
START_TEST(test_names_are_stable)
{
    static const struct {
        ledger_command_kind kind;
        const char *name;
    } names[] = {
        {LEDGER_ACCOUNT_OPEN, "account_open"}, {LEDGER_TRANSFER, "transfer"},
        {LEDGER_POST, "post"},                 {LEDGER_VOID, "void"},
        {LEDGER_GRANT, "grant"},               {LEDGER_EXTEND, "extend"},
        {LEDGER_REVOKE, "revoke"},             {LEDGER_CHAIN, "chain"},
        {LEDGER_WEBHOOK_RECEIVE, "webhook_receive"}, {LEDGER_REVERSE, "transfer_reverse"},
        {LEDGER_ENDPOINT_DISABLE, "endpoint_disable"}, {LEDGER_ENDPOINT_ENABLE, "endpoint_enable"},
        {LEDGER_ENDPOINT_ROTATE_SECRET, "endpoint_rotate_secret"},
        {LEDGER_ENDPOINT_RECOVER, "endpoint_recover"},
        {LEDGER_ENDPOINT_RECOVERED, "endpoint_recovered"},
        {LEDGER_ENDPOINT_CREATE, "endpoint_create"},
        {LEDGER_ENDPOINT_UPDATE, "endpoint_update"},
        {LEDGER_ENDPOINT_DELETE, "endpoint_delete"},
    };
    ck_assert_uint_eq(sizeof(names) / sizeof(names[0]), LEDGER_COMMAND_KIND_END - 1);
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
        ck_assert_str_eq(ledger_command_name(names[i].kind), names[i].name);
}
END_TEST

/* A chain inside a chain is refused by the chain row, as member. */
START_TEST(test_chain_row_refuses_nesting)
{
    ledger_command inner = {.kind = LEDGER_CHAIN};
    ledger_command outer = {.kind = LEDGER_CHAIN, .u.chain = {&inner, 1}};
    uint32_t failed = 9;
    ck_assert_int_eq(ledger_command_validate(&outer, &failed), TALLY_chain_must_not_nest);
    ck_assert_uint_eq(failed, 0);
    ck_assert_int_eq(ledger_op_of(LEDGER_CHAIN)->apply(NULL, &inner), TALLY_chain_must_not_nest);
}
END_TEST

#define TIMEOUT_S 30

static Suite *command_suite(void)
{
    const test_row tests[] = {
        {"table", test_every_kind_has_a_whole_row, TIMEOUT_S},
        {"table", test_no_row_outside_the_kinds, TIMEOUT_S},
        {"table", test_names_are_stable, TIMEOUT_S},
        {"table", test_chain_row_refuses_nesting, TIMEOUT_S},
    };
    return test_suite_of_rows("command", TEST_ROWS(tests));
}

int main(void) { return test_run_suite(command_suite()); }
