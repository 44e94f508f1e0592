/*
 * check_json.c — the JSON API (/v1/..., net/http/http_json.c, net/http/json_codec.c)
 * against a real tallyd, spoken by the curl binary (not the project's
 * code):
 *
 *   - every ```json-example block of docs/PROTOCOL.md, sent in order to a
 *     tallyd on an empty store, gets the documented status, headers and
 *     body ("..": any text); every op of the table but the control ops has
 *     one; every code in the status table has its row's status;
 *   - 16 concurrent identical POSTs: one effect, one `replayed: false`;
 *   - the status classes the examples cannot show: 413 (body over the
 *     HTTP limit, request over msgpack's), 431, 405, 503 with Retry-After
 *     (storage_full); a stop while a long-poll waits answers it and exits 0;
 *   - a GET's path parameter or query argument that is not UTF-8: 400;
 *   - integers beyond 2^53 as decimal strings, both ways;
 *   - GET /v1/accounts walked page by page by its `next` (a string beyond
 *     2^53, given back as after_id) to the last page, each entry as GET
 *     /v1/accounts/{id} gives it; its bad arguments.
 *
 * With TALLY_JSON_REPLIES set, every reply is recorded for the OpenAPI
 * check (answer_record).
 */
#include "config.h"

#include "common/error.h"
#include "common/sha256.h"
#include "common/transfer_id.h"
#include "net/http/json_codec.h"
#include "net/ops/protocol.h"
#include "tests/support/doc_requests.h"
#include "tests/support/http_client.h"
#include "tests/support/run.h"
#include "tests/support/suite.h"
#include "tests/support/tallyd_harness.h"
#include "tests/support/test_support.h"
#include "tests/support/wire.h"

#include <check.h>
#include <jansson.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#define ARGS_MAX 40
#define CONCURRENT_POSTS 16

typedef struct json_server {
    tallyd_proc p;
    int port;
    char url[320];
} json_server;

/* tallyd with --http on a port of the kernel's, more options (NULL-terminated) and
 * a map of map_size_mb (0: the harness's default). */
static void json_up(json_server *s, const char *const *more, unsigned map_size_mb)
{
    memset(s, 0, sizeof(*s));
    s->p.map_size_mb = map_size_mb;
    int n = 0;
    s->p.extra_args[n++] = "--http";
    s->p.extra_args[n++] = "http://127.0.0.1:0"; /* the harness reads the port back */
    for (int i = 0; more && more[i]; i++)
        s->p.extra_args[n++] = more[i];
    tallyd_start(&s->p);
    s->port = s->p.http_port;
    ck_assert_int_gt(s->port, 0);
    snprintf(s->url, sizeof(s->url), "%s", s->p.http_url);
}

static void json_down(json_server *s)
{
    ck_assert_int_eq(tallyd_stop(&s->p), 0);
    tallyd_cleanup(&s->p);
}

/* A curl request: method, path, headers ("Name: value", NULL-terminated),
 * body (NULL: none, a file "@path" as curl takes it). */
typedef struct http_call {
    const char *method, *path;
    const char *headers[8];
    const char *body;
} http_call;

/* curl's argv for c (through sh, so curl is found on PATH). */
static void curl_argv(const json_server *s, const http_call *c, const char **argv, char *url,
                      size_t url_size)
{
    int n = 0;
    argv[n++] = "/bin/sh";
    argv[n++] = "-c";
    argv[n++] = "exec curl \"$@\"";
    argv[n++] = "curl";
    argv[n++] = "-sS";
    argv[n++] = "-i";
    argv[n++] = "--max-time";
    argv[n++] = "60";
    argv[n++] = "-X";
    argv[n++] = c->method;
    for (int i = 0; c->headers[i]; i++) {
        argv[n++] = "-H";
        argv[n++] = c->headers[i];
    }
    if (c->body) {
        argv[n++] = "--data-binary";
        argv[n++] = c->body;
    }
    snprintf(url, url_size, "%s%s", s->url, c->path);
    argv[n++] = url;
    argv[n] = NULL;
    ck_assert_int_lt(n, ARGS_MAX);
}

/* What came back: status, the raw headers, the body. */
typedef struct http_answer {
    char *raw; /* owns the text */
    int status;
    const char *headers;
    const char *body;
} http_answer;

/* Split curl -i output (skipping 1xx interim answers). */
static void answer_parse(char *raw, http_answer *a)
{
    a->raw = raw;
    char *at = raw;
    for (;;) {
        ck_assert_msg(strncmp(at, "HTTP/", 5) == 0, "not an HTTP answer: %.200s", at);
        a->status = atoi(strchr(at, ' ') + 1);
        char *end = strstr(at, "\r\n\r\n");
        ck_assert_ptr_nonnull(end);
        end[2] = '\0';
        a->headers = at;
        a->body = end + 4;
        if (a->status >= 200)
            return;
        at = end + 4;
    }
}

/* With TALLY_JSON_REPLIES=FILE, each answer as a line of JSON
 * {method, path, status, body} appended to FILE: tests/openapi/
 * check_openapi.sh validates every reply of this suite against the
 * OpenAPI document (docs/openapi.json). */
static void answer_record(const http_call *c, const http_answer *a)
{
    const char *path = getenv("TALLY_JSON_REPLIES");
    if (path == NULL || path[0] == '\0')
        return;
    json_t *line = json_pack("{s:s, s:s, s:i, s:s}", "method", c->method, "path", c->path,
                             "status", a->status, "body", a->body);
    char *text = line ? json_dumps(line, JSON_COMPACT) : NULL;
    ck_assert_msg(text != NULL, "reply of %s %s not recorded (not UTF-8?)", c->method, c->path);
    FILE *f = fopen(path, "a");
    ck_assert_msg(f != NULL, "cannot append to %s", path);
    fprintf(f, "%s\n", text);
    ck_assert_int_eq(fclose(f), 0);
    free(text);
    json_decref(line);
}

static void curl_call(const json_server *s, const http_call *c, http_answer *a)
{
    const char *argv[ARGS_MAX];
    char url[512];
    curl_argv(s, c, argv, url, sizeof(url));
    char *out = NULL, *err = NULL;
    int rc = test_run(argv, NULL, &out, &err);
    ck_assert_msg(rc == 0, "curl %s %s exited %d: %s", c->method, c->path, rc, err);
    free(err);
    answer_parse(out, a);
    answer_record(c, a);
}

