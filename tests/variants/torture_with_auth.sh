#!/bin/sh
# tests/variants/torture_with_auth.sh — the torture run with tallyd --auth
# on (TALLY_TEST_AUTH=1, as libtally_with_auth.sh).
# (docs/TESTING.md, "Variants": one suite again in one setting, a test of
# its own so that make check -j runs the variants side by side).
TALLY_TEST_AUTH=1 exec "${TALLY_BUILDDIR:-.}/tests/torture/check_torture"
