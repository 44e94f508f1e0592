/*
 * logging.h — log lines on stderr: UTC time, program, level, message
 * (tallyd's, and tally-relay's HTTP listener's).
 */
#ifndef TALLY_NET_LOGGING_H
#define TALLY_NET_LOGGING_H

typedef enum net_log_level { NET_LOG_ERROR, NET_LOG_WARN, NET_LOG_INFO, NET_LOG_DEBUG } net_log_level;

void net_log(net_log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void net_log_set_level(net_log_level level);
/* The program a line names (a static string; default "tallyd"). */
void net_log_set_program(const char *name);

#endif
