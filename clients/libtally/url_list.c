/*
 * url_list.c — a client's url as a list of nodes' URLs (docs/CLUSTER.md,
 * "Failover for clients"): libtally.c keeps a connection per URL.
 */
#include "clients/libtally/libtally_internal.h"

#include "common/error.h"

#include <string.h>

/* The URL list of text (comma-separated, no empty entry): *count URLs
 * into buf (room for text) and urls. */
int client_url_list_split(const char *text, char *buf, size_t buf_size, const char **urls,
                          unsigned *count)
{
    size_t n = strlen(text);
    if (n == 0 || n >= buf_size)
        return TALLY_invalid_argument;
    memcpy(buf, text, n + 1);
    *count = 0;
    for (char *at = buf;;) {
        char *comma = strchr(at, ',');
        if (comma)
            *comma = '\0';
        if (*at == '\0' || *count == TALLY_CLIENT_URLS_MAX)
            return TALLY_invalid_argument;
        urls[(*count)++] = at;
        if (comma == NULL)
            return TALLY_ok;
        at = comma + 1;
    }
}
