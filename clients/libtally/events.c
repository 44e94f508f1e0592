/*
 * events.c — tally_event from the log's codec, and the chain check of
 * consecutive events (events.h). One decoder for every way an event
 * reaches a client: log_read replies, PUB messages, durable fetches and the
 * subscriber-side inbox.
 */
#include "clients/libtally/events.h"

#include "common/error.h"
#include "common/log_event.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

_Static_assert(TALLY_EVENT_HASH_BYTES == LOG_HASH_BYTES, "hash size as the log's");
_Static_assert((int)TALLY_ENTITY_ACCOUNT == (int)LOG_ENTITY_ACCOUNT &&
                   (int)TALLY_ENTITY_TRANSFER == (int)LOG_ENTITY_TRANSFER &&
                   (int)TALLY_ENTITY_ENTITLEMENT == (int)LOG_ENTITY_ENTITLEMENT &&
                   (int)TALLY_ENTITY_DEAD_LETTER == (int)LOG_ENTITY_DEAD_LETTER &&
                   (int)TALLY_ENTITY_WEBHOOK == (int)LOG_ENTITY_WEBHOOK &&
                   (int)TALLY_ENTITY_SUBSCRIBER == (int)LOG_ENTITY_SUBSCRIBER &&
                   (int)TALLY_ENTITY_ENDPOINT == (int)LOG_ENTITY_ENDPOINT,
               "entity kinds as the log's");
_Static_assert(sizeof(tally_uuid) == sizeof(tally_id128), "a tally_uuid is a tally_id128");
_Static_assert((int)TALLY_PART_ACCOUNT == (int)LOG_PART_ACCOUNT &&
                   (int)TALLY_PART_TRANSFER == (int)LOG_PART_TRANSFER &&
                   (int)TALLY_PART_DEBIT_ACCOUNT == (int)LOG_PART_DEBIT_ACCOUNT &&
                   (int)TALLY_PART_CREDIT_ACCOUNT == (int)LOG_PART_CREDIT_ACCOUNT &&
                   (int)TALLY_PART_ENTITLEMENT == (int)LOG_PART_ENTITLEMENT &&
                   (int)TALLY_PART_DEAD_LETTER == (int)LOG_PART_DEAD_LETTER &&
                   (int)TALLY_PART_WEBHOOK == (int)LOG_PART_WEBHOOK &&
                   (int)TALLY_PART_SUBSCRIBER == (int)LOG_PART_SUBSCRIBER &&
                   (int)TALLY_PART_ENDPOINT == (int)LOG_PART_ENDPOINT,
               "body parts as the log's");

const msgpack_object *tally_event_part(const tally_event *ev, tally_body_part part)
{
    return ev == NULL ? NULL
                      : log_body_part_of(ev->body, (log_entity_kind)ev->kind, (log_body_part)part);
}

/* s into out (capacity bytes with the NUL); false when it does not fit. */
static bool str_copy(tally_str s, char *out, size_t capacity)
{
    if (s.len >= capacity)
        return false;
    if (s.len)
        memcpy(out, s.ptr, s.len);
    out[s.len] = '\0';
    return true;
}

