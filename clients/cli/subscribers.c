/*
 * subscribers.c — `tally subscribers`, `subscriber update`, `subscriber
 * delete` and the dead letters of a subscriber (`dlq list` with their
 * owner, `dlq replay`, `dlq discard`). `subscribers show`: subscriber_show.c.
 */
#include "config.h"

#include "clients/cli/tally_cli.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

json_t *subscriber_json(const tally_subscriber_info *i)
{
    json_t *backoff = json_array();
    for (uint32_t k = 0; backoff && k < i->backoff_count; k++)
        if (json_array_append_new(backoff, json_integer(i->backoff_ms[k])) != 0)
            cli_out_of_memory();
    return json_pack("{s:s, s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:I, s:I, s:o, s:I, s:o?, "
                     "s:o?, s:o, s:o}",
                     "name", i->name, "ack_floor", json_u64(i->ack_floor), "delivered_seq",
                     json_u64(i->delivered_seq), "pending", json_u64(i->pending), "in_flight",
                     json_u64(i->in_flight), "oldest_unacked_age_s",
                     json_u64(i->oldest_unacked_age_s), "redelivered", json_u64(i->redelivered),
                     "dead_letters", json_u64(i->dead_letters), "replaying",
                     json_u64(i->replaying), "max_deliver", (json_int_t)i->max_deliver,
                     "ack_wait_ms", (json_int_t)i->ack_wait_ms, "backoff_ms", backoff,
                     "max_ack_pending", (json_int_t)i->max_ack_pending, "created",
                     i->created_ms ? json_time(i->created_ms) : NULL, "updated",
                     i->updated_ms ? json_time(i->updated_ms) : NULL,
                     "oldest_dead_letter_age_s", json_u64(i->oldest_dead_letter_age_s),
                     "last_fetch_age_s", json_u64(i->last_fetch_age_s));
}

json_t *subscriber_settings_json(const tally_subscriber_info *i)
{
    return json_pack("{s:s?, s:s?, s:s?, s:o, s:s?, s:s?, s:I}", "filter_types",
                     i->filter_types[0] ? i->filter_types : NULL, "filter_kinds",
                     i->filter_kinds[0] ? i->filter_kinds : NULL, "filter_subject",
                     i->filter_subject[0] ? i->filter_subject : NULL, "inactive_expiry_ms",
                     json_u64(i->inactive_expiry_ms), "contact", i->contact[0] ? i->contact : NULL,
                     "alert_route", i->alert_route[0] ? i->alert_route : NULL, "partitions",
                     (json_int_t)i->partitions);
}

int run_subscribers(cli *c)
{
    static const char *const titles[] = {"NAME",        "ACK_FLOOR",   "PENDING",
                                         "IN_FLIGHT",   "OLDEST_UNACKED_AGE_S",
                                         "REDELIVERED", "DEAD_LETTERS",
                                         "OLDEST_DEAD_LETTER_AGE_S", "LAST_FETCH_AGE_S"};
    static tally_subscriber_info list[TALLY_SUBSCRIBERS_MAX];
    size_t n = 0;
    int rc = tally_subscriber_list(c->client, list, TALLY_SUBSCRIBERS_MAX, &n);
    if (rc != TALLY_ok)
        return read_failure(c, "subscribers", rc);
    cli_table t;
    table_init(&t, titles, 9);
    for (size_t k = 0; k < n; k++) {
        const tally_subscriber_info *i = &list[k];
        if (c->json)
            json_emit(subscriber_json(i));
        else
            table_add(&t,
                      "%s" SEP "%" PRIu64 SEP "%" PRIu64 SEP "%" PRIu64 SEP "%" PRIu64 SEP
                      "%" PRIu64 SEP "%" PRIu64 SEP "%" PRIu64 SEP "%" PRIu64,
                      i->name, i->ack_floor, i->pending, i->in_flight, i->oldest_unacked_age_s,
                      i->redelivered, i->dead_letters, i->oldest_dead_letter_age_s,
                      i->last_fetch_age_s);
    }
    if (!c->json)
        table_print_free(&t);
    return CLI_EXIT_OK;
}

