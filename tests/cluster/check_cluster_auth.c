/*
 * check_cluster_auth.c — cluster mode's login to NATS servers that require
 * it (docs/CLUSTER.md, "Starting a cluster": --cluster-tls-*,
 * --cluster-creds), on three real nats-servers in one JetStream cluster
 * (tests/support/nats_cluster.h) and three tallyd:
 *
 * - servers that require TLS (--tls with a certificate that the test's CA,
 *   made by openssl in the test's temp dir, signed): a node without TLS
 *   options (cnats then tries TLS with no CA to trust), or trusting
 *   another CA, refuses to start (exit 1, "cannot connect to NATS" and
 *   the TLS handshake's error); three nodes with
 *   --cluster-tls-ca start, and a write taken by one is read on another
 *   with its cluster_seq as min_seq;
 * - servers that verify clients (--tlsverify): a node with the CA and no
 *   client certificate, or a certificate of another CA, refuses to start;
 *   a client key others may read is refused before any server is asked;
 *   three nodes with --cluster-tls-cert and --cluster-tls-key start and
 *   agree;
 * - servers in operator mode (an operator, `resolver: MEMORY`,
 *   `resolver_preload` with the accounts: tests/support/nats_creds.py makes
 *   the nkeys and JWTs): a node without credentials, or with the
 *   credentials of a user of an account the operator never signed,
 *   refuses to start; a credentials file others may read is refused; three
 *   nodes with --cluster-creds start and agree.
 *
 * Without nats-server installed the program says so and exits 77.
 */
#include "config.h"

#include "tests/support/cluster_nodes.h"
#include "tests/support/run.h"
#include "tests/support/suite.h"
#include "tests/support/tallyd_tls.h"
#include "tests/support/test_support.h"
#include "tests/support/wire.h"

#include <check.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define TEST_TIMEOUT_S 600
#define NODES 3
#define PATH_BYTES 400

/* The test's own temp dir (certificates, credentials), removed at the end. */
typedef struct files {
    char dir[256];
    char ca[PATH_BYTES], other_ca[PATH_BYTES], server_cert[PATH_BYTES], server_key[PATH_BYTES];
    char client_cert[PATH_BYTES], client_key[PATH_BYTES];
    char other_cert[PATH_BYTES], other_key[PATH_BYTES], open_key[PATH_BYTES];
    char conf[PATH_BYTES], creds[PATH_BYTES], stranger[PATH_BYTES], open_creds[PATH_BYTES];
} files;

static void files_path(const files *f, char *out, const char *name)
{
    snprintf(out, PATH_BYTES, "%s/%s", f->dir, name);
}

