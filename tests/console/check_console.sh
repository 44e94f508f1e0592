#!/bin/sh
# tests/console/check_console.sh — the web console (docs/CONSOLE.md) in a
# real browser: Debian's chromium, driven by puppeteer-core from npm
# (tests/console/package-lock.json, installed with npm ci), against a real
# tallyd with --auth serving the source tree's console/.
#
# Here, with curl: the files' content types and Content-Security-Policy, no
# file outside the console's directory. In the browser
# (tests/console/console_test.js): every page loads without console errors,
# the numbers shown equal the API's, the accounts page's filter form lists
# the accounts GET /v1/accounts/query answers (paged), an account's page
# its transfers, replaying a dead letter from the page moves it back to its
# subscriber, and a token without the admin grant sees no replay button. With TALLY_CONSOLE_SCREENSHOTS=DIR, the browser writes
# a PNG of each page there (docs/console/ holds the ones the docs show).
set -u
: "${TALLYD:?run by make check}" "${TALLY_SRCDIR:?}"
chromium=${TALLY_CHROMIUM:-/usr/bin/chromium}
for tool in curl node npm sha256sum; do
    command -v $tool >/dev/null 2>&1 ||
        { echo "check_console: $tool is needed (setup.sh installs it)" >&2; exit 1; }
done
[ -x "$chromium" ] || { echo "check_console: $chromium is needed (setup.sh installs chromium)" >&2; exit 1; }
. "$TALLY_SRCDIR/tests/support/shell_test.sh"
shell_test_begin console

modules="$TALLY_SRCDIR/tests/console"
if [ ! -f "$modules/node_modules/.package-lock.json" ] ||
    [ "$modules/package-lock.json" -nt "$modules/node_modules/.package-lock.json" ]; then
    (cd "$modules" && npm ci --no-audit --no-fund >"$tmp/npm.log" 2>&1) ||
        { cat "$tmp/npm.log" >&2; echo "check_console: npm ci in tests/console failed" >&2; exit 1; }
fi

