/*
 * fuzz_store.c — the stores the fuzz targets and seeds work on (fuzz.h):
 * a real LMDB store in a temporary directory, filled through the ledger
 * with the bad-input table's setup and, for seeds, every kind of event.
 */
#include "tests/fuzz/fuzz.h"

#include "common/error.h"
#include "ledger/ledger.h"

#include <dirent.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define STORE_MAP_BYTES (UINT64_C(64) << 20)
#define STORES_MAX 4

void fuzz_fail(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "fuzz: property broken: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    abort();
}

static char store_dirs[STORES_MAX][256];
static unsigned stores_made;

/* The store's files are all in its directory: remove them, then it. */
static void remove_store_dirs(void)
{
    for (unsigned i = 0; i < stores_made; i++) {
        DIR *d = opendir(store_dirs[i]);
        struct dirent *e;
        while (d && (e = readdir(d)) != NULL) {
            char path[600];
            snprintf(path, sizeof(path), "%s/%s", store_dirs[i], e->d_name);
            if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0)
                unlink(path);
        }
        if (d)
            closedir(d);
        rmdir(store_dirs[i]);
    }
}

store *fuzz_store_create(void)
{
    if (stores_made == STORES_MAX) {
        fprintf(stderr, "fuzz: more than %d stores\n", STORES_MAX);
        return NULL;
    }
    char *dir = store_dirs[stores_made];
    const char *tmp = getenv("TMPDIR");
    snprintf(dir, sizeof(store_dirs[0]), "%s/tally-fuzz-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (mkdtemp(dir) == NULL) {
        perror("fuzz: mkdtemp");
        return NULL;
    }
    if (stores_made++ == 0)
        atexit(remove_store_dirs);
    store_options o = {.path = dir, .map_size_bytes = STORE_MAP_BYTES};
    store *st = NULL;
    int rc = store_open(&o, &st);
    if (rc != TALLY_ok)
        fprintf(stderr, "fuzz: store_open %s: %s\n", dir, tally_strerror(rc));
    return st;
}

static tally_id128 id_of(uint8_t n)
{
    tally_id128 id = {{0}};
    id.bytes[15] = n;
    return id;
}

static ledger_command open_cmd(uint64_t id, uint32_t ledger, uint16_t flags)
{
    ledger_command c = {.kind = LEDGER_ACCOUNT_OPEN};
    c.u.account_open = (ledger_account_open){.id = id, .ledger = ledger, .code = 10, .flags = flags};
    return c;
}

static ledger_command transfer_cmd(uint8_t tid, uint64_t debit, uint64_t credit, int64_t amount,
                                   uint16_t flags, uint32_t timeout_s)
{
    ledger_command c = {.kind = LEDGER_TRANSFER};
    c.u.transfer = (ledger_transfer){.id = id_of(tid), .debit_account_id = debit,
                                     .credit_account_id = credit, .amount = amount, .ledger = 1,
                                     .code = 1, .flags = flags, .timeout_s = timeout_s};
    return c;
}

static ledger_command hold_step_cmd(ledger_command_kind kind, uint8_t tid, int64_t amount)
{
    ledger_command c = {.kind = kind};
    c.u.hold = (ledger_hold_step){.pending_id = id_of(tid), .amount = amount};
    return c;
}

static ledger_command entitlement_cmd(ledger_command_kind kind, const char *subject,
                                      int64_t until_ms, int64_t duration_ms, uint64_t order)
{
    ledger_command c = {.kind = kind};
    c.u.entitlement = (ledger_entitlement_command){
        .subject = tally_str_from(subject), .feature = tally_str_from("pro"),
        .valid_until_ms = until_ms, .duration_ms = duration_ms,
        .has_source_order = order != 0, .source_order = order};
    return c;
}

