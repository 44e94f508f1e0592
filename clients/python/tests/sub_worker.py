"""A durable subscriber process for tests/test_subscriber.py: runs the
subscriber loop with the SQLite inbox, each event's effect a row of its
own table, and can be made to stop where a crash hurts most:

  sub_worker.py URL NAME INSTANCE DB [--block-in-handler SEQ] [--block-after-commit SEQ]

--block-in-handler SEQ: in SEQ's handler, after writing its effect, before
  the inbox's commit, print "blocked SEQ" and wait (to be SIGKILLed);
--block-after-commit SEQ: once SEQ's transaction committed, before the
  batch's ack, print "committed SEQ" and wait.
Otherwise it runs until a fetch brings nothing and prints one JSON line of
its counts: applied, repeated (by the inbox), deliveries.
"""
from __future__ import annotations

import argparse
import json
import sqlite3
import sys
import threading
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import tally  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("url")
    ap.add_argument("name")
    ap.add_argument("instance")
    ap.add_argument("db")
    ap.add_argument("--block-in-handler", type=int, default=0)
    ap.add_argument("--block-after-commit", type=int, default=0)
    args = ap.parse_args()

    client = tally.Client(args.url)
    inbox = tally.SqliteInbox(args.db)
    inbox.connection.execute("CREATE TABLE IF NOT EXISTS effects (event_id TEXT, seq INTEGER)")
    forever = threading.Event()

    def effect(event: tally.Event, db: sqlite3.Connection) -> None:
        db.execute("INSERT INTO effects VALUES (?, ?)", (event.event_id, event.seq))
        if event.seq == args.block_in_handler:
            print(f"blocked {event.seq}", flush=True)
            forever.wait()

    def handle(delivery: tally.Delivery) -> None:
        inbox.apply(delivery.event, effect)
        if delivery.seq == args.block_after_commit:
            print(f"committed {delivery.seq}", flush=True)
            forever.wait()

    sub = tally.Subscriber(client, args.name, instance=args.instance, fetch_max=3, wait_ms=0)
    counters = sub.run(handle, until_idle=True)
    print(json.dumps({"applied": inbox.applied, "repeated": inbox.repeated,
                      "deliveries": counters.deliveries}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
