"""Budget alerts: each limit's use in the current UTC day and month, the thresholds it passes, once each."""

from __future__ import annotations

from datetime import UTC, datetime

from hypothesis import given
from hypothesis import strategies as st

from suanli.domain.budget_alerts import ALERT_PCTS, LimitUse, limit_uses, new_alerts, own_budget_spent
from suanli.domain.quotas import Spent, TenantLimits

NOW = datetime(2026, 12, 3, 23, 59, tzinfo=UTC).timestamp()  # a fake clock: the last minute of a UTC day


def test_each_limit_counts_the_spend_of_its_own_period() -> None:
    limits = TenantLimits(daily_cap_micros=100, budget_monthly_micros=1_000)
    uses = limit_uses(limits, Spent(day_micros=80, month_micros=500), NOW)
    assert uses == [
        LimitUse("daily spend cap", "2026-12-03", 100, 80),
        LimitUse("own monthly budget", "2026-12", 1_000, 500),
    ]
    assert [u.reached_pct for u in uses] == [80, None]
    cap = LimitUse("daily spend cap", "2026-12-03", 3_000_000, 2_633_742)
    assert cap.message(80) == "80% of the daily spend cap used: 2.6337 of 3.0000 spent today (2026-12-03 UTC)"
    assert "spent this month (2026-12 UTC)" in uses[1].message(100)


def test_a_threshold_is_sent_once_and_the_highest_passed_speaks_for_the_lower() -> None:
    limits = TenantLimits(budget_daily_micros=1_000)
    nearly = limit_uses(limits, Spent(day_micros=850), NOW)
    first = new_alerts(nearly, set())
    assert [(u.limit, pct) for u, pct in first] == [("own daily budget", 80)]
    sent = {("own daily budget", "2026-12-03", 80)}
    assert new_alerts(limit_uses(limits, Spent(day_micros=900), NOW), sent) == []  # still 80: sent
    over = limit_uses(limits, Spent(day_micros=1_000), NOW)  # exactly the budget is 100%
    assert [pct for _, pct in new_alerts(over, sent)] == [100]
    jump = new_alerts(over, set())  # from nothing to past it in one charge: 100 alone
    assert [pct for _, pct in jump] == [100]
    tomorrow = datetime(2026, 12, 4, 0, 1, tzinfo=UTC).timestamp()  # a new day: sent again
    assert [pct for _, pct in new_alerts(limit_uses(limits, Spent(day_micros=850), tomorrow), sent)] == [80]


def test_a_zero_limit_alerts_only_once_something_is_spent() -> None:
    limits = TenantLimits(budget_monthly_micros=0)
    assert new_alerts(limit_uses(limits, Spent(), NOW), set()) == []
    spent = limit_uses(limits, Spent(month_micros=1), NOW)
    assert [pct for _, pct in new_alerts(spent, set())] == [100] and spent[0].used_pct == 100.0


def test_only_the_tenants_own_budget_stops_its_rentals() -> None:
    caps_spent = limit_uses(TenantLimits(daily_cap_micros=10, monthly_cap_micros=10), Spent(10, 10), NOW)
    assert own_budget_spent(caps_spent) is None  # the operator's caps hold new rentals only
    budget = TenantLimits(budget_daily_micros=100, budget_monthly_micros=50)
    assert own_budget_spent(limit_uses(budget, Spent(60, 60), NOW)).limit == "own monthly budget"
    assert own_budget_spent(limit_uses(budget, Spent(49, 49), NOW)) is None


@given(
    limit=st.integers(min_value=1, max_value=10**12),
    charges=st.lists(st.integers(min_value=0, max_value=10**11), max_size=30),
)
def test_spend_growing_charge_by_charge_sends_each_threshold_at_most_once_in_order(
    limit: int, charges: list[int]
) -> None:
    """As the meter's charges add up, the alerts sent are distinct, rising, and end at the share reached."""
    limits, spent, sent, order = TenantLimits(budget_monthly_micros=limit), 0, set(), []
    for charge in charges:
        spent += charge
        for use, pct in new_alerts(limit_uses(limits, Spent(month_micros=spent), NOW), sent):
            sent.add((use.limit, use.period, pct))
            order.append(pct)
    assert order == sorted(set(order))
    reached = [pct for pct in ALERT_PCTS if spent * 100 >= pct * limit and spent > 0]
    assert (order[-1] if order else None) == (max(reached) if reached else None)
