#!/bin/sh
# tests/net/check_webhooks.sh — webhook intake (docs/WEBHOOKS.md) against a
# real tallyd, spoken to by curl, with every signature computed here by the
# openssl command (not by tally's code): for each scheme (standard,
# stripe, hmac-sha256) a valid, a tampered, a stale (where the scheme
# signs a time) and a duplicate delivery, key rotation, 409 for the same
# id with another body, 404 for an unknown source, 413, the /metrics
# counters, the stored events (tally log) and tally-recon; start refused
# for a secret file others may read and for errors in the file; then
# tally-stripe-mapper end to end with deliveries sent twice and out of
# order, and tally-readmodel (libtally's subscriber-side inbox) over a log
# with webhook events. Run by make check (TALLYD, TALLY, TALLY_STRIPE_MAPPER,
# TALLY_RECON, TALLY_READMODEL, TALLY_SRCDIR from the test environment,
# Makefile.am).
set -u
: "${TALLYD:?run by make check}" "${TALLY:?}" "${TALLY_STRIPE_MAPPER:?}" "${TALLY_RECON:?}" "${TALLY_READMODEL:?}" "${TALLY_SRCDIR:?}"
for tool in curl openssl; do
    command -v $tool >/dev/null 2>&1 || { echo "check_webhooks: $tool is needed (setup.sh installs it)" >&2; exit 1; }
done
. "$TALLY_SRCDIR/tests/support/shell_test.sh"
shell_test_begin webhooks

# ---- secrets and the sources file ----
umask 077
std_key=standard-key-0123456789abcdef
printf 'whsec_%s\n' "$(printf %s "$std_key" | openssl base64 -A)" >"$tmp/std.secret"
std_key2=rotated-standard-key-98765
printf 'whsec_%s\n' "$(printf %s "$std_key2" | openssl base64 -A)" >"$tmp/std2.secret"
printf 'whsec_stripe_endpoint_secret\n' >"$tmp/stripe.secret"
printf 'github-secret-0123456789\n' >"$tmp/gh.secret"
cat >"$tmp/hooks.conf" <<EOF
# sources of check_webhooks
std standard $tmp/std.secret,$tmp/std2.secret tolerance=300
pay stripe $tmp/stripe.secret   # the mapper's source
gh hmac-sha256 $tmp/gh.secret
ghj hmac-sha256 $tmp/gh.secret signature_header=X-Signature id_field=delivery_id type_field=what
EOF

# ---- the start is refused for a readable secret and for errors ----
cp "$tmp/gh.secret" "$tmp/open.secret"
chmod 644 "$tmp/open.secret"
printf 'bad stripe %s\n' "$tmp/open.secret" >"$tmp/open.conf"
"$TALLYD" --data "$tmp/refused" --http none --webhooks "$tmp/open.conf" >"$tmp/refused.log" 2>&1
expect "start refused for a world-readable secret (exit 1)" 1 $?
grep -q "open.conf:1: secret file $tmp/open.secret has mode 0644: group or others may read it" "$tmp/refused.log" ||
    fail "the refusal names the file, the line and the secret: $(cat "$tmp/refused.log")"
printf '# two lines\nok stripe %s\nx nosuch %s\n' "$tmp/stripe.secret" "$tmp/stripe.secret" >"$tmp/bad.conf"
"$TALLYD" --data "$tmp/refused" --http none --webhooks "$tmp/bad.conf" >"$tmp/refused.log" 2>&1
expect "start refused for an unknown scheme (exit 1)" 1 $?
grep -q "bad.conf:3: nosuch: the scheme is" "$tmp/refused.log" || fail "no file:line: $(cat "$tmp/refused.log")"
printf 'x stripe %s tolerance=abc\n' "$tmp/stripe.secret" >"$tmp/bad.conf"
"$TALLYD" --data "$tmp/refused" --http none --webhooks "$tmp/bad.conf" >"$tmp/refused.log" 2>&1
expect "start refused for a bad option (exit 1)" 1 $?

