"""Plans, grants with expiry, revenue reports and payment terms: the use cases around a tenant's money terms.

* A membership's fee is posted when it starts (key `membership:{plan}`, `app/plan_windows.py`): at once
  for a plan made already started, else by the meter loop at its start; one plan at a time per tenant. A
  plan made already started discounts the tenant's running rentals from then.
* A revenue-share tenant reports a month's revenue once; its share is posted as that month's plan line
  (key `revenue_share:{tenant}:{yyyy-mm}`, ref `{yyyy-mm}`).
* A grant with an expiry gives back what is left of it at that time (key `grant_expiry:{grant}`).
* `enforce` (run by the meter loop) warns a tenant below its floor, then stops its running rentals once the
  grace period has passed; back above the floor, the warning is cleared.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

from suanli.app.errors import Conflict, Invalid, NotFound, PaymentRequired
from suanli.app.ids import as_utc, new_id
from suanli.app.plan_windows import start_plan_now
from suanli.app.ports import Clock, UnitOfWork, UnitOfWorkFactory
from suanli.app.postings import post_once, retrying
from suanli.app.records import LIVE_STATES, Caller, Rental, RentalEvent
from suanli.app.tenants import require_admin, target_tenant
from suanli.domain.billing.errors import BillingError
from suanli.domain.billing.invoice import InvoiceError, Month
from suanli.domain.billing.ledger import AccountId, AccountKind, TxKind
from suanli.domain.billing.money import money_text, to_epoch_s
from suanli.domain.billing.plans import (
    FundsAction,
    Grant,
    PaymentMode,
    PaymentTerms,
    Plan,
    PlanKind,
    a_year_after,
    expiry_micros,
    expiry_postings,
    fee_postings,
    funds_action,
    grants_left,
    overlapping,
    plan_in_force,
    revenue_share_micros,
)

log = logging.getLogger(__name__)
MAX_MICROS = 10**15
StopRental = Callable[[UnitOfWork, Rental, datetime, str], None]


@dataclass(frozen=True, slots=True)
class TermsView:
    """A tenant's payment terms and, when it is below its floor, since when and when it will be stopped."""

    tenant_id: str
    terms: PaymentTerms
    warned_at: datetime | None
    stops_at: datetime | None


