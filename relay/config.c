/*
 * config.c — tally-relay's configuration file (docs/RELAY.md,
 * "Configuration"): `key = value` lines, `#` comments, and sections
 * `[nats]` and `[endpoint NAME]`. One table lists every key of every
 * section with the function that reads its value, so adding a setting is
 * adding a row. The checks after the file and the command line are in
 * relay_config_check.
 */
#include "config.h"

#include "common/cli.h"
#include "net/http/http.h"
#include "common/limits.h"
#include "common/options.h"
#include "common/file_mode.h"
#include "common/webhook_secret.h"
#include "common/duration.h"
#include "relay/relay.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef enum section { SECTION_TOP, SECTION_NATS, SECTION_ENDPOINT } section;

/* Where a key's value goes: the config, the nats section, or the endpoint
 * being read. */
typedef struct target {
    relay_config *config;
    relay_endpoint *endpoint;
} target;

typedef bool (*key_reader)(target *t, const char *value, char *why, size_t why_size);

typedef struct key_row {
    section where;
    const char *key;
    key_reader read;
} key_row;

static bool text_into(char *out, size_t size, const char *value, char *why, size_t why_size)
{
    if (strlen(value) >= size) {
        snprintf(why, why_size, "longer than %zu bytes", size - 1);
        return false;
    }
    snprintf(out, size, "%s", value);
    return true;
}

static bool u32_into(uint32_t *out, const char *value, uint64_t min, uint64_t max, char *why,
                     size_t why_size)
{
    uint64_t v;
    if (!cli_parse_u64(value, min, max, &v)) {
        snprintf(why, why_size, "not a number from %" PRIu64 " to %" PRIu64, min, max);
        return false;
    }
    *out = (uint32_t)v;
    return true;
}

/* A list value: items separated by spaces or commas, at most max of them;
 * take(item, index, ...) stores each. *count gets how many. */
typedef bool (*item_taker)(void *into, size_t index, const char *item, char *why, size_t n);

static bool list_into(const char *value, size_t max, const char *what, void *into,
                      item_taker take, size_t *count, char *why, size_t n)
{
    char copy[RELAY_CONFIG_LINE_BYTES_MAX];
    snprintf(copy, sizeof(copy), "%s", value);
    *count = 0;
    for (char *save, *p = strtok_r(copy, " ,", &save); p; p = strtok_r(NULL, " ,", &save)) {
        if (*count == max) {
            snprintf(why, n, "more than %zu %s", max, what);
            return false;
        }
        if (!take(into, (*count)++, p, why, n))
            return false;
    }
    return true;
}

static bool take_delay(void *into, size_t i, const char *item, char *why, size_t n)
{
    return u32_into(&((uint32_t *)into)[i], item, 1, 3600000, why, n);
}

static bool take_subject(void *into, size_t i, const char *item, char *why, size_t n)
{
    char(*subjects)[RELAY_SUBJECT_BYTES_MAX + 1] = into;
    return text_into(subjects[i], RELAY_SUBJECT_BYTES_MAX + 1, item, why, n);
}

static bool take_type(void *into, size_t i, const char *item, char *why, size_t n)
{
    char(*types)[RELAY_TYPE_BYTES_MAX + 1] = into;
    return text_into(types[i], RELAY_TYPE_BYTES_MAX + 1, item, why, n);
}

/* Up to 8 delays in ms. */
static bool backoff_into(tally_subscriber_options *o, const char *value, char *why, size_t n)
{
    size_t count = 0;
    bool ok = list_into(value, TALLY_CLIENT_SUB_BACKOFF_STEPS_MAX, "delays", o->backoff_ms,
                        take_delay, &count, why, n);
    o->backoff_count = (uint32_t)count;
    return ok;
}

static relay_subscription *subscription_of(target *t)
{
    return t->endpoint ? &t->endpoint->sub : &t->config->nats.sub;
}

/* ---- the readers, one per key ---- */

static bool read_url(target *t, const char *v, char *why, size_t n)
{
    if (t->endpoint)
        return text_into(t->endpoint->url, sizeof(t->endpoint->url), v, why, n);
    return text_into(t->config->url, sizeof(t->config->url), v, why, n);
}

