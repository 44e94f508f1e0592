/*
 * account.c — account records, the account_open command, and the walk of
 * the accounts database in id order that account_list pages through.
 */
#include "ledger/account.h"

#include "common/error.h"
#include "common/msgpack_safe.h"
#include "ledger/imported.h"
#include "ledger/index.h"

#include <assert.h>
#include <string.h>

#define ACCOUNT_RECORD_FORMAT 4 /* formats 1 to 3: read only */
#define ACCOUNT_FIELDS_V3 14
#define ACCOUNT_FIELDS_V2 9 /* formats 1 and 2: up to created_seq */

static bool balance_ok(int64_t v) { return v >= 0; }

static bool account_is_sane(const ledger_account *a)
{
    return a->id != 0 && a->ledger != 0 && a->code != 0 &&
           (a->flags & ~(LEDGER_ACCOUNT_FLAGS_KNOWN | LEDGER_ACCOUNT_CLOSED)) == 0 &&
           (a->flags & LEDGER_ACCOUNT_LIMIT_FLAGS) != LEDGER_ACCOUNT_LIMIT_FLAGS &&
           balance_ok(a->debits_posted) && balance_ok(a->credits_posted) &&
           balance_ok(a->debits_pending) && balance_ok(a->credits_pending) &&
           a->created_ms >= 0 &&
           a->debits_posted <= TALLY_AMOUNT_MAX - a->debits_pending &&
           a->credits_posted <= TALLY_AMOUNT_MAX - a->credits_pending && a->version > 0;
}

/* Widths of the fields of formats 1 to 3 in their stored order (format
 * 1's bytes; the bounds of formats 2 and 3's varints). */
static const uint8_t account_field_bytes[ACCOUNT_FIELDS_V3] = {4, 2, 2, 8, 8, 8, 8, 8, 8,
                                                               8, 8, 8, 8, 4};

/* An account from the fields of a record of format 1 to 3. */
static bool account_set_fields(ledger_account *a, const uint64_t f[ACCOUNT_FIELDS_V3])
{
    if (!fields_fit(f, account_field_bytes, ACCOUNT_FIELDS_V3))
        return false;
    a->ledger = (uint32_t)f[0];
    a->code = (uint16_t)f[1];
    a->flags = (uint16_t)f[2];
    a->debits_posted = (int64_t)f[3];
    a->credits_posted = (int64_t)f[4];
    a->debits_pending = (int64_t)f[5];
    a->credits_pending = (int64_t)f[6];
    a->version = f[7];
    a->created_seq = f[8];
    a->created_ms = (int64_t)f[9];
    put_u64_be(a->user_data.user_data_128.bytes, f[10]);
    put_u64_be(a->user_data.user_data_128.bytes + 8, f[11]);
    a->user_data.user_data_64 = f[12];
    a->user_data.user_data_32 = (uint32_t)f[13];
    return true;
}

/* A record of format 1, 2 or 3 (older stores). */
static bool account_decode_old(const uint8_t *p, size_t len, ledger_account *out)
{
    uint64_t f[ACCOUNT_FIELDS_V3] = {0}; /* formats 1 and 2 end at created_seq */
    return (p[0] == 1   ? fields_get_fixed(p, len, account_field_bytes, f, ACCOUNT_FIELDS_V2)
            : p[0] == 2 ? fields_get_uvarints(p, len, f, ACCOUNT_FIELDS_V2)
            : p[0] == 3 ? fields_get_uvarints(p, len, f, ACCOUNT_FIELDS_V3)
                        : false) &&
           account_set_fields(out, f);
}

