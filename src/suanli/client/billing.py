"""Calls on money: prices, balances, credits, plans, payment terms, limits and budgets, invoices and SLA
credits (what each sends: `billing_requests`, `billing_pages`; the ledger and payouts, fetched in pages, are
`Client.ledger` and `Client.payouts`)."""

from __future__ import annotations

from datetime import datetime
from typing import Unpack

from suanli.client import billing_requests as sent
from suanli.client.billing_pages import INVOICE_PAGE_LIMIT, invoice_pages
from suanli.client.billing_requests import BudgetChanges, LimitsChanges
from suanli.client.transport import Transport
from suanli.wire.billing_schemas import (
    BalanceResponse,
    InvoiceResponse,
    LedgerTransactionResponse,
    LedgerVerifyResponse,
    PriceEntryRequest,
    PriceEntryResponse,
    PriceResponse,
    SlaPostResponse,
    SlaResponse,
)
from suanli.wire.plan_schemas import (
    GrantResponse,
    LimitsResponse,
    PaymentTermsResponse,
    PlanRequest,
    PlanResponse,
    RevenueReportResponse,
)

__all__ = ["INVOICE_PAGE_LIMIT", "BillingCalls", "BudgetChanges", "LimitsChanges"]


class BillingCalls(Transport):
    """The calls on prices, balances, plans, limits, budgets, invoices and SLAs."""

    def prices(self) -> list[PriceResponse]:
        return self._ask(sent.prices())

    def set_prices(self, entries: list[PriceEntryRequest]) -> list[PriceEntryResponse]:
        """Admin: add price book entries (all or none); returns them as stored."""
        return self._ask(sent.set_prices(entries))

    def balance(self, tenant_id: str | None = None) -> BalanceResponse:
        return self._ask(sent.balance(tenant_id))

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
        return self._ask(sent.credit(tenant_id, amount_micros, grant, memo, key, expires_at))

    def create_plan(self, tenant_id: str, request: PlanRequest) -> PlanResponse:
        """Admin: put a tenant on a membership (its fee is posted now) or a revenue-share plan."""
        return self._ask(sent.create_plan(tenant_id, request))

    def plans(self, tenant_id: str | None = None) -> list[PlanResponse]:
        return self._ask(sent.plans(tenant_id))

    def report_revenue(
        self, month: str, revenue_micros: int, tenant_id: str | None = None
    ) -> RevenueReportResponse:
        """A revenue-share tenant's monthly revenue report (once per month; repeating it posts nothing)."""
        return self._ask(sent.report_revenue(month, revenue_micros, tenant_id))

    def grants(self, tenant_id: str | None = None) -> list[GrantResponse]:
        return self._ask(sent.grants(tenant_id))

    def set_payment_terms(
        self, tenant_id: str, mode: str, credit_limit_micros: int = 0
    ) -> PaymentTermsResponse:
        return self._ask(sent.set_payment_terms(tenant_id, mode, credit_limit_micros))

    def payment_terms(self, tenant_id: str | None = None) -> PaymentTermsResponse:
        return self._ask(sent.payment_terms(tenant_id))

    def set_limits(
        self,
        tenant_id: str,
        gpu_quota: dict[str, int],
        daily_cap_micros: int | None = None,
        monthly_cap_micros: int | None = None,
        fair_share_weight: float = 1.0,
    ) -> LimitsResponse:
        call = sent.set_limits(tenant_id, gpu_quota, daily_cap_micros, monthly_cap_micros, fair_share_weight)
        return self._ask(call)

    def change_limits(self, tenant_id: str, **changes: Unpack[LimitsChanges]) -> LimitsResponse:
        """Admin: change only the limits named (a quota or cap given as None is removed); the rest stay."""
        return self._ask(sent.change_limits(tenant_id, changes))

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
        return self._ask(sent.set_budget(daily_micros, monthly_micros, tenant_id, stop_running))

    def change_budget(self, tenant_id: str | None = None, **changes: Unpack[BudgetChanges]) -> LimitsResponse:
        """Change only what is named of your own budget (one given as None is removed); the rest stays."""
        return self._ask(sent.change_budget(tenant_id, changes))

    def limits(self, tenant_id: str | None = None) -> LimitsResponse:
        return self._ask(sent.limits(tenant_id))

    def verify_ledger(self) -> LedgerVerifyResponse:
        return self._ask(sent.verify_ledger())

    def invoice(self, month: str, tenant_id: str | None = None) -> InvoiceResponse:
        """The month's invoice with every rental line: its pages (`INVOICE_PAGE_LIMIT` lines each) followed
        by their `Link` rel="next" and the lines put together; the totals, plan and SLA lines are the last
        page's."""
        return self._pages(invoice_pages(month, tenant_id, INVOICE_PAGE_LIMIT))

    def invoice_csv(self, month: str, tenant_id: str | None = None) -> str:
        """The invoice as CSV text."""
        return self._ask(sent.invoice_csv(month, tenant_id))

    def sla(self, month: str, tenant_id: str | None = None) -> SlaResponse:
        """The month's availability of the caller's rentals, the outages that hit them and the credit owed."""
        return self._ask(sent.sla(month, tenant_id))

    def post_sla(self, month: str) -> SlaPostResponse:
        """Admin: post an ended month's SLA credits (each tenant's once, however often this is called)."""
        return self._ask(sent.post_sla(month))
