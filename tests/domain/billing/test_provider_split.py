"""Provider shares: a charge's provider part split among the providers whose nodes the rental held, by the
GPU milli on each over time; exact in micros, never negative, the same per provider at any meter cadence."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from suanli.domain.billing.errors import BillingError
from suanli.domain.billing.ledger import AccountId, AccountKind, Journal, TxKind, check_journal
from suanli.domain.billing.meter import RentalUsage, charge_postings, meter_run, provider_parts
from suanli.domain.billing.money import charge_micros
from suanli.domain.billing.provider_split import Held, apportion, charge_parts, holders_over_time

T0 = 1_796_083_200
COMMISSION_BP = 1500
H100_HOUR = 2_990_000  # micros per GPU-hour


def payable(journal: Journal, provider: str) -> int:
    return journal.balance(AccountId.provider_payable(provider))


def test_holdings_become_gpu_milli_per_provider_from_each_change_on() -> None:
    held = [
        Held("prov-a", 2000, T0, T0 + 100),  # 2 GPUs on a node of prov-a, released at +100
        Held("prov-b", 1000, T0 + 50),  # grown onto prov-b at +50, still held
        Held("prov-b", 1000, T0 + 50),  # and a second node of prov-b
    ]
    assert holders_over_time(held) == (
        (T0, (("prov-a", 2000),)),
        (T0 + 50, (("prov-a", 2000), ("prov-b", 2000))),
        (T0 + 100, (("prov-b", 2000),)),
    )


def test_a_time_with_nothing_held_keeps_the_weights_before_it() -> None:
    held = [Held("prov-a", 1000, T0, T0 + 100), Held("prov-b", 1000, T0 + 400)]  # queued from +100 to +400
    assert holders_over_time(held) == ((T0, (("prov-a", 1000),)), (T0 + 400, (("prov-b", 1000),)))


def test_apportion_gives_each_at_least_its_floor_and_ties_to_the_first_by_name() -> None:
    assert apportion(10, (("a", 1), ("b", 1))) == {"a": 5, "b": 5}
    assert apportion(11, (("a", 1), ("b", 1))) == {"a": 6, "b": 5}
    assert apportion(100, (("a", 1), ("b", 2))) == {"a": 33, "b": 67}
    assert apportion(0, (("a", 1), ("b", 2))) == {"a": 0, "b": 0}
    with pytest.raises(BillingError):
        apportion(-1, (("a", 1),))


def test_apportion_has_no_alabama_paradox() -> None:
    # largest remainder gives c 2 of 10 and 1 of 11 (the Alabama paradox): a later charge would take it back
    weights = (("a", 6), ("b", 6), ("c", 2))
    assert apportion(10, weights)["c"] <= apportion(11, weights)["c"]


@given(
    weights=st.lists(st.integers(1, 10**6), min_size=1, max_size=6),
    amount=st.integers(0, 10**7),
    more=st.integers(0, 1000),
)
def test_apportion_is_exact_and_a_larger_amount_never_gives_anyone_less(
    weights: list[int], amount: int, more: int
) -> None:
    named = tuple((f"prov-{i}", w) for i, w in enumerate(weights))
    total = sum(weights)
    parts, larger = apportion(amount, named), apportion(amount + more, named)
    assert sum(parts.values()) == amount and sum(larger.values()) == amount + more
    for provider, weight in named:
        assert amount * weight // total <= parts[provider] <= parts[provider] + len(weights)
        assert larger[provider] >= parts[provider] >= 0


def test_a_gang_across_two_providers_pays_each_its_nodes_share() -> None:
    holders = holders_over_time([Held("prov-a", 1000, T0), Held("prov-b", 1000, T0)])
    usage = RentalUsage("rnt_g", "ten_a", "prov-a", 2 * H100_HOUR, T0, T0 + 3600, holders=holders)
    journal, _ = meter_run(Journal(), [usage], T0 + 3600, COMMISSION_BP)
    # 5,980,000 charged; 85% = 5,083,000 to the providers, half each (the old rule paid it all to prov-a)
    assert payable(journal, "prov-a") == payable(journal, "prov-b") == 2_541_500
    assert journal.balance(AccountId.platform_revenue()) == 5_980_000 - 5_083_000


def test_a_replaced_rental_pays_the_second_provider_for_its_run_there() -> None:
    # on prov-a for 20 min, lost, queued 10 min (not billed), re-placed on prov-b for 30 min
    holders = holders_over_time([Held("prov-a", 1000, T0, T0 + 1500), Held("prov-b", 1000, T0 + 1800)])
    usage = RentalUsage(
        "rnt_r", "ten_a", "prov-a", H100_HOUR, T0, T0 + 3600, gaps=((T0 + 1200, T0 + 1800),), holders=holders
    )
    journal, _ = meter_run(Journal(), [usage], T0 + 3600, COMMISSION_BP)
    on_a = charge_micros(H100_HOUR, 1200) * 8500 // 10_000  # its 20 minutes on prov-a: 847,166
    provider = charge_micros(H100_HOUR, 3000) * 8500 // 10_000  # 50 billed minutes: 2,117,916
    assert (payable(journal, "prov-a"), payable(journal, "prov-b")) == (on_a, provider - on_a)
    assert (on_a, provider - on_a) == (847_166, 1_270_750)


def test_a_grown_rental_pays_the_new_provider_from_its_growth_on() -> None:
    # one GPU on prov-a for the first half hour, then grown by one node of prov-b (the rate doubles there)
    holders = holders_over_time([Held("prov-a", 1000, T0), Held("prov-b", 1000, T0 + 1800)])
    usage = RentalUsage(
        "rnt_grow",
        "ten_a",
        "prov-a",
        H100_HOUR,
        T0,
        T0 + 3600,
        rate_changes=((T0, H100_HOUR), (T0 + 1800, 2 * H100_HOUR)),
        holders=holders,
    )
    journal, _ = meter_run(Journal(), [usage], T0 + 3600, COMMISSION_BP)
    first_half = H100_HOUR // 2 * 8500 // 10_000  # provider part earned before the growth: all prov-a
    total = (H100_HOUR // 2 + H100_HOUR) * 8500 // 10_000
    assert payable(journal, "prov-b") == (total - first_half) // 2
    assert payable(journal, "prov-a") == total - (total - first_half) // 2


def test_a_rental_on_one_provider_posts_what_it_did_without_holdings() -> None:
    holders = holders_over_time([Held("prov-a", 1000, T0, T0 + 600), Held("prov-a", 2000, T0 + 600)])
    plain = RentalUsage("rnt_1", "ten_a", "prov-a", 1_234_567, T0, T0 + 3000)
    held = RentalUsage("rnt_1", "ten_a", "prov-a", 1_234_567, T0, T0 + 3000, holders=holders)
    assert not held.shared
    once_plain, _ = meter_run(Journal(), [plain], T0 + 3000, COMMISSION_BP)
    once_held, _ = meter_run(Journal(), [held], T0 + 3000, COMMISSION_BP)
    assert once_plain.transactions == once_held.transactions


def test_parts_that_do_not_make_the_provider_share_are_refused() -> None:
    usage = RentalUsage("rnt_1", "ten_a", "prov-a", H100_HOUR, T0)
    with pytest.raises(BillingError):
        charge_postings(usage, 1000, 0, COMMISSION_BP, parts={"prov-a": 800, "prov-b": 100})


def test_credits_made_by_the_first_node_rule_are_not_taken_back() -> None:
    # before the split, a 2-provider gang's first half hour went all to prov-a
    holders = holders_over_time([Held("prov-a", 1000, T0), Held("prov-b", 1000, T0)])
    usage = RentalUsage("rnt_g", "ten_a", "prov-a", 2 * H100_HOUR, T0, holders=holders)
    already = usage.charge_to_date(T0 + 1800)
    credited = {"prov-a": already * 8500 // 10_000}
    delta = usage.charge_delta(already, T0 + 3600)
    parts = provider_parts(usage, delta, COMMISSION_BP, already, credited, T0 + 3600)
    provider = (already + delta) * 8500 // 10_000 - already * 8500 // 10_000
    assert parts == {"prov-b": provider}  # prov-b is owed more than this charge's part: all of it
    assert charge_parts({"a": 10, "b": 10}, {"a": 15}, 5) == {"b": 5}


@st.composite
def shared_rentals(draw: st.DrawFn) -> RentalUsage:
    """A rental on several providers' nodes over time, at changing rates, with a gap and maybe an end."""
    providers = ["prov-a", "prov-b", "prov-c", "prov-d"]
    spans = []
    for _ in range(draw(st.integers(2, 6))):
        from_s = T0 + draw(st.integers(0, 7200))
        length = draw(st.one_of(st.none(), st.integers(1, 7200)))
        milli = draw(st.sampled_from([125, 500, 1000, 2000, 8000]))
        spans.append(
            Held(draw(st.sampled_from(providers)), milli, from_s, None if length is None else from_s + length)
        )
    spans.append(Held("prov-a", 1000, T0, T0 + 30))  # held from the start
    changes = sorted(set(draw(st.lists(st.integers(0, 7200), max_size=4))))
    rates = tuple((T0 + at, draw(st.integers(0, 40_000_000))) for at in changes)
    gap = draw(st.one_of(st.none(), st.tuples(st.integers(1, 3000), st.integers(1, 3000))))
    gaps = () if gap is None else ((T0 + gap[0], T0 + gap[0] + gap[1]),)
    ended = draw(st.one_of(st.none(), st.integers(0, 9000)))
    return RentalUsage(
        "rnt_p",
        "ten_a",
        "prov-a",
        draw(st.integers(0, 40_000_000)),
        T0,
        None if ended is None else T0 + ended,
        minimum_s=draw(st.sampled_from([0, 60])),
        rate_changes=rates,
        gaps=gaps,
        holders=holders_over_time(spans),
    )


