#!/bin/sh
# tests/clients/check_readme_tour.sh — README.md's tour of the CLI, run as
# written (every line but the one that follows the log until Ctrl-C)
# against a real tallyd started in a fresh directory the way `./setup.sh
# run` leaves things: ./build holds the programs, ./tally-data the store;
# only the endpoints differ (ports of the kernel's, given to the CLI by
# TALLY_URL and TALLY_PUBLISH, so tests may run side by side). Also the
# `tally tail --count` note: with fewer events waiting than asked for, it
# says so on stderr rather than waiting silently. Run by make check
# (TALLYD, TALLY_SRCDIR from the test environment).
set -u
: "${TALLYD:?run by make check}" "${TALLY_SRCDIR:?}"
. "$TALLY_SRCDIR/tests/support/shell_test.sh"
shell_test_begin readme_tour

mkdir "$tmp/here"
cd "$tmp/here" || exit 1
ln -s "$(dirname "$TALLYD")" build
"$TALLYD" --listen tcp://127.0.0.1:0 --publish tcp://127.0.0.1:0 --http http://127.0.0.1:0 \
    --ready-file "$tmp/ready" >"$tmp/tallyd.log" 2>&1 &
pid=$!
wait_for "tallyd's ready file" 60 test -s "$tmp/ready" || { fail "tallyd started"; cat "$tmp/tallyd.log"; shell_test_end readme_tour; }
TALLY_URL=$(sed -n 's/^listen //p' "$tmp/ready")
TALLY_PUBLISH=$(sed -n 's/^publish //p' "$tmp/ready")
export TALLY_URL TALLY_PUBLISH

# the first ```sh block after the tour's heading, without interactive lines
awk '/^## A tour of the CLI/ {tour = 1} tour && /^```sh$/ {inside = 1; next}
     inside && /^```$/ {exit} inside' "$TALLY_SRCDIR/README.md" | grep -v 'Ctrl-C' >"$tmp/tour.sh"
lines=$(grep -c . "$tmp/tour.sh")
[ "$lines" -ge 20 ] || fail "the tour has $lines lines: README's block not found"
if timeout 600 sh -eux "$tmp/tour.sh" >"$tmp/tour.out" 2>&1; then
    ok "README's tour runs as written ($lines lines)"
else
    fail "README's tour: $(tail -5 "$tmp/tour.out")"
fi
grep -q '"credits_posted"' "$tmp/tour.out" || fail "the tour's --json account get printed no account"
ls -d backup-* >/dev/null 2>&1 || fail "the tour's backup made no directory here"

# --count beyond what is waiting: a note on stderr, then events as they come
PATH="$PWD/build:$PATH" tally tail --subscriber late --from-now --count 2 >"$tmp/late.out" 2>"$tmp/late.err" &
tail_pid=$!
wait_for "tally tail's note that it waits" 60 grep -q "waiting for 2 more to reach --count 2" "$tmp/late.err" ||
    fail "no waiting note: $(cat "$tmp/late.err")"
PATH="$PWD/build:$PATH" tally account open 901 --ledger 1 --code 1 >/dev/null &&
    PATH="$PWD/build:$PATH" tally account open 902 --ledger 1 --code 1 >/dev/null || fail "two more accounts"
if wait "$tail_pid"; then ok "tally tail --count 2 ended after two new events"; else fail "tally tail: $(cat "$tmp/late.err")"; fi
shell_test_end readme_tour
