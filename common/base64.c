/*
 * base64.c — strict base64 decoding (base64.h): the text is checked here,
 * then decoded by OpenSSL's EVP_DecodeBlock.
 */
#include "common/base64.h"

#include <openssl/evp.h>
#include <string.h>

#define BASE64_ALPHABET "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"

bool base64_decode_strict(const char *text, size_t n, uint8_t *out, size_t out_size, size_t *len)
{
    *len = 0;
    if (n % 4 != 0)
        return false;
    if (n == 0)
        return true;
    size_t pad = (text[n - 1] == '=') + (text[n - 1] == '=' && text[n - 2] == '=');
    for (size_t i = 0; i < n - pad; i++)
        if (text[i] == '\0' || strchr(BASE64_ALPHABET, text[i]) == NULL)
            return false;
    size_t decoded = n / 4 * 3 - pad;
    if (decoded > out_size || n > (size_t)0x7fffffff)
        return false;
    uint8_t block[3];
    for (size_t i = 0; i < n; i += 4) { /* by blocks: out need not hold the padding */
        if (EVP_DecodeBlock(block, (const unsigned char *)text + i, 4) != 3)
            return false;
        size_t take = i + 4 < n ? 3 : 3 - pad;
        memcpy(out + i / 4 * 3, block, take);
    }
    *len = decoded;
    return true;
}
