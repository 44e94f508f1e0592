/*
 * check_entitlement.c — tests of ledger/entitlement.c through ledger_apply:
 * grant (for life, until a time, for a duration), extend, revoke, expiry
 * (as seen before the sweep, by the sweep, and inline when a command meets
 * an expired-but-unswept entitlement), the provider's source ordering
 * (stale commands), stateless validation of entitlement commands, the
 * grant's paying transfer, and listing one subject's entitlements.
 *
 * Every scenario checks the stored record, the outcome, the events appended
 * (type, entity version, causation) and that the log head moved by exactly
 * the expected number of events; every test ends with the invariants.
 */
#include "tests/support/suite.h"
#include "tests/support/test_support.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define HOUR_MS INT64_C(3600000)
#define DAY_MS (24 * HOUR_MS)

/* ---- helpers ---- */

/* What a test wants to know about one stored event. */
typedef struct event_facts {
    char type[64];
    bool has_causation;
    char consumer[TALLY_CONSUMER_BYTES_MAX + 1];
    char key[TALLY_KEY_BYTES_MAX + 1];
    uint64_t entity_version;
    int entity_kind;
    char subject[TALLY_SUBJECT_BYTES_MAX + 1];
    char feature[TALLY_FEATURE_BYTES_MAX + 1];
    int64_t time_ms;
} event_facts;

static void copy_event_facts(const log_event *ev, void *ctx)
{
    event_facts *f = ctx;
    snprintf(f->type, sizeof(f->type), "%.*s", (int)ev->type.len, ev->type.ptr);
    f->has_causation = ev->has_causation;
    snprintf(f->consumer, sizeof(f->consumer), "%.*s", (int)ev->consumer.len, ev->consumer.ptr);
    snprintf(f->key, sizeof(f->key), "%.*s", (int)ev->key.len, ev->key.ptr);
    f->entity_version = ev->entity_version;
    f->entity_kind = (int)ev->entity.kind;
    snprintf(f->subject, sizeof(f->subject), "%.*s", (int)ev->entity.subject.len,
             ev->entity.subject.ptr);
    snprintf(f->feature, sizeof(f->feature), "%.*s", (int)ev->entity.feature.len,
             ev->entity.feature.ptr);
    f->time_ms = ev->time_ms;
}

static event_facts event_at(test_store *ts, uint64_t seq)
{
    event_facts f;
    memset(&f, 0, sizeof(f));
    test_with_event(ts, seq, copy_event_facts, &f);
    return f;
}

/* The event at seq is an entitlement event of type about subject/feature
 * with entity version version. */
static void assert_entitlement_event(test_store *ts, uint64_t seq, const char *type,
                                     const char *subject, const char *feature,
                                     uint64_t version)
{
    event_facts f = event_at(ts, seq);
    ck_assert_str_eq(f.type, type);
    ck_assert_int_eq(f.entity_kind, LOG_ENTITY_ENTITLEMENT);
    ck_assert_str_eq(f.subject, subject);
    ck_assert_str_eq(f.feature, feature);
    ck_assert_uint_eq(f.entity_version, version);
    ck_assert_int_eq(f.time_ms, ts->now_ms);
}

/* Apply under consumer "test" and an explicit key; fail unless code. */
static ledger_outcome apply_expect(test_store *ts, const char *key, const ledger_command *cmd,
                                   int code)
{
    ledger_outcome out = test_apply(ts, "test", key, cmd);
    ck_assert_msg(out.code == code, "expected %s, got %s", tally_strerror(code),
                  tally_strerror(out.code));
    return out;
}

/* The command was rejected: stored when a business rejection (an invalid
 * command is answered, not stored), not replayed, no events, head
 * unchanged. */
static void assert_rejected(test_store *ts, const ledger_command *cmd, int code)
{
    log_head before = test_head(ts);
    ledger_outcome out = apply_expect(ts, NULL, cmd, code);
    ck_assert(out.stored == tally_error_is_stored(code));
    ck_assert(!out.replayed);
    ck_assert_uint_eq(out.event_count, 0);
    ck_assert_uint_eq(out.first_seq, 0);
    log_head after = test_head(ts);
    ck_assert_uint_eq(after.seq, before.seq);
    ck_assert_mem_eq(after.hash, before.hash, LOG_HASH_BYTES);
}

/* The command succeeded with exactly events events, first at head + 1. */
static ledger_outcome assert_applied(test_store *ts, const char *key, const ledger_command *cmd,
                                     uint32_t events)
{
    uint64_t head = test_head(ts).seq;
    ledger_outcome out = apply_expect(ts, key, cmd, TALLY_ok);
    ck_assert(out.stored);
    ck_assert(!out.replayed);
    ck_assert_uint_eq(out.event_count, events);
    ck_assert_uint_eq(out.first_seq, head + 1);
    ck_assert_uint_eq(test_head(ts).seq, head + events);
    return out;
}

static ledger_command grant_for(const char *subject, const char *feature, int64_t duration_ms)
{
    ledger_command c = test_cmd_grant(subject, feature, 0);
    c.u.entitlement.duration_ms = duration_ms;
    return c;
}

static ledger_command extend_for(const char *subject, const char *feature, int64_t duration_ms)
{
    ledger_command c = test_cmd_extend(subject, feature, 0);
    c.u.entitlement.duration_ms = duration_ms;
    return c;
}

/* Apply with ledger_apply in a transaction of its own but without the sweep
 * that ledger_apply_one runs first, so that the command itself meets an
 * entitlement that is due but not yet expired. */
static ledger_outcome apply_without_sweep(test_store *ts, const char *key,
                                          const ledger_command *cmd)
{
    store_txn txn;
    ck_assert_int_eq(store_txn_begin(ts->st, NULL, false, &txn), TALLY_ok);
    ledger_request req = {.consumer = tally_str_from("test"), .key = tally_str_from(key),
                          .command = *cmd};
    ledger_outcome out;
    int rc = ledger_apply(&txn, &req, ts->now_ms, &out);
    ck_assert_msg(rc == TALLY_ok, "ledger_apply fault: %s", tally_strerror(rc));
    ck_assert_int_eq(store_txn_commit(&txn), TALLY_ok);
    return out;
}

