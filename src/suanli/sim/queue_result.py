"""A replay's figures: per-job completion and queueing times, allocation over the arrival window, the
idle while requests waited (and where), what preemption wasted, and the replay's speed; `summary` is what
`sim queue --json` writes per policy."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field


@dataclass
class QueueResult:
    """One policy's replay: per-job figures, allocation over time, and speed."""

    policy: str
    capacity_gpus: int
    jobs: int
    estimate: str
    jct_s: list[float] = field(default_factory=list)
    wait_s: list[float] = field(default_factory=list)  # time in the queue: JCT less every run (lost ones too)
    tier_of: list[str] = field(default_factory=list)
    tenant_of: list[str] = field(default_factory=list)  # each completed job's tenant (as `jct_s`)
    # with several tenants (`sim queue --tenants`): their fair-share weights, and the GPU-seconds each was
    # allocated in the arrival window
    weights: dict[str, float] = field(default_factory=dict)
    tenant_gpu_s: dict[str, float] = field(default_factory=dict)
    preemptions: int = 0
    preempted_by_tier: dict[str, int] = field(default_factory=dict)  # of `preemptions`, by the victim's tier
    trims: int = 0  # elastic victims that gave back part of their GPUs and ran on (not in `preemptions`)
    lost_gpu_s: float = 0.0  # GPU-seconds preemption wasted: runs it ended, or restarts from a checkpoint
    lost_gpu_s_arrivals: float = 0.0  # of which counted by the last arrival (at the event that wasted them)
    alloc_gpu_s_arrivals: float = 0.0
    arrival_span_s: float = 0.0
    alloc_gpu_s_total: float = 0.0
    idle_waiting_gpu_s: float = 0.0  # free GPU-seconds while requests that can fit waited, arrival window
    idle_held_gpu_s: float = 0.0  # of which on the nodes reserved for the blocked head (its drain)
    idle_scattered_gpu_s: float = 0.0  # of the rest, on nodes where no waiting request fits what is free
    makespan_s: float = 0.0
    wall_s: float = 0.0
    cycles: int = 0
    samples: list[tuple[float, float, int]] = field(default_factory=list)  # (t, allocated GPUs, queued)
    started_at_s: dict[str, float] = field(default_factory=dict)  # each job's last start (a rerun's, if any)

    @property
    def mean_jct_s(self) -> float:
        return _mean(self.jct_s)

    @property
    def p95_jct_s(self) -> float:
        return percentile(self.jct_s, 95)

    @property
    def mean_queue_s(self) -> float:
        return _mean(self.wait_s)

    @property
    def mean_alloc_pct(self) -> float:
        """Mean allocated GPU % between the first and the last arrival (the loaded period)."""
        return _pct(self.alloc_gpu_s_arrivals, self.arrival_span_s * self.capacity_gpus)

    @property
    def useful_alloc_pct(self) -> float:
        """`mean_alloc_pct` less the GPU-time preemption wasted (by the last arrival): the work done."""
        return _pct(
            self.alloc_gpu_s_arrivals - self.lost_gpu_s_arrivals, self.arrival_span_s * self.capacity_gpus
        )

    @property
    def makespan_alloc_pct(self) -> float:
        return _pct(self.alloc_gpu_s_total, self.makespan_s * self.capacity_gpus)

    @property
    def owed_gpu_h(self) -> float:
        """GPU-hours allocated after the last arrival: the work the arrival window left owing.

        Every job completes, so without preemption this is the queued work plus what running jobs had
        left at the last arrival, and `mean_alloc_pct` is the total work less this, over the window. A
        policy that defers long jobs owes more when the window closes. Reruns after preemption count."""
        return (self.alloc_gpu_s_total - self.alloc_gpu_s_arrivals) / 3600

    @property
    def max_queue_s(self) -> float:
        """The longest any completed job waited: how far the order lets a job starve."""
        return max(self.wait_s, default=math.nan)

    @property
    def idle_waiting_pct(self) -> float:
        """Free GPU % while requests waited (between the first and the last arrival): what the queue left."""
        return _pct(self.idle_waiting_gpu_s, self.arrival_span_s * self.capacity_gpus)

    @property
    def idle_held_pct(self) -> float:
        """The part of `idle_waiting_pct` on the nodes drained for the blocked head."""
        return _pct(self.idle_held_gpu_s, self.arrival_span_s * self.capacity_gpus)

    @property
    def idle_scattered_pct(self) -> float:
        """The part of `idle_waiting_pct`, off the head's nodes, on nodes where none of the waiting requests
        fits what is free: GPUs in pieces smaller than every waiting request needs (fragmentation)."""
        return _pct(self.idle_scattered_gpu_s, self.arrival_span_s * self.capacity_gpus)

    @property
    def lost_work_pct(self) -> float:
        """Of all allocated GPU-time, the share preemption threw away (a preempted job runs again in full)."""
        return _pct(self.lost_gpu_s, self.alloc_gpu_s_total)

    @property
    def jobs_per_s(self) -> float:
        return self.jobs / self.wall_s if self.wall_s else math.nan

    def per_tier(self) -> dict[str, dict[str, float]]:
        tiers: dict[str, dict[str, float]] = {}
        for name in sorted(set(self.tier_of)):
            jct = [j for j, t in zip(self.jct_s, self.tier_of, strict=True) if t == name]
            wait = [w for w, t in zip(self.wait_s, self.tier_of, strict=True) if t == name]
            tiers[name] = {
                "jobs": len(jct),
                "mean_jct_s": _mean(jct),
                "p95_jct_s": percentile(jct, 95),
                "mean_queue_s": _mean(wait),
                "preemptions": self.preempted_by_tier.get(name, 0),
            }
        return tiers

    def per_tenant(self) -> dict[str, dict[str, float]]:
        """With several tenants: each one's weight, its share of the weights, jobs, its share of the GPU-time
        allocated in the arrival window (what fair share drives toward its weight's share while every
        tenant waits), and its mean queueing delay. Empty with one tenant."""
        if len(self.weights) < 2:
            return {}
        total_gpu_s = sum(self.tenant_gpu_s.values())
        total_weight = sum(self.weights.values())
        tenants: dict[str, dict[str, float]] = {}
        for name, weight in self.weights.items():
            wait = [w for w, t in zip(self.wait_s, self.tenant_of, strict=True) if t == name]
            tenants[name] = {
                "weight": weight,
                "weight_share_pct": round(100 * weight / total_weight, 2),
                "jobs": len(wait),
                "gpu_share_pct": round(_pct(self.tenant_gpu_s.get(name, 0.0), total_gpu_s), 2),
                "mean_queue_s": _mean(wait),
            }
        return tenants

    def summary(self) -> dict[str, float | int | dict]:
        tenants = self.per_tenant()
        return {
            "mean_jct_s": round(self.mean_jct_s, 1),
            "p95_jct_s": round(self.p95_jct_s, 1),
            "mean_queue_s": round(self.mean_queue_s, 1),
            "p99_queue_s": round(percentile(self.wait_s, 99), 1),
            "max_queue_s": round(self.max_queue_s, 1),
            "mean_alloc_pct": round(self.mean_alloc_pct, 2),
            "useful_alloc_pct": round(self.useful_alloc_pct, 2),
            "makespan_alloc_pct": round(self.makespan_alloc_pct, 2),
            "owed_gpu_h": round(self.owed_gpu_h, 1),
            "idle_waiting_pct": round(self.idle_waiting_pct, 2),
            "idle_held_pct": round(self.idle_held_pct, 2),
            "idle_scattered_pct": round(self.idle_scattered_pct, 2),
            "preemptions": self.preemptions,
            "trims": self.trims,
            "lost_work_pct": round(self.lost_work_pct, 2),
            "jobs_per_s": round(self.jobs_per_s, 1),
            "completed": len(self.jct_s),
            "cycles": self.cycles,
            "wall_s": round(self.wall_s, 2),
            "per_tier": self.per_tier(),
            **({"per_tenant": tenants} if tenants else {}),
        }


def percentile(values: Sequence[float], pct: float) -> float:
    """Nearest-rank percentile (NaN for no values)."""
    if not values:
        return math.nan
    ordered = sorted(values)
    return ordered[max(0, math.ceil(pct / 100 * len(ordered)) - 1)]


def _pct(gpu_s: float, capacity_gpu_s: float) -> float:
    return 100 * gpu_s / capacity_gpu_s if capacity_gpu_s else math.nan


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else math.nan
