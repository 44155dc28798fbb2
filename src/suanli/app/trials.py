"""The dry run: what a scheduling cycle would do now with one more rental (`Scheduler.trial`); nothing is
kept."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import TYPE_CHECKING

from suanli.app.fair_share_keeping import gpus_by_tenant
from suanli.app.records import Rental, Trial
from suanli.app.waiting import shown_start
from suanli.domain.plan import Reason
from suanli.domain.queueing import CycleDecision, Gates
from suanli.domain.request import Request
from suanli.domain.running import Running

if TYPE_CHECKING:
    from suanli.app.scheduling import Scheduler


class Trials:
    """`Scheduler.trial` and its steps, a part of the `Scheduler` (its snapshot, lock and decision)."""

    def trial(self: Scheduler, rental: Rental) -> Trial:
        """What a cycle would do now with `rental` (not stored) added to the pending queue: where it would
        start, whom it would preempt, or why it would wait (capacity, a blocked head it may not pass, its
        tenant's limits, contracts held for others, maintenance ahead), under the server's queue, taken in its
        order with the rentals waiting. Nothing is kept: the decision's placements are taken back off the
        snapshot, and no queue state (head, fair share) changes."""
        with self._lock:
            try:
                return self._trial(rental)
            except BaseException:
                self.live.drop()  # it may still hold the trial's placements: rebuilt at the next cycle
                raise

    def _trial(self: Scheduler, rental: Rental) -> Trial:
        now = self.clock.now()
        with self.uow() as uow:
            version, fleet = self.cache.load(uow)
            if fleet is None:
                return Trial((), 0, Reason.NO_CAPACITY.value, "no fleet: no agent has registered", 0)
            pending = uow.rentals.pending()  # before the windows, as the cycle reads them
            self.windows = uow.maintenance.list(now)
            self.live.refresh(uow, fleet, version, now, self.windows)
            preempting = uow.rentals.preempting()
        assert self.snapshot is not None and self.policy is not None
        now_s = now.timestamp()
        live, _ = self._running()
        running = [r for r, _ in live.values()]
        queue = [*pending, rental]
        # preemptors whose victims have notice keep what they were promised (their victims, still on the
        # snapshot, leave it to them in the cycle at their deadline)
        owed = {v.preempted_by for v in preempting if v.preempted_by is not None}
        with self.uow() as uow:
            gates = self._gates(uow, queue, live, now_s)
            weights = uow.terms.fair_share_weights()
            fair, _ = self._fair_share_at(uow, now_s, gpus_by_tenant(running))
        decision, requests = self._decide(queue, owed, running, gates, weights, fair, now_s)
        try:
            return self._trial_outcome(rental, decision, requests, running, gates, now, len(pending))
        finally:
            for placement in reversed(decision.placements):
                self.snapshot.unplace(placement)  # MIG instances it would have made go, those it broke return

    def _trial_outcome(
        self: Scheduler,
        rental: Rental,
        decision: CycleDecision,
        requests: Sequence[Request],
        running: Sequence[Running],
        gates: Gates | None,
        now: datetime,
        waiting: int,
    ) -> Trial:
        """`rental`'s part of a trial's `decision` (its placements still on the snapshot): where it starts and
        at what rate, whom it gives notice to, or why it waits, and the start the queue would show for it (it
        heads the queue, or is booked) or for the blocked head it waits behind."""
        assert self.snapshot is not None
        now_s = now.timestamp()
        mine = [p for p in decision.placements if p.request_id == rental.id]
        victims = sum(len(p.victims) for p in decision.preemptions if p.preemptor == rental.id)
        if mine or victims:  # priced where it starts, or where it is promised (it is placed there then)
            where = (
                mine[0]
                if mine
                else next(p.promised for p in decision.preemptions if p.preemptor == rental.id)
            )
            with self.uow() as uow:
                price, quoted = self._price(uow, rental, where, now)
            covered = int((quoted or {}).get("contract_covered_gpu_milli") or 0)
            nodes = tuple(a.node for p in mine for a in p.nodes)
            return Trial(nodes, 0 if mine else victims, None, None, waiting, price, covered, gpus=where.gpus)
        head_start_s = decision.head_start_s
        if decision.head is not None and head_start_s is None:
            ahead = () if gates is None else gates.maintenance
            found = self._head_start(decision.head, requests, running, decision.placements, now_s, ahead)
            head_start_s = None if found is None else found[0]
        starts = {b.request_id: b.start_s for b in decision.bookings}
        if decision.head is not None and head_start_s is not None:
            starts.setdefault(decision.head, head_start_s)
        own_start_s = starts.get(rental.id)
        # the last reason given it, as the cycle records them in order (an elastic one gated at its full size
        # is gated again at its smaller ones)
        pending = [p for p in decision.pending if p.request_id == rental.id][-1]
        (held,) = self._maintenance_reasons([pending], {r.id: r for r in requests}, now_s)
        behind = held.reason is Reason.BLOCKED_BY_HEAD and own_start_s is None  # not a limit or a window
        behind_s = head_start_s if behind and decision.head not in (None, rental.id) else None
        return Trial(
            (),
            0,
            held.reason.value,
            held.message,
            waiting,
            expected_start_at=None if own_start_s is None else shown_start(own_start_s),
            head_start_at=None if behind_s is None else shown_start(behind_s),
        )
