#!/usr/bin/env bash
# tests/install/package.sh — the Debian packages (debian/) as a user gets
# them: install the build dependencies, build every package with
# dpkg-buildpackage -us -uc -b in a temp copy of the tree, lintian (no
# errors), install them with apt-get, check the user tally, /var/lib/tally
# and /etc/tally/tallyd.conf, start tallyd (tallyd.service when systemd
# runs; else the unit's ExecStart as the user tally), open two accounts and
# move an amount with the packaged CLI, check the balances, stop it, purge
# the packages, and check that /etc/tally is gone and the data is kept.
#
# Run by .ci/run as root on a Debian 12 machine; not part of make check (it
# installs packages on the machine). make check ran the suite before, so
# the package build skips it (DEB_BUILD_OPTIONS=nocheck). What this run
# created (the data directory, the user tally) is removed at the end, so a
# machine is left as it was; the data is checked to survive the purge first.
set -euo pipefail
cd "$(dirname "$0")/../.."
top=$(pwd)
[ "$(id -u)" -eq 0 ] || { echo "package.sh: run as root (it installs packages)" >&2; exit 1; }
packages=(tallyd tally-tools tally-relay libtally7 libtally-dev)
for p in "${packages[@]}"; do
    if dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
        echo "package.sh: $p is installed already; this test would purge it: stop" >&2
        exit 1
    fi
done
# wait_for and pause (tests/support/shell_test.sh); fail is this file's own
. "$top/tests/support/shell_test.sh"
start=$(date +%s)
step() { echo "--- package.sh: $* ($(( $(date +%s) - start ))s)"; }
fail() { echo "package.sh: FAIL: $*" >&2; exit 1; }

