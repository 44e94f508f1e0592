/*
 * tallyd.c — the tally server: options (net/tallyd_options.c), signals,
 * readiness for systemd, and net_server_run.
 */
#include "config.h"

#include "common/cli.h"
#include "common/error.h"
#include "common/limits.h"
#include "net/auth.h"
#include "net/listen_policy.h"
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
static volatile sig_atomic_t reload_requested;

/* SIGHUP reloads the auth file (the unit's ExecReload); SIGTERM and SIGINT
 * stop. */
static void on_signal(int sig)
{
    if (sig == SIGHUP)
        reload_requested = 1;
    else
        stop_requested = 1;
}

/* Safe defaults (docs/SECURITY.md): every listener is loopback, local
 * (ipc://) or, with --auth, encrypted; else exit 2 naming it, unless
 * --insecure, which turns each refusal into a warning at every start. */
static int check_listeners(const net_server_options *opt, bool insecure)
{
    struct {
        const char *role, *url;
    } all[NET_LISTEN_URLS_MAX + 2];
    unsigned n = 0;
    for (unsigned i = 0; i < opt->listen_count; i++)
        all[n].role = "--listen", all[n++].url = opt->listen_urls[i];
    if (opt->publish_url && *opt->publish_url)
        all[n].role = "--publish", all[n++].url = opt->publish_url;
    if (opt->http_url)
        all[n].role = "--http", all[n++].url = opt->http_url;
    char why[TALLY_PATH_BYTES_MAX + 200];
    for (unsigned i = 0; i < n; i++) {
        if (net_listener_allowed(all[i].role, all[i].url, opt->auth_file != NULL, why, sizeof(why)))
            continue;
        if (!insecure) {
            fprintf(stderr, "tallyd: refusing to start: %s\n", why);
            return 2;
        }
        net_log(NET_LOG_WARN, "--insecure: serving anyway: %s", why);
    }
    if (insecure)
        net_log(NET_LOG_WARN, "--insecure: the safe-default listener checks are off "
                "(docs/SECURITY.md)");
    return -1;
}

/* The --auth file at start: exit 2 when it is not private or does not parse. */
static int load_auth(net_server_options *opt)
{
    char why[TALLY_PATH_BYTES_MAX + 300];
    if (opt->auth_file == NULL)
        return -1;
    if (auth_table_load(opt->auth_file, &opt->auth, why, sizeof(why)) != TALLY_ok) {
        fprintf(stderr, "tallyd: --auth %s\n", why);
        return 2;
    }
    return -1;
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
        rc = check_listeners(&opt, options_given_count(&set, "insecure", NULL) > 0);
    }
    if (rc < 0)
        rc = load_auth(&opt);
    if (rc < 0) {
        /* SIGHUP (the unit's ExecReload) never stops tallyd: it reloads. */
        cli_catch_stop_signals(on_signal, true, true);
        opt.reload = &reload_requested;
        raise_fd_limit(opt.max_connections);
        rc = net_server_run(&opt, &stop_requested);
    }
    webhooks_free(opt.webhooks);
    options_free(&set);
    return rc;
}
