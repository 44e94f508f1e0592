/*
 * subscription.c — a sink's durable subscriber in tallyd, opened with the
 * settings the relay's configuration gives it (docs/RELAY.md, "The
 * subscriber's settings"). The relay owns max_deliver, ack_wait_ms,
 * backoff_ms, max_ack_pending and the type filter: when the subscriber
 * exists with other values of these (an older relay's defaults, a changed
 * file), the relay changes them with sub_update, which keeps the cursor,
 * the events in flight and the dead letters, says what it changed, and
 * goes on. What sub_update cannot change (partitions) stops the sink with
 * a line saying what to do. The settings the relay does not own (the
 * owner, the inactivity limit, the kind and subject filters, set with
 * `tally subscriber update`) are left as they are.
 */
#include "config.h"

#include "relay/relay.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

/* The settings the relay wants, with tallyd's defaults for those it
 * leaves 0, as sub_get shows them. */
typedef struct wanted {
    uint32_t max_deliver, ack_wait_ms, max_ack_pending, backoff_count;
    uint32_t backoff_ms[TALLY_CLIENT_SUB_BACKOFF_STEPS_MAX];
    const char *filter_types;
} wanted;

static wanted wanted_of(const relay_subscription *sub)
{
    const tally_subscriber_options *o = &sub->options;
    wanted w = {
        .max_deliver = o->max_deliver ? o->max_deliver : TALLY_CLIENT_SUB_MAX_DELIVER_DEFAULT,
        .ack_wait_ms = o->ack_wait_ms ? o->ack_wait_ms : TALLY_CLIENT_SUB_ACK_WAIT_MS_DEFAULT,
        .max_ack_pending =
            o->max_ack_pending ? o->max_ack_pending : TALLY_CLIENT_SUB_MAX_ACK_PENDING_DEFAULT,
        .backoff_count = o->backoff_count,
        .filter_types = sub->filter_types,
    };
    memcpy(w.backoff_ms, o->backoff_ms, sizeof(w.backoff_ms));
    return w;
}

/* "1000 2000 4000" or "none". */
static void backoff_text(const uint32_t *ms, uint32_t count, char *out, size_t size)
{
    size_t at = 0;
    out[0] = '\0';
    for (uint32_t i = 0; i < count && at < size; i++)
        at += (size_t)snprintf(out + at, size - at, "%s%" PRIu32, i ? " " : "", ms[i]);
    if (count == 0)
        snprintf(out, size, "none");
}

/* Append "name a -> b, " to what (of size). */
static void said(char *what, size_t size, const char *name, const char *from, const char *to)
{
    size_t at = strlen(what);
    int n = snprintf(what + at, size - at, "%s%s %s -> %s", at ? ", " : "", name, from, to);
    if (n < 0 || (size_t)n >= size - at)
        snprintf(what + size - 4, 4, "..."); /* cut: the line says the rest less */
}

static void said_number(char *what, size_t size, const char *name, uint32_t from, uint32_t to)
{
    char a[16], b[16];
    snprintf(a, sizeof(a), "%" PRIu32, from);
    snprintf(b, sizeof(b), "%" PRIu32, to);
    said(what, size, name, a, b);
}

/* The sub_update that takes info to w, and what it changes in what
 * (empty when nothing the relay owns differs). */
static void change_of(const tally_subscriber_info *info, const wanted *w,
                      tally_subscriber_update_args *u, char *what, size_t size)
{
    memset(u, 0, sizeof(*u));
    what[0] = '\0';
    if (info->max_deliver != w->max_deliver) {
        u->max_deliver = w->max_deliver;
        said_number(what, size, "max_deliver", info->max_deliver, w->max_deliver);
    }
    if (info->ack_wait_ms != w->ack_wait_ms) {
        u->ack_wait_ms = w->ack_wait_ms;
        said_number(what, size, "ack_wait_ms", info->ack_wait_ms, w->ack_wait_ms);
    }
    if (info->max_ack_pending != w->max_ack_pending) {
        u->max_ack_pending = w->max_ack_pending;
        said_number(what, size, "max_ack_pending", info->max_ack_pending, w->max_ack_pending);
    }
    if (info->backoff_count != w->backoff_count ||
        memcmp(info->backoff_ms, w->backoff_ms, w->backoff_count * sizeof(uint32_t)) != 0) {
        char a[128], b[128];
        backoff_text(info->backoff_ms, info->backoff_count, a, sizeof(a));
        backoff_text(w->backoff_ms, w->backoff_count, b, sizeof(b));
        u->set_backoff = true;
        u->backoff_count = w->backoff_count;
        memcpy(u->backoff_ms, w->backoff_ms, sizeof(u->backoff_ms));
        said(what, size, "backoff_ms", a, b);
    }
    if (strcmp(info->filter_types, w->filter_types) != 0) {
        u->filter_types = w->filter_types;
        said(what, size, "filter_types", info->filter_types[0] ? info->filter_types : "(any)",
             w->filter_types[0] ? w->filter_types : "(any)");
    }
}

