"""Tenant limits: GPU quotas per model and daily / monthly spend caps, set by admins, read by the scheduler.

A quota key is `*` (every GPU of the tenant) or a catalogue model name (canonical: `H100` is ambiguous and
refused). A rental counts against the model its `gpu_model` names when that is one catalogue model, and always
against `*`. The scheduler (either queue) holds a rental back with reason `quota` or `spend_cap`; the spend so
far comes from the ledger's charges in the UTC day and calendar month.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from suanli.app.errors import Invalid, NotFound
from suanli.app.ports import Clock, UnitOfWork, UnitOfWorkFactory
from suanli.app.records import Caller, Rental
from suanli.app.tenants import require_admin, target_tenant
from suanli.domain.catalog import Catalog
from suanli.domain.errors import CatalogError
from suanli.domain.preemption import Running
from suanli.domain.quotas import ALL_GROUPS, Limits, Spent, TenantLimits
from suanli.domain.request import Request

MAX_QUOTA_GPUS = 1_000_000


@dataclass(frozen=True, slots=True)
class LimitsView:
    tenant_id: str
    limits: TenantLimits
    fair_share_weight: float = 1.0


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
        return LimitsView(tenant_id, limits, fair_share_weight)

    def get(self, caller: Caller, tenant_id: str | None = None) -> LimitsView:
        """The caller's limits (an admin: any tenant's); none set reads as no limits."""
        target = target_tenant(caller, tenant_id)
        with self.uow() as uow:
            if uow.tenants.get(target) is None:
                raise NotFound(f"no tenant {target}")
            found = uow.terms.limits().get(target)
            weight = uow.terms.fair_share_weights().get(target, 1.0)
        return LimitsView(target, found or TenantLimits(), weight)

    def _group(self, name: str) -> str:
        if name == ALL_GROUPS:
            return name
        try:
            return self.catalog.get(name).name
        except CatalogError as error:
            raise Invalid(str(error), field="gpu_quota") from None


def cycle_limits(
    uow: UnitOfWork,
    catalog: Catalog,
    tenants: Mapping[str, TenantLimits],
    pending: Sequence[Rental],
    live: Mapping[str, tuple[Running, int]],
    now_s: float,
) -> Limits:
    """One scheduling cycle's limits: `tenants`' quotas and caps with what they spent this UTC day and month.

    A rental's price is its rate when placed (`live`: rental id -> (running, micros per hour)), its quote's
    final rate while pending; its quota group is the one catalogue model its `gpu_model` names.
    """
    moment = datetime.fromtimestamp(now_s, UTC)
    day = int(moment.replace(hour=0, minute=0, second=0, microsecond=0).timestamp())
    month = int(moment.replace(day=1, hour=0, minute=0, second=0, microsecond=0).timestamp())
    today, this_month = uow.ledger.charged_since(tenants, day), uow.ledger.charged_since(tenants, month)
    spent = {t: Spent(today.get(t, 0), this_month.get(t, 0)) for t in tenants}
    rates = {rental_id: rate for rental_id, (_, rate) in live.items()}
    for rental in pending:
        quoted = (rental.quote or {}).get("final_micros_per_hour", 0)
        rates[rental.id] = int(quoted) if isinstance(quoted, int | float | str) else 0
    return Limits(
        tenants,
        spent,
        price_micros_per_hour=lambda request: rates.get(request.id, 0),
        group_of=lambda request: _cycle_group(catalog, request),
    )


def _cycle_group(catalog: Catalog, request: Request) -> str:
    """The one catalogue model a rental's selector names (its `gpu_model`), else `any` (only in `*`)."""
    models = request.selector.models
    if len(models) != 1:
        return "any"
    try:
        return catalog.get(next(iter(models))).name
    except CatalogError:
        return "any"
