/*
 * check_libtally.c — tests of libtally (clients/libtally/libtally.c) against a
 * real tallyd on an ipc:// endpoint in a temp directory (tests/support/
 * tallyd_harness.h). Every op goes through the library: accounts,
 * transfers, holds, entitlements, chains (and their failure codes),
 * batches, every read (account pages with the server's bounds on them),
 * long-poll log reads, raw requests. Then the
 * promises of tally.h: the same key sent by 16 threads at once has one
 * effect; a reply lost to a stopped server is recovered by retrying the
 * key; an absent server is reported as unreachable, quickly; generated
 * keys are fresh UUIDv7s; one client serves many threads exactly.
 */
#include "clients/libtally/tally.h"

#include "common/clock.h"
#include "common/sha256.h"
#include "tests/support/http_client.h"
#include "tests/support/tallyd_harness.h"
#include "tests/support/test_support.h"
#include "tests/support/wait.h"
#include "tests/support/wire.h"

#include <check.h>
#include <inttypes.h>
#include <msgpack.h>
#include <nng/nng.h>
#include <nng/protocol/reqrep0/rep.h>
#include <pthread.h>
#include <stdatomic.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define LEDGER 1
#define CODE 1
#define BANK 1
#define USER 2
#define SHOP 3
#define TEST_TIMEOUT_S 300
#define PATIENT_TIMEOUT_MS 200000
/* A long-poll longer than one attempt's timeout_ms: an attempt waits both,
 * so the answer, due at the end of the wait, has SHORT_TIMEOUT_MS to come
 * (seconds: a loaded machine is slow to wake and answer it). */
#define SHORT_TIMEOUT_MS 5000
#define LONGER_WAIT_MS 6000

/* ---- fixture ---- */

typedef struct fixture {
    tallyd_proc srv;
    tally_client *c;
} fixture;

static tally_client *client_for(const char *url, uint32_t timeout_ms, uint32_t retries)
{
    tally_client_options o = {.url = url, .consumer = "check", .timeout_ms = timeout_ms,
                              .retries = retries, .retries_set = true, .backoff_ms = 20};
    tally_client *c = NULL;
    int rc = tally_client_open(&o, &c);
    ck_assert_msg(rc == TALLY_ok, "tally_client_open: %s", tally_strerror(rc));
    return c;
}

static void up(fixture *f)
{
    memset(f, 0, sizeof(*f));
    tallyd_start(&f->srv);
    f->c = client_for(f->srv.url, 5000, 3);
}

static void down(fixture *f)
{
    tally_client_close(f->c);
    tallyd_cleanup(&f->srv);
}

static tally_uuid uuid_n(uint64_t n)
{
    tally_uuid id = {{0}};
    for (int i = 15; i >= 8; i--, n >>= 8)
        id.bytes[i] = (uint8_t)n;
    id.bytes[0] = 0x11; /* never zero */
    return id;
}

/* ---- helpers: writes that must succeed, reads that must find ---- */

static tally_result open_account(tally_client *c, uint64_t id, uint16_t flags)
{
    tally_account_open_args a = {.id = id, .ledger = LEDGER, .code = CODE, .flags = flags};
    tally_result r;
    int rc = tally_account_open(c, NULL, &a, &r);
    ck_assert_msg(rc == TALLY_ok, "open %" PRIu64 ": %s", id, tally_strerror(rc));
    return r;
}

static tally_transfer_args transfer_args(uint64_t tid, uint64_t debit, uint64_t credit,
                                         int64_t amount)
{
    return (tally_transfer_args){.id = uuid_n(tid), .debit_account_id = debit,
                                 .credit_account_id = credit, .amount = amount,
                                 .ledger = LEDGER, .code = CODE};
}

static int transfer(tally_client *c, const char *key, uint64_t tid, uint64_t debit,
                    uint64_t credit, int64_t amount, tally_result *r)
{
    tally_transfer_args t = transfer_args(tid, debit, credit, amount);
    return tally_transfer(c, key, &t, r);
}

static void transfer_ok(tally_client *c, uint64_t tid, uint64_t debit, uint64_t credit,
                        int64_t amount)
{
    tally_result r;
    int rc = transfer(c, NULL, tid, debit, credit, amount, &r);
    ck_assert_msg(rc == TALLY_ok, "transfer %" PRIu64 ": %s", tid, tally_strerror(rc));
}

static tally_account account(tally_client *c, uint64_t id)
{
    tally_account a;
    int rc = tally_account_get(c, id, &a);
    ck_assert_msg(rc == TALLY_ok, "account_get %" PRIu64 ": %s", id, tally_strerror(rc));
    return a;
}

static int64_t balance(tally_client *c, uint64_t id)
{
    tally_account a = account(c, id);
    return a.credits_posted - a.debits_posted;
}

/* BANK (may go negative), USER (cannot overdraw) funded with funds, SHOP. */
static void open_three(tally_client *c, int64_t funds)
{
    open_account(c, BANK, 0);
    open_account(c, USER, TALLY_ACCOUNT_DEBITS_MUST_NOT_EXCEED_CREDITS);
    open_account(c, SHOP, 0);
    if (funds > 0)
        transfer_ok(c, 1000, BANK, USER, funds);
}

static uint64_t head_seq(tally_client *c)
{
    tally_stats s;
    ck_assert_int_eq(tally_stats_get(c, &s), TALLY_ok);
    return s.head_seq;
}

static tally_entitlement_args ent(const char *subject, const char *feature)
{
    return (tally_entitlement_args){.subject = subject, .feature = feature};
}

/* ---- accounts ---- */

START_TEST(test_account_open_and_get)
{
    fixture f;
    up(&f);
    tally_account_open_args a = {.id = 7, .ledger = 9, .code = 3,
                                 .flags = TALLY_ACCOUNT_CREDITS_MUST_NOT_EXCEED_DEBITS};
    tally_result r1, r2, r3;
    ck_assert_int_eq(tally_account_open(f.c, "open-7", &a, &r1), TALLY_ok);
    ck_assert_int_eq(r1.code, TALLY_ok);
    ck_assert(!r1.replayed);
    ck_assert_str_eq(r1.key, "open-7");
    ck_assert_uint_eq(r1.events, 1);
    ck_assert_uint_eq(r1.seq, 1);
    ck_assert_int_eq(r1.failed_index, -1);
    /* The same key and fields: the stored outcome, no new event. */
    ck_assert_int_eq(tally_account_open(f.c, "open-7", &a, &r2), TALLY_ok);
    ck_assert(r2.replayed);
    ck_assert_uint_eq(r2.seq, r1.seq);
    ck_assert_uint_eq(head_seq(f.c), 1);
    /* The same key, other fields: refused, nothing changes. */
    a.code = 4;
    ck_assert_int_eq(tally_account_open(f.c, "open-7", &a, &r3), TALLY_idempotency_key_reused);
    ck_assert_int_eq(r3.code, TALLY_idempotency_key_reused);
    /* Another key, same id, other code: the account exists already. */
    ck_assert_int_eq(tally_account_open(f.c, NULL, &a, &r3), TALLY_exists_with_different_code);
    tally_account got = account(f.c, 7);
    ck_assert_uint_eq(got.id, 7);
    ck_assert_uint_eq(got.ledger, 9);
    ck_assert_uint_eq(got.code, 3);
    ck_assert_uint_eq(got.flags, TALLY_ACCOUNT_CREDITS_MUST_NOT_EXCEED_DEBITS);
    ck_assert_int_eq(got.debits_posted + got.credits_posted, 0);
    ck_assert_uint_eq(got.version, 1);
    ck_assert_uint_eq(got.created_seq, 1);
    ck_assert_int_eq(tally_account_get(f.c, 8, &got), TALLY_not_found);
    /* An invalid command is answered, not stored: corrected, the same key
     * runs. */
    tally_account_open_args zero = {.id = 0, .ledger = 1, .code = 1};
    ck_assert_int_eq(tally_account_open(f.c, "zero", &zero, &r1), TALLY_id_must_not_be_zero);
    ck_assert_int_eq(tally_account_open(f.c, "zero", &zero, &r2), TALLY_id_must_not_be_zero);
    ck_assert(!r2.replayed);
    ck_assert_uint_eq(r2.events, 0);
    ck_assert_uint_eq(r2.seq, 0);
    zero.id = 8;
    ck_assert_int_eq(tally_account_open(f.c, "zero", &zero, &r2), TALLY_ok);
    ck_assert(!r2.replayed);
    ck_assert_uint_eq(r2.events, 1);
    down(&f);
}
END_TEST

/* ---- transfers ---- */

START_TEST(test_transfer_and_get)
{
    fixture f;
    up(&f);
    open_three(f.c, 100);
    tally_result r;
    ck_assert_int_eq(transfer(f.c, "buy-1", 1, USER, SHOP, 30, &r), TALLY_ok);
    ck_assert_uint_eq(r.events, 1);
    uint64_t seq = r.seq;
    ck_assert_int_eq(balance(f.c, USER), 70);
    ck_assert_int_eq(balance(f.c, SHOP), 30);
    tally_uuid id = uuid_n(1);
    tally_transfer_info t;
    ck_assert_int_eq(tally_transfer_get(f.c, &id, &t), TALLY_ok);
    ck_assert_mem_eq(t.id.bytes, id.bytes, 16);
    ck_assert_uint_eq(t.debit_account_id, USER);
    ck_assert_uint_eq(t.credit_account_id, SHOP);
    ck_assert_int_eq(t.amount, 30);
    ck_assert_uint_eq(t.ledger, LEDGER);
    ck_assert_uint_eq(t.code, CODE);
    ck_assert_str_eq(t.state, "posted");
    ck_assert_uint_eq(t.created_seq, seq);
    ck_assert_uint_eq(t.version, 1);
    ck_assert_int_ge(t.created_ms, clock_wall_ms() - 60000);
    /* USER cannot overdraw; the rejection is stored under its key. */
    ck_assert_int_eq(transfer(f.c, "buy-2", 2, USER, SHOP, 71, &r), TALLY_exceeds_credits);
    ck_assert_int_eq(r.code, TALLY_exceeds_credits);
    transfer_ok(f.c, 3, BANK, USER, 1000);
    ck_assert_int_eq(transfer(f.c, "buy-2", 2, USER, SHOP, 71, &r), TALLY_exceeds_credits);
    ck_assert(r.replayed);
    id = uuid_n(2);
    ck_assert_int_eq(tally_transfer_get(f.c, &id, &t), TALLY_not_found);
    /* A transfer id is unique across keys. */
    ck_assert_int_eq(transfer(f.c, "other", 1, USER, SHOP, 30, &r), TALLY_exists);
    ck_assert_int_eq(transfer(f.c, "other2", 1, USER, SHOP, 31, &r),
                     TALLY_exists_with_different_amount);
    ck_assert_int_eq(transfer(f.c, NULL, 9, USER, 99, 1, &r), TALLY_credit_account_not_found);
    ck_assert_int_eq(transfer(f.c, NULL, 9, USER, SHOP, 0, &r), TALLY_amount_must_not_be_zero);
    ck_assert_int_eq(transfer(f.c, NULL, 9, USER, SHOP, -5, &r),
                     TALLY_amount_must_not_be_negative);
    down(&f);
}
END_TEST

