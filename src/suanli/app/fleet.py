"""The fleet: replace it from TOML (admin), list nodes with their free capacity, drain (not past what signed
contracts need, unless forced) and undrain.

The TOML is stored as given; the parsed `Fleet` is cached per stored version. Replacing the fleet is refused
while a live rental sits on a node the new file removes or changes.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from threading import Lock

from suanli.app.downtime import down_for_contracts, out_of_service_until
from suanli.app.errors import Conflict, Invalid, NotFound
from suanli.app.ports import Clock, UnitOfWork, UnitOfWorkFactory
from suanli.app.records import Caller, domain_contract
from suanli.app.tenants import require_admin, require_operator
from suanli.domain.catalog import Catalog
from suanli.domain.contracts import (
    ContractShortfall,
    Maintenance,
    deepened_shortfalls,
    fleet_capacity,
)
from suanli.domain.errors import FleetError, SuanliError
from suanli.domain.fleet_format import parse_fleet
from suanli.domain.inventory import Fleet, GpuMode, Node
from suanli.domain.plan import NodeAllocation
from suanli.domain.snapshot import HostMigLayouts, Snapshot, host_layouts
from suanli.domain.workload_env import VISIBLE_DEVICES

MILLI_PER_GPU = 1000


@dataclass(frozen=True, slots=True)
class MigInstanceView:
    """One MIG instance of a node's GPU as the scheduler lays it out; busy: a live rental holds it."""

    gpu_index: int
    start_slot: int
    profile: str
    busy: bool


@dataclass(frozen=True, slots=True)
class NodeView:
    """A node as listed: schedulable unless drained, kept out by a maintenance window (until its end) or
    cordoned because its host's GPUs are not the fleet's (`gpu_mismatch` says how); a MIG node's instances,
    on the GPUs in `mig_host_gpus` as its host reported them, on others as declared."""

    node: Node
    schedulable: bool
    free_gpu_milli: int
    maintenance_until: datetime | None = None
    mig_instances: tuple[MigInstanceView, ...] = ()
    mig_host_gpus: tuple[int, ...] = ()
    gpu_mismatch: str | None = None


def host_mig_layouts(
    fleet: Fleet,
    catalog: Catalog,
    reported: Mapping[str, HostMigLayouts],
    live: Iterable[NodeAllocation] = (),
) -> tuple[dict[str, HostMigLayouts], list[str]]:
    """Of the MIG layouts the agents reported (node -> GPU -> instances), those the scheduler lays its
    snapshot out by (`host_layouts`), and why each other is left out (the fleet's layout stands there).

    An instance a live rental holds is the rental's, whatever the report says: the agent marks busy only
    what none of its rentals was given, and a report sent before it heard of a new rental says so of
    that rental's instance; as the rental's it is busy once the allocation is taken."""
    held = {
        (allocation.node, piece.gpu_index, piece.mig_start, piece.mig_profile)
        for allocation in live
        for piece in allocation.slices
        if piece.mig_profile is not None
    }
    nodes = {node.name: node for node in fleet.nodes}
    kept: dict[str, HostMigLayouts] = {}
    problems: list[str] = []
    for name, layouts in sorted(reported.items()):
        node = nodes.get(name)
        if node is not None:
            theirs = {
                index: [
                    (start, profile, busy and (name, index, start, profile) not in held)
                    for start, profile, busy in instances
                ]
                for index, instances in layouts.items()
            }
            kept[name], left_out = host_layouts(node, catalog, theirs)
            problems += left_out
    return kept, problems


def mig_instances(
    fleet: Fleet,
    catalog: Catalog,
    on_host: Mapping[str, HostMigLayouts],
    live: Iterable[NodeAllocation],
) -> dict[str, tuple[MigInstanceView, ...]]:
    """Every MIG node's instances as the scheduler sees them: laid out as hosts report (`on_host`) or the
    fleet declares, then the live allocations taken (an instance a rental made replaces idle ones)."""
    carved = tuple(node for node in fleet.nodes if node.gpu_mode is GpuMode.MIG)
    if not carved:
        return {}
    snapshot = Snapshot(Fleet(fleet.regions, carved), catalog, on_host)
    for allocation in live:
        if allocation.node in snapshot.by_name:
            snapshot.occupy(allocation)
    return {
        state.name: tuple(
            MigInstanceView(index, start, profile, busy)
            for index, (_, _, layout) in enumerate(state.gpus)
            for start, profile, busy in layout
        )
        for state in snapshot.nodes
    }


@dataclass(frozen=True, slots=True)
class NodeChange:
    """A node just drained or undrained, with the contracts a forced drain left short (and by how much)."""

    view: NodeView
    left_short: tuple[ContractShortfall, ...] = ()


@dataclass(frozen=True, slots=True)
class FleetChange:
    """A fleet just put, with the contracts a forced put left short, or shorter (and by how much)."""

    fleet: Fleet
    left_short: tuple[ContractShortfall, ...] = ()


