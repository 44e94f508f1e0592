/*
 * sha256.h — SHA-256 from OpenSSL's libcrypto, behind
 * one small interface so the rest of tally never hand-rolls a hash.
 */
#ifndef TALLY_SHA256_H
#define TALLY_SHA256_H

#include <stddef.h>
#include <stdint.h>

#define SHA256_BYTES 32

typedef struct sha256_ctx {
    _Alignas(16) unsigned char opaque[256]; /* holds an OpenSSL SHA256_CTX */
} sha256_ctx;

void sha256_begin(sha256_ctx *ctx);
void sha256_update(sha256_ctx *ctx, const void *data, size_t len);
void sha256_finish(sha256_ctx *ctx, uint8_t out[SHA256_BYTES]);

/* One-shot digest. */
void sha256_digest(const void *data, size_t len, uint8_t out[SHA256_BYTES]);

#endif