# every file of console/ is installed (Makefile.am's dist_console_DATA)
for f in "$TALLY_SRCDIR"/console/*; do
    name=console/$(basename "$f")
    sed -n '/^dist_console_DATA/,/[^\\]$/p' "$TALLY_SRCDIR/Makefile.am" | grep -q "$name\( \|$\)" ||
        fail "$name is not in Makefile.am's dist_console_DATA: it would not be installed"
done

umask 077
admin_token=console-admin-token
viewer_token=console-viewer-token
hash_of() { printf %s "$1" | sha256sum | cut -d' ' -f1; }
{
    printf 'ops %s read,write:*,admin\n' "$(hash_of "$admin_token")"
    printf 'viewer %s read,subscribe:*\n' "$(hash_of "$viewer_token")"
    printf 'writer %s write:*\n' "$(hash_of console-writer-token)"
} >"$tmp/auth"
mkdir -p "$tmp/backups"
start_tallyd_http check_console --data "$tmp/data" --listen "ipc://$tmp/rep" \
    --publish "ipc://$tmp/pub" --auth "$tmp/auth" --backup-dir "$tmp/backups" \
    --console-dir "$TALLY_SRCDIR/console" --http-stream-max-s 2

# ---- the files, as served ----
served() { # served PATH: status and the headers in $tmp/h
    curl -s -o "$tmp/body" -D "$tmp/h" -w '%{http_code}' "$base$1"
}
header() { sed -n "s/^$1: //Ip" "$tmp/h" | tr -d '\r'; }
expect "GET /console/" 200 "$(served /console/)"
expect "index.html's type" "text/html; charset=utf-8" "$(header Content-Type)"
csp=$(header Content-Security-Policy)
case "$csp" in
*"default-src 'none'"*"script-src 'self'"*"frame-ancestors 'none'"*) ok "a strict Content-Security-Policy" ;;
*) fail "Content-Security-Policy: '$csp'" ;;
esac
expect "nosniff" nosniff "$(header X-Content-Type-Options)"
expect "GET /console/app.js" 200 "$(served /console/app.js)"
expect "app.js's type" "text/javascript; charset=utf-8" "$(header Content-Type)"
expect "GET /console/console.css" 200 "$(served /console/console.css)"
expect "console.css's type" "text/css; charset=utf-8" "$(header Content-Type)"
expect "GET /console (to /console/)" 308 "$(served /console)"
expect "its Location" /console/ "$(header Location)"
for path in /console/nope.js /console/..%2FREADME.md /console/.hidden.js /console/app.js.bak \
    /console/README /console/a/b.js; do
    expect "GET $path" 404 "$(served "$path")"
done
expect "POST /console/" 405 "$(curl -s -o /dev/null -w '%{http_code}' -X POST "$base/console/")"

# ---- a store to look at: accounts, transfers, a subscriber with a dead letter ----
call() { # call OP JSON [KEY]: POST /v1/OP as ops; the reply in $tmp/reply
    curl -s -o "$tmp/reply" -w '%{http_code}' -H "Authorization: Bearer $admin_token" \
        ${3:+-H "Idempotency-Key: $3"} -H 'Content-Type: application/json' -d "$2" "$base/v1/$1"
}
expect "open account 1" 200 "$(call account_open '{"id":1,"ledger":1,"code":10}' open-1)"
expect "open account 2" 200 "$(call account_open '{"id":2,"ledger":1,"code":10}' open-2)"
for i in 1 2 3 4 5; do
    expect "transfer $i" 200 "$(call transfer "{\"id\":\"0000000000000000000000000000000$i\",\"debit_account_id\":1,\"credit_account_id\":2,\"amount\":$((i * 100)),\"ledger\":1,\"code\":1}" pay-$i)"
done
expect "a hold" 200 "$(call transfer '{"id":"00000000000000000000000000000006","debit_account_id":2,"credit_account_id":1,"amount":70,"ledger":1,"code":1,"flags":1,"timeout_s":3600}' hold-6)"
expect "its void" 200 "$(call void '{"pending_id":"00000000000000000000000000000006"}' void-7)"
expect "subscriber mailer" 200 "$(call sub_create '{"name":"mailer"}')"
expect "mailer fetches" 200 "$(call sub_fetch '{"name":"mailer","max":2}')"
expect "mailer parks seq 1" 200 "$(call sub_park '{"name":"mailer","seq":1,"reason":"bad address"}')"
expect "mailer acks seq 2" 200 "$(call sub_ack '{"name":"mailer","seq":2}')"
expect "subscriber audit" 200 "$(call sub_create '{"name":"audit"}')"
# accounts with codes and user data for the accounts page's filter form
expect "open account 3" 200 "$(call account_open '{"id":3,"ledger":1,"code":20,"user_data_128":"0000000000000000000000000000cafe","user_data_64":42,"user_data_32":3}' open-3)"
expect "open account 4" 200 "$(call account_open '{"id":4,"ledger":1,"code":20,"user_data_64":42,"user_data_32":4}' open-4)"
expect "open account 5" 200 "$(call account_open '{"id":5,"ledger":2,"code":30,"user_data_64":7}' open-5)"
i=100
while [ $i -lt 123 ]; do # 23 of code 40: more than a page of the console's 20
    expect "open account $i" 200 "$(call account_open "{\"id\":$i,\"ledger\":1,\"code\":40,\"user_data_32\":$((i % 3))}" open-$i)"
    i=$((i + 1))
done
expect "a transfer with user data" 200 "$(call transfer '{"id":"00000000000000000000000000000abc","debit_account_id":1,"credit_account_id":3,"amount":33,"ledger":1,"code":2,"user_data_128":"000000000000000000000000000beef0","user_data_64":9,"user_data_32":1}' pay-abc)"
# the figures hold a sample with mailer's dead letter counted
dead_letter_sampled() {
    curl -s -H "Authorization: Bearer $admin_token" "$base/v1/figures" >"$tmp/figures" &&
        grep -q '"name":"mailer".*"dead_letters":\[[^]]*1\]' "$tmp/figures"
}
wait_for "a sample of mailer's dead letter in /v1/figures" 30 dead_letter_sampled ||
    { head -c 2000 "$tmp/figures" >&2; fail "no sample of mailer"; }

# For the docs' screenshots only: half a minute of traffic, so that the
# charts have a shape (the pause is the traffic's pace, an input).
if [ -n "${TALLY_CONSOLE_SCREENSHOTS:-}" ]; then
    i=10
    while [ $i -lt 160 ]; do
        call transfer "{\"id\":\"000000000000000000000000000$(printf %05d $i)\",\"debit_account_id\":1,\"credit_account_id\":2,\"amount\":$((i % 7 + 1)),\"ledger\":1,\"code\":1}" traffic-$i >/dev/null
        pause 0.$((i % 4 + 1))
        i=$((i + 1))
    done
fi

# ---- the browser ----
if TALLY_CHROMIUM="$chromium" node "$modules/console_test.js" "$base" "$admin_token" \
    "$viewer_token" console-writer-token >"$tmp/browser.log" 2>&1; then
    cat "$tmp/browser.log"
    ok "the browser test (above)"
else
    cat "$tmp/browser.log" >&2
    echo "--- tallyd's log:" >&2
    tail -30 "$tmp/tallyd.log" >&2
    fail "the browser test (above)"
fi
# ---- GET /v1/figures: its grant, its arguments, its bound on subscribers ----
figures() { # figures TOKEN QUERY: the status, the reply in $tmp/figures
    curl -s -o "$tmp/figures" -w '%{http_code}' ${1:+-H "Authorization: Bearer $1"} "$base/v1/figures$2"
}
expect "figures without a token" 401 "$(figures "" "")"
expect "figures with a token without read" 403 "$(figures console-writer-token "")"
expect "figures with read" 200 "$(figures "$viewer_token" "")"
expect "figures?limit=1" 400 "$(figures "$viewer_token" "?limit=1")"
grep -q '"code":"unknown_field"' "$tmp/figures" && ok "limit: unknown_field" || fail "$(cat "$tmp/figures")"
expect "figures?since_ms=x" 400 "$(figures "$viewer_token" "?since_ms=x")"
figures "$viewer_token" "" >/dev/null
last=$(sed 's/.*"t_ms":\[\([0-9,]*\)\].*/\1/; s/.*,//' "$tmp/figures")
expect "figures?since_ms=the newest sample's" 200 "$(figures "$viewer_token" "?since_ms=$last")"
grep -q '"t_ms":\[\([0-9,]*\)\]' "$tmp/figures" && ! grep -q "\"t_ms\":\[[0-9,]*$last" "$tmp/figures" &&
    ok "only samples after since_ms" || fail "since_ms=$last: $(head -c 300 "$tmp/figures")"
