/*
 * fuzz.h — tally's fuzz targets (docs/TESTING.md, "Fuzzing").
 *
 * Each target is a plain function over one input, so the same code runs
 * under libFuzzer (tests/fuzz/fuzz.sh builds it with clang and
 * -fsanitize=fuzzer,address,undefined; each target file then defines
 * LLVMFuzzerTestOneInput) and under `make check`, where
 * tests/fuzz/check_fuzz_regressions replays the committed regression
 * inputs and the generated seeds through the gcc build (FUZZ_NO_ENTRY).
 *
 * A target returns 0. A crash, a sanitizer report or fuzz_fail (an oracle:
 * a property that must hold for every input) is a finding.
 */
#ifndef TALLY_FUZZ_H
#define TALLY_FUZZ_H

#include "log/store.h"

#include <stddef.h>
#include <stdint.h>

/* A request as tallyd gets it: decode, validate, apply on a small store in
 * a transaction that is aborted, pack the reply. */
int fuzz_request_one(const uint8_t *data, size_t size);
/* Stored bytes: an event (log_event_decode, bodies, the client's event
 * decoder) and the record decoders of the store. */
int fuzz_event_one(const uint8_t *data, size_t size);
/* A reply as libtally gets it. */
int fuzz_reply_one(const uint8_t *data, size_t size);
/* A JSON API request ("OP\n" and the body): packed by the op table's
 * types, decoded; the input also through the reply walk. */
int fuzz_json_one(const uint8_t *data, size_t size);
/* Webhook intake: a sources file parsed from memory, or a delivery
 * (headers and body) verified by one of four sources, as it is or signed
 * correctly by the target first (fuzz_webhook.c says the layout). */
int fuzz_webhook_one(const uint8_t *data, size_t size);

/* tallyd's --auth file (net/auth/auth.c): parsed, then asked about a token. */
int fuzz_auth_one(const uint8_t *data, size_t size);

/* libtally's decoders (fuzz_client.c compiles clients/libtally/libtally.c in).
 * */
void fuzz_client_reply(const uint8_t *data, size_t size);
void fuzz_client_event(const uint8_t *data, size_t size);

/* Report a broken property and abort (a finding). */
_Noreturn void fuzz_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* The commit time of the fuzz stores: 2026-01-01T00:00:00Z. */
#define FUZZ_NOW_MS INT64_C(1767225600000)

/* A store in a new temporary directory (removed at exit). NULL on failure,
 * with the reason on stderr. */
store *fuzz_store_create(void);
/* The setup of docs/PROTOCOL.md's bad-input table: accounts 1 and 2 on
 * ledger 1, account 3 on ledger 2, hold 0x0a of 100 from 1 to 2, alice's
 * pro for life. With full: every kind of event as well (transfers, a
 * partial post, a void, expiries of a hold and an entitlement, extend,
 * revoke, a chain). Returns 0, or -1 with the reason on stderr. */
int fuzz_store_scenario(store *st, int full);

/* Seeds: calls fn for each generated input of each target ("request",
 * "event", "reply", "json", "webhook"): the hex examples and the bad-input rows of
 * docs/PROTOCOL.md (found via $TALLY_DOCS or docs/), the events of the full
 * scenario, replies packed by the server's reply code, the bodies of
 * the JSON examples, and sources files and deliveries of each scheme. Returns the
 * count, or -1 with the reason on stderr. */
typedef void (*fuzz_seed_fn)(const char *target, const char *name, const uint8_t *data,
                             size_t size, void *ctx);
long fuzz_seeds_each(fuzz_seed_fn fn, void *ctx);

#ifndef FUZZ_NO_ENTRY
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
#endif

#endif
