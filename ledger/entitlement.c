/*
 * entitlement.c — entitlement records and the grant/extend/revoke/expire
 * transitions (see entitlement.h for the table).
 */
#include "ledger/entitlement.h"

#include "common/error.h"
#include "common/log_event.h"
#include "common/msgpack_safe.h"
#include "ledger/expiry.h"
#include "ledger/pair_key.h"
#include "ledger/transfer.h"

#include <assert.h>
#include <string.h>

#define ENTITLEMENT_RECORD_FORMAT 1
#define FLAG_LIFETIME 1u
#define FLAG_SOURCE_ORDER 2u
#define FLAG_GRANT_TRANSFER 4u

_Static_assert(LEDGER_ENTITLEMENT_KEY_BYTES_MAX <= LEDGER_EXPIRY_ID_BYTES_MAX,
               "an entitlement key is an expiry id");

/* The states' numbers are the event format's (log_entitlement_state_name). */
const char *ledger_entitlement_state_name(uint8_t state)
{
    const char *name = log_entitlement_state_name(state);
    return name ? name : "none";
}

uint8_t ledger_entitlement_state_at(const ledger_entitlement *e, int64_t now_ms)
{
    if (e->state == LEDGER_ENTITLEMENT_ACTIVE && !e->lifetime && e->valid_until_ms <= now_ms)
        return LEDGER_ENTITLEMENT_EXPIRED;
    return e->state;
}

size_t ledger_entitlement_key(tally_str subject, tally_str feature,
                              uint8_t out[LEDGER_ENTITLEMENT_KEY_BYTES_MAX])
{
    return ledger_pair_key(subject, TALLY_SUBJECT_BYTES_MAX, feature, TALLY_FEATURE_BYTES_MAX,
                           out);
}

static bool entitlement_is_sane(const ledger_entitlement *e)
{
    return e->subject_len > 0 && e->feature_len > 0 && e->state >= LEDGER_ENTITLEMENT_ACTIVE &&
           e->state <= LEDGER_ENTITLEMENT_EXPIRED && e->version > 0 &&
           (e->lifetime ? e->valid_until_ms == 0
                        : e->valid_until_ms > 0 && e->valid_until_ms <= TALLY_TIME_MS_MAX);
}

void ledger_entitlement_encode(const ledger_entitlement *e,
                               uint8_t out[LEDGER_ENTITLEMENT_RECORD_BYTES])
{
    out[0] = ENTITLEMENT_RECORD_FORMAT;
    out[1] = e->state;
    out[2] = (uint8_t)((e->lifetime ? FLAG_LIFETIME : 0) |
                       (e->has_source_order ? FLAG_SOURCE_ORDER : 0) |
                       (e->has_grant_transfer ? FLAG_GRANT_TRANSFER : 0));
    put_u64_be(out + 3, (uint64_t)e->valid_until_ms);
    put_u64_be(out + 11, e->version);
    put_u64_be(out + 19, e->source_order);
    put_u64_be(out + 27, (uint64_t)e->granted_ms);
    put_u64_be(out + 35, (uint64_t)e->updated_ms);
    memcpy(out + 43, e->grant_transfer_id.bytes, 16);
}

int ledger_entitlement_decode(const void *key, size_t key_len, const void *val,
                              size_t val_len, ledger_entitlement *out)
{
    const uint8_t *p = val;
    tally_str subject, feature;
    memset(out, 0, sizeof(*out));
    if (!ledger_pair_key_split(key, key_len, TALLY_SUBJECT_BYTES_MAX, TALLY_FEATURE_BYTES_MAX,
                               &subject, &feature) ||
        val_len != LEDGER_ENTITLEMENT_RECORD_BYTES || p[0] != ENTITLEMENT_RECORD_FORMAT ||
        (p[2] & ~(FLAG_LIFETIME | FLAG_SOURCE_ORDER | FLAG_GRANT_TRANSFER)) != 0)
        return TALLY_corrupt_record;
    out->subject_len = subject.len;
    memcpy(out->subject, subject.ptr, subject.len);
    out->feature_len = feature.len;
    memcpy(out->feature, feature.ptr, feature.len);
    out->state = p[1];
    out->lifetime = p[2] & FLAG_LIFETIME;
    out->has_source_order = p[2] & FLAG_SOURCE_ORDER;
    out->has_grant_transfer = p[2] & FLAG_GRANT_TRANSFER;
    out->valid_until_ms = (int64_t)get_u64_be(p + 3);
    out->version = get_u64_be(p + 11);
    out->source_order = get_u64_be(p + 19);
    out->granted_ms = (int64_t)get_u64_be(p + 27);
    out->updated_ms = (int64_t)get_u64_be(p + 35);
    memcpy(out->grant_transfer_id.bytes, p + 43, 16);
    return entitlement_is_sane(out) ? TALLY_ok : TALLY_corrupt_record;
}

