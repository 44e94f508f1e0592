/*
 * base64.h — strict decoding of standard base64 (RFC 4648, section 4)
 * for secrets written as text (whsec_<base64>): OpenSSL's decoder takes
 * '=' inside the text and white space, so a secret such as "====" would
 * decode to zero bytes of key instead of being refused.
 */
#ifndef TALLY_BASE64_H
#define TALLY_BASE64_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Decode the n bytes of text (not NUL-terminated): a multiple of 4 of
 * A-Z a-z 0-9 + /, with one or two '=' only as its last characters.
 * true with the decoded length in *len when it is that and the bytes fit
 * in out_size; false otherwise (out is then undefined). n == 0 decodes
 * to nothing (true, *len 0): callers refuse an empty key themselves. */
bool base64_decode_strict(const char *text, size_t n, uint8_t *out, size_t out_size, size_t *len);

#endif
