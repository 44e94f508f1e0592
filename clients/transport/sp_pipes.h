/*
 * sp_pipes.h — the pipes of one NNG socket with one dialer, so that the
 * socket can be closed without hanging and without stopping the server's
 * listener.
 *
 * NNG 1.5.2 (Debian 12's) can hang nng_close for good when a message is
 * arriving on a pipe of the socket: closing the socket closes its dialers
 * first, and a dialer's close (tcp, tls and ipc alike) closes the
 * transport's side of each pipe before the protocol's. A receive the
 * protocol posts in between (it posts one after every message) is queued
 * on the transport pipe, whose read was closed: nni_aio_begin refuses the
 * read without calling back, nothing completes the receive, and the
 * reaper waits for it forever (every later close in the process then
 * waits behind it). So the pipes go first, and not by a close of theirs
 * under a read in progress: a connection is shut down under NNG
 * (shutdown(2) on its descriptor), its reads end as if the server had hung
 * up, and NNG closes the pipe through its own callbacks. A TCP
 * connection's descriptor (tcp://, tls+tcp://) is found by its two
 * addresses; an ipc:// one's, whose addresses do not tell it from another
 * to the same path, by elimination: the one socket of the process
 * connected to that path that no other pipe has claimed, tried when the
 * pipe is added and again at the close. A pipe whose descriptor is not
 * found alone is closed with nng_pipe_close (protocol side first, which
 * still leaves a window: the transport's read of a message whose header
 * has arrived is resubmitted on the closed aio). The dialer is closed
 * only when the pipes are gone.
 *
 * The last pipe's removal makes its dialer redial, though (at once half
 * the time: NNG 1.5.2 draws the back-off as a negative number), and a close
 * during that connection's handshake stops the server's listener for good
 * (nanomsg/nng#1518). So that removal waits, in its REM_POST callback,
 * until the dialer is closed too: then the redial finds the dialer stopped
 * and does nothing. docs/DESIGN.md (Choices: "libtally closes its NNG
 * sockets pipes first").
 *
 * A socket registers sp_pipes_event for NNG_PIPE_EV_ADD_PRE and
 * NNG_PIPE_EV_REM_POST (alone, or from its own pipe callback) and is
 * closed with sp_pipes_close_socket.
 */
#ifndef TALLY_SP_PIPES_H
#define TALLY_SP_PIPES_H

#include <nng/nng.h>
#include <nng/supplemental/util/platform.h>
#include <stdbool.h>
#include <sys/types.h>

/* A socket of libtally has one dialer: one pipe, and one more while a
 * redial overlaps the old pipe's removal. Pipes past this many are closed
 * by nng_close, as before. */
#define SP_PIPES_MAX 8
/* The longest a REM_POST callback waits for the dialer's close (NNG's
 * reaper thread waits with it): a bound, never reached in practice. */
#define SP_PIPES_HOLD_MS 2000
/* The longest a close waits for its pipes to go after shutting them down. */
#define SP_PIPES_GONE_MS 5000

/* A pipe of the socket, and for an ipc:// one its descriptor when it was
 * found at ADD_PRE (-1: not found; a tcp:// one's is found at the close). */
typedef struct sp_pipe {
    nng_pipe pipe;
    int fd;
    ino_t ino; /* fd's inode then: a number closed and reused is not it */
} sp_pipe;

typedef struct sp_pipes {
    nng_mtx *mu;
    nng_cv *dialer_closed;
    nng_cv *removed; /* signalled at each REM_POST */
    sp_pipe open[SP_PIPES_MAX];
    unsigned count;
    bool closing; /* pipes closed, the dialer not yet: removals wait */
} sp_pipes;

/* 0 or an NNG error (NNG_ENOMEM). */
int sp_pipes_init(sp_pipes *ps);
/* After sp_pipes_close_socket, or when the socket never opened; on a
 * zeroed sp_pipes it does nothing. */
void sp_pipes_fini(sp_pipes *ps);

/* Records ADD_PRE (the pipe is there; while closing, it is refused) and
 * REM_POST (gone); other events are ignored. For NNG's pipe callbacks. */
void sp_pipes_event(sp_pipes *ps, nng_pipe pipe, nng_pipe_ev ev);

/* Closes the pipes recorded, then dialer d (its only dialer), then socket
 * s. */
void sp_pipes_close_socket(sp_pipes *ps, nng_socket s, nng_dialer d);

#endif
