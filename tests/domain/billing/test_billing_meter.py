"""Meter: cumulative per-second charges, 60-s minimum, idempotent re-runs, grants first, provider split."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta, timezone
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from suanli.domain.billing.errors import BillingError
from suanli.domain.billing.ledger import (
    AccountId,
    AccountKind,
    Journal,
    TxKind,
    check_journal,
    grant_postings,
)
from suanli.domain.billing.meter import (
    RentalUsage,
    charge_postings,
    meter_run,
    posted_charges,
    split_grants,
    split_provider,
)
from suanli.domain.billing.money import charge_micros, to_epoch_s

T0 = 1_796_083_200
COMMISSION_BP = 1500


@pytest.mark.parametrize(
    ("now_s", "ended_s", "minimum_s", "expected"),
    [
        pytest.param(T0 - 5, None, 60, 0, id="not-started"),
        pytest.param(T0, None, 60, 60, id="minimum-at-start"),
        pytest.param(T0 + 59, None, 60, 60, id="minimum-before-a-minute"),
        pytest.param(T0 + 61, None, 60, 61, id="per-second-after"),
        pytest.param(T0 + 5400, None, 60, 5400, id="ninety-minutes"),
        pytest.param(T0 + 5400, T0 + 10, 60, 60, id="ended-early-pays-the-minimum"),
        pytest.param(T0 + 5400, T0 + 100, 60, 100, id="ended"),
        pytest.param(T0 + 50, T0 + 100, 60, 60, id="deadline-in-the-future"),
        pytest.param(T0 + 10, None, 0, 10, id="no-minimum"),
    ],
)
def test_billable_seconds(now_s: int, ended_s: int | None, minimum_s: int, expected: int) -> None:
    usage = RentalUsage("rnt_1", "ten_a", "prov_1", 3_600_000, T0, ended_s, minimum_s)
    assert usage.billable_s(now_s) == expected


@pytest.mark.parametrize(
    ("rate", "seconds", "expected"),
    [
        pytest.param(3_600_000, 1, 1_000, id="exact"),
        pytest.param(1, 1799, 0, id="below-half"),
        pytest.param(1, 1800, 1, id="half-rounds-up"),
        pytest.param(2_500_000, 61, 42_361, id="h100-61s"),  # 42361.11
        pytest.param(0, 10_000, 0, id="free"),
    ],
)
def test_one_rounding_rule_half_up(rate: int, seconds: int, expected: int) -> None:
    assert charge_micros(rate, seconds) == expected


def test_charge_delta_posts_only_the_difference_and_never_goes_negative() -> None:
    usage = RentalUsage("rnt_1", "ten_a", "prov_1", 2_500_000, T0)
    assert usage.charge_delta(0, T0 + 61) == charge_micros(2_500_000, 61)
    posted = usage.charge_to_date(T0 + 61)
    assert usage.charge_delta(posted, T0 + 61) == 0
    assert usage.charge_delta(posted, T0 + 30) == 0  # a stale clock posts nothing
    assert usage.charge_delta(posted, T0 + 62) == charge_micros(2_500_000, 62) - posted


@given(amount=st.integers(0, 10**12), grants=st.integers(-(10**9), 10**12))
def test_grants_are_spent_before_cash(amount: int, grants: int) -> None:
    from_grants, from_cash = split_grants(amount, grants)
    assert from_grants + from_cash == amount
    assert 0 <= from_grants <= max(0, grants)
    assert from_cash == 0 or from_grants == max(0, grants)


@given(amount=st.integers(0, 10**12), commission_bp=st.integers(0, 10_000))
def test_provider_split_sums_exactly_with_the_remainder_to_the_platform(
    amount: int, commission_bp: int
) -> None:
    provider, platform = split_provider(amount, commission_bp)
    assert provider + platform == amount
    assert provider >= 0 and platform >= 0
    assert provider * 10_000 <= amount * (10_000 - commission_bp) < (provider + 1) * 10_000


def test_a_commission_outside_0_to_100_percent_is_refused() -> None:
    with pytest.raises(BillingError):
        split_provider(100, 10_001)


def test_a_charge_takes_grants_then_cash_and_pays_provider_and_platform() -> None:
    usage = RentalUsage("rnt_1", "ten_a", "prov_1", 3_600_000, T0)
    postings = {p.account: p.amount_micros for p in charge_postings(usage, 1_000, 300, COMMISSION_BP)}
    assert postings == {
        AccountId.tenant_grants("ten_a"): -300,
        AccountId.tenant_cash("ten_a"): -700,
        AccountId.provider_payable("prov_1"): 850,
        AccountId.platform_revenue(): 150,
    }


def test_worked_example_two_h100_for_ninety_minutes_with_a_grant() -> None:
    journal, _ = Journal().append(
        key="grant:1", kind=TxKind.GRANT, at_s=T0, postings=grant_postings("ten_a", 1_000_000)
    )
    usage = RentalUsage("rnt_1", "ten_a", "prov_1", 5_000_000, T0)  # 2 x 2.5 units per GPU-hour
    for minute in range(0, 91, 7):
        journal, _ = meter_run(journal, [usage], T0 + minute * 60, COMMISSION_BP)
    usage = dataclasses.replace(usage, ended_s=T0 + 5400)
    journal, _ = meter_run(journal, [usage], T0 + 5400, COMMISSION_BP)
    balances = check_journal(journal).balances
    assert posted_charges(journal)["rnt_1"].micros == 7_500_000
    assert balances[AccountId.tenant_grants("ten_a")] == 0
    assert balances[AccountId.tenant_cash("ten_a")] == -6_500_000
    assert (
        balances[AccountId.provider_payable("prov_1")] + balances[AccountId.platform_revenue()] == 7_500_000
    )
    assert meter_run(journal, [usage], T0 + 9999, COMMISSION_BP) == (journal, ())


def test_time_is_aware_utc() -> None:
    assert to_epoch_s(datetime(2026, 12, 1, tzinfo=UTC)) == T0
    assert to_epoch_s(datetime(2026, 12, 1, 8, tzinfo=timezone(timedelta(hours=8)))) == T0
    with pytest.raises(BillingError):
        to_epoch_s(datetime(2026, 12, 1))


# --- the property: any interleaving of starts, stops, preemptions, losses and meter runs -------------------

RENTALS = 5
TENANTS = ("ten_a", "ten_b")

actions = st.one_of(
    st.tuples(st.just("start"), st.integers(0, RENTALS - 1), st.integers(0, 0)),
    st.tuples(st.just("stop"), st.integers(0, RENTALS - 1), st.integers(0, 0)),
    st.tuples(st.just("preempt"), st.integers(0, RENTALS - 1), st.integers(0, 600)),  # notice until deadline
    st.tuples(st.just("lost"), st.integers(0, RENTALS - 1), st.integers(0, 600)),  # heartbeat this long ago
    st.tuples(st.just("meter"), st.integers(0, 0), st.integers(0, 0)),
    st.tuples(st.just("meter_twice"), st.integers(0, 0), st.integers(0, 0)),
    st.tuples(st.just("meter_stale"), st.integers(0, 0), st.integers(1, 3600)),  # a run with an old clock
)
steps = st.lists(st.tuples(st.integers(0, 400), actions), max_size=60)
rentals = st.lists(
    st.tuples(st.integers(0, 20_000_000), st.sampled_from(TENANTS), st.sampled_from((0, 60, 300))),
    min_size=RENTALS,
    max_size=RENTALS,
)


@settings(max_examples=300, deadline=None)
@given(
    rentals=rentals,
    steps=steps,
    grants=st.tuples(st.integers(0, 5_000_000), st.integers(0, 5_000_000)),
    commission_bp=st.integers(0, 10_000),
)
def test_any_sequence_charges_rate_times_billable_seconds_and_rerunning_posts_nothing(
    rentals: list[tuple[int, str, int]],
    steps: list[tuple[int, tuple[str, int, int]]],
    grants: tuple[int, int],
    commission_bp: int,
) -> None:
    journal = Journal()
    for tenant, amount in zip(TENANTS, grants, strict=True):
        if amount:
            journal, _ = journal.append(
                key=f"grant:{tenant}", kind=TxKind.GRANT, at_s=T0, postings=grant_postings(tenant, amount)
            )
    usages: dict[int, RentalUsage] = {}
    clock = T0
    last_meter = T0

    def run(now_s: int) -> None:
        nonlocal journal, last_meter
        journal, _ = meter_run(journal, list(usages.values()), now_s, commission_bp)
        last_meter = max(last_meter, now_s)

    for advance, (action, index, arg) in steps:
        clock += advance
        usage = usages.get(index)
        open_ = usage is not None and usage.ended_s is None
        if action == "start" and usage is None:
            rate, tenant, minimum = rentals[index]
            usages[index] = RentalUsage(
                f"rnt_{index}", tenant, f"prov_{index % 2}", rate, clock, None, minimum
            )
        elif action == "stop" and open_:
            usages[index] = dataclasses.replace(usage, ended_s=clock)
        elif action == "preempt" and open_:
            usages[index] = dataclasses.replace(usage, ended_s=clock + arg)
        elif action == "lost" and open_:
            # The last heartbeat: never before the start, nor before a meter run already billed to (the shell
            # marks a node down before the meter bills past its last heartbeat).
            usages[index] = dataclasses.replace(usage, ended_s=max(usage.started_s, last_meter, clock - arg))
        elif action == "meter":
            run(clock)
        elif action == "meter_twice":
            run(clock)
            before = journal
            run(clock)
            assert journal is before
        elif action == "meter_stale":
            run(max(T0, clock - arg))

    final = clock + 10_000
    run(final)
    posted = posted_charges(journal)
    for usage in usages.values():
        assert abs(posted.get(usage.rental_id, _ZERO).micros - _expected_charge(usage, final)) <= 1
    assert set(posted) <= {u.rental_id for u in usages.values()}

    before = journal
    run(final)
    run(final + 1 if all(u.ended_s is not None for u in usages.values()) else final)
    assert journal is before  # nothing more to post

    result = check_journal(journal)
    _assert_grants_spent_before_cash(journal)
    paid: dict[str, int] = {}
    provided: dict[str, int] = {}
    for tx in journal.transactions:
        if tx.kind is TxKind.CHARGE:  # per rental, the provider's share of its cumulative charge
            paid[tx.ref] = paid.get(tx.ref, 0) - tx.amount_to(
                frozenset({AccountKind.TENANT_CASH, AccountKind.TENANT_GRANTS})
            )
            provided[tx.ref] = provided.get(tx.ref, 0) + tx.amount_to(
                frozenset({AccountKind.PROVIDER_PAYABLE})
            )
    for rental_id, total in paid.items():
        assert provided[rental_id] == total * (10_000 - commission_bp) // 10_000
    charged = sum(p.micros for p in posted.values())
    assert (
        result.balances.get(AccountId.platform_revenue(), 0)
        + sum(result.balances.get(AccountId.provider_payable(f"prov_{i}"), 0) for i in range(2))
        == charged
    )


def _expected_charge(usage: RentalUsage, now_s: int) -> int:
    """The oracle, written apart from the meter: rate x max(minimum, end - start) / 3600, half up."""
    end_s = now_s if usage.ended_s is None else min(now_s, usage.ended_s)
    seconds = max(usage.minimum_s, end_s - usage.started_s)
    exact = Fraction(usage.rate_micros_per_hour * seconds, 3600)
    return int(exact + Fraction(1, 2))  # floor(x + 1/2) for x >= 0


class _Zero:
    micros = 0


_ZERO = _Zero()


def _assert_grants_spent_before_cash(journal: Journal) -> None:
    """After any charge that took cash, that tenant's grant balance is 0."""
    grant_balance: dict[str, int] = {}
    for tx in journal.transactions:
        for posting in tx.postings:
            if posting.account.kind is AccountKind.TENANT_GRANTS:
                grant_balance[posting.account.owner] = (
                    grant_balance.get(posting.account.owner, 0) + posting.amount_micros
                )
                assert grant_balance[posting.account.owner] >= 0
        for posting in tx.postings:
            if posting.account.kind is AccountKind.TENANT_CASH and posting.amount_micros < 0:
                assert grant_balance.get(posting.account.owner, 0) == 0


