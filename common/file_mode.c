/*
 * file_mode.c — the private-file check shared by tallyd (--auth, TLS key
 * files) and the clients (token files); see file_mode.h.
 */
#include "common/file_mode.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

bool file_private_check(const char *path, const char *what, char *why, size_t why_size)
{
    struct stat st;
    if (stat(path, &st) != 0) {
        snprintf(why, why_size, "%s %s: %s", what, path, strerror(errno));
        return false;
    }
    if (!S_ISREG(st.st_mode)) {
        snprintf(why, why_size, "%s %s: not a regular file", what, path);
        return false;
    }
    if ((st.st_mode & 077) != 0) {
        snprintf(why, why_size,
                 "%s %s has mode %04o: group or others may read it; refused "
                 "(chmod 600 %s)",
                 what, path, (unsigned)(st.st_mode & 07777), path);
        return false;
    }
    return true;
}

bool file_secret_read(const char *path, const char *what, char *out, size_t out_size, char *why,
                      size_t why_size)
{
    if (!file_private_check(path, what, why, why_size))
        return false;
    FILE *f = fopen(path, "rb");
    if (f == NULL) {
        snprintf(why, why_size, "%s %s: %s", what, path, strerror(errno));
        return false;
    }
    size_t n = fread(out, 1, out_size, f); /* out_size: one more than fits, to see it */
    bool failed = ferror(f);
    fclose(f);
    if (failed) {
        snprintf(why, why_size, "%s %s: cannot read it", what, path);
        return false;
    }
    if (n > 0 && out[n - 1] == '\n')
        n--;
    if (n > 0 && out[n - 1] == '\r')
        n--;
    if (n == 0 || n >= out_size || memchr(out, '\n', n) || memchr(out, '\0', n)) {
        snprintf(why, why_size, "%s %s: expected one line of 1-%zu bytes", what, path,
                 out_size - 1);
        return false;
    }
    out[n] = '\0';
    return true;
}

void file_line_message(char *out, size_t size, const char *file, unsigned line, const char *fmt,
                       va_list ap)
{
    int n = snprintf(out, size, "%s:%u: ", file, line);
    if (n >= 0 && (size_t)n < size)
        vsnprintf(out + n, size - (size_t)n, fmt, ap);
}

char *file_read_bounded(const char *path, const char *what, size_t max, size_t *len, char *why,
                        size_t why_size)
{
    const char *sep = what ? " " : "";
    what = what ? what : "";
    FILE *f = fopen(path, "rb");
    if (f == NULL) {
        snprintf(why, why_size, "%s%s%s: %s", what, sep, path, strerror(errno));
        return NULL;
    }
    char *text = malloc(max + 1);
    size_t n = text ? fread(text, 1, max + 1, f) : 0; /* max + 1: to see a larger file */
    bool failed = text == NULL || ferror(f);
    fclose(f);
    if (failed || n > max) {
        if (failed)
            snprintf(why, why_size, "%s%s%s: %s", what, sep, path,
                     text == NULL ? "out of memory" : "cannot read it");
        else
            snprintf(why, why_size, "%s%s%s: larger than %zu bytes", what, sep, path, max);
        free(text);
        return NULL;
    }
    text[n] = '\0';
    if (len)
        *len = n;
    return text;
}
