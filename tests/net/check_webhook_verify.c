/*
 * check_webhook_verify.c — tests of the sources file (net/http/webhook_config.c)
 * and the signature checks (net/http/webhook_verify.c) without a server: the
 * Standard Webhooks specification's own example (secret, id, timestamp,
 * payload and the signature it publishes) verifies; a changed byte of the
 * body, id or timestamp, another secret, or a time outside the tolerance
 * does not; every line error names the file and line; a secret file that
 * others may read, and a weak secret, are refused; hmac-sha256 deliveries
 * are identified by what their signature covers (the body). Deliveries
 * through tallyd are tests/net/check_webhooks.sh.
 */
#include "tests/support/suite.h"
#include "tests/support/test_support.h"

#include "net/http/webhooks.h"

#include <ctype.h>
#include <fcntl.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/sha.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* The example of the Standard Webhooks specification (standardwebhooks.com,
 * "Verifying"): computed by them, not by tally. */
#define SPEC_SECRET "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
#define SPEC_ID "msg_p5jXN8AQM9LWM0D4loKWxJek"
#define SPEC_TIMESTAMP "1614265330"
#define SPEC_BODY "{\"test\": 2432232314}"
#define SPEC_SIGNATURE "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
#define MS_SIGNATURE "v1,rTuMKFUiBNE7gJ41LZxwvD1dtGO0rPk1IamJN9BSq2w="   /* time 1614265330000 */
#define ZERO_SIGNATURE "v1,6JNthw4DtDhc3tFxR0yL2tKk3DGy4nWCVnGrycO3mk0=" /* time 0 */
#define HMAC_SECRET "github-style-secret-0123"

typedef struct headers {
    const char *names[4];
    const char *values[4];
} headers;

static const char *header_of(const void *ctx, const char *name)
{
    const headers *h = ctx;
    for (int i = 0; i < 4 && h->names[i]; i++)
        if (strcasecmp(h->names[i], name) == 0)
            return h->values[i];
    return NULL;
}

static char dir[256];

static void write_file(const char *name, const char *text, mode_t mode, char *path, size_t size)
{
    snprintf(path, size, "%s/%s", dir, name);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, mode);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(write(fd, text, strlen(text)), (ssize_t)strlen(text));
    fchmod(fd, mode);
    close(fd);
}

/* Load a sources file of one line "NAME SCHEME <secret file> OPTIONS". */
static int load(const char *line_fmt, const char *secret, mode_t mode, net_webhooks **out,
                char *error, size_t error_size)
{
    char secret_path[512], conf_path[512], conf[1024];
    write_file("secret", secret, mode, secret_path, sizeof(secret_path));
    snprintf(conf, sizeof(conf), line_fmt, secret_path);
    write_file("hooks.conf", conf, 0600, conf_path, sizeof(conf_path));
    return webhooks_load(conf_path, out, error, error_size);
}

