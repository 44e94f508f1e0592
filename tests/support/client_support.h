/*
 * client_support.h — helpers for the suites that drive a real tallyd through
 * libtally (tests/clients/): a server with a client, events written in
 * bulk, the head.
 * Each fails the Check test when the server does not do what it must.
 */
#ifndef TALLY_CLIENT_SUPPORT_H
#define TALLY_CLIENT_SUPPORT_H

#include "clients/libtally/tally.h"
#include "tests/support/tallyd_harness.h"

#include <stdint.h>

/* Accounts opened per batch request by test_client_open_accounts. */
#define TEST_CLIENT_BATCH_OPS 100

/* A tallyd of its own (tests/support/tallyd_harness.h) and a client of it. */
typedef struct test_client_fixture {
    tallyd_proc srv;
    tally_client *c;
} test_client_fixture;

/* Start tallyd and open the client; stop both and remove the directory. */
void test_client_up(test_client_fixture *f);
void test_client_down(test_client_fixture *f);

/* A client of url (consumer "test", 10 s per attempt, 3 retries). */
tally_client *test_client_open(const char *url);
/* Open accounts first_id .. first_id + n - 1 (ledger 1, code 1), in batches
 * of TEST_CLIENT_BATCH_OPS: n account.opened events, a batch per commit. */
void test_client_open_accounts(tally_client *c, uint64_t first_id, uint64_t n);
/* The log's head seq. */
uint64_t test_client_head(tally_client *c);

#endif
