# tests/support/shell_test.sh — what the shell tests share (sourced, not
# run): a temp directory $tmp removed at exit with the server $pid (when
# set) stopped, and the counters of ok/FAIL lines.
#
#   . "$TALLY_SRCDIR/tests/support/shell_test.sh"
#   shell_test_begin NAME      # $tmp, the trap, failures=0
#   ok WHAT / fail WHAT / expect WHAT WANT GOT
#   wait_serving LOG SECONDS   # tallyd ($pid) wrote "serving" to LOG
#   start_tallyd_http WHO OPTION...  # tallyd ($pid) serving, $base its HTTP URL
#   wait_for WHAT SECONDS CMD...  # CMD succeeds within SECONDS scaled
#   pause SECONDS              # the only sleep of the shell tests
#   npm_ci DIR                 # DIR/node_modules as DIR/package-lock.json pins it
#   shell_test_end NAME        # exit 1 with the count when any failed
#
# Waits are on facts, never on time (docs/TESTING.md): wait_for polls CMD
# every 0.1 s for SECONDS times the slowdown factor of the C suites
# (tests/support/wait.h): $TALLY_TEST_SLOWDOWN, else 6 under
# $TALLYD_WRAPPER, else 1; past it, it names WHAT on stderr and returns 1.
# pause is for a poll interval or a pause that is an input of a test,
# never a synchronisation; tests/check_no_sleep.sh fails on any other sleep.
pid=
failures=0
if [ -n "${TALLY_TEST_SLOWDOWN:-}" ]; then
    shell_test_slowdown=$TALLY_TEST_SLOWDOWN
elif [ -n "${TALLYD_WRAPPER:-}" ]; then
    shell_test_slowdown=6
else
    shell_test_slowdown=1
fi
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
pause() { sleep "$1"; }
wait_for() { # wait_for WHAT SECONDS CMD...
    wait_for_what=$1 wait_for_seconds=$2
    wait_for_tries=$(awk -v s="$2" -v f="$shell_test_slowdown" \
        'BEGIN { t = s * f * 10; print (t == int(t)) ? t : int(t) + 1 }')
    shift 2
    wait_for_try=0
    until "$@"; do
        if [ "$wait_for_try" -ge "$wait_for_tries" ]; then
            echo "waited $wait_for_seconds s (times slowdown $shell_test_slowdown) for: $wait_for_what" >&2
            return 1
        fi
        pause 0.1
        wait_for_try=$((wait_for_try + 1))
    done
}
# Whether LOG says "serving" or tallyd ($pid) is gone (nothing to wait for).
serving_or_gone() { grep -q "serving" "$1" 2>/dev/null || ! kill -0 "$pid" 2>/dev/null; }
wait_serving() { # a loaded machine is slow to start it
    wait_for "tallyd's \"serving\" in $1" "$2" serving_or_gone "$1"
    grep -q "serving" "$1" 2>/dev/null
}
# start_tallyd_http WHO OPTION...: tallyd ($pid) with OPTIONs and its HTTP
# face on a port of the kernel's; its log $tmp/tallyd.log, its ready file
# $tmp/ready; $base its HTTP URL. Exits 1 (WHO in the message) when it does
# not start.
start_tallyd_http() {
    start_who=$1
    shift
    "$TALLYD" "$@" --http "http://127.0.0.1:0" --ready-file "$tmp/ready" >"$tmp/tallyd.log" 2>&1 &
    pid=$!
    wait_serving "$tmp/tallyd.log" 30 && [ -f "$tmp/ready" ] ||
        { cat "$tmp/tallyd.log" >&2; echo "$start_who: tallyd did not start" >&2; exit 1; }
    base=$(sed -n 's/^http //p' "$tmp/ready")
}
# npm_ci DIR: npm ci in DIR when its committed package-lock.json is newer
# than what is installed (setup.sh does the same); on failure npm's output
# goes to stderr and it returns 1.
npm_ci() {
    if [ ! -f "$1/node_modules/.package-lock.json" ] ||
        [ "$1/package-lock.json" -nt "$1/node_modules/.package-lock.json" ]; then
        (cd "$1" && npm ci --no-audit --no-fund >"$tmp/npm.log" 2>&1) ||
            { cat "$tmp/npm.log" >&2; return 1; }
    fi
}
shell_test_end() {
    [ "$failures" -eq 0 ] || { echo "$1: $failures failures" >&2; exit 1; }
    echo "$1: all passed"
}
