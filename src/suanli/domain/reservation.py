"""Reservations: the blocked head's earliest start and nodes (EASY backfill's shadow), and each request's
earliest slot against the bookings made before it (conservative backfill, as Slurm's backfill plugin)."""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass

from suanli.domain.plan import Placement
from suanli.domain.policies import Policy
from suanli.domain.request import Request, WholeGpus
from suanli.domain.running import Running
from suanli.domain.scheduler import nominate, place, trial_place
from suanli.domain.snapshot import Snapshot


def reserve(
    snapshot: Snapshot,
    head: Request,
    running: Sequence[Running],
    policy: Policy,
    now: float,
    *,
    spare_free: bool = False,
    maintenance: Sequence[tuple[str, float, float]] = (),
) -> tuple[float, Placement] | None:
    """The head's earliest start and where it would go, releasing rentals by expected end (`expected_end`:
    one past its declared end, at the next instant); None if unbounded.

    The snapshot is restored. Rentals without an expected end never release, so they bound nothing. With
    `spare_free`, among the placements that fit at that start the one holding the fewest GPUs free *now*
    is preferred (see `_spare_free`): GPUs free now on reserved nodes can only take jobs that end in time.
    `maintenance` ((node, start, end) windows to come): a head that declares its duration is not reserved on
    a node whose window overlaps its run, and may start when a window ends (or now, on other nodes).
    """
    free_now = {s.name: s.free_milli for s in snapshot.nodes} if spare_free else {}
    windows = _windows_ahead(snapshot, head, maintenance, now)
    # (instant, 0, id, running rental released then) or (instant, 1, "", None): a window's end (and now)
    # is a start to try too; a heap, since the head usually fits long before the last rental ends
    events: list[tuple[float, int, str, Running | None]] = [
        (end_s, 0, r.request.id, r) for r in running if (end_s := expected_end(r, now)) != math.inf
    ]
    if windows:
        events.extend((t, 1, "", None) for t in {now, *(end_s for _, _, end_s in windows)})
    heapq.heapify(events)
    need = snapshot.least_gpus(head)
    free = snapshot.gpu_count - snapshot.allocated_milli() / 1000
    undos = []
    try:
        while events:
            start_s, _, _, r = heapq.heappop(events)
            if r is not None:
                undos.extend(snapshot.release(a) for a in r.placement.nodes)
                free += r.gpus
            if free + 1e-9 < need:
                continue
            overlapping = _overlapping(windows, start_s, head.max_duration_s)
            with snapshot.cordoned(overlapping):
                outcome = place(snapshot, head, policy)
                if not isinstance(outcome, Placement):
                    continue
                snapshot.unplace(outcome)
                if spare_free:  # everything that ends at the same instant is gone by then too
                    while events and events[0][0] == start_s:
                        later = heapq.heappop(events)[3]
                        if later is not None:
                            undos.extend(snapshot.release(a) for a in later.placement.nodes)
                    outcome = _spare_free(snapshot, head, policy, outcome, free_now)
                return start_s, outcome
        return None
    finally:
        for undo in reversed(undos):
            undo()


def _windows_ahead(
    snapshot: Snapshot, head: Request, maintenance: Sequence[tuple[str, float, float]], now: float
) -> list[tuple[str, float, float]]:
    """The windows that matter to `head`: on this fleet and not over, for a head that declares how long it
    runs (one that does not is placed anywhere and told to leave before a window, as the walk does)."""
    if head.max_duration_s is None:
        return []
    return [w for w in maintenance if w[2] > now and w[0] in snapshot.by_name]


def _overlapping(
    windows: Sequence[tuple[str, float, float]], start_s: float, duration_s: float | None
) -> set[str]:
    """Nodes whose window overlaps a run over [start_s, start_s + duration_s)."""
    if not windows or duration_s is None:
        return set()
    return {
        node for node, begins_s, ends_s in windows if begins_s < start_s + duration_s and ends_s > start_s
    }