/* Offsets of format 4's fields (ledger/account.h). */
enum {
    AT_LEDGER = 1,
    AT_CODE = 5,
    AT_FLAGS = 7,
    AT_DEBITS_POSTED = 9,
    AT_CREDITS_POSTED = 17,
    AT_DEBITS_PENDING = 25,
    AT_CREDITS_PENDING = 33,
    AT_VERSION = 41,
    AT_CREATED_SEQ = 49,
    AT_CREATED_MS = 57,
    AT_USER_DATA_128 = LEDGER_ACCOUNT_RECORD_BYTES,
    AT_USER_DATA_64 = AT_USER_DATA_128 + 16,
    AT_USER_DATA_32 = AT_USER_DATA_64 + 8,
};
_Static_assert(AT_USER_DATA_32 + 4 == LEDGER_ACCOUNT_RECORD_BYTES_MAX,
               "format 4 with user data ends with user_data_32");

size_t ledger_account_encode(const ledger_account *a, uint8_t out[LEDGER_ACCOUNT_RECORD_BYTES_MAX])
{
    out[0] = ACCOUNT_RECORD_FORMAT;
    put_u32_be(out + AT_LEDGER, a->ledger);
    put_u16_be(out + AT_CODE, a->code);
    put_u16_be(out + AT_FLAGS, a->flags);
    put_u64_be(out + AT_DEBITS_POSTED, (uint64_t)a->debits_posted);
    put_u64_be(out + AT_CREDITS_POSTED, (uint64_t)a->credits_posted);
    put_u64_be(out + AT_DEBITS_PENDING, (uint64_t)a->debits_pending);
    put_u64_be(out + AT_CREDITS_PENDING, (uint64_t)a->credits_pending);
    put_u64_be(out + AT_VERSION, a->version);
    put_u64_be(out + AT_CREATED_SEQ, a->created_seq);
    put_u64_be(out + AT_CREATED_MS, (uint64_t)a->created_ms);
    if (!ledger_user_data_is_set(&a->user_data))
        return LEDGER_ACCOUNT_RECORD_BYTES;
    memcpy(out + AT_USER_DATA_128, a->user_data.user_data_128.bytes, 16);
    put_u64_be(out + AT_USER_DATA_64, a->user_data.user_data_64);
    put_u32_be(out + AT_USER_DATA_32, a->user_data.user_data_32);
    return LEDGER_ACCOUNT_RECORD_BYTES_MAX;
}

/* A record of format 4: false for another length, or for user data that
 * is all 0 (written without it: each account has one encoding). */
static bool account_decode_fixed(const uint8_t *p, size_t len, ledger_account *out)
{
    if (len != LEDGER_ACCOUNT_RECORD_BYTES && len != LEDGER_ACCOUNT_RECORD_BYTES_MAX)
        return false;
    out->ledger = get_u32_be(p + AT_LEDGER);
    out->code = get_u16_be(p + AT_CODE);
    out->flags = get_u16_be(p + AT_FLAGS);
    out->debits_posted = (int64_t)get_u64_be(p + AT_DEBITS_POSTED);
    out->credits_posted = (int64_t)get_u64_be(p + AT_CREDITS_POSTED);
    out->debits_pending = (int64_t)get_u64_be(p + AT_DEBITS_PENDING);
    out->credits_pending = (int64_t)get_u64_be(p + AT_CREDITS_PENDING);
    out->version = get_u64_be(p + AT_VERSION);
    out->created_seq = get_u64_be(p + AT_CREATED_SEQ);
    out->created_ms = (int64_t)get_u64_be(p + AT_CREATED_MS);
    if (len == LEDGER_ACCOUNT_RECORD_BYTES)
        return true;
    memcpy(out->user_data.user_data_128.bytes, p + AT_USER_DATA_128, 16);
    out->user_data.user_data_64 = get_u64_be(p + AT_USER_DATA_64);
    out->user_data.user_data_32 = get_u32_be(p + AT_USER_DATA_32);
    return ledger_user_data_is_set(&out->user_data);
}

