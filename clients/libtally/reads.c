/*
 * reads.c — the reads of libtally (tally.h, "reads"): decoding each reply
 * shape (accounts and their pages, transfers, entitlements, history,
 * events, stats; the object decoders also read event bodies for the inbox
 * helper's tally_*_from_msgpack), and the read calls.
 * Events are decoded by clients/libtally/events.c (the log's own codec).
 */
#include "common/base64.h"
#include "clients/libtally/libtally_internal.h"

#include "common/limits.h"
#include "common/log_event.h"

#include <stdlib.h>
#include <string.h>


/* ---- decoding read replies ---- */

bool client_account_decode(const msgpack_object *o, void *out)
{
    tally_account *a = out;
    decoder d = decoder_of_record(o);
    a->id = dec_uint(&d, "id", UINT64_MAX);
    a->ledger = (uint32_t)dec_uint(&d, "ledger", UINT32_MAX);
    a->code = (uint16_t)dec_uint(&d, "code", UINT16_MAX);
    a->flags = (uint16_t)dec_uint(&d, "flags", UINT16_MAX);
    a->debits_posted = dec_int(&d, "debits_posted");
    a->credits_posted = dec_int(&d, "credits_posted");
    a->debits_pending = dec_int(&d, "debits_pending");
    a->credits_pending = dec_int(&d, "credits_pending");
    a->version = dec_uint(&d, "version", UINT64_MAX);
    a->created_seq = dec_uint(&d, "created_seq", UINT64_MAX);
    a->created_ms = dec_has(&d, "created_ms") ? dec_int(&d, "created_ms") : 0;
    dec_user_data(&d, &a->user_data);
    return d.ok;
}

bool client_transfer_decode(const msgpack_object *o, void *out)
{
    tally_transfer_info *t = out;
    decoder d = decoder_of_record(o);
    dec_id(&d, "id", &t->id);
    t->debit_account_id = dec_uint(&d, "debit_account_id", UINT64_MAX);
    t->credit_account_id = dec_uint(&d, "credit_account_id", UINT64_MAX);
    t->amount = dec_int(&d, "amount");
    t->ledger = (uint32_t)dec_uint(&d, "ledger", UINT32_MAX);
    t->code = (uint16_t)dec_uint(&d, "code", UINT16_MAX);
    t->flags = (uint16_t)dec_uint(&d, "flags", UINT16_MAX);
    dec_state(&d, "state", log_transfer_state_name, t->state, sizeof(t->state));
    t->timeout_s = (uint32_t)dec_uint(&d, "timeout_s", UINT32_MAX);
    t->expires_at_ms = dec_int(&d, "expires_at_ms");
    t->posted_amount = dec_int(&d, "posted_amount");
    t->version = dec_uint(&d, "version", UINT64_MAX);
    t->created_seq = dec_uint(&d, "created_seq", UINT64_MAX);
    t->resolved_seq = dec_uint(&d, "resolved_seq", UINT64_MAX);
    t->created_ms = dec_int(&d, "created_ms");
    dec_user_data(&d, &t->user_data);
    memset(&t->reverses, 0, sizeof(t->reverses));
    t->reversed_amount = 0;
    if (dec_has(&d, "reverses"))
        dec_id(&d, "reverses", &t->reverses);
    if (dec_has(&d, "reversed_amount"))
        t->reversed_amount = dec_int(&d, "reversed_amount");
    return d.ok;
}

