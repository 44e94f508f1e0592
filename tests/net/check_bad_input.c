/*
 * check_bad_input.c — docs/PROTOCOL.md's bad-input table, one test per row,
 * against a real tallyd over NNG on ipc://.
 *
 * The table is read from the doc (tests/support/doc_requests.h), so the
 * table and the server's behaviour cannot drift apart. Each row's test:
 *   - starts a tallyd on an empty store and sends the doc's setup requests;
 *   - takes a digest of every database (read-only, beside the running
 *     server) and the `stats` reply;
 *   - sends the row's request and asserts the documented code, and the
 *     message (refusals) or the shape of a write result (seq nil, 0 events);
 *   - asserts `stats` did not move, except the inbox by one for a stored
 *     outcome; a stored outcome is then sent again and must be replayed
 *     without any change;
 *   - asserts the server still serves: a read, and a setup write replayed;
 *   - stops tallyd (it must exit 0) and compares the store with the digest:
 *     every database identical, except one new inbox record (with the row's
 *     code) when the outcome is stored, and one failed id when a transfer
 *     failed with a business rejection.
 * A separate test checks the table is complete: every refusal code of the
 * error enum and every class named in issue 6 has a row.
 *
 * tallyd runs with --auth (docs/SECURITY.md): one principal with every
 * grant, whose token the client adds to every request map that has no
 * `auth` of its own (tally_request_raw), and a read-only one, so the rows
 * of unauthenticated and forbidden requests run like every other row.
 */
#include "tests/support/doc_requests.h"
#include "tests/support/tallyd_harness.h"
#include "tests/support/test_support.h"

#include "clients/libtally/tally.h"
#include "common/msgpack_safe.h"
#include "common/sha256.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <fcntl.h>
#include <unistd.h>

#define CLIENT_TIMEOUT_MS 30000
#define CLIENT_RETRIES 5
#define ROW_TIMEOUT_S 90
#define NAME_BYTES_MAX 256
#define ERR_BYTES_MAX 256

/* The principals of the table's tallyd (their tokens appear in rows). */
#define TABLE_TOKEN "bad-input-token"
#define READER_TOKEN "bad-input-reader"

static doc_bad_input_table table;
static char auth_dir[256], auth_file[300];
static char table_error[ERR_BYTES_MAX];
static tallyd_proc *proc; /* shared with the runner: it kills what a failed test left */

static void kill_leftover(void)
{
    if (proc->pid > 0) {
        kill(proc->pid, SIGKILL);
        waitpid(proc->pid, NULL, 0); /* not the runner's child: returns at once */
    }
    if (proc->dir[0] && !getenv("TALLY_KEEP_TEST_DIRS"))
        test_remove_dir(proc->dir);
    memset(proc, 0, sizeof(*proc));
}

/* ---- requests and replies ---- */

static tally_client *client_open(const char *url)
{
    tally_client_options o = {.url = url, .timeout_ms = CLIENT_TIMEOUT_MS,
                              .retries = CLIENT_RETRIES, .retries_set = true,
                              .token = TABLE_TOKEN};
    tally_client *c = NULL;
    int rc = tally_client_open(&o, &c);
    ck_assert_msg(rc == TALLY_ok, "tally_client_open: %s", tally_strerror(rc));
    return c;
}

static void build(const char *notation, doc_bytes *out)
{
    char err[ERR_BYTES_MAX];
    int rc = doc_request_build(notation, out, err, sizeof(err));
    ck_assert_msg(rc == 0, "cannot build `%s`: %s", notation, err);
}

typedef struct reply {
    void *bytes;
    size_t len;
    msgpack_unpacked up;
    const msgpack_object *map;
} reply;

static void reply_free(reply *r)
{
    msgpack_unpacked_destroy(&r->up);
    free(r->bytes);
    memset(r, 0, sizeof(*r));
}

/* Send bytes once (retried only when not answered) and decode the reply. */
static void exchange(tally_client *c, const doc_bytes *req, reply *r)
{
    memset(r, 0, sizeof(*r));
    ck_assert_msg(req->len > 0, "libtally sends no empty message; check_tallyd sends one");
    int rc = tally_request_raw(c, req->data, req->len, &r->bytes, &r->len);
    ck_assert_msg(rc == TALLY_ok, "request of %zu bytes: %s", req->len, tally_strerror(rc));
    msgpack_unpacked_init(&r->up);
    rc = msgpack_safe_unpack(r->bytes, r->len, TALLY_MSGPACK_DEPTH_MAX, &r->up);
    ck_assert_msg(rc == TALLY_ok && r->up.data.type == MSGPACK_OBJECT_MAP,
                  "the reply is not one msgpack map");
    r->map = &r->up.data;
}

