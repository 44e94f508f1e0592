/*
 * endpoint.h — the outbound webhook endpoints of tally-relay as tallyd
 * state (docs/RELAY.md, "Disabled endpoints"): the endpoint_disable and
 * endpoint_enable commands keep each endpoint's state in the `endpoints`
 * database, name → record, and append endpoint.disabled /
 * endpoint.enabled (docs/EVENTS.md). An endpoint without a record is
 * enabled: the relay's config file names endpoints tallyd never saw.
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
} ledger_endpoint_state;

/* Whether name is an endpoint name: 1..TALLY_ENDPOINT_NAME_BYTES_MAX bytes
 * of A-Z a-z 0-9 . _ - (tally-relay's [endpoint NAME]). */
bool ledger_endpoint_name_valid(tally_str name);

/* Read name's state in t into *out: TALLY_ok (a missing record reads as
 * enabled, version 0), TALLY_corrupt_record, or a store error. */
int ledger_endpoint_get(store_txn *t, tally_str name, ledger_endpoint_state *out);

/* The rows of endpoint_disable and endpoint_enable in ledger/command.c:
 * set the state (version + 1, the commit time, the reason) and append the
 * event. TALLY_ok or a fault. */
int ledger_endpoint_disable_apply(ledger_ctx *ctx, const ledger_command *cmd);
int ledger_endpoint_enable_apply(ledger_ctx *ctx, const ledger_command *cmd);

#endif