static bool entitlement_exists(test_store *ts, const char *subject, const char *feature)
{
    ledger_entitlement e;
    int rc = test_entitlement_rc(ts, subject, feature, &e);
    ck_assert_msg(rc == TALLY_ok || rc == TALLY_not_found, "lookup: %s", tally_strerror(rc));
    return rc == TALLY_ok;
}

/* Byte-equal stored records (the fixed encoding covers every field). */
static void assert_same_entitlement(const ledger_entitlement *a, const ledger_entitlement *b)
{
    uint8_t x[LEDGER_ENTITLEMENT_RECORD_BYTES], y[LEDGER_ENTITLEMENT_RECORD_BYTES];
    ledger_entitlement_encode(a, x);
    ledger_entitlement_encode(b, y);
    ck_assert_mem_eq(x, y, sizeof(x));
}

static void open_and_fund(test_store *ts)
{
    ledger_command c = test_cmd_open(1, 1, 0);
    ck_assert_int_eq(test_code(ts, &c), TALLY_ok);
    c = test_cmd_open(2, 1, 0);
    ck_assert_int_eq(test_code(ts, &c), TALLY_ok);
    c = test_cmd_transfer(7, 1, 2, 500);
    ck_assert_int_eq(test_code(ts, &c), TALLY_ok);
}

/* ---- grant ---- */

START_TEST(test_grant_for_life)
{
    test_store ts;
    test_store_open(&ts);
    ledger_command c = test_cmd_grant("user-1", "pro", 0);
    ledger_outcome out = assert_applied(&ts, "g1", &c, 1);
    assert_entitlement_event(&ts, out.first_seq, "entitlement.granted", "user-1", "pro", 1);
    event_facts f = event_at(&ts, out.first_seq);
    ck_assert(f.has_causation);
    ck_assert_str_eq(f.consumer, "test");
    ck_assert_str_eq(f.key, "g1");

    ledger_entitlement e = test_entitlement(&ts, "user-1", "pro");
    ck_assert_int_eq(e.state, LEDGER_ENTITLEMENT_ACTIVE);
    ck_assert(e.lifetime);
    ck_assert_int_eq(e.valid_until_ms, 0);
    ck_assert_uint_eq(e.version, 1);
    ck_assert_int_eq(e.granted_ms, TEST_NOW_MS);
    ck_assert_int_eq(e.updated_ms, TEST_NOW_MS);
    ck_assert(!e.has_source_order);
    ck_assert(!e.has_grant_transfer);
    ck_assert_uint_eq(test_count(&ts, STORE_DB_EXPIRY), 0);
    ck_assert_int_eq(ledger_entitlement_state_at(&e, TALLY_TIME_MS_MAX),
                     LEDGER_ENTITLEMENT_ACTIVE);

    ts.now_ms = TALLY_TIME_MS_MAX; /* a lifetime grant never expires */
    ck_assert_uint_eq(test_sweep(&ts), 0);
    ck_assert_int_eq(test_entitlement(&ts, "user-1", "pro").state, LEDGER_ENTITLEMENT_ACTIVE);
    test_finish(&ts);
}
END_TEST

START_TEST(test_grant_until_a_time)
{
    test_store ts;
    test_store_open(&ts);
    int64_t until = TEST_NOW_MS + HOUR_MS;
    ledger_command c = test_cmd_grant("user-1", "pro", until);
    ledger_outcome out = assert_applied(&ts, NULL, &c, 1);
    assert_entitlement_event(&ts, out.first_seq, "entitlement.granted", "user-1", "pro", 1);

    ledger_entitlement e = test_entitlement(&ts, "user-1", "pro");
    ck_assert_int_eq(e.state, LEDGER_ENTITLEMENT_ACTIVE);
    ck_assert(!e.lifetime);
    ck_assert_int_eq(e.valid_until_ms, until);
    ck_assert_uint_eq(e.version, 1);
    ck_assert_uint_eq(test_count(&ts, STORE_DB_EXPIRY), 1);
    test_finish(&ts);
}
END_TEST

START_TEST(test_grant_with_duration_ends_at_commit_time_plus_duration)
{
    test_store ts;
    test_store_open(&ts);
    ts.now_ms = TEST_NOW_MS + 12345; /* the commit time, not a fixed epoch */
    ledger_command c = grant_for("user-1", "pro", 30 * DAY_MS);
    assert_applied(&ts, NULL, &c, 1);

    ledger_entitlement e = test_entitlement(&ts, "user-1", "pro");
    ck_assert(!e.lifetime);
    ck_assert_int_eq(e.valid_until_ms, TEST_NOW_MS + 12345 + 30 * DAY_MS);
    ck_assert_int_eq(e.granted_ms, TEST_NOW_MS + 12345);
    test_finish(&ts);
}
END_TEST

START_TEST(test_grant_until_in_the_past_is_rejected)
{
    test_store ts;
    test_store_open(&ts);
    ledger_command past = test_cmd_grant("user-1", "pro", TEST_NOW_MS - 1);
    assert_rejected(&ts, &past, TALLY_valid_until_must_be_in_future);
    ledger_command now = test_cmd_grant("user-1", "pro", TEST_NOW_MS);
    assert_rejected(&ts, &now, TALLY_valid_until_must_be_in_future);
    ck_assert(!entitlement_exists(&ts, "user-1", "pro"));
    ck_assert_uint_eq(test_count(&ts, STORE_DB_EXPIRY), 0);

    ledger_command next_ms = test_cmd_grant("user-1", "pro", TEST_NOW_MS + 1);
    assert_applied(&ts, NULL, &next_ms, 1);
    test_finish(&ts);
}
END_TEST

