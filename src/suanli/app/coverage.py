"""Contract coverage follows the contract's window: from its start the holder's rentals it covers pay 0
marginal price for the covered GPUs, and from its end (or its transfer) they pay what the coverage took off.

A rental placed inside an open window gets its coverage at placement (`contract_covered_gpu_milli` and
`contract_coverage_micros_per_hour` in its quote, `app/pricing.py`). A rental placed before the window opens
was priced on-demand; `extend_coverage` covers such rentals from the start, the earliest placed first, up to
what the contracts open then leave uncovered, and `pass_on_coverage` does the same from the end of a covered
one. When a window ends, or the contract is transferred, the tenant's live rentals may be covered beyond what
its contracts still open allow; `settle_coverage` takes the excess back, from the latest placed rental on.
Both are a rate change from that instant (a `rental_rates` row: the meter charges the rest at the new rate)
and read the rentals' coverage as it is, so running one again changes nothing. Spot is never covered.
"""

from __future__ import annotations

from datetime import datetime

from suanli.app.ports import UnitOfWork
from suanli.app.records import LIVE_STATES, ContractRecord, Rental
from suanli.domain.billing.money import round_half_up
from suanli.domain.request import Tier


def settle_coverage(uow: UnitOfWork, tenant_id: str, model: str, region: str, at: datetime) -> list[str]:
    """Re-price from `at` the tenant's live rentals in (model, region) whose coverage its contracts open at
    `at` no longer back; the ids re-priced."""
    contracted = _contracted_milli(uow, tenant_id, model, region, at)
    covered = [
        (r, _covered_milli(r)) for r in _in_pool(uow, tenant_id, model, region) if _covered_milli(r) > 0
    ]
    excess = sum(milli for _, milli in covered) - contracted
    changed: list[str] = []
    for rental, milli in sorted(covered, key=_placed, reverse=True):  # the latest placed loses it first
        if excess <= 0:
            break
        taken = min(milli, excess)
        excess -= taken
        _uncover(uow, rental, milli, milli - taken, at)
        changed.append(rental.id)
    return changed


def extend_coverage(uow: UnitOfWork, tenant_id: str, model: str, region: str, at: datetime) -> list[str]:
    """Re-price from `at` the tenant's live rentals in (model, region) placed before `at` that its contracts
    open at `at` have room to cover (the earliest placed first; spot never); the ids re-priced."""
    room = _contracted_milli(uow, tenant_id, model, region, at)
    pool = _in_pool(uow, tenant_id, model, region)
    room -= sum(_covered_milli(rental) for rental in pool)
    changed: list[str] = []
    for rental in sorted(pool, key=lambda r: (_placed_at(r), r.id)):  # the earliest placed gains it first
        if room <= 0:
            break
        if Tier.parse(rental.spec.tier) is Tier.SPOT or _placed_at(rental) >= at:
            continue
        milli = sum(s.milli for a in uow.rentals.allocation(rental.id) for s in a.slices)
        covered = _covered_milli(rental)
        added = min(room, milli - covered)
        if added <= 0:
            continue
        room -= added
        _cover(uow, rental, milli, covered + added, at)
        changed.append(rental.id)
    return changed


def pass_on_coverage(uow: UnitOfWork, rental: Rental, at: datetime) -> list[str]:
    """`rental` ended (or went back to the queue) at `at`: the contracted GPUs it was covered for cover its
    tenant's other live rentals in its pool from then, the earliest placed first, as at a window's start (a
    holder's second rental kept paying on-demand for GPUs its contract holds once the first ended); the ids
    re-priced. Call it once `rental` is no longer live."""
    quote = rental.quote or {}
    if _covered_milli(rental) <= 0 or not quote.get("model") or not quote.get("region"):
        return []
    return extend_coverage(uow, rental.tenant_id, str(quote["model"]), str(quote["region"]), at)


def _cover(uow: UnitOfWork, rental: Rental, milli: int, covered_milli: int, at: datetime) -> None:
    """From `at` `covered_milli` of the `milli` GPU milli `rental` holds are covered: its discounted rate
    (what it pays plus what coverage takes off now) less that share, rounded once as a quote rounds it."""
    rate = rental.price_micros_per_hour or 0
    discounted = rate + int((rental.quote or {}).get("contract_coverage_micros_per_hour") or 0)
    quote = with_coverage(rental.quote or {}, discounted, covered_milli, milli)
    quote["contract_covered_gpu_milli"] = covered_milli
    since = _placed_at(rental)
    uow.rentals.change_rate(
        rental.id, max(at, since), quote["final_micros_per_hour"], since=since, previous=rate, quote=quote
    )


def with_coverage(quote: dict, discounted: int, covered_milli: int, milli: int) -> dict:
    """`quote` with `covered_milli` of the `milli` GPU milli its rental holds covered by a contract, at the
    `discounted` rate (list less plan discounts): the coverage rounded once, as a quote rounds it, and
    `final_micros_per_hour` what is left to pay."""
    coverage = round_half_up(discounted * covered_milli, milli) if milli else 0
    return {
        **quote,
        "contract_coverage_micros_per_hour": coverage,
        "final_micros_per_hour": discounted - coverage,
    }


def _contracted_milli(uow: UnitOfWork, tenant_id: str, model: str, region: str, at: datetime) -> int:
    """GPU milli the tenant's contracts for (model, region) open at `at` cover."""
    return 1000 * sum(
        c.count
        for c in uow.contracts.list(tenant_id)
        if _same_pool(c, model, region) and c.starts_at <= at < c.ends_at
    )


def _in_pool(uow: UnitOfWork, tenant_id: str, model: str, region: str) -> list[Rental]:
    """The tenant's live rentals whose placement quote is for (model, region) alone."""
    return [
        rental
        for rental in uow.rentals.by_ids(uow.rentals.live_by_tenant(tenant_id).get(tenant_id, []))
        if rental.state in LIVE_STATES
        and str((rental.quote or {}).get("model", "")).casefold() == model.casefold()
        and (rental.quote or {}).get("region") == region
    ]


def _covered_milli(rental: Rental) -> int:
    return int((rental.quote or {}).get("contract_covered_gpu_milli") or 0)


def _placed_at(rental: Rental) -> datetime:
    return rental.placed_at or rental.created_at


def _uncover(uow: UnitOfWork, rental: Rental, milli: int, left_milli: int, at: datetime) -> None:
    """From `at` (its placement at the earliest) `rental` is covered for `left_milli` of its `milli`."""
    quote = dict(rental.quote or {})
    coverage = int(quote.get("contract_coverage_micros_per_hour") or 0)
    left = round_half_up(coverage * left_milli, milli)
    rate = rental.price_micros_per_hour or 0
    new_rate = rate + coverage - left
    quote.update(
        contract_covered_gpu_milli=left_milli,
        contract_coverage_micros_per_hour=left,
        final_micros_per_hour=new_rate,
    )
    since = rental.placed_at or rental.created_at
    uow.rentals.change_rate(rental.id, max(at, since), new_rate, since=since, previous=rate, quote=quote)


def _same_pool(contract: ContractRecord, model: str, region: str) -> bool:
    return contract.gpu_model.casefold() == model.casefold() and contract.region == region


def _placed(item: tuple[Rental, int]) -> tuple[datetime, str]:
    rental = item[0]
    return rental.placed_at or rental.created_at, rental.id