static bool read_tls_ca(target *t, const char *v, char *why, size_t n)
{
    return text_into(t->config->tls_ca, sizeof(t->config->tls_ca), v, why, n);
}

static bool read_tls_cert(target *t, const char *v, char *why, size_t n)
{
    return text_into(t->config->tls_cert, sizeof(t->config->tls_cert), v, why, n);
}

static bool read_tls_key(target *t, const char *v, char *why, size_t n)
{
    return text_into(t->config->tls_key, sizeof(t->config->tls_key), v, why, n);
}

bool relay_instance_valid(const char *v)
{
    size_t len = strlen(v);
    bool ok = len >= 1 && len <= TALLY_CLIENT_SUB_INSTANCE_BYTES_MAX;
    for (size_t i = 0; ok && i < len; i++)
        ok = (v[i] >= 'A' && v[i] <= 'Z') || (v[i] >= 'a' && v[i] <= 'z') ||
             (v[i] >= '0' && v[i] <= '9') || v[i] == '.' || v[i] == '_' || v[i] == '-';
    return ok;
}

static bool read_token_file(target *t, const char *v, char *why, size_t n)
{
    return text_into(t->config->token_file, sizeof(t->config->token_file), v, why, n);
}

static bool read_instance(target *t, const char *v, char *why, size_t n)
{
    if (!relay_instance_valid(v)) {
        snprintf(why, n, "an instance is 1-64 bytes of A-Z a-z 0-9 . _ -");
        return false;
    }
    return text_into(t->config->instance, sizeof(t->config->instance), v, why, n);
}

bool relay_http_url_take(const char *v, char *out, size_t size)
{
    if (strcmp(v, "none") == 0) {
        out[0] = '\0';
        return true;
    }
    if (!net_http_url_valid(v) || strlen(v) >= size)
        return false;
    snprintf(out, size, "%s", v);
    return true;
}

static bool read_http(target *t, const char *v, char *why, size_t n)
{
    if (relay_http_url_take(v, t->config->http, sizeof(t->config->http)))
        return true;
    snprintf(why, n, "http://HOST:PORT or none");
    return false;
}

static bool read_subscriber(target *t, const char *v, char *why, size_t n)
{
    return text_into(t->config->nats.sub.name, sizeof(t->config->nats.sub.name), v, why, n);
}

static bool read_nats_url(target *t, const char *v, char *why, size_t n)
{
    t->config->nats.enabled = true;
    return text_into(t->config->nats.url, sizeof(t->config->nats.url), v, why, n);
}

static bool read_stream(target *t, const char *v, char *why, size_t n)
{
    return text_into(t->config->nats.stream, sizeof(t->config->nats.stream), v, why, n);
}

static bool read_subject(target *t, const char *v, char *why, size_t n)
{
    return text_into(t->config->nats.subject, sizeof(t->config->nats.subject), v, why, n);
}

static bool read_stream_subjects(target *t, const char *v, char *why, size_t n)
{
    relay_nats *x = &t->config->nats;
    return list_into(v, RELAY_STREAM_SUBJECTS_MAX, "subjects", x->stream_subjects, take_subject,
                     &x->stream_subject_count, why, n);
}

static bool read_storage(target *t, const char *v, char *why, size_t n)
{
    if (strcmp(v, "file") != 0 && strcmp(v, "memory") != 0) {
        snprintf(why, n, "file or memory");
        return false;
    }
    t->config->nats.memory_storage = strcmp(v, "memory") == 0;
    return true;
}

static bool read_replicas(target *t, const char *v, char *why, size_t n)
{
    return u32_into(&t->config->nats.replicas, v, 1, 5, why, n);
}

static bool read_duplicate_window(target *t, const char *v, char *why, size_t n)
{
    return u32_into(&t->config->nats.duplicate_window_s, v, 1, 7 * 86400, why, n);
}

static bool read_max_pending(target *t, const char *v, char *why, size_t n)
{
    return u32_into(&t->config->nats.max_pending, v, 1, RELAY_MAX_PENDING_MAX, why, n);
}

