"""Errors the use cases raise; the API maps each to an HTTP status.

AppError
 +-- Invalid        bad input (400); `field` names it
 +-- Unauthorized   no or unknown key (401)
 +-- Forbidden      the caller's role may not do this (403)
 +-- NotFound       no such object, or not the caller's (404: never a hint that it exists)
 +-- Conflict       the request clashes with the current state (409)
 |    +-- OverSpendLimit  a purchase would take the buyer past a spend cap or its own budget (409)
 +-- PaymentRequired  a prepaid tenant's balance cannot pay for this (402)
 +-- RateLimited    the caller asked too often; `retry_after_s` says when it may again (429)
"""

from __future__ import annotations


class AppError(Exception):
    code = "error"

    def __init__(self, message: str, *, field: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.field = field


class Invalid(AppError):
    code = "invalid"


class Unauthorized(AppError):
    code = "unauthorized"


class Forbidden(AppError):
    code = "forbidden"


class NotFound(AppError):
    code = "not_found"


class Conflict(AppError):
    code = "conflict"


class OverSpendLimit(Conflict):
    code = "over_spend_limit"


class BookingConflict(Conflict):
    """The database refused a booking: another writer took the slice first. The decision is dropped."""


class Duplicate(Conflict):
    """A unique key (an idempotency key) is already taken; the caller may read the existing object."""


class PaymentRequired(AppError):
    code = "payment_required"


class RateLimited(AppError):
    code = "rate_limited"

    def __init__(self, message: str, retry_after_s: int) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s
