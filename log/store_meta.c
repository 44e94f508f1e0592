/*
 * store_meta.c — LMDB's two meta pages of data.mdb, read from the file and
 * checked (store_meta_pages_check, log/store.h).
 *
 * LMDB keeps the roots of the environment in pages 0 and 1 and uses the
 * one with the larger transaction id. It checks a meta page only for its
 * flag, magic and version (MDB_INVALID, MDB_VERSION_MISMATCH), and only
 * when the environment opens: a page damaged elsewhere (its last page, its
 * roots, its transaction id) is used as it is, and the damage shows later
 * as MDB_CORRUPTED or MDB_PAGE_NOTFOUND in the middle of a transaction, or
 * not at all. Reading the pages here says which page of which file is
 * damaged and how, before LMDB uses them.
 *
 * The layout is LMDB's data format 1 (MDB_DATA_VERSION, unchanged since
 * LMDB 0.9.0; mdb.c: MDB_page, MDB_meta, MDB_db), in the machine's byte
 * order, for 64-bit size_t and pgno_t:
 *   page header (16 bytes): pgno u64, pad u16, flags u16 (P_META 0x08), 4 more
 *   meta (from byte 16): magic u32 0xBEEFC0DE, version u32, address u64,
 *     mapsize u64, two database records of 48 bytes (the free list's
 *     first u32 is the page size; each ends with its root page, ~0 when
 *     empty), last page u64, transaction id u64.
 */
#include "log/store.h"

#include "common/error.h"
#include "common/limits.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <stdbool.h>
#include <stdint.h>

/* The layout read here is LMDB's for 64-bit size_t; elsewhere the pages
 * are left to LMDB's own checks. */
#define META_LAYOUT_KNOWN (SIZE_MAX == UINT64_MAX)

#define META_PAGES 2
#define PAGE_HEADER_BYTES 16
#define PAGE_FLAGS_AT 10
#define PAGE_FLAG_META 0x08
#define META_MAGIC 0xBEEFC0DEu
#define META_DATA_VERSION 1u
#define META_MAGIC_AT (PAGE_HEADER_BYTES + 0)
#define META_VERSION_AT (PAGE_HEADER_BYTES + 4)
#define META_DB_BYTES 48
#define META_DBS_AT (PAGE_HEADER_BYTES + 24)
#define META_PAGE_SIZE_AT META_DBS_AT /* the free list's md_pad */
#define META_DB_ROOT_AT (META_DB_BYTES - 8)
#define META_LAST_PAGE_AT (META_DBS_AT + 2 * META_DB_BYTES)
#define META_TXNID_AT (META_LAST_PAGE_AT + 8)
#define META_READ_BYTES (META_TXNID_AT + 8)
#define PAGE_BYTES_MIN 512u
#define PAGE_BYTES_MAX 65536u
#define ROOT_NONE UINT64_MAX /* P_INVALID: an empty database */
/* A live writer may commit between the reads of the two pages (a reader
 * such as tally-recon does not hold the lock): ids that do not relate are
 * looked at again, this many times in all, before they count as damage. */
#define META_LOOKS_MAX 3

typedef struct meta_page {
    uint64_t pgno;
    uint16_t flags;
    uint32_t magic, version, page_bytes;
    uint64_t roots[2], last_page, txnid;
} meta_page;

static void meta_decode(const uint8_t *b, meta_page *m)
{
    memcpy(&m->pgno, b, 8);
    memcpy(&m->flags, b + PAGE_FLAGS_AT, 2);
    memcpy(&m->magic, b + META_MAGIC_AT, 4);
    memcpy(&m->version, b + META_VERSION_AT, 4);
    memcpy(&m->page_bytes, b + META_PAGE_SIZE_AT, 4);
    for (int d = 0; d < 2; d++)
        memcpy(&m->roots[d], b + META_DBS_AT + d * META_DB_BYTES + META_DB_ROOT_AT, 8);
    memcpy(&m->last_page, b + META_LAST_PAGE_AT, 8);
    memcpy(&m->txnid, b + META_TXNID_AT, 8);
}

/* Page i's header and meta fields on their own; file_pages: the whole
 * pages of the file; other: the other page. A data format other than
 * LMDB's is a file of another LMDB when both pages say it, else damage. */
static int meta_check_one(const char *file, unsigned i, const meta_page *m, uint64_t file_pages,
                          const meta_page *other, char *why, size_t why_bytes)
{
    const int bad = TALLY_corrupt_record;
    if (!(m->flags & PAGE_FLAG_META) || m->magic != META_MAGIC)
        return store_why(why, why_bytes, bad,
                         "%s: LMDB meta page %u is damaged (%s): the file is not an LMDB "
                         "environment or was overwritten", file, i,
                         !(m->flags & PAGE_FLAG_META) ? "not marked as a meta page"
                                                      : "bad magic number");
    if (m->version != META_DATA_VERSION && other->version != m->version)
        return store_why(why, why_bytes, bad,
                         "%s: LMDB meta page %u is damaged (it says LMDB data format %u, page "
                         "%u says %u)", file, i, m->version, 1 - i, other->version);
    if (m->version != META_DATA_VERSION)
        return store_why(why, why_bytes, TALLY_store_version_mismatch,
                         "%s: LMDB meta page %u has LMDB data format %u; this LMDB (%d.%d.%d) "
                         "reads format %u", file, i, m->version, MDB_VERSION_MAJOR,
                         MDB_VERSION_MINOR, MDB_VERSION_PATCH, META_DATA_VERSION);
    if (m->pgno != i)
        return store_why(why, why_bytes, bad,
                         "%s: LMDB meta page %u is damaged (it names itself page %llu)", file, i,
                         (unsigned long long)m->pgno);
    if (m->last_page >= file_pages)
        return store_why(why, why_bytes, bad,
                         "%s: LMDB meta page %u is damaged or the file was cut short: it ends "
                         "the data at page %llu, the file holds %llu pages", file, i,
                         (unsigned long long)m->last_page, (unsigned long long)file_pages);
    for (int d = 0; d < 2; d++)
        if (m->roots[d] != ROOT_NONE && (m->roots[d] < META_PAGES || m->roots[d] > m->last_page))
            return store_why(why, why_bytes, bad,
                             "%s: LMDB meta page %u is damaged: the root of its %s is page "
                             "%llu, outside pages 2 to %llu", file, i,
                             d == 0 ? "free list" : "main database",
                             (unsigned long long)m->roots[d], (unsigned long long)m->last_page);
    return TALLY_ok;
}

