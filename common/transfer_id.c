/*
 * transfer_id.c — the transfer id of (consumer, key) (transfer_id.h).
 */
#include "common/transfer_id.h"

#include "common/sha256.h"

#include <assert.h>
#include <string.h>

void transfer_id_from_key(const char *consumer, const char *key, tally_id128 *out)
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