static bool read_ack_timeout(target *t, const char *v, char *why, size_t n)
{
    return u32_into(&t->config->nats.ack_timeout_ms, v, 100, 600000, why, n);
}

static bool read_fetch(target *t, const char *v, char *why, size_t n)
{
    return u32_into(&subscription_of(t)->fetch_max, v, 1, TALLY_CLIENT_SUB_FETCH_MAX, why, n);
}

static bool read_max_deliver(target *t, const char *v, char *why, size_t n)
{
    if (t->endpoint)
        t->endpoint->max_deliver_set = true;
    return u32_into(&subscription_of(t)->options.max_deliver, v, 1, 1000, why, n);
}

static bool read_ack_wait(target *t, const char *v, char *why, size_t n)
{
    return u32_into(&subscription_of(t)->options.ack_wait_ms, v, 100, 86400000, why, n);
}

static bool read_max_ack_pending(target *t, const char *v, char *why, size_t n)
{
    return u32_into(&subscription_of(t)->options.max_ack_pending, v, 1, 10000, why, n);
}

static bool read_backoff(target *t, const char *v, char *why, size_t n)
{
    if (t->endpoint)
        t->endpoint->backoff_set = true;
    return backoff_into(&subscription_of(t)->options, v, why, n);
}

/* [whsec_]<base64> of 24 to 64 bytes, by the rule tallyd's intake follows
 * too (common/webhook_secret.h). */
static bool read_secret(target *t, const char *v, char *why, size_t n)
{
    relay_endpoint *e = t->endpoint;
    _Static_assert(RELAY_SECRET_BYTES_MAX >= STANDARD_SECRET_BYTES_MAX, "a key fits");
    return standard_secret_decode(v, strlen(v), e->secret, &e->secret_len, why, n);
}

static bool read_types(target *t, const char *v, char *why, size_t n)
{
    relay_endpoint *e = t->endpoint;
    return list_into(v, RELAY_TYPES_MAX, "types", e->types, take_type, &e->type_count, why, n);
}

/* backfill = none (the default: a new endpoint gets the events committed
 * after it was created), all (the whole log), or a seq (from it on). It
 * matters only when the endpoint's subscriber is created: an existing one
 * keeps its cursor. */
static bool read_backfill(target *t, const char *v, char *why, size_t n)
{
    tally_subscriber_options *o = &t->endpoint->sub.options;
    if (strcmp(v, "none") == 0) {
        o->start = TALLY_START_NOW;
        return true;
    }
    if (strcmp(v, "all") == 0) {
        o->start = TALLY_START_BEGINNING;
        return true;
    }
    uint64_t seq;
    if (!cli_parse_u64(v, 1, UINT64_MAX, &seq)) {
        snprintf(why, n, "backfill: none, all or a seq (>= 1), not \"%s\"", v);
        return false;
    }
    o->start = TALLY_START_SEQ;
    o->from_seq = seq;
    return true;
}

static bool read_connect_timeout(target *t, const char *v, char *why, size_t n)
{
    return u32_into(&t->endpoint->connect_timeout_ms, v, 1, RELAY_HTTP_TIMEOUT_MS_MAX, why, n);
}

static bool read_timeout(target *t, const char *v, char *why, size_t n)
{
    return u32_into(&t->endpoint->timeout_ms, v, 1, RELAY_HTTP_TIMEOUT_MS_MAX, why, n);
}

static bool read_retry_schedule(target *t, const char *v, char *why, size_t n)
{
    relay_endpoint *e = t->endpoint;
    e->schedule_set = true;
    return duration_schedule_parse(v, strlen(v), e->schedule_ms, &e->schedule_count, why, n);
}

static bool read_disable_after(target *t, const char *v, char *why, size_t n)
{
    if (strcmp(v, "never") == 0) {
        t->endpoint->disable_after_ms = 0;
        return true;
    }
    if (duration_parse(v, RELAY_DISABLE_AFTER_MS_MAX, &t->endpoint->disable_after_ms) &&
        t->endpoint->disable_after_ms > 0)
        return true;
    snprintf(why, n, "never, or a number with ms, s, m, h or d, at most 365d");
    return false;
}

