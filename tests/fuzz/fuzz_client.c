/*
 * fuzz_client.c — libtally's reply and event decoders for the fuzz
 * targets, reached without a socket: the request path and the calls of
 * libtally (clients/libtally/libtally.c, url_list.c, autobatch.c, keys.c,
 * writes.c, reads.c, events.c) are compiled into this file, so their static decoders are
 * called directly on the input, as they would be on a reply that arrived (an
 * nng_msg needs no socket).
 */
#include "clients/libtally/libtally.c"
#include "clients/libtally/url_list.c"
#include "clients/transport/sp_direct.c"
#include "clients/transport/sp_pipes.c"
#include "clients/libtally/autobatch.c"
#include "clients/libtally/keys.c"
#include "clients/libtally/writes.c"
#include "clients/libtally/reads.c"
#include "clients/libtally/events.c"

#include "tests/fuzz/fuzz.h"

#define LIST_MAX 16

/* Every shape a libtally call reads from a reply map. */
static void decode_every_shape(const msgpack_object *root)
{
    static tally_result results[TALLY_CLIENT_BATCH_MAX];
    static tally_entitlement entitlements[LIST_MAX];
    static tally_history_entry history[LIST_MAX];
    static tally_event events[LIST_MAX];
    result_clear(&results[0], "key");
    client_result_fill(&results[0], root);
    const msgpack_object *list = msgpack_safe_map_get(root, "results");
    for (uint32_t i = 0; list && list->type == MSGPACK_OBJECT_ARRAY && i < list->via.array.size &&
                         i < TALLY_CLIENT_BATCH_MAX;
         i++)
        client_result_fill(&results[i], &list->via.array.ptr[i]);
    tally_account account;
    tally_transfer_info transfer;
    tally_entitlement entitlement;
    tally_stats stats;
    client_account_decode(msgpack_safe_map_get(root, "account"), &account);
    client_transfer_decode(msgpack_safe_map_get(root, "transfer"), &transfer);
    client_entitlement_decode(msgpack_safe_map_get(root, "entitlement"), &entitlement);
    stats_decode(root, &stats);
    size_t n;
    client_array_decode(msgpack_safe_map_get(root, "entitlements"), client_entitlement_decode,
                        entitlements, sizeof(entitlements[0]), LIST_MAX, &n);
    decoder d = decoder_of(root);
    if (dec_present(&d, "next"))
        dec_uint(&d, "next", UINT64_MAX);
    client_array_decode(msgpack_safe_map_get(root, "entries"), history_entry_decode, history,
                 sizeof(history[0]), LIST_MAX, &n);
    static tally_account accounts[LIST_MAX]; /* account_list's entries */
    client_array_decode(msgpack_safe_map_get(root, "entries"), client_account_decode, accounts,
                 sizeof(accounts[0]), LIST_MAX, &n);
    client_array_decode(msgpack_safe_map_get(root, "events"), event_decode, events, sizeof(events[0]),
                 LIST_MAX, &n);
    tally_events_release(events, n);
}

void fuzz_client_reply(const uint8_t *data, size_t size)
{
    reply r;
    memset(&r, 0, sizeof(r));
    if (nng_msg_alloc(&r.msg, size) != 0)
        return;
    if (size)
        memcpy(nng_msg_body(r.msg), data, size);
    reply_decode(&r);
    if (r.root != NULL)
        decode_every_shape(r.root);
    client_reply_free(&r);
}

void fuzz_client_event(const uint8_t *data, size_t size)
{
    msgpack_object o;
    memset(&o, 0, sizeof(o));
    o.type = MSGPACK_OBJECT_BIN;
    o.via.bin.ptr = (const char *)data;
    o.via.bin.size = (uint32_t)size;
    tally_event e;
    if (!event_decode(&o, &e))
        return;
    if (e.raw_len != size || (size && memcmp(e.raw, data, size) != 0))
        fuzz_fail("libtally's event copy differs from the event's bytes");
    tally_events_release(&e, 1);
}
