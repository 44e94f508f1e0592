/*
 * tally_inbox.c — the subscriber-side inbox of libtally (see tally_inbox.h).
 *
 * Four databases in the subscriber's own environment:
 *   tally_inbox_processed       event id (16) -> seq, event time, processed time (3 x 8)
 *   tally_inbox_processed_time  processed time (8) + event id (16) -> empty: the prune order
 *   tally_inbox_versions        kind length (1) + kind + key -> version (8)
 *   tally_inbox_meta            "format" -> u32; "counters" -> applied, repeated, stale (3 x 8)
 * All integers big-endian. Events are decoded and checked by libtally's one
 * event decoder (clients/libtally/events.c over the log's codec,
 * common/log_event.c: bounded, hash verified), so the helper accepts exactly
 * what tally writes; the objects of event bodies by libtally's own reply
 * decoders (tally_*_from_msgpack). A transaction remembers its first error
 * and refuses to commit after one (STYLE 3); counters are added at commit,
 * so they count committed outcomes only.
 */
#include "clients/inbox/tally_inbox.h"

#include "clients/libtally/events.h"
#include "clients/libtally/libtally_internal.h"

#include "common/bytes.h"
#include "common/clock.h"
#include "common/limits.h"
#include "common/lmdb_error.h"
#include "common/msgpack_safe.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define INBOX_FORMAT 1
#define PROCESSED_VALUE_BYTES 24
#define TIME_KEY_BYTES 24
#define COUNTERS_BYTES 24
#define VERSION_KEY_BYTES_MAX (1 + TALLY_INBOX_KIND_BYTES_MAX + TALLY_INBOX_KEY_BYTES_MAX)
#define PRUNE_ENTRIES_DEFAULT 1000
#define RESERVED_PREFIX "tally_inbox_"

_Static_assert(VERSION_KEY_BYTES_MAX <= 511, "a version key fits an LMDB key");
_Static_assert(1 + TALLY_SUBJECT_BYTES_MAX + 1 + TALLY_FEATURE_BYTES_MAX <=
                   TALLY_INBOX_KEY_BYTES_MAX,
               "an entitlement's key fits the version table");
_Static_assert(TALLY_INBOX_MAP_SIZE_BYTES_MIN == TALLY_MAP_SIZE_BYTES_MIN &&
                   TALLY_INBOX_MAP_SIZE_BYTES_MAX == TALLY_MAP_SIZE_BYTES_MAX,
               "the inbox's map bounds are the store's");
_Static_assert(TALLY_INBOX_PATH_BYTES_MAX == TALLY_PATH_BYTES_MAX, "path bound as the store's");
_Static_assert(PRUNE_ENTRIES_DEFAULT <= TALLY_INBOX_PRUNE_ENTRIES_MAX, "default within maximum");
_Static_assert(sizeof(((tally_inbox_event *)0)->subject) == TALLY_SUBJECT_BYTES_MAX + 1 &&
                   sizeof(((tally_inbox_event *)0)->feature) == TALLY_FEATURE_BYTES_MAX + 1,
               "subject and feature copies hold the largest");

typedef enum inbox_db {
    DB_PROCESSED,
    DB_PROCESSED_TIME,
    DB_VERSIONS,
    DB_META,
    DB_COUNT
} inbox_db;

static const char *const db_names[DB_COUNT] = {
    [DB_PROCESSED] = "tally_inbox_processed",
    [DB_PROCESSED_TIME] = "tally_inbox_processed_time",
    [DB_VERSIONS] = "tally_inbox_versions",
    [DB_META] = "tally_inbox_meta",
};

static const char meta_key_format[] = "format";
static const char meta_key_counters[] = "counters";

struct tally_inbox {
    MDB_env *env;
    MDB_dbi dbi[DB_COUNT];
    int64_t retention_ms;
};

