/*
 * readmodel.h — the read model of tally-readmodel, an example subscriber:
 * account balances and entitlements kept in the subscriber's own LMDB
 * environment through the subscriber-side inbox (clients/inbox/tally_inbox.h).
 *
 * Each object is stored as tally sent it (the msgpack object of the event
 * body), keyed by account id (8 bytes big-endian) or by entitlement
 * (subject length, subject, feature). An account is written only when its
 * own version is newer than the one held (a transfer event carries both
 * accounts; tally_inbox_account_advance decides); an entitlement is guarded
 * by its event's entity version, which the inbox checks. The position in
 * the log (the last seq fed in order) is written in the same transaction as
 * the state, so a crash loses nothing and repeats nothing.
 */
#ifndef TALLY_READMODEL_H
#define TALLY_READMODEL_H

#include "clients/inbox/tally_inbox.h"

#include <stdio.h>

typedef struct readmodel readmodel;

typedef struct readmodel_options {
    const char *path;        /* the environment's directory */
    uint64_t map_size_bytes; /* 0 = the inbox default */
    int64_t retention_ms;    /* processed entries; 0 = the inbox default */
} readmodel_options;

/* Open (creating) the read model. Codes as tally_inbox_open. */
int readmodel_open(const readmodel_options *options, readmodel **out);
void readmodel_close(readmodel *rm);
tally_inbox *readmodel_inbox(readmodel *rm);

/* The inbox callback (ctx = the readmodel): keeps the objects of one event. */
int readmodel_apply(tally_inbox *inbox, MDB_txn *txn, const tally_inbox_event *event,
                    void *ctx);

/* Apply a page of events read from the log (in seq order) and move the
 * position to the last one's seq, in one transaction. */
int readmodel_apply_page(readmodel *rm, const tally_event *events, size_t count);

/* The position: last seq fed in order (0 = none). */
int readmodel_position(readmodel *rm, uint64_t *seq);

/* TALLY_ok or TALLY_not_found. */
int readmodel_account_get(readmodel *rm, uint64_t id, tally_account *out);
int readmodel_entitlement_get(readmodel *rm, const char *subject, const char *feature,
                              tally_entitlement *out);
/* How many accounts and entitlements the model holds. */
int readmodel_counts(readmodel *rm, uint64_t *accounts, uint64_t *entitlements);

/* Print the whole model, in key order: one JSON document (json) or lines
 * of text. */
int readmodel_dump(readmodel *rm, bool json, FILE *out);

#endif
