"""The FGD packing protocol: inflate the pod list to 130% of capacity with a seed, shuffle, place online.

No retries and no departures: a pod that does not fit fails for good. Arrived % counts every submitted
pod's GPUs, failed ones included; the figure for arrived = k% is the mean allocation over the pods whose
arrived % rounds to k, as the FGD authors' analysis scripts compute it.
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

from suanli.domain.catalog import Catalog
from suanli.domain.fragmentation import FragmentationModel, TypicalRequest
from suanli.domain.inventory import Fleet
from suanli.domain.plan import Placement
from suanli.domain.policies import Policy
from suanli.domain.request import Request
from suanli.domain.scheduler import place
from suanli.domain.snapshot import Snapshot

ARRIVED_LEVELS = (90, 95, 100, 110, 120, 130)
INFLATE_TO = 1.3
FRAG_LEVEL = 90


@dataclass
class PackingRun:
    """One policy on one seed: allocation % per arrived-% bin, fragmentation at 90%, speed."""

    policy: str
    seed: int
    capacity_gpus: int
    allocated_pct: dict[int, float] = field(default_factory=dict)
    _bin_sums: dict[int, tuple[float, int]] = field(default_factory=dict, repr=False)
    frag_pct_90: float = math.nan
    placements: int = 0
    failures: int = 0
    decide_s: float = 0.0

    def record(self, arrived_pct: float, allocated_pct: float) -> None:
        level = round(arrived_pct)
        total, count = self._bin_sums.get(level, (0.0, 0))
        self._bin_sums[level] = (total + allocated_pct, count + 1)
        self.allocated_pct[level] = (total + allocated_pct) / (count + 1)

    def unallocated_pct(self, level: int) -> float:
        """Unallocated GPU % at arrived = `level` (from the nearest lower bin reached, if none fell in it)."""
        reached = [b for b in self.allocated_pct if b <= level]
        return 100.0 - self.allocated_pct[max(reached)] if reached else 100.0

    @property
    def placements_per_s(self) -> float:
        return (self.placements + self.failures) / self.decide_s if self.decide_s else math.nan


def gpus_of(request: Request) -> float:
    """GPUs a pod asks for (the protocol's pods are all one node)."""
    return request.gpus_per_node


def inflate(
    pods: Sequence[Request], capacity_gpus: float, seed: int, target: float = INFLATE_TO
) -> list[Request]:
    """Draw pods uniformly with replacement until the next draw would pass `target` x capacity; shuffle."""
    rng = random.Random(seed)
    goal = target * capacity_gpus
    drawn: list[Request] = []
    requested = 0.0
    while True:
        pod = pods[rng.randrange(len(pods))]
        if requested + gpus_of(pod) > goal:
            break
        requested += gpus_of(pod)
        drawn.append(replace(pod, id=f"{pod.id}#{len(drawn)}"))
    rng.shuffle(drawn)
    return drawn


def run_packing(
    fleet: Fleet,
    catalog: Catalog,
    workload: Sequence[Request],
    policy: Policy,
    seed: int,
    mix: tuple[TypicalRequest, ...],
    on_progress: Callable[[int], None] | None = None,
) -> PackingRun:
    """Place the inflated, shuffled workload one pod at a time and record the protocol's figures."""
    snapshot = Snapshot(fleet, catalog)
    capacity = fleet.gpu_count
    run = PackingRun(policy.name, seed, capacity)
    pods = inflate(workload, capacity, seed)
    frag = FragmentationModel(mix)
    arrived = 0.0
    allocated_milli = 0
    for number, pod in enumerate(pods, start=1):
        started = time.perf_counter()
        outcome = place(snapshot, pod, policy)
        run.decide_s += time.perf_counter() - started
        if isinstance(outcome, Placement):
            run.placements += 1
        else:
            run.failures += 1
        if isinstance(outcome, Placement):
            allocated_milli += round(1000 * gpus_of(pod))
        arrived += gpus_of(pod)
        arrived_pct = 100 * arrived / capacity
        run.record(arrived_pct, 100 * allocated_milli / (1000 * capacity))
        if math.isnan(run.frag_pct_90) and arrived_pct >= FRAG_LEVEL:
            run.frag_pct_90 = 100 * fleet_fragmentation(snapshot, frag) / (1000 * capacity)
        if on_progress is not None and number % 200 == 0:
            on_progress(200)
    if on_progress is not None:
        on_progress(len(pods) % 200)
    return run


def fleet_fragmentation(snapshot: Snapshot, frag: FragmentationModel) -> float:
    """Sum of F over schedulable nodes, in milli-GPUs."""
    return sum(
        frag.of(class_id, snapshot.classes[class_id], key) * len(members)
        for class_id in range(len(snapshot.classes))
        for key, members in snapshot.members(class_id)
    )


@dataclass
class PolicySummary:
    """A policy's figures averaged over seeds."""

    policy: str
    unallocated_pct: dict[int, float]
    frag_pct_90: float
    placements_per_s: float
    runs: list[PackingRun]

    def as_json(self) -> dict:
        return {
            "unallocated_pct": {str(level): round(v, 3) for level, v in self.unallocated_pct.items()},
            "frag_rate_pct_90": round(self.frag_pct_90, 3),
            "placements_per_s": round(self.placements_per_s, 1),
            "seeds": [run.seed for run in self.runs],
        }


def summarize(policy: str, runs: list[PackingRun]) -> PolicySummary:
    count = len(runs)
    return PolicySummary(
        policy,
        {level: sum(r.unallocated_pct(level) for r in runs) / count for level in ARRIVED_LEVELS},
        sum(r.frag_pct_90 for r in runs) / count,
        sum(r.placements + r.failures for r in runs) / sum(r.decide_s for r in runs),
        runs,
    )


def parse_seeds(text: str) -> list[int]:
    """`42-51` or `42,43,50` (or a mix) as a list of seeds."""
    seeds: list[int] = []
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        low, sep, high = part.partition("-")
        try:
            seeds.extend(range(int(low), int(high) + 1) if sep else [int(low)])
        except ValueError:
            raise ValueError(f"bad seed range {part!r}: use forms like 42-51 or 42,43") from None
    if not seeds:
        raise ValueError("no seeds given")
    return seeds
