"""Errors: one exception class per code class of docs/PROTOCOL.md's code table.

Every reply of tallyd carries a ``code``; every code belongs to one class,
and the class says what a caller may do about it:

========================  =====  =========================================
class                     table  meaning
========================  =====  =========================================
:class:`BusinessRejection`  B    decided against the store; stored and
                                 replayed (the same key answers the same)
:class:`InvalidCommand`     V    decided from the command alone; not
                                 stored: fix it, send it with the same key
:class:`RefusedRequest`     R    refused before it ran; not stored
:class:`Fault`              F    not stored; retry later with the same key
========================  =====  =========================================

:class:`IdempotencyKeyReused` (a :class:`RefusedRequest`) is the answer to a
key sent again with another request; :class:`DeadlineExceeded` (a
:class:`Fault`) is the client's own: its retries ran out of time.

``CODE_CLASSES`` is the table itself; ``tests/test_codes.py`` compares it
with ``tallyd --protocol-reference`` so that it follows the server.
"""
from __future__ import annotations

from typing import Any, Dict, Mapping, Optional, Type

#: Every wire code and its class (B, V, R or F), as tallyd's code table has it.
CODE_CLASSES: Dict[str, str] = {
    "ok": "B",
    "storage_full": "F",
    "io_error": "F",
    "internal": "F",
    "out_of_memory": "F",
    "transaction_full": "F",
    "corrupt_record": "F",
    "store_locked": "F",
    "store_version_mismatch": "F",
    "not_found": "F",
    "invalid_argument": "F",
    "read_only": "F",
    "idempotency_key_reused": "R",
    "consumer_must_not_be_empty": "R",
    "consumer_too_long": "R",
    "key_must_not_be_empty": "R",
    "key_too_long": "R",
    "correlation_too_long": "R",
    "key_expired": "R",
    "consumer_reserved": "R",
    "exists": "B",
    "exists_with_different_ledger": "B",
    "exists_with_different_code": "B",
    "exists_with_different_flags": "B",
    "id_must_not_be_zero": "V",
    "ledger_must_not_be_zero": "V",
    "code_must_not_be_zero": "V",
    "reserved_flag": "V",
    "flags_are_mutually_exclusive": "V",
    "debit_account_id_must_not_be_zero": "V",
    "credit_account_id_must_not_be_zero": "V",
    "accounts_must_be_different": "V",
    "amount_must_not_be_zero": "V",
    "amount_must_not_be_negative": "V",
    "amount_overflows": "V",
    "timeout_reserved_for_pending_transfer": "V",
    "timeout_too_large": "V",
    "debit_account_not_found": "B",
    "credit_account_not_found": "B",
    "accounts_must_have_the_same_ledger": "B",
    "transfer_must_have_the_same_ledger_as_accounts": "B",
    "exists_with_different_debit_account_id": "B",
    "exists_with_different_credit_account_id": "B",
    "exists_with_different_amount": "B",
    "exists_with_different_timeout": "B",
    "overflows_debits_pending": "B",
    "overflows_credits_pending": "B",
    "overflows_debits_posted": "B",
    "overflows_credits_posted": "B",
    "overflows_debits": "B",
    "overflows_credits": "B",
    "exceeds_credits": "B",
    "exceeds_debits": "B",
    "id_already_failed": "B",
    "reversed_transfer_not_found": "B",
    "transfer_not_reversible": "B",
    "exceeds_unreversed_amount": "B",
    "exists_with_different_reverses": "B",
    "reverses_must_not_be_zero": "V",
    "pending_transfer_not_found": "B",
    "pending_transfer_not_pending": "B",
    "pending_transfer_already_posted": "B",
    "pending_transfer_already_voided": "B",
    "pending_transfer_expired": "B",
    "exceeds_pending_transfer_amount": "B",
    "closing_transfer_must_be_pending": "V",
    "debit_account_already_closed": "B",
    "credit_account_already_closed": "B",
    "timestamp_must_be_zero": "V",
    "imported_event_timestamp_out_of_range": "V",
    "imported_event_timeout_must_be_zero": "V",
    "imported_event_expected": "V",
    "imported_event_not_expected": "V",
    "imported_event_timestamp_must_not_advance": "B",
    "imported_event_timestamp_must_not_regress": "B",
    "imported_event_timestamp_must_postdate_debit_account": "B",
    "imported_event_timestamp_must_postdate_credit_account": "B",
    "subject_must_not_be_empty": "V",
    "subject_too_long": "V",
    "feature_must_not_be_empty": "V",
    "feature_too_long": "V",
    "time_out_of_range": "V",
    "duration_out_of_range": "V",
    "until_and_duration_are_mutually_exclusive": "V",
    "valid_until_must_be_in_future": "B",
    "entitlement_not_found": "B",
    "entitlement_already_active": "B",
    "entitlement_revoked": "B",
    "entitlement_already_revoked": "B",
    "entitlement_is_lifetime": "B",
    "extension_must_move_forward": "B",
    "stale": "B",
    "grant_transfer_not_found": "B",
    "linked_operation_failed": "B",
    "chain_must_not_be_empty": "V",
    "chain_too_long": "V",
    "chain_must_not_nest": "V",
    "unknown_command": "V",
    "field_not_allowed_for_command": "V",
    "malformed_request": "R",
    "request_too_large": "R",
    "unsupported_version": "R",
    "unknown_op": "R",
    "unknown_field": "R",
    "duplicate_field": "R",
    "missing_field": "R",
    "wrong_type": "R",
    "value_out_of_range": "R",
    "too_many_operations": "R",
    "not_in_cluster_mode": "R",
    "overloaded": "F",
    "shutting_down": "F",
    "timed_out": "F",
    "unreachable": "F",
    "cluster_unavailable": "F",
    "not_caught_up": "F",
    "cluster_diverged": "F",
    "invalid_endpoint_name": "V",
    "invalid_secret": "V",
    "endpoint_exists": "B",
    "endpoint_not_found": "B",
    "invalid_endpoint_url": "V",
    "too_many_endpoints": "B",
    "invalid_subscriber_name": "R",
    "subscriber_not_found": "R",
    "subscriber_exists_with_different_config": "R",
    "too_many_subscribers": "R",
    "start_positions_are_mutually_exclusive": "R",
    "seq_beyond_head": "R",
    "seq_not_delivered": "R",
    "seq_not_in_flight": "R",
    "dead_letter_not_found": "R",
    "backup_destination_exists": "R",
    "backup_destination_invalid": "R",
    "unauthenticated": "R",
    "forbidden": "R",
}


