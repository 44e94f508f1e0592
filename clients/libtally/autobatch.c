/*
 * autobatch.c — auto-batching of single writes (tally.h, "auto-batching"),
 * as TigerBeetle's clients do: a single write (tally_transfer, ...,
 * tally_revoke) on a client that already has AUTOBATCH_IN_FLIGHT_MAX
 * requests of single writes in flight waits in a queue instead of sending
 * its own request; when one of those requests is answered, the writes
 * queued by then (at most TALLY_CLIENT_BATCH_MAX, and what fits the
 * server's request size) go as ONE non-atomic `batch` request. There is no
 * timer: a write that finds a free slot is sent at once, exactly as
 * without auto-batching, so a caller alone never waits for company.
 *
 * No thread of its own: the first write of a group (its leader) sends the
 * group's request from its own thread, with the client's retries, and
 * hands every member its result; the others sleep on their own condition
 * variable until then. Each member is the map tally_batch_* would pack
 * (client_pack_member: op, key, fields), and its result is filled from its
 * entry of the batch reply by the same decoder as a single reply
 * (client_result_fill): the server packs both with one function
 * (net/ops/ops_write.c:pack_result), so code, replayed, seq, events and key are
 * those the write would have got alone. What the server says about the
 * whole merged request is handled so that no member gets a code that is
 * not its own:
 *   - a transport code (timed_out, unreachable, out_of_memory) or a fault
 *     (overloaded, shutting_down, ... after the retries): every member's
 *     code, as each would have got it alone (same retries, same keys);
 *   - a refusal of the request (a member's field the server refuses, such
 *     as a subject over 128 bytes, or request_too_large): nothing was
 *     stored, so each member is sent again alone and gets its own answer.
 *
 * Why two requests in flight (AUTOBATCH_IN_FLIGHT_MAX): with one, the
 * server's writer is idle while a reply travels back and the next batch is
 * packed and sent; with two, one batch can be committed while the next one
 * is on its way, so the writer's group commit always has work. More would
 * only split the waiting writes into smaller batches. Two concurrent
 * callers therefore still send alone, as before.
 */
#include "clients/libtally/libtally_internal.h"

#include "common/limits.h"

#include <nng/supplemental/util/platform.h>
#include <stdlib.h>

#define AUTOBATCH_IN_FLIGHT_MAX 2
/* Room for the batch request's own entries around the members: map
 * header, v, op "batch", consumer (up to 64 bytes), the `ops` key and a
 * 32-bit array header. */
#define AUTOBATCH_HEADER_BYTES 128
_Static_assert(TALLY_CLIENT_CONSUMER_BYTES_MAX + 48 <= AUTOBATCH_HEADER_BYTES,
               "the batch's own entries fit the room kept for them");
_Static_assert(AUTOBATCH_HEADER_BYTES < TALLY_REQUEST_BYTES_MAX, "members have room");

/* One single write on its way, on its caller's stack. */
typedef struct waiter {
    const fields *fs;
    tally_result *out;
    nng_cv *cv;
    struct waiter *next;
    size_t group_count; /* > 0: lead this write and the group_count - 1 after it */
    bool done;          /* out holds the write's result */
    bool alone;         /* the merged request was refused: send your own */
} waiter;

struct client_autobatch {
    nng_mtx *mu;
    bool enabled, closing;
    unsigned in_flight; /* requests of single writes sent and not yet answered */
    waiter *head, *tail; /* queued, first come first sent */
    tally_client_counters counters;
};

int client_autobatch_new(bool enabled, client_autobatch **out)
{
    client_autobatch *ab = calloc(1, sizeof(*ab));
    if (ab == NULL || nng_mtx_alloc(&ab->mu) != 0) {
        free(ab);
        return TALLY_out_of_memory;
    }
    ab->enabled = enabled;
    *out = ab;
    return TALLY_ok;
}

void client_autobatch_free(client_autobatch *ab)
{
    if (ab == NULL)
        return;
    assert(ab->head == NULL && ab->in_flight == 0);
    nng_mtx_free(ab->mu);
    free(ab);
}

