"""Calls on money: prices, balances, credits, plans, payment terms, limits and budgets, invoices and SLA
credits (the ledger and payouts, fetched in pages, are `Client.ledger` and `Client.payouts`)."""

from __future__ import annotations

from datetime import datetime
from typing import TypedDict, Unpack

from suanli.client.errors import checks_arguments
from suanli.client.transport import Transport, next_after, segment
from suanli.wire.billing_schemas import (
    BalanceResponse,
    CreditRequest,
    InvoiceLineResponse,
    InvoiceResponse,
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

INVOICE_PAGE_LIMIT = 1000  # rental lines asked for a page of an invoice: the most the server gives


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


class BillingCalls(Transport):
    """The calls on prices, balances, plans, limits, budgets, invoices and SLAs."""

    def prices(self) -> list[PriceResponse]:
        return self._call("GET", "/v1/prices", list[PriceResponse])

    @checks_arguments
    def set_prices(self, entries: list[PriceEntryRequest]) -> list[PriceEntryResponse]:
        """Admin: add price book entries (all or none); returns them as stored."""
        return self._call("PUT", "/v1/prices", list[PriceEntryResponse], body=PriceEntryList(entries))

    def balance(self, tenant_id: str | None = None) -> BalanceResponse:
        params = {"tenant": tenant_id} if tenant_id else None
        return self._call("GET", "/v1/balance", BalanceResponse, params=params)

    @checks_arguments
    def credit(
        self,
        tenant_id: str,
        amount_micros: int,
        *,
        grant: bool = False,
        memo: str = "",
        key: str | None = None,
        expires_at: datetime | None = None,
    ) -> LedgerTransactionResponse:
        """Admin: top up (or grant, optionally expiring) a tenant; the Idempotency-Key makes a retry post
        nothing twice."""
        body = CreditRequest(amount_micros=amount_micros, grant=grant, memo=memo, expires_at=expires_at)
        return self._create(f"/v1/tenants/{segment(tenant_id)}/credit", LedgerTransactionResponse, body, key)

    def create_plan(self, tenant_id: str, request: PlanRequest) -> PlanResponse:
        """Admin: put a tenant on a membership (its fee is posted now) or a revenue-share plan."""
        return self._call("POST", f"/v1/tenants/{segment(tenant_id)}/plans", PlanResponse, body=request)

    def plans(self, tenant_id: str | None = None) -> list[PlanResponse]:
        params = {"tenant": tenant_id} if tenant_id else None
        return self._call("GET", "/v1/plans", list[PlanResponse], params=params)

    @checks_arguments
    def report_revenue(
        self, month: str, revenue_micros: int, tenant_id: str | None = None
    ) -> RevenueReportResponse:
        """A revenue-share tenant's monthly revenue report (once per month; repeating it posts nothing)."""
        params = {"tenant": tenant_id} if tenant_id else None
        body = RevenueReportRequest(month=month, revenue_micros=revenue_micros)
        return self._call(
            "POST", "/v1/revenue-reports", RevenueReportResponse, body=body, params=params, retry=True
        )

    def grants(self, tenant_id: str | None = None) -> list[GrantResponse]:
        params = {"tenant": tenant_id} if tenant_id else None
        return self._call("GET", "/v1/grants", list[GrantResponse], params=params)

    @checks_arguments
    def set_payment_terms(
        self, tenant_id: str, mode: str, credit_limit_micros: int = 0
    ) -> PaymentTermsResponse:
        body = PaymentTermsRequest(mode=mode, credit_limit_micros=credit_limit_micros)  # type: ignore[arg-type]
        return self._call(
            "PUT",
            f"/v1/tenants/{segment(tenant_id)}/payment-terms",
            PaymentTermsResponse,
            body=body,
            retry=True,
        )

    def payment_terms(self, tenant_id: str | None = None) -> PaymentTermsResponse:
        params = {"tenant": tenant_id} if tenant_id else None
        return self._call("GET", "/v1/payment-terms", PaymentTermsResponse, params=params)

    @checks_arguments
    def set_limits(
        self,
        tenant_id: str,
        gpu_quota: dict[str, int],
        daily_cap_micros: int | None = None,
        monthly_cap_micros: int | None = None,
        fair_share_weight: float = 1.0,
    ) -> LimitsResponse:
        body = LimitsRequest(
            gpu_quota=gpu_quota,
            daily_cap_micros=daily_cap_micros,
            monthly_cap_micros=monthly_cap_micros,
            fair_share_weight=fair_share_weight,
        )
        return self._call(
            "PUT", f"/v1/tenants/{segment(tenant_id)}/limits", LimitsResponse, body=body, retry=True
        )

    @checks_arguments
    def change_limits(self, tenant_id: str, **changes: Unpack[LimitsChanges]) -> LimitsResponse:
        """Admin: change only the limits named (a quota or cap given as None is removed); the rest stay."""
        body = LimitsPatch(**changes)
        return self._call(
            "PATCH",
            f"/v1/tenants/{segment(tenant_id)}/limits",
            LimitsResponse,
            body=body,
            retry=True,
            merge_patch=True,
        )

    @checks_arguments
    def set_budget(
        self,
        daily_micros: int | None = None,
        monthly_micros: int | None = None,
        tenant_id: str | None = None,
        *,
        stop_running: bool = False,
    ) -> LimitsResponse:
        """Your own spend budget per UTC day and month (None: none); a rental past it waits (`spend_cap`),
        and with `stop_running` your running rentals stop once it is spent."""
        body = BudgetRequest(
            daily_micros=daily_micros, monthly_micros=monthly_micros, stop_running=stop_running
        )
        params = {"tenant": tenant_id} if tenant_id else None
        return self._call("PUT", "/v1/budget", LimitsResponse, body=body, params=params, retry=True)

    @checks_arguments
    def change_budget(self, tenant_id: str | None = None, **changes: Unpack[BudgetChanges]) -> LimitsResponse:
        """Change only what is named of your own budget (one given as None is removed); the rest stays."""
        params = {"tenant": tenant_id} if tenant_id else None
        body = BudgetPatch(**changes)
        return self._call(
            "PATCH", "/v1/budget", LimitsResponse, body=body, params=params, retry=True, merge_patch=True
        )

    def limits(self, tenant_id: str | None = None) -> LimitsResponse:
        params = {"tenant": tenant_id} if tenant_id else None
        return self._call("GET", "/v1/limits", LimitsResponse, params=params)

    def verify_ledger(self) -> LedgerVerifyResponse:
        return self._call("GET", "/v1/ledger/verify", LedgerVerifyResponse)

    def invoice(self, month: str, tenant_id: str | None = None) -> InvoiceResponse:
        """The month's invoice with every rental line: its pages (`INVOICE_PAGE_LIMIT` lines each) followed
        by their `Link` rel="next" and the lines put together; the totals, plan and SLA lines are the last
        page's."""
        path = f"/v1/invoices/{segment(month)}"
        params = {"limit": str(INVOICE_PAGE_LIMIT), **({"tenant": tenant_id} if tenant_id else {})}
        lines: list[InvoiceLineResponse] = []
        after: str | None = None
        while True:
            response = self._send("GET", path, params={**params, **({"after": after} if after else {})})
            page: InvoiceResponse = self._read("GET", path, response, InvoiceResponse)
            lines.extend(page.lines)
            after = next_after(response)
            if after is None or not page.lines:  # the last page (or an older server's only one)
                return page.model_copy(update={"lines": lines})

    def invoice_csv(self, month: str, tenant_id: str | None = None) -> str:
        """The invoice as CSV text."""
        params: dict[str, str] = {"format": "csv"}
        if tenant_id:
            params["tenant"] = tenant_id
        return self._call("GET", f"/v1/invoices/{segment(month)}", str, params=params, raw=True)

    def sla(self, month: str, tenant_id: str | None = None) -> SlaResponse:
        """The month's availability of the caller's rentals, the outages that hit them and the credit owed."""
        params = {"tenant": tenant_id} if tenant_id else None
        return self._call("GET", f"/v1/sla/{segment(month)}", SlaResponse, params=params)

    def post_sla(self, month: str) -> SlaPostResponse:
        """Admin: post an ended month's SLA credits (each tenant's once, however often this is called)."""
        return self._call("POST", f"/v1/admin/sla/{segment(month)}", SlaPostResponse)
