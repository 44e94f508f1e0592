/*
 * store.c — opening the LMDB environment, transactions (error translation:
 * common/lmdb_error.c).
 *
 * Durability: the environment is opened without MDB_NOSYNC/MDB_NOMETASYNC,
 * so a returned commit is on disk. MDB_NOTLS lets read transactions live on
 * any thread (tallyd's readers). MDB_WRITEMAP is not used: LMDB does not
 * support nested transactions with it (chains and fault redo use them), and
 * measured it was slower here (docs/BENCHMARKS.md).
 */
#include "log/store.h"

#include "common/error.h"
#include "common/limits.h"

#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/resource.h>
#include <sys/statvfs.h>
#include <sys/stat.h>
#include <unistd.h>

struct store {
    MDB_env *env;
    MDB_dbi dbi[STORE_DB_COUNT];
    bool absent[STORE_DB_COUNT]; /* read-only, on a store older than the database */
    int lock_fd;
    bool read_only;
    tally_id128 instance_id;
    const tally_id128 *new_instance_id; /* store_options.instance_id, while opening */
    char path[TALLY_PATH_BYTES_MAX + 1];
    char *why; /* store_options.why, while opening */
    size_t why_bytes;
    bool upgrade;           /* store_options.upgrade */
    uint32_t upgraded_from; /* the format marked current at this open, or 0 */
    _Atomic uint64_t map_max_bytes; /* what the map may grow to; 0 = not set (its size) */
};

static const char *const db_names[STORE_DB_COUNT] = {
    [STORE_DB_ACCOUNTS] = "accounts",   [STORE_DB_TRANSFERS] = "transfers",
    [STORE_DB_ENTITLEMENTS] = "entitlements", [STORE_DB_EXPIRY] = "expiry",
    [STORE_DB_LOG] = "log",             [STORE_DB_INBOX] = "inbox",
    [STORE_DB_INBOX_TIME] = "inbox_time", [STORE_DB_CURSORS] = "cursors",
    [STORE_DB_DLQ] = "dlq",             [STORE_DB_META] = "meta",
    [STORE_DB_HISTORY] = "history",     [STORE_DB_CHECKPOINT] = "checkpoint",
    [STORE_DB_FAILED_IDS] = "failed_ids", [STORE_DB_HISTORY_TAIL] = "history_tail",
    [STORE_DB_HISTORY_RECENT] = "history_recent",
    [STORE_DB_ACCOUNT_INDEX] = "account_index", [STORE_DB_TRANSFER_INDEX] = "transfer_index",
    [STORE_DB_ENDPOINTS] = "endpoints", [STORE_DB_ENDPOINT_ATTEMPTS] = "endpoint_attempts",
};

/* Databases an older store may lack (failed_ids: format 1; history_tail:
 * formats 1-3; history_recent: formats 1-4; the indexes: formats 1-5;
 * endpoints: every store before it):
 * added since, created by the first writer that opens it. */
static bool db_added_later(int db)
{
    return db == STORE_DB_FAILED_IDS || db == STORE_DB_HISTORY_TAIL ||
           db == STORE_DB_HISTORY_RECENT || db == STORE_DB_ACCOUNT_INDEX ||
           db == STORE_DB_TRANSFER_INDEX || db == STORE_DB_ENDPOINTS ||
           db == STORE_DB_ENDPOINT_ATTEMPTS;
}

static const char meta_key_format[] = "format_version";
static const char meta_key_instance[] = "instance_id";
static const char meta_key_index_pending[] = "index_pending"; /* ledger/index.h */
static const char meta_key_inbox_text[] = "inbox_text_keys"; /* ledger/inbox.h */

const char *store_db_name(store_db db)
{
    assert(db < STORE_DB_COUNT);
    return db_names[db];
}

int store_txn_fail(store_txn *t, int err)
{
    if (err != TALLY_ok && t->error == TALLY_ok)
        t->error = err;
    return err;
}

