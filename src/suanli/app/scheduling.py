"""The leader's scheduling cycle: (1) load, (2) decide with the domain scheduler, (3) apply in one step.

The snapshot stays in memory between cycles. Each cycle first syncs it with the database (rentals stopped or
shrunk since, drained nodes, bookings made elsewhere); a new fleet version, a first cycle or a refused apply
rebuilds it from the database. A placement is applied only if its rental is still pending; if the database
refuses a booking (UNIQUE on the slice position), the whole plan is dropped and the snapshot rebuilt. Spot
rentals are re-priced at the end of a cycle (`app/spot_repricing.py`).

`Scheduler` holds the cycle (load, decide, apply) and the state it keeps between cycles; its parts live beside
it, each a mixin over it: `gates.py` (what holds rentals back besides capacity), `fair_share_keeping.py` (fair
share decayed, saved and read back), `placing.py` (a placement booked and priced, resizes in place),
`waiting.py` (pending reasons and expected starts) and `trials.py` (the dry run, `Scheduler.trial`).
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta

from suanli.app.downtime import maintenance_reasons, notice_horizon_s
from suanli.app.errors import BookingConflict
from suanli.app.fair_share_keeping import FairShareKeeping, gpus_by_tenant
from suanli.app.fleet import FleetCache
from suanli.app.gates import Gating
from suanli.app.growth import Held, held_request, holding_after, started_smaller, wants_resize
from suanli.app.leaving import Leaving, end_due, under_notice
from suanli.app.limits import coverage_micros
from suanli.app.live_snapshot import LiveSnapshot
from suanli.app.maintenance import give_notices
from suanli.app.notices import give_notice, requeued
from suanli.app.placing import Placing
from suanli.app.ports import Clock, UnitOfWork, UnitOfWorkFactory
from suanli.app.records import PREEMPTIBLE_STATES, MaintenanceWindow, Rental
from suanli.app.rentals import to_request
from suanli.app.spot_repricing import FloorCheck, Pricer, Repricer, SpotFloors, SpotRepricing
from suanli.app.trials import Trials
from suanli.app.unconfirmed_stops import overdue_stops, tell_overdue_stop
from suanli.app.waiting import Waiting
from suanli.domain.catalog import Catalog
from suanli.domain.contracts import Contract
from suanli.domain.elastic_start import Drain, at_size, least_size
from suanli.domain.fair_share import FairShare
from suanli.domain.inventory import Fleet
from suanli.domain.plan import NodeAllocation, Pending, Placement, Reason
from suanli.domain.policies import Policy
from suanli.domain.preemption import DEFAULT_NOTICE_S, Preemption, PreemptionConfig
from suanli.domain.queue_order import GREEDY_QUEUE, QueueConfig
from suanli.domain.queueing import CycleDecision, Gates, admit
from suanli.domain.quotas import Limits
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


class Scheduler(Trials, Waiting, Placing, Gating, FairShareKeeping):
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
            self._advance_fair_share(uow, now_s, gpus_by_tenant(running))
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

    def _maintenance_notices(self, uow: UnitOfWork, now: datetime) -> int:
        """Notice to the rentals on nodes whose maintenance window is near (`maintenance.give_notices`)."""
        if not self.windows:
            return 0
        return give_notices(uow, self.windows, self.live.nodes_of(), self.preemption, now)