/* Read both pages (pages_read of them: page 1 lies one page further, and
 * page 0 says how large a page is, as LMDB reads them; a page 0 that
 * cannot say leaves page 1 unread). TALLY_ok or the read's fault, said. */
static int meta_read(int fd, const char *file, meta_page m[META_PAGES], unsigned *pages_read,
                     char *why, size_t why_bytes)
{
    uint8_t buf[META_READ_BYTES];
    uint64_t page_bytes = 0;
    memset(m, 0, META_PAGES * sizeof(*m));
    *pages_read = 0;
    for (unsigned i = 0; i < META_PAGES; i++) {
        ssize_t got = pread(fd, buf, sizeof(buf), (off_t)(i * page_bytes));
        if (got != (ssize_t)sizeof(buf))
            return store_why(why, why_bytes,
                             got < 0 ? store_translate(errno) : TALLY_corrupt_record,
                             "%s: not an LMDB environment, or cut short: LMDB meta page %u "
                             "cannot be read (%s)", file, i,
                             got < 0 ? strerror(errno) : "the file is too short");
        meta_decode(buf, &m[i]);
        (*pages_read)++;
        page_bytes = m[0].page_bytes;
        if (page_bytes < PAGE_BYTES_MIN || page_bytes > PAGE_BYTES_MAX ||
            (page_bytes & (page_bytes - 1)) != 0)
            break;
    }
    return TALLY_ok;
}

/* One look at the pages of the open file. *moving: the pages fail only
 * in how their transaction ids relate, which a writer committing between
 * the reads of the two pages can also cause. */
static int meta_look(int fd, const char *file, bool *moving, char *why, size_t why_bytes)
{
    *moving = false;
    struct stat sb;
    meta_page m[META_PAGES];
    unsigned pages_read;
    if (fstat(fd, &sb) != 0)
        return store_translate(errno);
    if (sb.st_size == 0) /* LMDB makes an empty file a new environment */
        return TALLY_ok;
    int rc = meta_read(fd, file, m, &pages_read, why, why_bytes);
    if (rc == TALLY_ok && pages_read < META_PAGES) { /* page 0 gives no page size */
        if (!(m[0].flags & PAGE_FLAG_META) || m[0].magic != META_MAGIC)
            return meta_check_one(file, 0, &m[0], 0, &m[0], why, why_bytes); /* says which */
        return store_why(why, why_bytes, TALLY_corrupt_record,
                         "%s: LMDB meta page 0 is damaged (page size %u)", file, m[0].page_bytes);
    }
    for (unsigned i = 0; rc == TALLY_ok && i < META_PAGES; i++)
        rc = meta_check_one(file, i, &m[i], (uint64_t)sb.st_size / m[0].page_bytes, &m[1 - i],
                            why, why_bytes);
    if (rc == TALLY_ok && m[1].page_bytes != m[0].page_bytes)
        rc = store_why(why, why_bytes, TALLY_corrupt_record,
                       "%s: LMDB meta pages disagree on the page size (%u and %u): one is "
                       "damaged", file, m[0].page_bytes, m[1].page_bytes);
    if (rc != TALLY_ok)
        return rc;
    /* Each commit writes the page of its transaction id's parity, so the
     * two ids are consecutive (both 0 before the first commit). */
    uint64_t apart = m[0].txnid > m[1].txnid ? m[0].txnid - m[1].txnid : m[1].txnid - m[0].txnid;
    if (apart <= 1 && (m[0].txnid == 0 || (m[0].txnid & 1) == 0) &&
        (m[1].txnid == 0 || (m[1].txnid & 1) == 1))
        return TALLY_ok;
    *moving = true;
    return store_why(why, why_bytes, TALLY_corrupt_record,
                     "%s: LMDB meta pages hold transactions %llu and %llu (page 0 an even one, "
                     "page 1 the next or the one before): one is damaged", file,
                     (unsigned long long)m[0].txnid, (unsigned long long)m[1].txnid);
}

int store_meta_pages_check(const char *dir, char *why, size_t why_bytes)
{
    if (!META_LAYOUT_KNOWN)
        return TALLY_ok;
    char file[TALLY_PATH_BYTES_MAX + 16];
    snprintf(file, sizeof(file), "%s/data.mdb", dir);
    int fd = open(file, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        int e = errno;
        return store_why(why, why_bytes, store_translate(e), "%s: %s", file, strerror(e));
    }
    bool moving = true;
    int rc = TALLY_ok;
    for (int look = 0; moving && look < META_LOOKS_MAX; look++)
        rc = meta_look(fd, file, &moving, why, why_bytes);
    close(fd);
    return rc;
}
