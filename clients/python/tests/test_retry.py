"""Retries: the same request with the same key, a backoff, Retry-After, a
total deadline; and min_seq on reads. Against the real tallyd where it can
show the case (a stopped server, a server that stops answering); a
scripted HTTP server of the standard library shows what a real one cannot
be made to answer on demand (503 with Retry-After)."""
from __future__ import annotations

import http.server
import json
import os
import signal
import threading
import time
from typing import Any, Callable, Dict, Iterator, List, Tuple

import pytest

import tally
from support import Tallyd, slowdown, wait_for


class SignallingPolicy(tally.RetryPolicy):
    """A retry policy that marks each failure (the fact a test waits on)."""

    failed: threading.Event

    def backoff_s(self, attempt: int) -> float:
        self.failed.set()  # type: ignore[attr-defined]
        return super().backoff_s(attempt)


def signalling_policy(**kw: Any) -> SignallingPolicy:
    p = SignallingPolicy(**kw)
    object.__setattr__(p, "failed", threading.Event())
    return p


def test_a_stopped_server_is_a_deadline_error(tallyd: Tallyd) -> None:
    url = tallyd.url
    tallyd.stop()
    c = tally.Client(url, retry=tally.RetryPolicy(deadline_s=1.0, backoff_initial_s=0.05))
    start = time.monotonic()
    with pytest.raises(tally.DeadlineExceeded) as e:
        c.account_open(1, ledger=1, code=10, key="open-1")
    took = time.monotonic() - start
    assert isinstance(e.value, tally.Fault)
    assert e.value.code == "unreachable" and e.value.attempts > 1
    assert e.value.key == "open-1"  # the key to send the write with again
    assert took < 1.0 + 5.0  # it gave up at its deadline, not later
    # no deadline: one attempt, its own failure
    once = tally.Client(url, retry=tally.RetryPolicy(deadline_s=0))
    with pytest.raises(tally.Fault) as single:
        once.stats()
    assert single.value.code == "unreachable" and not isinstance(single.value,
                                                                 tally.DeadlineExceeded)


def transfer_while(tallyd: Tallyd, key: str, break_server: Callable[[], None],
                   mend_server: Callable[[], None], **policy: Any) -> tally.WriteResult:
    """Accounts 1 and 2, then a transfer of 40 under ``key`` by a retrying
    client started once ``break_server()`` ran; ``mend_server()`` runs once
    its first attempt failed (the fact waited on). Returns its result,
    after checking that the transfer was applied once."""
    c = tally.Client(tallyd.url, consumer="shop")
    c.account_open(1, ledger=1, code=10)
    c.account_open(2, ledger=1, code=10)
    break_server()
    retry = signalling_policy(deadline_s=60.0, backoff_initial_s=0.05, backoff_max_s=0.2,
                              **policy)
    retrying = tally.Client(tallyd.url, consumer="shop", retry=retry)
    result: Dict[str, Any] = {}
    t = threading.Thread(target=lambda: result.update(
        r=retrying.transfer(1, 2, 40, ledger=1, code=1, key=key)))
    t.start()
    try:
        wait_for("the client's first failed attempt", 30, retry.failed.is_set)
    finally:
        mend_server()
    t.join(60 * slowdown())
    assert not t.is_alive()
    assert result["r"].ok and result["r"].key == key
    # whichever attempt the server applied, it applied one
    assert c.account_get(2).credits_posted == 40
    return result["r"]


def test_a_retry_reaches_the_server_once_it_is_back(tallyd: Tallyd) -> None:
    transfer_while(tallyd, "pay-1", tallyd.stop, tallyd.start)  # the same data and port


def freeze(pid: int) -> None:
    """SIGSTOP pid, and wait until every thread of it has stopped (a group
    stop completes after kill() returns)."""
    os.kill(pid, signal.SIGSTOP)

    def stopped() -> bool:
        tasks = os.listdir(f"/proc/{pid}/task")
        for tid in tasks:
            with open(f"/proc/{pid}/task/{tid}/stat") as f:
                if f.read().rsplit(")", 1)[1].split()[0] not in ("T", "t"):
                    return False
        return True

    wait_for(f"process {pid} stopped", 30, stopped)


def test_a_lost_reply_is_retried_with_the_same_key_and_applies_once(tallyd: Tallyd) -> None:
    # tallyd frozen: the request reaches its socket, no reply comes in time
    r = transfer_while(tallyd, "pay-lost", lambda: freeze(tallyd.proc.pid),
                       lambda: os.kill(tallyd.proc.pid, signal.SIGCONT), attempt_timeout_s=0.3)
    c = tally.Client(tallyd.url, consumer="shop")
    again = c.transfer(1, 2, 40, ledger=1, code=1, key="pay-lost")
    assert again.replayed and again.seq == r.seq