static bool str_is(const msgpack_object *o, const char *s)
{
    size_t n = strlen(s);
    return o && o->type == MSGPACK_OBJECT_STR && o->via.str.size == n &&
           memcmp(o->via.str.ptr, s, n) == 0;
}

static void text_of(const msgpack_object *o, char out[NAME_BYTES_MAX])
{
    if (o && o->type == MSGPACK_OBJECT_STR)
        snprintf(out, NAME_BYTES_MAX, "%.*s", (int)o->via.str.size, o->via.str.ptr);
    else
        snprintf(out, NAME_BYTES_MAX, "(%s)", o ? "not a string" : "absent");
}

/* The consumer and key a request names at its top level ("" if none). */
typedef struct request_names {
    char consumer[NAME_BYTES_MAX];
    char key[NAME_BYTES_MAX];
    char op[NAME_BYTES_MAX];
    bool has_key;
} request_names;

static request_names names_of(const doc_bytes *req)
{
    request_names n = {0};
    msgpack_unpacked up;
    msgpack_unpacked_init(&up);
    if (req->len && msgpack_safe_unpack(req->data, req->len, TALLY_MSGPACK_DEPTH_MAX, &up) ==
                        TALLY_ok) {
        const msgpack_object *consumer = msgpack_safe_map_get(&up.data, "consumer");
        const msgpack_object *key = msgpack_safe_map_get(&up.data, "key");
        const msgpack_object *op = msgpack_safe_map_get(&up.data, "op");
        if (op && op->type == MSGPACK_OBJECT_STR && op->via.str.size < NAME_BYTES_MAX)
            text_of(op, n.op);
        if (consumer && consumer->type == MSGPACK_OBJECT_STR)
            text_of(consumer, n.consumer);
        n.has_key = key && key->type == MSGPACK_OBJECT_STR && key->via.str.size < NAME_BYTES_MAX;
        if (n.has_key)
            text_of(key, n.key);
    }
    msgpack_unpacked_destroy(&up);
    return n;
}

/* The reply the row documents: its code, then either exactly {v, code,
 * message} with the message, or a write result that changed nothing. */
static void assert_row_reply(const doc_bad_input_row *row, const reply *r,
                             const request_names *names, bool replayed)
{
    char got[NAME_BYTES_MAX];
    text_of(msgpack_safe_map_get(r->map, "code"), got);
    ck_assert_msg(strcmp(got, row->code) == 0, "row %u (%s): code %s, the table says %s",
                  row->number, row->what, got, row->code);
    if (row->message) {
        text_of(msgpack_safe_map_get(r->map, "message"), got);
        ck_assert_msg(strcmp(got, row->message) == 0,
                      "row %u (%s): message \"%s\", the table says \"%s\"", row->number,
                      row->what, got, row->message);
        ck_assert_msg(r->map->via.map.size == 3, "row %u: a refusal is {v, code, message}",
                      row->number);
        return;
    }
    const msgpack_object *rep = msgpack_safe_map_get(r->map, "replayed");
    const msgpack_object *seq = msgpack_safe_map_get(r->map, "seq");
    uint64_t events = 1;
    ck_assert_msg(rep && rep->type == MSGPACK_OBJECT_BOOLEAN && rep->via.boolean == replayed,
                  "row %u (%s): a write result with replayed %s", row->number, row->what,
                  replayed ? "true" : "false");
    ck_assert_msg(seq && seq->type == MSGPACK_OBJECT_NIL, "row %u: seq must be nil", row->number);
    ck_assert_msg(msgpack_safe_get_u64(msgpack_safe_map_get(r->map, "events"), &events) &&
                      events == 0,
                  "row %u: events must be 0", row->number);
    if (names->has_key)
        ck_assert_msg(str_is(msgpack_safe_map_get(r->map, "key"), names->key),
                      "row %u: the result names another key", row->number);
}

/* ---- what must not change ---- */

static tally_stats stats_of(tally_client *c)
{
    tally_stats s;
    int rc = tally_stats_get(c, &s);
    ck_assert_msg(rc == TALLY_ok, "stats: %s", tally_strerror(rc));
    return s;
}

