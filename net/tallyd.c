/*
 * tallyd.c — the tally server: options (net/tallyd_options.c), signals,
 * readiness for systemd, and net_server_run.
 */
#include "config.h"

#include "common/cli.h"
#include "net/server.h"
#include "net/tallyd_options.h"
#include "net/webhooks.h"

#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#ifdef HAVE_SYSTEMD
#include <systemd/sd-daemon.h>
#endif

static volatile sig_atomic_t stop_requested;

static void on_signal(int sig)
{
    (void)sig;
    stop_requested = 1;
}

/* File descriptors beyond the connections: the store, its lock file,
 * listeners, the PUB socket's subscribers, backups, NNG's own. */
#define FDS_BESIDES_CONNECTIONS 256

/* Each connection is a file descriptor: raise the soft limit (up to the
 * hard one) so that --max-connections, not EMFILE, is what refuses. */
static void raise_fd_limit(unsigned max_connections)
{
    struct rlimit rl;
    if (max_connections == 0 || getrlimit(RLIMIT_NOFILE, &rl) != 0)
        return;
    rlim_t want = (rlim_t)max_connections + FDS_BESIDES_CONNECTIONS;
    if (rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur < want) {
        rl.rlim_cur = rl.rlim_max == RLIM_INFINITY || rl.rlim_max > want ? want : rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur < want)
        net_log(NET_LOG_WARN, "the open-files limit (%llu) is below --max-connections + %d: "
                "connections may be refused earlier (raise ulimit -n)",
                (unsigned long long)rl.rlim_cur, FDS_BESIDES_CONNECTIONS);
}

/* Tell systemd (Type=notify) where tallyd is: READY=1, STOPPING=1,
 * RELOADING=1. A no-op without NOTIFY_SOCKET, or built without libsystemd. */
static void notify_systemd(const char *state)
{
#ifdef HAVE_SYSTEMD
    int rc = sd_notify(0, state);
    if (rc < 0)
        net_log(NET_LOG_WARN, "sd_notify(%s): %s", state, strerror(-rc));
#else
    (void)state;
#endif
}

int main(int argc, char **argv)
{
    net_server_options opt = {.version = PACKAGE_VERSION, .notify = notify_systemd};
    net_health_config_default(&opt.health);
    options_set set;
    int rc = tallyd_options_load(argc, argv, &opt, &set);
    if (rc < 0) {
        net_log_set_level(opt.log_level);
        cli_catch_stop_signals(on_signal, false, true);
        /* The unit's ExecReload sends SIGHUP: it must never stop tallyd.
         * What reloads (issue 15's auth file) installs its handler here and
         * says RELOADING=1 / READY=1 through opt.notify. */
        signal(SIGHUP, SIG_IGN);
        raise_fd_limit(opt.max_connections);
        rc = net_server_run(&opt, &stop_requested);
    }
    webhooks_free(opt.webhooks);
    options_free(&set);
    return rc;
}
