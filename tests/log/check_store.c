/*
 * check_store.c — tests of log/store: opening (directory, the ten named
 * databases, the writer lock, read-only handles, option checks, the format
 * version, the instance id), transactions with "remember the first error",
 * nested transactions, and the translation of LMDB/errno codes.
 *
 * Where a property is about the LMDB environment itself, the test looks at
 * it with raw mdb_* calls through store_env/store_dbi rather than trusting
 * the wrappers under test.
 */
#include "common/error.h"
#include "common/limits.h"
#include "log/store.h"
#include "tests/support/suite.h"
#include "tests/support/test_support.h"

#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#define EXPECTED_DBS 10
static const char *const expected_names[EXPECTED_DBS] = {
    "accounts", "transfers", "entitlements", "expiry", "log",
    "inbox",    "inbox_time", "cursors",     "dlq",    "meta",
};

/* A fresh temp dir, and path = dir/sub that does not exist yet. */
typedef struct tmp_path {
    char dir[256];
    char path[300];
} tmp_path;

static void tmp_path_make(tmp_path *p)
{
    const char *tmp = getenv("TMPDIR");
    snprintf(p->dir, sizeof(p->dir), "%s/tally-store-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    ck_assert_ptr_nonnull(mkdtemp(p->dir));
    snprintf(p->path, sizeof(p->path), "%s/data", p->dir);
}

static store *open_writer(const char *path)
{
    store_options opt = {.path = path, .map_size_bytes = UINT64_C(16) << 20};
    store *st = NULL;
    int rc = store_open(&opt, &st);
    ck_assert_msg(rc == TALLY_ok, "store_open %s: %s", path, tally_strerror(rc));
    ck_assert_ptr_nonnull(st);
    return st;
}

static void put_str(store *st, const char *key, const char *val)
{
    store_txn t;
    ck_assert_int_eq(store_txn_begin(st, NULL, false, &t), TALLY_ok);
    ck_assert_int_eq(store_put(&t, STORE_DB_ACCOUNTS, key, strlen(key), val, strlen(val), 0),
                     TALLY_ok);
    ck_assert_int_eq(store_txn_commit(&t), TALLY_ok);
}

/* A write transaction on the store at path with plain LMDB, and the
 * database name in it: for tampering outside the store's functions. */
static MDB_txn *raw_write_txn(const char *path, const char *name, MDB_env **env, MDB_dbi *dbi)
{
    MDB_txn *txn;
    ck_assert_int_eq(mdb_env_create(env), MDB_SUCCESS);
    ck_assert_int_eq(mdb_env_set_maxdbs(*env, STORE_DB_COUNT), MDB_SUCCESS);
    ck_assert_int_eq(mdb_env_open(*env, path, 0, 0600), MDB_SUCCESS);
    ck_assert_int_eq(mdb_txn_begin(*env, NULL, 0, &txn), MDB_SUCCESS);
    ck_assert_int_eq(mdb_dbi_open(txn, name, 0, dbi), MDB_SUCCESS);
    return txn;
}

static void raw_commit_close(MDB_env *env, MDB_txn *txn)
{
    ck_assert_int_eq(mdb_txn_commit(txn), MDB_SUCCESS);
    mdb_env_close(env);
}

/* TALLY_ok and a copy in out (NUL-terminated), or the get error. */
static int get_str(store *st, store_db db, const char *key, char *out, size_t out_size)
{
    store_txn t;
    ck_assert_int_eq(store_txn_begin(st, NULL, true, &t), TALLY_ok);
    MDB_val v;
    int rc = store_get(&t, db, key, strlen(key), &v);
    if (rc == TALLY_ok)
        snprintf(out, out_size, "%.*s", (int)v.mv_size, (const char *)v.mv_data);
    store_txn_abort(&t);
    return rc;
}

START_TEST(open_creates_directory_and_all_named_databases)
{
    tmp_path p;
    tmp_path_make(&p);
    struct stat sb;
    ck_assert_int_eq(stat(p.path, &sb), -1);
    store *st = open_writer(p.path);
    ck_assert_int_eq(stat(p.path, &sb), 0);
    ck_assert(S_ISDIR(sb.st_mode));
    ck_assert_uint_eq(sb.st_mode & 0777, 0700);
    ck_assert_str_eq(store_path(st), p.path);

    /* The ten databases of BRIEF §4 keep their enum slots and names; databases
     * added later come after them. */
    ck_assert_int_ge(STORE_DB_COUNT, EXPECTED_DBS);
    for (int i = 0; i < EXPECTED_DBS; i++)
        ck_assert_str_eq(store_db_name((store_db)i), expected_names[i]);

    MDB_txn *txn;
    ck_assert_int_eq(mdb_txn_begin(store_env(st), NULL, MDB_RDONLY, &txn), MDB_SUCCESS);
    for (int i = 0; i < EXPECTED_DBS; i++) {
        MDB_dbi dbi;
        int rc = mdb_dbi_open(txn, expected_names[i], 0, &dbi);
        ck_assert_msg(rc == MDB_SUCCESS, "database %s: %s", expected_names[i], mdb_strerror(rc));
        ck_assert_uint_eq(dbi, store_dbi(st, (store_db)i));
    }
    for (int i = 0; i < STORE_DB_COUNT; i++) {
        MDB_dbi dbi;
        int rc = mdb_dbi_open(txn, store_db_name((store_db)i), 0, &dbi);
        ck_assert_msg(rc == MDB_SUCCESS, "database %s: %s", store_db_name((store_db)i),
                      mdb_strerror(rc));
        ck_assert_uint_eq(dbi, store_dbi(st, (store_db)i));
    }
    /* The probe can fail: a name that was never created is not there. */
    MDB_dbi other;
    ck_assert_int_ne(mdb_dbi_open(txn, "no_such_db", 0, &other), MDB_SUCCESS);
    /* No database beyond the declared ones. */
    MDB_dbi main_db;
    MDB_stat ms;
    ck_assert_int_eq(mdb_dbi_open(txn, NULL, 0, &main_db), MDB_SUCCESS);
    ck_assert_int_eq(mdb_stat(txn, main_db, &ms), MDB_SUCCESS);
    ck_assert_uint_eq(ms.ms_entries, STORE_DB_COUNT);
    mdb_txn_abort(txn);

    store_close(st);
    test_remove_dir(p.dir);
}
END_TEST

START_TEST(open_of_a_file_instead_of_a_directory_is_refused)
{
    tmp_path p;
    tmp_path_make(&p);
    FILE *f = fopen(p.path, "w");
    ck_assert_ptr_nonnull(f);
    fclose(f);
    store_options opt = {.path = p.path};
    store *st = (store *)0x1;
    ck_assert_int_eq(store_open(&opt, &st), TALLY_invalid_argument);
    ck_assert_ptr_eq(st, (store *)0x1); /* set only on success */
    test_remove_dir(p.dir);
}
END_TEST

START_TEST(second_writer_on_the_same_directory_is_locked_out)
{
    tmp_path p;
    tmp_path_make(&p);
    store *st = open_writer(p.path);
    store_options opt = {.path = p.path};
    store *second = NULL;
    ck_assert_int_eq(store_open(&opt, &second), TALLY_store_locked);
    ck_assert_ptr_null(second);

    /* Another process is locked out too. */
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        store *other = NULL;
        _exit(store_open(&opt, &other));
    }
    int status;
    ck_assert_int_eq(waitpid(pid, &status, 0), pid);
    ck_assert(WIFEXITED(status));
    ck_assert_int_eq(WEXITSTATUS(status), TALLY_store_locked);

    /* The first writer still works, and closing it releases the lock. */
    put_str(st, "k", "v");
    store_close(st);
    st = open_writer(p.path);
    char buf[8];
    ck_assert_int_eq(get_str(st, STORE_DB_ACCOUNTS, "k", buf, sizeof(buf)), TALLY_ok);
    ck_assert_str_eq(buf, "v");
    store_close(st);
    test_remove_dir(p.dir);
}
END_TEST