/* What a subscriber op acts on, for messages: "dlq of NAME". */
static const char *about(const cli *c, const char *what, char *out, size_t size)
{
    snprintf(out, size, "%s %s", what, c->v[SLOT_NAME].text);
    return out;
}

static const char *text_or_null(const cli *c, int slot)
{
    return c->v[slot].set ? c->v[slot].text : NULL;
}

int run_subscriber_update(cli *c)
{
    tally_subscriber_update_args u = {
        .max_deliver = (uint32_t)value_or(c, SLOT_MAX_DELIVER, 0),
        .ack_wait_ms = (uint32_t)value_or(c, SLOT_ACK_WAIT_MS, 0),
        .max_ack_pending = (uint32_t)value_or(c, SLOT_MAX_ACK_PENDING, 0),
        .set_inactive_expiry = c->v[SLOT_INACTIVE_EXPIRY_MS].set,
        .inactive_expiry_ms = value_or(c, SLOT_INACTIVE_EXPIRY_MS, 0),
        .filter_types = text_or_null(c, SLOT_FILTER_TYPES),
        .filter_kinds = text_or_null(c, SLOT_FILTER_KINDS),
        .filter_subject = text_or_null(c, SLOT_FILTER_SUBJECT),
        .contact = text_or_null(c, SLOT_CONTACT),
        .alert_route = text_or_null(c, SLOT_ALERT_ROUTE)};
    tally_subscriber_info info;
    char what[96];
    int rc = tally_subscriber_update(c->client, c->v[SLOT_NAME].text, &u, &info);
    if (rc != TALLY_ok)
        return read_failure(c, about(c, "update subscriber", what, sizeof(what)), rc);
    if (c->json) {
        json_t *o = subscriber_json(&info), *settings = subscriber_settings_json(&info);
        if (!o || !settings || json_object_update(o, settings) != 0)
            cli_out_of_memory();
        json_decref(settings);
        json_emit(o);
    } else {
        printf("updated subscriber %s: ack floor %" PRIu64 " kept\n", info.name, info.ack_floor);
    }
    return CLI_EXIT_OK;
}

int run_subscriber_delete(cli *c)
{
    char what[96];
    int rc = tally_subscriber_delete(c->client, c->v[SLOT_NAME].text);
    if (rc != TALLY_ok)
        return read_failure(c, about(c, "delete subscriber", what, sizeof(what)), rc);
    if (c->json)
        json_emit(json_pack("{s:s, s:b, s:s}", "code", "ok", "deleted", 1, "name",
                            c->v[SLOT_NAME].text));
    else
        printf("deleted subscriber %s\n", c->v[SLOT_NAME].text);
    return CLI_EXIT_OK;
}

/* The owner of the dead letters being listed (a listing's context). */
static tally_subscriber_info dlq_owner;

static json_t *dead_letter_json(const tally_dead_letter *l)
{
    char id[37];
    tally_uuid_format(&l->event_id, id);
    const tally_subscriber_info *o = &dlq_owner;
    return json_pack("{s:o, s:I, s:o, s:o, s:I, s:b, s:s?, s:s?, s:s?, s:s?}", "seq",
                     json_u64(l->seq), "attempts", (json_int_t)l->attempts, "error",
                     json_text(l->error), "parked", json_time(l->parked_ms), "parked_ms",
                     (json_int_t)l->parked_ms, "replaying", (int)l->replaying, "event_id",
                     l->type[0] ? id : NULL, "type", l->type[0] ? l->type : NULL, "contact",
                     o->contact[0] ? o->contact : NULL, "alert_route",
                     o->alert_route[0] ? o->alert_route : NULL);
}

