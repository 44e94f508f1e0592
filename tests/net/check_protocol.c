/*
 * check_protocol.c — the request decoder against the op table: every class
 * of bad request gets its code, good requests become the right ledger
 * commands, and the count bomb is refused without a large allocation.
 */
#include "common/error.h"
#include "common/msgpack_safe.h"
#include "net/auth/auth.h"
#include "net/ops/protocol.h"
#include "tests/support/doc_requests.h"
#include "tests/support/test_support.h"

#include <stdlib.h>
#include <string.h>

static net_request *req;

static void setup(void)
{
    req = malloc(sizeof(*req));
    net_request_init(req);
}

static void teardown(void)
{
    net_request_reset(req);
    free(req);
}

/* A tiny builder: pack a map from alternating key/value specs. */
typedef struct buf {
    msgpack_sbuffer sb;
    msgpack_packer pk;
} buf;

static void buf_init(buf *b)
{
    msgpack_sbuffer_init(&b->sb);
    msgpack_packer_init(&b->pk, &b->sb, msgpack_sbuffer_write);
}

static void kv_str(buf *b, const char *k, const char *v)
{
    msgpack_safe_pack_cstr(&b->pk, k);
    msgpack_safe_pack_cstr(&b->pk, v);
}

static void kv_u64(buf *b, const char *k, uint64_t v)
{
    msgpack_safe_pack_cstr(&b->pk, k);
    msgpack_pack_uint64(&b->pk, v);
}

static int decode(buf *b)
{
    int rc = net_request_decode(req, b->sb.data, b->sb.size);
    return rc;
}

static void write_head(buf *b, int fields, const char *op)
{
    msgpack_pack_map(&b->pk, fields);
    kv_u64(b, "v", 1);
    kv_str(b, "op", op);
    kv_str(b, "consumer", "svc");
    kv_str(b, "key", "k1");
}

static void pack_id(buf *b, const char *k, uint64_t n)
{
    tally_id128 id = test_id(n);
    msgpack_safe_pack_cstr(&b->pk, k);
    msgpack_safe_pack_bin(&b->pk, id.bytes, 16);
}

/* A valid transfer request with `extra` more fields to be added by caller. */
static void transfer_request(buf *b, int extra)
{
    write_head(b, 10 + extra, "transfer");
    pack_id(b, "id", 7);
    kv_u64(b, "debit_account_id", 1);
    kv_u64(b, "credit_account_id", 2);
    kv_u64(b, "amount", 100);
    kv_u64(b, "ledger", 1);
    kv_u64(b, "code", 3);
}

START_TEST(transfer_decodes_to_command)
{
    buf b;
    buf_init(&b);
    transfer_request(&b, 0);
    ck_assert_int_eq(decode(&b), TALLY_ok);
    ck_assert_str_eq(req->op->name, "transfer");
    ck_assert_int_eq(req->write_count, 1);
    const ledger_request *w = &req->writes[0];
    ck_assert(tally_str_equal(w->consumer, tally_str_from("svc")));
    ck_assert(tally_str_equal(w->key, tally_str_from("k1")));
    ck_assert_int_eq(w->command.kind, LEDGER_TRANSFER);
    ck_assert_uint_eq(w->command.u.transfer.debit_account_id, 1);
    ck_assert_uint_eq(w->command.u.transfer.credit_account_id, 2);
    ck_assert_int_eq(w->command.u.transfer.amount, 100);
    ck_assert_uint_eq(w->command.u.transfer.code, 3);
    tally_id128 want = test_id(7);
    ck_assert(tally_id128_equal(&w->command.u.transfer.id, &want));
    msgpack_sbuffer_destroy(&b.sb);
}
END_TEST

static void expect(buf *b, int code, const char *detail)
{
    ck_assert_msg(decode(b) == code, "got %s (%s), want %s", tally_strerror(req->error),
                  req->error_detail, tally_strerror(code));
    if (detail)
        ck_assert_str_eq(req->error_detail, detail);
    msgpack_sbuffer_destroy(&b->sb);
}

START_TEST(unknown_field_is_refused)
{
    buf b;
    buf_init(&b);
    transfer_request(&b, 1);
    kv_str(&b, "colour", "red");
    expect(&b, TALLY_unknown_field, "colour");
}
END_TEST

START_TEST(duplicate_field_is_refused)
{
    buf b;
    buf_init(&b);
    transfer_request(&b, 1);
    kv_u64(&b, "amount", 5);
    expect(&b, TALLY_duplicate_field, "amount");
}
END_TEST

START_TEST(missing_field_is_refused)
{
    buf b;
    buf_init(&b);
    write_head(&b, 4, "transfer");
    expect(&b, TALLY_missing_field, NULL);
}
END_TEST