static tally_str subject_of(const ledger_entitlement *e)
{
    return (tally_str){e->subject, e->subject_len};
}

static tally_str feature_of(const ledger_entitlement *e)
{
    return (tally_str){e->feature, e->feature_len};
}

size_t ledger_entitlement_key_of(const ledger_entitlement *e,
                                 uint8_t out[LEDGER_ENTITLEMENT_KEY_BYTES_MAX])
{
    return ledger_entitlement_key(subject_of(e), feature_of(e), out);
}

int ledger_entitlement_get(store_txn *t, tally_str subject, tally_str feature,
                           ledger_entitlement *out)
{
    uint8_t key[LEDGER_ENTITLEMENT_KEY_BYTES_MAX];
    size_t key_len = ledger_entitlement_key(subject, feature, key);
    MDB_val val;
    int rc = store_get(t, STORE_DB_ENTITLEMENTS, key, key_len, &val);
    if (rc != TALLY_ok)
        return rc;
    return ledger_entitlement_decode(key, key_len, val.mv_data, val.mv_size, out);
}

static int entitlement_put(store_txn *t, const ledger_entitlement *e)
{
    assert(entitlement_is_sane(e));
    uint8_t key[LEDGER_ENTITLEMENT_KEY_BYTES_MAX], val[LEDGER_ENTITLEMENT_RECORD_BYTES];
    size_t key_len = ledger_entitlement_key_of(e, key);
    ledger_entitlement_encode(e, val);
    return store_put(t, STORE_DB_ENTITLEMENTS, key, key_len, val, sizeof(val), 0);
}

int ledger_entitlement_list(store_txn *t, tally_str subject,
                            int (*fn)(const ledger_entitlement *e, void *ctx), void *ctx)
{
    if (subject.len == 0 || subject.len > TALLY_SUBJECT_BYTES_MAX)
        return TALLY_invalid_argument;
    uint8_t prefix[1 + TALLY_SUBJECT_BYTES_MAX];
    size_t prefix_len = ledger_pair_key_prefix(subject, TALLY_SUBJECT_BYTES_MAX, prefix);
    store_scan s;
    int rc = store_scan_begin(t, STORE_DB_ENTITLEMENTS, prefix, prefix_len, false, &s);
    if (rc != TALLY_ok)
        return rc;
    for (; rc == TALLY_ok && store_scan_on(&s) && s.key.mv_size > prefix_len &&
           memcmp(s.key.mv_data, prefix, prefix_len) == 0;
         store_scan_next(&s)) {
        ledger_entitlement e;
        rc = ledger_entitlement_decode(s.key.mv_data, s.key.mv_size, s.val.mv_data,
                                       s.val.mv_size, &e);
        if (rc == TALLY_ok)
            rc = fn(&e, ctx);
    }
    return store_scan_end(&s, rc);
}

static int pack_optional_i64(msgpack_packer *pk, bool has, int64_t v)
{
    return has ? msgpack_pack_int64(pk, v) : msgpack_pack_nil(pk);
}

int ledger_entitlement_pack(msgpack_packer *pk, const ledger_entitlement *e, bool row)
{
    msgpack_record m;
    return msgpack_record_begin(&m, pk, row, 9) ||
           msgpack_record_key(&m, "subject") || msgpack_safe_pack_str(pk, subject_of(e)) ||
           msgpack_record_key(&m, "feature") || msgpack_safe_pack_str(pk, feature_of(e)) ||
           /* the state: its name in a map, its number in a row */
           msgpack_record_key(&m, "state") ||
           (row ? msgpack_pack_uint8(pk, e->state)
                : msgpack_safe_pack_cstr(pk, ledger_entitlement_state_name(e->state))) ||
           msgpack_record_key(&m, "valid_until_ms") ||
           pack_optional_i64(pk, !e->lifetime, e->valid_until_ms) ||
           msgpack_record_key(&m, "version") || msgpack_pack_uint64(pk, e->version) ||
           msgpack_record_key(&m, "source_order") ||
           (e->has_source_order ? msgpack_pack_uint64(pk, e->source_order)
                                : msgpack_pack_nil(pk)) ||
           msgpack_record_key(&m, "granted_ms") || msgpack_pack_int64(pk, e->granted_ms) ||
           msgpack_record_key(&m, "updated_ms") || msgpack_pack_int64(pk, e->updated_ms) ||
           msgpack_record_key(&m, "grant_transfer_id") ||
           (e->has_grant_transfer ? msgpack_safe_pack_bin(pk, e->grant_transfer_id.bytes, 16)
                                  : msgpack_pack_nil(pk));
}

