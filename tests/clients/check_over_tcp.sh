#!/bin/sh
# tests/clients/check_over_tcp.sh — libtally's and the CLI's suites and the
# short torture run again with every tallyd's requests on tcp://127.0.0.1
# served by tallyd's own loop (--tcp-engine epoll, net/sp_loop.c): the
# harness's TCP mode (TALLY_TEST_TCP, tests/support/tallyd_tls.h). On
# tcp:// libtally speaks SP from the calling thread (clients/sp_direct.c);
# libtally's suite runs once more on its NNG transport
# (TALLY_CLIENT_TRANSPORT=nng). The other suites' clients reach tallyd over
# ipc://, which NNG serves on both sides.
set -u
build=${TALLY_BUILDDIR:-.}
export TALLY_TEST_TCP=epoll
status=0
for suite in tests/clients/check_libtally tests/clients/check_cli tests/torture/check_torture; do
    echo "== $suite over tcp:// (--tcp-engine epoll)"
    "$build/$suite" || status=1
done
echo "== tests/clients/check_libtally over tcp:// with TALLY_CLIENT_TRANSPORT=nng"
TALLY_CLIENT_TRANSPORT=nng "$build/tests/clients/check_libtally" || status=1
exit $status
