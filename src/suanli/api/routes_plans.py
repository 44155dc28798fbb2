"""/v1/tenants/{id}/plans and /v1/plans, /v1/revenue-reports, /v1/grants, payment terms, limits."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated

from fastapi import APIRouter, Query, status

from suanli.api.deps import CallerDep, ServicesDep
from suanli.api.errors import ERROR_RESPONSES
from suanli.api.wiring import Services
from suanli.app.limits import LimitsChange, LimitsService, LimitsView
from suanli.app.plans import PlanService, TermsView
from suanli.domain.billing.plans import Plan
from suanli.wire.plan_schemas import (
    BudgetPatch,
    BudgetRequest,
    GrantResponse,
    LimitsPatch,
    LimitsRequest,
    LimitsResponse,
    PaymentTermsRequest,
    PaymentTermsResponse,
    PlanRequest,
    PlanResponse,
    RevenueReportRequest,
    RevenueReportResponse,
)

router = APIRouter(prefix="/v1", tags=["plans"], responses=ERROR_RESPONSES)
TenantQuery = Annotated[str | None, Query(max_length=40, description="Admins: another tenant.")]


def _plans(services: Services) -> PlanService:
    assert services.plans is not None
    return services.plans


def _at(seconds: int) -> datetime:
    return datetime.fromtimestamp(seconds, UTC)


def _plan(plan: Plan) -> PlanResponse:
    return PlanResponse(
        id=plan.id,
        tenant_id=plan.tenant,
        kind=plan.kind.value,
        discount_bp=plan.discount_bp,
        fee_micros=plan.fee_micros,
        revenue_share_bp=plan.revenue_share_bp,
        starts_at=_at(plan.starts_s),
        ends_at=_at(plan.ends_s),
    )


def _terms(view: TermsView) -> PaymentTermsResponse:
    return PaymentTermsResponse(
        tenant_id=view.tenant_id,
        mode=view.terms.mode.value,
        credit_limit_micros=view.terms.credit_limit_micros,
        floor_micros=view.terms.floor_micros,
        warned_at=view.warned_at,
        stops_at=view.stops_at,
    )


@router.post("/tenants/{tenant_id}/plans", status_code=status.HTTP_201_CREATED)
def create_plan(tenant_id: str, body: PlanRequest, caller: CallerDep, services: ServicesDep) -> PlanResponse:
    """Admin: a membership (fee posted now, discount on on-demand) or a revenue-share plan."""
    plan = _plans(services).set_plan(
        caller,
        tenant_id,
        body.kind,
        discount_bp=body.discount_bp,
        fee_micros=body.fee_micros,
        revenue_share_bp=body.revenue_share_bp,
        starts_at=body.starts_at,
        ends_at=body.ends_at,
    )
    return _plan(plan)


@router.get("/plans")
def list_plans(caller: CallerDep, services: ServicesDep, tenant: TenantQuery = None) -> list[PlanResponse]:
    """The caller's plans: discount, revenue share and credit terms (an admin: any tenant's)."""
    return [_plan(p) for p in _plans(services).plans(caller, tenant)]


@router.post("/revenue-reports", status_code=status.HTTP_201_CREATED)
def report_revenue(
    body: RevenueReportRequest, caller: CallerDep, services: ServicesDep, tenant: TenantQuery = None
) -> RevenueReportResponse:
    """A revenue-share tenant reports a month's revenue (once); its share is posted on that month."""
    share, key = _plans(services).report_revenue(caller, body.month, body.revenue_micros, tenant)
    return RevenueReportResponse(
        tenant_id=tenant or caller.tenant.id,
        month=body.month,
        revenue_micros=body.revenue_micros,
        share_micros=share,
        ledger_key=key,
    )


@router.get("/grants")
def list_grants(caller: CallerDep, services: ServicesDep, tenant: TenantQuery = None) -> list[GrantResponse]:
    """The tenant's grants and what is left of each (an expired one: 0)."""
    return [
        GrantResponse(
            id=grant.id,
            tenant_id=grant.tenant,
            amount_micros=grant.amount_micros,
            left_micros=left,
            granted_at=_at(grant.granted_s),
            expires_at=None if grant.expires_s is None else _at(grant.expires_s),
        )
        for grant, left in _plans(services).grants(caller, tenant)
    ]