static void files_make(files *f)
{
    memset(f, 0, sizeof(*f));
    const char *tmp = getenv("TMPDIR");
    snprintf(f->dir, sizeof(f->dir), "%s/cluster-auth-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    ck_assert_ptr_nonnull(mkdtemp(f->dir));
    tallyd_tls_make_certs(f->dir);
    struct {
        char *path;
        const char *name;
    } names[] = {
        {f->ca, "ca.pem"},
        {f->other_ca, "other-ca.pem"},
        {f->server_cert, "server.pem"},
        {f->server_key, "server.key"},
        {f->client_cert, "client.pem"},
        {f->client_key, "client.key"},
        {f->other_cert, "other-client.pem"},
        {f->other_key, "other-client.key"},
        {f->open_key, "open-client.key"},
        {f->conf, "operator.conf"},
        {f->creds, "user.creds"},
        {f->stranger, "stranger.creds"},
        {f->open_creds, "open.creds"},
    };
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
        files_path(f, names[i].path, names[i].name);
}

/* A copy of from at to, of mode. */
static void copy_with_mode(const char *from, const char *to, mode_t mode)
{
    char cmd[2 * PATH_BYTES + 16];
    snprintf(cmd, sizeof(cmd), "cp '%s' '%s'", from, to);
    ck_assert_int_eq(system(cmd), 0);
    ck_assert_int_eq(chmod(to, mode), 0);
}

/* The operator, its accounts and the users' credentials files (python3
 * with its cryptography module: Debian's /usr/bin/python3). */
static void creds_make(const files *f)
{
    const char *src = getenv("TALLY_SRCDIR");
    char script[PATH_BYTES];
    snprintf(script, sizeof(script), "%s/tests/support/nats_creds.py", src && *src ? src : ".");
    const char *argv[] = {"/usr/bin/python3", script, f->dir, NULL};
    char *out = NULL, *err = NULL;
    int code = test_run(argv, NULL, &out, &err);
    ck_assert_msg(code == 0, "nats_creds.py: exit %d: %s", code, err);
    free(out);
    free(err);
    copy_with_mode(f->creds, f->open_creds, 0644);
}

/* A refused start: tallyd exits 1 (a refusal to start in cluster mode),
 * its stderr holding each of expect (NULL-terminated). */
static void refused(const nats_cluster *nats, const char *const *options,
                    const char *const *expect)
{
    char urls[NATS_CLUSTER_NODES * 64];
    snprintf(urls, sizeof(urls), "%s,%s,%s", nats->node[0].plain_url, nats->node[1].plain_url,
             nats->node[2].plain_url);
    const char *argv[16] = {"--cluster", urls, "--node", "a"};
    size_t n = 4;
    for (size_t k = 0; options[k] && n + 1 < sizeof(argv) / sizeof(argv[0]); k++)
        argv[n++] = options[k];
    argv[n] = NULL;
    for (size_t k = 0; expect[k]; k++) {
        int code = cluster_nodes_assert_refused_start(nats->dir, NULL, argv, expect[k]);
        ck_assert_msg(code == 1, "a refused start exits 1, not %d (wanted \"%s\")", code,
                      expect[k]);
    }
}

/* account_open of account id on node i; its cluster_seq. */
static uint64_t open_on(cluster_nodes *c, int i, uint64_t id)
{
    wire_reply r;
    char key[32];
    snprintf(key, sizeof(key), "open-%" PRIu64, id);
    wire_call(c->client[i], &r, "account_open", "ssuuu", "consumer", "t", "key", key, "id", id,
              "ledger", (uint64_t)1, "code", (uint64_t)1);
    wire_expect(&r, "ok");
    uint64_t seq = wire_u64(r.map, "cluster_seq");
    wire_done(&r);
    return seq;
}

static void read_on(cluster_nodes *c, int i, uint64_t id, uint64_t min_seq)
{
    wire_reply r;
    wire_call(c->client[i], &r, "account_get", "uu", "id", id, "min_seq", min_seq);
    wire_expect(&r, "ok");
    wire_done(&r);
}

/* Three nodes of c, each with args (NULL-terminated, at most
 * CLUSTER_NODE_ARGS_MAX words): every node takes a write that the next
 * node reads with its cluster_seq. Then c is taken down. */
static void three_nodes_agree(cluster_nodes *c, const char *const *args)
{
    for (int i = 0; i < NODES; i++) {
        for (int k = 0; args[k]; k++)
            c->args[i][k] = args[k];
        cluster_nodes_start(c, i);
    }
    for (int i = 0; i < NODES; i++) {
        uint64_t seq = open_on(c, i, (uint64_t)i + 1);
        read_on(c, (i + 1) % NODES, (uint64_t)i + 1, seq);
    }
    cluster_nodes_down(c);
}

/* A start that must be refused: its options and what stderr must say. */
typedef struct refusal {
    const char *options[8];
    const char *expect[3];
} refusal;

/* On servers that require auth: each of refusals refused, then three
 * nodes with right agree; f's files removed. */
static void refusals_then_agree(files *f, const nats_cluster_auth *auth, const refusal *refusals,
                                size_t count, const char *const *right)
{
    cluster_nodes c;
    cluster_nodes_init_with_auth(&c, NODES, auth);
    for (size_t i = 0; i < count; i++)
        refused(&c.nats, refusals[i].options, refusals[i].expect);
    three_nodes_agree(&c, right);
    test_remove_dir(f->dir);
}

START_TEST(test_tls_with_the_servers_ca)
{
    files f;
    files_make(&f);
    nats_cluster_auth auth = {.tls_cert = f.server_cert, .tls_key = f.server_key,
                              .client_ca = f.ca};
    const refusal refusals[] = {
        /* cnats goes to TLS when the server requires it, and then trusts no CA */
        {{NULL}, {"cannot connect to NATS", "unable to get local issuer", NULL}},
        {{"--cluster-tls-ca", f.other_ca, NULL}, {"cannot connect to NATS", "SSL handshake error", NULL}},
    };
    const char *right[] = {"--cluster-tls-ca", f.ca, NULL};
    refusals_then_agree(&f, &auth, refusals, sizeof(refusals) / sizeof(refusals[0]), right);
}
END_TEST

START_TEST(test_mutual_tls)
{
    files f;
    files_make(&f);
    copy_with_mode(f.client_key, f.open_key, 0644);
    nats_cluster_auth auth = {.tls_cert = f.server_cert, .tls_key = f.server_key,
                              .tls_verify_ca = f.ca, .client_ca = f.ca,
                              .client_cert = f.client_cert, .client_key = f.client_key};
    const refusal refusals[] = {
        {{"--cluster-tls-ca", f.ca, NULL}, {"cannot connect to NATS", NULL}},
        {{"--cluster-tls-ca", f.ca, "--cluster-tls-cert", f.other_cert, "--cluster-tls-key",
          f.other_key, NULL}, {"cannot connect to NATS", NULL}},
        {{"--cluster-tls-ca", f.ca, "--cluster-tls-cert", f.client_cert, "--cluster-tls-key",
          f.open_key, NULL}, {"--cluster-tls-key", "group or others may read it", NULL}},
    };
    const char *right[] = {"--cluster-tls-ca", f.ca, "--cluster-tls-cert", f.client_cert,
                           "--cluster-tls-key", f.client_key, NULL};
    refusals_then_agree(&f, &auth, refusals, sizeof(refusals) / sizeof(refusals[0]), right);
}
END_TEST

START_TEST(test_credentials_of_an_operator)
{
    files f;
    files_make(&f);
    creds_make(&f);
    nats_cluster_auth auth = {.config = f.conf, .client_creds = f.creds};
    const refusal refusals[] = {
        {{NULL}, {"cannot connect to NATS", NULL}},
        {{"--cluster-creds", f.stranger, NULL}, {"cannot connect to NATS", NULL}},
        {{"--cluster-creds", f.open_creds, NULL},
         {"--cluster-creds file", "group or others may read it", NULL}},
    };
    const char *right[] = {"--cluster-creds", f.creds, NULL};
    refusals_then_agree(&f, &auth, refusals, sizeof(refusals) / sizeof(refusals[0]), right);
}
END_TEST

int main(void)
{
    if (nats_cluster_server_path() == NULL) {
        fprintf(stderr, "check_cluster_auth: skipped: $NATS_SERVER is not an executable "
                        "nats-server (setup.sh installs Debian's)\n");
        return 77;
    }
    const test_row rows[] = {
        {"tls", test_tls_with_the_servers_ca, TEST_TIMEOUT_S},
        {"tls", test_mutual_tls, TEST_TIMEOUT_S},
        {"creds", test_credentials_of_an_operator, TEST_TIMEOUT_S},
    };
    return test_run_suite(test_suite_of_rows("cluster_auth", TEST_ROWS(rows)));
}
