#!/bin/sh
# tests/tools/check_options.sh — the command lines of the tools that take
# their options from the option table (common/options.h; tallyd's are
# tests/net/check_config's): for each, --help exits 0 and lists every
# option scripts rely on, with its placeholder; an unknown option, a
# missing value and a stray word exit 2 naming what is wrong and pointing
# to --help; --version prints the name and the package's version. The
# option lists below are the contract: an option that disappears from a
# table fails here. Run by make check (TALLY_BUILDDIR,
# TALLY_SRCDIR from the test environment).
set -u
: "${TALLY_BUILDDIR:?run by make check}" "${TALLY_SRCDIR:?}"
. "$TALLY_SRCDIR/tests/support/shell_test.sh"
shell_test_begin options

# help_lists PROGRAM OPTION...: each "--name" or "--name ARG" starts a
# line of --help's option list ("  --name", or "  -c, --name").
help_lists() {
    program=$1
    shift
    "$TALLY_BUILDDIR/$program" --help >"$tmp/help" 2>"$tmp/err"
    expect "$program --help exits" 0 $?
    for option in "$@"; do
        grep -q -e "^  $option\( \|\$\)" -e "^  -., $option\( \|\$\)" "$tmp/help" ||
            fail "$program --help lacks '$option'"
    done
}

# refuses PROGRAM SAYS ARG...: exit 2, SAYS and the --help hint on stderr.
refuses() {
    program=$1 says=$2
    shift 2
    "$TALLY_BUILDDIR/$program" "$@" >"$tmp/out" 2>"$tmp/err"
    expect "$program $*: exit" 2 $?
    grep -qF -- "$program: $says" "$tmp/err" || fail "$program $*: stderr lacks '$says': $(cat "$tmp/err")"
    grep -qF -- "Try '$program --help'." "$tmp/err" || fail "$program $*: no hint to --help"
}

# usage_errors PROGRAM OPTION-WITH-VALUE: the errors every tool shares.
usage_errors() {
    refuses "$1" "unknown option: --no-such-option" --no-such-option
    refuses "$1" "$2: a value is missing" "$2"
}

help_lists tally-demo "--data DIR" "--help"
grep -q '^  -d, --data DIR' "$tmp/help" || fail "tally-demo --help lacks -d"
"$TALLY_BUILDDIR/tally-demo" -h >/dev/null 2>&1
expect "tally-demo -h exits" 0 $?
usage_errors tally-demo --data
refuses tally-demo "unknown option: -x" -x
"$TALLY_BUILDDIR/tally-demo" -d "$tmp/demo" >"$tmp/demo.out" 2>&1
expect "tally-demo -d DIR exits" 0 $?
grep -q "^store: $tmp/demo\$" "$tmp/demo.out" || fail "tally-demo -d DIR: $(head -3 "$tmp/demo.out")"

help_lists tally-stripe-mapper "--url URL" "--source NAME" "--feature NAME" "--subscriber NAME" \
    "--consumer NAME" "--until-idle" "--help"
usage_errors tally-stripe-mapper --url
refuses tally-stripe-mapper "unexpected argument: extra" extra

help_lists tally-echo "--listen URL" "--contexts N" "--max-bytes N" "--help"
usage_errors tally-echo --listen
refuses tally-echo "--contexts: not a count in range 1..4096: 0" --listen "ipc://$tmp/e" --contexts 0

help_lists tally-readmodel "--data DIR" "--url URL" "--once" "--dump" "--json" "--batch N" \
    "--wait-ms N" "--timeout-ms N" "--map-size-mb N" "--retention-hours N" "--help"
usage_errors tally-readmodel --batch
refuses tally-readmodel "--wait-ms: not a number in range 1..30000: 0" --wait-ms 0

help_lists tally-recon "--data DIR" "--json" "--statement FILE" "--drift N" "--through SEQ" \
    "--no-rebuild" "--max-findings N" "--progress" "--no-progress" "--help"
usage_errors tally-recon --data
refuses tally-recon "--max-findings: not a count in range 0..100000: x" --data "$tmp" \
    --max-findings x

help_lists tally-bench "--url URL" "--tls-ca FILE" "--tls-cert FILE" "--tls-key FILE" \
    "--clients N" "--seconds S" "--ops N" "--batch N" "--accounts N" "--dup-ratio R" \
    "--concurrent-share F" "--json" "--seed N" "--consumer NAME" "--token-file FILE" \
    "--client-mode M" "--no-autobatch" "--server-pid PID" "--timeout-ms N" "--attempts N" \
    "--amount-max N" "--user-data" "--keys ORDER" "--echo" "--echo-bytes N" "--stream" "--from-seq N" \
    "--stream-page N" "--publish URL" "--progress" "--no-progress" "--help"
usage_errors tally-bench --clients
refuses tally-bench "--client-mode: shared or per-thread: both" --client-mode both
refuses tally-bench "--dup-ratio: not a fraction 0..1: 2" --dup-ratio 2

if [ -x "$TALLY_BUILDDIR/tally-relay" ]; then
    help_lists tally-relay "--config FILE" "--url URL" "--tls-ca FILE" "--tls-cert FILE" \
        "--tls-key FILE" "--subscriber NAME" "--instance ID" "--token-file FILE" "--nats URL" \
        "--stream NAME" "--subject TEMPLATE" "--http URL" "--ready-file FILE" "--lock-dir DIR" \
        "--check" "--help"
    usage_errors tally-relay --config
    refuses tally-relay "unexpected argument: extra" extra
else
    ok "tally-relay is not built: skipped"
fi

# --version: every program prints "NAME VERSION" (the package's) and exits 0
version=$(sed -n 's/^AC_INIT(\[[^]]*\], *\[\([^]]*\)\].*/\1/p' "$TALLY_SRCDIR/configure.ac")
[ -n "$version" ] || fail "no version in configure.ac's AC_INIT"
for program in tallyd tally tally-recon tally-relay tally-bench tally-echo tally-readmodel \
    tally-stripe-mapper tally-demo; do
    [ -x "$TALLY_BUILDDIR/$program" ] || continue
    out=$("$TALLY_BUILDDIR/$program" --version 2>&1)
    expect "$program --version exits" 0 $?
    [ "$out" = "$program $version" ] || fail "$program --version: '$out', want '$program $version'"
done

shell_test_end options
