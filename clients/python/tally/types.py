"""Typed results: one dataclass per reply and per object of the JSON API.

Each class has ``from_json`` taking the reply's JSON object. Integers are
Python ints whatever their size (the server gives those beyond 2^53 as
decimal strings: the value rule of docs/PROTOCOL.md, "JSON API"); 16-byte
ids are 32 lower-case hex digits; fields a newer server adds are ignored.
"""
from __future__ import annotations

import base64
import dataclasses
from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional, Type, TypeVar

T = TypeVar("T")

# With postponed annotations a dataclass field's type is its annotation's
# text: these are the integer fields, converted by the value rule.
_INT_TYPES = {"int", "Optional[int]"}


def _int(value: Any) -> Any:
    """A JSON integer, or its decimal string, as an int (None stays None)."""
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, str):
        return int(value)
    return value


def _build(cls: Type[T], data: Mapping[str, Any], **given: Any) -> T:
    """An instance of the dataclass ``cls`` from ``data``: each field by its
    name, ints converted by the value rule, fields absent from ``data`` left
    at their default, ``given`` overriding."""
    kwargs: Dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        if f.name in given:
            kwargs[f.name] = given[f.name]
        elif f.name in data:
            v = data[f.name]
            kwargs[f.name] = _int(v) if isinstance(f.type, str) and f.type in _INT_TYPES else v
    return cls(**kwargs)


class _FromJson:
    """``from_json``: the dataclass from a reply's object, field by field."""

    @classmethod
    def from_json(cls: Type[T], data: Mapping[str, Any]) -> T:
        return _build(cls, data)


@dataclass(frozen=True)
class WriteResult:
    """The reply to a write (or one ``batch`` member's result).

    ``code`` is ``"ok"`` for a write that was applied (or replayed as
    applied); a ``batch`` member may carry any code (see :attr:`ok` and
    :meth:`error`). ``seq`` is the seq of the first event the write caused,
    ``events`` how many. ``transfer_id`` is the id of the transfer a
    ``transfer`` (or ``transfer_reverse``) made, the one the server derived
    from the consumer and key when none was given. ``cluster_seq`` (cluster
    mode) is the write's position, for a read's ``min_seq``."""

    code: str
    key: str
    replayed: bool = False
    seq: Optional[int] = None
    events: int = 0
    original_seq: Optional[int] = None
    codes: Optional[List[str]] = None
    failed_index: Optional[int] = None
    transfer_id: Optional[str] = None
    cluster_seq: Optional[int] = None

    @classmethod
    def from_json(cls, data: Mapping[str, Any], **given: Any) -> "WriteResult":
        return _build(cls, data, **given)

    @property
    def ok(self) -> bool:
        """True when the write was applied (now or by an earlier call)."""
        return self.code == "ok"

    def error(self) -> Optional[Exception]:
        """The exception of this result's code (None when ok): for ``batch``
        members, whose failures are results, not exceptions."""
        if self.ok:
            return None
        from .errors import error_for
        return error_for(self.code, key=self.key, reply=dataclasses.asdict(self))


@dataclass(frozen=True)
class Account(_FromJson):
    """An account with its balances (docs/EVENTS.md, "account")."""

    id: int
    ledger: int
    code: int
    flags: int = 0
    debits_posted: int = 0
    credits_posted: int = 0
    debits_pending: int = 0
    credits_pending: int = 0
    version: int = 0
    created_seq: int = 0
    created_ms: int = 0
    user_data_128: str = "0" * 32
    user_data_64: int = 0
    user_data_32: int = 0

    @property
    def balance(self) -> int:
        """credits_posted - debits_posted."""
        return self.credits_posted - self.debits_posted

    @property
    def closed(self) -> bool:
        """True while a closing transfer's hold keeps the account closed
        (``flags`` bit 2): it takes no new transfer."""
        return bool(self.flags & 4)


@dataclass(frozen=True)
class Transfer(_FromJson):
    """A transfer or hold (docs/EVENTS.md, "transfer"); ``id`` in hex."""

    id: str
    debit_account_id: int
    credit_account_id: int
    amount: int
    ledger: int
    code: int
    flags: int = 0
    state: str = ""
    timeout_s: int = 0
    expires_at_ms: int = 0
    posted_amount: int = 0
    version: int = 0
    created_seq: int = 0
    resolved_seq: int = 0
    created_ms: int = 0
    user_data_128: str = "0" * 32
    user_data_64: int = 0
    user_data_32: int = 0
    reverses: str = "0" * 32
    reversed_amount: int = 0

    @property
    def is_reversal(self) -> bool:
        """True for a reversal (``transfer_reverse``): ``reverses`` names
        the transfer it moved back."""
        return self.reverses != "0" * 32