def _spare_free(
    snapshot: Snapshot, head: Request, policy: Policy, found: Placement, free_now: Mapping[str, int]
) -> Placement:
    """`found` moved off the nodes with GPUs free now, one node at a time, while the head still fits.

    The head's start is unchanged (the trial runs on the snapshot as of that start); a node is kept out of
    the reservation when the placement without it locks fewer GPUs that are free now. Snapshot restored.
    """

    def locked(placement: Placement) -> int:
        return sum(free_now.get(a.node, 0) for a in placement.nodes)

    cordoned: list[str] = []
    try:
        for allocation in sorted(found.nodes, key=lambda a: (-free_now.get(a.node, 0), a.node)):
            if free_now.get(allocation.node, 0) <= 0 or locked(found) <= 0:
                break
            snapshot.set_schedulable(allocation.node, False)
            outcome = place(snapshot, head, policy)
            if isinstance(outcome, Placement):
                snapshot.unplace(outcome)
                if locked(outcome) < locked(found):
                    found = outcome
                    cordoned.append(allocation.node)
                    continue
            snapshot.set_schedulable(allocation.node, True)
    finally:
        for name in cordoned:
            snapshot.set_schedulable(name, True)
    return found


# A rental past its declared end is being stopped (the platform ends a rental at its time limit), so it is
# expected to free its capacity at the next instant: a head waiting on it starts then, and nothing that would
# still run then (a backfill of any length) goes onto its nodes in front of it. Counted a minute away, short
# backfills kept taking the head's nodes cycle after cycle while the stop went through, and held it up to a
# minute past its reserved start.
OVERDUE_S = 1.0


@dataclass(frozen=True, slots=True)
class Booking:
    """A pending request's planned start (conservative backfill): its nodes are held over [start, end)."""

    request_id: str
    start_s: float
    end_s: float  # math.inf for a request without a declared duration
    nodes: frozenset[str]


def expected_end(running: Running, now: float) -> float:
    """When `running` frees its capacity in the plan; one already past its declared end, `OVERDUE_S` from now;
    one on borrowed capacity, now or at its notice deadline (it is taken back when needed)."""
    if running.borrowed:
        return max(now, running.notice_deadline_s or now)
    end = running.expected_end_s
    if end is None:
        return math.inf
    return end if end > now else now + OVERDUE_S


@dataclass(frozen=True, slots=True)
class Slot:
    """Where and when a request can run: the nodes it would hold, and its placement when it starts now."""

    start_s: float
    nodes: frozenset[str]
    placement: Placement | None  # None for a later start planned on one node by free GPU counts


