"""Measured GPU energy: a slice's share of its GPU's power, the interval a heartbeat measures, and when an
invoice may use the measured average instead of the TDP estimate."""

from __future__ import annotations

import pytest

from suanli.domain.billing.energy import (
    MAX_GAP_BEATS,
    MIN_COVERAGE,
    average_power_per_gpu_w,
    blend_models,
    blend_regions,
    held_s,
    measured_interval_s,
    slice_power_w,
)
from suanli.domain.billing.invoice import RentalBilling, energy_kwh, gpu_fraction

READINGS = {0: 300.0, 1: 200.0, 2: None, 3: 0.0}


@pytest.mark.parametrize(
    ("slices", "expected"),
    [
        ([(0, 1000)], 300.0),  # a whole GPU
        ([(0, 1000), (1, 1000)], 500.0),  # two whole GPUs
        ([(1, 500)], 100.0),  # a share of half the GPU
        ([(0, 428)], 300.0 * 428 / 1000),  # a MIG instance: its milli of the GPU
        ([(3, 1000)], 0.0),  # an idle GPU reads 0 W: measured, not missing
        ([(0, 1000), (2, 1000)], None),  # one GPU without a reading: not measured at all
        ([(7, 1000)], None),  # a GPU the agent did not report
        ([], None),
    ],
)
def test_slice_power_is_the_slices_share_of_each_gpus_reading(slices, expected) -> None:
    assert slice_power_w(slices, READINGS) == expected


def test_a_negative_reading_is_no_reading() -> None:
    assert slice_power_w([(0, 1000)], {0: -1.0}) is None


def test_the_interval_is_the_gap_since_the_previous_beat_up_to_three_intervals() -> None:
    assert MAX_GAP_BEATS == 3
    assert measured_interval_s(5.0, 5.0) == 5.0
    assert measured_interval_s(14.5, 5.0) == 14.5
    assert measured_interval_s(15.0, 5.0) == 15.0
    assert measured_interval_s(15.01, 5.0) == 0.0  # the node was away: nothing measured
    assert measured_interval_s(0.0, 5.0) == 0.0
    assert measured_interval_s(-2.0, 5.0) == 0.0  # a clock that went backwards
    assert measured_interval_s(None, 5.0) == 0.0  # no previous beat


def test_the_average_needs_half_the_billable_node_seconds() -> None:
    assert MIN_COVERAGE == 0.5
    # 250 W over 1200 s measured of 1800 s billable, one whole GPU
    assert average_power_per_gpu_w(300_000.0, 1200.0, 1200.0, 1800.0) == 250.0
    assert average_power_per_gpu_w(300_000.0, 900.0, 900.0, 1800.0) == pytest.approx(333.333, abs=1e-3)
    assert average_power_per_gpu_w(300_000.0, 899.0, 899.0, 1800.0) is None
    assert average_power_per_gpu_w(0.0, 0.0, 0.0, 1800.0) is None
    assert average_power_per_gpu_w(1.0, 10.0, 10.0, 0.0) is None


def test_a_gang_and_a_share_average_per_gpu() -> None:
    # a gang of 2 nodes x 2 GPUs, each node measured 1000 s at 800 W (400 W per GPU)
    assert average_power_per_gpu_w(2 * 800.0 * 1000, 2 * 1000.0, 2 * 2 * 1000.0, 2 * 1000.0) == 400.0
    # half of the node-seconds measured (one node only) is still enough
    assert average_power_per_gpu_w(800.0 * 1000, 1000.0, 2 * 1000.0, 2 * 1000.0) == 400.0
    # a 500-milli share drawing 150 W (its half of a 300 W GPU): 300 W per GPU
    assert average_power_per_gpu_w(150.0 * 100, 100.0, 0.5 * 100, 100.0) == 300.0


def test_measured_average_times_the_gpu_fraction_gives_the_rentals_power_on_the_invoice() -> None:
    per_node = gpu_fraction(1, mig_profile="3g.40gb")
    power = average_power_per_gpu_w(120.0 * 3600, 3600.0, 3600.0 * per_node, 3600.0)
    assert power is not None
    rental = RentalBilling("r", 0, 3600, 1, per_node, tdp_watts=400, pue=1.5, measured_power_w=power)
    # 120 W for an hour x PUE 1.5 = 0.18 kWh, whatever the fraction
    assert energy_kwh(rental, rental.gpu_seconds_in(0, 3600, 3600)) == pytest.approx(0.18)


