/*
 * quorum.c — the stream's reader (stream.h, "Reading"): every position
 * read from a majority of the stream's replicas, each through a consumer
 * of its own on another nats-server, and returned only when every one of
 * those copies holds the same bytes there (quorum.h; docs/CLUSTER.md,
 * "Applying").
 *
 * A consumer of nats-server 2.9 is hosted by one server (an ephemeral
 * consumer has one replica, on a server JetStream picks at random among
 * the stream's) and delivers from that server's own store, and its info
 * names the server. So a reader keeps floor(R/2) + 1 consumers, made
 * again until each is on another server, and reads them side by side: a
 * position whose copies all agree is held by a majority of the replicas
 * (a healthy replica stores only what its quorum committed). Copies that
 * differ mean a server holds what the stream does not (a deposed leader
 * that stored publishes without its quorum on waking): every consumer is
 * made again, elsewhere as JetStream picks, until a majority agrees; the
 * server a majority then outvoted is avoided while others can be had (a
 * diverged store differs at every later position).
 * Messages arrive pushed, so this costs no request per message.
 */
#include "config.h"

#include "net/cluster/quorum.h"

#include "common/clock.h"
#include "common/error.h"

#include <assert.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NS_PER_MS INT64_C(1000000)
#define COPIES_MAX (TALLY_CLUSTER_REPLICAS_MAX / 2 + 1)
#define SERVER_NAME_BYTES 128
/* Consumers made in one go to find a server that no other copy reads. */
#define PLACE_TRIES 8
/* A consumer's creation, and its info, waited for this long. */
#define PLACE_WAIT_MS (2 * CLUSTER_READER_SLICE_MS)
/* A consumer's deletion (natsSubscription_Unsubscribe) waited for this
 * long: one not deleted then (its server silent) goes by itself, since
 * nats-server removes an ephemeral consumer INACTIVE_MS after its
 * subscriber left. */
#define DROP_WAIT_MS 500
#define INACTIVE_MS 5000
/* The consumers' idle heartbeat (nats-server requires one with flow
 * control; a reader's own silence check is a slice). */
#define HEARTBEAT_MS 5000

/* One replica's copy of the stream: a consumer on one server. */
typedef struct reader_copy {
    natsSubscription *sub;
    char server[SERVER_NAME_BYTES]; /* the nats-server that hosts sub's consumer */
    natsMsg *at;      /* its copy of r->next, taken */
    bool stale;       /* to be made again (not while the messages returned are held) */
    int64_t quiet_ms; /* waited on it without r->next's copy since the last */
} reader_copy;

struct cluster_reader {
    cluster_stream *s;
    jsCtx *js; /* the reader's own: its requests wait DROP_WAIT_MS unless told otherwise */
    int64_t until; /* the current call's end: no consumer is made anew past it but the first */
    reader_copy copy[COPIES_MAX];
    size_t copies; /* a majority of the stream's replicas */
    natsMsg *held[TALLY_CLUSTER_APPLY_MESSAGES_MAX]; /* the messages last returned; */
    size_t held_count;                               /* destroyed on the next call */
    uint64_t next; /* the sequence to return next */
    uint64_t resets;
    uint64_t corrected;  /* positions whose copies differed */
    bool next_differed;  /* r->next's copies differed: its message is flagged corrected */
    char outvoted[SERVER_NAME_BYTES]; /* the last server whose copy a majority did not hold */
    char differed_on[COPIES_MAX][SERVER_NAME_BYTES]; /* the servers of r->next's copies that differed */
    char differed[CLUSTER_DIFFERED_BYTES]; /* the copies of the last position that differed */
    bool differed_new;                     /* not yet taken by cluster_reader_differed */
    char place_failed[CLUSTER_DIFFERED_BYTES]; /* why the last consumer could not be made */
    uint64_t place_failures; /* since cluster_reader_place_failed last took them */
    uint64_t stale_copy_at; /* tests: one server's copy at this sequence is replaced */
    char stale_server[SERVER_NAME_BYTES]; /* ... that server's (the first to deliver it) */
    char stale_kind[TALLY_CLUSTER_SUBJECT_TOKEN_BYTES_MAX + 1]; /* ... by this message */
    char stale_data[64];
    size_t stale_len;
};