START_TEST(read_only_open_of_a_missing_directory_fails)
{
    tmp_path p;
    tmp_path_make(&p);
    store_options opt = {.path = p.path, .read_only = true};
    store *st = NULL;
    ck_assert_int_eq(store_open(&opt, &st), TALLY_not_found);
    ck_assert_ptr_null(st);
    struct stat sb;
    ck_assert_int_eq(stat(p.path, &sb), -1); /* and it was not created */
    ck_assert_int_eq(errno, ENOENT);
    test_remove_dir(p.dir);
}
END_TEST

/* Child side of the reader test: exit codes name the failed step, and the
 * reason goes to stderr. */
static int reader_child(const char *path, int ready_fd, int go_fd)
{
    store_options opt = {.path = path, .read_only = true, .no_lock = true};
    store *st = NULL;
    int rc = store_open(&opt, &st);
    if (rc != TALLY_ok) {
        fprintf(stderr, "reader: store_open: %s\n", tally_strerror(rc));
        return 10;
    }
    char buf[32] = "";
    rc = get_str(st, STORE_DB_ACCOUNTS, "first", buf, sizeof(buf));
    if (rc != TALLY_ok || strcmp(buf, "1") != 0) {
        fprintf(stderr, "reader: get \"first\" on a read-only store: %s\n", tally_strerror(rc));
        return 11;
    }
    if (get_str(st, STORE_DB_ACCOUNTS, "second", buf, sizeof(buf)) != TALLY_not_found)
        return 12;
    store_txn t;
    if (store_txn_begin(st, NULL, false, &t) != TALLY_read_only)
        return 13;
    if (write(ready_fd, "r", 1) != 1)
        return 14;
    char c;
    if (read(go_fd, &c, 1) != 1)
        return 15;
    /* The writer committed "second" meanwhile: a new read txn sees it. */
    if (get_str(st, STORE_DB_ACCOUNTS, "second", buf, sizeof(buf)) != TALLY_ok ||
        strcmp(buf, "2") != 0)
        return 16;
    store_close(st);
    return 0;
}

START_TEST(read_only_handle_alongside_a_writer_sees_committed_data)
{
    tmp_path p;
    tmp_path_make(&p);
    store *st = open_writer(p.path);
    put_str(st, "first", "1");

    int ready[2], go[2];
    ck_assert_int_eq(pipe(ready), 0);
    ck_assert_int_eq(pipe(go), 0);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        close(ready[0]);
        close(go[1]);
        _exit(reader_child(p.path, ready[1], go[0]));
    }
    close(ready[1]);
    close(go[0]);
    char c;
    if (read(ready[0], &c, 1) == 1) { /* else the child failed: see its status */
        put_str(st, "second", "2");
        ck_assert_int_eq(write(go[1], "g", 1), 1);
    }
    int status;
    ck_assert_int_eq(waitpid(pid, &status, 0), pid);
    ck_assert(WIFEXITED(status));
    ck_assert_msg(WEXITSTATUS(status) == 0, "reader failed at step %d", WEXITSTATUS(status));
    close(ready[0]);
    close(go[1]);

    /* A read-only handle does not take the writer lock either. */
    pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        store_options opt = {.path = p.path, .read_only = true};
        store *ro = NULL;
        int rc = store_open(&opt, &ro);
        store_close(ro);
        _exit(rc);
    }
    ck_assert_int_eq(waitpid(pid, &status, 0), pid);
    ck_assert(WIFEXITED(status));
    ck_assert_int_eq(WEXITSTATUS(status), TALLY_ok);

    store_close(st);
    test_remove_dir(p.dir);
}
END_TEST

