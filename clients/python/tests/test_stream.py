"""The live stream against a real tallyd (GET /v1/events, Server-Sent
Events): each new event once, in order, across a reconnect with
Last-Event-ID — after the server went away and came back, and after the
connection broke; and only new events without a start."""
from __future__ import annotations

import threading

import tally
from support import Tallyd
from test_events import take


def test_the_stream_yields_each_event_once_in_order_across_a_restart(
        tallyd: Tallyd) -> None:
    c = tally.Client(tallyd.url, consumer="shop")
    for i in (1, 2, 3):
        c.account_open(i, ledger=1, code=10)
    with c.events(from_seq=1) as stream:
        assert [e.seq for e in take(stream, 3)] == [1, 2, 3]
        # the server goes away and comes back; events are committed before
        # the stream reconnects: it resumes after seq 3 (Last-Event-ID)
        tallyd.stop()
        tallyd.start()
        for i in (4, 5, 6):
            c.account_open(i, ledger=1, code=10)
        events = take(stream, 3)
        assert [e.seq for e in events] == [4, 5, 6]
        assert [e.data["account"]["id"] for e in events] == [4, 5, 6]
        assert stream.connects == 2 and stream.last_seq == 6
        # live: a new event comes while the stream waits
        later = threading.Thread(target=lambda: c.account_open(7, ledger=1, code=10))
        later.start()
        assert [e.seq for e in take(stream, 1)] == [7]
        later.join()


def test_the_stream_resumes_after_a_broken_connection(client: tally.Client) -> None:
    for i in (1, 2, 3):
        client.account_open(i, ledger=1, code=10)
    stream = client.events(last_event_id=1)  # after seq 1
    try:
        assert [e.seq for e in take(stream, 1)] == [2]
        stream.drop_connection()
        client.account_open(4, ledger=1, code=10)
        assert [e.seq for e in take(stream, 2)] == [3, 4]
        assert stream.connects == 2
    finally:
        stream.close()


def test_without_a_start_the_stream_has_only_new_events(client: tally.Client) -> None:
    client.account_open(1, ledger=1, code=10)
    with client.events() as stream:
        client.account_open(2, ledger=1, code=10)
        first = take(stream, 1)
        assert [e.seq for e in first] == [2]


def test_streams_the_server_ends_are_resumed_without_a_gap_or_a_repeat() -> None:
    server = Tallyd(["--http-stream-max-s", "1"]).start()  # each stream lives 1 s
    try:
        c = tally.Client(server.url, consumer="shop")
        c.account_open(1, ledger=1, code=10)
        seqs = []
        with c.events(from_seq=1) as stream:
            # an event at a time, each awaited, until the server ended a
            # stream and the iterator came back twice
            while stream.connects < 3:
                seqs += [e.seq for e in take(stream, 1)]
                assert len(seqs) < 100_000, "the server never ended a stream"
                c.account_open(seqs[-1] + 1, ledger=1, code=10)
        assert seqs == list(range(1, len(seqs) + 1))
    finally:
        server.cleanup()
