"""What a live rental resized to more nodes must fit within before the leader grows it in place: its tenant's
GPU quota and spend caps, and the capacity open contracts hold for other tenants. The scheduler's cycle asks
(`Scheduler._grow`); these answer from the cycle's own view, with the added nodes as one more rental."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from suanli.app.records import Rental
from suanli.app.rentals import to_request
from suanli.domain.capacity import FULL_MILLI
from suanli.domain.contracts import Contract, open_holds
from suanli.domain.plan import Pending, Placement, Reason
from suanli.domain.preemption import Running
from suanli.domain.quotas import Limits
from suanli.domain.request import Request, Tier
from suanli.domain.snapshot import Snapshot


@dataclass(frozen=True, slots=True)
class Held:
    """A rental holding capacity after this cycle, as large as it is now (not as its resize asks)."""

    request: Request
    started_at_s: float | None  # None: placed in this cycle
    nodes: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Holding:
    """Every rental holding capacity after this cycle, and the open contracts."""

    held: Sequence[Held]
    contracts: Sequence[Contract]


def holding_after(
    running: Sequence[Running], queue: Sequence[Request], placed: Sequence[Placement]
) -> list[Held]:
    """The live rentals at their allocated size, and this cycle's placements."""
    by_id = {r.id: r for r in queue}
    held = [
        Held(
            replace(r.request, node_count=len(r.placement.nodes)),
            r.started_at_s,
            tuple(a.node for a in r.placement.nodes),
        )
        for r in running
    ]
    held += [
        Held(by_id[p.request_id], None, tuple(a.node for a in p.nodes))
        for p in placed
        if p.request_id in by_id
    ]
    return held


def within_limits(
    limits: Limits | None, held: Sequence[Held], rental: Rental, have: int, extra: int, now_s: float
) -> Pending | None:
    """Why the tenant's GPU quota or spend cap does not allow `extra` more nodes, if it does not: they count
    as one more rental of that size, at its rate per node."""
    if limits is None or limits.tenants.get(rental.tenant_id) is None:
        return None
    more = replace(to_request(rental), id=f"{rental.id}+grow", node_count=extra)
    per_node = (rental.price_micros_per_hour or 0) // max(have, 1)
    price = limits.price_micros_per_hour

    def priced(request: Request) -> int:
        return per_node * extra if request.id == more.id else price(request)

    ledger = replace(limits, price_micros_per_hour=priced).ledger(
        ((h.request, h.started_at_s) for h in held), now_s
    )
    return ledger.check(more)


def held_for_contracts(
    snapshot: Snapshot, holding: Holding, rental: Rental, added: Placement, now_s: float
) -> Pending | None:
    """Why `added` (just taken on the snapshot) eats into capacity open contracts hold for other tenants, if
    it does; then it is given back. A holder's growth within its contract, and spot, may take it."""
    if not holding.contracts or Tier.parse(rental.spec.tier) is Tier.SPOT:
        return None
    pool_of = {s.name: (s.node.gpu_model, s.node.region) for s in snapshot.nodes}
    holds = open_holds(holding.contracts, now_s, [(h.request, h.nodes) for h in holding.held], pool_of)
    if holds.claim(replace(to_request(rental), node_count=len(added.nodes)))[1] is not None:
        return None
    available: dict[tuple[str, str], float] = {}  # free GPUs after the growth, plus spot that would yield
    for state in snapshot.nodes:
        if state.schedulable:
            pool = pool_of[state.name]
            available[pool] = available.get(pool, 0.0) + sum(e[0] for e in state.gpus) / FULL_MILLI
    for h in holding.held:
        if h.request.tier is Tier.SPOT:
            for node in h.nodes:
                available[pool_of[node]] = available.get(pool_of[node], 0.0) + h.request.gpus_per_node
    held = holds.held()
    for pool in {pool_of[a.node] for a in added.nodes}:
        if held.get(pool, 0.0) > 1e-9 and available.get(pool, 0.0) < held[pool] - 1e-9:
            snapshot.unplace(added)
            model, region = pool
            return Pending(
                rental.id,
                Reason.CONTRACT_HOLD,
                f"{model} in {region}: free capacity is held for open contracts",
            )
    return None
