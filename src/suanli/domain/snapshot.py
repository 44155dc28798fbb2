"""An indexed, mutable in-memory view of free capacity that the scheduler decides on.

Nodes are grouped by (class, state): a decision scores each group once, not each node. `assign` and
`release` keep the index current; `release` returns an undo so a preemption trial costs no copy.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from suanli.domain import mig
from suanli.domain.capacity import (
    FULL_MILLI,
    GpuChoice,
    GpuEntry,
    NodeClass,
    NodeKey,
    empty_entry,
    instance_milli,
    mig_entry,
)
from suanli.domain.catalog import Catalog
from suanli.domain.errors import FleetError, MigPlacementError
from suanli.domain.inventory import Fleet, GpuMode, Node
from suanli.domain.plan import NodeAllocation, Placement, Slice
from suanli.domain.request import MigSlice, Request

# a host's MIG instances: GPU index -> (start slot, profile name, busy) of each instance on it; busy: in use
# by something no rental holds (not suanli's), so never placed on nor destroyed
HostMigLayouts = Mapping[int, Sequence[mig.MigInstance]]


@dataclass(slots=True)
class NodeState:
    """A node's static facts and its current free capacity (per GPU index)."""

    index: int
    node: Node
    class_id: int
    cpu_free: int
    memory_free: int
    gpus: list[GpuEntry]
    schedulable: bool = True
    state_id: int = -1  # interned id of `key`, current while indexed
    free_milli: int = 0  # free GPU milli as of the last `_index` (kept for the snapshot's running total)

    @property
    def key(self) -> NodeKey:
        return (self.cpu_free, self.memory_free, tuple(sorted(self.gpus)))

    @property
    def name(self) -> str:
        return self.node.name


