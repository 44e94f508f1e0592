"""Durable subscribers: the loop (fetch -> handler -> ack, nak on an
exception, park on Park) and exactly-once effects with the SQLite inbox
across SIGKILLs of the subscriber process, mid-handler and between its
commit and its ack."""
from __future__ import annotations

import json
import signal
import sqlite3
import subprocess
from pathlib import Path
from typing import List

import tally
from support import HERE, Tallyd, python, slowdown, wait_for


def make_events(c: tally.Client, accounts: int) -> int:
    """``accounts`` accounts and a transfer into each but the first;
    returns the head seq."""
    for i in range(1, accounts + 1):
        c.account_open(i, ledger=1, code=10)
    for i in range(2, accounts + 1):
        c.transfer(1, i, i, ledger=1, code=1)
    return c.stats().head_seq


class Worker:
    """tests/sub_worker.py in a process of its own."""

    def __init__(self, tallyd: Tallyd, db: Path, *extra: str):
        self.proc = subprocess.Popen(
            [python(), str(HERE / "sub_worker.py"), tallyd.url, "mailer", "worker-1", str(db),
             *extra], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.lines: List[str] = []

    def line(self) -> str:
        """The worker's next line of output (a fact: it reached a point)."""
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline().strip()
        if not line:
            self.proc.wait()
            raise AssertionError(f"the worker ended (exit {self.proc.returncode}):\n"
                                 f"{self.proc.stderr.read() if self.proc.stderr else ''}")
        self.lines.append(line)
        return line

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(30 * slowdown())
        for stream in (self.proc.stdout, self.proc.stderr):
            if stream is not None:
                stream.close()


def test_a_subscriber_killed_mid_handler_and_restarted_handles_each_event_once(
        tallyd: Tallyd, tmp_path: Path) -> None:
    c = tally.Client(tallyd.url, consumer="shop")
    head = make_events(c, 6)  # 11 events
    db = tmp_path / "mailer.db"

    # 1: batches of 3; in seq 5's handler (4 committed, not acked), killed
    w = Worker(tallyd, db, "--block-in-handler", "5")
    assert w.line() == "blocked 5"
    w.kill()
    # 2: 4 comes again (a repeat for the inbox), 5 again from the start;
    # killed after 8's commit, before the ack of 7..9
    w = Worker(tallyd, db, "--block-after-commit", "8")
    assert w.line() == "committed 8"
    w.kill()
    # 3: to the end
    w = Worker(tallyd, db)
    counts = json.loads(w.line())
    w.proc.wait(30 * slowdown())
    assert w.proc.returncode == 0

    with sqlite3.connect(db) as conn:
        effects = conn.execute("SELECT seq, event_id FROM effects ORDER BY seq").fetchall()
        processed = conn.execute("SELECT count(*) FROM tally_inbox_processed").fetchone()[0]
    log = c.log_read(1, limit=100)
    assert [s for s, _ in effects] == list(range(1, head + 1)), "each event's effect once"
    assert [e for _, e in effects] == [e.event_id for e in log.events]
    assert processed == head
    # run 3 got 7 and 8 back (committed, not acked) and dropped them as repeats
    assert counts["repeated"] == 2 and counts["applied"] == head - 8
    info = c.sub_get("mailer")
    assert info.ack_floor == head and info.in_flight == 0


def test_the_loop_acks_naks_and_parks(client: tally.Client) -> None:
    make_events(client, 3)  # 5 events
    seen: List[tally.Delivery] = []

    def handler(d: tally.Delivery) -> None:
        seen.append(d)
        if d.seq == 2 and d.attempt == 1:
            raise tally.Retry("not yet", delay_ms=0)
        if d.seq == 3:
            raise tally.Park("cannot ever")
        if d.seq == 4 and d.attempt == 1:
            raise ValueError("a bug")  # any exception: a nak

    sub = tally.Subscriber(client, "loop", fetch_max=10, wait_ms=0, backoff_ms=[100])
    wait_for("every event handled or parked", 30,
             lambda: sub.run(handler, until_idle=True) and
             client.sub_get("loop").ack_floor == 5)
    assert [(d.seq, d.attempt) for d in seen if d.seq in (2, 4)] == [(2, 1), (4, 1), (2, 2), (4, 2)]
    assert sub.counters.retried == 2 and sub.counters.parked == 1 and sub.counters.done == 4
    dead = client.dlq_list("loop")
    assert [(d.seq, d.error) for d in dead.entries] == [(3, "cannot ever")]
    assert all(isinstance(d.event, tally.Event) and d.event.seq == d.seq for d in seen)
    assert seen[0].event.type == "account.opened" and seen[0].event.data["account"]["id"] == 1


def test_the_inbox_rolls_back_a_failed_handler(tmp_path: Path) -> None:
    inbox = tally.SqliteInbox(str(tmp_path / "in.db"))
    inbox.connection.execute("CREATE TABLE t (x INTEGER)")
    event = tally.Event(seq=1, event_id="01a2-x", type="account.opened")

    def failing(e: tally.Event, db: sqlite3.Connection) -> None:
        db.execute("INSERT INTO t VALUES (1)")
        raise RuntimeError("boom")

    try:
        inbox.apply(event, failing)
    except RuntimeError:
        pass
    assert inbox.connection.execute("SELECT count(*) FROM t").fetchone()[0] == 0
    assert inbox.processed("01a2-x") is None
    assert inbox.apply(event, lambda e, db: db.execute("INSERT INTO t VALUES (2)")) is True
    assert inbox.apply(event, lambda e, db: db.execute("INSERT INTO t VALUES (3)")) is False
    assert [r[0] for r in inbox.connection.execute("SELECT x FROM t")] == [2]
    assert inbox.processed("01a2-x") == 1
    assert (inbox.applied, inbox.repeated) == (1, 1)


def test_partitions(client: tally.Client) -> None:
    make_events(client, 2)  # 3 events, each of its own account
    made = client.sub_create("orders", partitions=2)
    assert made.created and made.subscriber.partitions == 2
    assert [h["holder"] for h in made.subscriber.partition_holders] == [None, None]
    try:
        client.sub_fetch("orders")  # a partitioned subscriber needs an instance
    except tally.RefusedRequest as e:
        assert e.code == "missing_field"
    else:
        raise AssertionError("a fetch without an instance answered")
    fetched = client.sub_fetch("orders", instance="w1")
    assert [d.seq for d in fetched.events] == [1, 2, 3]  # alone, w1 holds both
    holders = client.sub_get("orders").partition_holders
    assert [h["holder"] for h in holders] == ["w1", "w1"]
    assert client.sub_get("orders").partitions == 2
    assert client.sub_create("mailer").subscriber.partitions == 1


def test_every_subscriber_op(client: tally.Client) -> None:
    make_events(client, 2)  # 3 events
    made = client.sub_create("mailer")
    assert made.created and made.subscriber.pending == 3
    assert not client.sub_create("mailer").created  # the same again: fine
    assert [s.name for s in client.sub_list()] == ["mailer"]
    assert [s.name for s in client.stats().subscribers] == ["mailer"]
    fetched = client.sub_fetch("mailer", max=2)
    assert [d.seq for d in fetched.events] == [1, 2] and fetched.head == 3
    assert client.sub_ack("mailer", seq=1) == tally.AckResult(ack_floor=1, acked=1)
    nak = client.sub_nak("mailer", 2, delay_ms=60000, error="smtp down")
    assert nak.attempt == 1 and nak.deliver_after_ms > 0
    assert client.sub_park("mailer", 2, reason="bad address") == 2
    dead = client.dlq_list("mailer")
    assert [(d.seq, d.error, d.type) for d in dead.entries] == [(2, "bad address",
                                                               "account.opened")]
    assert dead.next is None
    assert client.dlq_replay("mailer", 2) == 1
    again = client.sub_fetch("mailer", max=1)
    assert [(d.seq, d.replay) for d in again.events] == [(2, True)]
    client.sub_park("mailer", 2)
    assert client.dlq_discard("mailer", 2)
    assert client.sub_get("mailer").dead_letters == 0
    assert client.sub_delete("mailer")
    try:
        client.sub_get("mailer")
    except tally.RefusedRequest as e:
        assert e.code == "subscriber_not_found" and e.status == 404
    else:
        raise AssertionError("sub_get of a deleted subscriber answered")
