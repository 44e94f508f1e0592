/*
 * open_check.h — the quick structural check of a store that tallyd runs at
 * open (the cheap part of tally-recon's log checks): the head record and
 * the hash chain of the last events.
 *
 * LMDB's meta pages (store_meta_pages_check) and the format record
 * (store_open) are checked before it, by log/.
 */
#ifndef TALLY_LEDGER_OPEN_CHECK_H
#define TALLY_LEDGER_OPEN_CHECK_H

#include "log/store.h"

#include <stddef.h>
#include <stdint.h>

/* What the check saw. */
typedef struct ledger_open_check_result {
    uint64_t head_seq;    /* meta head */
    uint64_t events;      /* events checked */
    uint64_t from_seq;    /* the first of them (0: none) */
} ledger_open_check_result;

/* In the read transaction t: the head record (meta "head") decodes and
 * names the last stored event, by seq and hash (with log retention, an
 * empty log ends at the retention floor); the last events_max events (all
 * of a shorter log) run without a gap, each decodes with its own hash
 * right, carries its seq and chains to the one before it (the first of the
 * log to zeros or to the floor's hash). Returns TALLY_ok, or
 * TALLY_corrupt_record with a sentence naming the file, the record or seq
 * and the fault in why, or a store error (also said). */
int ledger_open_check(store_txn *t, uint64_t events_max, ledger_open_check_result *result,
                      char *why, size_t why_bytes);

#endif
