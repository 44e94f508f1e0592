/*
 * fuzz_seeds.c — seed inputs for the fuzz targets, generated so they never
 * drift from what they copy (fuzz.h, fuzz_seeds_each):
 *   - request and reply: every hex example of docs/PROTOCOL.md ("..":
 *     zero), every request of its bad-input table and setup block;
 *   - event: every event of a store that went through the full scenario
 *     (fuzz_store.c): all event types, as the log stores them;
 *   - reply: the reply of every read op on that store, packed by the
 *     server's own reply code;
 *   - json: the op and body of every POST ```json-example of
 *     docs/PROTOCOL.md;
 *   - webhook: sources files (good lines, each error of a line) and
 *     deliveries of each scheme, as they are and to be signed by the
 *     target (fuzz_webhook.c).
 *   - auth: every ```auth-file block of docs/SECURITY.md.
 * Built with FUZZ_SEEDS_MAIN it is a program: `fuzz_seeds DIR` writes each
 * seed to DIR/<target>/<name>.
 */
#include "tests/fuzz/fuzz.h"

#include "common/error.h"
#include "common/msgpack_safe.h"
#include "log/log.h"
#include "net/ops/protocol.h"
#include "tests/support/doc_requests.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct seeder {
    fuzz_seed_fn fn;
    void *ctx;
    long count;
} seeder;

static void emit(seeder *s, const char *target, const char *name, const uint8_t *data,
                 size_t size)
{
    s->fn(target, name, data, size, s->ctx);
    s->count++;
}

static int doc_examples(seeder *s, const char *doc)
{
    static uint8_t bytes[DOC_HEX_BYTES_MAX];
    const char *cursor = doc;
    doc_example ex;
    bool bad;
    for (int i = 1; doc_example_next(&cursor, &ex, &bad); i++) {
        char name[64];
        snprintf(name, sizeof(name), "doc-example-%02d", i);
        long n = doc_hex_parse(ex.request_hex, bytes, NULL, sizeof(bytes));
        if (n >= 0)
            emit(s, "request", name, bytes, (size_t)n);
        n = n < 0 ? n : doc_hex_parse(ex.reply_hex, bytes, NULL, sizeof(bytes));
        if (n < 0) {
            fprintf(stderr, "fuzz_seeds: example %d: bad hex\n", i);
            return -1;
        }
        emit(s, "reply", name, bytes, (size_t)n);
    }
    return bad ? -1 : 0;
}

static int notation_seed(seeder *s, const char *name, const char *text)
{
    doc_bytes b;
    char err[256];
    if (doc_request_build(text, &b, err, sizeof(err)) != 0) {
        fprintf(stderr, "fuzz_seeds: %s: %s\n", name, err);
        return -1;
    }
    emit(s, "request", name, b.data, b.len);
    doc_bytes_free(&b);
    return 0;
}

static int doc_bad_inputs(seeder *s, const char *doc)
{
    doc_bad_input_table t;
    char err[256], name[64];
    int rc = doc_bad_input_parse(doc, &t, err, sizeof(err));
    if (rc != 0)
        fprintf(stderr, "fuzz_seeds: the bad-input table: %s\n", err);
    for (size_t i = 0; rc == 0 && i < t.setup_count; i++) {
        snprintf(name, sizeof(name), "doc-setup-%02zu", i + 1);
        rc = notation_seed(s, name, t.setup[i]);
    }
    for (size_t i = 0; rc == 0 && i < t.count; i++) {
        snprintf(name, sizeof(name), "doc-bad-input-%03u", t.rows[i].number);
        rc = notation_seed(s, name, t.rows[i].request);
    }
    doc_bad_input_free(&t);
    return rc;
}

/* "OP\nBODY" of each POST json-example (the block's op, its body line). */
static void doc_json_examples(seeder *s, const char *doc)
{
    static const char fence[] = "```json-example ";
    int i = 0;
    for (const char *at = strstr(doc, fence); at; at = strstr(at + 1, fence)) {
        const char *op = at + sizeof(fence) - 1;
        const char *end = strstr(op, "\n```");
        const char *body = strstr(op, "\n>\n> ");
        if (end == NULL || body == NULL || body > end)
            continue;
        body += 5;
        size_t op_len = strcspn(op, "\n"), body_len = strcspn(body, "\n");
        uint8_t *seed = malloc(op_len + 1 + body_len);
        if (seed == NULL)
            return;
        memcpy(seed, op, op_len);
        seed[op_len] = '\n';
        memcpy(seed + op_len + 1, body, body_len);
        char name[64];
        snprintf(name, sizeof(name), "doc-json-example-%02d", ++i);
        emit(s, "json", name, seed, op_len + 1 + body_len);
        free(seed);
    }
}

