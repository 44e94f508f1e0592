/*
 * stream.c — cluster mode's command stream on NATS JetStream (stream.h):
 * the connection, the stream created or checked against docs/CLUSTER.md's
 * table, a publish that returns the stream sequence, and the in-order
 * stream's bounds; the reader is quorum.c's.
 *
 * cnats's statuses and JetStream's error codes are translated here into
 * tally's (stream.h, "Errors"); nothing of cnats leaks to the caller.
 */
#include "config.h"

#include "net/cluster/stream.h"

#include "net/cluster/quorum.h"

#include "common/clock.h"
#include "common/error.h"

#include <assert.h>
#include <inttypes.h>
#include <nats/nats.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NS_PER_MS INT64_C(1000000)
/* The connect timeout (the pause between reconnects: quorum.h). */
#define CONNECT_TIMEOUT_MS 2000
/* A server that stops answering with its connection open (a stopped or
 * hung process, a partition) is given up after PINGS_OUT_MAX pings of
 * PING_INTERVAL_MS go unanswered, and cnats moves to another server:
 * with cnats' defaults (2 min, 2) a node's publishes and reads would wait
 * minutes on it (tests/cluster/check_cluster_faults: SIGSTOP of a
 * nats-server). */
#define PING_INTERVAL_MS 2000
#define PINGS_OUT_MAX 2

struct cluster_stream {
    char name[TALLY_CLUSTER_STREAM_NAME_BYTES_MAX + 1];
    cluster_stream_config cfg; /* with the defaults filled in; urls not kept */
    natsConnection *nc;
    jsCtx *js;
    _Atomic int64_t replicas; /* the stream's, as created or found, then as its info says */
};


static void say(char *why, size_t why_size, const char *format, ...)
    __attribute__((format(printf, 3, 4)));

static void say(char *why, size_t why_size, const char *format, ...)
{
    if (why == NULL || why_size == 0)
        return;
    va_list ap;
    va_start(ap, format);
    vsnprintf(why, why_size, format, ap);
    va_end(ap);
}

int cluster_stream_code_of(natsStatus s, jsErrCode jerr)
{
    if (s == NATS_OK)
        return TALLY_ok;
    /* no meta or stream leader, or too few servers up for the replicas */
    if (jerr == JSClusterNotAvailErr || jerr == JSClusterNoPeersErr ||
        jerr == JSInsufficientResourcesErr)
        return TALLY_unreachable;
    switch (s) {
    case NATS_TIMEOUT: return TALLY_timed_out;
    case NATS_NO_MEMORY: return TALLY_out_of_memory;
    case NATS_MAX_PAYLOAD: return TALLY_invalid_argument; /* over the server's max_payload */
    case NATS_CONNECTION_CLOSED: case NATS_CONNECTION_DISCONNECTED: case NATS_NO_SERVER:
    case NATS_NO_RESPONDERS: case NATS_STALE_CONNECTION: case NATS_IO_ERROR:
    case NATS_NOT_YET_CONNECTED:
        return TALLY_unreachable;
    default: return jerr != 0 ? TALLY_invalid_argument : TALLY_internal;
    }
}

static bool name_is_valid(const char *name)
{
    size_t len = strlen(name);
    if (len == 0 || len > TALLY_CLUSTER_STREAM_NAME_BYTES_MAX)
        return false;
    for (size_t i = 0; i < len; i++) {
        char c = name[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '_' || c == '-'))
            return false;
    }
    return true;
}

bool cluster_kind_is_valid(const char *kind)
{
    size_t len = strlen(kind);
    if (len == 0 || len > TALLY_CLUSTER_SUBJECT_TOKEN_BYTES_MAX)
        return false;
    for (size_t i = 0; i < len; i++)
        if (kind[i] < 'a' || kind[i] > 'z')
            return false;
    return true;
}

/* cfg with its zeros replaced by the defaults; false with why when a value
 * is out of bounds. */
