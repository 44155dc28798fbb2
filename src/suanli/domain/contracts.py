"""Compute futures: a tenant's contract for `gpus` GPUs of one model in one region over [start, end).

Pure: times are arguments. Guarantees:
- `check_contract` refuses (ContractError) a contract the fleet cannot honour at every instant of its window:
  the sum of overlapping contracts for that model and region stays within the fleet's GPUs of that model and
  region minus the GPUs of nodes in maintenance at that instant.
- `Holds` (built by `open_holds` for one instant) is what admission uses inside open windows: the holder's
  requests that can only land in that model and region, up to the contracted count, become `reserved` tier
  (so they may preempt spot with notice); a holder's request that could land elsewhere too claims the
  contract once it is placed in its pool (pricing and a running rental's claim go by placement too), and
  one larger than what is left of the contract uses that part of it (`Holds.partial`). The unclaimed rest of
  the contract is held back from everyone but its holder and spot, which may borrow it until the holder
  claims it. Spot never claims a contract (no contract applies to spot).
- `short_contracts` names the contracts a maintenance window would leave overbooked (its scheduling is
  refused unless forced); `contract_shortfalls` says by how much, and when.
- `transfer` hands a contract to another tenant before it ends.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime

from suanli.domain.capacity import FULL_MILLI
from suanli.domain.errors import ContractError
from suanli.domain.inventory import Fleet
from suanli.domain.plan import NodeAllocation, Pending, Placement, Reason
from suanli.domain.request import Request, Tier
from suanli.domain.snapshot import Snapshot


@dataclass(frozen=True, slots=True)
class Contract:
    id: str
    tenant: str
    model: str
    region: str
    gpus: int
    start_s: float
    end_s: float

    def open_at(self, now: float) -> bool:
        return self.start_s <= now < self.end_s

    def overlaps(self, start_s: float, end_s: float) -> bool:
        return self.start_s < end_s and start_s < self.end_s


@dataclass(frozen=True, slots=True)
class Maintenance:
    """A node out of service over [start, end): its GPUs cannot back a contract then."""

    node: str
    model: str
    region: str
    gpus: int
    start_s: float
    end_s: float


Pool = tuple[str, str]  # (model, region)


def fleet_capacity(fleet: Fleet) -> dict[Pool, int]:
    """GPUs of each (model, region) in the fleet."""
    capacity: dict[Pool, int] = {}
    for node in fleet.nodes:
        if node.gpu_count:
            key = (node.gpu_model, node.region)
            capacity[key] = capacity.get(key, 0) + node.gpu_count
    return capacity


def check_contract(
    new: Contract,
    existing: Iterable[Contract],
    fleet_capacity: Mapping[Pool, int],
    maintenance: Iterable[Maintenance] = (),
) -> None:
    """Raise ContractError unless the fleet can honour `new` beside `existing` at every instant of it."""
    if new.gpus < 1:
        raise ContractError(f"gpus must be 1 or more, not {new.gpus}")
    if not new.start_s < new.end_s:
        raise ContractError("the window must end after it starts")
    pool = (new.model, new.region)
    capacity = fleet_capacity.get(pool, 0)
    if capacity == 0:
        raise ContractError(f"the fleet has no {new.model} in {new.region} to contract", field="gpu_model")
    others = [c for c in existing if (c.model, c.region) == pool and c.overlaps(new.start_s, new.end_s)]
    down = [m for m in maintenance if (m.model, m.region) == pool and _overlap(m, new)]
    # what is booked or down only rises at a start: checking each start in the window covers every instant
    instants = sorted({new.start_s, *(c.start_s for c in others), *(m.start_s for m in down)})
    for t in (t for t in instants if new.start_s <= t < new.end_s):
        booked = sum(c.gpus for c in others if c.open_at(t))
        out = _down_at(down, t)
        if booked + new.gpus > capacity - out:
            at = datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%d %H:%M UTC")
            raise ContractError(
                f"{new.gpus} x {new.model} in {new.region} would overbook it from {at}: {capacity} GPUs, "
                f"{out} of them out of service (in maintenance or drained), {booked} already contracted"
            )


@dataclass(frozen=True, slots=True)
class ContractShortfall:
    """A contract left short: at `at_s`, the instant of the span where its pool is shortest (the first such),
    the pool's open contracts hold `contracted_gpus` against `in_service_gpus` GPUs not in maintenance."""

    contract: Contract
    at_s: float
    contracted_gpus: int
    in_service_gpus: int

    @property
    def short_gpus(self) -> int:
        """GPUs the pool's contracts (this one's and others') hold beyond what is in service then."""
        return self.contracted_gpus - self.in_service_gpus


