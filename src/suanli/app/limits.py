"""Tenant limits: GPU quotas per model or family and daily / monthly spend caps, set by admins, and a daily /
monthly budget each tenant sets itself; read by the scheduler.

A quota key is `*` (every GPU of the tenant), a catalogue model name (`H100-SXM-80GB`) or a family name
(`H100`: every H100 model together; a family of one model is that model). A rental counts against `*`, against
the family its `gpu_model` lies in, and against the model when it names one (`gpu_model=H100` counts against
the family and `*`; `H100-PCIe` against the model, the family and `*`). The scheduler (either queue) holds
a rental back with reason `quota` or `spend_cap`; the spend so far is the ledger's charges in the UTC day and
calendar month plus what rentals ran up that the meter has not posted yet (`spent_now`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from types import MappingProxyType

from suanli.app.errors import Invalid, NotFound
from suanli.app.ports import Clock, UnitOfWork, UnitOfWorkFactory
from suanli.app.records import Caller, ContractRecord, Rental
from suanli.app.tenants import require_admin, target_tenant
from suanli.app.usage import open_spend
from suanli.domain.billing.money import round_half_up
from suanli.domain.catalog import Catalog
from suanli.domain.quotas import (
    ALL_GROUPS,
    BillingWindow,
    Limits,
    Spent,
    TenantLimits,
    name_groups,
    quota_groups,
    spend_limits,
)
from suanli.domain.request import Request, Tier, WholeGpus
from suanli.domain.running import Running

MAX_QUOTA_GPUS = 1_000_000


@dataclass(frozen=True, slots=True)
class LimitsView:
    tenant_id: str
    limits: TenantLimits
    fair_share_weight: float = 1.0
    usage_gpu_s: float = 0.0  # decayed fair-share usage as the backfill queue's leader last saved it
    usage_as_of: datetime | None = None
    spent: Spent = field(default_factory=Spent)  # this UTC day and month, posted or not (caps and budget)


@dataclass(frozen=True, slots=True)
class LimitsChange:
    """What an admin changes of a tenant's limits; what it does not name stays as it is."""

    gpu_quota: Mapping[str, int | None] = field(default_factory=dict)  # group -> GPUs, None: no quota
    caps_micros: Mapping[str, int | None] = field(
        default_factory=dict
    )  # "daily"/"monthly" -> cap, None: none
    fair_share_weight: float | None = None  # None: unchanged


