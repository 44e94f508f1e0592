#!/usr/bin/env python3
"""protocol_examples.py — regenerate the Examples section of docs/PROTOCOL.md.

Starts nothing: point it at a fresh tallyd (empty data directory), e.g.
    tallyd --data $(mktemp -d) --listen ipc:///tmp/ex.sock --publish none &
    tools/protocol_examples.py ipc:///tmp/ex.sock > /tmp/examples.md
It sends each example request (encoded by the small msgpack encoder below,
so the bytes are exactly what the doc shows), records the reply, and prints
markdown: a title, the request and reply as readable maps, and an
```example block with "> request hex" and "< reply hex" lines. Bytes that
differ from run to run (commit times) are printed as "..". The test
tests/net/check_protocol_doc replays every block against a real tallyd.
"""
import ctypes
import struct
import sys

# ---- a minimal msgpack encoder/decoder (canonical smallest encodings) ----

class Bin(bytes):
    pass

def enc(o):
    if o is None:
        return b"\xc0"
    if o is True:
        return b"\xc3"
    if o is False:
        return b"\xc2"
    if isinstance(o, int):
        if 0 <= o <= 0x7f: return bytes([o])
        if -32 <= o < 0: return struct.pack("b", o)
        if 0 <= o <= 0xff: return b"\xcc" + bytes([o])
        if 0 <= o <= 0xffff: return b"\xcd" + struct.pack(">H", o)
        if 0 <= o <= 0xffffffff: return b"\xce" + struct.pack(">I", o)
        if 0 <= o: return b"\xcf" + struct.pack(">Q", o)
        if o >= -128: return b"\xd0" + struct.pack(">b", o)
        if o >= -32768: return b"\xd1" + struct.pack(">h", o)
        if o >= -2**31: return b"\xd2" + struct.pack(">i", o)
        return b"\xd3" + struct.pack(">q", o)
    if isinstance(o, Bin):
        return b"\xc4" + bytes([len(o)]) + bytes(o)
    if isinstance(o, str):
        b = o.encode()
        if len(b) < 32: return bytes([0xa0 | len(b)]) + b
        if len(b) < 256: return b"\xd9" + bytes([len(b)]) + b
        return b"\xda" + struct.pack(">H", len(b)) + b
    if isinstance(o, list):
        assert len(o) < 16
        return bytes([0x90 | len(o)]) + b"".join(enc(x) for x in o)
    if isinstance(o, dict):
        assert len(o) < 16
        return bytes([0x80 | len(o)]) + b"".join(enc(k) + enc(v) for k, v in o.items())
    raise TypeError(o)

def dec(b, i=0):
    t = b[i]
    if t <= 0x7f: return t, i + 1
    if t >= 0xe0: return t - 256, i + 1
    if 0xa0 <= t <= 0xbf: n = t & 31; return b[i+1:i+1+n].decode(), i + 1 + n
    if 0x90 <= t <= 0x9f: return dec_seq(b, i + 1, t & 15, False)
    if 0x80 <= t <= 0x8f: return dec_seq(b, i + 1, t & 15, True)
    if t == 0xc0: return None, i + 1
    if t == 0xc2: return False, i + 1
    if t == 0xc3: return True, i + 1
    if t == 0xc4: n = b[i+1]; return Bin(b[i+2:i+2+n]), i + 2 + n
    if t == 0xd9: n = b[i+1]; return b[i+2:i+2+n].decode(), i + 2 + n
    if t == 0xda: n = struct.unpack(">H", b[i+1:i+3])[0]; return b[i+3:i+3+n].decode(), i + 3 + n
    if t == 0xdc: n = struct.unpack(">H", b[i+1:i+3])[0]; return dec_seq(b, i + 3, n, False)
    if t == 0xde: n = struct.unpack(">H", b[i+1:i+3])[0]; return dec_seq(b, i + 3, n, True)
    fmt = {0xcc: ">B", 0xcd: ">H", 0xce: ">I", 0xcf: ">Q", 0xd0: ">b", 0xd1: ">h", 0xd2: ">i", 0xd3: ">q"}
    if t in fmt:
        n = struct.calcsize(fmt[t]); return struct.unpack(fmt[t], b[i+1:i+1+n])[0], i + 1 + n
    raise ValueError(hex(t))

