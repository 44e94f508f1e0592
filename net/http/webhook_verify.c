/*
 * webhook_verify.c — a delivery's signature, timestamp, event id and type,
 * by its source's scheme (webhooks.h, docs/WEBHOOKS.md). Signatures are
 * HMAC-SHA256 (OpenSSL's libcrypto) compared with CRYPTO_memcmp, in
 * constant time, against every secret of the source (rotation).
 */
#include "net/http/webhooks.h"

#include "common/sha256.h"

#include <errno.h>
#include <jansson.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
/* The text before the body in what a standard delivery signs: id "."
 * timestamp "." (a stripe one: timestamp "."). */
#define SIGNED_PREFIX_BYTES_MAX (TALLY_WEBHOOK_EVENT_ID_BYTES_MAX + 24)

static void hmac(const webhook_secret *k, const void *data, size_t len, uint8_t out[SHA256_BYTES])
{
    unsigned n = SHA256_BYTES;
    HMAC(EVP_sha256(), k->bytes, (int)k->len, data, len, out, &n);
}

/* Exactly 2 * SHA256_BYTES lower-case hex digits into bytes: Stripe's and
 * GitHub's own libraries compare the lower-case hex text, so an upper-case
 * signature is one they refuse, and so does tally (docs/WEBHOOKS.md). */
static bool hex_decode(const char *s, size_t len, uint8_t out[SHA256_BYTES])
{
    if (len != 2 * SHA256_BYTES)
        return false;
    for (size_t i = 0; i < SHA256_BYTES; i++) {
        char pair[3] = {s[2 * i], s[2 * i + 1], '\0'}, *end;
        if (strspn(pair, "0123456789abcdef") != 2)
            return false;
        out[i] = (uint8_t)strtoul(pair, &end, 16);
    }
    return true;
}

/* Standard Webhooks' base64 of a 32-byte MAC: 44 characters. */
static bool base64_decode_mac(const char *s, size_t len, uint8_t out[SHA256_BYTES])
{
    uint8_t buf[48];
    if (len != 44 || EVP_DecodeBlock(buf, (const unsigned char *)s, (int)len) != 33)
        return false;
    memcpy(out, buf, SHA256_BYTES);
    return true;
}

/* prefix (n bytes) and the body, one after the other, on the heap (a
 * body is up to 256 KiB: too much for a thread's stack or its TLS);
 * NULL when out of memory. */
static char *signed_text_new(const char *prefix, size_t n, const webhook_delivery *d, size_t *len)
{
    char *text = malloc(n + d->body_len + 1);
    if (text == NULL)
        return NULL;
    memcpy(text, prefix, n);
    memcpy(text + n, d->body, d->body_len);
    *len = n + d->body_len;
    return text;
}

/* Whether mac is one of the secrets' MACs over the parts. */
static bool mac_matches(const webhook_source *src, const void *data, size_t len,
                        const uint8_t mac[SHA256_BYTES])
{
    bool match = false;
    for (unsigned i = 0; i < src->secret_count; i++) {
        uint8_t want[SHA256_BYTES];
        hmac(&src->secrets[i], data, len, want);
        match |= CRYPTO_memcmp(want, mac, SHA256_BYTES) == 0; /* no early exit */
    }
    return match;
}

/* A signed time: 1-20 decimal digits (what may be signed; its value is
 * judged after the signature, by signed_verdict). */
static bool time_text(const char *s)
{
    size_t n = s ? strspn(s, "0123456789") : 0;
    return n > 0 && n <= 20 && s[n] == '\0';
}

/* The signed time as Unix seconds in tally's range, or 0 (a time of 0, one
 * beyond the range: milliseconds, say). */
static int64_t time_seconds(const char *s)
{
    errno = 0;
    unsigned long long v = strtoull(s, NULL, 10);
    return errno == 0 && v <= (unsigned long long)(TALLY_TIME_MS_MAX / 1000) ? (int64_t)v : 0;
}

/* A signed scheme's verdict once its signatures were checked, the same
 * rule for every scheme that signs a time (docs/WEBHOOKS.md, "Time"): no
 * match is a bad signature; then a time older than the tolerance, 0 or
 * not in seconds (milliseconds) is stale, one more than the tolerance
 * ahead of tallyd's clock is clock_skew, counted apart. */
