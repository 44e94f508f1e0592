/*
 * tally_stripe_mapper.c — `tally-stripe-mapper`, an example webhook mapper
 * (docs/WEBHOOKS.md): a durable subscriber of tallyd that turns the
 * webhook.received events of one Stripe-style source into entitlement
 * commands on the subscription's customer:
 *
 *   customer.subscription.created|updated (status active, trialing,
 *   past_due) and invoice.paid   extend to the period's end, or grant
 *                                when there is nothing to extend
 *   customer.subscription.deleted, or updated with status canceled,
 *   unpaid, incomplete_expired or paused        revoke
 *
 * Every command carries source_order from the provider's `created` time
 * (2 x created; a revocation 2 x created + 1, so it wins over an update
 * of the same second) and is keyed by the provider's event id (a command
 * that follows from the first outcome: the id with ":grant" or
 * ":revoke"), so a delivery handled twice applies once, and one that
 * arrives after a newer one is answered `stale`: expected, not a failure.
 * A revocation that finds no entitlement leaves a revoked one (a lifetime
 * grant, then the revoke), so an older activation that arrives later is
 * stale too. Other event types and sources are acknowledged and skipped;
 * an event it cannot read is parked (the dead-letter queue).
 *
 * Exit codes: 0 ok, 1 failure (server or a run that ended), 2 usage.
 */
#include "config.h"

#include "clients/inbox/tally_inbox.h"
#include "clients/libtally/tally.h"
#include "common/cli.h"
#include "common/options.h"

#include <jansson.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum exit_code { EXIT_OK = 0, EXIT_FAILED = 1 }; /* 2, a usage error: options_load_command_line */
#define WEBHOOK_ROW_FIELDS 5 /* [source, event_id, event_type, signed_at_s, body] */
#define BODY_FIELD 9         /* the body's place in a format 2 event */

typedef struct mapper {
    tally_client *client;
    const char *source, *feature;
    uint64_t mapped, skipped, stale;
} mapper;

/* What one provider event asks for. */
typedef enum want_kind { WANT_SKIP, WANT_ACTIVE, WANT_REVOKED } want_kind;

typedef struct want {
    want_kind kind;
    char subject[129];
    int64_t until_ms; /* WANT_ACTIVE: the period's end */
    uint64_t order;
} want;

static tally_subscriber *running;

static void stop_on(int sig)
{
    (void)sig;
    if (running)
        tally_subscriber_stop(running);
}

static const char *json_str(const json_t *o, const char *name)
{
    return json_string_value(json_object_get(o, name));
}

static bool status_in(const char *status, const char *const *list)
{
    for (; status && *list; list++)
        if (strcmp(status, *list) == 0)
            return true;
    return false;
}

/* The provider event (a JSON object) as a want; false when it cannot be
 * read (parked). */
static bool decide(const json_t *root, want *w)
{
    static const char *const active[] = {"active", "trialing", "past_due", NULL};
    static const char *const ended[] = {"canceled", "unpaid", "incomplete_expired", "paused", NULL};
    memset(w, 0, sizeof(*w));
    const char *type = json_str(root, "type");
    const json_t *created = json_object_get(root, "created");
    const json_t *object = json_object_get(json_object_get(root, "data"), "object");
    if (type == NULL || !json_is_integer(created) || json_integer_value(created) <= 0 ||
        !json_is_object(object))
        return false;
    bool subscription = strncmp(type, "customer.subscription.", 22) == 0;
    if (!subscription && strcmp(type, "invoice.paid") != 0)
        return true; /* not ours: skipped */
    const char *customer = json_str(object, "customer");
    if (customer == NULL || strlen(customer) == 0 || strlen(customer) >= sizeof(w->subject))
        return false;
    snprintf(w->subject, sizeof(w->subject), "%s", customer);
    w->order = (uint64_t)json_integer_value(created) * 2;
    const char *status = json_str(object, "status");
    const json_t *end = json_object_get(object, "current_period_end");
    if (strcmp(type, "customer.subscription.deleted") == 0 ||
        (subscription && status_in(status, ended))) {
        w->kind = WANT_REVOKED;
        w->order += 1;
        return true;
    }
    if (subscription && strcmp(type, "customer.subscription.created") != 0 &&
        strcmp(type, "customer.subscription.updated") != 0)
        return true;
    if (subscription && !status_in(status, active))
        return true; /* incomplete: nothing to grant yet */
    if (!subscription) /* invoice.paid: the first line's service period */
        end = json_object_get(json_object_get(json_array_get(json_object_get(
                                  json_object_get(object, "lines"), "data"), 0), "period"),
                              "end");
    if (!json_is_integer(end) || json_integer_value(end) <= 0 ||
        json_integer_value(end) > INT64_C(253402300799))
        return false;
    w->kind = WANT_ACTIVE;
    w->until_ms = json_integer_value(end) * 1000;
    return true;
}