/* The value of header name in a (case-insensitive), copied into v. */
static bool header_value(const http_answer *a, const char *name, char *v, size_t v_size)
{
    size_t n = strlen(name);
    for (const char *line = a->headers; line && *line; line = strstr(line, "\r\n") ? strstr(line, "\r\n") + 2 : NULL) {
        if (strncasecmp(line, name, n) == 0 && line[n] == ':') {
            const char *val = line + n + 1;
            while (*val == ' ')
                val++;
            snprintf(v, v_size, "%.*s", (int)strcspn(val, "\r\n"), val);
            return true;
        }
    }
    return false;
}

/* text matches pattern, where ".." stands for any run of characters. */
static bool glob_match(const char *pattern, const char *text)
{
    const char *mark = strstr(pattern, "..");
    if (mark == NULL)
        return strcmp(pattern, text) == 0;
    size_t lead = (size_t)(mark - pattern);
    if (strncmp(pattern, text, lead) != 0)
        return false;
    for (const char *t = text + lead;; t++) {
        if (glob_match(mark + 2, t))
            return true;
        if (*t == '\0')
            return false;
    }
}

/* ---- the documented examples ---- */

typedef struct json_example {
    char op[40];
    http_call call;
    char request_line[512];
    char headers[8][256];
    char body[4096];
    int status;
    char want_headers[4][256];
    int want_header_count;
    char want_body[8192];
} json_example;

static void copy_line(char *dst, size_t size, const char *src)
{
    size_t n = strlen(src);
    ck_assert_msg(n < size, "an example line is longer than %zu bytes", size);
    memcpy(dst, src, n + 1);
}

/* Parse one ```json-example block starting at *at; false at the end. */
static bool example_next(const char **at, json_example *e)
{
    const char *start = strstr(*at, "```json-example ");
    if (start == NULL)
        return false;
    memset(e, 0, sizeof(*e));
    start += strlen("```json-example ");
    sscanf(start, "%39s", e->op);
    const char *line = strchr(start, '\n') + 1;
    int header_count = 0;
    bool in_body = false, reply = false, reply_body = false;
    while (strncmp(line, "```", 3) != 0) {
        size_t len = strcspn(line, "\n");
        char text[8192];
        ck_assert_uint_lt(len, sizeof(text));
        memcpy(text, line, len);
        text[len] = '\0';
        const char *v = len > 2 ? text + 2 : "";
        if (text[0] == '>') {
            if (e->request_line[0] == '\0')
                copy_line(e->request_line, sizeof(e->request_line), v);
            else if (len <= 1)
                in_body = true;
            else if (in_body)
                copy_line(e->body, sizeof(e->body), v);
            else
                copy_line(e->headers[header_count++], sizeof(e->headers[0]), v);
        } else if (text[0] == '<') {
            if (!reply)
                e->status = atoi(v), reply = true;
            else if (len <= 1)
                reply_body = true;
            else if (reply_body)
                copy_line(e->want_body, sizeof(e->want_body), v);
            else
                copy_line(e->want_headers[e->want_header_count++], sizeof(e->want_headers[0]), v);
        }
        line += len + 1;
    }
    *at = line + 3;
    char *space = strchr(e->request_line, ' ');
    ck_assert_ptr_nonnull(space);
    *space = '\0';
    e->call.method = e->request_line;
    e->call.path = space + 1;
    for (int i = 0; i < header_count; i++)
        e->call.headers[i] = e->headers[i];
    e->call.body = in_body ? e->body : NULL;
    return true;
}

static char *protocol_doc(void)
{
    char *doc = doc_read("PROTOCOL.md");
    ck_assert_msg(doc != NULL, "cannot read docs/PROTOCOL.md (TALLY_DOCS)");
    return doc;
}

START_TEST(documented_examples_replay)
{
    json_server s;
    json_up(&s, NULL, 0);
    char *doc = protocol_doc();
    const char *at = doc;
    json_example *e = malloc(sizeof(*e));
    int count = 0;
    while (example_next(&at, e)) {
        count++;
        http_answer a;
        curl_call(&s, &e->call, &a);
        ck_assert_msg(a.status == e->status, "example %d (%s %s): status %d, doc says %d: %s",
                      count, e->call.method, e->call.path, a.status, e->status, a.body);
        for (int i = 0; i < e->want_header_count; i++) {
            char name[64], got[128];
            snprintf(name, sizeof(name), "%.*s", (int)strcspn(e->want_headers[i], ":"), e->want_headers[i]);
            ck_assert_msg(header_value(&a, name, got, sizeof(got)), "example %d: no %s header", count, name);
            ck_assert_str_eq(got, e->want_headers[i] + strlen(name) + 2);
        }
        char *body = strdup(a.body);
        body[strcspn(body, "\n")] = '\0';
        ck_assert_msg(glob_match(e->want_body, body), "example %d (%s %s):\n got  %s\n want %s",
                      count, e->call.method, e->call.path, body, e->want_body);
        free(body);
        free(a.raw);
    }
    ck_assert_int_ge(count, 30);
    free(e);
    free(doc);
    json_down(&s);
}
END_TEST

START_TEST(every_op_has_an_example)
{
    char *doc = protocol_doc();
    for (int i = 0; i < NET_OP_COUNT; i++) {
        if (net_ops[i].kind == NET_KIND_CONTROL)
            continue;
        char fence[64];
        snprintf(fence, sizeof(fence), "```json-example %s\n", net_ops[i].name);
        ck_assert_msg(strstr(doc, fence) != NULL, "docs/PROTOCOL.md has no JSON example of %s",
                      net_ops[i].name);
    }
    free(doc);
}
END_TEST

/* Each code named in the status table answers with its row's status. */
START_TEST(status_table_matches_the_server)
{
    char *doc = protocol_doc();
    const char *begin = strstr(doc, "<!-- json statuses: begin -->");
    const char *end = begin ? strstr(begin, "<!-- json statuses: end -->") : NULL;
    ck_assert_msg(begin && end, "docs/PROTOCOL.md: no json statuses table");
    int checked = 0;
    for (const char *line = strstr(begin, "\n| ") ; line && line < end; line = strstr(line + 1, "\n| ")) {
        const char *eol = strchr(line + 1, '\n');
        const char *last = eol;
        while (last > line && last[-1] != '|')
            last--;
        const char *cell = last - 1;
        while (cell > line && cell[-1] != '|')
            cell--;
        int status = atoi(cell + 1);
        if (status == 0)
            continue; /* the header, or "the stored code's" */
        for (const char *q = strchr(line, '`'); q && q < cell; q = strchr(q + 1, '`')) {
            const char *close = strchr(q + 1, '`');
            char name[64];
            snprintf(name, sizeof(name), "%.*s", (int)(close - q - 1), q + 1);
            q = close;
            int code = tally_error_from_name(name);
            if (code < 0)
                continue; /* a field name such as `replayed` */
            ck_assert_msg(net_json_status(code) == (unsigned)status, "%s: the table says %d, the server %u",
                          name, status, net_json_status(code));
            checked++;
        }
    }
    ck_assert_int_ge(checked, 20);
    free(doc);
}
END_TEST

