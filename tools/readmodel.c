/*
 * readmodel.c — balances and entitlements of an example subscriber, kept
 * exactly once through the subscriber-side inbox (see readmodel.h).
 */
#include "tools/readmodel.h"

#include "common/bytes.h"
#include "common/json_text.h"

#include <inttypes.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#define READMODEL_DBS 3
/* subject length, subject, feature */
#define SUBJECT_BYTES_MAX (sizeof(((tally_entitlement *)0)->subject) - 1)
#define FEATURE_BYTES_MAX (sizeof(((tally_entitlement *)0)->feature) - 1)
#define ENTITLEMENT_KEY_BYTES_MAX (1 + SUBJECT_BYTES_MAX + FEATURE_BYTES_MAX)

static const char position_key[] = "position";

struct readmodel {
    tally_inbox *inbox;
    MDB_dbi accounts, entitlements, meta;
};

tally_inbox *readmodel_inbox(readmodel *rm)
{
    return rm->inbox;
}

int readmodel_open(const readmodel_options *o, readmodel **out)
{
    tally_inbox_options io = {.path = o->path, .map_size_bytes = o->map_size_bytes,
                              .app_dbs = READMODEL_DBS, .retention_ms = o->retention_ms};
    readmodel *rm = calloc(1, sizeof(*rm));
    if (rm == NULL)
        return TALLY_out_of_memory;
    int rc = tally_inbox_open(&io, &rm->inbox);
    if (rc == TALLY_ok)
        rc = tally_inbox_db_open(rm->inbox, "readmodel_accounts", 0, &rm->accounts);
    if (rc == TALLY_ok)
        rc = tally_inbox_db_open(rm->inbox, "readmodel_entitlements", 0, &rm->entitlements);
    if (rc == TALLY_ok)
        rc = tally_inbox_db_open(rm->inbox, "readmodel_meta", 0, &rm->meta);
    if (rc != TALLY_ok) {
        readmodel_close(rm);
        return rc;
    }
    *out = rm;
    return TALLY_ok;
}

void readmodel_close(readmodel *rm)
{
    if (rm == NULL)
        return;
    tally_inbox_close(rm->inbox);
    free(rm);
}

static size_t entitlement_key(const char *subject, size_t subject_len, const char *feature,
                              size_t feature_len, uint8_t out[ENTITLEMENT_KEY_BYTES_MAX])
{
    out[0] = (uint8_t)subject_len;
    memcpy(out + 1, subject, subject_len);
    memcpy(out + 1 + subject_len, feature, feature_len);
    return 1 + subject_len + feature_len;
}

/* ---- applying ---- */

/* Store o (a msgpack object of a body) as its own msgpack bytes. */
static int object_put(MDB_txn *txn, MDB_dbi dbi, const void *key, size_t key_len,
                      const msgpack_object *o)
{
    msgpack_sbuffer buf;
    msgpack_packer pk;
    msgpack_sbuffer_init(&buf);
    msgpack_packer_init(&pk, &buf, msgpack_sbuffer_write);
    int rc = msgpack_pack_object(&pk, *o) == 0 ? TALLY_ok : TALLY_out_of_memory;
    MDB_val k = {key_len, (void *)key}, v = {buf.size, buf.data};
    if (rc == TALLY_ok)
        rc = tally_lmdb_error(mdb_put(txn, dbi, &k, &v, 0));
    msgpack_sbuffer_destroy(&buf);
    return rc;
}

/* Keep an account object of a body when its own version is newer. */
static int account_keep(readmodel *rm, MDB_txn *txn, const msgpack_object *o)
{
    tally_account a;
    bool newer;
    int rc = tally_account_from_msgpack(o, &a);
    if (rc == TALLY_ok)
        rc = tally_inbox_account_advance(rm->inbox, txn, &a, &newer);
    if (rc != TALLY_ok || !newer)
        return rc;
    uint8_t key[8];
    put_u64_be(key, a.id);
    return object_put(txn, rm->accounts, key, sizeof(key), o);
}