static void setup(void)
{
    snprintf(dir, sizeof(dir), "/tmp/tally-webhook-verify.XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(dir));
}

static void teardown(void) { test_remove_dir(dir); }

static webhook_outcome verify_standard(const webhook_source *src, const char *id,
                                       const char *ts, const char *sig, const char *body,
                                       int64_t now_s, webhook_verified *v)
{
    headers h = {{"webhook-id", "webhook-timestamp", "webhook-signature", NULL},
                 {id, ts, sig, NULL}};
    webhook_delivery d = {header_of, &h, body, strlen(body), now_s};
    return webhook_verify(src, &d, v);
}

/* The sources file of one standard source "std" with the spec's secret. */
static net_webhooks *spec_source(webhook_source **src)
{
    setup();
    net_webhooks *w = NULL;
    char error[512];
    ck_assert_int_eq(load("std standard %s\n", SPEC_SECRET "\n", 0600, &w, error, sizeof(error)),
                     TALLY_ok);
    *src = webhooks_find(w, "std");
    return w;
}

START_TEST(test_standard_spec_example)
{
    webhook_source *src;
    net_webhooks *w = spec_source(&src);
    char error[512];
    ck_assert_ptr_nonnull(src);
    ck_assert_str_eq(src->consumer, "webhook:std");
    webhook_verified v;
    int64_t at = 1614265330;
    ck_assert_int_eq(verify_standard(src, SPEC_ID, SPEC_TIMESTAMP, SPEC_SIGNATURE, SPEC_BODY,
                                     at + 10, &v), WEBHOOK_ACCEPTED);
    ck_assert(tally_str_equal(v.event_id, tally_str_from(SPEC_ID)));
    ck_assert_int_eq(v.signed_at_s, at);
    ck_assert_uint_eq(v.event_type.len, 0); /* the body has no "type" */
    /* Among other signatures, in any place. */
    ck_assert_int_eq(verify_standard(src, SPEC_ID, SPEC_TIMESTAMP,
                                     "v1,bm9wZQ== " SPEC_SIGNATURE " v2,xyz", SPEC_BODY, at, &v),
                     WEBHOOK_ACCEPTED);
    ck_assert_int_eq(verify_standard(src, SPEC_ID, SPEC_TIMESTAMP, SPEC_SIGNATURE,
                                     "{\"test\": 2432232315}", at, &v), WEBHOOK_BAD_SIGNATURE);
    ck_assert_int_eq(verify_standard(src, "msg_p5jXN8AQM9LWM0D4loKWxJeK", SPEC_TIMESTAMP,
                                     SPEC_SIGNATURE, SPEC_BODY, at, &v), WEBHOOK_BAD_SIGNATURE);
    ck_assert_int_eq(verify_standard(src, SPEC_ID, "1614265331", SPEC_SIGNATURE, SPEC_BODY, at,
                                     &v), WEBHOOK_BAD_SIGNATURE);
    ck_assert_int_eq(verify_standard(src, SPEC_ID, SPEC_TIMESTAMP, NULL, SPEC_BODY, at, &v),
                     WEBHOOK_BAD_SIGNATURE);
    /* one rule for every scheme: older than the tolerance is stale, more
     * than the tolerance ahead of tallyd's clock is clock_skew */
    ck_assert_int_eq(verify_standard(src, SPEC_ID, SPEC_TIMESTAMP, SPEC_SIGNATURE, SPEC_BODY,
                                     at + 301, &v), WEBHOOK_STALE);
    ck_assert_int_eq(verify_standard(src, SPEC_ID, SPEC_TIMESTAMP, SPEC_SIGNATURE, SPEC_BODY,
                                     at - 301, &v), WEBHOOK_CLOCK_SKEW);
    ck_assert_int_eq(verify_standard(src, SPEC_ID, SPEC_TIMESTAMP, SPEC_SIGNATURE, SPEC_BODY,
                                     at - 300, &v), WEBHOOK_ACCEPTED);
    webhooks_free(w);
    /* Another secret does not verify it; a tolerance option moves the window. */
    ck_assert_int_eq(load("std standard %s tolerance=1000\n", "whsec_YW5vdGhlci1zZWNyZXQta2V5LTEyMzQ1\n",
                          0600, &w, error, sizeof(error)), TALLY_ok);
    ck_assert_int_eq(verify_standard(webhooks_find(w, "std"), SPEC_ID, SPEC_TIMESTAMP,
                                     SPEC_SIGNATURE, SPEC_BODY, at, &v), WEBHOOK_BAD_SIGNATURE);
    webhooks_free(w);
    teardown();
}
END_TEST

START_TEST(test_file_errors_name_file_and_line)
{
    static const struct {
        const char *line, *says;
    } bad[] = {
        {"# only a comment\n", ":2: no source in the file"},
        {"a stripe\n", ":1: a source is NAME SCHEME"},
        {"a nosuch %s\n", ":1: nosuch: the scheme is standard, stripe or hmac-sha256"},
        {"a/b stripe %s\n", ":1: a/b: a name is"},
        {"a stripe %s tolerance=0\n", ":1: tolerance: seconds"},
        {"a stripe %s id_field=id\n", ":1: id_field: not an option of this scheme"},
        {"a hmac-sha256 %s tolerance=5\n", ":1: tolerance: not an option of this scheme"},
        {"a hmac-sha256 %s bare\n", ":1: bare: options are OPTION=VALUE"},
        {"\n\na stripe %1$s\na stripe %1$s\n", ":4: a: named twice"},
        {"a standard %s\n", ":1: secret file"}, /* not whsec_ base64 */
        {"a stripe /nonexistent/secret\n", ":1: secret file /nonexistent/secret: No such file"},
    };
    setup();
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        net_webhooks *w = NULL;
        char error[512];
        ck_assert_int_eq(load(bad[i].line, "not-base64-but-long-enough!\n", 0600, &w, error,
                              sizeof(error)),
                         TALLY_invalid_argument);
        ck_assert_ptr_null(w);
        ck_assert_msg(strstr(error, "hooks.conf") && strstr(error, bad[i].says),
                      "line %zu: %s", i, error);
    }
    teardown();
}
END_TEST