bool client_entitlement_decode(const msgpack_object *o, void *out)
{
    tally_entitlement *e = out;
    decoder d = decoder_of_record(o);
    memset(e, 0, sizeof(*e));
    dec_str(&d, "subject", e->subject, sizeof(e->subject));
    dec_str(&d, "feature", e->feature, sizeof(e->feature));
    dec_state(&d, "state", log_entitlement_state_name, e->state, sizeof(e->state));
    e->lifetime = !dec_present(&d, "valid_until_ms");
    if (!e->lifetime)
        e->valid_until_ms = dec_int(&d, "valid_until_ms");
    e->version = dec_uint(&d, "version", UINT64_MAX);
    e->has_source_order = dec_present(&d, "source_order");
    if (e->has_source_order)
        e->source_order = dec_uint(&d, "source_order", UINT64_MAX);
    e->granted_ms = dec_int(&d, "granted_ms");
    e->updated_ms = dec_int(&d, "updated_ms");
    e->has_grant_transfer = dec_present(&d, "grant_transfer_id");
    if (e->has_grant_transfer)
        dec_id(&d, "grant_transfer_id", &e->grant_transfer_id);
    return d.ok;
}

static bool history_entry_decode(const msgpack_object *o, void *out)
{
    tally_history_entry *h = out;
    decoder d = decoder_of(o);
    h->seq = dec_uint(&d, "seq", UINT64_MAX);
    dec_str(&d, "type", h->type, sizeof(h->type));
    h->time_ms = dec_int(&d, "time_ms");
    return d.ok && client_transfer_decode(dec_get(&d, "transfer"), &h->transfer) &&
           client_account_decode(dec_get(&d, "account"), &h->account);
}

/* One log_read element: the event's stored bytes (bin). */
static bool event_decode(const msgpack_object *o, void *out)
{
    const void *bytes;
    size_t len;
    if (!msgpack_safe_get_bin(o, &bytes, &len)) {
        memset(out, 0, sizeof(tally_event));
        return false;
    }
    return client_event_from_bytes(bytes, len, out);
}

static bool stats_decode(const msgpack_object *o, void *out)
{
    tally_stats *s = out;
    decoder d = decoder_of(o);
    s->head_seq = dec_uint(&d, "head_seq", UINT64_MAX);
    s->first_seq = dec_uint(&d, "first_seq", UINT64_MAX);
    s->accounts = dec_uint(&d, "accounts", UINT64_MAX);
    s->transfers = dec_uint(&d, "transfers", UINT64_MAX);
    s->entitlements = dec_uint(&d, "entitlements", UINT64_MAX);
    s->inbox = dec_uint(&d, "inbox", UINT64_MAX);
    s->events = dec_uint(&d, "events", UINT64_MAX);
    s->map_used_bytes = dec_uint(&d, "map_used_bytes", UINT64_MAX);
    s->map_size_bytes = dec_uint(&d, "map_size_bytes", UINT64_MAX);
    uint64_t max_bytes = 0; /* optional: absent from servers before it */
    if (d.ok)
        msgpack_safe_get_u64(msgpack_safe_map_get(d.map, "map_max_bytes"), &max_bytes);
    s->map_max_bytes = max_bytes;
    const msgpack_object *subscribers = dec_get(&d, "subscribers");
    if (d.ok && subscribers->type != MSGPACK_OBJECT_ARRAY)
        return false;
    s->subscribers = d.ok ? subscribers->via.array.size : 0;
    s->inbox_oldest_age_s = dec_uint(&d, "inbox_oldest_age_s", INT64_MAX);
    s->log_floor = dec_uint(&d, "log_floor", UINT64_MAX);
    return d.ok;
}

/* Decode up to capacity elements of array o into out (stride bytes each);
 * *count gets how many decoded, also when one fails (false). */
bool client_array_decode(const msgpack_object *o, decode_fn decode, void *out, size_t stride,
                         size_t capacity, size_t *count)
{
    *count = 0;
    if (o == NULL || o->type != MSGPACK_OBJECT_ARRAY)
        return false;
    size_t n = o->via.array.size < capacity ? o->via.array.size : capacity;
    for (size_t i = 0; i < n; i++) {
        if (!decode(&o->via.array.ptr[i], (char *)out + i * stride))
            return false;
        (*count)++;
    }
    return true;
}

/* ---- reads ---- */