class Snapshot:
    """Free capacity of a fleet, indexed by node class and state."""

    def __init__(
        self, fleet: Fleet, catalog: Catalog, mig_layouts: Mapping[str, HostMigLayouts] | None = None
    ) -> None:
        """`mig_layouts`: the MIG instances each node's host has (by node, then GPU index), in place of the
        layout the fleet declares for those GPUs; `host_layouts` keeps only those valid for the node."""
        self.fleet = fleet
        self.classes: list[NodeClass] = []
        class_ids: dict[NodeClass, int] = {}
        self.nodes: list[NodeState] = []
        self.by_name: dict[str, NodeState] = {}
        # class id -> state id -> ordered set of node indices (a dict used as an insertion-ordered set)
        self.groups: list[dict[int, dict[int, None]]] = []
        self.class_gpus: list[int] = []  # class id -> GPUs on the fleet's nodes of that class
        # states are interned to small ints so that caches hash an int, not a nested tuple
        self.state_ids: dict[NodeKey, int] = {}
        self.state_keys: list[NodeKey] = []
        self.version = 0
        # memo tables for the scheduler: valid for the fleet's lifetime since keys include the node state
        self.nomination_cache: dict[tuple, Any] = {}  # static per request signature (and gang ceilings)
        self.request_ids: dict[tuple, int] = {}
        # bumped whenever capacity can grow (release, uncordon); a request shape that fit nowhere at one
        # epoch fits nowhere until the next, since assignments only ever take capacity away
        self.capacity_epoch = 0
        self.no_fit_cache: dict[tuple, int] = {}
        self.free_milli = 0  # running total over every node, kept by `_index`: O(1) `allocated_milli`
        self.total_milli = 0
        self._gpu_count = 0
        for index, node in enumerate(fleet.nodes):
            model = catalog.get(node.gpu_model)
            region = fleet.regions.get(node.region)
            if region is None:
                raise FleetError(f"unknown region {node.region!r}", node=node.name, field="topology")
            cls = NodeClass.of(node, model, region)
            class_id = class_ids.setdefault(cls, len(self.classes))
            if class_id == len(self.classes):
                self.classes.append(cls)
                self.groups.append({})
                self.class_gpus.append(0)
            state = NodeState(
                index,
                node,
                class_id,
                node.cpu_milli,
                node.memory_mib,
                _initial_gpus(node, cls, (mig_layouts or {}).get(node.name, {})),
            )
            self.nodes.append(state)
            self.by_name[node.name] = state
            self.class_gpus[class_id] += node.gpu_count
            self.total_milli += FULL_MILLI * len(state.gpus)
            self._gpu_count += node.gpu_count
            self._index(state)

    @property
    def gpu_count(self) -> int:
        return self._gpu_count

    def allocated_milli(self) -> int:
        """GPU capacity held by placements, in milli-GPUs (MIG instances by compute slices)."""
        return self.total_milli - self.free_milli

    def members(self, class_id: int) -> Iterator[tuple[NodeKey, dict[int, None]]]:
        """(state, node indices) for every state that schedulable nodes of the class are in."""
        return ((self.state_keys[state_id], nodes) for state_id, nodes in self.groups[class_id].items())

    def intern_request(self, request: Request) -> int:
        """A small int for the request's per-node part, for cache keys."""
        signature = (request.shape, request.cpu_milli, request.memory_mib)
        shape_id = self.request_ids.get(signature)
        if shape_id is None:
            shape_id = self.request_ids[signature] = len(self.request_ids)
        return shape_id

    def least_gpus(self, request: Request) -> float:
        """The fewest GPUs `request` can take here, all its nodes together (a bound for quick checks): its
        count or share, and for a MIG slice the instance of that profile on this fleet's MIG nodes (0 if
        none has it: then it fits nowhere, which placement says)."""
        if not isinstance(request.shape, MigSlice):
            return request.gpus_per_node * request.node_count
        profile = request.shape.profile
        geometries = (c.model.mig for c in self.classes if c.mode is GpuMode.MIG and c.model.mig is not None)
        milli = min(
            (instance_milli(g, g.profile(profile)) for g in geometries if g.has_profile(profile)), default=0
        )
        return milli / FULL_MILLI * request.node_count

    def intern(self, key: NodeKey) -> int:
        state_id = self.state_ids.get(key)
        if state_id is None:
            state_id = self.state_ids[key] = len(self.state_keys)
            self.state_keys.append(key)
        return state_id

    def assign(
        self, state: NodeState, cpu_milli: int, memory_mib: int, choices: tuple[GpuChoice, ...]
    ) -> NodeAllocation:
        """Take capacity on `state` as `choices` say; returns the allocation with concrete GPU indices."""
        self._unindex(state)
        state.cpu_free -= cpu_milli
        state.memory_free -= memory_mib
        slices = []
        for choice in choices:
            gpu_index = _find_gpu(state, choice.before)
            state.gpus[gpu_index] = choice.after
            option = choice.mig_option
            slices.append(
                Slice(
                    gpu_index,
                    choice.milli,
                    choice.memory_mib,
                    option.profile if option else None,
                    option.start if option else None,
                )
            )
        self._index(state)
        return NodeAllocation(state.name, cpu_milli, memory_mib, tuple(slices))

    def occupy(self, allocation: NodeAllocation) -> Callable[[], None]:
        """Take a recorded allocation's capacity at its own GPU indices (rebuilding from stored bookings).

        A MIG slice reuses an idle instance at its start, else replaces the idle instances it overlaps,
        as the placement that made it did. Returns a function that gives back what this took, whatever was
        placed elsewhere on the node since; the idle instances it replaced come back too, so it is exact
        only while no one has used their slots in between (holds never replace any).
        """
        state = self.by_name[allocation.node]
        model = self.classes[state.class_id].model
        self._unindex(state)
        state.cpu_free -= allocation.cpu_milli
        state.memory_free -= allocation.memory_mib
        taken: list[tuple[Slice, mig.MigOption | None]] = []  # each slice, and the MIG option it took
        for piece in allocation.slices:
            free_milli, free_mib, layout = state.gpus[piece.gpu_index]
            if piece.mig_profile is not None and piece.mig_start is not None and model.mig is not None:
                geometry = model.mig
                slots = set(geometry.profile(piece.mig_profile).slots_at(piece.mig_start))
                reuse = (piece.mig_start, piece.mig_profile, False) in layout
                overlapping = tuple(
                    inst
                    for inst in layout
                    if not inst[2] and slots.intersection(geometry.profile(inst[1]).slots_at(inst[0]))
                )
                option = mig.MigOption(
                    piece.mig_start, piece.mig_profile, reuse, () if reuse else overlapping
                )
                state.gpus[piece.gpu_index] = mig_entry(model, mig.apply_option(layout, option))
                taken.append((piece, option))
            else:
                state.gpus[piece.gpu_index] = (free_milli - piece.milli, free_mib - piece.memory_mib, layout)
                taken.append((piece, None))
        self._index(state)
        options = [option for _, option in taken]
        return lambda: self._give_back(allocation, options)

    def release(self, allocation: NodeAllocation) -> Callable[[], None]:
        """Give back an allocation's capacity; the returned function takes it again (for trials)."""
        state = self.by_name[allocation.node]
        before = (state.cpu_free, state.memory_free, list(state.gpus))
        self.capacity_epoch += 1
        self._unindex(state)
        state.cpu_free += allocation.cpu_milli
        state.memory_free += allocation.memory_mib
        model = self.classes[state.class_id].model
        for piece in allocation.slices:
            free_milli, free_mib, layout = state.gpus[piece.gpu_index]
            if piece.mig_profile is not None and piece.mig_start is not None:
                state.gpus[piece.gpu_index] = mig_entry(
                    model, mig.release(layout, piece.mig_start, piece.mig_profile)
                )
            else:
                state.gpus[piece.gpu_index] = (free_milli + piece.milli, free_mib + piece.memory_mib, layout)
        self._index(state)

        def undo() -> None:
            self._unindex(state)
            state.cpu_free, state.memory_free, state.gpus = before[0], before[1], list(before[2])
            self._index(state)

        return undo

    def unplace(self, placement: Placement) -> None:
        """Take back a placement just made on this snapshot (a trial), as if it had not been made: unlike
        `release`, a MIG instance it created goes, and the idle instances it destroyed come back."""
        made = {(r.node, r.gpu_index, r.created): r.destroyed for r in placement.repartitions}
        for allocation in placement.nodes:
            options: list[mig.MigOption | None] = []
            for piece in allocation.slices:
                if piece.mig_profile is None or piece.mig_start is None:
                    options.append(None)
                    continue
                destroyed = made.get((allocation.node, piece.gpu_index, (piece.mig_start, piece.mig_profile)))
                options.append(  # no repartition: it reused an idle instance, idle again once undone
                    mig.MigOption(
                        piece.mig_start,
                        piece.mig_profile,
                        destroyed is None,
                        tuple((start, name, False) for start, name in destroyed or ()),
                    )
                )
            self._give_back(allocation, options)

    def _give_back(self, allocation: NodeAllocation, options: list[mig.MigOption | None]) -> None:
        """An allocation's capacity returned exactly: each MIG slice's option undone (`mig.undo_option`: the
        instance it created goes, the idle ones it reused or destroyed come back)."""
        state = self.by_name[allocation.node]
        model = self.classes[state.class_id].model
        self.capacity_epoch += 1
        self._unindex(state)
        state.cpu_free += allocation.cpu_milli
        state.memory_free += allocation.memory_mib
        for piece, option in reversed(list(zip(allocation.slices, options, strict=True))):
            free_milli, free_mib, layout = state.gpus[piece.gpu_index]
            state.gpus[piece.gpu_index] = (
                (free_milli + piece.milli, free_mib + piece.memory_mib, layout)
                if option is None
                else mig_entry(model, mig.undo_option(layout, option))
            )
        self._index(state)

    def set_schedulable(self, node_name: str, schedulable: bool) -> None:
        """Cordon (drain, maintenance, down) or uncordon a node; a cordoned node gets no new placements."""
        state = self.by_name[node_name]
        if state.schedulable == schedulable:
            return
        if schedulable:
            self.capacity_epoch += 1
            state.schedulable = True
            self._index(state)
        else:
            self._unindex(state)
            state.schedulable = False

    @contextmanager
    def cordoned(self, node_names: Collection[str]) -> Iterator[None]:
        """Cordon these nodes for a trial; those that were schedulable are uncordoned again after it."""
        names = [n for n in node_names if self.by_name[n].schedulable]
        for name in names:
            self.set_schedulable(name, False)
        try:
            yield
        finally:
            for name in names:
                self.set_schedulable(name, True)

    @contextmanager
    def uncordoned(self, node_names: Collection[str]) -> Iterator[None]:
        """Open these cordoned nodes for a trial (what would fit if they were in service); those that were
        cordoned are cordoned again after it."""
        names = [n for n in node_names if not self.by_name[n].schedulable]
        for name in names:
            self.set_schedulable(name, True)
        try:
            yield
        finally:
            for name in names:
                self.set_schedulable(name, False)

    def _index(self, state: NodeState) -> None:
        self.version += 1
        free = sum(e[0] for e in state.gpus)
        self.free_milli += free - state.free_milli
        state.free_milli = free
        state.state_id = self.intern(state.key)
        if state.schedulable:
            self.groups[state.class_id].setdefault(state.state_id, {})[state.index] = None

    def _unindex(self, state: NodeState) -> None:
        self.version += 1
        if not state.schedulable:
            return
        group = self.groups[state.class_id]
        members = group[state.state_id]
        del members[state.index]
        if not members:
            del group[state.state_id]


