/*
 * lmdb_error.c — the translation of LMDB and errno codes (lmdb_error.h).
 */
#include "common/lmdb_error.h"

#include "common/error.h"

#include <errno.h>
#include <lmdb.h>

int lmdb_error_translate(int rc)
{
    switch (rc) {
    case MDB_SUCCESS: return TALLY_ok;
    case MDB_NOTFOUND: return TALLY_not_found;
    case MDB_MAP_FULL: return TALLY_storage_full;
    case ENOSPC: return TALLY_storage_full;
    case EDQUOT: return TALLY_storage_full;
    case EFBIG: return TALLY_storage_full; /* a file size limit: full all the same */
    case MDB_TXN_FULL: return TALLY_transaction_full;
    case ENOMEM: return TALLY_out_of_memory;
    case EIO: return TALLY_io_error;
    case MDB_CORRUPTED: case MDB_PAGE_NOTFOUND: case MDB_INVALID:
        return TALLY_corrupt_record;
    case MDB_VERSION_MISMATCH: return TALLY_store_version_mismatch;
    case EACCES: case EROFS: return TALLY_read_only;
    case ENOENT: return TALLY_not_found;
    case EAGAIN: return TALLY_store_locked;
    default: return rc > 0 ? TALLY_io_error : TALLY_internal;
    }
}
