"""The long-job node budget: requests declared longer than a threshold may hold at most the nodes of their
pool less those its widest request needs, so the widest request's drain never waits on a week-long job.

Without a budget, long one- and few-GPU jobs scatter over every node, and the widest job's drain waits for
the longest of them (ITP cluster02: a 64-GPU job's drain took about 40 h behind 4-GPU jobs declared 128 h,
with nothing to fill it); HPC sites cap the nodes long jobs may take for the same reason. A request's pool
is the node classes `nominate` gives it; its widest request is the widest waiting or running there (at
least one node), and the budget is the pool's nodes less that, at least one. A request as wide as the
widest is exempt: it is the one the budget keeps room for, and its own nodes do not count against it (they
come back, for the next wide request's drain, when it ends); so is a `reserved` request, whose capacity an
open contract guarantees (a packing rule never stands in its way). Long requests together, exempt ones too,
leave at least one node of the pool to short ones: without that, a running wide long job and narrow long
jobs beside it can take every node while a burst of one-hour jobs waits days (ITP cluster02's second half).
`LongJobBudget` is one cycle's working state; `queueing._Cycle` asks it before each placement and tells it
each one made.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass

from suanli.domain.plan import Placement
from suanli.domain.request import Request, Tier
from suanli.domain.running import Running
from suanli.domain.scheduler import nominate
from suanli.domain.snapshot import Snapshot


@dataclass(frozen=True, slots=True)
class Room:
    """Where a long request may go: the nodes of its pool that the long requests the budget governs hold,
    all of the pool's nodes, the nodes its widest request needs, and how many of the pool's nodes run any
    long request (the exempt ones too)."""

    held: AbstractSet[str]  # the budget's own set when the pool is the whole fleet: read it before placing
    pool_nodes: frozenset[str]
    widest: int
    long_nodes: int = 0

    def may_spread(self, request: Request) -> bool:
        """Whether `request` may take nodes that long requests do not hold yet: within the budget, and
        leaving at least one node of the pool with no long request on it, for short ones."""
        spread = request.node_count
        within_budget = len(self.held) + spread <= self._budget()
        return within_budget and self.long_nodes + spread <= max(len(self.pool_nodes) - 1, 1)

    def _budget(self) -> int:
        """The most nodes the long requests it governs may hold: the pool's less the widest's, at least 1."""
        return max(len(self.pool_nodes) - self.widest, 1)

    def may_fit_held(self, snapshot: Snapshot, request: Request) -> bool:
        """Whether enough held nodes have the GPUs free for `request` (a quick check before a trial)."""
        per_node_milli = snapshot.least_gpus(request) * 1000 / request.node_count - 1e-6
        wanted = request.node_count
        for name in self.held:
            state = snapshot.by_name[name]
            if state.schedulable and state.free_milli >= per_node_milli:
                wanted -= 1
                if not wanted:
                    return True
        return False

    def reason(self) -> str:
        if len(self.held) < self._budget():
            return (
                f"long requests run on {self.long_nodes} of its pool's {len(self.pool_nodes)} nodes, the "
                "most they may: one node is kept for short requests"
            )
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
        # (width, placement) of each long request running or placed this cycle, once a long request asks; it
        # counts against the budget of pools whose widest request is wider than its width (`_width`)
        self.long: list[tuple[float, Placement]] | None = None
        self.long_nodes: set[str] = set()  # nodes running any long request
        self.held: dict[int, set[str]] = {}  # widest -> nodes of the long requests narrower than it
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
        if self.long is None:
            long_s = self.long_job_s
            self.long = [
                (_width(q), r.placement)
                for r in (*self.running, *started)
                if not r.borrowed
                and (q := r.request).max_duration_s is not None
                and q.max_duration_s > long_s
            ]
            self.long_nodes = {a.node for _, placement in self.long for a in placement.nodes}
        held = self.held.get(widest)
        if held is None:
            if all(width < widest for width, _ in self.long):  # the usual case: none is exempt
                held = self.held[widest] = set(self.long_nodes)
            else:
                governed = (a.node for width, p in self.long if width < widest for a in p.nodes)
                held = self.held[widest] = set(governed)
        names = pool_nodes(self.snapshot, pool)
        if len(names) == len(self.snapshot.nodes):  # the whole fleet: nothing to intersect
            return Room(held, names, widest, len(self.long_nodes))
        return Room(held & names, names, widest, len(self.long_nodes & names))

    def placed(self, request: Request, placement: Placement) -> None:
        """Count a placement made this cycle: a governed long request counts against every budget wider
        than it (the widest request's own nodes come back for the next wide one's drain when it ends)."""
        if self.long is None or not self.is_long(request):
            return
        width, nodes = _width(request), [a.node for a in placement.nodes]
        self.long.append((width, placement))
        self.long_nodes.update(nodes)
        for widest, held in self.held.items():
            if width < widest:
                held.update(nodes)

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


def _width(request: Request) -> float:
    """Its node count, against which budgets it counts; a reserved request is exempt from every one."""
    return math.inf if request.tier is Tier.RESERVED else request.node_count


def pool_nodes(snapshot: Snapshot, pool: tuple[int, ...]) -> frozenset[str]:
    """The names of the fleet's nodes of these classes, cordoned ones included (static: cached)."""
    key = ("pool_nodes", pool)
    cached = snapshot.nomination_cache.get(key)
    if cached is None:
        wanted = set(pool)
        cached = frozenset(state.name for state in snapshot.nodes if state.class_id in wanted)
        snapshot.nomination_cache[key] = cached
    return cached
