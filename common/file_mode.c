/*
 * file_mode.c — see file_mode.h.
 */
#include "common/file_mode.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

bool file_mode_private(const char *path, char *why, size_t n)
{
    struct stat st;
    if (stat(path, &st) != 0) {
        snprintf(why, n, "%s: %s", path, strerror(errno));
        return false;
    }
    if ((st.st_mode & 077) != 0) {
        snprintf(why, n, "%s: readable or writable by group or others (mode %03o); "
                 "chmod 600 %s", path, (unsigned)(st.st_mode & 0777), path);
        return false;
    }
    return true;
}