static void assert_stats_moved_by(const doc_bad_input_row *row, const tally_stats *before,
                                  const tally_stats *after, uint64_t inbox_added)
{
    ck_assert_msg(after->head_seq == before->head_seq && after->first_seq == before->first_seq &&
                      after->events == before->events,
                  "row %u (%s): the log moved (head %llu -> %llu)", row->number, row->what,
                  (unsigned long long)before->head_seq, (unsigned long long)after->head_seq);
    ck_assert_msg(after->accounts == before->accounts &&
                      after->transfers == before->transfers &&
                      after->entitlements == before->entitlements,
                  "row %u (%s): accounts, transfers or entitlements changed", row->number,
                  row->what);
    ck_assert_msg(after->inbox == before->inbox + inbox_added,
                  "row %u (%s): inbox %llu -> %llu, expected +%llu", row->number, row->what,
                  (unsigned long long)before->inbox, (unsigned long long)after->inbox,
                  (unsigned long long)inbox_added);
}

static test_store_digest digest_of(const char *data_dir)
{
    store *st = test_store_open_read_only(data_dir);
    test_store_digest d = test_store_digest_take(st);
    store_close(st);
    return d;
}

/* A stored transfer rejection that leaves its id failed (ledger/failed_id.h)
 * adds that entry too. (A chain whose failing member is a transfer would
 * as well; the table has no such row.) */
static bool leaves_failed_id(const doc_bad_input_row *row, const request_names *names)
{
    return row->stored && strcmp(names->op, "transfer") == 0 &&
           ledger_failed_id_remembers(tally_error_from_name(row->code));
}

static void assert_store_delta(const doc_bad_input_row *row, const request_names *names,
                               const test_store_digest *before, const test_store_digest *after)
{
    for (int db = 0; db < STORE_DB_COUNT; db++) {
        bool inbox = db == STORE_DB_INBOX || db == STORE_DB_INBOX_TIME;
        bool failed = db == STORE_DB_FAILED_IDS && leaves_failed_id(row, names);
        uint64_t added = (row->stored && inbox) || failed ? 1 : 0;
        ck_assert_msg(after->entries[db] == before->entries[db] + added,
                      "row %u (%s): database %s has %llu entries, expected %llu", row->number,
                      row->what, store_db_name((store_db)db),
                      (unsigned long long)after->entries[db],
                      (unsigned long long)(before->entries[db] + added));
        if (!added)
            ck_assert_msg(memcmp(after->sha256[db], before->sha256[db], 32) == 0,
                          "row %u (%s): database %s changed", row->number, row->what,
                          store_db_name((store_db)db));
    }
}

static void assert_inbox_record(const char *data_dir, const doc_bad_input_row *row,
                                const request_names *names)
{
    store *st = test_store_open_read_only(data_dir);
    store_txn t;
    ck_assert_int_eq(store_txn_begin(st, NULL, true, &t), TALLY_ok);
    ledger_inbox_record rec;
    int rc = ledger_inbox_get(&t, tally_str_from(names->consumer), tally_str_from(names->key),
                              &rec);
    int code = rec.outcome.code;
    store_txn_abort(&t);
    store_close(st);
    ck_assert_msg(rc == TALLY_ok, "row %u: no inbox record for %s/%s: %s", row->number,
                  names->consumer, names->key, tally_strerror(rc));
    ck_assert_msg(strcmp(tally_strerror(code), row->code) == 0,
                  "row %u: the inbox holds %s, the table says %s", row->number,
                  tally_strerror(code), row->code);
}

/* ---- the rows ---- */

static void send_setup(tally_client *c)
{
    for (size_t i = 0; i < table.setup_count; i++) {
        doc_bytes req;
        reply r;
        build(table.setup[i], &req);
        exchange(c, &req, &r);
        char code[NAME_BYTES_MAX];
        text_of(msgpack_safe_map_get(r.map, "code"), code);
        ck_assert_msg(strcmp(code, "ok") == 0, "setup request %zu: %s", i + 1, code);
        reply_free(&r);
        doc_bytes_free(&req);
    }
}

/* A read works and a write goes through the writer (a setup request,
 * replayed: it changes nothing). */
static void assert_serving(tally_client *c, const doc_bad_input_row *row)
{
    tally_account a;
    int rc = tally_account_get(c, 1, &a);
    ck_assert_msg(rc == TALLY_ok, "row %u: account_get after the row: %s", row->number,
                  tally_strerror(rc));
    doc_bytes req;
    reply r;
    build(table.setup[0], &req);
    exchange(c, &req, &r);
    const msgpack_object *rep = msgpack_safe_map_get(r.map, "replayed");
    ck_assert_msg(str_is(msgpack_safe_map_get(r.map, "code"), "ok") && rep &&
                      rep->type == MSGPACK_OBJECT_BOOLEAN && rep->via.boolean,
                  "row %u: the first setup write is not replayed after the row", row->number);
    reply_free(&r);
    doc_bytes_free(&req);
}

