/*
 * check_open_check.c — tests of ledger/open_check.c (ledger_open_check):
 * the head record against the last event and the hash chain of the last
 * events, on a store the ledger wrote and then damaged through the store
 * API: an event that does not decode, one that no longer chains to the one
 * before, a gap, a head record missing, garbled or with another hash, and
 * damage older than the events followed (not seen, by design).
 * tests/net/check_open_check starts tallyd on such stores.
 */
#include "ledger/open_check.h"
#include "tests/support/suite.h"
#include "tests/support/test_support.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#define TRANSFERS 30
#define WINDOW 10 /* events followed in most cases */

/* A store with a few accounts and TRANSFERS transfers: its head seq. */
static uint64_t build(test_store *ts)
{
    test_store_open(ts);
    test_open_bank_user_merchant(ts);
    for (uint64_t i = 0; i < TRANSFERS; i++) {
        ledger_command c = test_cmd_transfer(100 + i, TEST_BANK, TEST_MERCHANT, 1);
        test_apply_ok(ts, &c);
    }
    return test_head(ts).seq;
}

/* ledger_open_check over the last events_max events: its code, the reason
 * in why. */
static int check(test_store *ts, uint64_t events_max, ledger_open_check_result *seen,
                 char *why, size_t why_bytes)
{
    store_txn t;
    ck_assert_int_eq(store_txn_begin(ts->st, NULL, true, &t), TALLY_ok);
    why[0] = '\0';
    int rc = ledger_open_check(&t, events_max, seen, why, why_bytes);
    store_txn_abort(&t);
    return rc;
}

/* The check refuses the store, naming its data.mdb and what. */
static void expect_refused(test_store *ts, uint64_t events_max, const char *what)
{
    char why[TALLY_PATH_BYTES_MAX + 256];
    ledger_open_check_result seen;
    ck_assert_int_eq(check(ts, events_max, &seen, why, sizeof(why)), TALLY_corrupt_record);
    char file[300];
    snprintf(file, sizeof(file), "%s/data.mdb", ts->dir);
    ck_assert_msg(strstr(why, file) != NULL, "the reason does not name %s: %s", file, why);
    ck_assert_msg(strstr(why, what) != NULL, "the reason lacks '%s': %s", what, why);
}

static void expect_passed(test_store *ts, uint64_t events_max)
{
    char why[TALLY_PATH_BYTES_MAX + 256];
    ledger_open_check_result seen;
    ck_assert_msg(check(ts, events_max, &seen, why, sizeof(why)) == TALLY_ok, "refused: %s",
                  why);
}

static void put_meta(test_store *ts, const char *key, const void *val, size_t len)
{
    store_txn t;
    ck_assert_int_eq(store_txn_begin(ts->st, NULL, false, &t), TALLY_ok);
    if (val == NULL)
        ck_assert_int_eq(store_del(&t, STORE_DB_META, key, strlen(key)), TALLY_ok);
    else
        ck_assert_int_eq(store_put(&t, STORE_DB_META, key, strlen(key), val, len, 0), TALLY_ok);
    ck_assert_int_eq(store_txn_commit(&t), TALLY_ok);
}

static void flip_middle_byte(uint8_t *ev, size_t len) { ev[len / 2] ^= 0x01; }

/* ---- cases ---- */

START_TEST(sound_store_passes_from_genesis_or_its_tail)
{
    test_store ts;
    uint64_t head = build(&ts);
    char why[TALLY_PATH_BYTES_MAX + 256];
    ledger_open_check_result seen;
    ck_assert_int_eq(check(&ts, 1000, &seen, why, sizeof(why)), TALLY_ok);
    ck_assert_uint_eq(seen.head_seq, head);
    ck_assert_uint_eq(seen.events, head); /* all of a short log, chained to zeros */
    ck_assert_uint_eq(seen.from_seq, 1);
    ck_assert_int_eq(check(&ts, WINDOW, &seen, why, sizeof(why)), TALLY_ok);
    ck_assert_uint_eq(seen.events, WINDOW);
    ck_assert_uint_eq(seen.from_seq, head - WINDOW + 1);
    test_store_close(&ts);

    test_store_open(&ts); /* a new store: no head, no events */
    ck_assert_int_eq(check(&ts, WINDOW, &seen, why, sizeof(why)), TALLY_ok);
    ck_assert_uint_eq(seen.events, 0);
    test_store_close(&ts);
}
END_TEST

/* Damage to the event at seq: its bytes, its link, or the event gone. */
static void flip_event(test_store *ts, uint64_t seq)
{
    test_event_rewrite(ts->st, seq, flip_middle_byte);
}

