"""The cycle's word to the rentals still waiting: each one's pending reason and message, and the start it is
expected at (a booking's, the blocked head's, a preemptor's), written only when they change."""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from suanli.app.notices import named_for
from suanli.app.ports import UnitOfWork
from suanli.app.records import EXPECTED_START_STEP_S, Rental, RentalEvent
from suanli.domain.plan import Pending, Placement, Reason
from suanli.domain.preemption import Preemption

if TYPE_CHECKING:
    from suanli.app.scheduling import CycleReport, Scheduler


# a shown start is rewritten when the estimate moves this much later (less is rounding between cycles)
LATER_START_S = 1.0


class Waiting:
    """Telling pending rentals why they wait and when they start, a part of the `Scheduler`."""

    def _tell_waiting(
        self: Scheduler,
        uow: UnitOfWork,
        by_id: Mapping[str, Rental],  # the queue, by id
        placements: Sequence[Placement],
        still: Sequence[Pending],
        notices: Sequence[Preemption],
        waiting_on: Mapping[str, list[Rental]],
        ready: Collection[str | None],
        report: CycleReport,
        now: datetime,
    ) -> None:
        """Grow what the resizes ask for (off what preemptors are owed), then tell each rental still
        waiting why (a preemptor, whom it waits for) and when it is expected to start; a promise kept past
        its victims' leaving is forgotten."""
        pending = list(by_id.values())
        report.grown = self._resize(uow, now, self._owed_promises(pending, waiting_on, notices))
        noticed = {p.preemptor for p in notices}
        # one reason per rental: the cycle tries an elastic one at each of its sizes, each saying why it
        # waits; the last (its least size) is its reason (an event for each was a flood, and one flapping)
        last = {waiting.request_id: waiting for waiting in still}
        for waiting in last.values():
            if waiting.request_id in noticed:
                report.pending[Reason.PREEMPTING.value] += 1
                continue
            report.pending[waiting.reason.value] += 1
            self._set_reason(uow, by_id[waiting.request_id], waiting.reason, waiting.message, now)
        for preemptor_id, victims in waiting_on.items():
            if preemptor_id in by_id:
                report.pending[Reason.PREEMPTING.value] += 1
                preemptor = by_id[preemptor_id]
                named = named_for(preemptor.tenant_id, [(v.id, v.tenant_id) for v in victims])
                self._set_reason(uow, preemptor, Reason.PREEMPTING, f"waiting for {named} to leave", now)
        placed_ids = {p.request_id for p in placements}
        owed = set(ready) | waiting_on.keys() | noticed
        for rental in pending:
            if rental.promise is not None and rental.id not in owed | placed_ids:
                uow.rentals.set_promise(rental.id, None)
        promised_s = {  # a preemptor starts when its last victim leaves, by its deadline at the latest
            preemptor_id: max(v.notice_deadline.timestamp() for v in victims if v.notice_deadline)
            for preemptor_id, victims in waiting_on.items()
            if any(v.notice_deadline for v in victims)
        }
        promised_s.update((d.preemptor, d.deadline_s) for d in notices)
        unplaced = [r for r in pending if r.id not in placed_ids]
        self._record_expected_start(uow, unplaced, promised_s)

    @staticmethod
    def _owed_promises(
        pending: Sequence[Rental], waiting_on: Mapping[str, Sequence[Rental]], notices: Sequence[Preemption]
    ) -> list[Placement]:
        """Where capacity is promised to preemptors whose victims still have notice: recorded promises and
        this cycle's."""
        owed = [Placement(r.id, r.promise) for r in pending if r.id in waiting_on and r.promise]
        return owed + [decision.promised for decision in notices]

    def _record_expected_start(
        self: Scheduler, uow: UnitOfWork, pending: Sequence[Rental], promised_s: Mapping[str, float]
    ) -> None:
        """Show each booked start (the blocked head's under backfill, every booking under the conservative
        queue) and each preemptor's (`promised_s`: its victims' last deadline) on its rental and on no other.
        The estimates are worked out again every cycle; one is written when it moves later (a start shown is
        one by which it starts: a later arrival ranked ahead, or an overrun, must not leave an earlier one
        shown), or earlier by `EXPECTED_START_STEP_S` or more (a start that comes sooner is no broken
        promise, and rewriting it at every cycle's jitter would be a write a cycle)."""
        starts = {**promised_s, **self.booked_s}
        if self.head is not None and self.head_start_s is not None:
            starts.setdefault(self.head, self.head_start_s)
        for rental in pending:
            start_s = starts.get(rental.id)
            wanted = None if start_s is None else shown_start(start_s)
            held = self.head_nodes if rental.id == self.head else self.booked_nodes.get(rental.id, ())
            nodes = tuple(sorted(held)) if wanted is not None else ()
            shown = rental.expected_start_at
            if wanted is None or shown is None:
                moved = wanted is not shown
            else:
                later_s = (wanted - shown).total_seconds()
                moved = later_s >= LATER_START_S or -later_s >= EXPECTED_START_STEP_S
            if moved or nodes != rental.reserved_nodes:
                uow.rentals.set_expected_start(rental.id, wanted, nodes)

    @staticmethod
    def _set_reason(uow: UnitOfWork, rental: Rental, reason: Reason, message: str, now: datetime) -> None:
        """Keep a pending rental's reason and message current: a `pending` event only when the reason changes
        (the figures in a message move, a spend cap's money every cycle: an event each time was a flood), the
        message rewritten whenever its text changes, and nothing written when neither did."""
        if rental.pending_reason != reason.value:
            if uow.rentals.set_state(
                rental.id, "pending", expect=("pending",), reason=reason, message=message
            ):  # no event for a rental that left pending meanwhile
                uow.rentals.add_event(rental.id, RentalEvent(now, "pending", reason, message))
        elif rental.pending_message != message:
            uow.rentals.set_pending_message(rental.id, message)  # one that left pending is left alone


def shown_start(start_s: float) -> datetime | None:
    """A booked start as a time to show, or None when it lies beyond what a date holds (the year 9999): a
    start that far off is unknown, and must not fail the cycle for everyone."""
    try:
        return datetime.fromtimestamp(start_s, UTC)
    except (OverflowError, OSError, ValueError):
        return None
