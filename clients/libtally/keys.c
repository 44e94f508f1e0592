/*
 * keys.c — ids and idempotency keys of libtally (tally.h, "ids and keys"):
 * UUIDv7s, their text form, the transfer id a key stands for, and the key
 * a write is sent with (the caller's or a generated one).
 */
#include "clients/libtally/libtally_internal.h"

#include "common/clock.h"
#include "common/transfer_id.h"

#include <assert.h>
#include <string.h>

_Static_assert(KEY_BUFFER_BYTES >= 37, "a generated key (UUID text) fits a key buffer");

int tally_uuid_v7(tally_uuid *out)
{
    if (out == NULL)
        return TALLY_invalid_argument;
    tally_id128 id;
    int rc = tally_id128_uuidv7(clock_wall_ms(), &id);
    if (rc == TALLY_ok)
        memcpy(out->bytes, id.bytes, 16);
    return rc;
}

void tally_uuid_format(const tally_uuid *id, char out[37])
{
    assert(id != NULL && out != NULL);
    tally_id128 x;
    memcpy(x.bytes, id->bytes, 16);
    bytes_id128_uuid_text(&x, out);
}

int tally_uuid_parse(const char *text, tally_uuid *out)
{
    tally_id128 id;
    if (text == NULL || out == NULL || !tally_id128_from_hex(text, &id))
        return TALLY_invalid_argument;
    memcpy(out->bytes, id.bytes, 16);
    return TALLY_ok;
}

void tally_uuid_from_key(const char *consumer, const char *key, tally_uuid *out)
{
    assert(out != NULL);
    tally_id128 id;
    transfer_id_from_key(consumer, key, &id);
    memcpy(out->bytes, id.bytes, 16);
}

/* The key of a write: the caller's (1..128 bytes) or a new UUIDv7 text. */
int client_key_resolve(const char *given, char out[KEY_BUFFER_BYTES])
{
    if (given != NULL) {
        size_t n = strlen(given);
        if (n == 0 || n > TALLY_CLIENT_KEY_BYTES_MAX)
            return TALLY_invalid_argument;
        memcpy(out, given, n + 1);
        return TALLY_ok;
    }
    tally_uuid id;
    int rc = tally_uuid_v7(&id);
    if (rc == TALLY_ok)
        tally_uuid_format(&id, out);
    return rc;
}
