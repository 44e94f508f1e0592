/*
 * tail.c — `tally tail`: the live event stream, or a durable subscriber
 * that acknowledges what it printed; SIGINT and SIGTERM end it cleanly.
 */
#include "config.h"

#include "clients/cli/tally_cli.h"
#include "common/cli.h"

#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>

/* Set by SIGINT/SIGTERM; a subscriber's run is also told to stop. */
static volatile sig_atomic_t tail_interrupted;
static tally_subscriber *tail_subscriber;

static void tail_on_signal(int sig)
{
    (void)sig;
    tail_interrupted = 1;
    tally_subscriber_stop(tail_subscriber); /* an atomic store: async-signal-safe */
}

/* "account 7", "transfer <32 hex>", "entitlement alice/pro". */
static void entity_text(const tally_event *e, char *out, size_t size)
{
    char hex[33];
    if (strcmp(e->entity_kind, "account") == 0) {
        snprintf(out, size, "account %" PRIu64, e->account_id);
    } else if (strcmp(e->entity_kind, "transfer") == 0) {
        tid_format(&e->transfer_id, hex);
        snprintf(out, size, "transfer %s", hex);
    } else {
        snprintf(out, size, "%s %s/%s", e->entity_kind, e->subject, e->feature);
    }
}

/* One line per event: aligned columns (control characters as '?'), or one
 * JSON object. d: the delivery to a subscriber, NULL for the live stream.
 * false when stdout cannot be written. */
static bool tail_print(const cli *c, const tally_event *e, const tally_delivery *d)
{
    if (c->json) {
        json_t *o = event_json(e);
        if (o && d)
            json_object_update_new(o, json_pack("{s:I, s:b}", "attempt", (json_int_t)d->attempt,
                                                "replay", (int)d->replay));
        json_emit(o);
    } else {
        char when[40], entity[240], line[CLI_TAIL_LINE_BYTES_MAX];
        time_text(e->time_ms, when);
        entity_text(e, entity, sizeof(entity));
        int n = snprintf(line, sizeof(line), "%-8" PRIu64 " %-24s %-22s %-42s %-7" PRIu64,
                         e->seq, when, e->type, entity, e->entity_version);
        if (d && n > 0 && (size_t)n < sizeof(line))
            snprintf(line + n, sizeof(line) - (size_t)n, "  %u%s", d->attempt,
                     d->replay ? " (replay)" : "");
        for (char *p = line; *p; p++)
            if ((unsigned char)*p < 0x20 || *p == 0x7f)
                *p = '?';
        puts(line);
    }
    return fflush(stdout) == 0 && !ferror(stdout);
}

static void tail_header(const cli *c, bool subscriber)
{
    if (!c->json)
        printf("%-8s %-24s %-22s %-42s %-7s%s\n", "SEQ", "TIME", "TYPE", "ENTITY", "VERSION",
               subscriber ? "  ATTEMPT" : "");
}

/* The live stream: no cursor kept anywhere. */
static int tail_stream(cli *c, uint64_t from, uint64_t count)
{
    tally_stream *s = NULL;
    int rc = tally_stream_open(c->client, c->publish, from, NULL, &s);
    if (rc == TALLY_invalid_argument)
        return usage_error(c, "bad --publish URL '%s'", c->publish);
    if (rc != TALLY_ok)
        return read_failure(c, "tail", rc);
    tail_header(c, false);
    unsigned failures = 0;
    for (uint64_t n = 0; !tail_interrupted && (count == 0 || n < count);) {
        tally_event e;
        rc = tally_stream_next(s, &e, CLI_TAIL_WAIT_MS);
        bool away = is_transport_fault(rc) && ++failures <= CLI_TAIL_FAILURES_MAX;
        if (rc == TALLY_timed_out || away) {
            rc = TALLY_ok; /* nothing yet, or the server is away for now: go on */
            continue;
        }
        if (rc != TALLY_ok)
            break;
        failures = 0;
        bool written = tail_print(c, &e, NULL);
        tally_events_release(&e, 1);
        if (!written)
            break; /* main reports the output error */
        n++;
    }
    tally_stream_close(s);
    return rc == TALLY_ok ? CLI_EXIT_OK : read_failure(c, "tail", rc);
}

static tally_verdict tail_handle(const tally_delivery *d, tally_answer *answer, void *arg)
{
    if (tail_print(arg, &d->event, d))
        return TALLY_DONE;
    snprintf(answer->error, sizeof(answer->error), "tally tail could not write its output");
    tally_subscriber_stop(tail_subscriber);
    return TALLY_RETRY; /* not shown: not acknowledged */
}

/* The options to open the subscriber with: NULL to use an existing one as
 * it is (the start options only matter to a new one), else o. */
