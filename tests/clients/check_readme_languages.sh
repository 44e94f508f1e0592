#!/bin/sh
# tests/clients/check_readme_languages.sh — README.md's "One transfer in
# four languages", each block run as written against one real tallyd
# (its SP listener and HTTP face on ports of the kernel's, put in place of
# README's default addresses): the curl block with sh, the Python block
# with Debian's python3 and clients/python, the TypeScript block with node
# and clients/typescript built by its tsc, the C block compiled against
# libtally from the build. Each must print what its comments say: the
# retry replayed and 500 credited. Run by make check (TALLYD, TALLY_SRCDIR
# from the test environment).
set -u
: "${TALLYD:?run by make check}" "${TALLY_SRCDIR:?}"
. "$TALLY_SRCDIR/tests/support/shell_test.sh"
shell_test_begin readme_languages
src=$TALLY_SRCDIR
build=$(cd "$(dirname "$TALLYD")" && pwd)

start_tallyd_http readme_languages --data "$tmp/data" --listen tcp://127.0.0.1:0 --publish none
listen=$(sed -n 's/^listen //p' "$tmp/ready")
port=${base##*:}

# block LANG: the section's block of that language, the default addresses
# replaced by this tallyd's.
block() {
    awk -v lang="$1" '/^## One transfer in four languages/ {sec = 1; next}
        sec && /^## / {exit}
        sec && $0 == "```" lang {inside = 1; next}
        inside && /^```$/ {exit} inside' "$src/README.md" |
        sed -e "s#http://127.0.0.1:7452#$base#g" -e "s#localhost:7452#127.0.0.1:$port#g" \
            -e "s#tcp://127.0.0.1:7450#$listen#g"
}
for lang in sh python ts c; do
    block $lang >"$tmp/block.$lang"
    [ "$(grep -c . "$tmp/block.$lang")" -ge 5 ] || fail "README has no $lang block in its four languages"
done

# curl
if sh -eu "$tmp/block.sh" >"$tmp/curl.out" 2>&1; then
    [ "$(grep -c '"replayed":false' "$tmp/curl.out")" -eq 3 ] &&
        [ "$(grep -c '"replayed":true' "$tmp/curl.out")" -eq 1 ] &&
        grep -q '"credits_posted":500' "$tmp/curl.out" &&
        ok "curl: the retry replayed, 500 credited" || fail "curl printed: $(cat "$tmp/curl.out")"
else
    fail "curl block: $(tail -5 "$tmp/curl.out")"
fi

# Python
if PYTHONPATH="$src/clients/python" /usr/bin/python3 "$tmp/block.python" >"$tmp/py.out" 2>&1 &&
    [ "$(cat "$tmp/py.out")" = "True 500" ]; then
    ok "Python: True 500"
else
    fail "Python block: $(tail -5 "$tmp/py.out")"
fi

# TypeScript: the client built by its own tsc into a package node resolves
pkg=$src/clients/typescript
if npm_ci "$pkg" && node "$pkg/node_modules/typescript/bin/tsc" -p "$pkg/tsconfig.json" \
    --outDir "$tmp/node_modules/@tally/client/dist" >"$tmp/tsc.log" 2>&1; then
    cp "$pkg/package.json" "$tmp/node_modules/@tally/client/"
    cp "$tmp/block.ts" "$tmp/readme.mjs"
    if (cd "$tmp" && node readme.mjs) >"$tmp/ts.out" 2>&1 && [ "$(cat "$tmp/ts.out")" = "true 500" ]; then
        ok "TypeScript: true 500"
    else
        fail "TypeScript block: $(tail -5 "$tmp/ts.out")"
    fi
else
    fail "the TypeScript client did not build: $(tail -5 "$tmp/tsc.log")"
fi

# C: <tally/tally.h> as installed, libtally from the build
mkdir -p "$tmp/inc/tally"
for h in "$src"/clients/libtally/tally*.h; do   # tally.h and the headers it includes
    ln -s "$h" "$tmp/inc/tally/${h##*/}"
done
ln -s "$src/common/tally_error.h" "$tmp/inc/tally/tally_error.h"
cp "$tmp/block.c" "$tmp/demo.c"
# A libtally built with the sanitizers (configure --enable-sanitizers)
# needs their runtime first: the program is built with them too.
san=
ldd "$build/.libs/libtally.so" 2>/dev/null | grep -q libasan && san="-fsanitize=address,undefined"
if ${CC:-cc} -std=c11 -Wall -Werror $san -I"$tmp/inc" -o "$tmp/demo" "$tmp/demo.c" \
    -L"$build/.libs" -ltally -Wl,-rpath,"$build/.libs" >"$tmp/cc.log" 2>&1; then
    if "$tmp/demo" >"$tmp/c.out" 2>&1 && [ "$(cat "$tmp/c.out")" = "1 500" ]; then
        ok "C: 1 500"
    else
        fail "C block printed: $(tail -5 "$tmp/c.out")"
    fi
else
    fail "C block did not compile: $(tail -5 "$tmp/cc.log")"
fi
shell_test_end readme_languages
