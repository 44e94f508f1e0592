#!/bin/sh
# tests/variants/cli_over_tcp_nng.sh — the read commands of
# tests/clients/check_cli that page or look up (account list, transfer get)
# with tallyd's tcp:// served by NNG's REP socket (--tcp-engine nng,
# TALLY_TEST_TCP=nng) instead of its own epoll loop, so that the CLI's
# reads are run on every transport tallyd serves: ipc:// (the suite),
# tcp:// on the epoll loop (cli_over_tcp.sh), tls+tcp:// (cli_over_tls.sh)
# and this. Only those cases (CK_RUN_CASE), not the whole suite again: the
# engines share everything above the bytes, which check_raw_sp runs on both.
# (docs/TESTING.md, "Variants").
set -eu
for case in account_list transfer_get; do
    out=$(TALLY_TEST_TCP=nng CK_RUN_CASE=$case "${TALLY_BUILDDIR:-.}/tests/clients/check_cli" 2>&1) ||
        { echo "$out"; exit 1; }
    echo "$out"
    case $out in
        *"Checks: 0,"*) echo "cli_over_tcp_nng: no test case $case in check_cli" >&2; exit 1 ;;
    esac
done