class PlanService:
    def __init__(
        self,
        uow: UnitOfWorkFactory,
        clock: Clock,
        stop_rental: StopRental,
        *,
        prepaid: bool = True,
        grace_s: float = 3600.0,
    ) -> None:
        self.uow, self.clock, self.stop_rental = uow, clock, stop_rental
        self.default_terms = PaymentTerms() if prepaid else PaymentTerms(PaymentMode.POSTPAID, MAX_MICROS)
        self.grace_s = grace_s

    # --- plans -----------------------------------------------------------------------------------------

    def set_plan(
        self,
        caller: Caller,
        tenant_id: str,
        kind: str,
        *,
        discount_bp: int,
        fee_micros: int = 0,
        revenue_share_bp: int = 0,
        starts_at: datetime | None = None,
        ends_at: datetime | None = None,
    ) -> Plan:
        """Admin: put a tenant on a plan; a membership's fee is posted from its cash when the plan starts (at
        once when it has started: later, by the meter loop's `PlanWindows.follow`), and refused now when its
        cash could not pay it now."""
        require_admin(caller)
        try:
            plan_kind = PlanKind(kind)
        except ValueError:
            raise Invalid(f"must be one of {[k.value for k in PlanKind]}", field="kind") from None
        now = self.clock.now()
        start = as_utc(starts_at) if starts_at is not None else now
        end = as_utc(ends_at) if ends_at is not None else a_year_after(start)
        if end <= start:
            raise Invalid(
                f"the plan would end ({end:%Y-%m-%d %H:%M} UTC) before it starts "
                f"({start:%Y-%m-%d %H:%M} UTC)",
                field="ends_at",
            )
        try:
            plan = Plan(
                new_id("pln"),
                tenant_id,
                plan_kind,
                discount_bp,
                fee_micros,
                revenue_share_bp,
                to_epoch_s(start),
                to_epoch_s(end),
            )
        except BillingError as error:
            raise Invalid(str(error), field=_plan_field(str(error))) from None

        def work() -> Plan:
            with self.uow() as uow:
                if uow.tenants.get(tenant_id) is None:
                    raise NotFound(f"no tenant {tenant_id}", field="tenant_id")
                clash = overlapping(uow.terms.plans(tenant_id), plan)
                if clash is not None:
                    raise Conflict(
                        f"{tenant_id} is already on {clash.label} over that time", field="starts_at"
                    )
                uow.terms.add_plan(plan, now)
                if plan.fee_micros:
                    terms, _ = self._terms(uow, tenant_id)
                    cash = uow.ledger.balances([tenant_id]).get(AccountId.tenant_cash(tenant_id), 0)
                    if terms.refuses(cash, plan.fee_micros):
                        raise PaymentRequired(
                            f"the membership fee is {money_text(plan.fee_micros)} and {tenant_id} has "
                            f"{money_text(cash)} in cash; top up first",
                            field="fee_micros",
                        )
                if start <= now:
                    start_plan_now(uow, plan, now)
                uow.commit()
                return plan

        return retrying(work)

    def plans(self, caller: Caller, tenant_id: str | None = None) -> list[Plan]:
        target = target_tenant(caller, tenant_id)
        with self.uow() as uow:
            if uow.tenants.get(target) is None:
                raise NotFound(f"no tenant {target}")
            return uow.terms.plans(target)

    def plan_at(self, uow: UnitOfWork, tenant_id: str, at: datetime) -> Plan | None:
        return plan_in_force(uow.terms.plans(tenant_id), to_epoch_s(at))

    def report_revenue(
        self, caller: Caller, month_text: str, revenue_micros: int, tenant_id: str | None = None
    ) -> tuple[int, str]:
        """A revenue-share tenant reports a month's revenue once; returns (share posted, ledger key)."""
        target = target_tenant(caller, tenant_id)
        try:
            month = Month.parse(month_text)
        except InvoiceError as error:
            raise Invalid(str(error), field="month") from None
        if not 0 <= revenue_micros <= MAX_MICROS:
            raise Invalid(f"must be 0..{MAX_MICROS} micros", field="revenue_micros")
        now = self.clock.now()
        if month.start_s > to_epoch_s(now):
            raise Invalid(f"{month} has not started", field="month")
        key = f"revenue_share:{target}:{month}"

        def work() -> tuple[int, str]:
            with self.uow() as uow:
                if uow.tenants.get(target) is None:
                    raise NotFound(f"no tenant {target}")
                plans = [
                    p
                    for p in uow.terms.plans(target)
                    if p.kind is PlanKind.REVENUE_SHARE
                    and p.starts_s < month.end_s
                    and month.start_s < p.ends_s
                ]
                if not plans:
                    raise Conflict(f"{target} has no revenue-share plan in {month}", field="month")
                plan = max(plans, key=lambda p: (p.starts_s, p.id))
                earlier = uow.terms.revenue_report(target, str(month))
                share = revenue_share_micros(plans, revenue_micros, month.start_s, month.end_s)
                days = (
                    sum(min(p.ends_s, month.end_s) - max(p.starts_s, month.start_s) for p in plans) / 86_400
                )
                month_days = (month.end_s - month.start_s) / 86_400
                if earlier is not None:
                    if earlier != revenue_micros:
                        raise Conflict(
                            f"{month} was already reported as {money_text(earlier)}", field="month"
                        )
                    return share, key
                uow.terms.add_revenue_report(target, str(month), revenue_micros, now)
                if share:
                    post_once(
                        uow,
                        now,
                        key=key,
                        kind=TxKind.REVENUE_SHARE,
                        postings=fee_postings(target, share),
                        ref=str(month),
                        memo=(
                            f"{plan.revenue_share_bp / 100:g}% of {money_text(revenue_micros)} reported, "
                            f"{month}"
                            + (
                                ""
                                if days >= month_days
                                else f", for the {days:g} of {month_days:g} days on the plan"
                            )
                        ),
                    )
                uow.commit()
                return share, key

        return retrying(work)

    # --- grants ------------------------------------------------------------------------------------------

    def expire_grants(self, now: datetime | None = None) -> int:
        """Post what is left of every grant past its expiry (once each); returns the transactions added."""
        now = now or self.clock.now()
        with self.uow() as uow:
            tenants = uow.terms.expired_grant_tenants(now)
        return sum(retrying(lambda t=tenant: self._expire_for(t, now)) for tenant in tenants)

    def _expire_for(self, tenant_id: str, now: datetime) -> int:
        now_s = to_epoch_s(now)
        with self.uow() as uow:
            grants = uow.terms.grants(tenant_id)
            due = [g for g in grants if g.expires_s is not None and g.expires_s <= now_s]
            pending = [g for g in due if uow.ledger.get(f"grant_expiry:{g.id}") is None]
            if not pending:
                return 0
            spends = _grant_spends(uow, tenant_id)
            balance = uow.ledger.balances([tenant_id]).get(AccountId.tenant_grants(tenant_id), 0)
            added = 0
            for grant in sorted(pending, key=lambda g: (g.expires_s or 0, g.id)):
                assert grant.expires_s is not None
                left = grants_left(grants, spends, grant.expires_s).get(grant.id, 0)
                amount = expiry_micros(grant, left, balance)
                if amount == 0:
                    continue
                post_once(
                    uow,
                    now,
                    key=f"grant_expiry:{grant.id}",
                    kind=TxKind.GRANT_EXPIRY,
                    postings=expiry_postings(tenant_id, amount),
                    ref=grant.id,
                    memo=(
                        f"grant {grant.id} expired with {money_text(amount)} of "
                        f"{money_text(grant.amount_micros)} left"
                    ),
                )
                balance -= amount
                added += 1
            uow.commit()
            return added

    def grants(self, caller: Caller, tenant_id: str | None = None) -> list[tuple[Grant, int]]:
        """The tenant's grants with what is left of each now."""
        target = target_tenant(caller, tenant_id)
        now_s = to_epoch_s(self.clock.now())
        with self.uow() as uow:
            grants = uow.terms.grants(target)
            spends = _grant_spends(uow, target)
        left = grants_left(grants, spends, now_s)
        return [
            (g, 0 if g.expires_s is not None and g.expires_s <= now_s else left.get(g.id, 0)) for g in grants
        ]

    # --- payment terms -----------------------------------------------------------------------------------

    def set_terms(self, caller: Caller, tenant_id: str, mode: str, credit_limit_micros: int) -> TermsView:
        require_admin(caller)
        try:
            terms = PaymentTerms(PaymentMode(mode), credit_limit_micros)
        except ValueError:
            raise Invalid("must be prepaid or postpaid", field="mode") from None
        except BillingError as error:
            raise Invalid(str(error), field="credit_limit_micros") from None
        if credit_limit_micros > MAX_MICROS:
            raise Invalid(f"must be at most {MAX_MICROS}", field="credit_limit_micros")
        with self.uow() as uow:
            if uow.tenants.get(tenant_id) is None:
                raise NotFound(f"no tenant {tenant_id}", field="tenant_id")
            uow.terms.set_payment_terms(tenant_id, terms, self.clock.now())
            uow.commit()
        return self.terms(caller, tenant_id)

    def terms(self, caller: Caller, tenant_id: str | None = None) -> TermsView:
        target = target_tenant(caller, tenant_id)
        with self.uow() as uow:
            if uow.tenants.get(target) is None:
                raise NotFound(f"no tenant {target}")
            terms, warned = self._terms(uow, target)
        stops = None if warned is None else warned + timedelta(seconds=self.grace_s)
        return TermsView(target, terms, warned, stops)

    def _terms(self, uow: UnitOfWork, tenant_id: str) -> tuple[PaymentTerms, datetime | None]:
        found = uow.terms.payment_terms(tenant_id)
        return found if found is not None else (self.default_terms, None)

    def terms_or_default(self, found: PaymentTerms | None) -> PaymentTerms:
        """`found` (a tenant's own terms, as read), or the platform default when it has none."""
        return self.default_terms if found is None else found

    def refuses(self, uow: UnitOfWork, tenant_id: str, available_micros: int, charge_micros: int) -> bool:
        return self._terms(uow, tenant_id)[0].refuses(available_micros, charge_micros)

    def enforce(self, now: datetime | None = None) -> dict[str, FundsAction]:
        """Warn tenants below their floor and stop the running rentals of those past the grace period."""
        now = now or self.clock.now()
        now_s = to_epoch_s(now)
        actions: dict[str, FundsAction] = {}
        with self.uow() as uow:
            by_tenant = uow.rentals.live_by_tenant()  # ids only: rentals are read for tenants below the floor
            for tenant_id in uow.terms.warned_tenants():  # to clear a warning once credit arrives
                by_tenant.setdefault(tenant_id, [])
            balances = uow.ledger.balances(by_tenant, (AccountKind.TENANT_CASH, AccountKind.TENANT_GRANTS))
            for tenant_id, rental_ids in sorted(by_tenant.items()):
                terms, warned = self._terms(uow, tenant_id)
                available = balances.get(AccountId.tenant_cash(tenant_id), 0) + balances.get(
                    AccountId(AccountKind.TENANT_GRANTS, tenant_id), 0
                )
                action = funds_action(
                    terms, available, None if warned is None else to_epoch_s(warned), now_s, int(self.grace_s)
                )
                actions[tenant_id] = action
                rentals = []
                if action in (FundsAction.WARN, FundsAction.STOP) and rental_ids:
                    rentals = [r for r in uow.rentals.by_ids(rental_ids) if r.state in LIVE_STATES]
                if action is FundsAction.OK and warned is not None:
                    uow.terms.set_warned(tenant_id, None, now, terms)
                elif action is FundsAction.WARN and rentals:
                    uow.terms.set_warned(tenant_id, now, now, terms)
                    message = (
                        f"balance {money_text(available)} is below the floor "
                        f"{money_text(terms.floor_micros)}; running rentals stop in {self.grace_s:g} s "
                        "unless credit arrives"
                    )
                    for rental in rentals:
                        uow.rentals.add_event(
                            rental.id, RentalEvent(now, "low_balance", "low_balance", message)
                        )
                elif action is FundsAction.STOP and rentals:
                    for rental in rentals:
                        if rental.state not in ("stopping", "preempting"):
                            self.stop_rental(
                                uow, rental, now, "stopped: balance below the floor after the grace"
                            )
                    log.warning("stopped %d rentals of %s: balance %d", len(rentals), tenant_id, available)
            uow.commit()
        return actions


def _grant_spends(uow: UnitOfWork, tenant_id: str) -> list[tuple[int, int]]:
    """(at_s, micros) of everything taken from the tenant's grants, expiries excepted."""
    account = AccountId.tenant_grants(tenant_id)
    return [
        (tx.at_s, -posting.amount_micros)
        for tx in uow.ledger.transactions(tenant_id)
        if tx.kind is not TxKind.GRANT_EXPIRY
        for posting in tx.postings
        if posting.account == account and posting.amount_micros < 0
    ]


def _plan_field(message: str) -> str:
    for name in ("discount_bp", "revenue_share", "fee_micros", "ends_s"):
        if name in message:
            return {"revenue_share": "revenue_share_bp", "ends_s": "ends_at"}.get(name, name)
    return "kind"
