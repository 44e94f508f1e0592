/*
 * stream.c — the live stream of libtally (tally.h, "live stream"): tallyd's
 * PUB socket for speed, log_read for certainty.
 *
 * Seqs are gapless, so the stream needs only the next seq it owes the
 * caller (next_seq). A PUB message with that seq is handed out; an older
 * one is a duplicate and dropped; a newer one proves a gap, and the stream
 * reads the events from next_seq with log_read into a fill buffer of at
 * most fill_events, hands those out first and drops the PUB message (the
 * fill, or a later one, covers it). PUB can also lose the last messages
 * before a pause, which no later message reveals: when PUB has been silent
 * for idle_ms the stream long-polls log_read from next_seq. Every event
 * handed out is checked to carry next_seq, so nothing is skipped or given
 * twice whatever the socket does, and to chain to the event handed out
 * before it (prev_hash = its hash, clients/libtally/events.h), so a forged or
 * damaged PUB message is never handed out: it is dropped and log_read,
 * whose pages tally_log_read checks the same way, brings the event.
 *
 * The SUB socket is read with one aio that is never left in flight between
 * calls (NNG 1.5.2 can hang closing a socket with a pending aio), and it is
 * closed pipes first (clients/transport/sp_pipes.h): events keep arriving on it
 * until the last moment.
 */
#include "clients/libtally/libtally_internal.h"
#include "clients/transport/sp_pipes.h"
#include "common/limits.h"
#include "common/tls_config.h"

#include <nng/protocol/pubsub0/sub.h>
#include <nng/supplemental/util/platform.h>
#include <stdlib.h>

/* A PUB message is one stored event; allow room beyond its limit. */
#define PUB_MESSAGE_BYTES_MAX (TALLY_EVENT_BYTES_MAX + 1024)

_Static_assert(TALLY_STREAM_FILL_EVENTS_MAX <= TALLY_LOG_READ_EVENTS_MAX,
               "one fill is one log_read");
_Static_assert(TALLY_STREAM_IDLE_MS_MAX <= TALLY_LOG_WAIT_MS_MAX, "a poll waits within the limit");

struct tally_stream {
    tally_client *client;
    bool has_sub;
    nng_socket sub;
    nng_dialer dialer; /* sub's only one */
    sp_pipes pipes;    /* sub's, closed before it */
    nng_aio *aio;
    uint32_t idle_ms;
    nng_time heard_at; /* last PUB message or poll: silence is measured from it */
    uint64_t known_head; /* highest seq known to exist (log_read's head, PUB seqs) */
    tally_event *fill; /* events read with log_read, fill[fill_at..fill_count) not handed out */
    size_t fill_capacity, fill_count, fill_at;
    client_chain chain; /* the last event handed out */
    tally_stream_counters counters;
};

static void fill_drop(tally_stream *s)
{
    tally_events_release(s->fill + s->fill_at, s->fill_count - s->fill_at);
    s->fill_count = s->fill_at = 0;
}

/* Read events from next_seq into the (empty) fill buffer, waiting up to
 * wait_ms for the first. They must be next_seq, next_seq + 1, ... */
static int fill_read(tally_stream *s, uint32_t wait_ms)
{
    assert(s->fill_at == s->fill_count);
    size_t count = 0;
    uint64_t head = 0, next = s->counters.next_seq;
    s->fill_count = s->fill_at = 0;
    int rc = tally_log_read(s->client, next, (uint32_t)s->fill_capacity, wait_ms, s->fill,
                            s->fill_capacity, &count, &head);
    s->counters.reads++;
    if (rc != TALLY_ok)
        return rc;
    if (count == 0) {
        s->known_head = head; /* the server's word over a PUB message's */
        return head >= next ? TALLY_internal : TALLY_ok;
    }
    s->known_head = head > s->known_head ? head : s->known_head;
    s->fill_count = count;
    for (size_t i = 0; i < count; i++)
        if (s->fill[i].seq != next + i) {
            rc = i == 0 && s->fill[0].seq > next ? TALLY_not_found : TALLY_internal;
            fill_drop(s);
            return rc;
        }
    /* The page chains inside (tally_log_read checked); its first event
     * must chain to the last one handed out. */
    if (!client_chain_follows(&s->chain, &s->fill[0])) {
        fill_drop(s);
        return TALLY_corrupt_record;
    }
    return TALLY_ok;
}

