/*
 * http_client.c — the tests' bare HTTP client (http_client.h).
 */
#include "tests/support/http_client.h"

#include "common/clock.h"
#include "tests/support/wait.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define ANSWER_WAIT_MS 30000
#define ANSWER_BYTES_MAX (16u * 1024 * 1024)

int test_tcp_connect(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    if (fd >= 0 && connect(fd, (struct sockaddr *)&a, sizeof(a)) == 0)
        return fd;
    if (fd >= 0)
        close(fd);
    return -1;
}

/* Read until EOF, a reset or timeout_ms scaled; what was read,
 * NUL-terminated. */
static char *read_all(int fd, int timeout_ms)
{
    size_t cap = 65536, len = 0;
    char *buf = malloc(cap);
    int64_t until = test_deadline_ms(timeout_ms);
    while (buf) {
        int64_t left = until - clock_mono_ms();
        struct pollfd p = {fd, POLLIN, 0};
        if (left <= 0 || poll(&p, 1, (int)left) <= 0)
            break;
        if (len + 1 == cap) {
            if (cap >= ANSWER_BYTES_MAX)
                break;
            char *more = realloc(buf, cap *= 2);
            if (more == NULL)
                break;
            buf = more;
        }
        ssize_t n = read(fd, buf + len, cap - len - 1);
        if (n <= 0)
            break;
        len += (size_t)n;
    }
    if (buf)
        buf[len] = '\0';
    return buf;
}

static bool send_all(int fd, const char *p, size_t len)
{
    while (len > 0) {
        ssize_t n = send(fd, p, len, MSG_NOSIGNAL);
        if (n <= 0)
            return false;
        p += n;
        len -= (size_t)n;
    }
    return true;
}

char *test_http_raw(int port, const char *raw, size_t len, int *status)
{
    *status = 0;
    int fd = test_tcp_connect(port);
    if (fd < 0)
        return NULL;
    send_all(fd, raw, len); /* the server may refuse part way: read what it said */
    char *answer = read_all(fd, ANSWER_WAIT_MS);
    close(fd);
    if (answer && sscanf(answer, "HTTP/1.%*d %d", status) != 1)
        *status = 0;
    return answer;
}

char *test_http_get(int port, const char *path, int *status)
{
    char req[1024];
    int n = snprintf(req, sizeof(req),
                     "GET %s HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nConnection: close\r\n\r\n", path,
                     port);
    char *answer = test_http_raw(port, req, (size_t)n, status);
    if (answer == NULL)
        return NULL;
    char *body = strstr(answer, "\r\n\r\n");
    char *copy = strdup(body ? body + 4 : "");
    free(answer);
    return copy;
}

long long test_metrics_sample(int port, const char *series)
{
    int status = 0;
    char *text = test_http_get(port, "/metrics", &status);
    char line[320];
    snprintf(line, sizeof(line), "\n%s ", series);
    const char *at = text && status == 200 ? strstr(text, line) : NULL;
    long long value = at ? strtoll(at + strlen(line), NULL, 10) : -1;
    free(text);
    return value;
}

bool test_metrics_sample_reaches(int port, const char *series, long long min, int timeout_ms)
{
    return TEST_WAITED_UNTIL(test_metrics_sample(port, series) >= min, timeout_ms);
}

/* The value of the sample of name (no labels) in scrape; false when absent. */
static bool scrape_value(const char *scrape, const char *name, double *out)
{
    char line[128];
    snprintf(line, sizeof(line), "\n%s ", name);
    const char *at = strstr(scrape, line);
    if (at == NULL)
        return false;
    char *end = NULL;
    *out = strtod(at + strlen(line), &end);
    return end != at + strlen(line);
}

const char *test_process_metrics_wrong(const char *scrape, double started_s, double now_s)
{
    double start, rss, vsize, cpu, fds, max_fds;
    if (!scrape_value(scrape, "process_start_time_seconds", &start) ||
        !scrape_value(scrape, "process_resident_memory_bytes", &rss) ||
        !scrape_value(scrape, "process_virtual_memory_bytes", &vsize) ||
        !scrape_value(scrape, "process_cpu_seconds_total", &cpu) ||
        !scrape_value(scrape, "process_open_fds", &fds) ||
        !scrape_value(scrape, "process_max_fds", &max_fds))
        return "a process metric is missing";
    /* the boot time is whole seconds and start ticks are 1/100 s: 2 s slack */
    if (start < started_s - 2 || start > now_s + 2)
        return "process_start_time_seconds is not within the test's lifetime";
    if (rss <= 0 || vsize < rss)
        return "process_resident_memory_bytes is not in (0, virtual memory]";
    if (cpu < 0 || cpu > (now_s - started_s + 2) * 64)
        return "process_cpu_seconds_total is not plausible";
    if (fds < 3 || fds > max_fds)
        return "process_open_fds is not in [3, process_max_fds]";
    return NULL;
}

bool test_fd_closed_within(int fd, int timeout_ms)
{
    int64_t until = test_deadline_ms(timeout_ms);
    char buf[4096];
    for (;;) {
        int64_t left = until - clock_mono_ms();
        struct pollfd p = {fd, POLLIN, 0};
        if (left <= 0 || poll(&p, 1, (int)left) <= 0)
            return false;
        ssize_t n = read(fd, buf, sizeof(buf));
        if (n == 0 || (n < 0 && errno == ECONNRESET))
            return true;
        if (n < 0 && errno != EINTR && errno != EAGAIN)
            return true;
    }
}
