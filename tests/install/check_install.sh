#!/bin/sh
# tests/install/check_install.sh — libtally as a user gets it: install the
# build into a temp DESTDIR, then compile and link a program that includes
# both the C library's <error.h> and <tally.h> (and <tally_inbox.h>) with
# the installed tally.pc's flags, run it, and check that the installed
# libtally exports only tally_ symbols and carries no store code.
# Run by make check (and so by make distcheck); needs TALLY_BUILDDIR and
# TALLY_MAKE from the test environment (Makefile.am).
set -eu
: "${TALLY_BUILDDIR:?run by make check}"
make_cmd=${TALLY_MAKE:-make}
cc=${CC:-cc}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/tally-install.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
fail() { echo "check_install: $*" >&2; exit 1; }

# MAKEFLAGS of the calling make (e.g. TESTS=...) stay out of the install.
env -u MAKEFLAGS -u MFLAGS $make_cmd -C "$TALLY_BUILDDIR" install DESTDIR="$tmp/root" \
    >"$tmp/install.log" 2>&1 || { cat "$tmp/install.log" >&2; fail "make install failed"; }
pc=$(find "$tmp/root" -name tally.pc | head -n 1)
[ -n "$pc" ] || fail "no tally.pc installed"
lib=$(find "$tmp/root" -name 'libtally.so.*' -type f | head -n 1)
[ -n "$lib" ] || fail "no libtally.so installed"
inc=$(dirname "$(find "$tmp/root" -name tally.h | head -n 1)")
[ ! -e "$inc/error.h" ] || fail "an error.h is installed beside tally.h: it shadows <error.h>"
[ -f "$inc/tally_error.h" ] || fail "tally_error.h is not installed"

cat >"$tmp/prog.c" <<'PROG'
#include <error.h>
#include <tally.h>
#include <tally_inbox.h>
#include <stdio.h>
#include <string.h>

int main(void)
{
    /* error_message_count is glibc's: this is the C library's <error.h>. */
    error_message_count = 0;
    tally_uuid id;
    int rc = tally_uuid_v7(&id);
    if (rc != TALLY_ok)
        error(1, 0, "tally_uuid_v7: %s", tally_strerror(rc));
    if (strcmp(tally_strerror(TALLY_exceeds_credits), "exceeds_credits") != 0)
        error(1, 0, "tally_strerror");
    tally_inbox_event ev; /* the one event type */
    tally_event *same = &ev;
    (void)same;
    printf("ok %s\n", tally_strerror(TALLY_ok));
    return 0;
}
PROG
export PKG_CONFIG_PATH="$(dirname "$pc")"
export PKG_CONFIG_SYSROOT_DIR="$tmp/root"
# TALLY_PROG_LDFLAGS: the build's own (sanitizers: their runtime comes first).
# shellcheck disable=SC2046,SC2086
$cc -Wall -Werror ${TALLY_PROG_LDFLAGS:-} -o "$tmp/prog" "$tmp/prog.c" \
    $(pkg-config --cflags --libs tally) ||
    fail "a program with <error.h> and <tally.h> does not build with tally.pc's flags"
out=$(LD_LIBRARY_PATH="$(dirname "$lib")" "$tmp/prog") || fail "the program failed"
[ "$out" = "ok ok" ] || fail "the program printed: $out"

exported=$(nm -D --defined-only "$lib" | awk 'NF == 3 { print $3 }' | grep -v '^tally_' || true)
[ -z "$exported" ] || fail "libtally exports more than tally_ symbols: $exported"
store=$(nm "$lib" | awk 'NF == 3 { print $3 }' |
    grep -E '^(store_|log_(append|read|head_get|first_seq|event_load)$|ledger_)' || true)
[ -z "$store" ] || fail "libtally carries store code: $store"
echo "check_install: installed libtally builds with <error.h>, exports only tally_, no store"
echo "1 passed, 0 failed"