START_TEST(test_readable_secret_is_refused)
{
    setup();
    static const mode_t modes[] = {0640, 0604, 0620, 0660, 0644};
    for (size_t i = 0; i < sizeof(modes) / sizeof(modes[0]); i++) {
        net_webhooks *w = NULL;
        char error[512];
        ck_assert_int_eq(load("a stripe %s\n", "whsec_0123456789abcdef\n", modes[i], &w, error,
                              sizeof(error)),
                         TALLY_invalid_argument);
        ck_assert_msg(strstr(error, "group or others may read it"), "%s", error);
    }
    net_webhooks *w = NULL;
    char error[512];
    ck_assert_int_eq(load("a stripe %s\n", "whsec_0123456789abcdef\n", 0400, &w, error,
                          sizeof(error)),
                     TALLY_ok);
    ck_assert_uint_eq(w->count, 1);
    ck_assert_uint_eq(w->sources[0].secrets[0].len, 22); /* the newline dropped */
    webhooks_free(w);
    teardown();
}
END_TEST

/* A secret "file" that is a pipe (mode 0600) is refused at once: reading it
 * would block the start. The same sources text parses from memory. */
START_TEST(test_secret_that_is_not_a_file_is_refused)
{
    setup();
    char fifo[512], conf[1024], error[512];
    snprintf(fifo, sizeof(fifo), "%s/secret.fifo", dir);
    ck_assert_int_eq(mkfifo(fifo, 0600), 0);
    int n = snprintf(conf, sizeof(conf), "a stripe %s\n", fifo);
    net_webhooks *w = NULL;
    ck_assert_int_eq(webhooks_parse("mem.conf", conf, (size_t)n, &w, error, sizeof(error)),
                     TALLY_invalid_argument);
    ck_assert_ptr_null(w);
    ck_assert_msg(strstr(error, "mem.conf:1: secret file") && strstr(error, "not a regular file"),
                  "%s", error);
    char secret[512];
    write_file("secret", "whsec_0123456789abcdef\n", 0600, secret, sizeof(secret));
    n = snprintf(conf, sizeof(conf), "# from memory\na stripe %s\n", secret);
    ck_assert_int_eq(webhooks_parse("mem.conf", conf, (size_t)n, &w, error, sizeof(error)),
                     TALLY_ok);
    ck_assert_uint_eq(w->count, 1);
    webhooks_free(w);
    teardown();
}
END_TEST

/* Signature headers as an attacker writes them: each refused, none read
 * past its end (ASan in CI), the one well-formed one accepted. */
/* A Standard Webhooks delivery signed right but with a time in
 * milliseconds, or 0, is stale_timestamp, not bad_signature (which would
 * send whoever debugs the sender after the secret). Signatures by
 * `openssl dgst -sha256 -mac HMAC` with the spec's key over
 * "<id>.<time>.<body>". */