static int store_lock(store *st)
{
    char lock_path[TALLY_PATH_BYTES_MAX + 32];
    snprintf(lock_path, sizeof(lock_path), "%s/tally.lock", st->path);
    st->lock_fd = open(lock_path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (st->lock_fd < 0)
        return store_translate(errno);
    if (flock(st->lock_fd, LOCK_EX | LOCK_NB) != 0) {
        int err = errno;
        close(st->lock_fd);
        st->lock_fd = -1;
        return err == EWOULDBLOCK ? TALLY_store_locked : store_translate(err);
    }
    return TALLY_ok;
}

int store_why(char *why, size_t why_bytes, int code, const char *fmt, ...)
{
    if (why != NULL && why_bytes > 0) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(why, why_bytes, fmt, ap);
        va_end(ap);
    }
    return code;
}

/* An LMDB code met while opening: translated, and when it means damage,
 * said with the file and what was being done, or with the meta page that
 * LMDB was misled by. */
static int store_open_fault(store *st, int mrc, const char *doing)
{
    int rc = store_translate(mrc);
    if (rc != TALLY_corrupt_record)
        return rc;
    int meta = store_meta_pages_check(st->path, st->why, st->why_bytes);
    if (meta == TALLY_corrupt_record || meta == TALLY_store_version_mismatch)
        return meta;
    return store_why(st->why, st->why_bytes, rc, "%s/data.mdb: damaged: %s: %s", st->path, doing,
                     mdb_strerror(mrc));
}

/* Whether a store without a format record is a new one: nothing in meta,
 * the log or the accounts. */
static bool store_is_new(store *st, MDB_txn *txn)
{
    static const store_db dbs[] = {STORE_DB_META, STORE_DB_LOG, STORE_DB_ACCOUNTS};
    for (size_t i = 0; i < sizeof(dbs) / sizeof(dbs[0]); i++) {
        MDB_stat ms;
        if (mdb_stat(txn, st->dbi[dbs[i]], &ms) != MDB_SUCCESS || ms.ms_entries != 0)
            return false;
    }
    return true;
}

/* The format record as found (rc: mdb_get's): a format this build reads,
 * a genuine other format, or a missing or garbled record. */
static int store_check_format(store *st, int rc, const MDB_val *val, uint32_t *version)
{
    if (rc == MDB_NOTFOUND)
        return store_why(st->why, st->why_bytes, TALLY_corrupt_record,
                         "%s/data.mdb: damaged: the format record (meta \"%s\") is missing, yet "
                         "the store holds data", st->path, meta_key_format);
    if (rc != MDB_SUCCESS)
        return store_open_fault(st, rc, "reading the format record");
    if (val->mv_size != 4)
        return store_why(st->why, st->why_bytes, TALLY_corrupt_record,
                         "%s/data.mdb: damaged: the format record (meta \"%s\") is garbled (%zu "
                         "bytes, a format is 4)", st->path, meta_key_format, val->mv_size);
    *version = get_u32_be(val->mv_data);
    if (*version == 0)
        return store_why(st->why, st->why_bytes, TALLY_corrupt_record,
                         "%s/data.mdb: damaged: the format record (meta \"%s\") is garbled "
                         "(format 0, which no tally writes)", st->path, meta_key_format);
    if (*version < STORE_FORMAT_VERSION_OLDEST || *version > STORE_FORMAT_VERSION)
        return store_why(st->why, st->why_bytes, TALLY_store_version_mismatch,
                         "%s/data.mdb: store format %u, written by a%s tally; this one reads "
                         "formats %d to %d%s", st->path, *version,
                         *version > STORE_FORMAT_VERSION ? " newer" : "n older",
                         STORE_FORMAT_VERSION_OLDEST, STORE_FORMAT_VERSION,
                         *version > STORE_FORMAT_VERSION
                             ? ": run a tally that reads it, or restore a copy taken before "
                               "it was upgraded"
                             : "");
    return TALLY_ok;
}

/* The upgrade from before format 12: the inbox may hold records of UUID
 * keys under their text, which format 12 packs (ledger/inbox.h). The
 * mark is the last inbox_time key (none: no records, no mark), which
 * ledger retention removes once the entries up to it are gone. */
static int mark_inbox_text_keys(store *st, MDB_txn *txn)
{
    MDB_cursor *cur;
    int rc = mdb_cursor_open(txn, st->dbi[STORE_DB_INBOX_TIME], &cur);
    if (rc != MDB_SUCCESS)
        return rc;
    MDB_val k, v;
    rc = mdb_cursor_get(cur, &k, &v, MDB_LAST);
    mdb_cursor_close(cur);
    if (rc == MDB_NOTFOUND)
        return MDB_SUCCESS;
    MDB_val mk = {sizeof(meta_key_inbox_text) - 1, (void *)meta_key_inbox_text};
    return rc == MDB_SUCCESS ? mdb_put(txn, st->dbi[STORE_DB_META], &mk, &k, 0) : rc;
}

