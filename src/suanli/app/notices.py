"""Preemption notices whose preemptor has left: withdrawn, so their victims run on.

A victim under notice is killed at its deadline for the rental it was preempted for. When that rental is
stopped before the deadline (it no longer waits), nobody needs the capacity: the notice is withdrawn and
the victim goes back to the state it had (`state_before_notice`), its deadline cleared; its agent deletes
the notice file and no longer kills it. Notices for a spot bid below the floor or for maintenance stand:
their cause has not left.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from datetime import datetime

from suanli.app.maintenance import MAINTENANCE
from suanli.app.ports import UnitOfWork
from suanli.app.records import PREEMPTIBLE_STATES, Rental, RentalEvent
from suanli.app.spot_repricing import BELOW_FLOOR

WITHDRAWN = "notice_withdrawn"  # the reason of the event that records a withdrawn notice


def abandoned(preempting: Sequence[Rental], waiting: Collection[str], now: datetime) -> list[Rental]:
    """Victims whose notice runs on past `now` for a preemptor that no longer waits (not in `waiting`)."""
    return [
        victim
        for victim in preempting
        if victim.preempted_by not in (None, BELOW_FLOOR, MAINTENANCE)
        and victim.preempted_by not in waiting
        and victim.notice_deadline is not None
        and victim.notice_deadline > now
    ]


def state_before_notice(events: Sequence[RentalEvent]) -> str:
    """The state a rental had when it got its last notice, from its events; `running` when none says."""
    state, before = "running", None
    for event in events:
        if event.kind == "preempting":
            before = state
        elif event.kind in PREEMPTIBLE_STATES:  # placed, or its agent's reports (a withdrawal's too)
            state = event.kind
    return before or state


def withdraw(uow: UnitOfWork, victim: Rental, now: datetime) -> bool:
    """Withdraw `victim`'s notice (in `uow`); False when it is no longer under notice."""
    state = state_before_notice(uow.rentals.events(victim.id))
    if not uow.rentals.set_state(victim.id, state, expect=("preempting",), reason=None):
        return False
    message = "notice withdrawn: the rental it was preempted for was stopped before the deadline"
    uow.rentals.add_event(victim.id, RentalEvent(now, state, WITHDRAWN, message))
    return True
