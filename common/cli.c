/*
 * cli.c — option values and stop signals shared by tally's programs.
 */
#include "common/cli.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

bool cli_parse_u64(const char *text, uint64_t min, uint64_t max, uint64_t *out)
{
    if (text == NULL || text[0] < '0' || text[0] > '9')
        return false;
    char *end = NULL;
    errno = 0;
    unsigned long long v = strtoull(text, &end, 10);
    if (errno != 0 || end == text || *end != '\0' || v < min || v > max)
        return false;
    *out = (uint64_t)v;
    return true;
}

int cli_catch_stop_signals(void (*handler)(int), bool with_hup, bool ignore_pipe)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = handler;
    sigemptyset(&sa.sa_mask);
    if (sigaction(SIGINT, &sa, NULL) != 0 || sigaction(SIGTERM, &sa, NULL) != 0 ||
        (with_hup && sigaction(SIGHUP, &sa, NULL) != 0))
        return -1;
    if (ignore_pipe && signal(SIGPIPE, SIG_IGN) == SIG_ERR)
        return -1;
    return 0;
}
