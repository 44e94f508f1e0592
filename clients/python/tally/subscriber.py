"""Durable subscribers: the fetch → handle → ack loop, and an inbox in
SQLite that makes a handler's effects exactly once.

Delivery is at least once (docs/SUBSCRIBERS.md): after a crash, a lost
reply or a nak, an event comes again. :class:`Subscriber` runs the loop —
fetch a batch, hand each event to the handler, acknowledge the events it
handled with one ``sub_ack`` (by seq, in ``done``), nak an event whose
handler raised (or park it: :class:`Park`). :class:`SqliteInbox` records
each handled event id in the same SQLite transaction as the handler's own
writes, so a repeat is recognised and skipped: effects exactly once.
"""
from __future__ import annotations

import re
import sqlite3
import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Optional, Union

from .errors import Fault
from .keys import new_key
from .types import Delivery, Event

if TYPE_CHECKING:
    from .client import Client

ERROR_TEXT_BYTES_MAX = 256  # sub_nak's error and sub_park's reason


class Park(Exception):
    """Raised by a handler for an event it can never handle: the event goes
    to the dead-letter queue at once (``sub_park``, the text as reason)."""


class Retry(Exception):
    """Raised by a handler to have the event delivered again after
    ``delay_ms`` (None: the subscriber's backoff rule), the text kept as
    the event's last error. Any other exception is a retry too."""

    def __init__(self, message: str = "", delay_ms: Optional[int] = None):
        super().__init__(message)
        self.delay_ms = delay_ms


def _error_text(e: BaseException) -> str:
    text = str(e) or type(e).__name__
    if not isinstance(e, (Park, Retry)):
        text = f"{type(e).__name__}: {text}"
    raw = text.encode("utf-8")[:ERROR_TEXT_BYTES_MAX]
    return raw.decode("utf-8", "ignore")


@dataclass
class RunCounters:
    """What :meth:`Subscriber.run` did: fetches, events handed to the
    handler, and their verdicts."""

    fetches: int = 0
    deliveries: int = 0
    done: int = 0
    retried: int = 0
    parked: int = 0
    failures: int = 0


Handler = Callable[[Delivery], Any]


class Subscriber:
    """A durable subscriber's consumer: one instance of ``name``.

    Args:
        client: the :class:`~tally.Client`.
        name: the subscriber (1-64 of ``A-Z a-z 0-9 . _ - :``).
        instance: this consumer's instance id (default: a new UUIDv7). A
            stable one (e.g. ``"billing-worker-1"``) gets its unacked events
            back at once after a crash; a new one leaves them to fall due
            after the subscriber's ack wait.
        create: send ``sub_create`` with ``options`` first (an identical
            subscriber existing is fine).
        fetch_max: events per fetch (1-1000).
        wait_ms: each fetch's long-poll (0-30000).
        options: ``sub_create``'s settings (``start``, ``from_seq``,
            ``max_deliver``, ``ack_wait_ms``, ``backoff_ms``, ...).
    """

    def __init__(self, client: "Client", name: str, *, instance: Optional[str] = None,
                 create: bool = True, fetch_max: int = 100, wait_ms: int = 5000,
                 failures_max: int = 10, **options: Any):
        self.client = client
        self.name = name
        self.instance = instance or new_key()
        self.fetch_max = fetch_max
        self.wait_ms = wait_ms
        self.failures_max = failures_max
        self.counters = RunCounters()
        self._stop = threading.Event()
        if create:
            client.sub_create(name, **options)

    def stop(self) -> None:
        """Make :meth:`run` return after the event in hand (from any thread
        or from the handler)."""
        self._stop.set()

    def run(self, handler: Handler, *, max_events: Optional[int] = None,
            until_idle: bool = False) -> RunCounters:
        """Fetch, handle, acknowledge, until :meth:`stop`, ``max_events``
        handled, or (``until_idle``) a fetch that brings nothing.

        ``handler(delivery)`` returning is *done*; raising :class:`Park`
        parks the event; any other exception naks it (:class:`Retry`
        chooses the delay). The first fetch carries ``restart``, so this
        instance's unacked events of a previous run come back at once.
        Network trouble (after the client's own retries) is retried with a
        pause doubling from 0.1 s to 5 s, ``failures_max`` times in a row,
        then raised; a refusal (e.g. ``subscriber_not_found``) is raised at
        once. Events handled are acknowledged before it returns."""
        self._stop.clear()
        restart = True
        handled = 0
        failures = 0
        while not self._stop.is_set() and (max_events is None or handled < max_events):
            try:
                fetched = self.client.sub_fetch(self.name, max=self._fetch_count(max_events, handled),
                                                wait_ms=self.wait_ms, restart=restart,
                                                instance=self.instance)
            except Fault:
                failures += 1
                self.counters.failures += 1
                if failures >= self.failures_max:
                    raise
                time.sleep(min(5.0, 0.1 * 2 ** (failures - 1)))
                restart = True
                continue
            failures = 0
            restart = False
            self.counters.fetches += 1
            if not fetched.events:
                if until_idle:
                    break
                continue
            handled += self._handle_batch(handler, fetched.events, max_events, handled)
        return self.counters

    def _fetch_count(self, max_events: Optional[int], handled: int) -> int:
        if max_events is None:
            return self.fetch_max
        return max(1, min(self.fetch_max, max_events - handled))

    def _handle_batch(self, handler: Handler, deliveries: Any, max_events: Optional[int],
                      handled: int) -> int:
        """Each delivery to the handler in fetch order; the done ones
        acknowledged with one ``sub_ack``. Returns how many were handled;
        those not handed out (stopped) come again later."""
        done = []
        count = 0
        try:
            for d in deliveries:
                if self._stop.is_set() or (max_events is not None and handled + count >= max_events):
                    break
                count += 1
                self.counters.deliveries += 1
                try:
                    handler(d)
                except Park as e:
                    self.client.sub_park(self.name, d.seq, reason=_error_text(e))
                    self.counters.parked += 1
                except Exception as e:  # the handler's failure: deliver again later
                    delay = e.delay_ms if isinstance(e, Retry) else None
                    self.client.sub_nak(self.name, d.seq, delay_ms=delay, error=_error_text(e))
                    self.counters.retried += 1
                else:
                    done.append(d.seq)
        finally:
            if done:
                self.client.sub_ack(self.name, done=done)
                self.counters.done += len(done)
        return count


