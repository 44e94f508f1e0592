/*
 * watch.c — the relay's view of tallyd (docs/RELAY.md, "Operations"): a
 * thread that every RELAY_FIGURES_MS reads each sink's subscriber with
 * sub_get, keeps what only tallyd knows (its pending events and dead
 * letters) in the sink's metrics for /metrics, and tells from the same
 * calls whether tallyd answers. It says on stderr when tallyd stops
 * answering and when it answers again, and /healthz fails meanwhile
 * (metrics.c). It runs with or without --http.
 */
#include "config.h"

#include "relay/relay.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define RELAXED memory_order_relaxed

struct relay_watch {
    tally_client *client;
    const char *url;
    relay_sink_context *const *sinks;
    size_t count;
    pthread_t thread;
    bool started;
    atomic_bool stop;
    atomic_bool tallyd_up;
    atomic_int_fast64_t since_s; /* when tallyd_up last changed */
    atomic_int why;              /* the error of the call that got no answer */
};

static bool transport_fault(int rc)
{
    return rc == TALLY_timed_out || rc == TALLY_unreachable || rc == TALLY_shutting_down;
}

/* One round: every sink's figures; false (and *why) when tallyd did not
 * answer (the round stops at the first call that got no answer). */
static bool watch_round(relay_watch *w, int *why)
{
    for (size_t i = 0; i < w->count && !atomic_load(&w->stop); i++) {
        relay_sink_context *s = w->sinks[i];
        tally_subscriber_info info;
        int rc = tally_subscriber_get(w->client, s->subscriber, &info);
        if (transport_fault(rc)) {
            *why = rc;
            return false;
        }
        if (rc != TALLY_ok)
            continue; /* not created yet, ...: tallyd answered; the last figures stay */
        atomic_store_explicit(&s->metrics.lag, info.pending, RELAXED);
        atomic_store_explicit(&s->metrics.dead_letters, info.dead_letters, RELAXED);
        atomic_store(&s->metrics.figures_known, true);
    }
    return true;
}

/* A round's answer: said on stderr when it changes. */
static void watch_note(relay_watch *w, bool up, int why)
{
    int64_t now_s = (int64_t)time(NULL);
    if (up == atomic_load(&w->tallyd_up))
        return;
    int64_t since_s = atomic_load(&w->since_s);
    if (up) {
        fprintf(stderr, "tally-relay: tallyd at %s answers again (unreachable for %" PRId64
                        " s); the sinks go on\n",
                w->url, now_s - since_s);
    } else {
        atomic_store(&w->why, why);
        fprintf(stderr, "tally-relay: tallyd at %s does not answer (%s): the sinks wait for it; "
                        "/healthz fails until it answers\n",
                w->url, tally_strerror(why));
    }
    atomic_store(&w->since_s, now_s);
    atomic_store(&w->tallyd_up, up);
}

static void *watch_main(void *arg)
{
    relay_watch *w = arg;
    while (!atomic_load(&w->stop)) {
        relay_pause(&w->stop, RELAY_FIGURES_MS);
        int why = TALLY_ok;
        bool up = watch_round(w, &why);
        if (!atomic_load(&w->stop))
            watch_note(w, up, why);
    }
    return NULL;
}

int relay_watch_start(tally_client *client, const char *url, relay_sink_context *const *sinks,
                      size_t count, relay_watch **out)
{
    relay_watch *w = calloc(1, sizeof(*w));
    *out = NULL;
    if (w == NULL)
        return 1;
    *w = (relay_watch){.client = client, .url = url, .sinks = sinks, .count = count};
    atomic_store(&w->tallyd_up, true);
    atomic_store(&w->since_s, (int64_t)time(NULL));
    int why = TALLY_ok;
    bool up = watch_round(w, &why); /* /healthz starts knowing */
    watch_note(w, up, why);
    w->started = pthread_create(&w->thread, NULL, watch_main, w) == 0;
    if (!w->started) {
        fprintf(stderr, "tally-relay: no thread to watch tallyd\n");
        free(w);
        return 1;
    }
    *out = w;
    return 0;
}

bool relay_watch_tallyd_up(relay_watch *w, int64_t *since_s, const char **why)
{
    bool up = atomic_load(&w->tallyd_up);
    *since_s = atomic_load(&w->since_s);
    *why = up ? "" : tally_strerror(atomic_load(&w->why));
    return up;
}

void relay_watch_stop(relay_watch *w)
{
    if (w == NULL)
        return;
    atomic_store(&w->stop, true);
    if (w->started)
        pthread_join(w->thread, NULL);
    free(w);
}
