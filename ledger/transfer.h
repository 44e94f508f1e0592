/*
 * transfer.h — transfers and holds (pending transfers).
 *
 * Database "transfers": key = id (16 bytes), value = format 3: the byte 3,
 * then debit, credit, amount, ledger, code, flags, state, timeout_s,
 * expires_at_ms, posted_amount, version, created_seq, resolved_seq,
 * created_ms, user_data_128 (high then low 64 bits), user_data_64,
 * user_data_32, reversed_amount and reverses (high then low 64 bits), each
 * an unsigned LEB128 varint (common/bytes.h): 32-37 bytes for a typical
 * transfer without user data. Format 2 (older stores,
 * still read) is the byte 2 and the first 14 of them (no user data).
 * Format 1, written before December 2026, is the
 * byte 1 and the same fields fixed-width big-endian (86 bytes: u64, u64,
 * i64, u32, u16, u16, u8, u32, i64, i64, u64, u64, u64, i64); both are read,
 * and a hold written in format 1 is rewritten in format 2 when it resolves.
 *
 * A single-phase transfer is created posted and never changes. A hold is
 * created pending (its amount added to both accounts' *_pending) and then
 * resolves exactly once: posted (full or partial amount moves to *_posted),
 * voided, or expired at its timeout by the sweep; each step releases the
 * whole pending amount and is one event.
 *
 * Each transfer event is also in both accounts' history (history.h).
 */
#ifndef TALLY_LEDGER_TRANSFER_H
#define TALLY_LEDGER_TRANSFER_H

#include "ledger/account.h"
#include "ledger/command.h"
#include "ledger/context.h"

#define LEDGER_TRANSFER_RECORD_V1_BYTES 86
/* The longest format 3 record: the format byte and 21 varints. */
#define LEDGER_TRANSFER_RECORD_BYTES_MAX (1 + 21 * UVARINT_BYTES_MAX)

typedef enum ledger_transfer_state {
    LEDGER_TRANSFER_POSTED = 1,         /* single-phase, done */
    LEDGER_TRANSFER_PENDING_STATE = 2,  /* hold, unresolved */
    LEDGER_TRANSFER_HOLD_POSTED = 3,
    LEDGER_TRANSFER_HOLD_VOIDED = 4,
    LEDGER_TRANSFER_HOLD_EXPIRED = 5,
} ledger_transfer_state;

typedef struct ledger_transfer_record {
    tally_id128 id;
    uint64_t debit_account_id;
    uint64_t credit_account_id;
    int64_t amount;
    uint32_t ledger;
    uint16_t code;
    uint16_t flags;
    uint8_t state;          /* ledger_transfer_state */
    uint32_t timeout_s;
    int64_t expires_at_ms;  /* 0 = never */
    int64_t posted_amount;  /* holds: amount posted (0 unless HOLD_POSTED) */
    uint64_t version;       /* 1 created, 2 resolved */
    uint64_t created_seq;
    uint64_t resolved_seq;  /* 0 while pending or for single-phase */
    int64_t created_ms;
    ledger_user_data user_data;
    /* Reversals (transfer_reverse): the amount of this transfer that later
     * transfers reversed (at most what it posted), and, on a reversal, the
     * transfer it reverses (0: none). The one field of a transfer that
     * changes after its creation is reversed_amount. */
    int64_t reversed_amount;
    tally_id128 reverses;
} ledger_transfer_record;

const char *ledger_transfer_state_name(uint8_t state);

int ledger_transfer_get(store_txn *t, const tally_id128 *id, ledger_transfer_record *out);
int ledger_transfer_decode(const tally_id128 *id, const void *bytes, size_t len,
                           ledger_transfer_record *out);
/* The record's value in format 3; returns its length. */
size_t ledger_transfer_encode(const ledger_transfer_record *r,
                              uint8_t out[LEDGER_TRANSFER_RECORD_BYTES_MAX]);
/* A map (replies, event format 1) or a row (event format 2), and back. */
int ledger_transfer_pack(msgpack_packer *pk, const ledger_transfer_record *r, bool row);
int ledger_transfer_unpack(const msgpack_object *o, ledger_transfer_record *out);

/* What the transfer puts into "transfer_index" (ledger/index.h). */
struct ledger_indexed;
void ledger_transfer_indexed(const ledger_transfer_record *r, struct ledger_indexed *out);

/* Commands (rows of ledger/command.c's op table: transfer, post, void),
 * validated already. Each returns ok, a business code, or a fault. */
int ledger_transfer_apply(ledger_ctx *ctx, const ledger_command *cmd);
int ledger_hold_post_apply(ledger_ctx *ctx, const ledger_command *cmd);
int ledger_hold_void_apply(ledger_ctx *ctx, const ledger_command *cmd);
int ledger_transfer_reverse_apply(ledger_ctx *ctx, const ledger_command *cmd);

/* What of a transfer may still be reversed: what it posted (its amount,
 * or a hold's posted_amount; 0 for a hold not posted) less what was. */
int64_t ledger_transfer_unreversed(const ledger_transfer_record *r);


/* Sweep step: expire the hold id if it is still pending and due at
 * expires_at_ms <= now. *expired is set when it was. */
int ledger_hold_expire(ledger_ctx *ctx, const tally_id128 *id, bool *expired);

#endif