static bool config_complete(const cluster_stream_config *in, cluster_stream_config *out,
                            char *why, size_t why_size)
{
    *out = *in;
    if (out->name == NULL)
        out->name = CLUSTER_STREAM_NAME_DEFAULT;
    if (out->replicas == 0)
        out->replicas = TALLY_CLUSTER_REPLICAS_DEFAULT;
    if (out->duplicate_window_ms == 0)
        out->duplicate_window_ms = TALLY_CLUSTER_DUPLICATE_WINDOW_MS_DEFAULT;
    if (out->max_msg_bytes == 0)
        out->max_msg_bytes = TALLY_CLUSTER_MSG_BYTES_MIN;
    if (out->max_age_ms == 0)
        out->max_age_ms = TALLY_CLUSTER_MAX_AGE_MS_DEFAULT;
    if (out->request_ms == 0)
        out->request_ms = TALLY_CLUSTER_REQUEST_MS_DEFAULT;
    if (out->url_count == 0 || out->url_count > TALLY_CLUSTER_URLS_MAX || out->urls == NULL)
        say(why, why_size, "cluster: 1 to %d NATS URLs", TALLY_CLUSTER_URLS_MAX);
    else if (!name_is_valid(out->name))
        say(why, why_size, "cluster stream name \"%s\": 1 to %d bytes of A-Z a-z 0-9 _ -",
            out->name, TALLY_CLUSTER_STREAM_NAME_BYTES_MAX);
    else if (out->replicas > TALLY_CLUSTER_REPLICAS_MAX)
        say(why, why_size, "cluster replicas %" PRIu32 ": at most %d", out->replicas,
            TALLY_CLUSTER_REPLICAS_MAX);
    else if (out->duplicate_window_ms < TALLY_CLUSTER_DUPLICATE_WINDOW_MS_MIN)
        say(why, why_size, "cluster duplicate window %" PRId64 " ms: at least %" PRId64 " ms",
            out->duplicate_window_ms, TALLY_CLUSTER_DUPLICATE_WINDOW_MS_MIN);
    else if (out->max_age_ms > 0 && out->max_age_ms < out->duplicate_window_ms)
        say(why, why_size, "cluster max_age %" PRId64 " ms: at least the duplicate window, %" PRId64
            " ms (nats-server refuses a shorter one)", out->max_age_ms, out->duplicate_window_ms);
    else if (out->max_msg_bytes < TALLY_CLUSTER_MSG_BYTES_MIN)
        say(why, why_size, "cluster max_msg_size %" PRId32 ": at least %d bytes",
            out->max_msg_bytes, TALLY_CLUSTER_MSG_BYTES_MIN);
    else if (out->request_ms < 0 || out->request_ms > TALLY_CLUSTER_REQUEST_MS_MAX)
        say(why, why_size, "cluster request wait %" PRId64 " ms: 1 to %d", out->request_ms,
            TALLY_CLUSTER_REQUEST_MS_MAX);
    else
        return true;
    return false;
}

/* ---- the connection ---- */

static natsStatus options_of(const cluster_stream_config *cfg, natsOptions **out)
{
    natsOptions *o = NULL;
    natsStatus s = natsOptions_Create(&o);
    if (s == NATS_OK)
        s = natsOptions_SetServers(o, (const char **)cfg->urls, (int)cfg->url_count);
    if (s == NATS_OK)
        s = natsOptions_SetMaxReconnect(o, -1); /* forever: any server may come back */
    if (s == NATS_OK)
        s = natsOptions_SetReconnectWait(o, CLUSTER_RECONNECT_WAIT_MS);
    if (s == NATS_OK)
        s = natsOptions_SetTimeout(o, CONNECT_TIMEOUT_MS);
    if (s == NATS_OK)
        s = natsOptions_SetPingInterval(o, PING_INTERVAL_MS);
    if (s == NATS_OK)
        s = natsOptions_SetMaxPingsOut(o, PINGS_OUT_MAX);
    /* No buffering while reconnecting: a publish then fails at once and the
     * caller publishes again with the same Nats-Msg-Id, in its order. */
    if (s == NATS_OK)
        s = natsOptions_SetReconnectBufSize(o, 1);
    if (s == NATS_OK)
        s = natsOptions_SetName(o, "tally-cluster");
    if (s == NATS_OK && cfg->creds_file)
        s = natsOptions_SetUserCredentialsFromFiles(o, cfg->creds_file, NULL);
    if (s == NATS_OK && cfg->user)
        s = natsOptions_SetUserInfo(o, cfg->user, cfg->password ? cfg->password : "");
    if (s == NATS_OK && cfg->tls_ca_file)
        s = natsOptions_SetSecure(o, true);
    if (s == NATS_OK && cfg->tls_ca_file)
        s = natsOptions_LoadCATrustedCertificates(o, cfg->tls_ca_file);
    if (s == NATS_OK && cfg->tls_cert_file)
        s = natsOptions_LoadCertificatesChain(o, cfg->tls_cert_file, cfg->tls_key_file);
    if (s != NATS_OK)
        natsOptions_Destroy(o);
    else
        *out = o;
    return s;
}