START_TEST(map_size_out_of_bounds_is_invalid_argument)
{
    tmp_path p;
    tmp_path_make(&p);
    store *st = NULL;
    store_options opt = {.path = p.path, .map_size_bytes = TALLY_MAP_SIZE_BYTES_MIN - 1};
    ck_assert_int_eq(store_open(&opt, &st), TALLY_invalid_argument);
    opt.map_size_bytes = 4096;
    ck_assert_int_eq(store_open(&opt, &st), TALLY_invalid_argument);
    opt.map_size_bytes = TALLY_MAP_SIZE_BYTES_MAX + 1;
    ck_assert_int_eq(store_open(&opt, &st), TALLY_invalid_argument);
    ck_assert_ptr_null(st);
    struct stat sb;
    ck_assert_int_eq(stat(p.path, &sb), -1); /* refused before touching the disk */

    opt.path = "";
    opt.map_size_bytes = 0;
    ck_assert_int_eq(store_open(&opt, &st), TALLY_invalid_argument);
    opt.path = NULL;
    ck_assert_int_eq(store_open(&opt, &st), TALLY_invalid_argument);
    ck_assert_int_eq(store_open(NULL, &st), TALLY_invalid_argument);

    opt.path = p.path;
    opt.map_size_bytes = TALLY_MAP_SIZE_BYTES_MIN;
    ck_assert_int_eq(store_open(&opt, &st), TALLY_ok);
    store_close(st);
    test_remove_dir(p.dir);
}
END_TEST

/* why names the store's data.mdb and says text. */
static void expect_why(const char *why, const char *dir, const char *text)
{
    char file[TALLY_PATH_BYTES_MAX + 16];
    snprintf(file, sizeof(file), "%s/data.mdb", dir);
    ck_assert_msg(strstr(why, file) != NULL, "the reason does not name %s: %s", file, why);
    ck_assert_msg(strstr(why, text) != NULL, "the reason lacks '%s': %s", text, why);
}

/* Overwrite meta "format_version" through a raw LMDB write. */
static void tamper_format(store *st, const void *val, size_t len)
{
    MDB_txn *txn;
    ck_assert_int_eq(mdb_txn_begin(store_env(st), NULL, 0, &txn), MDB_SUCCESS);
    MDB_val k = {14, (void *)"format_version"}, v = {len, (void *)val};
    ck_assert_int_eq(mdb_put(txn, store_dbi(st, STORE_DB_META), &k, &v, 0), MDB_SUCCESS);
    ck_assert_int_eq(mdb_txn_commit(txn), MDB_SUCCESS);
}

