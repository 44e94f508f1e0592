/*
 * webhook.c — HTTP endpoints of tally-relay as outbound webhooks
 * (docs/RELAY.md): each endpoint is a durable subscriber of its own,
 * relay:<endpoint>, so a slow or dead endpoint delays no other. Each event
 * whose type the endpoint wants is POSTed as the JSON document with the
 * Standard Webhooks headers (webhook-id = the event id, webhook-timestamp,
 * webhook-signature = v1,<base64 HMAC-SHA256 over id.timestamp.body with
 * the endpoint's secret>). A 2xx answer acknowledges; anything else, or
 * no answer within the timeouts, retries after the subscriber's backoff,
 * and tally parks the event in relay:<endpoint>'s dead-letter queue after
 * max_deliver deliveries. The delay before each retry is the endpoint's
 * retry schedule (docs/RELAY.md, "Retry schedule and disabled endpoints"),
 * given with each nak; an endpoint failing without a 2xx for
 * disable_after is disabled in tallyd (endpoint_disable: an
 * endpoint.disabled event) and this sink waits, delivering nothing, until
 * tallyd says it is enabled again. Every attempt (its time, status,
 * latency, error and the answer's first 256 bytes) goes to tallyd's
 * attempt log in batches (endpoint_attempts_record), after each run. libcurl with connect and total
 * timeouts, redirects off, TLS verification on.
 */
#include "config.h"

#include "relay/relay.h"
#include "common/duration.h"

#include <curl/curl.h>
#include <inttypes.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define WEBHOOK_SIGNATURE_BYTES 64 /* "v1," + base64 of 32 bytes + NUL */
#define WEBHOOK_HEADER_BYTES 160 /* webhook-signature: with two signatures */

typedef struct webhook_sink {
    const relay_endpoint *cfg;
    relay_sink_context *ctx;
    CURL *curl;
    tally_subscriber *s;      /* the handle of the run */
    int64_t failing_since_ms; /* the first failure since the last 2xx; 0: none */
    /* the answer's first bytes (printable ASCII, the rest as '.') */
    char response[TALLY_CLIENT_ATTEMPT_TEXT_BYTES_MAX + 1];
    size_t response_len;
    /* attempts not yet in tallyd's attempt log */
    tally_endpoint_attempt attempts[RELAY_ATTEMPTS_BATCH];
    size_t attempt_count;
    bool attempt_log_failed; /* said once on stderr */
    /* tallyd's state of the endpoint, as last read: its secrets (rotated
     * by endpoint_rotate_secret) and version; when it was last read */
    tally_endpoint_secrets secrets;
    uint64_t state_version;
    int64_t state_read_ms;
    bool secrets_failed; /* said once on stderr */
} webhook_sink;

bool relay_webhook_signature(const uint8_t *secret, size_t secret_len, const char *id,
                             int64_t timestamp_s, const char *body, size_t body_len, char *out,
                             size_t size)
{
    char prefix[96];
    int n = snprintf(prefix, sizeof(prefix), "%s.%" PRId64 ".", id, timestamp_s);
    if (n < 0 || (size_t)n >= sizeof(prefix) || size < WEBHOOK_SIGNATURE_BYTES)
        return false;
    uint8_t mac[32];
    unsigned mac_len = 0;
    char *signed_text = malloc((size_t)n + body_len); /* id.timestamp.body */
    if (signed_text == NULL)
        return false;
    memcpy(signed_text, prefix, (size_t)n);
    memcpy(signed_text + n, body, body_len);
    bool ok = HMAC(EVP_sha256(), secret, (int)secret_len, (const uint8_t *)signed_text,
                   (size_t)n + body_len, mac, &mac_len) != NULL &&
              mac_len == sizeof(mac);
    free(signed_text);
    if (!ok)
        return false;
    memcpy(out, "v1,", 3);
    EVP_EncodeBlock((unsigned char *)out + 3, mac, (int)sizeof(mac));
    return true;
}