/* url without its user information (nats://user:password@host): a
 * password never reaches a log. */
static const char *url_shown(const char *url)
{
    const char *at = strrchr(url, '@');
    return at ? at + 1 : url;
}

static int connect_to(cluster_stream *st, char *why, size_t why_size)
{
    natsOptions *o = NULL;
    natsStatus s = options_of(&st->cfg, &o);
    if (s != NATS_OK) {
        say(why, why_size, "cluster: the NATS connection's options (credentials or TLS files): "
            "%s: %s", natsStatus_GetText(s), nats_GetLastError(NULL));
        return TALLY_invalid_argument;
    }
    s = natsConnection_Connect(&st->nc, o);
    natsOptions_Destroy(o);
    if (s != NATS_OK) {
        say(why, why_size, "cluster: cannot connect to NATS (%s: %s; first %s)",
            natsStatus_GetText(s), nats_GetLastError(NULL), url_shown(st->cfg.urls[0]));
        return cluster_stream_code_of(s, 0);
    }
    jsOptions jo;
    jsOptions_Init(&jo);
    jo.Wait = st->cfg.request_ms;
    s = natsConnection_JetStream(&st->js, st->nc, &jo);
    if (s != NATS_OK)
        say(why, why_size, "cluster: jetstream: %s", natsStatus_GetText(s));
    return cluster_stream_code_of(s, 0);
}

/* ---- the stream: docs/CLUSTER.md's table ---- */

static int stream_create(cluster_stream *st, char *why, size_t why_size)
{
    char subject[TALLY_CLUSTER_STREAM_NAME_BYTES_MAX + 3];
    snprintf(subject, sizeof(subject), "%s.>", st->name);
    const char *subjects[1] = {subject};
    jsStreamConfig sc;
    jsStreamConfig_Init(&sc);
    sc.Name = st->name;
    sc.Subjects = subjects;
    sc.SubjectsLen = 1;
    sc.Retention = js_LimitsPolicy;
    sc.Storage = js_FileStorage;
    sc.Replicas = st->cfg.replicas;
    sc.Discard = js_DiscardOld;
    sc.MaxAge = st->cfg.max_age_ms < 0 ? 0 : st->cfg.max_age_ms * NS_PER_MS;
    sc.MaxMsgSize = st->cfg.max_msg_bytes;
    sc.Duplicates = st->cfg.duplicate_window_ms * NS_PER_MS;
    sc.DenyDelete = true;
    sc.DenyPurge = true;
    sc.AllowRollup = false;
    st->replicas = sc.Replicas;
    jsStreamInfo *si = NULL;
    jsErrCode jerr = 0;
    natsStatus s = js_AddStream(&si, st->js, &sc, NULL, &jerr);
    jsStreamInfo_Destroy(si);
    if (s != NATS_OK)
        say(why, why_size, "cluster: creating stream %s: %s (%d)", st->name,
            nats_GetLastError(NULL), (int)jerr);
    return cluster_stream_code_of(s, jerr);
}

/* The first setting of have that breaks the guarantees, named in why;
 * true when there is none. */
static bool stream_is_sound(const cluster_stream *st, const jsStreamConfig *have, char *why,
                            size_t why_size)
{
    char subject[TALLY_CLUSTER_STREAM_NAME_BYTES_MAX + 3];
    snprintf(subject, sizeof(subject), "%s.>", st->name);
    const char *n = st->name;
    if (have->SubjectsLen != 1 || strcmp(have->Subjects[0], subject) != 0)
        say(why, why_size, "cluster stream %s: subjects must be exactly %s", n, subject);
    else if (have->Storage != js_FileStorage)
        say(why, why_size, "cluster stream %s: storage is memory; it must be file", n);
    else if (have->Replicas < (int64_t)st->cfg.replicas)
        say(why, why_size, "cluster stream %s: replicas is %" PRId64 "; it must be at least %" PRIu32,
            n, have->Replicas, st->cfg.replicas);
    else if (have->Retention != js_LimitsPolicy)
        say(why, why_size, "cluster stream %s: retention must be limits", n);
    else if (have->Discard != js_DiscardOld)
        say(why, why_size, "cluster stream %s: discard must be old", n);
    else if (!have->DenyDelete)
        say(why, why_size, "cluster stream %s: deny_delete must be true", n);
    else if (have->AllowRollup) /* nats-server takes it only with purges allowed */
        say(why, why_size, "cluster stream %s: allow_rollup_hdrs must be false", n);
    else if (!have->DenyPurge)
        say(why, why_size, "cluster stream %s: deny_purge must be true", n);
    else if (have->Duplicates < st->cfg.duplicate_window_ms * NS_PER_MS)
        say(why, why_size,
            "cluster stream %s: duplicate window is %" PRId64 " ms; it must be at least %" PRId64
            " ms", n, have->Duplicates / NS_PER_MS, st->cfg.duplicate_window_ms);
    else if (have->MaxMsgSize >= 0 && have->MaxMsgSize < st->cfg.max_msg_bytes)
        say(why, why_size, "cluster stream %s: max_msg_size is %" PRId32 "; it must be at least %" PRId32,
            n, have->MaxMsgSize, st->cfg.max_msg_bytes);
    else if (have->Sealed)
        say(why, why_size, "cluster stream %s: sealed; it must take appends", n);
    else
        return true;
    return false;
}