START_TEST(test_standard_time_not_in_seconds_is_stale)
{
    webhook_source *src;
    net_webhooks *w = spec_source(&src);
    webhook_verified v;
    ck_assert_int_eq(verify_standard(src, SPEC_ID, "1614265330000", MS_SIGNATURE, SPEC_BODY,
                                     1614265330, &v), WEBHOOK_STALE);
    ck_assert_int_eq(verify_standard(src, SPEC_ID, "0", ZERO_SIGNATURE, SPEC_BODY, 1614265330,
                                     &v), WEBHOOK_STALE);
    /* the same times with a wrong signature stay bad_signature */
    ck_assert_int_eq(verify_standard(src, SPEC_ID, "0", SPEC_SIGNATURE, SPEC_BODY, 1614265330,
                                     &v), WEBHOOK_BAD_SIGNATURE);
    webhooks_free(w);
    teardown();
}
END_TEST

START_TEST(test_hostile_signature_headers)
{
    setup();
    net_webhooks *w = NULL;
    char error[512];
    ck_assert_int_eq(load("pay stripe %s\n", "whsec_hostile-test-key\n", 0600, &w, error, sizeof(error)),
                     TALLY_ok);
    const webhook_source *pay = webhooks_find(w, "pay");
    static const char body[] = "{\"id\":\"evt_1\",\"type\":\"t\"}";
    /* HMAC-SHA256("whsec_hostile-test-key", "1700000000." body), computed by
     * `openssl dgst -sha256 -hmac whsec_hostile-test-key`. */
    static const char good[] =
        "t=1700000000,v1=3e82ee971d4d6ab69ce2e72664e32fcd51088604ddf9e933d9ac3ef59be3ed7b";
    static const char *const hostile[] = {
        "", ",", ",,,,", "t=", "v1=", "t=1700000000", "t=1700000000,v1=",
        "t=1700000000,v1=zz", "t=1700000000,v1=00",
        "t=-1,v1=3e82ee971d4d6ab69ce2e72664e32fcd51088604ddf9e933d9ac3ef59be3ed7b",
        "t=99999999999999999999999,v1=3e82ee971d4d6ab69ce2e72664e32fcd51088604ddf9e933d9ac3ef59be3ed7b",
        "t=1700000000 ,v1=3e82ee971d4d6ab69ce2e72664e32fcd51088604ddf9e933d9ac3ef59be3ed7b",
        "t=1700000000,v1=3e82ee971d4d6ab69ce2e72664e32fcd51088604ddf9e933d9ac3ef59be3ed7",
        "t=1700000000,v1=3e82ee971d4d6ab69ce2e72664e32fcd51088604ddf9e933d9ac3ef59be3ed7ff",
        "t=1700000000,v0=3e82ee971d4d6ab69ce2e72664e32fcd51088604ddf9e933d9ac3ef59be3ed7b",
        "v1=3e82ee971d4d6ab69ce2e72664e32fcd51088604ddf9e933d9ac3ef59be3ed7b",
    };
    webhook_verified v;
    for (size_t i = 0; i < sizeof(hostile) / sizeof(hostile[0]); i++) {
        headers h = {{"Stripe-Signature", NULL}, {hostile[i], NULL}};
        webhook_delivery d = {header_of, &h, body, strlen(body), 1700000000};
        ck_assert_msg(webhook_verify(pay, &d, &v) == WEBHOOK_BAD_SIGNATURE, "header %zu", i);
    }
    headers h = {{"Stripe-Signature", NULL}, {good, NULL}};
    webhook_delivery d = {header_of, &h, body, strlen(body), 1700000000};
    /* the time rule of every scheme: 600 s old is stale, 600 s ahead of
     * tallyd's clock is clock_skew, within 300 s either way is taken */
    d.now_s = 1700000000 + 600;
    ck_assert_int_eq(webhook_verify(pay, &d, &v), WEBHOOK_STALE);
    d.now_s = 1700000000 - 600;
    ck_assert_int_eq(webhook_verify(pay, &d, &v), WEBHOOK_CLOCK_SKEW);
    d.now_s = 1700000000 - 300;
    ck_assert_int_eq(webhook_verify(pay, &d, &v), WEBHOOK_ACCEPTED);
    /* the same signature in upper-case hex: refused, as stripe-node does */
    char upper[sizeof(good)];
    for (size_t i = 0; i < sizeof(good); i++)
        upper[i] = i > strlen("t=1700000000,v1=") ? (char)toupper((unsigned char)good[i]) : good[i];
    headers hup = {{"Stripe-Signature", NULL}, {upper, NULL}};
    webhook_delivery dup = {header_of, &hup, body, strlen(body), 1700000000};
    ck_assert_int_eq(webhook_verify(pay, &dup, &v), WEBHOOK_BAD_SIGNATURE);
    d.now_s = 1700000000;
    ck_assert_int_eq(webhook_verify(pay, &d, &v), WEBHOOK_ACCEPTED);
    ck_assert(tally_str_equal(v.event_id, tally_str_from("evt_1")));
    ck_assert(tally_str_equal(v.event_type, tally_str_from("t")));
    /* Signed, but not an object with an id: a bad request (not stored).
     * Signatures by openssl dgst as above. */
    static const struct {
        const char *body, *v1;
    } unusable[] = {
        {"", "34dd9d4872d81413dbf2f3fa39e50d17c542e06a950b79b2b4a4bccc30b6f5dd"},
        {"[]", "05abb749b88ccbfed6306c715353f49594960ecc1a1246f93763dbeea16ecaed"},
        {"{\"id\":1}", "49a049b8a6d306637fca53383f5780da43d17d471b8dd2ab62f658decb68f11e"},
        {"{\"id\":\"\"}", "70cd6995dcf385432b87035a53e37dbf37963dd1125120b0a5a1cfceb814223f"},
        {"{\"id\"", "139e7d1c28a0eece757f4c546a2db84fa47e4c6f17ef6d0c33bb7b9722c5ba8f"},
    };
    for (size_t i = 0; i < sizeof(unusable) / sizeof(unusable[0]); i++) {
        char header[128];
        snprintf(header, sizeof(header), "t=1700000000,v1=%s", unusable[i].v1);
        headers hu = {{"Stripe-Signature", NULL}, {header, NULL}};
        webhook_delivery du = {header_of, &hu, unusable[i].body, strlen(unusable[i].body),
                               1700000000};
        ck_assert_msg(webhook_verify(pay, &du, &v) == WEBHOOK_BAD_REQUEST, "body %zu", i);
    }
    webhooks_free(w);
    teardown();
}
END_TEST

