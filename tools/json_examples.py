#!/usr/bin/env python3
"""json_examples.py — regenerate the JSON API examples of docs/PROTOCOL.md.

    tools/json_examples.py build/tallyd > /tmp/json-examples.md

Starts two tallyds of its own (fresh data directories, --http on free
loopback ports), sends every example below to both with Python's own HTTP
client (urllib: not the project's code), and prints markdown: a title and a
```json-example OP block per example, with "> " lines (the request line,
headers, a blank line, the body) and "< " lines (the status, the headers
that matter, the body). A JSON value that differs between the two runs
(commit times, event bytes, hashes), or that depends on the machine (map
sizes, ages), is printed as "..". The test
tests/net/check_json replays every block with curl against a real tallyd
and compares.
"""
import json
import os
import re
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

A = "0000000000000000000000000000000a"
B = "0000000000000000000000000000000b"
C = "0000000000000000000000000000000c"
D = "0000000000000000000000000000000d"
E = "0000000000000000000000000000000e"

def pay(key, tid, debit, credit, amount, **more):
    body = {"id": tid, "debit_account_id": debit, "credit_account_id": credit,
            "amount": amount, "ledger": 1, "code": 1}
    body.update(more)
    return ("POST", "/v1/transfer", {"Idempotency-Key": key, "Tally-Consumer": "shop"}, body)

def post(op, body, key=None, consumer="shop"):
    h = {}
    if key:
        h = {"Idempotency-Key": key, "Tally-Consumer": consumer}
    return ("POST", "/v1/" + op, h, body)

def get(path):
    return ("GET", path, {}, None)