static void copy_drop(reader_copy *c)
{
    natsMsg_Destroy(c->at);
    c->at = NULL;
    if (c->sub != NULL) {
        natsSubscription_Unsubscribe(c->sub); /* deletes the ephemeral consumer */
        natsSubscription_Destroy(c->sub);
    }
    c->sub = NULL;
    c->server[0] = '\0';
    c->quiet_ms = 0;
    c->stale = false;
}

/* Whether another copy than c reads from server. */
static bool server_taken(const cluster_reader *r, const reader_copy *c, const char *server)
{
    for (size_t i = 0; i < r->copies; i++)
        if (&r->copy[i] != c && r->copy[i].sub != NULL && strcmp(r->copy[i].server, server) == 0)
            return true;
    return false;
}

/* One consumer from r->next and the server that hosts it; TALLY_ok or
 * an error (c->sub NULL). */
static int copy_subscribe_once(cluster_reader *r, reader_copy *c)
{
    const char *name = cluster_stream_name(r->s);
    char subject[TALLY_CLUSTER_STREAM_NAME_BYTES_MAX + 3];
    snprintf(subject, sizeof(subject), "%s.>", name);
    jsOptions o;
    jsOptions_Init(&o);
    o.Wait = PLACE_WAIT_MS;
    jsSubOptions so;
    jsSubOptions_Init(&so);
    so.Stream = name;
    so.Config.DeliverPolicy = js_DeliverByStartSequence;
    so.Config.OptStartSeq = r->next;
    so.Config.AckPolicy = js_AckNone;
    so.Config.FlowControl = true;
    so.Config.Heartbeat = HEARTBEAT_MS * NS_PER_MS;
    so.Config.MemoryStorage = true;
    so.Config.InactiveThreshold = INACTIVE_MS * NS_PER_MS;
    jsErrCode jerr = 0;
    natsStatus st = js_SubscribeSync(&c->sub, r->js, subject, &o, &so, &jerr);
    if (st != NATS_OK) {
        c->sub = NULL;
        natsStatus last = NATS_OK;
        const char *text = nats_GetLastError(&last);
        snprintf(r->place_failed, sizeof(r->place_failed), "%s (JetStream error %d): %s",
                 natsStatus_GetText(st), (int)jerr, text && text[0] ? text : "no detail");
        r->place_failures++;
        return cluster_stream_code_of(st, jerr);
    }
    jsConsumerInfo *ci = NULL;
    st = natsSubscription_GetConsumerInfo(&ci, c->sub, &o, &jerr);
    bool placed = st == NATS_OK && ci->Cluster != NULL && ci->Cluster->Leader != NULL &&
                  ci->Cluster->Leader[0] != '\0';
    if (placed)
        snprintf(c->server, sizeof(c->server), "%s", ci->Cluster->Leader);
    jsConsumerInfo_Destroy(ci);
    if (!placed) {
        snprintf(r->place_failed, sizeof(r->place_failed), "its info %s",
                 st == NATS_OK ? "names no server" : natsStatus_GetText(st));
        r->place_failures++;
        copy_drop(c);
        return st == NATS_OK ? TALLY_internal : cluster_stream_code_of(st, jerr);
    }
    return TALLY_ok;
}

/* c's consumer made again from r->next on a server no other copy reads
 * (a few tries while the call lasts: JetStream places it);
 * TALLY_timed_out when none came. */
