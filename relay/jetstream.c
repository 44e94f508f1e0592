/*
 * jetstream.c — the NATS JetStream sink of tally-relay (docs/RELAY.md):
 * one durable subscriber of tallyd whose batches are published
 * asynchronously to a stream, with at most max_pending PubAcks
 * outstanding, and acknowledged to tally only once JetStream has stored
 * them (PubAck).
 *
 * Order. Two events of one entity are never in flight together: before
 * publishing an event whose entity has a publish outstanding, the sink
 * waits for the outstanding PubAcks; an event whose entity has an earlier
 * event of this batch unstored waits for it. So a lost or failed publish
 * never lets a later event of its entity overtake it.
 *
 * Failures. A transient one (no PubAck in time, the connection down, no
 * responders while the stream is unavailable) is retried in the sink with
 * a pause doubling from 0.1 s to 30 s, republishing the batch's unstored
 * events in their order (Nats-Msg-Id lets JetStream drop a copy it
 * already has); the events stay in flight in tally meanwhile. A rejection
 * by JetStream (an API error: message too large, ...) naks the event to
 * tally with the error, and every later unstored event of the batch with
 * it; the sink then pauses and reopens its subscriber, whose first fetch
 * (restart) hands back the whole unacked window in seq order before
 * anything new. After max_deliver deliveries tally parks the event.
 */
#include "config.h"

#include "relay/stream_scan.h"

#include <inttypes.h>
#include <nats/nats.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define JS_ERROR_BYTES 200

typedef enum js_state {
    JS_UNSENT = 0,
    JS_SENT,     /* published, PubAck outstanding */
    JS_STORED,   /* PubAck received */
    JS_FAILED,   /* transient: try again in this batch */
    JS_REJECTED, /* JetStream said no: nak to tally */
    JS_BLOCKED,  /* an earlier event of its entity is not stored */
} js_state;

typedef struct js_sink {
    const relay_nats *cfg;
    relay_sink_context *ctx;
    natsConnection *nc;
    jsCtx *js;
    tally_subscriber *sub;
    pthread_mutex_t mu; /* guards what the PubAck callback touches: */
    pthread_cond_t cv;
    const tally_delivery *batch;
    size_t count;
    js_state *state;
    char (*error)[JS_ERROR_BYTES];
    size_t outstanding;
    uint64_t *entity; /* a hash of each event's entity */
    relay_scan_want *wants; /* the events asked about (stream_scan.h) */
    size_t *want_index;     /* ... and their batch indexes */
    bool reopen;      /* the run was stopped to reopen the subscriber */
} js_sink;

/* The batch index of seq among the events published and not yet answered. */
static bool index_of_sent(const js_sink *k, uint64_t seq, size_t *out)
{
    for (size_t i = 0; i < k->count; i++)
        if (k->batch[i].event.seq == seq && k->state[i] == JS_SENT) {
            *out = i;
            return true;
        }
    return false;
}

/* The PubAcks outstanding changed (under k->mu): the in-flight gauge. */
static void outstanding_set(js_sink *k, size_t outstanding)
{
    k->outstanding = outstanding;
    atomic_store_explicit(&k->ctx->metrics.in_flight, outstanding, memory_order_relaxed);
}

/* Publish i failed, counted as why: JS_FAILED (transient, tried again in
 * this batch) or JS_REJECTED (naked to tally) (under k->mu). */
static void failed_locked(js_sink *k, size_t i, js_state state, relay_failure why,
                          const char *what)
{
    k->state[i] = state;
    snprintf(k->error[i], JS_ERROR_BYTES, "%s", what);
    relay_count(&k->ctx->metrics.failures[why], 1);
}

/* A publish is answered: stored (why unused), or failed with why and what
 * (under k->mu). */