START_TEST(test_hold_post_void)
{
    fixture f;
    up(&f);
    open_three(f.c, 100);
    tally_transfer_args hold = transfer_args(10, USER, SHOP, 60);
    hold.flags = TALLY_TRANSFER_PENDING;
    hold.timeout_s = 3600;
    tally_result r;
    ck_assert_int_eq(tally_transfer(f.c, NULL, &hold, &r), TALLY_ok);
    tally_account u = account(f.c, USER);
    ck_assert_int_eq(u.debits_pending, 60);
    ck_assert_int_eq(u.debits_posted, 0);
    tally_uuid id = uuid_n(10);
    tally_transfer_info t;
    ck_assert_int_eq(tally_transfer_get(f.c, &id, &t), TALLY_ok);
    ck_assert_str_eq(t.state, "pending");
    ck_assert_uint_eq(t.timeout_s, 3600);
    ck_assert_int_gt(t.expires_at_ms, clock_wall_ms());
    /* Post 25 of the 60 held. */
    ck_assert_int_eq(tally_post(f.c, "post-10", &id, 25, &r), TALLY_ok);
    ck_assert_int_eq(tally_post(f.c, "post-10", &id, 25, &r), TALLY_ok);
    ck_assert(r.replayed);
    u = account(f.c, USER);
    ck_assert_int_eq(u.debits_pending, 0);
    ck_assert_int_eq(u.debits_posted, 25);
    ck_assert_int_eq(tally_transfer_get(f.c, &id, &t), TALLY_ok);
    ck_assert_str_eq(t.state, "pending_posted");
    ck_assert_int_eq(t.posted_amount, 25);
    ck_assert_uint_eq(t.version, 2);
    ck_assert_uint_eq(t.resolved_seq, r.seq);
    /* A second hold, voided; then it cannot be posted. */
    hold.id = uuid_n(11);
    hold.amount = 50;
    ck_assert_int_eq(tally_transfer(f.c, NULL, &hold, &r), TALLY_ok);
    tally_uuid id2 = uuid_n(11);
    ck_assert_int_eq(tally_void(f.c, NULL, &id2, &r), TALLY_ok);
    ck_assert_int_eq(tally_transfer_get(f.c, &id2, &t), TALLY_ok);
    ck_assert_str_eq(t.state, "pending_voided");
    ck_assert_int_eq(tally_post(f.c, NULL, &id2, 0, &r), TALLY_pending_transfer_already_voided);
    ck_assert_int_eq(account(f.c, USER).debits_pending, 0);
    /* Full post (amount 0) of a third hold; unknown holds. */
    hold.id = uuid_n(12);
    hold.amount = 5;
    ck_assert_int_eq(tally_transfer(f.c, NULL, &hold, &r), TALLY_ok);
    tally_uuid id3 = uuid_n(12);
    ck_assert_int_eq(tally_post(f.c, NULL, &id3, 0, &r), TALLY_ok);
    ck_assert_int_eq(tally_transfer_get(f.c, &id3, &t), TALLY_ok);
    ck_assert_int_eq(t.posted_amount, 5);
    tally_uuid none = uuid_n(99);
    ck_assert_int_eq(tally_void(f.c, NULL, &none, &r), TALLY_pending_transfer_not_found);
    ck_assert_int_eq(balance(f.c, USER), 100 - 25 - 5);
    down(&f);
}
END_TEST

/* ---- entitlements ---- */

START_TEST(test_entitlement_lifetime)
{
    fixture f;
    up(&f);
    tally_result r;
    tally_entitlement_args life = ent("user-1", "pro");
    ck_assert_int_eq(tally_grant(f.c, "g1", &life, &r), TALLY_ok);
    ck_assert_int_eq(tally_grant(f.c, NULL, &life, &r), TALLY_entitlement_already_active);
    tally_entitlement e;
    ck_assert_int_eq(tally_entitlement_get(f.c, "user-1", "pro", &e), TALLY_ok);
    ck_assert_str_eq(e.subject, "user-1");
    ck_assert_str_eq(e.feature, "pro");
    ck_assert_str_eq(e.state, "active");
    ck_assert(e.lifetime);
    ck_assert_int_eq(e.valid_until_ms, 0);
    ck_assert(!e.has_source_order);
    ck_assert(!e.has_grant_transfer);
    tally_entitlement_args longer = ent("user-1", "pro");
    longer.duration_ms = 1000;
    ck_assert_int_eq(tally_extend(f.c, NULL, &longer, &r), TALLY_entitlement_is_lifetime);
    ck_assert_int_eq(tally_entitlement_get(f.c, "user-1", "none", &e), TALLY_not_found);
    tally_entitlement_args past = ent("user-2", "x");
    past.valid_until_ms = 1000;
    ck_assert_int_eq(tally_grant(f.c, NULL, &past, &r), TALLY_valid_until_must_be_in_future);
    down(&f);
}
END_TEST

START_TEST(test_entitlement_timed)
{
    fixture f;
    up(&f);
    tally_result r;
    tally_entitlement e;
    /* A timed grant paid by a transfer, with a provider order. */
    open_three(f.c, 100);
    transfer_ok(f.c, 20, USER, SHOP, 10);
    int64_t until = clock_wall_ms() + 3600000;
    tally_entitlement_args timed = ent("user-1", "api");
    timed.valid_until_ms = until;
    timed.has_source_order = true;
    timed.source_order = 5;
    timed.has_grant_transfer = true;
    timed.grant_transfer_id = uuid_n(20);
    ck_assert_int_eq(tally_grant(f.c, NULL, &timed, &r), TALLY_ok);
    ck_assert_int_eq(tally_entitlement_get(f.c, "user-1", "api", &e), TALLY_ok);
    ck_assert(!e.lifetime);
    ck_assert_int_eq(e.valid_until_ms, until);
    ck_assert(e.has_source_order);
    ck_assert_uint_eq(e.source_order, 5);
    ck_assert(e.has_grant_transfer);
    ck_assert_mem_eq(e.grant_transfer_id.bytes, timed.grant_transfer_id.bytes, 16);
    /* Extend by a duration; an older order is stale. */
    tally_entitlement_args ext = ent("user-1", "api");
    ext.duration_ms = 60000;
    ext.has_source_order = true;
    ext.source_order = 6;
    ck_assert_int_eq(tally_extend(f.c, NULL, &ext, &r), TALLY_ok);
    ck_assert_int_eq(tally_entitlement_get(f.c, "user-1", "api", &e), TALLY_ok);
    ck_assert_int_eq(e.valid_until_ms, until + 60000);
    ck_assert_uint_eq(e.version, 2);
    ext.source_order = 4;
    ck_assert_int_eq(tally_extend(f.c, NULL, &ext, &r), TALLY_stale);
    ext.source_order = 7;
    /* Revoke; a field revoke does not take is refused, not stored. */
    tally_entitlement_args rev = ent("user-1", "api");
    rev.duration_ms = 5;
    ck_assert_int_eq(tally_revoke(f.c, "rev", &rev, &r), TALLY_unknown_field);
    rev.duration_ms = 0;
    ck_assert_int_eq(tally_revoke(f.c, "rev", &rev, &r), TALLY_ok);
    ck_assert_int_eq(tally_revoke(f.c, NULL, &rev, &r), TALLY_entitlement_already_revoked);
    ck_assert_int_eq(tally_extend(f.c, NULL, &ext, &r), TALLY_entitlement_revoked);
    ck_assert_int_eq(tally_entitlement_get(f.c, "user-1", "api", &e), TALLY_ok);
    ck_assert_str_eq(e.state, "revoked");
    down(&f);
}
END_TEST

START_TEST(test_entitlement_list)
{
    fixture f;
    up(&f);
    tally_result r;
    tally_entitlement_args g = ent("user-1", "pro");
    ck_assert_int_eq(tally_grant(f.c, NULL, &g, &r), TALLY_ok);
    g.feature = "api";
    ck_assert_int_eq(tally_grant(f.c, NULL, &g, &r), TALLY_ok);
    ck_assert_int_eq(tally_revoke(f.c, NULL, &g, &r), TALLY_ok);
    g.subject = "user-2";
    ck_assert_int_eq(tally_grant(f.c, NULL, &g, &r), TALLY_ok);
    /* In feature order; a small capacity gets the first ones. */
    tally_entitlement list[4];
    size_t n = 99;
    ck_assert_int_eq(tally_entitlement_list(f.c, "user-1", list, 4, &n), TALLY_ok);
    ck_assert_uint_eq(n, 2);
    ck_assert_str_eq(list[0].feature, "api");
    ck_assert_str_eq(list[0].state, "revoked");
    ck_assert_str_eq(list[1].feature, "pro");
    ck_assert_int_eq(tally_entitlement_list(f.c, "user-1", list, 1, &n), TALLY_ok);
    ck_assert_uint_eq(n, 1);
    ck_assert_int_eq(tally_entitlement_list(f.c, "nobody", list, 4, &n), TALLY_ok);
    ck_assert_uint_eq(n, 0);
    ck_assert_int_eq(tally_entitlement_list(f.c, "", list, 4, &n),
                     TALLY_subject_must_not_be_empty);
    down(&f);
}
END_TEST

/* ---- chains and batches ---- */