START_TEST(format_version_mismatch_is_refused)
{
    tmp_path p;
    tmp_path_make(&p);
    store *st = open_writer(p.path);
    /* The stored version is the current one, 4 bytes big-endian. */
    MDB_txn *txn;
    ck_assert_int_eq(mdb_txn_begin(store_env(st), NULL, MDB_RDONLY, &txn), MDB_SUCCESS);
    MDB_val k = {14, (void *)"format_version"}, v;
    ck_assert_int_eq(mdb_get(txn, store_dbi(st, STORE_DB_META), &k, &v), MDB_SUCCESS);
    ck_assert_uint_eq(v.mv_size, 4);
    ck_assert_uint_eq(get_u32_be(v.mv_data), STORE_FORMAT_VERSION);
    mdb_txn_abort(txn);

    /* Formats 1 to 12 open: read-only as they are; a writer refuses
     * them, saying what to do, unless it may upgrade (tallyd --upgrade),
     * and then marks them 13; from before 7 it also puts the mark that
     * has the indexes built anew (format 6's transfer index has account
     * entries format 7 does not keep), from 7 not (its indexes are
     * current: format 8 changed only the account record, read in every
     * format, format 9's index reads format 8's entries, format 10's
     * history the entries before it as blocks of one seq, format 11's
     * inbox the records before it, format 12's the keys before it,
     * with the mark of an inbox that holds records: none here, and
     * format 13's log the events before it). */
    ck_assert_uint_eq(STORE_FORMAT_VERSION, 13);
    MDB_val mark = {13, (void *)"index_pending"};
    for (uint32_t f = 1; f <= 12; f++) {
        uint8_t old[4];
        put_u32_be(old, f);
        tamper_format(st, old, sizeof(old));
        store_close(st);
        store_options ro = {.path = p.path, .read_only = true, .no_lock = true};
        ck_assert_int_eq(store_open(&ro, &st), TALLY_ok);
        ck_assert_uint_eq(store_upgraded_from(st), 0);
        store_close(st);
        char refused[TALLY_PATH_BYTES_MAX + 400] = "";
        store_options w = {.path = p.path, .map_size_bytes = UINT64_C(16) << 20, .why = refused,
                           .why_bytes = sizeof(refused)};
        ck_assert_int_eq(store_open(&w, &st), TALLY_store_version_mismatch);
        ck_assert_msg(strstr(refused, "from an older tally") && strstr(refused, "--upgrade"),
                      "%s", refused);
        w.upgrade = true;
        ck_assert_int_eq(store_open(&w, &st), TALLY_ok);
        ck_assert_uint_eq(store_upgraded_from(st), f);
        store_close(st);
        st = open_writer(p.path);
        ck_assert_uint_eq(store_upgraded_from(st), 0); /* current now */
        ck_assert_int_eq(mdb_txn_begin(store_env(st), NULL, MDB_RDONLY, &txn), MDB_SUCCESS);
        ck_assert_int_eq(mdb_get(txn, store_dbi(st, STORE_DB_META), &k, &v), MDB_SUCCESS);
        ck_assert_uint_eq(get_u32_be(v.mv_data), STORE_FORMAT_VERSION);
        ck_assert_int_eq(mdb_get(txn, store_dbi(st, STORE_DB_META), &mark, &v),
                         f < 7 ? MDB_SUCCESS : MDB_NOTFOUND);
        mdb_txn_abort(txn);
        if (f >= 7)
            continue;
        ck_assert_int_eq(mdb_txn_begin(store_env(st), NULL, 0, &txn), MDB_SUCCESS);
        ck_assert_int_eq(mdb_del(txn, store_dbi(st, STORE_DB_META), &mark, NULL), MDB_SUCCESS);
        ck_assert_int_eq(mdb_txn_commit(txn), MDB_SUCCESS);
    }

    uint8_t next[4];
    put_u32_be(next, STORE_FORMAT_VERSION + 1);
    tamper_format(st, next, sizeof(next));
    store_close(st);

    char why[TALLY_PATH_BYTES_MAX + 256] = "";
    store_options opt = {.path = p.path, .map_size_bytes = UINT64_C(16) << 20, .why = why,
                         .why_bytes = sizeof(why)};
    st = NULL;
    ck_assert_int_eq(store_open(&opt, &st), TALLY_store_version_mismatch);
    ck_assert_ptr_null(st);
    expect_why(why, p.path, "store format 14, written by a newer tally; this one reads formats 1 to 13: run a tally that reads it");
    opt.read_only = true;
    ck_assert_int_eq(store_open(&opt, &st), TALLY_store_version_mismatch);
    opt.read_only = false;

    /* A value of the wrong size, or format 0, is a garbled record: damage,
     * not another format, and not a crash. */
    MDB_env *env;
    MDB_dbi meta;
    txn = raw_write_txn(p.path, "meta", &env, &meta);
    v = (MDB_val){3, (void *)"\x00\x00\x01"};
    ck_assert_int_eq(mdb_put(txn, meta, &k, &v, 0), MDB_SUCCESS);
    raw_commit_close(env, txn);
    ck_assert_int_eq(store_open(&opt, &st), TALLY_corrupt_record);
    ck_assert_ptr_null(st);
    expect_why(why, p.path, "the format record (meta \"format_version\") is garbled (3 bytes");
    txn = raw_write_txn(p.path, "meta", &env, &meta);
    v = (MDB_val){4, (void *)"\x00\x00\x00\x00"};
    ck_assert_int_eq(mdb_put(txn, meta, &k, &v, 0), MDB_SUCCESS);
    raw_commit_close(env, txn);
    ck_assert_int_eq(store_open(&opt, &st), TALLY_corrupt_record);
    expect_why(why, p.path, "is garbled (format 0");

    /* A missing record in a store that holds data is damage too (a
     * writer must not take the store for a new one and mark it). */
    txn = raw_write_txn(p.path, "meta", &env, &meta);
    ck_assert_int_eq(mdb_del(txn, meta, &k, NULL), MDB_SUCCESS);
    raw_commit_close(env, txn);
    ck_assert_int_eq(store_open(&opt, &st), TALLY_corrupt_record);
    expect_why(why, p.path, "the format record (meta \"format_version\") is missing, yet the store holds data");
    opt.read_only = true;
    ck_assert_int_eq(store_open(&opt, &st), TALLY_corrupt_record);
    test_remove_dir(p.dir);
}
END_TEST

/* ---- LMDB's meta pages (log/store_meta.c), damaged in the file ---- */

/* Offsets in a meta page (LMDB data format 1, 64-bit; store_meta.c). */
#define META_VERSION_AT 20
#define META_TXNID_AT 144

/* Write (or with write false read) len bytes of dir/data.mdb at at. */
static void file_io_at(const char *dir, bool write, off_t at, void *bytes, size_t len)
{
    char file[TALLY_PATH_BYTES_MAX + 16];
    snprintf(file, sizeof(file), "%s/data.mdb", dir);
    int fd = open(file, write ? O_RDWR : O_RDONLY);
    ck_assert_int_ge(fd, 0);
    ssize_t done = write ? pwrite(fd, bytes, len, at) : pread(fd, bytes, len, at);
    ck_assert_int_eq(done, (ssize_t)len);
    close(fd);
}

static void file_write_at(const char *dir, off_t at, const void *bytes, size_t len)
{
    file_io_at(dir, true, at, (void *)bytes, len);
}

static void file_read_at(const char *dir, off_t at, void *bytes, size_t len)
{
    file_io_at(dir, false, at, bytes, len);
}

/* A closed store with a few commits, and a pristine copy of its data.mdb
 * to put back between the cases. */
static void meta_store(tmp_path *p, uint8_t **pristine, size_t *len, long *page)
{
    tmp_path_make(p);
    store *st = open_writer(p->path);
    put_str(st, "a", "1");
    put_str(st, "b", "2");
    put_str(st, "c", "3");
    store_close(st);
    char file[TALLY_PATH_BYTES_MAX + 16];
    snprintf(file, sizeof(file), "%s/data.mdb", p->path);
    struct stat sb;
    ck_assert_int_eq(stat(file, &sb), 0);
    *len = (size_t)sb.st_size;
    *pristine = malloc(*len);
    ck_assert_ptr_nonnull(*pristine);
    file_read_at(p->path, 0, *pristine, *len);
    *page = sysconf(_SC_PAGESIZE);
}

static int open_checked(const char *path, bool check, char *why, size_t why_bytes)
{
    why[0] = '\0';
    store_options o = {.path = path, .map_size_bytes = UINT64_C(16) << 20, .why = why,
                       .why_bytes = why_bytes, .check_meta_pages = check};
    store *st = NULL;
    int rc = store_open(&o, &st);
    store_close(st);
    return rc;
}