int ledger_account_decode(uint64_t id, const void *bytes, size_t len, ledger_account *out)
{
    memset(out, 0, sizeof(*out)); /* padding too: records are compared whole */
    const uint8_t *p = bytes;
    if (len < 1 || !(p[0] == ACCOUNT_RECORD_FORMAT ? account_decode_fixed(p, len, out)
                                                    : account_decode_old(p, len, out)))
        return TALLY_corrupt_record;
    out->id = id;
    return account_is_sane(out) ? TALLY_ok : TALLY_corrupt_record;
}

int ledger_account_get(store_txn *t, uint64_t id, ledger_account *out)
{
    uint8_t key[8];
    put_u64_be(key, id);
    MDB_val val;
    int rc = store_get(t, STORE_DB_ACCOUNTS, key, sizeof(key), &val);
    if (rc != TALLY_ok)
        return rc;
    return ledger_account_decode(id, val.mv_data, val.mv_size, out);
}

/* The walk of ledger_account_list from the cursor's first key: fn for
 * each account up to limit, then a look one key further for *next. */
static int account_walk(store_scan *s, uint32_t limit,
                        int (*fn)(const ledger_account *a, void *ctx), void *ctx,
                        uint64_t *next)
{
    uint32_t given = 0;
    uint64_t last = 0;
    for (; store_scan_on(s) && given < limit; store_scan_next(s)) {
        if (s->key.mv_size != 8)
            return TALLY_corrupt_record;
        ledger_account a;
        int rc = ledger_account_decode(get_u64_be(s->key.mv_data), s->val.mv_data,
                                       s->val.mv_size, &a);
        if (rc == TALLY_ok)
            rc = fn(&a, ctx);
        if (rc != TALLY_ok)
            return rc;
        last = a.id;
        given++;
    }
    /* A full page with a key after it: there is more. */
    *next = given == limit && store_scan_on(s) ? last : 0;
    return TALLY_ok;
}

int ledger_account_list(store_txn *t, uint64_t after_id, uint32_t limit,
                        int (*fn)(const ledger_account *a, void *ctx), void *ctx,
                        uint64_t *next)
{
    assert(fn != NULL && next != NULL);
    *next = 0;
    if (limit == 0 || limit > TALLY_ACCOUNT_LIST_ENTRIES_MAX)
        return TALLY_invalid_argument;
    if (after_id == UINT64_MAX) /* past every id; after_id + 1 would wrap to the first */
        return TALLY_ok;
    uint8_t from[8];
    put_u64_be(from, after_id + 1);
    store_scan s;
    int rc = store_scan_begin(t, STORE_DB_ACCOUNTS, from, sizeof(from), false, &s);
    if (rc != TALLY_ok)
        return rc;
    rc = store_scan_end(&s, account_walk(&s, limit, fn, ctx, next));
    if (rc != TALLY_ok)
        *next = 0;
    return rc;
}

int ledger_account_put(store_txn *t, const ledger_account *a)
{
    /* A record that would break the account's own rules is a bug upstream. */
    assert(account_is_sane(a));
    uint8_t key[8], val[LEDGER_ACCOUNT_RECORD_BYTES_MAX];
    put_u64_be(key, a->id);
    size_t len = ledger_account_encode(a, val);
    return store_put(t, STORE_DB_ACCOUNTS, key, sizeof(key), val, len, 0);
}