/* ---- idempotency under concurrency ---- */

static void open_accounts(json_server *s)
{
    http_call c = {"POST", "/v1/batch", {"Idempotency-Key: setup", NULL},
                   "{\"ops\":[{\"op\":\"account_open\",\"id\":1,\"ledger\":1,\"code\":1},"
                   "{\"op\":\"account_open\",\"id\":2,\"ledger\":1,\"code\":1}]}"};
    http_answer a;
    curl_call(s, &c, &a);
    ck_assert_int_eq(a.status, 200);
    ck_assert_ptr_null(strstr(a.body, "\"code\":\"exists"));
    free(a.raw);
}

START_TEST(concurrent_identical_posts_apply_once)
{
    json_server s;
    json_up(&s, NULL, 0);
    open_accounts(&s);
    http_call c = {"POST", "/v1/transfer", {"Idempotency-Key: race-1", "Tally-Consumer: shop", NULL},
                   "{\"id\":\"000000000000000000000000000000aa\",\"debit_account_id\":1,"
                   "\"credit_account_id\":2,\"amount\":7,\"ledger\":1,\"code\":1}"};
    const char *argv[ARGS_MAX];
    char url[512];
    curl_argv(&s, &c, argv, url, sizeof(url));
    pid_t pids[CONCURRENT_POSTS];
    int fds[CONCURRENT_POSTS];
    for (int i = 0; i < CONCURRENT_POSTS; i++) {
        fds[i] = test_temp_fd();
        pids[i] = test_spawn(argv, NULL, fds[i], -1);
    }
    int fresh = 0, replayed = 0;
    for (int i = 0; i < CONCURRENT_POSTS; i++) {
        ck_assert_int_eq(test_wait(pids[i]), 0);
        http_answer a;
        answer_parse(test_fd_read_all(fds[i]), &a);
        ck_assert_int_eq(a.status, 200);
        char v[16];
        bool header = header_value(&a, "Idempotent-Replayed", v, sizeof(v));
        if (strstr(a.body, "\"replayed\":false")) {
            fresh++;
            ck_assert(!header);
        } else {
            ck_assert_ptr_nonnull(strstr(a.body, "\"replayed\":true"));
            ck_assert(header && strcmp(v, "true") == 0);
            replayed++;
        }
        ck_assert_ptr_nonnull(strstr(a.body, "\"seq\":3,"));
        free(a.raw);
    }
    ck_assert_int_eq(fresh, 1);
    ck_assert_int_eq(replayed, CONCURRENT_POSTS - 1);
    http_call get = {"GET", "/v1/accounts/2", {NULL}, NULL};
    http_answer a;
    curl_call(&s, &get, &a);
    ck_assert_msg(strstr(a.body, "\"credits_posted\":7,") != NULL, "%s", a.body);
    free(a.raw);
    http_call stats = {"GET", "/v1/stats", {NULL}, NULL};
    curl_call(&s, &stats, &a);
    ck_assert_msg(strstr(a.body, "\"head_seq\":3,") != NULL, "%s", a.body);
    free(a.raw);
    json_down(&s);
}
END_TEST

/* ---- status classes beyond the examples ---- */

/* A file of n bytes: a JSON object whose `correlation` is n - 20 x's. */
static void big_body_file(char *path, size_t path_size, const json_server *s, size_t n)
{
    snprintf(path, path_size, "%s/big.json", s->p.dir);
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fputs("{\"correlation\":\"", f);
    for (size_t i = 0; i < n - 20; i++)
        fputc('x', f);
    fputs("\"}", f);
    fclose(f);
}

static void assert_status(json_server *s, const http_call *c, int status, const char *code)
{
    http_answer a;
    curl_call(s, c, &a);
    ck_assert_msg(a.status == status, "%s %s: %d, want %d: %.200s", c->method, c->path, a.status,
                  status, a.body);
    if (code) {
        char want[96];
        snprintf(want, sizeof(want), "\"code\":\"%s\"", code);
        ck_assert_msg(strstr(a.body, want) != NULL, "%s %s: %s", c->method, c->path, a.body);
    }
    free(a.raw);
}

/* An invalid command is answered and not stored, on this wire as on
 * msgpack: the corrected request under the same key runs (PROTOCOL.md,
 * "Error codes"); a business rejection is stored and replays. */
START_TEST(invalid_commands_leave_the_key_free)
{
    json_server s;
    json_up(&s, NULL, 0);
    open_accounts(&s);
    http_call zero = {"POST", "/v1/transfer", {"Idempotency-Key: fix-me", NULL},
                      "{\"id\":\"000000000000000000000000000000c1\",\"debit_account_id\":1,"
                      "\"credit_account_id\":2,\"amount\":0,\"ledger\":1,\"code\":1}"};
    assert_status(&s, &zero, 422, "amount_must_not_be_zero");
    assert_status(&s, &zero, 422, "amount_must_not_be_zero");
    http_call fixed = {"POST", "/v1/transfer", {"Idempotency-Key: fix-me", NULL},
                       "{\"id\":\"000000000000000000000000000000c1\",\"debit_account_id\":1,"
                       "\"credit_account_id\":2,\"amount\":5,\"ledger\":1,\"code\":1}"};
    http_answer a;
    curl_call(&s, &fixed, &a);
    ck_assert_msg(a.status == 200 && strstr(a.body, "\"code\":\"ok\"") &&
                      strstr(a.body, "\"replayed\":false"),
                  "%d %s", a.status, a.body);
    free(a.raw);
    http_call missing = {"POST", "/v1/transfer", {"Idempotency-Key: stays", NULL},
                         "{\"id\":\"000000000000000000000000000000c2\",\"debit_account_id\":1,"
                         "\"credit_account_id\":9,\"amount\":5,\"ledger\":1,\"code\":1}"};
    assert_status(&s, &missing, 422, "credit_account_not_found");
    curl_call(&s, &missing, &a);
    ck_assert_msg(a.status == 422 && strstr(a.body, "\"replayed\":true"), "%d %s", a.status, a.body);
    free(a.raw);
    json_down(&s);
}
END_TEST

