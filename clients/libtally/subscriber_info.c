/*
 * subscriber_info.c — a durable subscriber's metrics and settings in
 * libtally (tally_subscriber.h; docs/SUBSCRIBERS.md): sub_get with its
 * in-flight events (tally_subscriber_show) and its partitions' holders
 * (tally_subscriber_partitions), sub_list, the subscribers of stats, and
 * sub_update.
 */
#include "clients/libtally/libtally_internal.h"
#include "common/limits.h"

#include <stdlib.h>

static bool backoff_decode(const msgpack_object *o, uint32_t *count, uint32_t *out)
{
    if (o == NULL || o->type != MSGPACK_OBJECT_ARRAY ||
        o->via.array.size > TALLY_CLIENT_SUB_BACKOFF_STEPS_MAX)
        return false;
    *count = o->via.array.size;
    for (uint32_t i = 0; i < *count; i++) {
        uint64_t v;
        if (!msgpack_safe_get_u64(&o->via.array.ptr[i], &v) || v > UINT32_MAX)
            return false;
        out[i] = (uint32_t)v;
    }
    return true;
}

static bool settings_decode(const msgpack_object *m, tally_subscriber_info *i);

static bool info_decode(const msgpack_object *o, void *out)
{
    tally_subscriber_info *i = out;
    decoder d = decoder_of(o);
    memset(i, 0, sizeof(*i));
    dec_str(&d, "name", i->name, sizeof(i->name));
    i->ack_floor = dec_uint(&d, "ack_floor", UINT64_MAX);
    i->delivered_seq = dec_uint(&d, "delivered_seq", UINT64_MAX);
    i->pending = dec_uint(&d, "pending", UINT64_MAX);
    i->in_flight = dec_uint(&d, "in_flight", UINT64_MAX);
    int64_t age_s = dec_int(&d, "oldest_unacked_age_s");
    i->oldest_unacked_age_s = age_s > 0 ? (uint64_t)age_s : 0; /* < 0: clocks disagree */
    i->redelivered = dec_uint(&d, "redelivered", UINT64_MAX);
    i->dead_letters = dec_uint(&d, "dead_letters", UINT64_MAX);
    i->replaying = dec_uint(&d, "replaying", UINT64_MAX);
    i->max_deliver = (uint32_t)dec_uint(&d, "max_deliver", UINT32_MAX);
    i->ack_wait_ms = (uint32_t)dec_uint(&d, "ack_wait_ms", UINT32_MAX);
    i->max_ack_pending = (uint32_t)dec_uint(&d, "max_ack_pending", UINT32_MAX);
    i->created_ms = dec_int(&d, "created_ms");
    i->updated_ms = dec_int(&d, "updated_ms");
    int64_t dead_age_s = dec_present(&d, "oldest_dead_letter_age_s") /* absent: an older server */
                             ? dec_int(&d, "oldest_dead_letter_age_s") : 0;
    int64_t fetch_age_s = dec_present(&d, "last_fetch_age_s") ? dec_int(&d, "last_fetch_age_s") : 0;
    i->oldest_dead_letter_age_s = dead_age_s > 0 ? (uint64_t)dead_age_s : 0;
    i->last_fetch_age_s = fetch_age_s > 0 ? (uint64_t)fetch_age_s : 0;
    i->partitions = dec_has(&d, "partitions") /* absent: not partitioned */
                        ? (uint32_t)dec_uint(&d, "partitions", TALLY_CLIENT_SUB_PARTITIONS_MAX)
                        : 1;
    return d.ok && backoff_decode(dec_get(&d, "backoff_ms"), &i->backoff_count, i->backoff_ms) &&
           settings_decode(o, i);
}

/* A list of strings (nil or absent: "") into out, comma-separated. */
static bool join_texts(const msgpack_object *o, char *out, size_t capacity)
{
    out[0] = '\0';
    if (o == NULL || o->type == MSGPACK_OBJECT_NIL)
        return true;
    if (o->type != MSGPACK_OBJECT_ARRAY)
        return false;
    size_t at = 0;
    for (uint32_t k = 0; k < o->via.array.size; k++) {
        tally_str s;
        if (!msgpack_safe_get_str(&o->via.array.ptr[k], &s) || at + s.len + 2 > capacity)
            return false;
        if (k)
            out[at++] = ',';
        memcpy(out + at, s.ptr, s.len);
        at += s.len;
        out[at] = '\0';
    }
    return true;
}