static webhook_outcome signed_verdict(const webhook_source *src, bool match, int64_t at_s,
                                      int64_t now_s)
{
    if (!match)
        return WEBHOOK_BAD_SIGNATURE;
    if (at_s <= 0 || now_s - at_s > (int64_t)src->tolerance_s)
        return WEBHOOK_STALE;
    return at_s - now_s > (int64_t)src->tolerance_s ? WEBHOOK_CLOCK_SKEW : WEBHOOK_ACCEPTED;
}

/* Copy s (up to max bytes) into out->text at *at as a tally_str. */
static bool keep(webhook_verified *out, size_t *at, const char *s, size_t len, size_t max,
                 tally_str *dst)
{
    if (len == 0 || len > max || *at + len > sizeof(out->text))
        return false;
    memcpy(out->text + *at, s, len);
    *dst = (tally_str){out->text + *at, len};
    *at += len;
    return true;
}

/* The body's top-level string fields id_name and type_name (either may be
 * NULL) as the event id and type: a body that is not a JSON object, or
 * lacks the id, is a bad request. */
static webhook_outcome json_names(const webhook_delivery *d, const char *id_name,
                                  const char *type_name, webhook_verified *out, size_t *at)
{
    json_error_t err;
    json_t *root = json_loadb(d->body, d->body_len, JSON_REJECT_DUPLICATES, &err);
    webhook_outcome r = WEBHOOK_BAD_REQUEST;
    if (root == NULL || !json_is_object(root))
        goto done;
    if (id_name) {
        const json_t *id = json_object_get(root, id_name);
        if (!json_is_string(id) || !keep(out, at, json_string_value(id), json_string_length(id),
                                         TALLY_WEBHOOK_EVENT_ID_BYTES_MAX, &out->event_id))
            goto done;
    }
    const json_t *type = type_name ? json_object_get(root, type_name) : NULL;
    if (json_is_string(type) && json_string_length(type) > 0 &&
        !keep(out, at, json_string_value(type), json_string_length(type),
              TALLY_WEBHOOK_EVENT_TYPE_BYTES_MAX, &out->event_type))
        goto done;
    r = WEBHOOK_ACCEPTED;
done:
    json_decref(root);
    return r;
}

static webhook_outcome verify_standard(const webhook_source *src, const webhook_delivery *d,
                                       webhook_verified *out)
{
    const char *id = d->header(d->header_ctx, "webhook-id");
    const char *ts = d->header(d->header_ctx, "webhook-timestamp");
    const char *sigs = d->header(d->header_ctx, "webhook-signature");
    if (id == NULL || sigs == NULL || !time_text(ts))
        return WEBHOOK_BAD_SIGNATURE;
    out->signed_at_s = time_seconds(ts);
    size_t id_len = strlen(id), ts_len = strlen(ts);
    if (id_len == 0 || id_len > TALLY_WEBHOOK_EVENT_ID_BYTES_MAX || ts_len > 20)
        return WEBHOOK_BAD_REQUEST; /* an id too long for the inbox key */
    char prefix[SIGNED_PREFIX_BYTES_MAX];
    size_t n = 0;
    memcpy(prefix, id, id_len), n += id_len, prefix[n++] = '.';
    memcpy(prefix + n, ts, ts_len), n += ts_len, prefix[n++] = '.';
    char *signed_text = signed_text_new(prefix, n, d, &n);
    if (signed_text == NULL)
        return WEBHOOK_UNAVAILABLE;
    bool match = false;
    for (const char *s = sigs; *s;) { /* "v1,<base64> v1,<base64> ..." */
        size_t len = strcspn(s, " ");
        uint8_t mac[SHA256_BYTES];
        if (len > 3 && strncmp(s, "v1,", 3) == 0 && base64_decode_mac(s + 3, len - 3, mac))
            match |= mac_matches(src, signed_text, n, mac);
        s += len + strspn(s + len, " ");
    }
    free(signed_text);
    webhook_outcome v = signed_verdict(src, match, out->signed_at_s, d->now_s);
    if (v != WEBHOOK_ACCEPTED)
        return v;
    size_t at = 0;
    if (!keep(out, &at, id, id_len, TALLY_WEBHOOK_EVENT_ID_BYTES_MAX, &out->event_id))
        return WEBHOOK_BAD_REQUEST;
    /* The type, when the body is JSON with one (the spec's payloads have
     * it); a body of another form is stored as it is, without a type. */
    (void)json_names(d, NULL, "type", out, &at);
    return WEBHOOK_ACCEPTED;
}

