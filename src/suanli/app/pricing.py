"""What a rental costs: the price book's base, the tenant's plan discount and compute-future coverage.

* The plan in force (`suanli.domain.billing.plans`) gives its discount on the tiers it covers.
* Contract coverage: while a tenant holds open contracts for a (model, region), up to their GPU count of its
  rentals there are drawn from the contract at 0 marginal price; what the tenant's other live rentals already
  draw (`contract_covered_gpu_milli` in their quotes) is taken first. Usage above the count pays on-demand.
* At creation the model and region may not be known yet (a selector): the quote is for the most expensive
  model allowed, in any region. At placement the node's model and region give the rate charged, and for
  spot the utilization of that pool sets the spot price (never above the bid).
* While a spot rental runs, the scheduler re-prices it each cycle at its pools' current utilization
  (`spot_rate`: the same price book path; no plan discount or contract applies to spot).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from suanli.app.ports import UnitOfWork
from suanli.app.records import LIVE_STATES, ContractRecord, Rental
from suanli.domain.billing.errors import BidBelowFloorError
from suanli.domain.billing.meter import DEFAULT_MINIMUM_S
from suanli.domain.billing.money import to_epoch_s
from suanli.domain.billing.plans import Plan, plan_discounts, plan_in_force
from suanli.domain.billing.pricebook import PriceBook, Quote, gpu_milli, quote, running_spot_rate, shape_rate
from suanli.domain.catalog import GpuModel
from suanli.domain.request import Shape, Tier

ANY_REGION = "*"


@dataclass(frozen=True, slots=True)
class Pool:
    """Where a rental's nodes are: a model in a region, with the nodes' count and the pool's utilization."""

    model: GpuModel
    region: str
    nodes: int
    utilization_milli: int = 0


def quote_json(q: Quote, covered_gpu_milli: int = 0, stage: str = "created") -> dict[str, Any]:
    return {
        "stage": stage,
        "model": q.model,
        "region": q.region,
        "tier": q.tier.label,
        "at_s": q.at_s,
        "unit_micros_per_gpu_hour": q.unit_micros_per_gpu_hour,
        "base_micros_per_hour": q.base_micros_per_hour,
        "discounts": [{"label": label, "micros_per_hour": amount} for label, amount in q.discounts],
        "contract_coverage_micros_per_hour": q.contract_coverage_micros_per_hour,
        "contract_covered_gpu_milli": covered_gpu_milli,
        "final_micros_per_hour": q.final_micros_per_hour,
        "minimum_s": DEFAULT_MINIMUM_S,
        "source": q.source,
    }


def contract_room_milli(
    uow: UnitOfWork,
    tenant_id: str,
    model: str,
    region: str | None,
    at: datetime,
    exclude: str = "",
    contracts: Sequence[ContractRecord] | None = None,
) -> int:
    """GPU milli the tenant's open contracts for (model, region) still cover at `at` (region None: any);
    `contracts`: the tenant's contracts when the caller has read them already."""
    open_contracts = [
        c
        for c in (uow.contracts.list(tenant_id) if contracts is None else contracts)
        if c.gpu_model.casefold() == model.casefold()
        and (region is None or c.region == region)
        and c.starts_at <= at < c.ends_at
    ]
    if not open_contracts:
        return 0
    contracted = sum(c.count for c in open_contracts) * 1000
    used = 0
    mine = [i for i in uow.rentals.live_by_tenant(tenant_id).get(tenant_id, []) if i != exclude]
    for rental in uow.rentals.by_ids(mine):
        if rental.state not in LIVE_STATES:
            continue
        q = rental.quote or {}
        if str(q.get("model", "")).casefold() == model.casefold() and (
            region is None or q.get("region") == region
        ):
            used += int(q.get("contract_covered_gpu_milli", 0) or 0)  # type: ignore[call-overload]
    return max(0, contracted - used)


