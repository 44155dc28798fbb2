"""What one scheduling cycle decided: placements (with their slices), MIG repartitions and pending reasons."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class Reason(StrEnum):
    """Machine-readable cause for a request left pending."""

    NO_MATCHING_GPU = "no_matching_gpu"  # no GPU in the fleet matches the selector / MIG profile
    RESIDENCY = "residency"  # GPUs match, but none in an allowed jurisdiction
    CONSTRAINTS = "constraints"  # regions, providers or labels rule out every matching node
    NODE_TOO_SMALL = "node_too_small"  # no matching node is big enough even when empty
    NO_CAPACITY = "no_capacity"  # matching nodes exist, none has the free capacity now
    GANG_INCOMPLETE = "gang_incomplete"  # some nodes fit, but not enough of them within one region
    GANG_TOO_LARGE = "gang_too_large"  # no region has enough matching nodes, even all empty: never fits
    QUOTA = "quota"
    SPEND_CAP = "spend_cap"
    CONTRACT_HOLD = "contract_hold"
    BID_BELOW_FLOOR = "bid_below_floor"
    BLOCKED_BY_HEAD = "blocked_by_head"
    PREEMPTING = "preempting"  # victims have notice; capacity is promised at their deadline
    MAINTENANCE = (
        "maintenance"  # it would fit now on nodes in maintenance (or about to be): it waits for them
    )


# what no free capacity cures: the fleet as it is has no node, GPU or network subtree that could take it
NEVER_FITS = frozenset(
    {
        Reason.NO_MATCHING_GPU,
        Reason.RESIDENCY,
        Reason.CONSTRAINTS,
        Reason.NODE_TOO_SMALL,
        Reason.GANG_TOO_LARGE,
    }
)


@dataclass(frozen=True, slots=True)
class Slice:
    """A rentable part of one GPU: whole (1000 milli), a MIG instance, or a share."""

    gpu_index: int
    milli: int
    memory_mib: int
    mig_profile: str | None = None
    mig_start: int | None = None

    @property
    def is_whole(self) -> bool:
        return self.mig_profile is None and self.milli == 1000


@dataclass(frozen=True, slots=True)
class NodeAllocation:
    node: str
    cpu_milli: int
    memory_mib: int
    slices: tuple[Slice, ...]

    @property
    def gpus(self) -> float:
        """GPUs held on this node (MIG instances and shares as fractions)."""
        return sum(s.milli for s in self.slices) / 1000


@dataclass(frozen=True, slots=True)
class Repartition:
    """A MIG change the agent must make before the placement: destroy idle instances, create one."""

    node: str
    gpu_index: int
    destroyed: tuple[tuple[int, str], ...]
    created: tuple[int, str]


@dataclass(frozen=True, slots=True)
class Placement:
    request_id: str
    nodes: tuple[NodeAllocation, ...]
    subtree: str = ""  # topology path of the smallest subtree holding every node (gangs)
    repartitions: tuple[Repartition, ...] = ()

    @property
    def gpus(self) -> float:
        return sum(n.gpus for n in self.nodes)


@dataclass(frozen=True, slots=True)
class Pending:
    request_id: str
    reason: Reason
    message: str


@dataclass(frozen=True, slots=True)
class Plan:
    placements: tuple[Placement, ...] = ()
    pending: tuple[Pending, ...] = ()

    def pending_reason(self, request_id: str) -> Reason | None:
        return next((p.reason for p in self.pending if p.request_id == request_id), None)

    def placement_of(self, request_id: str) -> Placement | None:
        return next((p for p in self.placements if p.request_id == request_id), None)
