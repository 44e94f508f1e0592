/*
 * account.h — accounts: the record, its encoding, opening one, listing
 * them in id order.
 *
 * Database "accounts": key = id (u64 big-endian), value = the record:
 * format 4 is fixed-width, all big-endian: the byte 4, ledger u32, code
 * u16, flags u16, debits_posted, credits_posted, debits_pending,
 * credits_pending, version, created_seq, created_ms (u64 each): 65 bytes;
 * then, only when one of them is not 0, user_data_128 (16 bytes),
 * user_data_64 u64 and user_data_32 u32: 93 bytes. Every transfer reads
 * and writes two account records, so the record is laid out to cost a
 * few loads and stores rather than a loop over varints (format 3's
 * decoding and encoding cost about 1,100 instructions per account per
 * transfer, format 4's about 170); a full leaf holds 49 of them.
 * Older stores hold records of earlier formats, still read and rewritten
 * as format 4 when the account next changes. Format 3 is the byte 3 then
 * fourteen unsigned LEB128 varints (common/bytes.h): the fields of format
 * 4 in the same order, user_data_128 as its high then its low 64 bits.
 * Format 2 is the byte 2 and the first nine of them: such an account has
 * no creation time (0) and no user data. Format 1: fixed 57 bytes, the
 * byte 1, ledger u32, code u16, flags u16, the four balances (i64),
 * version u64, created_seq u64, all big-endian. Balances are never
 * negative and never exceed TALLY_AMOUNT_MAX; a record that breaks this,
 * a field beyond its width, or a format 4 record whose user data is all
 * 0, is corrupt.
 */
#ifndef TALLY_LEDGER_ACCOUNT_H
#define TALLY_LEDGER_ACCOUNT_H

#include "common/bytes.h"
#include "common/msgpack_safe.h"
#include "ledger/command.h"
#include "ledger/context.h"

#include <msgpack.h>
#include <stdbool.h>
#include <stdint.h>

#define LEDGER_ACCOUNT_RECORD_V1_BYTES 57
#define LEDGER_ACCOUNT_RECORD_BYTES 65     /* format 4 without user data */
#define LEDGER_ACCOUNT_RECORD_BYTES_MAX 93 /* format 4 with user data */

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
    int64_t created_ms;    /* commit time of that event; 0: opened before format 3 */
    ledger_user_data user_data;
} ledger_account;

/* Read an account: TALLY_ok, TALLY_not_found, TALLY_corrupt_record or a
 * store error. */
int ledger_account_get(store_txn *t, uint64_t id, ledger_account *out);

/* One page of accounts in id order (account_list): each account whose id
 * is above after_id, at most limit of them (1 .. TALLY_ACCOUNT_LIST_ENTRIES_MAX),
 * is decoded and given to fn, which returns 0 to go on (any other value
 * stops the walk and is returned). *next gets the id of the page's last
 * account when an account with a larger id exists (pass it as after_id
 * for the next page), else 0; after_id UINT64_MAX is past every id (an
 * empty page). Returns TALLY_ok, TALLY_invalid_argument (limit out of
 * range: nothing read), TALLY_corrupt_record (a record that fails its
 * checks) or a store error; *next is 0 unless TALLY_ok. */
int ledger_account_list(store_txn *t, uint64_t after_id, uint32_t limit,
                        int (*fn)(const ledger_account *a, void *ctx), void *ctx,
                        uint64_t *next);

/* Check and write an account record (TALLY_ok or a fault). */
int ledger_account_put(store_txn *t, const ledger_account *a);

/* Encode the record (format 4): returns its length. Decode any
 * format: TALLY_ok, or TALLY_corrupt_record for a record of another
 * format or length, a field beyond its width, or one that breaks the
 * account's rules. */
size_t ledger_account_encode(const ledger_account *a, uint8_t out[LEDGER_ACCOUNT_RECORD_BYTES_MAX]);
int ledger_account_decode(uint64_t id, const void *bytes, size_t len, ledger_account *out);

/* Apply account_open (its row in ledger/command.c's op table; cmd
 * validated): ok, exists, exists_with_different_*, or a fault. */
int ledger_account_open_apply(ledger_ctx *ctx, const ledger_command *cmd);

/* The account as a msgpack map (replies, event format 1) or a row (event
 * format 2; docs/EVENTS.md), and back from either. */
int ledger_account_pack(msgpack_packer *pk, const ledger_account *a, bool row);
int ledger_account_unpack(const msgpack_object *o, ledger_account *out);

/* User data as the last three fields of a record being packed (an
 * account's or a transfer's), and read back: a record written before user
 * data existed (an older event or snapshot) has none, which reads as 0.
 * A row (an event's body) leaves them out when all three are 0, which
 * saves the 20 bytes of a zero user_data_128 in every body; a map (a
 * read's reply) always has them. ledger_user_data_fields: how many fields
 * ledger_user_data_pack adds (0 or 3).
 * ledger_user_data_compare: TALLY_ok when equal, else the
 * exists_with_different_user_data_* code of the first that differs. */
uint32_t ledger_user_data_fields(const ledger_user_data *u, bool row);
int ledger_user_data_pack(const msgpack_record *r, const ledger_user_data *u);
bool ledger_user_data_unpack(msgpack_record_reader *r, ledger_user_data *out);
int ledger_user_data_compare(const ledger_user_data *have, const ledger_user_data *want);

/* What the account puts into "account_index" (ledger/index.h). */
struct ledger_indexed;
void ledger_account_indexed(const ledger_account *a, struct ledger_indexed *out);

/* Event body [account] (format 2) for account.opened. */
int ledger_account_pack_body(msgpack_packer *pk, const void *account);

#endif
