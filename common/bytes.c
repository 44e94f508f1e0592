/*
 * bytes.c — 128-bit id helpers: hex form and UUIDv7 generation.
 */
#include "common/bytes.h"

#include "common/error.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sys/random.h>
#include <unistd.h>

void tally_id128_to_hex(const tally_id128 *id, char out[33])
{
    static const char digits[] = "0123456789abcdef";
    for (int i = 0; i < 16; i++) {
        out[2 * i] = digits[id->bytes[i] >> 4];
        out[2 * i + 1] = digits[id->bytes[i] & 15];
    }
    out[32] = '\0';
}

void bytes_uuid_text_write(const uint8_t b[16], char out[36])
{
    static const char digits[] = "0123456789abcdef";
    size_t o = 0;
    for (int i = 0; i < 16; i++) {
        if (i == 4 || i == 6 || i == 8 || i == 10)
            out[o++] = '-';
        out[o++] = digits[b[i] >> 4];
        out[o++] = digits[b[i] & 15];
    }
}

void bytes_id128_uuid_text(const tally_id128 *id, char out[37])
{
    bytes_uuid_text_write(id->bytes, out);
    out[36] = '\0';
}

/* Each byte's value as a lower-case hex digit, 0xff for any other. */
static const uint8_t lower_hex[256] = {
    ['0'] = 1,  ['1'] = 2,  ['2'] = 3,  ['3'] = 4,  ['4'] = 5,  ['5'] = 6,
    ['6'] = 7,  ['7'] = 8,  ['8'] = 9,  ['9'] = 10, ['a'] = 11, ['b'] = 12,
    ['c'] = 13, ['d'] = 14, ['e'] = 15, ['f'] = 16, /* value + 1; 0: none */
};

bool bytes_uuid_text_pack(const char *text, size_t len, uint8_t out[16])
{
    /* where each byte's two digits start: 8-4-4-4-12 with dashes between */
    static const uint8_t at[16] = {0, 2, 4, 6, 9, 11, 14, 16, 19, 21, 24, 26, 28, 30, 32, 34};
    if (len != 36 || text[8] != '-' || text[13] != '-' || text[18] != '-' || text[23] != '-')
        return false;
    unsigned bad = 0;
    for (int i = 0; i < 16; i++) {
        unsigned high = lower_hex[(uint8_t)text[at[i]]], low = lower_hex[(uint8_t)text[at[i] + 1]];
        bad |= (high == 0) | (low == 0);
        out[i] = (uint8_t)((high - 1) << 4 | (low - 1));
    }
    return bad == 0;
}

int bytes_hex_value(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

bool tally_id128_from_hex(const char *text, tally_id128 *id)
{
    int nibbles = 0;
    uint8_t out[16] = {0};
    for (const char *p = text; *p; p++) {
        if (*p == '-')
            continue;
        int v = bytes_hex_value(*p);
        if (v < 0 || nibbles >= 32)
            return false;
        out[nibbles / 2] = (uint8_t)(out[nibbles / 2] | (v << ((nibbles % 2) ? 0 : 4)));
        nibbles++;
    }
    if (nibbles != 32)
        return false;
    memcpy(id->bytes, out, 16);
    return true;
}

/* Random bytes from getrandom(2), fetched 2 KiB at a time per thread: one
 * system call per ~200 ids instead of one per id. A forked child must not
 * reuse its parent's bytes: a fork handler bumps a generation that each
 * pool compares (cheaper than a getpid system call per id). */
#define RANDOM_POOL_BYTES 2048

static atomic_uint fork_generation;
static pthread_once_t fork_handler_once = PTHREAD_ONCE_INIT;

static void on_fork_child(void) { atomic_fetch_add(&fork_generation, 1); }
static void install_fork_handler(void) { pthread_atfork(NULL, NULL, on_fork_child); }

static int random_bytes(uint8_t *out, size_t n)
{
    static __thread uint8_t pool[RANDOM_POOL_BYTES];
    static __thread size_t left;
    static __thread unsigned owner_generation;
    pthread_once(&fork_handler_once, install_fork_handler);
    unsigned generation = atomic_load(&fork_generation);
    if (left < n || owner_generation != generation) {
        size_t got = 0;
        while (got < sizeof(pool)) {
            ssize_t r = getrandom(pool + got, sizeof(pool) - got, 0);
            if (r < 0 && errno != EINTR)
                return TALLY_io_error;
            got += r > 0 ? (size_t)r : 0;
        }
        left = sizeof(pool);
        owner_generation = generation;
    }
    memcpy(out, pool + sizeof(pool) - left, n);
    memset(pool + sizeof(pool) - left, 0, n);
    left -= n;
    return TALLY_ok;
}

static void uuidv7_time(int64_t unix_ms, tally_id128 *id)
{
    uint64_t ms = (uint64_t)unix_ms & UINT64_C(0xffffffffffff);
    for (int i = 5; i >= 0; i--, ms >>= 8)
        id->bytes[i] = (uint8_t)ms;
}

void tally_id128_uuidv7_counted(int64_t unix_ms, uint32_t tag, uint64_t counter,
                                tally_id128 *id)
{
    uuidv7_time(unix_ms, id);
    id->bytes[6] = (uint8_t)(0x70 | ((tag >> 22) & 0x0f)); /* version 7 */
    id->bytes[7] = (uint8_t)(tag >> 14);
    id->bytes[8] = (uint8_t)(0x80 | ((tag >> 8) & 0x3f)); /* variant 10 */
    id->bytes[9] = (uint8_t)tag;
    for (int i = 15; i >= 10; i--, counter >>= 8)
        id->bytes[i] = (uint8_t)counter;
}

int tally_id128_uuidv7(int64_t unix_ms, tally_id128 *id)
{
    uint8_t random[10];
    if (random_bytes(random, sizeof(random)) != TALLY_ok)
        return TALLY_io_error;
    uuidv7_time(unix_ms, id);
    memcpy(id->bytes + 6, random, 10);
    id->bytes[6] = (uint8_t)(0x70 | (id->bytes[6] & 0x0f)); /* version 7 */
    id->bytes[8] = (uint8_t)(0x80 | (id->bytes[8] & 0x3f)); /* variant 10 */
    return TALLY_ok;
}
