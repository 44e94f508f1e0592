/*
 * tally_demo.c — a small program over the ledger library: it opens a store
 * (default ./tally-data), applies a few commands with fixed idempotency
 * keys, and prints the outcomes, the balances and the event log.
 *
 * Run it twice: the second run replays every command from the inbox (no
 * new effects, no new events), which is the point of tally.
 */
#include "common/clock.h"
#include "common/error.h"
#include "common/options.h"
#include "ledger/ledger.h"
#include "log/log.h"

#include <inttypes.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static tally_id128 id_from(uint64_t n)
{
    tally_id128 id = {{0}};
    put_u64_be(id.bytes + 8, n);
    return id;
}

static int apply(store *st, const char *key, const ledger_command *cmd)
{
    ledger_request req = {.consumer = tally_str_from("demo"), .key = tally_str_from(key),
                          .command = *cmd};
    ledger_outcome out;
    int rc = ledger_apply_one(st, &req, clock_wall_ms(), &out);
    if (rc != TALLY_ok) {
        fprintf(stderr, "tally-demo: %s: %s\n", key, tally_strerror(rc));
        return rc;
    }
    printf("%-22s %-12s %-26s", key, ledger_command_name(cmd->kind), tally_strerror(out.code));
    if (out.event_count)
        printf(" seq %" PRIu64 "..%" PRIu64, out.first_seq, out.first_seq + out.event_count - 1);
    printf("%s\n", out.replayed ? "  (replayed)" : "");
    return TALLY_ok;
}

static int run_commands(store *st)
{
    ledger_command cmds[7];
    const char *keys[7] = {"open-customer",     "open-revenue", "pay-invoice-1001",
                           "hold-ride-77",      "capture-ride-77",
                           "grant-pro-alice",   "overdraw-attempt"};
    cmds[0] = (ledger_command){.kind = LEDGER_ACCOUNT_OPEN,
                               .u.account_open = {.id = 1, .ledger = 1, .code = 10}};
    cmds[1] = (ledger_command){.kind = LEDGER_ACCOUNT_OPEN,
                               .u.account_open = {.id = 2, .ledger = 1, .code = 20,
                                                  .flags = LEDGER_ACCOUNT_DEBITS_MUST_NOT_EXCEED_CREDITS}};
    cmds[2] = (ledger_command){.kind = LEDGER_TRANSFER,
                               .u.transfer = {.id = id_from(1001), .debit_account_id = 1,
                                              .credit_account_id = 2, .amount = 5000,
                                              .ledger = 1, .code = 1}};
    cmds[3] = (ledger_command){.kind = LEDGER_TRANSFER,
                               .u.transfer = {.id = id_from(77), .debit_account_id = 1,
                                              .credit_account_id = 2, .amount = 1200,
                                              .ledger = 1, .code = 2,
                                              .flags = LEDGER_TRANSFER_PENDING,
                                              .timeout_s = 3600}};
    cmds[4] = (ledger_command){.kind = LEDGER_POST,
                               .u.hold = {.pending_id = id_from(77), .amount = 900}};
    cmds[5] = (ledger_command){.kind = LEDGER_GRANT,
                               .u.entitlement = {.subject = tally_str_from("alice"),
                                                 .feature = tally_str_from("pro"),
                                                 .duration_ms = INT64_C(30) * 86400000}};
    cmds[6] = (ledger_command){.kind = LEDGER_TRANSFER,
                               .u.transfer = {.id = id_from(1002), .debit_account_id = 2,
                                              .credit_account_id = 1, .amount = 1000000,
                                              .ledger = 1, .code = 1}};
    printf("commands (consumer \"demo\"):\n");
    for (int i = 0; i < 7; i++)
        if (apply(st, keys[i], &cmds[i]) != TALLY_ok)
            return 1;
    return 0;
}

