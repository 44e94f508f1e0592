/*
 * webhook_secret.h — a Standard Webhooks signing secret as text, one rule
 * for the side that verifies (tallyd's intake, docs/WEBHOOKS.md) and the
 * side that signs (tally-relay, docs/RELAY.md): an optional "whsec_"
 * prefix, then strict base64 of a key of 24 to 64 bytes (the range the
 * specification gives) that is not all zero bytes.
 */
#ifndef TALLY_COMMON_WEBHOOK_SECRET_H
#define TALLY_COMMON_WEBHOOK_SECRET_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define STANDARD_SECRET_BYTES_MIN 24
#define STANDARD_SECRET_BYTES_MAX 64

/* Decode the n bytes of text into out (at least STANDARD_SECRET_BYTES_MAX
 * bytes); *len gets the key's length. false, with why (why_size bytes)
 * saying what is wrong, for anything else. */
bool standard_secret_decode(const char *text, size_t n, uint8_t *out, size_t *len, char *why,
                            size_t why_size);

#endif