/* Weak secrets refuse the start, each with the file, the line and the
 * secret file: invalid base64 where base64 is expected, a key of zero
 * bytes, all zero or shorter than 16 bytes, inner lines or control bytes,
 * and a file longer than the limit (refused, never cut). */
START_TEST(test_weak_secrets_are_refused)
{
    static const struct {
        const char *line, *secret, *says;
    } weak[] = {
        {"a standard %s\n", "whsec_====\n", "is base64"},
        {"a standard %s\n", "whsec_AB=C\n", "is base64"},
        {"a standard %s\n", "whsec_YW5vdGhlci1zZWNyZXQta2V5LTEyMzQ\n", "is base64"},
        {"a standard %s\n", "whsec_\n", "is base64"},
        {"a standard %s\n", "whsec_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=\n",
         "all zero bytes"},
        {"a standard %s\n", "whsec_MTIzNDU2Nzg=\n", "the key is 8 bytes; Standard Webhooks keys are 24 to 64"},
        {"a standard %s\n", "whsec_YW5vdGhlci1zZWNyZXQta2V5LTEyMzQ=\n", "the key is 23 bytes; Standard"},
        {"a stripe %s\n", "whsec_short\n", "the key is 11 bytes, at least 16"},
        {"a hmac-sha256 %s\n", "0123456789abcde\n", "the key is 15 bytes, at least 16"},
        {"a hmac-sha256 %s\n", "0123456789abcdef\nsecond-secret-line\n", "inner lines"},
        {"a hmac-sha256 %s\n", "0123456789ab\tcdef\x01\n", "control bytes"},
        {"a hmac-sha256 %s\n", "   \n\n", "empty, or longer than 256 bytes"},
    };
    setup();
    char error[512];
    for (size_t i = 0; i < sizeof(weak) / sizeof(weak[0]); i++) {
        net_webhooks *w = NULL;
        ck_assert_int_eq(load(weak[i].line, weak[i].secret, 0600, &w, error, sizeof(error)),
                         TALLY_invalid_argument);
        ck_assert_ptr_null(w);
        ck_assert_msg(strstr(error, "hooks.conf:1: secret file") && strstr(error, weak[i].says),
                      "secret %zu: %s", i, error);
    }
    /* 558 bytes: 300 of secret, then white space and more text: refused
     * whole, not cut to what fits; a file over 4096 bytes likewise. */
    char big[5000];
    memset(big, 'k', 300);
    memset(big + 300, ' ', 200);
    memcpy(big + 500, "tail-of-the-secret-file-0123456789-0123456789-0123456789\n", 58);
    big[558] = '\0';
    net_webhooks *w = NULL;
    ck_assert_int_eq(load("a hmac-sha256 %s\n", big, 0600, &w, error, sizeof(error)),
                     TALLY_invalid_argument);
    ck_assert_msg(strstr(error, "longer than 256 bytes"), "%s", error);
    memset(big, 'k', sizeof(big) - 1);
    big[sizeof(big) - 1] = '\0';
    ck_assert_int_eq(load("a hmac-sha256 %s\n", big, 0600, &w, error, sizeof(error)),
                     TALLY_invalid_argument);
    ck_assert_msg(strstr(error, "larger than 4096 bytes"), "%s", error);
    /* 256 bytes and trailing white space: the largest secret is taken. */
    memset(big, 'k', 256);
    memcpy(big + 256, " \r\n\n", 5);
    ck_assert_int_eq(load("a hmac-sha256 %s\n", big, 0600, &w, error, sizeof(error)), TALLY_ok);
    ck_assert_uint_eq(w->sources[0].secrets[0].len, 256);
    webhooks_free(w);
    teardown();
}
END_TEST