struct tally_inbox_txn {
    tally_inbox *inbox;
    MDB_txn *txn;
    int error;      /* first error: commit refuses */
    int64_t now_ms; /* processed time of every event of this transaction */
    uint32_t events;
    uint64_t counts[3]; /* by outcome - 1: applied, repeated, stale */
};

static MDB_val val_of(const void *p, size_t n)
{
    return (MDB_val){n, (void *)p};
}

/* ---- the environment ---- */

static int options_check(const tally_inbox_options *o)
{
    size_t n = o->path ? strlen(o->path) : 0;
    uint64_t map = o->map_size_bytes ? o->map_size_bytes : TALLY_INBOX_MAP_SIZE_BYTES_DEFAULT;
    bool ok = n > 0 && n <= TALLY_INBOX_PATH_BYTES_MAX && map >= TALLY_INBOX_MAP_SIZE_BYTES_MIN &&
              map <= TALLY_INBOX_MAP_SIZE_BYTES_MAX && o->app_dbs <= TALLY_INBOX_APP_DBS_MAX &&
              o->retention_ms >= 0 && o->retention_ms <= TALLY_INBOX_RETENTION_MS_MAX;
    return ok ? TALLY_ok : TALLY_invalid_argument;
}

static int directory_ensure(const char *path)
{
    struct stat sb;
    if (stat(path, &sb) == 0)
        return S_ISDIR(sb.st_mode) ? TALLY_ok : TALLY_invalid_argument;
    if (errno != ENOENT || mkdir(path, 0700) != 0)
        return lmdb_error_translate(errno);
    return TALLY_ok;
}

/* Check the format record, writing it into a new environment. */
static int format_check(tally_inbox *ib, MDB_txn *txn)
{
    MDB_val key = val_of(meta_key_format, sizeof(meta_key_format) - 1), val;
    int rc = mdb_get(txn, ib->dbi[DB_META], &key, &val);
    if (rc == MDB_NOTFOUND) {
        uint8_t format[4];
        put_u32_be(format, INBOX_FORMAT);
        val = val_of(format, sizeof(format));
        return lmdb_error_translate(mdb_put(txn, ib->dbi[DB_META], &key, &val, 0));
    }
    if (rc != MDB_SUCCESS)
        return lmdb_error_translate(rc);
    return val.mv_size == 4 && get_u32_be(val.mv_data) == INBOX_FORMAT
               ? TALLY_ok
               : TALLY_store_version_mismatch;
}

static int databases_open(tally_inbox *ib)
{
    MDB_txn *txn = NULL;
    int rc = lmdb_error_translate(mdb_txn_begin(ib->env, NULL, 0, &txn));
    for (int i = 0; rc == TALLY_ok && i < DB_COUNT; i++)
        rc = lmdb_error_translate(mdb_dbi_open(txn, db_names[i], MDB_CREATE, &ib->dbi[i]));
    if (rc == TALLY_ok)
        rc = format_check(ib, txn);
    if (rc != TALLY_ok) {
        if (txn != NULL)
            mdb_txn_abort(txn);
        return rc;
    }
    return lmdb_error_translate(mdb_txn_commit(txn));
}

int tally_inbox_open(const tally_inbox_options *options, tally_inbox **out)
{
    if (options == NULL || out == NULL || options_check(options) != TALLY_ok)
        return TALLY_invalid_argument;
    int rc = directory_ensure(options->path);
    if (rc != TALLY_ok)
        return rc;
    tally_inbox *ib = calloc(1, sizeof(*ib));
    if (ib == NULL)
        return TALLY_out_of_memory;
    ib->retention_ms = options->retention_ms ? options->retention_ms
                                             : TALLY_INBOX_RETENTION_MS_DEFAULT;
    unsigned app_dbs = options->app_dbs ? options->app_dbs : TALLY_INBOX_APP_DBS_DEFAULT;
    uint64_t map = options->map_size_bytes ? options->map_size_bytes
                                           : TALLY_INBOX_MAP_SIZE_BYTES_DEFAULT;
    rc = lmdb_error_translate(mdb_env_create(&ib->env));
    if (rc == TALLY_ok)
        rc = lmdb_error_translate(mdb_env_set_maxdbs(ib->env, DB_COUNT + app_dbs));
    if (rc == TALLY_ok)
        rc = lmdb_error_translate(mdb_env_set_mapsize(ib->env, (size_t)map));
    if (rc == TALLY_ok)
        rc = lmdb_error_translate(mdb_env_open(ib->env, options->path, MDB_NOTLS, 0600));
    if (rc == TALLY_ok)
        rc = databases_open(ib);
    if (rc != TALLY_ok) {
        tally_inbox_close(ib);
        return rc;
    }
    *out = ib;
    return TALLY_ok;
}

