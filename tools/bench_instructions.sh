#!/bin/bash
# bench_instructions.sh — two builds side by side by what a transfer costs
# in instructions rather than in time, so that a loaded machine does not
# blur the comparison: each build's tallyd runs under valgrind --tool=callgrind
# on a fresh store in /tmp, driven by build A's tally-bench for a fixed
# number of transfers (--ops, a fixed --seed); each workload runs twice per
# build, at SMALL and at LARGE transfers, and the instructions per transfer
# are the difference of the two runs' totals divided by LARGE - SMALL (what
# does not grow with the transfers — start, opening the bench accounts, the
# bench's checks, stop — cancels out). See docs/BENCHMARKS.md, "Instructions
# per transfer".
#
#   tools/bench_instructions.sh --a DIR --b DIR [--workload "8x1000 64x1"]
#                               [--ops "SMALL LARGE"] [--keep DIR] [--port P]
#
#   --a DIR, --b DIR  build directories holding tallyd (and, for A, tally-bench)
#   --workload LIST   CxB pairs: C clients, B transfers per request; C×1
#                     runs libtally per thread (default "8x1000 64x1")
#   --ops "S L"       the two transfer counts (default "8000 40000")
#   --keep DIR        keep each run's callgrind.out in DIR (for
#                     callgrind_annotate); default: removed
#   --port P          the TCP port tallyd listens on (default 17475)
#
# Needs valgrind. A run takes about a minute per 10,000 transfers; the
# figures repeat within about 0.5 % (the batches the writer forms differ
# from run to run a little).
set -euo pipefail

A="" B="" WORKLOADS="8x1000 64x1" OPS="8000 40000" KEEP="" PORT=17475
usage() { sed -n '2,26p' "$0" | sed 's/^# \{0,1\}//'; }
while [ $# -gt 0 ]; do
    case "$1" in
        --a) A=$2; shift 2 ;;
        --b) B=$2; shift 2 ;;
        --workload) WORKLOADS=$2; shift 2 ;;
        --ops) OPS=$2; shift 2 ;;
        --keep) KEEP=$2; shift 2 ;;
        --port) PORT=$2; shift 2 ;;
        -h | --help) usage; exit 0 ;;
        *) echo "bench_instructions.sh: unknown option $1" >&2; usage >&2; exit 2 ;;
    esac
done
for d in "$A" "$B"; do
    [ -n "$d" ] && [ -x "$d/tallyd" ] ||
        { echo "bench_instructions.sh: --a and --b need build directories with tallyd" >&2; exit 2; }
done
BENCH=$A/tally-bench
[ -x "$BENCH" ] || { echo "bench_instructions.sh: $BENCH is missing" >&2; exit 2; }
command -v valgrind >/dev/null || { echo "bench_instructions.sh: valgrind is not on PATH" >&2; exit 2; }
read -r SMALL LARGE <<<"$OPS"
[ "${LARGE:-0}" -gt "${SMALL:-0}" ] 2>/dev/null ||
    { echo "bench_instructions.sh: --ops needs two counts, the second larger" >&2; exit 2; }
[ -z "$KEEP" ] || mkdir -p "$KEEP"

# run DIR CLIENTS BATCH OPS NAME: one run under callgrind; prints its
# instructions (tallyd's, all threads)
run() {
    local tmp pid mode=() out
    tmp=$(mktemp -d /tmp/tally-instr.XXXXXX)
    valgrind --tool=callgrind --callgrind-out-file="$tmp/callgrind.out" "$1/tallyd" \
        --data "$tmp/data" --listen "tcp://127.0.0.1:$PORT" --publish none --http none \
        --map-size-mb 8192 --ready-file "$tmp/ready" 2>"$tmp/tallyd.log" &
    pid=$!
    until [ -f "$tmp/ready" ]; do
        kill -0 "$pid" 2>/dev/null || { cat "$tmp/tallyd.log" >&2; exit 1; }
        sleep 0.2
    done
    [ "$3" -eq 1 ] && mode=(--client-mode per-thread)
    if ! out=$("$BENCH" --url "tcp://127.0.0.1:$PORT" --json --no-progress --seed 42 \
        --timeout-ms 600000 --clients "$2" --batch "$3" --ops "$4" "${mode[@]}"); then
        kill -TERM "$pid"; wait "$pid" || true
        echo "bench_instructions.sh: tally-bench failed (see $tmp)" >&2; exit 1
    fi
    kill -TERM "$pid"
    wait "$pid" || true
    python3 -c 'import json,sys; d=json.load(sys.stdin); sys.exit(0 if d["verified"] and d["retries"] == 0 else 1)' <<<"$out" ||
        { echo "bench_instructions.sh: a run did not verify or retried (see $tmp)" >&2; exit 1; }
    [ -z "$KEEP" ] || cp "$tmp/callgrind.out" "$KEEP/callgrind.$5.out"
    awk '/^(summary|totals):/ {print $2; exit}' "$tmp/callgrind.out"
    rm -rf "$tmp"
}

echo "load: $(cut -d' ' -f1-3 /proc/loadavg); transfers $SMALL and $LARGE per run"
for w in $WORKLOADS; do
    c=${w%x*} b=${w#*x}
    declare -A per
    for side in A B; do
        dir=$A; [ "$side" = B ] && dir=$B
        small=$(run "$dir" "$c" "$b" "$SMALL" "$side-$w-$SMALL")
        large=$(run "$dir" "$c" "$b" "$LARGE" "$side-$w-$LARGE")
        per[$side]=$(( (large - small) / (LARGE - SMALL) ))
        echo "$w $side: $small and $large instructions: ${per[$side]} per transfer"
    done
    awk -v a="${per[A]}" -v b="${per[B]}" -v w="$w" \
        'BEGIN { printf "%s: B / A = %.3f\n", w, b / a }'
done
