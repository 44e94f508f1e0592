#!/bin/sh
# tests/net/check_sp_drafts.sh — docs/PROTOCOL.md, "Where NNG differs from
# the SP drafts", against a real tallyd, spoken to with plain sockets (no
# NNG on this side): over ipc:// each message carries the byte 0x01 before
# its length; over ws:// the subprotocol is rep.sp.nanomsg.org, and the
# drafts' x-nanomsg-rep is refused; routing hops come back in the reply
# (tests/net/check_raw_sp checks hops and short payloads over tcp://).
# Run by make check (TALLYD, TALLY_SRCDIR from the test environment).
set -u
: "${TALLYD:?run by make check}" "${TALLY_SRCDIR:?}"
command -v python3 >/dev/null 2>&1 || { echo "check_sp_drafts: python3 is needed (setup.sh installs it)" >&2; exit 1; }
. "$TALLY_SRCDIR/tests/support/shell_test.sh"
shell_test_begin sp_drafts

"$TALLYD" --data "$tmp/data" --listen "ipc://$tmp/rep" --listen "ws://127.0.0.1:0/tally" \
    --publish none --http none --ready-file "$tmp/ready" >"$tmp/tallyd.log" 2>&1 &
pid=$!
wait_for "tallyd's ready file" 60 test -s "$tmp/ready" || { fail "tallyd started"; cat "$tmp/tallyd.log"; shell_test_end sp_drafts; }
ws_url=$(sed -n 's/^listen \(ws:.*\)$/\1/p' "$tmp/ready")
python3 - "$tmp/rep" "$ws_url" <<'PY' || fail "the SP bytes PROTOCOL.md gives"
import base64, os, socket, struct, sys
ipc_path, ws_url = sys.argv[1], sys.argv[2]
# {"v": 1, "op": "stats"}, the example of PROTOCOL.md's SP section
STATS = bytes.fromhex("82a17601a26f70a57374617473")

def read_exactly(s, n):
    b = b""
    while len(b) < n:
        c = s.recv(n - len(b))
        if not c:
            raise SystemExit("connection closed after %d of %d bytes" % (len(b), n))
        b += c
    return b

def check_reply(payload, backtrace):
    assert payload[:len(backtrace)] == backtrace, "reply starts %s, want %s" % (payload[:len(backtrace)].hex(), backtrace.hex())
    assert b"\xa4code\xa2ok" in payload, "no code ok in %s" % payload.hex()

# ipc://: header, then 0x01, u64 length, payload; one routing hop first
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.settimeout(60)
s.connect(ipc_path)
s.sendall(bytes.fromhex("0053500000300000"))
assert read_exactly(s, 8) == bytes.fromhex("0053500000310000"), "ipc header"
backtrace = bytes.fromhex("00000007 80000001")
body = backtrace + STATS
s.sendall(b"\x01" + struct.pack(">Q", len(body)) + body)
assert read_exactly(s, 1) == b"\x01", "ipc: the reply's message byte"
n = struct.unpack(">Q", read_exactly(s, 8))[0]
check_reply(read_exactly(s, n), backtrace)
print("ok: ipc:// message byte 0x01, hops echoed")

# ws://: the drafts' subprotocol is refused, NNG's is served
host, rest = ws_url[len("ws://"):].split("/", 1)
h, p = host.rsplit(":", 1)

def handshake(proto):
    w = socket.create_connection((h, int(p)), timeout=60)
    key = base64.b64encode(os.urandom(16)).decode()
    w.sendall(("GET /%s HTTP/1.1\r\nHost: %s\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
               "Sec-WebSocket-Key: %s\r\nSec-WebSocket-Version: 13\r\n"
               "Sec-WebSocket-Protocol: %s\r\n\r\n" % (rest, host, key, proto)).encode())
    head = b""
    while b"\r\n\r\n" not in head:
        c = w.recv(1)
        if not c:
            break
        head += c
    return w, head.split(b"\r\n", 1)[0]

w, status = handshake("x-nanomsg-rep")
assert b" 101 " not in status, "x-nanomsg-rep was accepted: %r" % status
w.close()
print("ok: ws:// refuses the drafts' subprotocol x-nanomsg-rep (%s)" % status.decode(errors="replace"))
w, status = handshake("rep.sp.nanomsg.org")
assert b" 101 " in status, "rep.sp.nanomsg.org: %r" % status
mask = os.urandom(4)
body = bytes.fromhex("80000002") + STATS
frame = bytes([0x82, 0x80 | len(body)]) + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(body))
w.sendall(frame)
first = read_exactly(w, 2)
assert first[0] == 0x82, "a binary frame"
n = first[1] & 0x7F
if n == 126:
    n = struct.unpack(">H", read_exactly(w, 2))[0]
elif n == 127:
    n = struct.unpack(">Q", read_exactly(w, 8))[0]
check_reply(read_exactly(w, n), bytes.fromhex("80000002"))
print("ok: ws:// subprotocol rep.sp.nanomsg.org, one binary message, no length or header")
PY
shell_test_end sp_drafts