@settings(max_examples=300, deadline=None)
@given(
    usage=shared_rentals(),
    cadence=st.lists(st.integers(1, 1500), min_size=1, max_size=12),
    commission_bp=st.integers(0, 10_000),
)
def test_each_charge_splits_exactly_and_any_cadence_pays_each_provider_as_one_pass(
    usage: RentalUsage, cadence: list[int], commission_bp: int
) -> None:
    end_s = T0 + 9500
    once, _ = meter_run(Journal(), [usage], end_s, commission_bp)
    often, now_s = Journal(), T0
    for step in cadence:
        now_s = min(end_s, now_s + step)
        often, added = meter_run(often, [usage], now_s, commission_bp)
        for tx in added:
            charged = tx.amount_to(frozenset({AccountKind.PROVIDER_PAYABLE, AccountKind.PLATFORM_REVENUE}))
            provider = tx.amount_to(frozenset({AccountKind.PROVIDER_PAYABLE}))
            already = sum(
                t.amount_to(frozenset({AccountKind.PLATFORM_REVENUE, AccountKind.PROVIDER_PAYABLE}))
                for t in often.transactions
                if t.kind is TxKind.CHARGE and t.at_s < tx.at_s
            )
            assert (
                provider
                == (already + charged) * (10_000 - commission_bp) // 10_000
                - already * (10_000 - commission_bp) // 10_000
            )
            assert all(
                p.amount_micros > 0 for p in tx.postings if p.account.kind is AccountKind.PROVIDER_PAYABLE
            )
    often, _ = meter_run(often, [usage], end_s, commission_bp)
    check_journal(often)
    for provider in ("prov-a", "prov-b", "prov-c", "prov-d"):
        assert payable(often, provider) == payable(once, provider)
    assert often.balance(AccountId.platform_revenue()) == once.balance(AccountId.platform_revenue())
