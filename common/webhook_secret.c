/*
 * webhook_secret.c — a Standard Webhooks secret as text (webhook_secret.h).
 */
#include "common/webhook_secret.h"

#include "common/base64.h"

#include <stdio.h>
#include <string.h>

bool standard_secret_decode(const char *text, size_t n, uint8_t *out, size_t *len, char *why,
                            size_t why_size)
{
    if (n >= 6 && strncmp(text, "whsec_", 6) == 0)
        text += 6, n -= 6;
    uint8_t key[(STANDARD_SECRET_BYTES_MAX + 2) / 3 * 3 + 3];
    size_t k = 0;
    if (n == 0 || !base64_decode_strict(text, n, key, sizeof(key), &k)) {
        snprintf(why, why_size, "a Standard Webhooks secret is base64 (after an optional whsec_)");
        return false;
    }
    if (k < STANDARD_SECRET_BYTES_MIN || k > STANDARD_SECRET_BYTES_MAX) {
        snprintf(why, why_size, "the key is %zu bytes; Standard Webhooks keys are %d to %d", k,
                 STANDARD_SECRET_BYTES_MIN, STANDARD_SECRET_BYTES_MAX);
        return false;
    }
    bool zero = true;
    for (size_t i = 0; i < k; i++)
        zero &= key[i] == 0;
    if (zero) {
        snprintf(why, why_size, "the key is all zero bytes");
        return false;
    }
    memcpy(out, key, k);
    *len = k;
    return true;
}