static bool read_attempt_retention(target *t, const char *v, char *why, size_t n)
{
    if (duration_parse(v, 366ull * 86400000, &t->endpoint->attempt_retention_ms) &&
        t->endpoint->attempt_retention_ms >= 1000)
        return true;
    snprintf(why, n, "a number with s, m, h or d, from 1s to 366d");
    return false;
}

static const key_row keys[] = {
    {SECTION_TOP, "url", read_url},
    {SECTION_TOP, "subscriber", read_subscriber},
    {SECTION_TOP, "instance", read_instance},
    {SECTION_TOP, "http", read_http},
    {SECTION_TOP, "token_file", read_token_file},
    {SECTION_TOP, "tls_ca", read_tls_ca},
    {SECTION_TOP, "tls_cert", read_tls_cert},
    {SECTION_TOP, "tls_key", read_tls_key},
    {SECTION_NATS, "url", read_nats_url},
    {SECTION_NATS, "stream", read_stream},
    {SECTION_NATS, "subject", read_subject},
    {SECTION_NATS, "stream_subjects", read_stream_subjects},
    {SECTION_NATS, "storage", read_storage},
    {SECTION_NATS, "replicas", read_replicas},
    {SECTION_NATS, "duplicate_window_s", read_duplicate_window},
    {SECTION_NATS, "max_pending", read_max_pending},
    {SECTION_NATS, "ack_timeout_ms", read_ack_timeout},
    {SECTION_NATS, "fetch", read_fetch},
    {SECTION_NATS, "max_deliver", read_max_deliver},
    {SECTION_NATS, "ack_wait_ms", read_ack_wait},
    {SECTION_NATS, "max_ack_pending", read_max_ack_pending},
    {SECTION_NATS, "backoff_ms", read_backoff},
    {SECTION_ENDPOINT, "url", read_url},
    {SECTION_ENDPOINT, "secret", read_secret},
    {SECTION_ENDPOINT, "types", read_types},
    {SECTION_ENDPOINT, "backfill", read_backfill},
    {SECTION_ENDPOINT, "connect_timeout_ms", read_connect_timeout},
    {SECTION_ENDPOINT, "timeout_ms", read_timeout},
    {SECTION_ENDPOINT, "fetch", read_fetch},
    {SECTION_ENDPOINT, "max_deliver", read_max_deliver},
    {SECTION_ENDPOINT, "ack_wait_ms", read_ack_wait},
    {SECTION_ENDPOINT, "max_ack_pending", read_max_ack_pending},
    {SECTION_ENDPOINT, "backoff_ms", read_backoff},
    {SECTION_ENDPOINT, "retry_schedule", read_retry_schedule},
    {SECTION_ENDPOINT, "disable_after", read_disable_after},
    {SECTION_ENDPOINT, "attempt_retention", read_attempt_retention},
};

/* ---- the file ---- */

void relay_config_default(relay_config *c)
{
    memset(c, 0, sizeof(*c));
    snprintf(c->url, sizeof(c->url), "%s", RELAY_URL_DEFAULT);
    relay_instance_default(c->instance);
    snprintf(c->lock_dir, sizeof(c->lock_dir), "%s", RELAY_LOCK_DIR);
    relay_nats *n = &c->nats;
    snprintf(n->subject, sizeof(n->subject), "%s", RELAY_SUBJECT_DEFAULT);
    snprintf(n->sub.name, sizeof(n->sub.name), "%s", RELAY_SUBSCRIBER_DEFAULT);
    n->replicas = 1;
    n->duplicate_window_s = RELAY_DUPLICATE_WINDOW_S_DEFAULT;
    n->max_pending = RELAY_MAX_PENDING_DEFAULT;
    n->ack_timeout_ms = RELAY_ACK_TIMEOUT_MS_DEFAULT;
    n->sub.fetch_max = RELAY_FETCH_DEFAULT;
    n->sub.options.max_deliver = RELAY_NATS_MAX_DELIVER_DEFAULT;
}

