"""The live event stream: ``GET /v1/events`` (Server-Sent Events) as an
iterator that reconnects by itself.

The server sends each event as an ``id: <seq>`` line and a ``data: <event
document>`` line, then an empty line; comment lines (``: keepalive``) are
heartbeats. It may end a stream after a while, and connections break: the
iterator then connects again with ``Last-Event-ID`` set to the last seq it
yielded, so the server resumes right after it. It yields each event once, in
seq order (an event at or below the last yielded seq is dropped).
"""
from __future__ import annotations

import http.client
import json
import socket
import time
from typing import TYPE_CHECKING, Any, Dict, Iterator, List, Optional

from .errors import DeadlineExceeded, Fault, TallyError, error_for
from ._http import RETRYABLE_CODES, json_body, retry_after_s
from .types import Event

if TYPE_CHECKING:
    from .client import Client

#: The longest line read from the stream (a document is at most 768 KiB;
#: its JSON escapes may make it longer).
LINE_BYTES_MAX = 4 * 1024 * 1024


class EventStream(Iterator[Event]):
    """Events of the log as they are committed; see :meth:`Client.events`.

    Attributes:
        last_seq: the seq of the last event yielded (None before the first,
            unless the stream was started after a given seq).
        connects: how many connections the stream opened so far.
    """

    def __init__(self, client: "Client", *, from_seq: Optional[int] = None,
                 last_event_id: Optional[int] = None, idle_timeout_s: float = 60.0):
        self.client = client
        self.idle_timeout_s = idle_timeout_s
        self.last_seq: Optional[int] = last_event_id
        self._from_seq = from_seq if last_event_id is None else None
        self._conn: Optional[http.client.HTTPConnection] = None
        self._resp: Optional[http.client.HTTPResponse] = None
        self._retry_ms: Optional[int] = None
        self.connects = 0
        self._closed = False
        if self.last_seq is None and self._from_seq is None:
            # Only new events: those after the head now, asked for by seq,
            # so that a reconnect before the first event misses none either.
            self._from_seq = client.stats().head_seq + 1

    def __enter__(self) -> "EventStream":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __iter__(self) -> "EventStream":
        return self

    def __next__(self) -> Event:
        while True:
            if self._closed:
                raise StopIteration
            if self._resp is None:
                self._open()
            event = self._read_event()
            if event is None:  # the stream ended or broke: connect again
                self._disconnect()
                continue
            if self.last_seq is not None and event.seq <= self.last_seq:
                continue
            self.last_seq = event.seq
            self._from_seq = None
            return event

    def close(self) -> None:
        """Close the connection; the iterator ends."""
        self._closed = True
        self._disconnect()

    def drop_connection(self) -> None:
        """Close the current connection only, as a broken network would:
        the next ``next()`` connects again with ``Last-Event-ID``."""
        self._disconnect()

    # ---- connecting ----

    def _start_position(self) -> Dict[str, str]:
        """The query and headers that resume the stream where it stands."""
        if self.last_seq is not None:
            return {"Last-Event-ID": str(self.last_seq)}
        return {"query": f"?from={self._from_seq}"}

    def _open(self) -> None:
        """Connect, retrying by the client's policy (its deadline counts
        from here); raises the refusal when the server refuses."""
        policy = self.client.retry
        deadline = time.monotonic() + policy.deadline_s
        attempts = 0
        while True:
            attempts += 1
            try:
                self._connect_once()
                return
            except TallyError as failure:
                if failure.status not in (0, 503) and failure.code not in RETRYABLE_CODES:
                    raise
                pause = policy.backoff_s(attempts)
                if self._retry_ms is not None:
                    pause = max(pause, self._retry_ms / 1000.0)
                after = getattr(failure, "retry_after_s", None)
                if after is not None:
                    pause = max(pause, min(after, policy.retry_after_max_s))
                if time.monotonic() + pause >= deadline:
                    raise DeadlineExceeded(failure, attempts) from failure
                time.sleep(pause)

    def _connect_once(self) -> None:
        where = self._start_position()
        query = where.pop("query", "")
        transport = self.client.transport
        headers = transport.headers({"Accept": "text/event-stream", "Cache-Control": "no-cache",
                                     **where})
        conn = transport.connect(self.client.retry.attempt_timeout_s)
        try:
            conn.request("GET", transport.prefix + "/v1/events" + query, headers=headers)
            resp = conn.getresponse()
        except socket.timeout as e:
            conn.close()
            raise Fault("timed_out", f"no reply to GET /v1/events ({e})") from e
        except (OSError, http.client.HTTPException) as e:
            conn.close()
            raise Fault("unreachable", f"{transport.base_url}: {e!r}") from e
        content_type = resp.getheader("Content-Type", "")
        if resp.status != 200 or not content_type.startswith("text/event-stream"):
            body = json_body(resp.status, resp.read())
            if resp.status == 200:
                body = {"code": "internal", "message": f"GET /v1/events: not an event stream"
                                                       f" (Content-Type {content_type!r})"}
            conn.close()
            refusal = error_for(str(body.get("code", "")), str(body.get("message", "")),
                                status=resp.status, reply=body)
            setattr(refusal, "retry_after_s", retry_after_s(resp.getheader("Retry-After")))
            raise refusal
        if conn.sock is not None:
            conn.sock.settimeout(self.idle_timeout_s)
        self._conn, self._resp = conn, resp
        self.connects += 1

    def _disconnect(self) -> None:
        if self._conn is not None:
            self._conn.close()
        self._conn = self._resp = None

    # ---- reading ----

    def _read_event(self) -> Optional[Event]:
        """The next event of the connection, or None when it ended, broke,
        or stayed silent (no heartbeat either) past ``idle_timeout_s``."""
        assert self._resp is not None
        data: List[str] = []
        while True:
            try:
                raw = self._resp.readline(LINE_BYTES_MAX)
            except (OSError, http.client.HTTPException, ValueError):
                return None
            if not raw:
                return None
            line = raw.decode("utf-8", "replace").rstrip("\r\n")
            if line == "":
                if data:
                    return Event.from_json(json.loads("\n".join(data)))
                continue
            if line.startswith(":"):
                continue  # a heartbeat or comment
            name, _, value = line.partition(":")
            if value.startswith(" "):
                value = value[1:]
            if name == "data":
                data.append(value)
            elif name == "retry" and value.isdigit():
                self._retry_ms = int(value)
            # "id" is the event's seq, which the document carries too;
            # "event" names no type on this stream.