def contract_shortfalls(
    contracts: Iterable[Contract],
    fleet_capacity: Mapping[Pool, int],
    maintenance: Iterable[Maintenance],
    start_s: float,
    end_s: float,
) -> list[ContractShortfall]:
    """Each contract open at some instant of [start_s, end_s) when its pool's contracts add up to more than
    its GPUs less those in maintenance then, with the instant it is shortest by most: what a maintenance
    window over that span would leave short, and by how much."""
    return deepened_shortfalls(
        contracts, fleet_capacity, (), maintenance, start_s, end_s, already_short=False
    )


def deepened_shortfalls(
    contracts: Iterable[Contract],
    fleet_capacity: Mapping[Pool, int],
    before: Iterable[Maintenance],
    after: Iterable[Maintenance],
    start_s: float,
    end_s: float,
    *,
    already_short: bool = True,
    capacity_before: Mapping[Pool, int] | None = None,
) -> list[ContractShortfall]:
    """Each contract open at some instant of [start_s, end_s) when its pool is short with `after`'s
    maintenance, and (`already_short`) shorter than with `before`'s, with the instant it is shortest by
    most: what a change of maintenance, a drain, a new fleet (`capacity_before`: the old fleet's GPUs per
    pool) leaves short or makes shorter. A pool short already before is not the change's doing, unless the
    change takes more of it then."""
    was = fleet_capacity if capacity_before is None else capacity_before
    contracts, before, after = list(contracts), list(before), list(after)
    worst: dict[str, ContractShortfall] = {}
    for pool in {(c.model, c.region) for c in contracts}:
        mine = [c for c in contracts if (c.model, c.region) == pool and c.overlaps(start_s, end_s)]
        down_before = [m for m in before if (m.model, m.region) == pool]
        down_after = [m for m in after if (m.model, m.region) == pool]
        capacity, capacity_was = fleet_capacity.get(pool, 0), was.get(pool, 0)
        # what is booked or down only rises at a start: checking each start (and the span's) covers it all
        instants = {start_s, *(c.start_s for c in mine), *(m.start_s for m in (*down_before, *down_after))}
        for t in sorted(t for t in instants if start_s <= t < end_s):
            open_now = [c for c in mine if c.open_at(t)]
            contracted = sum(c.gpus for c in open_now)
            in_service = capacity - _down_at(down_after, t)
            short_before = (
                max(0, contracted - (capacity_was - _down_at(down_before, t))) if already_short else 0
            )
            if contracted - in_service <= short_before:
                continue
            for c in open_now:
                seen = worst.get(c.id)
                if seen is None or contracted - in_service > seen.short_gpus:
                    worst[c.id] = ContractShortfall(c, t, contracted, in_service)
    return sorted(worst.values(), key=lambda s: (s.contract.start_s, s.contract.id))


def _down_at(maintenance: Sequence[Maintenance], t: float) -> int:
    """GPUs of `maintenance` out of service at instant `t`: each node's once, however many of its windows
    (or a window and its drain) cover `t`."""
    return sum({m.node: m.gpus for m in maintenance if m.start_s <= t < m.end_s}.values())


def short_contracts(
    contracts: Iterable[Contract],
    fleet_capacity: Mapping[Pool, int],
    maintenance: Iterable[Maintenance],
    start_s: float,
    end_s: float,
) -> list[Contract]:
    """The contracts open at some instant of [start_s, end_s) when their pool's contracts add up to more than
    its GPUs less those in maintenance then: what a maintenance window over that span would leave short."""
    found = contract_shortfalls(contracts, fleet_capacity, maintenance, start_s, end_s)
    return [shortfall.contract for shortfall in found]


def transfer(contract: Contract, tenant: str, now: float) -> Contract:
    """The contract held by `tenant` from now on; refused once the window has closed."""
    if now >= contract.end_s:
        ended = datetime.fromtimestamp(contract.end_s, UTC)
        raise ContractError(
            f"contract {contract.id} ended at {ended:%Y-%m-%d %H:%M:%S} UTC; nothing to transfer"
        )
    if not tenant or tenant == contract.tenant:
        raise ContractError(f"contract {contract.id}: transfer to a different tenant, not {tenant!r}")
    return replace(contract, tenant=tenant)


