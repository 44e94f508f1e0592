/*
 * lmdb_error.h — LMDB and errno codes as tally error codes: the one mapping
 * shared by tally's store (log/store.c, as store_translate) and the
 * subscriber-side inbox of libtally (its own environment), which must not
 * carry the store.
 */
#ifndef TALLY_COMMON_LMDB_ERROR_H
#define TALLY_COMMON_LMDB_ERROR_H

/* MDB_SUCCESS is TALLY_ok, MDB_NOTFOUND TALLY_not_found, a full map or disk
 * TALLY_storage_full, ...; an unknown errno is TALLY_io_error, any other
 * unknown code TALLY_internal. */
int lmdb_error_translate(int rc);

#endif
