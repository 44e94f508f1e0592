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
 *             value = inbox keys the commit stored, front-coded: each as
 *             uvarint shared | uvarint rest | its last rest bytes, where
 *             shared is the bytes it has in common with the key before it
 *             in the entry (0 for the first; at least one key)
 * A group entry's time is the latest commit time of its keys; its key is
 * the table's largest (written with MDB_APPEND, so leaves fill whole): the
 * next counter at the same ms, or the last entry's time when the clock
 * stepped back (that group is kept that much longer, never shorter). A
 * commit's keys are split into entries of at most
 * LEDGER_INBOX_TIME_VALUE_BYTES_MAX, so that each fits an LMDB node of a
 * 4 KiB page (two a leaf) instead of taking overflow pages of its own.
 * ledger_inbox_put collects each key in its transaction (log/store.h's
 * collector STORE_COLLECT_INBOX_TIME: a rolled-back child drops its keys),
 * and the top-level commit writes the one entry: every commit point
 * indexes what it stored.
 */
#ifndef TALLY_LEDGER_INBOX_TIME_H
#define TALLY_LEDGER_INBOX_TIME_H

#include "ledger/inbox.h"
#include "log/store.h"

#include <stdbool.h>
#include <stdint.h>

#define LEDGER_INBOX_TIME_GROUP_KEY_BYTES 17
#define LEDGER_INBOX_TIME_KEY_BYTES_MAX (8 + LEDGER_INBOX_KEY_BYTES_MAX)
/* LMDB's largest node on a 4 KiB page, (4096 - 16) / 2 - 2 = 2038 bytes,
 * less its 8-byte header and the 17-byte key. */
#define LEDGER_INBOX_TIME_VALUE_BYTES_MAX 2013

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

/* The inbox keys of an entry, one by one. */
typedef struct ledger_inbox_time_iter {
    const ledger_inbox_time_entry *e;
    size_t pos;      /* bytes of e->keys read */
    uint8_t key[LEDGER_INBOX_KEY_BYTES_MAX];
    size_t len;      /* of key */
    bool corrupt;    /* the list is malformed (next returned false) */
} ledger_inbox_time_iter;

void ledger_inbox_time_iter_init(ledger_inbox_time_iter *it, const ledger_inbox_time_entry *e);

/* The next key into it->key and it->len: true, or false at the end (or
 * with it->corrupt set). */
bool ledger_inbox_time_next(ledger_inbox_time_iter *it);

/* Encode key (len bytes) after prev (prev_len; 0: the first of an entry)
 * into out (at least 2 * UVARINT_BYTES_MAX + len bytes); the bytes used. */
size_t ledger_inbox_time_encode(const uint8_t *prev, size_t prev_len, const uint8_t *key,
                                size_t len, uint8_t *out);

#endif