/* The inbox checked the entitlement's version (the event's entity). */
static int entitlement_keep(readmodel *rm, MDB_txn *txn, const tally_inbox_event *ev)
{
    const msgpack_object *o = tally_event_part(ev, TALLY_PART_ENTITLEMENT);
    tally_entitlement e;
    int rc = tally_entitlement_from_msgpack(o, &e);
    if (rc != TALLY_ok)
        return rc;
    if (e.version != ev->entity_version)
        return TALLY_corrupt_record;
    uint8_t key[ENTITLEMENT_KEY_BYTES_MAX];
    size_t n = entitlement_key(ev->subject, ev->subject_len, ev->feature, ev->feature_len, key);
    return object_put(txn, rm->entitlements, key, n, o);
}

int readmodel_apply(tally_inbox *ib, MDB_txn *txn, const tally_inbox_event *ev, void *ctx)
{
    (void)ib;
    readmodel *rm = ctx;
    int rc;
    switch (ev->kind) {
    case TALLY_ENTITY_ACCOUNT:
        return account_keep(rm, txn, tally_event_part(ev, TALLY_PART_ACCOUNT));
    case TALLY_ENTITY_TRANSFER: /* both accounts, each by its own version */
        rc = account_keep(rm, txn, tally_event_part(ev, TALLY_PART_DEBIT_ACCOUNT));
        return rc != TALLY_ok ? rc
                              : account_keep(rm, txn, tally_event_part(ev, TALLY_PART_CREDIT_ACCOUNT));
    case TALLY_ENTITY_ENTITLEMENT:
        return entitlement_keep(rm, txn, ev);
    case TALLY_ENTITY_DEAD_LETTER: /* the server's upkeep, not the model's */
    case TALLY_ENTITY_WEBHOOK:     /* a provider's input, for a mapper (docs/WEBHOOKS.md) */
    case TALLY_ENTITY_SUBSCRIBER:  /* the server's upkeep, as dead letters */
    case TALLY_ENTITY_ENDPOINT:    /* tally-relay's upkeep (docs/RELAY.md) */
        break;
    }
    return TALLY_ok; /* a kind this model does not keep */
}

static int position_read(readmodel *rm, MDB_txn *txn, uint64_t *seq)
{
    MDB_val k = {sizeof(position_key) - 1, (void *)position_key}, v;
    int rc = mdb_get(txn, rm->meta, &k, &v);
    *seq = 0;
    if (rc == MDB_NOTFOUND)
        return TALLY_ok;
    if (rc != MDB_SUCCESS)
        return tally_lmdb_error(rc);
    if (v.mv_size != 8)
        return TALLY_corrupt_record;
    *seq = get_u64_be(v.mv_data);
    return TALLY_ok;
}

static int position_write(readmodel *rm, MDB_txn *txn, uint64_t seq)
{
    uint8_t value[8];
    put_u64_be(value, seq);
    MDB_val k = {sizeof(position_key) - 1, (void *)position_key}, v = {8, value};
    return tally_lmdb_error(mdb_put(txn, rm->meta, &k, &v, 0));
}

int readmodel_apply_page(readmodel *rm, const tally_event *events, size_t count)
{
    tally_inbox_txn *t;
    uint64_t position;
    if (count == 0 || count > TALLY_INBOX_TXN_EVENTS_MAX)
        return TALLY_invalid_argument;
    int rc = tally_inbox_txn_begin(rm->inbox, &t);
    if (rc != TALLY_ok)
        return rc;
    for (size_t i = 0; rc == TALLY_ok && i < count; i++)
        rc = tally_inbox_txn_apply(t, events[i].raw, events[i].raw_len, readmodel_apply, rm, NULL);
    if (rc == TALLY_ok)
        rc = position_read(rm, tally_inbox_txn_mdb(t), &position);
    if (rc == TALLY_ok && events[count - 1].seq > position)
        rc = position_write(rm, tally_inbox_txn_mdb(t), events[count - 1].seq);
    if (rc != TALLY_ok) {
        tally_inbox_txn_abort(t);
        return rc;
    }
    return tally_inbox_txn_commit(t);
}

/* ---- reading ---- */

typedef int (*read_fn)(readmodel *rm, MDB_txn *txn, void *ctx);

static int with_read_txn(readmodel *rm, read_fn fn, void *ctx)
{
    MDB_txn *txn;
    int rc = mdb_txn_begin(tally_inbox_env(rm->inbox), NULL, MDB_RDONLY, &txn);
    if (rc != MDB_SUCCESS)
        return tally_lmdb_error(rc);
    rc = fn(rm, txn, ctx);
    mdb_txn_abort(txn);
    return rc;
}