/* Outcomes of a provider-ordered command that leave nothing to do. */
static bool settled(int code)
{
    return code == TALLY_ok || code == TALLY_stale || code == TALLY_extension_must_move_forward ||
           code == TALLY_valid_until_must_be_in_future || code == TALLY_entitlement_is_lifetime ||
           code == TALLY_entitlement_already_active || code == TALLY_entitlement_already_revoked;
}

static bool transient(int code)
{
    return code == TALLY_timed_out || code == TALLY_unreachable || code == TALLY_overloaded ||
           code == TALLY_shutting_down || code == TALLY_storage_full;
}

typedef enum step { STEP_EXTEND, STEP_GRANT, STEP_GRANT_LIFETIME, STEP_REVOKE_FIRST, STEP_REVOKE } step;

/* One command of the mapping, keyed by the event id (+ a suffix). */
static int command(mapper *m, step s, const char *event_id, const want *w)
{
    static const char *const suffix[] = {"", ":grant", ":grant", "", ":revoke"};
    char key[TALLY_CLIENT_KEY_BYTES_MAX + 1];
    snprintf(key, sizeof(key), "%s%s", event_id, suffix[s]);
    tally_entitlement_args a = {.subject = w->subject, .feature = m->feature,
                                .has_source_order = true, .source_order = w->order};
    tally_result r;
    switch (s) {
    case STEP_EXTEND: a.valid_until_ms = w->until_ms; return tally_extend(m->client, key, &a, &r);
    case STEP_GRANT: a.valid_until_ms = w->until_ms; return tally_grant(m->client, key, &a, &r);
    case STEP_GRANT_LIFETIME: a.source_order = w->order - 1; return tally_grant(m->client, key, &a, &r);
    case STEP_REVOKE_FIRST:
    case STEP_REVOKE: return tally_revoke(m->client, key, &a, &r);
    }
    return TALLY_invalid_argument;
}

/* The commands of a want; the last code. */
static int apply_want(mapper *m, const char *event_id, const want *w)
{
    int code;
    if (w->kind == WANT_ACTIVE) {
        code = command(m, STEP_EXTEND, event_id, w);
        if (code == TALLY_entitlement_not_found || code == TALLY_entitlement_revoked)
            code = command(m, STEP_GRANT, event_id, w);
        return code;
    }
    code = command(m, STEP_REVOKE_FIRST, event_id, w);
    if (code == TALLY_entitlement_not_found) { /* leave a revoked one: older events are stale */
        code = command(m, STEP_GRANT_LIFETIME, event_id, w);
        if (settled(code))
            code = command(m, STEP_REVOKE, event_id, w);
    }
    return code;
}

/* The delivery's webhook row and its body parsed as JSON (NULL when it is
 * not the mapper's source or cannot be read: *readable says which). */
static json_t *delivery_json(const mapper *m, const tally_event *e, bool *readable)
{
    *readable = true;
    if (e->kind != TALLY_ENTITY_WEBHOOK || strcmp(e->subject, m->source) != 0)
        return NULL;
    *readable = false;
    msgpack_unpacked up;
    msgpack_unpacked_init(&up);
    json_t *root = NULL;
    if (tally_msgpack_unpack(e->raw, e->raw_len, &up) == TALLY_ok &&
        up.data.type == MSGPACK_OBJECT_ARRAY && up.data.via.array.size > BODY_FIELD) {
        tally_event ev = *e;
        ev.body = &up.data.via.array.ptr[BODY_FIELD];
        const msgpack_object *row = tally_event_part(&ev, TALLY_PART_WEBHOOK);
        const msgpack_object *body = row && row->type == MSGPACK_OBJECT_ARRAY &&
                                             row->via.array.size >= WEBHOOK_ROW_FIELDS
                                         ? &row->via.array.ptr[4] : NULL;
        if (body && body->type == MSGPACK_OBJECT_BIN)
            root = json_loadb(body->via.bin.ptr, body->via.bin.size, 0, NULL);
    }
    msgpack_unpacked_destroy(&up);
    if (root && !json_is_object(root)) {
        json_decref(root);
        root = NULL;
    }
    *readable = root != NULL;
    return root;
}

