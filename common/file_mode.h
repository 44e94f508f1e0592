/*
 * file_mode.h — secrets on disk stay private: a key, token or auth file
 * that the group or others may read is refused, before it is opened for
 * its contents (docs/SECURITY.md, "Safe defaults").
 */
#ifndef TALLY_FILE_MODE_H
#define TALLY_FILE_MODE_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>

/* true when path is a regular file that only its owner may read or write
 * (mode & 077 == 0, after following symlinks). Else false, with a message
 * in why (at most why_size bytes, NUL-terminated) naming what the file is
 * for (what: "--auth file", "token file", "TLS key"), the path and, for a
 * mode that is too open, the mode in octal and the chmod that fixes it. */
bool file_private_check(const char *path, const char *what, char *why, size_t why_size);

/* The one-line secret of a private file (a token file): its bytes without
 * one trailing newline ("\n" or "\r\n"), 1..out_size - 1 bytes with no
 * other newline, NUL-terminated in out. false with why (as
 * file_private_check) when the file is not private, cannot be read, is
 * empty, holds more than one line or is too long. */
bool file_secret_read(const char *path, const char *what, char *out, size_t out_size, char *why,
                      size_t why_size);

/* The whole of a file of at most max bytes, NUL-terminated, in a buffer
 * the caller frees; its length in *len (NULL: not wanted). NULL when it
 * cannot be opened or read, is larger than max, or memory runs out, with
 * "WHAT PATH: why" in why ("PATH: why" when what is NULL). The content is
 * not checked: an empty file or NUL bytes are the caller's to refuse. */
char *file_read_bounded(const char *path, const char *what, size_t max, size_t *len, char *why,
                        size_t why_size);

/* "FILE:LINE: " and the message of fmt into out (at most size bytes,
 * NUL-terminated): the shape of every error about a line of a
 * configuration file (auth, webhooks). */
void file_line_message(char *out, size_t size, const char *file, unsigned line, const char *fmt,
                       va_list ap) __attribute__((format(printf, 5, 0)));

#endif