class TallyError(Exception):
    """A refusal or failure, with the wire ``code`` that names it.

    Attributes:
        code: the wire code (``exceeds_credits``, ``overloaded``, ...).
        message: the server's ``message`` ("" when the reply had none).
        status: the HTTP status (0 when no reply came).
        key: the idempotency key of the write, or None (reads and
            subscriber ops): send the same write again with it.
        replayed: True when the server answered from its inbox (the
            outcome was stored by an earlier call with the same key).
        reply: the reply's JSON object as it came ({} when none came).
    """

    code_class: str = ""

    def __init__(self, code: str, message: str = "", *, status: int = 0,
                 key: Optional[str] = None, reply: Optional[Mapping[str, Any]] = None):
        self.code = code
        self.message = message
        self.status = status
        self.key = key
        self.reply: Dict[str, Any] = dict(reply or {})
        self.replayed = bool(self.reply.get("replayed", False))
        text = f"{code}: {message}" if message else code
        super().__init__(text)


class BusinessRejection(TallyError):
    """Class B: a rejection decided against the store (``exceeds_credits``,
    ``exists``, ``stale``, ...). Stored: the same key replays it."""

    code_class = "B"


class InvalidCommand(TallyError):
    """Class V: the command is invalid by itself (``amount_must_not_be_zero``,
    ...). Not stored: correct it and send it again under the same key."""

    code_class = "V"


class RefusedRequest(TallyError):
    """Class R: the request was refused before it ran (``missing_field``,
    ``unauthenticated``, ``subscriber_not_found``, ...). Not stored."""

    code_class = "R"


class IdempotencyKeyReused(RefusedRequest):
    """``idempotency_key_reused`` (HTTP 409): the key was used for another
    request, whose outcome stays; nothing was applied. Use a new key."""


class Fault(TallyError):
    """Class F: a fault (``overloaded``, ``storage_full``, ``io_error``,
    ...), or no answer at all (``unreachable``, ``timed_out``). Nothing is
    known to be applied: retry with the same key."""

    code_class = "F"


class DeadlineExceeded(Fault):
    """The client's retries ran past their total deadline.

    ``code`` is the last failure's (``unreachable`` when no server answered,
    ``timed_out`` when an attempt was cut by the deadline, else the server's
    code, e.g. ``overloaded``); ``attempts`` counts the attempts made and
    ``last`` is the last failure. A write may still have been applied: send
    it again with ``key`` and the same fields to learn its outcome.
    """

    def __init__(self, last: TallyError, attempts: int):
        super().__init__(last.code, f"deadline passed after {attempts} attempt(s): {last}",
                         status=last.status, key=last.key, reply=last.reply)
        self.last = last
        self.attempts = attempts


_BY_CLASS: Dict[str, Type[TallyError]] = {
    "B": BusinessRejection,
    "V": InvalidCommand,
    "R": RefusedRequest,
    "F": Fault,
}

# A code this client does not know yet (a newer server): its class from
# the HTTP status, by the JSON API's status table.
_BY_STATUS: Dict[int, Type[TallyError]] = {
    400: RefusedRequest, 401: RefusedRequest, 403: RefusedRequest, 404: RefusedRequest,
    409: RefusedRequest, 413: RefusedRequest, 422: BusinessRejection,
}


def code_class(code: str) -> Optional[str]:
    """The class (``"B"``, ``"V"``, ``"R"``, ``"F"``) of a wire code, or
    None for a code this client does not know."""
    return CODE_CLASSES.get(code)


def error_for(code: str, message: str = "", *, status: int = 0, key: Optional[str] = None,
              reply: Optional[Mapping[str, Any]] = None) -> TallyError:
    """The exception for a reply's code: its class's, or for
    ``idempotency_key_reused`` :class:`IdempotencyKeyReused`."""
    if code == "idempotency_key_reused":
        cls: Type[TallyError] = IdempotencyKeyReused
    elif code in CODE_CLASSES:
        cls = _BY_CLASS[CODE_CLASSES[code]]
    else:
        cls = _BY_STATUS.get(status, Fault)
    return cls(code, message, status=status, key=key, reply=reply)
