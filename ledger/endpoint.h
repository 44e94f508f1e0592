/*
 * endpoint.h — the outbound webhook endpoints of tally-relay as tallyd
 * state (docs/RELAY.md, "Disabled endpoints"): the endpoint_disable and
 * endpoint_enable commands keep each endpoint's state in the `endpoints`
 * database, name → record, and append endpoint.disabled /
 * endpoint.enabled (docs/EVENTS.md); endpoint_rotate_secret keeps its
 * signing secret there too (endpoint.secret_rotated, which does not carry
 * it). An endpoint without a record is enabled, with the secret of the
 * relay's config file: it names endpoints tallyd never saw.
 */
#ifndef TALLY_LEDGER_ENDPOINT_H
#define TALLY_LEDGER_ENDPOINT_H

#include "common/limits.h"
#include "ledger/command.h"
#include "ledger/context.h"
#include "log/store.h"

#include <stdbool.h>
#include <stdint.h>

/* One endpoint's stored state. */
typedef struct ledger_endpoint_state {
    bool disabled;
    uint64_t version;   /* its endpoint.* events so far (0: none, no record) */
    int64_t changed_ms; /* the commit time of the last one */
    char reason[TALLY_ENDPOINT_REASON_BYTES_MAX + 1]; /* the last disable's, "" */
    /* the signing secret given by endpoint_rotate_secret (none: the relay's
     * config file's), and until when the one before it signs too */
    uint8_t secret[TALLY_ENDPOINT_SECRET_BYTES_MAX];
    size_t secret_len;
    uint8_t previous[TALLY_ENDPOINT_SECRET_BYTES_MAX]; /* none: the config file's */
    size_t previous_len;
    int64_t previous_until_ms; /* 0: no overlap */
    /* a recover asked for and not done yet: resend the events committed
     * since recover_since_ms (0: none); the version that asked */
    int64_t recover_since_ms;
    uint64_t recover_version;
    /* defined by endpoint_create (and not deleted since): what tally-relay
     * runs it by; "" and 0 for the relay's defaults */
    bool defined;
    char url[TALLY_ENDPOINT_URL_BYTES_MAX + 1];
    char types[TALLY_ENDPOINT_TYPES_BYTES_MAX + 1];
    char schedule[TALLY_ENDPOINT_SCHEDULE_BYTES_MAX + 1];
    char backfill[TALLY_ENDPOINT_BACKFILL_BYTES_MAX + 1];
    uint32_t connect_timeout_ms, timeout_ms;
} ledger_endpoint_state;

/* Whether name is an endpoint name: 1..TALLY_ENDPOINT_NAME_BYTES_MAX bytes
 * of A-Z a-z 0-9 . _ - (tally-relay's [endpoint NAME]). */
bool ledger_endpoint_name_valid(tally_str name);

/* Read name's state in t into *out: TALLY_ok (a missing record reads as
 * enabled, version 0), TALLY_corrupt_record, or a store error. */
int ledger_endpoint_get(store_txn *t, tally_str name, ledger_endpoint_state *out);

/* Store s (version > 0) as name's record in t. TALLY_ok or a store error. */
int ledger_endpoint_put(store_txn *t, tally_str name, const ledger_endpoint_state *s);
/* Call each(name, state, ctx) for every endpoint record in name order
 * (each returns non-zero to stop, which is returned). TALLY_ok,
 * TALLY_corrupt_record or a store error. */
int ledger_endpoint_each(store_txn *t,
                         int (*each)(tally_str name, const ledger_endpoint_state *s, void *ctx),
                         void *ctx);

/* ---- endpoints defined in tallyd (endpoint_define.c) ---- */

/* The checks of endpoint_create (create) and endpoint_update that need no
 * store: TALLY_invalid_endpoint_name, TALLY_invalid_endpoint_url,
 * TALLY_invalid_secret, TALLY_value_out_of_range (types, the retry
 * schedule, a timeout, backfill), or TALLY_ok. */