/* Create the databases (writers) or open them (readers); check the format
 * and read or create the instance id. */
static int store_open_databases(store *st)
{
    MDB_txn *txn;
    int rc = mdb_txn_begin(st->env, NULL, st->read_only ? MDB_RDONLY : 0, &txn);
    if (rc != MDB_SUCCESS)
        return store_open_fault(st, rc, "beginning a transaction");
    int i = 0;
    for (; i < STORE_DB_COUNT && rc == MDB_SUCCESS; i++) {
        rc = mdb_dbi_open(txn, db_names[i], st->read_only ? 0 : MDB_CREATE, &st->dbi[i]);
        if (rc == MDB_NOTFOUND && st->read_only && db_added_later(i)) {
            st->absent[i] = true;
            rc = MDB_SUCCESS;
        }
    }
    if (rc != MDB_SUCCESS) {
        mdb_txn_abort(txn);
        return rc == MDB_INCOMPATIBLE
                   ? store_why(st->why, st->why_bytes, TALLY_corrupt_record,
                               "%s/data.mdb: damaged: \"%s\" is not a database", st->path,
                               db_names[i - 1])
                   : store_open_fault(st, rc, "opening the databases");
    }
    MDB_val key = {sizeof(meta_key_format) - 1, (void *)meta_key_format}, val;
    rc = mdb_get(txn, st->dbi[STORE_DB_META], &key, &val);
    if (rc == MDB_NOTFOUND && !st->read_only && store_is_new(st, txn)) {
        uint8_t version[4];
        put_u32_be(version, STORE_FORMAT_VERSION);
        val = (MDB_val){sizeof(version), version};
        rc = mdb_put(txn, st->dbi[STORE_DB_META], &key, &val, 0);
        tally_id128 id;
        if (st->new_instance_id != NULL)
            id = *st->new_instance_id;
        else if (rc == MDB_SUCCESS && tally_id128_uuidv7(0, &id) != TALLY_ok)
            rc = EIO;
        MDB_val ikey = {sizeof(meta_key_instance) - 1, (void *)meta_key_instance};
        MDB_val ival = {16, id.bytes};
        if (rc == MDB_SUCCESS)
            rc = mdb_put(txn, st->dbi[STORE_DB_META], &ikey, &ival, 0);
        if (rc == MDB_SUCCESS)
            rc = mdb_get(txn, st->dbi[STORE_DB_META], &key, &val);
    }
    uint32_t version = 0;
    int format = store_check_format(st, rc, &val, &version);
    if (format != TALLY_ok) {
        mdb_txn_abort(txn);
        return format;
    }
    if (version < STORE_FORMAT_VERSION && !st->read_only && !st->upgrade) {
        mdb_txn_abort(txn);
        return store_why(st->why, st->why_bytes, TALLY_store_version_mismatch,
                         "%s/data.mdb: store format %u, from an older tally; this one writes "
                         "format %d and upgrades a store in place, one way (an older tally then "
                         "refuses it): keep a copy of %s first (cp -a, stopped), then start with "
                         "--upgrade",
                         st->path, version, STORE_FORMAT_VERSION, st->path);
    }
    if (version < STORE_FORMAT_VERSION && !st->read_only) { /* see STORE_FORMAT_VERSION */
        st->upgraded_from = version;
        uint8_t now[4];
        put_u32_be(now, STORE_FORMAT_VERSION);
        MDB_val nv = {sizeof(now), now};
        rc = mdb_put(txn, st->dbi[STORE_DB_META], &key, &nv, 0);
        /* Records of before format 6 have no index entries yet, and
         * format 6's transfer index has its account entries, which
         * format 7 serves from the history: built anew. */
        MDB_val pk = {sizeof(meta_key_index_pending) - 1, (void *)meta_key_index_pending};
        MDB_val pv = {1, (void *)""};
        if (rc == MDB_SUCCESS && version < 7)
            rc = mdb_put(txn, st->dbi[STORE_DB_META], &pk, &pv, 0);
        if (rc == MDB_SUCCESS && version < 12)
            rc = mark_inbox_text_keys(st, txn);
        if (rc != MDB_SUCCESS) {
            mdb_txn_abort(txn);
            return store_translate(rc);
        }
    }
    MDB_val ikey = {sizeof(meta_key_instance) - 1, (void *)meta_key_instance}, ival;
    rc = mdb_get(txn, st->dbi[STORE_DB_META], &ikey, &ival);
    if (rc != MDB_SUCCESS || ival.mv_size != 16) {
        mdb_txn_abort(txn);
        return rc == MDB_SUCCESS || rc == MDB_NOTFOUND
                   ? store_why(st->why, st->why_bytes, TALLY_corrupt_record,
                               "%s/data.mdb: damaged: the instance record (meta \"%s\") is %s",
                               st->path, meta_key_instance,
                               rc == MDB_SUCCESS ? "garbled" : "missing")
                   : store_open_fault(st, rc, "reading the instance record");
    }
    memcpy(st->instance_id.bytes, ival.mv_data, 16);
    /* Commit even a read-only txn: aborting it would close the handles. */
    rc = mdb_txn_commit(txn);
    return store_translate(rc);
}

