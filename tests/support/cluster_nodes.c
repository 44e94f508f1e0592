/*
 * cluster_nodes.c — three nats-servers and up to three tallyd in cluster
 * mode for tests (cluster_nodes.h).
 */
#include "tests/support/cluster_nodes.h"

#include "tests/support/wire.h"

#include <check.h>
#include <stdio.h>
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
    ck_assert(count >= 1 && count <= CLUSTER_NODES_MAX);
    memset(c, 0, sizeof(*c));
    c->count = count;
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
