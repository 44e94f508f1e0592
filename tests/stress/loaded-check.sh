#!/bin/sh
# tests/stress/loaded-check.sh — the plain suite on a loaded machine: two
# busy loops (one per core of the 2-core CI machine) spin beside
# `make check -j4` for the whole run, so every test runs with the CPU taken
# from it at any moment. A test that synchronises on the clock instead of
# on a fact fails here first. docs/TESTING.md records the runs.
#
#   tests/stress/loaded-check.sh [--runs N] [--busy N] [BUILDDIR]
#
#   --runs N   run the suite N times in a row (default 1); stop at the first failure
#   --busy N   busy loops beside it (default 2)
#   BUILDDIR   a configured, built tree (default ./build)
#
# The suite runs with TALLY_TEST_SLOWDOWN=3 (every bound of tests/timeouts
# and every in-test deadline three times longer: the machine is about that
# much slower for each test) unless set. Prints one line per run: its
# result, its time, the load average at its end, its slowest test.
set -u
runs=1 busy=2 build=./build
while [ $# -gt 0 ]; do
    case "$1" in
        --runs) runs=$2; shift 2 ;;
        --busy) busy=$2; shift 2 ;;
        -h | --help) sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        -*) echo "loaded-check.sh: unknown option $1" >&2; exit 2 ;;
        *) build=$1; shift ;;
    esac
done
[ -f "$build/Makefile" ] || { echo "loaded-check.sh: $build is not a configured build" >&2; exit 2; }
: "${TALLY_TEST_SLOWDOWN:=3}"
export TALLY_TEST_SLOWDOWN

pids=
stop_busy() { [ -z "$pids" ] || kill $pids 2>/dev/null; pids=; }
trap 'stop_busy' EXIT
trap 'stop_busy; exit 130' INT TERM
i=0
while [ "$i" -lt "$busy" ]; do
    sh -c 'while :; do :; done' &
    pids="$pids $!"
    i=$((i + 1))
done

make -C "$build" -j2 >/dev/null || { echo "loaded-check.sh: the build failed" >&2; exit 1; }
run=1
status=0
while [ "$run" -le "$runs" ]; do
    rm -f "$build/test-durations"
    t0=$(date +%s)
    make -C "$build" -j4 check >"$build/loaded-check.$run.log" 2>&1
    rc=$?
    took=$(( $(date +%s) - t0 ))
    load=$(cut -d' ' -f1-3 /proc/loadavg)
    worst=$(sort -rn "$build/test-durations" 2>/dev/null | head -n 1)
    result=passed
    [ "$rc" -eq 0 ] || result=FAILED
    echo "loaded-check: run $run of $runs $result in ${took} s, load $load, slowest: $worst ($(date -u +%FT%TZ))"
    if [ "$rc" -ne 0 ]; then
        grep -E '^(FAIL|ERROR):' "$build/loaded-check.$run.log"
        echo "loaded-check: the failed tests' logs are in $build/test-suite.log"
        status=1
        break
    fi
    run=$((run + 1))
done
exit "$status"