/* Keep the first bytes of the answer's body for the attempt log. */
static size_t keep_body(char *data, size_t size, size_t count, void *arg)
{
    webhook_sink *w = arg;
    size_t n = size * count;
    for (size_t i = 0; i < n && w->response_len < TALLY_CLIENT_ATTEMPT_TEXT_BYTES_MAX; i++) {
        unsigned char ch = (unsigned char)data[i];
        w->response[w->response_len++] = ch >= 0x20 && ch < 0x7f ? (char)ch : '.';
    }
    w->response[w->response_len] = '\0';
    return n;
}

/* Send the attempts kept to tallyd's attempt log; on a failure they are
 * dropped (the log is bounded, delivery goes on) and that is said once. */
static void attempts_flush(webhook_sink *w)
{
    if (w->attempt_count == 0)
        return;
    int rc = tally_endpoint_attempts_record(w->ctx->client, w->cfg->name, w->attempts,
                                            w->attempt_count,
                                            (uint32_t)(w->cfg->attempt_retention_ms / 1000));
    if (rc != TALLY_ok && !w->attempt_log_failed)
        fprintf(stderr, "tally-relay: endpoint %s: the attempt log: %s; %zu attempts not "
                        "recorded (said once)\n",
                w->cfg->name, tally_strerror(rc), w->attempt_count);
    w->attempt_log_failed = w->attempt_log_failed || rc != TALLY_ok;
    w->attempt_count = 0;
}

/* Keep one attempt for the attempt log. */
static void attempt_keep(webhook_sink *w, const tally_delivery *d, int64_t time_ms, long status,
                         uint32_t latency_ms, const char *error)
{
    if (w->attempt_count == RELAY_ATTEMPTS_BATCH)
        attempts_flush(w);
    tally_endpoint_attempt *a = &w->attempts[w->attempt_count++];
    memset(a, 0, sizeof(*a));
    a->seq = d->event.seq;
    a->attempt = d->attempt;
    a->time_ms = time_ms;
    a->status = status > 0 && status <= 999 ? (uint32_t)status : 0;
    a->latency_ms = latency_ms;
    snprintf(a->error, sizeof(a->error), "%s", error);
    snprintf(a->response, sizeof(a->response), "%s", w->response);
}

/* The headers of one delivery; NULL when out of memory. */
static struct curl_slist *headers_of(const webhook_sink *w, const char *id, const char *body,
                                     size_t len)
{
    int64_t now_s = (int64_t)time(NULL);
    char signature[WEBHOOK_SIGNATURE_BYTES], previous[WEBHOOK_SIGNATURE_BYTES];
    char line[WEBHOOK_HEADER_BYTES];
    /* tallyd's secret, else the config file's; during a rotation's overlap
     * the one before it too (tallyd's previous, else the file's) */
    const tally_endpoint_secrets *s = &w->secrets;
    const uint8_t *key = s->secret_len ? s->secret : w->cfg->secret;
    size_t key_len = s->secret_len ? s->secret_len : w->cfg->secret_len;
    const uint8_t *old = s->previous_len ? s->previous : w->cfg->secret;
    size_t old_len = s->previous_len ? s->previous_len : w->cfg->secret_len;
    bool overlap = s->previous_until_ms > now_s * 1000 &&
                   !(old_len == key_len && memcmp(old, key, key_len) == 0);
    if (!relay_webhook_signature(key, key_len, id, now_s, body, len, signature,
                                 sizeof(signature)) ||
        (overlap && !relay_webhook_signature(old, old_len, id, now_s, body, len, previous,
                                             sizeof(previous))))
        return NULL;
    struct curl_slist *h = curl_slist_append(NULL, "content-type: application/json");
    snprintf(line, sizeof(line), "webhook-id: %s", id);
    h = h ? curl_slist_append(h, line) : NULL;
    snprintf(line, sizeof(line), "webhook-timestamp: %" PRId64, now_s);
    h = h ? curl_slist_append(h, line) : NULL;
    snprintf(line, sizeof(line), "webhook-signature: %s%s%s", signature, overlap ? " " : "",
             overlap ? previous : "");
    h = h ? curl_slist_append(h, line) : NULL;
    h = h ? curl_slist_append(h, "expect:") : NULL; /* no 100-continue round trip */
    return h;
}