START_TEST(bad_input_row)
{
    const doc_bad_input_row *row = &table.rows[_i];
    fprintf(stderr, "row %u: %s\n", row->number, row->what);
    kill_leftover(); /* of a row that failed half-way */
    const char *auth_args[] = {"--auth", auth_file, "--backup-dir", "/", NULL};
    memcpy(proc->extra_args, auth_args, sizeof(auth_args));
    tallyd_start(proc);
    tally_client *c = client_open(proc->url);
    send_setup(c);
    test_store_digest before = digest_of(proc->data_dir);
    tally_stats s0 = stats_of(c);

    doc_bytes req;
    reply r;
    build(row->request, &req);
    request_names names = names_of(&req);
    exchange(c, &req, &r);
    assert_row_reply(row, &r, &names, false);
    reply_free(&r);
    tally_stats s1 = stats_of(c);
    assert_stats_moved_by(row, &s0, &s1, row->stored ? 1 : 0);
    if (row->stored) {
        ck_assert_msg(names.has_key && names.consumer[0], "row %u: stored, but no key", row->number);
        exchange(c, &req, &r);
        assert_row_reply(row, &r, &names, true);
        reply_free(&r);
        tally_stats s2 = stats_of(c);
        assert_stats_moved_by(row, &s1, &s2, 0);
    }
    doc_bytes_free(&req);
    assert_serving(c, row);
    tally_client_close(c);

    ck_assert_msg(tallyd_stop(proc) == 0, "row %u: tallyd did not exit cleanly", row->number);
    test_store_digest after = digest_of(proc->data_dir);
    assert_store_delta(row, &names, &before, &after);
    if (row->stored)
        assert_inbox_record(proc->data_dir, row, &names);
    tallyd_cleanup(proc);
}
END_TEST

/* ---- the table itself ---- */

static bool table_has_code(const char *code)
{
    for (size_t i = 0; i < table.count; i++)
        if (strcmp(table.rows[i].code, code) == 0)
            return true;
    return false;
}

/* Issue 6 names these classes; the request-refusal codes come from the enum. */
static const char *const named_codes[] = {
    "malformed_request", "wrong_type", "unknown_op", "unknown_field", "duplicate_field",
    "missing_field", "key_too_long", "subject_too_long", "too_many_operations",
    "amount_must_not_be_zero", "amount_must_not_be_negative", "amount_overflows",
    "id_must_not_be_zero", "debit_account_not_found", "credit_account_not_found",
    "accounts_must_have_the_same_ledger", "transfer_must_have_the_same_ledger_as_accounts",
    "accounts_must_be_different", "time_out_of_range", "duration_out_of_range",
    "value_out_of_range", "unsupported_version", "request_too_large",
};

/* Refusals one request cannot provoke from the table's setup, each tested
 * where its state is built: too_many_subscribers needs 256 subscribers
 * (tests/log/check_subscriber.c, create_is_idempotent_and_checked);
 * not_in_cluster_mode needs tallyd in cluster mode (tests/cluster/
 * check_cluster.c, its read test). */
static bool exempt(const char *code)
{
    return strcmp(code, "too_many_subscribers") == 0 || strcmp(code, "not_in_cluster_mode") == 0;
}

/* V codes of the ledger library's own checks that the wire never sends
 * (the request checks refuse the same input first); PROTOCOL.md's
 * reference names each, and the table must have no row for them. */
static const char *const library_only[] = {"chain_too_long", "chain_must_not_nest",
                                           "unknown_command", "field_not_allowed_for_command"};
static char *doc_text; /* docs/PROTOCOL.md */

static bool is_library_only(const char *code)
{
    for (size_t i = 0; i < sizeof(library_only) / sizeof(library_only[0]); i++)
        if (strcmp(code, library_only[i]) == 0)
            return true;
    return false;
}

/* The paragraph of the reference that lists the library-only codes. */
static void assert_library_only_documented(void)
{
    const char *start = doc_text ? strstr(doc_text, "belong to the ledger library's own checks") : NULL;
    ck_assert_msg(start != NULL, "PROTOCOL.md: the paragraph on library-only codes is missing");
    const char *end = strstr(start, "\n\n");
    size_t len = end ? (size_t)(end - start) : strlen(start);
    for (size_t i = 0; i < sizeof(library_only) / sizeof(library_only[0]); i++) {
        char quoted[64];
        snprintf(quoted, sizeof(quoted), "`%s`", library_only[i]);
        const char *at = strstr(start, quoted);
        ck_assert_msg(at != NULL && at < start + len,
                      "PROTOCOL.md's library-only paragraph does not name %s", library_only[i]);
        ck_assert_msg(!table_has_code(library_only[i]),
                      "%s is never sent over the wire, yet a bad-input row gets it",
                      library_only[i]);
    }
}