/* Issue 30, item 12: a damaged meta page is named as such (which file,
 * which page, what), never reported as another format; a file of another
 * LMDB data format (both pages) is; with check_meta_pages, damage that
 * LMDB would use as it is is refused before LMDB uses it. */
START_TEST(damaged_meta_pages_are_named)
{
    tmp_path p;
    uint8_t *pristine;
    size_t len;
    long page;
    meta_store(&p, &pristine, &len, &page);
    char why[TALLY_PATH_BYTES_MAX + 256];
    ck_assert_int_eq(store_meta_pages_check(p.path, why, sizeof(why)), TALLY_ok);
    ck_assert_int_eq(open_checked(p.path, true, why, sizeof(why)), TALLY_ok);
    file_write_at(p.path, 0, pristine, len);

    /* The magic number of page 0: LMDB refuses (MDB_INVALID); the reason
     * says which page. */
    uint8_t bad = pristine[16] ^ 0xff;
    file_write_at(p.path, 16, &bad, 1);
    ck_assert_int_eq(open_checked(p.path, false, why, sizeof(why)), TALLY_corrupt_record);
    expect_why(why, p.path, "LMDB meta page 0 is damaged (bad magic number)");
    file_write_at(p.path, 0, pristine, len);

    /* The data format of one page (MDB_VERSION_MISMATCH from LMDB): damage,
     * not another format. */
    uint32_t two = 2;
    file_write_at(p.path, page + META_VERSION_AT, &two, 4);
    ck_assert_int_eq(open_checked(p.path, false, why, sizeof(why)), TALLY_corrupt_record);
    expect_why(why, p.path, "LMDB meta page 1 is damaged (it says LMDB data format 2, page 0 says 1)");
    ck_assert_msg(strstr(why, "store format") == NULL, "%s", why);
    /* ... of both: a file of another LMDB. */
    file_write_at(p.path, META_VERSION_AT, &two, 4);
    ck_assert_int_eq(open_checked(p.path, false, why, sizeof(why)), TALLY_store_version_mismatch);
    expect_why(why, p.path, "LMDB meta page 0 has LMDB data format 2; this LMDB");
    file_write_at(p.path, 0, pristine, len);

    /* The older page's transaction id: LMDB opens it as it is; the check
     * refuses it. */
    uint64_t ids[2];
    file_read_at(p.path, META_TXNID_AT, &ids[0], 8);
    file_read_at(p.path, page + META_TXNID_AT, &ids[1], 8);
    int older = ids[0] < ids[1] ? 0 : 1;
    ck_assert_uint_ge(ids[older], 2);
    uint64_t earlier = ids[older] - 2; /* the same parity: only the distance is wrong */
    file_write_at(p.path, older * page + META_TXNID_AT, &earlier, 8);
    ck_assert_int_eq(open_checked(p.path, false, why, sizeof(why)), TALLY_ok);
    file_write_at(p.path, older * page + META_TXNID_AT, &earlier, 8); /* a commit rewrote one */
    ck_assert_int_eq(open_checked(p.path, true, why, sizeof(why)), TALLY_corrupt_record);
    expect_why(why, p.path, "LMDB meta pages hold transactions");
    file_write_at(p.path, 0, pristine, len);

    /* A data.mdb cut short: LMDB would fault on the missing pages. */
    char file[TALLY_PATH_BYTES_MAX + 16];
    snprintf(file, sizeof(file), "%s/data.mdb", p.path);
    ck_assert_int_eq(truncate(file, 4 * page), 0);
    ck_assert_int_eq(store_meta_pages_check(p.path, why, sizeof(why)), TALLY_corrupt_record);
    expect_why(why, p.path, "the file was cut short");
    ck_assert_int_eq(open_checked(p.path, true, why, sizeof(why)), TALLY_corrupt_record);
    expect_why(why, p.path, "the file was cut short");
    /* An empty data.mdb (a first start that died before LMDB wrote it) is a
     * new environment to LMDB, and so to the check. */
    ck_assert_int_eq(truncate(file, 0), 0);
    ck_assert_int_eq(store_meta_pages_check(p.path, why, sizeof(why)), TALLY_ok);
    ck_assert_int_eq(open_checked(p.path, true, why, sizeof(why)), TALLY_ok);
    free(pristine);
    test_remove_dir(p.dir);
}
END_TEST

START_TEST(instance_id_is_stable_across_reopen)
{
    tmp_path p, q;
    tmp_path_make(&p);
    tmp_path_make(&q);
    store *st = open_writer(p.path);
    tally_id128 first = *store_instance_id(st);
    ck_assert(!tally_id128_is_zero(&first));
    store_close(st);
    st = open_writer(p.path);
    ck_assert(tally_id128_equal(store_instance_id(st), &first));
    store_close(st);

    store_options opt = {.path = p.path, .read_only = true};
    ck_assert_int_eq(store_open(&opt, &st), TALLY_ok);
    ck_assert(tally_id128_equal(store_instance_id(st), &first));
    store_close(st);

    /* Another store has another id. */
    st = open_writer(q.path);
    ck_assert(!tally_id128_equal(store_instance_id(st), &first));
    store_close(st);
    test_remove_dir(p.dir);
    test_remove_dir(q.dir);
}
END_TEST

