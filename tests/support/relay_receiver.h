/*
 * relay_receiver.h — the HTTP receiver of tally-relay's tests
 * (tests/relay/check_relay.c, tests/cluster/check_cluster_relay.c): a
 * thread on a loopback port of the kernel's (plain sockets, one connection
 * at a time) that records every delivery, verifies its Standard Webhooks
 * signature with mbedTLS (not the relay's OpenSSL) against the test
 * secrets below, and answers by the path:
 *
 *   /ok 204; /dead 500; /toggle 500 while toggle_fails, else 200;
 *   /flaky 503 to the first 2 attempts of every 3rd event (seq % 3 == 0),
 *   else 200; /slow 200 after RECEIVER_SLOW_POST_MS; any other 200.
 */
#ifndef TALLY_TESTS_RELAY_RECEIVER_H
#define TALLY_TESTS_RELAY_RECEIVER_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The endpoint secret of the tests' relay configs (base64), and the two
 * a rotation gives (check_relay's test_http_secret_rotation_signs_with_both). */
#define RECEIVER_SECRET_B64 "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
#define RECEIVER_SECRET2_B64 "c2Vjb25kLXNlY3JldC1mb3ItdGhlLXRlc3RzLTEyMzQ="
#define RECEIVER_SECRET3_B64 "dGhpcmQtc2VjcmV0LWZvci10aGUtdGVzdHMtNTY3ODk="
#define RECEIVER_HOOKS_MAX 8192
#define RECEIVER_SLOW_POST_MS 30
#define RECEIVER_REQUEST_BYTES_MAX 131072

typedef struct hook {
    char path[16];
    char id[40];
    uint64_t seq;
    char type[32];
    int status;
    bool signature_ok;    /* a signature verifies with one of the keys */
    unsigned keys_ok;     /* bit i: one verifies with the i-th of SECRET, SECRET2, SECRET3 */
    unsigned signatures;  /* how many the header has */
} hook;

typedef struct receiver {
    int fd;
    uint16_t port;
    pthread_t thread;
    atomic_bool stop;
    pthread_mutex_t mu;
    hook hooks[RECEIVER_HOOKS_MAX];
    size_t count;
    atomic_bool toggle_fails; /* /toggle answers 500 while set, else 200 */
} receiver;

/* Start one (fails the Check test when it cannot). */
receiver *receiver_start(void);
void receiver_stop(receiver *r);
/* Distinct ids answered 2xx at path; *all (if not NULL) every delivery to
 * path. */
size_t receiver_delivered(receiver *r, const char *path, size_t *all);
/* How many deliveries of id to path came before (call under r->mu). */
int receiver_attempts_before(const receiver *r, const char *path, const char *id);

#endif
