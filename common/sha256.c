/*
 * sha256.c — SHA-256 through OpenSSL's libcrypto.
 *
 * OpenSSL uses the CPU's SHA extensions where present (SHA-NI), several
 * times faster than a portable implementation; every event and every
 * command fingerprint is hashed on the write path, so this matters. The
 * SHA256_* calls are deprecated in OpenSSL 3 in favour of EVP, whose
 * per-digest context allocation costs more than the digest of a small
 * event; they remain supported and are used on purpose. tests/log/check_log
 * verifies the chain with an independent implementation (mbedTLS).
 */
#define OPENSSL_SUPPRESS_DEPRECATED 1
#include "common/sha256.h"

#include <openssl/sha.h>

_Static_assert(sizeof(SHA256_CTX) <= sizeof(((sha256_ctx *)0)->opaque),
               "sha256_ctx must hold a SHA256_CTX");
_Static_assert(SHA256_DIGEST_LENGTH == SHA256_BYTES, "digest size");

void sha256_begin(sha256_ctx *ctx)
{
    SHA256_Init((SHA256_CTX *)(void *)ctx->opaque);
}

void sha256_update(sha256_ctx *ctx, const void *data, size_t len)
{
    SHA256_Update((SHA256_CTX *)(void *)ctx->opaque, data, len);
}

void sha256_finish(sha256_ctx *ctx, uint8_t out[SHA256_BYTES])
{
    SHA256_Final(out, (SHA256_CTX *)(void *)ctx->opaque);
}

void sha256_digest(const void *data, size_t len, uint8_t out[SHA256_BYTES])
{
    SHA256(data, len, out);
}