/* LMDB refused to open the environment: say which file and why. data.mdb's
 * meta pages are read again to tell its damage from lock.mdb's. */
static int store_env_refusal(store *st, int mrc)
{
    int rc = store_meta_pages_check(st->path, st->why, st->why_bytes);
    if (rc == TALLY_corrupt_record || rc == TALLY_store_version_mismatch)
        return rc;
    if (mrc == MDB_INVALID || mrc == MDB_VERSION_MISMATCH)
        return store_why(st->why, st->why_bytes,
                         mrc == MDB_INVALID ? TALLY_corrupt_record : TALLY_store_version_mismatch,
                         "%s/lock.mdb: %s (the meta pages of data.mdb are sound): remove "
                         "lock.mdb while no process has the store open",
                         st->path, mrc == MDB_INVALID ? "not an LMDB lock file, or damaged"
                                                      : "made by an LMDB of another lock format");
    return store_open_fault(st, mrc, "opening the environment");
}

static int store_open_env(store *st, uint64_t map_size_bytes)
{
    int rc = mdb_env_create(&st->env);
    if (rc == MDB_SUCCESS)
        rc = mdb_env_set_maxdbs(st->env, STORE_DB_COUNT);
    if (rc == MDB_SUCCESS)
        rc = mdb_env_set_maxreaders(st->env, TALLY_STORE_READERS_MAX);
    if (rc == MDB_SUCCESS)
        rc = mdb_env_set_mapsize(st->env, (size_t)map_size_bytes);
    unsigned flags = MDB_NOTLS | (st->read_only ? MDB_RDONLY : 0);
    if (rc == MDB_SUCCESS)
        rc = mdb_env_open(st->env, st->path, flags, 0600);
    if (rc == MDB_SUCCESS && !st->read_only) {
        /* A reader killed without closing its transaction (a SIGKILLed tool)
         * leaves a slot that pins old pages: the map would keep growing. */
        int dead = 0;
        mdb_reader_check(st->env, &dead);
    }
    if (rc == MDB_INVALID || rc == MDB_VERSION_MISMATCH || rc == MDB_CORRUPTED ||
        rc == MDB_PAGE_NOTFOUND)
        return store_env_refusal(st, rc);
    return store_translate(rc);
}