void client_autobatch_close(client_autobatch *ab)
{
    nng_mtx_lock(ab->mu);
    ab->closing = true;
    for (waiter *w = ab->head; w != NULL; w = w->next) {
        w->out->code = TALLY_unreachable; /* never sent */
        w->done = true;
        nng_cv_wake1(w->cv);
    }
    ab->head = ab->tail = NULL;
    nng_mtx_unlock(ab->mu);
}

void tally_client_counters_get(const tally_client *c, tally_client_counters *out)
{
    if (out == NULL)
        return;
    memset(out, 0, sizeof(*out));
    if (c == NULL)
        return;
    client_autobatch *ab = client_autobatch_of(c);
    nng_mtx_lock(ab->mu);
    *out = ab->counters;
    nng_mtx_unlock(ab->mu);
}

/* While a slot is free, give the writes at the head of the queue (up to a
 * batch) to the first of them to send. Under ab->mu. */
static void promote_locked(client_autobatch *ab)
{
    while (ab->head != NULL && !ab->closing && ab->in_flight < AUTOBATCH_IN_FLIGHT_MAX) {
        waiter *leader = ab->head, *last = leader;
        size_t n = 1;
        while (last->next != NULL && n < TALLY_CLIENT_BATCH_MAX) {
            last = last->next;
            n++;
        }
        ab->head = last->next;
        if (ab->head == NULL)
            ab->tail = NULL;
        last->next = NULL;
        leader->group_count = n;
        ab->in_flight++;
        nng_cv_wake1(leader->cv);
    }
}

/* Put back the writes from w on (a group's rest that did not fit) at the
 * head of the queue. */
static void requeue(client_autobatch *ab, waiter *w)
{
    if (w == NULL)
        return;
    waiter *last = w;
    while (last->next != NULL)
        last = last->next;
    nng_mtx_lock(ab->mu);
    if (ab->closing) {
        for (waiter *m = w; m != NULL; m = m->next) {
            m->out->code = TALLY_unreachable;
            m->done = true;
            nng_cv_wake1(m->cv);
        }
    } else {
        last->next = ab->head;
        ab->head = w;
        if (ab->tail == NULL)
            ab->tail = last;
        promote_locked(ab);
    }
    nng_mtx_unlock(ab->mu);
}

/* Pack the members of the group from leader on into b while they fit the
 * request limit; returns the first write that did not fit (NULL: all). */
static waiter *group_pack(waiter *leader, tally_batch *b)
{
    msgpack_packer pk;
    msgpack_packer_init(&pk, &b->members, msgpack_sbuffer_write);
    waiter *m = leader;
    for (size_t i = 0; m != NULL && i < leader->group_count; m = m->next, i++) {
        size_t before = b->members.size;
        if (client_pack_member(&pk, m->fs) != 0 ||
            b->members.size > TALLY_REQUEST_BYTES_MAX - AUTOBATCH_HEADER_BYTES) {
            b->members.size = before; /* not this one: it goes in the next request */
            return m;
        }
        b->count++;
    }
    return m;
}

/* Hand each member after the leader its outcome: its own result from
 * list, else code for all (list NULL), or (alone) the word to send its
 * own request. */
static void group_answer(client_autobatch *ab, waiter *leader, size_t count,
                         const msgpack_object *list, int code, bool alone)
{
    nng_mtx_lock(ab->mu);
    if (alone) /* each member's own request, the leader's too */
        ab->counters.requests += count;
    waiter *m = leader->next;
    for (size_t i = 1; i < count; i++, m = m->next) {
        if (alone)
            m->alone = true;
        else if (list != NULL)
            client_result_fill(m->out, &list->via.array.ptr[i]);
        else
            m->out->code = code;
        m->done = !alone;
        nng_cv_wake1(m->cv);
    }
    nng_mtx_unlock(ab->mu);
}

/* Send the group's packed members (b) as one batch request and answer
 * every member; returns the leader's code. */
