/*
 * fuzz_webhook.c — fuzz target: webhook intake before the writer
 * (net/http/webhook_config.c, net/http/webhook_verify.c; docs/WEBHOOKS.md). The
 * first byte of the input picks what the rest is:
 *
 *   0 (mod 3)  a sources file (`--webhooks FILE`), parsed from memory
 *              (webhooks_parse);
 *   1          a delivery to one of four sources (standard, stripe,
 *              hmac-sha256 by header, hmac-sha256 by JSON field; the
 *              second byte picks): "Name: value" header lines, an empty
 *              line, the body — verified as it is;
 *   2          the same, but the target signs it correctly first (with
 *              the source's secret, at the fixed now), putting its own
 *              signature headers before the input's.
 *
 * Oracles besides the sanitizers: a file that parses has 1..64 sources,
 * each with a valid name and 1..4 secrets; an accepted delivery has an
 * event id of 1..64 bytes and a type of at most 64; a body over the limit
 * is too_large whatever else it is; a correctly signed delivery is never
 * refused for its signature or its time, and a standard one (whose id is
 * a header) is accepted.
 */
#include "tests/fuzz/fuzz.h"

#include "common/error.h"
#include "net/http/webhooks.h"

#include <fcntl.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#define HEADERS_MAX 16
#define NOW_S (FUZZ_NOW_MS / 1000)

static char secret_dir[256];
static char secret_path[300];
static net_webhooks *hooks;

static void remove_secret(void)
{
    unlink(secret_path);
    rmdir(secret_dir);
    webhooks_free(hooks);
}

/* The four sources, with one secret file of the target's own (0600). */
static net_webhooks *sources(void)
{
    if (hooks)
        return hooks;
    const char *tmp = getenv("TMPDIR");
    snprintf(secret_dir, sizeof(secret_dir), "%s/tally-fuzz-hook-XXXXXX",
             tmp && *tmp ? tmp : "/tmp");
    if (mkdtemp(secret_dir) == NULL)
        fuzz_fail("mkdtemp %s", secret_dir);
    snprintf(secret_path, sizeof(secret_path), "%s/secret", secret_dir);
    int fd = open(secret_path, O_WRONLY | O_CREAT | O_EXCL, 0600);
    FILE *f = fd >= 0 ? fdopen(fd, "w") : NULL;
    /* whsec_ and base64 for the standard source; the others use it as it is */
    if (f == NULL || fputs("whsec_ZnV6ei1rZXktMDEyMzQ1Njc4OWFiY2RlZg==\n", f) < 0 || fclose(f))
        fuzz_fail("cannot write %s", secret_path);
    atexit(remove_secret);
    char text[2048], error[512];
    int n = snprintf(text, sizeof(text),
                     "std standard %s tolerance=300\n"
                     "pay stripe %s\n"
                     "gh hmac-sha256 %s\n"
                     "ghj hmac-sha256 %s signature_header=X-Signature id_field=delivery_id\n",
                     secret_path, secret_path, secret_path, secret_path);
    if (webhooks_parse("fuzz-sources", text, (size_t)n, &hooks, error, sizeof(error)) != TALLY_ok)
        fuzz_fail("the target's own sources: %s", error);
    return hooks;
}

typedef struct delivery {
    const char *names[HEADERS_MAX + 3], *values[HEADERS_MAX + 3];
    unsigned count;
    char own[3][192]; /* the target's signature headers' values */
} delivery;

static const char *header(const void *ctx, const char *name)
{
    const delivery *d = ctx;
    for (unsigned i = 0; i < d->count; i++)
        if (strcasecmp(d->names[i], name) == 0)
            return d->values[i];
    return NULL;
}

/* "Name: value" lines of text (NUL-terminated, modified) until an empty
 * line; returns where the body starts. */
static char *parse_headers(delivery *d, char *text)
{
    char *line = text;
    while (*line && *line != '\n' && d->count < HEADERS_MAX + 3) {
        char *end = strchr(line, '\n');
        if (end)
            *end = '\0';
        char *colon = strchr(line, ':');
        if (colon) {
            *colon = '\0';
            d->names[d->count] = line;
            d->values[d->count++] = colon + 1 + strspn(colon + 1, " ");
        }
        if (end == NULL)
            return line + strlen(line);
        line = end + 1;
    }
    return *line == '\n' ? line + 1 : line;
}

static void hex_of(const uint8_t *mac, char *out)
{
    for (int i = 0; i < 32; i++)
        sprintf(out + 2 * i, "%02x", mac[i]);
}

static void mac_of(const webhook_source *src, const char *prefix, const char *body, size_t len,
                   uint8_t mac[32])
{
    size_t n = strlen(prefix);
    char *text = malloc(n + len + 1);
    if (text == NULL)
        fuzz_fail("out of memory");
    memcpy(text, prefix, n);
    memcpy(text + n, body, len);
    unsigned mac_len = 32;
    HMAC(EVP_sha256(), src->secrets[0].bytes, (int)src->secrets[0].len, (uint8_t *)text, n + len,
         mac, &mac_len);
    free(text);
}