# weak secrets: invalid base64, an all-zero key, too short, a file too long (never cut)
printf 'whsec_====\n' >"$tmp/weak1.secret"
printf 'whsec_%s\n' "$(head -c 32 /dev/zero | openssl base64 -A)" >"$tmp/weak2.secret"
printf 'short-secret\n' >"$tmp/weak3.secret"
{ head -c 300 /dev/zero | tr '\0' k; head -c 200 /dev/zero | tr '\0' ' '; printf 'the-rest-of-a-558-byte-secret-file-0123456789-01234567890\n'; } >"$tmp/weak4.secret"
expect "a 558-byte secret file" 558 "$(wc -c <"$tmp/weak4.secret")"
for weak in "1 standard base64" "2 standard all zero bytes" "3 stripe the key is 12 bytes, at least 16" "4 hmac-sha256 longer than 256 bytes"; do
    set -- $weak
    n=$1 scheme=$2
    shift 2
    printf '# weak\nw%s %s %s\n' "$n" "$scheme" "$tmp/weak$n.secret" >"$tmp/weak.conf"
    "$TALLYD" --data "$tmp/refused" --http none --webhooks "$tmp/weak.conf" >"$tmp/refused.log" 2>&1
    expect "start refused for weak secret $n (exit 1)" 1 $?
    grep -q "weak.conf:2: secret file $tmp/weak$n.secret: .*$*" "$tmp/refused.log" ||
        fail "weak secret $n: the refusal names the file, the line and why: $(cat "$tmp/refused.log")"
done
# hmac-sha256 signs the body only: an unsigned header as the id or type is refused
printf 'gh hmac-sha256 %s id_header=X-GitHub-Delivery\n' "$tmp/gh.secret" >"$tmp/bad.conf"
"$TALLYD" --data "$tmp/refused" --http none --webhooks "$tmp/bad.conf" >"$tmp/refused.log" 2>&1
expect "start refused for id_header= on hmac-sha256 (exit 1)" 1 $?
grep -q "bad.conf:1: id_header: an hmac-sha256 signature covers the body only" "$tmp/refused.log" ||
    fail "id_header refusal names the file and line: $(cat "$tmp/refused.log")"

"$TALLYD" --data "$tmp/refused" --webhooks "$tmp/hooks.conf" --http none >"$tmp/refused.log" 2>&1
expect "start refused for --webhooks with --http none (exit 2)" 2 $?
# cluster mode takes webhooks too (docs/CLUSTER.md, "Webhooks"; the deliveries
# on three nodes: tests/cluster/check_cluster_edges): the options are accepted
if "$TALLYD" --help | grep -q -- '--cluster URLS'; then
    "$TALLYD" --data "$tmp/refused" --webhooks "$tmp/hooks.conf" --http http://127.0.0.1:0 \
        --cluster nats://127.0.0.1:1 --node a --print-config >"$tmp/cluster.conf" 2>&1
    expect "--webhooks in cluster mode is accepted (exit 0)" 0 $?
    grep -q "^webhooks = $tmp/hooks.conf" "$tmp/cluster.conf" && grep -q "^cluster = " "$tmp/cluster.conf" ||
        fail "the cluster's configuration keeps --webhooks: $(cat "$tmp/cluster.conf")"
fi

# ---- tallyd on a port of the kernel's (its ready file says which) ----
start_tallyd_http check_webhooks --data "$tmp/data" --listen "ipc://$tmp/rep" \
    --publish "ipc://$tmp/pub" --webhooks "$tmp/hooks.conf"