START_TEST(wrong_type_is_refused)
{
    buf b;
    buf_init(&b);
    write_head(&b, 10, "transfer");
    pack_id(&b, "id", 7);
    kv_str(&b, "debit_account_id", "1");
    kv_u64(&b, "credit_account_id", 2);
    kv_u64(&b, "amount", 100);
    kv_u64(&b, "ledger", 1);
    kv_u64(&b, "code", 3);
    expect(&b, TALLY_wrong_type, "debit_account_id");
}
END_TEST

START_TEST(amount_overflow_and_negative)
{
    buf b;
    buf_init(&b);
    write_head(&b, 10, "transfer");
    pack_id(&b, "id", 7);
    kv_u64(&b, "debit_account_id", 1);
    kv_u64(&b, "credit_account_id", 2);
    kv_u64(&b, "amount", (uint64_t)INT64_MAX + 1);
    kv_u64(&b, "ledger", 1);
    kv_u64(&b, "code", 3);
    expect(&b, TALLY_amount_overflows, "amount");

    buf_init(&b);
    write_head(&b, 10, "transfer");
    pack_id(&b, "id", 7);
    kv_u64(&b, "debit_account_id", 1);
    kv_u64(&b, "credit_account_id", 2);
    msgpack_safe_pack_cstr(&b.pk, "amount");
    msgpack_pack_int64(&b.pk, -5);
    kv_u64(&b, "ledger", 1);
    kv_u64(&b, "code", 3);
    ck_assert_int_eq(decode(&b), TALLY_ok); /* the ledger rejects it, deterministically */
    ck_assert_int_eq(req->writes[0].command.u.transfer.amount, -5);
    msgpack_sbuffer_destroy(&b.sb);
}
END_TEST

START_TEST(ledger_out_of_u32_range)
{
    buf b;
    buf_init(&b);
    write_head(&b, 7, "account_open");
    kv_u64(&b, "id", 1);
    kv_u64(&b, "ledger", UINT64_C(1) << 32);
    kv_u64(&b, "code", 1);
    expect(&b, TALLY_value_out_of_range, "ledger");
}
END_TEST

START_TEST(key_and_consumer_limits)
{
    char long_key[TALLY_KEY_BYTES_MAX + 2];
    memset(long_key, 'k', sizeof(long_key) - 1);
    long_key[sizeof(long_key) - 1] = '\0';
    buf b;
    buf_init(&b);
    msgpack_pack_map(&b.pk, 5);
    kv_u64(&b, "v", 1);
    kv_str(&b, "op", "void");
    kv_str(&b, "consumer", "svc");
    kv_str(&b, "key", long_key);
    pack_id(&b, "pending_id", 1);
    expect(&b, TALLY_key_too_long, "key");
}
END_TEST

/* A map of n entries starting with v and op (a read takes no key). */
static void read_head(buf *b, uint32_t n, const char *op)
{
    buf_init(b);
    msgpack_pack_map(&b->pk, n);
    kv_u64(b, "v", 1);
    kv_str(b, "op", op);
}

/* Without --auth the token's value is not looked at, but `auth` is still
 * a field: its type and length are checked (PROTOCOL.md, "Requests"). */
START_TEST(auth_is_checked_as_a_field_without_auth)
{
    buf b;
    read_head(&b, 3, "stats");
    kv_u64(&b, "auth", 5);
    expect(&b, TALLY_wrong_type, "auth");
    char long_token[AUTH_TOKEN_BYTES_MAX + 2];
    memset(long_token, 't', sizeof(long_token) - 1);
    long_token[sizeof(long_token) - 1] = '\0';
    read_head(&b, 3, "stats");
    kv_str(&b, "auth", long_token);
    expect(&b, TALLY_value_out_of_range, NULL);
}
END_TEST

START_TEST(reads_take_no_key)
{
    buf b;
    buf_init(&b);
    msgpack_pack_map(&b.pk, 4);
    kv_u64(&b, "v", 1);
    kv_str(&b, "op", "account_get");
    kv_u64(&b, "id", 1);
    kv_str(&b, "key", "x");
    expect(&b, TALLY_unknown_field, "key");
}
END_TEST

START_TEST(version_and_op_checks)
{
    buf b;
    buf_init(&b);
    msgpack_pack_map(&b.pk, 2);
    kv_u64(&b, "v", 2);
    kv_str(&b, "op", "stats");
    expect(&b, TALLY_unsupported_version, NULL);
    buf_init(&b);
    msgpack_pack_map(&b.pk, 2);
    kv_u64(&b, "v", 1);
    kv_str(&b, "op", "nope");
    expect(&b, TALLY_unknown_op, NULL);
    buf_init(&b);
    msgpack_pack_map(&b.pk, 2);
    kv_u64(&b, "v", 1);
    kv_u64(&b, "op", 3);
    expect(&b, TALLY_wrong_type, "op");
}
END_TEST