static int copy_subscribe(cluster_reader *r, reader_copy *c)
{
    copy_drop(c);
    r->resets++;
    int rc = TALLY_timed_out;
    for (int i = 0; i < PLACE_TRIES && (i == 0 || clock_mono_ms() < r->until); i++) {
        rc = copy_subscribe_once(r, c);
        if (rc != TALLY_ok)
            return rc;
        /* a server a majority outvoted is taken only when the others are not to be had */
        bool outvoted = i < PLACE_TRIES / 2 && strcmp(c->server, r->outvoted) == 0;
        if (!server_taken(r, c, c->server) && !outvoted)
            return TALLY_ok;
        copy_drop(c);
        rc = TALLY_timed_out;
    }
    return rc;
}

/* Copies marked stale made again: the first always, the others while the
 * call lasts, so that a call returns within its wait and one JetStream
 * request (the rest on the next call). */
static void reader_renew(cluster_reader *r)
{
    size_t want = cluster_stream_quorum(r->s); /* the stream's replicas changed: a new majority */
    for (size_t i = want; i < r->copies; i++)
        copy_drop(&r->copy[i]);
    for (size_t i = r->copies; i < want; i++)
        r->copy[i].stale = true;
    r->copies = want;
    /* all gone first, so that no new one avoids the server of one going */
    for (size_t i = 0; i < r->copies; i++) {
        if (r->copy[i].stale) {
            copy_drop(&r->copy[i]);
            r->copy[i].stale = true;
        }
    }
    bool first = true;
    for (size_t i = 0; i < r->copies; i++) {
        if (!r->copy[i].stale || (!first && clock_mono_ms() >= r->until))
            continue;
        first = false;
        (void)copy_subscribe(r, &r->copy[i]); /* a failure is tried again later */
    }
}

/* The messages returned by the last call, no longer the caller's. */
static void reader_release(cluster_reader *r)
{
    for (size_t i = 0; i < r->held_count; i++)
        natsMsg_Destroy(r->held[i]);
    r->held_count = 0;
}

int cluster_reader_open(cluster_reader **out, cluster_stream *s, uint64_t from)
{
    assert(out != NULL && s != NULL && from >= 1);
    *out = NULL;
    cluster_reader *r = calloc(1, sizeof(*r));
    if (r == NULL)
        return TALLY_out_of_memory;
    r->s = s;
    r->js = cluster_stream_js_waiting(s, DROP_WAIT_MS);
    if (r->js == NULL) {
        free(r);
        return TALLY_out_of_memory;
    }
    r->next = from;
    r->copies = cluster_stream_quorum(s);
    assert(r->copies >= 1 && r->copies <= COPIES_MAX);
    /* the consumers are made by the first read, within its wait */
    for (size_t i = 0; i < r->copies; i++)
        r->copy[i].stale = true;
    *out = r;
    return TALLY_ok;
}

void cluster_reader_close(cluster_reader *r)
{
    if (r == NULL)
        return;
    reader_release(r);
    for (size_t i = 0; i < r->copies; i++)
        copy_drop(&r->copy[i]);
    jsCtx_Destroy(r->js);
    free(r);
}

size_t cluster_reader_copies(const cluster_reader *r)
{
    return r->copies;
}

uint64_t cluster_reader_resets(const cluster_reader *r)
{
    return r->resets;
}

uint64_t cluster_reader_corrected(const cluster_reader *r)
{
    return r->corrected;
}

void cluster_reader_test_stale_copy_at(cluster_reader *r, uint64_t seq, const char *kind,
                                       const void *data, size_t len)
{
    assert(cluster_kind_is_valid(kind) && len <= sizeof(r->stale_data));
    r->stale_copy_at = seq;
    r->stale_server[0] = '\0';
    snprintf(r->stale_kind, sizeof(r->stale_kind), "%s", kind);
    memcpy(r->stale_data, data, len);
    r->stale_len = len;
}

/* Tests (cluster_reader_test_stale_copy_at): msg, c's copy of the
 * position, replaced by the copy the test gave when c reads the server
 * that first delivered it, every time, as a server's stale store holds
 * it. */