def test_the_providers_payout_does_not_depend_on_how_often_the_meter_runs() -> None:
    usage = RentalUsage("rnt_1", "ten_a", "prov_1", 2_990_000, T0, T0 + 3600)  # 1 H100 for an hour
    once, _ = meter_run(Journal(), [usage], T0 + 3600, COMMISSION_BP)
    often = Journal()
    for now_s in range(T0 + 60, T0 + 3601, 30):  # the leader's 30-s meter interval
        often, _ = meter_run(often, [usage], now_s, COMMISSION_BP)
    provider, platform = AccountId.provider_payable("prov_1"), AccountId.platform_revenue()
    assert once.balance(provider) + once.balance(platform) == often.balance(provider) + often.balance(
        platform
    )
    # 85% of 2,990,000 once; each 30-s delta floored on its own paid the provider less
    assert often.balance(provider) == once.balance(provider) == 2_990_000 * 8500 // 10_000


@given(charges=st.lists(st.integers(0, 10**9), min_size=1, max_size=20), commission_bp=st.integers(0, 10_000))
def test_the_provider_split_of_successive_charges_is_the_split_of_their_sum(
    charges: list[int], commission_bp: int
) -> None:
    provider_total, already = 0, 0
    for amount in charges:
        provider, platform = split_provider(amount, commission_bp, already)
        assert provider >= 0 and platform >= 0 and provider + platform == amount
        provider_total, already = provider_total + provider, already + amount
    assert provider_total == split_provider(already, commission_bp)[0]