def price(
    uow: UnitOfWork,
    book: PriceBook,
    *,
    tenant_id: str,
    tier: Tier,
    shape: Shape,
    pools: Iterable[Pool],
    at: datetime,
    bid_micros_per_gpu_hour: int | None,
    rental_id: str = "",
    stage: str = "placed",
    plans: Sequence[Plan] | None = None,
    contracts: Sequence[ContractRecord] | None = None,
) -> dict[str, Any]:
    """The quote of a rental on these pools (one per model and region its nodes are in), summed; `plans`
    and `contracts`: the tenant's, when the caller has read them already (quoting several models)."""
    at_s = to_epoch_s(at)
    plan = plan_in_force(uow.terms.plans(tenant_id) if plans is None else plans, at_s)
    discounts = plan_discounts(plan, tier)
    quotes: list[tuple[Quote, int]] = []
    for pool in pools:
        region = None if pool.region == ANY_REGION else pool.region
        wanted = gpu_milli(pool.model, shape) * pool.nodes
        room = (
            contract_room_milli(uow, tenant_id, pool.model.name, region, at, rental_id, contracts)
            if tier is not Tier.SPOT
            else 0
        )
        covered = min(room, wanted)
        for bid in (bid_micros_per_gpu_hour, None):
            try:
                priced = quote(
                    book,
                    model=pool.model,
                    region=pool.region,
                    tier=tier,
                    shape=shape,
                    at_s=at_s,
                    node_count=pool.nodes,
                    utilization_milli=pool.utilization_milli,
                    bid_micros_per_gpu_hour=bid,
                    discounts=discounts,
                    contract_covered_gpu_milli=covered,
                )
                break
            except BidBelowFloorError:  # it waits (`bid_below_floor`) until the floor falls: quote the price
                if bid is None:
                    raise
        quotes.append((priced, covered))
    return combine(quotes, stage)


def combine(quotes: list[tuple[Quote, int]], stage: str) -> dict[str, Any]:
    """One quote for a rental spread over several pools: amounts summed, discounts summed per label."""
    first, covered = quotes[0]
    result = quote_json(first, covered, stage)
    for q, more in quotes[1:]:
        result["base_micros_per_hour"] += q.base_micros_per_hour
        result["contract_coverage_micros_per_hour"] += q.contract_coverage_micros_per_hour
        result["contract_covered_gpu_milli"] += more
        result["final_micros_per_hour"] += q.final_micros_per_hour
        amounts: dict[str, int] = {d["label"]: d["micros_per_hour"] for d in result["discounts"]}
        for label, amount in q.discounts:
            amounts[label] = amounts.get(label, 0) + amount
        result["discounts"] = [{"label": k, "micros_per_hour": v} for k, v in amounts.items()]
        if q.model != result["model"]:
            result["model"] = f"{result['model']}+{q.model}"
    return result


def pools_of(
    placed: Iterable[tuple[GpuModel, str]], utilization: Mapping[tuple[str, str], int]
) -> list[Pool]:
    """Group a placement's nodes (model, region) into pools, with each pool's utilization."""
    counts: dict[tuple[str, str], tuple[GpuModel, int]] = {}
    for model, region in placed:
        _, n = counts.get((model.name, region), (model, 0))
        counts[(model.name, region)] = (model, n + 1)
    return [
        Pool(model, region, n, utilization.get((model.name, region), 0))
        for (_, region), (model, n) in counts.items()
    ]


def rental_bid(rental: Rental) -> int | None:
    return rental.spec.bid_micros_per_gpu_hour


def spot_rate(
    book: PriceBook, shape: Shape, pools: Iterable[Pool], at: datetime, bid_micros_per_gpu_hour: int | None
) -> int:
    """What a running spot rental on these pools pays per hour now: each pool's spot price at its current
    utilization, capped at the bid (a bid below the floor pays the bid), for its shape and node count; the
    placement quote's `final_micros_per_hour` at the same utilization."""
    at_s = to_epoch_s(at)
    total = 0
    for pool in pools:
        unit = running_spot_rate(
            book, pool.model.name, pool.region, pool.utilization_milli, bid_micros_per_gpu_hour, at_s
        )
        total += shape_rate(book, pool.model, pool.region, Tier.SPOT, shape, unit, at_s) * pool.nodes
    return total
