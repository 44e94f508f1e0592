#!/bin/sh
# tests/openapi/check_openapi.sh — the JSON API's OpenAPI document:
#   - docs/openapi.json is exactly what `tallyd --openapi` prints from the
#     op table (regenerate it: build/tallyd --openapi > docs/openapi.json);
#   - a real tallyd (with --auth) serves the same bytes at GET
#     /v1/openapi.json to a caller without a token, while its other /v1/
#     routes answer such a caller 401;
#   - a real validator, @apidevtools/swagger-parser from npm (installed in
#     tests/openapi/node_modules by `npm ci` from the committed lock file,
#     here when setup.sh has not), passes it as OpenAPI 3.1, and
#     validate.js checks it against docs/PROTOCOL.md: every op and GET path
#     there is in it, every JSON example's request and reply validate
#     against their route's schemas, and every route of the document is
#     one the running tallyd has, its reply (POST `{}`, GET with path
#     parameters "1") passing the document's schema of its status; and
#     every JSON reply tests/net/check_json gets (run here with
#     TALLY_JSON_REPLIES) passes the schema of its route and status. No npm or no install is a failure,
#     never a skip.
# Run by make check (TALLYD, TALLY_SRCDIR, TALLY_BUILDDIR from the test
# environment), after tests/net/check_json is built.
set -u
: "${TALLYD:?run by make check}" "${TALLY_SRCDIR:?}" "${TALLY_BUILDDIR:?}"
for tool in curl node npm sha256sum; do
    command -v $tool >/dev/null 2>&1 ||
        { echo "check_openapi: $tool is needed (setup.sh installs it)" >&2; exit 1; }
done
. "$TALLY_SRCDIR/tests/support/shell_test.sh"
shell_test_begin openapi
doc="$TALLY_SRCDIR/docs/openapi.json"

# ---- docs/openapi.json is generated ----
"$TALLYD" --openapi >"$tmp/generated.json"
expect "tallyd --openapi exits 0" 0 $?
if cmp -s "$tmp/generated.json" "$doc"; then
    ok "docs/openapi.json equals tallyd --openapi"
else
    fail "docs/openapi.json differs from tallyd --openapi (regenerate: tallyd --openapi > docs/openapi.json):"
    diff "$doc" "$tmp/generated.json" | head -20 >&2
fi

# ---- served by tallyd, without a token even with --auth ----
umask 077
mkdir -p "$tmp/backups"
token=openapi-token
printf 'all %s write:*,read,admin\n' "$(printf %s "$token" | sha256sum | cut -d' ' -f1)" >"$tmp/auth"
"$TALLYD" --data "$tmp/data" --listen "ipc://$tmp/rep" --publish "ipc://$tmp/pub" \
    --http "http://127.0.0.1:0" --auth "$tmp/auth" --backup-dir "$tmp/backups" \
    --ready-file "$tmp/ready" >"$tmp/tallyd.log" 2>&1 &
pid=$!
wait_serving "$tmp/tallyd.log" 30 && [ -f "$tmp/ready" ] ||
    { cat "$tmp/tallyd.log" >&2; echo "check_openapi: tallyd did not start" >&2; exit 1; }
base=$(sed -n 's/^http //p' "$tmp/ready")
status=$(curl -s -o "$tmp/served.json" -D "$tmp/h" -w '%{http_code}' "$base/v1/openapi.json")
expect "GET /v1/openapi.json without a token" 200 "$status"
if cmp -s "$tmp/served.json" "$doc"; then
    ok "GET /v1/openapi.json serves docs/openapi.json's bytes"
else
    fail "GET /v1/openapi.json differs from docs/openapi.json"
fi
grep -qi '^content-type: application/json' "$tmp/h" && ok "served as application/json" ||
    fail "content type: $(grep -i '^content-type' "$tmp/h")"
status=$(curl -s -o /dev/null -w '%{http_code}' "$base/v1/stats")
expect "GET /v1/stats without a token (the other routes keep --auth)" 401 "$status"
status=$(curl -s -o /dev/null -w '%{http_code}' -H "Authorization: Bearer $token" "$base/v1/stats")
expect "GET /v1/stats with the token" 200 "$status"
status=$(curl -s -o /dev/null -w '%{http_code}' -X POST "$base/v1/openapi.json")
expect "POST /v1/openapi.json" 405 "$status"

# ---- a real validator, and the document against PROTOCOL.md ----
modules="$TALLY_SRCDIR/tests/openapi"
npm_ci "$modules" ||
    { fail "npm ci in tests/openapi (the validator)"; shell_test_end check_openapi; }
# every reply of the JSON API's suite, recorded by it
TALLY_JSON_REPLIES="$tmp/replies.jsonl" "$TALLY_BUILDDIR/tests/net/check_json" \
    >"$tmp/check_json.log" 2>&1 ||
    { tail -30 "$tmp/check_json.log" >&2; fail "tests/net/check_json (recording its replies)"; }
if node "$modules/validate.js" "$doc" "$TALLY_SRCDIR/docs/PROTOCOL.md" \
    --replies "$tmp/replies.jsonl" --server "$base" "$token"; then
    ok "the validator passes docs/openapi.json and PROTOCOL.md's examples"
else
    fail "tests/openapi/validate.js (above)"
fi
shell_test_end check_openapi
