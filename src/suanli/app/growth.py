"""What a live rental resized to more GPUs or nodes must fit within before the leader grows it in place: its
tenant's GPU quota and spend caps, and the capacity open contracts hold for other tenants. The scheduler's
cycle asks (`app/resizing.py`); these answer from the cycle's own view, with the added part as one more
rental. A resized rental counts at the size it holds until the leader applies the new one (`held_request`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from suanli.app.records import Rental
from suanli.domain.contracts import Contract, growth_breach, hold_pending
from suanli.domain.elastic_start import at_size, full_gpus, least_size
from suanli.domain.plan import NodeAllocation, Pending, Placement
from suanli.domain.quotas import Limits
from suanli.domain.request import Request, Tier, WholeGpus
from suanli.domain.running import Running
from suanli.domain.scheduler import landed
from suanli.domain.snapshot import Snapshot


@dataclass(frozen=True, slots=True)
class Held:
    """A rental holding capacity after this cycle, as large as it is now (not as its resize asks)."""

    request: Request
    started_at_s: float | None  # None: placed in this cycle
    placement: Placement
    under_notice: bool = False  # a preemption victim: its capacity is promised, it yields to no holder
    price_micros_per_hour: int | None = None  # a part grown this cycle: what it adds to its rental's rate


def held_request(request: Request, nodes: Sequence[NodeAllocation]) -> Request:
    """`request` (a live rental's, from its spec) as large as what it holds: its nodes, and as many whole
    GPUs on each as it has there."""
    if not nodes:
        return request
    shape = request.shape
    if isinstance(shape, WholeGpus) and nodes[0].slices:
        shape = WholeGpus(len(nodes[0].slices))
    return replace(request, shape=shape, node_count=len(nodes), min_gpus=None)  # live: it grows by resizes


def started_smaller(queue: Sequence[Request], placed: Sequence[Placement], now_s: float) -> list[Running]:
    """This cycle's placements of elastic requests below their size, as live rentals to grow in the same
    cycle (as the simulator grows every running job after admission): a rental placed on one GPU and
    grown to two before its agent hears of it starts on two, with no restart."""
    by_id = {r.id: r for r in queue}
    started = []
    for placement in placed:
        request = by_id.get(placement.request_id)
        if request is None or request.min_gpus is None or placement.gpus >= full_gpus(request):
            continue
        held = held_request(at_size(request, placement.gpus), placement.nodes)  # its end at this size
        started.append(Running(held, placement, now_s, least=least_size(request)))
    return started


def wants_resize(rental: Rental, held: Request) -> bool:
    """A live whole-GPU rental whose spec asks for another GPU count per node, or more nodes, than it has."""
    return isinstance(held.shape, WholeGpus) and (
        (rental.spec.gpus != held.shape.count and rental.spec.gpus > 0) or rental.spec.nodes > held.node_count
    )


def holding_after(
    running: Sequence[Running], queue: Sequence[Request], placed: Sequence[Placement]
) -> list[Held]:
    """The live rentals at their allocated size, and this cycle's placements at theirs (an elastic one may
    have started smaller: it counts, and is priced, as large as it is)."""
    by_id = {r.id: r for r in queue}
    held = [Held(r.request, r.started_at_s, r.placement, r.preempted_by is not None) for r in running]
    held += [
        Held(held_request(by_id[p.request_id], p.nodes), None, p) for p in placed if p.request_id in by_id
    ]
    return held


def within_limits(
    limits: Limits | None,
    held: Sequence[Held],
    more: Request,
    price_micros_per_hour: int,
    now_s: float,
    snapshot: Snapshot,
    growing: Placement,
    moved_end_s: float | None = None,
) -> Pending | None:
    """Why the tenant's GPU quota or spend cap does not allow the added part `more` (its own id) of the
    rental on `growing`, if it does not: it counts as one more rental of that size on that rental's model
    (quotas count the model a rental runs on), at `price_micros_per_hour`, as do the parts grown before it
    in this cycle at theirs. `moved_end_s`: an elastic rental's time limit once grown (its work left runs
    faster): the rental and the part then both end there, so a growth that spends its work sooner but no
    more of it adds nothing to what is committed (it was charged as another rental to the old limit)."""
    if limits is None or limits.tenants.get(more.tenant) is None:
        return None
    price = limits.price_micros_per_hour
    grown = {h.request.id: h.price_micros_per_hour for h in held if h.price_micros_per_hour is not None}
    grown[more.id] = price_micros_per_hour
    if moved_end_s is not None:
        held = [
            replace(h, request=replace(h.request, max_duration_s=moved_end_s - h.started_at_s))
            if h.request.id == growing.request_id and h.started_at_s is not None
            else h
            for h in held
        ]
        more = replace(more, max_duration_s=max(moved_end_s - now_s, 0.0))

    def priced(request: Request) -> int:
        """A part grown in this cycle (none has a rate of its own yet) at what it adds to its rental's."""
        return grown[request.id] if request.id in grown else price(request)

    ledger = replace(limits, price_micros_per_hour=priced).ledger(
        ((landed(snapshot, h.request, h.placement), h.started_at_s) for h in held), now_s
    )
    return ledger.check(landed(snapshot, more, growing))


def held_for_contracts(
    snapshot: Snapshot,
    held: Sequence[Held],
    contracts: Sequence[Contract],
    rental: Rental,
    added: Placement,
    more: Request,
    now_s: float,
) -> Pending | None:
    """Why `added` (just taken on the snapshot; `more` as a request) eats into capacity open contracts hold
    for other tenants, if it does (`growth_breach`); then it is given back."""
    holding = [(h.request, h.placement, h.under_notice) for h in held]
    tier = Tier.parse(rental.spec.tier)
    pool = growth_breach(snapshot, holding, contracts, added, replace(more, tier=tier), now_s)
    if pool is None:
        return None
    snapshot.unplace(added)
    return hold_pending(rental.id, pool)
