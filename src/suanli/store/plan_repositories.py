"""Billing terms storage: plans, grants (their money is in the ledger), revenue reports, payment terms."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import delete, func, insert, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from suanli.app.errors import Duplicate
from suanli.app.records import MoneyFacts
from suanli.domain.billing.ledger import AccountKind
from suanli.domain.billing.plans import Grant, PaymentMode, PaymentTerms, Plan, PlanKind
from suanli.domain.quotas import TenantLimits
from suanli.store import windows
from suanli.store.rows import (
    BudgetAlertRow,
    ContractRow,
    FairShareRow,
    GrantRow,
    LedgerBalanceRow,
    PaymentTermsRow,
    PriceEntryRow,
    RevenueReportRow,
    TenantLimitsRow,
    TenantPlanRow,
)


def _s(moment: datetime) -> int:
    return int(moment.timestamp())


def _at(seconds: int) -> datetime:
    return datetime.fromtimestamp(seconds, UTC)


def _plan(row: TenantPlanRow) -> Plan:
    return Plan(
        row.id,
        row.tenant_id,
        PlanKind(row.kind),
        row.discount_bp,
        row.fee_micros,
        row.revenue_share_bp,
        _s(row.starts_at),
        _s(row.ends_at),
    )


class SqlTerms:
    def __init__(self, session: Session) -> None:
        self.s = session

    # plans
    def add_plan(self, plan: Plan, created_at: datetime) -> None:
        self.s.add(
            TenantPlanRow(
                id=plan.id,
                tenant_id=plan.tenant,
                kind=plan.kind.value,
                discount_bp=plan.discount_bp,
                fee_micros=plan.fee_micros,
                revenue_share_bp=plan.revenue_share_bp,
                starts_at=_at(plan.starts_s),
                ends_at=_at(plan.ends_s),
                created_at=created_at,
            )
        )
        self.s.flush()

    def plans(self, tenant_id: str) -> list[Plan]:
        rows = self.s.scalars(
            select(TenantPlanRow)
            .where(TenantPlanRow.tenant_id == tenant_id)
            .order_by(TenantPlanRow.starts_at, TenantPlanRow.id)
        )
        return [_plan(r) for r in rows]

    # grants
    def plan_windows_due(self, now: datetime) -> list[tuple[Plan, int]]:
        """(plan, stage reached) of each plan whose start (stage 0) or end (stage 1) is at or before `now`
        and not followed yet: a partial index's rows, the open and future plans, never history."""
        query = select(TenantPlanRow).where(
            windows.due(TenantPlanRow.window_stage, TenantPlanRow.starts_at, TenantPlanRow.ends_at, now)
        )
        return [(_plan(r), r.window_stage) for r in self.s.scalars(query)]

    def mark_plan_window(self, plan_id: str, stage: int) -> bool:
        """Record that the plan's window was followed to `stage`; False when it was there already (another
        pass did it first: this one's work must be rolled back)."""
        return windows.advance(self.s, plan_id, TenantPlanRow.window_stage, stage)

    def add_grant(self, grant: Grant, memo: str) -> None:
        self.s.add(
            GrantRow(
                id=grant.id,
                tenant_id=grant.tenant,
                amount_micros=grant.amount_micros,
                granted_at=_at(grant.granted_s),
                expires_at=None if grant.expires_s is None else _at(grant.expires_s),
                memo=memo,
            )
        )
        try:
            self.s.flush()
        except IntegrityError as error:  # the same credit, made at once through another process
            raise Duplicate(f"grant {grant.id} is there already") from error

    def grants(self, tenant_id: str | None = None) -> list[Grant]:
        query = select(GrantRow).order_by(GrantRow.granted_at, GrantRow.id)
        if tenant_id is not None:
            query = query.where(GrantRow.tenant_id == tenant_id)
        return [
            Grant(
                r.id,
                r.tenant_id,
                r.amount_micros,
                _s(r.granted_at),
                None if r.expires_at is None else _s(r.expires_at),
            )
            for r in self.s.scalars(query)
        ]

    def expired_grant_tenants(self, now: datetime) -> list[str]:
        """Tenants with a grant whose expiry has passed (the caller posts what is not posted yet)."""
        query = select(GrantRow.tenant_id).where(GrantRow.expires_at <= now).distinct()
        return sorted(self.s.scalars(query))

    # revenue reports
    def revenue_report(self, tenant_id: str, month: str) -> int | None:
        row = self.s.get(RevenueReportRow, (tenant_id, month))
        return None if row is None else row.revenue_micros

    def add_revenue_report(self, tenant_id: str, month: str, revenue_micros: int, at: datetime) -> None:
        self.s.add(
            RevenueReportRow(tenant_id=tenant_id, month=month, revenue_micros=revenue_micros, reported_at=at)
        )
        self.s.flush()

    def money_facts(self, tenant_id: str) -> MoneyFacts:
        """The price book's stamp, the tenant's plan and contract counts, balances and terms: one query."""

        def balance(kind: AccountKind) -> Any:
            return (
                select(LedgerBalanceRow.balance_micros)
                .where(LedgerBalanceRow.owner == tenant_id, LedgerBalanceRow.account_kind == kind.value)
                .scalar_subquery()
            )

        def terms(column: Any) -> Any:
            return select(column).where(PaymentTermsRow.tenant_id == tenant_id).scalar_subquery()

        def count(column: Any, owner: Any) -> Any:
            return select(func.count(column)).where(owner == tenant_id).scalar_subquery()

        row = self.s.execute(
            select(
                select(func.count(PriceEntryRow.id)).scalar_subquery(),
                select(func.max(PriceEntryRow.id)).scalar_subquery(),
                count(TenantPlanRow.id, TenantPlanRow.tenant_id),
                count(ContractRow.id, ContractRow.tenant_id),
                balance(AccountKind.TENANT_CASH),
                balance(AccountKind.TENANT_GRANTS),
                terms(PaymentTermsRow.mode),
                terms(PaymentTermsRow.credit_limit_micros),
            )
        ).one()
        prices, top, plans, contracts, cash, grants, mode, limit = row
        return MoneyFacts(
            (int(prices or 0), int(top or 0)),
            int(plans or 0),
            int(contracts or 0),
            int(cash or 0),
            int(grants or 0),
            None if mode is None else PaymentTerms(PaymentMode(mode), limit),
        )

    # limits (GPU quotas, spend caps)
    def limits(self) -> dict[str, TenantLimits]:
        """Every tenant that has limits, with them."""
        return {row.tenant_id: _limits(row) for row in self.s.scalars(select(TenantLimitsRow))}

    def limits_for_update(self, tenant_id: str) -> tuple[TenantLimits, float]:
        """One tenant's limits and fair-share weight, its row locked until the commit (none: no limits, 1)."""
        row = self.s.get(TenantLimitsRow, tenant_id, with_for_update=True)
        return (TenantLimits(), 1.0) if row is None else (_limits(row), float(row.fair_share_weight))

    def fair_share_weights(self) -> dict[str, float]:
        """Every tenant whose weight is not the default 1."""
        query = select(TenantLimitsRow.tenant_id, TenantLimitsRow.fair_share_weight)
        return {tenant: float(weight) for tenant, weight in self.s.execute(query) if weight != 1.0}

    def fair_share(self, tenant_id: str | None = None) -> dict[str, float]:
        """The saved fair-share usage in GPU-seconds per tenant (one tenant's when named)."""
        query = select(FairShareRow.tenant_id, FairShareRow.usage_gpu_s)
        if tenant_id is not None:
            query = query.where(FairShareRow.tenant_id == tenant_id)
        return {tenant: float(usage) for tenant, usage in self.s.execute(query)}

    def fair_share_saved_at(self) -> datetime | None:
        return self.s.scalar(select(func.max(FairShareRow.as_of)))

    def save_fair_share(self, usage_gpu_s: dict[str, float], as_of: datetime) -> None:
        """Replace the saved usage with `usage_gpu_s` as of `as_of` (tenants not in it are dropped)."""
        self.s.execute(delete(FairShareRow))
        if usage_gpu_s:
            self.s.execute(
                insert(FairShareRow),
                [{"tenant_id": t, "usage_gpu_s": u, "as_of": as_of} for t, u in sorted(usage_gpu_s.items())],
            )

    def set_limits(self, tenant_id: str, limits: TenantLimits, now: datetime, weight: float = 1.0) -> None:
        """The operator's part: quotas, caps and weight (the tenant's own budget stays)."""
        row = self._limits_row(tenant_id)
        self._alerts_anew(
            tenant_id,
            ("daily spend cap", row.daily_cap_micros, limits.daily_cap_micros),
            ("monthly spend cap", row.monthly_cap_micros, limits.monthly_cap_micros),
        )
        row.gpu_quota = dict(limits.gpu_quota)
        row.daily_cap_micros, row.monthly_cap_micros = limits.daily_cap_micros, limits.monthly_cap_micros
        row.fair_share_weight, row.updated_at = weight, now
        self.s.flush()

    def set_budget(
        self,
        tenant_id: str,
        daily_micros: int | None,
        monthly_micros: int | None,
        now: datetime,
        stops_running: bool = False,
    ) -> None:
        """The tenant's own part: its daily and monthly budget (the operator's limits stay)."""
        row = self._limits_row(tenant_id)
        self._alerts_anew(
            tenant_id,
            ("own daily budget", row.budget_daily_micros, daily_micros),
            ("own monthly budget", row.budget_monthly_micros, monthly_micros),
        )
        row.budget_daily_micros, row.budget_monthly_micros = daily_micros, monthly_micros
        row.budget_stops_running = stops_running
        row.updated_at = now
        self.s.flush()

    def _alerts_anew(self, tenant_id: str, *changes: tuple[str, int | None, int | None]) -> None:
        """Forget the alerts sent for each (limit, old amount, new amount) whose amount changed: its 80% and
        100% alerts are for the new amount (they went out once per period, whatever the amount became)."""
        changed = [name for name, old, new in changes if old != new]
        if changed:
            with self.s.no_autoflush:  # a new limits row is not complete yet
                self.s.execute(
                    delete(BudgetAlertRow).where(
                        BudgetAlertRow.tenant_id == tenant_id, BudgetAlertRow.limit_name.in_(changed)
                    )
                )

    def budget_alerts_sent(self, tenant_id: str, periods: Sequence[str]) -> set[tuple[str, str, int]]:
        """(limit, period, threshold %) of the alerts the tenant was sent in `periods`."""
        query = select(BudgetAlertRow.limit_name, BudgetAlertRow.period, BudgetAlertRow.threshold_pct).where(
            BudgetAlertRow.tenant_id == tenant_id, BudgetAlertRow.period.in_(list(periods))
        )
        return {(limit, period, int(pct)) for limit, period, pct in self.s.execute(query)}

    def add_budget_alert(
        self, tenant_id: str, limit: str, period: str, threshold_pct: int, spent_micros: int, at: datetime
    ) -> None:
        self.s.add(
            BudgetAlertRow(
                tenant_id=tenant_id,
                limit_name=limit,
                period=period,
                threshold_pct=threshold_pct,
                spent_micros=spent_micros,
                sent_at=at,
            )
        )
        self.s.flush()

    def _limits_row(self, tenant_id: str) -> TenantLimitsRow:
        """The tenant's limits row, locked; a new one (no limits, weight 1) when it has none."""
        row = self.s.get(TenantLimitsRow, tenant_id, with_for_update=True)
        if row is None:
            row = TenantLimitsRow(tenant_id=tenant_id, gpu_quota={}, fair_share_weight=1.0)
            self.s.add(row)
        return row

    # payment terms
    def payment_terms(self, tenant_id: str) -> tuple[PaymentTerms, datetime | None] | None:
        row = self.s.get(PaymentTermsRow, tenant_id)
        if row is None:
            return None
        return PaymentTerms(PaymentMode(row.mode), row.credit_limit_micros), row.warned_at

    def set_payment_terms(self, tenant_id: str, terms: PaymentTerms, now: datetime) -> None:
        row = self.s.get(PaymentTermsRow, tenant_id)
        if row is None:
            self.s.add(
                PaymentTermsRow(
                    tenant_id=tenant_id,
                    mode=terms.mode.value,
                    credit_limit_micros=terms.credit_limit_micros,
                    warned_at=None,
                    updated_at=now,
                )
            )
        else:
            row.mode, row.credit_limit_micros, row.updated_at = (
                terms.mode.value,
                terms.credit_limit_micros,
                now,
            )
        self.s.flush()

    def warned_tenants(self) -> list[str]:
        query = select(PaymentTermsRow.tenant_id).where(PaymentTermsRow.warned_at.is_not(None))
        return sorted(self.s.scalars(query))

    def set_warned(
        self, tenant_id: str, warned_at: datetime | None, now: datetime, default: PaymentTerms
    ) -> None:
        """Record (or clear) the start of a tenant's grace period; tenants without terms get `default`."""
        if self.s.get(PaymentTermsRow, tenant_id) is None:
            self.set_payment_terms(tenant_id, default, now)
        self.s.execute(
            update(PaymentTermsRow).where(PaymentTermsRow.tenant_id == tenant_id).values(warned_at=warned_at)
        )


def _limits(row: TenantLimitsRow) -> TenantLimits:
    quota = {str(group): int(gpus) for group, gpus in (row.gpu_quota or {}).items()}
    return TenantLimits(
        quota,
        row.daily_cap_micros,
        row.monthly_cap_micros,
        row.budget_daily_micros,
        row.budget_monthly_micros,
        bool(row.budget_stops_running),
    )