/* The text of each ```auth-file block of docs/SECURITY.md. */
static void doc_auth_files(seeder *s)
{
    static const char fence[] = "```auth-file\n";
    char *doc = doc_read("SECURITY.md");
    int i = 0;
    for (const char *at = doc ? strstr(doc, fence) : NULL; at; at = strstr(at + 1, fence)) {
        const char *text = at + sizeof(fence) - 1;
        const char *end = strstr(text, "```");
        if (end == NULL)
            break;
        char name[64];
        snprintf(name, sizeof(name), "doc-auth-file-%02d", ++i);
        emit(s, "auth", name, (const uint8_t *)text, (size_t)(end - text));
    }
    free(doc);
}

static int event_seed(uint64_t seq, const void *bytes, size_t len, void *ctx)
{
    char name[64];
    snprintf(name, sizeof(name), "event-%03llu", (unsigned long long)seq);
    emit(ctx, "event", name, bytes, len);
    return 0;
}

/* Reads answered by the server's reply code on the scenario store. */
static const char *const reads[] = {
    "{\"v\": 1, \"op\": \"account_get\", \"id\": 1}",
    "{\"v\": 1, \"op\": \"account_history\", \"id\": 1}",
    "{\"v\": 1, \"op\": \"account_history\", \"id\": 2, \"limit\": 2, \"reverse\": true}",
    "{\"v\": 1, \"op\": \"account_list\"}",
    "{\"v\": 1, \"op\": \"account_list\", \"after_id\": 1, \"limit\": 2}",
    "{\"v\": 1, \"op\": \"transfer_get\", \"id\": bin(0000000000000000000000000000000c)}",
    "{\"v\": 1, \"op\": \"entitlement_get\", \"subject\": \"bob\", \"feature\": \"pro\"}",
    "{\"v\": 1, \"op\": \"entitlement_list\", \"subject\": \"alice\"}",
    "{\"v\": 1, \"op\": \"log_read\", \"from_seq\": 1, \"limit\": 1000}",
    "{\"v\": 1, \"op\": \"stats\"}",
};

static int read_reply_seed(seeder *s, store *st, net_request *req, const char *text, int i)
{
    doc_bytes b;
    char err[256];
    if (doc_request_build(text, &b, err, sizeof(err)) != 0 ||
        net_request_decode(req, b.data, b.len) != TALLY_ok) {
        fprintf(stderr, "fuzz_seeds: read %d does not decode\n", i);
        doc_bytes_free(&b);
        return -1;
    }
    net_out o;
    store_txn t;
    int rc = net_out_begin(&o) == 0 ? store_txn_begin(st, NULL, true, &t) : TALLY_internal;
    nng_msg *m = NULL;
    if (rc == TALLY_ok) {
        req->op->read(&o, &t, req, FUZZ_NOW_MS);
        store_txn_abort(&t);
        m = net_out_take(&o);
        rc = m ? TALLY_ok : TALLY_internal;
    }
    char name[64];
    snprintf(name, sizeof(name), "read-%d-%s", i, req->op->name);
    if (rc == TALLY_ok)
        emit(s, "reply", name, nng_msg_body(m), nng_msg_len(m));
    if (m)
        nng_msg_free(m);
    net_request_reset(req);
    doc_bytes_free(&b);
    return rc == TALLY_ok ? 0 : -1;
}

static int store_seeds(seeder *s)
{
    store *st = fuzz_store_create();
    net_request *req = malloc(sizeof(*req));
    int rc = st && req ? fuzz_store_scenario(st, 1) : -1;
    store_txn t;
    if (rc == 0 && store_txn_begin(st, NULL, true, &t) == TALLY_ok) {
        rc = log_read(&t, 1, UINT64_MAX, event_seed, s) == TALLY_ok ? 0 : -1;
        store_txn_abort(&t);
    }
    if (req)
        net_request_init(req);
    for (size_t i = 0; rc == 0 && i < sizeof(reads) / sizeof(reads[0]); i++)
        rc = read_reply_seed(s, st, req, reads[i], (int)i + 1);
    free(req);
    store_close(st);
    return rc;
}

/* The webhook target's inputs: a mode byte (0 file, 1 delivery, 2
 * delivery signed by the target), for deliveries a source byte, then text. */
