/*
 * writes.c — the writes of libtally (tally.h, "writes", "batches and
 * atomic chains"): each write is a field list sent under its idempotency
 * key (a single write through autobatch.c, which may merge it with
 * others); a batch or chain packs its members once, when they are added,
 * so a resend is the same bytes.
 */
#include "clients/libtally/libtally_internal.h"

#include "common/limits.h"

#include <stdlib.h>
#include <string.h>

_Static_assert(TALLY_CLIENT_CHAIN_MAX == TALLY_CHAIN_COMMANDS_MAX, "chain limit as the server's");
_Static_assert(TALLY_CLIENT_BATCH_MAX == TALLY_BATCH_OPS_MAX, "batch limit as the server's");

typedef int (*fill_fn)(fields *fs, const void *args);

/* A single write op: its wire name and how its fields are filled. */
typedef struct write_op {
    const char *name;
    fill_fn fill;
    const void *args;
} write_op;

typedef struct hold_args {
    const tally_uuid *pending_id;
    int64_t amount;
} hold_args;

/* User data only when set: a server without it takes the request. */
static void put_user_data(fields *fs, const tally_user_data *u)
{
    static const tally_uuid zero;
    if (memcmp(u->user_data_128.bytes, zero.bytes, 16) != 0)
        put_id(fs, "user_data_128", &u->user_data_128);
    if (u->user_data_64 != 0)
        put_uint(fs, "user_data_64", u->user_data_64);
    if (u->user_data_32 != 0)
        put_uint(fs, "user_data_32", u->user_data_32);
}

static int fill_account_open(fields *fs, const void *args)
{
    const tally_account_open_args *a = args;
    if (a == NULL)
        return TALLY_invalid_argument;
    put_uint(fs, "id", a->id);
    put_uint(fs, "ledger", a->ledger);
    put_uint(fs, "code", a->code);
    put_uint(fs, "flags", a->flags);
    put_user_data(fs, &a->user_data);
    if (a->timestamp_ms != 0)
        put_int(fs, "timestamp_ms", a->timestamp_ms);
    return TALLY_ok;
}

static int fill_transfer(fields *fs, const void *args)
{
    const tally_transfer_args *t = args;
    if (t == NULL)
        return TALLY_invalid_argument;
    put_id(fs, "id", &t->id);
    put_uint(fs, "debit_account_id", t->debit_account_id);
    put_uint(fs, "credit_account_id", t->credit_account_id);
    put_int(fs, "amount", t->amount);
    put_uint(fs, "ledger", t->ledger);
    put_uint(fs, "code", t->code);
    put_uint(fs, "flags", t->flags);
    if (t->timeout_s != 0)
        put_uint(fs, "timeout_s", t->timeout_s);
    put_user_data(fs, &t->user_data);
    if (t->timestamp_ms != 0)
        put_int(fs, "timestamp_ms", t->timestamp_ms);
    return TALLY_ok;
}

static int fill_reverse(fields *fs, const void *args)
{
    const tally_reverse_args *r = args;
    if (r == NULL)
        return TALLY_invalid_argument;
    put_id(fs, "id", &r->id);
    put_id(fs, "reverses", &r->reverses);
    if (r->amount != 0)
        put_int(fs, "amount", r->amount);
    if (r->code != 0)
        put_uint(fs, "code", r->code);
    put_user_data(fs, &r->user_data);
    return TALLY_ok;
}

static int fill_post(fields *fs, const void *args)
{
    const hold_args *h = args;
    if (h->pending_id == NULL)
        return TALLY_invalid_argument;
    put_id(fs, "pending_id", h->pending_id);
    if (h->amount != 0)
        put_int(fs, "amount", h->amount);
    return TALLY_ok;
}

static int fill_void(fields *fs, const void *args)
{
    const hold_args *h = args;
    if (h->pending_id == NULL)
        return TALLY_invalid_argument;
    put_id(fs, "pending_id", h->pending_id);
    return TALLY_ok;
}