/* Send a read; on TALLY_ok r is live and its code is ok. */
int client_read_exchange(tally_client *c, const fields *fs, uint32_t extra_wait_ms, reply *r)
{
    int rc = client_call(c, fs, extra_wait_ms, r);
    if (rc == TALLY_ok && r->code != TALLY_ok) {
        rc = r->code;
        client_reply_free(r);
    }
    return rc;
}

/* A read op (not a control op): with the client's min_seq when it has
 * one (tally_client_set_min_seq). */
static int read_op_exchange(tally_client *c, const fields *fs, uint32_t extra_wait_ms, reply *r)
{
    uint64_t min_seq = client_read_min_seq(c);
    if (min_seq == 0)
        return client_read_exchange(c, fs, extra_wait_ms, r);
    fields with = *fs;
    put_uint(&with, "min_seq", min_seq);
    return client_read_exchange(c, &with, extra_wait_ms, r);
}

/* A read whose reply carries one object under name (NULL: the reply map). */
static int read_object(tally_client *c, const fields *fs, const char *name, decode_fn decode,
                       void *out)
{
    reply r;
    int rc = read_op_exchange(c, fs, 0, &r);
    if (rc != TALLY_ok)
        return rc;
    const msgpack_object *o = name ? msgpack_safe_map_get(r.root, name) : r.root;
    rc = decode(o, out) ? TALLY_ok : TALLY_internal;
    client_reply_free(&r);
    return rc;
}

int client_read_array(tally_client *c, const fields *fs, const char *name, decode_fn decode,
                      void *out, size_t stride, size_t capacity, size_t *count)
{
    reply r;
    int rc = read_op_exchange(c, fs, 0, &r);
    if (rc != TALLY_ok)
        return rc;
    rc = client_array_decode(msgpack_safe_map_get(r.root, name), decode, out, stride, capacity,
                             count)
             ? TALLY_ok
             : TALLY_internal;
    client_reply_free(&r);
    return rc;
}

int client_read_page(tally_client *c, const fields *fs, decode_fn decode, void *out,
                     size_t stride, size_t capacity, size_t *count, uint64_t *next)
{
    reply r;
    int rc = read_op_exchange(c, fs, 0, &r);
    if (rc != TALLY_ok)
        return rc;
    decoder d = decoder_of(r.root);
    *next = dec_present(&d, "next") ? dec_uint(&d, "next", UINT64_MAX) : 0;
    bool ok = d.ok && client_array_decode(msgpack_safe_map_get(r.root, "entries"), decode, out,
                                          stride, capacity, count);
    client_reply_free(&r);
    return ok ? TALLY_ok : TALLY_internal;
}

int tally_account_get(tally_client *c, uint64_t id, tally_account *out)
{
    if (c == NULL || out == NULL)
        return TALLY_invalid_argument;
    fields fs;
    client_fields_begin(&fs, "account_get", NULL, NULL);
    put_uint(&fs, "id", id);
    return read_object(c, &fs, "account", client_account_decode, out);
}

int tally_transfer_get(tally_client *c, const tally_uuid *id, tally_transfer_info *out)
{
    if (c == NULL || id == NULL || out == NULL)
        return TALLY_invalid_argument;
    fields fs;
    client_fields_begin(&fs, "transfer_get", NULL, NULL);
    put_id(&fs, "id", id);
    return read_object(c, &fs, "transfer", client_transfer_decode, out);
}

int tally_entitlement_get(tally_client *c, const char *subject, const char *feature,
                          tally_entitlement *out)
{
    if (c == NULL || subject == NULL || feature == NULL || out == NULL)
        return TALLY_invalid_argument;
    fields fs;
    client_fields_begin(&fs, "entitlement_get", NULL, NULL);
    put_str(&fs, "subject", subject);
    put_str(&fs, "feature", feature);
    return read_object(c, &fs, "entitlement", client_entitlement_decode, out);
}

