#!/bin/bash
# pg_side_by_side.sh — durable exactly-once effects per second: PostgreSQL 15
# running the classic inbox/outbox pattern, and tallyd, side by side on this
# machine, at the same client counts, with the NNG request/reply echo
# ceiling measured in the same run. See docs/BENCHMARKS.md.
#
# The echo ceiling: tally-echo (a bare NNG REP echo server, 128 contexts, no
# storage) and tally-bench --echo (the same client threads, client mode and
# libtally transport as the tally runs; 200-byte requests, each checked to
# come back byte for byte).
#
# PostgreSQL: the Debian postgresql-15 package (installed with apt-get when
# missing), a private cluster in a temporary directory listening on loopback
# only, fsync and synchronous_commit on (the defaults, set explicitly). Each
# effect is one transaction, the pattern of the outbox/inbox articles:
#
#   BEGIN;
#   INSERT INTO inbox (consumer, key) VALUES (...) ON CONFLICT DO NOTHING;
#   -- only when the key was new:
#   UPDATE accounts ... (debit side);  UPDATE accounts ... (credit side);
#   INSERT INTO outbox (...) VALUES (...);
#   COMMIT;
#
# run by pgbench (prepared statements, one connection per client). tally:
# tally-bench against a fresh tallyd on TCP loopback with the same client
# count and client mode, one transfer per request (or --batch). Both sides
# get a fresh store for every client count, 1000 accounts, amounts 1..100,
# and time-ordered keys. Afterwards each side is checked: PostgreSQL's
# inbox, outbox and balances must agree with the transactions pgbench
# counted; tally-bench verifies exactly-once against the server itself, and
# every echo must come back identical. In every round the three runs of a
# client count go in a rotating order (echo, pg, tally; then pg, tally,
# echo; ...), so that none always runs first on a machine that drifts.
set -euo pipefail

CLIENTS="1 8 32 64"
SECONDS_PER_RUN=10
ACCOUNTS=1000
BATCH=1
BUILD=""
PG_PORT=55432
TALLY_PORT=17460
ECHO_PORT=17462
ECHO_BYTES=200
CLIENT_MODE=per-thread
NO_PG=0
KEEP=0
ROUNDS=1
PG_BIN=/usr/lib/postgresql/15/bin

usage() {
    cat <<EOF
usage: tools/pg_side_by_side.sh [--build DIR] [--clients "1 8 32 64"] [--seconds N]
                                [--batch N] [--accounts N] [--client-mode M]
                                [--no-pg] [--echo-bytes N] [--pg-port P]
                                [--tally-port P] [--echo-port P] [--rounds N]
                                [--keep] [--help]

Runs the NNG echo ceiling (tally-echo + tally-bench --echo, twice: with
NNG's REQ client as issue 17 defined it, and with libtally's own tcp://
client), PostgreSQL 15 (classic inbox + balance update + outbox, one
transaction per effect, fsync and synchronous_commit on) and tallyd
(tally-bench) at the same client counts on this machine, and prints one
table, a row per client count: echoes/s, effects/s, p50/p99 latency, and
the ratios tally / NNG echo, tally / echo and tally / PostgreSQL (medians
over --rounds).

  --build DIR      directory holding the built tallyd, tally-bench and
                   tally-echo (default: \$TALLYD, \$TALLY_BENCH and
                   \$TALLY_ECHO, else the PATH)
  --clients LIST   client counts, space-separated (default "1 8 32 64")
  --seconds N      length of every run (default 10)
  --batch N        tally-bench operations per request (default 1; PostgreSQL
                   always does one effect per transaction)
  --accounts N     accounts (default 1000)
  --client-mode M  per-thread (default): one tally_client per bench thread,
                   one connection each, as many services would have;
                   shared: one client for all threads. For the echo and the
                   tally runs alike
  --no-pg          skip PostgreSQL (echo and tally only; nothing installed)
  --echo-bytes N   size of each echo request (default 200)
  --pg-port P      PostgreSQL's loopback port (default 55432)
  --tally-port P   tallyd's loopback port (default 17460; P+1 publishes)
  --echo-port P    tally-echo's loopback port (default 17462)
  --rounds N       repeat the whole sequence N times, client counts
                   interleaved and the three runs of each count in a
                   rotating order; the table shows medians and every run's
                   rate (default 1)
  --keep           keep the temporary directory (logs, pgbench logs)
  --help

Needs root (or a user allowed to use apt-get and runuser) only to install
postgresql-15 when it is missing; the cluster runs as the 'postgres' user when
started by root, else as the caller. Exit status 0 when every run was
verified (echo: every echo identical), 1 when one was not, 2 on a usage
error.
EOF
}