static int group_send(tally_client *c, client_autobatch *ab, waiter *leader, tally_batch *b)
{
    reply r;
    int code = client_batch_call(c, b, &r);
    bool live = code == TALLY_ok;
    const msgpack_object *list = live ? client_batch_results(&r, b->count) : NULL;
    if (live)
        code = r.code == TALLY_ok && list == NULL ? TALLY_internal : r.code;
    /* Transport codes and faults (timed_out, overloaded, ...) are every
     * member's, as alone. Any other code refuses the whole request and is
     * no member's outcome: nothing was stored, so each asks again alone. */
    bool alone = list == NULL && tally_error_class_of(code) != TALLY_CLASS_FAULT;
    group_answer(ab, leader, b->count, list, code, alone);
    int rc = list != NULL ? client_result_fill(leader->out, &list->via.array.ptr[0])
                          : (leader->out->code = code);
    if (live)
        client_reply_free(&r);
    return alone ? client_write_exchange(c, leader->fs, leader->out) : rc;
}

/* The leader's part: send its group (merged, or alone when only it fits)
 * and put back what did not fit. Returns the leader's code. */
static int group_run(tally_client *c, client_autobatch *ab, waiter *leader)
{
    tally_batch b = {.atomic = false};
    msgpack_sbuffer_init(&b.members);
    waiter *rest = group_pack(leader, &b);
    int rc;
    if (b.count < 2) { /* the leader alone: its own single request */
        rest = leader->next;
        leader->next = NULL;
        requeue(ab, rest);
        nng_mtx_lock(ab->mu);
        ab->counters.requests++;
        nng_mtx_unlock(ab->mu);
        rc = client_write_exchange(c, leader->fs, leader->out);
    } else {
        waiter *last = leader;
        for (size_t i = 1; i < b.count; i++)
            last = last->next;
        last->next = NULL;
        requeue(ab, rest);
        nng_mtx_lock(ab->mu);
        ab->counters.requests++;
        ab->counters.batches++;
        ab->counters.batched_writes += b.count;
        nng_mtx_unlock(ab->mu);
        rc = group_send(c, ab, leader, &b);
    }
    msgpack_sbuffer_destroy(&b.members);
    return rc;
}

/* Wait in the queue (under ab->mu, which it returns holding) until the
 * write is answered, told to go alone, or promoted to lead a group.
 * false when no condition variable could be had (then not queued). */
static bool queue_wait(client_autobatch *ab, waiter *w)
{
    if (nng_cv_alloc(&w->cv, ab->mu) != 0)
        return false;
    if (ab->tail != NULL)
        ab->tail->next = w;
    else
        ab->head = w;
    ab->tail = w;
    while (!w->done && !w->alone && w->group_count == 0)
        nng_cv_wait(w->cv);
    return true;
}

/* A request of single writes was answered: its slot goes to the queue. */
static void slot_release(client_autobatch *ab)
{
    nng_mtx_lock(ab->mu);
    assert(ab->in_flight > 0);
    ab->in_flight--;
    promote_locked(ab);
    nng_mtx_unlock(ab->mu);
}

int client_autobatch_write(tally_client *c, const fields *fs, tally_result *out)
{
    client_autobatch *ab = client_autobatch_of(c);
    if (!client_enter(c))
        return out->code = TALLY_unreachable;
    waiter w = {.fs = fs, .out = out};
    nng_mtx_lock(ab->mu);
    ab->counters.writes++;
    bool slot = ab->enabled && !ab->closing && ab->head == NULL &&
                ab->in_flight < AUTOBATCH_IN_FLIGHT_MAX;
    bool queued = ab->enabled && !ab->closing && !slot && queue_wait(ab, &w);
    ab->in_flight += slot;
    ab->counters.requests += !queued;
    nng_mtx_unlock(ab->mu);
    int rc;
    if (w.group_count > 0) {
        rc = group_run(c, ab, &w);
        slot_release(ab);
    } else if (w.done) {
        rc = out->code;
    } else { /* a free slot, auto-batching off, or told to go alone */
        rc = client_write_exchange(c, fs, out);
        if (slot)
            slot_release(ab);
    }
    if (w.cv != NULL)
        nng_cv_free(w.cv);
    client_leave(c);
    return rc;
}
