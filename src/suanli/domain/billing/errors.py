"""Billing errors, under the domain's SuanliError.

SuanliError
 +-- BillingError                  money that cannot be priced, posted or verified as asked
      +-- PriceNotFoundError       no price in force for that key at that instant
      +-- UnbalancedTransactionError   postings that do not sum to exactly 0
      +-- IdempotencyConflictError     a key already posted with different postings
      +-- LedgerIntegrityError     a journal whose hash chain or balances do not verify
"""

from __future__ import annotations

from suanli.domain.errors import SuanliError


class BillingError(SuanliError):
    """Base of every billing error."""


class PriceNotFoundError(BillingError):
    """No list price, MIG entry or spot floor in force at the instant asked."""


class UnbalancedTransactionError(BillingError):
    """A transaction whose postings do not sum to exactly 0 micros, or that has too few postings."""


class IdempotencyConflictError(BillingError):
    """The same idempotency key was posted before with different postings."""


class LedgerIntegrityError(BillingError):
    """A journal that fails verification; `problems` lists what was found."""

    def __init__(self, problems: tuple[str, ...]) -> None:
        self.problems = problems
        super().__init__("; ".join(problems))


class BidBelowFloorError(BillingError):
    """A spot bid below the pool's floor: the rental cannot be served at that bid now."""
