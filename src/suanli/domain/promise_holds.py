"""Holding what is free now of a preemptor's promised capacity, so no one else takes it before the victims
leave: per node its CPU and memory, per GPU the promised compute and memory, per MIG slice the promised
instance or idle instances in its slots. Pure: each part held comes with how to give it back.
"""

from __future__ import annotations

from collections.abc import Callable

from suanli.domain.capacity import instance_milli
from suanli.domain.catalog import MigGeometry
from suanli.domain.inventory import GpuMode
from suanli.domain.plan import NodeAllocation, Placement, Slice
from suanli.domain.snapshot import Snapshot


def hold_promise(snapshot: Snapshot, promise: Placement | None) -> list[tuple[Callable[[], None], float]]:
    """Take what is free now of a promise on the snapshot, without repartitioning anything; returns how to
    give each part back, with its GPUs. Per node its CPU and memory, per GPU up to the compute and memory
    promised there, and per MIG slice the promised instance or the idle instances in its slots
    (`_free_part`). Nodes that left the fleet are skipped."""
    parts: list[tuple[Callable[[], None], float]] = []
    for allocation in () if promise is None else promise.nodes:
        state = snapshot.by_name.get(allocation.node)
        if state is None:
            continue
        cpu = min(allocation.cpu_milli, max(state.cpu_free, 0))
        memory = min(allocation.memory_mib, max(state.memory_free, 0))
        if cpu or memory:
            parts.append((snapshot.occupy(NodeAllocation(allocation.node, cpu, memory, ())), 0.0))
        for promised in allocation.slices:
            for piece in _free_part(snapshot, allocation.node, promised):
                part = NodeAllocation(allocation.node, 0, 0, (piece,))
                parts.append((snapshot.occupy(part), part.gpus))
    return parts


def _free_part(snapshot: Snapshot, node: str, promised: Slice) -> list[Slice]:
    """What is free now of one promised GPU slice, to hold without repartitioning anything: on a whole or
    shared GPU, the free compute and memory up to the promised; of a MIG instance, the instance itself when
    no instance lies in its slots, else the idle instances there and the smallest instances that fill its
    free slots (`_fillers`); no idle instance is ever destroyed. Nothing where the GPU is no longer what the
    promise was made for (another mode, or gone)."""
    state = snapshot.by_name[node]
    if promised.gpu_index >= len(state.gpus):
        return []
    free_milli, free_mib, layout = state.gpus[promised.gpu_index]
    geometry = snapshot.classes[state.class_id].model.mig
    is_mig = state.node.gpu_mode is GpuMode.MIG and geometry is not None
    if promised.mig_profile is None or promised.mig_start is None:
        milli = min(promised.milli, free_milli)
        if is_mig or milli <= 0:
            return []
        return [Slice(promised.gpu_index, milli, min(promised.memory_mib, free_mib))]
    if not is_mig or not geometry.has_profile(promised.mig_profile):
        return []
    slots = set(geometry.profile(promised.mig_profile).slots_at(promised.mig_start))
    overlapping = [
        (start, name, busy)
        for start, name, busy in layout
        if slots.intersection(geometry.profile(name).slots_at(start))
    ]
    if not overlapping:
        return [promised]
    pieces = [
        _instance(geometry, promised.gpu_index, name, start) for start, name, busy in overlapping if not busy
    ]
    covered = {slot for start, name, _ in layout for slot in geometry.profile(name).slots_at(start)}
    return pieces + _fillers(geometry, promised.gpu_index, slots - covered)


def _fillers(geometry: MigGeometry, gpu_index: int, free: set[int]) -> list[Slice]:
    """The smallest instances, each at a start NVIDIA allows, that take the free `free` slots (a slot no
    profile may start at is left: no one else can take it alone either)."""
    smallest_first = sorted(geometry.profiles, key=lambda p: (p.placement_slots, p.compute_slices, p.name))
    left, pieces = set(free), []
    for slot in sorted(free):
        for profile in smallest_first:
            span = set(profile.slots_at(slot))
            if slot in left and slot in profile.valid_starts and span <= left:
                pieces.append(_instance(geometry, gpu_index, profile.name, slot))
                left -= span
                break
    return pieces


def _instance(geometry: MigGeometry, gpu_index: int, profile_name: str, start: int) -> Slice:
    profile = geometry.profile(profile_name)
    return Slice(gpu_index, instance_milli(geometry, profile), profile.memory_mib, profile_name, start)