_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,63}$")

EffectFn = Callable[[Event, sqlite3.Connection], Any]


class SqliteInbox:
    """Exactly-once effects for a subscriber's handler, in SQLite.

    Applying an event is one SQLite transaction: if its ``event_id`` is in
    the processed table, the event is a repeat and is skipped; else the
    handler runs with the connection (its writes are part of the
    transaction), the event id is recorded, and the transaction commits. A
    handler that raises rolls everything back, its own writes included, and
    the event can be applied later as if it had never come. So a crash at
    any point — before the commit or after it, before the ack — leaves
    either nothing or the effects and the record together.

    Args:
        database: a file name, or an open :class:`sqlite3.Connection` (its
            ``isolation_level`` is set to None: the inbox opens and ends
            the transactions itself, so the handler must not commit).
        table: the processed table's name (created when missing).
    """

    def __init__(self, database: Union[str, sqlite3.Connection], *,
                 table: str = "tally_inbox_processed"):
        if not _IDENTIFIER.match(table):
            raise ValueError(f"not an SQL identifier: {table!r}")
        if isinstance(database, sqlite3.Connection):
            self.connection = database
        else:
            self.connection = sqlite3.connect(database, timeout=30.0, check_same_thread=False)
        self.connection.isolation_level = None
        self.table = table
        self.applied = 0
        self.repeated = 0
        self.connection.execute(
            f"CREATE TABLE IF NOT EXISTS {table} (event_id TEXT PRIMARY KEY,"
            " seq INTEGER NOT NULL, type TEXT NOT NULL, processed_ms INTEGER NOT NULL)")

    def apply(self, event: Event, effect: EffectFn) -> bool:
        """Apply ``event`` once: ``effect(event, connection)`` and the
        record of its id in one transaction. Returns False for a repeat
        (nothing run); re-raises what ``effect`` raised (nothing kept)."""
        conn = self.connection
        conn.execute("BEGIN IMMEDIATE")
        try:
            seen = conn.execute(f"SELECT 1 FROM {self.table} WHERE event_id = ?",
                                (event.event_id,)).fetchone()
            if seen is None:
                effect(event, conn)
                if not conn.in_transaction:
                    raise RuntimeError("the handler ended the inbox's transaction"
                                       " (it must not commit or roll back)")
                conn.execute(f"INSERT INTO {self.table} (event_id, seq, type, processed_ms)"
                             " VALUES (?, ?, ?, ?)",
                             (event.event_id, event.seq, event.type, int(time.time() * 1000)))
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise
        if seen is None:
            self.applied += 1
            return True
        self.repeated += 1
        return False

    def handler(self, effect: EffectFn) -> Handler:
        """A :meth:`Subscriber.run` handler applying each delivery's event
        through :meth:`apply`."""
        def handle(delivery: Delivery) -> None:
            self.apply(delivery.event, effect)
        return handle

    def processed(self, event_id: str) -> Optional[int]:
        """The seq an event id was applied at, or None."""
        row = self.connection.execute(f"SELECT seq FROM {self.table} WHERE event_id = ?",
                                      (event_id,)).fetchone()
        return None if row is None else int(row[0])

    def prune(self, older_than_ms: int) -> int:
        """Remove the records of events applied more than ``older_than_ms``
        ago (keep them longer than any redelivery can come); returns how
        many."""
        cutoff = int(time.time() * 1000) - older_than_ms
        cur = self.connection.execute(f"DELETE FROM {self.table} WHERE processed_ms < ?",
                                      (cutoff,))
        return cur.rowcount

    def close(self) -> None:
        """Close the connection."""
        self.connection.close()