START_TEST(test_chain_applies_all)
{
    fixture f;
    up(&f);
    tally_batch *b = tally_batch_new(true);
    ck_assert_ptr_nonnull(b);
    tally_account_open_args a1 = {.id = 1, .ledger = LEDGER, .code = CODE};
    tally_account_open_args a2 = {.id = 2, .ledger = LEDGER, .code = CODE};
    tally_transfer_args t = transfer_args(1, 1, 2, 40);
    ck_assert_int_eq(tally_batch_account_open(b, "ignored", &a1), TALLY_ok);
    ck_assert_int_eq(tally_batch_account_open(b, NULL, &a2), TALLY_ok);
    ck_assert_int_eq(tally_batch_transfer(b, NULL, &t), TALLY_ok);
    ck_assert_uint_eq(tally_batch_count(b), 3);
    tally_result r[1], again[1];
    ck_assert_int_eq(tally_batch_send(f.c, b, NULL, r, 1), TALLY_ok);
    ck_assert_int_eq(r[0].code, TALLY_ok);
    ck_assert(!r[0].replayed);
    ck_assert_uint_eq(r[0].events, 3);
    ck_assert_uint_eq(r[0].chain_count, 3);
    for (int i = 0; i < 3; i++)
        ck_assert_int_eq(r[0].chain_codes[i], TALLY_ok);
    ck_assert_int_eq(r[0].failed_index, -1);
    ck_assert_uint_eq(strlen(r[0].key), 36);
    ck_assert_int_eq(balance(f.c, 2), 40);
    /* Sending the same chain again is a retry of the same key. */
    ck_assert_int_eq(tally_batch_send(f.c, b, NULL, again, 1), TALLY_ok);
    ck_assert(again[0].replayed);
    ck_assert_str_eq(again[0].key, r[0].key);
    ck_assert_int_eq(balance(f.c, 2), 40);
    /* With an explicit key. */
    ck_assert_int_eq(tally_batch_send(f.c, b, "chain-x", again, 1), TALLY_ok);
    ck_assert_str_eq(again[0].key, "chain-x");
    ck_assert_int_eq(again[0].code, TALLY_exists);
    ck_assert_int_eq(again[0].failed_index, 0);
    tally_batch_free(b);
    down(&f);
}
END_TEST

START_TEST(test_chain_failure_codes)
{
    fixture f;
    up(&f);
    open_three(f.c, 10);
    tally_batch *b = tally_batch_new(true);
    tally_account_open_args fresh = {.id = 50, .ledger = LEDGER, .code = CODE};
    tally_transfer_args ok = transfer_args(1, USER, SHOP, 5);
    tally_transfer_args too_much = transfer_args(2, USER, SHOP, 6); /* 5 + 6 > 10 */
    ck_assert_int_eq(tally_batch_account_open(b, NULL, &fresh), TALLY_ok);
    ck_assert_int_eq(tally_batch_transfer(b, NULL, &ok), TALLY_ok);
    ck_assert_int_eq(tally_batch_transfer(b, NULL, &too_much), TALLY_ok);
    uint64_t head = head_seq(f.c);
    tally_result r[1];
    ck_assert_int_eq(tally_batch_send(f.c, b, "chain-1", r, 1), TALLY_ok);
    ck_assert_int_eq(r[0].code, TALLY_exceeds_credits);
    ck_assert_uint_eq(r[0].chain_count, 3);
    ck_assert_int_eq(r[0].failed_index, 2);
    ck_assert_int_eq(r[0].chain_codes[0], TALLY_linked_operation_failed);
    ck_assert_int_eq(r[0].chain_codes[1], TALLY_linked_operation_failed);
    ck_assert_int_eq(r[0].chain_codes[2], TALLY_exceeds_credits);
    ck_assert_uint_eq(r[0].events, 0);
    /* Nothing of it applied. */
    tally_account a;
    ck_assert_int_eq(tally_account_get(f.c, 50, &a), TALLY_not_found);
    ck_assert_int_eq(balance(f.c, USER), 10);
    ck_assert_uint_eq(head_seq(f.c), head);
    /* Replayed as stored, even though it could succeed now. */
    transfer_ok(f.c, 3, BANK, USER, 100);
    ck_assert_int_eq(tally_batch_send(f.c, b, "chain-1", r, 1), TALLY_ok);
    ck_assert(r[0].replayed);
    ck_assert_int_eq(r[0].code, TALLY_exceeds_credits);
    ck_assert_int_eq(r[0].failed_index, 2);
    tally_batch_free(b);
    /* An empty chain is a stored validation rejection. */
    tally_batch *empty = tally_batch_new(true);
    ck_assert_int_eq(tally_batch_send(f.c, empty, NULL, r, 1), TALLY_ok);
    ck_assert_int_eq(r[0].code, TALLY_chain_must_not_be_empty);
    tally_batch_free(empty);
    /* At most 32 members. */
    tally_batch *full = tally_batch_new(true);
    for (int i = 0; i < TALLY_CLIENT_CHAIN_MAX; i++)
        ck_assert_int_eq(tally_batch_account_open(full, NULL, &fresh), TALLY_ok);
    ck_assert_int_eq(tally_batch_account_open(full, NULL, &fresh), TALLY_too_many_operations);
    ck_assert_uint_eq(tally_batch_count(full), TALLY_CLIENT_CHAIN_MAX);
    ck_assert_int_eq(tally_batch_send(f.c, full, NULL, r, 0), TALLY_invalid_argument);
    tally_batch_free(full);
    down(&f);
}
END_TEST

START_TEST(test_batch)
{
    fixture f;
    up(&f);
    tally_batch *b = tally_batch_new(false);
    tally_account_open_args a1 = {.id = 1, .ledger = LEDGER, .code = CODE};
    tally_account_open_args a2 = {.id = 2, .ledger = LEDGER, .code = CODE,
                                  .flags = TALLY_ACCOUNT_DEBITS_MUST_NOT_EXCEED_CREDITS};
    tally_transfer_args good = transfer_args(1, 1, 2, 7);
    tally_transfer_args bad = transfer_args(2, 2, 1, 8); /* 2 has only 7 */
    tally_entitlement_args g = ent("s", "f");
    ck_assert_int_eq(tally_batch_account_open(b, "b-open-1", &a1), TALLY_ok);
    ck_assert_int_eq(tally_batch_account_open(b, NULL, &a2), TALLY_ok);
    ck_assert_int_eq(tally_batch_transfer(b, NULL, &good), TALLY_ok);
    ck_assert_int_eq(tally_batch_transfer(b, NULL, &bad), TALLY_ok);
    ck_assert_int_eq(tally_batch_grant(b, NULL, &g), TALLY_ok);
    ck_assert_int_eq(tally_batch_transfer(b, NULL, NULL), TALLY_invalid_argument);
    ck_assert_uint_eq(tally_batch_count(b), 5);
    tally_result r[5], again[5];
    ck_assert_int_eq(tally_batch_send(f.c, b, "ignored", r, 4), TALLY_invalid_argument);
    ck_assert_int_eq(tally_batch_send(f.c, b, NULL, r, 5), TALLY_ok);
    ck_assert_int_eq(r[0].code, TALLY_ok);
    ck_assert_str_eq(r[0].key, "b-open-1");
    ck_assert_int_eq(r[1].code, TALLY_ok);
    ck_assert_uint_eq(strlen(r[1].key), 36);
    ck_assert_str_ne(r[1].key, r[2].key);
    ck_assert_int_eq(r[2].code, TALLY_ok);
    ck_assert_int_eq(r[3].code, TALLY_exceeds_credits);
    ck_assert_int_eq(r[4].code, TALLY_ok);
    ck_assert_uint_eq(r[2].events, 1);
    ck_assert_uint_eq(r[3].events, 0);
    ck_assert_int_eq(balance(f.c, 2), 7);
    /* Resent: every member replayed, nothing moves. */
    ck_assert_int_eq(tally_batch_send(f.c, b, NULL, again, 5), TALLY_ok);
    for (int i = 0; i < 5; i++) {
        ck_assert(again[i].replayed);
        ck_assert_int_eq(again[i].code, r[i].code);
        ck_assert_str_eq(again[i].key, r[i].key);
    }
    ck_assert_int_eq(balance(f.c, 2), 7);
    tally_batch_free(b);
    /* An empty batch is refused as a whole. */
    tally_batch *empty = tally_batch_new(false);
    ck_assert_int_eq(tally_batch_send(f.c, empty, NULL, r, 5), TALLY_value_out_of_range);
    tally_batch_free(empty);
    down(&f);
}
END_TEST

START_TEST(test_batch_full_size)
{
    fixture f;
    up(&f);
    open_account(f.c, BANK, 0);
    tally_batch *b = tally_batch_new(false);
    for (int i = 0; i < TALLY_CLIENT_BATCH_MAX; i++) {
        tally_account_open_args a = {.id = 100 + (uint64_t)i, .ledger = LEDGER, .code = CODE};
        ck_assert_int_eq(tally_batch_account_open(b, NULL, &a), TALLY_ok);
    }
    tally_account_open_args extra = {.id = 5000, .ledger = LEDGER, .code = CODE};
    ck_assert_int_eq(tally_batch_account_open(b, NULL, &extra), TALLY_too_many_operations);
    /* A full batch is slow to apply in a sanitizer build: wait long. */
    tally_client *patient = client_for(f.srv.url, PATIENT_TIMEOUT_MS, 0);
    tally_result *r = calloc(TALLY_CLIENT_BATCH_MAX, sizeof(*r));
    ck_assert_int_eq(tally_batch_send(patient, b, NULL, r, TALLY_CLIENT_BATCH_MAX), TALLY_ok);
    tally_client_close(patient);
    for (int i = 0; i < TALLY_CLIENT_BATCH_MAX; i++)
        ck_assert_int_eq(r[i].code, TALLY_ok);
    tally_stats s;
    ck_assert_int_eq(tally_stats_get(f.c, &s), TALLY_ok);
    ck_assert_uint_eq(s.accounts, TALLY_CLIENT_BATCH_MAX + 1);
    free(r);
    tally_batch_free(b);
    down(&f);
}
END_TEST

/* ---- reads ---- */

