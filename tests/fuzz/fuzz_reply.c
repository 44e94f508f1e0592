/*
 * fuzz_reply.c — fuzz target: a reply as libtally receives it (the bounded
 * decode, then every reply shape a libtally call reads: write results,
 * batch results, accounts and their pages, transfers, entitlements,
 * history pages, log pages with their events, stats). See fuzz_client.c.
 */
#include "tests/fuzz/fuzz.h"

int fuzz_reply_one(const uint8_t *data, size_t size)
{
    fuzz_client_reply(data, size);
    return 0;
}

#ifndef FUZZ_NO_ENTRY
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    return fuzz_reply_one(data, size);
}
#endif