# post SOURCE BODY [HEADER...]: prints the status; headers in $tmp/h, body in $tmp/b
post() {
    src=$1 body=$2
    shift 2
    set -- "$@" # the headers
    hdrs=
    for h in "$@"; do hdrs="$hdrs -H \"$h\""; done
    printf %s "$body" >"$tmp/req"
    eval curl -s -o "\"$tmp/b\"" -D "\"$tmp/h\"" -w '%{http_code}' --max-time 60 -X POST $hdrs \
        --data-binary "@$tmp/req" "\"$base/webhooks/$src\""
}
replayed() { grep -qi '^Idempotent-Replayed: true' "$tmp/h" && echo yes || echo no; }
hex_hmac() { printf %s "$2" | openssl dgst -sha256 -hmac "$1" | sed 's/^.*= //'; }
b64_hmac() { printf %s "$2" | openssl dgst -sha256 -mac HMAC -macopt "key:$1" -binary | openssl base64 -A; }
now=$(date +%s)

# ---- standard ----
body='{"type":"invoice.paid","data":{"n":1}}'
sig=$(b64_hmac "$std_key" "msg_1.$now.$body")
expect "standard: valid" 200 "$(post std "$body" "webhook-id: msg_1" "webhook-timestamp: $now" "webhook-signature: v1,$sig")"
expect "standard: valid is not a replay" no "$(replayed)"
expect "standard: duplicate" 200 "$(post std "$body" "webhook-id: msg_1" "webhook-timestamp: $now" "webhook-signature: v1,$sig")"
expect "standard: duplicate has Idempotent-Replayed" yes "$(replayed)"
expect "standard: tampered body" 401 "$(post std "${body} " "webhook-id: msg_1" "webhook-timestamp: $now" "webhook-signature: v1,$sig")"
expect "standard: missing signature" 401 "$(post std "$body" "webhook-id: msg_1" "webhook-timestamp: $now")"
old=$((now - 400))
sig_old=$(b64_hmac "$std_key" "msg_2.$old.$body")
expect "standard: stale timestamp" 401 "$(post std "$body" "webhook-id: msg_2" "webhook-timestamp: $old" "webhook-signature: v1,$sig_old")"
grep -q stale_timestamp "$tmp/b" || fail "standard: stale says so: $(cat "$tmp/b")"
sig2=$(b64_hmac "$std_key2" "msg_3.$now.$body")
expect "standard: the rotated secret, among other signatures" 200 \
    "$(post std "$body" "webhook-id: msg_3" "webhook-timestamp: $now" "webhook-signature: v1,AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA= v1,$sig2")"
other='{"type":"invoice.paid","data":{"n":2}}'
sig_other=$(b64_hmac "$std_key" "msg_1.$now.$other")
expect "standard: same id, another body: 409" 409 "$(post std "$other" "webhook-id: msg_1" "webhook-timestamp: $now" "webhook-signature: v1,$sig_other")"
grep -q "webhook std: event id msg_1 came again with a different body: 409" "$tmp/tallyd.log" || fail "409 is logged"

# ---- stripe ----
body='{"id":"evt_s1","type":"charge.succeeded","created":1700000000,"data":{"object":{}}}'
sig=$(hex_hmac whsec_stripe_endpoint_secret "$now.$body")
expect "stripe: valid" 200 "$(post pay "$body" "Stripe-Signature: t=$now,v1=$sig")"
expect "stripe: duplicate, signed again later" 200 "$(post pay "$body" "Stripe-Signature: t=$((now + 1)),v1=$(hex_hmac whsec_stripe_endpoint_secret "$((now + 1)).$body")")"
expect "stripe: duplicate has Idempotent-Replayed" yes "$(replayed)"
expect "stripe: tampered" 401 "$(post pay "$(echo "$body" | sed s/1700000000/1700000001/)" "Stripe-Signature: t=$now,v1=$sig")"
expect "stripe: stale" 401 "$(post pay "$body" "Stripe-Signature: t=$old,v1=$(hex_hmac whsec_stripe_endpoint_secret "$old.$body")")"
expect "stripe: wrong secret" 401 "$(post pay "$body" "Stripe-Signature: t=$now,v1=$(hex_hmac nope "$now.$body")")"
body2='{"id":"evt_s1","type":"charge.succeeded","created":1700000001,"data":{"object":{}}}'
expect "stripe: same id, another body: 409" 409 "$(post pay "$body2" "Stripe-Signature: t=$now,v1=$(hex_hmac whsec_stripe_endpoint_secret "$now.$body2")")"
nobody='{"type":"x"}'
expect "stripe: no event id: 400" 400 "$(post pay "$nobody" "Stripe-Signature: t=$now,v1=$(hex_hmac whsec_stripe_endpoint_secret "$now.$nobody")")"

