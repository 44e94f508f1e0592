"""The client follows the server's tables: every op of docs/openapi.json
has its method, every code of `tallyd --protocol-reference` its class; and
the keys it makes are UUIDv7s."""
from __future__ import annotations

import inspect
import json
import re
import subprocess

import tally
from support import SOURCE_DIR, tallyd_program

# Query arguments the client does not offer: `format=msgpack` gives events
# as their stored bytes, which this client does not decode (it reads the
# JSON documents, the default).
NOT_OFFERED = {"format"}

CLASSES = {"B": tally.BusinessRejection, "V": tally.InvalidCommand, "R": tally.RefusedRequest,
           "F": tally.Fault}


def test_every_op_of_the_openapi_document_is_a_method() -> None:
    doc = json.loads((SOURCE_DIR / "docs" / "openapi.json").read_text())
    ops = {path[len("/v1/"):] for path, item in doc["paths"].items()
           if "post" in item and path.count("/") == 2}
    assert "transfer" in ops and "sub_fetch" in ops
    missing = sorted(op for op in ops if not callable(getattr(tally.Client, op, None)))
    assert missing == [], f"ops of docs/openapi.json without a tally.Client method: {missing}"
    # the GET resources' query arguments are the methods' parameters
    # (``feature`` of /v1/entitlements/{subject} makes it entitlement_get)
    for path, item in doc["paths"].items():
        get = item.get("get")
        if get is None or not get.get("operationId", "").startswith("get_"):
            continue
        op = get["operationId"][len("get_"):]
        params = set(inspect.signature(getattr(tally.Client, op)).parameters)
        if op == "entitlement_list":
            params |= set(inspect.signature(tally.Client.entitlement_get).parameters)
        for p in get.get("parameters", []):
            p = _resolve(doc, p["$ref"]) if "$ref" in p else p
            if p.get("in") != "query":
                continue
            name = "from_seq" if p["name"] == "from" else p["name"]
            if name in NOT_OFFERED:
                continue
            assert name in params, f"{op}: the query argument {p['name']} of {path}"


def test_the_event_stream_of_the_openapi_document_is_a_method() -> None:
    doc = json.loads((SOURCE_DIR / "docs" / "openapi.json").read_text())
    params = {p["name"] for p in doc["paths"]["/v1/events"]["get"]["parameters"]}
    assert params == {"from", "Last-Event-ID"}
    assert {"from_seq", "last_event_id"} <= set(inspect.signature(tally.Client.events).parameters)


def _resolve(doc: dict, ref: str) -> dict:
    node = doc
    for part in ref.lstrip("#/").split("/"):
        node = node[part]
    return node


def test_every_code_has_the_class_of_the_servers_table() -> None:
    reference = subprocess.run([tallyd_program(), "--protocol-reference"], check=True,
                               capture_output=True, text=True).stdout
    table = reference.split("### Error codes", 1)[1].split("\n### ", 1)[0]
    server = dict(re.findall(r"^\| `([a-z_]+)` \| \d+ \| ([BVRF]) \|$", table, re.M))
    assert len(server) > 100
    rows = [f'    "{code}": "{cls}",' for code, cls in server.items()]
    assert tally.CODE_CLASSES == server, (
        "tally/errors.py's CODE_CLASSES differs from tallyd's code table; its rows are:\n"
        + "\n".join(rows))
    for code, cls in server.items():
        e = tally.error_for(code, status=400)
        assert isinstance(e, CLASSES[cls]) and e.code == code and e.code_class == cls
    assert type(tally.error_for("idempotency_key_reused")) is tally.IdempotencyKeyReused
    # a code of a newer server: its class from the HTTP status
    assert isinstance(tally.error_for("some_new_rejection", status=422), tally.BusinessRejection)
    assert isinstance(tally.error_for("some_new_fault", status=500), tally.Fault)


def test_keys_are_uuidv7s_that_grow() -> None:
    keys = [tally.new_key() for _ in range(1000)]
    assert keys == sorted(keys) and len(set(keys)) == 1000
    for k in keys[:10]:
        assert re.fullmatch(r"[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}", k)
    tid = tally.transfer_id_for_key("shop", keys[0])
    assert tid[:12] == keys[0].replace("-", "")[:12]  # a UUIDv7 key lends its time
    assert tid[12] == "7" and tid[16] in "89ab"