/* The reason label of a request that failed with rc. */
static relay_failure failure_of(CURLcode rc)
{
    switch (rc) {
    case CURLE_OPERATION_TIMEDOUT: return RELAY_FAILURE_TIMEOUT;
    case CURLE_COULDNT_RESOLVE_HOST: case CURLE_COULDNT_CONNECT: case CURLE_SEND_ERROR:
    case CURLE_RECV_ERROR: case CURLE_GOT_NOTHING:
        return RELAY_FAILURE_CONNECTION;
    case CURLE_SSL_CONNECT_ERROR: case CURLE_PEER_FAILED_VERIFICATION:
    case CURLE_SSL_CERTPROBLEM: case CURLE_SSL_CACERT_BADFILE:
        return RELAY_FAILURE_TLS;
    default: return RELAY_FAILURE_OTHER;
    }
}

static int64_t wall_ms(void);

/* POST body; 2xx is true, else why says what came back (and the failure
 * is counted). The attempt is kept for the attempt log. */
static bool post(webhook_sink *w, const tally_delivery *d, const char *id, const char *body,
                 size_t len, char *why, size_t why_size)
{
    struct curl_slist *headers = headers_of(w, id, body, len);
    if (headers == NULL) {
        relay_count(&w->ctx->metrics.failures[RELAY_FAILURE_OTHER], 1);
        snprintf(why, why_size, "out of memory");
        return false;
    }
    CURL *c = w->curl;
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, headers);
    curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
    curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)len);
    relay_sink_metrics *m = &w->ctx->metrics;
    atomic_store_explicit(&m->in_flight, 1, memory_order_relaxed);
    w->response_len = 0;
    w->response[0] = '\0';
    int64_t sent_ms = wall_ms();
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    CURLcode rc = curl_easy_perform(c);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    atomic_store_explicit(&m->in_flight, 0, memory_order_relaxed);
    long status = 0;
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
    int64_t latency_ms = (t1.tv_sec - t0.tv_sec) * 1000 + (t1.tv_nsec - t0.tv_nsec) / 1000000;
    curl_slist_free_all(headers);
    bool ok = rc == CURLE_OK && status >= 200 && status <= 299;
    if (rc != CURLE_OK)
        snprintf(why, why_size, "%s: %s", w->cfg->name, curl_easy_strerror(rc));
    else if (!ok)
        snprintf(why, why_size, "%s: HTTP %ld", w->cfg->name, status);
    if (ok)
        relay_count(&m->delivered, 1);
    else
        relay_count(&m->failures[rc != CURLE_OK ? failure_of(rc) : RELAY_FAILURE_STATUS], 1);
    attempt_keep(w, d, sent_ms, rc == CURLE_OK ? status : 0,
                 latency_ms < 0 ? 0 : (uint32_t)latency_ms, ok ? "" : why);
    return ok;
}

static int64_t wall_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* After a failed delivery: disable the endpoint in tallyd once it has
 * failed without a 2xx for disable_after, and end the run (the event
 * waits, with the others, until the endpoint is enabled). The key names
 * the failing streak, so a retried request is applied once. */
static void disable_when_due(webhook_sink *w, const char *error)
{
    int64_t now_ms = wall_ms();
    if (w->failing_since_ms == 0)
        w->failing_since_ms = now_ms;
    if (w->cfg->disable_after_ms == 0 ||
        (uint64_t)(now_ms - w->failing_since_ms) < w->cfg->disable_after_ms)
        return;
    char key[128], reason[TALLY_CLIENT_ENDPOINT_REASON_BYTES_MAX + 1], since[32];
    snprintf(key, sizeof(key), "relay-disable:%s:%" PRId64, w->cfg->name, w->failing_since_ms);
    duration_text((uint64_t)(now_ms - w->failing_since_ms) / 1000 * 1000, since,
                        sizeof(since));
    snprintf(reason, sizeof(reason), "failing for %s (disable_after): %s", since, error);
    tally_result r;
    int rc = tally_endpoint_disable(w->ctx->client, key, w->cfg->name, reason, &r);
    if (rc != TALLY_ok) {
        fprintf(stderr, "tally-relay: endpoint %s: cannot disable it: %s; tried again after the "
                        "next failure\n", w->cfg->name, tally_strerror(rc));
        return;
    }
    fprintf(stderr, "tally-relay: endpoint %s disabled (seq %" PRIu64 "): %s; nothing is "
                    "delivered to it until tally endpoint enable %s\n",
            w->cfg->name, r.seq, reason, w->cfg->name);
    atomic_store(&w->ctx->metrics.disabled, true);
    tally_subscriber_stop(w->s);
}

