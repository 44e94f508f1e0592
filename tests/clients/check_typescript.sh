#!/bin/sh
# tests/clients/check_typescript.sh — the TypeScript client
# (clients/typescript, @tally/client):
#   - its toolchain (typescript, @types/node), installed in
#     clients/typescript/node_modules by `npm ci` from the committed lock
#     file (here when setup.sh has not);
#   - tsc (strict) builds the library alone, without Node's types (it runs
#     in browsers too), and then the library with its tests;
#   - Node's test runner runs the tests (clients/typescript/test/*.test.ts):
#     each starts a real tallyd ($TALLYD) with its HTTP face on a loopback
#     port of the kernel's and runs the shared scenario of issue 32, the
#     retries, the subscriber loop killed mid-handler, the SSE tail.
# No node, npm or install is a failure, never a skip. Run by make check
# (TALLYD, TALLY_SRCDIR from the test environment).
set -u
: "${TALLYD:?run by make check}" "${TALLY_SRCDIR:?}"
. "$TALLY_SRCDIR/tests/support/shell_test.sh"
shell_test_begin typescript
pkg="$TALLY_SRCDIR/clients/typescript"
command -v node >/dev/null 2>&1 && command -v npm >/dev/null 2>&1 ||
    { fail "node and npm are needed (setup.sh installs them)"; shell_test_end check_typescript; }
npm_ci "$pkg" || { fail "npm ci in clients/typescript"; shell_test_end check_typescript; }
tsc="$pkg/node_modules/typescript/bin/tsc"

# The library alone: strict, no Node types, declarations emitted.
if node "$tsc" -p "$pkg/tsconfig.json" --outDir "$tmp/dist" >"$tmp/tsc.log" 2>&1; then
    ok "tsc builds the library (strict, without Node's types)"
else
    cat "$tmp/tsc.log" >&2
    fail "tsc -p clients/typescript/tsconfig.json"
fi
[ -f "$tmp/dist/index.d.ts" ] && ok "declarations emitted" || fail "no dist/index.d.ts"

# The library and its tests, outside the source tree; an ES module there.
if node "$tsc" -p "$pkg/tsconfig.test.json" --outDir "$tmp/out" >"$tmp/tsc-test.log" 2>&1; then
    ok "tsc builds the tests"
else
    cat "$tmp/tsc-test.log" >&2
    fail "tsc -p clients/typescript/tsconfig.test.json"
    shell_test_end check_typescript
fi
echo '{"type": "module"}' >"$tmp/out/package.json"
if (cd "$tmp" && node --test "$tmp"/out/test/*.test.js) >"$tmp/node-test.log" 2>&1; then
    ok "node --test: $(grep -E '^# (tests|pass)' "$tmp/node-test.log" | tr '\n' ' ')"
else
    cat "$tmp/node-test.log" >&2
    fail "node --test (above)"
fi
grep -E '^# (tests|pass|fail)' "$tmp/node-test.log"
shell_test_end check_typescript