@dataclass(slots=True)
class Holds:
    """Open contracts at one instant: what each has claimed, and the capacity still held for it."""

    contracts: list[Contract]
    claimed: dict[str, float]  # contract id -> GPUs its holder uses under it
    pool_of_node: Mapping[str, Pool]
    # running rentals that count as claims: `reserved` while their contract is open, so no claim (their
    # holder's own, or another holder's) and no on-demand request may take them as victims
    claiming: frozenset[str] = frozenset()

    def claim(
        self, request: Request, pools: Collection[Pool | None], gpus: float
    ) -> tuple[Request, Contract | None]:
        """The request as admission sees it: `reserved` when its tenant's open contracts in its pool cover it
        together (the first of them is returned; `book` fills them in turn); `pools`: every pool it can land
        in (or, once placed, the pools it took); `gpus`: what it takes there (MIG instances and shares at
        their part of a GPU, as pricing counts them)."""
        contract = self._own_contract(request, pools)
        if contract is None or gpus > self._room(contract) + 1e-9:
            return request, None
        return replace(request, tier=Tier.RESERVED), contract

    def claim_in_own_pool(
        self, request: Request, pools: Collection[Pool | None], gpus: float
    ) -> tuple[Request, Contract | None]:
        """A holder's request that may land in several `pools`, one of them an open contract's of its tenant
        with room for it: `reserved` and narrowed to that pool (its model and region), so it runs on the
        capacity its tenant prepaid, not at the on-demand price elsewhere while that capacity idles, held
        from everyone else."""
        for contract in self.contracts:
            pool = (contract.model, contract.region)
            if contract.tenant != request.tenant or pool not in pools:
                continue
            narrowed = replace(
                request,
                selector=replace(request.selector, models=frozenset({contract.model})),
                constraints=replace(request.constraints, regions=frozenset({contract.region})),
            )
            return self.claim(narrowed, {pool}, gpus)
        return request, None

    def partial(
        self, request: Request, pools: Collection[Pool | None], gpus: float
    ) -> tuple[Contract, float] | None:
        """A placed request of a holder larger than what its open contracts have left there: (the first of
        them, the GPUs of the request they cover), so what is held for the holder is used by it, not held
        again."""
        contract = self._own_contract(request, pools)
        if contract is None or (room := self._room(contract)) <= 1e-9:
            return None
        return contract, min(room, gpus)

    def _own_contract(self, request: Request, pools: Collection[Pool | None]) -> Contract | None:
        """The first open contract of the request's tenant in its one pool (spot never claims one)."""
        if request.tier is Tier.SPOT:
            return None
        return next(
            (c for c in self.contracts if c.tenant == request.tenant and set(pools) == {(c.model, c.region)}),
            None,
        )

    def book(self, contract: Contract, gpus: float) -> None:
        """Count `gpus` claimed under `contract` and its holder's other open contracts in its pool, filling
        each in turn (what is beyond them all counts against `contract`)."""
        left = gpus
        for sibling in self._pooled(contract):
            taken = min(left, max(0.0, sibling.gpus - self.claimed[sibling.id]))
            self.claimed[sibling.id] += taken
            left -= taken
        if left > 1e-9:
            self.claimed[contract.id] += left

    def _pooled(self, contract: Contract) -> list[Contract]:
        """The open contracts of `contract`'s holder in its pool, in order (`contract` among them): one
        holder's contracts in a pool hold capacity for it together, as billing counts them."""
        pool = (contract.model, contract.region)
        return [c for c in self.contracts if c.tenant == contract.tenant and (c.model, c.region) == pool]

    def _room(self, contract: Contract) -> float:
        """What the holder's open contracts in `contract`'s pool have left to claim, together."""
        return sum(max(0.0, c.gpus - self.claimed[c.id]) for c in self._pooled(contract))

    def held(self, besides: str | None = None) -> dict[Pool, float]:
        """GPUs held back per pool: the unclaimed part of every open contract (but those of tenant `besides`:
        what is held for a holder is not held back from the holder)."""
        held: dict[Pool, float] = {}
        for c in self.contracts:
            if c.tenant != besides:
                key = (c.model, c.region)
                held[key] = held.get(key, 0.0) + max(0.0, c.gpus - self.claimed[c.id])
        return held


def open_holds(
    contracts: Iterable[Contract],
    now: float,
    holding: Sequence[tuple[Request, Sequence[NodeAllocation]]],
    pool_of_node: Mapping[str, Pool],
) -> Holds:
    """Holds at `now`; `holding` lists running rentals (request, what it holds on each node) that count as
    claims, at the GPUs they hold: whole, then a holder's rentals larger than what is left of its contract
    for the part it covers (`Holds.partial`). Both are `claiming`: no claim may take them as victims."""
    open_now = sorted((c for c in contracts if c.open_at(now)), key=lambda c: (c.start_s, c.id))
    holds = Holds(open_now, {c.id: 0.0 for c in open_now}, pool_of_node)
    claiming = set()
    larger = []
    for request, nodes in holding:
        if request.tier is Tier.SPOT:  # borrowed capacity: it yields to the holder's claims
            continue
        gpus = sum(a.gpus for a in nodes)
        pools = {pool_of_node.get(a.node) for a in nodes}
        _, contract = holds.claim(request, pools, gpus)
        if contract is not None:
            holds.book(contract, gpus)
            claiming.add(request.id)
        else:
            larger.append((request, pools, gpus))
    for request, pools, gpus in larger:
        if (part := holds.partial(request, pools, gpus)) is not None:
            holds.book(*part)
            claiming.add(request.id)
    holds.claiming = frozenset(claiming)
    return holds


