"""Free capacity of one node as a canonical value, and what a request's shape does to it.

A node's state is `NodeKey = (cpu_free_milli, memory_free_mib, gpus)` where `gpus` is the sorted tuple of
`GpuEntry = (free_milli, free_memory_mib, mig_layout)`. Nodes of the same `NodeClass` in the same state are
interchangeable for placement, so scores are computed once per (class, state) and cached.
"""

from __future__ import annotations

from dataclasses import dataclass

from suanli.domain import mig
from suanli.domain.catalog import GpuModel, MigGeometry, MigProfile
from suanli.domain.inventory import GpuMode, Node, Region
from suanli.domain.request import GpuSelector, GpuShare, MigSlice, Request, Shape, WholeGpus

FULL_MILLI = 1000
GpuEntry = tuple[int, int, tuple[mig.MigInstance, ...]]
NodeKey = tuple[int, int, tuple[GpuEntry, ...]]


@dataclass(frozen=True, slots=True)
class NodeClass:
    """The static facts placement depends on; nodes equal in these are interchangeable."""

    model: GpuModel
    mode: GpuMode
    gpu_count: int
    cpu_milli: int
    memory_mib: int
    region: str
    jurisdiction: str
    provider: str
    labels: frozenset[tuple[str, str]]

    @classmethod
    def of(cls, node: Node, model: GpuModel, region: Region) -> NodeClass:
        return cls(
            model,
            node.gpu_mode,
            node.gpu_count,
            node.cpu_milli,
            node.memory_mib,
            node.region,
            region.jurisdiction,
            node.provider,
            frozenset(node.labels.items()),
        )

    def selector_allows(self, selector: GpuSelector, shape: Shape) -> bool:
        """True when this class's GPU model and mode can ever serve `shape` under `selector`."""
        model = self.model
        if selector.models and not any(model.matches(wanted) for wanted in selector.models):
            return False
        if selector.vendors and model.vendor.value not in {v.casefold() for v in selector.vendors}:
            return False
        if model.memory_gib < selector.min_memory_gib:
            return False
        return self.mode_allows(shape)

    def mode_allows(self, shape: Shape) -> bool:
        if isinstance(shape, WholeGpus):
            return shape.count == 0 or (self.mode is not GpuMode.MIG and shape.count <= self.gpu_count)
        if isinstance(shape, GpuShare):
            return self.mode is GpuMode.SHARED and shape.memory_mib <= self.model.memory_mib
        return (
            self.mode is GpuMode.MIG
            and self.model.mig is not None
            and self.model.mig.has_profile(shape.profile)
        )

    def constraints_allow(self, request: Request) -> bool:
        c = request.constraints
        if c.regions and self.region not in c.regions:
            return False
        if c.providers and self.provider not in c.providers:
            return False
        return all((k, v) in self.labels for k, v in c.labels.items())

    def residency_allows(self, request: Request) -> bool:
        allowed = request.constraints.jurisdictions
        return not allowed or self.jurisdiction in allowed

    def big_enough(self, request: Request) -> bool:
        return request.cpu_milli <= self.cpu_milli and request.memory_mib <= self.memory_mib


def empty_entry(model: GpuModel) -> GpuEntry:
    """The entry of an idle GPU that is not in MIG mode."""
    return (FULL_MILLI, model.memory_mib, ())


def mig_entry(model: GpuModel, layout: tuple[mig.MigInstance, ...]) -> GpuEntry:
    """The entry of a MIG GPU: idle compute in milli, memory not held by busy instances."""
    geometry = model.mig
    assert geometry is not None
    busy = mig.busy_compute_slices(geometry, layout)
    idle_milli = FULL_MILLI * (geometry.compute_slice_count - busy) // geometry.compute_slice_count
    free_mib = model.memory_mib - int(mig.busy_memory_gib(geometry, layout) * 1024)
    return (idle_milli, max(free_mib, 0), layout)


@dataclass(frozen=True, slots=True)
class GpuChoice:
    """One GPU entry taken by a placement, what it becomes, and the MIG option used (if any)."""

    before: GpuEntry
    after: GpuEntry
    milli: int
    memory_mib: int
    mig_option: mig.MigOption | None = None


@dataclass(frozen=True, slots=True)
class Option:
    """One way to put a request's per-node shape on a node state."""

    after: NodeKey
    choices: tuple[GpuChoice, ...]


def options(cls: NodeClass, key: NodeKey, request: Request) -> list[Option]:
    """Every distinct way the request's per-node part fits a node of `cls` in state `key` (empty: no fit)."""
    cpu_free, memory_free, gpus = key
    if request.cpu_milli > cpu_free or request.memory_mib > memory_free:
        return []
    cpu_after, memory_after = cpu_free - request.cpu_milli, memory_free - request.memory_mib
    shape = request.shape
    if isinstance(shape, WholeGpus):
        return _whole_options(cls, gpus, shape.count, cpu_after, memory_after)
    choices: list[GpuChoice] = []
    seen: set[GpuEntry] = set()
    for entry in gpus:
        if entry in seen:
            continue
        seen.add(entry)
        choice = (
            _share_choice(entry, shape)
            if isinstance(shape, GpuShare)
            else _mig_choice(cls.model, entry, shape)
        )
        if choice is not None:
            choices.append(choice)
    return [Option((cpu_after, memory_after, replace_entries(gpus, (c,))), (c,)) for c in choices]


def _whole_options(
    cls: NodeClass, gpus: tuple[GpuEntry, ...], count: int, cpu: int, mem: int
) -> list[Option]:
    if count == 0:
        return [Option((cpu, mem, gpus), ())]
    full = cls.model.memory_mib
    idle = [e for e in gpus if e[0] == FULL_MILLI and e[1] == full and not e[2]]
    if len(idle) < count:
        return []
    taken = (0, 0, ())
    choices = tuple(GpuChoice(idle[0], taken, FULL_MILLI, full) for _ in range(count))
    return [Option((cpu, mem, replace_entries(gpus, choices)), choices)]


def _share_choice(entry: GpuEntry, shape: GpuShare) -> GpuChoice | None:
    free_milli, free_mib, _ = entry
    if free_milli < shape.milli or free_mib < shape.memory_mib:
        return None
    return GpuChoice(
        entry, (free_milli - shape.milli, free_mib - shape.memory_mib, ()), shape.milli, shape.memory_mib
    )


def _mig_choice(model: GpuModel, entry: GpuEntry, shape: MigSlice) -> GpuChoice | None:
    geometry = model.mig
    if geometry is None:
        return None
    option = mig.cached_best_option(geometry, entry[2], shape.profile)
    if option is None:
        return None
    profile = geometry.profile(shape.profile)
    return GpuChoice(
        entry,
        mig_entry(model, mig.apply_option(entry[2], option)),
        instance_milli(geometry, profile),
        profile.memory_mib,
        option,
    )


def instance_milli(geometry: MigGeometry, profile: MigProfile) -> int:
    """A MIG instance's share of the GPU's compute in milli-GPUs (`MigGeometry.instance_milli`)."""
    return geometry.instance_milli(profile)


def replace_entries(gpus: tuple[GpuEntry, ...], choices: tuple[GpuChoice, ...]) -> tuple[GpuEntry, ...]:
    """`gpus` with one occurrence of each choice's `before` swapped for its `after`, kept sorted."""
    entries = list(gpus)
    for choice in choices:
        entries.remove(choice.before)
        entries.append(choice.after)
    entries.sort()
    return tuple(entries)
