/*
 * entitlement.h — a subject's access to a feature: grant, extend, revoke,
 * expire.
 *
 * Database "entitlements": key = subject length (u8) | subject | feature,
 * so one subject's entitlements are one key range; value = fixed 59-byte
 * record (format 1, state u8, flags u8, valid_until_ms i64, version u64,
 * source_order u64, granted_ms i64, updated_ms i64, grant transfer id 16).
 *
 * Transitions are validated, never assigned (docs/EVENTS.md has the table):
 *   grant : none | expired | revoked -> active      (active: already_active)
 *   extend: active | expired -> active, later end   (revoked: entitlement_revoked)
 *   revoke: active | expired -> revoked             (revoked: already_revoked)
 *   sweep : active, end <= now -> expired
 * A command carrying a source order not newer than the last one applied is
 * `stale`: no state change, no event.
 */
#ifndef TALLY_LEDGER_ENTITLEMENT_H
#define TALLY_LEDGER_ENTITLEMENT_H

#include "ledger/command.h"
#include "ledger/context.h"

#define LEDGER_ENTITLEMENT_RECORD_BYTES 59
#define LEDGER_ENTITLEMENT_KEY_BYTES_MAX (1 + TALLY_SUBJECT_BYTES_MAX + TALLY_FEATURE_BYTES_MAX)

typedef enum ledger_entitlement_state {
    LEDGER_ENTITLEMENT_ACTIVE = 1,
    LEDGER_ENTITLEMENT_REVOKED = 2,
    LEDGER_ENTITLEMENT_EXPIRED = 3,
} ledger_entitlement_state;

typedef struct ledger_entitlement {
    /* subject and feature are copied so the record outlives its source */
    char subject[TALLY_SUBJECT_BYTES_MAX];
    size_t subject_len;
    char feature[TALLY_FEATURE_BYTES_MAX];
    size_t feature_len;
    uint8_t state;
    bool lifetime;          /* active with no end */
    int64_t valid_until_ms; /* 0 when lifetime */
    uint64_t version;
    bool has_source_order;
    uint64_t source_order;
    int64_t granted_ms;
    int64_t updated_ms;
    bool has_grant_transfer;
    tally_id128 grant_transfer_id;
} ledger_entitlement;

const char *ledger_entitlement_state_name(uint8_t state);

/* State as seen at now_ms: an active entitlement whose end has passed is
 * expired even before the sweep records it. */
uint8_t ledger_entitlement_state_at(const ledger_entitlement *e, int64_t now_ms);

/* Key of (subject, feature); returns its length. */
size_t ledger_entitlement_key(tally_str subject, tally_str feature,
                              uint8_t out[LEDGER_ENTITLEMENT_KEY_BYTES_MAX]);
/* The key of e's (subject, feature). */
size_t ledger_entitlement_key_of(const ledger_entitlement *e,
                                 uint8_t out[LEDGER_ENTITLEMENT_KEY_BYTES_MAX]);

int ledger_entitlement_get(store_txn *t, tally_str subject, tally_str feature,
                           ledger_entitlement *out);
int ledger_entitlement_decode(const void *key, size_t key_len, const void *val,
                              size_t val_len, ledger_entitlement *out);
void ledger_entitlement_encode(const ledger_entitlement *e,
                               uint8_t out[LEDGER_ENTITLEMENT_RECORD_BYTES]);

/* Call fn for each entitlement of subject, in feature order; fn returns
 * non-zero to stop. */
int ledger_entitlement_list(store_txn *t, tally_str subject,
                            int (*fn)(const ledger_entitlement *e, void *ctx), void *ctx);

/* A map (replies, event format 1) or a row (event format 2), and back. */
int ledger_entitlement_pack(msgpack_packer *pk, const ledger_entitlement *e, bool row);
int ledger_entitlement_unpack(const msgpack_object *o, ledger_entitlement *out);

/* Commands (rows of ledger/command.c's op table: grant, extend, revoke),
 * validated already: ok, a business code, or a fault. */
int ledger_entitlement_grant_apply(ledger_ctx *ctx, const ledger_command *cmd);
int ledger_entitlement_extend_apply(ledger_ctx *ctx, const ledger_command *cmd);
int ledger_entitlement_revoke_apply(ledger_ctx *ctx, const ledger_command *cmd);

/* Sweep step for the entitlement stored under key. */
int ledger_entitlement_expire(ledger_ctx *ctx, const void *key, size_t key_len,
                              bool *expired);

#endif
