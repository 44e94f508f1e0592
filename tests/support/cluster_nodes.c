/*
 * cluster_nodes.c — three nats-servers and up to three tallyd in cluster
 * mode for tests (cluster_nodes.h).
 */
#include "tests/support/cluster_nodes.h"

#include "tests/support/run.h"
#include "tests/support/wire.h"

#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The base options (10 words) and the test's own, NULL-terminated. */
static void node_argv(cluster_nodes *c, int i, const char **argv, size_t size)
{
    const char *base[] = {"--cluster", c->urls, "--node", c->name[i], "--cluster-tick-ms", "200",
                          "--http", "http://127.0.0.1:0"};
    size_t n = 0;
    for (size_t k = 0; k < sizeof(base) / sizeof(base[0]); k++)
        argv[n++] = base[k];
    for (int k = 0; c->args[i][k] && n + 1 < size; k++)
        argv[n++] = c->args[i][k];
    argv[n] = NULL;
}

void cluster_nodes_init(cluster_nodes *c, int count)
{
    cluster_nodes_init_with_auth(c, count, NULL);
}

void cluster_nodes_init_with_auth(cluster_nodes *c, int count, const nats_cluster_auth *auth)
{
    ck_assert(count >= 1 && count <= CLUSTER_NODES_MAX);
    memset(c, 0, sizeof(*c));
    c->count = count;
    if (auth)
        nats_cluster_start_with_auth(&c->nats, auth);
    else
        nats_cluster_start(&c->nats);
    size_t used = 0;
    for (int i = 0; i < NATS_CLUSTER_NODES; i++)
        used += (size_t)snprintf(c->urls + used, sizeof(c->urls) - used, "%s%s", i ? "," : "",
                                 c->nats.urls[i]);
    for (int i = 0; i < count; i++)
        snprintf(c->name[i], sizeof(c->name[i]), "%c", 'a' + i);
}

void cluster_nodes_start(cluster_nodes *c, int i)
{
    const char *argv[TALLYD_EXTRA_ARGS_MAX];
    node_argv(c, i, argv, TALLYD_EXTRA_ARGS_MAX);
    wire_server_start(&c->node[i], &c->client[i], argv);
    /* one request answered: the client's connection is up (NNG 1.5.2 never
     * frees a dialer closed while it is still connecting; as in
     * tests/support/cluster_fixture.c) */
    wire_reply r;
    wire_call(c->client[i], &r, "stats", "");
    wire_expect(&r, "ok");
    wire_done(&r);
}

void cluster_nodes_restart(cluster_nodes *c, int i)
{
    const char *argv[TALLYD_EXTRA_ARGS_MAX];
    node_argv(c, i, argv, TALLYD_EXTRA_ARGS_MAX);
    wire_server_restart(&c->node[i], &c->client[i], argv);
}

void cluster_nodes_stop(cluster_nodes *c, int i)
{
    tally_client_close(c->client[i]);
    c->client[i] = NULL;
    ck_assert_int_eq(tallyd_stop(&c->node[i]), 0);
}

void cluster_nodes_down(cluster_nodes *c)
{
    for (int i = 0; i < c->count; i++) {
        if (c->client[i])
            cluster_nodes_stop(c, i);
        tallyd_cleanup(&c->node[i]);
    }
    nats_cluster_stop(&c->nats);
}

int cluster_nodes_assert_refused_start(const char *dir, const char *data_dir,
                                       const char *const *options, const char *expect)
{
    char data[400], listen[400];
    snprintf(data, sizeof(data), "%s", data_dir ? data_dir : "");
    if (data_dir == NULL)
        snprintf(data, sizeof(data), "%s/refused-data", dir);
    snprintf(listen, sizeof(listen), "ipc://%s/refused.sock", dir);
    const char *argv[24] = {tallyd_program("tallyd"), "--data", data, "--listen", listen,
                            "--publish", "none", "--http", "none"};
    size_t n = 9;
    for (size_t k = 0; options[k] && n + 1 < sizeof(argv) / sizeof(argv[0]); k++)
        argv[n++] = options[k];
    argv[n] = NULL;
    char *out = NULL, *err = NULL;
    int code = test_run(argv, NULL, &out, &err);
    ck_assert_msg(code != 0 && strstr(err, expect), "exit %d, wanted \"%s\": %s", code, expect,
                  err);
    free(out);
    free(err);
    return code;
}
