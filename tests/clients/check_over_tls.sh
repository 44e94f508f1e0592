#!/bin/sh
# tests/clients/check_over_tls.sh — libtally's and the CLI's suites again,
# with tallyd on tls+tcp:// (request/reply and publish) and client
# certificates required: TALLY_TEST_TLS names a directory of certificates
# made once for the run (tests/support/make_test_certs.sh), which the
# harness gives tallyd and the clients (tests/support/tallyd_tls.h).
set -eu
src=${TALLY_SRCDIR:-$(cd "$(dirname "$0")/../.." && pwd)}
build=${TALLY_BUILDDIR:-.}
dir=$(mktemp -d "${TMPDIR:-/tmp}/tally-tls-suites-XXXXXX")
trap 'rm -rf "$dir"' EXIT
sh "$src/tests/support/make_test_certs.sh" "$dir"
TALLY_TEST_TLS=$dir
export TALLY_TEST_TLS
"$build/tests/clients/check_libtally"
"$build/tests/clients/check_cli"