/* POST /v1/transfer without an id: the id of (consumer, key), as the CLI
 * and libtally's tally_uuid_from_key make it; the same request again is a
 * replay of the same transfer (PROTOCOL.md, "JSON API"). */
START_TEST(a_transfer_without_an_id_takes_the_keys)
{
    json_server s;
    json_up(&s, NULL, 0);
    open_accounts(&s);
    http_call pay = {"POST", "/v1/transfer", {"Idempotency-Key: order-77", "Tally-Consumer: shop", NULL},
                     "{\"debit_account_id\":1,\"credit_account_id\":2,\"amount\":5,\"ledger\":1,\"code\":1}"};
    for (int round = 0; round < 2; round++) {
        http_answer a;
        curl_call(&s, &pay, &a);
        ck_assert_msg(a.status == 200 && strstr(a.body, round ? "\"replayed\":true" : "\"replayed\":false"),
                      "%d %s", a.status, a.body);
        free(a.raw);
    }
    tally_id128 id;
    transfer_id_from_key("shop", "order-77", &id); /* as libtally's tally_uuid_from_key */
    char path[64], hex[33];
    tally_id128_to_hex(&id, hex);
    snprintf(path, sizeof(path), "/v1/transfers/%s", hex);
    http_call get = {"GET", path, {NULL}, NULL};
    http_answer a;
    curl_call(&s, &get, &a);
    ck_assert_msg(a.status == 200 && strstr(a.body, "\"amount\":5,"), "%s: %d %s", path, a.status, a.body);
    free(a.raw);
    json_down(&s);
}
END_TEST

START_TEST(limits_and_methods)
{
    json_server s;
    json_up(&s, NULL, 0);
    char path[400], at[410];
    /* over the HTTP body limit (1 MiB): 413 from the listener */
    big_body_file(path, sizeof(path), &s, 1100 * 1024);
    snprintf(at, sizeof(at), "@%s", path);
    http_call big = {"POST", "/v1/account_open", {"Idempotency-Key: big", NULL}, at};
    assert_status(&s, &big, 413, NULL);
    /* within it, but over msgpack's request limit (512 KiB) once packed */
    big_body_file(path, sizeof(path), &s, 600 * 1024);
    assert_status(&s, &big, 413, "request_too_large");
    /* headers over 32 KiB */
    char *header = malloc(40 * 1024);
    memcpy(header, "X-Big: ", 7);
    memset(header + 7, 'y', 40 * 1024 - 8);
    header[40 * 1024 - 1] = '\0';
    http_call tall = {"GET", "/v1/stats", {header, NULL}, NULL};
    assert_status(&s, &tall, 431, NULL);
    free(header);
    http_call put = {"PUT", "/v1/stats", {NULL}, NULL};
    assert_status(&s, &put, 405, NULL);
    http_call control = {"POST", "/v1/backup", {NULL}, "{\"path\":\"/tmp/x\"}"};
    assert_status(&s, &control, 404, "unknown_op");
    http_call resource = {"GET", "/v1/planets/3", {NULL}, NULL};
    assert_status(&s, &resource, 404, "not_found");
    http_call real = {"POST", "/v1/account_open", {"Idempotency-Key: r", NULL},
                      "{\"id\":1.5,\"ledger\":1,\"code\":1}"};
    assert_status(&s, &real, 400, "wrong_type");
    http_call array = {"POST", "/v1/account_open", {"Idempotency-Key: r", NULL}, "[1]"};
    assert_status(&s, &array, 400, "malformed_request");
    /* the webhook intake's consumer namespace is not a client's */
    http_call reserved = {"POST", "/v1/account_open",
                          {"Idempotency-Key: evt_1", "Tally-Consumer: webhook:stripe", NULL},
                          "{\"id\":1,\"ledger\":1,\"code\":1}"};
    assert_status(&s, &reserved, 400, "consumer_reserved");
    json_down(&s);
}
END_TEST

/* GET each of paths (NULL-terminated): status and code. */
static void assert_gets(json_server *s, const char *const *paths, int status, const char *code)
{
    for (size_t i = 0; paths[i]; i++) {
        http_call c = {"GET", paths[i], {NULL}, NULL};
        assert_status(s, &c, status, code);
    }
}

/* A GET's path parameter and query arguments, percent-decoded, are text
 * as a body is: bytes that are not UTF-8 are refused, not dropped (a
 * dropped `feature` turned entitlement_get into entitlement_list). */
START_TEST(get_arguments_not_utf8_are_malformed)
{
    json_server s;
    json_up(&s, NULL, 0);
    assert_gets(&s, (const char *const[]){"/v1/entitlements/alice?feature=%FF",
                                          "/v1/entitlements/alice?%FF=1", "/v1/log?from=%FF",
                                          "/v1/entitlements/%FF", NULL},
                400, "malformed_request");
    assert_gets(&s, (const char *const[]){"/v1/entitlements/%C3%A9?feature=pro", NULL}, 404,
                "not_found");
    json_down(&s);
}
END_TEST

/* The key a keyless batch member gets: 0x1f, the batch key's SHA-256 in
 * hex, '.', the index (docs/PROTOCOL.md, "JSON API"), computed here. */
static void derived_key(const char *batch_key, unsigned index, char *out, size_t size)
{
    uint8_t d[SHA256_BYTES];
    sha256_digest(batch_key, strlen(batch_key), d);
    char hex[2 * SHA256_BYTES + 1];
    for (int i = 0; i < SHA256_BYTES; i++)
        snprintf(hex + 2 * i, 3, "%02x", d[i]);
    snprintf(out, size, "\x1f%s.%u", hex, index);
}

static json_t *post_json(json_server *s, const char *path, const char *key, const char *body,
                         int status)
{
    char header[300];
    snprintf(header, sizeof(header), "Idempotency-Key: %s", key);
    http_call c = {"POST", path, {header, NULL}, body};
    http_answer a;
    curl_call(s, &c, &a);
    ck_assert_msg(a.status == status, "%s %s: %d: %s", path, key, a.status, a.body);
    json_error_t err;
    json_t *j = json_loads(a.body, 0, &err);
    ck_assert_msg(j != NULL, "%s", a.body);
    free(a.raw);
    return j;
}