class FleetCache:
    """Parsed fleets by stored version, so readers parse the TOML once per change."""

    def __init__(self, catalog: Catalog) -> None:
        self.catalog = catalog
        self._lock = Lock()
        self._version = -1
        self._fleet: Fleet | None = None
        self._empty: tuple[int, Snapshot] | None = None

    def load(self, uow: UnitOfWork) -> tuple[int, Fleet | None]:
        """The newest stored fleet; reads only its version number unless that changed."""
        version = uow.fleet.current_version()
        if version is None:
            return 0, None
        with self._lock:
            if version == self._version:
                return self._version, self._fleet
        document = uow.fleet.current()
        if document is None:
            return 0, None
        with self._lock:
            if document.version != self._version:
                # checked when it was stored; one stored before the bounds (`fleet_format.MAX_*`) still loads
                self._fleet = parse_fleet(
                    document.toml, source="stored fleet", catalog=self.catalog, bounded=False
                )
                self._version = document.version
            return self._version, self._fleet

    def empty_snapshot(self, uow: UnitOfWork) -> Snapshot | None:
        """The newest fleet as a snapshot with every node empty and in service (built once per version):
        what tells a request that could never be placed from one that waits for capacity. Read only."""
        version, fleet = self.load(uow)
        if fleet is None:
            return None
        with self._lock:
            if self._empty is not None and self._empty[0] == version:
                return self._empty[1]
        snapshot = Snapshot(fleet, self.catalog)
        with self._lock:
            self._empty = (version, snapshot)
        return snapshot


def check_isolatable(fleet: Fleet, catalog: Catalog) -> None:
    """Invalid for a node whose GPUs' vendor has no variable known to limit which devices a workload sees:
    its agent would refuse every rental placed there, after the tenant had been offered and billed it. The
    fleet reader itself takes such nodes, for the simulator, which runs no workloads."""
    for node in fleet.nodes:
        model = catalog.get(node.gpu_model)
        if model.vendor not in VISIBLE_DEVICES:
            makers = ", ".join(vendor.label for vendor in VISIBLE_DEVICES)
            why = (
                f"{model.name} is made by {model.vendor.label}, and no variable is known that limits which "
                "of its devices a workload sees, so no agent can isolate a rental there; the server takes "
                f"GPUs made by {makers}"
            )
            error = FleetError(why, source="fleet", node=node.name, field="gpus.model")
            raise Invalid(str(error), field=error.field)


def departed_nodes(old: Fleet, new: Fleet) -> list[str]:
    """The nodes of `old` that `new` removes or gives to another provider: their agents' keys must go, so
    that an owner's old agent is not sent the next owner's tenants' workloads (a new owner joins anew)."""
    providers = {node.name: node.provider for node in new.nodes}
    return sorted(n.name for n in old.nodes if n.name not in providers or providers[n.name] != n.provider)


