#!/bin/bash
# bench_ab.sh — two builds of tally side by side: effects per second of each
# build's tallyd, measured by the same tally-bench (build A's), in
# interleaved rounds (A, B; then B, A; ...) so that neither always runs
# first on a machine that drifts; prints every run and each side's median
# per workload. See docs/BENCHMARKS.md, "Two builds side by side".
#
#   tools/bench_ab.sh --a DIR --b DIR [--rounds N] [--seconds N]
#                     [--workload "64x1 8x1000"] [--port P]
#
#   --a DIR, --b DIR  build directories holding tallyd (and, for A, tally-bench)
#   --rounds N        rounds per workload (default 3)
#   --seconds N       seconds per run (default 10)
#   --workload LIST   CxB pairs: C clients, B transfers per request; C×1
#                     runs libtally per thread, as the benchmark table's
#                     64×1 row (default "64x1 8x1000")
#   --port P          the TCP port tallyd listens on (default 17470)
#
# Each run gets a fresh tallyd on a fresh store in /tmp (tmpfs is not
# used: the disk's fsync is part of what is measured) with --map-size-mb
# 8192, and tally-bench verifies exactly-once against it. Run it on a quiet
# machine: no build or test beside it, load under 1.
set -euo pipefail

A="" B="" ROUNDS=3 SECS=10 WORKLOADS="64x1 8x1000" PORT=17470
usage() { sed -n '2,22p' "$0" | sed 's/^# \{0,1\}//'; }
while [ $# -gt 0 ]; do
    case "$1" in
        --a) A=$2; shift 2 ;;
        --b) B=$2; shift 2 ;;
        --rounds) ROUNDS=$2; shift 2 ;;
        --seconds) SECS=$2; shift 2 ;;
        --workload) WORKLOADS=$2; shift 2 ;;
        --port) PORT=$2; shift 2 ;;
        -h | --help) usage; exit 0 ;;
        *) echo "bench_ab.sh: unknown option $1" >&2; usage >&2; exit 2 ;;
    esac
done
for d in "$A" "$B"; do
    [ -n "$d" ] && [ -x "$d/tallyd" ] || { echo "bench_ab.sh: --a and --b need build directories with tallyd" >&2; exit 2; }
done
BENCH=$A/tally-bench
[ -x "$BENCH" ] || { echo "bench_ab.sh: $BENCH is missing" >&2; exit 2; }

# run SIDE DIR CLIENTS BATCH: one run on a fresh tallyd; prints effects/s
run() {
    local dir tmp pid mode=() out
    dir=$2
    tmp=$(mktemp -d /tmp/tally-ab.XXXXXX)
    "$dir/tallyd" --data "$tmp/data" --listen "tcp://127.0.0.1:$PORT" --publish none \
        --http none --map-size-mb 8192 --ready-file "$tmp/ready" 2>"$tmp/tallyd.log" &
    pid=$!
    until [ -f "$tmp/ready" ]; do
        kill -0 "$pid" 2>/dev/null || { cat "$tmp/tallyd.log" >&2; exit 1; }
        sleep 0.1
    done
    [ "$4" -eq 1 ] && mode=(--client-mode per-thread)
    out=$("$BENCH" --url "tcp://127.0.0.1:$PORT" --server-pid "$pid" --json \
        --clients "$3" --batch "$4" --seconds "$SECS" "${mode[@]}")
    kill -TERM "$pid"
    wait "$pid" || true
    rm -rf "$tmp"
    python3 -c 'import json,sys; d=json.load(sys.stdin); print(int(d["effects_per_sec"]))' <<<"$out"
}

median() { sort -n | awk '{v[NR]=$1} END {print (NR % 2) ? v[(NR+1)/2] : int((v[NR/2]+v[NR/2+1])/2)}'; }

echo "load: $(cut -d' ' -f1-3 /proc/loadavg)"
for w in $WORKLOADS; do
    c=${w%x*} b=${w#*x}
    ra=() rb=()
    for r in $(seq 1 "$ROUNDS"); do
        if [ $((r % 2)) -eq 1 ]; then
            ra+=("$(run A "$A" "$c" "$b")"); rb+=("$(run B "$B" "$c" "$b")")
        else
            rb+=("$(run B "$B" "$c" "$b")"); ra+=("$(run A "$A" "$c" "$b")")
        fi
        echo "$w round $r: A ${ra[-1]} B ${rb[-1]}"
    done
    ma=$(printf '%s\n' "${ra[@]}" | median)
    mb=$(printf '%s\n' "${rb[@]}" | median)
    echo "$w median effects/s: A $ma B $mb (B/A $(awk -v a="$ma" -v b="$mb" 'BEGIN {printf "%.3f", b / a}'))"
done
