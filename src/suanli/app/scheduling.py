"""The leader's scheduling cycle: (1) load, (2) decide with the domain scheduler, (3) apply in one step.

The snapshot stays in memory between cycles. Each cycle first syncs it with the database (rentals stopped or
shrunk since, drained nodes, bookings made elsewhere); a new fleet version, a first cycle or a refused apply
rebuilds it from the database. A placement is applied only if its rental is still pending; if the database
refuses a booking (UNIQUE on the slice position), the whole plan is dropped and the snapshot rebuilt.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from dataclasses import dataclass, field

from suanli.app.booking import bookings_for
from suanli.app.errors import BookingConflict
from suanli.app.fleet import FleetCache
from suanli.app.list_prices import list_price
from suanli.app.ports import Clock, UnitOfWork, UnitOfWorkFactory
from suanli.app.records import Rental, RentalEvent
from suanli.app.rentals import to_request
from suanli.domain.capacity import FULL_MILLI
from suanli.domain.catalog import Catalog, GpuModel
from suanli.domain.inventory import Fleet, Node
from suanli.domain.plan import NodeAllocation, Placement
from suanli.domain.policies import Policy, build_policy
from suanli.domain.scheduler import schedule
from suanli.domain.snapshot import Snapshot

log = logging.getLogger(__name__)


@dataclass
class CycleReport:
    placed: int = 0
    pending: Counter[str] = field(default_factory=Counter)
    decision_s: float = 0.0
    gpus: Counter[str] = field(default_factory=Counter)  # idle, partial, busy, cordoned
    dropped: bool = False


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
    ) -> None:
        self.uow, self.clock, self.catalog, self.cache = uow, clock, catalog, cache
        self.policy_name, self.seed = policy, seed
        self.snapshot: Snapshot | None = None
        self.policy: Policy | None = None
        self.fleet: Fleet | None = None
        self.version = -1
        self.held: dict[int, NodeAllocation] = {}  # live allocation id -> what it occupies in the snapshot
        self.cordoned: set[str] = set()
        self._lock = threading.Lock()

    def run_cycle(self) -> CycleReport:
        with self._lock:
            try:
                return self._cycle()
            except BookingConflict as error:
                log.warning("plan dropped, snapshot will be rebuilt: %s", error)
                self.snapshot = None
                return CycleReport(dropped=True)

    def _cycle(self) -> CycleReport:
        with self.uow() as uow:
            version, fleet = self.cache.load(uow)
            if fleet is None:
                return CycleReport()
            if self.snapshot is None or version != self.version:
                self._rebuild(uow, fleet, version)
            else:
                self._sync(uow)
            pending = uow.rentals.pending()
        snapshot, policy = self.snapshot, self.policy
        assert snapshot is not None and policy is not None
        now = self.clock.now()
        requests = [to_request(rental) for rental in pending]
        started = time.perf_counter()
        plan = schedule(snapshot, requests, policy, now.timestamp())
        report = CycleReport(decision_s=time.perf_counter() - started)
        by_id = {rental.id: rental for rental in pending}
        try:
            with self.uow() as uow:
                for placement in plan.placements:
                    report.placed += self._apply_placement(uow, by_id[placement.request_id], placement, now)
                for waiting in plan.pending:
                    report.pending[waiting.reason.value] += 1
                    rental = by_id[waiting.request_id]
                    if rental.pending_reason != waiting.reason.value:
                        uow.rentals.set_state(
                            rental.id, "pending", expect=("pending",), reason=waiting.reason
                        )
                        uow.rentals.add_event(
                            rental.id, RentalEvent(now, "pending", waiting.reason, waiting.message)
                        )
                uow.commit()
        except BaseException:
            self.snapshot = None
            raise
        report.gpus = self._gpu_states()
        return report

    def _apply_placement(self, uow: UnitOfWork, rental: Rental, placement: Placement, now) -> int:
        assert self.snapshot is not None
        if not uow.rentals.set_state(rental.id, "placed", expect=("pending",), reason=None):
            for allocation in placement.nodes:  # stopped or changed since we loaded it
                self.snapshot.release(allocation)
            return 0
        rows = bookings_for(placement.nodes, self._node, uow.rentals.booked_slots)
        allocation_ids = uow.rentals.book(rental.id, placement.nodes, rows)
        price = sum(
            piece.milli * list_price(self._node(a.node)[1], rental.spec.tier) // FULL_MILLI
            for a in placement.nodes
            for piece in a.slices
        )
        nodes = ", ".join(a.node for a in placement.nodes)
        uow.rentals.set_price(rental.id, price)
        uow.rentals.add_event(rental.id, RentalEvent(now, "placed", None, f"on {nodes}"))
        self.held.update(zip(allocation_ids, placement.nodes, strict=True))
        return 1

    def _node(self, name: str) -> tuple[Node, GpuModel]:
        assert self.snapshot is not None
        state = self.snapshot.by_name[name]
        return state.node, self.snapshot.classes[state.class_id].model

    def _rebuild(self, uow: UnitOfWork, fleet: Fleet, version: int) -> None:
        snapshot = Snapshot(fleet, self.catalog)
        self.cordoned = uow.fleet.cordoned()
        for name in self.cordoned:
            if name in snapshot.by_name:
                snapshot.set_schedulable(name, False)
        live = uow.rentals.allocations_by_id(sorted(uow.rentals.live_allocation_ids()))
        for _, allocation in live.values():
            snapshot.occupy(allocation)
        self.held = {allocation_id: allocation for allocation_id, (_, allocation) in live.items()}
        history = [to_request(r) for r in uow.rentals.list(None, 5000)]
        self.policy = build_policy(self.policy_name, seed=self.seed, history=history)
        self.snapshot, self.fleet, self.version = snapshot, fleet, version

    def _sync(self, uow: UnitOfWork) -> None:
        """Catch up with the database by allocation id: release what was released since (stops, shrinks,
        re-queues), occupy what appeared (written by someone else); only new allocations are read in full."""
        snapshot = self.snapshot
        assert snapshot is not None
        live = uow.rentals.live_allocation_ids()
        for allocation_id in [i for i in self.held if i not in live]:
            snapshot.release(self.held.pop(allocation_id))
        new = sorted(live.difference(self.held))
        if new:
            for allocation_id, (_, allocation) in uow.rentals.allocations_by_id(new).items():
                snapshot.occupy(allocation)
                self.held[allocation_id] = allocation
        cordoned = uow.fleet.cordoned()
        for name in cordoned ^ self.cordoned:
            if name in snapshot.by_name:
                snapshot.set_schedulable(name, name not in cordoned)
        self.cordoned = cordoned

    def _gpu_states(self) -> Counter[str]:
        counts: Counter[str] = Counter()
        if self.snapshot is None:
            return counts
        for state in self.snapshot.nodes:
            for free_milli, _, _ in state.gpus:
                if not state.schedulable:
                    counts["cordoned"] += 1
                elif free_milli >= FULL_MILLI:
                    counts["idle"] += 1
                elif free_milli > 0:
                    counts["partial"] += 1
                else:
                    counts["busy"] += 1
        return counts