# (title, op, request[, keys whose values are shown as ".."]); sent in
# this order to an empty store.
EXAMPLES = [
    ("Imported history: open account 100 as it was opened on 2020-01-01 (flags bit 3 `imported`, "
     "its time in `timestamp_ms`; first, before any live write).", "account_open",
     post("account_open", {"id": 100, "ledger": 1, "code": 10, "flags": 8,
                           "timestamp_ms": 1577836800000}, "import-open-100")),
    ("Account 101, a second later.", "account_open",
     post("account_open", {"id": 101, "ledger": 1, "code": 10, "flags": 8,
                           "timestamp_ms": 1577836801000}, "import-open-101")),
    ("An imported transfer of 2020-01-02 (flags bit 5 `imported`).", "transfer",
     pay("import-pay-1", "00000000000000000000000000000100", 100, 101, 70, flags=32,
         timestamp_ms=1577923200000)),
    ("Open account 1 on ledger 1.", "account_open",
     post("account_open", {"id": 1, "ledger": 1, "code": 10}, "open-1")),
    ("Open account 2 with the flag debits_must_not_exceed_credits (1); an integer may be a decimal string.",
     "account_open", post("account_open", {"id": "2", "ledger": 1, "code": 10, "flags": 1}, "open-2")),
    ("Transfer 500 from account 1 to account 2; the transfer id is 32 hex digits.", "transfer",
     pay("pay-1", A, 1, 2, 500)),
    ("The same request again (a retry after a lost reply): the stored outcome, 200 with Idempotent-Replayed.",
     "transfer", pay("pay-1", A, 1, 2, 500)),
    ("The same key with a different amount: 409, nothing changes.", "transfer",
     pay("pay-1", A, 1, 2, 501)),
    ("Account 2 may not spend more than it received: a business rejection, 422.", "transfer",
     pay("refund-1", B, 2, 1, 900)),
    ("A write without Idempotency-Key: 400.", "transfer",
     ("POST", "/v1/transfer", {}, {"id": B, "debit_account_id": 2, "credit_account_id": 1,
                                   "amount": 1, "ledger": 1, "code": 1})),
    ("A field the op does not have: 400, as over msgpack.", "account_open",
     post("account_open", {"id": 3, "ledger": 1, "code": 10, "colour": "red"}, "open-3")),
    ("A hold of 300 (flags bit 0) that expires after an hour.", "transfer",
     pay("hold-1", C, 1, 2, 300, flags=1, timeout_s=3600)),
    ("Post 100 of the hold.", "post", post("post", {"pending_id": C, "amount": 100}, "capture-1")),
    ("Another hold, then void it.", "transfer", pay("hold-2", D, 1, 2, 50, flags=1)),
    ("Void the hold.", "void", post("void", {"pending_id": D}, "void-1")),
    ("Grant `pro` to user-7 for a day, paid by transfer 0x…0a.", "grant",
     post("grant", {"subject": "user-7", "feature": "pro", "duration_ms": 86400000,
                    "source_order": 1, "grant_transfer_id": A}, "grant-1")),
    ("Extend it by a day from its current end.", "extend",
     post("extend", {"subject": "user-7", "feature": "pro", "duration_ms": 86400000,
                     "source_order": 2}, "extend-1")),
    ("A revoke older than what was applied (source_order 1 < 2): `stale`, 422.", "revoke",
     post("revoke", {"subject": "user-7", "feature": "pro", "source_order": 1}, "revoke-1")),
    ("A chain: open account 3 and pay into it, all or nothing.", "chain",
     post("chain", {"ops": [{"op": "account_open", "id": 3, "ledger": 1, "code": 10},
                            {"op": "transfer", "id": E, "debit_account_id": 1,
                             "credit_account_id": 3, "amount": 25, "ledger": 1, "code": 1}]},
          "chain-1")),
    ("A batch: each member its own key (a member without one gets one derived from `Idempotency-Key`: "
     "`\\u001F`, its SHA-256 in hex, `.<index>`).", "batch",
     post("batch", {"ops": [{"op": "account_open", "id": 4, "ledger": 1, "code": 10},
                            {"op": "account_open", "key": "open-5", "id": 5, "ledger": 1, "code": 10}]},
          "batch-1")),
    ("Account 2, after the transfers.", "account_get", get("/v1/accounts/2")),
    ("Account 9 does not exist: 404.", "account_get", get("/v1/accounts/9")),
    ("Account 1's history, newest first, two entries.", "account_history",
     get("/v1/accounts/1/history?limit=2&reverse=true")),
    ("Account 1's balances after each transfer event, newest first, two entries: `next` is the "
     "`after_seq` of the next page.", "account_balances",
     get("/v1/accounts/1/balances?limit=2&reversed=true")),
    ("Account 101's balances as they were on 2020-01-03: after the imported transfer, at its own time.",
     "balance_at", get("/v1/accounts/101/balance_at?timestamp_ms=1578009600000")),
    ("balance_at needs a time or a seq: 400.", "balance_at", get("/v1/accounts/101/balance_at")),
    ("Accounts in id order, two at a time: `next` is the `after_id` of the next page (null after the last).",
     "account_list", get("/v1/accounts?limit=2")),
    ("The next page.", "account_list", get("/v1/accounts?after_id=2&limit=2")),
    ("A page of no accounts: 400, as for `dlq_list`.", "account_list", get("/v1/accounts?limit=0")),
    ("The first transfer.", "transfer_get", get("/v1/transfers/" + A)),
    ("Reverse 50 of the first transfer: a new transfer from account 2 back to account 1; "
     "`reverses` names the original.", "transfer_reverse",
     post("transfer_reverse", {"id": "0000000000000000000000000000001a", "reverses": A,
                               "amount": 50}, "reverse-1")),
    ("The original now says how much of it was reversed.", "transfer_get",
     get("/v1/transfers/" + A)),
    ("Importing after live writes, at a time older than they are: 422.", "transfer",
     pay("import-pay-2", "00000000000000000000000000000101", 100, 101, 5, flags=32,
         timestamp_ms=1578009600000)),
    ("Reversing more than is left: 422.", "transfer_reverse",
     post("transfer_reverse", {"id": "0000000000000000000000000000001b", "reverses": A,
                               "amount": 451}, "reverse-2")),
    ("A balancing transfer: at most 10000 from account 2, which has debits_must_not_exceed_credits: "
     "it moves what account 2 has left, and records that amount.", "transfer",
     pay("balance-1", "0000000000000000000000000000001c", 2, 1, 10000, flags=2)),
    ("Open account 6 with user data: an invoice in user_data_128 (32 hex digits), a customer in "
     "user_data_64, a tenant in user_data_32.", "account_open",
     post("account_open", {"id": 6, "ledger": 1, "code": 20,
                           "user_data_128": "0000000000000000000000000000cafe",
                           "user_data_64": 42, "user_data_32": 3}, "open-6")),
    ("Accounts of ledger 1 with code 10, oldest first, two at a time: `next` is the `cursor` of the "
     "next page.", "account_query", get("/v1/accounts/query?ledger=1&code=10&limit=2")),
    ("Accounts of customer 42.", "account_query", get("/v1/accounts/query?user_data_64=42")),
    ("Transfers created in a time range that holds none: an empty page, `next` null.",
     "transfer_query", get("/v1/transfers/query?timestamp_min_ms=1&timestamp_max_ms=2")),
    ("The transfers that debited account 1, newest first.", "account_transfers",
     get("/v1/accounts/1/transfers?credits=false&reversed=true&limit=2")),
    ("Neither debits nor credits: 400.", "account_transfers",
     get("/v1/accounts/1/transfers?credits=false&debits=false")),
    ("user-7's entitlements.", "entitlement_list", get("/v1/entitlements/user-7")),
    ("One entitlement: `feature` in the query.", "entitlement_get",
     get("/v1/entitlements/user-7?feature=pro")),
    ("The first two events, each its JSON document (\"The event document\").", "log_read",
     get("/v1/log?from=1&limit=2")),
    ("The same events as their stored msgpack bytes, base64 (`format=msgpack`).", "log_read",
     get("/v1/log?from=1&limit=2&format=msgpack")),
    ("`format` is `json` or `msgpack`.", "log_read", get("/v1/log?from=1&format=xml")),
    ("Counts and the head.", "stats", get("/v1/stats")),
    ("Create a durable subscriber.", "sub_create", post("sub_create", {"name": "mailer"})),
    ("Name the owner of its dead letters and lengthen its lease; the cursor stays.",
     "sub_update", post("sub_update", {"name": "mailer", "ack_wait_ms": 60000,
                                       "contact": "mail-team@example.com",
                                       "alert_route": "pagerduty:mail"})),
    ("Every subscriber.", "sub_list", get("/v1/subscribers")),
    ("One subscriber.", "sub_get", get("/v1/subscribers/mailer")),
    ("Fetch two events.", "sub_fetch", post("sub_fetch", {"name": "mailer", "max": 2})),
    ("Acknowledge the first.", "sub_ack", post("sub_ack", {"name": "mailer", "seq": 1})),
    ("Still at work on the second: its lease (the ack wait) starts again.", "sub_progress",
     post("sub_progress", {"name": "mailer", "seqs": [2]})),
    ("Retry the second later.", "sub_nak",
     post("sub_nak", {"name": "mailer", "seq": 2, "delay_ms": 60000, "reason": "smtp down"})),
    ("Why the second is stuck: its attempts, last error, holder and next delivery.", "sub_get",
     get("/v1/subscribers/mailer")),
    ("Park it in the dead-letter queue.", "sub_park",
     post("sub_park", {"name": "mailer", "seq": 2, "reason": "bad address"})),
    ("The dead letters.", "dlq_list", get("/v1/subscribers/mailer/dead_letters")),
    ("Deliver it again.", "dlq_replay", post("dlq_replay", {"name": "mailer", "seq": 2})),
    ("Fetch it again, the event as its stored bytes (`?format=msgpack`).", "sub_fetch",
     post("sub_fetch?format=msgpack", {"name": "mailer", "max": 1})),
    ("Park.", "sub_park", post("sub_park", {"name": "mailer", "seq": 2})),
    ("Discard the dead letter.", "dlq_discard", post("dlq_discard", {"name": "mailer", "seq": 2})),
    ("Delete the subscriber.", "sub_delete", post("sub_delete", {"name": "mailer"})),
    ("No such subscriber: 404.", "sub_get", get("/v1/subscribers/mailer")),
    ("Any read op is also POST /v1/<op> with its fields.", "account_get",
     post("account_get", {"id": 1})),
    ("Wait up to 100 ms for an event after the head: none comes, an empty list.", "log_read",
     get("/v1/log?from=100&wait_ms=100")),
    ("An unknown op: 404.", "nope", post("nope", {})),
    ("A body that is not JSON: 400.", "account_open",
     ("POST", "/v1/account_open", {"Idempotency-Key": "open-6"}, "{\"id\": 6,"), {"message"}),
    ("The figures of the last hour (here the samples taken since the epoch's first second: all of them).",
     "figures", get("/v1/figures?since_ms=1000"),
     {"samples", "t_ms", "head_seq", "commits_per_s", "commands_per_s", "disk_free_bytes",
      "subscribers_total", "subscribers"}),
    ("Who the caller is: here a tallyd without --auth, where everyone holds every grant.",
     "whoami", get("/v1/whoami")),
    ("Disable tally-relay's endpoint billing (admin; docs/RELAY.md).", "endpoint_disable",
     post("endpoint_disable", {"endpoint": "billing", "reason": "maintenance"}, "off-1",
          consumer="ops")),
    ("Its state.", "endpoint_get", post("endpoint_get", {"endpoint": "billing"}),
     {"changed_ms"}),
    ("Enable it again.", "endpoint_enable",
     post("endpoint_enable", {"endpoint": "billing"}, "on-1", consumer="ops")),
    ("tally-relay records an attempt in the attempt log (admin).", "endpoint_attempts_record",
     post("endpoint_attempts_record", {"endpoint": "billing",
          "attempts": [{"seq": 3, "attempt": 1, "time_ms": 4102444800000, "status": 503,
                        "latency_ms": 41, "error": "billing: HTTP 503", "response": "busy"}]})),
    ("The endpoint's attempts, newest first.", "endpoint_attempts",
     post("endpoint_attempts", {"endpoint": "billing", "limit": 10})),
    ("A new signing secret; the one before it signs too for an hour (admin).",
     "endpoint_rotate_secret",
     post("endpoint_rotate_secret", {"endpoint": "billing", "overlap_s": 3600,
          "secret": "whsec_c2Vjb25kLXNlY3JldC1mb3ItdGhlLXRlc3RzLTEyMzQ="}, "rot-1",
          consumer="ops")),
    ("The secrets, as tally-relay reads them (admin).", "endpoint_secret_get",
     post("endpoint_secret_get", {"endpoint": "billing"})),
    ("Resend every event since a time to the endpoint (admin).", "endpoint_recover",
     post("endpoint_recover", {"endpoint": "billing", "since_ms": 1796600000000}, "rec-1",
          consumer="ops")),
    ("tally-relay's word that the recover is done.", "endpoint_recovered",
     post("endpoint_recovered", {"endpoint": "billing", "recover_version": 4},
          "relay-recovered:billing:4", consumer="relay")),
    ("Define an endpoint in tallyd: the relays start delivering to it (admin).",
     "endpoint_create",
     post("endpoint_create", {"endpoint": "orders", "url": "https://orders.example.com/hooks",
          "secret": "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "types": "transfer.*"}, "ep-1",
          consumer="ops")),
    ("Change its types (admin).", "endpoint_update",
     post("endpoint_update", {"endpoint": "orders", "types": "transfer.posted"}, "ep-2",
          consumer="ops")),
    ("The endpoints defined in tallyd.", "endpoint_list", post("endpoint_list", {})),
    ("Remove it: the relays stop delivering to it (admin).", "endpoint_delete",
     post("endpoint_delete", {"endpoint": "orders"}, "ep-3", consumer="ops")),
]

# Values that depend on the machine or the moment, not on the requests
# (the store's map sizes, ages in seconds, times in ms): always "..".
SETTINGS_MS = ("ack_wait_ms", "backoff_ms", "delay_ms", "duration_ms")

def machine_dependent(key):
    return (key.startswith("map_") or key.endswith("_age_s") or
            (key.endswith("_ms") and key not in SETTINGS_MS))

HEADERS_SHOWN = ("Idempotent-Replayed", "Retry-After")

def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port

def start(tallyd):
    d = tempfile.mkdtemp(prefix="tally-json-ex-")
    port = free_port()
    p = subprocess.Popen([tallyd, "--data", d + "/data", "--listen", "ipc://" + d + "/req.sock",
                          "--publish", "none", "--http", "http://127.0.0.1:%d" % port],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(300):
        try:
            urllib.request.urlopen("http://127.0.0.1:%d/healthz" % port, timeout=1).read()
            return p, port
        except Exception:
            time.sleep(0.1)
    sys.exit("json_examples.py: tallyd did not come up")

def body_text(body):
    if body is None:
        return ""
    if isinstance(body, str):
        return body
    return json.dumps(body, separators=(",", ":"))

def send(port, method, path, headers, body):
    data = body_text(body).encode() if method == "POST" else None
    rq = urllib.request.Request("http://127.0.0.1:%d%s" % (port, path), data=data,
                                method=method, headers=headers)
    try:
        r = urllib.request.urlopen(rq, timeout=30)
    except urllib.error.HTTPError as e:
        r = e
    return r.status, {k: r.headers[k] for k in HEADERS_SHOWN if r.headers[k]}, r.read().decode()

def mark(a, b, vary):
    """a with every leaf that differs from b, or whose key is in vary or
    machine dependent, replaced by the marker."""
    if isinstance(a, dict) and isinstance(b, dict) and list(a) == list(b):
        return {k: Marker() if k in vary or machine_dependent(k) else mark(a[k], b[k], vary)
                for k in a}
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        return [mark(x, y, vary) for x, y in zip(a, b)]
    return a if a == b else Marker()

class Marker:
    pass

def dump(o):
    if isinstance(o, Marker):
        return ".."
    if isinstance(o, dict):
        return "{" + ",".join(json.dumps(k) + ":" + dump(v) for k, v in o.items()) + "}"
    if isinstance(o, list):
        return "[" + ",".join(dump(x) for x in o) + "]"
    # escapes as jansson writes them (a derived batch key's \u001F)
    return re.sub(r"\\u([0-9a-f]{4})", lambda m: "\\u" + m.group(1).upper(),
                  json.dumps(o, ensure_ascii=False))

def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    servers = [start(sys.argv[1]) for _ in range(2)]
    try:
        for example in EXAMPLES:
            title, op, (method, path, headers, body) = example[:3]
            vary = example[3] if len(example) > 3 else set()
            runs = [send(port, method, path, headers, body) for _, port in servers]
            (status, got_headers, text), (_, _, text2) = runs
            shown = dump(mark(json.loads(text), json.loads(text2), vary))
            print("**%s**\n" % title)
            print("```json-example %s" % op)
            print("> %s %s" % (method, path))
            for k, v in headers.items():
                print("> %s: %s" % (k, v))
            if method == "POST":
                print(">")
                print("> " + body_text(body))
            print("< %d" % status)
            for k, v in got_headers.items():
                print("< %s: %s" % (k, v))
            print("<")
            print("< " + shown)
            print("```\n")
    finally:
        for p, _ in servers:
            p.terminate()
            p.wait()

if __name__ == "__main__":
    main()