def _initial_gpus(node: Node, cls: NodeClass, on_host: HostMigLayouts) -> list[GpuEntry]:
    """Every GPU idle: a MIG GPU carved as its host has it (`on_host`), else as the fleet declares."""
    model = cls.model
    if node.gpu_mode is GpuMode.MIG and model.mig is not None:
        declared = node.mig_layouts or tuple(() for _ in range(node.gpu_count))
        return [
            mig_entry(
                model,
                tuple(sorted(on_host[index])) if index in on_host else mig.pack_layout(model.mig, layout),
            )
            for index, layout in enumerate(declared)
        ]
    return [empty_entry(model) for _ in range(node.gpu_count)]


def host_layouts(node: Node, catalog: Catalog, reported: HostMigLayouts) -> tuple[HostMigLayouts, list[str]]:
    """The MIG layouts a node's host reported (GPU index -> (start, profile, busy)) that the snapshot can
    take (GPUs of the node, in MIG mode, laid out by NVIDIA's rules), and why each of the others cannot be."""
    if node.gpu_mode is not GpuMode.MIG:
        return {}, [f"{node.name}: not a MIG node in the fleet"] if reported else []
    geometry = catalog.get(node.gpu_model).mig
    if geometry is None:
        return {}, [f"{node.name}: {node.gpu_model} has no MIG"] if reported else []
    kept: dict[int, tuple[mig.MigInstance, ...]] = {}
    problems = []
    for index, instances in sorted(reported.items()):
        if not 0 <= index < node.gpu_count:
            problems.append(f"{node.name}: no GPU {index} (it has {node.gpu_count})")
            continue
        try:
            for _, name, _ in instances:
                if not geometry.has_profile(name):
                    raise MigPlacementError(f"{node.gpu_model} has no MIG profile {name!r}")
            mig.check_layout(geometry, ((start, name) for start, name, _ in instances))
        except MigPlacementError as error:
            problems.append(f"{node.name} GPU {index}: {error}")
            continue
        kept[index] = tuple(sorted(instances))
    return kept, problems


def _find_gpu(state: NodeState, entry: GpuEntry) -> int:
    for index, current in enumerate(state.gpus):
        if current == entry:
            return index
    raise LookupError(f"node {state.name} has no GPU in state {entry}")
