/*
 * sp.h — tallyd's transports (net/sp/): the NNG REP socket and its
 * contexts, the tcp:// epoll loop, the PUB publisher, the accounting of
 * connections, the listener watchdog and TLS reloads. They feed the
 * engine (net/engine/engine.h) and answer its slots.
 *
 *   rep.c          NNG's REP contexts: receive into a slot, send its reply
 *   sp_loop.c      tcp:// requests on tallyd's own epoll loop (--tcp-engine
 *                  epoll); sp_loop_setup.c its sockets, control thread and
 *                  lifecycle
 *   publisher.c    the PUB socket and its subscriber count
 *   pipes.c        request connections: accounting, --max-connections and
 *                  the per-address limits, NNG pipes' long-polls and idle
 *                  timeout, and the log of refused TLS handshakes
 *   listeners.c    the request listeners, with the NNG 1.5.2 workarounds on
 *                  them (the listener watchdog, stale pipes)
 *   listener_probe.c  the watchdog's probe of one listener
 *   tls_reload.c   SIGHUP: the --tls-* files read again for tls+tcp://
 */
#ifndef TALLY_NET_SP_SP_H
#define TALLY_NET_SP_SP_H

#include "common/ready_file.h"
#include "common/table.h"
#include "net/engine/engine.h"
#include "net/metrics/metrics.h"
#include "net/sp/listener_probe.h"

#include <nng/nng.h>
#include <nng/supplemental/tls/tls.h>
#include <signal.h>
#include <stdatomic.h>
#include <sys/socket.h>

/* Requests (msgpack bytes) above the protocol limit but up to this still
 * get request_too_large; above it the connection is dropped before tally
 * sees them (NNG_OPT_RECVMAXSZ, and the loop's frame limit). The SP frame
 * also holds the REQ request id (docs/PROTOCOL.md, "The SP layer"): it is
 * added, so the limit clients read about is the msgpack body's. */
#define RECV_HARD_LIMIT_BYTES (4 * TALLY_REQUEST_BYTES_MAX)
#define SP_REQUEST_ID_BYTES 4
#define SP_FRAME_BYTES_MAX (RECV_HARD_LIMIT_BYTES + SP_REQUEST_ID_BYTES)

/* The listener watchdog's state (net/sp/listeners.c). The main thread owns
 * it, except listener ids and accepted counts, which pipe callbacks read. */
typedef struct listeners {
    nng_listener l[NET_LISTEN_URLS_MAX];
    unsigned count;
    unsigned stopped[NET_LISTEN_URLS_MAX]; /* probes in a row that found it not accepting */
    bool down[NET_LISTEN_URLS_MAX];        /* closed, not yet back */
    bool ours[NET_LISTEN_URLS_MAX];        /* served by the tcp:// loop, not NNG */
    atomic_uint ids[NET_LISTEN_URLS_MAX];
    atomic_uint accepted[NET_LISTEN_URLS_MAX]; /* connections handed over (ADD_PRE) */
    int64_t tls_refused[NET_LISTEN_URLS_MAX]; /* TLS handshakes refused, as last logged */
    /* Each --listen URL as bound: port 0 replaced by the kernel's choice
     * (set at start, then read-only). The watchdog listens on it again, so
     * a re-created listener keeps the port its clients know; logs, the
     * ready file and the probe name it. */
    char url[NET_LISTEN_URLS_MAX][NET_URL_BYTES_MAX];
} listeners;

/* A client's address as the per-address limit counts it: the IPv4 or
 * IPv6 address (an IPv4-mapped IPv6 one as IPv4); len 0 for none (ipc://,
 * inproc://: those are not limited per address). */
typedef struct sp_address {
    uint8_t len;
    uint8_t bytes[16];
} sp_address;

/* What tallyd counts of one request connection (srv->sp->pipes' values,
 * under pipes_mu). */
typedef struct sp_pipe {
    sp_address addr;
    bool exempt;         /* inproc:// (the HTTP face's): no per-connection caps */
    uint32_t in_flight;  /* requests received, reply not yet sent (NNG's pipes) */
    uint32_t long_polls; /* long-polls among them (NNG's pipes) */
    int64_t active_ms;   /* mono clock: a request came or a reply left (NNG's pipes) */
    int64_t closed_ms;   /* mono clock: tallyd closed it (pipes_close); 0: not */
    bool replies_dropped; /* a reply was not taken in time: closed when idle, as unread_replies */
} sp_pipe;

/* Why a connection was not taken (tally_connections_refused_total{reason}). */
typedef enum sp_admission {
    SP_ADMITTED,
    SP_REFUSED_TOTAL,       /* --max-connections */
    SP_REFUSED_PER_ADDRESS, /* --max-connections-per-address */
    SP_REFUSED_RESERVED,    /* the --connections-reserved-pct share, to an address with many */
} sp_admission;