static int position_in(readmodel *rm, MDB_txn *txn, void *ctx)
{
    return position_read(rm, txn, ctx);
}

int readmodel_position(readmodel *rm, uint64_t *seq)
{
    return with_read_txn(rm, position_in, seq);
}

typedef int (*object_decode_fn)(const msgpack_object *o, void *out);

static int account_decode(const msgpack_object *o, void *out)
{
    return tally_account_from_msgpack(o, out);
}

static int entitlement_decode(const msgpack_object *o, void *out)
{
    return tally_entitlement_from_msgpack(o, out);
}

/* Decode a stored object (its bytes are checked like any input). */
static int object_decode(const MDB_val *v, object_decode_fn decode, void *out)
{
    msgpack_unpacked up;
    msgpack_unpacked_init(&up);
    int rc = tally_msgpack_unpack(v->mv_data, v->mv_size, &up);
    if (rc == TALLY_ok)
        rc = decode(&up.data, out);
    msgpack_unpacked_destroy(&up);
    return rc;
}

typedef struct lookup {
    MDB_dbi dbi;
    const void *key;
    size_t key_len;
    object_decode_fn decode;
    void *out;
} lookup;

static int lookup_in(readmodel *rm, MDB_txn *txn, void *ctx)
{
    (void)rm;
    lookup *l = ctx;
    MDB_val k = {l->key_len, (void *)l->key}, v;
    int rc = mdb_get(txn, l->dbi, &k, &v);
    return rc != MDB_SUCCESS ? tally_lmdb_error(rc) : object_decode(&v, l->decode, l->out);
}

int readmodel_account_get(readmodel *rm, uint64_t id, tally_account *out)
{
    uint8_t key[8];
    put_u64_be(key, id);
    lookup l = {rm->accounts, key, sizeof(key), account_decode, out};
    return with_read_txn(rm, lookup_in, &l);
}

int readmodel_entitlement_get(readmodel *rm, const char *subject, const char *feature,
                              tally_entitlement *out)
{
    uint8_t key[ENTITLEMENT_KEY_BYTES_MAX];
    size_t subject_len = strlen(subject), feature_len = strlen(feature);
    if (subject_len == 0 || subject_len > SUBJECT_BYTES_MAX || feature_len == 0 ||
        feature_len > FEATURE_BYTES_MAX)
        return TALLY_invalid_argument;
    lookup l = {rm->entitlements, key,
                entitlement_key(subject, subject_len, feature, feature_len, key),
                entitlement_decode, out};
    return with_read_txn(rm, lookup_in, &l);
}

static int counts_in(readmodel *rm, MDB_txn *txn, void *ctx)
{
    uint64_t *counts = ctx;
    MDB_stat accounts, entitlements;
    int rc = mdb_stat(txn, rm->accounts, &accounts);
    if (rc == MDB_SUCCESS)
        rc = mdb_stat(txn, rm->entitlements, &entitlements);
    if (rc != MDB_SUCCESS)
        return tally_lmdb_error(rc);
    counts[0] = accounts.ms_entries;
    counts[1] = entitlements.ms_entries;
    return TALLY_ok;
}

int readmodel_counts(readmodel *rm, uint64_t *accounts, uint64_t *entitlements)
{
    uint64_t counts[2] = {0, 0};
    int rc = with_read_txn(rm, counts_in, counts);
    if (rc == TALLY_ok) {
        *accounts = counts[0];
        *entitlements = counts[1];
    }
    return rc;
}

/* ---- dump ---- */

/* JSON integers are signed 64-bit: a larger id is written as a string. */
static json_t *json_uint(uint64_t v)
{
    char text[24];
    if (v <= INT64_MAX)
        return json_integer((json_int_t)v);
    snprintf(text, sizeof(text), "%" PRIu64, v);
    return json_string(text);
}

static json_t *account_to_json(const tally_account *a)
{
    return json_pack("{s:o, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:o, s:o}", "id",
                     json_uint(a->id), "ledger", (json_int_t)a->ledger, "code",
                     (json_int_t)a->code, "flags", (json_int_t)a->flags, "debits_posted",
                     (json_int_t)a->debits_posted, "credits_posted",
                     (json_int_t)a->credits_posted, "debits_pending",
                     (json_int_t)a->debits_pending, "credits_pending",
                     (json_int_t)a->credits_pending, "version", json_uint(a->version),
                     "created_seq", json_uint(a->created_seq));
}