static bool unpack_copy_str(const msgpack_object *o, char *dst, size_t max, size_t *len)
{
    tally_str s;
    if (!msgpack_safe_get_str(o, &s) || s.len == 0 || s.len > max)
        return false;
    memcpy(dst, s.ptr, s.len);
    *len = s.len;
    return true;
}

static bool is_nil(const msgpack_object *o) { return o && o->type == MSGPACK_OBJECT_NIL; }

/* The state: a name (map) or a number (row); 0 when neither names one. */
static uint8_t unpack_state(const msgpack_object *o)
{
    tally_str name;
    uint64_t n;
    for (uint8_t s = LEDGER_ENTITLEMENT_ACTIVE; s <= LEDGER_ENTITLEMENT_EXPIRED; s++)
        if ((msgpack_safe_get_str(o, &name) &&
             tally_str_equal(name, tally_str_from(ledger_entitlement_state_name(s)))) ||
            (msgpack_safe_get_u64(o, &n) && n == s))
            return s;
    return 0;
}

int ledger_entitlement_unpack(const msgpack_object *o, ledger_entitlement *out)
{
    memset(out, 0, sizeof(*out));
    msgpack_record_reader m = msgpack_record_read(o);
    bool ok = unpack_copy_str(msgpack_record_next(&m, "subject"), out->subject,
                              TALLY_SUBJECT_BYTES_MAX, &out->subject_len) &&
              unpack_copy_str(msgpack_record_next(&m, "feature"), out->feature,
                              TALLY_FEATURE_BYTES_MAX, &out->feature_len);
    out->state = ok ? unpack_state(msgpack_record_next(&m, "state")) : 0;
    const msgpack_object *until = msgpack_record_next(&m, "valid_until_ms");
    ok = ok && (is_nil(until) || msgpack_safe_get_i64(until, &out->valid_until_ms)) &&
         msgpack_safe_get_u64(msgpack_record_next(&m, "version"), &out->version);
    const msgpack_object *order = msgpack_record_next(&m, "source_order");
    ok = ok && (is_nil(order) || msgpack_safe_get_u64(order, &out->source_order)) &&
         msgpack_safe_get_i64(msgpack_record_next(&m, "granted_ms"), &out->granted_ms) &&
         msgpack_safe_get_i64(msgpack_record_next(&m, "updated_ms"), &out->updated_ms);
    const msgpack_object *grant = msgpack_record_next(&m, "grant_transfer_id");
    ok = ok && m.ok && (is_nil(grant) || msgpack_safe_get_id128(grant, &out->grant_transfer_id));
    if (!ok)
        return TALLY_corrupt_record;
    out->lifetime = is_nil(until);
    out->has_source_order = !is_nil(order);
    out->has_grant_transfer = !is_nil(grant);
    return entitlement_is_sane(out) ? TALLY_ok : TALLY_corrupt_record;
}

/* Format 2: [entitlement], a row. */
static int pack_entitlement_body(msgpack_packer *pk, const void *e)
{
    return msgpack_pack_array(pk, 1) || ledger_entitlement_pack(pk, e, true);
}

static int set_expiry(store_txn *t, const ledger_entitlement *e, bool add)
{
    if (e->lifetime || e->state != LEDGER_ENTITLEMENT_ACTIVE)
        return TALLY_ok;
    uint8_t key[LEDGER_ENTITLEMENT_KEY_BYTES_MAX];
    size_t key_len = ledger_entitlement_key_of(e, key);
    if (add)
        return ledger_expiry_add(t, e->valid_until_ms, LEDGER_EXPIRY_ENTITLEMENT, key, key_len);
    int rc = ledger_expiry_del(t, e->valid_until_ms, LEDGER_EXPIRY_ENTITLEMENT, key, key_len);
    return rc == TALLY_not_found ? TALLY_ok : rc;
}

/* Write e (already changed in memory, version bumped) and its event. The
 * expiry index follows: old_e's entry (if any) is removed, e's added. */
