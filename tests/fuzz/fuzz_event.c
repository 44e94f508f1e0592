/*
 * fuzz_event.c — fuzz target: bytes read back from the store.
 *
 *   - log_event_decode on the input as it is, and again on a copy whose
 *     trailing hash is replaced by the one it should carry (when the hash
 *     entry has its shape), so that inputs get past the chain check to the
 *     field and body decoders; the bodies' account, transfer and
 *     entitlement maps are unpacked as the invariant checker does;
 *   - the log's stored form (log/stored_event.h): the input expanded as a
 *     short stored event, and that expansion shortened and expanded again,
 *     which must give the same bytes; the input shortened as format 2;
 *   - libtally's event decoder (a subscriber reading log_read or PUB);
 *   - the fixed-size record decoders of accounts, transfers, entitlements
 *     and inbox records, with the first byte giving the key length.
 *
 * Oracles: a decoded event points at the bytes it came from; whatever a
 * body unpacks to packs and unpacks to the same object; an entitlement
 * record decodes, encodes and decodes to the same record.
 */
#include "tests/fuzz/fuzz.h"

#include "common/error.h"
#include "common/msgpack_safe.h"
#include "ledger/ledger.h"
#include "log/log.h"
#include "log/stored_event.h"

#include <stddef.h>
#include <string.h>

#define PACK_BYTES_MAX 1024

/* The body objects, behind one signature. */
#define CODEC(name, type, unpack_fn, pack_fn)                                                  \
    static int name##_unpack(const msgpack_object *o, void *out) { return unpack_fn(o, out); } \
    static int name##_pack(msgpack_packer *pk, const void *in, bool row)                      \
    {                                                                                          \
        return pack_fn(pk, in, row);                                                           \
    }
CODEC(account, ledger_account, ledger_account_unpack, ledger_account_pack)
CODEC(transfer, ledger_transfer_record, ledger_transfer_unpack, ledger_transfer_pack)
CODEC(entitlement, ledger_entitlement, ledger_entitlement_unpack, ledger_entitlement_pack)

typedef struct codec {
    const char *field; /* in the body */
    log_body_part part;
    size_t size;
    int (*unpack)(const msgpack_object *o, void *out);
    int (*pack)(msgpack_packer *pk, const void *in, bool row);
} codec;

static const codec codecs[] = {
    {"account", LOG_PART_ACCOUNT, sizeof(ledger_account), account_unpack, account_pack},
    {"debit_account", LOG_PART_DEBIT_ACCOUNT, sizeof(ledger_account), account_unpack,
     account_pack},
    {"credit_account", LOG_PART_CREDIT_ACCOUNT, sizeof(ledger_account), account_unpack,
     account_pack},
    {"transfer", LOG_PART_TRANSFER, sizeof(ledger_transfer_record), transfer_unpack,
     transfer_pack},
    {"entitlement", LOG_PART_ENTITLEMENT, sizeof(ledger_entitlement), entitlement_unpack,
     entitlement_pack},
};

/* Unpack, pack (as a map or a row), unpack again: the two objects must be
 * equal (both start zeroed, so padding compares equal too). */
static void round_trip(const codec *c, const msgpack_object *o, bool row)
{
    static _Alignas(max_align_t) uint8_t first[sizeof(ledger_entitlement) + 64];
    static _Alignas(max_align_t) uint8_t second[sizeof(first)];
    static uint8_t buf[PACK_BYTES_MAX];
    _Static_assert(sizeof(ledger_transfer_record) <= sizeof(first), "objects fit");
    _Static_assert(sizeof(ledger_account) <= sizeof(first), "objects fit");
    memset(first, 0, sizeof(first));
    memset(second, 0, sizeof(second));
    if (c->unpack(o, first) != TALLY_ok)
        return;
    msgpack_packer pk;
    msgpack_safe_buffer b;
    msgpack_safe_buffer_init(&b, buf, sizeof(buf), &pk);
    if (c->pack(&pk, first, row) != 0)
        fuzz_fail("%s: an unpacked object does not pack", c->field);
    msgpack_unpacked up;
    msgpack_unpacked_init(&up);
    int rc = msgpack_safe_unpack(buf, b.len, TALLY_MSGPACK_DEPTH_MAX, &up);
    if (rc != TALLY_ok || c->unpack(&up.data, second) != TALLY_ok ||
        memcmp(first, second, c->size) != 0)
        fuzz_fail("%s: unpack, pack, unpack gives another object", c->field);
    msgpack_unpacked_destroy(&up);
}

static void bodies_round_trip(const log_event *ev)
{
    for (size_t i = 0; i < sizeof(codecs) / sizeof(codecs[0]); i++)
        for (int row = 0; row < 2; row++)
            round_trip(&codecs[i], log_event_part(ev, codecs[i].part), row);
}

