"""Invoices in the domain: month bounds, energy and CO2 from known numbers, exact money totals, and a
rental spanning two months split by month."""

from __future__ import annotations

import pytest

from suanli.domain.billing.invoice import (
    UTILIZATION_ESTIMATE,
    InvoiceError,
    Month,
    RentalBilling,
    build_invoice,
    gpu_fraction,
    invoice_csv,
)

NOV = Month.parse("2026-11")
DEC = Month.parse("2026-12")


def h100(rental_id: str, started_s: int, ended_s: int | None, **extra) -> RentalBilling:
    values = {
        "rate_micros_per_hour": 2_990_000,
        "gpu_fraction": 1.0,
        "gpu_model": "H100-SXM-80GB",
        "region": "eu",
        "tdp_watts": 700,
        "pue": 1.2,
        "grid_gco2_per_kwh": 300.0,
    }
    values.update(extra)
    return RentalBilling(rental_id, started_s, ended_s, **values)  # type: ignore[arg-type]


def test_month_bounds_and_bad_months() -> None:
    assert NOV.end_s - NOV.start_s == 30 * 86_400
    assert DEC.end_s == Month.parse("2027-01").start_s
    assert str(NOV) == "2026-11"
    for bad in ("2026-13", "2026-1", "nov", "2026-00", ""):
        with pytest.raises(InvoiceError, match="yyyy-mm"):
            Month.parse(bad)


def test_energy_and_co2_from_tdp_and_from_measured_power() -> None:
    start = NOV.start_s + 3600
    estimated = h100("r1", start, start + 2 * 3600, gpu_fraction=2.0)
    measured = h100("r2", start, start + 3600, measured_power_w=500.0)
    invoice = build_invoice("ten_a", NOV, [estimated, measured], {}, now_s=DEC.end_s)
    one, two = invoice.lines
    # 700 W x 0.7 x 2 GPUs x 2 h x PUE 1.2 = 2352 Wh = 2.352 kWh; x 300 g/kWh = 0.7056 kg
    assert UTILIZATION_ESTIMATE == 0.7
    assert one.energy_kwh == 2.352 and one.co2_kg == 0.706
    assert one.gpu_seconds == 2 * 2 * 3600
    # measured 500 W x 1 GPU x 1 h x 1.2 = 0.6 kWh; 0.18 kg
    assert two.energy_kwh == 0.6 and two.co2_kg == 0.18
    assert invoice.total_energy_kwh == 2.952 and invoice.total_co2_kg == 0.886
    assert (one.energy_source, two.energy_source) == ("tdp_estimate", "measured")
    rows = invoice_csv(invoice).splitlines()
    assert rows[0].endswith(",energy_kwh,co2_kg,energy_source")
    assert rows[1].endswith(",2.352,0.706,tdp_estimate") and rows[2].endswith(",0.6,0.18,measured")


def test_unknown_region_leaves_energy_out() -> None:
    line = build_invoice("t", NOV, [h100("r", NOV.start_s, NOV.start_s + 60, pue=None)], {}, DEC.end_s).lines[
        0
    ]
    assert line.energy_kwh is None and line.co2_kg is None
    assert line.energy_source is None


def test_total_is_the_exact_sum_of_the_ledger_charges_inside_the_month() -> None:
    rentals = [h100(f"r{i}", NOV.start_s + i, NOV.start_s + i + 61) for i in range(5)]
    charges = {f"r{i}": [(NOV.start_s + i + 30, 49_833 + i), (NOV.start_s + i + 70, 1_001)] for i in range(5)}
    charges["r0"].append((DEC.start_s + 5, 777))  # posted in December: not on November's invoice
    invoice = build_invoice("t", NOV, rentals, charges, now_s=DEC.end_s)
    assert [line.amount_micros for line in invoice.lines] == [50_834 + i for i in range(5)]
    assert invoice.total_micros == sum(line.amount_micros for line in invoice.all_lines) == 254_180
    assert invoice.plan_lines == () and invoice.sla_credit_lines == ()
    assert type(invoice.total_micros) is int