START_TEST(test_account_history_paging)
{
    fixture f;
    up(&f);
    open_three(f.c, 0);
    uint64_t seqs[5];
    for (int i = 0; i < 5; i++) {
        tally_result r;
        ck_assert_int_eq(transfer(f.c, NULL, 1 + (uint64_t)i, BANK, SHOP, 10 * (i + 1), &r),
                         TALLY_ok);
        seqs[i] = r.seq;
    }
    transfer_ok(f.c, 50, BANK, USER, 1); /* not SHOP's */
    tally_history_entry page[2];
    size_t n;
    uint64_t next, after = 0;
    int64_t credits = 0;
    /* Forward: 2 + 2 + 1, each entry with SHOP right after its event. */
    for (int p = 0, k = 0; p < 3; p++) {
        ck_assert_int_eq(tally_account_history(f.c, SHOP, after, 2, false, page, 2, &n, &next),
                         TALLY_ok);
        ck_assert_uint_eq(n, p < 2 ? 2 : 1);
        for (size_t i = 0; i < n; i++, k++) {
            credits += 10 * (k + 1);
            ck_assert_uint_eq(page[i].seq, seqs[k]);
            ck_assert_str_eq(page[i].type, "transfer.created");
            ck_assert_uint_eq(page[i].account.id, SHOP);
            ck_assert_int_eq(page[i].account.credits_posted, credits);
            ck_assert_int_eq(page[i].transfer.amount, 10 * (k + 1));
            ck_assert_uint_eq(page[i].transfer.credit_account_id, SHOP);
            ck_assert_int_gt(page[i].time_ms, 0);
        }
        ck_assert_uint_eq(next, p < 2 ? seqs[2 * p + 1] : 0);
        after = next;
    }
    /* Reverse: newest first, 2 + 2 + 1. */
    after = 0;
    for (int p = 0, k = 4; p < 3; p++) {
        ck_assert_int_eq(tally_account_history(f.c, SHOP, after, 2, true, page, 2, &n, &next),
                         TALLY_ok);
        ck_assert_uint_eq(n, p < 2 ? 2 : 1);
        for (size_t i = 0; i < n; i++, k--)
            ck_assert_uint_eq(page[i].seq, seqs[k]);
        ck_assert_uint_eq(next, p < 2 ? seqs[4 - 2 * p - 1] : 0);
        after = next;
    }
    /* limit 0 = default, bounded by capacity. */
    ck_assert_int_eq(tally_account_history(f.c, SHOP, 0, 0, false, page, 2, &n, &next), TALLY_ok);
    ck_assert_uint_eq(n, 2);
    ck_assert_int_eq(tally_account_history(f.c, 77, 0, 2, false, page, 2, &n, &next),
                     TALLY_not_found);
    down(&f);
}
END_TEST

/* account_list through libtally: pages by id, each account as
 * tally_account_get gives it, next 0 on the last page; the server's own
 * bounds on a raw request (a limit of 0 or above 1000, a negative cursor). */
START_TEST(test_account_list_paging)
{
    fixture f;
    up(&f);
    tally_account page[3];
    size_t n = 99;
    uint64_t next = 99;
    ck_assert_int_eq(tally_account_list(f.c, 0, 2, page, 3, &n, &next), TALLY_ok);
    ck_assert_uint_eq(n, 0); /* an empty store */
    ck_assert_uint_eq(next, 0);

    open_three(f.c, 100);
    open_account(f.c, 20, 0);
    open_account(f.c, 10, TALLY_ACCOUNT_CREDITS_MUST_NOT_EXCEED_DEBITS);
    static const uint64_t ids[] = {BANK, USER, SHOP, 10, 20};
    uint64_t after = 0;
    size_t seen = 0;
    for (int p = 0; p < 3; p++) {
        ck_assert_int_eq(tally_account_list(f.c, after, 2, page, 3, &n, &next), TALLY_ok);
        ck_assert_uint_eq(n, p < 2 ? 2 : 1);
        for (size_t i = 0; i < n; i++, seen++) {
            tally_account want;
            ck_assert_uint_eq(page[i].id, ids[seen]);
            ck_assert_int_eq(tally_account_get(f.c, ids[seen], &want), TALLY_ok);
            ck_assert_mem_eq(&page[i], &want, sizeof(want));
        }
        ck_assert_uint_eq(next, p < 2 ? ids[2 * p + 1] : 0);
        after = next;
    }
    ck_assert_uint_eq(seen, 5);
    ck_assert_int_eq(page[0].flags, 0);
    ck_assert_int_eq(tally_account_list(f.c, 0, 5, page, 3, &n, &next), TALLY_ok);
    ck_assert_int_eq(page[1].credits_posted, 100); /* USER, funded by BANK */
    ck_assert_uint_eq(n, 3);                       /* limit bounded by capacity */
    ck_assert_uint_eq(next, SHOP);
    ck_assert_int_eq(tally_account_list(f.c, 0, 0, page, 3, &n, &next), TALLY_ok);
    ck_assert_uint_eq(n, 3); /* limit 0: the default (100), bounded by capacity */
    ck_assert_int_eq(tally_account_list(f.c, 5, 3, page, 3, &n, &next), TALLY_ok);
    ck_assert_uint_eq(n, 2); /* a cursor between ids */
    ck_assert_uint_eq(page[0].id, 10);
    ck_assert_uint_eq(page[0].flags, TALLY_ACCOUNT_CREDITS_MUST_NOT_EXCEED_DEBITS);
    ck_assert_uint_eq(next, 0);
    ck_assert_int_eq(tally_account_list(f.c, 20, 3, page, 3, &n, &next), TALLY_ok);
    ck_assert_uint_eq(n, 0); /* past the end */
    ck_assert_int_eq(tally_account_list(f.c, UINT64_MAX, 3, page, 3, &n, &next), TALLY_ok);
    ck_assert_uint_eq(n, 0);
    ck_assert_int_eq(tally_account_list(f.c, 0, 2, page, 0, &n, &next), TALLY_invalid_argument);
    ck_assert_int_eq(tally_account_list(f.c, 0, 2, page, 3, &n, NULL), TALLY_invalid_argument);

    /* What libtally never sends, sent raw: the server's own bounds. */
    wire_reply r;
    wire_call(f.c, &r, "account_list", "u", "limit", (uint64_t)0);
    wire_expect(&r, "value_out_of_range");
    wire_done(&r);
    wire_call(f.c, &r, "account_list", "u", "limit", (uint64_t)TALLY_ACCOUNT_LIST_ENTRIES_MAX + 1);
    wire_expect(&r, "value_out_of_range");
    wire_done(&r);
    wire_call(f.c, &r, "account_list", "i", "after_id", (int64_t)-1);
    wire_expect(&r, "value_out_of_range");
    wire_done(&r);
    wire_call(f.c, &r, "account_list", "uu", "after_id", (uint64_t)2, "limit", (uint64_t)1000);
    wire_expect(&r, "ok");
    ck_assert_uint_eq(wire_field(r.map, "entries")->via.array.size, 3);
    ck_assert_int_eq(wire_field(r.map, "next")->type, MSGPACK_OBJECT_NIL);
    wire_done(&r);
    down(&f);
}
END_TEST

/* Check the hash chain of events read back (docs/EVENTS.md). */
static void assert_chained(const tally_event *ev, size_t n)
{
    uint8_t prev[32] = {0};
    for (size_t i = 0; i < n; i++) {
        size_t len = ev[i].raw_len;
        ck_assert_uint_gt(len, 34);
        const uint8_t *tail = ev[i].raw + len - 34; /* format 2: bin8 of 32 bytes */
        ck_assert_mem_eq(tail, "\xc4\x20", 2);
        sha256_ctx ctx;
        uint8_t digest[32];
        sha256_begin(&ctx);
        sha256_update(&ctx, prev, 32);
        sha256_update(&ctx, ev[i].raw, len - 34);
        sha256_finish(&ctx, digest);
        ck_assert_mem_eq(digest, tail + 2, 32);
        memcpy(prev, tail + 2, 32);
    }
}

START_TEST(test_log_read)
{
    fixture f;
    up(&f);
    open_three(f.c, 100);
    tally_result r;
    ck_assert_int_eq(transfer(f.c, "log-key", 1, USER, SHOP, 5, &r), TALLY_ok);
    tally_entitlement_args g = ent("u", "feat");
    ck_assert_int_eq(tally_grant(f.c, NULL, &g, &r), TALLY_ok);
    tally_event ev[16];
    size_t n;
    uint64_t head;
    ck_assert_int_eq(tally_log_read(f.c, 0, 0, 0, ev, 16, &n, &head), TALLY_ok);
    ck_assert_uint_eq(n, 6);
    ck_assert_uint_eq(head, 6);
    for (size_t i = 0; i < n; i++) {
        ck_assert_uint_eq(ev[i].seq, i + 1);
        ck_assert_str_eq(ev[i].consumer, "check");
        ck_assert_int_eq((ev[i].id.bytes[6] >> 4), 7);
    }
    ck_assert_str_eq(ev[0].type, "account.opened");
    ck_assert_str_eq(ev[0].entity_kind, "account");
    ck_assert_uint_eq(ev[0].account_id, BANK);
    ck_assert_uint_eq(ev[0].entity_version, 1);
    ck_assert_str_eq(ev[4].type, "transfer.created");
    ck_assert_str_eq(ev[4].entity_kind, "transfer");
    tally_uuid tid = uuid_n(1);
    ck_assert_mem_eq(ev[4].transfer_id.bytes, tid.bytes, 16);
    ck_assert_uint_eq(ev[4].account_id, 0);
    ck_assert_uint_eq(ev[4].entity_version, 1);
    ck_assert_str_eq(ev[4].key, "log-key");
    ck_assert_str_eq(ev[5].type, "entitlement.granted");
    ck_assert_str_eq(ev[5].entity_kind, "entitlement");
    ck_assert_str_eq(ev[5].subject, "u");
    ck_assert_str_eq(ev[5].feature, "feat");
    ck_assert_str_eq(ev[4].subject, "");
    assert_chained(ev, n);
    tally_events_release(ev, n);
    /* Paging: limit and capacity bound a read. */
    ck_assert_int_eq(tally_log_read(f.c, 3, 2, 0, ev, 16, &n, &head), TALLY_ok);
    ck_assert_uint_eq(n, 2);
    ck_assert_uint_eq(ev[0].seq, 3);
    tally_events_release(ev, n);
    ck_assert_int_eq(tally_log_read(f.c, 2, 100, 0, ev, 3, &n, &head), TALLY_ok);
    ck_assert_uint_eq(n, 3);
    ck_assert_uint_eq(ev[2].seq, 4);
    tally_events_release(ev, n);
    /* Past the head without waiting: nothing. */
    ck_assert_int_eq(tally_log_read(f.c, 7, 10, 0, ev, 16, &n, &head), TALLY_ok);
    ck_assert_uint_eq(n, 0);
    ck_assert_uint_eq(head, 6);
    down(&f);
}
END_TEST

typedef struct delayed_write {
    tally_client *c;
    int port; /* of tallyd's /metrics */
    bool parked; /* whether the write came after tallyd counted the long-poll parked */
    int rc;
} delayed_write;

/* Once a long-poll is parked in tallyd, a write that wakes it. */
static void *write_later(void *arg)
{
    delayed_write *w = arg;
    w->parked = test_metrics_sample_reaches(w->port, "tally_long_polls_parked", 1, 30000);
    tally_account_open_args a = {.id = 424242, .ledger = LEDGER, .code = CODE};
    tally_result r;
    w->rc = tally_account_open(w->c, NULL, &a, &r);
    return NULL;
}

