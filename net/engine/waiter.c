/*
 * waiter.c — parked long-polls: a log_read with wait_ms that found nothing
 * new, and a sub_fetch that found nothing to deliver. The waiter thread
 * takes each back when a commit moves the head past its watermark or its
 * wait ends: a read is answered, a fetch goes back to the writer to run
 * again.
 */
#include "net/engine/engine.h"

#include "common/clock.h"
#include "common/error.h"

#include <time.h>

void slot_park(slot *s, slot_owner from, int64_t wait_ms)
{
    server *srv = s->srv;
    s->deadline_ms = clock_mono_ms() + wait_ms;
    pthread_mutex_lock(&srv->mu);
    bool stopping = srv->stopping;
    if (!stopping) {
        slot_own(s, from, OWNER_WAITER);
        s->next = srv->waiters;
        srv->waiters = s;
        pthread_cond_signal(&srv->waiter_cv);
    }
    pthread_mutex_unlock(&srv->mu);
    /* Stopping: answered now (the waiter may have exited, and a slot
     * parked then would never be answered); a read waiting for min_seq
     * is refused, never answered from a position before it. */
    if (stopping && s->min_seq_wait) {
        s->min_seq_wait = false;
        slot_send_error(s, from, TALLY_shutting_down,
                        "server is stopping before it applied min_seq: read on another node");
    } else if (stopping && s->req.op->kind == NET_KIND_SUBSCRIBER)
        slot_send_written(s, from, 0, clock_wall_ms());
    else if (stopping)
        slot_send_read(s, from);
}

/* Remove and return a waiter that is ready (events or deadline), or NULL;
 * *next_deadline gets the earliest remaining deadline. Called under mu. */
static slot *take_ready_waiter(server *srv, int64_t now, int64_t *next_deadline)
{
    *next_deadline = INT64_MAX;
    for (slot **p = &srv->waiters; *p; p = &(*p)->next) {
        slot *s = *p;
        bool passed = s->min_seq_wait ? server_position_locked(srv) >= s->req.min_seq
                                      : srv->head_seq > s->watermark;
        if (srv->stopping || passed || s->deadline_ms <= now) {
            *p = s->next;
            s->next = NULL;
            return s;
        }
        if (s->deadline_ms < *next_deadline)
            *next_deadline = s->deadline_ms;
    }
    return NULL;
}

void *waiter_main(void *arg)
{
    server *srv = arg;
    pthread_mutex_lock(&srv->mu);
    for (;;) {
        int64_t next_deadline;
        slot *s = take_ready_waiter(srv, clock_mono_ms(), &next_deadline);
        if (s && s->min_seq_wait) {
            bool reached = server_position_locked(srv) >= s->req.min_seq;
            pthread_mutex_unlock(&srv->mu);
            s->min_seq_wait = false;
            if (reached)
                slot_dispatch_read(s, OWNER_WAITER); /* may park again, for its long-poll */
            else
                slot_send_error(s, OWNER_WAITER, TALLY_not_caught_up,
                                "this node has not applied min_seq within --cluster-read-wait-ms");
            pthread_mutex_lock(&srv->mu);
            continue;
        }
        if (s) {
            pthread_mutex_unlock(&srv->mu);
            if (s->req.op->kind == NET_KIND_SUBSCRIBER)
                slot_enqueue_write(s, OWNER_WAITER); /* runs again */
            else
                slot_send_read(s, OWNER_WAITER);
            pthread_mutex_lock(&srv->mu);
            continue;
        }
        if (srv->stopping && srv->waiters == NULL)
            break;
        int64_t wait = next_deadline == INT64_MAX ? 1000 : next_deadline - clock_mono_ms();
        struct timespec until = clock_realtime_in_ms(wait < 1 ? 1 : wait);
        pthread_cond_timedwait(&srv->waiter_cv, &srv->mu, &until);
    }
    pthread_mutex_unlock(&srv->mu);
    return NULL;
}
