/*
 * tally_echo.c — tally-echo, the NNG request/reply echo server that
 * measures the transport's ceiling (docs/BENCHMARKS.md, "The echo
 * ceiling"): a bare REP socket whose N contexts each receive a request
 * and send the same message back, with async I/O as tallyd's slots do
 * (net/engine/slot.c), but nothing decoded and nothing stored. tally-bench --echo
 * drives it through libtally.
 *
 * Bounded: a request over --max-bytes is dropped (counted, no reply: the
 * client times out); one over four times that is refused by NNG itself
 * (NNG_OPT_RECVMAXSZ), which closes the connection.
 *
 * Prints "tally-echo: serving URL (N contexts)" on stderr once every
 * context waits for a request (scripts wait for "serving"); on SIGTERM or
 * SIGINT it stops listening, reports its counts and exits 0.
 */
#include "config.h"

#include "common/cli.h"
#include "common/limits.h"
#include "common/nng_compat.h"
#include "common/options.h"

#include <inttypes.h>
#include <nng/nng.h>
#include <nng/protocol/reqrep0/rep.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stddef.h>
#include <stdlib.h>
#include <unistd.h>

#define ECHO_CONTEXTS_DEFAULT 128
#define ECHO_BYTES_MAX_DEFAULT TALLY_REQUEST_BYTES_MAX
/* Requests up to this many times --max-bytes reach a context (and are
 * counted when dropped); larger ones NNG refuses, as tallyd does. */
#define ECHO_RECV_HARD_FACTOR 4
#define ECHO_STOP_POLL_US 20000
#define ECHO_SHUTDOWN_SEND_WAIT_MS 3000

_Static_assert(ECHO_CONTEXTS_DEFAULT <= TALLY_CONTEXTS_MAX, "default within the limit");

typedef struct echo_options {
    const char *url;
    unsigned contexts;
    uint64_t bytes_max;
} echo_options;

typedef struct echo_slot {
    nng_ctx ctx;
    nng_aio *aio;
    bool sending;
} echo_slot;

/* The server; static, so it stays reachable after main (the sockets are
 * left to the kernel at exit: NNG_COMPAT_NO_CLOSE_AT_EXIT). */
static struct {
    nng_socket rep;
    nng_listener listener;
    echo_slot *slots;
    size_t bytes_max;
    atomic_uint_fast64_t echoed, dropped, sends_in_flight;
} echo;

static volatile sig_atomic_t stop_requested;

static void on_signal(int sig)
{
    (void)sig;
    stop_requested = 1;
}

static void slot_recv(echo_slot *s)
{
    s->sending = false;
    nng_ctx_recv(s->ctx, s->aio);
}

/* A request came: send the same message back (REP puts the request's
 * routing header back on it), or drop it when too large. */
static void slot_answer(echo_slot *s, nng_msg *msg)
{
    if (nng_msg_len(msg) > echo.bytes_max) {
        nng_msg_free(msg);
        atomic_fetch_add(&echo.dropped, 1);
        slot_recv(s);
        return;
    }
    atomic_fetch_add(&echo.echoed, 1);
    atomic_fetch_add(&echo.sends_in_flight, 1);
    s->sending = true;
    nng_aio_set_msg(s->aio, msg);
    nng_ctx_send(s->ctx, s->aio);
}

/* A send or a receive finished: receive again, or answer what came; a
 * closed or cancelled receive ends the slot. */
static void slot_callback(void *arg)
{
    echo_slot *s = arg;
    int rv = nng_aio_result(s->aio);
    bool sent = s->sending;
    if (sent && rv != 0) /* a failed send leaves the message with us */
        nng_msg_free(nng_aio_get_msg(s->aio));
    if (sent)
        atomic_fetch_sub(&echo.sends_in_flight, 1);
    if (!sent && rv == 0)
        slot_answer(s, nng_aio_get_msg(s->aio));
    else if (sent || (rv != NNG_ECLOSED && rv != NNG_ECANCELED))
        slot_recv(s);
}

/* The socket, its contexts and the listener; an NNG error (0 = ok). */
static int echo_open(const echo_options *o)
{
    echo.bytes_max = o->bytes_max;
    int rv = nng_rep0_open(&echo.rep);
    if (rv == 0)
        rv = nng_socket_set_size(echo.rep, NNG_OPT_RECVMAXSZ, ECHO_RECV_HARD_FACTOR * o->bytes_max);
    echo.slots = rv == 0 ? calloc(o->contexts, sizeof(*echo.slots)) : NULL;
    if (rv == 0 && echo.slots == NULL)
        rv = NNG_ENOMEM;
    for (unsigned i = 0; rv == 0 && i < o->contexts; i++) {
        rv = nng_aio_alloc(&echo.slots[i].aio, slot_callback, &echo.slots[i]);
        if (rv == 0)
            rv = nng_ctx_open(&echo.slots[i].ctx, echo.rep);
    }
    if (rv == 0)
        rv = nng_listen(echo.rep, o->url, &echo.listener, 0);
    for (unsigned i = 0; rv == 0 && i < o->contexts; i++)
        slot_recv(&echo.slots[i]);
    return rv;
}