static int entitlement_commit(ledger_ctx *ctx, const ledger_entitlement *old_e,
                              const ledger_entitlement *e, log_event_type type)
{
    int rc = old_e ? set_expiry(ctx->txn, old_e, false) : TALLY_ok;
    if (rc == TALLY_ok)
        rc = set_expiry(ctx->txn, e, true);
    if (rc == TALLY_ok)
        rc = entitlement_put(ctx->txn, e);
    if (rc != TALLY_ok)
        return rc;
    log_entity entity = {.kind = LOG_ENTITY_ENTITLEMENT,
                         .subject = subject_of(e),
                         .feature = feature_of(e)};
    return ledger_emit(ctx, type, &entity, e->version, pack_entitlement_body, e);
}

static int expire_now(ledger_ctx *ctx, ledger_entitlement *e)
{
    ledger_entitlement old_e = *e;
    e->state = LEDGER_ENTITLEMENT_EXPIRED;
    e->version++;
    e->updated_ms = ctx->now_ms;
    return entitlement_commit(ctx, &old_e, e, LOG_EVENT_ENTITLEMENT_EXPIRED);
}

/* The end a grant or extend asks for, from base_ms for durations. */
static int requested_end(const ledger_entitlement_command *cmd, int64_t base_ms, int64_t *end)
{
    if (cmd->valid_until_ms != 0) {
        *end = cmd->valid_until_ms;
        return TALLY_ok;
    }
    if (base_ms > TALLY_TIME_MS_MAX - cmd->duration_ms)
        return TALLY_time_out_of_range;
    *end = base_ms + cmd->duration_ms;
    return TALLY_ok;
}

/* The command's source order becomes the entity's with the change itself
 * (not with an inline expiry that precedes it). */
static void take_source_order(ledger_entitlement *e, const ledger_entitlement_command *cmd)
{
    if (cmd->has_source_order) {
        e->has_source_order = true;
        e->source_order = cmd->source_order;
    }
}

static int apply_grant(ledger_ctx *ctx, const ledger_entitlement_command *cmd, bool exists,
                       ledger_entitlement *e, uint8_t state_now)
{
    if (exists && state_now == LEDGER_ENTITLEMENT_ACTIVE)
        return TALLY_entitlement_already_active;
    bool lifetime = cmd->valid_until_ms == 0 && cmd->duration_ms == 0;
    int64_t end = 0;
    if (!lifetime) {
        int rc = requested_end(cmd, ctx->now_ms, &end);
        if (rc != TALLY_ok)
            return rc;
        if (end <= ctx->now_ms)
            return TALLY_valid_until_must_be_in_future;
    }
    if (cmd->has_grant_transfer) {
        ledger_transfer_record tr;
        int rc = ledger_transfer_get(ctx->txn, &cmd->grant_transfer_id, &tr);
        if (rc == TALLY_not_found)
            return TALLY_grant_transfer_not_found;
        if (rc != TALLY_ok)
            return rc;
    }
    if (exists && e->state == LEDGER_ENTITLEMENT_ACTIVE) { /* due, not swept */
        int rc = expire_now(ctx, e);
        if (rc != TALLY_ok)
            return rc;
    }
    if (!exists) {
        memcpy(e->subject, cmd->subject.ptr, cmd->subject.len);
        e->subject_len = cmd->subject.len;
        memcpy(e->feature, cmd->feature.ptr, cmd->feature.len);
        e->feature_len = cmd->feature.len;
    }
    take_source_order(e, cmd);
    e->state = LEDGER_ENTITLEMENT_ACTIVE;
    e->lifetime = lifetime;
    e->valid_until_ms = end;
    e->version++;
    e->granted_ms = ctx->now_ms;
    e->updated_ms = ctx->now_ms;
    e->has_grant_transfer = cmd->has_grant_transfer;
    e->grant_transfer_id = cmd->grant_transfer_id;
    return entitlement_commit(ctx, NULL, e, LOG_EVENT_ENTITLEMENT_GRANTED);
}

static int apply_extend(ledger_ctx *ctx, const ledger_entitlement_command *cmd,
                        ledger_entitlement *e, uint8_t state_now)
{
    if (state_now == LEDGER_ENTITLEMENT_REVOKED)
        return TALLY_entitlement_revoked;
    if (state_now == LEDGER_ENTITLEMENT_ACTIVE && e->lifetime)
        return TALLY_entitlement_is_lifetime;
    bool active = state_now == LEDGER_ENTITLEMENT_ACTIVE;
    int64_t end;
    int rc = requested_end(cmd, active ? e->valid_until_ms : ctx->now_ms, &end);
    if (rc != TALLY_ok)
        return rc;
    if (active && end <= e->valid_until_ms)
        return TALLY_extension_must_move_forward;
    if (!active && end <= ctx->now_ms)
        return TALLY_valid_until_must_be_in_future;
    if (e->state == LEDGER_ENTITLEMENT_ACTIVE && !active) { /* due, not swept */
        rc = expire_now(ctx, e);
        if (rc != TALLY_ok)
            return rc;
    }
    ledger_entitlement old_e = *e;
    take_source_order(e, cmd);
    e->state = LEDGER_ENTITLEMENT_ACTIVE;
    e->lifetime = false;
    e->valid_until_ms = end;
    e->version++;
    e->updated_ms = ctx->now_ms;
    return entitlement_commit(ctx, &old_e, e, LOG_EVENT_ENTITLEMENT_EXTENDED);
}