int store_open(const store_options *options, store **out)
{
    if (options == NULL || options->path == NULL || out == NULL)
        return TALLY_invalid_argument;
    size_t path_len = strlen(options->path);
    uint64_t map_size = options->map_size_bytes ? options->map_size_bytes
                                                : TALLY_MAP_SIZE_BYTES_DEFAULT;
    if (path_len == 0 || path_len > TALLY_PATH_BYTES_MAX ||
        map_size < TALLY_MAP_SIZE_BYTES_MIN || map_size > TALLY_MAP_SIZE_BYTES_MAX)
        return TALLY_invalid_argument;
    store *st = calloc(1, sizeof(*st));
    if (st == NULL)
        return TALLY_out_of_memory;
    memcpy(st->path, options->path, path_len + 1);
    st->read_only = options->read_only;
    st->upgrade = options->upgrade;
    st->new_instance_id = options->instance_id;
    st->why = options->why;
    st->why_bytes = options->why_bytes;
    st->lock_fd = -1;
    int rc = TALLY_ok;
    struct stat sb;
    if (stat(st->path, &sb) != 0) {
        if (st->read_only || errno != ENOENT || mkdir(st->path, 0700) != 0)
            rc = store_translate(errno);
    } else if (!S_ISDIR(sb.st_mode)) {
        rc = TALLY_invalid_argument;
    }
    if (rc == TALLY_ok && !st->read_only && !options->no_lock)
        rc = store_lock(st);
    if (rc == TALLY_ok && options->check_meta_pages && !st->read_only) {
        rc = store_meta_pages_check(st->path, st->why, st->why_bytes);
        if (rc == TALLY_not_found) /* no data.mdb yet: a new store */
            rc = TALLY_ok;
    }
    if (rc == TALLY_ok)
        rc = store_open_env(st, map_size);
    if (rc == TALLY_ok)
        rc = store_open_databases(st);
    st->why = NULL; /* the caller's, only while opening */
    if (rc != TALLY_ok) {
        store_close(st);
        return rc;
    }
    *out = st;
    return TALLY_ok;
}

void store_close(store *st)
{
    if (st == NULL)
        return;
    if (st->env)
        mdb_env_close(st->env);
    if (st->lock_fd >= 0)
        close(st->lock_fd); /* releases the flock */
    free(st);
}

MDB_env *store_env(store *st) { return st->env; }
MDB_dbi store_dbi(store *st, store_db db) { assert(db < STORE_DB_COUNT); return st->dbi[db]; }
const char *store_path(const store *st) { return st->path; }
uint32_t store_upgraded_from(const store *st) { return st->upgraded_from; }

const tally_id128 *store_instance_id(const store *st) { return &st->instance_id; }

int store_txn_begin(store *st, store_txn *parent, bool read_only, store_txn *out)
{
    assert(st != NULL && out != NULL);
    assert(parent == NULL || (!read_only && parent->active && !parent->read_only));
    memset(out, 0, sizeof(*out));
    if (!read_only && st->read_only)
        return TALLY_read_only;
    int rc = mdb_txn_begin(st->env, parent ? parent->txn : NULL, read_only ? MDB_RDONLY : 0,
                           &out->txn);
    if (rc != MDB_SUCCESS)
        return store_translate(rc);
    out->st = st;
    out->parent = parent;
    out->read_only = read_only;
    out->active = true;
    if (parent) {
        out->head = parent->head;
        memcpy(out->collect, parent->collect, sizeof(out->collect));
    }
    return TALLY_ok;
}

static store_txn *txn_root(store_txn *t)
{
    while (t->parent)
        t = t->parent;
    return t;
}

int store_txn_collect_add(store_txn *t, store_collector c, const void *bytes, size_t len,
                          int64_t tag, store_collect_write_fn write_back)
{
    assert(t->active && !t->read_only && c < STORE_COLLECT_COUNT && write_back != NULL);
    store_txn *root = txn_root(t);
    store_txn_collect *col = &t->collect[c];
    size_t need = col->len + len;
    if (need > root->collect_cap[c]) {
        size_t cap = root->collect_cap[c] ? root->collect_cap[c] : 4096;
        while (cap < need)
            cap *= 2;
        uint8_t *b = realloc(root->collect_buf[c], cap);
        if (!b)
            return store_txn_fail(t, TALLY_out_of_memory);
        root->collect_buf[c] = b;
        root->collect_cap[c] = cap;
    }
    memcpy(root->collect_buf[c] + col->len, bytes, len);
    if (col->len == 0 || tag > col->tag)
        col->tag = tag;
    col->len = need;
    col->write_back = write_back;
    return TALLY_ok;
}

