#!/bin/bash
# store_bytes.sh — bytes of store per transfer: a fresh tallyd filled by
# tally-bench, stopped, then its data.mdb measured with mdb_stat: the pages
# used (mdb_stat -e, the file's high-water mark; the figure docs/BENCHMARKS.md
# quotes) × 4096 ÷ the transfers, the same less the free list's pages
# (mdb_stat -f), and each database's pages (branch + leaf + overflow, mdb_stat
# -a) with its bytes per transfer. See docs/BENCHMARKS.md, "Store, stream,
# recon, relay".
#
#   tools/store_bytes.sh --build DIR [--transfers N] [--clients C]
#                        [--batch B] [--accounts A] [--user-data] [--port P]
#                        [--keep]
#
#   --build DIR      a build directory holding tallyd and tally-bench
#   --transfers N    transfers sent (default 200000)
#   --clients C      tally-bench clients (default 8)
#   --batch B        transfers per request (default 1000)
#   --accounts A     bench accounts (default 1000)
#   --user-data      every transfer with user data (tally-bench --user-data:
#                    user_data_128, _64 and _32 all set, three index entries)
#   --port P         the TCP port tallyd listens on (default 17480)
#   --keep           keep the store (its path is printed) instead of removing it
#
# The log is kept (no retention runs in a fill this short). mdb_stat (the
# lmdb-utils package) must be on PATH.
set -euo pipefail

BUILD="" N=200000 CLIENTS=8 BATCH=1000 ACCOUNTS=1000 PORT=17480 KEEP=0 USER_DATA=()
usage() { sed -n '2,24p' "$0" | sed 's/^# \{0,1\}//'; }
while [ $# -gt 0 ]; do
    case "$1" in
        --build) BUILD=$2; shift 2 ;;
        --transfers) N=$2; shift 2 ;;
        --clients) CLIENTS=$2; shift 2 ;;
        --batch) BATCH=$2; shift 2 ;;
        --accounts) ACCOUNTS=$2; shift 2 ;;
        --user-data) USER_DATA=(--user-data); shift ;;
        --port) PORT=$2; shift 2 ;;
        --keep) KEEP=1; shift ;;
        -h | --help) usage; exit 0 ;;
        *) echo "store_bytes.sh: unknown option $1" >&2; usage >&2; exit 2 ;;
    esac
done
[ -n "$BUILD" ] && [ -x "$BUILD/tallyd" ] && [ -x "$BUILD/tally-bench" ] ||
    { echo "store_bytes.sh: --build needs a build directory with tallyd and tally-bench" >&2; exit 2; }
command -v mdb_stat >/dev/null || { echo "store_bytes.sh: mdb_stat is not on PATH" >&2; exit 2; }

tmp=$(mktemp -d /tmp/tally-bytes.XXXXXX)
"$BUILD/tallyd" --data "$tmp/data" --listen "tcp://127.0.0.1:$PORT" --publish none \
    --http none --map-size-mb 8192 --ready-file "$tmp/ready" 2>"$tmp/tallyd.log" &
pid=$!
until [ -f "$tmp/ready" ]; do
    kill -0 "$pid" 2>/dev/null || { cat "$tmp/tallyd.log" >&2; exit 1; }
    sleep 0.1
done
"$BUILD/tally-bench" --url "tcp://127.0.0.1:$PORT" --clients "$CLIENTS" --batch "$BATCH" \
    --accounts "$ACCOUNTS" --ops "$N" "${USER_DATA[@]}" --json >"$tmp/bench.json" ||
    { echo "store_bytes.sh: tally-bench failed (see $tmp)" >&2; kill -TERM "$pid"; exit 1; }
kill -TERM "$pid"
wait "$pid" || true

env_stat=$(mdb_stat -e "$tmp/data")
used=$(awk '/Number of pages used:/ {print $5}' <<<"$env_stat")
free=$(mdb_stat -f "$tmp/data" | awk '/Free pages:/ {print $3}')
pages=$((used - free))
echo "store_bytes: $N transfers at ${CLIENTS}x$BATCH over $ACCOUNTS accounts," \
    "$([ ${#USER_DATA[@]} -gt 0 ] && echo with || echo no) user data, log kept"
awk -v u="$used" -v p="$pages" -v n="$N" 'BEGIN {
    printf "  %d pages of 4 KiB used (mdb_stat -e): %.0f bytes per transfer\n", u, u * 4096 / n
    printf "  %d of them in use (less the free list): %.0f bytes per transfer\n", p, p * 4096 / n }'
# mdb_stat -a: each database's "Status of NAME" block, then its page counts.
mdb_stat -a "$tmp/data" | awk -v n="$N" '
    /^Status of / { name = $3 }
    /Branch pages:|Leaf pages:|Overflow pages:/ { pages[name] += $3 }
    /Entries:/ { entries[name] = $2 }
    END {
        for (d in pages) if (pages[d] > 0 && d != "Main")
            printf "  %-16s %8d pages %8d entries %6.0f bytes per transfer\n", d, pages[d], entries[d], pages[d] * 4096 / n
    }' | sort -k2 -n -r
if [ "$KEEP" -eq 1 ]; then
    echo "  store kept in $tmp/data"
else
    rm -rf "$tmp"
fi