# ---- hmac-sha256 (GitHub style) ----
body='{"action":"opened","number":1}'
sig=$(hex_hmac github-secret-0123456789 "$body")
gh_id=$(printf %s "$body" | openssl dgst -sha256 | sed 's/^.*= //') # the event id: what is signed
expect "hmac-sha256: valid" 200 "$(post gh "$body" "X-Hub-Signature-256: sha256=$sig" "X-GitHub-Delivery: d-1" "X-GitHub-Event: issues")"
expect "hmac-sha256: duplicate" 200 "$(post gh "$body" "X-Hub-Signature-256: sha256=$sig" "X-GitHub-Delivery: d-1" "X-GitHub-Event: issues")"
expect "hmac-sha256: duplicate has Idempotent-Replayed" yes "$(replayed)"
expect "hmac-sha256: tampered" 401 "$(post gh "${body}x" "X-Hub-Signature-256: sha256=$sig" "X-GitHub-Delivery: d-2")"
# the signature covers neither header: a replay under another delivery id,
# another event type or none is the same event, not a new one
expect "hmac-sha256: the signed body under a new delivery id" 200 "$(post gh "$body" "X-Hub-Signature-256: sha256=$sig" "X-GitHub-Delivery: d-new" "X-GitHub-Event: issues")"
expect "hmac-sha256: a new delivery id is a replay" yes "$(replayed)"
expect "hmac-sha256: the signed body under another event type" 200 "$(post gh "$body" "X-Hub-Signature-256: sha256=$sig" "X-GitHub-Delivery: d-1" "X-GitHub-Event: push")"
expect "hmac-sha256: another event type is a replay" yes "$(replayed)"
expect "hmac-sha256: no delivery id" 200 "$(post gh "$body" "X-Hub-Signature-256: sha256=$sig")"
expect "hmac-sha256: no delivery id is a replay" yes "$(replayed)"
body='{"delivery_id":"j-1","what":"x"}'
expect "hmac-sha256: id_field, type_field and signature_header" 200 "$(post ghj "$body" "X-Signature: sha256=$(hex_hmac github-secret-0123456789 "$body")")"

# ---- the webhook: consumer namespace is the intake's ----
# A client write under webhook:pay with the provider's next event id is
# refused, over JSON and over SP, so the genuine delivery is stored.
code=$(curl -s -o "$tmp/b" -w '%{http_code}' --max-time 60 -X POST -H "Tally-Consumer: webhook:pay" \
    -H "Idempotency-Key: evt_res" --data-binary '{"id":77,"ledger":1,"code":1}' "$base/v1/account_open")
expect "JSON: a write as consumer webhook:pay is refused (400)" 400 "$code"
grep -q '"code":"consumer_reserved"' "$tmp/b" || fail "JSON: the refusal says consumer_reserved: $(cat "$tmp/b")"
"$TALLY" --url "ipc://$tmp/rep" --consumer webhook:pay account open 78 --ledger 1 --code 1 --key evt_res \
    >"$tmp/sp.out" 2>&1
