/*
 * pair_key.h — the keys made of two strings: the first's length (one byte),
 * the first, then the second. Entitlements are keyed (subject, feature),
 * inbox records (consumer, key); the keys of one first string sort
 * together behind their common prefix (length, first).
 */
#ifndef TALLY_LEDGER_PAIR_KEY_H
#define TALLY_LEDGER_PAIR_KEY_H

#include "common/bytes.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define LEDGER_PAIR_KEY_BYTES_MAX(first_max, second_max) (1 + (first_max) + (second_max))

/* Write the key of (first, second), each 1..its max bytes (first_max at
 * most 255), into out (LEDGER_PAIR_KEY_BYTES_MAX of the maxima); returns
 * its length. Lengths out of range are bugs (asserted). */
size_t ledger_pair_key(tally_str first, size_t first_max, tally_str second, size_t second_max,
                       uint8_t *out);

/* The prefix shared by every key of first: (length, first). */
size_t ledger_pair_key_prefix(tally_str first, size_t first_max, uint8_t *out);

/* Split a stored key into its two strings (pointing into key), both
 * non-empty and within their maxima; false when the key is malformed. */
bool ledger_pair_key_split(const void *key, size_t key_len, size_t first_max,
                           size_t second_max, tally_str *first, tally_str *second);

#endif