static natsMsg *stale_copy_of(cluster_reader *r, reader_copy *c, natsMsg *msg)
{
    if (r->stale_server[0] == '\0')
        snprintf(r->stale_server, sizeof(r->stale_server), "%s", c->server);
    if (strcmp(r->stale_server, c->server) != 0)
        return msg;
    char subject[TALLY_CLUSTER_STREAM_NAME_BYTES_MAX + TALLY_CLUSTER_SUBJECT_TOKEN_BYTES_MAX + 2];
    snprintf(subject, sizeof(subject), "%s.%s", cluster_stream_name(r->s), r->stale_kind);
    natsMsg *copy = NULL;
    if (natsMsg_Create(&copy, subject, NULL, r->stale_data, (int)r->stale_len) == NATS_OK &&
        natsMsgHeader_Set(copy, "Nats-Msg-Id", "stale-copy") == NATS_OK) {
        natsMsg_Destroy(msg);
        return copy;
    }
    natsMsg_Destroy(copy);
    return msg;
}

/* msg from c's consumer: r->next's copy kept in c->at (TALLY_ok); a
 * status message or a copy of an earlier one dropped (TALLY_timed_out);
 * a gap marks c to be made again (TALLY_not_found). */
static int copy_take(cluster_reader *r, reader_copy *c, natsMsg *msg)
{
    jsMsgMetaData *meta = NULL;
    if (natsMsg_GetMetaData(&meta, msg) != NATS_OK) {
        natsMsg_Destroy(msg); /* a status message, not a stream message */
        return TALLY_timed_out;
    }
    uint64_t seq = meta->Sequence.Stream;
    jsMsgMetaData_Destroy(meta);
    if (seq != r->next) {
        natsMsg_Destroy(msg);
        if (seq < r->next)
            return TALLY_timed_out;
        c->stale = true; /* a gap: read again from r->next */
        return TALLY_not_found;
    }
    if (r->stale_copy_at == seq)
        msg = stale_copy_of(r, c, msg);
    assert(c->at == NULL);
    c->at = msg;
    c->quiet_ms = 0;
    return TALLY_ok;
}

static bool same_message(natsMsg *a, natsMsg *b)
{
    int len = natsMsg_GetDataLength(a);
    return len == natsMsg_GetDataLength(b) &&
           (len == 0 || memcmp(natsMsg_GetData(a), natsMsg_GetData(b), (size_t)len) == 0) &&
           strcmp(natsMsg_GetSubject(a), natsMsg_GetSubject(b)) == 0 &&
           strcmp(cluster_msg_id_of(a), cluster_msg_id_of(b)) == 0;
}

/* r->differed: which server holds what at r->next, whose copies differ. */
static void reader_note_differed(cluster_reader *r)
{
    size_t used = (size_t)snprintf(r->differed, sizeof(r->differed), "position %" PRIu64 ":",
                                   r->next);
    for (size_t i = 0; i < r->copies && used < sizeof(r->differed); i++) {
        natsMsg *m = r->copy[i].at;
        const char *subject = natsMsg_GetSubject(m), *dot = strrchr(subject, '.');
        const char *id = cluster_msg_id_of(m);
        used += (size_t)snprintf(r->differed + used, sizeof(r->differed) - used,
                                 "%s %s holds %s %s (%d bytes)", i > 0 ? "," : "",
                                 r->copy[i].server, dot ? dot + 1 : subject, id[0] ? id : "-",
                                 natsMsg_GetDataLength(m));
    }
    r->differed_new = true;
    for (size_t i = 0; i < r->copies; i++)
        snprintf(r->differed_on[i], sizeof(r->differed_on[i]), "%s", r->copy[i].server);
}

/* r->next's copies agree after they differed: a server that held one of
 * the differing copies and none of the agreeing ones was outvoted. */
static void reader_note_outvoted(cluster_reader *r)
{
    for (size_t i = 0; i < r->copies; i++) {
        bool agreeing = false;
        for (size_t k = 0; k < r->copies; k++)
            agreeing = agreeing || strcmp(r->differed_on[i], r->copy[k].server) == 0;
        if (!agreeing && r->differed_on[i][0] != '\0')
            snprintf(r->outvoted, sizeof(r->outvoted), "%s", r->differed_on[i]);
    }
}

