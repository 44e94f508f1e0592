#!/bin/sh
# tests/support/run_test.sh — how `make check` runs every test (automake's
# LOG_COMPILER and SH_LOG_COMPILER): with its own temp directory, its own
# time bound, and its duration reported.
#
#   run_test.sh PROGRAM [ARGS...]          a test program (tests/net/check_tallyd)
#   run_test.sh /bin/sh SCRIPT [ARGS...]   a shell test (tests/clients/check_with_auth.sh)
#
# - The bound is the test's line in tests/timeouts (about 3x its duration
#   on the quiet 2-core machine), times $TALLY_TEST_SLOWDOWN (1 by default;
#   .ci/run sets it for the sanitizer pass, `make check-long` for valgrind
#   and the loaded run). A test with no line fails at once: every test has
#   a bound. Past the bound the test and every process it started (its
#   process group) get SIGTERM, then SIGKILL 10 s later, and the test fails
#   with what it was running and the tail of every log in its temp dir.
# - TMPDIR is a directory of this test alone (short, for ipc:// paths),
#   removed when the test passes and kept when it fails, so `make check -j`
#   runs tests side by side without sharing a file, a socket or a lock.
# - Check's own per-test timeouts scale with the same factor
#   (CK_TIMEOUT_MULTIPLIER) unless the caller set them.
# - The last line of the test's log says how long it took; the same line is
#   appended to $TALLY_BUILDDIR/test-durations (.ci/run prints the slowest).
set -u
case "${1:-}" in
    */sh | */bash | sh | bash) test=$2 ;;
    *) test=$1 ;;
esac
src=$(cd "${TALLY_SRCDIR:-$(dirname "$0")/../..}" && pwd -P)
# The test's name is its path in the tree (tests/net/check_tallyd), whether
# make gives it from the build directory or, for a script, the source one.
name=$test
[ -e "$test" ] && name=$(cd "$(dirname "$test")" && pwd -P)/$(basename "$test")
[ -n "${TALLY_BUILDDIR:-}" ] && name=${name#"$(cd "$TALLY_BUILDDIR" && pwd -P)"/}
name=${name#"$src"/}
name=${name#./}
slowdown=${TALLY_TEST_SLOWDOWN:-1}

base=$(awk -v t="$name" '$1 == t { print $2; exit }' "$src/tests/timeouts")
if [ -z "$base" ]; then
    echo "run_test: $name has no bound in tests/timeouts (add a line: '$name SECONDS', about 3x its duration)" >&2
    exit 99
fi
bound=$(awk -v b="$base" -v s="$slowdown" 'BEGIN { printf "%d", b * s + 0.5 }')
: "${CK_TIMEOUT_MULTIPLIER:=$slowdown}"
export CK_TIMEOUT_MULTIPLIER

dir=$(mktemp -d "${TMPDIR:-/tmp}/tt.XXXXXX") || exit 99
TMPDIR=$dir
export TMPDIR

start=$(date +%s)
# timeout(1) puts itself and the test in a process group of their own and
# signals the whole group: tallyd, nats-server and the clients a test
# started go with it.
timeout --kill-after=10 "$bound" "$@"
rc=$?
took=$(( $(date +%s) - start ))

if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
    echo
    echo "run_test: TIMEOUT: $name ran past its bound of $bound s ($base s x $slowdown) and was stopped"
    find "$dir" -name '*.log' -type f 2>/dev/null | while read -r log; do
        echo "---- tail of $log ----"
        tail -c 3000 "$log"
    done
    rc=1
fi
echo "# run_test: $name: ${took} s (bound ${bound} s), exit $rc"
if [ -n "${TALLY_BUILDDIR:-}" ] && [ -d "$TALLY_BUILDDIR" ]; then
    echo "$took $bound $name" >> "$TALLY_BUILDDIR/test-durations"
fi
# 77 (skipped) and 0 leave nothing behind; a failure keeps its files.
if [ "$rc" -eq 0 ] || [ "$rc" -eq 77 ]; then
    rm -rf "$dir"
else
    echo "run_test: $name's files are kept in $dir"
fi
exit "$rc"
