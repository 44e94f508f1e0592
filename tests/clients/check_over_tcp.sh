#!/bin/sh
# tests/clients/check_over_tcp.sh — libtally's and the CLI's suites and the
# short torture run again with every tallyd's requests on tcp://127.0.0.1
# served by tallyd's own loop (--tcp-engine epoll, net/sp_loop.c): the
# harness's TCP mode (TALLY_TEST_TCP, tests/support/tallyd_tls.h). The
# other suites' clients reach tallyd over ipc://, which NNG serves.
set -u
build=${TALLY_BUILDDIR:-.}
export TALLY_TEST_TCP=epoll
status=0
for suite in tests/clients/check_libtally tests/clients/check_cli tests/torture/check_torture; do
    echo "== $suite over tcp:// (--tcp-engine epoll)"
    "$build/$suite" || status=1
done
exit $status
