/*
 * check_protocol_doc.c — docs/PROTOCOL.md is the wire contract, so test it:
 *   - the generated reference section equals `tallyd --protocol-reference`
 *     (the op table and error enum the server actually uses);
 *   - every ```example block, sent in order to a real tallyd on an empty
 *     store, gets exactly the documented reply ("..": any byte).
 */
#include "tests/support/doc_requests.h"
#include "tests/support/run.h"
#include "tests/support/tallyd_harness.h"
#include "tests/support/test_support.h"

#include <nng/nng.h>
#include <nng/protocol/reqrep0/req.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define EXAMPLE_BYTES_MAX 4096

static char *protocol_doc(void)
{
    char *doc = doc_read("PROTOCOL.md");
    ck_assert_msg(doc != NULL, "cannot read docs/PROTOCOL.md (TALLY_DOCS)");
    return doc;
}

START_TEST(reference_matches_server_tables)
{
    const char *argv[] = {tallyd_program("tallyd"), "--protocol-reference", NULL};
    char *generated;
    ck_assert_int_eq(test_run(argv, NULL, &generated, NULL), 0);
    size_t n = strlen(generated);
    ck_assert_int_gt((int)n, 1000);
    char *doc = protocol_doc();
    ck_assert_msg(strstr(doc, generated) != NULL,
                  "docs/PROTOCOL.md's reference differs from `tallyd --protocol-reference`; "
                  "paste its output between the generated markers");
    free(doc);
    free(generated);
}
END_TEST

/* Parse "xx xx .. xx" into bytes; wildcard[i] marks "..". */
static size_t parse_hex_line(const char *line, uint8_t *out, bool *wildcard)
{
    long n = doc_hex_parse(line, out, wildcard, EXAMPLE_BYTES_MAX);
    ck_assert_msg(n >= 0, "bad hex or example too long near: %.20s", line);
    return (size_t)n;
}

static void send_and_compare(nng_socket s, int index, const uint8_t *req, size_t req_len,
                             const uint8_t *want, const bool *wild, size_t want_len)
{
    ck_assert_int_eq(nng_send(s, (void *)req, req_len, 0), 0);
    void *buf;
    size_t len;
    ck_assert_int_eq(nng_recv(s, &buf, &len, NNG_FLAG_ALLOC), 0);
    const uint8_t *got = buf;
    ck_assert_msg(len == want_len, "example %d: reply is %zu bytes, doc says %zu", index, len,
                  want_len);
    for (size_t i = 0; i < len; i++)
        ck_assert_msg(wild[i] || got[i] == want[i],
                      "example %d: reply byte %zu is %02x, doc says %02x", index, i, got[i],
                      want[i]);
    nng_free(buf, len);
}

START_TEST(examples_get_documented_replies)
{
    tallyd_proc p = {0};
    tallyd_start(&p);
    nng_socket s;
    ck_assert_int_eq(nng_req0_open(&s), 0);
    nng_socket_set_ms(s, NNG_OPT_RECVTIMEO, 5000);
    ck_assert_int_eq(nng_dial(s, p.url, NULL, 0), 0);
    char *doc = protocol_doc();
    static uint8_t req[EXAMPLE_BYTES_MAX], want[EXAMPLE_BYTES_MAX];
    static bool req_wild[EXAMPLE_BYTES_MAX], want_wild[EXAMPLE_BYTES_MAX];
    int count = 0;
    const char *cursor = doc;
    doc_example ex;
    bool bad;
    while (doc_example_next(&cursor, &ex, &bad)) {
        size_t req_len = parse_hex_line(ex.request_hex, req, req_wild);
        size_t want_len = parse_hex_line(ex.reply_hex, want, want_wild);
        send_and_compare(s, count, req, req_len, want, want_wild, want_len);
        count++;
    }
    ck_assert_msg(!bad, "example %d: no '> ' or '< ' line", count);
    ck_assert_int_ge(count, 20);
    free(doc);
    nng_close(s);
    ck_assert_int_eq(tallyd_stop(&p), 0);
    tallyd_cleanup(&p);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("protocol_doc");
    TCase *tc = tcase_create("doc");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, reference_matches_server_tables);
    tcase_add_test(tc, examples_get_documented_replies);
    suite_add_tcase(s, tc);
    return test_run_suite(s);
}