def test_a_resized_rentals_measured_power_per_gpu_stays_exact() -> None:
    """1 node x 2 GPUs for an hour at 300 W per GPU, then 2 nodes x 4 GPUs for an hour at 200 W per GPU:
    the average per GPU is the energy over the GPU-seconds measured, (2 x 300 + 8 x 200) / 10 W."""
    energy_j = (2 * 300.0 + 8 * 200.0) * 3600
    measured_s, measured_gpu_s = 3600.0 + 2 * 3600.0, (2 + 8) * 3600.0
    power = average_power_per_gpu_w(energy_j, measured_s, measured_gpu_s, 3 * 3600.0)
    assert power == pytest.approx(220.0)


def test_blended_regions_charge_each_region_for_its_own_gpu_seconds() -> None:
    """One PUE and grid for the whole rental that give exactly the sum of each region's energy and CO2."""
    held = [("cn-north", 1.3, 581.0, 100.0), ("eu-west", 1.1, 250.0, 600.0), ("eu-west", 1.1, 250.0, 300.0)]
    names, pue, grid = blend_regions(held)  # type: ignore[misc]
    assert names == ("eu-west", "cn-north")  # most GPU-seconds first, one entry per region
    power_w = 490.0
    kwh = power_w * 1000 / 3600 * pue / 1000
    expected_kwh = power_w * (100 * 1.3 + 900 * 1.1) / 3600 / 1000
    assert kwh == pytest.approx(expected_kwh)
    assert kwh * grid / 1000 == pytest.approx(power_w * (100 * 1.3 * 581 + 900 * 1.1 * 250) / 3600 / 1e6)
    assert blend_regions([("cn-north", 1.3, 581.0, 0.0)]) is None
    assert blend_regions([("a", 1.2, 100.0, 5.0)]) == (("a",), pytest.approx(1.2), pytest.approx(100.0))


def test_blended_models_and_regions_charge_each_model_its_tdp_where_it_ran() -> None:
    """A rental re-placed from an H100-SXM in cn-north (100 s) onto an H100-PCIe in eu-west (900 s): one TDP
    (the mean by GPU-seconds), and regions weighed by GPU-seconds x TDP, give exactly each part's energy and
    CO2."""
    names, tdp_w = blend_models([("H100-SXM-80GB", 700.0, 100.0), ("H100-PCIe", 350.0, 900.0)])  # type: ignore[misc]
    assert names == ("H100-PCIe", "H100-SXM-80GB") and tdp_w == pytest.approx((700 * 100 + 350 * 900) / 1000)
    _, pue, grid = blend_regions(
        [("cn-north", 1.3, 581.0, 700.0 * 100), ("eu-west", 1.1, 250.0, 350.0 * 900)]
    )  # type: ignore[misc]
    kwh = tdp_w * 1000 / 3600 * pue / 1000
    assert kwh == pytest.approx((700 * 100 * 1.3 + 350 * 900 * 1.1) / 3600 / 1000)
    assert kwh * grid / 1000 == pytest.approx((700 * 100 * 1.3 * 581 + 350 * 900 * 1.1 * 250) / 3600 / 1e6)
    assert blend_models([("T4", 70.0, 0.0)]) is None


@pytest.mark.parametrize(
    ("booked_s", "released_s", "gaps", "expected_s"),
    [
        (0, None, (), 1000),  # held from the rental's start to the end
        (-50, None, (), 1000),  # booked before the rental's start: counted from the start
        (200, 700, (), 500),  # booked and released between
        (0, 2000, (), 1000),  # released after the end: counted to the end
        (0, None, ((300, 500),), 800),  # the rental waited in the queue 200 s of it
        (0, 400, ((300, 500),), 300),  # released while it waited: the part before the gap
        (600, None, ((300, 500), (800, 900)), 300),  # only the gap inside its own span counts
        (1200, None, (), 0),  # booked after the end: nothing
    ],
    ids=["whole", "before-start", "between", "past-end", "gap", "released-in-gap", "later-gap", "after"],
)
def test_an_allocations_billed_seconds_are_its_held_span_less_the_queue_gaps(
    booked_s: int, released_s: int | None, gaps: tuple[tuple[int, int], ...], expected_s: int
) -> None:
    """A rental billed from 0 to 1000: each allocation counts from its booking to its release, within that,
    less the time the rental waited in the queue."""
    assert held_s(0, 1000, booked_s, released_s, gaps) == expected_s