/* 1..max bytes of A-Z a-z 0-9 . _ - (and ':' when colon). */
static bool name_ok(const char *name, size_t max, bool colon)
{
    size_t len = strlen(name);
    if (len == 0 || len > max)
        return false;
    for (const char *p = name; *p; p++)
        if (!isalnum((unsigned char)*p) && *p != '.' && *p != '_' && *p != '-' &&
            !(colon && *p == ':'))
            return false;
    return true;
}

static void endpoint_defaults(relay_endpoint *e, const char *name);

static relay_endpoint *endpoint_begin(relay_config *c, const char *name, char *why, size_t n)
{
    if (!name_ok(name, RELAY_ENDPOINT_NAME_BYTES_MAX, false)) {
        snprintf(why, n, "an endpoint name is 1-%zu bytes of A-Z a-z 0-9 . _ -",
                 (size_t)RELAY_ENDPOINT_NAME_BYTES_MAX);
        return NULL;
    }
    for (size_t i = 0; i < c->endpoint_count; i++)
        if (strcmp(c->endpoints[i].name, name) == 0) {
            snprintf(why, n, "endpoint %s appears twice", name);
            return NULL;
        }
    if (c->endpoint_count == RELAY_ENDPOINTS_MAX) {
        snprintf(why, n, "more than %d endpoints", RELAY_ENDPOINTS_MAX);
        return NULL;
    }
    relay_endpoint *e = &c->endpoints[c->endpoint_count++];
    endpoint_defaults(e, name);
    return e;
}

static void endpoint_defaults(relay_endpoint *e, const char *name)
{
    memset(e, 0, sizeof(*e));
    snprintf(e->name, sizeof(e->name), "%s", name);
    snprintf(e->sub.name, sizeof(e->sub.name), "%s%s", RELAY_ENDPOINT_PREFIX, name);
    e->connect_timeout_ms = RELAY_CONNECT_TIMEOUT_MS_DEFAULT;
    e->timeout_ms = RELAY_TIMEOUT_MS_DEFAULT;
    e->sub.options.max_deliver = RELAY_MAX_DELIVER_DEFAULT;
    e->sub.options.start = TALLY_START_NOW; /* no history unless backfill says so */
    e->sub.options.backoff_count = TALLY_CLIENT_SUB_BACKOFF_STEPS_MAX; /* 1 s doubling */
    for (uint32_t i = 0; i < TALLY_CLIENT_SUB_BACKOFF_STEPS_MAX; i++)
        e->sub.options.backoff_ms[i] = RELAY_BACKOFF_MS_FIRST << i;
    e->sub.fetch_max = TALLY_CLIENT_SUB_FETCH_DEFAULT;
    /* RELAY_SCHEDULE_DEFAULT and RELAY_DISABLE_AFTER_DEFAULT in numbers
     * (tests/relay/check_relay reads them back from --check) */
    static const uint32_t schedule_default_ms[] = {
        0, 5000, 300000, 1800000, 7200000, 18000000,
        36000000, 36000000, 36000000, 36000000, 36000000, 36000000};
    _Static_assert(sizeof(schedule_default_ms) / sizeof(uint32_t) <= RELAY_SCHEDULE_STEPS_MAX,
                   "the default schedule fits");
    memcpy(e->schedule_ms, schedule_default_ms, sizeof(schedule_default_ms));
    e->schedule_count = sizeof(schedule_default_ms) / sizeof(uint32_t);
    e->disable_after_ms = 5ull * 86400000;
    e->attempt_retention_ms = 7ull * 86400000; /* RELAY_ATTEMPT_RETENTION_DEFAULT */
}

/* "[nats]" or "[endpoint NAME]". */
static bool section_line(char *line, relay_config *c, section *where, target *t, char *why,
                         size_t n)
{
    size_t len = strlen(line);
    if (line[len - 1] != ']') {
        snprintf(why, n, "a section line ends with ]");
        return false;
    }
    line[len - 1] = '\0';
    char *name = options_trim(line + 1);
    if (strcmp(name, "nats") == 0) {
        *where = SECTION_NATS;
        t->endpoint = NULL;
        c->nats.enabled = true;
        return true;
    }
    if (strncmp(name, "endpoint", 8) == 0 && isspace((unsigned char)name[8])) {
        *where = SECTION_ENDPOINT;
        t->endpoint = endpoint_begin(c, options_trim(name + 8), why, n);
        return t->endpoint != NULL;
    }
    snprintf(why, n, "unknown section [%s] ([nats] or [endpoint NAME])", name);
    return false;
}