static const char *hex_format = "%02x"; /* "%02X": the signature in upper case */

static webhook_outcome verify_hmac(const webhook_source *src, const char *body,
                                   const char *delivery, const char *event,
                                   webhook_verified *v)
{
    uint8_t mac[32];
    unsigned mac_len = sizeof(mac);
    HMAC(EVP_sha256(), HMAC_SECRET, (int)strlen(HMAC_SECRET), (const uint8_t *)body,
         strlen(body), mac, &mac_len);
    static char sig[80];
    strcpy(sig, "sha256=");
    for (int i = 0; i < 32; i++)
        sprintf(sig + 7 + 2 * i, hex_format, mac[i]);
    headers h = {{src->signature_header, "X-GitHub-Delivery", "X-GitHub-Event", NULL},
                 {sig, delivery, event, NULL}};
    webhook_delivery d = {header_of, &h, body, strlen(body), 1700000000};
    return webhook_verify(src, &d, v);
}

/* hmac-sha256 signs the body alone: the same signed body under another
 * X-GitHub-Delivery or X-GitHub-Event has the same event id (the body's
 * SHA-256, computed here by OpenSSL) and no type from a header, so the
 * inbox sees a replay; id_field and type_field take them from the body;
 * a config asking for an unsigned id or type header is refused. */
