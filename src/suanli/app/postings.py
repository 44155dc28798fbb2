"""Posting one ledger transaction from a use case: idempotent by key, chained on the current head.

`post_once` appends inside the caller's unit of work (or returns the transaction already posted under the
key); the database refuses a second writer appending after the same head (UNIQUE prev_hash), which the
repository reports as Duplicate: `retrying` reruns the whole unit of work on a fresh head.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from datetime import datetime
from typing import TypeVar

from suanli.app.errors import Conflict, Duplicate
from suanli.app.ports import UnitOfWork
from suanli.domain.billing.ledger import Posting, Transaction, TxKind, normalize
from suanli.domain.billing.money import to_epoch_s

APPEND_ATTEMPTS = 5
T = TypeVar("T")


def post_once(
    uow: UnitOfWork,
    now: datetime,
    *,
    key: str,
    kind: TxKind,
    postings: Iterable[Posting],
    ref: str = "",
    memo: str = "",
    at_s: int | None = None,
) -> Transaction:
    """Append under `key` unless it is posted already (same postings: the earlier one; else Conflict)."""
    normalized = normalize(postings)
    existing = uow.ledger.get(key)
    if existing is not None:
        if existing.postings != normalized or existing.kind is not kind:
            raise Conflict(f"ledger key {key!r} was already posted with different postings", field="key")
        return existing
    tx = Transaction.chained(
        uow.ledger.head_hash(),
        key=key,
        kind=kind,
        at_s=to_epoch_s(now) if at_s is None else at_s,
        postings=normalized,
        ref=ref,
        memo=memo,
    )
    uow.ledger.append(tx, now)
    return tx


def retrying(work: Callable[[], T]) -> T:
    """Run `work` (one whole unit of work) again when a concurrent append took the ledger's head."""
    for attempt in range(APPEND_ATTEMPTS):
        try:
            return work()
        except Duplicate:
            if attempt == APPEND_ATTEMPTS - 1:
                raise
    raise Conflict("the ledger stayed busy; try again")  # pragma: no cover
