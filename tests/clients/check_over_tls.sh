#!/bin/sh
# tests/clients/check_over_tls.sh — libtally's and the CLI's suites again,
# with tallyd on tls+tcp:// (request/reply and publish), client
# certificates required, and --auth on (issue 15: "the existing integration
# tests passing over tls+tcp:// with auth on"): TALLY_TEST_TLS names a
# directory of certificates made once for the run
# (tests/support/make_test_certs.sh), which the harness gives tallyd and the
# clients (tests/support/tallyd_tls.h); TALLY_TEST_AUTH=1 starts every
# tallyd with an auth file and gives the clients its token
# (tests/clients/check_with_auth.sh).
set -eu
src=${TALLY_SRCDIR:-$(cd "$(dirname "$0")/../.." && pwd)}
build=${TALLY_BUILDDIR:-.}
dir=$(mktemp -d "${TMPDIR:-/tmp}/tally-tls-suites-XXXXXX")
trap 'rm -rf "$dir"' EXIT
sh "$src/tests/support/make_test_certs.sh" "$dir"
TALLY_TEST_TLS=$dir
TALLY_TEST_AUTH=1
export TALLY_TEST_TLS TALLY_TEST_AUTH
"$build/tests/clients/check_libtally"
"$build/tests/clients/check_cli"
