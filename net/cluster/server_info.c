/*
 * server_info.c — a NATS server's INFO line and its version
 * (server_info.h).
 */
#include "net/cluster/server_info.h"

#include "common/clock.h"
#include "common/error.h"

#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define HOST_BYTES_MAX 256

/* host and port of url; false when it has none. */
static bool host_port_of(const char *url, char *host, size_t host_size, char *port,
                         size_t port_size)
{
    const char *at = strstr(url, "://");
    at = at ? at + 3 : url;
    const char *user = strrchr(at, '@');
    if (user)
        at = user + 1;
    size_t len = strcspn(at, "/?");
    const char *colon = memchr(at, ':', len);
    size_t host_len = colon ? (size_t)(colon - at) : len;
    if (host_len == 0 || host_len >= host_size)
        return false;
    memcpy(host, at, host_len);
    host[host_len] = '\0';
    size_t port_len = colon ? len - host_len - 1 : 0;
    if (port_len >= port_size)
        return false;
    snprintf(port, port_size, "%.*s", (int)port_len, colon ? colon + 1 : "");
    if (port_len == 0)
        snprintf(port, port_size, "4222");
    return true;
}

/* A connected socket to host:port within the deadline, else -1. */
static int connect_by(const char *host, const char *port, int64_t deadline_ms)
{
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *res = NULL;
    if (getaddrinfo(host, port, &hints, &res) != 0)
        return -1;
    int fd = -1;
    for (struct addrinfo *a = res; a && fd < 0; a = a->ai_next) {
        fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
        if (fd < 0)
            continue;
        int64_t left = deadline_ms - clock_mono_ms();
        struct pollfd p = {.fd = fd, .events = POLLOUT};
        int err = 0;
        socklen_t err_len = sizeof(err);
        bool ok = connect(fd, a->ai_addr, a->ai_addrlen) == 0 ||
                  (left > 0 && poll(&p, 1, (int)left) == 1 &&
                   getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &err_len) == 0 && err == 0);
        if (!ok) {
            close(fd);
            fd = -1;
        }
    }
    freeaddrinfo(res);
    return fd;
}

/* The first line the server sends, up to CLUSTER_SERVER_INFO_BYTES_MAX. */
static int read_line(int fd, int64_t deadline_ms, char *line, size_t size)
{
    size_t used = 0;
    while (used + 1 < size) {
        int64_t left = deadline_ms - clock_mono_ms();
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (left <= 0 || poll(&p, 1, (int)left) != 1)
            return TALLY_timed_out;
        ssize_t n = read(fd, line + used, size - 1 - used);
        if (n <= 0)
            return TALLY_malformed_request;
        used += (size_t)n;
        line[used] = '\0';
        if (strchr(line, '\n'))
            return TALLY_ok;
    }
    return TALLY_malformed_request;
}

int cluster_server_version(const char *url, int64_t wait_ms, char *version, size_t size)
{
    char host[HOST_BYTES_MAX], port[16];
    if (!host_port_of(url, host, sizeof(host), port, sizeof(port)))
        return TALLY_invalid_argument;
    int64_t deadline = clock_mono_ms() + wait_ms;
    int fd = connect_by(host, port, deadline);
    if (fd < 0)
        return TALLY_unreachable;
    char *line = malloc(CLUSTER_SERVER_INFO_BYTES_MAX);
    int rc = line ? read_line(fd, deadline, line, CLUSTER_SERVER_INFO_BYTES_MAX)
                  : TALLY_out_of_memory;
    close(fd);
    const char *v = rc == TALLY_ok && strncmp(line, "INFO ", 5) == 0
                        ? strstr(line, "\"version\":\"")
                        : NULL;
    if (rc == TALLY_ok && v == NULL)
        rc = TALLY_malformed_request;
    if (rc == TALLY_ok) {
        v += strlen("\"version\":\"");
        size_t len = strcspn(v, "\"\r\n");
        if (len == 0 || len >= size)
            rc = TALLY_malformed_request;
        else
            snprintf(version, size, "%.*s", (int)len, v);
    }
    free(line);
    return rc;
}

int cluster_version_compare(const char *a, const char *b)
{
    for (int part = 0; part < 3; part++) {
        char *end_a, *end_b;
        unsigned long x = strtoul(a, &end_a, 10), y = strtoul(b, &end_b, 10);
        if (x != y)
            return x < y ? -1 : 1;
        a = *end_a == '.' ? end_a + 1 : end_a;
        b = *end_b == '.' ? end_b + 1 : end_b;
    }
    return 0;
}
