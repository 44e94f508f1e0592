"""The client: every op of tallyd's JSON API as a method with a typed result.

Method names are the op names of docs/PROTOCOL.md (``account_open``,
``transfer``, ..., ``dlq_discard``); ``tests/test_surface.py`` checks that every
op of docs/openapi.json has one. Writes return a :class:`WriteResult` and
raise the exception of their code's class otherwise (tally.errors); reads
return their object (``None`` for an entity that does not exist).
"""
from __future__ import annotations

import os
import ssl
from typing import TYPE_CHECKING, Any, Dict, Iterable, List, Mapping, Optional, Sequence

from ._http import RetryPolicy, Transport, quote_segment, query_string
from .errors import TallyError, error_for
from .keys import new_key, parse_id, transfer_id_for_key
from .types import (AccountPage, AccountQueryPage, AckResult, Account, Balance, BalancePage,
                    ClusterInfo,
                    DeadLetterPage, Entitlement, FetchResult, HistoryPage, LogPage, NakResult,
                    ProgressResult, Stats, SubCreateResult, SubscriberInfo, Transfer,
                    TransferQueryPage, WriteResult)

if TYPE_CHECKING:
    from .events import EventStream

DEFAULT_URL = "http://127.0.0.1:7452"
DEFAULT_CONSUMER = "http"
PENDING = 1
"""``transfer`` flags bit 0: a hold (post or void it later)."""
BALANCING_DEBIT = 2
"""``transfer`` flags bit 1: move at most what the debit account has."""
BALANCING_CREDIT = 4
"""``transfer`` flags bit 2: move at most what the credit account has."""
CLOSING_DEBIT = 8
"""``transfer`` flags bit 3 (with PENDING): close the debit account while held."""
CLOSING_CREDIT = 16
"""``transfer`` flags bit 4 (with PENDING): close the credit account while held."""
IMPORTED = 32
"""``transfer`` flags bit 5: imported history, created at ``timestamp_ms``."""
ACCOUNT_IMPORTED = 8
"""``account_open`` flags bit 3: imported history, opened at ``timestamp_ms``."""

IdLike = Any  # 32 hex digits, UUID text, 16 bytes or an int


def id_hex(value: IdLike) -> str:
    """A 16-byte id as the 32 hex digits the wire takes: from 32 hex digits
    (dashes allowed), 16 bytes, or a non-negative int below 2^128."""
    if isinstance(value, (bytes, bytearray)):
        if len(value) != 16:
            raise ValueError("an id is 16 bytes")
        return bytes(value).hex()
    if isinstance(value, int) and not isinstance(value, bool):
        return value.to_bytes(16, "big").hex()
    if isinstance(value, str):
        raw = parse_id(value)
        if raw is not None:
            return raw.hex()
    raise ValueError(f"not a 16-byte id (32 hex digits): {value!r}")


_ID_FIELDS = ("pending_id", "grant_transfer_id", "reverses", "user_data_128", "cursor")


def member(op: str, **fields: Any) -> Dict[str, Any]:
    """A ``chain`` or ``batch`` member: the op and its fields (None left
    out; the 16-byte ids ``id``, ``pending_id``, ``grant_transfer_id``,
    ``reverses`` and ``user_data_128`` in any form :func:`id_hex` takes). A batch member may carry its own
    ``key``; a transfer member needs its ``id`` (:func:`tally.new_id`)."""
    m: Dict[str, Any] = {"op": op}
    for name, value in fields.items():
        if value is None:
            continue
        if name in _ID_FIELDS or (name == "id" and op in ("transfer", "transfer_reverse")):
            value = id_hex(value)
        m[name] = value
    return m


def _token_from_environment() -> Optional[str]:
    path = os.environ.get("TALLY_TOKEN_FILE")
    if path:
        with open(path, encoding="utf-8") as f:
            return f.readline().strip()
    return os.environ.get("TALLY_TOKEN")


def _fields(**fields: Any) -> Dict[str, Any]:
    return {k: v for k, v in fields.items() if v is not None}


def _ids(fields: Dict[str, Any]) -> Dict[str, Any]:
    """``fields`` with its 16-byte ids (user_data_128, cursor, ...) as hex."""
    return {k: id_hex(v) if k in _ID_FIELDS else v for k, v in fields.items()}