static int apply(store *st, const char *key, const char *correlation, ledger_command cmd)
{
    ledger_request req = {.consumer = tally_str_from("shop"), .key = tally_str_from(key),
                          .correlation = tally_str_from(correlation ? correlation : ""),
                          .command = cmd};
    ledger_outcome out;
    int rc = ledger_apply_one(st, &req, FUZZ_NOW_MS, &out);
    if (rc == TALLY_ok)
        rc = out.code;
    if (rc != TALLY_ok)
        fprintf(stderr, "fuzz: scenario step %s: %s\n", key, tally_strerror(rc));
    return rc == TALLY_ok ? 0 : -1;
}

static int sweep(store *st, int64_t now_ms)
{
    store_txn t;
    uint32_t expired = 0;
    int rc = store_txn_begin(st, NULL, false, &t);
    if (rc == TALLY_ok)
        rc = ledger_sweep(&t, now_ms, 0, &expired, NULL);
    rc = rc == TALLY_ok ? store_txn_commit(&t) : (store_txn_abort(&t), rc);
    if (rc != TALLY_ok || expired != 2)
        fprintf(stderr, "fuzz: scenario sweep: %s, %u expired\n", tally_strerror(rc), expired);
    return rc == TALLY_ok && expired == 2 ? 0 : -1;
}

/* Every kind of event beyond the setup. */
static int scenario_full(store *st)
{
    static ledger_command chain_members[2];
    chain_members[0] = open_cmd(5, 1, 0);
    chain_members[1] = transfer_cmd(0x0e, 1, 5, 3, 0, 0);
    ledger_command chain = {.kind = LEDGER_CHAIN};
    chain.u.chain = (ledger_chain){chain_members, 2};
    ledger_command paid = entitlement_cmd(LEDGER_GRANT, "bob", 0, 1000, 3);
    paid.u.entitlement.has_grant_transfer = true;
    paid.u.entitlement.grant_transfer_id = id_of(0x0b);
    return apply(st, "open-4", NULL, open_cmd(4, 1, LEDGER_ACCOUNT_DEBITS_MUST_NOT_EXCEED_CREDITS)) ||
           apply(st, "pay-b", "order-1", transfer_cmd(0x0b, 1, 4, 500, 0, 0)) ||
           apply(st, "hold-c", NULL, transfer_cmd(0x0c, 4, 2, 50, LEDGER_TRANSFER_PENDING, 60)) ||
           apply(st, "post-a", NULL, hold_step_cmd(LEDGER_POST, 0x0a, 40)) ||
           apply(st, "hold-d", NULL, transfer_cmd(0x0d, 1, 2, 7, LEDGER_TRANSFER_PENDING, 0)) ||
           apply(st, "void-d", NULL, hold_step_cmd(LEDGER_VOID, 0x0d, 0)) ||
           apply(st, "grant-bob", NULL, paid) ||
           apply(st, "extend-bob", NULL, entitlement_cmd(LEDGER_EXTEND, "bob", 0, 5000, 4)) ||
           apply(st, "grant-carol", NULL,
                 entitlement_cmd(LEDGER_GRANT, "carol", FUZZ_NOW_MS + 10000, 0, 0)) ||
           apply(st, "revoke-carol", NULL, entitlement_cmd(LEDGER_REVOKE, "carol", 0, 0, 0)) ||
           apply(st, "chain-e", NULL, chain) || sweep(st, FUZZ_NOW_MS + 120000)
               ? -1
               : 0;
}

int fuzz_store_scenario(store *st, int full)
{
    int rc = apply(st, "open-1", NULL, open_cmd(1, 1, 0)) ||
             apply(st, "open-2", NULL, open_cmd(2, 1, 0)) ||
             apply(st, "open-3", NULL, open_cmd(3, 2, 0)) ||
             apply(st, "hold-1", NULL, transfer_cmd(0x0a, 1, 2, 100, LEDGER_TRANSFER_PENDING, 0)) ||
             apply(st, "grant-1", NULL, entitlement_cmd(LEDGER_GRANT, "alice", 0, 0, 0));
    return rc || !full ? -rc : scenario_full(st);
}