START_TEST(test_grant_on_active_is_rejected)
{
    test_store ts;
    test_store_open(&ts);
    ledger_command first = test_cmd_grant("user-1", "pro", TEST_NOW_MS + HOUR_MS);
    assert_applied(&ts, NULL, &first, 1);
    ledger_entitlement before = test_entitlement(&ts, "user-1", "pro");

    ts.now_ms += 1000;
    ledger_command later = test_cmd_grant("user-1", "pro", TEST_NOW_MS + 5 * HOUR_MS);
    assert_rejected(&ts, &later, TALLY_entitlement_already_active);
    ledger_command life = test_cmd_grant("user-1", "pro", 0);
    assert_rejected(&ts, &life, TALLY_entitlement_already_active);
    ledger_entitlement after = test_entitlement(&ts, "user-1", "pro");
    assert_same_entitlement(&before, &after);

    ledger_command other = test_cmd_grant("user-2", "pro", 0); /* another subject is free */
    assert_applied(&ts, NULL, &other, 1);
    assert_rejected(&ts, &other, TALLY_entitlement_already_active);
    test_finish(&ts);
}
END_TEST

START_TEST(test_grant_transfer_must_exist)
{
    test_store ts;
    test_store_open(&ts);
    open_and_fund(&ts);
    ledger_command c = test_cmd_grant("user-1", "pro", 0);
    c.u.entitlement.has_grant_transfer = true;
    c.u.entitlement.grant_transfer_id = test_id(99);
    assert_rejected(&ts, &c, TALLY_grant_transfer_not_found);
    ck_assert(!entitlement_exists(&ts, "user-1", "pro"));

    c.u.entitlement.grant_transfer_id = test_id(7);
    assert_applied(&ts, NULL, &c, 1);
    ledger_entitlement e = test_entitlement(&ts, "user-1", "pro");
    ck_assert(e.has_grant_transfer);
    tally_id128 paid = test_id(7);
    ck_assert_mem_eq(e.grant_transfer_id.bytes, paid.bytes, 16);
    test_finish(&ts);
}
END_TEST

/* ---- extend ---- */

START_TEST(test_extend_moves_end_forward)
{
    test_store ts;
    test_store_open(&ts);
    int64_t end1 = TEST_NOW_MS + HOUR_MS, end2 = TEST_NOW_MS + 2 * HOUR_MS;
    ledger_command grant = test_cmd_grant("user-1", "pro", end1);
    assert_applied(&ts, NULL, &grant, 1);

    ts.now_ms += 1000;
    ledger_command extend = test_cmd_extend("user-1", "pro", end2);
    ledger_outcome out = assert_applied(&ts, "x1", &extend, 1);
    assert_entitlement_event(&ts, out.first_seq, "entitlement.extended", "user-1", "pro", 2);

    ledger_entitlement e = test_entitlement(&ts, "user-1", "pro");
    ck_assert_int_eq(e.state, LEDGER_ENTITLEMENT_ACTIVE);
    ck_assert_int_eq(e.valid_until_ms, end2);
    ck_assert_uint_eq(e.version, 2);
    ck_assert_int_eq(e.granted_ms, TEST_NOW_MS);
    ck_assert_int_eq(e.updated_ms, TEST_NOW_MS + 1000);

    /* The expiry index follows: nothing is due at the old end. */
    ck_assert_uint_eq(test_count(&ts, STORE_DB_EXPIRY), 1);
    ts.now_ms = end1;
    ck_assert_uint_eq(test_sweep(&ts), 0);
    ck_assert_int_eq(test_entitlement(&ts, "user-1", "pro").state, LEDGER_ENTITLEMENT_ACTIVE);
    ts.now_ms = end2;
    ck_assert_uint_eq(test_sweep(&ts), 1);
    test_finish(&ts);
}
END_TEST

START_TEST(test_extend_must_move_forward)
{
    test_store ts;
    test_store_open(&ts);
    int64_t end = TEST_NOW_MS + 2 * HOUR_MS;
    ledger_command grant = test_cmd_grant("user-1", "pro", end);
    assert_applied(&ts, NULL, &grant, 1);
    ledger_entitlement before = test_entitlement(&ts, "user-1", "pro");

    ledger_command same = test_cmd_extend("user-1", "pro", end);
    assert_rejected(&ts, &same, TALLY_extension_must_move_forward);
    ledger_command earlier = test_cmd_extend("user-1", "pro", end - HOUR_MS);
    assert_rejected(&ts, &earlier, TALLY_extension_must_move_forward);
    ledger_entitlement after = test_entitlement(&ts, "user-1", "pro");
    assert_same_entitlement(&before, &after);

    ledger_command one_more_ms = test_cmd_extend("user-1", "pro", end + 1);
    assert_applied(&ts, NULL, &one_more_ms, 1);
    ck_assert_int_eq(test_entitlement(&ts, "user-1", "pro").valid_until_ms, end + 1);
    test_finish(&ts);
}
END_TEST

START_TEST(test_extend_of_lifetime_is_rejected)
{
    test_store ts;
    test_store_open(&ts);
    ledger_command grant = test_cmd_grant("user-1", "pro", 0);
    assert_applied(&ts, NULL, &grant, 1);
    ledger_command extend = test_cmd_extend("user-1", "pro", TEST_NOW_MS + DAY_MS);
    assert_rejected(&ts, &extend, TALLY_entitlement_is_lifetime);
    ledger_entitlement e = test_entitlement(&ts, "user-1", "pro");
    ck_assert(e.lifetime);
    ck_assert_uint_eq(e.version, 1);
    ck_assert_uint_eq(test_count(&ts, STORE_DB_EXPIRY), 0);
    test_finish(&ts);
}
END_TEST

START_TEST(test_extend_unknown_is_not_found)
{
    test_store ts;
    test_store_open(&ts);
    ledger_command grant = test_cmd_grant("user-1", "basic", 0);
    assert_applied(&ts, NULL, &grant, 1);
    ledger_command extend = test_cmd_extend("user-1", "pro", TEST_NOW_MS + DAY_MS);
    assert_rejected(&ts, &extend, TALLY_entitlement_not_found);
    ck_assert(!entitlement_exists(&ts, "user-1", "pro"));
    test_finish(&ts);
}
END_TEST

