"""The HTTP exchange under every call: one request, its reply as JSON, and
safe retries (the same request, the same idempotency key) within a total
deadline.

What is retried: no answer (connection refused or dropped, a reply that
did not come in time) and the replies that say "later" (HTTP 503:
``overloaded``, ``storage_full``, ``shutting_down``; and the codes in
:data:`RETRYABLE_CODES`). Every write carries its key and every other op is
idempotent on the server, so a retry never applies anything twice. Between
attempts the client waits a backoff doubling from ``backoff_initial_s`` to
``backoff_max_s`` (a random point of its upper half, so that clients
refused together do not come back together), or what the server's ``Retry-After``
says when that is longer; once the next attempt could not start before the
deadline, the call raises :class:`~tally.errors.DeadlineExceeded`.
"""
from __future__ import annotations

import email.utils
import http.client
import json
import random
import socket
import ssl
import threading
import time
import urllib.parse
from dataclasses import dataclass
from typing import Any, Callable, Dict, Mapping, Optional, Tuple

from .errors import DeadlineExceeded, Fault, TallyError, error_for

#: Codes answered by a server that may answer otherwise later.
RETRYABLE_CODES = frozenset({"overloaded", "storage_full", "shutting_down", "timed_out",
                             "unreachable", "cluster_unavailable", "not_caught_up"})

USER_AGENT = "tally-python/0.1"


@dataclass(frozen=True)
class RetryPolicy:
    """How a call retries.

    Attributes:
        deadline_s: the whole call, every attempt and pause included.
            0 makes one attempt and no retry.
        attempt_timeout_s: one attempt's wait for its reply (a long-poll's
            own ``wait_ms`` is added to it).
        backoff_initial_s: the first pause; each next one doubles.
        backoff_max_s: the longest pause the client chooses.
        retry_after_max_s: the longest ``Retry-After`` honoured.
    """

    deadline_s: float = 30.0
    attempt_timeout_s: float = 10.0
    backoff_initial_s: float = 0.05
    backoff_max_s: float = 2.0
    retry_after_max_s: float = 30.0

    def backoff_s(self, attempt: int) -> float:
        """The pause after the ``attempt``-th failure (1-based): a random
        point between half and all of ``min(backoff_max_s,
        backoff_initial_s * 2**(attempt-1))``."""
        ceiling = min(self.backoff_max_s, self.backoff_initial_s * (2 ** min(attempt - 1, 30)))
        return random.uniform(ceiling / 2, ceiling)


def retry_after_s(value: Optional[str]) -> Optional[float]:
    """Seconds from a ``Retry-After`` header (delta-seconds or an HTTP date),
    or None when absent or unreadable."""
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


@dataclass
class Reply:
    """One HTTP reply: its status, headers (lower-case names) and JSON body."""

    status: int
    headers: Dict[str, str]
    body: Dict[str, Any]


