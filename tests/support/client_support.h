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

#include <pthread.h>
#include <stdatomic.h>
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

/* A thread that opens accounts first_id, first_id + 1, ... one request
 * each, until stopped: replies and PUB messages keep arriving while a test
 * opens and closes its sockets. Set client and first_id, then start. */
typedef struct test_client_writer {
    tally_client *client;
    uint64_t first_id;
    atomic_bool stop;
    uint64_t written; /* accounts opened (ok) */
    pthread_t thread;
} test_client_writer;

void test_client_writer_start(test_client_writer *w);
/* Stop the thread and join it; returns w->written. */
uint64_t test_client_writer_stop(test_client_writer *w);

/* Open a stream of c on pub_url from now, read until an event came over
 * PUB (the connection is up and busy), and close it with events still
 * arriving (a writer runs); returns how many came over PUB. */
uint64_t test_client_stream_cycle(tally_client *c, const char *pub_url);

#endif
