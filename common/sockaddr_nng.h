/*
 * sockaddr_nng.h — whether a socket address the kernel gave
 * (getsockname, getpeername) is the one NNG reports for a pipe
 * (NNG_OPT_LOCADDR, NNG_OPT_REMADDR): same family, address and port.
 * libtally finds a pipe's descriptor by it (clients/transport/sp_pipes.c),
 * tallyd its listener watchdog's own probe (net/sp/listeners.c).
 */
#ifndef TALLY_COMMON_SOCKADDR_NNG_H
#define TALLY_COMMON_SOCKADDR_NNG_H

#include <netinet/in.h>
#include <nng/nng.h>
#include <stdbool.h>
#include <string.h>
#include <sys/socket.h>

/* Both in network byte order, as NNG keeps them. tcp only: false for any
 * other family (an ipc:// address does not tell two connections apart). */
static inline bool sockaddr_is_nng(const struct sockaddr_storage *a, const nng_sockaddr *b)
{
    if (a->ss_family == AF_INET && b->s_family == NNG_AF_INET) {
        const struct sockaddr_in *in = (const struct sockaddr_in *)a;
        return in->sin_port == b->s_in.sa_port && in->sin_addr.s_addr == b->s_in.sa_addr;
    }
    if (a->ss_family == AF_INET6 && b->s_family == NNG_AF_INET6) {
        const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)a;
        return in6->sin6_port == b->s_in6.sa_port &&
               memcmp(&in6->sin6_addr, b->s_in6.sa_addr, 16) == 0;
    }
    return false;
}

#endif