static void decode_event(const uint8_t *data, size_t size)
{
    msgpack_unpacked up;
    msgpack_unpacked_init(&up);
    log_event ev;
    if (log_event_decode(data, size, &up, &ev) == TALLY_ok) {
        if (ev.raw != data || ev.raw_len != size || ev.body == NULL)
            fuzz_fail("a decoded event does not point at its bytes");
        bodies_round_trip(&ev);
    }
    msgpack_unpacked_destroy(&up);
}

/* The input with the hash it should carry, decoded. */
static void decode_rehashed(const uint8_t *data, size_t size)
{
    static uint8_t copy[TALLY_EVENT_BYTES_MAX];
    if (size < LOG_HASH_ENTRY_BYTES || size > sizeof(copy))
        return;
    memcpy(copy, data, size);
    uint8_t prev[LOG_HASH_BYTES], hash[LOG_HASH_BYTES];
    const void *p;
    size_t n = 0;
    msgpack_unpacked up;
    msgpack_unpacked_init(&up);
    /* prev_hash: the 11th field, by name (format 1) or position (2) */
    bool found = msgpack_safe_unpack(copy, size, TALLY_MSGPACK_DEPTH_MAX, &up) == TALLY_ok;
    const msgpack_object *prev_obj = msgpack_safe_map_get(&up.data, "prev_hash");
    if (found && up.data.type == MSGPACK_OBJECT_ARRAY && up.data.via.array.size == 12)
        prev_obj = &up.data.via.array.ptr[10];
    found = found && msgpack_safe_get_bin(prev_obj, &p, &n) && n == LOG_HASH_BYTES;
    if (found)
        memcpy(prev, p, LOG_HASH_BYTES);
    msgpack_unpacked_destroy(&up);
    if (!found || log_event_hash(prev, copy, size, hash) != TALLY_ok)
        return;
    memcpy(copy + size - LOG_HASH_BYTES, hash, LOG_HASH_BYTES);
    decode_event(copy, size);
}

static void decode_records(const uint8_t *data, size_t size)
{
    if (size == 0)
        return;
    size_t key_len = data[0] < size - 1 ? data[0] : size - 1;
    const uint8_t *key = data + 1, *val = data + 1 + key_len;
    size_t val_len = size - 1 - key_len;
    ledger_account a;
    ledger_account_decode(1, val, val_len, &a);
    ledger_transfer_record t;
    tally_id128 id = {{1}};
    ledger_transfer_decode(&id, val, val_len, &t);
    ledger_inbox_record rec;
    ledger_inbox_decode(key, key_len, val, val_len, &rec);
    ledger_entitlement e, again;
    if (ledger_entitlement_decode(key, key_len, val, val_len, &e) == TALLY_ok) {
        uint8_t encoded[LEDGER_ENTITLEMENT_RECORD_BYTES];
        ledger_entitlement_encode(&e, encoded);
        if (ledger_entitlement_decode(key, key_len, encoded, sizeof(encoded), &again) !=
                TALLY_ok ||
            memcmp(&e, &again, sizeof(e)) != 0)
            fuzz_fail("entitlement record: decode, encode, decode gives another record");
    }
}

static void stored_forms(const uint8_t *data, size_t size)
{
    static uint8_t full[TALLY_EVENT_BYTES_MAX + STORED_EVENT_GROWTH_MAX];
    static uint8_t shorter[sizeof(full)], again[sizeof(full) + STORED_EVENT_GROWTH_MAX];
    static const uint8_t hash[LOG_HASH_BYTES] = {7};
    if (size > TALLY_EVENT_BYTES_MAX)
        return;
    (void)stored_event_shorten(data, size, shorter);
    uint8_t prev[LOG_HASH_BYTES];
    (void)stored_event_prev_hash(data, size, prev);
    size_t n = stored_event_expand(data, size, 12345, 0x2abcdef, hash, full, sizeof(full));
    if (n == 0)
        return;
    if (n > size + STORED_EVENT_GROWTH_MAX)
        fuzz_fail("a short event expanded past its bound");
    decode_event(full, n);
    size_t m = stored_event_shorten(full, n, shorter);
    if (m > 0 && (stored_event_expand(shorter, m, 12345, 0x2abcdef, hash, again, sizeof(again)) != n ||
                  memcmp(again, full, n) != 0))
        fuzz_fail("an expanded event shortened and expanded again differs");
}

int fuzz_event_one(const uint8_t *data, size_t size)
{
    decode_event(data, size);
    stored_forms(data, size);
    decode_rehashed(data, size);
    fuzz_client_event(data, size);
    decode_records(data, size);
    return 0;
}

#ifndef FUZZ_NO_ENTRY
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    return fuzz_event_one(data, size);
}
#endif