static int fill_entitlement(fields *fs, const void *args)
{
    const tally_entitlement_args *e = args;
    if (e == NULL || e->subject == NULL || e->feature == NULL)
        return TALLY_invalid_argument;
    put_str(fs, "subject", e->subject);
    put_str(fs, "feature", e->feature);
    if (e->valid_until_ms != 0)
        put_int(fs, "valid_until_ms", e->valid_until_ms);
    if (e->duration_ms != 0)
        put_int(fs, "duration_ms", e->duration_ms);
    if (e->has_source_order)
        put_uint(fs, "source_order", e->source_order);
    if (e->has_grant_transfer)
        put_id(fs, "grant_transfer_id", &e->grant_transfer_id);
    return TALLY_ok;
}

static void result_clear(tally_result *out, const char *key)
{
    memset(out, 0, sizeof(*out));
    out->failed_index = -1;
    if (key != NULL)
        memcpy(out->key, key, strlen(key) + 1);
}

static void result_codes(tally_result *out, const msgpack_object *codes)
{
    if (codes == NULL || codes->type != MSGPACK_OBJECT_ARRAY)
        return;
    uint32_t n = codes->via.array.size;
    out->chain_count = n < TALLY_CLIENT_CHAIN_MAX ? n : TALLY_CLIENT_CHAIN_MAX;
    for (uint32_t i = 0; i < out->chain_count; i++)
        out->chain_codes[i] = client_code_of(&codes->via.array.ptr[i]);
}

int client_result_fill(tally_result *out, const msgpack_object *m)
{
    uint64_t v;
    const msgpack_object *replayed = msgpack_safe_map_get(m, "replayed");
    out->code = client_code_of(msgpack_safe_map_get(m, "code"));
    out->replayed = replayed && replayed->type == MSGPACK_OBJECT_BOOLEAN && replayed->via.boolean;
    out->seq = msgpack_safe_get_u64(msgpack_safe_map_get(m, "seq"), &v) ? v : 0;
    out->original_seq = msgpack_safe_get_u64(msgpack_safe_map_get(m, "original_seq"), &v) ? v : 0;
    out->events = msgpack_safe_get_u64(msgpack_safe_map_get(m, "events"), &v) && v <= UINT32_MAX
                      ? (uint32_t)v
                      : 0;
    result_codes(out, msgpack_safe_map_get(m, "codes"));
    out->failed_index = msgpack_safe_get_u64(msgpack_safe_map_get(m, "failed_index"), &v) &&
                                v < TALLY_CLIENT_CHAIN_MAX
                            ? (int)v
                            : -1;
    return out->code;
}

int client_write_exchange(tally_client *c, const fields *fs, tally_result *out)
{
    reply r;
    int rc = client_call(c, fs, 0, &r);
    if (rc != TALLY_ok)
        return out->code = rc;
    rc = r.root ? client_result_fill(out, r.root) : (out->code = r.code);
    client_reply_free(&r);
    return rc;
}

int client_batch_call(tally_client *c, const tally_batch *b, reply *r)
{
    fields fs;
    client_fields_begin(&fs, "batch", c, NULL);
    put_ops(&fs, b);
    return client_call(c, &fs, 0, r);
}

const msgpack_object *client_batch_results(const reply *r, size_t count)
{
    const msgpack_object *list =
        r->code == TALLY_ok ? msgpack_safe_map_get(r->root, "results") : NULL;
    return list != NULL && list->type == MSGPACK_OBJECT_ARRAY && list->via.array.size == count
               ? list
               : NULL;
}

static int write_single(tally_client *c, const char *key, write_op op, tally_result *out)
{
    if (out == NULL)
        return TALLY_invalid_argument;
    result_clear(out, NULL);
    int rc = client_key_resolve(key, out->key);
    if (rc != TALLY_ok || c == NULL)
        return out->code = rc != TALLY_ok ? rc : TALLY_invalid_argument;
    fields fs;
    client_fields_begin(&fs, op.name, c, out->key);
    rc = op.fill(&fs, op.args);
    if (rc != TALLY_ok)
        return out->code = rc;
    return client_autobatch_write(c, &fs, out);
}