/* A route's parameter is one path segment: more segments name no
 * resource (404), however the route ends. */
START_TEST(extra_path_segments_are_not_found)
{
    json_server s;
    json_up(&s, NULL, 0);
    assert_gets(&s, (const char *const[]){"/v1/entitlements/g-user/a", "/v1/accounts/1/x",
                                          "/v1/accounts/1/history/x", "/v1/accounts/1/2/history",
                                          "/v1/transfers/0000000000000000000000000000000e/x",
                                          "/v1/subscribers/a/b", "/v1/subscribers/a/b/dead_letters",
                                          NULL},
                404, "not_found");
    assert_gets(&s, (const char *const[]){"/v1/entitlements/g-user", NULL}, 200, "ok");
    json_down(&s);
}
END_TEST

/* A bool field takes a JSON bool; the text "true" is wrong_type as over
 * msgpack, in a body and in a batch member alike. Only a GET's query
 * arguments (text by nature) say true and false as words. */
START_TEST(a_bool_as_text_is_wrong_type)
{
    json_server s;
    json_up(&s, NULL, 0);
    json_decref(post_json(&s, "/v1/account_open", "b-1", "{\"id\":1,\"ledger\":1,\"code\":1}", 200));
    static const char *const bodies[] = {"{\"id\":1,\"reverse\":\"true\"}",
                                         "{\"id\":1,\"reverse\":\"false\"}",
                                         "{\"id\":1,\"reverse\":1}"};
    for (size_t i = 0; i < sizeof(bodies) / sizeof(bodies[0]); i++) {
        http_call c = {"POST", "/v1/account_history", {NULL}, bodies[i]};
        assert_status(&s, &c, 400, "wrong_type");
    }
    http_call fetch = {"POST", "/v1/sub_fetch", {NULL}, "{\"name\":\"m\",\"restart\":\"true\"}"};
    assert_status(&s, &fetch, 400, "wrong_type");
    http_call real = {"POST", "/v1/account_history", {NULL}, "{\"id\":1,\"reverse\":true}"};
    assert_status(&s, &real, 200, "ok");
    http_call query = {"GET", "/v1/accounts/1/history?reverse=true", {NULL}, NULL};
    assert_status(&s, &query, 200, "ok");
    json_down(&s);
}
END_TEST

/* Idempotency-Key and Tally-Consumer are text: bytes that are not UTF-8
 * are refused (400), not stored and answered altered. */
START_TEST(what_headers_carry_is_checked)
{
    json_server s;
    json_up(&s, NULL, 0);
    const char *body = "{\"id\":5,\"ledger\":1,\"code\":1}";
    http_call key = {"POST", "/v1/account_open", {"Idempotency-Key: k-\xff\xfe", NULL}, body};
    assert_status(&s, &key, 400, "malformed_request");
    http_call consumer = {"POST", "/v1/account_open",
                          {"Idempotency-Key: k-1", "Tally-Consumer: shop-\xc3", NULL}, body};
    assert_status(&s, &consumer, 400, "malformed_request");
    http_call get = {"GET", "/v1/accounts/5", {NULL}, NULL};
    assert_status(&s, &get, 404, "not_found"); /* nothing stored */
    http_call fine = {"POST", "/v1/account_open", {"Idempotency-Key: k-\xc3\xa9", NULL}, body};
    assert_status(&s, &fine, 200, "ok");
    /* a token goes in the Authorization header only: `auth` in a body or
     * a query is refused with a message that says where it goes */
    http_call in_body = {"POST", "/v1/stats", {NULL}, "{\"auth\":\"secret\"}"};
    http_answer a;
    curl_call(&s, &in_body, &a);
    ck_assert_msg(a.status == 400 && strstr(a.body, "\"code\":\"unknown_field\"") &&
                      strstr(a.body, "Authorization"), "%d %s", a.status, a.body);
    free(a.raw);
    assert_gets(&s, (const char *const[]){"/v1/stats?auth=secret", NULL}, 400, "unknown_field");
    json_down(&s);
}
END_TEST

/* A batch member's derived key cannot be one a client sends (the old
 * "<key>.<index>" collided with an explicit "<key>.0"), and its length
 * does not grow with the batch key's (a 128-byte batch key failed
 * key_too_long). A client key with the reserved first byte is refused on
 * both transports. */
START_TEST(batch_member_keys_are_derived_apart)
{
    json_server s;
    tally_client *c = NULL;
    wire_server_start(&s.p, &c, (const char *const[]){"--http", "http://127.0.0.1:0", NULL});
    s.port = s.p.http_port;
    snprintf(s.url, sizeof(s.url), "%s", s.p.http_url);
    char want[200];
    const char *member = "{\"ops\":[{\"op\":\"account_open\",\"id\":%d,\"ledger\":1,\"code\":1}]}";
    char body[200];
    snprintf(body, sizeof(body), member, 1);
    json_t *r = post_json(&s, "/v1/batch", "b-1", body, 200);
    json_t *result = json_array_get(json_object_get(r, "results"), 0);
    ck_assert_str_eq(json_string_value(json_object_get(result, "code")), "ok");
    derived_key("b-1", 0, want, sizeof(want));
    ck_assert_str_eq(json_string_value(json_object_get(result, "key")), want);
    json_decref(r);
    /* an explicit key of the old derived form is its own key */
    snprintf(body, sizeof(body), "{\"id\":2,\"ledger\":1,\"code\":1}");
    json_decref(post_json(&s, "/v1/account_open", "b-1.0", body, 200));
    /* a batch key of 128 bytes: members' keys stay short */
    char long_key[129];
    memset(long_key, 'k', 128);
    long_key[128] = '\0';
    snprintf(body, sizeof(body), member, 3);
    r = post_json(&s, "/v1/batch", long_key, body, 200);
    result = json_array_get(json_object_get(r, "results"), 0);
    ck_assert_str_eq(json_string_value(json_object_get(result, "code")), "ok");
    derived_key(long_key, 0, want, sizeof(want));
    ck_assert_str_eq(json_string_value(json_object_get(result, "key")), want);
    json_decref(r);
    /* the retried batch replays its member */
    r = post_json(&s, "/v1/batch", long_key, body, 200);
    result = json_array_get(json_object_get(r, "results"), 0);
    ck_assert(json_is_true(json_object_get(result, "replayed")));
    json_decref(r);
    /* a client may not send the reserved byte: JSON member key, header, msgpack */
    snprintf(body, sizeof(body),
             "{\"ops\":[{\"op\":\"account_open\",\"key\":\"\\u001fx\",\"id\":4,\"ledger\":1,\"code\":1}]}");
    json_decref(post_json(&s, "/v1/batch", "b-4", body, 400));
    snprintf(body, sizeof(body), "{\"id\":4,\"ledger\":1,\"code\":1}");
    derived_key("b-1", 0, want, sizeof(want));
    json_decref(post_json(&s, "/v1/account_open", want, body, 400));
    wire_reply w;
    wire_call(c, &w, "account_open", "ssuuu", "consumer", "http", "key", want, "id", 4, "ledger", 1,
              "code", 1);
    wire_expect(&w, "malformed_request");
    wire_done(&w);
    http_call get = {"GET", "/v1/accounts/4", {NULL}, NULL};
    assert_status(&s, &get, 404, "not_found");
    /* tally-recon takes the derived keys' inbox records and their events */
    tallyd_recon_clean(&s.p);
    wire_server_stop(&s.p, &c);
    tallyd_cleanup(&s.p);
}
END_TEST