START_TEST(failed_put_is_remembered_and_commit_writes_nothing)
{
    test_store ts;
    test_store_open(&ts);
    store_txn t;
    ck_assert_int_eq(store_txn_begin(ts.st, NULL, false, &t), TALLY_ok);
    ck_assert_int_eq(store_put(&t, STORE_DB_ACCOUNTS, "a", 1, "1", 1, 0), TALLY_ok);
    ck_assert_int_eq(t.error, TALLY_ok);
    /* A key longer than LMDB allows fails the put (MDB_BAD_VALSIZE). */
    char long_key[600];
    memset(long_key, 'k', sizeof(long_key));
    int rc = store_put(&t, STORE_DB_ACCOUNTS, long_key, sizeof(long_key), "x", 1, 0);
    ck_assert_int_ne(rc, TALLY_ok);
    ck_assert_int_eq(t.error, rc);
    /* Later puts are refused with the first error and change nothing. */
    ck_assert_int_eq(store_put(&t, STORE_DB_ACCOUNTS, "b", 1, "2", 1, 0), rc);
    ck_assert_int_eq(store_del(&t, STORE_DB_ACCOUNTS, "a", 1), rc);
    MDB_val v;
    ck_assert_int_eq(store_get(&t, STORE_DB_ACCOUNTS, "b", 1, &v), TALLY_not_found);
    ck_assert_int_eq(store_get(&t, STORE_DB_ACCOUNTS, "a", 1, &v), TALLY_ok);
    /* Only the first error is kept. */
    ck_assert_int_eq(store_txn_fail(&t, TALLY_io_error), TALLY_io_error);
    ck_assert_int_eq(t.error, rc);
    ck_assert_int_eq(store_txn_commit(&t), rc);
    ck_assert(!t.active);
    store_txn_abort(&t); /* safe after commit */

    ck_assert_int_eq(test_count(&ts, STORE_DB_ACCOUNTS), 0);
    char buf[8];
    ck_assert_int_eq(get_str(ts.st, STORE_DB_ACCOUNTS, "a", buf, sizeof(buf)),
                     TALLY_not_found);
    test_store_close(&ts);
}
END_TEST

START_TEST(misses_are_not_remembered)
{
    test_store ts;
    test_store_open(&ts);
    store_txn t;
    ck_assert_int_eq(store_txn_begin(ts.st, NULL, false, &t), TALLY_ok);
    MDB_val v;
    ck_assert_int_eq(store_get(&t, STORE_DB_ACCOUNTS, "x", 1, &v), TALLY_not_found);
    ck_assert_int_eq(store_del(&t, STORE_DB_ACCOUNTS, "x", 1), TALLY_not_found);
    ck_assert_int_eq(store_txn_fail(&t, TALLY_ok), TALLY_ok);
    ck_assert_int_eq(t.error, TALLY_ok);
    ck_assert_int_eq(store_put(&t, STORE_DB_ACCOUNTS, "x", 1, "1", 1, 0), TALLY_ok);
    ck_assert_int_eq(store_txn_commit(&t), TALLY_ok);
    ck_assert_int_eq(test_count(&ts, STORE_DB_ACCOUNTS), 1);

    /* store_txn_fail alone makes commit refuse. */
    ck_assert_int_eq(store_txn_begin(ts.st, NULL, false, &t), TALLY_ok);
    ck_assert_int_eq(store_put(&t, STORE_DB_ACCOUNTS, "y", 1, "1", 1, 0), TALLY_ok);
    store_txn_fail(&t, TALLY_corrupt_record);
    ck_assert_int_eq(store_txn_commit(&t), TALLY_corrupt_record);
    ck_assert_int_eq(test_count(&ts, STORE_DB_ACCOUNTS), 1);
    test_store_close(&ts);
}
END_TEST

START_TEST(nested_abort_leaves_the_parent_unchanged)
{
    test_store ts;
    test_store_open(&ts);
    store_txn parent, child;
    MDB_val v;
    ck_assert_int_eq(store_txn_begin(ts.st, NULL, false, &parent), TALLY_ok);
    ck_assert_int_eq(store_put(&parent, STORE_DB_ACCOUNTS, "a", 1, "1", 1, 0), TALLY_ok);

    ck_assert_int_eq(store_txn_begin(ts.st, &parent, false, &child), TALLY_ok);
    ck_assert_ptr_eq(child.parent, &parent);
    ck_assert_int_eq(store_put(&child, STORE_DB_ACCOUNTS, "a", 1, "2", 1, 0), TALLY_ok);
    ck_assert_int_eq(store_put(&child, STORE_DB_ACCOUNTS, "b", 1, "1", 1, 0), TALLY_ok);
    ck_assert_int_eq(store_del(&child, STORE_DB_ACCOUNTS, "a", 1), TALLY_ok);
    store_txn_fail(&child, TALLY_internal);
    store_txn_abort(&child);

    ck_assert_int_eq(parent.error, TALLY_ok); /* the child's error stays in the child */
    ck_assert_int_eq(store_get(&parent, STORE_DB_ACCOUNTS, "a", 1, &v), TALLY_ok);
    ck_assert_mem_eq(v.mv_data, "1", 1);
    ck_assert_int_eq(store_get(&parent, STORE_DB_ACCOUNTS, "b", 1, &v), TALLY_not_found);

    /* A committed child merges into the parent. */
    ck_assert_int_eq(store_txn_begin(ts.st, &parent, false, &child), TALLY_ok);
    ck_assert_int_eq(store_put(&child, STORE_DB_ACCOUNTS, "c", 1, "3", 1, 0), TALLY_ok);
    ck_assert_int_eq(store_txn_commit(&child), TALLY_ok);
    ck_assert_int_eq(store_get(&parent, STORE_DB_ACCOUNTS, "c", 1, &v), TALLY_ok);

    /* A child that remembered an error refuses its commit; the parent goes on. */
    ck_assert_int_eq(store_txn_begin(ts.st, &parent, false, &child), TALLY_ok);
    ck_assert_int_eq(store_put(&child, STORE_DB_ACCOUNTS, "d", 1, "4", 1, 0), TALLY_ok);
    store_txn_fail(&child, TALLY_storage_full);
    ck_assert_int_eq(store_txn_commit(&child), TALLY_storage_full);
    ck_assert_int_eq(store_get(&parent, STORE_DB_ACCOUNTS, "d", 1, &v), TALLY_not_found);

    ck_assert_int_eq(store_txn_commit(&parent), TALLY_ok);
    char buf[8];
    ck_assert_int_eq(get_str(ts.st, STORE_DB_ACCOUNTS, "a", buf, sizeof(buf)), TALLY_ok);
    ck_assert_str_eq(buf, "1");
    ck_assert_int_eq(get_str(ts.st, STORE_DB_ACCOUNTS, "c", buf, sizeof(buf)), TALLY_ok);
    ck_assert_int_eq(get_str(ts.st, STORE_DB_ACCOUNTS, "b", buf, sizeof(buf)),
                     TALLY_not_found);
    ck_assert_int_eq(get_str(ts.st, STORE_DB_ACCOUNTS, "d", buf, sizeof(buf)),
                     TALLY_not_found);
    ck_assert_int_eq(test_count(&ts, STORE_DB_ACCOUNTS), 2);
    test_store_close(&ts);
}
END_TEST

