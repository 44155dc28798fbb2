"""Tenant quotas and spend caps, checked at admission: a held-back request gets a reason naming the limit.

Pure: `now` and the price function are arguments. Two kinds of limit, per tenant:
- GPU quota: the most GPUs of a model group held at once (running rentals plus those admitted this cycle).
  A rental counts against the groups of the model it runs on, `groups_of` of the request pinned to that
  model (`pinned`; `quota_groups`: the model and its family, from the built-in catalogue unless the caller
  passes its own), and against `*`, which counts every GPU of the tenant. A request that may land on
  several models (it names none, or a family) is kept off those whose quota it would exceed
  (`full_models`), so naming no model never gets past a model's quota.
- Spend caps per UTC day and per calendar month, in micros: what the tenant already spent in the period
  (from billing) plus what its rentals will burn until the period ends (price x time left, from what is
  spent already to their billing's end or declared end; a rental without either burns to the period's end)
  must stay within the cap.
`Ledger` is the working state of one cycle: `check` says why a request must wait (or None), `take` books it.
"""

from __future__ import annotations

import calendar
import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from types import MappingProxyType

from suanli.domain.billing.money import money_text
from suanli.domain.catalog import Catalog
from suanli.domain.catalog_data import CATALOG
from suanli.domain.errors import CatalogError
from suanli.domain.plan import Pending, Reason
from suanli.domain.request import Request

DAY_S = 86_400.0
HOUR_S = 3_600.0
ALL_GROUPS = "*"
PriceFn = Callable[[Request], int]  # price_micros_per_hour(request) for the whole rental
GroupsFn = Callable[[Request], tuple[str, ...]]
RateAfterFn = Callable[[Request], tuple[float, int] | None]  # (instant, micros per hour) or None


@dataclass(frozen=True, slots=True)
class TenantLimits:
    """One tenant's limits; `gpu_quota` maps a model group (or `*`) to the most GPUs held at once."""

    gpu_quota: Mapping[str, int] = field(default_factory=lambda: MappingProxyType({}))
    daily_cap_micros: int | None = None
    monthly_cap_micros: int | None = None
    # the tenant's own budget, which it sets itself (the caps above are the operator's): held the same way
    budget_daily_micros: int | None = None
    budget_monthly_micros: int | None = None
    budget_stops_running: bool = False  # its running rentals stop once its own budget is spent


@dataclass(frozen=True, slots=True)
class Spent:
    """What a tenant has already been charged in the current UTC day and calendar month (micros)."""

    day_micros: int = 0
    month_micros: int = 0


@dataclass(frozen=True, slots=True)
class BillingWindow:
    """How far a running rental is charged already (what is spent: its last heartbeat, or its minimum's end)
    and when its billing ends at the latest, if known (a notice deadline, a stop, its time limit): what it
    still commits is its rate over the time between, not from now to its declared end."""

    charged_through_s: float
    ends_s: float | None = None


@dataclass(frozen=True, slots=True)
class Limits:
    """Every tenant's limits and spend so far, with the price and group functions admission uses."""

    tenants: Mapping[str, TenantLimits] = field(default_factory=lambda: MappingProxyType({}))
    spent: Mapping[str, Spent] = field(default_factory=lambda: MappingProxyType({}))
    price_micros_per_hour: PriceFn = field(default=lambda request: 0)  # until billing supplies a price
    groups_of: GroupsFn = field(default=lambda request: quota_groups(CATALOG, request))
    # running rentals by request id: how far each is charged and when its billing ends (none: from now on)
    billing: Mapping[str, BillingWindow] = field(default_factory=lambda: MappingProxyType({}))
    # (instant, micros per hour): from then on a request pays that rate (its contract's coverage ends then)
    rate_after: RateAfterFn = field(default=lambda request: None)

    def ledger(self, held: Iterable[tuple[Request, float]], now: float) -> Ledger:
        """A cycle's ledger from the rentals held now: (request, started_at_s) pairs."""
        ledger = Ledger(self, now)
        for request, started_at_s in held:
            ledger.take(request, started_at_s)
        return ledger


