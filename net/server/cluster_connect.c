/*
 * cluster_connect.c — the connection to the NATS servers and the stream
 * (cluster_connect.h).
 */
#include "net/server/cluster_connect.h"

#include "common/clock.h"
#include "common/error.h"
#include "common/file_mode.h"
#include "common/logging.h"
#include "net/cluster/server_info.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define PASSWORD_BYTES_MAX 256
#define VERSION_WAIT_MS 2000

/* nats-server versions known to lose acknowledged writes (docs/CLUSTER.md,
 * "About JetStream's own durability"): a server below `below` gets the
 * warning. Whether a server of 2.10 or later syncs every write
 * (jetstream { sync_interval: always }) is not told to clients: only its
 * monitoring port shows it, which tallyd does not know. */
static const struct {
    const char *below, *why;
} version_warnings[] = {
    {"2.10.0", "it cannot sync every write to disk (sync_interval: always exists from 2.10): "
               "an acknowledged write may live in memory only until its next sync, every 2 "
               "minutes by default; and the replicas of a stream drift apart under server "
               "faults (nats-server issue 4174), which stops the cluster's writes until that "
               "server is rebuilt: use nats-server 2.10 or later"},
    {"2.12.2", "Jepsen's analysis of NATS 2.12.1 (December 2025) found acknowledged writes "
               "lost after coordinated crashes of the servers in versions up to 2.12.1"},
};

/* The connection's secrets: the password read from its file, the
 * credentials file and the TLS key checked private; why says what is
 * wrong. */
static bool read_secrets(const net_server_options *o, cluster_stream_config *cfg,
                         char *password, size_t password_size, char *why, size_t why_size)
{
    if (o->cluster_password_file &&
        !file_secret_read(o->cluster_password_file, "--cluster-password-file", password,
                          password_size, why, why_size))
        return false;
    if (o->cluster_creds && !file_private_check(o->cluster_creds, "--cluster-creds file", why,
                                                why_size))
        return false;
    if (o->cluster_tls_key && !file_private_check(o->cluster_tls_key, "--cluster-tls-key", why,
                                                  why_size))
        return false;
    cfg->creds_file = o->cluster_creds;
    cfg->user = o->cluster_user;
    cfg->password = o->cluster_password_file ? password : NULL;
    cfg->tls_ca_file = o->cluster_tls_ca;
    cfg->tls_cert_file = o->cluster_tls_cert;
    cfg->tls_key_file = o->cluster_tls_key;
    return true;
}

/* Open the stream, waiting while JetStream does not answer. */
static int open_with(const cluster_stream_config *cfg, cluster_stream **out)
{
    char why[CLUSTER_WHY_BYTES] = "";
    int64_t until = clock_mono_ms() + TALLY_CLUSTER_CONNECT_MS_MAX;
    for (;;) {
        int rc = cluster_stream_open(out, cfg, why, sizeof(why));
        if (rc == TALLY_ok)
            return rc;
        if ((rc != TALLY_unreachable && rc != TALLY_timed_out) || clock_mono_ms() >= until) {
            net_log(NET_LOG_ERROR, "cluster: refusing to start: %s",
                    why[0] ? why : tally_strerror(rc));
            return rc;
        }
        net_log(NET_LOG_INFO, "cluster: waiting for JetStream: %s", why[0] ? why : "no answer");
        usleep(CLUSTER_CONNECT_RETRY_US);
    }
}

/* A warning per server of urls whose version is known to lose
 * acknowledged writes; a server that does not answer is skipped (the
 * connection has found one that does). */
static void warn_of_versions(const char *const *urls, size_t count)
{
    for (size_t i = 0; i < count; i++) {
        char version[CLUSTER_SERVER_VERSION_BYTES];
        if (cluster_server_version(urls[i], VERSION_WAIT_MS, version, sizeof(version)) !=
            TALLY_ok)
            continue;
        const char *at = strrchr(urls[i], '@'); /* never a password in the log */
        if (at == NULL && (at = strstr(urls[i], "://")) != NULL)
            at += 2;
        for (size_t k = 0; k < sizeof(version_warnings) / sizeof(version_warnings[0]); k++)
            if (cluster_version_compare(version, version_warnings[k].below) < 0)
                net_log(NET_LOG_WARN, "cluster: nats-server %s at %s: %s (docs/CLUSTER.md, "
                        "\"About JetStream's own durability\")", version, at ? at + 1 : urls[i],
                        version_warnings[k].why);
    }
}

int cluster_connect(const net_server_options *o, cluster_stream **out)
{
    *out = NULL;
    char *text = strdup(o->cluster_urls);
    if (text == NULL)
        return TALLY_out_of_memory;
    const char *urls[TALLY_CLUSTER_URLS_MAX];
    size_t count = 0;
    char *save = NULL;
    for (char *u = strtok_r(text, ",", &save); u && count < TALLY_CLUSTER_URLS_MAX;
         u = strtok_r(NULL, ",", &save))
        urls[count++] = u;
    cluster_stream_config cfg = {.urls = urls, .url_count = count, .name = o->cluster_stream,
                                 .replicas = o->cluster_replicas};
    char why[CLUSTER_WHY_BYTES] = "", password[PASSWORD_BYTES_MAX];
    int rc = TALLY_invalid_argument;
    if (read_secrets(o, &cfg, password, sizeof(password), why, sizeof(why)))
        rc = open_with(&cfg, out);
    else
        net_log(NET_LOG_ERROR, "cluster: refusing to start: %s", why);
    explicit_bzero(password, sizeof(password));
    if (rc == TALLY_ok)
        warn_of_versions(urls, count);
    free(text); /* the stream keeps no URL past its open */
    return rc;
}