static bool endpoint_decode(const msgpack_object *o, void *out)
{
    tally_endpoint_info *e = out;
    decoder d = decoder_of(o);
    dec_endpoint_head(&d, e->endpoint, sizeof(e->endpoint), &e->disabled, &e->version,
                      &e->changed_ms);
    dec_str(&d, "reason", e->reason, sizeof(e->reason));
    e->previous_secret_until_ms = dec_int(&d, "previous_secret_until_ms");
    e->recover_since_ms = dec_int(&d, "recover_since_ms");
    e->recover_version = dec_uint(&d, "recover_version", UINT64_MAX);
    return d.ok;
}

int tally_endpoint_get(tally_client *c, const char *name, tally_endpoint_info *out)
{
    if (c == NULL || name == NULL || out == NULL)
        return TALLY_invalid_argument;
    memset(out, 0, sizeof(*out));
    fields fs;
    client_fields_begin(&fs, "endpoint_get", NULL, NULL);
    put_str(&fs, "endpoint", name);
    return read_object(c, &fs, NULL, endpoint_decode, out);
}

/* A "whsec_<base64>" text (or "") of the reply into a key. */
static void secret_decode(decoder *d, const char *name, uint8_t *out, size_t *len)
{
    char text[128] = {0};
    dec_str(d, name, text, sizeof(text));
    const char *b64 = memcmp(text, "whsec_", 6) == 0 ? text + 6 : text;
    *len = 0;
    if (d->ok && text[0])
        d->ok = base64_decode_strict(b64, strlen(b64), out, TALLY_CLIENT_ENDPOINT_SECRET_BYTES_MAX,
                                     len);
}

static bool secrets_decode(const msgpack_object *o, void *out)
{
    tally_endpoint_secrets *s = out;
    decoder d = decoder_of(o);
    s->version = dec_uint(&d, "version", UINT64_MAX);
    secret_decode(&d, "secret", s->secret, &s->secret_len);
    secret_decode(&d, "previous_secret", s->previous, &s->previous_len);
    s->previous_until_ms = dec_int(&d, "previous_until_ms");
    return d.ok;
}

int tally_endpoint_secrets_get(tally_client *c, const char *name, tally_endpoint_secrets *out)
{
    if (c == NULL || name == NULL || out == NULL)
        return TALLY_invalid_argument;
    memset(out, 0, sizeof(*out));
    fields fs;
    client_fields_begin(&fs, "endpoint_secret_get", NULL, NULL);
    put_str(&fs, "endpoint", name);
    return read_object(c, &fs, NULL, secrets_decode, out);
}

int tally_stats_get(tally_client *c, tally_stats *out)
{
    if (c == NULL || out == NULL)
        return TALLY_invalid_argument;
    fields fs;
    client_fields_begin(&fs, "stats", NULL, NULL);
    return read_object(c, &fs, NULL, stats_decode, out);
}

static bool backup_decode(const msgpack_object *o, void *out)
{
    decoder d = decoder_of(o);
    *(uint64_t *)out = dec_uint(&d, "bytes", UINT64_MAX);
    return d.ok;
}

#define BACKUP_WAIT_MS 600000 /* a large store takes a while to copy */

int tally_backup(tally_client *c, const char *path, uint64_t *bytes)
{
    if (c == NULL || path == NULL || bytes == NULL || path[0] != '/')
        return TALLY_invalid_argument;
    fields fs;
    client_fields_begin(&fs, "backup", NULL, NULL);
    put_str(&fs, "path", path);
    reply r;
    int rc = client_read_exchange(c, &fs, BACKUP_WAIT_MS, &r);
    if (rc != TALLY_ok)
        return rc;
    rc = backup_decode(r.root, bytes) ? TALLY_ok : TALLY_internal;
    client_reply_free(&r);
    return rc;
}