@given(
    start_s=st.integers(0, 5 * 86_400),
    length_s=st.integers(1, 3 * 86_400),
    already_s=st.integers(0, 3 * 86_400),
    rate=st.integers(0, 10_000_000),
)
def test_a_charge_over_midnights_is_posted_per_day_each_second_once(
    start_s: int, length_s: int, already_s: int, rate: int
) -> None:
    """The pieces of a late charge sum to its delta, each dated in the UTC day whose seconds it charges (an
    earlier day's at its last second): the charge of a day's seconds falls in that day."""
    usage = RentalUsage("rnt_1", "ten_a", "prov_1", rate, start_s, minimum_s=0)
    now_s = start_s + length_s
    already = usage.charge_to_date(min(now_s, start_s + already_s))
    pieces = usage.charge_by_day(already, now_s)
    assert sum(micros for _, micros in pieces) == usage.charge_delta(already, now_s)
    assert all(micros > 0 for _, micros in pieces)
    level = already
    for at_s, micros in pieces:
        level += micros
        end_of_day_s = min(now_s, at_s - at_s % 86_400 + 86_400)
        assert level == max(already, usage.charge_to_date(end_of_day_s))


def test_an_hour_across_midnight_posted_at_one_is_two_charges() -> None:
    """2.99 per hour from 23:00 to 01:00, nothing posted: 2,990,000 dated 23:59:59, 2,990,000 at 01:00."""
    midnight = to_epoch_s(datetime(2027, 1, 1, tzinfo=UTC))
    usage = RentalUsage("rnt_1", "ten_a", "prov_1", 2_990_000, midnight - 3600, minimum_s=0)
    assert usage.charge_by_day(0, midnight + 3600) == (
        (midnight - 1, 2_990_000),
        (midnight + 3600, 2_990_000),
    )
    assert usage.charge_by_day(0, midnight) == ((midnight - 1, 2_990_000),)  # at 00:00:00: Dec 31's seconds
    assert usage.charge_delta_since(0, midnight, midnight + 1800) == 1_495_000
