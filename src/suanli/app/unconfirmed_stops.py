"""Stops whose agents have not confirmed them within `STOP_CONFIRM_S`: billed no further (`app/usage.py`), and
the scheduler no longer counts on their GPUs freeing now; the tenant is told once per stop."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta

from suanli.app.ports import UnitOfWork
from suanli.app.records import STOP_CONFIRM_S, Rental, RentalEvent


def overdue_stops(uow: UnitOfWork, live: Sequence[Rental], now: datetime) -> dict[str, datetime]:
    """Of `live`, the `stopping` rentals whose stop was asked more than `STOP_CONFIRM_S` before `now`, with
    when it was asked (their latest `stopping` event)."""
    overdue = {}
    for rental in live:
        if rental.state != "stopping":
            continue
        asked = max((e.at for e in uow.rentals.events(rental.id) if e.kind == "stopping"), default=None)
        if asked is not None and now - asked > timedelta(seconds=STOP_CONFIRM_S):
            overdue[rental.id] = asked
    return overdue


def tell_overdue_stop(uow: UnitOfWork, rental_id: str, asked: datetime, now: datetime) -> None:
    """Say once per stop (asked at `asked`) that its agents are overdue to confirm it: billed no further, its
    GPUs held."""
    if any(e.kind == "stop_overdue" and e.at >= asked for e in uow.rentals.events(rental_id)):
        return
    until = asked + timedelta(seconds=STOP_CONFIRM_S)
    message = (
        f"its agents have not confirmed the stop asked at {asked:%Y-%m-%d %H:%M:%S} UTC: billed to "
        f"{until:%H:%M:%S} UTC and no further; its GPUs stay held until they confirm it or its node is "
        "declared down"
    )
    uow.rentals.add_event(rental_id, RentalEvent(now, "stop_overdue", None, message))