static bool health_check_decode(const msgpack_object *o, void *out)
{
    tally_health_check *k = out;
    decoder d = decoder_of(o);
    memset(k, 0, sizeof(*k));
    dec_str(&d, "check", k->check, sizeof(k->check));
    if (dec_present(&d, "subscriber"))
        dec_str(&d, "subscriber", k->subscriber, sizeof(k->subscriber));
    k->ok = dec_bool(&d, "ok");
    k->value = dec_uint(&d, "value", UINT64_MAX);
    k->threshold = dec_uint(&d, "threshold", UINT64_MAX);
    dec_str(&d, "reason", k->reason, sizeof(k->reason));
    return d.ok;
}

/* A check's class ("readiness" when absent: see tally_health_classes). */
static bool health_class_decode(const msgpack_object *o, void *out)
{
    char cls[16] = "";
    decoder d = decoder_of(o);
    if (dec_present(&d, "class"))
        dec_str(&d, "class", cls, sizeof(cls));
    *(tally_check_class *)out = strcmp(cls, "alert") == 0 ? TALLY_CHECK_ALERT
                                                          : TALLY_CHECK_READINESS;
    return d.ok;
}

int tally_health_classes(tally_client *c, bool *ready, bool *healthy, tally_health_check *out,
                         tally_check_class *classes, size_t capacity, size_t *count)
{
    if (c == NULL || healthy == NULL || out == NULL || capacity == 0 || count == NULL)
        return TALLY_invalid_argument;
    fields fs;
    client_fields_begin(&fs, "health", NULL, NULL);
    reply r;
    int rc = client_read_exchange(c, &fs, 0, &r);
    if (rc != TALLY_ok)
        return rc;
    decoder d = decoder_of(r.root);
    *healthy = dec_bool(&d, "healthy");
    if (ready)
        *ready = dec_present(&d, "ready") ? dec_bool(&d, "ready") : *healthy;
    const msgpack_object *list = msgpack_safe_map_get(r.root, "checks");
    size_t classes_count = 0;
    bool ok = d.ok &&
              client_array_decode(list, health_check_decode, out, sizeof(*out), capacity, count) &&
              (classes == NULL || client_array_decode(list, health_class_decode, classes,
                                                      sizeof(*classes), capacity, &classes_count));
    client_reply_free(&r);
    return ok ? TALLY_ok : TALLY_internal;
}

int tally_cluster_status_get(tally_client *c, tally_cluster_status *out)
{
    if (c == NULL || out == NULL)
        return TALLY_invalid_argument;
    memset(out, 0, sizeof(*out));
    fields fs;
    client_fields_begin(&fs, "cluster_status", NULL, NULL);
    reply r;
    int rc = client_read_exchange(c, &fs, 0, &r);
    if (rc != TALLY_ok)
        return rc;
    decoder d = decoder_of(r.root);
    dec_str(&d, "node", out->node, sizeof(out->node));
    dec_str(&d, "stream", out->stream, sizeof(out->stream));
    out->position = dec_uint(&d, "position", UINT64_MAX);
    out->stream_last_seq = dec_uint(&d, "stream_last_seq", UINT64_MAX);
    out->lag_messages = dec_uint(&d, "lag_messages", UINT64_MAX);
    if (dec_has(&d, "checkpoint_position")) {
        out->checkpoint_position = dec_uint(&d, "checkpoint_position", UINT64_MAX);
        out->checkpoint_agreeing = dec_uint(&d, "checkpoint_agreeing", UINT64_MAX);
        out->checkpoint_nodes = dec_uint(&d, "checkpoint_nodes", UINT64_MAX);
        out->diverged = dec_bool(&d, "diverged");
    }
    client_reply_free(&r);
    return d.ok ? TALLY_ok : TALLY_internal;
}

int tally_health(tally_client *c, bool *healthy, tally_health_check *out, size_t capacity,
                 size_t *count)
{
    return tally_health_classes(c, NULL, healthy, out, NULL, capacity, count);
}

