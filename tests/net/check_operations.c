/*
 * check_operations.c — operating a real tallyd: online backups (consistent,
 * compact, verified, readable by mdb_stat, refused for an existing or
 * disallowed destination) and retention run by the writer (inbox records
 * and events removed, the checkpoint verified, the stats showing it); keys
 * older than the dedupe window, and failed transfer ids remembered for it.
 */
#include "clients/libtally/tally.h"
#include "common/bytes.h"
#include "common/clock.h"
#include "common/error.h"
#include "tests/support/tallyd_harness.h"
#include "tests/support/test_support.h"
#include "tests/support/wait.h"
#include "tests/support/wire.h"

#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* How long the idle writer may take to apply retention (it runs about once
 * a second), scaled by test_slowdown(). */
#define STATS_WAIT_MS 60000

static tallyd_proc proc;
static tally_client *client;

static void start(const char *a0, const char *a1)
{
    const char *args[] = {a0, a1, NULL};
    wire_server_start(&proc, &client, args);
}

static void stop(void) { wire_server_stop(&proc, &client); }

/* Stop tallyd and start it again on its store with option a0 alone. */
static void restart_with(const char *a0)
{
    stop();
    const char *args[] = {a0, NULL};
    wire_server_restart(&proc, &client, args);
}

static void write_some(uint64_t first, unsigned accounts)
{
    for (unsigned i = 0; i < accounts; i++) {
        char key[32];
        snprintf(key, sizeof(key), "open-%llu", (unsigned long long)(first + i));
        tally_account_open_args a = {.id = first + i, .ledger = 1, .code = 1};
        tally_result res;
        ck_assert_int_eq(tally_account_open(client, key, &a, &res), TALLY_ok);
    }
    for (unsigned i = 1; i < accounts; i++) {
        char key[32];
        snprintf(key, sizeof(key), "pay-%llu", (unsigned long long)(first + i));
        tally_transfer_args t = {.debit_account_id = first, .credit_account_id = first + i,
                                 .amount = (int64_t)i, .ledger = 1, .code = 1};
        ck_assert_int_eq(tally_uuid_v7(&t.id), TALLY_ok);
        tally_result res;
        ck_assert_int_eq(tally_transfer(client, key, &t, &res), TALLY_ok);
    }
}

static uint64_t stats_u64(const char *key)
{
    wire_reply r;
    wire_call(client, &r, "stats", "");
    uint64_t v = wire_u64(r.map, key);
    wire_done(&r);
    return v;
}

/* The reply's message holds text (a refusal says why). */
static void assert_message_has(const wire_reply *r, const char *text)
{
    const msgpack_object *m = wire_field(r->map, "message");
    ck_assert_int_eq(m->type, MSGPACK_OBJECT_STR);
    ck_assert_msg(memmem(m->via.str.ptr, m->via.str.size, text, strlen(text)) != NULL,
                  "message \"%.*s\" lacks \"%s\"", (int)m->via.str.size, m->via.str.ptr, text);
}