/* A string or nil (or absent, from an older server) into out. */
static bool text_or_nil(const msgpack_object *o, char *out, size_t capacity)
{
    tally_str s = {NULL, 0};
    out[0] = '\0';
    if (o == NULL || o->type == MSGPACK_OBJECT_NIL)
        return true;
    if (!msgpack_safe_get_str(o, &s) || s.len >= capacity)
        return false;
    memcpy(out, s.ptr, s.len);
    out[s.len] = '\0';
    return true;
}

/* The filter, inactivity limit and owner of a metrics map (absent from
 * servers before them). */
static bool settings_decode(const msgpack_object *m, tally_subscriber_info *i)
{
    uint64_t expiry = 0;
    const msgpack_object *e = msgpack_safe_map_get(m, "inactive_expiry_ms");
    if (e != NULL && !msgpack_safe_get_u64(e, &expiry))
        return false;
    i->inactive_expiry_ms = expiry;
    return join_texts(msgpack_safe_map_get(m, "filter_types"), i->filter_types,
                      sizeof(i->filter_types)) &&
           join_texts(msgpack_safe_map_get(m, "filter_kinds"), i->filter_kinds,
                      sizeof(i->filter_kinds)) &&
           text_or_nil(msgpack_safe_map_get(m, "filter_subject"), i->filter_subject,
                       sizeof(i->filter_subject)) &&
           text_or_nil(msgpack_safe_map_get(m, "contact"), i->contact, sizeof(i->contact)) &&
           text_or_nil(msgpack_safe_map_get(m, "alert_route"), i->alert_route,
                       sizeof(i->alert_route));
}

int client_sub_info_exchange(tally_client *c, const fields *fs, tally_subscriber_info *out,
                             bool *created)
{
    reply r;
    int rc = client_read_exchange(c, fs, 0, &r);
    if (rc != TALLY_ok)
        return rc;
    decoder d = decoder_of(r.root);
    if (created != NULL)
        *created = dec_bool(&d, "created");
    bool ok = d.ok && info_decode(msgpack_safe_map_get(r.root, "subscriber"), out);
    client_reply_free(&r);
    return ok ? TALLY_ok : TALLY_internal;
}

int tally_subscriber_get(tally_client *c, const char *name, tally_subscriber_info *out)
{
    if (c == NULL || !client_sub_name_ok(name) || out == NULL)
        return TALLY_invalid_argument;
    fields fs;
    client_sub_fields(&fs, "sub_get", name);
    return client_sub_info_exchange(c, &fs, out, NULL);
}

/* The reply to sub_get of name. */
static int sub_get_reply(tally_client *c, const char *name, reply *r)
{
    fields fs;
    client_sub_fields(&fs, "sub_get", name);
    return client_read_exchange(c, &fs, 0, r);
}

static bool flight_decode(const msgpack_object *o, tally_in_flight_event *f)
{
    uint64_t seq = 0, attempts = 0;
    int64_t after = 0;
    memset(f, 0, sizeof(*f));
    const msgpack_object *replay = msgpack_safe_map_get(o, "replay");
    bool ok = o != NULL && o->type == MSGPACK_OBJECT_MAP &&
              msgpack_safe_get_u64(msgpack_safe_map_get(o, "seq"), &seq) &&
              msgpack_safe_get_u64(msgpack_safe_map_get(o, "attempts"), &attempts) &&
              attempts <= UINT32_MAX &&
              msgpack_safe_get_i64(msgpack_safe_map_get(o, "deliver_after_ms"), &after) &&
              replay != NULL && replay->type == MSGPACK_OBJECT_BOOLEAN &&
              text_or_nil(msgpack_safe_map_get(o, "last_error"), f->last_error,
                          sizeof(f->last_error)) &&
              text_or_nil(msgpack_safe_map_get(o, "holder"), f->holder, sizeof(f->holder));
    f->seq = seq;
    f->attempts = (uint32_t)attempts;
    f->deliver_after_ms = after;
    f->replay = ok && replay->via.boolean;
    return ok;
}

int tally_subscriber_show(tally_client *c, const char *name, tally_subscriber_info *info,
                          tally_in_flight_event *events, size_t capacity, size_t *count)
{
    if (c == NULL || !client_sub_name_ok(name) || info == NULL || (events == NULL && capacity) ||
        count == NULL)
        return TALLY_invalid_argument;
    *count = 0;
    reply r;
    int rc = sub_get_reply(c, name, &r);
    if (rc != TALLY_ok)
        return rc;
    bool ok = info_decode(msgpack_safe_map_get(r.root, "subscriber"), info);
    const msgpack_object *list = msgpack_safe_map_get(r.root, "in_flight_events");
    if (ok && list != NULL && list->type == MSGPACK_OBJECT_ARRAY) /* absent: an older server */
        for (uint32_t k = 0; ok && k < list->via.array.size && *count < capacity; k++)
            ok = flight_decode(&list->via.array.ptr[k], &events[(*count)++]);
    client_reply_free(&r);
    return ok ? TALLY_ok : TALLY_internal;
}

