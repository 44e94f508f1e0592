#!/bin/sh
# tests/variants/libtally_over_tcp_nng_client.sh — libtally's suite over
# tcp:// with libtally on its NNG transport (TALLY_CLIENT_TRANSPORT=nng)
# against tallyd's default engine.
# (docs/TESTING.md, "Variants": one suite again in one setting, a test of
# its own so that make check -j runs the variants side by side).
TALLY_TEST_TCP=1 TALLY_CLIENT_TRANSPORT=nng exec "${TALLY_BUILDDIR:-.}/tests/clients/check_libtally"
