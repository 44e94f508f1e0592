/*
 * transfer_id.h — the transfer id an idempotency key stands for, one
 * definition for every side that derives it: libtally
 * (tally_uuid_from_key), the CLI and tally-bench through it, and the JSON
 * API for a POST /v1/transfer without an id (docs/PROTOCOL.md).
 */
#ifndef TALLY_COMMON_TRANSFER_ID_H
#define TALLY_COMMON_TRANSFER_ID_H

#include "common/bytes.h"

/* The first 16 bytes of SHA-256("tally.transfer-id.v1" || consumer || 0x00
 * || key); when key is a UUIDv7 in text (32 hex digits, dashes allowed) the
 * id is a UUIDv7 too: the key's 48-bit time, then bits of that digest with
 * the version and variant set, so later keys give later ids. NULL consumer
 * or key counts as "". */
void transfer_id_from_key(const char *consumer, const char *key, tally_id128 *out);

#endif
