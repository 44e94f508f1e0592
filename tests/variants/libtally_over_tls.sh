#!/bin/sh
# tests/variants/libtally_over_tls.sh — tests/clients/check_libtally with tallyd on
# tls+tcp:// (request/reply and publish), client certificates required, and
# --auth on: TALLY_TEST_TLS names a directory of certificates made once for
# the run (tests/support/make_test_certs.sh), which the harness gives tallyd
# and the clients (tests/support/tallyd_tls.h); TALLY_TEST_AUTH=1 starts
# every tallyd with an auth file and gives the clients its token.
# (docs/TESTING.md, "Variants": one suite again in one setting, a test of
# its own so that make check -j runs the variants side by side).
set -eu
src=${TALLY_SRCDIR:-$(cd "$(dirname "$0")/../.." && pwd)}
dir=$(mktemp -d "${TMPDIR:-/tmp}/tls-XXXXXX")
trap 'rm -rf "$dir"' EXIT
sh "$src/tests/support/make_test_certs.sh" "$dir"
TALLY_TEST_TLS=$dir TALLY_TEST_AUTH=1 "${TALLY_BUILDDIR:-.}/tests/clients/check_libtally"