int ledger_account_pack(msgpack_packer *pk, const ledger_account *a, bool row)
{
    msgpack_record r;
    return msgpack_record_begin(&r, pk, row, 11 + ledger_user_data_fields(&a->user_data, row)) ||
           msgpack_record_key(&r, "id") || msgpack_pack_uint64(pk, a->id) ||
           msgpack_record_key(&r, "ledger") || msgpack_pack_uint32(pk, a->ledger) ||
           msgpack_record_key(&r, "code") || msgpack_pack_uint16(pk, a->code) ||
           msgpack_record_key(&r, "flags") || msgpack_pack_uint16(pk, a->flags) ||
           msgpack_record_key(&r, "debits_posted") || msgpack_pack_int64(pk, a->debits_posted) ||
           msgpack_record_key(&r, "credits_posted") ||
           msgpack_pack_int64(pk, a->credits_posted) ||
           msgpack_record_key(&r, "debits_pending") ||
           msgpack_pack_int64(pk, a->debits_pending) ||
           msgpack_record_key(&r, "credits_pending") ||
           msgpack_pack_int64(pk, a->credits_pending) ||
           msgpack_record_key(&r, "version") || msgpack_pack_uint64(pk, a->version) ||
           msgpack_record_key(&r, "created_seq") || msgpack_pack_uint64(pk, a->created_seq) ||
           msgpack_record_key(&r, "created_ms") || msgpack_pack_int64(pk, a->created_ms) ||
           ledger_user_data_pack(&r, &a->user_data);
}

int ledger_account_unpack(const msgpack_object *o, ledger_account *out)
{
    uint64_t ledger, code, flags;
    memset(out, 0, sizeof(*out));
    msgpack_record_reader r = msgpack_record_read(o);
    bool ok = msgpack_safe_get_u64(msgpack_record_next(&r, "id"), &out->id) &&
              msgpack_record_next_u64(&r, "ledger", UINT32_MAX, &ledger) &&
              msgpack_record_next_u64(&r, "code", UINT16_MAX, &code) &&
              msgpack_record_next_u64(&r, "flags", UINT16_MAX, &flags) &&
              msgpack_safe_get_i64(msgpack_record_next(&r, "debits_posted"),
                                   &out->debits_posted) &&
              msgpack_safe_get_i64(msgpack_record_next(&r, "credits_posted"),
                                   &out->credits_posted) &&
              msgpack_safe_get_i64(msgpack_record_next(&r, "debits_pending"),
                                   &out->debits_pending) &&
              msgpack_safe_get_i64(msgpack_record_next(&r, "credits_pending"),
                                   &out->credits_pending) &&
              msgpack_safe_get_u64(msgpack_record_next(&r, "version"), &out->version) &&
              msgpack_safe_get_u64(msgpack_record_next(&r, "created_seq"), &out->created_seq);
    /* Events and snapshots written before format 3 end here. */
    out->created_ms = 0;
    const msgpack_object *created_ms = msgpack_record_next_optional(&r, "created_ms");
    if (!ok || (created_ms && !msgpack_safe_get_i64(created_ms, &out->created_ms)) ||
        !ledger_user_data_unpack(&r, &out->user_data))
        return TALLY_corrupt_record;
    out->ledger = (uint32_t)ledger;
    out->code = (uint16_t)code;
    out->flags = (uint16_t)flags;
    return account_is_sane(out) ? TALLY_ok : TALLY_corrupt_record;
}

int ledger_account_pack_body(msgpack_packer *pk, const void *account)
{
    return msgpack_pack_array(pk, 1) || ledger_account_pack(pk, account, true);
}

static int compare_existing(const ledger_account *have, const ledger_account_open *cmd)
{
    if (have->ledger != cmd->ledger)
        return TALLY_exists_with_different_ledger;
    if (have->code != cmd->code)
        return TALLY_exists_with_different_code;
    if (have->flags != cmd->flags)
        return TALLY_exists_with_different_flags;
    int rc = ledger_user_data_compare(&have->user_data, &cmd->user_data);
    return rc != TALLY_ok ? rc : TALLY_exists;
}

