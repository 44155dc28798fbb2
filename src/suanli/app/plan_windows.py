"""A plan takes effect at its start: a membership's fee is posted then (key `membership:{plan}`), and a
running rental's rate follows its tenant's plan: from a plan's start the tenant's live rentals get its
discount, from its end (or a renewal's start) they get the discount of the plan in force then, or none.

A rental is priced with the plan in force when it is placed (`app/pricing.py`). `PlanWindows.follow` (a
meter-loop job, run before the pass, like contract coverage in `app/coverage.py`) follows each plan's
start and end: a rate change from that instant (a `rental_rates` row: the meter charges the rest at the
new rate, and the rental's quote names the plan in force). It reads only plans whose start or end is still
to follow (`window_stage`) and marks each in the transaction that re-prices, so a pass killed midway leaves
the rest to the next one and nothing is done twice; a plan made already started is followed when it is
made, from then (`start_plan_now`). Spot is never discounted by a plan.
"""

from __future__ import annotations

from datetime import UTC, datetime

from suanli.app.coverage import with_coverage
from suanli.app.ports import Clock, UnitOfWork, UnitOfWorkFactory
from suanli.app.postings import post_once
from suanli.app.records import LIVE_STATES, Rental
from suanli.domain.billing.ledger import TxKind
from suanli.domain.billing.money import bp_of, to_epoch_s
from suanli.domain.billing.plans import Plan, fee_postings, plan_discounts, plan_in_force
from suanli.domain.request import Tier

START, END = 1, 2


class PlanWindows:
    """The meter-loop job that follows plans' starts and ends with their tenants' running rentals."""

    def __init__(self, uow: UnitOfWorkFactory, clock: Clock) -> None:
        self.uow, self.clock = uow, clock

    def follow(self, now: datetime | None = None) -> int:
        """Follow every plan start and end due by `now`, in time order; how many rentals were re-priced."""
        now = now or self.clock.now()
        with self.uow() as uow:
            due = uow.terms.plan_windows_due(now)
        steps = sorted(
            (instant, stage, plan.id, plan)
            for plan, reached in due
            for stage, instant in ((START, plan.starts_s), (END, plan.ends_s))
            if stage > reached and instant <= to_epoch_s(now)
        )
        changed: set[str] = set()
        for instant, stage, _, plan in steps:
            changed.update(self._follow(plan, stage, datetime.fromtimestamp(instant, UTC)))
        return len(changed)

    def _follow(self, plan: Plan, stage: int, at: datetime) -> list[str]:
        """Post the plan's fee at its start and re-price its tenant's rentals at its start or end, once."""
        with self.uow() as uow:
            if not uow.terms.mark_plan_window(plan.id, stage):
                return []  # another pass followed it first
            if stage == START:
                post_fee(uow, plan, at)
            changed = follow_plan(uow, plan.tenant, at)
            uow.commit()
        return changed


def start_plan_now(uow: UnitOfWork, plan: Plan, now: datetime) -> list[str]:
    """A plan made when its start has passed is followed from `now` (never re-pricing the past)."""
    uow.terms.mark_plan_window(plan.id, START)
    post_fee(uow, plan, now)
    return follow_plan(uow, plan.tenant, now)


def post_fee(uow: UnitOfWork, plan: Plan, at: datetime) -> None:
    """A membership's fee, tenant cash -> platform revenue, posted at `at` (its start), once by its key."""
    if not plan.fee_micros:
        return
    start, end = (datetime.fromtimestamp(s, UTC) for s in (plan.starts_s, plan.ends_s))
    post_once(
        uow,
        at,
        key=f"membership:{plan.id}",
        kind=TxKind.MEMBERSHIP,
        postings=fee_postings(plan.tenant, plan.fee_micros),
        ref=plan.id,
        memo=f"membership fee, {start:%Y-%m-%d} to {end:%Y-%m-%d}",
    )


def follow_plan(uow: UnitOfWork, tenant_id: str, at: datetime) -> list[str]:
    """Re-price from `at` the tenant's live rentals placed before it whose plan discount is not that of the
    plan in force at `at`; the ids re-priced."""
    plan = plan_in_force(uow.terms.plans(tenant_id), to_epoch_s(at))
    changed: list[str] = []
    live = uow.rentals.by_ids(uow.rentals.live_by_tenant(tenant_id).get(tenant_id, []))
    for rental in sorted(live, key=lambda r: r.id):
        if rental.state in LIVE_STATES and _placed_at(rental) < at and _reprice(uow, rental, plan, at):
            changed.append(rental.id)
    return changed


def _reprice(uow: UnitOfWork, rental: Rental, plan: Plan | None, at: datetime) -> bool:
    """From `at` `rental` pays its base less `plan`'s discount, less what its contract coverage takes off
    that (rounded once, as a quote rounds it); False when its quote already has that discount."""
    quote = dict(rental.quote or {})
    tier = Tier.parse(rental.spec.tier)
    if tier is Tier.SPOT or "base_micros_per_hour" not in quote:
        return False
    base = int(quote["base_micros_per_hour"])
    discounts = [{"label": d.label, "micros_per_hour": bp_of(base, d.bp)} for d in plan_discounts(plan, tier)]
    if discounts == list(quote.get("discounts") or []):
        return False
    discounted = max(0, base - sum(d["micros_per_hour"] for d in discounts))
    milli = sum(s.milli for a in uow.rentals.allocation(rental.id) for s in a.slices)
    covered = min(int(quote.get("contract_covered_gpu_milli") or 0), milli)
    quote = with_coverage({**quote, "discounts": discounts}, discounted, covered, milli)
    uow.rentals.change_rate(
        rental.id,
        at,
        quote["final_micros_per_hour"],
        since=_placed_at(rental),
        previous=rental.price_micros_per_hour or 0,
        quote=quote,
    )
    return True


def _placed_at(rental: Rental) -> datetime:
    return rental.placed_at or rental.created_at