static int apply_revoke(ledger_ctx *ctx, const ledger_entitlement_command *cmd,
                        ledger_entitlement *e, uint8_t state_now)
{
    if (state_now == LEDGER_ENTITLEMENT_REVOKED)
        return TALLY_entitlement_already_revoked;
    ledger_entitlement old_e = *e;
    take_source_order(e, cmd);
    e->state = LEDGER_ENTITLEMENT_REVOKED;
    e->version++;
    e->updated_ms = ctx->now_ms;
    return entitlement_commit(ctx, &old_e, e, LOG_EVENT_ENTITLEMENT_REVOKED);
}

/* What grant, extend and revoke share: the entitlement as stored (*exists;
 * zeroed when not), refused as stale when the command's source order is
 * not past the stored one, and its state at the commit time. ok, stale, or
 * a fault. */
static int entitlement_load(ledger_ctx *ctx, const ledger_entitlement_command *cmd,
                            ledger_entitlement *e, bool *exists, uint8_t *state_now)
{
    int rc = ledger_entitlement_get(ctx->txn, cmd->subject, cmd->feature, e);
    *exists = rc == TALLY_ok;
    if (rc == TALLY_not_found)
        memset(e, 0, sizeof(*e));
    else if (rc != TALLY_ok)
        return rc;
    if (*exists && cmd->has_source_order && e->has_source_order &&
        cmd->source_order <= e->source_order)
        return TALLY_stale;
    *state_now = *exists ? ledger_entitlement_state_at(e, ctx->now_ms) : 0;
    return TALLY_ok;
}

int ledger_entitlement_grant_apply(ledger_ctx *ctx, const ledger_command *command)
{
    const ledger_entitlement_command *cmd = &command->u.entitlement;
    ledger_entitlement e;
    bool exists;
    uint8_t state_now;
    int rc = entitlement_load(ctx, cmd, &e, &exists, &state_now);
    return rc == TALLY_ok ? apply_grant(ctx, cmd, exists, &e, state_now) : rc;
}

/* extend and revoke: step applied to the entitlement, which must exist. */
typedef int (*entitlement_step_fn)(ledger_ctx *ctx, const ledger_entitlement_command *cmd,
                                   ledger_entitlement *e, uint8_t state_now);

static int apply_to_existing(ledger_ctx *ctx, const ledger_command *command,
                             entitlement_step_fn step)
{
    const ledger_entitlement_command *cmd = &command->u.entitlement;
    ledger_entitlement e;
    bool exists;
    uint8_t state_now;
    int rc = entitlement_load(ctx, cmd, &e, &exists, &state_now);
    if (rc == TALLY_ok && !exists)
        rc = TALLY_entitlement_not_found;
    return rc == TALLY_ok ? step(ctx, cmd, &e, state_now) : rc;
}

int ledger_entitlement_extend_apply(ledger_ctx *ctx, const ledger_command *cmd)
{
    return apply_to_existing(ctx, cmd, apply_extend);
}

int ledger_entitlement_revoke_apply(ledger_ctx *ctx, const ledger_command *cmd)
{
    return apply_to_existing(ctx, cmd, apply_revoke);
}

int ledger_entitlement_expire(ledger_ctx *ctx, const void *key, size_t key_len, bool *expired)
{
    *expired = false;
    MDB_val val;
    int rc = store_get(ctx->txn, STORE_DB_ENTITLEMENTS, key, key_len, &val);
    if (rc == TALLY_not_found)
        return TALLY_ok;
    if (rc != TALLY_ok)
        return rc;
    ledger_entitlement e;
    rc = ledger_entitlement_decode(key, key_len, val.mv_data, val.mv_size, &e);
    if (rc != TALLY_ok)
        return rc;
    if (e.state != LEDGER_ENTITLEMENT_ACTIVE ||
        ledger_entitlement_state_at(&e, ctx->now_ms) != LEDGER_ENTITLEMENT_EXPIRED)
        return TALLY_ok;
    rc = expire_now(ctx, &e);
    *expired = rc == TALLY_ok;
    return rc;
}
