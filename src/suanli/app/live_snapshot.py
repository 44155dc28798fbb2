"""The leader's snapshot of the fleet, kept in memory between cycles with what each live allocation holds.

Each cycle brings it up to the store (`refresh`): rebuilt for a new fleet version, a first cycle, a change in
which agents run images or in the hosts' MIG reports; else synced by allocation id (what was released since is
released, what someone else booked is occupied), reading only new allocations in full. A cycle whose decision
the database did not take in full drops it, and the next cycle rebuilds it from the store.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Sequence, Set
from dataclasses import replace
from datetime import datetime

from suanli.app.downtime import out_of_service
from suanli.app.fleet import host_mig_layouts
from suanli.app.ports import UnitOfWork
from suanli.app.records import MaintenanceWindow
from suanli.app.rentals import to_request
from suanli.app.spot_repricing import SpotRepricing
from suanli.domain.capacity import FULL_MILLI
from suanli.domain.catalog import Catalog, GpuModel
from suanli.domain.images import RUNS_IMAGES_LABEL
from suanli.domain.inventory import Fleet, Node
from suanli.domain.plan import NodeAllocation, Placement
from suanli.domain.policies import Policy, build_policy
from suanli.domain.snapshot import HostMigLayouts, Snapshot

log = logging.getLogger(__name__)
POLICY_HISTORY = 5000  # recent rentals a learning placement policy is built from at a rebuild


class LiveSnapshot:
    """The snapshot, the placement policy built with it, and the live allocations it holds: allocation id ->
    what it occupies (`held`) and whose it is (`owner`). `spot_pricing`, when given, learns which live
    rentals are spot as they appear."""

    def __init__(
        self,
        catalog: Catalog,
        policy_name: str,
        seed: int,
        notice_horizon_s: float,
        spot_pricing: SpotRepricing | None = None,
    ) -> None:
        self.catalog, self.policy_name, self.seed = catalog, policy_name, seed
        self.notice_horizon_s = notice_horizon_s  # nodes whose maintenance starts within it take no placement
        self.spot_pricing = spot_pricing
        self.snapshot: Snapshot | None = None
        self.policy: Policy | None = None
        self.fleet: Fleet | None = None
        self.version = -1
        self.imageless: set[str] = set()  # nodes whose agent runs no images: unlabelled in the snapshot
        # the MIG instances hosts reported (node -> GPU -> (start, profile, busy)): the snapshot's layout
        self.mig_layouts: dict[str, dict[int, tuple[tuple[int, str, bool], ...]]] = {}
        self.mig_revision: tuple[int, int] | None = None  # `mig_layouts_revision` when they were read
        self.held: dict[int, NodeAllocation] = {}  # live allocation id -> what it occupies in the snapshot
        self.owner: dict[int, str] = {}  # live allocation id -> its rental
        self.cordoned: set[str] = set()
        self.drained: set[str] = set()  # of those, cordoned by an operator or down (not for maintenance)
        self.stale = False  # a decided placement was not applied: rebuild the snapshot after the cycle

    def refresh(
        self, uow: UnitOfWork, fleet: Fleet, version: int, now: datetime, windows: Sequence[MaintenanceWindow]
    ) -> None:
        """Bring the snapshot up to the store: rebuilt for a new fleet version, a change in which agents run
        images or in the hosts' MIG reports (or none yet), else synced by allocation id."""
        imageless, mig_revision = uow.fleet.imageless(), uow.fleet.mig_layouts_revision()
        if (
            self.snapshot is None
            or version != self.version
            or imageless != self.imageless
            or mig_revision != self.mig_revision
        ):
            if mig_revision != self.mig_revision:  # a report changed: read them all again
                self.mig_layouts = uow.fleet.mig_layouts()
            self.imageless, self.mig_revision = imageless, mig_revision
            self._rebuild(uow, fleet, version, now, windows)
        else:
            self._sync(uow, now, windows)

    def drop(self) -> None:
        """Forget the snapshot (it may hold a decision the database never got): the next cycle rebuilds it."""
        self.snapshot = None

    def end_cycle(self) -> None:
        """Drop the snapshot if a placement decided in this cycle was not applied and broke MIG instances."""
        if self.stale:
            self.snapshot, self.stale = None, False

    def booked(
        self, rental_id: str, allocation_ids: Sequence[int], allocations: Sequence[NodeAllocation]
    ) -> None:
        """Note the allocations the store gave a placement already on the snapshot."""
        self.held.update(zip(allocation_ids, allocations, strict=True))
        self.owner.update((i, rental_id) for i in allocation_ids)

    def forget(self, rental_id: str) -> None:
        """Release a rental's allocations from the snapshot (the database follows in this cycle's apply)."""
        assert self.snapshot is not None
        for allocation_id in [i for i, owner in self.owner.items() if owner == rental_id]:
            self.snapshot.release(self.held.pop(allocation_id))
            del self.owner[allocation_id]

    def keep(self, allocations: Sequence[NodeAllocation]) -> None:
        """Take `allocations` on the snapshot again (what a trimmed victim runs on with, forgotten with the
        rest of it): the apply books them and notes their ids (`booked`)."""
        assert self.snapshot is not None
        for allocation in allocations:
            self.snapshot.occupy(allocation)

    def unplace(self, placement: Placement) -> int:
        """Give a placement that is not booked back to the snapshot; 0 (nothing placed)."""
        assert self.snapshot is not None
        for allocation in placement.nodes:
            self.snapshot.release(allocation)
        # MIG instances it would have made were not made, and later placements may sit where the idle ones it
        # destroyed were: the snapshot is rebuilt from the store after this cycle
        self.stale = self.stale or bool(placement.repartitions)
        return 0

    def pool_of_node(self, name: str) -> tuple[GpuModel, str]:
        node, model = self.node(name)
        return model, node.region

    def node(self, name: str) -> tuple[Node, GpuModel]:
        assert self.snapshot is not None
        state = self.snapshot.by_name[name]
        return state.node, self.snapshot.classes[state.class_id].model

    def allocations_by_rental(self) -> dict[str, list[NodeAllocation]]:
        """Each live rental's allocations, in allocation id order."""
        nodes: dict[str, list[NodeAllocation]] = {}
        for allocation_id in sorted(self.held):
            nodes.setdefault(self.owner[allocation_id], []).append(self.held[allocation_id])
        return nodes

    def nodes_of(self) -> dict[str, set[str]]:
        """The nodes each live rental holds."""
        nodes: dict[str, set[str]] = {}
        for allocation_id, allocation in self.held.items():
            nodes.setdefault(self.owner[allocation_id], set()).add(allocation.node)
        return nodes

    def gpu_states(self) -> Counter[str]:
        """Schedulable GPUs by whether they are idle, partly or fully busy; the others are cordoned."""
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

    def mig_instances(self) -> Counter[tuple[str, str]]:
        """MIG instances on schedulable nodes by (profile, "idle" or "busy"), as laid out on the snapshot."""
        counts: Counter[tuple[str, str]] = Counter()
        if self.snapshot is None:
            return counts
        for state in self.snapshot.nodes:
            if state.schedulable:
                for _, _, layout in state.gpus:
                    for _, profile, busy in layout:
                        counts[profile, "busy" if busy else "idle"] += 1
        return counts

    def _cordons(self, uow: UnitOfWork, now: datetime, windows: Sequence[MaintenanceWindow]) -> set[str]:
        """Nodes out of placements now: drained (or down), and those in or about to enter maintenance."""
        self.drained = uow.fleet.cordoned()
        return self.drained | out_of_service(windows, now, self.notice_horizon_s)

    def _rebuild(
        self, uow: UnitOfWork, fleet: Fleet, version: int, now: datetime, windows: Sequence[MaintenanceWindow]
    ) -> None:
        live = uow.rentals.allocations_by_id(sorted(uow.rentals.live_allocation_ids()))
        known = {node.name for node in fleet.nodes}
        if stray := sorted({a.node for _, a in live.values()} - known):  # never booked so since 2026-12-06
            log.warning("live rentals on nodes the fleet no longer has, left out: %s", ", ".join(stray))
            live = {key: held for key, held in live.items() if held[1].node in known}
        on_host = self._host_layouts(fleet, [allocation for _, allocation in live.values()])
        snapshot = Snapshot(label_image_nodes(fleet, self.imageless), self.catalog, on_host)
        self.cordoned = self._cordons(uow, now, windows)
        for name in self.cordoned:
            if name in snapshot.by_name:
                snapshot.set_schedulable(name, False)
        for _, allocation in live.values():
            snapshot.occupy(allocation)
        self.held = {allocation_id: allocation for allocation_id, (_, allocation) in live.items()}
        self.owner = {allocation_id: rental_id for allocation_id, (rental_id, _) in live.items()}
        if self.spot_pricing is not None:
            self.spot_pricing.forget_all()
            self.spot_pricing.learn(uow, set(self.owner.values()))
        history = [to_request(r) for r in uow.rentals.list(None, POLICY_HISTORY)]
        self.policy = build_policy(self.policy_name, seed=self.seed, history=history)
        self.snapshot, self.fleet, self.version = snapshot, fleet, version

    def _host_layouts(self, fleet: Fleet, live: Sequence[NodeAllocation]) -> dict[str, HostMigLayouts]:
        """The reported MIG layouts the snapshot takes (an instance `live` holds as the rental's); each one
        it cannot is logged (the fleet's declared layout stands for that GPU)."""
        kept, problems = host_mig_layouts(fleet, self.catalog, self.mig_layouts, live)
        for problem in problems:
            log.warning("reported MIG layout left out: %s", problem)
        return kept

    def _sync(self, uow: UnitOfWork, now: datetime, windows: Sequence[MaintenanceWindow]) -> None:
        """Catch up with the database by allocation id: release what was released since (stops, shrinks,
        re-queues), occupy what appeared (written by someone else); only new allocations are read in full."""
        snapshot = self.snapshot
        assert snapshot is not None
        live = uow.rentals.live_allocation_ids()
        for allocation_id in [i for i in self.held if i not in live]:
            snapshot.release(self.held.pop(allocation_id))
            self.owner.pop(allocation_id, None)
        new = sorted(live.difference(self.held))
        if new:
            for allocation_id, (rental_id, allocation) in uow.rentals.allocations_by_id(new).items():
                snapshot.occupy(allocation)
                self.held[allocation_id] = allocation
                self.owner[allocation_id] = rental_id
            if self.spot_pricing is not None:
                self.spot_pricing.learn(uow, {self.owner[i] for i in new if i in self.owner})
        cordoned = self._cordons(uow, now, windows)
        for name in cordoned ^ self.cordoned:
            if name in snapshot.by_name:
                snapshot.set_schedulable(name, name not in cordoned)
        self.cordoned = cordoned


def label_image_nodes(fleet: Fleet, imageless: Set[str]) -> Fleet:
    """`fleet` with `RUNS_IMAGES_LABEL` on every node but those in `imageless`, whose agent said it runs host
    processes only; a rental that names an image requires the label (`to_request`). A node whose agent has
    not said (none registered yet, or an older agent) keeps it: the agent reports such a rental failed."""
    nodes = tuple(
        node if node.name in imageless else replace(node, labels={**node.labels, RUNS_IMAGES_LABEL: "true"})
        for node in fleet.nodes
    )
    return replace(fleet, nodes=nodes)
