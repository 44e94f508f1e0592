/*
 * ready_file.h — the addresses a daemon is bound to, for whoever started
 * it (tallyd's and tally-relay's --ready-file): a URL with the port the
 * kernel chose put in place of the port it was given (0 asks for any), and
 * the file naming them, written whole or not at all (a temporary file in
 * the same directory, then rename(2)), so a reader that sees the file sees
 * every line.
 */
#ifndef TALLY_NET_READY_FILE_H
#define TALLY_NET_READY_FILE_H

#include <stdbool.h>
#include <stddef.h>

/* A bound URL's room (an ipc:// path is at most a sun_path, 108 bytes). */
#define NET_URL_BYTES_MAX 512
/* The ready file's room: a line per endpoint (8 --listen, publish, http). */
#define NET_READY_FILE_BYTES_MAX (12 * (NET_URL_BYTES_MAX + 16))

/* url (scheme://HOST:PORT[/...], HOST a name, an IPv4 address or [IPv6])
 * with its port replaced by port, into out. A URL without a port (ipc://,
 * inproc://) is copied as it is. false when out is too small. */
bool net_url_with_port(const char *url, unsigned port, char *out, size_t size);

/* Write text to path as a whole: into path.tmp.PID, fsync'd, then renamed
 * over path. TALLY_ok, or TALLY_io_error with the reason in why. */
int net_ready_file_write(const char *path, const char *text, char *why, size_t why_size);

#endif