/* Stripe-Signature: t=<time>,v1=<hex>[,v1=<hex>...][,v0=...]. */
static webhook_outcome verify_stripe(const webhook_source *src, const webhook_delivery *d,
                                     webhook_verified *out)
{
    const char *header = d->header(d->header_ctx, "Stripe-Signature");
    if (header == NULL)
        return WEBHOOK_BAD_SIGNATURE;
    char t[24] = "";
    const char *v1[8];
    size_t v1_len[8], v1_count = 0;
    for (const char *s = header; *s;) {
        size_t len = strcspn(s, ",");
        if (len > 2 && strncmp(s, "t=", 2) == 0 && len - 2 < sizeof(t))
            memcpy(t, s + 2, len - 2), t[len - 2] = '\0';
        else if (len > 3 && strncmp(s, "v1=", 3) == 0 && v1_count < 8)
            v1[v1_count] = s + 3, v1_len[v1_count++] = len - 3;
        s += len + (s[len] == ',');
    }
    if (!time_text(t) || v1_count == 0)
        return WEBHOOK_BAD_SIGNATURE;
    out->signed_at_s = time_seconds(t);
    char prefix[sizeof(t) + 1];
    size_t n = strlen(t);
    memcpy(prefix, t, n), prefix[n++] = '.';
    char *signed_text = signed_text_new(prefix, n, d, &n);
    if (signed_text == NULL)
        return WEBHOOK_UNAVAILABLE;
    bool match = false;
    for (size_t i = 0; i < v1_count; i++) {
        uint8_t mac[SHA256_BYTES];
        if (hex_decode(v1[i], v1_len[i], mac))
            match |= mac_matches(src, signed_text, n, mac);
    }
    free(signed_text);
    webhook_outcome v = signed_verdict(src, match, out->signed_at_s, d->now_s);
    if (v != WEBHOOK_ACCEPTED)
        return v;
    size_t at = 0;
    return json_names(d, "id", "type", out, &at);
}

/* GitHub style: <signature_header>: sha256=<hex HMAC of the body>. The
 * signature covers the body and nothing else, so the id and the type come
 * from the body too: a header could be changed by anyone replaying the
 * signed body (a new X-GitHub-Delivery would store it again). The id is
 * the body's id_field, else the hex SHA-256 of the body; the type its
 * type_field, if any. */
static webhook_outcome verify_hmac(const webhook_source *src, const webhook_delivery *d,
                                   webhook_verified *out)
{
    const char *sig = d->header(d->header_ctx, src->signature_header);
    uint8_t mac[SHA256_BYTES];
    if (sig == NULL || strncmp(sig, "sha256=", 7) != 0 ||
        !hex_decode(sig + 7, strlen(sig + 7), mac) ||
        !mac_matches(src, d->body, d->body_len, mac))
        return WEBHOOK_BAD_SIGNATURE;
    out->signed_at_s = 0;
    size_t at = 0;
    if (src->id_field[0] == '\0') {
        uint8_t digest[SHA256_BYTES];
        char hex[2 * SHA256_BYTES + 1];
        sha256_digest(d->body, d->body_len, digest);
        for (size_t i = 0; i < SHA256_BYTES; i++)
            snprintf(hex + 2 * i, 3, "%02x", digest[i]);
        if (!keep(out, &at, hex, 2 * SHA256_BYTES, TALLY_WEBHOOK_EVENT_ID_BYTES_MAX,
                  &out->event_id))
            return WEBHOOK_BAD_REQUEST;
    }
    if (src->id_field[0] == '\0' && src->type_field[0] == '\0')
        return WEBHOOK_ACCEPTED;
    return json_names(d, src->id_field[0] ? src->id_field : NULL,
                      src->type_field[0] ? src->type_field : NULL, out, &at);
}

webhook_outcome webhook_verify(const webhook_source *src, const webhook_delivery *d,
                               webhook_verified *out)
{
    memset(out, 0, sizeof(*out));
    if (d->body_len > TALLY_WEBHOOK_BODY_BYTES_MAX)
        return WEBHOOK_TOO_LARGE;
    switch (src->scheme) {
    case WEBHOOK_STANDARD: return verify_standard(src, d, out);
    case WEBHOOK_STRIPE: return verify_stripe(src, d, out);
    case WEBHOOK_HMAC: return verify_hmac(src, d, out);
    }
    return WEBHOOK_BAD_SIGNATURE;
}