/* ---- revoke ---- */

/* Grant user-1/pro until now + 1h, then revoke it. */
static void grant_then_revoke(test_store *ts)
{
    ledger_command grant = test_cmd_grant("user-1", "pro", TEST_NOW_MS + HOUR_MS);
    assert_applied(ts, NULL, &grant, 1);
    ledger_command revoke = test_cmd_revoke("user-1", "pro");
    ledger_outcome out = assert_applied(ts, "r1", &revoke, 1);
    assert_entitlement_event(ts, out.first_seq, "entitlement.revoked", "user-1", "pro", 2);
}

START_TEST(test_revoke_active)
{
    test_store ts;
    test_store_open(&ts);
    grant_then_revoke(&ts);
    ledger_entitlement e = test_entitlement(&ts, "user-1", "pro");
    ck_assert_int_eq(e.state, LEDGER_ENTITLEMENT_REVOKED);
    ck_assert_uint_eq(e.version, 2);
    ck_assert_int_eq(ledger_entitlement_state_at(&e, TEST_NOW_MS + 2 * HOUR_MS),
                     LEDGER_ENTITLEMENT_REVOKED);

    /* A revoked entitlement leaves the expiry index and is never expired. */
    ck_assert_uint_eq(test_count(&ts, STORE_DB_EXPIRY), 0);
    ts.now_ms = TEST_NOW_MS + 2 * HOUR_MS;
    uint64_t head = test_head(&ts).seq;
    ck_assert_uint_eq(test_sweep(&ts), 0);
    ck_assert_uint_eq(test_head(&ts).seq, head);
    ck_assert_int_eq(test_entitlement(&ts, "user-1", "pro").state, LEDGER_ENTITLEMENT_REVOKED);
    test_finish(&ts);
}
END_TEST

START_TEST(test_extend_after_revoke_is_rejected)
{
    test_store ts;
    test_store_open(&ts);
    grant_then_revoke(&ts);
    ledger_entitlement before = test_entitlement(&ts, "user-1", "pro");
    ledger_command extend = test_cmd_extend("user-1", "pro", TEST_NOW_MS + DAY_MS);
    assert_rejected(&ts, &extend, TALLY_entitlement_revoked);
    ledger_entitlement after = test_entitlement(&ts, "user-1", "pro");
    assert_same_entitlement(&before, &after);
    test_finish(&ts);
}
END_TEST

START_TEST(test_revoke_twice_is_rejected)
{
    test_store ts;
    test_store_open(&ts);
    grant_then_revoke(&ts);
    ledger_command revoke = test_cmd_revoke("user-1", "pro");
    assert_rejected(&ts, &revoke, TALLY_entitlement_already_revoked);
    ck_assert_uint_eq(test_entitlement(&ts, "user-1", "pro").version, 2);
    test_finish(&ts);
}
END_TEST

START_TEST(test_revoke_unknown_is_not_found)
{
    test_store ts;
    test_store_open(&ts);
    ledger_command revoke = test_cmd_revoke("user-1", "pro");
    assert_rejected(&ts, &revoke, TALLY_entitlement_not_found);
    ck_assert(!entitlement_exists(&ts, "user-1", "pro"));
    test_finish(&ts);
}
END_TEST

START_TEST(test_regrant_after_revoke)
{
    test_store ts;
    test_store_open(&ts);
    grant_then_revoke(&ts);
    ts.now_ms += 5000;
    ledger_command grant = test_cmd_grant("user-1", "pro", 0);
    ledger_outcome out = assert_applied(&ts, NULL, &grant, 1);
    assert_entitlement_event(&ts, out.first_seq, "entitlement.granted", "user-1", "pro", 3);
    ledger_entitlement e = test_entitlement(&ts, "user-1", "pro");
    ck_assert_int_eq(e.state, LEDGER_ENTITLEMENT_ACTIVE);
    ck_assert(e.lifetime);
    ck_assert_int_eq(e.valid_until_ms, 0);
    ck_assert_uint_eq(e.version, 3);
    ck_assert_int_eq(e.granted_ms, TEST_NOW_MS + 5000);
    test_finish(&ts);
}
END_TEST

/* ---- expiry ---- */

START_TEST(test_expired_before_the_sweep_then_swept)
{
    test_store ts;
    test_store_open(&ts);
    int64_t end = TEST_NOW_MS + HOUR_MS;
    ledger_command grant = test_cmd_grant("user-1", "pro", end);
    assert_applied(&ts, NULL, &grant, 1);

    ts.now_ms = end;
    ledger_entitlement e = test_entitlement(&ts, "user-1", "pro");
    ck_assert_int_eq(e.state, LEDGER_ENTITLEMENT_ACTIVE); /* as stored */
    ck_assert_int_eq(ledger_entitlement_state_at(&e, end - 1), LEDGER_ENTITLEMENT_ACTIVE);
    ck_assert_int_eq(ledger_entitlement_state_at(&e, end), LEDGER_ENTITLEMENT_EXPIRED);

    uint64_t head = test_head(&ts).seq;
    ck_assert_uint_eq(test_sweep(&ts), 1);
    ck_assert_uint_eq(test_head(&ts).seq, head + 1);
    assert_entitlement_event(&ts, head + 1, "entitlement.expired", "user-1", "pro", 2);
    ck_assert(!event_at(&ts, head + 1).has_causation);

    e = test_entitlement(&ts, "user-1", "pro");
    ck_assert_int_eq(e.state, LEDGER_ENTITLEMENT_EXPIRED);
    ck_assert_uint_eq(e.version, 2);
    ck_assert_int_eq(e.updated_ms, end);
    ck_assert_uint_eq(test_count(&ts, STORE_DB_EXPIRY), 0);
    ck_assert_uint_eq(test_sweep(&ts), 0); /* expires once */
    ck_assert_uint_eq(test_head(&ts).seq, head + 1);
    test_finish(&ts);
}
END_TEST