uint64_t cluster_reader_place_failed(cluster_reader *r, char *what, size_t what_size)
{
    uint64_t n = r->place_failures;
    r->place_failures = 0;
    if (n > 0)
        snprintf(what, what_size, "%s", r->place_failed);
    return n;
}

bool cluster_reader_differed(cluster_reader *r, char *what, size_t what_size)
{
    if (!r->differed_new)
        return false;
    r->differed_new = false;
    snprintf(what, what_size, "%s", r->differed);
    return true;
}

/* Every copy holds r->next: the same bytes in all (a majority holds
 * them) returns it (TALLY_ok, *m set); copies that differ are all made
 * again (TALLY_timed_out: read on). */
static int reader_decide(cluster_reader *r, cluster_message *m)
{
    bool agree = true;
    for (size_t i = 1; i < r->copies; i++)
        agree = agree && same_message(r->copy[0].at, r->copy[i].at);
    if (!agree) {
        if (!r->next_differed)
            reader_note_differed(r);
        r->corrected += !r->next_differed;
        r->next_differed = true;
        for (size_t i = 0; i < r->copies; i++) {
            natsMsg_Destroy(r->copy[i].at);
            r->copy[i].at = NULL;
            r->copy[i].stale = true;
        }
        return TALLY_timed_out;
    }
    if (r->next_differed)
        reader_note_outvoted(r);
    natsMsg *msg = r->copy[0].at;
    for (size_t i = 0; i < r->copies; i++) {
        if (i > 0)
            natsMsg_Destroy(r->copy[i].at);
        r->copy[i].at = NULL;
    }
    assert(r->held_count < TALLY_CLUSTER_APPLY_MESSAGES_MAX);
    r->held[r->held_count++] = msg;
    *m = (cluster_message){.seq = r->next, .subject = natsMsg_GetSubject(msg),
                           .data = natsMsg_GetData(msg), .len = (size_t)natsMsg_GetDataLength(msg),
                           .msg_id = cluster_msg_id_of(msg), .corrected = r->next_differed};
    r->next_differed = false;
    r->next++;
    return TALLY_ok;
}

/* The first copy that does not hold r->next yet; NULL when all do. */
static reader_copy *copy_lacking(cluster_reader *r)
{
    for (size_t i = 0; i < r->copies; i++)
        if (r->copy[i].at == NULL)
            return &r->copy[i];
    return NULL;
}

/* What a slice without r->next from c, or a gap before it, means: the
 * stream lost the front (TALLY_not_found: a consumer from r->next starts
 * at the stream's first message, a gap every time), holds more than c's
 * server delivered (c made again, elsewhere as JetStream places it), or
 * has nothing new. */
static int copy_after_silence(cluster_reader *r, reader_copy *c)
{
    uint64_t first = 0, last = 0;
    if (cluster_stream_bounds(r->s, &first, &last) != TALLY_ok)
        return TALLY_timed_out; /* no leader now: wait on */
    if (first > r->next) /* aged out; an empty stream that had messages says last + 1 */
        return TALLY_not_found;
    if (last >= r->next)
        c->stale = true;
    return TALLY_timed_out;
}

/* One slice of a wait for r->next: a copy that lacks it waited on, and
 * once every copy holds it, the decision. */
