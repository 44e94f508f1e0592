/*
 * check_formats.c — a store written before event format 2 keeps working.
 *
 * tests/data/store-v1.dump is a store that tallyd wrote in event format 1
 * (mdb_dump -a of 16 events: three accounts, a transfer, a hold posted, a
 * hold voided, a hold expired by the sweep, entitlements granted, extended,
 * revoked and expired, and a rejected transfer). It is loaded with
 * mdb_load (lmdb-utils), then: tally-recon finds it clean; a real tallyd
 * serves it, replays a key of the old era and appends format 2 events to
 * the same hash chain (stored in the short form of store format 13,
 * read as format 2); history, the log, the read model (libtally's
 * subscriber-side inbox) and tally-recon read both formats and agree with
 * the server's balances. Its inbox time index has one entry per key (the
 * layout before store format 3): after the upgrade, retention sweeps those
 * past the window, indexes new keys by commit group, and recon's
 * inbox_time check finds every record indexed.
 */
#include "common/error.h"
#include "common/log_event.h"
#include "log/log.h"
#include "log/store.h"
#include "tests/support/run.h"
#include "tests/support/suite.h"
#include "tests/support/tallyd_harness.h"
#include "tests/support/test_support.h"
#include "tests/support/wait.h"

#include <check.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define V1_EVENTS 16

static json_t *json_of(const char *text)
{
    json_error_t e;
    json_t *doc = json_loads(text, JSON_DISABLE_EOF_CHECK, &e);
    ck_assert_msg(doc != NULL, "not JSON (%s): %.500s", e.text, text);
    return doc;
}

/* json_of a program's output, which it frees. */
static json_t *json_taken(char *text)
{
    json_t *doc = json_of(text);
    free(text);
    return doc;
}

/* Run argv (NULL-terminated) and expect exit 0; its stdout (free it). */
static char *run_ok(const char *const *argv)
{
    char *out = NULL, *err = NULL;
    int status = test_run(argv, NULL, &out, &err);
    ck_assert_msg(status == 0, "%s exited %d\nstdout: %.2000s\nstderr: %.2000s", argv[0],
                  status, out, err);
    free(err);
    return out;
}

/* The fixture loaded into tallyd's data directory (tallyd stopped). */
static void load_v1(tallyd_proc *p)
{
    char path[512], dump[512];
    tallyd_start(p);
    ck_assert_int_eq(tallyd_stop(p), 0);
    snprintf(path, sizeof(path), "%s/data.mdb", p->data_dir);
    ck_assert_int_eq(unlink(path), 0);
    snprintf(path, sizeof(path), "%s/lock.mdb", p->data_dir);
    unlink(path);
    const char *src = getenv("TALLY_SRCDIR");
    snprintf(dump, sizeof(dump), "%s/tests/data/store-v1.dump", src ? src : ".");
    free(run_ok((const char *const[]){"/usr/bin/mdb_load", "-f", dump, p->data_dir, NULL}));
}

static json_t *recon_json(const char *data_dir)
{
    char *out = run_ok((const char *const[]){tallyd_program("tally-recon"), "--data", data_dir,
                                              "--json", NULL});
    json_t *doc = json_of(out);
    free(out);
    return doc;
}

/* The first byte of every stored event: fixmap 12 (format 1) up to
 * last_v1, fixarray 9 (the short stored form, log/stored_event.h) after
 * it; readers get format 1, then format 2. */
static void expect_formats(const char *data_dir, uint64_t last_v1, uint64_t head)
{
    store *st = test_store_open_read_only(data_dir);
    store_txn t;
    ck_assert_int_eq(store_txn_begin(st, NULL, true, &t), TALLY_ok);
    for (uint64_t seq = 1; seq <= head; seq++) {
        uint8_t key[8];
        MDB_val v;
        log_seq_key(seq, key);
        ck_assert_int_eq(store_get(&t, STORE_DB_LOG, key, 8, &v), TALLY_ok);
        uint8_t first = ((const uint8_t *)v.mv_data)[0];
        ck_assert_msg(first == (seq <= last_v1 ? 0x8c : 0x99), "seq %llu starts with %02x",
                      (unsigned long long)seq, first);
        msgpack_unpacked up;
        msgpack_unpacked_init(&up);
        log_event ev;
        ck_assert_int_eq(log_event_load(&t, seq, &up, &ev), TALLY_ok);
        ck_assert_uint_eq(ev.format, seq <= last_v1 ? LOG_EVENT_FORMAT_V1 : LOG_EVENT_FORMAT);
        msgpack_unpacked_destroy(&up);
    }
    store_txn_abort(&t);
    store_close(st);
}