/* Grant user-1/pro until now + 1h and let the sweep expire it at its end. */
static void grant_and_expire(test_store *ts)
{
    int64_t end = ts->now_ms + HOUR_MS;
    ledger_command grant = test_cmd_grant("user-1", "pro", end);
    assert_applied(ts, NULL, &grant, 1);
    ts->now_ms = end + 1000;
    ck_assert_uint_eq(test_sweep(ts), 1);
    ck_assert_int_eq(test_entitlement(ts, "user-1", "pro").state, LEDGER_ENTITLEMENT_EXPIRED);
}

START_TEST(test_extend_after_expiry_reactivates)
{
    test_store ts;
    test_store_open(&ts);
    grant_and_expire(&ts);
    ledger_command past = test_cmd_extend("user-1", "pro", ts.now_ms);
    assert_rejected(&ts, &past, TALLY_valid_until_must_be_in_future);

    int64_t end = ts.now_ms + DAY_MS;
    ledger_command extend = test_cmd_extend("user-1", "pro", end);
    ledger_outcome out = assert_applied(&ts, NULL, &extend, 1);
    assert_entitlement_event(&ts, out.first_seq, "entitlement.extended", "user-1", "pro", 3);
    ledger_entitlement e = test_entitlement(&ts, "user-1", "pro");
    ck_assert_int_eq(e.state, LEDGER_ENTITLEMENT_ACTIVE);
    ck_assert_int_eq(e.valid_until_ms, end);
    ck_assert_uint_eq(e.version, 3);
    ck_assert_uint_eq(test_count(&ts, STORE_DB_EXPIRY), 1);
    test_finish(&ts);
}
END_TEST

START_TEST(test_extend_expired_by_duration_counts_from_now)
{
    test_store ts;
    test_store_open(&ts);
    grant_and_expire(&ts);
    ledger_command extend = extend_for("user-1", "pro", 7 * DAY_MS);
    assert_applied(&ts, NULL, &extend, 1);
    ledger_entitlement e = test_entitlement(&ts, "user-1", "pro");
    ck_assert_int_eq(e.state, LEDGER_ENTITLEMENT_ACTIVE);
    ck_assert_int_eq(e.valid_until_ms, ts.now_ms + 7 * DAY_MS);
    test_finish(&ts);
}
END_TEST

START_TEST(test_grant_after_expiry)
{
    test_store ts;
    test_store_open(&ts);
    grant_and_expire(&ts);
    ledger_command grant = test_cmd_grant("user-1", "pro", 0);
    ledger_outcome out = assert_applied(&ts, NULL, &grant, 1);
    assert_entitlement_event(&ts, out.first_seq, "entitlement.granted", "user-1", "pro", 3);
    ck_assert_int_eq(test_entitlement(&ts, "user-1", "pro").state, LEDGER_ENTITLEMENT_ACTIVE);
    test_finish(&ts);
}
END_TEST

/* A command meeting an entitlement that is due but not swept records the
 * expiry first (caused by that command), then its own change. */
static void assert_inline_expiry(test_store *ts, const ledger_command *cmd, const char *type)
{
    int64_t end = ts->now_ms + HOUR_MS;
    ledger_command grant = test_cmd_grant("user-1", "pro", end);
    assert_applied(ts, NULL, &grant, 1);
    ts->now_ms = end + 1;
    uint64_t head = test_head(ts).seq;

    ledger_outcome out = apply_without_sweep(ts, "inline", cmd);
    ck_assert_int_eq(out.code, TALLY_ok);
    ck_assert_uint_eq(out.event_count, 2);
    ck_assert_uint_eq(out.first_seq, head + 1);
    ck_assert_uint_eq(test_head(ts).seq, head + 2);
    assert_entitlement_event(ts, head + 1, "entitlement.expired", "user-1", "pro", 2);
    assert_entitlement_event(ts, head + 2, type, "user-1", "pro", 3);
    event_facts f = event_at(ts, head + 1);
    ck_assert(f.has_causation);
    ck_assert_str_eq(f.key, "inline");

    ledger_entitlement e = test_entitlement(ts, "user-1", "pro");
    ck_assert_int_eq(e.state, LEDGER_ENTITLEMENT_ACTIVE);
    ck_assert_uint_eq(e.version, 3);
}

START_TEST(test_grant_of_expired_unswept_emits_expired_then_granted)
{
    test_store ts;
    test_store_open(&ts);
    ledger_command grant = test_cmd_grant("user-1", "pro", 0);
    assert_inline_expiry(&ts, &grant, "entitlement.granted");
    ledger_entitlement e = test_entitlement(&ts, "user-1", "pro");
    ck_assert(e.lifetime);
    ck_assert_uint_eq(test_count(&ts, STORE_DB_EXPIRY), 0);
    test_finish(&ts);
}
END_TEST

START_TEST(test_extend_of_expired_unswept_emits_expired_then_extended)
{
    test_store ts;
    test_store_open(&ts);
    ledger_command extend = test_cmd_extend("user-1", "pro", TEST_NOW_MS + DAY_MS);
    assert_inline_expiry(&ts, &extend, "entitlement.extended");
    ck_assert_int_eq(test_entitlement(&ts, "user-1", "pro").valid_until_ms,
                     TEST_NOW_MS + DAY_MS);
    ck_assert_uint_eq(test_count(&ts, STORE_DB_EXPIRY), 1);
    test_finish(&ts);
}
END_TEST

/* ---- source ordering ---- */

