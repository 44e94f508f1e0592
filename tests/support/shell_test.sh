# tests/support/shell_test.sh — what the shell tests share (sourced, not
# run): a temp directory $tmp removed at exit with the server $pid (when
# set) stopped, and the counters of ok/FAIL lines.
#
#   . "$TALLY_SRCDIR/tests/support/shell_test.sh"
#   shell_test_begin NAME      # $tmp, the trap, failures=0
#   ok WHAT / fail WHAT / expect WHAT WANT GOT
#   wait_serving LOG SECONDS   # tallyd ($pid) wrote "serving" to LOG
#   shell_test_end NAME        # exit 1 with the count when any failed
pid=
failures=0
shell_test_cleanup() {
    [ -n "$pid" ] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null
    rm -rf "$tmp"
}
shell_test_begin() {
    tmp=$(mktemp -d "${TMPDIR:-/tmp}/tally-$1.XXXXXX")
    trap shell_test_cleanup EXIT
}
fail() { echo "FAIL: $*" >&2; failures=$((failures + 1)); }
ok() { echo "ok: $*"; }
expect() { # expect WHAT WANT GOT
    if [ "$2" = "$3" ]; then ok "$1"; else fail "$1: wanted $2, got $3"; fi
}
wait_serving() {
    i=0
    while [ "$i" -lt $(($2 * 10)) ]; do # a loaded machine is slow to start it
        grep -q "serving" "$1" 2>/dev/null && return 0
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.1
        i=$((i + 1))
    done
    grep -q "serving" "$1" 2>/dev/null
}
shell_test_end() {
    [ "$failures" -eq 0 ] || { echo "$1: $failures failures" >&2; exit 1; }
    echo "$1: all passed"
}