int tally_account_open(tally_client *c, const char *key, const tally_account_open_args *a,
                       tally_result *out)
{
    return write_single(c, key, (write_op){"account_open", fill_account_open, a}, out);
}

int tally_transfer(tally_client *c, const char *key, const tally_transfer_args *t,
                   tally_result *out)
{
    return write_single(c, key, (write_op){"transfer", fill_transfer, t}, out);
}

int tally_reverse(tally_client *c, const char *key, const tally_reverse_args *r,
                  tally_result *out)
{
    return write_single(c, key, (write_op){"transfer_reverse", fill_reverse, r}, out);
}

int tally_post(tally_client *c, const char *key, const tally_uuid *pending_id, int64_t amount,
               tally_result *out)
{
    hold_args h = {pending_id, amount};
    return write_single(c, key, (write_op){"post", fill_post, &h}, out);
}

int tally_void(tally_client *c, const char *key, const tally_uuid *pending_id, tally_result *out)
{
    hold_args h = {pending_id, 0};
    return write_single(c, key, (write_op){"void", fill_void, &h}, out);
}

int tally_grant(tally_client *c, const char *key, const tally_entitlement_args *e,
                tally_result *out)
{
    return write_single(c, key, (write_op){"grant", fill_entitlement, e}, out);
}

int tally_extend(tally_client *c, const char *key, const tally_entitlement_args *e,
                 tally_result *out)
{
    return write_single(c, key, (write_op){"extend", fill_entitlement, e}, out);
}

int tally_revoke(tally_client *c, const char *key, const tally_entitlement_args *e,
                 tally_result *out)
{
    return write_single(c, key, (write_op){"revoke", fill_entitlement, e}, out);
}

typedef struct endpoint_args {
    const char *endpoint, *reason;
} endpoint_args;

static int fill_endpoint(fields *fs, const void *args)
{
    const endpoint_args *e = args;
    if (e->endpoint == NULL)
        return TALLY_invalid_argument;
    put_str(fs, "endpoint", e->endpoint);
    if (e->reason && e->reason[0])
        put_str(fs, "reason", e->reason);
    return TALLY_ok;
}

int tally_endpoint_disable(tally_client *c, const char *key, const char *name,
                           const char *reason, tally_result *out)
{
    endpoint_args a = {name, reason};
    return write_single(c, key, (write_op){"endpoint_disable", fill_endpoint, &a}, out);
}

int tally_endpoint_enable(tally_client *c, const char *key, const char *name,
                          tally_result *out)
{
    endpoint_args a = {name, NULL};
    return write_single(c, key, (write_op){"endpoint_enable", fill_endpoint, &a}, out);
}

typedef struct recover_args {
    const char *endpoint;
    const char *field;
    uint64_t value;
} recover_args;

static int fill_recover(fields *fs, const void *args)
{
    const recover_args *r = args;
    if (r->endpoint == NULL)
        return TALLY_invalid_argument;
    put_str(fs, "endpoint", r->endpoint);
    if (strcmp(r->field, "since_ms") == 0)
        put_int(fs, r->field, (int64_t)r->value);
    else
        put_uint(fs, r->field, r->value);
    return TALLY_ok;
}

int tally_endpoint_recover(tally_client *c, const char *key, const char *name, int64_t since_ms,
                           tally_result *out)
{
    recover_args a = {name, "since_ms", (uint64_t)since_ms};
    return write_single(c, key, (write_op){"endpoint_recover", fill_recover, &a}, out);
}

int tally_endpoint_recovered(tally_client *c, const char *key, const char *name,
                             uint64_t recover_version, tally_result *out)
{
    recover_args a = {name, "recover_version", recover_version};
    return write_single(c, key, (write_op){"endpoint_recovered", fill_recover, &a}, out);
}

typedef struct rotate_args {
    const char *endpoint, *secret;
    uint32_t overlap_s;
} rotate_args;

static int fill_rotate(fields *fs, const void *args)
{
    const rotate_args *r = args;
    if (r->endpoint == NULL || r->secret == NULL)
        return TALLY_invalid_argument;
    put_str(fs, "endpoint", r->endpoint);
    put_str(fs, "secret", r->secret);
    put_uint(fs, "overlap_s", r->overlap_s);
    return TALLY_ok;
}