START_TEST(test_stale_order_changes_nothing)
{
    test_store ts;
    test_store_open(&ts);
    ledger_command grant = test_with_order(test_cmd_grant("user-1", "pro", 0), 10);
    assert_applied(&ts, NULL, &grant, 1);
    ledger_entitlement before = test_entitlement(&ts, "user-1", "pro");
    ck_assert(before.has_source_order);
    ck_assert_uint_eq(before.source_order, 10);
    uint64_t inbox = test_count(&ts, STORE_DB_INBOX);

    ledger_command equal = test_with_order(test_cmd_revoke("user-1", "pro"), 10);
    ledger_command older = test_with_order(test_cmd_revoke("user-1", "pro"), 9);
    /* the order is checked before the transition: not already_active */
    ledger_command old_grant = test_with_order(test_cmd_grant("user-1", "pro", 0), 3);
    log_head head = test_head(&ts);
    ledger_outcome out = apply_expect(&ts, "stale-1", &equal, TALLY_stale);
    ck_assert(out.stored);
    ck_assert_uint_eq(out.event_count, 0);
    apply_expect(&ts, "stale-2", &older, TALLY_stale);
    apply_expect(&ts, "stale-3", &old_grant, TALLY_stale);
    ck_assert_uint_eq(test_head(&ts).seq, head.seq);
    ck_assert_uint_eq(test_count(&ts, STORE_DB_INBOX), inbox + 3);
    ledger_entitlement after = test_entitlement(&ts, "user-1", "pro");
    assert_same_entitlement(&before, &after);

    out = apply_expect(&ts, "stale-1", &equal, TALLY_stale);
    ck_assert(out.replayed);
    ck_assert_uint_eq(test_head(&ts).seq, head.seq);
    ck_assert_uint_eq(test_count(&ts, STORE_DB_INBOX), inbox + 3);
    test_finish(&ts);
}
END_TEST

START_TEST(test_newer_order_applies)
{
    test_store ts;
    test_store_open(&ts);
    ledger_command grant = test_with_order(test_cmd_grant("user-1", "pro", 0), 10);
    assert_applied(&ts, NULL, &grant, 1);
    ledger_command revoke = test_with_order(test_cmd_revoke("user-1", "pro"), 11);
    assert_applied(&ts, NULL, &revoke, 1);
    ledger_entitlement e = test_entitlement(&ts, "user-1", "pro");
    ck_assert_int_eq(e.state, LEDGER_ENTITLEMENT_REVOKED);
    ck_assert_uint_eq(e.source_order, 11);

    ledger_command regrant = test_with_order(test_cmd_grant("user-1", "pro", 0), 1000);
    assert_applied(&ts, NULL, &regrant, 1);
    e = test_entitlement(&ts, "user-1", "pro");
    ck_assert_int_eq(e.state, LEDGER_ENTITLEMENT_ACTIVE);
    ck_assert_uint_eq(e.source_order, 1000);
    ck_assert_uint_eq(e.version, 3);
    test_finish(&ts);
}
END_TEST

START_TEST(test_commands_without_order_are_not_checked)
{
    test_store ts;
    test_store_open(&ts);
    ledger_command grant = test_with_order(test_cmd_grant("user-1", "pro", 0), 10);
    assert_applied(&ts, NULL, &grant, 1);
    ledger_command revoke = test_cmd_revoke("user-1", "pro");
    assert_applied(&ts, NULL, &revoke, 1);
    ledger_entitlement e = test_entitlement(&ts, "user-1", "pro");
    ck_assert_int_eq(e.state, LEDGER_ENTITLEMENT_REVOKED);
    ck_assert(e.has_source_order); /* the last order applied is kept */
    ck_assert_uint_eq(e.source_order, 10);
    ledger_command stale = test_with_order(test_cmd_grant("user-1", "pro", 0), 10);
    assert_rejected(&ts, &stale, TALLY_stale);

    /* An entitlement that never saw an order accepts any order. */
    ledger_command plain = test_cmd_grant("user-2", "pro", 0);
    assert_applied(&ts, NULL, &plain, 1);
    ledger_command first_order = test_with_order(test_cmd_revoke("user-2", "pro"), 0);
    assert_applied(&ts, NULL, &first_order, 1);
    e = test_entitlement(&ts, "user-2", "pro");
    ck_assert(e.has_source_order);
    ck_assert_uint_eq(e.source_order, 0);
    test_finish(&ts);
}
END_TEST

/* ---- validation ---- */

/* A NUL-terminated string of n copies of c (caller frees). */
static char *repeat(char c, size_t n)
{
    char *s = malloc(n + 1);
    ck_assert_ptr_nonnull(s);
    memset(s, c, n);
    s[n] = '\0';
    return s;
}

START_TEST(test_subject_length_is_validated)
{
    test_store ts;
    test_store_open(&ts);
    ledger_command empty = test_cmd_grant("", "pro", 0);
    assert_rejected(&ts, &empty, TALLY_subject_must_not_be_empty);
    char *too_long = repeat('s', TALLY_SUBJECT_BYTES_MAX + 1);
    ledger_command c = test_cmd_grant(too_long, "pro", 0);
    assert_rejected(&ts, &c, TALLY_subject_too_long);
    char *longest = repeat('s', TALLY_SUBJECT_BYTES_MAX);
    c = test_cmd_grant(longest, "pro", 0);
    assert_applied(&ts, NULL, &c, 1);
    ck_assert(entitlement_exists(&ts, longest, "pro"));
    free(too_long);
    free(longest);
    test_finish(&ts);
}
END_TEST

START_TEST(test_feature_length_is_validated)
{
    test_store ts;
    test_store_open(&ts);
    ledger_command empty = test_cmd_grant("user-1", "", 0);
    assert_rejected(&ts, &empty, TALLY_feature_must_not_be_empty);
    char *too_long = repeat('f', TALLY_FEATURE_BYTES_MAX + 1);
    ledger_command c = test_cmd_extend("user-1", too_long, TEST_NOW_MS + DAY_MS);
    assert_rejected(&ts, &c, TALLY_feature_too_long);
    char *longest = repeat('f', TALLY_FEATURE_BYTES_MAX);
    c = test_cmd_grant("user-1", longest, 0);
    assert_applied(&ts, NULL, &c, 1);
    ck_assert(entitlement_exists(&ts, "user-1", longest));
    free(too_long);
    free(longest);
    test_finish(&ts);
}
END_TEST

