/*
 * endpoints.c — the attempt log of tally-relay's endpoints
 * (tally_endpoint.h): a batch of attempts packed as one
 * endpoint_attempts_record request (its `attempts` are maps, which the
 * fields of libtally_internal.h do not carry), and the read.
 */
#include "config.h"

#include "clients/libtally/libtally_internal.h"
#include "common/limits.h"
#include "common/msgpack_safe.h"

#include <stdlib.h>
#include <string.h>

static int pack_kv_str(msgpack_packer *pk, const char *key, const char *value)
{
    return msgpack_safe_pack_cstr(pk, key) || msgpack_safe_pack_cstr(pk, value);
}

static int pack_attempt(msgpack_packer *pk, const tally_endpoint_attempt *a)
{
    return msgpack_pack_map(pk, 7) || msgpack_safe_pack_cstr(pk, "seq") ||
           msgpack_pack_uint64(pk, a->seq) || msgpack_safe_pack_cstr(pk, "attempt") ||
           msgpack_pack_uint32(pk, a->attempt) || msgpack_safe_pack_cstr(pk, "time_ms") ||
           msgpack_pack_int64(pk, a->time_ms) || msgpack_safe_pack_cstr(pk, "status") ||
           msgpack_pack_uint32(pk, a->status) || msgpack_safe_pack_cstr(pk, "latency_ms") ||
           msgpack_pack_uint32(pk, a->latency_ms) || pack_kv_str(pk, "error", a->error) ||
           pack_kv_str(pk, "response", a->response);
}

/* The code of a reply's bytes: its `code`, TALLY_internal when it has none. */
static int reply_code(const void *bytes, size_t len)
{
    msgpack_unpacked u;
    msgpack_unpacked_init(&u);
    size_t off = 0;
    int code = TALLY_internal;
    if (msgpack_unpack_next(&u, bytes, len, &off) == MSGPACK_UNPACK_SUCCESS && off == len)
        code = client_code_of(msgpack_safe_map_get(&u.data, "code"));
    msgpack_unpacked_destroy(&u);
    return code;
}

int tally_endpoint_attempts_record(tally_client *c, const char *name,
                                   const tally_endpoint_attempt *attempts, size_t count,
                                   uint32_t retention_s)
{
    if (c == NULL || name == NULL || attempts == NULL || count == 0 ||
        count > TALLY_CLIENT_ATTEMPTS_RECORD_MAX)
        return TALLY_invalid_argument;
    msgpack_sbuffer buf;
    msgpack_sbuffer_init(&buf);
    msgpack_packer pk;
    msgpack_packer_init(&pk, &buf, msgpack_sbuffer_write);
    bool bad = msgpack_pack_map(&pk, retention_s ? 5 : 4) || msgpack_safe_pack_cstr(&pk, "v") ||
               msgpack_pack_uint8(&pk, 1) || pack_kv_str(&pk, "op", "endpoint_attempts_record") ||
               pack_kv_str(&pk, "endpoint", name) || msgpack_safe_pack_cstr(&pk, "attempts") ||
               msgpack_pack_array(&pk, (uint32_t)count);
    for (size_t i = 0; !bad && i < count; i++)
        bad = pack_attempt(&pk, &attempts[i]) != 0;
    if (!bad && retention_s)
        bad = msgpack_safe_pack_cstr(&pk, "retention_s") || msgpack_pack_uint32(&pk, retention_s);
    void *answer = NULL;
    size_t reply_len = 0;
    int rc = bad ? TALLY_out_of_memory
                 : tally_request_raw(c, buf.data, buf.size, &answer, &reply_len);
    msgpack_sbuffer_destroy(&buf);
    if (rc != TALLY_ok)
        return rc;
    rc = reply_code(answer, reply_len);
    free(answer);
    return rc;
}

static bool attempt_decode(const msgpack_object *o, void *out)
{
    tally_endpoint_attempt *a = out;
    decoder d = decoder_of(o);
    a->seq = dec_uint(&d, "seq", UINT64_MAX);
    a->attempt = (uint32_t)dec_uint(&d, "attempt", UINT32_MAX);
    a->time_ms = dec_int(&d, "time_ms");
    a->status = (uint32_t)dec_uint(&d, "status", UINT32_MAX);
    a->latency_ms = (uint32_t)dec_uint(&d, "latency_ms", UINT32_MAX);
    dec_str(&d, "error", a->error, sizeof(a->error));
    dec_str(&d, "response", a->response, sizeof(a->response));
    return d.ok;
}

_Static_assert(TALLY_CLIENT_ENDPOINT_URL_BYTES_MAX == TALLY_ENDPOINT_URL_BYTES_MAX &&
                   TALLY_CLIENT_ENDPOINT_TYPES_BYTES_MAX == TALLY_ENDPOINT_TYPES_BYTES_MAX &&
                   TALLY_CLIENT_ENDPOINT_SCHEDULE_BYTES_MAX == TALLY_ENDPOINT_SCHEDULE_BYTES_MAX &&
                   TALLY_CLIENT_ENDPOINTS_DEFINED_MAX == TALLY_ENDPOINTS_DEFINED_MAX,
               "the client holds what the server keeps");

static bool definition_decode(const msgpack_object *o, void *out)
{
    tally_endpoint_definition *e = out;
    decoder d = decoder_of(o);
    dec_endpoint_head(&d, e->endpoint, sizeof(e->endpoint), &e->disabled, &e->version,
                      &e->changed_ms);
    dec_str(&d, "url", e->url, sizeof(e->url));
    dec_str(&d, "types", e->types, sizeof(e->types));
    dec_str(&d, "retry_schedule", e->retry_schedule, sizeof(e->retry_schedule));
    dec_str(&d, "backfill", e->backfill, sizeof(e->backfill));
    e->connect_timeout_ms = (uint32_t)dec_uint(&d, "connect_timeout_ms", UINT32_MAX);
    e->timeout_ms = (uint32_t)dec_uint(&d, "timeout_ms", UINT32_MAX);
    return d.ok;
}

int tally_endpoint_list(tally_client *c, tally_endpoint_definition *out, size_t capacity,
                        size_t *count)
{
    if (c == NULL || out == NULL || count == NULL)
        return TALLY_invalid_argument;
    *count = 0;
    fields fs;
    client_fields_begin(&fs, "endpoint_list", NULL, NULL);
    return client_read_array(c, &fs, "endpoints", definition_decode, out, sizeof(*out),
                             capacity, count);
}

int tally_endpoint_attempts(tally_client *c, const char *name, uint64_t seq, uint32_t limit,
                            tally_endpoint_attempt *out, size_t capacity, size_t *count)
{
    if (c == NULL || name == NULL || out == NULL || count == NULL)
        return TALLY_invalid_argument;
    *count = 0;
    fields fs;
    client_fields_begin(&fs, "endpoint_attempts", NULL, NULL);
    put_str(&fs, "endpoint", name);
    if (seq)
        put_uint(&fs, "seq", seq);
    put_uint(&fs, "limit", limit ? limit : 100);
    return client_read_array(c, &fs, "attempts", attempt_decode, out, sizeof(*out), capacity,
                             count);
}
