/*
 * index_build.h — building the account and transfer indexes of a store
 * upgraded from a format before 7 (ledger/index.h).
 */
#ifndef TALLY_LEDGER_INDEX_BUILD_H
#define TALLY_LEDGER_INDEX_BUILD_H

#include "log/store.h"

#include <stdbool.h>
#include <stdint.h>

/* When meta "index_pending" is set (an upgraded store): empty both
 * indexes, put the entries of every account and transfer record (in
 * transactions of 10000 records), then remove the mark; else nothing.
 * *records gets how many records were indexed. A writer's store, before
 * it serves; a batch that meets a full map grows it (store_map_grow, up to
 * store_map_max: set it first) and is done again. TALLY_ok, TALLY_corrupt_record (a record that fails its
 * checks) or a store error (the mark stays: the next call starts over). */
int ledger_index_build(store *st, uint64_t *records);

/* Whether the mark is set in t (tally-recon skips the index checks then). */
int ledger_index_is_pending(store_txn *t, bool *is);

#endif
