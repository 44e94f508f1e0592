/*
 * webhook_config.c — the sources file of `tallyd --webhooks FILE` and the
 * secret files it names (webhooks.h; every option in docs/WEBHOOKS.md).
 * Read once, before tallyd serves: any error refuses the start, with the
 * file's name and line.
 */
#include "net/http/webhooks.h"

#include "common/error.h"
#include "common/file_mode.h"
#include "common/webhook_secret.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define LINE_BYTES_MAX 4096

typedef struct parse {
    const char *path;
    unsigned line;
    char *error;
    size_t error_size;
} parse;

static int fail(parse *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int fail(parse *p, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    file_line_message(p->error, p->error_size, p->path, p->line, fmt, ap);
    va_end(ap);
    return TALLY_invalid_argument;
}

const char *webhook_outcome_name(webhook_outcome o)
{
    static const char *const names[WEBHOOK_OUTCOMES] = {
        [WEBHOOK_ACCEPTED] = "accepted",           [WEBHOOK_REPLAYED] = "replayed",
        [WEBHOOK_CONFLICT] = "conflict",           [WEBHOOK_BAD_SIGNATURE] = "bad_signature",
        [WEBHOOK_STALE] = "stale_timestamp",       [WEBHOOK_BAD_REQUEST] = "bad_request",
        [WEBHOOK_TOO_LARGE] = "too_large",         [WEBHOOK_UNAVAILABLE] = "unavailable",
        [WEBHOOK_CLOCK_SKEW] = "clock_skew",
    };
    return (unsigned)o < WEBHOOK_OUTCOMES ? names[o] : "unknown";
}

static bool name_valid(const char *s)
{
    size_t n = strlen(s);
    return n > 0 && n <= TALLY_WEBHOOK_SOURCE_BYTES_MAX &&
           strspn(s, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._-") == n;
}

/* A secret file: one secret string, trailing white space dropped; only
 * its owner may read it (file_private_check, as tallyd's other secrets).
 * A file longer than the limit is refused, never cut; so is a secret
 * with a NUL or another control byte in it (two lines: two secrets?). */
static int read_secret(parse *p, const char *file, char *text, size_t size)
{
    char why[512];
    if (!file_private_check(file, "secret file", why, sizeof(why)))
        return fail(p, "%s", why);
    size_t n = 0;
    char *all = file_read_bounded(file, "secret file", TALLY_WEBHOOK_SECRET_FILE_BYTES_MAX, &n,
                                  why, sizeof(why));
    if (all == NULL)
        return fail(p, "%s", why);
    while (n > 0 && strchr(" \t\r\n", all[n - 1]))
        n--;
    bool control = false;
    for (size_t i = 0; i < n; i++)
        control |= (unsigned char)all[i] < 0x20 || all[i] == 0x7f;
    int rc = TALLY_ok;
    if (n == 0 || n >= size)
        rc = fail(p, "secret file %s: empty, or longer than %d bytes (nothing is cut)", file,
                  TALLY_WEBHOOK_SECRET_BYTES_MAX);
    else if (control)
        rc = fail(p, "secret file %s: one secret string, without control bytes or inner lines",
                  file);
    else
        memcpy(text, all, n), text[n] = '\0';
    memset(all, 0, n);
    free(all);
    return rc;
}

/* A key anyone could guess is refused: shorter than the minimum, or all
 * zero bytes (what a broken encoding decodes to). */
static int key_strong(parse *p, const char *file, const webhook_secret *k)
{
    bool zero = true;
    for (size_t i = 0; i < k->len; i++)
        zero &= k->bytes[i] == 0;
    if (k->len < TALLY_WEBHOOK_SECRET_BYTES_MIN)
        return fail(p, "secret file %s: the key is %zu bytes, at least %d are needed", file,
                    k->len, TALLY_WEBHOOK_SECRET_BYTES_MIN);
    if (zero)
        return fail(p, "secret file %s: the key is all zero bytes", file);
    return TALLY_ok;
}

/* The HMAC key of a secret string: a standard source's secret is
 * [whsec_]<base64 key> by the rule tally-relay's secrets follow too
 * (common/webhook_secret.h: strict base64, 24 to 64 bytes, not all zero);
 * the others' keys are the string itself. */
static int secret_key(parse *p, webhook_source *src, const char *file, const char *text,
                      webhook_secret *out)
{
    size_t n = strlen(text);
    if (src->scheme != WEBHOOK_STANDARD) {
        memcpy(out->bytes, text, n);
        out->len = n;
        return key_strong(p, file, out);
    }
    char why[128];
    if (!standard_secret_decode(text, n, out->bytes, &out->len, why, sizeof(why)))
        return fail(p, "secret file %s: %s", file, why);
    return key_strong(p, file, out);
}

static int read_secrets(parse *p, webhook_source *src, char *list)
{
    char *save = NULL;
    for (char *file = strtok_r(list, ",", &save); file; file = strtok_r(NULL, ",", &save)) {
        if (src->secret_count == TALLY_WEBHOOK_SECRETS_MAX)
            return fail(p, "more than %d secret files", TALLY_WEBHOOK_SECRETS_MAX);
        char text[TALLY_WEBHOOK_SECRET_BYTES_MAX + 1];
        int rc = read_secret(p, file, text, sizeof(text));
        if (rc == TALLY_ok)
            rc = secret_key(p, src, file, text, &src->secrets[src->secret_count++]);
        if (rc != TALLY_ok)
            return rc;
    }
    return src->secret_count ? TALLY_ok : fail(p, "no secret file");
}

static int set_text(parse *p, char *dst, size_t size, const char *key, const char *value)
{
    if (value[0] == '\0' || strlen(value) >= size)
        return fail(p, "%s: 1-%zu bytes", key, size - 1);
    strcpy(dst, value);
    return TALLY_ok;
}

/* One OPTION=VALUE of a source. */
static int set_option(parse *p, webhook_source *src, char *word)
{
    char *eq = strchr(word, '=');
    if (eq == NULL)
        return fail(p, "%s: options are OPTION=VALUE", word);
    *eq = '\0';
    const char *key = word, *value = eq + 1;
    bool hmac = src->scheme == WEBHOOK_HMAC;
    if (strcmp(key, "tolerance") == 0 && !hmac) {
        char *end;
        unsigned long s = strtoul(value, &end, 10);
        if (*value == '\0' || *end != '\0' || s == 0 || s > TALLY_WEBHOOK_TOLERANCE_S_MAX)
            return fail(p, "tolerance: seconds, 1-%d", TALLY_WEBHOOK_TOLERANCE_S_MAX);
        src->tolerance_s = (unsigned)s;
        return TALLY_ok;
    }
    if (hmac && strcmp(key, "signature_header") == 0)
        return set_text(p, src->signature_header, sizeof(src->signature_header), key, value);
    if (hmac && strcmp(key, "id_field") == 0)
        return set_text(p, src->id_field, sizeof(src->id_field), key, value);
    if (hmac && strcmp(key, "type_field") == 0)
        return set_text(p, src->type_field, sizeof(src->type_field), key, value);
    if (hmac && (strcmp(key, "id_header") == 0 || strcmp(key, "type_header") == 0))
        return fail(p,
                    "%s: an hmac-sha256 signature covers the body only, so a delivery could "
                    "be stored again under another %s; the id is the body's SHA-256 or "
                    "id_field=, the type type_field= (docs/WEBHOOKS.md)",
                    key, strcmp(key, "id_header") == 0 ? "id" : "type");
    return fail(p, "%s: not an option of this scheme (docs/WEBHOOKS.md)", key);
}

static int parse_scheme(parse *p, const char *word, webhook_source *src)
{
    if (strcmp(word, "standard") == 0)
        src->scheme = WEBHOOK_STANDARD;
    else if (strcmp(word, "stripe") == 0)
        src->scheme = WEBHOOK_STRIPE;
    else if (strcmp(word, "hmac-sha256") == 0)
        src->scheme = WEBHOOK_HMAC;
    else
        return fail(p, "%s: the scheme is standard, stripe or hmac-sha256", word);
    src->tolerance_s = TALLY_WEBHOOK_TOLERANCE_S_DEFAULT;
    if (src->scheme == WEBHOOK_HMAC) /* GitHub's header */
        strcpy(src->signature_header, "X-Hub-Signature-256");
    return TALLY_ok;
}

/* One line's words into a new source of w. */
static int parse_line(parse *p, net_webhooks *w, char *line)
{
    char *save = NULL, *words[3];
    for (int i = 0; i < 3; i++)
        if ((words[i] = strtok_r(i ? NULL : line, " \t", &save)) == NULL)
            return fail(p, "a source is NAME SCHEME SECRET-FILE[,SECRET-FILE...] [OPTION=VALUE...]");
    if (!name_valid(words[0]))
        return fail(p, "%s: a name is 1-%d bytes of A-Z a-z 0-9 . _ -", words[0],
                    TALLY_WEBHOOK_SOURCE_BYTES_MAX);
    if (webhooks_find(w, words[0]))
        return fail(p, "%s: named twice", words[0]);
    if (w->count == TALLY_WEBHOOK_SOURCES_MAX)
        return fail(p, "more than %d sources", TALLY_WEBHOOK_SOURCES_MAX);
    webhook_source *src = &w->sources[w->count];
    memset(src, 0, sizeof(*src));
    snprintf(src->name, sizeof(src->name), "%s", words[0]);
    snprintf(src->consumer, sizeof(src->consumer), TALLY_WEBHOOK_CONSUMER_PREFIX "%s", words[0]);
    int rc = parse_scheme(p, words[1], src);
    for (char *opt; rc == TALLY_ok && (opt = strtok_r(NULL, " \t", &save));)
        rc = set_option(p, src, opt);
    if (rc == TALLY_ok) /* after the options: a line with a bad option reads no secret */
        rc = read_secrets(p, src, words[2]);
    if (rc == TALLY_ok)
        w->count++;
    return rc;
}

static int parse_file(parse *p, FILE *f, net_webhooks *w)
{
    char line[LINE_BYTES_MAX];
    while (fgets(line, sizeof(line), f)) {
        p->line++;
        size_t n = strlen(line);
        if (n == sizeof(line) - 1 && line[n - 1] != '\n')
            return fail(p, "a line is at most %d bytes", LINE_BYTES_MAX - 2);
        line[strcspn(line, "#\r\n")] = '\0';
        if (line[strspn(line, " \t")] == '\0')
            continue;
        int rc = parse_line(p, w, line);
        if (rc != TALLY_ok)
            return rc;
    }
    p->line++;
    return w->count ? TALLY_ok : fail(p, "no source in the file");
}

/* The sources of f, read as the file named path. */
static int load_from(const char *path, FILE *f, net_webhooks **out, char *error,
                     size_t error_size)
{
    parse p = {path, 0, error, error_size};
    *out = NULL;
    if (f == NULL)
        return fail(&p, "cannot read the file");
    net_webhooks *w = calloc(1, sizeof(*w));
    if (w)
        w->sources = calloc(TALLY_WEBHOOK_SOURCES_MAX, sizeof(webhook_source));
    int rc = w && w->sources ? parse_file(&p, f, w) : fail(&p, "out of memory");
    fclose(f);
    if (rc != TALLY_ok) {
        webhooks_free(w);
        return rc;
    }
    *out = w;
    return TALLY_ok;
}

int webhooks_load(const char *path, net_webhooks **out, char *error, size_t error_size)
{
    return load_from(path, fopen(path, "r"), out, error, error_size);
}

int webhooks_parse(const char *name, const char *text, size_t len, net_webhooks **out,
                   char *error, size_t error_size)
{
    FILE *f = len ? fmemopen((void *)text, len, "r") : fopen("/dev/null", "r");
    return load_from(name, f, out, error, error_size);
}

void webhooks_free(net_webhooks *w)
{
    if (w == NULL)
        return;
    if (w->sources) /* the secrets do not outlive their use */
        memset(w->sources, 0, TALLY_WEBHOOK_SOURCES_MAX * sizeof(webhook_source));
    free(w->sources);
    free(w);
}

webhook_source *webhooks_find(net_webhooks *w, const char *name)
{
    for (unsigned i = 0; w && i < w->count; i++)
        if (strcmp(w->sources[i].name, name) == 0)
            return &w->sources[i];
    return NULL;
}