START_TEST(test_hmac_dedupes_on_what_is_signed)
{
    setup();
    net_webhooks *w = NULL;
    char error[512];
    ck_assert_int_eq(load("gh hmac-sha256 %s\n", HMAC_SECRET "\n", 0600, &w, error,
                          sizeof(error)),
                     TALLY_ok);
    const webhook_source *gh = webhooks_find(w, "gh");
    static const char body[] = "{\"action\":\"opened\",\"number\":1}";
    uint8_t digest[32];
    SHA256((const uint8_t *)body, strlen(body), digest);
    char hex[65];
    for (int i = 0; i < 32; i++)
        sprintf(hex + 2 * i, "%02x", digest[i]);
    static const char *const ids[][2] = {{"d-1", "issues"}, {"d-2", "issues"}, {"d-1", "push"},
                                         {NULL, NULL}};
    for (size_t i = 0; i < sizeof(ids) / sizeof(ids[0]); i++) {
        webhook_verified v;
        ck_assert_int_eq(verify_hmac(gh, body, ids[i][0], ids[i][1], &v), WEBHOOK_ACCEPTED);
        ck_assert_msg(tally_str_equal(v.event_id, tally_str_from(hex)), "delivery %zu: %.*s", i,
                      (int)v.event_id.len, v.event_id.ptr);
        ck_assert_uint_eq(v.event_type.len, 0);
    }
    /* upper-case hex is refused, as by GitHub's own library */
    webhook_verified upper;
    hex_format = "%02X";
    ck_assert_int_eq(verify_hmac(gh, body, "d-1", "issues", &upper), WEBHOOK_BAD_SIGNATURE);
    hex_format = "%02x";
    webhooks_free(w);

    ck_assert_int_eq(load("j hmac-sha256 %s id_field=delivery_id type_field=kind\n",
                          HMAC_SECRET "\n", 0600, &w, error, sizeof(error)),
                     TALLY_ok);
    const webhook_source *j = webhooks_find(w, "j");
    webhook_verified v;
    ck_assert_int_eq(verify_hmac(j, "{\"delivery_id\":\"j-1\",\"kind\":\"push\"}", "x", "y", &v),
                     WEBHOOK_ACCEPTED);
    ck_assert(tally_str_equal(v.event_id, tally_str_from("j-1")));
    ck_assert(tally_str_equal(v.event_type, tally_str_from("push")));
    ck_assert_int_eq(verify_hmac(j, "{\"kind\":\"push\"}", "j-1", "push", &v),
                     WEBHOOK_BAD_REQUEST); /* no id in the body: the header is not used */
    webhooks_free(w);

    ck_assert_int_eq(load("t hmac-sha256 %s type_field=kind\n", HMAC_SECRET "\n", 0600, &w,
                          error, sizeof(error)),
                     TALLY_ok);
    ck_assert_int_eq(verify_hmac(webhooks_find(w, "t"), "{\"kind\":\"push\"}", "z", "q", &v),
                     WEBHOOK_ACCEPTED);
    ck_assert_uint_eq(v.event_id.len, 64);
    ck_assert(tally_str_equal(v.event_type, tally_str_from("push")));
    webhooks_free(w);

    static const char *const unsigned_headers[] = {
        "\na hmac-sha256 %s id_header=X-GitHub-Delivery\n",
        "\na hmac-sha256 %s type_header=X-GitHub-Event\n",
    };
    for (size_t i = 0; i < 2; i++) {
        ck_assert_int_eq(load(unsigned_headers[i], HMAC_SECRET "\n", 0600, &w, error,
                              sizeof(error)),
                         TALLY_invalid_argument);
        ck_assert_msg(strstr(error, "hooks.conf:2: ") &&
                          strstr(error, i ? "type_header: an hmac-sha256 signature covers the body"
                                          : "id_header: an hmac-sha256 signature covers the body"),
                      "%s", error);
    }
    teardown();
}
END_TEST

#define TIMEOUT_S 30

int main(void)
{
    const test_row tests[] = {
        {"standard", test_standard_spec_example, TIMEOUT_S},
        {"standard", test_standard_time_not_in_seconds_is_stale, TIMEOUT_S},
        {"file", test_file_errors_name_file_and_line, TIMEOUT_S},
        {"file", test_readable_secret_is_refused, TIMEOUT_S},
        {"file", test_secret_that_is_not_a_file_is_refused, TIMEOUT_S},
        {"stripe", test_hostile_signature_headers, TIMEOUT_S},
        {"file", test_weak_secrets_are_refused, TIMEOUT_S},
        {"hmac", test_hmac_dedupes_on_what_is_signed, TIMEOUT_S},
    };
    return test_run_suite(test_suite_of_rows("webhook_verify", TEST_ROWS(tests)));
}