int tally_entitlement_list(tally_client *c, const char *subject, tally_entitlement *out,
                           size_t capacity, size_t *count)
{
    if (c == NULL || subject == NULL || out == NULL || capacity == 0 || count == NULL)
        return TALLY_invalid_argument;
    fields fs;
    client_fields_begin(&fs, "entitlement_list", NULL, NULL);
    put_str(&fs, "subject", subject);
    return client_read_array(c, &fs, "entitlements", client_entitlement_decode, out, sizeof(*out),
                             capacity, count);
}

int tally_account_history(tally_client *c, uint64_t id, uint64_t after_seq, uint32_t limit,
                          bool reverse, tally_history_entry *out, size_t capacity,
                          size_t *count, uint64_t *next)
{
    if (c == NULL || out == NULL || capacity == 0 || count == NULL || next == NULL)
        return TALLY_invalid_argument;
    fields fs;
    client_fields_begin(&fs, "account_history", NULL, NULL);
    put_uint(&fs, "id", id);
    put_uint(&fs, "after_seq", after_seq);
    put_uint(&fs, "limit", client_page_limit(limit, capacity, TALLY_HISTORY_ENTRIES_DEFAULT,
                                             TALLY_HISTORY_ENTRIES_MAX));
    put_bool(&fs, "reverse", reverse);
    return client_read_page(c, &fs, history_entry_decode, out, sizeof(*out), capacity, count,
                            next);
}

int tally_account_list(tally_client *c, uint64_t after_id, uint32_t limit, tally_account *out,
                       size_t capacity, size_t *count, uint64_t *next)
{
    if (c == NULL || out == NULL || capacity == 0 || count == NULL || next == NULL)
        return TALLY_invalid_argument;
    fields fs;
    client_fields_begin(&fs, "account_list", NULL, NULL);
    put_uint(&fs, "after_id", after_id);
    put_uint(&fs, "limit", client_page_limit(limit, capacity, TALLY_ACCOUNT_LIST_ENTRIES_DEFAULT,
                                             TALLY_ACCOUNT_LIST_ENTRIES_MAX));
    return client_read_page(c, &fs, client_account_decode, out, sizeof(*out), capacity, count,
                            next);
}

void tally_events_release(tally_event *events, size_t count)
{
    for (size_t i = 0; events != NULL && i < count; i++) {
        free((void *)events[i].raw);
        events[i].raw = NULL;
        events[i].raw_len = 0;
    }
}

int tally_log_read(tally_client *c, uint64_t from_seq, uint32_t limit, uint32_t wait_ms,
                   tally_event *out, size_t capacity, size_t *count, uint64_t *head_seq)
{
    if (c == NULL || out == NULL || capacity == 0 || count == NULL || head_seq == NULL)
        return TALLY_invalid_argument;
    fields fs;
    client_fields_begin(&fs, "log_read", NULL, NULL);
    put_uint(&fs, "from_seq", from_seq ? from_seq : 1);
    put_uint(&fs, "limit", client_page_limit(limit, capacity, TALLY_LOG_READ_EVENTS_DEFAULT,
                                      TALLY_LOG_READ_EVENTS_MAX));
    put_uint(&fs, "wait_ms", wait_ms);
    reply r;
    int rc = read_op_exchange(c, &fs, wait_ms, &r);
    if (rc != TALLY_ok)
        return rc;
    decoder d = decoder_of(r.root);
    *head_seq = dec_uint(&d, "head", UINT64_MAX);
    bool ok = d.ok && client_array_decode(msgpack_safe_map_get(r.root, "events"), event_decode,
                                          out, sizeof(*out), capacity, count);
    client_reply_free(&r);
    rc = !ok ? TALLY_internal : client_events_chained(out, *count) ? TALLY_ok : TALLY_corrupt_record;
    if (rc != TALLY_ok) {
        tally_events_release(out, *count);
        *count = 0;
    }
    return rc;
}
