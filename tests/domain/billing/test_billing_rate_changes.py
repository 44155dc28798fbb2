"""Rate segments: a spot rental that follows its pool's price is charged the exact sum of rate x seconds over
its segments, rounded once; the 60-s minimum's missing seconds at the first segment's rate; re-runs post
nothing; the hysteresis and the running spot rate (capped at the bid, never raising below the floor)."""

from __future__ import annotations

from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from suanli.domain.billing.errors import BillingError
from suanli.domain.billing.ledger import Journal, TxKind, check_journal, grant_postings
from suanli.domain.billing.meter import RentalUsage, meter_run, posted_charges
from suanli.domain.billing.money import charge_micros, round_half_up
from suanli.domain.billing.pricebook import (
    ListPrice,
    PriceBook,
    SpotFloor,
    rate_moved,
    running_spot_rate,
    spot_formula,
)
from suanli.domain.request import Tier

T0 = 1_796_083_200
RATE = st.integers(min_value=0, max_value=50_000_000)


def usage(rate: int, changes: tuple[tuple[int, int], ...] = (), ended_s: int | None = None) -> RentalUsage:
    return RentalUsage("r1", "t1", "p1", rate, T0, ended_s, rate_changes=changes)


@st.composite
def segmented(draw: st.DrawFn) -> RentalUsage:
    """A rental with 0..6 rate changes at distinct instants around and after its start, maybe ended."""
    offsets = draw(st.lists(st.integers(min_value=-120, max_value=20_000), max_size=6, unique=True))
    changes = tuple((T0 + offset, draw(RATE)) for offset in sorted(offsets))
    ended = draw(st.none() | st.integers(min_value=0, max_value=25_000))
    return usage(draw(RATE), changes, None if ended is None else T0 + ended)


def exact(u: RentalUsage, now_s: int) -> Fraction:
    """Second by second, in exact fractions: the segments' sum plus the minimum's missing seconds at the
    first rate, and never less than it was at an earlier second (a charge is never taken back)."""
    if now_s < u.started_s:
        return Fraction(0)
    end = now_s if u.ended_s is None else min(now_s, u.ended_s)
    best, total = Fraction(0), Fraction(0)
    for t in range(u.started_s, end + 1):
        short = max(0, u.minimum_s - (t - u.started_s))
        best = max(best, total + Fraction(u.rate_at(u.started_s) * short, 3600))
        total += Fraction(u.rate_at(t), 3600)
    return best


def test_two_segments_are_charged_from_the_exact_sum_rounded_once() -> None:
    u = usage(1_000_001, ((T0 + 100, 2_000_003),))
    # 100 s at the first rate, 50 s at the second: one rounding of the sum, not one per segment
    assert u.charge_to_date(T0 + 150) == round_half_up(1_000_001 * 100 + 2_000_003 * 50, 3600)
    assert u.rate_at(T0 + 99) == 1_000_001 and u.rate_at(T0 + 100) == 2_000_003


def test_the_minimum_bills_the_missing_seconds_at_the_first_segment_rate() -> None:
    u = usage(3_600_000, ((T0 + 10, 7_200_000),), ended_s=T0 + 20)
    # 10 s at 3.6/h, 10 s at 7.2/h, then the 40 s the 60-s minimum adds at the first rate
    assert u.charge_to_date(T0 + 1000) == round_half_up(3_600_000 * 50 + 7_200_000 * 10, 3600)
    at_start = usage(3_600_000, ((T0, 7_200_000),), ended_s=T0 + 5)
    assert at_start.charge_to_date(T0 + 5) == charge_micros(7_200_000, 60)  # the change at the start is first


def test_a_rate_drop_inside_the_first_minute_never_lowers_the_charge() -> None:
    u = usage(3_600_000, ((T0 + 10, 0),))
    # at the start 60 s at the first rate are due; the drop to 0 after 10 s does not take any of it back
    assert [u.charge_to_date(T0 + s) for s in (0, 10, 30, 59, 60, 600)] == [60_000] * 6
    up_down = usage(3_600_000, ((T0 + 10, 36_000_000), (T0 + 20, 0)))
    # 10 s at 1/s, 10 s at 10/s, then 40 s missing at 1/s: 150 at T0+20, held from then on
    assert [up_down.charge_to_date(T0 + s) for s in (0, 10, 20, 40, 100)] == [
        60_000,
        60_000,
        150_000,
        150_000,
        150_000,
    ]


def test_changes_before_the_start_and_after_the_end_are_taken_as_in_force() -> None:
    u = usage(1, ((T0 - 50, 5_000_000), (T0 + 500, 9_000_000)), ended_s=T0 + 300)
    assert u.charge_to_date(T0 + 10_000) == charge_micros(5_000_000, 300)


def test_unsorted_or_negative_changes_are_refused() -> None:
    with pytest.raises(BillingError, match="sorted"):
        usage(1, ((T0 + 5, 1), (T0 + 5, 2)))
    with pytest.raises(BillingError, match="0 or more"):
        usage(1, ((T0 + 5, -1),))