[ $? -ne 0 ] && grep -q consumer_reserved "$tmp/sp.out" || fail "SP: a write as consumer webhook:pay is refused: $(cat "$tmp/sp.out")"
body='{"id":"evt_res","type":"charge.succeeded","created":1700000000,"data":{"object":{}}}'
expect "stripe: the genuine delivery of that id is stored" 200 "$(post pay "$body" "Stripe-Signature: t=$now,v1=$(hex_hmac whsec_stripe_endpoint_secret "$now.$body")")"
expect "stripe: stored, not a replay" no "$(replayed)"

# ---- 16 identical deliveries at once: one effect ----
body='{"id":"evt_burst","type":"charge.succeeded","created":1700000000,"data":{"object":{}}}'
sig=$(hex_hmac whsec_stripe_endpoint_secret "$now.$body")
printf %s "$body" >"$tmp/burst"
burst=
for i in $(seq 1 16); do
    curl -s -o "$tmp/burst.$i" -D "$tmp/burst.h.$i" -w '%{http_code}\n' --max-time 60 -X POST \
        -H "Stripe-Signature: t=$now,v1=$sig" --data-binary "@$tmp/burst" "$base/webhooks/pay" \
        >"$tmp/burst.code.$i" &
    burst="$burst $!"
done
wait $burst # not tallyd
expect "burst: 16 answered 200" 16 "$(cat "$tmp"/burst.code.* | grep -c '^200$')"
expect "burst: exactly one not a replay" 1 "$(grep -Lis '^Idempotent-Replayed: true' "$tmp"/burst.h.* | wc -l)"
expect "burst: every answer names the same event" 1 "$(sed 's/.*"seq":\([0-9]*\).*/\1/' "$tmp"/burst.[0-9]* | sort -u | wc -l)"

# ---- unknown source, too large ----
expect "unknown source: 404" 404 "$(post nosuch '{}' "X-Hub-Signature-256: sha256=00")"
big=$(head -c 262145 /dev/zero | tr '\0' a) # 256 KiB + 1
expect "body over the limit (256 KiB): 413" 413 "$(post gh "$big" "X-Hub-Signature-256: sha256=$(hex_hmac github-secret-0123456789 "$big")" "X-GitHub-Delivery: d-big")"
big=${big%a} # 256 KiB
expect "a body of 256 KiB: 200" 200 "$(post gh "$big" "X-Hub-Signature-256: sha256=$(hex_hmac github-secret-0123456789 "$big")" "X-GitHub-Delivery: d-big")"

# ---- /metrics, the stored events, recon ----
curl -s --max-time 60 "$base/metrics" >"$tmp/metrics"
expect "metrics: std accepted" 2 "$(sed -n 's/^tally_webhooks_total{source="std",outcome="accepted"} //p' "$tmp/metrics")"
expect "metrics: std bad_signature" 2 "$(sed -n 's/^tally_webhooks_total{source="std",outcome="bad_signature"} //p' "$tmp/metrics")"
expect "metrics: std stale" 1 "$(sed -n 's/^tally_webhooks_total{source="std",outcome="stale_timestamp"} //p' "$tmp/metrics")"
expect "metrics: pay conflict" 1 "$(sed -n 's/^tally_webhooks_total{source="pay",outcome="conflict"} //p' "$tmp/metrics")"
expect "metrics: gh replayed" 4 "$(sed -n 's/^tally_webhooks_total{source="gh",outcome="replayed"} //p' "$tmp/metrics")"
expect "metrics: gh too_large" 1 "$(sed -n 's/^tally_webhooks_total{source="gh",outcome="too_large"} //p' "$tmp/metrics")"
expect "metrics: nothing in flight" 0 "$(sed -n 's/^tally_webhooks_in_flight //p' "$tmp/metrics")"
if command -v promtool >/dev/null 2>&1; then # lint as check_http does (setup.sh installs it)
    promtool check metrics <"$tmp/metrics" >"$tmp/promtool.out" 2>&1
    expect "metrics: promtool check metrics passes, no lint warning" "0:" "$?:$(cat "$tmp/promtool.out")"
