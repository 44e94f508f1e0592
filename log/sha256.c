/*
 * sha256.c — SHA-256 through mbedTLS 2.28 (Debian 12) or 3.x.
 *
 * mbedTLS's SHA-256 functions can only fail on bad parameters or hardware
 * accelerator errors; with a valid context in software neither happens, so
 * a failure here is a bug and asserted.
 */
#include "log/sha256.h"

#include <assert.h>
#include <mbedtls/sha256.h>
#include <mbedtls/version.h>

_Static_assert(sizeof(mbedtls_sha256_context) <= sizeof(((sha256_ctx *)0)->opaque),
               "sha256_ctx must hold an mbedtls_sha256_context");

#if MBEDTLS_VERSION_NUMBER >= 0x03000000
#define SHA256_STARTS mbedtls_sha256_starts
#define SHA256_UPDATE mbedtls_sha256_update
#define SHA256_FINISH mbedtls_sha256_finish
#else
#define SHA256_STARTS mbedtls_sha256_starts_ret
#define SHA256_UPDATE mbedtls_sha256_update_ret
#define SHA256_FINISH mbedtls_sha256_finish_ret
#endif

void sha256_begin(sha256_ctx *ctx)
{
    mbedtls_sha256_context *c = (mbedtls_sha256_context *)(void *)ctx->opaque;
    mbedtls_sha256_init(c);
    int rc = SHA256_STARTS(c, 0);
    assert(rc == 0);
    (void)rc;
}

void sha256_update(sha256_ctx *ctx, const void *data, size_t len)
{
    int rc = SHA256_UPDATE((mbedtls_sha256_context *)(void *)ctx->opaque, data, len);
    assert(rc == 0);
    (void)rc;
}

void sha256_finish(sha256_ctx *ctx, uint8_t out[SHA256_BYTES])
{
    mbedtls_sha256_context *c = (mbedtls_sha256_context *)(void *)ctx->opaque;
    int rc = SHA256_FINISH(c, out);
    assert(rc == 0);
    (void)rc;
    mbedtls_sha256_free(c);
}

void sha256_digest(const void *data, size_t len, uint8_t out[SHA256_BYTES])
{
    sha256_ctx ctx;
    sha256_begin(&ctx);
    sha256_update(&ctx, data, len);
    sha256_finish(&ctx, out);
}
