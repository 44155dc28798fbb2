"""Budget alerts, run by the meter loop after each charge: a tenant whose spend this UTC day or month reaches
80% or 100% of a limit (the operator's caps, its own budget) gets a `budget` event on its live rentals (on its
newest rental when none is live), once per limit, threshold and period, so its webhooks and `suanli show`
say so; and when it asked (`stops_running`), its running rentals stop once its own budget is spent.

A limit holds new rentals at admission (`domain.quotas`); this is what tells the tenant before that, and what
stops the ones already running. The spend is what the meter has charged, so a stop comes up to one meter
interval after the budget is reached.
"""

from __future__ import annotations

import logging
from datetime import datetime

from suanli.app.limits import spent_now
from suanli.app.plans import StopRental
from suanli.app.ports import Clock, UnitOfWork, UnitOfWorkFactory
from suanli.app.records import LIVE_STATES, RentalEvent
from suanli.domain.billing.money import money_text
from suanli.domain.budget_alerts import LimitUse, limit_uses, new_alerts, own_budget_spent
from suanli.domain.quotas import TenantLimits

log = logging.getLogger(__name__)
STOPPING_STATES = ("stopping", "preempting")


def _has_spend_limit(limits: TenantLimits) -> bool:
    return any(
        cap is not None
        for cap in (
            limits.daily_cap_micros,
            limits.monthly_cap_micros,
            limits.budget_daily_micros,
            limits.budget_monthly_micros,
        )
    )


class BudgetAlerts:
    def __init__(self, uow: UnitOfWorkFactory, clock: Clock, stop_rental: StopRental) -> None:
        self.uow, self.clock, self.stop_rental = uow, clock, stop_rental

    def check(self, now: datetime | None = None) -> dict[str, list[str]]:
        """Send the alerts due and stop what a spent budget stops; per tenant, the messages sent."""
        now = now or self.clock.now()
        sent: dict[str, list[str]] = {}
        with self.uow() as uow:
            limited = {t: lim for t, lim in uow.terms.limits().items() if _has_spend_limit(lim)}
            if not limited:
                return sent
            spent = spent_now(uow, sorted(limited), now.timestamp())
            for tenant_id, limits in sorted(limited.items()):
                uses = limit_uses(limits, spent[tenant_id], now.timestamp())
                messages = self._alert(uow, tenant_id, uses, now)
                if limits.budget_stops_running:
                    reached = own_budget_spent(uses)
                    if reached is not None:
                        messages += self._stop_running(uow, tenant_id, reached, now)
                if messages:
                    sent[tenant_id] = messages
            uow.commit()
        return sent

    def _alert(self, uow: UnitOfWork, tenant_id: str, uses: list[LimitUse], now: datetime) -> list[str]:
        already = uow.terms.budget_alerts_sent(tenant_id, sorted({u.period for u in uses}))
        due = new_alerts(uses, already)
        if not due:
            return []
        live = uow.rentals.live_by_tenant(tenant_id).get(tenant_id, [])
        targets = live or [r.id for r in uow.rentals.list(tenant_id, 1)]
        messages = []
        for use, pct in due:
            uow.terms.add_budget_alert(tenant_id, use.limit, use.period, pct, use.spent_micros, now)
            message = use.message(pct)
            for rental_id in targets:
                uow.rentals.add_event(rental_id, RentalEvent(now, "budget", "spend_cap", message))
            messages.append(message)
        return messages

    def _stop_running(self, uow: UnitOfWork, tenant_id: str, reached: LimitUse, now: datetime) -> list[str]:
        live = uow.rentals.live_by_tenant(tenant_id).get(tenant_id, [])
        rentals = [
            r
            for r in uow.rentals.by_ids(live, lock=True)
            if r.state in LIVE_STATES and r.state not in STOPPING_STATES
        ]
        if not rentals:
            return []
        why = (
            f"because the {reached.limit} is spent ({money_text(reached.spent_micros)} of "
            f"{money_text(reached.limit_micros)}, "
            f"{reached.period} UTC) and the budget stops running rentals"
        )
        for rental in rentals:
            self.stop_rental(uow, rental, now, why)
        log.info("stopped %d rentals of %s: %s spent", len(rentals), tenant_id, reached.limit)
        return [f"stopped {', '.join(r.id for r in rentals)} {why}"]