static int print_event(uint64_t seq, const void *bytes, size_t len, void *ctx)
{
    (void)ctx;
    msgpack_unpacked up;
    msgpack_unpacked_init(&up);
    log_event ev;
    if (log_event_decode(bytes, len, &up, &ev) != TALLY_ok) {
        printf("  %6" PRIu64 "  (corrupt event)\n", seq);
    } else {
        char hex[33];
        tally_id128_to_hex(&ev.id, hex);
        printf("  %6" PRIu64 "  %-22.*s v%-3" PRIu64 " %s  by %.*s/%.*s\n", seq,
               (int)ev.type.len, ev.type.ptr, ev.entity_version, hex, (int)ev.consumer.len,
               ev.consumer.ptr, (int)ev.key.len, ev.key.ptr);
    }
    msgpack_unpacked_destroy(&up);
    return 0;
}

static int print_state(store *st)
{
    store_txn t;
    int rc = store_txn_begin(st, NULL, true, &t);
    if (rc != TALLY_ok)
        return rc;
    printf("\naccounts:\n  %4s %6s %14s %14s %14s %14s %4s\n", "id", "ledger", "debits_posted",
           "credits_posted", "debits_pending", "credits_pending", "ver");
    for (uint64_t id = 1; id <= 2; id++) {
        ledger_account a;
        if (ledger_account_get(&t, id, &a) == TALLY_ok)
            printf("  %4" PRIu64 " %6" PRIu32 " %14" PRId64 " %14" PRId64 " %14" PRId64
                   " %14" PRId64 " %4" PRIu64 "\n",
                   a.id, a.ledger, a.debits_posted, a.credits_posted, a.debits_pending,
                   a.credits_pending, a.version);
    }
    ledger_entitlement e;
    if (ledger_entitlement_get(&t, tally_str_from("alice"), tally_str_from("pro"), &e) ==
        TALLY_ok) {
        time_t until = (time_t)(e.valid_until_ms / 1000);
        char buf[32];
        strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", gmtime(&until));
        printf("\nentitlements:\n  alice/pro %s until %s (version %" PRIu64 ")\n",
               ledger_entitlement_state_name(ledger_entitlement_state_at(&e, clock_wall_ms())),
               buf, e.version);
    }
    printf("\nevent log:\n");
    rc = log_read(&t, 1, 1000, print_event, NULL);
    store_txn_abort(&t);
    return rc;
}

typedef struct demo_options {
    const char *dir;
} demo_options;

/* The options (common/options.h); --help is made from them. */
static const options_row rows[] = {
    {"data", "DIR", "./tally-data", "the store, created if missing",
     OPTIONS_TEXT(demo_options, dir), .short_name = 'd'},
    {"help", NULL, NULL, "print this help and exit", NULL, 0, 0, OPTIONS_COMMAND_LINE,
     .short_name = 'h'},
    {"version", NULL, NULL, "print the version and exit", NULL, 0, 0, OPTIONS_COMMAND_LINE},
};

static void usage(const options_set *set, FILE *f)
{
    fprintf(f, "usage: tally-demo [--data DIR] [--help] [--version]\n"
               "Opens (or creates) a tally store in DIR, applies a few commands with fixed\n"
               "idempotency keys and prints outcomes, balances and events. A second run\n"
               "replays every command: no new effects.\n"
               "\n");
    options_print_help(set, f);
}

int main(int argc, char **argv)
{
    demo_options o = {0};
    options_set set = {0};
    /* Words after the options were never read; they stay allowed. */
    set.arguments_max = (size_t)argc;
    int rc = options_load_command_line(&set, "tally-demo", rows, sizeof(rows) / sizeof(rows[0]),
                                       argc, argv, &o, usage);
    options_free(&set);
    if (rc >= 0)
        return rc;
    const char *dir = o.dir;
    store *st;
    store_options opt = {.path = dir};
    rc = store_open(&opt, &st);
    if (rc != TALLY_ok) {
        fprintf(stderr, "tally-demo: cannot open store %s: %s\n", dir, tally_strerror(rc));
        return 1;
    }
    printf("store: %s\n\n", dir);
    int status = run_commands(st);
    if (status == 0 && print_state(st) != TALLY_ok)
        status = 1;
    store_close(st);
    return status;
}