while [ $# -gt 0 ]; do
    case "$1" in
    --build) BUILD=$2; shift 2 ;;
    --clients) CLIENTS=$2; shift 2 ;;
    --seconds) SECONDS_PER_RUN=$2; shift 2 ;;
    --batch) BATCH=$2; shift 2 ;;
    --accounts) ACCOUNTS=$2; shift 2 ;;
    --pg-port) PG_PORT=$2; shift 2 ;;
    --tally-port) TALLY_PORT=$2; shift 2 ;;
    --echo-port) ECHO_PORT=$2; shift 2 ;;
    --echo-bytes) ECHO_BYTES=$2; shift 2 ;;
    --client-mode) CLIENT_MODE=$2; shift 2 ;;
    --no-pg) NO_PG=1; shift ;;
    --rounds) ROUNDS=$2; shift 2 ;;
    --keep) KEEP=1; shift ;;
    --help) usage; exit 0 ;;
    *) echo "pg_side_by_side.sh: unknown argument: $1" >&2; usage >&2; exit 2 ;;
    esac
done
for n in $CLIENTS $SECONDS_PER_RUN $BATCH $ACCOUNTS $PG_PORT $TALLY_PORT $ECHO_PORT $ECHO_BYTES $ROUNDS; do
    case "$n" in '' | *[!0-9]*) echo "pg_side_by_side.sh: not a number: $n" >&2; exit 2 ;; esac
done
[ "$ACCOUNTS" -ge 2 ] || { echo "pg_side_by_side.sh: --accounts must be at least 2" >&2; exit 2; }
case "$CLIENT_MODE" in
shared | per-thread) ;;
*) echo "pg_side_by_side.sh: --client-mode: shared or per-thread: $CLIENT_MODE" >&2; exit 2 ;;
esac

if [ -n "$BUILD" ]; then
    TALLYD="$BUILD/tallyd"
    TALLY_BENCH="$BUILD/tally-bench"
    TALLY_ECHO="$BUILD/tally-echo"
fi
TALLYD=${TALLYD:-$(command -v tallyd || true)}
TALLY_BENCH=${TALLY_BENCH:-$(command -v tally-bench || true)}
TALLY_ECHO=${TALLY_ECHO:-$(command -v tally-echo || true)}
for p in "$TALLYD" "$TALLY_BENCH" "$TALLY_ECHO"; do
    [ -n "$p" ] && [ -x "$p" ] || { echo "pg_side_by_side.sh: tallyd, tally-bench or tally-echo not found (--build DIR)" >&2; exit 2; }
done
command -v python3 >/dev/null || { echo "pg_side_by_side.sh: needs python3" >&2; exit 2; }

# ---- PostgreSQL 15 from Debian ----
if [ "$NO_PG" = 0 ] && [ ! -x "$PG_BIN/initdb" ]; then
    echo "installing postgresql-15 (apt-get)" >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q postgresql-15 >&2
fi
AS_PG=()
if [ "$(id -u)" = 0 ]; then
    AS_PG=(runuser -u postgres --) # PostgreSQL refuses to run as root
fi

WORK=$(mktemp -d /tmp/pg-side-by-side.XXXXXX)
chmod 755 "$WORK"
PGDATA="$WORK/pg/data"
TALLYD_PID=""
ECHO_PID=""
cleanup() {
    [ -n "$TALLYD_PID" ] && kill -TERM "$TALLYD_PID" 2>/dev/null && wait "$TALLYD_PID" 2>/dev/null || true
    [ -n "$ECHO_PID" ] && kill -TERM "$ECHO_PID" 2>/dev/null && wait "$ECHO_PID" 2>/dev/null || true
    [ -d "$PGDATA" ] && "${AS_PG[@]}" "$PG_BIN/pg_ctl" -D "$PGDATA" -m fast -w stop >/dev/null 2>&1 || true
    if [ "$KEEP" = 1 ]; then echo "kept $WORK" >&2; else rm -rf "$WORK"; fi
}
trap cleanup EXIT

mkdir -p "$WORK/pg" "$WORK/tally" "$WORK/echo" "$WORK/echonng"

# ---- the echo ceiling: tally-echo and tally-bench --echo ----

