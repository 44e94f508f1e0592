/*
 * context.h — what one command's application carries through ledger/:
 * the write transaction, the commit time, the causation and the events the
 * command appended so far. Internal to ledger/; defined in context.c,
 * which account, transfer and entitlement call and which calls only log/.
 */
#ifndef TALLY_LEDGER_CONTEXT_H
#define TALLY_LEDGER_CONTEXT_H

#include "common/bytes.h"
#include "log/log.h"
#include "log/store.h"

#include <msgpack.h>
#include <stdint.h>

typedef struct ledger_ctx {
    store_txn *txn;
    int64_t now_ms;
    tally_str consumer;    /* len 0 for sweeps */
    tally_str key;
    tally_str correlation;
    uint64_t first_seq;    /* 0 until the first event */
    uint32_t event_count;
    uint64_t original_seq; /* set with an exists* rejection: the seq that
                              created the existing account or transfer */
    const log_event_type *op_events; /* the running op's event types (its row
                                        in ledger/command.c, NONE-ended);
                                        NULL in upkeep (sweeps, retention) */
} ledger_ctx;

/* Append one event caused by the current command; counts it in ctx. An
 * op emits only the types its row lists (asserted: a row that forgot one
 * is a bug). Returns TALLY_ok or a fault (remembered in ctx->txn). */
int ledger_emit(ledger_ctx *ctx, log_event_type type, const log_entity *entity,
                uint64_t entity_version,
                int (*pack_body)(msgpack_packer *pk, const void *body), const void *body);

/* true when code is a fault that must abort the command (not stored). */
int ledger_is_fault(int code);

#endif
