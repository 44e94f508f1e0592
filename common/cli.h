/*
 * cli.h — what every tally program's main() shares: bounded decimal option
 * values and the stop signals.
 */
#ifndef TALLY_CLI_H
#define TALLY_CLI_H

#include <signal.h>
#include <stdbool.h>
#include <stdint.h>

/* A decimal integer in [min, max]: digits only (no sign, no spaces, no
 * trailing text), no overflow. Returns false and leaves *out alone when
 * text is not one. */
bool cli_parse_u64(const char *text, uint64_t min, uint64_t max, uint64_t *out);

/* Install handler for SIGINT and SIGTERM (and SIGHUP when with_hup), with
 * no SA_RESTART, so a blocking call returns EINTR; SIGPIPE is ignored when
 * ignore_pipe. Returns 0, or -1 with errno set. */
int cli_catch_stop_signals(void (*handler)(int), bool with_hup, bool ignore_pipe);

#endif