/* Create the stream when it is missing, else check it. */
static int stream_ensure(cluster_stream *st, char *why, size_t why_size)
{
    jsStreamInfo *si = NULL;
    jsErrCode jerr = 0;
    natsStatus s = js_GetStreamInfo(&si, st->js, st->name, NULL, &jerr);
    if (s == NATS_NOT_FOUND || jerr == JSStreamNotFoundErr)
        return stream_create(st, why, why_size);
    if (s != NATS_OK) {
        say(why, why_size, "cluster: stream %s: %s (%d)", st->name, nats_GetLastError(NULL),
            (int)jerr);
        int rc = cluster_stream_code_of(s, jerr);
        return rc == TALLY_invalid_argument ? TALLY_internal : rc;
    }
    int rc = stream_is_sound(st, si->Config, why, why_size) ? TALLY_ok : TALLY_invalid_argument;
    st->replicas = si->Config->Replicas;
    jsStreamInfo_Destroy(si);
    return rc;
}

int cluster_stream_open(cluster_stream **out, const cluster_stream_config *cfg, char *why,
                        size_t why_size)
{
    assert(out != NULL && cfg != NULL);
    *out = NULL;
    say(why, why_size, "ok");
    cluster_stream_config full;
    if (!config_complete(cfg, &full, why, why_size))
        return TALLY_invalid_argument;
    cluster_stream *st = calloc(1, sizeof(*st));
    if (st == NULL)
        return TALLY_out_of_memory;
    snprintf(st->name, sizeof(st->name), "%s", full.name);
    st->cfg = full;
    st->cfg.name = st->name;
    int rc = connect_to(st, why, why_size);
    if (rc == TALLY_ok)
        rc = stream_ensure(st, why, why_size);
    st->cfg.urls = NULL; /* the caller's; not kept past open, nor are the secrets */
    st->cfg.creds_file = st->cfg.user = st->cfg.password = NULL;
    st->cfg.tls_ca_file = st->cfg.tls_cert_file = st->cfg.tls_key_file = NULL;
    if (rc != TALLY_ok) {
        cluster_stream_close(st);
        return rc;
    }
    *out = st;
    return TALLY_ok;
}

void cluster_stream_close(cluster_stream *s)
{
    if (s == NULL)
        return;
    jsCtx_Destroy(s->js);
    if (s->nc != NULL)
        natsConnection_Close(s->nc);
    natsConnection_Destroy(s->nc);
    free(s);
}

void cluster_stream_interrupt(cluster_stream *s)
{
    if (s != NULL && s->nc != NULL)
        natsConnection_Close(s->nc);
}

bool cluster_stream_interrupted(cluster_stream *s)
{
    return natsConnection_IsClosed(s->nc);
}

const char *cluster_stream_name(const cluster_stream *s)
{
    return s->name;
}

jsCtx *cluster_stream_js_waiting(cluster_stream *s, int64_t wait_ms)
{
    jsOptions o;
    jsCtx *js = NULL;
    if (jsOptions_Init(&o) != NATS_OK)
        return NULL;
    o.Wait = wait_ms;
    if (natsConnection_JetStream(&js, s->nc, &o) != NATS_OK)
        return NULL;
    return js;
}

int64_t cluster_stream_replicas(const cluster_stream *s, uint32_t *required)
{
    if (required != NULL)
        *required = s->cfg.replicas;
    return atomic_load(&s->replicas);
}

