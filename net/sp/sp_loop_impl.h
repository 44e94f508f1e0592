/*
 * sp_loop_impl.h — what the tcp:// loop's two files share (net/sp/sp_loop.c:
 * connections, requests, replies, the loop; net/sp/sp_loop_setup.c:
 * listening sockets, the control thread, the lifecycle): its limits, a
 * connection, the loop. Private to them.
 */
#ifndef TALLY_NET_SP_SP_LOOP_IMPL_H
#define TALLY_NET_SP_SP_LOOP_IMPL_H

#include "net/engine/engine.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#define SP_HEADER_BYTES 8
#define SP_READ_CHUNK (16 * 1024)
#define SP_BIG_BUFFER_BYTES (4 * SP_READ_CHUNK) /* freed when empty; trimmed after */
#define SP_TRACE_WORDS_MAX 8          /* hops + the id (docs/PROTOCOL.md: 7 hops at most) */
#define SP_ID_BIT 0x80000000u         /* in srv->sp->pipes: ids NNG never gives */
#define SP_EVENTS_MAX 64
#define SP_FRAMES_PER_TURN 8          /* then the other connections' turn (the ready list) */
#define SP_TICK_MS 1000

enum { SP_LISTENER, SP_CONN, SP_WAKE };

typedef struct sp_loop sp_loop;

typedef struct sp_listener {
    int kind; /* SP_LISTENER */
    int fd;
    const char *url;
    bool armed; /* in the epoll set (out of it for a tick after EMFILE) */
} sp_listener;

typedef struct sp_conn {
    int kind; /* SP_CONN */
    int fd;
    uint32_t id;
    struct sp_loop *lp;
    atomic_uint refs;   /* the loop's while open, one per list it is on, one per slot */
    atomic_uint in_flight;  /* its slots out */
    atomic_uint long_polls; /* long-polls among them */
    _Atomic int64_t active_ms; /* mono clock: bytes read, or a reply of it ready */
    /* the loop's alone */
    uint8_t *in;
    size_t in_len, in_cap;
    bool header_in;     /* the peer's SP header was read */
    int64_t header_deadline_ms;
    int64_t partial_since_ms;  /* a request's first byte came (0: none in progress) */
    int64_t request_deadline_ms; /* ... and it must be whole by then */
    struct sp_conn *prev_open, *next_open; /* the loop's list of open connections */
    bool paused;        /* not read: too many in flight or replies not read */
    bool ready;         /* whole requests left after its turn: on the ready list, not read */
    bool dead;          /* closed by the loop; freed at the end of the batch */
    uint32_t mask;      /* the events asked of epoll */
    struct sp_conn *next_wait; /* awaiting the header */
    struct sp_conn *next_paused;
    struct sp_conn *next_ready;
    struct sp_conn *next_closing;
    /* under mu: written by whichever thread answers */
    pthread_mutex_t mu;
    bool closed;
    bool want_out;      /* out holds bytes for the loop to send */
    bool out_listed;    /* on the loop's out list */
    uint8_t *out;
    size_t out_off, out_len, out_cap;
    int64_t out_moved_ms; /* mono clock: replies became pending, or the client took some */
    struct sp_conn *next_out;
} sp_conn;

struct sp_loop {
    server *srv;
    int epfd;
    int wake_kind; /* SP_WAKE: the eventfd's epoll tag */
    int wakefd;
    sp_listener listeners[NET_LISTEN_URLS_MAX];
    unsigned listener_count;
    pthread_t thread, control_thread;
    bool started, control_started;
    atomic_bool stop_accepting;
    atomic_uint in_flight;  /* slots out (all connections) */
    unsigned in_flight_max; /* --contexts */
    atomic_uint paused;     /* connections paused (woken when slots come back) */
    unsigned conn_in_flight_max;  /* --max-in-flight-per-connection */
    unsigned conn_long_polls_max; /* --max-long-polls-per-connection */
    size_t unread_bytes_max;      /* --max-unread-reply-kib */
    uint32_t next_id;
    sp_conn *waiting_header; /* the loop's */
    sp_conn *open_list;      /* the loop's: every connection not yet closed */
    sp_conn *paused_list, *paused_tail; /* the loop's: resumed first in, first out */
    sp_conn *ready_list, *ready_tail;   /* the loop's: served a turn each, in order */
    sp_conn *closing;        /* the loop's: closed in this turn of the loop */
    pthread_mutex_t mu;      /* free slots, the out list, the control queue */
    slot *free_slots;
    sp_conn *out_list;
    slot *control_head, *control_tail;
    pthread_cond_t control_cv;
};

/* ---- sp_loop_setup.c ---- */
int sp_loop_epoll_set(sp_loop *lp, int op, int fd, uint32_t events, void *tag);
/* Wake the loop (from any thread): replies for EPOLLOUT, slots back, the stop. */
void sp_loop_wake(sp_loop *lp);
void sp_loop_close_listeners(sp_loop *lp);
/* Queue a control op for the loop's control thread (slot_way's control). */
void sp_loop_control(slot *s);
void *sp_loop_control_main(void *arg);

/* ---- sp_loop.c ---- */
void *sp_loop_main(void *arg);

#endif
