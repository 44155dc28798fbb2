"""FGD's fragmentation measure: the GPU capacity of a node that the typical request mix cannot use.

For a typical request m (with probability p_m) and a node, the fragment is all the node's idle GPU when m
cannot fit there at all (GPU count, CPU, memory, model or mode), and otherwise only the idle GPU on GPUs
that cannot host m's per-GPU part. F(node) = sum over m of p_m x fragment(node, m), in milli-GPUs.
(Weng et al., "Beware of Fragmentation", USENIX ATC 2023.)
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass

from suanli.domain import mig
from suanli.domain.capacity import FULL_MILLI, NodeClass, NodeKey
from suanli.domain.request import GpuSelector, GpuShare, MigSlice, Request, Shape, WholeGpus, shape_gpus

CACHE_LIMIT = 500_000
PARTS_LIMIT = 100_000  # GPU states whose parts are kept (a list of one per typical shape each)


@dataclass(frozen=True, slots=True)
class TypicalRequest:
    """A request shape seen often, with its share of the mix."""

    shape: Shape
    cpu_milli: int
    memory_mib: int
    selector: GpuSelector
    probability: float

    @property
    def gpus(self) -> float:
        return shape_gpus(self.shape)


def typical_mix(
    requests: Iterable[Request], coverage: float = 0.95, *, by_memory: bool = False, by_gpus: bool = False
) -> tuple[TypicalRequest, ...]:
    """The most frequent shapes that together cover `coverage` of `requests`, probabilities renormalised.

    Shapes are (GPU shape, CPU, selector), plus host memory when `by_memory`. With `by_gpus` a shape's
    weight is the GPUs it asks for (its share of GPU demand) rather than its count of requests.
    """
    counts: Counter = Counter()
    for r in requests:
        weight = r.gpus_per_node if by_gpus else 1
        if weight > 0:
            counts[(r.shape, r.cpu_milli, r.memory_mib if by_memory else 0, r.selector)] += weight
    total = sum(counts.values())
    if total == 0:
        return ()
    chosen: list[tuple[tuple[Shape, int, int, GpuSelector], float]] = []
    covered = 0
    for signature, count in sorted(counts.items(), key=lambda item: (-item[1], repr(item[0]))):
        if covered >= coverage * total:
            break
        chosen.append((signature, count))
        covered += count
    return tuple(TypicalRequest(sig[0], sig[1], sig[2], sig[3], count / covered) for sig, count in chosen)


@dataclass(frozen=True, slots=True)
class _ShapeGroup:
    """Typical requests with one GPU shape, differing only in CPU and memory: (cpu, memory, p) each."""

    shape: Shape
    per_copy_milli: int  # GPU milli one copy takes (0 for CPU-only and MIG, which are not counted in copies)
    entries: tuple[tuple[int, int, float], ...]


class FragmentationModel:
    """F(class, state) for one typical mix, memoised per (class, state).

    With `repeated`, a request's fragment is what is left idle after packing as many copies as GPUs,
    CPU and memory allow (the lifetime measure), instead of FGD's next-request measure.
    """

    def __init__(self, mix: tuple[TypicalRequest, ...], *, repeated: bool = False) -> None:
        self.mix = mix
        self.repeated = repeated
        self._cache: dict[tuple[int, NodeKey], float] = {}
        self._plans: dict[int, tuple[float, tuple[_ShapeGroup, ...]]] = {}
        # the GPU-only parts of a fragment, shared by every state that differs only in CPU or memory: per
        # (class, GPU state), one slot per shape of the class's plan, so a state's GPUs are hashed once for
        # the whole mix (keyed per shape, the GPU state and the shape were hashed again for every shape)
        self._gpu_parts: dict[tuple[int, tuple], list[float | None]] = {}

    def of(self, class_id: int, cls: NodeClass, key: NodeKey) -> float:
        cached = self._cache.get((class_id, key))
        if cached is None:
            if len(self._cache) > CACHE_LIMIT:
                self._cache.clear()
            cached = self._cache[(class_id, key)] = self._compute(class_id, cls, key)
        return cached

    def _plan(self, class_id: int, cls: NodeClass) -> tuple[float, tuple[_ShapeGroup, ...]]:
        """For one class: the probability of requests that never fit it, and the rest grouped by shape."""
        plan = self._plans.get(class_id)
        if plan is None:
            never = 0.0
            groups: dict[Shape, list[tuple[int, int, float]]] = {}
            for t in self.mix:
                cpu_only = isinstance(t.shape, WholeGpus) and t.shape.count == 0
                if cpu_only or not cls.selector_allows(t.selector, t.shape):
                    never += t.probability
                else:
                    groups.setdefault(t.shape, []).append((t.cpu_milli, t.memory_mib, t.probability))
            plan = self._plans[class_id] = (
                never,
                tuple(_ShapeGroup(shape, _per_copy(shape), tuple(e)) for shape, e in groups.items()),
            )
        return plan

    def _compute(self, class_id: int, cls: NodeClass, key: NodeKey) -> float:
        cpu_free, memory_free, gpus = key
        idle = sum(entry[0] for entry in gpus)
        if idle == 0:
            return 0.0
        never, groups = self._plan(class_id, cls)
        total = never * idle
        gpu_parts = self._gpu_parts
        if len(gpu_parts) > PARTS_LIMIT:
            gpu_parts.clear()
        parts_key = (class_id, gpus)
        parts = gpu_parts.get(parts_key)
        if parts is None:
            parts = gpu_parts[parts_key] = [None] * len(groups)
        mig_view: list[tuple[int, frozenset[str]]] | None = None  # per GPU: idle milli, profiles it can host
        for index, group in enumerate(groups):
            part = parts[index]
            if self.repeated and group.per_copy_milli:
                if part is None:
                    part = parts[index] = _copies_by_gpu(cls, gpus, group.shape)
                by_gpu = part
                for cpu, memory, probability in group.entries:
                    if cpu > cpu_free or memory > memory_free:
                        total += probability * idle
                        continue
                    by_host = min(
                        cpu_free // cpu if cpu else by_gpu, memory_free // memory if memory else by_gpu
                    )
                    total += probability * (idle - min(by_gpu, by_host) * group.per_copy_milli)
            else:
                if part is None and isinstance(group.shape, MigSlice) and cls.model.mig is not None:
                    if mig_view is None:
                        geometry = cls.model.mig
                        mig_view = [(e[0], mig.hostable_profiles(geometry, e[2])) for e in gpus]
                    part = parts[index] = _mig_unusable(mig_view, group.shape.profile, idle)
                if part is None:
                    part = parts[index] = fragment(cls, gpus, group.shape, idle)
                unusable = part
                for cpu, memory, probability in group.entries:
                    fits = cpu <= cpu_free and memory <= memory_free
                    total += probability * (unusable if fits else idle)
        return total


def _mig_unusable(view: list[tuple[int, frozenset[str]]], profile: str, idle: int) -> int:
    """Idle milli on GPUs that cannot host `profile`; all idle milli when no GPU can."""
    unusable, hosts = 0, 0
    for free_milli, hostable in view:
        if profile in hostable:
            hosts += 1
        else:
            unusable += free_milli
    return unusable if hosts else idle


def _per_copy(shape: Shape) -> int:
    if isinstance(shape, WholeGpus):
        return shape.count * FULL_MILLI
    if isinstance(shape, GpuShare):
        return shape.milli
    return 0


def fragment(cls: NodeClass, gpus: tuple, shape: Shape, idle: int) -> float:
    """Idle milli-GPUs on a node (whose CPU and memory suffice) that `shape` cannot use."""
    if isinstance(shape, WholeGpus):
        if shape.count == 0:
            return idle
        full = cls.model.memory_mib
        free_gpus = sum(1 for e in gpus if e[0] == FULL_MILLI and e[1] == full and not e[2])
        return idle if free_gpus < shape.count else idle - FULL_MILLI * free_gpus
    if isinstance(shape, GpuShare):
        unusable = 0
        hosts = 0
        for free_milli, free_mib, _ in gpus:
            if free_milli >= shape.milli and free_mib >= shape.memory_mib:
                hosts += 1
            else:
                unusable += free_milli
        return idle if hosts == 0 else unusable
    return _mig_fragment(cls, gpus, shape, idle)


def _mig_fragment(cls: NodeClass, gpus: tuple, shape: MigSlice, idle: int) -> float:
    geometry = cls.model.mig
    if geometry is None:
        return idle
    view = [(e[0], mig.hostable_profiles(geometry, e[2])) for e in gpus]
    return _mig_unusable(view, shape.profile, idle)


def _copies_by_gpu(cls: NodeClass, gpus: tuple, shape: Shape) -> int:
    if isinstance(shape, WholeGpus):
        full = cls.model.memory_mib
        return sum(1 for e in gpus if e[0] == FULL_MILLI and e[1] == full and not e[2]) // shape.count
    assert isinstance(shape, GpuShare)
    if shape.memory_mib:
        return sum(min(e[0] // shape.milli, e[1] // shape.memory_mib) for e in gpus)
    return sum(e[0] // shape.milli for e in gpus)