START_TEST(aborted_transaction_writes_nothing)
{
    test_store ts;
    test_store_open(&ts);
    store_txn t;
    memset(&t, 0, sizeof(t));
    store_txn_abort(&t); /* never begun: safe */
    ck_assert_int_eq(store_txn_begin(ts.st, NULL, false, &t), TALLY_ok);
    ck_assert_int_eq(store_put(&t, STORE_DB_ACCOUNTS, "a", 1, "1", 1, 0), TALLY_ok);
    store_txn_abort(&t);
    store_txn_abort(&t); /* twice: safe */
    ck_assert_int_eq(test_count(&ts, STORE_DB_ACCOUNTS), 0);
    test_store_reopen(&ts);
    ck_assert_int_eq(test_count(&ts, STORE_DB_ACCOUNTS), 0);
    test_store_close(&ts);
}
END_TEST

START_TEST(translate_maps_lmdb_and_errno_codes)
{
    ck_assert_int_eq(store_translate(MDB_SUCCESS), TALLY_ok);
    ck_assert_int_eq(store_translate(MDB_MAP_FULL), TALLY_storage_full);
    ck_assert_int_eq(store_translate(ENOSPC), TALLY_storage_full);
    ck_assert_int_eq(store_translate(EDQUOT), TALLY_storage_full);
    ck_assert_int_eq(store_translate(MDB_NOTFOUND), TALLY_not_found);
    ck_assert_int_eq(store_translate(MDB_TXN_FULL), TALLY_transaction_full);
    ck_assert_int_eq(store_translate(ENOMEM), TALLY_out_of_memory);
    ck_assert_int_eq(store_translate(EIO), TALLY_io_error);
    ck_assert_int_eq(store_translate(MDB_CORRUPTED), TALLY_corrupt_record);
    ck_assert_int_eq(store_translate(MDB_PAGE_NOTFOUND), TALLY_corrupt_record);
    ck_assert_int_eq(store_translate(MDB_VERSION_MISMATCH), TALLY_store_version_mismatch);
    ck_assert_int_eq(store_translate(EACCES), TALLY_read_only);
    ck_assert_int_eq(store_translate(ENOENT), TALLY_not_found);
    /* Nothing unknown leaks through as a raw code. */
    ck_assert_int_eq(store_translate(MDB_BAD_VALSIZE), TALLY_internal);
    ck_assert_int_eq(store_translate(EPIPE), TALLY_io_error);
}
END_TEST

START_TEST(real_map_full_is_storage_full_and_remembered)
{
    tmp_path p;
    tmp_path_make(&p);
    store_options opt = {.path = p.path, .map_size_bytes = TALLY_MAP_SIZE_BYTES_MIN};
    store *st = NULL;
    ck_assert_int_eq(store_open(&opt, &st), TALLY_ok);
    store_txn t;
    ck_assert_int_eq(store_txn_begin(st, NULL, false, &t), TALLY_ok);
    static uint8_t value[3000];
    int rc = TALLY_ok;
    uint32_t n;
    for (n = 0; n < 10000 && rc == TALLY_ok; n++) {
        uint8_t key[4];
        put_u32_be(key, n);
        rc = store_put(&t, STORE_DB_ACCOUNTS, key, 4, value, sizeof(value), 0);
    }
    ck_assert_msg(rc == TALLY_storage_full, "after %u puts: %s", n, tally_strerror(rc));
    ck_assert_int_eq(t.error, TALLY_storage_full);
    ck_assert_int_eq(store_txn_commit(&t), TALLY_storage_full);

    /* The store is still usable, and a small write fits. */
    ck_assert_int_eq(store_txn_begin(st, NULL, true, &t), TALLY_ok);
    uint64_t entries, used, map;
    ck_assert_int_eq(store_count(&t, STORE_DB_ACCOUNTS, &entries), TALLY_ok);
    ck_assert_uint_eq(entries, 0);
    ck_assert_int_eq(store_map_usage(&t, &used, &map), TALLY_ok);
    ck_assert_uint_eq(map, TALLY_MAP_SIZE_BYTES_MIN);
    ck_assert_uint_le(used, map);
    store_txn_abort(&t);
    put_str(st, "small", "ok");
    store_close(st);
    test_remove_dir(p.dir);
}
END_TEST

