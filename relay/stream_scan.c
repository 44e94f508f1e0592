/*
 * stream_scan.c — which events of a batch the stream already holds
 * (docs/RELAY.md, "Exactly once in the stream"). The JetStream sink asks
 * before it publishes an event that may have been stored already: one
 * handed back by tallyd (a restart, a lease that ran out on another
 * relay, a nak) or one whose publish failed without an answer (an
 * outage, a lost PubAck). JetStream's duplicate window would drop such a
 * copy only while the first one is younger than the window; the scan
 * finds it whatever its age.
 *
 * How: the stream's messages on the relay's subjects are read back,
 * headers only (an ordered consumer from a start sequence), from the
 * stream's end towards its start, a chunk at a time (1,024 stream
 * sequences, then 4 times more each time), and every Nats-Msg-Id is
 * looked up among the wanted event ids. The scan stops when every wanted
 * event was found; at the stream's first message; at a message stored
 * before the oldest wanted event was committed (less RELAY_SCAN_SKEW_MS
 * for the clocks of tallyd and NATS), since no copy of it can be older;
 * once it has read as many messages of events older than every wanted
 * one as the subscriber may have in flight (its max_ack_pending): the
 * relays publish in seq order but for what was in flight together, so an
 * older copy of a wanted event lies within that many of them; or after
 * RELAY_SCAN_SEQS_MAX stream sequences (said on stderr: the duplicate
 * window is then the only guard).
 */
#include "config.h"

#include "common/limits.h"
#include "relay/stream_scan.h"

#include <inttypes.h>
#include <nats/nats.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SCAN_CHUNK_SEQS_FIRST 1024

typedef struct wanted_id {
    char id[37];
    size_t index; /* into the caller's wants */
} wanted_id;

typedef struct scan {
    jsCtx *js;
    const relay_nats *cfg;
    relay_scan_want *wants;
    wanted_id *ids; /* sorted by id */
    size_t count, missing;
    uint64_t seq_min;      /* the lowest wanted tally seq */
    int64_t oldest_ns;     /* a message stored before this holds no wanted event */
    uint64_t older;        /* messages read of events below seq_min */
    uint64_t older_enough; /* ... after which the scan stops */
    int64_t chunk_first_ns; /* the time of the chunk's first message read */
    char *why;
    size_t why_size;
} scan;

static int id_cmp(const void *a, const void *b)
{
    return strcmp(((const wanted_id *)a)->id, ((const wanted_id *)b)->id);
}

/* One message read back: a wanted id found, and the lowest seq seen. */
static void message_seen(scan *sc, natsMsg *m)
{
    const char *id = NULL, *seq = NULL;
    if (natsMsgHeader_Get(m, "Tally-Seq", &seq) == NATS_OK && seq != NULL) {
        uint64_t v = strtoull(seq, NULL, 10);
        sc->older += v > 0 && v < sc->seq_min;
    }
    if (natsMsgHeader_Get(m, "Nats-Msg-Id", &id) != NATS_OK || id == NULL || strlen(id) != 36)
        return;
    wanted_id key;
    memcpy(key.id, id, sizeof(key.id));
    wanted_id *hit = bsearch(&key, sc->ids, sc->count, sizeof(*sc->ids), id_cmp);
    if (hit && !sc->wants[hit->index].present) {
        sc->wants[hit->index].present = true;
        sc->missing--;
    }
}

/* The scan's failure: 1 transient (no answer, the connection away), 2 an
 * API error of JetStream. */
static int scan_failed(scan *sc, const char *what, natsStatus s, jsErrCode jerr)
{
    snprintf(sc->why, sc->why_size, "reading stream %s back: %s: %s (%d)", sc->cfg->stream, what,
             natsStatus_GetText(s), (int)jerr);
    return jerr != 0 ? 2 : 1;
}

/* Read the messages on filter with stream sequences from..to. */
static int scan_chunk(scan *sc, const char *filter, uint64_t from, uint64_t to)
{
    jsSubOptions so;
    jsSubOptions_Init(&so);
    so.Stream = sc->cfg->stream;
    so.Ordered = true;
    so.Config.HeadersOnly = true;
    so.Config.DeliverPolicy = js_DeliverByStartSequence;
    so.Config.OptStartSeq = from;
    natsSubscription *sub = NULL;
    jsErrCode jerr = 0;
    natsStatus s = js_SubscribeSync(&sub, sc->js, filter, NULL, &so, &jerr);
    if (s != NATS_OK)
        return scan_failed(sc, "a reading consumer", s, jerr);
    jsConsumerInfo *ci = NULL;
    s = natsSubscription_GetConsumerInfo(&ci, sub, NULL, &jerr);
    /* messages on filter from `from` on: those pushed before this answer
     * (delivered) and the rest (pending) */
    uint64_t pending = s == NATS_OK ? ci->NumPending + ci->Delivered.Consumer : 0;
    jsConsumerInfo_Destroy(ci);
    int rc = s == NATS_OK ? 0 : scan_failed(sc, "its pending count", s, jerr);
    while (rc == 0 && pending > 0 && sc->missing > 0) {
        natsMsg *m = NULL;
        jsMsgMetaData *meta = NULL;
        s = natsSubscription_NextMsg(&m, sub, (int64_t)sc->cfg->ack_timeout_ms);
        if (s == NATS_OK)
            s = natsMsg_GetMetaData(&meta, m);
        if (s != NATS_OK) {
            rc = scan_failed(sc, "a message", s, 0);
        } else {
            if (meta->Sequence.Stream <= to)
                message_seen(sc, m);
            if (sc->chunk_first_ns == 0)
                sc->chunk_first_ns = meta->Timestamp;
            pending = meta->Sequence.Stream < to ? meta->NumPending : 0;
        }
        jsMsgMetaData_Destroy(meta);
        natsMsg_Destroy(m);
    }
    natsSubscription_Unsubscribe(sub);
    natsSubscription_Destroy(sub);
    return rc;
}

