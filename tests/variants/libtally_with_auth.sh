#!/bin/sh
# tests/variants/libtally_with_auth.sh — libtally's suite with tallyd --auth
# on: TALLY_TEST_AUTH=1 makes the harness start every tallyd with an auth
# file of one principal holding every grant and give every client its token
# through $TALLY_TOKEN (docs/SECURITY.md).
# (docs/TESTING.md, "Variants": one suite again in one setting, a test of
# its own so that make check -j runs the variants side by side).
TALLY_TEST_AUTH=1 exec "${TALLY_BUILDDIR:-.}/tests/clients/check_libtally"
