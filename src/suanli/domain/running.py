"""A placed rental as preemption sees it, and what evicting it, or a set of them, costs.

Pure. `victim_cost` orders single victims (cheaper first) and `set_cost` orders victim sets, so the greedy
pass and the exact searches of `choose_victims` compare the same way.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from suanli.domain.plan import Placement
from suanli.domain.request import Request

# `Running.preempted_by` of a spot rental under notice because its bid fell below its pool's floor: it
# leaves at its deadline whatever happens, so a preemptor may be promised what it frees at no further cost
SPOT_FLOOR = "below_floor"
# a victim's run time is compared in whole steps of this many seconds: victims that started moments apart
# (placed by one cycle, started by their agents a few milliseconds apart) lose the same, and their bids
# decide, not the milliseconds between their starts
RUN_STEP_S = 1.0


@dataclass(frozen=True, slots=True)
class Running:
    """A placed rental as the scheduler sees it; `preempted_by` and `notice_deadline_s` once under notice."""

    request: Request
    placement: Placement
    started_at_s: float
    preempted_by: str | None = None
    notice_deadline_s: float | None = None
    borrowed: bool = False  # started on GPUs lent while it would have waited: taken back with notice
    # elastic: the fewest nodes, and whole GPUs on each, it may run on (a preemption may trim it to them)
    least: tuple[int, int] | None = None
    keeps: Placement | None = None  # under a trim's notice: what it runs on with after its deadline
    # when its run began, if before `started_at_s` (a simulated elastic job restamped at each resize):
    # what a preemption loses is counted from here
    run_began_s: float | None = None
    gpus: float = field(init=False, repr=False, compare=False)  # the placement's GPUs, computed once

    def __post_init__(self) -> None:
        object.__setattr__(self, "gpus", self.placement.gpus)

    @property
    def gpus_kept(self) -> float:
        """The GPUs it holds past its notice: all without one, what a trim keeps, none when it leaves whole
        (noticed, or being stopped)."""
        if self.notice_deadline_s is None:
            return self.gpus
        return 0.0 if self.keeps is None else self.keeps.gpus

    def lost_gpu_s(self, now: float) -> float:
        """The GPU-seconds its eviction now would lose: what it holds, since its run began."""
        began = self.started_at_s if self.run_began_s is None else self.run_began_s
        return self.gpus * max(now - began, 0.0)

    @property
    def expected_end_s(self) -> float | None:
        """When it ends at the latest: start plus declared duration, the notice deadline if sooner (not a
        trim's: it runs on, and what it gives back is promised to its preemptor)."""
        deadline = None if self.keeps is not None else self.notice_deadline_s
        duration = self.request.max_duration_s
        if duration is None:
            return deadline
        end = self.started_at_s + duration
        return deadline if deadline is not None and deadline <= end else end


def eviction_loss_gpu_s(victim: Running, now: float) -> float:
    """The GPU-seconds evicting `victim` now loses: none for one already leaving for the spot floor."""
    return 0.0 if victim.preempted_by == SPOT_FLOOR else victim.lost_gpu_s(now)


def victim_cost(victim: Running, now: float) -> tuple[float, float, float, float, str]:
    """Cheaper first: lower tier, fewer GPU-seconds lost (`eviction_loss_gpu_s`, its run time rounded to
    `RUN_STEP_S`), lower offer (a spot bid; no bid offers the most), fewer GPUs, then id (stable)."""
    lost = eviction_loss_gpu_s(victim, now)
    if lost:
        lost = victim.gpus * RUN_STEP_S * round(lost / victim.gpus / RUN_STEP_S)
    return (
        victim.request.tier,
        lost,
        victim.request.offered_micros_per_hour,
        victim.gpus,
        victim.request.id,
    )


def set_cost(victims: Sequence[Running], now: float) -> tuple[float, float, float, float, tuple[str, ...]]:
    """A victim set's cost, cheaper first: its highest tier, the GPU-seconds it loses in all, its highest
    bid, its GPUs in all, then its ids (stable); it never falls as a victim is added."""
    costs = [victim_cost(v, now) for v in victims]
    return (
        max(c[0] for c in costs),
        sum(c[1] for c in costs),
        max(c[2] for c in costs),
        sum(c[3] for c in costs),
        tuple(sorted(c[4] for c in costs)),
    )