tmp=$(mktemp -d /tmp/tally-package.XXXXXX)
chmod 755 "$tmp"
pid=
data_existed=no; [ -e /var/lib/tally ] && data_existed=yes
user_existed=no; getent passwd tally >/dev/null && user_existed=yes
cleanup() {
    rc=$?
    [ -n "$pid" ] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null
    if [ "$rc" -ne 0 ]; then
        [ -f "$tmp/tallyd.log" ] && { echo "--- tallyd's log"; tail -30 "$tmp/tallyd.log"; }
        [ -f "$tmp/build.log" ] && { echo "--- the end of the build log"; tail -40 "$tmp/build.log"; }
        installed=()
        for p in "${packages[@]}"; do
            dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" && installed+=("$p")
        done
        [ ${#installed[@]} -eq 0 ] || apt-get purge -y -qq "${installed[@]}" >/dev/null 2>&1 || true
    fi
    # Leave the machine as it was: what this run created goes.
    [ "$data_existed" = yes ] || rm -rf /var/lib/tally
    [ "$user_existed" = yes ] || ! getent passwd tally >/dev/null || deluser --system --quiet tally 2>/dev/null || true
    getent group tally >/dev/null && [ "$user_existed" = no ] && delgroup --system --quiet tally 2>/dev/null || true
    rm -rf "$tmp"
    exit "$rc"
}
trap cleanup EXIT

step "the build dependencies (debian/control) and the packaging tools"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq build-essential devscripts debhelper fakeroot lintian >/dev/null
# A copy of the tree as git sees it (tracked and new files, not ignored
# ones: no build directories), where dpkg-buildpackage may write.
mkdir "$tmp/src"
if git -C "$top" rev-parse --git-dir >/dev/null 2>&1; then
    git -C "$top" ls-files -z --cached --others --exclude-standard |
        (cd "$top" && xargs -0 cp --parents -t "$tmp/src")
else
    tar -C "$top" --exclude=./build --exclude='./build-*' -cf - . | tar -C "$tmp/src" -xf -
fi
apt-get build-dep -y -qq "$tmp/src" >/dev/null

step "the version: debian/changelog against configure.ac"
want=$(sed -n 's/^AC_INIT(\[tally\], \[\([^]]*\)\].*/\1/p' "$tmp/src/configure.ac")
got=$(cd "$tmp/src" && dpkg-parsechangelog -S Version)
[ -n "$want" ] && [ "$got" = "$want" ] ||
    fail "debian/changelog says $got, configure.ac's AC_INIT says $want: add a changelog entry (dch -v $want)"

step "dpkg-buildpackage -us -uc -b (DEB_BUILD_OPTIONS=nocheck: make check ran before)"
(cd "$tmp/src" && DEB_BUILD_OPTIONS="nocheck parallel=$(nproc)" dpkg-buildpackage -us -uc -b) \
    >"$tmp/build.log" 2>&1 || fail "dpkg-buildpackage failed"
for p in "${packages[@]}"; do
    [ -f "$tmp/${p}_${want}_$(dpkg --print-architecture).deb" ] || fail "no package $p was built"
done
grep "^debian/rules: .* not packaged" "$tmp/build.log" || true

step "lintian: no errors"
lintian --fail-on error "$tmp"/tally_*.changes 2>&1 |
    tee "$tmp/lintian.log" || fail "lintian reports errors"

step "apt-get install ./*.deb"
debs=()
for p in "${packages[@]}"; do debs+=("$tmp/${p}_${want}_$(dpkg --print-architecture).deb"); done
apt-get install -y -qq "${debs[@]}" >"$tmp/install.log" 2>&1 || { cat "$tmp/install.log"; fail "install failed"; }
getent passwd tally >/dev/null || fail "no system user tally"
[ "$(stat -c '%U:%G %a' /var/lib/tally)" = "tally:tally 750" ] ||
    fail "/var/lib/tally is $(stat -c '%U:%G %a' /var/lib/tally), wanted tally:tally 750"
if [ -f "$tmp/src/dist/tallyd.conf" ]; then
    [ -f /etc/tally/tallyd.conf ] || fail "/etc/tally/tallyd.conf is not installed"
    dpkg-query -W -f='${Conffiles}\n' tallyd | grep -q ' /etc/tally/tallyd.conf ' ||
        fail "/etc/tally/tallyd.conf is not a conffile of tallyd"
fi
for tool in tally tally-recon tally-bench tally-readmodel tally-relay; do
    command -v "$tool" >/dev/null || fail "$tool is not installed"
done
pkg-config --exists tally || fail "tally.pc is not installed"
# the Grafana dashboard as Grafana imports it (not compressed: debian/rules)
python3 -c 'import json, sys; json.load(open(sys.argv[1]))' /usr/share/doc/tallyd/tally.json ||
    fail "/usr/share/doc/tallyd/tally.json is not installed as JSON"
# the Prometheus scrape config and alert rules, as Prometheus reads them
for f in prometheus.yml tally-alerts.yml; do
    [ -f "/usr/share/doc/tallyd/$f" ] || fail "/usr/share/doc/tallyd/$f is not installed"
done
if command -v promtool >/dev/null; then
    promtool check rules /usr/share/doc/tallyd/tally-alerts.yml >/dev/null ||
        fail "the installed alert rules do not pass promtool check rules"
fi

unit=/lib/systemd/system/tallyd.service
step "start tallyd ($( [ "$(ps -p 1 -o comm=)" = systemd ] && echo systemd || echo "no systemd: the unit's command as the user tally"))"
if [ "$(ps -p 1 -o comm=)" = systemd ]; then
    systemctl start tallyd.service
    systemctl is-active --quiet tallyd.service || fail "tallyd.service is not active"
else
    # The unit's ExecStart (its %S, %E and $STATE_DIRECTORY as systemd
    # sets them for a system unit), or, in a tree without the unit, the
    # binary on the state directory.
    cmd="/usr/bin/tallyd --data /var/lib/tally"
    if [ -f "$unit" ]; then
        cmd=$(sed -n 's/^ExecStart=[-@+!:]*//p' "$unit" | head -n 1 |
            sed -e 's|%S|/var/lib|g' -e 's|%E|/etc|g' -e 's|%%|%|g')
    fi
    echo "$cmd"
    cd /var/lib/tally
    # setpriv execs the command (runuser would stay as its parent).
    STATE_DIRECTORY=/var/lib/tally setpriv --reuid=tally --regid=tally --init-groups \
        -- /bin/sh -c "exec $cmd" >"$tmp/tallyd.log" 2>&1 &
    pid=$!
    cd "$top"
fi
# Whether tallyd answers; fails the run when it exited.
tallyd_answers() {
    tally --json stats >/dev/null 2>&1 && return 0
    [ -z "$pid" ] || kill -0 "$pid" 2>/dev/null || fail "tallyd exited: $(cat "$tmp/tallyd.log")"
    return 1
}
wait_for "tallyd answers tally stats" 60 tallyd_answers || true # a loaded machine is slow
tally --json stats >/dev/null || fail "tallyd does not answer tally stats"

step "a transfer with the packaged CLI"
a=$(( $(date +%s) * 10 )) b=$(( $(date +%s) * 10 + 1 ))
tally account open "$a" >/dev/null
tally account open "$b" >/dev/null
tally transfer --debit "$a" --credit "$b" --amount 25 >/dev/null
tally --json account get "$a" | grep -q '"debits_posted":25,' || fail "account $a: $(tally --json account get "$a")"
tally --json account get "$b" | grep -q '"credits_posted":25,' || fail "account $b: $(tally --json account get "$b")"
echo "accounts $a and $b: 25 moved"

step "stop tallyd"
if [ -z "$pid" ]; then
    systemctl stop tallyd.service
else
    kill "$pid"
    wait "$pid" || fail "tallyd did not stop cleanly: $(tail -5 "$tmp/tallyd.log")"
    pid=
fi

step "apt-get purge: /etc/tally goes, /var/lib/tally stays"
apt-get purge -y "${packages[@]}" >"$tmp/purge.log" 2>&1 || { cat "$tmp/purge.log"; fail "purge failed"; }
grep "tallyd: " "$tmp/purge.log" || true
[ ! -e /etc/tally ] || fail "/etc/tally is still there after purge: $(ls -la /etc/tally)"
[ -d /var/lib/tally ] && [ -n "$(ls -A /var/lib/tally)" ] || fail "the data in /var/lib/tally was removed"
grep -q "ledger data in /var/lib/tally was kept" "$tmp/purge.log" || fail "purge did not say where the data is"
for p in "${packages[@]}"; do
    ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || fail "$p is still installed"
done
step "done: the packages built, installed, served a transfer and were purged"
