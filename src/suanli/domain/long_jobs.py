"""The long-job node budget: requests declared longer than a threshold may hold at most the nodes of their
pool less those its widest request needs, so the widest request's drain never waits on a week-long job.

Without a budget, long one- and few-GPU jobs scatter over every node, and the widest job's drain waits for
the longest of them (ITP cluster02: a 64-GPU job's drain took about 40 h behind 4-GPU jobs declared 128 h,
with nothing to fill it); HPC sites cap the nodes long jobs may take for the same reason. A request's pool
is the node classes `nominate` gives it; its widest request is the widest waiting or running there (at
least one node), and the budget is the pool's nodes less that, at least one. A request as wide as the
widest is exempt: it is the one the budget keeps room for; so is a `reserved` request, whose capacity an
open contract guarantees (a packing rule never stands in its way). `LongJobBudget` is one cycle's working
state; `queueing._Cycle` asks it before each placement and tells it each one made.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from suanli.domain.plan import Placement
from suanli.domain.preemption import Running
from suanli.domain.request import Request, Tier
from suanli.domain.scheduler import nominate
from suanli.domain.snapshot import Snapshot


@dataclass(frozen=True, slots=True)
class Room:
    """Where a long request may go: the nodes of its pool that long requests hold, all of the pool's
    nodes, and the nodes its widest request needs."""

    held: frozenset[str]
    pool_nodes: frozenset[str]
    widest: int

    def may_spread(self, request: Request) -> bool:
        """Whether `request` may take nodes that long requests do not hold yet, within the budget."""
        return len(self.held) + request.node_count <= max(len(self.pool_nodes) - self.widest, 1)

    def may_fit_held(self, snapshot: Snapshot, request: Request) -> bool:
        """Whether enough held nodes have the GPUs free for `request` (a quick check before a trial)."""
        per_node_milli = snapshot.least_gpus(request) * 1000 / request.node_count - 1e-6
        states = (snapshot.by_name[name] for name in self.held)
        roomy = sum(1 for s in states if s.schedulable and s.free_milli >= per_node_milli)
        return roomy >= request.node_count

    def reason(self) -> str:
        return (
            f"long requests hold {len(self.held)} of its pool's {len(self.pool_nodes)} nodes, the most "
            f"they may while the widest request there needs {self.widest}"
        )


class LongJobBudget:
    """One cycle's budget: requests declared longer than `long_job_s` are long."""

    def __init__(
        self,
        snapshot: Snapshot,
        long_job_s: float,
        queue: Sequence[Request],
        running: Sequence[Running],
    ) -> None:
        self.snapshot, self.long_job_s, self.queue, self.running = snapshot, long_job_s, queue, running
        self.held: set[str] | None = None  # nodes running a long request, once a long request asks
        self.widest: dict[tuple[int, ...], int] = {}  # pool -> the most nodes one of its requests needs

    def is_long(self, request: Request) -> bool:
        return request.max_duration_s is not None and request.max_duration_s > self.long_job_s

    def room(self, request: Request, started: Sequence[Running] = ()) -> Room | None:
        """Where long `request` may go (`started`: this cycle's placements so far); None: no budget
        applies (it is not long, reserved, or as wide as its pool's widest request)."""
        if not self.is_long(request) or request.tier is Tier.RESERVED:
            return None
        pool = tuple(nominate(self.snapshot, request)[0])
        widest = self._widest(pool, request.node_count)
        if request.node_count >= widest:
            return None
        if self.held is None:
            running = (*self.running, *started)
            self.held = {a.node for r in running if self.is_long(r.request) for a in r.placement.nodes}
        names = pool_nodes(self.snapshot, pool)
        return Room(frozenset(self.held & names), names, widest)

    def placed(self, request: Request, placement: Placement) -> None:
        """Count a placement made this cycle."""
        if self.held is not None and self.is_long(request):
            self.held.update(a.node for a in placement.nodes)

    def _widest(self, pool: tuple[int, ...], at_least: int) -> int:
        """The most nodes one request waiting or running in `pool` needs, or `at_least` when none needs
        more: only wider requests than that are looked up."""
        known = self.widest.get(pool, 1)
        if known > at_least or (known == at_least and pool in self.widest):
            return known
        wanted = set(pool)
        widest = at_least
        for request in (*self.queue, *(r.request for r in self.running)):
            if request.node_count > widest and not wanted.isdisjoint(nominate(self.snapshot, request)[0]):
                widest = request.node_count
        self.widest[pool] = widest
        return widest


def pool_nodes(snapshot: Snapshot, pool: tuple[int, ...]) -> frozenset[str]:
    """The names of the fleet's nodes of these classes, cordoned ones included (static: cached)."""
    key = ("pool_nodes", pool)
    cached = snapshot.nomination_cache.get(key)
    if cached is None:
        wanted = set(pool)
        cached = frozenset(state.name for state in snapshot.nodes if state.class_id in wanted)
        snapshot.nomination_cache[key] = cached
    return cached