int store_txn_collect_flush(store_txn *t, store_collector c)
{
    assert(t->active && !t->read_only && c < STORE_COLLECT_COUNT);
    store_txn_collect *col = &t->collect[c];
    if (t->error != TALLY_ok || col->written == col->len)
        return t->error;
    uint8_t *bytes = txn_root(t)->collect_buf[c] + col->written, *copy = NULL;
    size_t len = col->len - col->written;
    if (t->parent != NULL) { /* the write-back may reorder: not the parent's bytes */
        copy = malloc(len);
        if (!copy)
            return store_txn_fail(t, TALLY_out_of_memory);
        bytes = memcpy(copy, bytes, len);
    }
    col->write_back(t, bytes, len, col->tag); /* a failure is remembered in t->error */
    free(copy);
    col->written = col->len;
    return t->error;
}

/* A top-level transaction ends: its collected bytes go. */
static void collect_free(store_txn *t)
{
    if (t->parent != NULL)
        return;
    for (int c = 0; c < STORE_COLLECT_COUNT; c++) {
        free(t->collect_buf[c]);
        t->collect_buf[c] = NULL;
        t->collect_cap[c] = 0;
    }
}

/* LMDB reports a short write as EIO, and a filling disk (or a file size
 * limit) makes exactly that: so after an EIO at commit, look whether the
 * data file has room to grow. Less than COMMIT_ROOM_BYTES free on its
 * filesystem, or its size within that of RLIMIT_FSIZE, is a full store. */
#define COMMIT_ROOM_BYTES (UINT64_C(4) << 20)

