"""SLA credits in the domain: availability from outages that hit rentals, the tiers at their exact boundaries,
the credit, the postings and the invoice line; properties: availability in [0, 1], a credit never above the
affected charges, lower availability never a smaller credit, no outage no credit."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from suanli.domain.billing.invoice import Month, build_invoice
from suanli.domain.billing.ledger import AccountId, Transaction, TxKind
from suanli.domain.billing.sla import (
    PPM,
    TIERS,
    Outage,
    SlaRental,
    format_ppm,
    rental_availability,
    sla_credit_line,
    sla_key,
    sla_report,
    tier_for,
)

NOV = Month.parse("2026-11")
H = 3600
S = NOV.start_s
DONE = NOV.end_s + 86_400  # now: the month is over


def rental(rental_id: str, start: int, end: int | None, *nodes: str) -> SlaRental:
    return SlaRental(rental_id, start, end, frozenset(nodes or ("n1",)))


def test_tiers_are_the_stated_thresholds_in_ppm_and_basis_points() -> None:
    assert [(t.below_ppm, t.credit_bp) for t in TIERS] == [
        (999_000, 1000),
        (990_000, 2500),
        (950_000, 10_000),
    ]
    assert format_ppm(999_000) == "99.9000" and format_ppm(PPM) == "100.0000"


def test_tier_boundaries_are_strictly_below() -> None:
    total = 1000 * H
    assert tier_for(total, total) is None  # 100%
    assert tier_for(999 * H, total) is None  # exactly 99.9%: not below
    assert tier_for(999 * H - 1, total).credit_bp == 1000  # type: ignore[union-attr]
    assert tier_for(990 * H, total).credit_bp == 1000  # type: ignore[union-attr]  # exactly 99%
    assert tier_for(990 * H - 1, total).credit_bp == 2500  # type: ignore[union-attr]
    assert tier_for(950 * H, total).credit_bp == 2500  # type: ignore[union-attr]  # exactly 95%
    assert tier_for(950 * H - 1, total).credit_bp == 10_000  # type: ignore[union-attr]
    assert tier_for(0, total).credit_bp == 10_000  # type: ignore[union-attr]
    assert tier_for(0, 0) is None


def test_a_rental_lost_to_a_one_hour_outage_after_99_hours_is_99_percent_available_and_gets_10_percent() -> (
    None
):
    # billing stops at the last heartbeat (99 h), where the outage starts; the node is back 1 h later
    lost = rental("r1", S, S + 99 * H)
    outage = Outage(7, "n1", S + 99 * H, S + 100 * H, "missed heartbeats")
    charges = {"r1": [(S + 50 * H, 600_000_000), (S + 99 * H + 30, 400_000_000), (NOV.end_s, 5)]}
    report = sla_report("ten_a", NOV, [lost], [outage], charges, DONE)
    assert (report.total_s, report.down_s) == (100 * H, H)
    assert report.availability_ppm == 990_000  # exactly 99%: below 99.9, not below 99
    assert report.credit_bp == 1000
    assert (
        report.affected_micros == 1_000_000_000
    )  # the charge posted on the 1st of December is not this month's
    assert report.credit_micros == 100_000_000
    assert report.outages == (outage,)
    assert report.key == sla_key("ten_a", NOV) == "sla:ten_a:2026-11"
    assert "#7 on n1" in report.memo and "99.0000%" in report.memo
    amounts = {p.account: p.amount_micros for p in report.postings()}
    assert amounts == {
        AccountId.platform_revenue(): -100_000_000,
        AccountId.tenant_cash("ten_a"): 100_000_000,
    }


def test_only_rentals_an_outage_hit_are_affected_and_other_nodes_do_not_count() -> None:
    hit = rental("r1", S, S + 10 * H, "n1")
    spared = rental("r2", S, S + 10 * H, "n2")
    outage = Outage(1, "n1", S + 10 * H, S + 11 * H)
    charges = {"r1": [(S + 10 * H, 1_000)], "r2": [(S + 10 * H, 9_000)]}
    report = sla_report("ten_a", NOV, [hit, spared], [outage], charges, DONE)
    assert (report.total_s, report.down_s) == (21 * H, H)
    assert report.affected_micros == 1_000
    assert report.availability_ppm == 952_380  # 20/21: below 99, not below 95
    assert report.credit_bp == 2500 and report.credit_micros == 250


def test_a_gang_is_down_when_any_node_is_down_and_overlaps_count_once() -> None:
    gang = rental("g", S, None, "n1", "n2")
    outages = [Outage(1, "n1", S + H, S + 3 * H), Outage(2, "n2", S + 2 * H, S + 4 * H)]
    found = rental_availability(gang, outages, S, S + 10 * H)
    assert (found.total_s, found.down_s, found.outage_ids) == (10 * H, 3 * H, (1, 2))


def test_outages_and_rentals_are_clipped_to_the_month_and_to_now() -> None:
    live = rental("r", S - 5 * H, None)
    open_outage = Outage(3, "n1", S - H, None)
    report = sla_report("ten_a", NOV, [live], [open_outage], {}, S + 2 * H)
    assert (report.total_s, report.down_s) == (2 * H, 2 * H)
    assert report.availability_ppm == 0 and report.credit_micros == 0  # no charges, nothing to credit


def test_an_outage_before_a_rental_started_or_after_it_ended_does_not_hit_it() -> None:
    later = rental("r", S + 10 * H, S + 20 * H)
    outages = [Outage(1, "n1", S, S + 10 * H), Outage(2, "n1", S + 21 * H, S + 22 * H)]
    assert sla_report("ten_a", NOV, [later], outages, {"r": [(S + 20 * H, 5)]}, DONE).down_s == 0


def test_no_rentals_means_full_availability() -> None:
    report = sla_report("ten_a", NOV, [], [Outage(1, "n1", S, S + H)], {}, DONE)
    assert report.availability_ppm == PPM and report.tier is None and report.credit_micros == 0


def test_a_posted_credit_is_a_negative_invoice_line_naming_the_evidence_and_counts_in_the_total() -> None:
    report = sla_report(
        "ten_a",
        NOV,
        [rental("r1", S, S + 99 * H)],
        [Outage(7, "n1", S + 99 * H, S + 100 * H)],
        {"r1": [(S + 99 * H, 1_000_000)]},
        DONE,
    )
    tx = Transaction.chained(
        "0" * 64,
        key=report.key,
        kind=TxKind.SLA_CREDIT,
        at_s=DONE,
        postings=report.postings(),
        ref="ten_a",
        memo=report.memo,
    )
    line = sla_credit_line(tx)
    assert (line.kind, line.ref, line.amount_micros) == ("sla_credit", "sla:ten_a:2026-11", -100_000)
    assert "#7 on n1" in line.description and "availability 99.0000%" in line.description
    invoice = build_invoice("ten_a", NOV, [], {}, DONE, sla_credits=[line])
    assert invoice.sla_credit_lines == (line,) and invoice.total_micros == -100_000


# --- properties -------------------------------------------------------------------------------------------

times = st.integers(min_value=S - 5 * H, max_value=NOV.end_s + 5 * H)
nodes = st.sampled_from(["n1", "n2", "n3"])


@st.composite
def rentals(draw: st.DrawFn) -> SlaRental:
    start = draw(times)
    end = draw(st.none() | st.integers(min_value=start, max_value=NOV.end_s + 5 * H))
    held = draw(st.frozensets(nodes, min_size=1, max_size=3))
    return SlaRental(f"r{draw(st.integers(0, 10**6))}", start, end, held)


@st.composite
def outages(draw: st.DrawFn) -> list[Outage]:
    found = []
    for index in range(draw(st.integers(0, 5))):
        start = draw(times)
        end = draw(st.none() | st.integers(min_value=start, max_value=NOV.end_s + 5 * H))
        found.append(Outage(index + 1, draw(nodes), start, end))
    return found


charge_lists = st.lists(st.tuples(times, st.integers(0, 10**12)), max_size=4)


@given(
    st.lists(rentals(), max_size=5, unique_by=lambda r: r.rental_id),
    outages(),
    st.dictionaries(st.sampled_from([f"r{i}" for i in range(5)]), charge_lists),
    st.integers(min_value=S, max_value=NOV.end_s + H),
)
def test_availability_is_in_0_1_and_the_credit_never_exceeds_the_affected_charges(
    found_rentals: list[SlaRental], found_outages: list[Outage], charges: dict, now_s: int
) -> None:
    report = sla_report("ten_a", NOV, found_rentals, found_outages, charges, now_s)
    assert 0 <= report.down_s <= report.total_s
    assert 0 <= report.availability_ppm <= PPM
    assert 0 <= report.credit_micros <= report.affected_micros
    if report.credit_micros:
        assert report.down_s > 0 and report.outages


@given(st.lists(rentals(), max_size=5), st.dictionaries(st.text(max_size=3), charge_lists))
def test_no_outage_means_no_credit(found_rentals: list[SlaRental], charges: dict) -> None:
    report = sla_report("ten_a", NOV, found_rentals, [], charges, DONE)
    assert report.down_s == 0 and report.availability_ppm == PPM
    assert report.tier is None and report.credit_micros == 0 and report.outages == ()


@given(st.integers(1, 10**9), st.data())
def test_lower_availability_never_gives_a_smaller_credit(total: int, data: st.DataObject) -> None:
    up_a = data.draw(st.integers(0, total))
    up_b = data.draw(st.integers(0, up_a))  # b is no more available than a
    affected = data.draw(st.integers(0, 10**12))
    tier_a, tier_b = tier_for(up_a, total), tier_for(up_b, total)
    bp_a = 0 if tier_a is None else tier_a.credit_bp
    bp_b = 0 if tier_b is None else tier_b.credit_bp
    assert bp_b >= bp_a
    assert affected * bp_b >= affected * bp_a