void tally_inbox_close(tally_inbox *ib)
{
    if (ib == NULL)
        return;
    if (ib->env != NULL)
        mdb_env_close(ib->env);
    free(ib);
}

MDB_env *tally_inbox_env(tally_inbox *ib)
{
    return ib ? ib->env : NULL;
}

int tally_inbox_db_open(tally_inbox *ib, const char *name, unsigned flags, MDB_dbi *out)
{
    size_t n = name ? strlen(name) : 0;
    if (ib == NULL || out == NULL || n == 0 || n > TALLY_INBOX_DB_NAME_BYTES_MAX ||
        strncmp(name, RESERVED_PREFIX, sizeof(RESERVED_PREFIX) - 1) == 0)
        return TALLY_invalid_argument;
    MDB_txn *txn;
    int rc = mdb_txn_begin(ib->env, NULL, 0, &txn);
    if (rc != MDB_SUCCESS)
        return lmdb_error_translate(rc);
    rc = mdb_dbi_open(txn, name, flags | MDB_CREATE, out);
    if (rc != MDB_SUCCESS) {
        mdb_txn_abort(txn);
        return rc == MDB_DBS_FULL || rc == MDB_INCOMPATIBLE ? TALLY_invalid_argument
                                                            : lmdb_error_translate(rc);
    }
    return lmdb_error_translate(mdb_txn_commit(txn));
}

/* ---- versions ---- */

static bool txn_of(const tally_inbox *ib, MDB_txn *txn)
{
    return ib != NULL && txn != NULL && mdb_txn_env(txn) == ib->env;
}

/* kind length, kind, key: the version table's key. */
static int version_key(const char *kind, const void *key, size_t key_len,
                       uint8_t out[VERSION_KEY_BYTES_MAX], size_t *out_len)
{
    size_t kind_len = kind ? strlen(kind) : 0;
    if (kind_len == 0 || kind_len > TALLY_INBOX_KIND_BYTES_MAX || key == NULL || key_len == 0 ||
        key_len > TALLY_INBOX_KEY_BYTES_MAX)
        return TALLY_invalid_argument;
    out[0] = (uint8_t)kind_len;
    memcpy(out + 1, kind, kind_len);
    memcpy(out + 1 + kind_len, key, key_len);
    *out_len = 1 + kind_len + key_len;
    return TALLY_ok;
}

static int version_read(tally_inbox *ib, MDB_txn *txn, const uint8_t *key, size_t key_len,
                        uint64_t *version)
{
    MDB_val k = val_of(key, key_len), v;
    int rc = mdb_get(txn, ib->dbi[DB_VERSIONS], &k, &v);
    *version = 0;
    if (rc == MDB_NOTFOUND)
        return TALLY_ok;
    if (rc != MDB_SUCCESS)
        return lmdb_error_translate(rc);
    if (v.mv_size != 8)
        return TALLY_corrupt_record;
    *version = get_u64_be(v.mv_data);
    return TALLY_ok;
}

