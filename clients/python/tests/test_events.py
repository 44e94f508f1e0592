"""Events over HTTP: log_read's JSON documents; and the live stream's
client side against a scripted server: SSE framing, a stream the server
ends resumed with Last-Event-ID, an event sent again dropped
(tests/test_stream.py runs the stream against a real tallyd)."""
from __future__ import annotations

import http.server
import json
import threading
from typing import Any, Dict, List

import tally
from support import slowdown


def take(stream: tally.EventStream, count: int, seconds: float = 30) -> List[tally.Event]:
    """The next ``count`` events of ``stream``, within ``seconds`` (times
    the slowdown); else the stream is closed and the test fails naming
    what came."""
    got: List[tally.Event] = []
    failure: Dict[str, Any] = {}

    def run() -> None:
        try:
            for _ in range(count):
                got.append(next(stream))
        except Exception as e:  # reported below
            failure["e"] = e

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(seconds * slowdown())
    if t.is_alive():
        stream.close()
        raise AssertionError(f"waited {seconds} s for {count} events; got seqs"
                             f" {[e.seq for e in got]}")
    if "e" in failure:
        raise failure["e"]
    return got


def test_log_read_gives_event_documents(client: tally.Client) -> None:
    w = client.account_open(1, ledger=1, code=10, key="open-1")
    client.account_open(2, ledger=1, code=10)
    pay = client.transfer(1, 2, 5, ledger=1, code=1, key="pay-1", correlation="order-9")
    page = client.log_read(1, limit=10)
    assert page.head == 3 and [e.seq for e in page.events] == [1, 2, 3]
    opened, _, moved = page.events
    assert opened.type == "account.opened" and opened.key == "open-1" and opened.seq == w.seq
    assert opened.consumer == "shop" and opened.entity == {"kind": "account", "id": 1}
    assert opened.data["account"]["id"] == 1 and opened.entity_version == 1
    assert moved.type == "transfer.created" and moved.entity["id"] == pay.transfer_id
    assert moved.data["transfer"]["amount"] == 5 and moved.data["credit_account"]["id"] == 2
    assert len(moved.event_id) == 36 and moved.time_ms > 0 and moved.time.endswith("Z")


# ---- the stream's framing, against a scripted server ----

class SseScript(http.server.ThreadingHTTPServer):
    """Serves GET /v1/events from ``events`` (seq -> document): from the
    query's ``from``, or from ``Last-Event-ID`` (that event again, which
    the client must drop), at most ``per_stream``
    events per connection, then ends the stream; records each request's
    (path, Last-Event-ID)."""

    def __init__(self, events: Dict[int, Dict[str, Any]], per_stream: int):
        self.events = events
        self.per_stream = per_stream
        self.requests: List[Any] = []
        super().__init__(("127.0.0.1", 0), SseHandler)


class SseHandler(http.server.BaseHTTPRequestHandler):
    server: SseScript
    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:  # noqa: N802
        last = self.headers.get("Last-Event-ID")
        self.server.requests.append((self.path, last))
        if last is not None:
            start = int(last)  # the last one seen again: the client drops it
        else:
            start = int(self.path.split("from=")[1])
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Connection", "close")
        self.end_headers()
        out = ": keepalive\n\n"
        seqs = [s for s in sorted(self.server.events) if s >= start][:self.server.per_stream]
        for s in seqs:  # both line ends a stream may use
            end = "\r\n" if s % 2 else "\n"
            out += f"id: {s}{end}data: {json.dumps(self.server.events[s])}{end}{end}: keepalive\n\n"
        self.wfile.write(out.encode())

    def log_message(self, *args: Any) -> None:
        pass


def test_a_stream_the_server_ends_resumes_with_last_event_id() -> None:
    docs = {s: {"seq": s, "event_id": f"id-{s}", "type": "account.opened",
                "data": {"account": {"id": s}}} for s in range(1, 8)}
    server = SseScript(docs, per_stream=3)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        c = tally.Client(f"http://127.0.0.1:{server.server_address[1]}")
        with c.events(from_seq=2) as stream:
            events = take(stream, 6)
        assert [e.seq for e in events] == [2, 3, 4, 5, 6, 7]
        assert [e.event_id for e in events] == [f"id-{s}" for s in range(2, 8)]
        assert server.requests[:3] == [("/v1/events?from=2", None), ("/v1/events", "4"),
                                       ("/v1/events", "6")]
    finally:
        server.shutdown()
        server.server_close()