# tally-bench --echo at $1 clients against a fresh tally-echo; prints
# "echoes/s p50 p99 verified". echo: the client libtally uses on tcp://
# (the calling thread speaks SP, clients/transport/sp_direct.c); echonng: NNG's
# REQ socket ($TALLY_CLIENT_TRANSPORT=nng), the ceiling as issue 17 defined it
# (NNG clients against NNG's REP echo).
echonng_run() { TALLY_CLIENT_TRANSPORT=nng ECHO_DIR=echonng echo_run "$1"; }
echo_run() {
    local c=$1 dir="$WORK/${ECHO_DIR:-echo}/c$1"
    mkdir -p "$dir"
    "$TALLY_ECHO" --listen "tcp://127.0.0.1:$ECHO_PORT" >/dev/null 2>"$dir/echo.log" &
    ECHO_PID=$!
    for _ in $(seq 300); do grep -q serving "$dir/echo.log" 2>/dev/null && break; sleep 0.1; done
    local rc=0
    "$TALLY_BENCH" --echo --echo-bytes "$ECHO_BYTES" --url "tcp://127.0.0.1:$ECHO_PORT" \
        --server-pid "$ECHO_PID" --json --clients "$c" --client-mode "$CLIENT_MODE" \
        --seconds "$SECONDS_PER_RUN" >"$dir/bench.json" 2>"$dir/bench.err" || rc=$?
    kill -TERM "$ECHO_PID"
    wait "$ECHO_PID" || true
    ECHO_PID=""
    [ "$rc" -le 1 ] || { cat "$dir/echo.log" "$dir/bench.err" >&2; return 1; }
    bench_line "$dir/bench.json"
}

# "rate p50 p99 verified" from a tally-bench --json report
bench_line() {
    python3 - "$1" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
print("%.0f %.2f %.2f %s" % (j["effects_per_sec"], j["p50_ms"], j["p99_ms"],
                             "true" if j["verified"] else "false"))
PY
}

# ---- PostgreSQL: a private cluster (not made with --no-pg) ----

