/*
 * tls_reload.c — SIGHUP: tallyd reads its --tls-* files again. NNG 1.5.2
 * takes a new TLS configuration on a running tls+tcp:// listener
 * (NNG_OPT_TLS_CONFIG): connections accepted from then on use it, the
 * open ones keep the session they have. Every configuration stays held by
 * tallyd until exit (a few KiB per reload), so one that a listener was
 * just handing to a new connection is never freed under it: the replaced
 * ones are kept in srv->sp->tls_held, where LeakSanitizer finds them at exit
 * too (a connection NNG 1.5.2 lost still pointing at one showed it as
 * leaked once the only pointer tallyd kept was overwritten). The HTTPS face
 * (libmicrohttpd) keeps the certificate it started with.
 */
#include "net/sp/sp.h"

#include "common/error.h"
#include "common/limits.h"
#include "common/tls_config.h"

#include <stdlib.h>
#include <string.h>

static int set_config(nng_listener l, const char *url, nng_tls_config *cfg)
{
    int rv = nng_listener_set_ptr(l, NNG_OPT_TLS_CONFIG, cfg);
    if (rv != 0)
        net_log(NET_LOG_ERROR, "%s: the new TLS configuration was refused: %s (it keeps the "
                "old one)", url, nng_strerror(rv));
    return rv;
}

void tls_reload(server *srv, bool https)
{
    const net_server_options *opt = srv->opt;
    if (srv->sp->tls == NULL || opt->tls_files == NULL) {
        net_log(NET_LOG_INFO, "SIGHUP: no tls+tcp:// endpoint, no TLS files to read again");
        return;
    }
    char why[TALLY_PATH_BYTES_MAX + 300];
    tls_pem pem;
    nng_tls_config *cfg = NULL;
    int rc = tls_pem_load(opt->tls_files, &pem, why, sizeof(why));
    if (rc == TALLY_ok)
        rc = tls_config_server(&pem, opt->tls_client_auth, &cfg, why, sizeof(why));
    tls_pem_free(&pem); /* NNG keeps its own parsed copy */
    if (rc != TALLY_ok) {
        net_log(NET_LOG_ERROR, "SIGHUP: TLS files not reloaded, the old certificates stay: %s",
                why);
        return;
    }
    unsigned failed = 0;
    for (unsigned i = 0; i < srv->sp->lis.count; i++)
        if (tls_url_is_tls(srv->sp->lis.url[i]) && !srv->sp->lis.down[i])
            failed += set_config(srv->sp->lis.l[i], srv->sp->lis.url[i], cfg) != 0;
    if (srv->sp->has_pub && tls_url_is_tls(srv->sp->pub_url) && !srv->sp->pub_down)
        failed += set_config(srv->sp->pub_listener, srv->sp->pub_url, cfg) != 0;
    nng_tls_config **held =
        realloc(srv->sp->tls_held, (srv->sp->tls_held_count + 1) * sizeof(*srv->sp->tls_held));
    if (held != NULL) { /* else the old one is only unreferenced: nothing is freed under NNG */
        held[srv->sp->tls_held_count++] = srv->sp->tls;
        srv->sp->tls_held = held;
    }
    srv->sp->tls = cfg; /* a listener made again by the watchdog takes it too */
    net_log(failed ? NET_LOG_WARN : NET_LOG_INFO, "SIGHUP: TLS certificates reloaded for new "
            "tls+tcp:// connections%s%s", failed ? " (not on every listener: see above)" : "",
            https ? "; HTTPS keeps its certificate until a restart" : "");
}
