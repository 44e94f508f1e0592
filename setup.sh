#!/usr/bin/env bash
# setup.sh — install what tally needs, build it, and run it or its tests.
#
#   ./setup.sh            install dependencies (as root, via apt-get) and build
#   ./setup.sh run [ARGS] ... then run tallyd on its defaults (./tally-data,
#                         tcp://127.0.0.1:7450, events on tcp://127.0.0.1:7451)
#   ./setup.sh test       ... then run the whole test suite (make check)
#   ./setup.sh deps [PKG...]  only install the dependencies, and PKG too
#                         (one apt-get: .ci/run adds what its stages need)
#
# test and deps also put Debian 13's nats-server (2.10) in ./test-deps/bin
# for the cluster's fault tests (tools/fetch_nats_server.sh: Debian 12's
# 2.9.10 stalls under their schedule; the machine's apt setup is untouched).
#
# The build lives in ./build (an out-of-tree autotools build). Running this
# twice is harmless: packages already present are not reinstalled, and
# autoreconf/configure run only when their inputs changed.
set -euo pipefail
cd "$(dirname "$0")"
top=$(pwd)

packages=(build-essential autoconf automake libtool pkg-config
          liblmdb-dev lmdb-utils libnng-dev nng-utils libmsgpack-dev check
          libmbedtls-dev libssl-dev libjansson-dev libmicrohttpd-dev libgnutls28-dev
          nats-server libnats-dev libcurl4-openssl-dev
          prometheus # prometheus: the server and promtool, for the metrics tests
          python3 # the layering check and the SP drafts test
          python3-cryptography # tests/support/nats_creds.py: NATS nkeys and JWTs (check_cluster_auth)
          python3-pytest python3-mypy python3-pip python3-setuptools python3-wheel # the Python client's tests (clients/python), its types, its pip install
          curl openssl # curl: the JSON API's and webhooks' tests speak HTTP with it; openssl: webhook signatures
          libsystemd-dev # sd_notify readiness (optional at build time: configure --with-systemd)
          help2man mandoc # the man pages from --help; mandoc -T lint checks them
          gdb # a test past its bound: run_test.sh prints its stacks
          nodejs # the OpenAPI validator of tests/openapi and the TypeScript client (npm ci, from their lock files)
          chromium) # the web console's browser test (tests/console: puppeteer-core drives it)

install_dependencies() {
    local missing=()
    for p in "${packages[@]}" "$@"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" ||
            missing+=("$p")
    done
    # npm: Debian's package, unless the machine's Node.js brings its own
    command -v npm >/dev/null 2>&1 || missing+=(npm)
    [ ${#missing[@]} -eq 0 ] && return 0
    if [ "$(id -u)" -ne 0 ]; then
        echo "setup.sh: missing packages: ${missing[*]}" >&2
        echo "setup.sh: run as root, or: sudo apt-get install -y ${missing[*]}" >&2
        exit 1
    fi
    echo "setup.sh: installing ${missing[*]}" >&2
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq "${missing[@]}" >/dev/null
}

build() {
    if [ ! -x configure ] || [ configure.ac -nt configure ] || [ Makefile.am -nt Makefile.in ]; then
        autoreconf -fi
    fi
    mkdir -p build
    if [ ! -f build/Makefile ] || [ configure -nt build/config.status ] ||
        [ test-deps/bin/nats-server -nt build/config.status ]; then
        (cd build && "$top/configure" --enable-werror)
    fi
    make -C build -j"$(nproc)"
    npm_ci tests/openapi
    npm_ci tests/console
    npm_ci clients/typescript
}

# The npm packages of a test folder ($1) from the registry, exactly as its
# committed lock file says, when the lock file is newer than what is
# installed: tests/openapi's validator (@apidevtools/swagger-parser,
# tests/openapi/check_openapi.sh), tests/console's puppeteer-core (the web
# console's browser test, tests/console/check_console.sh), and
# clients/typescript's toolchain (typescript, @types/node; its tests,
# tests/clients/check_typescript.sh).
npm_ci() {
    local d=$1
    if [ ! -f "$d/node_modules/.package-lock.json" ] ||
        [ "$d/package-lock.json" -nt "$d/node_modules/.package-lock.json" ]; then
        (cd "$d" && npm ci --no-audit --no-fund)
    fi
}

command=${1:-build}
[ $# -gt 0 ] && shift
# check_cluster_faults' nats-server (configure finds it in test-deps/bin).
test_nats_server() {
    tools/fetch_nats_server.sh "$top/test-deps" || {
        echo "setup.sh: the cluster tests need nats-server 2.10 or later (above)" >&2
        exit 1
    }
}

if [ "$command" = deps ]; then
    install_dependencies "$@"
    test_nats_server
    exit 0
fi
install_dependencies
[ "$command" = test ] && test_nats_server
build
case "$command" in
    build) ;;
    run)
        echo "setup.sh: the programs are in $top/build; in another shell: export PATH=\"$top/build:\$PATH\"" >&2
        exec "$top/build/tallyd" "$@" ;;
    # The suites mostly wait on processes and sockets: twice as many jobs
    # as cores keeps both busy (each test has its own temp dir and ports).
    test) make -C build -j"$(( 2 * $(nproc) ))" check ;;
    *) echo "usage: ./setup.sh [build|run|test|deps]" >&2; exit 2 ;;
esac