static bool fill_take(tally_stream *s, tally_event *out)
{
    if (s->fill_at == s->fill_count)
        return false;
    *out = s->fill[s->fill_at++];
    assert(out->seq == s->counters.next_seq);
    client_chain_take(&s->chain, out);
    s->counters.next_seq++;
    s->counters.delivered++;
    s->counters.from_fill++;
    return true;
}

typedef enum pub_result { PUB_NONE, PUB_TAKEN, PUB_GAP, PUB_SKIPPED } pub_result;

/* Wait up to wait_ms for one PUB message and sort it: the next event
 * (PUB_TAKEN, *out filled), a gap, or nothing usable. */
static pub_result pub_receive(tally_stream *s, nng_duration wait_ms, tally_event *out)
{
    nng_aio_set_timeout(s->aio, wait_ms); /* 0: only what is queued already */
    nng_recv_aio(s->sub, s->aio);
    nng_aio_wait(s->aio);
    if (nng_aio_result(s->aio) != 0)
        return PUB_NONE;
    nng_msg *m = nng_aio_get_msg(s->aio);
    s->heard_at = nng_clock();
    tally_event e;
    bool ok = client_event_from_bytes(nng_msg_body(m), nng_msg_len(m), &e);
    nng_msg_free(m);
    if (!ok) { /* not an event, or damaged: log_read from next_seq at once */
        s->counters.refused++;
        s->known_head = s->counters.next_seq > s->known_head ? s->counters.next_seq
                                                             : s->known_head;
        return PUB_GAP;
    }
    if (e.seq == s->counters.next_seq && !client_chain_follows(&s->chain, &e)) {
        tally_events_release(&e, 1);
        s->counters.refused++;
        s->known_head = e.seq > s->known_head ? e.seq : s->known_head;
        return PUB_GAP; /* log_read brings the event (and checks it) */
    }
    if (e.seq == s->counters.next_seq) {
        client_chain_take(&s->chain, &e);
        *out = e;
        s->counters.next_seq++;
        s->counters.delivered++;
        s->counters.from_publish++;
        return PUB_TAKEN;
    }
    tally_events_release(&e, 1);
    if (e.seq < s->counters.next_seq) {
        s->counters.duplicates++;
        return PUB_SKIPPED;
    }
    s->counters.gaps++;
    s->known_head = e.seq > s->known_head ? e.seq : s->known_head;
    return PUB_GAP;
}

static void sub_pipe_event(nng_pipe pipe, nng_pipe_ev ev, void *arg)
{
    sp_pipes_event(&((tally_stream *)arg)->pipes, pipe, ev);
}

static int sub_open(tally_stream *s, const char *url, uint32_t recv_buffer)
{
    nng_tls_config *tls;
    int rc = client_tls_config(s->client, url, &tls);
    if (rc != TALLY_ok)
        return rc;
    int rv = sp_pipes_init(&s->pipes);
    if (rv == 0)
        rv = nng_sub0_open(&s->sub);
    if (rv != 0) {
        if (tls)
            nng_tls_config_free(tls);
        return rv == NNG_ENOMEM ? TALLY_out_of_memory : TALLY_internal;
    }
    s->has_sub = true;
    rv = nng_socket_set(s->sub, NNG_OPT_SUB_SUBSCRIBE, "", 0);
    if (rv == 0)
        rv = nng_pipe_notify(s->sub, NNG_PIPE_EV_ADD_PRE, sub_pipe_event, s);
    if (rv == 0)
        rv = nng_pipe_notify(s->sub, NNG_PIPE_EV_REM_POST, sub_pipe_event, s);
    if (rv == 0)
        rv = client_socket_limit(s->sub, PUB_MESSAGE_BYTES_MAX);
    if (rv == 0 && recv_buffer > 0)
        rv = nng_socket_set_int(s->sub, NNG_OPT_RECVBUF, (int)recv_buffer);
    if (rv == 0)
        rv = nng_aio_alloc(&s->aio, NULL, NULL);
    if (rv == 0)
        rv = tls_dial(s->sub, url, tls, &s->dialer, NNG_FLAG_NONBLOCK);
    if (tls)
        nng_tls_config_free(tls); /* the dialer holds it */
    return client_nng_error(rv);
}