static void answered_locked(js_sink *k, natsMsg *msg, bool stored, relay_failure why,
                            const char *what)
{
    const char *seq_text = NULL;
    size_t i;
    if (natsMsgHeader_Get(msg, "Tally-Seq", &seq_text) != NATS_OK || seq_text == NULL ||
        !index_of_sent(k, strtoull(seq_text, NULL, 10), &i))
        return; /* an answer to a batch that is over */
    if (stored) {
        k->state[i] = JS_STORED;
        relay_count(&k->ctx->metrics.delivered, 1);
    } else {
        failed_locked(k, i, why == RELAY_FAILURE_REFUSED ? JS_REJECTED : JS_FAILED, why, what);
    }
    outstanding_set(k, k->outstanding - 1);
    pthread_cond_broadcast(&k->cv);
}

/* The reason label of a publish that failed with s: every status has a
 * cause (docs/RELAY.md, "Metrics"). */
static relay_failure failure_of(natsStatus s)
{
    switch (s) {
    case NATS_TIMEOUT: return RELAY_FAILURE_TIMEOUT;
    case NATS_CONNECTION_CLOSED: case NATS_CONNECTION_DISCONNECTED: case NATS_NO_SERVER:
    case NATS_NO_RESPONDERS: case NATS_STALE_CONNECTION: case NATS_IO_ERROR:
    case NATS_NOT_YET_CONNECTED: case NATS_DRAINING: case NATS_MISSED_HEARTBEAT:
    case NATS_ADDRESS_MISSING:
    case NATS_INSUFFICIENT_BUFFER: /* reconnecting: the reconnect buffer (1 byte) is full */
        return RELAY_FAILURE_CONNECTION;
    case NATS_NOT_PERMITTED: case NATS_CONNECTION_AUTH_FAILED: return RELAY_FAILURE_PERMISSION;
    case NATS_MAX_PAYLOAD: return RELAY_FAILURE_TOO_LARGE;
    case NATS_SECURE_CONNECTION_WANTED: case NATS_SECURE_CONNECTION_REQUIRED:
    case NATS_SSL_ERROR:
        return RELAY_FAILURE_TLS;
    case NATS_PROTOCOL_ERROR: case NATS_LINE_TOO_LONG: case NATS_NO_SERVER_SUPPORT:
    case NATS_MISMATCH:
        return RELAY_FAILURE_PROTOCOL;
    default: return RELAY_FAILURE_CLIENT;
    }
}

static void on_pub_ack(jsCtx *js, natsMsg *msg, jsPubAck *pa, jsPubAckErr *pae, void *closure)
{
    (void)js;
    js_sink *k = closure;
    char what[JS_ERROR_BYTES] = "";
    relay_failure why = pa == NULL && pae != NULL && pae->ErrCode != 0 ? RELAY_FAILURE_REFUSED
                        : failure_of(pae ? pae->Err : NATS_TIMEOUT);
    if (pa == NULL)
        snprintf(what, sizeof(what), "jetstream: %s%s%s",
                 pae ? natsStatus_GetText(pae->Err) : "no answer",
                 pae && pae->ErrText ? ": " : "", pae && pae->ErrText ? pae->ErrText : "");
    pthread_mutex_lock(&k->mu);
    answered_locked(k, msg, pa != NULL, why, what);
    pthread_mutex_unlock(&k->mu);
    natsMsg_Destroy(msg);
}

/* Wait until every publish is answered, ack_timeout_ms at most; what is
 * still unanswered then failed (an answer coming later is ignored). */
static void drain(js_sink *k)
{
    jsPubOptions po;
    jsPubOptions_Init(&po);
    po.MaxWait = k->cfg->ack_timeout_ms;
    if (js_PublishAsyncComplete(k->js, &po) != NATS_OK) {
        natsMsgList pending = {0};
        if (js_PublishAsyncGetPendingList(&pending, k->js) == NATS_OK) {
            pthread_mutex_lock(&k->mu);
            for (int i = 0; i < pending.Count; i++)
                answered_locked(k, pending.Msgs[i], false, RELAY_FAILURE_TIMEOUT,
                                "jetstream: no PubAck in time");
            pthread_mutex_unlock(&k->mu);
            natsMsgList_Destroy(&pending);
        }
    }
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += k->cfg->ack_timeout_ms / 1000 + 1;
    pthread_mutex_lock(&k->mu);
    while (k->outstanding > 0 && pthread_cond_timedwait(&k->cv, &k->mu, &until) == 0)
        ;
    for (size_t i = 0; k->outstanding > 0 && i < k->count; i++)
        if (k->state[i] == JS_SENT) {
            failed_locked(k, i, JS_FAILED, RELAY_FAILURE_TIMEOUT, "jetstream: no PubAck in time");
            outstanding_set(k, k->outstanding - 1);
        }
    pthread_mutex_unlock(&k->mu);
}