START_TEST(format1_store_is_clean_for_recon)
{
    tallyd_proc p = {0};
    load_v1(&p);
    json_t *doc = recon_json(p.data_dir);
    ck_assert_str_eq(json_string_value(json_object_get(doc, "status")), "clean");
    json_decref(doc);
    expect_formats(p.data_dir, V1_EVENTS, V1_EVENTS);
    tallyd_cleanup(&p);
}
END_TEST

START_TEST(format1_store_is_served_and_extended_in_format2)
{
    tallyd_proc p = {0};
    load_v1(&p);
    /* without --upgrade tallyd refuses the older store and says what to do */
    char *out = NULL, *err = NULL;
    int status = test_run((const char *const[]){tallyd_program("tallyd"), "--data", p.data_dir,
                                                "--listen", "tcp://127.0.0.1:0", "--publish",
                                                "none", "--http", "none", NULL},
                          NULL, &out, &err);
    ck_assert_msg(status != 0 && strstr(err, "from an older tally") && strstr(err, "--upgrade"),
                  "exit %d: %s", status, err);
    free(out);
    free(err);
    p.extra_args[0] = "--upgrade";
    tallyd_restart(&p);
    char upgraded[64];
    snprintf(upgraded, sizeof(upgraded), "upgraded from format 1 to %d", STORE_FORMAT_VERSION);
    ck_assert(tallyd_log_wait(&p, upgraded, 60000));
    const char *tally = tallyd_program("tally");
#define TALLY(...) run_ok((const char *const[]){tally, "--url", p.url, "--json", __VA_ARGS__, NULL})
    /* A key of the old era replays its stored outcome. */
    json_t *r = json_taken(TALLY("transfer", "--debit", "1", "--credit", "2", "--amount", "100",
                              "--key", "t1"));
    ck_assert(json_is_true(json_object_get(r, "replayed")));
    ck_assert_int_eq(json_integer_value(json_object_get(r, "seq")), 4);
    json_decref(r);
    /* Its record holds format 1's whole 32-byte fingerprint: a different
     * request under that key is still told apart (exit 1: a rejection). */
    out = NULL, err = NULL;
    status = test_run((const char *const[]){tally, "--url", p.url, "--json", "transfer",
                                                "--debit", "1", "--credit", "2", "--amount",
                                                "101", "--key", "t1", NULL},
                          NULL, &out, &err);
    ck_assert_msg(status == 1 && strstr(out, "idempotency_key_reused") != NULL,
                  "exit %d: %s %s", status, out, err);
    free(out);
    free(err);
    /* New effects: a transfer, a hold posted in part, an extension. */
    free(TALLY("transfer", "--debit", "1", "--credit", "2", "--amount", "5", "--key", "n1"));
    free(TALLY("transfer", "--debit", "2", "--credit", "3", "--amount", "3", "--pending", "--id",
               "21", "--key", "n2"));
    free(TALLY("post", "21", "--amount", "2", "--key", "n3"));
    free(TALLY("extend", "carol", "pro", "--for", "120d", "--key", "n4"));
    const uint64_t head = V1_EVENTS + 4;

    /* Account 2's history spans both formats, with its balances after each. */
    out = TALLY("account", "history", "2");
    int lines = 0;
    int64_t last_credits = -1;
    for (char *line = strtok(out, "\n"); line; line = strtok(NULL, "\n"), lines++) {
        json_t *h = json_of(line);
        last_credits = json_integer_value(json_object_get(json_object_get(h, "account"),
                                                          "credits_posted"));
        json_decref(h);
    }
    free(out);
    ck_assert_int_eq(lines, 8); /* t1, h1, p1, h2, v1 in format 1; n1, n2, n3 in 2 */
    ck_assert_int_eq(last_credits, 105);

    /* The read model applies every event of both formats. */
    char rm[600];
    snprintf(rm, sizeof(rm), "%s/readmodel", p.dir);
    out = run_ok((const char *const[]){tallyd_program("tally-readmodel"), "--data", rm, "--url",
                                       p.url, "--once", "--dump", "--json", NULL});
    json_t *model = json_of(out);
    free(out);
    ck_assert_int_eq(json_integer_value(json_object_get(model, "position")), (json_int_t)head);
    json_t *accounts = json_object_get(model, "accounts");
    ck_assert_uint_eq(json_array_size(accounts), 3);
    for (size_t i = 0; i < 3; i++) {
        json_t *a = json_array_get(accounts, i);
        char id[32];
        snprintf(id, sizeof(id), "%lld", (long long)json_integer_value(json_object_get(a, "id")));
        json_t *server = json_taken(TALLY("account", "get", id));
        static const char *const fields[] = {"debits_posted", "credits_posted", "debits_pending",
                                             "credits_pending", "version"};
        for (size_t f = 0; f < 5; f++)
            ck_assert_msg(json_integer_value(json_object_get(a, fields[f])) ==
                              json_integer_value(json_object_get(server, fields[f])),
                          "account %s: %s differs", id, fields[f]);
        json_decref(server);
    }
    json_decref(model);
    free(TALLY("log", "--from", "1", "--limit", "100"));
    /* The upgrade indexed the accounts of the old era: a query finds all
     * three, newest first (those opened before format 6 have no creation
     * time and sort first, by seq). */
    out = TALLY("account", "list", "--reverse");
    int listed = 0;
    for (char *line = strtok(out, "\n"); line; line = strtok(NULL, "\n"))
        listed++;
    free(out);
    ck_assert_int_eq(listed, 3);
    out = TALLY("transfer", "list", "--account", "2");
    listed = 0;
    for (char *line = strtok(out, "\n"); line; line = strtok(NULL, "\n"))
        listed++;
    free(out);
    ck_assert_int_eq(listed, 5); /* t1 and the holds h1, h2 of the old era; n1, n2 */
#undef TALLY
    ck_assert_int_eq(tallyd_stop(&p), 0);

    /* One hash chain across the formats; the fold of both is the state. */
    expect_formats(p.data_dir, V1_EVENTS, head);
    json_t *doc = recon_json(p.data_dir);
    ck_assert_str_eq(json_string_value(json_object_get(doc, "status")), "clean");
    ck_assert_int_eq(json_integer_value(json_object_get(json_object_get(doc, "examined"),
                                                        "events")),
                     (json_int_t)head);
    json_decref(doc);
    tallyd_cleanup(&p);
}
END_TEST

