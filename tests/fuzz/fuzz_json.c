/*
 * fuzz_json.c — fuzz target: a JSON API request, the way tallyd's HTTP
 * face handles it (net/http/json_codec.c). The input is an op name, a newline
 * and the JSON body; a first line that names no op picks one by its first
 * byte. The body is parsed (jansson, duplicates refused), packed as the
 * op's msgpack request by the op table's field types, and decoded by
 * net_request_decode; the input's bytes also go through the reply walk
 * (msgpack → JSON) as they are.
 *
 * Oracles besides the sanitizers: packing fails only as malformed input
 * (nesting) or out of memory; a packed request that decodes is of the op
 * it was packed for; every packed request converts back to JSON (it is
 * one msgpack map of JSON's own types).
 */
#include "tests/fuzz/fuzz.h"

#include "common/error.h"
#include "net/http/json_codec.h"
#include "net/ops/protocol.h"

#include <stdlib.h>
#include <string.h>

static net_request *req;

static const net_op *op_of(const uint8_t *data, size_t line_len)
{
    const net_op *op = net_op_find((tally_str){(const char *)data, line_len});
    if (op == NULL && line_len > 0)
        op = &net_ops[data[0] % NET_OP_COUNT];
    return op ? op : &net_ops[NET_OP_TRANSFER];
}

static void check_packed(const net_op *op, const msgpack_sbuffer *sb)
{
    if (req == NULL) {
        req = malloc(sizeof(*req));
        if (req == NULL)
            fuzz_fail("out of memory");
        net_request_init(req);
    }
    if (net_request_decode(req, sb->data, sb->size) == TALLY_ok && req->op != op)
        fuzz_fail("a request packed for %s decoded as %s", op->name, req->op->name);
    net_request_reset(req);
    char *text;
    size_t len;
    int code;
    bool replayed;
    if (net_json_reply(sb->data, sb->size, false, &text, &len, &code, &replayed) != TALLY_ok)
        fuzz_fail("a packed request does not convert back to JSON");
    free(text);
}

int fuzz_json_one(const uint8_t *data, size_t size)
{
    const uint8_t *nl = memchr(data, '\n', size);
    size_t line_len = nl ? (size_t)(nl - data) : 0;
    const net_op *op = op_of(data, line_len);
    const char *body = nl ? (const char *)nl + 1 : (const char *)data;
    size_t body_len = size - (size_t)((const uint8_t *)body - data);
    char *text;
    size_t len;
    int code;
    bool replayed;
    if (net_json_reply(data, size, true, &text, &len, &code, &replayed) == TALLY_ok)
        free(text);
    json_error_t err;
    json_t *j = json_loadb(body, body_len, JSON_REJECT_DUPLICATES, &err);
    if (j == NULL)
        return 0;
    msgpack_sbuffer sb;
    msgpack_packer pk;
    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    net_json_envelope e = {op, "fuzz", "key-1"};
    char detail[96];
    int rc = net_json_request_pack(&e, j, &pk, detail, sizeof(detail));
    if (rc == TALLY_ok)
        check_packed(op, &sb);
    else if (rc != TALLY_malformed_request && rc != TALLY_overloaded &&
             !(rc == TALLY_unknown_field && json_object_get(j, "auth")))
        fuzz_fail("packing failed with %s", tally_strerror(rc)); /* a body's auth: refused */
    msgpack_sbuffer_destroy(&sb);
    json_decref(j);
    return 0;
}

#ifndef FUZZ_NO_ENTRY
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    return fuzz_json_one(data, size);
}
#endif
