/*
 * check_auth.c — tallyd --auth against a real tallyd (docs/SECURITY.md):
 * the auth file parser's refusals (file and line named), the permission
 * class of every op, unauthenticated and forbidden requests storing
 * nothing (log head, balances and inbox unchanged), the JSON API's Bearer
 * token (401/403/200), SIGHUP reloads over a live connection, the
 * private-file checks, and the safe defaults that refuse non-loopback
 * listeners.
 */
#include "clients/libtally/tally.h"
#include "common/clock.h"
#include "common/error.h"
#include "common/file_mode.h"
#include "common/sha256.h"
#include "net/auth/auth.h"
#include "net/auth/listen_policy.h"
#include "tests/support/doc_requests.h"
#include "tests/support/http_client.h"
#include "tests/support/run.h"
#include "tests/support/tallyd_harness.h"
#include "tests/support/test_support.h"
#include "tests/support/wait.h"
#include "tests/support/wire.h"

#include <check.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define TOKEN_BILLING "tok-billing-0123"
#define TOKEN_READER "tok-reader-4567"
#define TOKEN_ADMIN "tok-admin-89ab"
#define TOKEN_MAILER "tok-mailer-cdef"
#define TOKEN_ALL "tok-all-writes"

static void hex_of_token(const char *token, char hex[2 * SHA256_BYTES + 1])
{
    uint8_t h[SHA256_BYTES];
    sha256_digest(token, strlen(token), h);
    for (int i = 0; i < SHA256_BYTES; i++)
        snprintf(hex + 2 * i, 3, "%02x", h[i]);
}

/* Write text to path with mode. */
static void write_file(const char *path, const char *text, mode_t mode)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    ck_assert_msg(fd >= 0, "%s", path);
    ck_assert(write(fd, text, strlen(text)) == (ssize_t)strlen(text));
    close(fd);
    ck_assert_int_eq(chmod(path, mode), 0);
}

/* An auth file line for a principal. */
static void principal_line(char *out, size_t size, const char *name, const char *token,
                           const char *grants)
{
    char hex[2 * SHA256_BYTES + 1];
    hex_of_token(token, hex);
    snprintf(out, size, "%s %s %s\n", name, hex, grants);
}

/* The standard principals: billing writes as billing*, reader reads,
 * admin administers, mailer subscribes as mail*, all writes anywhere. */
static void standard_auth(char *text, size_t size, bool with_all)
{
    char l[5][200];
    principal_line(l[0], sizeof(l[0]), "billing", TOKEN_BILLING, "write:billing*,read");
    principal_line(l[1], sizeof(l[1]), "reader", TOKEN_READER, "read");
    principal_line(l[2], sizeof(l[2]), "ops", TOKEN_ADMIN, "admin,read");
    principal_line(l[3], sizeof(l[3]), "mailer", TOKEN_MAILER, "read,subscribe:mail*");
    principal_line(l[4], sizeof(l[4]), "all", TOKEN_ALL, "write:*,read");
    snprintf(text, size, "# test principals\n%s%s\n%s  # trailing comment\n%s%s", l[0], l[1], l[2],
             l[3], with_all ? l[4] : "");
}

static tallyd_proc proc;
static char auth_dir[300], auth_path[400]; /* the principals, beside the harness's dir */

/* A file's text (NUL-terminated; free it). */
static char *test_read_file(const char *path)
{
    int fd = open(path, O_RDONLY);
    ck_assert_msg(fd >= 0, "%s", path);
    return test_fd_read_all(fd);
}