@settings(max_examples=300, deadline=None)
@given(rate=RATE, offsets=st.lists(st.integers(min_value=-100, max_value=9_000), max_size=5, unique=True))
def test_a_constant_rate_in_segments_equals_the_plain_formula(rate: int, offsets: list[int]) -> None:
    plain = usage(rate)
    split = usage(rate, tuple((T0 + o, rate) for o in sorted(offsets)))
    for now in (T0 - 1, T0, T0 + 59, T0 + 60, T0 + 61, T0 + 3_599, T0 + 10_000):
        assert (
            split.charge_to_date(now)
            == plain.charge_to_date(now)
            == charge_micros(rate, plain.billable_s(now))
        )


@settings(max_examples=200, deadline=None)
@given(u=segmented(), nows=st.lists(st.integers(min_value=-100, max_value=30_000), min_size=1, max_size=8))
def test_charges_are_monotone_in_now_and_within_half_a_micro_of_the_exact_sum(
    u: RentalUsage, nows: list[int]
) -> None:
    previous = 0
    for now in sorted(T0 + n for n in nows):
        charged = u.charge_to_date(now)
        assert charged >= previous
        previous = charged
        assert abs(charged - exact(u, now)) <= Fraction(1, 2)


@settings(max_examples=100, deadline=None)
@given(u=segmented(), nows=st.lists(st.integers(min_value=0, max_value=30_000), min_size=1, max_size=5))
def test_meter_runs_post_the_cumulative_charge_and_a_rerun_posts_nothing(
    u: RentalUsage, nows: list[int]
) -> None:
    journal, _ = Journal().append(key="g", kind=TxKind.GRANT, at_s=T0, postings=grant_postings("t1", 10**6))
    last = T0
    for now in sorted(T0 + n for n in nows):
        journal, _ = meter_run(journal, [u], now, 1500)
        again, added = meter_run(journal, [u], now, 1500)
        assert added == () and again == journal
        last = now
    posted = posted_charges(journal).get("r1")
    total = 0 if posted is None else posted.micros
    assert total == u.charge_to_date(last)
    assert abs(total - exact(u, last)) <= 1
    check_journal(journal)  # balanced and chained, grants spent first then cash


def test_the_hysteresis_takes_a_new_rate_only_when_it_moved_one_percent() -> None:
    assert not rate_moved(1_000_000, 1_000_000)
    assert not rate_moved(1_000_000, 1_009_999) and not rate_moved(1_000_000, 990_001)
    assert rate_moved(1_000_000, 1_010_000) and rate_moved(1_000_000, 990_000)
    assert rate_moved(0, 1) and not rate_moved(0, 0)


def test_a_running_spot_rental_pays_the_spot_price_capped_at_its_bid_even_below_a_raised_floor() -> None:
    book = PriceBook(
        [ListPrice("H100", "*", Tier.ON_DEMAND, 3_000_000, 0, "list")],
        (),
        [SpotFloor("H100", "*", 1_000_000, 0, "floor"), SpotFloor("H100", "*", 2_000_000, 100, "raised")],
    )
    assert running_spot_rate(book, "H100", "x", 0, None, 10) == 1_000_000
    assert running_spot_rate(book, "H100", "x", 800, None, 10) == spot_formula(1_000_000, 3_000_000, 800)
    assert running_spot_rate(book, "H100", "x", 800, 1_500_000, 10) == 1_500_000
    with pytest.raises(BillingError):  # a new rental with that bid waits (bid_below_floor) ...
        book.spot_rate("H100", "x", 0, 1_500_000, 200)
    assert running_spot_rate(book, "H100", "x", 0, 1_500_000, 200) == 1_500_000  # ... a running one pays it


def test_a_gap_in_the_queue_bills_nothing_and_the_rate_then_in_force_resumes_after_it() -> None:
    gapped = RentalUsage(
        "r1", "t1", "p1", 1_000_001, T0, rate_changes=((T0 + 500, 2_000_003),), gaps=((T0 + 100, T0 + 1000),)
    )
    # 100 s at the first rate, nothing for 900 s (the rate change inside the gap resumes at its end), 100 s
    assert gapped.charge_to_date(T0 + 1100) == round_half_up(1_000_001 * 100 + 2_000_003 * 100, 3600)
    assert gapped.billable_s(T0 + 1100) == 200
    assert gapped.charge_to_date(T0 + 600) == gapped.charge_to_date(T0 + 100)  # nothing while it waits
    plain = RentalUsage("r1", "t1", "p1", 1_000_001, T0, gaps=((T0 + 100, T0 + 1000),))
    assert plain.charge_to_date(T0 + 1100) == charge_micros(1_000_001, 200)


def test_gaps_must_be_sorted_disjoint_and_not_empty() -> None:
    with pytest.raises(BillingError):
        RentalUsage("r1", "t1", "p1", 1, T0, gaps=((T0 + 10, T0 + 10),))
    with pytest.raises(BillingError):
        RentalUsage("r1", "t1", "p1", 1, T0, gaps=((T0 + 10, T0 + 20), (T0 + 15, T0 + 30)))