def dec_seq(b, i, n, is_map):
    if is_map:
        out = {}
        for _ in range(n):
            k, i = dec(b, i); v, i = dec(b, i); out[k] = v
        return out, i
    out = []
    for _ in range(n):
        v, i = dec(b, i); out.append(v)
    return out, i

def show(o):
    if isinstance(o, Bin): return "bin(" + o.hex() + ")"
    if isinstance(o, dict): return "{" + ", ".join(f'"{k}": {show(v)}' for k, v in o.items()) + "}"
    if isinstance(o, list): return "[" + ", ".join(show(v) for v in o) + "]"
    if isinstance(o, str): return '"' + o + '"'
    if o is None: return "nil"
    if o is True: return "true"
    if o is False: return "false"
    return str(o)

# ---- NNG through ctypes ----

nng = ctypes.CDLL("libnng.so.1")

class Sock(ctypes.Structure):
    _fields_ = [("id", ctypes.c_uint32)]

def connect(url):
    s = Sock()
    assert nng.nng_req0_open(ctypes.byref(s)) == 0
    assert nng.nng_dial(s, url.encode(), None, 0) == 0
    return s

def call(s, data):
    assert nng.nng_send(s, ctypes.c_char_p(data), ctypes.c_size_t(len(data)), 0) == 0
    buf = ctypes.c_void_p()
    size = ctypes.c_size_t()
    assert nng.nng_recv(s, ctypes.byref(buf), ctypes.byref(size), 1) == 0  # NNG_FLAG_ALLOC
    out = ctypes.string_at(buf, size.value)
    nng.nng_free(buf, size)
    return out

# ---- the examples, in order, against an empty store ----

