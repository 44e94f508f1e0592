/*
 * listen_policy.c — listener URLs judged by scheme and host (see
 * listen_policy.h).
 */
#include "net/auth/listen_policy.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

static bool has_scheme(const char *url, const char *const *schemes)
{
    for (size_t i = 0; schemes[i]; i++)
        if (strncmp(url, schemes[i], strlen(schemes[i])) == 0)
            return true;
    return false;
}

bool net_url_is_plaintext(const char *url)
{
    static const char *const clear[] = {"tcp://", "tcp4://", "tcp6://", "ws://", "ws4://",
                                        "ws6://", "http://", NULL};
    return has_scheme(url, clear);
}

bool net_url_is_local(const char *url)
{
    static const char *const local[] = {"ipc://", "inproc://", "abstract://", NULL};
    return has_scheme(url, local);
}

/* The host of scheme://host:port/path into out ("" when none). */
static void url_host(const char *url, char *out, size_t size)
{
    const char *p = strstr(url, "://");
    out[0] = '\0';
    if (p == NULL)
        return;
    p += 3;
    const char *end;
    if (*p == '[') { /* [v6]:port */
        p++;
        end = strchr(p, ']');
    } else {
        end = p + strcspn(p, ":/");
    }
    if (end == NULL)
        return;
    size_t n = (size_t)(end - p);
    if (n >= size)
        return;
    memcpy(out, p, n);
    out[n] = '\0';
}

bool net_url_is_loopback(const char *url)
{
    char host[256];
    url_host(url, host, sizeof(host));
    if (strcasecmp(host, "localhost") == 0 || strcmp(host, "::1") == 0)
        return true;
    unsigned a, b, c, d;
    char rest;
    return sscanf(host, "%u.%u.%u.%u%c", &a, &b, &c, &d, &rest) == 4 && a == 127 && b < 256 &&
           c < 256 && d < 256;
}

bool net_url_check(const char *url, char *why, size_t why_size)
{
    static const char *const network[] = {"tcp://", "tcp4://", "tcp6://", "tls+tcp://", "ws://",
                                          "ws4://", "ws6://", "wss://", NULL};
    const char *sep = strstr(url, "://");
    if (sep == NULL || !(has_scheme(url, network) || net_url_is_local(url))) {
        snprintf(why, why_size, "%s: not a URL tallyd serves (tcp://HOST:PORT, tls+tcp://, ws://, "
                 "wss://, ipc:///PATH)", url);
        return false;
    }
    const char *rest = sep + 3;
    if (net_url_is_local(url)) {
        if (*rest == '\0') {
            snprintf(why, why_size, "%s: no path or name", url);
            return false;
        }
        return true;
    }
    char host[256];
    url_host(url, host, sizeof(host));
    const char *after = rest + (*rest == '[' ? strlen(host) + 2 : strlen(host));
    unsigned long port = 0;
    char *end = NULL;
    if (*after == ':')
        port = strtoul(after + 1, &end, 10);
    if (*after != ':' || end == after + 1 || (*end != '\0' && *end != '/') || port > 65535) {
        snprintf(why, why_size, "%s: HOST:PORT with a port of 0 to 65535", url);
        return false;
    }
    unsigned a, b, c, d;
    char extra;
    if (host[0] && strspn(host, "0123456789.") == strlen(host) &&
        (sscanf(host, "%u.%u.%u.%u%c", &a, &b, &c, &d, &extra) != 4 || a > 255 || b > 255 ||
         c > 255 || d > 255)) {
        snprintf(why, why_size, "%s: %s is no IPv4 address", url, host);
        return false;
    }
    return true;
}

bool net_listener_allowed(const char *role, const char *url, bool auth_on, char *why,
                          size_t why_size)
{
    if (net_url_is_local(url) || net_url_is_loopback(url))
        return true;
    if (net_url_is_plaintext(url)) {
        snprintf(why, why_size,
                 "%s %s: a plaintext listener on a non-loopback address (use a TLS scheme, "
                 "a loopback address or ipc://, or --insecure)", role, url);
        return false;
    }
    if (!auth_on) {
        snprintf(why, why_size,
                 "%s %s: a non-loopback listener without --auth (give --auth FILE, or "
                 "--insecure)", role, url);
        return false;
    }
    return true;
}