def pinned(request: Request, model: str) -> Request:
    """`request` as it counts once placed on `model`: its selector names that model alone."""
    if request.selector.models == {model}:
        return request
    return replace(request, selector=replace(request.selector, models=frozenset({model})))


def quota_groups(catalog: Catalog, request: Request) -> tuple[str, ...]:
    """The quota keys besides `*` a request counts against: the model its selector names and that model's
    family (when the family has other models), the family alone when it names a family of several; none
    when it names none or several (a placed rental is `pinned` to the model it runs on first)."""
    models = request.selector.models
    if len(models) != 1:
        return ()
    return name_groups(catalog, next(iter(models)))


def name_groups(catalog: Catalog, name: str) -> tuple[str, ...]:
    """(model, family) for a model name; (family,) for a family of several models; () when unknown."""
    try:
        model = catalog.get(name)  # a model's name, or a family of one model
    except CatalogError:  # unknown, or a family of several models
        wanted = name.casefold()
        family = next((m.family for m in catalog.models if m.family.casefold() == wanted), None)
        return () if family is None else (family,)
    family_size = sum(m.family == model.family for m in catalog.models)
    return (model.name, model.family) if family_size > 1 else (model.name,)


def request_gpus(request: Request) -> float:
    return request.gpus_per_node * request.node_count


def over_quota(limits: TenantLimits, request: Request, groups: tuple[str, ...]) -> str | None:
    """Why `request` alone exceeds one of its tenant's GPU quotas (it could never start while they stand),
    or None; `groups`: the quota keys besides `*` it counts against."""
    gpus = request_gpus(request)
    for key in (*groups, ALL_GROUPS):
        quota = limits.gpu_quota.get(key)
        if quota is not None and gpus > quota + 1e-9:
            label = "GPU quota" if key == ALL_GROUPS else f"{key} quota"
            return f"asks {gpus:g} GPUs, more than the tenant's {label} of {quota} GPUs at once"
    return None


def spend_limits(limits: TenantLimits) -> list[tuple[str, int, bool]]:
    """The tenant's spend limits that are set: (name, cap in micros, whether it is per month, not per day)."""
    every = (
        ("daily spend cap", limits.daily_cap_micros, False),
        ("monthly spend cap", limits.monthly_cap_micros, True),
        ("own daily budget", limits.budget_daily_micros, False),
        ("own monthly budget", limits.budget_monthly_micros, True),
    )
    return [(name, cap, monthly) for name, cap, monthly in every if cap is not None]


def over_spend_limit(limits: TenantLimits, spent: Spent, amount_micros: int) -> str | None:
    """Why paying `amount_micros` at once (a compute future's prepaid price) would take the tenant past a
    spend cap or its own budget in the current day or month, or None."""
    for name, cap, monthly in spend_limits(limits):
        already = spent.month_micros if monthly else spent.day_micros
        if already + amount_micros > cap:
            return (
                f"it would take the spend to {money_text(already + amount_micros)}, past the {name} of "
                f"{money_text(cap)} ({money_text(already)} spent)"
            )
    return None


