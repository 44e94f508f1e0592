"""The ledger's later ops, by the Python client against a real tallyd: user
data on accounts and transfers, the queries with their paging, an
account's transfers, reversals, balancing and closing transfers,
imported history and balances at a point in time; a
subscriber's progress; and the cluster route of a single-node server."""
from __future__ import annotations

import pytest

import tally

INVOICE = "0000000000000000000000000000cafe"
ZEROS = "0" * 32


def test_user_data_is_kept_and_found_by_the_queries(client: tally.Client) -> None:
    client.account_open(1, ledger=1, code=10)
    client.account_open(2, ledger=1, code=10)
    client.account_open(6, ledger=1, code=20, user_data_128=INVOICE, user_data_64=42,
                        user_data_32=3)
    client.account_open(7, ledger=1, code=20, user_data_64=42)
    a = client.account_get(6)
    assert a is not None
    assert (a.user_data_128, a.user_data_64, a.user_data_32) == (INVOICE, 42, 3)
    assert a.created_ms > 0 and not a.closed

    page = client.account_query(user_data_64=42)
    assert [x.id for x in page.entries] == [6, 7] and page.next is None
    assert page.entries[0].user_data_128 == INVOICE
    # every filter given must match; an int or bytes id works as the hex
    assert [x.id for x in client.account_query(user_data_128=0xcafe).entries] == [6]
    assert [x.id for x in client.account_query(user_data_64=42, user_data_32=3).entries] == [6]
    assert [x.id for x in client.account_query(code=20, reversed=True).entries] == [7, 6]
    # paging: a full page has a next, its cursor gives the rest
    first = client.account_query(ledger=1, limit=3)
    assert [x.id for x in first.entries] == [1, 2, 6] and first.next is not None
    rest = client.account_query(ledger=1, limit=3, cursor=first.next)
    assert [x.id for x in rest.entries] == [7] and rest.next is None
    assert client.account_query(timestamp_min_ms=1, timestamp_max_ms=2).entries == []

    pay = client.transfer(1, 2, 500, ledger=1, code=1, user_data_128=INVOICE, user_data_64=9)
    client.transfer(2, 1, 100, ledger=1, code=2)
    t = client.transfer_get(pay.transfer_id)
    assert t is not None and (t.user_data_128, t.user_data_64, t.user_data_32) == (INVOICE, 9, 0)
    found = client.transfer_query(user_data_128=INVOICE)
    assert [x.id for x in found.entries] == [pay.transfer_id]
    assert [x.code for x in client.transfer_query(code=2).entries] == [2]

    # an account's transfers: both sides by default, or one of them
    both = client.account_transfers(1)
    assert [x.amount for x in both.entries] == [500, 100]
    debits = client.account_transfers(1, credits=False)
    assert [x.amount for x in debits.entries] == [500]
    assert [x.amount for x in client.account_transfers(1, reversed=True).entries] == [100, 500]
    with pytest.raises(tally.RefusedRequest) as neither:
        client.account_transfers(1, debits=False, credits=False)
    assert neither.value.code == "value_out_of_range"


def test_a_reversal_moves_back_what_was_posted_and_no_more(client: tally.Client) -> None:
    client.account_open(1, ledger=1, code=10)
    client.account_open(2, ledger=1, code=10)
    pay = client.transfer(1, 2, 500, ledger=1, code=1)
    back = client.transfer_reverse(pay.transfer_id, 200, user_data_32=5)
    assert back.ok and back.events == 1 and back.transfer_id is not None
    # the same call with the same key: replayed, the same reversal
    again = client.transfer_reverse(pay.transfer_id, 200, user_data_32=5, key=back.key)
    assert again.replayed and again.transfer_id == back.transfer_id
    r = client.transfer_get(back.transfer_id)
    assert r is not None and r.is_reversal and r.reverses == pay.transfer_id
    assert (r.debit_account_id, r.credit_account_id, r.amount, r.code) == (2, 1, 200, 1)
    assert r.user_data_32 == 5
    original = client.transfer_get(pay.transfer_id)
    assert original is not None and original.reversed_amount == 200 and not original.is_reversal
    assert original.reverses == ZEROS
    a2 = client.account_get(2)
    assert a2 is not None and a2.balance == 300

    with pytest.raises(tally.BusinessRejection) as more:
        client.transfer_reverse(pay.transfer_id, 301)
    assert more.value.code == "exceeds_unreversed_amount"
    rest = client.transfer_reverse(pay.transfer_id)  # all that is left
    assert client.transfer_get(rest.transfer_id).amount == 300  # type: ignore[union-attr]
    with pytest.raises(tally.BusinessRejection) as missing:
        client.transfer_reverse(tally.new_id())
    assert missing.value.code == "reversed_transfer_not_found"