START_TEST(storage_full_is_503_with_retry_after)
{
    json_server s;
    const char *more[] = {"--map-max-mb", "1", NULL};
    json_up(&s, more, 1);
    char path[400], at[410];
    snprintf(path, sizeof(path), "%s/batch.json", s.p.dir);
    bool full = false;
    for (int round = 0; round < 200 && !full; round++) {
        FILE *f = fopen(path, "w");
        ck_assert_ptr_nonnull(f);
        fputs("{\"ops\":[", f);
        for (int i = 0; i < 500; i++)
            fprintf(f, "%s{\"op\":\"account_open\",\"id\":%d,\"ledger\":1,\"code\":1}", i ? "," : "",
                    round * 500 + i + 1);
        fputs("]}", f);
        fclose(f);
        snprintf(at, sizeof(at), "@%s", path);
        char key[64];
        snprintf(key, sizeof(key), "Idempotency-Key: fill-%d", round);
        http_call c = {"POST", "/v1/batch", {key, NULL}, at};
        http_answer a;
        curl_call(&s, &c, &a);
        ck_assert_int_eq(a.status, 200); /* a batch answers per member */
        free(a.raw);
        /* a chain of 32 opens: one result, so one status (a failed batch
         * leaves room for a single open) */
        char probe_key[64], probe_path[400], probe_at[410];
        snprintf(probe_key, sizeof(probe_key), "Idempotency-Key: probe-%d", round);
        snprintf(probe_path, sizeof(probe_path), "%s/chain.json", s.p.dir);
        f = fopen(probe_path, "w");
        ck_assert_ptr_nonnull(f);
        fputs("{\"ops\":[", f);
        for (int i = 0; i < 32; i++)
            fprintf(f, "%s{\"op\":\"account_open\",\"id\":%d,\"ledger\":1,\"code\":1}", i ? "," : "",
                    1000000 + round * 32 + i);
        fputs("]}", f);
        fclose(f);
        snprintf(probe_at, sizeof(probe_at), "@%s", probe_path);
        http_call one = {"POST", "/v1/chain", {probe_key, NULL}, probe_at};
        curl_call(&s, &one, &a);
        if (a.status == 503) {
            char v[16];
            ck_assert(header_value(&a, "Retry-After", v, sizeof(v)));
            ck_assert_str_eq(v, "1");
            ck_assert_ptr_nonnull(strstr(a.body, "\"code\":\"storage_full\""));
            full = true;
        } else {
            ck_assert_msg(a.status == 200, "probe: %d %s", a.status, a.body);
        }
        free(a.raw);
    }
    ck_assert_msg(full, "the 1 MiB map never filled");
    json_down(&s);
}
END_TEST

/* A stop while an HTTP request waits (a long-poll, its connection
 * suspended): it is answered and tallyd exits cleanly. */
START_TEST(stop_with_a_request_waiting)
{
    json_server s;
    json_up(&s, NULL, 0);
    http_call c = {"GET", "/v1/log?from=10&wait_ms=25000", {NULL}, NULL};
    const char *argv[ARGS_MAX];
    char url[512];
    curl_argv(&s, &c, argv, url, sizeof(url));
    int fd = test_temp_fd();
    pid_t pid = test_spawn(argv, NULL, fd, -1);
    /* it waits once /metrics counts it (its connection open is not
     * enough: its request may not have been read yet) */
    ck_assert_msg(test_metrics_sample_reaches(s.port, "tally_http_requests_waiting", 1, 30000),
                  "the long-poll never showed in /metrics");
    json_down(&s);
    ck_assert_int_eq(test_wait(pid), 0);
    http_answer a;
    answer_parse(test_fd_read_all(fd), &a);
    ck_assert_msg(a.status == 200 || a.status == 503, "%d %s", a.status, a.body);
    free(a.raw);
}
END_TEST

/* A stop while a request is half sent (its headers in, its body still
 * coming): the listener closes, and the request is read to its end and
 * answered 503 shutting_down rather than its connection closed under it. */
START_TEST(stop_with_a_request_half_sent)
{
    json_server s;
    json_up(&s, NULL, 0);
    static const char body[] =
        "{\"ops\":[{\"op\":\"account_open\",\"id\":7,\"ledger\":1,\"code\":1}]}";
    char head[256];
    int head_len = snprintf(head, sizeof(head),
                            "POST /v1/batch HTTP/1.1\r\nHost: x\r\nIdempotency-Key: half\r\n"
                            "Content-Type: application/json\r\nContent-Length: %zu\r\n\r\n",
                            sizeof(body) - 1);
    int fd = test_tcp_connect(s.port);
    ck_assert_int_ge(fd, 0);
    size_t half = 10;
    ck_assert_int_eq(write(fd, head, (size_t)head_len), head_len);
    ck_assert_int_eq(write(fd, body, half), (ssize_t)half);
    /* its headers read: /metrics counts it and the scrape in flight */
    ck_assert_msg(test_metrics_sample_reaches(s.port, "tally_http_requests_in_flight", 2, 30000),
                  "the half-sent request never showed in /metrics");
    kill(s.p.pid, SIGTERM);
    ck_assert(tallyd_log_wait(&s.p, "stopping: finishing the group in progress", 30000));
    /* the test's point: the rest comes while the listener drains */
    ck_assert_msg(tallyd_log_wait(&s.p, "HTTP: listener closed", 30000),
                  "the HTTP listener never said it drains");
    ck_assert_int_eq(write(fd, body + half, sizeof(body) - 1 - half), (ssize_t)(sizeof(body) - 1 - half));
    char answer[4096];
    size_t got = 0;
    for (ssize_t n; got < sizeof(answer) - 1 && (n = read(fd, answer + got, sizeof(answer) - 1 - got)) > 0;)
        got += (size_t)n;
    answer[got] = '\0';
    close(fd);
    ck_assert_msg(strncmp(answer, "HTTP/1.1 503", 12) == 0, "answer: [%s]", answer);
    ck_assert_msg(strstr(answer, "\"code\":\"shutting_down\"") != NULL, "%s", answer);
    json_down(&s);
}
END_TEST