def period_ends(now: float) -> tuple[float, float]:
    """(end of the UTC day, end of the calendar month) containing `now`, in epoch seconds."""
    day_end = (now // DAY_S + 1) * DAY_S
    moment = datetime.fromtimestamp(now, tz=UTC)
    days = calendar.monthrange(moment.year, moment.month)[1]
    month_start = datetime(moment.year, moment.month, 1, tzinfo=UTC).timestamp()
    return day_end, month_start + days * DAY_S


class Ledger:
    """GPUs in use per (tenant, group) and committed spend per tenant, as a cycle admits requests."""

    def __init__(self, limits: Limits, now: float) -> None:
        self.limits, self.now = limits, now
        self.day_end_s, self.month_end_s = period_ends(now)
        self.in_use: dict[tuple[str, str], float] = {}
        self.burn_day: dict[str, float] = {}
        self.burn_month: dict[str, float] = {}

    def check(self, request: Request) -> Pending | None:
        """Why `request` must wait for its tenant's limits, or None when they allow it."""
        limits = self.limits.tenants.get(request.tenant)
        if limits is None:
            return None
        tenant = request.tenant
        held = self._over_quota(limits, request, self.limits.groups_of(request))
        if held is not None:
            return held
        spent = self.limits.spent.get(tenant, Spent())
        day_add, month_add = self._burn(request, self.now)
        day = (spent.day_micros, self.burn_day, day_add)
        month = (spent.month_micros, self.burn_month, month_add)
        for name, cap, monthly in spend_limits(limits):
            already, burning, adds = month if monthly else day
            committed = already + burning.get(tenant, 0.0)
            if adds > 0 and committed + adds > cap:  # one that adds nothing (a contract covers it) goes
                return Pending(
                    request.id,
                    Reason.SPEND_CAP,
                    f"tenant {tenant}: {name} {money_text(cap)}, {money_text(committed)} spent or "
                    f"committed, this rental adds {money_text(adds)}",
                )
        return None

    def full_models(self, request: Request, models: Iterable[str]) -> tuple[frozenset[str], Pending | None]:
        """Of the models `request` may land on, those where its tenant's GPU quota has no room for it, and
        the reason one of them gives (to say why it waits when they are all full)."""
        limits = self.limits.tenants.get(request.tenant)
        if limits is None or not self.has_model_quotas(request.tenant):
            return frozenset(), None
        full, reason = set(), None
        for model in models:
            held = self._over_quota(limits, request, self.limits.groups_of(pinned(request, model)))
            if held is not None:
                full.add(model)
                reason = reason or held
        return frozenset(full), reason

    def has_model_quotas(self, tenant: str) -> bool:
        """Whether `tenant` has a GPU quota on a model or family (not only `*`): where it lands counts."""
        limits = self.limits.tenants.get(tenant)
        return limits is not None and any(key != ALL_GROUPS for key in limits.gpu_quota)

    def _over_quota(self, limits: TenantLimits, request: Request, groups: tuple[str, ...]) -> Pending | None:
        tenant, gpus = request.tenant, request_gpus(request)
        for key in (*groups, ALL_GROUPS):
            quota = limits.gpu_quota.get(key)
            if quota is None:
                continue
            used = self.in_use.get((tenant, key), 0.0)
            if used + gpus > quota + 1e-9:
                label = "GPU" if key == ALL_GROUPS else f"{key}"
                return Pending(
                    request.id,
                    Reason.QUOTA,
                    f"tenant {tenant}: {label} quota {quota} GPUs, {used:g} in use, asks {gpus:g}",
                )
        return None

    def take(self, request: Request, started_at_s: float | None = None) -> None:
        """Book `request` (running since `started_at_s`, or starting now) against its tenant's limits."""
        tenant, gpus = request.tenant, request_gpus(request)
        for key in {*self.limits.groups_of(request), ALL_GROUPS}:
            self.in_use[(tenant, key)] = self.in_use.get((tenant, key), 0.0) + gpus
        day_add, month_add = self._burn(request, self.now if started_at_s is None else started_at_s)
        self.burn_day[tenant] = self.burn_day.get(tenant, 0.0) + day_add
        self.burn_month[tenant] = self.burn_month.get(tenant, 0.0) + month_add

    def _burn(self, request: Request, started_at_s: float) -> tuple[float, float]:
        """Micros the rental will still be charged until the end of the day and of the month: from what is
        spent already (`Limits.billing`, else now) to its billing's end (else its declared end), at its rate
        and, from where its coverage ends (`Limits.rate_after`), at the rate after."""
        if request.tenant not in self.limits.tenants:
            return 0.0, 0.0
        rate = self.limits.price_micros_per_hour(request)
        end = math.inf if request.max_duration_s is None else started_at_s + request.max_duration_s
        begin = self.now
        window = self.limits.billing.get(request.id)
        if window is not None:
            begin = window.charged_through_s
            end = end if window.ends_s is None else min(end, window.ends_s)
        change = self.limits.rate_after(request)

        def cost(period_end_s: float) -> float:
            until = min(end, period_end_s)
            if change is None or change[0] >= until:
                return rate * max(0.0, until - begin) / HOUR_S
            switch = max(begin, change[0])
            return (rate * max(0.0, switch - begin) + change[1] * max(0.0, until - switch)) / HOUR_S

        return cost(self.day_end_s), cost(self.month_end_s)