TID1 = Bin(bytes.fromhex("0000000000000000000000000000000a"))
TID2 = Bin(bytes.fromhex("0000000000000000000000000000000b"))
W = {"v": 1}
EXAMPLES = [
    ("Open account 1 on ledger 1.",
     {"v": 1, "op": "account_open", "consumer": "shop", "key": "open-1", "id": 1, "ledger": 1, "code": 10}),
    ("Open account 2 with the flag debits_must_not_exceed_credits (1).",
     {"v": 1, "op": "account_open", "consumer": "shop", "key": "open-2", "id": 2, "ledger": 1, "code": 10, "flags": 1}),
    ("Transfer 500 from account 1 to account 2 (transfer id 0x…0a).",
     {"v": 1, "op": "transfer", "consumer": "shop", "key": "pay-1", "id": TID1, "debit_account_id": 1,
      "credit_account_id": 2, "amount": 500, "ledger": 1, "code": 1}),
    ("The same request again (a retry after a lost reply): the stored outcome, replayed, no new effect.",
     {"v": 1, "op": "transfer", "consumer": "shop", "key": "pay-1", "id": TID1, "debit_account_id": 1,
      "credit_account_id": 2, "amount": 500, "ledger": 1, "code": 1}),
    ("The same key with a different amount: refused, nothing changes.",
     {"v": 1, "op": "transfer", "consumer": "shop", "key": "pay-1", "id": TID1, "debit_account_id": 1,
      "credit_account_id": 2, "amount": 501, "ledger": 1, "code": 1}),
    ("Account 2 may not spend more than it received: a business rejection, stored under its key.",
     {"v": 1, "op": "transfer", "consumer": "shop", "key": "refund-1", "id": TID2, "debit_account_id": 2,
      "credit_account_id": 1, "amount": 900, "ledger": 1, "code": 1}),
    ("Read account 2.",
     {"v": 1, "op": "account_get", "id": 2}),
    ("The failed transfer id again under another key: id_already_failed, stored, nothing applied; the id stays failed while refund-1's record lives (original_seq nil: the failed attempt caused no event).",
     {"v": 1, "op": "transfer", "consumer": "shop", "key": "refund-2", "id": TID2, "debit_account_id": 2,
      "credit_account_id": 1, "amount": 900, "ledger": 1, "code": 1}),
    ("Transfer id 0x…0a again under another key: exists, with original_seq, the seq of the event that created it.",
     {"v": 1, "op": "transfer", "consumer": "shop", "key": "pay-2", "id": TID1, "debit_account_id": 1,
      "credit_account_id": 2, "amount": 500, "ledger": 1, "code": 1}),
    ("An atomic chain whose second member fails: nothing of it is applied.",
     {"v": 1, "op": "chain", "consumer": "shop", "key": "chain-1", "ops": [
         {"op": "account_open", "id": 3, "ledger": 1, "code": 10},
         {"op": "transfer", "id": Bin(bytes.fromhex("0000000000000000000000000000000c")), "debit_account_id": 3,
          "credit_account_id": 9, "amount": 1, "ledger": 1, "code": 1}]}),
    ("The same chain key with another amount: refused as a request, nothing decided, so codes and failed_index are nil.",
     {"v": 1, "op": "chain", "consumer": "shop", "key": "chain-1", "ops": [
         {"op": "account_open", "id": 3, "ledger": 1, "code": 10},
         {"op": "transfer", "id": Bin(bytes.fromhex("0000000000000000000000000000000c")), "debit_account_id": 3,
          "credit_account_id": 9, "amount": 2, "ledger": 1, "code": 1}]}),
    ("A batch of two independent writes, each with its own key and result.",
     {"v": 1, "op": "batch", "consumer": "shop", "ops": [
         {"op": "account_open", "key": "open-4", "id": 4, "ledger": 1, "code": 10},
         {"op": "account_open", "key": "open-0", "id": 0, "ledger": 1, "code": 10}]}),
    ("The accounts in id order, two at a time: `next` is the last id of a full page that more follow, to pass as `after_id`.",
     {"v": 1, "op": "account_list", "limit": 2}),
    ("The next page: the last, so `next` is nil.",
     {"v": 1, "op": "account_list", "after_id": 2, "limit": 2}),
    ("Open account 7 with user data of the caller's own: an invoice in user_data_128, a customer in user_data_64, a tenant in user_data_32.",
     {"v": 1, "op": "account_open", "consumer": "shop", "key": "open-7", "id": 7, "ledger": 1, "code": 20,
      "user_data_128": Bin(bytes.fromhex("0000000000000000000000000000cafe")), "user_data_64": 42, "user_data_32": 3}),
    ("Accounts with code 20 and customer 42, newest first: one, so `next` is nil (a full page would end with a cursor).",
     {"v": 1, "op": "account_query", "code": 20, "user_data_64": 42, "reversed": True}),
    ("The transfers that credited account 2 (account_transfers; debits false leaves out those that debited it).",
     {"v": 1, "op": "account_transfers", "account_id": 2, "debits": False}),
    ("Reverse 100 of transfer 0x…0a: a new transfer (0x…1a) from account 2 back to account 1, naming what it reverses.",
     {"v": 1, "op": "transfer_reverse", "consumer": "shop", "key": "reverse-1", "id": Bin(bytes.fromhex("0000000000000000000000000000001a")),
      "reverses": TID1, "amount": 100}),
    ("More than is left to reverse (400 of 500 remain): refused, stored under its key.",
     {"v": 1, "op": "transfer_reverse", "consumer": "shop", "key": "reverse-2", "id": Bin(bytes.fromhex("0000000000000000000000000000001b")),
      "reverses": TID1, "amount": 401}),
    ("Grant alice the feature pro for life (source order 7).",
     {"v": 1, "op": "grant", "consumer": "billing", "key": "evt-7", "subject": "alice", "feature": "pro", "source_order": 7}),
    ("A provider event older than the one applied: stale, recorded, no change.",
     {"v": 1, "op": "revoke", "consumer": "billing", "key": "evt-5", "subject": "alice", "feature": "pro", "source_order": 5}),
    ("Read alice's pro entitlement (times vary, shown as ..).",
     {"v": 1, "op": "entitlement_get", "subject": "alice", "feature": "pro"}),
    ("An unknown op.",
     {"v": 1, "op": "teleport"}),
    ("An unknown field.",
     {"v": 1, "op": "account_get", "id": 1, "colour": "red"}),
    ("A missing field.",
     {"v": 1, "op": "account_get"}),
    ("A wrong type: the account id as a string.",
     {"v": 1, "op": "account_get", "id": "1"}),
    ("A write without a key.",
     {"v": 1, "op": "void", "consumer": "shop", "pending_id": TID1}),
    ("An amount beyond 2^63-1.",
     {"v": 1, "op": "post", "consumer": "shop", "key": "p", "pending_id": TID1, "amount": 2**63}),
    ("Create the durable subscriber audit, starting after the current head (docs/SUBSCRIBERS.md).",
     {"v": 1, "op": "sub_create", "name": "audit", "start": "now", "max_deliver": 3}),
    ("Fetch for audit: nothing new yet, so an empty events array (with wait_ms it would wait).",
     {"v": 1, "op": "sub_fetch", "name": "audit", "max": 10}),
    ("Acknowledge up to seq 2: below the ack floor, so harmless (acks are retried freely).",
     {"v": 1, "op": "sub_ack", "name": "audit", "seq": 2}),
    ("Park an event that is not in flight: refused.",
     {"v": 1, "op": "sub_park", "name": "audit", "seq": 3, "reason": "bad data"}),
    ("Two start positions at once: refused.",
     {"v": 1, "op": "sub_create", "name": "other", "start": "now", "from_seq": 1}),
    ("A subscriber that does not exist.",
     {"v": 1, "op": "sub_get", "name": "nobody"}),
    ("Not a map: the msgpack integer 1.", 1),
    ("The count bomb: a 5-byte array header claiming 4294967295 elements.", None),
    ("An account that does not exist: not_found, with a message like every refusal.",
     {"v": 1, "op": "account_get", "id": 99}),
    ("Account 1's history: one entry per transfer event that moved it, with the transfer and the account right after it.",
     {"v": 1, "op": "account_history", "id": 1}),
    ("Account 1's balances after each transfer event, two at a time (`next`: the `after_seq` of the next page).",
     {"v": 1, "op": "account_balances", "account_id": 1, "limit": 2}),
    ("Account 1's balances as they were after the event at seq 4.",
     {"v": 1, "op": "balance_at", "account_id": 1, "seq": 4}),
    ("One key twice in a batch (and once more with another id): the second member replays the first, the third is refused.",
     {"v": 1, "op": "batch", "consumer": "shop", "ops": [
         {"op": "account_open", "key": "twice", "id": 5, "ledger": 1, "code": 10},
         {"op": "account_open", "key": "twice", "id": 5, "ledger": 1, "code": 10},
         {"op": "account_open", "key": "twice", "id": 6, "ledger": 1, "code": 10}]}),
    ("Disable tally-relay's endpoint billing (admin; docs/RELAY.md): an endpoint.disabled event.",
     {"v": 1, "op": "endpoint_disable", "consumer": "ops", "key": "off-1", "endpoint": "billing", "reason": "maintenance"}),
    ("Its state (changed_ms varies, shown as ..).",
     {"v": 1, "op": "endpoint_get", "endpoint": "billing"}),
    ("Enable it again: an endpoint.enabled event.",
     {"v": 1, "op": "endpoint_enable", "consumer": "ops", "key": "on-1", "endpoint": "billing"}),
    ("An endpoint name with a space.",
     {"v": 1, "op": "endpoint_get", "endpoint": "no spaces"}),
    ("tally-relay records two attempts of seq 3 to billing in the attempt log (admin; docs/RELAY.md, \"The attempt log\"; times of 2100, so no retention removes them).",
     {"v": 1, "op": "endpoint_attempts_record", "endpoint": "billing", "attempts": [
         {"seq": 3, "attempt": 1, "time_ms": 4102444800000, "status": 503, "latency_ms": 41, "error": "billing: HTTP 503", "response": "busy"},
         {"seq": 3, "attempt": 2, "time_ms": 4102444805000, "status": 200, "latency_ms": 12, "error": "", "response": "ok"}]}),
    ("The attempts of seq 3, newest first.",
     {"v": 1, "op": "endpoint_attempts", "endpoint": "billing", "seq": 3}),
    ("A new signing secret for billing; the one before it signs too for an hour (admin; docs/RELAY.md, \"Secret rotation\").",
     {"v": 1, "op": "endpoint_rotate_secret", "consumer": "ops", "key": "rot-1", "endpoint": "billing", "secret": "whsec_c2Vjb25kLXNlY3JldC1mb3ItdGhlLXRlc3RzLTEyMzQ=", "overlap_s": 3600}),
    ("The secrets, as tally-relay reads them (admin; previous_secret empty: the relay's config file's signs through the overlap; times vary).",
     {"v": 1, "op": "endpoint_secret_get", "endpoint": "billing"}),
    ("Resend every event since a time to billing (admin; docs/RELAY.md, \"Recover\").",
     {"v": 1, "op": "endpoint_recover", "consumer": "ops", "key": "rec-1", "endpoint": "billing", "since_ms": 1796600000000}),
    ("tally-relay's word that the recover asked at version 4 is done.",
     {"v": 1, "op": "endpoint_recovered", "consumer": "relay", "key": "relay-recovered:billing:4", "endpoint": "billing", "recover_version": 4}),
    ("A secret that is not one.",
     {"v": 1, "op": "endpoint_rotate_secret", "consumer": "ops", "key": "rot-2", "endpoint": "billing", "secret": "whsec_AAECAw=="}),
    ("Define endpoint orders in tallyd (admin; docs/RELAY.md, \"Endpoints managed at run time\"): the relays start delivering to it; an endpoint.created event.",
     {"v": 1, "op": "endpoint_create", "consumer": "ops", "key": "ep-1", "endpoint": "orders", "url": "https://orders.example.com/hooks", "secret": "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "types": "transfer.* account.opened", "retry_schedule": "0 5s 5m 1h"}),
    ("Change its types and timeout: an endpoint.updated event.",
     {"v": 1, "op": "endpoint_update", "consumer": "ops", "key": "ep-2", "endpoint": "orders", "types": "transfer.posted", "timeout_ms": 5000}),
    ("The endpoints defined in tallyd (no secrets; times vary).",
     {"v": 1, "op": "endpoint_list"}),
    ("Remove it: the relays stop delivering to it; an endpoint.deleted event.",
     {"v": 1, "op": "endpoint_delete", "consumer": "ops", "key": "ep-3", "endpoint": "orders"}),
    ("A URL that is not http:// or https://.",
     {"v": 1, "op": "endpoint_create", "consumer": "ops", "key": "ep-4", "endpoint": "ftp", "url": "ftp://files.example.com/", "secret": "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"}),
]
RAW = {"The count bomb: a 5-byte array header claiming 4294967295 elements.": b"\xdd\xff\xff\xff\xff"}

def wildcard_times(reply):
    """Replace the 8 bytes after the time keys' cf marker by .."""
    h = [f"{x:02x}" for x in reply]
    for name in (b"granted_ms", b"updated_ms", b"created_ms", b"time_ms", b"active_ms",
                 b"timestamp_ms", b"changed_ms", b"previous_until_ms",
                 b"previous_secret_until_ms"):
        key = bytes([0xa0 | len(name)]) + name
        start = 0
        while True:
            i = reply.find(key, start)
            if i < 0: break
            j = i + len(key)
            if reply[j] in (0xcf, 0xd3):
                for k in range(j + 1, j + 9): h[k] = ".."
            start = j
    # seconds since tallyd started (no fetch yet): a positive fixint
    key = bytes([0xa0 | len(b"last_fetch_age_s")]) + b"last_fetch_age_s"
    i = reply.find(key)
    if i >= 0 and reply[i + len(key)] < 0x80:
        h[i + len(key)] = ".."
    return " ".join(h)

def main():
    s = connect(sys.argv[1])
    out = []
    for title, req in EXAMPLES:
        data = RAW.get(title) or enc(req)
        reply = call(s, data)
        shown, _ = dec(reply)
        out.append(f"**{title}**\n")
        out.append("```")
        out.append(f"request: {show(req) if title not in RAW else '(raw bytes)'}")
        out.append(f"reply:   {show(shown)}")
        out.append("```")
        out.append("```example")
        out.append("> " + data.hex(" "))
        out.append("< " + wildcard_times(reply))
        out.append("```\n")
    print("\n".join(out))

if __name__ == "__main__":
    main()
