/*
 * invariants_pipe.c — the log walk's events, decoded ahead (see
 * invariants_audit.h, audit_decode_log).
 *
 * Decoding an event (the bounded msgpack check, the unpack, the hash) is
 * about half of a reconciliation; the fold, the chain and the causation
 * lookups are the other half, and must see the events in seq order. So a
 * decoder thread reads the log in a read transaction of its own and
 * decodes blocks of events into a ring; the caller's thread takes the
 * blocks in order and checks them. The two transactions must see the same
 * snapshot (the same LMDB transaction id): a copy of a store always does;
 * next to a live tallyd a commit may fall between the two begins, and after
 * a few tries the walk decodes in the caller's thread instead.
 *
 * The decoded events point into copies of their bytes in their block's
 * zone: log_read's bytes last only for its call.
 */
#include "ledger/invariants_audit.h"

#include "common/error.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#define PIPE_BLOCK_EVENTS 512
#define PIPE_BLOCKS 4
#define SNAPSHOT_TRIES 8
/* A block's events share a zone, cleared when the block is free again: a
 * few allocations per block instead of one per event (and none freed by
 * the other thread, which glibc makes pay with a lock). */
#define BLOCK_ZONE_CHUNK (256 * 1024)
#define EVENT_ZONE_CHUNK (16 * 1024)

typedef struct pipe_block {
    audit_decoded_event ev[PIPE_BLOCK_EVENTS];
    msgpack_zone *zone;
    size_t n;
    bool last; /* the decoder's final block (n may be 0) */
    int rc;    /* with last: the decoder's end (TALLY_ok or a fault) */
} pipe_block;

typedef struct log_pipe {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    pipe_block blocks[PIPE_BLOCKS];
    uint64_t produced, consumed; /* blocks handed over and taken back */
    bool stop;                   /* the walk ended early */
    store_txn t;                 /* the decoder's */
} log_pipe;

static void decode_into(audit_decoded_event *d, msgpack_zone *zone, uint64_t seq,
                        const void *bytes, size_t len)
{
    d->seq = seq;
    d->rc = log_event_decode_in(bytes, len, zone, &d->root, &d->ev);
}

/* ---- in turn, in the caller's thread ---- */

typedef struct serial_walk {
    int (*fn)(audit_decoded_event *d, void *ctx);
    void *ctx;
    msgpack_zone *zone;
} serial_walk;

static int serial_one(uint64_t seq, const void *bytes, size_t len, void *ctx)
{
    serial_walk *s = ctx;
    audit_decoded_event d;
    msgpack_zone_clear(s->zone);
    decode_into(&d, s->zone, seq, bytes, len);
    return s->fn(&d, s->ctx);
}

static int serial_walk_log(audit *a, int (*fn)(audit_decoded_event *d, void *ctx), void *ctx)
{
    serial_walk s = {fn, ctx, msgpack_zone_new(EVENT_ZONE_CHUNK)};
    if (s.zone == NULL)
        return TALLY_out_of_memory;
    int rc = log_read(a->t, 1, UINT64_MAX, serial_one, &s);
    msgpack_zone_free(s.zone);
    return rc;
}

/* ---- the decoder thread ---- */

/* Hand the current block over; wait for a free one. false: stop. */
static bool pipe_publish(log_pipe *p)
{
    pthread_mutex_lock(&p->mu);
    p->produced++;
    pthread_cond_broadcast(&p->cv);
    while (!p->stop && p->produced - p->consumed == PIPE_BLOCKS)
        pthread_cond_wait(&p->cv, &p->mu);
    bool go_on = !p->stop;
    pthread_mutex_unlock(&p->mu);
    if (go_on) {
        pipe_block *b = &p->blocks[p->produced % PIPE_BLOCKS];
        b->n = 0;
        b->last = false;
        msgpack_zone_clear(b->zone);
    }
    return go_on;
}

