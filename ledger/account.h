/*
 * account.h — accounts: the record, its encoding, opening one.
 *
 * Database "accounts": key = id (u64 big-endian), value = fixed 57-byte
 * record (format byte 1, ledger u32, code u16, flags u16, debits_posted,
 * credits_posted, debits_pending, credits_pending (i64), version u64,
 * created_seq u64; all big-endian). Balances are never negative and never
 * exceed TALLY_AMOUNT_MAX; a record that breaks this is corrupt.
 */
#ifndef TALLY_LEDGER_ACCOUNT_H
#define TALLY_LEDGER_ACCOUNT_H

#include "ledger/command.h"
#include "ledger/context.h"

#include <msgpack.h>
#include <stdbool.h>
#include <stdint.h>

#define LEDGER_ACCOUNT_RECORD_BYTES 57

typedef struct ledger_account {
    uint64_t id;
    uint32_t ledger;
    uint16_t code;
    uint16_t flags;
    int64_t debits_posted;
    int64_t credits_posted;
    int64_t debits_pending;
    int64_t credits_pending;
    uint64_t version;      /* 1 when opened, +1 for every change */
    uint64_t created_seq;  /* seq of its account.opened event */
} ledger_account;

/* Read an account: TALLY_ok, TALLY_not_found, TALLY_corrupt_record or a
 * store error. */
int ledger_account_get(store_txn *t, uint64_t id, ledger_account *out);

/* Check and write an account record (TALLY_ok or a fault). */
int ledger_account_put(store_txn *t, const ledger_account *a);

/* Encode/decode the fixed record. decode returns TALLY_corrupt_record for a
 * record of the wrong size, format or with an impossible value. */
void ledger_account_encode(const ledger_account *a, uint8_t out[LEDGER_ACCOUNT_RECORD_BYTES]);
int ledger_account_decode(uint64_t id, const void *bytes, size_t len, ledger_account *out);

/* Apply account_open: ok, exists, exists_with_different_*, or a fault. */
int ledger_account_open_apply(ledger_ctx *ctx, const ledger_account_open *cmd);

/* The account as a msgpack map (replies, event format 1) or a row (event
 * format 2; docs/EVENTS.md), and back from either. */
int ledger_account_pack(msgpack_packer *pk, const ledger_account *a, bool row);
int ledger_account_unpack(const msgpack_object *o, ledger_account *out);

/* Event body [account] (format 2) for account.opened. */
int ledger_account_pack_body(msgpack_packer *pk, const void *account);

#endif