static bool key_line(char *line, section where, target *t, char *why, size_t n)
{
    char *eq = strchr(line, '=');
    if (eq == NULL) {
        snprintf(why, n, "expected key = value");
        return false;
    }
    *eq = '\0';
    const char *key = options_trim(line), *value = options_trim(eq + 1);
    for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++) {
        if (keys[i].where != where || strcmp(keys[i].key, key) != 0)
            continue;
        char inner[256] = "";
        if (keys[i].read(t, value, inner, sizeof(inner)))
            return true;
        snprintf(why, n, "%s: %s", key, inner);
        return false;
    }
    snprintf(why, n, "unknown key %s in this section", key);
    return false;
}

/* A config that holds an endpoint's signing secret is a secret file: only
 * its owner may read or write it, as tallyd's own (file_private_check). */
static bool secrets_private(const relay_config *c, const char *path, char *error, size_t size)
{
    for (size_t i = 0; i < c->endpoint_count; i++) {
        if (c->endpoints[i].secret_len == 0)
            continue;
        char why[768];
        if (file_private_check(path, "config file", why, sizeof(why)))
            return true;
        snprintf(error, size, "%s: it holds the signing secret of [endpoint %s]", why,
                 c->endpoints[i].name);
        return false;
    }
    return true;
}

bool relay_config_load(relay_config *c, const char *path, char *error, size_t error_size)
{
    FILE *f = fopen(path, "r");
    if (f == NULL) {
        snprintf(error, error_size, "%s: %s", path, strerror(errno));
        return false;
    }
    char buffer[RELAY_CONFIG_LINE_BYTES_MAX + 2], why[512] = "";
    section where = SECTION_TOP;
    target t = {.config = c};
    unsigned number = 0;
    bool ok = true;
    while (ok && fgets(buffer, sizeof(buffer), f)) {
        if (++number > RELAY_CONFIG_LINES_MAX || (strchr(buffer, '\n') == NULL && !feof(f))) {
            snprintf(why, sizeof(why), "line too long or too many lines");
            ok = false;
            break;
        }
        char *hash = strchr(buffer, '#');
        if (hash)
            *hash = '\0';
        char *line = options_trim(buffer);
        if (*line == '\0')
            continue;
        ok = *line == '[' ? section_line(line, c, &where, &t, why, sizeof(why))
                          : key_line(line, where, &t, why, sizeof(why));
    }
    if (ok && ferror(f)) {
        snprintf(why, sizeof(why), "%s", strerror(errno));
        ok = false;
    }
    fclose(f);
    if (!ok)
        snprintf(error, error_size, "%s:%u: %s", path, number, why);
    return ok && secrets_private(c, path, error, error_size);
}

/* ---- the checks after the file and the flags ---- */

static bool nats_check(relay_nats *n, char *error, size_t size)
{
    if (n->url[0] == '\0' || n->stream[0] == '\0') {
        snprintf(error, size, "[nats] needs url and stream (or --nats and --stream)");
        return false;
    }
    if (strchr(n->subject, ' ') || strchr(n->subject, '*') || strchr(n->subject, '>')) {
        snprintf(error, size, "[nats] subject: no spaces or wildcards");
        return false;
    }
    if (n->stream_subject_count == 0) {
        snprintf(n->stream_subjects[0], sizeof(n->stream_subjects[0]), "%s",
                 RELAY_STREAM_SUBJECTS_DEFAULT);
        n->stream_subject_count = 1;
    }
    if (n->sub.fetch_max < n->max_pending)
        n->sub.fetch_max = n->max_pending; /* a window never waits for the next fetch */
    if (!name_ok(n->sub.name, TALLY_CLIENT_SUBSCRIBER_NAME_BYTES_MAX, true)) {
        snprintf(error, size, "subscriber %s: 1-64 bytes of A-Z a-z 0-9 . _ - :", n->sub.name);
        return false;
    }
    return true;
}