# ---- a scripted server: the replies a real one gives only under load ----

class Scripted(http.server.ThreadingHTTPServer):
    """Answers each request with the next (status, headers, body) of
    ``script`` (the last one repeats), recording (time, path, headers)."""

    def __init__(self, script: List[Tuple[int, Dict[str, str], Dict[str, Any]]]):
        self.script = list(script)
        self.seen: List[Tuple[float, str, Dict[str, str]]] = []
        super().__init__(("127.0.0.1", 0), ScriptedHandler)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class ScriptedHandler(http.server.BaseHTTPRequestHandler):
    server: Scripted

    def _answer(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        if length:
            self.rfile.read(length)
        self.server.seen.append((time.monotonic(), self.path, dict(self.headers)))
        status, headers, body = (self.server.script.pop(0) if len(self.server.script) > 1
                                 else self.server.script[0])
        raw = json.dumps(body).encode()
        self.send_response(status)
        for k, v in headers.items():
            self.send_header(k, v)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)

    do_GET = do_POST = _answer

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def scripted(request: pytest.FixtureRequest) -> Iterator[Scripted]:
    server = Scripted(request.param)
    t = threading.Thread(target=server.serve_forever, daemon=True)
    t.start()
    yield server
    server.shutdown()
    server.server_close()


OVERLOADED = (503, {"Retry-After": "1"}, {"v": 1, "code": "overloaded", "message": "queue full"})
OK_WRITE = (200, {}, {"v": 1, "code": "ok", "replayed": False, "seq": 1, "events": 1, "key": "k"})


@pytest.mark.parametrize("scripted", [[OVERLOADED, OK_WRITE]], indirect=True)
def test_retry_after_is_honoured_with_the_same_key(scripted: Scripted) -> None:
    c = tally.Client(scripted.url, retry=tally.RetryPolicy(deadline_s=30, backoff_initial_s=0.01))
    r = c.account_open(1, ledger=1, code=10, key="k")
    assert r.ok
    (t1, _, h1), (t2, _, h2) = scripted.seen
    assert h1["Idempotency-Key"] == h2["Idempotency-Key"] == "k"
    assert t2 - t1 >= 0.95  # Retry-After: 1, not the 10 ms backoff


@pytest.mark.parametrize("scripted", [[OVERLOADED]], indirect=True)
def test_a_retry_after_beyond_the_deadline_ends_the_call_at_once(scripted: Scripted) -> None:
    c = tally.Client(scripted.url, retry=tally.RetryPolicy(deadline_s=0.5))
    with pytest.raises(tally.DeadlineExceeded) as e:
        c.stats()
    assert e.value.code == "overloaded" and e.value.status == 503 and e.value.attempts == 1
    assert isinstance(e.value.last, tally.Fault)


STATS = (200, {}, {"v": 1, "code": "ok", "head_seq": 3, "head": 3, "events": []})


@pytest.mark.parametrize("scripted", [[STATS]], indirect=True)
def test_min_seq_is_sent_only_when_given(scripted: Scripted) -> None:
    c = tally.Client(scripted.url)
    c.stats()
    c.stats(min_seq=3)
    c.log_read(2, limit=5, min_seq=9)
    assert [p for _, p, _ in scripted.seen] == [
        "/v1/stats", "/v1/stats?min_seq=3", "/v1/log?from=2&limit=5&min_seq=9"]


def test_min_seq_reaches_the_real_server(client: tally.Client) -> None:
    w = client.account_open(1, ledger=1, code=10)
    assert client.account_get(1).id == 1  # without min_seq: nothing extra is sent
    try:
        account = client.account_get(1, min_seq=w.seq)
    except tally.RefusedRequest as e:  # a tallyd without min_seq reads names the field
        assert (e.code, e.message) == ("unknown_field", "min_seq")
    else:
        assert account is not None and account.id == 1


def test_a_kept_connection_the_server_closed_is_replaced_at_once(tallyd: Tallyd) -> None:
    once = tally.Client(tallyd.url, retry=tally.RetryPolicy(deadline_s=0))  # no retries
    assert once.stats().head_seq == 0
    tallyd.stop()
    tallyd.start()  # the client's kept-alive connection is dead now
    assert once.stats().head_seq == 0