/* The headers that sign body correctly for src, first in d. */
static void sign(delivery *d, const webhook_source *src, const char *body, size_t len)
{
    uint8_t mac[32];
    char hex[65], prefix[96];
    switch (src->scheme) {
    case WEBHOOK_STANDARD:
        snprintf(prefix, sizeof(prefix), "msg_fuzz.%lld.", (long long)NOW_S);
        mac_of(src, prefix, body, len, mac);
        memcpy(d->own[0], "v1,", 3);
        EVP_EncodeBlock((unsigned char *)d->own[0] + 3, mac, 32);
        snprintf(d->own[1], sizeof(d->own[1]), "%lld", (long long)NOW_S);
        d->names[0] = "webhook-signature", d->values[0] = d->own[0];
        d->names[1] = "webhook-timestamp", d->values[1] = d->own[1];
        d->names[2] = "webhook-id", d->values[2] = "msg_fuzz";
        d->count = 3;
        return;
    case WEBHOOK_STRIPE:
        snprintf(prefix, sizeof(prefix), "%lld.", (long long)NOW_S);
        mac_of(src, prefix, body, len, mac);
        hex_of(mac, hex);
        snprintf(d->own[0], sizeof(d->own[0]), "t=%lld,v1=%s", (long long)NOW_S, hex);
        d->names[0] = "Stripe-Signature", d->values[0] = d->own[0];
        d->count = 1;
        return;
    case WEBHOOK_HMAC:
        mac_of(src, "", body, len, mac);
        hex_of(mac, hex);
        snprintf(d->own[0], sizeof(d->own[0]), "sha256=%s", hex);
        d->names[0] = src->signature_header, d->values[0] = d->own[0];
        d->count = 1;
        return;
    }
}

static void fuzz_sources_file(const uint8_t *data, size_t size)
{
    net_webhooks *w = NULL;
    char error[512];
    if (webhooks_parse("fuzz", (const char *)data, size, &w, error, sizeof(error)) != TALLY_ok) {
        if (w != NULL)
            fuzz_fail("a refused file still gave sources");
        return;
    }
    if (w->count == 0 || w->count > TALLY_WEBHOOK_SOURCES_MAX)
        fuzz_fail("a file parsed into %u sources", w->count);
    for (unsigned i = 0; i < w->count; i++) {
        const webhook_source *s = &w->sources[i];
        size_t n = strlen(s->name);
        if (n == 0 || n > TALLY_WEBHOOK_SOURCE_BYTES_MAX || s->secret_count == 0 ||
            s->secret_count > TALLY_WEBHOOK_SECRETS_MAX || webhooks_find(w, s->name) != s)
            fuzz_fail("source %u is not sane: name %s, %u secrets", i, s->name, s->secret_count);
    }
    webhooks_free(w);
}

static void fuzz_delivery(const uint8_t *data, size_t size, bool signed_here)
{
    net_webhooks *w = sources();
    if (size < 1)
        return;
    webhook_source *src = &w->sources[data[0] % w->count];
    char *text = malloc(size); /* the rest, NUL-terminated */
    if (text == NULL)
        fuzz_fail("out of memory");
    memcpy(text, data + 1, size - 1);
    text[size - 1] = '\0';
    delivery d = {.count = 0};
    const char *body = text;
    size_t body_len = size - 1;
    if (signed_here)
        d.count = 3; /* room first for the target's own headers */
    unsigned own = d.count;
    body = parse_headers(&d, text);
    body_len = size - 1 - (size_t)(body - text);
    if (signed_here) { /* move the input's headers after the signature's */
        unsigned theirs = d.count - own;
        sign(&d, src, body, body_len);
        for (unsigned i = 0; i < theirs; i++) {
            d.names[d.count + i] = d.names[own + i];
            d.values[d.count + i] = d.values[own + i];
        }
        d.count += theirs;
    }
    webhook_delivery in = {header, &d, body, body_len, NOW_S};
    webhook_verified v;
    webhook_outcome o = webhook_verify(src, &in, &v);
    if (body_len > TALLY_WEBHOOK_BODY_BYTES_MAX && o != WEBHOOK_TOO_LARGE)
        fuzz_fail("a body of %zu bytes was not too_large", body_len);
    if (o == WEBHOOK_ACCEPTED &&
        (v.event_id.len == 0 || v.event_id.len > TALLY_WEBHOOK_EVENT_ID_BYTES_MAX ||
         v.event_type.len > TALLY_WEBHOOK_EVENT_TYPE_BYTES_MAX))
        fuzz_fail("accepted with an id of %zu bytes, a type of %zu", v.event_id.len,
                  v.event_type.len);
    if (signed_here && (o == WEBHOOK_BAD_SIGNATURE || o == WEBHOOK_STALE))
        fuzz_fail("a delivery signed for source %s was refused: %s", src->name,
                  webhook_outcome_name(o));
    if (signed_here && src->scheme == WEBHOOK_STANDARD && o != WEBHOOK_ACCEPTED &&
        o != WEBHOOK_TOO_LARGE)
        fuzz_fail("a signed standard delivery was %s", webhook_outcome_name(o));
    free(text);
}

int fuzz_webhook_one(const uint8_t *data, size_t size)
{
    if (size == 0)
        return 0;
    switch (data[0] % 3) {
    case 0: fuzz_sources_file(data + 1, size - 1); break;
    case 1: fuzz_delivery(data + 1, size - 1, false); break;
    case 2: fuzz_delivery(data + 1, size - 1, true); break;
    }
    return 0;
}

#ifndef FUZZ_NO_ENTRY
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    return fuzz_webhook_one(data, size);
}
#endif