static bool store_out_of_room(const store *st)
{
    char data[TALLY_PATH_BYTES_MAX + 16];
    snprintf(data, sizeof(data), "%s/data.mdb", st->path);
    struct statvfs fs;
    if (statvfs(st->path, &fs) == 0 && (uint64_t)fs.f_bavail * fs.f_frsize < COMMIT_ROOM_BYTES)
        return true;
    struct rlimit rl;
    struct stat sb;
    return getrlimit(RLIMIT_FSIZE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY &&
           stat(data, &sb) == 0 && (uint64_t)sb.st_size + COMMIT_ROOM_BYTES > rl.rlim_cur;
}

int store_txn_commit(store_txn *t)
{
    assert(t->active);
    assert(!t->head.moved || t->head.write_back != NULL);
    if (t->error == TALLY_ok && t->parent == NULL && t->head.moved)
        t->head.write_back(t); /* a failure is remembered in t->error */
    for (int c = 0; c < STORE_COLLECT_COUNT && t->parent == NULL; c++) {
        if (t->collect[c].written < t->collect[c].len) /* never in a read-only txn */
            store_txn_collect_flush(t, (store_collector)c); /* likewise */
    }
    collect_free(t);
    t->active = false;
    if (t->error != TALLY_ok) {
        mdb_txn_abort(t->txn);
        return t->error;
    }
    int rc = mdb_txn_commit(t->txn);
    if (rc == MDB_SUCCESS && t->parent != NULL) {
        t->parent->head = t->head;
        memcpy(t->parent->collect, t->collect, sizeof(t->collect));
    }
    if (rc == EIO && t->parent == NULL && store_out_of_room(t->st))
        return TALLY_storage_full;
    return store_translate(rc);
}

void store_txn_abort(store_txn *t)
{
    if (t == NULL || !t->active)
        return;
    t->active = false;
    collect_free(t);
    mdb_txn_abort(t->txn);
}

int store_get(store_txn *t, store_db db, const void *key, size_t key_len, MDB_val *val)
{
    assert(t->active);
    if (t->st->absent[db])
        return TALLY_not_found;
    MDB_val k = {key_len, (void *)key};
    return store_translate(mdb_get(t->txn, t->st->dbi[db], &k, val));
}

int store_put(store_txn *t, store_db db, const void *key, size_t key_len, const void *val,
              size_t val_len, unsigned flags)
{
    assert(t->active && !t->read_only);
    if (t->error != TALLY_ok)
        return t->error;
    MDB_val k = {key_len, (void *)key}, v = {val_len, (void *)val};
    int rc = mdb_put(t->txn, t->st->dbi[db], &k, &v, flags);
    if (rc == MDB_KEYEXIST)
        return store_txn_fail(t, TALLY_internal); /* callers check before put */
    t->writes += rc == MDB_SUCCESS;
    return store_txn_fail(t, store_translate(rc));
}

int store_del(store_txn *t, store_db db, const void *key, size_t key_len)
{
    assert(t->active && !t->read_only);
    if (t->error != TALLY_ok)
        return t->error;
    MDB_val k = {key_len, (void *)key};
    int rc = mdb_del(t->txn, t->st->dbi[db], &k, NULL);
    if (rc == MDB_NOTFOUND)
        return TALLY_not_found;
    t->writes += rc == MDB_SUCCESS;
    return store_txn_fail(t, store_translate(rc));
}

int store_cursor_open(store_txn *t, store_db db, MDB_cursor **out)
{
    assert(t->active);
    if (t->st->absent[db])
        return TALLY_not_found;
    return store_translate(mdb_cursor_open(t->txn, t->st->dbi[db], out));
}

int store_scan_begin(store_txn *t, store_db db, const void *from, size_t from_len, bool reverse,
                     store_scan *s)
{
    assert(from != NULL || from_len == 0);
    memset(s, 0, sizeof(*s));
    s->reverse = reverse;
    int rc = store_cursor_open(t, db, &s->cursor);
    if (rc != TALLY_ok)
        return rc;
    int mrc;
    if (from == NULL) {
        mrc = mdb_cursor_get(s->cursor, &s->key, &s->val, reverse ? MDB_LAST : MDB_FIRST);
    } else {
        s->key = (MDB_val){from_len, (void *)from};
        mrc = mdb_cursor_get(s->cursor, &s->key, &s->val, MDB_SET_RANGE);
        if (reverse) /* from the first key at or after from back to the one before it */
            mrc = mdb_cursor_get(s->cursor, &s->key, &s->val,
                                 mrc == MDB_SUCCESS ? MDB_PREV : MDB_LAST);
    }
    s->rc = store_translate(mrc);
    return TALLY_ok;
}

bool store_scan_next(store_scan *s)
{
    assert(s->cursor != NULL && store_scan_on(s));
    s->rc = store_translate(
        mdb_cursor_get(s->cursor, &s->key, &s->val, s->reverse ? MDB_PREV : MDB_NEXT));
    return store_scan_on(s);
}

int store_scan_end(store_scan *s, int rc)
{
    if (s->cursor != NULL)
        mdb_cursor_close(s->cursor);
    s->cursor = NULL;
    if (rc != TALLY_ok)
        return rc;
    return s->rc == TALLY_not_found ? TALLY_ok : s->rc;
}

int store_map_usage(store_txn *t, uint64_t *used_bytes, uint64_t *map_bytes)
{
    MDB_envinfo info;
    MDB_stat st;
    int rc = mdb_env_info(t->st->env, &info);
    if (rc == MDB_SUCCESS)
        rc = mdb_env_stat(t->st->env, &st);
    if (rc != MDB_SUCCESS)
        return store_translate(rc);
    *used_bytes = (uint64_t)(info.me_last_pgno + 1) * st.ms_psize;
    *map_bytes = info.me_mapsize;
    return TALLY_ok;
}

void store_set_map_max(store *st, uint64_t bytes) { st->map_max_bytes = bytes; }

uint64_t store_map_max(store *st)
{
    uint64_t max = st->map_max_bytes, now = store_map_size(st);
    return max > now ? max : now;
}

uint64_t store_map_size(store *st)
{
    MDB_envinfo info;
    return mdb_env_info(st->env, &info) == MDB_SUCCESS ? info.me_mapsize : 0;
}

int store_map_grow(store *st, uint64_t *now_bytes)
{
    uint64_t max_bytes = store_map_max(st);
    MDB_envinfo info;
    MDB_stat ms;
    int rc = mdb_env_info(st->env, &info);
    if (rc == MDB_SUCCESS)
        rc = mdb_env_stat(st->env, &ms);
    if (rc != MDB_SUCCESS)
        return store_translate(rc);
    uint64_t page = ms.ms_psize;
    uint64_t now = info.me_mapsize, max = max_bytes / page * page;
    if (now >= max)
        return TALLY_storage_full;
    uint64_t next = now > max / 2 ? max : now * 2;
    rc = mdb_env_set_mapsize(st->env, (size_t)next);
    if (rc != MDB_SUCCESS)
        return store_translate(rc);
    *now_bytes = next;
    return TALLY_ok;
}

int store_clear(store_txn *t, store_db db)
{
    assert(t->active && !t->read_only);
    if (t->error != TALLY_ok)
        return t->error;
    int rc = mdb_drop(t->txn, t->st->dbi[db], 0);
    t->writes += rc == MDB_SUCCESS;
    return store_txn_fail(t, store_translate(rc));
}

int store_count(store_txn *t, store_db db, uint64_t *entries)
{
    MDB_stat st;
    if (t->st->absent[db]) {
        *entries = 0;
        return TALLY_ok;
    }
    int rc = mdb_stat(t->txn, t->st->dbi[db], &st);
    if (rc != MDB_SUCCESS)
        return store_translate(rc);
    *entries = st.ms_entries;
    return TALLY_ok;
}

/* true when path lies below (or at) root, both resolved. */
static bool path_below(const char *path, const char *root)
{
    char *real_root = realpath(root, NULL);
    if (!real_root)
        return false;
    size_t n = strlen(real_root);
    bool below = strncmp(path, real_root, n) == 0 && (path[n] == '/' || path[n] == '\0' || n == 1);
    free(real_root);
    return below;
}

/* The directory to create for dest: its parent resolved (which must exist,
 * below root when given) and its last component; why says what is wrong. */
static int backup_target(const char *dest, const char *root, char *out, size_t out_size,
                         char *why, size_t why_size)
{
    size_t len = strlen(dest);
    if (dest[0] != '/' || len >= TALLY_PATH_BYTES_MAX || len < 2) {
        snprintf(why, why_size, "%s is not an absolute directory path", dest);
        return TALLY_backup_destination_invalid;
    }
    char parent[TALLY_PATH_BYTES_MAX];
    memcpy(parent, dest, len + 1);
    while (len > 1 && parent[len - 1] == '/')
        parent[--len] = '\0';
    char *slash = strrchr(parent, '/');
    const char *base = slash + 1;
    if (*base == '\0' || strcmp(base, ".") == 0 || strcmp(base, "..") == 0) {
        snprintf(why, why_size, "%s names no new directory", dest);
        return TALLY_backup_destination_invalid;
    }
    *slash = '\0';
    const char *parent_path = slash == parent ? "/" : parent;
    char *real_parent = realpath(parent_path, NULL);
    if (!real_parent) {
        snprintf(why, why_size, "its parent %s does not exist (create it first)", parent_path);
        return TALLY_backup_destination_invalid;
    }
    bool allowed = !root || path_below(real_parent, root);
    int n = snprintf(out, out_size, "%s/%s", strcmp(real_parent, "/") == 0 ? "" : real_parent,
                     base);
    free(real_parent);
    if (!allowed) {
        snprintf(why, why_size, "%s is outside --backup-dir %s", dest, root);
        return TALLY_backup_destination_invalid;
    }
    if (n < 0 || (size_t)n >= out_size) {
        snprintf(why, why_size, "%s: the resolved path is too long", dest);
        return TALLY_backup_destination_invalid;
    }
    return TALLY_ok;
}

int store_backup(store *st, const char *dest, const char *root, uint64_t *bytes, char *why,
                 size_t why_size)
{
    *bytes = 0;
    char target[TALLY_PATH_BYTES_MAX], data[TALLY_PATH_BYTES_MAX + 16];
    int rc = backup_target(dest, root, target, sizeof(target), why, why_size);
    if (rc != TALLY_ok)
        return rc;
    if (mkdir(target, 0700) != 0) {
        int e = errno;
        snprintf(why, why_size, "%s: %s", target,
                 e == EEXIST ? "exists; backups go to a new directory" : strerror(e));
        return e == EEXIST                   ? TALLY_backup_destination_exists
               : e == ENOENT || e == ENOTDIR ? TALLY_backup_destination_invalid
                                             : store_translate(e);
    }
    int mrc = mdb_env_copy2(st->env, target, MDB_CP_COMPACT);
    snprintf(data, sizeof(data), "%s/data.mdb", target);
    struct stat sb;
    if (mrc == MDB_SUCCESS && stat(data, &sb) == 0) {
        *bytes = (uint64_t)sb.st_size;
        return TALLY_ok;
    }
    rc = mrc != MDB_SUCCESS ? store_translate(mrc) : TALLY_io_error;
    unlink(data);
    rmdir(target);
    return rc;
}