class LimitsService:
    def __init__(self, uow: UnitOfWorkFactory, clock: Clock, catalog: Catalog) -> None:
        self.uow, self.clock, self.catalog = uow, clock, catalog

    def set(
        self,
        caller: Caller,
        tenant_id: str,
        gpu_quota: Mapping[str, int],
        daily_cap_micros: int | None,
        monthly_cap_micros: int | None,
        fair_share_weight: float = 1.0,
    ) -> LimitsView:
        """Admin: replace a tenant's limits (an empty quota map and no caps lift them all) and its fair-share
        weight (the backfill queue merges tenants by decayed GPU usage divided by it)."""
        require_admin(caller)
        quota: dict[str, int] = {}
        for group, gpus in gpu_quota.items():
            if not 0 <= gpus <= MAX_QUOTA_GPUS:
                raise Invalid(f"{group}: 0 to {MAX_QUOTA_GPUS} GPUs", field="gpu_quota")
            quota[self._group(group)] = gpus
        limits = TenantLimits(quota, daily_cap_micros, monthly_cap_micros)
        with self.uow() as uow:
            if uow.tenants.get(tenant_id) is None:
                raise NotFound(f"no tenant {tenant_id}", field="tenant_id")
            uow.terms.set_limits(tenant_id, limits, self.clock.now(), fair_share_weight)
            uow.commit()
        return self.get(caller, tenant_id)

    def update(self, caller: Caller, tenant_id: str, change: LimitsChange) -> LimitsView:
        """Admin: change only what `change` names of a tenant's quotas, caps and fair-share weight; the rest,
        and the tenant's own budget, stay."""
        require_admin(caller)
        quota_changes = {self._group(group): gpus for group, gpus in change.gpu_quota.items()}
        for group, gpus in quota_changes.items():
            if gpus is not None and not 0 <= gpus <= MAX_QUOTA_GPUS:
                raise Invalid(f"{group}: 0 to {MAX_QUOTA_GPUS} GPUs", field="gpu_quota")
        with self.uow() as uow:
            if uow.tenants.get(tenant_id) is None:
                raise NotFound(f"no tenant {tenant_id}", field="tenant_id")
            current, weight = uow.terms.limits_for_update(tenant_id)
            quota = dict(current.gpu_quota)
            for group, gpus in quota_changes.items():
                if gpus is None:
                    quota.pop(group, None)
                else:
                    quota[group] = gpus
            caps = {"daily": current.daily_cap_micros, "monthly": current.monthly_cap_micros}
            caps.update(change.caps_micros)
            limits = replace(
                current, gpu_quota=quota, daily_cap_micros=caps["daily"], monthly_cap_micros=caps["monthly"]
            )
            new_weight = weight if change.fair_share_weight is None else change.fair_share_weight
            uow.terms.set_limits(tenant_id, limits, self.clock.now(), new_weight)
            uow.commit()
        return self.get(caller, tenant_id)

    def set_budget(
        self,
        caller: Caller,
        daily_micros: int | None,
        monthly_micros: int | None,
        tenant_id: str | None = None,
        stops_running: bool = False,
    ) -> LimitsView:
        """The caller's own spend budget per UTC day and calendar month (None: none), beside the operator's
        caps: a rental that would take its spend past either waits with reason `spend_cap`, and with
        `stops_running` its running rentals stop once either is spent (an admin may set a tenant's,
        `tenant_id`)."""
        target = target_tenant(caller, tenant_id)
        if stops_running and daily_micros is None and monthly_micros is None:
            raise Invalid(
                "stops running rentals once a budget is spent: give a daily or monthly budget",
                field="stop_running",
            )
        with self.uow() as uow:
            if uow.tenants.get(target) is None:
                raise NotFound(f"no tenant {target}")
            uow.terms.set_budget(target, daily_micros, monthly_micros, self.clock.now(), stops_running)
            uow.commit()
        return self.get(caller, target)

    def change_budget(
        self,
        caller: Caller,
        amounts_micros: Mapping[str, int | None],
        stops_running: bool | None = None,
        tenant_id: str | None = None,
    ) -> LimitsView:
        """Change only what is given of the caller's own budget: `amounts_micros` "daily" / "monthly" (None
        removes it), `stops_running` (None: unchanged); the rest stays."""
        target = target_tenant(caller, tenant_id)
        with self.uow() as uow:
            if uow.tenants.get(target) is None:
                raise NotFound(f"no tenant {target}")
            current, _ = uow.terms.limits_for_update(target)
            budget = {"daily": current.budget_daily_micros, "monthly": current.budget_monthly_micros}
            budget.update(amounts_micros)
            stops = current.budget_stops_running if stops_running is None else stops_running
            if stops and budget["daily"] is None and budget["monthly"] is None:
                raise Invalid(
                    "stops running rentals once a budget is spent: give a daily or monthly budget",
                    field="stop_running",
                )
            uow.terms.set_budget(target, budget["daily"], budget["monthly"], self.clock.now(), stops)
            uow.commit()
        return self.get(caller, target)

    def get(self, caller: Caller, tenant_id: str | None = None) -> LimitsView:
        """The caller's limits (an admin: any tenant's; none set reads as no limits) and fair-share usage."""
        target = target_tenant(caller, tenant_id)
        with self.uow() as uow:
            if uow.tenants.get(target) is None:
                raise NotFound(f"no tenant {target}")
            found = uow.terms.limits().get(target)
            weight = uow.terms.fair_share_weights().get(target, 1.0)
            usage, as_of = _usage(uow, target)
            spent = spent_now(uow, [target], self.clock.now().timestamp())[target]
        return LimitsView(target, found or TenantLimits(), weight, usage, as_of, spent)

    def _group(self, name: str) -> str:
        """The canonical quota key: `*`, a model's name, or a family's (a family of one model: the model)."""
        if name == ALL_GROUPS:
            return name
        groups = name_groups(self.catalog, name)
        if not groups:
            models = self.catalog.models
            known = ", ".join(sorted({m.name for m in models} | {m.family for m in models}))
            raise Invalid(f"unknown GPU model or family {name!r}; known: {known}", field="gpu_quota")
        return groups[0]


def _usage(uow: UnitOfWork, tenant_id: str) -> tuple[float, datetime | None]:
    """The tenant's saved fair-share GPU-seconds and when the leader saved them."""
    return uow.terms.fair_share(tenant_id).get(tenant_id, 0.0), uow.terms.fair_share_saved_at()