def test_a_rental_spanning_two_months_is_split_by_month() -> None:
    start = NOV.end_s - 3600  # one hour in November, two in December
    rental = h100("r", start, start + 3 * 3600)
    charges = {"r": [(NOV.end_s - 1, 2_990_000), (DEC.start_s + 7200, 5_980_000)]}
    nov = build_invoice("t", NOV, [rental], charges, now_s=DEC.end_s)
    dec = build_invoice("t", DEC, [rental], charges, now_s=DEC.end_s)
    assert nov.lines[0].gpu_seconds == 3600 and dec.lines[0].gpu_seconds == 7200
    assert nov.total_micros == 2_990_000 and dec.total_micros == 5_980_000
    assert nov.lines[0].energy_kwh * 2 == pytest.approx(dec.lines[0].energy_kwh)
    assert build_invoice("t", Month.parse("2026-10"), [rental], charges, DEC.end_s).lines == ()


def test_a_live_rental_counts_up_to_now() -> None:
    rental = h100("r", NOV.start_s, None)
    assert build_invoice("t", NOV, [rental], {}, now_s=NOV.start_s + 90).lines[0].gpu_seconds == 90


def test_gpu_fraction_and_csv() -> None:
    assert gpu_fraction(2, nodes=2) == 4.0
    assert gpu_fraction(1, mig_profile="3g.40gb") == pytest.approx(3 / 7)
    assert gpu_fraction(1, share_milli=250) == 0.25
    invoice = build_invoice(
        "t", NOV, [h100("r", NOV.start_s, NOV.start_s + 60)], {"r": [(NOV.start_s, 5)]}, 0
    )
    rows = invoice_csv(invoice).splitlines()
    assert rows[0].startswith("section,ref,description,gpu_seconds")
    assert rows[1].startswith("rental,r,") and rows[-1].startswith("total,t 2026-11")
    assert rows[-1].split(",")[6] == "5"


def test_a_resized_rental_counts_each_second_at_the_size_it_had() -> None:
    """2 nodes x 4 GPUs for an hour, then 2 x 8 for an hour, then 3 x 8 to the end of the month: its
    November line counts 8, 16 and 24 GPUs in turn, energy from the same GPU-hours; December only 24."""
    from suanli.domain.billing.invoice import Size, size_seconds

    start = NOV.end_s - 3 * 3600
    sizes = (Size(start, 2, 4.0), Size(start + 3600, 2, 8.0), Size(start + 7200, 3, 8.0))
    rental = h100("r1", start, DEC.start_s + 3600, gpu_fraction=24.0, sizes=sizes)
    (november,) = build_invoice("ten_a", NOV, [rental], {}, now_s=DEC.end_s).lines
    assert november.gpu_seconds == (8 + 16 + 24) * 3600
    # 700 W x 0.7 x 48 GPU-h x PUE 1.2 / 1000
    assert november.energy_kwh == pytest.approx(700 * 0.7 * 48 * 1.2 / 1000)
    assert november.description == "H100-SXM-80GB x 24 in eu"  # its size now
    (december,) = build_invoice("ten_a", DEC, [rental], {}, now_s=DEC.end_s).lines
    assert december.gpu_seconds == 24 * 3600
    # node-seconds and GPU-seconds of any window; before the first size its first size holds
    assert size_seconds(sizes, start - 100, start + 3700) == (2 * 3700 + 2 * 100, 8 * 3700 + 16 * 100)
    assert size_seconds(sizes, start + 7200, start + 7200) == (0.0, 0.0)


def test_a_requeued_rental_holds_nothing_while_it_waits_in_the_queue() -> None:
    """2 x 4 GPUs, resized to 2 x 8 at 100 s; in the queue from 200 s to 1,000 s: the wait counts no GPU, and
    the size in force before it (2 x 8) holds again after it; a resize inside the wait is taken over."""
    from suanli.domain.billing.invoice import Size, size_seconds, without_gaps

    sizes = (Size(0, 2, 4.0), Size(100, 2, 8.0))
    held = without_gaps(sizes, [(200, 1000)])
    assert held == (Size(0, 2, 4.0), Size(100, 2, 8.0), Size(200, 0, 0.0), Size(1000, 2, 8.0))
    assert size_seconds(held, 0, 1100) == (2 * 300, 100 * 8 + 200 * 16)
    inside = without_gaps((Size(0, 1, 2.0), Size(500, 1, 4.0)), [(200, 1000)])
    assert inside == (Size(0, 1, 2.0), Size(200, 0, 0.0), Size(1000, 1, 4.0))