START_TEST(online_backup_is_consistent_and_verifiable)
{
    char root[256];
    snprintf(root, sizeof(root), "%s/tally-backups-XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    ck_assert_ptr_nonnull(mkdtemp(root));
    char rootopt[300];
    snprintf(rootopt, sizeof(rootopt), "--backup-dir=%s", root);
    start(rootopt, NULL);
    write_some(1, 20);
    uint64_t head = stats_u64("head_seq");

    char dest[400];
    snprintf(dest, sizeof(dest), "%s/b1", root);
    wire_reply r;
    wire_call(client, &r, "backup", "s", "path", dest);
    wire_expect(&r, "ok");
    ck_assert_uint_gt(wire_u64(r.map, "bytes"), 0);
    wire_done(&r);
    write_some(100, 3); /* the server goes on writing */

    wire_call(client, &r, "backup", "s", "path", dest);
    wire_expect(&r, "backup_destination_exists");
    wire_done(&r);

    /* the CLI: tally backup DEST (exit 0, JSON with the size; 1 when refused) */
    char dest2[400], cmd[1200];
    snprintf(dest2, sizeof(dest2), "%s/b2", root);
    snprintf(cmd, sizeof(cmd), "'%s' --url '%s' --json backup '%s' | grep -q '\"bytes\"'",
             tallyd_program("tally"), proc.url, dest2);
    ck_assert_msg(system(cmd) == 0, "tally backup failed: %s", cmd);
    snprintf(cmd, sizeof(cmd), "'%s' --url '%s' backup '%s' 2>/dev/null", tallyd_program("tally"),
             proc.url, dest2);
    int status = system(cmd);
    ck_assert_int_eq(WEXITSTATUS(status), 1); /* exists: refused */
    snprintf(cmd, sizeof(cmd), "'%s' --url '%s' backup relative 2>/dev/null",
             tallyd_program("tally"), proc.url);
    status = system(cmd);
    ck_assert_int_eq(WEXITSTATUS(status), 2); /* usage */
    wire_assert_invariants(dest2);
    wire_call(client, &r, "backup", "s", "path", "relative/dir");
    wire_expect(&r, "backup_destination_invalid");
    wire_done(&r);
    wire_call(client, &r, "backup", "s", "path", "/tmp/outside-the-backup-dir");
    wire_expect(&r, "backup_destination_invalid");
    assert_message_has(&r, "is outside --backup-dir");
    wire_done(&r);
    char missing_parent[400];
    snprintf(missing_parent, sizeof(missing_parent), "%s/no/such/parent", root);
    wire_call(client, &r, "backup", "s", "path", missing_parent);
    wire_expect(&r, "backup_destination_invalid");
    assert_message_has(&r, "/no/such does not exist");
    wire_done(&r);
    /* and tallyd says so in its log */
    ck_assert(tallyd_log_wait(&proc, "backup to /tmp/outside-the-backup-dir refused", 60000));
    stop();

    /* the copy is a whole store at (at least) the head it was taken at */
    wire_assert_invariants(dest);
    store *st;
    store_options so = {.path = dest, .read_only = true};
    ck_assert_int_eq(store_open(&so, &st), TALLY_ok);
    store_txn t;
    ck_assert_int_eq(store_txn_begin(st, NULL, true, &t), TALLY_ok);
    log_head h;
    ck_assert_int_eq(log_head_get(&t, &h), TALLY_ok);
    store_txn_abort(&t);
    store_close(st);
    ck_assert_uint_eq(h.seq, head);

    /* readable by LMDB's own tool */
    snprintf(cmd, sizeof(cmd), "mdb_stat -a '%s' > /dev/null", dest);
    ck_assert_msg(system(cmd) == 0, "mdb_stat cannot read the backup");
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", root);
    ck_assert_int_eq(system(cmd), 0);
    tallyd_cleanup(&proc);
}
END_TEST

/* Poll stats until key reaches at least want (bounded: STATS_WAIT_MS
 * scaled); the last value read. */
static uint64_t wait_stats(const char *key, uint64_t want)
{
    uint64_t v = 0;
    (void)TEST_WAITED_UNTIL((v = stats_u64(key)) >= want, STATS_WAIT_MS);
    return v;
}

START_TEST(retention_runs_in_the_writer)
{
    start("--dedupe-window-s=1", "--log-retention-s=1");
    /* the reader before the first event: with no subscriber, retention
     * may take every event a second old but the head before it exists */
    wire_reply r;
    wire_call(client, &r, "sub_create", "s", "name", "reader");
    wire_expect(&r, "ok");
    wire_done(&r);
    write_some(1, 10); /* 19 events, 19 inbox records */
    wire_call(client, &r, "sub_ack", "su", "name", "reader", "seq", (uint64_t)12);
    wire_expect(&r, "ok");
    wire_done(&r);
    /* a second later the idle writer removes what is old enough: events up
     * to the reader's ack floor, every inbox record */
    ck_assert_uint_eq(wait_stats("log_floor", 12), 12);
    TEST_WAIT_UNTIL(stats_u64("inbox") == 0, STATS_WAIT_MS, "no inbox records left (stats)");
    wire_call(client, &r, "stats", "");
    ck_assert_uint_eq(wire_u64(r.map, "inbox"), 0);
    ck_assert_uint_eq(wire_u64(r.map, "first_seq"), 13);
    ck_assert_uint_eq(wire_u64(r.map, "log_floor"), 12);
    const msgpack_object *last = wire_field(r.map, "last_sweep");
    ck_assert_uint_gt(wire_u64(last, "time_ms"), 0);
    /* the anchor: the first event left chains to the floor's hash, which
     * stats and log_read both give */
    const msgpack_object *anchor = wire_field(r.map, "log_floor_hash");
    ck_assert_int_eq(anchor->type, MSGPACK_OBJECT_BIN);
    ck_assert_uint_eq(anchor->via.bin.size, TALLY_EVENT_HASH_BYTES);
    uint8_t floor_hash[TALLY_EVENT_HASH_BYTES];
    memcpy(floor_hash, anchor->via.bin.ptr, sizeof(floor_hash));
    wire_done(&r);
    tally_event first[1];
    size_t got = 0;
    uint64_t at_head = 0;
    ck_assert_int_eq(tally_log_read(client, 1, 1, 0, first, 1, &got, &at_head), TALLY_ok);
    ck_assert_uint_eq(got, 1);
    ck_assert_uint_eq(first[0].seq, 13);
    ck_assert(memcmp(first[0].prev_hash, floor_hash, sizeof(floor_hash)) == 0);
    tally_events_release(first, got);
    wire_call(client, &r, "log_read", "uu", "from_seq", (uint64_t)1, "limit", (uint64_t)1);
    ck_assert_uint_eq(wire_u64(r.map, "log_floor"), 12);
    anchor = wire_field(r.map, "log_floor_hash");
    ck_assert(anchor->type == MSGPACK_OBJECT_BIN && anchor->via.bin.size == sizeof(floor_hash) &&
              memcmp(anchor->via.bin.ptr, floor_hash, sizeof(floor_hash)) == 0);
    wire_done(&r);
    /* the reader's unacked events stay; once acked they go too (but the
     * head event always stays) */
    wire_call(client, &r, "sub_ack", "su", "name", "reader", "seq", (uint64_t)19);
    wire_done(&r);
    ck_assert_uint_eq(wait_stats("log_floor", 18), 18);
    /* reading below the floor gives what is left */
    size_t count = 0;
    uint64_t head = 0;
    tally_event ev[4];
    ck_assert_int_eq(tally_log_read(client, 1, 4, 0, ev, 4, &count, &head), TALLY_ok);
    ck_assert_uint_eq(count, 1);
    ck_assert_uint_eq(ev[0].seq, 19);
    tally_events_release(ev, count);
    write_some(50, 2); /* writes go on after retention */
    stop(); /* invariants: fold from the checkpoint, chain from the floor */
    tallyd_cleanup(&proc);
}
END_TEST

/* A UUIDv7 key as libtally writes it, made ms_ago milliseconds ago. */
static void key_made_ago(int64_t ms_ago, char out[37])
{
    tally_id128 id;
    ck_assert_int_eq(tally_id128_uuidv7(clock_wall_ms() - ms_ago, &id), TALLY_ok);
    tally_uuid u;
    memcpy(u.bytes, id.bytes, 16);
    tally_uuid_format(&u, out);
}

static tally_entitlement carol_pro(void)
{
    tally_entitlement e;
    ck_assert_int_eq(tally_entitlement_get(client, "carol", "pro", &e), TALLY_ok);
    return e;
}

/* Issue 16, item 1: with a dedupe window of 1 s, a relative command
 * (extend --for 1d) sent again after its inbox record was removed must not
 * apply again: its UUIDv7 key is older than the window, key_expired, and
 * nothing is stored. A key without a time relies on the window alone.
 * The keys that must apply are sent under a window of a minute, so a slow
 * machine cannot age them past it on their way to the writer; the retry
 * comes after a restart with the window of 1 s. */
START_TEST(keys_older_than_the_dedupe_window_are_refused)
{
    start("--dedupe-window-s=60", NULL);
    tally_entitlement_args g = {.subject = "carol", .feature = "pro", .duration_ms = 86400000};
    tally_result res;
    char key[37];
    key_made_ago(0, key);
    ck_assert_int_eq(tally_grant(client, key, &g, &res), TALLY_ok);
    key_made_ago(0, key);
    ck_assert_int_eq(tally_extend(client, key, &g, &res), TALLY_ok);
    tally_entitlement once = carol_pro();
    /* a key made an hour ago never applies; a fresh one does */
    char old_key[37];
    key_made_ago(3600 * 1000, old_key);
    tally_account_open_args a = {.id = 7, .ledger = 1, .code = 1};
    ck_assert_int_eq(tally_account_open(client, old_key, &a, &res), TALLY_key_expired);
    tally_account acc;
    ck_assert_int_eq(tally_account_get(client, 7, &acc), TALLY_not_found);
    key_made_ago(0, old_key);
    ck_assert_int_eq(tally_account_open(client, old_key, &a, &res), TALLY_ok);
    /* a key without a time is not refused for its age */
    ck_assert_int_eq(tally_account_open(client, "open-8-free-form", &(tally_account_open_args){
                                            .id = 8, .ledger = 1, .code = 1}, &res),
                     TALLY_ok);
    uint64_t events = stats_u64("head_seq");
    /* the record goes with the window; the same retry then is refused */
    restart_with("--dedupe-window-s=1");
    TEST_WAIT_UNTIL(stats_u64("inbox") == 0, STATS_WAIT_MS, "no inbox records left (stats)");
    ck_assert_uint_eq(stats_u64("inbox"), 0);
    ck_assert_int_eq(tally_extend(client, key, &g, &res), TALLY_key_expired);
    tally_entitlement after = carol_pro();
    ck_assert_uint_eq(after.version, once.version);
    ck_assert_int_eq(after.valid_until_ms, once.valid_until_ms);
    ck_assert_uint_eq(stats_u64("head_seq"), events);
    ck_assert_uint_eq(stats_u64("inbox"), 0); /* nothing stored */
    stop();
    tallyd_cleanup(&proc);
}
END_TEST

/* The 16-byte big-endian n, as the CLI reads a decimal TID. */
static tally_uuid tid_of(uint64_t n)
{
    tally_uuid id;
    memset(&id, 0, sizeof(id));
    for (int i = 0; i < 8; i++)
        id.bytes[15 - i] = (uint8_t)(n >> (8 * i));
    return id;
}

static void assert_balance_1(int64_t debits_posted, int64_t credits_posted)
{
    tally_account a;
    ck_assert_int_eq(tally_account_get(client, 1, &a), TALLY_ok);
    ck_assert_int_eq(a.debits_posted, debits_posted);
    ck_assert_int_eq(a.credits_posted, credits_posted);
}

/* tally --json transfer ... | grep PATTERN: what the CLI shows of a reply. */
static int cli_transfer_shows(const char *args, const char *pattern)
{
    char cmd[1200];
    snprintf(cmd, sizeof(cmd), "'%s' --url '%s' --consumer test --json transfer %s | grep -q '%s'",
             tallyd_program("tally"), proc.url, args, pattern);
    return system(cmd);
}

/* Issue 16, item 2: transfer 600 failed with exceeds_credits under key
 * k-d; sent under k-f once it could pay, it is id_already_failed (nothing
 * applied) while k-d still replays the failure. exists names the original
 * seq. After the dedupe window the sweep removes k-d's record and the
 * failed id with it: the id is free again, as documented. The window is an
 * hour while the replays must find the records (a slow machine may take
 * seconds over them), then 1 s after a restart, for the sweep. */
START_TEST(failed_transfer_ids_are_remembered_for_the_dedupe_window)
{
    start("--dedupe-window-s=3600", NULL);
    tally_result res;
    tally_account_open_args a1 = {.id = 1, .ledger = 1, .code = 1,
                                  .flags = TALLY_ACCOUNT_DEBITS_MUST_NOT_EXCEED_CREDITS};
    tally_account_open_args a2 = {.id = 2, .ledger = 1, .code = 1};
    ck_assert_int_eq(tally_account_open(client, "open-1", &a1, &res), TALLY_ok);
    ck_assert_int_eq(tally_account_open(client, "open-2", &a2, &res), TALLY_ok);
    tally_transfer_args pay = {.id = tid_of(600), .debit_account_id = 1, .credit_account_id = 2,
                               .amount = 100, .ledger = 1, .code = 1};
    ck_assert_int_eq(tally_transfer(client, "k-d", &pay, &res), TALLY_exceeds_credits);
    tally_transfer_args fund = {.id = tid_of(8), .debit_account_id = 2, .credit_account_id = 1,
                                .amount = 100, .ledger = 1, .code = 1};
    ck_assert_int_eq(tally_transfer(client, "fund", &fund, &res), TALLY_ok);
    uint64_t fund_seq = res.seq, head = stats_u64("head_seq");

    ck_assert_int_eq(tally_transfer(client, "k-f", &pay, &res), TALLY_id_already_failed);
    ck_assert(!res.replayed);
    ck_assert_uint_eq(res.seq, 0);
    ck_assert_uint_eq(res.original_seq, 0); /* the failed attempt caused no event */
    ck_assert_int_eq(tally_transfer(client, "k-d", &pay, &res), TALLY_exceeds_credits);
    ck_assert(res.replayed);
    ck_assert_int_eq(tally_transfer(client, "k-f", &pay, &res), TALLY_id_already_failed);
    ck_assert(res.replayed);
    tally_transfer_info info;
    ck_assert_int_eq(tally_transfer_get(client, &pay.id, &info), TALLY_not_found);
    ck_assert_uint_eq(stats_u64("head_seq"), head);
    assert_balance_1(0, 100);

    /* exists carries the seq that created the transfer, in libtally and the CLI */
    ck_assert_int_eq(tally_transfer(client, "fund-again", &fund, &res), TALLY_exists);
    ck_assert_uint_eq(res.original_seq, fund_seq);
    char pattern[64];
    snprintf(pattern, sizeof(pattern), "\"original_seq\":%llu", (unsigned long long)fund_seq);
    ck_assert_int_eq(cli_transfer_shows("--debit 2 --credit 1 --amount 100 --id 8 --key fund-cli",
                                        pattern), 0);
    ck_assert_int_eq(cli_transfer_shows("--debit 1 --credit 2 --amount 100 --id 600 --key k-cli",
                                        "\"code\":\"id_already_failed\""), 0);

    /* the window passes: the records go, and the failed id with them */
    restart_with("--dedupe-window-s=1");
    TEST_WAIT_UNTIL(stats_u64("inbox") == 0, STATS_WAIT_MS, "no inbox records left (stats)");
    ck_assert_uint_eq(stats_u64("inbox"), 0);
    store *st = test_store_open_read_only(proc.data_dir);
    store_txn t;
    uint64_t failed = 1;
    ck_assert_int_eq(store_txn_begin(st, NULL, true, &t), TALLY_ok);
    ck_assert_int_eq(store_count(&t, STORE_DB_FAILED_IDS, &failed), TALLY_ok);
    store_txn_abort(&t);
    store_close(st);
    ck_assert_uint_eq(failed, 0);
    ck_assert_int_eq(tally_transfer(client, "k-g", &pay, &res), TALLY_ok);
    assert_balance_1(100, 100);
    stop();
    wire_assert_invariants(proc.data_dir);
    tallyd_cleanup(&proc);
}
END_TEST

/* An empty chain is an invalid command: answered, not stored (a resend is
 * not a replay), with no member named: codes and failed_index nil, so a
 * client that indexes codes[failed_index] never reads past the end
 * (PROTOCOL.md, "Replies"). */
START_TEST(an_empty_chain_names_no_failed_member)
{
    start(NULL, NULL);
    for (int round = 0; round < 2; round++) { /* then again: not a replay */
        wire_reply r;
        wire_call(client, &r, "chain", "ssU", "consumer", "shop", "key", "empty-chain", "ops", 0u,
                  (const uint64_t *)NULL);
        wire_expect(&r, "chain_must_not_be_empty");
        ck_assert_int_eq(wire_field(r.map, "codes")->type, MSGPACK_OBJECT_NIL);
        ck_assert_int_eq(wire_field(r.map, "failed_index")->type, MSGPACK_OBJECT_NIL);
        ck_assert(!wire_field(r.map, "replayed")->via.boolean);
        wire_done(&r);
    }
    stop();
    tallyd_cleanup(&proc);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("operations");
    TCase *tc = tcase_create("operations");
    tcase_set_timeout(tc, 180);
    tcase_add_test(tc, online_backup_is_consistent_and_verifiable);
    tcase_add_test(tc, retention_runs_in_the_writer);
    tcase_add_test(tc, keys_older_than_the_dedupe_window_are_refused);
    tcase_add_test(tc, failed_transfer_ids_are_remembered_for_the_dedupe_window);
    tcase_add_test(tc, an_empty_chain_names_no_failed_member);
    suite_add_tcase(s, tc);
    return test_run_suite(s);
}