/* The subscriber exists with other settings than sub asks: change those
 * the relay owns with sub_update. TALLY_ok (open it as it is now), or the
 * code that stops the sink (said on stderr). */
static int converge(relay_sink_context *ctx, const relay_subscription *sub)
{
    tally_subscriber_info info;
    int rc = tally_subscriber_get(ctx->client, sub->name, &info);
    if (rc != TALLY_ok)
        return rc;
    uint32_t partitions = sub->options.partitions > 1 ? sub->options.partitions : 1;
    if (info.partitions != partitions) {
        fprintf(stderr,
                "tally-relay: subscriber %s has %" PRIu32 " partitions in tallyd, the relay's "
                "%" PRIu32 "; sub_update cannot change partitions: delete it (tally subscriber "
                "delete %s; it starts again where the config says, its dead letters gone) or "
                "give the relay another subscriber name\n",
                sub->name, info.partitions, partitions, sub->name);
        return TALLY_subscriber_exists_with_different_config;
    }
    wanted w = wanted_of(sub);
    tally_subscriber_update_args u;
    char what[1024];
    change_of(&info, &w, &u, what, sizeof(what));
    if (what[0] == '\0')
        return TALLY_ok; /* only what the relay leaves alone differs: kept */
    rc = tally_subscriber_update(ctx->client, sub->name, &u, NULL);
    if (rc == TALLY_ok)
        fprintf(stderr, "tally-relay: subscriber %s: %s (sub_update: its cursor, in-flight "
                        "events and dead letters kept)\n",
                sub->name, what);
    return rc;
}

static bool transport_fault(int rc)
{
    return rc == TALLY_timed_out || rc == TALLY_unreachable || rc == TALLY_overloaded ||
           rc == TALLY_shutting_down;
}

/* One try: create it (identical: found), else converge and take it as it
 * is now. */
static int open_once(relay_sink_context *ctx, const relay_subscription *sub,
                     tally_subscriber **out)
{
    tally_subscriber_options o = sub->options;
    o.filter_types = sub->filter_types;
    int rc = tally_subscriber_open(ctx->client, sub->name, &o, out);
    if (rc != TALLY_subscriber_exists_with_different_config)
        return rc;
    rc = converge(ctx, sub);
    return rc == TALLY_ok ? tally_subscriber_open(ctx->client, sub->name, NULL, out) : rc;
}

tally_subscriber *relay_subscriber_open(relay_sink_context *ctx, const relay_subscription *sub)
{
    uint32_t pause_ms = RELAY_RETRY_MS_MIN;
    while (!atomic_load(ctx->stop)) {
        tally_subscriber *s = NULL;
        int rc = open_once(ctx, sub, &s);
        tally_subscriber_info info;
        if (rc == TALLY_ok && tally_subscriber_get(ctx->client, sub->name, &info) == TALLY_ok)
            ctx->max_deliver = info.max_deliver; /* else the last one read, or 0: unknown */
        if (rc == TALLY_ok)
            return s;
        fprintf(stderr, "tally-relay: subscriber %s: %s\n", sub->name, tally_strerror(rc));
        if (!transport_fault(rc))
            return NULL;
        relay_pause(ctx->stop, pause_ms);
        pause_ms = pause_ms * 2 < RELAY_RETRY_MS_MAX ? pause_ms * 2 : RELAY_RETRY_MS_MAX;
    }
    return NULL;
}
