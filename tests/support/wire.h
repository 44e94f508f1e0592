/*
 * wire.h — requests to a real tallyd for tests that speak the protocol's
 * maps directly (through libtally's raw call, so retries behave as in
 * production), and reply accessors that fail the test on a wrong shape.
 */
#ifndef TALLY_TESTS_WIRE_H
#define TALLY_TESTS_WIRE_H

#include "clients/libtally/tally.h"
#include "tests/support/tallyd_harness.h"

#include <msgpack.h>
#include <stdint.h>

typedef struct wire_reply {
    void *bytes;
    size_t len;
    msgpack_unpacked up;
    const msgpack_object *map;
    char code[64];
} wire_reply;

/* Send {"v":1, "op":op, ...} with fields from fmt, one letter each, every
 * field given as its name and then its value: s string, u uint64_t, i
 * int64_t, b bool (int), x bin of 16 bytes (const uint8_t *), U array of uint64_t (unsigned count, then const
 * uint64_t *). Fails the test when no reply arrives or it is not a map
 * with a code. Free with wire_done. */
void wire_call(tally_client *c, wire_reply *r, const char *op, const char *fmt, ...);
/* The same, but when no reply arrives its code (libtally's: timed_out,
 * unreachable, ...) is returned instead of failing the test; only after
 * TALLY_ok is r filled (free it with wire_done). */
int wire_try_call(tally_client *c, wire_reply *r, const char *op, const char *fmt, ...);
void wire_done(wire_reply *r);

/* A field that must exist; a uint field; the code must be this. */
const msgpack_object *wire_field(const msgpack_object *m, const char *key);
uint64_t wire_u64(const msgpack_object *m, const char *key);
void wire_expect(wire_reply *r, const char *code);

/* Start a fresh tallyd (extra_args: NULL or up to 7 more options,
 * NULL-terminated) and open a client on it (60 s per attempt). */
void wire_server_start(tallyd_proc *p, tally_client **c, const char *const *extra_args);

/* Start tallyd again on p's store (after wire_server_stop) with
 * extra_args in place of the options it had, and open a client on it: for
 * a test that needs another setting for part of its run. */
void wire_server_restart(tallyd_proc *p, tally_client **c, const char *const *extra_args);

/* Close the client, SIGTERM tallyd (must exit 0), check the store's
 * invariants. The temp dir stays until tallyd_cleanup. */
void wire_server_stop(tallyd_proc *p, tally_client **c);

/* Open the store of a stopped tallyd read-only and fail on any finding of
 * ledger_invariants_check (printed to stderr). */
void wire_assert_invariants(const char *data_dir);

#endif