START_TEST(table_is_complete)
{
    ck_assert_msg(table_error[0] == '\0', "docs/PROTOCOL.md: %s", table_error);
    ck_assert_msg(table.setup_count > 0, "the setup block is empty");
    for (size_t i = 0; i < table.count; i++) {
        const doc_bad_input_row *row = &table.rows[i];
        ck_assert_msg(row->number == i + 1, "rows are numbered 1..n: row %zu says %u", i + 1,
                      row->number);
        ck_assert_msg(tally_error_from_name(row->code) > 0, "row %u: %s is no error code",
                      row->number, row->code);
    }
    for (int n = 0; n < 256; n++)
        if (tally_error_class_of(n) == TALLY_CLASS_REQUEST &&
            strcmp(tally_strerror(n), "unknown_error") != 0 && !exempt(tally_strerror(n)))
            ck_assert_msg(table_has_code(tally_strerror(n)), "no row gets %s", tally_strerror(n));
    for (size_t i = 0; i < sizeof(named_codes) / sizeof(named_codes[0]); i++)
        ck_assert_msg(table_has_code(named_codes[i]), "no row gets %s", named_codes[i]);
    /* every invalid-command code is either provoked by a row or documented
     * as one the wire never sends */
    for (int n = 0; n < 256; n++)
        if (tally_error_class_of(n) == TALLY_CLASS_VALIDATION &&
            strcmp(tally_strerror(n), "unknown_error") != 0)
            ck_assert_msg(table_has_code(tally_strerror(n)) || is_library_only(tally_strerror(n)),
                          "no row gets %s, and PROTOCOL.md does not say the wire never sends it",
                          tally_strerror(n));
    assert_library_only_documented();
}
END_TEST

static void auth_line(int fd, const char *name, const char *token, const char *grants)
{
    uint8_t h[SHA256_BYTES];
    char line[256];
    sha256_digest(token, strlen(token), h);
    int n = snprintf(line, sizeof(line), "%s ", name);
    for (int i = 0; i < SHA256_BYTES; i++)
        n += snprintf(line + n, sizeof(line) - (size_t)n, "%02x", h[i]);
    n += snprintf(line + n, sizeof(line) - (size_t)n, " %s\n", grants);
    if (write(fd, line, (size_t)n) != n)
        perror("auth file");
}

/* The auth file of every row's tallyd (mode 600, in a dir of its own). */
static void auth_file_write(void)
{
    const char *tmp = getenv("TMPDIR");
    snprintf(auth_dir, sizeof(auth_dir), "%s/tally-bad-input-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (mkdtemp(auth_dir) == NULL) {
        perror("mkdtemp");
        exit(EXIT_FAILURE);
    }
    snprintf(auth_file, sizeof(auth_file), "%s/auth", auth_dir);
    int fd = open(auth_file, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (fd < 0) {
        perror(auth_file);
        exit(EXIT_FAILURE);
    }
    auth_line(fd, "table", TABLE_TOKEN, "read,write:*,subscribe:*,admin");
    auth_line(fd, "reader", READER_TOKEN, "read");
    close(fd);
}

int main(void)
{
    proc = mmap(NULL, sizeof(*proc), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (proc == MAP_FAILED) {
        perror("mmap");
        return EXIT_FAILURE;
    }
    memset(proc, 0, sizeof(*proc));
    char *doc = doc_read("PROTOCOL.md");
    if (doc == NULL)
        snprintf(table_error, sizeof(table_error), "cannot read it (TALLY_DOCS)");
    else if (doc_bad_input_parse(doc, &table, table_error, sizeof(table_error)) != 0)
        table.count = 0;
    doc_text = doc;

    auth_file_write();
    Suite *s = suite_create("bad_input");
    TCase *tc = tcase_create("table");
    tcase_add_test(tc, table_is_complete);
    suite_add_tcase(s, tc);
    TCase *rows = tcase_create("rows");
    tcase_set_timeout(rows, ROW_TIMEOUT_S);
    tcase_add_unchecked_fixture(rows, NULL, kill_leftover);
    tcase_add_loop_test(rows, bad_input_row, 0, (int)table.count);
    suite_add_tcase(s, rows);
    int rc = test_run_suite(s);
    doc_bad_input_free(&table);
    free(doc_text);
    test_remove_dir(auth_dir);
    return rc;
}
