/*
 * inbox_time.h — the time index of the inbox, which retention sweeps walk
 * (ledger/retention.h) and tally-recon audits (inbox_time check).
 *
 * Database "inbox_time" holds two kinds of entries, told apart by the
 * value (empty or not) and the key's ninth byte (an inbox key's consumer
 * length, never 0, or 0):
 *   per key   (formats 1-2, still read and swept):
 *             key = time_ms (i64 BE) | inbox key, empty value
 *   per group (format 3, December 2026, the only kind written now):
 *             key = time_ms (i64 BE) | 0x00 | counter (u64 BE),
 *             value = the inbox keys the commit stored, each as
 *             uvarint length | inbox key (at least one)
 * A group entry's time is the latest commit time of its keys; its key is
 * the table's largest (written with MDB_APPEND, so leaves fill whole): the
 * next counter at the same ms, or the last entry's time when the clock
 * stepped back (that group is kept that much longer, never shorter).
 * ledger_inbox_put collects each key in its transaction (store_txn_collect:
 * a rolled-back child drops its keys), and the top-level commit writes the
 * one entry: every commit point indexes what it stored.
 */
#ifndef TALLY_LEDGER_INBOX_TIME_H
#define TALLY_LEDGER_INBOX_TIME_H

#include "ledger/inbox.h"
#include "log/store.h"

#include <stdbool.h>
#include <stdint.h>

#define LEDGER_INBOX_TIME_GROUP_KEY_BYTES 17
#define LEDGER_INBOX_TIME_KEY_BYTES_MAX (8 + LEDGER_INBOX_KEY_BYTES_MAX)

/* Collect the inbox key (n bytes) stored at time_ms in t, for the entry of
 * t's commit group. */
int ledger_inbox_time_collect(store_txn *t, const uint8_t *inbox_key, size_t n, int64_t time_ms);

/* One entry of inbox_time, decoded in place (pointers into k and v). */
typedef struct ledger_inbox_time_entry {
    int64_t time_ms;
    bool group;           /* a group entry; else a per-key one */
    const uint8_t *keys;  /* group: the value; per key: the inbox key */
    size_t keys_len;
} ledger_inbox_time_entry;

/* TALLY_ok or TALLY_corrupt_record. */
int ledger_inbox_time_decode(const MDB_val *k, const MDB_val *v, ledger_inbox_time_entry *out);

/* The next inbox key of an entry from *pos (start at 0): true with *key and
 * *len set and *pos moved past it; false at the end, or with *corrupt set
 * when the list is malformed. */
bool ledger_inbox_time_next(const ledger_inbox_time_entry *e, size_t *pos, const uint8_t **key,
                            size_t *len, bool *corrupt);

#endif