def test_balancing_and_closing_transfers(client: tally.Client) -> None:
    client.account_open(1, ledger=1, code=10)
    client.account_open(2, ledger=1, code=10, flags=1)  # debits_must_not_exceed_credits
    client.transfer(1, 2, 300, ledger=1, code=1)
    # at most 10000 from account 2: it moves the 300 it has
    bal = client.transfer(2, 1, 10000, ledger=1, code=1, flags=tally.BALANCING_DEBIT)
    moved = client.transfer_get(bal.transfer_id)
    assert moved is not None and moved.amount == 300
    # a closing hold closes account 1 until it is voided
    close = client.transfer(1, 2, 1, ledger=1, code=1,
                            flags=tally.PENDING | tally.CLOSING_DEBIT)
    a1 = client.account_get(1)
    assert a1 is not None and a1.closed
    with pytest.raises(tally.BusinessRejection) as closed:
        client.transfer(1, 2, 1, ledger=1, code=1)
    assert closed.value.code == "debit_account_already_closed"
    client.void(close.transfer_id)
    a1 = client.account_get(1)
    assert a1 is not None and not a1.closed
    with pytest.raises(tally.InvalidCommand) as unpending:
        client.transfer(1, 2, 1, ledger=1, code=1, flags=tally.CLOSING_DEBIT)
    assert unpending.value.code == "closing_transfer_must_be_pending"


def test_imported_history_and_balances_at_a_point_in_time(client: tally.Client) -> None:
    day = 86_400_000
    t0 = 1_577_836_800_000  # 2020-01-01
    client.account_open(1, ledger=1, code=10, flags=tally.ACCOUNT_IMPORTED, timestamp_ms=t0)
    client.account_open(2, ledger=1, code=10, flags=tally.ACCOUNT_IMPORTED, timestamp_ms=t0 + 1)
    for i in range(1, 4):  # 10, 20 and 30 on days 1, 2 and 3
        client.transfer(1, 2, 10 * i, ledger=1, code=1, flags=tally.IMPORTED,
                        timestamp_ms=t0 + i * day)
    page = client.account_balances(2, limit=2)
    assert [b.credits_posted for b in page.balances] == [10, 30]
    assert [b.timestamp_ms for b in page.balances] == [t0 + day, t0 + 2 * day]
    rest = client.account_balances(2, limit=2, after_seq=page.next)
    assert [b.credits_posted for b in rest.balances] == [60] and rest.next is None
    at = client.balance_at(2, timestamp_ms=t0 + 2 * day + 5)
    assert at.credits_posted == 30
    assert client.balance_at(2, timestamp_ms=t0).seq == 0
    ranged = client.account_balances(1, timestamp_min_ms=t0 + 2 * day, reversed=True)
    assert [b.debits_posted for b in ranged.balances] == [60, 30]
    # the times only grow: an older one, or a live write, then an old one
    with pytest.raises(tally.BusinessRejection) as older:
        client.transfer(1, 2, 1, ledger=1, code=1, flags=tally.IMPORTED, timestamp_ms=t0 + day)
    assert older.value.code == "imported_event_timestamp_must_not_regress"
    with pytest.raises(tally.InvalidCommand) as untimed:
        client.transfer(1, 2, 1, ledger=1, code=1, flags=tally.IMPORTED)
    assert untimed.value.code == "imported_event_timestamp_out_of_range"


def test_progress_extends_the_lease_of_what_is_in_flight(client: tally.Client) -> None:
    client.account_open(1, ledger=1, code=10)
    client.account_open(2, ledger=1, code=10)
    client.sub_create("mailer", start="beginning", ack_wait_ms=60000)
    got = client.sub_fetch("mailer", max=2, instance="w1")
    seqs = [d.seq for d in got.events]
    assert seqs == [1, 2]
    p = client.sub_progress("mailer", seqs, instance="w1")
    assert p.extended == 2 and p.deliver_after_ms > 0
    # another instance's events, and acked ones, are skipped
    assert client.sub_progress("mailer", seqs, instance="w2").extended == 0
    client.sub_ack("mailer", seq=1)
    assert client.sub_progress("mailer", seqs).extended == 1
    info = client.sub_get("mailer")
    assert info.in_flight == 1 and info.redelivered == 0


def test_update_keeps_the_cursor_and_names_the_owner(client: tally.Client) -> None:
    client.account_open(1, ledger=1, code=10)
    client.sub_create("crm", start="beginning", filter_kinds="account")
    assert [d.seq for d in client.sub_fetch("crm", max=5).events] == [1]
    client.sub_ack("crm", seq=1)
    info = client.sub_update("crm", ack_wait_ms=60000, contact="crm-team", alert_route="pager:crm",
                             filter_kinds="")
    assert info.ack_floor == 1 and info.ack_wait_ms == 60000
    assert info.contact == "crm-team" and info.alert_route == "pager:crm"
    assert info.filter_kinds == []
    client.account_open(2, ledger=1, code=10)
    assert [d.seq for d in client.sub_fetch("crm", max=5).events] == [2]  # not replayed


def test_the_cluster_route_of_a_single_node_server(client: tally.Client) -> None:
    with pytest.raises(tally.RefusedRequest) as single:
        client.cluster()
    assert single.value.code == "not_in_cluster_mode" and single.value.status == 400
    # a write's result has no cluster position outside cluster mode
    assert client.account_open(1, ledger=1, code=10).cluster_seq is None
