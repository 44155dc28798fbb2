"""What the calls on prices, balances, plans, limits, budgets, invoices and SLAs send (see `calls`), for
`BillingCalls` and `AsyncBillingCalls`; an argument its request model refuses is an `InvalidArgument`. The
lists fetched in pages (invoice lines, ledger, payouts) are `billing_pages`'."""

from __future__ import annotations

from datetime import datetime
from typing import TypedDict

from suanli.client.calls import Call, created, tenant_query
from suanli.client.errors import checks_arguments
from suanli.client.transport import segment
from suanli.wire.billing_schemas import (
    BalanceResponse,
    CreditRequest,
    LedgerTransactionResponse,
    LedgerVerifyResponse,
    PriceEntryList,
    PriceEntryRequest,
    PriceEntryResponse,
    PriceResponse,
    SlaPostResponse,
    SlaResponse,
)
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


class BudgetChanges(TypedDict, total=False):
    """What `change_budget` may change; a budget given as None is removed."""

    daily_micros: int | None
    monthly_micros: int | None
    stop_running: bool


class LimitsChanges(TypedDict, total=False):
    """What `change_limits` may change; a quota or cap given as None is removed."""

    gpu_quota: dict[str, int | None]
    daily_cap_micros: int | None
    monthly_cap_micros: int | None
    fair_share_weight: float


def prices() -> Call[list[PriceResponse]]:
    return Call("GET", "/v1/prices", list[PriceResponse])


@checks_arguments
def set_prices(entries: list[PriceEntryRequest]) -> Call[list[PriceEntryResponse]]:
    return Call("PUT", "/v1/prices", list[PriceEntryResponse], body=PriceEntryList(entries))


def balance(tenant_id: str | None) -> Call[BalanceResponse]:
    return Call("GET", "/v1/balance", BalanceResponse, params=tenant_query(tenant_id))


@checks_arguments
def credit(
    tenant_id: str, amount_micros: int, grant: bool, memo: str, key: str | None, expires_at: datetime | None
) -> Call[LedgerTransactionResponse]:
    body = CreditRequest(amount_micros=amount_micros, grant=grant, memo=memo, expires_at=expires_at)
    return created(f"/v1/tenants/{segment(tenant_id)}/credit", LedgerTransactionResponse, body, key)


def create_plan(tenant_id: str, request: PlanRequest) -> Call[PlanResponse]:
    return Call("POST", f"/v1/tenants/{segment(tenant_id)}/plans", PlanResponse, body=request)


def plans(tenant_id: str | None) -> Call[list[PlanResponse]]:
    return Call("GET", "/v1/plans", list[PlanResponse], params=tenant_query(tenant_id))


@checks_arguments
def report_revenue(month: str, revenue_micros: int, tenant_id: str | None) -> Call[RevenueReportResponse]:
    body = RevenueReportRequest(month=month, revenue_micros=revenue_micros)
    params = tenant_query(tenant_id)
    return Call("POST", "/v1/revenue-reports", RevenueReportResponse, body=body, params=params, retry=True)


def grants(tenant_id: str | None) -> Call[list[GrantResponse]]:
    return Call("GET", "/v1/grants", list[GrantResponse], params=tenant_query(tenant_id))


@checks_arguments
def set_payment_terms(tenant_id: str, mode: str, credit_limit_micros: int) -> Call[PaymentTermsResponse]:
    body = PaymentTermsRequest(mode=mode, credit_limit_micros=credit_limit_micros)  # type: ignore[arg-type]
    path = f"/v1/tenants/{segment(tenant_id)}/payment-terms"
    return Call("PUT", path, PaymentTermsResponse, body=body, retry=True)


def payment_terms(tenant_id: str | None) -> Call[PaymentTermsResponse]:
    return Call("GET", "/v1/payment-terms", PaymentTermsResponse, params=tenant_query(tenant_id))


@checks_arguments
def set_limits(
    tenant_id: str,
    gpu_quota: dict[str, int],
    daily_cap_micros: int | None,
    monthly_cap_micros: int | None,
    fair_share_weight: float,
) -> Call[LimitsResponse]:
    body = LimitsRequest(
        gpu_quota=gpu_quota,
        daily_cap_micros=daily_cap_micros,
        monthly_cap_micros=monthly_cap_micros,
        fair_share_weight=fair_share_weight,
    )
    return Call("PUT", f"/v1/tenants/{segment(tenant_id)}/limits", LimitsResponse, body=body, retry=True)


@checks_arguments
def change_limits(tenant_id: str, changes: LimitsChanges) -> Call[LimitsResponse]:
    body = LimitsPatch(**changes)
    path = f"/v1/tenants/{segment(tenant_id)}/limits"
    return Call("PATCH", path, LimitsResponse, body=body, retry=True, merge_patch=True)


@checks_arguments
def set_budget(
    daily_micros: int | None, monthly_micros: int | None, tenant_id: str | None, stop_running: bool
) -> Call[LimitsResponse]:
    body = BudgetRequest(daily_micros=daily_micros, monthly_micros=monthly_micros, stop_running=stop_running)
    return Call("PUT", "/v1/budget", LimitsResponse, body=body, params=tenant_query(tenant_id), retry=True)


@checks_arguments
def change_budget(tenant_id: str | None, changes: BudgetChanges) -> Call[LimitsResponse]:
    body, params = BudgetPatch(**changes), tenant_query(tenant_id)
    return Call("PATCH", "/v1/budget", LimitsResponse, body=body, params=params, retry=True, merge_patch=True)


def limits(tenant_id: str | None) -> Call[LimitsResponse]:
    return Call("GET", "/v1/limits", LimitsResponse, params=tenant_query(tenant_id))


def verify_ledger() -> Call[LedgerVerifyResponse]:
    return Call("GET", "/v1/ledger/verify", LedgerVerifyResponse)


def invoice_csv(month: str, tenant_id: str | None) -> Call[str]:
    params = {"format": "csv", **(tenant_query(tenant_id) or {})}
    return Call("GET", f"/v1/invoices/{segment(month)}", str, params=params, raw=True)


def sla(month: str, tenant_id: str | None) -> Call[SlaResponse]:
    return Call("GET", f"/v1/sla/{segment(month)}", SlaResponse, params=tenant_query(tenant_id))


def post_sla(month: str) -> Call[SlaPostResponse]:
    return Call("POST", f"/v1/admin/sla/{segment(month)}", SlaPostResponse)