class FleetService:
    def __init__(
        self, uow: UnitOfWorkFactory, clock: Clock, cache: FleetCache, notice_horizon_s: float = 0.0
    ) -> None:
        """`notice_horizon_s`: how long before a window the leader stops placing on its node."""
        self.uow, self.clock, self.cache = uow, clock, cache
        self.notice_horizon_s = notice_horizon_s

    def put(self, caller: Caller, toml: str, *, force: bool = False) -> FleetChange:
        """Replace the fleet. Refused (409) while live rentals sit on nodes it removes or changes, and, unless
        `force`, when it would leave signed contracts short of GPUs at some instant, or shorter than they are
        (as a drain is); the answer lists those a forced one left so."""
        require_admin(caller)
        short: tuple[ContractShortfall, ...] = ()
        try:
            fleet = parse_fleet(toml, source="fleet", catalog=self.cache.catalog)
        except SuanliError as error:
            raise Invalid(str(error), field=getattr(error, "field", None) or "body") from error
        check_isolatable(fleet, self.cache.catalog)
        with self.uow() as uow:
            uow.fleet.lock_changes(shared=False)  # a cycle booking meanwhile is seen below, or sees this
            _, old = self.cache.load(uow)
            if old is not None:
                new_nodes = {node.name: node for node in fleet.nodes}
                old_nodes = {node.name: node for node in old.nodes}
                for allocations in uow.rentals.live_allocations().values():
                    for allocation in allocations:
                        name = allocation.node
                        if new_nodes.get(name) != old_nodes.get(name):
                            raise Conflict(
                                f"node {name} has live rentals; the new fleet removes or changes it",
                                field="body",
                            )
                uow.contracts.lock_signing()  # a signing and a fleet change take turns, as with a drain
                short = self._short_under(uow, old, fleet)
                if short and not force:
                    named = ", ".join(s.contract.id for s in short)
                    raise Conflict(
                        f"the new fleet would leave contract(s) {named} short of GPUs; "
                        "pass force (the CLI's --force) to put it anyway",
                        field="body",
                    )
            uow.fleet.put(toml, [node.name for node in fleet.nodes], self.clock.now())
            if old is not None:
                uow.fleet.revoke_agents(departed_nodes(old, fleet))
            uow.commit()
        return FleetChange(fleet, short)

    def nodes(self, caller: Caller) -> list[NodeView]:
        require_operator(caller)
        with self.uow() as uow:
            _, fleet = self.cache.load(uow)
            if fleet is None:
                return []
            cordoned, mismatches = uow.fleet.cordoned(), uow.fleet.gpu_mismatches()
            now = self.clock.now()
            maintenance = out_of_service_until(uow.maintenance.list(now), now, self.notice_horizon_s)
            used: dict[str, int] = {}
            live = [a for allocations in uow.rentals.live_allocations().values() for a in allocations]
            for allocation in live:
                used[allocation.node] = used.get(allocation.node, 0) + sum(s.milli for s in allocation.slices)
            on_host, _ = host_mig_layouts(fleet, self.cache.catalog, uow.fleet.mig_layouts(), live)
        carved = mig_instances(fleet, self.cache.catalog, on_host, live)
        return [
            NodeView(
                node,
                node.name not in cordoned and node.name not in maintenance,
                node.gpu_count * MILLI_PER_GPU - used.get(node.name, 0),
                maintenance.get(node.name),
                carved.get(node.name, ()),
                tuple(sorted(on_host.get(node.name, {}))),
                mismatches.get(node.name),
            )
            for node in fleet.nodes
        ]

    def set_schedulable(
        self, caller: Caller, node_name: str, schedulable: bool, *, force: bool = False
    ) -> NodeChange:
        """Undrain, or drain: cordon the node from now on, with no end. A drain is refused (409, naming them)
        when it would leave signed contracts of the node's pool short of GPUs at some instant, unless
        `force`, as `kubectl drain` against a disruption budget: capacity sold ahead is not taken away
        quietly. A node its agent left (down) is cordoned by the reaper, which asks no one. A forced drain
        answers the contracts it left short."""
        require_admin(caller)
        short: tuple[ContractShortfall, ...] = ()
        with self.uow() as uow:
            if not schedulable and node_name not in uow.fleet.cordoned():
                uow.contracts.lock_signing()  # a signing and a drain take turns: neither misses the other
                short = self._left_short(uow, node_name)
                if short and not force:
                    named = ", ".join(s.contract.id for s in short)
                    raise Conflict(
                        f"draining {node_name} would leave contract(s) {named} short of GPUs; "
                        "pass force (the CLI's --force) to drain it anyway",
                        field="node",
                    )
            if not uow.fleet.set_drained(node_name, not schedulable):
                raise NotFound(f"no node {node_name}")
            uow.commit()
        view = next(view for view in self.nodes(caller) if view.node.name == node_name)
        return NodeChange(view, short)

    def _short_under(self, uow: UnitOfWork, old: Fleet, new: Fleet) -> tuple[ContractShortfall, ...]:
        """The signed contracts `new` would leave short from now on, or shorter than `old` leaves them, given
        the maintenance and cordons, and by how much."""
        now = self.clock.now()
        contracts = map(domain_contract, uow.contracts.list(None))
        before, after = down_for_contracts(uow, old, now), down_for_contracts(uow, new, now)
        capacity, was = fleet_capacity(new), fleet_capacity(old)
        found = deepened_shortfalls(
            contracts, capacity, before, after, now.timestamp(), math.inf, capacity_before=was
        )
        return tuple(found)

    def _left_short(self, uow: UnitOfWork, node_name: str) -> tuple[ContractShortfall, ...]:
        """The contracts of the node's pool a drain from now on would leave short, or shorter, and by how
        much (at an instant when the pool is short already, say through a node that went down or a forced
        window, only a drain that takes more of it then)."""
        now = self.clock.now()
        _, fleet = self.cache.load(uow)
        node = None if fleet is None else next((n for n in fleet.nodes if n.name == node_name), None)
        if fleet is None or node is None:
            raise NotFound(f"no node {node_name}")
        before = down_for_contracts(uow, fleet, now)
        after = [m for m in before if m.node != node_name]  # its own windows fall inside the drain
        after.append(
            Maintenance(node_name, node.gpu_model, node.region, node.gpu_count, now.timestamp(), math.inf)
        )
        pool = [
            contract
            for contract in map(domain_contract, uow.contracts.list(None))
            if (contract.model, contract.region) == (node.gpu_model, node.region)
        ]
        capacity, now_s = fleet_capacity(fleet), now.timestamp()
        return tuple(deepened_shortfalls(pool, capacity, before, after, now_s, math.inf))
