"""Prefixed random ids (`ten_`, `key_`, `rnt_`, `ctr_`) and API key secrets (`sk_`), plus UTC
helpers and the system clock."""

from __future__ import annotations

import hashlib
import secrets
from datetime import UTC, datetime, timedelta

from suanli.app.errors import Invalid
from suanli.domain.billing.money import to_epoch_s

MAX_IDEMPOTENCY_KEY = 200  # characters of an Idempotency-Key header


def new_id(prefix: str) -> str:
    return f"{prefix}_{secrets.token_hex(8)}"


def derived_id(prefix: str, *parts: str) -> str:
    """An id that follows from `parts` (an idempotency key and its owner, an offer): the same parts, the same
    id, so a repeated request finds what the first one made."""
    return f"{prefix}_{hashlib.sha256(chr(0).join(parts).encode()).hexdigest()[:16]}"


def check_idempotency_key(key: str | None) -> None:
    """Invalid (naming the header) unless `key` is absent or 1 to `MAX_IDEMPOTENCY_KEY` characters."""
    if key is not None and not 0 < len(key) <= MAX_IDEMPOTENCY_KEY:
        raise Invalid(f"1 to {MAX_IDEMPOTENCY_KEY} characters", field="Idempotency-Key")


def new_secret() -> str:
    return f"sk_{secrets.token_urlsafe(32)}"


def digest(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def as_utc(moment: datetime) -> datetime:
    """An aware UTC datetime (a naive one is taken as UTC)."""
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)


def upcoming_window(starts_at: datetime, ends_at: datetime, now: datetime) -> tuple[datetime, datetime]:
    """[starts_at, ends_at), UTC; Invalid (naming `ends_at`) unless it ends after now and at least a second
    after it starts, in whole seconds too (contracts are priced and held by the second)."""
    starts_at, ends_at = as_utc(starts_at), as_utc(ends_at)
    if ends_at <= starts_at:
        raise Invalid("must be after the start", field="ends_at")
    if ends_at - starts_at < timedelta(seconds=1) or to_epoch_s(ends_at) <= to_epoch_s(starts_at):
        raise Invalid(
            "must be at least a second after the start (windows are in whole seconds)", field="ends_at"
        )
    if ends_at <= now:
        raise Invalid("the window has already ended", field="ends_at")
    return starts_at, ends_at


class SystemClock:
    def now(self) -> datetime:
        return datetime.now(UTC)