pg_start() {
if [ ${#AS_PG[@]} -gt 0 ]; then chown postgres "$WORK/pg"; fi
"${AS_PG[@]}" "$PG_BIN/initdb" -D "$PGDATA" -A trust -U bench --no-locale -E UTF8 >"$WORK/pg/initdb.log" 2>&1 ||
    { cat "$WORK/pg/initdb.log" >&2; exit 1; }
cat >>"$PGDATA/postgresql.conf" <<EOF
listen_addresses = '127.0.0.1'
port = $PG_PORT
unix_socket_directories = '$WORK/pg'
max_connections = 200
fsync = on
synchronous_commit = on
full_page_writes = on
wal_sync_method = fdatasync
shared_buffers = 256MB
EOF
"${AS_PG[@]}" "$PG_BIN/pg_ctl" -D "$PGDATA" -l "$WORK/pg/server.log" -w start >/dev/null
}
PSQL=("${AS_PG[@]}" "$PG_BIN/psql" -X -q -v ON_ERROR_STOP=1 -h 127.0.0.1 -p "$PG_PORT" -U bench -d postgres)
if [ "$NO_PG" = 0 ]; then pg_start; fi

cat >"$WORK/pg/effect.sql" <<'EOF'
\set a random(1, :accounts)
\set c 1 + (:a + random(0, :accounts - 2)) % :accounts
\set amount random(1, 100)
\set lo least(:a, :c)
\set hi greatest(:a, :c)
BEGIN;
WITH fresh AS (INSERT INTO inbox (consumer, key)
               VALUES ('bench', lpad((extract(epoch FROM clock_timestamp()) * 1000000)::bigint::text, 20, '0')
                                || '-' || (:client_id)::int::text || '-' || random()::text)
               ON CONFLICT DO NOTHING RETURNING key)
SELECT count(*) AS new_key, max(key) AS key FROM fresh
\gset
\if :new_key
UPDATE accounts SET debits = debits + CASE WHEN id = (:a)::bigint THEN (:amount)::bigint ELSE 0 END,
                    credits = credits + CASE WHEN id = (:c)::bigint THEN (:amount)::bigint ELSE 0 END
 WHERE id = (:lo)::bigint;
UPDATE accounts SET debits = debits + CASE WHEN id = (:a)::bigint THEN (:amount)::bigint ELSE 0 END,
                    credits = credits + CASE WHEN id = (:c)::bigint THEN (:amount)::bigint ELSE 0 END
 WHERE id = (:hi)::bigint;
INSERT INTO outbox (type, causation_key, payload)
VALUES ('transfer.created', (:key)::text,
        jsonb_build_object('debit_account_id', (:a)::bigint, 'credit_account_id', (:c)::bigint,
                           'amount', (:amount)::bigint, 'ledger', 1, 'code', 1,
                           'time', clock_timestamp()));
\endif
COMMIT;
EOF

pg_reset() {
    "${PSQL[@]}" <<EOF
SET client_min_messages = warning;
DROP TABLE IF EXISTS inbox, outbox, accounts;
CREATE TABLE accounts (id bigint PRIMARY KEY, debits bigint NOT NULL DEFAULT 0,
                       credits bigint NOT NULL DEFAULT 0);
INSERT INTO accounts (id) SELECT generate_series(1, $ACCOUNTS);
CREATE TABLE inbox (consumer text NOT NULL, key text NOT NULL,
                    processed_at timestamptz NOT NULL DEFAULT now(),
                    PRIMARY KEY (consumer, key));
CREATE TABLE outbox (seq bigserial PRIMARY KEY, type text NOT NULL, causation_key text NOT NULL,
                     payload jsonb NOT NULL, created_at timestamptz NOT NULL DEFAULT now());
CHECKPOINT;
EOF
}

# pgbench at $1 clients; prints "effects/s p50 p99 verified"
pg_run() {
    local c=$1 dir="$WORK/pg/c$1"
    mkdir -p "$dir"
    if [ ${#AS_PG[@]} -gt 0 ]; then chown postgres "$dir"; fi
    pg_reset
    local threads=$((c < 2 ? c : 2))
    (cd "$dir" && "${AS_PG[@]}" "$PG_BIN/pgbench" -n -h 127.0.0.1 -p "$PG_PORT" -U bench \
        -M prepared -c "$c" -j "$threads" -T "$SECONDS_PER_RUN" -D accounts="$ACCOUNTS" \
        -l --log-prefix="$dir/txn" -f "$WORK/pg/effect.sql" postgres >"$dir/pgbench.out" 2>&1) ||
        { cat "$dir/pgbench.out" >&2; return 1; }
    local counts
    counts=$("${PSQL[@]}" -At -c "SELECT (SELECT count(*) FROM inbox), (SELECT count(*) FROM outbox),
                 (SELECT sum(debits) FROM accounts), (SELECT sum(credits) FROM accounts),
                 (SELECT coalesce(sum((payload->>'amount')::bigint), 0) FROM outbox)")
    python3 - "$dir" "$counts" <<'PY'
import glob, sys, re
d, counts = sys.argv[1], sys.argv[2].split('|')
lat = []
for f in glob.glob(d + "/txn*"):
    for line in open(f):
        p = line.split()
        if len(p) >= 3:
            lat.append(int(p[2]) / 1000.0)  # microseconds -> ms
out = open(d + "/pgbench.out").read()
done = int(re.search(r"number of transactions actually processed: (\d+)", out).group(1))
failed = re.search(r"number of failed transactions: (\d+)", out)
tps = float(re.search(r"tps = ([\d.]+)", out).group(1))
lat.sort()
q = lambda x: lat[min(len(lat) - 1, int(x * len(lat)))] if lat else 0.0
inbox, outbox, debits, credits, amounts = (int(v or 0) for v in counts)
ok = inbox == done and outbox == done and debits == credits == amounts and \
     (failed is None or int(failed.group(1)) == 0)
print("%.0f %.2f %.2f %s" % (tps, q(0.50), q(0.99), "true" if ok else "false"))
PY
}

# tally-bench at $1 clients against a fresh tallyd; prints "effects/s p50 p99 verified"
tally_run() {
    local c=$1 dir="$WORK/tally/c$1"
    mkdir -p "$dir"
    "$TALLYD" --data "$dir/data" --listen "tcp://127.0.0.1:$TALLY_PORT" \
        --publish "tcp://127.0.0.1:$((TALLY_PORT + 1))" 2>"$dir/tallyd.log" &
    TALLYD_PID=$!
    for _ in $(seq 300); do grep -q serving "$dir/tallyd.log" 2>/dev/null && break; sleep 0.1; done
    local rc=0
    "$TALLY_BENCH" --url "tcp://127.0.0.1:$TALLY_PORT" --server-pid "$TALLYD_PID" --json \
        --clients "$c" --client-mode "$CLIENT_MODE" --batch "$BATCH" --accounts "$ACCOUNTS" \
        --seconds "$SECONDS_PER_RUN" >"$dir/bench.json" 2>"$dir/bench.err" || rc=$?
    kill -TERM "$TALLYD_PID"
    wait "$TALLYD_PID" || true
    TALLYD_PID=""
    rm -rf "$dir/data"
    [ "$rc" -le 1 ] || { cat "$dir/bench.err" >&2; return 1; }
    bench_line "$dir/bench.json"
}

SIDES=(echonng echo pg tally)
[ "$NO_PG" = 1 ] && SIDES=(echonng echo tally)
echo "# $(date -u +%Y-%m-%dT%H:%MZ), $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "# echo ceiling: tally-echo (NNG REP, 128 contexts, no storage) and tally-bench --echo, ${ECHO_BYTES}-byte requests, client mode $CLIENT_MODE; NNG echo: NNG's REQ client (TALLY_CLIENT_TRANSPORT=nng), echo: libtally's own tcp:// client"
[ "$NO_PG" = 1 ] ||
    echo "# PostgreSQL $("$PG_BIN/postgres" --version | awk '{print $3}'): one transaction per effect (inbox ON CONFLICT DO NOTHING, 2 balance updates, outbox insert), fsync=on synchronous_commit=on"
echo "# tally: tally-bench --batch $BATCH --client-mode $CLIENT_MODE against a fresh tallyd; ${SECONDS_PER_RUN} s per run, $ACCOUNTS accounts"
echo
# Rounds interleave the client counts, and within a count the sides in a
# rotating order; each run's line goes to $WORK/runs ("round clients side
# rate p50 p99 verified load"); a run that failed counts as unverified.
: >"$WORK/runs"
for round in $(seq "$ROUNDS"); do
    for c in $CLIENTS; do
        said="round $round, $c clients:"
        for k in "${!SIDES[@]}"; do
            side=${SIDES[$(((k + round - 1) % ${#SIDES[@]}))]}
            load=$(cut -d' ' -f1 /proc/loadavg)
            # in this shell (not $(...)), so that cleanup sees the server's pid
            if "${side}_run" "$c" >"$WORK/line"; then line=$(cat "$WORK/line"); else line="0 0 0 false"; fi
            echo "$round $c $side $line $load" >>"$WORK/runs"
            said="$said $side ${line%% *}/s"
        done
        echo "$said" >&2
    done
done
python3 - "$WORK/runs" "$CLIENTS" "$NO_PG" <<'PY'
import statistics, sys
runs = [l.split() for l in open(sys.argv[1]) if l.strip()]
sides = ["echonng", "echo", "tally"] if sys.argv[3] == "1" else ["echonng", "echo", "pg", "tally"]
names = {"echonng": "NNG echo", "echo": "echo", "pg": "PG", "tally": "tally"}
rate = {"echonng": "NNG echo req/s (NNG client)", "echo": "echo req/s (libtally client)",
        "pg": "PostgreSQL effects/s", "tally": "tally effects/s"}
med = lambda xs: statistics.median(xs) if xs else float("nan")
head = ["clients"]
for k in sides:
    head += [rate[k], names[k] + " p50 ms", names[k] + " p99 ms"]
head += ["tally / NNG echo", "tally / echo"] + (["tally / PG"] if "pg" in sides else [])
head += ["verified (%s)" % ", ".join(names[k] for k in sides), "load (1 min)"]
print("| " + " | ".join(head) + " |")
print("|" + "---|" * len(head))
ratio = lambda a, b: "**%.2f×**" % (a / b) if b else "–"
bad = False
for c in sys.argv[2].split():
    side = {k: [r for r in runs if r[1] == c and r[2] == k] for k in sides}
    col = lambda k, i: [float(r[i]) for r in side[k]]
    ok = {k: sum(r[6] == "true" for r in side[k]) for k in sides}
    bad |= any(ok[k] < len(side[k]) for k in sides)
    rates = {k: med(col(k, 3)) for k in sides}
    row = [c]
    for k in sides:
        each = ", ".join("%.0f" % v for v in col(k, 3))
        row += ["%.0f (%s)" % (rates[k], each), "%.2f" % med(col(k, 4)), "%.2f" % med(col(k, 5))]
    row.append(ratio(rates["tally"], rates["echonng"]))
    row.append(ratio(rates["tally"], rates["echo"]))
    if "pg" in sides:
        row.append(ratio(rates["tally"], rates["pg"]))
    row.append(", ".join("%d/%d" % (ok[k], len(side[k])) for k in sides))
    row.append(" / ".join(r[7] for r in runs if r[1] == c))
    print("| " + " | ".join(row) + " |")
sys.exit(1 if bad else 0)
PY
