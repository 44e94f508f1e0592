#!/bin/sh
# tests/install/check_service.sh — tally as an operator installs it: make
# install into a temp DESTDIR, then check that
#   - the man pages tallyd(8), tally(1), tally-recon(1), tally-bench(1),
#     tally-readmodel(1), tally-echo(1), tally-demo(1), tally-stripe-mapper(1)
#     (and tally-relay(1) when built), one for every program installed, are in
#     $(mandir)/man8 and man1, render with `man -l` and groff -ww without a
#     warning, and pass `mandoc -T lint -W warning` (when mandoc is there)
#     and lexgrog;
#   - the example config is $(docdir)/examples/tallyd.conf;
#   - the systemd units are in the unit directory (when configured), and
#     `systemd-analyze verify` passes on them with their ExecStart pointed
#     at the installed binaries and MANPATH at the installed pages.
# Run by make check (and so by make distcheck); needs TALLY_BUILDDIR,
# TALLY_MAKE, TALLY_MANDIR, TALLY_EXAMPLEDIR, TALLY_UNITDIR (empty: units
# not installed), TALLY_RELAY_BUILT, TALLY_MAN_BUILT (no: configure found no
# help2man) from the test environment (Makefile.am).
set -eu
: "${TALLY_BUILDDIR:?run by make check}"
make_cmd=${TALLY_MAKE:-make}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/tally-service.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
fail() { echo "check_service: $*" >&2; exit 1; }
root=$tmp/root

env -u MAKEFLAGS -u MFLAGS $make_cmd -C "$TALLY_BUILDDIR" install DESTDIR="$root" \
    >"$tmp/install.log" 2>&1 || { cat "$tmp/install.log" >&2; fail "make install failed"; }

# ---- the man pages ----
pages="man8/tallyd.8 man1/tally.1 man1/tally-recon.1 man1/tally-bench.1 man1/tally-readmodel.1
       man1/tally-echo.1 man1/tally-demo.1 man1/tally-stripe-mapper.1"
[ "${TALLY_RELAY_BUILT:-}" = yes ] && pages="$pages man1/tally-relay.1"
checked=0
if [ "${TALLY_MAN_BUILT:-}" != yes ]; then
    echo "check_service: configure found no help2man: the man pages are not checked" >&2
    pages=
fi
# every program make install puts in a bin directory has a page
if [ -n "$pages" ]; then
    for program in $(find "$root" -path '*/bin/*' -type f -exec basename {} \;); do
        case " $(echo $pages) " in
        *"/$program.1 "* | *"/$program.8 "*) ;;
        *) fail "$program is installed without a man page" ;;
        esac
    done
fi
for page in $pages; do
    file=$root$TALLY_MANDIR/$page
    [ -f "$file" ] || fail "$page is not installed in $TALLY_MANDIR"
    warnings=$(MANWIDTH=80 man -l -Tutf8 "$file" 2>&1 >/dev/null) ||
        fail "man -l $page failed: $warnings"
    [ -z "$warnings" ] || fail "man -l $page warns: $warnings"
    warnings=$(groff -ww -z -man "$file" 2>&1) || fail "groff $page failed: $warnings"
    [ -z "$warnings" ] || fail "groff -ww $page warns: $warnings"
    if [ -n "${TALLY_MANDOC:-}" ]; then
        warnings=$("$TALLY_MANDOC" -T lint -W warning "$file" 2>&1) ||
            fail "mandoc -T lint $page: $warnings"
    fi
    name=$(basename "$page" | sed 's/\.[18]$//')
    lexgrog "$file" | grep -q "\"$name - " || fail "lexgrog finds no NAME line in $page"
    checked=$((checked + 1))
done
# The page is --help's text: every option of a program's --help (the option
# table's rows, common/options.h) is in its page.
for page in $pages; do
    program=$(basename "$page" | sed 's/\.[18]$//')
    [ "$program" = tally ] && continue # commands, not an option table: check_cli
    MANWIDTH=200 man -l "$root$TALLY_MANDIR/$page" 2>/dev/null >"$tmp/page.txt"
    for option in $("$TALLY_BUILDDIR/$program" --help | sed -n 's/^  \(-., \)\{0,1\}--\([a-z-]*\).*/\2/p'); do
        grep -q -- "--$option" "$tmp/page.txt" || fail "$program($page) lacks --$option"
    done
done

# ---- the example config ----
[ -f "$root$TALLY_EXAMPLEDIR/tallyd.conf" ] || fail "no $TALLY_EXAMPLEDIR/tallyd.conf"
"$TALLY_BUILDDIR/tallyd" --example-config | cmp -s - "$root$TALLY_EXAMPLEDIR/tallyd.conf" ||
    fail "the installed tallyd.conf is not tallyd --example-config"

# ---- the systemd units ----
if [ -n "${TALLY_UNITDIR:-}" ]; then
    units=tallyd.service
    [ "${TALLY_RELAY_BUILT:-}" = yes ] && units="$units tally-relay.service"
    mkdir "$tmp/units"
    for unit in $units; do
        file=$root$TALLY_UNITDIR/$unit
        [ -f "$file" ] || fail "$unit is not installed in $TALLY_UNITDIR"
        grep -q '@bindir@\|@sbindir@' "$file" && fail "$unit: @bindir@ not substituted"
        # The installed binaries stand for the ones systemd would start.
        sed "s|^ExecStart=|ExecStart=$root|" "$file" >"$tmp/units/$unit"
        state=/var/lib/tally
        [ "$unit" = tally-relay.service ] && state=/var/lib/tally-relay
        for want in Type= User=tally "StateDirectory=${state#/var/lib/}\$" KillSignal=SIGTERM \
            TimeoutStopSec= ProtectSystem=strict ProtectHome=yes NoNewPrivileges=yes PrivateTmp=yes \
            "ReadWritePaths=$state\$" 'CapabilityBoundingSet=$' \
            SystemCallFilter=@system-service LimitNOFILE=; do
            grep -q "^$want" "$file" || fail "$unit has no $want"
        done
        # the relay writes nothing of the ledger's: no path of tallyd's data
        [ "$unit" = tally-relay.service ] && grep -q '^ReadWritePaths=.*/var/lib/tally\( \|$\)' "$file" &&
            fail "tally-relay.service may write tallyd's data directory"
    done
    grep -q '^Type=notify$' "$tmp/units/tallyd.service" || fail "tallyd.service is not Type=notify"
    grep -q '^ExecReload=/bin/kill -HUP \$MAINPID$' "$tmp/units/tallyd.service" ||
        fail "tallyd.service: no ExecReload sending SIGHUP"
    if command -v systemd-analyze >/dev/null; then
        out=$(cd "$tmp/units" && MANPATH=$root$TALLY_MANDIR SYSTEMD_LOG_COLOR=0 \
            systemd-analyze verify $(for u in $units; do printf './%s ' "$u"; done) 2>&1) ||
            fail "systemd-analyze verify: $out"
        [ -z "$out" ] || fail "systemd-analyze verify warns: $out"
    else
        echo "check_service: no systemd-analyze: the units are not verified" >&2
    fi
fi
echo "check_service: $checked man pages render and lint clean; example config and units installed"
echo "1 passed, 0 failed"
