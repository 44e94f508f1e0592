/*
 * ready_file.c — see ready_file.h.
 */
#include "common/ready_file.h"

#include "common/error.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

/* Where the port of url's authority starts and ends ([*from, *to)), or
 * false when it has none. */
static bool port_span(const char *url, size_t *from, size_t *to)
{
    const char *p = strstr(url, "://");
    if (p == NULL)
        return false;
    p += 3;
    const char *end = p + strcspn(p, "/");
    const char *colon = NULL;
    if (*p == '[') { /* [v6]:port */
        const char *close = memchr(p, ']', (size_t)(end - p));
        colon = close && close + 1 < end && close[1] == ':' ? close + 1 : NULL;
    } else {
        for (const char *c = p; c < end; c++)
            if (*c == ':')
                colon = c;
    }
    if (colon == NULL)
        return false;
    *from = (size_t)(colon + 1 - url);
    *to = (size_t)(end - url);
    return true;
}

bool net_url_with_port(const char *url, unsigned port, char *out, size_t size)
{
    size_t from, to;
    int n = port_span(url, &from, &to)
                ? snprintf(out, size, "%.*s%u%s", (int)from, url, port, url + to)
                : snprintf(out, size, "%s", url);
    return n >= 0 && (size_t)n < size;
}

int net_ready_file_write(const char *path, const char *text, char *why, size_t why_size)
{
    char tmp[4096];
    if (snprintf(tmp, sizeof(tmp), "%s.tmp.%ld", path, (long)getpid()) >= (int)sizeof(tmp)) {
        snprintf(why, why_size, "%s: path too long", path);
        return TALLY_io_error;
    }
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
        snprintf(why, why_size, "%s: %s", tmp, strerror(errno));
        return TALLY_io_error;
    }
    size_t len = strlen(text), done = 0;
    while (done < len) {
        ssize_t n = write(fd, text + done, len - done);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        done += (size_t)n;
    }
    int err = done == len && fsync(fd) == 0 ? 0 : errno ? errno : EIO;
    if (close(fd) != 0 && err == 0)
        err = errno;
    if (err == 0 && rename(tmp, path) != 0)
        err = errno;
    if (err != 0) {
        snprintf(why, why_size, "%s: %s", path, strerror(err));
        unlink(tmp);
        return TALLY_io_error;
    }
    return TALLY_ok;
}