/* Record version under key when newer than the recorded one. */
static int version_advance(tally_inbox *ib, MDB_txn *txn, const uint8_t *key, size_t key_len,
                           uint64_t version, bool *advanced)
{
    uint64_t held;
    int rc = version_read(ib, txn, key, key_len, &held);
    *advanced = rc == TALLY_ok && version > held;
    if (!*advanced)
        return rc;
    uint8_t value[8];
    put_u64_be(value, version);
    MDB_val k = val_of(key, key_len), v = val_of(value, sizeof(value));
    rc = lmdb_error_translate(mdb_put(txn, ib->dbi[DB_VERSIONS], &k, &v, 0));
    *advanced = rc == TALLY_ok;
    return rc;
}

int tally_inbox_version_get(tally_inbox *ib, MDB_txn *txn, const char *kind, const void *key,
                            size_t key_len, uint64_t *version)
{
    uint8_t k[VERSION_KEY_BYTES_MAX];
    size_t n;
    if (!txn_of(ib, txn) || version == NULL || version_key(kind, key, key_len, k, &n) != TALLY_ok)
        return TALLY_invalid_argument;
    return version_read(ib, txn, k, n, version);
}

int tally_inbox_version_newer(tally_inbox *ib, MDB_txn *txn, const char *kind, const void *key,
                              size_t key_len, uint64_t version, bool *newer)
{
    uint64_t held;
    if (newer == NULL)
        return TALLY_invalid_argument;
    int rc = tally_inbox_version_get(ib, txn, kind, key, key_len, &held);
    *newer = rc == TALLY_ok && version > held;
    return rc;
}

int tally_inbox_version_set(tally_inbox *ib, MDB_txn *txn, const char *kind, const void *key,
                            size_t key_len, uint64_t version, bool *advanced)
{
    uint8_t k[VERSION_KEY_BYTES_MAX];
    size_t n;
    bool done;
    if (!txn_of(ib, txn) || version_key(kind, key, key_len, k, &n) != TALLY_ok)
        return TALLY_invalid_argument;
    int rc = version_advance(ib, txn, k, n, version, &done);
    if (advanced != NULL)
        *advanced = done;
    return rc;
}

int tally_inbox_account_advance(tally_inbox *ib, MDB_txn *txn, const tally_account *a,
                                bool *newer)
{
    uint8_t id[8];
    if (a == NULL || newer == NULL)
        return TALLY_invalid_argument;
    put_u64_be(id, a->id);
    return tally_inbox_version_set(ib, txn, "account", id, sizeof(id), a->version, newer);
}

/* ---- an event's row in the version table ---- */

/* The version-table key of the entity a decoded event is about. */
static int event_version_key(const tally_event *ev, uint8_t *key, size_t *key_len)
{
    uint8_t id[8], entitlement[1 + TALLY_SUBJECT_BYTES_MAX + 1 + TALLY_FEATURE_BYTES_MAX];
    switch (ev->kind) {
    case TALLY_ENTITY_ACCOUNT:
        put_u64_be(id, ev->account_id);
        return version_key("account", id, sizeof(id), key, key_len);
    case TALLY_ENTITY_TRANSFER:
        return version_key("transfer", ev->transfer_id.bytes, 16, key, key_len);
    case TALLY_ENTITY_ENTITLEMENT:
    case TALLY_ENTITY_DEAD_LETTER: /* (subscriber, seq) as (subject, feature) */
    case TALLY_ENTITY_WEBHOOK:     /* (source, event id) as (subject, feature) */
    case TALLY_ENTITY_ENDPOINT:    /* (name, "") as (subject, feature) */
        entitlement[0] = (uint8_t)ev->subject_len;
        memcpy(entitlement + 1, ev->subject, ev->subject_len);
        entitlement[1 + ev->subject_len] = (uint8_t)ev->feature_len;
        memcpy(entitlement + 2 + ev->subject_len, ev->feature, ev->feature_len);
        return version_key(ev->kind == TALLY_ENTITY_ENTITLEMENT ? "entitlement"
                           : ev->kind == TALLY_ENTITY_WEBHOOK   ? "webhook"
                           : ev->kind == TALLY_ENTITY_ENDPOINT  ? "endpoint"
                                                                : "dead_letter",
                           entitlement, 2 + ev->subject_len + ev->feature_len, key, key_len);
    case TALLY_ENTITY_SUBSCRIBER:
        return version_key("subscriber", (const uint8_t *)ev->subject, ev->subject_len, key,
                           key_len);
    }
    return TALLY_corrupt_record;
}

