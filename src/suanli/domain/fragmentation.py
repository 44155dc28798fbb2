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
from suanli.domain.request import GpuSelector, GpuShare, MigSlice, Request, Shape, WholeGpus

CACHE_LIMIT = 500_000


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
        if isinstance(self.shape, WholeGpus):
            return float(self.shape.count)
        if isinstance(self.shape, GpuShare):
            return self.shape.milli / FULL_MILLI
        return 1.0


def typical_mix(
    requests: Iterable[Request], coverage: float = 0.95, *, by_memory: bool = False, by_gpus: bool = False
) -> tuple[TypicalRequest, ...]:
    """The most frequent shapes that together cover `coverage` of `requests`, probabilities renormalised.

    Shapes are (GPU shape, CPU, selector), plus host memory when `by_memory`. With `by_gpus` a shape's
    weight is the GPUs it asks for (its share of GPU demand) rather than its count of requests.
    """
    counts: Counter = Counter()
    for r in requests:
        weight = _gpus(r) if by_gpus else 1
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


def _gpus(request: Request) -> float:
    shape = request.shape
    if isinstance(shape, WholeGpus):
        return float(shape.count)
    if isinstance(shape, GpuShare):
        return shape.milli / FULL_MILLI
    return 1.0


class FragmentationModel:
    """F(class, state) for one typical mix, memoised per (class, state)."""

    def __init__(self, mix: tuple[TypicalRequest, ...], *, repeated: bool = False) -> None:
        self.mix = mix
        self.repeated = repeated
        self._cache: dict[tuple[int, NodeKey], float] = {}
        self._allowed: dict[int, tuple[bool, ...]] = {}

    def of(self, class_id: int, cls: NodeClass, key: NodeKey) -> float:
        cached = self._cache.get((class_id, key))
        if cached is None:
            if len(self._cache) > CACHE_LIMIT:
                self._cache.clear()
            cached = self._cache[(class_id, key)] = self._compute(class_id, cls, key)
        return cached

    def _compute(self, class_id: int, cls: NodeClass, key: NodeKey) -> float:
        allowed = self._allowed.get(class_id)
        if allowed is None:
            allowed = self._allowed[class_id] = tuple(
                cls.selector_allows(t.selector, t.shape) for t in self.mix
            )
        cpu_free, memory_free, gpus = key
        idle = sum(entry[0] for entry in gpus)
        if idle == 0:
            return 0.0
        per_shape: dict[Shape, float] = {}  # many typical requests share a GPU shape and differ in CPU only
        total = 0.0
        for typical, ok in zip(self.mix, allowed, strict=True):
            if not ok or typical.cpu_milli > cpu_free or typical.memory_mib > memory_free:
                total += typical.probability * idle
            elif self.repeated:
                total += typical.probability * repeated_fragment(cls, key, typical, idle, per_shape)
            else:
                unusable = per_shape.get(typical.shape)
                if unusable is None:
                    unusable = per_shape[typical.shape] = fragment(cls, gpus, typical.shape, idle)
                total += typical.probability * unusable
        return total


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
    unusable = 0
    hosts = 0
    for free_milli, _, layout in gpus:
        if mig.best_option(geometry, layout, shape.profile) is not None:
            hosts += 1
        else:
            unusable += free_milli
    return idle if hosts == 0 else unusable


def repeated_fragment(
    cls: NodeClass, key: NodeKey, typical: TypicalRequest, idle: int, gpu_copies: dict[Shape, float]
) -> float:
    """Idle milli-GPUs left over after packing as many copies of `typical` as CPU, memory and GPUs allow.

    FGD asks whether the *next* request fits; this asks how much of the idle GPU the typical request
    could ever use on this node, so GPUs stranded by a node's CPU or memory count before they strand.
    `gpu_copies` memoises, per GPU shape, how many copies the GPUs alone could take.
    """
    cpu_free, memory_free, gpus = key
    shape = typical.shape
    if isinstance(shape, MigSlice):
        return _mig_fragment(cls, gpus, shape, idle)
    if isinstance(shape, WholeGpus) and shape.count == 0:
        return idle
    by_gpu = gpu_copies.get(shape)
    if by_gpu is None:
        by_gpu = gpu_copies[shape] = _copies_by_gpu(cls, gpus, shape)
    by_host = min(
        cpu_free // typical.cpu_milli if typical.cpu_milli else by_gpu,
        memory_free // typical.memory_mib if typical.memory_mib else by_gpu,
    )
    per_copy = shape.count * FULL_MILLI if isinstance(shape, WholeGpus) else shape.milli
    return idle - min(by_gpu, by_host) * per_copy


def _copies_by_gpu(cls: NodeClass, gpus: tuple, shape: Shape) -> int:
    if isinstance(shape, WholeGpus):
        full = cls.model.memory_mib
        return sum(1 for e in gpus if e[0] == FULL_MILLI and e[1] == full and not e[2]) // shape.count
    assert isinstance(shape, GpuShare)
    if shape.memory_mib:
        return sum(min(e[0] // shape.milli, e[1] // shape.memory_mib) for e in gpus)
    return sum(e[0] // shape.milli for e in gpus)