static bool state_check(webhook_sink *w);

static tally_verdict on_event(const tally_delivery *d, tally_answer *answer, void *arg)
{
    webhook_sink *w = arg;
    const tally_event *e = &d->event;
    if (!relay_endpoint_wants(w->cfg, e->type)) {
        relay_count(&w->ctx->metrics.filtered, 1);
        return TALLY_DONE; /* filtered out: nothing to deliver */
    }
    if (state_check(w)) { /* disabled, or recovering: this event waits with the others */
        snprintf(answer->error, sizeof(answer->error), "%s: disabled or recovering",
                 w->cfg->name);
        answer->delay_set = true;
        return TALLY_RETRY;
    }
    if (w->secrets.secret_len == 0 && w->cfg->secret_len == 0) { /* tallyd's not read yet */
        snprintf(answer->error, sizeof(answer->error), "%s: no signing secret known yet",
                 w->cfg->name);
        answer->delay_set = true;
        answer->delay_ms = RELAY_DISABLED_POLL_MS;
        w->state_read_ms = 0; /* read tallyd's state and secrets at the next event */
        return TALLY_RETRY;
    }
    char id[37], *body = NULL;
    size_t len = 0;
    int rc = relay_event_doc(e, &body, &len);
    if (rc != TALLY_ok) {
        relay_count(&w->ctx->metrics.failures[RELAY_FAILURE_DOCUMENT], 1);
        snprintf(answer->error, sizeof(answer->error), "the event document: %s",
                 tally_strerror(rc));
        relay_say_parked(w->ctx, d, rc != TALLY_out_of_memory, answer->error);
        return rc == TALLY_out_of_memory ? TALLY_RETRY : TALLY_PARK;
    }
    tally_uuid_format(&e->id, id);
    bool ok = post(w, d, id, body, len, answer->error, sizeof(answer->error));
    free(body);
    if (ok) {
        w->failing_since_ms = 0;
        return TALLY_DONE;
    }
    relay_say_parked(w->ctx, d, false, answer->error);
    /* the next attempt after the schedule's delay, else the subscriber's backoff */
    answer->delay_set = relay_endpoint_retry_delay(w->cfg, d->attempt, &answer->delay_ms);
    if (!atomic_load(&w->ctx->metrics.disabled))
        disable_when_due(w, answer->error);
    return TALLY_RETRY;
}

static bool curl_setup(webhook_sink *w)
{
    CURL *c = w->curl = curl_easy_init();
    const relay_endpoint *e = w->cfg;
    return c && curl_easy_setopt(c, CURLOPT_URL, e->url) == CURLE_OK &&
           curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https") == CURLE_OK &&
           curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, 0L) == CURLE_OK &&
           curl_easy_setopt(c, CURLOPT_SSL_VERIFYPEER, 1L) == CURLE_OK &&
           curl_easy_setopt(c, CURLOPT_SSL_VERIFYHOST, 2L) == CURLE_OK &&
           curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L) == CURLE_OK &&
           curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, (long)e->connect_timeout_ms) ==
               CURLE_OK &&
           curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, (long)e->timeout_ms) == CURLE_OK &&
           curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, keep_body) == CURLE_OK &&
           curl_easy_setopt(c, CURLOPT_WRITEDATA, w) == CURLE_OK &&
           curl_easy_setopt(c, CURLOPT_USERAGENT, "tally-relay") == CURLE_OK;
}

/* Read the endpoint's secrets again when its version moved past the one
 * read (a rotation, or any other change). A failure keeps the ones read
 * before, and is said once. */
static void secrets_refresh(webhook_sink *w, uint64_t version)
{
    if (version == w->state_version)
        return;
    tally_endpoint_secrets s;
    int rc = tally_endpoint_secrets_get(w->ctx->client, w->cfg->name, &s);
    if (rc == TALLY_ok) {
        w->secrets = s;
        w->state_version = version;
    } else if (!w->secrets_failed) {
        fprintf(stderr, "tally-relay: endpoint %s: its secrets in tallyd: %s; signing with the "
                        "ones known (said once)\n",
                w->cfg->name, tally_strerror(rc));
        w->secrets_failed = true;
    }
    memset(&s, 0, sizeof(s));
}