@router.put("/tenants/{tenant_id}/payment-terms")
def set_payment_terms(
    tenant_id: str, body: PaymentTermsRequest, caller: CallerDep, services: ServicesDep
) -> PaymentTermsResponse:
    """Admin: prepaid (floor 0) or postpaid with a credit limit (floor minus the limit)."""
    return _terms(_plans(services).set_terms(caller, tenant_id, body.mode, body.credit_limit_micros))


@router.get("/payment-terms")
def get_payment_terms(
    caller: CallerDep, services: ServicesDep, tenant: TenantQuery = None
) -> PaymentTermsResponse:
    """The caller's payment terms: prepaid, or postpaid with a credit limit (an admin: any tenant's)."""
    return _terms(_plans(services).terms(caller, tenant))


def _limits(services: Services) -> LimitsService:
    assert services.limits is not None
    return services.limits


def _limits_response(view: LimitsView) -> LimitsResponse:
    return LimitsResponse(
        tenant_id=view.tenant_id,
        gpu_quota=dict(view.limits.gpu_quota),
        daily_cap_micros=view.limits.daily_cap_micros,
        monthly_cap_micros=view.limits.monthly_cap_micros,
        budget_daily_micros=view.limits.budget_daily_micros,
        budget_monthly_micros=view.limits.budget_monthly_micros,
        budget_stops_running=view.limits.budget_stops_running,
        spent_today_micros=view.spent.day_micros,
        spent_month_micros=view.spent.month_micros,
        fair_share_weight=view.fair_share_weight,
        fair_share_usage_gpu_hours=round(view.usage_gpu_s / 3600, 3),
        fair_share_as_of=view.usage_as_of,
    )


@router.put("/tenants/{tenant_id}/limits")
def set_limits(
    tenant_id: str, body: LimitsRequest, caller: CallerDep, services: ServicesDep
) -> LimitsResponse:
    """Admin: a tenant's GPU quotas, spend caps and fair-share weight (replaces the earlier ones)."""
    view = _limits(services).set(
        caller,
        tenant_id,
        body.gpu_quota,
        body.daily_cap_micros,
        body.monthly_cap_micros,
        body.fair_share_weight,
    )
    return _limits_response(view)


@router.patch("/tenants/{tenant_id}/limits")
def update_limits(
    tenant_id: str, body: LimitsPatch, caller: CallerDep, services: ServicesDep
) -> LimitsResponse:
    """Admin: change only the quotas, caps and weight the body names (null removes a quota or a cap); the
    others, and the tenant's own budget, stay."""
    given = body.model_fields_set
    caps = {
        period: getattr(body, f"{period}_cap_micros")
        for period in ("daily", "monthly")
        if f"{period}_cap_micros" in given
    }
    change = LimitsChange(body.gpu_quota, caps, body.fair_share_weight)
    return _limits_response(_limits(services).update(caller, tenant_id, change))


@router.put("/budget")
def set_budget(
    body: BudgetRequest, caller: CallerDep, services: ServicesDep, tenant: TenantQuery = None
) -> LimitsResponse:
    """Your own spend budget per UTC day and month (replaces the earlier one; nulls remove it): a rental that
    would take your spend past it waits with reason `spend_cap`, as past the operator's caps; at 80% and
    100% of it your rentals get a `budget` event, and with `stop_running` they stop once it is spent.
    Admins: `?tenant=`."""
    view = _limits(services).set_budget(
        caller, body.daily_micros, body.monthly_micros, tenant, body.stop_running
    )
    return _limits_response(view)


@router.patch("/budget")
def change_budget(
    body: BudgetPatch, caller: CallerDep, services: ServicesDep, tenant: TenantQuery = None
) -> LimitsResponse:
    """Change only what the body names of your own budget (JSON merge patch: null removes a daily or monthly
    budget); the rest stays. Admins: `?tenant=`."""
    amounts = {
        period: getattr(body, f"{period}_micros")
        for period in ("daily", "monthly")
        if f"{period}_micros" in body.model_fields_set
    }
    view = _limits(services).change_budget(caller, amounts, body.stop_running, tenant)
    return _limits_response(view)


@router.get("/limits")
def get_limits(caller: CallerDep, services: ServicesDep, tenant: TenantQuery = None) -> LimitsResponse:
    """The caller's limits (admins: `?tenant=`)."""
    return _limits_response(_limits(services).get(caller, tenant))