/* ---- the processed table ---- */

static int processed_read(tally_inbox *ib, MDB_txn *txn, const uint8_t id[16],
                          tally_inbox_processed *out)
{
    MDB_val k = val_of(id, 16), v;
    int rc = mdb_get(txn, ib->dbi[DB_PROCESSED], &k, &v);
    if (rc != MDB_SUCCESS)
        return lmdb_error_translate(rc);
    if (v.mv_size != PROCESSED_VALUE_BYTES)
        return TALLY_corrupt_record;
    const uint8_t *p = v.mv_data;
    out->seq = get_u64_be(p);
    out->event_time_ms = (int64_t)get_u64_be(p + 8);
    out->processed_ms = (int64_t)get_u64_be(p + 16);
    return TALLY_ok;
}

static int processed_record(tally_inbox_txn *t, const tally_inbox_event *ev)
{
    tally_inbox *ib = t->inbox;
    uint8_t value[PROCESSED_VALUE_BYTES], time_key[TIME_KEY_BYTES];
    put_u64_be(value, ev->seq);
    put_u64_be(value + 8, (uint64_t)ev->time_ms);
    put_u64_be(value + 16, (uint64_t)t->now_ms);
    put_u64_be(time_key, (uint64_t)t->now_ms);
    memcpy(time_key + 8, ev->id.bytes, 16);
    MDB_val k = val_of(ev->id.bytes, 16), v = val_of(value, sizeof(value));
    int rc = mdb_put(t->txn, ib->dbi[DB_PROCESSED], &k, &v, MDB_NOOVERWRITE);
    MDB_val tk = val_of(time_key, sizeof(time_key)), empty = val_of("", 0);
    if (rc == MDB_SUCCESS)
        rc = mdb_put(t->txn, ib->dbi[DB_PROCESSED_TIME], &tk, &empty, 0);
    return lmdb_error_translate(rc);
}

int tally_inbox_processed_get(tally_inbox *ib, MDB_txn *txn, const tally_uuid *id,
                              tally_inbox_processed *out)
{
    if (ib == NULL || id == NULL || out == NULL || (txn != NULL && !txn_of(ib, txn)))
        return TALLY_invalid_argument;
    MDB_txn *own = NULL;
    if (txn == NULL) {
        int rc = mdb_txn_begin(ib->env, NULL, MDB_RDONLY, &own);
        if (rc != MDB_SUCCESS)
            return lmdb_error_translate(rc);
    }
    int rc = processed_read(ib, txn ? txn : own, id->bytes, out);
    if (own != NULL)
        mdb_txn_abort(own);
    return rc;
}

/* Delete up to max entries processed before cutoff_ms, oldest first. */
static int prune_before(tally_inbox *ib, MDB_txn *txn, int64_t cutoff_ms, uint32_t max,
                        uint32_t *pruned, bool *more)
{
    MDB_cursor *cur;
    *pruned = 0;
    *more = false;
    int rc = mdb_cursor_open(txn, ib->dbi[DB_PROCESSED_TIME], &cur);
    if (rc != MDB_SUCCESS)
        return lmdb_error_translate(rc);
    bool corrupt = false;
    MDB_val k, v;
    while ((rc = mdb_cursor_get(cur, &k, &v, MDB_FIRST)) == MDB_SUCCESS) {
        corrupt = k.mv_size != TIME_KEY_BYTES;
        if (corrupt || (int64_t)get_u64_be(k.mv_data) >= cutoff_ms)
            break;
        if (*pruned == max) {
            *more = true;
            break;
        }
        MDB_val id = val_of((const uint8_t *)k.mv_data + 8, 16);
        rc = mdb_del(txn, ib->dbi[DB_PROCESSED], &id, NULL);
        if (rc == MDB_SUCCESS || rc == MDB_NOTFOUND)
            rc = mdb_cursor_del(cur, 0);
        if (rc != MDB_SUCCESS)
            break;
        (*pruned)++;
    }
    mdb_cursor_close(cur);
    if (corrupt)
        return TALLY_corrupt_record;
    return rc == MDB_NOTFOUND ? TALLY_ok : lmdb_error_translate(rc);
}

