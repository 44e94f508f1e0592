/*
 * process_metrics.h — the standard Prometheus process metrics of the
 * running program (process_cpu_seconds_total, process_start_time_seconds,
 * process_resident_memory_bytes, process_virtual_memory_bytes,
 * process_open_fds, process_max_fds), with the names and meaning of
 * Prometheus's client libraries. Shared by tallyd's /metrics and
 * tally-relay's (libtallyhttp).
 */
#ifndef TALLY_COMMON_PROCESS_METRICS_H
#define TALLY_COMMON_PROCESS_METRICS_H

#include "common/text.h"

/* Appends the families to out, read from /proc/self/stat, /proc/stat
 * (boot time), /proc/self/fd and getrlimit(RLIMIT_NOFILE). A family whose
 * source cannot be read (no /proc) is left out, as the client libraries
 * do; nothing is ever half written. */
void process_metrics_write(net_text *out);

#endif