/* Scan one filter from the stream's end back (the header comment). */
static int scan_filter(scan *sc, const char *filter, uint64_t first, uint64_t last)
{
    uint64_t to = last, chunk = SCAN_CHUNK_SEQS_FIRST, scanned = 0;
    while (sc->missing > 0 && to >= first && to > 0) {
        uint64_t from = to - first + 1 > chunk ? to - chunk + 1 : first;
        sc->chunk_first_ns = 0;
        int rc = scan_chunk(sc, filter, from, to);
        if (rc != 0)
            return rc;
        scanned += to - from + 1;
        if (from == first || sc->older >= sc->older_enough ||
            (sc->chunk_first_ns != 0 && sc->chunk_first_ns < sc->oldest_ns))
            return 0;
        if (scanned >= RELAY_SCAN_SEQS_MAX) {
            fprintf(stderr, "tally-relay: nats: stream %s: %zu redelivered events not found in "
                            "its last %" PRIu64 " messages; the scan stops there (the "
                            "duplicate window is the only guard beyond)\n",
                    sc->cfg->stream, sc->missing, scanned);
            return 0;
        }
        to = from - 1;
        chunk *= 4;
    }
    return 0;
}

/* The filters to read: the relay's subjects as one filter when one of
 * the stream's subjects holds it, else each of the stream's subjects. */
static size_t filters_of(const relay_nats *cfg, const jsStreamConfig *sc_config,
                         char filters[][RELAY_SUBJECT_BYTES_MAX + 1], size_t max)
{
    char own[RELAY_SUBJECT_BYTES_MAX + 1];
    if (relay_subject_filter(cfg->subject, own, sizeof(own)))
        for (int i = 0; i < sc_config->SubjectsLen; i++)
            if (relay_subject_within(own, sc_config->Subjects[i])) {
                snprintf(filters[0], sizeof(filters[0]), "%s", own);
                return 1;
            }
    size_t n = 0;
    for (int i = 0; i < sc_config->SubjectsLen && n < max; i++)
        if ((size_t)snprintf(filters[n], sizeof(filters[n]), "%s", sc_config->Subjects[i]) <
            sizeof(filters[n]))
            n++;
    return n;
}

int relay_stream_scan(jsCtx *js, const relay_nats *cfg, relay_scan_want *wants, size_t count,
                      char *why, size_t why_size)
{
    scan sc = {.js = js, .cfg = cfg, .wants = wants, .count = count, .missing = count,
               .seq_min = UINT64_MAX, .oldest_ns = INT64_MAX, .why = why, .why_size = why_size};
    uint32_t in_flight_max = cfg->sub.options.max_ack_pending;
    sc.older_enough = in_flight_max ? in_flight_max : TALLY_SUB_MAX_ACK_PENDING_DEFAULT;
    if (count == 0)
        return 0;
    sc.ids = calloc(count, sizeof(*sc.ids));
    if (sc.ids == NULL) {
        snprintf(why, why_size, "reading stream %s back: out of memory", cfg->stream);
        return 1;
    }
    for (size_t i = 0; i < count; i++) {
        wants[i].present = false;
        tally_uuid_format(&wants[i].event->id, sc.ids[i].id);
        sc.ids[i].index = i;
        const tally_event *e = wants[i].event;
        sc.seq_min = e->seq < sc.seq_min ? e->seq : sc.seq_min;
        int64_t ns = (e->time_ms - RELAY_SCAN_SKEW_MS) * 1000000;
        sc.oldest_ns = ns < sc.oldest_ns ? ns : sc.oldest_ns;
    }
    qsort(sc.ids, count, sizeof(*sc.ids), id_cmp);
    jsStreamInfo *si = NULL;
    jsErrCode jerr = 0;
    natsStatus s = js_GetStreamInfo(&si, js, cfg->stream, NULL, &jerr);
    int rc = s == NATS_OK ? 0 : scan_failed(&sc, "its info", s, jerr);
    static char filters[RELAY_STREAM_SUBJECTS_MAX][RELAY_SUBJECT_BYTES_MAX + 1]; /* one sink */
    size_t n = rc == 0 && si->State.Msgs > 0
                   ? filters_of(cfg, si->Config, filters, RELAY_STREAM_SUBJECTS_MAX)
                   : 0;
    for (size_t i = 0; i < n && rc == 0 && sc.missing > 0; i++)
        rc = scan_filter(&sc, filters[i], si->State.FirstSeq, si->State.LastSeq);
    jsStreamInfo_Destroy(si);
    free(sc.ids);
    return rc;
}
