"""Budget alerts: how much of each spend limit a tenant has used in the current UTC day and calendar month,
and which alert thresholds that passes, so it is told once per period as it nears a limit, and (if it
asked) its running rentals stop once its own budget is spent.

Pure: the spend so far and `now` are arguments. A limit is one of a tenant's four (the operator's daily and
monthly caps, its own daily and monthly budget); a threshold is a share of it (`ALERT_PCTS`). A limit of 0
with nothing spent alerts nothing: there is nothing to tell.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from datetime import UTC, datetime

from suanli.domain.billing.money import money_text
from suanli.domain.quotas import Spent, TenantLimits

ALERT_PCTS = (80, 100)  # the shares of a limit a tenant is told about, each once per period
OWN_BUDGETS = ("own daily budget", "own monthly budget")


@dataclass(frozen=True, slots=True)
class LimitUse:
    """One spend limit in the current period: `period` is the UTC day (`2026-12-03`) or month (`2026-12`)."""

    limit: str  # "daily spend cap", "monthly spend cap", "own daily budget", "own monthly budget"
    period: str
    limit_micros: int
    spent_micros: int

    @property
    def used_pct(self) -> float:
        """Share of the limit spent, in % (a limit of 0: 100 once anything is spent, else 0)."""
        if self.limit_micros == 0:
            return 100.0 if self.spent_micros > 0 else 0.0
        return 100.0 * self.spent_micros / self.limit_micros

    @property
    def reached_pct(self) -> int | None:
        """The highest alert threshold reached, or None."""
        if self.spent_micros <= 0:
            return None
        reached = [pct for pct in ALERT_PCTS if self.spent_micros * 100 >= pct * self.limit_micros]
        return max(reached, default=None)

    def message(self, pct: int) -> str:
        when = "today" if "daily" in self.limit else "this month"
        return (
            f"{pct}% of the {self.limit} used: {money_text(self.spent_micros)} of "
            f"{money_text(self.limit_micros)} spent "
            f"{when} ({self.period} UTC)"
        )


def limit_uses(limits: TenantLimits, spent: Spent, now_s: float) -> list[LimitUse]:
    """Every limit the tenant has, with what it spent in the period that contains `now_s`."""
    moment = datetime.fromtimestamp(now_s, UTC)
    day, month = f"{moment:%Y-%m-%d}", f"{moment:%Y-%m}"
    candidates = (
        ("daily spend cap", limits.daily_cap_micros, day, spent.day_micros),
        ("monthly spend cap", limits.monthly_cap_micros, month, spent.month_micros),
        ("own daily budget", limits.budget_daily_micros, day, spent.day_micros),
        ("own monthly budget", limits.budget_monthly_micros, month, spent.month_micros),
    )
    return [LimitUse(name, period, cap, used) for name, cap, period, used in candidates if cap is not None]


def new_alerts(uses: list[LimitUse], sent: Collection[tuple[str, str, int]]) -> list[tuple[LimitUse, int]]:
    """(limit, threshold) for each limit whose highest reached threshold was not yet sent this period.

    `sent` holds (limit, period, threshold) already sent. A lower threshold passed in the same step as a
    higher one is not sent on its own: the higher one says more."""
    found = []
    for use in uses:
        pct = use.reached_pct
        if pct is not None and (use.limit, use.period, pct) not in sent:
            found.append((use, pct))
    return found


def own_budget_spent(uses: list[LimitUse]) -> LimitUse | None:
    """The tenant's own budget (daily first) that its spend has reached, or None."""
    return next((u for u in uses if u.limit in OWN_BUDGETS and u.reached_pct == 100), None)