@dataclass(frozen=True)
class Entitlement(_FromJson):
    """An entitlement; ``state`` as the server evaluated it (``active``,
    ``revoked``, ``expired``); ``valid_until_ms`` None is for life."""

    subject: str
    feature: str
    state: str
    valid_until_ms: Optional[int] = None
    version: int = 0
    source_order: Optional[int] = None
    granted_ms: int = 0
    updated_ms: int = 0
    grant_transfer_id: Optional[str] = None


    @property
    def active(self) -> bool:
        """True when the entitlement gives access now."""
        return self.state == "active"


@dataclass(frozen=True)
class Event:
    """One event of the log: the event document of docs/RELAY.md.

    ``data`` holds the objects after the change (``account``, ``transfer``,
    ``debit_account``, ``credit_account``, ``entitlement``, ``webhook``,
    ``dead_letter``, ``endpoint``) as JSON objects; ``document`` is the whole document as
    it came. ``consumer`` and ``key`` are None for events of the server's
    sweeps (holds expiring, entitlements ending)."""

    seq: int
    event_id: str
    type: str
    entity_kind: str = ""
    entity: Dict[str, Any] = field(default_factory=dict)
    entity_version: int = 0
    time: str = ""
    time_ms: int = 0
    consumer: Optional[str] = None
    key: Optional[str] = None
    data: Dict[str, Any] = field(default_factory=dict)
    document: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_json(cls, data: Any) -> "Event":
        if not isinstance(data, Mapping):
            raise TypeError("an event document is a JSON object; this server sends events"
                            " in another form (an older tallyd: base64 msgpack)")
        return _build(cls, data, document=dict(data))


@dataclass(frozen=True)
class HistoryEntry:
    """One entry of an account's history: the event that moved its
    balances, the transfer as in that event, the account right after it."""

    seq: int
    type: str
    time_ms: int
    transfer: Transfer
    account: Account

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "HistoryEntry":
        return _build(cls, data, transfer=Transfer.from_json(data["transfer"]),
                      account=Account.from_json(data["account"]))


@dataclass(frozen=True)
class HistoryPage:
    """A page of ``account_history``; ``next`` is the ``after_seq`` of the
    next page, None after the last."""

    entries: List[HistoryEntry]
    next: Optional[int] = None

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "HistoryPage":
        return cls([HistoryEntry.from_json(e) for e in data.get("entries", [])],
                   _int(data.get("next")))


@dataclass(frozen=True)
class Balance:
    """An account's balances right after one transfer event of its history
    (``account_balances``, ``balance_at``): the event's seq, its time (the
    transfer's creation time, else the event's commit time)."""

    seq: int
    timestamp_ms: int
    debits_pending: int
    debits_posted: int
    credits_pending: int
    credits_posted: int

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "Balance":
        return _build(cls, data)


@dataclass(frozen=True)
class BalancePage:
    """A page of ``account_balances``; ``next`` is the ``after_seq`` of the
    next page, None after the last."""

    balances: List[Balance]
    next: Optional[int] = None

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "BalancePage":
        return cls([Balance.from_json(e) for e in data.get("balances", [])],
                   _int(data.get("next")))


@dataclass(frozen=True)
class AccountPage:
    """A page of ``account_list``; ``next`` is the ``after_id`` of the next
    page, None after the last."""

    entries: List[Account]
    next: Optional[int] = None

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "AccountPage":
        return cls([Account.from_json(e) for e in data.get("entries", [])],
                   _int(data.get("next")))


@dataclass(frozen=True)
class AccountQueryPage:
    """A page of ``account_query``; ``next`` is the ``cursor`` of the next
    page (32 hex digits; send it with the same filters), None after the
    last. A page may hold fewer than ``limit`` and still have a ``next``:
    it examined its bound of index entries (docs/PROTOCOL.md, "Queries")."""

    entries: List[Account]
    next: Optional[str] = None

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "AccountQueryPage":
        return cls([Account.from_json(e) for e in data.get("entries", [])], data.get("next"))


@dataclass(frozen=True)
class TransferQueryPage:
    """A page of ``transfer_query`` or ``account_transfers``; ``next`` as
    for :class:`AccountQueryPage`."""

    entries: List[Transfer]
    next: Optional[str] = None

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "TransferQueryPage":
        return cls([Transfer.from_json(e) for e in data.get("entries", [])], data.get("next"))


def _b64(value: Any) -> bytes:
    return base64.b64decode(value) if isinstance(value, str) else b""


@dataclass(frozen=True)
class LogPage:
    """A page of ``log_read``: at most ``limit`` events and 2 MiB of them
    (fewer than asked says nothing about the end: compare ``head``)."""

    head: int
    events: List[Event]
    log_floor: int = 0
    log_floor_hash: bytes = b""

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "LogPage":
        return cls(_int(data["head"]), [Event.from_json(e) for e in data.get("events", [])],
                   _int(data.get("log_floor", 0)), _b64(data.get("log_floor_hash")))


