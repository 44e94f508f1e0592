"""The shared scenario of issue 32 (the part before events), run by the
Python client against a real tallyd: accounts, a transfer and its retry,
a key reused, a validation refusal corrected under the same key, a hold
posted in part and another voided, an entitlement granted, extended and
checked; and the reads that show each step."""
from __future__ import annotations

import hashlib

import pytest

import tally
from support import Tallyd


def test_accounts_and_a_transfer_with_its_retry(client: tally.Client) -> None:
    a = client.account_open(1, ledger=1, code=10)
    assert a.ok and not a.replayed and a.events == 1 and a.seq == 1
    # a generated key is a UUIDv7 in text, usable again by the caller
    assert len(a.key) == 36 and a.key[14] == "7"
    client.account_open(2, ledger=1, code=10, flags=1, key="open-2")

    pay = client.transfer(1, 2, 500, ledger=1, code=1)
    assert pay.ok and not pay.replayed and pay.seq == 3
    # the same call again with the same key: the stored outcome, not a second transfer
    again = client.transfer(1, 2, 500, ledger=1, code=1, key=pay.key)
    assert again.replayed and again.seq == pay.seq and again.transfer_id == pay.transfer_id
    assert client.account_get(2).credits_posted == 500
    assert client.account_get(1).debits_posted == 500

    # the transfer got the id of its consumer and key, which the client computed
    t = client.transfer_get(pay.transfer_id)
    assert t is not None and t.amount == 500 and t.state == "posted"
    assert t.id == tally.transfer_id_for_key("shop", pay.key)

    # the key with another body: the conflict exception, nothing changes
    with pytest.raises(tally.IdempotencyKeyReused) as reused:
        client.transfer(1, 2, 501, ledger=1, code=1, key=pay.key)
    assert reused.value.code == "idempotency_key_reused" and reused.value.status == 409
    assert isinstance(reused.value, tally.RefusedRequest)
    assert reused.value.key == pay.key
    assert client.account_get(2).credits_posted == 500

    # a business rejection is stored: the same key replays it
    with pytest.raises(tally.BusinessRejection) as rejected:
        client.transfer(2, 1, 900, ledger=1, code=1, key="refund-1")
    assert rejected.value.code == "exceeds_credits" and not rejected.value.replayed
    with pytest.raises(tally.BusinessRejection) as replayed:
        client.transfer(2, 1, 900, ledger=1, code=1, key="refund-1")
    assert replayed.value.code == "exceeds_credits" and replayed.value.replayed


def test_validation_refusal_then_the_corrected_call_with_the_same_key(
        client: tally.Client) -> None:
    client.account_open(1, ledger=1, code=10)
    client.account_open(2, ledger=1, code=10)
    key = tally.new_key()
    with pytest.raises(tally.InvalidCommand) as invalid:
        client.transfer(1, 2, 0, ledger=1, code=1, key=key)
    assert invalid.value.code == "amount_must_not_be_zero" and invalid.value.status == 422
    assert invalid.value.key == key
    # not stored: the corrected command under the same key runs
    fixed = client.transfer(1, 2, 7, ledger=1, code=1, key=key)
    assert fixed.ok and not fixed.replayed
    assert client.account_get(2).credits_posted == 7
    # a refused request (class R) is not stored either
    with pytest.raises(tally.RefusedRequest) as refused:
        client.account_open(3, ledger=1, code=70000, key="open-3")
    assert refused.value.code == "value_out_of_range" and refused.value.status == 400
    assert client.account_open(3, ledger=1, code=7, key="open-3").ok


def test_hold_partial_post_and_void(client: tally.Client) -> None:
    client.account_open(1, ledger=1, code=10)
    client.account_open(2, ledger=1, code=10)
    hold = client.hold(1, 2, 300, ledger=1, code=1, timeout_s=3600)
    acct = client.account_get(1)
    assert acct.debits_pending == 300 and acct.debits_posted == 0
    posted = client.post(hold.transfer_id, 100)
    assert posted.ok
    t = client.transfer_get(hold.transfer_id)
    assert t.state == "pending_posted" and t.posted_amount == 100
    acct = client.account_get(1)
    assert acct.debits_pending == 0 and acct.debits_posted == 100
    # a hold resolves once: voiding the posted one is a business rejection
    with pytest.raises(tally.BusinessRejection) as twice:
        client.void(hold.transfer_id)
    assert twice.value.code == "pending_transfer_already_posted"

    other = client.hold(1, 2, 50, ledger=1, code=1, id=tally.new_id())
    assert client.account_get(2).credits_pending == 50
    assert client.void(other.transfer_id).ok
    assert client.transfer_get(other.transfer_id).state == "pending_voided"
    assert client.account_get(2).credits_pending == 0
    history = client.account_history(1, reverse=True, limit=2)
    assert [e.type for e in history.entries] == ["transfer.voided", "transfer.created"]
    assert history.next == history.entries[-1].seq