/* inbox_time entries of each layout (inbox_time.h) and inbox records. */
typedef struct index_counts {
    uint64_t per_key, groups, records;
} index_counts;

static index_counts count_index(const char *data_dir)
{
    index_counts c = {0};
    store *st = test_store_open_read_only(data_dir);
    store_txn t;
    ck_assert_int_eq(store_txn_begin(st, NULL, true, &t), TALLY_ok);
    MDB_cursor *cur;
    ck_assert_int_eq(store_cursor_open(&t, STORE_DB_INBOX_TIME, &cur), TALLY_ok);
    MDB_val k, v;
    for (int rc = mdb_cursor_get(cur, &k, &v, MDB_FIRST); rc == 0;
         rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT)) {
        bool group = v.mv_size > 0;
        ck_assert_uint_eq(k.mv_size == 17 && ((const uint8_t *)k.mv_data)[8] == 0, group);
        group ? c.groups++ : c.per_key++;
    }
    mdb_cursor_close(cur);
    ck_assert_int_eq(store_count(&t, STORE_DB_INBOX, &c.records), TALLY_ok);
    store_txn_abort(&t);
    store_close(st);
    return c;
}

START_TEST(format1_inbox_index_is_swept_after_upgrade)
{
    tallyd_proc p = {0};
    load_v1(&p);
    index_counts before = count_index(p.data_dir);
    ck_assert_uint_gt(before.per_key, 0);
    ck_assert_uint_eq(before.groups, 0);
    ck_assert_uint_eq(before.per_key, before.records);
    /* The fixture's keys are hours old: a one-hour window makes them due. */
    p.extra_args[0] = "--dedupe-window-s";
    p.extra_args[1] = "3600";
    p.extra_args[2] = "--upgrade";
    tallyd_restart(&p);
    const char *tally = tallyd_program("tally");
    free(run_ok((const char *const[]){tally, "--url", p.url, "--json", "transfer", "--debit",
                                      "1", "--credit", "2", "--amount", "5", "--key", "n1",
                                      NULL}));
    free(run_ok((const char *const[]){tally, "--url", p.url, "--json", "transfer", "--debit",
                                      "2", "--credit", "1", "--amount", "1", "--key", "n2",
                                      NULL}));
    /* Retention runs on the writer at most once a second; poll. */
    index_counts now;
    (void)TEST_WAITED_UNTIL((now = count_index(p.data_dir), now.per_key == 0 && now.records == 2),
                            60000); /* the asserts below say what was left */
    ck_assert_uint_eq(now.per_key, 0);
    ck_assert_uint_eq(now.records, 2);
    ck_assert_uint_ge(now.groups, 1);
    ck_assert_int_eq(tallyd_stop(&p), 0);
    json_t *doc = recon_json(p.data_dir);
    ck_assert_str_eq(json_string_value(json_object_get(doc, "status")), "clean");
    json_decref(doc);
    tallyd_cleanup(&p);
}
END_TEST

#define TIMEOUT_S 120

int main(void)
{
    const test_row tests[] = {
        {"formats", format1_store_is_clean_for_recon, TIMEOUT_S},
        {"formats", format1_store_is_served_and_extended_in_format2, TIMEOUT_S},
        {"formats", format1_inbox_index_is_swept_after_upgrade, TIMEOUT_S},
    };
    return test_run_suite(test_suite_of_rows("formats", TEST_ROWS(tests)));
}