def pools_of(snapshot: Snapshot) -> dict[str, Pool]:
    """Each node's pool: (model, region)."""
    return {s.name: (s.node.gpu_model, s.node.region) for s in snapshot.nodes}


def pool_gpus(placement: Placement, pool_of: Mapping[str, Pool]) -> dict[Pool, float]:
    """The GPUs a placement takes in each pool."""
    gpus: dict[Pool, float] = {}
    for allocation in placement.nodes:
        pool = pool_of[allocation.node]
        gpus[pool] = gpus.get(pool, 0.0) + allocation.gpus
    return gpus


def available_for_holds(
    snapshot: Snapshot, pool_of: Mapping[str, Pool], spot: Iterable[Placement]
) -> dict[Pool, float]:
    """Per pool, what a holder could have now: free GPUs on schedulable nodes, plus the GPUs running spot
    holds (`spot`: those not under notice already), which it may preempt."""
    available: dict[Pool, float] = {}
    for state in snapshot.nodes:
        if state.schedulable:
            pool = pool_of[state.name]
            available[pool] = available.get(pool, 0.0) + sum(e[0] for e in state.gpus) / FULL_MILLI
    for placement in spot:
        for pool, gpus in pool_gpus(placement, pool_of).items():
            available[pool] = available.get(pool, 0.0) + gpus
    return available


def upcoming_held(
    contracts: Iterable[Contract], now: float, until: float, besides: str | None = None
) -> dict[Pool, float]:
    """Per pool, the most GPUs that contracts of others than `besides`, opening after `now` and by `until`,
    hold at once: what a request that would still run when they open must leave them (their holders would
    claim it back with notice at once)."""
    upcoming = [c for c in contracts if c.tenant != besides and now < c.start_s <= until]
    peak: dict[Pool, float] = {}
    for instant in {c.start_s for c in upcoming}:
        at: dict[Pool, float] = {}
        for c in (c for c in upcoming if c.open_at(instant)):
            at[(c.model, c.region)] = at.get((c.model, c.region), 0.0) + c.gpus
        for pool, gpus in at.items():
            peak[pool] = max(peak.get(pool, 0.0), gpus)
    return peak


def breached_pool(
    holds: Holds,
    available: Mapping[Pool, float],
    placement: Placement,
    tenant: str | None = None,
    ahead: Mapping[Pool, float] | None = None,
) -> Pool | None:
    """The pool whose capacity held for others than `tenant` `placement`, taken out of `available`, would
    eat into, if any; `ahead`: what contracts opening before the request would end hold there too."""
    held = holds.held(besides=tenant)
    for pool, gpus in (ahead or {}).items():
        held[pool] = held.get(pool, 0.0) + gpus
    for pool, gpus in pool_gpus(placement, holds.pool_of_node).items():
        if held.get(pool, 0.0) > 1e-9 and available.get(pool, 0.0) - gpus < held[pool] - 1e-9:
            return pool
    return None


def growth_breach(
    snapshot: Snapshot,
    holding: Sequence[tuple[Request, Placement, bool]],
    contracts: Sequence[Contract],
    added: Placement,
    more: Request,
    now: float,
) -> Pool | None:
    """The pool where `added` (a running rental's growth, just taken on the snapshot; `more` as a request of
    its tenant and tier) eats into capacity open contracts hold for other tenants, if it does, as admission
    judges a placement. `holding`: what runs (request, placement, under notice), this cycle's growths with
    it. A holder's growth, within its contract or beyond it on what is held for it, and spot, may take it."""
    if not contracts or more.tier is Tier.SPOT:
        return None
    pool_of = pools_of(snapshot)
    holds = open_holds(
        contracts, now, [(request, placement.nodes) for request, placement, _ in holding], pool_of
    )
    if holds.claim(more, pool_gpus(added, pool_of).keys(), added.gpus)[1] is not None:
        return None
    spot = (p for request, p, noticed in holding if request.tier is Tier.SPOT and not noticed)
    available = available_for_holds(snapshot, pool_of, spot)
    for pool, gpus in pool_gpus(added, pool_of).items():  # as it was before the growth took them
        available[pool] = available.get(pool, 0.0) + gpus
    return breached_pool(holds, available, added, more.tenant)


def hold_pending(request_id: str, pool: Pool) -> Pending:
    """Why a request waits: its placement would take capacity held for open contracts."""
    model, region = pool
    return Pending(
        request_id,
        Reason.CONTRACT_HOLD,
        f"{model} in {region}: free capacity is held for contracts (open, or opening while it would run)",
    )


def _overlap(down: Maintenance, contract: Contract) -> bool:
    return down.start_s < contract.end_s and contract.start_s < down.end_s
