/*
 * server.h — tallyd's server: the engine (net/engine/) with its transports
 * (net/sp/) and its HTTP face (net/http/) over one store.
 *
 * Threads: NNG's callback threads decode requests and answer reads (each in
 * its own read-only transaction, never waiting for the writer); one writer
 * thread applies queued writes in groups, commits once per group, then
 * replies and publishes (itself, or through a completer thread: replies);
 * one waiter thread finishes long-polls. Replies to writes are sent only
 * after their group's commit returned.
 */
#ifndef TALLY_NET_SERVER_H
#define TALLY_NET_SERVER_H

#include "net/engine/options.h"

#include <signal.h>

/* Exit status of a start refused because the store is damaged: LMDB's
 * meta pages, the format or head record, or the hash chain of the last
 * events (the check at open; --skip-open-check skips it). */
#define NET_EXIT_STORE_DAMAGED 3

/* Run until *stop becomes non-zero (set it from a signal handler), then
 * stop taking requests, finish and answer the group in progress, refuse
 * what is still queued with shutting_down, close the store. Returns 0 on a
 * clean stop, 1 when the server could not start (message on stderr),
 * NET_EXIT_STORE_DAMAGED when the store is damaged (message on stderr). */
int net_server_run(const net_server_options *opt, volatile sig_atomic_t *stop);

#endif