START_TEST(malformed_bytes)
{
    static const uint8_t count_bomb[] = {0xdf, 0xff, 0xff, 0xff, 0xff};
    ck_assert_int_eq(net_request_decode(req, count_bomb, sizeof(count_bomb)),
                     TALLY_malformed_request);
    static const uint8_t trailing[] = {0x81, 0xa1, 'v', 0x01, 0x00};
    ck_assert_int_eq(net_request_decode(req, trailing, sizeof(trailing)), TALLY_malformed_request);
    static const uint8_t not_map[] = {0x93, 1, 2, 3};
    ck_assert_int_eq(net_request_decode(req, not_map, sizeof(not_map)), TALLY_malformed_request);
    static const uint8_t truncated[] = {0x82, 0xa1, 'v', 0x01, 0xa2, 'o'};
    ck_assert_int_eq(net_request_decode(req, truncated, sizeof(truncated)),
                     TALLY_malformed_request);
    static const uint8_t non_string_key[] = {0x82, 0x01, 0x01, 0xa2, 'o', 'p'};
    ck_assert_int_ne(net_request_decode(req, non_string_key, sizeof(non_string_key)), TALLY_ok);
}
END_TEST

START_TEST(oversized_request)
{
    size_t len = TALLY_REQUEST_BYTES_MAX + 1;
    uint8_t *big = calloc(1, len);
    ck_assert_int_eq(net_request_decode(req, big, len), TALLY_request_too_large);
    free(big);
}
END_TEST

static void pack_member_open(buf *b, const char *key, uint64_t id)
{
    msgpack_pack_map(&b->pk, key ? 5 : 4);
    kv_str(b, "op", "account_open");
    if (key)
        kv_str(b, "key", key);
    kv_u64(b, "id", id);
    kv_u64(b, "ledger", 1);
    kv_u64(b, "code", 1);
}

START_TEST(batch_members_have_keys)
{
    buf b;
    buf_init(&b);
    msgpack_pack_map(&b.pk, 4);
    kv_u64(&b, "v", 1);
    kv_str(&b, "op", "batch");
    kv_str(&b, "consumer", "svc");
    msgpack_safe_pack_cstr(&b.pk, "ops");
    msgpack_pack_array(&b.pk, 3);
    pack_member_open(&b, "a", 1);
    pack_member_open(&b, "b", 2);
    pack_member_open(&b, "c", 3);
    ck_assert_int_eq(decode(&b), TALLY_ok);
    ck_assert_int_eq(req->write_count, 3);
    ck_assert(tally_str_equal(req->writes[2].key, tally_str_from("c")));
    ck_assert(tally_str_equal(req->writes[2].consumer, tally_str_from("svc")));
    ck_assert_uint_eq(req->writes[2].command.u.account_open.id, 3);
    msgpack_sbuffer_destroy(&b.sb);

    buf_init(&b); /* a batch member without its key */
    msgpack_pack_map(&b.pk, 4);
    kv_u64(&b, "v", 1);
    kv_str(&b, "op", "batch");
    kv_str(&b, "consumer", "svc");
    msgpack_safe_pack_cstr(&b.pk, "ops");
    msgpack_pack_array(&b.pk, 1);
    pack_member_open(&b, NULL, 1);
    expect(&b, TALLY_missing_field, "key");
}
END_TEST

START_TEST(chain_members_have_no_keys_and_no_nesting)
{
    buf b;
    buf_init(&b);
    write_head(&b, 5, "chain");
    msgpack_safe_pack_cstr(&b.pk, "ops");
    msgpack_pack_array(&b.pk, 2);
    pack_member_open(&b, NULL, 1);
    pack_member_open(&b, NULL, 2);
    ck_assert_int_eq(decode(&b), TALLY_ok);
    ck_assert_int_eq(req->writes[0].command.kind, LEDGER_CHAIN);
    ck_assert_int_eq(req->writes[0].command.u.chain.count, 2);
    msgpack_sbuffer_destroy(&b.sb);

    buf_init(&b);
    write_head(&b, 5, "chain");
    msgpack_safe_pack_cstr(&b.pk, "ops");
    msgpack_pack_array(&b.pk, 1);
    pack_member_open(&b, "k", 1);
    expect(&b, TALLY_unknown_field, "key");

    buf_init(&b);
    write_head(&b, 5, "chain");
    msgpack_safe_pack_cstr(&b.pk, "ops");
    msgpack_pack_array(&b.pk, 1);
    msgpack_pack_map(&b.pk, 1);
    kv_str(&b, "op", "chain");
    expect(&b, TALLY_unknown_op, NULL);
}
END_TEST