/* ---- the value rule ---- */

START_TEST(big_integers_are_strings_both_ways)
{
    json_server s;
    json_up(&s, NULL, 0);
    /* 2^64-1 as a string in, a string out */
    http_call open = {"POST", "/v1/batch", {"Idempotency-Key: big", NULL},
                      "{\"ops\":[{\"op\":\"account_open\",\"id\":\"18446744073709551615\",\"ledger\":1,\"code\":1},"
                      "{\"op\":\"account_open\",\"id\":9007199254740993,\"ledger\":1,\"code\":1}]}"};
    assert_status(&s, &open, 200, "ok");
    http_call get_max = {"GET", "/v1/accounts/18446744073709551615", {NULL}, NULL};
    http_answer a;
    curl_call(&s, &get_max, &a);
    ck_assert_msg(strstr(a.body, "\"id\":\"18446744073709551615\"") != NULL, "%s", a.body);
    free(a.raw);
    /* 2^53 exactly is a number; 2^53+1 (sent as a JSON number) a string */
    http_call pay = {"POST", "/v1/transfer", {"Idempotency-Key: p1", NULL},
                     "{\"id\":\"000000000000000000000000000000b1\",\"debit_account_id\":\"18446744073709551615\","
                     "\"credit_account_id\":9007199254740993,\"amount\":9007199254740992,\"ledger\":1,\"code\":1}"};
    assert_status(&s, &pay, 200, "ok");
    http_call get = {"GET", "/v1/accounts/9007199254740993", {NULL}, NULL};
    curl_call(&s, &get, &a);
    ck_assert_msg(strstr(a.body, "\"id\":\"9007199254740993\"") && strstr(a.body, "\"credits_posted\":9007199254740992,"),
                  "%s", a.body);
    free(a.raw);
    http_call pay2 = {"POST", "/v1/transfer", {"Idempotency-Key: p2", NULL},
                      "{\"id\":\"000000000000000000000000000000b2\",\"debit_account_id\":\"18446744073709551615\","
                      "\"credit_account_id\":\"9007199254740993\",\"amount\":\"1\",\"ledger\":1,\"code\":1}"};
    assert_status(&s, &pay2, 200, "ok");
    curl_call(&s, &get, &a);
    ck_assert_msg(strstr(a.body, "\"credits_posted\":\"9007199254740993\""), "%s", a.body);
    free(a.raw);
    /* beyond int64 for an amount: the decoder's own code; beyond u64: wrong_type */
    http_call over = {"POST", "/v1/transfer", {"Idempotency-Key: p3", NULL},
                      "{\"id\":\"000000000000000000000000000000b3\",\"debit_account_id\":1,"
                      "\"credit_account_id\":2,\"amount\":\"9223372036854775808\",\"ledger\":1,\"code\":1}"};
    assert_status(&s, &over, 422, "amount_overflows");
    http_call huge = {"POST", "/v1/account_open", {"Idempotency-Key: p4", NULL},
                      "{\"id\":\"18446744073709551616\",\"ledger\":1,\"code\":1}"};
    assert_status(&s, &huge, 400, "wrong_type");
    json_down(&s);
}
END_TEST

/* ---- a paged list ---- */

/* GET path: 200 and its body as JSON. */
static json_t *get_json(json_server *s, const char *path)
{
    http_call c = {"GET", path, {NULL}, NULL};
    http_answer a;
    curl_call(s, &c, &a);
    ck_assert_msg(a.status == 200, "GET %s: %d %.200s", path, a.status, a.body);
    json_error_t e;
    json_t *j = json_loads(a.body, 0, &e);
    ck_assert_msg(j != NULL, "GET %s: not JSON (%s): %.200s", path, e.text, a.body);
    free(a.raw);
    return j;
}

/* An id of a reply: a JSON integer, or a decimal string beyond 2^53. */
static void id_text(const json_t *v, char *out, size_t size)
{
    if (json_is_integer(v))
        snprintf(out, size, "%lld", (long long)json_integer_value(v));
    else if (json_is_string(v))
        snprintf(out, size, "%s", json_string_value(v));
    else
        ck_abort_msg("an id that is neither an integer nor a string");
}