class Transport:
    """Requests to one tallyd's HTTP face, a kept-alive connection per
    thread. Safe to share between threads."""

    def __init__(self, base_url: str, token: Optional[str] = None,
                 ssl_context: Optional[ssl.SSLContext] = None):
        url = urllib.parse.urlsplit(base_url)
        if url.scheme not in ("http", "https") or not url.hostname:
            raise ValueError(f"a tallyd HTTP URL is http://HOST:PORT or https://HOST:PORT: {base_url!r}")
        self.base_url = base_url.rstrip("/")
        self.scheme = url.scheme
        self.host = url.hostname
        self.port = url.port or (443 if url.scheme == "https" else 80)
        self.prefix = url.path.rstrip("/")
        self.token = token
        self.ssl_context = ssl_context
        self._local = threading.local()

    # ---- one attempt ----

    def connect(self, timeout_s: float) -> http.client.HTTPConnection:
        """A new connection (not kept): the event stream's own."""
        if self.scheme == "https":
            return http.client.HTTPSConnection(self.host, self.port, timeout=timeout_s,
                                               context=self.ssl_context)
        return http.client.HTTPConnection(self.host, self.port, timeout=timeout_s)

    def _connection(self, timeout_s: float) -> http.client.HTTPConnection:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = self.connect(timeout_s)
            self._local.conn = conn
        conn.timeout = timeout_s
        if conn.sock is not None:
            conn.sock.settimeout(timeout_s)
        return conn

    def _drop(self) -> None:
        conn = getattr(self._local, "conn", None)
        self._local.conn = None
        if conn is not None:
            conn.close()

    def headers(self, extra: Optional[Mapping[str, str]] = None) -> Dict[str, str]:
        """The headers of every request: the token, the user agent, ``extra``."""
        h = {"User-Agent": USER_AGENT, "Accept": "application/json"}
        if self.token:
            h["Authorization"] = f"Bearer {self.token}"
        if extra:
            h.update(extra)
        return h

    def attempt(self, method: str, path: str, body: Optional[Mapping[str, Any]],
                headers: Mapping[str, str], timeout_s: float, key: Optional[str]) -> Reply:
        """One request. Raises :class:`Fault` ``unreachable`` (no
        connection, or it broke) or ``timed_out`` (no reply in time)."""
        data = None
        if body is not None:
            data = json.dumps(wire_value(body), separators=(",", ":")).encode("utf-8")
        h = self.headers(headers)
        if data is not None:
            h["Content-Type"] = "application/json"
        try:
            try:
                resp, raw = self._exchange(method, path, data, h, timeout_s)
            except (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError):
                # A kept-alive connection the server closed while idle:
                # once more on a new one, at once (the request is
                # idempotent either way).
                self._drop()
                resp, raw = self._exchange(method, path, data, h, timeout_s)
        except socket.timeout as e:
            self._drop()
            raise Fault("timed_out", f"no reply within {timeout_s:.1f} s ({e})", key=key) from e
        except (OSError, http.client.HTTPException) as e:
            self._drop()
            raise Fault("unreachable", f"{self.base_url}: {e!r}", key=key) from e
        reply_headers = {k.lower(): v for k, v in resp.getheaders()}
        return Reply(resp.status, reply_headers, json_body(resp.status, raw))

    def _exchange(self, method: str, path: str, data: Optional[bytes], headers: Dict[str, str],
                  timeout_s: float) -> Tuple[http.client.HTTPResponse, bytes]:
        conn = self._connection(timeout_s)
        conn.request(method, self.prefix + path, body=data, headers=headers)
        resp = conn.getresponse()
        raw = resp.read()
        if resp.will_close:
            self._drop()
        return resp, raw

    def close(self) -> None:
        """Close this thread's kept-alive connection (a next call opens
        another)."""
        self._drop()

    # ---- a call: attempts within the deadline ----

    def call(self, method: str, path: str, body: Optional[Mapping[str, Any]] = None, *,
             headers: Optional[Mapping[str, str]] = None, key: Optional[str] = None,
             policy: RetryPolicy, wait_s: float = 0.0,
             on_retry: Optional[Callable[[TallyError], Optional[Mapping[str, Any]]]] = None
             ) -> Reply:
        """The request, retried by ``policy`` while it fails in a way that
        may pass. ``on_retry`` may give the body of the next attempt (given
        the failure). Returns the reply, whatever its code; raises
        :class:`Fault` or :class:`DeadlineExceeded` when none came."""
        start = time.monotonic()
        deadline = start + policy.deadline_s
        attempts = 0
        while True:
            attempts += 1
            remaining = deadline - time.monotonic()
            timeout_s = policy.attempt_timeout_s + wait_s
            if policy.deadline_s > 0:
                timeout_s = max(0.001, min(timeout_s, remaining))
            try:
                reply = self.attempt(method, path, body, headers or {}, timeout_s, key)
            except Fault as e:
                failure: TallyError = e
                pause_s: Optional[float] = None
            else:
                code = str(reply.body.get("code", ""))
                if reply.status != 503 and code not in RETRYABLE_CODES:
                    return reply
                failure = error_for(code, str(reply.body.get("message", "")), status=reply.status,
                                    key=key, reply=reply.body)
                pause_s = retry_after_s(reply.headers.get("retry-after"))
                if pause_s is not None:
                    pause_s = min(pause_s, policy.retry_after_max_s)
            if policy.deadline_s <= 0:
                raise failure
            pause = max(pause_s or 0.0, policy.backoff_s(attempts))
            if time.monotonic() + pause >= deadline:
                raise DeadlineExceeded(failure, attempts)
            time.sleep(pause)
            if on_retry is not None:
                next_body = on_retry(failure)
                if next_body is not None:
                    body = next_body


def json_body(status: int, raw: bytes) -> Dict[str, Any]:
    """The reply's JSON object; a body that is not one (the HTTP listener's
    plain-text refusals) as ``{"code", "message"}`` by its status."""
    try:
        body = json.loads(raw.decode("utf-8")) if raw else None
    except (UnicodeDecodeError, ValueError):
        body = None
    if isinstance(body, dict) and "code" in body:
        return body
    text = raw.decode("utf-8", "replace").strip()[:512]
    if status == 413:
        code = "request_too_large"
    elif status == 503:
        code = "overloaded"
    elif status >= 500:
        code = "internal"
    elif status >= 400:
        code = "malformed_request"
    else:
        code = "internal"
        text = f"a reply that is not a JSON object of tallyd (HTTP {status}): {text}"
    return {"code": code, "message": text}


EXACT_INT_MAX = 2 ** 53


def wire_value(value: Any) -> Any:
    """``value`` for a JSON body by the value rule: an integer beyond
    +-2^53 as its decimal string (JSON numbers are exact only up to there,
    and tallyd refuses a number beyond int64), in lists and objects too."""
    if isinstance(value, bool):
        return value
    if isinstance(value, int):
        return str(value) if abs(value) > EXACT_INT_MAX else value
    if isinstance(value, Mapping):
        return {k: wire_value(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [wire_value(v) for v in value]
    return value


def quote_segment(value: Any) -> str:
    """One path segment, percent-encoded (``/`` included)."""
    return urllib.parse.quote(str(value), safe="")


def query_string(args: Mapping[str, Any]) -> str:
    """``?a=1&b=true`` from the arguments that are not None ("" when none)."""
    pairs: Tuple[Tuple[str, str], ...] = tuple(
        (k, ("true" if v else "false") if isinstance(v, bool) else str(v))
        for k, v in args.items() if v is not None)
    return "?" + urllib.parse.urlencode(pairs) if pairs else ""