/* While a run goes on, tallyd's state at most every RELAY_DISABLED_POLL_MS:
 * true when the endpoint was disabled meanwhile (the run is stopped). */
static bool state_check(webhook_sink *w)
{
    int64_t now_ms = wall_ms();
    if (now_ms - w->state_read_ms < RELAY_DISABLED_POLL_MS)
        return false;
    w->state_read_ms = now_ms;
    tally_endpoint_info info;
    if (tally_endpoint_get(w->ctx->client, w->cfg->name, &info) != TALLY_ok)
        return false;
    secrets_refresh(w, info.version);
    if (!info.disabled && info.recover_since_ms == 0)
        return false;
    tally_subscriber_stop(w->s); /* disabled, or a recover to run first */
    return true;
}

/* POST one event of a recover until a 2xx (or a stop), pausing 1 s
 * doubling to 30 s between failed attempts. */
static void recover_one(webhook_sink *w, const tally_event *e)
{
    char id[37], *body = NULL, why[TALLY_CLIENT_SUB_ERROR_BYTES_MAX + 1];
    size_t len = 0;
    if (relay_event_doc(e, &body, &len) != TALLY_ok) {
        fprintf(stderr, "tally-relay: endpoint %s: recover: seq %" PRIu64 ": no document; "
                        "skipped\n", w->cfg->name, e->seq);
        return;
    }
    tally_uuid_format(&e->id, id);
    tally_delivery d = {.event = *e};
    uint32_t pause_ms = RELAY_RETRY_MS_MIN * 10;
    while (!atomic_load(w->ctx->stop)) {
        d.attempt++;
        if (post(w, &d, id, body, len, why, sizeof(why)))
            break;
        relay_pause(w->ctx->stop, pause_ms);
        pause_ms = pause_ms * 2 < RELAY_RETRY_MS_MAX ? pause_ms * 2 : RELAY_RETRY_MS_MAX;
    }
    free(body);
}

/* The first seq committed at or after since_ms, by halving [first, head]
 * with reads of one event; head + 1 when none is. 0 on a failed read. */
static uint64_t seq_at(tally_client *c, int64_t since_ms, uint64_t *head)
{
    tally_event ev;
    size_t n = 0;
    if (tally_log_read(c, 1, 1, 0, &ev, 1, &n, head) != TALLY_ok)
        return 0;
    uint64_t lo = n ? ev.seq : *head + 1, hi = *head + 1;
    tally_events_release(&ev, n);
    while (lo < hi) {
        uint64_t mid = lo + (hi - lo) / 2, h;
        if (tally_log_read(c, mid, 1, 0, &ev, 1, &n, &h) != TALLY_ok)
            return 0;
        bool before = n == 1 && ev.time_ms < since_ms;
        uint64_t at = n ? ev.seq : hi;
        tally_events_release(&ev, n);
        if (before)
            lo = at + 1;
        else
            hi = mid;
    }
    return lo;
}

/* A recover asked in tallyd (endpoint_recover): every event committed
 * since info->recover_since_ms up to the head now, of the types the
 * endpoint wants, POSTed again (until each is taken), outside the
 * endpoint's subscriber; then endpoint_recovered. A relay stopped before
 * the end does it again from the start when it runs next: the receiver
 * drops repeats by webhook-id. */