/* The message of event e: the subject from the template, the JSON
 * document, the headers. NULL with why set when it cannot be built. */
static natsMsg *message_of(const js_sink *k, const tally_event *e, char *why, size_t why_size)
{
    char subject[RELAY_SUBJECT_BYTES_MAX + 1], id[37], seq[24], version[24];
    char entity[RELAY_ENTITY_TEXT_BYTES_MAX];
    char *doc = NULL;
    size_t len = 0;
    natsMsg *m = NULL;
    if (!relay_subject(k->cfg->subject, e, subject, sizeof(subject))) {
        snprintf(why, why_size, "the subject does not fit %d bytes", RELAY_SUBJECT_BYTES_MAX);
        return NULL;
    }
    int rc = relay_event_doc(e, &doc, &len);
    if (rc != TALLY_ok) {
        snprintf(why, why_size, "the event document: %s", tally_strerror(rc));
        return NULL;
    }
    tally_uuid_format(&e->id, id);
    snprintf(seq, sizeof(seq), "%" PRIu64, e->seq);
    snprintf(version, sizeof(version), "%" PRIu64, e->entity_version);
    relay_entity_text(e, entity);
    natsStatus s = natsMsg_Create(&m, subject, NULL, doc, (int)len);
    if (s == NATS_OK)
        s = natsMsgHeader_Set(m, "Nats-Msg-Id", id);
    if (s == NATS_OK)
        s = natsMsgHeader_Set(m, "Tally-Seq", seq);
    if (s == NATS_OK)
        s = natsMsgHeader_Set(m, "Tally-Entity", entity);
    if (s == NATS_OK)
        s = natsMsgHeader_Set(m, "Tally-Entity-Version", version);
    free(doc);
    if (s != NATS_OK) {
        natsMsg_Destroy(m);
        snprintf(why, why_size, "nats message: %s", natsStatus_GetText(s));
        return NULL;
    }
    return m;
}

/* Publish event i asynchronously (blocks while max_pending are out). */
static void publish(js_sink *k, size_t i)
{
    char why[JS_ERROR_BYTES] = "";
    natsMsg *m = message_of(k, &k->batch[i].event, why, sizeof(why));
    pthread_mutex_lock(&k->mu);
    if (m) {
        k->state[i] = JS_SENT;
        outstanding_set(k, k->outstanding + 1);
    } else {
        failed_locked(k, i, JS_REJECTED, RELAY_FAILURE_DOCUMENT, why); /* cannot be built: naked */
    }
    pthread_mutex_unlock(&k->mu);
    if (m == NULL)
        return;
    natsStatus s = js_PublishMsgAsync(k->js, &m, NULL);
    if (s != NATS_OK) {
        pthread_mutex_lock(&k->mu);
        if (k->state[i] == JS_SENT) {
            char what[JS_ERROR_BYTES];
            snprintf(what, sizeof(what), "jetstream publish: %s", natsStatus_GetText(s));
            failed_locked(k, i, JS_FAILED, failure_of(s), what);
            outstanding_set(k, k->outstanding - 1);
        }
        pthread_mutex_unlock(&k->mu);
        natsMsg_Destroy(m);
    }
}

/* Whether an event before i of the same entity is in state. */
static bool earlier_of_entity(const js_sink *k, size_t i, js_state a, js_state b)
{
    for (size_t j = 0; j < i; j++)
        if (k->entity[j] == k->entity[i] && (k->state[j] == a || k->state[j] == b))
            return true;
    return false;
}

