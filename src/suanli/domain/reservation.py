"""The blocked head's reservation: its earliest start and the nodes it would take (EASY backfill's shadow)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from suanli.domain.plan import Placement
from suanli.domain.policies import Policy
from suanli.domain.preemption import Running
from suanli.domain.request import Request
from suanli.domain.scheduler import place
from suanli.domain.snapshot import Snapshot


def reserve(
    snapshot: Snapshot,
    head: Request,
    running: Sequence[Running],
    policy: Policy,
    now: float,
    *,
    spare_free: bool = False,
) -> tuple[float, Placement] | None:
    """The head's earliest start and where it would go, releasing rentals by expected end; None if unbounded.

    The snapshot is restored. Rentals without an expected end never release, so they bound nothing. With
    `spare_free`, among the placements that fit at that start the one holding the fewest GPUs free *now*
    is preferred (see `_spare_free`): GPUs free now on reserved nodes can only take jobs that end in time.
    """
    free_now = {s.name: s.free_milli for s in snapshot.nodes} if spare_free else {}
    timed = sorted(
        (r for r in running if r.expected_end_s is not None), key=lambda r: (r.expected_end_s, r.request.id)
    )
    need = head.gpus_per_node * head.node_count
    free = snapshot.gpu_count - snapshot.allocated_milli() / 1000
    undos = []
    try:
        for position, r in enumerate(timed):
            undos.extend(snapshot.release(a) for a in r.placement.nodes)
            free += r.gpus
            if free + 1e-9 < need:
                continue
            outcome = place(snapshot, head, policy)
            if isinstance(outcome, Placement):
                for allocation in outcome.nodes:
                    snapshot.release(allocation)
                if spare_free:  # everything that ends at the same instant is gone by then too
                    for later in timed[position + 1 :]:
                        if later.expected_end_s != r.expected_end_s:
                            break
                        undos.extend(snapshot.release(a) for a in later.placement.nodes)
                    outcome = _spare_free(snapshot, head, policy, outcome, free_now)
                return max(now, r.expected_end_s or now), outcome
        return None
    finally:
        for undo in reversed(undos):
            undo()


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
                for placed in outcome.nodes:
                    snapshot.release(placed)
                if locked(outcome) < locked(found):
                    found = outcome
                    cordoned.append(allocation.node)
                    continue
            snapshot.set_schedulable(allocation.node, True)
    finally:
        for name in cordoned:
            snapshot.set_schedulable(name, True)
    return found
