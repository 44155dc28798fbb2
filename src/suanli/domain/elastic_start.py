"""Elastic starts: a request that declares `min_gpus` may start smaller than it asks when it does not fit
whole, and is grown toward its size as capacity frees.

The sizes are the ones a live rental resizes between (`elastic.grow`, `app/resizing.py`): a one-node
request takes fewer GPUs on its node, a gang fewer whole nodes of its own shape. Without this, a wide
request waits for a drain while GPUs idle around it, and short-first orders leave no short work to fill the
drain (docs/queueing.md, "Elastic starts").
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace

from suanli.domain.elastic import grow
from suanli.domain.plan import Placement
from suanli.domain.policies import Policy
from suanli.domain.request import Request, Tier, WholeGpus
from suanli.domain.reservation import Booking
from suanli.domain.running import Running
from suanli.domain.snapshot import Snapshot


def full_gpus(request: Request) -> int:
    """The GPUs `request` asks for in all (whole GPUs only)."""
    shape = request.shape
    return shape.count * request.node_count if isinstance(shape, WholeGpus) else 0


def least_size(request: Request) -> tuple[int, int] | None:
    """The fewest nodes, and whole GPUs on each, an elastic `request` may run on (`Running.least`: what a
    preemption may trim it to); None when it is not elastic."""
    shape = request.shape
    if request.min_gpus is None or not isinstance(shape, WholeGpus):
        return None
    if request.node_count == 1:
        return 1, request.min_gpus
    return max(1, math.ceil(request.min_gpus / shape.count)), shape.count


def at_size(request: Request, gpus: float) -> Request:
    """`request` as it runs on `gpus` of its GPUs: an elastic one's declared duration, given for its full
    size, stretched by how much slower it runs there (as many GPU-seconds at a lower speed)."""
    full, declared = full_gpus(request), request.max_duration_s
    if request.min_gpus is None or declared is None or full <= 0 or gpus <= 0 or gpus >= full:
        return request
    return replace(request, max_duration_s=declared * full / gpus)


def smaller_sizes(request: Request) -> Iterator[Request]:
    """`request` at each size below its own down to its `min_gpus`, largest first (none if not elastic),
    each declaring the longer duration it runs at that size (as many GPU-seconds at a lower speed)."""
    shape = request.shape
    if request.min_gpus is None or not isinstance(shape, WholeGpus):
        return
    least_nodes, least_gpus = least_size(request) or (request.node_count, shape.count)
    if request.node_count == 1:
        sizes = [(count, 1) for count in range(shape.count - 1, least_gpus - 1, -1)]
    else:
        sizes = [(shape.count, nodes) for nodes in range(request.node_count - 1, least_nodes - 1, -1)]
    for count, nodes in sizes:
        yield replace(at_size(request, count * nodes), shape=WholeGpus(count), node_count=nodes)


@dataclass(frozen=True, slots=True)
class Drain:
    """Nodes held for pending requests' planned starts: a rigid blocked head's reservation (backfill), or
    every booking (the conservative queue), each as its nodes and start (None: unknown). A growth is capacity
    given ahead of them, so it keeps off these nodes as a backfill would."""

    starts: tuple[tuple[frozenset[str], float | None], ...]

    @classmethod
    def for_head(cls, nodes: Iterable[str], start_s: float | None) -> Drain:
        return cls(((frozenset(nodes), start_s),))

    @classmethod
    def for_bookings(cls, bookings: Iterable[Booking]) -> Drain | None:
        starts = tuple((b.nodes, b.start_s) for b in bookings)
        return cls(starts) if starts else None

    def next_start(self, nodes: Collection[str], end_s: float | None) -> float | None:
        """The first planned start on any of `nodes` that a rental ending by `end_s` does not outlast now
        (None: none): a shrink may not stretch it past that, as a backfill may not start past it."""
        if end_s is None:
            return None
        starts = [s for n, s in self.starts if s is not None and s >= end_s and not n.isdisjoint(nodes)]
        return min(starts, default=None)

    def keep_off(self, end_s: float | None) -> frozenset[str]:
        """The nodes a rental that ends by `end_s` (None: unknown) may not grow onto: those of every start
        it would outlast (growing never makes it end later)."""
        kept = (n for n, start_s in self.starts if end_s is None or start_s is None or end_s > start_s)
        return frozenset().union(*kept)


def grow_toward_size(
    snapshot: Snapshot,
    running: Sequence[Running],
    policy: Policy,
    drain: Drain | None = None,
    spot_yields: Collection[tuple[str, str]] = (),
    started_s: Mapping[str, float] | None = None,
    allows: Callable[[Running, Placement], bool] | None = None,
) -> list[Placement]:
    """The parts added, on the snapshot, to running elastic rentals held below their size, oldest first
    (by `started_s`, when each began, where a rental's `started_at_s` is its last resize): as many more
    GPUs on a one-node rental's node as are free there, as many more whole nodes near a gang's as fit; off
    the nodes of `drain`'s planned starts that the rental would outlast, and none to spot in a pool of
    `spot_yields` (a higher tier waits for capacity there: it would take them back at once). A part
    `allows` refuses (it is on the snapshot when asked: capacity held for contracts) is given back, and a
    smaller one tried, as the server's leader steps down."""
    began = started_s or {}
    added: list[Placement] = []
    for job in sorted(running, key=lambda r: (began.get(r.request.id, r.started_at_s), r.request.id)):
        request = job.request
        missing = full_gpus(request) - round(job.gpus)
        if request.min_gpus is None or missing <= 0 or job.preempted_by is not None:
            continue
        if request.tier is Tier.SPOT and yields_here(spot_yields, snapshot, job.placement):
            continue
        avoid = frozenset() if drain is None else drain.keep_off(job.expected_end_s)
        with snapshot.cordoned(avoid):
            part = _grown_part(snapshot, job, missing, policy, allows)
        if part is not None:
            added.append(part)
    return added


def yields_here(spot_yields: Collection[tuple[str, str]], snapshot: Snapshot, placement: Placement) -> bool:
    """Whether a spot rental on `placement` is in a pool (model, region) where a higher tier waits for
    capacity (`CycleDecision.spot_yields`): it does not grow there."""
    if not spot_yields or not placement.nodes:
        return False
    node = snapshot.by_name[placement.nodes[0].node].node
    return (node.gpu_model, node.region) in spot_yields


def _grown_part(
    snapshot: Snapshot,
    job: Running,
    missing: int,
    policy: Policy,
    allows: Callable[[Running, Placement], bool] | None = None,
) -> Placement | None:
    """The largest part that fits of the `missing` GPUs of a running elastic rental (and that `allows`
    lets it keep), if any."""
    request, held = job.request, job.placement
    if request.node_count == 1:  # more GPUs on its node (held in one part or in several)
        held = replace(held, nodes=held.nodes[:1])
        steps = [{"extra_gpus_per_node": extra} for extra in range(missing, 0, -1)]
    else:
        per_node = request.shape.count  # type: ignore[union-attr]  # whole GPUs (full_gpus > 0)
        steps = [{"extra_nodes": extra} for extra in range(missing // per_node, 0, -1)]
    rigid = replace(request, min_gpus=None)  # the added part is a plain request of its own shape
    for step in steps:
        part = grow(snapshot, rigid, held, policy, **step)
        if isinstance(part, Placement):
            if allows is None or allows(job, part):
                return part
            snapshot.unplace(part)
    return None