START_TEST(test_log_read_long_poll)
{
    fixture f;
    memset(&f, 0, sizeof(f));
    f.srv.extra_args[0] = "--http"; /* for /metrics: tally_long_polls_parked */
    f.srv.extra_args[1] = "http://127.0.0.1:0";
    tallyd_start(&f.srv);
    int port = f.srv.http_port;
    f.c = client_for(f.srv.url, 5000, 3);
    open_account(f.c, BANK, 0);
    tally_event ev[4];
    size_t n;
    uint64_t head;
    /* Nothing comes: the wait runs out with no events; no timeout although
     * wait_ms is longer than timeout_ms (each attempt waits both). */
    tally_client *short_c = client_for(f.srv.url, SHORT_TIMEOUT_MS, 0);
    int64_t t0 = clock_mono_ms();
    ck_assert_int_eq(tally_log_read(short_c, 2, 10, LONGER_WAIT_MS, ev, 4, &n, &head), TALLY_ok);
    int64_t waited = clock_mono_ms() - t0;
    ck_assert_uint_eq(n, 0);
    ck_assert_uint_eq(head, 1);
    ck_assert_int_ge(waited, LONGER_WAIT_MS - 100); /* (a timeout, no retries: timed_out) */
    /* Another thread writes while we wait: the read returns with it. */
    delayed_write w = {f.c, port, false, -1};
    pthread_t th;
    pthread_create(&th, NULL, write_later, &w);
    t0 = clock_mono_ms();
    ck_assert_int_eq(tally_log_read(f.c, 2, 10, 20000, ev, 4, &n, &head), TALLY_ok);
    waited = clock_mono_ms() - t0;
    pthread_join(th, NULL);
    ck_assert_msg(w.parked, "the long-poll never parked in tallyd");
    ck_assert_int_eq(w.rc, TALLY_ok);
    ck_assert_uint_eq(n, 1);
    ck_assert_uint_eq(ev[0].seq, 2);
    ck_assert_str_eq(ev[0].type, "account.opened");
    ck_assert_msg(waited < 20000, "returned after %lld ms: its wait ran out, not woken",
                  (long long)waited);
    tally_events_release(ev, n);
    tally_client_close(short_c);
    down(&f);
}
END_TEST

/* tally_client_close while a call waits (a 20 s long-poll): the call ends
 * at once, and the close returns, on either transport. */
typedef struct waiting_read {
    tally_client *c;
    int rc;
    int64_t ended_ms;
} waiting_read;

static void *read_and_wait(void *arg)
{
    waiting_read *w = arg;
    tally_event ev[1];
    size_t n = 0;
    uint64_t head;
    w->rc = tally_log_read(w->c, 100, 1, 20000, ev, 1, &n, &head);
    tally_events_release(ev, n);
    w->ended_ms = clock_mono_ms();
    return NULL;
}

START_TEST(test_close_ends_a_call_in_flight)
{
    fixture f;
    memset(&f, 0, sizeof(f));
    f.srv.extra_args[0] = "--http"; /* for /metrics: whether the read has come */
    f.srv.extra_args[1] = "http://127.0.0.1:0";
    tallyd_start(&f.srv);
    int port = f.srv.http_port; /* the kernel's choice, from tallyd's ready file */
    ck_assert_int_gt(port, 0);
    f.c = client_for(f.srv.url, 5000, 3);
    tally_client *c = client_for(f.srv.url, 30000, 0);
    tally_stats s;
    ck_assert_int_eq(tally_stats_get(c, &s), TALLY_ok); /* a connection is up */
    waiting_read w = {c, -1, 0};
    pthread_t th;
    pthread_create(&th, NULL, read_and_wait, &w);
    /* the read parked in tallyd (counted once decoded): a close before the
     * thread had begun its call would free the client under it */
    ck_assert_msg(test_metrics_sample_reaches(port, "tally_requests_total{op=\"log_read\"}", 1,
                                              30000),
                  "the read never reached tallyd");
    int64_t t0 = clock_mono_ms();
    tally_client_close(c);
    int64_t closed = clock_mono_ms() - t0;
    pthread_join(th, NULL);
    /* ended by the close, not by the read's 20 s wait */
    ck_assert_msg(closed < 20000, "the close returned after %lld ms", (long long)closed);
    ck_assert_msg(w.ended_ms - t0 < 20000, "the read ended %lld ms after the close",
                  (long long)(w.ended_ms - t0));
    ck_assert_msg(w.rc == TALLY_unreachable || w.rc == TALLY_timed_out,
                  "a call cut by the close: %s", tally_strerror(w.rc));
    down(&f);
}
END_TEST

START_TEST(test_stats)
{
    fixture f;
    up(&f);
    tally_stats s;
    ck_assert_int_eq(tally_stats_get(f.c, &s), TALLY_ok);
    ck_assert_uint_eq(s.head_seq, 0);
    ck_assert_uint_eq(s.accounts, 0);
    open_three(f.c, 100);
    tally_entitlement_args g = ent("u", "f");
    tally_result r;
    ck_assert_int_eq(tally_grant(f.c, NULL, &g, &r), TALLY_ok);
    ck_assert_int_eq(tally_stats_get(f.c, &s), TALLY_ok);
    ck_assert_uint_eq(s.head_seq, 5);
    ck_assert_uint_eq(s.first_seq, 1);
    ck_assert_uint_eq(s.accounts, 3);
    ck_assert_uint_eq(s.transfers, 1);
    ck_assert_uint_eq(s.entitlements, 1);
    ck_assert_uint_eq(s.inbox, 5);
    ck_assert_uint_eq(s.events, 5);
    ck_assert_uint_gt(s.map_size_bytes, 0);
    ck_assert_uint_gt(s.map_used_bytes, 0);
    ck_assert_uint_le(s.map_used_bytes, s.map_size_bytes);
    down(&f);
}
END_TEST

/* The reply's "code" as a C string (replies here are small fixmaps). */
static void reply_code(const void *reply, size_t len, char *out, size_t cap)
{
    const uint8_t *p = reply;
    const uint8_t *end = p + len;
    out[0] = '\0';
    for (; p + 6 < end; p++) {
        if (memcmp(p, "\xa4" "code", 5) == 0 && (p[5] & 0xe0) == 0xa0) {
            size_t n = p[5] & 0x1f;
            if (n < cap && p + 6 + n <= end) {
                memcpy(out, p + 6, n);
                out[n] = '\0';
            }
            return;
        }
    }
}

START_TEST(test_request_raw)
{
    fixture f;
    up(&f);
    static const char stats[] = "\x82\xa1v\x01\xa2op\xa5stats";
    void *reply = NULL;
    size_t len = 0;
    char code[64];
    ck_assert_int_eq(tally_request_raw(f.c, stats, sizeof(stats) - 1, &reply, &len), TALLY_ok);
    reply_code(reply, len, code, sizeof(code));
    ck_assert_str_eq(code, "ok");
    ck_assert_ptr_nonnull(memmem(reply, len, "head_seq", 8));
    free(reply);
    /* Refusals come back as replies. */
    static const char junk[] = "\xc1";
    ck_assert_int_eq(tally_request_raw(f.c, junk, 1, &reply, &len), TALLY_ok);
    reply_code(reply, len, code, sizeof(code));
    ck_assert_str_eq(code, "malformed_request");
    free(reply);
    static const char unknown[] = "\x82\xa1v\x01\xa2op\xa4nope";
    ck_assert_int_eq(tally_request_raw(f.c, unknown, sizeof(unknown) - 1, &reply, &len),
                     TALLY_ok);
    reply_code(reply, len, code, sizeof(code));
    ck_assert_str_eq(code, "unknown_op");
    free(reply);
    /* A raw long poll waits longer than one timeout_ms. */
    tally_client *short_c = client_for(f.srv.url, SHORT_TIMEOUT_MS, 0);
    _Static_assert(LONGER_WAIT_MS == 0x1770, "the wait_ms of poll[]");
    static const char poll[] = "\x84\xa1v\x01\xa2op\xa8log_read\xa8"
                               "from_seq\x05\xa7wait_ms\xcd\x17\x70"; /* LONGER_WAIT_MS */
    int64_t t0 = clock_mono_ms();
    ck_assert_int_eq(tally_request_raw(short_c, poll, sizeof(poll) - 1, &reply, &len), TALLY_ok);
    ck_assert_int_ge(clock_mono_ms() - t0, LONGER_WAIT_MS - 100);
    reply_code(reply, len, code, sizeof(code));
    ck_assert_str_eq(code, "ok");
    free(reply);
    tally_client_close(short_c);
    ck_assert_int_eq(tally_request_raw(f.c, NULL, 1, &reply, &len), TALLY_invalid_argument);
    down(&f);
}
END_TEST

/* ---- idempotency under concurrency and failures ---- */

#define SAME_KEY_THREADS 16

typedef struct same_key_ctx {
    tally_client *c;
    pthread_barrier_t *start;
    int rc;
    tally_result r;
} same_key_ctx;

static void *send_same_key(void *arg)
{
    same_key_ctx *x = arg;
    tally_transfer_args t = transfer_args(77, USER, SHOP, 25);
    pthread_barrier_wait(x->start);
    x->rc = tally_transfer(x->c, "same-key", &t, &x->r);
    return NULL;
}

START_TEST(test_same_key_from_16_threads)
{
    fixture f;
    up(&f);
    open_three(f.c, 100);
    pthread_barrier_t start;
    pthread_barrier_init(&start, NULL, SAME_KEY_THREADS);
    same_key_ctx x[SAME_KEY_THREADS];
    pthread_t th[SAME_KEY_THREADS];
    for (int i = 0; i < SAME_KEY_THREADS; i++) {
        x[i] = (same_key_ctx){.c = f.c, .start = &start, .rc = -1};
        pthread_create(&th[i], NULL, send_same_key, &x[i]);
    }
    int fresh = 0, replayed = 0;
    for (int i = 0; i < SAME_KEY_THREADS; i++) {
        pthread_join(th[i], NULL);
        ck_assert_msg(x[i].rc == TALLY_ok, "thread %d: %s", i, tally_strerror(x[i].rc));
        ck_assert_str_eq(x[i].r.key, "same-key");
        if (x[i].r.replayed)
            replayed++;
        else
            fresh++;
        ck_assert_uint_eq(x[i].r.seq, x[0].r.seq);
    }
    pthread_barrier_destroy(&start);
    ck_assert_int_eq(fresh, 1);
    ck_assert_int_eq(replayed, SAME_KEY_THREADS - 1);
    ck_assert_int_eq(balance(f.c, USER), 75);
    ck_assert_int_eq(balance(f.c, SHOP), 25);
    down(&f);
}
END_TEST

/* After a delay, continue a stopped tallyd or start a stopped one. */
typedef struct later_ctx {
    tallyd_proc *srv;
    unsigned delay_ms;
    bool restart;
} later_ctx;