int ledger_account_open_apply(ledger_ctx *ctx, const ledger_command *command)
{
    const ledger_account_open *cmd = &command->u.account_open;
    ledger_account a;
    int rc = ledger_account_get(ctx->txn, cmd->id, &a);
    if (rc == TALLY_ok) {
        ctx->original_seq = a.created_seq;
        return compare_existing(&a, cmd);
    }
    if (rc != TALLY_not_found)
        return rc;
    bool imported = cmd->flags & LEDGER_ACCOUNT_IMPORTED;
    if (imported && (rc = ledger_imported_check(ctx, cmd->timestamp_ms)) != TALLY_ok)
        return rc;
    log_head head;
    rc = log_head_get(ctx->txn, &head);
    if (rc != TALLY_ok)
        return rc;
    memset(&a, 0, sizeof(a));
    a.id = cmd->id;
    a.ledger = cmd->ledger;
    a.code = cmd->code;
    a.flags = cmd->flags;
    a.version = 1;
    a.created_seq = head.seq + 1; /* the account.opened event below */
    a.created_ms = imported ? cmd->timestamp_ms : ctx->now_ms;
    a.user_data = cmd->user_data;
    rc = ledger_account_put(ctx->txn, &a);
    ledger_indexed indexed;
    ledger_account_indexed(&a, &indexed);
    if (rc == TALLY_ok)
        rc = ledger_index_put(ctx->txn, STORE_DB_ACCOUNT_INDEX, &indexed);
    if (rc != TALLY_ok)
        return rc;
    log_entity entity = {.kind = LOG_ENTITY_ACCOUNT, .account_id = a.id};
    rc = ledger_emit(ctx, LOG_EVENT_ACCOUNT_OPENED, &entity, a.version, ledger_account_pack_body,
                     &a);
    if (rc == TALLY_ok && imported)
        rc = ledger_imported_note(ctx, a.created_ms, a.created_seq);
    return rc;
}

uint32_t ledger_user_data_fields(const ledger_user_data *u, bool row)
{
    return row && !ledger_user_data_is_set(u) ? 0 : 3;
}

int ledger_user_data_pack(const msgpack_record *r, const ledger_user_data *u)
{
    if (ledger_user_data_fields(u, r->row) == 0)
        return 0;
    return msgpack_record_key(r, "user_data_128") ||
           msgpack_safe_pack_bin(r->pk, u->user_data_128.bytes, 16) ||
           msgpack_record_key(r, "user_data_64") || msgpack_pack_uint64(r->pk, u->user_data_64) ||
           msgpack_record_key(r, "user_data_32") || msgpack_pack_uint32(r->pk, u->user_data_32);
}

bool ledger_user_data_unpack(msgpack_record_reader *r, ledger_user_data *out)
{
    memset(out, 0, sizeof(*out));
    const msgpack_object *u128 = msgpack_record_next_optional(r, "user_data_128");
    const msgpack_object *u64 = msgpack_record_next_optional(r, "user_data_64");
    const msgpack_object *u32 = msgpack_record_next_optional(r, "user_data_32");
    uint64_t v32 = 0;
    return (u128 == NULL || msgpack_safe_get_id128(u128, &out->user_data_128)) &&
           (u64 == NULL || msgpack_safe_get_u64(u64, &out->user_data_64)) &&
           (u32 == NULL || (msgpack_safe_get_u64(u32, &v32) && v32 <= UINT32_MAX)) &&
           ((out->user_data_32 = (uint32_t)v32), true);
}

int ledger_user_data_compare(const ledger_user_data *have, const ledger_user_data *want)
{
    if (!tally_id128_equal(&have->user_data_128, &want->user_data_128))
        return TALLY_exists_with_different_user_data_128;
    if (have->user_data_64 != want->user_data_64)
        return TALLY_exists_with_different_user_data_64;
    if (have->user_data_32 != want->user_data_32)
        return TALLY_exists_with_different_user_data_32;
    return TALLY_ok;
}

void ledger_account_indexed(const ledger_account *a, ledger_indexed *out)
{
    memset(out, 0, sizeof(*out));
    put_u64_be(out->id, a->id);
    out->id_bytes = 8;
    out->ledger = a->ledger;
    out->code = a->code;
    out->user_data = a->user_data;
    out->created_ms = a->created_ms;
    out->created_seq = a->created_seq;
}