static int pipe_decode_one(uint64_t seq, const void *bytes, size_t len, void *ctx)
{
    log_pipe *p = ctx;
    pipe_block *b = &p->blocks[p->produced % PIPE_BLOCKS];
    /* log_read's bytes last for the call (a short stored event is
     * expanded into one buffer, log/log.h): the block keeps a copy. */
    void *kept = msgpack_zone_malloc(b->zone, len);
    if (kept == NULL)
        return TALLY_out_of_memory;
    memcpy(kept, bytes, len);
    decode_into(&b->ev[b->n++], b->zone, seq, kept, len);
    if (b->n == PIPE_BLOCK_EVENTS && !pipe_publish(p))
        return TALLY_shutting_down;
    return TALLY_ok;
}

static void *pipe_decoder(void *arg)
{
    log_pipe *p = arg;
    int rc = log_read(&p->t, 1, UINT64_MAX, pipe_decode_one, p);
    pthread_mutex_lock(&p->mu);
    if (!p->stop) {
        pipe_block *b = &p->blocks[p->produced % PIPE_BLOCKS];
        b->last = true;
        b->rc = rc;
        p->produced++;
        pthread_cond_broadcast(&p->cv);
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

/* ---- the caller's side ---- */

/* A read transaction on the snapshot of a->t, or false. */
static bool same_snapshot(audit *a, store_txn *out)
{
    if (!a->t->read_only)
        return false;
    for (int i = 0; i < SNAPSHOT_TRIES; i++) {
        if (store_txn_begin(a->t->st, NULL, true, out) != TALLY_ok)
            return false;
        if (mdb_txn_id(out->txn) == mdb_txn_id(a->t->txn))
            return true;
        store_txn_abort(out);
    }
    return false;
}

static int pipe_walk(log_pipe *p, int (*fn)(audit_decoded_event *d, void *ctx), void *ctx)
{
    int rc = TALLY_ok;
    for (;;) {
        pthread_mutex_lock(&p->mu);
        while (p->consumed == p->produced)
            pthread_cond_wait(&p->cv, &p->mu);
        pthread_mutex_unlock(&p->mu);
        pipe_block *b = &p->blocks[p->consumed % PIPE_BLOCKS];
        for (size_t i = 0; i < b->n && rc == TALLY_ok; i++)
            rc = fn(&b->ev[i], ctx);
        bool last = b->last;
        if (last && rc == TALLY_ok)
            rc = b->rc;
        pthread_mutex_lock(&p->mu);
        b->n = 0; /* free for the decoder (which clears its zone) */
        p->consumed++;
        p->stop = p->stop || rc != TALLY_ok;
        pthread_cond_broadcast(&p->cv);
        pthread_mutex_unlock(&p->mu);
        if (last || rc != TALLY_ok)
            return rc;
    }
}

static void pipe_free(log_pipe *p)
{
    for (int i = 0; i < PIPE_BLOCKS; i++)
        if (p->blocks[i].zone)
            msgpack_zone_free(p->blocks[i].zone);
    free(p);
}

int audit_decode_log(audit *a, int (*fn)(audit_decoded_event *d, void *ctx), void *ctx)
{
    log_pipe *p = calloc(1, sizeof(*p));
    bool zones = p != NULL;
    for (int i = 0; zones && i < PIPE_BLOCKS; i++)
        zones = (p->blocks[i].zone = msgpack_zone_new(BLOCK_ZONE_CHUNK)) != NULL;
    pthread_t thread;
    if (!zones || !same_snapshot(a, &p->t)) {
        if (p)
            pipe_free(p);
        return serial_walk_log(a, fn, ctx);
    }
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->cv, NULL);
    int rc;
    if (pthread_create(&thread, NULL, pipe_decoder, p) != 0) {
        rc = serial_walk_log(a, fn, ctx);
    } else {
        rc = pipe_walk(p, fn, ctx);
        pthread_join(thread, NULL);
    }
    store_txn_abort(&p->t);
    pthread_cond_destroy(&p->cv);
    pthread_mutex_destroy(&p->mu);
    pipe_free(p);
    return rc;
}