static void dead_letters_output(const cli *c, cli_table *t, const void *page, size_t count)
{
    const tally_dead_letter *list = page;
    for (size_t k = 0; k < count; k++) {
        const tally_dead_letter *l = &list[k];
        char parked[40];
        if (c->json) {
            json_emit(dead_letter_json(l));
            continue;
        }
        time_text(l->parked_ms, parked);
        table_add(t, "%" PRIu64 SEP "%u" SEP "%s" SEP "%s" SEP "%s" SEP "%s", l->seq, l->attempts,
                  l->type[0] ? l->type : "-", parked, l->replaying ? "yes" : "no", l->error);
    }
}

static const char *const dlq_titles[] = {"SEQ", "ATTEMPTS", "TYPE", "PARKED", "REPLAYING",
                                         "ERROR"};
static const cli_listing_kind dlq_listing = {dlq_titles, 6, TALLY_DLQ_LIST_ENTRIES_MAX,
                                             sizeof(tally_dead_letter)};

static int dead_letters_read(cli *c, uint64_t after, uint32_t limit, void *page, size_t *count,
                             uint64_t *next)
{
    return tally_dlq_list(c->client, c->v[SLOT_NAME].text, after, limit, page, limit, count,
                          next);
}

int run_dlq_list(cli *c)
{
    char what[96];
    int rc = tally_subscriber_get(c->client, c->v[SLOT_NAME].text, &dlq_owner);
    if (rc != TALLY_ok)
        return read_failure(c, about(c, "dead letters of", what, sizeof(what)), rc);
    if (!c->json && (dlq_owner.contact[0] || dlq_owner.alert_route[0]))
        printf("owner: contact %s, alert route %s\n", dlq_owner.contact[0] ? dlq_owner.contact : "-",
               dlq_owner.alert_route[0] ? dlq_owner.alert_route : "-");
    cli_listing l;
    listing_begin(c, &l, &dlq_listing);
    uint64_t next = listing_by_cursor(c, &l, value_or(c, SLOT_AFTER, 0), dead_letters_read,
                                      dead_letters_output);
    if (l.rc != TALLY_ok)
        return read_failure(c, about(c, "dead letters of", what, sizeof(what)), l.rc);
    if (!c->json && l.remaining == 0 && next != 0)
        fprintf(stderr, "tally: more: tally dlq list %s --after %" PRIu64 "\n",
                c->v[SLOT_NAME].text, next);
    return CLI_EXIT_OK;
}

int run_dlq_replay(cli *c)
{
    uint64_t replaying = 0;
    char what[96];
    int rc = tally_dlq_replay(c->client, c->v[SLOT_NAME].text, value_or(c, SLOT_SEQ, 0),
                              &replaying);
    if (rc != TALLY_ok)
        return read_failure(c, about(c, "replay dead letters of", what, sizeof(what)), rc);
    if (c->json)
        json_emit(json_pack("{s:s, s:o}", "code", "ok", "replaying", json_u64(replaying)));
    else
        printf("replaying %" PRIu64 " dead letter%s of %s: delivered again on the next fetch\n",
               replaying, replaying == 1 ? "" : "s", c->v[SLOT_NAME].text);
    return CLI_EXIT_OK;
}

int run_dlq_discard(cli *c)
{
    char what[96];
    int rc = tally_dlq_discard(c->client, c->v[SLOT_NAME].text, c->v[SLOT_SEQ].u);
    if (rc != TALLY_ok)
        return read_failure(c, about(c, "discard a dead letter of", what, sizeof(what)), rc);
    if (c->json)
        json_emit(json_pack("{s:s, s:b, s:o}", "code", "ok", "discarded", 1, "seq",
                            json_u64(c->v[SLOT_SEQ].u)));
    else
        printf("discarded dead letter %" PRIu64 " of %s\n", c->v[SLOT_SEQ].u,
               c->v[SLOT_NAME].text);
    return CLI_EXIT_OK;
}
