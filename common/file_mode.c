/*
 * file_mode.c — the private-file check shared by tallyd (--auth, TLS key
 * files) and the clients (token files); see file_mode.h.
 */
#include "common/file_mode.h"

#include <errno.h>
#include <stdio.h>
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
