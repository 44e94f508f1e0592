/*
 * tallyd.c — the tally server: options (net/server/tallyd_options.c), signals,
 * readiness for systemd, and net_server_run.
 */
#include "config.h"

#include "common/cli.h"
#include "common/error.h"
#include "common/limits.h"
#include "net/auth/auth.h"
#include "net/auth/listen_policy.h"
#include "net/server/server.h"
#include "net/server/tallyd_options.h"
#include "net/http/webhooks.h"
#ifdef TALLY_CLUSTER
#include "net/server/cluster_node.h"
#endif

#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#ifdef HAVE_SYSTEMD
#include <systemd/sd-daemon.h>
#endif

static volatile sig_atomic_t stop_requested;
static volatile sig_atomic_t reload_requested;

/* SIGHUP reloads the auth and TLS files (the unit's ExecReload); SIGTERM and SIGINT
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

/* A refused TLS setup: the message on stderr, exit status 2. */
static int tls_refusal(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "tallyd: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\nTry 'tallyd --help'.\n");
    va_end(ap);
    return 2;
}

/* The first endpoint that speaks TLS (tls+tcp:// or https://), or NULL. */
static const char *first_tls_endpoint(const net_server_options *opt)
{
    for (unsigned i = 0; i < opt->listen_count; i++)
        if (tls_url_is_tls(opt->listen_urls[i]))
            return opt->listen_urls[i];
    if (tls_url_is_tls(opt->publish_url))
        return opt->publish_url;
    return opt->http_url && strncmp(opt->http_url, "https://", 8) == 0 ? opt->http_url : NULL;
}

/* Read the --tls-* files and build the server configuration: -1 when
 * tallyd may go on, else the exit status (2: refused, with the reason). */
static int tls_setup(net_server_options *opt, tallyd_tls_choice *tls)
{
    char why[TALLY_PATH_BYTES_MAX + 300];
    const char *endpoint = first_tls_endpoint(opt);
    bool any_file = tls->files.cert || tls->files.key || tls->files.ca;
    if (endpoint == NULL && !any_file && tls->client_auth < 0)
        return -1;
    if (endpoint == NULL)
        return tls_refusal("--tls-* options without a tls+tcp:// or https:// endpoint%s", "");
    if (tls->files.cert == NULL || tls->files.key == NULL)
        return tls_refusal("%s: a TLS endpoint needs --tls-cert FILE and --tls-key FILE", endpoint);
    if (tls->client_auth < 0)
        tls->client_auth = tls->files.ca ? NNG_TLS_AUTH_MODE_REQUIRED : NNG_TLS_AUTH_MODE_NONE;
    if (tls->client_auth != NNG_TLS_AUTH_MODE_NONE && tls->files.ca == NULL)
        return tls_refusal("--tls-client-auth %s needs --tls-ca FILE (the CA of the clients' "
                           "certificates)", tls->client_auth == NNG_TLS_AUTH_MODE_REQUIRED ? "required" : "optional");
    /* mbedTLS's optional mode lets a bad certificate through as unverified,
     * and NNG 1.5.2 tells a connection only "verified or not", the same for
     * a missing and a bad certificate: optional would let both in. */
    const char *nng_tls = first_tls_endpoint(opt);
    if (tls->client_auth == NNG_TLS_AUTH_MODE_OPTIONAL && strncmp(nng_tls, "tls+", 4) == 0)
        return tls_refusal("%s: --tls-client-auth optional is for https:// only (NNG cannot tell "
                           "a missing client certificate from a bad one): use required or none",
                           nng_tls);
    if (tls_pem_load(&tls->files, &tls->pem, why, sizeof(why)) != TALLY_ok)
        return tls_refusal("%s", why);
    opt->tls_pem = &tls->pem;
    opt->tls_files = &tls->files;
    opt->tls_client_auth = (nng_tls_auth_mode)tls->client_auth;
    if (tls_config_server(&tls->pem, opt->tls_client_auth, &opt->tls, why, sizeof(why)) != TALLY_ok)
        return tls_refusal("%s", why);
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
#ifdef TALLY_CLUSTER
    opt.cluster = &cluster_node_hooks; /* used only with --cluster */
#endif
    net_health_config_default(&opt.health);
    options_set set;
    int rc = tallyd_options_load(argc, argv, &opt, &set);
    if (rc < 0) {
        net_log_set_level(opt.log_level);
        rc = check_listeners(&opt, options_given_count(&set, "insecure", NULL) > 0);
        opt.skip_open_check = options_given_count(&set, "skip-open-check", NULL) > 0;
        opt.upgrade = options_given_count(&set, "upgrade", NULL) > 0;
        opt.cluster_init = options_given_count(&set, "cluster-init", NULL) > 0;
    }
    if (rc < 0 && opt.cluster_init && opt.cluster_urls == NULL) {
        fprintf(stderr, "tallyd: --cluster-init is for cluster mode: give --cluster URLS too\n"
                        "Try 'tallyd --help'.\n");
        rc = 2;
    }
    tallyd_tls_choice *tls = tallyd_options_tls();
    if (rc < 0)
        rc = tls_setup(&opt, tls);
    if (rc < 0)
        rc = load_auth(&opt);
    if (rc < 0) {
        /* SIGHUP (the unit's ExecReload) never stops tallyd: it reloads. */
        cli_catch_stop_signals(on_signal, true, true);
        opt.reload = &reload_requested;
        raise_fd_limit(opt.max_connections);
        rc = net_server_run(&opt, &stop_requested);
    } else if (opt.tls) {
        nng_tls_config_free(opt.tls);
    }
    tls_pem_free(&tls->pem); /* a running server's configuration stays: NNG keeps its copy */
    webhooks_free(opt.webhooks);
    options_free(&set);
    return rc;
}
