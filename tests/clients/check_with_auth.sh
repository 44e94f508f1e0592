#!/bin/sh
# tests/clients/check_with_auth.sh — libtally's integration suite and the
# torture test's short form again, with tallyd --auth on (docs/SECURITY.md):
# TALLY_TEST_AUTH=1 makes the harness (tests/support/tallyd_harness.c)
# start every tallyd with an auth file of one principal holding every
# grant and give every client its token through $TALLY_TOKEN, so each
# request of these suites is authenticated and authorised on its way in.
# Run by make check from the build directory. The CLI's suite runs the same
# way by hand: TALLY_TEST_AUTH=1 tests/clients/check_cli (docs/TESTING.md).
set -u
export TALLY_TEST_AUTH=1
status=0
for suite in tests/clients/check_libtally tests/torture/check_torture; do
    echo "== $suite with --auth"
    "./$suite" || status=1
done
exit $status