/* What event i waits for, under k->mu: an earlier event of its entity
 * still outstanding (drain first), or one not stored (then i is blocked). */
static bool must_drain(js_sink *k, size_t i)
{
    pthread_mutex_lock(&k->mu);
    bool yes = earlier_of_entity(k, i, JS_SENT, JS_SENT);
    pthread_mutex_unlock(&k->mu);
    return yes;
}

static bool blocked(js_sink *k, size_t i)
{
    pthread_mutex_lock(&k->mu);
    bool yes = earlier_of_entity(k, i, JS_FAILED, JS_REJECTED) ||
               earlier_of_entity(k, i, JS_BLOCKED, JS_UNSENT);
    if (yes) {
        k->state[i] = JS_BLOCKED;
        snprintf(k->error[i], JS_ERROR_BYTES, "waits for an earlier event of its entity");
    }
    pthread_mutex_unlock(&k->mu);
    return yes;
}

/* One round: publish every event not stored yet, in batch order, one per
 * entity in flight; then wait for the answers. */
static void publish_round(js_sink *k)
{
    pthread_mutex_lock(&k->mu);
    for (size_t i = 0; i < k->count; i++)
        if (k->state[i] != JS_STORED && k->state[i] != JS_REJECTED)
            k->state[i] = JS_UNSENT;
    pthread_mutex_unlock(&k->mu);
    for (size_t i = 0; i < k->count && !atomic_load(k->ctx->stop); i++) {
        if (k->state[i] != JS_UNSENT) /* only this thread moves an entry out of UNSENT */
            continue;
        if (must_drain(k, i))
            drain(k);
        if (!blocked(k, i))
            publish(k, i);
    }
    drain(k);
}

/* After a drain: nothing is outstanding, the callback touches nothing. */
static bool any_in(const js_sink *k, js_state a, js_state b)
{
    for (size_t i = 0; i < k->count; i++)
        if (k->state[i] == a || k->state[i] == b)
            return true;
    return false;
}

/* The events that may be in the stream already: in the first round
 * those tallyd handed back (a restart, a lease that ended on another
 * relay, a nak, a dlq replay); later, those whose publish failed (no
 * PubAck: stored or not). Those the stream holds are stored, not
 * published again (stream_scan.c). false: the stream could not be read
 * (the broker away), so nothing is published this round. */
static bool skip_stored(js_sink *k, bool first_round)
{
    size_t n = 0;
    for (size_t i = 0; i < k->count; i++) {
        const tally_delivery *d = &k->batch[i];
        bool maybe = first_round ? d->attempt > 1 || d->replay : k->state[i] == JS_FAILED;
        if (maybe && k->state[i] != JS_STORED && k->state[i] != JS_REJECTED) {
            k->wants[n] = (relay_scan_want){.event = &d->event};
            k->want_index[n++] = i;
        }
    }
    char why[JS_ERROR_BYTES] = "";
    int rc = relay_stream_scan(k->js, k->cfg, k->wants, n, why, sizeof(why));
    if (rc == 1) {
        pthread_mutex_lock(&k->mu);
        for (size_t j = 0; j < n; j++)
            failed_locked(k, k->want_index[j], JS_FAILED, RELAY_FAILURE_CONNECTION, why);
        pthread_mutex_unlock(&k->mu);
        return false;
    }
    if (rc == 2) {
        fprintf(stderr, "tally-relay: nats: %s; publishing %zu events that may be there (the "
                        "duplicate window drops a copy younger than it)\n", why, n);
        return true;
    }
    size_t found = 0;
    for (size_t j = 0; j < n; j++)
        if (k->wants[j].present) {
            k->state[k->want_index[j]] = JS_STORED;
            found++;
        }
    relay_count(&k->ctx->metrics.already_stored, found);
    if (found > 0)
        fprintf(stderr, "tally-relay: nats: %zu of %zu events to publish again are in stream %s "
                        "already (seq %" PRIu64 " ...): acknowledged, not published again\n",
                found, n, k->cfg->stream, k->batch[k->want_index[0]].event.seq);
    return true;
}