/* backoff_ms without retry_schedule: the subscriber's backoff, as before
 * the schedule; max_deliver not given: one delivery per attempt of it. */
static void endpoint_schedule_settle(relay_endpoint *e)
{
    if (e->backoff_set && !e->schedule_set)
        e->schedule_count = 0;
    if (!e->max_deliver_set && e->schedule_count > 0)
        e->sub.options.max_deliver = (uint32_t)e->schedule_count;
}

/* The endpoint's types as tallyd's filter of its subscriber: the
 * patterns comma-separated, "" when it takes every type (none given, or
 * "*" among them). */
static void endpoint_filter_settle(relay_endpoint *e)
{
    relay_subscription *sub = &e->sub;
    size_t at = 0;
    sub->filter_types[0] = '\0';
    for (size_t i = 0; i < e->type_count; i++)
        if (strcmp(e->types[i], "*") == 0) {
            sub->filter_types[0] = '\0';
            return;
        } else {
            at += (size_t)snprintf(sub->filter_types + at, sizeof(sub->filter_types) - at,
                                   "%s%s", i ? "," : "", e->types[i]);
        }
}

bool relay_config_check(relay_config *c, char *error, size_t size)
{
    if (c->nats.enabled && !nats_check(&c->nats, error, size))
        return false;
    if (c->token_file[0] && !file_private_check(c->token_file, "token_file", error, size))
        return false;
    for (size_t i = 0; i < c->endpoint_count; i++) {
        relay_endpoint *e = &c->endpoints[i];
        if (strncmp(e->url, "http://", 7) != 0 && strncmp(e->url, "https://", 8) != 0) {
            snprintf(error, size, "[endpoint %s] url: http:// or https:// required", e->name);
            return false;
        }
        if (e->secret_len == 0) {
            snprintf(error, size, "[endpoint %s] secret: required (whsec_<base64>)", e->name);
            return false;
        }
        endpoint_schedule_settle(e);
        endpoint_filter_settle(e);
    }
    return true;
}

bool relay_endpoint_from_definition(relay_endpoint *e, const tally_endpoint_definition *d,
                                    char *why, size_t n)
{
    if (!name_ok(d->endpoint, RELAY_ENDPOINT_NAME_BYTES_MAX, false)) {
        snprintf(why, n, "its name");
        return false;
    }
    endpoint_defaults(e, d->endpoint);
    target t = {.endpoint = e};
    char number[2][16];
    snprintf(number[0], sizeof(number[0]), "%" PRIu32, d->connect_timeout_ms);
    snprintf(number[1], sizeof(number[1]), "%" PRIu32, d->timeout_ms);
    const struct {
        const char *key, *value;
        bool given;
        key_reader read;
    } fields[] = {
        {"url", d->url, true, read_url},
        {"types", d->types, d->types[0] != '\0', read_types},
        {"retry_schedule", d->retry_schedule, d->retry_schedule[0] != '\0', read_retry_schedule},
        {"connect_timeout_ms", number[0], d->connect_timeout_ms != 0, read_connect_timeout},
        {"timeout_ms", number[1], d->timeout_ms != 0, read_timeout},
        {"backfill", d->backfill, d->backfill[0] != '\0', read_backfill},
    };
    for (size_t i = 0; i < sizeof(fields) / sizeof(fields[0]); i++) {
        char inner[256] = "";
        if (fields[i].given && !fields[i].read(&t, fields[i].value, inner, sizeof(inner))) {
            snprintf(why, n, "%s: %s", fields[i].key, inner);
            return false;
        }
    }
    if (strncmp(e->url, "http://", 7) != 0 && strncmp(e->url, "https://", 8) != 0) {
        snprintf(why, n, "url: http:// or https:// required");
        return false;
    }
    endpoint_schedule_settle(e);
    endpoint_filter_settle(e);
    return true;
}

bool relay_endpoint_retry_delay(const relay_endpoint *e, uint32_t attempt, uint32_t *delay_ms)
{
    if (e->schedule_count == 0)
        return false;
    *delay_ms = e->schedule_ms[attempt < e->schedule_count ? attempt : e->schedule_count - 1];
    return true;
}