def _query_filters(ledger: Optional[int], code: Optional[int], user_data_128: Optional[IdLike],
                   user_data_64: Optional[int], user_data_32: Optional[int],
                   timestamp_min_ms: Optional[int], timestamp_max_ms: Optional[int],
                   limit: Optional[int], reversed: Optional[bool],
                   cursor: Optional[IdLike]) -> Dict[str, Any]:
    """The filters and paging of the queries (docs/PROTOCOL.md, "Queries")."""
    return _ids(_fields(ledger=ledger, code=code, user_data_128=user_data_128,
                        user_data_64=user_data_64, user_data_32=user_data_32,
                        timestamp_min_ms=timestamp_min_ms, timestamp_max_ms=timestamp_max_ms,
                        limit=limit, reversed=reversed, cursor=cursor))


class Client:
    """A client of one tallyd's HTTP face (``tallyd --http``).

    Args:
        url: the HTTP face, e.g. ``http://127.0.0.1:7452`` (default
            ``$TALLY_HTTP_URL``, else that).
        token: the bearer token when tallyd runs with ``--auth`` (default:
            the first line of the file ``$TALLY_TOKEN_FILE``, else
            ``$TALLY_TOKEN``, as for the CLI and tally-relay).
        consumer: the namespace of this client's keys (``Tally-Consumer``).
        retry: the retry policy of every call (:class:`RetryPolicy`).
        ssl_context: for an ``https://`` URL, e.g. with tallyd's CA.

    Any number of threads may share one client.
    """

    def __init__(self, url: Optional[str] = None, *, token: Optional[str] = None,
                 consumer: str = DEFAULT_CONSUMER, retry: Optional[RetryPolicy] = None,
                 ssl_context: Optional[ssl.SSLContext] = None):
        url = url or os.environ.get("TALLY_HTTP_URL") or DEFAULT_URL
        if token is None:
            token = _token_from_environment()
        self.transport = Transport(url, token, ssl_context)
        self.consumer = consumer
        self.retry = retry or RetryPolicy()

    def close(self) -> None:
        """Close the calling thread's connection to the server."""
        self.transport.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    @property
    def url(self) -> str:
        """The server's HTTP URL."""
        return self.transport.base_url

    # ---- the exchange ----

    def request(self, method: str, path: str, body: Optional[Mapping[str, Any]] = None, *,
                key: Optional[str] = None, wait_ms: int = 0,
                retry: Optional[RetryPolicy] = None, on_retry: Any = None) -> Dict[str, Any]:
        """One call of the API, retried by the policy: the reply's JSON
        object when its code is ``ok``; else raises the code's exception.
        ``key`` (writes) is sent as ``Idempotency-Key`` with the consumer."""
        headers = {}
        if key is not None:
            headers = {"Idempotency-Key": key, "Tally-Consumer": self.consumer}
        reply = self.transport.call(method, path, body, headers=headers, key=key,
                                    policy=retry or self.retry, wait_s=wait_ms / 1000.0,
                                    on_retry=on_retry)
        code = str(reply.body.get("code", ""))
        if code != "ok":
            raise error_for(code, str(reply.body.get("message", "")), status=reply.status,
                            key=key, reply=reply.body)
        return reply.body

    def _write(self, op: str, body: Dict[str, Any], key: Optional[str],
               correlation: Optional[str], **given: Any) -> WriteResult:
        key = key if key is not None else new_key()
        if correlation is not None:
            body["correlation"] = correlation
        reply = self.request("POST", f"/v1/{op}", body, key=key)
        return WriteResult.from_json(reply, **given)

    def _read(self, path: str, args: Mapping[str, Any], op: str, body: Mapping[str, Any],
              min_seq: Optional[int], wait_ms: int = 0) -> Dict[str, Any]:
        """A read by its GET route; by ``POST /v1/<op>`` when a path
        parameter holds a ``/`` (a GET path parameter is one segment)."""
        if min_seq is not None:
            args = dict(args, min_seq=min_seq)
        if any("/" in str(v) for v in body.values() if isinstance(v, str)):
            return self.request("POST", f"/v1/{op}", _fields(**body, **args), wait_ms=wait_ms)
        return self.request("GET", path + query_string(args), wait_ms=wait_ms)

    def _get_or_none(self, *call: Any) -> Optional[Dict[str, Any]]:
        try:
            return self._read(*call)
        except TallyError as e:
            if e.code == "not_found":
                return None
            raise

    # ---- writes ----

    def account_open(self, id: int, ledger: int, code: int, flags: int = 0, *,
                     user_data_128: Optional[IdLike] = None, user_data_64: Optional[int] = None,
                     user_data_32: Optional[int] = None, timestamp_ms: Optional[int] = None,
                     key: Optional[str] = None,
                     correlation: Optional[str] = None) -> WriteResult:
        """Open account ``id`` on ``ledger`` with account ``code``; ``flags``
        bit 0 debits_must_not_exceed_credits, bit 1 credits_must_not_exceed_debits.
        ``user_data_*`` are the caller's own values (an invoice, a
        customer), never changed, found again by :meth:`account_query`.
        An existing account with the same fields is ``exists`` (a
        :class:`~tally.errors.BusinessRejection`). Imported history:
        ``flags`` with ACCOUNT_IMPORTED and its original ``timestamp_ms``."""
        body = _ids(_fields(id=id, ledger=ledger, code=code, flags=flags,
                            user_data_128=user_data_128, user_data_64=user_data_64,
                            user_data_32=user_data_32, timestamp_ms=timestamp_ms))
        return self._write("account_open", body, key, correlation)

    def transfer(self, debit_account_id: int, credit_account_id: int, amount: int, ledger: int,
                 code: int, *, id: Optional[IdLike] = None, flags: int = 0,
                 timeout_s: Optional[int] = None, user_data_128: Optional[IdLike] = None,
                 user_data_64: Optional[int] = None, user_data_32: Optional[int] = None,
                 timestamp_ms: Optional[int] = None,
                 key: Optional[str] = None, correlation: Optional[str] = None) -> WriteResult:
        """Move ``amount`` from one account to the other, or hold it
        (``flags=tally.PENDING``, see :meth:`hold`). ``flags`` may also be
        ``tally.BALANCING_DEBIT`` / ``BALANCING_CREDIT`` (move at most what
        the account has) or, with PENDING, ``CLOSING_DEBIT`` /
        ``CLOSING_CREDIT``, and IMPORTED with the original ``timestamp_ms``
        (imported history). ``user_data_*`` are the caller's own values.
        Without ``id`` the server derives it from the consumer and key; the
        result's ``transfer_id`` is the transfer's id either way."""
        key = key if key is not None else new_key()
        body = _ids(_fields(debit_account_id=debit_account_id,
                            credit_account_id=credit_account_id, amount=amount, ledger=ledger,
                            code=code, flags=flags, timeout_s=timeout_s,
                            user_data_128=user_data_128, user_data_64=user_data_64,
                            user_data_32=user_data_32, timestamp_ms=timestamp_ms))
        if id is not None:
            transfer_id = id_hex(id)
            body["id"] = transfer_id
        else:
            transfer_id = transfer_id_for_key(self.consumer, key)
        return self._write("transfer", body, key, correlation, transfer_id=transfer_id)

    def hold(self, debit_account_id: int, credit_account_id: int, amount: int, ledger: int,
             code: int, *, timeout_s: int = 0, id: Optional[IdLike] = None,
             key: Optional[str] = None, correlation: Optional[str] = None) -> WriteResult:
        """A pending transfer (a hold), expiring after ``timeout_s`` (0:
        never); resolve it with :meth:`post` or :meth:`void` by its
        ``transfer_id``."""
        return self.transfer(debit_account_id, credit_account_id, amount, ledger, code, id=id,
                             flags=PENDING, timeout_s=timeout_s, key=key, correlation=correlation)

    def transfer_reverse(self, reverses: IdLike, amount: Optional[int] = None, *,
                         id: Optional[IdLike] = None, code: Optional[int] = None,
                         user_data_128: Optional[IdLike] = None,
                         user_data_64: Optional[int] = None, user_data_32: Optional[int] = None,
                         key: Optional[str] = None,
                         correlation: Optional[str] = None) -> WriteResult:
        """Reverse ``amount`` of posted transfer ``reverses`` (all that is
        not reversed yet when None): a new transfer the other way whose
        ``reverses`` names it; the original's ``reversed_amount`` grows.
        Without ``id`` the reversal's id is the one of the consumer and key
        (:func:`tally.transfer_id_for_key`), so a retry with the same key
        names the same reversal; the result's ``transfer_id`` is it."""
        key = key if key is not None else new_key()
        transfer_id = id_hex(id) if id is not None else transfer_id_for_key(self.consumer, key)
        body = _ids(_fields(id=transfer_id, reverses=reverses, amount=amount, code=code,
                            user_data_128=user_data_128, user_data_64=user_data_64,
                            user_data_32=user_data_32))
        return self._write("transfer_reverse", body, key, correlation, transfer_id=transfer_id)

    def post(self, pending_id: IdLike, amount: Optional[int] = None, *,
             key: Optional[str] = None, correlation: Optional[str] = None) -> WriteResult:
        """Post (capture) a hold: ``amount`` of it, or all of it when None."""
        return self._write("post", _fields(pending_id=id_hex(pending_id), amount=amount), key,
                           correlation)

    def void(self, pending_id: IdLike, *, key: Optional[str] = None,
             correlation: Optional[str] = None) -> WriteResult:
        """Void a hold."""
        return self._write("void", {"pending_id": id_hex(pending_id)}, key, correlation)

    def grant(self, subject: str, feature: str, *, valid_until_ms: Optional[int] = None,
              duration_ms: Optional[int] = None, source_order: Optional[int] = None,
              grant_transfer_id: Optional[IdLike] = None, key: Optional[str] = None,
              correlation: Optional[str] = None) -> WriteResult:
        """Grant ``feature`` to ``subject`` until ``valid_until_ms``, for
        ``duration_ms`` from now, or for life (neither)."""
        body = _fields(subject=subject, feature=feature, valid_until_ms=valid_until_ms,
                       duration_ms=duration_ms, source_order=source_order)
        if grant_transfer_id is not None:
            body["grant_transfer_id"] = id_hex(grant_transfer_id)
        return self._write("grant", body, key, correlation)

    def extend(self, subject: str, feature: str, *, valid_until_ms: Optional[int] = None,
               duration_ms: Optional[int] = None, source_order: Optional[int] = None,
               key: Optional[str] = None, correlation: Optional[str] = None) -> WriteResult:
        """Extend an entitlement to ``valid_until_ms``, or by ``duration_ms``
        from its current end."""
        return self._write("extend", _fields(subject=subject, feature=feature,
                                             valid_until_ms=valid_until_ms,
                                             duration_ms=duration_ms, source_order=source_order),
                           key, correlation)

    def revoke(self, subject: str, feature: str, *, source_order: Optional[int] = None,
               key: Optional[str] = None, correlation: Optional[str] = None) -> WriteResult:
        """Revoke an entitlement."""
        return self._write("revoke", _fields(subject=subject, feature=feature,
                                             source_order=source_order), key, correlation)

    def chain(self, ops: Sequence[Mapping[str, Any]], *, key: Optional[str] = None,
              correlation: Optional[str] = None) -> WriteResult:
        """Apply the members (:func:`member`) all or nothing under one key.
        A failing member raises its code's exception; ``reply["codes"]`` and
        ``reply["failed_index"]`` of the exception say which."""
        return self._write("chain", {"ops": [dict(m) for m in ops]}, key, correlation)

    def batch(self, ops: Sequence[Mapping[str, Any]], *, key: Optional[str] = None
              ) -> List[WriteResult]:
        """Independent writes in one request, each with its own result (not
        raised: see :attr:`WriteResult.ok` and :meth:`WriteResult.error`).
        A member without a ``key`` gets one derived from ``key``."""
        key = key if key is not None else new_key()
        reply = self.request("POST", "/v1/batch", {"ops": [dict(m) for m in ops]}, key=key)
        return [WriteResult.from_json(r) for r in reply.get("results", [])]

    # ---- reads ----

    def account_get(self, id: int, *, min_seq: Optional[int] = None) -> Optional[Account]:
        """Account ``id``, or None when there is none."""
        reply = self._get_or_none(f"/v1/accounts/{quote_segment(id)}", {}, "account_get",
                                  {"id": id}, min_seq)
        return None if reply is None else Account.from_json(reply["account"])

    def account_history(self, id: int, *, after_seq: Optional[int] = None,
                        limit: Optional[int] = None, reverse: Optional[bool] = None,
                        min_seq: Optional[int] = None) -> HistoryPage:
        """A page of the events that moved account ``id``'s balances."""
        reply = self._read(f"/v1/accounts/{quote_segment(id)}/history",
                           _fields(after_seq=after_seq, limit=limit, reverse=reverse),
                           "account_history", {"id": id}, min_seq)
        return HistoryPage.from_json(reply)

    def account_balances(self, account_id: int, *, timestamp_min_ms: Optional[int] = None,
                         timestamp_max_ms: Optional[int] = None, seq_min: Optional[int] = None,
                         seq_max: Optional[int] = None, limit: Optional[int] = None,
                         reversed: Optional[bool] = None, after_seq: Optional[int] = None,
                         min_seq: Optional[int] = None) -> BalancePage:
        """A page of account ``account_id``'s balances after each transfer
        event in a time and seq range (inclusive; None: no bound)."""
        reply = self._read(f"/v1/accounts/{quote_segment(account_id)}/balances",
                           _fields(timestamp_min_ms=timestamp_min_ms,
                                   timestamp_max_ms=timestamp_max_ms, seq_min=seq_min,
                                   seq_max=seq_max, limit=limit, reversed=reversed,
                                   after_seq=after_seq),
                           "account_balances", {"account_id": account_id}, min_seq)
        return BalancePage.from_json(reply)

    def balance_at(self, account_id: int, *, timestamp_ms: Optional[int] = None,
                   seq: Optional[int] = None, min_seq: Optional[int] = None) -> Balance:
        """Account ``account_id``'s balances after every entry at or before
        ``timestamp_ms`` or ``seq`` (give one); seq 0 when none is that early."""
        reply = self._read(f"/v1/accounts/{quote_segment(account_id)}/balance_at",
                           _fields(timestamp_ms=timestamp_ms, seq=seq),
                           "balance_at", {"account_id": account_id}, min_seq)
        return Balance.from_json(reply["balance"])

    def account_list(self, *, after_id: Optional[int] = None, limit: Optional[int] = None,
                     min_seq: Optional[int] = None) -> AccountPage:
        """A page of accounts in id order, after ``after_id``."""
        reply = self._read("/v1/accounts", _fields(after_id=after_id, limit=limit),
                           "account_list", {}, min_seq)
        return AccountPage.from_json(reply)

    def transfer_get(self, id: IdLike, *, min_seq: Optional[int] = None) -> Optional[Transfer]:
        """Transfer ``id``, or None when there is none."""
        hex_id = id_hex(id)
        reply = self._get_or_none(f"/v1/transfers/{hex_id}", {}, "transfer_get",
                                  {"id": hex_id}, min_seq)
        return None if reply is None else Transfer.from_json(reply["transfer"])

    def account_query(self, *, ledger: Optional[int] = None, code: Optional[int] = None,
                      user_data_128: Optional[IdLike] = None, user_data_64: Optional[int] = None,
                      user_data_32: Optional[int] = None, timestamp_min_ms: Optional[int] = None,
                      timestamp_max_ms: Optional[int] = None, limit: Optional[int] = None,
                      reversed: Optional[bool] = None, cursor: Optional[IdLike] = None,
                      min_seq: Optional[int] = None) -> AccountQueryPage:
        """A page of the accounts matching every filter given (None: not
        filtered; ``timestamp_*_ms`` bound the creation time, inclusive), in
        creation order (newest first with ``reversed``). The next page:
        the same call with ``cursor=page.next``."""
        args = _query_filters(ledger, code, user_data_128, user_data_64, user_data_32,
                              timestamp_min_ms, timestamp_max_ms, limit, reversed, cursor)
        reply = self._read("/v1/accounts/query", args, "account_query", {}, min_seq)
        return AccountQueryPage.from_json(reply)

    def transfer_query(self, *, ledger: Optional[int] = None, code: Optional[int] = None,
                       user_data_128: Optional[IdLike] = None, user_data_64: Optional[int] = None,
                       user_data_32: Optional[int] = None, timestamp_min_ms: Optional[int] = None,
                       timestamp_max_ms: Optional[int] = None, limit: Optional[int] = None,
                       reversed: Optional[bool] = None, cursor: Optional[IdLike] = None,
                       min_seq: Optional[int] = None) -> TransferQueryPage:
        """A page of the transfers matching every filter given, as
        :meth:`account_query`."""
        args = _query_filters(ledger, code, user_data_128, user_data_64, user_data_32,
                              timestamp_min_ms, timestamp_max_ms, limit, reversed, cursor)
        reply = self._read("/v1/transfers/query", args, "transfer_query", {}, min_seq)
        return TransferQueryPage.from_json(reply)

    def account_transfers(self, account_id: int, *, debits: Optional[bool] = None,
                          credits: Optional[bool] = None, code: Optional[int] = None,
                          user_data_128: Optional[IdLike] = None,
                          user_data_64: Optional[int] = None, user_data_32: Optional[int] = None,
                          timestamp_min_ms: Optional[int] = None,
                          timestamp_max_ms: Optional[int] = None, limit: Optional[int] = None,
                          reversed: Optional[bool] = None, cursor: Optional[IdLike] = None,
                          min_seq: Optional[int] = None) -> TransferQueryPage:
        """A page of the transfers that debit (``debits``, default True) or
        credit (``credits``, default True) account ``account_id``, with the
        filters and paging of :meth:`account_query`."""
        args = _query_filters(None, code, user_data_128, user_data_64, user_data_32,
                              timestamp_min_ms, timestamp_max_ms, limit, reversed, cursor)
        args = dict(_fields(debits=debits, credits=credits), **args)
        reply = self._read(f"/v1/accounts/{quote_segment(account_id)}/transfers", args,
                           "account_transfers", {"account_id": account_id}, min_seq)
        return TransferQueryPage.from_json(reply)

    def entitlement_get(self, subject: str, feature: str, *, min_seq: Optional[int] = None
                        ) -> Optional[Entitlement]:
        """One entitlement, its state evaluated now; None when there is none."""
        reply = self._get_or_none(f"/v1/entitlements/{quote_segment(subject)}",
                                  {"feature": feature}, "entitlement_get",
                                  {"subject": subject}, min_seq)
        return None if reply is None else Entitlement.from_json(reply["entitlement"])

    def entitlement_list(self, subject: str, *, min_seq: Optional[int] = None
                         ) -> List[Entitlement]:
        """A subject's entitlements (empty for an unknown subject)."""
        reply = self._read(f"/v1/entitlements/{quote_segment(subject)}", {},
                           "entitlement_list", {"subject": subject}, min_seq)
        return [Entitlement.from_json(e) for e in reply.get("entitlements", [])]

    def has_entitlement(self, subject: str, feature: str, *, min_seq: Optional[int] = None
                        ) -> bool:
        """True when ``subject`` has ``feature`` now (an active entitlement)."""
        e = self.entitlement_get(subject, feature, min_seq=min_seq)
        return e is not None and e.active

    def log_read(self, from_seq: int = 1, *, limit: Optional[int] = None,
                 wait_ms: Optional[int] = None, min_seq: Optional[int] = None) -> LogPage:
        """A page of events from ``from_seq``; with ``wait_ms``, waits that
        long for one when there is none yet."""
        reply = self._read("/v1/log", _fields(**{"from": from_seq, "limit": limit,
                                                 "wait_ms": wait_ms}),
                           "log_read", {}, min_seq, wait_ms or 0)
        return LogPage.from_json(reply)

    def stats(self, *, min_seq: Optional[int] = None) -> Stats:
        """The head, counts, map use and every subscriber's metrics."""
        return Stats.from_json(self._read("/v1/stats", {}, "stats", {}, min_seq))

    # ---- durable subscribers (docs/SUBSCRIBERS.md) ----

    def sub_create(self, name: str, *, start: Optional[str] = None,
                   from_seq: Optional[int] = None, from_time_ms: Optional[int] = None,
                   max_deliver: Optional[int] = None, ack_wait_ms: Optional[int] = None,
                   backoff_ms: Optional[Iterable[int]] = None,
                   max_ack_pending: Optional[int] = None,
                   partitions: Optional[int] = None, **settings: Any) -> SubCreateResult:
        """Create durable subscriber ``name`` (an identical one existing is
        fine: ``created`` False). ``partitions`` (2-64) spreads its events
        by entity over ordered partitions, each held by one instance at a
        time (docs/SUBSCRIBERS.md, "Partitions"); it is fixed once created.
        ``settings``: ``filter_types``, ``filter_kinds``,
        ``filter_subject``, ``inactive_expiry_ms``, ``contact``,
        ``alert_route`` (docs/SUBSCRIBERS.md)."""
        body = _fields(name=name, start=start, from_seq=from_seq, from_time_ms=from_time_ms,
                       max_deliver=max_deliver, ack_wait_ms=ack_wait_ms,
                       backoff_ms=None if backoff_ms is None else list(backoff_ms),
                       max_ack_pending=max_ack_pending, partitions=partitions, **settings)
        return SubCreateResult.from_json(self.request("POST", "/v1/sub_create", body))

    def sub_update(self, name: str, *, backoff_ms: Optional[Iterable[int]] = None,
                   **settings: Any) -> SubscriberInfo:
        """Change subscriber ``name``'s settings (those of :meth:`sub_create`
        but the start), keeping its cursor, in-flight events and dead
        letters; ``""`` (or 0) clears one."""
        body = _fields(name=name, backoff_ms=None if backoff_ms is None else list(backoff_ms),
                       **settings)
        return SubscriberInfo.from_json(
            self.request("POST", "/v1/sub_update", body)["subscriber"])

    def sub_get(self, name: str, *, min_seq: Optional[int] = None) -> SubscriberInfo:
        """A subscriber's metrics (``subscriber_not_found`` raises)."""
        reply = self._read(f"/v1/subscribers/{quote_segment(name)}", {}, "sub_get",
                           {"name": name}, min_seq)
        return SubscriberInfo.from_json(reply["subscriber"])

    def sub_list(self, *, min_seq: Optional[int] = None) -> List[SubscriberInfo]:
        """Every subscriber's metrics, in name order."""
        reply = self._read("/v1/subscribers", {}, "sub_list", {}, min_seq)
        return [SubscriberInfo.from_json(s) for s in reply.get("subscribers", [])]

    def sub_delete(self, name: str) -> bool:
        """Delete a subscriber with its in-flight records and dead letters."""
        return bool(self.request("POST", "/v1/sub_delete", {"name": name}).get("deleted"))

    def sub_fetch(self, name: str, *, max: Optional[int] = None, wait_ms: Optional[int] = None,
                  restart: bool = False, instance: Optional[str] = None) -> FetchResult:
        """Events for subscriber ``name``: replays, due redeliveries, new
        ones, leased to ``instance``. A retry after a lost reply is sent
        with ``restart`` (what the lost reply leased is due again at once)."""
        body = _fields(name=name, max=max, wait_ms=wait_ms, instance=instance)
        if restart:
            body["restart"] = True

        def lost_reply(failure: TallyError) -> Optional[Dict[str, Any]]:
            if failure.status == 0 and instance is not None:
                return dict(body, restart=True)
            return None

        reply = self.request("POST", "/v1/sub_fetch", body, wait_ms=wait_ms or 0,
                             on_retry=lost_reply)
        return FetchResult.from_json(reply)

    def sub_ack(self, name: str, *, seq: Optional[int] = None,
                done: Optional[Iterable[int]] = None) -> AckResult:
        """Acknowledge every event up to ``seq`` and/or the seqs in ``done``."""
        body = _fields(name=name, seq=seq, done=None if done is None else list(done))
        return AckResult.from_json(self.request("POST", "/v1/sub_ack", body))

    def sub_nak(self, name: str, seq: int, *, delay_ms: Optional[int] = None,
                reason: Optional[str] = None, error: Optional[str] = None) -> NakResult:
        """Deliver in-flight event ``seq`` again later; ``reason`` (``error``
        is its older name) is kept as its last error."""
        body = _fields(name=name, seq=seq, delay_ms=delay_ms, reason=reason, error=error)
        return NakResult.from_json(self.request("POST", "/v1/sub_nak", body))

    def sub_progress(self, name: str, seqs: Iterable[int], *,
                     instance: Optional[str] = None) -> ProgressResult:
        """Still at work on in-flight events ``seqs``: their lease (the ack
        wait) starts again, no attempt used. Only what ``instance`` holds
        when given; acked, parked or other instances' events are skipped
        (``extended`` counts the others)."""
        body = _fields(name=name, seqs=list(seqs), instance=instance)
        return ProgressResult.from_json(self.request("POST", "/v1/sub_progress", body))

    def sub_park(self, name: str, seq: int, *, reason: Optional[str] = None) -> int:
        """Move in-flight event ``seq`` to the dead-letter queue; returns
        the ack floor."""
        body = _fields(name=name, seq=seq, reason=reason)
        return int(self.request("POST", "/v1/sub_park", body)["ack_floor"])

    def dlq_list(self, name: str, *, after_seq: Optional[int] = None,
                 limit: Optional[int] = None, min_seq: Optional[int] = None) -> DeadLetterPage:
        """A page of a subscriber's dead letters."""
        reply = self._read(f"/v1/subscribers/{quote_segment(name)}/dead_letters",
                           _fields(after_seq=after_seq, limit=limit), "dlq_list",
                           {"name": name}, min_seq)
        return DeadLetterPage.from_json(reply)

    def dlq_replay(self, name: str, seq: Optional[int] = None) -> int:
        """Deliver dead letter ``seq`` (all when None) again; returns how
        many are now marked."""
        reply = self.request("POST", "/v1/dlq_replay", _fields(name=name, seq=seq))
        return int(reply.get("replaying", 0))

    def dlq_discard(self, name: str, seq: int) -> bool:
        """Remove dead letter ``seq``."""
        reply = self.request("POST", "/v1/dlq_discard", {"name": name, "seq": seq})
        return bool(reply.get("discarded"))

    # ---- tally-relay's endpoints (docs/RELAY.md, "Endpoint state in tallyd") ----

    def endpoint_disable(self, endpoint: str, *, reason: Optional[str] = None,
                         key: Optional[str] = None) -> WriteResult:
        """Disable the endpoint: the relays deliver nothing to it until enabled."""
        return self._write("endpoint_disable", _fields(endpoint=endpoint, reason=reason), key,
                           None)

    def endpoint_enable(self, endpoint: str, *, key: Optional[str] = None) -> WriteResult:
        """Enable a disabled endpoint again."""
        return self._write("endpoint_enable", {"endpoint": endpoint}, key, None)

    def endpoint_rotate_secret(self, endpoint: str, secret: str, *,
                               overlap_s: Optional[int] = None,
                               key: Optional[str] = None) -> WriteResult:
        """A new signing secret (``whsec_<base64>``); the one before it
        signs too for ``overlap_s`` seconds (tallyd's default: a day)."""
        return self._write("endpoint_rotate_secret",
                           _fields(endpoint=endpoint, secret=secret, overlap_s=overlap_s), key,
                           None)

    def endpoint_recover(self, endpoint: str, since_ms: int, *,
                         key: Optional[str] = None) -> WriteResult:
        """Have the relays resend every event committed since ``since_ms``."""
        return self._write("endpoint_recover", {"endpoint": endpoint, "since_ms": since_ms},
                           key, None)

    def endpoint_recovered(self, endpoint: str, recover_version: int, *,
                           key: Optional[str] = None) -> WriteResult:
        """A relay's word that the recover asked at ``recover_version`` is done."""
        return self._write("endpoint_recovered",
                           {"endpoint": endpoint, "recover_version": recover_version}, key, None)

    def endpoint_create(self, endpoint: str, url: str, secret: str, *,
                        types: Optional[str] = None, retry_schedule: Optional[str] = None,
                        connect_timeout_ms: Optional[int] = None,
                        timeout_ms: Optional[int] = None, backfill: Optional[str] = None,
                        key: Optional[str] = None) -> WriteResult:
        """Define an endpoint in tallyd: every relay starts delivering to it
        (docs/RELAY.md, "Endpoints managed at run time")."""
        return self._write("endpoint_create",
                           _fields(endpoint=endpoint, url=url, secret=secret, types=types,
                                   retry_schedule=retry_schedule,
                                   connect_timeout_ms=connect_timeout_ms,
                                   timeout_ms=timeout_ms, backfill=backfill), key, None)

    def endpoint_update(self, endpoint: str, *, url: Optional[str] = None,
                        types: Optional[str] = None, retry_schedule: Optional[str] = None,
                        connect_timeout_ms: Optional[int] = None,
                        timeout_ms: Optional[int] = None,
                        key: Optional[str] = None) -> WriteResult:
        """Change an endpoint defined in tallyd (the settings given)."""
        return self._write("endpoint_update",
                           _fields(endpoint=endpoint, url=url, types=types,
                                   retry_schedule=retry_schedule,
                                   connect_timeout_ms=connect_timeout_ms,
                                   timeout_ms=timeout_ms), key, None)

    def endpoint_delete(self, endpoint: str, *, key: Optional[str] = None) -> WriteResult:
        """Remove an endpoint defined in tallyd: the relays stop delivering to it."""
        return self._write("endpoint_delete", {"endpoint": endpoint}, key, None)

    def endpoint_list(self) -> List[Dict[str, Any]]:
        """The endpoints defined in tallyd, in name order (no secrets)."""
        reply = self.request("POST", "/v1/endpoint_list", {})
        return list(reply.get("endpoints", []))

    def endpoint_get(self, endpoint: str) -> Dict[str, Any]:
        """The endpoint's state: ``state``, ``version``, ``changed_ms``, ``reason``, ..."""
        return self.request("POST", "/v1/endpoint_get", {"endpoint": endpoint})

    def endpoint_secret_get(self, endpoint: str) -> Dict[str, Any]:
        """The endpoint's signing secrets as tallyd holds them (admin)."""
        return self.request("POST", "/v1/endpoint_secret_get", {"endpoint": endpoint})

    def endpoint_attempts(self, endpoint: str, *, seq: Optional[int] = None,
                          limit: Optional[int] = None) -> List[Dict[str, Any]]:
        """The endpoint's delivery attempts, newest first (the attempt log)."""
        reply = self.request("POST", "/v1/endpoint_attempts",
                             _fields(endpoint=endpoint, seq=seq, limit=limit))
        return list(reply.get("attempts", []))

    def endpoint_attempts_record(self, endpoint: str, attempts: Sequence[Mapping[str, Any]], *,
                                 retention_s: Optional[int] = None) -> Dict[str, Any]:
        """Record delivery attempts in the attempt log (what tally-relay does)."""
        return self.request("POST", "/v1/endpoint_attempts_record",
                            _fields(endpoint=endpoint, attempts=[dict(a) for a in attempts],
                                    retention_s=retention_s))

    # ---- the cluster ----

    def cluster(self) -> ClusterInfo:
        """This node's place in the cluster (``GET /v1/cluster``); a
        single-node tallyd raises ``not_in_cluster_mode``."""
        return ClusterInfo.from_json(self.request("GET", "/v1/cluster"))

    # ---- following the log ----

    def events(self, from_seq: Optional[int] = None, *, last_event_id: Optional[int] = None,
               idle_timeout_s: float = 60.0) -> "EventStream":
        """The live event stream (``GET /v1/events``, Server-Sent Events)
        as an iterator of :class:`~tally.types.Event`: from ``from_seq``,
        after ``last_event_id``, or (neither) the events committed after
        this call (it reads the head with ``stats``). It
        reconnects by itself and yields each event once, in seq order."""
        from .events import EventStream
        return EventStream(self, from_seq=from_seq, last_event_id=last_event_id,
                           idle_timeout_s=idle_timeout_s)
