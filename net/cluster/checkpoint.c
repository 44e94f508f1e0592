/*
 * checkpoint.c — the state digest's chain and the checkpoints' votes
 * (checkpoint.h).
 */
#include "net/cluster/checkpoint.h"

#include <stdio.h>
#include <string.h>

static void put_be64(uint8_t b[8], uint64_t v)
{
    for (int i = 7; i >= 0; i--, v >>= 8)
        b[i] = (uint8_t)v;
}

void cluster_digest_begin(cluster_digest_step *d, const uint8_t prev[CLUSTER_HASH_BYTES],
                          uint64_t seq, const uint8_t message_hash[CLUSTER_HASH_BYTES])
{
    uint8_t b[8];
    put_be64(b, seq);
    sha256_begin(&d->sha);
    sha256_update(&d->sha, prev, CLUSTER_HASH_BYTES);
    sha256_update(&d->sha, b, sizeof(b));
    sha256_update(&d->sha, message_hash, CLUSTER_HASH_BYTES);
}

void cluster_digest_reply(cluster_digest_step *d, const void *reply, size_t len)
{
    uint8_t h[SHA256_BYTES];
    sha256_digest(reply, len, h);
    sha256_update(&d->sha, h, sizeof(h));
}

void cluster_digest_end(cluster_digest_step *d, uint64_t head_seq,
                        const uint8_t head_hash[CLUSTER_HASH_BYTES],
                        uint8_t out[CLUSTER_HASH_BYTES])
{
    uint8_t b[8];
    put_be64(b, head_seq);
    sha256_update(&d->sha, b, sizeof(b));
    sha256_update(&d->sha, head_hash, CLUSTER_HASH_BYTES);
    sha256_finish(&d->sha, out);
}

/* The round of seq; when none, the one of the oldest position (reset for
 * seq) if seq is newer than it, else NULL. */
static cluster_checkpoint_round *round_of(cluster_checkpoints *c, uint64_t seq)
{
    cluster_checkpoint_round *oldest = &c->round[0];
    for (unsigned i = 0; i < CLUSTER_CHECKPOINTS_KEPT; i++) {
        if (c->round[i].seq == seq)
            return &c->round[i];
        if (c->round[i].seq < oldest->seq)
            oldest = &c->round[i];
    }
    if (oldest->seq > seq)
        return NULL;
    memset(oldest, 0, sizeof(*oldest));
    oldest->seq = seq;
    return oldest;
}

void cluster_checkpoints_own(cluster_checkpoints *c, uint64_t seq,
                             const uint8_t digest[CLUSTER_HASH_BYTES])
{
    cluster_checkpoint_round *r = round_of(c, seq);
    if (r == NULL)
        return;
    r->own_known = true;
    memcpy(r->own, digest, CLUSTER_HASH_BYTES);
}

static void add_vote(cluster_checkpoint_round *r, const cluster_checkpoint *cp)
{
    char name[TALLY_CLUSTER_NODE_BYTES_MAX + 1];
    snprintf(name, sizeof(name), "%.*s", (int)cp->node.len, cp->node.ptr);
    unsigned i = 0;
    while (i < r->votes && strcmp(r->vote[i].node, name) != 0)
        i++;
    if (i == CLUSTER_CHECKPOINT_VOTERS_MAX)
        return; /* more nodes than counted: the first ones decide */
    if (i == r->votes)
        r->votes++;
    memcpy(r->vote[i].node, name, sizeof(name));
    memcpy(r->vote[i].digest, cp->digest, CLUSTER_HASH_BYTES);
}

static unsigned holding(const cluster_checkpoint_round *r, const uint8_t *digest)
{
    unsigned n = 0;
    for (unsigned i = 0; i < r->votes; i++)
        n += memcmp(r->vote[i].digest, digest, CLUSTER_HASH_BYTES) == 0;
    return n;
}

/* The names of the nodes whose vote is (same) or is not digest, in
 * name order (logs read the same on every node). */
static void list_nodes(const cluster_checkpoint_round *r, const uint8_t *digest, bool same,
                       char *out, size_t size)
{
    const char *names[CLUSTER_CHECKPOINT_VOTERS_MAX];
    unsigned n = 0;
    for (unsigned i = 0; i < r->votes; i++) {
        if ((memcmp(r->vote[i].digest, digest, CLUSTER_HASH_BYTES) == 0) != same)
            continue;
        unsigned at = n++;
        for (; at > 0 && strcmp(names[at - 1], r->vote[i].node) > 0; at--)
            names[at] = names[at - 1];
        names[at] = r->vote[i].node;
    }
    size_t used = 0;
    out[0] = '\0';
    for (unsigned i = 0; i < n && used < size; i++)
        used += (size_t)snprintf(out + used, size - used, "%s%s", i ? ", " : "", names[i]);
}

bool cluster_checkpoints_vote(cluster_checkpoints *c, const cluster_checkpoint *cp,
                              cluster_verdict *out)
{
    memset(out, 0, sizeof(*out));
    cluster_checkpoint_round *r = round_of(c, cp->seq);
    if (r == NULL)
        return false;
    add_vote(r, cp);
    out->seq = r->seq;
    out->nodes = r->votes;
    out->agreeing = r->own_known ? holding(r, r->own) : 0;
    const uint8_t *majority = NULL;
    for (unsigned i = 0; i < r->votes && majority == NULL; i++)
        if (2 * holding(r, r->vote[i].digest) > r->votes)
            majority = r->vote[i].digest;
    if (r->votes < 2 || majority == NULL) {
        out->kind = CLUSTER_VERDICT_UNDECIDED;
        return true;
    }
    list_nodes(r, majority, true, out->majority, sizeof(out->majority));
    list_nodes(r, majority, false, out->minority, sizeof(out->minority));
    out->report = out->minority[0] != '\0' && !r->reported;
    r->reported |= out->report;
    out->kind = !r->own_known                                              ? CLUSTER_VERDICT_UNKNOWN
                : memcmp(r->own, majority, CLUSTER_HASH_BYTES) == 0 ? CLUSTER_VERDICT_AGREES
                                                                      : CLUSTER_VERDICT_DIVERGED;
    return true;
}
