#!/bin/sh
# tests/tools/check_progress.sh — the progress line (common/progress.h) of
# tally-recon, `tally backup` and tally-bench against a real tallyd: under a
# pseudo-terminal (script(1) from util-linux) each shows a line rewritten
# with '\r' and a percent; through a pipe none; --progress through a pipe
# shows it, --no-progress under a terminal does not; and the --json
# document on stdout is the same with and without it (numbers, which carry
# the timings, the seed and sizes, compared as N). Run by make check
# (TALLYD, TALLY, TALLY_BENCH, TALLY_RECON, TALLY_SRCDIR from the test
# environment).
set -u
: "${TALLYD:?run by make check}" "${TALLY:?}" "${TALLY_BENCH:?}" "${TALLY_RECON:?}" "${TALLY_SRCDIR:?}"
command -v script >/dev/null 2>&1 || { echo "check_progress: script(1) (util-linux) is needed" >&2; exit 1; }
. "$TALLY_SRCDIR/tests/support/shell_test.sh"
shell_test_begin progress
cr=$(printf '\r')

"$TALLYD" --data "$tmp/data" --listen "ipc://$tmp/rep" --publish "ipc://$tmp/pub" --http none \
    >"$tmp/tallyd.log" 2>&1 &
pid=$!
wait_serving "$tmp/tallyd.log" 60 || { cat "$tmp/tallyd.log" >&2; echo "check_progress: tallyd did not start" >&2; exit 1; }
url="ipc://$tmp/rep"

# on_tty NAME CMD: run CMD (a shell command line) under a pseudo-terminal;
# what the terminal showed goes to $tmp/NAME.tty.
on_tty() {
    script -q -e -c "$2" /dev/null </dev/null >"$tmp/$1.tty" 2>&1
}
# shows_progress FILE PREFIX: a line rewritten with \r, with a percent.
shows_progress() { grep -a "$cr" "$1" | grep -a "$2: " | grep -aq '%'; }
# The JSON with backup paths as D and numbers as N (timings, seeds, sizes).
normalize() { sed -E -e 's#/bk-[0-9]+#D#g' -e 's/-?[0-9]+(\.[0-9]+)?([eE][-+]?[0-9]+)?/N/g' "$1"; }

# check TOOL PREFIX CMD-WITHOUT-JSON: the five cases for one tool.
check() {
    name=$1 prefix=$2 cmd=$3
    on_tty "$name-tty" "$cmd" || fail "$name under a terminal exited non-zero: $(cat "$tmp/$name-tty.tty")"
    if shows_progress "$tmp/$name-tty.tty" "$prefix"; then ok "$name: progress on a terminal"
    else fail "$name: no progress on a terminal: $(cat -A "$tmp/$name-tty.tty" | head -c 2000)"; fi
    sh -c "$cmd" >"$tmp/$name-pipe.out" 2>&1 </dev/null || fail "$name through a pipe exited non-zero"
    if grep -aq "$cr" "$tmp/$name-pipe.out" || grep -aq "$prefix: .*%" "$tmp/$name-pipe.out"; then
        fail "$name: progress through a pipe: $(cat -A "$tmp/$name-pipe.out" | head -c 2000)"
    else ok "$name: silent through a pipe"; fi
    sh -c "$cmd --progress" >"$tmp/$name-forced.out" 2>&1 </dev/null || fail "$name --progress exited non-zero"
    if shows_progress "$tmp/$name-forced.out" "$prefix"; then ok "$name: --progress through a pipe"
    else fail "$name: --progress shows nothing through a pipe: $(cat -A "$tmp/$name-forced.out" | head -c 2000)"; fi
    on_tty "$name-off" "$cmd --no-progress" || fail "$name --no-progress exited non-zero"
    if grep -aq "$prefix: .*%" "$tmp/$name-off.tty"; then
        fail "$name: --no-progress under a terminal: $(cat -A "$tmp/$name-off.tty" | head -c 2000)"
    else ok "$name: --no-progress silent on a terminal"; fi
}
# json_same NAME CMD-WITH-JSON-ONE CMD-WITH-JSON-TWO: stdout under a
# terminal (stderr on it, progress shown) and through a pipe are the same.
json_same() {
    on_tty "$1-json" "$2 >$tmp/$1-tty.json" || fail "$1 --json under a terminal exited non-zero"
    grep -aq "$cr" "$tmp/$1-json.tty" || fail "$1 --json: no progress on the terminal's stderr"
    sh -c "$3" >"$tmp/$1-pipe.json" 2>/dev/null </dev/null || fail "$1 --json through a pipe exited non-zero"
    grep -q '^{' "$tmp/$1-pipe.json" || fail "$1 --json printed no document: $(cat "$tmp/$1-pipe.json")"
    normalize "$tmp/$1-tty.json" >"$tmp/$1-a"
    normalize "$tmp/$1-pipe.json" >"$tmp/$1-b"
    if cmp -s "$tmp/$1-a" "$tmp/$1-b"; then ok "$1: --json is the same with progress"
    else fail "$1: --json differs with progress: $(diff "$tmp/$1-a" "$tmp/$1-b" | head -20)"; fi
}

bench="$TALLY_BENCH --url $url --accounts 50 --clients 2 --batch 10 --ops 3000"
check tally-bench tally-bench "$bench"
json_same tally-bench "$bench --seed 7 --json" "$bench --seed 7 --json"
# A timed run: the share of its time.
# --stream: events read of the log (the runs above wrote a few thousand)
check tally-bench-stream tally-bench "$TALLY_BENCH --url $url --stream"
on_tty bench-timed "$TALLY_BENCH --url $url --accounts 50 --clients 2 --seconds 1"
shows_progress "$tmp/bench-timed.tty" tally-bench && grep -aq '/1.0 s (' "$tmp/bench-timed.tty" &&
    ok "tally-bench --seconds: the time's share" ||
    fail "tally-bench --seconds: no timed progress: $(cat -A "$tmp/bench-timed.tty" | head -c 2000)"

recon="$TALLY_RECON --data $tmp/data"
check tally-recon tally-recon "$recon"
grep -a "$cr" "$tmp/tally-recon-tty.tty" | grep -aq "tally-recon: log [0-9.k]*/[0-9.k]* (" ||
    fail "tally-recon: the log walk's events of the head seq are shown"
json_same tally-recon "$recon --json" "$recon --json"

# Each run a new DEST: $$ of the shell that runs the command.
backup="$TALLY --url $url backup $tmp/bk-\$\$"
check "tally-backup" "tally backup" "$backup"
grep -a "$cr" "$tmp/tally-backup-tty.tty" | grep -aq "tally backup: copied .*B/.*iB (" ||
    fail "tally backup: bytes of the store's size are shown: $(cat -A "$tmp/tally-backup-tty.tty")"
json_same tally-backup "$backup --json" "$backup --json"
for d in "$tmp"/bk-*; do
    "$TALLY_RECON" --data "$d" >/dev/null 2>&1 || fail "backup $d is not a clean store"
done

kill "$pid"
wait "$pid"
expect "tallyd stops cleanly" 0 $?
pid=
shell_test_end check_progress
