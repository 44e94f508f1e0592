/*
 * sp_pipes.c — see sp_pipes.h.
 */
#include "clients/sp_pipes.h"

#include <string.h>

int sp_pipes_init(sp_pipes *ps)
{
    memset(ps, 0, sizeof(*ps));
    int rv = nng_mtx_alloc(&ps->mu);
    if (rv == 0)
        rv = nng_cv_alloc(&ps->dialer_closed, ps->mu);
    if (rv != 0)
        sp_pipes_fini(ps);
    return rv;
}

void sp_pipes_fini(sp_pipes *ps)
{
    if (ps->dialer_closed)
        nng_cv_free(ps->dialer_closed);
    if (ps->mu)
        nng_mtx_free(ps->mu);
    ps->dialer_closed = NULL;
    ps->mu = NULL;
}

void sp_pipes_event(sp_pipes *ps, nng_pipe pipe, nng_pipe_ev ev)
{
    nng_mtx_lock(ps->mu);
    if (ev == NNG_PIPE_EV_ADD_PRE && ps->closing) {
        nng_mtx_unlock(ps->mu);
        nng_pipe_close(pipe); /* refused: its handshake is done, the server sees a plain close */
        return;
    }
    if (ev == NNG_PIPE_EV_ADD_PRE && ps->count < SP_PIPES_MAX) {
        ps->open[ps->count++] = pipe;
    } else if (ev == NNG_PIPE_EV_REM_POST) {
        for (unsigned i = 0; i < ps->count; i++)
            if (nng_pipe_id(ps->open[i]) == nng_pipe_id(pipe)) {
                ps->open[i] = ps->open[--ps->count];
                break;
            }
        /* The redial follows this callback: let it find the dialer closed. */
        nng_time until = nng_clock() + SP_PIPES_HOLD_MS;
        while (ps->closing && nng_clock() < until)
            nng_cv_until(ps->dialer_closed, until);
    }
    nng_mtx_unlock(ps->mu);
}

void sp_pipes_close_socket(sp_pipes *ps, nng_socket s, nng_dialer d)
{
    nng_pipe open[SP_PIPES_MAX];
    nng_mtx_lock(ps->mu);
    unsigned count = ps->count;
    memcpy(open, ps->open, count * sizeof(open[0]));
    ps->closing = true;
    nng_mtx_unlock(ps->mu);
    /* Outside the lock: REM_POST callbacks take it. A pipe removed
     * meanwhile is ENOENT, which is fine. */
    for (unsigned i = 0; i < count; i++)
        (void)nng_pipe_close(open[i]);
    if (nng_dialer_id(d) > 0)
        (void)nng_dialer_close(d);
    nng_mtx_lock(ps->mu);
    ps->closing = false;
    nng_cv_wake(ps->dialer_closed);
    nng_mtx_unlock(ps->mu);
    nng_close(s);
}
