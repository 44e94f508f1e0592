/*
 * sp_loop.h — tallyd's own transport for tcp:// request endpoints: one
 * epoll thread speaking NNG's SP layer (REQ0/REP0 over TCP) itself
 * (net/sp/sp_loop.c; --tcp-engine, docs/DESIGN.md "The tcp:// loop").
 */
#ifndef TALLY_NET_SP_LOOP_H
#define TALLY_NET_SP_LOOP_H

#include "net/engine/options.h"

#include <nng/nng.h>
#include <stdbool.h>

struct server;

/* Whether the loop serves this --listen URL (tcp:// with --tcp-engine epoll). */
bool sp_loop_serves(const net_server_options *opt, const char *url);

/* Open the loop and its listening sockets (errors logged; an NNG code).
 * Start its threads once the threads that answer requests run. Stop
 * accepting at the stop; the loop keeps sending replies until the
 * process exits. */
int sp_loop_open(struct server *srv);
int sp_loop_start(struct server *srv);
void sp_loop_stop_accepting(struct server *srv);

#endif
