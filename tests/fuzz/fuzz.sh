#!/usr/bin/env bash
# tests/fuzz/fuzz.sh — build and run tally's libFuzzer targets with clang,
# apart from the normal (gcc, autotools) build. See docs/TESTING.md.
#
#   tests/fuzz/fuzz.sh build OUT               compile the targets and seeds into OUT
#   tests/fuzz/fuzz.sh run OUT TARGET SECONDS  fuzz one target (request, event, reply, json, webhook, auth)
#   tests/fuzz/fuzz.sh all OUT SECONDS         build, then run every target
#   tests/fuzz/fuzz.sh ci OUT SECONDS          the same, as .ci/run does (timed per target)
#   tests/fuzz/fuzz.sh corpus OUT              merge OUT's corpus into the committed one
#
# Every run starts from OUT/corpus/TARGET (kept between runs; new inputs
# land there), tests/fuzz/corpus/TARGET (committed: a minimized corpus of
# long runs, so that a short run starts where they stopped),
# OUT/seeds/TARGET (generated from docs/PROTOCOL.md and a real store at
# build time) and tests/fuzz/regressions/TARGET (committed: count bombs and
# every input that once crashed a target). `corpus` keeps, per target, the
# smallest set of all of these that covers what they cover (-merge=1) as
# the new tests/fuzz/corpus/TARGET. A run fails on any
# crash, sanitizer report, leak, broken property, input slower than 30 s,
# or single allocation above 64 MiB (-malloc_limit_mb: the msgpack count
# bomb must be refused without allocating what it claims); the crashing
# input is written to OUT/crashes/. Extra libFuzzer flags: FUZZ_FLAGS.
set -euo pipefail

src=$(cd "$(dirname "$0")/../.." && pwd)
targets=(request event reply json webhook auth)
malloc_limit_mb=64
rss_limit_mb=2048

usage() {
    sed -n '2,24p' "$0" | sed 's/^# \{0,1\}//'
}

max_len() {
    case "$1" in
        request) echo 65536 ;; # a batch of 1000 members fits
        event) echo 8192 ;;    # every op's events (4 KiB) and a little more: a webhook
                               # event's large body is one bin, decoded as any other
        reply) echo 65536 ;;
        json) echo 65536 ;;
        webhook) echo 16384 ;; # headers and a body; the 256 KiB bound is a length check
        auth) echo 16384 ;;
        *) echo "fuzz.sh: unknown target $1 (request, event, reply, json, webhook, auth)" >&2; exit 2 ;;
    esac
}

need_clang() {
    CC=${FUZZ_CC:-clang}
    if ! command -v "$CC" >/dev/null; then
        echo "fuzz.sh: $CC not found (apt-get install clang libclang-rt-dev)" >&2
        exit 1
    fi
    if ! echo 'int LLVMFuzzerTestOneInput(const char *d, long n) { (void)d; return (int)n * 0; }' |
        "$CC" -x c -fsanitize=fuzzer -o /dev/null - 2>/dev/null; then
        echo "fuzz.sh: $CC cannot link libFuzzer (apt-get install libclang-rt-dev)" >&2
        exit 1
    fi
}