size_t cluster_stream_quorum(const cluster_stream *s)
{
    int64_t have = atomic_load(&s->replicas);
    int64_t r = have < 1 ? 1 : have > TALLY_CLUSTER_REPLICAS_MAX ? TALLY_CLUSTER_REPLICAS_MAX
                                                                 : have;
    return (size_t)(r / 2 + 1);
}

const char *cluster_msg_id_of(natsMsg *msg)
{
    const char *id = NULL;
    if (natsMsgHeader_Get(msg, "Nats-Msg-Id", &id) != NATS_OK || id == NULL)
        id = "";
    return id;
}

/* ---- publish ---- */

int cluster_stream_publish(cluster_stream *s, const char *kind, const char *msg_id,
                           const void *data, size_t len, uint64_t *seq, bool *duplicate,
                           char *why, size_t why_size)
{
    assert(s != NULL && kind != NULL && msg_id != NULL && seq != NULL);
    if (!cluster_kind_is_valid(kind) || msg_id[0] == '\0' ||
        strlen(msg_id) > TALLY_CLUSTER_MSG_ID_BYTES_MAX || len > (size_t)s->cfg.max_msg_bytes) {
        say(why, why_size, "cluster publish: a kind of a-z, an id of 1 to %d bytes, at most %" PRId32
            " bytes", TALLY_CLUSTER_MSG_ID_BYTES_MAX, s->cfg.max_msg_bytes);
        return TALLY_invalid_argument;
    }
    char subject[TALLY_CLUSTER_STREAM_NAME_BYTES_MAX + TALLY_CLUSTER_SUBJECT_TOKEN_BYTES_MAX + 2];
    snprintf(subject, sizeof(subject), "%s.%s", s->name, kind);
    natsMsg *m = NULL;
    natsStatus st = natsMsg_Create(&m, subject, NULL, data, (int)len);
    if (st == NATS_OK)
        st = natsMsgHeader_Set(m, "Nats-Msg-Id", msg_id);
    jsPubOptions po;
    jsPubOptions_Init(&po);
    po.MaxWait = s->cfg.request_ms;
    jsPubAck *pa = NULL;
    jsErrCode jerr = 0;
    if (st == NATS_OK)
        st = js_PublishMsg(&pa, s->js, m, &po, &jerr);
    natsMsg_Destroy(m);
    if (st != NATS_OK) {
        say(why, why_size, "cluster publish %s: %s (%d)", msg_id, natsStatus_GetText(st),
            (int)jerr);
        jsPubAck_Destroy(pa);
        return cluster_stream_code_of(st, jerr);
    }
    *seq = pa->Sequence;
    if (duplicate != NULL)
        *duplicate = pa->Duplicate;
    jsPubAck_Destroy(pa);
    return TALLY_ok;
}

int cluster_stream_bounds(cluster_stream *s, uint64_t *first, uint64_t *last)
{
    jsStreamInfo *si = NULL;
    jsErrCode jerr = 0;
    natsStatus st = js_GetStreamInfo(&si, s->js, s->name, NULL, &jerr);
    /* With no leader (an election), a member answers with its own store,
     * which may lag the stream: not the stream's bounds. */
    bool leaderless = st == NATS_OK && si->Cluster != NULL &&
                      (si->Cluster->Leader == NULL || si->Cluster->Leader[0] == '\0');
    if (st == NATS_OK && !leaderless) {
        *first = si->State.FirstSeq;
        *last = si->State.LastSeq;
        if (si->Config != NULL && si->Config->Replicas >= 1) /* changed at run time, maybe */
            atomic_store(&s->replicas, si->Config->Replicas);
    }
    jsStreamInfo_Destroy(si);
    return leaderless ? TALLY_unreachable : cluster_stream_code_of(st, jerr);
}

int cluster_stream_get(cluster_stream *s, uint64_t seq, char *msg_id, size_t id_size,
                       uint8_t hash[SHA256_BYTES])
{
    assert(s != NULL && seq >= 1 && msg_id != NULL && id_size > 0);
    /* a reader from seq: its first message is what a majority holds there
     * (no leader's word on the stream's end: a stale leader may be short) */
    cluster_reader *r = NULL;
    int rc = cluster_reader_open(&r, s, seq);
    cluster_message m;
    if (rc == TALLY_ok)
        rc = cluster_reader_next(r, s->cfg.request_ms, &m);
    if (rc == TALLY_ok) {
        snprintf(msg_id, id_size, "%s", m.msg_id);
        sha256_digest(m.data, m.len, hash);
    }
    cluster_reader_close(r);
    return rc;
}