fi
expect "metrics: unknown source" 1 "$(sed -n 's/^tally_webhooks_unknown_source_total //p' "$tmp/metrics")"
"$TALLY" --url "ipc://$tmp/rep" --json log --from 1 --limit 1000 >"$tmp/log.json" 2>/dev/null
expect "events: one webhook.received per stored delivery" 8 "$(grep -c '"type":"webhook.received"' "$tmp/log.json")"
grep -q '"entity":{"kind":"webhook","source":"pay","event_id":"evt_s1"}' "$tmp/log.json" || fail "the stripe event names its source and id"
grep -q "\"consumer\":\"webhook:gh\",\"key\":\"$gh_id\"" "$tmp/log.json" || fail "the hmac-sha256 event's causation is (webhook:gh, the body's SHA-256)"
grep -q '"consumer":"webhook:ghj","key":"j-1"' "$tmp/log.json" || fail "the event's causation is (webhook:<source>, event id)"
"$TALLY_RECON" --data "$tmp/data" >"$tmp/recon.out" 2>&1
expect "tally-recon folds past webhook events (clean)" 0 $?

# ---- tally-stripe-mapper: out of order, twice ----
day=86400
end1=$((now + 30 * day)) end2=$((now + 60 * day)) end3=$((now + 90 * day))
stripe() { # stripe ID TYPE CREATED OBJECT-JSON
    b="{\"id\":\"$1\",\"type\":\"$2\",\"created\":$3,\"data\":{\"object\":$4}}"
    t=$(date +%s) # signed now: the tolerance holds however slow the machine
    post pay "$b" "Stripe-Signature: t=$t,v1=$(hex_hmac whsec_stripe_endpoint_secret "$t.$b")"
}
send_all() {
    # cus_A: created(100) < updated(200) < invoice.paid(300), sent newest first
    stripe evt_a3 invoice.paid 1700000300 "{\"customer\":\"cus_A\",\"lines\":{\"data\":[{\"period\":{\"end\":$end3}}]}}"
    stripe evt_a1 customer.subscription.created 1700000100 "{\"customer\":\"cus_A\",\"status\":\"active\",\"current_period_end\":$end1}"
    stripe evt_a2 customer.subscription.updated 1700000200 "{\"customer\":\"cus_A\",\"status\":\"active\",\"current_period_end\":$end2}"
    # cus_B: created(100), then deleted(200), sent deleted first
    stripe evt_b2 customer.subscription.deleted 1700000200 "{\"customer\":\"cus_B\",\"status\":\"canceled\",\"current_period_end\":$end1}"
    stripe evt_b1 customer.subscription.created 1700000100 "{\"customer\":\"cus_B\",\"status\":\"active\",\"current_period_end\":$end1}"
    # cus_C: created, then updated to canceled, in order
    stripe evt_c1 customer.subscription.created 1700000100 "{\"customer\":\"cus_C\",\"status\":\"active\",\"current_period_end\":$end1}"
    stripe evt_c2 customer.subscription.updated 1700000200 "{\"customer\":\"cus_C\",\"status\":\"canceled\",\"current_period_end\":$end1}"
}
codes=$(send_all; send_all)
expect "mapper input: every delivery answered 200" "" "$(echo "$codes" | tr -d '200\n')"
"$TALLY_STRIPE_MAPPER" --url "ipc://$tmp/rep" --source pay --feature pro --until-idle >"$tmp/mapper.out" 2>&1
expect "mapper: first run ok" 0 $?
codes=$(send_all) # a provider's retries after the mapping
"$TALLY_STRIPE_MAPPER" --url "ipc://$tmp/rep" --source pay --feature pro --until-idle >>"$tmp/mapper.out" 2>&1
expect "mapper: second run ok" 0 $?
ent() { "$TALLY" --url "ipc://$tmp/rep" --json entitlements "$1" 2>/dev/null; }
ent cus_A >"$tmp/a.json"
grep -q '"state":"active"' "$tmp/a.json" || fail "cus_A active: $(cat "$tmp/a.json")"
grep -q "\"valid_until_ms\":${end3}000" "$tmp/a.json" || fail "cus_A until the newest period's end: $(cat "$tmp/a.json")"
ent cus_B | grep -q '"state":"revoked"' || fail "cus_B revoked though its creation came last: $(ent cus_B)"
ent cus_C | grep -q '"state":"revoked"' || fail "cus_C revoked: $(ent cus_C)"
"$TALLY" --url "ipc://$tmp/rep" --json log --from 1 --limit 1000 >"$tmp/log.json" 2>/dev/null
count() { grep -c "$1" "$tmp/log.json"; }
# exactly once: A: extend(a3) not found -> grant(a3:grant); a1, a2 stale: 1 event.
# B: revoke(b2) not found -> lifetime grant + revoke: 2; b1 stale. C: grant + revoke: 2.
expect "mapper: cus_A changed once" 1 "$(count '"subject":"cus_A"')"
expect "mapper: cus_B changed twice (a revoked tombstone)" 2 "$(count '"subject":"cus_B"')"
expect "mapper: cus_C changed twice" 2 "$(count '"subject":"cus_C"')"
grep -q "(3 stale)" "$tmp/mapper.out" || fail "mapper: a1, a2 and b1 answered stale, expected: $(cat "$tmp/mapper.out")"
"$TALLY_RECON" --data "$tmp/data" >"$tmp/recon.out" 2>&1
expect "tally-recon clean after the mapper" 0 $?

