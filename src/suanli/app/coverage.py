"""Contract coverage ends with the contract: a rental priced at 0 marginal price under a tenant's contract
pays what the coverage took off its rate once the tenant no longer holds that contract.

A rental's coverage is fixed at placement (`contract_covered_gpu_milli` and
`contract_coverage_micros_per_hour` in its quote, `app/pricing.py`). When a contract's window ends, or the
contract is transferred, the tenant's live rentals in that model and region may be covered beyond what its
contracts still open then allow; `settle_coverage` takes the excess back, from the latest placed rental on,
as a rate change from that instant (a `rental_rates` row: the meter charges the rest at the new rate).
"""

from __future__ import annotations

from datetime import datetime

from suanli.app.ports import UnitOfWork
from suanli.app.records import LIVE_STATES, ContractRecord, Rental
from suanli.domain.billing.money import round_half_up


def settle_coverage(uow: UnitOfWork, tenant_id: str, model: str, region: str, at: datetime) -> list[str]:
    """Re-price from `at` the tenant's live rentals in (model, region) whose coverage its contracts open at
    `at` no longer back; the ids re-priced."""
    contracted = 1000 * sum(
        c.count
        for c in uow.contracts.list(tenant_id)
        if _same_pool(c, model, region) and c.starts_at <= at < c.ends_at
    )
    covered: list[tuple[Rental, int]] = []
    for rental in uow.rentals.by_ids(uow.rentals.live_by_tenant(tenant_id).get(tenant_id, [])):
        quote = rental.quote or {}
        milli = int(quote.get("contract_covered_gpu_milli") or 0)
        if (
            rental.state in LIVE_STATES
            and milli > 0
            and str(quote.get("model", "")).casefold() == model.casefold()
            and quote.get("region") == region
        ):
            covered.append((rental, milli))
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
