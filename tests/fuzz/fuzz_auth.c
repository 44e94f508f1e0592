/*
 * fuzz_auth.c — fuzz target: tallyd's --auth file (net/auth/auth.c), the bytes
 * as auth_table_parse gets them from auth_table_load. A table that parses
 * is then asked about a token and a name taken from the input, through
 * every class of grant.
 *
 * Oracles besides the sanitizers: a refusal says where (the file name and
 * a line number) and is TALLY_invalid_argument (or out of memory); a table
 * that parses has 1 .. AUTH_PRINCIPALS_MAX principals, and parsing the
 * same bytes again gives the same count; a lone `*` glob matches any name.
 */
#include "tests/fuzz/fuzz.h"

#include "common/error.h"
#include "net/auth/auth.h"

#include <string.h>

static void ask(const auth_table *t, const uint8_t *data, size_t size)
{
    size_t cut = size / 2;
    const auth_principal *p = auth_authenticate(t, data, cut);
    if (!auth_glob_match("*", (tally_str){(const char *)data + cut, size - cut}))
        fuzz_fail("the glob * refused a name");
    if (p == NULL)
        return;
    tally_str name = {(const char *)data + cut, size - cut};
    for (int c = AUTH_CLASS_NONE; c <= AUTH_CLASS_ADMIN; c++)
        (void)auth_permits(p, (auth_class)c, name);
    if (auth_principal_name(p)[0] == '\0')
        fuzz_fail("a principal without a name");
}

int fuzz_auth_one(const uint8_t *data, size_t size)
{
    char why[512];
    auth_table *t = NULL;
    int rc = auth_table_parse((const char *)data, size, "fuzz", &t, why, sizeof(why));
    if (rc != TALLY_ok) {
        if (rc != TALLY_invalid_argument && rc != TALLY_out_of_memory)
            fuzz_fail("parse failed with %s", tally_strerror(rc));
        if (rc == TALLY_invalid_argument && strncmp(why, "fuzz:", 5) != 0)
            fuzz_fail("a refusal without file and line: %s", why);
        if (t != NULL)
            fuzz_fail("a refusal left a table");
        return 0;
    }
    size_t n = auth_table_count(t);
    if (n == 0 || n > AUTH_PRINCIPALS_MAX)
        fuzz_fail("a table of %zu principals", n);
    auth_table *again = NULL;
    if (auth_table_parse((const char *)data, size, "fuzz", &again, why, sizeof(why)) == TALLY_ok &&
        auth_table_count(again) != n)
        fuzz_fail("the same bytes parsed to %zu and %zu principals", n, auth_table_count(again));
    auth_table_free(again);
    ask(t, data, size);
    auth_table_free(t);
    return 0;
}

#ifndef FUZZ_NO_ENTRY
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    return fuzz_auth_one(data, size);
}
#endif
