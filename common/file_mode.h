/*
 * file_mode.h — is a secret file readable by its owner only? Private keys
 * (--tls-key) must not be group- or world-readable: tallyd and the clients
 * refuse one that is, before reading it (docs/SECURITY.md).
 */
#ifndef TALLY_COMMON_FILE_MODE_H
#define TALLY_COMMON_FILE_MODE_H

#include <stdbool.h>
#include <stddef.h>

/* true when path exists and its mode grants nothing to group or others
 * (st_mode & 077 == 0). Otherwise false, with why (n bytes) saying which:
 * the stat error, or the mode found and the chmod that fixes it. */
bool file_mode_private(const char *path, char *why, size_t n);

#endif