int tally_inbox_prune(tally_inbox *ib, int64_t now_ms, uint32_t max_entries, uint32_t *pruned,
                      bool *more)
{
    if (ib == NULL || now_ms < 0 || max_entries > TALLY_INBOX_PRUNE_ENTRIES_MAX)
        return TALLY_invalid_argument;
    uint32_t n = 0;
    bool left = false;
    MDB_txn *txn;
    int rc = lmdb_error_translate(mdb_txn_begin(ib->env, NULL, 0, &txn));
    if (rc != TALLY_ok)
        return rc;
    rc = prune_before(ib, txn, now_ms - ib->retention_ms,
                      max_entries ? max_entries : PRUNE_ENTRIES_DEFAULT, &n, &left);
    if (rc == TALLY_ok)
        rc = lmdb_error_translate(mdb_txn_commit(txn));
    else
        mdb_txn_abort(txn);
    if (pruned != NULL)
        *pruned = rc == TALLY_ok ? n : 0;
    if (more != NULL)
        *more = rc == TALLY_ok && left;
    return rc;
}

/* ---- counters ---- */

static int counters_read(tally_inbox *ib, MDB_txn *txn, uint64_t counts[3])
{
    MDB_val k = val_of(meta_key_counters, sizeof(meta_key_counters) - 1), v;
    int rc = mdb_get(txn, ib->dbi[DB_META], &k, &v);
    counts[0] = counts[1] = counts[2] = 0;
    if (rc == MDB_NOTFOUND)
        return TALLY_ok;
    if (rc != MDB_SUCCESS)
        return lmdb_error_translate(rc);
    if (v.mv_size != COUNTERS_BYTES)
        return TALLY_corrupt_record;
    for (int i = 0; i < 3; i++)
        counts[i] = get_u64_be((const uint8_t *)v.mv_data + 8 * i);
    return TALLY_ok;
}

static int counters_add(tally_inbox_txn *t)
{
    uint64_t counts[3];
    uint8_t value[COUNTERS_BYTES];
    int rc = counters_read(t->inbox, t->txn, counts);
    if (rc != TALLY_ok)
        return rc;
    for (int i = 0; i < 3; i++)
        put_u64_be(value + 8 * i, counts[i] + t->counts[i]);
    MDB_val k = val_of(meta_key_counters, sizeof(meta_key_counters) - 1);
    MDB_val v = val_of(value, sizeof(value));
    return lmdb_error_translate(mdb_put(t->txn, t->inbox->dbi[DB_META], &k, &v, 0));
}

int tally_inbox_stats_get(tally_inbox *ib, tally_inbox_stats *out)
{
    if (ib == NULL || out == NULL)
        return TALLY_invalid_argument;
    MDB_txn *txn;
    int rc = lmdb_error_translate(mdb_txn_begin(ib->env, NULL, MDB_RDONLY, &txn));
    if (rc != TALLY_ok)
        return rc;
    uint64_t counts[3];
    MDB_stat processed, versions;
    rc = counters_read(ib, txn, counts);
    if (rc == TALLY_ok)
        rc = lmdb_error_translate(mdb_stat(txn, ib->dbi[DB_PROCESSED], &processed));
    if (rc == TALLY_ok)
        rc = lmdb_error_translate(mdb_stat(txn, ib->dbi[DB_VERSIONS], &versions));
    mdb_txn_abort(txn);
    if (rc != TALLY_ok)
        return rc;
    *out = (tally_inbox_stats){counts[0], counts[1], counts[2], processed.ms_entries,
                               versions.ms_entries};
    return TALLY_ok;
}