int tally_endpoint_rotate_secret(tally_client *c, const char *key, const char *name,
                                 const char *secret, uint32_t overlap_s, tally_result *out)
{
    rotate_args a = {name, secret, overlap_s};
    return write_single(c, key, (write_op){"endpoint_rotate_secret", fill_rotate, &a}, out);
}

static int fill_endpoint_define(fields *fs, const void *args)
{
    const tally_endpoint_args *a = args;
    if (a->endpoint == NULL)
        return TALLY_invalid_argument;
    put_str(fs, "endpoint", a->endpoint);
    const struct {
        const char *field, *text;
    } texts[] = {{"url", a->url}, {"secret", a->secret}, {"types", a->types},
                 {"retry_schedule", a->retry_schedule}, {"backfill", a->backfill}};
    for (size_t i = 0; i < sizeof(texts) / sizeof(texts[0]); i++)
        if (texts[i].text)
            put_str(fs, texts[i].field, texts[i].text);
    if (a->set_connect_timeout)
        put_uint(fs, "connect_timeout_ms", a->connect_timeout_ms);
    if (a->set_timeout)
        put_uint(fs, "timeout_ms", a->timeout_ms);
    return TALLY_ok;
}

int tally_endpoint_create(tally_client *c, const char *key, const tally_endpoint_args *a,
                          tally_result *out)
{
    if (a == NULL)
        return TALLY_invalid_argument;
    return write_single(c, key, (write_op){"endpoint_create", fill_endpoint_define, a}, out);
}

int tally_endpoint_update(tally_client *c, const char *key, const tally_endpoint_args *a,
                          tally_result *out)
{
    if (a == NULL || a->secret || a->backfill)
        return TALLY_invalid_argument; /* endpoint_rotate_secret; create only */
    return write_single(c, key, (write_op){"endpoint_update", fill_endpoint_define, a}, out);
}

int tally_endpoint_delete(tally_client *c, const char *key, const char *name, tally_result *out)
{
    endpoint_args a = {name, NULL};
    return write_single(c, key, (write_op){"endpoint_delete", fill_endpoint, &a}, out);
}

/* ---- batches and chains ---- */

tally_batch *tally_batch_new(bool atomic)
{
    tally_batch *b = calloc(1, sizeof(*b));
    if (b == NULL)
        return NULL;
    b->atomic = atomic;
    msgpack_sbuffer_init(&b->members);
    if (atomic && client_key_resolve(NULL, b->chain_key) != TALLY_ok) {
        free(b);
        return NULL;
    }
    return b;
}

void tally_batch_free(tally_batch *b)
{
    if (b == NULL)
        return;
    msgpack_sbuffer_destroy(&b->members);
    free(b->keys);
    free(b);
}

size_t tally_batch_count(const tally_batch *b)
{
    return b ? b->count : 0;
}

static int batch_keys_reserve(tally_batch *b)
{
    if (b->count < b->keys_capacity)
        return TALLY_ok;
    size_t cap = b->keys_capacity ? 2 * b->keys_capacity : 16;
    if (cap > TALLY_CLIENT_BATCH_MAX)
        cap = TALLY_CLIENT_BATCH_MAX;
    void *keys = realloc(b->keys, cap * sizeof(*b->keys));
    if (keys == NULL)
        return TALLY_out_of_memory;
    b->keys = keys;
    b->keys_capacity = cap;
    return TALLY_ok;
}

