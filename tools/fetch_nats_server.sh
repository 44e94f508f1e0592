#!/usr/bin/env bash
# fetch_nats_server.sh — put a nats-server of 2.10 or later in DIR/bin for
# the cluster tests, from Debian's own archive.
#
#   tools/fetch_nats_server.sh DIR
#
# Debian 12 ships nats-server 2.9.10, which its maintainers no longer
# support and whose stream replicas drift apart under the fault schedule of
# tests/cluster/check_cluster_faults.c (docs/CLUSTER.md, "What the fault
# schedule found"). Debian 13 (trixie) ships 2.10: this script downloads
# that package with apt-get, through a sources list, package lists and
# cache of its own under DIR (the machine's apt configuration and installed
# packages are not touched; apt checks the archive's signature with the
# machine's debian-archive-keyring), and unpacks only the server's binary
# to DIR/bin/nats-server. configure takes it from there (tally's own
# builds configure with NATS_SERVER=DIR/bin/nats-server: setup.sh and
# .ci/run do).
#
# Running it again with the binary present does nothing. Exit 0 with the
# binary in place, 1 otherwise (the reason on stderr).
set -euo pipefail
[ $# -eq 1 ] || { echo "usage: $0 DIR" >&2; exit 2; }
dir=$1
bin=$dir/bin/nats-server
suite=${TALLY_NATS_SERVER_SUITE:-trixie}

# v2.10 or later: "nats-server: v2.10.27".
recent_enough() {
    local v
    v=$("$1" --version 2>/dev/null | sed -n 's/^nats-server: v\([0-9]*\)\.\([0-9]*\).*/\1 \2/p')
    [ -n "$v" ] || return 1
    set -- $v
    [ "$1" -gt 2 ] || { [ "$1" -eq 2 ] && [ "$2" -ge 10 ]; }
}

if [ -x "$bin" ] && recent_enough "$bin"; then
    exit 0
fi

mkdir -p "$dir"
dir=$(cd "$dir" && pwd)
apt_dir=$dir/apt
rm -rf "$apt_dir"
mkdir -p "$apt_dir/lists/partial" "$apt_dir/cache/archives/partial" "$apt_dir/download"
echo "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian $suite main" \
    >"$apt_dir/sources.list"
opts=(-qq
      -o Dir::Etc::sourcelist="$apt_dir/sources.list" -o Dir::Etc::sourceparts=-
      -o Dir::State::Lists="$apt_dir/lists" -o Dir::Cache="$apt_dir/cache"
      -o Dir::State::status=/dev/null -o APT::Sandbox::User=root
      -o APT::Architecture="$(dpkg --print-architecture)")
if ! apt-get "${opts[@]}" update >"$apt_dir/update.log" 2>&1; then
    echo "fetch_nats_server.sh: apt-get update of Debian $suite failed:" >&2
    tail -5 "$apt_dir/update.log" >&2
    exit 1
fi
if ! (cd "$apt_dir/download" && apt-get "${opts[@]}" download nats-server) >"$apt_dir/download.log" 2>&1; then
    echo "fetch_nats_server.sh: apt-get download nats-server (Debian $suite) failed:" >&2
    tail -5 "$apt_dir/download.log" >&2
    exit 1
fi
deb=$(ls "$apt_dir"/download/nats-server_*.deb)
dpkg-deb -x "$deb" "$apt_dir/unpacked"
mkdir -p "$dir/bin"
install -m 0755 "$apt_dir/unpacked/usr/sbin/nats-server" "$bin.new"
if ! recent_enough "$bin.new"; then
    echo "fetch_nats_server.sh: $(basename "$deb") is not 2.10 or later" >&2
    rm -f "$bin.new"
    exit 1
fi
mv "$bin.new" "$bin"
rm -rf "$apt_dir"
echo "fetch_nats_server.sh: $("$bin" --version) from $(basename "$deb") in $bin" >&2