static const tally_subscriber_options *tail_subscriber_options(const cli *c,
                                                               tally_subscriber_options *o)
{
    memset(o, 0, sizeof(*o));
    if (c->v[SLOT_FROM].set) {
        o->start = TALLY_START_SEQ;
        o->from_seq = c->v[SLOT_FROM].u;
    } else if (c->v[SLOT_FROM_NOW].set) {
        o->start = TALLY_START_NOW;
    } else if (c->v[SLOT_FROM_TIME].set) {
        o->start = TALLY_START_TIME;
        o->from_time_ms = c->v[SLOT_FROM_TIME].i;
    }
    o->max_deliver = (uint32_t)value_or(c, SLOT_MAX_DELIVER, 0);
    o->ack_wait_ms = (uint32_t)value_or(c, SLOT_ACK_WAIT_MS, 0);
    bool settings = c->v[SLOT_MAX_DELIVER].set || c->v[SLOT_ACK_WAIT_MS].set;
    tally_subscriber_info existing;
    if (!settings && tally_subscriber_get(c->client, c->v[SLOT_SUBSCRIBER].text, &existing) ==
                         TALLY_ok)
        return NULL;
    return o; /* new (or settings to check): created with them, identical is fine */
}

/* A consumer instance id as libtally and tallyd take it. */
static bool instance_valid(const char *id)
{
    size_t n = strlen(id);
    if (n == 0 || n > TALLY_CLIENT_SUB_INSTANCE_BYTES_MAX)
        return false;
    return strspn(id, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._-") == n;
}

/* A durable subscriber: events are acknowledged once printed. */
static int tail_durable(cli *c, uint64_t count)
{
    const char *name = c->v[SLOT_SUBSCRIBER].text;
    tally_subscriber_options o;
    char what[96];
    snprintf(what, sizeof(what), "subscriber %s", name);
    int rc = tally_subscriber_open(c->client, name, tail_subscriber_options(c, &o),
                                   &tail_subscriber);
    if (rc == TALLY_subscriber_exists_with_different_config)
        fprintf(stderr, "tally: subscriber %s exists with other settings (see `tally "
                        "subscribers`); leave out --max-deliver and --ack-wait-ms, or delete it\n",
                name);
    if (rc != TALLY_ok)
        return read_failure(c, what, rc);
    if (tail_interrupted)
        tally_subscriber_stop(tail_subscriber);
    /* fewer events than --count waiting: say so rather than wait silently */
    tally_subscriber_info info;
    if (count > 0 && tally_subscriber_get(c->client, name, &info) == TALLY_ok &&
        info.pending < count)
        fprintf(stderr,
                "tally: subscriber %s has %" PRIu64 " event(s) to deliver; waiting for %" PRIu64
                " more to reach --count %" PRIu64 " (Ctrl-C to stop)\n",
                name, info.pending, count - info.pending, count);
    tail_header(c, true);
    /* One stable instance (tally-cli, or --instance): a tail started again
     * gets the unacked window of the one before it at once
     * (docs/SUBSCRIBERS.md, "CLI"). */
    tally_run_options ro = {.max_events = count, .wait_ms = CLI_TAIL_WAIT_MS,
                            .failures_max = CLI_TAIL_FAILURES_MAX,
                            .instance = c->v[SLOT_INSTANCE].set ? c->v[SLOT_INSTANCE].text
                                                                : CLI_TAIL_INSTANCE};
    rc = tally_subscriber_run(tail_subscriber, &ro, tail_handle, c);
    tally_subscriber *s = tail_subscriber;
    tail_subscriber = NULL;
    tally_subscriber_close(s);
    return rc == TALLY_ok ? CLI_EXIT_OK : read_failure(c, what, rc);
}

int run_tail(cli *c)
{
    int starts = c->v[SLOT_FROM].set + c->v[SLOT_FROM_START].set + c->v[SLOT_FROM_NOW].set +
                 c->v[SLOT_FROM_TIME].set;
    if (starts > 1)
        return usage_error(c, "--from, --from-start, --from-now and --from-time are mutually "
                              "exclusive");
    bool durable = c->v[SLOT_SUBSCRIBER].set;
    if (!durable && (c->v[SLOT_FROM_TIME].set || c->v[SLOT_MAX_DELIVER].set ||
                     c->v[SLOT_ACK_WAIT_MS].set || c->v[SLOT_INSTANCE].set))
        return usage_error(c, "--from-time, --max-deliver, --ack-wait-ms and --instance need "
                              "--subscriber");
    if (c->v[SLOT_INSTANCE].set && !instance_valid(c->v[SLOT_INSTANCE].text))
        return usage_error(c, "--instance: 1-64 bytes of A-Z a-z 0-9 . _ -");
    cli_catch_stop_signals(tail_on_signal, false, false);
    uint64_t count = value_or(c, SLOT_EVENTS, 0);
    if (durable)
        return tail_durable(c, count);
    uint64_t from = c->v[SLOT_FROM].set         ? c->v[SLOT_FROM].u
                    : c->v[SLOT_FROM_START].set ? 1
                                                : TALLY_STREAM_FROM_NOW;
    return tail_stream(c, from, count);
}
