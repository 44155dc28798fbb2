"""The leader's scheduling cycle: (1) load, (2) decide with the domain scheduler, (3) apply in one step.

The snapshot stays in memory between cycles. Each cycle first syncs it with the database (rentals stopped or
shrunk since, drained nodes, bookings made elsewhere); a new fleet version, a first cycle or a refused apply
rebuilds it from the database. A placement is applied only if its rental is still pending; if the database
refuses a booking (UNIQUE on the slice position), the whole plan is dropped and the snapshot rebuilt. Spot
rentals are re-priced at the end of a cycle (`app/spot_repricing.py`).
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from types import MappingProxyType

from suanli.app.booking import bookings_for
from suanli.app.downtime import maintenance_reasons, notice_horizon_s
from suanli.app.errors import BookingConflict
from suanli.app.fleet import FleetCache
from suanli.app.growth import Held, held_request, holding_after, started_smaller, wants_resize
from suanli.app.leaving import Leaving, end_due, under_notice
from suanli.app.limits import coverage_micros, cycle_limits
from suanli.app.list_prices import list_price
from suanli.app.live_snapshot import LiveSnapshot
from suanli.app.maintenance import give_notices, upcoming
from suanli.app.notices import give_notice, named_for, requeued
from suanli.app.ports import Clock, UnitOfWork, UnitOfWorkFactory
from suanli.app.records import (
    EXPECTED_START_STEP_S,
    PREEMPTIBLE_STATES,
    MaintenanceWindow,
    Rental,
    RentalEvent,
    Trial,
    domain_contract,
)
from suanli.app.rentals import per_node_gpus, time_limit_s, to_request
from suanli.app.resizing import Resizer
from suanli.app.spot_repricing import (
    FloorCheck,
    Pricer,
    Repricer,
    SpotFloors,
    SpotRepricing,
    pool_utilization,
)
from suanli.app.unconfirmed_stops import overdue_stops, tell_overdue_stop
from suanli.domain.capacity import FULL_MILLI
from suanli.domain.catalog import Catalog
from suanli.domain.contracts import Contract
from suanli.domain.elastic_start import Drain, at_size, least_size
from suanli.domain.fair_share import FairShare
from suanli.domain.inventory import Fleet
from suanli.domain.plan import NodeAllocation, Pending, Placement, Reason
from suanli.domain.policies import Policy
from suanli.domain.preemption import DEFAULT_NOTICE_S, Preemption, PreemptionConfig
from suanli.domain.promise_holds import hold_promise
from suanli.domain.queue_order import GREEDY_QUEUE, QueueConfig
from suanli.domain.queueing import CycleDecision, Gates, admit
from suanli.domain.quotas import Limits
from suanli.domain.rendezvous import free_master_port
from suanli.domain.request import Request, Tier
from suanli.domain.reservation import reserve
from suanli.domain.running import Running
from suanli.domain.scattered import scattered_gpus
from suanli.domain.snapshot import Snapshot

log = logging.getLogger(__name__)
# pending reasons of a rental that would start if the capacity were there (not held by a gate, not too big)
WAITING_FOR_CAPACITY = frozenset(
    {Reason.NO_CAPACITY, Reason.GANG_INCOMPLETE, Reason.BLOCKED_BY_HEAD, Reason.PREEMPTING}
)
# a shown start is rewritten when the estimate moves this much later (less is rounding between cycles)
LATER_START_S = 1.0
FAIR_SHARE_SAVE_S = 60.0  # how often the leader saves fair-share usage (a new leader loses at most this much)


STOPPING = "stopping"  # `Running.preempted_by` of a rental being stopped: not a victim, ending now


@dataclass
class CycleReport:
    placed: int = 0
    pending: Counter[str] = field(default_factory=Counter)
    decision_s: float = 0.0
    gpus: Counter[str] = field(default_factory=Counter)  # idle, partial, busy, cordoned
    dropped: bool = False
    notices: int = 0  # victims given a preemption notice
    preempted: int = 0  # victims ended at their deadline (or when they left), capacity handed over
    stopped: int = 0  # victims their tenants stopped under notice, capacity handed over (not preempted)
    trimmed: int = 0  # elastic victims that gave back part of their GPUs at their deadline and ran on
    repriced: int = 0  # live spot rentals whose rate followed their pool's spot price
    head_start_s: float | None = None  # backfill queue: the blocked head's reserved start (epoch seconds)
    scattered_gpus: float = 0.0  # free GPUs in pieces too small for every rental waiting for capacity
    grown: int = 0  # live rentals that took the more nodes a resize asked for
    withdrawn: int = 0  # victims whose notice was withdrawn: their preemptor was stopped meanwhile
    # MIG instances by (profile, "idle" or "busy") on schedulable nodes, as the snapshot lays them out
    mig_instances: Counter[tuple[str, str]] = field(default_factory=Counter)


def _recorded_head(pending: Sequence[Rental]) -> tuple[str | None, tuple[str, ...]]:
    """The head a previous leader recorded (the pending rental showing a reserved start) and the nodes it
    drained: a new leader keeps it at the front of its class and those nodes out of long backfill, so a
    change of leader does not hand its drained capacity to another."""
    shown = [r for r in pending if r.expected_start_at is not None and r.promise is None]  # not a preemptor
    if not shown:
        return None, ()
    head = min(shown, key=lambda r: (r.created_at, r.id))
    return head.id, head.reserved_nodes


class Scheduler:
    """Holds the leader's snapshot; `run_cycle` is safe to call from any thread (one cycle at a time)."""

    def __init__(
        self,
        uow: UnitOfWorkFactory,
        clock: Clock,
        catalog: Catalog,
        cache: FleetCache,
        policy: str,
        seed: int,
        *,
        notice_s: float = DEFAULT_NOTICE_S,
        notice_by_tier_s: Mapping[str, float] | None = None,
        pricer: Pricer | None = None,
        repricer: Repricer | None = None,
        floor_check: FloorCheck | None = None,
        spot_floors: SpotFloors | None = None,
        queue: QueueConfig = GREEDY_QUEUE,
    ) -> None:
        self.uow, self.clock, self.catalog, self.cache = uow, clock, catalog, cache
        # the earliest notice deadline still to come after the last cycle: the loop runs a cycle then, so a
        # preemptor starts at its victims' deadline rather than up to an interval after it
        self.next_deadline: datetime | None = None
        by_tier = {Tier.parse(name): seconds for name, seconds in (notice_by_tier_s or {}).items()}
        self.preemption = PreemptionConfig(by_tier, notice_s)
        # the server's queue (`SUANLI_QUEUE`), decided by the domain's `admit` (see `_admit`); what it keeps
        # between cycles (the blocked head, its drained nodes, fair-share usage) lives on the leader
        self.queue = replace(queue, preemption=self.preemption)
        self.fair = FairShare()
        self.fair_saved_s: float | None = None  # when the fair share in the store was saved, as last seen
        self.head: str | None = None
        # `stopping` rentals whose agents are overdue to confirm, with when the stop was asked
        self.overdue_stops: dict[str, datetime] = {}
        self.covered: dict[str, int] = {}  # live rentals a contract covers: coverage micros per hour
        # this cycle's trimmed victims at their deadline: the part each runs on with, as a live rental
        self.kept: dict[str, list[NodeAllocation]] = {}
        self.promoted: frozenset[str] = frozenset()  # the last cycle's contract claims (reserved)
        self.maintenance: tuple[tuple[str, float, float], ...] = ()  # windows to come: (node, start, end)
        self.head_start_s: float | None = None  # the blocked head's reserved start, when one was made
        self.booked_s: dict[str, float] = {}  # conservative queue: every booked start (epoch seconds)
        self.booked_nodes: dict[str, frozenset[str]] = {}  # and the nodes each booking holds
        self.reserved: tuple[str, ...] = ()
        self.head_nodes: frozenset[str] = frozenset()  # the nodes drained for the head's reserved start
        self.lent: set[str] = set()  # placed by the last decision on lent GPUs (`CycleDecision.borrowed`)
        self.scattered_gpus = 0.0  # after the last cycle: free GPUs no rental waiting for capacity fits
        self.resizing: list[Running] = []  # live rentals a resize asked to change in place (`_resize`)
        # what a growth must fit within (`_resize`): this cycle's tenant limits, open contracts, and every
        # rental as large as it is now, this cycle's placements included
        self.limits: Limits | None = None
        self.holding: list[Held] = []
        # a rigid blocked head's reserved nodes, or every booking's: what growth keeps off (`Resizer`)
        self.drain: Drain | None = None
        self.spot_yields: frozenset[tuple[str, str]] = frozenset()  # pools where spot does not grow either
        self.contracts: list[Contract] = []
        self.windows: list[MaintenanceWindow] = []  # maintenance windows still to end, as of this cycle
        self._lock = threading.Lock()
        self.pricer = pricer
        self.spot_floors = spot_floors  # a pending spot bid below its pools' floor waits (bid_below_floor)
        spot_notice_s = self.preemption.notice_for(Tier.SPOT)
        self.spot_pricing = None if repricer is None else SpotRepricing(repricer, floor_check, spot_notice_s)
        horizon_s = notice_horizon_s(self.preemption)
        self.live = LiveSnapshot(catalog, policy, seed, horizon_s, self.spot_pricing)

    @property
    def snapshot(self) -> Snapshot | None:
        return self.live.snapshot

    @property
    def policy(self) -> Policy | None:
        return self.live.policy

    @property
    def fleet(self) -> Fleet | None:
        return self.live.fleet

    def run_cycle(self) -> CycleReport:
        with self._lock:
            self.next_deadline = None  # until a cycle completes: a failing one is retried at the interval
            try:
                return self._cycle()
            except BookingConflict as error:
                log.warning("plan dropped, snapshot will be rebuilt: %s", error)
                self.live.drop()
                return CycleReport(dropped=True)
            except BaseException:
                self.live.drop()  # it may hold this cycle's decision, which the database never got
                raise

    def _cycle(self) -> CycleReport:
        now = self.clock.now()
        read = self._read(now)
        if read is None:
            return CycleReport()
        pending, leaving = read
        # a rental asked for between the clock's read and the queue's: its events (pending, placed) follow
        # its creation (a placement 9 ms before its `created` was seen); bounded, so a skewed clock elsewhere
        # moves this cycle by a second at most
        newest = max((r.created_at for r in pending), default=now)
        now = max(now, min(newest, now + timedelta(seconds=1)))
        snapshot = self.snapshot
        assert snapshot is not None and self.policy is not None
        pending = [*pending, *self._free_due(leaving, now)]
        ready = leaving.ready
        by_id = {rental.id: rental for rental in pending}
        started = time.perf_counter()
        try:
            placements, still, notices = self._admit(pending, ready, leaving.waiting_on, now.timestamp())
        finally:
            self.kept = {}
        report = CycleReport(
            decision_s=time.perf_counter() - started,
            head_start_s=self.head_start_s,
            scattered_gpus=self.scattered_gpus,
            withdrawn=leaving.withdrawn,
        )
        with self.uow() as uow:
            uow.fleet.lock_changes(shared=True)  # a fleet change waits for these bookings, or they for it
            if uow.fleet.current_version() != self.live.version:  # a node may be gone: decided on the old one
                raise BookingConflict("the fleet changed while the cycle decided")
            ended = end_due(uow, leaving, by_id, now, self._booker(uow, now))
            report.stopped, report.preempted, report.trimmed = ended.stopped, ended.preempted, ended.trimmed
            self.live.stale = self.live.stale or ended.changed  # a trim found it changed: rebuilt
            self._apply_decision(uow, by_id, placements, notices, report, now)
            self._tell_waiting(uow, by_id, placements, still, notices, leaving.waiting_on, ready, report, now)
            for rental_id, asked in sorted(self.overdue_stops.items()):
                tell_overdue_stop(uow, rental_id, asked, now)
            uow.commit()
        if self.spot_pricing is not None:
            fresh = {p.request_id for p in placements}
            report.repriced = self.spot_pricing.reprice(
                self.uow, snapshot, self.live.held, self.live.owner, self.live.pool_of_node, fresh, now
            )
        report.gpus = self.live.gpu_states()
        report.mig_instances = self.live.mig_instances()
        self.live.end_cycle()
        deadlines = leaving.deadlines + [datetime.fromtimestamp(d.deadline_s, UTC) for d in notices]
        self.next_deadline = min(deadlines, default=None)
        return report

    def _read(self, now: datetime) -> tuple[list[Rental], Leaving] | None:
        """The queue and the rentals under notice, the snapshot synced with the database, and the notices
        whose cause has gone withdrawn (committed); None without a fleet."""
        with self.uow() as uow:
            version, fleet = self.cache.load(uow)
            if fleet is None:
                return None
            # the queue before the windows: a window scheduled before a rental was asked for is then always
            # seen with it (PostgreSQL reads each statement's committed state; read the other way round, a
            # window and a rental committed between the two reads placed the rental into the window)
            pending = uow.rentals.pending()
            self.windows = uow.maintenance.list(now)
            self.live.refresh(uow, fleet, version, now, self.windows)
            leaving = under_notice(uow, pending, now, lambda: self._reserved_for(uow, now))
            if leaving.withdrawn:
                uow.commit()
        return pending, leaving

    def _free_due(self, leaving: Leaving, now: datetime) -> list[Rental]:
        """Free the capacity of the victims whose deadline passed in this decision (the apply releases it),
        but not the part a trimmed victim runs on with; the ones that checkpoint, back in the queue (the
        apply requeues them first), so they may start again now."""
        held = self.live.allocations_by_rental() if leaving.due else {}
        self.kept = {}
        for victim in leaving.due:
            self.live.forget(victim.id)
            if victim.id not in leaving.asked:
                self.live.keep(victim.notice_keeps or ())
                if victim.notice_keeps:
                    self.kept[victim.id] = list(victim.notice_keeps)
        return [
            requeued(v, held.get(v.id, ()), now)
            for v in leaving.due
            if v.spec.checkpoints and v.notice_keeps is None and v.id not in leaving.asked
        ]

    def _apply_decision(
        self,
        uow: UnitOfWork,
        by_id: Mapping[str, Rental],
        placements: Sequence[Placement],
        notices: Sequence[Preemption],
        report: CycleReport,
        now: datetime,
    ) -> None:
        """The cycle's placements (each only if its rental is still pending as it was read), its notices
        (preemption and maintenance) and the resizes that are owed; none when the fleet changed since it was
        read (BookingConflict: the plan is dropped and the snapshot rebuilt)."""
        # as they are now, their rows held: a stop or a resize committed since they were read wins
        current = {r.id: r for r in uow.rentals.by_ids([p.request_id for p in placements], lock=True)}
        for placement in placements:
            rental = by_id[placement.request_id]
            now_row = current.get(rental.id)
            changed = now_row is None or now_row.state != "pending" or now_row.spec != rental.spec
            report.placed += self._apply_placement(uow, rental, placement, now, changed)
        for decision in notices:
            reserved = decision.preemptor in self.promoted
            report.notices += give_notice(uow, by_id[decision.preemptor], decision, now, reserved)
        report.notices += self._maintenance_notices(uow, now)

    def _tell_waiting(
        self,
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

    def trial(self, rental: Rental) -> Trial:
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

    def _trial(self, rental: Rental) -> Trial:
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
            fair, _ = self._fair_share_at(uow, now_s, _gpus_by_tenant(running))
        decision, requests = self._decide(queue, owed, running, gates, weights, fair, now_s)
        try:
            return self._trial_outcome(rental, decision, requests, running, gates, now, len(pending))
        finally:
            for placement in reversed(decision.placements):
                self.snapshot.unplace(placement)  # MIG instances it would have made go, those it broke return

    def _trial_outcome(
        self,
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
            expected_start_at=None if own_start_s is None else _shown_start(own_start_s),
            head_start_at=None if behind_s is None else _shown_start(behind_s),
        )

    def _reserved_for(self, uow: UnitOfWork, now: datetime) -> Callable[[Rental, Rental], bool]:
        """Whether an open contract of a preemptor's tenant covers its victim's pool (model, region) now."""
        now_s = now.timestamp()
        open_now = [domain_contract(c) for c in uow.contracts.list(None)]
        held = {(c.tenant, c.model, c.region) for c in open_now if c.open_at(now_s)}
        where = self.live.allocations_by_rental()

        def reserved_for(preemptor: Rental, victim: Rental) -> bool:
            pools = set()
            for allocation in where.get(victim.id, ()):
                node, model = self.live.node(allocation.node)
                pools.add((preemptor.tenant_id, model.name, node.region))
            return bool(pools) and pools <= held

        return reserved_for

    def _gates(
        self,
        uow: UnitOfWork,
        pending: Sequence[Rental],
        live: Mapping[str, tuple[Running, int]],
        now_s: float,
    ) -> Gates | None:
        """What holds rentals back besides capacity: tenants' limits (with what `pending` and `live` spend),
        open contracts, maintenance ahead; None when nothing does."""
        stored = uow.contracts.list(None)
        tenants = uow.terms.limits()
        limits = None
        if tenants:
            limits = cycle_limits(uow, self.catalog, tenants, pending, live, now_s, self.covered, stored)
        contracts = [domain_contract(c) for c in stored if c.ends_at.timestamp() > now_s]
        ahead = upcoming(self.windows, datetime.fromtimestamp(now_s, UTC))
        floor_of = self._pool_floor(uow, pending, now_s)
        if not contracts and limits is None and not ahead and floor_of is None:
            return None
        return Gates(limits, contracts, spot_floor=floor_of, evict_below_floor=False, maintenance=ahead)

    def _pool_floor(
        self, uow: UnitOfWork, pending: Sequence[Rental], now_s: float
    ) -> Callable[[str, str], int | None] | None:
        """The spot floor per GPU-hour of each (model, region) pool, while spot rentals wait: a bid is placed
        only in pools whose floor it meets, and waits (`bid_below_floor`) when it meets none. A running rental
        whose bid falls below a floor raised later is `SpotRepricing`'s, with notice."""
        waiting = any(Tier.parse(r.spec.tier) is Tier.SPOT for r in pending)
        if self.spot_floors is None or not waiting:
            return None
        return self.spot_floors(uow, datetime.fromtimestamp(now_s, UTC))

    def _booker(self, uow: UnitOfWork, now: datetime) -> Callable[[str, Sequence[NodeAllocation]], None]:
        """Books allocations already on the snapshot for a rental (a trimmed victim's kept part)."""

        def book(rental_id: str, nodes: Sequence[NodeAllocation]) -> None:
            rows = bookings_for(nodes, self.live.node, uow.rentals.booked_slots)
            self.live.booked(rental_id, uow.rentals.book(rental_id, nodes, rows, at=now, extend=True), nodes)

        return book

    @staticmethod
    def _owed_promises(
        pending: Sequence[Rental], waiting_on: Mapping[str, Sequence[Rental]], notices: Sequence[Preemption]
    ) -> list[Placement]:
        """Where capacity is promised to preemptors whose victims still have notice: recorded promises and
        this cycle's."""
        owed = [Placement(r.id, r.promise) for r in pending if r.id in waiting_on and r.promise]
        return owed + [decision.promised for decision in notices]

    def _resize(self, uow: UnitOfWork, now: datetime, promised: Sequence[Placement] = ()) -> int:
        """Live rentals resized in place, from what this cycle left free (`Resizer`), never from capacity
        promised to a preemptor (held on the snapshot while the resizer runs). How many changed."""
        if not self.resizing:
            return 0
        assert self.snapshot is not None and self.policy is not None
        holds = [part for promise in promised for part in hold_promise(self.snapshot, promise)]
        try:
            return self._resize_now(uow, now)
        finally:
            for give_back, _ in reversed(holds):
                give_back()

    def _resize_now(self, uow: UnitOfWork, now: datetime) -> int:
        assert self.snapshot is not None and self.policy is not None
        resizer = Resizer(
            self.snapshot,
            self.policy,
            self.limits,
            self.holding,
            self.contracts,
            self.live.held,
            self.live.owner,
            self.live.node,
            self.drain,
            self.spot_yields,
            self.maintenance,
        )
        return resizer.apply(uow, self.resizing, now)

    def _record_expected_start(
        self, uow: UnitOfWork, pending: Sequence[Rental], promised_s: Mapping[str, float]
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
            wanted = None if start_s is None else _shown_start(start_s)
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

    def _running(self) -> tuple[dict[str, tuple[Running, int]], set[str]]:
        """The live rentals holding capacity in the snapshot, as the domain sees them (as large as they are,
        not as a resize asks), with their rate per hour (one read); and the ids of those a resize asks to
        change."""
        nodes = self.live.allocations_by_rental() | self.kept
        now = self.clock.now()
        now_s = now.timestamp()
        with self.uow() as uow:
            live = uow.rentals.by_ids(sorted(nodes))
            self.overdue_stops = overdue = overdue_stops(uow, live, now)
        running: dict[str, tuple[Running, int]] = {}
        wanted: set[str] = set()
        covered: dict[str, int] = {}  # a contract's coverage of each covered one, micros per hour
        for rental in live:
            stopping = rental.state == "stopping"
            if rental.state not in (*PREEMPTIBLE_STATES, "preempting") and not stopping:
                continue  # ended since the snapshot was synced
            deadline = rental.notice_deadline.timestamp() if rental.notice_deadline is not None else None
            # a trimmed victim at its deadline runs on with what it keeps, a live rental noticed no more
            trimmed = rental.id in self.kept
            if trimmed:
                deadline = None
            if stopping:  # its agents are stopping it: it frees what it holds now, and is no one's victim;
                # once they are overdue to confirm, when it frees them is unknown (its time limit at most)
                deadline = None if rental.id in overdue else now_s
            asked = to_request(rental)
            held = held_request(asked, nodes[rental.id])
            placed_at = rental.placed_at or rental.created_at
            if rental.time_limit_at is not None:  # it ends there at the latest (an elastic one's moves)
                held = replace(held, max_duration_s=(rental.time_limit_at - placed_at).total_seconds())
            if rental.preempted_by is None and not stopping and wants_resize(rental, held):
                wanted.add(rental.id)
            request = Running(
                held,
                Placement(rental.id, tuple(nodes[rental.id])),
                placed_at.timestamp(),
                None
                if trimmed
                else STOPPING
                if stopping and rental.preempted_by is None
                else rental.preempted_by,
                deadline,
                rental.borrowed,
                least_size(asked),  # elastic: a preemption may trim it to its least size
                None if trimmed or rental.notice_keeps is None else Placement(rental.id, rental.notice_keeps),
            )
            running[rental.id] = (request, rental.price_micros_per_hour or 0)
            if coverage := coverage_micros(rental):
                covered[rental.id] = coverage
        self.covered = covered
        return running, wanted

    def _admit(
        self, pending: Sequence[Rental], ready: set[str], waiting_on: Mapping[str, list[Rental]], now_s: float
    ) -> tuple[tuple[Placement, ...], list[Pending], tuple[Preemption, ...]]:
        """One `admit` cycle under the server's queue: fair share decays on the leader (saved for the next
        one, see `_advance_fair_share`), the blocked head keeps its place and drained nodes from one cycle to
        the next, and open contracts hold their capacity (the holder's rentals up to the count are admitted
        as `reserved`).

        Preemptors whose victims have all left (`ready`) take the freed capacity first; no one else starts
        where those still waiting on victims under notice will go, and their reason is left to the caller
        (it says whom they wait for).
        """
        assert self.snapshot is not None and self.policy is not None
        live, wanted = self._running()
        running = [r for r, _ in live.values()]
        self.resizing = [r for r in running if r.request.id in wanted]
        with self.uow() as uow:
            gates = self._gates(uow, pending, live, now_s)
            weights = uow.terms.fair_share_weights()
            self._advance_fair_share(uow, now_s, _gpus_by_tenant(running))
        owed = ready | waiting_on.keys()  # preemptors: their victims have left, or still have notice
        decision, queue = self._decide(pending, owed, running, gates, weights, self.fair, now_s)
        self.head, self.reserved = decision.head, decision.reserved_nodes
        self.lent = set(decision.borrowed)
        self.spot_yields = decision.spot_yields
        self.promoted = frozenset(decision.promoted)  # contracts' claims, admitted as reserved
        self.resizing += started_smaller(queue, decision.placements, now_s)
        self.limits = None if gates is None else gates.limits
        self.holding = holding_after(running, queue, decision.placements) if self.resizing else []
        self.contracts = [] if gates is None else list(gates.contracts)
        self.maintenance = () if gates is None else tuple(gates.maintenance)
        self.head_start_s = decision.head_start_s
        self.booked_s = {b.request_id: b.start_s for b in decision.bookings}
        self.booked_nodes = {b.request_id: b.nodes for b in decision.bookings}
        drained = frozenset(self.reserved)
        if self.head is not None and self.head_start_s is None:
            ahead = () if gates is None else gates.maintenance
            found = self._head_start(self.head, queue, running, decision.placements, now_s, ahead)
            if found is not None:
                self.head_start_s, drained = found[0], frozenset(a.node for a in found[1].nodes)
        self.head_nodes = drained
        still = [p for p in decision.pending if p.request_id not in waiting_on]
        requests = {r.id: r for r in queue}
        head = requests.get(self.head or "")
        if decision.bookings:  # the conservative queue: every booking is a promised start
            self.drain = Drain.for_bookings(decision.bookings)
        elif head is not None and head.min_gpus is None and drained:  # backfill: a rigid head's drain
            self.drain = Drain.for_head(drained, self.head_start_s)
        else:
            self.drain = None
        waiting = [requests[p.request_id] for p in still if p.reason in WAITING_FOR_CAPACITY]
        self.scattered_gpus = scattered_gpus(
            self.snapshot, waiting, drained
        )  # the head's, worked out here too
        return decision.placements, self._maintenance_reasons(still, requests, now_s), decision.preemptions

    def _decide(
        self,
        pending: Sequence[Rental],
        owed: Collection[str],
        running: Sequence[Running],
        gates: Gates | None,
        weights: Mapping[str, float] | None,
        fair: FairShare,
        now_s: float,
    ) -> tuple[CycleDecision, list[Request]]:
        """One `admit` of `pending` under the server's queue, on the snapshot, as the cycle decides it (and
        the dry run, with its rental added): `owed` preemptors take their promised capacity first, and the
        blocked head (this leader's, or the one a previous leader recorded) keeps its place and drained nodes.
        Only the snapshot changes (the decision's placements are on it); the requests come back with it."""
        assert self.snapshot is not None and self.policy is not None
        queue = [to_request(r) for r in pending]
        # where each was promised capacity, as recorded with the notice (by this leader or the last)
        promises = {r.id: Placement(r.id, r.promise) for r in pending if r.id in owed and r.promise}
        recorded_head, recorded_nodes = _recorded_head(pending) if self.head is None else (None, ())
        decision = admit(
            self.snapshot,
            queue,
            running,
            self.policy,
            now_s,
            replace(self.queue, weights=weights) if weights else self.queue,
            fair,
            {rental_id: promises.get(rental_id) for rental_id in owed},
            gates,
            last_head=self.head if self.head is not None else recorded_head,
            last_reserved=self.reserved if self.head is not None else recorded_nodes,
        )
        return decision, queue

    def _maintenance_reasons(
        self, still: Sequence[Pending], requests: Mapping[str, Request], now_s: float
    ) -> list[Pending]:
        """`still`, with `maintenance` named where windows, not busy capacity, keep a request waiting."""
        assert self.snapshot is not None and self.policy is not None
        now = datetime.fromtimestamp(now_s, UTC)
        live, windows = self.live, self.windows
        return maintenance_reasons(
            still, requests, self.snapshot, self.policy, windows, live.drained, live.notice_horizon_s, now
        )

    def _head_start(
        self,
        head_id: str,
        queue: Sequence[Request],
        running: Sequence[Running],
        placed: Sequence[Placement],
        now_s: float,
        maintenance: Sequence[tuple[str, float, float]] = (),
    ) -> tuple[float, Placement] | None:
        """The blocked head's (`head_id`) reserved start, and where, when `admit` did not need it (nothing
        could backfill): for the tenant to read, and for growth to keep off; the rentals placed in this cycle
        count as running from now."""
        assert self.snapshot is not None and self.policy is not None
        by_id = {r.id: r for r in queue}
        head = by_id.get(head_id)
        if head is None:
            return None
        started = [
            Running(at_size(by_id[p.request_id], p.gpus), p, now_s) for p in placed if p.request_id in by_id
        ]
        found = reserve(
            self.snapshot,
            head,
            [*running, *started],
            self.policy,
            now_s,
            spare_free=self.queue.spare_free,
            maintenance=maintenance,
        )
        return found

    def _advance_fair_share(self, uow: UnitOfWork, now_s: float, held: Mapping[str, float]) -> None:
        """Fair share as of `now_s` (`_fair_share_at`), saved every `FAIR_SHARE_SAVE_S` for the next
        leader."""
        self.fair, self.fair_saved_s = self._fair_share_at(uow, now_s, held)
        if self.fair_saved_s is None or now_s - self.fair_saved_s >= FAIR_SHARE_SAVE_S:
            usage = {t: u for t, u in self.fair.usage_gpu_s.items() if u >= 1.0}  # below 1 GPU-s: forgotten
            uow.terms.save_fair_share(usage, datetime.fromtimestamp(now_s, UTC))
            uow.commit()
            self.fair_saved_s = now_s

    def _fair_share_at(
        self, uow: UnitOfWork, now_s: float, held: Mapping[str, float]
    ) -> tuple[FairShare, float | None]:
        """Fair share as of `now_s`: read back when another leader saved since (or on the first cycle),
        decayed with the GPUs each tenant holds; and when the store's was saved, as last seen. Nothing is kept
        or written (the dry run asks too)."""
        fair, seen_s = self.fair, self.fair_saved_s
        saved_at = uow.terms.fair_share_saved_at()
        saved_s = None if saved_at is None else saved_at.timestamp()
        if saved_s is not None and (seen_s is None or abs(saved_s - seen_s) > 1e-3):
            fair = FairShare(MappingProxyType(uow.terms.fair_share()), saved_s, fair.half_life_s)
            seen_s = saved_s
        if not fair.at_s:
            fair = FairShare(at_s=now_s, half_life_s=fair.half_life_s)
        return fair.advance(now_s, held), seen_s

    def _maintenance_notices(self, uow: UnitOfWork, now: datetime) -> int:
        """Notice to the rentals on nodes whose maintenance window is near (`maintenance.give_notices`)."""
        if not self.windows:
            return 0
        return give_notices(uow, self.windows, self.live.nodes_of(), self.preemption, now)

    def _apply_placement(
        self, uow: UnitOfWork, rental: Rental, placement: Placement, now: datetime, changed: bool = False
    ) -> int:
        """Book `placement` for `rental` unless it was `changed` (stopped or resized) or left pending since it
        was read; 1 if booked."""
        assert self.snapshot is not None
        if changed:
            return self.live.unplace(placement)
        price, quoted = self._price(uow, rental, placement, now)
        limit_s = time_limit_s(rental, placement.gpus)
        time_limit_at = None if limit_s is None else now + timedelta(seconds=limit_s)
        borrowed = rental.id in self.lent
        port = free_master_port(rental.id, uow.rentals.master_ports_on([a.node for a in placement.nodes]))
        size = (len(placement.nodes), per_node_gpus(placement.nodes))
        if not uow.rentals.mark_placed(
            rental.id,
            now,
            price,
            quoted,
            time_limit_at=time_limit_at,
            borrowed=borrowed,
            master_port=port,
            size=size,
        ):
            return self.live.unplace(placement)
        rows = bookings_for(placement.nodes, self.live.node, uow.rentals.booked_slots)
        allocation_ids = uow.rentals.book(rental.id, placement.nodes, rows, at=now)
        nodes = ", ".join(a.node for a in placement.nodes)
        lent = "; borrowed: taken back with notice when a rental ahead of it needs them" if borrowed else ""
        uow.rentals.add_event(rental.id, RentalEvent(now, "placed", None, f"on {nodes}{lent}"))
        self.live.booked(rental.id, allocation_ids, placement.nodes)
        if self.spot_pricing is not None:
            self.spot_pricing.placed(rental)
        return 1

    def _price(
        self, uow: UnitOfWork, rental: Rental, placement: Placement, now: datetime
    ) -> tuple[int, dict | None]:
        """The rate `rental` pays on `placement` (on the snapshot now) and its quote: the pricer's (price
        book, spot price at the pool's utilization, plan, contract), else the list prices of its slices."""
        assert self.snapshot is not None
        if self.pricer is not None:
            placed = [self.live.pool_of_node(a.node) for a in placement.nodes]
            rental = held_spec(rental, placement)  # an elastic one started smaller pays for what it holds
            spot = Tier.parse(rental.spec.tier) is Tier.SPOT
            utilization = pool_utilization(self.snapshot, placed) if spot else {}
            quoted = self.pricer(uow, rental, placed, utilization, now)
            return int(quoted["final_micros_per_hour"]), quoted
        price = sum(
            piece.milli * list_price(self.live.node(a.node)[1], rental.spec.tier) // FULL_MILLI
            for a in placement.nodes
            for piece in a.slices
        )
        return price, None


def _gpus_by_tenant(running: Sequence[Running]) -> dict[str, float]:
    """The GPUs each tenant holds now (what its fair-share usage grows by)."""
    held: dict[str, float] = {}
    for r in running:
        held[r.request.tenant] = held.get(r.request.tenant, 0.0) + r.gpus
    return held


def held_spec(rental: Rental, placement: Placement) -> Rental:
    """`rental` with its spec's GPUs per node as `placement` holds them (an elastic rental started on fewer
    than it asks for; its nodes are the placement's), for its price."""
    spec, first = rental.spec, placement.nodes[0] if placement.nodes else None
    if spec.min_gpus is None or first is None or spec.mig_profile or spec.share_milli is not None:
        return rental
    held = len(first.slices)
    return rental if held == spec.gpus else replace(rental, spec=replace(spec, gpus=held))


def _shown_start(start_s: float) -> datetime | None:
    """A booked start as a time to show, or None when it lies beyond what a date holds (the year 9999): a
    start that far off is unknown, and must not fail the cycle for everyone."""
    try:
        return datetime.fromtimestamp(start_s, UTC)
    except (OverflowError, OSError, ValueError):
        return None
