#!/bin/sh
# check-logs.sh LOGDIR — fail when any valgrind memcheck log in LOGDIR
# (one per tallyd started under `make valgrind-check`) reports an error or a
# definite leak.
#
# valgrind writes its error reports at exit, so only tallyd processes that
# exited (SIGTERM, the way every suite stops tallyd at its end) have a
# report; those killed with SIGKILL (the crash tests) leave a log without an
# ERROR SUMMARY, which is counted, not failed. Definite leaks count as
# errors (--errors-for-leak-kinds=definite), so "ERROR SUMMARY: 0 errors"
# means no error and no definite leak.
set -eu
dir=${1:?usage: check-logs.sh LOGDIR}
total=0 clean=0 killed=0 bad=0
for log in "$dir"/*.log; do
    [ -e "$log" ] || continue
    total=$((total + 1))
    if grep -q "ERROR SUMMARY: 0 errors" "$log"; then
        clean=$((clean + 1))
    elif grep -q "ERROR SUMMARY:" "$log"; then
        bad=$((bad + 1))
        echo "==== $log"
        cat "$log"
    else
        killed=$((killed + 1))
    fi
done
echo "valgrind: $total tallyd processes: $clean exited clean, $bad with errors," \
     "$killed killed (no report)"
if [ "$total" -eq 0 ] || [ "$clean" -eq 0 ]; then
    echo "valgrind: no tallyd exited under valgrind: nothing was checked" >&2
    exit 1
fi
[ "$bad" -eq 0 ]
