"""Plans, grants with expiry, compute futures money and payment terms (pure)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st

from suanli.domain.billing.errors import BillingError
from suanli.domain.billing.ledger import Transaction, TxKind
from suanli.domain.billing.plans import (
    FundsAction,
    Grant,
    PaymentMode,
    PaymentTerms,
    Plan,
    PlanKind,
    a_year_after,
    contract_postings,
    contract_price_micros,
    expiry_micros,
    fee_postings,
    funds_action,
    grants_left,
    plan_discounts,
    plan_in_force,
    recognized_micros,
    revenue_share_micros,
    transfer_postings,
)
from suanli.domain.request import Tier

YEAR = 365 * 86_400
MONTH = 30 * 86_400


def membership(starts_s: int = 0, discount_bp: int = 1000) -> Plan:
    return Plan(
        "pln_m", "ten_a", PlanKind.MEMBERSHIP, discount_bp, 1_200_000_000, 0, starts_s, starts_s + YEAR
    )


def test_membership_discounts_on_demand_only():
    plan = membership()
    assert [d.bp for d in plan_discounts(plan, Tier.ON_DEMAND)] == [1000]
    assert plan_discounts(plan, Tier.SPOT) == ()
    assert plan_discounts(plan, Tier.RESERVED) == ()
    assert plan_discounts(None, Tier.ON_DEMAND) == ()


def test_revenue_share_lowers_on_demand_and_reserved_and_takes_its_share():
    plan = Plan("pln_r", "ten_a", PlanKind.REVENUE_SHARE, 3000, 0, 500, 0, YEAR)
    assert plan_discounts(plan, Tier.RESERVED)[0].bp == 3000
    assert plan_discounts(plan, Tier.SPOT) == ()
    assert revenue_share_micros([plan], 10_000_000, 0, MONTH) == 500_000
    assert revenue_share_micros([plan], 1, 0, MONTH) == 0  # 0.05 micros rounds half up to 0
    with pytest.raises(BillingError):
        revenue_share_micros([plan], -1, 0, MONTH)


def test_a_revenue_share_plan_takes_its_share_of_the_part_of_the_month_it_was_in_force():
    half = MONTH // 2
    from_mid_month = Plan("pln_r", "ten_a", PlanKind.REVENUE_SHARE, 0, 0, 500, half, YEAR)
    assert revenue_share_micros([from_mid_month], 10_000_000, 0, MONTH) == 250_000
    then = Plan("pln_s", "ten_a", PlanKind.REVENUE_SHARE, 0, 0, 1000, half, YEAR)
    before = Plan("pln_q", "ten_a", PlanKind.REVENUE_SHARE, 0, 0, 500, -YEAR, half)
    assert revenue_share_micros([before, then], 10_000_000, 0, MONTH) == 250_000 + 500_000
    assert revenue_share_micros([membership(0), before], 10_000_000, 0, MONTH) == 250_000
    assert revenue_share_micros([before], 10_000_000, MONTH, 2 * MONTH) == 0


def test_plan_in_force_is_the_latest_started():
    first = membership(0)
    later = Plan("pln_z", "ten_a", PlanKind.REVENUE_SHARE, 0, 0, 100, 100, 200)
    assert plan_in_force([first, later], 50) is first
    assert plan_in_force([first, later], 150) is later
    assert plan_in_force([first, later], YEAR) is None


@pytest.mark.parametrize(
    "kwargs",
    [
        {"discount_bp": 10_001},
        {"fee_micros": -1},
        {"revenue_share_bp": 5},  # a membership has no revenue share
    ],
)
def test_bad_plans_are_refused(kwargs):
    values = {"discount_bp": 0, "fee_micros": 0, "revenue_share_bp": 0} | kwargs
    with pytest.raises(BillingError):
        Plan("p", "t", PlanKind.MEMBERSHIP, starts_s=0, ends_s=10, **values)


def test_fee_balances():
    tx = Transaction("k", TxKind.MEMBERSHIP, 0, fee_postings("ten_a", 5))
    assert sum(p.amount_micros for p in tx.postings) == 0


def test_spend_goes_to_the_grant_that_expires_first_and_the_rest_expires():
    hackathon = Grant("g1", "t", 100, 0, expires_s=50)
    forever = Grant("g2", "t", 100, 0)
    left = grants_left([forever, hackathon], [(10, 30)], at_s=60)
    assert left == {"g1": 70, "g2": 100}
    # after g1's expiry spends go to g2 only
    assert grants_left([forever, hackathon], [(10, 30), (55, 40)], at_s=60) == {"g1": 70, "g2": 60}
    assert expiry_micros(hackathon, 70, grant_balance_micros=50) == 50  # capped at the balance


grant_lists = st.lists(
    st.tuples(st.integers(1, 1000), st.integers(0, 100), st.one_of(st.none(), st.integers(1, 100))),
    min_size=1,
    max_size=5,
)


@given(grant_lists, st.lists(st.tuples(st.integers(0, 200), st.integers(1, 500)), max_size=8))
def test_grants_left_never_negative_and_never_more_than_granted(raw, spends):
    grants = [
        Grant(f"g{i}", "t", amount, start, None if life is None else start + life)
        for i, (amount, start, life) in enumerate(raw)
    ]
    left = grants_left(grants, spends, at_s=1000)
    for g in grants:
        assert 0 <= left[g.id] <= g.amount_micros
    live_total = sum(g.amount_micros for g in grants)
    assert live_total - sum(left.values()) <= sum(m for _, m in spends)


def test_contract_price_and_recognition():
    price = contract_price_micros(2_000_000, 8, 0, 3600 * 24)
    assert price == 2_000_000 * 8 * 24
    assert recognized_micros(price, 0, 86_400, 0) == 0
    assert recognized_micros(price, 0, 86_400, 43_200) == price // 2
    assert recognized_micros(price, 0, 86_400, 10**9) == price
    assert sum(p.amount_micros for p in contract_postings("t", "c", price)) == 0
    assert sum(p.amount_micros for p in transfer_postings("b", "s", 7)) == 0


@given(st.integers(0, 10**12), st.integers(0, 10**6), st.integers(1, 10**6), st.integers(-10, 2 * 10**6))
def test_recognition_is_monotone_and_bounded(price, start, length, at):
    end = start + length
    now = recognized_micros(price, start, end, at)
    assert 0 <= now <= price
    assert recognized_micros(price, start, end, at + 1) >= now


def test_payment_terms_and_funds_actions():
    prepaid = PaymentTerms()
    postpaid = PaymentTerms(PaymentMode.POSTPAID, 1_000)
    assert prepaid.refuses(available_micros=50, new_charge_micros=51)
    assert not postpaid.refuses(available_micros=50, new_charge_micros=1_050)
    assert postpaid.refuses(available_micros=50, new_charge_micros=1_051)
    with pytest.raises(BillingError):
        PaymentTerms(PaymentMode.PREPAID, 5)
    assert funds_action(prepaid, 0, None, 100, 60) is FundsAction.OK
    assert funds_action(prepaid, -1, None, 100, 60) is FundsAction.WARN
    assert funds_action(prepaid, -1, 50, 100, 60) is FundsAction.WAIT
    assert funds_action(prepaid, -1, 40, 100, 60) is FundsAction.STOP
    assert funds_action(postpaid, -999, None, 100, 60) is FundsAction.OK


@pytest.mark.parametrize(
    ("start", "end"),
    [
        (datetime(2028, 1, 1, tzinfo=UTC), datetime(2029, 1, 1, tzinfo=UTC)),  # 366 days: a leap year
        (datetime(2027, 12, 15, 12, tzinfo=UTC), datetime(2028, 12, 15, 12, tzinfo=UTC)),  # across Feb 29
        (datetime(2026, 11, 2, tzinfo=UTC), datetime(2027, 11, 2, tzinfo=UTC)),  # 365 days
        (
            datetime(2028, 2, 29, 8, 30, tzinfo=UTC),
            datetime(2029, 2, 28, 8, 30, tzinfo=UTC),
        ),  # as relativedelta
        (datetime(2027, 2, 28, tzinfo=UTC), datetime(2028, 2, 28, tzinfo=UTC)),
    ],
    ids=["leap-year", "across-feb-29", "common-year", "from-feb-29", "feb-28"],
)
def test_a_plan_year_is_the_same_month_and_day_next_year(start: datetime, end: datetime) -> None:
    """A plan without an end runs a calendar year; 365 days ended a year holding a Feb 29 a day early."""
    assert a_year_after(start) == end
