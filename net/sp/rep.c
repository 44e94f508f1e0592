/*
 * rep.c — NNG's REP socket as a transport: one slot per context
 * (--contexts), each receiving a request, handing it to the engine
 * (slot_serve), and sending the reply the engine gives back.
 */
#include "net/sp/sp.h"

#include "common/clock.h"
#include "common/logging.h"
#include "net/metrics/metrics.h"

#include <stdlib.h>

static void slot_recv(slot *s)
{
    if (s->pipe_id) /* its request is over: replied, or no reply */
        pipes_request_end(s->srv, s->pipe_id);
    s->pipe_id = 0;
    s->state = SLOT_RECV;
    nng_aio_set_timeout(s->aio, NNG_DURATION_DEFAULT);
    nng_ctx_recv(s->ctx, s->aio);
}

/* A context sends to one pipe at a time and waits while that pipe's
 * client does not read: a reply not taken within --request-timeout-s is
 * dropped (the context serves on), and the main thread closes its
 * connection once nothing of it is in flight (pipes_reply_dropped: a pipe
 * is not closed from here, an aio callback, where NNG 1.5.2 was seen never
 * to reap it), so clients that never read cannot hold every context. */
static void rep_answer(slot *s, nng_msg *reply)
{
    if (s->long_poll_held)
        pipes_long_poll_end(s->srv, s->pipe_id);
    s->long_poll_held = false;
    if (reply == NULL) {
        net_log(NET_LOG_ERROR, "could not build a reply; the request gets none");
        slot_recv(s);
        return;
    }
    s->state = SLOT_SEND;
    atomic_fetch_add(&s->srv->sp->sends_in_flight, 1);
    nng_aio_set_msg(s->aio, reply);
    nng_aio_set_timeout(s->aio, (nng_duration)s->srv->opt->request_timeout_s * 1000);
    nng_ctx_send(s->ctx, s->aio);
}

static bool rep_long_poll_begin(slot *s)
{
    return s->pipe_id == 0 || (s->long_poll_held = pipes_long_poll_begin(s->srv, s->pipe_id));
}

/* Control ops run on the NNG callback thread, beside reader and writer. */
static const slot_way rep_way = {rep_answer, slot_send_control, rep_long_poll_begin};

static void slot_callback(void *arg)
{
    slot *s = arg;
    int rv = nng_aio_result(s->aio);
    if (s->state == SLOT_SEND) {
        if (rv == NNG_ETIMEDOUT && s->pipe_id)
            pipes_reply_dropped(s->srv, s->pipe_id);
        if (rv != 0)
            nng_msg_free(nng_aio_get_msg(s->aio));
        else if (s->timed_kind >= 0)
            net_metrics_request_done((net_request_kind)s->timed_kind,
                                     clock_mono_ns() - s->arrived_ns);
        s->timed_kind = -1;
        atomic_fetch_sub(&s->srv->sp->sends_in_flight, 1);
        slot_recv(s);
        return;
    }
    if (rv == NNG_ECLOSED || rv == NNG_ECANCELED)
        return;
    if (rv != 0) {
        slot_recv(s);
        return;
    }
    s->msg = nng_aio_get_msg(s->aio);
    s->arrived_ns = clock_mono_ns();
    /* Counted for its pipe (its long-polls, its idleness); NNG hands a
     * context a request from any pipe, and a request refused for its
     * pipe's count would be a refusal where the tcp:// loop makes it wait:
     * requests in flight per connection are bounded by --contexts alone. */
    s->pipe_id = (uint32_t)nng_pipe_id(nng_msg_get_pipe(s->msg));
    pipes_request_begin(s->srv, s->pipe_id);
    slot_serve(s);
}

int slots_limit_requests(server *srv)
{
    return nng_socket_set_size(srv->sp->rep, NNG_OPT_RECVMAXSZ,
                               RECV_HARD_LIMIT_BYTES + SP_REQUEST_ID_BYTES);
}

int slots_open(server *srv)
{
    int rv;
    srv->slot_count = srv->opt->contexts;
    srv->slots = calloc(srv->slot_count, sizeof(slot));
    if (srv->slots == NULL)
        return NNG_ENOMEM;
    for (unsigned i = 0; i < srv->slot_count; i++) {
        slot *s = &srv->slots[i];
        s->srv = srv;
        s->way = &rep_way;
        atomic_init(&s->owner, OWNER_NNG);
        s->timed_kind = -1;
        net_request_init(&s->req);
        rv = nng_aio_alloc(&s->aio, slot_callback, s);
        if (rv == 0)
            rv = nng_ctx_open(&s->ctx, srv->sp->rep);
        if (rv != 0)
            return rv;
    }
    return 0;
}

void slots_start(server *srv)
{
    for (unsigned i = 0; i < srv->slot_count; i++)
        slot_recv(&srv->slots[i]);
}