/* The sink still works on the batch's events not stored (an outage):
 * their lease starts again (sub_progress), so no other relay takes them
 * over while this one retries. A failure leaves it to the lease. */
static void keep_lease(js_sink *k)
{
    size_t n = 0;
    for (size_t i = 0; i < k->count; i++)
        if (k->state[i] != JS_STORED && k->state[i] != JS_REJECTED)
            k->want_index[n++] = i;
    uint64_t seqs[RELAY_MAX_PENDING_MAX];
    for (size_t done = 0; done < n;) {
        size_t m = 0;
        for (; m < RELAY_MAX_PENDING_MAX && done + m < n; m++)
            seqs[m] = k->batch[k->want_index[done + m]].event.seq;
        tally_subscriber_progress(k->sub, seqs, m);
        done += m;
    }
}

static void on_batch(const tally_delivery *batch, size_t count, tally_verdict *verdicts,
                     tally_answer *answers, void *arg)
{
    js_sink *k = arg;
    pthread_mutex_lock(&k->mu);
    k->batch = batch;
    k->count = count;
    outstanding_set(k, 0);
    char entity[RELAY_ENTITY_TEXT_BYTES_MAX];
    for (size_t i = 0; i < count; i++) {
        relay_entity_text(&batch[i].event, entity);
        k->entity[i] = relay_text_hash(entity);
        k->state[i] = JS_UNSENT;
    }
    pthread_mutex_unlock(&k->mu);
    uint32_t pause_ms = RELAY_RETRY_MS_MIN;
    for (bool first = true;; first = false) {
        if (skip_stored(k, first))
            publish_round(k);
        if (!any_in(k, JS_FAILED, JS_BLOCKED) || any_in(k, JS_REJECTED, JS_REJECTED) ||
            atomic_load(k->ctx->stop))
            break;
        for (size_t i = 0; i < count; i++)
            if (k->state[i] == JS_FAILED) {
                fprintf(stderr, "tally-relay: nats: seq %" PRIu64 ": %s; again in %" PRIu32 " ms\n",
                        batch[i].event.seq, k->error[i], pause_ms);
                break;
            }
        keep_lease(k);
        relay_pause(k->ctx->stop, pause_ms);
        pause_ms = pause_ms * 2 < RELAY_RETRY_MS_MAX ? pause_ms * 2 : RELAY_RETRY_MS_MAX;
    }
    for (size_t i = 0; i < count; i++) {
        verdicts[i] = k->state[i] == JS_STORED ? TALLY_DONE : TALLY_RETRY;
        if (k->state[i] == JS_STORED)
            continue;
        answers[i].delay_set = true; /* due at once after the reopen's restart anyway */
        answers[i].delay_ms = RELAY_RETRY_MS_MIN;
        snprintf(answers[i].error, sizeof(answers[i].error), "%s", k->error[i]);
        if (k->state[i] == JS_REJECTED)
            fprintf(stderr, "tally-relay: nats: seq %" PRIu64 " refused: %s\n", batch[i].event.seq,
                    k->error[i]);
        if (!atomic_load(k->ctx->stop)) /* a stop's retries are not failures */
            relay_say_parked(k->ctx, &batch[i], false, k->error[i]);
    }
    if (any_in(k, JS_REJECTED, JS_REJECTED) && !atomic_load(k->ctx->stop)) {
        k->reopen = true; /* the naked events come back first, in seq order */
        tally_subscriber_stop(k->sub);
    }
    pthread_mutex_lock(&k->mu);
    k->batch = NULL;
    k->count = 0;
    pthread_mutex_unlock(&k->mu);
}

/* ---- the connection and the stream ---- */