static json_t *entitlement_to_json(const tally_entitlement *e)
{
    char grant[37];
    if (e->has_grant_transfer)
        tally_uuid_format(&e->grant_transfer_id, grant);
    return json_pack("{s:o, s:o, s:s, s:o, s:o, s:o, s:I, s:I, s:o}", "subject",
                     json_text(e->subject), "feature", json_text(e->feature), "state", e->state,
                     "valid_until_ms", e->lifetime ? json_null() : json_integer(e->valid_until_ms),
                     "version", json_uint(e->version), "source_order",
                     e->has_source_order ? json_uint(e->source_order) : json_null(),
                     "granted_ms", (json_int_t)e->granted_ms, "updated_ms",
                     (json_int_t)e->updated_ms, "grant_transfer_id",
                     e->has_grant_transfer ? json_string(grant) : json_null());
}

typedef struct dump_ctx {
    bool json;
    FILE *out;
} dump_ctx;

static int item_print(const dump_ctx *d, json_t *item, bool first)
{
    if (item == NULL)
        return TALLY_out_of_memory;
    if (!d->json) {
        const char *kind = json_object_get(item, "subject") ? "entitlement" : "account";
        fprintf(d->out, "%s", kind);
        const char *name;
        json_t *value;
        json_object_foreach(item, name, value) {
            char *text = json_dumps(value, JSON_ENCODE_ANY | JSON_COMPACT);
            fprintf(d->out, " %s=%s", name, text ? text : "?");
            free(text);
        }
        fputc('\n', d->out);
    } else {
        if (!first)
            fputc(',', d->out);
        json_dumpf(item, d->out, JSON_COMPACT);
    }
    json_decref(item);
    return TALLY_ok;
}

/* Print every object of dbi in key order. */
static int dump_db(MDB_txn *txn, MDB_dbi dbi, bool accounts, const dump_ctx *d)
{
    MDB_cursor *cur;
    int rc = mdb_cursor_open(txn, dbi, &cur);
    if (rc != MDB_SUCCESS)
        return tally_lmdb_error(rc);
    MDB_val k, v;
    bool first = true;
    int mrc = mdb_cursor_get(cur, &k, &v, MDB_FIRST);
    for (rc = TALLY_ok; rc == TALLY_ok && mrc == MDB_SUCCESS;
         mrc = mdb_cursor_get(cur, &k, &v, MDB_NEXT), first = false) {
        tally_account a;
        tally_entitlement e;
        rc = object_decode(&v, accounts ? account_decode : entitlement_decode,
                           accounts ? (void *)&a : (void *)&e);
        if (rc == TALLY_ok)
            rc = item_print(d, accounts ? account_to_json(&a) : entitlement_to_json(&e), first);
    }
    mdb_cursor_close(cur);
    return rc != TALLY_ok ? rc : mrc == MDB_NOTFOUND ? TALLY_ok : tally_lmdb_error(mrc);
}

static int dump_in(readmodel *rm, MDB_txn *txn, void *ctx)
{
    const dump_ctx *d = ctx;
    uint64_t position;
    int rc = position_read(rm, txn, &position);
    if (rc != TALLY_ok)
        return rc;
    if (d->json)
        fprintf(d->out, "{\"position\":%" PRIu64 ",\"accounts\":[", position);
    else
        fprintf(d->out, "position %" PRIu64 "\n", position);
    rc = dump_db(txn, rm->accounts, true, d);
    if (rc == TALLY_ok && d->json)
        fputs("],\"entitlements\":[", d->out);
    if (rc == TALLY_ok)
        rc = dump_db(txn, rm->entitlements, false, d);
    if (rc == TALLY_ok && d->json)
        fputs("]}\n", d->out);
    return rc;
}

int readmodel_dump(readmodel *rm, bool json, FILE *out)
{
    dump_ctx d = {json, out};
    int rc = with_read_txn(rm, dump_in, &d);
    if (rc == TALLY_ok && (fflush(out) != 0 || ferror(out)))
        rc = TALLY_io_error;
    return rc;
}