/* Pack one member (op, key in a batch, the op's fields) onto b. */
static int batch_add(tally_batch *b, const char *key, write_op op)
{
    char k[KEY_BUFFER_BYTES];
    if (b == NULL)
        return TALLY_invalid_argument;
    if (b->count >= (b->atomic ? TALLY_CLIENT_CHAIN_MAX : TALLY_CLIENT_BATCH_MAX))
        return TALLY_too_many_operations;
    int rc = b->atomic ? TALLY_ok : client_key_resolve(key, k);
    if (rc == TALLY_ok && !b->atomic)
        rc = batch_keys_reserve(b);
    fields fs;
    client_fields_begin(&fs, op.name, NULL, b->atomic ? NULL : k);
    if (rc == TALLY_ok)
        rc = op.fill(&fs, op.args);
    if (rc != TALLY_ok)
        return rc;
    msgpack_packer pk;
    msgpack_packer_init(&pk, &b->members, msgpack_sbuffer_write);
    size_t before = b->members.size;
    if (client_pack_member(&pk, &fs) != 0) { /* the same member map a merged single write packs */
        b->members.size = before; /* drop the partial member */
        return TALLY_out_of_memory;
    }
    if (!b->atomic)
        memcpy(b->keys[b->count], k, strlen(k) + 1);
    b->count++;
    return TALLY_ok;
}

int tally_batch_account_open(tally_batch *b, const char *key, const tally_account_open_args *a)
{
    return batch_add(b, key, (write_op){"account_open", fill_account_open, a});
}

int tally_batch_transfer(tally_batch *b, const char *key, const tally_transfer_args *t)
{
    return batch_add(b, key, (write_op){"transfer", fill_transfer, t});
}

int tally_batch_post(tally_batch *b, const char *key, const tally_uuid *pending_id, int64_t amount)
{
    hold_args h = {pending_id, amount};
    return batch_add(b, key, (write_op){"post", fill_post, &h});
}

int tally_batch_void(tally_batch *b, const char *key, const tally_uuid *pending_id)
{
    hold_args h = {pending_id, 0};
    return batch_add(b, key, (write_op){"void", fill_void, &h});
}

int tally_batch_grant(tally_batch *b, const char *key, const tally_entitlement_args *e)
{
    return batch_add(b, key, (write_op){"grant", fill_entitlement, e});
}

int tally_batch_extend(tally_batch *b, const char *key, const tally_entitlement_args *e)
{
    return batch_add(b, key, (write_op){"extend", fill_entitlement, e});
}

int tally_batch_revoke(tally_batch *b, const char *key, const tally_entitlement_args *e)
{
    return batch_add(b, key, (write_op){"revoke", fill_entitlement, e});
}

/* A chain is one write: TALLY_ok once decided (ok or a rejection). */
static int chain_send(tally_client *c, tally_batch *b, const char *key, tally_result *out)
{
    result_clear(out, NULL);
    int rc = client_key_resolve(key ? key : b->chain_key, out->key);
    if (rc != TALLY_ok)
        return out->code = rc;
    fields fs;
    client_fields_begin(&fs, "chain", c, out->key);
    put_ops(&fs, b);
    rc = client_write_exchange(c, &fs, out);
    return tally_error_is_decided(rc) ? TALLY_ok : rc;
}

static int batch_fail(tally_result *results, size_t n, int code)
{
    for (size_t i = 0; i < n; i++)
        results[i].code = code;
    return code;
}

static int batch_send(tally_client *c, tally_batch *b, tally_result *results)
{
    for (size_t i = 0; i < b->count; i++)
        result_clear(&results[i], b->keys[i]);
    reply r;
    int rc = client_batch_call(c, b, &r);
    if (rc != TALLY_ok)
        return batch_fail(results, b->count, rc);
    rc = r.code;
    const msgpack_object *list = client_batch_results(&r, b->count);
    if (rc == TALLY_ok && list == NULL)
        rc = TALLY_internal;
    for (size_t i = 0; rc == TALLY_ok && i < b->count; i++)
        client_result_fill(&results[i], &list->via.array.ptr[i]);
    client_reply_free(&r);
    return rc == TALLY_ok ? TALLY_ok : batch_fail(results, b->count, rc);
}

int tally_batch_send(tally_client *c, tally_batch *b, const char *key, tally_result *results,
                     size_t results_capacity)
{
    if (c == NULL || b == NULL || results == NULL ||
        results_capacity < (b->atomic ? 1 : b->count))
        return TALLY_invalid_argument;
    return b->atomic ? chain_send(c, b, key, results) : batch_send(c, b, results);
}