START_TEST(test_until_and_duration_are_exclusive)
{
    test_store ts;
    test_store_open(&ts);
    ledger_command c = test_cmd_grant("user-1", "pro", TEST_NOW_MS + DAY_MS);
    c.u.entitlement.duration_ms = DAY_MS;
    assert_rejected(&ts, &c, TALLY_until_and_duration_are_mutually_exclusive);
    ck_assert(!entitlement_exists(&ts, "user-1", "pro"));
    ledger_command grant = test_cmd_grant("user-1", "pro", TEST_NOW_MS + DAY_MS);
    assert_applied(&ts, NULL, &grant, 1);
    c.kind = LEDGER_EXTEND;
    assert_rejected(&ts, &c, TALLY_until_and_duration_are_mutually_exclusive);
    ck_assert_uint_eq(test_entitlement(&ts, "user-1", "pro").version, 1);
    test_finish(&ts);
}
END_TEST

START_TEST(test_times_out_of_range)
{
    test_store ts;
    test_store_open(&ts);
    ledger_command c = test_cmd_grant("user-1", "pro", -1);
    assert_rejected(&ts, &c, TALLY_time_out_of_range);
    c = test_cmd_grant("user-1", "pro", TALLY_TIME_MS_MAX + 1);
    assert_rejected(&ts, &c, TALLY_time_out_of_range);
    c = grant_for("user-1", "pro", -1);
    assert_rejected(&ts, &c, TALLY_duration_out_of_range);
    c = grant_for("user-1", "pro", TALLY_GRANT_DURATION_MS_MAX + 1);
    assert_rejected(&ts, &c, TALLY_duration_out_of_range);
    ck_assert(!entitlement_exists(&ts, "user-1", "pro"));

    c = test_cmd_grant("user-1", "pro", TALLY_TIME_MS_MAX); /* the last valid time */
    assert_applied(&ts, NULL, &c, 1);
    c = grant_for("user-2", "pro", TALLY_GRANT_DURATION_MS_MAX);
    assert_applied(&ts, NULL, &c, 1);
    ck_assert_int_eq(test_entitlement(&ts, "user-2", "pro").valid_until_ms,
                     TEST_NOW_MS + TALLY_GRANT_DURATION_MS_MAX);
    test_finish(&ts);
}
END_TEST

START_TEST(test_extend_needs_an_end)
{
    test_store ts;
    test_store_open(&ts);
    ledger_command grant = test_cmd_grant("user-1", "pro", TEST_NOW_MS + DAY_MS);
    assert_applied(&ts, NULL, &grant, 1);
    ledger_command extend = test_cmd_extend("user-1", "pro", 0);
    assert_rejected(&ts, &extend, TALLY_time_out_of_range);
    ck_assert_uint_eq(test_entitlement(&ts, "user-1", "pro").version, 1);
    test_finish(&ts);
}
END_TEST

START_TEST(test_duration_past_the_last_time_is_out_of_range)
{
    test_store ts;
    test_store_open(&ts);
    ts.now_ms = TALLY_TIME_MS_MAX - 1000;
    ledger_command c = grant_for("user-1", "pro", 1001);
    assert_rejected(&ts, &c, TALLY_time_out_of_range);
    ck_assert(!entitlement_exists(&ts, "user-1", "pro"));
    c = grant_for("user-1", "pro", 1000);
    assert_applied(&ts, NULL, &c, 1);
    ck_assert_int_eq(test_entitlement(&ts, "user-1", "pro").valid_until_ms, TALLY_TIME_MS_MAX);
    test_finish(&ts);
}
END_TEST

/* A malformed command is deterministic given the command alone: it must be
 * decided as a validation rejection (answered, not stored), never returned
 * as a fault
 * (ledger.h lists the faults ledger_apply may return; a fault tells the
 * client to retry the same key, which would fail the same way forever). */
static void assert_validation_rejection(test_store *ts, const ledger_command *cmd)
{
    log_head before = test_head(ts);
    uint64_t inbox = test_count(ts, STORE_DB_INBOX);
    ledger_outcome out;
    int rc = test_apply_rc(ts, "test", "malformed", cmd, &out);
    ck_assert_msg(rc == TALLY_ok, "malformed command returned the fault %s",
                  tally_strerror(rc));
    ck_assert_msg(tally_error_class_of(out.code) == TALLY_CLASS_VALIDATION,
                  "%s is not a validation code", tally_strerror(out.code));
    ck_assert(!out.stored); /* answered, the key stays free */
    ck_assert_uint_eq(out.event_count, 0);
    ck_assert_uint_eq(test_head(ts).seq, before.seq);
    ck_assert_uint_eq(test_count(ts, STORE_DB_INBOX), inbox);
}

START_TEST(test_revoke_with_an_end_is_a_validation_rejection)
{
    test_store ts;
    test_store_open(&ts);
    ledger_command grant = test_cmd_grant("user-1", "pro", 0);
    assert_applied(&ts, NULL, &grant, 1);
    ledger_command revoke = test_cmd_revoke("user-1", "pro");
    revoke.u.entitlement.valid_until_ms = TEST_NOW_MS + DAY_MS;
    assert_validation_rejection(&ts, &revoke);
    ck_assert_int_eq(test_entitlement(&ts, "user-1", "pro").state, LEDGER_ENTITLEMENT_ACTIVE);
    test_finish(&ts);
}
END_TEST

START_TEST(test_extend_with_grant_transfer_is_a_validation_rejection)
{
    test_store ts;
    test_store_open(&ts);
    open_and_fund(&ts);
    ledger_command grant = test_cmd_grant("user-1", "pro", TEST_NOW_MS + HOUR_MS);
    assert_applied(&ts, NULL, &grant, 1);
    ledger_command extend = test_cmd_extend("user-1", "pro", TEST_NOW_MS + DAY_MS);
    extend.u.entitlement.has_grant_transfer = true;
    extend.u.entitlement.grant_transfer_id = test_id(7);
    assert_validation_rejection(&ts, &extend);
    ck_assert_uint_eq(test_entitlement(&ts, "user-1", "pro").version, 1);
    test_finish(&ts);
}
END_TEST

