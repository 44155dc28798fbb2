"""What a tenant asks for: a per-node shape times a node count, a GPU selector, tier and constraints."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import IntEnum

from suanli.domain.errors import RequestError

MILLI_PER_GPU = 1000


class Tier(IntEnum):
    """Price tier; a larger value is served first and may preempt smaller ones."""

    SPOT = 0
    ON_DEMAND = 1
    RESERVED = 2

    @property
    def label(self) -> str:
        return self.name.lower()

    @classmethod
    def parse(cls, text: str) -> Tier:
        try:
            return cls[text.strip().upper().replace("-", "_")]
        except KeyError:
            raise RequestError(
                f"unknown tier {text!r}; use reserved, on_demand or spot", field="tier"
            ) from None


@dataclass(frozen=True, slots=True)
class WholeGpus:
    """`count` entire GPUs on each node (0 for a CPU-only request)."""

    count: int


@dataclass(frozen=True, slots=True)
class MigSlice:
    """One MIG instance of the named profile on each node."""

    profile: str


@dataclass(frozen=True, slots=True)
class GpuShare:
    """A share of one GPU on each node: `milli` thousandths of its compute plus `memory_mib` of its memory."""

    milli: int
    memory_mib: int = 0


Shape = WholeGpus | MigSlice | GpuShare


@dataclass(frozen=True, slots=True)
class GpuSelector:
    """Which GPUs qualify: model or family names (empty: any), least memory, vendors (empty: any)."""

    models: frozenset[str] = frozenset()
    min_memory_gib: float = 0.0
    vendors: frozenset[str] = frozenset()


@dataclass(frozen=True, slots=True)
class Constraints:
    """Where a rental may run; an empty set allows everything."""

    jurisdictions: frozenset[str] = frozenset()
    regions: frozenset[str] = frozenset()
    providers: frozenset[str] = frozenset()
    labels: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Request:
    """A rental request; `node_count` > 1 makes it a gang placed all or nothing."""

    id: str
    shape: Shape
    node_count: int = 1
    selector: GpuSelector = GpuSelector()
    cpu_milli: int = 0
    memory_mib: int = 0
    tenant: str = "default"
    tier: Tier = Tier.ON_DEMAND
    bid_micros_per_hour: int | None = None
    constraints: Constraints = Constraints()
    submitted_at_s: float = 0.0
    max_duration_s: float | None = None
    # the workload saves its state on notice and resumes where it stopped: it may start on GPUs that would
    # idle while it waits, which are taken back with notice (`QueueConfig.borrow_idle`)
    checkpoints: bool = False
    # elastic: it may start on as few as this many GPUs in all (fewer GPUs on its one node, or fewer whole
    # nodes of a gang), and is grown toward its size as capacity frees (`QueueConfig.elastic_start`)
    min_gpus: int | None = None

    def __post_init__(self) -> None:
        check_request(self)

    @property
    def offered_micros_per_hour(self) -> float:
        """What a spot request offers, for its rank among spot and as a victim: its bid, or with none more
        than any bid, since it pays the spot price whatever it is (AWS's default maximum is the on-demand
        price). 0 for the other tiers, which bid nothing."""
        if self.tier is not Tier.SPOT:
            return 0
        return math.inf if self.bid_micros_per_hour is None else self.bid_micros_per_hour

    @property
    def gpus_per_node(self) -> float:
        """GPUs this request takes on each node, fractions for shares (a MIG slice counts as 1)."""
        return shape_gpus(self.shape)

    @property
    def is_gang(self) -> bool:
        return self.node_count > 1


def shape_gpus(shape: Shape) -> float:
    """GPUs one shape takes: its count, a share's fraction; a MIG slice counts as 1 (its true fraction
    depends on the model, and callers that need it use the catalogue)."""
    if isinstance(shape, WholeGpus):
        return float(shape.count)
    if isinstance(shape, GpuShare):
        return shape.milli / MILLI_PER_GPU
    return 1.0


def check_request(request: Request) -> None:
    """Raise RequestError naming the field when a request is malformed."""
    shape = request.shape
    if isinstance(shape, WholeGpus):
        if shape.count < 0:
            raise RequestError("must be 0 or more", field="gpus")
    elif isinstance(shape, GpuShare):
        if not 0 < shape.milli < MILLI_PER_GPU:
            raise RequestError("a share is between 1 and 999 milli of one GPU", field="gpu_milli")
        if shape.memory_mib < 0:
            raise RequestError("must be 0 or more", field="gpu_memory_mib")
    elif isinstance(shape, MigSlice):
        if not shape.profile:
            raise RequestError("name a MIG profile such as 3g.40gb", field="mig_profile")
    else:
        raise RequestError(f"unknown shape {shape!r}", field="shape")
    if request.node_count < 1:
        raise RequestError("must be 1 or more", field="node_count")
    if request.cpu_milli < 0:
        raise RequestError("must be 0 or more", field="cpu_milli")
    if request.memory_mib < 0:
        raise RequestError("must be 0 or more", field="memory_mib")
    if request.bid_micros_per_hour is not None and request.bid_micros_per_hour < 0:
        raise RequestError("must be 0 or more", field="bid_micros_per_hour")
    if request.max_duration_s is not None and request.max_duration_s <= 0:
        raise RequestError("must be positive", field="max_duration_s")
    if request.min_gpus is not None:
        if not isinstance(shape, WholeGpus) or shape.count < 1:
            raise RequestError("only a request of whole GPUs can start smaller", field="min_gpus")
        if not 1 <= request.min_gpus <= shape.count * request.node_count:
            raise RequestError(
                f"must be 1 to the {shape.count * request.node_count} GPUs it asks for", field="min_gpus"
            )