static int reader_wait_slice(cluster_reader *r, int64_t until, cluster_message *m)
{
    reader_renew(r);
    reader_copy *c = copy_lacking(r);
    if (c == NULL)
        return reader_decide(r, m);
    int64_t now = clock_mono_ms(), left = until > now ? until - now : 0;
    /* cnats takes only a positive wait: 1 ms looks at what arrived */
    int64_t slice = left < 1 ? 1 : left < CLUSTER_READER_SLICE_MS ? left : CLUSTER_READER_SLICE_MS;
    if (c->sub == NULL) { /* not made: tried again after a pause */
        nats_Sleep(slice < CLUSTER_RECONNECT_WAIT_MS ? slice : CLUSTER_RECONNECT_WAIT_MS);
        c->stale = true;
        return TALLY_timed_out;
    }
    natsMsg *msg = NULL;
    natsStatus st = natsSubscription_NextMsg(&msg, c->sub, slice);
    if (st == NATS_OK) {
        int rc = copy_take(r, c, msg);
        if (rc == TALLY_not_found) /* a gap: the front aged out, or c made again */
            return copy_after_silence(r, c);
        return rc == TALLY_ok && copy_lacking(r) == NULL ? reader_decide(r, m) : TALLY_timed_out;
    }
    if (st != NATS_TIMEOUT) {
        c->stale = true; /* the consumer failed (slow consumer, missed heartbeats, closed) */
        return TALLY_timed_out;
    }
    c->quiet_ms += clock_mono_ms() - now;
    if (c->quiet_ms < CLUSTER_READER_SLICE_MS)
        return TALLY_timed_out;
    c->quiet_ms = 0;
    return copy_after_silence(r, c);
}

/* The first message of a call: waited for up to wait_ms. */
static int reader_wait_next(cluster_reader *r, int64_t wait_ms, cluster_message *m)
{
    int64_t until = clock_mono_ms() + wait_ms;
    r->until = until;
    for (;;) {
        if (cluster_stream_interrupted(r->s))
            return TALLY_unreachable;
        int rc = reader_wait_slice(r, until, m);
        if (rc != TALLY_timed_out || clock_mono_ms() >= until)
            return rc;
    }
}

int cluster_reader_next(cluster_reader *r, int64_t wait_ms, cluster_message *m)
{
    size_t count = 0;
    return cluster_reader_next_batch(r, wait_ms, 1, SIZE_MAX, m, &count);
}

/* Whether c's client holds a message of its consumer already (no wait). */
static bool copy_has_arrived(reader_copy *c)
{
    int pending = 0;
    return c->sub != NULL && !c->stale &&
           natsSubscription_GetPending(c->sub, &pending, NULL) == NATS_OK && pending > 0;
}

/* r->next's copies from what already arrived (no wait): TALLY_ok with *m
 * when every copy holds it and they agree, else not now. */
static int reader_take_arrived(cluster_reader *r, cluster_message *m)
{
    for (reader_copy *c = copy_lacking(r); c != NULL; c = copy_lacking(r)) {
        natsMsg *msg = NULL;
        if (!copy_has_arrived(c) || natsSubscription_NextMsg(&msg, c->sub, 1) != NATS_OK)
            return TALLY_timed_out;
        int rc = copy_take(r, c, msg);
        if (rc == TALLY_not_found)
            return rc; /* a gap: the next call makes c again */
    }
    return reader_decide(r, m);
}

int cluster_reader_next_batch(cluster_reader *r, int64_t wait_ms, size_t max, size_t bytes_max,
                              cluster_message *m, size_t *count)
{
    assert(r != NULL && m != NULL && count != NULL && wait_ms >= 0);
    assert(max >= 1 && max <= TALLY_CLUSTER_APPLY_MESSAGES_MAX);
    reader_release(r);
    *count = 0;
    int rc = reader_wait_next(r, wait_ms, &m[0]);
    if (rc != TALLY_ok)
        return rc;
    size_t bytes = m[0].len;
    *count = 1;
    /* Then those whose copies all arrived already, in order, while under
     * max and bytes_max (the last may pass it). Copies that differ, a gap
     * or a copy not here yet end the batch: a consumer is not made again
     * while the batch's messages are held (the next call does it). */
    while (*count < max && bytes < bytes_max && reader_take_arrived(r, &m[*count]) == TALLY_ok) {
        bytes += m[*count].len;
        (*count)++;
    }
    return TALLY_ok;
}
