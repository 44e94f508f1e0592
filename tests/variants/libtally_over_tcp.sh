#!/bin/sh
# tests/variants/libtally_over_tcp.sh — tests/clients/check_libtally with
# every tallyd's requests on tcp://127.0.0.1 served by tallyd's default
# engine (its own epoll loop, net/sp/sp_loop.c), which libtally reaches from
# the calling thread (clients/transport/sp_direct.c): the default production
# path. The harness's TCP mode: TALLY_TEST_TCP, tests/support/tallyd_tls.h.
# (docs/TESTING.md, "Variants": one suite again in one setting, a test of
# its own so that make check -j runs the variants side by side).
TALLY_TEST_TCP=1 exec "${TALLY_BUILDDIR:-.}/tests/clients/check_libtally"