static int connect_nats(js_sink *k)
{
    natsOptions *o = NULL;
    jsOptions jo;
    natsStatus s = natsOptions_Create(&o);
    if (s == NATS_OK)
        s = natsOptions_SetURL(o, k->cfg->url);
    if (s == NATS_OK)
        s = natsOptions_SetMaxReconnect(o, -1); /* forever: the relay waits for the broker */
    if (s == NATS_OK)
        s = natsOptions_SetReconnectWait(o, 250);
    if (s == NATS_OK)
        s = natsOptions_SetName(o, "tally-relay");
    /* No buffering while reconnecting: a publish then fails at once and
     * the sink retries it itself, in order, after a pause; buffered copies
     * would only arrive later, out of the sink's sight. */
    if (s == NATS_OK)
        s = natsOptions_SetReconnectBufSize(o, 1);
    while (s == NATS_OK && !atomic_load(k->ctx->stop)) {
        s = natsConnection_Connect(&k->nc, o);
        if (s == NATS_OK)
            break;
        fprintf(stderr, "tally-relay: nats %s: %s; trying again\n", k->cfg->url,
                natsStatus_GetText(s));
        s = NATS_OK;
        relay_pause(k->ctx->stop, 1000);
    }
    natsOptions_Destroy(o);
    if (s != NATS_OK || k->nc == NULL)
        return s == NATS_OK ? 0 : 1;
    jsOptions_Init(&jo);
    jo.PublishAsync.MaxPending = k->cfg->max_pending;
    jo.PublishAsync.AckHandler = on_pub_ack;
    jo.PublishAsync.AckHandlerClosure = k;
    jo.PublishAsync.StallWait = k->cfg->ack_timeout_ms;
    jo.Wait = k->cfg->ack_timeout_ms;
    s = natsConnection_JetStream(&k->js, k->nc, &jo);
    if (s != NATS_OK)
        fprintf(stderr, "tally-relay: nats: jetstream: %s\n", natsStatus_GetText(s));
    return s == NATS_OK ? 0 : 1;
}

static int stream_create(js_sink *k)
{
    const relay_nats *c = k->cfg;
    const char *subjects[RELAY_STREAM_SUBJECTS_MAX];
    for (size_t i = 0; i < c->stream_subject_count; i++)
        subjects[i] = c->stream_subjects[i];
    jsStreamConfig sc;
    jsStreamConfig_Init(&sc);
    sc.Name = c->stream;
    sc.Subjects = subjects;
    sc.SubjectsLen = (int)c->stream_subject_count;
    sc.Storage = c->memory_storage ? js_MemoryStorage : js_FileStorage;
    sc.Replicas = c->replicas;
    sc.Duplicates = (int64_t)c->duplicate_window_s * 1000000000;
    jsStreamInfo *si = NULL;
    jsErrCode jerr = 0;
    natsStatus s = js_AddStream(&si, k->js, &sc, NULL, &jerr);
    jsStreamInfo_Destroy(si);
    if (s != NATS_OK)
        fprintf(stderr, "tally-relay: nats: creating stream %s: %s (%d)\n", c->stream,
                natsStatus_GetText(s), (int)jerr);
    else
        fprintf(stderr, "tally-relay: nats: created stream %s\n", c->stream);
    return s == NATS_OK ? 0 : 1;
}

/* Create the stream when it is missing; when it exists, its storage,
 * replicas and duplicate window must be the configured ones. 0 ok, 1 a
 * mismatch or a refusal, 2 not answered (the broker starting or away). */
static int stream_ensure_once(js_sink *k)
{
    const relay_nats *c = k->cfg;
    jsStreamInfo *si = NULL;
    jsErrCode jerr = 0;
    natsStatus s = js_GetStreamInfo(&si, k->js, c->stream, NULL, &jerr);
    if (s == NATS_NOT_FOUND || jerr == JSStreamNotFoundErr)
        return stream_create(k);
    if (s != NATS_OK) {
        fprintf(stderr, "tally-relay: nats: stream %s: %s\n", c->stream, natsStatus_GetText(s));
        return jerr != 0 ? 1 : 2;
    }
    const jsStreamConfig *have = si->Config;
    bool same = have->Storage == (c->memory_storage ? js_MemoryStorage : js_FileStorage) &&
                have->Replicas == c->replicas &&
                have->Duplicates == (int64_t)c->duplicate_window_s * 1000000000;
    if (!same)
        fprintf(stderr,
                "tally-relay: nats: stream %s exists with storage %s, %" PRId64
                " replicas, duplicate window %" PRId64 " s; the config says %s, %" PRIu32
                ", %" PRIu32 " s\n",
                c->stream, have->Storage == js_MemoryStorage ? "memory" : "file", have->Replicas,
                have->Duplicates / 1000000000, c->memory_storage ? "memory" : "file", c->replicas,
                c->duplicate_window_s);
    jsStreamInfo_Destroy(si);
    return same ? 0 : 1;
}