static void *revive_later(void *arg)
{
    later_ctx *l = arg;
    test_pause_ms(l->delay_ms); /* the test's input: back during the client's retries */
    if (l->restart)
        tallyd_restart(l->srv);
    else
        tallyd_thaw(l->srv);
    return NULL;
}

START_TEST(test_lost_reply_retried_with_same_key)
{
    fixture f;
    up(&f);
    open_three(f.c, 100);
    /* impatient, but not so that a loaded machine's NNG threads may miss
     * handing the request to the connection (unreachable, not timed_out) */
    tally_client *impatient = client_for(f.srv.url, 2000, 0);
    tally_stats s;
    ck_assert_int_eq(tally_stats_get(impatient, &s), TALLY_ok); /* connected */
    /* The server stops answering; the write times out, key reported. */
    tallyd_freeze(&f.srv);
    tally_result lost;
    int rc = transfer(impatient, NULL, 5, USER, SHOP, 40, &lost);
    tallyd_thaw(&f.srv);
    ck_assert_int_eq(rc, TALLY_timed_out);
    ck_assert_int_eq(lost.code, TALLY_timed_out);
    ck_assert_uint_eq(strlen(lost.key), 36);
    /* Retrying the reported key: applied exactly once. */
    tally_result again;
    ck_assert_int_eq(transfer(f.c, lost.key, 5, USER, SHOP, 40, &again), TALLY_ok);
    ck_assert_str_eq(again.key, lost.key);
    ck_assert_int_eq(transfer(f.c, lost.key, 5, USER, SHOP, 40, &again), TALLY_ok);
    ck_assert(again.replayed);
    ck_assert_int_eq(balance(f.c, USER), 60);
    ck_assert_int_eq(balance(f.c, SHOP), 40);
    tally_client_close(impatient);
    down(&f);
}
END_TEST

START_TEST(test_timeout_then_library_retry_applies_once)
{
    fixture f;
    up(&f);
    open_three(f.c, 100);
    /* Short attempts, several retries: the server is stopped during the
     * first attempts and continued later; the retries carry the same key. */
    tally_client *c = client_for(f.srv.url, 150, 20);
    tally_stats s;
    ck_assert_int_eq(tally_stats_get(c, &s), TALLY_ok);
    tallyd_freeze(&f.srv);
    later_ctx l = {&f.srv, 500, false};
    pthread_t th;
    pthread_create(&th, NULL, revive_later, &l);
    tally_result r;
    int rc = transfer(c, NULL, 6, USER, SHOP, 30, &r);
    pthread_join(th, NULL);
    ck_assert_msg(rc == TALLY_ok, "transfer: %s", tally_strerror(rc));
    ck_assert_int_eq(balance(f.c, USER), 70);
    tally_client_close(c);
    down(&f);
}
END_TEST

START_TEST(test_server_down_is_unreachable_quickly)
{
    fixture f;
    up(&f);
    ck_assert_int_eq(tallyd_stop(&f.srv), 0);
    tally_client *c = client_for(f.srv.url, 5000, 0);
    tally_result r;
    int64_t t0 = clock_mono_ms();
    int rc = transfer(c, NULL, 1, USER, SHOP, 1, &r);
    int64_t took = clock_mono_ms() - t0;
    ck_assert_int_eq(rc, TALLY_unreachable);
    ck_assert_int_eq(r.code, TALLY_unreachable);
    ck_assert_uint_eq(strlen(r.key), 36);
    ck_assert_msg(took < 5000, "unreachable after %lld ms: the 5 s timeout, not the refusal",
                  (long long)took);
    tally_stats s;
    ck_assert_int_eq(tally_stats_get(c, &s), TALLY_unreachable);
    tally_client_close(c);
    /* With retries too: still unreachable (never delivered). */
    c = client_for(f.srv.url, 300, 2);
    ck_assert_int_eq(tally_stats_get(c, &s), TALLY_unreachable);
    tally_client_close(c);
    /* The client connects once the server is back. */
    c = client_for(f.srv.url, 5000, 0);
    ck_assert_int_eq(tally_stats_get(c, &s), TALLY_unreachable);
    tallyd_restart(&f.srv);
    ck_assert_int_eq(tally_stats_get(c, &s), TALLY_ok);
    /* and again after a restart of the server. */
    ck_assert_int_eq(tallyd_stop(&f.srv), 0);
    tallyd_restart(&f.srv);
    ck_assert_int_eq(tally_stats_get(c, &s), TALLY_ok);
    tally_client_close(c);
    down(&f);
}
END_TEST

/* A URL list: the client moves on from a node it cannot reach to the
 * next, with the same request; lists that are not lists are refused. */
START_TEST(test_url_list_moves_to_the_next_node)
{
    fixture f;
    up(&f);
    tallyd_proc dead;
    memset(&dead, 0, sizeof(dead));
    tallyd_start(&dead);
    ck_assert_int_eq(tallyd_stop(&dead), 0);
    char list[2 * sizeof(f.srv.url) + 2];
    snprintf(list, sizeof(list), "%s,%s", dead.url, f.srv.url);
    tally_client *c = client_for(list, 5000, 3);
    open_account(c, 1, 0); /* node "dead" refused, the next one took it */
    open_account(c, 2, 0); /* and the next request too */
    tally_account a;
    ck_assert_int_eq(tally_account_get(f.c, 1, &a), TALLY_ok);
    ck_assert_int_eq(tally_account_get(f.c, 2, &a), TALLY_ok);
    /* a single-node tallyd has no cluster status */
    tally_cluster_status st;
    ck_assert_int_eq(tally_cluster_status_get(c, &st), TALLY_not_in_cluster_mode);
    tally_client_close(c);
    /* every URL of the list unreachable: unreachable */
    snprintf(list, sizeof(list), "%s,%s", dead.url, dead.url);
    c = client_for(list, 1000, 2);
    tally_stats s;
    ck_assert_int_eq(tally_stats_get(c, &s), TALLY_unreachable);
    tally_client_close(c);
    static const char *const bad[] = {"tcp://127.0.0.1:1,", ",tcp://127.0.0.1:1",
                                      "tcp://127.0.0.1:1,,tcp://127.0.0.1:2"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        tally_client_options o = {.url = bad[i]};
        c = NULL;
        ck_assert_int_eq(tally_client_open(&o, &c), TALLY_invalid_argument);
        ck_assert_ptr_null(c);
    }
    char many[TALLY_CLIENT_URLS_MAX * 32] = "";
    for (int i = 0; i <= TALLY_CLIENT_URLS_MAX; i++) /* one too many */
        snprintf(many + strlen(many), sizeof(many) - strlen(many), "%stcp://127.0.0.1:%d",
                 i ? "," : "", 1000 + i);
    tally_client_options o = {.url = many};
    c = NULL;
    ck_assert_int_eq(tally_client_open(&o, &c), TALLY_invalid_argument);
    tallyd_cleanup(&dead);
    down(&f);
}
END_TEST

START_TEST(test_retries_wait_for_server)
{
    fixture f;
    up(&f);
    open_three(f.c, 100);
    ck_assert_int_eq(tallyd_stop(&f.srv), 0);
    /* The server comes back while the library retries. */
    tally_client *c = client_for(f.srv.url, 300, 8);
    later_ctx l = {&f.srv, 600, true};
    pthread_t th;
    pthread_create(&th, NULL, revive_later, &l);
    tally_result r;
    int rc = transfer(c, NULL, 8, USER, SHOP, 10, &r);
    pthread_join(th, NULL);
    ck_assert_msg(rc == TALLY_ok, "transfer: %s", tally_strerror(rc));
    tally_account a;
    ck_assert_int_eq(tally_account_get(c, SHOP, &a), TALLY_ok);
    ck_assert_int_eq(a.credits_posted, 10);
    tally_client_close(c);
    down(&f);
}
END_TEST

/* Calls while the handshakes are cut: on tcp:// libtally connects only for
 * a call (clients/transport/sp_direct.c), NNG's dialer on its own. */
typedef struct calling {
    tally_client *c;
    atomic_bool stop;
} calling;

static void *call_until_stopped(void *arg)
{
    calling *k = arg;
    tally_stats s;
    while (!atomic_load(&k->stop))
        if (tally_stats_get(k->c, &s) != TALLY_ok)
            test_pause_ms(20); /* a client's pause before it retries */
    return NULL;
}

/* A server that dies during the SP handshake stops an NNG 1.5.2 dialer for
 * good (nanomsg/nng#1518); the client must still reconnect once tallyd is
 * back (libtally replaces a dialer that has had no connection for 2 s; on
 * tcp:// each call makes its own connection). */
START_TEST(test_reconnects_after_a_handshake_cut_short)
{
    fixture f;
    up(&f);
    ck_assert_int_eq(tallyd_stop(&f.srv), 0);
    tally_client *c = client_for(f.srv.url, 1000, 0);
    calling k = {.c = c};
    pthread_t th;
    pthread_create(&th, NULL, call_until_stopped, &k);
    /* as many as come in 3 s: the dialer retries every 20-500 ms while it
     * lives; not every cut handshake stops it */
    int cut = tallyd_hang_up_handshakes(f.srv.url, 1000, 3000);
    atomic_store(&k.stop, true);
    pthread_join(th, NULL);
    ck_assert_int_ge(cut, 1);
    tallyd_restart(&f.srv);
    tally_stats s;
    int rc = TALLY_unreachable;
    for (int64_t until = test_deadline_ms(30000); rc != TALLY_ok && clock_mono_ms() < until;)
        rc = tally_stats_get(c, &s);
    ck_assert_msg(rc == TALLY_ok, "no answer from the restarted tallyd: %s", tally_strerror(rc));
    tally_client_close(c);
    down(&f);
}
END_TEST

/* ---- retries on server replies, against a scripted fake server ---- */

#define FAKE_REPLIES_MAX 4
#define FAKE_REQUEST_BYTES_MAX 2048

/* A rep0 socket in a thread that answers request i with reply i (the last
 * one repeated) and records whether every request had the same bytes. */
typedef struct fake_server {
    char dir[256];
    char url[300];
    nng_socket sock;
    msgpack_sbuffer replies[FAKE_REPLIES_MAX];
    int reply_count;
    int received;
    bool all_same;
    uint8_t first[FAKE_REQUEST_BYTES_MAX];
    size_t first_len;
    volatile bool stop;
    pthread_t thread;
} fake_server;