def cycle_limits(
    uow: UnitOfWork,
    catalog: Catalog,
    tenants: Mapping[str, TenantLimits],
    pending: Sequence[Rental],
    live: Mapping[str, tuple[Running, int]],
    now_s: float,
    covered: Mapping[str, int] = MappingProxyType({}),
    contracts: Sequence[ContractRecord] = (),
) -> Limits:
    """One scheduling cycle's limits: `tenants`' quotas and caps with what they spent this UTC day and month.

    A rental's price is its rate when placed (`live`: rental id -> (running, micros per hour)); while pending,
    its quote's rate without a contract's coverage (the quote's coverage was the contracts open when it was
    asked for: one that closed since let it pass a cap at 0 and start at the full rate), and 0 when this
    cycle claims a contract for it (its request comes `reserved`, its spec not: covered from its start, as
    pricing covers it when placed). Its quota groups are its model and family (`quota_groups`, once per
    name). A covered one (`covered`: a live rental's coverage in micros per hour, from its quote; a claimed
    pending one) pays its rate without the coverage from the first end of its tenant's open `contracts` on,
    as far as the spend caps count: coverage ends with the window (`app/coverage.settle_coverage`).
    """
    capped = [t for t, lim in tenants.items() if spend_limits(lim)]
    spent, windows = spend_now(uow, capped, now_s)
    rates = {rental_id: rate for rental_id, (_, rate) in live.items()}
    elastic: dict[str, int] = {}  # a pending elastic rental's GPUs in all, whose quote is for all of them
    claimable: set[str] = set()  # pending, not asked for as `reserved`: `reserved` in a cycle is a claim
    for rental in pending:
        rates[rental.id] = quote_micros(rental, "final_micros_per_hour") + coverage_micros(rental)
        if Tier.parse(rental.spec.tier) is not Tier.RESERVED:
            claimable.add(rental.id)
        if rental.spec.min_gpus is not None:
            elastic[rental.id] = rental.spec.gpus * rental.spec.nodes
    groups: dict[frozenset[str], tuple[str, ...]] = {}  # by selector: the ledger asks on every check

    def groups_of(request: Request) -> tuple[str, ...]:
        models = request.selector.models
        if models not in groups:
            groups[models] = quota_groups(catalog, request)
        return groups[models]

    def price(request: Request) -> int:
        """Its rate; an elastic rental starting smaller, in proportion to the GPUs it would start on."""
        if request.tier is Tier.RESERVED and request.id in claimable:
            return 0  # the cycle claimed an open contract for all of it
        rate, full = rates.get(request.id, 0), elastic.get(request.id)
        if full is None or not isinstance(request.shape, WholeGpus):
            return rate
        return round_half_up(rate * request.shape.count * request.node_count, full)

    coverage_ends: dict[str, float] = {}  # per tenant: the first end of its open contracts
    for contract in contracts:
        if contract.starts_at.timestamp() <= now_s < contract.ends_at.timestamp():
            end_s = contract.ends_at.timestamp()
            coverage_ends[contract.tenant_id] = min(coverage_ends.get(contract.tenant_id, end_s), end_s)

    def rate_after(request: Request) -> tuple[float, int] | None:
        """Where its coverage may end, and its rate from then on (None: not covered, or no end known)."""
        end_s = coverage_ends.get(request.tenant)
        if end_s is None:
            return None
        if request.id in covered:
            return end_s, rates.get(request.id, 0) + covered[request.id]
        if request.tier is Tier.RESERVED and request.id in claimable:
            return end_s, rates.get(request.id, 0)
        return None

    return Limits(
        tenants,
        spent,
        price_micros_per_hour=price,
        groups_of=groups_of,
        billing=windows,
        rate_after=rate_after,
    )


def quote_micros(rental: Rental, key: str) -> int:
    """A micros field of the rental's quote as an int (0 when absent or not a number)."""
    value = (rental.quote or {}).get(key)
    return int(value) if isinstance(value, int | float | str) else 0


def coverage_micros(rental: Rental) -> int:
    """What a contract's coverage takes off the rental's rate, per hour, as its quote says (0: none)."""
    return quote_micros(rental, "contract_coverage_micros_per_hour")


def spent_now(uow: UnitOfWork, tenant_ids: Sequence[str], now_s: float) -> dict[str, Spent]:
    """What each tenant has spent (cash and grants) in the UTC day and calendar month of `now_s`: what the
    ledger has charged in them, and what its rentals have run up in them that the meter has not posted yet
    (the meter posts each day's seconds in that day, so what was run up before is no part of this one)."""
    return spend_now(uow, tenant_ids, now_s)[0]


def spend_now(
    uow: UnitOfWork, tenant_ids: Sequence[str], now_s: float
) -> tuple[dict[str, Spent], dict[str, BillingWindow]]:
    """`spent_now`, and how far each of their open rentals is charged by it (`open_spend`). Every read stops
    at one ledger transaction, so a charge the meter posts meanwhile is counted once: unposted, not yet
    charged."""
    day = datetime.fromtimestamp(now_s, UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    through = uow.ledger.head_seq()
    today = uow.ledger.charged_since(tenant_ids, int(day.timestamp()), through_seq=through)
    month_start = int(day.replace(day=1).timestamp())
    this_month = uow.ledger.charged_since(tenant_ids, month_start, through_seq=through)
    day_start = int(day.timestamp())
    found = open_spend(uow, tenant_ids, int(now_s), through, since_s=(day_start, month_start))
    owed_today, owed_month = found.owed_since_micros[day_start], found.owed_since_micros[month_start]
    spent = {
        t: Spent(today.get(t, 0) + owed_today.get(t, 0), this_month.get(t, 0) + owed_month.get(t, 0))
        for t in tenant_ids
    }
    return spent, found.windows