START_TEST(account_pages_walk_to_the_end)
{
    json_server s;
    json_up(&s, NULL, 0);
    json_t *empty = get_json(&s, "/v1/accounts");
    ck_assert_uint_eq(json_array_size(json_object_get(empty, "entries")), 0);
    ck_assert(json_is_null(json_object_get(empty, "next")));
    json_decref(empty);

    http_call open = {"POST", "/v1/batch", {"Idempotency-Key: list", NULL},
                      "{\"ops\":[{\"op\":\"account_open\",\"id\":3,\"ledger\":1,\"code\":1},"
                      "{\"op\":\"account_open\",\"id\":\"18446744073709551615\",\"ledger\":1,\"code\":1},"
                      "{\"op\":\"account_open\",\"id\":1,\"ledger\":1,\"code\":1},"
                      "{\"op\":\"account_open\",\"id\":9007199254740993,\"ledger\":1,\"code\":1},"
                      "{\"op\":\"account_open\",\"id\":2,\"ledger\":1,\"code\":1}]}"};
    assert_status(&s, &open, 200, "ok");

    static const char *const want[] = {"1", "2", "3", "9007199254740993", "18446744073709551615"};
    static const char *const want_next[] = {"2", "9007199254740993", NULL};
    char path[128] = "/v1/accounts?limit=2", id[32];
    size_t seen = 0;
    for (int page = 0; page < 3; page++) {
        json_t *j = get_json(&s, path);
        json_t *entries = json_object_get(j, "entries"), *next = json_object_get(j, "next");
        ck_assert_uint_eq(json_array_size(entries), page < 2 ? 2 : 1);
        for (size_t i = 0; i < json_array_size(entries); i++, seen++) {
            id_text(json_object_get(json_array_get(entries, i), "id"), id, sizeof(id));
            ck_assert_str_eq(id, want[seen]);
            /* each entry is account_get's `account` */
            char one[64];
            snprintf(one, sizeof(one), "/v1/accounts/%s", id);
            json_t *got = get_json(&s, one);
            ck_assert(json_equal(json_object_get(got, "account"), json_array_get(entries, i)));
            json_decref(got);
        }
        if (want_next[page] == NULL) {
            ck_assert_msg(json_is_null(next), "page %d: next is not null", page);
        } else {
            id_text(next, id, sizeof(id));
            ck_assert_str_eq(id, want_next[page]);
            snprintf(path, sizeof(path), "/v1/accounts?after_id=%s&limit=2", id);
        }
        json_decref(j);
    }
    ck_assert_uint_eq(seen, 5);

    json_t *past = get_json(&s, "/v1/accounts?after_id=18446744073709551615");
    ck_assert_uint_eq(json_array_size(json_object_get(past, "entries")), 0);
    json_decref(past);
    http_call post = {"POST", "/v1/account_list", {NULL}, "{\"after_id\":\"9007199254740993\"}"};
    assert_status(&s, &post, 200, "ok");
    http_call bad[] = {{"GET", "/v1/accounts?limit=0", {NULL}, NULL},
                       {"GET", "/v1/accounts?limit=1001", {NULL}, NULL},
                       {"GET", "/v1/accounts?after_id=-1", {NULL}, NULL},
                       {"GET", "/v1/accounts?limit=two", {NULL}, NULL},
                       {"GET", "/v1/accounts?after=1", {NULL}, NULL},
                       {"GET", "/v1/accounts?limit=1&limit=2", {NULL}, NULL}};
    const char *codes[] = {"value_out_of_range", "value_out_of_range", "value_out_of_range",
                           "wrong_type", "unknown_field", "duplicate_field"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        assert_status(&s, &bad[i], 400, codes[i]);
    json_down(&s);
}
END_TEST

/* min_seq on reads in single-node mode (docs/CLUSTER.md, "Reads"): a
 * query argument or body field compared with the log's head seq; a read
 * asking for a seq the log has not reached waits for the write that
 * makes it, and past --cluster-read-wait-ms is 503 not_caught_up. */
typedef struct waiting_read {
    json_server *s;
    const char *path;
    http_answer a;
} waiting_read;

static void *read_in_background(void *arg)
{
    waiting_read *w = arg;
    http_call c = {"GET", w->path, {NULL}, NULL};
    curl_call(w->s, &c, &w->a);
    return NULL;
}

START_TEST(a_read_waits_for_its_min_seq)
{
    json_server s;
    static const char *const wait[] = {"--cluster-read-wait-ms", "120000", NULL};
    json_up(&s, wait, 0);
    json_decref(post_json(&s, "/v1/account_open", "m-1", "{\"id\":1,\"ledger\":1,\"code\":1}", 200));
    http_call now = {"GET", "/v1/stats?min_seq=1", {NULL}, NULL};
    assert_status(&s, &now, 200, "ok");
    http_call body = {"POST", "/v1/account_get", {NULL}, "{\"id\":1,\"min_seq\":1}"};
    assert_status(&s, &body, 200, "ok");
    http_call text = {"GET", "/v1/stats?min_seq=soon", {NULL}, NULL};
    assert_status(&s, &text, 400, "wrong_type");
    /* account 2 is opened at seq 2: a read of it asking for seq 2 waits for it */
    waiting_read w = {&s, "/v1/accounts/2?min_seq=2", {0}};
    pthread_t th;
    ck_assert_int_eq(pthread_create(&th, NULL, read_in_background, &w), 0);
    ck_assert_msg(test_metrics_sample_reaches(s.port, "tally_long_polls_parked", 1, 60000),
                  "the read with min_seq 2 never parked");
    json_decref(post_json(&s, "/v1/account_open", "m-2", "{\"id\":2,\"ledger\":1,\"code\":1}", 200));
    pthread_join(th, NULL);
    ck_assert_msg(w.a.status == 200 && strstr(w.a.body, "\"code\":\"ok\""), "%d: %s", w.a.status,
                  w.a.body);
    free(w.a.raw);
    json_down(&s);
    static const char *const short_wait[] = {"--cluster-read-wait-ms", "100", NULL};
    json_up(&s, short_wait, 0);
    http_call ahead = {"GET", "/v1/stats?min_seq=5", {NULL}, NULL};
    assert_status(&s, &ahead, 503, "not_caught_up");
    http_call cluster = {"GET", "/v1/cluster", {NULL}, NULL}; /* single-node: no cluster */
    assert_status(&s, &cluster, 400, "not_in_cluster_mode");
    json_down(&s);
}
END_TEST

int main(void)
{
    const test_row rows[] = {
        {"doc", documented_examples_replay, 300},
        {"doc", every_op_has_an_example, 300},
        {"doc", status_table_matches_the_server, 300},
        {"semantics", concurrent_identical_posts_apply_once, 300},
        {"semantics", big_integers_are_strings_both_ways, 300},
        {"semantics", account_pages_walk_to_the_end, 300},
        {"limits", limits_and_methods, 300},
        {"idempotency", invalid_commands_leave_the_key_free, 300},
        {"idempotency", a_transfer_without_an_id_takes_the_keys, 300},
        {"limits", get_arguments_not_utf8_are_malformed, 300},
        {"edges", extra_path_segments_are_not_found, 300},
        {"edges", a_bool_as_text_is_wrong_type, 300},
        {"edges", what_headers_carry_is_checked, 300},
        {"edges", batch_member_keys_are_derived_apart, 300},
        {"limits", storage_full_is_503_with_retry_after, 300},
        {"limits", stop_with_a_request_waiting, 300},
        {"limits", stop_with_a_request_half_sent, 300},
        {"semantics", a_read_waits_for_its_min_seq, 300},
    };
    return test_run_suite(test_suite_of_rows("json", TEST_ROWS(rows)));
}