/* ---- transactions ---- */

int tally_inbox_txn_begin(tally_inbox *ib, tally_inbox_txn **out)
{
    if (ib == NULL || out == NULL)
        return TALLY_invalid_argument;
    tally_inbox_txn *t = calloc(1, sizeof(*t));
    if (t == NULL)
        return TALLY_out_of_memory;
    int rc = lmdb_error_translate(mdb_txn_begin(ib->env, NULL, 0, &t->txn));
    if (rc != TALLY_ok) {
        free(t);
        return rc;
    }
    t->inbox = ib;
    t->now_ms = clock_wall_ms();
    *out = t;
    return TALLY_ok;
}

MDB_txn *tally_inbox_txn_mdb(tally_inbox_txn *t)
{
    return t ? t->txn : NULL;
}

static int txn_fail(tally_inbox_txn *t, int rc)
{
    if (t->error == TALLY_ok)
        t->error = rc;
    return rc;
}

/* Steps 2-4 of tally_inbox.h for a decoded event. */
static int apply_decoded(tally_inbox_txn *t, const tally_inbox_event *ev, const uint8_t *key,
                         size_t key_len, tally_inbox_apply_fn fn, void *ctx,
                         tally_inbox_outcome *outcome)
{
    tally_inbox_processed seen;
    int rc = processed_read(t->inbox, t->txn, ev->id.bytes, &seen);
    if (rc != TALLY_not_found) {
        *outcome = TALLY_INBOX_REPEATED;
        return rc;
    }
    uint64_t held;
    rc = version_read(t->inbox, t->txn, key, key_len, &held);
    if (rc != TALLY_ok)
        return rc;
    *outcome = ev->entity_version > held ? TALLY_INBOX_APPLIED : TALLY_INBOX_STALE;
    if (*outcome == TALLY_INBOX_APPLIED) {
        bool advanced;
        rc = fn(t->inbox, t->txn, ev, ctx);
        if (rc == TALLY_ok)
            rc = version_advance(t->inbox, t->txn, key, key_len, ev->entity_version, &advanced);
        if (rc != TALLY_ok)
            return rc;
    }
    return processed_record(t, ev);
}

int tally_inbox_txn_apply(tally_inbox_txn *t, const void *bytes, size_t len,
                          tally_inbox_apply_fn fn, void *ctx, tally_inbox_outcome *outcome)
{
    if (t == NULL || fn == NULL || (bytes == NULL && len > 0))
        return TALLY_invalid_argument;
    if (t->error != TALLY_ok)
        return t->error;
    if (t->events >= TALLY_INBOX_TXN_EVENTS_MAX)
        return txn_fail(t, TALLY_too_many_operations);
    msgpack_unpacked unpacked;
    msgpack_unpacked_init(&unpacked);
    tally_inbox_event ev;
    uint8_t key[VERSION_KEY_BYTES_MAX];
    size_t key_len = 0;
    tally_inbox_outcome result = TALLY_INBOX_APPLIED;
    int rc = client_event_decode(bytes, len, &unpacked, &ev);
    if (rc == TALLY_ok)
        rc = event_version_key(&ev, key, &key_len);
    if (rc == TALLY_invalid_argument) /* a key of the wrong size: not a tally event */
        rc = TALLY_corrupt_record;
    if (rc == TALLY_ok)
        rc = apply_decoded(t, &ev, key, key_len, fn, ctx, &result);
    msgpack_unpacked_destroy(&unpacked);
    if (rc != TALLY_ok)
        return txn_fail(t, rc);
    t->events++;
    t->counts[result - 1]++;
    if (outcome != NULL)
        *outcome = result;
    return TALLY_ok;
}