/* Script a reply {v: 1, code, ...}; write_fields adds a write result. */
static void fake_reply(fake_server *fs, const char *code, bool write_fields)
{
    ck_assert_int_lt(fs->reply_count, FAKE_REPLIES_MAX);
    msgpack_sbuffer *b = &fs->replies[fs->reply_count++];
    msgpack_sbuffer_init(b);
    msgpack_packer pk;
    msgpack_packer_init(&pk, b, msgpack_sbuffer_write);
    msgpack_pack_map(&pk, write_fields ? 6 : 2);
    msgpack_pack_str_with_body(&pk, "v", 1);
    msgpack_pack_uint8(&pk, 1);
    msgpack_pack_str_with_body(&pk, "code", 4);
    msgpack_pack_str_with_body(&pk, code, strlen(code));
    if (!write_fields)
        return;
    msgpack_pack_str_with_body(&pk, "replayed", 8);
    msgpack_pack_false(&pk);
    msgpack_pack_str_with_body(&pk, "seq", 3);
    msgpack_pack_uint8(&pk, 7);
    msgpack_pack_str_with_body(&pk, "events", 6);
    msgpack_pack_uint8(&pk, 1);
    msgpack_pack_str_with_body(&pk, "key", 3);
    msgpack_pack_str_with_body(&pk, "k", 1);
}

static void fake_record(fake_server *fs, const void *bytes, size_t len)
{
    if (fs->received++ == 0) {
        fs->first_len = len < FAKE_REQUEST_BYTES_MAX ? len : FAKE_REQUEST_BYTES_MAX;
        memcpy(fs->first, bytes, fs->first_len);
        fs->all_same = len == fs->first_len;
    } else if (len != fs->first_len || memcmp(bytes, fs->first, len) != 0) {
        fs->all_same = false;
    }
}

static void *fake_main(void *arg)
{
    fake_server *fs = arg;
    while (!fs->stop) {
        void *buf;
        size_t len;
        if (nng_recv(fs->sock, &buf, &len, NNG_FLAG_ALLOC) != 0)
            continue; /* receive timeout: look at stop again */
        fake_record(fs, buf, len);
        nng_free(buf, len);
        int i = fs->received - 1 < fs->reply_count ? fs->received - 1 : fs->reply_count - 1;
        nng_send(fs->sock, fs->replies[i].data, fs->replies[i].size, 0);
    }
    return NULL;
}