static void webhook_seeds(seeder *s)
{
    static const struct {
        const char *name, *text;
    } seeds[] = {
        {"file-sources", "\0# sources\nstd standard /nonexistent/a,/nonexistent/b tolerance=300\n"
                         "pay stripe /nonexistent/s\n"},
        {"file-hmac-options", "\0gh hmac-sha256 /nonexistent/g signature_header=X-Sig "
                              "id_field=delivery_id type_field=type\n"},
        {"file-errors", "\0x nosuch /a\nbad name! stripe /a\nx stripe /a tolerance=abc\n"},
        {"standard", "\1\0webhook-id: msg_1\nwebhook-timestamp: 1767225600\n"
                     "webhook-signature: v1,AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=\n\n"
                     "{\"type\":\"invoice.paid\"}"},
        {"stripe", "\1\1Stripe-Signature: t=1767225600,v1=00,v0=11\n\n"
                   "{\"id\":\"evt_1\",\"type\":\"charge.succeeded\"}"},
        {"hmac", "\1\2X-Hub-Signature-256: sha256=00\nX-GitHub-Delivery: d-1\n\n{}"},
        {"signed-standard", "\2\0\n{\"type\":\"invoice.paid\",\"data\":{}}"},
        {"signed-stripe", "\2\1\n{\"id\":\"evt_1\",\"type\":\"charge.succeeded\"}"},
        {"signed-hmac", "\2\2X-GitHub-Delivery: d-1\nX-GitHub-Event: issues\n\n{\"a\":1}"},
        {"signed-hmac-field", "\2\3\n{\"delivery_id\":\"j-1\"}"},
    };
    for (size_t i = 0; i < sizeof(seeds) / sizeof(seeds[0]); i++) {
        /* the mode (and source) bytes may be 0: the text's length past them */
        const char *t = seeds[i].text;
        size_t lead = t[0] == 0 ? 1 : 2;
        emit(s, "webhook", seeds[i].name, (const uint8_t *)t, lead + strlen(t + lead));
    }
}

long fuzz_seeds_each(fuzz_seed_fn fn, void *ctx)
{
    seeder s = {fn, ctx, 0};
    char *doc = doc_read("PROTOCOL.md");
    if (doc == NULL) {
        fprintf(stderr, "fuzz_seeds: cannot read docs/PROTOCOL.md (set TALLY_DOCS)\n");
        return -1;
    }
    int rc = doc_examples(&s, doc);
    if (rc == 0)
        rc = doc_bad_inputs(&s, doc);
    if (rc == 0)
        doc_json_examples(&s, doc);
    free(doc);
    webhook_seeds(&s);
    if (rc == 0)
        doc_auth_files(&s);
    if (rc == 0)
        rc = store_seeds(&s);
    return rc == 0 ? s.count : -1;
}

#ifdef FUZZ_SEEDS_MAIN
#include <errno.h>
#include <sys/stat.h>

static void write_seed(const char *target, const char *name, const uint8_t *data, size_t size,
                       void *ctx)
{
    char path[1024];
    snprintf(path, sizeof(path), "%s/%s", (const char *)ctx, target);
    if (mkdir(path, 0755) != 0 && errno != EEXIST)
        fuzz_fail("mkdir %s: %s", path, strerror(errno));
    snprintf(path, sizeof(path), "%s/%s/%s", (const char *)ctx, target, name);
    FILE *f = fopen(path, "wb");
    if (f == NULL || fwrite(data, 1, size, f) != size || fclose(f) != 0)
        fuzz_fail("writing %s", path);
}

int main(int argc, char **argv)
{
    if (argc != 2 || strcmp(argv[1], "--help") == 0) {
        fprintf(argc == 2 ? stdout : stderr,
                "usage: fuzz_seeds DIR\n"
                "Writes the fuzz targets' seed inputs to DIR/<target>/<name>: the examples\n"
                "and bad-input table of docs/PROTOCOL.md ($TALLY_DOCS, else ./docs), the\n"
                "events of a scenario store and the server's replies to reads on it.\n");
        return argc == 2 ? 0 : 2;
    }
    if (mkdir(argv[1], 0755) != 0 && errno != EEXIST) {
        perror(argv[1]);
        return 1;
    }
    long n = fuzz_seeds_each(write_seed, argv[1]);
    if (n < 0)
        return 1;
    printf("fuzz_seeds: %ld seeds in %s\n", n, argv[1]);
    return 0;
}
#endif