bool relay_endpoint_wants(const relay_endpoint *e, const char *type)
{
    if (e->type_count == 0)
        return true;
    for (size_t i = 0; i < e->type_count; i++) {
        const char *p = e->types[i];
        size_t len = strlen(p);
        if (strcmp(p, "*") == 0 || strcmp(p, type) == 0)
            return true;
        if (len >= 2 && p[len - 1] == '*' && p[len - 2] == '.' && strncmp(p, type, len - 1) == 0)
            return true;
    }
    return false;
}

static void subscription_print(const relay_subscription *s)
{
    const tally_subscriber_options *o = &s->options;
    printf("  subscriber %s: fetch %" PRIu32 ", max_deliver %" PRIu32 ", ", s->name,
           s->fetch_max, o->max_deliver);
    if (o->start == TALLY_START_NOW)
        printf("when new, from the next event, ");
    else if (o->start == TALLY_START_SEQ)
        printf("when new, from seq %" PRIu64 ", ", o->from_seq);
    else
        printf("when new, from the first event, ");
    printf("backoff_ms");
    if (o->backoff_count == 0)
        printf(" (the ack wait)");
    for (uint32_t i = 0; i < o->backoff_count; i++)
        printf(" %" PRIu32, o->backoff_ms[i]);
    printf("\n");
}

void relay_config_print(const relay_config *c)
{
    printf("tally: %s, as instance %s\n", c->url, c->instance);
    printf("and the endpoints defined in tallyd (tally endpoint list), listed every %d ms%s\n",
           RELAY_ENDPOINTS_POLL_MS,
           c->nats.enabled || c->endpoint_count ? "" : ": none in the file");
    if (c->http[0])
        printf("metrics: %s/metrics, %s/healthz\n", c->http, c->http);
    if (strncmp(c->url, "tls+tcp", 7) == 0)
        printf("tls: ca %s, client certificate %s\n", c->tls_ca[0] ? c->tls_ca : "$TALLY_TLS_CA",
               c->tls_cert[0] ? c->tls_cert : "$TALLY_TLS_CERT (if set)");
    if (c->nats.enabled) {
        const relay_nats *n = &c->nats;
        printf("nats: %s, stream %s (%s, %" PRIu32 " replicas, duplicate window %" PRIu32
               " s, subjects",
               n->url, n->stream, n->memory_storage ? "memory" : "file", n->replicas,
               n->duplicate_window_s);
        for (size_t i = 0; i < n->stream_subject_count; i++)
            printf(" %s", n->stream_subjects[i]);
        printf("), subject %s, max_pending %" PRIu32 ", ack_timeout_ms %" PRIu32 "\n", n->subject,
               n->max_pending, n->ack_timeout_ms);
        subscription_print(&n->sub);
    }
    for (size_t i = 0; i < c->endpoint_count; i++) {
        const relay_endpoint *e = &c->endpoints[i];
        printf("endpoint %s: %s, types", e->name, e->url);
        if (e->type_count == 0)
            printf(" *");
        for (size_t k = 0; k < e->type_count; k++)
            printf(" %s", e->types[k]);
        printf(", connect_timeout_ms %" PRIu32 ", timeout_ms %" PRIu32 "\n", e->connect_timeout_ms,
               e->timeout_ms);
        char text[32];
        printf("  retry_schedule");
        if (e->schedule_count == 0)
            printf(" (the subscriber's backoff_ms)");
        uint64_t total_ms = 0;
        for (size_t k = 0; k < e->schedule_count; k++) {
            duration_text(e->schedule_ms[k], text, sizeof(text));
            printf(" %s", text);
            total_ms += e->schedule_ms[k];
        }
        if (e->schedule_count)
            printf(" (%zu attempts over %.1f h)", e->schedule_count, (double)total_ms / 3600000.0);
        duration_text(e->disable_after_ms, text, sizeof(text));
        printf(", disable_after %s", e->disable_after_ms ? text : "never");
        duration_text(e->attempt_retention_ms, text, sizeof(text));
        printf(", attempt_retention %s\n", text);
        subscription_print(&e->sub);
    }
}