static bool options_valid(const tally_stream_options *o)
{
    return o->recv_buffer <= TALLY_STREAM_RECV_BUFFER_MAX &&
           o->idle_ms <= TALLY_STREAM_IDLE_MS_MAX &&
           o->fill_events <= TALLY_STREAM_FILL_EVENTS_MAX;
}

int tally_stream_open(tally_client *c, const char *pub_url, uint64_t from_seq,
                      const tally_stream_options *options, tally_stream **out)
{
    static const tally_stream_options defaults = {0};
    const tally_stream_options *o = options ? options : &defaults;
    if (c == NULL || out == NULL || !options_valid(o))
        return TALLY_invalid_argument;
    tally_stream *s = calloc(1, sizeof(*s));
    if (s == NULL)
        return TALLY_out_of_memory;
    s->client = c;
    s->idle_ms = o->idle_ms ? o->idle_ms : TALLY_STREAM_IDLE_MS_DEFAULT;
    s->fill_capacity = o->fill_events ? o->fill_events : TALLY_STREAM_FILL_EVENTS_DEFAULT;
    s->fill = calloc(s->fill_capacity, sizeof(*s->fill));
    int rc = s->fill ? TALLY_ok : TALLY_out_of_memory;
    /* Subscribe before reading the head: nothing after it is missed. */
    if (rc == TALLY_ok && pub_url != NULL)
        rc = sub_open(s, pub_url, o->recv_buffer);
    tally_stats st = {0};
    if (rc == TALLY_ok && from_seq == TALLY_STREAM_FROM_NOW) {
        rc = tally_stats_get(c, &st);
        from_seq = st.head_seq + 1;
    }
    if (rc != TALLY_ok) {
        tally_stream_close(s);
        return rc;
    }
    s->counters.next_seq = from_seq;
    client_chain_start(&s->chain);
    s->heard_at = nng_clock();
    *out = s;
    return TALLY_ok;
}

/* Time left until deadline, 0 when it passed. */
static nng_time until(nng_time deadline)
{
    nng_time now = nng_clock();
    return now < deadline ? deadline - now : 0;
}

int tally_stream_next(tally_stream *s, tally_event *out, uint32_t timeout_ms)
{
    if (s == NULL || out == NULL)
        return TALLY_invalid_argument;
    nng_time deadline = nng_clock() + timeout_ms;
    for (;;) {
        if (fill_take(s, out))
            return TALLY_ok;
        if (s->known_head >= s->counters.next_seq) { /* behind: catch up at once */
            int rc = fill_read(s, 0);
            if (rc != TALLY_ok)
                return rc;
            continue;
        }
        nng_time silence_ends = s->heard_at + s->idle_ms;
        if (!s->has_sub || nng_clock() >= silence_ends) {
            nng_time left = until(deadline);
            s->counters.polls++;
            int rc = fill_read(s, (uint32_t)(left < TALLY_LOG_WAIT_MS_MAX ? left
                                                                          : TALLY_LOG_WAIT_MS_MAX));
            s->heard_at = nng_clock();
            if (rc != TALLY_ok)
                return rc;
            if (s->fill_count == 0 && until(deadline) == 0)
                return TALLY_timed_out;
            continue;
        }
        nng_time wait = until(deadline < silence_ends ? deadline : silence_ends);
        switch (pub_receive(s, (nng_duration)wait, out)) {
        case PUB_TAKEN: return TALLY_ok;
        case PUB_GAP: /* known_head moved: the next turn fills */
        case PUB_SKIPPED: break;
        case PUB_NONE:
            if (until(deadline) == 0 && nng_clock() < silence_ends)
                return TALLY_timed_out;
            break;
        }
    }
}

void tally_stream_counters_get(const tally_stream *s, tally_stream_counters *out)
{
    assert(s != NULL && out != NULL);
    *out = s->counters;
}

void tally_stream_close(tally_stream *s)
{
    if (s == NULL)
        return;
    if (s->has_sub) /* no aio of ours is in flight: every receive was waited for */
        sp_pipes_close_socket(&s->pipes, s->sub, s->dialer);
    sp_pipes_fini(&s->pipes);
    if (s->aio)
        nng_aio_free(s->aio);
    if (s->fill)
        fill_drop(s);
    free(s->fill);
    free(s);
}