/* A tallyd with the standard principals (and more options, NULL-terminated). */
static void auth_start(const char *a0, const char *a1)
{
    memset(&proc, 0, sizeof(proc));
    const char *tmp = getenv("TMPDIR");
    char tmpl[300];
    snprintf(tmpl, sizeof(tmpl), "%s/tally-auth-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    ck_assert_ptr_nonnull(mkdtemp(tmpl));
    snprintf(auth_dir, sizeof(auth_dir), "%s", tmpl);
    snprintf(auth_path, sizeof(auth_path), "%s/auth", tmpl);
    char text[2048];
    standard_auth(text, sizeof(text), true);
    write_file(auth_path, text, 0600);
    static char backup_dir[400];
    snprintf(backup_dir, sizeof(backup_dir), "%s", tmpl);
    int i = 0;
    proc.extra_args[i++] = "--auth";
    proc.extra_args[i++] = auth_path;
    proc.extra_args[i++] = "--backup-dir";
    proc.extra_args[i++] = backup_dir;
    if (a0)
        proc.extra_args[i++] = a0;
    if (a1)
        proc.extra_args[i++] = a1;
    proc.extra_args[i] = NULL;
    tallyd_start(&proc);
}

static tally_client *client_as(const char *token, const char *consumer)
{
    tally_client_options o = {.url = proc.url, .consumer = consumer, .timeout_ms = 30000,
                              .token = token};
    tally_client *c = NULL;
    ck_assert_int_eq(tally_client_open(&o, &c), TALLY_ok);
    return c;
}

/* A client sending no token at all (the harness's $TALLY_TOKEN of
 * TALLY_TEST_AUTH=1 removed first). */
static tally_client *client_anonymous(void)
{
    unsetenv("TALLY_TOKEN");
    unsetenv("TALLY_TOKEN_FILE");
    tally_client_options o = {.url = proc.url, .consumer = "billing", .timeout_ms = 30000};
    tally_client *c = NULL;
    ck_assert_int_eq(tally_client_open(&o, &c), TALLY_ok);
    return c;
}

static uint64_t head_seq(void)
{
    tally_client *c = client_as(TOKEN_READER, "x");
    wire_reply r;
    wire_call(c, &r, "stats", "");
    wire_expect(&r, "ok");
    uint64_t v = wire_u64(r.map, "head_seq");
    wire_done(&r);
    tally_client_close(c);
    return v;
}

static int open_account(tally_client *c, uint64_t id, const char *key, tally_result *res)
{
    tally_account_open_args a = {.id = id, .ledger = 1, .code = 1};
    return tally_account_open(c, key, &a, res);
}

static int account_code(uint64_t id, tally_account *out)
{
    tally_client *c = client_as(TOKEN_READER, "x");
    int rc = tally_account_get(c, id, out);
    tally_client_close(c);
    return rc;
}

/* op on the subscriber name (or, name NULL, with no field) as c: code. */
static void expect_named(tally_client *c, const char *op, const char *name, const char *code)
{
    wire_reply r;
    if (name)
        wire_call(c, &r, op, "s", "name", name);
    else
        wire_call(c, &r, op, "");
    wire_expect(&r, code);
    wire_done(&r);
}

static void auth_stop(void)
{
    ck_assert_int_eq(tallyd_stop(&proc), 0);
    tallyd_cleanup(&proc);
    test_remove_dir(auth_dir);
}

/* ---- the parser ---- */

static void expect_parse_error(const char *text, const char *needle)
{
    char why[512];
    auth_table *t = NULL;
    ck_assert_int_eq(auth_table_parse(text, strlen(text), "F", &t, why, sizeof(why)),
                     TALLY_invalid_argument);
    ck_assert_ptr_null(t);
    ck_assert_msg(strstr(why, needle) != NULL, "expected '%s' in '%s'", needle, why);
}

START_TEST(test_parser_refuses_with_line_numbers)
{
    char hex[65], hex2[65], line[300], text[1024];
    hex_of_token("a", hex);
    hex_of_token("b", hex2);
    /* H: a hash, G: another, h: a hash one digit short */
    static const struct {
        const char *text, *why;
    } bad[] = {
        {"# c\n\nx H read,nope\n", "F:3: unknown grant nope"},
        {"x hz read\n", "F:1: the token hash is not hex"},
        {"x h read\n", "F:1: the token hash is 64 hex digits"},
        {"x H read\nx G read\n", "F:2: principal x is listed twice"},
        {"x H read\ny H write:a\n", "F:2: principal y has the same token hash as x"},
        {"x H\n", "F:1: expected NAME SHA256-HEX GRANTS"},
        {"x H read extra\n", "F:1: expected NAME SHA256-HEX GRANTS"},
        {"x H read,,admin\n", "F:1: an empty grant"},
        {"x H write:\n", "F:1: write:: needs a name"},
        {"x H read,read\n", "given twice"},
        {"b@d H read\n", "F:1: principal name"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        size_t n = 0;
        for (const char *c = bad[i].text; *c && n < sizeof(text) - 70; c++)
            n += (size_t)(*c == 'H'   ? snprintf(text + n, 65, "%s", hex)
                          : *c == 'G' ? snprintf(text + n, 65, "%s", hex2)
                          : *c == 'h' ? snprintf(text + n, 64, "%.63s", hex)
                                      : snprintf(text + n, 2, "%c", *c));
        expect_parse_error(text, bad[i].why);
    }
    expect_parse_error("# only comments\n\n", "no principal");
    /* a good one, with every grant, upper-case hex and a comment */
    for (char *p = hex; *p; p++)
        *p = (char)(*p >= 'a' && *p <= 'f' ? *p - 32 : *p);
    snprintf(line, sizeof(line), "x\t%s  read,admin,write:billing*,subscribe:mail*  # ok\n", hex);
    char why[256];
    auth_table *t = NULL;
    ck_assert_int_eq(auth_table_parse(line, strlen(line), "F", &t, why, sizeof(why)), TALLY_ok);
    ck_assert_uint_eq(auth_table_count(t), 1);
    const auth_principal *p = auth_authenticate(t, "a", 1);
    ck_assert_ptr_nonnull(p);
    ck_assert_ptr_null(auth_authenticate(t, "b", 1));
    ck_assert_ptr_null(auth_authenticate(t, "", 0));
    ck_assert(auth_permits(p, AUTH_CLASS_WRITE, tally_str_from("billing-eu")));
    ck_assert(!auth_permits(p, AUTH_CLASS_WRITE, tally_str_from("shop")));
    ck_assert(auth_permits(p, AUTH_CLASS_SUBSCRIBE, tally_str_from("anything"))); /* admin */
    auth_table_free(t);
}
END_TEST

/* docs/SECURITY.md's example auth file parses, and its hashes are the
 * tokens it names (test, foo, bar). */
START_TEST(test_security_doc_example_parses)
{
    char *doc = doc_read("SECURITY.md");
    ck_assert_ptr_nonnull(doc);
    const char *at = strstr(doc, "```auth-file\n");
    ck_assert_ptr_nonnull(at);
    at += strlen("```auth-file\n");
    const char *end = strstr(at, "```");
    char why[256];
    auth_table *t = NULL;
    ck_assert_int_eq(auth_table_parse(at, (size_t)(end - at), "SECURITY.md", &t, why, sizeof(why)),
                     TALLY_ok);
    ck_assert_uint_eq(auth_table_count(t), 3);
    const auth_principal *billing = auth_authenticate(t, "test", 4);
    ck_assert_ptr_nonnull(billing);
    ck_assert_str_eq(auth_principal_name(billing), "billing");
    ck_assert(auth_permits(billing, AUTH_CLASS_WRITE, tally_str_from("billing")));
    ck_assert(!auth_permits(billing, AUTH_CLASS_WRITE, tally_str_from("billing-eu")));
    const auth_principal *ops = auth_authenticate(t, "bar", 3);
    ck_assert(auth_permits(ops, AUTH_CLASS_ADMIN, tally_str_from("")));
    ck_assert(!auth_permits(ops, AUTH_CLASS_WRITE, tally_str_from("billing")));
    auth_table_free(t);
    free(doc);
}
END_TEST

START_TEST(test_glob)
{
    ck_assert(auth_glob_match("*", tally_str_from("")));
    ck_assert(auth_glob_match("billing*", tally_str_from("billing")));
    ck_assert(auth_glob_match("billing*", tally_str_from("billing-eu")));
    ck_assert(!auth_glob_match("billing*", tally_str_from("billin")));
    ck_assert(auth_glob_match("a*b*c", tally_str_from("axxbyyc")));
    ck_assert(!auth_glob_match("a*b*c", tally_str_from("axxbyy")));
    ck_assert(auth_glob_match("exact", tally_str_from("exact")));
    ck_assert(!auth_glob_match("exact", tally_str_from("exactly")));
}
END_TEST

/* ---- requests ---- */

START_TEST(test_write_as_another_consumer_is_forbidden_and_stores_nothing)
{
    auth_start(NULL, NULL);
    tally_client *billing = client_as(TOKEN_BILLING, "billing");
    tally_result res;
    ck_assert_int_eq(open_account(billing, 1, "open-1", &res), TALLY_ok);
    uint64_t head = head_seq();
    tally_account before;
    ck_assert_int_eq(account_code(1, &before), TALLY_ok);

    tally_client *shop = client_as(TOKEN_BILLING, "shop"); /* billing's token, shop's keys */
    ck_assert_int_eq(open_account(shop, 2, "k-2", &res), TALLY_forbidden);
    tally_transfer_args t = {.debit_account_id = 1, .credit_account_id = 2, .amount = 5,
                             .ledger = 1, .code = 1};
    ck_assert_int_eq(tally_uuid_v7(&t.id), TALLY_ok);
    ck_assert_int_eq(tally_transfer(shop, "k-3", &t, &res), TALLY_forbidden);
    ck_assert_uint_eq(head_seq(), head);
    tally_account after;
    ck_assert_int_eq(account_code(2, &after), TALLY_not_found);
    ck_assert_int_eq(account_code(1, &after), TALLY_ok);
    ck_assert_mem_eq(&before, &after, sizeof(before));

    /* no inbox record: the same key applies fresh, under a permitted
     * consumer and under the same consumer by a principal allowed it */
    tally_client *eu = client_as(TOKEN_BILLING, "billing-eu");
    ck_assert_int_eq(open_account(eu, 2, "k-2", &res), TALLY_ok);
    ck_assert(!res.replayed);
    tally_client *all = client_as(TOKEN_ALL, "shop");
    ck_assert_int_eq(open_account(all, 3, "k-2", &res), TALLY_ok);
    ck_assert(!res.replayed);
    ck_assert_uint_eq(head_seq(), head + 2);

    /* a batch and a chain are checked by their (one) consumer */
    tally_batch *b = tally_batch_new(false);
    ck_assert_ptr_nonnull(b);
    tally_account_open_args a = {.id = 9, .ledger = 1, .code = 1};
    ck_assert_int_eq(tally_batch_account_open(b, "b-9", &a), TALLY_ok);
    tally_result results[1];
    ck_assert_int_eq(tally_batch_send(shop, b, NULL, results, 1), TALLY_forbidden);
    tally_batch_free(b);
    ck_assert_uint_eq(head_seq(), head + 2);

    tally_client_close(billing);
    tally_client_close(shop);
    tally_client_close(eu);
    tally_client_close(all);
    auth_stop();
}
END_TEST

START_TEST(test_missing_unknown_and_near_tokens_are_unauthenticated)
{
    auth_start(NULL, NULL);
    uint64_t head = head_seq();
    char near[] = TOKEN_BILLING;
    near[sizeof(near) - 2] ^= 1; /* one byte off */
    const char *tokens[] = {NULL, "no-such-token", near};
    for (size_t i = 0; i < 3; i++) {
        tally_client *c = tokens[i] ? client_as(tokens[i], "billing") : client_anonymous();
        tally_result res;
        ck_assert_int_eq(open_account(c, 7, "k-7", &res), TALLY_unauthenticated);
        tally_account acc;
        ck_assert_int_eq(tally_account_get(c, 1, &acc), TALLY_unauthenticated);
        size_t n;
        uint64_t next;
        ck_assert_int_eq(tally_account_list(c, 0, 1, &acc, 1, &n, &next), TALLY_unauthenticated);
        /* a malformed request tells an unknown caller nothing more */
        wire_reply r;
        wire_call(c, &r, "account_get", "s", "nonsense", "x");
        wire_expect(&r, "unauthenticated");
        wire_done(&r);
        /* health needs no token */
        expect_named(c, "health", NULL, "ok");
        tally_client_close(c);
    }
    ck_assert_uint_eq(head_seq(), head);
    tally_account acc;
    ck_assert_int_eq(account_code(7, &acc), TALLY_not_found);
    /* counted and logged (rate-limited: at least one line) */
    char *log = test_read_file(proc.log_path);
    ck_assert_ptr_nonnull(strstr(log, "auth: unauthenticated"));
    ck_assert_ptr_null(strstr(log, "no-such-token"));
    free(log);
    auth_stop();
}
END_TEST

START_TEST(test_grants_of_reader_mailer_and_admin)
{
    auth_start(NULL, NULL);
    tally_client *reader = client_as(TOKEN_READER, "billing");
    tally_client *admin = client_as(TOKEN_ADMIN, "billing");
    tally_client *mailer = client_as(TOKEN_MAILER, "billing");
    tally_result res;
    ck_assert_int_eq(open_account(reader, 1, "k-1", &res), TALLY_forbidden);
    ck_assert_int_eq(open_account(admin, 1, "k-1", &res), TALLY_forbidden); /* admin is no write */
    tally_account acc;
    ck_assert_int_eq(tally_account_get(reader, 1, &acc), TALLY_not_found); /* read: allowed */
    size_t n;
    uint64_t next;
    ck_assert_int_eq(tally_account_list(reader, 0, 1, &acc, 1, &n, &next), TALLY_ok);

    /* subscribers: mailer's own names only; admin any; reader none */
    expect_named(mailer, "sub_create", "mail-1", "ok");
    expect_named(mailer, "sub_create", "billing-1", "forbidden");
    expect_named(reader, "sub_fetch", "mail-1", "forbidden");
    expect_named(mailer, "dlq_list", "mail-1", "ok");

    /* dead-letter replay, subscriber deletion and backup: admin only */
    const char *admin_ops[][2] = {{"dlq_replay", "mail-1"}, {"sub_delete", "mail-1"}};
    for (int i = 0; i < 2; i++) {
        expect_named(reader, admin_ops[i][0], admin_ops[i][1], "forbidden");
        expect_named(mailer, admin_ops[i][0], admin_ops[i][1], "forbidden");
    }
    char dest[500];
    snprintf(dest, sizeof(dest), "%s/backup-1", proc.extra_args[3]);
    uint64_t bytes = 0;
    ck_assert_int_eq(tally_backup(reader, dest, &bytes), TALLY_forbidden);
    ck_assert_int_ne(access(dest, F_OK), 0);
    expect_named(admin, "dlq_replay", "mail-1", "ok");
    expect_named(admin, "sub_delete", "mail-1", "ok");
    ck_assert_int_eq(tally_backup(admin, dest, &bytes), TALLY_ok);
    ck_assert_uint_gt(bytes, 0);
    ck_assert_int_eq(access(dest, F_OK), 0);

    tally_client_close(reader);
    tally_client_close(admin);
    tally_client_close(mailer);
    auth_stop();
}
END_TEST

/* ---- SIGHUP ---- */

/* One request over a raw SP connection fd (one request id at a time):
 * the reply's code into code, false when the connection is gone. */
static bool sp_call(int fd, uint32_t id, const char *token, char *code, size_t code_size)
{
    msgpack_sbuffer sb;
    msgpack_packer pk;
    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    msgpack_pack_map(&pk, 3);
    msgpack_pack_str_with_body(&pk, "v", 1);
    msgpack_pack_uint32(&pk, 1);
    msgpack_pack_str_with_body(&pk, "op", 2);
    msgpack_pack_str_with_body(&pk, "stats", 5);
    msgpack_pack_str_with_body(&pk, "auth", 4);
    msgpack_pack_str_with_body(&pk, token, strlen(token));
    uint8_t head[13];
    tallyd_sp_frame_head(head, sb.size, id);
    int64_t deadline = test_deadline_ms(30000);
    bool ok = tallyd_fd_send_all(fd, head, sizeof(head), deadline) &&
              tallyd_fd_send_all(fd, sb.data, sb.size, deadline);
    msgpack_sbuffer_destroy(&sb);
    uint8_t rhead[9];
    if (!ok || !tallyd_fd_recv_all(fd, rhead, sizeof(rhead), deadline))
        return false;
    uint64_t rlen = 0;
    for (int i = 1; i < 9; i++)
        rlen = rlen << 8 | rhead[i];
    ck_assert_uint_gt(rlen, 4);
    ck_assert_uint_lt(rlen, 1 << 20);
    char *body = malloc(rlen);
    ok = tallyd_fd_recv_all(fd, body, rlen, deadline);
    if (ok) {
        msgpack_unpacked up;
        msgpack_unpacked_init(&up);
        ck_assert(msgpack_unpack_next(&up, body + 4, rlen - 4, NULL) == MSGPACK_UNPACK_SUCCESS);
        const msgpack_object *c = wire_field(&up.data, "code");
        snprintf(code, code_size, "%.*s", (int)c->via.str.size, c->via.str.ptr);
        msgpack_unpacked_destroy(&up);
    }
    free(body);
    return ok;
}

static bool log_has(const char *needle)
{
    char *log = test_read_file(proc.log_path);
    bool has = strstr(log, needle) != NULL;
    free(log);
    return has;
}

START_TEST(test_sighup_reload_over_a_live_connection)
{
    auth_start(NULL, NULL);
    int fd = tallyd_sp_open(proc.url);
    ck_assert_int_ge(fd, 0);
    char code[64];
    uint32_t id = 1;
    ck_assert(sp_call(fd, id++, TOKEN_READER, code, sizeof(code)));
    ck_assert_str_eq(code, "ok");

    /* a file that does not parse: the old table stays, the error is logged */
    char text[2048];
    standard_auth(text, sizeof(text), true);
    strcat(text, "broken line\n");
    write_file(auth_path, text, 0600);
    ck_assert_int_eq(kill(proc.pid, SIGHUP), 0);
    TEST_WAIT_UNTIL(log_has("auth file not reloaded"), 30000, "the reload's refusal in the log");
    ck_assert(log_has("auth file not reloaded, the old table stays"));
    ck_assert(log_has(":9: expected NAME SHA256-HEX GRANTS"));
    ck_assert(sp_call(fd, id++, TOKEN_READER, code, sizeof(code)));
    ck_assert_str_eq(code, "ok");

    /* reader removed: refused from its next request, same connection */
    char l[2][200];
    principal_line(l[0], sizeof(l[0]), "ops", TOKEN_ADMIN, "admin,read");
    principal_line(l[1], sizeof(l[1]), "reader2", TOKEN_MAILER, "read");
    snprintf(text, sizeof(text), "%s%s", l[0], l[1]);
    write_file(auth_path, text, 0600);
    ck_assert_int_eq(kill(proc.pid, SIGHUP), 0);
    bool refused = false;
    for (int64_t until = test_deadline_ms(30000); !refused && clock_mono_ms() < until;) {
        ck_assert_msg(sp_call(fd, id++, TOKEN_READER, code, sizeof(code)),
                      "the connection was dropped by the reload");
        refused = strcmp(code, "unauthenticated") == 0;
        if (!refused)
            test_pause_ms(20);
    }
    ck_assert(refused);
    /* tallyd swaps the table in, then logs: wait for the line */
    ck_assert(tallyd_log_wait(&proc, "reloaded (2 principals)", 30000));
    ck_assert(sp_call(fd, id++, TOKEN_MAILER, code, sizeof(code))); /* a new principal */
    ck_assert_str_eq(code, "ok");
    ck_assert(sp_call(fd, id++, TOKEN_READER, code, sizeof(code)));
    ck_assert_str_eq(code, "unauthenticated");
    close(fd);
    auth_stop();
}
END_TEST

/* ---- the JSON API ---- */

static int http_post(int port, const char *path, const char *bearer, const char *key,
                     const char *body)
{
    char raw[2048], auth[300] = "", idem[200] = "";
    if (bearer)
        snprintf(auth, sizeof(auth), "Authorization: Bearer %s\r\n", bearer);
    if (key)
        snprintf(idem, sizeof(idem), "Idempotency-Key: %s\r\nTally-Consumer: billing\r\n", key);
    int n = snprintf(raw, sizeof(raw),
                     "POST %s HTTP/1.1\r\nHost: x\r\nConnection: close\r\n%s%s"
                     "Content-Type: application/json\r\nContent-Length: %zu\r\n\r\n%s",
                     path, auth, idem, strlen(body), body);
    int status = 0;
    free(test_http_raw(port, raw, (size_t)n, &status));
    return status;
}

START_TEST(test_json_api_bearer)
{
    auth_start("--http", "http://127.0.0.1:0");
    int port = proc.http_port; /* the kernel's choice, from tallyd's ready file */
    ck_assert_int_gt(port, 0);
    const char *open = "{\"id\":1,\"ledger\":1,\"code\":1}";
    ck_assert_int_eq(http_post(port, "/v1/account_open", NULL, "j-1", open), 401);
    ck_assert_int_eq(http_post(port, "/v1/account_open", "wrong", "j-1", open), 401);
    ck_assert_int_eq(http_post(port, "/v1/account_open", TOKEN_READER, "j-1", open), 403);
    ck_assert_int_eq(http_post(port, "/v1/account_open", TOKEN_BILLING, "j-1", open), 200);
    ck_assert_int_eq(http_post(port, "/v1/account_get", TOKEN_READER, NULL, "{\"id\":1}"), 200);
    int status = 0;
    free(test_http_get(port, "/v1/accounts/1", &status));
    ck_assert_int_eq(status, 401);
    /* probes and metrics need no token */
    free(test_http_get(port, "/healthz", &status));
    ck_assert_int_eq(status, 200);
    char *metrics = test_http_get(port, "/metrics", &status);
    ck_assert_int_eq(status, 200);
    /* the two 401s of POST and the GET's */
    const char *u = strstr(metrics, "tally_auth_refused_total{reason=\"unauthenticated\"} ");
    ck_assert_ptr_nonnull(u);
    ck_assert_int_ge(atoi(strchr(u, '}') + 2), 3);
    ck_assert_ptr_nonnull(strstr(metrics, "tally_auth_refused_total{reason=\"forbidden\"} 1\n"));
    free(metrics);
    auth_stop();
}
END_TEST

/* A raw request: its status, and its body's code in code (may be NULL). */
static int http_raw_call(int port, const char *method, const char *path, const char *headers,
                         const char *body, char *code, size_t code_size)
{
    char raw[2048];
    int n = snprintf(raw, sizeof(raw),
                     "%s %s HTTP/1.1\r\nHost: x\r\nConnection: close\r\n%s"
                     "Content-Length: %zu\r\n\r\n%s",
                     method, path, headers, strlen(body), body);
    int status = 0;
    char *answer = test_http_raw(port, raw, (size_t)n, &status);
    ck_assert_ptr_nonnull(answer);
    const char *c = strstr(answer, "\"code\":\"");
    if (code)
        snprintf(code, code_size, "%.*s", c ? (int)strcspn(c + 8, "\"") : 0, c ? c + 8 : "");
    free(answer);
    return status;
}

/* With --auth, an anonymous caller gets 401 before anything else can
 * tell it which ops exist or what is wrong with its request. */
START_TEST(test_json_api_token_checked_first)
{
    auth_start("--http", "http://127.0.0.1:0");
    int port = proc.http_port;
    ck_assert_int_gt(port, 0);
    static const struct {
        const char *method, *path, *headers, *body;
        int status_with_token; /* what a known principal gets */
    } rows[] = {
        {"POST", "/v1/no_such_op", "", "{}", 404},
        {"POST", "/v1/backup", "", "{}", 404},
        {"GET", "/v1/planets", "", "", 404},
        {"GET", "/v1/entitlements/a/b", "", "", 404},
        {"POST", "/v1/account_open", "", "{\"id\":1,\"ledger\":1,\"code\":1}", 400},
        {"POST", "/v1/account_open", "Idempotency-Key: t-1\r\n", "{not json", 400},
        {"POST", "/v1/account_get", "", "[1]", 400},
    };
    char code[64], headers[300];
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        int status = http_raw_call(port, rows[i].method, rows[i].path, rows[i].headers,
                                   rows[i].body, code, sizeof(code));
        ck_assert_msg(status == 401 && strcmp(code, "unauthenticated") == 0,
                      "anonymous %s %s: %d %s", rows[i].method, rows[i].path, status, code);
        snprintf(headers, sizeof(headers), "%sAuthorization: Bearer %s\r\n", rows[i].headers,
                 TOKEN_BILLING);
        status = http_raw_call(port, rows[i].method, rows[i].path, headers, rows[i].body, code,
                               sizeof(code));
        ck_assert_msg(status == rows[i].status_with_token, "billing %s %s: %d %s", rows[i].method,
                      rows[i].path, status, code);
    }
    auth_stop();
}
END_TEST

/* The token is the Authorization header's, with optional whitespace
 * around it (RFC 9110); `auth` in the body is refused, never taken. */
START_TEST(test_json_api_bearer_whitespace_and_body_token)
{
    auth_start("--http", "http://127.0.0.1:0");
    int port = proc.http_port;
    ck_assert_int_gt(port, 0);
    const char *get = "{\"id\":1}";
    static const char *const forms[] = {
        "Authorization: Bearer " TOKEN_READER " \r\n",
        "Authorization: Bearer " TOKEN_READER "\t \r\n",
        "Authorization: Bearer\t" TOKEN_READER "\r\n",
        "Authorization: bearer   " TOKEN_READER "\r\n",
    };
    char code[64];
    for (size_t i = 0; i < sizeof(forms) / sizeof(forms[0]); i++) {
        int status = http_raw_call(port, "POST", "/v1/account_get", forms[i], get, code,
                                   sizeof(code));
        ck_assert_msg(status == 404 && strcmp(code, "not_found") == 0, "form %zu: %d %s", i,
                      status, code);
    }
    static const char *const bad[] = {"Authorization: Bearer" TOKEN_READER "\r\n",
                                      "Authorization: Bearer " TOKEN_READER "x\r\n",
                                      "Authorization: Basic " TOKEN_READER "\r\n"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        ck_assert_int_eq(http_raw_call(port, "POST", "/v1/account_get", bad[i], get, code,
                                       sizeof(code)), 401);
    /* a token in the body: not taken (401 without the header), refused with it */
    const char *in_body = "{\"id\":1,\"auth\":\"" TOKEN_READER "\"}";
    ck_assert_int_eq(http_raw_call(port, "POST", "/v1/account_get", "", in_body, code,
                                   sizeof(code)), 401);
    ck_assert_int_eq(http_raw_call(port, "POST", "/v1/account_get", forms[0], in_body, code,
                                   sizeof(code)), 400);
    ck_assert_str_eq(code, "unknown_field");
    auth_stop();
}
END_TEST

/* ---- files and safe defaults ---- */

/* Run tallyd with args (NULL-terminated after the fixed ones) to its exit;
 * its exit code, stderr in *err. */
static int tallyd_run(const char *dir, const char *const *more, char **err)
{
    char data[400];
    snprintf(data, sizeof(data), "%s/data", dir);
    const char *argv[24] = {tallyd_program("tallyd"), "--data", data, "--publish", "none",
                            "--http", "none"};
    int n = 7;
    for (int i = 0; more[i]; i++)
        argv[n++] = more[i];
    argv[n] = NULL;
    return test_run(argv, NULL, NULL, err);
}

START_TEST(test_group_readable_auth_file_is_refused)
{
    char dir[] = "/tmp/tally-auth-mode-XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(dir));
    char path[300], text[2048], ipc[300];
    snprintf(path, sizeof(path), "%s/auth", dir);
    snprintf(ipc, sizeof(ipc), "ipc://%s/req.sock", dir);
    standard_auth(text, sizeof(text), false);
    write_file(path, text, 0644);
    char *err = NULL;
    const char *args[] = {"--listen", ipc, "--auth", path, "--backup-dir", dir, NULL};
    ck_assert_int_eq(tallyd_run(dir, args, &err), 2);
    ck_assert_msg(strstr(err, path) && strstr(err, "mode 0644"), "%s", err);
    free(err);
    /* the shared check, as the clients and TLS key files use it */
    char why[400];
    ck_assert(!file_private_check(path, "token file", why, sizeof(why)));
    ck_assert_ptr_nonnull(strstr(why, "mode 0644"));
    chmod(path, 0640);
    ck_assert(!file_private_check(path, "token file", why, sizeof(why)));
    chmod(path, 0600);
    ck_assert(file_private_check(path, "token file", why, sizeof(why)));
    /* a client's token file: the same rule */
    char tokfile[300];
    snprintf(tokfile, sizeof(tokfile), "%s/token", dir);
    write_file(tokfile, TOKEN_READER "\n", 0644);
    tally_client_options o = {.url = ipc, .token_file = tokfile};
    tally_client *c = NULL;
    ck_assert_int_eq(tally_client_open(&o, &c), TALLY_invalid_argument);
    chmod(tokfile, 0600);
    ck_assert_int_eq(tally_client_open(&o, &c), TALLY_ok);
    tally_client_close(c);
    /* --auth without --backup-dir */
    const char *no_backup[] = {"--listen", ipc, "--auth", path, NULL};
    ck_assert_int_eq(tallyd_run(dir, no_backup, &err), 2);
    ck_assert_ptr_nonnull(strstr(err, "--auth needs --backup-dir"));
    free(err);
    test_remove_dir(dir);
}
END_TEST

START_TEST(test_non_loopback_listeners_are_refused_without_insecure)
{
    char dir[] = "/tmp/tally-auth-listen-XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(dir));
    char any[64], http[64], path[300], text[2048];
    snprintf(any, sizeof(any), "tcp://0.0.0.0:0"); /* refused before it listens, */
    snprintf(http, sizeof(http), "http://0.0.0.0:0"); /* or on a port of the kernel's */
    snprintf(path, sizeof(path), "%s/auth", dir);
    standard_auth(text, sizeof(text), false);
    write_file(path, text, 0600);
    char *err = NULL;
    const char *plain[] = {"--listen", any, NULL};
    ck_assert_int_eq(tallyd_run(dir, plain, &err), 2);
    ck_assert_msg(strstr(err, any) && strstr(err, "plaintext"), "%s", err);
    free(err);
    /* with --auth a plaintext listener is still refused (no TLS) */
    const char *with_auth[] = {"--listen", any, "--auth", path, "--backup-dir", dir, NULL};
    ck_assert_int_eq(tallyd_run(dir, with_auth, &err), 2);
    ck_assert_ptr_nonnull(strstr(err, any));
    free(err);
    char ipc[300];
    snprintf(ipc, sizeof(ipc), "ipc://%s/req.sock", dir);
    const char *args_http[] = {"--listen", ipc, "--http", http, NULL};
    ck_assert_int_eq(tallyd_run(dir, args_http, &err), 2);
    ck_assert_msg(strstr(err, "--http") && strstr(err, http), "%s", err);
    free(err);
    test_remove_dir(dir);

    /* --insecure: it serves, and says so at start */
    memset(&proc, 0, sizeof(proc));
    proc.extra_args[0] = "--listen";
    proc.extra_args[1] = any;
    proc.extra_args[2] = "--insecure";
    tallyd_start(&proc);
    ck_assert(log_has("--insecure: serving anyway: --listen"));
    ck_assert(log_has(any));
    ck_assert_int_eq(tallyd_stop(&proc), 0);
    tallyd_cleanup(&proc);
}
END_TEST

START_TEST(test_listener_policy)
{
    ck_assert(net_url_is_plaintext("tcp://127.0.0.1:1"));
    ck_assert(net_url_is_plaintext("ws://h:1/x"));
    ck_assert(net_url_is_plaintext("http://h:1"));
    ck_assert(!net_url_is_plaintext("tls+tcp://0.0.0.0:1"));
    ck_assert(!net_url_is_plaintext("https://h:1"));
    ck_assert(!net_url_is_plaintext("wss://h:1"));
    ck_assert(net_url_is_local("ipc:///tmp/x") && net_url_is_local("inproc://x"));
    ck_assert(net_url_is_loopback("tcp://127.0.0.1:7450"));
    ck_assert(net_url_is_loopback("tcp://127.1.2.3:7450"));
    ck_assert(net_url_is_loopback("tcp://[::1]:7450"));
    ck_assert(net_url_is_loopback("http://localhost:7452"));
    ck_assert(!net_url_is_loopback("tcp://0.0.0.0:7450"));
    ck_assert(!net_url_is_loopback("tcp://*:7450"));
    ck_assert(!net_url_is_loopback("tcp://:7450"));
    ck_assert(!net_url_is_loopback("tcp://128.0.0.1:7450"));
    ck_assert(!net_url_is_loopback("tcp://127.0.0.1.evil.com:7450"));
    char why[300];
    ck_assert(net_listener_allowed("--listen", "tls+tcp://0.0.0.0:7450", true, why, sizeof(why)));
    ck_assert(!net_listener_allowed("--listen", "tls+tcp://0.0.0.0:7450", false, why, sizeof(why)));
    ck_assert_ptr_nonnull(strstr(why, "without --auth"));
    ck_assert(!net_listener_allowed("--listen", "tcp://10.0.0.1:7450", true, why, sizeof(why)));
    ck_assert(net_listener_allowed("--listen", "ipc:///tmp/x", false, why, sizeof(why)));
}
END_TEST

START_TEST(test_cli_auth_hash_and_token_file)
{
    char *out = NULL;
    const char *argv[] = {tallyd_program("tally"), "auth", "hash", NULL};
    int fd = test_temp_fd();
    ck_assert(write(fd, "abc\n", 4) == 4);
    lseek(fd, 0, SEEK_SET);
    int saved = dup(0);
    dup2(fd, 0);
    int rc = test_run(argv, NULL, &out, NULL);
    dup2(saved, 0);
    close(saved);
    close(fd);
    ck_assert_int_eq(rc, 0);
    ck_assert_str_eq(out, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad\n");
    free(out);

    auth_start(NULL, NULL);
    char tok[500], keyfile_env[600];
    snprintf(tok, sizeof(tok), "%s/reader-token", proc.extra_args[3]);
    write_file(tok, TOKEN_READER "\n", 0600);
    const char *get[] = {tallyd_program("tally"), "--url", proc.url, "--token-file", tok,
                         "stats", NULL};
    const char *no_env[] = {"TALLY_TOKEN", "TALLY_TOKEN_FILE", NULL};
    char *stats = NULL;
    ck_assert_int_eq(test_run(get, no_env, &stats, NULL), 0);
    ck_assert_ptr_nonnull(strstr(stats, "head_seq"));
    free(stats);
    const char *anon[] = {tallyd_program("tally"), "--url", proc.url, "stats", NULL};
    char *err = NULL;
    ck_assert_int_eq(test_run(anon, no_env, NULL, &err), 1);
    ck_assert_ptr_nonnull(strstr(err, "unauthenticated"));
    free(err);
    snprintf(keyfile_env, sizeof(keyfile_env), "TALLY_TOKEN_FILE=%s", tok);
    const char *by_env[] = {"TALLY_TOKEN", keyfile_env, NULL};
    ck_assert_int_eq(test_run(anon, by_env, &stats, NULL), 0);
    free(stats);
    chmod(tok, 0604);
    ck_assert_int_eq(test_run(get, no_env, NULL, &err), 2);
    ck_assert_ptr_nonnull(strstr(err, "mode 0604"));
    free(err);
    auth_stop();
}
END_TEST

static Suite *auth_suite(void)
{
    Suite *s = suite_create("auth");
    TCase *unit = tcase_create("parser");
    tcase_add_test(unit, test_parser_refuses_with_line_numbers);
    tcase_add_test(unit, test_glob);
    tcase_add_test(unit, test_security_doc_example_parses);
    tcase_add_test(unit, test_listener_policy);
    suite_add_tcase(s, unit);
    TCase *server = tcase_create("tallyd");
    tcase_set_timeout(server, 300);
    tcase_add_test(server, test_write_as_another_consumer_is_forbidden_and_stores_nothing);
    tcase_add_test(server, test_missing_unknown_and_near_tokens_are_unauthenticated);
    tcase_add_test(server, test_grants_of_reader_mailer_and_admin);
    tcase_add_test(server, test_sighup_reload_over_a_live_connection);
    tcase_add_test(server, test_json_api_bearer);
    tcase_add_test(server, test_json_api_token_checked_first);
    tcase_add_test(server, test_json_api_bearer_whitespace_and_body_token);
    tcase_add_test(server, test_group_readable_auth_file_is_refused);
    tcase_add_test(server, test_non_loopback_listeners_are_refused_without_insecure);
    tcase_add_test(server, test_cli_auth_hash_and_token_file);
    suite_add_tcase(s, server);
    return s;
}

int main(void)
{
    return test_run_suite(auth_suite());
}