typedef struct sp_room {
    nng_socket rep;
    nng_socket pub;
    bool has_pub;
    listeners lis;
    nng_listener pub_listener; /* when has_pub; main thread */
    atomic_uint pub_accepted;  /* PUB connections handed to the socket (ADD_PRE), for the probe */
    unsigned pub_stopped;      /* probes in a row that found pub_listener not accepting */
    bool pub_down;             /* pub_listener closed by the watchdog, not yet back */
    char pub_url[NET_URL_BYTES_MAX];  /* --publish as bound (as lis.url); "" without PUB */
    nng_tls_config *tls;       /* the live TLS configuration of tls+tcp:// listeners
                                  (opt->tls, then each reload's); main thread */
    nng_tls_config **tls_held; /* the ones a reload replaced, held until exit */
    unsigned tls_held_count;   /* (tls_reload.c); main thread */
    atomic_int sends_in_flight; /* REP replies NNG has not finished sending */
    pthread_mutex_t pipes_mu;
    table *pipes;                 /* accepted request connections, by pipe id: sp_pipe */
    table *addresses;             /* under pipes_mu: connections per sp_address (uint32_t) */
    uint64_t connections_refused; /* under pipes_mu */
    int64_t idle_swept_ms;        /* main thread: the last pipes_close_idle */
    atomic_bool trim_wanted;      /* connection buffers were freed: malloc_trim (main thread) */
    int64_t pipes_pruned_ms;      /* under pipes_mu: the last stale-pipe pass */
    struct sockaddr_storage probe_self; /* under pipes_mu: the watchdog's probe's own end */
    socklen_t probe_self_len;           /* under pipes_mu: 0 while no probe is under way */
    table *pub_pipes;             /* connected subscribers (PUB pipes), by pipe id */
    bool pub_pipes_unknown;       /* under pipes_mu: one could not be recorded */
    struct sp_loop *loop;         /* the tcp:// loop; NULL with --tcp-engine nng */
} sp_room;

/* What the transports count, for the metrics and health (net/http/). */
typedef struct sp_counts {
    uint64_t connections;         /* request connections open now */
    uint64_t connections_refused; /* by any limit, since start */
    uint64_t publish_subscribers; /* PUB connections now */
} sp_counts;
void sp_counts_get(server *srv, sp_counts *out);

/* ---- rep.c ---- */
/* The request size limit: set before any listener exists (listeners of
 * newer NNG copy the socket's options when they are made). */
int slots_limit_requests(server *srv);
/* The slots, receiving only once slots_start runs (after the threads
 * that answer them have started). */
int slots_open(server *srv);
void slots_start(server *srv);

/* ---- publisher.c ---- */
int publisher_open(server *srv);

/* ---- pipes.c ---- */
int pipes_watch(server *srv);
/* Count a new request connection (an NNG pipe id, or one of the loop's
 * with the high bit) from addr, unless a limit refuses it (--max-connections,
 * --max-connections-per-address, the reserved share; counted in
 * tally_connections_refused_total{reason}, logged): then the caller closes
 * it. pipes_forget: it has gone. */
sp_admission pipes_admit(server *srv, uint32_t id, const sp_address *addr, bool exempt);
void pipes_forget(server *srv, uint32_t id);
/* pipes_forget under pipes_mu (the stale-pipe pass): 1 if id was counted. */
int pipes_drop_locked(server *srv, uint32_t id);
/* addr of a socket address (len 0 unless IPv4 or IPv6). */
void sp_address_of(const struct sockaddr *sa, sp_address *addr);
/* NNG's pipes (rep.c): a request came on pipe id, and its reply left (or
 * none will). Pipes not counted (the probe, inproc://) are ignored. */
void pipes_request_begin(server *srv, uint32_t id);
void pipes_request_end(server *srv, uint32_t id);
/* A long-poll of pipe id parks (false: it holds
 * --max-long-polls-per-connection; nothing counted), and ends. */
bool pipes_long_poll_begin(server *srv, uint32_t id);
void pipes_long_poll_end(server *srv, uint32_t id);
/* Close NNG's pipe id for reason (counted in
 * tally_connections_closed_total{reason}); any thread but a pipe callback. */
void pipes_close(server *srv, uint32_t id, net_closure reason);
/* A reply to pipe id was not taken within --request-timeout-s and was
 * dropped: the pipe is closed once nothing of it is in flight. */
void pipes_reply_dropped(server *srv, uint32_t id);
/* Main thread, about once a second: NNG's pipes with nothing in flight
 * for --idle-timeout-s are closed (tally_connections_closed_total{reason="idle"}),
 * and when connections went, the memory their buffers held is given back
 * to the system (malloc_trim: glibc keeps freed heap pages otherwise, and a
 * flood of large frames left tallyd at a gigabyte after it ended). */
void pipes_close_idle(server *srv);
/* At the connection limit: places of connections NNG no longer knows
 * taken back (under pipes_mu). Returns how many. */
size_t pipes_prune_stale(server *srv);

/* ---- listeners.c ---- */
int listeners_open(server *srv);
/* url with the port listener l is bound to (a tcp:// or tls+tcp:// port 0
 * is the kernel's choice), into out; url itself for ipc://. 0, or
 * NNG_EINVAL when it does not fit (logged). */
int listener_bound_url(nng_listener l, const char *url, char out[NET_URL_BYTES_MAX]);
/* A pipe callback's ADD_PRE: count it for its listener's probe. */
void listeners_note_accept(server *srv, nng_pipe p);
/* A pipe callback's ADD_PRE: whether p is the watchdog's own probe (it
 * takes no client's place under --max-connections and is not counted). */
bool listeners_pipe_is_probe(server *srv, nng_pipe p);
/* Main thread, every --listener-probe-ms while serving. */
void listeners_watch(server *srv, volatile sig_atomic_t *stop);
/* Log the TLS handshakes each tls+tcp:// listener refused since the last
 * call (a warn line per listener and call at most: pipes.c). */
void listeners_log_tls_refusals(server *srv);
void listeners_close(server *srv);

/* ---- tls_reload.c ---- */
/* Read the --tls-* files again and give the tls+tcp:// listeners the new
 * configuration; main thread. https: the HTTP face serves https:// (which
 * keeps its certificate until a restart: logged). */
void tls_reload(server *srv, bool https);

#endif
