#!/bin/bash
# bench_cluster.sh — a tally cluster beside a single node: effects/s and
# p99 of one build's tallyd alone and as three cluster nodes (3 nats-server
# in one JetStream cluster and 3 tallyd, all on loopback, all on this
# machine), measured by the same tally-bench in interleaved rounds
# (single, cluster; then cluster, single; ...), then the fail-over time of
# a kill -9 of one node under load. See docs/BENCHMARKS.md, "Cluster mode".
#
#   tools/bench_cluster.sh --build DIR [--rounds N] [--seconds N]
#                          [--workload "8x1000 64x1"] [--port P]
#
#   --build DIR       build directory holding tallyd and tally-bench
#   --rounds N        rounds per workload (default 3)
#   --seconds N       seconds per run (default 10)
#   --workload LIST   CxB pairs: C clients, B transfers per request; C×1
#                     runs libtally per thread (default "8x1000 64x1")
#   --port P          the first of 13 TCP ports used (default 17560)
#   --failovers N     kill -9 runs measuring fail-over (default 3; 0: none)
#
# $NATS_SERVER names nats-server (default: the one on PATH). Each run gets
# fresh stores in /tmp (the disk's fsync is part of what is measured):
# a cluster run starts its three nats-servers and three tallyd anew, and
# the bench's clients are spread over the three nodes (--cluster). Run it
# on a quiet machine; the load average is printed first.
set -euo pipefail

BUILD="" ROUNDS=3 SECS=10 WORKLOADS="8x1000 64x1" PORT=17560 FAILOVERS=3
usage() { sed -n '2,24p' "$0" | sed 's/^# \{0,1\}//'; }
while [ $# -gt 0 ]; do
    case "$1" in
        --build) BUILD=$2; shift 2 ;;
        --rounds) ROUNDS=$2; shift 2 ;;
        --seconds) SECS=$2; shift 2 ;;
        --workload) WORKLOADS=$2; shift 2 ;;
        --port) PORT=$2; shift 2 ;;
        --failovers) FAILOVERS=$2; shift 2 ;;
        -h | --help) usage; exit 0 ;;
        *) echo "bench_cluster.sh: unknown option $1" >&2; usage >&2; exit 2 ;;
    esac
done
[ -n "$BUILD" ] && [ -x "$BUILD/tallyd" ] && [ -x "$BUILD/tally-bench" ] ||
    { echo "bench_cluster.sh: --build needs a build directory with tallyd and tally-bench" >&2; exit 2; }
NATS=${NATS_SERVER:-$(command -v nats-server || true)}
[ -x "$NATS" ] || { echo "bench_cluster.sh: nats-server not found (apt-get install nats-server)" >&2; exit 2; }
BENCH=$BUILD/tally-bench
TMP=""
PIDS=()

cleanup() {
    local p
    for p in "${PIDS[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
    for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
    PIDS=()
    [ -n "$TMP" ] && rm -rf "$TMP"
    TMP=""
}
trap cleanup EXIT

# wait_ready FILE PID LOG: until tallyd wrote its ready file
wait_ready() {
    until [ -f "$1" ]; do
        kill -0 "$2" 2>/dev/null || { cat "$3" >&2; exit 1; }
        sleep 0.1
    done
}

# tallyd_start NAME PORT [cluster options]: a tallyd on a fresh store; its pid in LAST_PID
tallyd_start() {
    local name=$1 port=$2
    shift 2
    "$BUILD/tallyd" --data "$TMP/$name" --listen "tcp://127.0.0.1:$port" --publish none \
        --http none --map-size-mb 8192 --ready-file "$TMP/$name.ready" "$@" 2>"$TMP/$name.log" &
    LAST_PID=$!
    PIDS+=("$LAST_PID")
    wait_ready "$TMP/$name.ready" "$LAST_PID" "$TMP/$name.log"
}

# cluster_start: 3 nats-servers in one JetStream cluster, then 3 tallyd
NODE_PIDS=() URLS=""
cluster_start() {
    local i routes="" nats_urls=""
    for i in 0 1 2; do
        routes+="${routes:+,}nats://127.0.0.1:$((PORT + 4 + i))"
        nats_urls+="${nats_urls:+,}nats://127.0.0.1:$((PORT + 1 + i))"
    done
    for i in 0 1 2; do
        "$NATS" -js -sd "$TMP/nats$i" -a 127.0.0.1 -p $((PORT + 1 + i)) -n "n$i" \
            -m $((PORT + 10 + i)) --cluster_name tally-bench \
            --cluster "nats://127.0.0.1:$((PORT + 4 + i))" --routes "$routes" \
            >"$TMP/nats$i.log" 2>&1 &
        PIDS+=($!)
    done
    for i in 0 1 2; do # until JetStream has a meta leader and this server is current
        until curl -sf "http://127.0.0.1:$((PORT + 10 + i))/healthz" >/dev/null; do sleep 0.2; done
    done
    NODE_PIDS=() URLS=""
    for i in 0 1 2; do # one after the other: the first creates the stream
        tallyd_start "node$i" $((PORT + 7 + i)) --cluster "$nats_urls" --node "n$i"
        NODE_PIDS+=("$LAST_PID")
        URLS+="${URLS:+,}tcp://127.0.0.1:$((PORT + 7 + i))"
    done
}