int ledger_endpoint_definition_check(const ledger_endpoint *e, bool create);
/* The rows of endpoint_create (TALLY_endpoint_exists,
 * TALLY_too_many_endpoints), endpoint_update and endpoint_delete
 * (TALLY_endpoint_not_found): each an endpoint.created, .updated or
 * .deleted event. A delete keeps the record's version (its events go on
 * counting) and forgets the rest. */
int ledger_endpoint_create_apply(ledger_ctx *ctx, const ledger_command *cmd);
int ledger_endpoint_update_apply(ledger_ctx *ctx, const ledger_command *cmd);
int ledger_endpoint_delete_apply(ledger_ctx *ctx, const ledger_command *cmd);
/* The endpoint's event of type for the state s (its version set): the
 * record stored and the event appended. TALLY_ok or a fault. */
int ledger_endpoint_commit(ledger_ctx *ctx, tally_str name, ledger_endpoint_state *s,
                           log_event_type type);

/* The rows of endpoint_disable and endpoint_enable in ledger/command.c:
 * set the state (version + 1, the commit time, the reason) and append the
 * event. TALLY_ok or a fault. */
int ledger_endpoint_disable_apply(ledger_ctx *ctx, const ledger_command *cmd);
int ledger_endpoint_enable_apply(ledger_ctx *ctx, const ledger_command *cmd);
/* endpoint_rotate_secret's row: the new secret signs from now on, the one
 * before it (none: the relay's config file's) as well for overlap_s. */
int ledger_endpoint_rotate_secret_apply(ledger_ctx *ctx, const ledger_command *cmd);
/* endpoint_recover's row: a recover from since_ms is asked (replacing one
 * not done yet); endpoint_recovered's: the one asked at recover_version is
 * done (nothing changes, no event, when another was asked since). */
int ledger_endpoint_recover_apply(ledger_ctx *ctx, const ledger_command *cmd);
int ledger_endpoint_recovered_apply(ledger_ctx *ctx, const ledger_command *cmd);

/* ---- the attempt log (docs/RELAY.md, "The attempt log") ----
 * `endpoint_attempts`: (name length u8, name, time_ms u64, seq u64,
 * attempt u32) → format 1, status u16, latency_ms u32, error length u16,
 * error, response length u16, response; integers big-endian. Keyed by
 * time within an endpoint, so its retention removes from the front. */

/* One delivery attempt of one event to one endpoint, as tally-relay made
 * it. Strings point into the caller's memory. */
typedef struct ledger_endpoint_attempt {
    uint64_t seq;        /* the event */
    uint32_t attempt;    /* 1 on its first delivery */
    int64_t time_ms;     /* when the request was sent, 0 .. TALLY_TIME_MS_MAX */
    uint32_t status;     /* the HTTP status, 0 without an answer */
    uint32_t latency_ms; /* from the request to its answer or failure */
    tally_str error;     /* why it failed ("" for a 2xx) */
    tally_str response;  /* the first bytes of the answer's body */
} ledger_endpoint_attempt;

/* Store a (checked: ledger_endpoint_attempt_valid) under name in t (an
 * attempt recorded twice is stored once). TALLY_ok or a store error. */
int ledger_endpoint_attempt_put(store_txn *t, tally_str name, const ledger_endpoint_attempt *a);
/* Whether a is within its bounds (a record op refuses it otherwise). */
bool ledger_endpoint_attempt_valid(const ledger_endpoint_attempt *a);
/* Remove name's attempts older than before_ms, at most max of them;
 * *removed gets how many. TALLY_ok or a store error. */
int ledger_endpoint_attempts_sweep(store_txn *t, tally_str name, int64_t before_ms, uint32_t max,
                                   uint32_t *removed);
/* Call each(a, ctx) for name's attempts, newest first, only those of seq
 * when seq is not 0, at most limit calls; strings point into the map
 * (valid until t ends). each returns non-zero to stop. TALLY_ok,
 * TALLY_corrupt_record or a store error. */
int ledger_endpoint_attempts_each(store_txn *t, tally_str name, uint64_t seq, uint32_t limit,
                                  int (*each)(const ledger_endpoint_attempt *a, void *ctx),
                                  void *ctx);

#endif