build() {
    local out=$1
    need_clang
    mkdir -p "$out/obj" "$out/corpus" "$out/crashes"
    local pc cflags libs
    pc="msgpack lmdb libcrypto libmicrohttpd gnutls jansson"
    cflags="-std=gnu11 -D_GNU_SOURCE -I$src -iquote $src/common -g -O1 -fno-omit-frame-pointer
            -Wall -Wextra -Werror -Wno-missing-field-initializers $(pkg-config --cflags $pc)"
    libs="$(pkg-config --libs $pc) -lnng -lmbedx509 -lmbedcrypto -lpthread"
    local san="-fsanitize=address,undefined -fno-sanitize-recover=undefined"
    # The libraries' C files as Makefile.am lists them (so a new source file
    # cannot be forgotten here), and the fuzz support code.
    local lib_sources
    mapfile -t lib_sources < <(awk '
        /^(libtallyclientcore|libtallycore|libtallyhttp|libtallynet|libtallydoc)_la_SOURCES[ \t]*\+?=/ { on = 1 }
        on { for (i = 1; i <= NF; i++) if ($i ~ /\.c$/) print $i; if ($0 !~ /\\$/) on = 0 }
    ' "$src/Makefile.am")
    [ "${#lib_sources[@]}" -gt 10 ] || { echo "fuzz.sh: no library sources in Makefile.am" >&2; exit 2; }
    lib_sources+=(tests/support/doc_requests.c tests/fuzz/fuzz_store.c tests/fuzz/fuzz_client.c)
    local objs=() s o jobs=0
    for s in "${lib_sources[@]}"; do
        o="$out/obj/$(echo "$s" | tr / _).o"
        # shellcheck disable=SC2086
        "$CC" $cflags $san -fsanitize=fuzzer-no-link -c "$src/$s" -o "$o" &
        objs+=("$o")
        jobs=$((jobs + 1))
        if [ "$jobs" -ge "$(nproc)" ]; then wait -n; jobs=$((jobs - 1)); fi
    done
    while [ "$jobs" -gt 0 ]; do wait -n; jobs=$((jobs - 1)); done
    local t
    for t in "${targets[@]}"; do
        # shellcheck disable=SC2086
        "$CC" $cflags $san -fsanitize=fuzzer "$src/tests/fuzz/fuzz_$t.c" "${objs[@]}" $libs \
            -o "$out/fuzz_$t"
    done
    # shellcheck disable=SC2086
    "$CC" $cflags $san -fsanitize=fuzzer-no-link -DFUZZ_SEEDS_MAIN -DFUZZ_NO_ENTRY \
        "$src/tests/fuzz/fuzz_seeds.c" "${objs[@]}" $libs -o "$out/fuzz_seeds"
    rm -rf "$out/seeds"
    TALLY_DOCS="$src/docs" "$out/fuzz_seeds" "$out/seeds"
    echo "fuzz.sh: built ${targets[*]} in $out"
}

run() {
    local out=$1 target=$2 seconds=$3
    local len
    len=$(max_len "$target")
    [ -x "$out/fuzz_$target" ] || { echo "fuzz.sh: build first ($out/fuzz_$target)" >&2; exit 1; }
    mkdir -p "$out/corpus/$target" "$out/crashes" "$src/tests/fuzz/corpus/$target"
    echo "fuzz.sh: fuzzing $target for $seconds s"
    # shellcheck disable=SC2086
    "$out/fuzz_$target" -max_total_time="$seconds" -max_len="$len" -timeout=30 \
        -malloc_limit_mb=$malloc_limit_mb -rss_limit_mb=$rss_limit_mb \
        -print_final_stats=1 -artifact_prefix="$out/crashes/$target-" ${FUZZ_FLAGS:-} \
        "$out/corpus/$target" "$src/tests/fuzz/corpus/$target" "$out/seeds/$target" \
        "$src/tests/fuzz/regressions/$target"
}

# The committed corpus of each target becomes the minimized union of itself,
# OUT's corpus, the seeds and the regressions.
corpus() {
    local out=$1 t
    for t in "${targets[@]}"; do
        [ -x "$out/fuzz_$t" ] || { echo "fuzz.sh: build first ($out/fuzz_$t)" >&2; exit 1; }
        rm -rf "$out/merged/$t" && mkdir -p "$out/merged/$t" "$out/corpus/$t" "$src/tests/fuzz/corpus/$t"
        "$out/fuzz_$t" -merge=1 -max_len="$(max_len "$t")" -malloc_limit_mb=$malloc_limit_mb \
            -rss_limit_mb=$rss_limit_mb -timeout=30 "$out/merged/$t" "$src/tests/fuzz/corpus/$t" \
            "$out/corpus/$t" "$out/seeds/$t" "$src/tests/fuzz/regressions/$t" 2>&1 | tail -n 2
        rm -rf "$src/tests/fuzz/corpus/$t"
        mv "$out/merged/$t" "$src/tests/fuzz/corpus/$t"
        echo "fuzz.sh: $t: $(ls "$src/tests/fuzz/corpus/$t" | wc -l) inputs, $(du -sh "$src/tests/fuzz/corpus/$t" | cut -f1)"
    done
}

case "${1:-}" in
    build) [ $# -eq 2 ] || { usage >&2; exit 2; }; build "$2" ;;
    run) [ $# -eq 4 ] || { usage >&2; exit 2; }; run "$2" "$3" "$4" ;;
    all)
        [ $# -eq 3 ] || { usage >&2; exit 2; }
        build "$2"
        for t in "${targets[@]}"; do run "$2" "$t" "$3"; done
        ;;
    ci)
        [ $# -eq 3 ] || { usage >&2; exit 2; }
        t0=$(date +%s)
        build "$2"
        echo "fuzz.sh: built in $(( $(date +%s) - t0 )) s"
        for t in "${targets[@]}"; do
            t0=$(date +%s)
            rc=0
            run "$2" "$t" "$3" >"$2/$t.log" 2>&1 || rc=$?
            if [ "$rc" -ne 0 ]; then
                tail -n 60 "$2/$t.log"
                echo "fuzz.sh: $t FAILED (exit $rc; the input is in $2/crashes/)"
                exit 1
            fi
            grep -E '^stat::(number_of_executed_units|new_units_added)' "$2/$t.log" | tr '\n' ' '
            echo "fuzz.sh: $t: $(( $(date +%s) - t0 )) s"
        done
        ;;
    corpus) [ $# -eq 2 ] || { usage >&2; exit 2; }; corpus "$2" ;;
    -h | --help) usage ;;
    *) usage >&2; exit 2 ;;
esac