/* stream_ensure_once until answered (or stopped): 0 ok, 1 fatal. */
static int stream_ensure(js_sink *k)
{
    uint32_t pause_ms = RELAY_RETRY_MS_MIN;
    for (;;) {
        int rc = stream_ensure_once(k);
        if (rc != 2 || atomic_load(k->ctx->stop))
            return rc == 2 ? 0 : rc;
        relay_pause(k->ctx->stop, pause_ms);
        pause_ms = pause_ms * 2 < RELAY_RETRY_MS_MAX ? pause_ms * 2 : RELAY_RETRY_MS_MAX;
    }
}

/* ---- the run ---- */

static int sink_loop(js_sink *k)
{
    tally_run_options ro = {.fetch_max = k->cfg->sub.fetch_max, .wait_ms = RELAY_WAIT_MS,
                            .failures_max = TALLY_CLIENT_SUB_FAILURES_MAX,
                            .instance = k->ctx->instance};
    uint32_t pause_ms = RELAY_RETRY_MS_MIN;
    while (!atomic_load(k->ctx->stop)) {
        k->sub = relay_subscriber_open(k->ctx, &k->cfg->sub);
        if (k->sub == NULL)
            return atomic_load(k->ctx->stop) ? 0 : 1;
        k->reopen = false;
        int rc = TALLY_ok;
        if (relay_sink_begin(k->ctx, k->sub)) {
            rc = tally_subscriber_run_batches(k->sub, &ro, on_batch, k);
            relay_sink_end(k->ctx);
        }
        tally_subscriber_close(k->sub);
        k->sub = NULL;
        if (rc != TALLY_ok) {
            fprintf(stderr, "tally-relay: subscriber %s: %s\n", k->cfg->sub.name,
                    tally_strerror(rc));
            return 1;
        }
        if (!k->reopen)
            pause_ms = RELAY_RETRY_MS_MIN;
        else {
            relay_pause(k->ctx->stop, pause_ms);
            pause_ms = pause_ms * 2 < RELAY_RETRY_MS_MAX ? pause_ms * 2 : RELAY_RETRY_MS_MAX;
        }
    }
    return 0;
}

int relay_jetstream_run(const relay_nats *cfg, relay_sink_context *ctx)
{
    size_t cap = cfg->sub.fetch_max;
    js_sink k = {.cfg = cfg, .ctx = ctx};
    k.state = calloc(cap, sizeof(*k.state));
    k.error = calloc(cap, sizeof(*k.error));
    k.entity = calloc(cap, sizeof(*k.entity));
    k.wants = calloc(cap, sizeof(*k.wants));
    k.want_index = calloc(cap, sizeof(*k.want_index));
    int rc = k.state && k.error && k.entity && k.wants && k.want_index ? 0 : 1;
    pthread_mutex_init(&k.mu, NULL);
    pthread_cond_init(&k.cv, NULL);
    if (rc == 0)
        rc = connect_nats(&k);
    if (rc == 0 && k.js)
        rc = stream_ensure(&k);
    if (rc == 0 && k.js)
        rc = sink_loop(&k);
    if (k.js) {
        jsPubOptions po;
        jsPubOptions_Init(&po);
        po.MaxWait = cfg->ack_timeout_ms;
        js_PublishAsyncComplete(k.js, &po);
        jsCtx_Destroy(k.js);
    }
    natsConnection_Destroy(k.nc);
    pthread_cond_destroy(&k.cv);
    pthread_mutex_destroy(&k.mu);
    free(k.state);
    free(k.error);
    free(k.entity);
    free(k.wants);
    free(k.want_index);
    return rc;
}