static bool entity_copy(const log_entity *le, tally_event *e)
{
    e->kind = (tally_entity_kind)le->kind;
    snprintf(e->entity_kind, sizeof(e->entity_kind), "%s", log_entity_kind_name(le->kind));
    switch (le->kind) {
    case LOG_ENTITY_ACCOUNT:
        e->account_id = le->account_id;
        return e->account_id != 0;
    case LOG_ENTITY_TRANSFER:
        memcpy(e->transfer_id.bytes, le->transfer_id.bytes, 16);
        return true;
    case LOG_ENTITY_ENTITLEMENT:
        e->subject_len = le->subject.len;
        e->feature_len = le->feature.len;
        return le->subject.len > 0 && le->feature.len > 0 &&
               str_copy(le->subject, e->subject, sizeof(e->subject)) &&
               str_copy(le->feature, e->feature, sizeof(e->feature));
    case LOG_ENTITY_DEAD_LETTER: /* subject: the subscriber, feature: the seq */
        e->feature_len = (size_t)snprintf(e->feature, sizeof(e->feature), "%llu",
                                          (unsigned long long)le->letter_seq);
        e->subject_len = le->subscriber.len;
        return le->subscriber.len > 0 && le->letter_seq > 0 &&
               str_copy(le->subscriber, e->subject, sizeof(e->subject));
    case LOG_ENTITY_WEBHOOK: /* subject: the source, feature: the provider's event id */
        e->subject_len = le->webhook_source.len;
        e->feature_len = le->webhook_event_id.len;
        return le->webhook_source.len > 0 && le->webhook_event_id.len > 0 &&
               str_copy(le->webhook_source, e->subject, sizeof(e->subject)) &&
               str_copy(le->webhook_event_id, e->feature, sizeof(e->feature));
    case LOG_ENTITY_SUBSCRIBER: /* subject: the subscriber's name */
        e->subject_len = le->subscriber.len;
        return le->subscriber.len > 0 && str_copy(le->subscriber, e->subject, sizeof(e->subject));
    case LOG_ENTITY_ENDPOINT: /* subject: the endpoint's name */
        e->subject_len = le->endpoint.len;
        return le->endpoint.len > 0 && str_copy(le->endpoint, e->subject, sizeof(e->subject));
    }
    return false;
}

int client_event_decode(const void *bytes, size_t len, msgpack_unpacked *unpacked,
                        tally_event *e)
{
    memset(e, 0, sizeof(*e));
    log_event le;
    if (bytes == NULL || log_event_decode(bytes, len, unpacked, &le) != TALLY_ok)
        return TALLY_corrupt_record;
    e->seq = le.seq;
    memcpy(e->id.bytes, le.id.bytes, 16);
    e->entity_version = le.entity_version;
    e->time_ms = le.time_ms;
    memcpy(e->prev_hash, le.prev_hash, LOG_HASH_BYTES);
    memcpy(e->hash, le.hash, LOG_HASH_BYTES);
    e->body = le.body;
    e->raw = le.raw;
    e->raw_len = le.raw_len;
    bool ok = str_copy(le.type, e->type, sizeof(e->type)) && entity_copy(&le.entity, e) &&
              le.entity_version > 0 && str_copy(le.consumer, e->consumer, sizeof(e->consumer)) &&
              str_copy(le.key, e->key, sizeof(e->key));
    return ok ? TALLY_ok : TALLY_corrupt_record;
}

bool client_event_from_bytes(const void *bytes, size_t len, tally_event *e)
{
    msgpack_unpacked up;
    msgpack_unpacked_init(&up);
    bool ok = client_event_decode(bytes, len, &up, e) == TALLY_ok;
    msgpack_unpacked_destroy(&up);
    e->body = NULL;
    uint8_t *raw = ok ? malloc(len) : NULL;
    if (raw == NULL) {
        e->raw = NULL;
        e->raw_len = 0;
        return false;
    }
    memcpy(raw, bytes, len);
    e->raw = raw;
    return true;
}

void client_chain_start(client_chain *c)
{
    memset(c, 0, sizeof(*c));
}

bool client_chain_follows(const client_chain *c, const tally_event *e)
{
    return e->seq != c->seq + 1 ||
           memcmp(e->prev_hash, c->hash, TALLY_EVENT_HASH_BYTES) == 0;
}

void client_chain_take(client_chain *c, const tally_event *e)
{
    c->seq = e->seq;
    memcpy(c->hash, e->hash, TALLY_EVENT_HASH_BYTES);
}

bool client_events_chained(const tally_event *events, size_t count)
{
    client_chain c;
    client_chain_start(&c);
    for (size_t i = 0; i < count; i++) {
        if (!client_chain_follows(&c, &events[i]))
            return false;
        client_chain_take(&c, &events[i]);
    }
    return true;
}