/* ---- listing ---- */

typedef struct feature_list {
    char features[8][TALLY_FEATURE_BYTES_MAX + 1];
    char subjects[8][TALLY_SUBJECT_BYTES_MAX + 1];
    int count;
} feature_list;

static int collect_feature(const ledger_entitlement *e, void *ctx)
{
    feature_list *l = ctx;
    ck_assert_int_lt(l->count, 8);
    snprintf(l->features[l->count], sizeof(l->features[0]), "%.*s", (int)e->feature_len,
             e->feature);
    snprintf(l->subjects[l->count], sizeof(l->subjects[0]), "%.*s", (int)e->subject_len,
             e->subject);
    l->count++;
    return 0;
}

static feature_list list_of(test_store *ts, const char *subject)
{
    feature_list l;
    memset(&l, 0, sizeof(l));
    store_txn t;
    ck_assert_int_eq(store_txn_begin(ts->st, NULL, true, &t), TALLY_ok);
    int rc = ledger_entitlement_list(&t, tally_str_from(subject), collect_feature, &l);
    store_txn_abort(&t);
    ck_assert_int_eq(rc, TALLY_ok);
    for (int i = 0; i < l.count; i++)
        ck_assert_str_eq(l.subjects[i], subject);
    return l;
}

static void grant_life(test_store *ts, const char *subject, const char *feature)
{
    ledger_command c = test_cmd_grant(subject, feature, 0);
    assert_applied(ts, NULL, &c, 1);
}

START_TEST(test_list_returns_only_that_subject)
{
    test_store ts;
    test_store_open(&ts);
    grant_life(&ts, "ab", "zeta");
    grant_life(&ts, "a", "pro");
    grant_life(&ts, "b", "alpha");
    grant_life(&ts, "a", "basic");
    grant_life(&ts, "abc", "pro");

    feature_list a = list_of(&ts, "a");
    ck_assert_int_eq(a.count, 2);
    ck_assert_str_eq(a.features[0], "basic"); /* feature order */
    ck_assert_str_eq(a.features[1], "pro");
    feature_list ab = list_of(&ts, "ab");
    ck_assert_int_eq(ab.count, 1);
    ck_assert_str_eq(ab.features[0], "zeta");
    ck_assert_int_eq(list_of(&ts, "b").count, 1);
    ck_assert_int_eq(list_of(&ts, "abc").count, 1);
    ck_assert_int_eq(list_of(&ts, "c").count, 0);
    ck_assert_int_eq(list_of(&ts, "abcd").count, 0);
    test_finish(&ts);
}
END_TEST

/* ---- suite ---- */

#define TIMEOUT_S 60

static Suite *entitlement_suite(void)
{
    const test_row tests[] = {
        {"grant", test_grant_for_life, TIMEOUT_S},
        {"grant", test_grant_until_a_time, TIMEOUT_S},
        {"grant", test_grant_with_duration_ends_at_commit_time_plus_duration, TIMEOUT_S},
        {"grant", test_grant_until_in_the_past_is_rejected, TIMEOUT_S},
        {"grant", test_grant_on_active_is_rejected, TIMEOUT_S},
        {"grant", test_grant_transfer_must_exist, TIMEOUT_S},
        {"extend", test_extend_moves_end_forward, TIMEOUT_S},
        {"extend", test_extend_must_move_forward, TIMEOUT_S},
        {"extend", test_extend_of_lifetime_is_rejected, TIMEOUT_S},
        {"extend", test_extend_unknown_is_not_found, TIMEOUT_S},
        {"revoke", test_revoke_active, TIMEOUT_S},
        {"revoke", test_extend_after_revoke_is_rejected, TIMEOUT_S},
        {"revoke", test_revoke_twice_is_rejected, TIMEOUT_S},
        {"revoke", test_revoke_unknown_is_not_found, TIMEOUT_S},
        {"revoke", test_regrant_after_revoke, TIMEOUT_S},
        {"expiry", test_expired_before_the_sweep_then_swept, TIMEOUT_S},
        {"expiry", test_extend_after_expiry_reactivates, TIMEOUT_S},
        {"expiry", test_extend_expired_by_duration_counts_from_now, TIMEOUT_S},
        {"expiry", test_grant_after_expiry, TIMEOUT_S},
        {"expiry", test_grant_of_expired_unswept_emits_expired_then_granted, TIMEOUT_S},
        {"expiry", test_extend_of_expired_unswept_emits_expired_then_extended, TIMEOUT_S},
        {"source_order", test_stale_order_changes_nothing, TIMEOUT_S},
        {"source_order", test_newer_order_applies, TIMEOUT_S},
        {"source_order", test_commands_without_order_are_not_checked, TIMEOUT_S},
        {"validation", test_subject_length_is_validated, TIMEOUT_S},
        {"validation", test_feature_length_is_validated, TIMEOUT_S},
        {"validation", test_until_and_duration_are_exclusive, TIMEOUT_S},
        {"validation", test_times_out_of_range, TIMEOUT_S},
        {"validation", test_extend_needs_an_end, TIMEOUT_S},
        {"validation", test_duration_past_the_last_time_is_out_of_range, TIMEOUT_S},
        {"validation", test_revoke_with_an_end_is_a_validation_rejection, TIMEOUT_S},
        {"validation", test_extend_with_grant_transfer_is_a_validation_rejection, TIMEOUT_S},
        {"list", test_list_returns_only_that_subject, TIMEOUT_S},
    };
    return test_suite_of_rows("entitlement", TEST_ROWS(tests));
}

int main(void) { return test_run_suite_both_modes(entitlement_suite()); }
