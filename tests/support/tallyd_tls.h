/*
 * tallyd_tls.h — the harness's TLS mode (tallyd_harness.h): tallyd serves
 * --listen and --publish on tls+tcp://127.0.0.1 with client certificates
 * required, and the test process's clients (libtally, the CLI it runs)
 * find the CA and their certificate in TALLY_TLS_CA, TALLY_TLS_CERT,
 * TALLY_TLS_KEY. On when tallyd_proc.tls is set or $TALLY_TEST_TLS is "1"
 * (certificates made in the test's temp dir) or a directory of
 * certificates made once by tests/support/make_test_certs.sh (the
 * check_*_tls.sh wrappers do that).
 *
 * The harness's TCP mode, beside it: with $TALLY_TEST_TCP set ("1", or
 * "epoll" or "nng" for tallyd's --tcp-engine) and TLS off, requests go to
 * tcp://127.0.0.1:PORT and the ipc:// URL stays beside it
 * (tests/clients/check_over_tcp.sh).
 */
#ifndef TALLY_TALLYD_TLS_H
#define TALLY_TALLYD_TLS_H

#include "tests/support/tallyd_harness.h"

/* Make certificates in dir with make_test_certs.sh ($TALLY_SRCDIR's);
 * fails the Check test when it cannot. */
void tallyd_tls_make_certs(const char *dir);
/* At tallyd_start, after the ipc:// URLs are set: in TCP mode, move p->url
 * to tcp://127.0.0.1:0 (p->plain_url keeps the ipc:// one). In TLS mode, move
 * p->url and p->pub_url to tls+tcp://127.0.0.1:0 (p->url's ipc:// stays
 * as p->plain_url), find or make the certificates and export the
 * TALLY_TLS_* variables. tallyd chooses the ports; the harness reads them
 * from its ready file. */
void tallyd_tls_prepare(tallyd_proc *p);
/* Export TALLY_TLS_CA, TALLY_TLS_CERT, TALLY_TLS_KEY for p's certificates
 * (nothing when p is not in TLS mode): for a process other than the one
 * that started p, e.g. the runner of a suite whose tallyd a forked keeper
 * started. */
void tallyd_tls_export(const tallyd_proc *p);
/* Append tallyd's TLS options for p to argv (in TCP mode: the ipc://
 * --listen and the --tcp-engine); returns how many (0 when p is in neither
 * mode; at most TALLYD_TLS_ARGS_MAX). */
#define TALLYD_TLS_ARGS_MAX 10
int tallyd_tls_args(const tallyd_proc *p, const char **argv);

#endif