void tally_inbox_txn_abort(tally_inbox_txn *t)
{
    if (t == NULL)
        return;
    mdb_txn_abort(t->txn);
    free(t);
}

int tally_inbox_txn_commit(tally_inbox_txn *t)
{
    if (t == NULL)
        return TALLY_invalid_argument;
    int rc = t->error;
    uint32_t pruned;
    bool more;
    if (rc == TALLY_ok && t->events > 0)
        rc = counters_add(t);
    if (rc == TALLY_ok)
        rc = prune_before(t->inbox, t->txn, t->now_ms - t->inbox->retention_ms,
                          t->events + TALLY_INBOX_PRUNE_PER_COMMIT_EXTRA, &pruned, &more);
    if (rc != TALLY_ok) {
        tally_inbox_txn_abort(t);
        return rc;
    }
    rc = lmdb_error_translate(mdb_txn_commit(t->txn));
    free(t);
    return rc;
}

int tally_inbox_apply(tally_inbox *ib, const void *bytes, size_t len, tally_inbox_apply_fn fn,
                      void *ctx, tally_inbox_outcome *outcome)
{
    tally_inbox_input one = {bytes, len};
    return tally_inbox_apply_batch(ib, &one, 1, fn, ctx, outcome, NULL);
}

int tally_inbox_apply_batch(tally_inbox *ib, const tally_inbox_input *events, size_t count,
                            tally_inbox_apply_fn fn, void *ctx, tally_inbox_outcome *outcomes,
                            size_t *failed_index)
{
    if (ib == NULL || events == NULL || fn == NULL || count == 0 ||
        count > TALLY_INBOX_TXN_EVENTS_MAX)
        return TALLY_invalid_argument;
    tally_inbox_txn *t;
    int rc = tally_inbox_txn_begin(ib, &t);
    if (rc != TALLY_ok)
        return rc;
    for (size_t i = 0; i < count; i++) {
        rc = tally_inbox_txn_apply(t, events[i].bytes, events[i].len, fn, ctx,
                                   outcomes ? &outcomes[i] : NULL);
        if (rc != TALLY_ok) {
            if (failed_index != NULL)
                *failed_index = i;
            tally_inbox_txn_abort(t);
            return rc;
        }
    }
    return tally_inbox_txn_commit(t);
}

/* ---- the objects of event bodies, by libtally's reply decoders ---- */

static int body_object_decode(decode_fn decode, const msgpack_object *o, void *out)
{
    if (out == NULL)
        return TALLY_invalid_argument;
    return decode(o, out) ? TALLY_ok : TALLY_corrupt_record;
}

int tally_account_from_msgpack(const msgpack_object *o, tally_account *out)
{
    return body_object_decode(client_account_decode, o, out);
}

int tally_transfer_from_msgpack(const msgpack_object *o, tally_transfer_info *out)
{
    return body_object_decode(client_transfer_decode, o, out);
}

int tally_entitlement_from_msgpack(const msgpack_object *o, tally_entitlement *out)
{
    return body_object_decode(client_entitlement_decode, o, out);
}

/* ---- msgpack helpers for subscribers ---- */

const msgpack_object *tally_msgpack_get(const msgpack_object *o, const char *key)
{
    return key ? msgpack_safe_map_get(o, key) : NULL;
}

int tally_lmdb_error(int mdb_rc)
{
    return lmdb_error_translate(mdb_rc);
}

int tally_msgpack_unpack(const void *bytes, size_t len, msgpack_unpacked *out)
{
    if (out == NULL)
        return TALLY_invalid_argument;
    int rc = msgpack_safe_unpack(bytes, len, TALLY_MSGPACK_DEPTH_MAX, out);
    return rc == TALLY_invalid_argument ? TALLY_corrupt_record : rc;
}
