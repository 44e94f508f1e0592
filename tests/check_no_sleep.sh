#!/bin/sh
# tests/check_no_sleep.sh — no test waits on the clock (docs/TESTING.md,
# "Wait on facts, never on time"): fails naming file:line on any sleep
# under tests/ outside the one pause of each kind of test,
#   C:     sleep( usleep( nanosleep( clock_nanosleep( nng_msleep( and
#          poll(NULL, 0, ...) in tests/**/*.c and *.h, except
#          tests/support/wait.c (test_pause_ms);
#   shell: a sleep command in tests/**/*.sh, except the pause() line of
#          tests/support/shell_test.sh;
#   Python: sleep( in clients/python/tests/*.py (the Python client's
#          tests), except the pause of wait_for in its support.py;
# unless the line is on tests/sleep-allow.txt (FILE|TEXT|REASON: a line of
# FILE containing TEXT). An entry that matches no sleep fails too, so the
# list only shrinks. Reads the sources under $TALLY_SRCDIR (make check sets
# it; a VPATH build such as distcheck's has no sources in its own tree).
set -u
src=${TALLY_SRCDIR:-$(cd "$(dirname "$0")/.." && pwd)}
allow="$src/tests/sleep-allow.txt"
[ -d "$src/tests/support" ] || { echo "check_no_sleep: no tests/ under $src" >&2; exit 1; }
[ -f "$allow" ] || { echo "check_no_sleep: no $allow" >&2; exit 1; }
tmp=$(mktemp -d "${TMPDIR:-/tmp}/tally-no-sleep.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

cd "$src" || exit 1
c_sleep='(^|[^[:alnum:]_])(sleep|usleep|nanosleep|clock_nanosleep|nng_msleep)[[:space:]]*\(|(^|[^[:alnum:]_])poll[[:space:]]*\([[:space:]]*(NULL|0)[[:space:]]*,[[:space:]]*0[[:space:]]*,'
sh_sleep='(^|[^[:alnum:]_.$/-])sleep([[:space:]]|;|$)'
py_sleep='(^|[^[:alnum:]_])sleep[[:space:]]*\('
{
    find tests -type f \( -name '*.c' -o -name '*.h' \) ! -path tests/support/wait.c | sort |
        while read -r f; do grep -nE "$c_sleep" "$f" | sed "s|^|$f:|"; done
    find tests -type f -name '*.sh' | sort | while read -r f; do
        # a shell comment is not a sleep; shell_test.sh's pause() is the one
        grep -nE "$sh_sleep" "$f" | grep -vE '^[0-9]+:[[:space:]]*#' |
            if [ "$f" = tests/support/shell_test.sh ]; then grep -vE '^[0-9]+:pause\(\) \{'; else cat; fi |
            sed "s|^|$f:|"
    done
    find clients/python/tests -type f -name '*.py' 2>/dev/null | sort | while read -r f; do
        grep -nE "$py_sleep" "$f" | grep -vE '^[0-9]+:[[:space:]]*#' |
            if [ "$f" = clients/python/tests/support.py ]; then
                grep -vE '^[0-9]+:[[:space:]]*time\.sleep\(0\.02\)  # the one pause$'
            else cat; fi | sed "s|^|$f:|"
    done
} >"$tmp/found"

# FILE|TEXT|REASON lines (# comments and blank lines skipped)
grep -vE '^[[:space:]]*(#|$)' "$allow" >"$tmp/allow" || true
failures=0
while IFS= read -r hit; do
    file=${hit%%:*}
    rest=${hit#*:}
    text=${rest#*:}
    allowed=no
    while IFS='|' read -r afile atext areason; do
        [ "$afile" = "$file" ] || continue
        case $text in *"$atext"*) allowed=yes; break ;; esac
    done <"$tmp/allow"
    if [ "$allowed" = no ]; then
        echo "check_no_sleep: $file:${rest%%:*}: sleeps (wait on a fact with tests/support/wait.h or shell_test.sh's wait_for, or pause with test_pause_ms): $text" >&2
        failures=$((failures + 1))
    fi
done <"$tmp/found"
while IFS='|' read -r afile atext areason; do
    [ -n "$areason" ] || { echo "check_no_sleep: tests/sleep-allow.txt: $afile|$atext has no reason" >&2; failures=$((failures + 1)); }
    grep -F "$afile:" "$tmp/found" | cut -d: -f3- | grep -qF "$atext" ||
        { echo "check_no_sleep: tests/sleep-allow.txt: $afile|$atext matches no sleep: remove it" >&2; failures=$((failures + 1)); }
done <"$tmp/allow"
[ "$failures" -eq 0 ] || { echo "check_no_sleep: $failures failures" >&2; exit 1; }
echo "check_no_sleep: $( (find tests -type f \( -name '*.c' -o -name '*.h' -o -name '*.sh' \); find clients/python/tests -name '*.py' 2>/dev/null) | wc -l) files, $(wc -l <"$tmp/found") allowed sleeps"