static void rehash_event(test_store *ts, uint64_t seq)
{
    test_event_rewrite(ts->st, seq, test_event_rehash_other_time);
}

static void remove_event(test_store *ts, uint64_t seq)
{
    store_txn t;
    ck_assert_int_eq(store_txn_begin(ts->st, NULL, false, &t), TALLY_ok);
    uint8_t key[8];
    log_seq_key(seq, key);
    ck_assert_int_eq(store_del(&t, STORE_DB_LOG, key, 8), TALLY_ok);
    ck_assert_int_eq(store_txn_commit(&t), TALLY_ok);
}

/* The event back events before the head damaged; the check over the last
 * WINDOW events says what (what_fmt with the seqs named_back and
 * named_back2 before the head; a format may use only the first). */
static void expect_damage_found(void (*damage)(test_store *ts, uint64_t seq), uint64_t back,
                                const char *what_fmt, uint64_t named_back, uint64_t named_back2)
{
    test_store ts;
    uint64_t head = build(&ts);
    damage(&ts, head - back);
    char what[160];
    snprintf(what, sizeof(what), what_fmt, head - named_back, head - named_back2);
    expect_refused(&ts, WINDOW, what);
    test_store_close(&ts);
}

START_TEST(event_that_does_not_decode_is_found)
{
    expect_damage_found(flip_event, 3,
                        "the event at seq %" PRIu64 " does not decode or its hash is wrong", 3, 0);
}
END_TEST

START_TEST(event_that_no_longer_chains_is_found)
{
    expect_damage_found(rehash_event, 3,
                        "the event at seq %" PRIu64 " does not chain to the one before", 2, 0);
}
END_TEST

START_TEST(gap_in_the_window_is_found)
{
    expect_damage_found(remove_event, 4, "the log jumps from seq %" PRIu64 " to seq %" PRIu64, 5,
                        3);
}
END_TEST

START_TEST(damage_before_the_window_is_not_seen)
{
    test_store ts;
    build(&ts);
    flip_event(&ts, 2);
    expect_passed(&ts, WINDOW);
    expect_refused(&ts, 1000, "the event at seq 2 does not decode or its hash is wrong");
    test_store_close(&ts);
}
END_TEST

START_TEST(head_record_missing_garbled_or_elsewhere_is_found)
{
    test_store ts;
    uint64_t head = build(&ts);
    MDB_val v;
    store_txn t;
    uint8_t saved[8 + LOG_HASH_BYTES];
    ck_assert_int_eq(store_txn_begin(ts.st, NULL, true, &t), TALLY_ok);
    ck_assert_int_eq(store_get(&t, STORE_DB_META, "head", 4, &v), TALLY_ok);
    ck_assert_uint_eq(v.mv_size, sizeof(saved));
    memcpy(saved, v.mv_data, sizeof(saved));
    store_txn_abort(&t);

    put_meta(&ts, "head", saved, 20);
    expect_refused(&ts, WINDOW, "the head record (meta \"head\") is garbled");

    put_meta(&ts, "head", NULL, 0);
    char what[120];
    snprintf(what, sizeof(what),
             "the head record (meta \"head\") is missing, but the log ends at seq %" PRIu64, head);
    expect_refused(&ts, WINDOW, what);

    uint8_t behind[sizeof(saved)];
    memcpy(behind, saved, sizeof(saved));
    put_u64_be(behind, head - 1);
    put_meta(&ts, "head", behind, sizeof(behind));
    snprintf(what, sizeof(what), "names seq %" PRIu64 ", but the log ends at seq", head - 1);
    expect_refused(&ts, WINDOW, what);

    uint8_t other_hash[sizeof(saved)];
    memcpy(other_hash, saved, sizeof(saved));
    other_hash[8] ^= 0x01;
    put_meta(&ts, "head", other_hash, sizeof(other_hash));
    expect_refused(&ts, WINDOW, "holds another hash than the last event");

    put_meta(&ts, "head", saved, sizeof(saved));
    expect_passed(&ts, WINDOW);
    test_store_close(&ts);
}
END_TEST

int main(void)
{
    const test_row tests[] = {
        {"sound", sound_store_passes_from_genesis_or_its_tail, 60},
        {"undecodable", event_that_does_not_decode_is_found, 60},
        {"before_window", damage_before_the_window_is_not_seen, 60},
        {"link", event_that_no_longer_chains_is_found, 60},
        {"gap", gap_in_the_window_is_found, 60},
        {"head", head_record_missing_garbled_or_elsewhere_is_found, 60},
    };
    return test_run_suite(test_suite_of_rows("open_check", TEST_ROWS(tests)));
}
