"""Tenant quotas and spend caps, checked at admission: a held-back request gets a reason naming the limit.

Pure: `now` and the price function are arguments. Two kinds of limit, per tenant:
- GPU quota: the most GPUs of a model group held at once (running rentals plus those admitted this cycle).
  A request counts against each of its groups, `groups_of(request)` (default: the GPU model or family its
  selector names; none when it names none or several; the platform passes the model and its family), and
  against `*`, which counts every GPU of the tenant.
- Spend caps per UTC day and per calendar month, in micros: what the tenant already spent in the period
  (from billing) plus what its rentals will burn until the period ends (price x time left, at most to their
  declared end; a rental without a declared duration burns to the period's end) must stay within the cap.
`Ledger` is the working state of one cycle: `check` says why a request must wait (or None), `take` books it.
"""

from __future__ import annotations

import calendar
import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from types import MappingProxyType

from suanli.domain.billing.money import money_text
from suanli.domain.plan import Pending, Reason
from suanli.domain.request import Request

DAY_S = 86_400.0
HOUR_S = 3_600.0
ALL_GROUPS = "*"
PriceFn = Callable[[Request], int]  # price_micros_per_hour(request) for the whole rental
GroupsFn = Callable[[Request], tuple[str, ...]]


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
class Limits:
    """Every tenant's limits and spend so far, with the price and group functions admission uses."""

    tenants: Mapping[str, TenantLimits] = field(default_factory=lambda: MappingProxyType({}))
    spent: Mapping[str, Spent] = field(default_factory=lambda: MappingProxyType({}))
    price_micros_per_hour: PriceFn = field(default=lambda request: 0)  # until billing supplies a price
    groups_of: GroupsFn = field(default=lambda request: model_groups(request))

    def ledger(self, held: Iterable[tuple[Request, float]], now: float) -> Ledger:
        """A cycle's ledger from the rentals held now: (request, started_at_s) pairs."""
        ledger = Ledger(self, now)
        for request, started_at_s in held:
            ledger.take(request, started_at_s)
        return ledger


def model_groups(request: Request) -> tuple[str, ...]:
    """The model or family the selector names; none when it names none or several (then only `*` counts)."""
    models = request.selector.models
    return (next(iter(models)),) if len(models) == 1 else ()


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
        tenant, gpus = request.tenant, request_gpus(request)
        for key in (*self.limits.groups_of(request), ALL_GROUPS):
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
        spent = self.limits.spent.get(tenant, Spent())
        day_add, month_add = self._burn(request, self.now)
        day = (spent.day_micros, self.burn_day, day_add)
        month = (spent.month_micros, self.burn_month, month_add)
        for name, cap, monthly in spend_limits(limits):
            already, burning, adds = month if monthly else day
            committed = already + burning.get(tenant, 0.0)
            if committed + adds > cap:
                return Pending(
                    request.id,
                    Reason.SPEND_CAP,
                    f"tenant {tenant}: {name} {money_text(cap)}, {money_text(committed)} spent or "
                    f"committed, this rental adds {money_text(adds)}",
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
        """Micros the rental will still be charged until the end of the day and of the month."""
        if request.tenant not in self.limits.tenants:
            return 0.0, 0.0
        rate = self.limits.price_micros_per_hour(request)
        end = math.inf if request.max_duration_s is None else started_at_s + request.max_duration_s
        day = max(0.0, min(end, self.day_end_s) - self.now)
        month = max(0.0, min(end, self.month_end_s) - self.now)
        return rate * day / HOUR_S, rate * month / HOUR_S