def earliest_slot(
    snapshot: Snapshot,
    request: Request,
    timed: Sequence[Running],
    bookings: Sequence[Booking],
    policy: Policy,
    now: float,
    horizon_s: float,
    not_before_s: float = -math.inf,
    ends: Sequence[float] | None = None,
    maintenance: Sequence[tuple[str, float, float]] = (),
) -> Slot | None:
    """The earliest start up to `horizon_s` (from `not_before_s`) at which `request` fits its whole declared
    run; None if none.

    `timed` is the running rentals by `expected_end` (rentals without one never release); `ends`, if given,
    is their `expected_end`s in the same order (a caller planning many requests keeps it). Candidate starts
    are now and each instant capacity frees up (a rental ends, a booking ends); at each, the rentals ended by
    then are released and every node a booking holds at any time over the request's run is left out, as
    Slurm's backfill map does with whole nodes. A start now is placed on the snapshot (and undone); a later
    start of a one-node whole-GPU request takes the node with the fewest free GPUs that fit (best fit), and
    any other shape is placed on the snapshot brought to that start. `maintenance` is (node, start, end) of
    the windows to come: a node is left out of a start inside its window and, for a request that declares its
    duration, of a start whose run its window would begin in (as `Gates.maintenance` for a start now); a
    window's end is a candidate start too. The snapshot is restored.
    """
    duration = request.max_duration_s if request.max_duration_s is not None else math.inf
    if ends is None:
        ends = [expected_end(r, now) for r in timed]
    starts = sorted(
        {now}
        | {e for e in ends if e <= horizon_s}
        | {b.end_s for b in bookings if now < b.end_s <= horizon_s}
        | {end_s for _, _, end_s in maintenance if now < end_s <= horizon_s}
    )
    declared = request.max_duration_s is not None
    # GPUs, CPU and memory free per node that could ever host the request, as of each start, kept by
    # arithmetic: the snapshot is brought to a start (its rentals released) only for shapes counts cannot
    # place
    whole = isinstance(request.shape, WholeGpus)
    classes = set(nominate(snapshot, request)[0])
    node_free = {  # GPUs, CPU milli and memory MiB free
        s.name: [s.free_milli / 1000, s.cpu_free, s.memory_free]
        for s in snapshot.nodes
        if s.schedulable and s.class_id in classes
    }
    by_count = whole and request.node_count == 1
    need = _need(request)
    # the bookings overlapping [start, start + duration) as starts advance: one enters once start passes
    # its start less the duration, and leaves once start reaches its end
    entering = sorted(bookings, key=lambda b: b.start_s - duration)
    leaving = sorted(bookings, key=lambda b: b.end_s)
    holders: dict[str, int] = {}  # node -> bookings holding it over the run from the current start
    # nodes that meet the request's need (free only grows as rentals release), and how many of them no
    # booking holds: the count a multi-node or whole-GPU request needs before a placement is worth trying
    fitting = {name for name, free in node_free.items() if _fits(free, need)}
    available = len(fitting)
    undos: list[Callable[[], None]] = []
    released = applied = entered = left = 0
    try:
        for start in starts:
            while released < len(timed) and ends[released] <= start:
                for allocation in timed[released].placement.nodes:
                    free = node_free.get(allocation.node)
                    if free is not None:
                        free[0] += allocation.gpus
                        free[1] += allocation.cpu_milli
                        free[2] += allocation.memory_mib
                        if allocation.node not in fitting and _fits(free, need):
                            fitting.add(allocation.node)
                            available += not holders.get(allocation.node)
                released += 1
            while entered < len(entering) and entering[entered].start_s - duration < start:
                for name in entering[entered].nodes:
                    holders[name] = holders.get(name, 0) + 1
                    available -= holders[name] == 1 and name in fitting
                entered += 1
            while left < len(leaving) and leaving[left].end_s <= start:
                for name in leaving[left].nodes:
                    holders[name] -= 1
                    available += not holders[name] and name in fitting
                left += 1
            if start < not_before_s or (whole and available < request.node_count):
                continue
            held = {name for name, count in holders.items() if count}
            held |= _down(maintenance, start, start + duration if declared else start)
            if by_count and start > now:
                best = _best_fit(node_free, need, held)
                if best is None:
                    continue
                return Slot(start, frozenset({best}), None)
            while applied < released:
                undos.extend(snapshot.release(a) for a in timed[applied].placement.nodes)
                applied += 1
            found = trial_place(snapshot, request, policy, held)
            if found is not None:
                nodes = frozenset(a.node for a in found.nodes)
                return Slot(start, nodes, found if start <= now else None)
        return None
    finally:
        for undo in reversed(undos):
            undo()


Need = tuple[float, int, int]  # what one node must have free: GPUs (less a rounding margin), CPU milli, MiB


def _need(request: Request) -> Need:
    """What one node must have free for the request."""
    return (request.gpus_per_node - 1e-9, request.cpu_milli, request.memory_mib)


def _best_fit(node_free: Mapping[str, list[float]], need: Need, held: Collection[str]) -> str | None:
    """The node outside `held` with the fewest free GPUs that still meet `need` (then by name); None if none
    does (every fitting one is in maintenance)."""
    fitting = (name for name, free in node_free.items() if name not in held and _fits(free, need))
    return min(fitting, key=lambda name: (node_free[name][0], name), default=None)


def _down(maintenance: Sequence[tuple[str, float, float]], start_s: float, end_s: float) -> set[str]:
    """Nodes a run over [start_s, end_s) must stay off: inside a window at its start, or whose window begins
    before it ends (end_s == start_s: a run without a declared duration, given notice at the window)."""
    return {
        node
        for node, window_start_s, window_end_s in maintenance
        if window_start_s <= start_s < window_end_s or start_s < window_start_s < end_s
    }


def _fits(free: Sequence[float], need: Need) -> bool:
    return free[0] >= need[0] and free[1] >= need[1] and free[2] >= need[2]
