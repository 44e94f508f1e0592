/*
 * tallyd_tls.c — see tallyd_tls.h.
 */
#include "tests/support/tallyd_tls.h"

#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

void tallyd_tls_make_certs(const char *dir)
{
    const char *src = getenv("TALLY_SRCDIR");
    char cmd[1200];
    snprintf(cmd, sizeof(cmd), "sh '%s/tests/support/make_test_certs.sh' '%s'",
             src && *src ? src : ".", dir);
    ck_assert_msg(system(cmd) == 0, "%s failed (openssl missing?)", cmd);
}

static bool tls_mode(const tallyd_proc *p)
{
    const char *env = getenv("TALLY_TEST_TLS");
    return p->tls || (env && *env && strcmp(env, "0") != 0);
}

/* $TALLY_TEST_TCP: "epoll", "nng" (the --tcp-engine), "1" the default
 * engine; NULL when off. */
static const char *tcp_mode(void)
{
    const char *env = getenv("TALLY_TEST_TCP");
    return env && *env && strcmp(env, "0") != 0 ? env : NULL;
}

void tallyd_tls_prepare(tallyd_proc *p)
{
    if (!tls_mode(p)) {
        if (tcp_mode()) { /* requests on tcp://, the ipc:// URL kept beside it */
            snprintf(p->plain_url, sizeof(p->plain_url), "%s", p->url);
            snprintf(p->url, sizeof(p->url), "tcp://127.0.0.1:0"); /* the ready file says */
        }
        return;
    }
    const char *env = getenv("TALLY_TEST_TLS");
    if (env && env[0] == '/') {
        snprintf(p->tls_dir, sizeof(p->tls_dir), "%s", env);
    } else {
        snprintf(p->tls_dir, sizeof(p->tls_dir), "%s/tls", p->dir);
        tallyd_tls_make_certs(p->tls_dir);
    }
    snprintf(p->plain_url, sizeof(p->plain_url), "%s", p->url);
    snprintf(p->url, sizeof(p->url), "tls+tcp://127.0.0.1:0"); /* the ready file says */
    snprintf(p->pub_url, sizeof(p->pub_url), "tls+tcp://127.0.0.1:0");
    tallyd_tls_export(p);
}

void tallyd_tls_export(const tallyd_proc *p)
{
    if (!p->tls_dir[0])
        return;
    static const char *const vars[][2] = {{"TALLY_TLS_CA", "ca.pem"},
                                          {"TALLY_TLS_CERT", "client.pem"},
                                          {"TALLY_TLS_KEY", "client.key"}};
    for (size_t i = 0; i < 3; i++) {
        char path[400];
        snprintf(path, sizeof(path), "%s/%s", p->tls_dir, vars[i][1]);
        setenv(vars[i][0], path, 1);
    }
}

int tallyd_tls_args(const tallyd_proc *p, const char **argv)
{
    if (!p->tls_dir[0] && p->plain_url[0]) { /* TCP mode */
        const char *engine = tcp_mode();
        int n = 0;
        argv[n++] = "--listen";
        argv[n++] = p->plain_url;
        if (engine && strcmp(engine, "1") != 0) {
            argv[n++] = "--tcp-engine";
            argv[n++] = engine;
        }
        return n;
    }
    if (!p->tls_dir[0])
        return 0;
    static __thread char cert[400], key[400], ca[400];
    snprintf(cert, sizeof(cert), "%s/server.pem", p->tls_dir);
    snprintf(key, sizeof(key), "%s/server.key", p->tls_dir);
    snprintf(ca, sizeof(ca), "%s/ca.pem", p->tls_dir);
    const char *args[] = {"--listen", p->plain_url, "--tls-cert", cert, "--tls-key", key,
                          "--tls-ca", ca, "--tls-client-auth", "required"};
    _Static_assert(sizeof(args) / sizeof(args[0]) <= TALLYD_TLS_ARGS_MAX, "room for them");
    for (size_t i = 0; i < sizeof(args) / sizeof(args[0]); i++)
        argv[i] = args[i];
    return (int)(sizeof(args) / sizeof(args[0]));
}
