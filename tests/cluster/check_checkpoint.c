/*
 * check_checkpoint.c — the divergence check's bookkeeping
 * (net/cluster/checkpoint.h) and the server version's comparison
 * (net/cluster/server_info.h), without servers: the digest chains every
 * part of a message's step; a position's verdict waits for two nodes and
 * a majority, agrees or diverges by this node's own digest, is unknown
 * without it, names the nodes in name order, counts a node once, and
 * ignores positions older than every one kept.
 */
#include "net/cluster/checkpoint.h"
#include "net/cluster/server_info.h"

#include "common/error.h"
#include "tests/support/suite.h"
#include "tests/support/test_support.h"

#include <check.h>
#include <string.h>

static const uint8_t *digest_of(uint8_t fill)
{
    static uint8_t d[4][CLUSTER_HASH_BYTES];
    static unsigned next;
    uint8_t *out = d[next++ % 4];
    memset(out, fill, CLUSTER_HASH_BYTES);
    return out;
}

static bool vote(cluster_checkpoints *c, const char *node, uint64_t seq, uint8_t fill,
                 cluster_verdict *v)
{
    cluster_checkpoint cp = {.node = {node, strlen(node)}, .seq = seq};
    memcpy(cp.digest, digest_of(fill), CLUSTER_HASH_BYTES);
    return cluster_checkpoints_vote(c, &cp, v);
}

START_TEST(test_the_digest_covers_every_part)
{
    uint8_t prev[CLUSTER_HASH_BYTES] = {0}, msg[CLUSTER_HASH_BYTES] = {1},
            head[CLUSTER_HASH_BYTES] = {2}, out[6][CLUSTER_HASH_BYTES];
    const struct {
        uint64_t seq;
        const char *reply;
        uint64_t head_seq;
        uint8_t prev0;
    } steps[6] = {{5, "a", 9, 0}, {6, "a", 9, 0}, {5, "b", 9, 0},
                  {5, "a", 10, 0}, {5, "a", 9, 7}, {5, NULL, 9, 0}};
    for (int i = 0; i < 6; i++) {
        prev[0] = steps[i].prev0;
        cluster_digest_step d;
        cluster_digest_begin(&d, prev, steps[i].seq, msg);
        if (steps[i].reply)
            cluster_digest_reply(&d, steps[i].reply, 1);
        cluster_digest_end(&d, steps[i].head_seq, head, out[i]);
        for (int j = 0; j < i; j++)
            ck_assert_msg(memcmp(out[i], out[j], CLUSTER_HASH_BYTES) != 0, "steps %d and %d", j,
                          i);
    }
}
END_TEST

START_TEST(test_the_majority_decides)
{
    cluster_checkpoints c;
    memset(&c, 0, sizeof(c));
    cluster_verdict v;
    cluster_checkpoints_own(&c, 32, digest_of(1));
    ck_assert(vote(&c, "c", 32, 2, &v));
    ck_assert_int_eq(v.kind, CLUSTER_VERDICT_UNDECIDED); /* one node */
    ck_assert(vote(&c, "b", 32, 1, &v));
    ck_assert_int_eq(v.kind, CLUSTER_VERDICT_UNDECIDED); /* one against one */
    ck_assert(vote(&c, "a", 32, 1, &v));
    ck_assert_int_eq(v.kind, CLUSTER_VERDICT_AGREES);
    ck_assert_uint_eq(v.nodes, 3);
    ck_assert_uint_eq(v.agreeing, 2);
    ck_assert_str_eq(v.majority, "a, b");
    ck_assert_str_eq(v.minority, "c");
    ck_assert(v.report);
    ck_assert(vote(&c, "c", 32, 2, &v)); /* c again: counted once, reported once */
    ck_assert_uint_eq(v.nodes, 3);
    ck_assert(!v.report);
    /* this node's digest against two others that agree */
    cluster_checkpoints_own(&c, 64, digest_of(3));
    ck_assert(vote(&c, "b", 64, 4, &v));
    ck_assert(vote(&c, "a", 64, 4, &v));
    ck_assert_int_eq(v.kind, CLUSTER_VERDICT_DIVERGED);
    ck_assert_uint_eq(v.agreeing, 0);
    /* no own digest of the position: never diverged */
    ck_assert(vote(&c, "a", 96, 5, &v));
    ck_assert(vote(&c, "b", 96, 5, &v));
    ck_assert_int_eq(v.kind, CLUSTER_VERDICT_UNKNOWN);
}
END_TEST

START_TEST(test_old_positions_are_let_go)
{
    cluster_checkpoints c;
    memset(&c, 0, sizeof(c));
    cluster_verdict v;
    for (uint64_t k = 1; k <= CLUSTER_CHECKPOINTS_KEPT + 1; k++)
        cluster_checkpoints_own(&c, 32 * k, digest_of(1));
    ck_assert(!vote(&c, "a", 32, 1, &v)); /* the oldest made room */
    ck_assert(vote(&c, "a", 64, 1, &v));
    ck_assert(vote(&c, "b", 64, 1, &v));
    ck_assert_int_eq(v.kind, CLUSTER_VERDICT_AGREES);
}
END_TEST

START_TEST(test_versions_compare)
{
    ck_assert_int_lt(cluster_version_compare("2.9.10", "2.10.0"), 0);
    ck_assert_int_gt(cluster_version_compare("2.12.2", "2.12.1"), 0);
    ck_assert_int_eq(cluster_version_compare("2.10", "2.10.0"), 0);
    ck_assert_int_lt(cluster_version_compare("2.12.1-beta", "2.12.2"), 0);
    char version[CLUSTER_SERVER_VERSION_BYTES];
    ck_assert_int_eq(cluster_server_version("nats://u:p@", 100, version, sizeof(version)),
                     TALLY_invalid_argument);
}
END_TEST

int main(void)
{
    const test_row rows[] = {
        {"digest", test_the_digest_covers_every_part, 10},
        {"votes", test_the_majority_decides, 10},
        {"votes", test_old_positions_are_let_go, 10},
        {"version", test_versions_compare, 10},
    };
    return test_run_suite(test_suite_of_rows("checkpoint", TEST_ROWS(rows)));
}
