"""tally: a Python client of tallyd's JSON API (docs/PROTOCOL.md, "JSON API").

    import tally
    c = tally.Client("http://127.0.0.1:7452", consumer="shop")
    c.account_open(1, ledger=1, code=10)
    c.account_open(2, ledger=1, code=10)
    r = c.transfer(1, 2, 500, ledger=1, code=1)   # a new UUIDv7 key
    c.transfer(1, 2, 500, ledger=1, code=1, key=r.key)   # replayed, not applied again
    print(c.account_get(2).credits_posted)

Standard library only. See clients/python/README.md.
"""
from ._http import RETRYABLE_CODES, RetryPolicy
from .client import (ACCOUNT_IMPORTED, BALANCING_CREDIT, BALANCING_DEBIT, CLOSING_CREDIT,
                     CLOSING_DEBIT, IMPORTED, PENDING, Client, id_hex, member)
from .errors import (CODE_CLASSES, BusinessRejection, DeadlineExceeded, Fault,
                     IdempotencyKeyReused, InvalidCommand, RefusedRequest, TallyError, code_class,
                     error_for)
from .events import EventStream
from .keys import new_id, new_key, transfer_id_for_key
from .subscriber import Park, Retry, RunCounters, SqliteInbox, Subscriber
from .types import (AccountPage, AccountQueryPage, AckResult, Account, Balance, BalancePage,
                    ClusterInfo, DeadLetter,
                    DeadLetterPage, Delivery, Entitlement, Event, FetchResult, HistoryEntry,
                    HistoryPage, LogPage, NakResult, ProgressResult, Stats, SubCreateResult,
                    SubscriberInfo, Transfer, TransferQueryPage, WriteResult)

__version__ = "0.1.0"

__all__ = [
    "ACCOUNT_IMPORTED", "Account", "AccountPage", "AccountQueryPage", "AckResult",
    "BALANCING_CREDIT", "Balance", "BalancePage", "IMPORTED",
    "BALANCING_DEBIT", "BusinessRejection", "CLOSING_CREDIT", "CLOSING_DEBIT", "CODE_CLASSES",
    "Client", "ClusterInfo", "DeadLetter", "DeadLetterPage", "DeadlineExceeded", "Delivery", "Entitlement", "Event",
    "EventStream", "Fault", "FetchResult", "HistoryEntry", "HistoryPage", "IdempotencyKeyReused",
    "InvalidCommand", "LogPage", "NakResult", "PENDING", "Park", "ProgressResult", "RETRYABLE_CODES",
    "RefusedRequest", "Retry", "RetryPolicy", "RunCounters", "SqliteInbox", "Stats",
    "SubCreateResult", "SubscriberInfo", "Subscriber", "TallyError", "Transfer",
    "TransferQueryPage", "WriteResult",
    "code_class", "error_for", "id_hex", "member", "new_id", "new_key", "transfer_id_for_key",
]