static void fake_start(fake_server *fs)
{
    const char *tmp = getenv("TMPDIR");
    snprintf(fs->dir, sizeof(fs->dir), "%s/tally-fake-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    ck_assert_ptr_nonnull(mkdtemp(fs->dir));
    snprintf(fs->url, sizeof(fs->url), "ipc://%s/req.sock", fs->dir);
    ck_assert_int_eq(nng_rep0_open(&fs->sock), 0);
    ck_assert_int_eq(nng_socket_set_ms(fs->sock, NNG_OPT_RECVTIMEO, 50), 0);
    ck_assert_int_eq(nng_listen(fs->sock, fs->url, NULL, 0), 0);
    pthread_create(&fs->thread, NULL, fake_main, fs);
}

static void fake_stop(fake_server *fs)
{
    fs->stop = true;
    pthread_join(fs->thread, NULL);
    nng_close(fs->sock);
    for (int i = 0; i < fs->reply_count; i++)
        msgpack_sbuffer_destroy(&fs->replies[i]);
    char path[300];
    snprintf(path, sizeof(path), "%s/req.sock", fs->dir);
    unlink(path);
    rmdir(fs->dir);
}

START_TEST(test_retries_overloaded_and_shutting_down_with_same_bytes)
{
    fake_server fs = {.reply_count = 0};
    fake_reply(&fs, "overloaded", false);
    fake_reply(&fs, "shutting_down", false);
    fake_reply(&fs, "ok", true);
    fake_start(&fs);
    tally_client *c = client_for(fs.url, 2000, 3);
    tally_account_open_args a = {.id = 1, .ledger = 1, .code = 1};
    tally_result r;
    ck_assert_int_eq(tally_account_open(c, NULL, &a, &r), TALLY_ok);
    ck_assert_uint_eq(r.seq, 7);
    ck_assert_uint_eq(r.events, 1);
    ck_assert_uint_eq(strlen(r.key), 36); /* our key, whatever the reply says */
    tally_client_close(c);
    fake_stop(&fs);
    ck_assert_int_eq(fs.received, 3);
    ck_assert(fs.all_same);
    ck_assert_ptr_nonnull(memmem(fs.first, fs.first_len, r.key, strlen(r.key)));
}
END_TEST

START_TEST(test_retries_run_out)
{
    fake_server fs = {.reply_count = 0};
    fake_reply(&fs, "overloaded", false);
    fake_start(&fs);
    tally_client *c = client_for(fs.url, 2000, 2);
    tally_account_open_args a = {.id = 1, .ledger = 1, .code = 1};
    tally_result r;
    ck_assert_int_eq(tally_account_open(c, "k", &a, &r), TALLY_overloaded);
    ck_assert_int_eq(r.code, TALLY_overloaded);
    tally_client_close(c);
    fake_stop(&fs);
    ck_assert_int_eq(fs.received, 3);
    ck_assert(fs.all_same);
}
END_TEST

START_TEST(test_bad_replies_are_internal)
{
    fake_server fs = {.reply_count = 0};
    fake_reply(&fs, "no_such_code", true); /* a code this library does not know */
    fake_reply(&fs, "ok", false);          /* a read reply without its object */
    fake_start(&fs);
    tally_client *c = client_for(fs.url, 2000, 3);
    tally_account_open_args a = {.id = 1, .ledger = 1, .code = 1};
    tally_result r;
    ck_assert_int_eq(tally_account_open(c, NULL, &a, &r), TALLY_internal);
    tally_account acc;
    ck_assert_int_eq(tally_account_get(c, 1, &acc), TALLY_internal);
    tally_stats st;
    ck_assert_int_eq(tally_stats_get(c, &st), TALLY_internal);
    tally_client_close(c);
    fake_stop(&fs);
    ck_assert_int_eq(fs.received, 3); /* none of them retried */
}
END_TEST

/* ---- keys and ids ---- */

START_TEST(test_generated_keys_are_fresh_uuidv7)
{
    fixture f;
    up(&f);
    char keys[3][TALLY_CLIENT_KEY_BYTES_MAX + 1];
    int64_t before = clock_wall_ms();
    for (int i = 0; i < 3; i++) {
        tally_result r = open_account(f.c, 10 + (uint64_t)i, 0);
        memcpy(keys[i], r.key, sizeof(keys[i]));
        ck_assert_uint_eq(strlen(r.key), 36);
        ck_assert(r.key[8] == '-' && r.key[13] == '-' && r.key[18] == '-' && r.key[23] == '-');
        tally_uuid id;
        ck_assert_int_eq(tally_uuid_parse(r.key, &id), TALLY_ok);
        ck_assert_int_eq(id.bytes[6] >> 4, 7);
        ck_assert_int_eq(id.bytes[8] & 0xc0, 0x80);
        int64_t ms = 0;
        for (int b = 0; b < 6; b++)
            ms = (ms << 8) | id.bytes[b];
        ck_assert_int_ge(ms, before - 1000);
        ck_assert_int_le(ms, clock_wall_ms() + 1000);
        char text[37];
        tally_uuid_format(&id, text);
        ck_assert_str_eq(text, r.key);
    }
    ck_assert_str_ne(keys[0], keys[1]);
    ck_assert_str_ne(keys[1], keys[2]);
    ck_assert_str_ne(keys[0], keys[2]);
    down(&f);
}
END_TEST

START_TEST(test_uuid_text)
{
    tally_uuid a, b;
    ck_assert_int_eq(tally_uuid_v7(&a), TALLY_ok);
    ck_assert_int_eq(tally_uuid_v7(&b), TALLY_ok);
    ck_assert(memcmp(a.bytes, b.bytes, 16) != 0);
    char text[37];
    tally_uuid_format(&a, text);
    ck_assert_int_eq(tally_uuid_parse(text, &b), TALLY_ok);
    ck_assert_mem_eq(a.bytes, b.bytes, 16);
    ck_assert_int_eq(tally_uuid_parse("0123456789abcdefFEDCBA9876543210", &b), TALLY_ok);
    tally_uuid_format(&b, text);
    ck_assert_str_eq(text, "01234567-89ab-cdef-fedc-ba9876543210");
    ck_assert_int_eq(tally_uuid_parse("0123", &b), TALLY_invalid_argument);
    ck_assert_int_eq(tally_uuid_parse("0123456789abcdefFEDCBA987654321g", &b),
                     TALLY_invalid_argument);
    ck_assert_int_eq(tally_uuid_parse("0123456789abcdefFEDCBA98765432100", &b),
                     TALLY_invalid_argument);
    ck_assert_int_eq(tally_uuid_parse(NULL, &b), TALLY_invalid_argument);
    ck_assert_int_eq(tally_uuid_v7(NULL), TALLY_invalid_argument);
}
END_TEST

START_TEST(test_uuid_from_key)
{
    tally_uuid a, b, c, d;
    tally_uuid_from_key("shop", "order-42", &a);
    tally_uuid_from_key("shop", "order-42", &b);
    ck_assert_mem_eq(a.bytes, b.bytes, 16);
    /* SHA-256("tally.transfer-id.v1" "shop" 0x00 "order-42")[0..16). */
    char text[37];
    tally_uuid_format(&a, text);
    ck_assert_str_eq(text, "695b3d04-bdd4-6cc9-90e5-e3511342e2f4");
    tally_uuid_from_key("billing", "order-42", &c);
    ck_assert(memcmp(a.bytes, c.bytes, 16) != 0);
    tally_uuid_from_key("shop", "order-43", &d);
    ck_assert(memcmp(a.bytes, d.bytes, 16) != 0);
    /* The separator keeps ("ab","c") and ("a","bc") apart. */
    tally_uuid_from_key("ab", "c", &c);
    tally_uuid_from_key("a", "bc", &d);
    ck_assert(memcmp(c.bytes, d.bytes, 16) != 0);
}
END_TEST

/* A UUIDv7 key gives a time-ordered id: the key's 48-bit time, then the
 * digest's bits (version 7, variant 10); other keys keep the plain digest. */
START_TEST(test_uuid_from_key_time_ordered)
{
    tally_uuid a, b, c;
    char text[37];
    tally_uuid_from_key("shop", "0190a5e2-7c3b-7def-8123-456789abcdef", &a);
    tally_uuid_format(&a, text);
    /* SHA-256(...) = 8a6dd2658612 31fe 44d1 c88f100a49c2 */
    ck_assert_str_eq(text, "0190a5e2-7c3b-71fe-84d1-c88f100a49c2");
    tally_uuid_from_key("shop", "0190a5e27c3b7def8123456789abcdef", &b); /* no dashes */
    ck_assert(memcmp(b.bytes + 6, a.bytes + 6, 10) != 0); /* another key text, another digest */
    ck_assert_mem_eq(b.bytes, a.bytes, 6);
    tally_uuid_from_key("billing", "0190a5e2-7c3b-7def-8123-456789abcdef", &c);
    ck_assert_mem_eq(c.bytes, a.bytes, 6);
    ck_assert(memcmp(c.bytes, a.bytes, 16) != 0); /* the consumer still counts */
    /* Keys generated later give ids that sort later. */
    tally_uuid k1, k2;
    char t1[37], t2[37];
    ck_assert_int_eq(tally_uuid_v7(&k1), TALLY_ok);
    int64_t k1_by_ms = clock_wall_ms(); /* k1's time is at most this */
    TEST_WAIT_UNTIL(clock_wall_ms() > k1_by_ms, 10000, "the wall clock past %lld",
                    (long long)k1_by_ms);
    ck_assert_int_eq(tally_uuid_v7(&k2), TALLY_ok);
    tally_uuid_format(&k1, t1);
    tally_uuid_format(&k2, t2);
    tally_uuid_from_key("shop", t1, &a);
    tally_uuid_from_key("shop", t2, &b);
    ck_assert(memcmp(a.bytes, b.bytes, 16) < 0);
    ck_assert_uint_eq(a.bytes[6] >> 4, 7);
    ck_assert_uint_eq(a.bytes[8] >> 6, 2);
    /* Not a UUIDv7 (a v4, or not 32 hex digits): the plain digest. */
    tally_uuid_from_key("shop", "0190a5e2-7c3b-4def-8123-456789abcdef", &a);
    tally_uuid_format(&a, text);
    ck_assert(strncmp(text, "0190a5e2", 8) != 0);
    tally_uuid_from_key("shop", "0190a5e2-7c3b-7def-8123-456789abcde", &a);
    tally_uuid_format(&a, text);
    ck_assert(strncmp(text, "0190a5e2", 8) != 0);
}
END_TEST

/* ---- arguments and options ---- */

START_TEST(test_invalid_arguments)
{
    tally_client *c = NULL;
    tally_client_options o = {.url = "ipc:///nonexistent/x.sock", .consumer = ""};
    ck_assert_int_eq(tally_client_open(&o, &c), TALLY_invalid_argument);
    char long_consumer[66];
    memset(long_consumer, 'c', 65);
    long_consumer[65] = '\0';
    o.consumer = long_consumer;
    ck_assert_int_eq(tally_client_open(&o, &c), TALLY_invalid_argument);
    o.consumer = "ok";
    o.url = "nosuchscheme://x";
    ck_assert_int_eq(tally_client_open(&o, &c), TALLY_invalid_argument);
    ck_assert_ptr_null(c);
    ck_assert_int_eq(tally_client_open(&o, NULL), TALLY_invalid_argument);
    o.url = "ipc:///nonexistent/x.sock";
    ck_assert_int_eq(tally_client_open(&o, &c), TALLY_ok);
    tally_result r;
    char long_key[TALLY_CLIENT_KEY_BYTES_MAX + 2];
    memset(long_key, 'k', sizeof(long_key) - 1);
    long_key[sizeof(long_key) - 1] = '\0';
    tally_account_open_args a = {.id = 1, .ledger = 1, .code = 1};
    ck_assert_int_eq(tally_account_open(c, long_key, &a, &r), TALLY_invalid_argument);
    ck_assert_int_eq(tally_account_open(c, "", &a, &r), TALLY_invalid_argument);
    ck_assert_int_eq(tally_account_open(c, NULL, NULL, &r), TALLY_invalid_argument);
    ck_assert_uint_eq(strlen(r.key), 36); /* the key is reported anyway */
    ck_assert_int_eq(tally_account_open(c, NULL, &a, NULL), TALLY_invalid_argument);
    ck_assert_int_eq(tally_account_open(NULL, NULL, &a, &r), TALLY_invalid_argument);
    ck_assert_int_eq(tally_post(c, NULL, NULL, 0, &r), TALLY_invalid_argument);
    tally_entitlement_args e = {.subject = "s"};
    ck_assert_int_eq(tally_grant(c, NULL, &e, &r), TALLY_invalid_argument);
    tally_account acc;
    ck_assert_int_eq(tally_account_get(c, 1, NULL), TALLY_invalid_argument);
    ck_assert_int_eq(tally_account_get(NULL, 1, &acc), TALLY_invalid_argument);
    size_t n;
    uint64_t next;
    tally_history_entry h[1];
    ck_assert_int_eq(tally_account_history(c, 1, 0, 1, false, h, 0, &n, &next),
                     TALLY_invalid_argument);
    ck_assert_int_eq(tally_batch_account_open(NULL, NULL, &a), TALLY_invalid_argument);
    tally_batch *b = tally_batch_new(false);
    ck_assert_int_eq(tally_batch_account_open(b, long_key, &a), TALLY_invalid_argument);
    ck_assert_uint_eq(tally_batch_count(b), 0);
    tally_batch_free(b);
    tally_batch_free(NULL);
    tally_client_close(c);
    tally_client_close(NULL);
}
END_TEST

START_TEST(test_options_from_environment)
{
    fixture f;
    up(&f);
    setenv("TALLY_URL", f.srv.url, 1);
    setenv("TALLY_CONSUMER", "from-env", 1);
    tally_client *c = NULL;
    ck_assert_int_eq(tally_client_open(NULL, &c), TALLY_ok);
    tally_result r;
    tally_account_open_args a = {.id = 1, .ledger = 1, .code = 1};
    ck_assert_int_eq(tally_account_open(c, "env-key", &a, &r), TALLY_ok);
    tally_event ev[1];
    size_t n;
    uint64_t head;
    ck_assert_int_eq(tally_log_read(c, 1, 1, 0, ev, 1, &n, &head), TALLY_ok);
    ck_assert_uint_eq(n, 1);
    ck_assert_str_eq(ev[0].consumer, "from-env");
    ck_assert_str_eq(ev[0].key, "env-key");
    tally_events_release(ev, n);
    tally_client_close(c);
    down(&f);
}
END_TEST

/* ---- thread safety ---- */

#define WORKERS 8
#define TRANSFERS_PER_WORKER 200

typedef struct worker_ctx {
    tally_client *c;
    int index;
    int failures;
    int first_failure;
} worker_ctx;

static void *worker(void *arg)
{
    worker_ctx *w = arg;
    for (int i = 0; i < TRANSFERS_PER_WORKER; i++) {
        tally_result r;
        uint64_t tid = 100000 + (uint64_t)w->index * 1000 + (uint64_t)i;
        int rc = transfer(w->c, NULL, tid, BANK, 10 + (uint64_t)w->index, i + 1, &r);
        if (rc != TALLY_ok && w->failures++ == 0)
            w->first_failure = rc;
    }
    return NULL;
}

START_TEST(test_threads_share_one_client)
{
    fixture f;
    up(&f);
    open_account(f.c, BANK, 0);
    for (int i = 0; i < WORKERS; i++)
        open_account(f.c, 10 + (uint64_t)i, 0);
    worker_ctx w[WORKERS];
    pthread_t th[WORKERS];
    for (int i = 0; i < WORKERS; i++) {
        w[i] = (worker_ctx){.c = f.c, .index = i};
        pthread_create(&th[i], NULL, worker, &w[i]);
    }
    for (int i = 0; i < WORKERS; i++)
        pthread_join(th[i], NULL);
    int64_t per_account = (int64_t)TRANSFERS_PER_WORKER * (TRANSFERS_PER_WORKER + 1) / 2;
    for (int i = 0; i < WORKERS; i++) {
        ck_assert_msg(w[i].failures == 0, "worker %d: %d failures, first %s", i, w[i].failures,
                      tally_strerror(w[i].first_failure));
        ck_assert_int_eq(balance(f.c, 10 + (uint64_t)i), per_account);
    }
    ck_assert_int_eq(balance(f.c, BANK), -per_account * WORKERS);
    tally_stats s;
    ck_assert_int_eq(tally_stats_get(f.c, &s), TALLY_ok);
    ck_assert_uint_eq(s.transfers, WORKERS * TRANSFERS_PER_WORKER);
    down(&f);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("libtally");
    TCase *tc = tcase_create("libtally");
    tcase_set_timeout(tc, TEST_TIMEOUT_S);
    tcase_add_test(tc, test_account_open_and_get);
    tcase_add_test(tc, test_transfer_and_get);
    tcase_add_test(tc, test_hold_post_void);
    tcase_add_test(tc, test_entitlement_lifetime);
    tcase_add_test(tc, test_entitlement_timed);
    tcase_add_test(tc, test_entitlement_list);
    tcase_add_test(tc, test_chain_applies_all);
    tcase_add_test(tc, test_chain_failure_codes);
    tcase_add_test(tc, test_batch);
    tcase_add_test(tc, test_batch_full_size);
    tcase_add_test(tc, test_account_history_paging);
    tcase_add_test(tc, test_account_list_paging);
    tcase_add_test(tc, test_log_read);
    tcase_add_test(tc, test_log_read_long_poll);
    tcase_add_test(tc, test_stats);
    tcase_add_test(tc, test_request_raw);
    tcase_add_test(tc, test_same_key_from_16_threads);
    tcase_add_test(tc, test_lost_reply_retried_with_same_key);
    tcase_add_test(tc, test_timeout_then_library_retry_applies_once);
    tcase_add_test(tc, test_server_down_is_unreachable_quickly);
    tcase_add_test(tc, test_url_list_moves_to_the_next_node);
    tcase_add_test(tc, test_retries_wait_for_server);
    tcase_add_test(tc, test_reconnects_after_a_handshake_cut_short);
    tcase_add_test(tc, test_retries_overloaded_and_shutting_down_with_same_bytes);
    tcase_add_test(tc, test_retries_run_out);
    tcase_add_test(tc, test_bad_replies_are_internal);
    tcase_add_test(tc, test_generated_keys_are_fresh_uuidv7);
    tcase_add_test(tc, test_uuid_text);
    tcase_add_test(tc, test_uuid_from_key);
    tcase_add_test(tc, test_uuid_from_key_time_ordered);
    tcase_add_test(tc, test_invalid_arguments);
    tcase_add_test(tc, test_options_from_environment);
    tcase_add_test(tc, test_threads_share_one_client);
    tcase_add_test(tc, test_close_ends_a_call_in_flight);
    suite_add_tcase(s, tc);
    return test_run_suite(s);
}
