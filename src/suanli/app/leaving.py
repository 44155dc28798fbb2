"""The rentals under notice as a leader's cycle finds them (`under_notice`): notices whose cause has gone,
withdrawn; the victims due (deadline passed, or they left: the heartbeat moved the deadline to then); whom
each preemptor still waits for. Then the due ones ended, after the decision (`end_due`)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

from suanli.app.maintenance import MAINTENANCE
from suanli.app.notices import (
    OUTRANKED_NO_MORE,
    STARTED_ELSEWHERE,
    abandoned,
    end_victim,
    noticed_for_a_rental,
    outranked_no_more,
    stop_asked,
    stop_victim,
    trim_victim,
    withdraw,
)
from suanli.app.ports import UnitOfWork
from suanli.app.records import LIVE_STATES, Rental
from suanli.domain.plan import NodeAllocation


@dataclass(frozen=True, slots=True)
class Leaving:
    """The rentals under notice in a cycle."""

    due: list[Rental]  # deadline passed (or their workload ended: the heartbeat moved the deadline to then)
    # of those, stopped by their tenants under notice: they end `stopped`, whole, never requeued
    asked: set[str]
    waiting_on: dict[str, list[Rental]]  # preemptor -> its victims still under notice
    deadlines: list[datetime]  # of the victims still under notice
    withdrawn: int  # notices withdrawn (their preemptor left, or outranks them no more): commit them

    @property
    def ready(self) -> set[str | None]:
        """Preemptors whose victims have all left: they take the freed capacity first."""
        return {v.preempted_by for v in self.due}.difference(self.waiting_on)


def _why_left(uow: UnitOfWork, victim: Rental) -> str | None:
    """Why `victim`'s preemptor no longer waits, when it was not stopped: it started elsewhere."""
    preemptor = uow.rentals.get(victim.preempted_by or "")
    return STARTED_ELSEWHERE if preemptor is not None and preemptor.state in LIVE_STATES else None


DRAINED_UNDER_NOTICE = (
    "its node was drained, so the rental it was preempted for cannot take its GPUs; it keeps them"
)


def on_drained_nodes(uow: UnitOfWork, preempting: Sequence[Rental], now: datetime) -> list[Rental]:
    """Victims under notice for a rental whose every node an operator drained since (or its agent went down):
    their preemptor could not be placed there, so they would be killed for nothing (its promise is found
    anew elsewhere)."""
    noticed = [
        v
        for v in preempting
        if noticed_for_a_rental(v)
        and v.notice_deadline is not None
        and v.notice_deadline > now
        and v.notice_keeps is None
    ]
    if not noticed:
        return []
    drained = uow.fleet.cordoned()
    return [
        victim
        for victim in noticed
        if (nodes := {a.node for a in uow.rentals.allocation(victim.id)}) and nodes <= drained
    ]


def cancelled_maintenance(uow: UnitOfWork, preempting: Sequence[Rental], now: datetime) -> list[Rental]:
    """Victims given notice for a maintenance window on one of their nodes that no window there still
    backs (the operator cancelled it): a notice whose cause has gone, as a preemptor's that left."""
    noticed = [v for v in preempting if v.preempted_by == MAINTENANCE and v.notice_deadline is not None]
    if not noticed:
        return []
    windows = uow.maintenance.list(now)
    gone = []
    for victim in noticed:
        nodes = {allocation.node for allocation in uow.rentals.allocation(victim.id)}
        deadline = victim.notice_deadline
        assert deadline is not None
        if not any(w.node in nodes and w.starts_at <= deadline for w in windows):
            gone.append(victim)
    return gone


def under_notice(
    uow: UnitOfWork,
    pending: Sequence[Rental],
    now: datetime,
    reserved_for: Callable[[], Callable[[Rental, Rental], bool]],
) -> Leaving:
    """The rentals under notice at `now`, with `pending` the queue, the notices whose preemptor left or no
    longer outranks its victim withdrawn (not committed); `reserved_for` gives whether an open contract of a
    preemptor's tenant covers a victim (asked only when someone has notice: it reads the contracts)."""
    preempting = uow.rentals.preempting()
    asked = {
        v.id
        for v in preempting
        if v.notice_deadline is not None and v.notice_deadline <= now and stop_asked(uow.rentals.events(v.id))
    }
    left = [v for v in abandoned(preempting, {r.id for r in pending}, now) if v.id not in asked]
    withdrawn = [victim for victim in left if withdraw(uow, victim, now, _why_left(uow, victim))]
    for victim in cancelled_maintenance(uow, [v for v in preempting if v.id not in asked], now):
        if withdraw(uow, victim, now, "its node's maintenance window was cancelled; it runs on"):
            withdrawn.append(victim)
    for victim in on_drained_nodes(uow, [v for v in preempting if v.id not in asked and v not in left], now):
        if withdraw(uow, victim, now, DRAINED_UNDER_NOTICE):
            withdrawn.append(victim)
    if preempting:
        by_pending = {r.id: r for r in pending}
        skip = asked | {v.id for v in left}
        for victim in outranked_no_more(preempting, by_pending, reserved_for()):
            if victim.id not in skip and withdraw(uow, victim, now, OUTRANKED_NO_MORE):
                withdrawn.append(victim)
    preempting = [v for v in preempting if v not in withdrawn]
    due = [v for v in preempting if v.notice_deadline is None or v.notice_deadline <= now]
    waiting_on: dict[str, list[Rental]] = {}
    for victim in preempting:
        if victim not in due and victim.preempted_by is not None:
            waiting_on.setdefault(victim.preempted_by, []).append(victim)
    deadlines = [v.notice_deadline for v in preempting if v not in due and v.notice_deadline is not None]
    return Leaving(due, asked, waiting_on, deadlines, len(withdrawn))


@dataclass
class Ended:
    """What ending a cycle's due victims did."""

    stopped: int = 0  # stopped by their tenants under notice, capacity handed over
    preempted: int = 0  # ended (or re-queued), capacity handed over
    trimmed: int = 0  # gave back part of their GPUs and ran on
    changed: bool = False  # a trim found its victim changed: the snapshot must be rebuilt


def end_due(
    uow: UnitOfWork,
    leaving: Leaving,
    by_id: Mapping[str, Rental],
    now: datetime,
    book: Callable[[str, Sequence[NodeAllocation]], None],
) -> Ended:
    """End the victims whose deadline passed: `stopped` (their tenants asked), trimmed (they run on with
    what they keep, booked with `book`) or preempted (re-queued when they checkpoint)."""
    ended = Ended()
    for victim in leaving.due:
        if victim.id in leaving.asked:
            ended.stopped += stop_victim(uow, victim, now)
            continue
        if victim.notice_keeps is not None:
            trimmed = trim_victim(uow, victim, now, book)
            ended.changed = ended.changed or not trimmed
            ended.trimmed += trimmed
            continue
        preemptor = by_id.get(victim.preempted_by or "")
        same_tenant = preemptor is not None and preemptor.tenant_id == victim.tenant_id
        ended.preempted += end_victim(uow, victim, now, same_tenant)
    return ended
