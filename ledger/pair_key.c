/*
 * pair_key.c — building and splitting two-string keys (see pair_key.h).
 */
#include "ledger/pair_key.h"

#include <assert.h>
#include <string.h>

size_t ledger_pair_key_prefix(tally_str first, size_t first_max, uint8_t *out)
{
    assert(first_max <= UINT8_MAX);
    assert(first.len > 0 && first.len <= first_max);
    out[0] = (uint8_t)first.len;
    memcpy(out + 1, first.ptr, first.len);
    return 1 + first.len;
}

size_t ledger_pair_key(tally_str first, size_t first_max, tally_str second, size_t second_max,
                       uint8_t *out)
{
    assert(second.len > 0 && second.len <= second_max);
    size_t n = ledger_pair_key_prefix(first, first_max, out);
    memcpy(out + n, second.ptr, second.len);
    return n + second.len;
}

bool ledger_pair_key_split(const void *key, size_t key_len, size_t first_max,
                           size_t second_max, tally_str *first, tally_str *second)
{
    const uint8_t *k = key;
    if (key_len < 3 || k[0] == 0 || k[0] > first_max || key_len - 1 - k[0] == 0 ||
        key_len - 1 - k[0] > second_max)
        return false;
    *first = (tally_str){(const char *)k + 1, k[0]};
    *second = (tally_str){(const char *)k + 1 + k[0], key_len - 1 - k[0]};
    return true;
}
