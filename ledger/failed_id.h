/*
 * failed_id.h — transfer ids that failed, remembered for the dedupe window.
 *
 * A transfer that is rejected with a business rejection (exceeds_credits,
 * debit_account_not_found, ...; not a validation error, not the exists
 * family) leaves its id here, in the same write transaction as the inbox
 * record of that attempt, and the id stays failed for as long as that
 * record lives: a later transfer with the same id under any other key gets
 * id_already_failed (TigerBeetle's rule), so an id that one key saw fail
 * never succeeds under another while the first key still replays the
 * failure. Inbox retention removes the entry with its inbox record
 * (ledger/retention.c); the inbox record names the id (inbox.h, format 2).
 *
 * Database "failed_ids": key = transfer id (16 bytes); value = format 1 |
 * code u16 (the rejection) | time_ms i64 (the attempt's commit time) |
 * inbox key of the attempt (ledger_inbox_key's: consumer length u8 |
 * consumer | key, or packed).
 */
#ifndef TALLY_LEDGER_FAILED_ID_H
#define TALLY_LEDGER_FAILED_ID_H

#include "common/bytes.h"
#include "ledger/inbox.h"
#include "log/store.h"

#include <stdbool.h>
#include <stdint.h>

typedef struct ledger_failed_id {
    tally_id128 id;
    int code;          /* the business rejection the transfer failed with */
    int64_t time_ms;   /* commit time of the failed attempt */
    tally_str consumer;/* the attempt's inbox key; point into the value */
    tally_str key;     /* also, for a packed key, into key_text below */
    char key_text[LEDGER_INBOX_UUID_TEXT_BYTES];
} ledger_failed_id;

/* Does a transfer that fails with code leave its id failed? Business
 * rejections do, except the exists family (the id is a live transfer),
 * id_already_failed itself (it is failed already) and
 * linked_operation_failed (another chain member failed; this one may
 * succeed later). Validation errors and faults do not. */
bool ledger_failed_id_remembers(int code);

/* TALLY_ok (out may be NULL), TALLY_not_found, TALLY_corrupt_record or a
 * store error. out's strings point into the map (valid until t ends). */
int ledger_failed_id_get(store_txn *t, const tally_id128 *id, ledger_failed_id *out);

/* Remember id as failed with code by the attempt (consumer, key) at
 * time_ms. code must be one that ledger_failed_id_remembers. */
int ledger_failed_id_put(store_txn *t, const tally_id128 *id, int code, int64_t time_ms,
                         tally_str consumer, tally_str key);

/* Forget id if the inbox record inbox_key (ledger_inbox_key's form) left
 * it: TALLY_ok also when there is no such entry or another attempt's. */
int ledger_failed_id_forget(store_txn *t, const tally_id128 *id, const void *inbox_key,
                            size_t inbox_key_len);

/* Decode a stored entry (key and value as stored). */
int ledger_failed_id_decode(const void *key, size_t key_len, const void *val, size_t val_len,
                            ledger_failed_id *out);

#endif