static void recover_run(webhook_sink *w, const tally_endpoint_info *info)
{
    tally_client *c = w->ctx->client;
    uint64_t head = 0, sent = 0, from = seq_at(c, info->recover_since_ms, &head);
    if (from == 0)
        return; /* tallyd away: asked again before the next run */
    fprintf(stderr, "tally-relay: endpoint %s: recover from seq %" PRIu64 " through %" PRIu64
                    " (asked at version %" PRIu64 ")\n",
            w->cfg->name, from, head, info->recover_version);
    tally_event page[RELAY_RECOVER_PAGE_EVENTS];
    while (from <= head && !atomic_load(w->ctx->stop)) {
        size_t n = 0;
        uint64_t h;
        int rc = tally_log_read(c, from, RELAY_RECOVER_PAGE_EVENTS, 0, page,
                                RELAY_RECOVER_PAGE_EVENTS, &n, &h);
        if (rc != TALLY_ok || n == 0) {
            relay_pause(w->ctx->stop, RELAY_RETRY_MS_MIN * 10);
            continue;
        }
        for (size_t i = 0; i < n && page[i].seq <= head && !atomic_load(w->ctx->stop); i++)
            if (relay_endpoint_wants(w->cfg, page[i].type)) {
                recover_one(w, &page[i]);
                sent++;
            }
        from = page[n - 1].seq + 1;
        tally_events_release(page, n);
    }
    attempts_flush(w);
    if (atomic_load(w->ctx->stop))
        return;
    char key[128];
    snprintf(key, sizeof(key), "relay-recovered:%s:%" PRIu64, w->cfg->name,
             info->recover_version);
    tally_result r;
    int rc = tally_endpoint_recovered(c, key, w->cfg->name, info->recover_version, &r);
    fprintf(stderr, "tally-relay: endpoint %s: recovered, %" PRIu64 " events sent again%s%s\n",
            w->cfg->name, sent, rc == TALLY_ok ? "" : "; tallyd: ",
            rc == TALLY_ok ? "" : tally_strerror(rc));
}

/* Before each run: while tallyd says the endpoint is disabled, deliver
 * nothing and ask again every RELAY_DISABLED_POLL_MS. false once stopped.
 * A tallyd that does not answer: run (the run waits for it itself). */
static bool wait_while_disabled(webhook_sink *w)
{
    bool said = false;
    while (!atomic_load(w->ctx->stop)) {
        tally_endpoint_info info;
        int rc = tally_endpoint_get(w->ctx->client, w->cfg->name, &info);
        bool disabled = rc == TALLY_ok && info.disabled;
        if (rc == TALLY_ok)
            secrets_refresh(w, info.version);
        w->state_read_ms = wall_ms();
        bool was = atomic_exchange(&w->ctx->metrics.disabled, disabled);
        if (!disabled) {
            if (was)
                fprintf(stderr, "tally-relay: endpoint %s enabled again; delivering\n",
                        w->cfg->name);
            w->failing_since_ms = 0;
            if (rc == TALLY_ok && info.recover_since_ms != 0)
                recover_run(w, &info);
            return true;
        }
        if (!said)
            fprintf(stderr, "tally-relay: endpoint %s is disabled (%s): waiting for tally "
                            "endpoint enable %s\n",
                    w->cfg->name, info.reason[0] ? info.reason : "no reason given",
                    w->cfg->name);
        said = true;
        relay_pause(w->ctx->stop, RELAY_DISABLED_POLL_MS);
    }
    return false;
}

int relay_webhook_run(const relay_endpoint *cfg, relay_sink_context *ctx)
{
    webhook_sink w = {.cfg = cfg, .ctx = ctx};
    if (!curl_setup(&w)) {
        fprintf(stderr, "tally-relay: endpoint %s: cannot set up libcurl\n", cfg->name);
        curl_easy_cleanup(w.curl);
        return 1;
    }
    /* until_idle: a run returns once nothing comes, so the attempts of a
     * burst reach the attempt log within a long-poll */
    tally_run_options ro = {.fetch_max = cfg->sub.fetch_max, .wait_ms = RELAY_WAIT_MS,
                            .failures_max = TALLY_CLIENT_SUB_FAILURES_MAX,
                            .instance = ctx->instance, .until_idle = true};
    int result = 0;
    tally_subscriber *s = relay_subscriber_open(ctx, &cfg->sub);
    if (s == NULL)
        result = atomic_load(ctx->stop) ? 0 : 1;
    w.s = s;
    while (s && wait_while_disabled(&w) && relay_sink_begin(ctx, s)) {
        int rc = tally_subscriber_run(s, &ro, on_event, &w);
        relay_sink_end(ctx);
        attempts_flush(&w);
        if (rc != TALLY_ok) {
            fprintf(stderr, "tally-relay: subscriber %s: %s\n", cfg->sub.name, tally_strerror(rc));
            result = 1;
            break;
        }
    }
    tally_subscriber_close(s);
    curl_easy_cleanup(w.curl);
    return result;
}