static bool holder_decode(const msgpack_object *o, tally_partition_holder *h)
{
    decoder d = decoder_of(o);
    memset(h, 0, sizeof(*h));
    h->partition = (uint32_t)dec_uint(&d, "partition", TALLY_CLIENT_SUB_PARTITIONS_MAX - 1);
    if (dec_present(&d, "holder"))
        dec_str(&d, "holder", h->holder, sizeof(h->holder));
    h->lease_until_ms = dec_int(&d, "lease_until_ms");
    return d.ok;
}

int tally_subscriber_partitions(tally_client *c, const char *name, tally_partition_holder *out,
                                size_t capacity, size_t *count)
{
    if (c == NULL || !client_sub_name_ok(name) || out == NULL || count == NULL)
        return TALLY_invalid_argument;
    *count = 0;
    reply r;
    int rc = sub_get_reply(c, name, &r);
    if (rc != TALLY_ok)
        return rc;
    const msgpack_object *sub = msgpack_safe_map_get(r.root, "subscriber");
    const msgpack_object *list = sub ? msgpack_safe_map_get(sub, "partition_holders") : NULL;
    bool ok = sub != NULL && sub->type == MSGPACK_OBJECT_MAP;
    if (ok && list != NULL) { /* absent: not partitioned */
        ok = list->type == MSGPACK_OBJECT_ARRAY;
        for (uint32_t i = 0; ok && i < list->via.array.size && *count < capacity; i++)
            ok = holder_decode(&list->via.array.ptr[i], &out[(*count)++]);
    }
    client_reply_free(&r);
    return ok ? TALLY_ok : TALLY_internal;
}

/* The "subscribers" array of the reply to op (sub_list or stats). */
static int subscribers_read(tally_client *c, const char *op, tally_subscriber_info *out,
                            size_t capacity, size_t *count)
{
    if (c == NULL || out == NULL || capacity == 0 || count == NULL)
        return TALLY_invalid_argument;
    fields fs;
    client_fields_begin(&fs, op, NULL, NULL);
    return client_read_array(c, &fs, "subscribers", info_decode, out, sizeof(*out), capacity,
                             count);
}

int tally_subscriber_list(tally_client *c, tally_subscriber_info *out, size_t capacity,
                          size_t *count)
{
    return subscribers_read(c, "sub_list", out, capacity, count);
}

int tally_stats_subscribers(tally_client *c, tally_subscriber_info *out, size_t capacity,
                            size_t *count)
{
    return subscribers_read(c, "stats", out, capacity, count);
}

int tally_subscriber_update(tally_client *c, const char *name,
                            const tally_subscriber_update_args *u, tally_subscriber_info *out)
{
    if (c == NULL || !client_sub_name_ok(name) || u == NULL)
        return TALLY_invalid_argument;
    fields fs;
    client_sub_fields(&fs, "sub_update", name);
    const struct {
        const char *field;
        uint64_t value;
    } numbers[] = {{"max_deliver", u->max_deliver}, {"ack_wait_ms", u->ack_wait_ms},
                   {"max_ack_pending", u->max_ack_pending}};
    for (size_t k = 0; k < sizeof(numbers) / sizeof(numbers[0]); k++)
        if (numbers[k].value)
            put_uint(&fs, numbers[k].field, numbers[k].value);
    if (u->set_inactive_expiry)
        put_uint(&fs, "inactive_expiry_ms", u->inactive_expiry_ms);
    uint64_t backoff[TALLY_CLIENT_SUB_BACKOFF_STEPS_MAX];
    if (u->set_backoff && u->backoff_count > TALLY_CLIENT_SUB_BACKOFF_STEPS_MAX)
        return TALLY_invalid_argument;
    for (uint32_t i = 0; u->set_backoff && i < u->backoff_count; i++)
        backoff[i] = u->backoff_ms[i];
    if (u->set_backoff)
        put_uints(&fs, "backoff_ms", backoff, u->backoff_count);
    const struct {
        const char *field, *text;
    } texts[] = {{"filter_types", u->filter_types}, {"filter_kinds", u->filter_kinds},
                 {"filter_subject", u->filter_subject}, {"contact", u->contact},
                 {"alert_route", u->alert_route}};
    for (size_t k = 0; k < sizeof(texts) / sizeof(texts[0]); k++)
        if (texts[k].text)
            put_str(&fs, texts[k].field, texts[k].text);
    tally_subscriber_info ignored;
    return client_sub_info_exchange(c, &fs, out ? out : &ignored, NULL);
}