# bench_json OUT ARGS...: one tally-bench run, its JSON in OUT
bench_json() {
    local out=$1
    shift
    "$BENCH" --json "$@" >"$out" || { echo "bench_cluster.sh: tally-bench failed: $(cat "$out")" >&2; exit 1; }
}

# fields FILE PATH...: the values at dotted paths of a JSON file, space-separated
fields() {
    python3 -c 'import json,sys
d = json.load(open(sys.argv[1]))
def at(p):
    v = d
    for k in p.split("."):
        v = v[k]
    return v
print(" ".join(str(at(p)) for p in sys.argv[2:]))' "$@"
}

# run SIDE CLIENTS BATCH: one run; prints "effects/s p99_ms"
run() {
    local mode=()
    trap cleanup EXIT # run is a $(...) subshell: its processes end with it, even on a failure
    TMP=$(mktemp -d /tmp/tally-cluster-bench.XXXXXX)
    [ "$3" -eq 1 ] && mode=(--client-mode per-thread)
    if [ "$1" = single ]; then
        tallyd_start single "$PORT"
        bench_json "$TMP/out.json" --url "tcp://127.0.0.1:$PORT" --server-pid "$LAST_PID" \
            --clients "$2" --batch "$3" --seconds "$SECS" "${mode[@]}"
    else
        cluster_start
        bench_json "$TMP/out.json" --cluster "$URLS" --clients "$2" --batch "$3" \
            --seconds "$SECS" "${mode[@]}"
    fi
    read -r e p <<<"$(fields "$TMP/out.json" effects_per_sec p99_ms)"
    awk -v e="$e" -v p="$p" 'BEGIN {printf "%d %.1f\n", e, p}'
    cleanup
}

median() { sort -n | awk '{v[NR]=$1} END {print (NR % 2) ? v[(NR+1)/2] : (v[NR/2]+v[NR/2+1])/2}'; }

echo "load: $(cut -d' ' -f1-3 /proc/loadavg)"
for w in $WORKLOADS; do
    c=${w%x*} b=${w#*x}
    rs=() rc=() ps=() pc=()
    for r in $(seq 1 "$ROUNDS"); do
        if [ $((r % 2)) -eq 1 ]; then
            one=$(run single "$c" "$b"); read -r e p <<<"$one"; rs+=("$e"); ps+=("$p")
            one=$(run cluster "$c" "$b"); read -r e p <<<"$one"; rc+=("$e"); pc+=("$p")
        else
            one=$(run cluster "$c" "$b"); read -r e p <<<"$one"; rc+=("$e"); pc+=("$p")
            one=$(run single "$c" "$b"); read -r e p <<<"$one"; rs+=("$e"); ps+=("$p")
        fi
        echo "$w round $r: single ${rs[-1]}/s p99 ${ps[-1]} ms, cluster ${rc[-1]}/s p99 ${pc[-1]} ms"
    done
    ms=$(printf '%s\n' "${rs[@]}" | median) mc=$(printf '%s\n' "${rc[@]}" | median)
    echo "$w median effects/s: single $ms cluster $mc (cluster/single" \
        "$(awk -v a="$ms" -v b="$mc" 'BEGIN {printf "%.3f", b / a}'));" \
        "median p99 ms: single $(printf '%s\n' "${ps[@]}" | median)" \
        "cluster $(printf '%s\n' "${pc[@]}" | median)"
done

# fail-over: 8 clients of single transfers per thread over the three nodes;
# node 0 killed with kill -9 a third into the run
for r in $(seq 1 "$FAILOVERS"); do
    TMP=$(mktemp -d /tmp/tally-cluster-bench.XXXXXX)
    cluster_start
    bench_json "$TMP/out.json" --cluster "$URLS" --clients 8 --batch 1 --client-mode per-thread \
        --seconds "$SECS" --timeout-ms 1000 --kill-pid "${NODE_PIDS[0]}" \
        --kill-after "$(awk -v s="$SECS" 'BEGIN {print s / 3}')"
    read -r sends first last verified <<<"$(fields "$TMP/out.json" failover.sends \
        failover.first_ms failover.last_ms verified)"
    if [ "$sends" = 0 ]; then
        echo "fail-over $r: no send failed on the killed node; verified $verified"
    else
        echo "fail-over $r: $sends sends failed on the killed node, acknowledged by another" \
            "$(awk -v a="$first" -v b="$last" 'BEGIN {printf "%.0f to %.0f", a, b}') ms after" \
            "the kill (--timeout-ms 1000); verified $verified"
    fi
    cleanup
done