i=1
while [ $i -le 16 ]; do # 18 subscribers in all: audit, mailer and these
    call sub_create "{\"name\":\"sink-$(printf %02d $i)\"}" >/dev/null
    i=$((i + 1))
done
eighteen_counted() {
    figures "$admin_token" "" >/dev/null && grep -q '"subscribers_total":\[[0-9,]*,18\]' "$tmp/figures"
}
wait_for "a sample counting 18 subscribers" 30 eighteen_counted || fail "no sample of 18 subscribers"
columns=$(grep -o '{"name":"[^"]*"' "$tmp/figures" | sed 's/{"name":"//; s/"//' | sort | tr '\n' ' ')
expect "the first 16 subscribers by name are sampled" \
    "audit mailer sink-01 sink-02 sink-03 sink-04 sink-05 sink-06 sink-07 sink-08 sink-09 sink-10 sink-11 sink-12 sink-13 sink-14 " \
    "$columns"

# ---- without --auth: the console on a loopback address only ----
kill "$pid" && wait "$pid" 2>/dev/null
"$TALLYD" --data "$tmp/open" --listen "ipc://$tmp/rep2" --publish "ipc://$tmp/pub2" \
    --http "http://0.0.0.0:0" --insecure --console-dir "$TALLY_SRCDIR/console" \
    --ready-file "$tmp/ready2" >"$tmp/open.log" 2>&1 &
pid=$!
wait_for "the --insecure tallyd's ready file" 30 test -s "$tmp/ready2" ||
    { cat "$tmp/open.log" >&2; fail "tallyd --insecure did not start"; }
port=$(sed -n 's/^http http:\/\/[^:]*:\([0-9]*\).*/\1/p' "$tmp/ready2")
status=$(curl -s -o "$tmp/body" -w '%{http_code}' "http://127.0.0.1:$port/console/")
expect "no --auth, --http on 0.0.0.0: GET /console/" 403 "$status"
grep -q "loopback address only" "$tmp/body" && ok "it says why" || fail "403 body: $(cat "$tmp/body")"
status=$(curl -s -o "$tmp/body" -w '%{http_code}' "http://127.0.0.1:$port/v1/whoami")
expect "no --auth: GET /v1/whoami" 200 "$status"
expect "no --auth: everyone holds every grant" '{"auth":false,"principal":null,"read":true,"admin":true}' "$(cat "$tmp/body")"
shell_test_end check_console