/* No new connections; let the echoes in flight leave. The socket is not
 * closed (NNG_COMPAT_NO_CLOSE_AT_EXIT: nng_close in NNG 1.5.2 can
 * deadlock while pipes are torn down under load); the process exits next. */
static void echo_stop(void)
{
    nng_listener_close(echo.listener);
    useconds_t waited_us = 0;
    while (atomic_load(&echo.sends_in_flight) > 0 &&
           waited_us < ECHO_SHUTDOWN_SEND_WAIT_MS * 1000u) {
        usleep(ECHO_STOP_POLL_US / 4);
        waited_us += ECHO_STOP_POLL_US / 4;
    }
    if (!NNG_COMPAT_NO_CLOSE_AT_EXIT)
        nng_close(echo.rep);
}

_Static_assert(ECHO_CONTEXTS_DEFAULT == 128, "--contexts' default text");
_Static_assert(ECHO_BYTES_MAX_DEFAULT == 524288, "--max-bytes' default text");
_Static_assert(ECHO_RECV_HARD_FACTOR == 4, "--max-bytes' help");

/* The options, one row each (common/options.h); --help is made from them. */
static const options_row rows[] = {
    {"listen", "URL", NULL, "NNG endpoint to listen on (tcp://HOST:PORT, ipc://PATH); required",
     OPTIONS_TEXT(echo_options, url)},
    {"contexts", "N", "128",
     "requests served concurrently (NNG contexts with async I/O, as tallyd's)",
     OPTIONS_NUMBER(echo_options, contexts, UNSIGNED, 1, TALLY_CONTEXTS_MAX), .noun = "count"},
    {"max-bytes", "N", "524288",
     "larger requests are dropped unanswered and counted (beyond 4 times N NNG closes the "
     "connection)",
     OPTIONS_NUMBER(echo_options, bytes_max, U64, 1, TALLY_REQUEST_BYTES_MAX), .noun = "size"},
    OPTIONS_ROW_HELP,
};

static void usage(const options_set *set, FILE *f)
{
    fprintf(f, "usage: tally-echo --listen URL [--contexts N] [--max-bytes N] [--help]\n"
               "\n"
               "A bare NNG request/reply echo server: the transport's ceiling for\n"
               "tally-bench --echo (docs/BENCHMARKS.md, \"The echo ceiling\"). Every request\n"
               "is answered with its own bytes; nothing is decoded or stored.\n"
               "\n");
    options_print_help(set, f);
    fprintf(f, "\n"
               "Prints \"tally-echo: serving URL (N contexts)\" on stderr when ready. SIGTERM or\n"
               "SIGINT: stop listening, let replies in flight leave, print the counts of\n"
               "echoed and dropped requests, exit 0.\n"
               "\n"
               "Exit status: 0 stopped cleanly, 1 cannot serve (e.g. the URL is in use),\n"
               "2 usage error (also a URL NNG does not accept).\n");
}

/* Returns -1 to run, else the exit status (help, or a usage error). */
static int parse_options(int argc, char **argv, echo_options *o)
{
    options_set set = {0};
    int rc = options_load_command_line(&set, "tally-echo", rows, sizeof(rows) / sizeof(rows[0]),
                                       argc, argv, o, usage);
    if (rc < 0 && o->url == NULL)
        rc = options_usage_error(&set, "--listen URL is required");
    options_free(&set);
    return rc;
}

int main(int argc, char **argv)
{
    echo_options o = {0};
    int rc = parse_options(argc, argv, &o);
    if (rc >= 0)
        return rc;
    if (cli_catch_stop_signals(on_signal, false, true) != 0) {
        perror("tally-echo: signals");
        return 1;
    }
    int rv = echo_open(&o);
    if (rv != 0) {
        fprintf(stderr, "tally-echo: cannot serve %s: %s\n", o.url, nng_strerror(rv));
        return rv == NNG_EADDRINVAL || rv == NNG_ENOTSUP ? 2 : 1;
    }
    fprintf(stderr, "tally-echo: serving %s (%u contexts)\n", o.url, o.contexts);
    while (!stop_requested)
        usleep(ECHO_STOP_POLL_US);
    echo_stop();
    fprintf(stderr,
            "tally-echo: stopped: %" PRIuFAST64 " requests echoed, %" PRIuFAST64
            " dropped (over %zu bytes)\n",
            atomic_load(&echo.echoed), atomic_load(&echo.dropped), echo.bytes_max);
    return 0;
}