@dataclass(frozen=True)
class Stats:
    """``stats``: the head, counts, map use and subscribers' metrics;
    ``raw`` is the whole reply."""

    head_seq: int
    first_seq: int = 0
    accounts: int = 0
    transfers: int = 0
    entitlements: int = 0
    inbox: int = 0
    events: int = 0
    map_used_bytes: int = 0
    map_size_bytes: int = 0
    map_max_bytes: int = 0
    inbox_oldest_age_s: int = 0
    log_floor: int = 0
    subscribers: List["SubscriberInfo"] = field(default_factory=list)
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "Stats":
        return _build(cls, data, raw=dict(data),
                      subscribers=[SubscriberInfo.from_json(s) for s in data.get("subscribers", [])])


@dataclass(frozen=True)
class SubscriberInfo(_FromJson):
    """A durable subscriber's metrics and settings (docs/SUBSCRIBERS.md)."""

    name: str
    ack_floor: int = 0
    delivered_seq: int = 0
    pending: int = 0
    in_flight: int = 0
    oldest_unacked_age_s: int = 0
    redelivered: int = 0
    dead_letters: int = 0
    replaying: int = 0
    max_deliver: int = 0
    ack_wait_ms: int = 0
    backoff_ms: List[int] = field(default_factory=list)
    max_ack_pending: int = 0
    created_ms: int = 0
    updated_ms: int = 0
    oldest_dead_letter_age_s: int = 0
    last_fetch_age_s: int = 0
    filter_types: List[str] = field(default_factory=list)
    filter_kinds: List[str] = field(default_factory=list)
    filter_subject: Optional[str] = None
    inactive_expiry_ms: int = 0
    active_ms: int = 0
    contact: Optional[str] = None
    alert_route: Optional[str] = None
    partitions: int = 1  # ordered partitions; 1: none
    # per partition: ``partition``, ``holder`` (None: free), ``lease_until_ms``
    partition_holders: List[Dict[str, Any]] = field(default_factory=list)



@dataclass(frozen=True)
class SubCreateResult:
    """``sub_create``: ``created`` False when an identical one existed."""

    created: bool
    subscriber: SubscriberInfo

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "SubCreateResult":
        return cls(bool(data.get("created")), SubscriberInfo.from_json(data["subscriber"]))


@dataclass(frozen=True)
class Delivery:
    """One event handed to a durable subscriber: ``attempt`` counts its
    deliveries (> 1: delivered before), ``replay`` marks a dead letter
    delivered again."""

    seq: int
    attempt: int
    replay: bool
    event: Event

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "Delivery":
        return cls(_int(data["seq"]), _int(data.get("attempt", 1)), bool(data.get("replay")),
                   Event.from_json(data["event"]))


@dataclass(frozen=True)
class FetchResult:
    """``sub_fetch``: the deliveries, the ack floor and the head."""

    events: List[Delivery]
    ack_floor: int = 0
    head: int = 0

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "FetchResult":
        return cls([Delivery.from_json(d) for d in data.get("events", [])],
                   _int(data.get("ack_floor", 0)), _int(data.get("head", 0)))


@dataclass(frozen=True)
class AckResult(_FromJson):
    """``sub_ack``: the new ack floor and how many in-flight events it removed."""

    ack_floor: int
    acked: int = 0



@dataclass(frozen=True)
class NakResult(_FromJson):
    """``sub_nak``: the event's attempts so far and when it is due again."""

    attempt: int
    deliver_after_ms: int = 0



@dataclass(frozen=True)
class ProgressResult(_FromJson):
    """``sub_progress``: how many of the events' leases started again, and
    when the last of them is due unless acked (Unix ms)."""

    extended: int
    deliver_after_ms: int = 0


@dataclass(frozen=True)
class ClusterInfo(_FromJson):
    """``GET /v1/cluster`` (cluster mode, docs/CLUSTER.md): this node's name,
    the command stream, the position it has applied, the stream's last seq
    as it last saw it, the difference, its last checkpoint and the nodes
    agreeing there, and whether it stopped serving (``diverged``, with
    ``diverged_why``)."""

    node: str
    stream: str = ""
    position: int = 0
    stream_last_seq: int = 0
    lag_messages: int = 0
    checkpoint_position: int = 0
    checkpoint_agreeing: int = 0
    checkpoint_nodes: int = 0
    diverged: bool = False
    diverged_why: str = ""


@dataclass(frozen=True)
class DeadLetter(_FromJson):
    """A parked event of a subscriber's dead-letter queue."""

    seq: int
    attempts: int = 0
    error: str = ""
    parked_ms: int = 0
    replaying: bool = False
    event_id: str = ""
    type: str = ""



@dataclass(frozen=True)
class DeadLetterPage:
    """A page of ``dlq_list``; ``next`` is the ``after_seq`` of the next page."""

    entries: List[DeadLetter]
    next: Optional[int] = None

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "DeadLetterPage":
        return cls([DeadLetter.from_json(e) for e in data.get("entries", [])],
                   _int(data.get("next")))