START_TEST(too_many_operations)
{
    buf b;
    buf_init(&b);
    write_head(&b, 5, "chain");
    msgpack_safe_pack_cstr(&b.pk, "ops");
    msgpack_pack_array(&b.pk, TALLY_CHAIN_COMMANDS_MAX + 1);
    for (int i = 0; i <= TALLY_CHAIN_COMMANDS_MAX; i++)
        pack_member_open(&b, NULL, (uint64_t)i + 1);
    expect(&b, TALLY_too_many_operations, "ops");
}
END_TEST

/* A request in docs/PROTOCOL.md's notation must be refused with code. */
static void expect_notation(const char *text, int code, const char *detail)
{
    doc_bytes b;
    char err[128];
    ck_assert_msg(doc_request_build(text, &b, err, sizeof(err)) == 0, "%s: %s", text, err);
    int rc = net_request_decode(req, b.data, b.len);
    ck_assert_msg(rc == code, "%s: got %s (%s), want %s", text, tally_strerror(rc),
                  req->error_detail, tally_strerror(code));
    ck_assert_str_eq(req->error_detail, detail);
    doc_bytes_free(&b);
}

START_TEST(limits_with_their_own_codes)
{
    expect_notation("{\"v\": 1, \"op\": \"transfer\", \"consumer\": \"s\", \"key\": \"k\", "
                    "\"id\": bin(01)*16, \"debit_account_id\": 1, \"credit_account_id\": 2, "
                    "\"amount\": 1, \"ledger\": 1, \"code\": 1, \"flags\": 1, "
                    "\"timeout_s\": 315360001}",
                    TALLY_timeout_too_large, "timeout_s");
    expect_notation("{\"v\": 1, \"op\": \"grant\", \"consumer\": \"s\", \"key\": \"k\", "
                    "\"subject\": \"a\", \"feature\": \"b\", "
                    "\"valid_until_ms\": 9223372036854775808}",
                    TALLY_time_out_of_range, "valid_until_ms");
    expect_notation("{\"v\": 1, \"op\": \"extend\", \"consumer\": \"s\", \"key\": \"k\", "
                    "\"subject\": \"a\", \"feature\": \"b\", "
                    "\"duration_ms\": 18446744073709551615}",
                    TALLY_duration_out_of_range, "duration_ms");
    expect_notation("{\"v\": -1, \"op\": \"stats\"}", TALLY_unsupported_version,
                    "this server speaks v 1");
    expect_notation("{\"v\": 1, \"op\": \"chain\", \"consumer\": \"s\", \"key\": \"k\", "
                    "\"ops\": [{\"op\": 1}]}",
                    TALLY_wrong_type, "op");
    expect_notation("{\"v\": 1, \"op\": \"stats\", \"x\": [[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]}",
                    TALLY_malformed_request,
                    "not one whole msgpack object (truncated, trailing bytes, counts beyond the "
                    "bytes, nested > 16)");
}
END_TEST

START_TEST(reference_lists_every_op)
{
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    net_protocol_reference(f);
    fclose(f);
    for (int i = 0; i < NET_OP_COUNT; i++) {
        char heading[64];
        snprintf(heading, sizeof(heading), "### `%s`", net_ops[i].name);
        ck_assert_msg(strstr(text, heading), "reference lacks %s", net_ops[i].name);
    }
    ck_assert_ptr_nonnull(strstr(text, "| `idempotency_key_reused` | 20 | R |"));
    free(text);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("protocol");
    TCase *tc = tcase_create("decode");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, transfer_decodes_to_command);
    tcase_add_test(tc, unknown_field_is_refused);
    tcase_add_test(tc, duplicate_field_is_refused);
    tcase_add_test(tc, missing_field_is_refused);
    tcase_add_test(tc, wrong_type_is_refused);
    tcase_add_test(tc, amount_overflow_and_negative);
    tcase_add_test(tc, ledger_out_of_u32_range);
    tcase_add_test(tc, key_and_consumer_limits);
    tcase_add_test(tc, reads_take_no_key);
    tcase_add_test(tc, auth_is_checked_as_a_field_without_auth);
    tcase_add_test(tc, version_and_op_checks);
    tcase_add_test(tc, malformed_bytes);
    tcase_add_test(tc, oversized_request);
    tcase_add_test(tc, batch_members_have_keys);
    tcase_add_test(tc, chain_members_have_no_keys_and_no_nesting);
    tcase_add_test(tc, too_many_operations);
    tcase_add_test(tc, limits_with_their_own_codes);
    tcase_add_test(tc, reference_lists_every_op);
    suite_add_tcase(s, tc);
    return test_run_suite(s);
}
