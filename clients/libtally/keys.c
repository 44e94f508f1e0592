/*
 * keys.c — ids and idempotency keys of libtally (tally.h, "ids and keys"):
 * UUIDv7s, their text form, the transfer id a key stands for, and the key
 * a write is sent with (the caller's or a generated one).
 */
#include "clients/libtally/libtally_internal.h"

#include "common/clock.h"
#include "common/sha256.h"

#include <assert.h>
#include <string.h>

_Static_assert(KEY_BUFFER_BYTES >= 37, "a generated key (UUID text) fits a key buffer");

int tally_uuid_v7(tally_uuid *out)
{
    if (out == NULL)
        return TALLY_invalid_argument;
    tally_id128 id;
    int rc = tally_id128_uuidv7(clock_wall_ms(), &id);
    if (rc == TALLY_ok)
        memcpy(out->bytes, id.bytes, 16);
    return rc;
}

void tally_uuid_format(const tally_uuid *id, char out[37])
{
    static const char digits[] = "0123456789abcdef";
    assert(id != NULL && out != NULL);
    size_t o = 0;
    for (int i = 0; i < 16; i++) {
        if (i == 4 || i == 6 || i == 8 || i == 10)
            out[o++] = '-';
        out[o++] = digits[id->bytes[i] >> 4];
        out[o++] = digits[id->bytes[i] & 15];
    }
    out[o] = '\0';
}

int tally_uuid_parse(const char *text, tally_uuid *out)
{
    tally_id128 id;
    if (text == NULL || out == NULL || !tally_id128_from_hex(text, &id))
        return TALLY_invalid_argument;
    memcpy(out->bytes, id.bytes, 16);
    return TALLY_ok;
}

void tally_uuid_from_key(const char *consumer, const char *key, tally_uuid *out)
{
    static const char domain[] = "tally.transfer-id.v1";
    static const uint8_t separator = 0;
    assert(out != NULL);
    const char *cons = consumer ? consumer : "";
    const char *k = key ? key : "";
    sha256_ctx ctx;
    uint8_t digest[SHA256_BYTES];
    sha256_begin(&ctx);
    sha256_update(&ctx, domain, sizeof(domain) - 1);
    sha256_update(&ctx, cons, strlen(cons));
    sha256_update(&ctx, &separator, 1);
    sha256_update(&ctx, k, strlen(k));
    sha256_finish(&ctx, digest);
    memcpy(out->bytes, digest, 16);
    /* A UUIDv7 key (libtally's own) lends the id its time: ids then sort
     * like their keys, and a B-tree keyed by them grows at its right edge
     * instead of touching a random page per insert (docs/BENCHMARKS.md). */
    tally_id128 time_key;
    if (key != NULL && tally_id128_from_hex(key, &time_key) && time_key.bytes[6] >> 4 == 7 &&
        time_key.bytes[8] >> 6 == 2) {
        memcpy(out->bytes, time_key.bytes, 6);
        out->bytes[6] = (uint8_t)(0x70 | (out->bytes[6] & 0x0f));
        out->bytes[8] = (uint8_t)(0x80 | (out->bytes[8] & 0x3f));
    }
}

/* The key of a write: the caller's (1..128 bytes) or a new UUIDv7 text. */
int client_key_resolve(const char *given, char out[KEY_BUFFER_BYTES])
{
    if (given != NULL) {
        size_t n = strlen(given);
        if (n == 0 || n > TALLY_CLIENT_KEY_BYTES_MAX)
            return TALLY_invalid_argument;
        memcpy(out, given, n + 1);
        return TALLY_ok;
    }
    tally_uuid id;
    int rc = tally_uuid_v7(&id);
    if (rc == TALLY_ok)
        tally_uuid_format(&id, out);
    return rc;
}