def test_grant_extend_and_check_an_entitlement(client: tally.Client) -> None:
    day = 86_400_000
    g = client.grant("user-7", "pro", duration_ms=day, source_order=1)
    assert g.ok
    first = client.entitlement_get("user-7", "pro")
    assert first is not None and first.active and first.version == 1
    assert client.has_entitlement("user-7", "pro")
    assert client.extend("user-7", "pro", duration_ms=day, source_order=2).ok
    extended = client.entitlement_get("user-7", "pro")
    assert extended.valid_until_ms == first.valid_until_ms + day and extended.version == 2
    # an older command is stale: stored, nothing changes
    with pytest.raises(tally.BusinessRejection) as stale:
        client.revoke("user-7", "pro", source_order=1)
    assert stale.value.code == "stale"
    assert [e.feature for e in client.entitlement_list("user-7")] == ["pro"]
    assert not client.has_entitlement("user-7", "basic")
    assert client.entitlement_get("nobody", "pro") is None
    assert client.revoke("user-7", "pro", source_order=3).ok
    assert not client.has_entitlement("user-7", "pro")
    # a subject with a "/" is no GET path segment: read with POST /v1/<op>
    client.grant("org/7", "pro")
    assert client.entitlement_get("org/7", "pro").valid_until_ms is None  # for life
    assert [e.subject for e in client.entitlement_list("org/7")] == ["org/7"]


def test_reads_chain_batch_and_stats(client: tally.Client) -> None:
    assert client.account_get(9) is None
    assert client.transfer_get(tally.new_id()) is None
    r = client.chain([tally.member("account_open", id=1, ledger=1, code=10),
                      tally.member("account_open", id=2, ledger=1, code=10),
                      tally.member("transfer", id=tally.new_id(), debit_account_id=1,
                                   credit_account_id=2, amount=25, ledger=1, code=1)])
    assert r.ok and r.events == 3 and r.codes == ["ok", "ok", "ok"] and r.failed_index is None
    with pytest.raises(tally.BusinessRejection) as failed:
        client.chain([tally.member("account_open", id=3, ledger=1, code=10),
                      tally.member("transfer", id=tally.new_id(), debit_account_id=3,
                                   credit_account_id=9, amount=1, ledger=1, code=1)])
    assert failed.value.code == "credit_account_not_found"
    assert failed.value.reply["failed_index"] == 1
    assert client.account_get(3) is None  # all or nothing

    results = client.batch([tally.member("account_open", id=4, ledger=1, code=10),
                            tally.member("account_open", id=5, ledger=1, code=10, key="open-5"),
                            tally.member("account_open", id=1, ledger=1, code=10)],
                           key="batch-1")
    assert [m.code for m in results] == ["ok", "ok", "exists"]
    assert isinstance(results[2].error(), tally.BusinessRejection) and results[0].error() is None
    again = client.batch([tally.member("account_open", id=4, ledger=1, code=10),
                          tally.member("account_open", id=5, ledger=1, code=10, key="open-5"),
                          tally.member("account_open", id=1, ledger=1, code=10)], key="batch-1")
    assert [m.replayed for m in again] == [True, True, True]

    page = client.account_list(limit=2)
    assert [a.id for a in page.entries] == [1, 2] and page.next == 2
    assert [a.id for a in client.account_list(after_id=page.next).entries] == [4, 5]
    stats = client.stats()
    assert stats.head_seq == 5 and stats.accounts == 4 and stats.transfers == 1
    # an integer beyond 2^53 comes back exact (the reply gives it as a string)
    big = 2 ** 64 - 1
    client.account_open(big, ledger=1, code=10)
    assert client.account_get(big).id == big


def test_the_token_goes_in_the_authorization_header(monkeypatch: pytest.MonkeyPatch) -> None:
    token = "py-token"
    server = Tallyd()
    auth = server.dir / "auth"
    auth.write_text(f"all {hashlib.sha256(token.encode()).hexdigest()} write:*,read\n")
    auth.chmod(0o600)
    (server.dir / "backups").mkdir()
    server.extra_args = ["--auth", str(auth), "--backup-dir", str(server.dir / "backups")]
    try:
        server.start()
        with pytest.raises(tally.RefusedRequest) as anonymous:
            tally.Client(server.url, token="").stats()
        assert anonymous.value.code == "unauthenticated" and anonymous.value.status == 401
        c = tally.Client(server.url, token=token)
        assert c.account_open(1, ledger=1, code=10).ok and c.stats().accounts == 1
        # from the environment: $TALLY_TOKEN_FILE first, else $TALLY_TOKEN
        (server.dir / "token").write_text(token + "\n")
        monkeypatch.setenv("TALLY_TOKEN", "not-this-one")
        monkeypatch.setenv("TALLY_TOKEN_FILE", str(server.dir / "token"))
        assert tally.Client(server.url).stats().accounts == 1
        monkeypatch.delenv("TALLY_TOKEN_FILE")
        monkeypatch.setenv("TALLY_TOKEN", token)
        assert tally.Client(server.url).stats().accounts == 1
    finally:
        server.cleanup()