START_TEST(read_only_store_reads_committed_data)
{
    tmp_path p;
    tmp_path_make(&p);
    store *st = open_writer(p.path);
    put_str(st, "k", "committed");
    store_close(st);
    store_options opt = {.path = p.path, .read_only = true};
    ck_assert_int_eq(store_open(&opt, &st), TALLY_ok);
    char buf[16] = "";
    int rc = get_str(st, STORE_DB_ACCOUNTS, "k", buf, sizeof(buf));
    ck_assert_msg(rc == TALLY_ok, "get on a read-only store: %s", tally_strerror(rc));
    ck_assert_str_eq(buf, "committed");
    ck_assert_int_eq(get_str(st, STORE_DB_ACCOUNTS, "other", buf, sizeof(buf)),
                     TALLY_not_found);
    store_close(st);
    test_remove_dir(p.dir);
}
END_TEST

/* A store written before failed_ids (format 1), history_tail (formats
 * 1-3) or history_recent (formats 1-4) existed: it opens read-only (the
 * database reads as empty) and a writer creates the database. */
START_TEST(store_without_a_later_database_opens)
{
    static const store_db later[] = {STORE_DB_FAILED_IDS, STORE_DB_HISTORY_TAIL,
                                     STORE_DB_HISTORY_RECENT};
    for (size_t d = 0; d < sizeof(later) / sizeof(later[0]); d++) {
        store_db db = later[d];
        tmp_path p;
        tmp_path_make(&p);
        store *st = open_writer(p.path);
        store_close(st);
        MDB_env *env;
        MDB_dbi dbi;
        MDB_txn *txn = raw_write_txn(p.path, store_db_name(db), &env, &dbi);
        ck_assert_int_eq(mdb_drop(txn, dbi, 1), MDB_SUCCESS); /* gone, as in an older store */
        raw_commit_close(env, txn);

        store_options opt = {.path = p.path, .read_only = true};
        ck_assert_int_eq(store_open(&opt, &st), TALLY_ok);
        store_txn t;
        ck_assert_int_eq(store_txn_begin(st, NULL, true, &t), TALLY_ok);
        uint64_t n = 1;
        MDB_val v;
        MDB_cursor *cur;
        ck_assert_int_eq(store_count(&t, db, &n), TALLY_ok);
        ck_assert_uint_eq(n, 0);
        ck_assert_int_eq(store_get(&t, db, "0123456789abcdef", 16, &v), TALLY_not_found);
        ck_assert_int_eq(store_cursor_open(&t, db, &cur), TALLY_not_found);
        store_txn_abort(&t);
        store_close(st);

        st = open_writer(p.path);
        ck_assert_int_eq(store_txn_begin(st, NULL, false, &t), TALLY_ok);
        ck_assert_int_eq(store_put(&t, db, "0123456789abcdef", 16, "x", 1, 0), TALLY_ok);
        ck_assert_int_eq(store_txn_commit(&t), TALLY_ok);
        store_close(st);
        ck_assert_int_eq(store_open(&opt, &st), TALLY_ok);
        ck_assert_int_eq(store_txn_begin(st, NULL, true, &t), TALLY_ok);
        ck_assert_int_eq(store_count(&t, db, &n), TALLY_ok);
        ck_assert_uint_eq(n, 1);
        store_txn_abort(&t);
        store_close(st);
        test_remove_dir(p.dir);
    }
}
END_TEST

START_TEST(write_txn_on_read_only_store_is_refused)
{
    tmp_path p;
    tmp_path_make(&p);
    store *st = open_writer(p.path);
    store_close(st);
    store_options opt = {.path = p.path, .read_only = true};
    ck_assert_int_eq(store_open(&opt, &st), TALLY_ok);
    store_txn t;
    ck_assert_int_eq(store_txn_begin(st, NULL, false, &t), TALLY_read_only);
    ck_assert(!t.active);
    ck_assert_int_eq(store_txn_begin(st, NULL, true, &t), TALLY_ok);
    store_txn_abort(&t);
    store_close(st);
    store_close(NULL);
    test_remove_dir(p.dir);
}
END_TEST

#define TIMEOUT_S 30

static Suite *store_suite(void)
{
    const test_row tests[] = {
        {"creates", open_creates_directory_and_all_named_databases, TIMEOUT_S},
        {"not_a_dir", open_of_a_file_instead_of_a_directory_is_refused, TIMEOUT_S},
        {"locked", second_writer_on_the_same_directory_is_locked_out, TIMEOUT_S},
        {"ro_missing", read_only_open_of_a_missing_directory_fails, TIMEOUT_S},
        {"ro_alongside", read_only_handle_alongside_a_writer_sees_committed_data, TIMEOUT_S},
        {"map_size", map_size_out_of_bounds_is_invalid_argument, TIMEOUT_S},
        {"format", format_version_mismatch_is_refused, TIMEOUT_S},
        {"meta_pages", damaged_meta_pages_are_named, TIMEOUT_S},
        {"instance_id", instance_id_is_stable_across_reopen, TIMEOUT_S},
        {"first_error", failed_put_is_remembered_and_commit_writes_nothing, TIMEOUT_S},
        {"misses", misses_are_not_remembered, TIMEOUT_S},
        {"nested", nested_abort_leaves_the_parent_unchanged, TIMEOUT_S},
        {"abort", aborted_transaction_writes_nothing, TIMEOUT_S},
        {"translate", translate_maps_lmdb_and_errno_codes, TIMEOUT_S},
        {"map_full", real_map_full_is_storage_full_and_remembered, TIMEOUT_S},
        {"ro_reads", read_only_store_reads_committed_data, TIMEOUT_S},
        {"read_only", write_txn_on_read_only_store_is_refused, TIMEOUT_S},
        {"later_database", store_without_a_later_database_opens, TIMEOUT_S},
    };
    return test_suite_of_rows("store", TEST_ROWS(tests));
}

int main(void) { return test_run_suite(store_suite()); }