# WEBHOOKS.md's delivery by hand, as written but for the secret's path, the
# URL and the source's name: the mapper turns it into an entitlement.
awk '/delivery by hand/ {found = 1} found && /^```sh$/ {inside = 1; next} inside && /^```$/ {exit} inside' \
    "$TALLY_SRCDIR/docs/WEBHOOKS.md" |
    sed -e "s|/etc/tally/stripe.secret|$tmp/stripe.secret|g" -e "s|localhost:7452/webhooks/stripe|$base/webhooks/pay|" \
        -e "s|^tally-stripe-mapper --source stripe|\"\$TALLY_STRIPE_MAPPER\" --url ipc://$tmp/rep --source pay|" \
        -e "s|^tally entitlements|\"\$TALLY\" --url ipc://$tmp/rep --json entitlements|" >"$tmp/by_hand.sh"
grep -q "curl" "$tmp/by_hand.sh" || fail "WEBHOOKS.md's delivery by hand not found"
TALLY="$TALLY" TALLY_STRIPE_MAPPER="$TALLY_STRIPE_MAPPER" sh -e "$tmp/by_hand.sh" >"$tmp/by_hand.out" 2>&1 ||
    fail "WEBHOOKS.md's delivery by hand: $(tail -3 "$tmp/by_hand.out")"
grep -q '"state":"active"' "$tmp/by_hand.out" && grep -q '"valid_until_ms":1893456000000' "$tmp/by_hand.out" ||
    fail "WEBHOOKS.md's sample invoice mapped to no entitlement: $(tail -3 "$tmp/by_hand.out")"

# The subscriber-side inbox takes webhook events (and the read model skips them).
"$TALLY_READMODEL" --url "ipc://$tmp/rep" --data "$tmp/readmodel" --once --dump --json \
    >"$tmp/readmodel.json" 2>"$tmp/readmodel.err"
expect "tally-readmodel over a log with webhook events" 0 $?
grep -q '"subject":"cus_A","feature":"pro","state":"active"' "$tmp/readmodel.json" ||
    fail "the read model has cus_A active: $(cat "$tmp/readmodel.json" "$tmp/readmodel.err")"

kill "$pid"
wait "$pid"
expect "tallyd stops cleanly" 0 $?
pid=
[ "$failures" -eq 0 ] || tail -20 "$tmp/tallyd.log" >&2
shell_test_end check_webhooks
