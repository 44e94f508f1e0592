/*
 * check_webhook_verify.c — tests of the sources file (net/http/webhook_config.c)
 * and the signature checks (net/http/webhook_verify.c) without a server: the
 * Standard Webhooks specification's own example (secret, id, timestamp,
 * payload and the signature it publishes) verifies; a changed byte of the
 * body, id or timestamp, another secret, or a time outside the tolerance
 * does not; every line error names the file and line; a secret file that
 * others may read is refused. Deliveries through tallyd are
 * tests/net/check_webhooks.sh.
 */
#include "tests/support/suite.h"
#include "tests/support/test_support.h"

#include "net/http/webhooks.h"

#include <fcntl.h>
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

START_TEST(test_standard_spec_example)
{
    setup();
    net_webhooks *w = NULL;
    char error[512];
    ck_assert_int_eq(load("std standard %s\n", SPEC_SECRET "\n", 0600, &w, error, sizeof(error)),
                     TALLY_ok);
    webhook_source *src = webhooks_find(w, "std");
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
    ck_assert_int_eq(verify_standard(src, SPEC_ID, SPEC_TIMESTAMP, SPEC_SIGNATURE, SPEC_BODY,
                                     at + 301, &v), WEBHOOK_STALE);
    ck_assert_int_eq(verify_standard(src, SPEC_ID, SPEC_TIMESTAMP, SPEC_SIGNATURE, SPEC_BODY,
                                     at - 301, &v), WEBHOOK_STALE);
    webhooks_free(w);
    /* Another secret does not verify it; a tolerance option moves the window. */
    ck_assert_int_eq(load("std standard %s tolerance=1000\n", "whsec_AAAAAAAAAAAAAAAAAAAAAAAA\n",
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
        {"a stripe /nonexistent/secret\n", ":1: secret file /nonexistent/secret: cannot read it"},
    };
    setup();
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        net_webhooks *w = NULL;
        char error[512];
        ck_assert_int_eq(load(bad[i].line, "not-base64!\n", 0600, &w, error, sizeof(error)),
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
        ck_assert_int_eq(load("a stripe %s\n", "whsec_x\n", modes[i], &w, error, sizeof(error)),
                         TALLY_invalid_argument);
        ck_assert_msg(strstr(error, "its group or others may read it"), "%s", error);
    }
    net_webhooks *w = NULL;
    char error[512];
    ck_assert_int_eq(load("a stripe %s\n", "whsec_x\n", 0400, &w, error, sizeof(error)), TALLY_ok);
    ck_assert_uint_eq(w->count, 1);
    ck_assert_uint_eq(w->sources[0].secrets[0].len, 7); /* the newline dropped */
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
    write_file("secret", "whsec_x\n", 0600, secret, sizeof(secret));
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
START_TEST(test_hostile_signature_headers)
{
    setup();
    net_webhooks *w = NULL;
    char error[512];
    ck_assert_int_eq(load("pay stripe %s\n", "whsec_k\n", 0600, &w, error, sizeof(error)),
                     TALLY_ok);
    const webhook_source *pay = webhooks_find(w, "pay");
    static const char body[] = "{\"id\":\"evt_1\",\"type\":\"t\"}";
    /* HMAC-SHA256("whsec_k", "1700000000." body), computed by `openssl dgst
     * -sha256 -hmac whsec_k`. */
    static const char good[] =
        "t=1700000000,v1=89805bab6426f41d3649256df33f86362618aa3d0256ae51a0dec7d545888e36";
    static const char *const hostile[] = {
        "", ",", ",,,,", "t=", "v1=", "t=1700000000", "t=1700000000,v1=",
        "t=1700000000,v1=zz", "t=1700000000,v1=00",
        "t=-1,v1=89805bab6426f41d3649256df33f86362618aa3d0256ae51a0dec7d545888e36",
        "t=99999999999999999999999,v1=89805bab6426f41d3649256df33f86362618aa3d0256ae51a0dec7d545888e36",
        "t=1700000000 ,v1=89805bab6426f41d3649256df33f86362618aa3d0256ae51a0dec7d545888e36",
        "t=1700000000,v1=89805bab6426f41d3649256df33f86362618aa3d0256ae51a0dec7d545888e3",
        "t=1700000000,v1=89805bab6426f41d3649256df33f86362618aa3d0256ae51a0dec7d545888e3ff",
        "t=1700000000,v0=89805bab6426f41d3649256df33f86362618aa3d0256ae51a0dec7d545888e36",
        "v1=89805bab6426f41d3649256df33f86362618aa3d0256ae51a0dec7d545888e36",
    };
    webhook_verified v;
    for (size_t i = 0; i < sizeof(hostile) / sizeof(hostile[0]); i++) {
        headers h = {{"Stripe-Signature", NULL}, {hostile[i], NULL}};
        webhook_delivery d = {header_of, &h, body, strlen(body), 1700000000};
        ck_assert_msg(webhook_verify(pay, &d, &v) == WEBHOOK_BAD_SIGNATURE, "header %zu", i);
    }
    headers h = {{"Stripe-Signature", NULL}, {good, NULL}};
    webhook_delivery d = {header_of, &h, body, strlen(body), 1700000000};
    ck_assert_int_eq(webhook_verify(pay, &d, &v), WEBHOOK_ACCEPTED);
    ck_assert(tally_str_equal(v.event_id, tally_str_from("evt_1")));
    ck_assert(tally_str_equal(v.event_type, tally_str_from("t")));
    /* Signed, but not an object with an id: a bad request (not stored).
     * Signatures by openssl dgst as above. */
    static const struct {
        const char *body, *v1;
    } unusable[] = {
        {"", "7708b5f4b4a539add7a7f2027635ccbbc7dccabf9c5412b49d9442488f3fc5f2"},
        {"[]", "251d0a7d42e1d806e405bc9c1caba818d788deed791b5b9fda0a73ac3fafca19"},
        {"{\"id\":1}", "fc2003711a124531fc7f396f9dc50c1a175c4b139c5e165208509158137e83b9"},
        {"{\"id\":\"\"}", "ac65bc9e2eef41634fdf75b7f9410e620157713b119e7d6924914218df07f1e9"},
        {"{\"id\"", "7f86e7feb26838dfc6c15a532f2b771bf20526583a35ba5f873098bb2e23be25"},
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

#define TIMEOUT_S 30

int main(void)
{
    const test_row tests[] = {
        {"standard", test_standard_spec_example, TIMEOUT_S},
        {"file", test_file_errors_name_file_and_line, TIMEOUT_S},
        {"file", test_readable_secret_is_refused, TIMEOUT_S},
        {"file", test_secret_that_is_not_a_file_is_refused, TIMEOUT_S},
        {"stripe", test_hostile_signature_headers, TIMEOUT_S},
    };
    return test_run_suite(test_suite_of_rows("webhook_verify", TEST_ROWS(tests)));
}