static tally_verdict on_event(const tally_delivery *d, tally_answer *answer, void *arg)
{
    mapper *m = arg;
    bool readable;
    json_t *root = delivery_json(m, &d->event, &readable);
    want w;
    if (root == NULL || !decide(root, &w)) {
        json_decref(root);
        if (readable) {
            m->skipped++;
            return TALLY_DONE;
        }
        snprintf(answer->error, sizeof(answer->error), "not a Stripe-style event this mapper reads");
        return TALLY_PARK;
    }
    json_decref(root);
    if (w.kind == WANT_SKIP) {
        m->skipped++;
        return TALLY_DONE;
    }
    int code = apply_want(m, d->event.feature, &w); /* feature: the provider's event id */
    if (settled(code)) {
        m->mapped++;
        m->stale += code == TALLY_stale;
        return TALLY_DONE;
    }
    snprintf(answer->error, sizeof(answer->error), "%s for %s", tally_strerror(code), w.subject);
    return transient(code) ? TALLY_RETRY : TALLY_PARK;
}

typedef struct mapper_options {
    const char *url, *source, *feature, *subscriber, *consumer;
    bool until_idle;
} mapper_options;

/* The options (common/options.h); --help is made from them. */
static const options_row rows[] = {
    {"url", "URL", NULL, "tallyd's request socket (default $TALLY_URL or tcp://127.0.0.1:7450)",
     OPTIONS_TEXT(mapper_options, url)},
    {"source", "NAME", "stripe", "the webhook source to map", OPTIONS_TEXT(mapper_options, source)},
    {"feature", "NAME", "pro", "the entitlement granted", OPTIONS_TEXT(mapper_options, feature)},
    {"subscriber", "NAME", "stripe-mapper", "the durable subscriber's name",
     OPTIONS_TEXT(mapper_options, subscriber)},
    {"consumer", "NAME", "stripe-mapper", "the key namespace of its commands",
     OPTIONS_TEXT(mapper_options, consumer)},
    {"until-idle", NULL, NULL, "stop once everything there is has been mapped",
     OPTIONS_FLAG(mapper_options, until_idle)},
    OPTIONS_ROW_HELP,
};

static void usage(const options_set *set, FILE *f)
{
    fprintf(f,
            "usage: tally-stripe-mapper [--url URL] [--source NAME] [--feature NAME]\n"
            "                           [--subscriber NAME] [--consumer NAME] [--until-idle]\n"
            "\n"
            "Turn the webhook.received events of a Stripe-style webhook source (tallyd\n"
            "--webhooks) into grant, extend and revoke of FEATURE for the customer, as a\n"
            "durable subscriber of tallyd (docs/WEBHOOKS.md).\n"
            "\n");
    options_print_help(set, f);
}

int main(int argc, char **argv)
{
    mapper_options o = {0};
    options_set set = {0};
    int code = options_load_command_line(&set, "tally-stripe-mapper", rows,
                                         sizeof(rows) / sizeof(rows[0]), argc, argv, &o, usage);
    options_free(&set);
    if (code >= 0)
        return code;
    const char *url = o.url, *name = o.subscriber, *consumer = o.consumer;
    mapper m = {.source = o.source, .feature = o.feature};
    tally_run_options run = {.wait_ms = 1000, .until_idle = o.until_idle};
    tally_client_options co = {.url = url, .consumer = consumer, .timeout_ms = 10000};
    tally_subscriber *sub = NULL;
    int rc = tally_client_open(&co, &m.client);
    if (rc == TALLY_ok)
        rc = tally_subscriber_open(m.client, name, NULL, &sub);
    if (rc == TALLY_ok) {
        running = sub;
        cli_catch_stop_signals(stop_on, false, true);
        rc = tally_subscriber_run(sub, &run, on_event, &m);
        running = NULL;
    }
    fprintf(rc == TALLY_ok ? stdout : stderr,
            "tally-stripe-mapper: %s: %llu events mapped (%llu stale), %llu skipped\n",
            tally_strerror(rc), (unsigned long long)m.mapped, (unsigned long long)m.stale,
            (unsigned long long)m.skipped);
    tally_subscriber_close(sub);
    tally_client_close(m.client);
    return rc == TALLY_ok ? EXIT_OK : EXIT_FAILED;
}
